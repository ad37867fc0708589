//! Integers beyond int64 in JSON lines.
//!
//! serde_json reads an integer literal that does not fit in 64 bits as a float (and one in
//! u64 but not i64 as a u64, which [`Value`](sluice_core::Value) has no room for): written
//! `18446744073709551615`, it would arrive as `1.8446744073709552e19`. A sample's integers
//! are int64, so such a literal is refused (or, under a schema, read as the type asked for:
//! `"str"` keeps its digits). The parsed value no longer says what the literal was, so the
//! line's text is scanned for it — only when the parsed line holds a number that may have
//! been one (a u64 above `i64::MAX`, a float of magnitude 2^63 or more).

/// A literal outside int64 found in a line: the top-level field it is in, the literal as
/// written, and whether it is the field's whole value (not inside an array).
#[derive(Debug, PartialEq)]
pub(super) struct BigInt<'a> {
    pub key: String,
    pub literal: &'a str,
    pub whole: bool,
}

/// Whether the parsed line holds a number that may have been written as an integer outside
/// int64: serde_json reads one as a u64 above `i64::MAX` or as a float of magnitude 2^63 or
/// more. Only then is the line's text scanned ([`find`]), so ordinary lines pay nothing per
/// byte.
pub(super) fn may_hold(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Number(n) => {
            n.as_i64().is_none()
                && (n.is_u64()
                    || n.as_f64()
                        .is_some_and(|f| f.abs() >= 9.223_372_036_854_776e18))
        }
        serde_json::Value::Array(items) => items.iter().any(may_hold),
        serde_json::Value::Object(map) => map.values().any(may_hold),
        _ => false,
    }
}

/// Every integer literal outside int64 in `text`, a line already parsed as one JSON object
/// (so its tokens are well formed), with the top-level field holding it.
pub(super) fn find(text: &str) -> Vec<BigInt<'_>> {
    let b = text.as_bytes();
    let (mut i, mut depth, mut expect_key) = (0, 0usize, false);
    let mut key = String::new();
    let mut found = Vec::new();
    while i < b.len() {
        match b[i] {
            b'"' => {
                let start = i;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                if depth == 1 && expect_key {
                    key =
                        serde_json::from_str(&text[start..=i.min(b.len() - 1)]).unwrap_or_default();
                    expect_key = false;
                }
            }
            b'{' | b'[' => {
                depth += 1;
                expect_key = b[i] == b'{' && depth == 1;
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            b',' => expect_key = depth == 1,
            b'-' | b'0'..=b'9' => {
                let start = i;
                while i + 1 < b.len()
                    && matches!(b[i + 1], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
                {
                    i += 1;
                }
                let literal = &text[start..=i];
                let integer = !literal.contains(['.', 'e', 'E']);
                if integer && literal.parse::<i64>().is_err() {
                    found.push(BigInt {
                        key: key.clone(),
                        literal,
                        whole: depth == 1,
                    });
                }
            }
            _ => {}
        }
        i += 1;
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_literals_outside_int64_and_their_field() {
        let line = r#"{"a": 18446744073709551615, "s": "12345678901234567890", "b\u00e9": [1, 1208925819614629174706177], "f": 1.8446744073709552e19, "g": 12345678901234567890.5, "min": -9223372036854775808, "low": -9223372036854775809}"#;
        assert!(may_hold(&serde_json::from_str(line).unwrap()));
        let got = find(line);
        let got: Vec<_> = got
            .iter()
            .map(|b| (b.key.as_str(), b.literal, b.whole))
            .collect();
        assert_eq!(
            got,
            [
                ("a", "18446744073709551615", true),
                ("bé", "1208925819614629174706177", false),
                ("low", "-9223372036854775809", true)
            ]
        );
        let small = r#"{"a": 9223372036854775807, "x": [1.5, -2], "s": "18446744073709551615"}"#;
        assert!(!may_hold(&serde_json::from_str(small).unwrap()));
        // Escaped quotes do not end a string early.
        assert!(find(r#"{"s": "x\"18446744073709551615", "t": 1}"#).is_empty());
    }
}
