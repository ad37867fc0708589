//! The shared service's native pieces for its Ray actors (`sluice.service`): a worker's
//! [`ServiceHost`] of many jobs' stages and the dispatcher's [`Registry`]. Translation only:
//! the fair queue, the shared streams, leases and scaling decisions are
//! `sluice_remote::service`'s.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use sluice::stats::endpoint::{Limits, MetricsEndpoint, TextSource};
use sluice::Error;
use sluice_remote::service::cache::{shard_of, PrefixCache};
use sluice_remote::service::host::{HostOptions, ServiceHost};
use sluice_remote::service::key;
use sluice_remote::service::metrics::prometheus_text;
use sluice_remote::service::node_cache::NodeCache;
use sluice_remote::service::prefix::{PrefixBook, PrefixRunner};
use sluice_remote::service::registry::{
    JobBeat, JobInfo, Registry, RegistryOptions, Scale, WorkerBeat,
};
use sluice_remote::wire::{self, SplitFrame, SPLIT_THRESHOLD};
use sluice_remote::StageRunner;

use crate::errors::{to_py, IntoPy};

pyo3::create_exception!(
    sluice._native,
    StageDetached,
    pyo3::exceptions::PyRuntimeError,
    "A service worker no longer hosts this job's stage (the job was detached or its lease \
     expired): attach again and resend the chunk; nothing was computed."
);
use crate::convert::json_to_py;
use crate::worker::{codec, load_udf};

/// What one service worker hosts: the stages of every job attached to it (one engine per
/// stage key), their chunks run in weighted fair order on `slots` slots, and a shared stream
/// per stage for jobs that send the same chunks.
#[pyclass(name = "ServiceHost", module = "sluice._native", frozen)]
pub struct PyServiceHost {
    host: ServiceHost<Hosted, Py<PyAny>>,
    /// The prefix cache's tier on this node, when the service keeps one.
    node: Option<NodeCache>,
    /// One thread per slot that every chunk's work runs on. A chunk arrives on whichever of
    /// Ray's threads took the call (up to 64), each with its own allocator heap; run there,
    /// each chunk's images landed in pages that heap had never touched, and the kernel
    /// zeroed every one of them: 29 % of a worker's CPU went to 4 KiB page faults
    /// (`benchmarks/service_epochs.py`, docs/BENCHMARKS.md). On the slots' own threads the
    /// heaps stay warm.
    slots: rayon::ThreadPool,
    /// What this worker measured of each prefix, shared by the stages of every job that runs it.
    prefixes: PrefixBook,
}

/// A stage on a worker, and its cacheable prefix if it has one.
struct Hosted {
    runner: StageRunner,
    prefix: Option<PrefixRunner>,
}

/// A split reply as Python takes it: `(frame, [uint8 arrays])`. A reply several jobs of a
/// stream will read is put into Ray's object store once and answered as its reference: each
/// job's host then fetches it once, however many of its jobs read it, instead of the worker
/// serialising and sending a copy per job.
fn reply_to_py(split: SplitFrame, group: usize) -> sluice::Result<(Py<PyAny>, u64)> {
    let bytes = split_bytes(&split);
    Python::attach(|py| -> PyResult<(Py<PyAny>, u64)> {
        let buffers = PyList::empty(py);
        for b in split.buffers {
            buffers.append(crate::convert::out_of_band_to_py(py, b)?)?;
        }
        let reply = (PyBytes::new(py, &split.frame), buffers)
            .into_pyobject(py)?
            .into_any();
        if group > 1 {
            let shared = py.import("ray")?.call_method1("put", (reply,))?;
            return Ok((shared.unbind(), bytes));
        }
        Ok((reply.unbind(), bytes))
    })
    .map_err(crate::errors::from_py)
}

fn split_bytes(split: &SplitFrame) -> u64 {
    (split.frame.len() + split.buffers.iter().map(|b| b.len()).sum::<usize>()) as u64
}

fn host_error(e: Error) -> PyErr {
    match e {
        Error::Resource(message) => StageDetached::new_err(message),
        other => to_py(other),
    }
}

