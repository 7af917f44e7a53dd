//! Every row of `testdata/conformance/expectations.tsv` against the CPU decoder.

mod common;

use common::{bench_dir, conformance_rows, data_dir, load_png_rgb, psnr};
use stoker_decode::{CpuDecoder, DecodeError, Limits};

/// PSNR at or above which a decode matches the Pillow reference (README).
const MIN_PSNR: f64 = 30.0;

#[test]
fn every_conformance_row_behaves_as_expected() {
    let dec = CpuDecoder::new(Limits::default());
    let dir = data_dir().join("conformance");
    let mut failures = Vec::new();
    let mut checked_refs = 0;
    for row in conformance_rows() {
        let data = std::fs::read(dir.join(&row.file)).expect("read file");
        let result = dec.decode_to_vec_routed(&data);
        let line = match &result {
            Ok((info, route, _)) => {
                format!("{:<70} ok {route} {}x{}", row.file, info.width, info.height)
            }
            Err(e) => format!("{:<70} err {e}", row.file),
        };
        println!("{line}");
        match row.expect.as_str() {
            "decode" | "metadata" => match &result {
                Ok((info, _, rgb)) => {
                    if let (Some(w), Some(h)) = (row.width, row.height) {
                        if (info.width, info.height) != (w, h) {
                            failures.push(format!(
                                "{}: size {}x{} want {w}x{h}",
                                row.file, info.width, info.height
                            ));
                        }
                    }
                    if let Some(r) = &row.reference {
                        let (w, h, want) = load_png_rgb(&dir.join(r));
                        checked_refs += 1;
                        if (w, h) != (info.width, info.height) {
                            failures.push(format!("{}: ref size {w}x{h}", row.file));
                        } else {
                            let p = psnr(rgb, &want);
                            println!("    psnr {p:.1} dB");
                            if p < MIN_PSNR {
                                failures.push(format!("{}: PSNR {p:.1} dB < {MIN_PSNR}", row.file));
                            }
                            let edges = edges_and_rest(rgb, &want, w as usize);
                            let (column, bottom, rest) = edges;
                            if column.max(bottom) > rest + 1 {
                                failures.push(format!(
                                    "{}: last column up to {column}, last row {bottom} off the reference, the rest {rest}",
                                    row.file
                                ));
                            }
                        }
                    }
                }
                Err(e) => failures.push(format!("{}: expected a decode, got {e}", row.file)),
            },
            "unsupported-or-decode" => match &result {
                Err(DecodeError::Unsupported { .. }) => {}
                Ok((info, _, rgb)) => {
                    if let Some(r) = &row.reference {
                        let (_, _, want) = load_png_rgb(&dir.join(r));
                        if want.len() == rgb.len() && psnr(rgb, &want) < MIN_PSNR {
                            failures.push(format!(
                                "{}: decoded wrongly ({}x{})",
                                row.file, info.width, info.height
                            ));
                        }
                    }
                }
                Err(e) => failures.push(format!(
                    "{}: expected Unsupported or decode, got {e}",
                    row.file
                )),
            },
            "corrupt" => {
                if let Ok((info, route, _)) = &result {
                    failures.push(format!(
                        "{}: corrupt file decoded ({}x{} via {route})",
                        row.file, info.width, info.height
                    ));
                }
            }
            "either" => {}
            other => failures.push(format!("{}: unknown expectation {other}", row.file)),
        }
    }
    assert!(
        checked_refs >= 50,
        "only {checked_refs} references compared"
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The largest difference from `want` in the last pixel column of an image `width`
/// pixels wide, in its last row, and in the rest. A whole-image PSNR hides a wrong edge:
/// zune-jpeg interpolated the last column and row towards the chroma block's padding (up
/// to 22 levels off Pillow on a 150-pixel-wide photo, 39 on noise), where libjpeg repeats
/// the last sample and row.
fn edges_and_rest(got: &[u8], want: &[u8], width: usize) -> (u8, u8, u8) {
    let row = 3 * width;
    let rows = got.len() / row;
    let (mut column, mut bottom, mut rest) = (0, 0, 0);
    for (y, (g, w)) in got
        .chunks_exact(row)
        .zip(want.chunks_exact(row))
        .enumerate()
    {
        for (i, (a, b)) in g.iter().zip(w).enumerate() {
            let d = a.abs_diff(*b);
            if i >= row - 3 {
                column = column.max(d);
            }
            if y + 1 == rows {
                bottom = bottom.max(d);
            }
            if i < row - 3 && y + 1 < rows {
                rest = rest.max(d);
            }
        }
    }
    (column, bottom, rest)
}

/// Regression: zune-jpeg 0.5 decodes non-interleaved and partially interleaved
/// baseline 4:2:0 files to wrong pixels (PSNR ~4 dB) without an error. `probe`
/// must flag them and the CPU decoder must send them to jpeg-decoder.
#[test]
fn non_interleaved_baseline_is_routed_away_from_zune() {
    let dec = CpuDecoder::new(Limits::default());
    let dir = data_dir().join("conformance");
    for name in [
        "jxl__jxl__flower__flower_small.q85_420_non_interleaved.jpg",
        "jxl__jxl__flower__flower_small.q85_420_partially_interleaved.jpg",
        "jxl__jxl__flower__flower_small.q85_444_non_interleaved.jpg",
    ] {
        let data = std::fs::read(dir.join("core").join(name)).unwrap();
        let info = stoker_decode::probe(&data, &Limits::default()).unwrap();
        assert!(info.multi_scan_sequential, "{name}: not flagged");
        assert!(!info.zune_decodable() && !info.nvjpeg_decodable() && !info.hardware_decodable());
        let (_, route, rgb) = dec.decode_to_vec_routed(&data).unwrap();
        assert_eq!(route, stoker_decode::Route::CpuFallback, "{name}");
        // Files with equal reference decodes share one PNG: the table names it.
        let reference = conformance_rows()
            .into_iter()
            .find(|r| r.file == format!("core/{name}"))
            .and_then(|r| r.reference)
            .unwrap_or_else(|| panic!("{name}: no reference in expectations.tsv"));
        let (_, _, want) = load_png_rgb(&dir.join(reference));
        assert!(psnr(&rgb, &want) >= MIN_PSNR, "{name}");
    }
}

/// Regression: the 64250x64250 header in 1.4 kB made zune-jpeg (limits raised)
/// run for over 10 s; the limit must refuse it from the header.
#[test]
fn hostile_declared_size_is_refused_from_the_header() {
    let data =
        std::fs::read(data_dir().join("conformance/corrupt/gdkpixbuf__issue205.jpg")).unwrap();
    let start = std::time::Instant::now();
    let err = CpuDecoder::new(Limits::default())
        .decode_to_vec(&data)
        .unwrap_err();
    assert!(matches!(err, DecodeError::TooLarge { .. }), "{err}");
    // Not a timing assertion on speed, a hang guard: a header check is microseconds.
    assert!(start.elapsed() < std::time::Duration::from_secs(5));
}

/// Route and properties of the ordinary shapes: baseline interleaved files go
/// to zune-jpeg and are what nvJPEG's hardware engines take; progressive ones
/// are nvJPEG-CUDA material; CMYK and arithmetic never go to nvJPEG.
#[test]
fn probe_classifies_the_common_shapes() {
    let dir = data_dir().join("conformance/core");
    let p = |n: &str| {
        stoker_decode::probe(&std::fs::read(dir.join(n)).unwrap(), &Limits::default()).unwrap()
    };
    let base = p("go__video-001.q50.420.jpeg");
    assert!(base.hardware_decodable() && base.zune_decodable() && !base.progressive);
    let prog = p("go__video-001.q50.420.progressive.jpeg");
    assert!(prog.progressive && prog.nvjpeg_decodable() && !prog.hardware_decodable());
    assert_eq!(prog.scans, 10);
    let s411 = p("go__video-001.q50.411.jpeg");
    assert_eq!(s411.subsampling, stoker_decode::Subsampling::S411);
    assert!(s411.nvjpeg_decodable() && !s411.hardware_decodable());
    let cmyk = p("go__video-001.cmyk.jpeg");
    assert_eq!(cmyk.color_space, stoker_decode::ColorSpace::Cmyk);
    assert!(!cmyk.nvjpeg_decodable());
    let ycck = p("pillow__Tests__images__pil_sample_cmyk.jpg");
    assert_eq!(ycck.color_space, stoker_decode::ColorSpace::Ycck);
    let rgb = p("ljtregen__testout_rgb_islow.jpg");
    assert_eq!(rgb.color_space, stoker_decode::ColorSpace::Rgb);
    let ari = p("ljt__testimgari.jpg");
    assert!(ari.arithmetic && ari.supported().is_err());
    for o in 2..=8u16 {
        assert_eq!(
            p(&format!(
                "pillow__Tests__images__hopper_orientation_{o}.jpg"
            ))
            .exif_orientation,
            Some(o)
        );
    }
    assert_eq!(base.exif_orientation, None);
}

/// The three files nvJPEG's hardware engines decoded differently from the CPU
/// on an H200 (nvJPEG 13.0.1), and the routing that keeps them off the engines,
/// while ordinary 4:2:0 / 4:2:2 / 4:4:4 baseline files and 4:4:4 files with a
/// restart interval and APP14 stay hardware material.
#[test]
fn files_the_hardware_engines_mishandled_are_routed_elsewhere() {
    let dir = data_dir().join("conformance/core");
    let p = |n: &str| {
        stoker_decode::probe(&std::fs::read(dir.join(n)).unwrap(), &Limits::default()).unwrap()
    };
    // Gray, H=V=2: not for nvJPEG at all (CPU).
    let gray22 = p("go__video-005.gray.q50.2x2.jpeg");
    assert_eq!((gray22.components, gray22.sampling[0]), (1, (2, 2)));
    assert!(!gray22.nvjpeg_decodable() && !gray22.hardware_decodable());
    assert!(gray22.zune_decodable());
    // Gray 1x1 stays on the engines.
    assert!(p("go__video-005.gray.q50.jpeg").hardware_decodable());
    // 4:2:0 with DRI 1 and APP14: not for nvJPEG (CPU).
    let app13 = p("pillow__Tests__images__app13.jpg");
    assert!(app13.chroma_subsampled() && app13.restart_interval == 1);
    assert!(!app13.nvjpeg_decodable() && !app13.hardware_decodable());
    assert!(app13.zune_decodable());
    // 4:4:4 with DRI and APP14 matched on the engines: still hardware.
    let s444 = p("pillow__Tests__images__pil_sample_rgb.jpg");
    assert!(!s444.chroma_subsampled() && s444.restart_interval != 0);
    assert!(s444.hardware_decodable());
    let flower = p("pillow__Tests__images__flower2.jpg");
    assert!(flower.restart_interval != 0 && flower.adobe_transform == Some(1));
    assert!(flower.hardware_decodable());
    // The ICC-profile file is ordinary 4:2:0: it stays on the engines; its
    // difference was chroma upsampling (see tests/gpu.rs, luma check).
    assert!(p("gdkpixbuf__icc-profile.jpeg").hardware_decodable());
    for n in [
        "go__video-001.q50.420.jpeg",
        "go__video-001.q50.422.jpeg",
        "go__video-001.q50.444.jpeg",
    ] {
        let i = p(n);
        assert!(i.hardware_decodable(), "{n} must stay hardware material");
    }
    // Every bench file stays hardware material.
    let bench = bench_dir();
    let mut n = 0;
    for e in std::fs::read_dir(&bench).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "jpg" || x == "jpeg") {
            let info =
                stoker_decode::probe(&std::fs::read(&path).unwrap(), &Limits::default()).unwrap();
            assert!(info.hardware_decodable(), "{}", path.display());
            n += 1;
        }
    }
    assert!(n >= 100, "bench set has {n} JPEGs");
}

