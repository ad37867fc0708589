//! Data at rest: the Parquet, CSV, TFRecord and WebDataset sources, Arrow batches in memory, and the
//! Parquet / JSONL sinks, as `Dataset` constructors and methods.

use std::sync::Arc;

use sluice_core::{Execution, LogicalPlan, Result, Sample, StageKind};
use sluice_io::arrow_conv::Records;
use sluice_io::{
    sink, ArrowSource, CsvOptions, CsvSource, ParquetSource, ShardShuffle, SinkOptions, SourceSpec,
    TfrecordOptions, TfrecordSource, WdsOptions, WebDatasetSource,
};
use sluice_optimizer::RunContext;

use crate::dataset::{Dataset, IterOptions};

impl Dataset {
    /// The source `spec` describes ([`SourceSpec::open`]): what pipeline files and the
    /// bindings' `read_*` functions open, and pickled datasets reopen.
    pub fn open(spec: &SourceSpec) -> Result<Self> {
        Ok(Dataset::from_source(spec.open()?))
    }

    /// Rows of Parquet files (paths, directories, globs or `s3://` / `http(s)://` URLs);
    /// `columns` reads only those columns.
    ///
    /// ```no_run
    /// let ds = sluice::Dataset::read_parquet(&["s3://bucket/corpus/*.parquet".into()], Some(&["text".into()]))?;
    /// # Ok::<(), sluice::Error>(())
    /// ```
    pub fn read_parquet(entries: &[String], columns: Option<&[String]>) -> Result<Self> {
        Ok(Dataset::from_source(Arc::new(ParquetSource::open(
            entries, columns,
        )?)))
    }

    /// One sample per CSV record.
    pub fn read_csv(entries: &[String], opts: &CsvOptions) -> Result<Self> {
        Ok(Dataset::from_source(Arc::new(CsvSource::open(
            entries, opts,
        )?)))
    }

    /// One sample per TFRecord record (CRC-checked; `tf.train.Example` features as fields
    /// unless `opts.parse` is false), with random access through a record index.
    ///
    /// ```no_run
    /// let opts = sluice::TfrecordOptions { features: Some(vec!["label".into()]), ..Default::default() };
    /// let ds = sluice::Dataset::read_tfrecord(&["data/train-*.tfrecord".into()], &opts)?;
    /// # Ok::<(), sluice::Error>(())
    /// ```
    pub fn read_tfrecord(entries: &[String], opts: &TfrecordOptions) -> Result<Self> {
        Ok(Dataset::from_source(Arc::new(TfrecordSource::open(
            entries, opts,
        )?)))
    }

    /// `{__key__, __url__, <ext>: bytes}` per sample of WebDataset tar shards, streamed;
    /// `rank = Some((r, n))` reads every n-th shard from r.
    pub fn read_webdataset(entries: &[String], rank: Option<(u64, u64)>) -> Result<Self> {
        Self::read_webdataset_shuffled(entries, rank, None)
    }

    /// [`Dataset::read_webdataset`] with the shard order permuted every epoch, from the
    /// iteration seed or a fixed one ([`ShardShuffle`]); ranks split the permuted list.
    pub fn read_webdataset_shuffled(
        entries: &[String],
        rank: Option<(u64, u64)>,
        shuffle: Option<ShardShuffle>,
    ) -> Result<Self> {
        Self::read_webdataset_with(entries, rank, shuffle, WdsOptions::default())
    }

    /// [`Dataset::read_webdataset_shuffled`] with an error policy for members that cannot be
    /// fields (links, devices, oversized members, ...) and a member size limit.
    pub fn read_webdataset_with(
        entries: &[String],
        rank: Option<(u64, u64)>,
        shuffle: Option<ShardShuffle>,
        opts: WdsOptions,
    ) -> Result<Self> {
        Ok(Dataset::from_source(Arc::new(WebDatasetSource::open_with(
            entries, rank, shuffle, opts,
        )?)))
    }

    /// The rows of in-memory Arrow record batches (random access).
    pub fn from_arrow(batches: Vec<sluice_io::arrow_array::RecordBatch>) -> Result<Self> {
        Ok(Dataset::from_source(Arc::new(ArrowSource::new(batches)?)))
    }

