//! The threads of a stage: one thread for a sequential stage; executor threads calling a
//! worker pool, and a dispatcher that keeps their order, for a parallel one; and the thread
//! of the runtime controller that tunes how many of them work.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, Sender};

use crate::error::{Error, Result};
use crate::stats::{PipelineStats, StageCounters};

use super::backend::Workers;
use super::channel::{send_counted, Msg};
use super::control::Control;
use super::controller;
use super::item::{is_interrupt, nonempty, Chunk, Partial, Transform};
use super::ordering::{dispatch, Input, WindowHold};
use super::tail::TailWindow;

/// Runs `f`, turning a panic into an internal error so it never crosses into the consumer.
pub(super) fn guarded<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let msg = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        Err(Error::Internal(format!("an op panicked: {msg}")))
    })
}

pub(super) fn spawn_sequential(
    mut t: Box<dyn Transform>,
    depth: usize,
    mut input: Input,
    ctl: &Arc<Control>,
    stats: &Arc<PipelineStats>,
    slot: usize,
) -> Result<Input> {
    let (tx, rx) = bounded::<Msg>(depth.max(1));
    let (stats, ctl2) = (stats.clone(), ctl.clone());
    ctl.spawn(format!("sluice-stage-{slot}"), move || {
        let c = stats.counters(slot);
        loop {
            let t0 = Instant::now();
            let msg = input.recv();
            StageCounters::add(&c.wait_in_ns, t0.elapsed());
            let t1 = Instant::now();
            // Outputs made before an error are handed on ahead of it.
            let mut outs = Vec::new();
            let (res, last) = match msg {
                Some(Ok(chunk)) => {
                    c.items_in.fetch_add(chunk.len() as u64, Relaxed);
                    let _working = ctl2.wait.working();
                    let res = guarded(|| {
                        t.push(chunk, &mut outs)?;
                        if t.exhausted() {
                            t.finish(&mut outs)?;
                        }
                        Ok(())
                    });
                    let last = res.is_err() || t.exhausted();
                    (res, last)
                }
                Some(Err(e)) => (Err(e), true),
                None => (guarded(|| t.finish(&mut outs)), true),
            };
            StageCounters::add(&c.busy_ns, t1.elapsed());
            if res.as_ref().is_err_and(is_interrupt) {
                outs.clear();
            }
            nonempty(&mut outs);
            for o in outs {
                if !send_counted(&tx, Ok(o), c) {
                    return;
                }
            }
            if let Err(e) = res {
                send_counted(&tx, Err(e), c);
                return;
            }
            if last {
                return;
            }
        }
    })?;
    Ok(Input::Direct(rx))
}

/// How much lower than the process the worker threads of parallel stages run (their nice
/// value, added; Linux, where nice is per thread). Workers do the bulk of the CPU work; the
/// threads that hand work on — the source, each stage's dispatcher, stateful stages such as
/// batch — and the consumer are light and wake often. At equal priority a woken hand-off
/// thread can wait behind busy workers for a scheduler slice while the workers wait for
/// it: on the 2-vCPU reference VM the ASR cached plan kept its cores 1.78 busy at equal
/// priority and 1.98 with workers at +5 (5,929 → 7,673 clips/s, 300 → 258 µs of CPU per
/// clip); NLP and CV plans gained 2–4%. The training loop in the consumer's thread gets
/// ahead of the workers the same way. `SLUICE_WORKER_NICE` overrides it (0: no change).
pub const WORKER_NICE: i32 = 5;

/// Lowers the calling worker thread's priority by [`WORKER_NICE`] (or `SLUICE_WORKER_NICE`).
fn lower_worker_priority() {
    #[cfg(target_os = "linux")]
    {
        let by = std::env::var("SLUICE_WORKER_NICE")
            .ok()
            .and_then(|v| v.trim().parse::<i32>().ok())
            .unwrap_or(WORKER_NICE);
        if by > 0 {
            // SAFETY: plain integer arguments. On Linux, PRIO_PROCESS with who = 0 reads and
            // sets the calling thread's nice value only, not the process's. A failure leaves
            // the priority as it was, which is harmless.
            unsafe {
                let now = libc::getpriority(libc::PRIO_PROCESS, 0);
                libc::setpriority(libc::PRIO_PROCESS, 0, (now + by).min(19));
            }
        }
    }
}

/// How a parallel stage is run.
pub(super) struct Parallel {
    /// Executor threads calling the pool.
    pub(super) threads: usize,
    /// Under the controller: how many of them may take work.
    pub(super) active: Option<Arc<AtomicUsize>>,
    pub(super) depth: usize,
    pub(super) slot: usize,
}

