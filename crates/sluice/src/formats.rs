//! Data at rest: the Parquet, CSV and WebDataset sources, Arrow batches in memory, and the
//! Parquet / JSONL sinks, as `Dataset` constructors and methods.

use std::sync::Arc;

use sluice_core::Result;
use sluice_io::{
    sink, ArrowSource, CsvOptions, CsvSource, ParquetSource, SinkOptions, WebDatasetSource,
};

use crate::dataset::{Dataset, IterOptions};

impl Dataset {
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

    /// `{__key__, __url__, <ext>: bytes}` per sample of WebDataset tar shards, streamed;
    /// `rank = Some((r, n))` reads every n-th shard from r.
    pub fn read_webdataset(entries: &[String], rank: Option<(u64, u64)>) -> Result<Self> {
        Ok(Dataset::from_source(Arc::new(WebDatasetSource::open(
            entries, rank,
        )?)))
    }

    /// The rows of in-memory Arrow record batches (random access).
    pub fn from_arrow(batches: Vec<sluice_io::arrow_array::RecordBatch>) -> Result<Self> {
        Ok(Dataset::from_source(Arc::new(ArrowSource::new(batches)?)))
    }

    /// Runs the pipeline and writes its outputs into `dir` as `part-NNNNN.parquet` files.
    pub fn write_parquet(
        &self,
        dir: &str,
        sink: &SinkOptions,
        opts: &IterOptions,
    ) -> Result<Vec<String>> {
        sink::write_parquet(self.iter(opts)?, dir, sink)
    }

    /// Runs the pipeline and writes its outputs into `dir` as `part-NNNNN.jsonl` files.
    pub fn write_jsonl(
        &self,
        dir: &str,
        sink: &SinkOptions,
        opts: &IterOptions,
    ) -> Result<Vec<String>> {
        sink::write_jsonl(self.iter(opts)?, dir, sink)
    }
}

#[cfg(test)]
mod tests {
    use crate::{IterOptions, PipelineSpec};
    use sluice_core::{Sample, Value};

    fn rows(ds: &crate::Dataset) -> Vec<Sample> {
        ds.iter(&IterOptions::default())
            .unwrap()
            .collect::<sluice_core::Result<_>>()
            .unwrap()
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
        let sources = [
            crate::Dataset::read_csv(&[format!("{d}/a.csv")], &Default::default()).unwrap(),
            crate::Dataset::read_parquet(&[format!("{d}/pq")], Some(&["id".into()])).unwrap(),
        ];
        for ds in sources {
            let shipped = ds.plan().source().ship().expect("ships");
            let file = serde_json::json!({ "source": shipped }).to_string();
            let (copy, _) = PipelineSpec::parse(&file, "json").unwrap().build().unwrap();
            assert_eq!(rows(&copy), rows(&ds));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
