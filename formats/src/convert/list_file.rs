//! Reading a list file of `path,label` rows (a CSV file as pandas writes one), each path
//! relative to the source folder or absolute.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use super::listing::{Input, Listing};
use super::own_output::OwnOutput;
use crate::text::Lossless;
use crate::FormatError;

/// Labels of a list file must be below this: the class list has one entry per label up to
/// the largest, so a stray `4294967295` would otherwise ask for four billion class names.
pub(crate) const MAX_CLASSES: u32 = crate::bounded::MAX_CLASSES as u32;

/// Largest list file read (ImageNet-21k's 14 million lines take under 1 GiB).
const MAX_LIST_BYTES: u64 = 4 << 30;

/// The inputs of the list file `list`, its paths relative to `root` (or absolute).
///
/// A UTF-8 byte order mark before the first row is dropped. Blank lines and lines starting
/// with `#` are skipped, and so is a first row whose label is `label`. A path is trimmed of
/// spaces, or quoted as CSV quotes it (`"a,b.jpg",0`, `""` for a quote inside), which keeps
/// it exactly. A row inside the output directory `own` is refused (skipped with a reason).
/// With `classes`, a label is one of their names, or else an index into them, and they
/// are the listing's classes.
pub(crate) fn list_file(
    root: &Path,
    list: &Path,
    own: &OwnOutput,
    classes: Option<&[String]>,
) -> Result<Listing, FormatError> {
    let names: Option<HashMap<&str, u32>> = classes.map(|c| {
        c.iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), i as u32))
            .collect()
    });
    let text = read_list(list)?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let mut inputs = Vec::new();
    let mut max_label: Option<u32> = None;
    // Whether a row (a header included) came before: only the first may be a header.
    let mut rows_before = false;
    // Comment lines that read as rows: (how many, the first one's line number).
    let mut commented_rows = (0u64, 0usize);
    for (n, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if let Some(comment) = line.strip_prefix('#') {
            if split_row(comment).is_ok_and(|(_, l)| l.parse::<u32>().is_ok()) {
                commented_rows.0 += 1;
                if commented_rows.1 == 0 {
                    commented_rows.1 = n + 1;
                }
            }
            continue;
        }
        if line.trim().is_empty() {
            continue;
        }
        let bad = |reason: String| FormatError::BadSource {
            path: list.to_path_buf(),
            reason: format!("line {}: {reason}", n + 1),
        };
        let (rel, label) = split_row(line).map_err(|e| bad(format!("{line:?} {e}")))?;
        let first = !std::mem::replace(&mut rows_before, true);
        let label = match row_label(&label, names.as_ref(), first) {
            Ok(Some(label)) => label,
            Ok(None) => continue, // the `path,label` header
            // A header of other names (`ImageId,PredictionString`, `filepath,class`).
            Err(reason) if first => {
                return Err(bad(format!(
                    "{reason} (a header row? only one whose label column reads `label` is \
                     taken as one)"
                )))
            }
            Err(reason) => return Err(bad(reason)),
        };
        let rel = Path::new(&*rel);
        // Joined to the list's folder, an empty path would name that folder itself.
        if rel.as_os_str().is_empty() {
            return Err(bad(format!("{line:?} has no path before the label")));
        }
        max_label = Some(max_label.map_or(label, |m| m.max(label)));
        inputs.push(Input {
            refused: own.refuses_row(rel),
            ..Input::file(root.join(rel), label)
        });
    }
    if inputs.is_empty() {
        return Err(FormatError::BadSource {
            path: list.to_path_buf(),
            reason: "lists no images".into(),
        });
    }
    let mut warnings = Vec::new();
    if commented_rows.0 > 0 {
        warnings.push(format!(
            "{}: {} line(s) starting with # look like `path,label` rows but are comments, \
             not inputs (the first is line {}); quote a path that starts with #",
            list.lossless(),
            commented_rows.0,
            commented_rows.1
        ));
    }
    warnings.extend(repeated_rows_warning(list, &inputs));
    if classes.is_none() {
        let labels = inputs.iter().map(|i| i.label);
        let count = max_label.unwrap_or(0) as usize + 1;
        warnings.extend(sparse_labels_warning(
            &list.lossless().to_string(),
            labels,
            count,
        ));
    }
    Ok(Listing {
        inputs,
        classes: match classes {
            Some(c) => c.to_vec(),
            None => (0..=max_label.unwrap_or(0))
                .map(|l| l.to_string())
                .collect(),
        },
        ignored: Vec::new(),
        flat: false,
        webdataset: false,
        warnings,
    })
}

