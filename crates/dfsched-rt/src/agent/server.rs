//! The agent's server: the listening socket, one thread per connection, and
//! the tick thread (liveness backstop, sharing detection, idle exit).
//!
//! ```text
//!   accept ──► SO_PEERCRED → a uid not served, or over a connection cap
//!              (total, per uid): one refusal line, closed, no thread
//!          ──► connection thread:
//!                 loop { read line (≤ 64 KiB, whole within idle_timeout)
//!                        → parse → check the peer's pid is still its uid's
//!                        → handle under the lock → reply (bounded write) }
//!                 report: record the load, then the unmanaged load from
//!                         the shared /proc scan (scan.rs), weighed against
//!                         the peer's CFS group if asked, then the view
//!                 on EOF/error: drop the connection's process record
//!   tick (every tick_ms):
//!     0. with an idle exit set: no connection open for that long → stop
//!     1. drop records whose pid is gone or has changed owner
//!     2. read /proc/PID/fd of every registered pid (outside the lock)
//!     3. union-find on shared pipe/socket inodes → sharing sets; inodes
//!        also held by an unregistered process do not count (sharing.rs;
//!        that finding is reused for up to 1 s while nothing changes)
//!     4. each set keeps its id and home while it lives (sharing.rs)
//!     5. each attached process (`dfsched attach`, attached.rs) refreshed:
//!        new and renamed threads matched and placed, ended ones dropped
//! ```
//!
//! Attached processes keep the agent alive: the idle exit waits until none
//! is left, and while one is the tick runs at its configured interval.
//!
//! Whom it serves: its own uid; a root agent root only, unless
//! `serve_other_uids` (`--serve-all-users`). Every request is checked
//! against the peer's current owner (`/proc/PID/status`), not only the
//! credentials of the connect: a process that connected as root and then
//! dropped to another uid is refused from then on (a `stop`, as a report).
//!
//! What it accepts: every number in a report is range-checked
//! ([`check_load`]): each CPU of the machine at most once, each load and
//! their sum at most [`AgentConfig::max_load_milli`]. So the sums the agent
//! forms (a CPU's load over every process: at most `max_connections` ×
//! `max_load_milli`, below 2^42 with the defaults) never overflow, and a
//! status lists at most one entry per CPU per process.
//!
//! Invariants: `State::procs` holds exactly the open, registered
//! connections whose pid was alive at the last tick; a request either
//! changes state and gets a non-error reply, or changes nothing and gets an
//! error reply; the state lock is never held across socket or `/proc` I/O,
//! and never while taking the scan's lock (which is held across its scan,
//! so that concurrent reports wait for one scan instead of each taking
//! one). An agent that ends in order (stop, idle exit) removes its socket
//! and its lock file.

use super::attached::Attached;
use super::limits::{
    check_load, max_load_milli, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_UID,
};
use super::metrics::{self, MetricsAddr, METRICS_WATCH_FOR};
use super::proto::{
    encode, parse_request, read_line_capped, AttachReply, AttachRequest, Counters, ErrorKind,
    LineRead, ProcessStatus, Reply, ReplyLine, Report, Request, SetStatus, Status, View,
    MAX_LINE_BYTES,
};
use super::scan::{self, Scanned, SharedScan};
use super::sharing;
use super::sock::{peer_cred, Deadlined};
use super::top::{CpuTop, Detail, ProcessTop, TopView, WATCH_FOR};
use super::AgentError;
use dfsched_core::rules::Home;
use dfsched_core::{CpuId, CpuSet, DomainId, Topology};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The agent's settings.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// The socket path.
    pub socket: PathBuf,
    /// Where `/proc` is (tests may point elsewhere).
    pub proc_root: PathBuf,
    /// Milliseconds between ticks. Default 100, as the runtimes' balancer.
    pub tick_ms: u64,
    /// The machine's topology (homes are its domains).
    pub topology: Topology,
    /// Runnable threads per CPU, in thousandths, from which a sharing set's
    /// home is one CPU; the core's default.
    pub heavy_load_milli: u64,
    /// How old the shared `/proc` scan of the unmanaged load may be before
    /// a report takes a new one, in milliseconds; 0 scans on every report.
    /// Default [`scan::DEFAULT_SCAN_FRESH_MS`] (why: `scan.rs`).
    pub scan_fresh_ms: u64,
    /// End (removing the socket and the lock file) once no connection has
    /// been open for this long; `None`, the default, never. Agents started
    /// on demand by [`super::ensure_running`] get
    /// [`super::ON_DEMAND_IDLE_EXIT`], so that nobody is left with a daemon
    /// that serves no one.
    pub idle_exit: Option<Duration>,
    /// A root agent serves other uids too (`--serve-all-users`); its socket
    /// is then 0666 in a directory others may enter. Default false: a root
    /// agent serves root only. An agent of another uid serves that uid
    /// only whatever this says (binding with it set fails).
    pub serve_other_uids: bool,
    /// Connections open at once, of all uids, beyond which a new one is
    /// refused ([`ErrorKind::Busy`]) and closed. Default
    /// [`DEFAULT_MAX_CONNECTIONS`].
    pub max_connections: u32,
    /// Connections open at once per uid. Default
    /// [`DEFAULT_MAX_CONNECTIONS_PER_UID`].
    pub max_connections_per_uid: u32,
    /// A connection that has not sent a whole request line this long after
    /// its last reply (or its accept) is closed. Default
    /// [`DEFAULT_IDLE_TIMEOUT`].
    pub idle_timeout: Duration,
    /// The largest load, in thousandths of a runnable thread, one report
    /// may give a CPU, and the largest sum over its CPUs. Default
    /// 1000 × `/proc/sys/kernel/pid_max` ([`max_load_milli`]).
    pub max_load_milli: u64,
    /// Serve the counters in the Prometheus/OpenMetrics text format here
    /// (`--metrics`; `metrics.rs`). Default none.
    pub metrics: Option<MetricsAddr>,
    /// Log the engine of each process attached by `dfsched attach` into
    /// `DIR/attach-PID.log` (`--engine-log DIR`; the format and the file
    /// checks of `crate::engine_log`, for `dfsched engine-replay`). Default
    /// none.
    pub engine_log_dir: Option<PathBuf>,
}

