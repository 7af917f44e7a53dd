//! The fault campaign (issue 18): damage, kills, neighbours and hostile trees, each tried many
//! times, bounded to a few minutes. Acceptance: no crash (no signal), no hang (every command
//! runs under a time limit), nothing written is lost (a resumed conversion equals a clean
//! one), and every refusal names the file and the reason. Each part prints its counts
//! (`cargo test --test fault_campaign -- --nocapture`); docs/BENCHMARKS.md, "Reliability",
//! records them.
//!
//! Photos from the repository's `examples/data/sample`, copied into bigger synthetic trees
//! where a conversion must last long enough to be killed in the middle.
// They run the `stoker` binary, built with the `cli` feature only.
#![cfg(feature = "cli")]

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{sample_photos, stoker_within as stoker, text, LIMIT, SAMPLE, STOKER};

use stoker::formats::{convert, verify, ConvertOptions, Dataset, NoProgress, Source};
use stoker::loader::{Loader, OnError, Output as LoaderOutput, Shuffle, Transform};

/// A small deterministic generator (splitmix64), so every run tries the same faults.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// An ImageFolder tree of `copies` copies of every sample photo, in 3 classes.
fn bigger_tree(root: &Path, copies: usize) {
    for (i, photo) in sample_photos().iter().enumerate() {
        let class = root.join(format!("class{}", i % 3));
        std::fs::create_dir_all(&class).unwrap();
        for c in 0..copies {
            std::fs::copy(photo, class.join(format!("{i:02}-{c:03}.jpg"))).unwrap();
        }
    }
}

/// One loader epoch on the CPU that must end (with batches or errors), never crash.
/// Returns the records it replaced or the batches that were errors.
fn loader_epoch(ds: &Dataset) -> Result<u64, String> {
    let loader = Loader::builder(ds.clone())
        .batch_size(4)
        .shuffle(Shuffle::Global { seed: 3 })
        .transform(Transform::random_resized_crop(32))
        .output(LoaderOutput::U8Nhwc)
        .on_error(OnError::Error)
        .workers(1)
        .prefetch(1)
        .build()
        .map_err(|e| e.to_string())?;
    let mut errors = 0;
    for batch in loader.epoch(0) {
        errors += u64::from(batch.is_err());
    }
    Ok(errors)
}

/// The sample converted into `dir/ds` (one shard, decode check off): the dataset folder,
/// its shard and the shard's original bytes, for the flip tests to damage and restore.
fn sample_shard(dir: &Path) -> (PathBuf, PathBuf, Vec<u8>) {
    let out = dir.join("ds");
    let mut o = ConvertOptions::new(Source::ImageFolder(SAMPLE.into()), &out);
    o.check_decode = false;
    convert(&o, &NoProgress).unwrap();
    let shard = out.join("shard-00000.lmdb");
    let orig = std::fs::read(&shard).unwrap();
    (out, shard, orig)
}

/// Byte flips over every page of a small shard, through `Dataset::open`, `verify` and a
/// loader epoch, all in this process: a crash would end the test.
#[test]
fn byte_flips_over_every_page_through_verify_and_a_loader_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let (out, shard, orig) = sample_shard(dir.path());
    let pages = orig.len() / 4096;
    let mut rng = Rng(18);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&shard)
        .unwrap();
    let put =
        |pos: usize, b: u8| std::os::unix::fs::FileExt::write_all_at(&f, &[b], pos as u64).unwrap();
    let (mut flips, mut refused, mut verified_bad, mut loader_errors, mut loader_clean) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut named = 0u64;
    let t0 = Instant::now();
    // Two flips per page: one in the page header or first node pointers (what LMDB reads
    // first), one anywhere in the page. A loader epoch per flip is what bounds the count.
    for page in 0..pages {
        for k in 0..2 {
            let within = match k {
                0 => rng.below(64),
                _ => rng.below(4096),
            } as usize;
            let pos = page * 4096 + within;
            let byte = orig[pos] ^ (1 << rng.below(8));
            put(pos, byte);
            flips += 1;
            match Dataset::open(&out) {
                Err(e) => {
                    assert!(e.to_string().contains("shard-00000.lmdb"), "{e}");
                    refused += 1;
                }
                Ok(ds) => {
                    let v = verify(&ds, false).unwrap();
                    assert!(!v.ok(), "flip at byte {pos} passed verify");
                    verified_bad += 1;
                    named += u64::from(v.bad.iter().any(|b| b.index.is_some()));
                    match loader_epoch(&ds) {
                        Ok(0) => loader_clean += 1,
                        _ => loader_errors += 1,
                    }
                }
            }
            put(pos, orig[pos]);
        }
    }
    assert!(verify(&Dataset::open(&out).unwrap(), false).unwrap().ok());
    println!(
        "CAMPAIGN flips: {flips} single-bit flips over all {pages} pages of a {}-byte shard in {:.1} s: \
         {refused} refused by Dataset::open, {verified_bad} opened and reported by verify \
         ({named} naming a record); loader epochs on those: {loader_errors} with record errors, \
         {loader_clean} unaffected; 0 crashes",
        orig.len(),
        t0.elapsed().as_secs_f64()
    );
}

