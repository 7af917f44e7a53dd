//! Whether the parts found make the whole set `0..count`, and which are missing.

use std::path::{Path, PathBuf};

use crate::manifest::{Manifest, PartInfo};
use crate::text::Lossless;
use crate::FormatError;

/// Refuses a part given twice, or a set that is not every part `0..count`.
pub(super) fn check_complete(
    out: &Path,
    loaded: &[(PathBuf, Manifest, PartInfo)],
) -> Result<(), FormatError> {
    let refuse = |path: &Path, reason: String| FormatError::MergeRefused {
        path: path.to_path_buf(),
        reason,
    };
    let fp = &loaded[0].2;
    for w in loaded.windows(2) {
        if w[0].2.index == w[1].2.index {
            return Err(refuse(
                &w[1].0,
                format!(
                    "part {} is given twice (also {})",
                    w[1].2.index,
                    w[0].0.lossless()
                ),
            ));
        }
    }
    let count = fp.count as usize;
    if loaded.len() != count {
        let have: Vec<u32> = loaded.iter().map(|(_, _, p)| p.index).collect();
        return Err(refuse(
            out,
            format!(
                "{} of {count} parts found; missing part(s) {}: run or rerun those tasks first",
                loaded.len(),
                missing_ranges(&have, fp.count)
            ),
        ));
    }
    Ok(())
}

/// The indices below `count` not in `have` (sorted, distinct), as ranges: `3, 5-9`. A job
/// array of 100,000 tasks with two done gave a line of every missing number.
fn missing_ranges(have: &[u32], count: u32) -> String {
    let mut ranges = Vec::new();
    let mut next = 0u32;
    for &i in have.iter().chain(std::iter::once(&count)) {
        match i.saturating_sub(next) {
            0 => {}
            1 => ranges.push(next.to_string()),
            _ => ranges.push(format!("{next}-{}", i - 1)),
        }
        next = i.saturating_add(1);
    }
    ranges.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_parts_are_named_as_ranges() {
        assert_eq!(missing_ranges(&[1, 2], 99_999), "0, 3-99998");
        assert_eq!(missing_ranges(&[0, 4, 6], 8), "1-3, 5, 7");
        assert_eq!(missing_ranges(&[0, 1, 2], 4), "3");
    }
}
