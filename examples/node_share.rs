//! N loader processes sharing one node, started the way `torchrun --nproc-per-node N`
//! starts them (`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`), against one
//! process, on the same data: does the node load as fast with N processes, each on
//! its slice and its default share of the cores, as with one?
//!
//! Each process is this program re-run with `--child`: it builds a loader with
//! `distributed_from_env()` and default workers (its node share), loads one warm-up
//! epoch, says it is ready, waits until every process is, then loads `--epochs`
//! timed epochs and reports its images, start and end times, fed ratio and decode
//! counters as one JSON line. The aggregate rate of a run is all processes' images
//! over the span from the first start to the last end.
//!
//! Rounds alternate the order of the process counts (1, 8, then 8, 1, ...) and the
//! medians over rounds are compared: `ratio` is the median aggregate img/s of N
//! processes over that of one.
//!
//! ```text
//! # CPU (docs/BENCHMARKS.md): the in-repo sample photos, 64 copies each (960 images)
//! cargo run --release --example node_share -- --images examples/data/sample --repeat 64 \
//!     --procs 1,8 --rounds 3 --device cpu
//! # GPU (scripts/device-check.d/40-node-share.sh): 1, 2 and 4 processes on one GPU
//! node_share --images $DATA/bench --repeat 16 --procs 1,2,4 --device auto --batch 256 \
//!     --consumer-ms 20 --tsv $OUT/table.tsv
//! ```
//!
//! `--workers N` gives every process N workers instead of its node share (e.g. all
//! the cores each, to see what the share saves).
//!
//! Rows (stdout, and `--tsv FILE` as `name<TAB>value<TAB>unit<TAB>note`):
//! `node_share<TAG>_<N>p_img_per_s` (median aggregate), `_decode_img_per_s`
//! (aggregate decode-stage images per second over the same span), `_fed_min` /
//! `_fed_mean` (per-process fed ratio), `_ratio_vs_1p`.
//!
//! A measurement tool of this repository (the device check runs it), not a template to copy:
//! beside `stoker` it uses clap, serde, serde_json and the rows module
//! `examples/common/results.rs`.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::Parser;
use stoker::formats::{convert, ConvertOptions, Dataset, NoProgress, Source};
use stoker::loader::transform::{IMAGENET_MEAN, IMAGENET_STD};
use stoker::loader::{Device, Loader, Output, Shuffle, Stage, Transform};

use stoker::exit;
#[path = "common/results.rs"]
mod results;

#[derive(Parser, Debug)]
struct Args {
    /// JPEGs: an ImageFolder tree (a class per folder) or a flat folder (one class).
    #[arg(long, default_value = "examples/data/sample")]
    images: PathBuf,
    /// Copies of each image in the dataset.
    #[arg(long, default_value_t = 64)]
    repeat: usize,
    /// Process counts to compare, e.g. `1,8`; the first should be 1 (the reference).
    #[arg(long, default_value = "1,8", value_delimiter = ',')]
    procs: Vec<u64>,
    /// Rounds over all process counts (their order alternates round by round).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Timed epochs per process (after one warm-up epoch).
    #[arg(long, default_value_t = 2)]
    epochs: u64,
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Output side of RandomResizedCrop (+ flip + normalize, f32 NCHW).
    #[arg(long, default_value_t = 224)]
    size: u32,
    /// `cpu`, `auto` (the local rank's GPU, else the CPU) or `cuda:N`.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// Worker threads of every process (0: the loader's default, the node share).
    #[arg(long, default_value_t = 0)]
    workers: usize,
    /// Stand-in training step per batch, milliseconds of sleep (0: none; at most a day).
    #[arg(long, default_value_t = 0.0, value_parser = parse_step_ms)]
    consumer_ms: f64,
    /// Appended to every row name.
    #[arg(long, default_value = "")]
    tag: String,
    #[arg(long)]
    tsv: Option<PathBuf>,
    /// Internal: run as one process of a node on this dataset.
    #[arg(long, hide = true)]
    child: Option<PathBuf>,
}

/// What one process reports.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Report {
    rank: u64,
    workers: u64,
    device: String,
    images: u64,
    start_ns: u128,
    end_ns: u128,
    fed_ratio: f64,
    decode_items: u64,
}

/// `--consumer-ms`: a step from zero to a day, refused before any process starts (a
/// negative, NaN or huge value is no [`Duration`]).
fn parse_step_ms(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (0.0..=86_400_000.0).contains(&v) => Ok(v),
        _ => Err(format!("{s}: want milliseconds from 0 to 86400000 (a day)")),
    }
}

