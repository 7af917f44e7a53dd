//! The members of a tar archive, read header by header with positioned reads: each
//! member's name, type and the byte range of its data, which the converter later reads in
//! place (nothing is extracted, and member data is never read here).
//!
//! Reads POSIX ustar (with its name prefix), GNU (long names, base-256 sizes, sparse
//! members skipped whole) and PAX (`path` and `size` records of an extended header; the
//! `GNU.sparse.*` ones mark a sparse member and give its name), as
//! Python's `tarfile` and GNU tar write them. Every header is checked (its checksum, its
//! numeric fields) and every size against the file's length before it is used, so a damaged
//! or hostile file is a [`Damage`] naming the byte where it went wrong, never a read or an
//! allocation of what a header claims: the only data held is an extended header's, at most
//! [`MAX_EXTENSION_BYTES`]. Each step moves at least one 512-byte block forward, so a walk
//! ends within `len / 512` steps.
//!
//! Why not the `tar` crate: it reads GNU long-name and PAX extended headers whole into
//! memory (`read_all`, no limit), and in its raw mode, where we could bound those reads
//! ourselves, it places the next header by the ustar size field and ignores a PAX `size`,
//! misreading valid archives; its errors do not say at which byte. The tests build their
//! archives with the `tar` crate and Python's `tarfile`, so this reader is checked against
//! two independent writers.

use std::fs::File;
use std::os::unix::fs::FileExt;

/// Tar's block: headers start on multiples of it and data is padded to it.
const BLOCK: u64 = 512;

/// Largest GNU long-name or PAX extended header read (its data is held while the member
/// it describes is read). A path is at most 4 KiB on Linux; PAX headers holding extended
/// attributes are larger, but far below this.
pub(crate) const MAX_EXTENSION_BYTES: u64 = 1 << 20;

/// Longest member name kept (Linux's `PATH_MAX`): a longer one is cut to its first
/// [`NAME_SHOWN`] bytes, `...` and its last [`NAME_TAIL`] as soon as it is read, so what a listing holds per member does not
/// grow with names a PAX header or GNU long name may make up to [`MAX_EXTENSION_BYTES`].
pub(crate) const MAX_NAME_BYTES: usize = 4096;

/// Bytes kept of the start of a name over [`MAX_NAME_BYTES`], to name it in a skip reason.
pub(crate) const NAME_SHOWN: usize = 100;

/// Bytes kept of its end: its extension, which tells a sample's members apart.
const NAME_TAIL: usize = 16;

/// What a member is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A regular file (types `0`, NUL and `7`, contiguous): its data can be an input.
    File,
    /// A directory entry.
    Directory,
    /// Anything else, as words for a skip reason ("a symbolic link").
    Other(&'static str),
}

/// One member of the archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Member {
    /// Its path in the archive, as stored (a PAX `path` or GNU long name when there is one);
    /// cut (see [`MAX_NAME_BYTES`]) when `name_bytes` is over it.
    pub name: Vec<u8>,
    /// The length of the name as stored.
    pub name_bytes: usize,
    pub kind: Kind,
    /// Where its data starts in the file.
    pub offset: u64,
    /// Bytes of data; `offset + size` is within the file.
    pub size: u64,
}

/// Why the walk stopped before the end of the archive. Nothing after `at` is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Damage {
    /// The byte where the header that could not be used starts.
    pub at: u64,
    /// The member that header describes, when its name could be read.
    pub member: Option<Vec<u8>>,
    pub reason: String,
}

/// How a finished walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// Not finished yet.
    NotYet,
    /// At a zero block: tar's end-of-archive marker.
    Marker,
    /// At the end of the file, on a header boundary, without the marker: a writer that
    /// leaves it out, or an archive cut short between two members.
    Eof,
}

/// Walks the members of one tar file.
pub(crate) struct TarMembers<'f> {
    file: &'f File,
    /// The file's length when the walk began: nothing at or past it is read.
    len: u64,
    /// Where the next header starts.
    pos: u64,
    end: End,
}

/// What extended headers said about the member that follows them.
#[derive(Default)]
struct Pending {
    long_name: Option<Vec<u8>>,
    pax_path: Option<Vec<u8>>,
    pax_size: Option<u64>,
    /// A PAX header had `GNU.sparse.*` records: GNU tar's `--sparse` in POSIX format, whose
    /// data is a sparse map and the stored parts, not the file.
    sparse: bool,
    /// The member's real name under PAX sparse (`GNU.sparse.name`); the header's is
    /// `GNUSparseFile.PID/...`.
    sparse_name: Option<Vec<u8>>,
    /// Where the first of them starts, for a damage report.
    from: Option<u64>,
}

