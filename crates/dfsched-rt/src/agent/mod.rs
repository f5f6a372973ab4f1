//! `dfsched agent`: one coordinator per user and machine, so that processes
//! under dfsched share one view of the load and processes that share pipes
//! or sockets are placed together.
//!
//! # Design: a coordinator, not shared memory
//!
//! Each runtime's balancer talks to the agent over a Unix stream socket,
//! once per pass: it reports its own load and receives the sum of everyone
//! else's, the pids already accounted for, the runnable threads of every
//! process not registered (from one `/proc` scan the agent shares among all
//! its clients, `scan.rs`), and (if it shares a pipe or a socket with
//! another registered process) the home of its sharing set. After a pass
//! that moved threads it reports its load once more, so that the others'
//! next views show the move.
//! A shared-memory segment would save a system call per 100 ms pass but
//! loses on every point that matters here:
//! - **credentials**: the socket tells the agent who the peer is
//!   (`SO_PEERCRED`: pid and uid from the kernel, unforgeable), so a peer of
//!   another user is refused and a pid is never acted on for a uid that does
//!   not own it; a shared segment trusts whatever its writers put in it;
//! - **crash cleanup**: when a process exits or is killed, the kernel closes
//!   its socket and the agent drops its record at once (a pid check each
//!   tick is the backstop for a connection inherited by a forked child);
//!   records in shared memory outlive their writers until someone notices;
//! - **no lock held by a dead process**: only the agent takes its lock, and
//!   never across I/O; a process killed while holding a lock in a shared
//!   segment would stall every other one (robust futexes only move the
//!   problem to recovering half-written state);
//! - **one scan for everybody**: sharing detection reads `/proc/PID/fd` of
//!   every registered process each tick, and the unmanaged load is one scan
//!   of `/proc` per freshness bound (50 ms); with shared memory each process
//!   would still scan for itself (≈ 1 ms of CPU per scan, per process, per
//!   100 ms pass: 4.5 % of a 2-CPU machine with 9 processes).
//!
//! # Files
//!
//! - `proto.rs`: the wire protocol (versioned, newline-delimited JSON,
//!   lines of at most 64 KiB, unknown fields refused).
//! - `server.rs`: the agent itself (accept loop, a thread per connection,
//!   the tick thread, the idle exit).
//! - `limits.rs`: what the agent accepts, in numbers: the connection caps'
//!   and idle timeout's defaults, the range check on reported loads.
//! - `scan.rs`: the shared `/proc` scan of the unmanaged load and its
//!   freshness bound; the load is weighed by CFS group against each
//!   client's own group (`crate::weigh`), since which threads compete with
//!   a process one by one depends on its session or cgroup.
//! - `sharing.rs`: union-find over shared inodes, and the sharing sets'
//!   homes by the core's home rule.
//! - `client.rs`: the client used by runtimes and by `dfsched agent
//!   --status/--stop`; it checks whose agent it reached before sending
//!   anything.
//! - `sock.rs`: socket mechanics: a connect bounded even on a full accept
//!   queue, the peer's credentials, deadline-bound reads and writes, the
//!   client's directory check.
//! - `link.rs`: the runtime's side, run from its balancer pass.
//! - `attached.rs`: `dfsched attach PID`: a process without dfsched in it,
//!   placed from outside by the agent (its own engine, its threads from
//!   `/proc`), until `dfsched detach PID` gives its masks back.
//! - `top.rs`: what `dfsched top` shows: a runtime's detail (groups,
//!   homes, last pass), sent only while watched, and the agent's view.
//! - `metrics.rs`: the `--metrics` endpoint (Prometheus/OpenMetrics text).
//!
//! Only `link.rs`, `client.rs`, `proto.rs` and `sock.rs` are reachable from
//! the C ABI: the server's files are the `dfsched` command's, and the linker
//! leaves them out of `libdfsched.so`, which `dfsched run` preloads into
//! every process of a program (`tests/c_abi.rs` checks its symbols).
//!
//! # The socket
//!
//! `$XDG_RUNTIME_DIR/dfsched/agent.sock`, or `/tmp/dfsched-$UID/agent.sock`
//! without `XDG_RUNTIME_DIR` ([`default_socket_path`]). Its directory is
//! created with mode 0700 and must be a real directory owned by the user
//! with no group or other permissions; the socket is bound under a
//! private temporary name, made 0600 and renamed into place, so it is never
//! reachable with looser permissions. A lock file beside it (`….sock.lock`,
//! `flock`ed for the agent's lifetime, released by the kernel when the agent
//! dies) makes a second agent fail with [`AgentError::AlreadyRunning`]; a
//! socket left by a dead agent is replaced. An agent that ends in order
//! (`--stop`, or its idle exit) removes both.
//!
//! # Trust and bounds (who may talk to whom, and for how long)
//!
//! Anyone can create `/tmp/dfsched-$UID` before its user does, so neither
//! side takes the path's word for anything:
//! - **the client** (`client.rs`, `sock.rs`) talks to a socket only in a
//!   directory owned by its own uid with no group or other bits, and only
//!   to a listener whose `SO_PEERCRED` uid is its own; root's directory and
//!   agent too when configured ([`Trust::OwnUidOrRoot`]:
//!   `DFSCHED_AGENT_TRUST_ROOT=1`, `--trust-root-agent`). Otherwise it
//!   sends nothing ([`AgentError::UnsafeDir`], [`AgentError::Untrusted`]);
//!   a runtime warns once (`tracing`, and [`LinkStatus::refused`]) and
//!   works from its own `/proc` sample, `dfsched run` warns on stderr and
//!   runs the program.
//! - **the agent** serves its own uid only; a root agent serves root only
//!   unless started with `--serve-all-users` ([`AgentConfig::serve_other_uids`],
//!   which also opens its directory to others for reading and its socket
//!   to all). Each request that acts for a process (a report, an update,
//!   `stop`) is checked against the peer's *current* owner, so a process
//!   that connected as root and then dropped privileges loses them here
//!   too.
//! - **every wait is bounded**: the client's connect (even on a full
//!   accept queue) and each exchange end by a deadline ([`IO_TIMEOUT`] for
//!   the command line, [`LINK_TIMEOUT`] for a balancer pass, or
//!   `DFSCHED_AGENT_TIMEOUT_MS`; a view later than that is read at the
//!   next pass, one later still is a failure); after a
//!   failure the runtime's link backs off, doubling up to
//!   [`MAX_BACKOFF_PASSES`], and it never holds the runtime's locks across
//!   a socket call. The agent caps its connections in total and per uid
//!   ([`AgentConfig::max_connections`], [`AgentConfig::max_connections_per_uid`]:
//!   a thread and three descriptors each) and closes a connection that
//!   sends no whole request line within [`AgentConfig::idle_timeout`].
//! - **every number is range-checked**: a report names each CPU of the
//!   machine at most once, with a load of at most the most one process can
//!   have (`limits.rs`, [`AgentConfig::max_load_milli`]); anything else is
//!   refused with [`ErrorKind::Invalid`], never wrapped or stored.
//!
//! # Lifetime
//!
//! An agent started explicitly (`dfsched agent`, `--foreground`) runs until
//! stopped, unless given an idle exit (`--idle-exit SECS`). One started on
//! demand ([`ensure_running`], which `dfsched run` calls) ends by itself
//! after [`ON_DEMAND_IDLE_EXIT`] with no connection open, so that tests
//! and users are not left with a daemon for good; the next `dfsched run`
//! starts another.

