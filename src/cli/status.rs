//! Exit statuses the commands share; a command documents its others (`verify`:
//! `NOT_CHECKED`). Their own module: the commands and the dispatch above them both name
//! them.

/// Exit status of a command that did what it was asked.
pub const SUCCESS: u8 = 0;
/// Exit status of a command that failed, or found a problem (a damaged dataset, an image
/// that does not decode).
pub const FAILURE: u8 = 1;
