//! [`BlockingSource`]: a blocking op's output as a random-access source.
//!
//! On first use (the `prepare` an iteration's planning calls, or the first `len`/`get`) it
//! runs the whole input pipeline through the executor — ordered, so the op sees the same rows
//! in the same order for any thread count — applies the op within its memory budget, and then
//! serves the result by index. Shuffle, shard, batch and checkpoints work on top of it like on
//! any random-access source. The result and its spill files live as long as the source.

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use sluice_core::{
    lower, Error, ExecOptions, Execution, InputRunner, LogicalPlan, LowerOptions, Result, Sample,
    Source, SourceRef,
};

use crate::aggregate::{aggregate, AggregateSpec};
use crate::repartition::{check_partitions, repartition};
use crate::sort::{sort, SortSpec};
use crate::spill::{Rows, Spill, SpillDir, SpillReport};

/// Memory a blocking op may use for buffered rows before it spills (256 MiB).
pub const DEFAULT_MEMORY_BUDGET: u64 = 256 << 20;

/// How a blocking op runs.
#[derive(Debug, Clone)]
pub struct BlockingOptions {
    /// Bytes of buffered rows (sort), group state (groupby) or output (repartition) kept in
    /// memory; beyond it the op spills to local disk.
    pub memory_budget: u64,
    /// Where spill files go (default: the system temporary directory, `$TMPDIR`).
    pub spill_dir: Option<PathBuf>,
    /// Seed of the input pipeline's run (its random ops and `shuffle()` draw from it).
    pub seed: u64,
    /// Threads per parallel stage of the input pipeline when nothing else says (`None`: the
    /// number of cores); an iteration's planning passes its own.
    pub num_threads: Option<usize>,
}

impl Default for BlockingOptions {
    fn default() -> Self {
        BlockingOptions {
            memory_budget: DEFAULT_MEMORY_BUDGET,
            spill_dir: None,
            seed: 0,
            num_threads: None,
        }
    }
}

/// The blocking ops.
#[derive(Debug, Clone, PartialEq)]
pub enum BlockingOp {
    Sort(SortSpec),
    Aggregate(AggregateSpec),
    Repartition { n: usize },
}

impl BlockingOp {
    fn name(&self) -> &'static str {
        match self {
            BlockingOp::Sort(_) => "sort",
            BlockingOp::Aggregate(_) => "groupby",
            BlockingOp::Repartition { .. } => "repartition",
        }
    }
    fn spec(&self) -> serde_json::Value {
        match self {
            BlockingOp::Sort(s) => serde_json::json!({"by": s.by, "descending": s.descending}),
            BlockingOp::Aggregate(a) => serde_json::json!({"keys": a.keys, "aggs": a.aggs}),
            BlockingOp::Repartition { n } => serde_json::json!({ "n": n }),
        }
    }
    /// Fields the op reads from every input row.
    fn reads(&self) -> Vec<String> {
        match self {
            BlockingOp::Sort(s) => s.by.clone(),
            BlockingOp::Aggregate(a) => a.input_fields(),
            BlockingOp::Repartition { .. } => Vec::new(),
        }
    }
}

/// The materialised result.
#[derive(Debug)]
struct Done {
    rows: Rows,
    partitions: Option<Vec<u64>>,
    report: SpillReport,
    /// Holds the output files; dropped (and deleted) with the result.
    _dir: Option<SpillDir>,
}

struct Inner {
    input: Arc<LogicalPlan>,
    op: BlockingOp,
    opts: BlockingOptions,
    fields: Option<Vec<String>>,
    /// `None` until materialised; errors are not kept, so a retry runs again.
    done: Mutex<Option<Arc<Done>>>,
}

/// A sort, groupby-aggregate or repartition of a pipeline, served by index.
///
/// ```
/// use std::sync::Arc;
/// use sluice_core::*;
/// use sluice_relational::{BlockingOp, BlockingOptions, BlockingSource, SortSpec};
/// let input = Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(RangeSource::new(5)))));
/// let spec = SortSpec::try_new(vec!["id".into()], vec![true])?;
/// let src = BlockingSource::new(input, BlockingOp::Sort(spec), BlockingOptions::default())?;
/// assert_eq!(src.len(), Some(5));
/// assert_eq!(src.get(0)?.get("id").unwrap().as_int(), Some(4));
/// # Ok::<(), sluice_core::Error>(())
/// ```
#[derive(Clone)]
pub struct BlockingSource {
    inner: Arc<Inner>,
}

impl fmt::Debug for BlockingSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockingSource")
            .field("op", &self.inner.op)
            .field("input", &describe(&self.inner.input))
            .field("memory_budget", &self.inner.opts.memory_budget)
            .finish()
    }
}

