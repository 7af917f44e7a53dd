//! The conversion's own output directory, which is never one of its inputs.
//!
//! An output directory inside the source tree (`stoker convert data data/stoker`) does not
//! exist when the first run lists the source, but every later listing (`--resume` after a
//! kill, a full disk or a `--strict` stop; another part's task) would find it: as a class
//! folder that shifts every label after it, with the run's own leftovers as inputs, and
//! with a listing fingerprint that no longer matches the journal. The listing therefore
//! leaves the output directory out, whether or not it exists yet, so every run of the same
//! conversion lists the same inputs.

use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use crate::path_nesting::{is_within, resolve};
use crate::text::Lossless;
use crate::FormatError;

/// Where the output directory is, as the listing meets it.
#[derive(Debug, Default)]
pub(crate) struct OwnOutput {
    /// The output directory with symlinks, `.` and `..` resolved (where it will be when it
    /// does not exist yet); `None` when nothing the listing reads can lie inside it.
    real: Option<PathBuf>,
    /// The path the ImageFolder walk spells the output directory with (the source root as
    /// given, joined with the output's place below it), so it is recognized by name even
    /// before it exists (a part task listing while another creates it).
    walked: Option<PathBuf>,
    /// The output directory's device and inode, when it exists: recognized however the
    /// walk reaches it (a symlink inside the source).
    id: Option<(u64, u64)>,
    /// A list source's root, resolved once for every row.
    list_root: Option<PathBuf>,
}

impl OwnOutput {
    /// The output directory `out` of a conversion of the ImageFolder tree `root`.
    ///
    /// # Errors
    ///
    /// [`FormatError::InvalidOptions`] when the conversion would create a folder of the
    /// source tree other than `out` itself (`SRC/new/out` with `SRC/new` missing): the
    /// first listing would not see it, later ones would see it as an empty class. I/O
    /// errors resolving `out`.
    pub(crate) fn in_tree(root: &Path, out: &Path) -> Result<OwnOutput, FormatError> {
        let (real, created) = resolve(out).map_err(|e| FormatError::io(out, e))?;
        let id = std::fs::metadata(&real).ok().map(|m| (m.dev(), m.ino()));
        // A source that cannot be resolved is refused by the listing with its own words.
        let Ok(root_real) = std::fs::canonicalize(root) else {
            return Ok(OwnOutput::default());
        };
        let Ok(below) = real.strip_prefix(&root_real) else {
            // Outside the tree, it can still be reached through a symlink in it.
            return Ok(OwnOutput {
                id,
                ..OwnOutput::default()
            });
        };
        if below.as_os_str().is_empty() {
            // The source itself: refused as a non-empty output directory.
            return Ok(OwnOutput::default());
        }
        if created > 1 {
            let first_new = root_real.join(
                below
                    .components()
                    .take((below.components().count() + 1).saturating_sub(created))
                    .collect::<PathBuf>(),
            );
            return Err(FormatError::InvalidOptions(format!(
                "the output directory {} lies inside the source {} and converting would create {} there too, which a rerun or --resume would then list as a class; create it first, or give an output directory outside the source",
                out.lossless(),
                root.lossless(),
                first_new.lossless()
            )));
        }
        Ok(OwnOutput {
            walked: Some(root.join(below)),
            real: Some(real),
            id,
            list_root: None,
        })
    }

    /// The output directory `out` of a conversion of a list whose rows are relative to
    /// `root`: a row may reach anywhere through `..`, so each is checked.
    ///
    /// # Errors
    ///
    /// I/O errors resolving `out`.
    pub(crate) fn for_list(root: &Path, out: &Path) -> Result<OwnOutput, FormatError> {
        let (real, _) = resolve(out).map_err(|e| FormatError::io(out, e))?;
        Ok(OwnOutput {
            real: Some(real),
            walked: None,
            id: None,
            list_root: std::fs::canonicalize(root).ok(),
        })
    }

    /// True when the directory `path` (whose metadata, symlinks followed, is `meta`) is
    /// the output directory: the walk leaves it, and all below it, out.
    pub(crate) fn is(&self, path: &Path, meta: &std::fs::Metadata) -> bool {
        self.id == Some((meta.dev(), meta.ino())) || self.walked.as_deref() == Some(path)
    }

    /// Why the list row `rel` (relative to the list's root, or absolute) is not an input,
    /// when it lies inside the output directory (decided on the path's text, `..` taken
    /// lexically from the resolved root: one `canonicalize` per row would be a system call
    /// per image).
    pub(crate) fn refuses_row(&self, rel: &Path) -> Option<String> {
        let out = self.real.as_ref()?;
        let mut path = match rel.is_absolute() {
            true => PathBuf::from("/"),
            false => self.list_root.clone()?,
        };
        for c in rel.components() {
            match c {
                Component::ParentDir => {
                    path.pop();
                }
                Component::Normal(name) => path.push(name),
                _ => {}
            }
        }
        is_within(&path, out).then(|| {
            format!(
                "inside the conversion's output directory {}: its own files are never inputs",
                out.lossless()
            )
        })
    }
}