/// The warning for rows that name a file an earlier row names too: each row is an input,
/// so the file is in the dataset twice (perhaps under two labels), which a list joined
/// from two sources easily does, and nothing else would say. `None` when there is none.
/// Paths are compared as written (by components: `./a.jpg` is `a.jpg`), not resolved: a
/// `stat` per row would cost a system call per image. Hashes are sorted rather than the
/// paths put in a map: a few bytes per row.
fn repeated_rows_warning(list: &Path, inputs: &[Input]) -> Option<String> {
    use std::hash::BuildHasher;
    let hasher = std::hash::RandomState::new();
    // A row refused (inside the output directory) is no input, twice or not.
    let mut hashes: Vec<(u64, usize)> = (inputs.iter().enumerate())
        .filter(|(_, input)| input.refused.is_none())
        .map(|(i, input)| (hasher.hash_one(&input.path), i))
        .collect();
    hashes.sort_unstable();
    let (mut repeated, mut first): (u64, Option<usize>) = (0, None);
    for w in hashes.windows(2) {
        let (a, b) = (w[0].1, w[1].1);
        if w[0].0 == w[1].0 && inputs[a].path == inputs[b].path {
            repeated += 1;
            let later = a.max(b);
            first = Some(first.map_or(later, |f| f.min(later)));
        }
    }
    let example = &inputs[first?].path;
    Some(format!(
        "{}: {repeated} row(s) name a file an earlier row names too, by the same path (e.g. {}): each row is an input, so such a file is converted once per row",
        list.lossless(),
        example.lossless()
    ))
}

/// Classes numbered from the labels themselves (`"0"` to the largest, no names given)
/// that mostly label nothing: one mistyped label (`1000000` for `100`) makes a dataset of
/// a million classes, each a name in the manifest and an output the model is built with.
/// Past this many classes, and with under a tenth of them used, `source` gets a warning.
const SPARSE_LABELS_FROM: usize = 1000;

/// The warning for `source`'s `labels` when they number `classes` classes (`"0"` to
/// the largest label) and few of them are used; `None` otherwise.
pub(crate) fn sparse_labels_warning(
    source: &str,
    labels: impl Iterator<Item = u32>,
    classes: usize,
) -> Option<String> {
    if classes <= SPARSE_LABELS_FROM {
        return None;
    }
    let mut used = vec![false; classes];
    for l in labels {
        if let Some(u) = used.get_mut(l as usize) {
            *u = true;
        }
    }
    let used = used.iter().filter(|u| **u).count();
    (used.saturating_mul(10) < classes).then(|| {
        format!(
            "{source}: the labels run to {} ({classes} classes, \"0\" to \"{}\"), but only \
             {used} of them label a sample: is a label mistyped? (the classes are the labels \
             as numbers unless names are given: --classes, Python classes=)",
            classes - 1,
            classes - 1
        )
    })
}

