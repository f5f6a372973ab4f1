//! The runtime's side of the agent, run from each balancer pass. This file
//! holds the link (its connection, backoff and status) and the exchanges;
//! the runtime gathers what goes out and applies what comes back
//! (`runtime/pass.rs`), so nothing here locks the runtime's state.
//!
//! ```text
//!   1. own load ([`Ours`], gathered by the runtime under its lock): Σ over
//!      registered runnable threads of their target's share of each CPU
//!      (the core's load formula, `dfsched_core::rules::add_task_load`),
//!      plus 1000 per runnable thread of this process the engine does not
//!      know (/proc/self/task, the balancer thread itself excluded). This
//!      is the engine's `load_milli()` minus the external part, computed
//!      from the targets so that a load set by `set_external_load` cannot
//!      leak in.
//!   2. report it ([`exchange`]); receive the others' sum, the unmanaged
//!      load (the agent's shared sample from /proc/stat signals, weighed
//!      against our CFS group: `weighed` asks for it; an agent from before
//!      the field refuses that once per connection, and is asked plainly
//!      from then on), the registered pids, the home
//!   3. the unmanaged load goes through the runtime's window (external.rs);
//!      only when the view carries none does the runtime sample the signals
//!      itself, leaving out the registered pids' load (it came in 2); the
//!      others' sum is added in thousandths (`Event::ExternalLoadMilli`)
//!   4. (under the runtime's lock, before Balance) narrow every thread's
//!      allowed set to the sharing set's home with Event::Allowed
//!      ([`Link::home_changes`] says which); restore it when the home goes
//!   5. after the pass, if it moved threads: report the new load at once
//!      ([`update`], no view asked), so that the other processes' next views
//!      show the move instead of the load of a whole interval ago. The pass
//!      does not wait for the agent's acknowledgement: the next exchange
//!      reads it before its view (a sleep and a wake-up less per pass)
//! ```
//!
//! Alone: while the last view names this process as the only registered
//! one, steps 2 and 5 happen once every [`LONE_PASSES`] passes instead of
//! every pass, and every pass samples for itself (step 3's fallback; the
//! report says so, `own_sample`, and the agent reads nothing for it): one
//! process has no one to coordinate with, and a sample it shares with
//! nobody would only repeat its own.
//!
//! Failure is never fatal: no socket, a refused or timed-out exchange, an
//! agent of another protocol version, an agent or a directory this runtime
//! does not trust (`sock.rs`; warned of once), and the pass goes on with
//! the plain `/proc` sample.
//!
//! Bounds: connecting and each exchange (steps 2 and 5) end by one
//! deadline, the link's budget from their start ([`LINK_TIMEOUT`], or
//! `DFSCHED_AGENT_TIMEOUT_MS`), so a stopped or hostile
//! agent delays a pass by at most that much, full accept queue included.
//! A report whose view has not come by then is not given up at once: the
//! connection is kept, and the next pass reads that view (a pass late)
//! instead of sending another report; only if it has still not come is
//! the exchange a failure. So an agent slowed by a busy machine (it
//! competes for CPU with the load it measures) still serves its view,
//! while a hung one costs two budgets and then the backoff.
//! The socket calls run with neither the engine's lock nor the link's own
//! held: the client is taken out of the link, used, and put back, so
//! `Runtime::agent_link` and the program's hints never wait on the agent.
//! When no agent listens (no socket file, or nobody on it) the link looks
//! again every [`RETRY_PASSES`] passes; after a failed exchange or a
//! refusal it waits 1, 2, 4, … passes, doubling up to
//! [`MAX_BACKOFF_PASSES`], so a hung agent costs a timeout ever more
//! rarely; an answer resets it. A connection unused for half the agent's
//! default idle timeout is replaced before use rather than found closed.
//!
//! Invariants: a thread's allowed set is
//! narrowed only to its own allowed set ∩ the home (its own set if that is
//! empty), and a set someone else changed (a `taskset` seen at placement)
//! becomes the thread's own set.

use super::client::{Client, ConnectOptions};
use super::proto::{ErrorKind, Report, View};
use super::sock::Trust;
use super::top::Detail;
use super::AgentError;
use crate::scx::Body;
use dfsched_core::{CpuId, CpuSet};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Passes between connection attempts when no agent listens: about 2 s at
/// the default interval, so an agent started later is found soon, while a
/// machine without one pays a `stat` (and a `connect` if a socket file is
/// left) only that often.
pub const RETRY_PASSES: u32 = 20;

