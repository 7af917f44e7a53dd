//! DatasetWriter and Dataset: shards, growth, validation, reopening.

use stoker_formats::{
    Dataset, DatasetWriter, Encoding, FormatError, Provenance, RecordHeader, RecordMeta,
    WriterOptions,
};

fn raw(h: u32, w: u32, label: u32) -> RecordMeta {
    RecordMeta {
        encoding: Encoding::Raw,
        height: h,
        width: w,
        channels: 1,
        label,
    }
}

fn jpeg(label: u32) -> RecordMeta {
    RecordMeta {
        encoding: Encoding::Jpeg,
        height: 4,
        width: 4,
        channels: 3,
        label,
    }
}

#[test]
fn shards_roll_over_by_bytes_and_keys_stay_dense() {
    let dir = tempfile::tempdir().unwrap();
    let opts = WriterOptions {
        shard_bytes: 10_000,
        ..WriterOptions::default()
    };
    let mut w = DatasetWriter::create(dir.path(), opts).unwrap();
    let payloads: Vec<Vec<u8>> = (0..50u32)
        .map(|i| (0..(100 + i * 37)).map(|b| (b * 7 + i) as u8).collect())
        .collect();
    for (i, p) in payloads.iter().enumerate() {
        assert_eq!(w.push(jpeg(i as u32 % 3), p).unwrap(), i as u64);
    }
    let m = w
        .finish(
            vec!["a".into(), "b".into(), "c".into()],
            Provenance::stoker("t"),
        )
        .unwrap();
    assert!(
        m.shards.len() > 2,
        "expected several shards, got {}",
        m.shards.len()
    );
    for s in &m.shards {
        // Each shard holds at most 10 kB of records, unless a single record is larger.
        assert!(s.count >= 1);
    }
    let ds = Dataset::open(dir.path()).unwrap();
    assert_eq!(ds.len(), 50);
    let r = ds.reader().unwrap();
    for (i, p) in payloads.iter().enumerate() {
        let rec = r.get(i as u64).unwrap();
        assert_eq!(rec.payload, &p[..]);
        assert_eq!(rec.header.label, i as u32 % 3);
        rec.check_crc().unwrap();
    }
    assert!(matches!(
        r.get(50),
        Err(FormatError::IndexOutOfRange { index: 50, len: 50 })
    ));
}

#[test]
fn records_per_shard_splits_by_count() {
    let dir = tempfile::tempdir().unwrap();
    let opts = WriterOptions {
        records_per_shard: Some(4),
        ..WriterOptions::default()
    };
    let mut w = DatasetWriter::create(dir.path(), opts).unwrap();
    for i in 0..10u8 {
        w.push(raw(1, 2, 0), &[i, i]).unwrap();
    }
    let m = w.finish(vec!["x".into()], Provenance::stoker("t")).unwrap();
    let counts: Vec<u64> = m.shards.iter().map(|s| s.count).collect();
    assert_eq!(counts, [4, 4, 2]);
    assert_eq!(m.raw_size.unwrap().width, 2);
    assert_eq!(m.encoding, Encoding::Raw);
}

#[test]
fn map_grows_for_large_and_many_small_records() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = DatasetWriter::create(dir.path(), WriterOptions::default()).unwrap();
    // 48 MiB of large records in one shard: beyond the 16 MiB initial map.
    let big: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 253) as u8).collect();
    for _ in 0..48 {
        w.push(jpeg(0), &big).unwrap();
    }
    // Then many tiny inline records.
    for i in 0..60_000u32 {
        w.push(jpeg(1), &i.to_le_bytes()).unwrap();
    }
    let m = w
        .finish(vec!["a".into(), "b".into()], Provenance::stoker("t"))
        .unwrap();
    assert_eq!(m.shards.len(), 1);
    let ds = Dataset::open(dir.path()).unwrap();
    let r = ds.reader().unwrap();
    assert_eq!(r.get(47).unwrap().payload, &big[..]);
    assert_eq!(
        r.get(48 + 59_999).unwrap().payload,
        &59_999u32.to_le_bytes()
    );
    assert!(stoker_formats::verify(&ds, false).unwrap().ok());
}

