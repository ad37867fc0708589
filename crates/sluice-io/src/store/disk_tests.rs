use super::*;

fn v(size: u64, etag: &str) -> Version {
    Version {
        size,
        etag: Some(etag.into()),
    }
}

fn open(dir: &Path, limit: u64) -> Arc<DiskCache> {
    Arc::new(DiskCache::open(dir, limit).unwrap())
}

fn put(cache: &Arc<DiskCache>, url: &str, data: &[u8]) {
    let fill = cache.begin(url).unwrap().expect("not filling");
    fill.commit(&v(data.len() as u64, "e"), data).unwrap();
}

/// Every file under the cache directory but its two bookkeeping files.
fn bytes_on_disk(dir: &Path) -> u64 {
    fn walk(p: &Path) -> u64 {
        std::fs::read_dir(p)
            .unwrap()
            .flatten()
            .map(|e| {
                let m = e.metadata().unwrap();
                if m.is_dir() {
                    walk(&e.path())
                } else {
                    m.len()
                }
            })
            .sum()
    }
    walk(&dir.join("objects")) + walk(&dir.join("tmp"))
}

#[test]
fn a_stored_object_reads_back_and_a_changed_one_misses() {
    let dir = tempfile::tempdir().unwrap();
    let cache = open(dir.path(), 1 << 20);
    assert!(cache.lookup("s3://b/x", |_| true).is_none());
    assert!(!cache.holds("s3://b/x"));
    put(&cache, "s3://b/x", b"abc");
    assert!(cache.holds("s3://b/x") && !cache.holds("s3://b/y"));
    let hit = cache.lookup("s3://b/x", |got| got == &v(3, "e")).unwrap();
    assert_eq!(hit.read_all().unwrap(), b"abc");
    assert!(cache
        .lookup("s3://b/x", |got| got == &v(3, "other"))
        .is_none());
    assert!(cache.lookup("s3://b/y", |_| true).is_none());
    // Stored again (the object changed in its bucket): the new bytes replace the old.
    let fill = cache.begin("s3://b/x").unwrap().unwrap();
    fill.commit(&v(4, "e2"), b"abcd").unwrap();
    let hit = cache.lookup("s3://b/x", |_| true).unwrap();
    assert_eq!(
        (hit.read_all().unwrap(), hit.version),
        (b"abcd".to_vec(), v(4, "e2"))
    );
    assert_eq!(cache.held_bytes().unwrap(), bytes_on_disk(dir.path()));
}

/// The `usage` counter as the cache keeps it, without a scan.
fn counted(dir: &Path) -> u64 {
    let word = std::fs::read(dir.join("usage")).unwrap();
    u64::from_le_bytes(word[..8].try_into().unwrap())
}

#[test]
fn whole_objects_stored_from_threads_are_counted_exactly_without_a_scan() {
    let dir = tempfile::tempdir().unwrap();
    let cache = open(dir.path(), 1 << 30);
    std::thread::scope(|s| {
        for t in 0..4 {
            let cache = &cache;
            s.spawn(move || {
                for i in 0..50 {
                    put(cache, &format!("s3://b/{t}/{i}"), &vec![t as u8; 100 + i]);
                }
            });
        }
    });
    // Replacing an object counts the new copy in place of the old.
    let fill = cache.begin("s3://b/0/0").unwrap().unwrap();
    fill.commit(&v(7, "e2"), b"replace").unwrap();
    assert_eq!(counted(dir.path()), bytes_on_disk(dir.path()));
    assert_eq!(
        std::fs::read_dir(dir.path().join("tmp")).unwrap().count(),
        0
    );
    assert_eq!(cache.held_bytes().unwrap(), counted(dir.path()));
}

