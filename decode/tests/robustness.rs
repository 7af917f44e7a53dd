//! Truncated and mutated inputs: every one gives a result (never a panic that
//! escapes, never a hang), errors are clean, and successes have the right size.
//! This is the fuzz property of `fuzz/fuzz_targets/decode.rs`, checked
//! deterministically in CI.

mod common;

use common::{check_decodes, data_dir};
use stoker_decode::{probe, CpuDecoder, DecodeError, Limits};

fn core_file(name: &str) -> Vec<u8> {
    std::fs::read(data_dir().join("conformance/core").join(name)).expect("read")
}

#[test]
fn truncated_files_give_errors_or_partial_decodes_never_panics() {
    let dec = CpuDecoder::new(Limits::default());
    let names = [
        "go__video-001.q50.420.jpeg",
        "go__video-001.q50.420.progressive.jpeg",
        "go__video-001.cmyk.jpeg",
        "go__video-005.gray.q50.progressive.jpeg",
        "ljtregen__testout_3x2_ifast_prog.jpg",
        "pillow__Tests__images__pil_sample_cmyk.jpg",
        "ljt__testimgari.jpg",
        "ljdjs__jpeg_lossless_sel1.jpg",
    ];
    let mut header_cuts_failed = 0;
    for name in names {
        let data = core_file(name);
        let header_end = data
            .windows(2)
            .position(|w| w == [0xFF, 0xDA])
            .expect("has SOS");
        for cut in (0..data.len())
            .step_by((data.len() / 97).max(1))
            .chain(0..header_end)
        {
            let ok = check_decodes(&dec, &data[..cut], &format!("{name} cut at {cut}")).is_ok();
            if cut < header_end {
                assert!(!ok, "{name} cut at {cut} (inside the headers) decoded");
                header_cuts_failed += 1;
            }
        }
    }
    assert!(header_cuts_failed > 500);
}

#[test]
fn header_truncation_errors_are_typed() {
    let data = core_file("go__video-001.q50.420.jpeg");
    assert!(matches!(
        probe(&[], &Limits::default()),
        Err(DecodeError::Empty)
    ));
    assert!(matches!(
        probe(&data[..1], &Limits::default()),
        Err(DecodeError::NotJpeg { .. })
    ));
    assert!(matches!(
        probe(&data[..2], &Limits::default()),
        Err(DecodeError::Truncated { .. })
    ));
    assert!(matches!(
        probe(&data[..40], &Limits::default()),
        Err(DecodeError::Truncated { .. })
    ));
}

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut d = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        match rng.below(6) {
            0 => {
                let i = rng.below(d.len());
                d[i] ^= 1 << rng.below(8);
            }
            1 => {
                let i = rng.below(d.len());
                d[i] = rng.next() as u8;
            }
            2 => {
                // Header-heavy: hit the first 700 bytes (markers, tables, sizes).
                let i = rng.below(d.len().min(700));
                d[i] = [0x00, 0xFF, 0x01, 0x7F, 0x80, 0xFE][rng.below(6)];
            }
            3 => {
                let cut = rng.below(d.len());
                d.truncate(cut.max(1));
            }
            4 => {
                let i = rng.below(d.len());
                let n = rng.below(64).min(d.len() - i);
                d.drain(i..i + n);
            }
            _ => {
                let i = rng.below(d.len());
                let b = [0xFF, rng.next() as u8];
                d.splice(i..i, b);
            }
        }
        if d.is_empty() {
            d.push(0xFF);
        }
    }
    d
}

#[test]
fn mutated_inputs_never_panic() {
    // A smaller limit keeps mutated size fields cheap.
    let dec = CpuDecoder::new(Limits {
        max_pixels: 4_000_000,
        ..Limits::default()
    });
    let seeds: Vec<Vec<u8>> = [
        "go__video-001.q50.420.jpeg",
        "go__video-001.q50.422.progressive.jpeg",
        "go__video-001.q50.411.jpeg",
        "go__video-001.cmyk.jpeg",
        "go__video-005.gray.q50.2x2.progressive.jpeg",
        "pillow__Tests__images__hopper_orientation_6.jpg",
        "ljtregen__testout_3x2_ifast_prog.jpg",
        "pillow__Tests__images__pil_sample_cmyk.jpg",
    ]
    .iter()
    .map(|n| core_file(n))
    .collect();
    let mut rng = Rng(0x5EED_1234_ABCD_0001);
    let (mut ok, mut err) = (0, 0);
    for i in 0..3000 {
        let seed = &seeds[i % seeds.len()];
        let input = mutate(&mut rng, seed);
        if check_decodes(&dec, &input, &format!("mutant {i}")).is_ok() {
            ok += 1;
        } else {
            err += 1;
        }
    }
    println!("mutants: {ok} decoded, {err} errors");
    // Both outcomes must occur, or the mutator is not exercising anything.
    assert!(ok > 100 && err > 100, "ok={ok} err={err}");
}

