//! Weighted fair queueing of chunks from many jobs on shared workers (the first piece of the
//! shared service, `docs/design/SERVICE.md` §2.7): start-time fair queueing (Goyal, Vin and
//! Cheng, SIGCOMM'96) over chunks, each charged by its estimated cost.
//!
//! A chunk of job `j` arriving with cost `c` gets a start tag `S = max(v, F_j)` and a finish
//! tag `F_j = S + c / w_j`, where `w_j` is the job's weight, `F_j` the finish tag of the job's
//! previous chunk and `v` the queue's virtual time: the start tag of the chunk handed out last.
//! The chunk with the smallest start tag goes next (ties: the one that came first). So two
//! backlogged jobs get service in the ratio of their weights, whatever their chunks cost; a job
//! that was idle starts at the current virtual time, so it earns no credit while idle and cannot
//! then take the workers for itself; and no queued job waits longer than one chunk of every
//! other job with a smaller tag — no job starves. Choosing costs one pass over the jobs with
//! chunks queued (tens, not thousands), and no clock is read: costs are what callers estimate.
//!
//! ```
//! use sluice_remote::service::fair::FairQueue;
//! let mut q = FairQueue::new();
//! q.set_weight(1, 2.0)?;
//! q.set_weight(2, 1.0)?;
//! for i in 0..6 {
//!     q.push(1, 1.0, ("a", i))?;
//!     q.push(2, 1.0, ("b", i))?;
//! }
//! let served: Vec<u64> = (0..6).map(|_| q.pop().unwrap().0).collect();
//! assert_eq!(served.iter().filter(|&&j| j == 1).count(), 4); // 2:1
//! # Ok::<(), sluice_core::Error>(())
//! ```

use std::collections::{HashMap, VecDeque};

use sluice_core::{Error, Result};

/// A job connected to the queue.
pub type JobId = u64;

/// A queued chunk with its tags.
#[derive(Debug)]
struct Entry<T> {
    start: f64,
    /// Arrival order, for ties.
    seq: u64,
    item: T,
}

#[derive(Debug)]
struct Job<T> {
    weight: f64,
    /// Finish tag of the job's last chunk.
    finish: f64,
    queue: VecDeque<Entry<T>>,
}

/// Chunks of many jobs, handed out in weighted fair order.
#[derive(Debug)]
pub struct FairQueue<T> {
    jobs: HashMap<JobId, Job<T>>,
    virtual_time: f64,
    seq: u64,
    len: usize,
}

impl<T> Default for FairQueue<T> {
    fn default() -> Self {
        FairQueue {
            jobs: HashMap::new(),
            virtual_time: 0.0,
            seq: 0,
            len: 0,
        }
    }
}

/// Weights and costs must be positive, finite numbers: a zero weight would never be served
/// and a NaN would break the order for every job.
fn positive(what: &str, x: f64) -> Result<f64> {
    if x.is_finite() && x > 0.0 {
        Ok(x)
    } else {
        Err(Error::invalid(format!(
            "{what} must be a positive number, got {x}"
        )))
    }
}

impl<T> FairQueue<T> {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `job`'s weight (1.0 for a job never given one); its queued chunks keep their tags,
    /// later ones are charged at the new weight.
    pub fn set_weight(&mut self, job: JobId, weight: f64) -> Result<()> {
        let weight = positive("a job's weight", weight)?;
        self.job(job).weight = weight;
        Ok(())
    }

    fn job(&mut self, job: JobId) -> &mut Job<T> {
        self.jobs.entry(job).or_insert_with(|| Job {
            weight: 1.0,
            finish: 0.0,
            queue: VecDeque::new(),
        })
    }

    /// Queues `item` for `job`, charged `cost` (the chunk's estimated work, in any unit the
    /// caller uses for every job alike).
    pub fn push(&mut self, job: JobId, cost: f64, item: T) -> Result<()> {
        let cost = positive("a chunk's cost", cost)?;
        let (v, seq) = (self.virtual_time, self.seq);
        let j = self.job(job);
        let start = v.max(j.finish);
        j.finish = start + cost / j.weight;
        j.queue.push_back(Entry { start, seq, item });
        self.seq += 1;
        self.len += 1;
        Ok(())
    }

