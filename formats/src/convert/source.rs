//! Listing the inputs of a conversion in a deterministic order.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::FormatError;

/// Labels of a list file must be below this: the class list has one entry per label up to
/// the largest, so a stray `4294967295` would otherwise ask for four billion class names.
pub(crate) const MAX_CLASSES: u32 = 1 << 20;

/// Directories nested deeper than this under a class folder are skipped (and reported).
const MAX_DEPTH: u32 = 64;

/// Where the images come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// An ImageFolder tree: one subdirectory per class (class ids by sorted name), images
    /// anywhere below it. Files directly in the root are not samples and are ignored.
    ImageFolder(PathBuf),
    /// A list file of `relative/path,label` lines; paths are relative to `root`.
    /// Blank lines and lines starting with `#` are ignored, as is a `path,label` header.
    List {
        /// Directory the listed paths are relative to.
        root: PathBuf,
        /// The list file.
        list: PathBuf,
    },
}

/// How an ImageFolder source's directory is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// `Classes` when the root has a subdirectory, else `Flat` (a folder of images alone).
    #[default]
    Auto,
    /// One subdirectory per class; files directly in the root are ignored (and reported).
    Classes,
    /// Unlabelled images: every file under the root, at any depth, is an input of the one
    /// class named after the root folder, label 0.
    Flat,
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Layout::Auto => "auto",
            Layout::Classes => "classes",
            Layout::Flat => "flat",
        })
    }
}

/// One input file and its label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Input {
    pub path: PathBuf,
    pub label: u32,
    /// Why the walker already knows this entry cannot be converted (an unreadable or
    /// repeated directory, a broken symlink): it is skipped and counted like a bad file.
    pub refused: Option<String>,
}

/// The inputs in conversion order, and the class names.
#[derive(Debug)]
pub(crate) struct Listing {
    pub inputs: Vec<Input>,
    pub classes: Vec<String>,
    /// Files directly in an ImageFolder root: not in any class, so not inputs.
    pub ignored: Vec<PathBuf>,
    /// An ImageFolder source was read as one class of unlabelled images.
    pub flat: bool,
}

impl Source {
    /// The source as given, for the manifest's provenance.
    pub fn describe(&self) -> String {
        match self {
            Source::ImageFolder(p) => p.display().to_string(),
            Source::List { root, list } => format!("{} (list {})", root.display(), list.display()),
        }
    }

    #[cfg(test)]
    pub(crate) fn list(&self) -> Result<Listing, FormatError> {
        self.list_as(Layout::Auto)
    }

    /// The inputs; `layout` applies to an ImageFolder source only.
    pub(crate) fn list_as(&self, layout: Layout) -> Result<Listing, FormatError> {
        match self {
            Source::ImageFolder(root) => {
                let flat = match layout {
                    Layout::Flat => true,
                    Layout::Classes => false,
                    Layout::Auto => !has_subdirectory(root)?,
                };
                if flat {
                    list_flat(root)
                } else {
                    list_image_folder(root)
                }
            }
            Source::List { root, list } => list_file(root, list),
        }
    }
}

fn sorted_entries(dir: &Path) -> Result<Vec<std::fs::DirEntry>, std::io::Error> {
    let mut v = std::fs::read_dir(dir)?.collect::<Result<Vec<_>, _>>()?;
    v.sort_by_key(|e| e.file_name());
    Ok(v)
}

/// A directory's identity, to walk each directory once however many links lead to it.
fn dir_id(meta: &std::fs::Metadata) -> (u64, u64) {
    (meta.dev(), meta.ino())
}

fn not_a_directory(root: &Path) -> FormatError {
    // A source that is not there is a missing file (`FileNotFoundError` in Python, the
    // OS's own words on the CLI), not a bad one.
    if let Err(e) = std::fs::metadata(root) {
        return FormatError::io(root, e);
    }
    FormatError::BadSource {
        path: root.to_path_buf(),
        reason: "not a directory (an ImageFolder source has one subdirectory per class)".into(),
    }
}

