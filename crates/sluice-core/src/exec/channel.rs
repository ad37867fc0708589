//! The hand-off between a thread and the next stage: what travels on a stage's channel, and
//! a send that accounts the time it blocked.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use crossbeam_channel::Sender;

use crate::error::Result;
use crate::stats::StageCounters;

use super::item::Chunk;

/// What travels on a stage's channel: a chunk, or the error that ends the stream.
pub(super) type Msg = Result<Chunk>;

/// Sends `msg`, accounting the time blocked; false if the receiver is gone.
pub(super) fn send_counted(tx: &Sender<Msg>, msg: Msg, c: &StageCounters) -> bool {
    let items = msg.as_ref().map_or(0, |c| c.len() as u64);
    let t0 = Instant::now();
    c.record_occupancy(tx.len());
    let ok = tx.send(msg).is_ok();
    StageCounters::add(&c.wait_out_ns, t0.elapsed());
    c.items_out.fetch_add(items, Relaxed);
    ok
}