    /// Settles `job`'s account once one of its chunks has run: `delta` is what the chunk cost
    /// beyond what it was charged when queued (negative when it cost less). The job's queued
    /// and later chunks start that much later (or sooner), so backlogged jobs share the slots'
    /// *measured* time by weight even while the estimates are off — a loaded machine, chunks
    /// whose cost changed. A job cannot bank credit this way: no chunk is moved before the
    /// queue's virtual time.
    pub fn settle(&mut self, job: JobId, delta: f64) {
        let v = self.virtual_time;
        if !delta.is_finite() {
            return;
        }
        let Some(j) = self.jobs.get_mut(&job) else {
            return;
        };
        // The chunks keep their spacing; only the whole run moves, and not before `v`.
        let earliest = j.queue.front().map_or(j.finish, |e| e.start);
        let shift = (delta / j.weight).max((v - earliest).min(0.0));
        for e in &mut j.queue {
            e.start += shift;
        }
        j.finish += shift;
    }

    /// The next chunk in fair order, with its job.
    pub fn pop(&mut self) -> Option<(JobId, T)> {
        let (&job, _) = self
            .jobs
            .iter()
            .filter_map(|(id, j)| j.queue.front().map(|e| (id, (e.start, e.seq))))
            .min_by(|a, b| a.1 .0.total_cmp(&b.1 .0).then(a.1 .1.cmp(&b.1 .1)))?;
        let entry = self.jobs.get_mut(&job)?.queue.pop_front()?;
        self.virtual_time = self.virtual_time.max(entry.start);
        self.len -= 1;
        Some((job, entry.item))
    }

    /// Drops `job` (it disconnected or died): its queued chunks are returned, in order, and
    /// it is forgotten — connecting again starts afresh.
    pub fn forget(&mut self, job: JobId) -> Vec<T> {
        let Some(j) = self.jobs.remove(&job) else {
            return Vec::new();
        };
        self.len -= j.queue.len();
        j.queue.into_iter().map(|e| e.item).collect()
    }