/// The label of a row whose label column reads `text`: with class `names`, the class of
/// that name, or else an index below their count; without, a non-negative integer below
/// [`MAX_CLASSES`]. `None` for a `label` header (`first`: no row read yet).
fn row_label(
    text: &str,
    names: Option<&HashMap<&str, u32>>,
    first: bool,
) -> Result<Option<u32>, String> {
    let header = first && text.eq_ignore_ascii_case("label");
    if let Some(names) = names {
        if header {
            return Ok(None);
        }
        let count = names.len() as u64;
        return match (names.get(text), text.parse::<u64>().ok()) {
            // A number that names one class and indexes another is ambiguous (an
            // ImageFolder's classes "0", "1", "10", "2" sort so): refused, not guessed.
            (Some(&i), Some(n)) if n != u64::from(i) && n < count => Err(format!(
                "label {text:?} is the name of class {i} and the index of another: write the class's name in a way that is not a number, or give classes whose numeric names are their own indices"
            )),
            (Some(&i), _) => Ok(Some(i)),
            (None, Some(n)) if n < count => Ok(Some(n as u32)),
            (None, Some(n)) => Err(format!(
                "label {n} is past the {count} classes given (--classes, Python classes=)"
            )),
            (None, None) => Err(format!(
                "class {text:?} is not one of the {count} classes given (--classes, Python classes=)"
            )),
        };
    }
    // Parsed wider than a label, so that a label too large is told so, not called "not
    // a non-negative integer".
    let label: u64 = match text.parse() {
        Ok(l) => l,
        // Digits past even a u64: as much over the limit as one that fits.
        Err(_) if all_digits(text.strip_prefix('+').unwrap_or(text)) => u64::MAX,
        Err(_) if header => return Ok(None),
        Err(_) => {
            return Err(format!(
                "label {text:?} is not a non-negative integer (to label rows by class name, give the class names: --classes FILE or a dataset, Python classes=)"
            ))
        }
    };
    match u32::try_from(label).ok().filter(|&l| l < MAX_CLASSES) {
        Some(label) => Ok(Some(label)),
        None => Err(format!(
            "label {text} is over the limit of {} (labels index the class list, at most {MAX_CLASSES} classes)",
            MAX_CLASSES - 1
        )),
    }
}

/// Refuses class names (`--classes`) that are empty, give a name twice or more than
/// [`MAX_CLASSES`] names.
pub(crate) fn check_classes(classes: &[String]) -> Result<(), FormatError> {
    let bad = |s: String| Err(FormatError::InvalidOptions(s));
    if classes.is_empty() {
        return bad("the class names (--classes, Python classes=) are empty".into());
    }
    if classes.len() as u64 > u64::from(MAX_CLASSES) {
        return bad(format!(
            "{} class names is more than the {MAX_CLASSES} a dataset may have",
            classes.len()
        ));
    }
    let mut seen = HashMap::new();
    for (i, name) in classes.iter().enumerate() {
        if let Some(first) = seen.insert(name.as_str(), i) {
            return bad(format!(
                "class name {name:?} is given twice (classes {first} and {i}): label i names classes[i], so each name once"
            ));
        }
    }
    Ok(())
}

/// The class names at `path` for [`super::ConvertOptions::classes`]: a dataset's (a
/// directory with a `manifest.json`: give the train set to its validation list), or a
/// text file's, one name a line (surrounding spaces trimmed, blank lines skipped).
///
/// # Errors
///
/// I/O errors; [`FormatError::BadSource`] for a file that is not UTF-8 text, or a
/// directory that is not a dataset.
pub fn class_names(path: &Path) -> Result<Vec<String>, FormatError> {
    if path.is_dir() {
        if !path.join(crate::MANIFEST_FILE).exists() {
            return Err(FormatError::BadSource {
                path: path.to_path_buf(),
                reason: "a directory without manifest.json: give a dataset (whose classes are taken) or a text file of class names, one a line".into(),
            });
        }
        return Ok(crate::Manifest::read(path)?.classes);
    }
    let text = read_list(path)?;
    Ok(text
        .strip_prefix('\u{feff}')
        .unwrap_or(&text)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect())
}

/// The list file's text, refusing a device and anything over [`MAX_LIST_BYTES`].
fn read_list(list: &Path) -> Result<String, FormatError> {
    use std::io::Read;
    use std::os::unix::fs::FileTypeExt;
    let io = |e| FormatError::io(list, e);
    // A FIFO is fine (`--list <(generate)`); a device is not a list.
    let meta = std::fs::metadata(list).map_err(io)?;
    let kind = meta.file_type();
    if kind.is_char_device() || kind.is_block_device() || kind.is_dir() || kind.is_socket() {
        return Err(FormatError::BadSource {
            path: list.to_path_buf(),
            reason: "not a file or a pipe".into(),
        });
    }
    let too_long = || FormatError::BadSource {
        path: list.to_path_buf(),
        reason: format!("longer than {MAX_LIST_BYTES} bytes"),
    };
    // Said before reading it: reading 4 GiB first took seconds and as much memory.
    if kind.is_file() && meta.len() > MAX_LIST_BYTES {
        return Err(too_long());
    }
    // Read and checked a chunk at a time: a binary file given by mistake (a tar, a video)
    // was read whole, gigabytes, before its first byte was refused, and under a memory
    // limit the read failed as "out of memory", which blamed no input.
    let mut file = std::fs::File::open(list)
        .map_err(io)?
        .take(MAX_LIST_BYTES + 1);
    let mut text = TextCheck::default();
    let mut chunk = vec![0u8; 1 << 20];
    loop {
        let n = match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io(e)),
        };
        text.push(&chunk[..n])
            .map_err(|reason| FormatError::BadSource {
                path: list.to_path_buf(),
                reason,
            })?;
        if text.bytes.len() as u64 > MAX_LIST_BYTES {
            return Err(too_long());
        }
    }
    text.finish().map_err(|reason| FormatError::BadSource {
        path: list.to_path_buf(),
        reason,
    })
}

