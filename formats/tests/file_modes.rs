//! The modes a dataset's files are created with (docs/FORMAT.md): 0644 less the umask, for
//! the shards and the manifest alike. A binary of its own, since the umask is the
//! process's and this test sets it.

use std::os::unix::fs::PermissionsExt;

use stoker_formats::{
    DatasetWriter, Encoding, Provenance, RecordMeta, WriterOptions, MANIFEST_FILE,
};

/// Under umask 002 (Ubuntu's default for user accounts) the manifest was created 0664
/// (`File::create`, 0666 less the umask) while the shards were 0644.
#[test]
fn the_manifest_gets_the_shards_mode_under_a_group_writable_umask() {
    // SAFETY: umask has no memory-safety preconditions; this binary runs this test alone.
    unsafe { libc::umask(0o002) };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("ds");
    let mut w = DatasetWriter::create(&out, WriterOptions::default()).unwrap();
    let meta = RecordMeta {
        encoding: Encoding::Raw,
        height: 2,
        width: 2,
        channels: 1,
        label: 0,
    };
    w.push(meta, &[1, 2, 3, 4]).unwrap();
    w.finish(vec!["x".into()], Provenance::stoker("t")).unwrap();
    let mode = |name: &str| {
        let m = std::fs::metadata(out.join(name)).unwrap();
        m.permissions().mode() & 0o777
    };
    assert_eq!(mode("shard-00000.lmdb"), 0o644);
    assert_eq!(mode(MANIFEST_FILE), 0o644);
}