pub mod attached;
mod client;
mod limits;
pub(crate) mod link;
pub mod metrics;
pub mod proto;
mod scan;
mod server;
pub mod sharing;
pub(crate) mod sock;
pub mod top;

pub use client::{Client, ConnectOptions, IO_TIMEOUT, MAX_STATUS_BYTES};
pub use limits::{
    max_load_milli, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_CONNECTIONS_PER_UID,
};
pub use link::{
    AgentMode, LinkStatus, LINK_TIMEOUT, LONE_PASSES, MAX_BACKOFF_PASSES, RETRY_PASSES,
};
pub use proto::{
    AttachReply, AttachRequest, ErrorKind, ProcessStatus, Report, SetStatus, Status, View,
};
pub use scan::DEFAULT_SCAN_FRESH_MS;
pub use server::{Agent, AgentConfig};
pub use sock::{connect_timeout, Trust};

use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The idle exit of an agent started on demand by [`ensure_running`]: it
/// ends after this long with no connection open. Long against the gaps
/// between programs of one job (a build, a benchmark's runs), short against
/// a session: an agent nobody uses goes away within half a minute.
pub const ON_DEMAND_IDLE_EXIT: Duration = Duration::from_secs(30);
/// What can go wrong with the agent, on either side.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// No agent listens on the socket.
    #[error("no dfsched agent is listening on {path}")]
    NotRunning {
        /// The socket path.
        path: PathBuf,
    },
    /// Another agent already serves this socket.
    #[error("a dfsched agent is already running on {path}")]
    AlreadyRunning {
        /// The socket path.
        path: PathBuf,
    },
    /// The socket's directory is not private to the user (or, trusted,
    /// root's and closed to writers).
    #[error("{path}: {reason}; refusing to use it for the agent's socket")]
    UnsafeDir {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The process listening on the socket is of a uid the client does not
    /// trust: nothing was sent to it.
    #[error(
        "{path}: the agent listening there runs as uid {uid}, which this client does not \
         trust (its own uid; root's only with DFSCHED_AGENT_TRUST_ROOT=1); refusing to talk to it"
    )]
    Untrusted {
        /// The socket path.
        path: PathBuf,
        /// The listener's uid (`SO_PEERCRED`).
        uid: u32,
    },
    /// An I/O error on a path.
    #[error("{path}: {reason}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        reason: String,
    },
    /// The agent answered something this side does not understand.
    #[error("agent protocol: {0}")]
    Protocol(String),
    /// The agent refused the request.
    #[error("the agent refused the request ({kind:?}): {message}")]
    Refused {
        /// The kind of refusal.
        kind: ErrorKind,
        /// The agent's explanation.
        message: String,
    },
    /// Setting up the agent failed (topology, threads, spawning).
    #[error("{0}")]
    Setup(String),
}