/// True when `root` has a subdirectory (following symlinks), i.e. looks like classes.
fn has_subdirectory(root: &Path) -> Result<bool, FormatError> {
    if !root.is_dir() {
        return Err(not_a_directory(root));
    }
    let entries = sorted_entries(root).map_err(|e| FormatError::io(root, e))?;
    Ok(entries
        .iter()
        .any(|e| std::fs::metadata(e.path()).is_ok_and(|m| m.is_dir())))
}

/// Every file under `root` as one class named after the folder, label 0.
fn list_flat(root: &Path) -> Result<Listing, FormatError> {
    if !root.is_dir() {
        return Err(not_a_directory(root));
    }
    let root_meta = std::fs::metadata(root).map_err(|e| FormatError::io(root, e))?;
    let name = std::fs::canonicalize(root)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "images".into());
    let mut inputs = Vec::new();
    let mut seen = HashSet::from([dir_id(&root_meta)]);
    walk(root, 0, &mut inputs, 0, &mut seen);
    if inputs.is_empty() {
        return Err(FormatError::BadSource {
            path: root.to_path_buf(),
            reason: "holds no files to convert".into(),
        });
    }
    Ok(Listing {
        inputs,
        classes: vec![name],
        ignored: Vec::new(),
        flat: true,
    })
}

fn list_image_folder(root: &Path) -> Result<Listing, FormatError> {
    if !root.is_dir() {
        return Err(not_a_directory(root));
    }
    let root_meta = std::fs::metadata(root).map_err(|e| FormatError::io(root, e))?;
    let mut classes = Vec::new();
    let mut inputs = Vec::new();
    let mut ignored = Vec::new();
    for entry in sorted_entries(root).map_err(|e| FormatError::io(root, e))? {
        let path = entry.path();
        let Ok(meta) = std::fs::metadata(&path) else {
            ignored.push(path);
            continue;
        };
        if !meta.is_dir() {
            ignored.push(path);
            continue;
        }
        let label = u32::try_from(classes.len()).map_err(|_| FormatError::BadSource {
            path: root.to_path_buf(),
            reason: "more than 2^32 classes".into(),
        })?;
        classes.push(entry.file_name().to_string_lossy().into_owned());
        // Each class walks every directory at most once: a symlink back to the root, the
        // class folder or any folder already listed is a loop (or a duplicate) and is
        // skipped with a reason, so a tree of links cannot multiply the walk.
        let mut seen = HashSet::from([dir_id(&root_meta), dir_id(&meta)]);
        walk(&path, label, &mut inputs, 0, &mut seen);
    }
    if classes.is_empty() {
        return Err(FormatError::BadSource {
            path: root.to_path_buf(),
            reason:
                "no class subdirectories (an ImageFolder source has one subdirectory per class; --layout flat converts a folder of unlabelled images as one class)"
                    .into(),
        });
    }
    Ok(Listing {
        inputs,
        classes,
        ignored,
        flat: false,
    })
}

