//! The endpoint over loopback: every wait is bounded by a generous hang guard, never a
//! timing assertion.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Instant;

use super::*;
use crate::stats::StageInfo;

const GUARD: Duration = Duration::from_secs(30);

fn stats() -> Arc<PipelineStats> {
    let info = StageInfo {
        name: "source: range".into(),
        threads: 1,
        inline: false,
        queue_capacity: 2,
        pool: None,
    };
    Arc::new(PipelineStats::new(vec![info]))
}

fn endpoint(limits: Limits) -> MetricsEndpoint {
    MetricsEndpoint::serve(0, limits, stats()).unwrap()
}

fn connect(e: &MetricsEndpoint) -> TcpStream {
    let s = TcpStream::connect(e.address()).unwrap();
    s.set_read_timeout(Some(GUARD)).unwrap();
    s
}

/// The whole reply to `request` on a fresh connection.
fn get(e: &MetricsEndpoint, request: &str) -> String {
    let mut s = connect(e);
    s.write_all(request.as_bytes()).unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    reply
}

/// Whether the server closed `s` (end of stream or reset) before the guard ran out.
fn closed_by_peer(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 1];
    match s.read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ),
    }
}

fn wait_for(what: impl Fn() -> bool) {
    let start = Instant::now();
    while !what() {
        assert!(start.elapsed() < GUARD, "hang guard");
        thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn serves_the_metrics_and_404_elsewhere() {
    let e = endpoint(Limits::default());
    assert_eq!(e.address().ip().to_string(), "127.0.0.1");
    for path in ["/metrics", "/", "/metrics?x=1"] {
        let reply = get(&e, &format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n"));
        let (head, body) = reply.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        assert!(head.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8"));
        assert!(head.contains(&format!("Content-Length: {}", body.len())));
        assert!(body.contains("sluice_stage_samples_in_total{stage=\"source: range\"} 0\n"));
    }
    let reply = get(&e, "GET /other HTTP/1.1\r\n\r\n");
    assert!(reply.starts_with("HTTP/1.1 404 Not Found\r\n"), "{reply}");
    let reply = get(&e, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    assert!(reply.starts_with("HTTP/1.1 501 "), "{reply}");
    let reply = get(&e, "hello\r\n\r\n");
    assert!(reply.starts_with("HTTP/1.1 400 "), "{reply}");
}

#[test]
fn follows_the_statistics_it_is_given() {
    let e = endpoint(Limits::default());
    let next = stats();
    next.record_output(Duration::ZERO, 7);
    e.follow(next);
    let reply = get(&e, "GET /metrics HTTP/1.0\r\n\r\n");
    assert!(
        reply.contains("\nsluice_consumer_samples_total 7\n"),
        "{reply}"
    );
}

#[test]
fn connections_past_the_cap_are_closed_at_once() {
    let limits = Limits {
        max_connections: 2,
        idle_timeout: Duration::from_secs(600),
    };
    let e = endpoint(limits);
    let held: Vec<TcpStream> = (0..2).map(|_| connect(&e)).collect();
    wait_for(|| e.connections() == 2);
    let mut extra = connect(&e);
    assert!(closed_by_peer(&mut extra));
    assert_eq!(e.connections(), 2);
    drop(held);
    wait_for(|| e.connections() == 0);
    assert!(get(&e, "GET /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200 OK"));
}

#[test]
fn an_idle_connection_is_dropped() {
    let limits = Limits {
        max_connections: 4,
        idle_timeout: Duration::from_millis(100),
    };
    let e = endpoint(limits);
    let mut idle = connect(&e);
    let mut partial = connect(&e);
    partial.write_all(b"GET /metrics HT").unwrap();
    assert!(closed_by_peer(&mut idle));
    assert!(closed_by_peer(&mut partial));
    wait_for(|| e.connections() == 0);
}

#[test]
fn an_oversized_request_is_refused() {
    // No idle timeout to end the connection: only the size limit can.
    let e = endpoint(Limits {
        max_connections: 4,
        idle_timeout: Duration::from_secs(600),
    });
    let mut s = connect(&e);
    let header = format!("GET / HTTP/1.1\r\nX: {}\r\n", "a".repeat(MAX_REQUEST));
    // The server may close before taking all of it: the reply (or a reset, when it closed
    // with unread bytes) is what matters; waiting out the read guard means it kept reading.
    let _ = s.write_all(header.as_bytes());
    let mut reply = String::new();
    match s.read_to_string(&mut reply) {
        Ok(_) => assert!(
            reply.is_empty() || reply.starts_with("HTTP/1.1 431 "),
            "{reply}"
        ),
        Err(e) => assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
            ),
            "the oversized request was not refused: {e}"
        ),
    }
}

#[test]
fn stop_closes_the_connections_and_the_port() {
    let limits = Limits {
        max_connections: 4,
        idle_timeout: Duration::from_secs(600),
    };
    let e = endpoint(limits);
    let address = e.address();
    let mut held: Vec<TcpStream> = (0..3).map(|_| connect(&e)).collect();
    wait_for(|| e.connections() == 3);
    e.stop();
    assert_eq!(e.connections(), 0);
    assert!(held.iter_mut().all(closed_by_peer));
    assert!(TcpStream::connect(address).is_err());
    e.stop(); // a second stop does nothing
    drop(e); // nor does the drop after it
}

#[test]
fn a_taken_port_is_named_in_the_error() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let err = MetricsEndpoint::serve(port, Limits::default(), stats()).unwrap_err();
    assert!(err.in_use() && err.port == port);
    assert_eq!(
        err.to_string(),
        format!(
            "stats_port {port}: 127.0.0.1:{port} is in use; pass another port, or \
             stats_port=0 for a free one"
        )
    );
}

#[test]
fn a_text_source_is_asked_at_each_scrape() {
    let n = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let source: TextSource = {
        let n = n.clone();
        Arc::new(move || {
            format!(
                "svc_scrapes_total {}\n",
                n.fetch_add(1, Ordering::SeqCst) + 1
            )
        })
    };
    let e = MetricsEndpoint::serve_text(0, Limits::default(), source).unwrap();
    let first = get(&e, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(first.starts_with("HTTP/1.1 200 OK\r\n"), "{first}");
    assert!(first.ends_with("\r\n\r\nsvc_scrapes_total 1\n"), "{first}");
    let second = get(&e, "GET / HTTP/1.1\r\n\r\n");
    assert!(second.ends_with("svc_scrapes_total 2\n"), "{second}");
    e.stop();
}
