//! [`SourceSpec`]: the one description of a source that can be reopened — by a pipeline file
//! (`[source]`), a worker process or Ray actor (a stage's package), or an unpickled Python
//! dataset — with one [`SourceSpec::open`].
//!
//! Every reopenable source's [`Source::ship`] is its `SourceSpec` serialized (file lists
//! expanded, CSV column types resolved, so a worker reopens exactly the same samples), and
//! its [`Source::spec`], the short form plans print and checkpoints fingerprint, is
//! [`SourceSpec::summary`] of that spec. Sources whose data lives in memory (`from_items`,
//! `from_arrow`, `sort` & co.) have no `SourceSpec`: their `ship` is `None` and their items
//! travel with their samples.
//!
//! `sluice-core` cannot name this type (this crate depends on it), so the trait carries the
//! serialized form (`serde_json::Value`) and only [`SourceSpec::from_json`] parses it. The
//! one spec written outside this module is core's `range`, `{"source": "range", "n": n}`,
//! which a test here pins.
//!
//! ```
//! use sluice_io::SourceSpec;
//! let spec = SourceSpec::from_json(&serde_json::json!({"source": "range", "n": 3}))?;
//! let src = spec.open()?;
//! assert_eq!(src.len(), Some(3));
//! assert_eq!(SourceSpec::from_json(&src.ship().unwrap())?, spec);
//! # Ok::<(), sluice_core::Error>(())
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};
#[cfg(doc)]
use sluice_core::Source;
use sluice_core::{Error, OnError, Result};

use crate::store::CacheSpec;

/// A source that can be reopened from this description (serde tag `source`, the API name).
/// Options left out take the API's defaults; `null` counts as left out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "snake_case", deny_unknown_fields)]
pub enum SourceSpec {
    /// `range(n)`: `{id: i}` for i in 0..n.
    Range { n: u64 },
    /// `read_files(paths)`.
    ReadFiles {
        paths: Vec<String>,
        /// The node-local cache of remote objects (`cache_dir`, `cache_limit`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cache: Option<CacheSpec>,
    },
    /// `read_images(paths, labels)`; a pipeline file's default is no labels.
    ReadImages {
        paths: Vec<String>,
        /// The node-local cache of remote objects (`cache_dir`, `cache_limit`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cache: Option<CacheSpec>,
        #[serde(default, deserialize_with = "or_default")]
        labels: LabelMode,
    },
    /// `read_text(paths, errors, on_error)`.
    ReadText {
        paths: Vec<String>,
        /// The node-local cache of remote objects (`cache_dir`, `cache_limit`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cache: Option<CacheSpec>,
        #[serde(default, deserialize_with = "or_default")]
        errors: Utf8Errors,
        /// `skip`: lines that are not UTF-8 (under `errors = "strict"`) are left out, counted.
        #[serde(default, deserialize_with = "or_default")]
        on_error: OnError,
    },
    /// `read_jsonl(paths, schema, on_error, errors)`.
    ReadJsonl {
        paths: Vec<String>,
        /// The node-local cache of remote objects (`cache_dir`, `cache_limit`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cache: Option<CacheSpec>,
        /// Field → `int`, `float`, `bool` or `str`.
        #[serde(default)]
        schema: BTreeMap<String, CsvType>,
        #[serde(default, deserialize_with = "or_default")]
        on_error: OnError,
        #[serde(default, deserialize_with = "or_default")]
        errors: Utf8Errors,
    },
    /// `read_parquet(paths, columns)`.
    ReadParquet {
        paths: Vec<String>,
        /// The node-local cache of remote objects (`cache_dir`, `cache_limit`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cache: Option<CacheSpec>,
        #[serde(default)]
        columns: Option<Vec<String>>,
    },
    /// `read_csv(paths, schema, delimiter, has_header, on_error)`.
    ReadCsv {
        paths: Vec<String>,
        /// The node-local cache of remote objects (`cache_dir`, `cache_limit`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cache: Option<CacheSpec>,
        /// Column name → `int`, `float`, `bool` or `str`; others are inferred.
        #[serde(default)]
        schema: BTreeMap<String, CsvType>,
        /// One ASCII character (default `,`).
        #[serde(default)]
        delimiter: Option<char>,
        #[serde(default = "yes")]
        has_header: bool,
        #[serde(default, deserialize_with = "or_default")]
        on_error: OnError,
    },
    /// `read_webdataset(paths, rank, world_size, shuffle_shards, on_error, max_member_size)`.
    ReadWebdataset {
        paths: Vec<String>,
        /// The node-local cache of remote objects (`cache_dir`, `cache_limit`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cache: Option<CacheSpec>,
        #[serde(default)]
        rank: Option<u64>,
        #[serde(default)]
        world_size: Option<u64>,
        /// `true` (from the run's seed) or a seed: shard order permuted per epoch.
        #[serde(default, deserialize_with = "or_default")]
        shuffle_shards: ShuffleShards,
        /// `skip`: members that cannot be fields (links, devices, oversized, ...) are left
        /// out and counted.
        #[serde(default, deserialize_with = "or_default")]
        on_error: OnError,
        /// Members declaring more bytes are errors (default 1 GiB).
        #[serde(default)]
        max_member_size: Option<u64>,
        /// `true` or a directory: samples read through a member index (random access).
        #[serde(default, skip_serializing_if = "WdsIndex::is_off")]
        index: WdsIndex,
    },
    /// `read_tfrecord(paths, compression, index, features, parse)`.
    ReadTfrecord {
        paths: Vec<String>,
        /// The node-local cache of remote objects (`cache_dir`, `cache_limit`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cache: Option<CacheSpec>,
        /// `"gzip"`, or `None`: by extension.
        #[serde(default)]
        compression: Option<String>,
        /// Index files (`offset length` per record), one per data file.
        #[serde(default)]
        index: Option<Vec<String>>,
        /// `tf.train.Example` features to keep; `None`: all.
        #[serde(default)]
        features: Option<Vec<String>>,
        /// `false`: samples are `{record: bytes}`.
        #[serde(default = "yes")]
        parse: bool,
    },
}

