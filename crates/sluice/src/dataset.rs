//! The chainable, immutable pipeline description.

use std::sync::Arc;

use sluice_core::*;
use sluice_io::{FilesSource, JsonlOptions, LabelMode, LinesFormat, LinesSource, Utf8Errors};
use sluice_optimizer::RunContext;

/// An immutable pipeline; every step returns a new `Dataset`.
///
/// ```
/// use sluice::{Dataset, IterOptions, OpSpec};
/// let ds = Dataset::range(10).map(OpSpec::Noop.build()?, OnError::Raise, None)?.take(3);
/// assert_eq!(ds.iter(&IterOptions::default())?.count(), 3);
/// # use sluice::OnError;
/// # Ok::<(), sluice::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Dataset {
    plan: Arc<LogicalPlan>,
    /// [`Dataset::fingerprint`], computed once: every `state_dict()` and load checks it, and a
    /// pipeline may print large specs (a tokenizer's JSON is megabytes).
    fingerprint: Arc<std::sync::OnceLock<String>>,
    /// [`Dataset::data_digest`], computed once (a listing of a million files is ~60 MB of
    /// paths to digest).
    data_digest: Arc<std::sync::OnceLock<Option<String>>>,
    /// The plans `iter` with `optimize` made (see [`crate::auto`]), shared by clones.
    auto: Arc<crate::auto::AutoPlans>,
}

pub use crate::state::IterState;

/// How to run a dataset.
#[derive(Debug, Clone)]
pub struct IterOptions {
    /// The seed all randomness derives from.
    pub seed: u64,
    /// The iteration's epoch: iterating again with the next epoch gives a new permutation
    /// and new augmentation draws, derived from (seed, epoch) ([`ExecOptions::epoch`]; with
    /// `repeat(n)` an iteration runs the data epochs `epoch*n` … `epoch*n + n-1`). A
    /// checkpoint carries it and a reload continues in the checkpoint's epoch.
    pub epoch: u64,
    /// Threads per parallel stage (`None`: the number of cores; `Some(0)`: every stage runs
    /// in the consumer's thread, see [`LowerOptions::in_consumer`]).
    pub num_threads: Option<usize>,
    /// Items per chunk handed between stages.
    pub chunk_size: Option<usize>,
    /// Worker pools (processes, Ray actors) that plan stages may run on besides threads.
    pub backends: sluice_core::exec::Backends,
    /// Run this optimizer plan instead of the default lowering.
    pub plan: Option<Arc<sluice_optimizer::Plan>>,
    /// Where the run puts its stages besides what the plan says: `Processes` runs every
    /// stage of Python code on the `processes` backend, `Remote` every element-wise stage
    /// that can travel on a worker pool (a Ray context); `backends` must hold that backend
    /// (the Python bindings register them).
    pub context: RunContext,
    /// Fuse ops that offer a faster fused form ([`Op::fuse_next`]), e.g. `decode` followed
    /// by `random_resized_crop` becomes a DCT-scaled decode of the crop (same crops, pixels
    /// within ~35 dB PSNR of the unfused run). Default on; off gives the unfused ops' exact
    /// output. Plans with `exact` never fuse.
    pub fuse_ops: bool,
    /// The consumer takes [`sluice_core::Column`]s in batches ([`sluice_core::Consumer::columns`]).
    pub columns: bool,
    /// The consumer takes [`sluice_core::Object`]s ([`sluice_core::Consumer::objects`]).
    pub objects: bool,
    /// The consumer takes rows of a columnar read in bulk ([`sluice_core::Consumer::rows`]).
    pub row_batches: bool,
    /// The consumer decodes images on its GPU ([`sluice_core::Consumer::device_decode`]):
    /// a decode + random_resized_crop it can do is left to it as draws.
    pub device_decode: bool,
    /// Time each op as the run goes, for [`Dataset::run_profile`] to make a profile from.
    pub time_ops: bool,
    /// Profile, plan and run in one step with these optimizer options when no `plan` is
    /// given (see [`crate::auto`]; [`Dataset::auto_plan`] says which plan a run executes).
    pub optimize: Option<sluice_optimizer::OptimizerOptions>,
    /// Cap the resident memory of the process tree at this many bytes: the source holds
    /// chunks back while the next would not fit ([`sluice_core::exec::MemoryCap`]). Default:
    /// [`sluice_core::exec::default_memory_limit`]; `None`: no cap.
    pub memory_limit: Option<u64>,
}

