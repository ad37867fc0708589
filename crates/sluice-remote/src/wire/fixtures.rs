//! Items for the wire tests.

use std::sync::Arc;

use sluice_core::codec::testing::same_bytes;
use sluice_core::exec::Restart;
use sluice_core::{Cursor, Error, Item, Sample, SampleRef};

use super::error::RemoteError;

/// Item `i` carrying `sample`, with a path on even items and a restart record on every
/// third (both travel: resume after re-sequencing stages needs them).
pub(crate) fn item(i: u64, sample: Sample) -> Item {
    Item {
        epoch: 2,
        index: i,
        sub: i * 3,
        source_index: 100 + i,
        rows: 1,
        cursor: Cursor {
            epoch: 2,
            pos: i,
            ord: 1,
        },
        path: i
            .is_multiple_of(2)
            .then(|| Arc::from(format!("/data/{i}.jpg").as_str())),
        outer: (i % 3 == 1).then(|| {
            vec![Restart {
                slot: 2,
                input: Cursor {
                    epoch: 2,
                    pos: i + 7,
                    ord: 0,
                },
                input_index: i,
                counter: 4 * i,
            }]
            .into()
        }),
        sample,
        rows_at: None,
    }
}

/// Asserts two chunks are the same, samples compared by their bytes (NaN != NaN).
pub(crate) fn same(a: &[Item], b: &[Item]) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert_eq!(
            (x.epoch, x.index, x.sub, x.source_index, x.rows, x.cursor),
            (y.epoch, y.index, y.sub, y.source_index, y.rows, y.cursor)
        );
        assert_eq!((&x.path, &x.outer), (&y.path, &y.outer));
        same_bytes(&x.sample, &y.sample);
    }
}

/// A Python exception in sample 42 of epoch 1, as a worker reports it.
pub(crate) fn in_sample_error() -> Error {
    Error::InSample {
        op: "my_udf".into(),
        sample: SampleRef {
            epoch: 1,
            index: 42,
            path: Some("/a.jpg".into()),
        },
        source: Box::new(Error::External {
            message: "ValueError: boom".into(),
            source: Arc::new(RemoteError("ValueError: boom".into())),
        }),
    }
}
