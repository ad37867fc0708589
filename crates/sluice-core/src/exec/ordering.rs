//! Order across threads. A parallel stage's dispatcher hands each chunk to whichever worker
//! is free together with a one-slot reply channel, and queues the reply channels in input
//! order; the next stage reads the replies in that order. So output order equals input order
//! for any number of workers, with no reorder buffer, and the queue of reply slots is the
//! window of chunks in flight, its limit grown with the stage's measured tail latency
//! ([`TailWindow`]).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};

use crate::error::Error;
use crate::stats::{PipelineStats, StageCounters};

use super::channel::Msg;
use super::item::{Chunk, Partial};
use super::source::OrderedItems;
use super::tail::TailWindow;

/// The consumer side's hold on a window: dropping it (the next stage ended) frees a
/// dispatcher waiting for room.
pub(super) struct WindowHold(pub(super) Arc<TailWindow>);

impl Drop for WindowHold {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// The receiving end of a stage: plain, or ordered reply slots from a parallel stage.
pub(super) enum Input {
    Direct(Receiver<Msg>),
    /// A random-access source's items made in the consumer, when every stage runs there:
    /// no thread and no hand-off for what is only a run of indices.
    Inline {
        items: Box<OrderedItems>,
        stats: Arc<PipelineStats>,
    },
    /// A parallel stage's replies in input order; a reply whose chunk failed part-way is
    /// handed on as its outputs, then (`failed`) its error.
    Ordered {
        slots: Receiver<Receiver<Partial>>,
        window: WindowHold,
        waiting: Option<Receiver<Partial>>,
        failed: Option<Error>,
    },
}

pub(super) enum Recv {
    Msg(Msg),
    Timeout,
    End,
}

impl Input {
    pub(super) fn recv(&mut self) -> Option<Msg> {
        match self.recv_timeout(None) {
            Recv::Msg(m) => Some(m),
            _ => None,
        }
    }
    pub(super) fn recv_timeout(&mut self, timeout: Option<Duration>) -> Recv {
        let wait = |rx: &Receiver<Msg>| match timeout {
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            Some(t) => rx.recv_timeout(t),
        };
        match self {
            Input::Inline { items, stats } => match items.next_chunk(stats) {
                Some(chunk) => {
                    let c = stats.counters(0);
                    c.items_out.fetch_add(chunk.len() as u64, Relaxed);
                    Recv::Msg(Ok(chunk))
                }
                None => Recv::End,
            },
            Input::Direct(rx) => match wait(rx) {
                Ok(m) => Recv::Msg(m),
                Err(RecvTimeoutError::Timeout) => Recv::Timeout,
                Err(RecvTimeoutError::Disconnected) => Recv::End,
            },
            Input::Ordered {
                slots,
                window,
                waiting,
                failed,
            } => {
                if let Some(e) = failed.take() {
                    return Recv::Msg(Err(e));
                }
                let slot = match waiting.take() {
                    Some(s) => s,
                    None => {
                        let got = match timeout {
                            None => slots.recv().map_err(|_| RecvTimeoutError::Disconnected),
                            Some(t) => slots.recv_timeout(t),
                        };
                        match got {
                            Ok(s) => {
                                window.0.release();
                                s
                            }
                            Err(RecvTimeoutError::Timeout) => return Recv::Timeout,
                            Err(RecvTimeoutError::Disconnected) => return Recv::End,
                        }
                    }
                };
                // Waiting for the head while the workers may be out of room is what grows
                // the window: say so while it lasts.
                let got = match slot.try_recv() {
                    Ok(reply) => Ok(reply),
                    Err(_) => {
                        window.0.head_waiting(true);
                        let got = match timeout {
                            None => slot.recv().map_err(|_| RecvTimeoutError::Disconnected),
                            Some(t) => slot.recv_timeout(t),
                        };
                        window.0.head_waiting(false);
                        got
                    }
                };
                match got {
                    Ok((chunk, None)) => Recv::Msg(Ok(chunk)),
                    Ok((chunk, Some(e))) if chunk.is_empty() => Recv::Msg(Err(e)),
                    Ok((chunk, Some(e))) => {
                        *failed = Some(e);
                        Recv::Msg(Ok(chunk))
                    }
                    Err(RecvTimeoutError::Timeout) => {
                        *waiting = Some(slot);
                        Recv::Timeout
                    }
                    // A worker died without replying (it panicked past catch_unwind).
                    Err(RecvTimeoutError::Disconnected) => Recv::Msg(Err(Error::Internal(
                        "a worker exited without producing its result".into(),
                    ))),
                }
            }
        }
    }
    pub(super) fn len(&self) -> usize {
        match self {
            Input::Direct(rx) => rx.len(),
            Input::Ordered { slots, .. } => slots.len(),
            Input::Inline { .. } => 0,
        }
    }
}

/// Hands `input`'s chunks to a parallel stage's workers (through `work`) in order: each
/// chunk's reply channel is queued in `slots`, once `window` has room, before the chunk goes
/// out; an error goes straight into its slot and ends the stage. Returns when the input
/// ends or a receiver is gone.
pub(super) fn dispatch(
    mut input: Input,
    work: &Sender<(Chunk, Sender<Partial>)>,
    slots: &Sender<Receiver<Partial>>,
    window: &TailWindow,
    c: &StageCounters,
) {
    while let Some(msg) = input.recv() {
        let (reply_tx, reply_rx) = bounded::<Partial>(1);
        c.record_occupancy(slots.len());
        let t0 = Instant::now();
        if !window.acquire() || slots.send(reply_rx).is_err() {
            return;
        }
        StageCounters::add(&c.wait_out_ns, t0.elapsed());
        match msg {
            Ok(chunk) => {
                if work.send((chunk, reply_tx)).is_err() {
                    return;
                }
            }
            Err(e) => {
                let _ = reply_tx.send((Vec::new(), Some(e)));
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::item::Item;
    use crate::exec::resume::Cursor;
    use crate::stats::StageInfo;

    fn chunk(pos: u64) -> Chunk {
        vec![Item::at(0, pos, pos, Cursor::default())]
    }

    /// Runs `dispatch` over `msgs` with `workers` threads that answer in reverse order of
    /// arrival, and reads the stage's output back.
    fn through(
        msgs: Vec<Msg>,
        fail_in_chunk: Option<u64>,
    ) -> Vec<std::result::Result<u64, String>> {
        let (in_tx, in_rx) = bounded::<Msg>(msgs.len() + 1);
        for m in msgs {
            in_tx.send(m).unwrap();
        }
        drop(in_tx);
        let (work_tx, work_rx) = bounded::<(Chunk, Sender<Partial>)>(16);
        let (slots_tx, slots_rx) = bounded::<Receiver<Partial>>(16);
        let window = Arc::new(TailWindow::new(1, 16, None));
        let info = StageInfo {
            name: "stage".into(),
            threads: 1,
            inline: false,
            queue_capacity: 16,
            pool: None,
        };
        let stats = PipelineStats::new(vec![info.clone(), info]);
        dispatch(
            Input::Direct(in_rx),
            &work_tx,
            &slots_tx,
            &window,
            stats.counters(1),
        );
        drop((work_tx, slots_tx));
        // Answer the last chunk first: the output must still come in input order.
        let work: Vec<_> = work_rx.iter().collect();
        for (mut c, reply) in work.into_iter().rev() {
            let err = (Some(c[0].index) == fail_in_chunk).then(|| Error::invalid("boom"));
            c.push(c[0].clone());
            reply.send((c, err)).unwrap();
        }
        let mut input = Input::Ordered {
            slots: slots_rx,
            window: WindowHold(window),
            waiting: None,
            failed: None,
        };
        std::iter::from_fn(|| input.recv())
            .map(|m| {
                m.map(|c| c[0].index * 10 + c.len() as u64)
                    .map_err(|e| e.to_string())
            })
            .collect()
    }

    #[test]
    fn replies_come_out_in_input_order_whatever_order_workers_answer_in() {
        let got = through((0..4).map(|p| Ok(chunk(p))).collect(), None);
        assert_eq!(got, [Ok(2), Ok(12), Ok(22), Ok(32)]);
    }

    #[test]
    fn a_chunk_that_failed_part_way_hands_on_its_outputs_then_its_error() {
        let got = through((0..4).map(|p| Ok(chunk(p))).collect(), Some(1));
        assert_eq!(got[..2], [Ok(2), Ok(12)]);
        assert!(matches!(&got[2], Err(e) if e.contains("boom")), "{got:?}");
        // An error in the input goes into its slot, after the chunks before it, and ends it.
        let msgs = vec![Ok(chunk(0)), Err(Error::invalid("upstream")), Ok(chunk(2))];
        let got = through(msgs, None);
        assert_eq!(got[0], Ok(2));
        assert!(
            matches!(&got[1], Err(e) if e.contains("upstream")),
            "{got:?}"
        );
        assert_eq!(got.len(), 2);
    }
}
