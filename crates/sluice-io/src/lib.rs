//! sluice sources: local files, images with labels, text lines and JSON lines.
//!
//! Every source here has random access: files by index; text and JSONL through a line-offset
//! index built once when the source is created (one fast scan, 8 bytes per line), so global
//! shuffle and sharding never read ahead.

pub mod files;
pub mod lines;

pub use files::{expand_paths, FilesSource, LabelMode};
pub use lines::{LinesFormat, LinesSource, Utf8Errors};
