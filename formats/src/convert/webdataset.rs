//! Listing WebDataset tar shards: a `.tar` file, or the `.tar` files directly in a folder
//! (by name, in Python's `sorted` order), each read member by member in tar order, the
//! members grouped into samples by key as WebDataset groups them; each sample's image is an
//! input, read in place from the tar, labelled by its `cls` member.
//!
//! A folder's subfolders are not read: WebDataset datasets keep their splits side by side
//! (`train/`, `val/`), and a recursive walk would merge them into one dataset.
//!
//! A sample's key is its members' path up to the first dot of the base name
//! (`n01440764/x_293.jpg` and `n01440764/x_293.cls` are the sample `n01440764/x_293`), its
//! fields what follows (compared in lower case), and consecutive members with the same key
//! are one sample: WebDataset's `base_plus_ext` and `group_by_keys`. Members whose base
//! name has no dot, or starts with one (macOS's `._x.jpg`), belong to no sample, as do
//! metadata members (`__meta__/...`, which WebDataset's `skip_meta` drops).
//!
//! Each sample is one input, skipped with a reason (`TAR:MEMBER` in reports) when it has no
//! image, more than one, a member that is a link or another non-file, a `cls` that is not a
//! label, or a key already listed in its shard (a sample whose members are not
//! consecutive). A key an earlier shard had is converted, with one warning: shards written
//! by independent workers each number their samples from zero, as WebDataset allows. A shard that cannot be opened, holds no
//! sample or is damaged is one input of its own (named by the tar's path), skipped with
//! the reason and the byte where the damage is; the samples before the damage are kept.

use std::collections::{hash_map::Entry, BTreeMap, HashMap};
use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::list_file::{self, MAX_CLASSES};
use super::listing::{member_name, Input, InputBytes, ListedTar, Listing};
use super::own_output::OwnOutput;
use super::tar_index::{Damage, End, Kind, Member, TarMembers, MAX_NAME_BYTES, NAME_SHOWN};
use super::walk::{is_hidden, sorted_entries};
use crate::input_file::{open_regular, refusal_reason, FileIdentity};
use crate::text::{lossless_text, Lossless};
use crate::FormatError;

/// Fields that are a sample's image: the formats the converter reads (it tells them by
/// their bytes; these names only pick the member).
const IMAGE_FIELDS: [&str; 12] = [
    "jpg", "jpeg", "png", "webp", "bmp", "gif", "tif", "tiff", "ppm", "pgm", "pbm", "pnm",
];

/// The field holding a sample's label as decimal text, as WebDataset's ImageNet shards
/// have it.
const LABEL_FIELD: &str = "cls";

/// A `cls` member larger than this is not a label (a number below [`MAX_CLASSES`] and
/// some white space), and is not read.
const MAX_CLS_BYTES: u64 = 64;

/// Fields not converted that the warning names; the rest are counted.
const FIELDS_NAMED: usize = 12;

/// Fields of a sample kept to name in its skip reason.
const FIELDS_KEPT: usize = 8;

/// True when `name` ends in `.tar` (any case).
pub(crate) fn is_tar_name(name: &OsStr) -> bool {
    let n = name.as_bytes();
    n.len() > 4 && n[n.len() - 4..].eq_ignore_ascii_case(b".tar")
}

/// True for the names of compressed tar shards, which cannot be read in place.
pub(crate) fn is_compressed_tar(name: &OsStr) -> bool {
    let n = name.to_string_lossy().to_ascii_lowercase();
    [
        ".tar.gz", ".tgz", ".tar.zst", ".tar.xz", ".tar.bz2", ".tar.lz4",
    ]
    .iter()
    .any(|s| n.ends_with(s))
}

/// The hint for a conversion that read `.tar` files (`tars`) or compressed shards
/// (`compressed`) as images, when WebDataset was not the layout; `None` when neither.
pub(crate) fn shards_as_images_hint(tars: bool, compressed: bool) -> Option<&'static str> {
    match (tars, compressed) {
        (true, _) => Some("WebDataset tar shards convert with --layout webdataset; Python: layout=\"webdataset\""),
        (false, true) => Some("compressed tar shards (.tar.gz, .tar.zst, ...) cannot be read in place: decompress them first (gunzip, zstd -d), then convert the .tar files"),
        (false, false) => None,
    }
}