/// How long the agent waits to write one reply: replies are small and the
/// client reads them at once; a peer that does not read cannot hold a
/// connection thread longer than this.
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);

impl AgentConfig {
    /// Defaults for `socket` on this machine: the topology from `/sys`.
    pub fn new(socket: PathBuf) -> Result<AgentConfig, AgentError> {
        let topology = crate::sysfs::read_topology(Path::new("/"))
            .map_err(|e| AgentError::Setup(format!("reading the topology: {e}")))?;
        Ok(AgentConfig {
            socket,
            proc_root: PathBuf::from("/proc"),
            tick_ms: 100,
            topology,
            heavy_load_milli: dfsched_core::Config::default().heavy_load_milli,
            scan_fresh_ms: scan::DEFAULT_SCAN_FRESH_MS,
            idle_exit: None,
            serve_other_uids: false,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_uid: DEFAULT_MAX_CONNECTIONS_PER_UID,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_load_milli: max_load_milli(Path::new("/proc")),
            metrics: None,
            engine_log_dir: None,
        })
    }
}

/// A registered process (one connection).
#[derive(Debug)]
struct Proc {
    pid: u32,
    uid: u32,
    load_milli: Vec<(CpuId, u64)>,
    allowed: CpuSet,
    own_socket_inode: Option<u64>,
    /// Its latest detail and when it came (`top.rs`), kept between reports
    /// without one.
    detail: Option<(Box<Detail>, Instant)>,
}

/// A live sharing set.
#[derive(Debug)]
struct SetRec {
    id: u64,
    members: Vec<u32>,
    inodes: Vec<u64>,
    home: Home,
}

/// Everything behind the agent's lock.
#[derive(Debug, Default)]
struct State {
    /// Registered processes by connection id.
    procs: BTreeMap<u64, Proc>,
    /// Sharing sets of the last tick, by id.
    sets: Vec<SetRec>,
    /// The next set id.
    next_set: u64,
    counters: Counters,
    /// Streams of open connections, to shut them on stop.
    streams: HashMap<u64, UnixStream>,
    /// Connections accepted and not yet closed (of any uid).
    open: u64,
    /// The same per uid (uids with none left out).
    open_by_uid: BTreeMap<u32, u32>,
    /// Since when no connection has been open (`None` while one is).
    idle_since: Option<Instant>,
    /// Until when views ask watchable runtimes for details: a `top`
    /// request's time plus [`WATCH_FOR`].
    watched_until: Option<Instant>,
}

/// The shared part of a running agent.
struct Shared {
    config: AgentConfig,
    uid: u32,
    pid: u32,
    state: Mutex<State>,
    /// The shared `/proc` scan (scan.rs); taken after the state lock is
    /// released, never with it.
    scan: Mutex<SharedScan>,
    /// Processes placed from outside (`attached.rs`), by pid. Held across
    /// their `/proc` reads and affinity calls; never taken while the state
    /// lock is held, nor the state lock while it is.
    attached: Mutex<BTreeMap<u32, Attached>>,
    /// When the agent started: the attached engines' clock origin.
    started: Instant,
    stop: AtomicBool,
    /// The tick thread sleeps on this between ticks; `request_stop` sets
    /// the flag under its mutex and notifies, so a stop never waits for a
    /// long tick interval to end.
    tick_sleep: (Mutex<TickWake>, Condvar),
}

/// What ends the tick thread's sleep early.
#[derive(Debug, Default)]
struct TickWake {
    /// The agent is stopping.
    stopped: bool,
    /// A second process registered: sharing may exist from now on, so the
    /// next tick is due at the configured interval after the last one
    /// rather than after [`LONE_TICK`].
    poked: bool,
}

/// The tick's interval while fewer than two processes are registered: no
/// sharing set can exist then (it needs two members), so the tick only
/// checks liveness (a backstop: a process that exits closes its
/// connection) and the idle exit, and wakes once a second instead of ten
/// times. A second registration pokes it awake at once.
const LONE_TICK: Duration = Duration::from_secs(1);

/// A bound agent, not yet serving.
pub struct Agent {
    shared: Arc<Shared>,
    listener: UnixListener,
    /// The metrics endpoint, if asked for.
    metrics: Option<metrics::Listener>,
    /// Held (with `flock`) for the agent's lifetime: the kernel releases it
    /// when the process dies, so a crashed agent never blocks the next one.
    _lock: std::fs::File,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("socket", &self.shared.config.socket)
            .finish()
    }
}

impl Agent {
    /// Binds the socket (the rules are in the `agent` module doc): fails
    /// with [`AgentError::AlreadyRunning`] if a live agent holds the path.
    pub fn bind(config: AgentConfig) -> Result<Agent, AgentError> {
        if config.serve_other_uids && super::geteuid() != 0 {
            return Err(AgentError::Setup(
                "serving other users (--serve-all-users) is for an agent run by root".into(),
            ));
        }
        let (listener, lock) = super::bind_private(&config.socket, config.serve_other_uids)?;
        let metrics = config
            .metrics
            .as_ref()
            .map(metrics::Listener::bind)
            .transpose()?;
        Ok(Agent {
            metrics,
            shared: Arc::new(Shared {
                uid: super::geteuid(),
                pid: std::process::id(),
                state: Mutex::new(State {
                    next_set: 1,
                    idle_since: Some(Instant::now()),
                    ..State::default()
                }),
                scan: Mutex::new(SharedScan::new(&config.proc_root)),
                attached: Mutex::new(BTreeMap::new()),
                started: Instant::now(),
                stop: AtomicBool::new(false),
                tick_sleep: (Mutex::new(TickWake::default()), Condvar::new()),
                config,
            }),
            listener,
            _lock: lock,
        })
    }

