//! `stoker convert SRC OUT`: flags → [`crate::formats::ConvertOptions`] → one call to
//! [`crate::formats::convert()`]. A progress bar goes to stderr when it is a terminal; the
//! summary (or the `--json` report) goes to stdout.

use std::io::IsTerminal;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::output::Shown;
use crate::formats::convert::Progress;
use crate::formats::{self, ConvertOptions, Encoding, Layout, ResizeMode, Source};

/// Flags of `stoker convert`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The images: an ImageFolder tree (one subdirectory per class), WebDataset tar shards
    /// (a .tar file or a folder of them, --layout webdataset), or with --list the
    /// directory the listed paths are relative to.
    pub src: PathBuf,
    /// Output directory for the shards and manifest.json (new or empty).
    pub out: PathBuf,
    /// A list file of `path,label` lines (paths relative to SRC, or absolute) instead of an
    /// ImageFolder tree.
    #[arg(long)]
    pub list: Option<PathBuf>,
    /// The class names, label i naming the i-th: a list row's label may then be a class
    /// name as well as an index, and a class folder is labelled by its name (a folder of
    /// no such class is refused). A dataset directory (its classes: give the train set to
    /// its validation list or tree, so that their labels agree even where a class has no
    /// validation image) or a text file, one name a line.
    #[arg(long, value_name = "DATASET_OR_FILE")]
    pub classes: Option<PathBuf>,
    /// How SRC is read: classes (one subdirectory per class), flat (every image under SRC
    /// as one class, label 0: unlabelled data), webdataset (tar shards: SRC a .tar file or
    /// a folder whose .tar files, by name and not in subfolders, are the shards; a sample's
    /// image member, jpg/png/webp/..., is read in place, labelled by its cls member;
    /// skipped samples are named TAR:MEMBER), or auto (webdataset when SRC is a .tar file
    /// or a folder of only .tar files, else flat when SRC has no subdirectory other than
    /// hidden ones such as .ipynb_checkpoints and __MACOSX, else classes). With --list,
    /// whose file gives the labels, it is ignored (a warning says so).
    #[arg(long, default_value = "auto", value_parser = str::parse::<Layout>)]
    pub layout: Layout,
    /// jpeg: store JPEG bytes (originals when possible); raw: store decoded pixels (needs --size).
    #[arg(long, default_value = "jpeg", value_parser = parse_encoding)]
    pub encoding: Encoding,
    /// Resize and re-encode images whose longer side exceeds this, keeping the aspect
    /// ratio (jpeg encoding only).
    #[arg(long)]
    pub max_side: Option<u32>,
    /// Quality of re-encoded JPEGs (1-100).
    #[arg(long, default_value_t = 90)]
    pub quality: u8,
    /// Fixed size WxH of raw records (raw encoding).
    #[arg(long, value_parser = parse_size)]
    pub size: Option<(u32, u32)>,
    /// How raw records fit --size: shorter-side (scale, center crop) or stretch (raw
    /// encoding only).
    #[arg(long, default_value = "shorter-side", value_parser = parse_resize)]
    pub resize: ResizeMode,
    /// Worker threads (default: all cores).
    #[arg(long, short = 'j')]
    pub jobs: Option<usize>,
    /// Target shard size, e.g. 512M, 1G, 1000000 (bytes); at least 64K (each shard costs
    /// about 140 KiB of its own). It counts the records' bytes: LMDB's pages make the file
    /// larger, by a few % for photos and up to twice for records of 2 to 4 KB (one too
    /// large to share a 4 KiB page with another takes a page of its own). `--resume`
    /// continues from the last finished shard, so smaller shards lose less of an
    /// interrupted run (of small images, a 1G shard holds about a million).
    #[arg(long, default_value = "1G", value_parser = parse_bytes)]
    pub shard_size: u64,
    /// Split by count instead of by size: each shard but the last holds ceil(inputs / N)
    /// records, so there are at most N (fewer where N does not divide the inputs, or inputs
    /// are skipped), and at least 64 KiB of records (a warning says when that makes fewer).
    /// With --part each part ends its own last shard, so the merged dataset has up to N
    /// plus the number of parts less one.
    #[arg(long, conflicts_with = "shard_size")]
    pub shards: Option<u64>,
    /// Continue an interrupted conversion in OUT, from its last finished shard (the shard
    /// being written when it stopped is converted again).
    #[arg(long)]
    pub resume: bool,
    /// Fail on the first bad input (exit 1, no manifest) instead of skipping it. What the
    /// run made in OUT is taken away, so that once the input is fixed the same command
    /// converts (a --resume of a partial conversion keeps it for --resume). A file of an
    /// image folder that is no image and is hidden or not named as one (.DS_Store,
    /// ._IMG_0001.jpg, README.txt) is skipped as without it.
    #[arg(long)]
    pub strict: bool,
    /// Reject images with more pixels than this without decoding them.
    #[arg(long, default_value_t = 100_000_000)]
    pub max_pixels: u64,
    /// Skip input files (or tar members) larger than this without reading them, e.g. 64M,
    /// 1G (uncompressed TIFF or PNG inputs may need more than the default).
    #[arg(long, default_value = "64M", value_parser = parse_bytes)]
    pub max_file_size: u64,
    /// Re-encode JPEGs the GPU hardware decoder cannot take (progressive, 4:1:1, CMYK, ...)
    /// as baseline 4:2:0 (jpeg encoding only).
    #[arg(long)]
    pub gpu_friendly: bool,
    /// Store JPEGs after a header check only, without test-decoding them (faster; corrupt
    /// image data is then found at training time instead).
    #[arg(long)]
    pub no_check: bool,
    /// Convert only part I (0-based) of --parts N: a slice of the sorted inputs, written to
    /// OUT/part-IIIII-of-NNNNN/ for `stoker merge OUT`. Defaults to the Slurm array task
    /// (SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN) or the Kubernetes Indexed Job's
    /// JOB_COMPLETION_INDEX.
    #[arg(long, value_name = "I")]
    pub part: Option<u32>,
    /// Number of parts (default: SLURM_ARRAY_TASK_COUNT, or STOKER_PARTS).
    #[arg(long, value_name = "N")]
    pub parts: Option<u32>,
    /// Store the records in a random order (from --seed) instead of the listing's, which
    /// for an ImageFolder tree is class by class: a loader reading a few shards at a time
    /// (quasi-random or sequential order) then still sees the classes mixed.
    #[arg(long)]
    pub shuffle: bool,
    /// Seed of --shuffle's order; the same seed gives the same dataset on every machine.
    #[arg(long, default_value_t = 0, requires = "shuffle")]
    pub seed: u64,
    /// Print a machine-readable JSON report on stdout.
    #[arg(long)]
    pub json: bool,
    /// Name each skipped file on stderr as it is skipped, and every one in the summary
    /// (which otherwise lists the first 20; the JSON report always lists them all).
    #[arg(long, short = 'v')]
    pub verbose: bool,
    /// No progress bar, and no progress lines where stderr is not a terminal (a job's log);
    /// warnings, errors and the summary still print.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

