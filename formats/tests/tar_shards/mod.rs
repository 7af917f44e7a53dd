//! Tar shards for the WebDataset tests, written with the `tar` crate (a writer independent
//! of stoker's own tar reader): the repository's photos as samples, each with a `cls`
//! label, and the same photos as an ImageFolder tree with the same labels, in the same
//! order, whose conversion the shards' must equal record for record.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use stoker_formats::{Dataset, Manifest};
use tar::{EntryType, Header};

/// Classes of `testdata/imagefolder` the tests take: 16 photos.
pub const CLASSES: [&str; 3] = ["caer", "exiv2", "leptonica"];

/// Each photo of [`CLASSES`] with its label (the class's position), classes in order and
/// each class's files by name: the order an ImageFolder conversion lists them in.
pub fn photos() -> Vec<(u32, PathBuf)> {
    let root = stoker_testdata::dir().join("imagefolder");
    let mut all = Vec::new();
    for (label, class) in CLASSES.iter().enumerate() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(root.join(class))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        all.extend(files.into_iter().map(|f| (label as u32, f)));
    }
    all
}

/// The photos as an ImageFolder tree at `dir`: class folders `0`, `1`, `2`, so that its
/// classes are the tar shards' (labels as text).
pub fn image_folder(dir: &Path, photos: &[(u32, PathBuf)]) {
    for (label, file) in photos {
        let class = dir.join(label.to_string());
        std::fs::create_dir_all(&class).unwrap();
        std::fs::copy(file, class.join(file.file_name().unwrap())).unwrap();
    }
}

/// How member headers are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// GNU headers; a name over 100 bytes gets a GNU long-name member before it.
    Gnu,
    /// POSIX ustar headers; a long name is split into the header's prefix and name.
    Ustar,
    /// ustar headers whose name is a placeholder, the real one in a PAX `path` record.
    Pax,
}

/// One member to write.
pub enum Entry {
    File(String, Vec<u8>),
    Dir(String),
    Symlink(String, String),
    HardLink(String, String),
}

/// A member holding `data`.
pub fn file(name: &str, data: impl Into<Vec<u8>>) -> Entry {
    Entry::File(name.to_string(), data.into())
}

fn header(style: Style, kind: EntryType, size: u64) -> Header {
    let mut h = match style {
        Style::Gnu => Header::new_gnu(),
        Style::Ustar | Style::Pax => Header::new_ustar(),
    };
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(0o644);
    h.set_mtime(0);
    h
}

/// A PAX extended header giving the next member the path `name`.
fn pax_path(b: &mut tar::Builder<std::fs::File>, name: &str) {
    let body = format!("path={name}\n");
    // The record's length counts its own digits.
    let mut len = body.len() + 2;
    while format!("{len} {body}").len() != len {
        len += 1;
    }
    let record = format!("{len} {body}");
    let mut h = header(Style::Ustar, EntryType::XHeader, record.len() as u64);
    h.set_path("PaxHeaders/member").unwrap();
    h.set_cksum();
    b.append(&h, record.as_bytes()).unwrap();
}

/// Writes `entries` as a tar file at `path`, ended by tar's end-of-archive blocks.
pub fn write_tar(path: &Path, style: Style, entries: &[Entry]) {
    let mut b = tar::Builder::new(std::fs::File::create(path).unwrap());
    for e in entries {
        let (name, kind, data, target): (&str, EntryType, &[u8], Option<&str>) = match e {
            Entry::File(n, d) => (n, EntryType::Regular, d, None),
            Entry::Dir(n) => (n, EntryType::Directory, &[], None),
            Entry::Symlink(n, t) => (n, EntryType::Symlink, &[], Some(t)),
            Entry::HardLink(n, t) => (n, EntryType::Link, &[], Some(t)),
        };
        let mut h = header(style, kind, data.len() as u64);
        let stored = if style == Style::Pax {
            pax_path(&mut b, name);
            "placeholder"
        } else {
            name
        };
        match target {
            Some(t) => b.append_link(&mut h, stored, t).unwrap(),
            None => b.append_data(&mut h, stored, data).unwrap(),
        }
    }
    b.into_inner().unwrap();
}

/// Each photo as the members `{prefix}{label}/{file name}` and `{prefix}{label}/{stem}.cls`
/// (the label as text and a newline, as WebDataset's ImageNet shards hold it).
pub fn sample_entries(photos: &[(u32, PathBuf)], prefix: &str) -> Vec<Entry> {
    let mut entries = Vec::new();
    for (label, path) in photos {
        let name = path.file_name().unwrap().to_str().unwrap();
        let stem = name.split('.').next().unwrap();
        entries.push(file(
            &format!("{prefix}{label}/{name}"),
            std::fs::read(path).unwrap(),
        ));
        entries.push(file(
            &format!("{prefix}{label}/{stem}.cls"),
            format!("{label}\n"),
        ));
    }
    entries
}

/// The photos split over three shards in `dir`, `shard-00000.tar` to `shard-00002.tar`, one
/// in each [`Style`], with member names over 100 bytes in the GNU and ustar ones (long-name
/// members, and ustar's prefix).
pub fn write_shards(dir: &Path, photos: &[(u32, PathBuf)]) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    let long = format!("{}/", "d".repeat(90));
    let n = photos.len();
    let cuts = [0, n / 3, 2 * n / 3, n];
    let styles = [
        (Style::Gnu, long.as_str()),
        (Style::Ustar, long.as_str()),
        (Style::Pax, ""),
    ];
    let mut shards = Vec::new();
    for (i, (style, prefix)) in styles.into_iter().enumerate() {
        let path = dir.join(format!("shard-{i:05}.tar"));
        let entries = sample_entries(&photos[cuts[i]..cuts[i + 1]], prefix);
        write_tar(&path, style, &entries);
        shards.push(path);
    }
    shards
}

/// Asserts that the datasets at `a` and `b` hold the same records (header and payload
/// bytes, so labels too) and classes.
pub fn assert_same_records(a: &Path, b: &Path) {
    let (a, b) = (Dataset::open(a).unwrap(), Dataset::open(b).unwrap());
    let (ma, mb): (&Manifest, &Manifest) = (a.manifest(), b.manifest());
    assert_eq!(ma.samples, mb.samples);
    assert_eq!(ma.classes, mb.classes);
    assert_eq!(ma.audit, mb.audit);
    let (ra, rb) = (a.reader().unwrap(), b.reader().unwrap());
    for i in 0..ma.samples {
        let (x, y) = (ra.get(i).unwrap(), rb.get(i).unwrap());
        assert_eq!(x.header.to_bytes(), y.header.to_bytes(), "record {i}");
        assert!(x.payload == y.payload, "payload of record {i}");
    }
}