fn walk(dir: &Path, label: u32, out: &mut Vec<Input>, depth: u32, seen: &mut HashSet<(u64, u64)>) {
    let refuse = |out: &mut Vec<Input>, path: PathBuf, reason: String| {
        out.push(Input {
            path,
            label,
            refused: Some(reason),
        })
    };
    let entries = match sorted_entries(dir) {
        Ok(v) => v,
        Err(e) => return refuse(out, dir.to_path_buf(), format!("unreadable directory: {e}")),
    };
    for entry in entries {
        let path = entry.path();
        let kind = entry.file_type().ok();
        if kind.is_some_and(|t| t.is_file()) {
            // The directory entry's type, read with the listing, already says it is a plain
            // file (not a link, not a directory): no `stat` per image.
            out.push(Input {
                path,
                label,
                refused: None,
            });
            continue;
        }
        let is_link = kind.is_some_and(|t| t.is_symlink());
        // `metadata` follows symlinks; a loop of links or a dangling one fails here.
        let meta = match std::fs::metadata(&path) {
            Ok(m) => m,
            Err(e) if is_link => {
                refuse(out, path, format!("unreadable (broken symlink): {e}"));
                continue;
            }
            Err(e) => {
                refuse(out, path, format!("unreadable: {e}"));
                continue;
            }
        };
        if !meta.is_dir() {
            // Every other entry is an input, image or not: non-images (and non-regular
            // files) are skipped with a reason when read, never silently dropped.
            out.push(Input {
                path,
                label,
                refused: None,
            });
        } else if !seen.insert(dir_id(&meta)) {
            refuse(
                out,
                path,
                "directory already listed under this class (a symlink loop or a second link to it)"
                    .into(),
            );
        } else if depth + 1 > MAX_DEPTH {
            refuse(
                out,
                path,
                format!("directory nested more than {MAX_DEPTH} deep"),
            );
        } else {
            walk(&path, label, out, depth + 1, seen);
        }
    }
}

/// Largest list file read (ImageNet-21k's 14 million lines take under 1 GiB).
const MAX_LIST_BYTES: u64 = 4 << 30;