/// The most passes the link waits after failed exchanges in a row before
/// trying again (the wait doubles from 1 up to this): 6.4 s at the default
/// interval, so a hung agent costs at most one [`LINK_TIMEOUT`] per 64
/// passes (0.4 % of the balancer's time), and an agent that recovers is
/// used again within seconds.
pub const MAX_BACKOFF_PASSES: u32 = 64;

/// The budget of one exchange with the agent in a balancer pass, connect
/// included: 50 ms, half the default interval. The agent's own work per
/// report is well under a millisecond, a few when it takes the shared
/// `/proc` scan; what the budget must cover is the wait for a CPU on a
/// busy machine, where the agent competes with the very load it measures
/// (at a load of ten runnable threads per CPU, tens of milliseconds), so
/// that the shared view is not lost exactly when it matters. A pass that
/// spends it all still ends within the default interval, and with the
/// backoff a hung agent costs one budget per [`MAX_BACKOFF_PASSES`] passes
/// (under 1 % of the balancer's time). Before this bound a stopped agent
/// made every pass wait 500 ms or more: 8 passes in 5 s instead of 48.
pub const LINK_TIMEOUT: Duration = Duration::from_millis(50);

/// While the last view names this process alone among the registered,
/// the link exchanges with the agent once every this many passes (about a
/// second at the default interval) instead of every pass, and sends no
/// updates: an agent serving one process coordinates nobody, and each
/// exchange costs both sides a context switch and the agent a request
/// (with its shared `/proc` sample), several times what the runtime's own
/// sample costs. The passes between take that own sample, as without an
/// agent. A second process is heard of at the next exchange, and from then
/// on every pass exchanges again; a newcomer meanwhile sees our load as of
/// our last report, at most this many passes old. The default of
/// `DFSCHED_AGENT_LONE_PASSES`.
pub const LONE_PASSES: u32 = 10;

/// A connection unused this long is replaced before use: half the agent's
/// default idle timeout, after which the agent would have closed it.
const STALE_AFTER: Duration = Duration::from_secs(30);

/// Whether and where a runtime reaches the agent (`DFSCHED_AGENT`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum AgentMode {
    /// The default socket ([`super::default_socket_path`]) if an agent
    /// listens there; the `/proc` sample alone otherwise.
    #[default]
    Auto,
    /// Never.
    Off,
    /// This socket, with the same silent fallback as `Auto`.
    Path(PathBuf),
}

impl FromStr for AgentMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "auto" => Ok(AgentMode::Auto),
            "off" => Ok(AgentMode::Off),
            p if p.starts_with('/') => Ok(AgentMode::Path(PathBuf::from(p))),
            _ => Err("use auto, off, or an absolute socket path".into()),
        }
    }
}

impl std::fmt::Display for AgentMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AgentMode::Auto => f.write_str("auto"),
            AgentMode::Off => f.write_str("off"),
            AgentMode::Path(p) => write!(f, "{}", p.display()),
        }
    }
}

/// What a runtime last heard from the agent ([`crate::Runtime::agent_link`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LinkStatus {
    /// The socket the runtime uses, if the agent is not off.
    pub socket: Option<PathBuf>,
    /// Whether it is connected now.
    pub connected: bool,
    /// Reports answered.
    pub reports: u64,
    /// Connects and exchanges that failed (timed out, refused, or an agent
    /// or directory not trusted); finding no agent is not one.
    pub failures: u64,
    /// Load updates sent after passes that moved threads.
    pub updates: u64,
    /// The others' load in the last view, in thousandths per CPU.
    pub others_milli: Vec<(CpuId, u64)>,
    /// The unmanaged load (processes not under dfsched) in the last view,
    /// runnable threads per CPU before the runtime's window; `None` if the
    /// view carried none.
    pub unmanaged: Option<Vec<(CpuId, u32)>>,
    /// The same load weighed by the agent against this process's CFS
    /// group, in thousandths per CPU before the runtime's window; `None` if
    /// the view carried none (an agent that does not weigh: the runtime
    /// then takes 1000 per thread of `unmanaged`).
    pub unmanaged_milli: Option<Vec<(CpuId, u64)>>,
    /// The registered pids of the last view.
    pub registered: Vec<u32>,
    /// The sharing set's home the threads are narrowed to, if any.
    pub home: Option<CpuSet>,
    /// The sharing set's id.
    pub set: Option<u64>,
    /// `Event::Allowed` sent to narrow or restore threads.
    pub allowed_events: u64,
    /// Why the socket or its agent was refused (another uid's directory or
    /// agent, or a directory others may write to): the runtime then works
    /// alone, and warns once. `None` once a trusted agent answers.
    pub refused: Option<String>,
    /// Passes the link waits before its next attempt (0: it tries at the
    /// next pass).
    pub backoff_passes: u32,
    /// Views that came a pass late (the agent answered after
    /// [`LINK_TIMEOUT`], before the next pass's).
    pub late_views: u64,
    /// Whether the last view named this process alone among the
    /// registered (the link then exchanges every [`LONE_PASSES`] passes).
    pub alone: bool,
    /// Passes that went without an exchange because the process was alone.
    pub lone_passes: u64,
}

