//! Local-disk spill: a private temporary directory (mode 0700; removed when dropped, at a normal
//! exit if it is still there, else by the next process's sweep), files of
//! length-prefixed sample records of the core value codec ([`sluice_core::codec`]), and
//! [`Rows`] — the materialised output a blocking op serves by index: in memory when it fits
//! the budget, else a data file plus an offset index read with positioned reads (nothing of
//! it held in memory).

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::Serialize;
use sluice_core::codec;
use sluice_core::scratch;
use sluice_core::{Error, Result, Sample};

/// What a blocking op did, for `stats()` and tests.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct SpillReport {
    /// `sort`, `groupby` or `repartition`.
    pub op: String,
    /// Rows read from the input pipeline.
    pub rows_in: u64,
    /// Rows the op serves.
    pub rows_out: u64,
    pub memory_budget: u64,
    /// Whether anything went to disk.
    pub spilled: bool,
    /// Sorted runs (sort), partition files (groupby) or data files written.
    pub spill_files: u64,
    /// Bytes written to spill files, the served output file included.
    pub spill_bytes: u64,
    /// Merge passes over sorted runs (0 when everything fitted in memory).
    pub merge_passes: u64,
    /// Wall time of the whole op, input pipeline included.
    pub seconds: f64,
}

/// Approximate memory a sample takes while buffered (payload plus per-field overhead).
pub fn sample_bytes(s: &Sample) -> u64 {
    (s.nbytes() + 64 + 48 * s.len()) as u64
}

/// A private directory (mode 0700) for one op's spill files, removed with everything in it
/// when dropped.
///
/// By default it is inside the process's own directory ([`sluice_core::scratch::dir`]),
/// which goes at exit even when the op's dataset is still alive then. Under a given `base` it
/// is `sluice-spill-<pid>.<start>-<random>`, removed at a normal exit too; the first spill
/// into `base` in a process removes the directories there of processes that died (killed).
#[derive(Debug)]
pub struct SpillDir {
    path: PathBuf,
    next: AtomicU64,
    /// Registered for removal at exit (a directory outside the process's own).
    at_exit: bool,
}

/// Name prefix of spill directories under a given base.
const PREFIX: &str = "sluice-spill-";

impl SpillDir {
    /// Creates a spill directory in the process's private directory, or under `base`.
    ///
    /// ```
    /// let d = sluice_relational::spill::SpillDir::create(None)?;
    /// assert!(d.path().is_dir());
    /// # Ok::<(), sluice_core::Error>(())
    /// ```
    pub fn create(base: Option<&Path>) -> Result<Self> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let Some(base) = base else {
            let own = scratch::dir()?;
            loop {
                let path = own.join(format!("spill-{}", COUNTER.fetch_add(1, Relaxed)));
                match scratch::create_private_dir(&path) {
                    Ok(()) => return Ok(SpillDir::at(path, false)),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(io_err(&path, e)),
                }
            }
        };
        std::fs::create_dir_all(base).map_err(|e| io_err(base, e))?;
        scratch::sweep_once(base, "spill", |n| {
            scratch::owner_in(n, PREFIX).map(str::to_owned)
        });
        let tag = scratch::tag();
        loop {
            let path = base.join(format!("{PREFIX}{tag}-{}", scratch::random_hex()));
            match scratch::create_private_dir(&path) {
                Ok(()) => {
                    scratch::remove_at_exit(&path);
                    return Ok(SpillDir::at(path, true));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io_err(&path, e)),
            }
        }
    }
    fn at(path: PathBuf, at_exit: bool) -> Self {
        SpillDir {
            path,
            next: AtomicU64::new(0),
            at_exit,
        }
    }
    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// A fresh file name in the directory.
    pub fn file(&self, what: &str) -> PathBuf {
        let n = self.next.fetch_add(1, Relaxed);
        self.path.join(format!("{what}-{n:06}"))
    }
}

impl Drop for SpillDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
        if self.at_exit {
            scratch::forget_at_exit(&self.path);
        }
    }
}

fn io_err(path: &Path, e: std::io::Error) -> Error {
    Error::io(path.display(), e)
}

fn corrupt(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Internal(format!("spill file {}: {e}", path.display()))
}

/// A buffer size for spill I/O: a slice of the budget, within sane limits.
pub fn io_buffer(budget: u64, share: u64) -> usize {
    (budget / share.max(1)).clamp(8 << 10, 4 << 20) as usize
}