fn list_file(root: &Path, list: &Path) -> Result<Listing, FormatError> {
    use std::io::Read;
    use std::os::unix::fs::FileTypeExt;
    let io = |e| FormatError::io(list, e);
    // A FIFO is fine (`--list <(generate)`); a device is not a list.
    let kind = std::fs::metadata(list).map_err(io)?.file_type();
    if kind.is_char_device() || kind.is_block_device() || kind.is_dir() || kind.is_socket() {
        return Err(FormatError::BadSource {
            path: list.to_path_buf(),
            reason: "not a file or a pipe".into(),
        });
    }
    let mut text = String::new();
    std::fs::File::open(list)
        .map_err(io)?
        .take(MAX_LIST_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(io)?;
    if text.len() as u64 > MAX_LIST_BYTES {
        return Err(FormatError::BadSource {
            path: list.to_path_buf(),
            reason: format!("longer than {MAX_LIST_BYTES} bytes"),
        });
    }
    let mut inputs = Vec::new();
    let mut max_label: Option<u32> = None;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let bad = |reason: String| FormatError::BadSource {
            path: list.to_path_buf(),
            reason: format!("line {}: {reason}", n + 1),
        };
        let Some((rel, label)) = line.rsplit_once(',') else {
            return Err(bad(format!("{line:?} is not `relative/path,label`")));
        };
        let label = label.trim();
        let label: u32 = match label.parse() {
            Ok(l) => l,
            Err(_) if inputs.is_empty() && label.eq_ignore_ascii_case("label") => continue,
            Err(_) => {
                return Err(bad(format!(
                    "label {label:?} is not a non-negative integer"
                )))
            }
        };
        let rel = Path::new(rel.trim());
        if rel.is_absolute() {
            return Err(bad(format!("path {} must be relative", rel.display())));
        }
        if label >= MAX_CLASSES {
            return Err(bad(format!(
                "label {label} is over the limit of {} (labels index the class list, at most {MAX_CLASSES} classes)",
                MAX_CLASSES - 1
            )));
        }
        max_label = Some(max_label.map_or(label, |m| m.max(label)));
        inputs.push(Input {
            path: root.join(rel),
            label,
            refused: None,
        });
    }
    if inputs.is_empty() {
        return Err(FormatError::BadSource {
            path: list.to_path_buf(),
            reason: "lists no images".into(),
        });
    }
    let classes = (0..=max_label.unwrap_or(0))
        .map(|l| l.to_string())
        .collect();
    Ok(Listing {
        inputs,
        classes,
        ignored: Vec::new(),
        flat: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_file_parses_header_comments_and_commas_in_paths() {
        let dir = tempfile::tempdir().unwrap();
        let list = dir.path().join("l.csv");
        std::fs::write(&list, "path,label\n# comment\n\na,b.jpg,2\nc.png, 0\r\n").unwrap();
        let l = Source::List {
            root: dir.path().into(),
            list: list.clone(),
        }
        .list()
        .unwrap();
        assert_eq!(l.inputs.len(), 2);
        assert_eq!(l.inputs[0].path, dir.path().join("a,b.jpg"));
        assert_eq!(l.inputs[0].label, 2);
        assert_eq!(l.inputs[1].label, 0);
        assert_eq!(l.classes, ["0", "1", "2"]);
        std::fs::write(&list, "a.jpg,x\n").unwrap();
        let err = Source::List {
            root: dir.path().into(),
            list,
        }
        .list()
        .unwrap_err();
        assert!(err.to_string().contains("line 1"), "{err}");
    }

    #[test]
    fn image_folder_is_sorted_and_labels_follow_class_names() {
        let dir = tempfile::tempdir().unwrap();
        for (class, file) in [
            ("b", "2.jpg"),
            ("a", "z.jpg"),
            ("a", "sub/y.jpg"),
            ("b", "1.jpg"),
        ] {
            let p = dir.path().join(class).join(file);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, b"x").unwrap();
        }
        std::fs::write(dir.path().join("README"), b"not a sample").unwrap();
        let l = Source::ImageFolder(dir.path().into()).list().unwrap();
        assert_eq!(l.classes, ["a", "b"]);
        assert_eq!(l.ignored, [dir.path().join("README")]);
        let got: Vec<_> = l
            .inputs
            .iter()
            .map(|i| (i.path.strip_prefix(dir.path()).unwrap().to_owned(), i.label))
            .collect();
        let want: Vec<(PathBuf, u32)> = vec![
            ("a/sub/y.jpg".into(), 0),
            ("a/z.jpg".into(), 0),
            ("b/1.jpg".into(), 1),
            ("b/2.jpg".into(), 1),
        ];
        assert_eq!(got, want);
    }
}

#[cfg(test)]
mod layout_tests {
    use super::*;

    fn tree(files: &[&str]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for f in files {
            let p = dir.path().join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, b"x").unwrap();
        }
        dir
    }

    #[test]
    fn folder_without_class_subdirectories_is_one_class_with_label_0() {
        let dir = tree(&["b.jpg", "a.jpg"]);
        let l = Source::ImageFolder(dir.path().into()).list().unwrap();
        assert!(l.flat);
        let name = dir
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert_eq!(l.classes, [name]);
        let got: Vec<_> = l.inputs.iter().map(|i| (i.path.clone(), i.label)).collect();
        assert_eq!(
            got,
            [(dir.path().join("a.jpg"), 0), (dir.path().join("b.jpg"), 0)]
        );
        // Asked for classes, it is the error it always was.
        let e = Source::ImageFolder(dir.path().into())
            .list_as(Layout::Classes)
            .unwrap_err();
        assert!(e.to_string().contains("--layout flat"), "{e}");
    }

    #[test]
    fn mixed_folder_follows_the_layout_flag() {
        let dir = tree(&["top.jpg", "cat/1.jpg", "dog/2.jpg"]);
        let src = Source::ImageFolder(dir.path().into());
        let auto = src.list_as(Layout::Auto).unwrap();
        assert!(!auto.flat);
        assert_eq!(auto.classes, ["cat", "dog"]);
        assert_eq!(auto.ignored, [dir.path().join("top.jpg")]);
        let flat = src.list_as(Layout::Flat).unwrap();
        assert!(flat.flat);
        assert_eq!(flat.inputs.len(), 3);
        assert!(flat.inputs.iter().all(|i| i.label == 0));
        let empty = tempfile::tempdir().unwrap();
        let e = Source::ImageFolder(empty.path().into())
            .list_as(Layout::Flat)
            .unwrap_err();
        assert!(e.to_string().contains("no files"), "{e}");
    }
}