/// The link's state, behind its own mutex, which is never held across a
/// socket call: the client is taken out ([`Link::checkout`]) and put back
/// ([`Link::checkin`]).
#[derive(Debug)]
pub(crate) struct Link {
    client: Option<Client>,
    /// A pass holds the client (or is connecting): another pass at the same
    /// time goes without the agent rather than wait.
    busy: bool,
    trust: Trust,
    /// Each exchange's budget ([`LINK_TIMEOUT`] unless configured).
    budget: Duration,
    inode: Option<u64>,
    /// When the client last exchanged.
    used: Option<Instant>,
    /// Passes until the next connection attempt.
    retry_in: u32,
    /// Failed exchanges or refusals in a row.
    failures_in_a_row: u32,
    /// Whether the refusal warning was given.
    warned: bool,
    /// Threads narrowed to a home: tid → (their own allowed set, the set
    /// dfsched gave them).
    narrowed: HashMap<u64, (CpuSet, CpuSet)>,
    /// The agent on this connection refused a report asking for the weighed
    /// load (an agent from before `weighed`, which refuses unknown fields):
    /// reports on it ask no more. Reset with each new connection.
    plain_reports: bool,
    /// The agent on this connection refused a report saying `watchable`
    /// (an agent from before `dfsched top`): reports on it say no more.
    /// Reset with each new connection.
    no_watch: bool,
    /// The agent on this connection refused a report whose detail named the
    /// body (an agent from before `body`, `top.rs`): details on it leave
    /// the body out. Reset with each new connection.
    no_body: bool,
    /// The last view said `watch`: someone runs `dfsched top`, so the next
    /// reports carry this process's detail (`top.rs`).
    watched: bool,
    /// A report was sent on the connection and its view has not been read
    /// (it came later than the budget): `Some(weighed)` of that report.
    /// The next pass reads it before sending anything.
    pending: Option<bool>,
    /// Passes still to go without an exchange while alone.
    lone_wait: u32,
    /// Exchange once every this many passes while alone ([`LONE_PASSES`]
    /// unless configured; 1 = every pass).
    lone_passes: u32,
    /// The runtime weighs no outside load: its reports never ask for the
    /// agent's sample (`Report::own_sample`).
    no_outside_load: bool,
    status: LinkStatus,
}

/// Why a pass has no view yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Late {
    /// The report was just sent: its view may come by the next pass.
    First,
    /// The view of the last pass's report has still not come.
    Again,
}

/// What a pass gets from [`Link::checkout`].
#[derive(Debug)]
enum Checkout {
    /// No agent this pass.
    Skip,
    /// The open connection, to be given back with [`Link::checkin`].
    Use(Client),
    /// Connect to this socket, then give back the result.
    Connect(PathBuf),
}

impl Link {
    pub(crate) fn new(config: &crate::RuntimeConfig) -> Link {
        let mut link = Link::with(
            &config.agent,
            config.agent_trust,
            Duration::from_millis(config.agent_timeout_ms),
        );
        link.lone_passes = config.agent_lone_passes.max(1);
        link.no_outside_load = !config.external_load;
        link
    }

    fn with(mode: &AgentMode, trust: Trust, budget: Duration) -> Link {
        let socket = match mode {
            AgentMode::Off => None,
            AgentMode::Auto => Some(super::default_socket_path()),
            AgentMode::Path(p) => Some(p.clone()),
        };
        Link {
            client: None,
            busy: false,
            trust,
            budget,
            inode: None,
            used: None,
            retry_in: 0,
            failures_in_a_row: 0,
            warned: false,
            narrowed: HashMap::new(),
            plain_reports: false,
            no_watch: false,
            no_body: false,
            watched: false,
            pending: None,
            lone_wait: 0,
            lone_passes: LONE_PASSES,
            no_outside_load: false,
            status: LinkStatus {
                socket,
                ..LinkStatus::default()
            },
        }
    }

    /// Whether this pass's report asks for no unmanaged sample: the
    /// runtime weighs no outside load, or the last view named it alone and
    /// it samples for itself between its exchanges anyway (lone passes);
    /// exchanging every pass while alone (`lone_passes` 1) keeps the
    /// agent's sample.
    fn samples_itself(&self) -> bool {
        self.no_outside_load || (self.status.alone && self.lone_passes > 1)
    }