    /// The metrics endpoint's TCP address, if it listens on one (the port
    /// chosen for a port 0).
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.metrics
            .as_ref()
            .and_then(metrics::Listener::local_addr)
    }

    /// Serves until a `stop` request or the idle exit; then removes the
    /// socket and the lock file and returns.
    pub fn run(mut self) -> Result<(), AgentError> {
        let metrics_thread = match self.metrics.take() {
            None => None,
            Some(listener) => {
                let shared = Arc::clone(&self.shared);
                Some(
                    std::thread::Builder::new()
                        .name("dfsched-agent-metrics".into())
                        .spawn(move || {
                            metrics::serve(
                                &listener,
                                shared.uid,
                                || shared.stop.load(Ordering::Acquire),
                                |openmetrics| {
                                    let view = top(&shared, 0, METRICS_WATCH_FOR);
                                    metrics::render(&status(&shared), &view, openmetrics)
                                },
                            )
                        })
                        .map_err(|e| {
                            AgentError::Setup(format!("starting the metrics thread: {e}"))
                        })?,
                )
            }
        };
        let shared = Arc::clone(&self.shared);
        let ticker = std::thread::Builder::new()
            .name("dfsched-agent-tick".into())
            .spawn(move || tick_loop(&shared))
            .map_err(|e| AgentError::Setup(format!("starting the tick thread: {e}")))?;
        let mut next_conn = 1u64;
        for stream in self.listener.incoming() {
            if self.shared.stop.load(Ordering::Acquire) {
                break;
            }
            let Ok(stream) = stream else { continue };
            let Ok((pid, uid)) = peer_cred(&stream) else {
                continue;
            };
            // Counted open from the accept on, so that the idle exit never
            // ends the agent under a connection about to be served.
            if let Err(refusal) = self.shared.admit(uid) {
                refuse(stream, &refusal);
                continue;
            }
            let id = next_conn;
            next_conn += 1;
            let shared = Arc::clone(&self.shared);
            let spawned = std::thread::Builder::new()
                .name("dfsched-agent-conn".into())
                .spawn(move || {
                    serve(&shared, stream, id, pid, uid);
                    shared.closed(uid);
                });
            if let Err(e) = spawned {
                self.shared.closed(uid);
                tracing::warn!(error = %e, "dfsched agent: cannot start a connection thread");
            }
        }
        // Wake every connection thread: their reads end, their records go.
        for (_, s) in self.shared.lock().streams.drain() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        let _ = std::fs::remove_file(&self.shared.config.socket);
        // Still holding the flock: a new agent that opened the old lock
        // file before this unlink sees that it no longer names the file
        // and takes a new one (`bind_private`).
        let _ = std::fs::remove_file(super::lock_path(&self.shared.config.socket));
        let _ = ticker.join();
        // Ending: every attached process gets its masks back.
        for (_, process) in std::mem::take(&mut *self.shared.attached_lock()) {
            process.release(&crate::sys::RealSys);
        }
        if let Some(m) = metrics_thread {
            let _ = m.join();
        }
        Ok(())
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state stays consistent between statements that could panic:
        // a poisoned lock is taken over rather than bringing the agent down.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether this agent serves `uid` (module doc, "Whom it serves").
    fn serves(&self, uid: u32) -> bool {
        uid == self.uid || (self.uid == 0 && self.config.serve_other_uids)
    }

    /// Admits a new connection of `uid`, counting it open, or says why
    /// not (counted as refused): a uid not served, or a cap reached.
    fn admit(&self, uid: u32) -> Result<(), ReplyLine> {
        let mut st = self.lock();
        st.counters.connections += 1;
        if !self.serves(uid) {
            st.counters.refused_peers += 1;
            let whom = if self.uid == 0 {
                "root only (start it with --serve-all-users to serve others)".to_string()
            } else {
                format!("uid {} only", self.uid)
            };
            return Err(ReplyLine::error(
                ErrorKind::Denied,
                format!("this agent serves {whom}; the peer is uid {uid}"),
            ));
        }
        let of_uid = st.open_by_uid.get(&uid).copied().unwrap_or(0);
        let over = if st.open >= u64::from(self.config.max_connections) {
            Some(format!(
                "the agent has its maximum of {} connections open",
                self.config.max_connections
            ))
        } else if of_uid >= self.config.max_connections_per_uid {
            Some(format!(
                "uid {uid} has its maximum of {} connections open",
                self.config.max_connections_per_uid
            ))
        } else {
            None
        };
        if let Some(why) = over {
            st.counters.refused_busy += 1;
            return Err(ReplyLine::error(ErrorKind::Busy, why));
        }
        st.open += 1;
        *st.open_by_uid.entry(uid).or_default() += 1;
        st.idle_since = None;
        Ok(())
    }

    fn closed(&self, uid: u32) {
        let mut st = self.lock();
        st.open -= 1;
        if let Some(n) = st.open_by_uid.get_mut(&uid) {
            *n -= 1;
            if *n == 0 {
                st.open_by_uid.remove(&uid);
            }
        }
        if st.open == 0 {
            st.idle_since = Some(Instant::now());
        }
    }

    /// Whether the idle exit is due: no connection open for `idle_exit`.
    fn idle_exit_due(&self) -> bool {
        let Some(limit) = self.config.idle_exit else {
            return false;
        };
        if !self.attached_lock().is_empty() {
            return false;
        }
        let st = self.lock();
        st.open == 0 && st.idle_since.is_some_and(|t| t.elapsed() >= limit)
    }

    fn attached_lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u32, Attached>> {
        self.attached.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn request_stop(&self) {
        self.stop.store(true, Ordering::Release);
        let (flag, wake) = &self.tick_sleep;
        flag.lock().unwrap_or_else(PoisonError::into_inner).stopped = true;
        wake.notify_all();
        // Wake the accept loop, which checks the flag after each accept.
        let _ = super::sock::connect_timeout(&self.config.socket, WRITE_TIMEOUT);
    }
}

/// Sends one refusal line on a connection the accept loop will not serve,
/// without waiting (a fresh socket's buffer holds it; if not, the peer
/// learns from the close), and closes it.
fn refuse(stream: UnixStream, refusal: &ReplyLine) {
    let mut stream = stream;
    if stream.set_nonblocking(true).is_ok() {
        let _ = stream.write_all(&encode(refusal));
    }
}

/// The effective uid owning `pid`; `None` if the process is gone.
///
/// Asked on every request and every tick, so the common case is one
/// `statx`: `/proc/PID` belongs to the process's effective uid while it is
/// dumpable. A process that is not (setuid, `PR_SET_DUMPABLE` 0) shows
/// root there, so any other answer than `expected` is settled by the
/// `Uid:` line of `/proc/PID/status`, which generating costs far more (the
/// kernel formats some fifty fields, memory figures under the mm lock).
fn owner_of(proc_root: &Path, pid: u32, expected: u32) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let dir = proc_root.join(pid.to_string());
    if std::fs::metadata(&dir).ok()?.uid() == expected {
        return Some(expected);
    }
    let text = std::fs::read_to_string(dir.join("status")).ok()?;
    let line = text.lines().find(|l| l.starts_with("Uid:"))?;
    // "Uid:\treal\teffective\tsaved\tfs"
    line.split_ascii_whitespace().nth(2)?.parse().ok()
}

