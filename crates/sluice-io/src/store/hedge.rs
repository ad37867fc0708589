//! Reads that hide a bucket's tail: every request's time to its first byte is measured per
//! store, and a request still unanswered after the recent 95th percentile is sent a second time
//! — whichever answers first is used, the other is dropped (the "hedged request" of Dean &
//! Barroso's *The Tail at Scale*). At most one request in ten is hedged, so a store that slows
//! down as a whole is not sent twice the load.
//!
//! Requests wait for one of the store's [`MAX_IN_FLIGHT`] permits before their clock starts:
//! a latency that counted time queued behind a burst of requests would hedge the whole burst
//! and spend the budget the stalls need. Past the p95, a request is hedged only once requests
//! sent after it have been answered while it was not (it was overtaken): one that is late
//! only because the burst it came in is still being answered (the server's, the network's
//! and this client's queues drain in order) would be answered by the time its hedge was,
//! and its hedge spent a permit a stall needed. With a store whose latencies spread widely,
//! a request past the p95 has been overtaken by most of those sent with it, so the rule is
//! the p95 rule; with one as even as the loopback bucket of `benchmarks/bucket.py`, the plain
//! rule at times hedged 5–9 % of the requests that were not stalled (the start of each pass)
//! and left the stalls among them waiting for a permit for 230–330 ms (docs/BENCHMARKS.md,
//! "hedging only stragglers").
//!
//! The same measurements size how many requests to keep in flight (Little's law: in flight =
//! rate × latency), so no user sets a concurrency.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

// tokio's clock: the same as std's, except under a paused test runtime.
use tokio::time::Instant;

/// Latencies kept per store.
const WINDOW: usize = 256;
/// No hedging before this many requests were measured.
const MIN_SAMPLES: usize = 16;
/// The hedge threshold never drops under this (a loopback store answers in microseconds).
const FLOOR: Duration = Duration::from_millis(2);

/// Requests in flight per store (and an eighth more for hedges). By Little's law 256 sustain
/// 5,000 requests/s at 50 ms.
pub const MAX_IN_FLIGHT: usize = 256;
/// Before a store's latency is known, a request still unanswered after this is hedged (a
/// bucket's first byte is tens of milliseconds; its p99 a few hundred).
const UNMEASURED: Duration = Duration::from_millis(300);
/// A request sent with fewer than this many ahead of it cannot be told overtaken from queued
/// (nothing was sent close enough after it to overtake it): past the p95 it is hedged.
const QUEUED: u64 = 4;
/// How often a request looks whether its store's p95 has become known.
const UNMEASURED_STEP: Duration = Duration::from_millis(25);
/// Requests sent for one read at most: the first and five hedges. When a store stalls one
/// request in twenty, one read in 8,000 has its first three stalled — a few per run of
/// `benchmarks/bucket.py --stall-fraction 0.05`, each holding its batch for the whole stall
/// when three were the most — and six stalled in a row are one in 64 million. The hedges'
/// budget, not this, bounds the load on a store that stalls everything.
const MAX_SENT: usize = 6;

/// Recent first-byte latencies of one store, its request permits and hedging counters.
#[derive(Debug)]
pub struct Latency {
    ring: Mutex<Ring>,
    permits: tokio::sync::Semaphore,
    /// Hedges take permits of their own: a burst that holds every request permit (the first
    /// read-ahead window) is when a stall hurts most.
    hedge_permits: tokio::sync::Semaphore,
    pub requests: AtomicU64,
    pub hedged: AtomicU64,
    /// Requests sent and not answered yet, and answered so far (each with its hedges counted
    /// once): where a request stood in the queue it joined, and how far it has moved.
    outstanding: AtomicU64,
    answered: AtomicU64,
}

impl Default for Latency {
    fn default() -> Self {
        Latency {
            ring: Mutex::default(),
            permits: tokio::sync::Semaphore::new(MAX_IN_FLIGHT),
            hedge_permits: tokio::sync::Semaphore::new(MAX_IN_FLIGHT / 8),
            requests: AtomicU64::new(0),
            hedged: AtomicU64::new(0),
            outstanding: AtomicU64::new(0),
            answered: AtomicU64::new(0),
        }
    }
}

