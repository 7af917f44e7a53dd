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
use stoker_loader::launcher::{choose_device, EnvProblem, Launcher, NodeShare, Placement};
use stoker_loader::{Device, Loader, LoaderError, Output, Shuffle, Transform};

/// Set (to the dataset directory) in the child processes.
const CHILD: &str = "STOKER_NODE_PROBE_DATASET";
/// The device count the child pretends the driver reports.
const FAKE_GPUS: &str = "STOKER_NODE_PROBE_FAKE_GPUS";
/// `rank/world` for the child to give its builder (`distributed`); unset, it uses
/// `distributed_from_env`.
const GIVEN: &str = "STOKER_NODE_PROBE_GIVEN";
/// Every launcher variable the placement reads: cleared in the children, so that the
/// environment the tests run in (a CI job inside Slurm, say) cannot leak in.
const LAUNCHER_VARS: [&str; 34] = [
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "LOCAL_SIZE",
    "HOROVOD_RANK",
    "HOROVOD_SIZE",
    "HOROVOD_LOCAL_RANK",
    "HOROVOD_LOCAL_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "MV2_COMM_WORLD_RANK",
    "MV2_COMM_WORLD_SIZE",
    "MV2_COMM_WORLD_LOCAL_RANK",
    "MV2_COMM_WORLD_LOCAL_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
    "MPI_LOCALRANKID",
    "MPI_LOCALNRANKS",
    "PMIX_RANK",
    "SLURM_STEP_ID",
    "SLURM_STEPID",
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
    /// `placement.note` of the stats JSON (what Python's `stats()` holds).
    json_note: serde_json::Value,
}

/// The child side: run only as a child of the node tests (ignored otherwise).
#[test]
#[ignore = "a child process of the simulated-node tests, which run it with --ignored"]
fn node_probe_child() {
    let dir = std::env::var(CHILD).expect("run by the simulated-node tests, with the dataset");
    let fake: usize = std::env::var(FAKE_GPUS).unwrap().parse().unwrap();
    let builder = Loader::builder(Dataset::open(&dir).unwrap())
        .batch_size(BATCH)
        .shuffle(Shuffle::Global { seed: SEED })
        .transform(Transform::center_crop(16, 18))
        .output(Output::U8Nhwc)
        .device(Device::Auto)
        .prefetch_next_epoch(false);
    let builder = match std::env::var(GIVEN) {
        Ok(given) => {
            let (rank, world) = given.split_once('/').unwrap();
            builder.distributed(rank.parse().unwrap(), world.parse().unwrap())
        }
        Err(_) => builder.distributed_from_env(),
    };
    let loader = builder.build();
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
    let placement = stats
        .placement
        .clone()
        .expect("the loader records its placement");
    let probe = serde_json::json!({
        "placement": placement,
        "indices": indices,
        "batches": batches,
        "workers": stats.shared_workers,
        "fake_device": choose_device(Device::Auto, placement.local_rank, || fake),
        "stats_device": stats.device,
        "stats_line": stats.to_string().lines().find(|l| l.contains("placement:")).unwrap_or(""),
        "json_note": serde_json::from_str::<serde_json::Value>(&stats.to_json()).unwrap()["placement"]["note"],
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
            cmd.env_remove(GIVEN);
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
                local_world,
                note: None,
            }
        );
        assert_eq!(p.json_note, serde_json::Value::Null, "rank {rank}");
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
                p.stats_device.starts_with("cpu (device auto"),
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
                ("SLURM_STEP_ID", "0".to_owned()),
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
                ("SLURM_STEP_ID", "1".to_owned()),
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
        note: None,
    };
    let loader = Loader::builder(Dataset::open(&dataset).unwrap())
        .batch_size(BATCH)
        .placement(given.clone())
        .distributed_from_env()
        .build()
        .unwrap();
    let stats = loader.stats();
    assert_eq!(stats.placement, Some(given.clone()));
    assert_eq!(stats.slice, Some([5, 8]));
    assert_eq!(loader.sampler().order(0).len(), 15);
    // Without distributed_from_env the loader keeps the whole dataset, and says so.
    let whole = Loader::builder(Dataset::open(&dataset).unwrap())
        .placement(given.clone())
        .build()
        .unwrap();
    assert_eq!(whole.sampler().order(0).len(), 120);
    let table = whole.stats().to_string();
    assert!(
        table.contains("placement: rank 5 of 8, local rank 5 of 8 (torchrun), loads slice 0 of 1"),
        "{table}"
    );
    // ...and warns: each of the 8 processes would train on the same batches.
    let note = whole.ranks_note().expect("a note");
    assert!(
        note.contains("started 8 processes") && note.contains(".distributed_from_env()"),
        "{note}"
    );
    assert_eq!(loader.ranks_note(), None);
    // Rank 0 of 1 asked for: the whole dataset in each process on purpose, not noted.
    let on_purpose = Loader::builder(Dataset::open(&dataset).unwrap())
        .placement(given)
        .distributed(0, 1)
        .build()
        .unwrap();
    assert_eq!(on_purpose.sampler().order(0).len(), 120);
    assert_eq!(on_purpose.ranks_note(), None);
}

