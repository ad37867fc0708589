//! Times each kernel on the committed MP3 fixture (2.46 s of speech, 22.05 kHz mono) through
//! the ASR reference chain: decode → 16 kHz → STFT(400, 160) → time_stretch(0.8) →
//! time_mask(80) → freq_mask(27) → 80-bin mel → log.
//!
//! Run (release; numbers in the README come from this exact command):
//!
//! ```text
//! cargo run --release -p sluice-audioproc --example bench_kernels
//! ```
//!
//! Each kernel runs in 7 batches of ~0.2 s; the median batch's time per call is reported, as
//! **thread CPU time** (`CLOCK_THREAD_CPUTIME_ID`) so that other processes competing for the
//! cores do not inflate it, next to wall time. Single-threaded.

use std::hint::black_box;
use std::time::{Duration, Instant};

use sluice_audioproc::*;

/// CPU time consumed by the calling thread, in seconds.
#[cfg(unix)]
fn thread_cpu_secs() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the OS knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

#[cfg(not(unix))]
fn thread_cpu_secs() -> f64 {
    // No portable thread clock: fall back to wall time.
    use std::sync::OnceLock;
    static T0: OnceLock<Instant> = OnceLock::new();
    T0.get_or_init(Instant::now).elapsed().as_secs_f64()
}

/// Median (CPU µs, wall µs) per call of `f` over 7 batches of a calibrated number of calls.
fn time_us(mut f: impl FnMut()) -> (f64, f64) {
    // Calibrate: how many calls fill ~0.2 s.
    let start = Instant::now();
    let mut calls = 0u32;
    while start.elapsed() < Duration::from_millis(50) {
        f();
        calls += 1;
    }
    let per_batch = (calls * 4).max(1);
    let (mut cpu, mut wall): (Vec<f64>, Vec<f64>) = (0..7)
        .map(|_| {
            let (t, c) = (Instant::now(), thread_cpu_secs());
            for _ in 0..per_batch {
                f();
            }
            let n = f64::from(per_batch);
            (
                (thread_cpu_secs() - c) * 1e6 / n,
                t.elapsed().as_secs_f64() * 1e6 / n,
            )
        })
        .unzip();
    cpu.sort_by(f64::total_cmp);
    wall.sort_by(f64::total_cmp);
    (cpu[cpu.len() / 2], wall[wall.len() / 2])
}