impl AgentError {
    pub(crate) fn io(path: &Path, e: std::io::Error) -> AgentError {
        AgentError::Io {
            path: path.to_path_buf(),
            reason: e.to_string(),
        }
    }
}

pub(crate) fn geteuid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// The default socket path: `$XDG_RUNTIME_DIR/dfsched/agent.sock` when
/// `XDG_RUNTIME_DIR` is set (and absolute), else
/// `/tmp/dfsched-$UID/agent.sock`.
pub fn default_socket_path() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir.join("dfsched").join("agent.sock"),
        _ => PathBuf::from(format!("/tmp/dfsched-{}", geteuid())).join("agent.sock"),
    }
}

/// Whether something listens on `path` (a connection succeeds within
/// [`IO_TIMEOUT`]; whose it is is not checked: see [`Client::connect_with`]).
pub fn is_live(path: &Path) -> bool {
    sock::connect_timeout(path, IO_TIMEOUT).is_ok()
}

/// Whether `e` says that whose agent or directory it is was refused (as
/// opposed to no agent, or one that failed).
pub fn is_trust_refusal(e: &AgentError) -> bool {
    matches!(
        e,
        AgentError::UnsafeDir { .. } | AgentError::Untrusted { .. }
    )
}

/// Makes sure `dir` exists, is a directory (not a symlink) owned by the
/// effective user, with no group or other permissions; creates it 0700 if
/// missing (its parent must exist).
pub fn ensure_private_dir(dir: &Path) -> Result<(), AgentError> {
    ensure_agent_dir(dir, false)
}

/// [`ensure_private_dir`], or with `shared` (an agent serving other uids,
/// who must reach its socket) a directory of ours that others may enter
/// and read but not write.
fn ensure_agent_dir(dir: &Path, shared: bool) -> Result<(), AgentError> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(AgentError::io(dir, e)),
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|e| AgentError::io(dir, e))?;
    let unsafe_dir = |reason: String| AgentError::UnsafeDir {
        path: dir.to_path_buf(),
        reason,
    };
    if !meta.file_type().is_dir() {
        return Err(unsafe_dir("not a directory".into()));
    }
    if meta.uid() != geteuid() {
        return Err(unsafe_dir(format!(
            "owned by uid {}, not {}",
            meta.uid(),
            geteuid()
        )));
    }
    let closed = if shared { 0o022 } else { 0o077 };
    if meta.mode() & closed != 0 {
        return Err(unsafe_dir(format!(
            "mode {:o} lets others in (want {})",
            meta.mode() & 0o777,
            if shared {
                "no group or other write"
            } else {
                "0700"
            }
        )));
    }
    Ok(())
}

/// The lock file beside a socket: `PATH.lock`.
fn lock_path(socket: &Path) -> PathBuf {
    let mut s = socket.as_os_str().to_owned();
    s.push(".lock");
    PathBuf::from(s)
}

