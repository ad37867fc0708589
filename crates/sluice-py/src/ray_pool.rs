//! The `ray` backend's pool: [`sluice_remote::ActorPool`] (every scheduling decision) over
//! Ray, whose calls a Python shim makes (`sluice.ray_backend.RayShim`: start an actor,
//! submit, the reply of a finished call, kill, cancel, whether Ray is up, free CPUs).
//! Translation only.
//!
//! The GIL is taken only around those calls. A call's reply is awaited without it: the shim
//! hangs a [`Done`] on the call's future, which Ray's own thread sets when the future
//! completes, and the waiting thread sleeps on it in short steps (so a shut-down pool or
//! cluster is noticed) before taking the GIL once to read the reply. The pool may call the
//! runtime while it holds its lock, so every method here that Python calls releases the GIL
//! before touching the pool.

use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use sluice::exec::autoplacement::DEFAULT_REMOTE_CPU_PRICE;
use sluice::exec::{Chunk, StageWork, Workers};
use sluice::{Error, Result};
use sluice_remote::actor_pool::{
    ActorPool, ActorPoolOptions, ActorRuntime, ActorWorkers, Autoscale, Failure, Level,
    PlacementReport, PoolReport, Wait,
};
use sluice_remote::RemoteStage;

use crate::errors::from_py;

/// Whether a Ray call's future completed: set from Ray's thread (the future's done
/// callback), waited on here without the GIL.
#[derive(Default)]
struct Flag {
    set: Mutex<bool>,
    cv: Condvar,
}

impl Flag {
    /// Waits up to `timeout` for the flag; whether it is set.
    fn wait(&self, timeout: Duration) -> bool {
        let set = self.set.lock().unwrap_or_else(|p| p.into_inner());
        let (set, _) = self
            .cv
            .wait_timeout_while(set, timeout, |set| !*set)
            .unwrap_or_else(|p| p.into_inner());
        *set
    }
}

/// A future's done callback that wakes the thread waiting for it.
#[pyclass(module = "sluice._native", frozen)]
struct Done(Arc<Flag>);

#[pymethods]
impl Done {
    fn __call__(&self, _future: &Bound<'_, PyAny>) {
        *self.0.set.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.0.cv.notify_all();
    }
}

/// [`ActorRuntime`] over the shim.
pub struct PyRayRuntime {
    shim: Py<PyAny>,
}

/// A Ray call in flight: its object reference (for `cancel`), its future and its flag.
pub struct PyPending {
    object_ref: Option<Py<PyAny>>,
    future: Py<PyAny>,
    done: Arc<Flag>,
}

/// A reply (`bytes` or `(bytes, [uint8 arrays])`) and its size.
pub struct PyReply {
    out: Py<PyAny>,
    bytes: usize,
}

impl PyRayRuntime {
    fn call<T>(&self, f: impl FnOnce(Python<'_>, &Bound<'_, PyAny>) -> PyResult<T>) -> Result<T> {
        Python::attach(|py| f(py, self.shim.bind(py))).map_err(from_py)
    }
}

/// Size of a reply: a frame, or a split reply (frame, [uint8 arrays]).
fn reply_bytes(out: &Bound<'_, PyAny>) -> PyResult<usize> {
    if let Ok(frame) = out.cast::<PyBytes>() {
        return Ok(frame.as_bytes().len());
    }
    let (frame, arrays): (Bound<'_, PyBytes>, Bound<'_, PyList>) = out.extract()?;
    let mut n = frame.as_bytes().len();
    for a in arrays.iter() {
        n += a.getattr("nbytes")?.extract::<usize>()?;
    }
    Ok(n)
}

impl ActorRuntime for PyRayRuntime {
    type Handle = Arc<Py<PyAny>>;
    type Pending = PyPending;
    type Reply = PyReply;

    fn start(&self, init: &str) -> Result<(Self::Handle, PyPending)> {
        let done = Arc::new(Flag::default());
        self.call(|_, shim| {
            let out = shim.call_method1("start", (init, Done(done.clone())))?;
            let (actor, future): (Py<PyAny>, Py<PyAny>) = out.extract()?;
            let pending = PyPending {
                object_ref: None,
                future,
                done,
            };
            Ok((Arc::new(actor), pending))
        })
    }