impl PyServiceHost {
    /// A chunk's whole stage, on one of the worker's slot threads. A `SystemExit` or
    /// `KeyboardInterrupt` raised in it (Ray ending this actor: a node drained) is the error,
    /// not the answer: the actor dies and the job runs the chunk again on another worker.
    fn run_whole(&self, stage: &Hosted, frame: &[u8]) -> sluice::Result<SplitFrame> {
        (self.slots).install(|| {
            stage
                .runner
                .run_split_or_interrupted(frame, SPLIT_THRESHOLD)
        })
    }
}

#[pymethods]
impl PyServiceHost {
    /// `node_cache`: `(service name, directory, byte cap)` of the prefix cache's tier on
    /// this node (`NodeCache::for_service`).
    #[new]
    #[pyo3(signature = (slots=1, window_bytes=256 << 20, node_cache=None))]
    fn new(
        slots: usize,
        window_bytes: u64,
        node_cache: Option<(String, Option<String>, Option<u64>)>,
    ) -> PyResult<Self> {
        let options = HostOptions {
            slots,
            window_bytes,
            ..HostOptions::default()
        };
        let node = match node_cache {
            Some((service, dir, limit)) => {
                NodeCache::for_service(&service, dir.as_deref().map(std::path::Path::new), limit)
                    .py()?
            }
            None => None,
        };
        let threads = rayon::ThreadPoolBuilder::new()
            .num_threads(slots.max(1))
            .thread_name(|i| format!("sluice-slot-{i}"))
            .build()
            .map_err(|e| to_py(Error::Resource(format!("service worker threads: {e}"))))?;
        Ok(PyServiceHost {
            host: ServiceHost::new(options).py()?,
            node,
            slots: threads,
            prefixes: PrefixBook::default(),
        })
    }

    /// Attaches `job` at `weight` to the stage `init` describes, building it unless another
    /// job did; returns the stage key.
    fn attach(&self, py: Python<'_>, job: u64, weight: f64, init: &str) -> PyResult<String> {
        py.detach(|| {
            let key = key::stage_key(init)?;
            self.host.attach(job, weight, &key, || {
                let runner = StageRunner::new(init, &load_udf, Some(codec()))?;
                let prefix = PrefixRunner::of(init, &runner, &self.prefixes)?;
                Ok(Hosted { runner, prefix })
            })?;
            Ok(key)
        })
        .py()
    }

