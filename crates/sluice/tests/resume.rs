//! Checkpoints round-trip for every kind of pipeline step: checkpoint after every output,
//! resume (with another thread count), and the rest equals the uninterrupted run; the state
//! has the `{node, own, parent}` shape of the pipeline. Random pipelines are checked the same
//! way by proptest. Elastic resume finishes an epoch on another world size exactly.

use std::collections::BTreeMap;
use std::sync::Arc;

use proptest::prelude::*;
use sluice::*;

mod common;
use common::{Noise, Stream};

/// Keeps ids not divisible by 3.
#[derive(Debug)]
struct NotThirds;
impl Op for NotThirds {
    fn name(&self) -> &str {
        "not_thirds"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({"op": "not_thirds"})
    }
    fn meta(&self) -> OpMeta {
        OpMeta::opaque(false)
    }
    fn apply(&self, s: Sample, _: &OpContext) -> Result<Emit> {
        let id = s.get("id").and_then(Value::as_int).unwrap_or(0);
        Ok(if id % 3 == 0 {
            Emit::Drop
        } else {
            Emit::One(s)
        })
    }
}

/// One to three copies of each sample, with `k` set.
#[derive(Debug)]
struct Copies;
impl Op for Copies {
    fn name(&self) -> &str {
        "copies"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({"op": "copies"})
    }
    fn meta(&self) -> OpMeta {
        OpMeta::opaque(false)
    }
    fn apply(&self, s: Sample, _: &OpContext) -> Result<Emit> {
        let id = s.get("id").and_then(Value::as_int).unwrap_or(0);
        Ok(Emit::Many(
            (0..1 + id.rem_euclid(3))
                .map(|k| {
                    let mut c = s.clone();
                    c.set("k", Value::Int(k));
                    c
                })
                .collect(),
        ))
    }
}

/// `ids`: a list of 0..4 tokens derived from `id` (something to pack).
#[derive(Debug)]
struct Tokens;
impl Op for Tokens {
    fn name(&self) -> &str {
        "tokens"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({"op": "tokens"})
    }
    fn meta(&self) -> OpMeta {
        OpMeta {
            reads: vec!["id".into()],
            writes: vec!["ids".into()],
            ..OpMeta::opaque(false)
        }
    }
    fn apply(&self, mut s: Sample, _: &OpContext) -> Result<Emit> {
        let id = s.get("id").and_then(Value::as_int).unwrap_or(0);
        let ids = (0..id.rem_euclid(5))
            .map(|k| Value::Int(100 * id + k))
            .collect();
        s.set("ids", Value::List(ids));
        Ok(Emit::One(s))
    }
}

fn pack(length: usize, drop_remainder: bool) -> PackSpec {
    PackSpec {
        length,
        field: "ids".into(),
        separator: Some(-7),
        drop_remainder,
        pad_id: 0,
    }
}

fn noop() -> OpRef {
    OpSpec::Noop.build().unwrap()
}

/// Every output as comparable text (tensor contents included).
fn outputs(exec: Execution) -> Vec<String> {
    exec.map(|o| {
        o.unwrap()
            .iter()
            .map(|(k, v)| match v {
                Value::Tensor(t) => format!("{k}={:?}{:?}", t.shape(), t.data()),
                other => format!("{k}={other:?}"),
            })
            .collect::<Vec<_>>()
            .join(",")
    })
    .collect()
}

fn opts(threads: usize, chunk: usize) -> IterOptions {
    IterOptions {
        seed: 11,
        num_threads: Some(threads),
        chunk_size: Some(chunk),
        ..Default::default()
    }
}

/// Checkpoints after each output (or every `step`-th), resumes from the JSON with other
/// thread counts and chunk sizes, and compares the rest; checks the state's shape.
fn round_trip(ds: &Dataset, step: usize) {
    let full = outputs(ds.iter(&opts(2, 3)).unwrap());
    let names: Vec<String> = ds
        .plan()
        .chain()
        .iter()
        .rev()
        .map(|n| node_name(n))
        .collect();
    for k in (0..=full.len()).step_by(step.max(1)) {
        let o = opts(2, 3);
        let mut exec = ds.iter(&o).unwrap();
        for _ in 0..k {
            exec.next().unwrap().unwrap();
        }
        let st = ds.state(&o, &exec).unwrap();
        drop(exec);
        let json = serde_json::to_string(&st).unwrap();
        assert!(json.len() < 4096, "state of {} bytes: {json}", json.len());
        if let Some(tree) = &st.state {
            let mut got = vec![];
            let mut cur = Some(tree);
            while let Some(n) = cur {
                got.push(n.node.clone());
                cur = n.parent.as_deref();
            }
            assert_eq!(got, names, "state shape");
        } else {
            assert_eq!(k, 0);
        }
        let back: IterState = serde_json::from_str(&json).unwrap();
        let other = opts(1 + k % 3, [1, 4, 7][k % 3]);
        let rest = outputs(ds.iter_from(&other, Some(&back)).unwrap());
        assert_eq!(
            rest,
            full[k..],
            "resume after {k} of {} outputs",
            full.len()
        );
    }
}

