//! Hybrid placement at run time: Pecan's AutoPlacement state machine.
//!
//! A stage served by local workers (engines in the training process) and remote workers (Ray
//! actors) at once is re-balanced from measurements: after every window the pool reports the
//! stage's throughput, and [`AutoPlacement::observe`] answers with at most one change — one
//! local worker or one remote actor more or fewer — and the reason. It never touches Ray or
//! threads (the Python `RayPool` applies the decisions), so it is tested on synthetic rates.
//!
//! States ([`State`]; Pecan, `docs/RAY.md`):
//!
//! - `scale_remote` — add a remote actor while the next window's rate improves by more than
//!   [`PlacementOptions::improve`] and the target (if any) is not met; an actor that does not
//!   pay is removed again. The best rate reached is the reference from then on.
//! - `increase_<cheap>` — add a cheap worker while the rate stays within
//!   [`PlacementOptions::degrade`] of the reference (or the target minus `slack`); a worker
//!   that costs more is removed again.
//! - `decrease_<costly>` — remove a costly worker within those bounds; the removal that
//!   breaks them is undone. If that phase removed workers and cheap ones were added before
//!   it, `increase_<cheap>` runs once more (the alternation), else the placement settles.
//! - `trim_<cheap>` — only when the cheap workers are not free: remove those added beyond
//!   need, within the same bounds.
//! - `stable` — hold; when the rate leaves the band for `patience` windows in a row, the
//!   workload changed: start over at `scale_remote`.
//!
//! Local workers are the cheap kind unless a local CPU costs more than an actor
//! (`local_cpu_price` > `remote_cpu_price` × `actor_cpus`). Every change needs a settled
//! window after it, so one change at most per window: hysteresis by construction.
//!
//! Worker counts are signed like the deltas they are changed by; arguments are not validated
//! (the limits are widened to include the starting counts), as in the Python original.

mod pyfmt;
mod state;
#[cfg(test)]
mod tests;

use pyfmt::{fixed, general, percent, round4, signed_percent};
pub use state::{Decision, Side, State};

/// Pecan's remote worker (GCP n2-standard-8, $0.427/h) per CPU.
pub const DEFAULT_REMOTE_CPU_PRICE: f64 = 0.427 / 8.0;

/// Limits, prices and thresholds of an [`AutoPlacement`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PlacementOptions {
    pub min_local: i64,
    pub max_local: i64,
    pub min_remote: i64,
    pub max_remote: i64,
    /// $ per hour of a local worker's CPU.
    pub local_cpu_price: f64,
    /// $ per hour of a remote CPU.
    pub remote_cpu_price: f64,
    /// CPUs each actor reserves (billed).
    pub actor_cpus: f64,
    /// Samples/s the trainer needs (`None`: as fast as it goes). Scaling stops once
    /// `target × (1 + slack)` is reached; the cost phases keep the rate above
    /// `target × (1 - slack)`.
    pub target: Option<f64>,
    pub slack: f64,
    /// Least gain (share) an added actor must bring.
    pub improve: f64,
    /// Share the rate may fall below the reference in the cost phases, and the stable band.
    pub degrade: f64,
    /// Windows in a row out of the band before a stable placement is searched again.
    pub patience: i64,
}

impl PlacementOptions {
    /// The defaults (also those of the Python constructor).
    pub const DEFAULT: PlacementOptions = PlacementOptions {
        min_local: 0,
        max_local: 0,
        min_remote: 0,
        max_remote: 1,
        local_cpu_price: 0.0,
        remote_cpu_price: DEFAULT_REMOTE_CPU_PRICE,
        actor_cpus: 1.0,
        target: None,
        slack: 0.05,
        improve: 0.03,
        degrade: 0.10,
        patience: 2,
    };
}

impl Default for PlacementOptions {
    fn default() -> Self {
        PlacementOptions::DEFAULT
    }
}

/// A change as (local, remote) deltas.
type Step = (i64, i64);

/// Pecan's AutoPlacement for one stage: [`observe`](Self::observe) once per measurement
/// window.
#[derive(Debug, Clone)]
pub struct AutoPlacement {
    opts: PlacementOptions,
    local: i64,
    remote: i64,
    state: State,
    decisions: Vec<Decision>,
    /// The last change, judged (and maybe undone) in the next window.
    pending: Option<Step>,
    last_rate: Option<f64>,
    reference: Option<f64>,
    added_cheap: bool,
    grew_cheap: bool,
    removed_costly: bool,
    rounds: i64,
    off_band: i64,
}

