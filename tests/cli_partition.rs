//! Partitioned conversion through the built `stoker` binary, the way a cluster runs it: part
//! processes started at once, told their part by flags, by Slurm array variables or by a
//! Kubernetes completion index; a killed part rerun; `stoker merge`; and the recipes in
//! `examples/cluster/` run in local form. Every merged dataset is compared record for record
//! with one plain `stoker convert` of the same photos.
// They run the `stoker` binary, built with the `cli` feature only.
#![cfg(feature = "cli")]

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use stoker::formats::Dataset;

mod common;

const REPO: &str = env!("CARGO_MANIFEST_DIR");
/// Seven photos in three classes: quick to convert.
const SAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/data/sample");
/// Store mode, small shards so each part holds several, one thread per process.
const FLAGS: [&str; 5] = ["--no-check", "--shard-size", "1M", "-j", "1"];

fn photos() -> PathBuf {
    stoker_testdata::dir().join("imagefolder")
}

/// A command with none of the launcher variables this test did not set itself.
fn clean(mut c: Command) -> Command {
    for v in [
        "SLURM_ARRAY_TASK_ID",
        "SLURM_ARRAY_TASK_MIN",
        "SLURM_ARRAY_TASK_COUNT",
        "SLURM_ARRAY_JOB_ID",
        "SLURM_CPUS_PER_TASK",
        "JOB_COMPLETION_INDEX",
        "STOKER_PARTS",
        "STOKER_STEP",
        "STOKER_CONVERT_FLAGS",
        "STOKER_TEST_FAIL_AFTER",
    ] {
        c.env_remove(v);
    }
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

fn stoker() -> Command {
    clean(Command::new(env!("CARGO_BIN_EXE_stoker")))
}

/// Waits for every child, killing all and failing after `limit` (a hang is a failure).
fn wait_all(children: Vec<(String, Child)>, limit: Duration) -> Vec<(String, Output)> {
    let start = Instant::now();
    let mut children: Vec<(String, Option<Child>)> =
        children.into_iter().map(|(n, c)| (n, Some(c))).collect();
    loop {
        let running = children.iter_mut().any(|(_, c)| {
            c.as_mut()
                .is_some_and(|c| c.try_wait().expect("wait").is_none())
        });
        if !running {
            break;
        }
        if start.elapsed() > limit {
            for (_, c) in &mut children {
                let _ = c.as_mut().map(|c| c.kill());
            }
            panic!("part processes did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    children
        .into_iter()
        .map(|(n, c)| (n, c.unwrap().wait_with_output().expect("output")))
        .collect()
}

fn run(mut c: Command) -> Output {
    let child = c.spawn().expect("starts");
    wait_all(vec![("command".into(), child)], Duration::from_secs(300))
        .pop()
        .unwrap()
        .1
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn convert_single(src: &Path, out: &Path, flags: &[&str]) {
    let mut c = stoker();
    c.arg("convert").arg(src).arg(out).args(flags);
    let o = run(c);
    assert!(o.status.success(), "{}", text(&o));
}

/// The merged dataset reads like the single conversion: same samples, classes, provenance,
/// audit, and for every index the same header and payload bytes; `verify` passes.
fn assert_same(merged: &Path, single: &Path) {
    let (a, b) = (
        Dataset::open(merged).unwrap(),
        Dataset::open(single).unwrap(),
    );
    let (ma, mb) = (a.manifest(), b.manifest());
    assert_eq!(
        (ma.samples, &ma.classes, &ma.provenance, &ma.audit),
        (mb.samples, &mb.classes, &mb.provenance, &mb.audit)
    );
    assert_eq!(ma.payload_bytes, mb.payload_bytes);
    let (ra, rb) = (a.reader().unwrap(), b.reader().unwrap());
    for i in 0..mb.samples {
        let (x, y) = (ra.get(i).unwrap(), rb.get(i).unwrap());
        assert_eq!(x.header.to_bytes(), y.header.to_bytes(), "header of {i}");
        assert_eq!(x.payload, y.payload, "payload of {i}");
    }
    let mut c = stoker();
    c.arg("verify").arg(merged);
    let o = run(c);
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn four_concurrent_parts_from_flags_slurm_and_kubernetes_merge_into_one_conversion() {
    let tmp = tempfile::tempdir().unwrap();
    let single = tmp.path().join("single");
    convert_single(&photos(), &single, &FLAGS);
    let out = tmp.path().join("out");
    let start = |configure: &dyn Fn(&mut Command)| {
        let mut c = stoker();
        c.arg("convert").arg(photos()).arg(&out).args(FLAGS);
        configure(&mut c);
        c.spawn().expect("stoker starts")
    };
    // Part 1 is "killed" after 20 records (the CLI's test hook).
    let children = vec![
        (
            "flags".to_string(),
            start(&|c| {
                c.args(["--part", "0", "--parts", "4"]);
            }),
        ),
        (
            "slurm".to_string(),
            start(&|c| {
                c.env("SLURM_ARRAY_TASK_ID", "11")
                    .env("SLURM_ARRAY_TASK_MIN", "10")
                    .env("SLURM_ARRAY_TASK_COUNT", "4")
                    .env("STOKER_TEST_FAIL_AFTER", "20");
            }),
        ),
        (
            "kubernetes".to_string(),
            start(&|c| {
                c.env("JOB_COMPLETION_INDEX", "2").env("STOKER_PARTS", "4");
            }),
        ),
        (
            "kubernetes with --parts".to_string(),
            start(&|c| {
                c.env("JOB_COMPLETION_INDEX", "3").args(["--parts", "4"]);
            }),
        ),
    ];
    let done = wait_all(children, Duration::from_secs(300));
    for (name, o) in &done {
        assert_eq!(o.status.success(), name != "slurm", "{name}: {}", text(o));
    }
    // The merge refuses while part 1 is unfinished, and names it.
    let mut c = stoker();
    c.arg("merge").arg(&out);
    let o = run(c);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("part-00001-of-00004"), "{}", text(&o));
    // The task is retried with the same index: it continues its own part.
    let mut c = stoker();
    c.arg("convert")
        .arg(photos())
        .arg(&out)
        .args(FLAGS)
        .arg("--resume");
    c.env("SLURM_ARRAY_TASK_ID", "11")
        .env("SLURM_ARRAY_TASK_MIN", "10")
        .env("SLURM_ARRAY_TASK_COUNT", "4");
    let o = run(c);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("carried over"), "{}", text(&o));
    let mut c = stoker();
    c.arg("merge").arg(&out);
    let o = run(c);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("merged 4 parts"), "{}", text(&o));
    assert_same(&out, &single);
}

#[test]
fn merge_refuses_parts_of_another_conversion_and_launcher_variables_that_disagree() {
    let tmp = tempfile::tempdir().unwrap();
    let src = Path::new(REPO).join("examples/data/sample");
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    for (root, quality, index) in [(&a, "90", "0"), (&b, "80", "1")] {
        let mut c = stoker();
        c.arg("convert").arg(&src).arg(root).args(FLAGS);
        c.args(["--quality", quality, "--part", index, "--parts", "2"]);
        let o = run(c);
        assert!(o.status.success(), "{}", text(&o));
    }
    let mut c = stoker();
    c.arg("merge")
        .arg(tmp.path().join("merged"))
        .arg(a.join("part-00000-of-00002"))
        .arg(b.join("part-00001-of-00002"));
    let o = run(c);
    assert!(!o.status.success());
    assert!(text(&o).contains("different conversions"), "{}", text(&o));

    let mut c = stoker();
    c.arg("convert")
        .arg(&src)
        .arg(tmp.path().join("c"))
        .args(FLAGS);
    c.env("JOB_COMPLETION_INDEX", "1");
    let o = run(c);
    // A usage error, as clap's own (it exited 1, as a failed conversion does).
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let t = text(&o);
    assert!(
        t.contains("STOKER_PARTS") && t.contains("JOB_COMPLETION_INDEX=1"),
        "{t}"
    );
    assert!(!tmp.path().join("c").exists(), "nothing written: {t}");
    // A task id that is not UTF-8, or blank: refused naming it (both were taken as unset,
    // and every task of the array converted the whole dataset).
    for id in [
        std::ffi::OsStr::from_bytes(b"\xff"),
        std::ffi::OsStr::new("  "),
    ] {
        let mut c = stoker();
        c.arg("convert")
            .arg(&src)
            .arg(tmp.path().join("c"))
            .args(FLAGS);
        c.env("SLURM_ARRAY_TASK_ID", id)
            .env("SLURM_ARRAY_TASK_COUNT", "4");
        let o = run(c);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(text(&o).contains("SLURM_ARRAY_TASK_ID="), "{}", text(&o));
        assert!(!tmp.path().join("c").exists(), "nothing written");
    }
    let mut c = stoker();
    c.arg("convert")
        .arg(&src)
        .arg(tmp.path().join("c"))
        .args(FLAGS)
        .args(["--part", "5", "--parts", "3"]);
    let o = run(c);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("not below the number of parts 3"),
        "{}",
        text(&o)
    );
    assert!(!tmp.path().join("c").exists(), "nothing written");
}

/// Runs `examples/cluster/convert.sbatch` with bash as Slurm would run each array task
/// (no `sbatch` or `srun` needed), then its merge step.
#[test]
fn slurm_recipe_runs_per_task_and_merges() {
    let tmp = tempfile::tempdir().unwrap();
    let src = Path::new(REPO).join("examples/data/sample");
    let single = tmp.path().join("single");
    convert_single(&src, &single, &FLAGS);
    let out = tmp.path().join("out");
    let script = Path::new(REPO).join("examples/cluster/convert.sbatch");
    let task = |id: &str| {
        let mut c = clean(Command::new("bash"));
        c.arg(&script)
            .env("SRC", &src)
            .env("OUT", &out)
            .env("STOKER", env!("CARGO_BIN_EXE_stoker"))
            .env("STOKER_CONVERT_FLAGS", FLAGS.join(" "))
            .env("SLURM_ARRAY_JOB_ID", "777")
            .env("SLURM_ARRAY_TASK_ID", id)
            .env("SLURM_ARRAY_TASK_MIN", "0")
            .env("SLURM_ARRAY_TASK_COUNT", "3");
        c
    };
    let children = ["0", "1", "2"]
        .iter()
        .map(|id| (format!("task {id}"), task(id).spawn().expect("bash starts")))
        .collect();
    for (name, o) in wait_all(children, Duration::from_secs(300)) {
        assert!(o.status.success(), "{name}: {}", text(&o));
    }
    // A task requeued after it succeeded finds its part done and succeeds again, so the
    // dependent merge job still starts.
    let o = run(task("1"));
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("already converted"), "{}", text(&o));
    let merge = || {
        let mut c = task("0");
        c.env("STOKER_STEP", "merge");
        c
    };
    let o = run(merge());
    assert!(o.status.success(), "{}", text(&o));
    assert_same(&out, &single);
    // The merge job requeued after it finished (a node lost) succeeds again.
    let o = run(merge());
    assert!(o.status.success(), "{}", text(&o));
    assert_same(&out, &single);
}

/// The shell bodies under `args: - |` in `examples/cluster/convert-job.yaml`, in order.
fn yaml_scripts(yaml: &str) -> Vec<String> {
    let mut scripts = Vec::new();
    let mut lines = yaml.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() != "- |" {
            continue;
        }
        let mut body = Vec::new();
        let mut indent = None;
        while let Some(next) = lines.peek() {
            let lead = next.len() - next.trim_start().len();
            let want = *indent.get_or_insert(lead);
            if !next.trim().is_empty() && lead < want {
                break;
            }
            body.push(next.get(want..).unwrap_or("").to_string());
            lines.next();
        }
        scripts.push(body.join("\n"));
    }
    scripts
}

