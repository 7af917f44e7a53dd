//! Why a merge into a directory that already holds a finished dataset is refused. What to
//! do next differs: a part directory given as the root is merged from its parent; parts
//! left beside their own merge (one that could not remove them) may go; parts that are
//! not that dataset's are the only copies of their records and must not.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::manifest::Manifest;
use crate::text::Lossless;

/// The reason for [`crate::FormatError::OutputExists`] when `out` holds `manifest.json`.
pub(super) fn finished_reason(out: &Path) -> String {
    const FINISHED: &str = "already holds a finished dataset (manifest.json)";
    let Ok(m) = Manifest::read(out) else {
        return format!("{FINISHED}; nothing to merge into it");
    };
    if let Some(p) = &m.part {
        let parent = out
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        return format!(
            "is part {} of {} of a partitioned conversion, not the root the parts were converted into: merge that root (`stoker merge {}`)",
            p.index,
            p.count,
            parent.lossless()
        );
    }
    let parts: Vec<_> = std::fs::read_dir(out)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("part-") && e.path().is_dir())
        .map(|e| e.path())
        .collect();
    if parts.is_empty() {
        return format!("{FINISHED}; nothing to merge into it");
    }
    let ours: HashSet<(u64, u64)> = m
        .shards
        .iter()
        .filter_map(|s| std::fs::metadata(out.join(&s.file)).ok())
        .map(|md| (md.dev(), md.ino()))
        .collect();
    // Merged: each part's shards are the same files (hard links) as the dataset's.
    let merged = parts.iter().all(|dir| {
        Manifest::read(dir).is_ok_and(|pm| {
            pm.part.is_some()
                && pm.shards.iter().all(|s| {
                    std::fs::metadata(dir.join(&s.file))
                        .is_ok_and(|md| ours.contains(&(md.dev(), md.ino())))
                })
        })
    });
    if merged {
        format!(
            "{FINISHED}, merged from the part directories left beside it (their shards are its shards' files): they can be deleted"
        )
    } else {
        format!(
            "{FINISHED}, which the part directories in it ({} of them) were not merged into: they hold records of their own, so keep them; move them to a directory of their own and merge them there",
            parts.len()
        )
    }
}
