//! The file form of a pipeline of built-in ops (TOML or JSON), e.g.
//!
//! ```toml
//! seed = 0
//! num_threads = 2
//! [source]
//! source = "read_images"
//! paths = ["data/images"]
//! labels = "parent_dir"
//! [[steps]]
//! step = "map"
//! op = "noop"
//! [[steps]]
//! step = "batch"
//! size = 64
//! ```

use serde::{Deserialize, Serialize};
use sluice_core::{Error, OnError, PackSpec, Result};
use sluice_io::{
    CsvOnError, CsvOptions, JsonlOptions, LabelMode, LinesFormat, LinesSource, ShardShuffle,
    WdsOptions, DEFAULT_MAX_MEMBER_SIZE,
};
use sluice_ops::OpSpec;
use sluice_relational::{Agg, BlockingOptions};

use crate::dataset::{Dataset, IterOptions};

/// A source in a pipeline file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "snake_case", deny_unknown_fields)]
pub enum SourceSpec {
    Range {
        n: u64,
    },
    ReadFiles {
        paths: Vec<String>,
    },
    ReadImages {
        paths: Vec<String>,
        #[serde(default)]
        labels: Option<String>,
    },
    ReadText {
        paths: Vec<String>,
        #[serde(default)]
        errors: Option<String>,
        /// `skip`: lines that are not UTF-8 (under `errors = "strict"`) are left out, counted.
        #[serde(default)]
        on_error: OnError,
    },
    ReadJsonl {
        paths: Vec<String>,
        /// Field → `int`, `float`, `bool` or `str`.
        #[serde(default)]
        schema: std::collections::BTreeMap<String, String>,
        #[serde(default)]
        on_error: OnError,
        #[serde(default)]
        errors: Option<String>,
    },
    ReadParquet {
        paths: Vec<String>,
        #[serde(default)]
        columns: Option<Vec<String>>,
    },
    ReadCsv {
        paths: Vec<String>,
        /// Column name → `int`, `float`, `bool` or `str`; others are inferred.
        #[serde(default)]
        schema: std::collections::BTreeMap<String, String>,
        #[serde(default)]
        delimiter: Option<char>,
        #[serde(default = "yes")]
        has_header: bool,
        #[serde(default)]
        on_error: OnError,
    },
    ReadWebdataset {
        paths: Vec<String>,
        #[serde(default)]
        rank: Option<u64>,
        #[serde(default)]
        world_size: Option<u64>,
        /// `true` (from the run's seed) or a seed: shard order permuted per epoch.
        #[serde(default)]
        shuffle_shards: Option<ShuffleShards>,
        /// `skip`: members that cannot be fields (links, devices, oversized, ...) are left
        /// out and counted.
        #[serde(default)]
        on_error: OnError,
        /// Members declaring more bytes are errors (default 1 GiB).
        #[serde(default)]
        max_member_size: Option<u64>,
    },
}

/// `shuffle_shards = true` or `shuffle_shards = <seed>`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ShuffleShards {
    Flag(bool),
    Seed(u64),
}

impl ShuffleShards {
    fn get(self) -> Option<ShardShuffle> {
        match self {
            ShuffleShards::Flag(false) => None,
            ShuffleShards::Flag(true) => Some(ShardShuffle::IterationSeed),
            ShuffleShards::Seed(s) => Some(ShardShuffle::Seed(s)),
        }
    }
}

