//! Datasets written by real builds of every format version (`testdata/golden/`) must open,
//! verify and load under this build, their stopped conversions and training checkpoints
//! must resume, and this build must still write version 2's files (docs/FORMAT.md,
//! "Compatibility"). Round trips through this build's writer and reader cannot see a
//! change made to both, while a dataset on a user's disk was written by an older build.
// The writing test runs the `stoker` binary, built with the `cli` feature only.
#![cfg(feature = "cli")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;
use stoker::decode::{CpuDecoder, Limits};
use stoker::formats::{verify, Dataset, DatasetReader, Encoding, FORMAT_VERSION};
use stoker::loader::{
    Batch, Loader, LoaderError, LoaderState, Output as LoaderOutput, Placement, Shuffle, Transform,
};

/// The datasets each version's folder holds (`merged` only from builds with `merge`).
const KINDS: [&str; 4] = ["jpeg", "raw", "reencoded", "merged"];

fn testdata() -> PathBuf {
    stoker_testdata::dir()
}

fn golden() -> PathBuf {
    testdata().join("golden")
}

/// Runs this build's `stoker` in `testdata/`, where `make.sh` ran each build's.
fn stoker(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stoker"))
        .current_dir(testdata())
        .args(args)
        .env_remove("STOKER_TEST_FAIL_AFTER")
        .output()
        .unwrap()
}

/// `stoker convert` of `list.csv` into `out`, as `make.sh` converts, with `flags`.
fn convert_listed(out: &Path, flags: &[&str]) -> Output {
    let list = [
        "convert",
        "imagefolder",
        p(out),
        "--list",
        "golden/list.csv",
        "-j",
        "1",
    ];
    stoker(&[&list[..], flags].concat())
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// `list.csv`: each record's source (relative to `testdata/imagefolder`) and label.
fn listed() -> Vec<(String, u32)> {
    std::fs::read_to_string(golden().join("list.csv"))
        .unwrap()
        .lines()
        .map(|l| {
            let (path, label) = l.rsplit_once(',').unwrap();
            (path.to_owned(), label.parse().unwrap())
        })
        .collect()
}

/// Every golden folder with its format version, in order of version: `vN` (today's writer
/// of version N, or the last build of a version no longer written) and `vN-BUILD` (an
/// earlier build of version N); versions 1 and 2 must be among them.
fn versions() -> Vec<(u32, PathBuf)> {
    let mut v: Vec<(u32, PathBuf)> = std::fs::read_dir(golden())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.strip_prefix('v')?;
            let n = name.split_once('-').map_or(name, |(n, _)| n).parse().ok()?;
            Some((n, p))
        })
        .collect();
    v.sort();
    let numbers: Vec<u32> = v.iter().map(|(n, _)| *n).collect();
    assert!(numbers.starts_with(&[1, 2]), "golden versions {numbers:?}");
    v
}

/// The folder this build's writer must reproduce: `v{FORMAT_VERSION}`.
fn newest() -> PathBuf {
    golden().join(format!("v{FORMAT_VERSION}"))
}

/// The datasets of one version's folder, by kind.
fn datasets(version: &Path) -> Vec<(&'static str, PathBuf)> {
    let found: Vec<_> = KINDS
        .iter()
        .map(|k| (*k, version.join(k)))
        .filter(|(_, p)| p.is_dir())
        .collect();
    assert!(found.len() >= 3, "{}: {found:?}", version.display());
    found
}

/// Every file in the flat folder `dir`, by name, with its bytes and modification time.
fn snapshot(dir: &Path) -> BTreeMap<String, (Vec<u8>, std::time::SystemTime)> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let meta = e.metadata().unwrap();
            assert!(meta.is_file(), "{}", e.path().display());
            let name = e.file_name().into_string().unwrap();
            (
                name,
                (std::fs::read(e.path()).unwrap(), meta.modified().unwrap()),
            )
        })
        .collect()
}

/// The file names of a [`snapshot`].
fn names(s: &BTreeMap<String, (Vec<u8>, std::time::SystemTime)>) -> Vec<&str> {
    s.keys().map(String::as_str).collect()
}

/// Asserts that the flat folders `want` and `got` hold the same files, byte for byte.
fn assert_same_files(want: &Path, got: &Path, what: &str) {
    let (want, got) = (snapshot(want), snapshot(got));
    assert_eq!(names(&got), names(&want), "{what}");
    for (name, (bytes, _)) in &want {
        assert!(&got[name].0 == bytes, "{what}: {name}");
    }
}