    /// The connection for this pass, or whether to connect (`connect`:
    /// only an open connection is wanted, as for an update).
    fn checkout(&mut self, connect: bool) -> Checkout {
        if self.busy {
            return Checkout::Skip;
        }
        if let Some(c) = self.client.take() {
            if self.used.is_some_and(|t| t.elapsed() < STALE_AFTER) {
                self.busy = true;
                return Checkout::Use(c);
            }
            // Unused for long: the agent may have closed it; start afresh.
            self.status.connected = false;
        }
        let Some(path) = self.status.socket.clone() else {
            return Checkout::Skip;
        };
        if !connect {
            return Checkout::Skip;
        }
        if self.retry_in > 0 {
            self.retry_in -= 1;
            self.status.backoff_passes = self.retry_in;
            return Checkout::Skip;
        }
        // No socket file: no agent; not even a connect.
        if !path.exists() {
            self.retry_in = RETRY_PASSES;
            self.status.backoff_passes = self.retry_in;
            return Checkout::Skip;
        }
        // Whatever the last agent refused, a new one is asked afresh.
        self.plain_reports = false;
        self.no_watch = false;
        self.no_body = false;
        self.watched = false;
        self.pending = None;
        self.busy = true;
        Checkout::Connect(path)
    }

    /// Gives back the connection with a report's view still to come
    /// ([`Link::pending`]): not a failure yet, and not an answer either,
    /// so the backoff is left as it is.
    fn park(&mut self, client: Client, weighed: bool) {
        self.busy = false;
        self.client = Some(client);
        self.used = Some(Instant::now());
        self.pending = Some(weighed);
    }

    /// Gives back the connection after an exchange that worked.
    fn checkin(&mut self, client: Client) {
        self.busy = false;
        self.pending = None;
        self.client = Some(client);
        self.used = Some(Instant::now());
        self.failures_in_a_row = 0;
        self.retry_in = 0;
        self.status.backoff_passes = 0;
        self.status.connected = true;
        self.status.refused = None;
    }

    /// Gives back nothing after a failed connect or exchange: backs off
    /// (module doc); a refusal of whose agent it is is warned of once.
    fn fail(&mut self, runtime: u64, e: &AgentError) {
        self.busy = false;
        self.pending = None;
        self.client = None;
        self.lone_wait = 0;
        self.status.connected = false;
        self.status.alone = false;
        if matches!(e, AgentError::NotRunning { .. }) {
            // Nobody listens: as no socket file.
            self.retry_in = RETRY_PASSES;
            self.status.backoff_passes = self.retry_in;
            return;
        }
        if super::is_trust_refusal(e) {
            if !self.warned {
                self.warned = true;
                tracing::warn!(runtime, error = %e, "dfsched: not using the agent's socket");
            }
            self.status.refused = Some(e.to_string());
        } else {
            tracing::debug!(runtime, error = %e, "dfsched agent exchange failed");
        }
        self.status.failures += 1;
        self.failures_in_a_row = self.failures_in_a_row.saturating_add(1);
        self.retry_in = backoff_passes(self.failures_in_a_row);
        self.status.backoff_passes = self.retry_in;
    }
}

/// Passes to wait after `n` ≥ 1 failures in a row: 1, 2, 4, … up to
/// [`MAX_BACKOFF_PASSES`].
fn backoff_passes(n: u32) -> u32 {
    1u32.checked_shl(n.saturating_sub(1))
        .unwrap_or(u32::MAX)
        .min(MAX_BACKOFF_PASSES)
}

/// The unmanaged load of a view, per CPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Unmanaged {
    /// Weighed, in thousandths of one of our threads.
    pub(crate) milli: Vec<(CpuId, u64)>,
    /// Runnable threads, counted one by one.
    pub(crate) counted: Vec<(CpuId, u32)>,
}

/// What one pass got from the agent.
#[derive(Debug, Default)]
pub(crate) struct AgentPass {
    view: Option<View>,
}

impl AgentPass {
    /// The agent's view this pass, if the exchange gave one.
    pub(crate) fn view(&self) -> Option<&View> {
        self.view.as_ref()
    }

    /// Whether the `/proc` sample must skip `pid` (a registered process:
    /// its load came with the view).
    pub(crate) fn skips(&self, pid: u32) -> bool {
        self.view
            .as_ref()
            .is_some_and(|v| v.registered.binary_search(&pid).is_ok())
    }

