//! The agent's metrics endpoint (`dfsched agent --metrics ADDR`): its
//! counters and what `dfsched top` shows, in the Prometheus text format
//! (0.0.4), or OpenMetrics 1.0 when the scraper asks for it (`Accept:
//! application/openmetrics-text`), over HTTP/1.0 on a loopback TCP address
//! or a Unix socket.
//!
//! ```text
//!   scraper ──GET /metrics──► accept (one at a time, this thread)
//!     Unix socket: SO_PEERCRED uid must be the agent's or root, else closed
//!     read the request head: ≤ 8 KiB, whole within IO_TIMEOUT
//!     render (state lock held only to copy; no /proc but comm names)
//!     write: within IO_TIMEOUT; close
//! ```
//!
//! Bounds: one connection at a time, each with a deadline for its whole
//! request and its whole reply, so a scraper that stalls holds the
//! endpoint for at most 2 × [`IO_TIMEOUT`] and never the agent; a request
//! head longer than [`MAX_REQUEST_BYTES`] is answered 431 and closed. The
//! reply grows with processes × CPUs and groups, all bounded by the
//! agent's own caps.
//!
//! Who may read it: on a Unix socket (mode 0600) the agent's uid and root;
//! on TCP, which carries no credentials, whoever can reach the address, so
//! only loopback addresses are accepted: it tells the pids, command names
//! and loads of the processes the agent serves (what `/proc` already shows
//! to local users on most systems) and nothing else.
//!
//! A scrape also makes the agent ask runtimes for their details for
//! [`METRICS_WATCH_FOR`] (`top.rs`): the per-process counters come from
//! them, so the first scrape after a quiet spell may lack them.
//!
//! # Metrics
//!
//! | name | type | labels | meaning |
//! |---|---|---|---|
//! | `dfsched_agent_processes` | gauge | | processes registered |
//! | `dfsched_agent_sharing_sets` | gauge | | sharing sets of 2+ processes |
//! | `dfsched_agent_connections_total` | counter | | connections accepted |
//! | `dfsched_agent_refused_total` | counter | `reason` = `peer`, `busy` | connections refused |
//! | `dfsched_agent_idle_closed_total` | counter | | connections closed idle |
//! | `dfsched_agent_bad_requests_total` | counter | | requests answered with an error |
//! | `dfsched_agent_reports_total` | counter | | load reports answered |
//! | `dfsched_agent_updates_total` | counter | | load updates after moves |
//! | `dfsched_agent_dropped_total` | counter | `reason` = `close`, `exit` | records dropped |
//! | `dfsched_agent_ticks_total` | counter | | sharing-detection ticks |
//! | `dfsched_agent_scans_total` | counter | | shared `/proc` samples taken |
//! | `dfsched_agent_scan_errors_total` | counter | | samples that failed |
//! | `dfsched_cpu_load_ours` | gauge | `cpu` | runnable threads of registered processes |
//! | `dfsched_cpu_load_others` | gauge | `cpu` | runnable threads of other processes (absent without a sample) |
//! | `dfsched_process_load` | gauge | `pid`, `comm` | a process's reported load, runnable threads |
//! | `dfsched_process_threads` | gauge | `pid`, `comm` | threads registered with its runtime |
//! | `dfsched_process_groups` | gauge | `pid`, `comm` | its groups |
//! | `dfsched_process_group_moves_total` | counter | `pid`, `comm` | whole-group moves by its balancer |
//! | `dfsched_process_task_moves_total` | counter | `pid`, `comm` | single-thread moves |
//! | `dfsched_process_splits_total` | counter | `pid`, `comm` | group splits |
//! | `dfsched_process_rehomes_total` | counter | `pid`, `comm` | group re-homes |
//! | `dfsched_process_balance_passes_total` | counter | `pid`, `comm` | balancer passes |
//!
//! The `dfsched_process_*` metrics other than `_load` are present only for
//! processes whose runtime has sent a detail.

use super::proto::Status;
use super::top::TopView;
use super::AgentError;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::{Duration, Instant};

