//! Where the chunks of a parallel element-wise stage are processed: the executor-backend trait.
//!
//! The executor owns ordering, backpressure and shutdown; a backend only turns one chunk into
//! its output chunk, from as many executor threads at once as it reports. So a thread pool, a
//! pool of worker processes, Ray actors and an in-process test double are all the same shape:
//! [`Backend::start`] gets everything needed to run the stage (the ops themselves and, through
//! [`Op::spec`]/[`Op::ship`], their portable form) and returns [`Workers`].
//!
//! ```
//! use std::sync::Arc;
//! use sluice_core::*;
//! use sluice_core::exec::{Backend, Backends, StageWork, Workers};
//!
//! /// Runs chunks in the calling thread and counts them (a test double).
//! #[derive(Debug, Default)]
//! struct Counting(std::sync::atomic::AtomicUsize);
//! struct Run(Arc<Counting>, StageWork);
//! impl Workers for Run {
//!     fn parallelism(&self) -> usize { 1 }
//!     fn run(&self, chunk: Vec<Item>) -> Result<Vec<Item>> {
//!         self.0 .0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
//!         self.1.run_here(chunk)
//!     }
//! }
//! #[derive(Debug, Default)]
//! struct Double(Arc<Counting>);
//! impl Backend for Double {
//!     fn name(&self) -> &str { "double" }
//!     fn start(&self, work: StageWork, _workers: usize) -> Result<Box<dyn Workers>> {
//!         Ok(Box::new(Run(self.0.clone(), work)))
//!     }
//! }
//!
//! let src = Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(RangeSource::new(40)))));
//! let mut plan = lower(&src, &LowerOptions::default())?;
//! let double = Arc::new(Double::default());
//! plan.stages[0].variant = Variant::Pool { backend: "double".into(), workers: 1 };
//! let opts = ExecOptions { backends: Backends::default().with(double.clone()), ..Default::default() };
//! let n = Execution::start(&plan, opts)?.count();
//! assert_eq!(n, 40);
//! assert!(double.0 .0.load(std::sync::atomic::Ordering::Relaxed) > 0);
//! # Ok::<(), sluice_core::Error>(())
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::exec::item::{is_interrupt, Chunk, Partial};
use crate::exec::resume::Skip;
use crate::exec::stage::chain::Chain;
use crate::plan::physical::ChainOp;
use crate::source::SourceRef;
use crate::stats::PipelineStats;

#[allow(unused_imports)] // for the doc links
use crate::op::Op;

/// The thread pool every execution has (`Variant::Threads` runs on it too).
pub const THREADS: &str = "threads";
/// Worker processes with a GIL each, for Python stages (`sluice_remote::ProcessBackend`).
pub const PROCESSES: &str = "processes";
/// Ray actors (the Python bindings' pool over `sluice.ray_backend.RayPool`).
pub const RAY: &str = "ray";

/// Everything a backend needs to run one element-wise stage.
#[derive(Clone)]
pub struct StageWork {
    /// Read each item's sample from this source first (random-access sources); items then
    /// arrive carrying only their indices, so remote workers read the data themselves.
    pub read: Option<SourceRef>,
    /// The fused ops, in order.
    pub ops: Vec<ChainOp>,
    /// The iteration seed (randomness derives from it, the item's coordinates and the op id).
    pub seed: u64,
    /// When resuming: outputs already delivered, dropped here.
    pub skip: Skip,
    /// The stage's place in the pipeline (index into the stats).
    pub slot: usize,
    /// The pipeline's statistics (skips and errors are counted here).
    pub stats: Arc<PipelineStats>,
}

impl fmt::Debug for StageWork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StageWork")
            .field("read", &self.read.as_ref().map(|s| s.name().to_string()))
            .field(
                "ops",
                &self.ops.iter().map(|o| o.op.name()).collect::<Vec<_>>(),
            )
            .field("seed", &self.seed)
            .field("slot", &self.slot)
            .finish()
    }
}

