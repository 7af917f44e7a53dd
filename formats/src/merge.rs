//! Joining the parts of a partitioned conversion (`convert --part I --parts N`), or of a
//! writing from several processes (`SampleWriter` with a part), into one dataset, without
//! copying record data.
//!
//! Each part's shards are hard-linked into the output root under their dataset-wide names,
//! and the manifest lists them in part order; each shard keeps the keys its part gave it
//! (numbered from 0 within the part), and its manifest entry says so with `key_base`. The
//! manifest is written last, so until it exists the output holds only links that a rerun of
//! `merge` replaces, and every part directory is still whole; after it is written the part
//! directories are removed (their shards live on through the links).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::convert::audit::Audit;
use crate::convert::claim::{is_merge_leftover, is_part_or_merge_leftover, stray_entry};
use crate::convert::lock::OutputLock;
use crate::convert::other_flag;
use crate::held_dir::HeldDir;
use crate::manifest::{Manifest, PartInfo, Provenance, ShardEntry, MANIFEST_FILE};
use crate::text::Lossless;
use classes::SharedClasses;

mod classes;
mod complete;
mod finished;
mod link;
mod removal;
use crate::writer::{shard_file_name, write_atomically};
use crate::FormatError;
use complete::check_complete;
use link::{check_digests, check_size, link_error, REDO_PART};

/// What [`merge`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct MergeReport {
    /// The merged dataset's root (in JSON, its bytes that are not UTF-8 as `\xNN`).
    #[serde(serialize_with = "crate::convert::path_as_text")]
    pub out: PathBuf,
    /// Parts joined.
    pub parts: u32,
    /// Samples in the merged dataset.
    pub samples: u64,
    /// Shard files referenced.
    pub shards: u64,
    /// Bytes of all shard files.
    pub bytes: u64,
    /// The part directories removed once the manifest was written (their shards live on
    /// in `out`, also a part's outside it); one that could not be is warned about instead.
    #[serde(serialize_with = "crate::convert::paths_as_text")]
    pub removed: Vec<PathBuf>,
}

/// Joins the parts `parts` (part directories; empty = every `part-*` directory under
/// `out`) into one dataset in `out`.
///
/// The parts must be the complete set `0..N` of one conversion: same listing, output
/// flags, format version and stoker version; or of one writing (parts a
/// [`crate::SampleWriter`] wrote with [`crate::SampleOptions::part`]): same classes, output
/// flags, format version and stoker version, the samples of each part following the
/// previous part's. Converted and written parts never merge together. Shards are hard-linked (so `out` must be on
/// the same file system as the parts); the merged dataset reads exactly like a
/// single-process conversion of the same inputs: same indices, labels and record bytes.
/// Then every part directory merged is **removed**, also outside `out` ([`MergeReport::removed`]).
///
/// # Errors
///
/// [`FormatError::MergeRefused`] for an unfinished, foreign, duplicated or missing part,
/// and for a part altered since it was finished: a shard that is not the file its part
/// wrote (every shard is read once, hashed on all cores);
/// [`FormatError::DamagedSourceMap`] for a part's source map that is not the one its
/// manifest names;
/// [`FormatError::OutputExists`] when `out` already holds a dataset or unrelated files;
/// [`FormatError::OutputLocked`] while another merge or convert writes `out`; I/O errors.
///
/// # Examples
///
/// ```
/// use stoker_formats::{convert, merge, ConvertOptions, Dataset, NoProgress, Part, Source};
/// let src = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/data/sample");
/// let out = tempfile::tempdir()?;
/// for index in 0..3 {
///     let mut opts = ConvertOptions::new(Source::ImageFolder(src.into()), out.path());
///     opts.check_decode = false;
///     opts.part = Some(Part::new(index, 3)?);
///     convert(&opts, &NoProgress)?;
/// }
/// let report = merge(out.path(), &[])?;
/// assert_eq!(Dataset::open(out.path())?.len(), report.samples);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn merge(out: &Path, parts: &[PathBuf]) -> Result<MergeReport, FormatError> {
    if out.as_os_str().is_empty() {
        return Err(FormatError::InvalidOptions(
            "the output path is empty: give the root the parts were converted into".into(),
        ));
    }
    crate::convert::refuse_non_directory(out)?;
    if out.join(MANIFEST_FILE).exists() {
        return Err(FormatError::OutputExists {
            path: out.to_path_buf(),
            reason: finished::finished_reason(out, &find_parts(out).unwrap_or_default()),
        });
    }
    // Before anything is created: an `out` inside a part would be made inside it.
    check_nesting(out, parts)?;
    if parts.is_empty() && std::fs::symlink_metadata(out).is_err() {
        // Made and then refused, a mistyped root was left behind as an empty directory.
        return Err(FormatError::MergeRefused {
            path: out.to_path_buf(),
            reason: "does not exist, so it holds no part directories (part-IIIII-of-NNNNN) to merge: give the root that `stoker convert --part I --parts N SRC OUT` (Python `stoker.convert(src, out, part=i, parts=n)`) wrote them into, or the part directories after it".into(),
        });
    }
    let (made, lock) = lock_out(out)?;
    let merged = lock
        .held_dir(out)
        .and_then(|dir| merge_locked(&dir, parts))
        .map_err(|e| out_of_space(out, e));
    if merged.is_err() {
        // A refused merge leaves no directory it made. Removed under the lock, so no part
        // is starting in it (a part locks its root shared while it starts); empty only, and
        // `out` only while it is the directory locked.
        let held = crate::out_dir::DirIdentity::of_file(lock.dir()).ok();
        if let Some(held) = held.filter(|h| h.check(out).is_ok()) {
            for d in &made {
                let removed = match d == out {
                    true => crate::out_dir::remove_empty_dir(d, held),
                    false => std::fs::remove_dir(d).is_ok(),
                };
                if !removed {
                    break;
                }
            }
        }
    }
    drop(lock);
    merged
}

