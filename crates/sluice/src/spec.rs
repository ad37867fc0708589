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
use sluice_io::SourceSpec;
use sluice_ops::OpSpec;
use sluice_relational::{Agg, BlockingOptions};

use crate::dataset::{Dataset, IterOptions};

mod file;
mod keys;

pub use file::read_small_file;

/// The names a pipeline file may give: sources (`source = ...`), steps (`step = ...`) and the
/// ops of a `map` step (`op = ...`), each read from its spec enum. The CLI's help lists them.
///
/// ```
/// let (sources, steps, ops) = sluice::spec_vocabulary();
/// assert!(sources.iter().any(|s| s == "read_parquet"));
/// assert!(steps.iter().any(|s| s == "shuffle_buffer"));
/// assert!(ops.iter().any(|s| s == "image.random_resized_crop"));
/// ```
pub fn spec_vocabulary() -> (Vec<String>, Vec<String>, Vec<String>) {
    (
        keys::variant_names::<SourceSpec>("source"),
        keys::variant_names::<StepSpec>("step"),
        OpSpec::names(),
    )
}

/// One step in a pipeline file. Unknown keys are refused in every kind: a `map`'s keys but
/// `on_error` go to its op, whose spec refuses what it does not know, and every other kind
/// is derived with `deny_unknown_fields` (serde cannot check a kind with a flattened field
/// itself: the flattened op would see its keys as unknown, so `map` is read by hand).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "step",
    rename_all = "snake_case",
    deny_unknown_fields,
    remote = "Self"
)]
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
        /// `false`: the same permutation every epoch.
        #[serde(default = "yes")]
        reshuffle_each_epoch: bool,
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
        #[serde(default = "one")]
        block: u64,
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

impl Serialize for StepSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        StepSpec::serialize(self, s)
    }
}

impl<'de> Deserialize<'de> for StepSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use serde::de::Error as _;
        let mut v = serde_json::Value::deserialize(d)?;
        let is_map = v.get("step").and_then(serde_json::Value::as_str) == Some("map");
        match v.as_object_mut() {
            Some(keys) if is_map => {
                keys.remove("step");
                let on_error = match keys.remove("on_error") {
                    Some(e) => OnError::deserialize(e).map_err(D::Error::custom)?,
                    None => OnError::default(),
                };
                let op = OpSpec::from_value(serde_json::Value::Object(std::mem::take(keys)))
                    .map_err(D::Error::custom)?;
                Ok(StepSpec::Map { op, on_error })
            }
            _ => StepSpec::deserialize(v).map_err(D::Error::custom),
        }
    }
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

fn one() -> u64 {
    1
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
    /// The source: [`sluice_io::SourceSpec`], the form workers reopen sources from too.
    pub source: SourceSpec,
    #[serde(default)]
    pub steps: Vec<StepSpec>,
}

impl PipelineSpec {
    /// Parses `text` as `format` ("toml" or "json"). An unknown key anywhere (top level,
    /// `[source]`, a step, an op's arguments, an aggregate) is refused, naming the key, where
    /// it is (`steps[1] (step = "batch")`), the keys allowed there and the closest one.
    pub fn parse(text: &str, format: &str) -> Result<Self> {
        Self::parse_named(text, format, None)
    }

    fn parse_named(text: &str, format: &str, path: Option<&str>) -> Result<Self> {
        // The typed parse first: it is the one that runs for good files, and its error
        // knows the line. The tree is parsed only to say which part failed.
        let (failed, line, tree) = match format {
            "toml" => match toml::from_str::<PipelineSpec>(text) {
                Ok(spec) => return Ok(spec),
                Err(e) => {
                    let line = e
                        .span()
                        .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
                    let tree = toml::from_str::<serde_json::Value>(text).ok();
                    (e.message().to_string(), line, tree)
                }
            },
            "json" => match serde_json::from_str::<PipelineSpec>(text) {
                Ok(spec) => return Ok(spec),
                Err(e) => {
                    let message = e.to_string();
                    let message = match message.rsplit_once(" at line ") {
                        Some((m, _)) => m.to_string(),
                        None => message,
                    };
                    let tree = serde_json::from_str::<serde_json::Value>(text).ok();
                    (message, Some(e.line()).filter(|l| *l > 0), tree)
                }
            },
            other => {
                return Err(Error::invalid(format!(
                    "unknown pipeline format '{other}' (use .toml or .json)"
                )))
            }
        };
        let reason = tree
            .as_ref()
            .and_then(keys::locate)
            .unwrap_or_else(|| keys::explain(&failed));
        Err(keys::file_error(path, line, &reason))
    }