impl StageWork {
    /// Runs the stage on `chunk` in the calling thread: what a thread-pool worker does, and
    /// what a remote worker does after receiving the chunk.
    pub fn run_here(&self, chunk: Chunk) -> Result<Chunk> {
        self.chain().run(chunk)
    }

    pub(crate) fn chain(&self) -> Chain {
        Chain::new(
            self.read.clone(),
            self.ops.clone(),
            self.seed,
            self.stats.clone(),
            self.slot,
            self.skip.clone(),
        )
    }
}

/// A started pool of workers for one stage.
pub trait Workers: Send + Sync {
    /// How many chunks the pool processes at once; the executor keeps this many in flight.
    fn parallelism(&self) -> usize;
    /// Processes one chunk (called from up to [`Workers::parallelism`] threads at once).
    /// Output order within the chunk must follow input order.
    fn run(&self, chunk: Chunk) -> Result<Chunk>;
    /// Processes one chunk, keeping what the items before a failing one produced: those
    /// outputs and the failure. Backends that can say so directly (threads) override it.
    ///
    /// By default a failed chunk is run again up to the failing sample, which the error
    /// names: every op is a pure function of (seed, epoch, index, op), so the re-run makes
    /// the same outputs, and it costs nothing unless a sample fails. (Outputs of the failing
    /// sample's own flat_map siblings before it are not delivered.)
    fn run_partial(&self, chunk: Chunk) -> Partial {
        // Items carry shared buffers: the copy is a few reference counts per sample.
        let inputs = chunk.clone();
        match self.run(chunk) {
            Ok(out) => (out, None),
            Err(e) if is_interrupt(&e) => (Vec::new(), Some(e)),
            Err(e) => {
                let prefix = before(inputs, &e);
                let out = match prefix.is_empty() {
                    true => Vec::new(),
                    false => self.run(prefix).unwrap_or_default(),
                };
                (out, Some(e))
            }
        }
    }
    /// Stops the workers (called once when the stage ends; must not block for long).
    fn shutdown(&self) {}
    /// Gives up the chunks in flight, without waiting: the run was stopped (closed, dropped,
    /// failed or interrupted) and nobody wants their outputs. Threads need nothing here
    /// (ops check [`crate::exec::cancelled`] between samples); a pool whose workers cannot
    /// see that flag (processes) stops them, else a slow function's whole chunk ran on.
    /// [`Workers::shutdown`] still follows.
    fn cancel(&self) {}
}

/// A kind of worker pool a stage can run on (threads, processes, Ray actors, ...).
pub trait Backend: Send + Sync + fmt::Debug {
    /// The name plans use for it (`Variant::Pool { backend, .. }`).
    fn name(&self) -> &str;
    /// Starts `workers` workers for `work`.
    fn start(&self, work: StageWork, workers: usize) -> Result<Box<dyn Workers>>;
    /// Starts `initial` workers that may grow to `max` when more chunks run at once (the
    /// runtime controller raises concurrency step by step). By default all `max` start now.
    fn start_scalable(
        &self,
        work: StageWork,
        initial: usize,
        max: usize,
    ) -> Result<Box<dyn Workers>> {
        let _ = initial;
        self.start(work, max)
    }
}

/// The items of `inputs` before the sample `e` names (none if it names none of them).
fn before(mut inputs: Chunk, e: &Error) -> Chunk {
    let Error::InSample { sample, .. } = e else {
        return Vec::new();
    };
    let n = inputs
        .iter()
        .position(|it| it.epoch == sample.epoch && it.index == sample.index)
        .unwrap_or(0);
    inputs.truncate(n);
    inputs
}

/// Threads of this process, each running the fused chain directly.
#[derive(Debug, Default, Clone, Copy)]
pub struct ThreadBackend;

struct ThreadWorkers {
    chain: Chain,
    threads: usize,
}

impl Workers for ThreadWorkers {
    fn parallelism(&self) -> usize {
        self.threads
    }
    fn run(&self, chunk: Chunk) -> Result<Chunk> {
        self.chain.run(chunk)
    }
    fn run_partial(&self, chunk: Chunk) -> Partial {
        self.chain.run_partial(chunk)
    }
}