/// The longest line a list or class file may have. A row's path longer than a path can
/// be (4 KiB on Linux) is an input skipped as unreadable, like any row naming no file,
/// but a line past this is no list's: a 300 MB line was echoed whole in its error, and
/// took 1.5 GB.
const MAX_LINE_BYTES: usize = 1 << 20;

/// A list file's bytes as they are read, checked as they come: no NUL, UTF-8, no line
/// over [`MAX_LINE_BYTES`].
#[derive(Default)]
struct TextCheck {
    bytes: Vec<u8>,
    /// How many bytes of `bytes` are known to be UTF-8 (a chunk may end inside a character).
    valid: usize,
    /// Where the line being read starts, and its number (from 1).
    line_start: usize,
    line: usize,
}

impl TextCheck {
    fn push(&mut self, chunk: &[u8]) -> Result<(), String> {
        let from = self.bytes.len();
        self.bytes.extend_from_slice(chunk);
        let mut at = from;
        while let Some(i) = self.bytes[at..].iter().position(|&b| b == b'\n' || b == 0) {
            let pos = at + i;
            self.check_line_length(pos)?;
            if self.bytes[pos] == 0 {
                // No path holds a NUL byte; UTF-16 text without a byte order mark is ASCII
                // with one after each letter, valid UTF-8 that failed later as a strange
                // label.
                return Err(format!(
                    "line {}: holds a NUL byte (byte {pos}), which no path has: a list saved \
                     as UTF-16 (Excel's \"Unicode text\")? save it as UTF-8",
                    self.line + 1
                ));
            }
            self.line += 1;
            self.line_start = pos + 1;
            at = pos + 1;
        }
        self.check_line_length(self.bytes.len())?;
        match std::str::from_utf8(&self.bytes[self.valid..]) {
            Ok(_) => self.valid = self.bytes.len(),
            // Cut inside a character: the rest comes with the next chunk.
            Err(e) if e.error_len().is_none() => self.valid += e.valid_up_to(),
            Err(e) => return Err(not_utf8(&self.bytes, self.valid + e.valid_up_to())),
        }
        Ok(())
    }

    fn check_line_length(&self, end: usize) -> Result<(), String> {
        if end - self.line_start > MAX_LINE_BYTES {
            return Err(format!(
                "line {} is longer than {MAX_LINE_BYTES} bytes, which no row of paths or \
                 class names is: is this a list file?",
                self.line + 1
            ));
        }
        Ok(())
    }

    fn finish(self) -> Result<String, String> {
        // Only a character cut by the end of the file is left to find.
        String::from_utf8(self.bytes)
            .map_err(|e| not_utf8(e.as_bytes(), e.utf8_error().valid_up_to()))
    }
}

/// Why `bytes` are no list, not UTF-8 from byte `at` ("stream did not contain valid
/// UTF-8" said neither where nor why).
fn not_utf8(bytes: &[u8], at: usize) -> String {
    let line = 1 + bytes[..at].iter().filter(|&&b| b == b'\n').count();
    format!(
        "line {line}: not UTF-8 text (byte {at}): a list file is UTF-8 text (one saved in \
         another encoding, such as Excel's \"Unicode text\", which is UTF-16: save it as \
         UTF-8), which cannot name a file whose name is not UTF-8 (convert its folder as an \
         ImageFolder tree instead) nor be a binary file"
    )
}

