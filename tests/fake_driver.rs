//! Machines where the NVIDIA driver library loads but no GPU can be used: a container with
//! the driver's libraries and no device, the CUDA toolkit's stub `libcuda.so` on the
//! library path, a GPU that another process holds in exclusive mode; and a `libcuda.so`
//! that lacks entry points stoker calls (cudarc would panic on the first call of one).
//! Each is played by a stand-in driver (`stoker_testdata::fake_driver`) in a child
//! process. `Device::Auto`,
//! `stoker decode --backend auto` and `stoker bench --device auto` must load on the CPU and
//! say why (a GPU the driver reports and that cannot be used is a warning); asking for the
//! GPU by name must be a clear error. Never a panic: the stand-in has only the entry points
//! a program calls before it knows the GPU is unusable, so a call past that point would
//! panic in cudarc and fail these tests.
#![cfg(target_os = "linux")]

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{jpeg_meta, run_within, sample_photos, text, LIMIT, STOKER};
use stoker_formats::{Dataset, DatasetWriter, Provenance, WriterOptions};
use stoker_loader::{Device, Loader, LoaderError, Output, Shuffle, Transform};
use stoker_testdata::fake_driver::{self, Driver};

/// The sample photos as a dataset of three classes.
fn sample_dataset(out: &Path) -> Dataset {
    let mut w = DatasetWriter::create(out, WriterOptions::default()).unwrap();
    for (i, f) in sample_photos().iter().enumerate() {
        let data = std::fs::read(f).unwrap();
        w.push(jpeg_meta(&data, (i % 3) as u32), &data).unwrap();
    }
    w.finish(
        vec!["a".into(), "b".into(), "c".into()],
        Provenance::stoker("fake_driver test"),
    )
    .unwrap();
    Dataset::open(out).unwrap()
}

/// Every batch of epoch 0 (indices, labels, pixels) of `device`'s loader, and the loader's
/// device description and GPU-fallback warning.
type Epoch = Vec<(Vec<u64>, Vec<u32>, Vec<u8>)>;

fn epoch_on(ds: &Dataset, device: Device) -> Result<(Epoch, String, Option<String>), LoaderError> {
    let loader = Loader::builder(ds.clone())
        .device(device)
        .batch_size(4)
        .shuffle(Shuffle::Global { seed: 5 })
        .transform(Transform::random_resized_crop(32).hflip(0.5))
        .output(Output::U8Nhwc)
        .workers(2)
        .build()?;
    let batches = loader
        .epoch(0)
        .map(|b| {
            let b = b.expect("a batch");
            let pixels = b.images.as_u8().expect("u8 output").to_vec();
            (b.indices.clone(), b.labels.clone(), pixels)
        })
        .collect();
    Ok((batches, loader.stats().device, loader.gpu_fallback_note()))
}

/// The child's half of [`auto_loads_on_the_cpu_under_each_unusable_driver`]: does nothing
/// unless started by it (the stand-in driver is then this process's `libcuda.so`).
#[test]
fn child() {
    let Some(driver) = Driver::current() else {
        return;
    };
    let says = driver.says();

    // The decoder's context: an error that quotes the driver.
    match stoker_decode::cuda_context(0) {
        Err(stoker_decode::DecodeError::NoGpu { reason }) => {
            println!("cuda_context: {reason}");
            assert!(reason.contains(says), "{reason}");
        }
        other => panic!("cuda_context(0) under {driver:?}: {other:?}"),
    }
    // What the loader counts: the busy driver reports its device, the others none.
    let visible = stoker_loader::gpu::visible_devices();
    println!("visible_devices: {visible:?}");
    match driver {
        Driver::Busy => assert_eq!(visible, Ok(1)),
        _ => assert!(
            visible.as_ref().is_err_and(|r| r.contains(says)),
            "{visible:?}"
        ),
    }

    let dir = tempfile::tempdir().unwrap();
    let ds = sample_dataset(&dir.path().join("ds"));
    let (on_cpu, _, _) = epoch_on(&ds, Device::Cpu).expect("the CPU loader");
    let (on_auto, device, warning) = epoch_on(&ds, Device::Auto).expect("Device::Auto loads");
    println!("Device::Auto: {device}; warning: {warning:?}");
    // The same batches as the CPU loader's: the fallback is the CPU path itself.
    assert_eq!(on_auto, on_cpu);
    assert!(!on_auto.is_empty());
    assert!(device.starts_with("cpu (device auto: "), "{device}");
    assert!(device.contains(says), "{device}");
    match driver {
        // A GPU the driver reports and that cannot be used is worth a warning.
        Driver::Busy => {
            let warning = warning.expect("a warning for a reported GPU that cannot be used");
            assert!(
                warning.starts_with("device auto: cuda:0 is there but cannot be used"),
                "{warning}"
            );
            assert!(warning.contains(says), "{warning}");
        }
        // No GPU at all is what a CPU machine looks like: no warning.
        _ => assert_eq!(warning, None),
    }

    // Asking for the GPU by name is an error that says why.
    match epoch_on(&ds, Device::Cuda(0)) {
        Err(LoaderError::GpuUnavailable { reason }) => {
            println!("Device::Cuda(0): {reason}");
            assert!(reason.contains(says), "{reason}");
        }
        Err(e) => panic!("Device::Cuda(0) under {driver:?}: {e}"),
        Ok(_) => panic!("Device::Cuda(0) loaded under {driver:?}"),
    }
    println!("child done: {}", driver.name());
}