/// `e`, when it is a full disk, a quota or the file size limit, saying what a bare "No
/// space left on device" naming `sources.bin.tmp` left out: nothing was removed, and merge
/// can run again. A stop for no fault of the parts (exit status 3, Python's `OSError`),
/// not a refusal of them.
fn out_of_space(out: &Path, e: FormatError) -> FormatError {
    match crate::out_of_space::out_of_space(e, out, 0, 0) {
        FormatError::OutOfSpace {
            shard,
            cause,
            errno,
            ..
        } => FormatError::MergeOutOfSpace {
            path: shard,
            cause,
            errno,
        },
        e => e,
    }
}

/// Makes `out` and locks it alone; returns the directories made, deepest first.
///
/// A part that gave up in a root it made removes it while empty and unlocked: a lock
/// taken just then is on that removed directory, and `out` would be a new one nobody
/// guards. So the lock counts only while the path still leads to it; otherwise again.
fn lock_out(out: &Path) -> Result<(Vec<PathBuf>, OutputLock), FormatError> {
    let mut made = Vec::new();
    for _ in 0..3 {
        made.extend(crate::convert::out_path::make_dirs(out)?);
        let lock = OutputLock::acquire(out)?;
        if crate::convert::lock::same_dir(lock.dir(), out) {
            return Ok((made, lock));
        }
    }
    Err(FormatError::MergeRefused {
        path: out.to_path_buf(),
        reason:
            "parts starting in it removed it three times while this merge locked it; merge again"
                .into(),
    })
}