/// The fields of one header block that the walk uses.
struct Header {
    name: Vec<u8>,
    size: u64,
    typeflag: u8,
    /// GNU sparse: more sparse-map blocks follow the header.
    sparse_extended: bool,
}

impl<'f> TarMembers<'f> {
    /// A walk of `file`, `len` bytes long, from its start.
    pub(crate) fn new(file: &'f File, len: u64) -> Self {
        TarMembers {
            file,
            len,
            pos: 0,
            end: End::NotYet,
        }
    }

    /// How the walk ended (`NotYet` until [`TarMembers::next_member`] returned `None`).
    pub(crate) fn end(&self) -> End {
        self.end
    }

    /// The next member, `None` at the end of the archive.
    ///
    /// # Errors
    ///
    /// [`Damage`] when a header cannot be used; the walk is over then (it returns `None`
    /// after), since where the next header starts is no longer known.
    pub(crate) fn next_member(&mut self) -> Result<Option<Member>, Damage> {
        if self.end != End::NotYet {
            return Ok(None);
        }
        let result = self.walk();
        if result.is_err() {
            self.end = End::Eof;
            self.pos = self.len;
        }
        result
    }

    fn walk(&mut self) -> Result<Option<Member>, Damage> {
        let mut pending = Pending::default();
        loop {
            let at = self.pos;
            let Some(block) = self.block(at)? else {
                return self.finish(End::Eof, &pending);
            };
            if block.iter().all(|&b| b == 0) {
                return self.finish(End::Marker, &pending);
            }
            let header = parse_header(&block).map_err(|reason| {
                // A compressed shard named `.tar`, or given as the source itself: the
                // header's own complaint would not say why.
                let reason = match compression(&block) {
                    Some(kind) if at == 0 => format!(
                        "a {kind}-compressed file, not a tar archive: stoker reads each member in place, which a compressed stream does not allow; decompress it first (gunzip, zstd -d), then convert the .tar file"
                    ),
                    _ => reason,
                };
                damage(at, None, reason)
            })?;
            let data = at + BLOCK;
            match header.typeflag {
                b'L' | b'x' | b'X' => {
                    pending.from.get_or_insert(at);
                    let bytes = self.extension(at, &header)?;
                    if header.typeflag == b'L' {
                        pending.long_name = Some(until_nul(&bytes).to_vec());
                    } else {
                        read_pax(&bytes, &mut pending)
                            .map_err(|reason| damage(at, None, reason))?;
                    }
                    continue;
                }
                // A GNU long link name (only links have one) and a PAX global header
                // (GNU tar also ignores its `path`): nothing a member of ours uses.
                b'K' | b'g' => {
                    self.pos = self.data_end(at, &header.name, data, header.size)?;
                    continue;
                }
                _ => {}
            }
            let mut name = (pending.sparse_name.take())
                .or(pending.pax_path.take())
                .or(pending.long_name.take())
                .unwrap_or(header.name);
            let name_bytes = name.len();
            if name_bytes > MAX_NAME_BYTES {
                name = [&name[..NAME_SHOWN], b"...", &name[name_bytes - NAME_TAIL..]].concat();
            }
            let size = pending.pax_size.unwrap_or(header.size);
            let kind = match kind_of(header.typeflag, &name) {
                Kind::File if pending.sparse => Kind::Other(SPARSE),
                kind => kind,
            };
            let mut offset = data;
            if header.sparse_extended {
                offset = self.skip_sparse_map(at, &name, data)?;
            }
            // Python's tarfile (and so WebDataset's readers) takes data to follow only
            // regular files and types it does not know; links, directories, devices and
            // FIFOs have none whatever their size field says.
            let stored = match kind {
                Kind::File => size,
                Kind::Other(_) if !has_no_data(header.typeflag) => size,
                _ => 0,
            };
            self.pos = self.data_end(at, &name, offset, stored)?;
            return Ok(Some(Member {
                name,
                name_bytes,
                kind,
                offset,
                size: stored,
            }));
        }
    }