/// `Placement::from_vars` over `vars` (no process environment involved).
fn read(vars: &[(&str, &str)]) -> Result<Placement, LoaderError> {
    let env: HashMap<&str, &str> = vars.iter().copied().collect();
    Placement::from_vars(|name| env.get(name).map(|v| v.to_string()))
}

/// `Placement::with_ranks_from_vars(rank, world)` over `vars`.
fn read_given(rank: u64, world: u64, vars: &[(&str, &str)]) -> Result<Placement, LoaderError> {
    let env: HashMap<&str, &str> = vars.iter().copied().collect();
    Placement::with_ranks_from_vars(rank, world, |name| env.get(name).map(|v| v.to_string()))
}

fn at(launcher: Launcher, [rank, world, local_rank, local_world]: [u64; 4]) -> Placement {
    Placement {
        launcher,
        rank,
        world,
        local_rank,
        local_world,
        note: None,
    }
}

fn noted(p: Placement, note: &str) -> Placement {
    Placement {
        note: Some(note.to_owned()),
        ..p
    }
}

/// The error's launcher, problem and variables (`NAME=value` / `NAME unset`).
fn refused(result: Result<Placement, LoaderError>) -> (Launcher, EnvProblem, Vec<String>) {
    match result {
        Err(LoaderError::LauncherEnv {
            launcher,
            problem,
            variables,
        }) => (
            launcher,
            problem,
            variables.iter().map(ToString::to_string).collect(),
        ),
        other => panic!("expected LauncherEnv, got {other:?}"),
    }
}

#[test]
fn torchrun_full_environment() {
    let vars = [
        ("RANK", "11"),
        ("WORLD_SIZE", "16"),
        ("LOCAL_RANK", "3"),
        ("LOCAL_WORLD_SIZE", "8"),
    ];
    assert_eq!(read(&vars).unwrap(), at(Launcher::Torchrun, [11, 16, 3, 8]));
    // Rank and world given by the caller (a data-parallel group): the launcher's
    // figures are still the placement's; the slice is the caller's.
    assert_eq!(
        read_given(1, 4, &vars).unwrap(),
        at(Launcher::Torchrun, [11, 16, 3, 8])
    );
}

/// Regression: DeepSpeed's launcher sets LOCAL_SIZE, not LOCAL_WORLD_SIZE, and was
/// refused as "torchrun environment: incomplete".
#[test]
fn deepspeed_local_size_is_the_local_count() {
    let vars = [
        ("RANK", "1"),
        ("WORLD_SIZE", "8"),
        ("LOCAL_RANK", "1"),
        ("LOCAL_SIZE", "8"),
        ("CROSS_RANK", "0"),
        ("CROSS_SIZE", "1"),
    ];
    assert_eq!(read(&vars).unwrap(), at(Launcher::Torchrun, [1, 8, 1, 8]));
    // LOCAL_WORLD_SIZE, when both are set, wins.
    let p = read(&[
        ("RANK", "9"),
        ("WORLD_SIZE", "16"),
        ("LOCAL_RANK", "1"),
        ("LOCAL_WORLD_SIZE", "8"),
        ("LOCAL_SIZE", "16"),
    ])
    .unwrap();
    assert_eq!(p, at(Launcher::Torchrun, [9, 16, 1, 8]));
}

