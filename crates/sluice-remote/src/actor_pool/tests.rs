//! The pool's scheduling on an in-process runtime: "actors" answer from a [`StageRunner`]
//! in the calling thread; the tests decide which start, die or hold their replies, and drive
//! the clock. No assertion depends on how long anything took.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use sluice_core::exec::{Backends, Chunk, StageWork, Workers};
use sluice_core::stats::StageInfo;
use sluice_core::*;
use sluice_ops::OpSpec;

use super::*;
use crate::stage::StageRunner;

/// How a started fake actor behaves until it is ready.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Start {
    Ready,
    /// Never ready (the cluster cannot place it).
    Never,
    /// Dies while starting.
    Die,
}

#[derive(Default)]
struct FakeState {
    /// Per actor: how it starts, and whether it is dead.
    actors: Vec<(Start, bool)>,
    /// How the next actors start (then `Ready`).
    starts: VecDeque<Start>,
    /// Replies are not delivered while true.
    hold: bool,
    /// The next this many submissions find their actor dead (it dies).
    doomed: usize,
    gone: bool,
    /// Starting an actor is refused with this message (the runtime's own error).
    refuse: Option<String>,
    /// Actors name their workers (`w<index>`), as a shared service's do.
    named: bool,
    /// Actor of each submission, in order.
    submitted: Vec<usize>,
    killed: Vec<usize>,
}

#[derive(Default)]
struct Fake {
    runner: OnceLock<StageRunner>,
    st: Mutex<FakeState>,
    cv: Condvar,
    logs: Mutex<Vec<String>>,
}

impl Fake {
    fn with<T>(&self, f: impl FnOnce(&mut FakeState) -> T) -> T {
        let out = f(&mut self.st.lock().unwrap());
        self.cv.notify_all();
        out
    }
}

struct FakeRt(Arc<Fake>);

struct FakePending {
    actor: usize,
    /// `None`: the readiness call.
    frame: Option<Vec<u8>>,
}

fn died() -> Failure {
    Failure {
        retryable: true,
        cause: "ActorDiedError".into(),
        message: "the actor died".into(),
        error: Error::Resource("the actor died".into()),
    }
}

impl ActorRuntime for FakeRt {
    type Handle = usize;
    type Pending = FakePending;
    type Reply = Vec<u8>;

    fn start(&self, init: &str) -> Result<(usize, FakePending)> {
        if let Some(why) = self.0.with(|st| st.refuse.clone()) {
            return Err(Error::Resource(why));
        }
        self.0
            .runner
            .get_or_init(|| StageRunner::new(init, &|_| Ok(None), None).unwrap());
        let id = self.0.with(|st| {
            let start = st.starts.pop_front().unwrap_or(Start::Ready);
            st.actors.push((start, false));
            st.actors.len() - 1
        });
        Ok((
            id,
            FakePending {
                actor: id,
                frame: None,
            },
        ))
    }
    fn submit(&self, actor: &usize, frame: &[u8]) -> Result<FakePending> {
        self.0.with(|st| {
            st.submitted.push(*actor);
            if st.doomed > 0 {
                st.doomed -= 1;
                st.actors[*actor].1 = true;
            }
        });
        Ok(FakePending {
            actor: *actor,
            frame: Some(frame.to_vec()),
        })
    }
    fn wait(&self, p: &mut FakePending, timeout: Duration) -> Result<Wait<Vec<u8>>> {
        let deadline = Instant::now() + timeout;
        let mut st = self.0.st.lock().unwrap();
        loop {
            let (start, dead) = st.actors[p.actor];
            match (&p.frame, start) {
                _ if dead => return Ok(Wait::Failed(died())),
                (None, Start::Ready) => return Ok(Wait::Ready(Vec::new())),
                (None, Start::Die) => return Ok(Wait::Failed(died())),
                (Some(frame), _) if !st.hold => {
                    return Ok(Wait::Ready(self.0.runner.get().unwrap().run(frame)))
                }
                _ => {}
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Wait::Pending);
            }
            st = self.0.cv.wait_timeout(st, deadline - now).unwrap().0;
        }
    }
    fn affinity(&self, actor: &usize) -> Option<String> {
        self.0.with(|st| st.named.then(|| format!("w{actor}")))
    }
    fn kill(&self, actor: &usize) {
        self.0.with(|st| {
            st.actors[*actor].1 = true;
            st.killed.push(*actor);
        });
    }
    fn alive(&self) -> bool {
        !self.0.st.lock().unwrap().gone
    }
    fn free_cpus(&self) -> Option<f64> {
        Some(1.5)
    }
    fn reply_bytes(&self, reply: &Vec<u8>) -> usize {
        reply.len()
    }
    fn decode(&self, stage: &RemoteStage, reply: Vec<u8>) -> Result<Chunk> {
        stage.reply(&reply, None)
    }
    fn log(&self, _level: Level, message: &str) {
        self.0.logs.lock().unwrap().push(message.to_string());
    }
}