/// A CSV column's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CsvType {
    Int,
    Float,
    Bool,
    Str,
}

/// How `read_images` labels samples (`"none"`, `"parent_dir"` in a [`SourceSpec`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LabelMode {
    /// No label field.
    #[default]
    None,
    /// `label` = index of the parent directory's name among all sorted parent names
    /// (torchvision's ImageFolder convention).
    ParentDir,
}

/// What to do with invalid UTF-8 (`"strict"`, `"replace"` in a [`SourceSpec`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Utf8Errors {
    /// Fail naming the file and line.
    #[default]
    Strict,
    /// Replace invalid sequences with U+FFFD.
    Replace,
}

/// How shard order is shuffled per epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardShuffle {
    /// From the iteration's seed (`iter(seed=...)`).
    IterationSeed,
    /// From this seed, whatever the iteration's.
    Seed(u64),
}

/// Default [`crate::WdsOptions::max_member_size`]: 1 GiB. WebDataset members are single images,
/// clips or documents (kilobytes to hundreds of megabytes); a member above this is almost
/// surely a damaged or hostile header, and holding it costs at least its size in memory.
pub const DEFAULT_MAX_MEMBER_SIZE: u64 = 1 << 30;

/// `shuffle_shards = false | true | <seed>`: [`ShardShuffle`] in the spec's syntax.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ShuffleShards {
    Flag(bool),
    Seed(u64),
}

impl Default for ShuffleShards {
    fn default() -> Self {
        ShuffleShards::Flag(false)
    }
}

impl ShuffleShards {
    /// The shard shuffle this asks for (`None`: file order).
    pub fn get(self) -> Option<ShardShuffle> {
        match self {
            ShuffleShards::Flag(false) => None,
            ShuffleShards::Flag(true) => Some(ShardShuffle::IterationSeed),
            ShuffleShards::Seed(s) => Some(ShardShuffle::Seed(s)),
        }
    }
}