fn parse_encoding(s: &str) -> Result<Encoding, String> {
    match s {
        "jpeg" => Ok(Encoding::Jpeg),
        "raw" => Ok(Encoding::Raw),
        _ => Err(format!("{s:?}: want jpeg or raw")),
    }
}

fn parse_resize(s: &str) -> Result<ResizeMode, String> {
    match s {
        "shorter-side" => Ok(ResizeMode::ShorterSide),
        "stretch" => Ok(ResizeMode::Stretch),
        _ => Err(format!("{s:?}: want shorter-side or stretch")),
    }
}

fn parse_size(s: &str) -> Result<(u32, u32), String> {
    let (w, h) = s
        .split_once(['x', 'X'])
        .ok_or_else(|| format!("{s:?}: want WxH, e.g. 224x224"))?;
    let p = |v: &str| {
        v.trim()
            .parse::<u32>()
            .map_err(|_| format!("{s:?}: want WxH, e.g. 224x224"))
    };
    Ok((p(w)?, p(h)?))
}

/// A byte count with an optional unit (K, M, G, T: powers of 1024), for every size flag.
pub(super) fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => {
            let unit = t[i..].to_ascii_uppercase();
            let m: u64 = match unit.trim_end_matches("IB").trim_end_matches('B') {
                "" => 1,
                "K" => 1 << 10,
                "M" => 1 << 20,
                "G" => 1 << 30,
                "T" => 1 << 40,
                _ => return Err(format!("{s:?}: unknown unit (use K, M, G or T)")),
            };
            (&t[..i], m)
        }
        None => (t, 1),
    };
    let too_large = || format!("{s:?}: too large (at most {} bytes, 16 EiB)", u64::MAX);
    // A whole number is counted exactly: through f64 (53 bits) one just under 16 EiB was
    // rounded up to 2^64 and refused as too large.
    if let Ok(n) = num.trim().parse::<u64>() {
        return match n.checked_mul(mult) {
            Some(0) => Err(format!("{s:?}: must be positive")),
            Some(bytes) => Ok(bytes),
            None => Err(too_large()),
        };
    }
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: want a size like 512M or 1G"))?;
    if n.is_nan() || n <= 0.0 {
        return Err(format!("{s:?}: must be positive"));
    }
    // Bytes have no fractions: `1.9` was cut to 1 byte without a word.
    if mult == 1 && n.fract() != 0.0 {
        return Err(format!(
            "{s:?}: a byte count is a whole number (or give a unit: 1.5K)"
        ));
    }
    // `0.5` (bytes) truncated to 0, refused later as "shard size ... must be positive"
    // though it was.
    let bytes = n * mult as f64;
    if bytes < 1.0 {
        return Err(format!("{s:?}: less than one byte"));
    }
    // `as` would saturate: a size past 16 EiB (a typo's extra digits, or `inf`) came out
    // as u64::MAX, quietly.
    if bytes >= u64::MAX as f64 {
        return Err(too_large());
    }
    // A fraction of a unit to the nearest byte (`1.3G`), not cut.
    Ok(bytes.round() as u64)
}

