//! What a list of paths and URLs names: local paths, directories and globs, and the objects
//! under a bucket's prefix or matching its glob, listed many folders at once.

use std::sync::Arc;

use futures::TryStreamExt;
use object_store::path::Path as ObjPath;
use object_store::ObjectStore;
use sluice_core::{Error, Result};

use super::hedge::{hedged, latency_of, Latency};
use super::{block_on, cache, is_url, split_url, store_error, store_for};
use crate::files::{expand_path_list, has_extension};
use crate::pathlist::PathList;

/// Expands local paths, directories and globs (see [`expand_paths`]) and URLs: a URL ending in
/// `/` lists everything under that prefix, a URL with `*`, `?` or `[` lists its prefix and keeps
/// the matches, any other URL is taken as one object. `extensions` filters directory and
/// prefix listings. The result is sorted per entry, so file order (and thus sample indices)
/// is deterministic.
pub fn expand(entries: &[String], extensions: Option<&[&str]>) -> Result<Vec<String>> {
    Ok(expand_list(entries, extensions)?.to_vec())
}

/// [`expand`] into a [`PathList`] (one buffer for every path).
pub fn expand_list(entries: &[String], extensions: Option<&[&str]>) -> Result<PathList> {
    if entries.is_empty() {
        return Err(Error::invalid("no paths given"));
    }
    let mut out = PathList::default();
    for entry in entries {
        if !is_url(entry) {
            out.append(expand_path_list(std::slice::from_ref(entry), extensions)?);
            continue;
        }
        let is_glob = entry.contains(['*', '?', '[']);
        if !is_glob && !is_prefix(entry) {
            // A source opened now reads the object as it is now: what this process saw of
            // it for an earlier source must not answer for its cached copy (a conditional GET
            // checks it on the first read instead).
            cache::forget(entry);
            out.push(entry);
            continue;
        }
        let (store, path, _) = store_for(entry)?;
        let (base, _) = split_url(entry)?;
        let literal_end = path.find(['*', '?', '[']).unwrap_or(path.len());
        let prefix = match (is_glob, path[..literal_end].rfind('/')) {
            (true, Some(i)) => &path[..i],
            (true, None) => "",
            (false, _) => path.trim_end_matches('/'),
        };
        let pattern = if is_glob {
            Some(
                glob::Pattern::new(&path)
                    .map_err(|e| Error::invalid(format!("bad glob '{entry}': {e}")))?,
            )
        } else {
            None
        };
        // Listings are timed apart from reads: a listing of a thousand keys takes longer
        // than a photo's GET, and neither should set when the other is hedged.
        let lat = latency_of(&format!("{base} (listings)"));
        let keys = block_on(list_concurrently(store, prefix.to_string(), &lat))?
            .map_err(|e| store_error(entry, e))?;
        let mut found: Vec<String> = keys
            .into_iter()
            .map(|m| {
                let url = format!("{base}/{}", m.location);
                cache::saw(&url, m.size, m.e_tag.as_deref());
                (m.location.to_string(), url)
            })
            .filter(|(key, _)| match &pattern {
                Some(p) => p.matches_with(
                    key,
                    glob::MatchOptions {
                        require_literal_separator: true,
                        ..Default::default()
                    },
                ),
                None => extensions.is_none_or(|exts| {
                    has_extension(key.rsplit('/').next().unwrap_or_default(), exts)
                }),
            })
            .map(|(_, url)| url)
            .collect();
        if found.is_empty() {
            return Err(Error::FileNotFound(format!("{entry}: matched no objects")));
        }
        found.sort();
        found.iter().for_each(|f| out.push(f));
    }
    Ok(out)
}

/// Prefix listings run this many folder listings at once.
const LIST_CONCURRENCY: usize = 32;

/// Whether `url` names a prefix to list rather than one object or a glob: it ends in `/`, or
/// its last part has no extension (`s3://bucket/train`), as a directory path would be.
///
/// ```
/// use sluice_io::store::is_prefix;
/// assert!(is_prefix("s3://b/train/") && is_prefix("s3://b/train"));
/// assert!(!is_prefix("s3://b/train/a.jpg") && !is_prefix("s3://b/train/*.jpg"));
/// ```
pub fn is_prefix(url: &str) -> bool {
    let last = url.rsplit('/').next().unwrap_or_default();
    !url.contains(['*', '?', '[']) && (url.ends_with('/') || !last.contains('.'))
}

/// Every key under `prefix`: its first level is listed with a delimiter, then each folder
/// found there (an ImageNet class, a shard group) is listed on its own, many at once — one
/// paginated listing of a million keys would take a thousand round trips in a row. Each
/// listing is hedged as reads are (`lat`: the listings' own latencies): one stalled LIST held
/// a whole dataset's open for the stall.
async fn list_concurrently(
    store: Arc<dyn ObjectStore>,
    prefix: String,
    lat: &Latency,
) -> std::result::Result<Vec<object_store::ObjectMeta>, object_store::Error> {
    use futures::StreamExt;
    let prefix_path = (!prefix.is_empty()).then(|| ObjPath::from(prefix.as_str()));
    let top = hedged(lat, || store.list_with_delimiter(prefix_path.as_ref())).await?;
    let mut keys = top.objects;
    let listings = futures::stream::iter(top.common_prefixes.into_iter().map(|p| {
        let store = store.clone();
        async move { hedged(lat, || store.list(Some(&p)).try_collect::<Vec<_>>()).await }
    }))
    .buffer_unordered(LIST_CONCURRENCY)
    .try_collect::<Vec<Vec<_>>>()
    .await?;
    keys.extend(listings.into_iter().flatten());
    Ok(keys)
}