/// `index = false | true | "<dir>"` of `read_webdataset`: no index (stream the shards), the
/// index files beside the shards (`<shard>.idx`, built in memory where missing), or those in
/// a directory of their own (built and written there where missing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum WdsIndex {
    Flag(bool),
    Dir(String),
}

impl Default for WdsIndex {
    fn default() -> Self {
        WdsIndex::Flag(false)
    }
}

impl WdsIndex {
    /// No index: the shards stream.
    pub fn is_off(&self) -> bool {
        *self == WdsIndex::Flag(false)
    }
}

impl From<Option<ShardShuffle>> for ShuffleShards {
    fn from(s: Option<ShardShuffle>) -> Self {
        match s {
            None => ShuffleShards::Flag(false),
            Some(ShardShuffle::IterationSeed) => ShuffleShards::Flag(true),
            Some(ShardShuffle::Seed(s)) => ShuffleShards::Seed(s),
        }
    }
}

/// `null` and a missing key alike give the default.
fn or_default<'de, D: Deserializer<'de>, T: Deserialize<'de> + Default>(
    d: D,
) -> std::result::Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

fn yes() -> bool {
    true
}

impl SourceSpec {
    /// Parses the serialized form ([`Source::ship`], a pipeline file's `[source]`); errors
    /// name the source kind and what is wrong.
    pub fn from_json(spec: &serde_json::Value) -> Result<SourceSpec> {
        SourceSpec::deserialize(spec).map_err(|e| {
            let kind = spec.get("source").unwrap_or(&serde_json::Value::Null);
            Error::invalid(format!("cannot open source {kind}: {e}"))
        })
    }

    /// [`SourceSpec::from_json`] of JSON text.
    pub fn parse(text: &str) -> Result<SourceSpec> {
        let spec = serde_json::from_str(text)
            .map_err(|e| Error::invalid(format!("a source spec is not JSON: {e}")))?;
        SourceSpec::from_json(&spec)
    }

    /// The serialized form (what [`Source::ship`] returns).
    pub fn to_json(&self) -> serde_json::Value {
        // Plain strings, numbers, lists and maps with string keys: serialising cannot fail.
        serde_json::to_value(self).unwrap_or_default()
    }

    /// The paths (files, globs, URLs) the source reads, and its object cache settings.
    pub fn paths_and_cache(&self) -> Option<(&[String], Option<&CacheSpec>)> {
        match self {
            SourceSpec::Range { .. } => None,
            SourceSpec::ReadFiles { paths, cache }
            | SourceSpec::ReadImages { paths, cache, .. }
            | SourceSpec::ReadText { paths, cache, .. }
            | SourceSpec::ReadJsonl { paths, cache, .. }
            | SourceSpec::ReadParquet { paths, cache, .. }
            | SourceSpec::ReadCsv { paths, cache, .. }
            | SourceSpec::ReadWebdataset { paths, cache, .. }
            | SourceSpec::ReadTfrecord { paths, cache, .. } => Some((paths, cache.as_ref())),
        }
    }

