//! `stoker convert / inspect / verify` end to end, through the built binary, on real data.
// They run the `stoker` binary, built with the `cli` feature only.
#![cfg(feature = "cli")]

use std::path::Path;
use std::process::{Command, Output};

fn stoker(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_stoker"))
        .args(args)
        .env_remove("STOKER_TEST_FAIL_AFTER")
        .output()
        .expect("stoker runs")
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(o)))
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn imagefolder_converts_inspects_and_verifies_from_the_cli() {
    let src = stoker_testdata::dir().join("imagefolder");
    let out = tempfile::tempdir().unwrap();
    let ds = out.path().join("ds");
    let o = stoker(&["convert", p(&src), p(&ds), "--json", "--shard-size", "4M"]);
    assert!(o.status.success(), "{}", text(&o));
    let r = json(&o);
    let inputs = r["inputs"].as_u64().unwrap();
    let written = r["written"].as_u64().unwrap();
    let skipped = r["skipped"].as_array().unwrap().len() as u64;
    assert_eq!(inputs, 164);
    assert_eq!(written + skipped, inputs);
    assert!(r["shards"].as_u64().unwrap() >= 3, "{r}");
    for key in ["bytes", "seconds", "audit"] {
        assert!(!r[key].is_null(), "missing {key}: {r}");
    }
    assert_eq!(r["audit"]["jpeg_files"], 164);
    assert_eq!(r["ignored"].as_array().unwrap().len(), 1, "{r}");

    let o = stoker(&["inspect", p(&ds), "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let i = json(&o);
    assert_eq!(i["samples"].as_u64().unwrap(), written);
    assert_eq!(i["shards"], r["shards"]);
    assert_eq!(i["bytes"], r["bytes"]);
    assert!(i["classes"].as_u64().unwrap() >= 20);

    let o = stoker(&["inspect", p(&ds)]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("samples: 164"),
        "{}",
        text(&o)
    );

    let o = stoker(&["verify", p(&ds), "--decode"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("OK"),
        "{}",
        text(&o)
    );

    // Converting again into the finished dataset is refused, and it stays intact.
    let o = stoker(&["convert", p(&src), p(&ds)]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("finished dataset"),
        "{}",
        text(&o)
    );
    assert!(stoker(&["verify", p(&ds)]).status.success());
}

#[test]
fn verify_exits_nonzero_and_names_the_flipped_record() {
    let src = stoker_testdata::bench_dir();
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("l.csv");
    std::fs::write(&list, "00010.jpg,0\n00011.jpg,1\n00012.jpg,0\n").unwrap();
    let ds = dir.path().join("ds");
    let o = stoker(&["convert", p(&src), p(&ds), "--list", p(&list)]);
    assert!(o.status.success(), "{}", text(&o));

    let shard = ds.join("shard-00000.lmdb");
    let mut bytes = std::fs::read(&shard).unwrap();
    let jpeg = std::fs::read(src.join("00011.jpg")).unwrap();
    let at = bytes
        .windows(32)
        .position(|w| w == &jpeg[2000..2032])
        .unwrap();
    bytes[at + 5] ^= 1;
    std::fs::write(&shard, &bytes).unwrap();

    let o = stoker(&["verify", p(&ds), "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let v = json(&o);
    assert_eq!(v["ok"], false);
    let bad = v["bad"].as_array().unwrap();
    // Named by the input it was made from (the source map), what to convert again.
    assert!(
        bad.iter().any(|b| b["index"] == 1
            && b["shard"] == "shard-00000.lmdb"
            && b["source"] == "00011.jpg"),
        "{v}"
    );
    let o = stoker(&["verify", p(&ds)]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("BAD shard-00000.lmdb record 1 (00011.jpg): "),
        "{}",
        text(&o)
    );
}

#[test]
fn conformance_corpus_reports_every_file_written_or_skipped() {
    let root = stoker_testdata::dir().join("conformance");
    let dir = tempfile::tempdir().unwrap();
    // The two subfolders core/ and corrupt/ (ref/ holds PNG references: exclude it via a list).
    let tsv = std::fs::read_to_string(root.join("expectations.tsv")).unwrap();
    let files: Vec<&str> = tsv
        .lines()
        .skip(1)
        .map(|l| l.split('\t').next().unwrap())
        .collect();
    let list = dir.path().join("l.csv");
    std::fs::write(
        &list,
        files.iter().map(|f| format!("{f},0\n")).collect::<String>(),
    )
    .unwrap();
    let ds = dir.path().join("ds");
    let o = stoker(&["convert", p(&root), p(&ds), "--list", p(&list), "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let r = json(&o);
    let skipped = r["skipped"].as_array().unwrap();
    assert_eq!(r["inputs"].as_u64().unwrap(), files.len() as u64);
    assert_eq!(
        r["written"].as_u64().unwrap() + skipped.len() as u64,
        files.len() as u64
    );
    for s in skipped {
        assert!(!s["path"].as_str().unwrap().is_empty());
        assert!(!s["reason"].as_str().unwrap().is_empty(), "{s}");
    }
    let audit = &r["audit"];
    assert!(
        audit["hardware_reject_reasons"]["progressive"]
            .as_u64()
            .unwrap()
            > 0,
        "{audit}"
    );
    assert!(stoker(&["verify", p(&ds), "--decode"]).status.success());
}

#[test]
fn strict_exits_1_without_manifest_and_bad_flags_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("cls")).unwrap();
    std::fs::copy(
        stoker_testdata::bench_dir().join("00000.jpg"),
        src.join("cls/a.jpg"),
    )
    .unwrap();
    std::fs::write(src.join("cls/b.jpg"), b"").unwrap();
    let ds = dir.path().join("ds");
    let o = stoker(&["convert", p(&src), p(&ds), "--strict"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("b.jpg"),
        "{}",
        text(&o)
    );
    // Nothing is left to refuse a rerun ("holds a partial conversion").
    assert!(!ds.exists(), "{}", text(&o));

    // Options that cannot go together are a usage error, as clap's own (they exited 1, as
    // a failed conversion does).
    let ds2 = dir.path().join("ds2");
    let o = stoker(&["convert", p(&src), p(&ds2), "--encoding", "raw"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--size"),
        "{}",
        text(&o)
    );
    let o = stoker(&[
        "convert",
        p(&src),
        p(&ds2),
        "--encoding",
        "raw",
        "--size",
        "32x24",
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let r = json(&o);
    assert_eq!(r["written"], 1);
    assert_eq!(r["skipped"][0]["reason"], "empty file");
    let i = json(&stoker(&["inspect", p(&ds2), "--json"]));
    assert_eq!(i["raw_size"]["width"], 32);
    assert_eq!(i["raw_size"]["height"], 24);

    // The strict stop's way on: fix the input, rerun, get a dataset.
    std::fs::remove_file(src.join("cls/b.jpg")).unwrap();
    let o = stoker(&["convert", p(&src), p(&ds), "--strict"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(ds.join("manifest.json").exists());
}

#[test]
fn killed_conversion_is_refused_then_resumed() {
    let src = stoker_testdata::dir().join("imagefolder");
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    let args = [
        "convert",
        p(&src),
        p(&ds),
        "--shard-size",
        "2M",
        "--no-check",
    ];
    let o = Command::new(env!("CARGO_BIN_EXE_stoker"))
        .args(args)
        .env("STOKER_TEST_FAIL_AFTER", "60")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(!ds.join("manifest.json").exists());
    let o = stoker(&["inspect", p(&ds)]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let o = stoker(&args);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--resume"),
        "{}",
        text(&o)
    );
    let mut resume = args.to_vec();
    resume.push("--resume");
    resume.push("--json");
    let o = stoker(&resume);
    assert!(o.status.success(), "{}", text(&o));
    let r = json(&o);
    assert!(r["resumed"].as_u64().unwrap() > 0, "{r}");
    assert_eq!(r["written"], 164);
    assert!(stoker(&["verify", p(&ds)]).status.success());
}

#[test]
fn shuffle_and_its_seed_reach_the_manifest_and_a_seed_alone_is_refused() {
    let src = stoker_testdata::dir().join("imagefolder");
    let out = tempfile::tempdir().unwrap();
    let ds = out.path().join("ds");
    let o = stoker(&[
        "convert",
        p(&src),
        p(&ds),
        "--no-check",
        "--shuffle",
        "--seed",
        "3",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ds.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m["provenance"]["flags"]["shuffle"], "3", "{m}");
    assert_eq!(m["provenance"]["flags"]["order"], "shuffled", "{m}");

    let o = stoker(&["convert", p(&src), p(&out.path().join("x")), "--seed", "3"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--shuffle"),
        "{}",
        text(&o)
    );
}

#[test]
fn a_conversion_that_writes_no_record_exits_1_naming_the_count_and_reasons() {
    let dir = tempfile::tempdir().unwrap();
    let imgs = dir.path().join("imgs");
    std::fs::create_dir(&imgs).unwrap();
    for (name, photo) in [
        ("a.jpg", "caer/black_cat.jpg"),
        ("b.jpg", "caer/guitar.jpg"),
    ] {
        let from = stoker_testdata::dir().join("imagefolder").join(photo);
        std::fs::copy(from, imgs.join(name)).unwrap();
    }
    let list = dir.path().join("list.csv");
    std::fs::write(&list, "a.jpg,0\nb.jpg,1\n").unwrap();
    let ds = dir.path().join("ds");
    // SRC is the list's folder, not the images' one: every input is missing.
    let o = stoker(&["convert", p(dir.path()), p(&ds), "--list", p(&list)]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("none of the 2 inputs"), "{}", text(&o));
    assert!(err.contains("a.jpg"), "{}", text(&o));
    assert!(!ds.join("manifest.json").exists());
    let o = stoker(&["convert", p(&imgs), p(&ds), "--list", p(&list)]);
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn empty_and_hidden_class_folders_are_warned_of_and_inspect_lists_every_class() {
    let src = tempfile::tempdir().unwrap();
    for (rel, photo) in [
        (".ipynb_checkpoints/x.jpg", "caer/black_cat.jpg"),
        ("cat/1.jpg", "caer/guitar.jpg"),
        ("cat/2.jpg", "caer/camera.jpg"),
    ] {
        let to = src.path().join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(stoker_testdata::dir().join("imagefolder").join(photo), to).unwrap();
    }
    std::fs::create_dir(src.path().join("dog")).unwrap();
    let out = tempfile::tempdir().unwrap();
    let ds = out.path().join("ds");
    let o = stoker(&["convert", p(src.path()), p(&ds), "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    let warnings = json(&o)["warnings"].as_array().unwrap().len();
    assert_eq!(warnings, 2, "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("warning: class \".ipynb_checkpoints\" (label 0) is a hidden folder"));
    assert!(err.contains("warning: class \"dog\" (label 2) is an empty folder"));

    let o = stoker(&["inspect", p(&ds), "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        json(&o)["per_class"],
        serde_json::json!([
            {"label": 0, "name": ".ipynb_checkpoints", "count": 1},
            {"label": 1, "name": "cat", "count": 2},
            {"label": 2, "name": "dog", "count": 0},
        ])
    );
    let o = stoker(&["inspect", p(&ds)]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("0 .ipynb_checkpoints: 1, 1 cat: 2, 2 dog: 0"),
        "{out}"
    );
}

/// An open shard holds its map and no file descriptor: a dataset of more shards than the
/// descriptor limit opens, verifies and inspects (LMDB is opened one shard at a time).
#[test]
fn a_dataset_of_more_shards_than_open_files_allowed_verifies() {
    let src = stoker_testdata::dir().join("imagefolder");
    let out = tempfile::tempdir().unwrap();
    let ds = out.path().join("ds");
    let o = stoker(&["convert", p(&src), p(&ds), "--no-check", "--shards", "164"]);
    assert!(o.status.success(), "{}", text(&o));
    let shards = std::fs::read_dir(&ds)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("shard-")
        })
        .count();
    assert!(shards > 100, "{shards} shards");
    for cmd in ["verify", "inspect"] {
        let o = Command::new("sh")
            .args(["-c", "ulimit -n 48 && exec \"$0\" \"$1\" \"$2\""])
            .args([env!("CARGO_BIN_EXE_stoker"), cmd, p(&ds)])
            .output()
            .unwrap();
        assert!(o.status.success(), "{cmd}: {}", text(&o));
    }
    // The text summary names the first and last five shards and counts the rest (it printed
    // a line per shard); the JSON keeps them all.
    let o = stoker(&["inspect", p(&ds)]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    let named = stdout.lines().filter(|l| l.contains(": records ")).count();
    assert_eq!(named, 10, "{stdout}");
    let more = format!("... ({} more shards; --json lists them all)", shards - 10);
    assert!(stdout.contains(&more), "{stdout}");
    assert!(
        stdout.contains("shard-00000.lmdb")
            && stdout.contains(&format!("shard-{:05}.lmdb", shards - 1))
    );
    let o = stoker(&["inspect", p(&ds), "--json"]);
    assert_eq!(json(&o)["shard_files"].as_array().unwrap().len(), shards);
}

/// `inspect` names the format version, and says what a version 1 dataset's digests are: a
/// version 1 dataset looked like any other there (only `verify` said so).
#[test]
fn inspect_shows_the_format_version() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    let sample = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/data/sample");
    let o = stoker(&["convert", sample, p(&ds), "--no-check"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = stoker(&["inspect", p(&ds)]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("format version: 2\n"), "{}", text(&o));
    assert_eq!(
        json(&stoker(&["inspect", p(&ds), "--json"]))["format_version"],
        2
    );

    // The same dataset as a version 1 build described it: CRC-32C of each shard file.
    let path = ds.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    m["format_version"] = 1.into();
    for s in m["shards"].as_array_mut().unwrap() {
        let bytes = std::fs::read(ds.join(s["file"].as_str().unwrap())).unwrap();
        let s = s.as_object_mut().unwrap();
        s.remove("xxh3");
        s.insert("crc32c".into(), crc32c::crc32c(&bytes).into());
    }
    std::fs::write(&path, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
    let o = stoker(&["inspect", p(&ds)]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("format version: 1 (shard digests are CRC32C"),
        "{}",
        text(&o)
    );
    assert_eq!(
        json(&stoker(&["inspect", p(&ds), "--json"]))["format_version"],
        1
    );
}

/// The sample photos as two WebDataset shards in `dir` (`a.tar`: the first class; `b.tar`:
/// the others), each photo `{class}/{stem}.jpg` with its label in `{class}/{stem}.cls`, the
/// labels those of the ImageFolder tree; a last sample in `b.tar` has a cls that is not a
/// number.
fn sample_shards(dir: &Path) -> Vec<(u32, std::path::PathBuf)> {
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data/sample");
    let mut classes: Vec<_> = std::fs::read_dir(&sample)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    classes.sort();
    let mut photos = Vec::new();
    for (label, class) in classes.iter().enumerate() {
        let mut files: Vec<_> = std::fs::read_dir(class)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        photos.extend(files.into_iter().map(|f| (label as u32, f)));
    }
    std::fs::create_dir_all(dir).unwrap();
    let append = |b: &mut tar::Builder<std::fs::File>, name: &str, data: &[u8]| {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        b.append_data(&mut h, name, data).unwrap();
    };
    let mut a = tar::Builder::new(std::fs::File::create(dir.join("a.tar")).unwrap());
    let mut b = tar::Builder::new(std::fs::File::create(dir.join("b.tar")).unwrap());
    for (label, f) in &photos {
        let key = format!("{label}/{}", f.file_stem().unwrap().to_str().unwrap());
        let shard = if *label == 0 { &mut a } else { &mut b };
        append(shard, &format!("{key}.jpg"), &std::fs::read(f).unwrap());
        append(
            shard,
            &format!("{key}.cls"),
            format!("{label}\n").as_bytes(),
        );
    }
    append(&mut b, "9/bad.jpg", &std::fs::read(&photos[0].1).unwrap());
    append(&mut b, "9/bad.cls", b"n01440764");
    a.into_inner().unwrap();
    b.into_inner().unwrap();
    photos
}

/// Every record of the dataset at `ds` as (label, payload).
fn records(ds: &Path) -> Vec<(u32, Vec<u8>)> {
    let ds = stoker::formats::Dataset::open(ds).unwrap();
    let r = ds.reader().unwrap();
    (0..ds.len())
        .map(|i| {
            let rec = r.get(i).unwrap();
            (rec.header.label, rec.payload.to_vec())
        })
        .collect()
}

#[test]
fn webdataset_shards_convert_like_the_image_folder_and_name_skipped_members() {
    let dir = tempfile::tempdir().unwrap();
    let shards = dir.path().join("shards");
    let photos = sample_shards(&shards);
    let help = String::from_utf8_lossy(&stoker(&["convert", "--help"]).stdout).into_owned();
    assert!(
        help.contains("webdataset") && help.contains("TAR:MEMBER"),
        "{help}"
    );

    let ds = dir.path().join("ds");
    let o = stoker(&[
        "convert",
        "--layout",
        "webdataset",
        p(&shards),
        p(&ds),
        "--json",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let r = json(&o);
    assert_eq!(r["webdataset"], true, "{r}");
    assert_eq!(
        (r["inputs"].as_u64(), r["written"].as_u64()),
        (Some(16), Some(15))
    );
    let skipped = &r["skipped"][0];
    assert_eq!(
        skipped["path"],
        format!("{}:9/bad.jpg", shards.join("b.tar").display())
    );
    assert!(
        skipped["reason"]
            .as_str()
            .unwrap()
            .starts_with("its cls \"n01440764\" is not a label"),
        "{r}"
    );
    // The same records as the photos converted from their folder, in the same order.
    let folder = dir.path().join("folder");
    let sample = photos[0].1.parent().unwrap().parent().unwrap();
    assert!(stoker(&["convert", p(sample), p(&folder)]).status.success());
    assert_eq!(records(&ds), records(&folder));

    // `auto` on a folder of only .tar files says it read them as shards; the summary names
    // the skipped member.
    let auto = dir.path().join("auto");
    let o = stoker(&["convert", p(&shards), p(&auto)]);
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("read as WebDataset tar shards"),
        "{}",
        text(&o)
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("b.tar:9/bad.jpg: its cls"), "{}", text(&o));

    // Parts and merge make the one-shot dataset.
    let parts = dir.path().join("parts");
    for i in ["0", "1", "2"] {
        let o = stoker(&[
            "convert",
            "--layout",
            "webdataset",
            p(&shards),
            p(&parts),
            "--part",
            i,
            "--parts",
            "3",
        ]);
        assert!(o.status.success(), "{}", text(&o));
    }
    assert!(stoker(&["merge", p(&parts)]).status.success());
    assert_eq!(records(&parts), records(&ds));
    assert!(stoker(&["verify", p(&parts)]).status.success());
}

/// Regression: the messages around tar shards pointed the wrong way: auto on one `.tar`
/// said it "holds only .tar files", a failed `--layout webdataset` run hinted to pass
/// `--layout webdataset`, and a folder of `.tar.gz` shards under auto ended in "not an
/// image" without saying to decompress them.
#[test]
fn tar_shard_messages_fit_what_was_given() {
    let dir = tempfile::tempdir().unwrap();
    let shards = dir.path().join("shards");
    sample_shards(&shards);
    let o = stoker(&[
        "convert",
        p(&shards.join("a.tar")),
        p(&dir.path().join("one")),
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("a.tar is a .tar file: read as WebDataset tar shards"),
        "{err}"
    );

    let junk = dir.path().join("junk");
    std::fs::create_dir(&junk).unwrap();
    std::fs::write(junk.join("s0.tar"), vec![b'x'; 2048]).unwrap();
    let args = ["convert", "--layout", "webdataset", p(&junk)];
    let o = stoker(&[&args[..], &[p(&dir.path().join("o2"))]].concat());
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("not a tar archive"), "{err}");
    assert!(!err.contains("convert with --layout webdataset"), "{err}");

    let gz = dir.path().join("gz");
    std::fs::create_dir(&gz).unwrap();
    std::fs::write(gz.join("s0.tar.gz"), vec![0x1f, 0x8b, 8, 0, 0, 0]).unwrap();
    let o = stoker(&["convert", p(&gz), p(&dir.path().join("o3"))]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("decompress them first"), "{err}");
}

#[test]
fn a_validation_list_takes_the_train_sets_class_names() {
    const SAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/data/sample");
    let dir = tempfile::tempdir().unwrap();
    let train = dir.path().join("train");
    let o = stoker(&["convert", SAMPLE, p(&train), "--no-check"]);
    assert!(o.status.success(), "{}", text(&o));
    // Rows labelled by the sample's class names (its folders), one class left out.
    let list = dir.path().join("val.csv");
    std::fs::write(
        &list,
        "caer/camera.jpg,caer\nopencv/data_butterfly.jpg,opencv\n",
    )
    .unwrap();
    let val = dir.path().join("val");
    let o = stoker(&[
        "convert",
        SAMPLE,
        p(&val),
        "--list",
        p(&list),
        "--classes",
        p(&train),
        "--no-check",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let classes = |ds: &std::path::Path| {
        let m: serde_json::Value =
            serde_json::from_slice(&std::fs::read(ds.join("manifest.json")).unwrap()).unwrap();
        m["classes"].clone()
    };
    assert_eq!(classes(&val), classes(&train));
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(val.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m["samples"], 2);
    assert_eq!(
        classes(&val),
        serde_json::json!(["caer", "leptonica", "opencv"])
    );
    // Class folders are labelled by the names too: the tree converts to train's labels.
    let x = dir.path().join("x");
    let o = stoker(&["convert", SAMPLE, p(&x), "--classes", p(&train)]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(classes(&x), classes(&train));
}

/// `inspect --record N` names the file record N came from (skipped inputs before it do not
/// shift it), its label, class and size, as text and JSON; it still names the source of a
/// damaged record (exit 1), and says so when a dataset has no source map.
#[test]
fn inspect_record_names_its_source_even_when_the_record_is_damaged() {
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data/sample");
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    stoker_testdata::copy_tree(&sample, &src);
    // Skipped: sorted before every file of its class.
    std::fs::write(
        src.join("leptonica/0-cut.jpg"),
        b"\xff\xd8\xff not a whole jpeg",
    )
    .unwrap();
    let ds = dir.path().join("ds");
    let o = stoker(&["convert", p(&src), p(&ds), "--json"]);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(json(&o)["skipped"].as_array().unwrap().len(), 1);

    // caer's six photos, then leptonica's cut file (skipped), then colorseg.jpg.
    let o = stoker(&["inspect", p(&ds), "--record", "6"]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let size = std::fs::metadata(src.join("leptonica/colorseg.jpg"))
        .unwrap()
        .len();
    for want in [
        "source: leptonica/colorseg.jpg".to_string(),
        "label: 1 leptonica".into(),
        format!("{size} payload bytes"),
        // As `--help` says it shows (it said nothing of a sound payload).
        "payload: matches its CRC-32C".into(),
    ] {
        assert!(out.contains(&want), "{want}: {}", text(&o));
    }
    let j = json(&stoker(&["inspect", p(&ds), "--record", "6", "--json"]));
    assert_eq!(j["source"], "leptonica/colorseg.jpg");
    assert_eq!(j["record"]["class"], "leptonica");
    assert_eq!(j["record"]["payload_bytes"], size);
    assert_eq!(
        (&j["record"]["crc_ok"], &j["problem"]),
        (&true.into(), &serde_json::Value::Null)
    );

    // Past the end: a usage error (it was 1, a damaged record's status).
    let o = stoker(&["inspect", p(&ds), "--record", "15"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("the dataset has 15 records (--record 0 to 14)"),
        "{}",
        text(&o)
    );

    // A map lost or damaged: the record is reported all the same, with why its source
    // is unknown (it was an error, and nothing of the record).
    let map = ds.join("sources.bin");
    let good_map = std::fs::read(&map).unwrap();
    std::fs::remove_file(&map).unwrap();
    let o = stoker(&["inspect", p(&ds), "--record", "6"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("source: unknown: ")
            && out.contains("sources.bin")
            && out.contains("label: 1 leptonica")
            && out.contains("payload: matches its CRC-32C"),
        "{}",
        text(&o)
    );
    let j = json(&stoker(&["inspect", p(&ds), "--record", "6", "--json"]));
    assert_eq!(j["source"], serde_json::Value::Null);
    assert!(
        j["source_problem"].as_str().unwrap().contains("missing"),
        "{j}"
    );
    assert_eq!(j["record"]["class"], "leptonica");
    std::fs::write(&map, good_map).unwrap();

    // A flipped payload byte: the record is damaged, its source still named.
    let jpeg = std::fs::read(src.join("leptonica/colorseg.jpg")).unwrap();
    let shard = ds.join("shard-00000.lmdb");
    let mut bytes = std::fs::read(&shard).unwrap();
    let at = bytes
        .windows(32)
        .position(|w| w == &jpeg[4000..4032])
        .unwrap();
    bytes[at] ^= 1;
    std::fs::write(&shard, &bytes).unwrap();
    let o = stoker(&["inspect", p(&ds), "--record", "6"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("source: leptonica/colorseg.jpg")
            && out.contains("damaged: ")
            && out.contains("CRC")
            && !out.contains("matches its CRC"),
        "{}",
        text(&o)
    );

    // As a build before source maps left it.
    let manifest = ds.join("manifest.json");
    let mut m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&manifest).unwrap()).unwrap();
    m.as_object_mut().unwrap().remove("sources").unwrap();
    std::fs::write(&manifest, serde_json::to_string_pretty(&m).unwrap() + "\n").unwrap();
    std::fs::remove_file(ds.join("sources.bin")).unwrap();
    let o = stoker(&["inspect", p(&ds), "--record", "0"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("no source map"),
        "{}",
        text(&o)
    );
    assert_eq!(
        json(&stoker(&["inspect", p(&ds), "--record", "0", "--json"]))["source"],
        serde_json::Value::Null
    );
    let o = stoker(&["inspect", p(&ds)]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("source map: none"),
        "{}",
        text(&o)
    );
}

/// `inspect` of a dataset with a damaged record summarizes the others and exits 1, naming
/// the record and `verify`: before, it printed only the record's error.
#[test]
fn inspect_leaves_out_a_damaged_record_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("ds");
    let sample = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/data/sample");
    let o = stoker(&["convert", sample, p(&ds), "--no-check"]);
    assert!(o.status.success(), "{}", text(&o));
    let shard = ds.join("shard-00000.lmdb");
    let mut bytes = std::fs::read(&shard).unwrap();
    let magic = bytes.windows(4).position(|w| w == b"STKR").unwrap();
    bytes[magic] = b'X';
    std::fs::write(&shard, bytes).unwrap();
    let o = stoker(&["inspect", p(&ds)]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("samples: 15 "), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("1 record(s) could not be read") && err.contains("stoker verify"),
        "{}",
        text(&o)
    );
    let o = stoker(&["inspect", p(&ds), "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let r = json(&o);
    assert_eq!(r["unreadable"], 1);
    let per_class: u64 = r["per_class"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["count"].as_u64().unwrap())
        .sum();
    assert_eq!(per_class, 14);
}

/// A file name with a newline or an escape sequence is shown escaped in the text reports:
/// `a.jpg: not an image\n  forged: unreadable` forged a second line in the skip list, and
/// ESC sequences reached the terminal.
#[test]
fn control_characters_in_names_are_escaped_in_text_reports() {
    let dir = tempfile::tempdir().unwrap();
    let class = dir.path().join("src/caer");
    std::fs::create_dir_all(&class).unwrap();
    let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data/sample/caer");
    for e in std::fs::read_dir(&sample).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), class.join(e.file_name())).unwrap();
    }
    std::fs::write(
        class.join("x.jpg: not an image\n  forged: unreadable\x1b[2J"),
        b"junk",
    )
    .unwrap();
    let ds = dir.path().join("ds");
    let o = stoker(&["convert", p(&dir.path().join("src")), p(&ds)]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        !out.contains('\x1b') && !out.contains("\n  forged"),
        "{out}"
    );
    assert!(
        out.contains("x.jpg: not an image\\x0a  forged: unreadable\\x1b[2J: "),
        "{out}"
    );
}