#[test]
fn one_download_at_a_time_and_an_abandoned_one_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cache = open(dir.path(), 1 << 20);
    let mut fill = cache.begin("s3://b/x").unwrap().unwrap();
    // Another thread or process (another open file description) finds it taken.
    assert!(cache.begin("s3://b/x").unwrap().is_none());
    assert!(cache.begin("s3://b/other").unwrap().is_some());
    assert!(fill.reserve(1000).unwrap());
    fill.file().unwrap().write_all_at(b"partial", 0).unwrap();
    // A partial download is never visible.
    assert!(cache.lookup("s3://b/x", |_| true).is_none());
    drop(fill);
    assert!(cache.lookup("s3://b/x", |_| true).is_none());
    assert_eq!(bytes_on_disk(dir.path()), 0);
    assert_eq!(cache.held_bytes().unwrap(), 0);
    assert!(cache.begin("s3://b/x").unwrap().is_some());
}

/// The open file description locks on each file (device major, minor, inode), from
/// `/proc/locks` (every process's).
#[cfg(target_os = "linux")]
fn locks_per_file() -> std::collections::HashMap<(u32, u32, u64), usize> {
    let mut per = std::collections::HashMap::new();
    for line in std::fs::read_to_string("/proc/locks").unwrap().lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // "1: OFDLCK ADVISORY WRITE -1 fd:01:1234 0 0" (a blocked waiter's line has "->").
        if fields.get(1) != Some(&"OFDLCK") {
            continue;
        }
        let Some(id) = fields.get(5).map(|f| f.split(':').collect::<Vec<_>>()) else {
            continue;
        };
        if let [maj, min, ino] = id[..] {
            if let (Ok(maj), Ok(min), Ok(ino)) = (
                u32::from_str_radix(maj, 16),
                u32::from_str_radix(min, 16),
                ino.parse(),
            ) {
                *per.entry((maj, min, ino)).or_insert(0) += 1;
            }
        }
    }
    per
}

/// Downloads in flight take no lock on the accounting file (every download takes that one
/// twice: the kernel walks its whole list each time) and are spread over the fill lock
/// files; a scan still sees each held download's lock, in whichever file it is.
#[cfg(target_os = "linux")]
#[test]
fn downloads_in_flight_are_locked_apart_from_the_accounting_lock() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let cache = open(dir.path(), 1 << 30);
    let mut fills: Vec<Fill> = (0..64)
        .map(|i| cache.begin(&format!("s3://b/{i}")).unwrap().unwrap())
        .collect();
    for fill in &mut fills {
        assert!(fill.reserve(10).unwrap());
    }
    let id = |m: std::fs::Metadata| (libc::major(m.dev()), libc::minor(m.dev()), m.ino());
    let lock = id(std::fs::metadata(dir.path().join("lock")).unwrap());
    let files: Vec<_> = std::fs::read_dir(dir.path().join("fills"))
        .unwrap()
        .flatten()
        .map(|e| id(e.metadata().unwrap()))
        .collect();
    // `/proc/locks` is read while other tests take and drop locks, and a read can skip a
    // line then: read again until every one of the 64 is seen.
    let mut shards = Vec::new();
    for _ in 0..100 {
        let per = locks_per_file();
        assert_eq!(
            per.get(&lock),
            None,
            "a download's lock on the accounting file"
        );
        shards = files
            .iter()
            .map(|f| per.get(f).copied().unwrap_or(0))
            .collect();
        if shards.iter().sum::<usize>() == 64 {
            break;
        }
    }
    assert_eq!(shards.iter().sum::<usize>(), 64, "{shards:?}");
    assert!(
        shards.len() > 8 && shards.iter().all(|&n| n < 20),
        "{shards:?}"
    );
    // Every download is still in progress: a scan keeps all 64 and removes none.
    let reserved = bytes_on_disk(dir.path());
    assert!(reserved >= 640, "{reserved}");
    assert_eq!(cache.held_bytes().unwrap(), reserved);
    assert_eq!(
        std::fs::read_dir(dir.path().join("tmp")).unwrap().count(),
        64
    );
    assert!(cache.begin("s3://b/7").unwrap().is_none());
    drop(fills);
    assert_eq!(cache.held_bytes().unwrap(), 0);
}

#[test]
fn a_download_whose_process_died_is_cleaned_up_by_the_next_scan() {
    let dir = tempfile::tempdir().unwrap();
    let cache = open(dir.path(), 1 << 20);
    // What a killed process leaves: a temporary file nobody holds the lock of.
    let orphan = dir
        .path()
        .join("tmp")
        .join(format!("{:032x}.99999.0", hash_url("s3://b/dead")));
    std::fs::write(&orphan, vec![0u8; 5000]).unwrap();
    assert_eq!(cache.held_bytes().unwrap(), 0);
    assert!(!orphan.exists());
}

