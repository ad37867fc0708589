use super::*;

fn shard(dir: &std::path::Path, name: &str, members: &[(&str, &[u8])]) -> String {
    let p = dir.join(name);
    let mut b = tar::Builder::new(std::fs::File::create(&p).unwrap());
    for (path, data) in members {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        // `set_path` refuses '..', so write the raw name the way a hostile shard would.
        let raw = &mut h.as_old_mut().name;
        raw[..path.len()].copy_from_slice(path.as_bytes());
        h.set_cksum();
        b.append(&h, *data).unwrap();
    }
    b.finish().unwrap();
    p.display().to_string()
}

fn collect(src: &WebDatasetSource) -> Result<Vec<Sample>> {
    src.stream()?.collect()
}

#[test]
fn groups_members_by_key_across_shards() {
    let dir = tempfile::tempdir().unwrap();
    shard(
        dir.path(),
        "a.tar",
        &[("x/1.jpg", b"J1"), ("x/1.cls", b"0"), ("x/2.jpg", b"J2")],
    );
    shard(
        dir.path(),
        "b.tar",
        &[("3.seg.png", b"P"), ("3.jpg", b"J3")],
    );
    let src = WebDatasetSource::open(&[dir.path().display().to_string()], None).unwrap();
    assert!(!src.random_access());
    let got = collect(&src).unwrap();
    let keys: Vec<_> = got
        .iter()
        .map(|s| s.get("__key__").unwrap().as_str().unwrap())
        .collect();
    assert_eq!(keys, ["x/1", "x/2", "3"]);
    assert_eq!(got[0].get("cls").unwrap().as_bytes(), Some(&b"0"[..]));
    assert_eq!(got[2].get("seg.png").unwrap().as_bytes(), Some(&b"P"[..]));
}

#[test]
fn traversal_members_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    shard(
        dir.path(),
        "evil.tar",
        &[("ok.txt", b"x"), ("../../etc/passwd.txt", b"y")],
    );
    let src = WebDatasetSource::open(&[dir.path().display().to_string()], None).unwrap();
    let e = collect(&src).unwrap_err().to_string();
    assert!(e.contains("evil.tar") && e.contains("'..'"), "{e}");
}

/// A shard of (name, type, data) members, written raw.
fn typed_shard(dir: &std::path::Path, members: &[(&[u8], tar::EntryType, &[u8])]) -> String {
    let p = dir.join("typed.tar");
    let mut b = tar::Builder::new(std::fs::File::create(&p).unwrap());
    for (name, kind, data) in members {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(*kind);
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.as_old_mut().name[..name.len()].copy_from_slice(name);
        if kind.is_symlink() || kind.is_hard_link() {
            h.set_link_name("0.txt").unwrap();
        }
        h.set_cksum();
        b.append(&h, *data).unwrap();
    }
    b.finish().unwrap();
    p.display().to_string()
}

fn open_opts(p: &str, on_error: OnError, max: u64) -> WebDatasetSource {
    let opts = WdsOptions {
        on_error,
        max_member_size: max,
    };
    WebDatasetSource::open_with(&[p.to_string()], None, None, opts).unwrap()
}

fn keys(samples: &[Sample]) -> Vec<&str> {
    samples
        .iter()
        .map(|s| s.get("__key__").unwrap().as_str().unwrap())
        .collect()
}

