//! A WebDataset tar shard's bytes through `convert` (`Layout::WebDataset`, one worker, the
//! header check only). No byte may panic, hang or run away with memory; a conversion that
//! succeeds leaves a dataset that opens, holds what the report says and passes `verify`;
//! one that fails leaves no manifest (nothing half-written looks finished).
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use stoker_formats::{
    convert, verify, ConvertOptions, Dataset, Layout, NoProgress, Source, MANIFEST_FILE,
};
use stoker_fuzz::scratch;

fn root() -> &'static PathBuf {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| scratch("tar"))
}

fuzz_target!(|data: &[u8]| {
    let root = root();
    let tar = root.join("in.tar");
    let out = root.join("out");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::write(&tar, data).unwrap();
    let mut o = ConvertOptions::new(Source::ImageFolder(tar), &out);
    o.layout = Layout::WebDataset;
    o.jobs = Some(1);
    o.check_decode = false;
    match convert(&o, &NoProgress) {
        Ok(report) => {
            let ds = Dataset::open(&out).expect("a finished conversion opens");
            assert_eq!(ds.len(), report.written);
            let v = verify(&ds, false).unwrap();
            assert!(v.ok(), "a fresh conversion fails verify: {:?}", v.bad);
        }
        Err(e) => assert!(
            !out.join(MANIFEST_FILE).exists(),
            "failed ({e}) but left a manifest"
        ),
    }
});