#[derive(Debug, Default)]
struct Ring {
    micros: Vec<u32>,
    next: usize,
    recorded: u64,
    /// The 95th percentile, refreshed every 32 samples.
    p95: Option<Duration>,
}

impl Latency {
    /// Records one request's time to first byte.
    pub fn record(&self, took: Duration) {
        let mut r = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        let us = took.as_micros().min(u32::MAX as u128) as u32;
        if r.micros.len() < WINDOW {
            r.micros.push(us);
        } else {
            let i = r.next;
            r.micros[i] = us;
        }
        r.next = (r.next + 1) % WINDOW;
        r.recorded += 1;
        if r.micros.len() >= MIN_SAMPLES && (r.recorded.is_multiple_of(32) || r.p95.is_none()) {
            let mut v = r.micros.clone();
            let at = (v.len() - 1) * 95 / 100;
            let (_, p95, _) = v.select_nth_unstable(at);
            r.p95 = Some(Duration::from_micros(*p95 as u64));
        }
    }

    /// The 95th percentile of recent latencies (`None` until enough were measured).
    pub fn p95(&self) -> Option<Duration> {
        self.ring.lock().unwrap_or_else(|p| p.into_inner()).p95
    }

    /// How long a request may go unanswered before it is sent again.
    fn hedge_after(&self) -> Duration {
        self.p95().map_or(UNMEASURED, |p95| p95.max(FLOOR))
    }

    /// How long a request unanswered for `elapsed` waits before it next looks whether to be
    /// hedged: until [`Latency::hedge_after`], or — while the store's p95 is not known yet (a
    /// process's first requests) — at most [`UNMEASURED_STEP`], so a stall among the first
    /// requests is hedged once the first answers give the p95, not after [`UNMEASURED`].
    fn look_in(&self, elapsed: Duration) -> Duration {
        match self.p95() {
            Some(p95) => p95.max(FLOOR).saturating_sub(elapsed),
            None => UNMEASURED.saturating_sub(elapsed).min(UNMEASURED_STEP),
        }
    }

    /// A request's [`Place`] from now until it is answered or dropped.
    fn enter(&self) -> Place<'_> {
        // Relaxed counts: a heuristic, not a consistent snapshot.
        let ahead = self.outstanding.fetch_add(1, Relaxed);
        Place {
            lat: self,
            mark: Mark {
                ahead,
                answered: self.answered.load(Relaxed),
            },
        }
    }

    /// Where a hedge of a request already counted stands as it is sent: behind every other
    /// request outstanding now.
    fn mark_hedge(&self) -> Mark {
        Mark {
            ahead: self.outstanding.load(Relaxed).saturating_sub(1),
            answered: self.answered.load(Relaxed),
        }
    }

    /// Whether requests sent after the one at `m` have been answered before it: more answers
    /// since it was sent than there were requests ahead of it, by an eighth and [`QUEUED`]
    /// (two runtime threads answer a burst nearly, not exactly, in order).
    fn overtaken(&self, m: Mark) -> bool {
        m.ahead < QUEUED || self.answered_since(m) > m.ahead + m.ahead / 8 + QUEUED
    }

    /// Whether the queue ahead of the request at `m` has been answered — all but a sixteenth
    /// of it: with one request in a hundred stalled, a queue of hundreds holds a stall or two
    /// that only their own hedges answer, and a request behind them is as stuck as they are.
    fn drained(&self, m: Mark) -> bool {
        self.answered_since(m) + m.ahead / 16 >= m.ahead
    }

    /// Requests of the store answered since the one at `m` was sent.
    fn answered_since(&self, m: Mark) -> u64 {
        self.answered.load(Relaxed).saturating_sub(m.answered)
    }

    /// A hedge permit, if the budget allows one more hedge and a permit is free now. Hedges
    /// sent at the p95 may take a tenth of the requests; a request unanswered at four times
    /// the p95 (an outlier, not a burst's queueing) may take a twentieth more, so the tail's
    /// ordinary hedges never leave a stall without one.
    /// A hedge taken is counted against the budget.
    fn try_hedge(&self, outlier: bool) -> Option<tokio::sync::SemaphorePermit<'_>> {
        let requests = self.requests.load(Relaxed);
        let budget = requests / 10 + if outlier { requests / 20 } else { 0 };
        if self.hedged.load(Relaxed) >= budget.max(1) {
            return None;
        }
        let permit = self.hedge_permits.try_acquire().ok()?;
        self.hedged.fetch_add(1, Relaxed);
        Some(permit)
    }

    /// Requests to keep in flight to sustain `rate` per second and let it grow: rate × p95
    /// (Little's law) four times over — an object's turn from hint to use is longer than its
    /// first byte, and a window sized to the rate it feeds would hold that rate where it is —
    /// plus `lo`, within `lo..=hi`.
    pub fn in_flight_for(&self, rate: f64, lo: usize, hi: usize) -> usize {
        let Some(p95) = self.p95() else {
            return hi;
        };
        (lo + (4.0 * rate * p95.as_secs_f64()).ceil() as usize).clamp(lo, hi)
    }
}

