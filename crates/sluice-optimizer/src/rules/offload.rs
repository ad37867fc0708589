//! Offload (cedar's offload, sized by the cost model): moves a contiguous run of element-wise
//! stages onto Ray actors when the model predicts that raises throughput — or meets
//! `est_throughput` at a lower hourly cost — and gives it the fewest actors that reach what
//! the rest of the pipeline allows.
//!
//! Every run of adjacent chain stages whose ops can travel (`Op::ship`) is a candidate. The
//! model ([`predict_with`]) weighs the CPU per sample the run moves away (profile) and the
//! local cores and GIL it frees against what offloading costs here: per chunk the round trip
//! and the submitting/receiving (GIL held), per sample the bytes moved — item coordinates
//! when actors reopen the source, samples otherwise, outputs back — against the link and
//! one copy of the reply. The remote CPUs come from the Ray cluster (`remote_cpus`). On a
//! single-node cluster the actors run on this machine's cores, so only GIL-bound work gains.
//!
//! The rule runs after `parallelism`: the stages that stay local are then re-sized for the
//! new target (their threads were sized for the local-only one).
//!
//! Forced mode ([`Offload::force`], what a Ray `sluice.Context` runs without an optimizer
//! plan): every element-wise stage whose ops can travel goes to the workers, with no profile
//! and no cost model; stateful steps (batch, shuffle buffer, take) stay local.

use sluice_core::{PhysicalPlan, Result, Stage, StageKind, Variant};

use super::{Draft, Rule};
use crate::model::{predict_with, RemoteModel};
use crate::plan::Prediction;

/// The least predicted gain worth a remote cluster: below it, the model's error and the
/// remote run's risks outweigh the gain.
pub const MIN_GAIN: f64 = 0.05;
/// The rule buys the fewest actors that reach this share of the best prediction: the last
/// few percent would cost whole actors.
pub const ENOUGH: f64 = 0.97;
/// A longer run must predict this much more to be preferred (fewer ops away otherwise).
const LONGER_RUN: f64 = 0.01;
/// Threads of a local stage cover its share of the target with this margin (as
/// `parallelism` does).
const THREAD_MARGIN: f64 = 1.05;

/// The offload rule.
#[derive(Debug, Default)]
pub struct Offload;

impl Offload {
    /// Forced mode: moves every chain of `plan` whose ops can travel onto `backend` with
    /// `workers` workers; returns one decision line per chain.
    pub fn force(plan: &mut PhysicalPlan, backend: &str, workers: usize) -> Vec<String> {
        let workers = workers.max(1);
        let mut decisions = Vec::new();
        let mut placed: Vec<Stage> = Vec::with_capacity(plan.stages.len());
        for mut stage in std::mem::take(&mut plan.stages) {
            let StageKind::Chain { ops, read } = &stage.kind else {
                placed.push(stage);
                continue;
            };
            let label = stage.kind.label();
            // An op that cannot describe itself portably (e.g. a Python callable without
            // cloudpickle) would fail on the worker: the stage stays here instead.
            if let Some(bad) = ops.iter().find(|o| o.op.ship().is_err()) {
                decisions.push(format!(
                    "{label} stays local: op {} cannot be shipped to {backend}",
                    bad.op.name()
                ));
                placed.push(stage);
                continue;
            }
            // Locally, chains split where GIL-free ops meet Python ones; a worker is a
            // process of its own, so adjacent offloaded chains fuse: one round trip instead
            // of several.
            if let (false, Some(prev)) = (*read, placed.last_mut()) {
                if let (StageKind::Chain { ops: prev_ops, .. }, Variant::Pool { .. }) =
                    (&mut prev.kind, &prev.variant)
                {
                    prev_ops.extend(ops.iter().cloned());
                    decisions.push(format!("{label} fused into the previous {backend} stage"));
                    continue;
                }
            }
            stage.variant = Variant::Pool {
                backend: backend.to_string(),
                workers,
            };
            decisions.push(format!("{label} → {backend} ({workers} workers)"));
            placed.push(stage);
        }
        plan.stages = placed;
        decisions
    }
}