fn main() -> Result<(), AudioError> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/speech.mp3");
    let bytes = std::fs::read(path).expect("read the MP3 fixture");
    let audio = decode(&bytes, Some("mp3"))?.into_mono();
    println!(
        "clip: {} bytes MP3, {} Hz, {} samples ({:.2} s)",
        bytes.len(),
        audio.sample_rate,
        audio.samples.len(),
        audio.duration_secs()
    );

    println!("{:<44} {:>12} {:>12}", "kernel", "cpu µs/op", "wall µs/op");
    let report = |name: &'static str, (cpu, wall): (f64, f64)| {
        println!("{name:<44} {cpu:>12.1} {wall:>12.1}");
        cpu
    };

    // One-off construction costs (paid once per worker, not per clip).
    report(
        "setup: Resampler::new 22050->16000 (Fft)",
        time_us(|| {
            black_box(Resampler::with_quality(22_050, 16_000, ResampleQuality::Fft).unwrap());
        }),
    );
    report(
        "setup: Resampler::new 22050->16000 (Sinc)",
        time_us(|| {
            black_box(Resampler::with_quality(22_050, 16_000, ResampleQuality::Sinc).unwrap());
        }),
    );
    report(
        "setup: Stft::new(400, 160)",
        time_us(|| {
            black_box(Stft::new(400, 160, None, Window::Hann, true).unwrap());
        }),
    );
    report(
        "setup: MelFilterbank::new(16k, 400, 80)",
        time_us(|| {
            black_box(MelFilterbank::new(MelConfig::new(16_000, 400, 80)).unwrap());
        }),
    );

    let mut fft_rs = Resampler::with_quality(22_050, 16_000, ResampleQuality::Fft)?;
    let mut sinc_rs = Resampler::with_quality(22_050, 16_000, ResampleQuality::Sinc)?;
    let mut stft = Stft::new(400, 160, None, Window::Hann, true)?;
    let fb = MelFilterbank::new(MelConfig::new(16_000, 400, 80))?;

    report(
        "decode (mp3 -> f32)",
        time_us(|| {
            black_box(decode(black_box(&bytes), Some("mp3")).unwrap());
        }),
    );
    let mut y = Vec::new();
    report(
        "resample 22050->16000 (Fft, default)",
        time_us(|| {
            fft_rs
                .process_into(black_box(&audio.samples), &mut y)
                .unwrap()
        }),
    );
    report(
        "resample 22050->16000 (Sinc)",
        time_us(|| {
            black_box(sinc_rs.process(black_box(&audio.samples)).unwrap());
        }),
    );

    let mut complex = Spectrogram::default();
    report(
        "stft complex (400/160)",
        time_us(|| stft.complex_into(black_box(&y), &mut complex).unwrap()),
    );
    let mut power = Spectrogram::default();
    report(
        "stft power p=2 (400/160)",
        time_us(|| stft.power_into(black_box(&y), 2.0, &mut power).unwrap()),
    );
    let mut mag = Spectrogram::default();
    report(
        "stft magnitude p=1 (400/160)",
        time_us(|| stft.power_into(black_box(&y), 1.0, &mut mag).unwrap()),
    );
    report(
        "time_stretch complex (phase vocoder, 0.8)",
        time_us(|| {
            black_box(time_stretch(black_box(&complex), 0.8, 160).unwrap());
        }),
    );
    report(
        "time_stretch_magnitude (0.8)",
        time_us(|| {
            black_box(time_stretch_magnitude(black_box(&mag), 0.8).unwrap());
        }),
    );
    report(
        "time_stretch_power (0.8, p=2)",
        time_us(|| {
            black_box(time_stretch_power(black_box(&power), 0.8, 2.0).unwrap());
        }),
    );
    let stretched = time_stretch(&complex, 0.8, 160)?;
    report(
        "complex_to_power p=2",
        time_us(|| {
            black_box(complex_to_power(black_box(&stretched), 2.0).unwrap());
        }),
    );
    let stretched_power = complex_to_power(&stretched, 2.0)?;
    let mut masked = stretched_power.clone();
    let mut k = 0u64;
    let mut u = move || {
        // Cheap deterministic uniforms (Weyl sequence) so the RNG is not what is timed.
        k = k.wrapping_add(0x9E37_79B9_7F4A_7C15);
        (k >> 11) as f64 / (1u64 << 53) as f64
    };
    report(
        "time_mask(80)",
        time_us(|| {
            black_box(time_mask(&mut masked, 80, 0.0, &mut u));
        }),
    );
    report(
        "freq_mask(27)",
        time_us(|| {
            black_box(freq_mask(&mut masked, 27, 0.0, &mut u));
        }),
    );
    let mut mel = Spectrogram::default();
    report(
        "mel 80 (sparse filterbank)",
        time_us(|| {
            fb.apply_into(black_box(&stretched_power), &mut mel)
                .unwrap()
        }),
    );
    let mel_ref = mel.clone();
    let mut tmp = mel_ref.clone();
    report(
        "log(x + 1e-6)",
        time_us(|| {
            tmp.as_mut_slice().copy_from_slice(mel_ref.as_slice());
            log(tmp.as_mut_slice(), 1e-6).unwrap();
        }),
    );
    report(
        "power_to_db (top_db 80)",
        time_us(|| {
            tmp.as_mut_slice().copy_from_slice(mel_ref.as_slice());
            power_to_db(tmp.as_mut_slice(), DbRef::Value(1.0), 1e-10, Some(80.0)).unwrap();
        }),
    );

    // The whole chain per clip, as the engine would run it on one core.
    let mut chain = |exact_vocoder: bool| {
        let a = decode(&bytes, Some("mp3")).unwrap().into_mono();
        fft_rs.process_into(&a.samples, &mut y).unwrap();
        let mut p = if exact_vocoder {
            stft.complex_into(&y, &mut complex).unwrap();
            complex_to_power(&time_stretch(&complex, 0.8, 160).unwrap(), 2.0).unwrap()
        } else {
            stft.power_into(&y, 2.0, &mut power).unwrap();
            time_stretch_power(&power, 0.8, 2.0).unwrap()
        };
        time_mask(&mut p, 80, 0.0, &mut u);
        freq_mask(&mut p, 27, 0.0, &mut u);
        fb.apply_into(&p, &mut mel).unwrap();
        log(mel.as_mut_slice(), 1e-6).unwrap();
        black_box(&mel);
    };
    let fast = report("ASR chain, power stretch", time_us(|| chain(false)));
    let exact = report("ASR chain, complex phase vocoder", time_us(|| chain(true)));
    println!(
        "=> {:.0} clips/s/core (power stretch), {:.0} clips/s/core (complex vocoder), by CPU time",
        1e6 / fast,
        1e6 / exact
    );
    Ok(())
}
