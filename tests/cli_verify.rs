//! `stoker verify` on copies damaged the common ways (a shard cut short, a shard missing, its
//! meta pages damaged, a shard swapped for another dataset's): each stopped verify at the
//! dataset open with one error line, no record named and nothing on stdout under `--json`.
//! Now the other shards are checked and the lost records named, in both outputs. A shard cut
//! short lost every record, though those before the cut could be read: now only the others
//! are named.
// They run the `stoker` binary, built with the `cli` feature only.
#![cfg(feature = "cli")]

mod common;

use std::path::{Path, PathBuf};

use common::{p, stoker_within, text, LIMIT};

/// The bundled photos converted into 4 shards of a few MB at `dir/name`; `layout` is
/// passed to `--layout` (`flat` gives the same records labelled 0: shards of the same sizes
/// and other bytes).
fn convert(dir: &Path, name: &str, layout: &str) -> PathBuf {
    let src = stoker_testdata::dir().join("imagefolder");
    let out = dir.join(name);
    let o = stoker_within(
        &[
            "convert",
            p(&src),
            p(&out),
            "--no-check",
            "--shard-size",
            "4M",
            "--layout",
            layout,
            "-j",
            "2",
        ],
        LIMIT,
    );
    assert!(o.status.success(), "{}", text(&o));
    out
}

/// Record `i`'s input, as the source map of `ds` names it (read with the map alone: the
/// shards may be damaged).
fn source(ds: &Path, i: u64) -> String {
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ds.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m["sources"]["file"], "sources.bin", "{m}");
    let map = std::fs::read(ds.join("sources.bin")).unwrap();
    let n = m["samples"].as_u64().unwrap() as usize;
    let offset = |k: usize| u64::from_le_bytes(map[16 + 8 * k..24 + 8 * k].try_into().unwrap());
    let names = 24 + 8 * n;
    let (a, b) = (offset(i as usize) as usize, offset(i as usize + 1) as usize);
    String::from_utf8(map[names + a..names + b].to_vec()).unwrap()
}

/// The manifest's `shards` of `ds`.
fn shards(ds: &Path) -> Vec<serde_json::Value> {
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ds.join("manifest.json")).unwrap()).unwrap();
    assert!(m["shards"].as_array().unwrap().len() >= 3, "{m}");
    m["shards"].as_array().unwrap().clone()
}

/// Runs `verify` (text and `--json`) on `ds`, whose shard `damaged` is damaged by `cause`
/// (the JSON `cause`), and checks that both name exactly its records as lost, and that
/// every record of the other shards was checked and found sound.
fn assert_only_shard_lost(ds: &Path, damaged: usize, cause: &str, all_read: bool) {
    let shards = shards(ds);
    let s = &shards[damaged];
    let (file, first, count) = (
        s["file"].as_str().unwrap(),
        s["first_index"].as_u64().unwrap(),
        s["count"].as_u64().unwrap(),
    );
    let samples: u64 = shards.iter().map(|s| s["count"].as_u64().unwrap()).sum();

    let o = stoker_within(&["verify", p(ds), "--json"], LIMIT);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&o)));
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(v["samples"], samples, "{v}");
    let lost = v["lost"].as_array().unwrap();
    assert_eq!(lost.len(), 1, "{v}");
    assert_eq!(lost[0]["shard"], file, "{v}");
    assert_eq!(lost[0]["first_index"], first, "{v}");
    assert_eq!(lost[0]["count"], count, "{v}");
    assert_eq!(lost[0]["cause"], cause, "{v}");
    assert!(!lost[0]["reason"].as_str().unwrap().is_empty(), "{v}");
    // The range's ends by the inputs they were made from (the source map).
    let (from, to) = (source(ds, first), source(ds, first + count - 1));
    assert_eq!(lost[0]["sources"], serde_json::json!([from, to]), "{v}");
    assert_eq!(v["lost_records"], count, "{v}");
    assert_eq!(v["ok_records"], samples - count, "{v}");
    assert_eq!(v["bad_records"], 0, "{v}");
    // The other shards were read record by record.
    let checked = if all_read { samples } else { samples - count };
    assert_eq!(v["checked"], checked, "{v}");
    let bad = v["bad"].as_array().unwrap();
    assert!(bad.iter().all(|b| b["shard"] == file), "{v}");
    assert!(bad.iter().any(|b| b["index"].is_null()), "{v}");

    let o = stoker_within(&["verify", p(ds)], LIMIT);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let want = format!(
        "LOST {file} records {first}..{} ({count} records, {from} to {to}): ",
        first + count
    );
    assert!(out.contains(&want), "no {want:?}: {}", text(&o));
    assert!(out.contains(&format!("BAD {file}: ")), "{}", text(&o));
    let totals = format!(
        "{checked} of {samples} records checked in {} shard(s)",
        shards.len()
    );
    assert!(out.contains(&totals), "no {totals:?}: {}", text(&o));
    let counts = format!("records: {} OK, 0 bad, {count} lost", samples - count);
    assert!(out.contains(&counts), "no {counts:?}: {}", text(&o));
}