    /// Runs one request frame of `job`'s stage `key`; returns the split reply
    /// `(frame, [uint8 arrays])`. Waits its turn in the fair queue without the GIL.
    fn run<'py>(
        &self,
        py: Python<'py>,
        job: u64,
        key: &str,
        frame: &[u8],
    ) -> PyResult<Bound<'py, PyAny>> {
        let reply = py
            .detach(|| {
                let items = wire::chunk_len(frame).map_err(Error::from)?;
                self.host
                    .run(job, key, items, frame, |stage, frame, group| {
                        reply_to_py(self.run_whole(stage, frame)?, group)
                    })
            })
            .map_err(host_error)?;
        Ok(reply.clone_ref(py).into_bound(py))
    }

    /// Where the records of a chunk's cached prefix are: `(prefix key, source indices per
    /// shard)`, or `None` when the stage has no prefix, or reading its records back was
    /// measured slower than computing them (then the chunk just runs).
    fn prefix_plan(
        &self,
        py: Python<'_>,
        job: u64,
        key: &str,
        frame: &[u8],
        shards: usize,
    ) -> PyResult<Option<(String, Vec<Vec<u64>>)>> {
        py.detach(|| {
            let stage = self.host.stage(job, key)?;
            let Some(prefix) = stage.prefix.as_ref().filter(|p| p.use_cache()) else {
                return Ok(None);
            };
            // What this node holds is read here; the shards are asked for the rest, unless
            // reading through them costs more than computing (then the rest is computed).
            let mut groups = vec![Vec::new(); shards.max(1)];
            if self.node.is_some() && !prefix.use_shards(shards) {
                return Ok(Some((prefix.key().to_string(), groups)));
            }
            for index in PrefixRunner::items(frame)? {
                if !self
                    .node
                    .as_ref()
                    .is_some_and(|n| n.has(prefix.key(), index))
                {
                    groups[shard_of(prefix.key(), index, shards)].push(index);
                }
            }
            Ok(Some((prefix.key().to_string(), groups)))
        })
        .map_err(host_error)
    }

    /// [`run`] with the prefix's records found in the cache (`cached`: per shard asked, the
    /// indices, the shard's joined records and their lengths, fetched in `fetch_s` seconds); returns the reply, the records computed here grouped by
    /// shard (to store when caching pays), and the seconds one took to compute.
    #[allow(clippy::type_complexity, clippy::too_many_arguments)] // Python's signature
    fn run_cached<'py>(
        &self,
        py: Python<'py>,
        job: u64,
        key: &str,
        frame: &[u8],
        cached: Vec<(Vec<u64>, numpy::PyReadonlyArray1<'py, u8>, Vec<i64>)>,
        fetch_s: f64,
        shards: usize,
    ) -> PyResult<(Bound<'py, PyAny>, Vec<Vec<(u64, Bound<'py, PyBytes>)>>, f64)> {
        // The shards' answers, read where they are (a Ray object on this node is mapped).
        let asked: usize = cached.iter().map(|(indices, _, _)| indices.len()).sum();
        let mut found: HashMap<u64, &[u8]> = HashMap::new();
        for (indices, joined, lengths) in &cached {
            let bytes = crate::convert::u8_array_bytes(joined)?;
            let mut at = 0usize;
            for (&index, &len) in indices.iter().zip(lengths) {
                let Ok(len) = usize::try_from(len) else {
                    continue; // not cached
                };
                let Some(record) = bytes.get(at..at + len) else {
                    return Err(to_py(Error::Internal(
                        "a cache shard's answer is shorter than its lengths say".into(),
                    )));
                };
                found.insert(index, record);
                at += len;
            }
        }
        let mut made: Option<(Vec<(u64, Vec<u8>)>, f64, String)> = None;
        let reply = py
            .detach(|| {
                let items = wire::chunk_len(frame).map_err(Error::from)?;
                self.host
                    .run(job, key, items, frame, |stage, frame, group| {
                        let Some(prefix) = &stage.prefix else {
                            return reply_to_py(self.run_whole(stage, frame)?, group);
                        };
                        // This node's records complete the shards' answers.
                        let (mut found, mut fetch_s) = (found.clone(), fetch_s);
                        let node = self.node.as_ref();
                        if asked > 0 {
                            prefix.shard_fetched(fetch_s, asked, found.len());
                        }
                        let indices = PrefixRunner::items(frame)?;
                        let (local, took) = node
                            .map(|n| n.complete(prefix.key(), &indices, &found))
                            .unwrap_or_default();
                        found.extend(local.iter().map(|(i, r)| (*i, r.as_slice())));
                        fetch_s += took;
                        let out = self.slots.install(|| {
                            prefix.run(&stage.runner, frame, &found, fetch_s, SPLIT_THRESHOLD)
                        })?;
                        if let Some(n) = node {
                            n.keep(prefix.key(), out.records.iter().map(|(i, r)| (*i, &r[..])));
                        }
                        let to_shards = prefix.store_in_shards(shards, node.is_some(), asked);
                        let records = if to_shards { out.records } else { Vec::new() };
                        made = Some((records, out.compute_s, prefix.key().to_string()));
                        reply_to_py(out.reply, group)
                    })
            })
            .map_err(host_error)?;
        let mut groups: Vec<Vec<(u64, Bound<'py, PyBytes>)>> = vec![Vec::new(); shards.max(1)];
        let mut compute_s = 0.0;
        if let Some((records, cost, prefix)) = made {
            compute_s = cost;
            for (index, record) in records {
                groups[shard_of(&prefix, index, shards)].push((index, PyBytes::new(py, &record)));
            }
        }
        Ok((reply.clone_ref(py).into_bound(py), groups, compute_s))
    }

    /// Detaches `job` from stage `key`; whether it was attached.
    fn detach(&self, py: Python<'_>, job: u64, key: &str) -> bool {
        py.detach(|| self.host.detach(job, key))
    }

    /// Drops `job`: detached everywhere, its queued chunks refused. How many were queued.
    fn forget(&self, py: Python<'_>, job: u64) -> usize {
        py.detach(|| self.host.forget(job))
    }

    /// Slots, busy seconds, queue, stages, per-job figures and the shared streams' counters.
    fn report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let mut report = serde_json::to_value(py.detach(|| self.host.report()))
            .map_err(|e| to_py(Error::Internal(format!("host report: {e}"))))?;
        if let (Some(node), Some(map)) = (&self.node, report.as_object_mut()) {
            map.insert("node_cache".into(), node.report());
        }
        json_to_py(py, &report)
    }
}