/// Where a request stood in its store's queue when it was sent.
#[derive(Debug, Clone, Copy)]
struct Mark {
    /// Requests sent before it and not answered then.
    ahead: u64,
    /// The store's answered count then.
    answered: u64,
}

/// A request counted among its store's outstanding ones, from when it is sent until it is
/// answered (or dropped), with its hedges counted once.
struct Place<'a> {
    lat: &'a Latency,
    mark: Mark,
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.lat.outstanding.fetch_sub(1, Relaxed);
        self.lat.answered.fetch_add(1, Relaxed);
    }
}

static STORES: LazyLock<Mutex<HashMap<String, Arc<Latency>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// The latency record of the store at `base` (`s3://bucket`).
pub fn latency_of(base: &str) -> Arc<Latency> {
    let mut all = STORES.lock().unwrap_or_else(|p| p.into_inner());
    all.entry(base.to_string()).or_default().clone()
}

/// Runs the request `start` makes, and a second one if the first has not answered after the
/// store's recent p95 and straggles; the first answer wins (a failed answer waits for the
/// others).
pub async fn hedged<F, Fut, T, E>(lat: &Latency, mut start: F) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    use futures::future::{select, select_all, Either};
    // The semaphore is never closed: a failed acquire only means no permit is held.
    let _permit = lat.permits.acquire().await.ok();
    lat.requests.fetch_add(1, Relaxed);
    let place = lat.enter();
    // The newest request sent: when, and where it stood. Each is judged by the same rule.
    let (mut sent, mut mark) = (Instant::now(), place.mark);
    let mut racing = vec![sent_at(sent, Box::pin(start()))];
    let mut hedge_permits = Vec::new();
    // Past the recent p95 the newest request is sent again once it has been overtaken (the
    // module doc), or once the requests that were ahead of it have been answered and it
    // still is not, a look later (the last of a burst, or a request the consumer waits for
    // while the read-ahead sends nothing, has nothing behind it to overtake it) — if the
    // budget allows and a hedge permit is free (at most an eighth more requests than the
    // store's are ever sent twice at once). Until then it looks again every quarter of the
    // p95, and from four times the p95 on it is an outlier, sent again whether overtaken or
    // not. Deciding once, at the first p95, left a stall that found the permits or the budget
    // taken at that instant (the burst that starts a pass) without one. Before the p95:
    // [`Latency::look_in`]. A hedge that stalls too (one stalled request's hedge in a hundred,
    // when a store stalls one request in a hundred) is judged the same way from when it was
    // sent, and one more request goes from the outliers' budget, up to [`MAX_SENT`]: waiting
    // for four times the p95 after the hedge held a batch ~300 ms (docs/BENCHMARKS.md, "a
    // hedge that stalls too").
    let mut wait = lat.look_in(Duration::ZERO);
    let mut drained_before = false;
    loop {
        match select(select_all(racing), Box::pin(tokio::time::sleep(wait))).await {
            Either::Left((((at, got), _, rest), _)) => match got {
                Ok(v) => {
                    lat.record(at.elapsed());
                    return Ok(v);
                }
                Err(e) if rest.is_empty() => return Err(e),
                Err(_) => racing = rest,
            },
            Either::Right(((), all)) => racing = all.into_inner(),
        }
        let (p95, elapsed) = (lat.hedge_after(), sent.elapsed());
        if elapsed < p95 {
            wait = lat.look_in(elapsed);
            continue;
        }
        if 1 + hedge_permits.len() >= MAX_SENT {
            wait = p95 * 4;
            continue;
        }
        let outlier = elapsed >= p95 * 4;
        let drained = lat.drained(mark);
        // A hedge sent with fewer than QUEUED ahead of it has no queue to be judged by: one
        // more goes only as an outlier, so a lone slow read (a large object's slow first byte
        // in a quiet store) is not sent again at every p95.
        let judged = hedge_permits.is_empty() || mark.ahead >= QUEUED;
        if outlier || (judged && (lat.overtaken(mark) || (drained && drained_before))) {
            // The first hedge from the tail's budget; one more from the outliers'.
            if let Some(permit) = lat.try_hedge(outlier || !hedge_permits.is_empty()) {
                hedge_permits.push(permit);
                (sent, mark) = (Instant::now(), lat.mark_hedge());
                racing.push(sent_at(sent, Box::pin(start())));
                drained_before = false;
                wait = lat.look_in(Duration::ZERO);
                continue;
            }
        }
        drained_before = drained;
        wait = if judged {
            (p95 / 4).max(FLOOR)
        } else {
            (p95 * 4).saturating_sub(elapsed).max(FLOOR)
        };
    }
}