#[test]
fn invalid_records_are_refused_and_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = DatasetWriter::create(dir.path(), WriterOptions::default()).unwrap();
    w.push(raw(2, 2, 0), &[0; 4]).unwrap();
    let e = w.push(raw(2, 2, 0), &[0; 5]).unwrap_err();
    assert!(
        matches!(e, FormatError::InvalidRecord { index: 1, .. }),
        "{e}"
    );
    let e = w.push(raw(3, 3, 0), &[0; 9]).unwrap_err();
    assert!(e.to_string().contains("differs"), "{e}");
    let e = w.push(jpeg(0), b"\xff\xd8").unwrap_err();
    assert!(e.to_string().contains("encoding"), "{e}");
    w.push(raw(2, 2, 0), &[1; 4]).unwrap();
    let m = w.finish(vec!["a".into()], Provenance::stoker("t")).unwrap();
    assert_eq!(m.samples, 2);
}

#[test]
fn unfinished_writer_leaves_no_dataset_and_finished_refuses_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut w = DatasetWriter::create(dir.path(), WriterOptions::default()).unwrap();
        w.push(jpeg(0), b"abc").unwrap();
        // dropped without finish(): as if the process died
    }
    assert!(!dir.path().join("manifest.json").exists());
    assert!(!dir.path().join("shard-00000.lmdb").exists());
    assert!(Dataset::open(dir.path()).is_err());
    let mut w = DatasetWriter::create(dir.path(), WriterOptions::default()).unwrap();
    w.push(jpeg(0), b"abc").unwrap();
    w.finish(vec!["a".into()], Provenance::stoker("t")).unwrap();
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names
            .iter()
            .all(|n| !n.ends_with(".tmp") && !n.ends_with("-lock")),
        "{names:?}"
    );
    assert!(matches!(
        DatasetWriter::create(dir.path(), WriterOptions::default()),
        Err(FormatError::OutputExists { .. })
    ));
}

#[test]
fn hand_made_bad_records_are_reported_by_reader_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = DatasetWriter::create(dir.path(), WriterOptions::default()).unwrap();
    w.push(jpeg(0), b"not a jpeg at all").unwrap(); // valid CRC, undecodable
    let wrong_crc = RecordHeader {
        encoding: Encoding::Jpeg,
        height: 4,
        width: 4,
        channels: 3,
        label: 0,
        payload_len: 3,
        crc32c: 12345,
    };
    w.push_header_unchecked(wrong_crc, b"xyz").unwrap();
    let wrong_len = RecordHeader {
        payload_len: 10,
        crc32c: crc32c::crc32c(b"xyz"),
        ..wrong_crc
    };
    w.push_header_unchecked(wrong_len, b"xyz").unwrap();
    w.finish(vec!["a".into()], Provenance::stoker("t")).unwrap();

    let ds = Dataset::open(dir.path()).unwrap();
    let r = ds.reader().unwrap();
    r.get(0).unwrap().check_crc().unwrap();
    assert!(matches!(
        r.get(1).unwrap().check_crc(),
        Err(FormatError::CrcMismatch { index: 1, .. })
    ));
    assert!(matches!(
        r.get(2),
        Err(FormatError::TruncatedRecord {
            index: 2,
            got: 35,
            want: 42,
            ..
        })
    ));
    let v = stoker_formats::verify(&ds, true).unwrap();
    assert!(!v.ok());
    let bad: Vec<Option<u64>> = v.bad.iter().map(|b| b.index).collect();
    assert_eq!(bad, [Some(1), Some(2), Some(0)], "{:?}", v.bad);
    assert!(v.bad[2].problem.contains("does not decode"), "{:?}", v.bad);
    // Record 0 was decoded and failed: it does not count as decoded.
    assert_eq!(v.decoded, 0);
}

#[test]
fn same_dataset_opens_twice_and_reads_from_threads() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = DatasetWriter::create(dir.path(), WriterOptions::default()).unwrap();
    for i in 0..100u32 {
        w.push(jpeg(i), &i.to_be_bytes()).unwrap();
    }
    let classes = (0..100).map(|i| i.to_string()).collect();
    w.finish(classes, Provenance::stoker("t")).unwrap();
    let a = Dataset::open(dir.path()).unwrap();
    let b = Dataset::open(dir.path()).unwrap(); // heed alone refuses this
    std::thread::scope(|s| {
        for ds in [&a, &b, &a] {
            let ds = ds.clone();
            s.spawn(move || {
                let r = ds.reader().unwrap();
                for i in 0..100u32 {
                    assert_eq!(r.get(u64::from(i)).unwrap().payload, i.to_be_bytes());
                }
            });
        }
    });
}