/// True when `root` is a `.tar` file, or a folder whose entries (hidden ones and the
/// conversion's output `own` aside) are all `.tar` files, at least one: what `Auto`
/// reads as WebDataset shards. Read as a flat folder, every shard would be skipped as
/// "not an image" or too large.
pub(crate) fn looks_like_shards(root: &Path, own: &OwnOutput) -> bool {
    let Ok(meta) = std::fs::metadata(root) else {
        return false;
    };
    if meta.is_file() {
        return root.file_name().is_some_and(is_tar_name);
    }
    let Ok(entries) = std::fs::read_dir(root) else {
        return false;
    };
    // In any order (the answer does not depend on it): a million images are not sorted.
    let mut tars = 0;
    for e in entries {
        let Ok(e) = e else {
            return false;
        };
        let plain_file = e.file_type().is_ok_and(|t| t.is_file());
        if plain_file && !is_hidden(&e.file_name()) && !is_tar_name(&e.file_name()) {
            return false;
        }
        let Ok(m) = std::fs::metadata(e.path()) else {
            return false;
        };
        if is_hidden(&e.file_name()) || (m.is_dir() && own.is(&e.path(), &m)) {
            continue;
        }
        if !m.is_file() || !is_tar_name(&e.file_name()) {
            return false;
        }
        tars += 1;
    }
    tars > 0
}

/// How the WebDataset layout was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Chosen {
    /// The caller asked for it (`--layout webdataset`).
    Asked,
    /// `Auto` picked it because the source holds only `.tar` files.
    ByAuto,
}

/// The samples of the WebDataset shards at `root` (a `.tar` file or a folder of them).
///
/// # Errors
///
/// [`FormatError::Io`] when `root` cannot be read; [`FormatError::BadSource`] when a
/// folder holds no `.tar` file, or when `Auto` picked this layout and no sample has a
/// label (see [`decide_labels`]).
pub(crate) fn list_webdataset(
    root: &Path,
    own: &OwnOutput,
    chosen: Chosen,
) -> Result<Listing, FormatError> {
    let Found {
        shards,
        ignored,
        mut warnings,
    } = find_shards(root, own)?;
    let mut state = State::default();
    for (i, tar) in shards.iter().enumerate() {
        read_shard(tar, i, &mut state)?;
    }
    warnings.extend(state.notes());
    let unlabelled = match chosen {
        Chosen::Asked => Some(unlabelled_name(root)),
        Chosen::ByAuto => None,
    };
    let Some((inputs, classes)) = decide_labels(state.items, unlabelled, &mut warnings) else {
        // A folder of per-class tars (ImageNet's train tars, `n01440764.tar`, ...) looks
        // like shards to `Auto`; read as WebDataset it would be one unlabelled class, every
        // label lost, and the run would still succeed.
        return Err(FormatError::BadSource {
            path: root.to_path_buf(),
            reason: format!(
                "read as WebDataset tar shards ({}), but no sample has a cls member (its label): if each .tar is one class (as ImageNet's train tars are), unpack each into a folder of its own and convert the folders (ImageFolder); to convert unlabelled shards as one class, pass --layout webdataset (Python: layout=\"webdataset\")",
                if root.is_dir() { "it holds only .tar files" } else { "it is a .tar file" }
            ),
        });
    };
    Ok(Listing {
        inputs,
        classes,
        ignored,
        flat: false,
        webdataset: true,
        warnings,
    })
}

/// What a WebDataset source path holds.
struct Found {
    /// The shards, in order.
    shards: Vec<PathBuf>,
    /// The folder's other entries.
    ignored: Vec<PathBuf>,
    /// A warning for compressed shards among them.
    warnings: Vec<String>,
}