/// A writer of encoded sample records: encoding into a reused buffer is shared.
trait RecordSink {
    fn buffer(&mut self) -> &mut Vec<u8>;
    fn push_raw(&mut self, rec: &[u8]) -> Result<()>;
    fn push_sample(&mut self, s: &Sample) -> Result<()> {
        let mut rec = std::mem::take(self.buffer());
        rec.clear();
        codec::encode_sample(s, &mut rec);
        let r = self.push_raw(&rec);
        *self.buffer() = rec;
        r
    }
}

/// A file of sample records written once, read back sequentially (a sorted run, a partition).
#[derive(Debug)]
pub struct Run {
    pub path: PathBuf,
    pub rows: u64,
    pub bytes: u64,
}

impl Run {
    /// Deletes the file (runs are removed as soon as they are merged).
    pub fn remove(self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Writes records `[u64 length][codec record]`.
pub struct RunWriter {
    path: PathBuf,
    out: BufWriter<File>,
    rec: Vec<u8>,
    rows: u64,
    bytes: u64,
}

impl RecordSink for RunWriter {
    fn buffer(&mut self) -> &mut Vec<u8> {
        &mut self.rec
    }
    fn push_raw(&mut self, rec: &[u8]) -> Result<()> {
        RunWriter::push_raw(self, rec)
    }
}

impl RunWriter {
    /// Creates `path` with a write buffer of `buffer` bytes.
    pub fn create(path: PathBuf, buffer: usize) -> Result<Self> {
        let f = File::create(&path).map_err(|e| io_err(&path, e))?;
        Ok(RunWriter {
            out: BufWriter::with_capacity(buffer, f),
            path,
            rec: Vec::new(),
            rows: 0,
            bytes: 0,
        })
    }
    /// Appends a sample.
    pub fn push(&mut self, s: &Sample) -> Result<()> {
        self.push_sample(s)
    }
    /// Appends an already encoded record.
    pub fn push_raw(&mut self, rec: &[u8]) -> Result<()> {
        let len = (rec.len() as u64).to_le_bytes();
        self.out
            .write_all(&len)
            .and_then(|_| self.out.write_all(rec))
            .map_err(|e| io_err(&self.path, e))?;
        self.rows += 1;
        self.bytes += 8 + rec.len() as u64;
        Ok(())
    }
    /// Flushes and closes the file.
    pub fn finish(mut self) -> Result<Run> {
        self.out.flush().map_err(|e| io_err(&self.path, e))?;
        Ok(Run {
            path: self.path,
            rows: self.rows,
            bytes: self.bytes,
        })
    }
}

/// Reads a [`Run`] front to back.
pub struct RunReader {
    path: PathBuf,
    input: BufReader<File>,
    left: u64,
}

impl RunReader {
    /// Opens `run` with a read buffer of `buffer` bytes.
    pub fn open(run: &Run, buffer: usize) -> Result<Self> {
        let f = File::open(&run.path).map_err(|e| io_err(&run.path, e))?;
        Ok(RunReader {
            path: run.path.clone(),
            input: BufReader::with_capacity(buffer, f),
            left: run.rows,
        })
    }
    /// The next record's bytes (into `rec`), or `false` at the end.
    pub fn next_raw(&mut self, rec: &mut Vec<u8>) -> Result<bool> {
        if self.left == 0 {
            return Ok(false);
        }
        let mut len = [0u8; 8];
        self.input
            .read_exact(&mut len)
            .map_err(|e| io_err(&self.path, e))?;
        let len = usize::try_from(u64::from_le_bytes(len)).map_err(|e| corrupt(&self.path, e))?;
        rec.clear();
        rec.resize(len, 0);
        self.input
            .read_exact(rec)
            .map_err(|e| io_err(&self.path, e))?;
        self.left -= 1;
        Ok(true)
    }
    /// The next sample, or `None` at the end.
    pub fn next_sample(&mut self, rec: &mut Vec<u8>) -> Result<Option<Sample>> {
        if !self.next_raw(rec)? {
            return Ok(None);
        }
        codec::decode_sample(rec)
            .map(Some)
            .map_err(|e| corrupt(&self.path, e))
    }
}

/// Samples on disk with random access: `data` holds the records back to back, `index` their
/// `rows + 1` offsets (u64 little-endian).
#[derive(Debug)]
pub struct DiskRows {
    data_path: PathBuf,
    data: File,
    index: File,
    rows: u64,
}

impl DiskRows {
    /// Sample `i`: two positioned reads (its offsets, then its bytes) and a decode.
    pub fn get(&self, i: u64) -> Result<Sample> {
        let mut pair = [0u8; 16];
        self.index
            .read_exact_at(&mut pair, i * 8)
            .map_err(|e| io_err(&self.data_path, e))?;
        let (mut a, mut b) = ([0u8; 8], [0u8; 8]);
        a.copy_from_slice(&pair[..8]);
        b.copy_from_slice(&pair[8..]);
        let (start, end) = (u64::from_le_bytes(a), u64::from_le_bytes(b));
        let len = end
            .checked_sub(start)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| corrupt(&self.data_path, format!("bad offsets {start}..{end}")))?;
        let mut rec = vec![0u8; len];
        self.data
            .read_exact_at(&mut rec, start)
            .map_err(|e| io_err(&self.data_path, e))?;
        codec::decode_sample(&rec).map_err(|e| corrupt(&self.data_path, e))
    }
}

/// Builds a [`DiskRows`].
pub struct DiskRowsWriter {
    data_path: PathBuf,
    index_path: PathBuf,
    data: BufWriter<File>,
    index: BufWriter<File>,
    offset: u64,
    rows: u64,
    rec: Vec<u8>,
}

impl RecordSink for DiskRowsWriter {
    fn buffer(&mut self) -> &mut Vec<u8> {
        &mut self.rec
    }
    fn push_raw(&mut self, rec: &[u8]) -> Result<()> {
        DiskRowsWriter::push_raw(self, rec)
    }
}

impl DiskRowsWriter {
    /// New files in `dir`, written through buffers of `buffer` bytes.
    pub fn create(dir: &SpillDir, buffer: usize) -> Result<Self> {
        let (data_path, index_path) = (dir.file("rows"), dir.file("index"));
        let data = File::create(&data_path).map_err(|e| io_err(&data_path, e))?;
        let index = File::create(&index_path).map_err(|e| io_err(&index_path, e))?;
        let mut w = DiskRowsWriter {
            data: BufWriter::with_capacity(buffer, data),
            index: BufWriter::with_capacity(buffer.min(1 << 20), index),
            data_path,
            index_path,
            offset: 0,
            rows: 0,
            rec: Vec::new(),
        };
        w.index
            .write_all(&0u64.to_le_bytes())
            .map_err(|e| io_err(&w.index_path, e))?;
        Ok(w)
    }
    /// Appends a sample.
    pub fn push(&mut self, s: &Sample) -> Result<()> {
        self.push_sample(s)
    }
    /// Appends an already encoded record.
    pub fn push_raw(&mut self, rec: &[u8]) -> Result<()> {
        self.data
            .write_all(rec)
            .map_err(|e| io_err(&self.data_path, e))?;
        self.offset += rec.len() as u64;
        self.rows += 1;
        self.index
            .write_all(&self.offset.to_le_bytes())
            .map_err(|e| io_err(&self.index_path, e))
    }
    /// Bytes written so far (data and index).
    pub fn bytes(&self) -> u64 {
        self.offset + 8 * (self.rows + 1)
    }
    /// Flushes and reopens the files for reading.
    pub fn finish(mut self) -> Result<DiskRows> {
        self.data.flush().map_err(|e| io_err(&self.data_path, e))?;
        self.index
            .flush()
            .map_err(|e| io_err(&self.index_path, e))?;
        let data = File::open(&self.data_path).map_err(|e| io_err(&self.data_path, e))?;
        let index = File::open(&self.index_path).map_err(|e| io_err(&self.index_path, e))?;
        Ok(DiskRows {
            data_path: self.data_path,
            data,
            index,
            rows: self.rows,
        })
    }
}

/// The output of a blocking op, by index.
#[derive(Debug)]
pub enum Rows {
    Memory(Vec<Sample>),
    Disk(DiskRows),
}

impl Rows {
    /// Number of rows.
    pub fn len(&self) -> u64 {
        match self {
            Rows::Memory(v) => v.len() as u64,
            Rows::Disk(d) => d.rows,
        }
    }
    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Row `i`.
    pub fn get(&self, i: u64) -> Result<Sample> {
        if i >= self.len() {
            return Err(Error::invalid(format!(
                "index {i} out of range for {} rows",
                self.len()
            )));
        }
        match self {
            Rows::Memory(v) => Ok(v[i as usize].clone()),
            Rows::Disk(d) => d.get(i),
        }
    }
}

/// Where a blocking op spills: the budget, the directory (created on first use) and the
/// running report.
#[derive(Debug)]
pub struct Spill {
    pub budget: u64,
    base: Option<PathBuf>,
    dir: Option<SpillDir>,
    pub report: SpillReport,
}

impl Spill {
    /// Spilling beyond `budget` bytes into a directory under `base`.
    pub fn new(op: &str, budget: u64, base: Option<PathBuf>) -> Self {
        Spill {
            budget,
            base,
            dir: None,
            report: SpillReport {
                op: op.to_string(),
                memory_budget: budget,
                ..Default::default()
            },
        }
    }
    /// The spill directory, created now if needed.
    pub fn dir(&mut self) -> Result<&SpillDir> {
        if self.dir.is_none() {
            self.dir = Some(SpillDir::create(self.base.as_deref())?);
        }
        self.dir
            .as_ref()
            .ok_or_else(|| Error::Internal("no spill directory".into()))
    }
    /// A new run file in the spill directory.
    pub fn run_writer(&mut self, what: &str, share: u64) -> Result<RunWriter> {
        let buffer = io_buffer(self.budget, share);
        let path = self.dir()?.file(what);
        self.report.spilled = true;
        self.report.spill_files += 1;
        RunWriter::create(path, buffer)
    }
    /// Counts a finished run's bytes.
    pub fn count(&mut self, run: &Run) {
        self.report.spill_bytes += run.bytes;
    }
    /// The directory, if one was created (it must live as long as files in it are served).
    pub fn into_dir(self) -> (Option<SpillDir>, SpillReport) {
        (self.dir, self.report)
    }
}

/// Collects rows in memory while they fit the budget, then moves them all to disk.
pub struct RowsBuilder {
    mem: Vec<Sample>,
    bytes: u64,
    disk: Option<DiskRowsWriter>,
}

impl RowsBuilder {
    pub fn new() -> Self {
        RowsBuilder {
            mem: Vec::new(),
            bytes: 0,
            disk: None,
        }
    }
    /// Appends a row, spilling everything to disk once the rows outgrow the budget.
    pub fn push(&mut self, s: Sample, spill: &mut Spill) -> Result<()> {
        if let Some(d) = &mut self.disk {
            return d.push(&s);
        }
        self.bytes += sample_bytes(&s);
        self.mem.push(s);
        if self.bytes > spill.budget {
            let buffer = io_buffer(spill.budget, 4);
            let mut d = DiskRowsWriter::create(spill.dir()?, buffer)?;
            spill.report.spilled = true;
            spill.report.spill_files += 1;
            for s in self.mem.drain(..) {
                d.push(&s)?;
            }
            self.disk = Some(d);
        }
        Ok(())
    }
    /// The rows.
    pub fn finish(self, spill: &mut Spill) -> Result<Rows> {
        match self.disk {
            None => Ok(Rows::Memory(self.mem)),
            Some(d) => {
                spill.report.spill_bytes += d.bytes();
                Ok(Rows::Disk(d.finish()?))
            }
        }
    }
}

impl Default for RowsBuilder {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::{Tensor, TensorData, Value};

