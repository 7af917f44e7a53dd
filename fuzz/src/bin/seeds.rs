//! Writes the starting corpora of the format targets under `corpus/` (run from `fuzz/`):
//! `shard/` (a record count and a shard file, per `stoker_fuzz::shard_seeds`), `manifest/`
//! (the manifest of the dataset the `manifest` target reads), `tar/` (WebDataset shards
//! of small conformance JPEGs in GNU, ustar and old headers, with a directory and a long
//! name among the members, and one named by a PAX record), `journal/` (the journal of
//! the killed conversion the `journal` target resumes) and `images/` (small images of every
//! format besides JPEG that the converter reads, `stoker_testdata::other_format_samples`).

use std::path::Path;

use stoker_formats::convert::JOURNAL_FILE;
use stoker_formats::{shard_file_name, MANIFEST_FILE};
use stoker_fuzz::{killed_conversion, manifest_template, shard_seeds, write_dataset};

fn main() {
    let corpus = Path::new("corpus");
    let work = std::env::temp_dir().join(format!("stoker-fuzz-seeds-{}", std::process::id()));
    for sub in ["shard", "manifest", "tar", "journal", "images"] {
        std::fs::create_dir_all(corpus.join(sub)).unwrap();
    }
    for (name, bytes) in stoker_testdata::other_format_samples() {
        std::fs::write(corpus.join("images").join(name), bytes).unwrap();
    }
    for (name, sizes) in shard_seeds() {
        let dir = work.join(name);
        write_dataset(&dir, &sizes, 100_000);
        let mut seed = (sizes.len() as u16).to_le_bytes().to_vec();
        seed.extend(std::fs::read(dir.join(shard_file_name(0))).unwrap());
        std::fs::write(corpus.join("shard").join(name), seed).unwrap();
    }
    let dir = work.join("manifest");
    manifest_template(&dir);
    std::fs::copy(
        dir.join(MANIFEST_FILE),
        corpus.join("manifest/template.json"),
    )
    .unwrap();

    let core = Path::new("../testdata/conformance/core");
    let photo = |name: &str| std::fs::read(core.join(name)).unwrap();
    let small = [
        photo("pillow__Tests__images__icc-after-SOF.jpg"),
        photo("pydicom__SC_rgb_small_odd_jpeg.jpg"),
        photo("pillow__Tests__images__app13.jpg"),
    ];
    for (name, make) in [
        ("gnu.tar", tar::Header::new_gnu as fn() -> tar::Header),
        ("ustar.tar", tar::Header::new_ustar),
        ("old.tar", tar::Header::new_old),
    ] {
        let mut b = tar::Builder::new(Vec::new());
        let mut add = |path: &str, data: &[u8], kind: tar::EntryType| {
            let mut h = make();
            h.set_entry_type(kind);
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_mtime(0);
            b.append_data(&mut h, path, data).unwrap();
        };
        add("train/", &[], tar::EntryType::Directory);
        for (i, jpg) in small.iter().enumerate() {
            add(&format!("train/s{i}.jpg"), jpg, tar::EntryType::Regular);
            add(
                &format!("train/s{i}.cls"),
                format!("{i}\n").as_bytes(),
                tar::EntryType::Regular,
            );
        }
        let long = format!("train/{}/deep.jpg", "d".repeat(120));
        add(&long, &small[0], tar::EntryType::Regular);
        add(
            &long.replace(".jpg", ".cls"),
            b"1\n",
            tar::EntryType::Regular,
        );
        std::fs::write(corpus.join("tar").join(name), b.into_inner().unwrap()).unwrap();
    }
    // A PAX `path` record naming the next member.
    let mut b = tar::Builder::new(Vec::new());
    let body = b"35 path=pax/a-rather-long-name.jpg\n";
    let mut h = tar::Header::new_ustar();
    h.set_entry_type(tar::EntryType::XHeader);
    h.set_size(body.len() as u64);
    h.set_mode(0o644);
    b.append_data(&mut h, "PaxHeader", &body[..]).unwrap();
    let mut h = tar::Header::new_ustar();
    h.set_size(small[1].len() as u64);
    h.set_mode(0o644);
    b.append_data(&mut h, "placeholder", &small[1][..]).unwrap();
    let mut h = tar::Header::new_ustar();
    h.set_size(2);
    h.set_mode(0o644);
    b.append_data(&mut h, "pax/a-rather-long-name.cls", &b"2\n"[..])
        .unwrap();
    std::fs::write(corpus.join("tar/pax.tar"), b.into_inner().unwrap()).unwrap();
    let killed = killed_conversion(&work.join("journal"));
    let journal = killed
        .files
        .iter()
        .find(|(name, _)| name == JOURNAL_FILE)
        .unwrap();
    std::fs::write(corpus.join("journal/killed"), &journal.1).unwrap();
    let _ = std::fs::remove_dir_all(&work);
}