/// The shards at `root`: the file itself, or the folder's `.tar` files.
fn find_shards(root: &Path, own: &OwnOutput) -> Result<Found, FormatError> {
    let meta = std::fs::metadata(root).map_err(|e| FormatError::io(root, e))?;
    if !meta.is_dir() {
        return Ok(Found {
            shards: vec![root.to_path_buf()],
            ignored: Vec::new(),
            warnings: Vec::new(),
        });
    }
    let (mut shards, mut ignored, mut compressed) = (Vec::new(), Vec::new(), Vec::new());
    for e in sorted_entries(root).map_err(|e| FormatError::io(root, e))? {
        let (path, name) = (e.path(), e.file_name());
        if std::fs::metadata(&path).is_ok_and(|m| m.is_dir() && own.is(&path, &m)) {
            continue;
        }
        if is_tar_name(&name) && !is_hidden(&name) {
            shards.push(path);
        } else {
            if is_compressed_tar(&name) {
                compressed.push(path.clone());
            }
            ignored.push(path);
        }
    }
    let hint = compressed.first().map(|c| {
        format!(
            "compressed shards are not read ({} of them, e.g. {}): stoker reads each member in place, which a compressed stream does not allow; decompress them first (gunzip, zstd -d)",
            compressed.len(),
            c.lossless()
        )
    });
    if shards.is_empty() {
        return Err(FormatError::BadSource {
            path: root.to_path_buf(),
            reason: format!(
                "holds no .tar shards (a WebDataset source is a .tar file or a folder of them; subfolders are not read){}",
                hint.map(|h| format!("; {h}")).unwrap_or_default()
            ),
        });
    }
    Ok(Found {
        shards,
        ignored,
        warnings: hint.into_iter().collect(),
    })
}

/// A sample's label as its `cls` member gave it.
enum Label {
    /// No `cls` member.
    Missing,
    Valid(u32),
    /// Why the `cls` member is not a label.
    Bad(String),
}

/// One input as listed, before labels are decided (they depend on whether any sample
/// has a `cls` member).
struct Item {
    input: Input,
    label: Label,
}

/// What reading the shards gathers.
#[derive(Default)]
struct State {
    items: Vec<Item>,
    /// Each key listed (its xxh3-128: a set of ImageNet's 1.3 million keys then takes
    /// tens of MB, not the keys' text), and the last shard it came from.
    keys: HashMap<u128, usize>,
    /// Samples whose key an earlier shard had too (converted: see [`State::seen_here`]),
    /// and the first of them as (key, shard).
    repeated_across: u64,
    first_repeat: Option<(String, PathBuf)>,
    /// Members of fields that are not converted, by field.
    other_fields: BTreeMap<String, u64>,
    /// Members that belong to no sample (no key).
    keyless: u64,
    /// Metadata members (`__meta__/...`), left out as WebDataset's `skip_meta` leaves them.
    meta: u64,
    /// Shards that end without the end-of-archive marker.
    no_marker: Vec<PathBuf>,
}

impl State {
    /// Warnings about what was not read, or may be missing.
    fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if !self.other_fields.is_empty() || self.keyless > 0 || self.meta > 0 {
            let mut fields: Vec<_> = self.other_fields.iter().collect();
            fields.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
            let mut named: Vec<String> = (fields.iter().take(FIELDS_NAMED))
                .map(|(f, n)| format!("{f} ({n})"))
                .collect();
            if fields.len() > FIELDS_NAMED {
                named.push(format!("{} more fields", fields.len() - FIELDS_NAMED));
            }
            if self.keyless > 0 {
                named.push(format!(
                    "members without a key and extension ({})",
                    self.keyless
                ));
            }
            if self.meta > 0 {
                named.push(format!("metadata members, __NAME__/... ({})", self.meta));
            }
            notes.push(format!(
                "tar members that are not a sample's image or cls were not read: {}",
                named.join(", ")
            ));
        }
        if let Some((key, tar)) = &self.first_repeat {
            notes.push(format!(
                "{} sample(s) have a key an earlier shard has too (e.g. {key:?} in {}): each is a sample of its own, named by its shard; if a shard is listed twice, its samples are in the dataset twice",
                self.repeated_across,
                tar.lossless()
            ));
        }
        if let Some(first) = self.no_marker.first() {
            notes.push(format!(
                "{} shard(s) end without tar's end-of-archive blocks (e.g. {}): a shard cut short between two members looks the same, so samples after its last one may be missing",
                self.no_marker.len(),
                first.lossless()
            ));
        }
        notes
    }

    /// Records `key` as listed from shard `shard` (at `tar`); true when this shard listed
    /// it before. A key an earlier shard listed is only counted: WebDataset groups samples
    /// within a shard, shards written by independent workers each number their samples
    /// from `000000`, and inputs are named `TAR:MEMBER`, unique across shards anyway.
    fn seen_here(&mut self, key: &[u8], shard: usize, tar: &Path) -> bool {
        match self.keys.entry(xxhash_rust::xxh3::xxh3_128(key)) {
            Entry::Occupied(mut e) if *e.get() != shard => {
                e.insert(shard);
                self.repeated_across += 1;
                self.first_repeat.get_or_insert_with(|| {
                    (String::from_utf8_lossy(key).into_owned(), tar.to_path_buf())
                });
                false
            }
            Entry::Occupied(_) => true,
            Entry::Vacant(e) => {
                e.insert(shard);
                false
            }
        }
    }
}