/// [`merge`] once `out` is made and locked: the merge into `dir`, the locked root held
/// open. Everything it links, writes or deletes there is named relative to `dir`, and each
/// step first checks that `out`, its path, still names it.
fn merge_locked(dir: &HeldDir, parts: &[PathBuf]) -> Result<MergeReport, FormatError> {
    let out = dir.path();
    let dirs = if parts.is_empty() {
        let found = find_parts(out)?;
        // A `part-*` entry may be a symlink to anywhere, an ancestor of `out` included.
        check_nesting(out, &found)?;
        found
    } else {
        parts.to_vec()
    };
    check_output(dir, &dirs, !parts.is_empty())?;
    let loaded = load_parts(out, &dirs)?;
    // Where each part is, before the check below proves that the paths looked at lead
    // into the root held.
    let places: Vec<_> = loaded
        .iter()
        .map(|(d, _)| removal::place_of(d, dir))
        .collect();
    // One part may be empty (all its inputs skipped); all of them empty is a conversion
    // that wrote nothing, refused as a whole conversion's is, before anything is linked.
    if loaded.iter().all(|(_, m)| m.samples == 0) {
        return Err(FormatError::BadSource {
            path: PathBuf::from(&loaded[0].1.provenance.source),
            reason: format!(
                "none of the {} parts holds a record (every input or sample was skipped), so no dataset was merged; see each part's convert or writer report for why (for a list, is SRC the directory its paths start from?)",
                loaded.len()
            ),
        });
    }

    // Links from an interrupted merge are replaced: the part directories are the truth
    // until the manifest exists. A merge refused while linking takes its links away again.
    dir.check()?;
    remove_shards(dir)?;
    let manifest = match link_parts(dir, &loaded, &places) {
        Ok(m) => m,
        Err(e) => {
            let _ = remove_shards(dir);
            // A part's file that differs from its manifest because the root was swapped
            // under the merge (its parts' manifests and maps are read by path) is said as
            // what happened.
            return Err(match dir.check() {
                Err(moved @ FormatError::OutputMoved { .. }) => moved,
                _ => e,
            });
        }
    };
    // The merge is done; part directories are only extra names for the same shards now.
    // Failing to remove one fails nothing (the dataset is whole), but is said.
    let mut removed = Vec::new();
    for ((part, _), place) in loaded.iter().zip(&places) {
        match removal::remove(place, dir) {
            Ok(Some(target)) => removed.push(target),
            Ok(None) => removed.push(part.clone()),
            Err(e) => tracing::warn!(
                "merged, but the part directory {} was not removed ({e}): its shards are {}'s now, so it can be deleted",
                part.lossless(),
                out.lossless()
            ),
        }
    }
    // Checked last: moved at any step since the last check, every step went on in it.
    if dir.check().is_err() {
        tracing::warn!("{}: the output root was moved away or removed while the merge finished: the merged dataset is whole in the directory it was moved to (or went with it), and the part directories named removed went from there; this path names another directory now, or none", out.lossless());
    }
    Ok(MergeReport {
        out: out.to_path_buf(),
        parts: loaded.len() as u32,
        samples: manifest.samples,
        shards: manifest.shards.len() as u64,
        bytes: manifest.bytes,
        removed,
    })
}

