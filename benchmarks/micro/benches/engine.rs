//! Engine overhead: the executor (source → chain → batch, 1 and 2 threads), batching
//! (collate) and the chunk hand-off between threads; and the machine figures behind the
//! cost model's constants (`sluice-optimizer/src/model.rs`, `profile.rs`). The numpy hand-off is measured from
//! Python in `benchmarks/engine_overhead.py` (it needs an interpreter).
//!
//! `cargo bench --manifest-path benchmarks/micro/Cargo.toml`

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use sluice_core::cache::CachedSource;
use sluice_core::*;

#[global_allocator]
static ALLOC: sluice::alloc::MiMalloc = sluice::alloc::MiMalloc;

#[derive(Debug)]
struct Noop;
impl Op for Noop {
    fn name(&self) -> &str {
        "noop"
    }
    fn spec(&self) -> serde_json::Value {
        serde_json::json!({"op": "noop"})
    }
    fn meta(&self) -> OpMeta {
        OpMeta {
            reads: vec!["id".into()],
            writes: vec![],
            ..OpMeta::opaque(false)
        }
    }
    fn apply(&self, s: Sample, _: &OpContext) -> Result<Emit> {
        Ok(Emit::One(s))
    }
}

fn pipeline(n: u64, batch: usize) -> Arc<LogicalPlan> {
    let src = Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(
        RangeSource::new(n),
    ))));
    let mapped = Arc::new(LogicalPlan::Map(
        MapNode::try_new(src, Arc::new(Noop), ElemMode::Map, OnError::Raise, None).unwrap(),
    ));
    Arc::new(LogicalPlan::Batch(
        BatchNode::try_new(mapped, batch, false).unwrap(),
    ))
}

fn executor(c: &mut Criterion) {
    const N: u64 = 200_000;
    let mut g = c.benchmark_group("executor: range → noop → batch(256)");
    g.throughput(Throughput::Elements(N));
    g.sample_size(20);
    for threads in [1, 2] {
        let plan = lower(
            &pipeline(N, 256),
            &LowerOptions {
                num_threads: threads,
                ..Default::default()
            },
        )
        .unwrap();
        g.bench_function(format!("{threads} thread(s)"), |b| {
            b.iter(|| {
                let run = Execution::start(&plan, ExecOptions::default()).unwrap();
                run.map(|r| r.unwrap()).count()
            })
        });
    }
    g.finish();
}

fn batching(c: &mut Criterion) {
    let mut g = c.benchmark_group("collate 256 samples");
    g.throughput(Throughput::Elements(256));
    let scalars: Vec<Sample> = (0..256)
        .map(|i| Sample::from_pairs([("id", Value::Int(i)), ("x", Value::Float(i as f64))]))
        .collect();
    g.bench_function("two scalar fields", |b| {
        b.iter(|| collate(&scalars).unwrap())
    });
    let images: Vec<Sample> = (0..256)
        .map(|_| {
            let t = Tensor::new(vec![3, 32, 32], TensorData::F32(vec![0.5; 3 * 32 * 32])).unwrap();
            Sample::from_pairs([("image", Value::Tensor(t))])
        })
        .collect();
    g.bench_function("float32 [3,32,32] tensors", |b| {
        b.iter_batched(
            || images.clone(),
            |s| collate(&s).unwrap(),
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

fn hand_off(c: &mut Criterion) {
    // A chunk of 256 items through a bounded channel to another thread and back: the cost a
    // stage boundary adds per chunk.
    let mut g = c.benchmark_group("chunk hand-off between threads");
    g.throughput(Throughput::Elements(256));
    let (to_tx, to_rx) = std::sync::mpsc::sync_channel::<Vec<Sample>>(4);
    let (back_tx, back_rx) = std::sync::mpsc::sync_channel::<Vec<Sample>>(4);
    let worker = std::thread::spawn(move || {
        while let Ok(chunk) = to_rx.recv() {
            if back_tx.send(chunk).is_err() {
                return;
            }
        }
    });
    let chunk: Vec<Sample> = (0..256)
        .map(|i| Sample::from_pairs([("id", Value::Int(i))]))
        .collect();
    g.bench_function("round trip, 256 samples", |b| {
        b.iter_batched(
            || chunk.clone(),
            |c| {
                to_tx.send(c).unwrap();
                back_rx.recv().unwrap()
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
    drop(to_tx);
    worker.join().unwrap();
}

fn model_constants(c: &mut Criterion) {
    let mut g = c.benchmark_group("cost-model constants");
    // What one read of the thread CPU clock costs: why the profiler times chunks, not calls.
    g.bench_function("thread CPU clock read", |b| {
        b.iter(sluice_optimizer::clock::thread_cpu)
    });
    // A CV batch: 64 float32 [3,224,224] images (38.5 MB) collated into fresh memory — the
    // model's COPY_BYTES_PER_S.
    let bytes = 64 * 3 * 224 * 224 * 4;
    g.throughput(Throughput::Bytes(bytes as u64));
    g.sample_size(20);
    let images: Vec<Sample> = (0..64)
        .map(|_| {
            let t =
                Tensor::new(vec![3, 224, 224], TensorData::F32(vec![0.5; 3 * 224 * 224])).unwrap();
            Sample::from_pairs([("image", Value::Tensor(t))])
        })
        .collect();
    g.bench_function("collate a CV batch (64 x 602 KB)", |b| {
        b.iter_batched(
            || images.clone(),
            |s| collate(&s).unwrap(),
            BatchSize::LargeInput,
        )
    });
    g.throughput(Throughput::Elements(64));
    g.sample_size(50);
    // A warm in-memory cache serving a chunk of 64 NLP-like samples (a 100-byte text and 128
    // token ids): the model's CACHE_HIT_S, the per-sample part of a cache hit.
    let cached = CachedSource::new(
        Arc::new(RangeSource::new(4096)),
        vec![ChainOp {
            op: Arc::new(Tokens),
            mode: ElemMode::Map,
            on_error: OnError::Raise,
            op_id: 1,
        }],
        1 << 30,
        0,
    )
    .unwrap();
    let chunk: Vec<u64> = (1000..1064).collect();
    assert!(cached.get_many(&chunk).iter().all(|s| s.is_ok()));
    g.bench_function("cache hit, chunk of 64 token samples", |b| {
        b.iter(|| cached.get_many(&chunk))
    });
    g.finish();
}

/// Adds a text and 128 token ids to a sample, like a tokenizer.
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
        OpMeta::opaque(false)
    }
    fn apply(&self, mut s: Sample, _: &OpContext) -> Result<Emit> {
        s.set("text", Value::from("x".repeat(100)));
        let ids = Tensor::new(vec![128], TensorData::I64(vec![7; 128]))?;
        s.set("input_ids", Value::Tensor(ids));
        Ok(Emit::One(s))
    }
}

criterion_group!(benches, executor, batching, hand_off, model_constants);
criterion_main!(benches);
