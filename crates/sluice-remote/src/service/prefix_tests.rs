use sluice_core::clock::thread_cpu;
use sluice_core::exec::StageWork;
use sluice_core::stats::{PipelineStats, StageInfo};
use sluice_core::{ChainOp, Emit, Item, Op, OpContext, OpMeta, OpRef, RangeSource, Sample, Value};

use super::*;
use crate::stage::{RemoteStage, StageRunner};
use crate::wire::SPLIT_THRESHOLD;

/// `square` (deterministic: the id squared, with a 4 KB payload so caching pays) or `jitter`
/// (random: a draw from the sample's generator).
#[derive(Debug)]
struct TestOp {
    random: bool,
}

impl Op for TestOp {
    fn name(&self) -> &str {
        if self.random {
            "jitter"
        } else {
            "square"
        }
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({"op": "test", "random": self.random})
    }
    fn meta(&self) -> OpMeta {
        OpMeta {
            random: self.random,
            ..OpMeta::opaque(false)
        }
    }
    fn apply(&self, mut s: Sample, cx: &OpContext) -> sluice_core::Result<Emit> {
        let id = s.require("id", self.name())?.as_int().unwrap_or(0);
        if self.random {
            s.set("r", Value::Float(cx.rng().uniform()));
        } else {
            // Slow enough that a record is worth reading back instead.
            let t0 = thread_cpu();
            while (thread_cpu() - t0).as_secs_f64() < 1e-3 {}
            s.set("sq", Value::Int(id * id));
            s.set("payload", Value::Bytes(vec![id as u8; 4096].into()));
        }
        Ok(Emit::One(s))
    }
}

fn load(shipped: &serde_json::Value) -> sluice_core::Result<Option<OpRef>> {
    Ok((shipped["op"] == "test").then(|| {
        let op: OpRef = Arc::new(TestOp {
            random: shipped["random"] == true,
        });
        op
    }))
}

fn stage(random: &[bool], seed: u64) -> (RemoteStage, StageRunner) {
    let info = StageInfo {
        name: "s".into(),
        threads: 1,
        inline: false,
        queue_capacity: 1,
        pool: None,
    };
    let work = StageWork {
        read: Some(Arc::new(RangeSource::new(100))),
        ops: (random.iter().enumerate())
            .map(|(i, &random)| ChainOp {
                op: Arc::new(TestOp { random }),
                mode: ElemMode::Map,
                on_error: OnError::Raise,
                op_id: i as u64 + 1,
            })
            .collect(),
        seed,
        skip: Default::default(),
        slot: 0,
        stats: Arc::new(PipelineStats::new(vec![info])),
    };
    let main = RemoteStage::new(&work, None).unwrap();
    let runner = StageRunner::new(main.init(), &load, None).unwrap();
    (main, runner)
}

fn items(epoch: u64, sources: &[u64]) -> Chunk {
    (sources.iter().enumerate())
        .map(|(i, &s)| Item {
            epoch,
            index: i as u64,
            source_index: s,
            rows: 1,
            ..Default::default()
        })
        .collect()
}

/// Records as a shard's answer lends them.
fn borrowed(records: &HashMap<u64, Vec<u8>>) -> HashMap<u64, &[u8]> {
    records.iter().map(|(k, v)| (*k, &v[..])).collect()
}

/// `p` run on `frame` with no record cached.
fn run_uncached(p: &PrefixRunner, runner: &StageRunner, frame: &[u8]) -> PrefixRun {
    p.run(runner, frame, &HashMap::new(), 0.0, SPLIT_THRESHOLD)
        .unwrap()
}

fn samples(main: &RemoteStage, reply: &SplitFrame) -> Vec<Sample> {
    let bufs: Vec<&[u8]> = reply.buffers.iter().map(|b| b.bytes()).collect();
    let chunk = main.reply_split(&reply.frame, &bufs, None).unwrap();
    chunk.into_iter().map(|it| it.sample).collect()
}

