//! `stoker decode --backend auto` and the loader's `Device::Auto` decide with the same rule
//! (`stoker_loader::AutoChoice`) and say the same thing when they fall back to the CPU.
// They run the `stoker` binary, built with the `cli` feature only.
#![cfg(feature = "cli")]

mod common;

use std::process::Command;

use stoker_formats::{Dataset, DatasetWriter, Provenance, WriterOptions};
use stoker_loader::{AutoChoice, Device, Loader, Placement};

const PHOTO: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/examples/data/sample/caer/tent.jpg"
);

/// A one-record dataset of `jpeg` (its size from the header).
fn dataset(dir: &std::path::Path, jpeg: &[u8]) -> Dataset {
    let mut w = DatasetWriter::create(dir, WriterOptions::default()).unwrap();
    w.push(common::jpeg_meta(jpeg, 0), jpeg).unwrap();
    w.finish(vec!["c".into()], Provenance::stoker("cli_decode test"))
        .unwrap();
    Dataset::open(dir).unwrap()
}

#[test]
fn decode_backend_auto_falls_back_for_the_reason_the_loader_gives() {
    let jpeg = std::fs::read(PHOTO).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let loader = Loader::builder(dataset(dir.path(), &jpeg))
        .device(Device::Auto)
        .placement(Placement::single())
        .workers(1)
        .build()
        .unwrap();
    let device = loader.stats().device;

    let out = Command::new(env!("CARGO_BIN_EXE_stoker"))
        .args(["decode", PHOTO, "--backend", "auto", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let notes: Vec<&str> = v["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();

    match AutoChoice::for_local_rank(0) {
        AutoChoice::Cpu { reason } => {
            // No usable GPU (this machine): both fall back, for the same reason.
            assert_eq!(device, format!("cpu (device auto: {reason})"));
            assert_eq!(v["backend"], "cpu", "{v}");
            // The route by the name the text output and the counters use.
            assert_eq!(v["route"], "cpu-zune", "{v}");
            assert_eq!(
                notes,
                [format!("device auto fell back to the CPU: {reason}")],
                "{v}"
            );
        }
        choice => {
            // A GPU machine: the loader took the chosen device or fell back opening it;
            // the CLI either decoded with nvJPEG or said why it could not.
            println!("a GPU is present ({choice:?}): checking the GPU side of the rule");
            match device.strip_prefix("cpu (device auto: ") {
                None => assert_eq!(device, choice.describe()),
                Some(_) => assert!(!notes.is_empty(), "{device} / {v}"),
            }
            if v["backend"] == "cpu" {
                assert!(
                    notes[0].starts_with("device auto fell back to the CPU: "),
                    "{v}"
                );
            }
        }
    }
}

/// `--gpu-waits` sets how the nvJPEG decoder waits; without a GPU the image is
/// decoded on the CPU as before, with a note that the flag did not apply.
#[test]
fn gpu_waits_decode_on_the_gpu_or_say_the_cpu_decoded() {
    let help = Command::new(env!("CARGO_BIN_EXE_stoker"))
        .args(["decode", "--help"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&help.stdout).contains("--gpu-waits"));
    let out = Command::new(env!("CARGO_BIN_EXE_stoker"))
        .args(["decode", PHOTO, "--gpu-waits", "block", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    if v["backend"] == "nvjpeg" {
        assert_eq!(v["gpu_waits"], "block", "{v}");
    } else {
        assert!(v["gpu_waits"].is_null(), "{v}");
        let notes = v["notes"].as_array().unwrap();
        assert!(
            notes.iter().any(|n| n
                .as_str()
                .unwrap()
                .starts_with("--gpu-waits block applies to the nvJPEG decoder")),
            "{v}"
        );
    }
    let bad = Command::new(env!("CARGO_BIN_EXE_stoker"))
        .args(["decode", PHOTO, "--gpu-waits", "yield"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("expected auto, spin or block"), "{err}");
}

#[test]
fn decode_max_file_size_takes_the_units_convert_takes() {
    // `decode --max-file-size 1M` was refused ("invalid digit") while convert took 64M.
    let size = std::fs::metadata(PHOTO).unwrap().len();
    assert!(size > 1024 && size < 1 << 20, "{size}");
    let run = |limit: &str| {
        Command::new(env!("CARGO_BIN_EXE_stoker"))
            .args([
                "decode",
                PHOTO,
                "--backend",
                "cpu",
                "--max-file-size",
                limit,
            ])
            .output()
            .unwrap()
    };
    for fits in ["1M", "1MiB", "0.5G", &size.to_string()] {
        let o = run(fits);
        assert!(o.status.success(), "{fits}: {o:?}");
    }
    let o = run("1K");
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("1024"), "{o:?}");
    for bad in ["0", "1Q"] {
        let o = run(bad);
        assert_eq!(o.status.code(), Some(2), "{bad}: {o:?}");
    }
    // The other limits too: 0 was taken, and then every image failed (exit 1).
    for flag in ["--max-pixels", "--max-scan-work"] {
        let o = Command::new(env!("CARGO_BIN_EXE_stoker"))
            .args(["decode", PHOTO, "--backend", "cpu", flag, "0"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{flag}: {o:?}");
    }
}