/// Runs the Indexed Job's container command of `examples/cluster/convert-job.yaml` once per
/// completion index, at once, then the merge Job's command.
#[test]
fn kubernetes_recipe_runs_per_index_and_merges() {
    let yaml =
        std::fs::read_to_string(Path::new(REPO).join("examples/cluster/convert-job.yaml")).unwrap();
    let scripts = yaml_scripts(&yaml);
    assert_eq!(scripts.len(), 2, "convert and merge commands: {scripts:?}");
    assert!(
        yaml.contains("completions: 4") && yaml.contains("{ name: STOKER_PARTS, value: \"4\" }")
    );
    let tmp = tempfile::tempdir().unwrap();
    let src = Path::new(REPO).join("examples/data/sample");
    let single = tmp.path().join("single");
    convert_single(&src, &single, &[]);
    let out = tmp.path().join("out");
    // The container has `stoker` on its PATH.
    let bin = tmp.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_stoker"), bin.join("stoker")).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let pod = |script: &str| {
        let mut c = clean(Command::new("sh"));
        c.arg("-c")
            .arg(script)
            .env("PATH", &path)
            .env("SRC", &src)
            .env("OUT", &out)
            .env("STOKER_PARTS", "4");
        c
    };
    let children = (0..4)
        .map(|i| {
            let mut c = pod(&scripts[0]);
            c.env("JOB_COMPLETION_INDEX", i.to_string());
            (format!("index {i}"), c.spawn().expect("sh starts"))
        })
        .collect();
    for (name, o) in wait_all(children, Duration::from_secs(300)) {
        assert!(o.status.success(), "{name}: {}", text(&o));
    }
    let o = run(pod(&scripts[1]));
    assert!(o.status.success(), "{}", text(&o));
    assert_same(&out, &single);
    // The merge pod retried after its merge finished (evicted while removing the parts,
    // or lost with its node): it waited forever for parts the merge had removed, or failed
    // on the finished dataset. Now it succeeds at once.
    let retried = pod(&scripts[1]).spawn().expect("sh starts");
    let (_, o) = wait_all(
        vec![("merge retry".into(), retried)],
        Duration::from_secs(60),
    )
    .pop()
    .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_same(&out, &single);
}

