//! Malformed input gives typed errors, never a panic.

mod common;
use common::*;
use sluice_imgproc::*;

fn opts() -> DecodeOptions {
    DecodeOptions::default()
}

#[test]
fn empty_and_unknown() {
    assert_eq!(decode(&[], &opts()), Err(ImageError::Empty));
    assert!(matches!(
        decode(b"%PDF-1.4....", &opts()),
        Err(ImageError::Unsupported(_))
    ));
    // A GIF header cut short is a GIF error now that GIF decodes.
    assert!(matches!(
        decode(b"GIF89a....", &opts()),
        Err(ImageError::Truncated(m) | ImageError::Corrupt(m)) if m.starts_with("GIF")
    ));
    assert!(matches!(jpeg_dimensions(&[]), Err(ImageError::Empty)));
}

#[test]
fn truncated_files() {
    for name in [
        "photo_420.jpg",
        "photo_prog.jpg",
        "rgb8.png",
        "rgb16.png",
        "coffee_320x240.jpg",
    ] {
        let full = read(name);
        for cut in [
            1,
            3,
            10,
            40,
            full.len() / 3,
            full.len() / 2,
            full.len() - 2,
            full.len() - 1,
        ] {
            let r = decode(&full[..cut], &opts());
            // Like Pillow: a PNG whose pixel data is complete decodes even if
            // the IEND chunk (last 12 bytes) is cut; a JPEG without EOI does not.
            if name.ends_with(".png") && cut >= full.len() - 12 {
                assert!(r.is_ok(), "{name} cut at {cut}: {r:?}");
                continue;
            }
            assert!(
                matches!(
                    r,
                    Err(ImageError::Truncated(_))
                        | Err(ImageError::Corrupt(_))
                        | Err(ImageError::Unsupported(_))
                ),
                "{name} cut at {cut}: {r:?}"
            );
            let _ = decode_scaled(&full[..cut], &opts(), 8, 8);
            let _ = jpeg_dimensions(&full[..cut]);
        }
    }
    // A JPEG cut inside the entropy-coded data is reported as truncated.
    let j = read("coffee_320x240.jpg");
    assert!(matches!(
        decode(&j[..j.len() / 2], &opts()),
        Err(ImageError::Truncated(_))
    ));
}

#[test]
fn random_bytes_and_bit_flips() {
    // xorshift, deterministic
    let mut s = 0x9E3779B97F4A7C15u64;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    for len in [1usize, 2, 7, 64, 1000, 5000] {
        let mut v: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        let _ = decode(&v, &opts());
        // Valid magic + garbage
        for magic in [&b"\xff\xd8\xff"[..], &b"\x89PNG\r\n\x1a\n"[..]] {
            v.splice(0..0, magic.iter().cloned());
            assert!(decode(&v, &opts()).is_err());
        }
    }
    // Bit flips in real files must not panic (errors or garbage pixels are fine).
    for name in [
        "photo_420.jpg",
        "photo_prog.jpg",
        "photo_cmyk.jpg",
        "rgb8_interlaced.png",
        "pal4.png",
    ] {
        let orig = read(name);
        for _ in 0..300 {
            let mut f = orig.clone();
            for _ in 0..3 {
                let i = (next() as usize) % f.len();
                f[i] ^= 1 << (next() % 8);
            }
            if let Ok(img) = decode(&f, &opts()) {
                assert_eq!(img.data.len(), img.height * img.width * 3);
            }
            let _ = decode_scaled(&f, &opts(), 4, 4);
        }
    }
}