    /// The API name (`read_csv`, ...), as [`Source::name`] gives it.
    pub fn name(&self) -> &'static str {
        match self {
            SourceSpec::Range { .. } => "range",
            SourceSpec::ReadFiles { .. } => "read_files",
            SourceSpec::ReadImages { .. } => "read_images",
            SourceSpec::ReadText { .. } => "read_text",
            SourceSpec::ReadJsonl { .. } => "read_jsonl",
            SourceSpec::ReadParquet { .. } => "read_parquet",
            SourceSpec::ReadCsv { .. } => "read_csv",
            SourceSpec::ReadWebdataset { .. } => "read_webdataset",
            SourceSpec::ReadTfrecord { .. } => "read_tfrecord",
        }
    }

    /// The short form plans print, checkpoints fingerprint and caches key on ([`Source::spec`]):
    /// counts instead of file lists. `len` and `skipped` are the opened source's
    /// ([`Source::len`], [`Source::skipped`]). Its keys are fixed — a change would make
    /// saved checkpoints refuse to load — and pinned by this module's tests.
    pub fn summary(&self, len: Option<u64>, skipped: u64) -> serde_json::Value {
        let summary = match self {
            SourceSpec::Range { n } => Summary::Range { n: *n },
            SourceSpec::ReadFiles { paths, .. } => Summary::ReadFiles {
                files: paths.len(),
                labels: false,
            },
            SourceSpec::ReadImages { paths, labels, .. } => Summary::ReadImages {
                files: paths.len(),
                labels: *labels == LabelMode::ParentDir,
            },
            SourceSpec::ReadText { paths, .. } => Summary::ReadText {
                files: paths.len(),
                lines: len,
                schema: None,
                skipped: (skipped > 0).then_some(skipped),
            },
            SourceSpec::ReadJsonl { paths, schema, .. } => Summary::ReadJsonl {
                files: paths.len(),
                lines: len,
                schema: (!schema.is_empty()).then_some(schema),
                skipped: (skipped > 0).then_some(skipped),
            },
            SourceSpec::ReadParquet { paths, columns, .. } => Summary::ReadParquet {
                files: paths.len(),
                rows: len,
                columns,
            },
            SourceSpec::ReadCsv { paths, .. } => Summary::ReadCsv {
                files: paths.len(),
                records: len,
                skipped,
            },
            SourceSpec::ReadWebdataset {
                paths,
                rank,
                world_size,
                shuffle_shards,
                on_error,
                max_member_size,
                index,
                ..
            } => Summary::ReadWebdataset {
                shards: paths.len(),
                samples: (!index.is_off()).then_some(len).flatten(),
                rank: rank.zip(*world_size),
                shuffle_shards: *shuffle_shards,
                // Only when set, so pipelines (and checkpoints) from before these options
                // keep their fingerprint.
                on_error: (*on_error == OnError::Skip).then_some(*on_error),
                max_member_size: max_member_size.filter(|&m| m != DEFAULT_MAX_MEMBER_SIZE),
            },
            SourceSpec::ReadTfrecord {
                paths,
                features,
                parse,
                ..
            } => Summary::ReadTfrecord {
                files: paths.len(),
                records: len,
                features,
                parse: *parse,
            },
        };
        serde_json::to_value(summary).unwrap_or_default()
    }

    /// [`SourceSpec::summary`] of `read_images` (else `read_files`) over `files` files,
    /// without the paths: a listing of a million files is not cloned to be counted.
    pub fn files_summary(images: bool, files: usize, labels: bool) -> serde_json::Value {
        let summary = if images {
            Summary::ReadImages { files, labels }
        } else {
            Summary::ReadFiles { files, labels }
        };
        serde_json::to_value(summary).unwrap_or_default()
    }
}

