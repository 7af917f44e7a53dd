//! Listing the inputs of a conversion in a deterministic order.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use super::list_file::list_file;
pub(crate) use super::listing::{Input, Listing};
use super::own_output::OwnOutput;
use super::walk::{dir_id, is_hidden, listing_fault, name_key, sorted_entries, walk};
use super::webdataset::{
    is_compressed_tar, is_tar_name, list_webdataset, looks_like_shards, shards_as_images_hint,
    Chosen,
};
use crate::text::{lossless_text, Lossless};
use crate::FormatError;

/// Where the images come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// An ImageFolder tree: one subdirectory per class (class ids by sorted name, in
    /// torchvision's order), images anywhere below it, listed in torchvision's order.
    /// Files directly in the root are not samples and are ignored. How the path is read
    /// is [`ConvertOptions::layout`](super::ConvertOptions::layout): also a folder of
    /// unlabelled images, or WebDataset tar shards (a `.tar` file or a folder of them).
    ImageFolder(PathBuf),
    /// A list file of `path,label` lines; paths are relative to `root`, or absolute.
    /// Blank lines and lines starting with `#` are ignored, as is a `path,label` header;
    /// paths are trimmed unless CSV-quoted (`"a,b.jpg",0`).
    List {
        /// Directory the listed paths are relative to.
        root: PathBuf,
        /// The list file.
        list: PathBuf,
    },
}

/// How an ImageFolder source's path is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// `WebDataset` for a `.tar` file or a folder holding only `.tar` files (hidden
    /// entries aside); else `Classes` when the root has a subdirectory, else `Flat` (a
    /// folder of images alone). Hidden folders (a name starting with `.`, such as
    /// `.ipynb_checkpoints`) and `__MACOSX` do not count: a folder of images with only
    /// those is `Flat`.
    #[default]
    Auto,
    /// One subdirectory per class; files directly in the root are ignored (and reported).
    Classes,
    /// Unlabelled images: every file under the root, at any depth, is an input of the one
    /// class named after the root folder, label 0.
    Flat,
    /// WebDataset tar shards: the path is a tar file, or a folder whose `.tar` files
    /// (not its subfolders) are the shards, in order of their names. A sample is the
    /// members sharing a key (the member path up to the first dot of its base name); its
    /// image (`jpg`, `png`, `webp`, ...) is an input, read in place from the tar, its
    /// label the decimal text of its `cls` member, and the classes are the labels as text
    /// (`"0"` to the largest). Without any `cls` member the shards are read as one class
    /// of unlabelled images, label 0. docs/FORMAT.md, "How a source is read", has the
    /// details and what is skipped.
    WebDataset,
}

impl std::str::FromStr for Layout {
    type Err = String;

    /// `auto`, `classes`, `flat` or `webdataset`, as the CLI's `--layout` and Python's
    /// `layout=` spell it.
    fn from_str(s: &str) -> Result<Layout, String> {
        match s {
            "auto" => Ok(Layout::Auto),
            "classes" => Ok(Layout::Classes),
            "flat" => Ok(Layout::Flat),
            "webdataset" => Ok(Layout::WebDataset),
            _ => Err(format!("{s:?}: want auto, classes, flat or webdataset")),
        }
    }
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Layout::Auto => "auto",
            Layout::Classes => "classes",
            Layout::Flat => "flat",
            Layout::WebDataset => "webdataset",
        })
    }
}

impl Source {
    /// The folder (or tar) converted, or the directory a list's paths are relative to:
    /// what the source map's names are relative to.
    pub(crate) fn root(&self) -> &Path {
        match self {
            Source::ImageFolder(root) | Source::List { root, .. } => root,
        }
    }

    /// The source as given, for the manifest's provenance.
    pub fn describe(&self) -> String {
        match self {
            Source::ImageFolder(p) => p.lossless().to_string(),
            Source::List { root, list } => {
                format!("{} (list {})", root.lossless(), list.lossless())
            }
        }
    }

    #[cfg(test)]
    pub(crate) fn list(&self) -> Result<Listing, FormatError> {
        self.list_as(Layout::Auto)
    }