/// The input pipeline on one line.
fn describe(plan: &Arc<LogicalPlan>) -> String {
    plan.chain()
        .iter()
        .map(|n| n.describe())
        .collect::<Vec<_>>()
        .join(" -> ")
}

impl BlockingSource {
    /// The op over `input`. Fails now if the input never ends (`repeat()` without a count),
    /// if a field the op reads is missing from a known input schema, or on a zero budget.
    pub fn new(input: Arc<LogicalPlan>, op: BlockingOp, opts: BlockingOptions) -> Result<Self> {
        let name = op.name();
        if opts.memory_budget == 0 {
            return Err(Error::invalid(format!("{name}: memory_budget must be > 0")));
        }
        if let BlockingOp::Repartition { n } = &op {
            check_partitions(*n)?;
        }
        if input.find(|n| matches!(n, LogicalPlan::Repeat(r) if r.epochs.is_none())) {
            return Err(Error::invalid(format!(
                "{name} reads its whole input, but the pipeline before it repeats forever; \
                 put repeat() after {name}()"
            )));
        }
        let schema = input.schema();
        if let Some(fields) = &schema {
            if let Some(missing) = op.reads().into_iter().find(|f| !fields.contains(f)) {
                return Err(Error::MissingField {
                    field: missing,
                    op: name.to_string(),
                    available: fields.join(", "),
                });
            }
        }
        let fields = match &op {
            BlockingOp::Aggregate(a) => Some(a.output_fields()),
            _ => schema.map(|s| (*s).clone()),
        };
        Ok(BlockingSource {
            inner: Arc::new(Inner {
                input,
                op,
                opts,
                fields,
                done: Mutex::new(None),
            }),
        })
    }

    /// The op.
    pub fn op(&self) -> &BlockingOp {
        &self.inner.op
    }

    /// The result, computing it now if needed (with `num_threads` for the input pipeline,
    /// started by `run` when given: see [`Source::prepare_with`]).
    fn done(&self, num_threads: Option<usize>, run: Option<&InputRunner<'_>>) -> Result<Arc<Done>> {
        // Held while computing: concurrent readers wait for the one result.
        let mut slot = self.inner.done.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = &*slot {
            return Ok(d.clone());
        }
        let done = Arc::new(self.run(num_threads, run)?);
        *slot = Some(done.clone());
        Ok(done)
    }

    fn run(&self, num_threads: Option<usize>, run: Option<&InputRunner<'_>>) -> Result<Done> {
        let started = Instant::now();
        let o = &self.inner.opts;
        let threads = num_threads
            .or(o.num_threads)
            .unwrap_or_else(sluice_core::cores::cores)
            .max(1);
        let input = match run {
            Some(run) => run(&self.inner.input, o.seed, threads)?,
            // Asked outside a run's planning (`len`, `get`): its own threads.
            None => {
                let lower_opts = LowerOptions {
                    num_threads: threads,
                    seed: o.seed,
                    ..LowerOptions::default()
                };
                let plan = lower(&self.inner.input, &lower_opts)?;
                Execution::start(
                    &plan,
                    ExecOptions {
                        seed: o.seed,
                        ..ExecOptions::default()
                    },
                )?
            }
        };
        let mut spill = Spill::new(self.inner.op.name(), o.memory_budget, o.spill_dir.clone());
        let (rows, partitions) = match &self.inner.op {
            BlockingOp::Sort(spec) => (sort(input, spec, &mut spill)?, None),
            BlockingOp::Aggregate(spec) => (aggregate(input, spec, &mut spill)?, None),
            BlockingOp::Repartition { n } => {
                let (rows, sizes) = repartition(input, *n, &mut spill)?;
                (rows, Some(sizes))
            }
        };
        spill.report.rows_out = rows.len();
        spill.report.seconds = started.elapsed().as_secs_f64();
        let (dir, report) = spill.into_dir();
        Ok(Done {
            rows,
            partitions,
            report,
            _dir: dir,
        })
    }

    /// The op's report, once it has run.
    pub fn spill_report(&self) -> Option<SpillReport> {
        let slot = self.inner.done.lock().unwrap_or_else(|p| p.into_inner());
        slot.as_ref().map(|d| d.report.clone())
    }
}

