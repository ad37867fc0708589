use std::io::Write;

use super::example::{BytesList, Example, Feature, Features, FloatList, Int64List, Kind};
use super::*;

fn frame(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut out = len.to_vec();
    out.extend(masked_crc(&len).to_le_bytes());
    out.extend(data);
    out.extend(masked_crc(data).to_le_bytes());
    out
}

fn example(i: i64) -> Vec<u8> {
    let f = |k| Feature { kind: Some(k) };
    let mut feature = std::collections::BTreeMap::new();
    feature.insert(
        "id".to_string(),
        f(Kind::Int64List(Int64List { value: vec![i] })),
    );
    feature.insert(
        "name".to_string(),
        f(Kind::BytesList(BytesList {
            value: vec![format!("n{i}").into_bytes()],
        })),
    );
    feature.insert(
        "vec".to_string(),
        f(Kind::FloatList(FloatList {
            value: vec![i as f32, 0.5],
        })),
    );
    Example {
        features: Some(Features { feature }),
    }
    .encode_to_vec()
}

fn file(n: i64) -> Vec<u8> {
    (0..n).flat_map(|i| frame(&example(i))).collect()
}

fn write(dir: &tempfile::TempDir, name: &str, data: &[u8]) -> String {
    let p = dir.path().join(name);
    std::fs::write(&p, data).unwrap();
    p.display().to_string()
}

fn parsed() -> TfrecordOptions {
    TfrecordOptions::default()
}

#[test]
fn reads_examples_with_random_access_across_files() {
    let dir = tempfile::tempdir().unwrap();
    write(&dir, "a.tfrecord", &file(3));
    write(&dir, "b.tfrecord", &file(2));
    let d = dir.path().display().to_string();
    let src = TfrecordSource::open(&[d], &parsed()).unwrap();
    assert_eq!(src.len(), Some(5));
    let s = src.get(4).unwrap();
    assert_eq!(s.get("id"), Some(&Value::Int(1)));
    assert_eq!(s.get("name").and_then(Value::as_bytes), Some(&b"n1"[..]));
    assert!(matches!(s.get("vec"), Some(Value::Tensor(t)) if t.shape() == [2]));
    // A projection keeps the named features; a missing one is None.
    let opts = TfrecordOptions {
        features: Some(vec!["id".into(), "nope".into()]),
        ..parsed()
    };
    let src = TfrecordSource::open(
        &[dir.path().join("a.tfrecord").display().to_string()],
        &opts,
    )
    .unwrap();
    let s = src.get(2).unwrap();
    assert_eq!(s.names().collect::<Vec<_>>(), ["id", "nope"]);
    assert_eq!(
        (s.get("id"), s.get("nope")),
        (Some(&Value::Int(2)), Some(&Value::Null))
    );
    // Reopens from what it ships.
    let copy = SourceSpec::from_json(&src.ship().unwrap())
        .unwrap()
        .open()
        .unwrap();
    assert_eq!(copy.get(1).unwrap(), src.get(1).unwrap());
}

#[test]
fn index_files_give_the_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let data = file(4);
    let p = write(&dir, "x.tfrecord", &data);
    let mut idx = String::new();
    let mut off = 0;
    for i in 0..4 {
        let len = frame(&example(i)).len();
        idx.push_str(&format!("{off} {len}\n"));
        off += len;
    }
    let ip = write(&dir, "x.index", idx.as_bytes());
    let opts = TfrecordOptions {
        index: Some(vec![ip.clone()]),
        parse: false,
        ..Default::default()
    };
    let src = TfrecordSource::open(std::slice::from_ref(&p), &opts).unwrap();
    assert_eq!(src.len(), Some(4));
    assert_eq!(src.record(3).unwrap(), example(3));
    let bad = write(&dir, "bad.index", b"0 10\n");
    let opts = TfrecordOptions {
        index: Some(vec![bad]),
        ..opts
    };
    let e = TfrecordSource::open(std::slice::from_ref(&p), &opts).unwrap_err();
    assert!(e.to_string().contains("bad.index:1"), "{e}");
    // An index whose offsets point inside a frame fails at that record, naming it.
    let shifted = write(
        &dir,
        "shifted.index",
        format!("4 {}\n", data.len() - 4).as_bytes(),
    );
    let opts = TfrecordOptions {
        index: Some(vec![shifted]),
        ..opts
    };
    let e = TfrecordSource::open(std::slice::from_ref(&p), &opts)
        .unwrap()
        .get(0)
        .unwrap_err();
    assert!(
        matches!(e, Error::Data(_)) && e.to_string().contains("record 0 at byte 4"),
        "{e}"
    );
}

