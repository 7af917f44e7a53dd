//! Why nvJPEG could not be loaded. Kept apart from the raw layer and the
//! loader so that both can name it without importing each other.

use std::path::PathBuf;

/// nvJPEG could not be loaded: every candidate tried, and why each failed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// No candidate library could be opened.
    #[error("libnvjpeg not found; tried: {}", fmt_tried(.tried))]
    NotFound {
        /// Each candidate (a file name or path) and the loader's message.
        tried: Vec<(PathBuf, String)>,
    },
    /// A library opened but lacks a function this crate needs.
    #[error("{path} lacks symbol {symbol}: {message}")]
    MissingSymbol {
        /// The library that opened.
        path: PathBuf,
        /// The missing function.
        symbol: &'static str,
        /// The loader's message.
        message: String,
    },
}

fn fmt_tried(tried: &[(PathBuf, String)]) -> String {
    tried
        .iter()
        .map(|(p, e)| format!("{} ({e})", p.display()))
        .collect::<Vec<_>>()
        .join("; ")
}