/// A folder of images without class sub-folders (unlabelled data) converts as one class,
/// label 0, and says so once; `--layout` decides a folder that mixes files and folders.
#[test]
fn flat_folder_converts_as_one_class_and_layout_flag_decides_mixed_folders() {
    let tmp = tempfile::tempdir().unwrap();
    let sample = Path::new(REPO).join("examples/data/sample");
    let flat = tmp.path().join("unlabelled");
    std::fs::create_dir(&flat).unwrap();
    for class in ["caer", "opencv"] {
        for e in std::fs::read_dir(sample.join(class)).unwrap() {
            let p = e.unwrap().path();
            std::fs::copy(&p, flat.join(p.file_name().unwrap())).unwrap();
        }
    }
    let out = tmp.path().join("flat-ds");
    let mut c = stoker();
    c.arg("convert").arg(&flat).arg(&out).args(FLAGS);
    let o = run(c);
    assert!(o.status.success(), "{}", text(&o));
    let said = String::from_utf8_lossy(&o.stderr);
    assert_eq!(said.matches("no class sub-folders").count(), 1, "{said}");
    let ds = Dataset::open(&out).unwrap();
    assert_eq!(ds.len(), 12);
    assert_eq!(ds.manifest().classes, ["unlabelled"]);
    let r = ds.reader().unwrap();
    assert!((0..ds.len()).all(|i| r.get(i).unwrap().header.label == 0));

    // Refused when classes are asked for.
    let mut c = stoker();
    c.arg("convert")
        .arg(&flat)
        .arg(tmp.path().join("x"))
        .args(FLAGS);
    c.args(["--layout", "classes"]);
    let o = run(c);
    assert!(!o.status.success());
    assert!(text(&o).contains("no class subdirectories"), "{}", text(&o));

    // Mixed: a class folder beside loose files. Auto reads classes (loose files ignored);
    // --layout flat takes every file.
    let mixed = tmp.path().join("mixed");
    std::fs::create_dir_all(mixed.join("cats")).unwrap();
    std::fs::copy(sample.join("caer/black_cat.jpg"), mixed.join("cats/1.jpg")).unwrap();
    std::fs::copy(sample.join("caer/tent.jpg"), mixed.join("tent.jpg")).unwrap();
    for (layout, samples, classes) in [("auto", 1, vec!["cats"]), ("flat", 2, vec!["mixed"])] {
        let out = tmp.path().join(format!("mixed-{layout}"));
        let mut c = stoker();
        c.arg("convert").arg(&mixed).arg(&out).args(FLAGS);
        c.args(["--layout", layout]);
        let o = run(c);
        assert!(o.status.success(), "{}", text(&o));
        let ds = Dataset::open(&out).unwrap();
        assert_eq!(ds.len(), samples, "{layout}");
        assert_eq!(ds.manifest().classes, classes, "{layout}");
    }
}