#[test]
fn truncated_shard_is_refused_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = DatasetWriter::create(dir.path(), WriterOptions::default()).unwrap();
    w.push(jpeg(0), &[5u8; 10_000]).unwrap();
    w.finish(vec!["a".into()], Provenance::stoker("t")).unwrap();
    let shard = dir.path().join("shard-00000.lmdb");
    let len = std::fs::metadata(&shard).unwrap().len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&shard)
        .unwrap();
    f.set_len(len - 4096).unwrap();
    assert!(matches!(
        Dataset::open(dir.path()),
        Err(FormatError::ShardSizeMismatch { .. })
    ));
}

#[test]
fn dataset_is_send_sync_clone_and_reader_is_send() {
    fn send_sync_clone<T: Send + Sync + Clone>() {}
    fn send<T: Send>() {}
    send_sync_clone::<Dataset>();
    send::<stoker_formats::DatasetReader>();
    send::<FormatError>();
}

#[test]
fn every_payload_is_a_slice_of_its_shards_mapped_bytes() {
    // Large values (LMDB overflow pages) and small ones, over several shards.
    let dir = tempfile::tempdir().unwrap();
    let opts = WriterOptions {
        records_per_shard: Some(7),
        ..WriterOptions::default()
    };
    let mut w = DatasetWriter::create(dir.path(), opts).unwrap();
    let payloads: Vec<Vec<u8>> = (0..20u32)
        .map(|i| {
            let len = if i % 3 == 0 {
                300_000 + i * 1_001
            } else {
                50 + i
            };
            (0..len).map(|b| (b * 13 + i) as u8).collect()
        })
        .collect();
    for (i, p) in payloads.iter().enumerate() {
        w.push(jpeg(i as u32), p).unwrap();
    }
    let classes = (0..20).map(|i| i.to_string()).collect();
    w.finish(classes, Provenance::stoker("test")).unwrap();
    let ds = Dataset::open(dir.path()).unwrap();
    let shards = ds.manifest().shards.len();
    assert_eq!(shards, 3);
    assert!(ds.shard_bytes(shards).is_none());
    let reader = ds.reader().unwrap();
    for (i, want) in payloads.iter().enumerate() {
        let rec = reader.get(i as u64).unwrap();
        let shard = ds.shard_of(i as u64).unwrap();
        let map = ds.shard_bytes(shard).unwrap();
        let len = std::fs::metadata(dir.path().join(&ds.manifest().shards[shard].file))
            .unwrap()
            .len();
        assert_eq!(
            map.len() as u64,
            len,
            "shard {shard}: the whole file, no more"
        );
        let start = rec.payload.as_ptr() as usize - map.as_ptr() as usize;
        assert!(
            start + rec.payload.len() <= map.len(),
            "record {i} inside shard {shard}"
        );
        assert_eq!(&map[start..start + want.len()], &want[..], "record {i}");
    }
}