/// Python's `max(a, b)`: `b` only if it compares greater (a NaN `a` stays).
fn py_max(a: f64, b: f64) -> f64 {
    if b > a {
        b
    } else {
        a
    }
}

/// Python's `min(a, b)`.
fn py_min(a: f64, b: f64) -> f64 {
    if b < a {
        b
    } else {
        a
    }
}

/// `x or 0.0` on an optional float: an unset or zero reference counts as none.
fn or_zero(x: Option<f64>) -> f64 {
    x.unwrap_or(0.0)
}

/// "+1 local, -1 actor".
fn describe(change: Step) -> String {
    let mut parts = Vec::new();
    if change.0 != 0 {
        parts.push(format!("{:+} local", change.0));
    }
    if change.1 != 0 {
        parts.push(format!("{:+} actor", change.1));
    }
    if parts.is_empty() {
        "no change".into()
    } else {
        parts.join(", ")
    }
}

/// `why` as the head of a longer reason.
fn prefix(why: &str) -> String {
    if why.is_empty() {
        String::new()
    } else {
        format!("{why}; ")
    }
}

impl AutoPlacement {
    /// Starts at `scale_remote` with `local` workers and `remote` actors; the limits widen
    /// to include them.
    pub fn new(local: i64, remote: i64, opts: PlacementOptions) -> Self {
        let opts = PlacementOptions {
            max_local: opts.max_local.max(local),
            max_remote: opts.max_remote.max(remote),
            min_local: opts.min_local.min(local),
            min_remote: opts.min_remote.min(remote),
            ..opts
        };
        AutoPlacement {
            opts,
            local,
            remote,
            state: State::ScaleRemote,
            decisions: Vec::new(),
            pending: None,
            last_rate: None,
            reference: None,
            added_cheap: false,
            grew_cheap: false,
            removed_costly: false,
            rounds: 0,
            off_band: 0,
        }
    }

    /// The options, limits widened to the starting counts.
    pub fn options(&self) -> &PlacementOptions {
        &self.opts
    }

    /// Local workers now.
    pub fn local(&self) -> i64 {
        self.local
    }

    /// Remote actors now.
    pub fn remote(&self) -> i64 {
        self.remote
    }

    pub fn state(&self) -> State {
        self.state
    }

    /// Every decision so far, oldest first.
    pub fn decisions(&self) -> &[Decision] {
        &self.decisions
    }

    /// Which kind of worker is cheaper per CPU.
    pub fn cheap(&self) -> Side {
        let per_actor = self.opts.remote_cpu_price * py_max(self.opts.actor_cpus, 1e-9);
        if self.opts.local_cpu_price <= per_actor {
            Side::Local
        } else {
            Side::Remote
        }
    }

    /// $ per hour of `local` workers and `remote` actors.
    pub fn cost_per_hour(&self, local: i64, remote: i64) -> f64 {
        let o = &self.opts;
        local as f64 * o.local_cpu_price + remote as f64 * o.actor_cpus * o.remote_cpu_price
    }

    /// Takes one window's throughput (samples/s) and returns the change to make, if any.
    ///
    /// ```
    /// use sluice_core::exec::autoplacement::*;
    /// let opts = PlacementOptions { max_local: 2, max_remote: 3, ..Default::default() };
    /// let mut p = AutoPlacement::new(0, 1, opts);
    /// let d = p.observe(100.0).unwrap();
    /// assert_eq!(d.reason, "first window: 100.0/s; trying one more actor");
    /// assert_eq!((p.local(), p.remote(), p.state()), (0, 2, State::ScaleRemote));
    /// ```
    pub fn observe(&mut self, rate: f64) -> Option<&Decision> {
        let rate = py_max(rate, 1e-9);
        let prev = self.last_rate.replace(rate);
        let pending = self.pending.take();
        let before = self.decisions.len();
        match self.state {
            State::ScaleRemote => self.scale(rate, prev, pending),
            State::Increase(_) => self.cost_phase(rate, pending, true, ""),
            State::Decrease(_) => self.cost_phase(rate, pending, false, ""),
            State::Trim(_) => self.trim(rate, pending, ""),
            State::Stable => self.stable(rate),
        }
        self.decisions.get(before)
    }

