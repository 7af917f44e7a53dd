//! Regression tests: tiny shards were made without a word. `--shard-size 1000` (meant as
//! MB) turned 1.3 MB of images into 295 MB of shards, and `--shards 10000` on 100k small
//! images took 100 times as long as one shard: every shard costs about 140 KiB and four
//! fsyncs whatever it holds. A shard size under the floor is refused; `--shards N` holds
//! each shard until it reaches the floor, and says so.

use stoker_formats::convert::MIN_SHARD_BYTES;
use stoker_formats::{convert, ConvertOptions, Dataset, FormatError, NoProgress, Source};

const SAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/data/sample");

fn options(out: &std::path::Path) -> ConvertOptions {
    let mut o = ConvertOptions::new(Source::ImageFolder(SAMPLE.into()), out);
    o.check_decode = false;
    o
}

#[test]
fn shard_size_under_the_floor_is_refused_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = options(&dir.path().join("out"));
    o.shard_bytes = 1000;
    let e = convert(&o, &NoProgress).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, FormatError::InvalidOptions(_)), "{msg}");
    assert!(msg.contains("1000 bytes") && msg.contains("65536"), "{msg}");
    assert!(msg.contains("in bytes"), "{msg}");
    assert!(!o.out.exists(), "a refused conversion made its output");

    o.shard_bytes = MIN_SHARD_BYTES;
    let r = convert(&o, &NoProgress).unwrap();
    assert_eq!(r.written, 15);
    assert!(r.shards > 1, "{r:?}");
}

#[test]
fn shards_that_would_be_under_the_floor_take_more_records_and_the_report_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = options(&dir.path().join("out"));
    // One photo (about 31 KB) per shard was asked.
    o.shards = Some(15);
    let r = convert(&o, &NoProgress).unwrap();
    assert_eq!(r.written, 15);
    assert!(r.shards < 15, "{r:?}");
    let note = r
        .warnings
        .iter()
        .find(|w| w.contains("15 shards (--shards"));
    let note = note.unwrap_or_else(|| panic!("no note in {:?}", r.warnings));
    assert!(
        note.contains(&format!("{} shards written", r.shards)),
        "{note}"
    );

    let ds = Dataset::open(&o.out).unwrap();
    let reader = ds.reader().unwrap();
    let shards = &ds.manifest().shards;
    for s in &shards[..shards.len() - 1] {
        let bytes: u64 = (s.first_index..s.first_index + s.count)
            .map(|i| reader.get(i).unwrap().payload.len() as u64 + 32)
            .sum();
        assert!(bytes >= MIN_SHARD_BYTES, "{} holds {bytes} bytes", s.file);
    }

    // Shards of the asked size are left alone, without a note.
    let mut big = options(&dir.path().join("big"));
    big.shards = Some(3);
    let r = convert(&big, &NoProgress).unwrap();
    assert_eq!(r.shards, 3, "{r:?}");
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
}
