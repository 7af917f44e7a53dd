//! Which input each record of a conversion came from, for the source map written beside
//! the manifest ([`crate::SourceMap`]).
//!
//! Record `i` is the `i`-th input of the listing that was not skipped, so the map follows
//! from the listing and the positions of the skipped inputs, which the pipeline notes as it
//! writes (and the journal keeps across a `--resume`): nothing per record is held while the
//! conversion runs.

use std::collections::HashMap;
use std::path::Path;

use super::journal::Totals;
use super::options::ConvertOptions;
use super::source::Input;
use crate::held_dir::HeldDir;
use crate::manifest::SourcesEntry;
use crate::writer::DatasetWriter;
use crate::FormatError;

/// Writes the source map of a conversion of `inputs` (the listing, or a part's slice of
/// it) from `root` into `out`: `None`, writing nothing, when which inputs were skipped is
/// not known exactly (see [`skipped_positions`]).
fn write(
    out: &HeldDir,
    root: &Path,
    inputs: &[Input],
    totals: &Totals,
) -> Result<Option<SourcesEntry>, FormatError> {
    let Some(skipped) = skipped_positions(inputs, totals) else {
        return Ok(None);
    };
    let names = || {
        let mut next_skip = skipped.iter().copied().peekable();
        inputs.iter().enumerate().filter_map(move |(k, input)| {
            if next_skip.next_if_eq(&(k as u64)).is_some() {
                return None;
            }
            Some(crate::source_map::relative_name(root, &input.path))
        })
    };
    crate::source_map::write(out, names).map(Some)
}

/// Writes the source map of the conversion of `inputs` into the writer's directory, for
/// `writer`'s manifest to name; returns the warning of a conversion that could not.
pub(super) fn write_into(
    writer: &mut DatasetWriter,
    options: &ConvertOptions,
    inputs: &[Input],
    totals: &Totals,
) -> Result<Option<String>, FormatError> {
    match write(writer.dir(), options.source.root(), inputs, totals) {
        Ok(Some(sources)) => {
            writer.set_sources(sources);
            Ok(None)
        }
        Ok(None) => Ok(Some(NO_MAP_WARNING.into())),
        Err(e) => Err(writer.space_error(e)),
    }
}

/// The warning of a conversion that wrote no source map.
const NO_MAP_WARNING: &str = "no source map written (sources.bin): this conversion continued a journal written by an older stoker, which did not record where its skipped inputs were, and their names occur more than once in the listing; convert again into a new directory for a dataset that names each record's source";

/// The positions in `inputs` of the skipped inputs, in order: as the pipeline noted them,
/// or, after resuming a journal that did not record them (an older build's), found by
/// name, which is exact only when no skipped input's name occurs twice in the listing
/// (a list file naming a file twice, a tar holding a member twice); `None` otherwise.
fn skipped_positions(inputs: &[Input], totals: &Totals) -> Option<Vec<u64>> {
    if let Some(at) = &totals.skipped_at {
        // Checked on resume against the listing; a mismatch here is a bug, refused by
        // writing no map rather than a wrong one.
        let fits = at.len() == totals.skipped.len()
            && at.windows(2).all(|w| w[0] < w[1])
            && at.iter().zip(&totals.skipped).all(|(&p, s)| {
                inputs
                    .get(p as usize)
                    .is_some_and(|input| input.path == s.path)
            });
        return fits.then(|| at.clone());
    }
    let mut seen: HashMap<&Path, u32> = totals
        .skipped
        .iter()
        .map(|s| (s.path.as_path(), 0))
        .collect();
    for input in inputs {
        if let Some(n) = seen.get_mut(input.path.as_path()) {
            *n += 1;
            if *n > 1 {
                return None;
            }
        }
    }
    let mut positions = Vec::with_capacity(totals.skipped.len());
    let mut wanted = totals.skipped.iter().peekable();
    for (k, input) in inputs.iter().enumerate() {
        if wanted.next_if(|s| s.path == input.path).is_some() {
            positions.push(k as u64);
        }
    }
    (wanted.peek().is_none()).then_some(positions)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::report::Skipped;
    use std::path::PathBuf;

    fn inputs(names: &[&str]) -> Vec<Input> {
        names
            .iter()
            .map(|n| Input::file(PathBuf::from(n), 0))
            .collect()
    }

    fn skips(names: &[&str]) -> Vec<Skipped> {
        names
            .iter()
            .map(|n| Skipped {
                path: n.into(),
                reason: "bad".into(),
            })
            .collect()
    }

    #[test]
    fn noted_positions_are_taken_as_they_are() {
        let listed = inputs(&["a", "b", "a"]);
        let totals = Totals {
            skipped: skips(&["a"]),
            skipped_at: Some(vec![2]),
            ..Totals::default()
        };
        assert_eq!(skipped_positions(&listed, &totals), Some(vec![2]));
    }

    #[test]
    fn without_positions_a_repeated_skipped_name_gives_no_map() {
        // Found by name, the skip would be taken for the first "a" and records 0 and 1
        // named "b", "a" where they are "a", "b".
        let totals = Totals {
            skipped: skips(&["a"]),
            skipped_at: None,
            ..Totals::default()
        };
        assert_eq!(skipped_positions(&inputs(&["a", "b", "a"]), &totals), None);
        assert_eq!(
            skipped_positions(&inputs(&["x", "a", "b"]), &totals),
            Some(vec![1])
        );
    }
}