/// The members of one sample, as grouped.
struct Group {
    key: Vec<u8>,
    /// Its first image member.
    image: Option<Member>,
    /// How many image members it has, and the fields of the first [`FIELDS_KEPT`].
    images: usize,
    image_fields: Vec<String>,
    /// Its first `cls` member, and how many it has.
    cls: Option<Member>,
    cls_count: usize,
    /// The first member that is not a file.
    not_a_file: Option<String>,
    /// Its fields, for a skip reason (the first few).
    fields: Vec<String>,
}

impl Group {
    fn new(key: &[u8]) -> Group {
        Group {
            key: key.to_vec(),
            image: None,
            images: 0,
            image_fields: Vec::new(),
            cls: None,
            cls_count: 0,
            not_a_file: None,
            fields: Vec::new(),
        }
    }

    fn add(&mut self, m: Member, field: String, other_fields: &mut BTreeMap<String, u64>) {
        let is_image = IMAGE_FIELDS.contains(&field.as_str());
        if (is_image || field == LABEL_FIELD) && self.not_a_file.is_none() {
            if let Kind::Other(kind) = m.kind {
                self.not_a_file = Some(format!(
                    "{} is {kind} in the tar, not a file",
                    String::from_utf8_lossy(&m.name)
                ));
            }
        }
        // Bounded, so that a hostile sample of a million members holds a few names.
        if self.fields.len() < FIELDS_KEPT {
            self.fields.push(field.clone());
        }
        if is_image {
            self.images += 1;
            if self.image_fields.len() < FIELDS_KEPT {
                self.image_fields.push(field);
            }
            self.image.get_or_insert(m);
        } else if field == LABEL_FIELD {
            self.cls_count += 1;
            self.cls.get_or_insert(m);
        } else {
            *other_fields.entry(field).or_default() += 1;
        }
    }
}

/// A member's sample key and field (lower case); `None` for a member of no sample.
fn split_name(name: &[u8]) -> Option<(&[u8], String)> {
    let base = name.iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1);
    let dot = name[base..].iter().position(|&b| b == b'.')?;
    if dot == 0 {
        return None;
    }
    let field = String::from_utf8_lossy(&name[base + dot + 1..]).to_ascii_lowercase();
    Some((&name[..base + dot], field))
}