/// A golden folder's name (`v2-6fc02d7`), for messages and temporary copies.
fn name_of(dir: &Path) -> String {
    dir.file_name().unwrap().to_string_lossy().into_owned()
}

/// The listed photograph's original bytes.
fn original(source: &str) -> Vec<u8> {
    std::fs::read(testdata().join("imagefolder").join(source)).unwrap()
}

/// Asserts that `ds` verifies and holds the listed photographs' original bytes with their
/// labels, in the list's order.
fn assert_holds_the_originals(ds: &Dataset, at: &str) {
    let listed = listed();
    assert!(verify(ds, true).unwrap().ok(), "{at}");
    assert_eq!(ds.len(), listed.len() as u64, "{at}");
    let reader = ds.reader().unwrap();
    for (i, (source, label)) in listed.iter().enumerate() {
        let r = reader.get(i as u64).unwrap();
        assert_eq!(r.header.label, *label, "{at} record {i}");
        assert!(
            r.payload == original(source),
            "{at} record {i}: not {source}"
        );
    }
}

fn decode(jpeg: &[u8]) -> (u32, u32, Vec<u8>) {
    let (info, pixels) = CpuDecoder::new(Limits::default())
        .decode_to_vec(jpeg)
        .unwrap();
    (info.width, info.height, pixels)
}

/// Largest and mean absolute difference of two equally long pixel buffers.
fn difference(a: &[u8], b: &[u8]) -> (u8, f64) {
    assert_eq!(a.len(), b.len());
    let d = a.iter().zip(b).map(|(x, y)| x.abs_diff(*y));
    let sum: u64 = d.clone().map(u64::from).sum();
    (d.max().unwrap_or(0), sum as f64 / a.len().max(1) as f64)
}

/// Pixels of the same image made by two builds (or two CPUs) agree: resampling and
/// encoding may round differently, never move or swap pixels.
fn assert_close(a: &[u8], b: &[u8], what: &str) {
    let (max, mean) = difference(a, b);
    assert!(
        max <= 8 && mean <= 1.0,
        "{what}: pixels differ by up to {max}, {mean:.3} on average"
    );
}

/// A record's pixels: raw payloads as stored, JPEG payloads decoded.
fn pixels(reader: &DatasetReader, i: u64) -> Vec<u8> {
    let r = reader.get(i).unwrap();
    match r.header.encoding {
        Encoding::Raw => r.payload.to_vec(),
        _ => decode(r.payload).2,
    }
}

#[test]
fn every_golden_dataset_opens_verifies_and_holds_its_sources() {
    let listed = listed();
    for (version, dir) in versions() {
        for (kind, path) in datasets(&dir) {
            let at = format!("{}/{kind}", name_of(&dir));
            let before = snapshot(&path);
            let ds = Dataset::open(&path).unwrap_or_else(|e| panic!("{at}: {e}"));
            let m = ds.manifest();
            assert_eq!(m.format_version, version, "{at}");
            assert_eq!(ds.len(), listed.len() as u64, "{at}");
            assert_eq!(m.classes, ["0", "1", "2"], "{at}");

            let report = verify(&ds, true).unwrap();
            assert!(report.ok(), "{at}: {report:?}");
            let decoded = if kind == "raw" { 0 } else { 8 };
            assert_eq!(
                (report.checked, report.decoded),
                (8, decoded),
                "{at}: {report:?}"
            );
            if version == 1 {
                assert!(
                    report.notes[0].contains("format version 1"),
                    "{at}: {report:?}"
                );
            }

            let reader = ds.reader().unwrap();
            for (i, (source, label)) in listed.iter().enumerate() {
                let r = reader.get(i as u64).unwrap();
                r.check_crc().unwrap();
                let h = r.header;
                assert_eq!(h.label, *label, "{at} record {i}");
                let original = original(source);
                let (w, ht, _) = decode(&original);
                match kind {
                    "jpeg" | "merged" => {
                        assert_eq!(h.encoding, Encoding::Jpeg, "{at} record {i}");
                        assert!(r.payload == original, "{at} record {i}: not {source}");
                        assert_eq!((h.width, h.height), (w, ht), "{at} record {i}");
                    }
                    "raw" => {
                        assert_eq!(h.encoding, Encoding::Raw, "{at} record {i}");
                        assert_eq!((h.width, h.height, h.channels), (24, 16, 3));
                        assert_eq!(r.payload.len(), 24 * 16 * 3, "{at} record {i}");
                    }
                    _ => {
                        assert_eq!(h.encoding, Encoding::Jpeg, "{at} record {i}");
                        let (rw, rh, _) = decode(r.payload);
                        assert_eq!((rw, rh), (h.width, h.height), "{at} record {i}");
                        assert_eq!(rw.max(rh), 48, "{at} record {i}: {rw}x{rh} from {w}x{ht}");
                        // The aspect ratio kept, to the rounding of the shorter side.
                        let want = f64::from(w.min(ht)) * 48.0 / f64::from(w.max(ht));
                        assert!(
                            (f64::from(rw.min(rh)) - want).abs() <= 1.0,
                            "{at} record {i}"
                        );
                    }
                }
                // Builds before the source map (2026-12-04) wrote none; today's does.
                let named = ds.source_of(i as u64).unwrap();
                if m.sources.is_none() {
                    assert_ne!(dir, newest(), "{at}: no source map");
                    assert_eq!(named, None, "{at} record {i}");
                } else {
                    let named = named.unwrap_or_else(|| panic!("{at} record {i}: no source"));
                    assert!(named.ends_with(source), "{at} record {i}: {named:?}");
                }
            }
            // Readers write nothing into a dataset (a read-only mount, a shared copy).
            assert!(snapshot(&path) == before, "{at}: reading changed its files");
        }
    }
}