    /// Reads a pipeline file, choosing the format by extension. Only a regular file of at
    /// most [`file::MAX_FILE_SIZE`] bytes (16 MiB) is read ([`read_small_file`]).
    pub fn load(path: &str) -> Result<Self> {
        let text = read_small_file(path, "pipeline file")?;
        let ext = path.rsplit('.').next().unwrap_or("");
        PipelineSpec::parse_named(&text, ext, Some(path))
    }
    /// The dataset and run options this file describes.
    pub fn build(&self) -> Result<(Dataset, IterOptions)> {
        let mut ds = Dataset::open(&self.source)?;
        for step in &self.steps {
            ds = match step {
                StepSpec::Map { op, on_error } => ds.map(op.build()?, *on_error, None)?,
                StepSpec::Batch { size, drop_last } => ds.batch(*size, *drop_last)?,
                StepSpec::Shuffle {
                    seed,
                    reshuffle_each_epoch,
                } => ds.shuffle_with(*seed, *reshuffle_each_epoch)?,
                StepSpec::ShuffleBuffer { size, seed } => ds.shuffle_buffer(*size, *seed)?,
                StepSpec::Shard {
                    rank,
                    world_size,
                    equal,
                    block,
                } => ds.shard_in_blocks(*rank, *world_size, *equal, *block)?,
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

    fn refused(text: &str, format: &str) -> String {
        let e = PipelineSpec::parse(text, format).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
        e.to_string()
    }

    #[test]
    fn unknown_keys_are_refused_everywhere_naming_step_and_closest_key() {
        let head = "[source]\nsource = \"range\"\nn = 3\n";
        // Each was ignored before: a step's typo ran the step with its default.
        for (step, want) in [
            (
                "[[steps]]\nstep = \"batch\"\nsize = 2\ndrop_lst = true\n",
                "line 4: steps[0] (step = \"batch\"): unknown key 'drop_lst' (allowed: size, \
                 drop_last); did you mean 'drop_last'?",
            ),
            (
                "[[steps]]\nstep = \"shuffle\"\n[[steps]]\nstep = \"shuffle\"\nsed = 5\n",
                "steps[1] (step = \"shuffle\"): unknown key 'sed' (allowed: seed, \
                 reshuffle_each_epoch); did you mean 'seed'?",
            ),
            (
                "[[steps]]\nstep = \"map\"\nop = \"select\"\nfeilds = [\"id\"]\n",
                "steps[0] (step = \"map\"): select: unknown key 'feilds' (allowed: fields); did \
                 you mean 'fields'?",
            ),
            (
                "[[steps]]\nstep = \"groupby\"\naggs = [{name = \"n\", func = \"count\", \
                 feild = \"id\"}]\n",
                "steps[0] (step = \"groupby\"): unknown key 'feild' (allowed: name, func, \
                 field); did you mean 'field'?",
            ),
            (
                "[[steps]]\nstep = \"bach\"\nsize = 2\n",
                "steps[0] (step = \"bach\"): unknown name 'bach'",
            ),
        ] {
            let e = refused(&format!("{head}{step}"), "toml");
            assert!(e.contains(want), "{e}");
        }
        let e = refused("[source]\nsource = \"range\"\nm = 3\n", "toml");
        assert!(
            e.contains("[source]: ") && e.contains("unknown key 'm' (allowed: n)"),
            "{e}"
        );
        let e = refused("sed = 1\n[source]\nsource = \"range\"\nn = 3\n", "toml");
        assert!(
            e.contains("top level: unknown key 'sed'") && e.contains("did you mean 'seed'?"),
            "{e}"
        );
        let json = r#"{"source": {"source": "range", "n": 3},
            "steps": [{"step": "batch", "size": 2, "drop_lst": true}]}"#;
        let e = refused(json, "json");
        assert!(
            e.starts_with(
                "pipeline file, line 2: steps[0] (step = \"batch\"): unknown key 'drop_lst'"
            ),
            "{e}"
        );
        // Good files still parse, every step kind and a map's on_error included.
        let good = r#"{"source": {"source": "range", "n": 4}, "steps": [
            {"step": "map", "op": "noop", "on_error": "skip"}, {"step": "shuffle", "seed": 1},
            {"step": "batch", "size": 2, "drop_last": true}]}"#;
        PipelineSpec::parse(good, "json").unwrap().build().unwrap();
    }

    #[test]
    fn a_pipeline_file_that_is_not_a_regular_file_is_refused() {
        let e = PipelineSpec::load("/dev/zero").unwrap_err().to_string();
        assert!(
            e.contains("/dev/zero: not a regular file (a character device)"),
            "{e}"
        );
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
