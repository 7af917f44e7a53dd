//! Header parser: reads the marker segments of a JPEG (never the pixels) and
//! reports what a decoder needs to know to pick a route.
//!
//! The walk is bounded: every read is checked against the input length, the
//! pixel limit is enforced as soon as the frame header is read, and the scan
//! walk stops at the first scan for ordinary interleaved sequential files.
//! `markers` walks the segments, `frame` reads SOF and SOS, `exif` the
//! orientation, `entropy` skips scan data, `image_end` finds where the primary image
//! ends; `info` holds what is reported.

mod entropy;
mod exif;
mod frame;
mod image_end;
mod info;
mod markers;

pub use entropy::entropy_coded_end;
pub use image_end::primary_image_end;
pub(crate) use image_end::scan_data_ends;
pub use info::{
    can_allocate, could_ever_allocate, ColorSpace, ImageInfo, Limits, Subsampling, MAX_SCANS,
};
pub use markers::probe;