/// One step in a pipeline file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum StepSpec {
    Map {
        #[serde(flatten)]
        op: OpSpec,
        #[serde(default)]
        on_error: OnError,
    },
    Batch {
        size: usize,
        #[serde(default)]
        drop_last: bool,
    },
    Shuffle {
        #[serde(default)]
        seed: Option<u64>,
    },
    ShuffleBuffer {
        size: usize,
        #[serde(default)]
        seed: Option<u64>,
    },
    Shard {
        rank: u64,
        world_size: u64,
        #[serde(default = "yes")]
        equal: bool,
    },
    Repeat {
        #[serde(default)]
        epochs: Option<u64>,
    },
    Prefetch {
        n: usize,
    },
    Take {
        n: u64,
    },
    /// GPT-style packing of a token field into blocks of `length` (see [`PackSpec`]).
    Pack {
        length: usize,
        #[serde(default = "ids_field")]
        field: String,
        #[serde(default)]
        separator: Option<i64>,
        #[serde(default)]
        drop_remainder: bool,
        #[serde(default)]
        pad_id: i64,
    },
    /// `sort(by, descending)`: blocking, spills beyond `memory_budget` bytes.
    Sort {
        by: OneOrMany<String>,
        #[serde(default)]
        descending: Option<OneOrMany<bool>>,
        #[serde(default)]
        memory_budget: Option<u64>,
    },
    /// `groupby(keys).aggregate(aggs)`, e.g. `aggs = [{name = "n", func = "count"},
    /// {name = "total", func = "sum", field = "x"}]`.
    Groupby {
        #[serde(default)]
        keys: Vec<String>,
        aggs: Vec<Agg>,
        #[serde(default)]
        memory_budget: Option<u64>,
    },
    /// `repartition(n)`.
    Repartition {
        n: usize,
        #[serde(default)]
        memory_budget: Option<u64>,
    },
}

/// A value or a list of them (`by = "x"` or `by = ["x", "y"]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany<T> {
    One(T),
    Many(Vec<T>),
}

impl<T: Clone> OneOrMany<T> {
    /// The values as a list.
    pub fn to_vec(&self) -> Vec<T> {
        match self {
            OneOrMany::One(v) => vec![v.clone()],
            OneOrMany::Many(v) => v.clone(),
        }
    }
}

fn blocking(memory_budget: Option<u64>, seed: u64) -> BlockingOptions {
    BlockingOptions {
        memory_budget: memory_budget.unwrap_or(sluice_relational::DEFAULT_MEMORY_BUDGET),
        seed,
        ..Default::default()
    }
}

fn ids_field() -> String {
    "input_ids".into()
}

fn yes() -> bool {
    true
}

/// The CSV reader options a pipeline file (or a binding) describes.
pub fn csv_options(
    schema: &std::collections::BTreeMap<String, String>,
    delimiter: Option<char>,
    has_header: bool,
    on_error: OnError,
) -> Result<CsvOptions> {
    let delimiter = match delimiter {
        None => b',',
        Some(c) if c.is_ascii() => c as u8,
        Some(c) => {
            return Err(Error::invalid(format!(
                "CSV delimiter must be ASCII, got '{c}'"
            )))
        }
    };
    Ok(CsvOptions {
        schema: schema
            .iter()
            .map(|(k, v)| Ok((k.clone(), v.parse()?)))
            .collect::<Result<_>>()?,
        delimiter,
        has_header,
        on_error: match on_error {
            OnError::Skip => CsvOnError::Skip,
            OnError::Raise => CsvOnError::Raise,
        },
    })
}

/// A whole pipeline file.
///
/// ```
/// let spec = sluice::PipelineSpec::parse(r#"
/// [source]
/// source = "range"
/// n = 10
/// [[steps]]
/// step = "batch"
/// size = 5
/// "#, "toml").unwrap();
/// let (ds, opts) = spec.build().unwrap();
/// assert_eq!(ds.iter(&opts).unwrap().count(), 2);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineSpec {
    #[serde(default)]
    pub seed: u64,
    #[serde(default)]
    pub num_threads: Option<usize>,
    pub source: SourceSpec,
    #[serde(default)]
    pub steps: Vec<StepSpec>,
}

