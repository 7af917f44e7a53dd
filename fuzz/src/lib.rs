//! What the format targets and `seeds` share: the small datasets whose shard and manifest
//! bytes the targets damage, the manifest a damaged shard is read under, and a scratch
//! directory per process.

use std::path::{Path, PathBuf};

use stoker_formats::convert::JOURNAL_FILE;
use stoker_formats::{
    convert, shard_file_name, ConvertOptions, DatasetWriter, Encoding, FormatError, NoProgress,
    Provenance, RecordMeta, Source, WriterOptions, MANIFEST_FILE,
};

/// Records a shard input may claim: its first two bytes (little-endian) are the count the
/// manifest declares, so the fuzzer can make it disagree with the shard.
pub const COUNT_PREFIX: usize = 2;

/// A directory of this process's own under /dev/shm (or the temporary directory), made
/// empty: every input is written there, so runs do not wear a disk.
pub fn scratch(target: &str) -> PathBuf {
    let dir = scratch_base().join(format!("stoker-fuzz-{target}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn scratch_base() -> PathBuf {
    std::env::var_os("STOKER_FUZZ_SCRATCH")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let shm = Path::new("/dev/shm");
            if shm.is_dir() {
                shm.to_path_buf()
            } else {
                std::env::temp_dir()
            }
        })
}

/// Payload `i` of `len` bytes: different per record, the same on every run, so seeds and
/// the template a target writes for itself hash alike.
fn payload(i: u64, len: usize) -> Vec<u8> {
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Writes a dataset of JPEG-encoded records (payloads are not decoded by what the targets
/// run) with the payload sizes `sizes`, `per_shard` records a shard, into `dir`.
pub fn write_dataset(dir: &Path, sizes: &[usize], per_shard: u64) {
    let mut w = DatasetWriter::create(
        dir,
        WriterOptions {
            records_per_shard: Some(per_shard),
            ..WriterOptions::default()
        },
    )
    .unwrap();
    for (i, &len) in sizes.iter().enumerate() {
        let meta = RecordMeta {
            encoding: Encoding::Jpeg,
            height: 1 + i as u32 % 7,
            width: 1 + i as u32 % 5,
            channels: 3,
            label: i as u32 % 3,
        };
        w.push(meta, &payload(i as u64, len)).unwrap();
    }
    w.finish(
        vec!["a".into(), "b".into(), "c".into()],
        Provenance::stoker("fuzz"),
    )
    .unwrap();
}

/// The shards the `shard` target starts from, by name: a few small records on one leaf
/// page, enough for a branch page above leaves, values on overflow pages, and a mix.
pub fn shard_seeds() -> Vec<(&'static str, Vec<usize>)> {
    vec![
        ("leaf", vec![10; 5]),
        ("branch", vec![12; 400]),
        ("overflow", vec![3000; 4]),
        (
            "mixed",
            (0..24)
                .map(|i| if i % 3 == 0 { 2500 } else { 40 })
                .collect(),
        ),
        ("one", vec![0]),
    ]
}

/// The dataset the `manifest` target reads under its inputs: three shards of mixed records.
pub fn manifest_template(dir: &Path) {
    let sizes: Vec<usize> = (0..60)
        .map(|i| if i % 7 == 0 { 2200 } else { 30 })
        .collect();
    write_dataset(dir, &sizes, 25);
}

/// The manifest of a one-shard dataset written by [`write_dataset`] (`template`), rewritten
/// to declare `count` records and the size and digest of `shard`: the manifest a shard's
/// bytes are read under, so that `verify` reaches every record check.
pub fn manifest_for(template: &serde_json::Value, count: u64, shard: &[u8]) -> String {
    let mut m = template.clone();
    m["samples"] = count.into();
    m["bytes"] = (shard.len() as u64).into();
    let s = &mut m["shards"][0];
    s["file"] = shard_file_name(0).into();
    s["count"] = count.into();
    s["bytes"] = (shard.len() as u64).into();
    s["xxh3"] = format!("{:016x}", xxhash_rust::xxh3::xxh3_64(shard)).into();
    m.to_string()
}

/// Photos of 18 to 22 KB, built in so that the journal's source tree is the same wherever
/// the target runs: eight of them make three shards of the smallest size (64 KiB).
const PHOTOS: [&[u8]; 4] = [
    include_bytes!("../../testdata/conformance/core/go__video-001.jpeg"),
    include_bytes!("../../testdata/conformance/core/go__video-001.progressive.jpeg"),
    include_bytes!("../../testdata/conformance/core/go__video-001.221212.jpeg"),
    include_bytes!("../../testdata/conformance/core/ljtregen__testout_420_q100_ifast_prog.jpg"),
];

/// A conversion killed part way, for the `journal` target: the options that resume it, the
/// files its output directory held when it was killed, and the shards of the same
/// conversion run without a stop (the manifest's `shards`).
pub struct Killed {
    pub options: ConvertOptions,
    pub files: Vec<(String, Vec<u8>)>,
    pub clean_shards: serde_json::Value,
}

/// The source tree lives at one path shared by every process (the journal's fingerprint
/// hashes its paths, so the seeds `seeds` writes must resume there too); it is written
/// only if missing, with fixed contents, so processes agree on it.
pub fn killed_conversion(work: &Path) -> Killed {
    let src = scratch_base().join("stoker-fuzz-journal-source");
    if !src.join("b").join("7.jpg").is_file() {
        for (i, photo) in PHOTOS.iter().cycle().take(8).enumerate() {
            let class = src.join(if i < 4 { "a" } else { "b" });
            std::fs::create_dir_all(&class).unwrap();
            let tmp = class.join(format!(".{i}.{}", std::process::id()));
            std::fs::write(&tmp, photo).unwrap();
            std::fs::rename(&tmp, class.join(format!("{i}.jpg"))).unwrap();
        }
    }
    let options = |out: PathBuf| {
        let mut o = ConvertOptions::new(Source::ImageFolder(src.clone()), out);
        o.shard_bytes = 64 << 10;
        o.check_decode = false;
        o.jobs = Some(1);
        o
    };
    let clean = work.join("clean");
    let _ = std::fs::remove_dir_all(&clean);
    convert(&options(clean.clone()), &NoProgress).unwrap();
    let text = std::fs::read_to_string(clean.join(MANIFEST_FILE)).unwrap();
    let manifest: serde_json::Value = serde_json::from_str(&text).unwrap();

    let killed = work.join("killed");
    let _ = std::fs::remove_dir_all(&killed);
    let mut o = options(killed.clone());
    o.fail_after = Some(5);
    let e = convert(&o, &NoProgress).unwrap_err();
    assert!(matches!(e, FormatError::Injected { .. }), "{e}");
    assert!(killed.join(JOURNAL_FILE).is_file());
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&killed).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            let name = entry.file_name().into_string().unwrap();
            files.push((name, std::fs::read(entry.path()).unwrap()));
        }
    }
    let mut options = options(PathBuf::new());
    options.resume = true;
    Killed {
        options,
        files,
        clean_shards: manifest["shards"].clone(),
    }
}