/// A way to offload, as predicted.
#[derive(Debug, Clone)]
struct Candidate {
    /// Stages `first..=last` of the plan go to one remote stage.
    first: usize,
    last: usize,
    actors: usize,
    plan: PhysicalPlan,
    prediction: Prediction,
    cost: f64,
}

impl Rule for Offload {
    fn name(&self) -> &'static str {
        "offload"
    }
    fn apply(&self, d: &mut Draft<'_>) -> Result<()> {
        let Some(remote) = RemoteModel::from_options(d.options) else {
            d.note(
                "offload",
                "no Ray cluster known (optimize with a Ray sluice.Context): all stages stay local",
            );
            return Ok(());
        };
        if !d.pools.contains(&remote.backend) {
            d.note(
                "offload",
                format!("the {} backend is not available here", remote.backend),
            );
            return Ok(());
        }
        if remote.max_actors() == 0 {
            d.note(
                "offload",
                format!(
                    "{} remote CPUs hold no actor of {} CPUs",
                    remote.cpus, remote.actor_cpus
                ),
            );
            return Ok(());
        }
        let target = d.options.est_throughput.filter(|t| *t > 0.0);
        let model = Model {
            d: &*d,
            remote: &remote,
            target,
        };
        let local = model.widen(&d.plan);
        let base = model.predict(&local);
        let base_cost = model.cost(&local, &base);
        let mut chosen: Option<Candidate> = None;
        let mut stays = Vec::new();
        for (first, last) in model.runs() {
            let Some(c) = model.best_actors(first, last, target) else {
                continue;
            };
            let worth = match target {
                // Already fast enough here: only a cheaper way to stay fast enough counts.
                Some(t) if base.throughput >= t => {
                    c.prediction.throughput >= t && c.cost < base_cost * (1.0 - MIN_GAIN)
                }
                _ => c.prediction.throughput >= base.throughput * (1.0 + MIN_GAIN),
            };
            if first == last && !worth {
                stays.push((
                    first,
                    format!(
                    "{} stays local: on {} it would give {:.0}/s with {} actors vs {:.0}/s here \
                     (bound: {})",
                    d.plan.stages[first].kind.label(),
                    remote.backend,
                    c.prediction.throughput,
                    c.actors,
                    base.throughput,
                    c.prediction.bottleneck
                ),
                ));
            }
            if worth && chosen.as_ref().is_none_or(|b| better(&c, b, target)) {
                chosen = Some(c);
            }
        }
        let Some(c) = chosen else {
            for (_, s) in stays {
                d.note("offload", s);
            }
            d.note(
                "offload",
                format!(
                    "nothing pays on {} remote CPUs: predicted {:.0}/s local",
                    remote.cpus, base.throughput
                ),
            );
            return Ok(());
        };
        let moved = model.describe(&c, &base);
        let mut plan = c.plan;
        let resized = model.resize_local(&mut plan, &c.prediction);
        d.plan = plan;
        d.note("offload", moved);
        for (i, s) in stays {
            if !(c.first..=c.last).contains(&i) {
                d.note("offload", s);
            }
        }
        if !resized.is_empty() {
            d.note(
                "offload",
                format!(
                    "local stages re-sized for {:.0}/s: {}",
                    c.prediction.throughput,
                    resized.join(", ")
                ),
            );
        }
        Ok(())
    }
}

/// Whether `a` beats `b`: more throughput (up to the target), then a lower cost, then fewer
/// ops moved.
fn better(a: &Candidate, b: &Candidate, target: Option<f64>) -> bool {
    let cap =
        |c: &Candidate| target.map_or(c.prediction.throughput, |t| c.prediction.throughput.min(t));
    let (ta, tb) = (cap(a), cap(b));
    let (la, lb) = (a.last - a.first, b.last - b.first);
    if la > lb {
        return ta > tb * (1.0 + LONGER_RUN) || (ta >= tb && a.cost < b.cost);
    }
    if la < lb {
        return ta * (1.0 + LONGER_RUN) >= tb;
    }
    ta > tb || (ta == tb && a.cost < b.cost)
}

