//! The live-metrics endpoint of a running iteration: `GET /metrics` on 127.0.0.1 answers
//! with the run's statistics in the Prometheus text format ([`super::prometheus`]).
//!
//! Any local process can connect, so the endpoint is bounded: at most
//! [`Limits::max_connections`] connections are served at once (more are closed as soon as
//! they are accepted) and one that sends or takes nothing for [`Limits::idle_timeout`] is
//! dropped, so idle connections cannot use up the training process's file descriptors or
//! threads. Every connection answers one request and is closed, as the Python server it
//! replaces did (HTTP/1.0 style: no keep-alive), which bounds a connection's life by the idle
//! timeout too. Stopping (or dropping) the endpoint closes the listener and every
//! connection and waits for all of its threads.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::prometheus::prometheus_text;
use super::PipelineStats;

/// How often the accept loop looks for new connections and for a stop: the listener is
/// polled rather than woken, so stopping never depends on opening one more socket (which a
/// process out of file descriptors could not).
const POLL: Duration = Duration::from_millis(25);

/// Bytes of request line and headers read at most; a scraper sends a few hundred.
const MAX_REQUEST: usize = 64 * 1024;

/// The bounds of an endpoint (see the module).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Connections served at once: a scraper needs one, a few dashboards a handful.
    pub max_connections: usize,
    /// How long a connection may send (or take) nothing before it is dropped.
    pub idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 16,
            idle_timeout: Duration::from_secs(5),
        }
    }
}

/// The port could not be served: in use, or refused by the system.
#[derive(Debug)]
pub struct EndpointError {
    /// The port asked for.
    pub port: u16,
    /// Why binding failed.
    pub source: io::Error,
}

impl EndpointError {
    /// Whether another socket holds the port.
    pub fn in_use(&self) -> bool {
        self.source.kind() == io::ErrorKind::AddrInUse
    }
}

impl fmt::Display for EndpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let port = self.port;
        write!(f, "stats_port {port}: 127.0.0.1:{port} ")?;
        if self.in_use() {
            write!(f, "is in use")?;
        } else {
            write!(f, "cannot be served ({})", self.source)?;
        }
        write!(f, "; pass another port, or stats_port=0 for a free one")
    }
}

impl std::error::Error for EndpointError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// One accepted connection: its socket while it is served (taken away when its thread is
/// done with it) and its thread, joined by the accept loop or by [`MetricsEndpoint::stop`].
struct Conn {
    stream: Option<Arc<TcpStream>>,
    thread: Option<JoinHandle<()>>,
}

/// What an endpoint serves: another component's metrics text, made when scraped (the shared
/// service's dispatcher serves its registry's).
pub type TextSource = Arc<dyn Fn() -> String + Send + Sync>;

enum Source {
    Pipeline(Arc<PipelineStats>),
    Text(TextSource),
}

const PROMETHEUS_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

struct Shared {
    stopped: AtomicBool,
    /// What is served; [`MetricsEndpoint::follow`] replaces a run's statistics (a checkpoint
    /// load starts a new run).
    stats: Mutex<Source>,
    conns: Mutex<(u64, HashMap<u64, Conn>)>,
    limits: Limits,
}

/// A lock that a panicking holder did not poison for good: the data are plain handles.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running metrics endpoint (see the module); stops when dropped.
///
/// ```
/// use std::io::{Read, Write};
/// use std::sync::Arc;
/// use sluice_core::stats::{endpoint::{Limits, MetricsEndpoint}, PipelineStats};
///
/// let stats = Arc::new(PipelineStats::new(vec![]));
/// let endpoint = MetricsEndpoint::serve(0, Limits::default(), stats).unwrap();
/// let mut conn = std::net::TcpStream::connect(endpoint.address()).unwrap();
/// conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
/// let mut reply = String::new();
/// conn.read_to_string(&mut reply).unwrap();
/// assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"));
/// assert!(reply.contains("\nsluice_consumer_outputs_total 0\n"));
/// endpoint.stop();
/// ```
pub struct MetricsEndpoint {
    address: SocketAddr,
    shared: Arc<Shared>,
    accept: Mutex<Option<JoinHandle<()>>>,
}

