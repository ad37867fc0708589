//! sluice sources and sinks: local files, images with labels, text lines, JSON lines, CSV,
//! Parquet, TFRecord and WebDataset tar shards (plain or compressed: [`compressed`]), on local disks or object stores (`s3://`, `gs://`,
//! `http(s)://`).
//!
//! Every source here except WebDataset has random access: files by index; text, JSONL, CSV and
//! TFRecord through a record-offset index built once when the source is created (one fast scan, a few
//! bytes per record); Parquet through its footer's row-group row counts. So global shuffle and
//! sharding never read ahead. Tar shards have no index and stream.
//!
//! Each of these sources is described by one [`SourceSpec`] (`spec.rs`), which pipeline files,
//! workers and pickled datasets reopen it from.

pub mod arrow_conv;
pub mod arrow_source;
pub mod compressed;
pub mod csv;
pub mod files;
pub mod lines;
pub mod manifest;
pub mod npy;
mod open;
pub mod parquet;
pub mod pathlist;
pub mod shard_writer;
pub mod show;
pub mod sink;
pub mod spec;
pub mod store;
pub mod tfrecord;
pub mod webdataset;

pub use crate::csv::{CsvOnError, CsvOptions, CsvSource, CsvType};
pub use crate::parquet::ParquetSource;
pub use arrow_source::ArrowSource;
pub use files::{expand_path_list, expand_paths, FilesSource, LabelMode};
pub use lines::{JsonlOptions, LinesFormat, LinesSource, Utf8Errors};
pub use open::csv_options;
pub use pathlist::PathList;
pub use sink::SinkOptions;
pub use spec::{ShuffleShards, SourceSpec, WdsIndex};
pub use store::Blob;
pub use tfrecord::{TfrecordOptions, TfrecordSource};
pub use webdataset::{ShardShuffle, WdsOptions, WebDatasetSource, DEFAULT_MAX_MEMBER_SIZE};
// Re-exported so the facade and the bindings use the same arrow types as this crate.
pub use {arrow_array, arrow_schema};
