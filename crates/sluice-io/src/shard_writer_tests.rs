use super::*;
use crate::webdataset::IndexedWebDataset;
use crate::{ParquetSource, WdsIndex};
use sluice_core::{Source, Tensor, TensorData};

fn rows(n: i64) -> impl Iterator<Item = Result<Sample>> {
    (0..n).map(|i| {
        Ok(Sample::from_pairs([
            ("jpg", Value::Bytes(vec![i as u8; 700].into())),
            ("cls", Value::Int(i % 10)),
            ("caption", Value::Str(format!("sample {i}").into())),
        ]))
    })
}

fn opts(format: ShardFormat, shard_bytes: u64) -> ShardOptions {
    ShardOptions {
        format,
        shard_bytes,
    }
}

#[test]
fn tar_shards_read_back_sample_for_sample_with_their_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    // Each sample is 3 members of 1 header block + 1-2 data blocks: 3.5 KiB; an 8 KiB shard
    // closes with its 3rd sample.
    let files = write_shards(rows(7), &d, &opts(ShardFormat::Webdataset, 8 << 10)).unwrap();
    assert_eq!(files.len(), 3);
    for f in &files {
        assert!(std::path::Path::new(&format!("{f}.idx")).exists());
    }
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("index.json")).unwrap()).unwrap();
    assert_eq!(manifest["samples"], 7);
    assert_eq!(manifest["shards"][0]["samples"], 3);
    assert_eq!(manifest["shards"][2]["samples"], 1);
    let src = IndexedWebDataset::open(
        std::slice::from_ref(&d),
        WdsIndex::Flag(true),
        Default::default(),
    )
    .unwrap();
    assert_eq!(src.len(), Some(7));
    let s = src.get(5).unwrap();
    assert_eq!(s.get("__key__").unwrap().as_str(), Some("0000000005"));
    assert_eq!(s.get("jpg").unwrap().as_bytes(), Some(&[5u8; 700][..]));
    assert_eq!(s.get("cls").unwrap().as_bytes(), Some(&b"5"[..]));
    assert_eq!(s.get("caption").unwrap().as_bytes(), Some(&b"sample 5"[..]));
    // Written again, the same bytes; fewer samples leave no stale shard behind.
    let first = std::fs::read(&files[0]).unwrap();
    let again = write_shards(rows(3), &d, &opts(ShardFormat::Webdataset, 8 << 10)).unwrap();
    assert_eq!(std::fs::read(&again[0]).unwrap(), first);
    let mut names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["index.json", "part-00000.tar", "part-00000.tar.idx"]
    );
}

#[test]
fn keys_arrays_and_lists_become_members_webdataset_reads() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let t = Tensor::new(vec![2, 2], TensorData::F32(vec![1.0, 2.0, 3.0, 4.0])).unwrap();
    let samples = vec![Ok(Sample::from_pairs([
        ("__key__", Value::Str("train/n01440764_10026".into())),
        ("__url__", Value::Str("elsewhere.tar".into())),
        ("image", Value::Tensor(t)),
        ("boxes", Value::List(vec![Value::Int(1), Value::Int(2)])),
        ("missing", Value::Null),
    ]))];
    write_shards(
        samples.into_iter(),
        &d,
        &opts(ShardFormat::Webdataset, 1 << 20),
    )
    .unwrap();
    let src = IndexedWebDataset::open(&[d], WdsIndex::Flag(true), Default::default()).unwrap();
    let s = src.get(0).unwrap();
    assert_eq!(
        s.get("__key__").unwrap().as_str(),
        Some("train/n01440764_10026")
    );
    assert_eq!(s.get("boxes.json").unwrap().as_bytes(), Some(&b"[1,2]"[..]));
    let npy = s.get("image.npy").unwrap().as_bytes().unwrap();
    assert!(npy.starts_with(b"\x93NUMPY") && npy.ends_with(&4.0f32.to_le_bytes()));
    assert!(s.get("missing").is_none());
}

#[test]
fn keys_that_would_not_read_back_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    for (keys, want) in [
        (vec!["a.b"], "dot"),
        (vec!["../x"], "'..'"),
        (vec!["a", "a"], "sample before"),
    ] {
        let samples = keys.into_iter().map(|k| {
            Ok(Sample::from_pairs([
                ("__key__", Value::Str(k.into())),
                ("txt", Value::Int(1)),
            ]))
        });
        let e = write_shards(samples, &d, &opts(ShardFormat::Webdataset, 1 << 20)).unwrap_err();
        assert!(e.to_string().contains(want), "{e}");
    }
    // A failing stream publishes no shard and no temporary; the manifest it left says the
    // folder's conversion did not finish, so readers refuse it.
    let failing = rows(2).chain(std::iter::once(Err(Error::data("boom"))));
    assert!(write_shards(failing, &d, &opts(ShardFormat::Webdataset, 1 << 20)).is_err());
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["index.json"]);
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("index.json")).unwrap()).unwrap();
    assert_eq!(manifest["complete"], false);
}

#[test]
fn parquet_shards_are_cut_by_bytes_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let files = write_shards(rows(10), &d, &opts(ShardFormat::Parquet, 3000)).unwrap();
    // 716 bytes of values a row: a part closes with its 5th row (3,580 bytes ≥ 3,000).
    assert_eq!(files.len(), 2);
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("index.json")).unwrap()).unwrap();
    assert_eq!(manifest["shards"][1]["samples"], 5);
    let src = ParquetSource::open(&[d], None).unwrap();
    assert_eq!(src.len(), Some(10));
    assert_eq!(src.get(9).unwrap().get("cls").unwrap().as_int(), Some(9));
    assert!(write_shards(rows(1), "x", &opts(ShardFormat::Parquet, 0)).is_err());
    assert!("tfrecord".parse::<ShardFormat>().is_err());
}