/// Regression: scripts that export RANK, LOCAL_RANK and WORLD_SIZE (NERSC, Summit)
/// were refused; now the local count is estimated as the whole job, and said.
#[test]
fn local_rank_without_a_local_count_takes_the_job_as_the_node() {
    let p = read(&[("RANK", "5"), ("LOCAL_RANK", "1"), ("WORLD_SIZE", "8")]).unwrap();
    assert_eq!(
        p,
        noted(
            at(Launcher::Torchrun, [5, 8, 1, 8]),
            "LOCAL_RANK is set without LOCAL_WORLD_SIZE or LOCAL_SIZE: the job's 8 processes \
             are taken to share this node, so this one takes 1/8 of its cores and pinned \
             memory (less than its share if the job spans nodes: set LOCAL_WORLD_SIZE or \
             LOCAL_SIZE, or the workers and pinned memory)"
        )
    );
    // The local rank must still be below the job's size.
    assert_eq!(
        refused(read(&[
            ("RANK", "5"),
            ("LOCAL_RANK", "8"),
            ("WORLD_SIZE", "8")
        ])),
        (
            Launcher::Torchrun,
            EnvProblem::IndexNotBelowCount,
            vec!["LOCAL_RANK=\"8\"".to_owned(), "WORLD_SIZE=\"8\"".to_owned()]
        )
    );
}

/// Regression: Lightning's launcher sets LOCAL_RANK, NODE_RANK and WORLD_SIZE but no
/// RANK. From the environment alone that is refused; with rank and world given it
/// used to fall back to a single process (every process on GPU 0, every core); now
/// the local rank is kept.
#[test]
fn lightning_with_rank_and_world_given_keeps_the_local_rank() {
    let vars = [("LOCAL_RANK", "1"), ("NODE_RANK", "0"), ("WORLD_SIZE", "4")];
    assert_eq!(
        refused(read(&vars)),
        (
            Launcher::Torchrun,
            EnvProblem::NoGlobalRank,
            vec![
                "RANK unset".to_owned(),
                "WORLD_SIZE=\"4\"".to_owned(),
                "LOCAL_RANK=\"1\"".to_owned()
            ]
        )
    );
    assert_eq!(
        read_given(1, 4, &vars).unwrap(),
        noted(
            at(Launcher::Torchrun, [1, 4, 1, 4]),
            "torchrun environment: LOCAL_RANK without RANK (as PyTorch Lightning's own \
             launchers start processes); rank and world are the caller's (1 of 4); \
             LOCAL_RANK is set without LOCAL_WORLD_SIZE or LOCAL_SIZE: the job's 4 processes \
             are taken to share this node, so this one takes 1/4 of its cores and pinned \
             memory (less than its share if the job spans nodes: set LOCAL_WORLD_SIZE or \
             LOCAL_SIZE, or the workers and pinned memory)"
        )
    );
    // With a caller's world that is not the job's (a data-parallel group of 2 among
    // the 4 processes), every process still estimates the node from the launcher's
    // WORLD_SIZE, so that their shares add up to the node's.
    for local_rank in ["0", "1", "3"] {
        let vars = [("LOCAL_RANK", local_rank), ("WORLD_SIZE", "4")];
        assert_eq!(read_given(0, 2, &vars).unwrap().local_world, 4);
    }
    // Local figures that contradict each other are refused even then: the device
    // would follow them.
    assert_eq!(
        refused(read_given(
            1,
            4,
            &[("LOCAL_RANK", "4"), ("LOCAL_WORLD_SIZE", "4")]
        )),
        (
            Launcher::Torchrun,
            EnvProblem::IndexNotBelowCount,
            vec![
                "LOCAL_RANK=\"4\"".to_owned(),
                "LOCAL_WORLD_SIZE=\"4\"".to_owned()
            ]
        )
    );
    // So is a local count above the launcher's own world.
    assert_eq!(
        refused(read_given(
            0,
            1,
            &[
                ("RANK", "0"),
                ("WORLD_SIZE", "2"),
                ("LOCAL_RANK", "0"),
                ("LOCAL_WORLD_SIZE", "4")
            ]
        ))
        .1,
        EnvProblem::LocalWorldAboveWorld
    );
}

