//! The iterator: waits for outputs with the GIL released, checking for Ctrl-C in between.
//! `__next__` does that wait itself, in 50 ms slices, rather than through
//! [`crate::gil::released`]: it runs once per output, where a thread start per call would
//! cost more than the wait; starting a run (`Dataset.iter`, `load_state_dict`) and planning
//! go through `released`. Closing waits with a plain release: it is bounded by its timeout
//! and must run to its end.
//!
//! Its state sits behind a mutex, so threads sharing one iterator take turns: each
//! `__next__` gets its own output. The uncontended lock replaces pyo3's borrow flag (the
//! class is frozen), so the single-thread path pays nothing more; a thread that finds the
//! lock taken waits for it with the GIL released, since the holder may need the GIL back.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::Duration;

use pyo3::prelude::*;
use sluice::exec::Threads;
use sluice::{Dataset, Execution, IterOptions, IterState, Next, PipelineStats};

use crate::convert::sample_to_py;
use crate::errors::{to_py, IntoPy};
use crate::rows::{RowBatch, Rows};

const POLL: Duration = Duration::from_millis(50);
/// How long closing waits for the threads (a worker finishing a long Python call).
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an iteration that failed or was interrupted waits for its threads before
/// raising: a worker in a long call is not waited for (it finishes the call and exits).
const ABANDON_GRACE: Duration = Duration::from_millis(100);

#[pyclass(name = "Iterator", module = "sluice._native", weakref, frozen)]
pub struct PyIter {
    inner: Mutex<Inner>,
    /// Outputs delivered so far.
    count: AtomicU64,
    /// The iteration's epoch (a checkpoint's, once one is loaded).
    epoch: AtomicU64,
    /// `close()` was called: a `__next__` waiting in another thread returns.
    closing: AtomicBool,
    /// The thread holding `inner` ([`thread_key`]; 0: none).
    owner: AtomicUsize,
    /// What it runs: read by [`PyIter::plan`] without taking `inner`, which a waiting
    /// `__next__` holds.
    run: Arc<Run>,
}

/// The dataset and options of a run (set once, shared with `Inner`).
struct Run {
    ds: Dataset,
    opts: IterOptions,
}

/// Rows of a batch read together made into dicts at a time: few enough to stay in cache
/// until the loop takes them.
const ROWS_AT_ONCE: usize = 64;

/// Runs ended by an error or Ctrl-C whose workers were still finishing a call: waited for
/// at interpreter exit ([`join_stopped`]), since a worker still in Python code when the
/// interpreter finalizes is torn down under Rust frames (the process aborts).
static STOPPING: Mutex<Vec<Threads>> = Mutex::new(Vec::new());

struct Inner {
    exec: Option<Execution>,
    /// This iterator's run ended by an error or Ctrl-C, if its workers were still finishing
    /// their calls (`close()` waits for them; dropping the iterator does not).
    stopping: Option<Threads>,
    stats: Arc<PipelineStats>,
    run: Arc<Run>,
    /// The checkpoint when the execution ended (so `state_dict` works after exhaustion).
    last_state: Option<IterState>,
    /// Rows of a batch read together ([`Next::Rows`]) made into dicts, not yet delivered.
    rows: VecDeque<Py<PyAny>>,
    /// That batch, made into dicts a few rows at a time, so each is still in cache when the
    /// loop takes it.
    batch: Option<RowBatch>,
    /// Rows delivered from `rows` that the execution has not been told of yet (it is told
    /// before anything reads its position).
    untold: usize,
    /// The error of a row of that batch that could not be made, raised after the rows
    /// before it.
    row_failed: Option<sluice::Error>,
}

impl Inner {
    /// Ends the run and waits for its threads with the GIL released, then hands the memory
    /// it freed back to the system (`early`: the run had not ended, so its buffers may have
    /// held Python objects, whose memory goes back too).
    fn close(&mut self, py: Python<'_>, early: bool) {
        self.tell_rows();
        self.rows.clear();
        self.batch = None;
        self.row_failed = None;
        let mut closed = false;
        if let Some(mut exec) = self.exec.take() {
            self.last_state = self.run.ds.state(&self.run.opts, &exec).ok();
            py.detach(|| {
                exec.close(CLOSE_TIMEOUT);
                drop(exec);
            });
            closed = true;
        }
        if let Some(threads) = self.stopping.take() {
            py.detach(|| threads.wait(CLOSE_TIMEOUT));
            closed = true;
        }
        if closed {
            py.detach(|| sluice::alloc::release_free_memory(early));
        }
    }

