//! Why a merge into a directory that already holds a finished dataset is refused. What to
//! do next differs: a part directory given as the root is merged from its parent; parts
//! left beside their own merge (one that could not remove them) may go; parts that are
//! not that dataset's are the only copies of their records and must not.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::manifest::Manifest;
use crate::text::Lossless;

/// The reason for [`crate::FormatError::OutputExists`] when `out` holds `manifest.json`
/// beside the part directories `parts` (found there, sorted).
pub(super) fn finished_reason(out: &Path, parts: &[PathBuf]) -> String {
    const FINISHED: &str = "already holds a finished dataset (manifest.json)";
    let Ok(m) = Manifest::read(out) else {
        return format!("{FINISHED}; nothing to merge into it");
    };
    if let Some(p) = &m.part {
        // `out` may be `.` or end in `..`: the root is the parent of where it leads.
        let root = std::fs::canonicalize(out)
            .ok()
            .and_then(|o| o.parent().map(Path::to_path_buf))
            .unwrap_or_else(|| out.join(".."));
        return format!(
            "is part {} of {} of a partitioned conversion, not the root the parts were converted into: merge that root (`stoker merge {}`)",
            p.index,
            p.count,
            root.lossless()
        );
    }
    if parts.is_empty() {
        return format!("{FINISHED}; nothing to merge into it");
    }
    let ours: HashSet<(u64, u64)> = m
        .shards
        .iter()
        .filter_map(|s| std::fs::metadata(out.join(&s.file)).ok())
        .map(|md| (md.dev(), md.ino()))
        .collect();
    let (merged, foreign): (Vec<_>, Vec<_>) = parts.iter().partition(|d| merged_into(d, &ours));
    let names = |dirs: &[&PathBuf]| {
        let mut names: Vec<String> = dirs
            .iter()
            .take(3)
            .map(|d| {
                Path::new(d.file_name().unwrap_or_default())
                    .lossless()
                    .to_string()
            })
            .collect();
        if dirs.len() > 3 {
            names.push(format!("and {} more", dirs.len() - 3));
        }
        names.join(", ")
    };
    match (merged.is_empty(), foreign.is_empty()) {
        (_, true) => format!(
            "{FINISHED}, merged from the part directories left beside it (the shards they still hold are its shards' files): they can be deleted"
        ),
        (true, false) => format!(
            "{FINISHED}, which the part directories in it ({} of them) were not merged into: they hold records of their own, so keep them; move them to a directory of their own and merge them there",
            parts.len()
        ),
        (false, false) => format!(
            "{FINISHED}; of the part directories in it, {} were merged into it and can be deleted, but {} were not: they hold records of their own, so keep them; move them to a directory of their own and merge them there",
            names(&merged),
            names(&foreign)
        ),
    }
}

/// Whether the part directory `dir` was merged into the dataset whose shard files are
/// `ours`: it holds shard files, each one of them (hard links), as a merge that could not
/// remove it left it, with or without its manifest.
fn merged_into(dir: &Path, ours: &HashSet<(u64, u64)>) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    let mut shards = 0;
    for e in entries.flatten() {
        if !crate::out_dir::is_shard_file(e.file_name().as_encoded_bytes()) {
            continue;
        }
        match std::fs::metadata(e.path()) {
            Ok(md) if ours.contains(&(md.dev(), md.ino())) => shards += 1,
            _ => return false,
        }
    }
    // One with no shard file is not told apart from a part still starting.
    shards > 0
}
