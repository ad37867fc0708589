//! Rows a consumer takes in bulk: a pipeline that only reads a columnar source (Parquet)
//! and hands its rows to a consumer that turns each into an object of its own (the Python
//! iterator's dicts) reads them a batch at a time, as the source's own columns.
//!
//! Read one by one, every row became a sample first — a field list and a copy of each
//! string, made on a worker and freed on the consumer's thread — and then a dict. Read a
//! batch at a time, the consumer builds its objects straight from the columns, column by
//! column. Each row keeps its own cursor ([`crate::exec::RowsAt`]), so checkpoints, resumes
//! and error messages are the plain read's, row for row; a batch whose columnar read fails
//! is read again row by row, so the rows before a bad one are still delivered and the
//! error names it, as before.

use crate::plan::physical::{PhysicalPlan, StageKind, Variant};

/// Rows read together: enough that the per-batch costs vanish, few enough that the first
/// row comes soon and a prefetched batch is small.
pub const ROWS_PER_READ: usize = 1024;

/// Batches of rows kept ready for the consumer: a row group's worth (16k rows in the
/// benchmark corpus), so it has rows at hand while the reader waits for the next row group
/// to be decoded. With 4 the loop waited a third of the time (5.3 M rows/s against 7.1 M,
/// `benchmarks/parquet_rows.py --copies 10`); 32 gained nothing over 16.
const ROW_BATCHES_AHEAD: usize = 16;