/// Regression: a CMYK file without a usable Adobe APP14 segment went to
/// jpeg-decoder and came out with inverted colors (4.4 dB against Pillow),
/// which reads every CMYK JPEG as Adobe's inverted CMYK, as zune-jpeg does.
/// `go__video-001.cmyk.jpeg` with its APP14 cut to 7 bytes (too short for
/// the transform byte) or removed must decode as the original does.
#[test]
fn cmyk_without_a_usable_app14_is_read_as_inverted_cmyk() {
    let dir = data_dir().join("conformance");
    let good = std::fs::read(dir.join("core/go__video-001.cmyk.jpeg")).unwrap();
    // The APP14 "Adobe" segment: FF EE, length 14, at byte 20.
    assert_eq!(good[20..22], [0xFF, 0xEE]);
    assert_eq!(good[22..24], [0, 14]);
    let mut short = good.clone();
    short.drain(29..36);
    short[22..24].copy_from_slice(&[0, 7]);
    let mut none = good.clone();
    none.drain(20..36);
    let (_, _, want) = load_png_rgb(&dir.join("ref/go__video-001.cmyk.jpeg.png"));
    let dec = CpuDecoder::new(Limits::default());
    for (what, data, want_route) in [
        (
            "APP14 cut to 7 bytes",
            &short,
            stoker_decode::Route::CpuFallback,
        ),
        ("no APP14", &none, stoker_decode::Route::CpuZune),
    ] {
        let info = stoker_decode::probe(data, &Limits::default()).unwrap();
        assert_eq!(info.color_space, stoker_decode::ColorSpace::Cmyk, "{what}");
        let (_, route, rgb) = dec.decode_to_vec_routed(data).unwrap();
        assert_eq!(route, want_route, "{what}");
        let p = psnr(&rgb, &want);
        assert!(p >= MIN_PSNR, "{what}: PSNR {p:.1} dB");
    }
}

