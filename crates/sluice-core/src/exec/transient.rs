//! Big transients under a memory cap: an op about to make one big buffer (a 50 MP decode is
//! 150 MB) asks first, and waits while the process has no room for it beside the big
//! buffers other threads hold.
//!
//! The cap at the source ([`super::MemoryCap`]) bounds what the pipeline holds between
//! stages; it cannot see a buffer that lives only inside a chunk's ops — decoded, resized,
//! dropped. Four workers decoding 4,000 x 4,000 photos at once (48 MB each, about twice that
//! while the decoder works) ran a 250 MB cap to 402 MB, whatever the source admitted
//! (docs/RELIABILITY.md, "Big decodes that overlap"). A worker
//! that holds a transient keeps it until its chunk has been through the chain
//! ([`ChunkOps`], which the chain starts), since the ops after the decode still hold the
//! big image. A thread that would wait while nobody else holds one goes at once: the cap is
//! then below what one image needs, and waiting would free nothing.
//!
//! Only while a capped run is live in the process (a worker process of a pool has no cap of
//! its own, so no gate), and only for buffers of [`MIN_BYTES`] or more: small images never
//! take the lock.

use std::cell::Cell;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use super::MemoryCap;

/// Buffers smaller than this are not gated: 16 MiB is a 2,300 x 2,300 RGB image.
pub const MIN_BYTES: u64 = 16 << 20;
/// How often a waiting thread looks at the resident memory again (the consumer frees memory
/// too, without telling the gate).
const RECHECK: Duration = Duration::from_millis(5);

#[derive(Default)]
struct Gate {
    /// The caps of the live runs of the process.
    caps: Vec<Weak<MemoryCap>>,
    /// Bytes the holders declared, and how many threads hold some.
    reserved: u64,
    holders: usize,
    /// The resident memory when the first of the present holders went: with every
    /// declared buffer made, the process holds at least this plus `reserved`.
    base: u64,
}

static GATE: Mutex<Gate> = Mutex::new(Gate {
    caps: Vec::new(),
    reserved: 0,
    holders: 0,
    base: 0,
});
static FREED: Condvar = Condvar::new();

/// The longest a big buffer waits: a holder that waits in turn on this thread (a Python
/// function of its chunk waiting for the GIL that a function calling an op here holds)
/// would otherwise never give its room back.
const MAX_WAIT: Duration = Duration::from_secs(10);

thread_local! {
    /// What this thread holds until its chunk is through ([`release_held`]).
    static HELD: Cell<u64> = const { Cell::new(0) };
    /// Whether this thread runs a chunk's ops now ([`ChunkOps`]): only then is there an end
    /// of the chunk to give the room back at.
    static IN_CHUNK: Cell<bool> = const { Cell::new(false) };
}

/// A chunk's ops run on this thread while it lives; dropping it gives back the room its big
/// buffers held.
pub(crate) struct ChunkOps {
    outer: bool,
}

impl ChunkOps {
    pub(crate) fn start() -> Self {
        ChunkOps {
            outer: !IN_CHUNK.with(|c| c.replace(true)),
        }
    }
}

impl Drop for ChunkOps {
    fn drop(&mut self) {
        if self.outer {
            release_held();
            IN_CHUNK.with(|c| c.set(false));
        }
    }
}

/// Puts `cap`'s run under the gate for as long as the cap lives.
pub(crate) fn register(cap: &Arc<MemoryCap>) {
    let mut g = GATE.lock().unwrap_or_else(|p| p.into_inner());
    g.caps.retain(|c| c.strong_count() > 0);
    g.caps.push(Arc::downgrade(cap));
}

