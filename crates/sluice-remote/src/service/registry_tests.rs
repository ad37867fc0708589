use super::*;

fn info(key: &str, weight: f64) -> JobInfo {
    let (label, stage_keys) = (format!("job-{key}"), vec![key.into()]);
    JobInfo {
        label,
        weight,
        stage_keys,
    }
}

/// Workers `w0..wn`, each having reported zero busy at t=0, and the first window begun.
fn pool(min: usize, max: usize, n: usize) -> Registry {
    let mut o = RegistryOptions::default();
    (o.min_workers, o.max_workers) = (min, max);
    let mut r = Registry::new(o).unwrap();
    for i in 0..n {
        r.add_worker(0.0, &format!("w{i}"), "node");
        r.worker_beat(0.0, &format!("w{i}"), WorkerBeat::default());
    }
    r.scale(0.0, 0);
    r
}

/// Worker `wi` reports `busy_s` in all at `now`.
fn busy(r: &mut Registry, now: f64, i: usize, busy_s: f64) {
    let b = WorkerBeat {
        busy_s,
        ..Default::default()
    };
    r.worker_beat(now, &format!("w{i}"), b);
}

fn beat(r: &mut Registry, now: f64, job: JobId, samples: u64, backlogged: bool) {
    let b = JobBeat {
        samples,
        backlogged,
    };
    r.heartbeat(now, job, b).unwrap();
}

#[test]
fn jobs_live_while_they_beat_and_ids_are_never_reused() {
    let mut r = pool(1, 8, 0);
    let a = r.register(0.0, info("k", 1.0)).unwrap();
    let b = r.register(0.0, info("k", 1.0)).unwrap();
    assert_eq!((a, b), (1, 2));
    beat(&mut r, 4.0, a, 0, false);
    assert!(r.expire(5.0).is_empty(), "lease_s old: alive");
    assert_eq!(r.expire(5.01), [b]);
    let e = r.heartbeat(6.0, b, JobBeat::default()).unwrap_err();
    assert!(e.to_string().contains("unknown job 2"), "{e}");
    assert!(r.lease(b, &[]).is_err());
    assert_eq!((r.expire(9.0).len(), r.expire(9.5)), (0, vec![a]));
    assert_eq!(r.register(10.0, info("k", 1.0)).unwrap(), 3);
    assert!(r.unregister(3) && !r.unregister(3));
    assert!(r.heartbeat(10.0, 3, JobBeat::default()).is_err());
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let e = r.register(0.0, info("k", bad)).unwrap_err();
        assert!(e.to_string().contains("weight"), "{e}");
    }
    assert_eq!(r.register(0.0, info("k", 0.5)).unwrap(), 4);
}

#[test]
fn options_are_checked() {
    let bad: [fn(&mut RegistryOptions); 8] = [
        |o| o.max_workers = 0,
        |o| o.min_workers = 9,
        |o| o.worker_cpus = 0.0,
        |o| o.lease_s = f64::NAN,
        |o| o.window_s = -2.0,
        |o| o.target_util = 0.0,
        |o| o.target_util = 1.5,
        |o| o.idle_windows = 0,
    ];
    for f in bad {
        let mut o = RegistryOptions::default();
        f(&mut o);
        assert!(Registry::new(o.clone()).is_err(), "{o:?}");
    }
    assert!(RegistryOptions::default().validate().is_ok());
}