#[test]
fn the_prefix_is_the_deterministic_maps_before_the_first_random_op() {
    let (main, runner) = stage(&[false, false, true, false], 1);
    let p = PrefixRunner::of(main.init(), &runner, &PrefixBook::default())
        .unwrap()
        .unwrap();
    assert_eq!(p.split, 2);
    let (main2, runner2) = stage(&[true, false], 1);
    assert!(
        PrefixRunner::of(main2.init(), &runner2, &PrefixBook::default())
            .unwrap()
            .is_none()
    );
    // Other seeds share the prefix; another prefix op does not.
    let (other_seed, r) = stage(&[false, false, true, false], 9);
    let q = PrefixRunner::of(other_seed.init(), &r, &PrefixBook::default())
        .unwrap()
        .unwrap();
    assert_eq!(p.key(), q.key());
    let (shorter, r) = stage(&[false, true], 1);
    let s = PrefixRunner::of(shorter.init(), &r, &PrefixBook::default())
        .unwrap()
        .unwrap();
    assert_ne!(p.key(), s.key());
}

#[test]
fn cached_records_give_the_bytes_of_a_full_run_for_any_seed_and_epoch() {
    let (main, runner) = stage(&[false, true], 1);
    let p = PrefixRunner::of(main.init(), &runner, &PrefixBook::default())
        .unwrap()
        .unwrap();
    let chunk = items(0, &[5, 3, 8, 1]);
    let frame = main.request(chunk.clone(), None).unwrap();
    let full = runner
        .run_split_or_interrupted(&frame, SPLIT_THRESHOLD)
        .unwrap();
    let first = run_uncached(&p, &runner, &frame);
    assert_eq!(samples(&main, &first.reply), samples(&main, &full));
    assert_eq!(first.records.len(), 4, "a 1 ms op on 4 KB is worth caching");
    assert!(first.compute_s > 0.0 && first.record_bytes > 4096);
    // Epoch 3 of a job with another seed: the records serve every item, no prefix runs.
    let (main9, runner9) = stage(&[false, true], 9);
    let records: HashMap<u64, Vec<u8>> = first.records.into_iter().collect();
    let cached = borrowed(&records);
    let frame9 = main9.request(items(3, &[8, 1, 5, 3]), None).unwrap();
    let hit = p
        .run(&runner9, &frame9, &cached, 0.0, SPLIT_THRESHOLD)
        .unwrap();
    let full9 = runner9
        .run_split_or_interrupted(&frame9, SPLIT_THRESHOLD)
        .unwrap();
    assert_eq!(samples(&main9, &hit.reply), samples(&main9, &full9));
    assert!(hit.records.is_empty());
    assert_eq!(hit.compute_s, 0.0, "no item ran the prefix");
    // Some cached, some not: the missing ones are computed and returned.
    let part: HashMap<u64, &[u8]> = cached.into_iter().filter(|(k, _)| *k != 5).collect();
    let mixed = p
        .run(&runner9, &frame9, &part, 0.0, SPLIT_THRESHOLD)
        .unwrap();
    assert_eq!(samples(&main9, &mixed.reply), samples(&main9, &full9));
    assert_eq!(mixed.records.iter().map(|r| r.0).collect::<Vec<_>>(), [5]);
}

#[test]
fn a_corrupt_record_is_an_error_reply_not_a_panic() {
    let (main, runner) = stage(&[false, true], 1);
    let p = PrefixRunner::of(main.init(), &runner, &PrefixBook::default())
        .unwrap()
        .unwrap();
    let frame = main.request(items(0, &[2]), None).unwrap();
    let bad = HashMap::from([(2u64, &[1u8, 2, 3][..])]);
    let out = p.run(&runner, &frame, &bad, 0.0, SPLIT_THRESHOLD).unwrap();
    let bufs: Vec<&[u8]> = out.reply.buffers.iter().map(|b| b.bytes()).collect();
    assert!(main.reply_split(&out.reply.frame, &bufs, None).is_err());
    assert_eq!(PrefixRunner::items(&frame).unwrap(), [2]);
}

#[test]
fn cheap_prefixes_are_not_worth_caching() {
    assert!(worth_caching(1e-3, 150_000));
    assert!(!worth_caching(30e-6, 100_000));
}