/// Binds `socket` for an agent (the rules are in the module doc): the
/// listener and the held lock file. `shared`: an agent serving other uids
/// (`--serve-all-users`), whose socket is then 0666 in a directory others
/// may enter.
pub(crate) fn bind_private(
    socket: &Path,
    shared: bool,
) -> Result<(UnixListener, std::fs::File), AgentError> {
    let dir = socket
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .ok_or_else(|| {
            AgentError::Setup(format!("{}: not a path in a directory", socket.display()))
        })?;
    ensure_agent_dir(dir, shared)?;
    let lock = take_lock(socket)?;
    if is_live(socket) {
        // Someone listens without holding the lock (an agent started on a
        // copy of the path?): never steal a live socket.
        return Err(AgentError::AlreadyRunning {
            path: socket.to_path_buf(),
        });
    }
    // Bound in a fresh 0700 directory, made 0600, then renamed over any
    // stale socket: atomic, and never reachable with wider permissions.
    let tmp_dir = dir.join(format!(".bind-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp_dir);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&tmp_dir)
        .map_err(|e| AgentError::io(&tmp_dir, e))?;
    let tmp = tmp_dir.join("agent.sock");
    let bound = UnixListener::bind(&tmp)
        .map_err(|e| AgentError::io(&tmp, e))
        .and_then(|l| server::chmod(&tmp, if shared { 0o666 } else { 0o600 }).map(|()| l))
        .and_then(|l| {
            std::fs::rename(&tmp, socket)
                .map(|()| l)
                .map_err(|e| AgentError::io(socket, e))
        });
    let _ = std::fs::remove_dir_all(&tmp_dir);
    Ok((bound?, lock))
}

/// Opens and `flock`s the lock file beside `socket`. An agent that ends in
/// order unlinks its lock file while still holding it; a lock taken on a
/// file that was unlinked meanwhile would let a second agent in beside one
/// that locked the new file, so the lock is only kept if the path still
/// names the locked file, and taken again otherwise.
fn take_lock(socket: &Path) -> Result<std::fs::File, AgentError> {
    let lock_file = lock_path(socket);
    for _ in 0..8 {
        let lock = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&lock_file)
            .map_err(|e| AgentError::io(&lock_file, e))?;
        // SAFETY: flock on an fd we own, for the call's duration.
        let rc = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            return Err(if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
                AgentError::AlreadyRunning {
                    path: socket.to_path_buf(),
                }
            } else {
                AgentError::io(&lock_file, e)
            });
        }
        let held = lock.metadata().map_err(|e| AgentError::io(&lock_file, e))?;
        let named = std::fs::symlink_metadata(&lock_file).ok();
        if named.is_some_and(|m| m.ino() == held.ino() && m.dev() == held.dev()) {
            return Ok(lock);
        }
    }
    Err(AgentError::Setup(format!(
        "{}: the lock file kept being replaced",
        lock_file.display()
    )))
}

/// How [`spawn_detached`] starts an agent: the flags of `dfsched agent`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpawnOptions {
    /// `--tick-ms`: milliseconds between the agent's ticks. Default 100.
    pub tick_ms: u64,
    /// `--scan-fresh-ms`: how old the shared `/proc` scan may be. Default
    /// [`DEFAULT_SCAN_FRESH_MS`].
    pub scan_fresh_ms: u64,
    /// `--idle-exit`: end after this many seconds with no connection open;
    /// `None` (the default) never.
    pub idle_exit_secs: Option<u64>,
    /// `--serve-all-users`: a root agent serves other uids too. Default
    /// false.
    pub serve_other_uids: bool,
    /// `--max-connections`. Default [`DEFAULT_MAX_CONNECTIONS`].
    pub max_connections: u32,
    /// `--max-connections-per-uid`. Default
    /// [`DEFAULT_MAX_CONNECTIONS_PER_UID`].
    pub max_connections_per_uid: u32,
    /// `--idle-timeout-ms`. Default [`DEFAULT_IDLE_TIMEOUT`].
    pub idle_timeout_ms: u64,
    /// `--metrics`: the metrics endpoint (`metrics.rs`). Default none.
    pub metrics: Option<metrics::MetricsAddr>,
    /// `--engine-log DIR`: log the engine of each attached process
    /// ([`AgentConfig::engine_log_dir`]). Default none.
    pub engine_log_dir: Option<std::path::PathBuf>,
}

impl Default for SpawnOptions {
    fn default() -> Self {
        SpawnOptions {
            tick_ms: 100,
            scan_fresh_ms: DEFAULT_SCAN_FRESH_MS,
            idle_exit_secs: None,
            serve_other_uids: false,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_uid: DEFAULT_MAX_CONNECTIONS_PER_UID,
            idle_timeout_ms: DEFAULT_IDLE_TIMEOUT.as_millis() as u64,
            metrics: None,
            engine_log_dir: None,
        }
    }
}

