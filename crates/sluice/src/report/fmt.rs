//! Text as the page shows it: HTML escaping and numbers written the way the Python report
//! wrote them (`html.escape`, `f"{x:.3g}"`, `f"{x:,}"`, `repr(float)`, `json.dumps`), so a
//! page made by the CLI reads like one made by `ds.report(path)`.

use serde_json::Value;

/// `s` safe inside an element or a quoted attribute (`html.escape(s, quote=True)`).
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#x27;"),
            _ => out.push(c),
        }
    }
    out
}

/// The first `n` characters of `s` (not bytes: names may be any text).
pub(crate) fn prefix(s: &str, n: usize) -> &str {
    s.char_indices().nth(n).map_or(s, |(i, _)| &s[..i])
}

/// A figure for a person: `—` when unknown, `0`, whole numbers with thousands separators
/// from 10 000 up, else three significant digits.
pub(crate) fn num(x: Option<f64>) -> String {
    match x {
        Some(x) if x.is_finite() => {
            if x == 0.0 {
                "0".into()
            } else if x.abs() >= 1e4 {
                commas(&format!("{x:.0}"))
            } else {
                general(x, 3)
            }
        }
        _ => "—".into(),
    }
}

/// Python's `format(x, f".{p}g")` for a finite `x`: `p` significant digits, trailing zeros
/// dropped, exponent form below 1e-4 and from 10^p up.
pub(crate) fn general(x: f64, p: usize) -> String {
    let p = p.max(1);
    let sci = format!("{:.*e}", p - 1, x);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if exp < -4 || exp >= p as i32 {
        format!("{}{}", strip_zeros(mantissa), exponent(exp))
    } else {
        // Rounded at the same decimal place as `sci`, so the digits agree.
        strip_zeros(&format!("{:.*}", (p as i32 - 1 - exp) as usize, x)).to_string()
    }
}

fn strip_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// Python's exponent suffix: a sign and at least two digits (`e+05`, `e-10`).
fn exponent(exp: i32) -> String {
    format!(
        "e{}{:02}",
        if exp < 0 { '-' } else { '+' },
        exp.unsigned_abs()
    )
}

/// Thousands separators in the integer digits of a formatted number (`-1234567.5` →
/// `-1,234,567.5`); text without such digits comes back unchanged.
pub(crate) fn commas(s: &str) -> String {
    let start = usize::from(s.starts_with('-'));
    let end = s[start..]
        .find(|c: char| !c.is_ascii_digit())
        .map_or(s.len(), |i| start + i);
    let digits = &s[start..end];
    let mut out = String::with_capacity(s.len() + digits.len() / 3);
    out.push_str(&s[..start]);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out.push_str(&s[end..]);
    out
}

/// Python's `repr(x)` of a float (the Prometheus text prints numbers the same way).
pub(crate) fn float_repr(x: f64) -> String {
    sluice_core::stats::prometheus::python_repr(x)
}

/// Python's `str()` of a JSON value as `json.loads` gives it (`None`, `True`, `3`, `0.5`).
pub(crate) fn py_str(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(b) => if *b { "True" } else { "False" }.into(),
        Value::Number(n) => number(n),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn number(n: &serde_json::Number) -> String {
    if n.is_f64() {
        float_repr(n.as_f64().unwrap_or(f64::NAN))
    } else {
        n.to_string()
    }
}

/// `f"{v:,}"`: a count with thousands separators.
pub(crate) fn count(v: Option<&Value>) -> String {
    match v {
        Some(Value::Number(n)) => commas(&number(n)),
        Some(v) => py_str(v),
        None => "—".into(),
    }
}

/// `json.dumps(v, indent=1)`: one space per level, `", "`-free lines, `": "` after keys,
/// floats as `repr`, text outside printable ASCII escaped.
pub(crate) fn json_dumps(v: &Value) -> String {
    let mut out = String::new();
    dump(v, 0, &mut out);
    out
}

fn dump(v: &Value, depth: usize, out: &mut String) {
    let pad = |out: &mut String, depth: usize| {
        out.push('\n');
        out.push_str(&" ".repeat(depth));
    };
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&number(n)),
        Value::String(s) => json_string(s, out),
        Value::Array(items) if items.is_empty() => out.push_str("[]"),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                pad(out, depth + 1);
                dump(item, depth + 1, out);
            }
            pad(out, depth);
            out.push(']');
        }
        Value::Object(map) if map.is_empty() => out.push_str("{}"),
        Value::Object(map) => {
            out.push('{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                pad(out, depth + 1);
                json_string(k, out);
                out.push_str(": ");
                dump(item, depth + 1, out);
            }
            pad(out, depth);
            out.push('}');
        }
    }
}

fn json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for u in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{u:04x}"));
                }
            }
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn escaping_covers_markup_and_both_quotes() {
        assert_eq!(
            esc(r#"<script>alert('x' & "y")</script>"#),
            "&lt;script&gt;alert(&#x27;x&#x27; &amp; &quot;y&quot;)&lt;/script&gt;"
        );
        assert_eq!(prefix("日本語テキスト", 3), "日本語");
        assert_eq!(prefix("ab", 5), "ab");
    }

    #[test]
    fn numbers_read_as_the_python_report_wrote_them() {
        let cases = [
            (None, "—"),
            (Some(f64::NAN), "—"),
            (Some(f64::INFINITY), "—"),
            (Some(0.0), "0"),
            (Some(-0.0), "0"),
            (Some(1.0), "1"),
            (Some(0.5), "0.5"),
            (Some(4.56789), "4.57"),
            (Some(123.456), "123"),
            (Some(999.6), "1e+03"),
            (Some(1234.5), "1.23e+03"),
            (Some(9999.0), "1e+04"),
            (Some(10000.0), "10,000"),
            (Some(1234567.5), "1,234,568"),
            (Some(-45678.9), "-45,679"),
            (Some(0.000123), "0.000123"),
            (Some(0.0000123), "1.23e-05"),
            (Some(-2.5e-7), "-2.5e-07"),
            (Some(0.1 + 0.2), "0.3"),
        ];
        for (x, want) in cases {
            assert_eq!(num(x), want, "{x:?}");
        }
        assert_eq!(commas("-1234567.25"), "-1,234,567.25");
        assert_eq!(commas("999"), "999");
        assert_eq!(count(Some(&json!(1234567))), "1,234,567");
        assert_eq!(count(None), "—");
    }

    #[test]
    fn floats_print_as_python_repr() {
        let cases = [
            (0.1, "0.1"),
            (3.0, "3.0"),
            (-2.0, "-2.0"),
            (1e-4, "0.0001"),
            (1e-5, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (123456789.125, "123456789.125"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (2.5e300, "2.5e+300"),
            (0.1 + 0.2, "0.30000000000000004"),
        ];
        for (x, want) in cases {
            assert_eq!(float_repr(x), want);
        }
        assert_eq!(py_str(&json!(null)), "None");
        assert_eq!(py_str(&json!(7)), "7");
        assert_eq!(py_str(&json!(7.0)), "7.0");
    }

    #[test]
    fn json_dump_matches_python_indent_1() {
        let v = json!({"a": [1, 2.5, {}], "b": {"c": "é\"\n<\u{1F600}"}, "d": [], "e": null});
        assert_eq!(
            json_dumps(&v),
            "{\n \"a\": [\n  1,\n  2.5,\n  {}\n ],\n \"b\": {\n  \"c\": \"\\u00e9\\\"\\n<\\ud83d\\ude00\"\n },\n \"d\": [],\n \"e\": null\n}"
        );
    }
}