    fn scale(&mut self, rate: f64, prev: Option<f64>, pending: Option<Step>) {
        let o = self.opts;
        let met = o.target.filter(|t| rate >= t * (1.0 + o.slack));
        if pending.is_none() {
            // The first window (or a restart): try one more actor unless already enough.
            self.reference = Some(rate);
            if let Some(t) = met {
                let why = format!("{}/s meets the target {}/s", fixed(rate, 1), general(t));
                return self.enter_cost_phases(rate, why);
            }
            if self.remote < o.max_remote {
                let why = format!("first window: {}/s; trying one more actor", fixed(rate, 1));
                return self.change((0, 1), rate, why, None);
            }
            let why = format!("{}/s with all {} actors", fixed(rate, 1), self.remote);
            return self.enter_cost_phases(rate, why);
        }
        let gain = match prev {
            Some(p) if p != 0.0 => (rate - p) / p,
            _ => 0.0,
        };
        if gain <= o.improve {
            self.last_rate = prev; // the reference stays the rate before the useless actor
            let why = format!(
                "+1 actor gained {} (<= {}): removed again",
                signed_percent(gain, 1),
                percent(o.improve, 0)
            );
            let then = self.next_after_scale();
            return self.change((0, -1), rate, why, Some(then));
        }
        self.reference = Some(py_max(or_zero(self.reference), rate));
        let gain = signed_percent(gain, 1);
        if let Some(t) = met {
            let why = format!(
                "{gain}: {}/s meets the target {}/s",
                fixed(rate, 1),
                general(t)
            );
            return self.enter_cost_phases(rate, why);
        }
        if self.remote < o.max_remote {
            return self.change(
                (0, 1),
                rate,
                format!("+1 actor gained {gain}: one more"),
                None,
            );
        }
        let why = format!("{gain} with the most actors ({})", o.max_remote);
        self.enter_cost_phases(rate, why)
    }

    fn next_after_scale(&mut self) -> State {
        self.rounds = 0;
        self.added_cheap = false;
        self.removed_costly = false;
        self.grew_cheap = false;
        State::Increase(self.cheap())
    }

    fn enter_cost_phases(&mut self, rate: f64, why: String) {
        self.state = self.next_after_scale();
        self.reference = Some(py_max(or_zero(self.reference), rate));
        self.cost_phase(rate, None, true, &why)
    }

    /// The lowest acceptable rate in a cost phase: within `degrade` of the reference; when
    /// removing costly workers with a target met, down to `target × (1 - slack)`.
    fn floor(&self, add: bool) -> f64 {
        let reference = or_zero(self.reference);
        let floor = reference * (1.0 - self.opts.degrade);
        match self.opts.target {
            Some(t) if !add && reference >= t => py_min(floor, t * (1.0 - self.opts.slack)),
            _ => floor,
        }
    }

    /// (add a cheap worker, remove a costly one).
    fn steps(&self) -> (Step, Step) {
        match self.cheap() {
            Side::Local => ((1, 0), (0, -1)),
            Side::Remote => ((0, 1), (-1, 0)),
        }
    }

    fn cost_phase(&mut self, rate: f64, pending: Option<Step>, add: bool, why: &str) {
        let (grow, shrink) = self.steps();
        let step = if add { grow } else { shrink };
        if let Some(p) = pending {
            let floor = self.floor(add);
            if rate < floor {
                let why = format!(
                    "{}/s is below {}/s after {}: undone",
                    fixed(rate, 1),
                    fixed(floor, 1),
                    describe(p)
                );
                let then = self.after_phase(add);
                return self.change((-p.0, -p.1), rate, why, Some(then));
            }
            if add {
                self.added_cheap = true;
                self.grew_cheap = true;
            } else {
                self.removed_costly = true;
            }
            if self.opts.target.is_none() {
                self.reference = Some(py_max(or_zero(self.reference), rate));
            }
        }
        // Cheap workers are added only to replace costly ones that can then go.
        if self.can(step) && (!add || self.can(shrink)) {
            let o = &self.opts;
            let (kind, price) = if step.0 != 0 {
                ("a local worker", o.local_cpu_price)
            } else {
                ("an actor", o.remote_cpu_price * o.actor_cpus)
            };
            let verb = if add { "adding" } else { "removing" };
            let why = format!(
                "{}{}/s; {verb} {kind} (${}/h)",
                prefix(why),
                fixed(rate, 1),
                fixed(price, 3)
            );
            return self.change(step, rate, why, None);
        }
        self.state = self.after_phase(add);
        self.enter(rate, why)
    }

    /// Acts at once in the state just entered (one change per window still).
    fn enter(&mut self, rate: f64, why: &str) {
        match self.state {
            State::Increase(_) => self.cost_phase(rate, None, true, why),
            State::Decrease(_) => self.cost_phase(rate, None, false, why),
            State::Trim(_) => self.trim(rate, None, why),
            State::ScaleRemote | State::Stable => self.settle(rate, why),
        }
    }

