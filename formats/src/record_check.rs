//! What makes a record unfit to train on beyond its bytes (those the CRCs cover): a label
//! past the class list, a raw record's geometry. One wording for everything that judges
//! records: `verify`, `inspect --record`, the writer, the loader and Python's `Dataset`;
//! and the class list's own check, names given twice.

use crate::{FormatError, RawSize, RAW_CHANNELS};

/// Why `label` cannot be trained on in a dataset of `classes` class names: past the list,
/// it reaches a loss as an out-of-range class (a device-side assert in a CUDA loss, far
/// from its cause). `None` for a label that names a class.
///
/// # Examples
///
/// ```
/// use stoker_formats::label_problem;
/// assert_eq!(label_problem(1, 2), None);
/// assert_eq!(label_problem(2, 2).unwrap(), "label 2 is outside the class list (2 classes)");
/// ```
pub fn label_problem(label: u32, classes: usize) -> Option<String> {
    // `u32` always fits `usize` on the 64-bit targets stoker builds for.
    (label as usize >= classes)
        .then(|| format!("label {label} is outside the class list ({classes} classes)"))
}

/// The problems of a raw record of `size` with a `payload_len`-byte payload, in a dataset
/// whose raw records are `expected` (the manifest's size; the first record's while
/// writing): a side or channel count of 0, a channel count a raw record cannot have, a payload other than
/// the sides' product, another size than the dataset's. Empty for a sound one. Sizes are
/// written width x height x channels, as `stoker convert --size WxH` and `inspect` give them.
///
/// # Examples
///
/// ```
/// use stoker_formats::{raw_problems, RawSize};
/// let size = RawSize { height: 2, width: 3, channels: 3 };
/// assert!(raw_problems(size, 18, Some(size)).is_empty());
/// assert_eq!(raw_problems(size, 17, None), ["raw payload is 17 bytes, 3x2x3 needs 18"]);
/// ```
pub fn raw_problems(size: RawSize, payload_len: u64, expected: Option<RawSize>) -> Vec<String> {
    let RawSize {
        height: h,
        width: w,
        channels: c,
    } = size;
    let mut problems = Vec::new();
    if h == 0 || w == 0 || c == 0 {
        problems.push(format!(
            "raw record of {w}x{h}x{c} has no pixels: width, height and channels must be at least 1"
        ));
    }
    if c != 0 && !RAW_CHANNELS.contains(&c) {
        problems.push(format!(
            "raw record of {w}x{h}x{c} has {c} channels: a raw record holds gray (1) or RGB (3) pixels"
        ));
    }
    // Checked: a damaged header's sides can multiply past u64.
    let want = size.bytes();
    if want != Some(payload_len) {
        let want = want.map_or("more than 2^64".into(), |b| b.to_string());
        problems.push(format!(
            "raw payload is {payload_len} bytes, {w}x{h}x{c} needs {want}"
        ));
    }
    if let Some(e) = expected.filter(|e| *e != size) {
        problems.push(format!(
            "raw size {w}x{h}x{c} differs from the dataset's {}x{}x{}",
            e.width, e.height, e.channels
        ));
    }
    problems
}

/// Refuses class names given twice: their labels would be two classes that nothing
/// tells apart.
pub(crate) fn refuse_duplicate_classes(classes: &[String]) -> Result<(), FormatError> {
    let mut first = std::collections::HashMap::with_capacity(classes.len());
    for (label, name) in classes.iter().enumerate() {
        if let Some(earlier) = first.insert(name.as_str(), label) {
            return Err(FormatError::InvalidOptions(format!(
                "classes has a name twice: {name:?} is labels {earlier} and {label}; class names must be unique"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size(height: u32, width: u32, channels: u8) -> RawSize {
        RawSize {
            height,
            width,
            channels,
        }
    }

    #[test]
    fn a_raw_record_is_held_to_its_payload_and_the_datasets_size() {
        let dataset = size(6, 8, 3);
        assert!(raw_problems(dataset, 144, Some(dataset)).is_empty());
        // The same bytes as another shape: sound in itself, not the dataset's size.
        assert_eq!(
            raw_problems(size(1, 48, 3), 144, Some(dataset)),
            ["raw size 48x1x3 differs from the dataset's 8x6x3"]
        );
        assert!(raw_problems(size(1, 48, 3), 144, None).is_empty());
        let overflow = raw_problems(size(0x8000_0180, 2, 1), 768, Some(dataset));
        assert_eq!(overflow.len(), 2, "{overflow:?}");
        assert!(overflow[0].contains("needs 4294968064"), "{overflow:?}");
        assert!(raw_problems(size(6, 8, 2), 96, None)[0].contains("has 2 channels"));
        // No pixels: a product of 0 matched an empty payload.
        assert_eq!(
            raw_problems(size(0, 8, 3), 0, None),
            ["raw record of 8x0x3 has no pixels: width, height and channels must be at least 1"]
        );
    }

    #[test]
    fn a_label_must_name_a_class() {
        assert_eq!(label_problem(0, 1), None);
        assert!(label_problem(0, 0).is_some());
        assert!(label_problem(u32::MAX, 1_000)
            .unwrap()
            .contains("label 4294967295"));
    }
}