/// Lists the samples of shard number `index`, `tar`, into `state`.
///
/// # Errors
///
/// [`FormatError::OutsideFault`] when the tar cannot be opened for no fault of its own:
/// refused, the whole shard's samples would be lost from a conversion that succeeds.
fn read_shard(tar: &Path, index: usize, state: &mut State) -> Result<(), FormatError> {
    let refuse = |state: &mut State, reason: String| {
        state.items.push(Item {
            input: Input::refused(tar.to_path_buf(), 0, reason),
            label: Label::Missing,
        });
        Ok(())
    };
    // Opened as any input is (never a FIFO, which could block); its identity is kept, so
    // that a member is read only from this same file.
    let (file, meta) = match open_regular(tar) {
        Ok(f) => f,
        Err(e) if e.is_outside_fault() => return Err(e.escalate(crate::FaultStage::Listing)),
        Err(e) => return refuse(state, refusal_reason(&e)),
    };
    let len = meta.len();
    let shard = Shard {
        tar: Arc::new(ListedTar {
            path: tar.to_path_buf(),
            id: FileIdentity::of(&meta),
        }),
        file: &file,
        index,
    };
    let before = state.items.len();
    let mut members = TarMembers::new(&file, len);
    let mut group: Option<Group> = None;
    loop {
        let m = match members.next_member() {
            Ok(Some(m)) => m,
            Ok(None) => break,
            Err(d) => {
                let lost = group.take().and_then(|g| shard.finish_before(g, &d, state));
                let reason = damage_reason(&d, len, lost, state.items.len() == before);
                return refuse(state, reason);
            }
        };
        if m.kind == Kind::Directory {
            continue;
        }
        if m.name_bytes > MAX_NAME_BYTES {
            // Its key is not known (the name was cut as it was read): the member is an
            // input of its own, refused.
            if let Some(done) = group.take() {
                shard.finish(done, state);
            }
            state.items.push(Item {
                input: Input::refused(
                    member_name(tar, &m.name),
                    0,
                    format!(
                        "its tar member name is {} bytes, over the limit of {MAX_NAME_BYTES} (PATH_MAX): not read (named here by its first {NAME_SHOWN} bytes and its end)",
                        m.name_bytes
                    ),
                ),
                label: Label::Missing,
            });
            continue;
        }
        if is_meta(&m.name) {
            state.meta += 1;
            continue;
        }
        let Some((key, field)) = split_name(&m.name) else {
            state.keyless += 1;
            continue;
        };
        let g = match &mut group {
            Some(g) if g.key == key => g,
            _ => {
                if let Some(done) = group.take() {
                    shard.finish(done, state);
                }
                group.insert(Group::new(key))
            }
        };
        g.add(m, field, &mut state.other_fields);
    }
    if let Some(done) = group.take() {
        shard.finish(done, state);
    }
    if state.items.len() == before {
        return refuse(
            state,
            format!("holds no samples: no member with a key and an extension in its {len} bytes (an empty or zero-filled tar?)"),
        );
    }
    if members.end() == End::Eof {
        state.no_marker.push(tar.to_path_buf());
    }
    Ok(())
}

/// The skip reason of a shard damaged as `d` says, `len` bytes long; `lost` is the key of
/// the sample that was being read there, `first` whether nothing before it was a sample.
fn damage_reason(d: &Damage, len: u64, lost: Option<Vec<u8>>, first: bool) -> String {
    if d.at == 0 && first {
        return d.reason.clone();
    }
    let lost = lost
        .map(|k| {
            format!(
                ", nor the sample {} being read there",
                String::from_utf8_lossy(&k)
            )
        })
        .unwrap_or_default();
    format!(
        "damaged tar at byte {}: {}; the rest of the shard ({} bytes) is not read{lost}",
        d.at,
        d.reason,
        len.saturating_sub(d.at)
    )
}

/// The shard being read.
struct Shard<'f> {
    tar: Arc<ListedTar>,
    file: &'f File,
    index: usize,
}