#[test]
fn verify_names_the_records_of_a_shard_cut_short() {
    let dir = tempfile::tempdir().unwrap();
    let ds = convert(dir.path(), "ds", "auto");
    let shard = ds.join("shard-00001.lmdb");
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&shard)
        .unwrap();
    // Just past the meta pages: no page of the record tree is left.
    f.set_len(2 * 4096 + 100).unwrap();
    assert_only_shard_lost(&ds, 1, "cut_short", false);
}

/// A shard cut in its middle: the records of the pages before the cut are checked and
/// counted OK, and the others are named lost, with where the file was cut, as the library
/// finds them.
#[test]
fn verify_of_a_shard_cut_short_names_only_the_records_past_the_cut() {
    let dir = tempfile::tempdir().unwrap();
    // Records of 1-3 KB in 64 KiB shards: many leaf pages to cut between.
    let src = stoker_testdata::dir().join("imagefolder");
    let ds = dir.path().join("ds");
    let args = ["--max-side", "56", "--shard-size", "64K", "-j", "2"];
    let mut argv = vec!["convert", p(&src), p(&ds)];
    argv.extend(args);
    let o = stoker_within(&argv, LIMIT);
    assert!(o.status.success(), "{}", text(&o));
    let s = &shards(&ds)[1];
    let (file, first, count, bytes) = (
        s["file"].as_str().unwrap(),
        s["first_index"].as_u64().unwrap(),
        s["count"].as_u64().unwrap(),
        s["bytes"].as_u64().unwrap(),
    );
    // In the middle of the record tree (meta page 1's `last_pg`, docs/FORMAT.md), not in the
    // zero pages after it.
    let meta = std::fs::read(ds.join(file)).unwrap();
    let last_pg = u64::from_le_bytes(meta[4096 + 136..4096 + 144].try_into().unwrap());
    let cut = last_pg / 2 * 4096 + 2048;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(ds.join(file))
        .unwrap();
    f.set_len(cut).unwrap();
    let lib = stoker::formats::verify_dir(&ds, false).unwrap();

    let o = stoker_within(&["verify", p(&ds), "--json"], LIMIT);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(&o)));
    assert_eq!(v["ok"], false, "{v}");
    let lost = v["lost"].as_array().unwrap();
    assert!(!lost.is_empty(), "{v}");
    let at = format!("cut short at byte {cut} of {bytes}");
    for l in lost {
        assert_eq!(
            (l["shard"].as_str(), l["cause"].as_str()),
            (Some(file), Some("cut_short")),
            "{v}"
        );
        assert!(l["reason"].as_str().unwrap().contains(&at), "{v}");
        let (a, n) = (
            l["first_index"].as_u64().unwrap(),
            l["count"].as_u64().unwrap(),
        );
        assert!(first <= a && a + n <= first + count, "{v}");
    }
    let ranges: Vec<(u64, u64)> = lost
        .iter()
        .map(|l| {
            (
                l["first_index"].as_u64().unwrap(),
                l["count"].as_u64().unwrap(),
            )
        })
        .collect();
    let want: Vec<(u64, u64)> = lib.lost.iter().map(|l| (l.first_index, l.count)).collect();
    assert_eq!(ranges, want, "{v}");
    let (ok, bad, gone) = (
        v["ok_records"].as_u64().unwrap(),
        v["bad_records"].as_u64().unwrap(),
        v["lost_records"].as_u64().unwrap(),
    );
    assert_eq!(
        (ok, bad, gone),
        (lib.ok_records, 0, lib.lost_records),
        "{v}"
    );
    assert_eq!(ok + bad + gone, v["samples"].as_u64().unwrap(), "{v}");
    // Some of the cut shard's records were read, and not all.
    assert!(gone > 0 && gone < count, "{v}");
    assert_eq!(v["checked"].as_u64().unwrap(), ok, "{v}");

    let o = stoker_within(&["verify", p(&ds)], LIMIT);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for (a, n) in ranges {
        let names = match n {
            1 => source(&ds, a),
            _ => format!("{} to {}", source(&ds, a), source(&ds, a + n - 1)),
        };
        let line = format!(
            "LOST {file} records {a}..{} ({n} records, {names}): shard file cut short",
            a + n
        );
        assert!(out.contains(&line), "no {line:?}: {}", text(&o));
    }
    assert!(
        out.contains(&format!("BAD {file}: the file is {at}")),
        "{}",
        text(&o)
    );
    let counts = format!("records: {ok} OK, 0 bad, {gone} lost");
    assert!(out.contains(&counts), "no {counts:?}: {}", text(&o));
    // Its records before the cut were read: it was said "(1 not opened)".
    assert!(
        out.contains("(1 cut short, read up to the cut)"),
        "{}",
        text(&o)
    );
    assert!(!out.contains("not opened"), "{}", text(&o));
    assert_eq!(v["read_in_part"], 1, "{v}");
}

