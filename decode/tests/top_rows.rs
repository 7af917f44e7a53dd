//! `CpuDecoder::decode_top_into_routed`: a decode that may stop once the first
//! `rows` rows are final gives exactly the full decode's pixels in those rows,
//! on every file of the conformance corpus and a sample of the bench set, and
//! on the files zune-jpeg decodes, baseline and progressive, it really stops
//! (the rows below are left as they were).
//! `CpuDecoder::decode_region_into_routed`: inside any region the pixels are
//! the full decode's, and baseline and progressive files really skip work
//! outside it.

mod common;

use common::{bench_dir, data_dir, jpegs_in, jpegs_under};
use stoker_decode::{probe, CpuDecoder, Limits, Region, Route};

/// Bytes the output is filled with before a partial decode.
const UNTOUCHED: u8 = 0xA5;

/// The conformance corpus, 16 bench photos, and from the ImageFolder
/// photographs every second progressive one and every eighth of the others
/// (the whole folder, larger photos, would make the test six times as long).
fn files() -> Vec<std::path::PathBuf> {
    let mut files = jpegs_in(&data_dir().join("conformance/core"));
    files.extend(jpegs_in(&bench_dir()).into_iter().take(16));
    let mut seen = [0, 0];
    for path in jpegs_under(&data_dir().join("imagefolder")) {
        let data = std::fs::read(&path).unwrap();
        let progressive = probe(&data, &Limits::default()).is_ok_and(|i| i.progressive);
        let kind = usize::from(progressive);
        if seen[kind] % [8, 2][kind] == 0 {
            files.push(path);
        }
        seen[kind] += 1;
    }
    files
}

#[test]
fn top_rows_equal_the_full_decode_and_zune_files_stop_early() {
    let files = files();
    let dec = CpuDecoder::new(Limits::default());
    // Partial decodes that stopped early, of baseline and of progressive files.
    let (mut checked, mut stopped) = (0, [0, 0]);
    for path in &files {
        let data = std::fs::read(path).unwrap();
        let Ok((info, route, full)) = dec.decode_to_vec_routed(&data) else {
            continue; // the conformance tests cover the files that fail
        };
        let (w, h) = (info.width as usize, info.height as usize);
        let row = w * 3;
        for rows in [
            1,
            7,
            8,
            9,
            16,
            17,
            h / 3,
            h / 2,
            h.saturating_sub(9),
            h - 1,
            h,
            h + 5,
        ] {
            let rows = rows.max(1);
            let mut top = vec![UNTOUCHED; info.rgb_len()];
            let (got, top_route) = dec
                .decode_top_into_routed(&data, &mut top, rows as u32)
                .unwrap_or_else(|e| panic!("{}: rows {rows}: {e}", path.display()));
            assert_eq!(
                (got.width, got.height, top_route),
                (info.width, info.height, route)
            );
            let keep = rows.min(h) * row;
            if top[..keep] != full[..keep] {
                let bad = (0..keep).find(|&i| top[i] != full[i]).unwrap() / row;
                panic!(
                    "{} ({w}×{h}, {route}): with rows {rows}, row {bad} differs from the full decode",
                    path.display()
                );
            }
            checked += 1;
            // A file decoded by zune-jpeg stops well before its end.
            if route == Route::CpuZune && rows + 32 <= h {
                let last_row = &top[(h - 1) * row..h * row];
                if last_row.iter().all(|&b| b == UNTOUCHED) {
                    stopped[usize::from(info.progressive)] += 1;
                }
            }
        }
    }
    let [baseline, progressive] = stopped;
    println!(
        "{checked} partial decodes checked over {} files; {baseline} of baseline files and \
         {progressive} of progressive files stopped early",
        files.len()
    );
    assert!(checked > 500, "only {checked} partial decodes checked");
    assert!(
        baseline > 100,
        "only {baseline} partial decodes of baseline files stopped early"
    );
    assert!(
        progressive > 50,
        "only {progressive} partial decodes of progressive files stopped early"
    );
}