impl Backend for ThreadBackend {
    fn name(&self) -> &str {
        THREADS
    }
    fn start(&self, work: StageWork, workers: usize) -> Result<Box<dyn Workers>> {
        Ok(Box::new(ThreadWorkers {
            chain: work.chain(),
            threads: workers.max(1),
        }))
    }
}

/// The backends an execution may use, by name. Threads are always available.
#[derive(Clone, Default)]
pub struct Backends {
    by_name: BTreeMap<String, Arc<dyn Backend>>,
}

impl fmt::Debug for Backends {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.by_name.keys()).finish()
    }
}

impl Backends {
    /// Adds (or replaces) a backend under its name.
    pub fn with(mut self, backend: Arc<dyn Backend>) -> Self {
        self.by_name.insert(backend.name().to_string(), backend);
        self
    }
    /// Names of the registered backends (threads are implicit).
    pub fn names(&self) -> Vec<String> {
        self.by_name.keys().cloned().collect()
    }
    /// The backend called `name`.
    pub fn get(&self, name: &str) -> Result<Arc<dyn Backend>> {
        if name == THREADS {
            return Ok(Arc::new(ThreadBackend));
        }
        self.by_name.get(name).cloned().ok_or_else(|| {
            Error::invalid(format!(
                "the plan runs a stage on backend {name:?}, which is not available here \
                 (available: threads{})",
                self.by_name
                    .keys()
                    .map(|k| format!(", {k}"))
                    .collect::<String>()
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::SampleRef;
    use crate::exec::item::Item;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A pool that, like a remote one, returns a failed chunk whole: doubles `index`, fails at 5.
    struct AllOrNothing(AtomicUsize);

    impl Workers for AllOrNothing {
        fn parallelism(&self) -> usize {
            1
        }
        fn run(&self, chunk: Chunk) -> Result<Chunk> {
            self.0.fetch_add(1, Ordering::Relaxed);
            let mut out = Vec::new();
            for it in chunk {
                if it.index == 5 {
                    return Err(Error::InSample {
                        op: "boom".into(),
                        sample: SampleRef {
                            epoch: it.epoch,
                            index: it.index,
                            path: None,
                        },
                        source: Box::new(Error::invalid("boom")),
                    });
                }
                out.extend([it.clone(), it]);
            }
            Ok(out)
        }
    }

    fn chunk(indices: std::ops::Range<u64>) -> Chunk {
        indices
            .map(|index| Item {
                index,
                ..Default::default()
            })
            .collect()
    }

    #[test]
    fn a_failed_chunk_keeps_the_outputs_of_the_items_before_the_failing_one() {
        let pool = AllOrNothing(AtomicUsize::new(0));
        let (out, err) = pool.run_partial(chunk(2..9));
        let got: Vec<u64> = out.iter().map(|it| it.index).collect();
        assert_eq!(got, [2, 2, 3, 3, 4, 4]);
        assert!(err.unwrap().to_string().contains("boom"));
        assert_eq!(
            pool.0.load(Ordering::Relaxed),
            2,
            "the chunk, then its first three"
        );
        // The first item failing: nothing before it, and no second run of an empty chunk.
        let (out, err) = pool.run_partial(chunk(5..7));
        assert!(out.is_empty() && err.is_some());
        assert_eq!(pool.0.load(Ordering::Relaxed), 3);
        // A chunk without a failure runs once.
        let runs = pool.0.load(Ordering::Relaxed);
        let (out, err) = pool.run_partial(chunk(0..3));
        assert_eq!((out.len(), err.is_none()), (6, true));
        assert_eq!(pool.0.load(Ordering::Relaxed), runs + 1);
    }

    #[test]
    fn an_interrupt_keeps_nothing() {
        struct Interrupted;
        impl Workers for Interrupted {
            fn parallelism(&self) -> usize {
                1
            }
            fn run(&self, _: Chunk) -> Result<Chunk> {
                Err(Error::Cancelled)
            }
        }
        let (out, err) = Interrupted.run_partial(chunk(0..3));
        assert!(out.is_empty() && matches!(err, Some(Error::Cancelled)));
    }
}