    /// Ends the run after an error or an interrupt without waiting for calls in progress,
    /// so the exception is raised at once.
    fn abandon(&mut self, py: Python<'_>) {
        self.tell_rows();
        if let Some(mut exec) = self.exec.take() {
            self.last_state = self.run.ds.state(&self.run.opts, &exec).ok();
            if !py.detach(|| exec.close(ABANDON_GRACE)) {
                let threads = exec.threads();
                let mut all = STOPPING.lock().unwrap_or_else(|p| p.into_inner());
                all.retain(|t| !t.wait(Duration::ZERO));
                all.push(threads.clone());
                self.stopping = Some(threads);
            }
        }
    }

    /// Tells the execution of the rows delivered since it was last told.
    fn tell_rows(&mut self) {
        if let (n @ 1.., Some(exec)) = (self.untold, self.exec.as_mut()) {
            exec.deliver_rows(n);
        }
        self.untold = 0;
    }

    /// Makes the next few rows of the batch being delivered into dicts; false when it has
    /// none left.
    fn make_rows(&mut self, py: Python<'_>) -> PyResult<bool> {
        let Some(batch) = &mut self.batch else {
            return Ok(false);
        };
        let (rows, failed) = batch.take(py, ROWS_AT_ONCE)?;
        if rows.is_empty() && failed.is_none() {
            self.batch = None;
            return Ok(false);
        }
        self.rows.extend(rows);
        if let Some((row, e)) = failed {
            self.batch = None;
            if let Some(exec) = &self.exec {
                self.row_failed = Some(exec.row_error(row, e));
            }
        }
        Ok(true)
    }
}

impl PyIter {
    pub fn new(exec: Execution, ds: Dataset, opts: IterOptions) -> Self {
        let stats = exec.stats_handle();
        let epoch = AtomicU64::new(exec.epoch());
        let run = Arc::new(Run { ds, opts });
        PyIter {
            run: run.clone(),
            inner: Mutex::new(Inner {
                exec: Some(exec),
                stopping: None,
                stats,
                run,
                last_state: None,
                rows: VecDeque::new(),
                batch: None,
                untold: 0,
                row_failed: None,
            }),
            count: AtomicU64::new(0),
            epoch,
            closing: AtomicBool::new(false),
            owner: AtomicUsize::new(0),
        }
    }

    /// Counts an output; called with the state locked, so only one thread writes the count
    /// at a time and a plain store does (no locked add per output).
    fn delivered(&self) {
        self.count.store(self.count.load(Relaxed) + 1, Relaxed);
    }

    /// The state, waiting with the GIL released while another thread holds it. This
    /// thread holding it already (the iterator used from inside its own pipeline, e.g. by a
    /// function at `num_threads=0`) is an error, not a deadlock.
    fn lock(&self, py: Python<'_>) -> PyResult<Held<'_>> {
        let me = thread_key();
        loop {
            let guard = match self.inner.try_lock() {
                Ok(guard) => guard,
                Err(TryLockError::Poisoned(p)) => p.into_inner(),
                Err(TryLockError::WouldBlock) => {
                    if self.owner.load(Relaxed) == me {
                        return Err(pyo3::exceptions::PyRuntimeError::new_err(
                            "this sluice Iterator is already running a call in this thread \
                             (it was used from inside its own pipeline, e.g. by a map \
                             function at num_threads=0)",
                        ));
                    }
                    // Plain release: the holder is a `__next__` (one output) or a bounded
                    // close, and a lock wait cannot be cancelled from a helper thread.
                    py.detach(|| drop(self.inner.lock()));
                    continue;
                }
            };
            self.owner.store(me, Relaxed);
            return Ok(Held {
                guard,
                owner: &self.owner,
            });
        }
    }
}

/// A key for the calling thread (the address of a thread-local), to tell re-entry from a
/// wait for another thread.
fn thread_key() -> usize {
    thread_local!(static KEY: u8 = const { 0 });
    KEY.with(|k| k as *const u8 as usize)
}

/// The locked state; forgets its owner thread before the lock is released.
struct Held<'a> {
    guard: MutexGuard<'a, Inner>,
    owner: &'a AtomicUsize,
}

impl std::ops::Deref for Held<'_> {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.guard
    }
}

impl std::ops::DerefMut for Held<'_> {
    fn deref_mut(&mut self) -> &mut Inner {
        &mut self.guard
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.owner.store(0, Relaxed);
    }
}

