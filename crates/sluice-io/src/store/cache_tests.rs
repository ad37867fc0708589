use super::*;

#[test]
fn a_source_sets_the_cache_of_its_buckets_and_its_spec_carries_it() {
    let dir = tempfile::tempdir().unwrap();
    let spec = CacheSpec {
        dir: Some(dir.path().display().to_string()),
        limit: Some(1 << 20),
    };
    let paths = vec![
        "s3://reg-a/x/1.jpg".to_string(),
        "s3://reg-a/x/2.jpg".to_string(),
        "local/file.jpg".to_string(),
    ];
    register(&paths, Some(&spec)).unwrap();
    assert_eq!(spec_of(&paths), Some(spec.clone()));
    let cache = cache_for("s3://reg-a/y/3.jpg").unwrap();
    assert_eq!((cache.dir(), cache.limit()), (dir.path(), 1 << 20));
    // Local paths only: nothing to carry.
    assert_eq!(spec_of(&paths[2..]), None);
    // `cache_limit=0` turns it off for the bucket.
    let off = CacheSpec {
        dir: None,
        limit: Some(0),
    };
    register(&paths[..1], Some(&off)).unwrap();
    assert!(cache_for("s3://reg-a/x/1.jpg").is_none());
    assert_eq!(spec_of(&paths), Some(off));
}

#[test]
fn a_cache_dir_that_cannot_be_made_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain-file");
    std::fs::write(&file, b"").unwrap();
    let spec = CacheSpec {
        dir: Some(file.join("sub").display().to_string()),
        limit: None,
    };
    let e = register(&["s3://reg-b/x".to_string()], Some(&spec)).unwrap_err();
    assert!(e.to_string().contains("plain-file"), "{e}");
}

#[test]
fn versions_the_store_gave_decide_whether_a_copy_is_current() {
    let url = "s3://reg-c/k";
    let v = Version {
        size: 3,
        etag: Some("\"a\"".into()),
    };
    assert_eq!(is_current(url, &v), None);
    saw(url, 3, Some("\"a\""));
    assert_eq!(is_current(url, &v), Some(true));
    saw(url, 3, Some("\"b\""));
    assert_eq!(is_current(url, &v), Some(false));
}

#[test]
fn reads_of_a_download_wait_for_parts_in_flight_and_skip_parts_far_ahead() {
    let file = tempfile::tempfile().unwrap();
    let parts = (PARTS_IN_FLIGHT + 4) as u64;
    file.set_len(parts * PART).unwrap();
    file.write_all_at(b"part0", 0).unwrap();
    let f = Arc::new(Filling {
        file,
        size: parts * PART,
        parts: Mutex::new(vec![0; parts as usize]),
        landed: Condvar::new(),
    });
    // Nothing in flight: read from the store.
    assert!(f.read(&(0..5)).is_none());
    f.mark(0, 1);
    let reader = {
        let f = f.clone();
        std::thread::spawn(move || f.read(&(0..5)))
    };
    f.mark(0, 2);
    assert_eq!(&reader.join().unwrap().unwrap()[..], b"part0");
    // A part a window past the ones started (a footer at the end): not waited for.
    f.mark(1, 1);
    let last = (parts - 1) * PART;
    assert!(f.read(&(last..last + 8)).is_none());
    // A failed part: read from the store.
    f.mark(1, 3);
    assert!(f.read(&(PART..PART + 1)).is_none());
}

/// A process that exits right after its last read first waits for the copies its writer
/// still holds: `flush_writes` returns once they are stored, and says when time ran out.
#[test]
fn flushing_waits_for_the_queued_cache_writes() {
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    let (gate_tx, gate_rx) = crossbeam_channel::bounded::<()>(0);
    let written = Arc::new(AtomicBool::new(false));
    let w = written.clone();
    in_background(move || {
        // Held until the test lets it go: a write still queued, whatever the machine's speed.
        let _ = gate_rx.recv();
        w.store(true, SeqCst);
    });
    assert!(!flush_writes(Duration::ZERO), "a write is still queued");
    gate_tx.send(()).unwrap();
    assert!(flush_writes(Duration::from_secs(30)));
    assert!(written.load(SeqCst));
}

/// A download whose object is rewritten before its parts are asked for stores nothing: its
/// parts are pinned to the version the open saw, and a copy of two versions (or of the new
/// one) would be stored under that version for every later read of the node.
#[test]
fn a_download_of_an_object_rewritten_since_its_open_stores_nothing() {
    use object_store::memory::InMemory;
    use object_store::{ObjectStoreExt, PutPayload};
    let dir = tempfile::tempdir().unwrap();
    let cache = Arc::new(DiskCache::open(dir.path(), 1 << 30).unwrap());
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let (url, path) = ("s3://pin-a/k", ObjPath::from("k"));
    let put = |b: &'static [u8]| {
        crate::store::block_on(store.put(&path, PutPayload::from_static(b)))
            .unwrap()
            .unwrap()
    };
    let opened = put(b"version one");
    let version = Version {
        size: 11,
        etag: opened.e_tag,
    };
    put(b"version two"); // same size, other bytes
    let copy = Arc::new(OnceLock::new());
    let fill = cache.begin(url).unwrap().unwrap();
    let lat = Arc::new(Latency::default());
    let f = start_fill(fill, &store, &path, url, version.clone(), &lat, &copy).unwrap();
    // The part fails rather than landing; a reader then goes to the store (and is refused).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while f.parts.lock().unwrap()[0] < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the download never ended"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(f.read(&(0..11)).is_none());
    assert!(copy.get().is_none());
    assert!(cache.lookup(url, |v| v == &version).is_none());
}