    fn submit(&self, actor: &Self::Handle, frame: &[u8]) -> Result<PyPending> {
        let done = Arc::new(Flag::default());
        self.call(|py, shim| {
            let args = (actor.bind(py), PyBytes::new(py, frame), Done(done.clone()));
            let (object_ref, future): (Py<PyAny>, Py<PyAny>) =
                shim.call_method1("submit", args)?.extract()?;
            Ok(PyPending {
                object_ref: Some(object_ref),
                future,
                done,
            })
        })
    }

    fn wait(&self, pending: &mut PyPending, timeout: Duration) -> Result<Wait<PyReply>> {
        if !pending.done.wait(timeout) {
            return Ok(Wait::Pending);
        }
        self.call(|py, shim| {
            let (ok, value): (bool, Bound<'_, PyAny>) = shim
                .call_method1("result", (pending.future.bind(py),))?
                .extract()?;
            if ok {
                // (A readiness call answers a pid; a malformed reply fails in `decode`.)
                let bytes = reply_bytes(&value).unwrap_or(0);
                let out = value.unbind();
                return Ok(Wait::Ready(PyReply { out, bytes }));
            }
            let (retryable, cause, message, exc): (bool, String, String, Bound<'_, PyAny>) =
                value.extract()?;
            let error = from_py(PyErr::from_value(exc));
            Ok(Wait::Failed(Failure {
                retryable,
                cause,
                message,
                error,
            }))
        })
    }

    fn cancel(&self, pending: PyPending) {
        if let Some(object_ref) = pending.object_ref {
            let _ = self.call(|py, shim| {
                shim.call_method1("cancel", (object_ref.bind(py),))
                    .map(drop)
            });
        }
    }

    fn kill(&self, actor: &Self::Handle) {
        // The cluster may be gone already (at interpreter exit): nothing left to stop.
        let _ = self.call(|py, shim| shim.call_method1("kill", (actor.bind(py),)).map(drop));
    }

    fn affinity(&self, actor: &Self::Handle) -> Option<String> {
        self.call(|py, shim| {
            shim.call_method1("affinity", (actor.bind(py),))?
                .extract::<Option<String>>()
        })
        .ok()
        .flatten()
    }

    fn alive(&self) -> bool {
        let alive = self.call(|_, shim| shim.call_method0("alive")?.extract::<bool>());
        alive.unwrap_or(false)
    }

    fn free_cpus(&self) -> Option<f64> {
        let free = self.call(|_, shim| shim.call_method0("free_cpus")?.extract::<f64>());
        free.ok()
    }

    fn reply_bytes(&self, reply: &PyReply) -> usize {
        reply.bytes
    }

    fn decode(&self, stage: &RemoteStage, reply: PyReply) -> Result<Chunk> {
        Python::attach(|py| super::decode(py, stage, reply.out.bind(py)))
    }

    fn log(&self, level: Level, message: &str) {
        let level = match level {
            Level::Info => 20,
            Level::Warning => 30,
        };
        let _ = Python::attach(|py| -> PyResult<()> {
            let logger = py
                .import("logging")?
                .call_method1("getLogger", ("sluice",))?;
            logger.call_method1("log", (level, message))?;
            Ok(())
        });
    }
}

/// The Ray pool of one stage (``sluice.Context`` makes one per offloaded stage and lists
/// them in ``pools()``).
///
/// Made by the context with Ray's calls (``shim``) and its options; the run starts it
/// (actors, local workers, waiting for the actors to be ready) and it serves the stage's
/// chunks until the stage ends. ``report()`` and ``actor_handles()`` read it while it runs
/// and after.
#[pyclass(name = "ActorPool", module = "sluice._native", frozen)]
pub struct PyActorPool {
    shim: Py<PyAny>,
    label: String,
    workers: usize,
    options: ActorPoolOptions,
    pool: OnceLock<ActorPool<PyRayRuntime>>,
}

#[pymethods]
impl PyActorPool {
    #[new]
    #[pyo3(signature = (
        shim, workers, label, *,
        in_flight_per_actor = 2,
        local_workers = 0,
        max_retries = 3,
        actor_start_timeout_s = 60.0,
        actor_cpus = 1.0,
        autoscale = false,
        autoscale_window_s = 2.0,
        min_actors = 1,
        max_actors = None,
        max_local_workers = None,
        local_cpu_price = 0.0,
        remote_cpu_price = DEFAULT_REMOTE_CPU_PRICE,
        target_throughput = None,
        slack = 0.05,
    ))]
    #[allow(clippy::too_many_arguments)] // a Context's Ray options
    fn new(
        shim: Py<PyAny>,
        workers: usize,
        label: String,
        in_flight_per_actor: usize,
        local_workers: usize,
        max_retries: usize,
        actor_start_timeout_s: f64,
        actor_cpus: f64,
        autoscale: bool,
        autoscale_window_s: f64,
        min_actors: usize,
        max_actors: Option<usize>,
        max_local_workers: Option<usize>,
        local_cpu_price: f64,
        remote_cpu_price: f64,
        target_throughput: Option<f64>,
        slack: f64,
    ) -> PyResult<Self> {
        let seconds = |name: &str, s: f64| {
            Duration::try_from_secs_f64(s).map_err(|_| {
                pyo3::exceptions::PyValueError::new_err(format!(
                    "{name} must be a number of seconds >= 0, got {s}"
                ))
            })
        };
        let autoscale = match autoscale {
            false => None,
            true => Some(Autoscale {
                window: seconds("autoscale_window_s", autoscale_window_s)?,
                min_actors,
                max_actors,
                max_local_workers,
                local_cpu_price,
                remote_cpu_price,
                target: target_throughput,
                slack,
            }),
        };
        let options = ActorPoolOptions {
            in_flight_per_actor,
            local_workers,
            max_retries,
            actor_start_timeout: seconds("actor_start_timeout_s", actor_start_timeout_s)?,
            actor_cpus,
            autoscale,
            ..ActorPoolOptions::default()
        };
        Ok(PyActorPool {
            shim,
            label,
            workers,
            options,
            pool: OnceLock::new(),
        })
    }

    /// The stage's name.
    #[getter]
    fn label(&self) -> &str {
        &self.label
    }

    /// Whether the run started it (its actors were ready).
    #[getter]
    fn started(&self) -> bool {
        self.pool.get().is_some()
    }

    /// Chunks the run keeps in flight (0 before it started).
    #[getter]
    fn parallelism(&self) -> usize {
        self.pool.get().map_or(0, ActorPool::parallelism)
    }

    /// Per-slot chunks, busy time and bytes, retries (and their causes: the Ray exception
    /// each re-run chunk failed with), placement state and decisions, and events.
    fn report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let report = py.detach(|| match self.pool.get() {
            Some(pool) => pool.report(),
            None => self.unstarted(),
        });
        crate::convert::json_to_py(py, &report)
    }

    /// The live actors (tests kill one to check fault tolerance).
    fn actor_handles<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let handles = py.detach(|| self.pool.get().map(ActorPool::actor_handles));
        PyList::new(py, handles.unwrap_or_default().iter().map(|h| h.bind(py)))
    }

    /// Kills the stage's actors (the run does when the stage ends).
    fn shutdown(&self, py: Python<'_>) {
        if let Some(pool) = self.pool.get() {
            py.detach(|| pool.shutdown());
        }
    }

    fn __repr__(&self) -> String {
        let state = match self.pool.get() {
            Some(_) => "started",
            None => "not started",
        };
        format!("ActorPool({:?}, {state})", self.label)
    }
}