/// A row's path (unquoted, or trimmed) and label (trimmed, unquoted as CSV quotes it). An
/// unquoted path may hold commas: the label is after the last one, or, quoted, after the
/// comma before its opening quote (a class name such as `"tench, Tinca tinca"`).
fn split_row(line: &str) -> Result<(Cow<'_, str>, Cow<'_, str>), &'static str> {
    let start = line.trim_start();
    let Some(quoted) = start.strip_prefix('"') else {
        if let Some(open) = quoted_label_start(line.trim_end()) {
            if let Some(rel) = line[..open].trim_end().strip_suffix(',') {
                return Ok((Cow::Borrowed(rel.trim()), unquote(line[open..].trim())));
            }
        }
        let (rel, label) = line.rsplit_once(',').ok_or("is not `path,label`")?;
        return Ok((Cow::Borrowed(rel.trim()), unquote(label.trim())));
    };
    let mut path = String::new();
    let mut chars = quoted.char_indices();
    while let Some((i, c)) = chars.next() {
        if c != '"' {
            path.push(c);
            continue;
        }
        if quoted[i + 1..].starts_with('"') {
            path.push('"');
            chars.next();
            continue;
        }
        let label = quoted[i + 1..]
            .trim_start()
            .strip_prefix(',')
            .ok_or("has text between the quoted path and the `,` before the label")?;
        return Ok((Cow::Owned(path), unquote(label.trim())));
    }
    Err("has a quoted path without its closing quote")
}

/// Where the quoted last field of `line` opens, when `line` ends with a quote: the quote
/// before which no doubled `""` pair continues.
fn quoted_label_start(line: &str) -> Option<usize> {
    let inner = line.strip_suffix('"')?;
    let bytes = inner.as_bytes();
    let mut i = bytes.len();
    while i > 0 {
        i -= 1;
        if bytes[i] == b'"' {
            if i > 0 && bytes[i - 1] == b'"' {
                i -= 1; // an escaped quote inside the field
                continue;
            }
            return Some(i);
        }
    }
    None
}

/// `s` without the quotes around it, if it has them, a doubled quote inside read as one.
fn unquote(s: &str) -> Cow<'_, str> {
    match s.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
        Some(inner) if inner.contains("\"\"") => Cow::Owned(inner.replace("\"\"", "\"")),
        Some(inner) => Cow::Borrowed(inner),
        None => Cow::Borrowed(s),
    }
}