    /// The agent's unmanaged load (the processes it does not have
    /// registered), if the view carries it: per CPU in thousandths of one
    /// of our threads, weighed against our CFS group and nice by the agent
    /// (`unmanaged_milli`), or 1000 per runnable thread from an agent that
    /// does not weigh; and the runnable threads counted.
    pub(crate) fn unmanaged(&self) -> Option<Unmanaged> {
        let view = self.view.as_ref()?;
        let counted = view.unmanaged.clone()?;
        let milli = match &view.unmanaged_milli {
            Some(m) => m.clone(),
            // An agent that does not weigh: 1000 per thread, as counted.
            None => counted
                .iter()
                .map(|&(c, n)| (c, u64::from(n) * 1000))
                .collect(),
        };
        Some(Unmanaged { milli, counted })
    }

    /// A pass as if the agent had answered with these others' load and
    /// unmanaged sample.
    #[cfg(test)]
    pub(crate) fn for_test(
        others_milli: &[(CpuId, u64)],
        unmanaged: Option<&[(CpuId, u32)]>,
    ) -> AgentPass {
        AgentPass {
            view: Some(View {
                watch: false,
                others_milli: others_milli.to_vec(),
                unmanaged: unmanaged.map(<[_]>::to_vec),
                unmanaged_milli: None,
                registered: Vec::new(),
                home: None,
                set: None,
            }),
        }
    }

    /// `sample` plus the others' load, per CPU in thousandths, CPUs with
    /// none left out, in CPU order.
    pub(crate) fn add_others(&self, sample: Vec<(CpuId, u64)>) -> Vec<(CpuId, u64)> {
        let Some(view) = &self.view else {
            return sample;
        };
        let mut out: BTreeMap<CpuId, u64> = sample.into_iter().collect();
        for &(cpu, m) in &view.others_milli {
            let e = out.entry(cpu).or_default();
            *e = e.saturating_add(m);
        }
        out.into_iter().filter(|&(_, m)| m > 0).collect()
    }
}

/// This process's side of a report (step 1 of the module doc), gathered by
/// the runtime under its own lock: its load per CPU in thousandths and the
/// CPUs it may use.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Ours {
    /// Its load per CPU, thousandths.
    pub(crate) load: BTreeMap<CpuId, u64>,
    /// Its allowed CPUs on the machine.
    pub(crate) allowed: CpuSet,
    /// Its groups and last pass, gathered only while [`watched`] (for
    /// `dfsched top`).
    pub(crate) detail: Option<Box<Detail>>,
}

/// Whether the agent's last view asked for this process's detail (someone
/// runs `dfsched top`): the runtime then gathers one into [`Ours`].
pub(crate) fn watched(link: &Mutex<Link>) -> bool {
    link.lock().unwrap_or_else(PoisonError::into_inner).watched
}

/// The report of `load` and `allowed` on the connection whose socket is
/// `inode`; `weighed` is left for [`exchange`] to ask.
fn report_of(load: BTreeMap<CpuId, u64>, allowed: &CpuSet, inode: Option<u64>) -> Report {
    Report {
        load_milli: load.into_iter().filter(|&(_, m)| m > 0).collect(),
        allowed: allowed.clone(),
        own_socket_inode: inode,
        // Asked for by `exchange` only: an update gets no view.
        weighed: false,
        own_sample: false,
        watchable: false,
        detail: None,
    }
}

/// Whether this pass goes without an exchange because the process is the
/// agent's only one ([`LONE_PASSES`]); counts it if so. Asked before our
/// load is gathered, so that a lone pass reads nothing for the agent.
fn lone_pass(link: &Mutex<Link>) -> bool {
    let mut link = link.lock().unwrap_or_else(PoisonError::into_inner);
    if link.lone_wait > 0 && link.client.is_some() {
        link.lone_wait -= 1;
        link.status.lone_passes += 1;
        return true;
    }
    false
}

