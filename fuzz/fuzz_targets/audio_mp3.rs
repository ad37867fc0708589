//! `audio.decode` (mono and all channels) on a sample whose path ends in `.mp3`. The hint
//! only orders the probe: other containers (WAV, FLAC, Ogg) are reached too.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(
    init: sluice_fuzz::tolerate_backstopped_upstream_panics(),
    |data: &[u8]| {
        sluice_fuzz::media::decode_audio(data, "clips/x.mp3");
    }
);