    fn row(i: i64) -> Sample {
        let t = Tensor::new(vec![2], TensorData::F32(vec![i as f32, 0.5])).unwrap();
        Sample::from_pairs([
            ("id", Value::Int(i)),
            ("name", Value::from(format!("row {i}"))),
            ("v", Value::Tensor(t)),
            ("b", Value::Bytes(vec![i as u8; 3].into())),
        ])
    }

    #[test]
    fn runs_round_trip_and_the_directory_goes_away() {
        let dir = SpillDir::create(None).unwrap();
        let path = dir.path().to_path_buf();
        let mut w = RunWriter::create(dir.file("run"), 1 << 12).unwrap();
        for i in 0..100 {
            w.push(&row(i)).unwrap();
        }
        let run = w.finish().unwrap();
        assert_eq!(run.rows, 100);
        let mut r = RunReader::open(&run, 1 << 12).unwrap();
        let mut rec = Vec::new();
        for i in 0..100 {
            assert_eq!(r.next_sample(&mut rec).unwrap().unwrap(), row(i));
        }
        assert!(r.next_sample(&mut rec).unwrap().is_none());
        assert!(path.exists());
        drop(dir);
        assert!(!path.exists(), "spill directory must be removed");
    }

    /// Runs this test binary's `test` alone in a child with `SPILL_CHILD=<base>`; returns the
    /// child with its stdout piped.
    fn child(test: &str, base: &Path) -> std::process::Child {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args([test, "--exact", "--nocapture", "--test-threads=1"])
            .env("SPILL_CHILD", base)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    }

