//! The loaders' partial decodes of one input, shared by `tests/robustness.rs` (through
//! `common`) and the `decode` fuzz target (which includes this file by path), so both
//! check the same calls.

use stoker_decode::{CpuDecoder, DecodeError, ImageInfo, Region, Route};

/// Decodes `data`, whose header `probe` read as `info`, the two ways the loaders do:
/// stopping after the first third of the rows, and only a central region.
pub fn partial_decodes(
    dec: &CpuDecoder,
    data: &[u8],
    info: &ImageInfo,
) -> [Result<(ImageInfo, Route), DecodeError>; 2] {
    let mut out = vec![0u8; info.rgb_len()];
    let (w, h) = (info.width, info.height);
    let region = Region {
        x: w / 3,
        y: h / 4,
        width: (w / 2).max(1),
        height: (h / 2).max(1),
    };
    [
        dec.decode_top_into_routed(data, &mut out, (h / 3).max(1)),
        dec.decode_region_into_routed(data, &mut out, region),
    ]
}