impl MetricsEndpoint {
    /// Listens on 127.0.0.1:`port` (0: a free port, see [`Self::address`]) and serves
    /// `stats` from a thread of its own.
    pub fn serve(
        port: u16,
        limits: Limits,
        stats: Arc<PipelineStats>,
    ) -> Result<MetricsEndpoint, EndpointError> {
        Self::start(port, limits, Source::Pipeline(stats))
    }

    /// Listens on 127.0.0.1:`port` and serves what `text` returns when scraped (already in
    /// the Prometheus text format).
    pub fn serve_text(
        port: u16,
        limits: Limits,
        text: TextSource,
    ) -> Result<MetricsEndpoint, EndpointError> {
        Self::start(port, limits, Source::Text(text))
    }

    fn start(port: u16, limits: Limits, source: Source) -> Result<MetricsEndpoint, EndpointError> {
        let failed = |source| EndpointError { port, source };
        // Loopback only: the figures are for this machine's exporter or dashboard.
        let listener = TcpListener::bind(("127.0.0.1", port)).map_err(failed)?;
        listener.set_nonblocking(true).map_err(failed)?;
        let address = listener.local_addr().map_err(failed)?;
        let shared = Arc::new(Shared {
            stopped: AtomicBool::new(false),
            stats: Mutex::new(source),
            conns: Mutex::new((0, HashMap::new())),
            limits,
        });
        let accept = {
            let shared = shared.clone();
            thread::Builder::new()
                .name("sluice-metrics".into())
                .spawn(move || accept_loop(listener, &shared))
                .map_err(failed)?
        };
        Ok(MetricsEndpoint {
            address,
            shared,
            accept: Mutex::new(Some(accept)),
        })
    }

    /// Where the endpoint listens (127.0.0.1 and the port taken).
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Serves `stats` from now on.
    pub fn follow(&self, stats: Arc<PipelineStats>) {
        *lock(&self.shared.stats) = Source::Pipeline(stats);
    }

    /// Connections being served now (0 once stopped).
    pub fn connections(&self) -> usize {
        lock(&self.shared.conns)
            .1
            .values()
            .filter(|c| c.stream.is_some())
            .count()
    }

    /// Stops accepting, closes every connection and waits for every thread of the
    /// endpoint; later calls do nothing.
    pub fn stop(&self) {
        self.shared.stopped.store(true, Ordering::Release);
        let accept = lock(&self.accept).take();
        if let Some(t) = accept {
            let _ = t.join();
        }
        // The accept loop is gone: nothing adds connections any more.
        let conns: Vec<Conn> = lock(&self.shared.conns).1.drain().map(|(_, c)| c).collect();
        for c in &conns {
            if let Some(s) = &c.stream {
                // Wakes a thread blocked reading or writing: it sees the end and returns.
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        for t in conns.into_iter().filter_map(|c| c.thread) {
            let _ = t.join();
        }
    }
}

impl Drop for MetricsEndpoint {
    fn drop(&mut self) {
        self.stop();
    }
}

impl fmt::Debug for MetricsEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MetricsEndpoint")
            .field("address", &self.address)
            .field("connections", &self.connections())
            .finish()
    }
}

fn accept_loop(listener: TcpListener, shared: &Arc<Shared>) {
    while !shared.stopped.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((stream, _)) => admit(stream, shared),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // Nothing waiting, or no descriptor to accept with (the connection waits in the
            // backlog): look again after a pause rather than spin.
            Err(_) => {
                reap(shared);
                thread::sleep(POLL);
            }
        }
    }
}