/// The deadline of a request's head, and separately of its reply.
pub const IO_TIMEOUT: Duration = Duration::from_secs(2);

/// The longest request head read.
pub const MAX_REQUEST_BYTES: usize = 8 * 1024;

/// How long after a scrape runtimes send their details: longer than the
/// usual scrape interval (15 s), so a steady scraper keeps them coming.
pub const METRICS_WATCH_FOR: Duration = Duration::from_secs(60);

/// Where the endpoint listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetricsAddr {
    /// A loopback TCP address.
    Tcp(SocketAddr),
    /// A Unix socket path.
    Unix(PathBuf),
}

impl FromStr for MetricsAddr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.starts_with('/') {
            return Ok(MetricsAddr::Unix(PathBuf::from(s)));
        }
        let addr: SocketAddr = s.parse().map_err(|_| {
            format!("{s:?} is neither HOST:PORT (127.0.0.1:9477, [::1]:9477) nor an absolute socket path")
        })?;
        if !addr.ip().is_loopback() {
            return Err(format!(
                "{addr} is not a loopback address: the metrics endpoint carries no credentials, so it listens on 127.0.0.1/::1 or a Unix socket only"
            ));
        }
        Ok(MetricsAddr::Tcp(addr))
    }
}

impl std::fmt::Display for MetricsAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MetricsAddr::Tcp(a) => write!(f, "{a}"),
            MetricsAddr::Unix(p) => write!(f, "{}", p.display()),
        }
    }
}

/// A bound endpoint.
#[derive(Debug)]
pub(super) enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
}

