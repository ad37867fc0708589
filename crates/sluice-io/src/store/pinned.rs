//! Ranged reads pinned to the version of an object that its open saw.
//!
//! A ranged GET names no version. An object rewritten after it was opened (a dataset
//! regenerated in place, a shard uploaded again) would answer with the new version's bytes
//! at the old version's offsets: a Parquet footer or a tar index read at the open, applied
//! to other data, which decodes without a complaint whenever the layout happens to line up;
//! and a cache download whose parts mix two versions, stored under the first one's ETag for
//! every later epoch and process of the node. So each ranged read carries `If-Match` with the
//! ETag the open saw, and a store that answers 412 fails the read with an error that says the
//! object changed ([`super::store_error`]), as a local file that changed under its reader does.

use std::ops::Range;

use bytes::Bytes;
use object_store::path::Path as ObjPath;
use object_store::{
    coalesce_ranges, GetOptions, GetRange, ObjectStore, OBJECT_STORE_COALESCE_DEFAULT,
};

/// The `If-Match` value that pins reads of `url` to `etag`. None for a weak ETag (`W/"…"`):
/// RFC 9110 compares `If-Match` strongly, so a server that gives one (a web server compressing
/// on the fly) would refuse every read. None for a plain web server (`http(s)://`) too: there
/// an ETag is the answering host's (nginx's is the file's mtime and size), and the replicas
/// behind one name, holding the same bytes under other mtimes, would refuse each other's.
/// The buckets (`s3://`, `gs://`, `az://`) give one ETag per version of an object.
pub(super) fn if_match(url: &str, etag: Option<&str>) -> Option<String> {
    let web = super::connect::is_web_url(url);
    etag.filter(|e| !web && !e.starts_with("W/"))
        .map(str::to_owned)
}

/// The bytes of `range`, refused by the store (`Error::Precondition`) when the object's ETag
/// is no longer `if_match`.
pub(super) async fn get_range(
    store: &dyn ObjectStore,
    path: &ObjPath,
    range: Range<u64>,
    if_match: Option<String>,
) -> object_store::Result<Bytes> {
    let opts = GetOptions {
        range: Some(GetRange::Bounded(range)),
        if_match,
        ..Default::default()
    };
    store.get_opts(path, opts).await?.bytes().await
}

/// [`get_range`] for several ranges, nearby ones coalesced into one request and the requests
/// made concurrently, as `ObjectStore::get_ranges` does.
pub(super) async fn get_ranges(
    store: &dyn ObjectStore,
    path: &ObjPath,
    ranges: &[Range<u64>],
    if_match: Option<&str>,
) -> object_store::Result<Vec<Bytes>> {
    coalesce_ranges(
        ranges,
        |r| get_range(store, path, r, if_match.map(str::to_owned)),
        OBJECT_STORE_COALESCE_DEFAULT,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use object_store::{ObjectStoreExt, PutPayload};

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn weak_etags_and_web_servers_pin_nothing() {
        let s3 = "s3://b/k";
        assert_eq!(if_match(s3, Some("\"abc\"")).as_deref(), Some("\"abc\""));
        assert_eq!(
            if_match("gs://b/k", Some("\"abc\"")).as_deref(),
            Some("\"abc\"")
        );
        assert_eq!(if_match(s3, Some("W/\"abc\"")), None);
        assert_eq!(if_match(s3, None), None);
        assert_eq!(if_match("https://host/k", Some("\"abc\"")), None);
        assert_eq!(if_match("http://host/k", Some("\"abc\"")), None);
    }

    #[test]
    fn a_read_pinned_to_a_version_is_refused_once_the_object_is_rewritten() {
        block_on(async {
            let store = InMemory::new();
            let path = ObjPath::from("data/a.bin");
            let v1 = store
                .put(&path, PutPayload::from_static(b"0123456789"))
                .await
                .unwrap();
            let pin = v1.e_tag.as_deref();
            let got = get_ranges(&store, &path, &[0..2, 8..10], pin)
                .await
                .unwrap();
            assert_eq!(got, [&b"01"[..], &b"89"[..]]);
            // The same size, other bytes: without the pin the old offsets read the new data.
            store
                .put(&path, PutPayload::from_static(b"abcdefghij"))
                .await
                .unwrap();
            let e = get_ranges(&store, &path, &[0..2, 6..8], pin)
                .await
                .unwrap_err();
            assert!(matches!(e, object_store::Error::Precondition { .. }), "{e}");
            let e = get_range(&store, &path, 4..6, if_match("s3://b/data/a.bin", pin))
                .await
                .unwrap_err();
            assert!(matches!(e, object_store::Error::Precondition { .. }), "{e}");
            // Unpinned (a store that gives no ETag), the read goes on.
            assert_eq!(
                get_range(&store, &path, 4..6, None).await.unwrap(),
                &b"ef"[..]
            );
        });
    }
}