#[test]
fn a_file_rewritten_gets_a_new_prefix_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.txt");
    std::fs::write(&file, "one\n").unwrap();
    let spec = serde_json::json!({"kind": "lines", "paths": [file.display().to_string()]});
    let before = local_files(&spec);
    assert_eq!(before.len(), 1);
    std::fs::write(&file, "one\ntwo\n").unwrap();
    assert_ne!(local_files(&spec), before, "size and mtime changed");
    assert!(local_files(&serde_json::json!({"url": "s3://b/k"})).is_empty());
}

/// Reading records back measured slower than computing them: the runner stops returning
/// records and stops using the cache, but tries it again every PROBE_EVERY chunks.
#[test]
fn a_cache_slower_than_computing_is_left_alone_and_probed_now_and_then() {
    let (main, runner) = stage(&[false, true], 1);
    let p = PrefixRunner::of(main.init(), &runner, &PrefixBook::default())
        .unwrap()
        .unwrap();
    let frame = main.request(items(0, &[1, 2]), None).unwrap();
    let first = run_uncached(&p, &runner, &frame);
    assert_eq!(first.records.len(), 2);
    let records: HashMap<u64, Vec<u8>> = first.records.into_iter().collect();
    let cached = borrowed(&records);
    // Fetching two records took a second: far more than the ~1 ms each costs to compute.
    let frame2 = main.request(items(1, &[1, 2, 3]), None).unwrap();
    let slow = p
        .run(&runner, &frame2, &cached, 1.0, SPLIT_THRESHOLD)
        .unwrap();
    assert!(
        slow.records.is_empty(),
        "item 3 computed but not worth storing"
    );
    let (compute, read) = p.measured();
    assert!(read.unwrap() > compute.unwrap());
    let used: Vec<bool> = (0..2 * PROBE_EVERY).map(|_| p.use_cache()).collect();
    assert_eq!(
        used.iter().filter(|u| **u).count(),
        2,
        "one probe per PROBE_EVERY chunks"
    );
}

/// A chunk that found few of its records (the cache still filling) does not set the read
/// cost: its fetch said little about what a warm cache costs.
#[test]
fn a_cold_chunk_does_not_measure_the_read_cost() {
    let (main, runner) = stage(&[false, true], 1);
    let p = PrefixRunner::of(main.init(), &runner, &PrefixBook::default())
        .unwrap()
        .unwrap();
    let first = run_uncached(&p, &runner, &main.request(items(0, &[1]), None).unwrap());
    let records: HashMap<u64, Vec<u8>> = first.records.into_iter().collect();
    let cached = borrowed(&records);
    let frame = main.request(items(0, &[1, 2, 3, 4]), None).unwrap();
    p.run(&runner, &frame, &cached, 1.0, SPLIT_THRESHOLD)
        .unwrap();
    assert_eq!(p.measured().1, None, "1 record of 4 found");
    assert!(p.use_cache());
}

fn bare_runner() -> PrefixRunner {
    PrefixRunner {
        key: "k".into(),
        split: 1,
        costs: Default::default(),
    }
}

#[test]
fn the_shards_are_asked_until_a_read_through_them_costs_more_than_computing() {
    let r = bare_runner();
    // A worker given no shards (its tier is every worker's) neither asks nor fills them, and
    // that chunk is not counted towards the next probe.
    assert!(!r.use_shards(0) && !r.store_in_shards(0, true, 0) && !r.store_in_shards(0, false, 0));
    assert_eq!(r.costs().shard_chunks, 0);
    // Nothing measured: ask them.
    assert!(r.use_shards(2) && r.shards_pay());
    r.costs().compute_s = Some(2e-3);
    // A chunk that found under half of what it asked says nothing.
    r.shard_fetched(0.5, 16, 7);
    assert!(r.shards_pay());
    // 16 records through the shards in 48 ms: 3 ms each, over a 2 ms computation.
    r.shard_fetched(0.048, 16, 16);
    assert!(!r.shards_pay());
    // Then records stay on the node, unless the chunk asked the shards (a probe) or there
    // is no node tier.
    assert!(!r.store_in_shards(2, true, 0));
    assert!(r.store_in_shards(2, true, 3) && r.store_in_shards(2, false, 0));
    let asked: Vec<bool> = (0..2 * PROBE_EVERY).map(|_| r.use_shards(2)).collect();
    assert_eq!(
        asked.iter().filter(|&&a| a).count(),
        2,
        "one probe per {PROBE_EVERY} chunks"
    );
    // Cheap again (a quiet cluster): 0.2 ms a record, and the EWMA brings it back under.
    for _ in 0..20 {
        r.shard_fetched(0.0032, 16, 16);
    }
    assert!(r.shards_pay() && r.use_shards(2));
}