#[test]
fn pixel_limit_is_enforced_from_the_header() {
    let data =
        std::fs::read(data_dir().join("conformance/corrupt/gdkpixbuf__issue205.jpg")).unwrap();
    let dec = CpuDecoder::new(Limits::default());
    match dec.decode_to_vec(&data) {
        Err(DecodeError::TooLarge {
            width: 64250,
            height: 64250,
            ..
        }) => {}
        other => panic!("want TooLarge, got {:?}", other.map(|(i, _)| i)),
    }
    // A limit below an ordinary file's size refuses it too.
    let small = core_file("go__video-001.q50.420.jpeg");
    let tight = CpuDecoder::new(Limits {
        max_pixels: 150 * 103 - 1,
        ..Limits::default()
    });
    assert!(matches!(
        tight.decode_to_vec(&small),
        Err(DecodeError::TooLarge { .. })
    ));
    let exact = CpuDecoder::new(Limits {
        max_pixels: 150 * 103,
        ..Limits::default()
    });
    assert!(exact.decode_to_vec(&small).is_ok());
}

/// `go__video-005.gray.q50.progressive.jpeg` declared 10000x10000, its scans
/// after the first repeated 20 times (101 scans), with a comment and a stray
/// `FF 00` after the first scan: the review's scan bomb (`scan_bomb.py`).
fn stray_ff00_scan_bomb() -> Vec<u8> {
    let mut d = core_file("go__video-005.gray.q50.progressive.jpeg");
    let mut i = 2;
    let sos = loop {
        let (marker, len) = (
            d[i + 1],
            usize::from(u16::from_be_bytes([d[i + 2], d[i + 3]])),
        );
        if marker == 0xC2 {
            d[i + 5..i + 9].copy_from_slice(&[0x27, 0x10, 0x27, 0x10]);
        }
        if marker == 0xDA {
            break i + 2 + len;
        }
        i += 2 + len;
    };
    let first_scan_end = stoker_decode::entropy_coded_end(&d, sos);
    assert_eq!(d[d.len() - 2..], [0xFF, 0xD9]);
    let mut out = d[..first_scan_end].to_vec();
    out.extend_from_slice(&[0xFF, 0xFE, 0, 4, b'h', b'i', 0xFF, 0x00]);
    for _ in 0..20 {
        out.extend_from_slice(&d[first_scan_end..d.len() - 2]);
    }
    out.extend_from_slice(&[0xFF, 0xD9]);
    out
}

/// Regression: a stray `FF 00` between segments stopped the header walk after
/// the first scan, so the work limit saw 1 scan of a 100 MP image and the
/// decoders then ran all 101 (23 s and 600 MB on the fallback decoder). It must
/// be refused from the headers.
#[test]
fn stray_ff00_scan_bomb_is_refused_before_decoding() {
    let bomb = stray_ff00_scan_bomb();
    let start = std::time::Instant::now();
    let err = CpuDecoder::new(Limits::default())
        .decode_to_vec(&bomb)
        .map(|(info, _)| info)
        .unwrap_err();
    assert!(
        matches!(err, DecodeError::TooMuchWork { scans: 101, .. }),
        "{err}"
    );
    assert!(start.elapsed() < std::time::Duration::from_secs(1));
}

/// A stray `FF 00` between segments is junk that libjpeg (and Pillow) skip:
/// right after SOI it decodes to the same pixels as without it.
#[test]
fn stray_ff00_after_soi_decodes() {
    let good = core_file("pillow__Tests__images__hopper.jpg");
    let mut junk = good.clone();
    junk.splice(2..2, [0xFF, 0x00]);
    let dec = CpuDecoder::new(Limits::default());
    let (_, want) = dec.decode_to_vec(&good).unwrap();
    let (_, got) = dec.decode_to_vec(&junk).unwrap();
    assert!(got == want);
}