    /// Runs the pipeline and writes its outputs into `dir` as `part-NNNNN.parquet` files:
    /// `sink.rows_per_file` rows each, or one file per partition after `repartition(n)`.
    pub fn write_parquet(
        &self,
        dir: &str,
        sink: &SinkOptions,
        opts: &IterOptions,
    ) -> Result<Vec<String>> {
        let exec = self.iter(opts)?;
        match self.output_partitions("write_parquet")? {
            None => sink::write_parquet(exec, dir, sink),
            Some(sizes) => sink::write_parquet_parts(Parted::new(exec, &sizes), dir, sink),
        }
    }

    /// Writes the outputs into `dir` as shards made for fast reading (WebDataset tar with
    /// member indexes, or Parquet) of about `shards.shard_bytes` each, then `index.json`;
    /// returns the shard files ([`sluice_io::shard_writer`]). The pipeline runs as `opts`
    /// says (threads, or Ray actors for its element-wise stages).
    ///
    /// ```no_run
    /// use sluice::{ShardFormat, ShardOptions};
    /// let ds = sluice::Dataset::read_files(&["raw/*.jpg".into()])?;
    /// let opts = ShardOptions { format: ShardFormat::Webdataset, shard_bytes: 256 << 20 };
    /// ds.write_shards("shards/", &opts, &Default::default())?;
    /// # Ok::<(), sluice::Error>(())
    /// ```
    pub fn write_shards(
        &self,
        dir: &str,
        shards: &sluice_io::shard_writer::ShardOptions,
        opts: &IterOptions,
    ) -> Result<Vec<String>> {
        sluice_io::shard_writer::write_shards(self.iter(opts)?, dir, shards)
    }

    /// The outputs as Arrow record batches of up to `rows` rows (what `to_arrow` exports). A
    /// pipeline that is a columnar source and nothing per row (shuffled, sharded or not) is
    /// read in batches built column by column; others are collected from their samples.
    ///
    /// ```no_run
    /// let ds = sluice::Dataset::read_parquet(&["corpus/*.parquet".into()], None)?;
    /// let rows: usize = ds.arrow_batches(65536, &Default::default())?.map(|b| b.unwrap().num_rows()).sum();
    /// # Ok::<(), sluice::Error>(())
    /// ```
    pub fn arrow_batches(&self, rows: usize, opts: &IterOptions) -> Result<Records> {
        let rows = rows.max(1);
        if opts.plan.is_none() && opts.context == RunContext::Local {
            // Only a source: its own scan, when it has one (Parquet decodes row groups on a
            // pool and hands out slices of them), skips the executor altogether.
            if let [only] = self.plan().chain().as_slice() {
                if let LogicalPlan::Source(n) = &**only {
                    let threads = opts.facts(false).threads();
                    if let Some(scan) = n.source.scan_columns(threads, rows) {
                        return Records::from_batches(scan);
                    }
                }
            }
            let batched = self.batch(rows, false)?;
            let plan = batched.physical_plan(opts)?;
            if let [only] = plan.stages.as_slice() {
                if matches!(only.kind, StageKind::Batch { read: true, .. }) {
                    let opts = IterOptions {
                        columns: true,
                        ..opts.clone()
                    };
                    return Records::from_batches(batched.iter(&opts)?);
                }
            }
        }
        Records::from_samples(self.iter(opts)?, rows)
    }

    /// Runs the pipeline and writes its outputs into `dir` as `part-NNNNN.jsonl` files
    /// (split like [`Dataset::write_parquet`]).
    pub fn write_jsonl(
        &self,
        dir: &str,
        sink: &SinkOptions,
        opts: &IterOptions,
    ) -> Result<Vec<String>> {
        let exec = self.iter(opts)?;
        match self.output_partitions("write_jsonl")? {
            None => sink::write_jsonl(exec, dir, sink),
            Some(sizes) => sink::write_jsonl_parts(Parted::new(exec, &sizes), dir, sink),
        }
    }
}

/// Tags each output with the partition its source position falls in.
struct Parted {
    exec: Execution,
    /// First source position of each partition.
    starts: Vec<u64>,
}

