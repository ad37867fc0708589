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
use crate::exec::transform::{Chain, Chunk, Partial};
use crate::exec::Skip;
use crate::plan::physical::ChainOp;
use crate::source::SourceRef;
use crate::stats::PipelineStats;

#[allow(unused_imports)] // for the doc links
use crate::op::Op;

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
    /// outputs and the failure. The default keeps nothing of a failed chunk; backends that
    /// can say better (threads) override it.
    fn run_partial(&self, chunk: Chunk) -> Partial {
        match self.run(chunk) {
            Ok(out) => (out, None),
            Err(e) => (Vec::new(), Some(e)),
        }
    }
    /// Stops the workers (called once when the stage ends; must not block for long).
    fn shutdown(&self) {}
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
        "threads"
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
        if name == "threads" {
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