#[test]
fn a_part_chosen_by_a_job_array_says_so_and_how_to_convert_everything() {
    // A Slurm array whose tasks each convert a dataset of their own (an array over
    // datasets) got one slice of each, exit 0, with nothing but the part's name to say
    // why: the message names the variables and how to opt out.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ds");
    let mut c = stoker();
    c.args([
        "convert",
        concat!(env!("CARGO_MANIFEST_DIR"), "/examples/data/sample"),
        out.to_str().unwrap(),
    ]);
    c.env("SLURM_ARRAY_TASK_ID", "3")
        .env("SLURM_ARRAY_TASK_MIN", "0")
        .env("SLURM_ARRAY_TASK_COUNT", "4");
    let o = run(c);
    assert!(o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("SLURM_ARRAY_TASK_ID=3") && err.contains("unset them"),
        "{}",
        text(&o)
    );
    // Asked for with the flags, the part needs no such word.
    let mut c = stoker();
    c.args([
        "convert",
        concat!(env!("CARGO_MANIFEST_DIR"), "/examples/data/sample"),
        out.to_str().unwrap(),
        "--part",
        "0",
        "--parts",
        "4",
    ]);
    let o = run(c);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        !String::from_utf8_lossy(&o.stderr).contains("job array"),
        "{}",
        text(&o)
    );
}