/// `data` with every APP14 "Adobe" transform byte set to `transform` (those of
/// thumbnails inside other segments too: they do not matter).
fn with_adobe_transform(data: &[u8], transform: u8) -> Vec<u8> {
    let mut out = data.to_vec();
    let found: Vec<usize> = data
        .windows(9)
        .enumerate()
        .filter(|(_, w)| w[..4] == [0xFF, 0xEE, 0, 14] && &w[4..9] == b"Adobe")
        .map(|(at, _)| at)
        .collect();
    assert!(!found.is_empty(), "an APP14 segment");
    for at in found {
        out[at + 4 + 11] = transform;
    }
    out
}

/// zune-jpeg and jpeg-decoder read the APP14 transform alone, and refuse values
/// other than 0, 1 and 2. libjpeg (Pillow, torchvision) lets a JFIF marker mean
/// YCbCr whatever APP14 says, takes an unknown transform as YCbCr with 3
/// components and as YCCK with 4: stoker reads them the same way, so such files
/// neither come out in the wrong colours (8 and 17 dB before) nor are refused.
#[test]
fn the_adobe_transform_is_read_as_libjpeg_reads_it() {
    let dir = data_dir().join("conformance/core");
    let dec = CpuDecoder::new(Limits::default());
    for (name, transforms) in [
        // JFIF + APP14 transform 1, YCbCr: 0 and 3 still mean YCbCr.
        ("pillow__Tests__images__pil_sample_rgb.jpg", [0u8, 3, 255]),
        // APP14 transform 2, YCCK: 1 and 3 are taken as YCCK.
        ("pillow__Tests__images__pil_sample_cmyk.jpg", [1, 3, 255]),
    ] {
        let good = std::fs::read(dir.join(name)).unwrap();
        let (_, want) = dec.decode_to_vec(&good).unwrap();
        let color = stoker_decode::probe(&good, &Limits::default())
            .unwrap()
            .color_space;
        for t in transforms {
            let odd = with_adobe_transform(&good, t);
            let info = stoker_decode::probe(&odd, &Limits::default()).unwrap();
            assert_eq!(info.adobe_transform, Some(t), "{name} {t}");
            assert_eq!(info.color_space, color, "{name} {t}");
            assert!(!info.nvjpeg_decodable(), "{name} {t}: not for the GPU");
            let (_, got) = dec
                .decode_to_vec(&odd)
                .unwrap_or_else(|e| panic!("{name} {t}: {e}"));
            let p = psnr(&got, &want);
            assert!(p >= 60.0, "{name} with transform {t}: {p:.1} dB");
        }
    }
    // Without JFIF, transform 0 is RGB as written (go's RGB file, unchanged).
    let rgb = std::fs::read(dir.join("go__video-001.rgb.jpeg")).unwrap();
    let info = stoker_decode::probe(&rgb, &Limits::default()).unwrap();
    assert_eq!(info.color_space, stoker_decode::ColorSpace::Rgb);
}

