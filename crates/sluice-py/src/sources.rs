//! Bindings of the sources that can be reopened: each `read_*` builds its [`SourceSpec`] and
//! opens it through [`Dataset::open`] (the one path pipeline files, workers and unpickled
//! datasets take too), with the GIL released ([`crate::gil::released`]: listing and
//! opening files, maybe remote, can take long). `open_source` / `Dataset.source_spec` carry
//! a source as its spec JSON (what a dataset pickles as).

use std::collections::BTreeMap;

use pyo3::prelude::*;
use sluice::{
    CacheSpec, CsvType, Dataset, LabelMode, ShuffleShards, SourceSpec, Utf8Errors, WdsIndex,
};

use crate::dataset::PyDataset;
use crate::errors::IntoPy;

/// Opens `spec`; returns the dataset and the records left out at open (`on_error="skip"`).
fn open(py: Python<'_>, spec: SourceSpec) -> PyResult<(PyDataset, u64)> {
    let ds = crate::gil::released(py, || Dataset::open(&spec))?.py()?;
    let skipped = ds.plan().source().skipped();
    Ok((PyDataset { ds }, skipped))
}

fn open_ds(py: Python<'_>, spec: SourceSpec) -> PyResult<PyDataset> {
    open(py, spec).map(|(ds, _)| ds)
}

fn types(schema: BTreeMap<String, String>) -> PyResult<BTreeMap<String, CsvType>> {
    schema
        .into_iter()
        .map(|(k, t)| Ok((k, t.parse().py()?)))
        .collect()
}

/// Options for the object stores under a URL prefix (see `sluice.configure_storage`).
#[pyfunction]
fn configure_storage(prefix: &str, options: BTreeMap<String, String>) -> PyResult<()> {
    let options: Vec<(String, String)> = options.into_iter().collect();
    sluice::configure_storage(prefix, &options).py()
}

/// The dataset a pipeline file (TOML or JSON, as the CLI reads) describes, with the file's
/// `seed` and `num_threads`.
#[pyfunction]
fn load_pipeline(py: Python<'_>, path: &str) -> PyResult<(PyDataset, u64, Option<usize>)> {
    let (ds, opts) = crate::gil::released(py, || {
        sluice::PipelineSpec::load(path).and_then(|p| p.build())
    })?
    .py()?;
    Ok((PyDataset { ds }, opts.seed, opts.num_threads))
}

/// The text of a small file the user names (a plan, a profile), read as pipeline files are
/// ([`sluice::read_small_file`]: regular files of at most 16 MiB, UTF-8).
#[pyfunction]
fn read_small_file(py: Python<'_>, path: &str, what: &str) -> PyResult<String> {
    crate::gil::released(py, || sluice::read_small_file(path, what))?.py()
}

/// The dataset of a spec JSON ([`SourceSpec`], as `Dataset.source_spec` gives it), and its
/// records left out at open.
#[pyfunction]
fn open_source(py: Python<'_>, spec: &str) -> PyResult<(PyDataset, u64)> {
    let spec = SourceSpec::parse(spec).py()?;
    open(py, spec)
}

/// A source's `cache=(cache_dir, cache_limit)` (`None`: the default cache; limit 0: none).
type Cache = Option<(Option<String>, Option<u64>)>;

fn cache_spec(cache: Cache) -> Option<CacheSpec> {
    cache.map(|(dir, limit)| CacheSpec { dir, limit })
}

#[pyfunction]
#[pyo3(signature = (paths, cache=None))]
fn read_files(py: Python<'_>, paths: Vec<String>, cache: Cache) -> PyResult<PyDataset> {
    let cache = cache_spec(cache);
    open_ds(py, SourceSpec::ReadFiles { paths, cache })
}

#[pyfunction]
#[pyo3(signature = (paths, parent_dir_labels, cache=None))]
fn read_images(
    py: Python<'_>,
    paths: Vec<String>,
    parent_dir_labels: bool,
    cache: Cache,
) -> PyResult<PyDataset> {
    let cache = cache_spec(cache);
    let labels = if parent_dir_labels {
        LabelMode::ParentDir
    } else {
        LabelMode::None
    };
    open_ds(
        py,
        SourceSpec::ReadImages {
            paths,
            labels,
            cache,
        },
    )
}

#[pyfunction]
#[pyo3(signature = (paths, columns=None, cache=None))]
fn read_parquet(
    py: Python<'_>,
    paths: Vec<String>,
    columns: Option<Vec<String>>,
    cache: Cache,
) -> PyResult<PyDataset> {
    let cache = cache_spec(cache);
    open_ds(
        py,
        SourceSpec::ReadParquet {
            paths,
            columns,
            cache,
        },
    )
}