pub(super) fn spawn_parallel(
    pool: Arc<dyn Workers>,
    par: Parallel,
    input: Input,
    ctl: &Arc<Control>,
    stats: &Arc<PipelineStats>,
) -> Result<Input> {
    let Parallel {
        threads,
        active,
        depth,
        slot,
    } = par;
    // One chunk waits beyond one per worker. The dispatcher refills this queue at normal
    // priority while the workers run at a lower one ([`WORKER_NICE`]), but a woken thread
    // may still wait for a core; with only one chunk per worker queued, two workers finishing
    // in that wait both drained it and sat idle: the CV reference plan (chunks of one ~1 ms
    // image) kept its 2 cores 1.84-1.86 busy (`benchmarks/cv_breakdown.py --busy`), 1.90-1.94
    // with this one more; more than one cost NLP 2-6 % (docs/BENCHMARKS.md).
    let (work_tx, work_rx) = bounded::<(Chunk, Sender<Partial>)>(threads + 1);
    let window = Arc::new(TailWindow::new(threads, depth, stats.memory().cloned()));
    stats
        .counters(slot)
        .window_max
        .fetch_max(depth as u64, Relaxed);
    let (slots_tx, slots_rx) = bounded::<Receiver<Partial>>(window.capacity());
    // The last thread out stops the pool (remote workers must not outlive the stage).
    struct Stop(Arc<dyn Workers>);
    impl Drop for Stop {
        fn drop(&mut self) {
            self.0.shutdown();
        }
    }
    ctl.watch(&pool);
    let stop = Arc::new(Stop(pool));
    for w in 0..threads {
        let (work_rx, stop, ctl2, stats, active, window) = (
            work_rx.clone(),
            stop.clone(),
            ctl.clone(),
            stats.clone(),
            active.clone(),
            window.clone(),
        );
        ctl.spawn(format!("sluice-stage-{slot}-w{w}"), move || {
            lower_worker_priority();
            let c = stats.counters(slot);
            loop {
                // A worker beyond the controller's current count sits out.
                while active.as_ref().is_some_and(|a| w >= a.load(Relaxed)) {
                    if ctl2.cancelled() {
                        return;
                    }
                    thread::sleep(Duration::from_millis(2));
                }
                let t0 = Instant::now();
                let Ok((chunk, reply)) = work_rx.recv() else {
                    return;
                };
                StageCounters::add(&c.wait_in_ns, t0.elapsed());
                if ctl2.cancelled() {
                    return;
                }
                let t1 = Instant::now();
                let n = chunk.len() as u64;
                let working = ctl2.wait.working();
                let res = guarded(|| Ok(stop.0.run_partial(chunk)))
                    .unwrap_or_else(|e| (Vec::new(), Some(e)));
                drop(working);
                let took = t1.elapsed();
                StageCounters::add(&c.busy_ns, took);
                c.items_in.fetch_add(n, Relaxed);
                let out = c.items_out.fetch_add(res.0.len() as u64, Relaxed) + res.0.len() as u64;
                let chunks = c.chunks.fetch_add(1, Relaxed) + 1;
                let bytes = c.bytes_out.load(Relaxed) as f64 / chunks as f64;
                let limit =
                    window.observe(took.as_nanos() as u64, if out > 0 { bytes } else { 0.0 });
                c.window_max.fetch_max(limit as u64, Relaxed);
                let _ = reply.send(res);
            }
        })?;
    }
    let (stats, w) = (stats.clone(), window.clone());
    ctl.spawn(format!("sluice-stage-{slot}-dispatch"), move || {
        dispatch(input, &work_tx, &slots_tx, &w, stats.counters(slot))
    })?;
    Ok(Input::Ordered {
        slots: slots_rx,
        window: WindowHold(window),
        waiting: None,
        failed: None,
    })
}

/// Runs the controller every interval until the execution is cancelled.
pub(super) fn spawn_controller(
    opts: controller::ControllerOptions,
    tuned: Vec<(usize, Arc<AtomicUsize>)>,
    ctl: &Arc<Control>,
    stats: &Arc<PipelineStats>,
) -> Result<()> {
    let (ctl2, stats) = (ctl.clone(), stats.clone());
    ctl.spawn("sluice-controller".into(), move || {
        let interval = opts.interval;
        let mut c = controller::Controller::new(opts);
        let busy = |slot: usize| stats.counters(slot).busy_ns.load(Relaxed);
        let mut last: Vec<u64> = tuned.iter().map(|(s, _)| busy(*s)).collect();
        let mut last_wait = stats.consumer_wait_ns.load(Relaxed);
        let mut last_samples = stats.consumer_samples.load(Relaxed);
        let mut t_last = Instant::now();
        loop {
            while t_last.elapsed() < interval {
                if ctl2.cancelled() {
                    return;
                }
                thread::sleep(Duration::from_millis(10).min(interval));
            }
            let dt = t_last.elapsed().as_secs_f64();
            t_last = Instant::now();
            let wait = stats.consumer_wait_ns.load(Relaxed);
            let samples = stats.consumer_samples.load(Relaxed);
            let mut stages = Vec::with_capacity(tuned.len());
            for (k, (slot, active)) in tuned.iter().enumerate() {
                let b = busy(*slot);
                let n = active.load(Relaxed).max(1);
                stages.push(controller::StageObs {
                    slot: *slot,
                    active: n,
                    busy: (b - last[k]) as f64 * 1e-9 / (dt * n as f64),
                });
                last[k] = b;
            }
            let obs = controller::Observation {
                consumer_wait: ((wait - last_wait) as f64 * 1e-9 / dt).min(1.0),
                throughput: (samples - last_samples) as f64 / dt,
                stages,
            };
            (last_wait, last_samples) = (wait, samples);
            if let Some((slot, workers, why)) = c.decide(&obs) {
                if let Some((_, a)) = tuned.iter().find(|(s, _)| *s == slot) {
                    a.store(workers, Relaxed);
                    stats.counters(slot).active.store(workers as u64, Relaxed);
                    let d = controller::Decision {
                        at_s: stats.elapsed().as_secs_f64(),
                        slot,
                        workers,
                        why,
                    };
                    stats
                        .decisions
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .push(d);
                }
            }
        }
    })
}