/// stoker writes shard files itself (formats/src/lmdb_write.rs), not through LMDB: LMDB must
/// read them as one of its own environments. Values at every size boundary of the layout
/// (empty, inline up to LMDB's node limit, the first overflow size, overflow runs that end
/// exactly on a page and one byte past it), across many leaf pages and a three-level tree,
/// read back through LMDB's cursor and by key; LMDB's own counts agree with the file.
#[test]
fn lmdb_reads_the_shards_stoker_writes_record_for_record() {
    use heed::types::Bytes;
    use heed::{EnvFlags, EnvOpenOptions};
    const HEADER: usize = stoker_formats::HEADER_LEN;
    // A leaf node is 8 bytes of header, the 8-byte key and the value; LMDB keeps values of
    // nodes over 2,038 bytes on overflow pages, whose first 16 bytes are a page header.
    let node_max_value = 2038 - 16;
    let mut payload_lens = vec![
        0,
        1,
        node_max_value - HEADER - 1,
        node_max_value - HEADER,
        node_max_value - HEADER + 1,
        4096 - 16 - HEADER,
        4096 - 16 - HEADER + 1,
        3 * 4096 - 16 - HEADER,
        300_000,
    ];
    // Then enough small records for branch pages above branch pages.
    payload_lens.extend((0..15_000).map(|i| i % 40));
    let write = |path: &std::path::Path| {
        let mut w = DatasetWriter::create(path, WriterOptions::default()).unwrap();
        let mut values = Vec::new();
        for (i, &len) in payload_lens.iter().enumerate() {
            let payload: Vec<u8> = (0..len).map(|b| (b * 31 + i) as u8).collect();
            w.push(jpeg(i as u32 % 5), &payload).unwrap();
            values.push(payload);
        }
        let classes = (0..5).map(|c| format!("c{c}")).collect();
        w.finish(classes, Provenance::stoker("test")).unwrap();
        values
    };
    let dir = tempfile::tempdir().unwrap();
    let values = write(&dir.path().join("a"));
    let shard = dir.path().join("a/shard-00000.lmdb");

    let mut opts = EnvOpenOptions::new();
    opts.map_size(64 << 20).max_dbs(0);
    // SAFETY: a finished shard nothing writes, opened read-only without a lock file.
    unsafe { opts.flags(EnvFlags::NO_SUB_DIR | EnvFlags::READ_ONLY | EnvFlags::NO_LOCK) };
    // SAFETY: as above; this test is the only user of the file.
    let env = unsafe { opts.open(&shard) }.unwrap();
    let t = env.read_txn().unwrap();
    let db = env
        .open_database::<Bytes, Bytes>(&t, None)
        .unwrap()
        .unwrap();
    let stat = db.stat(&t).unwrap();
    assert_eq!(stat.entries, values.len());
    assert_eq!(stat.depth, 3, "{stat:?}");
    let file_pages = std::fs::metadata(&shard).unwrap().len() as usize / 4096;
    assert_eq!(
        2 + stat.branch_pages + stat.leaf_pages + stat.overflow_pages + 33,
        file_pages,
        "every page but the two meta pages and the 33 zero pages at the end belongs to the \
         tree: {stat:?}"
    );
    assert_eq!(env.stat().page_size, 4096);
    let through_cursor: Vec<(Vec<u8>, Vec<u8>)> = db
        .iter(&t)
        .unwrap()
        .map(|item| item.map(|(k, v)| (k.to_vec(), v.to_vec())).unwrap())
        .collect();
    assert!(db
        .get(&t, &(values.len() as u64).to_be_bytes())
        .unwrap()
        .is_none());
    drop(t);
    // One environment per file and process: close this one before the dataset opens it.
    env.prepare_for_closing().wait();

    assert_eq!(through_cursor.len(), values.len());
    let ds = Dataset::open(dir.path().join("a")).unwrap();
    let reader = ds.reader().unwrap();
    for (i, (key, value)) in through_cursor.iter().enumerate() {
        assert_eq!(key[..], (i as u64).to_be_bytes(), "keys in order");
        let record = reader.get(i as u64).unwrap();
        assert_eq!(&value[..HEADER], &record.header.to_bytes()[..]);
        assert_eq!(
            &value[HEADER..],
            &values[i][..],
            "record {i} through the cursor"
        );
        assert_eq!(record.payload, &values[i][..], "record {i} by key");
        record.check_crc().unwrap();
    }
    let v = stoker_formats::verify(&ds, false).unwrap();
    assert!(v.ok(), "{:?}", &v.bad[..v.bad.len().min(3)]);
    drop(reader);
    drop(ds);

    // The same records give the same file, byte for byte.
    write(&dir.path().join("b"));
    let again = std::fs::read(dir.path().join("b/shard-00000.lmdb")).unwrap();
    assert!(
        std::fs::read(&shard).unwrap() == again,
        "same records, same file"
    );
}

#[test]
fn raw_size_past_u64_is_an_invalid_record_not_an_overflow_panic() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = DatasetWriter::create(dir.path(), WriterOptions::default()).unwrap();
    // (2^32 - 1)^2 × 3 is past 2^64.
    let huge = RecordMeta {
        channels: 3,
        ..raw(u32::MAX, u32::MAX, 0)
    };
    // `height × width × channels` in u64 panicked (debug) or wrapped (release).
    let e = w.push(huge, &[1, 2, 3]).unwrap_err();
    assert!(
        matches!(&e, FormatError::InvalidRecord { index: 0, reason } if reason.contains("2^64")),
        "{e}"
    );
    // The refused record fixed nothing: a JPEG dataset may still start here.
    w.push(jpeg(0), b"jpeg").unwrap();
    let m = w.finish(vec!["x".into()], Provenance::stoker("t")).unwrap();
    assert_eq!((m.samples, m.encoding), (1, Encoding::Jpeg));
}