/// Where the part came from when no flag asked for one: the launcher's variables, which
/// any task of an array sees, also one that converts a whole dataset of its own (an array
/// over datasets). That task got one slice of its dataset, exit 0, with nothing but the
/// part's name to say why.
fn part_source(from_flags: bool) -> String {
    let vars: Vec<String> = formats::Part::ENV_VARS
        .iter()
        .filter_map(|name| {
            let v = std::env::var(name).ok().filter(|v| !v.trim().is_empty())?;
            Some(format!("{name}={v}"))
        })
        .collect();
    if from_flags || vars.is_empty() {
        return String::new();
    }
    format!(
        ", as {} say (a Slurm array task or a Kubernetes Indexed Job): one slice per task, for `stoker merge`; to convert every input in this task, unset them",
        vars.join(", ")
    )
}

/// Which part is converted, and where it came from, when there is one.
fn part_note(args: &Args, part: Option<formats::Part>) -> Option<String> {
    let p = part?;
    Some(format!(
        "converting part {} of {} (0-based) into {}{}",
        p.index,
        p.count,
        args.out.join(p.dir_name()).shown(),
        part_source(args.part.or(args.parts).is_some())
    ))
}

/// The progress of a conversion, preceded by a note said once the conversion starts
/// writing: a note said before [`formats::convert()`] was called came before its refusals
/// (an output root already merged, a part locked), as if the part had begun.
struct Announced<'a> {
    note: Option<String>,
    said: AtomicBool,
    inner: &'a dyn Progress,
}

impl Announced<'_> {
    /// Says the note, the first time only.
    fn say(&self) {
        if let Some(note) = &self.note {
            if !self.said.swap(true, Ordering::Relaxed) {
                super::output::note(format_args!("{note}"));
            }
        }
    }
}

impl Progress for Announced<'_> {
    fn start(&self, inputs: u64) {
        self.say();
        self.inner.start(inputs);
    }
    fn advance(&self, inputs: u64, bytes: u64) {
        self.inner.advance(inputs, bytes);
    }
    fn skipped(&self, path: &Path, reason: &str) {
        self.inner.skipped(path, reason);
    }
    fn warnings(&self, warnings: &[String]) {
        self.inner.warnings(warnings);
    }
    fn finish(&self) {
        self.inner.finish();
    }
    fn cancelled(&self) -> bool {
        self.inner.cancelled()
    }
}

