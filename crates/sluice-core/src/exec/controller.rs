//! The runtime controller (tf.data AUTOTUNE, cedar's Controller): every interval it looks at
//! how busy each tunable stage was and whether the consumer waited, and adds a worker to the
//! bottleneck or takes one from a stage that idles.
//!
//! - Add: the consumer waited for data (or throughput is under `target`) → one more worker for
//!   the busiest stage that has room.
//! - Remove: the consumer did not wait (and throughput is over `target` with margin, if one
//!   is set) and some stage's workers were mostly idle → one fewer there.
//! - No oscillation: a change needs the same signal for [`ControllerOptions::patience`]
//!   intervals in a row, and after any change the controller waits
//!   [`ControllerOptions::cooldown`] intervals before the next, so the effect is measured
//!   before acting again; a stage that just lost a worker is not given one back on noise.

use std::time::Duration;

use serde::Serialize;

/// Settings of the controller.
#[derive(Debug, Clone, PartialEq)]
pub struct ControllerOptions {
    /// How often to look.
    pub interval: Duration,
    /// Workers a stage may grow to.
    pub max_workers: usize,
    /// Samples/s to meet with the fewest workers (`None`: as fast as possible).
    pub target: Option<f64>,
    /// Consecutive intervals a signal must hold before acting.
    pub patience: u32,
    /// Intervals to wait after a change.
    pub cooldown: u32,
}

impl Default for ControllerOptions {
    fn default() -> Self {
        ControllerOptions {
            interval: Duration::from_millis(250),
            max_workers: crate::cores::cores(),
            target: None,
            patience: 2,
            cooldown: 2,
        }
    }
}

/// What the controller saw of one tunable stage during an interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StageObs {
    /// Index of the stage in the pipeline's stats.
    pub slot: usize,
    /// Workers allowed to run now.
    pub active: usize,
    /// Busy time / (interval × active): 1.0 = every worker worked all the time.
    pub busy: f64,
}

/// What the controller saw during an interval.
#[derive(Debug, Clone, PartialEq)]
pub struct Observation {
    /// Share of the interval the consumer spent waiting for the next output.
    pub consumer_wait: f64,
    /// Samples per second delivered during the interval.
    pub throughput: f64,
    pub stages: Vec<StageObs>,
}

/// One decision, as shown in stats.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// Seconds since the start of the iteration.
    pub at_s: f64,
    pub slot: usize,
    pub workers: usize,
    pub why: String,
}

/// The controller's state between intervals.
#[derive(Debug, Clone)]
pub struct Controller {
    opts: ControllerOptions,
    /// Consecutive intervals wanting more (>0) or fewer (<0) workers.
    streak: i32,
    cooldown: u32,
}

/// Consumer waiting more than this share of the time means the pipeline is the bottleneck.
const WAITING: f64 = 0.10;
/// A stage whose workers are busy less than this share could give one up.
const IDLE: f64 = 0.5;

impl Controller {
    /// A controller with `opts`.
    pub fn new(opts: ControllerOptions) -> Self {
        Controller {
            opts,
            streak: 0,
            cooldown: 0,
        }
    }