impl PipelineSpec {
    /// Parses `text` as `format` ("toml" or "json").
    pub fn parse(text: &str, format: &str) -> Result<Self> {
        match format {
            "toml" => {
                toml::from_str(text).map_err(|e| Error::invalid(format!("pipeline file: {e}")))
            }
            "json" => serde_json::from_str(text)
                .map_err(|e| Error::invalid(format!("pipeline file: {e}"))),
            other => Err(Error::invalid(format!(
                "unknown pipeline format '{other}' (use .toml or .json)"
            ))),
        }
    }
    /// Reads a pipeline file, choosing the format by extension.
    pub fn load(path: &str) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        let ext = path.rsplit('.').next().unwrap_or("");
        PipelineSpec::parse(&text, ext)
    }
    /// The dataset and run options this file describes.
    pub fn build(&self) -> Result<(Dataset, IterOptions)> {
        let mut ds = match &self.source {
            SourceSpec::Range { n } => Dataset::range(*n),
            SourceSpec::ReadFiles { paths } => Dataset::read_files(paths)?,
            SourceSpec::ReadImages { paths, labels } => {
                let mode = match labels.as_deref() {
                    None | Some("none") => LabelMode::None,
                    Some("parent_dir") => LabelMode::ParentDir,
                    Some(other) => {
                        return Err(Error::invalid(format!(
                            "labels must be 'parent_dir' or none, got '{other}'"
                        )))
                    }
                };
                Dataset::read_images(paths, mode)?
            }
            SourceSpec::ReadText {
                paths,
                errors,
                on_error,
            } => {
                let opts = JsonlOptions {
                    errors: errors.as_deref().unwrap_or("strict").parse()?,
                    on_error: *on_error,
                    ..Default::default()
                };
                Dataset::from_source(std::sync::Arc::new(LinesSource::open_with(
                    paths,
                    LinesFormat::Text,
                    &opts,
                )?))
            }
            SourceSpec::ReadJsonl {
                paths,
                schema,
                on_error,
                errors,
            } => {
                let on_error = match on_error {
                    OnError::Raise => "raise",
                    OnError::Skip => "skip",
                };
                let errors = errors.as_deref().unwrap_or("strict");
                let opts = JsonlOptions::from_names(schema, on_error, errors)?;
                Dataset::read_jsonl_with(paths, &opts)?
            }
            SourceSpec::ReadParquet { paths, columns } => {
                Dataset::read_parquet(paths, columns.as_deref())?
            }
            SourceSpec::ReadCsv {
                paths,
                schema,
                delimiter,
                has_header,
                on_error,
            } => Dataset::read_csv(
                paths,
                &csv_options(schema, *delimiter, *has_header, *on_error)?,
            )?,
            SourceSpec::ReadWebdataset {
                paths,
                rank,
                world_size,
                shuffle_shards,
                on_error,
                max_member_size,
            } => {
                let ranks = match (rank, world_size) {
                    (Some(r), Some(n)) => Some((*r, *n)),
                    (None, None) => None,
                    _ => return Err(Error::invalid("give both rank and world_size, or neither")),
                };
                let shuffle = shuffle_shards.and_then(ShuffleShards::get);
                let opts = WdsOptions {
                    on_error: *on_error,
                    max_member_size: max_member_size.unwrap_or(DEFAULT_MAX_MEMBER_SIZE),
                };
                Dataset::read_webdataset_with(paths, ranks, shuffle, opts)?
            }
        };
        for step in &self.steps {
            ds = match step {
                StepSpec::Map { op, on_error } => ds.map(op.build()?, *on_error, None)?,
                StepSpec::Batch { size, drop_last } => ds.batch(*size, *drop_last)?,
                StepSpec::Shuffle { seed } => ds.shuffle(*seed)?,
                StepSpec::ShuffleBuffer { size, seed } => ds.shuffle_buffer(*size, *seed)?,
                StepSpec::Shard {
                    rank,
                    world_size,
                    equal,
                } => ds.shard(*rank, *world_size, *equal)?,
                StepSpec::Repeat { epochs } => ds.repeat(*epochs)?,
                StepSpec::Prefetch { n } => ds.prefetch(*n)?,
                StepSpec::Take { n } => ds.take(*n),
                StepSpec::Pack {
                    length,
                    field,
                    separator,
                    drop_remainder,
                    pad_id,
                } => ds.pack(PackSpec {
                    length: *length,
                    field: field.clone(),
                    separator: *separator,
                    drop_remainder: *drop_remainder,
                    pad_id: *pad_id,
                })?,
                StepSpec::Sort {
                    by,
                    descending,
                    memory_budget,
                } => ds.sort(
                    &by.to_vec(),
                    &descending
                        .as_ref()
                        .map(OneOrMany::to_vec)
                        .unwrap_or_default(),
                    &blocking(*memory_budget, self.seed),
                )?,
                StepSpec::Groupby {
                    keys,
                    aggs,
                    memory_budget,
                } => ds
                    .groupby(keys)
                    .aggregate(aggs.clone(), &blocking(*memory_budget, self.seed))?,
                StepSpec::Repartition { n, memory_budget } => {
                    ds.repartition(*n, &blocking(*memory_budget, self.seed))?
                }
            };
        }
        let opts = IterOptions {
            seed: self.seed,
            num_threads: self.num_threads,
            chunk_size: None,
            ..Default::default()
        };
        Ok((ds, opts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_and_ops_are_rejected() {
        let bad =
            r#"{"source": {"source": "range", "n": 3}, "steps": [{"step": "map", "op": "nope"}]}"#;
        assert!(PipelineSpec::parse(bad, "json").is_err());
        let bad = r#"{"source": {"source": "range", "n": 3}, "stepz": []}"#;
        assert!(PipelineSpec::parse(bad, "json").is_err());
    }

    #[test]
    fn relational_steps_run_from_a_file() {
        let text = r#"
[source]
source = "range"
n = 10
[[steps]]
step = "sort"
by = "id"
descending = true
memory_budget = 1000
[[steps]]
step = "groupby"
aggs = [{name = "n", func = "count"}, {name = "first", func = "max", field = "id"}]
"#;
        let (ds, opts) = PipelineSpec::parse(text, "toml").unwrap().build().unwrap();
        let rows: Vec<_> = ds.iter(&opts).unwrap().map(|r| r.unwrap()).collect();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].get("n").and_then(|v| v.as_int()), Some(10));
        assert_eq!(rows[0].get("first").and_then(|v| v.as_int()), Some(9));
        let bad = r#"{"source": {"source": "range", "n": 3},
            "steps": [{"step": "groupby", "aggs": [{"name": "s", "func": "median", "field": "id"}]}]}"#;
        assert!(PipelineSpec::parse(bad, "json").is_err());
    }

    #[test]
    fn json_pipeline_runs() {
        let text = r#"{"seed": 1, "source": {"source": "range", "n": 20},
            "steps": [{"step": "shuffle"}, {"step": "map", "op": "select", "fields": ["id"]},
                      {"step": "batch", "size": 8, "drop_last": true}]}"#;
        let (ds, opts) = PipelineSpec::parse(text, "json").unwrap().build().unwrap();
        assert_eq!(ds.iter(&opts).unwrap().count(), 2);
    }

    #[test]
    fn pack_step_from_a_pipeline_file() {
        let text = r#"{"source": {"source": "range", "n": 4},
            "steps": [{"step": "pack", "length": 4, "field": "id", "separator": 0}]}"#;
        let (ds, opts) = PipelineSpec::parse(text, "json").unwrap().build().unwrap();
        assert!(ds
            .plan()
            .to_string()
            .contains("pack(4, field=id, separator=Some(0)"));
        // `id` is a scalar, not a token list: the error names the step and the sample.
        let err = ds
            .iter(&opts)
            .unwrap()
            .next()
            .unwrap()
            .unwrap_err()
            .to_string();
        assert!(err.contains("pack") && err.contains("sample 0"), "{err}");
    }
}