fn device(s: &str) -> Result<Device, String> {
    match s {
        "cpu" => Ok(Device::Cpu),
        "auto" => Ok(Device::Auto),
        _ => s
            .strip_prefix("cuda:")
            .and_then(|n| n.parse().ok())
            .map(Device::Cuda)
            .ok_or_else(|| format!("--device {s}: expected cpu, auto or cuda:N")),
    }
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// One process of the node.
fn child(args: &Args, dataset: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let mut builder = Loader::builder(Dataset::open(dataset)?);
    if args.workers > 0 {
        builder = builder.workers(args.workers);
    }
    let loader = builder
        .batch_size(args.batch)
        .shuffle(Shuffle::Global { seed: 0 })
        .transform(
            Transform::random_resized_crop(args.size)
                .hflip(0.5)
                .normalize(IMAGENET_MEAN, IMAGENET_STD),
        )
        .output(Output::F32Nchw)
        .device(device(&args.device)?)
        .distributed_from_env()
        .build()?;
    let step = Duration::try_from_secs_f64(args.consumer_ms / 1000.0)
        .map_err(|e| format!("--consumer-ms {}: {e}", args.consumer_ms))?;
    for batch in loader.epoch(0) {
        batch?;
    }
    // The next epoch started early; it would run before the others are ready.
    loader.cancel_prefetch();
    loader.reset_stats();
    writeln!(std::io::stdout(), "READY")?;
    std::io::stdout().flush()?;
    let mut go = String::new();
    std::io::stdin().read_line(&mut go)?;
    let start_ns = now_ns();
    for epoch in 1..=args.epochs {
        for batch in loader.epoch(epoch) {
            batch?;
            if !step.is_zero() {
                std::thread::sleep(step);
            }
        }
    }
    let end_ns = now_ns();
    loader.cancel_prefetch();
    let stats = loader.stats();
    let _ = writeln!(std::io::stderr(), "{stats}");
    let report = Report {
        rank: stats.slice.map_or(0, |[rank, _]| rank),
        workers: stats
            .stage(Stage::Read)
            .map_or(stats.shared_workers, |s| s.threads),
        device: stats.device.clone(),
        images: stats.images,
        start_ns,
        end_ns,
        fed_ratio: stats.fed_ratio,
        // Not the next epoch's early start, decoded after the last batch.
        decode_items: stats
            .stage(Stage::Decode)
            .map_or(0, |s| s.items.min(stats.images)),
    };
    writeln!(
        std::io::stdout(),
        "RESULT {}",
        serde_json::to_string(&report)?
    )?;
    Ok(())
}

/// The JPEGs under `root` as `relative/path,label` lines (label: the index of the
/// first-level folder, 0 for files directly in `root`), each `repeat` times.
fn list(root: &Path, repeat: usize) -> Result<String, Box<dyn std::error::Error>> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.is_dir() {
                walk(&path, out)?;
            } else if path
                .extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| e.eq_ignore_ascii_case("jpg") || e.eq_ignore_ascii_case("jpeg"))
            {
                out.push(path);
            }
        }
        Ok(())
    }
    let mut files = Vec::new();
    walk(root, &mut files)?;
    files.sort();
    let mut classes: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let rel = f.strip_prefix(root).ok()?;
            (rel.components().count() > 1).then(|| {
                rel.components()
                    .next()
                    .unwrap()
                    .as_os_str()
                    .to_string_lossy()
                    .into_owned()
            })
        })
        .collect();
    classes.dedup();
    let mut text = String::new();
    for f in &files {
        let rel = f.strip_prefix(root)?;
        let label = match rel.components().count() {
            1 => 0,
            _ => {
                let class = rel
                    .components()
                    .next()
                    .unwrap()
                    .as_os_str()
                    .to_string_lossy();
                classes.iter().position(|c| *c == class).unwrap_or(0)
            }
        };
        for _ in 0..repeat {
            text.push_str(&format!("{},{label}\n", rel.display()));
        }
    }
    if files.is_empty() {
        return Err(format!("no JPEG under {}", root.display()).into());
    }
    Ok(text)
}

/// One line of a child's stdout, or its end.
enum Line {
    Text(usize, String),
    Closed(usize),
}

