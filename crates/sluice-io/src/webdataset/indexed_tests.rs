use super::*;
use crate::WebDatasetSource;
use sluice_core::OnError;

/// A shard written the way WebDataset writers write them: `append_data` (long names become
/// GNU long-name records), with a directory entry among the members.
fn shard(dir: &std::path::Path, name: &str, members: &[(&str, &[u8])]) -> String {
    let p = dir.join(name);
    let mut b = tar::Builder::new(std::fs::File::create(&p).unwrap());
    let mut d = tar::Header::new_gnu();
    d.set_entry_type(tar::EntryType::Directory);
    d.set_size(0);
    d.set_mode(0o755);
    b.append_data(&mut d, "dir/", std::io::empty()).unwrap();
    for (path, data) in members {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        b.append_data(&mut h, path, *data).unwrap();
    }
    b.finish().unwrap();
    p.display().to_string()
}

fn two_shards(dir: &std::path::Path) -> String {
    let long = format!("{}/7.jpg", "deep".repeat(40));
    let long_cls = format!("{}/7.cls", "deep".repeat(40));
    shard(
        dir,
        "a.tar",
        &[
            ("x/1.jpg", b"J1"),
            ("x/1.cls", b"0"),
            ("x/2.jpg", &[9u8; 1500]),
            (&long, b"J7"),
            (&long_cls, b"7"),
        ],
    );
    shard(
        dir,
        "b.tar",
        &[
            ("3.seg.png", b"P"),
            ("3.jpg", b"J3"),
            ("README", b"not a field"),
        ],
    );
    dir.display().to_string()
}

fn open(path: &str, index: WdsIndex, on_error: OnError) -> Result<IndexedWebDataset> {
    let opts = WdsOptions {
        on_error,
        ..Default::default()
    };
    IndexedWebDataset::open(&[path.to_string()], index, opts)
}

#[test]
fn random_access_gives_exactly_the_streamed_samples() {
    let dir = tempfile::tempdir().unwrap();
    let path = two_shards(dir.path());
    let streamed: Vec<Sample> = WebDatasetSource::open(std::slice::from_ref(&path), None)
        .unwrap()
        .stream()
        .unwrap()
        .collect::<Result<_>>()
        .unwrap();
    let src = open(&path, WdsIndex::Flag(true), OnError::Raise).unwrap();
    assert!(src.random_access());
    assert_eq!(src.len(), Some(streamed.len() as u64));
    assert_eq!(src.len(), Some(4));
    // Backwards, one by one, then all at once out of order: the same samples.
    for i in (0..4).rev() {
        assert_eq!(src.get(i).unwrap(), streamed[i as usize]);
    }
    let got = src.get_many(&[3, 0, 2, 1]);
    for (r, i) in got.into_iter().zip([3, 0, 2, 1]) {
        assert_eq!(r.unwrap(), streamed[i]);
    }
    assert!(src.get(4).unwrap_err().to_string().contains("out of range"));
}

#[test]
fn an_index_directory_keeps_built_indexes_and_stale_ones_are_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let path = two_shards(dir.path());
    let idx = dir.path().join("idx");
    let at = WdsIndex::Dir(idx.display().to_string());
    let first = open(&path, at.clone(), OnError::Raise).unwrap();
    let file = idx.join("a.tar.idx");
    let stored = ShardIndex::from_bytes("a", &std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(stored.samples(), 3);
    // Reopening reads it (a planted wrong index with the right size would be used: proof).
    let mut planted = stored.clone();
    planted.offsets = vec![0, planted.offsets[3]];
    std::fs::write(&file, planted.to_bytes()).unwrap();
    let e = open(&path, at.clone(), OnError::Raise)
        .unwrap()
        .get(0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not match") && e.contains("a.tar"), "{e}");
    // An index of another size is not used: rebuilt, and written again.
    planted.size += 1;
    std::fs::write(&file, planted.to_bytes()).unwrap();
    let again = open(&path, at, OnError::Raise).unwrap();
    assert_eq!(again.len(), first.len());
    assert_eq!(again.get(2).unwrap(), first.get(2).unwrap());
    assert_eq!(
        ShardIndex::from_bytes("a", &std::fs::read(&file).unwrap()).unwrap(),
        stored
    );
    // A sidecar beside the shard is what index=True reads.
    std::fs::write(dir.path().join("b.tar.idx"), b"garbage").unwrap();
    assert_eq!(
        open(&path, WdsIndex::Flag(true), OnError::Raise)
            .unwrap()
            .len(),
        Some(4)
    );
}

#[test]
fn bad_members_raise_on_their_sample_or_are_skipped_once() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("links.tar");
    let mut b = tar::Builder::new(std::fs::File::create(&p).unwrap());
    for (name, kind) in [
        ("0.txt", tar::EntryType::Regular),
        ("0.lnk", tar::EntryType::Symlink),
        ("0.cls", tar::EntryType::Regular),
        ("1.txt", tar::EntryType::Regular),
    ] {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(if kind == tar::EntryType::Regular {
            1
        } else {
            0
        });
        h.set_mode(0o644);
        if kind.is_symlink() {
            h.set_link_name("0.txt").unwrap();
        }
        let data: &[u8] = if kind == tar::EntryType::Regular {
            b"x"
        } else {
            b""
        };
        b.append_data(&mut h, name, data).unwrap();
    }
    b.finish().unwrap();
    let path = p.display().to_string();
    let raise = open(&path, WdsIndex::Flag(true), OnError::Raise).unwrap();
    assert_eq!(raise.len(), Some(2));
    let e = raise.get(0).unwrap_err().to_string();
    assert!(e.contains("symbolic link") && e.contains("0.lnk"), "{e}");
    assert!(raise.get(1).is_ok());
    let skip = open(&path, WdsIndex::Flag(true), OnError::Skip).unwrap();
    let s0 = skip.get(0).unwrap();
    assert!(s0.get("txt").is_some() && s0.get("cls").is_some());
    skip.get(1).unwrap();
    assert_eq!(skip.skipped_reading(), 1);
}