/// A failed task of an 8-part Slurm array resubmitted alone (`sbatch --array=5`, as the
/// example script once said): an array of one task, so part 0 of 1, the whole dataset
/// converted into `part-00000-of-00001` beside the others, which the merge then refused.
/// Now refused at once, naming the other parts' count and the flags to pass.
#[test]
fn one_task_resubmitted_alone_is_refused_beside_parts_of_another_count() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ds");
    let mut c = stoker();
    c.arg("convert").arg(SAMPLE).arg(&out).args(FLAGS);
    c.args(["--part", "2", "--parts", "8"]);
    let o = run(c);
    assert!(o.status.success(), "{}", text(&o));
    let mut c = stoker();
    c.arg("convert")
        .arg(SAMPLE)
        .arg(&out)
        .args(FLAGS)
        .arg("--resume");
    c.env("SLURM_ARRAY_TASK_ID", "5")
        .env("SLURM_ARRAY_TASK_MIN", "5")
        .env("SLURM_ARRAY_TASK_COUNT", "1");
    let o = run(c);
    assert!(!o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("part-00002-of-00008") && err.contains("--parts 8"),
        "{}",
        text(&o)
    );
    assert!(!out.join("part-00000-of-00001").exists(), "{}", text(&o));
    // The same part of the same count goes on.
    let mut c = stoker();
    c.arg("convert").arg(SAMPLE).arg(&out).args(FLAGS);
    c.args(["--resume", "--part", "5", "--parts", "8"]);
    let o = run(c);
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn a_part_into_a_merged_root_is_refused_before_it_says_it_converts() {
    // The part's note ("converting part 0 of 2 ... into ds/part-...") came before the
    // refusal, as if the part had begun.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ds");
    convert_single(Path::new(SAMPLE), &out, &FLAGS);
    let mut c = stoker();
    c.arg("convert").arg(SAMPLE).arg(&out);
    c.args(FLAGS).args(["--part", "0", "--parts", "2"]);
    let o = run(c);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("already holds a finished dataset"),
        "{}",
        text(&o)
    );
    assert!(!err.contains("converting part"), "{}", text(&o));
    assert!(!out.join("part-00000-of-00002").exists());
}