/// The dispatcher's state and decisions: jobs and their leases, workers, which worker a
/// job's stage attaches to, and the pool's size each window. Times are the caller's
/// monotonic seconds.
#[pyclass(name = "ServiceRegistry", module = "sluice._native", frozen)]
pub struct PyRegistry {
    registry: Arc<Mutex<Registry>>,
    /// The latest time a caller gave (f64 bits): what the metrics endpoint reports at.
    now: Arc<AtomicU64>,
    endpoint: Mutex<Option<MetricsEndpoint>>,
}

fn lock(registry: &Mutex<Registry>) -> MutexGuard<'_, Registry> {
    registry.lock().unwrap_or_else(|p| p.into_inner())
}

impl PyRegistry {
    fn lock(&self) -> MutexGuard<'_, Registry> {
        lock(&self.registry)
    }
    fn at(&self, now: f64) -> MutexGuard<'_, Registry> {
        self.now.store(now.to_bits(), Relaxed);
        self.lock()
    }
}

#[pymethods]
impl PyRegistry {
    #[new]
    #[pyo3(signature = (min_workers=1, max_workers=8, worker_cpus=1.0, lease_s=5.0, window_s=2.0, target_util=0.8, idle_windows=2))]
    fn new(
        min_workers: usize,
        max_workers: usize,
        worker_cpus: f64,
        lease_s: f64,
        window_s: f64,
        target_util: f64,
        idle_windows: u32,
    ) -> PyResult<Self> {
        let options = RegistryOptions {
            min_workers,
            max_workers,
            worker_cpus,
            lease_s,
            window_s,
            target_util,
            idle_windows,
        };
        Ok(PyRegistry {
            registry: Arc::new(Mutex::new(Registry::new(options).py()?)),
            now: Arc::new(AtomicU64::new(0f64.to_bits())),
            endpoint: Mutex::new(None),
        })
    }

    fn register(
        &self,
        now: f64,
        label: String,
        weight: f64,
        stage_keys: Vec<String>,
    ) -> PyResult<u64> {
        let info = JobInfo {
            label,
            weight,
            stage_keys,
        };
        self.at(now).register(now, info).py()
    }

    /// ValueError for a job this registry does not know (expired, or never registered).
    fn heartbeat(&self, now: f64, job: u64, samples: u64, backlogged: bool) -> PyResult<()> {
        let beat = JobBeat {
            samples,
            backlogged,
        };
        self.at(now).heartbeat(now, job, beat).py()
    }

    fn unregister(&self, job: u64) -> bool {
        self.lock().unregister(job)
    }

    fn expire(&self, now: f64) -> Vec<u64> {
        self.at(now).expire(now)
    }

    fn add_worker(&self, now: f64, id: &str, node: &str) {
        self.at(now).add_worker(now, id, node)
    }

    fn remove_worker(&self, id: &str) -> bool {
        self.lock().remove_worker(id)
    }

    /// `report`: the worker's `ServiceHost.report()` as JSON.
    fn worker_beat(&self, now: f64, id: &str, report: &str) -> PyResult<()> {
        let beat: WorkerBeat = serde_json::from_str(report)
            .map_err(|e| Error::invalid(format!("a worker's report: {e}")))
            .py()?;
        self.at(now).worker_beat(now, id, beat);
        Ok(())
    }

    fn lease(&self, job: u64, avoid: Vec<String>) -> PyResult<Option<String>> {
        self.lock().lease(job, &avoid).py()
    }

    fn release(&self, job: u64, worker: &str) {
        self.lock().release(job, worker)
    }