/// [`SourceSpec::summary`]'s form: what a source prints as (never parsed back).
#[derive(Serialize)]
#[serde(tag = "source", rename_all = "snake_case")]
enum Summary<'a> {
    Range {
        n: u64,
    },
    ReadFiles {
        files: usize,
        labels: bool,
    },
    ReadImages {
        files: usize,
        labels: bool,
    },
    ReadText {
        files: usize,
        lines: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        schema: Option<&'a BTreeMap<String, CsvType>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        skipped: Option<u64>,
    },
    ReadJsonl {
        files: usize,
        lines: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        schema: Option<&'a BTreeMap<String, CsvType>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        skipped: Option<u64>,
    },
    ReadParquet {
        files: usize,
        rows: Option<u64>,
        columns: &'a Option<Vec<String>>,
    },
    ReadCsv {
        files: usize,
        records: Option<u64>,
        skipped: u64,
    },
    ReadWebdataset {
        shards: usize,
        /// Samples, when read through an index (streams have no count).
        #[serde(skip_serializing_if = "Option::is_none")]
        samples: Option<u64>,
        rank: Option<(u64, u64)>,
        shuffle_shards: ShuffleShards,
        #[serde(skip_serializing_if = "Option::is_none")]
        on_error: Option<OnError>,
        #[serde(skip_serializing_if = "Option::is_none")]
        max_member_size: Option<u64>,
    },
    ReadTfrecord {
        files: usize,
        records: Option<u64>,
        features: &'a Option<Vec<String>>,
        parse: bool,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use sluice_core::{RangeSource, Source, SourceRef};

    fn reopen(src: &dyn Source) -> SourceRef {
        let shipped = src.ship().expect("reopenable");
        SourceSpec::from_json(&shipped).unwrap().open().unwrap()
    }

    fn rows(src: &dyn Source) -> Vec<sluice_core::Sample> {
        src.stream().unwrap().map(|r| r.unwrap()).collect()
    }

    fn tar(path: &std::path::Path, members: &[(&str, &[u8])]) {
        let mut b = tar::Builder::new(std::fs::File::create(path).unwrap());
        for (name, data) in members {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_cksum();
            b.append_data(&mut h, name, *data).unwrap();
        }
        b.finish().unwrap();
    }

    /// One of every reopenable source, over small real files in `dir`.
    fn every_source(dir: &std::path::Path) -> Vec<SourceSpec> {
        let d = |p: &str| dir.join(p).display().to_string();
        std::fs::create_dir_all(dir.join("img/cat")).unwrap();
        std::fs::create_dir_all(dir.join("img/dog")).unwrap();
        std::fs::write(dir.join("img/cat/a.png"), b"a").unwrap();
        std::fs::write(dir.join("img/dog/b.jpg"), b"bb").unwrap();
        std::fs::write(dir.join("t.txt"), b"one\nt\xffo\n\nthree\n").unwrap();
        std::fs::write(dir.join("j.jsonl"), "{\"id\": \"1\"}\nbad\n{\"id\": 2}\n").unwrap();
        std::fs::write(dir.join("a.tsv"), "x\ty\n1\t\"p\tq\"\n2\tr\n").unwrap();
        let items = (0..5).map(|i| {
            Ok(sluice_core::Sample::from_pairs([(
                "id",
                sluice_core::Value::Int(i),
            )]))
        });
        crate::sink::write_parquet(items, &d("pq"), &Default::default()).unwrap();
        tar(&dir.join("s0.tar"), &[("k1.txt", b"a"), ("k1.cls", b"0")]);
        tar(&dir.join("s1.tar"), &[("k2.txt", b"b"), ("k3.txt", b"c")]);
        let frames: Vec<u8> = [&b"r0"[..], b"r1"]
            .iter()
            .flat_map(|d| {
                let len = (d.len() as u64).to_le_bytes();
                let crc = |b: &[u8]| crate::tfrecord::masked_crc(b).to_le_bytes();
                [&len[..], &crc(&len), d, &crc(d)].concat()
            })
            .collect();
        std::fs::write(dir.join("r.tfrecord"), frames).unwrap();
        let schema = |pairs: &[(&str, CsvType)]| {
            pairs
                .iter()
                .map(|(k, t)| (k.to_string(), *t))
                .collect::<BTreeMap<_, _>>()
        };
        vec![
            SourceSpec::Range { n: 4 },
            SourceSpec::ReadFiles {
                paths: vec![d("t.txt"), d("j.jsonl")],
                cache: None,
            },
            SourceSpec::ReadImages {
                paths: vec![d("img")],
                cache: None,
                labels: LabelMode::ParentDir,
            },
            SourceSpec::ReadText {
                paths: vec![d("t.txt")],
                cache: None,
                errors: Utf8Errors::Strict,
                on_error: OnError::Skip,
            },
            SourceSpec::ReadJsonl {
                paths: vec![d("j.jsonl")],
                cache: None,
                schema: schema(&[("id", CsvType::Int)]),
                on_error: OnError::Skip,
                errors: Utf8Errors::Replace,
            },
            SourceSpec::ReadParquet {
                paths: vec![d("pq")],
                cache: None,
                columns: Some(vec!["id".into()]),
            },
            SourceSpec::ReadCsv {
                paths: vec![d("a.tsv")],
                cache: None,
                schema: schema(&[("x", CsvType::Float)]),
                delimiter: Some('\t'),
                has_header: true,
                on_error: OnError::Raise,
            },
            SourceSpec::ReadWebdataset {
                paths: vec![d("s*.tar")],
                cache: None,
                rank: Some(1),
                world_size: Some(2),
                shuffle_shards: ShuffleShards::Seed(3),
                on_error: OnError::Skip,
                max_member_size: Some(4096),
                index: Default::default(),
            },
            SourceSpec::ReadWebdataset {
                paths: vec![d("s*.tar")],
                cache: None,
                rank: None,
                world_size: None,
                shuffle_shards: Default::default(),
                on_error: OnError::Raise,
                max_member_size: Some(4096),
                index: WdsIndex::Dir(d("idx")),
            },
            SourceSpec::ReadTfrecord {
                paths: vec![d("r.tfrecord")],
                cache: None,
                compression: None,
                index: None,
                features: None,
                parse: false,
            },
        ]
    }

    #[test]
    fn every_source_reopens_from_what_it_ships() {
        let dir = tempfile::tempdir().unwrap();
        for spec in every_source(dir.path()) {
            let src = spec.open().unwrap();
            assert_eq!(src.name(), spec.name());
            let copy = reopen(&*src);
            assert_eq!(rows(&*copy), rows(&*src), "{}", spec.name());
            assert!(!rows(&*src).is_empty(), "{}", spec.name());
            assert_eq!(copy.spec(), src.spec(), "{}", spec.name());
            // Shipping is a fixpoint: the reopened source ships the same spec.
            assert_eq!(copy.ship(), src.ship(), "{}", spec.name());
            assert_eq!(src.spec()["source"], spec.name());
        }
    }

    #[test]
    fn shipped_specs_are_expanded_and_resolved() {
        let dir = tempfile::tempdir().unwrap();
        let specs = every_source(dir.path());
        let shipped = |i: usize| specs[i].open().unwrap().ship().unwrap();
        // The directory became its image files, in order.
        let images = shipped(2);
        assert_eq!(images["paths"].as_array().unwrap().len(), 2);
        assert!(images["paths"][0].as_str().unwrap().ends_with("cat/a.png"));
        assert_eq!(images["labels"], "parent_dir");
        // CSV columns' inferred types travel, so a worker never infers them differently.
        assert_eq!(shipped(6)["schema"], json!({"x": "float", "y": "str"}));
        assert_eq!(shipped(6)["delimiter"], "\t");
        // The glob became both shards; the rank split and shuffle stay options.
        let wds = shipped(7);
        assert_eq!(wds["paths"].as_array().unwrap().len(), 2);
        assert_eq!(
            (wds["rank"].clone(), wds["shuffle_shards"].clone()),
            (json!(1), json!(3))
        );
    }

    /// Core's `range` writes its spec by hand (core cannot name this type): pinned here.
    #[test]
    fn range_in_core_ships_this_spec() {
        let shipped = RangeSource::new(7).ship().unwrap();
        assert_eq!(shipped, SourceSpec::Range { n: 7 }.to_json());
        assert_eq!(RangeSource::new(7).spec(), shipped);
    }

    /// What sources print (and checkpoints fingerprint) is unchanged from the hand-written
    /// forms before this module: a change would make saved checkpoints refuse to load.
    #[test]
    fn summaries_keep_their_keys() {
        let dir = tempfile::tempdir().unwrap();
        let got: Vec<serde_json::Value> = every_source(dir.path())
            .iter()
            .map(|s| s.open().unwrap().spec())
            .collect();
        let want = [
            json!({"source": "range", "n": 4}),
            json!({"source": "read_files", "files": 2, "labels": false}),
            json!({"source": "read_images", "files": 2, "labels": true}),
            json!({"source": "read_text", "files": 1, "lines": 2, "skipped": 1}),
            json!({"source": "read_jsonl", "files": 1, "lines": 2, "schema": {"id": "int"},
                   "skipped": 1}),
            json!({"source": "read_parquet", "files": 1, "rows": 5, "columns": ["id"]}),
            json!({"source": "read_csv", "files": 1, "records": 2, "skipped": 0}),
            json!({"source": "read_webdataset", "shards": 2, "rank": [1, 2],
                   "shuffle_shards": 3, "on_error": "skip", "max_member_size": 4096}),
            // Indexed: its sample count, not where the index is kept.
            json!({"source": "read_webdataset", "shards": 2, "samples": 3, "rank": null,
                   "shuffle_shards": false, "max_member_size": 4096}),
            json!({"source": "read_tfrecord", "files": 1, "records": 2, "features": null,
                   "parse": false}),
        ];
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(want) {
            assert_eq!(*g, w);
        }
        let plain = SourceSpec::ReadWebdataset {
            paths: vec!["a.tar".into()],
            cache: None,
            rank: None,
            world_size: None,
            shuffle_shards: ShuffleShards::Flag(true),
            on_error: OnError::Raise,
            max_member_size: Some(DEFAULT_MAX_MEMBER_SIZE),
            index: Default::default(),
        };
        assert_eq!(
            plain.summary(None, 0),
            json!({"source": "read_webdataset", "shards": 1, "rank": null, "shuffle_shards": true})
        );
    }

    #[test]
    fn defaults_nulls_and_bad_specs() {
        let spec = SourceSpec::from_json(&json!({
            "source": "read_webdataset", "paths": ["a.tar"], "shuffle_shards": null,
            "on_error": null, "rank": null}))
        .unwrap();
        assert_eq!(
            spec,
            SourceSpec::ReadWebdataset {
                paths: vec!["a.tar".into()],
                cache: None,
                rank: None,
                world_size: None,
                shuffle_shards: ShuffleShards::Flag(false),
                on_error: OnError::Raise,
                max_member_size: None,
                index: Default::default(),
            }
        );
        let csv = SourceSpec::from_json(&json!({"source": "read_csv", "paths": ["a"],
            "schema": {"n": "int64", "s": "string"}}))
        .unwrap();
        let SourceSpec::ReadCsv {
            schema, has_header, ..
        } = csv
        else {
            panic!("{csv:?}")
        };
        assert!(has_header);
        assert_eq!(schema["n"], CsvType::Int);
        assert_eq!(schema["s"], CsvType::Str);
        for (bad, says) in [
            (json!({"source": "read_parquet", "paths": []}), ""),
            (
                json!({"source": "read_parquet", "path": ["a"]}),
                "unknown field `path`",
            ),
            (
                json!({"source": "read_orc", "paths": ["a"]}),
                "unknown variant `read_orc`",
            ),
            (
                json!({"source": "from_items", "len": 3}),
                "unknown variant `from_items`",
            ),
            (
                json!({"source": "read_images", "paths": ["a"], "labels": "dir"}),
                "parent_dir",
            ),
            (
                json!({"source": "read_jsonl", "paths": ["a"], "schema": {"x": "i8"}}),
                "int, float",
            ),
            (
                json!({"source": "read_text", "paths": ["a"], "errors": "ignore"}),
                "replace",
            ),
        ] {
            match SourceSpec::from_json(&bad) {
                Ok(spec) => assert!(spec.open().is_err(), "{bad}"),
                Err(e) => {
                    let msg = e.to_string();
                    assert!(
                        msg.contains(says) && msg.contains("cannot open source"),
                        "{msg}"
                    );
                }
            }
        }
        let half = json!({"source": "read_webdataset", "paths": ["a.tar"], "rank": 0});
        let err = SourceSpec::from_json(&half).unwrap().open().err().unwrap();
        assert!(err.to_string().contains("rank and world_size"), "{err}");
        let wide = json!({"source": "read_csv", "paths": ["a.csv"], "delimiter": "é"});
        let err = SourceSpec::from_json(&wide).unwrap().open().err().unwrap();
        assert!(err.to_string().contains("ASCII"), "{err}");
    }
}