#[test]
fn links_fifos_and_devices_raise_or_are_skipped_and_counted() {
    use tar::EntryType as T;
    let dir = tempfile::tempdir().unwrap();
    let p = typed_shard(
        dir.path(),
        &[
            (b"0.txt", T::Regular, b"a"),
            (b"d/", T::Directory, b""),
            (b"1.txt", T::Symlink, b""),
            (b"2.txt", T::Link, b""),
            (b"3.txt", T::Fifo, b""),
            (b"4.txt", T::Char, b""),
            (b"5.txt", T::Block, b""),
            (b"6.txt", T::Regular, b"b"),
        ],
    );
    let raising = open_opts(&p, OnError::Raise, DEFAULT_MAX_MEMBER_SIZE);
    let e = collect(&raising).unwrap_err().to_string();
    assert!(
        e.contains("typed.tar") && e.contains("'1.txt'") && e.contains("symbolic link"),
        "{e}"
    );
    let skipping = open_opts(&p, OnError::Skip, DEFAULT_MAX_MEMBER_SIZE);
    let got = collect(&skipping).unwrap();
    assert_eq!(keys(&got), ["0", "6"]);
    assert_eq!(skipping.skipped_reading(), 5);
    // Clones share the count; every stream adds to it.
    collect(&skipping.clone()).unwrap();
    assert_eq!(skipping.skipped_reading(), 10);
}

#[test]
fn oversized_members_raise_or_are_skipped_without_being_held() {
    let dir = tempfile::tempdir().unwrap();
    let big = vec![7u8; 5000];
    let p = typed_shard(
        dir.path(),
        &[
            (b"0.txt", tar::EntryType::Regular, b"a"),
            (b"1.bin", tar::EntryType::Regular, &big),
            (b"2.txt", tar::EntryType::Regular, b"c"),
        ],
    );
    let e = collect(&open_opts(&p, OnError::Raise, 4096))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("'1.bin'") && e.contains("5000 bytes") && e.contains("max_member_size"),
        "{e}"
    );
    let skipping = open_opts(&p, OnError::Skip, 4096);
    assert_eq!(keys(&collect(&skipping).unwrap()), ["0", "2"]);
    assert_eq!(skipping.skipped_reading(), 1);
    assert_eq!(
        collect(&open_opts(&p, OnError::Raise, 5000)).unwrap().len(),
        3
    );
}

#[test]
fn a_member_declaring_more_than_the_shard_holds_is_an_error_not_an_allocation() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("short.tar");
    let mut h = tar::Header::new_gnu();
    h.set_path("0.bin").unwrap();
    h.set_size(8 << 30);
    h.set_mode(0o644);
    h.set_cksum();
    let mut bytes = h.as_bytes().to_vec();
    bytes.extend_from_slice(&[1u8; 1024]);
    std::fs::write(&p, bytes).unwrap();
    let p = p.display().to_string();
    let e = collect(&open_opts(&p, OnError::Raise, DEFAULT_MAX_MEMBER_SIZE))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("'0.bin'") && e.contains("8589934592 bytes"),
        "{e}"
    );
    // Allowed, it is read as far as the shard goes, then reported as cut short.
    let e = collect(&open_opts(&p, OnError::Raise, u64::MAX))
        .unwrap_err()
        .to_string();
    assert!(e.contains("cut short") && e.contains("1024 of"), "{e}");
    // Skipped, the skip runs into the end of the shard: structure damage always raises.
    let e = collect(&open_opts(&p, OnError::Skip, DEFAULT_MAX_MEMBER_SIZE))
        .unwrap_err()
        .to_string();
    assert!(e.contains("not a readable tar shard"), "{e}");
}

#[test]
fn bytes_from_the_shard_are_escaped_in_messages() {
    let dir = tempfile::tempdir().unwrap();
    let p = typed_shard(
        dir.path(),
        &[(b"\x1b[2J\x07evil.txt", tar::EntryType::Symlink, b"")],
    );
    let e = collect(&open_opts(&p, OnError::Raise, DEFAULT_MAX_MEMBER_SIZE))
        .unwrap_err()
        .to_string();
    assert!(e.contains("\\x1b[2J\\x07evil.txt"), "{e}");
    // Random bytes: the tar parser quotes header fields (here a newline among them); none
    // reach the message raw.
    let noise: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let q = dir.path().join("noise.tar");
    std::fs::write(&q, noise).unwrap();
    let src = open_opts(
        &q.display().to_string(),
        OnError::Raise,
        DEFAULT_MAX_MEMBER_SIZE,
    );
    let e = collect(&src).unwrap_err().to_string();
    assert!(e.contains("noise.tar"), "{e}");
    assert!(!e.chars().any(|c| c.is_control()), "{e:?}");
}