fn stream(n: u64) -> Dataset {
    Dataset::from_source(Arc::new(Stream(n)))
}

#[test]
fn every_step_kind_round_trips() {
    let r = || Dataset::range(40);
    let cases: Vec<(&str, Dataset)> = vec![
        ("source", r()),
        ("stream", stream(30)),
        (
            "map (random)",
            r().map(Arc::new(Noise), OnError::Raise, None).unwrap(),
        ),
        ("filter", r().filter(Arc::new(NotThirds)).unwrap()),
        ("flat_map", r().flat_map(Arc::new(Copies)).unwrap()),
        ("batch", r().batch(6, false).unwrap()),
        ("batch drop_last", r().batch(7, true).unwrap()),
        ("shuffle", r().shuffle(Some(3)).unwrap()),
        ("shard", r().shard(1, 3, true).unwrap()),
        ("repeat", r().repeat(Some(3)).unwrap()),
        (
            "prefetch",
            r().prefetch(3).unwrap().batch(4, false).unwrap(),
        ),
        ("take", r().take(17)),
        (
            "take mid-pipeline",
            r().flat_map(Arc::new(Copies))
                .unwrap()
                .take(25)
                .batch(4, false)
                .unwrap(),
        ),
        (
            "shuffle_buffer",
            stream(50).shuffle_buffer(10, Some(2)).unwrap(),
        ),
        (
            "shuffle_buffer over epochs, flat_map after",
            stream(23)
                .repeat(Some(2))
                .unwrap()
                .shuffle_buffer(8, None)
                .unwrap()
                .flat_map(Arc::new(Copies))
                .unwrap()
                .batch(5, false)
                .unwrap(),
        ),
        ("map_batches", r().map_batches(noop(), 6).unwrap()),
        (
            "pack",
            r().map(Arc::new(Tokens), OnError::Raise, None)
                .unwrap()
                .pack(pack(5, false))
                .unwrap(),
        ),
        (
            "pack over epochs, dropping tails, then batch",
            stream(31)
                .repeat(Some(2))
                .unwrap()
                .map(Arc::new(Tokens), OnError::Raise, None)
                .unwrap()
                .pack(pack(4, true))
                .unwrap()
                .batch(3, false)
                .unwrap(),
        ),
        (
            "map_batches after flat_map, then batch",
            r().flat_map(Arc::new(Copies))
                .unwrap()
                .map_batches(noop(), 4)
                .unwrap()
                .map(Arc::new(Noise), OnError::Raise, None)
                .unwrap()
                .batch(5, false)
                .unwrap(),
        ),
        (
            "cache",
            r().map(noop(), OnError::Raise, None)
                .unwrap()
                .cache(1 << 20)
                .unwrap()
                .repeat(Some(2))
                .unwrap(),
        ),
        (
            "everything",
            r().shuffle(None)
                .unwrap()
                .shard(0, 2, true)
                .unwrap()
                .repeat(Some(2))
                .unwrap()
                .filter(Arc::new(NotThirds))
                .unwrap()
                .flat_map(Arc::new(Copies))
                .unwrap()
                .shuffle_buffer(6, None)
                .unwrap()
                .map_batches(noop(), 3)
                .unwrap()
                .take(40)
                .map(Arc::new(Noise), OnError::Raise, None)
                .unwrap()
                .batch(4, false)
                .unwrap(),
        ),
    ];
    for (name, ds) in cases {
        eprintln!("case: {name}");
        round_trip(&ds, 1);
    }
}

#[test]
fn mix_round_trips() {
    let a = Dataset::range(30);
    let b = Dataset::range(10)
        .map(noop(), OnError::Raise, None)
        .unwrap();
    let ds = Dataset::mix(&[a, b], Some(&[0.7, 0.3]), 4, StopPolicy::FirstExhausted)
        .unwrap()
        .shuffle(None)
        .unwrap()
        .map(Arc::new(Noise), OnError::Raise, None)
        .unwrap()
        .batch(4, false)
        .unwrap();
    round_trip(&ds, 1);
}