#[test]
fn open_mpi_mpirun() {
    let vars = [
        ("OMPI_COMM_WORLD_RANK", "5"),
        ("OMPI_COMM_WORLD_SIZE", "8"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
        ("PMIX_RANK", "5"),
    ];
    assert_eq!(read(&vars).unwrap(), at(Launcher::OpenMpi, [5, 8, 1, 4]));
    assert_eq!(
        refused(read(&[
            ("OMPI_COMM_WORLD_RANK", "5"),
            ("OMPI_COMM_WORLD_SIZE", "8"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ])),
        (
            Launcher::OpenMpi,
            EnvProblem::Incomplete,
            vec![
                "OMPI_COMM_WORLD_LOCAL_RANK=\"1\"".to_owned(),
                "OMPI_COMM_WORLD_LOCAL_SIZE unset".to_owned()
            ]
        )
    );
}

#[test]
fn mvapich_mpirun_rsh() {
    let vars = [
        ("MV2_COMM_WORLD_RANK", "6"),
        ("MV2_COMM_WORLD_SIZE", "16"),
        ("MV2_COMM_WORLD_LOCAL_RANK", "2"),
        ("MV2_COMM_WORLD_LOCAL_SIZE", "8"),
        // mpirun_rsh in an sbatch script: the batch step's variables are inherited.
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "16"),
    ];
    assert_eq!(read(&vars).unwrap(), at(Launcher::Mvapich, [6, 16, 2, 8]));
    assert_eq!(
        refused(read(&[
            ("MV2_COMM_WORLD_RANK", "6"),
            ("MV2_COMM_WORLD_LOCAL_RANK", "2"),
            ("MV2_COMM_WORLD_LOCAL_SIZE", "8"),
        ]))
        .0,
        Launcher::Mvapich
    );
}

#[test]
fn mpich_and_intel_mpi_hydra() {
    let vars = [
        ("PMI_RANK", "3"),
        ("PMI_SIZE", "4"),
        ("MPI_LOCALRANKID", "1"),
        ("MPI_LOCALNRANKS", "2"),
    ];
    assert_eq!(read(&vars).unwrap(), at(Launcher::Mpich, [3, 4, 1, 2]));
    // Cray PALS and PBS Pro's mpiexec give the local figures as PMI_LOCAL_RANK and
    // PMI_LOCAL_SIZE: each process took 1/40 of the node as local rank 13.
    let pals = [
        ("PMI_RANK", "13"),
        ("PMI_SIZE", "40"),
        ("PMI_LOCAL_RANK", "1"),
        ("PMI_LOCAL_SIZE", "4"),
    ];
    assert_eq!(read(&pals).unwrap(), at(Launcher::Mpich, [13, 40, 1, 4]));
    assert!(
        read(&pals[..3]).is_err(),
        "PMI_LOCAL_RANK without PMI_LOCAL_SIZE"
    );
    // Without Hydra's local variables: one node, said.
    assert_eq!(
        read(&[("PMI_RANK", "1"), ("PMI_SIZE", "4")]).unwrap(),
        noted(
            at(Launcher::Mpich, [1, 4, 1, 4]),
            "no local rank (MPI_LOCALRANKID unset): the job's 4 processes are taken to run \
             on this node alone, local rank = rank, so this one takes 1/4 of its cores and \
             pinned memory (less than its share if the job spans nodes, or runs one process \
             per container: set MPI_LOCALRANKID and MPI_LOCALNRANKS, or the workers and \
             pinned memory)"
        )
    );
    // A size without a rank is refused, never a silent single process.
    assert_eq!(
        refused(read(&[("PMI_SIZE", "4")])),
        (
            Launcher::Mpich,
            EnvProblem::Incomplete,
            vec!["PMI_RANK unset".to_owned(), "PMI_SIZE=\"4\"".to_owned()]
        )
    );
}

/// `srun --mpi=pmi2` sets PMI_RANK and PMI_SIZE for its own tasks: Slurm, which knows
/// the tasks on each node, is read.
#[test]
fn slurm_pmi2_tasks_are_read_as_slurm() {
    let vars = [
        ("PMI_RANK", "5"),
        ("PMI_SIZE", "8"),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_PROCID", "5"),
        ("SLURM_NTASKS", "8"),
        ("SLURM_LOCALID", "1"),
        ("SLURM_NODEID", "1"),
        ("SLURM_STEP_TASKS_PER_NODE", "4(x2)"),
    ];
    assert_eq!(read(&vars).unwrap(), at(Launcher::Slurm, [5, 8, 1, 4]));
}

#[test]
fn horovod_gloo_launcher() {
    let vars = [
        ("HOROVOD_RANK", "6"),
        ("HOROVOD_SIZE", "8"),
        ("HOROVOD_LOCAL_RANK", "2"),
        ("HOROVOD_LOCAL_SIZE", "4"),
        ("HOROVOD_CROSS_RANK", "1"),
    ];
    assert_eq!(read(&vars).unwrap(), at(Launcher::Horovod, [6, 8, 2, 4]));
}

/// Regression: `mpirun` inside an sbatch script passes the batch step's
/// SLURM_PROCID=0 and SLURM_NTASKS=8 to every rank; Slurm must not win.
#[test]
fn mpirun_inside_sbatch_is_read_from_mpi_not_slurm() {
    let batch = [
        ("SLURM_JOB_ID", "77"),
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "8"),
        ("SLURM_LOCALID", "0"),
        ("SLURM_NODEID", "0"),
        ("SLURM_TASKS_PER_NODE", "4(x2)"),
    ];
    let ompi = [
        ("OMPI_COMM_WORLD_RANK", "6"),
        ("OMPI_COMM_WORLD_SIZE", "8"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "2"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
    ];
    let vars: Vec<_> = batch.iter().chain(&ompi).copied().collect();
    assert_eq!(read(&vars).unwrap(), at(Launcher::OpenMpi, [6, 8, 2, 4]));
    // Hydra's mpiexec in the same script.
    let hydra = [
        ("PMI_RANK", "6"),
        ("PMI_SIZE", "8"),
        ("MPI_LOCALRANKID", "2"),
        ("MPI_LOCALNRANKS", "4"),
    ];
    let vars: Vec<_> = batch.iter().chain(&hydra).copied().collect();
    assert_eq!(read(&vars).unwrap(), at(Launcher::Mpich, [6, 8, 2, 4]));
    // Even without its local variables: the batch step is no step to defer to.
    let vars: Vec<_> = batch.iter().chain(&hydra[..2]).copied().collect();
    assert_eq!(read(&vars).unwrap().launcher, Launcher::Mpich);
    // torchrun's variables before all.
    let torchrun = [
        ("RANK", "6"),
        ("WORLD_SIZE", "8"),
        ("LOCAL_RANK", "2"),
        ("LOCAL_WORLD_SIZE", "4"),
    ];
    let vars: Vec<_> = batch
        .iter()
        .chain(&ompi)
        .chain(&torchrun)
        .copied()
        .collect();
    assert_eq!(read(&vars).unwrap(), at(Launcher::Torchrun, [6, 8, 2, 4]));
}

#[test]
fn slurm_srun_step() {
    let vars = [
        ("SLURM_JOB_ID", "77"),
        ("SLURM_STEP_ID", "0"),
        ("SLURM_STEPID", "0"),
        ("SLURM_PROCID", "6"),
        ("SLURM_NTASKS", "8"),
        ("SLURM_STEP_NUM_TASKS", "8"),
        ("SLURM_LOCALID", "2"),
        ("SLURM_NODEID", "1"),
        ("SLURM_STEP_TASKS_PER_NODE", "4(x2)"),
    ];
    assert_eq!(read(&vars).unwrap(), at(Launcher::Slurm, [6, 8, 2, 4]));
    // The older SLURM_STEPID alone also marks a step.
    let old: Vec<_> = vars
        .iter()
        .copied()
        .filter(|(n, _)| *n != "SLURM_STEP_ID")
        .collect();
    assert_eq!(read(&old).unwrap(), at(Launcher::Slurm, [6, 8, 2, 4]));
}

/// Regression: a batch script that runs the program without `srun` sees the job's
/// SLURM_NTASKS=8 and SLURM_PROCID=0 and was taken as rank 0 of 8 (1/8 of the data,
/// though it is the only process).
#[test]
fn slurm_batch_step_without_srun_is_one_process() {
    let vars = [
        ("SLURM_JOB_ID", "77"),
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "8"),
        ("SLURM_LOCALID", "0"),
        ("SLURM_NODEID", "0"),
        ("SLURM_TASKS_PER_NODE", "8"),
    ];
    assert_eq!(
        read(&vars).unwrap(),
        noted(
            Placement::single(),
            "Slurm batch step, no srun: one process (the job's SLURM_NTASKS=\"8\" counts \
             tasks that only `srun` starts; start each with `srun` to load one slice per task)"
        )
    );
    // A caller that gives its rank and world chose them: no note.
    assert_eq!(read_given(0, 1, &vars).unwrap(), Placement::single());
    // A PMI launcher started inside the batch script (prterun, mpiexec.hydra) is the
    // one that describes this process, not the batch step around it.
    let mut prterun = vars.to_vec();
    prterun.push(("PMIX_RANK", "3"));
    assert_eq!(refused(read(&prterun)).1, EnvProblem::NoProcessCount);
    // A one-task job's batch script is one process as meant: nothing to say.
    assert_eq!(
        read(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "1")]).unwrap(),
        Placement::single()
    );
    assert_eq!(read(&[("SLURM_PROCID", "0")]).unwrap(), Placement::single());
}

