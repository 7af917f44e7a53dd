//! # Overview
//!
//! Work in progress.
