//! A TIFF's first directory, checked before the `image` crate reads it.
//!
//! The `tiff` crate reserves memory for a directory entry's values from the count the entry
//! declares, up to its default limit of 256 MiB: `image` passes its own limits only once
//! the directory is read. So one damaged count in a file of a few hundred bytes made a
//! conversion worker allocate 100–200 MB (`formats/tests/image_damage.rs` found it), and
//! every worker of a conversion could do so at once. An entry whose values need more bytes
//! than the whole file holds cannot be read from it: that is damage, refused here.

/// Bytes of one value of TIFF field type `ty`, for the types the `tiff` crate reads (it
/// skips entries of other types without reading their values).
fn type_size(ty: u64) -> Option<u64> {
    match ty {
        1 | 2 | 6 | 7 => Some(1),
        3 | 8 => Some(2),
        4 | 9 | 11 | 13 => Some(4),
        5 | 10 | 12 | 16 | 17 | 18 => Some(8),
        _ => None,
    }
}

/// Why `data`, a TIFF or BigTIFF by its header, is damaged: an entry of its first directory
/// whose values need more bytes than the file has. `None` when every entry fits, and for
/// what is no TIFF or whose directory cannot be found (the decoder says why).
pub(super) fn overlong_entry(data: &[u8]) -> Option<String> {
    let (little, big) = match data.get(..4)? {
        b"II*\0" => (true, false),
        b"MM\0*" => (false, false),
        b"II+\0" => (true, true),
        b"MM\0+" => (false, true),
        _ => return None,
    };
    // An unsigned integer of `len` bytes at `at`, in the file's byte order.
    let read = |at: u64, len: usize| -> Option<u64> {
        let at = usize::try_from(at).ok()?;
        let bytes = data.get(at..at.checked_add(len)?)?;
        let fold = |v: u64, &b: &u8| (v << 8) | u64::from(b);
        Some(if little {
            bytes.iter().rev().fold(0, fold)
        } else {
            bytes.iter().fold(0, fold)
        })
    };
    // Classic TIFF: a 4-byte directory offset at 4, a 2-byte entry count, 12-byte entries
    // with 4-byte counts and values. BigTIFF: an 8-byte offset at 8, an 8-byte count,
    // 20-byte entries with 8-byte counts and values.
    let (directory, count_len, entry_len, field_len) = if big {
        (read(8, 8)?, 8, 20, 8)
    } else {
        (read(4, 4)?, 2, 12, 4)
    };
    let entries = read(directory, count_len)?;
    let file = data.len() as u64;
    let first = directory.checked_add(count_len as u64)?;
    for i in 0..entries {
        // Past the end of the file the decoder fails by itself, allocating nothing more.
        let at = first.checked_add(i.checked_mul(entry_len)?)?;
        let (Some(tag), Some(ty), Some(count)) =
            (read(at, 2), read(at + 2, 2), read(at + 4, field_len))
        else {
            return None;
        };
        let Some(size) = type_size(ty) else {
            continue;
        };
        let bytes = count.saturating_mul(size);
        if bytes > field_len as u64 && bytes > file {
            return Some(format!(
                "its first directory's entry for tag {tag} declares {count} values \
                 ({bytes} bytes), more than the file's {file} bytes"
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A classic TIFF of one directory with `entries` (tag, type, count, value), in the
    /// byte order `little` says, padded to `len` bytes.
    fn tiff(little: bool, entries: &[(u16, u16, u32, u32)], len: usize) -> Vec<u8> {
        let u16b = |v: u16| {
            if little {
                v.to_le_bytes()
            } else {
                v.to_be_bytes()
            }
        };
        let u32b = |v: u32| {
            if little {
                v.to_le_bytes()
            } else {
                v.to_be_bytes()
            }
        };
        let mut t = if little {
            b"II*\0".to_vec()
        } else {
            b"MM\0*".to_vec()
        };
        t.extend_from_slice(&u32b(8));
        t.extend_from_slice(&u16b(entries.len() as u16));
        for &(tag, ty, count, value) in entries {
            t.extend_from_slice(&u16b(tag));
            t.extend_from_slice(&u16b(ty));
            t.extend_from_slice(&u32b(count));
            t.extend_from_slice(&u32b(value));
        }
        t.extend_from_slice(&[0; 4]);
        t.resize(len.max(t.len()), 0);
        t
    }

    #[test]
    fn entries_that_fit_in_the_file_pass() {
        // Width, height, a LONG value inline, 3 SHORTs (6 bytes) and 100 BYTEs at offsets.
        let entries = [
            (256, 3, 1, 23),
            (257, 4, 1, 17),
            (258, 3, 3, 60),
            (700, 1, 100, 70),
        ];
        assert_eq!(overlong_entry(&tiff(true, &entries, 200)), None);
        assert_eq!(overlong_entry(&tiff(false, &entries, 200)), None);
        // Unknown types are skipped by the decoder, whatever their count.
        assert_eq!(
            overlong_entry(&tiff(true, &[(256, 99, u32::MAX, 0)], 64)),
            None
        );
        // Not a TIFF, or a directory past the end: for the decoder to say.
        assert_eq!(overlong_entry(b"\x89PNG\r\n\x1a\n"), None);
        let mut far = tiff(true, &entries, 64);
        far[4..8].copy_from_slice(&4000u32.to_le_bytes());
        assert_eq!(overlong_entry(&far), None);
    }

    #[test]
    fn an_entry_claiming_more_bytes_than_the_file_is_named() {
        for little in [true, false] {
            // 4,783,009 SHORTs: 9.6 MB of values in a 200-byte file.
            let t = tiff(little, &[(256, 3, 1, 23), (278, 3, 4_783_009, 40)], 200);
            let why = overlong_entry(&t).expect("refused");
            assert!(
                why.contains("tag 278") && why.contains("9566018 bytes") && why.contains("200"),
                "{why}"
            );
        }
        // Just past the file: 201 BYTEs in 200 bytes.
        assert!(overlong_entry(&tiff(true, &[(700, 7, 201, 8)], 200)).is_some());
        assert!(overlong_entry(&tiff(true, &[(700, 7, 200, 8)], 200)).is_none());
        // The largest count a classic TIFF holds, of RATIONALs: 32 GiB.
        assert!(overlong_entry(&tiff(true, &[(273, 5, u32::MAX, 8)], 200)).is_some());
    }

    #[test]
    fn bigtiff_entries_are_checked_with_their_eight_byte_counts() {
        let mut t = b"II+\0\x08\0\0\0".to_vec();
        t.extend_from_slice(&16u64.to_le_bytes());
        t.extend_from_slice(&1u64.to_le_bytes());
        t.extend_from_slice(&273u16.to_le_bytes());
        t.extend_from_slice(&16u16.to_le_bytes());
        t.extend_from_slice(&(1u64 << 40).to_le_bytes());
        t.extend_from_slice(&64u64.to_le_bytes());
        t.extend_from_slice(&[0; 8]);
        let why = overlong_entry(&t).expect("refused");
        assert!(
            why.contains("tag 273") && why.contains("1099511627776 values"),
            "{why}"
        );
        // The same entry with one value fits inline.
        t[28..36].copy_from_slice(&1u64.to_le_bytes());
        assert_eq!(overlong_entry(&t), None);
    }
}
