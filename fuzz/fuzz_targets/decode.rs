//! CPU decode on arbitrary bytes: no panic escapes (third-party panics become
//! `DecodeError::Panicked`, which libFuzzer then reports as a finding through
//! the assertion below), errors are "bad input", output sizes match.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stoker_decode::{CpuDecoder, DecodeError, Limits};

#[path = "../../decode/tests/common/partial.rs"]
mod partial;

fuzz_target!(|data: &[u8]| {
    // Small limit: fuzzed size fields must not make runs slow.
    let dec = CpuDecoder::new(Limits {
        max_pixels: 1 << 22,
        ..Limits::default()
    });
    match dec.decode_to_vec(data) {
        Ok((info, rgb)) => assert_eq!(rgb.len(), info.rgb_len()),
        Err(DecodeError::Panicked { decoder, message }) => {
            panic!("{decoder} panicked (caught): {message}")
        }
        Err(e) => assert!(e.is_bad_input(), "{e}"),
    }
    // The decodes that stop after the first rows and that skip what lies outside a
    // region (what the loaders use).
    if let Ok(info) = stoker_decode::probe(data, dec.limits()) {
        for r in partial::partial_decodes(&dec, data, &info) {
            match r {
                Ok(_) => {}
                Err(DecodeError::Panicked { decoder, message }) => {
                    panic!("{decoder} panicked (caught): {message}")
                }
                Err(e) => assert!(e.is_bad_input(), "{e}"),
            }
        }
    }
});