/// Turns `plan`, when it is only the read of a local columnar source (a single read-only
/// chain), into a batch that reads [`ROWS_PER_READ`] rows at a time; true if it did.
/// A source that fetches ahead over the network keeps the plain read, whose chunks drive
/// its fetching.
pub fn read_rows_in_batches(plan: &mut PhysicalPlan) -> bool {
    let source = &plan.source.source;
    if !source.columnar() || source.will_need_ahead() > 0 || plan.source.order.is_none() {
        return false;
    }
    let [stage] = plan.stages.as_mut_slice() else {
        return false;
    };
    let read_only = matches!(&stage.kind, StageKind::Chain { read: true, ops } if ops.is_empty());
    if !read_only || stage.variant.is_pool() {
        return false;
    }
    stage.kind = StageKind::Batch {
        size: ROWS_PER_READ,
        drop_last: false,
        per_epoch: false,
        pad: Vec::new(),
        read: true,
        ragged: true,
        slots: Vec::new(),
    };
    if stage.variant != Variant::Inline {
        stage.variant = Variant::Threads { threads: 1 };
    }
    stage.queue_depth = ROW_BATCHES_AHEAD;
    plan.delivery.rows = true;
    plan.delivery.columns = true;
    true
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::error::Result;
    use crate::exec::{Cursor, ExecOptions, Execution, Next, ResumePoint};
    use crate::plan::logical::{LogicalPlan, SourceNode};
    use crate::plan::lower::{lower, LowerOptions};
    use crate::sample::Sample;
    use crate::source::{RangeSource, Source};

    /// `RangeSource` that says it is columnar (its batches are collated rows).
    #[derive(Debug)]
    struct Columnar(RangeSource, u64);

    impl Source for Columnar {
        fn name(&self) -> &str {
            "columnar"
        }
        fn spec(&self) -> serde_json::Value {
            serde_json::json!({"columnar": self.1})
        }
        fn len(&self) -> Option<u64> {
            self.0.len()
        }
        fn get(&self, index: u64) -> Result<Sample> {
            if index == self.1 {
                return Err(crate::error::Error::data("a bad row"));
            }
            self.0.get(index)
        }
        fn columnar(&self) -> bool {
            true
        }
        fn clone_arc(&self) -> crate::source::SourceRef {
            let n = self.0.len().unwrap_or(0);
            Arc::new(Columnar(RangeSource::new(n), self.1))
        }
    }

    fn plan(n: u64, bad: u64, shuffle: bool) -> PhysicalPlan {
        let src = Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(Columnar(
            RangeSource::new(n),
            bad,
        )))));
        let node = if shuffle {
            Arc::new(LogicalPlan::Shuffle(
                crate::plan::logical::ShuffleNode::try_new(src, Some(3)).unwrap(),
            ))
        } else {
            src
        };
        lower(&node, &LowerOptions::default()).unwrap()
    }

    /// Every output of a run as (rows, the position after each), taking rows in bulk.
    fn run(
        plan: &PhysicalPlan,
        resume: Option<ResumePoint>,
    ) -> (Vec<i64>, Vec<Cursor>, Option<String>) {
        let mut bulk = plan.clone();
        assert!(read_rows_in_batches(&mut bulk));
        let opts = ExecOptions {
            resume,
            ..Default::default()
        };
        let mut exec = Execution::start(&bulk, opts).unwrap();
        let (mut ids, mut at) = (vec![], vec![]);
        loop {
            match exec.next_timeout(std::time::Duration::from_secs(10)) {
                Next::Item(s) => {
                    ids.push(s.get("id").unwrap().as_int().unwrap());
                    at.push(exec.position().unwrap().cursor);
                }
                Next::Rows(s, n) => {
                    let col = crate::collate::uncollate(s).unwrap();
                    assert_eq!(col.len(), n);
                    for row in col {
                        exec.deliver_rows(1);
                        ids.push(row.get("id").unwrap().as_int().unwrap());
                        at.push(exec.position().unwrap().cursor);
                    }
                }
                Next::Err(e) => return (ids, at, Some(e.to_string())),
                Next::Timeout => panic!("no output in 10 s"),
                Next::End => return (ids, at, None),
            }
        }
    }

    #[test]
    fn a_lone_read_of_a_columnar_source_reads_batches() {
        let mut p = plan(3000, u64::MAX, false);
        assert!(read_rows_in_batches(&mut p));
        assert!(matches!(
            p.stages[0].kind,
            StageKind::Batch {
                size: ROWS_PER_READ,
                read: true,
                ..
            }
        ));
        // Not twice, and not a pipeline with ops or a source that is not columnar.
        assert!(!read_rows_in_batches(&mut p));
        let src = Arc::new(LogicalPlan::Source(SourceNode::new(Arc::new(
            RangeSource::new(9),
        ))));
        let mut plain = lower(&src, &LowerOptions::default()).unwrap();
        assert!(!read_rows_in_batches(&mut plain));
    }

    #[test]
    fn rows_in_bulk_keep_each_rows_cursor_and_resume_like_the_plain_read() {
        for shuffle in [false, true] {
            let p = plan(2500, u64::MAX, shuffle);
            let (ids, at, err) = run(&p, None);
            assert_eq!(err, None);
            let plain: Vec<i64> = Execution::start(&p, ExecOptions::default())
                .unwrap()
                .map(|s| s.unwrap().get("id").unwrap().as_int().unwrap())
                .collect();
            assert_eq!(ids, plain);
            // Each row's own position, as the plain read gives.
            assert_eq!(
                at[7],
                Cursor {
                    epoch: 0,
                    pos: 7,
                    ord: 0
                }
            );
            // Resuming after row 1500 (inside the second batch) goes on with row 1501.
            let rp = ResumePoint {
                cursor: at[1500],
                outer: vec![],
            };
            let (rest, _, _) = run(&p, Some(rp));
            assert_eq!(rest, ids[1501..]);
        }
    }

    #[test]
    fn a_batch_that_fails_to_read_delivers_its_rows_before_the_bad_one() {
        let p = plan(3000, 1100, false);
        let (ids, _, err) = run(&p, None);
        assert_eq!(ids, (0..1100).collect::<Vec<i64>>());
        let err = err.expect("the bad row's error");
        assert!(err.contains("a bad row") && err.contains("1100"), "{err}");
        // What a failed conversion of a row in a batch names.
        let mut bulk = p.clone();
        read_rows_in_batches(&mut bulk);
        let mut exec = Execution::start(&bulk, ExecOptions::default()).unwrap();
        assert!(matches!(
            exec.next_timeout(std::time::Duration::from_secs(10)),
            Next::Rows(_, 1024)
        ));
        let e = exec.row_error(5, crate::error::Error::data("too big"));
        assert!(
            e.to_string().contains("columnar") && e.to_string().contains('5'),
            "{e}"
        );
    }
}