fn serve(shared: &Shared, stream: UnixStream, id: u64, pid: u32, uid: u32) {
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    if let Ok(clone) = stream.try_clone() {
        shared.lock().streams.insert(id, clone);
    }
    let mut writer = Deadlined::new(stream);
    let mut reader = BufReader::new(Deadlined::new(read_half));
    let mut buf = Vec::new();
    loop {
        // The whole next line within the idle timeout: a peer that sends
        // nothing, or trickles, is closed then.
        reader
            .get_mut()
            .set(Instant::now() + shared.config.idle_timeout);
        let answer = match read_line_capped(&mut reader, &mut buf, MAX_LINE_BYTES) {
            Ok(LineRead::Line) => match parse_request(&buf) {
                Ok(req) => handle(shared, id, pid, uid, req),
                Err(err) => err,
            },
            Ok(LineRead::TooLong) => ReplyLine::error(
                ErrorKind::TooLong,
                format!("a request line is at most {MAX_LINE_BYTES} bytes"),
            ),
            Ok(LineRead::Eof) => break,
            Err(e) => {
                if e.kind() == std::io::ErrorKind::TimedOut {
                    shared.lock().counters.idle_closed += 1;
                }
                break;
            }
        };
        if matches!(answer.reply, Reply::Error(_)) {
            shared.lock().counters.bad_requests += 1;
        }
        let stopping = matches!(answer.reply, Reply::Stopping);
        writer.set(Instant::now() + WRITE_TIMEOUT);
        if writer.write_all(&encode(&answer)).is_err() {
            break;
        }
        if stopping {
            shared.request_stop();
        }
    }
    let mut st = shared.lock();
    st.streams.remove(&id);
    if st.procs.remove(&id).is_some() {
        st.counters.dropped_on_close += 1;
    }
}

fn handle(shared: &Shared, id: u64, pid: u32, uid: u32, req: Request) -> ReplyLine {
    // Per request, not per connection: the peer's credentials are those of
    // its connect, and the process may have changed uid since (or handed
    // the connection to one that did, then exited).
    let owner = owner_of(&shared.config.proc_root, pid, uid);
    if owner != Some(uid) {
        return ReplyLine::error(
            ErrorKind::Denied,
            match owner {
                Some(now) => format!("process {pid} connected as uid {uid} but is uid {now} now"),
                None => format!("process {pid}, which connected, is gone"),
            },
        );
    }
    match req {
        Request::Report(r) => report(shared, id, pid, uid, r),
        Request::Update(r) => match record(shared, id, pid, uid, r) {
            Ok(mut st) => {
                st.counters.updates += 1;
                ReplyLine::new(Reply::Updated)
            }
            Err(refusal) => refusal,
        },
        Request::Status => ReplyLine::new(Reply::Status(Box::new(status(shared)))),
        Request::Top => ReplyLine::new(Reply::Top(Box::new(top(shared, uid, WATCH_FOR)))),
        Request::Stop if uid == shared.uid || uid == 0 => ReplyLine::new(Reply::Stopping),
        Request::Stop => ReplyLine::error(
            ErrorKind::Denied,
            format!("only uid {} or root may stop this agent", shared.uid),
        ),
        Request::Attach(a) => attach(shared, uid, a),
        Request::Detach { pid: target } => detach(shared, uid, target),
    }
}