    /// Ends the walk at `end`, unless extended headers were waiting for their member.
    fn finish(&mut self, end: End, pending: &Pending) -> Result<Option<Member>, Damage> {
        if let Some(from) = pending.from {
            return Err(damage(
                from,
                None,
                "the archive ends after an extended header (a long name or PAX header), before the member it describes".into(),
            ));
        }
        self.end = end;
        Ok(None)
    }

    /// The 512-byte block at `at`; `None` when `at` is the end of the file.
    fn block(&self, at: u64) -> Result<Option<[u8; BLOCK as usize]>, Damage> {
        if at >= self.len {
            return Ok(None);
        }
        if self.len - at < BLOCK && at == 0 {
            return Err(damage(
                at,
                None,
                format!(
                    "not a tar archive: {} bytes, shorter than one 512-byte tar header",
                    self.len
                ),
            ));
        }
        if self.len - at < BLOCK {
            return Err(damage(
                at,
                None,
                format!(
                    "the file is cut short inside a header ({} of its 512 bytes)",
                    self.len - at
                ),
            ));
        }
        let mut block = [0u8; BLOCK as usize];
        self.file
            .read_exact_at(&mut block, at)
            .map_err(|e| damage(at, None, format!("unreadable: {e}")))?;
        Ok(Some(block))
    }

    /// Where the next header starts after `size` bytes of data at `offset` (padded to a
    /// block); damage when the data runs past the end of the file.
    fn data_end(&self, at: u64, name: &[u8], offset: u64, size: u64) -> Result<u64, Damage> {
        let end = offset.checked_add(size).filter(|&e| e <= self.len);
        let Some(end) = end else {
            return Err(damage(
                at,
                Some(name.to_vec()),
                format!(
                    "the file is cut short: the header at byte {at} gives {} {size} bytes of data from byte {offset}, past the end of the file ({} bytes)",
                    String::from_utf8_lossy(name),
                    self.len
                ),
            ));
        };
        // `end <= len <= u64::MAX`, and rounding up adds less than a block.
        Ok(end.div_ceil(BLOCK).saturating_mul(BLOCK))
    }

    /// The data of the extended header at `at`, read after checking its size.
    fn extension(&mut self, at: u64, header: &Header) -> Result<Vec<u8>, Damage> {
        if header.size > MAX_EXTENSION_BYTES {
            return Err(damage(
                at,
                None,
                format!(
                    "its extended header (a long name or PAX header) holds {} bytes, over the limit of {MAX_EXTENSION_BYTES}",
                    header.size
                ),
            ));
        }
        let data = at + BLOCK;
        self.pos = self.data_end(at, &header.name, data, header.size)?;
        let mut bytes = vec![0u8; header.size as usize];
        self.file
            .read_exact_at(&mut bytes, data)
            .map_err(|e| damage(at, None, format!("unreadable: {e}")))?;
        Ok(bytes)
    }

    /// Skips the sparse-map blocks after a GNU sparse header; where its data starts.
    fn skip_sparse_map(&self, at: u64, name: &[u8], mut next: u64) -> Result<u64, Damage> {
        loop {
            let Some(block) = self.block(next)? else {
                return Err(damage(
                    at,
                    Some(name.to_vec()),
                    "the file is cut short inside a sparse member's map".into(),
                ));
            };
            next += BLOCK;
            // The map block's "isextended" byte: another block follows.
            if block[504] == 0 {
                return Ok(next);
            }
        }
    }
}

fn damage(at: u64, member: Option<Vec<u8>>, reason: String) -> Damage {
    Damage { at, member, reason }
}

/// Types whose data Python's tarfile does not skip: hard and symbolic links, character
/// and block devices, directories and FIFOs.
fn has_no_data(typeflag: u8) -> bool {
    matches!(typeflag, b'1'..=b'6')
}

/// A sparse member's kind, in GNU or PAX format: its data is not the file's bytes in
/// order, so it cannot be read in place.
const SPARSE: &str = "a sparse file (tar --sparse; re-create the shard without --sparse)";

fn kind_of(typeflag: u8, name: &[u8]) -> Kind {
    match typeflag {
        // An old (pre-POSIX) archive marks a directory by a trailing slash.
        b'0' | 0 | b'7' if name.ends_with(b"/") => Kind::Directory,
        b'0' | 0 | b'7' => Kind::File,
        b'5' => Kind::Directory,
        b'1' => Kind::Other("a hard link"),
        b'2' => Kind::Other("a symbolic link"),
        b'3' => Kind::Other("a character device"),
        b'4' => Kind::Other("a block device"),
        b'6' => Kind::Other("a FIFO"),
        b'S' => Kind::Other(SPARSE),
        _ => Kind::Other("a tar member of an unknown type"),
    }
}

