//! `dfsched agent --metrics ADDR`: a scrape of a real agent serving a
//! program under `dfsched run` gives the documented families with that
//! process's load and, once its runtime has sent its detail, its groups;
//! a Unix endpoint and a loopback TCP one both answer; a client that sends
//! nothing is cut off by the endpoint's deadline, so the next scrape is
//! answered; an over-long request head is refused.
//!
//! Waits are for states, bounded by [`PATIENCE`]; nothing is timed.

#[path = "run_fixtures/support.rs"]
mod support;

mod agent_support;

use agent_support::{AgentGuard, TempDir};
use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};
use support::{c_program, run_cmd, skip_or_fail, Running};

const PATIENCE: Duration = Duration::from_secs(20);

/// One HTTP exchange of `request` on `stream`: the whole reply.
fn exchange(mut stream: impl Read + Write, request: &[u8]) -> String {
    stream.write_all(request).unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    reply
}

fn scrape_unix(path: &Path) -> String {
    let s = std::os::unix::net::UnixStream::connect(path).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    exchange(s, b"GET /metrics HTTP/1.0\r\n\r\n")
}

/// Scrapes until `ok` holds of the body (at most [`PATIENCE`]).
fn scrape_until(path: &Path, what: &str, ok: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let reply = scrape_unix(path);
        if ok(&reply) {
            return reply;
        }
        assert!(Instant::now() < deadline, "never: {what}\n{reply}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_scrape_shows_a_run_programs_load_and_groups_in_the_text_format() {
    let dir = TempDir::new("metrics");
    let endpoint = dir.path().join("metrics.sock");
    let _agent = AgentGuard::start(&dir.sock(), &["--metrics", endpoint.to_str().unwrap()]);
    let Some(prog) = c_program() else {
        skip_or_fail(
            "SKIP a_scrape_shows_a_run_programs_load_and_groups_in_the_text_format: no gcc",
        );
        return;
    };
    let mut cmd = run_cmd(&["--policy", "co-thread"], &prog, &["spin", "2"]);
    cmd.env("DFSCHED_AGENT", dir.sock());
    let program = Running::start(cmd);
    let pid = program.pid;
    let groups = format!("dfsched_process_groups{{pid=\"{pid}\",comm=\"threads_c\"}} 1");
    let reply = scrape_until(&endpoint, "the program's groups", |r| {
        r.lines().any(|l| l == groups)
    });
    assert!(reply.starts_with("HTTP/1.0 200 OK\r\n"), "{reply}");
    assert!(
        reply.contains("Content-Type: text/plain; version=0.0.4"),
        "{reply}"
    );
    for line in [
        "# TYPE dfsched_agent_processes gauge",
        "dfsched_agent_processes 1",
        "# TYPE dfsched_agent_reports_total counter",
        "# TYPE dfsched_cpu_load_ours gauge",
        "# TYPE dfsched_process_group_moves_total counter",
    ] {
        assert!(
            reply.lines().any(|l| l == line),
            "{line:?} missing:\n{reply}"
        );
    }
    assert!(
        reply.contains(&format!(
            "dfsched_process_load{{pid=\"{pid}\",comm=\"threads_c\"}} "
        )),
        "{reply}"
    );
    // OpenMetrics when asked for.
    let s = std::os::unix::net::UnixStream::connect(&endpoint).unwrap();
    let om = exchange(
        s,
        b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text; version=1.0.0\r\n\r\n",
    );
    assert!(om.contains("application/openmetrics-text"), "{om}");
    assert!(om.ends_with("# EOF\n"), "{om}");
    program.finish();
}

#[test]
fn a_silent_client_is_cut_off_and_the_next_scrape_is_answered_over_tcp() {
    // A free loopback port, for the agent to take (released just before).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let dir = TempDir::new("metricstcp");
    let _agent = AgentGuard::start(&dir.sock(), &["--metrics", &addr]);
    // Connects and says nothing: the endpoint gives up on it after its
    // request deadline (2 s) and serves the next one.
    let silent = std::net::TcpStream::connect(&addr).unwrap();
    let s = std::net::TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let reply = exchange(s, b"GET /metrics HTTP/1.0\r\n\r\n");
    assert!(reply.contains("dfsched_agent_processes 0"), "{reply}");
    drop(silent);
    // An over-long request head is refused, not read on.
    let s = std::net::TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let mut long = b"GET /metrics HTTP/1.0\r\nX-Pad: ".to_vec();
    long.extend(std::iter::repeat_n(b'a', 16 * 1024));
    long.extend(b"\r\n\r\n");
    let mut s2 = s;
    let _ = s2.write_all(&long);
    let mut reply = String::new();
    let _ = s2.read_to_string(&mut reply);
    assert!(reply.starts_with("HTTP/1.0 431"), "{reply}");
    // A path other than /metrics.
    let s = std::net::TcpStream::connect(&addr).unwrap();
    let reply = exchange(s, b"GET /other HTTP/1.0\r\n\r\n");
    assert!(reply.starts_with("HTTP/1.0 404"), "{reply}");
}