#[test]
fn shards_that_hold_almost_nothing_asked_of_them_stop_being_filled() {
    let r = bare_runner();
    r.costs().compute_s = Some(2e-3);
    // 31 chunks found nothing: not judged yet.
    for _ in 0..SHARD_ASKS_JUDGED - 1 {
        r.shard_fetched(0.001, 4, 0);
    }
    assert!(r.shards_pay());
    r.shard_fetched(0.001, 4, 0);
    assert!(!r.shards_pay(), "32 chunks found none of what they asked");
    // Other nodes start storing what this one needs: the hit rate climbs back.
    for _ in 0..10 {
        r.shard_fetched(0.001, 4, 4);
    }
    assert!(r.shards_pay());
}

#[test]
fn stages_with_one_prefix_share_what_the_worker_measured_of_it() {
    let book = PrefixBook::default();
    let (a, ra) = stage(&[false, false, true, false], 1);
    let (b, rb) = stage(&[false, false, true, false], 9);
    let (other, ro) = stage(&[false, true], 1);
    let p = PrefixRunner::of(a.init(), &ra, &book).unwrap().unwrap();
    let q = PrefixRunner::of(b.init(), &rb, &book).unwrap().unwrap();
    let o = PrefixRunner::of(other.init(), &ro, &book).unwrap().unwrap();
    // The first job's stage judged the shards useless: the second job's, with another seed,
    // does not ask them 32 more times to learn it; another prefix's stage knows nothing yet.
    p.costs().compute_s = Some(2e-3);
    for _ in 0..SHARD_ASKS_JUDGED {
        p.shard_fetched(0.001, 4, 0);
    }
    assert!(!q.shards_pay());
    assert_eq!(q.measured(), (Some(2e-3), None));
    assert_eq!(o.measured(), (None, None));
    assert!(o.shards_pay());
    // Once no stage runs a prefix, its entry goes; a stage built later starts afresh.
    drop((p, q));
    let again = PrefixRunner::of(b.init(), &rb, &book).unwrap().unwrap();
    assert_eq!(again.measured(), (None, None));
    assert_eq!(book.0.lock().unwrap().len(), 2, "{book:?}");
}

/// Records are keyed by the versions of the objects the job listed: a rewritten object gets
/// new records; objects the job knew no version of are not cached at all.
#[test]
fn the_objects_versions_are_part_of_the_prefix_key() {
    let (main, runner) = stage(&[false, true], 1);
    let key = |versions: serde_json::Value, unversioned: u64| {
        let mut p: serde_json::Value = serde_json::from_str(main.init()).unwrap();
        p["versions"] = versions;
        p["unversioned"] = unversioned.into();
        PrefixRunner::of(&p.to_string(), &runner, &PrefixBook::default())
            .unwrap()
            .map(|r| r.key().to_string())
    };
    let listed = key(serde_json::json!([[1, 10, 7]]), 0).unwrap();
    assert_eq!(key(serde_json::json!([[1, 10, 7]]), 0).unwrap(), listed);
    assert_ne!(key(serde_json::json!([[1, 10, 8]]), 0).unwrap(), listed);
    assert!(key(serde_json::json!([]), 3).is_none());
    // Local files the job pinned count the same way.
    let mut p: serde_json::Value = serde_json::from_str(main.init()).unwrap();
    p["versions"] = serde_json::json!([[1, 10, 7]]);
    p["files"] = serde_json::json!([[2, 5, 99]]);
    let pinned = PrefixRunner::of(&p.to_string(), &runner, &PrefixBook::default());
    assert_ne!(pinned.unwrap().unwrap().key(), listed);
}
