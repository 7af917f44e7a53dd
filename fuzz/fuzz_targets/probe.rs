//! `probe` on arbitrary bytes: never panics, never reports more pixels than
//! the limit, and agrees with itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stoker_decode::{probe, Limits};

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_pixels: 1 << 24,
        ..Limits::default()
    };
    if let Ok(info) = probe(data, &limits) {
        assert!(info.pixels() <= limits.max_pixels);
        assert_eq!(info.rgb_len() as u64, info.pixels() * 3);
        assert_eq!(probe(data, &limits).ok(), Some(info));
    }
});