impl PyActorPool {
    fn unstarted(&self) -> PoolReport {
        PoolReport {
            stage: self.label.clone(),
            chunks: 0,
            samples: 0,
            retries: 0,
            retry_causes: Default::default(),
            sent_bytes: 0,
            received_bytes: 0,
            slots: Vec::new(),
            placement: PlacementReport {
                local_workers: 0,
                remote_actors: 0,
                state: None,
                cost_per_hour: None,
            },
            decisions: Vec::new(),
            events: Vec::new(),
        }
    }
}

/// Starts `pool` for `stage` (once) and returns it as the stage's workers. Waits for the
/// actors without the GIL, whoever calls.
pub(super) fn start(
    pool: &Py<PyActorPool>,
    stage: RemoteStage,
    work: StageWork,
) -> Result<Box<dyn Workers>> {
    let p = pool.get();
    let runtime = Python::attach(|py| PyRayRuntime {
        shim: p.shim.clone_ref(py),
    });
    let started = Python::attach(|py| {
        py.detach(|| {
            ActorPool::start(
                runtime,
                stage.init(),
                stage.label(),
                p.workers,
                p.options.clone(),
            )
        })
    })?;
    if p.pool.set(started.clone()).is_err() {
        started.shutdown();
        return Err(Error::invalid(
            "a Ray pool serves one stage: the factory must make a new ActorPool per call",
        ));
    }
    Ok(Box::new(ActorWorkers::new(started, stage, work)))
}
