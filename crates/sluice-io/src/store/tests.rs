use super::blob::CHECK_EVERY_MS;
use super::*;

#[test]
fn urls_split_into_store_and_key() {
    let (b, p) = split_url("s3://bucket/a/b/*.parquet").unwrap();
    assert_eq!((b.as_str(), p.as_str()), ("s3://bucket", "a/b/*.parquet"));
    let (b, p) = split_url("http://127.0.0.1:9000/x/y.tar").unwrap();
    assert_eq!(
        (b.as_str(), p.as_str()),
        ("http://127.0.0.1:9000", "x/y.tar")
    );
}

#[test]
fn gs_and_az_urls_split_too() {
    let (b, p) = split_url("gs://bucket/a/*.tar").unwrap();
    assert_eq!((b.as_str(), p.as_str()), ("gs://bucket", "a/*.tar"));
    let (b, p) = split_url("az://container/train/x.jpg").unwrap();
    assert_eq!((b.as_str(), p.as_str()), ("az://container", "train/x.jpg"));
    let (b, _) = split_url("abfss://c@acct.dfs.core.windows.net/x").unwrap();
    assert_eq!(b, "abfss://c@acct.dfs.core.windows.net");
}

#[test]
fn local_blob_reads_ranges_and_streams() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.bin");
    std::fs::write(&p, b"0123456789").unwrap();
    let blob = Arc::new(Blob::open(&p.display().to_string()).unwrap());
    let parts = blob.read_ranges(&[0..2, 8..10]).unwrap();
    assert_eq!((&parts[0][..], &parts[1][..]), (&b"01"[..], &b"89"[..]));
    assert!(blob
        .read_at(8, 5)
        .unwrap_err()
        .to_string()
        .contains("truncated"));
    let mut all = Vec::new();
    blob.reader().unwrap().read_to_end(&mut all).unwrap();
    assert_eq!(all, b"0123456789");
}

#[test]
fn a_local_file_changed_after_it_was_opened_is_refused_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f.txt");
    std::fs::write(&p, b"aaaa\nbbbb\n").unwrap();
    let blob = Blob::open(&p.display().to_string()).unwrap();
    assert_eq!(&blob.read_at(5, 4).unwrap()[..], b"bbbb");
    // The same length, other bytes: every record boundary stays where the index put it.
    std::fs::write(&p, b"aaaa\ncccc\n").unwrap();
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
    std::fs::File::options()
        .write(true)
        .open(&p)
        .unwrap()
        .set_modified(later)
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(CHECK_EVERY_MS + 10));
    let e = blob.read_at(5, 4).unwrap_err().to_string();
    assert!(
        e.contains("f.txt: the file changed since it was opened"),
        "{e}"
    );
    assert!(blob.changed());
    // At once again, before the next check is due: a retried read gets no new bytes.
    assert!(blob.read_at(0, 4).is_err());
}

#[test]
fn atomic_write_leaves_no_temp_file() {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("part-00000.jsonl");
    write_atomic(&dest.display().to_string(), Bytes::from_static(b"{}\n")).unwrap();
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["part-00000.jsonl"]);
}
