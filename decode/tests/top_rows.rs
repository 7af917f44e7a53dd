//! `CpuDecoder::decode_top_into_routed`: a decode that may stop once the first
//! `rows` rows are final gives exactly the full decode's pixels in those rows,
//! on every file of the conformance corpus and a sample of the bench set, and
//! on baseline files it really stops (the rows below are left as they were).

mod common;

use common::{data_dir, jpegs_in};
use stoker_decode::{CpuDecoder, Limits, Route};

/// Bytes the output is filled with before a partial decode.
const UNTOUCHED: u8 = 0xA5;

#[test]
fn top_rows_equal_the_full_decode_and_baseline_files_stop_early() {
    let mut files = jpegs_in(&data_dir().join("conformance/core"));
    files.extend(jpegs_in(&data_dir().join("bench")).into_iter().take(16));
    files.extend(jpegs_in(&data_dir().join("imagefolder")));
    let dec = CpuDecoder::new(Limits::default());
    let (mut checked, mut stopped) = (0, 0);
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
            // A baseline file decoded by zune-jpeg stops well before its end.
            if route == Route::CpuZune && !info.progressive && rows + 32 <= h {
                let last_row = &top[(h - 1) * row..h * row];
                if last_row.iter().all(|&b| b == UNTOUCHED) {
                    stopped += 1;
                }
            }
        }
    }
    println!(
        "{checked} partial decodes checked over {} files; {stopped} stopped early",
        files.len()
    );
    assert!(checked > 500, "only {checked} partial decodes checked");
    assert!(
        stopped > 100,
        "only {stopped} partial decodes stopped early"
    );
}