/// Links every part's shards into `out` under the merged names and writes the merged
/// manifest: the merge's one visible result, written last.
fn link_parts(
    out_dir: &HeldDir,
    loaded: &[(PathBuf, Manifest)],
    places: &[removal::PartPlace],
) -> Result<Manifest, FormatError> {
    let out = out_dir.path();
    let (mut shards, mut linked) = (Vec::new(), Vec::new());
    let mut audit: Option<Audit> = None;
    let (mut samples, mut bytes, mut payload_bytes) = (0u64, 0u64, 0u64);
    for ((dir, m), place) in loaded.iter().zip(places) {
        out_dir.check()?;
        let part = place.open(out_dir, dir)?;
        for s in &m.shards {
            let from = dir.join(&s.file);
            check_size(&part, s)?;
            let file = shard_file_name(shards.len());
            let to = out.join(&file);
            (out_dir.link_from(&part, &s.file, &file)).map_err(|e| link_error(&from, &to, e))?;
            linked.push((from, file.clone(), s.xxh3));
            let first_index = samples + s.first_index;
            let first_key = s.first_key();
            shards.push(ShardEntry {
                file,
                first_index,
                key_base: (first_key != first_index).then_some(first_key),
                ..s.clone()
            });
        }
        // Each part's manifest was checked alone; forged ones could still add up past u64.
        let total = |sum: u64, part: u64, what: &str| {
            sum.checked_add(part)
                .ok_or_else(|| FormatError::InvalidManifest {
                    path: dir.join(MANIFEST_FILE),
                    reason: format!("the parts' {what} add up past 2^64"),
                })
        };
        samples = total(samples, m.samples, "samples")?;
        bytes = total(bytes, m.bytes, "bytes")?;
        payload_bytes = total(payload_bytes, m.payload_bytes, "payload bytes")?;
        if let Some(a) = &m.audit {
            add_audit(audit.get_or_insert_with(Audit::default), a);
        }
    }
    check_digests(out_dir, &linked)?;
    let first = &loaded[0].1;
    let manifest = Manifest {
        format: first.format.clone(),
        format_version: first.format_version,
        samples,
        encoding: first.encoding,
        raw_size: loaded.iter().find_map(|(_, m)| m.raw_size),
        classes: first.classes.clone(),
        shards,
        bytes,
        payload_bytes,
        provenance: merged_provenance(loaded),
        audit,
        part: None,
        sources: crate::source_map::merged(out_dir, loaded).map_err(|e| match e {
            FormatError::DamagedSourceMap { path, reason } => FormatError::DamagedSourceMap {
                path,
                reason: format!("{reason}; {REDO_PART}"),
            },
            e => e,
        })?,
    };
    let path = out.join(MANIFEST_FILE);
    manifest.validate(&path)?;
    out_dir.check()?;
    write_atomically(out_dir, MANIFEST_FILE, manifest.to_json().as_bytes())?;
    Ok(manifest)
}

/// The `part-*` directories under `out`, sorted.
fn find_parts(out: &Path) -> Result<Vec<PathBuf>, FormatError> {
    let mut dirs = Vec::new();
    for e in std::fs::read_dir(out).map_err(|e| FormatError::io(out, e))? {
        let e = e.map_err(|e| FormatError::io(out, e))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("part-") && e.path().is_dir() {
            dirs.push(e.path());
        }
    }
    dirs.sort();
    if dirs.is_empty() {
        return Err(FormatError::MergeRefused {
            path: out.to_path_buf(),
            reason: "no part directories (part-IIIII-of-NNNNN) to merge; run `stoker convert --part I --parts N SRC OUT` (Python `stoker.convert(src, out, part=i, parts=n)`) for each part first".into(),
        });
    }
    Ok(dirs)
}

/// Refuses an `out` that is a part directory or lies inside one (however spelled, through
/// symlinks too): the merge ends by removing every part directory, which would remove the
/// merged dataset with it, after reporting success. A part inside `out` is the usual layout
/// (`out/part-*`) and is safe: the merge writes only `out`'s own `manifest.json` and
/// `shard-*.lmdb` links, never into a part, and removing a part leaves those alone.
fn check_nesting(out: &Path, parts: &[PathBuf]) -> Result<(), FormatError> {
    let (out_real, _) = crate::path_nesting::resolve(out).map_err(|e| FormatError::io(out, e))?;
    for dir in parts {
        // A part that cannot be resolved (missing) is refused by `load_parts` with its own
        // message; only one that exists can hold `out`.
        let Ok(dir_real) = std::fs::canonicalize(dir) else {
            continue;
        };
        if crate::path_nesting::is_within(&out_real, &dir_real) {
            return Err(FormatError::MergeRefused {
                path: out.to_path_buf(),
                reason: format!(
                    "the output is inside the part directory {} (which the merge removes once it is done, output and all); merge into the parts' output root or a directory outside every part",
                    dir.lossless()
                ),
            });
        }
    }
    Ok(())
}

/// `out` may hold only the parts and what an interrupted merge left (shard links); a part
/// start that died while it made its directory left an empty hidden one, removed here
/// (the merge holds `out` alone: no start is under way).
fn check_output(out: &HeldDir, dirs: &[PathBuf], given: bool) -> Result<(), FormatError> {
    for entry in out.names()? {
        let name = entry.to_string_lossy().into_owned();
        if crate::convert::claim::is_claim_leftover(&name) && out.remove_dir(&entry) {
            continue;
        }
        // A claim's leftover that is not empty was not left by a claim.
        let ours = is_part_or_merge_leftover(&name) || dirs.iter().any(|d| *d == out.join(&entry));
        if !ours {
            // Parts found in `out` are merged in place; given ones may go anywhere else.
            let elsewhere = match given {
                true => "merge into a new directory",
                false => "merge into a new directory (`stoker merge NEW OUT/part-*`)",
            };
            return Err(FormatError::OutputExists {
                path: out.path().to_path_buf(),
                reason: stray_entry(&name, elsewhere),
            });
        }
    }
    Ok(())
}

