//! The state machine on synthetic rates (no cluster, no clock). The golden sequences are
//! what the Python original (`python/sluice/placement.py` before the move) decided for the
//! same inputs, reasons included.

use super::*;

/// Feeds `p` the rate `rate_of(local, remote)` of its current placement each window, times
/// `noise(window)`.
fn run(
    p: &mut AutoPlacement,
    rate_of: impl Fn(i64, i64) -> f64,
    windows: usize,
    noise: impl Fn(usize) -> f64,
) {
    for w in 0..windows {
        let r = rate_of(p.local(), p.remote()) * noise(w);
        p.observe(r);
    }
}

fn quiet(_: usize) -> f64 {
    1.0
}

/// Actors add `per_actor` each, local workers `per_local` up to `good_local` (more steal the
/// trainer's CPU: -15% each), the consumer takes at most `cap`.
fn cluster(per_actor: f64, per_local: f64) -> impl Fn(i64, i64) -> f64 {
    let (good_local, cap) = (2, 450.0);
    move |local, remote| {
        let mut r = per_actor * remote as f64 + per_local * local.min(good_local) as f64;
        if local > good_local {
            r *= 0.85f64.powi((local - good_local) as i32);
        }
        r.min(cap)
    }
}

fn default_cluster() -> impl Fn(i64, i64) -> f64 {
    cluster(100.0, 90.0)
}

/// An AutoPlacement after 40 windows on the default cluster.
fn settled(local: i64, remote: i64, opts: PlacementOptions) -> AutoPlacement {
    let mut p = AutoPlacement::new(local, remote, opts);
    run(&mut p, default_cluster(), 40, quiet);
    p
}

fn opts(max_local: i64, max_remote: i64) -> PlacementOptions {
    PlacementOptions {
        max_local,
        max_remote,
        ..Default::default()
    }
}

/// "state local+remote $cost: reason" of each decision.
fn trace(p: &AutoPlacement) -> Vec<String> {
    p.decisions()
        .iter()
        .map(|d| {
            let (s, l, r) = (d.state, d.local_workers, d.remote_actors);
            format!("{s} {l}+{r} ${}: {}", d.cost_per_hour, d.reason)
        })
        .collect()
}

#[test]
fn pecan_order_scale_remote_then_shift_to_free_local_then_drop_remote() {
    let p = settled(0, 1, opts(4, 8));
    assert_eq!(p.decisions()[0].state, State::ScaleRemote);
    assert_eq!(p.state(), State::Stable);
    // Scale-out found the consumer's cap (5 actors; the 6th gained nothing and went)...
    assert!(p
        .decisions()
        .iter()
        .any(|d| d.reason.contains("removed again")));
    // ...then free local workers took over part of the work and actors were given back,
    // while staying within 10% of the best rate.
    assert!(p.local() >= 2 && p.remote() < 5);
    assert!(default_cluster()(p.local(), p.remote()) >= 0.9 * 450.0);
    let cost = p.cost_per_hour(p.local(), p.remote());
    assert!(cost < 5.0 * p.options().remote_cpu_price);
    for d in p.decisions() {
        assert!(!d.reason.is_empty() && d.rate > 0.0 && d.cost_per_hour >= 0.0);
        assert!(d.local_workers >= 0 && d.remote_actors >= 0);
    }
}