#[test]
fn every_version_holds_the_same_pixels() {
    let newest = newest();
    for (_, dir) in &versions() {
        for (kind, path) in datasets(dir) {
            let (a, b) = (
                Dataset::open(&path).unwrap(),
                Dataset::open(newest.join(kind)).unwrap(),
            );
            let (ra, rb) = (a.reader().unwrap(), b.reader().unwrap());
            for i in 0..a.len() {
                let at = format!("{}/{kind} record {i}", name_of(dir));
                assert_close(&pixels(&ra, i), &pixels(&rb, i), &at);
            }
        }
    }
}

#[test]
fn the_cli_and_a_loader_read_every_golden_dataset() {
    let labels: Vec<u32> = listed().iter().map(|(_, l)| *l).collect();
    for (version, dir) in versions() {
        for (kind, path) in datasets(&dir) {
            let at = format!("{}/{kind}", name_of(&dir));
            let out = stoker(&["verify", "--decode", "--json", p(&path)]);
            assert!(out.status.success(), "{at}: {out:?}");
            let out = stoker(&["inspect", "--json", p(&path)]);
            assert!(out.status.success(), "{at}: {out:?}");
            let v: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(v["format_version"], version, "{at}: {v}");
            assert_eq!(v["samples"], 8, "{at}: {v}");

            let loader = Loader::builder(Dataset::open(&path).unwrap())
                .batch_size(3)
                .shuffle(Shuffle::Sequential)
                .transform(Transform::center_crop(16, 16))
                .output(LoaderOutput::U8Nhwc)
                .placement(Placement::single())
                .workers(1)
                .build()
                .unwrap();
            let mut got = Vec::new();
            for batch in loader.epoch(0) {
                let batch = batch.unwrap_or_else(|e| panic!("{at}: {e}"));
                assert_eq!(
                    batch.images.as_u8().unwrap().len(),
                    batch.len() * 16 * 16 * 3
                );
                got.extend(batch.labels);
            }
            assert_eq!(got, labels, "{at}");
            assert_eq!(loader.stats().bad_records, 0, "{at}");
        }
    }
}

/// `tests/python/check_format.py` reads every golden dataset with the `lmdb` package,
/// from docs/FORMAT.md alone: the files stay what that document says, whatever this
/// build's reader accepts.
#[test]
fn an_independent_lmdb_reader_reads_every_golden_dataset() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/check_format.py");
    // STOKER_PYTHON: scripts/test.sh names its venv's python (with `lmdb`) so, not by PATH.
    let python = std::env::var_os("STOKER_PYTHON").unwrap_or_else(|| "python3".into());
    let listed = listed();
    for (_, dir) in versions() {
        for (kind, path) in datasets(&dir) {
            let at = format!("{}/{kind}", name_of(&dir));
            // The last record: in the second shard where there are two.
            let (source, label) = listed.last().unwrap();
            let mut run = Command::new(&python);
            run.arg(script)
                .arg(&path)
                .arg((listed.len() - 1).to_string());
            if matches!(kind, "jpeg" | "merged") {
                run.arg(testdata().join("imagefolder").join(source));
            }
            let run = run.output().expect("python runs");
            let stderr = String::from_utf8_lossy(&run.stderr);
            if run.status.code() == Some(2)
                && std::env::var("STOKER_SKIP_PYTHON").as_deref() == Ok("1")
            {
                eprintln!("SKIPPED: STOKER_SKIP_PYTHON=1 and {stderr}");
                return;
            }
            assert!(
                run.status.success(),
                "{at}: check_format.py failed: {stderr}"
            );
            let got: Value = serde_json::from_slice(&run.stdout).unwrap();
            assert_eq!(got["label"], *label, "{at}: {got}");
            let encoding = if kind == "raw" { "raw" } else { "jpeg" };
            assert_eq!(got["encoding"], encoding, "{at}: {got}");
        }
    }
}

