//! Our zune-jpeg fork's baseline decode allocates with `stoker_zeroed` (STOKER-PATCH.md
//! change 15), so memory it cannot have is the `STOKER_NO_MEMORY` error that `CpuDecoder`
//! turns into `DecodeError::OutOfMemory`, where upstream's `vec![0; len]` aborted: a
//! red-team's `stoker verify --decode` under a memory limit died with SIGABRT in the
//! baseline path's upsampler scratch. That small allocation cannot be made to fail
//! alone; the large one beside it, a baseline image whose components come in separate
//! scans (the whole image's coefficients, as a progressive image holds them), can, and
//! this test makes it fail through the fork itself (`CpuDecoder` routes such files to
//! jpeg-decoder).
#![cfg(target_os = "linux")]

use std::time::Duration;

use stoker_zune_jpeg::errors::{DecodeErrors, STOKER_NO_MEMORY};
use stoker_zune_jpeg::JpegDecoder;
use zune_core::bytestream::ZCursor;

const CHILD: &str = "STOKER_MEMORY_LIMIT_CHILD";
const SIDE: u16 = 6000;

/// The corpus's 4:4:4 non-interleaved baseline file with its frame header saying
/// `SIDE`×`SIDE`: the output is 108 MB, each component's coefficients 72 MB, allocated
/// before the (now too short) scan data is read. Without a limit it decodes (the rest
/// filled in as recovered).
fn large_non_interleaved() -> Vec<u8> {
    let path = stoker_testdata::dir()
        .join("conformance/core/jxl__jxl__flower__flower_small.q85_444_non_interleaved.jpg");
    let mut data = std::fs::read(&path).unwrap();
    let sof = data
        .windows(2)
        .position(|w| w == [0xFF, 0xC0])
        .expect("SOF0");
    data[sof + 5..sof + 7].copy_from_slice(&SIDE.to_be_bytes());
    data[sof + 7..sof + 9].copy_from_slice(&SIDE.to_be_bytes());
    data
}

/// This process's address space now, in bytes (VmSize).
fn mapped() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmSize:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb << 10
}

#[test]
fn coefficients_of_separate_scans_that_cannot_be_allocated_are_an_error_not_an_abort() {
    if std::env::var_os(CHILD).is_some() {
        let data = large_non_interleaved();
        let pixels = u64::from(SIDE) * u64::from(SIDE) * 3;
        // Room for the output and 40 MB more: not for one component's 72 MB.
        let limit = mapped() + pixels + (40 << 20);
        let rl = libc::rlimit {
            rlim_cur: limit,
            rlim_max: libc::RLIM_INFINITY,
        };
        // SAFETY: a valid rlimit for RLIMIT_AS; lowering a limit has no memory effect.
        assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &rl) }, 0);
        match JpegDecoder::new(ZCursor::new(&data[..])).decode() {
            Err(DecodeErrors::FormatStatic(m)) if m == STOKER_NO_MEMORY => println!("no memory"),
            Err(e) => println!("other error: {e:?}"),
            Ok(v) => println!("decoded {} bytes", v.len()),
        }
        return;
    }
    let (status, printed) = stoker_testdata::child::run_test(
        "coefficients_of_separate_scans_that_cannot_be_allocated_are_an_error_not_an_abort",
        (CHILD, "1"),
        Duration::from_secs(120),
    );
    assert!(status.success(), "{status:?}: {printed}");
    assert!(printed.contains("no memory"), "{printed}");
}