/// The cost model as the rule uses it.
struct Model<'a, 'd> {
    d: &'a Draft<'d>,
    remote: &'a RemoteModel,
    target: Option<f64>,
}

impl Model<'_, '_> {
    fn predict(&self, plan: &PhysicalPlan) -> Prediction {
        predict_with(
            plan,
            self.d.profile,
            self.d.cpus,
            self.d.cache.as_ref(),
            Some(self.remote),
        )
    }

    /// Dollars per hour of running `plan` at its predicted rate (or the target, when lower):
    /// the local CPUs it keeps busy and the remote CPUs its actors reserve.
    fn cost(&self, plan: &PhysicalPlan, p: &Prediction) -> f64 {
        let (local_price, remote_price) = self.d.options.prices();
        let rate = self.target.map_or(p.throughput, |t| t.min(p.throughput));
        let busy = (rate * p.cpu_per_sample).min(self.d.cpus as f64);
        let per_actor = if self.remote.actor_cpus > 0.0 {
            self.remote.actor_cpus
        } else {
            1.0
        };
        let actors: usize = plan
            .stages
            .iter()
            .filter_map(|s| match &s.variant {
                Variant::Pool { backend, workers } if *backend == self.remote.backend => {
                    Some(*workers)
                }
                _ => None,
            })
            .sum();
        // Actors on this machine's own cores cost what its cores cost.
        let actor_price = if self.remote.shares_local_cores {
            local_price
        } else {
            remote_price
        };
        busy * local_price + actors as f64 * per_actor * actor_price
    }

    /// Runs of adjacent chain stages that can travel, not yet remote.
    fn runs(&self) -> Vec<(usize, usize)> {
        let stages = &self.d.plan.stages;
        let movable = |s: &Stage| match &s.kind {
            StageKind::Chain { ops, .. } => {
                !matches!(&s.variant, Variant::Pool { backend, .. } if *backend == self.remote.backend)
                    && ops.iter().all(|o| o.op.ship().is_ok())
            }
            _ => false,
        };
        let mut runs = Vec::new();
        for first in 0..stages.len() {
            for (last, st) in stages.iter().enumerate().skip(first) {
                // The read can only start a chain: it must stay before any op.
                let reads_later =
                    last > first && matches!(st.kind, StageKind::Chain { read: true, .. });
                if !movable(st) || reads_later {
                    break;
                }
                runs.push((first, last));
            }
        }
        runs
    }

    /// `plan` with stages `first..=last` fused onto `actors` actors.
    fn offloaded(&self, first: usize, last: usize, actors: usize) -> PhysicalPlan {
        let mut plan = self.d.plan.clone();
        let run: Vec<Stage> = plan.stages.drain(first..=last).collect();
        let read = matches!(run[0].kind, StageKind::Chain { read: true, .. });
        let ops = run
            .iter()
            .flat_map(|s| match &s.kind {
                StageKind::Chain { ops, .. } => ops.clone(),
                _ => vec![],
            })
            .collect();
        let queue_depth = run.iter().map(|s| s.queue_depth).max().unwrap_or(1);
        plan.stages.insert(
            first,
            Stage {
                kind: StageKind::Chain { read, ops },
                variant: Variant::Pool {
                    backend: self.remote.backend.clone(),
                    workers: actors,
                },
                queue_depth,
            },
        );
        self.widen(&plan)
    }