/// Runs `n` processes of the node at once and returns their reports.
fn run_node(
    args: &Args,
    dataset: &Path,
    n: u64,
) -> Result<Vec<Report>, Box<dyn std::error::Error>> {
    let exe = std::env::current_exe()?;
    let (tx, rx) = mpsc::channel();
    let mut children: Vec<Child> = Vec::new();
    let mut errs: Vec<std::thread::JoinHandle<Vec<u8>>> = Vec::new();
    for rank in 0..n {
        let mut cmd = Command::new(&exe);
        cmd.arg("--child")
            .arg(dataset)
            .args(["--batch", &args.batch.to_string()])
            .args(["--size", &args.size.to_string()])
            .args(["--epochs", &args.epochs.to_string()])
            .args(["--device", &args.device])
            .args(["--workers", &args.workers.to_string()])
            .args(["--consumer-ms", &args.consumer_ms.to_string()]);
        for v in [
            "SLURM_PROCID",
            "SLURM_NTASKS",
            "SLURM_LOCALID",
            "SLURM_STEP_NUM_TASKS",
        ] {
            cmd.env_remove(v);
        }
        let mut child = cmd
            .env("RANK", rank.to_string())
            .env("WORLD_SIZE", n.to_string())
            .env("LOCAL_RANK", rank.to_string())
            .env("LOCAL_WORLD_SIZE", n.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().expect("piped");
        // Read as it comes: a child whose logs filled the pipe would block on
        // its next write and never report.
        let mut stderr = child.stderr.take().expect("piped");
        errs.push(std::thread::spawn(move || {
            let mut all = Vec::new();
            let _ = std::io::Read::read_to_end(&mut stderr, &mut all);
            all
        }));
        let tx = tx.clone();
        let i = rank as usize;
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(Line::Text(i, line));
            }
            let _ = tx.send(Line::Closed(i));
        });
        children.push(child);
    }
    drop(tx);
    let result = collect(&mut children, &rx, n as usize);
    for (i, (mut c, err)) in children.into_iter().zip(errs).enumerate() {
        if result.is_err() {
            let _ = c.kill();
        }
        let status = c.wait()?;
        let stderr = err.join().unwrap_or_default();
        if !status.success() || (i == 0 && std::env::var_os("NODE_SHARE_VERBOSE").is_some()) {
            let _ = writeln!(
                std::io::stderr(),
                "process {i} ({status}):\n{}",
                String::from_utf8_lossy(&stderr)
            );
        }
    }
    result
}

/// Waits for every child's READY, releases them together, and reads their RESULT lines.
fn collect(
    children: &mut [Child],
    rx: &mpsc::Receiver<Line>,
    n: usize,
) -> Result<Vec<Report>, Box<dyn std::error::Error>> {
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut ready = 0;
    let mut reports: Vec<Option<Report>> = (0..n).map(|_| None).collect();
    let mut released = false;
    while reports.iter().any(Option::is_none) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(Line::Text(_, l)) if l == "READY" => {
                ready += 1;
                if ready == n && !released {
                    released = true;
                    for c in children.iter_mut() {
                        let stdin = c.stdin.as_mut().expect("piped");
                        stdin.write_all(b"go\n")?;
                        stdin.flush()?;
                    }
                }
            }
            Ok(Line::Text(i, l)) => {
                if let Some(json) = l.strip_prefix("RESULT ") {
                    reports[i] = Some(serde_json::from_str(json)?);
                }
            }
            Ok(Line::Closed(i)) if reports[i].is_none() => {
                return Err(format!("process {i} of {n} ended without a result").into())
            }
            Ok(Line::Closed(_)) => {}
            Err(_) => return Err(format!("{n} processes: no result within 300 s").into()),
        }
    }
    Ok(reports
        .into_iter()
        .map(|r| r.expect("all present"))
        .collect())
}

/// Aggregate figures of one run.
struct Run {
    img_per_s: f64,
    decode_per_s: f64,
    fed_min: f64,
    fed_mean: f64,
    workers: u64,
}