impl Listener {
    /// Binds `addr` (a Unix socket is made 0600; a stale one, no longer
    /// listened on, is replaced).
    pub(super) fn bind(addr: &MetricsAddr) -> Result<Listener, AgentError> {
        let setup = |what: &str, e: std::io::Error| {
            AgentError::Setup(format!("metrics endpoint {addr}: {what}: {e}"))
        };
        match addr {
            MetricsAddr::Tcp(a) => Ok(Listener::Tcp(
                TcpListener::bind(a).map_err(|e| setup("bind", e))?,
            )),
            MetricsAddr::Unix(p) => {
                if UnixStream::connect(p).is_ok() {
                    return Err(AgentError::Setup(format!(
                        "metrics endpoint {addr}: something listens there already"
                    )));
                }
                let _ = std::fs::remove_file(p);
                let l = UnixListener::bind(p).map_err(|e| setup("bind", e))?;
                std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o600))
                    .map_err(|e| setup("chmod 0600", e))?;
                Ok(Listener::Unix(l, p.clone()))
            }
        }
    }

    /// The TCP address bound (for a port 0 given).
    pub(super) fn local_addr(&self) -> Option<SocketAddr> {
        match self {
            Listener::Tcp(l) => l.local_addr().ok(),
            Listener::Unix(..) => None,
        }
    }

    fn fd(&self) -> i32 {
        match self {
            Listener::Tcp(l) => l.as_raw_fd(),
            Listener::Unix(l, _) => l.as_raw_fd(),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix(_, p) = self {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Serves scrapes until `stop()` says so (checked at least once a second):
/// `render(openmetrics)` makes each body; `uid` and root may read a Unix
/// endpoint.
pub(super) fn serve(
    listener: &Listener,
    uid: u32,
    stop: impl Fn() -> bool,
    render: impl Fn(bool) -> String,
) {
    while !stop() {
        // Wait for a connection at most a second, so a stop is seen.
        let mut pfd = libc::pollfd {
            fd: listener.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: `pfd` is one valid pollfd for the call's duration, and
        // its fd is the listener's, open while `listener` lives.
        let n = unsafe { libc::poll(&mut pfd, 1, 1000) };
        if n <= 0 {
            continue;
        }
        match listener {
            Listener::Tcp(l) => {
                if let Ok((s, _)) = l.accept() {
                    let _ = answer(TcpConn(s), &render);
                }
            }
            Listener::Unix(l, _) => {
                if let Ok((s, _)) = l.accept() {
                    match super::sock::peer_cred(&s) {
                        Ok((_, peer)) if peer == uid || peer == 0 => {
                            let _ = answer(UnixConn(s), &render);
                        }
                        // Another user's: closed without a word.
                        _ => {}
                    }
                }
            }
        }
    }
}

/// A stream with per-call timeouts.
trait Conn: Read + Write {
    fn set_timeouts(&self, t: Duration) -> std::io::Result<()>;
}

struct TcpConn(TcpStream);
struct UnixConn(UnixStream);

impl Read for TcpConn {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(b)
    }
}
impl Write for TcpConn {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.write(b)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}
impl Conn for TcpConn {
    fn set_timeouts(&self, t: Duration) -> std::io::Result<()> {
        self.0.set_read_timeout(Some(t))?;
        self.0.set_write_timeout(Some(t))
    }
}
impl Read for UnixConn {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(b)
    }
}
impl Write for UnixConn {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.write(b)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}
impl Conn for UnixConn {
    fn set_timeouts(&self, t: Duration) -> std::io::Result<()> {
        self.0.set_read_timeout(Some(t))?;
        self.0.set_write_timeout(Some(t))
    }
}

/// Reads one request head and writes one reply, each within
/// [`IO_TIMEOUT`] (the socket timeout is shortened as the deadline nears).
fn answer(mut c: impl Conn, render: &impl Fn(bool) -> String) -> std::io::Result<()> {
    let deadline = Instant::now() + IO_TIMEOUT;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let complete = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        c.set_timeouts(left)?;
        let n = c.read(&mut buf)?;
        if n == 0 {
            break false;
        }
        head.extend_from_slice(&buf[..n]);
        if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
            break true;
        }
        if head.len() > MAX_REQUEST_BYTES {
            break false;
        }
    };
    let reply = if head.len() > MAX_REQUEST_BYTES {
        response(431, "text/plain", "request head too long\n")
    } else if !complete {
        return Ok(());
    } else {
        let text = String::from_utf8_lossy(&head);
        let first = text.lines().next().unwrap_or("");
        let mut parts = first.split_whitespace();
        let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let openmetrics = text.lines().any(|l| {
            l.to_ascii_lowercase().starts_with("accept:")
                && l.contains("application/openmetrics-text")
        });
        if method != "GET" {
            response(405, "text/plain", "only GET\n")
        } else if path != "/metrics" && path != "/" {
            response(404, "text/plain", "see /metrics\n")
        } else if openmetrics {
            response(
                200,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                &render(true),
            )
        } else {
            response(
                200,
                "text/plain; version=0.0.4; charset=utf-8",
                &render(false),
            )
        }
    };
    c.set_timeouts(IO_TIMEOUT)?;
    c.write_all(&reply)?;
    c.flush()
}