    /// The two spill directories of a child (one under its own directory, one under `base`),
    /// as it prints them.
    fn child_dirs(c: &mut std::process::Child) -> Vec<PathBuf> {
        use std::io::BufRead;
        let out = std::io::BufReader::new(c.stdout.take().unwrap());
        out.lines()
            .map_while(|l| l.ok())
            // libtest's "test name ... " may start the line.
            .filter_map(|l| l.split_once("SPILLDIR=").map(|(_, p)| PathBuf::from(p)))
            .take(2)
            .collect()
    }

    fn test_base(name: &str) -> PathBuf {
        let b =
            std::env::temp_dir().join(format!("sluice-spilltest-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&b);
        b
    }

    /// In a child: makes spill directories that are never dropped, then exits or waits to be
    /// killed.
    fn child_body(wait: bool) {
        let Some(base) = std::env::var_os("SPILL_CHILD") else {
            return;
        };
        for d in [
            SpillDir::create(None).unwrap(),
            SpillDir::create(Some(Path::new(&base))).unwrap(),
        ] {
            std::fs::write(d.file("rows"), b"data").unwrap();
            println!("SPILLDIR={}", d.path().display());
            // As a Python dataset alive at exit: its directory is never dropped.
            std::mem::forget(d);
        }
        if wait {
            std::thread::sleep(std::time::Duration::from_secs(60));
        }
        std::process::exit(0);
    }

    #[test]
    fn spill_dirs_of_a_process_that_exits_with_them_alive_are_removed() {
        child_body(false);
        let base = test_base("exit");
        let mut c = child(
            "spill::tests::spill_dirs_of_a_process_that_exits_with_them_alive_are_removed",
            &base,
        );
        let dirs = child_dirs(&mut c);
        assert!(c.wait().unwrap().success());
        assert_eq!(dirs.len(), 2, "{dirs:?}");
        for d in &dirs {
            assert!(!d.exists(), "{} left behind", d.display());
        }
        assert_eq!(std::fs::read_dir(&base).unwrap().count(), 0);
        let _ = std::fs::remove_dir_all(base);
    }

    #[test]
    fn spill_dirs_of_a_killed_process_go_at_the_next_spill() {
        child_body(true);
        let base = test_base("kill");
        let mut c = child(
            "spill::tests::spill_dirs_of_a_killed_process_go_at_the_next_spill",
            &base,
        );
        let dirs = child_dirs(&mut c);
        assert_eq!(dirs.len(), 2, "{dirs:?}");
        c.kill().unwrap();
        c.wait().unwrap();
        assert!(dirs.iter().all(|d| d.exists()), "SIGKILL runs no exit hook");
        // A live process's directory beside it is kept.
        let mine = SpillDir::create(Some(&base)).unwrap();
        assert!(
            !dirs[1].exists(),
            "the dead process's directory under the base is swept"
        );
        assert!(mine.path().exists());
        // The one in the dead process's private directory goes when a process makes its own
        // (this test process made it before the child died, so ask for the sweep directly).
        let parent = dirs[0].parent().unwrap().parent().unwrap();
        scratch::sweep(parent, |n| scratch::owner_in(n, "").map(str::to_owned));
        assert!(!dirs[0].exists());
        drop(mine);
        assert_eq!(std::fs::read_dir(&base).unwrap().count(), 0);
        let _ = std::fs::remove_dir_all(base);
    }

    #[test]
    fn spill_dirs_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let base = test_base("mode");
        for d in [
            SpillDir::create(None).unwrap(),
            SpillDir::create(Some(&base)).unwrap(),
        ] {
            let mode = std::fs::symlink_metadata(d.path())
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o700, "{}", d.path().display());
        }
        let _ = std::fs::remove_dir_all(base);
    }