#[test]
fn ranks_get_disjoint_shards() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..4 {
        shard(
            dir.path(),
            &format!("s{i}.tar"),
            &[(&format!("{i}.txt"), b"x")],
        );
    }
    let all = dir.path().display().to_string();
    let r1 = WebDatasetSource::open(std::slice::from_ref(&all), Some((1, 2))).unwrap();
    assert!(r1.shards()[0].ends_with("s1.tar") && r1.shards()[1].ends_with("s3.tar"));
    assert!(WebDatasetSource::open(&[all], Some((0, 5))).is_err());
}

#[test]
fn shard_order_is_shuffled_per_epoch_deterministically() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..8 {
        shard(
            dir.path(),
            &format!("s{i}.tar"),
            &[(&format!("{i}.txt"), b"x")],
        );
    }
    let all = dir.path().display().to_string();
    let open = |rank, shuffle| {
        WebDatasetSource::open_shuffled(std::slice::from_ref(&all), rank, shuffle).unwrap()
    };
    let plain = open(None, None);
    assert_eq!(plain.epoch_shards(5, 3), plain.shards());
    let seeded = open(None, Some(ShardShuffle::Seed(11)));
    let (e0, e1) = (seeded.epoch_shards(0, 0), seeded.epoch_shards(99, 1));
    assert_ne!(e0, e1, "epochs differ");
    assert_ne!(e0, plain.shards(), "shuffled");
    assert_eq!(
        e0,
        open(None, Some(ShardShuffle::Seed(11))).epoch_shards(42, 0)
    );
    let mut sorted = e1.clone();
    sorted.sort();
    assert_eq!(sorted, plain.shards(), "a permutation");
    // The iteration seed drives it when no seed is given.
    let by_iter = open(None, Some(ShardShuffle::IterationSeed));
    assert_ne!(by_iter.epoch_shards(1, 0), by_iter.epoch_shards(2, 0));
    // Ranks split the permuted list: disjoint and covering, every epoch.
    for epoch in 0..4 {
        let a = open(Some((0, 2)), Some(ShardShuffle::Seed(3))).epoch_shards(0, epoch);
        let b = open(Some((1, 2)), Some(ShardShuffle::Seed(3))).epoch_shards(0, epoch);
        let mut both: Vec<_> = a.iter().chain(&b).cloned().collect();
        both.sort();
        assert_eq!((a.len(), b.len()), (4, 4));
        assert_eq!(both, plain.shards());
    }
    // The stream of an epoch follows its shard order.
    let keys: Vec<String> = seeded
        .stream_epoch(0, 1)
        .unwrap()
        .map(|s| {
            s.unwrap()
                .get("__key__")
                .unwrap()
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let want: Vec<String> = e1
        .iter()
        .map(|p| {
            p.rsplit('/')
                .next()
                .unwrap()
                .trim_start_matches('s')
                .trim_end_matches(".tar")
                .to_string()
        })
        .collect();
    assert_eq!(keys, want);
}

#[test]
fn dropping_the_stream_stops_the_reader() {
    let dir = tempfile::tempdir().unwrap();
    let members: Vec<(String, Vec<u8>)> = (0..200)
        .map(|i| (format!("{i:04}.bin"), vec![0u8; 10]))
        .collect();
    let refs: Vec<(&str, &[u8])> = members.iter().map(|(n, d)| (n.as_str(), &d[..])).collect();
    shard(dir.path(), "big.tar", &refs);
    let src = WebDatasetSource::open(&[dir.path().display().to_string()], None).unwrap();
    let first: Vec<_> = src.stream().unwrap().take(3).collect();
    assert_eq!(first.len(), 3);
}