/// `kill -9` at pseudo-random moments of a conversion, then `--resume`: the result must equal
/// an uninterrupted run byte for byte.
#[test]
fn kills_at_random_points_of_convert_then_resume_equal_a_clean_run() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    bigger_tree(&src, 8);
    let flags = ["--shard-size", "200K", "-j", "2"];
    let clean = dir.path().join("clean");
    let t0 = Instant::now();
    let o = stoker(
        &[
            &["convert", src.to_str().unwrap(), clean.to_str().unwrap()][..],
            &flags,
        ]
        .concat(),
        LIMIT,
    );
    assert!(o.status.success(), "{}", text(&o));
    let clean_time = t0.elapsed();
    let want = stoker_testdata::files_in(&clean);
    let mut rng = Rng(7);
    let (mut kills, mut mid_run, mut finished_first, mut resumes) = (0, 0, 0, 0);
    for trial in 0..16 {
        let out = dir.path().join(format!("k{trial}"));
        let delay = Duration::from_micros(rng.below(clean_time.as_micros() as u64 + 1));
        let mut child = Command::new(STOKER)
            .args(["convert", src.to_str().unwrap(), out.to_str().unwrap()])
            .args(flags)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(delay);
        let _ = child.kill();
        let status = child.wait().unwrap();
        kills += 1;
        if status.success() {
            finished_first += 1;
        } else {
            mid_run += 1;
            // Resume until it finishes (a resume could itself be killed in a longer
            // campaign; here one suffices).
            let o = stoker(
                &[
                    &[
                        "convert",
                        src.to_str().unwrap(),
                        out.to_str().unwrap(),
                        "--resume",
                    ][..],
                    &flags,
                ]
                .concat(),
                LIMIT,
            );
            assert!(
                o.status.success(),
                "resume after a kill at {delay:?}: {}",
                text(&o)
            );
            resumes += 1;
        }
        assert!(
            stoker_testdata::files_in(&out) == want,
            "trial {trial}: output after a kill at {delay:?} differs from the clean run"
        );
    }
    println!(
        "CAMPAIGN kills: {kills} SIGKILLs at 0..{:.2} s of a {:.2} s conversion (120 photos, shards of 200K): \
         {mid_run} mid-run, each resumed once ({resumes} resumes), {finished_first} after it finished; \
         all {kills} outputs byte-identical to the clean run",
        clean_time.as_secs_f64(),
        clean_time.as_secs_f64()
    );
}

