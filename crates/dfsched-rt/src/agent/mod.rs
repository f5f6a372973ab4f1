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
//! - `scan.rs`: the shared `/proc` scan of the unmanaged load and its
//!   freshness bound; the load is weighed by CFS group against each
//!   client's own group (`crate::weigh`), since which threads compete with
//!   a process one by one depends on its session or cgroup.
//! - `sharing.rs`: union-find over shared inodes, and the sharing sets'
//!   homes by the core's home rule.
//! - `client.rs`: the client used by runtimes and by `dfsched agent
//!   --status/--stop`.
//! - `link.rs`: the runtime's side, run from its balancer pass.
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
//! # Lifetime
//!
//! An agent started explicitly (`dfsched agent`, `--foreground`) runs until
//! stopped, unless given an idle exit (`--idle-exit SECS`). One started on
//! demand ([`ensure_running`], which `dfsched run` calls) ends by itself
//! after [`ON_DEMAND_IDLE_EXIT`] with no connection open, so that tests
//! and users are not left with a daemon for good; the next `dfsched run`
//! starts another.

mod client;
pub(crate) mod link;
pub mod proto;
mod scan;
mod server;
pub mod sharing;

pub use client::{Client, IO_TIMEOUT};
pub use link::{AgentMode, LinkStatus, RETRY_PASSES};
pub use proto::{ErrorKind, ProcessStatus, Report, SetStatus, Status, View};
pub use scan::DEFAULT_SCAN_FRESH_MS;
pub use server::{Agent, AgentConfig};

use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
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
    /// The socket's directory is not private to the user.
    #[error("{path}: {reason}; refusing to use it for the agent's socket")]
    UnsafeDir {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
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

/// Whether an agent answers on `path` (a connection succeeds).
pub fn is_live(path: &Path) -> bool {
    UnixStream::connect(path).is_ok()
}

/// Makes sure `dir` exists, is a directory (not a symlink) owned by the
/// effective user, with no group or other permissions; creates it 0700 if
/// missing (its parent must exist).
pub fn ensure_private_dir(dir: &Path) -> Result<(), AgentError> {
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
    if meta.mode() & 0o077 != 0 {
        return Err(unsafe_dir(format!(
            "mode {:o} lets others in (want 0700)",
            meta.mode() & 0o777
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
/// listener and the held lock file.
pub(crate) fn bind_private(socket: &Path) -> Result<(UnixListener, std::fs::File), AgentError> {
    let dir = socket
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .ok_or_else(|| {
            AgentError::Setup(format!("{}: not a path in a directory", socket.display()))
        })?;
    ensure_private_dir(dir)?;
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
        .and_then(|l| server::chmod(&tmp, 0o600).map(|()| l))
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
}

impl Default for SpawnOptions {
    fn default() -> Self {
        SpawnOptions {
            tick_ms: 100,
            scan_fresh_ms: DEFAULT_SCAN_FRESH_MS,
            idle_exit_secs: None,
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
        ];
        if let Some(secs) = self.idle_exit_secs {
            out.extend(["--idle-exit".to_string(), secs.to_string()]);
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
pub fn ensure_running(path: &Path) -> Result<Ensured, AgentError> {
    let exe = std::env::current_exe()
        .map_err(|e| AgentError::Setup(format!("finding this executable: {e}")))?;
    ensure_running_with(path, &exe)
}

/// [`ensure_running`] with the `dfsched` executable named. The intermediate
/// `dfsched agent` is waited for, so the caller is left with no child: the
/// agent itself is adopted by init.
pub fn ensure_running_with(path: &Path, dfsched_exe: &Path) -> Result<Ensured, AgentError> {
    if is_live(path) {
        return Ok(Ensured::AlreadyRunning);
    }
    let mut cmd = Command::new(dfsched_exe);
    agent_environment(&mut cmd);
    let out = cmd
        .arg("agent")
        .arg("--socket")
        .arg(path)
        .arg("--idle-exit")
        .arg(ON_DEMAND_IDLE_EXIT.as_secs().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| AgentError::Setup(format!("starting {}: {e}", dfsched_exe.display())))?;
    if out.status.success() {
        return Ok(Ensured::Started);
    }
    // Another caller may have started one meanwhile: as good.
    if is_live(path) {
        return Ok(Ensured::AlreadyRunning);
    }
    Err(AgentError::Setup(format!(
        "`{} agent --socket {}` failed ({}): {}",
        dfsched_exe.display(),
        path.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
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
        ensure_private_dir(dir)?;
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
        let ours = Client::connect(path)
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
