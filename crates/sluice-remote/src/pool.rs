//! The `processes` backend: a stage's chunks run in N worker processes.
//!
//! Each worker is a fresh process (spawned, never forked — so no thread pool or lock of
//! the parent is inherited half-way) that hosts a [`crate::StageRunner`] and talks
//! length-prefixed frames over its stdin/stdout; big buffers cross in shared memory. The
//! executor calls [`Workers::run`] from as many threads as there are workers; each call
//! borrows an idle worker, so every worker has at most one chunk in flight.
//!
//! Lifetime: workers are stopped when the stage ends ([`Workers::shutdown`], also on drop):
//! their stdin is closed, and whoever has not exited shortly after is killed and reaped. They
//! also die with the parent: it spawns them from one long-lived thread so the worker's
//! `PR_SET_PDEATHSIG` (set by the worker itself) fires only when the process goes, and a
//! worker reading end-of-input exits. They run in their own process group, so a Ctrl-C in the
//! terminal interrupts only the parent, which then shuts them down.

use std::io::{self, Read, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use sluice_core::exec::{Backend, Chunk, StageWork, Workers};
use sluice_core::{Error, Result};

use crate::shm::{ShmConfig, ShmWriter};
use crate::stage::{OpLoader, RemoteStage, StageRunner};
use crate::wire::{self, ExternalCodec, Output};

/// Frames larger than this are refused (a corrupt length must not allocate gigabytes).
pub const MAX_FRAME: u64 = 1 << 32;

/// How long stopped workers get to exit on their own before they are killed.
const GRACE: Duration = Duration::from_millis(500);

/// Writes one length-prefixed frame.
///
/// ```
/// let mut buf = Vec::new();
/// sluice_remote::pool::write_frame(&mut buf, b"hi").unwrap();
/// let back = sluice_remote::pool::read_frame(&mut &buf[..]).unwrap();
/// assert_eq!(back.as_deref(), Some(&b"hi"[..]));
/// ```
pub fn write_frame(w: &mut impl Write, payload: &[u8]) -> io::Result<()> {
    w.write_all(&(payload.len() as u64).to_le_bytes())?;
    w.write_all(payload)?;
    w.flush()
}

/// Reads one length-prefixed frame; `None` at a clean end of input.
pub fn read_frame(r: &mut impl Read) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 8];
    let mut got = 0;
    while got < 8 {
        match r.read(&mut len[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let len = u64::from_le_bytes(len);
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes"),
        ));
    }
    let mut buf = vec![0u8; len as usize];
    r.read_exact(&mut buf)?;
    Ok(Some(buf))
}

/// A worker's loop: the first frame is the stage's init JSON (answered with an empty reply
/// or the error that stopped the rebuild), then request frames until end of input, each
/// answered with a reply frame. `load_op` and `codec` are the runtime's hooks (Python UDFs).
pub fn serve(
    input: &mut impl Read,
    output: &mut impl Write,
    load_op: &OpLoader,
    codec: Option<Arc<dyn ExternalCodec>>,
) -> io::Result<()> {
    let Some(init) = read_frame(input)? else {
        return Ok(());
    };
    let runner = std::str::from_utf8(&init)
        .map_err(|e| Error::Internal(format!("init is not UTF-8: {e}")))
        .and_then(|init| StageRunner::new(init, load_op, codec.clone()));
    let runner = match runner {
        Ok(r) => {
            write_frame(
                output,
                &wire::encode_reply(&Ok(Output::default()), None, None),
            )?;
            r
        }
        Err(e) => {
            // Report why, then stop: the main process raises it.
            write_frame(output, &wire::encode_reply(&Err(e), None, codec.as_deref()))?;
            return Ok(());
        }
    };
    while let Some(frame) = read_frame(input)? {
        write_frame(output, &runner.run(&frame))?;
    }
    Ok(())
}

type SpawnRequest = (Command, Sender<io::Result<Child>>);

/// Spawns `cmd` from one thread that lives as long as the process: Linux's parent-death
/// signal fires when the *thread* that spawned a child exits, and executor threads come
/// and go.
fn spawn(cmd: Command) -> io::Result<Child> {
    static SPAWNER: OnceLock<Sender<SpawnRequest>> = OnceLock::new();
    let tx = SPAWNER.get_or_init(|| {
        let (tx, rx) = unbounded::<SpawnRequest>();
        let started = std::thread::Builder::new()
            .name("sluice-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            });
        if let Err(e) = started {
            // Without the thread every request fails below with this message.
            eprintln!("sluice: cannot start the process spawner thread: {e}");
        }
        tx
    });
    let (reply_tx, reply_rx) = bounded(1);
    tx.send((cmd, reply_tx))
        .map_err(|_| io::Error::other("the process spawner thread is gone"))?;
    reply_rx
        .recv()
        .map_err(|_| io::Error::other("the process spawner thread is gone"))?
}

/// A pool of worker processes per stage, each started with `command` (e.g.
/// `[sys.executable, "-m", "sluice._worker"]`).
///
/// ```no_run
/// use std::sync::Arc;
/// use sluice_core::exec::Backends;
/// let backend = sluice_remote::ProcessBackend::new(
///     vec!["python3".into(), "-m".into(), "sluice._worker".into()], vec![], None);
/// let backends = Backends::default().with(Arc::new(backend));
/// ```
pub struct ProcessBackend {
    command: Vec<String>,
    env: Vec<(String, String)>,
    codec: Option<Arc<dyn ExternalCodec>>,
    /// Buffers of at least this many bytes cross in shared memory.
    pub shm_threshold: usize,
}

impl std::fmt::Debug for ProcessBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessBackend")
            .field("command", &self.command)
            .finish()
    }
}

