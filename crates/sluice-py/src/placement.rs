//! `sluice.placement`: `AutoPlacement` and `Decision`, forwarded to
//! `sluice::exec::autoplacement` (the state machine). Translation only.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use sluice::exec::autoplacement::{self as ap, AutoPlacement, PlacementOptions, State};

/// One placement change (``local``/``remote``: -1, 0 or +1) and why.
#[pyclass(name = "Decision", module = "sluice._native", frozen, get_all)]
#[derive(Clone, PartialEq)]
pub struct PyDecision {
    local: i64,
    remote: i64,
    state: String,
    reason: String,
    rate: f64,
    local_workers: i64,
    remote_actors: i64,
    cost_per_hour: f64,
}

impl From<&ap::Decision> for PyDecision {
    fn from(d: &ap::Decision) -> Self {
        PyDecision {
            local: d.local,
            remote: d.remote,
            state: d.state.as_str().to_string(),
            reason: d.reason.clone(),
            rate: d.rate,
            local_workers: d.local_workers,
            remote_actors: d.remote_actors,
            cost_per_hour: d.cost_per_hour,
        }
    }
}

#[pymethods]
impl PyDecision {
    #[new]
    #[allow(clippy::too_many_arguments)] // the fields, as the dataclass it replaces took them
    fn new(
        local: i64,
        remote: i64,
        state: String,
        reason: String,
        rate: f64,
        local_workers: i64,
        remote_actors: i64,
        cost_per_hour: f64,
    ) -> Self {
        PyDecision {
            local,
            remote,
            state,
            reason,
            rate,
            local_workers,
            remote_actors,
            cost_per_hour,
        }
    }

    /// The fields as a dict, in order.
    fn as_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("local", self.local)?;
        d.set_item("remote", self.remote)?;
        d.set_item("state", &self.state)?;
        d.set_item("reason", &self.reason)?;
        d.set_item("rate", self.rate)?;
        d.set_item("local_workers", self.local_workers)?;
        d.set_item("remote_actors", self.remote_actors)?;
        d.set_item("cost_per_hour", self.cost_per_hour)?;
        Ok(d)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let fields = self
            .as_dict(py)?
            .iter()
            .map(|(k, v)| Ok(format!("{k}={}", v.repr()?)))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(format!("Decision({})", fields.join(", ")))
    }

    fn __eq__(&self, other: PyRef<'_, Self>) -> bool {
        *self == *other
    }

    /// The hash of the fields' tuple, as a frozen dataclass has.
    fn __hash__(&self, py: Python<'_>) -> PyResult<isize> {
        let fields = (
            self.local,
            self.remote,
            &self.state,
            &self.reason,
            self.rate,
            self.local_workers,
            self.remote_actors,
            self.cost_per_hour,
        );
        fields.into_pyobject(py)?.hash()
    }
}

/// The limits, prices and thresholds of an :class:`AutoPlacement` (its base class: they read
/// as its attributes), the limits widened to the starting counts.
#[pyclass(
    name = "PlacementOptions",
    module = "sluice._native",
    subclass,
    get_all
)]
pub struct PyOptions {
    min_local: i64,
    max_local: i64,
    min_remote: i64,
    max_remote: i64,
    local_cpu_price: f64,
    remote_cpu_price: f64,
    actor_cpus: f64,
    target: Option<f64>,
    slack: f64,
    improve: f64,
    degrade: f64,
    patience: i64,
}

impl From<&PlacementOptions> for PyOptions {
    fn from(o: &PlacementOptions) -> Self {
        PyOptions {
            min_local: o.min_local,
            max_local: o.max_local,
            min_remote: o.min_remote,
            max_remote: o.max_remote,
            local_cpu_price: o.local_cpu_price,
            remote_cpu_price: o.remote_cpu_price,
            actor_cpus: o.actor_cpus,
            target: o.target,
            slack: o.slack,
            improve: o.improve,
            degrade: o.degrade,
            patience: o.patience,
        }
    }
}