/// Runs `stoker convert`.
pub fn run(args: Args) -> anyhow::Result<u8> {
    let mut out = super::output::stdout();
    let opts = options(&args)?;
    // On stderr: a bar on a terminal, else (kubectl logs, a Slurm job's output file) a
    // line a minute, which a bar would not draw there; neither with --quiet. Skipped inputs
    // are listed with --verbose.
    let progress = if args.quiet {
        formats::convert::TerminalBar::new(false, args.verbose)
    } else if std::io::stderr().is_terminal() {
        formats::convert::TerminalBar::new(true, args.verbose)
    } else {
        formats::convert::TerminalBar::log_lines(
            Duration::from_secs(60),
            args.verbose,
            Box::new(std::io::stderr()),
        )
    };
    let progress = Announced {
        note: part_note(&args, opts.part),
        said: AtomicBool::new(false),
        inner: &progress,
    };
    let report = formats::convert(&opts, &progress)?;
    // A part finished by an earlier run (`--resume`) never starts.
    progress.say();
    if report.flat && args.layout == Layout::Auto {
        // Said once, so that a user who expected class sub-folders sees that every
        // file became one unlabelled class.
        super::output::note(format_args!(
            "{} has no class sub-folders: converted as one class of unlabelled images (label 0)",
            args.src.shown()
        ));
    }
    if report.webdataset && args.layout == Layout::Auto {
        let what = if args.src.is_dir() {
            "holds only .tar files"
        } else {
            "is a .tar file"
        };
        super::output::note(format_args!(
            "{} {what}: read as WebDataset tar shards (--layout webdataset)",
            args.src.shown()
        ));
    }
    // On stderr in every mode (the JSON report holds them too): each may mean the
    // source was not read as the user meant, though nothing failed.
    for w in &report.warnings {
        super::output::note(format_args!("warning: {}", super::output::shown(w)));
    }

    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    } else if report.already_done {
        writeln!(
            out,
            "already converted: {} holds this conversion ({} records); nothing to do",
            report.out.shown(),
            report.written
        )?;
    } else {
        print_summary(&mut out, &args, &report)?;
    }
    Ok(super::status::SUCCESS)
}

/// The flags as [`ConvertOptions`].
fn options(args: &Args) -> anyhow::Result<ConvertOptions> {
    let source = match &args.list {
        Some(list) => Source::List {
            root: args.src.clone(),
            list: list.clone(),
        },
        None => Source::ImageFolder(args.src.clone()),
    };
    let mut opts = ConvertOptions::new(source, &args.out);
    if let Some(path) = &args.classes {
        opts.classes = Some(formats::convert::class_names(path)?);
    }
    opts.encoding = args.encoding;
    opts.max_side = args.max_side;
    opts.quality = args.quality;
    opts.raw_size = args.size;
    opts.resize = args.resize;
    opts.jobs = args.jobs;
    opts.shard_bytes = args.shard_size;
    opts.shards = args.shards;
    opts.resume = args.resume;
    opts.strict = args.strict;
    opts.max_pixels = args.max_pixels;
    opts.max_file_size = args.max_file_size;
    opts.gpu_friendly = args.gpu_friendly;
    opts.check_decode = !args.no_check;
    opts.shuffle = args.shuffle.then_some(args.seed);
    opts.layout = args.layout;
    opts.part = formats::Part::from_env(args.part, args.parts)?;
    if let Ok(n) = std::env::var("STOKER_TEST_FAIL_AFTER") {
        // Test hook: simulate a conversion killed after N records.
        opts.fail_after = n.parse().ok();
    }
    if let Ok(n) = std::env::var("STOKER_TEST_DECODE_RENDEZVOUS") {
        // Test hook: N decodes past their memory checks before any allocates.
        opts.decode_rendezvous = n.parse().ok();
    }
    Ok(opts)
}