/// Step 2 of the module doc: reports `ours` (this process's load and
/// allowed CPUs, step 1) to the agent and returns its view. Never fails: an
/// exchange that fails gives an empty pass; so does a pass with no agent
/// configured or a lone pass, and neither gathers our load (`ours` is
/// called only when the report is to be sent; `None` sends nothing).
/// Takes at most the link's budget
/// ([`LINK_TIMEOUT`] by default) on the socket, with no lock held there;
/// `link` is locked only around its book-keeping. `runtime` names the
/// runtime in a warning.
pub(crate) fn exchange(
    link: &Mutex<Link>,
    runtime: u64,
    ours: impl FnOnce() -> Option<Ours>,
) -> AgentPass {
    let lock = || link.lock().unwrap_or_else(PoisonError::into_inner);
    if lock().status.socket.is_none() || lone_pass(link) {
        return AgentPass::default();
    }
    let Some(Ours {
        load,
        allowed,
        detail,
    }) = ours()
    else {
        return AgentPass::default();
    };
    let (checkout, budget) = {
        let mut link = lock();
        (link.checkout(true), link.budget)
    };
    let deadline = Instant::now() + budget;
    let mut client = match checkout {
        Checkout::Skip => return AgentPass::default(),
        Checkout::Use(c) => c,
        Checkout::Connect(path) => {
            let options = ConnectOptions {
                trust: lock().trust,
                timeout: budget,
            };
            match Client::connect_with(&path, options) {
                Ok(c) => {
                    lock().inode = c.socket_inode();
                    c
                }
                Err(e) => {
                    lock().fail(runtime, &e);
                    return AgentPass::default();
                }
            }
        }
    };
    let (inode, mut plain, mut no_watch, mut no_body, pending, own_sample) = {
        let link = lock();
        (
            link.inode,
            link.plain_reports,
            link.no_watch,
            link.no_body,
            link.pending,
            link.samples_itself(),
        )
    };
    // The view of the last pass's report, if it came late; else this
    // pass's report and its view. A report an older agent refuses as
    // malformed is sent again with less: first without its detail's `body`
    // (an agent from before it; only a detail naming the scx body has one),
    // then without `watchable` (an agent from before `dfsched top`), then
    // without `weighed` and `own_sample` (from before those); the
    // connection stays usable after a refusal. (A late view refused so is
    // taken as a refusal of the first of those this pass's report would
    // carry.)
    let mut weighed = pending.unwrap_or(!plain);
    let mut watchable = !no_watch;
    let names_body = |no_body: bool, watchable: bool| {
        !no_body && watchable && detail.as_ref().is_some_and(|d| !d.body.is_affinity())
    };
    let report = |weighed: bool, watchable: bool, no_body: bool| {
        let mut report = report_of(load.clone(), &allowed, inode);
        report.weighed = weighed;
        // Both additive fields or neither: an agent that refuses one is
        // asked plainly below.
        report.own_sample = weighed && own_sample;
        report.watchable = watchable;
        report.detail = if watchable { detail.clone() } else { None };
        if no_body {
            if let Some(d) = &mut report.detail {
                // Left out on the wire (`top.rs`): the agent shows affinity.
                d.body = Body::Affinity;
            }
        }
        report
    };
    let mut answer = match pending {
        Some(_) => client.late_view(deadline).map(|v| v.ok_or(Late::Again)),
        None => client
            .report_or_late(report(weighed, watchable, no_body), deadline)
            .map(|v| v.ok_or(Late::First)),
    };
    // At most three retries: one field dropped each.
    for _ in 0..3 {
        let refused_malformed = matches!(
            &answer,
            Err(AgentError::Refused {
                kind: ErrorKind::Malformed,
                ..
            })
        );
        if !refused_malformed {
            break;
        }
        if names_body(no_body, watchable) {
            no_body = true;
        } else if watchable {
            watchable = false;
            no_watch = true;
        } else if weighed {
            weighed = false;
            plain = true;
        } else {
            break;
        }
        answer = client
            .report_or_late(report(weighed, watchable, no_body), deadline)
            .map(|v| v.ok_or(Late::First));
    }
    let mut link = lock();
    link.plain_reports = plain;
    link.no_watch = no_watch;
    link.no_body = no_body;
    match answer {
        Ok(Ok(view)) => {
            link.checkin(client);
            let s = &mut link.status;
            if pending.is_some() {
                s.late_views += 1;
            }
            s.reports += 1;
            s.others_milli = view.others_milli.clone();
            s.unmanaged = view.unmanaged.clone();
            s.unmanaged_milli = view.unmanaged_milli.clone();
            s.registered = view.registered.clone();
            s.set = view.set;
            s.alone = view.registered.len() <= 1;
            link.watched = view.watch;
            link.lone_wait = if link.status.alone {
                link.lone_passes - 1
            } else {
                0
            };
            AgentPass { view: Some(view) }
        }
        Ok(Err(Late::First)) => {
            // Not yet: the next pass reads it (module doc, "Bounds").
            link.park(client, weighed);
            AgentPass::default()
        }
        Ok(Err(Late::Again)) => {
            let e = AgentError::Io {
                path: link.status.socket.clone().unwrap_or_default(),
                reason: format!("no view from the agent within two passes' budget of {budget:?}"),
            };
            link.fail(runtime, &e);
            AgentPass::default()
        }
        Err(e) => {
            link.fail(runtime, &e);
            AgentPass::default()
        }
    }
}