fn response(code: u16, content_type: &str, body: &str) -> Vec<u8> {
    let reason = match code {
        200 => "OK",
        404 => "Not Found",
        405 => "Method Not Allowed",
        _ => "Request Header Fields Too Large",
    };
    let mut out = format!(
        "HTTP/1.0 {code} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body.as_bytes());
    out
}

/// A label value escaped as both formats want (backslash, quote, newline).
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Runnable threads from thousandths, as a float sample.
fn threads(milli: u64) -> String {
    format!("{}", milli as f64 / 1000.0)
}

/// The exposition of `status` and `top`: Prometheus text, or OpenMetrics
/// (counter families named without `_total`, `# EOF` at the end).
pub fn render(status: &Status, top: &TopView, openmetrics: bool) -> String {
    let mut out = String::new();
    let mut family = |name: &str, kind: &str, help: &str, samples: &[(String, String)]| {
        let base = if openmetrics && kind == "counter" {
            name.trim_end_matches("_total")
        } else {
            name
        };
        let _ = writeln!(out, "# HELP {base} {help}");
        let _ = writeln!(out, "# TYPE {base} {kind}");
        for (labels, value) in samples {
            let _ = writeln!(out, "{name}{labels} {value}");
        }
    };
    let one = |v: u64| vec![(String::new(), v.to_string())];
    let c = &status.counters;
    family(
        "dfsched_agent_processes",
        "gauge",
        "Processes registered with the agent.",
        &one(status.processes.len() as u64),
    );
    family(
        "dfsched_agent_sharing_sets",
        "gauge",
        "Sharing sets of two or more processes.",
        &one(status.sets.len() as u64),
    );
    family(
        "dfsched_agent_connections_total",
        "counter",
        "Connections accepted.",
        &one(c.connections),
    );
    family(
        "dfsched_agent_refused_total",
        "counter",
        "Connections refused, by reason (peer: another uid; busy: a connection cap).",
        &[
            ("{reason=\"peer\"}".into(), c.refused_peers.to_string()),
            ("{reason=\"busy\"}".into(), c.refused_busy.to_string()),
        ],
    );
    family(
        "dfsched_agent_idle_closed_total",
        "counter",
        "Connections closed for sending no request within the idle timeout.",
        &one(c.idle_closed),
    );
    family(
        "dfsched_agent_bad_requests_total",
        "counter",
        "Requests answered with an error.",
        &one(c.bad_requests),
    );
    family(
        "dfsched_agent_reports_total",
        "counter",
        "Load reports answered.",
        &one(c.reports),
    );
    family(
        "dfsched_agent_updates_total",
        "counter",
        "Load updates after moves recorded.",
        &one(c.updates),
    );
    family(
        "dfsched_agent_dropped_total",
        "counter",
        "Process records dropped, by reason (close: connection closed; exit: pid gone).",
        &[
            ("{reason=\"close\"}".into(), c.dropped_on_close.to_string()),
            ("{reason=\"exit\"}".into(), c.dropped_on_exit.to_string()),
        ],
    );
    family(
        "dfsched_agent_ticks_total",
        "counter",
        "Sharing-detection ticks.",
        &one(c.ticks),
    );
    family(
        "dfsched_agent_scans_total",
        "counter",
        "Shared /proc samples of the unmanaged load.",
        &one(c.scans),
    );
    family(
        "dfsched_agent_scan_errors_total",
        "counter",
        "Shared samples that failed.",
        &one(c.scan_errors),
    );
    let cpu = |f: &dyn Fn(&super::top::CpuTop) -> Option<u64>| -> Vec<(String, String)> {
        top.cpus
            .iter()
            .filter_map(|c| Some((format!("{{cpu=\"{}\"}}", c.cpu.0), threads(f(c)?))))
            .collect()
    };
    family(
        "dfsched_cpu_load_ours",
        "gauge",
        "Runnable threads of processes under dfsched, per CPU.",
        &cpu(&|c| Some(c.ours_milli)),
    );
    family(
        "dfsched_cpu_load_others",
        "gauge",
        "Runnable threads of processes not under dfsched, per CPU (the agent's shared sample).",
        &cpu(&|c| c.others_milli),
    );
    let label = |p: &super::top::ProcessTop| {
        format!(
            "{{pid=\"{}\",comm=\"{}\"}}",
            p.pid,
            esc(p.comm.as_deref().unwrap_or(""))
        )
    };
    let per = |f: &dyn Fn(&super::top::ProcessTop) -> Option<String>| -> Vec<(String, String)> {
        top.processes
            .iter()
            .filter_map(|p| Some((label(p), f(p)?)))
            .collect()
    };
    family(
        "dfsched_process_load",
        "gauge",
        "A process's reported load, runnable threads.",
        &per(&|p| Some(threads(p.load_milli.iter().map(|&(_, m)| m).sum()))),
    );
    let d = |f: fn(&super::top::Detail) -> u64| {
        per(&move |p| p.detail.as_ref().map(|d| f(d).to_string()))
    };
    family(
        "dfsched_process_threads",
        "gauge",
        "Threads registered with the process's runtime.",
        &d(|d| u64::from(d.threads)),
    );
    family(
        "dfsched_process_groups",
        "gauge",
        "The process's groups.",
        &d(|d| d.groups.len() as u64 + u64::from(d.groups_omitted)),
    );
    family(
        "dfsched_process_group_moves_total",
        "counter",
        "Whole-group moves by the process's balancer.",
        &d(|d| d.group_moves),
    );
    family(
        "dfsched_process_task_moves_total",
        "counter",
        "Single-thread moves by the process's balancer.",
        &d(|d| d.task_moves),
    );
    family(
        "dfsched_process_splits_total",
        "counter",
        "Group splits.",
        &d(|d| d.splits),
    );
    family(
        "dfsched_process_rehomes_total",
        "counter",
        "Group re-homes by the home rule.",
        &d(|d| d.rehomes),
    );
    family(
        "dfsched_process_balance_passes_total",
        "counter",
        "Balancer passes.",
        &d(|d| d.passes),
    );
    if openmetrics {
        out.push_str("# EOF\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::proto::Counters;
    use crate::agent::top::{CpuTop, Detail, ProcessTop};
    use dfsched_core::CpuId;

    fn sample() -> (Status, TopView) {
        let status = Status {
            agent_pid: 1,
            agent_uid: 1000,
            processes: Vec::new(),
            sets: Vec::new(),
            counters: Counters {
                reports: 42,
                ..Counters::default()
            },
        };
        let top = TopView {
            agent_pid: 1,
            cpus: vec![CpuTop {
                cpu: CpuId(0),
                ours_milli: 1500,
                others_milli: Some(250),
            }],
            processes: vec![ProcessTop {
                pid: 77,
                uid: 1000,
                comm: Some("a\"b".into()),
                load_milli: vec![(CpuId(0), 1500)],
                set: None,
                detail: Some(Detail {
                    policy: "co-thread".into(),
                    body: crate::scx::Body::Affinity,
                    threads: 3,
                    groups: Vec::new(),
                    groups_omitted: 0,
                    group_moves: 5,
                    task_moves: 0,
                    splits: 0,
                    rehomes: 1,
                    passes: 9,
                    last_pass: None,
                }),
                detail_age_ms: Some(0),
            }],
        };
        (status, top)
    }

    #[test]
    fn the_exposition_names_types_and_escapes_as_documented() {
        let (s, t) = sample();
        let text = render(&s, &t, false);
        for line in [
            "# TYPE dfsched_agent_reports_total counter",
            "dfsched_agent_reports_total 42",
            "# TYPE dfsched_cpu_load_ours gauge",
            "dfsched_cpu_load_ours{cpu=\"0\"} 1.5",
            "dfsched_cpu_load_others{cpu=\"0\"} 0.25",
            "dfsched_process_group_moves_total{pid=\"77\",comm=\"a\\\"b\"} 5",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} missing:\n{text}");
        }
        // Every family documented in the module doc is there.
        let doc = include_str!("metrics.rs");
        for name in doc
            .lines()
            .filter_map(|l| l.strip_prefix("//! | `dfsched_"))
            .map(|l| format!("dfsched_{}", &l[..l.find('`').unwrap()]))
        {
            assert!(
                text.contains(&format!("# TYPE {name} ")),
                "{name} undocumented or missing"
            );
        }
        assert!(!text.contains("# EOF"));
        let om = render(&s, &t, true);
        assert!(om.ends_with("# EOF\n"));
        assert!(om.contains("# TYPE dfsched_agent_reports counter"), "{om}");
        assert!(om.contains("dfsched_agent_reports_total 42"));
    }

    #[test]
    fn only_loopback_or_a_socket_path_is_accepted() {
        assert!(matches!("127.0.0.1:9477".parse(), Ok(MetricsAddr::Tcp(_))));
        assert!(matches!("[::1]:9477".parse(), Ok(MetricsAddr::Tcp(_))));
        assert!(matches!("/run/x.sock".parse(), Ok(MetricsAddr::Unix(_))));
        let e = "0.0.0.0:9477".parse::<MetricsAddr>().unwrap_err();
        assert!(e.contains("loopback"), "{e}");
        assert!("localhost".parse::<MetricsAddr>().is_err());
    }
}