    /// Chunks queued, over all jobs.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Chunks `job` has queued.
    pub fn queued(&self, job: JobId) -> usize {
        self.jobs.get(&job).map_or(0, |j| j.queue.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pops `n` chunks and counts them per job.
    fn serve(q: &mut FairQueue<u64>, n: usize) -> HashMap<JobId, usize> {
        let mut count = HashMap::new();
        for _ in 0..n {
            let (job, _) = q.pop().expect("a chunk");
            *count.entry(job).or_default() += 1;
        }
        count
    }

    fn backlog(q: &mut FairQueue<u64>, job: JobId, cost: f64, n: u64) {
        for i in 0..n {
            q.push(job, cost, i).unwrap();
        }
    }

    #[test]
    fn backlogged_jobs_share_in_the_ratio_of_their_weights() {
        let mut q = FairQueue::new();
        q.set_weight(1, 2.0).unwrap();
        backlog(&mut q, 1, 1.0, 1000);
        backlog(&mut q, 2, 1.0, 1000);
        let served = serve(&mut q, 300);
        assert!(served[&1].abs_diff(200) <= 1, "{served:?}");
        assert_eq!(served[&1] + served[&2], 300);
    }

    #[test]
    fn measured_costs_settle_what_the_estimates_got_wrong() {
        // Both jobs are charged 1.0 a chunk when queued, but job 1's chunks really cost 2.0:
        // settling each run chunk brings equal weights to equal measured time, not equal
        // chunks.
        let mut q = FairQueue::new();
        let (mut spent, mut chunks) = (HashMap::<JobId, f64>::new(), HashMap::<JobId, u32>::new());
        backlog(&mut q, 1, 1.0, 8);
        backlog(&mut q, 2, 1.0, 8);
        for _ in 0..600 {
            let (job, _) = q.pop().expect("a chunk");
            let cost = if job == 1 { 2.0 } else { 1.0 };
            q.settle(job, cost - 1.0);
            *spent.entry(job).or_default() += cost;
            *chunks.entry(job).or_default() += 1;
            q.push(job, 1.0, 0).unwrap(); // the job keeps its backlog
        }
        let ratio = spent[&1] / spent[&2];
        assert!((ratio - 1.0).abs() < 0.05, "{spent:?} {chunks:?}");
        assert!(chunks[&2].abs_diff(2 * chunks[&1]) <= 10, "{chunks:?}");
    }

    #[test]
    fn settling_gives_no_credit_past_the_virtual_time() {
        let mut q = FairQueue::new();
        backlog(&mut q, 1, 1.0, 100);
        serve(&mut q, 50);
        // Job 2 arrives late and its chunks turn out far cheaper than charged: the credit
        // cannot put it before the virtual time, so job 1 is not shut out.
        backlog(&mut q, 2, 1.0, 100);
        q.settle(2, -1000.0);
        backlog(&mut q, 2, 1.0, 100);
        let served = serve(&mut q, 40);
        assert!(served.get(&1).copied().unwrap_or(0) >= 15, "{served:?}");
    }

    #[test]
    fn costly_chunks_count_for_more_than_cheap_ones() {
        let mut q = FairQueue::new();
        backlog(&mut q, 1, 3.0, 100);
        backlog(&mut q, 2, 1.0, 300);
        let served = serve(&mut q, 200);
        // Equal weights, equal work: job 2 sends three chunks per chunk of job 1.
        assert!(served[&2].abs_diff(150) <= 1, "{served:?}");
    }

    #[test]
    fn an_idle_job_earns_no_credit_and_no_job_starves() {
        let mut q = FairQueue::new();
        backlog(&mut q, 1, 1.0, 1000);
        serve(&mut q, 500); // job 1 alone for a while
        backlog(&mut q, 2, 1.0, 1000);
        // Job 2 arrives with a backlog: it shares from now on, it is not owed the past.
        let served = serve(&mut q, 100);
        assert!(served[&1].abs_diff(50) <= 1, "{served:?}");
        // A job of tiny weight still gets its turn.
        q.set_weight(3, 0.01).unwrap();
        q.push(3, 1.0, 7).unwrap();
        let mut waited = 0;
        while q.pop().unwrap().0 != 3 {
            waited += 1;
            assert!(waited <= 2 * 100 + 2, "job 3 starves");
        }
    }

    #[test]
    fn each_job_keeps_its_own_order_and_ties_go_to_the_first_come() {
        let mut q = FairQueue::new();
        for i in 0..5 {
            q.push(9, 1.0, i).unwrap();
            q.push(4, 1.0, 100 + i).unwrap();
        }
        let order: Vec<(JobId, u64)> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order[..4], [(9, 0), (4, 100), (9, 1), (4, 101)]);
        let nines: Vec<u64> = order.iter().filter(|(j, _)| *j == 9).map(|p| p.1).collect();
        assert_eq!(nines, [0, 1, 2, 3, 4]);
        assert!(q.is_empty() && q.pop().is_none());
    }

    #[test]
    fn a_forgotten_job_gives_back_its_chunks_and_starts_afresh() {
        let mut q = FairQueue::new();
        backlog(&mut q, 1, 1.0, 3);
        backlog(&mut q, 2, 1.0, 3);
        assert_eq!((q.len(), q.queued(1)), (6, 3));
        assert_eq!(q.forget(1), [0, 1, 2]);
        assert_eq!((q.len(), q.queued(1)), (3, 0));
        assert!(std::iter::from_fn(|| q.pop()).all(|(job, _)| job == 2));
        assert!(q.forget(1).is_empty(), "forgetting twice is harmless");
    }

    #[test]
    fn weights_and_costs_must_be_positive_numbers() {
        let mut q: FairQueue<u64> = FairQueue::new();
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let e = q.set_weight(1, bad).unwrap_err().to_string();
            assert!(e.contains("weight") && e.contains("positive"), "{e}");
            let e = q.push(1, bad, 0).unwrap_err().to_string();
            assert!(e.contains("cost"), "{e}");
        }
        assert!(q.is_empty());
    }
}