impl Inner {
    /// What this run left out under `on_error="skip"`, logged when it ends: records a
    /// streaming source could not read, and samples a `map` failed on (the readers that
    /// check every record at open log their skips then); and a memory cap that cost
    /// throughput.
    fn log_skips(&self, py: Python<'_>) -> PyResult<()> {
        let source = self.run.ds.plan().source().name().to_string();
        let report = self.stats.report();
        for warning in report.end_warnings(&source, self.stats.source_read_skips()) {
            crate::log::warning(py, &warning)?;
        }
        Ok(())
    }
}

#[pymethods]
impl PyIter {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let mut inner = self.lock(py)?;
        loop {
            if let Some(row) = inner.rows.pop_front() {
                inner.untold += 1;
                self.delivered();
                return Ok(Some(row.into_bound(py)));
            }
            if inner.make_rows(py)? {
                continue;
            }
            inner.tell_rows();
            if let Some(e) = inner.row_failed.take() {
                inner.abandon(py);
                return Err(to_py(e));
            }
            let Some(exec) = inner.exec.as_mut() else {
                return Ok(None);
            };
            // Outputs already computed need no wait: skip releasing and retaking the GIL.
            let next = match exec.try_ready() {
                Some(next) => next,
                // One slice of the wait, then the signal check below (see the module docs).
                None => py.detach(|| exec.next_timeout(POLL)),
            };
            match next {
                Next::Item(s) => {
                    self.delivered();
                    return Ok(Some(sample_to_py(py, s)?));
                }
                Next::Rows(batch, n) => match RowBatch::of(py, batch, n)? {
                    Rows::Columns(b) => inner.batch = Some(b),
                    Rows::Made(rows) => inner.rows.extend(rows),
                },
                Next::Timeout => {
                    if let Err(e) = py.check_signals() {
                        inner.abandon(py);
                        return Err(e);
                    }
                    if self.closing.load(Relaxed) {
                        return Ok(None);
                    }
                }
                Next::End => {
                    inner.close(py, false);
                    inner.log_skips(py)?;
                    return Ok(None);
                }
                Next::Err(e) => {
                    inner.abandon(py);
                    return Err(to_py(e));
                }
            }
        }
    }

    /// The optimizer plan this run executes (JSON): the one given, or with `optimize` the
    /// one made from the first such run's step times (None until it has timed enough).
    fn plan(&self, py: Python<'_>) -> PyResult<Option<String>> {
        let (ds, opts) = (&self.run.ds, &self.run.opts);
        let plan = crate::gil::released(py, || ds.auto_plan(opts))?.py()?;
        Ok(plan.map(|p| p.to_json()))
    }

    /// A handle on this iteration's statistics that outlives the iterator.
    fn stats_handle(&self, py: Python<'_>) -> PyResult<PyStats> {
        Ok(PyStats {
            stats: self.lock(py)?.stats.clone(),
        })
    }

    /// Outputs delivered so far.
    #[getter]
    fn count(&self) -> u64 {
        self.count.load(Relaxed)
    }

    /// Whether the run still holds its threads (not exhausted, closed or failed); never
    /// waits (a call in progress counts as running).
    #[getter]
    fn running(&self) -> bool {
        match self.inner.try_lock() {
            Ok(inner) => inner.exec.is_some(),
            Err(TryLockError::WouldBlock) => true,
            Err(TryLockError::Poisoned(p)) => p.into_inner().exec.is_some(),
        }
    }

    /// The iteration's epoch (the one `iter(epoch=...)` started, or a loaded checkpoint's).
    #[getter]
    fn epoch(&self) -> u64 {
        self.epoch.load(Relaxed)
    }

    /// Stops the pipeline's threads and waits for them (with the GIL released). A
    /// `__next__` waiting in another thread returns (the iteration is over).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.closing.store(true, Relaxed);
        self.lock(py)?.close(py, true);
        Ok(())
    }

    /// The checkpoint after the last output delivered, as JSON text.
    fn state_dict_json(&self, py: Python<'_>) -> PyResult<String> {
        let mut inner = self.lock(py)?;
        inner.tell_rows();
        let state = match &inner.exec {
            Some(exec) => inner.run.ds.state(&inner.run.opts, exec).py()?,
            None => match &inner.last_state {
                Some(s) => s.clone(),
                None => return inner.run.ds.check_resumable().map(|_| String::new()).py(),
            },
        };
        serde_json::to_string(&state)
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))
    }

    /// Restarts the iteration right after the checkpointed output. `strict=False` accepts
    /// a checkpoint whose Python functions' code has changed since it was saved.
    #[pyo3(signature = (state, strict=true))]
    fn load_state_dict_json(&self, py: Python<'_>, state: &str, strict: bool) -> PyResult<()> {
        let state: IterState = serde_json::from_str(state)
            .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("invalid state: {e}")))?;
        let mut inner = self.lock(py)?;
        let exec = {
            let (ds, opts) = (&inner.run.ds, &inner.run.opts);
            // Resuming replays the run up to the checkpoint (a blocking sort reads its input).
            crate::gil::released(py, || ds.iter_resume(opts, Some(&state), strict))?.py()?
        };
        inner.close(py, true);
        self.closing.store(false, Relaxed);
        self.epoch.store(exec.epoch(), Relaxed);
        inner.stats = exec.stats_handle();
        inner.exec = Some(exec);
        inner.last_state = None;
        Ok(())
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _a: Py<PyAny>,
        _b: Py<PyAny>,
        _c: Py<PyAny>,
    ) -> PyResult<()> {
        self.close(py)
    }
}

