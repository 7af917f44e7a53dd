//! A process that decoded on the CPU and then forks (a PyTorch `DataLoader` starting its
//! worker processes after the training process decoded) must give children that decode
//! too. A child gets the parent's memory, stoker's decode pool included, but none of the
//! pool's threads: work installed on that pool there waited for ever.

mod common;

use std::time::Duration;

use stoker_decode::{probe, CpuDecoder, Limits};

/// Decodes `photos` in one `decode_batch` (on stoker's decode pool); true when every one
/// decoded.
fn decode_all(photos: &[Vec<u8>]) -> bool {
    let dec = CpuDecoder::new(Limits::default());
    let inputs: Vec<&[u8]> = photos.iter().map(Vec::as_slice).collect();
    let mut bufs: Vec<Vec<u8>> = photos
        .iter()
        .map(|p| vec![0; probe(p, dec.limits()).map_or(0, |i| i.rgb_len())])
        .collect();
    let mut outputs: Vec<&mut [u8]> = bufs.iter_mut().map(Vec::as_mut_slice).collect();
    dec.decode_batch(&inputs, &mut outputs)
        .iter()
        .all(Result::is_ok)
}

#[test]
fn a_child_forked_after_a_batch_decode_decodes_too() {
    let dir = common::data_dir().join("imagefolder/caer");
    let photos: Vec<Vec<u8>> = common::jpegs_in(&dir)
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect();
    assert!(photos.len() > 1, "photos in {}", dir.display());
    assert!(decode_all(&photos), "the parent's decode failed");
    let status =
        stoker_testdata::child::check_in_fork(Duration::from_secs(30), || decode_all(&photos));
    assert_eq!(
        status,
        Some(0),
        "the child's decode failed, or (None) still ran 30 s after the fork"
    );
}
