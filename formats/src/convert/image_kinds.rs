//! What the converter tells of inputs it does not convert, from their first bytes or their
//! name: image formats it does not read but users meet (named in the skip reason, where
//! "not an image" would send them looking for a broken file), camera RAW files (whose first
//! image, a small preview, would otherwise pass for the photo), and names that say
//! "image", which `--strict` holds to.

use std::path::Path;

/// The formats the converter reads, for the skip reasons of those it does not.
pub(super) const READ: &str = "stoker reads JPEG, PNG, BMP, GIF, WebP, TIFF and PPM/PGM/PBM";

/// The name of an image format of `data` that the `image` crate does not recognize and
/// stoker does not read: HEIC/HEIF (an iPhone's default), AVIF in a HEIF box, JPEG XL,
/// JPEG 2000.
pub(super) fn unread_format(data: &[u8]) -> Option<&'static str> {
    const JXL_BOX: &[u8] = b"\0\0\0\x0cJXL \r\n\x87\n";
    const JP2_BOX: &[u8] = b"\0\0\0\x0cjP  \r\n\x87\n";
    if data.starts_with(b"\xff\x0a") || data.starts_with(JXL_BOX) {
        return Some("JPEG XL");
    }
    if data.starts_with(JP2_BOX) || data.starts_with(b"\xff\x4f\xff\x51") {
        return Some("JPEG 2000");
    }
    // An ISO base media file: a `ftyp` box first, its major brand after it.
    if data.get(4..8) != Some(b"ftyp") {
        return None;
    }
    match data.get(8..12)? {
        b"heic" | b"heix" | b"heim" | b"heis" | b"hevc" | b"hevx" | b"hevm" | b"hevs" | b"mif1"
        | b"msf1" | b"mif2" => Some("HEIC/HEIF"),
        b"avif" | b"avis" => Some("AVIF"),
        _ => None,
    }
}

/// Why a TIFF `data` is a camera RAW file rather than an image to train on, when it is: a
/// DNG (its `DNGVersion` tag), a Canon CR2, or one whose first image is marked a
/// reduced-resolution preview (`NewSubfileType` bit 0, as NEF, ARW and most DNGs have).
/// The `image` crate decodes that first image: a thumbnail stored as the photo, under its
/// label, beside the JPEG that a camera's RAW+JPEG folder also holds.
pub(super) fn camera_raw(data: &[u8]) -> Option<&'static str> {
    let le = match data.get(..4)? {
        b"II*\0" => true,
        b"MM\0*" => false,
        _ => return None,
    };
    if data.get(8..10) == Some(b"CR") {
        return Some("Canon CR2");
    }
    let u16_at = |at: usize| {
        let b: [u8; 2] = data.get(at..at.checked_add(2)?)?.try_into().ok()?;
        Some(if le {
            u16::from_le_bytes(b)
        } else {
            u16::from_be_bytes(b)
        })
    };
    let u32_at = |at: usize| {
        let b: [u8; 4] = data.get(at..at.checked_add(4)?)?.try_into().ok()?;
        Some(if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        })
    };
    let ifd = usize::try_from(u32_at(4)?).ok()?;
    let entries = u16_at(ifd)?;
    let mut preview = false;
    for i in 0..usize::from(entries) {
        let Some(entry) = ifd.checked_add(2 + 12 * i) else {
            break;
        };
        match u16_at(entry) {
            // DNGVersion: named rather than the preview, which comes first in tag order.
            Some(50706) => return Some("DNG"),
            // NewSubfileType: a LONG, or a SHORT in files that bend the rule.
            Some(254) => {
                let value = match u16_at(entry + 2) {
                    Some(3) => u16_at(entry + 8).map(u32::from),
                    _ => u32_at(entry + 8),
                };
                preview |= value.is_some_and(|v| v & 1 == 1);
            }
            Some(_) => {}
            None => break,
        }
    }
    preview.then_some("its first image is a reduced-resolution preview")
}

/// Whether `data` is a macOS AppleDouble file (`._IMG_0001.jpg`: the resource fork and
/// attributes of `IMG_0001.jpg`, which macOS writes beside each file it copies to a disk
/// or into a tar that cannot hold them): named as an image, no image.
pub(super) fn apple_double(data: &[u8]) -> bool {
    data.starts_with(b"\0\x05\x16\x07")
}

/// The skip reason of a camera RAW file ([`camera_raw`] says `why`).
pub(super) fn camera_raw_reason(why: &str) -> String {
    format!(
        "camera RAW file ({why}): stoker does not develop RAW images, and the preview inside \
         is not the photo; convert the JPEGs a camera writes beside them, or develop them \
         to JPEG first"
    )
}

