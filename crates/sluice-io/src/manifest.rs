//! The manifest `write_shards` writes last (`index.json`: the format, each shard's file name
//! and sample count), read back as the dataset's definition.
//!
//! A directory or bucket prefix holding one is read as the shards it names, in its order, and
//! each shard must still hold the samples it names. A listing of the folder is not the
//! dataset: while a conversion rewrites it, or after one was interrupted, the folder holds
//! shards of two runs side by side, and a reader would take them all without a word. A
//! conversion writes a manifest saying it is writing (`"complete": false`) before its first
//! shard; a folder with that one, or with `write_shards` tar shards and no manifest at all
//! (the `.idx` files beside them say what wrote them: a folder of an earlier version), is a
//! conversion that has not finished, and is refused rather than read in part. (Mosaic's MDS
//! and LitData read their `index.json` as the dataset's definition too.)

use std::collections::HashSet;

use sluice_core::{Error, Result};

use crate::compressed::{expand, is_folder};
use crate::shard_writer::ShardFormat;

/// The name of the manifest in a `write_shards` output folder.
pub const MANIFEST: &str = "index.json";

/// Where the manifest of folder `dir` (a path or a bucket prefix) is.
pub(crate) fn path_in(dir: &str) -> String {
    format!("{}/{MANIFEST}", dir.trim_end_matches('/'))
}

/// The files of `entries` for a reader of `format`'s shards (`exts`: the extensions its
/// listings keep), with the samples the manifest says each holds (`None` where no manifest
/// names it): an entry that is a directory or a bucket prefix with a manifest of `format`
/// gives the shards it names; every other entry is expanded as [`crate::compressed::expand`]
/// does.
///
/// ```
/// use sluice_core::{Sample, Value};
/// use sluice_io::manifest::expand_shards;
/// use sluice_io::shard_writer::{write_shards, ShardFormat, ShardOptions};
/// let dir = std::env::temp_dir().join("sluice-doc-manifest");
/// let rows = (0..3).map(|i| Ok(Sample::from_pairs([("txt", Value::Str(format!("row {i}").into()))])));
/// let opts = ShardOptions { format: ShardFormat::Webdataset, shard_bytes: 1 << 20 };
/// write_shards(rows, &dir.display().to_string(), &opts)?;
/// let (files, samples) = expand_shards(&[dir.display().to_string()], &["tar"], ShardFormat::Webdataset)?;
/// assert!(files[0].ends_with("part-00000.tar") && samples == [Some(3)]);
/// # Ok::<(), sluice_core::Error>(())
/// ```
pub fn expand_shards(
    entries: &[String],
    exts: &[&str],
    format: ShardFormat,
) -> Result<(Vec<String>, Vec<Option<u64>>)> {
    let (mut files, mut samples) = (Vec::new(), Vec::new());
    for entry in entries {
        if !is_folder(entry) {
            let found = expand(std::slice::from_ref(entry), Some(exts))?;
            samples.extend(found.iter().map(|_| None));
            files.extend(found);
            continue;
        }
        // One listing: the shards, the manifest and `.idx` files together.
        let with: Vec<&str> = exts.iter().copied().chain(["json", "idx"]).collect();
        let listed = expand(std::slice::from_ref(entry), Some(&with))?;
        let dir = entry.trim_end_matches('/');
        let manifest = path_in(dir);
        let named = match listed.contains(&manifest) {
            true => read(&manifest, format)?,
            false => None,
        };
        let keep = |p: &String| {
            crate::compressed::inner_extension(p).is_some_and(|e| exts.contains(&e.as_str()))
        };
        match named {
            Some(named) => {
                let present: HashSet<&String> = listed.iter().collect();
                for (file, n) in named {
                    let path = format!("{dir}/{file}");
                    if !present.contains(&path) {
                        return Err(Error::data(format!(
                            "{manifest} names {file}, which is not there: the folder is being \
                             rewritten, or lost a shard; write it again"
                        )));
                    }
                    files.push(path);
                    samples.push(Some(n));
                }
            }
            None => {
                if format == ShardFormat::Webdataset
                    && listed.iter().any(|p| is_shard_index(dir, p))
                {
                    return Err(Error::data(format!(
                        "{entry}: write_shards tar shards without their {MANIFEST}: a \
                         conversion that did not finish, or is still writing; run it again \
                         (or name the shards, '{dir}/part-*.tar', to read them as they are)"
                    )));
                }
                let found: Vec<String> = listed.into_iter().filter(keep).collect();
                if found.is_empty() {
                    return Err(Error::FileNotFound(format!("{entry}: matched no files")));
                }
                samples.extend(found.iter().map(|_| None));
                files.extend(found);
            }
        }
    }
    Ok((files, samples))
}