#[test]
fn auto_loads_on_the_cpu_under_each_unusable_driver() {
    let dir = tempfile::tempdir().unwrap();
    let lib = fake_driver::build(dir.path());
    for driver in Driver::ALL {
        let (status, printed) = stoker_testdata::child::run_test_with(
            "child",
            fake_driver::env(&lib, driver),
            Duration::from_secs(120),
        );
        assert!(
            status.success() && printed.contains(&format!("child done: {}", driver.name())),
            "{driver:?}: {status:?}\n{printed}"
        );
    }
}

/// `stoker args` with the stand-in driver from `lib` behaving as `driver`.
fn stoker_under(lib: &Path, driver: Driver, args: &[&str]) -> std::process::Output {
    let mut cmd = Command::new(STOKER);
    cmd.args(args)
        .envs(fake_driver::env(lib, driver))
        .env("STOKER_LOG", "warn");
    for v in ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"] {
        cmd.env_remove(v);
    }
    run_within(cmd, LIMIT)
}

#[test]
fn the_cli_falls_back_or_fails_clearly_under_each_unusable_driver() {
    let dir = tempfile::tempdir().unwrap();
    let lib = fake_driver::build(dir.path());
    let ds = dir.path().join("ds");
    sample_dataset(&ds);
    let ds = ds.to_str().unwrap();
    let photo = sample_photos()[0].to_str().unwrap().to_owned();

    for driver in Driver::ALL {
        let says = driver.says();
        // decode --backend auto: the CPU decodes it, and a note says why.
        let out = stoker_under(
            &lib,
            driver,
            &["decode", &photo, "--backend", "auto", "--json"],
        );
        assert!(out.status.success(), "{driver:?}: {}", text(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["backend"], "cpu", "{driver:?}: {v}");
        let notes = v["notes"].as_array().unwrap();
        let note = notes[0].as_str().unwrap();
        assert!(
            notes.len() == 1
                && note.starts_with("device auto fell back to the CPU: ")
                && note.contains(says),
            "{driver:?}: {v}"
        );

        // decode --backend nvjpeg: an error that says why, no panic.
        let out = stoker_under(&lib, driver, &["decode", &photo, "--backend", "nvjpeg"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(says) && !err.contains("panicked"),
            "{driver:?}: {}",
            text(&out)
        );

        // bench --device auto: every CPU stage runs, and the table says why not the GPU.
        let quick = ["--seconds", "0.1", "--batch", "4", "--size", "32"];
        let mut args = vec!["bench", ds, "--device", "auto"];
        args.extend(quick);
        let out = stoker_under(&lib, driver, &args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{driver:?}: {}", text(&out));
        let line = stdout
            .lines()
            .find(|l| l.contains("device auto fell back to the CPU"))
            .unwrap_or_else(|| panic!("{driver:?}: no fallback line:\n{}", text(&out)));
        assert!(line.contains(says), "{driver:?}: {line}");

        // bench --device cuda:0: an error that says why, no panic.
        let mut args = vec!["bench", ds, "--device", "cuda:0"];
        args.extend(quick);
        let out = stoker_under(&lib, driver, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(says) && !err.contains("panicked"),
            "{driver:?}: {}",
            text(&out)
        );
    }
}