/// `data` with `segment` inserted at byte `at`.
fn inserted(data: &[u8], at: usize, segment: &[u8]) -> Vec<u8> {
    [&data[..at], segment, &data[at..]].concat()
}

/// An APP14 "Adobe" segment with transform `t`.
fn app14(t: u8) -> Vec<u8> {
    let mut s = vec![0xFF, 0xEE, 0, 14];
    s.extend_from_slice(b"Adobe");
    s.extend_from_slice(&[0, 100, 0, 0, 0, 0, t]);
    s
}

/// libjpeg's finer points, which the review of the rule above found: it settles the
/// colour space at the first scan header (a JFIF APP0 between scans changes nothing),
/// takes an APP0 as JFIF only when it holds the 14-byte header, and reads the last
/// of several APP14 segments, which the decoders must then see in every one.
#[test]
fn the_adobe_rule_follows_libjpeg_in_its_details() {
    let dir = data_dir().join("conformance/core");
    let dec = CpuDecoder::new(Limits::default());
    let probe = |d: &[u8]| stoker_decode::probe(d, &Limits::default()).unwrap();
    let raw = std::fs::read(dir.join("jxl__jxl__flower__flower_small.q85_444_non_interleaved.jpg"))
        .unwrap();
    // Without its JFIF APP0 (bytes 2..20), which would decide the colour space.
    assert_eq!(raw[2..6], [0xFF, 0xE0, 0, 16]);
    let base = [&raw[..2], &raw[20..]].concat();
    assert!(probe(&base).multi_scan_sequential);
    // APP14 transform 0 right after SOI: RGB, as written.
    let rgb = inserted(&base, 2, &app14(0));
    assert_eq!(probe(&rgb).color_space, stoker_decode::ColorSpace::Rgb);
    let (_, want) = dec.decode_to_vec(&rgb).unwrap();
    // A JFIF APP0 after the first scan: still RGB, the same pixels.
    let second_scan = rgb
        .windows(2)
        .enumerate()
        .filter(|(_, w)| w == &[0xFF, 0xDA])
        .nth(1)
        .unwrap()
        .0;
    let mut jfif = vec![0xFF, 0xE0, 0, 16];
    jfif.extend_from_slice(b"JFIF\0\x01\x01\0\0\x01\0\x01\0\0");
    let late = inserted(&rgb, second_scan, &jfif);
    assert_eq!(probe(&late).color_space, stoker_decode::ColorSpace::Rgb);
    assert!(dec.decode_to_vec(&late).unwrap().1 == want);
    // A 12-byte "JFIF" APP0 is no JFIF header: still RGB.
    let short = inserted(
        &rgb,
        2,
        &[&[0xFF, 0xE0, 0, 14][..], b"JFIF\0\x01\x01\0\0\x01\0\x01"].concat(),
    );
    assert_eq!(probe(&short).color_space, stoker_decode::ColorSpace::Rgb);
    // Two APP14 segments, 5 then 1: the last one (YCbCr), in both decoders' eyes.
    let ycc = inserted(&base, 2, &app14(1));
    let two = inserted(&ycc, 2, &app14(5));
    assert_eq!(probe(&two).color_space, stoker_decode::ColorSpace::YCbCr);
    let (_, ycc_rgb) = dec.decode_to_vec(&ycc).unwrap();
    assert!(dec.decode_to_vec(&two).unwrap().1 == ycc_rgb);
}