fn summarize(reports: &[Report]) -> Run {
    let start = reports.iter().map(|r| r.start_ns).min().unwrap_or(0);
    let end = reports.iter().map(|r| r.end_ns).max().unwrap_or(0);
    let span = (end.saturating_sub(start)) as f64 / 1e9;
    let images: u64 = reports.iter().map(|r| r.images).sum();
    let decoded: u64 = reports.iter().map(|r| r.decode_items).sum();
    let fed: Vec<f64> = reports.iter().map(|r| r.fed_ratio).collect();
    Run {
        img_per_s: images as f64 / span.max(1e-9),
        decode_per_s: decoded as f64 / span.max(1e-9),
        fed_min: fed.iter().copied().fold(f64::INFINITY, f64::min),
        fed_mean: fed.iter().sum::<f64>() / fed.len().max(1) as f64,
        workers: reports.iter().map(|r| r.workers).sum(),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn main() -> std::process::ExitCode {
    match run(&Args::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => exit::failure("node_share", e.as_ref(), 1),
    }
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    if let Some(dataset) = &args.child {
        return child(args, dataset);
    }
    device(&args.device)?;
    if args.procs.is_empty() || args.procs.contains(&0) {
        return Err("--procs: counts of at least 1".into());
    }
    let tmp = tempfile::tempdir()?;
    let (out, records) = prepare(args, tmp.path())?;
    let runs = rounds(args, &out)?;
    write_rows(args, records, &runs)?;
    Ok(())
}

/// Converts `--images` (`--repeat` copies each) into a dataset under `tmp` and
/// prints what the runs will load; returns the dataset and its record count.
fn prepare(args: &Args, tmp: &Path) -> Result<(PathBuf, u64), Box<dyn std::error::Error>> {
    let list_file = tmp.join("list.csv");
    std::fs::write(&list_file, list(&args.images, args.repeat)?)?;
    let out = tmp.join("dataset");
    let source = Source::List {
        root: args.images.clone(),
        list: list_file,
    };
    convert(&ConvertOptions::new(source, &out), &NoProgress)?;
    let records = Dataset::open(&out)?.len();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    writeln!(std::io::stdout(),
        "node_share: {records} records from {} (x{}), {cores} cores, device {}, batch {}, size {}, {} timed epochs, step {} ms",
        args.images.display(),
        args.repeat,
        args.device,
        args.batch,
        args.size,
        args.epochs,
        args.consumer_ms
    )?;
    Ok((out, records))
}

/// Every round over the process counts, their order alternating round by round;
/// one (count, aggregate) per run, in run order.
fn rounds(args: &Args, out: &Path) -> Result<Vec<(u64, Run)>, Box<dyn std::error::Error>> {
    let mut runs: Vec<(u64, Run)> = Vec::new();
    for round in 0..args.rounds {
        let mut order = args.procs.clone();
        if round % 2 == 1 {
            order.reverse();
        }
        for &n in &order {
            let reports = run_node(args, out, n)?;
            let run = summarize(&reports);
            writeln!(std::io::stdout(),
                "round {round}: {n} process(es), {} workers in all, devices [{}]: {:.0} img/s aggregate, decode {:.0} img/s, fed min {:.3} mean {:.3}",
                run.workers,
                reports.iter().map(|r| r.device.split(' ').next().unwrap_or("")).collect::<Vec<_>>().join(","),
                run.img_per_s,
                run.decode_per_s,
                run.fed_min,
                run.fed_mean
            )?;
            runs.push((n, run));
        }
    }
    Ok(runs)
}

/// The median rows per process count, and each count's ratio to one process.
fn write_rows(
    args: &Args,
    records: u64,
    runs: &[(u64, Run)],
) -> Result<(), Box<dyn std::error::Error>> {
    let mut table = results::Table::open(args.tsv.as_deref())?;
    let of = |n: u64, f: fn(&Run) -> f64| -> f64 {
        median(
            runs.iter()
                .filter(|(k, _)| *k == n)
                .map(|(_, r)| f(r))
                .collect(),
        )
    };
    let reference = of(1, |r| r.img_per_s);
    let note = format!(
        "{records} records, device {}, batch {}, workers {}, {} rounds, median",
        args.device,
        args.batch,
        if args.workers == 0 {
            "node share".to_string()
        } else {
            args.workers.to_string()
        },
        args.rounds
    );
    for &n in &args.procs {
        let name = format!("node_share{}_{n}p", args.tag);
        table.row(
            &format!("{name}_img_per_s"),
            of(n, |r| r.img_per_s),
            "img/s",
            &note,
        )?;
        table.row(
            &format!("{name}_decode_img_per_s"),
            of(n, |r| r.decode_per_s),
            "img/s",
            &note,
        )?;
        table.row(
            &format!("{name}_fed_min"),
            of(n, |r| r.fed_min),
            "ratio",
            "lowest per-process fed ratio",
        )?;
        table.row(
            &format!("{name}_fed_mean"),
            of(n, |r| r.fed_mean),
            "ratio",
            "mean per-process fed ratio",
        )?;
        if n != 1 && reference.is_finite() {
            // The ratio per round (each run against the 1-process run of its round), then the median.
            let ratios: Vec<f64> = (0..args.rounds)
                .filter_map(|round| {
                    let in_round = &runs[round * args.procs.len()..(round + 1) * args.procs.len()];
                    let one = in_round.iter().find(|(k, _)| *k == 1)?.1.img_per_s;
                    let this = in_round.iter().find(|(k, _)| *k == n)?.1.img_per_s;
                    Some(this / one)
                })
                .collect();
            let per_round = ratios
                .iter()
                .map(|r| format!("{r:.3}"))
                .collect::<Vec<_>>()
                .join(" ");
            table.row(
                &format!("{name}_ratio_vs_1p"),
                median(ratios),
                "x",
                &format!("aggregate img/s of {n} processes / 1 process, per round: {per_round}"),
            )?;
        }
    }
    Ok(())
}