/// The loader a golden `checkpoint.json` was saved from (and is resumed with): shuffled,
/// random crops, so that a resume that restarted the order or its draws shows.
fn checkpoint_loader(path: &Path, resume: Option<LoaderState>) -> Loader {
    let mut b = Loader::builder(Dataset::open(path).unwrap())
        .batch_size(3)
        .shuffle(Shuffle::Global { seed: 7 })
        .transform(Transform::random_resized_crop(16))
        .output(LoaderOutput::U8Nhwc)
        .placement(Placement::single())
        .workers(1);
    if let Some(state) = resume {
        b = b.resume(state);
    }
    b.build().unwrap()
}

/// A batch as `checkpoint.json` keeps it: dataset indices, labels, pixels in hex.
fn batch_json(b: Result<Batch, LoaderError>) -> Value {
    let b = b.unwrap();
    let hex: String = b
        .images
        .as_u8()
        .unwrap()
        .iter()
        .map(|p| format!("{p:02x}"))
        .collect();
    serde_json::json!({"indices": b.indices, "labels": b.labels, "pixels": hex})
}

fn pixels_of(batch: &Value) -> Vec<u8> {
    let h = batch["pixels"].as_str().unwrap();
    (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
        .collect()
}

/// Writes `checkpoint.json` into the golden folder `STOKER_GOLDEN_DIR`: the state of
/// [`checkpoint_loader`] over its `jpeg` dataset after the first batch of epoch 1, as a
/// training checkpoint saves it, and the batches the rest of that epoch gave. Run by hand
/// for a new golden folder (testdata/golden/README.md).
#[test]
#[ignore = "writes a golden checkpoint: testdata/golden/README.md"]
fn write_a_checkpoint() {
    let dir = PathBuf::from(std::env::var_os("STOKER_GOLDEN_DIR").unwrap());
    let loader = checkpoint_loader(&dir.join("jpeg"), None);
    let mut epoch = loader.epoch(1);
    epoch.next().unwrap().unwrap();
    let state = serde_json::to_value(loader.state()).unwrap();
    let rest: Vec<Value> = epoch.map(batch_json).collect();
    let out = serde_json::json!({"state": state, "rest": rest});
    std::fs::write(
        dir.join("checkpoint.json"),
        serde_json::to_string_pretty(&out).unwrap(),
    )
    .unwrap();
}

/// A training checkpoint an earlier build saved (its loader's state inside epoch 1)
/// resumes under this build to the batches the rest of that epoch gave then: the same
/// samples in the same order, and, where the state records the draw rules, the same crops
/// (to the rounding of this build's resize). A change to the dataset fingerprint
/// or to the order would refuse or reorder every saved run instead.
#[test]
fn checkpoints_earlier_builds_saved_resume_to_the_same_batches() {
    let mut seen = 0;
    for (version, dir) in versions() {
        let Ok(text) = std::fs::read(dir.join("checkpoint.json")) else {
            continue;
        };
        seen += 1;
        let at = name_of(&dir);
        let saved: Value = serde_json::from_slice(&text).unwrap();
        let state: LoaderState = serde_json::from_value(saved["state"].clone()).unwrap();
        assert_eq!((state.epoch, state.position), (1, 1), "{at}");
        let loader = checkpoint_loader(&dir.join("jpeg"), Some(state));
        let got: Vec<Value> = loader.epoch(1).map(batch_json).collect();
        let want = saved["rest"].as_array().unwrap();
        assert_eq!(got.len(), want.len(), "{at} (format version {version})");
        for (g, w) in got.iter().zip(want) {
            assert_eq!(g["indices"], w["indices"], "{at}");
            assert_eq!(g["labels"], w["labels"], "{at}");
            if state.draws.is_some() {
                let what = format!("{at} batch {}", g["indices"]);
                assert_close(&pixels_of(g), &pixels_of(w), &what);
            }
        }
        // The loader of this build gives the same batches from epoch 1's start.
        let fresh = checkpoint_loader(&dir.join("jpeg"), None);
        let whole: Vec<Value> = fresh.epoch(1).skip(1).map(batch_json).collect();
        assert_eq!(whole.len(), got.len(), "{at}");
        for (a, b) in whole.iter().zip(&got) {
            assert_eq!(
                (&a["indices"], &a["pixels"]),
                (&b["indices"], &b["pixels"]),
                "{at}"
            );
        }
    }
    assert!(seen >= 3, "{seen} golden checkpoints");
}

/// The flags `make.sh` stopped its `interrupted` conversion with.
const INTERRUPTED: [&str; 2] = ["--shard-size", "64K"];

/// Copies the flat folder `from` to `to`.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// A conversion an earlier build left unfinished (a killed run: finished shard, journal,
/// the next shard's `.tmp`): this build's `--resume` finishes one whose journal it can
/// continue, into the dataset the whole conversion gives, and refuses a version 1 one,
/// saying why and what to do, without touching it.
#[test]
fn conversions_earlier_builds_left_unfinished_resume_or_are_refused() {
    let listed = listed();
    let dir = tempfile::tempdir().unwrap();
    let whole = dir.path().join("whole");
    let clean = convert_listed(&whole, &INTERRUPTED);
    assert!(clean.status.success(), "{clean:?}");
    for (version, golden_dir) in versions() {
        let at = name_of(&golden_dir);
        let copy = dir.path().join(&at);
        copy_dir(&golden_dir.join("interrupted"), &copy);
        let before = snapshot(&copy);
        let out = convert_listed(&copy, &[&INTERRUPTED[..], &["--resume"]].concat());
        let stderr = String::from_utf8_lossy(&out.stderr);
        if version == 1 {
            assert_eq!(out.status.code(), Some(1), "{at}: {out:?}");
            assert!(stderr.contains("format version 1"), "{at}: {stderr}");
            assert!(
                stderr.contains("convert into a new directory"),
                "{at}: {stderr}"
            );
            assert!(
                snapshot(&copy) == before,
                "{at}: a refused resume changed the folder"
            );
            continue;
        }
        assert!(out.status.success(), "{at}: {out:?}");
        let ds = Dataset::open(&copy).unwrap_or_else(|e| panic!("{at}: {e}"));
        assert_holds_the_originals(&ds, &at);
        for (i, (source, _)) in listed.iter().enumerate() {
            let named = ds.source_of(i as u64).unwrap();
            assert!(
                named.is_some_and(|n| n.ends_with(source)),
                "{at} record {i}"
            );
        }
        // Today's journal: the resumed dataset is the uninterrupted one, byte for byte.
        if golden_dir == newest() {
            assert_same_files(&whole, &copy, &at);
        } else {
            assert_eq!(names(&snapshot(&copy)), names(&snapshot(&whole)), "{at}");
        }
    }
}

/// `convert --resume` into a dataset an earlier build finished: a no-op where its manifest
/// records the listing (builds from 2b78cbc on), else refused, saying an older build made
/// it (docs/FORMAT.md, "manifest.json"); neither touches the dataset.
#[test]
fn resuming_a_conversion_an_earlier_build_finished_does_nothing_or_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for (_, golden_dir) in versions() {
        let at = name_of(&golden_dir);
        let copy = dir.path().join(&at);
        copy_dir(&golden_dir.join("jpeg"), &copy);
        let before = snapshot(&copy);
        let out = convert_listed(&copy, &["--shards", "2", "--resume"]);
        let said = String::from_utf8_lossy(&out.stderr) + String::from_utf8_lossy(&out.stdout);
        let listing = Dataset::open(&copy)
            .unwrap()
            .manifest()
            .provenance
            .flags
            .contains_key("listing");
        if listing {
            assert!(out.status.success(), "{at}: {said}");
            assert!(said.contains("nothing to do"), "{at}: {said}");
        } else {
            assert_eq!(out.status.code(), Some(1), "{at}: {said}");
            assert!(said.contains("made by an older stoker"), "{at}: {said}");
        }
        assert!(
            snapshot(&copy) == before,
            "{at}: --resume changed a finished dataset"
        );
    }
}