/// Refuses shard `path` when the manifest said it holds `expected` samples and it holds
/// `found`: it was written again since the manifest was.
pub fn check_samples(path: &str, expected: Option<u64>, found: u64) -> Result<()> {
    match expected {
        Some(n) if n != found => Err(Error::data(format!(
            "{path}: {found} samples where its {MANIFEST} says {n}: the shard was written \
             again since; write the whole folder again"
        ))),
        _ => Ok(()),
    }
}

/// Whether `path` is a `write_shards` member index at the top of `dir` (`part-00000.tar.idx`).
fn is_shard_index(dir: &str, path: &str) -> bool {
    path.strip_prefix(dir)
        .and_then(|r| r.strip_prefix('/'))
        .and_then(|n| n.strip_prefix("part-"))
        .and_then(|n| n.strip_suffix(".tar.idx"))
        .is_some_and(|n| n.parse::<usize>().is_ok())
}

/// The shards a manifest names with their sample counts, when it is one of `format`'s (`None`
/// for another format's: the folder is read as a listing).
fn read(url: &str, format: ShardFormat) -> Result<Option<Vec<(String, u64)>>> {
    let bytes = crate::store::join(crate::store::spawn_fetch(url)?)?;
    let bad = |why: &str| Error::data(format!("{url}: {why}"));
    // Not JSON: some other file of that name, not a manifest (ours are written whole).
    let Ok(doc) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return Ok(None);
    };
    if doc.get("format").and_then(|f| f.as_str()) != Some(format.name()) {
        return Ok(None);
    }
    if doc.get("complete").and_then(|c| c.as_bool()) == Some(false) {
        let dir = url.strip_suffix(MANIFEST).unwrap_or(url);
        return Err(Error::data(format!(
            "{dir}: a write_shards conversion into it has not finished (its {MANIFEST} says so): \
             it is still writing, or it died; run it again (or name the shards, \
             '{dir}part-*', to read them as they are)"
        )));
    }
    let shards = doc
        .get("shards")
        .and_then(|s| s.as_array())
        .ok_or_else(|| bad("no \"shards\" list"))?;
    shards
        .iter()
        .map(|s| {
            let file = s.get("file").and_then(|f| f.as_str());
            let n = s.get("samples").and_then(|n| n.as_u64());
            match (file, n) {
                // A name with a separator would reach outside the folder.
                (Some(f), Some(n))
                    if !f.is_empty() && !f.contains(['/', '\\']) && f != "." && f != ".." =>
                {
                    Ok((f.to_string(), n))
                }
                _ => Err(bad(&format!(
                    "a shard entry without a plain file name and sample count: {s}"
                ))),
            }
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_indexes_are_told_from_other_files() {
        assert!(is_shard_index("s3://b/d", "s3://b/d/part-00003.tar.idx"));
        assert!(!is_shard_index(
            "s3://b/d",
            "s3://b/d/sub/part-00003.tar.idx"
        ));
        assert!(!is_shard_index("s3://b/d", "s3://b/d/shard-3.tar.idx"));
        assert!(!is_shard_index("s3://b/d", "s3://b/d/part-00003.tar"));
    }

    #[test]
    fn only_a_manifest_of_the_format_is_taken_and_no_path_in_a_name() {
        let dir = tempfile::tempdir().unwrap();
        let m = dir.path().join(MANIFEST);
        let m = m.to_str().unwrap();
        std::fs::write(
            m,
            br#"{"format":"parquet","shards":[{"file":"part-00000.parquet","samples":3}]}"#,
        )
        .unwrap();
        assert!(read(m, ShardFormat::Webdataset).unwrap().is_none());
        assert_eq!(
            read(m, ShardFormat::Parquet).unwrap(),
            Some(vec![("part-00000.parquet".to_string(), 3)])
        );
        std::fs::write(
            m,
            br#"{"format":"parquet","shards":[{"file":"../x.parquet","samples":3}]}"#,
        )
        .unwrap();
        let e = read(m, ShardFormat::Parquet).unwrap_err().to_string();
        assert!(e.contains("plain file name"), "{e}");
        std::fs::write(m, br#"{"format":"parquet","complete":false}"#).unwrap();
        let e = read(m, ShardFormat::Parquet).unwrap_err().to_string();
        assert!(e.contains("has not finished"), "{e}");
        assert!(read(m, ShardFormat::Webdataset).unwrap().is_none());
        // Some other file of that name is not a manifest: the folder is listed.
        std::fs::write(m, b"{not json").unwrap();
        assert!(read(m, ShardFormat::Parquet).unwrap().is_none());
        std::fs::write(m, br#"[{"file": "a"}]"#).unwrap();
        assert!(read(m, ShardFormat::Parquet).unwrap().is_none());
        assert!(check_samples("p", Some(3), 4).is_err());
        assert!(check_samples("p", Some(3), 3).is_ok() && check_samples("p", None, 9).is_ok());
    }
}