/// A rank with no count anywhere (PMIx alone): refused, or with rank and world
/// given, the caller's, said.
#[test]
fn pmix_rank_alone_is_refused_or_noted() {
    assert_eq!(
        refused(read(&[("PMIX_RANK", "3")])),
        (
            Launcher::Pmix,
            EnvProblem::NoProcessCount,
            vec!["PMIX_RANK=\"3\"".to_owned()]
        )
    );
    assert_eq!(
        read_given(3, 4, &[("PMIX_RANK", "3")]).unwrap(),
        noted(
            at(Launcher::Pmix, [3, 4, 3, 4]),
            "pmix environment: a rank without a process count: give rank and world \
             explicitly (PMIX_RANK=\"3\"); rank and world are the caller's (3 of 4); no local \
             rank: the job's 4 processes are taken to run on this node alone, local rank = \
             rank, so this one takes 1/4 of its cores and pinned memory (less than its share \
             if the job spans nodes, or runs one process per container: the workers and \
             pinned memory)"
        )
    );
}

/// Non-UTF-8 values read lossily by `from_env` reach `from_vars` with U+FFFD in them:
/// not an integer, named with the value, never taken as unset.
#[test]
fn values_that_are_not_integers_are_named_with_their_value() {
    assert_eq!(
        refused(read(&[("RANK", "\u{fffd}1"), ("WORLD_SIZE", "4")])),
        (
            Launcher::Torchrun,
            EnvProblem::NotAnInteger,
            vec!["RANK=\"\u{fffd}1\"".to_owned()]
        )
    );
    assert_eq!(
        refused(read(&[
            ("SLURM_STEP_ID", "0"),
            ("SLURM_PROCID", "\u{fffd}"),
            ("SLURM_NTASKS", "4")
        ]))
        .1,
        EnvProblem::NotAnInteger
    );
    // With rank and world given, a broken RANK gives way to them; a broken local
    // figure does not.
    let p = read_given(
        1,
        4,
        &[
            ("RANK", "x"),
            ("WORLD_SIZE", "4"),
            ("LOCAL_RANK", "1"),
            ("LOCAL_WORLD_SIZE", "4"),
        ],
    )
    .unwrap();
    assert_eq!((p.rank, p.world, p.local_rank, p.local_world), (1, 4, 1, 4));
    assert!(p.note.unwrap().starts_with("torchrun environment: not a non-negative integer (RANK=\"x\"); rank and world are the caller's (1 of 4)"));
    assert_eq!(
        refused(read_given(
            1,
            4,
            &[
                ("RANK", "1"),
                ("WORLD_SIZE", "4"),
                ("LOCAL_RANK", "1"),
                ("LOCAL_WORLD_SIZE", "\u{fffd}")
            ]
        ))
        .1,
        EnvProblem::NotAnInteger
    );
}