impl ProcessBackend {
    /// Workers run `command` with the extra `env`; `codec` carries runtime-specific errors
    /// (Python exceptions) back.
    pub fn new(
        command: Vec<String>,
        env: Vec<(String, String)>,
        codec: Option<Arc<dyn ExternalCodec>>,
    ) -> Self {
        ProcessBackend {
            command,
            env,
            codec,
            shm_threshold: crate::shm::DEFAULT_THRESHOLD,
        }
    }
}

impl Backend for ProcessBackend {
    fn name(&self) -> &str {
        crate::PROCESSES
    }

    fn start(&self, work: StageWork, workers: usize) -> Result<Box<dyn Workers>> {
        self.start_scalable(work, workers, workers)
    }

    fn start_scalable(
        &self,
        work: StageWork,
        initial: usize,
        max: usize,
    ) -> Result<Box<dyn Workers>> {
        static POOLS: AtomicU64 = AtomicU64::new(0);
        let shm = ShmConfig {
            threshold: self.shm_threshold,
            ..ShmConfig::for_pool(POOLS.fetch_add(1, Relaxed))
        };
        let prefix = shm.prefix.clone();
        let stage = RemoteStage::new(&work, Some(shm.with_prefix(format!("{prefix}r"))))?;
        if self.command.is_empty() {
            return Err(Error::invalid("the process backend has no command"));
        }
        let max = max.max(initial).max(1);
        let (idle_tx, idle_rx) = bounded(max);
        let pool = ProcessWorkers {
            writer: ShmWriter::new(shm.with_prefix(format!("{prefix}q"))),
            shm,
            codec: self.codec.clone(),
            idle_tx,
            idle_rx,
            children: Mutex::new(Vec::with_capacity(max)),
            stopped: AtomicBool::new(false),
            cancelled: AtomicBool::new(false),
            spawned: AtomicUsize::new(0),
            max,
            command: self.command.clone(),
            env: self.env.clone(),
            stage,
        };
        for index in 0..initial.max(1) {
            pool.spawned.store(index + 1, Relaxed);
            // On failure `pool` drops here and stops the workers already started.
            let proc = pool.spawn_one(index)?;
            let _ = pool.idle_tx.send(proc);
        }
        Ok(Box::new(pool))
    }
}

/// One worker process's pipes and state.
struct Proc {
    index: usize,
    pid: u32,
    stdin: ChildStdin,
    stdout: ChildStdout,
    /// The init message was answered.
    ready: bool,
    /// Why this worker cannot run chunks any more (every later chunk gets the same error).
    dead: Option<Error>,
}

struct ProcessWorkers {
    stage: RemoteStage,
    /// Segments of request frames.
    writer: ShmWriter,
    /// The pool's segment prefix (swept at shutdown).
    shm: ShmConfig,
    codec: Option<Arc<dyn ExternalCodec>>,
    idle_tx: Sender<Proc>,
    idle_rx: Receiver<Proc>,
    children: Mutex<Vec<Child>>,
    stopped: AtomicBool,
    /// The run was stopped and busy workers killed ([`Workers::cancel`]).
    cancelled: AtomicBool,
    /// Workers started so far, and how many may be (the controller grows the pool).
    spawned: AtomicUsize,
    max: usize,
    command: Vec<String>,
    env: Vec<(String, String)>,
}

impl ProcessWorkers {
    /// Starts worker process `index` (reserved in `spawned`).
    fn spawn_one(&self, index: usize) -> Result<Proc> {
        let (program, args) = self.command.split_first().expect("checked at start");
        let mut cmd = Command::new(program);
        cmd.args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("SLUICE_PARENT_PID", std::process::id().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut child = spawn(cmd).map_err(|e| {
            Error::Internal(format!(
                "cannot start worker process {:?} for stage '{}': {e}",
                self.command,
                self.stage.label()
            ))
        })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(Error::Internal("worker pipes missing".into()));
        };
        let proc = Proc {
            index,
            pid: child.id(),
            stdin,
            stdout,
            ready: false,
            dead: None,
        };
        self.children
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(child);
        Ok(proc)
    }