/// The human summary of a conversion that ran: counts, rate, skipped and
/// ignored inputs, the audit, and where the output is.
fn print_summary(
    out: &mut impl Write,
    args: &Args,
    report: &formats::ConvertReport,
) -> std::io::Result<()> {
    let secs = report.seconds.max(1e-9);
    writeln!(out,
        "converted {} of {} inputs into {} shard(s), {:.1} MB, in {:.2} s ({:.0} img/s, {:.1} MB/s read)",
        report.written,
        report.inputs,
        report.shards,
        report.bytes as f64 / 1e6,
        report.seconds,
        report.written as f64 / secs,
        report.input_bytes as f64 / 1e6 / secs,
    )?;
    writeln!(
        out,
        "  stored as-is: {}, re-encoded/decoded: {}{}",
        report.stored,
        report.transcoded,
        if report.resumed > 0 {
            format!(
                ", carried over from the interrupted run: {}",
                report.resumed
            )
        } else {
            String::new()
        }
    )?;
    if !report.skipped.is_empty() {
        writeln!(out, "skipped {} input(s):", report.skipped.len())?;
        let show = if args.verbose { usize::MAX } else { 20 };
        for s in report.skipped.iter().take(show) {
            let (path, reason) = (super::output::shown_path(&s.path), &s.reason);
            writeln!(out, "  {path}: {}", super::output::shown(reason))?;
        }
        if report.skipped.len() > show {
            writeln!(
                out,
                "  ... and {} more (use --verbose or --json)",
                report.skipped.len() - show
            )?;
        }
    }
    if !report.ignored.is_empty() && report.webdataset {
        writeln!(
            out,
            "ignored {} entries of {} that are not .tar shards (subfolders are not read), e.g. {}",
            report.ignored.len(),
            args.src.shown(),
            report.ignored[0].shown()
        )?;
    } else if !report.ignored.is_empty() {
        writeln!(
            out,
            "ignored {} file(s) directly under {} (not in a class folder; --layout flat takes every file as one class), e.g. {}",
            report.ignored.len(),
            args.src.shown(),
            report.ignored[0].shown()
        )?;
    }
    for line in report.audit.summary_lines() {
        writeln!(out, "{line}")?;
    }
    writeln!(out, "output: {}", report.out.shown())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_bytes("1G"), Ok(1 << 30));
        assert_eq!(parse_bytes("512M"), Ok(512 << 20));
        assert_eq!(parse_bytes("64KiB"), Ok(64 << 10));
        assert_eq!(parse_bytes("1000"), Ok(1000));
        assert!(parse_bytes("0").is_err());
        assert!(parse_bytes("0.5").is_err());
        assert_eq!(parse_bytes("0.5K"), Ok(512));
        // No fraction of a byte: refused without a unit, rounded with one.
        assert!(parse_bytes("1.9").unwrap_err().contains("whole number"));
        assert!(parse_bytes("65536.9").is_err());
        assert_eq!(parse_bytes("1.3G"), Ok(1_395_864_371));
        assert!(parse_bytes("1Q").is_err());
        for huge in ["99999999999999999999999", "inf", "16384P", "17179869184G"] {
            let err = parse_bytes(huge).unwrap_err();
            assert!(
                err.contains("too large") || err.contains("unknown unit"),
                "{huge}: {err}"
            );
        }
        assert_eq!(parse_bytes("1024T"), Ok(1 << 50));
        // Whole numbers are exact up to the last byte (f64 rounded these up to 2^64).
        assert_eq!(parse_bytes("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(
            parse_bytes("18446744073709551000"),
            Ok(18_446_744_073_709_551_000)
        );
        assert_eq!(parse_bytes("16777215T"), Ok(16_777_215 << 40));
        assert!(parse_bytes("16777216T").unwrap_err().contains("too large"));
        assert!(parse_bytes("0K").unwrap_err().contains("positive"));
        assert_eq!(parse_size("224x160"), Ok((224, 160)));
        assert!(parse_size("224").is_err());
        assert_eq!(parse_bytes("64M"), Ok(formats::DEFAULT_MAX_FILE_SIZE));
    }
}