/// Regression: with rank and world given (Python's `rank=`, `world_size=`), a
/// launcher without RANK (Lightning) used to leave every process on GPU 0 with all
/// the cores; now each keeps its LOCAL_RANK and takes its share of the node.
#[test]
fn simulated_node_lightning_with_rank_and_world_given_keeps_the_local_ranks() {
    const N: u64 = 4;
    let dir = tempfile::tempdir().unwrap();
    let (dataset, records) = sample_dataset(dir.path());
    let envs: Vec<_> = (0..N)
        .map(|r| {
            vec![
                ("LOCAL_RANK", r.to_string()),
                ("NODE_RANK", "0".to_owned()),
                ("WORLD_SIZE", N.to_string()),
                (GIVEN, format!("{r}/{N}")),
            ]
        })
        .collect();
    let probes = run_node(&dataset, 8, &envs);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let mut seen = BTreeSet::new();
    let mut workers = 0;
    for (rank, p) in probes.iter().enumerate() {
        let rank = rank as u64;
        let note = p.placement.note.as_deref().unwrap_or("");
        assert_eq!(
            (p.placement.launcher, p.placement.rank, p.placement.world),
            (Launcher::Torchrun, rank, N)
        );
        assert_eq!((p.placement.local_rank, p.placement.local_world), (rank, N));
        assert!(
            note.contains("LOCAL_RANK without RANK") && note.contains("1/4 of its cores"),
            "{note}"
        );
        assert!(p.stats_line.contains(note), "{}", p.stats_line);
        assert_eq!(p.json_note, note);
        assert_eq!(p.fake_device, Device::Cuda(rank as usize));
        assert_eq!(p.indices.len() as u64, records / N);
        seen.extend(p.indices.iter().copied());
        workers += p.workers;
    }
    assert_eq!(seen, (0..records).collect::<BTreeSet<u64>>());
    assert!(
        workers <= cores.max(N),
        "{workers} workers for {cores} cores"
    );
}

