//! [`ParquetSource::scan`]: the whole source in order, row group by row group, decoded ahead
//! on a small pool and handed out as slices of its Arrow columns.

use std::sync::Arc;

use arrow_array::RecordBatch;
use sluice_core::{Column, Error, Result, Sample, Value};

use super::ParquetSource;
use crate::arrow_conv::ArrowColumn;

impl ParquetSource {
    /// Every row group in order, as batches of at most `rows` rows of its decoded columns
    /// (zero-copy slices), `threads` threads decoding the next row groups meanwhile. A scan
    /// reads each row group once, so it bypasses the shared cache (and evicts nothing).
    ///
    /// ```no_run
    /// let src = sluice_io::ParquetSource::open(&["corpus/*.parquet".into()], None)?;
    /// for batch in src.scan(2, 65536) {
    ///     let batch = batch?; // one `Value::Column` per column
    /// }
    /// # Ok::<(), sluice_core::Error>(())
    /// ```
    pub fn scan(&self, threads: usize, rows: usize) -> impl Iterator<Item = Result<Sample>> + Send {
        let groups: Vec<(usize, usize)> = self
            .inner
            .files
            .iter()
            .enumerate()
            .flat_map(|(fi, f)| {
                f.rg_starts
                    .windows(2)
                    .enumerate()
                    .filter(|(_, w)| w[1] > w[0])
                    .map(move |(rg, _)| (fi, rg))
            })
            .collect();
        let threads = threads.clamp(1, groups.len().max(1));
        let (jobs, queue) = crossbeam_channel::unbounded::<ScanJob>();
        for _ in 0..threads {
            let (me, queue) = (self.clone(), queue.clone());
            let _ = std::thread::Builder::new()
                .name("sluice-parquet-scan".into())
                .spawn(move || {
                    // Ends when the scan is dropped (its job sender with it).
                    for (fi, rg, reply) in queue {
                        let _ = reply.send(me.inner.files[fi].decode(rg));
                    }
                });
        }
        let mut scan = Scan {
            names: self.inner.names.clone(),
            source: self.clone(),
            groups: groups.into_iter(),
            jobs,
            pending: std::collections::VecDeque::new(),
            current: None,
            rows: rows.max(1),
        };
        // Row groups in flight: one per thread plus one ready, so memory stays bounded.
        for _ in 0..threads + 1 {
            scan.dispatch();
        }
        scan
    }
}

type ScanJob = (usize, usize, crossbeam_channel::Sender<Result<RecordBatch>>);

/// [`ParquetSource::scan`]'s iterator: replies come back in row-group order because each
/// job carries its own reply channel, queued in order.
struct Scan {
    names: Vec<sluice_core::Name>,
    source: ParquetSource,
    groups: std::vec::IntoIter<(usize, usize)>,
    jobs: crossbeam_channel::Sender<ScanJob>,
    pending: std::collections::VecDeque<crossbeam_channel::Receiver<Result<RecordBatch>>>,
    /// The row group being handed out and the next row of it.
    current: Option<(RecordBatch, usize)>,
    rows: usize,
}

impl Scan {
    fn dispatch(&mut self) {
        if let Some((fi, rg)) = self.groups.next() {
            // Its decoding waits for the bytes: in a bucket, ask for those of the row groups
            // after it now, or the scan runs one request's latency per `threads + 1` groups.
            super::file::fetch_from(&self.source.inner.files, fi, rg);
            let (reply, rx) = crossbeam_channel::bounded(1);
            if self.jobs.send((fi, rg, reply)).is_ok() {
                self.pending.push_back(rx);
            }
        }
    }
}

impl Iterator for Scan {
    type Item = Result<Sample>;
    fn next(&mut self) -> Option<Result<Sample>> {
        loop {
            if let Some((batch, at)) = &mut self.current {
                if *at < batch.num_rows() {
                    let n = self.rows.min(batch.num_rows() - *at);
                    let mut out = Sample::with_capacity(self.names.len());
                    for (name, a) in self.names.iter().zip(batch.columns()) {
                        let column = ArrowColumn(a.slice(*at, n));
                        out.set(name.clone(), Value::Column(Column(Arc::new(column))));
                    }
                    *at += n;
                    return Some(Ok(out));
                }
                self.current = None;
            }
            let rx = self.pending.pop_front()?;
            let batch = rx
                .recv()
                .unwrap_or_else(|_| Err(Error::Internal("a Parquet scan thread ended".into())));
            self.dispatch();
            match batch {
                Ok(b) => self.current = Some((b, 0)),
                Err(e) => {
                    // Nothing after an error.
                    self.pending.clear();
                    return Some(Err(e));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{eight_row_groups, ids};
    use super::*;

    #[test]
    fn scan_hands_out_every_row_group_in_order_in_slices() {
        let dir = tempfile::tempdir().unwrap();
        let src = eight_row_groups(&dir);
        for (threads, rows, sizes) in [(3, 700, vec![500; 8]), (1, 200, [200, 200, 100].repeat(8))]
        {
            let mut next = 0i64;
            let mut got = Vec::new();
            for batch in src.scan(threads, rows) {
                let column = batch.unwrap().get("id").unwrap().clone();
                let Value::Column(c) = &column else {
                    panic!("not the source's column: {column:?}")
                };
                let n = c.0.len() as i64;
                assert_eq!(column.materialized().unwrap(), ids(next..next + n));
                next += n;
                got.push(n as usize);
            }
            assert_eq!(got, sizes);
        }
        // Dropped after one batch: the scan ends (its threads with it) without reading on.
        let mut scan = src.scan(2, 100);
        assert!(scan.next().unwrap().is_ok());
        drop(scan);
    }
}