/// The bytes of `field` before its first NUL.
fn until_nul(field: &[u8]) -> &[u8] {
    field.split(|&b| b == 0).next().unwrap_or(field)
}

/// The compression whose magic number `block` starts with, if any.
fn compression(block: &[u8]) -> Option<&'static str> {
    const MAGIC: [(&[u8], &str); 5] = [
        (&[0x1f, 0x8b], "gzip"),
        (&[0x28, 0xb5, 0x2f, 0xfd], "zstd"),
        (&[0xfd, b'7', b'z', b'X', b'Z', 0], "xz"),
        (b"BZh", "bzip2"),
        (&[0x04, 0x22, 0x4d, 0x18], "lz4"),
    ];
    MAGIC
        .iter()
        .find(|(magic, _)| block.starts_with(magic))
        .map(|&(_, kind)| kind)
}

/// Checks one header block and reads the fields the walk uses.
fn parse_header(block: &[u8; BLOCK as usize]) -> Result<Header, String> {
    let stored = octal(&block[148..156]).map_err(|_| {
        "not a tar header (its checksum field is not a number): not a tar archive, or a damaged one"
            .to_string()
    })?;
    // The checksum is the sum of the header's bytes with its own field taken as spaces;
    // some old writers summed them as signed bytes, which readers accept too.
    let (mut unsigned, mut signed) = (0u64, 0i64);
    for (i, &b) in block.iter().enumerate() {
        let b = if (148..156).contains(&i) { b' ' } else { b };
        unsigned += u64::from(b);
        signed += i64::from(b as i8);
    }
    if stored != unsigned && i64::try_from(stored).ok() != Some(signed) {
        return Err(format!(
            "bad header checksum (stored {stored}, computed {unsigned}): not a tar archive, or a damaged one"
        ));
    }
    let size = numeric(&block[124..136]).map_err(|e| format!("bad size field: {e}"))?;
    let mut name = until_nul(&block[..100]).to_vec();
    // POSIX ustar splits a long path into a prefix and a name; GNU's magic ("ustar  ")
    // uses those bytes for other fields.
    if &block[257..263] == b"ustar\0" {
        let prefix = until_nul(&block[345..500]);
        if !prefix.is_empty() {
            name = [prefix, b"/", &name].concat();
        }
    }
    Ok(Header {
        name,
        size,
        typeflag: block[156],
        sparse_extended: block[156] == b'S' && block[482] != 0,
    })
}

/// A numeric field: octal text (leading spaces, ended by a space or NUL; empty is 0), or
/// GNU's base-256 (first byte 0x80, then big-endian).
fn numeric(field: &[u8]) -> Result<u64, String> {
    match field.first() {
        Some(0x80) => {
            let mut v: u64 = 0;
            for &b in &field[1..] {
                v = v
                    .checked_mul(256)
                    .and_then(|v| v.checked_add(u64::from(b)))
                    .ok_or("over 2^64")?;
            }
            Ok(v)
        }
        Some(b) if b & 0x80 != 0 => Err("negative (base-256)".into()),
        _ => octal(field),
    }
}

/// Octal text: leading spaces, digits, then a space, a NUL or the end of the field.
fn octal(field: &[u8]) -> Result<u64, String> {
    let text = until_nul(field);
    let digits = text.trim_ascii();
    if digits.is_empty() {
        return Ok(0);
    }
    let mut v: u64 = 0;
    for &b in digits {
        if !(b'0'..=b'7').contains(&b) {
            return Err(format!("{:?} is not octal", String::from_utf8_lossy(text)));
        }
        v = v
            .checked_mul(8)
            .and_then(|v| v.checked_add(u64::from(b - b'0')))
            .ok_or("over 2^64")?;
    }
    Ok(v)
}