impl Shard<'_> {
    /// Finishes `g`, the sample open when the walk stopped at damage `d`, when it is
    /// whole: the damaged member is another sample's, or (its name unknown) `g` already has
    /// its image and label. Else `g` is lost with the rest of the shard: its key.
    fn finish_before(&self, g: Group, d: &Damage, state: &mut State) -> Option<Vec<u8>> {
        let whole = match d.member.as_deref().and_then(split_name) {
            Some((key, _)) => key != g.key,
            None => g.image.is_some() && g.cls.is_some(),
        };
        if whole {
            self.finish(g, state);
            return None;
        }
        Some(g.key)
    }

    /// Turns the members of one sample into its input.
    fn finish(&self, g: Group, state: &mut State) {
        let tar = self.tar.path.as_path();
        let name = member_name(tar, g.image.as_ref().map_or(&g.key, |m| &m.name));
        let repeated = state.seen_here(&g.key, self.index, tar);
        let label = match &g.cls {
            None => Label::Missing,
            Some(_) if g.cls_count > 1 => Label::Bad(format!(
                "{} cls members: which label is the sample's is not known",
                g.cls_count
            )),
            Some(m) if m.kind == Kind::File => read_label(self.file, m),
            Some(_) => Label::Bad("its cls member is not a file".into()),
        };
        let refused = if repeated {
            Some("its key repeats a sample listed earlier in this shard (a sample's members must be consecutive in the tar)".into())
        } else if let Some(r) = g.not_a_file {
            Some(r)
        } else if g.image.is_none() {
            Some(format!(
                "no image member ({}); it has: {}",
                IMAGE_FIELDS.join(", "),
                g.fields.join(", ")
            ))
        } else if g.images > 1 {
            Some(format!(
                "more than one image member ({}): which one is the sample's is not known",
                g.image_fields.join(", ")
            ))
        } else {
            None
        };
        let bytes = match (&g.image, &refused) {
            (Some(m), None) => InputBytes::TarMember {
                tar: self.tar.clone(),
                offset: m.offset,
                len: m.size,
            },
            _ => InputBytes::File,
        };
        let input = Input {
            path: name,
            label: 0,
            refused,
            bytes,
        };
        state.items.push(Item { input, label });
    }
}

/// True for a metadata member, which WebDataset's readers skip (`skip_meta`, the pattern
/// `__[^/]*__($|/)` at the name's start): its first path component is `__NAME__`.
fn is_meta(name: &[u8]) -> bool {
    let first = name.split(|&b| b == b'/').next().unwrap_or(name);
    first.len() >= 4 && first.starts_with(b"__") && first.ends_with(b"__")
}

/// The label in `text`: ASCII white space (space, tab, CR, LF, form feed) around an
/// optional `+` and decimal digits, below [`MAX_CLASSES`]. Python's `int` also takes
/// `-0`, `1_000` and vertical tab; those are refused here, as is Unicode white space.
fn parse_label(text: &[u8]) -> Option<u32> {
    let digits = std::str::from_utf8(text.trim_ascii()).ok()?;
    digits.parse::<u32>().ok().filter(|&l| l < MAX_CLASSES)
}

/// The label in the `cls` member `m` of `file` (see [`parse_label`]).
fn read_label(file: &File, m: &Member) -> Label {
    let bad = |what: String| {
        Label::Bad(format!(
            "its cls {what} is not a label: want a decimal integer from 0 to {}",
            MAX_CLASSES - 1
        ))
    };
    if m.size > MAX_CLS_BYTES {
        return bad(format!("of {} bytes", m.size));
    }
    let mut buf = vec![0u8; m.size as usize];
    if let Err(e) = file.read_exact_at(&mut buf, m.offset) {
        return Label::Bad(format!("its cls member is unreadable: {e}"));
    }
    match parse_label(&buf) {
        Some(l) => Label::Valid(l),
        None => bad(format!("{:?}", String::from_utf8_lossy(buf.trim_ascii()))),
    }
}

/// The class name of an unlabelled source: the folder's name, or the tar's without
/// `.tar`.
fn unlabelled_name(root: &Path) -> String {
    let real = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let name = if real.is_dir() {
        real.file_name()
    } else {
        real.file_stem()
    };
    name.map(lossless_text).unwrap_or_else(|| "images".into())
}