    fn can(&self, step: Step) -> bool {
        let (local, remote) = (self.local + step.0, self.remote + step.1);
        let o = &self.opts;
        (o.min_local..=o.max_local).contains(&local)
            && (o.min_remote..=o.max_remote).contains(&remote)
            && local + remote >= 1
    }

    fn after_phase(&mut self, add: bool) -> State {
        if add {
            // In the alternation round, a phase that could add nothing ends the search.
            if self.rounds != 0 && !self.added_cheap {
                return self.final_state();
            }
            return State::Decrease(self.cheap().other());
        }
        // Alternate once more when both phases moved something (Pecan), then settle.
        self.rounds += 1;
        if self.added_cheap && self.removed_costly && self.rounds < 2 {
            self.added_cheap = false;
            self.removed_costly = false;
            return State::Increase(self.cheap());
        }
        self.final_state()
    }

    fn final_state(&mut self) -> State {
        // Cheap workers that are not free may have been added beyond need: trim them first.
        let cheap = self.cheap();
        let cheap_price = match cheap {
            Side::Local => self.opts.local_cpu_price,
            Side::Remote => self.opts.remote_cpu_price,
        };
        if self.grew_cheap && cheap_price > 0.0 {
            self.grew_cheap = false;
            return State::Trim(cheap);
        }
        State::Stable
    }

    fn trim(&mut self, rate: f64, pending: Option<Step>, why: &str) {
        let step = match self.cheap() {
            Side::Local => (-1, 0),
            Side::Remote => (0, -1),
        };
        let floor = self.floor(false);
        if let Some(p) = pending.filter(|_| rate < floor) {
            let why = format!(
                "{}/s is below {}/s after {}: undone",
                fixed(rate, 1),
                fixed(floor, 1),
                describe(p)
            );
            return self.change((-p.0, -p.1), rate, why, Some(State::Stable));
        }
        if self.can(step) {
            let kind = if step.0 != 0 {
                "a local worker"
            } else {
                "an actor"
            };
            let why = format!(
                "{}{}/s; trimming {kind} beyond need",
                prefix(why),
                fixed(rate, 1)
            );
            return self.change(step, rate, why, None);
        }
        self.settle(rate, why)
    }

    fn settle(&mut self, rate: f64, why: &str) {
        self.state = State::Stable;
        self.reference = Some(rate);
        self.off_band = 0;
        let done = format!(
            "no cheaper placement keeps the rate: stable at {} local + {} actors",
            self.local, self.remote
        );
        let why = if why.is_empty() {
            format!("{}/s; {done}", fixed(rate, 1))
        } else {
            format!("{why}; {done}")
        };
        self.record((0, 0), rate, why)
    }

    fn stable(&mut self, rate: f64) {
        let o = self.opts;
        let reference = self.reference.filter(|&r| r != 0.0).unwrap_or(rate);
        if (rate - reference).abs() / reference > o.degrade {
            self.off_band += 1;
        } else {
            self.off_band = 0;
            self.reference = Some(0.8 * reference + 0.2 * rate); // follow slow drift
        }
        if self.off_band < o.patience {
            return;
        }
        self.state = State::ScaleRemote;
        self.off_band = 0;
        self.reference = Some(rate);
        let why = format!(
            "{}/s left the {} band around {}/s for {} windows: re-placing",
            fixed(rate, 1),
            percent(o.degrade, 0),
            fixed(reference, 1),
            o.patience
        );
        if self.remote < o.max_remote && o.target.is_none_or(|t| rate < t * (1.0 + o.slack)) {
            return self.change((0, 1), rate, format!("{why}; trying one more actor"), None);
        }
        self.enter_cost_phases(rate, why)
    }

    /// Applies `step` and records it; `then` (an undo or a phase's end) moves to that state
    /// and leaves nothing to judge: the next window measures the restored setup.
    fn change(&mut self, step: Step, rate: f64, why: String, then: Option<State>) {
        self.local += step.0;
        self.remote += step.1;
        match then {
            Some(state) => {
                self.state = state;
                self.pending = None;
                self.off_band = 0;
            }
            None => self.pending = Some(step),
        }
        self.record(step, rate, why)
    }

    fn record(&mut self, step: Step, rate: f64, reason: String) {
        let cost_per_hour = round4(self.cost_per_hour(self.local, self.remote));
        self.decisions.push(Decision {
            local: step.0,
            remote: step.1,
            state: self.state,
            reason,
            rate,
            local_workers: self.local,
            remote_actors: self.remote,
            cost_per_hour,
        });
    }
}
