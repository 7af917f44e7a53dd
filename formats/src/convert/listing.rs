//! What listing a source yields: the inputs in conversion order, the class names, and
//! what the user should hear about how the source was read.

use std::path::PathBuf;

/// One input file and its label.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Input {
    pub path: PathBuf,
    pub label: u32,
    /// Why the walker already knows this entry cannot be converted (an unreadable or
    /// repeated directory, a broken symlink): it is skipped and counted like a bad file.
    pub refused: Option<String>,
}

/// The inputs in conversion order, and the class names.
#[derive(Debug)]
pub(crate) struct Listing {
    pub inputs: Vec<Input>,
    /// One name per label, `classes[label]`.
    pub classes: Vec<String>,
    /// Files directly in an ImageFolder root: not in any class, so not inputs.
    pub ignored: Vec<PathBuf>,
    /// An ImageFolder source was read as one class of unlabelled images.
    pub flat: bool,
    /// How the source was read where it may not be what the user meant (an empty class
    /// folder, a hidden folder taken as a class, a commented-out list row); the labels
    /// are as listed all the same.
    pub warnings: Vec<String>,
}

impl Listing {
    /// Bytes of all the inputs' paths (what bounds the size of a resume journal).
    pub(crate) fn path_bytes(&self) -> u64 {
        self.inputs
            .iter()
            .map(|i| i.path.as_os_str().len() as u64)
            .sum()
    }
}
