//! How well an op scales: its CPU per item alone against its CPU per item while every core
//! runs it (the profile's `parallel_efficiency`).

use std::time::{Duration, Instant};

use sluice_core::Sample;

use super::{context, Step};
use crate::clock::thread_cpu;

/// Wall time each measurement of [`efficiency`] runs for, at least.
const SCALING_WALL: Duration = Duration::from_millis(30);

/// The shortest half of a trial worth running: below it, thread start-up and the clock's
/// resolution are more of the measurement than the op.
const MIN_SCALING_WALL: Duration = Duration::from_millis(1);

/// `step`'s parallel efficiency on `inputs`: its CPU per item alone over its CPU per item
/// while `threads` threads run it at once (the thread clock counts the cycles a core stalls
/// on memory or on its hyperthread sibling). The better of two trials: a neighbour's burst
/// on a shared VM during one "together" run reads as contention that is not the op's (one
/// trial put an audio decoder at 0.72 and the next at 1.0).
pub(super) fn efficiency(
    step: &Step,
    inputs: &[(u64, u64, Sample)],
    threads: usize,
    seed: u64,
    scaling: Scaling,
) -> f64 {
    (0..scaling.trials)
        .map(|_| efficiency_trial(step, inputs, threads, seed, scaling.wall))
        .fold(0.0, f64::max)
}

/// How long [`efficiency`] measures: trials, the wall time of each half of a trial, and
/// which ops.
#[derive(Debug, Clone, Copy)]
pub(super) struct Scaling {
    trials: usize,
    wall: Duration,
    /// Ops costing less CPU per item are not measured (they keep 1.0).
    least_cpu: f64,
}

impl Scaling {
    /// The measurement for a profile that took `sampled` to run its samples, over ops of
    /// `costs` CPU per item. A full profile: 2 trials of 2 × [`SCALING_WALL`] per op. A
    /// profile held to a share of an epoch (`iter(optimize=True)`) spends at most half its
    /// sampling time on it, and only on ops with a tenth of the chain's CPU or more (how a
    /// cheaper one scales barely moves a prediction); when that budget leaves less than
    /// [`MIN_SCALING_WALL`] per half of a trial, nothing is measured (every op keeps 1.0).
    /// An NLP epoch of 2,000 lines samples 20 lines in 0.3 ms: the floor of 1 ms per half
    /// made its scaling trial cost 4 ms, more than the rest of the profile and a third of
    /// the epoch.
    pub(super) fn for_profile(share_of_epoch: bool, sampled: Duration, costs: &[f64]) -> Self {
        if !share_of_epoch {
            return Scaling {
                trials: 2,
                wall: SCALING_WALL,
                least_cpu: 0.0,
            };
        }
        let least_cpu = 0.1 * costs.iter().sum::<f64>();
        let measured = costs.iter().filter(|&&c| c >= least_cpu).count().max(1);
        let wall = sampled / (4 * measured) as u32;
        if wall < MIN_SCALING_WALL {
            return Scaling {
                trials: 0,
                wall,
                least_cpu: f64::INFINITY,
            };
        }
        Scaling {
            trials: 1,
            wall: wall.min(SCALING_WALL),
            least_cpu,
        }
    }

    /// Whether an op of `cpu` seconds per item is measured.
    pub(super) fn measures(&self, cpu: f64) -> bool {
        cpu >= self.least_cpu
    }
}

/// One measurement of [`efficiency`]: alone and together back to back, so both see the
/// machine in the same state; errors count as "scales" (1).
fn efficiency_trial(
    step: &Step,
    inputs: &[(u64, u64, Sample)],
    threads: usize,
    seed: u64,
    wall: Duration,
) -> f64 {
    // CPU seconds per item over `passes` passes (`None` if the op fails).
    let run = |passes: usize| -> Option<f64> {
        let c0 = thread_cpu();
        for _ in 0..passes {
            for (index, sub, s) in inputs {
                let cx = context(step, *index, *sub, seed);
                step.op.apply(s.clone(), &cx).ok()?;
            }
        }
        Some((thread_cpu() - c0).as_secs_f64() / (passes * inputs.len()) as f64)
    };
    let t0 = Instant::now();
    if run(1).is_none() {
        return 1.0;
    }
    let passes = (wall.as_secs_f64() / t0.elapsed().as_secs_f64().max(1e-9))
        .ceil()
        .clamp(1.0, 10_000.0) as usize;
    let start = std::sync::Barrier::new(threads);
    let alone = run(passes);
    let together: Option<Vec<f64>> = std::thread::scope(|sc| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                sc.spawn(|| {
                    start.wait();
                    run(passes)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().ok().flatten())
            .collect()
    });
    match (alone, together) {
        (Some(alone), Some(t)) if alone > 0.0 && !t.is_empty() => {
            let mean = t.iter().sum::<f64>() / t.len() as f64;
            // Noise can make it look better than linear; no op gets faster with company.
            (alone / mean.max(1e-12)).clamp(0.1, 1.0)
        }
        _ => 1.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_of_an_epoch_measures_within_half_its_sampling_time_or_not_at_all() {
        let costs = [2e-4, 5e-6, 8e-4];
        let full = Scaling::for_profile(false, Duration::from_millis(1), &costs);
        assert_eq!((full.trials, full.wall), (2, SCALING_WALL));
        assert!(full.measures(5e-6));
        // 40 ms of sampling, two ops over a tenth of the chain: 5 ms per half of a trial.
        let share = Scaling::for_profile(true, Duration::from_millis(40), &costs);
        assert_eq!((share.trials, share.wall), (1, Duration::from_millis(5)));
        assert!(share.measures(2e-4) && !share.measures(5e-6));
        assert_eq!(
            Scaling::for_profile(true, Duration::from_secs(9), &costs).wall,
            SCALING_WALL
        );
        // 0.3 ms of sampling cannot pay for a trial: no op is measured.
        let tiny = Scaling::for_profile(true, Duration::from_micros(300), &costs);
        assert_eq!(tiny.trials, 0);
        assert!(!tiny.measures(8e-4));
    }
}