impl SpawnOptions {
    /// The options as `dfsched agent` flags.
    pub fn args(&self) -> Vec<String> {
        let mut out = vec![
            "--tick-ms".to_string(),
            self.tick_ms.to_string(),
            "--scan-fresh-ms".to_string(),
            self.scan_fresh_ms.to_string(),
            "--max-connections".to_string(),
            self.max_connections.to_string(),
            "--max-connections-per-uid".to_string(),
            self.max_connections_per_uid.to_string(),
            "--idle-timeout-ms".to_string(),
            self.idle_timeout_ms.to_string(),
        ];
        if let Some(secs) = self.idle_exit_secs {
            out.extend(["--idle-exit".to_string(), secs.to_string()]);
        }
        if self.serve_other_uids {
            out.push("--serve-all-users".to_string());
        }
        if let Some(m) = &self.metrics {
            out.extend(["--metrics".to_string(), m.to_string()]);
        }
        if let Some(d) = &self.engine_log_dir {
            out.extend(["--engine-log".to_string(), d.display().to_string()]);
        }
        out
    }
}

/// What [`ensure_running`] found or did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ensured {
    /// An agent was already listening.
    AlreadyRunning,
    /// An agent was started and now listens.
    Started,
}

/// How long [`spawn_detached`] waits for a new agent to listen: it binds
/// in milliseconds; this only bounds a failure that leaves it hanging.
pub const START_TIMEOUT: Duration = Duration::from_secs(5);

/// Makes sure an agent listens on `path`: if none does, runs `dfsched
/// agent --socket PATH --idle-exit 30` (this executable, so call it from
/// the `dfsched` binary; see [`ensure_running_with`] otherwise), which
/// starts a detached agent and returns once it listens. An agent started
/// here ends by itself after [`ON_DEMAND_IDLE_EXIT`] with no client.
///
/// Bounded and careful: a socket in a directory `trust` refuses, or a
/// listener of another uid, is an error ([`is_trust_refusal`]) and no agent
/// is started there; a listener that does not answer within [`IO_TIMEOUT`]
/// (stopped, or its accept queue full) is an error too, after at most
/// that long; starting an agent waits at most [`START_TIMEOUT`].
pub fn ensure_running(path: &Path, trust: Trust) -> Result<Ensured, AgentError> {
    let exe = std::env::current_exe()
        .map_err(|e| AgentError::Setup(format!("finding this executable: {e}")))?;
    ensure_running_with(path, &exe, trust)
}

/// Whether a trusted agent answers on `path`: `Ok(true)` if one does,
/// `Ok(false)` if nothing listens there, an error if the directory or the
/// listener is not trusted or does not answer in time.
fn trusted_agent_answers(path: &Path, trust: Trust) -> Result<bool, AgentError> {
    let options = ConnectOptions {
        trust,
        timeout: IO_TIMEOUT,
    };
    match Client::connect_with(path, options).and_then(|mut c| c.status().map(|_| ())) {
        Ok(()) => Ok(true),
        Err(AgentError::NotRunning { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// [`ensure_running`] with the `dfsched` executable named. The intermediate
/// `dfsched agent` is waited for (at most [`START_TIMEOUT`] and a little),
/// so the caller is left with no child: the agent itself is adopted by
/// init.
pub fn ensure_running_with(
    path: &Path,
    dfsched_exe: &Path,
    trust: Trust,
) -> Result<Ensured, AgentError> {
    if trusted_agent_answers(path, trust)? {
        return Ok(Ensured::AlreadyRunning);
    }
    let mut cmd = Command::new(dfsched_exe);
    agent_environment(&mut cmd);
    let mut child = cmd
        .arg("agent")
        .arg("--socket")
        .arg(path)
        .arg("--idle-exit")
        .arg(ON_DEMAND_IDLE_EXIT.as_secs().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| AgentError::Setup(format!("starting {}: {e}", dfsched_exe.display())))?;
    // `dfsched agent` itself waits at most START_TIMEOUT for its agent to
    // listen; this bound only catches a starter that hangs otherwise.
    let limit = START_TIMEOUT + IO_TIMEOUT * 2;
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < limit => {
                std::thread::sleep(Duration::from_millis(5));
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(AgentError::Setup(format!(
                    "`{} agent --socket {}` did not return within {limit:?}",
                    dfsched_exe.display(),
                    path.display()
                )));
            }
        }
    };
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut stderr);
    }
    if status.success() {
        return Ok(Ensured::Started);
    }
    // Another caller may have started one meanwhile: as good.
    if trusted_agent_answers(path, trust).unwrap_or(false) {
        return Ok(Ensured::AlreadyRunning);
    }
    Err(AgentError::Setup(format!(
        "`{} agent --socket {}` failed ({}): {}",
        dfsched_exe.display(),
        path.display(),
        status,
        stderr.trim()
    )))
}