/// Part 0 of a partitioned conversion that an earlier build finished, left unmerged (a job
/// array's task that ran before an upgrade), merges with part 1 converted by this build
/// into the whole conversion's records; with today's part 0, into `v2/merged` byte for
/// byte.
#[test]
fn parts_earlier_builds_finished_merge_with_this_builds() {
    let dir = tempfile::tempdir().unwrap();
    let mut seen = 0;
    for (_, golden_dir) in versions() {
        if !golden_dir.join("parts").is_dir() {
            continue;
        }
        seen += 1;
        let at = name_of(&golden_dir);
        let out_dir = dir.path().join(&at);
        std::fs::create_dir(&out_dir).unwrap();
        let part0 = "part-00000-of-00002";
        copy_dir(&golden_dir.join("parts").join(part0), &out_dir.join(part0));
        let out = convert_listed(&out_dir, &["--part", "1", "--parts", "2", "--shards", "1"]);
        assert!(out.status.success(), "{at}: {out:?}");
        let out = stoker(&["merge", p(&out_dir)]);
        assert!(out.status.success(), "{at}: {out:?}");
        let ds = Dataset::open(&out_dir).unwrap_or_else(|e| panic!("{at}: {e}"));
        assert_holds_the_originals(&ds, &at);
        if golden_dir == newest() {
            assert_same_files(&golden_dir.join("merged"), &out_dir, &at);
        }
    }
    assert!(seen >= 2, "{seen} golden parts");
}