#[test]
fn eviction_keeps_the_cap_and_drops_the_least_recently_used() {
    let dir = tempfile::tempdir().unwrap();
    let cap = 20_000;
    let cache = open(dir.path(), cap);
    let old = SystemTime::now() - Duration::from_secs(3600);
    for i in 0..40 {
        let url = format!("s3://b/{i}");
        put(&cache, &url, &vec![i as u8; 1000]);
        assert!(bytes_on_disk(dir.path()) <= cap, "over the cap after {i}");
        // Object 0 is read all along (recent); the others age as they are written.
        let when = if i == 0 {
            SystemTime::now()
        } else {
            old + Duration::from_secs(i)
        };
        if let Some(hit) = cache.lookup(&url, |_| true) {
            hit.file.set_modified(when).unwrap();
        }
        if let Some(hit) = cache.lookup("s3://b/0", |_| true) {
            hit.file.set_modified(SystemTime::now()).unwrap();
        }
    }
    assert!(
        cache.lookup("s3://b/0", |_| true).is_some(),
        "the recently read one stays"
    );
    assert!(
        cache.lookup("s3://b/39", |_| true).is_some(),
        "the newest stays"
    );
    assert!(
        cache.lookup("s3://b/1", |_| true).is_none(),
        "the oldest went"
    );
    assert_eq!(cache.held_bytes().unwrap(), bytes_on_disk(dir.path()));
}

#[test]
fn an_object_over_half_the_cap_is_not_cached() {
    let dir = tempfile::tempdir().unwrap();
    // Over half (its reservation counts a trailer and some slack): it would evict everything
    // else, whichever path stores it.
    let cache = open(dir.path(), 2000);
    put(&cache, "s3://b/half", &[1u8; 1000]);
    assert!(cache.lookup("s3://b/half", |_| true).is_none());
    put(&cache, "s3://b/small", &[1u8; 100]);
    assert!(cache.lookup("s3://b/small", |_| true).is_some());
    let dir = tempfile::tempdir().unwrap();
    let cache = open(dir.path(), 100);
    let mut fill = cache.begin("s3://b/big").unwrap().unwrap();
    assert!(!fill.reserve(1000).unwrap());
    drop(fill);
    put(&cache, "s3://b/big", &[7u8; 1000]);
    assert!(cache.lookup("s3://b/big", |_| true).is_none());
    assert_eq!(bytes_on_disk(dir.path()), 0);
}

#[test]
fn a_damaged_cached_file_is_a_miss() {
    let dir = tempfile::tempdir().unwrap();
    let cache = open(dir.path(), 1 << 20);
    put(&cache, "s3://b/x", &[1u8; 100]);
    let path = cache.object_path(hash_url("s3://b/x"));
    let f = File::options().write(true).open(&path).unwrap();
    f.set_len(60).unwrap();
    assert!(cache.lookup("s3://b/x", |_| true).is_none());
}

