//! An object's size and version together with its last bytes, in one request: a ranged GET
//! of the suffix answers with the object's total size (`Content-Range`) and its ETag, what a
//! HEAD would have said. Opening a Parquet file costs one round trip where the HEAD and the
//! footer's read were two.

use bytes::Bytes;
use object_store::path::Path as ObjPath;
use object_store::{GetOptions, GetRange, ObjectMeta, ObjectStore};

use super::hedge::{hedged, Latency};

/// The object's metadata and its last `n` bytes (all of it when smaller), with where they
/// start. `None` when the store would not answer the suffix read as asked (an empty object,
/// a server that ignores ranges): the caller asks with a HEAD instead, which reports any
/// error the object really has.
pub(super) async fn head_with_tail(
    store: &dyn ObjectStore,
    path: &ObjPath,
    lat: &Latency,
    n: u64,
) -> Option<(ObjectMeta, u64, Bytes)> {
    let opts = GetOptions {
        range: Some(GetRange::Suffix(n)),
        ..Default::default()
    };
    hedged(lat, || async {
        let got = store.get_opts(path, opts.clone()).await?;
        let (meta, start) = (got.meta.clone(), got.range.start);
        Ok::<_, object_store::Error>((meta, start, got.bytes().await?))
    })
    .await
    .ok()
    .filter(|(meta, start, bytes)| *start + bytes.len() as u64 == meta.size)
}
