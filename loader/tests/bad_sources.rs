//! A bad record's log line names the input it came from (the dataset's source map), so
//! that it can be found and mended.

mod common;

use stoker_loader::{Loader, OnError, Output, Shuffle, Transform};

/// Flips one byte in the middle of the stored copy of record `index`'s source in the
/// dataset's shard files (JPEGs are stored as they are), so that its checksum fails.
fn damage_record(root: &std::path::Path, source: &[u8]) {
    let probe = &source[source.len() / 2..source.len() / 2 + 64];
    for entry in std::fs::read_dir(root).unwrap() {
        let path = entry.unwrap().path();
        if !path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("shard-")
        {
            continue;
        }
        let mut bytes = std::fs::read(&path).unwrap();
        if let Some(at) = bytes.windows(probe.len()).position(|w| w == probe) {
            bytes[at + 32] ^= 0x5A;
            std::fs::write(&path, bytes).unwrap();
            return;
        }
    }
    panic!("the record's bytes are in no shard");
}

#[test]
fn a_bad_record_is_logged_with_the_input_it_came_from() {
    let dir = tempfile::tempdir().unwrap();
    let ds = common::sample_dataset(dir.path());
    let index = 6;
    let name = ds
        .source_of(index)
        .unwrap()
        .expect("convert writes a source map");
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/data/sample");
    damage_record(
        &dir.path().join("ds"),
        &std::fs::read(src.join(&name)).unwrap(),
    );
    let ds = stoker_formats::Dataset::open(dir.path().join("ds")).unwrap();

    let lines = stoker_testdata::Captured::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let loader = Loader::builder(ds)
        .batch_size(5)
        .shuffle(Shuffle::Global { seed: 3 })
        .transform(Transform::random_resized_crop(32))
        .output(Output::U8Nhwc)
        .on_error(OnError::Replace)
        .workers(2)
        .build()
        .unwrap();
    let batches = tracing::subscriber::with_default(subscriber, || {
        let mut n = 0;
        for batch in loader.epoch(0) {
            batch.expect("a bad record is replaced, not an error");
            n += 1;
        }
        n
    });
    assert_eq!(batches, 3);
    let stats = loader.stats();
    assert_eq!(stats.bad_indices, vec![index], "{stats}");
    let text = lines.text();
    let line = text
        .lines()
        .find(|l| l.contains("bad record replaced"))
        .unwrap_or_else(|| panic!("no bad-record line in:\n{text}"));
    assert!(line.contains(&format!("index={index}")), "{line}");
    assert!(
        line.contains(&format!("source={}", name.display())),
        "the line does not name {}: {line}",
        name.display()
    );
}
