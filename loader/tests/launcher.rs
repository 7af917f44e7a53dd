//! A simulated node: eight loader processes started at once with the variables
//! torchrun, or Slurm's `srun`, gives them, over one dataset converted from the
//! in-repo sample photos (`examples/data/sample`). Each process is this test binary
//! re-run as [`node_probe_child`]; it loads epoch 0 with `Device::Auto` and
//! `distributed_from_env()` and prints what it got as one JSON line.
//!
//! Checked across the processes: the slices are disjoint, have equal batch counts
//! and together are the epoch; each process's placement, device choice (with a
//! fake device count, and the real one of this machine) and worker count are the
//! ones intended, and the workers of a node add up to its cores.

use std::collections::{BTreeSet, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use stoker_formats::{convert, ConvertOptions, Dataset, NoProgress, Source};
use stoker_loader::launcher::{choose_device, Launcher, Placement};
use stoker_loader::{Device, Loader, Output, Shuffle, Transform};

/// Set (to the dataset directory) in the child processes.
const CHILD: &str = "STOKER_NODE_PROBE_DATASET";
/// The device count the child pretends the driver reports.
const FAKE_GPUS: &str = "STOKER_NODE_PROBE_FAKE_GPUS";
/// Every launcher variable the placement reads: cleared in the children, so that the
/// environment the tests run in (a CI job inside Slurm, say) cannot leak in.
const LAUNCHER_VARS: [&str; 14] = [
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE",
    "SLURM_CPUS_PER_TASK",
    "CUDA_VISIBLE_DEVICES",
];
const PROCESSES: u64 = 8;
/// Copies of each sample photo in the dataset: 15 photos × 8 = 120 records, 15 per
/// process, so every slice is the same size with nothing padded or dropped.
const COPIES: usize = 8;
const BATCH: usize = 4;
const SEED: u64 = 17;

/// The in-repo sample photos, each listed `COPIES` times (labels by folder), converted
/// into a dataset under `dir`.
fn sample_dataset(dir: &Path) -> (PathBuf, u64) {
    let root = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/data/sample"
    ));
    let mut lines = String::new();
    let mut folders: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    folders.sort();
    let mut photos = 0;
    for (label, folder) in folders.iter().enumerate() {
        let mut files: Vec<_> = std::fs::read_dir(folder)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        for file in files {
            let rel = file
                .strip_prefix(&root)
                .unwrap()
                .to_str()
                .unwrap()
                .to_owned();
            photos += 1;
            for _ in 0..COPIES {
                lines.push_str(&format!("{rel},{label}\n"));
            }
        }
    }
    assert_eq!(photos, 15, "examples/data/sample changed");
    let list = dir.join("list.csv");
    std::fs::write(&list, lines).unwrap();
    let out = dir.join("dataset");
    let source = Source::List { root, list };
    convert(&ConvertOptions::new(source, &out), &NoProgress).unwrap();
    let records = Dataset::open(&out).unwrap().len();
    assert_eq!(records, (photos * COPIES) as u64);
    (out, records)
}

/// What one child process reports.
#[derive(Debug, serde::Deserialize)]
struct Probe {
    placement: Placement,
    indices: Vec<u64>,
    batches: u64,
    workers: u64,
    /// `choose_device(Auto, local_rank, fake count)`.
    fake_device: Device,
    /// The loader's own device line (this machine's driver).
    stats_device: String,
    /// The placement line of the loader's stats table.
    stats_line: String,
}

/// The child side: run only as a child of the node tests (ignored otherwise).
#[test]
#[ignore = "a child process of the simulated-node tests, which run it with --ignored"]
fn node_probe_child() {
    let dir = std::env::var(CHILD).expect("run by the simulated-node tests, with the dataset");
    let fake: usize = std::env::var(FAKE_GPUS).unwrap().parse().unwrap();
    let loader = Loader::builder(Dataset::open(&dir).unwrap())
        .batch_size(BATCH)
        .shuffle(Shuffle::Global { seed: SEED })
        .transform(Transform::center_crop(16, 18))
        .output(Output::U8Nhwc)
        .device(Device::Auto)
        .distributed_from_env()
        .prefetch_next_epoch(false)
        .build();
    let loader = match loader {
        Ok(loader) => loader,
        Err(e) => {
            println!("NODE_PROBE_ERROR {e}");
            return;
        }
    };
    let mut indices = Vec::new();
    let mut batches = 0;
    for batch in loader.epoch(0) {
        indices.extend(batch.unwrap().indices);
        batches += 1;
    }
    let stats = loader.stats();
    let placement = stats.placement.expect("the loader records its placement");
    let probe = serde_json::json!({
        "placement": placement,
        "indices": indices,
        "batches": batches,
        "workers": stats.shared_workers,
        "fake_device": choose_device(Device::Auto, placement.local_rank, || fake),
        "stats_device": stats.device,
        "stats_line": stats.to_string().lines().find(|l| l.contains("placement:")).unwrap_or(""),
    });
    println!("NODE_PROBE {probe}");
}