#[test]
fn shuffle_buffer_is_a_bounded_deterministic_permutation() {
    let ds = stream(1000).shuffle_buffer(64, Some(7)).unwrap();
    let ids = |o: &IterOptions| -> Vec<i64> {
        ds.iter(o)
            .unwrap()
            .map(|s| s.unwrap().get("id").unwrap().as_int().unwrap())
            .collect()
    };
    let a = ids(&opts(1, 5));
    assert_eq!(a, ids(&opts(2, 64)), "same for any threads and chunking");
    let mut sorted = a.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..1000).collect::<Vec<_>>(), "a permutation");
    assert_ne!(a, sorted, "shuffled");
    // Bounded displacement: an item moves at most about the buffer size.
    let max_move = a
        .iter()
        .enumerate()
        .map(|(p, &id)| (p as i64 - id).abs())
        .max()
        .unwrap();
    assert!(max_move <= 64, "moved {max_move}");
    // It mixes across window boundaries: neighbours end up far apart on average.
    let mean_move: f64 = a
        .iter()
        .enumerate()
        .map(|(p, &id)| (p as i64 - id).abs() as f64)
        .sum::<f64>()
        / 1000.0;
    assert!(mean_move > 8.0, "mean move {mean_move}");
    // The order depends on the epoch; each epoch is a permutation of its own.
    let two = stream(1000)
        .repeat(Some(2))
        .unwrap()
        .shuffle_buffer(64, Some(7))
        .unwrap();
    let both: Vec<i64> = two
        .iter(&opts(2, 8))
        .unwrap()
        .map(|s| s.unwrap().get("id").unwrap().as_int().unwrap())
        .collect();
    assert_ne!(both[1000..], both[..1000]);
    let mut e1 = both[1000..].to_vec();
    e1.sort_unstable();
    assert_eq!(e1, (0..1000).collect::<Vec<_>>());
}

#[test]
fn state_shape_is_a_node_tree_with_positions() {
    let ds = stream(100)
        .shuffle_buffer(10, None)
        .unwrap()
        .take(50)
        .batch(8, false)
        .unwrap();
    let o = opts(2, 4);
    let mut exec = ds.iter(&o).unwrap();
    exec.next().unwrap().unwrap();
    exec.next().unwrap().unwrap();
    let st = serde_json::to_value(ds.state(&o, &exec).unwrap()).unwrap();
    assert_eq!(st["version"], 2);
    let batch = &st["state"];
    assert_eq!(batch["node"], "batch");
    let take = &batch["parent"];
    assert_eq!(take["node"], "take");
    assert_eq!(
        take["own"]["at"]["pos"], 15,
        "16 outputs taken: at output 15"
    );
    let buffer = &take["parent"];
    assert_eq!(buffer["node"], "shuffle_buffer");
    assert!(buffer["own"]["counter"].as_u64().unwrap() <= 15);
    assert_eq!(buffer["parent"]["node"], "stream");
    assert!(buffer["parent"]["parent"].is_null());
}

#[test]
fn bad_checkpoints_are_refused() {
    let ds = Dataset::range(20)
        .shard(0, 2, true)
        .unwrap()
        .batch(2, false)
        .unwrap();
    let o = opts(1, 2);
    let mut exec = ds.iter(&o).unwrap();
    exec.next().unwrap().unwrap();
    let st = ds.state(&o, &exec).unwrap();
    // Another rank cannot load it as is.
    let rank1 = Dataset::range(20)
        .shard(1, 2, true)
        .unwrap()
        .batch(2, false)
        .unwrap();
    let err = rank1.iter_from(&o, Some(&st)).err().unwrap().to_string();
    assert!(
        err.contains("rank 0 of 2") && err.contains("elastic_state"),
        "{err}"
    );
    // A mangled tree.
    let mut bad = st.clone();
    bad.state.as_mut().unwrap().node = "map".into();
    let err = ds.iter_from(&o, Some(&bad)).err().unwrap().to_string();
    assert!(err.contains("does not match"), "{err}");
    let mut old = st.clone();
    old.version = 1;
    assert!(ds
        .iter_from(&o, Some(&old))
        .err()
        .unwrap()
        .to_string()
        .contains("version"));
}

