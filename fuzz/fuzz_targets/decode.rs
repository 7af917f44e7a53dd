//! CPU decode on arbitrary bytes: no panic escapes (third-party panics become
//! `DecodeError::Panicked`, which libFuzzer then reports as a finding through
//! the assertion below), errors are "bad input", output sizes match.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stoker_decode::{CpuDecoder, DecodeError, Limits};

fuzz_target!(|data: &[u8]| {
    // Small limit: fuzzed size fields must not make runs slow.
    let dec = CpuDecoder::new(Limits {
        max_pixels: 1 << 22,
    });
    match dec.decode_to_vec(data) {
        Ok((info, rgb)) => assert_eq!(rgb.len(), info.rgb_len()),
        Err(DecodeError::Panicked { decoder, message }) => {
            panic!("{decoder} panicked (caught): {message}")
        }
        Err(e) => assert!(e.is_bad_input(), "{e}"),
    }
    // The decode that stops after the first rows (what the CPU loader uses).
    if let Ok(info) = stoker_decode::probe(data, dec.limits()) {
        let mut out = vec![0u8; info.rgb_len()];
        match dec.decode_top_into_routed(data, &mut out, (info.height / 3).max(1)) {
            Ok(_) => {}
            Err(DecodeError::Panicked { decoder, message }) => {
                panic!("{decoder} panicked (caught): {message}")
            }
            Err(e) => assert!(e.is_bad_input(), "{e}"),
        }
    }
});