#[test]
fn golden_free_local_workers() {
    let p = settled(0, 1, opts(4, 8));
    let add = "450.0/s; adding a local worker ($0.000/h)";
    assert_eq!(
        trace(&p),
        [
            "scale_remote 0+2 $0.1067: first window: 100.0/s; trying one more actor",
            "scale_remote 0+3 $0.1601: +1 actor gained +100.0%: one more",
            "scale_remote 0+4 $0.2135: +1 actor gained +50.0%: one more",
            "scale_remote 0+5 $0.2669: +1 actor gained +33.3%: one more",
            "scale_remote 0+6 $0.3202: +1 actor gained +12.5%: one more",
            "increase_local 0+5 $0.2669: +1 actor gained +0.0% (<= 3%): removed again",
            &format!("increase_local 1+5 $0.2669: {add}"),
            &format!("increase_local 2+5 $0.2669: {add}"),
            &format!("increase_local 3+5 $0.2669: {add}"),
            &format!("increase_local 4+5 $0.2669: {add}"),
            "decrease_remote 4+4 $0.2135: 450.0/s; removing an actor ($0.053/h)",
            "decrease_remote 4+3 $0.1601: 419.0/s; removing an actor ($0.053/h)",
            "increase_local 4+4 $0.2135: 346.8/s is below 405.0/s after -1 actor: undone",
            "stable 4+4 $0.2135: 419.0/s; no cheaper placement keeps the rate: stable at \
             4 local + 4 actors",
        ]
    );
    let last = p.decisions().last().unwrap();
    assert_eq!(
        (last.local, last.remote, last.rate),
        (0, 0, 419.04999999999995)
    );
}

#[test]
fn golden_priced_local_workers_are_trimmed() {
    let o = PlacementOptions {
        local_cpu_price: 0.02,
        ..opts(4, 8)
    };
    let p = settled(0, 1, o);
    let t = trace(&p);
    assert_eq!(t.len(), 18);
    assert_eq!(
        t[6],
        "increase_local 1+5 $0.2869: 450.0/s; adding a local worker ($0.020/h)"
    );
    assert_eq!(
        t[12..],
        [
            "increase_local 4+4 $0.2935: 346.8/s is below 405.0/s after -1 actor: undone",
            "trim_local 3+4 $0.2735: 419.0/s; trimming a local worker beyond need",
            "trim_local 2+4 $0.2535: 450.0/s; trimming a local worker beyond need",
            "trim_local 1+4 $0.2335: 450.0/s; trimming a local worker beyond need",
            "trim_local 0+4 $0.2135: 450.0/s; trimming a local worker beyond need",
            "stable 1+4 $0.2335: 400.0/s is below 405.0/s after -1 local: undone",
        ]
    );
}

#[test]
fn noise_within_the_margins_does_not_move_a_stable_placement() {
    let mut p = settled(0, 1, opts(4, 8));
    let settled = (p.local(), p.remote(), p.decisions().len());
    // +-6% noise: inside the 10% band, so nothing changes (hysteresis).
    let noise = |w: usize| if w % 2 == 1 { 1.06 } else { 0.94 };
    run(&mut p, default_cluster(), 30, noise);
    assert_eq!((p.local(), p.remote(), p.decisions().len()), settled);
}

#[test]
fn a_lasting_change_restarts_the_search() {
    let mut p = settled(0, 1, opts(4, 8));
    let n = p.decisions().len();
    // The workload gets twice as expensive: every worker does half as much.
    run(&mut p, cluster(50.0, 45.0), 3, quiet);
    assert_eq!(
        trace(&p)[n..],
        [
            "scale_remote 4+5 $0.2669: 209.5/s left the 10% band around 419.1/s for 2 windows: \
             re-placing; trying one more actor",
            "scale_remote 4+6 $0.3202: +1 actor gained +17.2%: one more",
        ]
    );
}

#[test]
fn a_target_stops_scaling_and_bounds_the_cost_phases() {
    let o = PlacementOptions {
        target: Some(250.0),
        slack: 0.05,
        ..opts(4, 8)
    };
    let p = settled(0, 1, o);
    let reasons: Vec<_> = p.decisions().iter().map(|d| &*d.reason).collect();
    assert_eq!(
        reasons[2],
        "+50.0%: 300.0/s meets the target 250/s; 300.0/s; adding a local worker ($0.000/h)"
    );
    // Never more actors than the target needs, and the final rate still meets it (- slack).
    assert!(p.decisions().iter().all(|d| d.remote_actors <= 3));
    assert!(default_cluster()(p.local(), p.remote()) >= 250.0 * 0.95);
    assert_eq!((p.local(), p.remote(), p.state()), (4, 2, State::Stable));
    assert_eq!(
        reasons[8],
        "202.3/s is below 237.5/s after -1 actor: undone"
    );
}

