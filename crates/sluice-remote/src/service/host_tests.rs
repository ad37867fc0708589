use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::Duration;

use super::*;

type Host = ServiceHost<&'static str, u64>;

fn host(slots: usize) -> Arc<Host> {
    Arc::new(
        ServiceHost::new(HostOptions {
            slots,
            // Far above any measured time: every chunk of one item costs the same, so the
            // order is the queue's alone, whatever this machine's speed.
            min_item_cost_s: 1.0,
            ..HostOptions::default()
        })
        .unwrap(),
    )
}

/// Waits until `n` chunks are queued (threads blocked in `run`).
fn until_queued(host: &Host, n: usize) {
    for _ in 0..2000 {
        if host.report().queued >= n {
            return;
        }
        thread::sleep(Duration::from_millis(2));
    }
    panic!("{} queued, wanted {n}", host.report().queued);
}

#[test]
fn bad_options_are_errors() {
    let zero = HostOptions {
        slots: 0,
        ..HostOptions::default()
    };
    assert!(Host::new(zero).is_err());
    let nan = HostOptions {
        min_item_cost_s: f64::NAN,
        ..HostOptions::default()
    };
    assert!(Host::new(nan).is_err());
    let h = host(1);
    let err = h.attach(1, 0.0, "k", || Ok("s")).unwrap_err().to_string();
    assert!(err.contains("weight"), "{err}");
}

#[test]
fn a_job_runs_only_stages_it_attached() {
    let h = host(1);
    h.attach(1, 1.0, "k", || Ok("s")).unwrap();
    let err = h.run(2, "k", 1, b"f", |_, _, _| Ok((0, 8))).unwrap_err();
    assert!(err.to_string().contains("attach it again"), "{err}");
    assert!(h.run(1, "other", 1, b"f", |_, _, _| Ok((0, 8))).is_err());
    assert_eq!(*h.run(1, "k", 1, b"f", |_, _, _| Ok((5, 8))).unwrap(), 5);
}

#[test]
fn one_engine_per_stage_key_and_it_goes_with_its_last_job() {
    let h = host(1);
    let built = AtomicUsize::new(0);
    let build = || {
        built.fetch_add(1, SeqCst);
        Ok("s")
    };
    h.attach(1, 1.0, "k", build).unwrap();
    h.attach(2, 1.0, "k", build).unwrap();
    h.attach(2, 1.0, "other", build).unwrap();
    assert_eq!(built.load(SeqCst), 2);
    assert_eq!(h.report().stages, 2);
    assert!(h.detach(1, "k"));
    assert!(!h.detach(1, "k"));
    assert_eq!(h.report().stages, 2);
    assert!(h.detach(2, "k"));
    assert_eq!(h.report().stages, 1);
    // A failed build attaches nothing.
    assert!(h
        .attach(3, 1.0, "bad", || Err(Error::invalid("no")))
        .is_err());
    assert!(h.run(3, "bad", 1, b"f", |_, _, _| Ok((0, 8))).is_err());
}

/// Slot 1 is held by a gate chunk while each job queues six chunks; once it opens, the
/// chunks run in the order the weights give: 2:1.
#[test]
fn backlogged_jobs_share_the_slots_by_weight() {
    let h = host(1);
    h.attach(0, 1.0, "gate", || Ok("gate")).unwrap();
    h.attach(1, 2.0, "a", || Ok("a")).unwrap();
    h.attach(2, 1.0, "b", || Ok("b")).unwrap();
    let gate = Arc::new(Barrier::new(2));
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    {
        let (h, gate) = (h.clone(), gate.clone());
        threads.push(thread::spawn(move || {
            h.run(0, "gate", 1, b"g", |_, _, _| {
                gate.wait();
                Ok((0, 8))
            })
            .unwrap();
        }));
    }
    until_queued(&h, 0);
    while h.report().running == 0 {
        thread::sleep(Duration::from_millis(1));
    }
    for i in 0..6u8 {
        for (job, key) in [(1, "a"), (2, "b")] {
            let (h, order) = (h.clone(), order.clone());
            threads.push(thread::spawn(move || {
                h.run(job, key, 1, &[i], |stage, _, _| {
                    order.lock().unwrap().push(*stage);
                    Ok((0, 8))
                })
                .unwrap();
            }));
        }
    }
    until_queued(&h, 12);
    gate.wait();
    for t in threads {
        t.join().unwrap();
    }
    let order = order.lock().unwrap();
    let first6 = &order[..6];
    assert_eq!(first6.iter().filter(|s| **s == "a").count(), 4, "{order:?}");
    let report = h.report();
    assert_eq!(report.jobs[&1].chunks, 6);
    assert_eq!(report.jobs[&2].samples, 6);
    assert!(report.jobs[&1].queue_wait_s > 0.0);
    assert_eq!((report.running, report.queued), (0, 0));
}