    /// `("hold", None)`, `("start", n)` or `("retire", [worker ids])`.
    fn scale<'py>(
        &self,
        py: Python<'py>,
        now: f64,
        starting: usize,
    ) -> PyResult<(&'static str, Bound<'py, PyAny>)> {
        Ok(match self.at(now).scale(now, starting) {
            Scale::Hold => ("hold", py.None().into_bound(py)),
            Scale::Start(n) => ("start", n.into_pyobject(py)?.into_any()),
            Scale::Retire(ids) => ("retire", PyList::new(py, ids)?.into_any()),
        })
    }

    /// Serves the service's metrics in the Prometheus text format on 127.0.0.1:`port` (0: a
    /// free port) until the registry goes; returns the address.
    fn serve_metrics(&self, port: u16) -> PyResult<(String, u16)> {
        let (registry, now) = (self.registry.clone(), self.now.clone());
        let text: TextSource = Arc::new(move || {
            let status = lock(&registry).status(f64::from_bits(now.load(Relaxed)));
            prometheus_text(&status)
        });
        let endpoint = MetricsEndpoint::serve_text(port, Limits::default(), text)
            .map_err(|e| pyo3::exceptions::PyOSError::new_err(e.to_string()))?;
        let address = endpoint.address();
        *self.endpoint.lock().unwrap_or_else(|p| p.into_inner()) = Some(endpoint);
        Ok((address.ip().to_string(), address.port()))
    }

    fn status<'py>(&self, py: Python<'py>, now: f64) -> PyResult<Bound<'py, PyAny>> {
        let status = self.at(now).status(now);
        json_to_py(py, &status)
    }
}

/// One shard of the service's prefix cache: records by (prefix key, source index) within a
/// byte budget, kept by their value (`sluice_remote::service::cache`).
#[pyclass(name = "PrefixCache", module = "sluice._native", frozen)]
pub struct PyPrefixCache(Mutex<PrefixCache>);

impl PyPrefixCache {
    fn lock(&self) -> MutexGuard<'_, PrefixCache> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[pymethods]
impl PyPrefixCache {
    #[new]
    fn new(budget: u64) -> Self {
        PyPrefixCache(Mutex::new(PrefixCache::new(budget)))
    }

    /// The records of `prefix` for `indices`, as one uint8 array of the records found, end to
    /// end, and each index's record length (-1: not here). One array, so Ray carries it out
    /// of band and a worker on this node maps it instead of unpickling a list of bytes.
    fn get_many<'py>(
        &self,
        py: Python<'py>,
        now: f64,
        prefix: &str,
        indices: Vec<u64>,
    ) -> (Bound<'py, numpy::PyArray1<u8>>, Vec<i64>) {
        let (joined, lengths) = py.detach(|| {
            let got = self.lock().get_many(now, prefix, &indices);
            let total = got.iter().flatten().map(|r| r.len()).sum();
            let mut joined = Vec::with_capacity(total);
            let mut lengths = Vec::with_capacity(got.len());
            for r in got {
                match r {
                    Some(record) => {
                        joined.extend_from_slice(&record);
                        lengths.push(record.len() as i64);
                    }
                    None => lengths.push(-1),
                }
            }
            (joined, lengths)
        });
        (numpy::PyArray1::from_vec(py, joined), lengths)
    }

    fn put_many(
        &self,
        py: Python<'_>,
        now: f64,
        prefix: &str,
        compute_s: f64,
        records: Vec<(u64, Vec<u8>)>,
    ) -> usize {
        py.detach(|| self.lock().put_many(now, prefix, compute_s, records))
    }

    fn report<'py>(&self, py: Python<'py>, now: f64) -> PyResult<Bound<'py, PyAny>> {
        let report = self.lock().report(now);
        json_to_py(py, &report)
    }
}

/// The stage key of an init message: jobs with equal keys share a stage on a worker.
#[pyfunction]
fn stage_key(init: &str) -> PyResult<String> {
    key::stage_key(init).py()
}

/// `init` with the local files its source names pinned (their sizes and modification
/// times now): a service's job sends this, so its stage and prefix keys follow the files.
#[pyfunction]
fn pin_local_files(init: &str) -> PyResult<String> {
    sluice_remote::stage::pin_local_files(init).py()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyServiceHost>()?;
    m.add_class::<PyRegistry>()?;
    m.add_class::<PyPrefixCache>()?;
    m.add("StageDetached", m.py().get_type::<StageDetached>())?;
    m.add_function(wrap_pyfunction!(stage_key, m)?)?;
    m.add_function(wrap_pyfunction!(pin_local_files, m)?)?;
    Ok(())
}