/// Time the tests move: `tick` more at every reading, plus what they add.
#[derive(Default)]
struct TestClock {
    nanos: AtomicU64,
    tick: u64,
}

impl TestClock {
    fn advance(&self, d: Duration) {
        self.nanos.fetch_add(d.as_nanos() as u64, SeqCst);
    }
}

impl Clock for TestClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos.fetch_add(self.tick, SeqCst))
    }
    fn stamp(&self) -> String {
        "00:00:00".into()
    }
}

fn items(range: std::ops::Range<u64>) -> Chunk {
    range
        .map(|i| Item {
            index: i,
            source_index: i,
            rows: 1,
            cursor: Cursor {
                epoch: 0,
                pos: i,
                ord: 0,
            },
            ..Default::default()
        })
        .collect()
}

fn work() -> StageWork {
    let info = StageInfo {
        name: "s".into(),
        threads: 1,
        inline: false,
        queue_capacity: 1,
        pool: None,
    };
    StageWork {
        read: Some(Arc::new(RangeSource::new(100))),
        ops: vec![ChainOp {
            op: OpSpec::Noop.build().unwrap(),
            mode: ElemMode::Map,
            on_error: OnError::Raise,
            op_id: 0,
        }],
        seed: 5,
        skip: Default::default(),
        slot: 0,
        stats: Arc::new(PipelineStats::new(vec![info])),
    }
}

fn options(clock: &Arc<TestClock>) -> ActorPoolOptions {
    ActorPoolOptions {
        actor_start_timeout: Duration::from_secs(5),
        wait_step: Duration::from_millis(10),
        idle_step: Duration::from_millis(10),
        clock: clock.clone(),
        ..Default::default()
    }
}

struct Setup {
    fake: Arc<Fake>,
    workers: ActorWorkers<FakeRt>,
}

fn start(actors: usize, opts: ActorPoolOptions, starts: &[Start]) -> Result<Setup> {
    let fake = Arc::new(Fake::default());
    fake.with(|st| st.starts.extend(starts));
    let work = work();
    let stage = RemoteStage::new(&work, None)?;
    let pool = ActorPool::start(
        FakeRt(fake.clone()),
        stage.init(),
        stage.label(),
        actors,
        opts,
    )?;
    Ok(Setup {
        fake,
        workers: ActorWorkers::new(pool, stage, work),
    })
}

fn samples(chunk: &Chunk) -> Vec<&Sample> {
    chunk.iter().map(|it| &it.sample).collect()
}

fn expected(range: std::ops::Range<u64>) -> Chunk {
    work().run_here(items(range)).unwrap()
}

#[test]
fn the_least_loaded_slot_takes_the_chunk_local_first_on_ties() {
    let clock = Arc::new(TestClock::default());
    let opts = ActorPoolOptions {
        local_workers: 1,
        ..options(&clock)
    };
    let s = start(2, opts, &[]).unwrap();
    let shared = &s.workers.pool().shared;
    let taken: Vec<Option<usize>> = (0..5)
        .map(|_| shared.acquire(None).unwrap().actor)
        .collect();
    // local 0/1 = actors 0/2: local first; then the actors alternate as they fill up.
    assert_eq!(taken, [None, Some(0), Some(1), Some(0), Some(1)]);
    assert_eq!(s.workers.parallelism(), 1 + 2 * 2);
    let report = s.workers.pool().report();
    let names: Vec<&str> = report.slots.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["actor-1", "actor-2", "local-1"]);
    assert!(report.events[0].ends_with("start: 2 actors x 2 in flight, 1 local workers"));
}

