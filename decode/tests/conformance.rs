//! Every row of `shared/data/conformance/expectations.tsv` against the CPU decoder.

mod common;

use common::{conformance_rows, data_dir, load_png_rgb, psnr};
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