/// Returns the dataset and the number of malformed records skipped.
#[pyfunction]
#[pyo3(signature = (paths, schema, delimiter=None, has_header=true, on_error="raise", cache=None))]
fn read_csv(
    py: Python<'_>,
    paths: Vec<String>,
    schema: BTreeMap<String, String>,
    delimiter: Option<char>,
    has_header: bool,
    on_error: &str,
    cache: Cache,
) -> PyResult<(PyDataset, u64)> {
    let spec = SourceSpec::ReadCsv {
        paths,
        cache: cache_spec(cache),
        schema: types(schema)?,
        delimiter,
        has_header,
        on_error: on_error.parse().py()?,
    };
    open(py, spec)
}

/// Returns the dataset and the number of invalid lines skipped.
#[pyfunction]
#[pyo3(signature = (paths, schema, on_error="raise", errors="strict", cache=None))]
fn read_jsonl(
    py: Python<'_>,
    paths: Vec<String>,
    schema: BTreeMap<String, String>,
    on_error: &str,
    errors: &str,
    cache: Cache,
) -> PyResult<(PyDataset, u64)> {
    let spec = SourceSpec::ReadJsonl {
        paths,
        cache: cache_spec(cache),
        schema: types(schema)?,
        on_error: on_error.parse().py()?,
        errors: errors.parse::<Utf8Errors>().py()?,
    };
    open(py, spec)
}

/// Returns the dataset and the number of lines skipped (`on_error="skip"`: not UTF-8).
#[pyfunction]
#[pyo3(signature = (paths, on_error="raise", errors="strict", cache=None))]
fn read_text(
    py: Python<'_>,
    paths: Vec<String>,
    on_error: &str,
    errors: &str,
    cache: Cache,
) -> PyResult<(PyDataset, u64)> {
    let spec = SourceSpec::ReadText {
        paths,
        cache: cache_spec(cache),
        errors: errors.parse().py()?,
        on_error: on_error.parse().py()?,
    };
    open(py, spec)
}

/// `shuffle_shards`: shuffle the shard order per epoch; `shuffle_seed`: from this seed
/// rather than the iteration's. `on_error` and `max_member_size`: [`sluice::WdsOptions`].
/// `index`: read through member indexes (random access); `index_dir`: kept in that directory.
#[pyfunction]
#[pyo3(signature = (paths, rank=None, world_size=None, shuffle_shards=false, shuffle_seed=None,
                    on_error="raise", max_member_size=sluice::DEFAULT_MAX_MEMBER_SIZE, cache=None,
                    index=false, index_dir=None))]
#[allow(clippy::too_many_arguments)]
fn read_webdataset(
    py: Python<'_>,
    paths: Vec<String>,
    rank: Option<u64>,
    world_size: Option<u64>,
    shuffle_shards: bool,
    shuffle_seed: Option<u64>,
    on_error: &str,
    max_member_size: u64,
    cache: Cache,
    index: bool,
    index_dir: Option<String>,
) -> PyResult<PyDataset> {
    let index = match index_dir {
        Some(dir) => WdsIndex::Dir(dir),
        None => WdsIndex::Flag(index),
    };
    let shuffle_shards = match (shuffle_shards, shuffle_seed) {
        (true, Some(seed)) => ShuffleShards::Seed(seed),
        (on, _) => ShuffleShards::Flag(on),
    };
    let spec = SourceSpec::ReadWebdataset {
        paths,
        cache: cache_spec(cache),
        rank,
        world_size,
        shuffle_shards,
        on_error: on_error.parse().py()?,
        max_member_size: Some(max_member_size),
        index,
    };
    open_ds(py, spec)
}

/// `compression`: `"gzip"` or by extension; `index`: one index file per data file;
/// `features`: those to keep; `parse = false`: raw `{record: bytes}`.
#[pyfunction]
#[pyo3(signature = (paths, compression=None, index=None, features=None, parse=true, cache=None))]
fn read_tfrecord(
    py: Python<'_>,
    paths: Vec<String>,
    compression: Option<String>,
    index: Option<Vec<String>>,
    features: Option<Vec<String>>,
    parse: bool,
    cache: Cache,
) -> PyResult<PyDataset> {
    let spec = SourceSpec::ReadTfrecord {
        paths,
        cache: cache_spec(cache),
        compression,
        index,
        features,
        parse,
    };
    open_ds(py, spec)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(open_source, m)?)?;
    m.add_function(wrap_pyfunction!(load_pipeline, m)?)?;
    m.add_function(wrap_pyfunction!(read_small_file, m)?)?;
    m.add_function(wrap_pyfunction!(configure_storage, m)?)?;
    m.add_function(wrap_pyfunction!(read_files, m)?)?;
    m.add_function(wrap_pyfunction!(read_images, m)?)?;
    m.add_function(wrap_pyfunction!(read_parquet, m)?)?;
    m.add_function(wrap_pyfunction!(read_csv, m)?)?;
    m.add_function(wrap_pyfunction!(read_jsonl, m)?)?;
    m.add_function(wrap_pyfunction!(read_text, m)?)?;
    m.add_function(wrap_pyfunction!(read_webdataset, m)?)?;
    m.add_function(wrap_pyfunction!(read_tfrecord, m)?)?;
    Ok(())
}