#[test]
fn crc_mismatch_and_truncation_name_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let mut data = file(3);
    let second = frame(&example(0)).len();
    // Flip a data byte of the second record: its data CRC no longer matches.
    data[second + 14] ^= 0xff;
    let p = write(&dir, "flip.tfrecord", &data);
    let src = TfrecordSource::open(std::slice::from_ref(&p), &parsed()).unwrap();
    assert!(src.get(0).is_ok());
    let e = src.get(1).unwrap_err().to_string();
    assert!(
        e.contains(&p)
            && e.contains(&format!("record 1 at byte {second}"))
            && e.contains("data CRC"),
        "{e}"
    );
    // A damaged length is found when indexing.
    let mut data = file(2);
    data[second] ^= 1;
    let p = write(&dir, "len.tfrecord", &data);
    let e = TfrecordSource::open(std::slice::from_ref(&p), &parsed())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(&format!("byte {second}")) && e.contains("length CRC"),
        "{e}"
    );
    let data = file(3);
    let p = write(&dir, "cut.tfrecord", &data[..data.len() - 5]);
    let e = TfrecordSource::open(std::slice::from_ref(&p), &parsed()).unwrap_err();
    assert!(
        matches!(e, Error::Data(_)) && e.to_string().contains("truncated"),
        "{e}"
    );
    // Not an Example: an error suggesting parse=False.
    let p = write(&dir, "raw.tfrecord", &frame(b"\xff\xff\xff"));
    let e = TfrecordSource::open(std::slice::from_ref(&p), &parsed())
        .unwrap()
        .get(0)
        .unwrap_err();
    assert!(e.to_string().contains("parse=False"), "{e}");
}

#[test]
fn gzip_files_by_option_or_extension() {
    let dir = tempfile::tempdir().unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&file(6)).unwrap();
    let gz = gz.finish().unwrap();
    let named = write(&dir, "x.tfrecord.gz", &gz);
    let bare = write(&dir, "x.tfrecord", &gz);
    let by_ext = TfrecordSource::open(&[named], &parsed()).unwrap();
    let forced = TfrecordSource::open(
        std::slice::from_ref(&bare),
        &TfrecordOptions {
            compression: Some("gzip".into()),
            ..parsed()
        },
    )
    .unwrap();
    assert_eq!((by_ext.len(), forced.len()), (Some(6), Some(6)));
    assert_eq!(by_ext.get(5).unwrap(), forced.get(5).unwrap());
    assert_eq!(forced.get(5).unwrap().get("id"), Some(&Value::Int(5)));
    // Read as uncompressed, the gzip bytes are no TFRecord.
    assert!(TfrecordSource::open(&[bare], &parsed()).is_err());
}

#[test]
fn pipeline_file_form_takes_the_api_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(&dir, "x.tfrecord", &file(3));
    let spec = SourceSpec::from_json(&serde_json::json!({
        "source": "read_tfrecord", "paths": [p], "features": ["id"]}))
    .unwrap();
    let src = spec.open().unwrap();
    assert_eq!(src.get(2).unwrap().get("id"), Some(&Value::Int(2)));
    assert_eq!(src.fields(), Some(vec!["id".to_string()]));
    let bad = serde_json::json!({"source": "read_tfrecord", "paths": ["x"], "compression": "lz4"});
    let e = SourceSpec::from_json(&bad).unwrap().open().unwrap_err();
    assert!(e.to_string().contains("'gzip'"), "{e}");
}

#[test]
fn header_walk_crosses_scan_windows() {
    // Records of every size around the 64 KiB window: small ones many per window, large ones
    // spanning windows, headers straddling a window's end.
    let dir = tempfile::tempdir().unwrap();
    let sizes: Vec<usize> = (0..40).map(|i| (i * 7919) % 90_000).collect();
    let data: Vec<u8> = sizes
        .iter()
        .flat_map(|&n| frame(&vec![n as u8; n]))
        .collect();
    let p = write(&dir, "sizes.tfrecord", &data);
    let opts = TfrecordOptions {
        parse: false,
        ..Default::default()
    };
    let src = TfrecordSource::open(&[p], &opts).unwrap();
    assert_eq!(src.len(), Some(40));
    for (i, &n) in sizes.iter().enumerate() {
        assert_eq!(src.record(i as u64).unwrap(), vec![n as u8; n]);
    }
}
