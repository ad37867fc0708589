//! What the planner knows about a run: one [`RunFacts`], made once from what the caller
//! asked (`iter(...)`, the CLI's flags, a Rust [`crate::ExecOptions`]-free caller), read by
//! every planning rule. Nothing after planning reads the caller's options again: the plan
//! carries what the executor needs ([`crate::plan::physical::Delivery`]).

use crate::plan::lower::LowerOptions;

/// Where a run asks its stages to go, besides what a saved plan says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum RunContext {
    /// This process: the default lowering's threads, or the plan's placement.
    #[default]
    Local,
    /// `processes=N`: every stage of Python code on the `processes` backend with `workers`
    /// worker processes (the placement rule's forced mode).
    Processes { workers: usize },
    /// A remote context (a Ray `sluice.Context`): every element-wise stage whose ops can
    /// travel on `backend` with `workers` workers (the offload rule's forced mode) — unless
    /// the plan was made with `enable_offload`: the cost model placed its stages already,
    /// and it runs as it is.
    Remote { backend: String, workers: usize },
}

/// What the consumer of a run takes; each rewrite that serves one kind of consumer runs only
/// for it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Consumer {
    /// The bindings' own objects (the Python iterator's dicts): ops at the end whose results
    /// nothing reads leave them unconverted ([`crate::plan::objects`]).
    pub objects: bool,
    /// [`crate::Column`]s in batches (the Python bindings, Arrow export): a batch reading a
    /// columnar source hands over the source's arrays.
    pub columns: bool,
    /// Rows of a columnar read in bulk ([`crate::plan::rows`]).
    pub rows: bool,
    /// It decodes images on its GPU: a decode and crop whose pixels nothing on the host
    /// reads become their draws ([`crate::plan::device`]).
    pub device_decode: bool,
}

impl Consumer {
    /// The Python iterator: objects, columns and rows in bulk.
    pub const BINDINGS: Consumer = Consumer {
        objects: true,
        columns: true,
        rows: true,
        device_decode: false,
    };
}

/// The facts of one run that its physical plan depends on.
///
/// ```
/// use sluice_core::plan::facts::RunFacts;
/// let facts = RunFacts { num_threads: Some(0), ..Default::default() };
/// assert!(facts.lower_options(false).in_consumer);
/// assert!(!facts.lower_options(true).in_consumer, "a placed plan sets every variant");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFacts {
    /// The iteration seed (an unseeded shuffle takes it).
    pub seed: u64,
    /// Threads per parallel stage (`None`: the number of cores; `Some(0)`: every stage in
    /// the consumer's thread, [`LowerOptions::in_consumer`]).
    pub num_threads: Option<usize>,
    /// Items per chunk handed between stages (`None`: adaptive).
    pub chunk_size: Option<usize>,
    /// Fuse ops that offer a faster fused form ([`crate::Op::fuse_next`]), and read rows in
    /// bulk (a fusion of the read with the output). Plans made with `exact` never fuse.
    pub fuse_ops: bool,
    /// Where the run asks its stages to go.
    pub context: RunContext,
    /// What the consumer takes.
    pub consumer: Consumer,
    /// The run times each op (`iter(optimize=True)`'s first run, a profile): ops stay in
    /// their chains, where each is measured.
    pub timed: bool,
    /// The run finishes an epoch that ranks of another world size began: it drops rows other
    /// ranks delivered, which only the plain read does row by row.
    pub elastic: bool,
}

impl Default for RunFacts {
    fn default() -> Self {
        RunFacts {
            seed: 0,
            num_threads: None,
            chunk_size: None,
            fuse_ops: true,
            context: RunContext::Local,
            consumer: Consumer::default(),
            timed: false,
            elastic: false,
        }
    }
}

impl RunFacts {
    /// Threads per parallel stage: `num_threads`, or the number of cores (at least one).
    pub fn threads(&self) -> usize {
        self.num_threads.unwrap_or_else(crate::cores::cores).max(1)
    }

    /// The lowering's knobs. `placed`: a saved plan (or a forced offload) places the stages
    /// after it, so the lowering neither fuses (plans name the unfused ops; they fuse after)
    /// nor runs in the consumer (the plan sets every variant).
    pub fn lower_options(&self, placed: bool) -> LowerOptions {
        let mut o = LowerOptions {
            num_threads: self.threads(),
            seed: self.seed,
            fuse_ops: self.fuse_ops && !placed,
            in_consumer: self.num_threads == Some(0) && !placed,
            ..LowerOptions::default()
        };
        if let Some(c) = self.chunk_size {
            o.chunk_size = c.max(1);
            o.max_chunk = o.chunk_size;
        }
        o
    }
}