impl Parted {
    fn new(exec: Execution, sizes: &[u64]) -> Self {
        let starts = sizes
            .iter()
            .scan(0u64, |at, n| {
                let start = *at;
                *at += n;
                Some(start)
            })
            .collect();
        Parted { exec, starts }
    }
}

impl Iterator for Parted {
    type Item = Result<(usize, Sample)>;
    fn next(&mut self) -> Option<Self::Item> {
        let s = self.exec.next()?;
        // Only element-wise steps follow the partitions, so the position is the row's.
        let pos = self.exec.position().map_or(0, |p| p.source_start().pos);
        let part = self
            .starts
            .partition_point(|&st| st <= pos)
            .saturating_sub(1);
        Some(s.map(|s| (part, s)))
    }
}

#[cfg(test)]
mod tests {
    use super::{Arc, WdsOptions};
    use crate::{IterOptions, PipelineSpec};
    use sluice_core::{Sample, Value};

    fn rows(ds: &crate::Dataset) -> Vec<Sample> {
        ds.iter(&IterOptions::default())
            .unwrap()
            .collect::<sluice_core::Result<_>>()
            .unwrap()
    }

    #[test]
    fn repartitioned_writes_one_file_per_partition() {
        let dir = std::env::temp_dir().join(format!("sluice-parts-{}", std::process::id()));
        let d = dir.display().to_string();
        let noop = crate::OpSpec::Noop.build().unwrap();
        let ds = crate::Dataset::range(10)
            .repartition(3, &Default::default())
            .unwrap()
            .map(noop, sluice_core::OnError::Raise, None)
            .unwrap();
        let files = ds
            .write_jsonl(&d, &Default::default(), &IterOptions::default())
            .unwrap();
        let lines: Vec<usize> = files
            .iter()
            .map(|f| std::fs::read_to_string(f).unwrap().lines().count())
            .collect();
        assert_eq!(lines, [4, 3, 3]);
        let files = ds
            .write_parquet(&d, &Default::default(), &IterOptions::default())
            .unwrap();
        assert_eq!(files.len(), 3);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A source's shipped form is a pipeline-file source that reopens the same samples.
    #[test]
    fn shipped_sources_reopen_the_same_samples() {
        let dir = std::env::temp_dir().join(format!("sluice-ship-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let d = dir.display().to_string();
        std::fs::write(dir.join("a.csv"), "x,y\n1,\"p,q\"\n2,r\n").unwrap();
        let items = (0..5).map(|i| Ok(Sample::from_pairs([("id", Value::Int(i))])));
        sluice_io::sink::write_parquet(items, &format!("{d}/pq"), &Default::default()).unwrap();
        std::fs::write(dir.join("t.txt"), b"one\nt\xffo\nthree\n").unwrap();
        std::fs::write(dir.join("empty.tar"), [0u8; 1024]).unwrap();
        let text = sluice_io::JsonlOptions {
            on_error: sluice_core::OnError::Skip,
            ..Default::default()
        };
        let tar = WdsOptions {
            on_error: sluice_core::OnError::Skip,
            max_member_size: 4096,
        };
        let sources = [
            crate::Dataset::read_csv(&[format!("{d}/a.csv")], &Default::default()).unwrap(),
            crate::Dataset::read_parquet(&[format!("{d}/pq")], Some(&["id".into()])).unwrap(),
            crate::Dataset::from_source(Arc::new(
                sluice_io::LinesSource::open_with(
                    &[format!("{d}/t.txt")],
                    sluice_io::LinesFormat::Text,
                    &text,
                )
                .unwrap(),
            )),
            crate::Dataset::read_webdataset_with(&[format!("{d}/empty.tar")], None, None, tar)
                .unwrap(),
        ];
        for ds in sources {
            let shipped = ds.plan().source().ship().expect("ships");
            let file = serde_json::json!({ "source": shipped }).to_string();
            let (copy, _) = PipelineSpec::parse(&file, "json").unwrap().build().unwrap();
            assert_eq!(rows(&copy), rows(&ds));
            assert_eq!(copy.plan().source().spec(), ds.plan().source().spec());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