/// Deletes the shard links an interrupted merge left in `out`.
fn remove_shards(out: &HeldDir) -> Result<(), FormatError> {
    for name in out.names()? {
        if is_merge_leftover(&name.to_string_lossy()) {
            out.remove(&name)?;
        }
    }
    Ok(())
}

/// Reads every part's manifest and checks that they form one complete conversion; returns
/// them in part order, the classes in the first's alone (the others' are the same).
fn load_parts(out: &Path, dirs: &[PathBuf]) -> Result<Vec<(PathBuf, Manifest)>, FormatError> {
    let refuse = |path: &Path, reason: String| FormatError::MergeRefused {
        path: path.to_path_buf(),
        reason,
    };
    let mut loaded: Vec<(PathBuf, Manifest, PartInfo)> = Vec::new();
    let mut classes = SharedClasses::default();
    for dir in dirs {
        if !dir.join(MANIFEST_FILE).exists() {
            let reason = match std::fs::metadata(dir) {
                Ok(m) if m.is_dir() => unfinished(dir),
                Ok(_) => "is not a directory: a part is the directory that `convert --part` or a writer with a part wrote".into(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => "does not exist".into(),
                Err(e) => format!("cannot be read: {e}"),
            };
            return Err(refuse(dir, reason));
        }
        let mut m = Manifest::read(dir)?;
        classes.share(dir, &mut m);
        // Its shards as a reader will find them (sizes, LMDB meta pages): a part damaged in
        // place would otherwise merge into a dataset that says it is finished and does not
        // open, its part directory removed.
        if let Err(e) = crate::Dataset::open(dir) {
            return Err(refuse(
                dir,
                format!("its shards do not open ({e}); convert or write this part again"),
            ));
        }
        let Some(p) = m.part.clone() else {
            return Err(refuse(
                dir,
                "not a part of a partitioned conversion (its manifest has no `part`)".into(),
            ));
        };
        loaded.push((dir.clone(), m, p));
    }
    loaded.sort_by_key(|(_, _, p)| p.index);
    check_kinds(&loaded)?;
    let (first_dir, first, fp) = &loaded[0];
    let first_classes = classes.of(first_dir, first);
    // An empty part has no raw size: compare with the first part that has one.
    let raw = loaded.iter().find_map(|(d, m, _)| Some((d, m.raw_size?)));
    // A derived flag that some parts lack: compare with the first part that has it, so
    // that parts which have it agree among themselves whatever the first part lacks.
    let derived: Vec<(&str, &PathBuf, &String)> = DERIVED_FLAGS
        .iter()
        .filter_map(|&name| {
            let (dir, m, _) = loaded
                .iter()
                .find(|(_, m, _)| m.provenance.flags.contains_key(name))?;
            Some((name, dir, &m.provenance.flags[name]))
        })
        .collect();
    for (dir, m, p) in &loaded {
        let part = crate::convert::Part {
            index: p.index,
            count: p.count,
        };
        if let Err(e) = part.validate() {
            return Err(refuse(
                dir,
                format!("its manifest names no valid part: {e}"),
            ));
        }
        let raw = match (m.raw_size, raw) {
            (Some(a), Some((raw_dir, b))) if a != b => {
                let wxhxc = |r: crate::manifest::RawSize| {
                    format!("{}x{}x{}", r.width, r.height, r.channels)
                };
                Some(("the raw image size".into(), wxhxc(a), wxhxc(b), raw_dir))
            }
            _ => None,
        };
        let flag = derived.iter().find_map(|&(name, flag_dir, value)| {
            let here = m.provenance.flags.get(name).filter(|v| *v != value)?;
            Some((
                format!("the provenance flag `{name}`"),
                dbg(here),
                dbg(value),
                flag_dir,
            ))
        });
        let other = difference((m, p, classes.of(dir, m)), (first, fp, first_classes))
            .map(|(what, here, there)| (what, here, there, first_dir))
            .or(raw)
            .or(flag);
        if let Some((what, here, there, other_dir)) = other {
            return Err(refuse(
                dir,
                format!(
                    "{what} is {here} here but {there} in {}: the parts come from different conversions",
                    other_dir.lossless()
                ),
            ));
        }
        // A written part has no listing to slice: its samples simply follow the previous
        // part's.
        let want = part.slice(p.inputs);
        if !p.written && (p.first_input, p.end_input) != (want.start, want.end) {
            return Err(refuse(
                dir,
                format!(
                    "holds inputs {}..{}, but part {} of {} is {}..{}",
                    p.first_input, p.end_input, p.index, p.count, want.start, want.end
                ),
            ));
        }
    }
    check_complete(out, &loaded)?;
    check_distinct(&loaded)?;
    let mut loaded: Vec<_> = loaded.into_iter().map(|(d, m, _)| (d, m)).collect();
    let (first_dir, first) = &mut loaded[0];
    classes.restore(first_dir, first);
    Ok(loaded)
}

/// Refuses written parts that hold the same records: every process of a distributed
/// writing was given all the samples rather than its share, the classic mistake of a
/// loop that was not split by rank, and the merged dataset would hold each sample once
/// per process. Byte for byte, their shards' sizes, record counts and digests are equal
/// (a writer makes the same file of the same records); in another order (each process
/// shuffled its own way) or other shards, their `part.records` sums and sample counts
/// are. Parts without records, shards without a digest and parts without a sum (from
/// older builds) are not compared. Converted parts hold disjoint slices of one listing,
/// so this is only asked of written ones.
fn check_distinct(loaded: &[(PathBuf, Manifest, PartInfo)]) -> Result<(), FormatError> {
    type Fingerprint = Vec<(u64, u64, Option<u64>, Option<u32>)>;
    let mut bytes_seen: HashMap<Fingerprint, (&PathBuf, u32)> = HashMap::new();
    let mut records_seen: HashMap<(u64, &str), (&PathBuf, u32)> = HashMap::new();
    let refused = |dir: &PathBuf, index: u32, first: (&PathBuf, u32), how: &str, n: u64| {
        FormatError::MergeRefused {
            path: dir.clone(),
            reason: format!(
                "part {index} holds the same records as part {} ({}: {n} records, {how}): the writers were given the same samples, usually each of them all the samples rather than its share. Give writer i of n only its own share (e.g. `ds.shard(num_shards=n, index=i, contiguous=True)`) and write the parts again",
                first.1,
                first.0.lossless(),
            ),
        }
    };
    for (dir, m, p) in loaded {
        if !p.written || m.samples == 0 {
            continue;
        }
        let digested = m
            .shards
            .iter()
            .all(|s| s.xxh3.is_some() || s.crc32c.is_some());
        if digested {
            let fingerprint = m
                .shards
                .iter()
                .map(|s| (s.count, s.bytes, s.xxh3, s.crc32c))
                .collect();
            if let Some(&first) = bytes_seen.get(&fingerprint) {
                return Err(refused(dir, p.index, first, "byte for byte", m.samples));
            }
            bytes_seen.insert(fingerprint, (dir, p.index));
        }
        // The same records in another order, or cut into other shards.
        if let Some(records) = p.records.as_deref() {
            if let Some(&first) = records_seen.get(&(m.samples, records)) {
                let how = "in another order or other shards";
                return Err(refused(dir, p.index, first, how, m.samples));
            }
            records_seen.insert((m.samples, records), (dir, p.index));
        }
    }
    Ok(())
}

/// Why the part directory `dir`, which has no manifest, cannot be merged, and how it is
/// finished. A converted part has a journal once its first shard is written; a written
/// part never has one, and cannot be resumed: its writer, if it still runs, finishes it,
/// else the part is written again. Without a journal the directory could be either.
fn unfinished(dir: &Path) -> String {
    // The root the parts were converted into, given as a part: told to rerun tasks
    // that all finished, a user would convert everything again.
    if find_parts(dir).is_ok() {
        return format!(
            "holds part directories (part-IIIII-of-NNNNN): it is the root of a partitioned \
             conversion, not a part; merge it into itself (`stoker merge {0}`, Python \
             `stoker.merge(root)`, Rust `merge(root, &[])`) or give its part directories",
            dir.lossless()
        );
    }
    // A part still being written: rerunning its task would be refused by its lock.
    if crate::convert::lock::is_held(dir) {
        return "unfinished part (no manifest.json): its conversion or writer is running now (its lock is held); merge once it has finished".into();
    }
    let converted = "rerun its task (the same `convert --part`, with --resume, Python resume=True, to continue it)";
    let journals = [
        crate::convert::JOURNAL_FILE,
        crate::convert::LEGACY_JOURNAL_FILE,
    ];
    if journals.iter().any(|j| dir.join(j).exists()) {
        return format!(
            "unfinished part (no manifest.json), converted (it holds a conversion journal): {converted}"
        );
    }
    format!(
        "unfinished part (no manifest.json): if it is converted (convert --part), {converted}; if it is written (stoker.Writer or SampleWriter with a part), wait for its writer to finish it, or if that writer was killed, {}",
        crate::convert::REWRITE_PART
    )
}

/// Refuses written parts (`SampleWriter` with a part) mixed with converted ones: they are
/// never parts of one dataset, and a written part has no slice to check.
fn check_kinds(loaded: &[(PathBuf, Manifest, PartInfo)]) -> Result<(), FormatError> {
    let kind = |p: &PartInfo| match p.written {
        true => "written from samples (stoker.Writer / SampleWriter with a part)",
        false => "converted (convert --part)",
    };
    let (first_dir, _, fp) = &loaded[0];
    match loaded.iter().find(|(_, _, p)| p.written != fp.written) {
        None => Ok(()),
        Some((dir, _, p)) => Err(FormatError::MergeRefused {
            path: dir.clone(),
            reason: format!(
                "this part was {} but {} was {}: written and converted parts are never one dataset; merge each kind in its own output root",
                kind(p),
                first_dir.lossless(),
                kind(fp)
            ),
        }),
    }
}

/// Flags of `provenance` that a conversion derives from its listing, which `part.listing`
/// already covers, and that older builds did not write (`order` before 081b84b, `listing`
/// before 2b78cbc): a part finished by such a build and one finished after an upgrade are
/// parts of one conversion (and `convert --resume` keeps the older one as done), so a part
/// without them still merges.
const DERIVED_FLAGS: [&str; 2] = [crate::convert::LISTING_FLAG, crate::convert::ORDER_FLAG];

/// A difference between a part and the first part where parts of one conversion agree:
/// what differs, its value in the part and in the first. Derived flags count only where
/// both parts have them. The listing's fingerprint comes last: it covers the output flags
/// and the classes too, so a part converted with another flag is told by that flag's name
/// and values, not by two checksums.
fn difference(
    (m, p, classes): (&Manifest, &PartInfo, &[String]),
    (first, fp, first_classes): (&Manifest, &PartInfo, &[String]),
) -> Option<(String, String, String)> {
    let pairs = [
        ("the number of parts", dbg(p.count), dbg(fp.count)),
        ("the number of inputs listed", dbg(p.inputs), dbg(fp.inputs)),
        ("the format", dbg(&m.format), dbg(&first.format)),
        (
            "the format version",
            dbg(m.format_version),
            dbg(first.format_version),
        ),
        (
            "the encoding",
            dbg(m.encoding.to_string()),
            dbg(first.encoding.to_string()),
        ),
        (
            "the number of classes",
            dbg(classes.len()),
            dbg(first_classes.len()),
        ),
        (
            "the provenance's tool",
            dbg(&m.provenance.tool),
            dbg(&first.provenance.tool),
        ),
        (
            "the provenance's stoker version",
            dbg(&m.provenance.tool_version),
            dbg(&first.provenance.tool_version),
        ),
        (
            "the provenance's source",
            dbg(&m.provenance.source),
            dbg(&first.provenance.source),
        ),
    ];
    if let Some((what, here, there)) = pairs.into_iter().find(|(_, a, b)| a != b) {
        return Some((what.into(), here, there));
    }
    if let Some((i, (a, b))) = (classes.iter().zip(first_classes))
        .enumerate()
        .find(|(_, (a, b))| a != b)
    {
        return Some((format!("the name of class {i}"), dbg(a), dbg(b)));
    }
    let (here, there) = (&m.provenance.flags, &first.provenance.flags);
    // The flags given before the derived ones (`listing` follows from the others), which
    // count only where both parts have them.
    let derived = DERIVED_FLAGS
        .iter()
        .find_map(|&name| match (here.get(name), there.get(name)) {
            (Some(a), Some(b)) if a != b => Some((name.to_string(), dbg(a), dbg(b))),
            _ => None,
        });
    let flag = other_flag(here, there, &DERIVED_FLAGS).or(derived);
    let flag = flag.map(|(name, a, b)| (format!("the provenance flag `{name}`"), a, b));
    flag.or_else(|| {
        (p.listing != fp.listing).then(|| {
            (
                "the input listing (files, labels and output flags, `part.listing`; for written parts, the classes and output flags)".into(),
                dbg(&p.listing),
                dbg(&fp.listing),
            )
        })
    })
}

/// The merged dataset's provenance: the parts' (which agree but for derived flags that
/// some may lack), with each derived flag from a part that has it.
fn merged_provenance(parts: &[(PathBuf, Manifest)]) -> Provenance {
    let mut provenance = parts[0].1.provenance.clone();
    for name in DERIVED_FLAGS {
        let found = parts.iter().find_map(|(_, m)| m.provenance.flags.get(name));
        if let Some(value) = found {
            provenance.flags.insert(name.into(), value.clone());
        }
    }
    provenance
}

/// `v` as a message shows a value: strings quoted.
fn dbg(v: impl std::fmt::Debug) -> String {
    format!("{v:?}")
}

/// Adds the counts of `b` to `a` (saturating: the counts only inform, and forged part
/// manifests must not wrap them into plausible small numbers).
fn add_audit(a: &mut Audit, b: &Audit) {
    let add = |x: &mut std::collections::BTreeMap<String, u64>,
               y: &std::collections::BTreeMap<String, u64>| {
        for (k, v) in y {
            let n = x.entry(k.clone()).or_default();
            *n = n.saturating_add(*v);
        }
    };
    a.jpeg_files = a.jpeg_files.saturating_add(b.jpeg_files);
    a.other_images = a.other_images.saturating_add(b.other_images);
    add(&mut a.by_sof, &b.by_sof);
    add(&mut a.by_precision, &b.by_precision);
    add(&mut a.by_components, &b.by_components);
    add(&mut a.by_subsampling, &b.by_subsampling);
    add(&mut a.by_color_space, &b.by_color_space);
    a.progressive = a.progressive.saturating_add(b.progressive);
    a.arithmetic = a.arithmetic.saturating_add(b.arithmetic);
    a.lossless = a.lossless.saturating_add(b.lossless);
    a.gpu_hardware_ok = a.gpu_hardware_ok.saturating_add(b.gpu_hardware_ok);
    a.gpu_hardware_rejected = a
        .gpu_hardware_rejected
        .saturating_add(b.gpu_hardware_rejected);
    a.nvjpeg_rejected = a.nvjpeg_rejected.saturating_add(b.nvjpeg_rejected);
    add(&mut a.hardware_reject_reasons, &b.hardware_reject_reasons);
    a.reencoded_for_gpu = a.reencoded_for_gpu.saturating_add(b.reencoded_for_gpu);
}

#[cfg(test)]
mod tests;