/// Step 5 of the module doc: after a pass that moved threads, reports
/// `ours` on the open connection (no new connection is tried: a runtime
/// without an agent has no one to tell). Its reply is not waited for: the
/// next exchange reads it first, and a refusal fails that exchange. A
/// failure to send drops the connection and backs off, as in [`exchange`];
/// at most the link's budget on the socket, no lock held there.
pub(crate) fn update(link: &Mutex<Link>, runtime: u64, ours: impl FnOnce() -> Option<Ours>) {
    let lock = || link.lock().unwrap_or_else(PoisonError::into_inner);
    {
        let link = lock();
        if !link.is_connected() || link.status.alone {
            // No connection to tell, or nobody to tell (`LONE_PASSES`):
            // our load is not gathered.
            return;
        }
    }
    let Some(Ours { load, allowed, .. }) = ours() else {
        return;
    };
    let Checkout::Use(mut client) = lock().checkout(false) else {
        return;
    };
    if lock().pending.is_some() {
        // A view is still to be read on this connection: an update's
        // reply would come after it; the next report carries the load.
        let mut link = lock();
        link.busy = false;
        link.client = Some(client);
        return;
    }
    let (inode, budget) = {
        let link = lock();
        (link.inode, link.budget)
    };
    let report = report_of(load, &allowed, inode);
    // Not waited for: the next exchange reads its reply before the view.
    let result = client.update_unanswered(report, Instant::now() + budget);
    let mut link = lock();
    match result {
        Ok(()) => {
            link.checkin(client);
            link.status.updates += 1;
        }
        Err(e) => link.fail(runtime, &e),
    }
}

impl Link {
    /// Step 4 of the module doc: the threads whose allowed set must change
    /// for the sharing set's home in `view` (`Event::Allowed` for each,
    /// returned in tid order for the caller to send under its lock), given
    /// the registered threads (`tids`, ascending) and each one's allowed set
    /// in the engine now (`allowed_of`). `cpus` are the CPUs the runtime places on.
    /// Without a view (no agent, failed exchange) nothing changes: a home is
    /// only given up when the agent says so or the runtime stops reaching
    /// it for good.
    pub(crate) fn home_changes(
        &mut self,
        view: Option<&View>,
        cpus: &CpuSet,
        tids: &[u64],
        allowed_of: impl Fn(u64) -> Option<CpuSet>,
    ) -> Vec<(u64, CpuSet)> {
        let Some(view) = view else {
            return Vec::new();
        };
        let home = view
            .home
            .as_ref()
            .map(|h| h.intersection(cpus))
            .filter(|h| !h.is_empty());
        self.narrowed
            .retain(|tid, _| tids.binary_search(tid).is_ok());
        let mut events = Vec::new();
        match &home {
            Some(h) => {
                for &tid in tids {
                    let Some(now) = allowed_of(tid) else {
                        continue;
                    };
                    let (own, given) = self
                        .narrowed
                        .entry(tid)
                        .or_insert_with(|| (now.clone(), now.clone()));
                    if now != *given {
                        // Someone else set the thread's mask since: that
                        // is its own set now.
                        *own = now.clone();
                    }
                    let mut want = own.intersection(h);
                    if want.is_empty() {
                        want = own.clone();
                    }
                    *given = want.clone();
                    if now != want {
                        events.push((tid, want));
                    }
                }
            }
            None => {
                for (tid, (own, given)) in self.narrowed.drain() {
                    if allowed_of(tid).as_ref() == Some(&given) && given != own {
                        events.push((tid, own));
                    }
                }
                events.sort_unstable_by_key(|(tid, _)| *tid);
            }
        }
        self.status.home = home;
        events
    }

    /// `n` `Event::Allowed` of [`Link::home_changes`] reached the engine.
    pub(crate) fn count_allowed_events(&mut self, n: u64) {
        self.status.allowed_events += n;
    }

    /// Whether a connection is open and idle (not checked out by an
    /// exchange).
    pub(crate) fn is_connected(&self) -> bool {
        self.client.is_some()
    }