#[test]
fn chunks_on_local_workers_and_actors_give_the_same_output() {
    let clock = Arc::new(TestClock::default());
    let opts = ActorPoolOptions {
        local_workers: 1,
        ..options(&clock)
    };
    let s = start(1, opts, &[]).unwrap();
    let shared = &s.workers.pool().shared;
    let local = shared.acquire(None).unwrap(); // the next chunk goes to the actor
    assert!(local.actor.is_none());
    let on_actor = s.workers.run(items(0..10)).unwrap();
    shared.release(&local, None);
    let here = s.workers.run(items(0..10)).unwrap();
    assert_eq!(samples(&on_actor), samples(&expected(0..10)));
    assert_eq!(samples(&here), samples(&on_actor));
    let report = s.workers.pool().report();
    let chunks: Vec<(bool, u64)> = report.slots.iter().map(|s| (s.local, s.chunks)).collect();
    assert_eq!(chunks, [(false, 1), (true, 1)]);
    assert!(report.slots[0].sent_bytes > 0 && report.slots[0].received_bytes > 0);
    assert_eq!(
        (report.slots[1].sent_bytes, report.chunks, report.samples),
        (0, 2, 20)
    );
}

#[test]
fn a_chunk_whose_actor_died_runs_again_on_another_and_the_actor_is_replaced() {
    let clock = Arc::new(TestClock::default());
    let s = start(2, options(&clock), &[]).unwrap();
    s.fake.with(|st| st.doomed = 1);
    let out = s.workers.run(items(5..15)).unwrap();
    assert_eq!(samples(&out), samples(&expected(5..15)));
    assert_eq!(s.fake.with(|st| st.submitted.clone()), [0, 1]);
    let report = s.workers.pool().report();
    assert_eq!(report.retries, 1);
    assert_eq!(report.retry_causes.get("ActorDiedError"), Some(&1));
    assert!(
        report
            .events
            .iter()
            .any(|e| e.ends_with("actor-1 lost (ActorDiedError); replaced by actor-3")),
        "{:?}",
        report.events
    );
    assert_eq!(s.workers.pool().actor_handles(), [1, 2]);
    let logs = s.fake.logs.lock().unwrap().clone();
    assert!(
        logs.iter()
            .any(|l| l.contains("re-running it (attempt 2 of 4)")),
        "{logs:?}"
    );
}

/// The runtime refuses to start replacements (a shared service that restarted and may not
/// be rejoined): every chunk fails with the runtime's reason, not with "no worker left".
#[test]
fn when_no_replacement_can_be_started_every_chunk_gets_the_runtimes_reason() {
    let clock = Arc::new(TestClock::default());
    let s = start(2, options(&clock), &[]).unwrap();
    s.fake.with(|st| {
        st.actors.iter_mut().for_each(|a| a.1 = true);
        st.refuse = Some("service restarted; resume from your checkpoint".into());
    });
    for range in [0..4, 4..8, 8..12] {
        let err = s.workers.run(items(range)).unwrap_err().to_string();
        assert!(err.contains("service restarted"), "{err}");
    }
}

/// Two jobs of a sweep on the same named workers send each chunk to the same worker, and
/// spread their chunks over all of them.
#[test]
fn named_workers_take_the_chunks_their_names_rank_first_for() {
    let clock = Arc::new(TestClock::default());
    let job = || {
        let fake = Arc::new(Fake::default());
        fake.with(|st| st.named = true);
        let work = work();
        let stage = RemoteStage::new(&work, None).unwrap();
        let pool = ActorPool::start(
            FakeRt(fake.clone()),
            stage.init(),
            stage.label(),
            3,
            options(&clock),
        )
        .unwrap();
        let workers = ActorWorkers::new(pool, stage, work);
        for c in 0..12 {
            workers.run(items(c * 4..c * 4 + 4)).unwrap();
        }
        fake.with(|st| st.submitted.clone())
    };
    let (a, b) = (job(), job());
    assert_eq!(a, b);
    let used: std::collections::BTreeSet<usize> = a.iter().copied().collect();
    assert_eq!(used.len(), 3, "{a:?}");
}

