//! What the optimizer may do: cedar's `OptimizerOptions`, plus `exact` and a memory budget.

use serde::{Deserialize, Serialize};

/// Pecan's remote worker (GCP n2-standard-8 at $0.427/h) per CPU.
pub const DEFAULT_REMOTE_CPU_PRICE: f64 = 0.427 / 8.0;

/// Switches and targets of the optimizer. Every rule can be turned off, which is how the
/// ablation benchmark measures what each contributes.
///
/// ```
/// use sluice_optimizer::OptimizerOptions;
/// let o = OptimizerOptions { exact: true, ..Default::default() };
/// assert!(o.enable_reorder && o.exact);
/// let none = OptimizerOptions::baseline();
/// assert!(!none.enable_fusion && !none.enable_local_parallelism);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct OptimizerOptions {
    /// Size output and inter-stage queues from the memory budget.
    pub enable_prefetch: bool,
    /// Samples/s to meet with the fewest cores (`None`: as fast as possible).
    pub est_throughput: Option<f64>,
    /// Cores the plan may use (`None`: all of this machine's).
    pub available_local_cpus: Option<usize>,
    /// Place stages on remote (Ray) workers when the cost model says it pays (needs
    /// `remote_cpus`, which a Ray `sluice.Context` fills in from the cluster's resources).
    pub enable_offload: bool,
    /// CPUs of the Ray cluster the offload rule may use (`None`: no cluster known).
    pub remote_cpus: Option<f64>,
    /// Whether those CPUs are this machine's own cores (a single-node Ray): work moved there
    /// escapes the GIL but still competes with the local stages for the same cores.
    pub remote_shares_local_cores: bool,
    /// CPUs Ray reserves per actor (an actor runs one chunk at a time either way).
    pub actor_cpus: f64,
    /// Most actors per offloaded stage (`None`: as many as the remote CPUs allow).
    pub max_actors: Option<usize>,
    /// What moving a chunk through Ray costs (measured defaults).
    #[serde(flatten)]
    pub transfer: TransferCosts,
    /// $ per CPU-hour of this machine (`None`: already paid for, so free — Pecan's view).
    pub local_cpu_price: Option<f64>,
    /// $ per CPU-hour of remote CPUs (`None`: [`DEFAULT_REMOTE_CPU_PRICE`]).
    pub remote_cpu_price: Option<f64>,
    /// AutoOrder: move ops where their declarations make it safe and the model says cheaper.
    pub enable_reorder: bool,
    /// Threads per stage from the cost model.
    pub enable_local_parallelism: bool,
    /// Put GIL-bound Python stages on a process pool when they dominate.
    pub enable_processes: bool,
    /// Fuse adjacent stages with the same variant.
    pub enable_fusion: bool,
    /// Cache the deterministic prefix when it is re-read across epochs.
    pub enable_caching: bool,
    /// Tune stage parallelism at run time.
    pub enable_controller: bool,
    /// Allow only moves that keep outputs byte-identical (no approximate reorderings).
    pub exact: bool,
    /// Bytes the plan may hold in queues and caches.
    pub memory_budget: u64,
    /// Bytes of local disk a cache may fill beyond its memory (0: memory only).
    pub disk_budget: u64,
    /// Run the default plan instead when the optimized one is not predicted at least
    /// [`crate::driver::MIN_GAIN`] faster (the decisions say so).
    pub enable_fallback: bool,
}

impl Default for OptimizerOptions {
    fn default() -> Self {
        OptimizerOptions {
            enable_prefetch: true,
            est_throughput: None,
            available_local_cpus: None,
            enable_offload: false,
            remote_cpus: None,
            remote_shares_local_cores: false,
            actor_cpus: 1.0,
            max_actors: None,
            transfer: TransferCosts::default(),
            local_cpu_price: None,
            remote_cpu_price: None,
            enable_reorder: true,
            enable_local_parallelism: true,
            enable_processes: true,
            enable_fusion: true,
            enable_caching: true,
            enable_controller: false,
            exact: false,
            memory_budget: 1 << 30,
            disk_budget: 0,
            enable_fallback: true,
        }
    }
}

impl OptimizerOptions {
    /// Every rule off: each op its own stage, run inline in the consumer (the ablation's
    /// starting point).
    pub fn baseline() -> Self {
        OptimizerOptions {
            enable_prefetch: false,
            enable_offload: false,
            enable_reorder: false,
            enable_local_parallelism: false,
            enable_processes: false,
            enable_fusion: false,
            enable_caching: false,
            enable_controller: false,
            enable_fallback: false,
            ..Default::default()
        }
    }
    /// $ per CPU-hour of this machine's and of remote CPUs.
    pub fn prices(&self) -> (f64, f64) {
        (
            self.local_cpu_price.unwrap_or(0.0),
            self.remote_cpu_price.unwrap_or(DEFAULT_REMOTE_CPU_PRICE),
        )
    }
    /// The cores the plan may use on a machine with `cores`.
    pub fn cpus(&self, cores: usize) -> usize {
        self.available_local_cpus.unwrap_or(cores).max(1)
    }
}

/// What moving one chunk through a remote backend costs, besides the ops' own CPU. Defaults
/// measured on this project's 2-core reference machine with a local Ray 2.60 cluster
/// (`benchmarks/ray_overhead.py`, noop pipeline, chunks of 64: round trip 1.05–1.36 ms, actor
/// 0.4–0.6 ms, driver 0.5–0.8 ms of CPU per chunk over three smoke runs on a shared machine);
/// a network link of 10 Gb/s is assumed. Every term is an option, so a user can put their
/// cluster's figures in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TransferCosts {
    /// Wall seconds a chunk's round trip takes besides its work (submit, schedule, object
    /// store put and get): hidden when enough chunks are in flight per actor.
    #[serde(rename = "offload_round_trip_s")]
    pub round_trip_s: f64,
    /// CPU seconds per chunk an actor spends besides the ops (decoding the request,
    /// encoding and storing the reply).
    #[serde(rename = "offload_actor_s_per_chunk")]
    pub actor_s_per_chunk: f64,
    /// CPU seconds per chunk in this process, holding the GIL (submitting, waiting, taking
    /// the reply).
    #[serde(rename = "offload_driver_s_per_chunk")]
    pub driver_s_per_chunk: f64,
    /// Bytes per second between the cluster and this machine.
    #[serde(rename = "offload_bandwidth")]
    pub bandwidth: f64,
    /// Request bytes per item when actors reopen the source (item coordinates only).
    #[serde(rename = "offload_item_bytes")]
    pub item_bytes: f64,
    /// Chunks queued per actor.
    #[serde(rename = "offload_in_flight")]
    pub in_flight: usize,
}

impl Default for TransferCosts {
    fn default() -> Self {
        TransferCosts {
            round_trip_s: 1.2e-3,
            actor_s_per_chunk: 0.5e-3,
            driver_s_per_chunk: 0.7e-3,
            bandwidth: 1.25e9,
            item_bytes: 80.0,
            in_flight: 2,
        }
    }
}
