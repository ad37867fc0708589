//! [`SourceSpec::open`]: a spec to an open source, with the same checks and errors as the
//! API call it describes. Apart from the spec itself (`spec.rs`, which names no source), so
//! sources can name their spec without the spec's module naming them back.

use std::collections::BTreeMap;
use std::sync::Arc;

use sluice_core::{Error, OnError, RangeSource, Result, SourceRef};

use crate::csv::{CsvOnError, CsvOptions, CsvSource};
use crate::files::FilesSource;
use crate::lines::{JsonlOptions, LinesFormat, LinesSource};
use crate::parquet::ParquetSource;
use crate::spec::{CsvType, SourceSpec, DEFAULT_MAX_MEMBER_SIZE};
use crate::tfrecord::{TfrecordOptions, TfrecordSource};
use crate::webdataset::{WdsOptions, WebDatasetSource};

/// The CSV reader options `schema`, `delimiter`, `has_header` and `on_error` describe.
pub fn csv_options(
    schema: &BTreeMap<String, CsvType>,
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
        schema: schema.iter().map(|(k, t)| (k.clone(), *t)).collect(),
        delimiter,
        has_header,
        on_error: match on_error {
            OnError::Skip => CsvOnError::Skip,
            OnError::Raise => CsvOnError::Raise,
        },
    })
}

impl SourceSpec {
    /// Opens the source (expanding paths, indexing files, reading footers), with the same
    /// checks and errors as the API call it describes.
    pub fn open(&self) -> Result<SourceRef> {
        if let Some((paths, cache)) = self.paths_and_cache() {
            crate::store::cache::register(paths, cache)?;
        }
        Ok(match self {
            SourceSpec::Range { n } => Arc::new(RangeSource::new(*n)),
            SourceSpec::ReadFiles { paths, .. } => Arc::new(FilesSource::files(paths)?),
            SourceSpec::ReadImages { paths, labels, .. } => {
                Arc::new(FilesSource::images(paths, *labels)?)
            }
            SourceSpec::ReadText {
                paths,
                errors,
                on_error,
                ..
            } => {
                let opts = JsonlOptions {
                    schema: vec![],
                    on_error: *on_error,
                    errors: *errors,
                };
                Arc::new(LinesSource::open_with(paths, LinesFormat::Text, &opts)?)
            }
            SourceSpec::ReadJsonl {
                paths,
                schema,
                on_error,
                errors,
                ..
            } => {
                let opts = JsonlOptions {
                    schema: schema.iter().map(|(k, t)| (k.clone(), *t)).collect(),
                    on_error: *on_error,
                    errors: *errors,
                };
                Arc::new(LinesSource::open_with(paths, LinesFormat::Jsonl, &opts)?)
            }
            SourceSpec::ReadParquet { paths, columns, .. } => {
                Arc::new(ParquetSource::open(paths, columns.as_deref())?)
            }
            SourceSpec::ReadCsv {
                paths,
                schema,
                delimiter,
                has_header,
                on_error,
                ..
            } => Arc::new(CsvSource::open(
                paths,
                &csv_options(schema, *delimiter, *has_header, *on_error)?,
            )?),
            SourceSpec::ReadWebdataset {
                paths,
                rank,
                world_size,
                shuffle_shards,
                on_error,
                max_member_size,
                index,
                ..
            } => {
                let opts = WdsOptions {
                    on_error: *on_error,
                    max_member_size: max_member_size.unwrap_or(DEFAULT_MAX_MEMBER_SIZE),
                };
                if !index.is_off() {
                    if rank.is_some() || world_size.is_some() || shuffle_shards.get().is_some() {
                        return Err(Error::invalid(
                            "with index=, shuffle() is a global permutation and shard(rank, \
                             world_size) exact: use them rather than shuffle_shards, rank and \
                             world_size",
                        ));
                    }
                    return Ok(Arc::new(crate::webdataset::IndexedWebDataset::open(
                        paths,
                        index.clone(),
                        opts,
                    )?));
                }
                let ranks = match (rank, world_size) {
                    (Some(r), Some(n)) => Some((*r, *n)),
                    (None, None) => None,
                    _ => return Err(Error::invalid("give both rank and world_size, or neither")),
                };
                Arc::new(WebDatasetSource::open_with(
                    paths,
                    ranks,
                    shuffle_shards.get(),
                    opts,
                )?)
            }
            SourceSpec::ReadTfrecord {
                paths,
                compression,
                index,
                features,
                parse,
                ..
            } => Arc::new(TfrecordSource::open(
                paths,
                &TfrecordOptions {
                    compression: compression.clone(),
                    index: index.clone(),
                    features: features.clone(),
                    parse: *parse,
                },
            )?),
        })
    }
}