    /// `plan` with every local thread stage on all the cores: what the local stages could
    /// give once work moves away (re-sized to need afterwards).
    fn widen(&self, plan: &PhysicalPlan) -> PhysicalPlan {
        let mut plan = plan.clone();
        for st in &mut plan.stages {
            let threadable = st.kind.is_stateless() && !super::is_python(st);
            if let Variant::Threads { threads } = &mut st.variant {
                if threadable {
                    *threads = self.d.cpus;
                }
            }
        }
        plan
    }

    /// The fewest actors for the run `first..=last` that reach [`ENOUGH`] of the best it can
    /// give (or of `target`).
    fn best_actors(&self, first: usize, last: usize, target: Option<f64>) -> Option<Candidate> {
        let max = self.remote.max_actors();
        if max == 0 {
            return None;
        }
        let at = |n: usize| {
            let plan = self.offloaded(first, last, n);
            let prediction = self.predict(&plan);
            (plan, prediction)
        };
        let most = at(max).1.throughput;
        let goal = ENOUGH * target.map_or(most, |t| t.min(most));
        // Throughput never falls as actors are added: the first n reaching the goal.
        let (mut lo, mut hi) = (1, max);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if at(mid).1.throughput >= goal {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        let (plan, prediction) = at(lo);
        let cost = self.cost(&plan, &prediction);
        Some(Candidate {
            first,
            last,
            actors: lo,
            plan,
            prediction,
            cost,
        })
    }

    /// The decision line for `c`.
    fn describe(&self, c: &Candidate, base: &Prediction) -> String {
        let stage = &c.plan.stages[c.first];
        let label = stage.kind.label();
        let sp = c.prediction.stages.get(c.first + 1);
        let money = match self
            .d
            .options
            .local_cpu_price
            .or(self.d.options.remote_cpu_price)
        {
            Some(_) => format!(", ≈${:.2}/h", c.cost),
            None => String::new(),
        };
        format!(
            "{label} → {} × {} actors ({:.2} ms CPU/sample moved{}): predicted {:.0}/s vs \
             {:.0}/s local ({:+.0}%), bound: {}{money}",
            self.remote.backend,
            c.actors,
            sp.map_or(0.0, |s| s.cpu_per_sample * 1e3),
            if self.remote.shares_local_cores {
                ", on this machine's cores"
            } else {
                ""
            },
            c.prediction.throughput,
            base.throughput,
            100.0 * (c.prediction.throughput / base.throughput.max(1e-12) - 1.0),
            c.prediction.bottleneck
        )
    }

    /// Gives the local thread stages of `plan` the fewest threads for `p`'s throughput.
    fn resize_local(&self, plan: &mut PhysicalPlan, p: &Prediction) -> Vec<String> {
        let mut notes = Vec::new();
        for (st, sp) in plan.stages.iter_mut().zip(p.stages.iter().skip(1)) {
            let threadable = st.kind.is_stateless() && !super::is_python(st);
            if let Variant::Threads { threads } = &mut st.variant {
                if threadable {
                    let need = (p.throughput * sp.cpu_per_sample * THREAD_MARGIN).ceil() as usize;
                    *threads = need.clamp(1, self.d.cpus);
                    notes.push(format!("{} × {threads}", st.kind.label()));
                }
            }
        }
        notes
    }
}

#[cfg(test)]
mod tests {
    use super::Offload;
    use crate::driver::{optimize_physical, OptimizeInput};
    use crate::options::OptimizerOptions;
    use crate::testing::*;
    use sluice_core::exec::backend::RAY;
    use sluice_core::{lower, LowerOptions, OpKind, Variant};

    fn options(remote_cpus: f64, shares: bool) -> OptimizerOptions {
        OptimizerOptions {
            enable_offload: true,
            remote_cpus: Some(remote_cpus),
            remote_shares_local_cores: shares,
            ..Default::default()
        }
    }

    fn input(
        plan: &std::sync::Arc<sluice_core::LogicalPlan>,
        o: &OptimizerOptions,
    ) -> OptimizeInput {
        let mut input = OptimizeInput::for_test(plan, o);
        input.cpus = 2;
        input.pools = vec![RAY.into()];
        input
    }