#[test]
fn raw_record_without_pixels_is_refused_at_push_not_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = DatasetWriter::create(dir.path(), WriterOptions::default()).unwrap();
    // 0×0×3 with an empty payload (or 8×8×0) matched its size and was written; every
    // loader epoch then refused each such record as unusable.
    for (h, wd, c) in [(0, 0, 3), (8, 8, 0), (0, 8, 1)] {
        let meta = RecordMeta {
            channels: c,
            ..raw(h, wd, 0)
        };
        let e = w.push(meta, &[]).unwrap_err();
        assert!(
            matches!(&e, FormatError::InvalidRecord { index: 0, reason } if reason.contains("no pixels")),
            "{e}"
        );
    }
    w.push(raw(1, 2, 0), &[1, 2]).unwrap();
    assert_eq!(
        w.finish(vec!["x".into()], Provenance::stoker("t"))
            .unwrap()
            .samples,
        1
    );
}

#[test]
fn raw_record_of_other_than_one_or_three_channels_is_refused_at_push() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = DatasetWriter::create(dir.path(), WriterOptions::default()).unwrap();
    // 2×2×4 with its 16 bytes was written, and every loader epoch refused the record.
    for c in [2u8, 4, 255] {
        let meta = RecordMeta {
            channels: c,
            ..raw(2, 2, 0)
        };
        let e = w.push(meta, &vec![7; 4 * usize::from(c)]).unwrap_err();
        assert!(
            matches!(&e, FormatError::InvalidRecord { index: 0, reason } if reason.contains(&format!("has {c} channels"))),
            "{e}"
        );
    }
    let rgb = RecordMeta {
        channels: 3,
        ..raw(2, 2, 0)
    };
    w.push(rgb, &[7; 12]).unwrap();
    let m = w.finish(vec!["x".into()], Provenance::stoker("t")).unwrap();
    assert_eq!(m.samples, 1);
}

#[test]
fn a_label_outside_the_classes_given_to_finish_leaves_no_finished_dataset() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = DatasetWriter::create(dir.path(), WriterOptions::default()).unwrap();
    for label in [0, 2, 1, 2] {
        w.push(jpeg(label), b"jpeg").unwrap();
    }
    // Checked without giving the writer up.
    let two: Vec<String> = vec!["a".into(), "b".into()];
    assert!(matches!(
        w.check_classes(&two),
        Err(FormatError::InvalidRecord { index: 1, .. })
    ));
    let three: Vec<String> = vec!["a".into(), "b".into(), "c".into()];
    w.check_classes(&three).unwrap();
    // Two names for labels 0..=2: every epoch would refuse records 1 and 3.
    let e = w
        .finish(vec!["a".into(), "b".into()], Provenance::stoker("t"))
        .unwrap_err();
    assert!(
        matches!(&e, FormatError::InvalidRecord { index: 1, reason }
            if reason.contains("label 2 is outside the class list given to finish (2 classes)")
                && reason.contains("at least 3 class names")),
        "{e}"
    );
    assert!(!dir.path().join("manifest.json").exists());
    assert!(Dataset::open(dir.path()).is_err());

    // Enough names: the same records finish.
    let mut w = DatasetWriter::create(dir.path(), WriterOptions::default()).unwrap();
    for label in [0, 2, 1, 2] {
        w.push(jpeg(label), b"jpeg").unwrap();
    }
    let m = w
        .finish(
            vec!["a".into(), "b".into(), "c".into()],
            Provenance::stoker("t"),
        )
        .unwrap();
    assert_eq!(m.samples, 4);
}

#[test]
fn verify_reports_a_raw_record_of_other_than_one_or_three_channels() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = DatasetWriter::create(dir.path(), WriterOptions::default()).unwrap();
    let rgb = RecordMeta {
        channels: 3,
        ..raw(2, 2, 0)
    };
    w.push(rgb, &[7; 12]).unwrap();
    // As another tool (or this writer before the check) could write it: 12 bytes of
    // 3×1×4, which the loader refuses.
    let rgba = RecordHeader {
        encoding: Encoding::Raw,
        height: 3,
        width: 1,
        channels: 4,
        label: 0,
        payload_len: 12,
        crc32c: crc32c::crc32c(&[7; 12]),
    };
    w.push_header_unchecked(rgba, &[7; 12]).unwrap();
    w.finish(vec!["x".into()], Provenance::stoker("t")).unwrap();
    let v = stoker_formats::verify(&Dataset::open(dir.path()).unwrap(), false).unwrap();
    let problems: Vec<(Option<u64>, &str)> = v
        .bad
        .iter()
        .map(|b| (b.index, b.problem.as_str()))
        .collect();
    assert!(
        problems.contains(&(
            Some(1),
            "raw record of 1x3x4 has 4 channels: a raw record holds gray (1) or RGB (3) pixels"
        )),
        "{problems:?}"
    );
    assert!(problems.iter().all(|(i, _)| *i == Some(1)), "{problems:?}");
}