/// Two writers on one output directory, started together or one while the other runs: one
/// conversion writes, the other is refused with a message naming the directory; the result
/// is the clean run's.
#[test]
fn concurrent_writers_on_one_output_directory() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    bigger_tree(&src, 4);
    let clean = dir.path().join("clean");
    let flags = ["--shard-size", "200K", "-j", "1"];
    let o = stoker(
        &[
            &["convert", src.to_str().unwrap(), clean.to_str().unwrap()][..],
            &flags,
        ]
        .concat(),
        LIMIT,
    );
    assert!(o.status.success(), "{}", text(&o));
    let want = stoker_testdata::files_in(&clean);
    let (mut refused_locked, mut refused_other) = (0, 0);
    let mut rng = Rng(4);
    let trials = 10;
    for trial in 0..trials {
        let out = dir.path().join(format!("c{trial}"));
        let spawn = |resume: bool| {
            let mut c = Command::new(STOKER);
            c.args(["convert", src.to_str().unwrap(), out.to_str().unwrap()])
                .args(flags)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            if resume {
                c.arg("--resume");
            }
            c.spawn().unwrap()
        };
        let first = spawn(false);
        std::thread::sleep(Duration::from_millis(rng.below(60)));
        let second = spawn(trial % 2 == 1);
        let (a, b) = (
            first.wait_with_output().unwrap(),
            second.wait_with_output().unwrap(),
        );
        for o in [&a, &b] {
            assert!(o.status.signal().is_none(), "{}", text(o));
        }
        match (a.status.success(), b.status.success()) {
            (true, true) => panic!("two writers both succeeded:\n{}\n{}", text(&a), text(&b)),
            (false, false) => panic!("neither writer succeeded:\n{}\n{}", text(&a), text(&b)),
            _ => {}
        }
        let loser = if a.status.success() { &b } else { &a };
        let err = String::from_utf8_lossy(&loser.stderr);
        assert!(err.contains(out.to_str().unwrap()), "{}", text(loser));
        if err.contains("another `stoker convert`") {
            refused_locked += 1;
        } else {
            // It started after the winner finished (or before it wrote anything and found the
            // directory taken): the finished-dataset or partial-conversion refusal.
            assert!(
                err.contains("manifest.json") || err.contains("partial conversion"),
                "{}",
                text(loser)
            );
            refused_other += 1;
        }
        assert!(
            stoker_testdata::files_in(&out) == want,
            "trial {trial}: the surviving dataset differs from the clean run"
        );
    }
    println!(
        "CAMPAIGN writers: {trials} pairs of conversions on one directory (second started 0-60 ms later, \
         half with --resume): {refused_locked} refused by the lock, {refused_other} refused as finished/partial, \
         0 broken datasets, all equal to the clean run"
    );
}