    /// An idle worker; a new one while the pool may still grow and all are busy.
    fn take_worker(&self) -> Result<Proc> {
        if let Ok(p) = self.idle_rx.try_recv() {
            return Ok(p);
        }
        if !self.stopped.load(Relaxed) && !self.cancelled.load(Relaxed) {
            if let Ok(index) = self
                .spawned
                .fetch_update(Relaxed, Relaxed, |n| (n < self.max).then_some(n + 1))
            {
                return self.spawn_one(index);
            }
        }
        self.idle_rx
            .recv()
            .map_err(|_| Error::Internal("process pool has no workers".into()))
    }

    fn exchange(&self, p: &mut Proc, frame: &[u8]) -> Result<Chunk> {
        if let Some(e) = &p.dead {
            return Err(e.clone());
        }
        let res = (|| -> io::Result<Result<Chunk>> {
            if !p.ready {
                write_frame(&mut p.stdin, self.stage.init().as_bytes())?;
                let Some(reply) = read_frame(&mut p.stdout)? else {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                };
                match wire::decode_reply(&reply, self.codec.as_deref()) {
                    Ok(Ok(_)) => p.ready = true,
                    Ok(Err(e)) => return Ok(Err(e)),
                    Err(e) => return Ok(Err(e.into())),
                }
            }
            write_frame(&mut p.stdin, frame)?;
            let Some(reply) = read_frame(&mut p.stdout)? else {
                return Err(io::ErrorKind::UnexpectedEof.into());
            };
            Ok(self.stage.reply(&reply, self.codec.as_deref()))
        })();
        match res {
            Ok(Ok(chunk)) => Ok(chunk),
            Ok(Err(e)) => {
                if !p.ready {
                    p.dead = Some(e.clone());
                }
                Err(e)
            }
            Err(io) => {
                let e = self.died(p, io);
                p.dead = Some(e.clone());
                Err(e)
            }
        }
    }

    /// The error for a worker whose pipe broke: how it ended, naming the stage.
    fn died(&self, p: &Proc, io: io::Error) -> Error {
        if self.stopped.load(Relaxed) || self.cancelled.load(Relaxed) {
            return Error::Cancelled;
        }
        let mut how = format!("its pipe failed ({io})");
        let deadline = Instant::now() + Duration::from_secs(2);
        'wait: while Instant::now() < deadline {
            let mut children = self.children.lock().unwrap_or_else(|p| p.into_inner());
            for c in children.iter_mut().filter(|c| c.id() == p.pid) {
                if let Ok(Some(status)) = c.try_wait() {
                    how = format!("it exited with {status}");
                    break 'wait;
                }
            }
            drop(children);
            std::thread::sleep(Duration::from_millis(10));
        }
        Error::External {
            message: format!(
                "worker process {} (pid {}) of stage '{}' died: {how}",
                p.index,
                p.pid,
                self.stage.label()
            ),
            source: Arc::new(wire::RemoteError(how)),
        }
    }
}

impl Workers for ProcessWorkers {
    fn parallelism(&self) -> usize {
        self.max
    }

    fn run(&self, chunk: Chunk) -> Result<Chunk> {
        if self.cancelled.load(Relaxed) {
            return Err(Error::Cancelled);
        }
        // Encode before taking a worker, so encoding overlaps other workers' computing.
        let frame = self.stage.request(chunk, Some(&self.writer))?;
        let mut p = self.take_worker()?;
        let res = self.exchange(&mut p, &frame);
        let _ = self.idle_tx.send(p);
        res
    }

    fn cancel(&self) {
        // Busy workers run their whole chunk otherwise (a slow function's 16 calls kept an
        // exit waiting ~10 s): they go now, and the threads waiting on their replies read
        // the end of their pipes as a cancelled run. `shutdown` reaps them.
        self.cancelled.store(true, Relaxed);
        let mut children = self.children.lock().unwrap_or_else(|p| p.into_inner());
        for c in children.iter_mut() {
            if matches!(c.try_wait(), Ok(None)) {
                let _ = c.kill();
            }
        }
    }

    fn shutdown(&self) {
        if self.stopped.swap(true, Relaxed) {
            return;
        }
        // Closing an idle worker's stdin ends its loop; busy ones are killed below.
        while let Ok(p) = self.idle_rx.try_recv() {
            drop(p);
        }
        let mut children = self.children.lock().unwrap_or_else(|p| p.into_inner());
        let deadline = Instant::now() + GRACE;
        for c in children.iter_mut() {
            while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(5));
            }
            if matches!(c.try_wait(), Ok(None)) {
                let _ = c.kill();
            }
            let _ = c.wait(); // reap: no zombies
        }
        children.clear();
        self.shm.sweep();
    }
}

impl Drop for ProcessWorkers {
    fn drop(&mut self) {
        self.shutdown();
    }
}
