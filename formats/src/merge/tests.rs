//! Merge's unit tests.

use super::*;

#[test]
fn a_refused_link_says_why_and_names_the_shard() {
    let (from, to) = (
        Path::new("/parts/part-00000-of-00002/shard-00000.lmdb"),
        Path::new("/out/shard-00000.lmdb"),
    );
    let says =
        |errno: i32| link_error(from, to, std::io::Error::from_raw_os_error(errno)).to_string();
    let eperm = says(libc::EPERM);
    assert!(
        eperm.contains("part-00000-of-00002/shard-00000.lmdb"),
        "{eperm}"
    );
    assert!(
        eperm.contains("protected_hardlinks") && eperm.contains("run merge as the user"),
        "{eperm}"
    );
    for errno in [libc::ENOSYS, libc::EOPNOTSUPP] {
        let e = says(errno);
        assert!(
            e.contains("does not allow") && e.contains("hard links"),
            "{e}"
        );
    }
    assert!(says(libc::EXDEV).contains("another file system"));
    // Too many links is not a file system without links.
    assert!(!says(libc::EMLINK).contains("does not allow"));
    // Anything else stays the I/O error it is, on the link's path.
    assert!(
        says(libc::EIO).starts_with("/out/shard-00000.lmdb"),
        "{}",
        says(libc::EIO)
    );
}

/// A merge whose root was swapped after it was locked (a merge paused there while the
/// root was moved away and another run made a new one under its name): it deleted the
/// newcomer's shards as leftovers of an interrupted merge, and removed its part
/// directories as its own.
#[test]
fn a_merge_deletes_and_writes_nothing_in_a_root_that_is_not_the_one_it_locked() {
    let tmp = tempfile::tempdir().unwrap();
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/data/sample");
    let root = tmp.path().join("root");
    for index in 0..2 {
        let mut o = crate::ConvertOptions::new(crate::Source::ImageFolder(src.into()), &root);
        o.check_decode = false;
        o.part = Some(crate::Part::new(index, 2).unwrap());
        crate::convert(&o, &crate::NoProgress).unwrap();
    }
    // The identity of another directory: as if `root` had been swapped since.
    let elsewhere = tmp.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let locked = HeldDir::of_locked(&std::fs::File::open(&elsewhere).unwrap(), &root).unwrap();
    std::fs::write(root.join("shard-00000.lmdb"), b"a newcomer's shard").unwrap();
    let e = merge_locked(&locked, &[]).unwrap_err();
    assert!(matches!(e, FormatError::OutputMoved { .. }), "{e}");
    assert_eq!(
        std::fs::read(root.join("shard-00000.lmdb")).unwrap(),
        b"a newcomer's shard"
    );
    assert!(!root.join(MANIFEST_FILE).exists());
    let parts = find_parts(&root).unwrap();
    assert_eq!(parts.len(), 2);
    assert!(parts.iter().all(|p| p.join(MANIFEST_FILE).exists()));
}

/// A merge stopped between its last check and the removal of a part found in the root
/// (forced with `strace -e inject=unlinkat:delay_enter`) while the root was moved away and
/// another run made a new one with parts of the same names: by path, it removed the
/// newcomer's parts, the only copies of their records.
#[test]
fn a_merged_part_is_removed_from_the_root_held_not_from_the_path() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let part = "part-00000-of-00001";
    let make = |root: &Path| {
        std::fs::create_dir_all(root.join(part)).unwrap();
        std::fs::write(root.join(part).join("shard-00000.lmdb"), b"x").unwrap();
    };
    make(&root);
    let held = HeldDir::open(&root).unwrap();
    // Given as a path through the root, and found in it: both are the root's by name.
    for given in [root.join(part), root.join(".").join(part)] {
        let place = removal::place_of(&given, &held);
        assert!(matches!(place, removal::PartPlace::InRoot(_)), "{place:?}");
    }
    let place = removal::place_of(&root.join(part), &held);
    std::fs::rename(&root, tmp.path().join("moved")).unwrap();
    make(&root);
    assert_eq!(removal::remove(&place, &held).unwrap(), None);
    assert!(!tmp.path().join("moved").join(part).exists());
    assert!(root.join(part).join("shard-00000.lmdb").exists());
}

/// The same for a part that is a symlink in the root to a directory inside it: the
/// directory it led to went by its absolute path, the newcomer's once the root moved.
#[test]
fn a_linked_part_inside_the_root_is_removed_from_the_root_held() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let make = |root: &Path| {
        std::fs::create_dir_all(root.join(".stash/p0")).unwrap();
        std::fs::write(root.join(".stash/p0/shard-00000.lmdb"), b"x").unwrap();
        std::os::unix::fs::symlink(".stash/p0", root.join("part-00000-of-00001")).unwrap();
    };
    make(&root);
    let held = HeldDir::open(&root).unwrap();
    let place = removal::place_of(&root.join("part-00000-of-00001"), &held);
    assert!(
        matches!(
            place,
            removal::PartPlace::LinkInRoot {
                within: Some(_),
                ..
            }
        ),
        "{place:?}"
    );
    let moved = tmp.path().join("moved");
    std::fs::rename(&root, &moved).unwrap();
    make(&root);
    removal::remove(&place, &held).unwrap();
    assert!(!moved.join(".stash/p0").exists() && !moved.join("part-00000-of-00001").exists());
    assert!(root.join(".stash/p0/shard-00000.lmdb").exists());
    assert!(root.join("part-00000-of-00001").is_symlink());
}