/// The hostile source tree: symlink loops, a FIFO, a link to /dev/zero, a sparse 3 GiB file,
/// a dangling link, a 70-deep directory chain, an empty file and text among photos.
#[test]
fn hostile_source_tree_converts_in_bounded_time_with_every_refusal_explained() {
    let dir = tempfile::tempdir().unwrap();
    let s = dir.path().join("s");
    let a = s.join("a");
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(s.join("loop")).unwrap();
    let photos = sample_photos();
    std::fs::copy(&photos[0], a.join("good0.jpg")).unwrap();
    std::fs::copy(&photos[1], s.join("loop/good1.jpg")).unwrap();
    std::os::unix::fs::symlink("..", s.join("loop/up")).unwrap();
    std::os::unix::fs::symlink("../loop", s.join("loop/self")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", a.join("zero.jpg")).unwrap();
    std::os::unix::fs::symlink("nowhere.jpg", a.join("dangling.jpg")).unwrap();
    assert!(Command::new("mkfifo")
        .arg(a.join("pipe.jpg"))
        .status()
        .unwrap()
        .success());
    std::fs::File::create(a.join("huge.jpg"))
        .unwrap()
        .set_len(3 << 30)
        .unwrap();
    std::fs::write(a.join("empty.jpg"), b"").unwrap();
    std::fs::write(a.join("notes.txt"), b"not a photo").unwrap();
    let mut deep = a.join("deep");
    for _ in 0..70 {
        deep = deep.join("d");
    }
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::copy(&photos[2], deep.join("too-deep.jpg")).unwrap();
    let out = dir.path().join("o");
    let t0 = Instant::now();
    let o = stoker(
        &[
            "convert",
            s.to_str().unwrap(),
            out.to_str().unwrap(),
            "--json",
        ],
        LIMIT,
    );
    assert!(o.status.success(), "{}", text(&o));
    let r: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(r["written"], 2, "{r}");
    let skipped = r["skipped"].as_array().unwrap();
    for s in skipped {
        let (path, reason) = (s["path"].as_str().unwrap(), s["reason"].as_str().unwrap());
        assert!(!path.is_empty() && !reason.is_empty(), "{s}");
    }
    let reason_of = |name: &str| {
        skipped
            .iter()
            .find(|s| s["path"].as_str().unwrap().ends_with(name))
            .unwrap_or_else(|| panic!("{name} not skipped: {r}"))["reason"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(reason_of("zero.jpg").contains("character device"));
    assert!(reason_of("pipe.jpg").contains("FIFO"));
    assert!(reason_of("huge.jpg").contains("size limit"));
    assert!(reason_of("dangling.jpg").contains("broken symlink"));
    assert!(reason_of("loop/up").contains("symlink loop"));
    assert!(reason_of("loop/self").contains("symlink loop"));
    assert!(reason_of("/d").contains("nested more than 64"));
    assert!(reason_of("empty.jpg").contains("empty"));
    assert!(reason_of("notes.txt").contains("not an image"));
    let v = stoker(&["verify", out.to_str().unwrap()], LIMIT);
    assert!(v.status.success(), "{}", text(&v));
    println!(
        "CAMPAIGN hostile tree: {} entries (symlink loops, FIFO, /dev/zero link, sparse 3 GiB file, dangling link, 70-deep chain, empty, text) converted in {:.2} s: {} written, {} skipped each with a reason; verify OK",
        r["inputs"],
        t0.elapsed().as_secs_f64(),
        r["written"],
        skipped.len()
    );
}

/// Every bit of every byte of the shard's B-tree pages (the meta pages and the branch and leaf
/// pages LMDB walks; payload pages are covered above) through `Dataset::open` and `verify`.
#[test]
fn every_byte_of_the_tree_pages_through_open_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    let (out, shard, orig) = sample_shard(dir.path());
    let tree_pages: Vec<usize> = (0..orig.len() / 4096)
        .filter(|&p| {
            let page = &orig[p * 4096..];
            let pgno = u64::from_le_bytes(page[..8].try_into().unwrap());
            let flags = u16::from_le_bytes([page[10], page[11]]);
            pgno == p as u64 && matches!(flags, 0x01 | 0x02 | 0x08)
        })
        .collect();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&shard)
        .unwrap();
    let put =
        |pos: usize, b: u8| std::os::unix::fs::FileExt::write_all_at(&f, &[b], pos as u64).unwrap();
    let (mut flips, mut refused, mut named, mut shard_only) = (0u64, 0u64, 0u64, 0u64);
    let (mut epochs, mut epochs_with_errors) = (0u64, 0u64);
    let t0 = Instant::now();
    for &page in &tree_pages {
        let base = page * 4096;
        let (lower, upper) = (
            usize::from(u16::from_le_bytes([orig[base + 12], orig[base + 13]])),
            usize::from(u16::from_le_bytes([orig[base + 14], orig[base + 15]])),
        );
        let is_tree = orig[base + 10] & 0x03 != 0;
        for (within, &was) in orig[base..base + 4096].iter().enumerate() {
            let pos = base + within;
            // The bytes LMDB itself reads when the loader looks records up: the page header,
            // the node offsets and the nodes (not the free gap between them).
            let used = is_tree && (within < lower || within >= upper);
            let bit = 1u8 << (pos % 8);
            put(pos, was ^ bit);
            flips += 1;
            match Dataset::open(&out) {
                Err(_) => refused += 1,
                Ok(ds) => {
                    let v = verify(&ds, false).unwrap();
                    assert!(!v.ok(), "flip at byte {pos} passed verify");
                    if v.bad.iter().any(|b| b.index.is_some()) {
                        named += 1;
                    } else {
                        shard_only += 1;
                    }
                    if used {
                        epochs += 1;
                        epochs_with_errors += u64::from(!matches!(loader_epoch(&ds), Ok(0)));
                    }
                }
            }
            put(pos, was);
        }
    }
    println!(
        "CAMPAIGN tree pages: {flips} flips (one per byte) over the {} tree pages (meta, branch, leaf) in {:.1} s: \
         {refused} refused by Dataset::open, {named} reported by verify naming a record, \
         {shard_only} reported for the shard only (bytes no record depends on); \
         {epochs} loader epochs on flips in the used bytes of branch and leaf pages, \
         {epochs_with_errors} with record errors; 0 crashes",
        tree_pages.len(),
        t0.elapsed().as_secs_f64()
    );
}