/// Starts one child per entry of `envs` at once, waits for all (killing any that
/// runs past a minute) and returns their probes in the same order.
fn run_node(dataset: &Path, fake_gpus: usize, envs: &[Vec<(&str, String)>]) -> Vec<Probe> {
    run_children(dataset, fake_gpus, envs)
        .iter()
        .enumerate()
        .map(|(i, stdout)| {
            let line = stdout
                .lines()
                .find_map(|l| l.split_once("NODE_PROBE ").map(|(_, json)| json))
                .unwrap_or_else(|| panic!("child {i} printed no probe:\n{stdout}"));
            serde_json::from_str(line).unwrap()
        })
        .collect()
}

/// Starts one child per entry of `envs` at once, waits for all (killing any that
/// runs past a minute) and returns their standard outputs in the same order.
fn run_children(dataset: &Path, fake_gpus: usize, envs: &[Vec<(&str, String)>]) -> Vec<String> {
    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<_> = envs
        .iter()
        .map(|vars| {
            let mut cmd = Command::new(&exe);
            cmd.args([
                "--exact",
                "node_probe_child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ]);
            for v in LAUNCHER_VARS {
                cmd.env_remove(v);
            }
            cmd.env(CHILD, dataset)
                .env(FAKE_GPUS, fake_gpus.to_string())
                .envs(vars.iter().map(|(k, v)| (k, v)))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut outputs = Vec::new();
    for (i, child) in children.iter_mut().enumerate() {
        // Drain stdout while waiting, so a full pipe cannot stall the child.
        let mut stdout = String::new();
        let mut pipe = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let _ = pipe.read_to_string(&mut stdout);
            stdout
        });
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("child {i} ({:?}) still running after 60 s", envs[i]);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let stdout = reader.join().unwrap();
        let mut stderr = String::new();
        let _ = child.stderr.take().unwrap().read_to_string(&mut stderr);
        assert!(
            status.success(),
            "child {i} ({:?}) failed:\n{stdout}\n{stderr}",
            envs[i]
        );
        outputs.push(stdout);
    }
    outputs
}

/// The checks every launcher shares: the slices, the placements, the devices, the workers.
fn check_node(probes: &[Probe], records: u64, launcher: Launcher, local_world: u64, fake: usize) {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut seen = BTreeSet::new();
    for (rank, p) in probes.iter().enumerate() {
        let rank = rank as u64;
        let local_rank = rank % local_world;
        assert_eq!(
            p.placement,
            Placement {
                launcher,
                rank,
                world: PROCESSES,
                local_rank,
                local_world
            }
        );
        // Disjoint slices of equal length and batch count.
        assert_eq!(p.indices.len() as u64, records / PROCESSES, "rank {rank}");
        assert_eq!(p.batches, (records / PROCESSES).div_ceil(BATCH as u64));
        for &i in &p.indices {
            assert!(seen.insert(i), "index {i} loaded twice (rank {rank})");
        }
        // The local rank's GPU with the fake device count.
        assert_eq!(
            p.fake_device,
            Device::Cuda((local_rank % fake as u64) as usize),
            "rank {rank}"
        );
        // The loader's own choice on this machine: the CPU without a GPU, else
        // the local rank's device among those the driver reports.
        match stoker_loader::gpu::visible_devices() {
            Ok(n) if n > 0 => assert!(
                p.stats_device
                    .starts_with(&format!("cuda:{} ", local_rank % n as u64)),
                "rank {rank}: {}",
                p.stats_device
            ),
            _ => assert!(
                p.stats_device.starts_with("cpu (Device::Auto"),
                "rank {rank}: {}",
                p.stats_device
            ),
        }
        assert!(
            p.stats_line.contains(&format!(
                "placement: rank {rank} of {PROCESSES}, local rank {local_rank} of {local_world} ({launcher})"
            )),
            "rank {rank}: {}",
            p.stats_line
        );
    }
    // Together, the epoch.
    assert_eq!(seen, (0..records).collect::<BTreeSet<u64>>());
    // The workers of each node's processes add up to its cores (at least one each).
    let mut per_node: HashMap<u64, u64> = HashMap::new();
    for (rank, p) in probes.iter().enumerate() {
        assert!(p.workers >= 1);
        *per_node.entry(rank as u64 / local_world).or_default() += p.workers;
    }
    for (node, workers) in per_node {
        assert!(
            workers <= (cores as u64).max(local_world)
                && workers > (cores as u64).saturating_sub(local_world),
            "node {node}: {workers} workers for {cores} cores and {local_world} processes"
        );
    }
}

#[test]
fn simulated_node_torchrun_eight_processes_share_the_epoch_the_gpus_and_the_cores() {
    let dir = tempfile::tempdir().unwrap();
    let (dataset, records) = sample_dataset(dir.path());
    let envs: Vec<_> = (0..PROCESSES)
        .map(|r| {
            vec![
                ("RANK", r.to_string()),
                ("WORLD_SIZE", PROCESSES.to_string()),
                ("LOCAL_RANK", r.to_string()),
                ("LOCAL_WORLD_SIZE", PROCESSES.to_string()),
            ]
        })
        .collect();
    let probes = run_node(&dataset, 8, &envs);
    check_node(&probes, records, Launcher::Torchrun, PROCESSES, 8);
}

#[test]
fn simulated_node_slurm_two_nodes_of_four_tasks_share_the_epoch_the_gpus_and_the_cores() {
    // `srun -N 2 --ntasks-per-node 4`: tasks 0-3 on node 0, 4-7 on node 1, with the
    // step's tasks-per-node list in Slurm's compressed form. Three fake GPUs per
    // node: local ranks 0-3 take devices 0, 1, 2, 0.
    let dir = tempfile::tempdir().unwrap();
    let (dataset, records) = sample_dataset(dir.path());
    let envs: Vec<_> = (0..PROCESSES)
        .map(|r| {
            vec![
                ("SLURM_JOB_ID", "4242".to_owned()),
                ("SLURM_PROCID", r.to_string()),
                ("SLURM_NTASKS", PROCESSES.to_string()),
                ("SLURM_STEP_NUM_TASKS", PROCESSES.to_string()),
                ("SLURM_LOCALID", (r % 4).to_string()),
                ("SLURM_NODEID", (r / 4).to_string()),
                ("SLURM_STEP_TASKS_PER_NODE", "4(x2)".to_owned()),
                ("SLURM_TASKS_PER_NODE", "4(x2)".to_owned()),
            ]
        })
        .collect();
    let probes = run_node(&dataset, 3, &envs);
    check_node(&probes, records, Launcher::Slurm, 4, 3);
}

/// Regression: a process whose launcher variables contradict each other used to
/// start anyway (with only `RANK` set, on a wrong slice; under Slurm, on the whole
/// dataset); now `build` fails and names the variables.
#[test]
fn inconsistent_launcher_variables_fail_the_build_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let (dataset, _) = sample_dataset(dir.path());
    let cases = [
        (
            vec![
                ("SLURM_PROCID", "3".to_owned()),
                ("SLURM_NTASKS", "8".to_owned()),
                ("SLURM_LOCALID", "5".to_owned()),
                ("SLURM_NTASKS_PER_NODE", "4".to_owned()),
            ],
            ["SLURM_LOCALID=\"5\"", "SLURM_NTASKS_PER_NODE=\"4\""],
        ),
        (
            vec![("RANK", "3".to_owned())],
            ["RANK=\"3\"", "WORLD_SIZE unset"],
        ),
    ];
    let envs: Vec<_> = cases.iter().map(|(vars, _)| vars.clone()).collect();
    for (stdout, (_, names)) in run_children(&dataset, 1, &envs).iter().zip(&cases) {
        let error = stdout
            .lines()
            .find_map(|l| l.split_once("NODE_PROBE_ERROR ").map(|(_, e)| e))
            .unwrap_or_else(|| panic!("the build did not fail:\n{stdout}"));
        for name in names {
            assert!(error.contains(name), "{name} not in: {error}");
        }
    }
}

#[test]
fn a_given_placement_is_used_without_reading_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let (dataset, _) = sample_dataset(dir.path());
    let given = Placement {
        launcher: Launcher::Torchrun,
        rank: 5,
        world: 8,
        local_rank: 5,
        local_world: 8,
    };
    let loader = Loader::builder(Dataset::open(&dataset).unwrap())
        .batch_size(BATCH)
        .placement(given)
        .distributed_from_env()
        .build()
        .unwrap();
    let stats = loader.stats();
    assert_eq!(stats.placement, Some(given));
    assert_eq!(stats.slice, Some([5, 8]));
    assert_eq!(loader.sampler().order(0).len(), 15);
    // Without distributed_from_env the loader keeps the whole dataset, and says so.
    let whole = Loader::builder(Dataset::open(&dataset).unwrap())
        .placement(given)
        .build()
        .unwrap();
    assert_eq!(whole.sampler().order(0).len(), 120);
    let table = whole.stats().to_string();
    assert!(
        table.contains("placement: rank 5 of 8, local rank 5 of 8 (torchrun), loads slice 0 of 1"),
        "{table}"
    );
}
