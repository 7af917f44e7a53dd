//! Paths as text in messages and reports, without the loss of `Path::display`, and text
//! kept to one line.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// `name` (a class folder's, a path) as text without loss: valid UTF-8 as it is, each
/// other byte as `\xNN` (lower case hex), as Python's `name.encode("utf-8",
/// "surrogateescape").decode("utf-8", "backslashreplace")` spells it. Two folders whose
/// names differ only in such bytes keep different names (`to_string_lossy` would make
/// both `caf�`), and JSON, which holds only UTF-8, can hold any path this way.
pub fn lossless_text(name: &OsStr) -> String {
    let mut s = String::with_capacity(name.len());
    for chunk in name.as_bytes().utf8_chunks() {
        s.push_str(chunk.valid());
        for &b in chunk.invalid() {
            s.push_str(&format!("\\x{b:02x}"));
        }
    }
    s
}

/// [`lossless_text`] of a path as a method, for messages: `Path::display` writes U+FFFD
/// for each byte that is not UTF-8, so two inputs that differ only there read alike.
/// Control characters stay (the CLI's `output::Shown` also escapes them, for a terminal).
pub(crate) trait Lossless {
    /// See [`lossless_text`].
    fn lossless(&self) -> String;
}

impl Lossless for Path {
    fn lossless(&self) -> String {
        lossless_text(self.as_os_str())
    }
}

/// `text` with its control characters (a newline, ESC) written `\xNN`, as stoker writes the
/// bytes of a path that are not UTF-8: a message naming a file called `a.jpg\nb.jpg` would
/// forge a second line of output, and one holding ESC sequences would drive the terminal.
pub fn one_line(text: &str) -> String {
    if !text.chars().any(char::is_control) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        // Control characters (Unicode's Cc) all lie below U+00A0: two hex digits each.
        match c.is_control() {
            true => out.push_str(&format!("\\x{:02x}", c as u32)),
            false => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_names_keep_invalid_bytes_as_backslash_escapes() {
        let n = |b: &[u8]| lossless_text(OsStr::from_bytes(b));
        assert_eq!(n(b"caf\xe9"), "caf\\xe9");
        assert_eq!(n(b"caf\xea"), "caf\\xea");
        assert_eq!(n("éclair".as_bytes()), "éclair");
        // A cut-off multi-byte sequence: each of its bytes is escaped.
        assert_eq!(n(b"a\xe4\xb8"), "a\\xe4\\xb8");
    }

    #[test]
    fn one_line_escapes_control_characters_only() {
        assert_eq!(one_line("a.jpg\nb\u{1b}[31m"), "a.jpg\\x0ab\\x1b[31m");
        assert_eq!(one_line("caf\\xe9 é\ttab"), "caf\\xe9 é\\x09tab");
        assert_eq!(one_line("\u{85}"), "\\x85");
    }
}