/// Waits (with the GIL released, up to 10 s in all) for the workers of runs that an error or
/// Ctrl-C ended while they were in a call: they finish that call and exit. That covers runs
/// a call such as `write_parquet` or `count` made and a Ctrl-C stopped
/// ([`crate::gil::released`]), whose threads the bindings never hold: their Python calls
/// are waited for. Then the object cache's writes this process queued, which other
/// processes of the node may be waiting on. Called at interpreter exit.
/// A second Ctrl-C stops the wait.
#[pyfunction]
pub fn join_stopped(py: Python<'_>) -> PyResult<bool> {
    let all = std::mem::take(&mut *STOPPING.lock().unwrap_or_else(|p| p.into_inner()));
    let deadline = std::time::Instant::now() + CLOSE_TIMEOUT;
    for t in &all {
        while !py.detach(|| t.wait(POLL)) {
            py.check_signals()?;
            if std::time::Instant::now() >= deadline {
                return Ok(false);
            }
        }
    }
    let calls_done = crate::gil::wait_for_calls(py, deadline)?;
    // The object cache's queued writes: other processes of the node may be waiting on them.
    let left = deadline.saturating_duration_since(std::time::Instant::now());
    let written = py.detach(|| sluice::flush_cache_writes(left));
    Ok(calls_done && written)
}

/// Merges every rank's checkpoint (JSON texts) into one elastic checkpoint (JSON text).
#[pyfunction]
pub fn elastic_state_json(states: Vec<String>) -> PyResult<String> {
    let states = states
        .iter()
        .map(|s| serde_json::from_str::<IterState>(s))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(format!("invalid state: {e}")))?;
    let merged = sluice::elastic_state(&states).py()?;
    serde_json::to_string(&merged)
        .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))
}

impl Drop for PyIter {
    /// A dropped iterator (a `for` loop left with `break`) stops and joins its threads, with
    /// the GIL released so a worker waiting for it can finish. A run already ended by an
    /// error or Ctrl-C is not waited for: its workers finish their call and exit.
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Some(mut exec) = inner.exec.take() {
            Python::attach(|py| {
                py.detach(|| {
                    exec.close(CLOSE_TIMEOUT);
                    drop(exec);
                });
                // After the detach: Python objects the run held are released when the
                // thread attaches again, and only then is their memory free to return.
                py.detach(|| sluice::alloc::release_free_memory(true));
            });
        }
    }
}

/// An iteration's statistics, kept by its dataset after the iterator is gone.
#[pyclass(name = "Stats", module = "sluice._native", frozen)]
pub struct PyStats {
    stats: Arc<PipelineStats>,
}

impl PyStats {
    /// The run's statistics.
    pub(crate) fn pipeline(&self) -> &PipelineStats {
        &self.stats
    }
    /// The run's statistics, shared with the threads of its metrics endpoint.
    pub(crate) fn shared(&self) -> Arc<PipelineStats> {
        self.stats.clone()
    }
}

#[pymethods]
impl PyStats {
    /// Per-stage and consumer statistics, as JSON text.
    fn stats_json(&self) -> String {
        serde_json::to_string(&self.stats.report()).unwrap_or_default()
    }
    /// The statistics as a printable table.
    fn stats_text(&self) -> String {
        self.stats.report().to_string()
    }
}