/// Pecan's AutoPlacement for one stage: ``observe(rate)`` once per measurement window
/// (samples/s with the current workers) returns a :class:`Decision` or None.
///
/// ``target``: samples/s the trainer needs (``None``: as fast as it goes); with a target,
/// scaling stops once ``target × (1 + slack)`` is reached and the cost phases keep the rate
/// above ``target × (1 - slack)``. ``actor_cpus``: CPUs each actor reserves (billed).
#[pyclass(name = "AutoPlacement", module = "sluice._native", extends = PyOptions)]
pub struct PyAutoPlacement {
    inner: AutoPlacement,
}

const DEFAULT: PlacementOptions = PlacementOptions::DEFAULT;

#[pymethods]
impl PyAutoPlacement {
    #[new]
    #[pyo3(signature = (
        local,
        remote,
        min_local = DEFAULT.min_local,
        max_local = DEFAULT.max_local,
        min_remote = DEFAULT.min_remote,
        max_remote = DEFAULT.max_remote,
        local_cpu_price = DEFAULT.local_cpu_price,
        remote_cpu_price = DEFAULT.remote_cpu_price,
        actor_cpus = DEFAULT.actor_cpus,
        target = DEFAULT.target,
        slack = DEFAULT.slack,
        improve = DEFAULT.improve,
        degrade = DEFAULT.degrade,
        patience = DEFAULT.patience,
    ))]
    #[allow(clippy::too_many_arguments)] // the keyword arguments of `AutoPlacement`
    fn new(
        local: i64,
        remote: i64,
        min_local: i64,
        max_local: i64,
        min_remote: i64,
        max_remote: i64,
        local_cpu_price: f64,
        remote_cpu_price: f64,
        actor_cpus: f64,
        target: Option<f64>,
        slack: f64,
        improve: f64,
        degrade: f64,
        patience: i64,
    ) -> PyClassInitializer<Self> {
        let opts = PlacementOptions {
            min_local,
            max_local,
            min_remote,
            max_remote,
            local_cpu_price,
            remote_cpu_price,
            actor_cpus,
            target,
            slack,
            improve,
            degrade,
            patience,
        };
        let inner = AutoPlacement::new(local, remote, opts);
        PyClassInitializer::from(PyOptions::from(inner.options()))
            .add_subclass(PyAutoPlacement { inner })
    }

    /// Takes one window's throughput (samples/s) and returns the change to make, if any.
    fn observe(&mut self, rate: f64) -> Option<PyDecision> {
        self.inner.observe(rate).map(PyDecision::from)
    }

    /// $ per hour of ``local`` workers and ``remote`` actors (now, by default).
    #[pyo3(signature = (local = None, remote = None))]
    fn cost_per_hour(&self, local: Option<i64>, remote: Option<i64>) -> f64 {
        let p = &self.inner;
        p.cost_per_hour(local.unwrap_or(p.local()), remote.unwrap_or(p.remote()))
    }

    /// Which kind of worker is cheaper per CPU: ``"local"`` or ``"remote"``.
    #[getter]
    fn cheap(&self) -> &'static str {
        self.inner.cheap().as_str()
    }
    #[getter]
    fn local(&self) -> i64 {
        self.inner.local()
    }
    #[getter]
    fn remote(&self) -> i64 {
        self.inner.remote()
    }
    #[getter]
    fn state(&self) -> &'static str {
        self.inner.state().as_str()
    }
    /// Every decision so far, oldest first (a copy).
    #[getter]
    fn decisions(&self) -> Vec<PyDecision> {
        self.inner
            .decisions()
            .iter()
            .map(PyDecision::from)
            .collect()
    }

    fn __repr__(&self) -> String {
        let p = &self.inner;
        format!(
            "AutoPlacement(local={}, remote={}, state='{}', decisions={})",
            p.local(),
            p.remote(),
            p.state(),
            p.decisions().len()
        )
    }
}

/// Adds `AutoPlacement` (and its base), `Decision` and the constants of `sluice.placement`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyOptions>()?;
    m.add_class::<PyAutoPlacement>()?;
    m.add_class::<PyDecision>()?;
    m.add("DEFAULT_REMOTE_CPU_PRICE", ap::DEFAULT_REMOTE_CPU_PRICE)?;
    m.add("SCALE_REMOTE", State::ScaleRemote.as_str())?;
    m.add("STABLE", State::Stable.as_str())
}