#[test]
fn leases_spread_over_workers_and_honour_avoid() {
    let mut r = pool(1, 8, 0);
    let j = r.register(0.0, info("k", 1.0)).unwrap();
    assert_eq!(r.lease(j, &[]).unwrap(), None);
    for i in 0..3 {
        r.add_worker(0.0, &format!("w{i}"), "node");
    }
    let lease = |r: &mut Registry, avoid: &[&str]| {
        let avoid: Vec<String> = avoid.iter().map(|s| s.to_string()).collect();
        r.lease(j, &avoid).unwrap().unwrap()
    };
    let got: Vec<String> = (0..3).map(|_| lease(&mut r, &[])).collect();
    assert_eq!(got, ["w0", "w1", "w2"]);
    assert_eq!(lease(&mut r, &["w0", "w1"]), "w2");
    // All avoided: the least leased of all.
    assert_eq!(lease(&mut r, &["w0", "w1", "w2"]), "w0");
    for _ in 0..3 {
        r.release(j, "w2"); // the third holds none: harmless
    }
    assert_eq!(lease(&mut r, &[]), "w2");
    assert!(r.remove_worker("w0") && !r.remove_worker("w0"));
    // w0's two leases went with it.
    assert_eq!(r.status(0.0)["totals"]["leases"], 2);
    let ids = |st: serde_json::Value| {
        st["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["id"].clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(ids(r.status(0.0)), ["w1", "w2"]);
}

#[test]
fn scaling_up_jumps_to_what_the_load_needs() {
    assert_eq!(pool(2, 8, 0).scale(1.0, 0), Scale::Start(2), "below min");
    let mut r = pool(0, 8, 0);
    r.register(0.0, info("k", 1.0)).unwrap();
    assert_eq!(r.scale(2.0, 0), Scale::Start(1), "a job, no worker");
    let mut r = pool(1, 8, 1);
    let j = r.register(0.0, info("k", 1.0)).unwrap();
    beat(&mut r, 2.0, j, 0, true);
    busy(&mut r, 2.0, 0, 2.0); // 100% busy: B = 1.0
    assert_eq!(r.scale(2.0, 0), Scale::Start(2)); // ceil(1 / 0.8) + 1 = 3
    let d = r.status(2.0)["decisions"][0].to_string();
    assert!(d.contains("t=2.0 start 2: util 1.00, 1 backlogged job, need 3"));
    beat(&mut r, 4.0, j, 0, false);
    busy(&mut r, 4.0, 0, 4.0);
    assert_eq!(r.scale(4.0, 0), Scale::Hold, "busy, not backlogged");
    beat(&mut r, 6.0, j, 0, true);
    busy(&mut r, 6.0, 0, 4.5);
    assert_eq!(r.scale(6.0, 0), Scale::Hold, "backlogged, workers idle");
    let mut r = pool(1, 4, 3);
    let j = r.register(0.0, info("k", 1.0)).unwrap();
    beat(&mut r, 2.0, j, 0, true);
    (0..3).for_each(|i| busy(&mut r, 2.0, i, 2.0));
    assert_eq!(r.scale(2.0, 0), Scale::Start(1), "needs 5, max 4");
    r.add_worker(2.0, "w3", "node");
    (0..4).for_each(|i| busy(&mut r, 4.0, i, 4.0));
    assert_eq!(r.scale(4.0, 0), Scale::Hold, "at max_workers");
}

/// Workers asked for but not joined yet count toward the minimum, and no other decision
/// is made while they start (their load is not measured yet).
#[test]
fn workers_still_starting_are_not_asked_for_twice() {
    let mut r = pool(2, 8, 0);
    assert_eq!(r.scale(1.0, 2), Scale::Hold, "both asked for already");
    assert_eq!(r.scale(2.0, 1), Scale::Start(1), "one of two asked for");
    let mut busy_pool = pool(1, 8, 1);
    let j = busy_pool.register(0.0, info("k", 1.0)).unwrap();
    beat(&mut busy_pool, 2.0, j, 10, true);
    busy(&mut busy_pool, 2.0, 0, 2.0);
    assert_eq!(
        busy_pool.scale(2.0, 1),
        Scale::Hold,
        "one more is on its way"
    );
}

/// A job that never says it is backlogged still counts as such when its chunks keep
/// waiting in the workers' queues: the pool grows for it.
#[test]
fn chunks_waiting_at_the_workers_count_as_a_backlog() {
    let mut r = pool(1, 8, 1);
    let j = r.register(0.0, info("k", 1.0)).unwrap();
    beat(&mut r, 0.0, j, 0, false);
    let load = |busy_s: f64, queue_wait_s: f64| WorkerBeat {
        busy_s,
        queued: 2,
        jobs: BTreeMap::from([(
            j,
            JobLoad {
                chunks: 10,
                samples: 100,
                busy_s,
                queue_wait_s,
                stream_hits: 3,
            },
        )]),
        node_cache: None,
    };
    // Two chunks waiting on average (4 s of waits over a 2 s window), the worker busy.
    r.worker_beat(2.0, "w0", load(2.0, 4.0));
    beat(&mut r, 2.0, j, 100, false);
    assert_eq!(r.scale(2.0, 0), Scale::Start(2));
    let st = r.status(2.0);
    assert_eq!(st["jobs"][0]["waiting"], 2.0);
    assert_eq!(st["jobs"][0]["stream_hits"], 3);
    assert_eq!(st["jobs"][0]["backlogged"], true);
    // Waits that stop: no longer backlogged.
    r.add_worker(2.0, "w1", "node");
    r.remove_worker("w1");
    r.worker_beat(4.0, "w0", load(3.0, 4.1));
    assert_eq!(r.scale(4.0, 0), Scale::Hold);
    assert_eq!(r.status(4.0)["jobs"][0]["backlogged"], false);
}

#[test]
fn low_demand_retires_the_least_busy_worker_after_idle_windows() {
    let mut r = pool(1, 8, 3);
    let j = r.register(0.0, info("k", 1.0)).unwrap();
    let mut t = 0.0;
    // One window at these busy rates (workers removed report nothing).
    let mut window = |r: &mut Registry, rates: [f64; 3]| {
        t += 2.0;
        beat(r, t, j, 0, false);
        for (i, rate) in rates.into_iter().enumerate() {
            let id = format!("w{i}");
            if let Some(w) = r.workers.iter().find(|w| w.id == id) {
                busy(r, t, i, w.beat.busy_s + rate * 2.0);
            }
        }
        r.scale(t, 0)
    };
    let retire = |id: &str| Scale::Retire(vec![id.into()]);
    // u = 0.5 < 0.8 · 2/3: low, but for one window only yet.
    assert_eq!(window(&mut r, [0.5, 0.4, 0.6]), Scale::Hold);
    assert_eq!(window(&mut r, [0.5, 0.4, 0.6]), retire("w1"));
    r.remove_worker("w1");
    // u = 0.25 < 0.8 · 1/2, and the count starts over.
    assert_eq!(window(&mut r, [0.3, 0.0, 0.2]), Scale::Hold);
    assert_eq!(window(&mut r, [0.3, 0.0, 0.2]), retire("w2"));
    r.remove_worker("w2");
    for _ in 0..4 {
        assert_eq!(window(&mut r, [0.0; 3]), Scale::Hold, "min");
    }
}

#[test]
fn with_no_jobs_the_pool_shrinks_to_min_at_once() {
    let mut r = pool(1, 8, 4);
    busy(&mut r, 2.0, 2, 1.0);
    assert_eq!(r.scale(2.0, 0), Scale::Hold);
    busy(&mut r, 4.0, 2, 2.0);
    // Ties at zero: the most recently added go first; the busy w2 stays.
    let retired = ["w3", "w1", "w0"].map(String::from).to_vec();
    assert_eq!(r.scale(4.0, 0), Scale::Retire(retired.clone()));
    retired.iter().for_each(|id| assert!(r.remove_worker(id)));
    for t in [6.0, 8.0, 10.0] {
        assert_eq!(r.scale(t, 0), Scale::Hold);
    }
}

#[test]
fn status_reports_each_jobs_share_of_the_workers() {
    let mut r = pool(1, 8, 2);
    let a = r.register(0.0, info("k", 1.0)).unwrap();
    let b = r.register(0.0, info("k", 2.0)).unwrap();
    beat(&mut r, 0.0, a, 0, false);
    beat(&mut r, 2.0, a, 400, false);
    r.lease(a, &[]).unwrap();
    for w in ["w0", "w1"] {
        let mut beat = WorkerBeat::default();
        for (job, busy_s) in [(a, 1.0), (b, 0.5)] {
            let mut load = JobLoad::default();
            (load.busy_s, load.queue_wait_s) = (busy_s, 0.5);
            beat.jobs.insert(job, load);
            beat.busy_s += busy_s;
        }
        r.worker_beat(2.0, w, beat);
    }
    r.scale(2.0, 0);
    let s = r.status(3.0);
    for key in ["jobs", "workers", "totals", "decisions", "options"] {
        assert!(!s[key].is_null(), "{key} missing: {s}");
    }
    let job = |i: usize, k: &str| s["jobs"][i][k].as_f64().unwrap();
    assert!((job(0, "share") - 2.0 / 3.0).abs() < 1e-9, "{s}");
    assert!((job(1, "share") - 1.0 / 3.0).abs() < 1e-9, "{s}");
    let busy = [job(0, "busy_s"), job(1, "queue_wait_s")];
    assert_eq!((job(0, "rate"), busy), (200.0, [2.0, 1.0]));
    let other = [job(0, "leases"), job(0, "last_beat_s")];
    assert_eq!((other, job(1, "weight")), ([1.0, 1.0], 2.0));
    assert_eq!(s["workers"][0]["utilization"], 0.75);
    assert_eq!(s["totals"]["utilization"], 0.75);
}

#[test]
fn status_shows_each_workers_node_tier() {
    let mut r = pool(1, 2, 2);
    let tier = serde_json::json!({"hits": 3, "misses": 1, "stored": 4});
    let b = WorkerBeat {
        node_cache: Some(tier.clone()),
        ..Default::default()
    };
    r.worker_beat(1.0, "w1", b);
    let st = r.status(1.0);
    let tiers: Vec<_> = (st["workers"].as_array().unwrap().iter())
        .map(|w| w["node_cache"].clone())
        .collect();
    assert_eq!(tiers, vec![serde_json::Value::Null, tier]);
}