/// Whether `name` has an image file's extension (of a format stoker reads or not):
/// `--strict` fails on such a file that cannot be converted, and only skips a file of an
/// image folder that neither reads nor is named as an image (`.DS_Store`, `Thumbs.db`,
/// `README.txt`), which torchvision's `ImageFolder` would not have looked at either, or
/// a hidden one (macOS's `._IMG_0001.jpg`).
pub(super) fn named_as_image(name: &Path) -> bool {
    const EXTENSIONS: [&str; 38] = [
        "jpg", "jpeg", "jpe", "jfif", "jfi", "pjpeg", "pjp", "png", "apng", "webp", "bmp", "dib",
        "gif", "tif", "tiff", "ppm", "pgm", "pbm", "pnm", "pam", "heic", "heif", "avif", "jxl",
        "jp2", "j2k", "dng", "cr2", "cr3", "nef", "arw", "orf", "rw2", "raf", "tga", "exr", "ico",
        "qoi",
    ];
    name.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| EXTENSIONS.iter().any(|x| x.eq_ignore_ascii_case(e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A little-endian TIFF header and IFD0 of `entries` (tag, type, value).
    fn tiff(entries: &[(u16, u16, u32)]) -> Vec<u8> {
        let mut t = b"II*\0\x08\0\0\0".to_vec();
        t.extend_from_slice(&(entries.len() as u16).to_le_bytes());
        for &(tag, ty, value) in entries {
            t.extend_from_slice(&tag.to_le_bytes());
            t.extend_from_slice(&ty.to_le_bytes());
            t.extend_from_slice(&1u32.to_le_bytes());
            t.extend_from_slice(&value.to_le_bytes());
        }
        t.extend_from_slice(&[0; 4]);
        t
    }

    #[test]
    fn camera_raw_files_are_told_from_plain_tiffs() {
        assert_eq!(
            camera_raw(&tiff(&[(256, 3, 4), (50706, 1, 0x0104)])),
            Some("DNG")
        );
        assert!(
            camera_raw(&tiff(&[(254, 4, 1), (256, 3, 4)])).is_some_and(|w| w.contains("preview"))
        );
        assert!(camera_raw(&tiff(&[(254, 3, 1)])).is_some());
        // A full-resolution first image (0), or a page of a multi-page TIFF (2), is a photo.
        assert_eq!(camera_raw(&tiff(&[(254, 4, 0), (256, 3, 4)])), None);
        assert_eq!(camera_raw(&tiff(&[(254, 4, 2)])), None);
        let mut cr2 = tiff(&[(256, 3, 4)]);
        cr2[8..10].copy_from_slice(b"CR");
        assert_eq!(camera_raw(&cr2), Some("Canon CR2"));
        // Cut short or pointing past the end: not RAW, and no panic.
        let t = tiff(&[(50706, 1, 0)]);
        for n in 0..t.len() {
            let _ = camera_raw(&t[..n]);
        }
        assert_eq!(camera_raw(b"II*\0\xff\xff\xff\xff"), None);
        assert_eq!(camera_raw(b"\xff\xd8\xff"), None);
    }

    #[test]
    fn unread_formats_are_named() {
        assert_eq!(
            unread_format(b"\0\0\0\x18ftypheic\0\0\0\0mif1heic"),
            Some("HEIC/HEIF")
        );
        assert_eq!(
            unread_format(b"\0\0\0\x18ftypmif1\0\0\0\0"),
            Some("HEIC/HEIF")
        );
        assert_eq!(unread_format(b"\xff\x0a\xfa\x7f"), Some("JPEG XL"));
        assert_eq!(
            unread_format(b"\0\0\0\x0cJXL \r\n\x87\n\0"),
            Some("JPEG XL")
        );
        assert_eq!(
            unread_format(b"\0\0\0\x0cjP  \r\n\x87\n"),
            Some("JPEG 2000")
        );
        // An MP4 video, a JPEG: not named here.
        assert_eq!(unread_format(b"\0\0\0\x18ftypisom\0\0\0\0"), None);
        assert_eq!(unread_format(b"\xff\xd8\xff\xe0"), None);
    }

    #[test]
    fn apple_double_files_are_told_by_their_magic() {
        assert!(apple_double(b"\0\x05\x16\x07\0\x02\0\0Mac OS X"));
        assert!(!apple_double(b"\xff\xd8\xff"));
        assert!(!apple_double(b"\0\x05"));
    }

    #[test]
    fn names_that_say_image() {
        for yes in ["a.jpg", "b.JPEG", "c.Jpe", "d.heic", "e.DNG", "dir/f.png"] {
            assert!(named_as_image(Path::new(yes)), "{yes}");
        }
        for no in [
            ".DS_Store",
            "Thumbs.db",
            "README.txt",
            "labels",
            "x.jpg.txt",
            ".jpg",
        ] {
            assert!(!named_as_image(Path::new(no)), "{no}");
        }
    }
}