impl Source for BlockingSource {
    fn name(&self) -> &str {
        self.inner.op.name()
    }
    fn spec(&self) -> serde_json::Value {
        let mut spec = self.inner.op.spec();
        spec["source"] = self.name().into();
        spec["input"] = describe(&self.inner.input).into();
        spec["seed"] = self.inner.opts.seed.into();
        spec
    }
    fn len(&self) -> Option<u64> {
        // A failure surfaces from `prepare` (which planning calls first) or `get`.
        self.done(None, None).ok().map(|d| d.rows.len())
    }
    fn planned_len(&self) -> Option<u64> {
        let slot = self.inner.done.lock().unwrap_or_else(|p| p.into_inner());
        match (&*slot, &self.inner.op) {
            (Some(d), _) => Some(d.rows.len()),
            // As many groups as the data holds: known once it ran.
            (None, BlockingOp::Aggregate(_)) => None,
            // A sort and a repartition keep every row.
            (None, _) => self.inner.input.length().known(),
        }
    }
    fn class_names(&self) -> Option<Vec<String>> {
        match self.inner.op {
            BlockingOp::Aggregate(_) => None,
            _ => self.inner.input.source().class_names(),
        }
    }
    fn random_access(&self) -> bool {
        true
    }
    fn fields(&self) -> Option<Vec<String>> {
        self.inner.fields.clone()
    }
    fn get(&self, index: u64) -> Result<Sample> {
        self.done(None, None)?.rows.get(index)
    }
    fn prepare(&self, num_threads: usize) -> Result<()> {
        self.done(Some(num_threads), None).map(|_| ())
    }
    fn input(&self) -> Option<Arc<LogicalPlan>> {
        Some(self.inner.input.clone())
    }
    fn prepare_with(&self, num_threads: usize, run: &InputRunner<'_>) -> Result<()> {
        self.done(Some(num_threads), Some(run)).map(|_| ())
    }
    fn partitions(&self) -> Option<Vec<u64>> {
        self.done(None, None).ok()?.partitions.clone()
    }
    fn report(&self) -> Option<serde_json::Value> {
        self.spill_report()
            .and_then(|r| serde_json::to_value(r).ok())
    }
    fn clone_arc(&self) -> SourceRef {
        Arc::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Agg, AggFn};
    use sluice_core::{ItemsSource, RepeatNode, SourceNode, Value};

    fn input(n: i64) -> Arc<LogicalPlan> {
        let items = (0..n)
            .map(|i| {
                Sample::from_pairs([
                    ("k", Value::Int((i * 37) % 11)),
                    ("x", Value::Float(i as f64 / 4.0)),
                ])
            })
            .collect();
        Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(
            ItemsSource::new(items),
        ))))
    }

    fn all(src: &BlockingSource) -> Vec<Sample> {
        (0..src.len().unwrap())
            .map(|i| src.get(i).unwrap())
            .collect()
    }

    #[test]
    fn same_result_for_any_thread_count_and_budget() {
        let spec = SortSpec::try_new(vec!["k".into()], vec![true]).unwrap();
        let run = |threads, budget| {
            let opts = BlockingOptions {
                memory_budget: budget,
                ..Default::default()
            };
            let src =
                BlockingSource::new(input(2000), BlockingOp::Sort(spec.clone()), opts).unwrap();
            src.prepare(threads).unwrap();
            (all(&src), src.spill_report().unwrap())
        };
        let (base, r) = run(1, 1 << 30);
        assert!(!r.spilled && r.rows_in == 2000 && r.rows_out == 2000);
        for (threads, budget) in [(2, 1 << 30), (1, 10_000), (2, 10_000)] {
            let (out, r) = run(threads, budget);
            assert_eq!(r.spilled, budget < 1 << 30);
            assert_eq!(out, base, "threads {threads}, budget {budget}");
        }
    }

    #[test]
    fn build_time_checks() {
        let spec = SortSpec::try_new(vec!["nope".into()], vec![]).unwrap();
        let e =
            BlockingSource::new(input(3), BlockingOp::Sort(spec), Default::default()).unwrap_err();
        assert!(
            matches!(&e, Error::MissingField { field, op, .. } if field == "nope" && op == "sort"),
            "{e}"
        );
        let forever = Arc::new(LogicalPlan::Repeat(
            RepeatNode::try_new(input(3), None).unwrap(),
        ));
        let e = BlockingSource::new(
            forever,
            BlockingOp::Repartition { n: 2 },
            Default::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("repeats forever"), "{e}");
        let agg = AggregateSpec::try_new(vec!["k".into()], vec![Agg::new("n", AggFn::Count, None)])
            .unwrap();
        let src =
            BlockingSource::new(input(30), BlockingOp::Aggregate(agg), Default::default()).unwrap();
        assert_eq!(src.fields(), Some(vec!["k".to_string(), "n".to_string()]));
        assert_eq!(src.len(), Some(11));
        assert!(src.report().unwrap()["rows_in"] == 30);
    }

    #[test]
    fn repartition_reports_partitions() {
        let src = BlockingSource::new(
            input(10),
            BlockingOp::Repartition { n: 3 },
            Default::default(),
        )
        .unwrap();
        assert_eq!(src.partitions(), Some(vec![4, 3, 3]));
        assert_eq!(all(&src).len(), 10);
    }
}
