//! Finding a quoted field whose quote is never closed.
//!
//! The csv crate reads such a field to the end of the file and reports nothing: every line
//! after the quote becomes part of one value. Only the file's last record can be one (it runs
//! to the end), so the index scan checks that record once, with this small model of the
//! parser's quoting (double quotes, `""` inside quotes, no escape character), and it stops at
//! the record's end: the cost is the last record's bytes.

use sluice_core::Result;

use crate::compressed::Input;

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before a record's first byte: blank lines are skipped here.
    RecordStart,
    FieldStart,
    Unquoted,
    Quoted,
    /// A quote inside a quoted field: it closes the field unless another quote follows.
    QuoteInQuoted,
}

/// Bytes read per step of the walk.
const CHUNK: usize = 64 << 10;

/// The line on which a record starting at byte `offset` (on line `line`) opens a quote that
/// is still open at the end of `input`, if it does.
pub(super) fn unterminated_quote(
    input: &Input,
    offset: u64,
    line: u32,
    delimiter: u8,
) -> Result<Option<u32>> {
    let size = input.size()?;
    let (mut state, mut line, mut opened, mut pos) = (State::RecordStart, line, line, offset);
    while pos < size {
        let n = (size - pos).min(CHUNK as u64) as usize;
        for &b in input.read_at(pos, n)?.iter() {
            let newline = b == b'\n' || b == b'\r';
            state = match state {
                State::RecordStart | State::FieldStart if b == b'"' => {
                    opened = line;
                    State::Quoted
                }
                State::RecordStart if newline => State::RecordStart,
                State::Quoted if b == b'"' => State::QuoteInQuoted,
                State::Quoted => State::Quoted,
                State::QuoteInQuoted if b == b'"' => State::Quoted,
                _ if newline => return Ok(None),
                _ if b == delimiter => State::FieldStart,
                _ => State::Unquoted,
            };
            line += u32::from(b == b'\n');
        }
        pos += n as u64;
    }
    Ok((state == State::Quoted).then_some(opened))
}
