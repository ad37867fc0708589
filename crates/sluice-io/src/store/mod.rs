//! Where bytes live: local files or object stores (`s3://`, `gs://`, `az://`, `http(s)://`),
//! behind one [`Blob`] type with positional reads, so every format reads local disks and
//! buckets the same way.
//!
//! Object stores are reached through the `object_store` crate on one small shared tokio runtime:
//! requests are ranged, at most [`MAX_REQUESTS`] are in flight per store, and transient failures
//! are retried with exponential backoff. Credentials are found as the clouds' SDKs find them
//! ([`connect`]'s module doc); [`configure_storage`] passes options explicitly.
//! Whole objects wanted soon are fetched ahead of need by [`ReadAhead`].

pub mod ahead;
mod blob;
pub mod cache;
mod chunked;
mod connect;
pub mod disk;
pub mod hedge;
mod list;
mod pinned;
mod reuse;
mod tail;

pub use ahead::ReadAhead;
pub use blob::Blob;
pub use cache::CacheSpec;
pub use connect::{configure_storage, MAX_REQUESTS};
pub use list::{expand, expand_list, is_prefix};

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use bytes::Bytes;
use object_store::path::Path as ObjPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use sluice_core::{Error, Result};

/// Bytes fetched per request when a remote object is read sequentially.
const STREAM_CHUNK: usize = 8 << 20;

static RUNTIME: LazyLock<std::result::Result<tokio::runtime::Runtime, String>> =
    LazyLock::new(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("sluice-io")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    });

static STORES: LazyLock<Mutex<HashMap<String, connect::Connected>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// Runs an object-store future to completion from synchronous code.
pub(crate) fn block_on<F: std::future::Future>(fut: F) -> Result<F::Output> {
    match &*RUNTIME {
        Ok(rt) => Ok(rt.block_on(fut)),
        Err(e) => Err(Error::Internal(format!(
            "cannot start the I/O runtime: {e}"
        ))),
    }
}

/// A fetch running on the I/O runtime.
pub type Fetch<T> = tokio::task::JoinHandle<Result<T>>;

/// Waits for a fetch started with [`Blob::fetch_ahead`] (or [`ReadAhead`]).
pub fn join<T>(fetch: Fetch<T>) -> Result<T> {
    block_on(fetch)?.map_err(|e| Error::Internal(format!("fetch task failed: {e}")))?
}

/// Starts fetching the whole object at `url` (a local path is read on the runtime too).
pub(crate) fn spawn_fetch(url: &str) -> Result<tokio::task::JoinHandle<Result<Bytes>>> {
    let rt = match &*RUNTIME {
        Ok(rt) => rt,
        Err(e) => {
            return Err(Error::Internal(format!(
                "cannot start the I/O runtime: {e}"
            )))
        }
    };
    let url = url.to_string();
    if !is_url(&url) {
        return Ok(rt.spawn_blocking(move || {
            std::fs::read(&url)
                .map(Bytes::from)
                .map_err(|e| Error::io(&url, e))
        }));
    }
    let (store, path, lat) = store_for(&url)?;
    Ok(rt.spawn(cache::fetch_object(store, ObjPath::from(path), url, lat)))
}

/// Whether `entry` names an object in a store rather than a local path.
///
/// ```
/// assert!(sluice_io::store::is_url("s3://bucket/key.parquet"));
/// assert!(sluice_io::store::is_url("gs://bucket/key.parquet"));
/// assert!(sluice_io::store::is_url("az://container/key.parquet"));
/// assert!(!sluice_io::store::is_url("data/key.parquet"));
/// ```
pub fn is_url(entry: &str) -> bool {
    connect::is_store_url(entry)
}

/// Splits a URL into (store key, object path): `s3://b/k/x` → (`s3://b`, `k/x`).
fn split_url(url: &str) -> Result<(String, String)> {
    let parsed =
        url::Url::parse(url).map_err(|e| Error::invalid(format!("bad URL '{url}': {e}")))?;
    let host = parsed
        .host_str()
        .ok_or_else(|| Error::invalid(format!("bad URL '{url}': no bucket or host")))?;
    // `abfss://container@account.dfs.core.windows.net/…` names its container as the user.
    let user = match parsed.username() {
        "" => String::new(),
        u => format!("{u}@"),
    };
    let base = match parsed.port() {
        Some(p) => format!("{}://{user}{host}:{p}", parsed.scheme()),
        None => format!("{}://{user}{host}", parsed.scheme()),
    };
    let path = parsed.path().trim_start_matches('/');
    // Globs are matched by us, not by the URL parser: undo its percent-encoding.
    let path = path
        .replace("%5B", "[")
        .replace("%5D", "]")
        .replace("%2A", "*")
        .replace("%3F", "?");
    Ok((base, path))
}

/// The (cached) store serving `url`, the object path inside it and the store's latencies.
fn store_for(url: &str) -> Result<(Arc<dyn ObjectStore>, String, Arc<hedge::Latency>)> {
    let (base, path) = split_url(url)?;
    let lat = hedge::latency_of(&base);
    let mut stores = STORES.lock().unwrap_or_else(|p| p.into_inner());
    let store = match stores.get(&base) {
        Some(c) => c.store.clone(),
        None => {
            let c = connect::connect(&base)?;
            stores.insert(base, c.clone());
            c.store
        }
    };
    Ok((store, path, lat))
}