/// A request's future that answers with when it was sent.
fn sent_at<Fut: Future>(
    sent: Instant,
    request: std::pin::Pin<Box<Fut>>,
) -> impl Future<Output = (Instant, Fut::Output)> + Unpin {
    futures::FutureExt::map(request, move |got| (sent, got))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// A store whose 64 recent requests each took `ms`.
    fn measured(ms: u64) -> Latency {
        let lat = Latency::default();
        for _ in 0..64 {
            lat.record(Duration::from_millis(ms));
        }
        lat
    }

    /// Milliseconds call `n` takes when the first stalls 5 s and any later one answers in 5 ms.
    fn stalls_first(n: u32) -> u64 {
        if n == 1 {
            5_000
        } else {
            5
        }
    }

    /// One hedged request whose call `n` answers `n` after `ms(n)` milliseconds: the answer,
    /// and the calls made.
    fn run(lat: &Latency, ms: impl Fn(u32) -> u64) -> (Result<u32, ()>, u32) {
        let mut calls = 0u32;
        let got = rt().block_on(hedged(lat, || {
            calls += 1;
            answer(ms(calls), calls)
        }));
        (got, calls)
    }

    /// A request that answers after `ms` (its number `n` picks the delay).
    async fn answer(ms: u64, n: u32) -> Result<u32, ()> {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        Ok(n)
    }

    #[test]
    fn quantiles_come_from_the_recent_window() {
        let lat = Latency::default();
        assert!(lat.p95().is_none());
        for i in 0..100u64 {
            lat.record(Duration::from_millis(if i < 95 { 10 } else { 500 }));
        }
        // 5 slow requests in 100 stay above the 95th percentile.
        assert_eq!(lat.p95(), Some(Duration::from_millis(10)));
        // 1,000 objects/s at 10 ms: 10 in flight, four times that to let the rate grow.
        assert_eq!(lat.in_flight_for(1000.0, 4, 1000), 44);
        assert_eq!(lat.in_flight_for(1.0, 4, 1000), 5);
        assert_eq!(lat.in_flight_for(1e6, 4, 1000), 1000);
    }

    #[test]
    fn a_stalled_request_is_answered_by_its_hedge() {
        let lat = measured(5);
        lat.requests.store(100, Relaxed);
        // The first call stalls 5 s; the hedge, sent after ~5 ms, answers in 5 ms.
        assert_eq!(run(&lat, stalls_first), (Ok(2), 2));
        assert_eq!(lat.hedged.load(Relaxed), 1);
    }

    #[test]
    fn a_stall_waits_for_a_hedge_permit_instead_of_going_without() {
        let lat = measured(5);
        lat.requests.store(1000, Relaxed);
        // Every hedge permit is held (a burst's slow requests) until 50 ms from now.
        let held = lat
            .hedge_permits
            .try_acquire_many(MAX_IN_FLIGHT as u32 / 8)
            .unwrap();
        let mut calls = 0u32;
        let got = rt().block_on(async {
            let release = async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                drop(held);
                std::future::pending::<Result<u32, ()>>().await
            };
            let request = hedged(&lat, || {
                calls += 1;
                answer(stalls_first(calls), calls)
            });
            futures::pin_mut!(release, request);
            match futures::future::select(request, release).await {
                futures::future::Either::Left((got, _)) => got,
                futures::future::Either::Right(_) => unreachable!(),
            }
        });
        // The stalled first call was answered by the hedge sent once a permit was free.
        assert_eq!(got, Ok(2));
        assert_eq!(lat.hedged.load(Relaxed), 1);
    }

    /// A runtime on a paused clock: it jumps to the next timer whenever every task waits.
    fn paused() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap()
    }

    /// A request that answers after `ms(n)` (call `n`), while `meanwhile` runs beside it:
    /// the answer, the calls made and the (paused) milliseconds to the answer.
    fn beside(
        lat: &Latency,
        ms: impl Fn(u32) -> u64,
        meanwhile: impl Future<Output = ()>,
    ) -> (Result<u32, ()>, u32, u128) {
        let mut calls = 0u32;
        let (got, took) = paused().block_on(async {
            let t0 = Instant::now();
            let request = hedged(lat, || {
                calls += 1;
                answer(ms(calls), calls)
            });
            let (got, ()) = futures::future::join(request, meanwhile).await;
            (got, t0.elapsed().as_millis())
        });
        (got, calls, took)
    }

    /// A store whose recent requests each took `ms`, with a hedge budget that never binds.
    fn busy(ms: u64) -> Latency {
        let lat = measured(ms);
        lat.requests.store(1000, Relaxed);
        lat
    }

    /// `n` requests sent to the store and not answered yet.
    fn sent(lat: &Latency, n: usize) -> Vec<Place<'_>> {
        (0..n).map(|_| lat.enter()).collect()
    }

    #[test]
    fn a_request_queued_behind_a_burst_is_not_hedged_at_the_p95() {
        let lat = busy(10);
        // 100 requests ahead, none answered; this one answers at 35 ms: past the p95 (10 ms),
        // before four times it.
        let ahead = sent(&lat, 100);
        let (got, calls, _) = beside(&lat, |_| 35, async {});
        drop(ahead);
        assert_eq!((got, calls), (Ok(1), 1));
        assert_eq!(lat.hedged.load(Relaxed), 0);
    }

    #[test]
    fn a_request_overtaken_by_later_ones_is_hedged_at_the_p95() {
        let lat = busy(10);
        // 20 requests ahead; 2 ms after this one (which stalls 5 s) is sent, those 20 and 10
        // sent after it are answered: it was overtaken.
        let ahead = sent(&lat, 20);
        let overtake = async {
            tokio::time::sleep(Duration::from_millis(2)).await;
            let behind = sent(&lat, 10);
            drop(ahead);
            drop(behind);
        };
        let (got, calls, took) = beside(&lat, stalls_first, overtake);
        assert_eq!((got, calls), (Ok(2), 2));
        // Hedged at the p95 (10 ms) and answered 5 ms later: not an outlier's hedge (40 ms).
        assert_eq!(took, 15);
        assert_eq!(lat.hedged.load(Relaxed), 1);
        assert_eq!(lat.outstanding.load(Relaxed), 0);
    }

    #[test]
    fn the_last_of_a_burst_is_hedged_a_look_after_the_queue_ahead_drained() {
        let lat = busy(10);
        // 20 ahead, all answered 2 ms after this one (which stalls) was sent; none sent after
        // it, so nothing can overtake it.
        let ahead = sent(&lat, 20);
        let drain = async {
            tokio::time::sleep(Duration::from_millis(2)).await;
            drop(ahead);
        };
        let (got, calls, took) = beside(&lat, stalls_first, drain);
        assert_eq!((got, calls), (Ok(2), 2));
        // Drained at the look at 10 ms, still drained and unanswered at the next (12.5 ms, on
        // tokio's millisecond timer 13): hedged then, answered 5 ms later, long before an
        // outlier's hedge (40 ms).
        assert_eq!(took, 18);
    }

    #[test]
    fn a_stall_behind_another_stall_is_hedged_once_the_rest_drained() {
        let lat = busy(10);
        // 32 ahead, of which 30 answer 2 ms after this one (which stalls) was sent; the other
        // two stall too, and nothing is sent after it.
        let mut ahead = sent(&lat, 32);
        let drain = async {
            tokio::time::sleep(Duration::from_millis(2)).await;
            ahead.truncate(2);
        };
        let (got, calls, took) = beside(&lat, stalls_first, drain);
        drop(ahead);
        assert_eq!((got, calls), (Ok(2), 2));
        // As in the test above: hedged at the second look (13 ms), not as an outlier (40 ms).
        assert_eq!(took, 18);
    }

    #[test]
    fn a_stall_before_the_p95_is_known_is_hedged_once_it_is() {
        let lat = Latency::default();
        lat.requests.store(1000, Relaxed);
        // No latency measured when this one (which stalls) is sent; 5 ms later, 16 answers
        // of 10 ms each make the p95 10 ms.
        let measure = async {
            tokio::time::sleep(Duration::from_millis(5)).await;
            for _ in 0..MIN_SAMPLES {
                lat.record(Duration::from_millis(10));
            }
        };
        let (got, calls, took) = beside(&lat, stalls_first, measure);
        assert_eq!((got, calls), (Ok(2), 2));
        // Its look at 25 ms finds the p95 known and passed: hedged then, not at 300 ms.
        assert_eq!(took, 30);
    }

    #[test]
    fn a_request_never_overtaken_is_hedged_as_an_outlier() {
        let lat = busy(10);
        // 100 ahead that never answer, and this one stalls: hedged at four times the p95.
        let ahead = sent(&lat, 100);
        let (got, calls, took) = beside(&lat, stalls_first, async {});
        drop(ahead);
        assert_eq!((got, calls), (Ok(2), 2));
        // The first look at 10 ms, then every 2.5 ms: the one at 40 ms hedges, 5 ms to answer.
        assert_eq!(took, 45);
    }

    #[test]
    fn an_outlier_is_hedged_when_the_tails_hedges_spent_their_budget() {
        let lat = measured(5);
        // A tenth of the requests were hedged already: none more at the p95...
        lat.requests.store(999, Relaxed);
        lat.hedged.store(100, Relaxed);
        // ... but a request still unanswered at four times it is (it stalls 5 s).
        assert_eq!(run(&lat, stalls_first), (Ok(2), 2));
        assert_eq!(lat.hedged.load(Relaxed), 101);
    }

    #[test]
    fn a_hedge_that_stalls_too_gets_one_more() {
        let lat = measured(5);
        lat.requests.store(1000, Relaxed);
        // The first request and its hedge both stall 5 s; the third answers in 5 ms.
        let got = run(&lat, |n| if n <= 2 { 5_000 } else { 5 });
        assert_eq!((got, lat.hedged.load(Relaxed)), ((Ok(3), 3), 2));
    }

    /// Calls 1 and 2 stall 5 s, the third answers in 5 ms.
    fn stalls_twice(n: u32) -> u64 {
        if n <= 2 {
            5_000
        } else {
            5
        }
    }

    /// Beside a request sent at 0 with 20 ahead: at 2 ms 10 more are sent and all 30 are
    /// answered (the request is overtaken and hedged at the p95, 10 ms); at 9 ms 20 more are
    /// sent, which the hedge joins behind; at 12 ms, if `overtake_hedge`, 10 more are sent and
    /// those 30 answered, else nothing more moves.
    async fn two_queues(lat: &Latency, overtake_hedge: bool) {
        let ahead = sent(lat, 20);
        tokio::time::sleep(Duration::from_millis(2)).await;
        drop((ahead, sent(lat, 10)));
        tokio::time::sleep(Duration::from_millis(7)).await;
        let ahead_of_hedge = sent(lat, 20);
        tokio::time::sleep(Duration::from_millis(3)).await;
        if overtake_hedge {
            drop((ahead_of_hedge, sent(lat, 10)));
        } else {
            std::mem::forget(ahead_of_hedge);
        }
    }

    #[test]
    fn a_hedge_overtaken_while_it_stalls_gets_a_third_request_at_the_p95() {
        let lat = busy(10);
        let (got, calls, took) = beside(&lat, stalls_twice, two_queues(&lat, true));
        assert_eq!((got, calls), (Ok(3), 3));
        // The hedge at 10 ms, overtaken by 12 ms: the third at its p95 (20 ms), answered at
        // 25 — not at four times the p95 after the hedge (50 ms, answered at 55).
        assert_eq!(took, 25);
        assert_eq!(lat.hedged.load(Relaxed), 2);
    }

    #[test]
    fn a_hedge_queued_behind_a_burst_gets_its_third_only_as_an_outlier() {
        let lat = busy(10);
        let (got, calls, took) = beside(&lat, stalls_twice, two_queues(&lat, false));
        assert_eq!((got, calls), (Ok(3), 3));
        // Nothing overtakes the hedge and its queue never drains: the third goes at four times
        // the p95 after the hedge (50 ms), answered 5 ms later.
        assert_eq!(took, 55);
    }

    #[test]
    fn three_stalls_in_a_row_get_a_fourth_request() {
        let lat = busy(5);
        // Calls 1 to 3 stall 5 s; the fourth answers in 5 ms. Alone in its store, the first
        // is hedged at the p95 (5 ms); its hedges have no queue to be judged by, so each
        // further one goes at four times the p95 after the one before (25, 45 ms).
        let (got, calls, took) = beside(&lat, |n| if n <= 3 { 5_000 } else { 5 }, async {});
        assert_eq!((got, calls, took), (Ok(4), 4, 50));
        assert_eq!(lat.hedged.load(Relaxed), 3);
    }

    #[test]
    fn a_read_sends_at_most_max_sent_requests() {
        let lat = busy(5);
        // Every call stalls 1 s: the read ends with the first answer, after MAX_SENT sends.
        let (got, calls, took) = beside(&lat, |_| 1_000, async {});
        assert_eq!((got, calls, took), (Ok(1), MAX_SENT as u32, 1_000));
    }

    #[test]
    fn hedges_stay_within_their_budget() {
        let lat = measured(1);
        // 10 requests so far, one hedge already spent: the next slow one is not hedged.
        lat.requests.store(9, Relaxed);
        lat.hedged.store(1, Relaxed);
        assert_eq!(run(&lat, |_| 30), (Ok(1), 1));
    }

    #[test]
    fn a_failed_first_answer_waits_for_the_hedge() {
        let lat = measured(2);
        lat.requests.store(100, Relaxed);
        // The first request fails only once its hedge was sent, and the hedge answers only
        // after that failure: the order is the test's, not the clock's (on a loaded machine a
        // 20 ms failure could come before a 2 ms hedge timer fired).
        let (hedge_sent, first_failed) = (
            Arc::new(tokio::sync::Notify::new()),
            Arc::new(tokio::sync::Notify::new()),
        );
        let mut calls = 0u32;
        let request = hedged(&lat, || {
            calls += 1;
            let n = calls;
            let (hedge_sent, first_failed) = (hedge_sent.clone(), first_failed.clone());
            async move {
                if n == 1 {
                    hedge_sent.notified().await;
                    first_failed.notify_one();
                    Err(())
                } else {
                    hedge_sent.notify_one();
                    first_failed.notified().await;
                    Ok(n)
                }
            }
        });
        // A hedge never sent would leave the first request waiting: fail, do not hang.
        let got: Result<u32, ()> = rt()
            .block_on(async { tokio::time::timeout(Duration::from_secs(60), request).await })
            .expect("the hedge was sent");
        assert_eq!(got, Ok(2));
    }
}