/// Reads the records of a PAX extended header (`LEN KEY=VALUE\n`, LEN counting the whole
/// record) into `pending`: `path` and `size`, the two that change which bytes a member is,
/// and GNU's sparse records, which make its bytes not the file's.
fn read_pax(mut bytes: &[u8], pending: &mut Pending) -> Result<(), String> {
    let bad = |what: &str| Err(format!("malformed PAX header: {what}"));
    while !bytes.is_empty() {
        let Some(space) = bytes.iter().position(|&b| b == b' ') else {
            return bad("a record without its length");
        };
        let len = std::str::from_utf8(&bytes[..space])
            .ok()
            .and_then(|s| s.parse::<usize>().ok());
        let Some(len) = len.filter(|&l| l > space + 1 && l <= bytes.len()) else {
            return bad("a record length that is not a number, or runs past the header");
        };
        let (record, rest) = bytes.split_at(len);
        bytes = rest;
        let Some(body) = record[space + 1..].strip_suffix(b"\n") else {
            return bad("a record not ended by a newline");
        };
        let Some(eq) = body.iter().position(|&b| b == b'=') else {
            return bad("a record without '='");
        };
        let (key, value) = (&body[..eq], &body[eq + 1..]);
        match key {
            // An empty value removes the keyword (POSIX): the header's own field stands.
            b"path" => pending.pax_path = (!value.is_empty()).then(|| value.to_vec()),
            b"size" if value.is_empty() => pending.pax_size = None,
            b"size" => {
                let size = std::str::from_utf8(value).ok().and_then(|s| s.parse().ok());
                match size {
                    Some(s) => pending.pax_size = Some(s),
                    None => return bad("a size that is not a decimal number"),
                }
            }
            // PAX sparse (formats 0.0 to 1.0): which records come depends on the version;
            // any of them makes the member sparse.
            b"GNU.sparse.name" => {
                pending.sparse = true;
                pending.sparse_name = (!value.is_empty()).then(|| value.to_vec());
            }
            k if k.starts_with(b"GNU.sparse.") => pending.sparse = true,
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ustar header block for `name` of `size` bytes and type `typeflag`, its checksum
    /// filled in.
    fn header(name: &[u8], size: u64, typeflag: u8) -> Vec<u8> {
        let mut b = vec![0u8; 512];
        b[..name.len()].copy_from_slice(name);
        if size < 8 << 30 {
            b[124..135].copy_from_slice(format!("{size:011o}").as_bytes());
        } else {
            // GNU base-256, as writers store sizes of 8 GiB and more.
            b[124] = 0x80;
            b[128..136].copy_from_slice(&size.to_be_bytes());
        }
        b[156] = typeflag;
        b[257..263].copy_from_slice(b"ustar\0");
        b[263..265].copy_from_slice(b"00");
        b[148..156].copy_from_slice(b"        ");
        let sum: u64 = b.iter().map(|&x| u64::from(x)).sum();
        b[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
        b
    }

    fn padded(data: &[u8]) -> Vec<u8> {
        let mut v = data.to_vec();
        v.resize(data.len().div_ceil(512) * 512, 0);
        v
    }

    fn walk(bytes: &[u8]) -> (Vec<Member>, Result<End, Damage>) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.tar");
        std::fs::write(&p, bytes).unwrap();
        let f = File::open(&p).unwrap();
        let mut w = TarMembers::new(&f, bytes.len() as u64);
        let mut members = Vec::new();
        loop {
            match w.next_member() {
                Ok(Some(m)) => members.push(m),
                Ok(None) => return (members, Ok(w.end())),
                Err(d) => return (members, Err(d)),
            }
        }
    }

    #[test]
    fn members_long_names_and_pax_records_are_read_with_their_ranges() {
        let mut t = header(b"a/1.jpg", 3, b'0');
        t.extend(padded(b"abc"));
        let long = vec![b'n'; 300];
        t.extend(header(b"././@LongLink", 301, b'L'));
        t.extend(padded(&[long.as_slice(), b"\0"].concat()));
        t.extend(header(b"short", 0, b'0'));
        let pax = b"16 path=pax.cls\n";
        t.extend(header(b"PaxHeader", pax.len() as u64, b'x'));
        t.extend(padded(pax));
        t.extend(header(b"ignored", 1, b'0'));
        t.extend(padded(b"7"));
        t.extend(header(b"link", 0, b'2'));
        t.extend([0u8; 1024]);
        let (m, end) = walk(&t);
        assert_eq!(end, Ok(End::Marker));
        let names: Vec<_> = m.iter().map(|m| m.name.clone()).collect();
        assert_eq!(
            names,
            [
                b"a/1.jpg".to_vec(),
                long,
                b"pax.cls".to_vec(),
                b"link".to_vec()
            ]
        );
        assert_eq!((m[0].offset, m[0].size, m[0].kind), (512, 3, Kind::File));
        assert_eq!(m[2].size, 1);
        assert_eq!(&t[m[2].offset as usize..][..1], b"7");
        assert_eq!(m[3].kind, Kind::Other("a symbolic link"));
    }

    /// GNU tar's `--sparse --format=posix` (1.0): the real name in `GNU.sparse.name`, the
    /// header's a `GNUSparseFile.PID/` one, the data a map then the stored parts. The
    /// member keeps its real name (its sample's key) and is not a file.
    #[test]
    fn a_pax_sparse_member_has_its_real_name_and_is_not_a_file() {
        let pax = b"22 GNU.sparse.major=1\n22 GNU.sparse.minor=0\n27 GNU.sparse.name=d/a.jpg\n";
        let mut t = header(b"PaxHeader", pax.len() as u64, b'x');
        t.extend(padded(pax));
        t.extend(header(b"d/GNUSparseFile.9644/a.jpg", 3, b'0'));
        t.extend(padded(b"1\n0"));
        t.extend(header(b"d/a.cls", 1, b'0'));
        t.extend(padded(b"7"));
        t.extend([0u8; 1024]);
        let (m, end) = walk(&t);
        assert_eq!(end, Ok(End::Marker));
        assert_eq!(
            (m[0].name.as_slice(), m[0].kind),
            (&b"d/a.jpg"[..], Kind::Other(SPARSE))
        );
        assert_eq!(
            (m[1].name.as_slice(), m[1].kind),
            (&b"d/a.cls"[..], Kind::File)
        );
    }

    /// `header` with the ustar prefix `prefix`, its checksum made again.
    fn with_prefix(mut b: Vec<u8>, prefix: &[u8]) -> Vec<u8> {
        b[345..345 + prefix.len()].copy_from_slice(prefix);
        b[148..156].copy_from_slice(b"        ");
        let sum: u64 = b.iter().map(|&x| u64::from(x)).sum();
        b[148..155].copy_from_slice(format!("{sum:06o}\0").as_bytes());
        b
    }

    /// A PAX `size` places the next header, not the ustar field: Python's tarfile writes
    /// a member of 8 GiB or more with its size in a PAX record only (the field is 0 here).
    #[test]
    fn a_pax_size_record_places_the_next_header() {
        let data = vec![b'd'; 1000];
        let pax = b"13 size=1000\n";
        let mut t = header(b"PaxHeader", pax.len() as u64, b'x');
        t.extend(padded(pax));
        t.extend(header(b"big.jpg", 0, b'0'));
        t.extend(padded(&data));
        t.extend(header(b"big.cls", 1, b'0'));
        t.extend(padded(b"7"));
        t.extend([0u8; 1024]);
        let (m, end) = walk(&t);
        assert_eq!(end, Ok(End::Marker));
        assert_eq!((m[0].offset, m[0].size), (1536, 1000));
        assert_eq!(m[1].name, b"big.cls");
        assert_eq!(&t[m[1].offset as usize..][..1], b"7");
    }

    /// POSIX ustar splits a name over 100 bytes into prefix and name: the member is their
    /// join, so `a/x.jpg` and `b/x.jpg` stay two samples.
    #[test]
    fn a_ustar_prefix_is_joined_to_the_name() {
        let mut t = with_prefix(header(b"x.jpg", 1, b'0'), b"a/long");
        t.extend(padded(b"1"));
        t.extend(with_prefix(header(b"x.jpg", 1, b'0'), b"b/long"));
        t.extend(padded(b"2"));
        t.extend([0u8; 1024]);
        let (m, end) = walk(&t);
        assert_eq!(end, Ok(End::Marker));
        let names: Vec<_> = m.iter().map(|m| m.name.clone()).collect();
        assert_eq!(names, [b"a/long/x.jpg".to_vec(), b"b/long/x.jpg".to_vec()]);
    }

    #[test]
    fn damage_is_named_at_its_byte_and_nothing_is_allocated_for_a_claimed_size() {
        // A 10 GiB member claimed in a 1 KiB file.
        let mut t = header(b"big.jpg", 10 << 30, b'0');
        t.extend([1u8; 512]);
        let (m, end) = walk(&t);
        assert!(m.is_empty());
        let d = end.unwrap_err();
        assert_eq!((d.at, d.member.as_deref()), (0, Some(&b"big.jpg"[..])));
        assert!(d.reason.contains("cut short"), "{}", d.reason);

        // A checksum that does not match, after one good member.
        let mut t = header(b"a.jpg", 1, b'0');
        t.extend(padded(b"x"));
        let mut bad = header(b"b.jpg", 1, b'0');
        bad[0] = b'c';
        t.extend(bad);
        let (m, end) = walk(&t);
        assert_eq!(m.len(), 1);
        let d = end.unwrap_err();
        assert_eq!(d.at, 1024);
        assert!(d.reason.contains("checksum"), "{}", d.reason);

        // Garbage, a header cut short, an extended header with no member after it, and
        // an oversized long name.
        let (_, end) = walk(&[0x55; 4096]);
        assert!(end.unwrap_err().reason.contains("not a tar"));
        let (_, end) = walk(&header(b"a", 0, b'0')[..300]);
        assert!(end.unwrap_err().reason.contains("shorter than one"));
        let mut t = header(b"a", 0, b'0');
        t.extend([0u8; 300]);
        let (_, end) = walk(&t);
        assert!(end.unwrap_err().reason.contains("inside a header"));
        let mut t = header(b"././@LongLink", 4, b'L');
        t.extend(padded(b"abc\0"));
        let (_, end) = walk(&t);
        assert!(end.unwrap_err().reason.contains("before the member"));
        let t = header(b"././@LongLink", MAX_EXTENSION_BYTES + 1, b'L');
        let (_, end) = walk(&t);
        assert!(end.unwrap_err().reason.contains("over the limit"));
    }

    #[test]
    fn a_compressed_shard_is_named_as_such() {
        // gzip's header, then deflate bytes: the tar checksum field was all that was said.
        let mut gz = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3];
        gz.resize(2048, 0x5a);
        let (members, end) = walk(&gz);
        let d = end.unwrap_err();
        assert!(members.is_empty() && d.at == 0, "{}", d.reason);
        assert!(d.reason.starts_with("a gzip-compressed file") && d.reason.contains("gunzip"));
        // Past the first header the same bytes are damage like any other.
        let mut tar = header(b"a.jpg", 3, b'0');
        tar.extend(padded(b"abc"));
        tar.extend(&gz);
        let d = walk(&tar).1.unwrap_err();
        assert!(d.at == 1024 && !d.reason.contains("gzip"), "{}", d.reason);
    }

    #[test]
    fn zeros_end_the_archive_and_a_missing_marker_is_told_apart() {
        let (m, end) = walk(&[0u8; 10240]);
        assert!(m.is_empty());
        assert_eq!(end, Ok(End::Marker));
        let mut t = header(b"a.jpg", 1, b'0');
        t.extend(padded(b"x"));
        let (m, end) = walk(&t);
        assert_eq!((m.len(), end), (1, Ok(End::Eof)));
        let (m, end) = walk(&[]);
        assert_eq!((m.len(), end), (0, Ok(End::Eof)));
    }

    #[test]
    fn numeric_fields_read_octal_and_base_256() {
        assert_eq!(numeric(b"00000000012\0"), Ok(10));
        assert_eq!(numeric(b"     12 \0\0\0\0"), Ok(10));
        assert_eq!(numeric(&[0; 12]), Ok(0));
        let mut b256 = [0u8; 12];
        b256[0] = 0x80;
        b256[8..].copy_from_slice(&[0x02, 0x00, 0x00, 0x01]);
        assert_eq!(numeric(&b256), Ok(0x0200_0001));
        b256[1] = 1;
        assert!(numeric(&b256).is_err());
        assert!(numeric(b"0000000009\0\0").is_err());
        assert!(numeric(&[0xff; 12]).is_err());
    }

    #[test]
    fn pax_records_are_checked() {
        let mut p = Pending::default();
        read_pax(b"18 path=a/b/c.jpg\n11 size=99\n", &mut p).unwrap();
        assert_eq!(
            (p.pax_path.as_deref(), p.pax_size),
            (Some(&b"a/b/c.jpg"[..]), Some(99))
        );
        for bad in [
            &b"8 path=a\n"[..],
            b"99 path=a\n",
            b"x path=a\n",
            b"10 size=z\n",
        ] {
            assert!(read_pax(bad, &mut Pending::default()).is_err(), "{bad:?}");
        }
    }
}