    /// What the runtime last heard from the agent.
    pub(crate) fn status(&self) -> &LinkStatus {
        &self.status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_from_one_pass_and_is_capped() {
        let waits: Vec<u32> = (1..=9).map(backoff_passes).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 64, 64]);
        assert_eq!(backoff_passes(u32::MAX), MAX_BACKOFF_PASSES);
    }

    /// A link to a socket file that exists (this directory stands in: only
    /// `exists()` is asked before a connect is handed out).
    fn link_to_existing() -> Link {
        Link::with(
            &AgentMode::Path(std::env::temp_dir()),
            Trust::OwnUid,
            LINK_TIMEOUT,
        )
    }

    fn wants_connect(link: &mut Link) -> bool {
        match link.checkout(true) {
            Checkout::Connect(_) => true,
            Checkout::Skip => false,
            Checkout::Use(_) => panic!("no client was given back"),
        }
    }

    #[test]
    fn after_failures_the_link_waits_ever_longer_and_warns_once_of_a_refusal() {
        let mut link = link_to_existing();
        let refusal = AgentError::UnsafeDir {
            path: "/tmp/x".into(),
            reason: "owned by uid 65534, not 0".into(),
        };
        let mut gaps = Vec::new();
        for _ in 0..8 {
            assert!(wants_connect(&mut link));
            // A second pass at the same time goes without the agent.
            assert!(matches!(link.checkout(true), Checkout::Skip));
            link.fail(1, &refusal);
            let mut skipped = 0;
            while !wants_connect(&mut link) {
                skipped += 1;
            }
            gaps.push(skipped);
            link.busy = false;
        }
        assert_eq!(gaps, [1, 2, 4, 8, 16, 32, 64, 64]);
        assert!(link.warned);
        let refused = link.status.refused.clone().unwrap();
        assert!(refused.contains("65534"), "{refused}");
        assert_eq!(link.status.failures, 8);
    }

    #[test]
    fn nobody_listening_is_retried_at_the_plain_interval() {
        let mut link = link_to_existing();
        for _ in 0..3 {
            assert!(wants_connect(&mut link));
            link.fail(1, &AgentError::NotRunning { path: "/x".into() });
            let mut skipped = 0;
            while !wants_connect(&mut link) {
                skipped += 1;
            }
            assert_eq!(skipped, RETRY_PASSES);
            link.busy = false;
        }
        assert_eq!(link.status.refused, None);
    }

    #[test]
    fn modes_parse_and_print() {
        assert_eq!("auto".parse::<AgentMode>(), Ok(AgentMode::Auto));
        assert_eq!("off".parse::<AgentMode>(), Ok(AgentMode::Off));
        let p: AgentMode = "/run/x.sock".parse().unwrap();
        assert_eq!(p, AgentMode::Path("/run/x.sock".into()));
        assert_eq!(p.to_string(), "/run/x.sock");
        assert!("relative.sock".parse::<AgentMode>().is_err());
        assert!("".parse::<AgentMode>().is_err());
    }

    #[test]
    fn the_others_are_added_and_registered_pids_skipped() {
        let pass = AgentPass {
            view: Some(View {
                watch: false,
                others_milli: vec![(CpuId(1), 2000)],
                unmanaged: Some(vec![(CpuId(0), 4)]),
                unmanaged_milli: None,
                registered: vec![5, 9],
                home: None,
                set: None,
            }),
        };
        assert!(pass.skips(9) && !pass.skips(7));
        assert_eq!(
            pass.unmanaged(),
            Some(Unmanaged {
                milli: vec![(CpuId(0), 4000)],
                counted: vec![(CpuId(0), 4)]
            })
        );
        assert_eq!(
            pass.add_others(vec![(CpuId(0), 1000), (CpuId(1), 500)]),
            vec![(CpuId(0), 1000), (CpuId(1), 2500)]
        );
        let none = AgentPass::default();
        assert!(!none.skips(9));
        assert_eq!(none.unmanaged(), None);
        assert_eq!(
            none.add_others(vec![(CpuId(0), 1000)]),
            vec![(CpuId(0), 1000)]
        );
    }

    #[test]
    fn the_agents_weighed_load_is_preferred_to_its_thread_count() {
        let view = |milli: Option<Vec<(CpuId, u64)>>| AgentPass {
            view: Some(View {
                watch: false,
                others_milli: vec![],
                unmanaged: Some(vec![(CpuId(0), 3), (CpuId(1), 3)]),
                unmanaged_milli: milli,
                registered: vec![],
                home: None,
                set: None,
            }),
        };
        let weighed = view(Some(vec![(CpuId(0), 500), (CpuId(1), 500)]));
        assert_eq!(
            weighed.unmanaged(),
            Some(Unmanaged {
                milli: vec![(CpuId(0), 500), (CpuId(1), 500)],
                counted: vec![(CpuId(0), 3), (CpuId(1), 3)]
            })
        );
        // An agent that does not weigh: 1000 per thread.
        assert_eq!(
            view(None).unmanaged().unwrap().milli,
            vec![(CpuId(0), 3000), (CpuId(1), 3000)]
        );
    }
}