/// `dfsched attach`: checks who asks for what, then places the process's
/// threads at once (`attached.rs`).
fn attach(shared: &Shared, uid: u32, a: AttachRequest) -> ReplyLine {
    let target = a.pid;
    if let Some(refusal) = check_target(shared, uid, target) {
        return refusal;
    }
    if shared.lock().procs.values().any(|p| p.pid == target) {
        return ReplyLine::error(
            ErrorKind::Invalid,
            format!("process {target} is already under dfsched (it reports to this agent)"),
        );
    }
    if let Some(rules) = &a.rules {
        if let Err(e) = rules.check() {
            return ReplyLine::error(ErrorKind::Invalid, format!("bad rules: {e}"));
        }
    }
    let mut attached = shared.attached_lock();
    if attached.contains_key(&target) {
        return ReplyLine::error(
            ErrorKind::Invalid,
            format!("process {target} is already attached (dfsched detach {target} first)"),
        );
    }
    match Attached::new(
        target,
        uid,
        &shared.config.proc_root,
        shared.config.topology.clone(),
        a.policy,
        a.rules,
        &crate::sys::RealSys,
        shared
            .config
            .engine_log_dir
            .as_ref()
            .map(|d| d.join(format!("attach-{target}.log")))
            .as_deref(),
    ) {
        Ok((process, counts)) => {
            let reply = AttachReply {
                pid: target,
                policy: process.policy,
                threads: counts.threads,
                placed: counts.placed,
            };
            attached.insert(target, process);
            drop(attached);
            // Placed from now on at the configured tick, not the lone one.
            let (flag, wake) = &shared.tick_sleep;
            flag.lock().unwrap_or_else(PoisonError::into_inner).poked = true;
            wake.notify_all();
            tracing::info!(
                pid = target,
                threads = counts.threads,
                "dfsched agent: attached"
            );
            ReplyLine::new(Reply::Attached(reply))
        }
        Err(e) => ReplyLine::error(ErrorKind::Invalid, e.to_string()),
    }
}

/// `dfsched detach`: gives the masks back and forgets the process.
fn detach(shared: &Shared, uid: u32, target: u32) -> ReplyLine {
    let mut attached = shared.attached_lock();
    let Some(process) = attached.get(&target) else {
        return ReplyLine::error(
            ErrorKind::Invalid,
            format!("process {target} is not attached"),
        );
    };
    // Owned by the asker now (it may have ended: then nothing to give back,
    // and anyone served may forget it).
    let owner = owner_of(&shared.config.proc_root, target, uid);
    if owner.is_some_and(|o| o != uid) && uid != 0 {
        return ReplyLine::error(
            ErrorKind::Denied,
            format!("process {target} belongs to uid {} now", owner.unwrap_or(0)),
        );
    }
    let counts = process.release(&crate::sys::RealSys);
    let policy = process.policy;
    attached.remove(&target);
    tracing::info!(
        pid = target,
        restored = counts.placed,
        "dfsched agent: detached"
    );
    ReplyLine::new(Reply::Detached(AttachReply {
        pid: target,
        policy,
        threads: counts.threads,
        placed: counts.placed,
    }))
}

/// Why `uid` may not attach `target`, if it may not: the process must
/// exist, belong to `uid`, and be neither the agent nor pid 1.
fn check_target(shared: &Shared, uid: u32, target: u32) -> Option<ReplyLine> {
    if target == shared.pid || target <= 1 {
        return Some(ReplyLine::error(
            ErrorKind::Invalid,
            format!("process {target} cannot be attached"),
        ));
    }
    match owner_of(&shared.config.proc_root, target, uid) {
        None => Some(ReplyLine::error(
            ErrorKind::Invalid,
            format!("no process {target}"),
        )),
        Some(owner) if owner != uid => Some(ReplyLine::error(
            ErrorKind::Denied,
            format!("process {target} belongs to uid {owner}, not to the asking uid {uid}"),
        )),
        Some(_) if preloaded(&shared.config.proc_root, target) => Some(ReplyLine::error(
            ErrorKind::Invalid,
            format!(
                "process {target} runs under dfsched run (libdfsched.so preloaded): its own \
                 runtime places it"
            ),
        )),
        Some(_) => None,
    }
}

/// Whether process `pid` was started with dfsched's preload
/// (`DFSCHED_PRELOAD=1` in its environment, as `dfsched run` sets): its own
/// runtime places its threads, and a second placer would fight it. The
/// environment is read as the process started (a few KiB, bounded).
fn preloaded(proc_root: &Path, pid: u32) -> bool {
    use std::io::Read;
    let Ok(file) = std::fs::File::open(proc_root.join(format!("{pid}/environ"))) else {
        return false;
    };
    let mut env = Vec::new();
    if file.take(1 << 20).read_to_end(&mut env).is_err() {
        return false;
    }
    env.split(|b| *b == 0).any(|kv| {
        kv.strip_prefix(b"DFSCHED_PRELOAD=")
            .is_some_and(|v| matches!(v, b"1" | b"true" | b"yes" | b"on"))
    })
}