/// `data` without its first segment of marker `marker` (one before the first scan).
fn without_first_segment(data: &[u8], marker: u8) -> Vec<u8> {
    let mut i = 2;
    while data[i + 1] != marker {
        assert_ne!(data[i + 1], 0xDA, "no such segment before the first scan");
        i += 2 + usize::from(u16::from_be_bytes([data[i + 2], data[i + 3]]));
    }
    let len = usize::from(u16::from_be_bytes([data[i + 2], data[i + 3]]));
    let mut out = data[..i].to_vec();
    out.extend_from_slice(&data[i + 2 + len..]);
    out
}

/// Regression: zune-jpeg's error recovery turned hard decode errors into
/// images: a progressive file whose first Huffman table is missing decoded
/// "OK" as uniform gray 128 (Pillow raises). The decoder must see that zune
/// recovered, retry with jpeg-decoder and, as that refuses it too, say corrupt.
#[test]
fn missing_huffman_table_is_corrupt_not_a_gray_image() {
    let dec = CpuDecoder::new(Limits::default());
    for name in [
        "go__video-001.q50.420.progressive.jpeg",
        "go__video-005.gray.q50.progressive.jpeg",
    ] {
        let bad = without_first_segment(&core_file(name), 0xC4);
        match dec.decode_to_vec_routed(&bad) {
            Err(e @ DecodeError::Corrupt { .. }) => assert!(e.is_bad_input()),
            Err(e) => panic!("{name}: want Corrupt, got {e}"),
            Ok((_, route, _)) => panic!("{name}: decoded via {route}"),
        }
    }
}

/// The byte ranges of `data`'s entropy-coded scan data, one per scan (restart
/// markers inside), up to the marker that ends each scan.
fn scan_data(data: &[u8]) -> Vec<std::ops::Range<usize>> {
    let mut scans = Vec::new();
    let mut i = 2;
    while i + 4 <= data.len() && data[i] == 0xFF {
        let marker = data[i + 1];
        if marker == 0xD9 {
            break;
        }
        let len = usize::from(u16::from_be_bytes([data[i + 2], data[i + 3]]));
        i += 2 + len;
        if marker == 0xDA {
            let start = i;
            while i + 1 < data.len()
                && !(data[i] == 0xFF && data[i + 1] != 0 && !(0xD0..=0xD7).contains(&data[i + 1]))
            {
                i += 1;
            }
            scans.push(start..i);
        }
    }
    scans
}

/// Smallish photographs of the ImageFolder corpus: up to three each of
/// baseline, baseline with restart intervals, and progressive.
fn photos() -> Vec<(String, Vec<u8>)> {
    let mut kinds: [Vec<(String, Vec<u8>)>; 3] = Default::default();
    for path in common::jpegs_under(&data_dir().join("imagefolder")) {
        let data = std::fs::read(&path).unwrap();
        let Ok(info) = probe(&data, &Limits::default()) else {
            continue;
        };
        if data.len() > 60_000 || !info.zune_decodable() {
            continue;
        }
        let header = &data[..scan_data(&data).first().map_or(0, |r| r.start)];
        let restarts = header.windows(2).any(|w| w == [0xFF, 0xDD]);
        let kind = match (info.progressive, restarts) {
            (false, false) => 0,
            (false, true) => 1,
            (true, _) => 2,
        };
        if kinds[kind].len() < 3 {
            kinds[kind].push((path.display().to_string(), data));
        }
    }
    assert!(
        kinds.iter().all(|k| !k.is_empty()),
        "a kind of photo is missing"
    );
    kinds.into_iter().flatten().collect()
}

/// A photograph re-encoded by jpeg-encoder, baseline or progressive, with a
/// restart interval of `restart` MCUs (0: none).
fn reencoded(rgb: &[u8], w: u32, h: u32, progressive: bool, restart: u16) -> Vec<u8> {
    let mut out = Vec::new();
    let mut enc = jpeg_encoder::Encoder::new(&mut out, 85);
    enc.set_progressive(progressive);
    enc.set_restart_interval(restart);
    enc.encode(rgb, w as u16, h as u16, jpeg_encoder::ColorType::Rgb)
        .unwrap();
    out
}