/// The inputs with their labels, and the class names. When no sample has a `cls` member
/// the shards are unlabelled data (as WebDataset holds image-text sets): every sample is
/// label 0 of one class, named by the argument `unlabelled` (the folder's or the tar's
/// name), with a warning; `None` there (the layout was not asked for) means no listing.
/// Otherwise a sample without one is skipped, and the classes are the labels as text,
/// `"0"` to the largest.
fn decide_labels(
    items: Vec<Item>,
    unlabelled: Option<String>,
    warnings: &mut Vec<String>,
) -> Option<(Vec<Input>, Vec<String>)> {
    let labelled = items.iter().any(|i| !matches!(i.label, Label::Missing));
    if !labelled {
        let unlabelled = unlabelled?;
        let samples = items.iter().filter(|i| i.input.refused.is_none()).count();
        warnings.push(format!(
            "no sample has a cls member (its label): the {samples} samples are converted as one class of unlabelled images, {unlabelled:?}, label 0"
        ));
        let inputs = items.into_iter().map(|i| i.input).collect();
        return Some((inputs, vec![unlabelled]));
    }
    let mut max = 0;
    let inputs: Vec<Input> = (items.into_iter())
        .map(|Item { mut input, label }| {
            match label {
                Label::Valid(l) => {
                    input.label = l;
                    max = max.max(l);
                }
                Label::Bad(reason) => {
                    input.refused.get_or_insert(reason);
                }
                Label::Missing => {
                    input.refused.get_or_insert_with(|| {
                        "no cls member (its label), which the other samples have".into()
                    });
                }
            }
            if input.refused.is_some() {
                input.bytes = InputBytes::File;
            }
            input
        })
        .collect();
    let labels = inputs
        .iter()
        .filter(|i| i.refused.is_none())
        .map(|i| i.label);
    let classes = max as usize + 1;
    warnings.extend(list_file::sparse_labels_warning(
        "the cls members",
        labels,
        classes,
    ));
    Some((inputs, (0..=max).map(|l| l.to_string()).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cls_labels_that_number_many_unused_classes_are_warned_about() {
        let items = |labels: &[u32]| -> Vec<Item> {
            (labels.iter())
                .map(|&l| Item {
                    input: Input::file(PathBuf::from(format!("{l}.jpg")), 0),
                    label: Label::Valid(l),
                })
                .collect()
        };
        let mut warnings = Vec::new();
        let (_, classes) = decide_labels(items(&[0, 3, 1_000_000]), None, &mut warnings).unwrap();
        assert_eq!(classes.len(), 1_000_001);
        assert!(
            warnings.len() == 1
                && warnings[0].starts_with("the cls members: the labels run to 1000000"),
            "{warnings:?}"
        );
        let mut warnings = Vec::new();
        decide_labels(items(&[0, 3, 999]), None, &mut warnings).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
    }

    #[test]
    fn keys_and_fields_split_as_webdataset_splits_them() {
        let split =
            |n: &[u8]| split_name(n).map(|(k, f)| (String::from_utf8_lossy(k).into_owned(), f));
        let some = |k: &str, f: &str| Some((k.to_string(), f.to_string()));
        assert_eq!(
            split(b"n014/ILSVRC_293.JPEG"),
            some("n014/ILSVRC_293", "jpeg")
        );
        // The first dot of the base name, not of the path.
        assert_eq!(split(b"a.b/c.seg.png"), some("a.b/c", "seg.png"));
        assert_eq!(split(b"c.cls"), some("c", "cls"));
        for none in [&b"README"[..], b"d/._c.jpg", b".hidden", b"dir/"] {
            assert_eq!(split(none), None, "{:?}", String::from_utf8_lossy(none));
        }
    }

    #[test]
    fn metadata_members_are_those_webdataset_skips() {
        for meta in [
            &b"__meta__/m_1.jpg"[..],
            b"__key__",
            b"__a__b__/x.cls",
            b"____",
        ] {
            assert!(is_meta(meta), "{:?}", String::from_utf8_lossy(meta));
        }
        for not in [
            &b"d/__meta__/x.jpg"[..],
            b"__meta_/x.jpg",
            b"__x.jpg",
            b"___",
        ] {
            assert!(!is_meta(not), "{:?}", String::from_utf8_lossy(not));
        }
    }

    /// Exactly what FORMAT.md says a cls holds; `"\u{2007}3"` was taken (Unicode trim),
    /// which Python's `int(bytes)` refuses.
    #[test]
    fn labels_are_ascii_trimmed_decimal_text() {
        for (text, want) in [(&b" 3\n"[..], 3), (b"+3", 3), (b"0003", 3), (b"\t7\r\n", 7)] {
            assert_eq!(parse_label(text), Some(want), "{text:?}");
        }
        assert_eq!(parse_label(b"1048575"), Some(1_048_575));
        let bad = [
            "1048576",
            "-0",
            "1_000",
            "3.0",
            "0x10",
            "",
            "\u{2007}3",
            "\u{663}",
        ];
        for text in bad {
            assert_eq!(parse_label(text.as_bytes()), None, "{text:?}");
        }
    }
}