/// Regions at every offset against the MCU grid (8 and 16 pixels), one pixel
/// wide or tall, at the image's edges and corners, and the whole image: the
/// pixels inside are the full decode's, byte for byte. On baseline and
/// progressive files whose region leaves room above it, the rows above are
/// left as they were (neither transformed nor color converted), and so are
/// the columns left of it.
#[test]
fn regions_equal_the_full_decode_inside_and_zune_files_skip_outside() {
    let files = files();
    let dec = CpuDecoder::new(Limits::default());
    // Region decodes that left the rows above / the columns on the left
    // alone, of baseline and of progressive files.
    let (mut checked, mut skipped_above, mut skipped_left) = (0, [0, 0], [0, 0]);
    for path in &files {
        let data = std::fs::read(path).unwrap();
        let Ok((info, route, full)) = dec.decode_to_vec_routed(&data) else {
            continue;
        };
        let (w, h) = (info.width, info.height);
        let row = w as usize * 3;
        let mut regions = vec![
            Region {
                x: 0,
                y: 0,
                width: w,
                height: h,
            },
            Region {
                x: w - 1,
                y: h - 1,
                width: 1,
                height: 1,
            },
            Region {
                x: 0,
                y: h / 2,
                width: 1,
                height: h - h / 2,
            },
            Region {
                x: w / 2,
                y: 0,
                width: w - w / 2,
                height: 1,
            },
        ];
        for k in 0..24u32 {
            // Offsets and sizes that land on and beside MCU edges.
            let (x, y) = ((k * 37 + k % 3 * 8) % w, (k * 53 + k % 5 * 16) % h);
            let (rw, rh) = (1 + (k * 29 + 15) % (w - x), 1 + (k * 31 + 7) % (h - y));
            regions.push(Region {
                x,
                y,
                width: rw,
                height: rh,
            });
        }
        // A region reaching past the image is cut to it.
        regions.push(Region {
            x: w / 3,
            y: h / 3,
            width: w,
            height: h,
        });
        for r in regions {
            let mut part = vec![UNTOUCHED; info.rgb_len()];
            let (got, part_route) = dec
                .decode_region_into_routed(&data, &mut part, r)
                .unwrap_or_else(|e| panic!("{}: {r:?}: {e}", path.display()));
            assert_eq!(
                (got.width, got.height, part_route),
                (info.width, info.height, route)
            );
            let (x0, x1) = (r.x as usize * 3, r.right().min(w) as usize * 3);
            for y in r.y as usize..r.bottom().min(h) as usize {
                let span = y * row + x0..y * row + x1;
                if part[span.clone()] != full[span.clone()] {
                    let bad = (span.start..span.end)
                        .find(|&i| part[i] != full[i])
                        .unwrap();
                    panic!(
                        "{} ({w}×{h}, {route}): {r:?}: pixel ({}, {y}) differs from the full decode",
                        path.display(),
                        (bad - y * row) / 3
                    );
                }
            }
            checked += 1;
            if route == Route::CpuZune {
                let kind = usize::from(info.progressive);
                if r.y >= 48 && part[..row].iter().all(|&b| b == UNTOUCHED) {
                    skipped_above[kind] += 1;
                }
                let first = r.y as usize * row;
                if r.x >= 48 && part[first..first + 3] == [UNTOUCHED; 3] {
                    skipped_left[kind] += 1;
                }
            }
        }
    }
    println!(
        "{checked} region decodes checked over {} files; left alone: the rows above by \
         {:?}, the columns on the left by {:?} (baseline, progressive)",
        files.len(),
        skipped_above,
        skipped_left
    );
    assert!(checked > 1500, "only {checked} region decodes checked");
    for (kind, min) in [("baseline", 300), ("progressive", 100)] {
        let i = usize::from(kind == "progressive");
        assert!(
            skipped_above[i] > min,
            "only {} region decodes of {kind} files skipped the rows above",
            skipped_above[i]
        );
        assert!(
            skipped_left[i] > min,
            "only {} region decodes of {kind} files skipped the columns on the left",
            skipped_left[i]
        );
    }
}