/// The test photographs and re-encodings of the first one: baseline and
/// progressive, with and without restart intervals.
fn photos_and_variants(dec: &CpuDecoder) -> Vec<(String, Vec<u8>)> {
    let mut files = photos();
    let (info, rgb) = dec.decode_to_vec(&files[0].1).unwrap();
    for (progressive, restart) in [(false, 0), (false, 3), (true, 0), (true, 5)] {
        files.push((
            format!(
                "{} re-encoded, progressive {progressive}, restart {restart}",
                files[0].0
            ),
            reencoded(&rgb, info.width, info.height, progressive, restart),
        ));
    }
    files
}

fn with_eoi(part: &[u8]) -> Vec<u8> {
    let mut out = part.to_vec();
    out.extend_from_slice(&[0xFF, 0xD9]);
    out
}

/// Regression: a JPEG cut short and closed with an end-of-image marker (a
/// "repaired" truncated download) decoded "OK" with black or made-up rows:
/// zune-jpeg, and jpeg-decoder after it, decode the rest of the scan from
/// zero bits. Every cut inside a scan's data, with or without the marker,
/// and an end-of-image marker inserted into a scan, must be Corrupt.
#[test]
fn scan_data_cut_short_by_eoi_is_corrupt() {
    let dec = CpuDecoder::new(Limits::default());
    let mut cases = 0;
    for (name, data) in photos_and_variants(&dec) {
        let scans = scan_data(&data);
        assert!(!scans.is_empty(), "{name}: no scan");
        // Several points in the first and last scan, and the middle of each scan.
        let (first, last) = (&scans[0], &scans[scans.len() - 1]);
        let mut cuts: Vec<usize> = [first, last]
            .iter()
            .flat_map(|r| [1, 2, 3, 4].map(|k| r.start + r.len() * k / 5))
            .chain(scans.iter().map(|r| r.start + r.len() / 2))
            .chain([last.end - 1])
            .collect();
        // Right before a restart marker: whole intervals, the rest missing.
        if let Some(rst) = first.clone().find(|&i| {
            data[i] == 0xFF
                && (0xD0..=0xD7).contains(&data[i + 1])
                && i > first.start + first.len() / 2
        }) {
            cuts.push(rst);
        }
        for cut in cuts {
            let eoi_in_scan = {
                let mut d = with_eoi(&data[..cut]);
                d.extend_from_slice(&data[cut..]);
                d
            };
            for (what, bad) in [
                ("cut + EOI", with_eoi(&data[..cut])),
                ("cut", data[..cut].to_vec()),
                ("EOI inserted", eoi_in_scan),
            ] {
                cases += 1;
                match dec.decode_to_vec_routed(&bad) {
                    Err(e @ DecodeError::Corrupt { .. }) => assert!(e.is_bad_input()),
                    Err(e) => panic!("{name} {what} at {cut}: want Corrupt, got {e}"),
                    Ok((_, route, _)) => panic!("{name} {what} at {cut}: decoded via {route}"),
                }
            }
        }
    }
    assert!(cases > 200, "{cases}");
}

/// The other side of the check above: what legitimately ends a scan or
/// interval decodes as before. Restart intervals, fill bytes (`FF FF`)
/// before the markers, a zero byte before the end-of-image marker, and the
/// last scan ending right at it.
#[test]
fn scans_ending_at_their_markers_still_decode() {
    let dec = CpuDecoder::new(Limits::default());
    for (name, data) in photos_and_variants(&dec) {
        let (_, route, want) = dec
            .decode_to_vec_routed(&data)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(route, stoker_decode::Route::CpuZune, "{name}");
        // FF FF fill before every marker that ends a scan or interval.
        let mut filled = data.clone();
        let mut at: Vec<usize> = scan_data(&data)
            .into_iter()
            .flat_map(|r| {
                let d = &data;
                r.clone()
                    .filter(move |&i| d[i] == 0xFF && (0xD0..=0xD7).contains(&d[i + 1]))
                    .chain([r.end])
            })
            .collect();
        at.sort_unstable();
        for &i in at.iter().rev() {
            filled.splice(i..i, [0xFF, 0xFF]);
        }
        let last_end = scan_data(&data).last().unwrap().end;
        let mut zero_padded = data.clone();
        zero_padded.insert(last_end, 0);
        for (what, d) in [
            ("fill bytes", filled),
            ("zero byte before EOI", zero_padded),
        ] {
            match dec.decode_to_vec_routed(&d) {
                Ok((_, _, got)) => assert!(got == want, "{name} {what}: other pixels"),
                Err(e) => panic!("{name} {what}: {e}"),
            }
        }
    }
}