/// Waits until the process has room for a buffer of `bytes` beside the big buffers other
/// threads hold, then counts it as this thread's until its chunk is through. Returns at once
/// for small buffers, outside a chunk's ops, when no capped run is live, or when no other
/// thread holds one; and after ten seconds in any case.
///
/// ```
/// // Outside a run's chunk (and with no capped run in this process): nothing to wait for.
/// sluice_core::exec::hold_transient(1 << 30);
/// ```
pub fn hold_transient(bytes: u64) {
    if bytes < MIN_BYTES || !IN_CHUNK.with(Cell::get) {
        return;
    }
    let mut g = GATE.lock().unwrap_or_else(|p| p.into_inner());
    g.caps.retain(|c| c.strong_count() > 0);
    let Some(cap) = g
        .caps
        .iter()
        .filter_map(Weak::upgrade)
        .min_by_key(|c| c.limit())
    else {
        return;
    };
    let mine = HELD.with(Cell::get);
    let mut waited: Option<Instant> = None;
    loop {
        let others = g.holders - usize::from(mine > 0);
        let rss = cap.rss();
        if g.holders == 0 {
            g.base = rss;
        }
        // What the holders declared, made or not: at least their start plus all of it, or
        // what the process holds now if more (a decoder's work buffers, what the others do).
        // Counting the declared bytes on top of the resident ones instead counted each made
        // buffer twice: a cap 30 % above a run's uncapped peak cost it 14 % of its rate.
        if others == 0 || rss.max(g.base + g.reserved) + bytes <= cap.limit() {
            break;
        }
        if waited.get_or_insert_with(Instant::now).elapsed() >= MAX_WAIT {
            break;
        }
        g = FREED
            .wait_timeout(g, RECHECK)
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
    if let Some(t) = waited {
        cap.count_transient_wait(t.elapsed());
    }
    if mine == 0 {
        g.holders += 1;
    }
    g.reserved += bytes;
    HELD.with(|h| h.set(mine + bytes));
}

/// Gives back what this thread holds ([`hold_transient`]): its chunk is through the ops.
fn release_held() {
    let mine = HELD.with(|h| h.replace(0));
    if mine == 0 {
        return;
    }
    let mut g = GATE.lock().unwrap_or_else(|p| p.into_inner());
    g.reserved = g.reserved.saturating_sub(mine);
    g.holders = g.holders.saturating_sub(1);
    drop(g);
    FREED.notify_all();
}

/// How many threads hold transients now (for tests).
#[cfg(test)]
fn holders() -> usize {
    GATE.lock().unwrap_or_else(|p| p.into_inner()).holders
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn a_second_big_buffer_waits_for_the_first_when_the_cap_has_no_room_for_both() {
        // Below what the process holds already: no room for any buffer beside another.
        let cap = Arc::new(MemoryCap::new(1));
        register(&cap);
        // Outside a chunk's ops nothing is held (no chunk end would give it back).
        hold_transient(MIN_BYTES);
        assert_eq!(holders(), 0);
        let chunk = ChunkOps::start();
        hold_transient(MIN_BYTES - 1); // small: not gated, not held
        assert_eq!(holders(), 0);
        hold_transient(MIN_BYTES); // nobody else holds one: it goes
        assert_eq!(holders(), 1);
        let (tx, rx) = mpsc::channel();
        let other = std::thread::spawn(move || {
            let _chunk = ChunkOps::start();
            hold_transient(MIN_BYTES);
            tx.send(()).unwrap();
        });
        // It waits for as long as this thread's chunk holds its buffer...
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
        // ... and this thread's own second buffer does not wait for itself.
        hold_transient(2 * MIN_BYTES);
        assert_eq!(holders(), 1);
        drop(chunk);
        rx.recv_timeout(Duration::from_secs(60)).unwrap();
        other.join().unwrap();
        assert_eq!(holders(), 0);
        let r = cap.report();
        assert_eq!(r.transient_waits, 1, "{r:?}");
        // With the run gone, nothing is gated.
        drop(cap);
        let _chunk = ChunkOps::start();
        hold_transient(MIN_BYTES);
        assert_eq!(holders(), 0);
    }
}
