//! Helpers shared by the integration tests that compare datasets record by record.

use std::path::Path;

use stoker_formats::Dataset;

/// Every record of the dataset at `path` as (label, payload), in index order: what a
/// reader sees, whatever the shard boundaries.
pub fn records(path: &Path) -> Vec<(u32, Vec<u8>)> {
    let ds = Dataset::open(path).unwrap();
    let r = ds.reader().unwrap();
    (0..ds.len())
        .map(|i| {
            let rec = r.get(i).unwrap();
            (rec.header.label, rec.payload.to_vec())
        })
        .collect()
}