/// `data` without any DHT segment before its first scan: a Motion-JPEG frame.
fn without_huffman_tables(data: &[u8]) -> Vec<u8> {
    let mut out = data.to_vec();
    while out[2..]
        .windows(2)
        .take_while(|w| w != &[0xFF, 0xDA])
        .any(|w| w == [0xFF, 0xC4])
    {
        out = without_first_segment(&out, 0xC4);
    }
    out
}

/// Motion-JPEG frames leave out their Huffman tables (the format fixes them):
/// libjpeg-turbo, so Pillow and torchvision, decodes them with the standard
/// tables, and so does stoker now instead of refusing them.
#[test]
fn a_frame_without_huffman_tables_decodes_with_the_standard_ones() {
    let dec = CpuDecoder::new(Limits::default());
    let (info, rgb) = dec
        .decode_to_vec(&core_file("go__video-001.q50.420.jpeg"))
        .unwrap();
    // jpeg-encoder writes the standard tables (it does not optimize them).
    let mut whole = Vec::new();
    jpeg_encoder::Encoder::new(&mut whole, 85)
        .encode(
            &rgb,
            info.width as u16,
            info.height as u16,
            jpeg_encoder::ColorType::Rgb,
        )
        .unwrap();
    let frame = without_huffman_tables(&whole);
    assert!(frame.len() < whole.len());
    assert!(
        !probe(&whole, &Limits::default())
            .unwrap()
            .standard_huffman_tables
    );
    let probed = probe(&frame, &Limits::default()).unwrap();
    assert!(probed.standard_huffman_tables);
    assert!(!probed.nvjpeg_decodable(), "the GPU does not get them");
    let (_, want) = dec.decode_to_vec(&whole).unwrap();
    let (_, _, got) = dec.decode_to_vec_routed(&frame).unwrap();
    assert!(
        got == want,
        "the same pixels as with the tables written out"
    );
    // Progressive files carry optimized tables scan by scan: without them they
    // stay corrupt (missing_huffman_table_is_corrupt_not_a_gray_image).
    let progressive = without_huffman_tables(&core_file("go__video-001.q50.420.progressive.jpeg"));
    assert!(
        !probe(&progressive, &Limits::default())
            .unwrap()
            .standard_huffman_tables
    );
}

/// Regression: the scan count before jpeg-decoder ran over the whole input, so
/// data appended after the image (a phone's motion-photo video, a second MPO
/// image: random bytes hold `FF DA` about once in 64 KiB) refused a good file
/// as "too much decoding work". Only the image's own scans count.
#[test]
fn data_after_the_end_of_image_is_not_counted_as_scans() {
    let dec = CpuDecoder::new(Limits::default());
    let name = "jxl__jxl__flower__flower.png.im_q85_asymmetric.jpg";
    let data = core_file(name);
    let (_, route, want) = dec.decode_to_vec_routed(&data).unwrap();
    assert_eq!(route, stoker_decode::Route::CpuFallback, "{name}");
    let mut trailer = data.clone();
    trailer.extend_from_slice(&[0xFF, 0xDA].repeat(1000));
    let (_, _, got) = dec.decode_to_vec_routed(&trailer).unwrap();
    assert!(got == want);
}

