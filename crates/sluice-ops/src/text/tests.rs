use super::*;
use crate::testing::run;

fn ids(s: &Sample, f: &str) -> Vec<i64> {
    match s.get(f) {
        Some(Value::Tensor(t)) => match t.data() {
            TensorData::I64(v) => v.clone(),
            _ => panic!(),
        },
        other => panic!("{other:?}"),
    }
}

#[test]
fn truncate_add_pad() {
    let t = Tensor::new(vec![5], TensorData::I64(vec![1, 2, 3, 4, 5])).unwrap();
    let s = Sample::from_pairs([("input_ids", Value::Tensor(t))]);
    let s = run(r#"{"op":"text.truncate","length":3}"#, s, 0).unwrap();
    let s = run(r#"{"op":"text.add_tokens","bos":4,"eos":0}"#, s, 0).unwrap();
    assert_eq!(ids(&s, "input_ids"), [4, 1, 2, 3, 0]);
    let s = run(
        r#"{"op":"text.pad","length":7,"pad_id":9,"mask":"m"}"#,
        s,
        0,
    )
    .unwrap();
    assert_eq!(ids(&s, "input_ids"), [4, 1, 2, 3, 0, 9, 9]);
    assert_eq!(ids(&s, "m"), [1, 1, 1, 1, 1, 0, 0]);
    let e = run(r#"{"op":"text.pad","length":2}"#, s, 0).unwrap_err();
    assert!(e.to_string().contains("truncate first"));
}

/// int32 ids stay int32 through every edit; ids shared with another sample (a cache's
/// copy) are read, never changed; a list of ints comes out as int64.
#[test]
fn edits_keep_the_dtype_and_leave_shared_ids_alone() {
    let t = Tensor::new(vec![3], TensorData::I32(vec![7, 8, 9])).unwrap();
    let cached = Sample::from_pairs([("input_ids", Value::Tensor(t))]);
    let s = run(r#"{"op":"text.truncate","length":2}"#, cached.clone(), 0).unwrap();
    let s = run(r#"{"op":"text.add_tokens","bos":1,"eos":2}"#, s, 0).unwrap();
    let s = run(r#"{"op":"text.pad","length":6,"mask":"m"}"#, s, 0).unwrap();
    match (s.get("input_ids"), s.get("m")) {
        (Some(Value::Tensor(ids)), Some(Value::Tensor(m))) => {
            assert_eq!(ids.data(), &TensorData::I32(vec![1, 7, 8, 2, 0, 0]));
            assert_eq!(m.data(), &TensorData::I32(vec![1, 1, 1, 1, 0, 0]));
        }
        other => panic!("{other:?}"),
    }
    match cached.get("input_ids") {
        Some(Value::Tensor(t)) => assert_eq!(t.data(), &TensorData::I32(vec![7, 8, 9])),
        other => panic!("{other:?}"),
    }
    let list = Sample::from_pairs([("input_ids", Value::List(vec![Value::Int(5)]))]);
    let s = run(r#"{"op":"text.pad","length":3,"pad_id":-1}"#, list, 0).unwrap();
    assert_eq!(ids(&s, "input_ids"), [5, -1, -1]);
    let bad = Sample::from_pairs([("input_ids", Value::Str("x".into()))]);
    let e = run(r#"{"op":"text.truncate","length":1}"#, bad, 0).unwrap_err();
    assert!(e.to_string().contains("tokenize first"), "{e}");
}

/// `out=` leaves the input ids alone; meta reads `field` and writes `out` (and the mask).
#[test]
fn out_leaves_the_input_untouched() {
    let t = Tensor::new(vec![3], TensorData::I64(vec![5, 6, 7])).unwrap();
    let s = Sample::from_pairs([("input_ids", Value::Tensor(t))]);
    for (spec, want) in [
        (r#"{"op":"text.truncate","length":2,"out":"o"}"#, vec![5, 6]),
        (
            r#"{"op":"text.add_tokens","bos":1,"eos":2,"out":"o"}"#,
            vec![1, 5, 6, 7, 2],
        ),
        (
            r#"{"op":"text.pad","length":5,"pad_id":-1,"out":"o"}"#,
            vec![5, 6, 7, -1, -1],
        ),
    ] {
        let r = run(spec, s.clone(), 0).unwrap();
        assert_eq!(ids(&r, "o"), want, "{spec}");
        assert_eq!(r.get("input_ids"), s.get("input_ids"), "{spec}");
        let m = crate::OpSpec::from_json(spec)
            .unwrap()
            .build()
            .unwrap()
            .meta();
        assert_eq!(
            (m.reads, m.writes),
            (vec!["input_ids".to_string()], vec!["o".to_string()])
        );
    }
    let m = crate::OpSpec::from_json(r#"{"op":"text.pad","length":4,"mask":"m"}"#)
        .unwrap()
        .build()
        .unwrap()
        .meta();
    assert_eq!(m.writes, ["input_ids", "m"]);
}

/// pad's length is its output size: above `max_tokens` it is refused when made. Ids that
/// do not fit the field's int32 dtype fail the sample naming the argument.
#[test]
fn sizes_and_id_ranges() {
    let e = crate::OpSpec::from_json(r#"{"op":"text.pad","length":1000000000000}"#)
        .unwrap()
        .build()
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)));
    assert!(
        e.to_string()
            .starts_with("text.pad: length=1000000000000 makes")
            && e.to_string().contains("max_tokens=16777216"),
        "{e}"
    );
    let raised = r#"{"op":"text.pad","length":100,"max_tokens":50}"#;
    assert!(crate::OpSpec::from_json(raised).unwrap().build().is_err());
    let t = Tensor::new(vec![1], TensorData::I32(vec![7])).unwrap();
    let s = Sample::from_pairs([("input_ids", Value::Tensor(t))]);
    for (spec, arg) in [
        (
            r#"{"op":"text.add_tokens","bos":5000000000}"#,
            "bos=5000000000",
        ),
        (
            r#"{"op":"text.add_tokens","eos":-5000000000}"#,
            "eos=-5000000000",
        ),
        (
            r#"{"op":"text.pad","length":3,"pad_id":5000000000}"#,
            "pad_id=5000000000",
        ),
    ] {
        let e = run(spec, s.clone(), 0).unwrap_err();
        assert!(matches!(e, Error::Data(_)), "{spec}: {e:?}");
        assert!(
            e.to_string().contains(&format!(
                "{arg} does not fit the int32 ids of field 'input_ids'"
            )),
            "{e}"
        );
    }
}

#[test]
fn bad_specs() {
    for bad in [
        r#"{"op":"text.tokenize","tokenizer":"/nonexistent.json"}"#,
        r#"{"op":"text.truncate","length":0}"#,
        r#"{"op":"text.tokenize","tokenizer":"x","dtype":"int8"}"#,
        r#"{"op":"text.pad","length":3,"out":""}"#,
    ] {
        let spec: crate::OpSpec = serde_json::from_str(bad).unwrap();
        let e = spec.build().map(|_| ()).unwrap_err().to_string();
        assert!(
            e.starts_with("text.") || e.contains("not found"),
            "{bad}: {e}"
        );
    }
    for bad in [
        r#"{"op":"text.truncate","length":-1}"#,
        r#"{"op":"text.add_tokens","bos":1e30}"#,
        r#"{"op":"text.pad","length":3,"mask":7}"#,
        r#"{"op":"text.pad","lenght":3}"#,
    ] {
        let e = crate::OpSpec::from_json(bad).unwrap_err().to_string();
        assert!(e.starts_with("text."), "{bad}: {e}");
    }
}

/// A whitespace WordLevel tokenizer.json, small enough to write out here.
const WORDS: &str = r#"{"version":"1.0","truncation":null,"padding":null,"added_tokens":[],
"normalizer":null,"pre_tokenizer":{"type":"Whitespace"},"post_processor":null,"decoder":null,
"model":{"type":"WordLevel","vocab":{"[UNK]":0,"hello":1,"world":2},"unk_token":"[UNK]"}}"#;

/// The tokenizer's JSON inline gives the ids its file gives; the spec carries the JSON (so a
/// rebuilt op needs no file) and round-trips; one of the two forms is required.
#[test]
fn tokenizer_inline_or_from_a_file() {
    let path = std::env::temp_dir().join(format!("sluice-words-{}.json", std::process::id()));
    std::fs::write(&path, WORDS).unwrap();
    let text = Sample::from_pairs([("text", Value::Str("hello there world".into()))]);
    let file = serde_json::json!({"op": "text.tokenize", "tokenizer": path.display().to_string()});
    let inline = serde_json::json!({"op": "text.tokenize", "tokenizer_json": WORDS});
    let a = run(&file.to_string(), text.clone(), 0).unwrap();
    let b = run(&inline.to_string(), text, 0).unwrap();
    assert_eq!(ids(&a, "input_ids"), [1, 0, 2]);
    assert_eq!(ids(&a, "input_ids"), ids(&b, "input_ids"));
    std::fs::remove_file(&path).unwrap();

    let op = crate::OpSpec::from_value(inline.clone())
        .unwrap()
        .build()
        .unwrap();
    assert_eq!(op.spec()["tokenizer_json"], WORDS);
    assert!(op.spec().get("tokenizer").is_none());
    let rebuilt = crate::OpSpec::from_value(op.spec())
        .unwrap()
        .build()
        .unwrap();
    assert_eq!(rebuilt.spec(), op.spec());

    for (bad, says) in [
        (
            serde_json::json!({"op": "text.tokenize"}),
            "tokenizer is required",
        ),
        (
            serde_json::json!({"op": "text.tokenize", "tokenizer": "x.json", "tokenizer_json": WORDS}),
            "not both",
        ),
        (
            serde_json::json!({"op": "text.tokenize", "tokenizer_json": "{\"model\": 3}"}),
            "tokenizer_json is not a valid tokenizer.json",
        ),
    ] {
        let e = crate::OpSpec::from_value(bad).unwrap().build().unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
        assert!(
            e.to_string().starts_with("text.tokenize: ") && e.to_string().contains(says),
            "{e}"
        );
    }
}
