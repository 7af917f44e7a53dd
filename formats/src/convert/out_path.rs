//! What an output path must be before anything is made at it: a directory, or a path
//! that can become one.

use std::path::Path;

use crate::FormatError;

/// Refuses an output path that cannot be a directory: it, or the nearest of its
/// ancestors that exists, is a file or a symbolic link to nothing. Creating the directory
/// would say only "File exists" or "Not a directory", naming neither which path is wrong
/// nor what to do; said before the source is listed, it is also said at once.
///
/// # Errors
///
/// [`FormatError::OutputExists`] naming the path that is no directory; I/O errors reading
/// it. A path that cannot be read at all (a missing permission) is left to the creation
/// of the directory to report.
pub(crate) fn refuse_non_directory(out: &Path) -> Result<(), FormatError> {
    for at in out.ancestors().filter(|a| !a.as_os_str().is_empty()) {
        let link = match std::fs::symlink_metadata(at) {
            Ok(link) => link,
            // Missing, or below a file: the ancestor that exists says which.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => continue,
            Err(_) => return Ok(()),
        };
        let below = if at == out {
            String::new()
        } else {
            format!(
                ", so the output directory {} cannot be made in it",
                out.display()
            )
        };
        let reason = match std::fs::metadata(at) {
            Ok(m) if m.is_dir() => return Ok(()),
            Ok(_) if at == out => {
                "is a file, not a directory: the output is a directory (new or empty)".into()
            }
            Ok(_) => format!("is a file, not a directory{below}"),
            Err(_) if link.file_type().is_symlink() => format!(
                "is a symbolic link to a missing directory{below}: create its target, or choose another output directory"
            ),
            Err(e) => return Err(FormatError::io(at, e)),
        };
        return Err(FormatError::OutputExists {
            path: at.to_path_buf(),
            reason,
        });
    }
    Ok(())
}