/// Regression (hostile input): jpeg-decoder has no scan cap, and the probe stops counting
/// after the first scan of an interleaved file, so thousands of empty scans appended to
/// a small image went to jpeg-decoder (and into the ran-out check's copy, 64 bytes a
/// scan). The probe's cap of 1000 scans now holds on this route too, before decoding.
#[test]
fn more_than_1000_scans_on_the_jpeg_decoder_route_are_refused_before_decoding() {
    let dec = CpuDecoder::new(Limits::default());
    // 16x16, one interleaved scan, its Cr sampling then set to 1x2 (Cb stays 1x1): a
    // sampling zune-jpeg does not take. So small that the work limit allows millions of
    // scans.
    let mut data = Vec::new();
    let mut enc = jpeg_encoder::Encoder::new(&mut data, 85);
    enc.set_sampling_factor(jpeg_encoder::SamplingFactor::F_1_1);
    enc.encode(&[128u8; 16 * 16 * 3], 16, 16, jpeg_encoder::ColorType::Rgb)
        .unwrap();
    let sof = data.windows(2).position(|w| w == [0xFF, 0xC0]).unwrap();
    // FF C0, length, precision, height, width, 3 components of (id, factors, table).
    assert_eq!(data[sof + 9], 3);
    data[sof + 10 + 2 * 3 + 1] = 0x12;
    let info = probe(&data, dec.limits()).unwrap();
    assert!(!info.zune_decodable() && !info.multi_scan_sequential);
    let eoi = data.len() - 2;
    assert_eq!(data[eoi..], [0xFF, 0xD9]);
    // An empty scan of component 1: SOS, length 8, one component, table 0, spectral
    // selection 0..63, no successive approximation.
    let empty_scan = [0xFF, 0xDA, 0, 8, 1, 1, 0, 0, 63, 0];
    for (scans, refused) in [(990, false), (1001, true)] {
        let mut bomb = data[..eoi].to_vec();
        bomb.extend(empty_scan.repeat(scans));
        bomb.extend_from_slice(&data[eoi..]);
        match dec.decode_to_vec_routed(&bomb) {
            Err(DecodeError::Malformed { what, .. }) => {
                assert!(refused, "{scans} scans refused: {what}");
                assert_eq!(what, "more than 1000 scans");
            }
            other => assert!(!refused, "{scans} scans: {:?}", other.map(|(_, r, _)| r)),
        }
    }
}

/// Regression: the files zune-jpeg does not take (sequential files in several
/// scans, unusual sampling factors) go to jpeg-decoder, which also decodes the
/// rest of a scan from zero bits once the data runs out, and returned Ok for a
/// file cut short and closed with an end-of-image marker.
#[test]
fn fallback_route_cut_short_by_eoi_is_corrupt() {
    let dec = CpuDecoder::new(Limits::default());
    let dir = data_dir().join("conformance/core");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    let (mut files, mut cases) = (0, 0);
    for name in names {
        let data = core_file(&name);
        let Ok(info) = probe(&data, dec.limits()) else {
            continue;
        };
        if info.zune_decodable() || info.supported().is_err() {
            continue;
        }
        let Ok((_, route, whole)) = dec.decode_to_vec_routed(&data) else {
            continue;
        };
        assert_eq!(route, stoker_decode::Route::CpuFallback, "{name}");
        files += 1;
        let scans = scan_data(&data);
        let last = &scans[scans.len() - 1];
        let cuts = [1, 2, 3, 4]
            .map(|k| last.start + last.len() * k / 5)
            .into_iter()
            .chain(scans.iter().map(|r| r.start + r.len() / 2))
            .chain([last.end - 1]);
        for cut in cuts {
            cases += 1;
            match dec.decode_to_vec_routed(&with_eoi(&data[..cut])) {
                Err(e @ DecodeError::Corrupt { .. }) => assert!(e.is_bad_input()),
                Err(e) => panic!("{name} cut + EOI at {cut}: want Corrupt, got {e}"),
                // The last byte may hold nothing but the padding bits after the
                // last code, and the zero bits read instead of it the same codes.
                Ok((_, _, rgb)) if cut == last.end - 1 && rgb == whole => {}
                Ok((_, route, _)) => {
                    panic!(
                        "{name} cut + EOI at {cut} of {}: decoded via {route}",
                        data.len()
                    )
                }
            }
        }
    }
    assert!(files >= 4 && cases >= 20, "{files} files, {cases} cases");
}

/// No inputs and some outputs returned no result at all, which a caller reading one result
/// per output took for success.
#[test]
fn no_inputs_and_some_outputs_is_a_shape_error_per_output() {
    let dec = CpuDecoder::new(Limits::default());
    let (mut a, mut b) = ([0u8; 3], [0u8; 3]);
    let mut outputs: Vec<&mut [u8]> = vec![&mut a, &mut b];
    let results = dec.decode_batch(&[], &mut outputs);
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|r| matches!(
        r,
        Err(DecodeError::BatchShape {
            inputs: 0,
            outputs: 2
        })
    )));
    assert!(dec.decode_batch(&[], &mut []).is_empty());
}