#[test]
fn an_output_that_is_or_lies_below_a_file_is_refused_naming_the_file() {
    // Was "d/file/out: Not a directory (os error 20)" from convert, and "File exists
    // (os error 17)" from a merge into a file.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"not a directory").unwrap();
    let below = file.join("out");
    let part = ["--part", "0", "--parts", "2"];
    let cases: [(&[&str], &Path); 6] = [
        (&["convert", SAMPLE], &file),
        (
            &["convert", SAMPLE, part[0], part[1], part[2], part[3]],
            &file,
        ),
        (&["merge"], &file),
        (&["convert", SAMPLE], &below),
        (
            &["convert", SAMPLE, part[0], part[1], part[2], part[3]],
            &below,
        ),
        (&["merge"], &below),
    ];
    for (args, out) in cases {
        let mut c = stoker();
        c.args(args).arg(out);
        let o = run(c);
        assert_eq!(o.status.code(), Some(1), "{args:?} {out:?}: {}", text(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        let said = format!("{}: is a file, not a directory", file.display());
        assert!(err.contains(&said), "{args:?} {out:?}: {}", text(&o));
        assert!(!err.contains("converting part"), "{}", text(&o));
    }
    assert_eq!(std::fs::read(&file).unwrap(), b"not a directory");
}

#[test]
fn a_part_that_cannot_make_its_directory_leaves_no_root_it_made() {
    // The root and its parents were made, then the part directory in it could not be
    // (here: its path over PATH_MAX), and the empty directories stayed.
    let dir = tempfile::tempdir().unwrap();
    let top = dir.path().join("top");
    let mut root = top.clone();
    while root.as_os_str().len() + 201 < 4070 {
        root.push("a".repeat(200));
    }
    // 4085 bytes: the root fits in PATH_MAX (4096 with its NUL), its part directory not.
    root.push("b".repeat(4085 - root.as_os_str().len() - 1));
    assert_eq!(root.as_os_str().len(), 4085);
    let mut c = stoker();
    c.arg("convert").arg(SAMPLE).arg(&root);
    c.args(FLAGS).args(["--part", "0", "--parts", "2"]);
    let o = run(c);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("File name too long"), "{}", text(&o));
    assert!(!top.exists(), "the directories the part made stayed");
    // A root that was there before stays.
    std::fs::create_dir_all(&root).unwrap();
    let mut c = stoker();
    c.arg("convert").arg(SAMPLE).arg(&root);
    c.args(FLAGS).args(["--part", "0", "--parts", "2"]);
    let o = run(c);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(root.is_dir());
}

#[test]
fn parts_and_merge_go_through_a_root_that_is_a_symbolic_link() {
    // A part took the link's own inode for the root's, so every start "found the root
    // removed" and gave up: "link: the directory was removed while this part locked it".
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    for i in ["0", "1"] {
        let mut c = stoker();
        c.arg("convert").arg(SAMPLE).arg(&link);
        c.args(FLAGS).args(["--part", i, "--parts", "2"]);
        let o = run(c);
        assert!(o.status.success(), "part {i}: {}", text(&o));
    }
    let mut c = stoker();
    c.arg("merge").arg(&link);
    let o = run(c);
    assert!(o.status.success(), "{}", text(&o));
    let single = dir.path().join("single");
    convert_single(Path::new(SAMPLE), &single, &FLAGS);
    assert_same(&link, &single);
    assert!(link.is_symlink());
}

#[test]
fn a_refused_merge_or_part_takes_away_only_directories_it_made() {
    // `new/../x` was missing while `new` was, and so taken for made by this run: a refused
    // merge, or a part stopped by --strict, removed the user's empty `x` and left `new`.
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x");
    std::fs::create_dir(&x).unwrap();
    let through = |name: &str| dir.path().join(name).join("..").join("x");
    let mut c = stoker();
    c.arg("merge")
        .arg(through("new"))
        .arg(dir.path().join("no-such-part"));
    let o = run(c);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(x.is_dir(), "the merge removed a directory it did not make");
    assert!(
        !dir.path().join("new").exists(),
        "the merge left a directory it made"
    );

    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("c")).unwrap();
    std::fs::write(src.join("c/bad.jpg"), b"\xff\xd8\xff not a JPEG").unwrap();
    let mut c = stoker();
    c.arg("convert").arg(&src).arg(through("other"));
    c.args(FLAGS)
        .args(["--strict", "--part", "0", "--parts", "1"]);
    let o = run(c);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(x.is_dir(), "the part removed a directory it did not make");
    assert!(
        !dir.path().join("other").exists(),
        "the part left a directory it made"
    );
}

/// A merge that cannot write the merged dataset's files (a full disk; here the file size
/// limit) says that no part was removed and to run it again: it said only
/// "sources.bin.tmp: No space left on device". A stop for no fault of the parts, exit
/// status 3 as `merge --help` says (it was 1, a refusal of the parts).
#[test]
fn a_merge_out_of_room_says_nothing_was_removed_and_runs_again() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("parts");
    for part in ["0", "1"] {
        let mut c = stoker();
        c.args(["convert", "-q", "--part", part, "--parts", "2"])
            .arg(photos())
            .arg(&root);
        let o = run(c);
        assert!(o.status.success(), "{}", text(&o));
    }
    // `ulimit -f 1`: no file of the merge may pass 512 bytes (the manifest does).
    let o = merge_under("-f 1", &root);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("no part was removed: make room, then run merge again"),
        "{}",
        text(&o)
    );
    let mut c = stoker();
    c.arg("merge").arg(&root);
    let o = run(c);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(Dataset::open(&root).unwrap().len(), 164);
}

