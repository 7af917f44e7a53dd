//! The parts' class lists, kept once: parts of one conversion have the same classes, and
//! a merge holds every part's manifest at once, so a list in each grew with parts ×
//! classes (web-scale class lists in a job array of a thousand parts: gigabytes).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::manifest::Manifest;

/// The first part's class list, and the parts whose list equalled it and was dropped.
#[derive(Default)]
pub(super) struct SharedClasses {
    kept: Option<Vec<String>>,
    elided: HashSet<PathBuf>,
}

impl SharedClasses {
    /// Takes the classes of the part in `dir` out of `m` when they are the kept list (the
    /// first part's become it); a part with other classes keeps its own, for the merge to
    /// name the difference.
    pub(super) fn share(&mut self, dir: &Path, m: &mut Manifest) {
        let same = match &self.kept {
            None => {
                self.kept = Some(std::mem::take(&mut m.classes));
                true
            }
            Some(c) => *c == m.classes,
        };
        if same {
            m.classes = Vec::new();
            self.elided.insert(dir.to_path_buf());
        }
    }

    /// The classes of the part in `dir`, whose manifest is `m`.
    pub(super) fn of<'a>(&'a self, dir: &Path, m: &'a Manifest) -> &'a [String] {
        match &self.kept {
            Some(kept) if self.elided.contains(dir) => kept,
            _ => &m.classes,
        }
    }

    /// Gives the kept list back to the manifest of the part in `dir` if it was taken from
    /// it (the merged manifest's classes come from the first part's).
    pub(super) fn restore(self, dir: &Path, m: &mut Manifest) {
        if self.elided.contains(dir) {
            m.classes = self.kept.unwrap_or_default();
        }
    }
}