#[test]
fn a_chunk_that_fails_on_more_actors_than_retries_fails_the_run() {
    let clock = Arc::new(TestClock::default());
    let opts = ActorPoolOptions {
        max_retries: 2,
        ..options(&clock)
    };
    let s = start(2, opts, &[]).unwrap();
    s.fake.with(|st| st.doomed = 100);
    let err = s.workers.run(items(0..4)).unwrap_err().to_string();
    assert!(
        err.contains("a chunk failed on 3 actors in a row (last: ActorDiedError: the actor died)"),
        "{err}"
    );
    assert_eq!(s.workers.pool().report().retries, 3);
}

#[test]
fn losing_every_worker_fails_naming_the_last_event() {
    let clock = Arc::new(TestClock::default());
    let opts = ActorPoolOptions {
        max_retries: 1,
        ..options(&clock)
    };
    // The replacements die while starting: one is replaced (the bound), the next dropped.
    let s = start(1, opts, &[Start::Ready, Start::Die, Start::Die]).unwrap();
    s.fake.with(|st| st.doomed = 1);
    let err = s.workers.run(items(0..4)).unwrap_err().to_string();
    assert!(err.contains("stage read+noop: no worker left"), "{err}");
    assert!(
        err.contains("actor-3 could not start (ActorDiedError); dropped"),
        "{err}"
    );
    let events = s.workers.pool().report().events;
    assert!(
        events
            .iter()
            .any(|e| e.ends_with("actor-2 could not start (ActorDiedError); replaced by actor-3")),
        "{events:?}"
    );
}

#[test]
fn actors_that_do_not_start_in_time_fail_the_stage_clearly() {
    // Every reading of the clock moves it a second: the 5 s pass after a few waits.
    let clock = Arc::new(TestClock {
        tick: 1_000_000_000,
        ..Default::default()
    });
    let err = start(2, options(&clock), &[Start::Ready, Start::Never])
        .err()
        .expect("the start fails")
        .to_string();
    assert!(
        err.contains("only 1 of 2 Ray actors started within 5 s (each asks for 1.0 CPU; the cluster has 1.5 CPU free)"),
        "{err}"
    );
}

#[test]
fn an_actor_that_does_not_start_later_is_dropped_and_another_serves() {
    let clock = Arc::new(TestClock::default());
    let s = start(1, options(&clock), &[]).unwrap();
    let shared = &s.workers.pool().shared;
    // AutoPlacement's move, by hand: one more actor, which never starts.
    s.fake.with(|st| st.starts.push_back(Start::Never));
    shared.change(0, 1).unwrap();
    clock.advance(Duration::from_secs(6));
    let out = s.workers.run(items(0..3)).unwrap();
    assert_eq!(samples(&out), samples(&expected(0..3)));
    let events = s.workers.pool().report().events;
    assert!(
        events
            .iter()
            .any(|e| e.ends_with("actor-2 did not start within 5 s; dropped")),
        "{events:?}"
    );
    assert_eq!(s.fake.with(|st| st.killed.clone()), [1]);
}

#[test]
fn a_retiring_worker_finishes_its_chunks_before_it_goes() {
    let clock = Arc::new(TestClock::default());
    let opts = ActorPoolOptions {
        in_flight_per_actor: 1,
        ..options(&clock)
    };
    let s = start(2, opts, &[]).unwrap();
    let pool = s.workers.pool();
    let (a, b) = (
        pool.shared.acquire(None).unwrap(),
        pool.shared.acquire(None).unwrap(),
    );
    pool.shared.change(0, -1).unwrap();
    // Both were busy: the first of the least busy retires, but keeps its chunk.
    assert_eq!(pool.actor_handles(), [1]);
    assert_eq!(pool.report().placement.remote_actors, 1);
    assert!(s.fake.with(|st| st.killed.is_empty()));
    pool.shared.release(&a, None);
    assert_eq!(s.fake.with(|st| st.killed.clone()), [0]);
    pool.shared.release(&b, None);
    // It takes no more chunks.
    assert_eq!(pool.shared.acquire(None).unwrap().actor, Some(1));
}