    /// The change to make after `obs`, if any: (stage slot, new worker count, why).
    ///
    /// ```
    /// use sluice_core::exec::controller::*;
    /// let mut c = Controller::new(ControllerOptions { patience: 1, ..Default::default() });
    /// let starved = Observation {
    ///     consumer_wait: 0.6,
    ///     throughput: 100.0,
    ///     stages: vec![StageObs { slot: 1, active: 1, busy: 0.98 }],
    /// };
    /// assert_eq!(c.decide(&starved).map(|d| d.1), Some(2));
    /// ```
    pub fn decide(&mut self, obs: &Observation) -> Option<(usize, usize, String)> {
        if self.cooldown > 0 {
            self.cooldown -= 1;
            return None;
        }
        let under_target = self.opts.target.is_some_and(|t| obs.throughput < t);
        let over_target = self.opts.target.is_none_or(|t| obs.throughput > 1.2 * t);
        let want_more = obs.consumer_wait > WAITING || under_target;
        let want_less = !want_more && over_target;
        self.streak = match (want_more, want_less) {
            (true, _) => self.streak.max(0) + 1,
            (_, true) => self.streak.min(0) - 1,
            _ => 0,
        };
        if self.streak.unsigned_abs() < self.opts.patience {
            return None;
        }
        let decision = if self.streak > 0 {
            obs.stages
                .iter()
                .filter(|s| s.active < self.opts.max_workers)
                .max_by(|a, b| a.busy.total_cmp(&b.busy))
                .filter(|s| s.busy > IDLE)
                .map(|s| {
                    let why = if under_target {
                        format!(
                            "{:.0}/s under target {:.0}/s",
                            obs.throughput,
                            self.opts.target.unwrap_or(0.0)
                        )
                    } else {
                        format!(
                            "consumer waited {:.0}% of the time; stage {:.0}% busy",
                            obs.consumer_wait * 100.0,
                            s.busy * 100.0
                        )
                    };
                    (s.slot, s.active + 1, why)
                })
        } else {
            obs.stages
                .iter()
                .filter(|s| s.active > 1)
                .min_by(|a, b| a.busy.total_cmp(&b.busy))
                // Would the remaining workers still keep up? busy × n / (n-1) must stay idle-ish.
                .filter(|s| s.busy * s.active as f64 / (s.active - 1) as f64 <= 0.9)
                .filter(|s| s.busy < IDLE || self.opts.target.is_some())
                .map(|s| {
                    (
                        s.slot,
                        s.active - 1,
                        format!(
                            "consumer never waited; stage only {:.0}% busy",
                            s.busy * 100.0
                        ),
                    )
                })
        };
        if decision.is_some() {
            self.streak = 0;
            self.cooldown = self.opts.cooldown;
        }
        decision
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(wait: f64, active: usize, busy: f64) -> Observation {
        Observation {
            consumer_wait: wait,
            throughput: 1000.0,
            stages: vec![StageObs {
                slot: 1,
                active,
                busy,
            }],
        }
    }

    #[test]
    fn grows_the_bottleneck_after_patience_and_waits_out_the_cooldown() {
        let mut c = Controller::new(ControllerOptions {
            max_workers: 4,
            ..Default::default()
        });
        assert_eq!(c.decide(&obs(0.5, 1, 0.99)), None); // patience 2
        assert_eq!(c.decide(&obs(0.5, 1, 0.99)).map(|d| d.1), Some(2));
        assert_eq!(c.decide(&obs(0.5, 2, 0.99)), None); // cooldown
        assert_eq!(c.decide(&obs(0.5, 2, 0.99)), None);
        assert_eq!(c.decide(&obs(0.5, 2, 0.99)), None); // patience again
        assert_eq!(c.decide(&obs(0.5, 2, 0.99)).map(|d| d.1), Some(3));
    }

    #[test]
    fn never_exceeds_max_and_shrinks_idle_stages() {
        let mut c = Controller::new(ControllerOptions {
            max_workers: 2,
            patience: 1,
            cooldown: 0,
            ..Default::default()
        });
        assert_eq!(c.decide(&obs(0.9, 2, 1.0)), None);
        assert_eq!(c.decide(&obs(0.0, 2, 0.2)).map(|d| d.1), Some(1));
        assert_eq!(c.decide(&obs(0.0, 1, 0.2)), None); // never below one
    }

    #[test]
    fn does_not_oscillate_on_a_balanced_stage() {
        // Two workers each 60% busy: removing one would overload the other (120%).
        let mut c = Controller::new(ControllerOptions {
            patience: 1,
            cooldown: 0,
            ..Default::default()
        });
        for _ in 0..10 {
            assert_eq!(c.decide(&obs(0.0, 2, 0.6)), None);
        }
    }

    #[test]
    fn meets_a_target_with_fewer_workers() {
        let mut c = Controller::new(ControllerOptions {
            target: Some(100.0),
            patience: 1,
            cooldown: 0,
            max_workers: 4,
            ..Default::default()
        });
        // 1000/s against a 100/s target with 4 workers 20% busy: give one back.
        assert_eq!(c.decide(&obs(0.0, 4, 0.2)).map(|d| d.1), Some(3));
        let mut slow = obs(0.0, 1, 0.9);
        slow.throughput = 50.0;
        assert_eq!(c.decide(&slow).map(|d| d.1), Some(2));
    }
}
