use super::*;

fn write(content: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f.csv");
    std::fs::write(&p, content).unwrap();
    (dir, p.display().to_string())
}

#[test]
fn quoted_newlines_keep_random_access_exact() {
    let (_d, p) = write("id,text,score\n1,\"two\nlines\",0.5\n2,\"a,b\",\n3,plain,2\n");
    let src = CsvSource::open(&[p], &CsvOptions::default()).unwrap();
    assert_eq!(src.len(), Some(3));
    assert_eq!(
        src.schema().iter().map(|(_, t)| *t).collect::<Vec<_>>(),
        [CsvType::Int, CsvType::Str, CsvType::Float]
    );
    let s = src.get(2).unwrap();
    assert_eq!(s.get("id"), Some(&Value::Int(3)));
    assert_eq!(s.get("text").unwrap().as_str(), Some("plain"));
    assert_eq!(
        src.get(0).unwrap().get("text").unwrap().as_str(),
        Some("two\nlines")
    );
    assert_eq!(src.get(1).unwrap().get("score"), Some(&Value::Null));
}

#[test]
fn malformed_rows_name_the_line_or_are_skipped() {
    let (_d, p) = write("a,b\n1,2\n3\n4,5\n");
    let e = CsvSource::open(std::slice::from_ref(&p), &CsvOptions::default()).unwrap_err();
    assert!(e.to_string().contains("f.csv:3:"), "{e}");
    let opts = CsvOptions {
        on_error: CsvOnError::Skip,
        ..Default::default()
    };
    let src = CsvSource::open(&[p], &opts).unwrap();
    assert_eq!((src.len(), src.skipped()), (Some(2), 1));
    assert_eq!(src.get(1).unwrap().get("a"), Some(&Value::Int(4)));
}

fn skipping() -> CsvOptions {
    CsvOptions {
        on_error: CsvOnError::Skip,
        ..Default::default()
    }
}

#[test]
fn invalid_utf8_raises_naming_the_line_or_is_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f.csv");
    std::fs::write(&p, b"a,b\n1,x\n2,\xff\xfe\n3,z\n").unwrap();
    let p = p.display().to_string();
    let src = CsvSource::open(std::slice::from_ref(&p), &CsvOptions::default()).unwrap();
    let e = src.get(1).unwrap_err().to_string();
    assert!(e.contains("f.csv:3:") && e.contains("UTF-8"), "{e}");
    let src = CsvSource::open(&[p], &skipping()).unwrap();
    assert_eq!((src.len(), src.skipped()), (Some(2), 1));
    assert_eq!(src.get(1).unwrap().get("a"), Some(&Value::Int(3)));
}

#[test]
fn values_not_of_their_type_are_skipped_given_or_inferred() {
    // A given type, and an inferred one that a record after the inference window breaks.
    let mut text = String::from("id,n\n");
    for i in 0..INFER_ROWS + 5 {
        text.push_str(&format!("{i},{i}\n"));
    }
    text.push_str("x1,7\n8,nope\n9,9\n");
    let (_d, p) = write(&text);
    let opts = CsvOptions {
        schema: vec![("id".into(), CsvType::Int)],
        on_error: CsvOnError::Skip,
        ..Default::default()
    };
    let src = CsvSource::open(std::slice::from_ref(&p), &opts).unwrap();
    assert_eq!(src.schema()[1].1, CsvType::Int);
    assert_eq!(src.skipped(), 2);
    assert_eq!(src.len(), Some(INFER_ROWS as u64 + 6));
    for i in 0..src.len().unwrap() {
        src.get(i).unwrap();
    }
    // Raising, the same records fail when read, naming line and column.
    let src = CsvSource::open(&[p], &CsvOptions::default()).unwrap();
    let n = INFER_ROWS as u64 + 5;
    let e = src.get(n + 1).unwrap_err().to_string();
    assert!(
        e.contains(&format!(":{}:", n + 3)) && e.contains("'n'") && e.contains("'nope'"),
        "{e}"
    );
}

#[test]
fn control_bytes_in_values_are_escaped_in_messages() {
    let (_d, p) = write("a\n1\n\u{1b}[2J\u{7}\n");
    let opts = CsvOptions {
        schema: vec![("a".into(), CsvType::Int)],
        ..Default::default()
    };
    let src = CsvSource::open(&[p], &opts).unwrap();
    let e = src.get(1).unwrap_err().to_string();
    assert!(e.contains("\\x1b[2J\\x07"), "{e}");
    assert!(!e.chars().any(|c| c.is_control()), "{e:?}");
}

#[test]
fn explicit_schema_overrides_and_reports_bad_values() {
    let (_d, p) = write("a,b\n1,2\n2,y\n");
    let opts = CsvOptions {
        schema: vec![("a".into(), CsvType::Str), ("b".into(), CsvType::Int)],
        ..Default::default()
    };
    let src = CsvSource::open(&[p], &opts).unwrap();
    assert_eq!(src.get(0).unwrap().get("a").unwrap().as_str(), Some("1"));
    let e = src.get(1).unwrap_err().to_string();
    assert!(
        e.contains(":3:") && e.contains("'b'") && e.contains("int"),
        "{e}"
    );
}