/// This build, running `make.sh`, writes the newest golden files: stored JPEGs and the
/// layout byte for byte, decoded pixels to within their rounding.
#[test]
fn this_build_writes_the_newest_golden_files() {
    let want_dir = newest();
    let dir = tempfile::tempdir().unwrap();
    let ours = dir.path().join("made");
    let out = Command::new("bash")
        .arg(golden().join("make.sh"))
        .arg(env!("CARGO_BIN_EXE_stoker"))
        .arg(&ours)
        .args(["this build", "merged"])
        .output()
        .unwrap();
    assert!(out.status.success(), "make.sh: {out:?}");
    let advice = format!(
        "this build writes other files than {}: the same conversion would then give users \
         other bytes than before. If the change is deliberate, testdata/golden/README.md says \
         what to do",
        want_dir.display()
    );
    for (kind, golden_dir) in datasets(&want_dir) {
        let made = ours.join(kind);
        let (want, got) = (snapshot(&golden_dir), snapshot(&made));
        assert_eq!(names(&got), names(&want), "{kind}: {advice}");
        // Stored JPEGs and the layout are the same on every CPU; pixels that this build
        // decoded, resized or encoded may differ in their last bits on another one.
        let exact = matches!(kind, "jpeg" | "merged");
        for (name, (bytes, _)) in &want {
            let ours = &got[name].0;
            if name == "manifest.json" {
                let (mut w, mut g): (Value, Value) = (
                    serde_json::from_slice(bytes).unwrap(),
                    serde_json::from_slice(ours).unwrap(),
                );
                // The release that wrote it is not the format.
                w["provenance"]["tool_version"] = g["provenance"]["tool_version"].clone();
                if !exact {
                    for m in [&mut w, &mut g] {
                        for s in m["shards"].as_array_mut().unwrap() {
                            s.as_object_mut().unwrap().remove("xxh3");
                        }
                    }
                }
                assert_eq!(g, w, "{kind}/{name}: {advice}");
            } else if exact || !name.starts_with("shard-") {
                assert!(bytes == ours, "{kind}/{name}: {advice}");
            } else {
                assert_eq!(bytes.len(), ours.len(), "{kind}/{name}: {advice}");
            }
        }
        if !exact {
            let (a, b) = (
                Dataset::open(&golden_dir).unwrap(),
                Dataset::open(&made).unwrap(),
            );
            let (ra, rb) = (a.reader().unwrap(), b.reader().unwrap());
            for i in 0..a.len() {
                assert_close(
                    &pixels(&ra, i),
                    &pixels(&rb, i),
                    &format!("{kind} record {i}"),
                );
            }
        }
    }
    // The stopped conversion and the unmerged part too: a later build's --resume and
    // merge read them.
    for folder in ["interrupted", "parts/part-00000-of-00002"] {
        let what = format!("{folder}: {advice}");
        assert_same_files(&want_dir.join(folder), &ours.join(folder), &what);
    }
}