#[test]
fn oversized_members_are_never_read_into_memory() {
    let dir = tempfile::tempdir().unwrap();
    let big = vec![7u8; 3000];
    let path = shard(
        dir.path(),
        "big.tar",
        &[("0.bin", &big), ("0.txt", b"t"), ("1.txt", b"u")],
    );
    let opts = WdsOptions {
        on_error: OnError::Skip,
        max_member_size: 1000,
    };
    let src = IndexedWebDataset::open(&[path], WdsIndex::Flag(true), opts).unwrap();
    let s = src.get(0).unwrap();
    assert!(s.get("bin").is_none() && s.get("txt").is_some());
    assert_eq!(src.skipped_reading(), 1);
}

#[test]
fn compressed_shards_and_garbage_indexes_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = shard(dir.path(), "a.tar", &[("0.txt", b"x")]);
    let gz = dir.path().join("a.tar.gz");
    let mut enc =
        flate2::write::GzEncoder::new(std::fs::File::create(&gz).unwrap(), Default::default());
    std::io::copy(&mut std::fs::File::open(&path).unwrap(), &mut enc).unwrap();
    enc.finish().unwrap();
    let e = open(
        &gz.display().to_string(),
        WdsIndex::Flag(true),
        OnError::Raise,
    )
    .unwrap_err();
    assert!(e.to_string().contains("uncompressed"), "{e}");
    for bad in [&b""[..], b"SLWDSIX1", &[0u8; 40]] {
        assert!(ShardIndex::from_bytes("x.idx", bad).is_err());
    }
    let mut unordered = ShardIndex {
        size: 100,
        max_member_size: 10,
        offsets: vec![0, 50, 40],
    }
    .to_bytes();
    assert!(ShardIndex::from_bytes("x.idx", &unordered).is_err());
    unordered.truncate(unordered.len() - 1);
    assert!(ShardIndex::from_bytes("x.idx", &unordered).is_err());
}

#[test]
fn a_shard_without_samples_adds_none() {
    let dir = tempfile::tempdir().unwrap();
    shard(dir.path(), "a.tar", &[("README", b"no extension")]);
    shard(dir.path(), "b.tar", &[("0.txt", b"x")]);
    let src = open(
        &dir.path().display().to_string(),
        WdsIndex::Flag(true),
        OnError::Raise,
    )
    .unwrap();
    assert_eq!(src.len(), Some(1));
    assert_eq!(
        src.get(0)
            .unwrap()
            .get("__url__")
            .unwrap()
            .as_str()
            .unwrap(),
        src.paths[1]
    );
}

#[test]
fn a_shard_changed_after_indexing_is_an_error_not_other_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = shard(dir.path(), "a.tar", &[("0.txt", b"x"), ("1.txt", b"y")]);
    let src = open(&path, WdsIndex::Flag(true), OnError::Raise).unwrap();
    assert!(src.get(1).is_ok());
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(&mut f, &[0u8; 512]).unwrap();
    let e = src.get(1).unwrap_err().to_string();
    assert!(e.contains("changed since it was indexed"), "{e}");
    assert!(src.get_many(&[0])[0].is_err());
}