/// Every old rank stops somewhere in epoch 1 (of 2); the merged checkpoint resumes on a new
/// world size. Epoch 1's outputs — the old ranks' before the stop plus the new ranks' — are
/// those of an unsharded epoch 1 (randomness follows global positions), none twice, fewer
/// than `new_world` positions left out to keep the new shards equal.
fn elastic_case(n: u64, old_world: u64, new_world: u64, stops: &[usize], flat: bool) {
    let pipeline = |shard: Option<(u64, u64)>| {
        let mut d = Dataset::range(n).shuffle(Some(5)).unwrap();
        if let Some((rank, world)) = shard {
            d = d.shard(rank, world, true).unwrap();
        }
        d = d
            .repeat(Some(2))
            .unwrap()
            .map(Arc::new(Noise), OnError::Raise, None)
            .unwrap();
        if flat {
            d = d.flat_map(Arc::new(Copies)).unwrap();
        }
        d
    };
    let key = |s: &Sample| {
        (
            s.get("id").unwrap().as_int().unwrap(),
            s.get("k").and_then(Value::as_int).unwrap_or(0),
            s.get("r").unwrap().as_int().unwrap(),
        )
    };
    // One rank of one: the same op ids as the sharded pipelines, every sample.
    let whole: Vec<Sample> = pipeline(Some((0, 1)))
        .iter(&opts(2, 3))
        .unwrap()
        .map(|s| s.unwrap())
        .collect();
    // Epoch 1: the outputs after epoch 0's (each epoch has every sample).
    let firsts = whole.iter().take_while({
        let mut seen = std::collections::HashSet::new();
        move |s| {
            seen.insert((
                s.get("id").unwrap().as_int().unwrap(),
                s.get("k").and_then(Value::as_int).unwrap_or(0),
            ))
        }
    });
    let expected: BTreeMap<(i64, i64, i64), i64> =
        whole[firsts.count()..]
            .iter()
            .fold(BTreeMap::new(), |mut m, s| {
                *m.entry(key(s)).or_default() += 1;
                m
            });
    let mut seen: BTreeMap<(i64, i64, i64), i64> = BTreeMap::new();
    let mut states = vec![];
    for rank in 0..old_world {
        let d = pipeline(Some((rank, old_world)));
        let o = opts(2, 3);
        // Outputs with the epoch each was delivered in.
        let mut exec = d.iter(&o).unwrap();
        let mut all = vec![];
        let mut epoch0 = 0;
        while let Some(s) = exec.next() {
            all.push(s.unwrap());
            if exec.position().unwrap().cursor.epoch == 0 {
                epoch0 = all.len();
            }
        }
        let stop = epoch0 + stops[rank as usize] % (all.len() - epoch0).max(1);
        let mut exec = d.iter(&o).unwrap();
        for _ in 0..stop {
            exec.next().unwrap().unwrap();
        }
        for s in &all[epoch0..stop] {
            *seen.entry(key(s)).or_default() += 1;
        }
        states.push(d.state(&o, &exec).unwrap());
    }
    states.reverse(); // any order
    let merged = elastic_state(&states).unwrap();
    let merged: IterState = serde_json::from_str(&serde_json::to_string(&merged).unwrap()).unwrap();
    let mut lens = vec![];
    for rank in 0..new_world {
        let d = pipeline(Some((rank, new_world)));
        let o = opts(2, 4);
        let rest: Vec<Sample> = d
            .iter_from(&o, Some(&merged))
            .unwrap()
            .map(|s| s.unwrap())
            .collect();
        lens.push(rest.len());
        for s in &rest {
            *seen.entry(key(s)).or_default() += 1;
        }
        // Resuming a new rank mid-way reproduces the rest of its elastic epoch.
        if rest.len() > 2 {
            let mut exec = d.iter_from(&o, Some(&merged)).unwrap();
            exec.next().unwrap().unwrap();
            exec.next().unwrap().unwrap();
            let st = d.state(&o, &exec).unwrap();
            assert!(
                st.elastic.is_some(),
                "the elastic epoch is still in progress"
            );
            let json = serde_json::to_string(&st).unwrap();
            let st: IterState = serde_json::from_str(&json).unwrap();
            let again: Vec<_> = d
                .iter_from(&opts(1, 2), Some(&st))
                .unwrap()
                .map(|s| key(&s.unwrap()))
                .collect();
            let want: Vec<_> = rest[2..].iter().map(key).collect();
            assert_eq!(again, want);
        }
    }
    let dup: Vec<_> = seen
        .iter()
        .filter(|(k, &c)| c > expected.get(*k).copied().unwrap_or(0))
        .collect();
    assert!(dup.is_empty(), "seen twice or never expected: {dup:?}");
    let missing: Vec<_> = expected
        .iter()
        .filter(|(k, &c)| seen.get(*k).copied().unwrap_or(0) < c)
        .map(|(k, _)| k.0)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert!(
        (missing.len() as u64) < new_world,
        "samples never delivered: {missing:?}"
    );
    if !flat {
        assert!(
            lens.iter().all(|&l| l == lens[0]),
            "unequal new shards: {lens:?}"
        );
    }
}