/// Regression: a value that is not UTF-8 was taken as unset (`RANK unset`, or under
/// Slurm a silent single process); now it is named, as not an integer.
#[test]
fn non_utf8_values_are_reported_not_taken_as_unset() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let (dataset, _) = sample_dataset(dir.path());
    /// Variables (values as bytes) and the `NAME="value"` the error must show.
    type Case<'a> = (&'a [(&'a str, &'a [u8])], &'a str);
    let cases: [Case; 2] = [
        (
            &[("RANK", b"\xff1"), ("WORLD_SIZE", b"4")],
            "RANK=\"\u{fffd}1\"",
        ),
        (
            &[
                ("SLURM_STEP_ID", b"0"),
                ("SLURM_PROCID", b"\xff"),
                ("SLURM_NTASKS", b"4"),
            ],
            "SLURM_PROCID=\"\u{fffd}\"",
        ),
    ];
    for (vars, named) in cases {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", "node_probe_child", "--ignored", "--nocapture"]);
        for v in LAUNCHER_VARS {
            cmd.env_remove(v);
        }
        cmd.env_remove(GIVEN)
            .env(CHILD, &dataset)
            .env(FAKE_GPUS, "1");
        for (name, value) in vars {
            cmd.env(name, OsStr::from_bytes(value));
        }
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let error = stdout
            .lines()
            .find_map(|l| l.split_once("NODE_PROBE_ERROR ").map(|(_, e)| e))
            .unwrap_or_else(|| panic!("the build did not fail:\n{stdout}"));
        assert!(
            error.contains(named) && error.contains("not a non-negative integer"),
            "{error}"
        );
    }
}

/// `torch.multiprocessing.spawn`: rank and world given, no launcher variable. Each process
/// took the whole node (8 processes ran 8 times the cores' threads, pinned 8 times half
/// the memory, all on GPU 0); the given world now shares it, local rank = rank.
#[test]
fn rank_and_world_given_without_a_launcher_share_the_node() {
    assert_eq!(
        read_given(3, 8, &[]).unwrap(),
        at(Launcher::Single, [3, 8, 3, 8])
    );
    assert_eq!(read_given(0, 1, &[]).unwrap(), Placement::single());
    // A Slurm batch step without srun is one process unless the caller says otherwise.
    let batch_step = [("SLURM_PROCID", "0"), ("SLURM_NTASKS", "4")];
    assert_eq!(read(&batch_step).unwrap().local_world, 1);
    assert_eq!(
        read_given(1, 4, &batch_step).unwrap(),
        at(Launcher::Single, [1, 4, 1, 4])
    );
    // Out of range: the sampler names it; the placement stays in range.
    assert_eq!(read_given(9, 4, &[]).unwrap().local_rank, 3);
    // Each takes its share of the node.
    let share = NodeShare::new(16, 64 << 30, 8, None);
    assert_eq!(share.cores, 2);
}