    /// A heavy stage, a stateful step, then a cheap stage.
    fn heavy_then_cheap() -> std::sync::Arc<sluice_core::LogicalPlan> {
        let heavy = then(
            images(40, 1000),
            vec![busy_op("heavy", 2000, OpKind::Opaque)],
        );
        let batched = std::sync::Arc::new(sluice_core::LogicalPlan::Batch(
            sluice_core::BatchNode::try_new(heavy, 4, false).unwrap(),
        ));
        then(batched, vec![busy_op("cheap", 1, OpKind::Opaque)])
    }

    #[test]
    fn a_cpu_heavy_stage_goes_to_remote_actors_and_a_cheap_one_stays() {
        let plan = heavy_then_cheap();
        let local = optimize_physical(&input(&plan, &OptimizerOptions::default())).unwrap();
        let out = optimize_physical(&input(&plan, &options(64.0, false))).unwrap();
        let before = printed(&local.plan);
        let after = printed(&out.plan);
        assert!(before.starts_with("read+heavy [threads=2]"), "{before}");
        // ~2 ms per sample: 2 local cores give ~1000/s; actors are added until the cheap
        // stage's copy of the samples and the consumer bind, not all 64.
        let Variant::Pool { backend, workers } = &out.plan.stages[0].variant else {
            panic!("{after}");
        };
        assert_eq!(backend, RAY);
        assert!((4..64).contains(workers), "{after}");
        assert!(after.starts_with("read+heavy [ray="), "{after}");
        assert!(
            after.ends_with("cheap [threads=1]"),
            "cheap stays local: {after}"
        );
        assert!(
            out.prediction.throughput > 3.0 * local.prediction.throughput,
            "{:?} vs {:?}",
            out.prediction,
            local.prediction
        );
        let said = out.decisions.join("\n");
        assert!(said.contains("read+heavy → ray ×"), "{said}");
        assert!(said.contains("cheap stays local"), "{said}");
        // The plan file records the rule's prediction.
        let file = out.to_plan(&options(64.0, false), 2);
        assert_eq!(file.prediction.throughput, out.prediction.throughput);
    }

    #[test]
    fn nothing_moves_without_a_cluster_or_when_the_round_trip_costs_more_than_the_work() {
        let cheap = pipeline(40, vec![busy_op("cheap", 2, OpKind::Opaque)]);
        let out = optimize_physical(&input(&cheap, &options(64.0, false))).unwrap();
        assert!(!out.plan.stages.iter().any(|s| s.variant.is_pool()));
        assert!(
            out.decisions
                .iter()
                .any(|d| d.contains("read+cheap stays local")),
            "{:?}",
            out.decisions
        );
        let no_cluster = OptimizerOptions {
            enable_offload: true,
            ..Default::default()
        };
        let out = optimize_physical(&input(&cheap, &no_cluster)).unwrap();
        assert!(out.decisions.iter().any(|d| d.contains("no Ray cluster")));
    }

    #[test]
    fn on_this_machines_cores_only_gil_bound_work_gains() {
        let rust = pipeline(40, vec![busy_op("heavy", 1000, OpKind::Opaque)]);
        let out = optimize_physical(&input(&rust, &options(2.0, true))).unwrap();
        assert!(
            !out.plan.stages.iter().any(|s| s.variant.is_pool()),
            "{}",
            printed(&out.plan)
        );
        let py = pipeline(
            40,
            vec![TestOp {
                python: true,
                ..busy_op("udf", 1000, OpKind::Opaque)
            }],
        );
        let out = optimize_physical(&input(&py, &options(2.0, true))).unwrap();
        let after = printed(&out.plan);
        assert!(after.contains("udf [ray=2]"), "{after}");
        assert!(out
            .decisions
            .iter()
            .any(|d| d.contains("this machine's cores")));
    }

