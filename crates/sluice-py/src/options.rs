//! The one place the keyword arguments of a run (`iter`, `explain`, the sinks, `optimize`,
//! the Ray plans) become an [`IterOptions`]: the plan parsed, the backends the run may use
//! registered, and where the run asks its stages to go ([`RunContext`]).

use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use sluice::exec::backend::RAY;
use sluice::exec::Backends;
use sluice::{IterOptions, Plan, RunContext};

use crate::errors::IntoPy;

/// A run's arguments as Python passes them.
pub struct RunArgs<'a> {
    pub seed: u64,
    pub num_threads: Option<usize>,
    pub chunk_size: Option<usize>,
    /// An optimizer plan (JSON).
    pub plan_json: Option<&'a str>,
    /// `processes=N`: every Python stage on N worker processes.
    pub processes: Option<usize>,
    pub fuse_ops: bool,
    /// A Ray context's pool maker (`Context._pool`): the `ray` backend. With it, Python
    /// stages run in Ray's worker processes, so the process pool is not offered.
    pub ray_factory: Option<Py<PyAny>>,
    /// Actors per stage: a Ray context's run, every element-wise stage on them unless the
    /// plan placed its stages itself (`enable_offload`).
    pub actors: Option<usize>,
    /// `memory_limit=`: bytes; 0 no cap; `None` the default cap.
    pub memory_limit: Option<u64>,
}

impl Default for RunArgs<'_> {
    fn default() -> Self {
        RunArgs {
            seed: 0,
            num_threads: None,
            chunk_size: None,
            plan_json: None,
            processes: None,
            fuse_ops: true,
            ray_factory: None,
            actors: None,
            memory_limit: None,
        }
    }
}

impl RunArgs<'_> {
    /// The options of the run.
    pub fn options(self, py: Python<'_>) -> PyResult<IterOptions> {
        let context =
            match (self.processes, self.actors) {
                (Some(_), Some(_)) => return Err(PyValueError::new_err(
                    "iter(processes=...) and a Ray context do not combine: with a Ray address, \
                     Python stages already run in Ray's worker processes",
                )),
                (Some(workers), None) => RunContext::Processes { workers },
                (None, Some(workers)) => RunContext::Remote {
                    backend: RAY.into(),
                    workers,
                },
                (None, None) => RunContext::Local,
            };
        let backends = match self.ray_factory {
            Some(f) => Backends::default().with(crate::remote::python_backend(RAY, f)),
            None => Backends::default().with(crate::worker::process_backend(py)?),
        };
        Ok(IterOptions {
            seed: self.seed,
            // `iter` sets its epoch; the other runs (sinks, explain, optimize) are epoch 0.
            epoch: 0,
            num_threads: self.num_threads,
            chunk_size: self.chunk_size,
            backends,
            plan: parse_plan(self.plan_json)?,
            context,
            fuse_ops: self.fuse_ops,
            columns: false,
            objects: false,
            row_batches: false,
            device_decode: false,
            time_ops: false,
            optimize: None,
            memory_limit: match self.memory_limit {
                None => sluice::exec::default_memory_limit(),
                Some(0) => None,
                Some(n) => Some(n),
            },
        })
    }
}

/// Parses an optional plan for [`IterOptions::plan`].
fn parse_plan(json: Option<&str>) -> PyResult<Option<Arc<Plan>>> {
    json.map(|j| Plan::from_json(j).map(Arc::new))
        .transpose()
        .py()
}