#[test]
fn concurrent_fills_never_pass_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let cap = 25_000;
    let cache = open(dir.path(), cap);
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // Measured under the accounting lock: a walk beside the writers could count an object
    // before its eviction and the download that replaced it after.
    let watcher = {
        let (done, cache) = (done.clone(), cache.clone());
        std::thread::spawn(move || {
            let mut most = 0;
            while !done.load(Relaxed) {
                most = most.max(cache.held_bytes().unwrap());
            }
            most
        })
    };
    let workers: Vec<_> = (0..4u64)
        .map(|t| {
            let cache = cache.clone();
            std::thread::spawn(move || {
                for i in 0..300u64 {
                    let url = format!("s3://b/{}", (i * 7 + t * 13) % 40);
                    if cache.lookup(&url, |_| true).is_none() {
                        if let Some(fill) = cache.begin(&url).unwrap() {
                            fill.commit(&v(1000, "e"), &[t as u8; 1000]).unwrap();
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    done.store(true, Relaxed);
    let most = watcher.join().unwrap();
    assert!(most <= cap, "{most} bytes on disk, cap {cap}");
    assert_eq!(cache.held_bytes().unwrap(), bytes_on_disk(dir.path()));
}

/// A loop over a dataset bigger than the cap (a training job's epochs): a full cache keeps
/// the objects used within its window (ten minutes at least) instead of evicting them for
/// objects the next epoch would evict in turn, and reads the others without storing them;
/// objects idle for longer (another dataset's, yesterday's) still go, least recently used
/// first.
#[test]
fn a_full_cache_keeps_objects_a_loop_reuses_and_evicts_idle_ones() {
    let dir = tempfile::tempdir().unwrap();
    let cap = 20_000;
    let cache = open(dir.path(), cap);
    let ago = |s: u64| SystemTime::now() - Duration::from_secs(s);
    let age = |url: &str, when: SystemTime| {
        let f = File::options()
            .write(true)
            .open(cache.object_path(hash_url(url)))
            .unwrap();
        f.set_modified(when).unwrap();
    };
    // A first epoch now: the cache fills with the first objects and keeps them; the rest
    // are not stored, and nothing is evicted for them.
    for i in 0..40 {
        put(&cache, &format!("s3://now/{i}"), &vec![i as u8; 1000]);
    }
    let first: Vec<u64> = (0..40)
        .filter(|i| cache.holds(&format!("s3://now/{i}")))
        .collect();
    assert_eq!(first, (0..first.len() as u64).collect::<Vec<_>>());
    assert!(first.len() >= 17, "{first:?}");
    // Known full: the next misses are read without being offered to it (`fetch_object`).
    assert!(cache.known_full());
    // An epoch long ago (idle 961-1,000 s, past the window): plain LRU, and the cache ends
    // holding the last ones stored.
    for i in first {
        age(&format!("s3://now/{i}"), ago(5000));
    }
    cache.reuse.forget_full();
    assert!(!cache.known_full());
    for i in 0..40 {
        let url = format!("s3://b/{i}");
        put(&cache, &url, &vec![i as u8; 1000]);
        age(&url, ago(1000 - i));
    }
    let held: Vec<u64> = (0..40)
        .filter(|i| cache.holds(&format!("s3://b/{i}")))
        .collect();
    assert!(
        held.len() >= 15 && held.contains(&39) && !held.contains(&0),
        "{held:?}"
    );
    assert!((0..40).all(|i| !cache.holds(&format!("s3://now/{i}"))));
    // The next epoch finds them about 100 s after their last use.
    for &i in &held {
        let url = format!("s3://b/{i}");
        age(&url, ago(100));
        assert!(cache.lookup(&url, |_| true).is_some());
        age(&url, ago(100));
    }
    // The objects it misses are stored while there is room (eviction left some), then read
    // without being stored: nothing is evicted for them.
    cache.reuse.forget_full();
    let room = (cap - cache.held_bytes().unwrap()) / 1034; // an object and its trailer
    for i in 0..10 {
        put(&cache, &format!("s3://b/{i}"), &vec![i as u8; 1000]);
    }
    let stored = (0..10).filter(|i| cache.holds(&format!("s3://b/{i}")));
    assert_eq!(stored.count() as u64, room);
    assert!(held.iter().all(|i| cache.holds(&format!("s3://b/{i}"))));
    assert_eq!(cache.held_bytes().unwrap(), bytes_on_disk(dir.path()));
    // An object idle for far longer than the window (an hour) goes, once the cache looks
    // again (it was found full a moment ago).
    let stale = held[0];
    age(&format!("s3://b/{stale}"), ago(3600));
    cache.reuse.forget_full();
    put(&cache, "s3://b/new", &[7u8; 1000]);
    assert!(cache.holds("s3://b/new"));
    assert!(!cache.holds(&format!("s3://b/{stale}")));
    assert!(held[1..]
        .iter()
        .all(|i| cache.holds(&format!("s3://b/{i}"))));
    assert!(bytes_on_disk(dir.path()) <= cap);
}