#[test]
fn an_unterminated_quote_raises_naming_the_line_under_both_policies() {
    // Without the check the third record swallowed lines 4-6 as one value, silently.
    let (_d, p) = write("id,text\n1,ok\n2,\"never closed\n3,c\n4,d\n5,e\n");
    for opts in [CsvOptions::default(), skipping()] {
        let e = CsvSource::open(std::slice::from_ref(&p), &opts).unwrap_err();
        assert!(matches!(e, Error::Data(_)), "{e:?}");
        let e = e.to_string();
        assert!(
            e.contains("f.csv:3:") && e.contains("unterminated quoted field"),
            "{e}"
        );
    }
    // Seen before the field count the swallowed record happens to have wrong.
    let (_d, p) = write("a,b,c\n1,2,3\n\"x,y\n4,5,6\n");
    let e = CsvSource::open(&[p], &CsvOptions::default()).unwrap_err();
    assert!(e.to_string().contains("f.csv:3: unterminated"), "{e}");
    // A header that never closes its quote.
    let (_d, p) = write("a,\"b\n1,2\n");
    let e = CsvSource::open(&[p], &skipping()).unwrap_err();
    assert!(e.to_string().contains("f.csv:1: unterminated"), "{e}");
}

#[test]
fn closed_and_literal_quotes_are_not_unterminated() {
    // A quote inside an unquoted field is literal; "" inside quotes is one quote; a quoted
    // last field ending the file without a newline is closed.
    let (_d, p) = write("a,b\n5\" screen,x\n\"say \"\"hi\"\"\",y\n\"multi\nline\",\"end\"");
    for opts in [CsvOptions::default(), skipping()] {
        let src = CsvSource::open(std::slice::from_ref(&p), &opts).unwrap();
        assert_eq!(src.len(), Some(3));
        let a = |i| {
            src.get(i)
                .unwrap()
                .get("a")
                .unwrap()
                .as_str()
                .unwrap()
                .to_string()
        };
        assert_eq!(
            [a(0), a(1), a(2)],
            ["5\" screen", "say \"hi\"", "multi\nline"]
        );
    }
}

#[test]
fn a_repeated_header_name_raises_naming_it() {
    let (_d, p) = write("id,id,x\n1,2,3\n");
    for opts in [CsvOptions::default(), skipping()] {
        let e = CsvSource::open(std::slice::from_ref(&p), &opts)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("f.csv:1:") && e.contains("'id' twice") && e.contains("columns 1 and 2"),
            "{e}"
        );
    }
    // Names are compared as read: trimmed.
    let (_d, p) = write("a, a\n1,2\n");
    assert!(CsvSource::open(&[p], &CsvOptions::default()).is_err());
}

#[test]
fn a_file_edited_after_indexing_raises_when_read() {
    let (_d, p) = write("id,text\n1,aaaa\n2,bbbb\n3,cccc\n");
    for opts in [CsvOptions::default(), skipping()] {
        std::fs::write(&p, "id,text\n1,aaaa\n2,bbbb\n3,cccc\n").unwrap();
        let src = CsvSource::open(std::slice::from_ref(&p), &opts).unwrap();
        // Same length, records moved by two bytes.
        std::fs::write(&p, "id,text\n1,aaaaaa\n2,bb\n3,cccc\n").unwrap();
        let e = src.get(1).unwrap_err().to_string();
        assert!(
            e.contains("f.csv:3: the file changed since it was indexed"),
            "{e}"
        );
        // Cut short.
        std::fs::write(&p, "id,text\n1,aaaa\n").unwrap();
        let e = src.get(2).unwrap_err().to_string();
        assert!(e.contains("changed since it was indexed"), "{e}");
    }
}

#[test]
fn integers_beyond_int64_are_inferred_as_text_not_rounded() {
    let (_d, p) = write("big,small,f\n18446744073709551615,1,1.5\n-9223372036854775809,2,2\n");
    let src = CsvSource::open(std::slice::from_ref(&p), &CsvOptions::default()).unwrap();
    let types: Vec<_> = src.schema().into_iter().map(|(_, t)| t).collect();
    assert_eq!(types, [CsvType::Str, CsvType::Int, CsvType::Float]);
    let s = src.get(0).unwrap();
    assert_eq!(s.get("big").unwrap().as_str(), Some("18446744073709551615"));
    // Asked for as int, it does not fit: an error naming line, column and value.
    let opts = CsvOptions {
        schema: vec![("big".into(), CsvType::Int)],
        ..Default::default()
    };
    let e = CsvSource::open(&[p], &opts)
        .unwrap()
        .get(1)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(":3:") && e.contains("'-9223372036854775809'"),
        "{e}"
    );
}