#[test]
fn slots_bound_the_chunks_computed_at_once() {
    let h = host(2);
    h.attach(1, 1.0, "k", || Ok("s")).unwrap();
    let now = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..8u8)
        .map(|i| {
            let (h, now, most) = (h.clone(), now.clone(), most.clone());
            thread::spawn(move || {
                h.run(1, "k", 1, &[i], |_, _, _| {
                    let n = now.fetch_add(1, SeqCst) + 1;
                    most.fetch_max(n, SeqCst);
                    thread::sleep(Duration::from_millis(5));
                    now.fetch_sub(1, SeqCst);
                    Ok((0, 8))
                })
                .unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(most.load(SeqCst) <= 2);
    assert_eq!(h.report().jobs[&1].chunks, 8);
}

#[test]
fn forgetting_a_job_answers_its_queued_chunks_with_an_error() {
    let h = host(1);
    h.attach(0, 1.0, "gate", || Ok("gate")).unwrap();
    h.attach(1, 1.0, "k", || Ok("s")).unwrap();
    let gate = Arc::new(Barrier::new(2));
    let blocker = {
        let (h, gate) = (h.clone(), gate.clone());
        thread::spawn(move || {
            h.run(0, "gate", 1, b"g", |_, _, _| {
                gate.wait();
                Ok((0, 8))
            })
        })
    };
    while h.report().running == 0 {
        thread::sleep(Duration::from_millis(1));
    }
    let waiting: Vec<_> = (0..3u8)
        .map(|i| {
            let h = h.clone();
            thread::spawn(move || h.run(1, "k", 1, &[i], |_, _, _| Ok((1, 8))))
        })
        .collect();
    until_queued(&h, 3);
    assert_eq!(h.forget(1), 3);
    for t in waiting {
        let err = t.join().unwrap().unwrap_err().to_string();
        assert!(err.contains("left the service"), "{err}");
    }
    gate.wait();
    assert_eq!(*blocker.join().unwrap().unwrap(), 0);
    let report = h.report();
    assert!(!report.jobs.contains_key(&1));
    assert_eq!(report.stages, 1);
}

#[test]
fn a_sweep_computes_each_chunk_once() {
    let h = host(1);
    for job in 1..=3 {
        h.attach(job, 1.0, "k", || Ok("s")).unwrap();
    }
    let computed = AtomicUsize::new(0);
    for frame in [b"c0", b"c1"] {
        for job in 1..=3 {
            let out = h
                .run(job, "k", 4, frame, |_, f, _| {
                    computed.fetch_add(1, SeqCst);
                    Ok((f[1] as u64, 8))
                })
                .unwrap();
            assert_eq!(*out, frame[1] as u64);
        }
    }
    assert_eq!(computed.load(SeqCst), 2);
    let report = h.report();
    assert_eq!(report.stream.computed, 2);
    assert_eq!(report.stream.hits, 4);
    assert_eq!(report.jobs[&2].stream_hits, 2);
    assert_eq!(report.jobs[&1].stream_hits, 0);
    assert_eq!(report.jobs[&3].samples, 8);
    // Every job read both chunks: nothing left in the window.
    assert_eq!(h.report().stream.evicted, 0);
}

#[test]
fn a_job_left_alone_still_reads_what_the_leader_computed_for_it() {
    // Job 1 runs ahead through the epoch and leaves; job 2, behind, is then the stage's only
    // job, and the chunks job 1 computed while both were attached are still its to read.
    let h = host(1);
    h.attach(1, 1.0, "k", || Ok("s")).unwrap();
    h.attach(2, 1.0, "k", || Ok("s")).unwrap();
    let computed = AtomicUsize::new(0);
    let run = |job, frame: &[u8; 2]| {
        h.run(job, "k", 1, frame, |_, f, _| {
            computed.fetch_add(1, SeqCst);
            Ok((f[1] as u64, 8))
        })
        .unwrap()
    };
    for frame in [b"c0", b"c1", b"c2"] {
        run(1, frame);
    }
    assert_eq!(*run(2, b"c0"), b'0' as u64);
    assert!(h.detach(1, "k"));
    for frame in [b"c1", b"c2"] {
        assert_eq!(*run(2, frame), frame[1] as u64);
    }
    assert_eq!(computed.load(SeqCst), 3, "job 2 computed nothing");
    assert_eq!(h.report().jobs[&2].stream_hits, 3);
    // Alone, it keeps nothing of its own.
    run(2, b"c3");
    run(2, b"c3");
    assert_eq!(computed.load(SeqCst), 5);
}

#[test]
fn a_failed_chunk_frees_its_slot() {
    let h = host(1);
    h.attach(1, 1.0, "k", || Ok("s")).unwrap();
    let err = h.run(1, "k", 1, b"f", |_, _, _| Err(Error::invalid("boom")));
    assert!(err.is_err());
    assert_eq!(*h.run(1, "k", 1, b"f", |_, _, _| Ok((3, 8))).unwrap(), 3);
    assert_eq!(h.report().running, 0);
}