#[test]
fn elastic_resume_covers_the_epoch_once() {
    elastic_case(100, 2, 3, &[7, 20], false);
    elastic_case(101, 4, 2, &[0, 5, 30, 13], false);
    elastic_case(60, 3, 3, &[1, 2, 3], true);
    elastic_case(37, 1, 4, &[9], true);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, .. ProptestConfig::default() })]
    /// Random pipelines, random checkpoint points.
    #[test]
    fn random_pipelines_resume_exactly(steps in proptest::collection::vec(0u8..10, 1..6),
                                       n in 1u64..60, k in 0usize..200) {
        let mut ds = match n % 3 {
            0 => Dataset::range(n),
            1 => Dataset::range(n).shuffle(None).unwrap(),
            _ => stream(n),
        };
        let (mut taken, mut repeated, mut packed) = (false, false, false);
        for s in steps {
            ds = match s {
                0 => ds.map(Arc::new(Noise), OnError::Raise, None).unwrap(),
                1 => ds.filter(Arc::new(NotThirds)).unwrap(),
                2 => ds.flat_map(Arc::new(Copies)).unwrap(),
                3 => ds.shuffle_buffer(1 + (n as usize % 9), None).unwrap(),
                4 => {
                    taken = true;
                    ds.take(n / 2 + 3)
                }
                5 => ds.map_batches(noop(), 1 + (n as usize % 5)).unwrap(),
                9 if !packed => {
                    packed = true;
                    ds.map(Arc::new(Tokens), OnError::Raise, None)
                        .unwrap()
                        .pack(pack(1 + n as usize % 6, n % 2 == 0))
                        .unwrap()
                }
                9 => ds,
                6 | 7 if !taken && !repeated => {
                    repeated = true;
                    ds.repeat(Some(2)).unwrap()
                }
                6 | 7 => ds,
                _ => ds.batch(1 + (n as usize % 4), n % 3 == 0).unwrap(),
            };
        }
        let full = outputs(ds.iter(&opts(2, 3)).unwrap());
        let k = k % (full.len() + 1);
        let o = opts(2, 2);
        let mut exec = ds.iter(&o).unwrap();
        for _ in 0..k { exec.next().unwrap().unwrap(); }
        let st = ds.state(&o, &exec).unwrap();
        let rest = outputs(ds.iter_from(&opts(1, 5), Some(&st)).unwrap());
        prop_assert_eq!(rest, full[k..].to_vec());
    }
}

/// A batch numbered across epochs (repeat before it) followed by pack: pack counts its blocks
/// per epoch of its input's cursors (one epoch here), so a checkpoint in the second source
/// epoch resumes exactly (it lost a block per block already made in that epoch).
#[test]
fn pack_after_a_batch_numbered_across_epochs_resumes_exactly() {
    let ds = Dataset::range(24)
        .repeat(Some(2))
        .unwrap()
        .batch(1, true)
        .unwrap()
        .map(Arc::new(Tokens), OnError::Raise, None)
        .unwrap()
        .pack(pack(1, true))
        .unwrap();
    round_trip(&ds, 1);
}

/// map_batches after a batch numbered across epochs (repeat before it): map_batches' own
/// batches are numbered per epoch of their input's cursors (one epoch here), as its restart
/// record says; numbered by the rows' epoch, a resume in the second source epoch lost the
/// last batch.
#[test]
fn map_batches_after_a_batch_numbered_across_epochs_resumes_exactly() {
    let ds = Dataset::range(10)
        .shuffle(None)
        .unwrap()
        .repeat(Some(2))
        .unwrap()
        .batch(3, false)
        .unwrap()
        .map_batches(noop(), 1)
        .unwrap();
    round_trip(&ds, 1);
}

/// A window shuffle after a stage that numbers across source epochs (a batch after repeat,
/// a take over a repeat): its windows restart with the epoch of its input's cursors, as its
/// restart record says; by the rows' epoch, a resume in the second source epoch lost outputs.
#[test]
fn shuffle_buffer_after_a_stream_numbered_across_epochs_resumes_exactly() {
    let batched = Dataset::range(27)
        .repeat(Some(2))
        .unwrap()
        .map(Arc::new(Tokens), OnError::Raise, None)
        .unwrap()
        .pack(pack(4, false))
        .unwrap()
        .batch(4, true)
        .unwrap()
        .shuffle_buffer(1, None)
        .unwrap();
    round_trip(&batched, 1);
    let taken = Dataset::range(10)
        .repeat(Some(2))
        .unwrap()
        .take(17)
        .shuffle_buffer(4, None)
        .unwrap();
    round_trip(&taken, 1);
}