/// Clears from `cmd`'s environment what would make the agent a program
/// under dfsched: `LD_PRELOAD` (set when the caller is itself run by
/// `dfsched run`) and every `DFSCHED_*` option. Under them the agent would
/// start a runtime of its own, place its own threads and register itself
/// with itself.
fn agent_environment(cmd: &mut Command) {
    cmd.env_remove("LD_PRELOAD");
    for (name, _) in std::env::vars_os() {
        if name.as_encoded_bytes().starts_with(b"DFSCHED_") {
            cmd.env_remove(name);
        }
    }
}

/// An agent started by [`spawn_detached`]: its pid, and the child process
/// so that a caller that outlives the agent can reap it.
///
/// Dropping it neither stops nor waits for the agent: a caller that exits
/// (`dfsched agent` without `--foreground`) leaves the agent running,
/// adopted by init, which reaps it in the end. A caller that stays (a
/// benchmark with a private agent) stops the agent and then calls
/// [`SpawnedAgent::try_wait`] until it reports the exit, else the agent
/// stays a `<defunct>` child of the caller until the caller ends.
#[derive(Debug)]
pub struct SpawnedAgent {
    child: std::process::Child,
}

impl SpawnedAgent {
    /// The agent's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Reaps the agent if it has exited: its status once it has (from then
    /// on it is gone, no zombie left), `None` while it runs.
    pub fn try_wait(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        self.child.try_wait()
    }
}

/// Starts `dfsched_exe agent --foreground --socket PATH` with `options`'
/// flags in its own process group with its standard streams on `/dev/null`
/// (so it outlives the caller's terminal and its Ctrl-C), and waits until
/// it listens. The agent is the caller's child: a caller that outlives it
/// reaps it through the returned [`SpawnedAgent`]; one that exits first
/// leaves it to init.
pub fn spawn_detached(
    dfsched_exe: &Path,
    path: &Path,
    options: &SpawnOptions,
) -> Result<SpawnedAgent, AgentError> {
    use std::os::unix::process::CommandExt;
    // The agent checks its directory too, but its reasons would go to
    // /dev/null: check here, where they can be reported.
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        ensure_agent_dir(dir, options.serve_other_uids)?;
    }
    if is_live(path) {
        return Err(AgentError::AlreadyRunning {
            path: path.to_path_buf(),
        });
    }
    let mut cmd = Command::new(dfsched_exe);
    agent_environment(&mut cmd);
    crate::sys::start_without_inherited_fds(&mut cmd);
    let mut child = cmd
        .arg("agent")
        .arg("--foreground")
        .arg("--socket")
        .arg(path)
        .args(options.args())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| AgentError::Setup(format!("starting {}: {e}", dfsched_exe.display())))?;
    let started = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            // It ended: either another agent won (and listens), or it
            // failed, and its reasons went to /dev/null.
            if is_live(path) {
                return Err(AgentError::AlreadyRunning {
                    path: path.to_path_buf(),
                });
            }
            return Err(AgentError::Setup(format!(
                "the agent exited ({status}) before listening; run `{} agent \
                 --foreground --socket {}` to see why",
                dfsched_exe.display(),
                path.display()
            )));
        }
        // Live and ours: another agent that won a race would have made
        // ours exit, seen above.
        let trust = if options.serve_other_uids {
            Trust::OwnUidOrRoot
        } else {
            Trust::OwnUid
        };
        let ours = Client::connect_with(
            path,
            ConnectOptions {
                trust,
                timeout: IO_TIMEOUT,
            },
        )
        .and_then(|mut c| c.status())
        .is_ok_and(|s| s.agent_pid == child.id());
        if ours {
            return Ok(SpawnedAgent { child });
        }
        if started.elapsed() > START_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(AgentError::Setup(format!(
                "the agent did not listen on {} within {START_TIMEOUT:?}",
                path.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