    #[cfg(test)]
    pub(crate) fn list_as(&self, layout: Layout) -> Result<Listing, FormatError> {
        self.list_without(layout, &OwnOutput::default(), None)
    }

    /// The inputs, leaving out the conversion's output directory `own`; `layout` applies
    /// to an ImageFolder source only, `classes` (the class names of `--classes`) to a list
    /// or a folder of class folders.
    ///
    /// # Errors
    ///
    /// [`FormatError::InvalidOptions`] for `classes` with a flat or WebDataset source,
    /// whose labels are not folder names; the listing's errors.
    pub(crate) fn list_without(
        &self,
        layout: Layout,
        own: &OwnOutput,
        classes: Option<&[String]>,
    ) -> Result<Listing, FormatError> {
        // Class names label class folders: a source read otherwise has none to label.
        let by_folder = |what: &str| match classes {
            None => Ok(()),
            Some(_) => Err(FormatError::InvalidOptions(format!(
                "class names (--classes, Python classes=) label a list's rows or class \
                 folders; this source is read as {what}"
            ))),
        };
        match self {
            Source::ImageFolder(root) => match layout {
                Layout::WebDataset => {
                    by_folder("WebDataset tar shards")?;
                    list_webdataset(root, own, Chosen::Asked)
                }
                Layout::Flat => {
                    by_folder("one class of unlabelled images (flat)")?;
                    list_flat(root, own)
                }
                Layout::Classes => list_image_folder(root, own, classes),
                Layout::Auto if looks_like_shards(root, own) => {
                    by_folder("WebDataset tar shards")?;
                    list_webdataset(root, own, Chosen::ByAuto)
                }
                Layout::Auto if has_class_folder(root, own)? => {
                    list_image_folder(root, own, classes)
                }
                Layout::Auto => {
                    by_folder("one class of unlabelled images (flat: no class folder)")?;
                    list_flat(root, own)
                }
            },
            Source::List { root, list } => list_file(root, list, own, classes),
        }
    }
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

/// True when `root` has a subdirectory (following symlinks) that is not hidden, i.e. looks
/// like classes: a folder of images that Jupyter or an unzip left a hidden folder in is
/// still a folder of images.
fn has_class_folder(root: &Path, own: &OwnOutput) -> Result<bool, FormatError> {
    if !root.is_dir() {
        return Err(not_a_directory(root));
    }
    // In any order, and without a `stat` of an entry the listing already says is a plain
    // file: a flat folder of a million images was a million `stat` calls, seconds of
    // silence before the first progress line (minutes on NFS).
    for entry in std::fs::read_dir(root).map_err(|e| FormatError::io(root, e))? {
        let entry = entry.map_err(|e| FormatError::io(root, e))?;
        if is_hidden(&entry.file_name()) || entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        let path = entry.path();
        if std::fs::metadata(&path).is_ok_and(|m| m.is_dir() && !own.is(&path, &m)) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Every file under `root` as one class named after the folder, label 0.
fn list_flat(root: &Path, own: &OwnOutput) -> Result<Listing, FormatError> {
    if !root.is_dir() {
        return Err(not_a_directory(root));
    }
    let root_meta = std::fs::metadata(root).map_err(|e| FormatError::io(root, e))?;
    let name = std::fs::canonicalize(root)
        .ok()
        .and_then(|p| p.file_name().map(lossless_text))
        .unwrap_or_else(|| "images".into());
    let mut inputs = Vec::new();
    let mut seen = HashSet::from([dir_id(&root_meta)]);
    walk(root, 0, &mut inputs, &mut seen, own)?;
    if inputs.is_empty() {
        return Err(FormatError::BadSource {
            path: root.to_path_buf(),
            reason: "holds no files to convert".into(),
        });
    }
    let mut warnings = Vec::new();
    let count = |is: fn(&OsStr) -> bool| {
        (inputs.iter())
            .filter(|i| i.path.file_name().is_some_and(is))
            .count()
    };
    let (tars, compressed) = (count(is_tar_name), count(is_compressed_tar));
    if let Some(hint) = shards_as_images_hint(tars > 0, compressed > 0) {
        warnings.push(format!(
            "{} tar file(s) are read as images (flat layout) and will be skipped: {hint}",
            tars + compressed
        ));
    }
    // Hidden folders of the root with inputs in them, found among the inputs (the walk has
    // read the root already: a folder of a million images is not read again), each name
    // with its count of inputs; a hidden name that is a file of the root is no folder.
    let mut hidden: HashMap<&OsStr, usize> = HashMap::new();
    for input in &inputs {
        let first = input
            .path
            .strip_prefix(root)
            .ok()
            .and_then(|p| p.iter().next());
        if let Some(name) = first.filter(|name| is_hidden(name)) {
            *hidden.entry(name).or_default() += 1;
        }
    }
    let mut hidden: Vec<_> = (hidden.into_iter())
        .filter(|(name, _)| root.join(name).is_dir())
        .collect();
    hidden.sort_unstable_by_key(|(name, _)| name_key(name.to_os_string()));
    for (name, n) in hidden {
        warnings.push(format!(
            "the hidden folder {} was read too: its {n} file(s) are inputs (a flat layout takes every file under the source)",
            lossless_text(root.join(name).as_os_str())
        ));
    }
    Ok(Listing {
        inputs,
        classes: vec![name],
        ignored: Vec::new(),
        flat: true,
        webdataset: false,
        warnings,
    })
}

/// Every file under each class folder of `root`, labelled by its folder: the folders in
/// torchvision's order, or by their names in `given` (`--classes`: a validation tree that
/// lacks some of the train set's classes gets the train set's labels, where numbering its
/// own folders would shift every label after a missing class).
fn list_image_folder(
    root: &Path,
    own: &OwnOutput,
    given: Option<&[String]>,
) -> Result<Listing, FormatError> {
    if !root.is_dir() {
        return Err(not_a_directory(root));
    }
    let root_meta = std::fs::metadata(root).map_err(|e| FormatError::io(root, e))?;
    let named: Option<HashMap<&str, u32>> =
        given.map(|g| g.iter().zip(0..).map(|(n, i)| (n.as_str(), i)).collect());
    let mut classes = Vec::new();
    let mut names_seen = HashSet::new();
    let mut inputs = Vec::new();
    let mut ignored = Vec::new();
    let mut warnings = Vec::new();
    // Class folders without a sample, as `"name" (label N)`.
    let mut empty = Vec::new();
    for entry in sorted_entries(root).map_err(|e| FormatError::io(root, e))? {
        let path = entry.path();
        // An entry that cannot be looked at (a broken link) is no class; one that cannot
        // be looked at for no fault of its own stops the listing: ignored, a class folder
        // would move every later class to another label.
        let meta = match std::fs::metadata(&path) {
            Ok(m) => m,
            Err(e) => {
                listing_fault(&path, e)?;
                ignored.push(path);
                continue;
            }
        };
        if !meta.is_dir() {
            ignored.push(path);
            continue;
        }
        if own.is(&path, &meta) {
            continue;
        }
        let name = lossless_text(&entry.file_name());
        let label = match named.as_ref().map(|n| n.get(name.as_str())) {
            None => u32::try_from(classes.len()).map_err(|_| FormatError::BadSource {
                path: root.to_path_buf(),
                reason: "more than 2^32 classes".into(),
            })?,
            Some(Some(&label)) => label,
            Some(None) if is_hidden(&entry.file_name()) => {
                warnings.push(format!(
                    "the hidden folder {name:?} is not one of the classes given: left out"
                ));
                continue;
            }
            Some(None) => {
                return Err(FormatError::BadSource {
                    path,
                    reason: format!(
                        "this class folder ({name:?}) is not one of the {} classes given (--classes, Python classes=): another dataset's classes?",
                        given.map_or(0, <[String]>::len)
                    ),
                })
            }
        };
        // Two folders whose names are written alike (a byte 0xFF is written `\xFF`, as a
        // folder may be literally named) would be two classes of one name, or, named by
        // the classes given, one label.
        if !names_seen.insert(name.clone()) {
            return Err(FormatError::BadSource {
                path,
                reason: format!(
                    "this class folder's name is written {name:?}, as another folder's is (a byte that is not UTF-8 is written \\xNN): rename one of them"
                ),
            });
        }
        if named.is_none() && is_hidden(&entry.file_name()) {
            // torchvision's ImageFolder takes it as a class too; the labels stay the same
            // as its, and the user hears of it.
            warnings.push(format!(
                "class {name:?} (label {label}) is a hidden folder, taken as a class as torchvision's ImageFolder does; remove it (or convert with a list file: --list, Python list=) if it holds no class"
            ));
        }
        // Each class walks every directory at most once: a symlink back to the root, the
        // class folder or any folder already listed is a loop (or a duplicate) and is
        // skipped with a reason, so a tree of links cannot multiply the walk.
        let mut seen = HashSet::from([dir_id(&root_meta), dir_id(&meta)]);
        let before = inputs.len();
        walk(&path, label, &mut inputs, &mut seen, own)?;
        if inputs.len() == before {
            empty.push(format!("{name:?} (label {label})"));
        }
        classes.push(name);
    }
    warnings.extend(empty_classes_warning(&empty));
    if classes.is_empty() {
        return Err(FormatError::BadSource {
            path: root.to_path_buf(),
            reason:
                "no class subdirectories (an ImageFolder source has one subdirectory per class; --layout flat, Python layout=\"flat\", converts a folder of unlabelled images as one class)"
                    .into(),
        });
    }
    Ok(Listing {
        inputs,
        classes: given.map_or(classes, <[String]>::to_vec),
        ignored,
        flat: false,
        webdataset: false,
        warnings,
    })
}

/// Empty class folders named in the warning; the rest are counted. A tree of thousands
/// of them (ImageNet-21k subsets) gave a line each on stderr and a Python `UserWarning`
/// each; the report's `empty_classes` names them all.
const EMPTY_CLASSES_NAMED: usize = 20;

/// One warning for all the empty class folders in `empty`, if any.
fn empty_classes_warning(empty: &[String]) -> Option<String> {
    match empty {
        [] => None,
        [one] => Some(format!(
            "class {one} is an empty folder: it keeps its label and has no samples"
        )),
        _ => Some(format!(
            "{} class folders are empty: they keep their labels and have no samples: {}",
            empty.len(),
            first_named(empty)
        )),
    }
}

/// The first [`EMPTY_CLASSES_NAMED`] of `classes` joined, and how many more there are.
fn first_named(classes: &[String]) -> String {
    let named = classes[..classes.len().min(EMPTY_CLASSES_NAMED)].join(", ");
    match classes.len().saturating_sub(EMPTY_CLASSES_NAMED) {
        0 => named,
        n => format!("{named} ... and {n} more (all in the JSON report's empty_classes)"),
    }
}

/// The classes of an ImageFolder listing that have no input, for the report.
pub(super) fn empty_classes(source: &Source, listing: &Listing) -> Vec<String> {
    if !matches!(source, Source::ImageFolder(_)) || listing.flat || listing.webdataset {
        return Vec::new();
    }
    let mut has = vec![false; listing.classes.len()];
    for i in &listing.inputs {
        if let Some(h) = has.get_mut(i.label as usize) {
            *h = true;
        }
    }
    (listing.classes.iter().zip(has))
        .filter(|(_, h)| !h)
        .map(|(c, _)| c.clone())
        .collect()
}

/// The report's `empty_classes` after a conversion: the empty folders, then the classes
/// whose every input was skipped, with the warning for the latter. Not for a part, which
/// holds a slice of the classes: a class without samples there is no news.
pub(super) fn classes_without_samples(
    source: &Source,
    part: Option<super::Part>,
    listing: &Listing,
    skipped: &[super::Skipped],
) -> (Vec<String>, Option<String>) {
    let mut empty = empty_classes(source, listing);
    if part.is_some() {
        return (empty, None);
    }
    let all_skipped = classes_all_skipped(source, listing, skipped);
    let named: Vec<String> = all_skipped
        .iter()
        .map(|&(label, n)| format!("{:?} (label {label}, {n} input(s))", listing.classes[label]))
        .collect();
    let note = match named.as_slice() {
        [] => None,
        [one] => Some(format!(
            "class {one} has no samples: every input of it was skipped (see the skip list); it keeps its label"
        )),
        _ => Some(format!(
            "{} classes have no samples: every input of theirs was skipped (see the skip list); they keep their labels: {}",
            named.len(),
            first_named(&named)
        )),
    };
    empty.extend(
        all_skipped
            .iter()
            .map(|&(label, _)| listing.classes[label].clone()),
    );
    (empty, note)
}

/// The labels of an ImageFolder listing's classes that have inputs but no sample, since
/// every one was skipped (a tree of non-images, an earlier dataset converted inside the
/// source tree), with their input counts: no sample, as an empty folder has none, yet
/// nothing said so beside the skip list.
fn classes_all_skipped(
    source: &Source,
    listing: &Listing,
    skipped: &[super::Skipped],
) -> Vec<(usize, usize)> {
    if skipped.is_empty()
        || !matches!(source, Source::ImageFolder(_))
        || listing.flat
        || listing.webdataset
    {
        return Vec::new();
    }
    let skipped: HashSet<&Path> = skipped.iter().map(|s| s.path.as_path()).collect();
    // Per label: inputs, and inputs that became records.
    let mut counts = vec![(0usize, 0usize); listing.classes.len()];
    for i in &listing.inputs {
        if let Some((inputs, kept)) = counts.get_mut(i.label as usize) {
            *inputs += 1;
            if !skipped.contains(i.path.as_path()) {
                *kept += 1;
            }
        }
    }
    (counts.into_iter().enumerate())
        .filter(|(_, (inputs, kept))| *inputs > 0 && *kept == 0)
        .map(|(label, (inputs, _))| (label, inputs))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
        // A directory's own files before the directories under it, as torchvision lists.
        let want: Vec<(PathBuf, u32)> = vec![
            ("a/z.jpg".into(), 0),
            ("a/sub/y.jpg".into(), 0),
            ("b/1.jpg".into(), 1),
            ("b/2.jpg".into(), 1),
        ];
        assert_eq!(got, want);
    }

    fn rel(dir: &Path, l: &Listing) -> Vec<String> {
        l.inputs
            .iter()
            .map(|i| {
                let r = i.path.strip_prefix(dir).unwrap().lossless().to_string();
                match &i.refused {
                    Some(_) => format!("refused {r}"),
                    None => r,
                }
            })
            .collect()
    }

    #[test]
    fn files_within_a_class_follow_sorted_os_walk() {
        // sorted(os.walk("c")) orders directories by path string: "c/a-b" < "c/a.b" <
        // "c/a/x" ('-' < '.' < '/') although a tree walk would take "c/a" first.
        let dir = tempfile::tempdir().unwrap();
        for f in [
            "c/z.jpg",
            "c/a/x/1.jpg",
            "c/a/2.jpg",
            "c/a-b/3.jpg",
            "c/a.b/4.jpg",
            "c/b.jpg",
        ] {
            let p = dir.path().join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, b"x").unwrap();
        }
        // A second link to a directory is listed once: where it first comes in the order.
        std::os::unix::fs::symlink("a", dir.path().join("c/0link")).unwrap();
        std::os::unix::fs::symlink("..", dir.path().join("c/up")).unwrap();
        std::os::unix::fs::symlink("gone", dir.path().join("c/dangling.jpg")).unwrap();
        let l = Source::ImageFolder(dir.path().into()).list().unwrap();
        assert_eq!(
            rel(dir.path(), &l),
            [
                "c/b.jpg",
                "refused c/dangling.jpg",
                "c/z.jpg",
                "c/0link/2.jpg",
                "c/0link/x/1.jpg",
                "refused c/a",
                "c/a-b/3.jpg",
                "c/a.b/4.jpg",
                "refused c/up",
            ]
        );
    }

    #[test]
    fn non_utf8_class_names_sort_and_read_as_python_sees_them() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        // Latin-1 names, not UTF-8; the last two lossy-decode to the same `�and�`.
        let names: [&[u8]; 6] = [
            b"caf\xe9",
            "\u{ff26}ull".as_bytes(),
            "\u{4e2d}".as_bytes(),
            b"z",
            b"\xf1and\xfb",
            b"\xf1and\xfa",
        ];
        for n in names {
            let d = dir.path().join(OsStr::from_bytes(n));
            std::fs::create_dir(&d).unwrap();
            std::fs::write(d.join("1.jpg"), b"x").unwrap();
        }
        let l = Source::ImageFolder(dir.path().into()).list().unwrap();
        // torchvision.datasets.ImageFolder(...).classes for the same tree.
        assert_eq!(
            l.classes,
            [
                "caf\\xe9",
                "z",
                "\u{4e2d}",
                "\\xf1and\\xfa",
                "\\xf1and\\xfb",
                "\u{ff26}ull"
            ]
        );
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

    #[test]
    fn hidden_folders_do_not_make_a_flat_folder_a_class_layout() {
        // A folder of images opened in Jupyter, or unzipped from a macOS archive.
        for hidden in [".ipynb_checkpoints/a-checkpoint.jpg", "__MACOSX/._a.jpg"] {
            let dir = tree(&["a.jpg", "b.jpg", hidden]);
            let l = Source::ImageFolder(dir.path().into()).list().unwrap();
            assert!(l.flat, "{hidden}");
            assert_eq!(l.inputs.len(), 3);
            assert_eq!(l.warnings.len(), 1, "{:?}", l.warnings);
            assert!(l.warnings[0].contains("hidden folder"), "{:?}", l.warnings);
            // Asked for classes, it is one class, as torchvision would take it: reported.
            let c = Source::ImageFolder(dir.path().into())
                .list_as(Layout::Classes)
                .unwrap();
            assert_eq!(c.classes.len(), 1);
            assert_eq!(c.ignored.len(), 2);
            assert!(
                c.warnings[0].contains("is a hidden folder"),
                "{:?}",
                c.warnings
            );
        }
    }

    #[test]
    fn empty_and_hidden_class_folders_keep_their_labels_and_are_reported() {
        let dir = tree(&[".cache/x.jpg", "cat/1.jpg", "dog/2.jpg"]);
        std::fs::create_dir(dir.path().join("cow")).unwrap();
        let l = Source::ImageFolder(dir.path().into()).list().unwrap();
        assert_eq!(l.classes, [".cache", "cat", "cow", "dog"]);
        let labels: Vec<_> = l.inputs.iter().map(|i| i.label).collect();
        assert_eq!(labels, [0, 1, 3]);
        assert_eq!(l.warnings.len(), 2, "{:?}", l.warnings);
        assert!(l.warnings[0].contains("\".cache\" (label 0) is a hidden folder"));
        assert!(l.warnings[1].contains("\"cow\" (label 2) is an empty folder"));
    }

    #[test]
    fn many_empty_class_folders_make_one_warning_naming_twenty() {
        let dir = tree(&["cat/1.jpg"]);
        for i in 0..500 {
            std::fs::create_dir(dir.path().join(format!("e{i:03}"))).unwrap();
        }
        let source = Source::ImageFolder(dir.path().into());
        let l = source.list().unwrap();
        assert_eq!(l.classes.len(), 501);
        assert_eq!(l.warnings.len(), 1, "{:?}", l.warnings);
        let w = &l.warnings[0];
        assert!(w.starts_with("500 class folders are empty"), "{w}");
        assert!(
            w.contains("\"e019\" (label 20)") && !w.contains("e020"),
            "{w}"
        );
        assert!(w.contains("and 480 more"), "{w}");
        let empty = empty_classes(&source, &l);
        assert_eq!(empty.len(), 500);
        assert_eq!((empty[0].as_str(), empty[499].as_str()), ("e000", "e499"));
    }

    #[test]
    fn two_folders_whose_names_are_written_alike_are_refused() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        // The byte 0xFF, and a folder literally named with its escape: one class name.
        for n in [&b"bad\xff"[..], br"bad\xff"] {
            let d = dir.path().join(OsStr::from_bytes(n));
            std::fs::create_dir(&d).unwrap();
            std::fs::write(d.join("1.jpg"), b"x").unwrap();
        }
        let e = Source::ImageFolder(dir.path().into()).list().unwrap_err();
        assert!(e.to_string().contains("as another folder's is"), "{e}");
    }
}