/// Checks a report and records it as the process's latest load: the state,
/// still locked, or the refusal to send (nothing recorded).
fn record(
    shared: &Shared,
    id: u64,
    pid: u32,
    uid: u32,
    r: Report,
) -> Result<std::sync::MutexGuard<'_, State>, ReplyLine> {
    let cpus = shared.config.topology.cpus();
    let load = check_load(&r.load_milli, cpus, shared.config.max_load_milli)
        .map_err(|why| ReplyLine::error(ErrorKind::Invalid, why))?;
    if !r.allowed.intersects(cpus) {
        return Err(ReplyLine::error(
            ErrorKind::Invalid,
            format!(
                "allowed CPUs {} hold no CPU of this machine ({cpus})",
                r.allowed
            ),
        ));
    }
    if let Some(d) = &r.detail {
        d.check(cpus)
            .map_err(|why| ReplyLine::error(ErrorKind::Invalid, why))?;
    }
    // The pid is the peer's own (SO_PEERCRED), and `handle` checked that it
    // still belongs to the peer's uid.
    let mut st = shared.lock();
    let detail = match r.detail {
        Some(d) => Some((d, Instant::now())),
        None => st.procs.get_mut(&id).and_then(|p| p.detail.take()),
    };
    let new = st
        .procs
        .insert(
            id,
            Proc {
                pid,
                uid,
                load_milli: load,
                allowed: r.allowed.intersection(cpus),
                own_socket_inode: r.own_socket_inode,
                detail,
            },
        )
        .is_none();
    if new && st.procs.len() == 2 {
        // Lock order: the state, then the tick's flag (the tick thread
        // never takes the state while holding its flag).
        let (flag, wake) = &shared.tick_sleep;
        flag.lock().unwrap_or_else(PoisonError::into_inner).poked = true;
        wake.notify_all();
    }
    Ok(st)
}

fn report(shared: &Shared, id: u64, pid: u32, uid: u32, r: Report) -> ReplyLine {
    let weighed = r.weighed;
    let own_sample = r.own_sample;
    let watchable = r.watchable;
    let mut st = match record(shared, id, pid, uid, r) {
        Ok(st) => st,
        Err(refusal) => return refusal,
    };
    st.counters.reports += 1;
    let mut others: BTreeMap<CpuId, u64> = BTreeMap::new();
    for p in st.procs.values().filter(|p| p.pid != pid) {
        for &(cpu, milli) in &p.load_milli {
            // Bounded by the caps (module doc); saturating all the same.
            let e = others.entry(cpu).or_default();
            *e = e.saturating_add(milli);
        }
    }
    let registered: BTreeSet<u32> = st.procs.values().map(|p| p.pid).collect();
    // Their load, for the shared sample to take their CPU time and
    // runnable threads off the machine's (scan.rs): copied under the state
    // lock, used only if this report takes a new sample.
    let loads: scan::Registered = st
        .procs
        .values()
        .map(|p| (p.pid, p.load_milli.clone()))
        .collect();
    let set = st.sets.iter().find(|s| s.members.contains(&pid));
    let mut view = View {
        others_milli: others.into_iter().filter(|&(_, m)| m > 0).collect(),
        unmanaged: None,
        unmanaged_milli: None,
        registered: registered.iter().copied().collect(),
        home: set.map(|s| s.home.cpus.clone()),
        set: set.map(|s| s.id),
        watch: watchable && st.watched_until.is_some_and(|t| Instant::now() < t),
    };
    if own_sample {
        // The client samples for itself (proto.rs, `own_sample`).
        st.counters.own_sample_reports += 1;
        return ReplyLine::new(Reply::View(Box::new(view)));
    }
    drop(st);
    // The rest of the machine's load, outside the state lock: one scan
    // serves every report within the freshness bound.
    let fresh = Duration::from_millis(shared.config.scan_fresh_ms);
    let scanned = {
        let mut scan = shared.scan.lock().unwrap_or_else(PoisonError::into_inner);
        let scanned = scan.get(fresh, || {
            let mut skip = loads;
            skip.entry(shared.pid).or_default();
            skip
        });
        // Processes registered since the sample leave the weighing here and
        // its busy time and threads at the next sample (scan.rs). The
        // weighing is against the asking process's own CFS group.
        if let Some(load) = scan.for_client(pid, &registered, weighed) {
            view.unmanaged = Some(load.counted);
            view.unmanaged_milli = load.milli;
        }
        scanned
    };
    match scanned {
        Scanned::Reused => {}
        Scanned::Taken => shared.lock().counters.scans += 1,
        Scanned::Failed => {
            let mut st = shared.lock();
            st.counters.scans += 1;
            st.counters.scan_errors += 1;
        }
    }
    ReplyLine::new(Reply::View(Box::new(view)))
}