/// Serves `base` (`s3://bucket`) from `store`: tests read through an in-memory store.
#[cfg(test)]
pub(crate) fn use_store(base: &str, store: Arc<dyn ObjectStore>) {
    let c = connect::Connected {
        store,
        lookups: "a test's store".into(),
    };
    (STORES.lock().unwrap_or_else(|p| p.into_inner())).insert(base.to_string(), c);
}

/// Drops the connected stores under `prefix`, so the next use reconnects (new options).
fn forget_stores(prefix: &str) {
    let mut stores = STORES.lock().unwrap_or_else(|p| p.into_inner());
    stores.retain(|base, _| !base.starts_with(prefix.trim_end_matches('/')));
}

/// Where the credentials of `url`'s store were looked for, for "access denied" messages.
fn lookups_of(url: &str) -> String {
    let base = split_url(url).map(|(b, _)| b).unwrap_or_default();
    let stores = STORES.lock().unwrap_or_else(|p| p.into_inner());
    match stores.get(&base) {
        Some(c) => format!("credentials looked up: {}", c.lookups),
        None => "no store connected".into(),
    }
}

/// Converts an object-store error on `url` into a sluice error that says what to do.
pub(crate) fn store_error(url: &str, e: object_store::Error) -> Error {
    use object_store::Error as E;
    match e {
        E::NotFound { .. } => Error::FileNotFound(format!("{url}: no such object")),
        // A ranged read pinned to the version its open saw ([`pinned`]).
        E::Precondition { .. } => Error::data(format!(
            "{url}: the object changed since it was opened (its ETag is not the one the \
             open saw); open it again"
        )),
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => Error::Io {
            path: url.to_string(),
            message: format!("access denied ({e}); {}", lookups_of(url)),
        },
        e => {
            // The causes hold the reason ("certificate not trusted", "connection refused").
            let mut text = e.to_string();
            let mut cause = std::error::Error::source(&e);
            while let Some(c) = cause {
                let more = c.to_string();
                if !text.contains(&more) {
                    text = format!("{text}: {more}");
                }
                cause = c.source();
            }
            let denied = [
                "InvalidAccessKeyId",
                "SignatureDoesNotMatch",
                "AccessDenied",
                "403",
                "credential",
                "Credential",
            ]
            .iter()
            .any(|k| text.contains(k));
            // Any failure may come from fetching credentials (a metadata endpoint that does
            // not answer, a token STS refused): say where they were looked for.
            let message = if denied {
                format!(
                    "access denied or no credentials ({text}); {}",
                    lookups_of(url)
                )
            } else {
                format!("{text}; {}", lookups_of(url))
            };
            Error::Io {
                path: url.to_string(),
                message,
            }
        }
    }
}

/// Deletes the objects directly under the bucket prefix `dir` whose file names `stale` picks
/// (what a writer's earlier, longer run left beside this run's output), in the store's bulk
/// requests (S3's DeleteObjects: up to 1,000 a request); one already gone is no error. What
/// this process saw of them is forgotten.
pub(crate) fn delete_where(dir: &str, stale: impl Fn(&str) -> bool) -> Result<()> {
    use futures::{StreamExt, TryStreamExt};
    let (store, prefix, _) = store_for(dir)?;
    let prefix = ObjPath::from(prefix.trim_end_matches('/'));
    let listed =
        block_on(store.list_with_delimiter(Some(&prefix)))?.map_err(|e| store_error(dir, e))?;
    let doomed: Vec<ObjPath> = listed
        .objects
        .into_iter()
        .map(|m| m.location)
        .filter(|l| l.filename().is_some_and(&stale))
        .collect();
    if doomed.is_empty() {
        return Ok(());
    }
    let base = dir.trim_end_matches('/');
    for at in &doomed {
        cache::forget(&format!("{base}/{}", at.filename().unwrap_or_default()));
    }
    let gone = block_on(
        store
            .delete_stream(futures::stream::iter(doomed.into_iter().map(Ok)).boxed())
            .map(|r| match r {
                Err(object_store::Error::NotFound { .. }) => Ok(()),
                r => r.map(|_| ()),
            })
            .try_collect::<Vec<()>>(),
    )?;
    gone.map(drop).map_err(|e| store_error(dir, e))
}

/// Writes `data` to `dest` (a local path or a URL) atomically: local files go to a hidden
/// temporary name beside `dest` and are renamed; object stores make an object visible only
/// when its upload completes.
pub fn write_atomic(dest: &str, data: impl Into<Bytes>) -> Result<()> {
    let data = data.into();
    if is_url(dest) {
        let (store, path, _) = store_for(dest)?;
        let put = block_on(store.put(&ObjPath::from(path), PutPayload::from_bytes(data)))?;
        // What a listing said the object was no longer is: an open after this must ask.
        cache::forget(dest);
        put.map_err(|e| store_error(dest, e))?;
        return Ok(());
    }
    // Written through an exclusively created temporary: a link planted at a predictable
    // name would have the write go wherever it points.
    let dest_path = std::path::Path::new(dest);
    let (tmp, mut file) = crate::sink::create_temp(dest_path)?;
    let written =
        std::io::Write::write_all(&mut file, &data).map_err(|e| Error::io(tmp.display(), e));
    drop(file);
    if let Err(e) =
        written.and_then(|()| std::fs::rename(&tmp, dest_path).map_err(|e| Error::io(dest, e)))
    {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(())
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
