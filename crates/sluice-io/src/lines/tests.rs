use super::*;

fn write(content: &[u8]) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f.txt");
    std::fs::write(&p, content).unwrap();
    (dir, p.display().to_string())
}

/// The `text` of the first `n` lines.
fn texts(src: &LinesSource, n: u64) -> Vec<String> {
    (0..n)
        .map(|i| {
            src.get(i)
                .unwrap()
                .get("text")
                .unwrap()
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

#[test]
fn text_lines_skip_blank_and_strip_cr() {
    let (_d, p) = write(b"a\r\n\n  \nb\nlast");
    let src = LinesSource::open(&[p], LinesFormat::Text, Utf8Errors::Strict).unwrap();
    assert_eq!(texts(&src, src.len().unwrap()), ["a", "b", "last"]);
}

#[test]
fn invalid_utf8_strict_names_line_or_replaces() {
    let (_d, p) = write(b"ok\nbad \xff here\n");
    let strict = LinesSource::open(
        std::slice::from_ref(&p),
        LinesFormat::Text,
        Utf8Errors::Strict,
    )
    .unwrap();
    let e = strict.get(1).unwrap_err().to_string();
    assert!(e.contains(":2:") && e.contains("UTF-8"), "{e}");
    let lossy = LinesSource::open(&[p], LinesFormat::Text, Utf8Errors::Replace).unwrap();
    assert!(lossy
        .get(1)
        .unwrap()
        .get("text")
        .unwrap()
        .as_str()
        .unwrap()
        .contains('\u{FFFD}'));
}

#[test]
fn text_skip_leaves_out_and_counts_invalid_utf8() {
    let (_d, p) = write(b"ok\nbad \xff here\nfine\n");
    let opts = JsonlOptions {
        on_error: OnError::Skip,
        ..Default::default()
    };
    let src = LinesSource::open_with(&[p], LinesFormat::Text, &opts).unwrap();
    assert_eq!((src.len(), src.skipped()), (Some(2), 1));
    assert_eq!(
        src.get(1).unwrap().get("text").unwrap().as_str(),
        Some("fine")
    );
    assert_eq!(src.ship().unwrap()["on_error"], "skip");
}

#[test]
fn jsonl_parses_objects_and_reports_bad_lines() {
    let (_d, p) = write(b"{\"a\": 1, \"t\": \"x\", \"v\": [1, 2]}\nnot json\n");
    let src = LinesSource::open(&[p], LinesFormat::Jsonl, Utf8Errors::Strict).unwrap();
    let s = src.get(0).unwrap();
    assert_eq!(s.get("a"), Some(&Value::Int(1)));
    assert!(matches!(s.get("v"), Some(Value::Tensor(t)) if t.shape() == [2]));
    let e = src.get(1).unwrap_err().to_string();
    assert!(e.contains(":2:") && e.contains("invalid JSON"), "{e}");
}

fn typed(on_error: OnError) -> JsonlOptions {
    let schema = [
        ("id", "int"),
        ("score", "float"),
        ("ok", "bool"),
        ("name", "str"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let on_error = if on_error == OnError::Skip {
        "skip"
    } else {
        "raise"
    };
    JsonlOptions::from_names(&schema, on_error, "strict").unwrap()
}

#[test]
fn schema_coerces_and_names_the_field() {
    let (_d, p) = write(
        b"{\"id\": \"3\", \"score\": 1, \"ok\": \"true\", \"name\": 42, \"extra\": [1.5]}\n\
          {\"id\": 4.0}\n\
          {\"id\": \"four\"}\n",
    );
    let src = LinesSource::open_with(&[p], LinesFormat::Jsonl, &typed(OnError::Raise)).unwrap();
    let s = src.get(0).unwrap();
    let mut names: Vec<_> = s.names().collect();
    names.sort_unstable();
    assert_eq!(names, ["extra", "id", "name", "ok", "score"]);
    assert_eq!(s.get("id"), Some(&Value::Int(3)));
    assert_eq!(s.get("score"), Some(&Value::Float(1.0)));
    assert_eq!(s.get("ok"), Some(&Value::Bool(true)));
    assert_eq!(s.get("name").and_then(Value::as_str), Some("42"));
    let s = src.get(1).unwrap();
    assert_eq!(
        (s.get("id"), s.get("name")),
        (Some(&Value::Int(4)), Some(&Value::Null))
    );
    let e = src.get(2).unwrap_err();
    assert!(matches!(e, Error::Data(_)), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains(":3:") && msg.contains("'id'") && msg.contains("\"four\""),
        "{msg}"
    );
}

#[test]
fn skip_leaves_out_and_counts_bad_lines() {
    let (_d, p) = write(b"{\"id\": 1}\n[1, 2]\n{\"id\": \"x\"}\n\n{\"id\": 2}\n{bad\n\xff\xfe\n");
    let src = LinesSource::open_with(&[p], LinesFormat::Jsonl, &typed(OnError::Skip)).unwrap();
    assert_eq!((src.len(), src.skipped()), (Some(2), 4));
    assert_eq!(src.get(1).unwrap().get("id"), Some(&Value::Int(2)));
    assert_eq!(Source::skipped(&src), 4);
    let shipped = src.ship().unwrap();
    assert_eq!(shipped["on_error"], "skip");
    assert_eq!(shipped["schema"]["id"], "int");
}

#[test]
fn integers_beyond_int64_raise_naming_line_field_and_value_or_are_skipped() {
    let (_d, p) = write(
        b"{\"id\": 1, \"f\": 1e20, \"g\": 3.0}\n\
          {\"id\": 18446744073709551615}\n\
          {\"v\": [1, 1208925819614629174706177]}\n\
          {\"id\": -9223372036854775808}\n",
    );
    let src = LinesSource::open(
        std::slice::from_ref(&p),
        LinesFormat::Jsonl,
        Utf8Errors::Strict,
    )
    .unwrap();
    // Floats written as floats stay floats; int64's own range stays exact.
    let s = src.get(0).unwrap();
    assert_eq!(
        (s.get("f"), s.get("g")),
        (Some(&Value::Float(1e20)), Some(&Value::Float(3.0)))
    );
    assert_eq!(src.get(3).unwrap().get("id"), Some(&Value::Int(i64::MIN)));
    for (i, field, literal) in [
        (1, "'id'", "18446744073709551615"),
        (2, "'v'", "1208925819614629174706177"),
    ] {
        let e = src.get(i).unwrap_err();
        assert!(matches!(e, Error::Data(_)), "{e:?}");
        let e = e.to_string();
        assert!(
            e.contains(&format!(":{}:", i + 1)) && e.contains(field) && e.contains(literal),
            "{e}"
        );
    }
    let opts = JsonlOptions {
        on_error: OnError::Skip,
        ..Default::default()
    };
    let src = LinesSource::open_with(std::slice::from_ref(&p), LinesFormat::Jsonl, &opts).unwrap();
    assert_eq!((src.len(), src.skipped()), (Some(2), 2));
    // A schema type says what to make of it: "str" keeps the digits, "float" rounds.
    let schema = [("id", "str"), ("v", "float")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let opts = JsonlOptions::from_names(&schema, "raise", "strict").unwrap();
    let src = LinesSource::open_with(&[p], LinesFormat::Jsonl, &opts).unwrap();
    assert_eq!(
        src.get(1).unwrap().get("id").and_then(Value::as_str),
        Some("18446744073709551615")
    );
    // A float schema on an array is not a float: that stays an error, naming the field.
    assert!(src.get(2).unwrap_err().to_string().contains("'v'"));
}

#[test]
fn a_file_edited_after_indexing_raises_when_read() {
    for format in [LinesFormat::Text, LinesFormat::Jsonl] {
        let (_d, p) = write(b"{\"a\": \"one\"}\n{\"a\": \"two\"}\n{\"a\": \"three\"}\n");
        let src = LinesSource::open(std::slice::from_ref(&p), format, Utf8Errors::Strict).unwrap();
        // The same size, the line breaks moved: the second line's range now spans two lines.
        std::fs::write(
            &p,
            b"{\"a\": \"on\"}\n{\"a\": \"twoo\"}\n{\"a\": \"three\"}\n",
        )
        .unwrap();
        let e = src.get(1).unwrap_err().to_string();
        assert!(
            e.contains("f.txt:2: the file changed since it was indexed"),
            "{e}"
        );
        // A line still where it was reads as before.
        assert!(src.get(2).is_ok());
        // Cut short.
        std::fs::write(&p, b"{\"a\": \"one\"}\n").unwrap();
        let e = src.get(2).unwrap_err().to_string();
        assert!(
            e.contains("f.txt:3: the file changed since it was indexed"),
            "{e}"
        );
    }
}

#[test]
fn crlf_and_last_lines_without_a_break_pass_the_boundary_check() {
    let (_d, p) = write(b"a\r\nb\n\nc\r");
    let src = LinesSource::open(&[p], LinesFormat::Text, Utf8Errors::Strict).unwrap();
    assert_eq!(texts(&src, 3), ["a", "b", "c"]);
}