/// The answer to `top` from a peer of `uid`: the processes of that uid
/// (root: all) with their details, and the load per CPU; from now on, for
/// `watch_for` (or longer if already so), views ask watchable runtimes
/// for details.
fn top(shared: &Shared, uid: u32, watch_for: Duration) -> TopView {
    let now = Instant::now();
    let (mut processes, ours, registered) = {
        let mut st = shared.lock();
        st.watched_until = st.watched_until.max(Some(now + watch_for));
        let set_of = |pid: u32| {
            st.sets
                .iter()
                .find(|s| s.members.contains(&pid))
                .map(|s| s.id)
        };
        let mut ours: BTreeMap<CpuId, u64> = BTreeMap::new();
        for p in st.procs.values() {
            for &(cpu, m) in &p.load_milli {
                let e = ours.entry(cpu).or_default();
                *e = e.saturating_add(m);
            }
        }
        let processes: Vec<ProcessTop> = st
            .procs
            .values()
            .filter(|p| uid == 0 || p.uid == uid)
            .map(|p| ProcessTop {
                pid: p.pid,
                uid: p.uid,
                comm: None,
                load_milli: p.load_milli.clone(),
                set: set_of(p.pid),
                detail: p.detail.as_ref().map(|(d, _)| (**d).clone()),
                detail_age_ms: p.detail.as_ref().map(|(_, at)| {
                    u64::try_from(now.duration_since(*at).as_millis()).unwrap_or(u64::MAX)
                }),
            })
            .collect();
        let registered: BTreeSet<u32> = st.procs.values().map(|p| p.pid).collect();
        let loads: scan::Registered = st
            .procs
            .values()
            .map(|p| (p.pid, p.load_milli.clone()))
            .collect();
        (processes, ours, (registered, loads))
    };
    let (registered, loads) = registered;
    // Outside the state lock: /proc reads, and the scan's lock.
    for p in &mut processes {
        p.comm = std::fs::read_to_string(shared.config.proc_root.join(format!("{}/comm", p.pid)))
            .ok()
            .map(|c| c.trim_end().chars().take(64).collect());
    }
    // A sample within the freshness bound, as a report takes one (runtimes
    // that sample for themselves leave the agent none to reuse).
    let fresh = Duration::from_millis(shared.config.scan_fresh_ms);
    let (scanned, others) = {
        let mut scan = shared.scan.lock().unwrap_or_else(PoisonError::into_inner);
        let scanned = scan.get(fresh, || {
            let mut skip = loads;
            skip.entry(shared.pid).or_default();
            skip
        });
        let others: Option<BTreeMap<CpuId, u64>> =
            scan.for_client(shared.pid, &registered, false).map(|f| {
                f.counted
                    .into_iter()
                    .map(|(cpu, n)| (cpu, u64::from(n) * 1000))
                    .collect()
            });
        (scanned, others)
    };
    // The scan's lock is released: the state's may be taken (lock order).
    if !matches!(scanned, Scanned::Reused) {
        let mut st = shared.lock();
        st.counters.scans += 1;
        st.counters.scan_errors += u64::from(matches!(scanned, Scanned::Failed));
    }
    TopView {
        agent_pid: shared.pid,
        cpus: shared
            .config
            .topology
            .cpus()
            .iter()
            .map(|cpu| CpuTop {
                cpu,
                ours_milli: ours.get(&cpu).copied().unwrap_or(0),
                others_milli: others.as_ref().map(|o| o.get(&cpu).copied().unwrap_or(0)),
            })
            .collect(),
        processes,
    }
}

fn status(shared: &Shared) -> Status {
    let st = shared.lock();
    let set_of = |pid: u32| {
        st.sets
            .iter()
            .find(|s| s.members.contains(&pid))
            .map(|s| s.id)
    };
    Status {
        agent_pid: shared.pid,
        agent_uid: shared.uid,
        processes: st
            .procs
            .values()
            .map(|p| ProcessStatus {
                pid: p.pid,
                uid: p.uid,
                load_milli: p.load_milli.clone(),
                allowed: p.allowed.clone(),
                set: set_of(p.pid),
            })
            .collect(),
        sets: st
            .sets
            .iter()
            .map(|s| SetStatus {
                id: s.id,
                members: s.members.clone(),
                inodes: s.inodes.clone(),
                home: s.home.cpus.clone(),
            })
            .collect(),
        counters: st.counters.clone(),
    }
}

/// How long a tick reuses the last finding of which shared inodes are also
/// held outside the registered processes, while the inodes in question and
/// the registered pids stay the same. Finding it reads the open files of
/// every process on the machine (≈ 2 ms of CPU on a small machine, 20 ms
/// per second at the default tick: as much as the shared load scan), and
/// what it guards against, an unregistered process holding the very pipe
/// that registered ones share, rarely starts while nothing else changes. A
/// new candidate inode or a change of registered processes is checked at
/// once; only an outside holder that appears later waits up to this long.
const OUTSIDE_RECHECK: Duration = Duration::from_secs(1);

/// The last [`sharing::held_outside`] finding (see [`OUTSIDE_RECHECK`]).
#[derive(Debug, Default)]
struct OutsideCache {
    candidates: BTreeSet<u64>,
    skip: BTreeSet<u32>,
    outside: BTreeSet<u64>,
    at: Option<Instant>,
}

impl OutsideCache {
    /// Which of `candidates` processes not in `skip` hold: the cached
    /// finding if it is for the same question and recent enough.
    fn held_outside(
        &mut self,
        root: &Path,
        skip: BTreeSet<u32>,
        candidates: BTreeSet<u64>,
    ) -> &BTreeSet<u64> {
        let fresh = self.at.is_some_and(|t| t.elapsed() < OUTSIDE_RECHECK)
            && self.candidates == candidates
            && self.skip == skip;
        if !fresh {
            self.outside = sharing::held_outside(root, &skip, &candidates);
            self.candidates = candidates;
            self.skip = skip;
            self.at = Some(Instant::now());
        }
        &self.outside
    }
}