/// The decode pool took `RAYON_NUM_THREADS` as it came: 20,000 threads made a check of
/// a third of a second run past 100 s. It is one thread per available CPU.
#[test]
fn verify_decode_ignores_a_huge_rayon_num_threads() {
    let dir = tempfile::tempdir().unwrap();
    let ds = convert(dir.path(), "ds", "auto");
    let mut c = std::process::Command::new(common::STOKER);
    c.env("RAYON_NUM_THREADS", "20000")
        .args(["verify", "--decode", p(&ds)]);
    let t = std::time::Instant::now();
    let o = common::run_within(c, LIMIT);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        t.elapsed() < std::time::Duration::from_secs(30),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn verify_names_the_records_of_a_missing_shard() {
    let dir = tempfile::tempdir().unwrap();
    let ds = convert(dir.path(), "ds", "auto");
    std::fs::remove_file(ds.join("shard-00002.lmdb")).unwrap();
    assert_only_shard_lost(&ds, 2, "missing", false);
    let o = stoker_within(&["verify", p(&ds)], LIMIT);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("the file is missing"),
        "{}",
        text(&o)
    );
}

#[test]
fn verify_names_the_records_of_a_shard_with_a_damaged_meta_page() {
    let dir = tempfile::tempdir().unwrap();
    let ds = convert(dir.path(), "ds", "auto");
    let shard = ds.join("shard-00000.lmdb");
    let mut bytes = std::fs::read(&shard).unwrap();
    // The LMDB magic of meta page 0: what a reader trusts first.
    bytes[16] ^= 0xff;
    std::fs::write(&shard, &bytes).unwrap();
    assert_only_shard_lost(&ds, 0, "damaged", false);
}

#[test]
fn verify_names_the_records_of_a_shard_swapped_for_another_datasets() {
    let dir = tempfile::tempdir().unwrap();
    let ds = convert(dir.path(), "ds", "auto");
    let other = convert(dir.path(), "other", "flat");
    let (mine, theirs) = (&shards(&ds)[1], &shards(&other)[1]);
    // Same records and size, other labels: only the digest tells the files apart, and
    // every record of the stranger passes its own checks.
    assert_eq!(mine["bytes"], theirs["bytes"]);
    assert_ne!(mine["xxh3"], theirs["xxh3"]);
    std::fs::copy(other.join("shard-00001.lmdb"), ds.join("shard-00001.lmdb")).unwrap();
    assert_only_shard_lost(&ds, 1, "altered", true);
}