#[test]
fn when_local_cpus_cost_more_the_roles_swap() {
    // The trainer's host is dear: start with 2 local workers, remote actors are cheap.
    let o = PlacementOptions {
        local_cpu_price: 1.0,
        remote_cpu_price: 0.05,
        ..opts(2, 8)
    };
    let p = settled(2, 1, o);
    assert_eq!(p.cheap(), Side::Remote);
    let t = trace(&p);
    assert_eq!(t.len(), 16);
    assert_eq!(
        t[4],
        "increase_remote 2+4 $2.2: 450.0/s; adding an actor ($0.050/h)"
    );
    assert_eq!(
        t[9],
        "decrease_local 1+8 $1.4: 450.0/s; removing a local worker ($1.000/h)"
    );
    assert_eq!(
        t[11],
        "trim_remote 0+7 $0.35: 450.0/s; trimming an actor beyond need"
    );
    assert!(p.local() < 2);
    assert!(default_cluster()(p.local(), p.remote()) >= 0.9 * 450.0);
}

#[test]
fn limits_are_respected_and_something_always_serves() {
    let o = PlacementOptions {
        max_local: 1,
        min_remote: 0,
        max_remote: 0,
        ..Default::default()
    };
    let p = settled(1, 0, o);
    assert_eq!((p.local(), p.remote()), (1, 0));
    let mut p = AutoPlacement::new(0, 1, opts(0, 1));
    run(&mut p, |l, r| 10.0 * (l + r) as f64, 40, quiet);
    assert!(p.local() + p.remote() >= 1);
}

#[test]
fn the_limits_widen_to_the_starting_counts() {
    let o = PlacementOptions {
        min_local: 5,
        max_local: 1,
        min_remote: 4,
        max_remote: 0,
        ..Default::default()
    };
    let p = AutoPlacement::new(3, 2, o);
    let o = p.options();
    assert_eq!(
        (o.min_local, o.max_local, o.min_remote, o.max_remote),
        (3, 3, 2, 2)
    );
}

#[test]
fn a_stalled_stage_is_not_a_crash() {
    for rate in [0.0, 1e-12, -5.0] {
        let mut p = AutoPlacement::new(0, 1, opts(2, 2));
        for _ in 0..6 {
            p.observe(rate);
        }
        assert!(p.local() + p.remote() >= 1);
        assert_eq!(
            trace(&p),
            [
                "scale_remote 0+2 $0.1067: first window: 0.0/s; trying one more actor",
                "increase_local 0+1 $0.0534: +1 actor gained +0.0% (<= 3%): removed again",
                "stable 0+1 $0.0534: 0.0/s; no cheaper placement keeps the rate: stable at \
                 0 local + 1 actors",
            ]
        );
        assert_eq!(p.decisions()[0].rate, 1e-9);
    }
}

#[test]
fn observe_returns_the_decision_it_records() {
    let mut p = AutoPlacement::new(0, 1, opts(2, 3));
    let d = p.observe(100.0).cloned().unwrap();
    assert_eq!(&d, p.decisions().last().unwrap());
    assert_eq!(
        (d.local, d.remote, d.local_workers, d.remote_actors),
        (0, 1, 0, 2)
    );
    assert_eq!(p.state().to_string(), "scale_remote");
}

#[test]
fn prices_decide_the_cheap_side_and_the_cost() {
    let p = AutoPlacement::new(1, 2, PlacementOptions::default());
    assert_eq!(p.cheap(), Side::Local);
    assert_eq!(p.cost_per_hour(0, 8), 0.427);
    let o = PlacementOptions {
        local_cpu_price: 0.1,
        remote_cpu_price: 0.03,
        actor_cpus: 4.0,
        ..Default::default()
    };
    let p = AutoPlacement::new(1, 2, o);
    assert_eq!(p.cheap(), Side::Local); // 0.1 <= 0.03 × 4
    assert!((p.cost_per_hour(1, 2) - 0.34).abs() < 1e-12);
    let p = AutoPlacement::new(
        1,
        2,
        PlacementOptions {
            actor_cpus: 1.0,
            ..o
        },
    );
    assert_eq!(p.cheap(), Side::Remote);
}