#[test]
fn a_window_asks_autoplacement_and_its_decision_is_applied() {
    let clock = Arc::new(TestClock::default());
    let opts = ActorPoolOptions {
        autoscale: Some(Autoscale {
            window: Duration::from_secs(1),
            max_actors: Some(2),
            max_local_workers: Some(1),
            ..Default::default()
        }),
        ..options(&clock)
    };
    let s = start(1, opts, &[]).unwrap();
    assert_eq!(s.workers.parallelism(), 1 + 2 * 2);
    s.workers.run(items(0..10)).unwrap(); // the first reply opens the window
    clock.advance(Duration::from_secs(2));
    s.workers.run(items(10..20)).unwrap(); // 10 samples in 2 s
    let report = s.workers.pool().report();
    let first = &report.decisions[0];
    assert_eq!(
        (first.state.as_str(), first.remote, first.remote_actors),
        ("scale_remote", 1, 2)
    );
    assert_eq!(first.rate, 5.0);
    assert!(
        report
            .events
            .iter()
            .any(|e| e.contains("[scale_remote] +0 local +1 actors -> 0 local + 2 actors")),
        "{:?}",
        report.events
    );
    assert_eq!(report.placement.state.as_deref(), Some("scale_remote"));
    assert_eq!(report.placement.remote_actors, 2);
    assert_eq!(s.workers.pool().actor_handles(), [0, 1]);
    let json = serde_json::to_value(&report).unwrap();
    assert!(json["placement"]["cost_per_hour"].as_f64().unwrap() > 0.0);
    assert_eq!(json["decisions"][0]["state"], "scale_remote");
}

#[test]
fn shutdown_ends_the_waits_for_replies_and_for_slots() {
    let clock = Arc::new(TestClock::default());
    let opts = ActorPoolOptions {
        in_flight_per_actor: 1,
        ..options(&clock)
    };
    let s = Arc::new(start(1, opts, &[]).unwrap());
    s.fake.with(|st| st.hold = true);
    let runs: Vec<_> = (0..2)
        .map(|i| {
            let s = s.clone();
            std::thread::spawn(move || s.workers.run(items(i * 4..i * 4 + 4)))
        })
        .collect();
    // One waits for its reply, the other for a slot.
    while s.fake.with(|st| st.submitted.len()) == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    s.workers.shutdown();
    for run in runs {
        let err = run.join().unwrap().unwrap_err().to_string();
        assert!(err.contains("the Ray pool is shut down"), "{err}");
    }
    let report = s.workers.pool().report();
    assert_eq!(report.placement.remote_actors, 1, "as when it ended");
    assert!(report.events.last().unwrap().ends_with("shutdown"));
    assert_eq!(s.fake.with(|st| st.killed.clone()), [0]);
}

#[test]
fn a_cluster_that_went_away_fails_the_chunk() {
    let clock = Arc::new(TestClock::default());
    let s = start(1, options(&clock), &[]).unwrap();
    s.fake.with(|st| st.gone = true);
    let err = s.workers.run(items(0..2)).unwrap_err().to_string();
    assert!(
        err.contains("the Ray cluster was shut down while the pipeline ran"),
        "{err}"
    );
}

#[test]
fn a_pipeline_runs_on_the_actor_backend() {
    let fake = Arc::new(Fake::default());
    let rt = fake.clone();
    let backend = Arc::new(ActorBackend::new(
        "fake",
        Arc::new(move || Ok(FakeRt(rt.clone()))),
        ActorPoolOptions {
            local_workers: 1,
            ..Default::default()
        },
    ));
    let src = Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(
        RangeSource::new(50),
    ))));
    let mut plan = lower(&src, &LowerOptions::default()).unwrap();
    plan.stages[0].variant = Variant::Pool {
        backend: "fake".into(),
        workers: 2,
    };
    let opts = ExecOptions {
        backends: Backends::default().with(backend.clone()),
        ..Default::default()
    };
    let got: Vec<Sample> = Execution::start(&plan, opts)
        .unwrap()
        .collect::<Result<_>>()
        .unwrap();
    assert_eq!(got.len(), 50);
    let report = backend.pools()[0].report();
    assert_eq!(report.samples, 50);
    assert_eq!(
        report.slots.iter().map(|s| s.chunks).sum::<u64>(),
        report.chunks
    );
}