    #[test]
    fn disk_rows_serve_any_index() {
        let dir = SpillDir::create(None).unwrap();
        let mut w = DiskRowsWriter::create(&dir, 1 << 12).unwrap();
        for i in 0..50 {
            w.push(&row(i)).unwrap();
        }
        let rows = Rows::Disk(w.finish().unwrap());
        assert_eq!(rows.len(), 50);
        for i in [49, 0, 17, 17, 3] {
            assert_eq!(rows.get(i).unwrap(), row(i as i64));
        }
        assert!(rows.get(50).is_err());
    }

    #[test]
    fn rows_builder_moves_to_disk_past_the_budget() {
        let mut spill = Spill::new("test", 2_000, None);
        let mut b = RowsBuilder::new();
        for i in 0..40 {
            b.push(row(i), &mut spill).unwrap();
        }
        let rows = b.finish(&mut spill).unwrap();
        assert!(matches!(rows, Rows::Disk(_)));
        assert!(spill.report.spilled && spill.report.spill_bytes > 0);
        assert_eq!(rows.get(39).unwrap(), row(39));

        let mut roomy = Spill::new("test", 1 << 30, None);
        let mut b = RowsBuilder::new();
        b.push(row(1), &mut roomy).unwrap();
        assert!(matches!(b.finish(&mut roomy).unwrap(), Rows::Memory(_)));
        assert!(!roomy.report.spilled);
    }
}