impl Default for IterOptions {
    fn default() -> Self {
        IterOptions {
            seed: 0,
            epoch: 0,
            num_threads: None,
            chunk_size: None,
            backends: Default::default(),
            plan: None,
            context: RunContext::Local,
            fuse_ops: true,
            columns: false,
            objects: false,
            row_batches: false,
            device_decode: false,
            time_ops: false,
            optimize: None,
            memory_limit: sluice_core::exec::default_memory_limit(),
        }
    }
}

impl IterOptions {
    /// The facts of this run the planner plans from (`elastic`: it finishes an epoch that
    /// ranks of another world size began).
    pub fn facts(&self, elastic: bool) -> RunFacts {
        RunFacts {
            seed: self.seed,
            num_threads: self.num_threads,
            chunk_size: self.chunk_size,
            fuse_ops: self.fuse_ops,
            context: self.context.clone(),
            consumer: Consumer {
                objects: self.objects,
                columns: self.columns,
                rows: self.row_batches,
                device_decode: self.device_decode,
            },
            timed: self.time_ops,
            elastic,
        }
    }
}

impl Dataset {
    pub(crate) fn from_plan(plan: Arc<LogicalPlan>) -> Self {
        Dataset {
            plan,
            fingerprint: Default::default(),
            data_digest: Default::default(),
            auto: Default::default(),
        }
    }
    pub(crate) fn auto_plans(&self) -> &crate::auto::AutoPlans {
        &self.auto
    }
    fn wrap(plan: LogicalPlan) -> Self {
        Dataset::from_plan(Arc::new(plan))
    }
    fn input(&self) -> Arc<LogicalPlan> {
        self.plan.clone()
    }
    /// A dataset reading from `source`.
    pub fn from_source(source: SourceRef) -> Self {
        Dataset::wrap(LogicalPlan::Source(SourceNode::new(source)))
    }
    /// `{id: i}` for i in 0..n.
    pub fn range(n: u64) -> Self {
        Dataset::from_source(Arc::new(RangeSource::new(n)))
    }
    /// Samples held in memory.
    pub fn from_items(items: Vec<Sample>) -> Self {
        Dataset::from_source(Arc::new(ItemsSource::new(items)))
    }
    /// `{path, bytes}` per file matched by paths, directories or globs.
    pub fn read_files(entries: &[String]) -> Result<Self> {
        Ok(Dataset::from_source(Arc::new(FilesSource::files(entries)?)))
    }
    /// `{path, bytes, label}` per image file.
    pub fn read_images(entries: &[String], labels: LabelMode) -> Result<Self> {
        Ok(Dataset::from_source(Arc::new(FilesSource::images(
            entries, labels,
        )?)))
    }
    /// `{text}` per non-empty line (paths, globs or URLs).
    pub fn read_text(entries: &[String], errors: Utf8Errors) -> Result<Self> {
        Ok(Dataset::from_source(Arc::new(LinesSource::open(
            entries,
            LinesFormat::Text,
            errors,
        )?)))
    }
    /// One sample per JSON object line (paths, globs or `s3://` / `gs://` / `http(s)://` URLs).
    pub fn read_jsonl(entries: &[String]) -> Result<Self> {
        Self::read_jsonl_with(entries, &JsonlOptions::default())
    }
    /// [`Dataset::read_jsonl`] with field types, an error policy (`on_error: Skip` leaves
    /// out and counts invalid lines) and a UTF-8 policy.
    ///
    /// ```
    /// use sluice::{Dataset, IterOptions, JsonlOptions, OnError, Source};
    /// let p = std::env::temp_dir().join("sluice-doc-read.jsonl");
    /// std::fs::write(&p, "{\"x\": \"1.5\"}\n{oops\n")?;
    /// let opts = JsonlOptions { schema: vec![("x".into(), "float".parse()?)], on_error: OnError::Skip,
    ///     ..Default::default() };
    /// let ds = Dataset::read_jsonl_with(&[p.display().to_string()], &opts)?;
    /// assert_eq!(ds.plan().source().skipped(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn read_jsonl_with(entries: &[String], opts: &JsonlOptions) -> Result<Self> {
        Ok(Dataset::from_source(Arc::new(LinesSource::open_with(
            entries,
            LinesFormat::Jsonl,
            opts,
        )?)))
    }
    fn elementwise(
        &self,
        op: OpRef,
        mode: ElemMode,
        on_error: OnError,
        keep_position: Option<bool>,
    ) -> Result<Self> {
        Ok(Dataset::wrap(LogicalPlan::Map(MapNode::try_new(
            self.input(),
            op,
            mode,
            on_error,
            keep_position,
        )?)))
    }
    /// Applies `op` to every sample.
    pub fn map(&self, op: OpRef, on_error: OnError, keep_position: Option<bool>) -> Result<Self> {
        self.elementwise(op, ElemMode::Map, on_error, keep_position)
    }
    /// Keeps samples for which `op` emits them.
    pub fn filter(&self, op: OpRef) -> Result<Self> {
        self.elementwise(op, ElemMode::Filter, OnError::Raise, None)
    }
    /// Replaces each sample by the samples `op` emits.
    pub fn flat_map(&self, op: OpRef) -> Result<Self> {
        self.elementwise(op, ElemMode::FlatMap, OnError::Raise, None)
    }
    /// Applies `op` to batches of `batch_size`; the dataset continues as samples.
    pub fn map_batches(&self, op: OpRef, batch_size: usize) -> Result<Self> {
        Ok(Dataset::wrap(LogicalPlan::MapBatches(
            MapBatchesNode::try_new(self.input(), op, batch_size)?,
        )))
    }
    /// Stacks samples into batches.
    pub fn batch(&self, size: usize, drop_last: bool) -> Result<Self> {
        Ok(Dataset::wrap(LogicalPlan::Batch(BatchNode::try_new(
            self.input(),
            size,
            drop_last,
        )?)))
    }
    /// Like [`Dataset::batch`], first padding each `(field, value)` along its first axis to
    /// the longest in the batch (ragged token ids and masks stack into one array).
    pub fn batch_padded(
        &self,
        size: usize,
        drop_last: bool,
        pad: Vec<(String, f64)>,
    ) -> Result<Self> {
        self.batch_with(size, drop_last, pad, false)
    }
    /// [`Dataset::batch_padded`]; with `ragged`, a field whose values do not stack (mixed
    /// kinds or dtypes, an error otherwise) becomes a list.
    pub fn batch_with(
        &self,
        size: usize,
        drop_last: bool,
        pad: Vec<(String, f64)>,
        ragged: bool,
    ) -> Result<Self> {
        Ok(Dataset::wrap(LogicalPlan::Batch(
            BatchNode::try_new(self.input(), size, drop_last)?
                .with_pad(pad)
                .with_ragged(ragged),
        )))
    }
    /// Global per-epoch shuffle of a random-access pipeline: epoch k's permutation derives
    /// from (seed, k), `seed` being the iteration's when `None`.
    pub fn shuffle(&self, seed: Option<u64>) -> Result<Self> {
        self.shuffle_with(seed, true)
    }
    /// [`Dataset::shuffle`]; with `reshuffle_each_epoch` false, every epoch and iteration
    /// uses one permutation (that of epoch 0).
    pub fn shuffle_with(&self, seed: Option<u64>, reshuffle_each_epoch: bool) -> Result<Self> {
        Ok(Dataset::wrap(LogicalPlan::Shuffle(
            ShuffleNode::try_new(self.input(), seed)?
                .with_reshuffle_each_epoch(reshuffle_each_epoch),
        )))
    }
    /// Bounded buffer shuffle (for streams).
    pub fn shuffle_buffer(&self, size: usize, seed: Option<u64>) -> Result<Self> {
        Ok(Dataset::wrap(LogicalPlan::ShuffleBuffer(
            ShuffleBufferNode::try_new(self.input(), size, seed)?,
        )))
    }
    /// This rank's shard: every `world_size`-th position from `rank` (`equal`: the same
    /// count on every rank). A second `shard` splits this rank's share further.
    pub fn shard(&self, rank: u64, world_size: u64, equal: bool) -> Result<Self> {
        self.shard_in_blocks(rank, world_size, equal, 1)
    }
    /// [`Dataset::shard`] dealing runs of `block` consecutive positions round-robin: with a
    /// batch's size, each rank (or DataLoader worker) gets whole batches, the ones a single
    /// consumer would make.
    ///
    /// ```
    /// # use sluice::Dataset;
    /// let ds = Dataset::range(10).shard_in_blocks(1, 2, false, 2)?;
    /// assert_eq!(ds.length(), sluice::Length::Known(4)); // [2, 3] and [6, 7]
    /// # Ok::<(), sluice::Error>(())
    /// ```
    pub fn shard_in_blocks(
        &self,
        rank: u64,
        world_size: u64,
        equal: bool,
        block: u64,
    ) -> Result<Self> {
        let spec = ShardSpec::try_new(rank, world_size, equal)?.with_block(block)?;
        Ok(Dataset::wrap(LogicalPlan::Shard(ShardNode::with_spec(
            self.input(),
            spec,
        )?)))
    }
    /// Where [`Dataset::with_shards`] puts its shards: after the source (a sort, groupby or
    /// repartition is one) and the steps that keep positions; whether a `shard` is among
    /// them; and the size of a batch right after, for dealing whole batches.
    ///
    /// ```
    /// # use sluice::{Dataset, SplitPoint};
    /// let ds = Dataset::range(10).shuffle(None)?.shard(0, 2, true)?.batch(4, false)?;
    /// assert_eq!(ds.split_point(), SplitPoint { at: 3, sharded: true, block: Some(4) });
    /// # Ok::<(), sluice::Error>(())
    /// ```
    pub fn split_point(&self) -> crate::SplitPoint {
        sluice_core::plan::insert_shard::split_point(&self.plan)
    }
    /// This pipeline with a `shard` for each of `shards` (a rank's, then a DataLoader
    /// worker's within it) at its [`Dataset::split_point`], where the pipeline still has
    /// random access: the steps after it (filters, batches) run on the shard alone, so the
    /// parts are disjoint and, with `equal`, of one length.
    ///
    /// ```
    /// # use sluice::{Dataset, ShardSpec, Length};
    /// let ds = Dataset::range(10).shuffle(Some(3))?.batch(2, false)?;
    /// let part = ds.with_shards(&[ShardSpec::try_new(1, 2, true)?])?;
    /// assert_eq!(part.length(), Length::Known(3)); // 5 samples: batches of 2, 2, 1
    /// # Ok::<(), sluice::Error>(())
    /// ```
    pub fn with_shards(&self, shards: &[ShardSpec]) -> Result<Dataset> {
        Ok(Dataset::from_plan(
            sluice_core::plan::insert_shard::insert_shards(&self.plan, shards)?,
        ))
    }
    /// Repeats for `epochs` (`None`: forever).
    pub fn repeat(&self, epochs: Option<u64>) -> Result<Self> {
        Ok(Dataset::wrap(LogicalPlan::Repeat(RepeatNode::try_new(
            self.input(),
            epochs,
        )?)))
    }
    /// Keeps up to `n` outputs ready ahead of the consumer.
    pub fn prefetch(&self, n: usize) -> Result<Self> {
        Ok(Dataset::wrap(LogicalPlan::Prefetch(PrefetchNode::try_new(
            self.input(),
            n,
        )?)))
    }
    /// Packs a token field into fixed-length blocks (see [`PackSpec`]).
    pub fn pack(&self, spec: PackSpec) -> Result<Self> {
        Ok(Dataset::wrap(LogicalPlan::Pack(PackNode::try_new(
            self.input(),
            spec,
        )?)))
    }
    /// The first `n` outputs.
    pub fn take(&self, n: u64) -> Self {
        Dataset::wrap(LogicalPlan::Take(TakeNode {
            input: self.input(),
            n,
        }))
    }
    /// The logical plan.
    pub fn plan(&self) -> &Arc<LogicalPlan> {
        &self.plan
    }
    /// The physical plan the run will execute (see [`sluice_optimizer::planner`]): the
    /// default lowering, or the given optimizer plan applied to it, with the placement
    /// `opts.context` forces and the rewrites its consumer calls for.
    pub fn physical_plan(&self, opts: &IterOptions) -> Result<PhysicalPlan> {
        self.planned(opts, false)
    }

    fn planned(&self, opts: &IterOptions, elastic: bool) -> Result<PhysicalPlan> {
        sluice_optimizer::physical_plan(
            &self.plan,
            &opts.facts(elastic),
            opts.plan.as_deref(),
            Some(&Dataset::input_runner(opts)),
        )
    }

    /// How the planner runs what a blocking source (sort, groupby, repartition; a cache over
    /// one) reads whole before this run is planned: planned and placed as this run is — its
    /// processes, Ray context and thread count — with the source's own seed. (Lowering once
    /// asked the source itself, which ran its input on threads of the training process
    /// whatever the run asked: a Python function before `sort()` ignored `processes=N`.)
    /// The results are the same either way: outputs never depend on placement.
    fn input_runner(
        opts: &IterOptions,
    ) -> impl Fn(&Arc<LogicalPlan>, u64, usize) -> Result<Execution> + '_ {
        move |input: &Arc<LogicalPlan>, seed: u64, threads: usize| {
            let sub = IterOptions {
                seed,
                epoch: 0,
                num_threads: Some(threads),
                plan: None,
                columns: false,
                objects: false,
                row_batches: false,
                device_decode: false,
                time_ops: false,
                ..opts.clone()
            };
            Dataset::from_plan(input.clone()).iter(&sub)
        }
    }

    /// Starts an iteration.
    pub fn iter(&self, opts: &IterOptions) -> Result<Execution> {
        self.iter_from(opts, None)
    }

    /// A fingerprint of the pipeline, so a checkpoint or a plan is never loaded into another
    /// pipeline ([`sluice_optimizer::planner::fingerprint`]). A Python function counts by
    /// its name here, its code in the checkpoint's [`crate::state::FunctionCode`]s.
    pub fn fingerprint(&self) -> String {
        self.fingerprint
            .get_or_init(|| sluice_optimizer::planner::fingerprint(&self.plan))
            .clone()
    }

    /// What the source lists, in order ([`sluice_core::Source::data_digest`]): a checkpoint
    /// records it and a strict load refuses another.
    ///
    /// ```
    /// let a = sluice::Dataset::range(4).data_digest();
    /// assert!(a.is_some());
    /// assert_eq!(sluice::Dataset::range(9).data_digest(), a); // a count is the fingerprint's
    /// ```
    pub fn data_digest(&self) -> Option<String> {
        self.data_digest
            .get_or_init(|| match &*self.plan.chain()[0] {
                LogicalPlan::Source(s) => s.source.data_digest(),
                _ => None,
            })
            .clone()
    }

    /// Every pipeline can be checkpointed: the position of the last output travels with it
    /// (see [`IterState`]). Kept for callers that check before iterating.
    pub fn check_resumable(&self) -> Result<()> {
        Ok(())
    }

    /// The checkpoint of `exec` (an iteration of this dataset started with `opts`).
    pub fn state(&self, opts: &IterOptions, exec: &Execution) -> Result<IterState> {
        let chain = self.plan.chain();
        let position = exec.position();
        Ok(IterState {
            version: IterState::VERSION,
            pipeline: self.fingerprint(),
            functions: crate::state::function_codes(&chain),
            data: self.data_digest(),
            seed: opts.seed,
            epoch: exec.epoch(),
            state: position.as_ref().map(|p| crate::state::to_tree(&chain, p)),
            // Still finishing an elastic epoch: a reload must split it the same way.
            elastic: exec
                .elastic()
                .filter(|e| position.as_ref().is_none_or(|p| p.cursor.epoch <= e.epoch))
                .map(crate::state::Elastic::from_epoch),
        })
    }

    /// Starts an iteration, resuming after `state` when given (in the checkpoint's epoch,
    /// whatever `opts.epoch` says). Thread counts may differ from the checkpointed run; the
    /// outputs are the same.
    pub fn iter_from(&self, opts: &IterOptions, state: Option<&IterState>) -> Result<Execution> {
        self.iter_resume(opts, state, true)
    }

    /// [`Dataset::iter_from`]; with `strict` false, a checkpoint whose functions' code
    /// changed since it was saved ([`Op::code_digest`]) is accepted too.
    pub fn iter_resume(
        &self,
        opts: &IterOptions,
        state: Option<&IterState>,
        strict: bool,
    ) -> Result<Execution> {
        let auto = self.auto_run(opts)?;
        let opts = &auto.opts;
        let mut elastic_state = None;
        let resume = match state {
            None => None,
            Some(st) => {
                if st.version != IterState::VERSION {
                    return Err(Error::invalid(format!(
                        "checkpoint version {} is not supported (expected {})",
                        st.version,
                        IterState::VERSION
                    )));
                }
                if st.pipeline != self.fingerprint() {
                    return Err(Error::invalid(
                        "checkpoint was saved from a different pipeline",
                    ));
                }
                if st.seed != opts.seed {
                    return Err(Error::invalid(format!(
                        "checkpoint was saved with seed {}, this iterator uses seed {}",
                        st.seed, opts.seed
                    )));
                }
                let chain = self.plan.chain();
                if strict {
                    crate::state::check_functions(&chain, &st.functions)?;
                    let now = self.data_digest();
                    crate::state::check_data(&chain, st.data.as_deref(), now.as_deref())?;
                }
                elastic_state = st.elastic.clone();
                st.state
                    .as_ref()
                    .map(|t| crate::state::from_tree(&chain, t, st.elastic.is_some()))
                    .transpose()?
            }
        };
        let epoch = state.map_or(opts.epoch, |st| st.epoch);
        let plan = self.planned(opts, elastic_state.is_some())?;
        let elastic = match &elastic_state {
            None => None,
            Some(e) => {
                let order = plan.source.order.as_ref();
                if order.is_some_and(|o| o.part.is_some()) {
                    return Err(Error::invalid(
                        "an elastic checkpoint cannot resume a pipeline with two shard() steps \
                         (DataLoader workers within a rank): resume with one shard per rank",
                    ));
                }
                let (shard, len) = (order.and_then(|o| o.shard), order.map_or(0, |o| o.len));
                let flat =
                    self.plan.chain().iter().any(
                        |n| matches!(&**n, LogicalPlan::Map(m) if m.mode == ElemMode::FlatMap),
                    );
                Some(crate::state::elastic_epoch(e, shard, len, !flat)?)
            }
        };
        if let Some(point) = &resume {
            crate::state::check_position(
                &self.plan.chain(),
                point,
                &plan.source,
                elastic.as_ref(),
            )?;
        }
        let exec = Execution::start(
            &plan,
            ExecOptions {
                seed: opts.seed,
                epoch,
                resume,
                elastic,
                backends: opts.backends.clone(),
                memory_limit: opts.memory_limit,
                controller: opts.plan.as_ref().filter(|p| p.controller).map(|p| {
                    sluice_core::exec::controller::ControllerOptions {
                        max_workers: p.cpus.max(1),
                        target: p.options.est_throughput,
                        ..Default::default()
                    }
                }),
            },
        )?;
        if let Some(key) = auto.timing {
            self.auto_timing(key, exec.stats_handle());
        }
        Ok(exec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_ops::OpSpec;

    fn ids(exec: Execution) -> Vec<Vec<i64>> {
        exec.map(|b| match b.unwrap().get("id") {
            Some(Value::Tensor(t)) => match t.data() {
                TensorData::I64(v) => v.clone(),
                _ => unreachable!(),
            },
            other => panic!("{other:?}"),
        })
        .collect()
    }

    #[test]
    fn worker_parts_in_batch_runs_read_in_turn_are_the_rank_batches() {
        let rank = Dataset::range(23)
            .shuffle(None)
            .unwrap()
            .shard(1, 2, true)
            .unwrap();
        let opts = IterOptions::default();
        let whole = ids(rank.batch(3, false).unwrap().iter(&opts).unwrap());
        let parts: Vec<Vec<Vec<i64>>> = (0..2)
            .map(|w| {
                let part = rank.shard_in_blocks(w, 2, false, 3).unwrap();
                ids(part.batch(3, false).unwrap().iter(&opts).unwrap())
            })
            .collect();
        let mut turns = vec![];
        for i in 0..parts[0].len().max(parts[1].len()) {
            turns.extend(parts.iter().filter_map(|p| p.get(i).cloned()));
        }
        assert_eq!(turns, whole);
        let third = rank.shard(0, 2, false).unwrap().shard(0, 2, false).unwrap();
        let e = third.iter(&opts).map(|_| ()).unwrap_err().to_string();
        assert!(e.contains("at most two shard()"), "{e}");
    }

    #[test]
    fn resume_at_every_batch_matches_uninterrupted_run() {
        let ds = Dataset::range(50)
            .shuffle(None)
            .unwrap()
            .shard(1, 3, true)
            .unwrap()
            .repeat(Some(2))
            .unwrap()
            .map(OpSpec::Noop.build().unwrap(), OnError::Raise, None)
            .unwrap()
            .batch(4, false)
            .unwrap();
        let opts = IterOptions {
            seed: 3,
            num_threads: Some(2),
            chunk_size: Some(3),
            ..Default::default()
        };
        let full = ids(ds.iter(&opts).unwrap());
        assert_eq!(full.iter().map(Vec::len).sum::<usize>(), 32);
        for k in 0..=full.len() {
            let mut exec = ds.iter(&opts).unwrap();
            for _ in 0..k {
                exec.next().unwrap().unwrap();
            }
            let state = ds.state(&opts, &exec).unwrap();
            let json = serde_json::to_string(&state).unwrap();
            assert!(json.len() < 1024, "{json}");
            let back: IterState = serde_json::from_str(&json).unwrap();
            let other = IterOptions {
                num_threads: Some(1 + k % 3),
                ..opts.clone()
            };
            let rest = ids(ds.iter_from(&other, Some(&back)).unwrap());
            assert_eq!(rest, full[k..], "resume after {k} batches");
        }
    }

    #[test]
    fn checkpoint_refuses_other_pipeline_and_seed() {
        let a = Dataset::range(10).batch(2, false).unwrap();
        let b = Dataset::range(11).batch(2, false).unwrap();
        let opts = IterOptions::default();
        let st = a.state(&opts, &a.iter(&opts).unwrap()).unwrap();
        assert!(b.iter_from(&opts, Some(&st)).is_err());
        let other_seed = IterOptions {
            seed: 9,
            ..opts.clone()
        };
        assert!(a.iter_from(&other_seed, Some(&st)).is_err());
    }

    #[test]
    fn checkpoint_refuses_positions_outside_the_data() {
        let ds = Dataset::range(10).repeat(Some(2)).unwrap();
        let opts = IterOptions::default();
        let mut exec = ds.iter(&opts).unwrap();
        exec.next().unwrap().unwrap();
        let st = ds.state(&opts, &exec).unwrap();
        let at = |epoch: u64, pos: u64| {
            let mut st = st.clone();
            let mut node = st.state.as_mut().unwrap();
            while node.parent.is_some() {
                node = node.parent.as_mut().unwrap();
            }
            node.own.insert(
                "at".into(),
                serde_json::json!({"epoch": epoch, "pos": pos, "ord": 0}),
            );
            ds.iter_from(&opts, Some(&st)).map(|e| e.count())
        };
        assert_eq!(at(1, 9).unwrap(), 0, "after the last output: nothing left");
        assert_eq!(at(1, 3).unwrap(), 6);
        let err = at(0, 10).unwrap_err().to_string();
        assert!(
            err.contains("position 10 of epoch 0") && err.contains("10 sample"),
            "{err}"
        );
        let err = at(2, 0).unwrap_err().to_string();
        assert!(err.contains("epoch 2") && err.contains("2 epoch"), "{err}");
        assert!(at(0, u64::MAX).is_err());
    }
}