/// Whether `s` is digits only (and some): an integer, whatever its size.
fn all_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(text: &str) -> (tempfile::TempDir, Result<Listing, FormatError>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.csv");
        std::fs::write(&path, text).unwrap();
        let l = list_file(dir.path(), &path, &OwnOutput::default(), None);
        (dir, l)
    }

    fn named(text: &str, classes: &[&str]) -> Result<Vec<u32>, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.csv");
        std::fs::write(&path, text).unwrap();
        let classes: Vec<String> = classes.iter().map(|c| c.to_string()).collect();
        list_file(dir.path(), &path, &OwnOutput::default(), Some(&classes))
            .map(|l| l.inputs.iter().map(|i| i.label).collect())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn class_names_are_read_as_csv_quotes_them_and_a_number_may_not_mean_two_classes() {
        // As Python's csv and pandas write names with commas and quotes.
        let classes = ["tench, Tinca tinca", "say \"hi\"", "label"];
        let rows = "path,label\nx.jpg,\"tench, Tinca tinca\"\n\"a,b.jpg\",\"say \"\"hi\"\"\"\ny.jpg,label\n";
        assert_eq!(named(rows, &classes).unwrap(), [0, 1, 2]);
        // ImageFolder's numbered classes sort "0", "1", "10", "2": "2" names class 3.
        let numbered = ["0", "1", "10", "2"];
        assert_eq!(named("a.jpg,10\nb.jpg,1\n", &numbered).unwrap(), [2, 1]);
        let e = named("a.jpg,2\n", &numbered).unwrap_err();
        assert!(
            e.contains("\"2\" is the name of class 3 and the index of another"),
            "{e}"
        );
    }

    #[test]
    fn list_file_parses_header_comments_and_commas_in_paths() {
        let (dir, l) = list("path,label\n# comment\n\na,b.jpg,2\nc.png, 0\r\n");
        let l = l.unwrap();
        assert_eq!(l.inputs.len(), 2);
        assert_eq!(l.inputs[0].path, dir.path().join("a,b.jpg"));
        assert_eq!(l.inputs[0].label, 2);
        assert_eq!(l.inputs[1].label, 0);
        assert_eq!(l.classes, ["0", "1", "2"]);
        assert!(l.warnings.is_empty(), "{:?}", l.warnings);
        let err = list("a.jpg,x\n").1.unwrap_err();
        assert!(err.to_string().contains("line 1"), "{err}");
    }

    #[test]
    fn labels_that_number_many_unused_classes_are_warned_about() {
        let (_dir, l) = list("a.jpg,0\nb.jpg,1\nc.jpg,1048575\n");
        let l = l.unwrap();
        assert_eq!(l.classes.len(), 1 << 20);
        assert!(
            l.warnings.len() == 1
                && l.warnings[0].contains("labels run to 1048575 (1048576 classes")
                && l.warnings[0].contains("only 3 of them"),
            "{:?}",
            l.warnings
        );
        // Dense labels, a small label set, or names given: no warning.
        let dense: String = (0..2000).map(|i| format!("{i}.jpg,{i}\n")).collect();
        assert!(list(&dense).1.unwrap().warnings.is_empty());
        assert!(list("a.jpg,0\nb.jpg,999\n").1.unwrap().warnings.is_empty());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.csv");
        std::fs::write(&path, "a.jpg,0\nb.jpg,4999\n").unwrap();
        let names: Vec<String> = (0..5000).map(|i| format!("c{i}")).collect();
        let named = list_file(dir.path(), &path, &OwnOutput::default(), Some(&names)).unwrap();
        assert!(named.warnings.is_empty(), "{:?}", named.warnings);
    }

    #[test]
    fn a_header_that_is_not_recognized_says_it_may_be_one() {
        // ImageNet's LOC_val_solution.csv, a pandas export with other column names.
        for text in [
            "ImageId,PredictionString\nx.JPEG,3\n",
            "filepath,class\nx.jpg,1\n",
        ] {
            let err = list(text).1.unwrap_err().to_string();
            assert!(
                err.contains("line 1") && err.contains("a header row?"),
                "{err}"
            );
        }
        // A bad label further down is no header, also after a header that was one.
        for text in ["a.jpg,0\nb.jpg,x\n", "image,label\nb.jpg,x\n"] {
            let err = list(text).1.unwrap_err().to_string();
            assert!(err.contains("line 2") && !err.contains("header"), "{err}");
        }
    }

    #[test]
    fn a_file_listed_twice_is_warned_about() {
        let (dir, l) = list("a.jpg,0\nb.jpg,1\n./c.jpg,0\na.jpg,1\nc.jpg,0\nb.jpg,0\nb.jpg,1\n");
        let l = l.unwrap();
        assert_eq!(l.inputs.len(), 7, "every row is still an input");
        assert_eq!(l.warnings.len(), 1, "{:?}", l.warnings);
        // `./c.jpg` and `c.jpg` are one path, compared by components.
        let w = &l.warnings[0];
        assert!(
            w.contains("4 row(s) name a file an earlier row names too"),
            "{w}"
        );
        assert!(
            w.contains(&dir.path().join("a.jpg").lossless().to_string()),
            "{w}"
        );
        assert!(list("a.jpg,0\nb.jpg,0\n").1.unwrap().warnings.is_empty());
    }

    #[test]
    fn a_list_in_another_encoding_is_told_to_be_saved_as_utf8() {
        let dir = tempfile::tempdir().unwrap();
        let utf16: Vec<u8> = "a.jpg,0\n"
            .encode_utf16()
            .flat_map(u16::to_le_bytes)
            .collect();
        let path = dir.path().join("list.csv");
        // With a byte order mark (not UTF-8) and without one (a NUL after each letter).
        for bytes in [[&[0xff, 0xfe][..], &utf16].concat(), utf16.clone()] {
            std::fs::write(&path, bytes).unwrap();
            let err = list_file(dir.path(), &path, &OwnOutput::default(), None);
            let err = err.unwrap_err().to_string();
            assert!(err.contains("save it as UTF-8"), "{err}");
        }
    }

    #[test]
    fn a_binary_file_or_a_huge_line_is_refused_at_its_first_chunk() {
        // A 64 MiB line, then a NUL: the line is what is refused, before the rest is read.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.csv");
        let mut bytes = vec![b'a'; 64 << 20];
        bytes.push(0);
        std::fs::write(&path, &bytes).unwrap();
        let e = read_list(&path).unwrap_err().to_string();
        assert!(e.contains("line 1 is longer than 1048576 bytes"), "{e}");
        assert!(e.len() < 500, "{} bytes", e.len());
        // Binary after good rows: refused at the NUL, naming its line.
        let mut bytes = b"a.jpg,0\nb.jpg,1\n".to_vec();
        bytes.extend_from_slice(&[0x7f, 0x45, 0x4c, 0x46, 0x02, 0x00]);
        std::fs::write(&path, &bytes).unwrap();
        let e = read_list(&path).unwrap_err().to_string();
        assert!(e.contains("line 3: holds a NUL byte (byte 21)"), "{e}");
        // Not UTF-8 in a later chunk, and a character cut by a chunk's end.
        let mut bytes = "é,0\n".repeat(300_000).into_bytes();
        assert!(!std::str::from_utf8(&bytes)
            .unwrap()
            .is_char_boundary(1 << 20));
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(read_list(&path).unwrap().lines().count(), 300_000);
        bytes.extend_from_slice(b"\xff,0\n");
        std::fs::write(&path, &bytes).unwrap();
        let e = read_list(&path).unwrap_err().to_string();
        assert!(
            e.contains("line 300001: not UTF-8 text (byte 1500000)"),
            "{e}"
        );
    }

    #[test]
    fn a_row_without_a_path_is_an_error_naming_its_line() {
        for text in ["a.jpg,0\n,0\n", "a.jpg,0\n  , 1\n", "a.jpg,0\n\"\",0\n"] {
            let err = list(text).1.unwrap_err().to_string();
            assert!(
                err.contains("line 2") && err.contains("has no path before the label"),
                "{text:?}: {err}"
            );
        }
    }

    #[test]
    fn byte_order_mark_is_not_part_of_the_first_path() {
        let (dir, l) = list("\u{feff}a.jpg,1\nb.jpg,0\n");
        assert_eq!(l.unwrap().inputs[0].path, dir.path().join("a.jpg"));
        // Before a header too: the header is still recognized.
        let (_, l) = list("\u{feff}path,label\na.jpg,1\n");
        assert_eq!(l.unwrap().inputs.len(), 1);
    }

    #[test]
    fn csv_quoted_paths_are_unquoted_as_pandas_writes_them() {
        let (dir, l) = list(
            "\"path\",\"label\"\n\"a,b.jpg\",0\n\"say \"\"hi\"\".jpg\" , \"1\"\n\" keep.jpg \",2\n",
        );
        let got: Vec<_> = l
            .unwrap()
            .inputs
            .iter()
            .map(|i| (i.path.clone(), i.label))
            .collect();
        assert_eq!(
            got,
            [
                (dir.path().join("a,b.jpg"), 0),
                (dir.path().join("say \"hi\".jpg"), 1),
                (dir.path().join(" keep.jpg "), 2),
            ]
        );
        let e = list("\"a.jpg,0\n").1.unwrap_err();
        assert!(e.to_string().contains("closing quote"), "{e}");
        let e = list("\"a.jpg\"x,0\n").1.unwrap_err();
        assert!(e.to_string().contains("between the quoted path"), "{e}");
    }

    #[test]
    fn commented_out_rows_are_skipped_and_reported() {
        let (_, l) = list("# made by hand\n#x.jpg,1\na.jpg,0\n#y.jpg,2\n");
        let l = l.unwrap();
        assert_eq!(l.inputs.len(), 1);
        assert_eq!(l.warnings.len(), 1);
        assert!(
            l.warnings[0].contains("2 line(s) starting with #"),
            "{:?}",
            l.warnings
        );
        assert!(l.warnings[0].contains("line 2"), "{:?}", l.warnings);
    }
}