/// Serves `stream` on a thread of its own, or closes it at once past the cap.
fn admit(stream: TcpStream, shared: &Arc<Shared>) {
    let stream = Arc::new(stream);
    let id = {
        let mut conns = lock(&shared.conns);
        let open = conns.1.values().filter(|c| c.stream.is_some()).count();
        if open >= shared.limits.max_connections {
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
        let id = conns.0;
        conns.0 += 1;
        let conn = Conn {
            stream: Some(stream.clone()),
            thread: None,
        };
        conns.1.insert(id, conn);
        id
    };
    let for_thread = shared.clone();
    let spawned = thread::Builder::new()
        .name("sluice-metrics-conn".into())
        .spawn(move || {
            serve_connection(&stream, &for_thread);
            let _ = stream.shutdown(Shutdown::Both);
            if let Some(c) = lock(&for_thread.conns).1.get_mut(&id) {
                c.stream = None;
            }
        });
    let mut conns = lock(&shared.conns);
    match spawned {
        Ok(t) => {
            if let Some(c) = conns.1.get_mut(&id) {
                c.thread = Some(t);
            }
        }
        // No thread (a limit): the slot is given back and the connection closed.
        Err(_) => {
            conns.1.remove(&id);
        }
    }
}

/// Joins the threads of connections that are done.
fn reap(shared: &Shared) {
    let done: Vec<JoinHandle<()>> = {
        let mut conns = lock(&shared.conns);
        let ids: Vec<u64> = (conns.1.iter())
            .filter(|(_, c)| c.stream.is_none() && c.thread.is_some())
            .map(|(id, _)| *id)
            .collect();
        ids.iter()
            .filter_map(|id| conns.1.remove(id).and_then(|c| c.thread))
            .collect()
    };
    for t in done {
        let _ = t.join();
    }
}

fn serve_connection(mut stream: &TcpStream, shared: &Shared) {
    // A zero timeout means none to the socket API: the shortest real one instead.
    let idle = shared.limits.idle_timeout.max(Duration::from_millis(1));
    let _ = stream.set_read_timeout(Some(idle));
    let _ = stream.set_write_timeout(Some(idle));
    let Some(head) = read_head(stream) else {
        return; // closed, idle too long, or the endpoint stopped
    };
    let reply = match head {
        Head::TooLarge => error_reply(431, "Request Header Fields Too Large"),
        Head::Complete(text) => answer(&text, shared),
    };
    let _ = stream.write_all(&reply);
    let _ = stream.flush();
}

enum Head {
    Complete(String),
    TooLarge,
}

/// The request line and headers, up to the blank line; None when the peer sends nothing
/// complete before it closes, stays idle past the timeout, or the endpoint stops.
fn read_head(mut stream: &TcpStream) -> Option<Head> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let n = match stream.read(&mut chunk) {
            Ok(0) => return None,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return None,
        };
        let from = buf.len().saturating_sub(3);
        buf.extend_from_slice(&chunk[..n]);
        let tail = &buf[from..];
        let ends =
            tail.windows(4).any(|w| w == b"\r\n\r\n") || tail.windows(2).any(|w| w == b"\n\n");
        if ends {
            return Some(Head::Complete(String::from_utf8_lossy(&buf).into_owned()));
        }
        if buf.len() > MAX_REQUEST {
            return Some(Head::TooLarge);
        }
    }
}

/// The reply to one request: the metrics for `GET /` or `GET /metrics` (a query ignored),
/// 404 for other paths, 501 for other methods, 400 for what is not HTTP.
fn answer(head: &str, shared: &Shared) -> Vec<u8> {
    let line = head.lines().next().unwrap_or("");
    let parts: Vec<&str> = line.split_whitespace().collect();
    let [method, target, version] = parts[..] else {
        return error_reply(400, "Bad Request");
    };
    if !version.starts_with("HTTP/") {
        return error_reply(400, "Bad Request");
    }
    if method != "GET" {
        return error_reply(501, "Not Implemented");
    }
    let path = target.split('?').next().unwrap_or("");
    if path != "/" && path != "/metrics" {
        return error_reply(404, "Not Found");
    }
    // Cloned out first: the text is made without holding the endpoint's lock.
    let source = match &*lock(&shared.stats) {
        Source::Pipeline(stats) => Err(stats.clone()),
        Source::Text(text) => Ok(text.clone()),
    };
    let body = match source {
        Ok(text) => text(),
        Err(stats) => prometheus_text(&stats.report()),
    };
    reply("200 OK", PROMETHEUS_TYPE, body.as_bytes())
}

fn error_reply(code: u16, reason: &str) -> Vec<u8> {
    let body = format!("{code} {reason}\n");
    reply(
        &format!("{code} {reason}"),
        "text/plain; charset=utf-8",
        body.as_bytes(),
    )
}

fn reply(status: &str, kind: &str, body: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

#[cfg(test)]
#[path = "endpoint_tests.rs"]
mod tests;
