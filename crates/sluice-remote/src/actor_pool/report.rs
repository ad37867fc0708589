//! What an [`ActorPool`](super::ActorPool) did: `it.stats()["remote"][i]` (the keys of the
//! Python pool's `report()` dict, which `sluice.Context` prints).

use std::collections::BTreeMap;

use serde::Serialize;
use sluice_core::exec::autoplacement::Decision;

/// One stage's pool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolReport {
    pub stage: String,
    /// Chunks that came back (re-runs count once).
    pub chunks: u64,
    pub samples: u64,
    /// Chunks run again after their actor or reply was lost, and why (the cause's name).
    pub retries: u64,
    pub retry_causes: BTreeMap<String, u64>,
    /// What crossed to and from the actors (request frames, replies with their tensors).
    pub sent_bytes: u64,
    pub received_bytes: u64,
    /// Every worker the stage had, in the order they started.
    pub slots: Vec<SlotReport>,
    pub placement: PlacementReport,
    pub decisions: Vec<DecisionReport>,
    /// What happened, one stamped line each (start, actors lost and replaced, decisions).
    pub events: Vec<String>,
}

/// One worker: an actor (`actor-N`) or a local worker (`local-N`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SlotReport {
    pub name: String,
    pub local: bool,
    pub chunks: u64,
    /// Seconds from submitting its chunks to their replies (ms precision).
    pub busy_s: f64,
    pub sent_bytes: u64,
    pub received_bytes: u64,
}

/// The workers serving now (or when the stage ended); with AutoPlacement, its state and cost.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlacementReport {
    pub local_workers: usize,
    pub remote_actors: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// $ per hour, rounded to 4 decimals.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_per_hour: Option<f64>,
}

/// One AutoPlacement decision (`sluice.placement.Decision.as_dict()`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DecisionReport {
    pub local: i64,
    pub remote: i64,
    pub state: String,
    pub reason: String,
    pub rate: f64,
    pub local_workers: i64,
    pub remote_actors: i64,
    pub cost_per_hour: f64,
}

impl From<&Decision> for DecisionReport {
    fn from(d: &Decision) -> Self {
        DecisionReport {
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

/// `x` rounded to `digits` decimals (Python's `round(x, digits)` for the figures shown).
pub(super) fn round_to(x: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (x * scale).round() / scale
}