/// Restart markers inside progressive scans and an APP3 segment between
/// scans, which none of the shared progressive files have: bench photos
/// re-encoded progressive (`jpeg-encoder`) with restart intervals from 1 to
/// 64, in three samplings, and the same files with an APP3 segment before
/// their third scan (zune-jpeg stops a full decode there, and a cut decode
/// must stop the same way). Rows and regions equal the full decode, and
/// rows-limited decodes stop early.
#[test]
fn progressive_restart_markers_and_segments_between_scans_cut_exactly() {
    use jpeg_encoder::{ColorType, Encoder, SamplingFactor};
    let dec = CpuDecoder::new(Limits::default());
    let (mut checked, mut stopped) = (0, 0);
    for path in jpegs_in(&bench_dir()).iter().take(2) {
        let (info, rgb) = dec.decode_to_vec(&std::fs::read(path).unwrap()).unwrap();
        let (w, h) = (info.width, info.height);
        for (sampling, interval) in [
            (SamplingFactor::R_4_2_0, 1),
            (SamplingFactor::R_4_2_0, 7),
            (SamplingFactor::R_4_4_4, 3),
            (SamplingFactor::R_4_2_2, 64),
        ] {
            let mut plain = Vec::new();
            let mut enc = Encoder::new(&mut plain, 85);
            enc.set_sampling_factor(sampling);
            enc.set_progressive(true);
            enc.set_restart_interval(interval);
            enc.encode(&rgb, w as u16, h as u16, ColorType::Rgb)
                .unwrap();
            let markers = |m: u8| plain.windows(2).filter(|p| p == &[0xFF, m]).count();
            assert!(
                markers(0xDD) == 1 && markers(0xD0) > 0 && markers(0xDA) >= 3,
                "{sampling:?}/{interval}: expected DRI, restart markers and 3+ scans"
            );
            // APP3 (a marker zune-jpeg does not know) before the third scan.
            let third = plain
                .windows(2)
                .enumerate()
                .filter(|(_, p)| p == &[0xFF, 0xDA])
                .nth(2)
                .unwrap()
                .0;
            let mut with_app3 = plain[..third].to_vec();
            with_app3.extend_from_slice(&[0xFF, 0xE3, 0x00, 0x06, b's', b't', b'o', b'k']);
            with_app3.extend_from_slice(&plain[third..]);
            for (variant, data) in [("plain", &plain), ("app3", &with_app3)] {
                let what = format!(
                    "{} {sampling:?} restart {interval} {variant}",
                    path.display()
                );
                let (got, full) = dec.decode_to_vec(data).unwrap();
                assert!(got.progressive, "{what}");
                let row = w as usize * 3;
                for rows in [1, 8, 9, 16, 17, 100, h / 2, h - 17, h - 1] {
                    let mut top = vec![UNTOUCHED; got.rgb_len()];
                    dec.decode_top_into_routed(data, &mut top, rows).unwrap();
                    let keep = rows as usize * row;
                    assert!(top[..keep] == full[..keep], "{what}: rows {rows}");
                    if variant == "plain" && rows + 32 <= h {
                        let last_row = &top[(h as usize - 1) * row..];
                        stopped += usize::from(last_row.iter().all(|&b| b == UNTOUCHED));
                    }
                    checked += 1;
                }
                for k in 0..8u32 {
                    let (x, y) = ((k * 61 + k % 3 * 8) % w, (k * 43 + k % 2 * 16) % h);
                    let r = Region {
                        x,
                        y,
                        width: 1 + (k * 97 + 31) % (w - x),
                        height: 1 + (k * 53 + 11) % (h - y),
                    };
                    let mut part = vec![UNTOUCHED; got.rgb_len()];
                    dec.decode_region_into_routed(data, &mut part, r).unwrap();
                    for y in r.y..r.bottom() {
                        let span = y as usize * row + r.x as usize * 3
                            ..y as usize * row + r.right() as usize * 3;
                        assert!(part[span.clone()] == full[span], "{what}: {r:?}, row {y}");
                    }
                    checked += 1;
                }
            }
        }
    }
    println!(
        "{checked} cut decodes of re-encoded progressive files checked; {stopped} stopped early"
    );
    assert!(stopped >= 40, "only {stopped} stopped early");
}
