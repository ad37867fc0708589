//! Text taken from inside a file (a tar member's name, a header field, a CSV value) as it may
//! appear in an error message: printable and short.
//!
//! A corrupt or hostile file can hold any bytes. Echoed raw, control bytes would move the
//! cursor, recolour or clear a terminal and forge log lines, and a multi-megabyte field would
//! bury the message. So every such fragment goes through [`show`] or [`show_bytes`]: control
//! characters and invisible direction/format characters become `\xNN` / `\u{NNNN}` escapes,
//! bytes that are not UTF-8 become `\xNN`, and the result is cut at [`MAX_SHOWN`] characters.

use std::fmt::Write;

/// Characters of file content shown in a message before it is cut with `…`.
pub const MAX_SHOWN: usize = 120;

/// Whether `c` would be invisible or act on the terminal rather than print.
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{200B}'..='\u{200F}' // zero-width characters, direction marks
            | '\u{2028}'..='\u{202E}' // line/paragraph separators, bidi embeddings/overrides
            | '\u{2060}'..='\u{2069}' // word joiner, bidi isolates
            | '\u{FEFF}' // byte order mark
        )
}

/// Appends `text` escaped, counting characters in `shown`; `false` once the cut is reached.
fn push_escaped(out: &mut String, text: &str, shown: &mut usize) -> bool {
    for c in text.chars() {
        if *shown >= MAX_SHOWN {
            return false;
        }
        *shown += 1;
        if !needs_escape(c) {
            out.push(c);
        } else if (c as u32) < 0x100 {
            let _ = write!(out, "\\x{:02x}", c as u32);
        } else {
            let _ = write!(out, "\\u{{{:04x}}}", c as u32);
        }
    }
    true
}

/// `text` made printable and cut at [`MAX_SHOWN`] characters.
///
/// ```
/// use sluice_io::show::show;
/// assert_eq!(show("a\x1b[2Jb\n"), "a\\x1b[2Jb\\x0a");
/// assert_eq!(show(&"x".repeat(500)).chars().count(), sluice_io::show::MAX_SHOWN + 1);
/// ```
pub fn show(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_SHOWN * 2));
    let mut shown = 0;
    if !push_escaped(&mut out, text, &mut shown) {
        out.push('…');
    }
    out
}

/// Raw bytes made printable: UTF-8 runs as [`show`] prints them, other bytes as `\xNN`.
///
/// ```
/// use sluice_io::show::show_bytes;
/// assert_eq!(show_bytes(b"ok\xff\x07"), "ok\\xff\\x07");
/// ```
pub fn show_bytes(bytes: &[u8]) -> String {
    let mut out = String::new();
    let mut shown = 0;
    for chunk in bytes.utf8_chunks() {
        if !push_escaped(&mut out, chunk.valid(), &mut shown) {
            out.push('…');
            return out;
        }
        for b in chunk.invalid() {
            if shown >= MAX_SHOWN {
                out.push('…');
                return out;
            }
            shown += 1;
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_text_is_unchanged() {
        assert_eq!(show("cat/0001.jpg"), "cat/0001.jpg");
        assert_eq!(show("naïve – ok"), "naïve – ok");
    }

    #[test]
    fn controls_and_invisible_characters_are_escaped() {
        assert_eq!(show("\0\r\t\x7f"), "\\x00\\x0d\\x09\\x7f");
        assert_eq!(show("\u{9b}31m"), "\\x9b31m");
        assert_eq!(show("evil\u{202e}gpj.exe"), "evil\\u{202e}gpj.exe");
        let s = show_bytes(&[0x1b, b'[', b'H', 0xc3, 0x28, b'a']);
        assert_eq!(s, "\\x1b[H\\xc3(a");
        assert!(s.chars().all(|c| !c.is_control()));
    }

    #[test]
    fn long_fragments_are_cut() {
        let s = show_bytes(&[0xffu8; 10_000]);
        assert!(s.ends_with('…'));
        assert_eq!(s.matches("\\xff").count(), MAX_SHOWN);
    }
}