    #[test]
    fn a_target_met_locally_buys_no_actors_and_one_beyond_reach_buys_just_enough() {
        let plan = pipeline(40, vec![busy_op("heavy", 2000, OpKind::Opaque)]);
        let met = OptimizerOptions {
            est_throughput: Some(300.0),
            ..options(64.0, false)
        };
        let out = optimize_physical(&input(&plan, &met)).unwrap();
        assert!(!out.plan.stages.iter().any(|s| s.variant.is_pool()));
        let far = OptimizerOptions {
            est_throughput: Some(4000.0),
            ..options(64.0, false)
        };
        let out = optimize_physical(&input(&plan, &far)).unwrap();
        let Variant::Pool { workers, .. } = out.plan.stages[0].variant else {
            panic!("{}", printed(&out.plan));
        };
        // ~2 ms per sample (more on a loaded machine): 4000/s needs about 8 actors, not 64.
        assert!((7..=24).contains(&workers), "{workers}");
        assert!(
            out.prediction.throughput >= 0.97 * 4000.0,
            "{:?}",
            out.prediction
        );
        // A costly local CPU makes a cheaper remote one worth it even when the target is met.
        let dear_here = OptimizerOptions {
            local_cpu_price: Some(5.0),
            remote_cpu_price: Some(0.05),
            ..met
        };
        let out = optimize_physical(&input(&plan, &dear_here)).unwrap();
        assert!(
            out.plan.stages.iter().any(|s| s.variant.is_pool()),
            "{:?}",
            out.decisions
        );
        assert!(
            out.decisions.iter().any(|d| d.contains("$")),
            "{:?}",
            out.decisions
        );
    }

    #[test]
    fn the_offloaded_plan_applies_to_the_default_lowering() {
        let plan = heavy_then_cheap();
        let o = options(64.0, false);
        let out = optimize_physical(&input(&plan, &o)).unwrap();
        let file = out.to_plan(&o, 2);
        let default = lower(&plan, &Default::default()).unwrap();
        assert_eq!(
            file.apply(&default).unwrap().to_string(),
            out.plan.to_string()
        );
    }

    #[test]
    fn forced_mode_moves_every_chain_that_travels_without_a_profile() {
        let py = |name| TestOp {
            python: true,
            ..busy_op(name, 1, OpKind::Opaque)
        };
        let stays = TestOp {
            ships: false,
            ..busy_op("stays", 1, OpKind::Opaque)
        };
        // read+stays | batch | a | x | b | batch: the first chain cannot travel; after the
        // stateful step, three chains (split where Rust meets Python) fuse into one.
        let first = then(images(20, 10), vec![stays]);
        let batched = std::sync::Arc::new(sluice_core::LogicalPlan::Batch(
            sluice_core::BatchNode::try_new(first, 4, false).unwrap(),
        ));
        let logical = then(
            batched,
            vec![py("a"), busy_op("x", 1, OpKind::Opaque), py("b")],
        );
        let mut plan = lower(&logical, &LowerOptions::default()).unwrap();
        assert_eq!(
            printed(&plan),
            "read+stays [threads=2] | batch(4) [threads=1] | a [threads=2] | x [threads=2] | b [threads=2]"
        );
        let decisions = Offload::force(&mut plan, RAY, 3);
        assert_eq!(
            printed(&plan),
            "read+stays [threads=2] | batch(4) [threads=1] | a+x+b [ray=3]"
        );
        assert_eq!(
            decisions,
            [
                "read+stays stays local: op stays cannot be shipped to ray",
                "a → ray (3 workers)",
                "x fused into the previous ray stage",
                "b fused into the previous ray stage",
            ]
        );
        // A read starts a stage of its own even after a pooled one (it cannot follow ops).
        let mut simple = lower(
            &pipeline(5, vec![busy_op("y", 1, OpKind::Opaque)]),
            &LowerOptions::default(),
        )
        .unwrap();
        Offload::force(&mut simple, "pool", 0);
        assert_eq!(printed(&simple), "read+y [pool=1]");
    }
}