#[test]
fn verify_names_every_damaged_shard_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let ds = convert(dir.path(), "ds", "auto");
    let all = shards(&ds);
    std::fs::remove_file(ds.join("shard-00000.lmdb")).unwrap();
    let last = all.len() - 1;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(ds.join(all[last]["file"].as_str().unwrap()))
        .unwrap();
    f.set_len(8192).unwrap();
    let o = stoker_within(&["verify", p(&ds), "--json"], LIMIT);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let lost: Vec<(u64, &str)> = v["lost"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["first_index"].as_u64().unwrap(),
                l["cause"].as_str().unwrap(),
            )
        })
        .collect();
    let first_of_last = all[last]["first_index"].as_u64().unwrap();
    assert_eq!(lost, [(0, "missing"), (first_of_last, "cut_short")], "{v}");
    assert_eq!(v["opened"], all.len() - 2, "{v}");
}

#[test]
fn verify_json_of_a_dataset_without_a_manifest_is_an_error_on_stderr_only() {
    // As every command's --json: a failure to start is `stoker: error: ...` on stderr.
    let dir = tempfile::tempdir().unwrap();
    let o = stoker_within(&["verify", p(dir.path()), "--json"], LIMIT);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(o.stdout.is_empty(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("stoker: error: ") && err.contains("manifest.json"),
        "{}",
        text(&o)
    );
}

#[test]
fn verify_text_names_a_shards_first_damaged_pages_and_counts_the_rest() {
    // A stretch of damage over a shard of small records is a problem per 4 KiB page (a
    // 30 MB overwrite: some 7,000 lines, above the LOST lines that say what to restore).
    // The text names the first 20 of each shard and counts the others; --json names all.
    let dir = tempfile::tempdir().unwrap();
    let src = stoker_testdata::dir().join("imagefolder");
    let mut rows = String::new();
    for class in std::fs::read_dir(&src).unwrap() {
        let class = class.unwrap().path();
        if !class.is_dir() {
            continue;
        }
        for photo in std::fs::read_dir(&class).unwrap() {
            let photo = photo.unwrap().path();
            // Each photo four times (a warning says so): small records, many leaf pages.
            for _ in 0..4 {
                rows += &format!("{},0\n", photo.display());
            }
        }
    }
    let list = dir.path().join("list.csv");
    std::fs::write(&list, rows).unwrap();
    let ds = dir.path().join("ds");
    let args = ["convert", p(&src), p(&ds), "--list", p(&list)];
    let o = stoker_within(
        &[&args[..], &["--max-side", "8", "-j", "2"]].concat(),
        LIMIT,
    );
    assert!(o.status.success(), "{}", text(&o));
    let shard = ds.join("shard-00000.lmdb");
    let len = std::fs::metadata(&shard).unwrap().len();
    let mut bytes = std::fs::read(&shard).unwrap();
    // The first half but its first pages: leaf pages (the branch pages come last).
    bytes[len as usize / 8..len as usize / 2].fill(0xAB);
    std::fs::write(&shard, bytes).unwrap();

    let damaged = |line: &str| line.contains("damaged LMDB page: ");
    let o = stoker_within(&["verify", p(&ds), "--json"], LIMIT);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let pages = (v["bad"].as_array().unwrap().iter())
        .filter(|b| damaged(b["problem"].as_str().unwrap()))
        .count();
    assert!(pages > 40, "{pages} damaged pages: {v}");

    let o = stoker_within(&["verify", p(&ds)], LIMIT);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = String::from_utf8(o.stdout.clone()).unwrap();
    assert_eq!(out.lines().filter(|l| damaged(l)).count(), 20, "{out}");
    let more = format!(
        "BAD shard-00000.lmdb: {} more damaged LMDB pages (--json lists them all)",
        pages - 20
    );
    assert!(out.lines().any(|l| l == more), "{more}\n{out}");
    assert!(out.contains("LOST shard-00000.lmdb records "), "{out}");
}
