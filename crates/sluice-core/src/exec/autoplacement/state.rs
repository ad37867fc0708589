//! The states of [`super::AutoPlacement`], the kinds of worker they move, and the decisions
//! they produce.

/// A kind of worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// An engine in the training process.
    Local,
    /// A Ray actor.
    Remote,
}

impl Side {
    /// `"local"` or `"remote"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Local => "local",
            Side::Remote => "remote",
        }
    }

    pub(super) fn other(self) -> Side {
        match self {
            Side::Local => Side::Remote,
            Side::Remote => Side::Local,
        }
    }
}

/// Where the state machine is; the side names the kind of worker the phase moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Adding actors while they pay.
    ScaleRemote,
    /// Adding cheap workers.
    Increase(Side),
    /// Removing costly workers.
    Decrease(Side),
    /// Removing cheap (but not free) workers added beyond need.
    Trim(Side),
    /// Holding until the rate leaves the band.
    Stable,
}

impl State {
    /// The name shown in decisions and stats (`"scale_remote"`, `"increase_local"`, …).
    pub fn as_str(self) -> &'static str {
        use Side::*;
        match self {
            State::ScaleRemote => "scale_remote",
            State::Increase(Local) => "increase_local",
            State::Increase(Remote) => "increase_remote",
            State::Decrease(Local) => "decrease_local",
            State::Decrease(Remote) => "decrease_remote",
            State::Trim(Local) => "trim_local",
            State::Trim(Remote) => "trim_remote",
            State::Stable => "stable",
        }
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One placement change (`local`/`remote`: -1, 0 or +1) and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub local: i64,
    pub remote: i64,
    /// The state after the change.
    pub state: State,
    pub reason: String,
    /// Samples/s measured in the window that led to the decision.
    pub rate: f64,
    /// Workers after the change, and what they cost per hour (rounded to 4 decimals).
    pub local_workers: i64,
    pub remote_actors: i64,
    pub cost_per_hour: f64,
}