/// A merge held every part's source map open at once, so a job array of more parts than
/// `ulimit -n` allows descriptors could not be merged. 15 parts under `ulimit -n 10`
/// (what stdio, the output's lock and the files being written need, and one part's).
#[test]
fn a_merge_of_more_parts_than_open_files_allowed_merges() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("parts");
    for part in 0..15 {
        let mut c = stoker();
        c.args(["convert", "-q", "--no-check", "--parts", "15", "--part"])
            .arg(part.to_string())
            .arg(SAMPLE)
            .arg(&root);
        let o = run(c);
        assert!(o.status.success(), "{}", text(&o));
    }
    let o = merge_under("-n 10", &root);
    assert!(o.status.success(), "{}", text(&o));
    let single = tmp.path().join("single");
    convert_single(Path::new(SAMPLE), &single, &["--no-check"]);
    assert_same(&root, &single);
    let (merged, once) = (
        Dataset::open(&root).unwrap(),
        Dataset::open(&single).unwrap(),
    );
    for i in 0..once.len() {
        assert_eq!(
            merged.source_of(i).unwrap(),
            once.source_of(i).unwrap(),
            "source of {i}"
        );
    }
}

/// `stoker merge ROOT` under `ulimit LIMIT` (`-f 1`, `-n 10`).
fn merge_under(limit: &str, root: &Path) -> Output {
    let mut c = clean(Command::new("bash"));
    c.arg("-c")
        .arg(format!("ulimit {limit} && exec \"$0\" merge \"$1\""))
        .arg(env!("CARGO_BIN_EXE_stoker"))
        .arg(root);
    run(c)
}

/// The merge's digest check ran on rayon's global pool: it panicked (exit 101) where the
/// pool's threads could not start (`ulimit -u`, a container's pids.max below its CPUs),
/// and started as many threads as `RAYON_NUM_THREADS` said (100,000: past a minute).
#[test]
fn merge_checks_its_shards_under_a_thread_limit_and_any_rayon_num_threads() {
    let tmp = tempfile::tempdir().unwrap();
    let src = Path::new(REPO).join("examples/data/sample");
    let single = tmp.path().join("single");
    convert_single(&src, &single, &FLAGS);

    let out = tmp.path().join("many");
    convert_two_parts(&src, &out);
    let mut c = stoker();
    c.env("RAYON_NUM_THREADS", "100000").arg("merge").arg(&out);
    let t = Instant::now();
    let o = run(c);
    assert!(o.status.success(), "{}", text(&o));
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    assert_same(&out, &single);

    // At most one thread besides the main one.
    let out = tmp.path().join("limited");
    convert_two_parts(&src, &out);
    let command = format!(
        "'{}' merge '{}'",
        env!("CARGO_BIN_EXE_stoker"),
        out.display()
    );
    let c = clean(common::under_process_limit(2, &command, tmp.path()));
    let o = run(c);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("panicked"), "{}", text(&o));
    assert!(o.status.success(), "{}", text(&o));
    assert_same(&out, &single);
}

/// OUT given through a part (`OUT/part-00000-of-00002/..`) found the second part through
/// the first; once the first was removed, the second was left beside the merged dataset.
#[test]
fn merge_of_an_out_given_through_a_part_removes_every_part() {
    let tmp = tempfile::tempdir().unwrap();
    let src = Path::new(REPO).join("examples/data/sample");
    let out = tmp.path().join("out");
    convert_two_parts(&src, &out);
    let mut c = stoker();
    c.arg("merge").arg(out.join("part-00000-of-00002/.."));
    let o = run(c);
    assert!(o.status.success(), "{}", text(&o));
    assert!(!text(&o).contains("was not removed"), "{}", text(&o));
    let mut left: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            "manifest.json",
            "shard-00000.lmdb",
            "shard-00001.lmdb",
            "sources.bin"
        ]
    );
}

/// `src` converted into `out` as parts 0 and 1 of 2, one after the other.
fn convert_two_parts(src: &Path, out: &Path) {
    for i in ["0", "1"] {
        let mut c = stoker();
        c.arg("convert").arg(src).arg(out).args(FLAGS);
        c.args(["--part", i, "--parts", "2"]);
        let o = run(c);
        assert!(o.status.success(), "{}", text(&o));
    }
}