#[test]
fn huge_declared_dimensions_rejected_before_allocation() {
    // JPEG: patch the SOF of a real file to 65535 x 65535.
    let mut j = read("photo_420.jpg");
    let sof = j.windows(2).position(|w| w == [0xFF, 0xC0]).unwrap();
    j[sof + 5..sof + 9].copy_from_slice(&[0xFF, 0xFF, 0xFF, 0xFF]);
    match decode(&j, &opts()) {
        Err(ImageError::TooLarge {
            height,
            width,
            max_pixels,
        }) => {
            assert_eq!(
                (height, width, max_pixels),
                (65535, 65535, DEFAULT_MAX_PIXELS)
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        decode_scaled(&j, &opts(), 8, 8),
        Err(ImageError::TooLarge { .. })
    ));
    // The caller's limit applies too.
    let small = DecodeOptions {
        max_pixels: 100,
        ..opts()
    };
    assert!(matches!(
        decode(&read("photo_420.jpg"), &small),
        Err(ImageError::TooLarge { .. })
    ));
    // PNG: IHDR claims 100000 x 100000 (CRC fixed up).
    let mut p = read("rgb8.png");
    p[16..20].copy_from_slice(&100_000u32.to_be_bytes());
    p[20..24].copy_from_slice(&100_000u32.to_be_bytes());
    let crc = crc32(&p[12..29]);
    p[29..33].copy_from_slice(&crc.to_be_bytes());
    assert!(matches!(
        decode(&p, &opts()),
        Err(ImageError::TooLarge { .. })
    ));
}

#[test]
fn bad_op_arguments_are_errors() {
    let img = Image::zeros(4, 4, 3).unwrap();
    assert!(resized_crop(&img, 2, 2, 3, 3, 2, 2, Filter::Bilinear).is_err());
    assert!(gaussian_blur(&img, (4, 3), (1.0, 1.0)).is_err());
    assert!(gaussian_blur(&img, (3, 3), (0.0, 1.0)).is_err());
    let broken = Image {
        height: 4,
        width: 4,
        channels: 3,
        data: vec![0; 10],
    };
    assert!(resize(&broken, 2, 2, Filter::Bilinear, true).is_err());
    let mut b2 = broken.clone();
    assert!(hflip(&mut b2).is_err());
    assert!(adjust_brightness(&mut b2, 1.2).is_err());
    assert!(normalize(&broken, &[0.0; 3], &[1.0; 3]).is_err());
    assert!(Image::new(1, 1, 4, vec![0; 4]).is_err());
}

fn crc32(data: &[u8]) -> u32 {
    let mut c = 0xFFFF_FFFFu32;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
    }
    !c
}

#[test]
fn fuzz_regression_tall_progressive_garbage() {
    // Found by cargo-fuzz (slow unit, 11 s under ASan): a 2.4 KB progressive
    // JPEG declaring 48x60964 pixels. Pillow rejects it ("broken data
    // stream"); zune-jpeg decodes it leniently into mostly-flat pixels in
    // ~25 ms (release). Either way: bounded work and no panic.
    let f = read("fuzz_slow_progressive.jpg");
    assert_eq!(jpeg_dimensions(&f).unwrap(), (60964, 48));
    if let Ok(img) = decode(&f, &opts()) {
        assert_eq!((img.height, img.width), (60964, 48));
    }
    let small = DecodeOptions {
        max_pixels: 1_000_000,
        ..opts()
    };
    assert!(matches!(
        decode(&f, &small),
        Err(ImageError::TooLarge { .. })
    ));
    let _ = decode_scaled(&f, &opts(), 8, 8);
}

#[test]
fn fuzz_regression_zune_idct_panic_is_a_corrupt_image() {
    // Found by cargo-fuzz (2026-11-23): a 1.1 KB baseline JPEG on which zune-jpeg 0.5.15
    // panics (`unwrap` on `None` in its AVX2 IDCT). The decoder's catch_unwind backstop turns
    // that into a corrupt-image error; every entry point returns instead of crashing.
    let f = read("fuzz_zune_idct_panic.jpg");
    let err = decode(&f, &opts()).unwrap_err();
    assert!(matches!(err, ImageError::Corrupt(_)), "{err:?}");
    let _ = decode_scaled(&f, &opts(), 8, 8);
    if let Ok((h, w)) = jpeg_dimensions(&f) {
        let _ = sluice_imgproc::decode_resized_crop(
            &f,
            &opts(),
            0,
            0,
            h,
            w,
            8,
            8,
            sluice_imgproc::Filter::Bilinear,
        );
    }
}