#[test]
fn a_writer_locks_its_directory_and_refuses_another_writers_shards() {
    // Regression: DatasetWriter took no lock. Two writers in one directory finished as a
    // dataset holding the first one's manifest over the second one's records (CRCs valid);
    // one started beside a conversion deleted its shard in progress; one started where a
    // writer had died took that writer's later shards into its dataset.
    let dir = tempfile::tempdir().unwrap();
    let mut a = DatasetWriter::create(dir.path(), WriterOptions::default()).unwrap();
    a.push(jpeg(0), b"first writer").unwrap();
    let e = DatasetWriter::create(dir.path(), WriterOptions::default()).unwrap_err();
    assert!(matches!(e, FormatError::OutputLocked { .. }), "{e}");
    let samples = stoker_formats::SampleWriter::create(
        dir.path(),
        stoker_formats::SampleOptions::new("t"),
        Some(vec!["a".into()]),
    );
    assert!(
        matches!(samples, Err(FormatError::OutputLocked { .. })),
        "{:?}",
        samples.err()
    );
    a.finish(vec!["a".into()], Provenance::stoker("t")).unwrap();
    let ds = Dataset::open(dir.path()).unwrap();
    assert_eq!(
        ds.reader().unwrap().get(0).unwrap().payload,
        b"first writer"
    );

    // A writer that finished shards and then died: its shards are not taken in.
    let dir = tempfile::tempdir().unwrap();
    {
        let opts = WriterOptions {
            records_per_shard: Some(1),
            ..WriterOptions::default()
        };
        let mut w = DatasetWriter::create(dir.path(), opts).unwrap();
        for _ in 0..3 {
            w.push(jpeg(0), b"dead writer").unwrap();
        }
    }
    assert!(dir.path().join("shard-00001.lmdb").exists());
    let e = DatasetWriter::create(dir.path(), WriterOptions::default()).unwrap_err();
    assert!(
        matches!(e, FormatError::OutputExists { .. })
            && e.to_string()
                .contains("shards of a writer that did not finish"),
        "{e}"
    );
}

#[test]
fn class_names_given_twice_are_refused_at_finish() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = DatasetWriter::create(dir.path(), WriterOptions::default()).unwrap();
    w.push(jpeg(1), b"abc").unwrap();
    let e = w
        .check_classes(&["a".into(), "a".into()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"a\" is labels 0 and 1"), "{e}");
    let e = w
        .finish(vec!["a".into(), "a".into()], Provenance::stoker("t"))
        .unwrap_err();
    assert!(matches!(e, FormatError::InvalidOptions(_)), "{e}");
    assert!(!dir.path().join("manifest.json").exists());
}

#[test]
fn a_writer_whose_directory_was_replaced_writes_nothing_into_the_new_one() {
    // Regression: shards and the manifest were written by path, so a conversion paused
    // (Ctrl-Z, a frozen container) while its directory was moved away and another run
    // made a new one under its name carried on in the newcomer, past its lock: it wrote
    // over that run's shards and finished with its own manifest there.
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let opts = WriterOptions {
        records_per_shard: Some(1),
        ..WriterOptions::default()
    };
    let mut w = DatasetWriter::create(&out, opts.clone()).unwrap();
    w.push(jpeg(0), b"one").unwrap();
    std::fs::rename(&out, tmp.path().join("moved")).unwrap();
    std::fs::create_dir(&out).unwrap();
    // The next shard is neither renamed nor begun under the name.
    let e = w.push(jpeg(0), b"two").unwrap_err();
    assert!(e.to_string().contains("removed or moved away"), "{e}");
    assert_eq!(std::fs::read_dir(&out).unwrap().count(), 0);

    // Nor is a manifest written there at the end.
    let out2 = tmp.path().join("out2");
    let mut w = DatasetWriter::create(&out2, opts).unwrap();
    w.push(jpeg(0), b"one").unwrap();
    std::fs::remove_dir_all(&out2).unwrap();
    std::fs::create_dir(&out2).unwrap();
    let e = w
        .finish(vec!["a".into()], Provenance::stoker("t"))
        .unwrap_err();
    assert!(e.to_string().contains("removed or moved away"), "{e}");
    assert_eq!(std::fs::read_dir(&out2).unwrap().count(), 0);
}