fn tick_loop(shared: &Shared) {
    let interval = Duration::from_millis(shared.config.tick_ms.max(1));
    let mut outside = OutsideCache::default();
    let mut last = Instant::now();
    loop {
        // Two statements: the state lock is never held while the
        // attached processes' lock is taken.
        let few = shared.lock().procs.len() < 2;
        let lone = few && shared.attached_lock().is_empty();
        // Alone: every LONE_TICK (or the configured tick, if longer); a
        // poke (a second registration) brings the next tick back to the
        // configured cadence, never earlier than it.
        let mut due = last
            + if lone {
                interval.max(LONE_TICK)
            } else {
                interval
            };
        let (flag, wake) = &shared.tick_sleep;
        let mut woken = flag.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if woken.stopped {
                return;
            }
            if woken.poked {
                woken.poked = false;
                due = due.min(last + interval);
            }
            let now = Instant::now();
            if now >= due {
                break;
            }
            woken = wake
                .wait_timeout(woken, due - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        drop(woken);
        last = Instant::now();
        if shared.idle_exit_due() {
            tracing::info!("dfsched agent: no client for the idle exit's time, ending");
            shared.request_stop();
            return;
        }
        tick(shared, &mut outside);
        refresh_attached(shared);
    }
}

/// Tick step 5: each attached process refreshed; those that ended are
/// dropped.
fn refresh_attached(shared: &Shared) {
    let mut attached = shared.attached_lock();
    if attached.is_empty() {
        return;
    }
    let now = dfsched_core::Nanos(shared.started.elapsed().as_nanos() as u64);
    attached.retain(
        |&pid, process| match process.refresh(&crate::sys::RealSys, now) {
            Ok(_) => true,
            Err(e) => {
                tracing::info!(pid, error = %e, "dfsched agent: an attached process is dropped");
                false
            }
        },
    );
    let empty = attached.is_empty();
    drop(attached);
    if empty {
        // The idle exit counts from now.
        let mut st = shared.lock();
        if st.open == 0 {
            st.idle_since = Some(Instant::now());
        }
    }
}

/// One tick: the liveness backstop, then sharing detection.
fn tick(shared: &Shared, outside_cache: &mut OutsideCache) {
    let root = &shared.config.proc_root;
    // 1. Which records are still alive and owned as registered (outside the
    //    lock: /proc reads).
    let snapshot: Vec<(u64, u32, u32, Option<u64>)> = shared
        .lock()
        .procs
        .iter()
        .map(|(&id, p)| (id, p.pid, p.uid, p.own_socket_inode))
        .collect();
    let dead: Vec<u64> = snapshot
        .iter()
        .filter(|&&(_, pid, uid, _)| owner_of(root, pid, uid) != Some(uid))
        .map(|&(id, ..)| id)
        .collect();
    // 2. Their open pipes and sockets, and the components they form
    //    without the inodes held outside them.
    let pids: BTreeSet<u32> = snapshot
        .iter()
        .filter(|(id, ..)| !dead.contains(id))
        .map(|&(_, pid, ..)| pid)
        .collect();
    // A set needs two members: with fewer live processes there is nothing
    // to find, and their open files are not read (module doc of sharing.rs).
    let scanned = pids.len() >= 2;
    let fds: BTreeMap<u32, Vec<u64>> = if scanned {
        pids.iter()
            .map(|&pid| (pid, sharing::shared_inodes(root, pid)))
            .collect()
    } else {
        BTreeMap::new()
    };
    let mut ignore: BTreeSet<u64> = snapshot.iter().filter_map(|s| s.3).collect();
    let mut comps = sharing::components(&fds, &ignore);
    if !comps.is_empty() {
        let candidates: BTreeSet<u64> = comps.iter().flat_map(|c| c.inodes.clone()).collect();
        let mut skip = pids.clone();
        skip.insert(shared.pid);
        let outside = outside_cache.held_outside(root, skip, candidates);
        if !outside.is_empty() {
            ignore.extend(outside.iter().copied());
            comps = sharing::components(&fds, &ignore);
        }
    }
    // 3–4. Under the lock: drop the dead, give the sets ids and homes.
    let mut st = shared.lock();
    st.counters.ticks += 1;
    st.counters.file_scans += u64::from(scanned);
    for id in dead {
        if st.procs.remove(&id).is_some() {
            st.counters.dropped_on_exit += 1;
        }
    }
    // A set member that unregistered since the snapshot leaves its set.
    let live: BTreeSet<u32> = st.procs.values().map(|p| p.pid).collect();
    for c in &mut comps {
        c.members.retain(|p| live.contains(p));
    }
    comps.retain(|c| c.members.len() >= 2);
    let old = std::mem::take(&mut st.sets);
    let mut sets = Vec::with_capacity(comps.len());
    for comp in comps {
        // The set inherits the id and home of the oldest earlier set it
        // overlaps, so that homes stay put while the set lives.
        let prev = old
            .iter()
            .filter(|s| s.members.iter().any(|m| comp.members.contains(m)))
            .filter(|s| !sets.iter().any(|n: &SetRec| n.id == s.id))
            .min_by_key(|s| s.id);
        let id = match prev {
            Some(p) => p.id,
            None => {
                st.next_set += 1;
                st.next_set - 1
            }
        };
        let home = home_of(shared, &st, &comp.members, prev.map(|p| p.home.domain));
        sets.push(SetRec {
            id,
            members: comp.members,
            inodes: comp.inodes,
            home,
        });
    }
    st.sets = sets;
}

/// The home of a set of `members` (see sharing.rs).
fn home_of(shared: &Shared, st: &State, members: &[u32], current: Option<DomainId>) -> Home {
    let config = dfsched_core::Config {
        heavy_load_milli: shared.config.heavy_load_milli,
        ..dfsched_core::Config::default()
    };
    let procs = st.procs.values().map(|p| sharing::Member {
        pid: p.pid,
        load_milli: &p.load_milli,
        allowed: &p.allowed,
    });
    sharing::set_home(&shared.config.topology, &config, procs, members, current)
}

/// Sets `path`'s mode bits.
pub(super) fn chmod(path: &Path, mode: u32) -> Result<(), AgentError> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| AgentError::io(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one-`statx` path and the `status` path agree: asked with our own
    /// uid the directory answers; asked with another, the `Uid:` line
    /// still gives ours (not the expected one, and not "gone").
    #[test]
    fn owner_of_answers_the_effective_uid_by_either_path() {
        let proc_root = Path::new("/proc");
        let pid = std::process::id();
        // SAFETY: geteuid takes nothing and cannot fail.
        let me = unsafe { libc::geteuid() };
        assert_eq!(owner_of(proc_root, pid, me), Some(me));
        assert_eq!(owner_of(proc_root, pid, me.wrapping_add(1)), Some(me));
        // pid_max is at most 2^22: this pid never exists.
        assert_eq!(owner_of(proc_root, 1 << 23, me), None);
    }
}
