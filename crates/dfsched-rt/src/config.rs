//! The runtime's configuration: [`RuntimeConfig`] by API, or the `DFSCHED_*`
//! environment variables. This is the one place they are documented (the C
//! header repeats the table).
//!
//! | variable | meaning | default | values |
//! |---|---|---|---|
//! | `DFSCHED_DISABLE` | every dfsched call becomes a successful no-op | `0` | `0`/`1`/`false`/`true`/`no`/`yes`/`off`/`on` |
//! | `DFSCHED_POLICY` | what becomes of threads that give no DF; `smt-pair` = every registered thread pinned by a profile of its cache activity, complementary threads on the SMT siblings of one core (Kihm et al., see [`crate::smt_pair`]; needs `DFSCHED_SMT_PROFILE` and SMT siblings); `none` = as `DFSCHED_DISABLE=1` | `data-affinity` | `data-affinity`/`co-thread`/`smt-pair`/`none` |
//! | `DFSCHED_SMT_PROFILE` | the profile `dfsched profile` writes, for `DFSCHED_POLICY=smt-pair` (and only for it); read and checked when the runtime starts | — | a non-empty path |
//! | `DFSCHED_PRELOAD` | `libdfsched.so` loaded by `LD_PRELOAD` attaches every thread from its creation (set by `dfsched run`) | `0` | as `DFSCHED_DISABLE` |
//! | `DFSCHED_BALANCE_INTERVAL_MS` | milliseconds between balancer passes; `0` = no balancer thread | `100` | `0`..=`3600000` |
//! | `DFSCHED_IMBALANCE_PCT` | a CPU is imbalanced when its load is this many percent above the least-loaded CPU's | `25` | `1`..=`1000` |
//! | `DFSCHED_SPLIT_AFTER_PASSES` | imbalanced passes with no possible move before a group is split; `0` = never split | `10` | `0`.. |
//! | `DFSCHED_HEAVY_LOAD_MILLI` | runnable threads per CPU, in thousandths, from which a group's home is one CPU | `2000` | `1000`.. |
//! | `DFSCHED_MAX_MOVES_PER_PASS` | moves (group moves, thread moves, splits) per balancer pass | `16` | `1`.. |
//! | `DFSCHED_MOVE_UNMANAGED` | the balancer may pin a thread that is in no group (no DF; under `data-affinity`) to one CPU to even out the load; off, such threads are left to the kernel, which balances them itself (see `dfsched_core::Config::move_unmanaged`) | `0` | as `DFSCHED_DISABLE` |
//! | `DFSCHED_EXTERNAL_LOAD` | before each pass, estimate other processes' load per CPU (from the agent's shared sample, else from our own): busy time per CPU and the machine's runnable count from `/proc/stat`, less our own (see [`crate::signals`]), weighed by CFS group through a rare, budgeted per-thread refresh: a thread of our own CFS group (our autogroup, i.e. our session, or our cpu cgroup) counts as one thread (by its nice), another group counts as one thread in all, since CFS shares a CPU between groups first (see [`crate::weigh`]) | `1` | as `DFSCHED_DISABLE` |
//! | `DFSCHED_EXTERNAL_WINDOW` | the weighed load of processes not under dfsched counts per CPU as its minimum over this many samples (one per pass), so that a momentary burst is ignored; `1` = the latest sample as it is (see [`crate::external`]) | `3` | `1`..=`100` |
//! | `DFSCHED_IDLE_PASSES` | a registered thread that has used no CPU over this many balancer passes (and at least 200 ms) counts as blocked, not as load, until it uses CPU again (see [`crate::idle`]); `0` = every registered thread counts as runnable until it exits | `2` | `0`..=`100` |
//! | `DFSCHED_AGENT` | the `dfsched agent` to share the load view with and get sharing-set homes from (see [`crate::agent`]); `auto` uses the default socket when an agent listens there, else nothing | `auto` | `auto`/`off`/an absolute socket path |
//! | `DFSCHED_AGENT_TIMEOUT_MS` | the budget of one exchange with the agent in a balancer pass, connect included (see [`crate::agent::LINK_TIMEOUT`] for the default's reasons); a view later than this is read at the next pass, one later still is a failure and the link backs off | `50` | `1..=10000` |
//! | `DFSCHED_AGENT_LONE_PASSES` | while the agent's view names this process as its only registered one, exchange with the agent once every this many passes and sample the outside load itself between (see [`crate::agent::LONE_PASSES`]); `1` = every pass | `10` | `1..=1000` |
//! | `DFSCHED_AGENT_TRUST_ROOT` | also talk to an agent run by root (an administrator's, started with `--serve-all-users`) in a root-owned directory no one else may write; without it only an agent of the program's own uid, in a directory of its own with mode 0700, is used | `0` | `0`/`1` |
//! | `DFSCHED_SCX` | the sched_ext body (see [`crate::scx`]): give the threads the `SCHED_EXT` policy and send placements to dfsched's BPF scheduler (`dfsched-scx run`, root's) instead of narrowing affinity masks; `auto` does so when `sys/kernel/sched_ext` (under `DFSCHED_SYSFS_ROOT`) shows dfsched's scheduler enabled, and uses its default socket | `auto` | `auto`/`off`/an absolute socket path |
//! | `DFSCHED_RULES` | rules that pick the process's policy and each thread's DF by command name, executable, cgroup, user and thread name, first match wins (see [`crate::rules`]); written by `dfsched run --rules FILE` from a TOML file | none | the rules as JSON (`{"rules":[…]}`) |
//! | `DFSCHED_SYSFS_ROOT` | directory holding the `sys/devices/system/…` tree to read the topology from | `/` | a non-empty path |
//! | `DFSCHED_LOG` | the runtime's own events (`tracing`) on stderr, one line each, at this level and above (see `log.rs`); for programs without a subscriber of their own | `off` | `off`/`error`/`warn`/`info`/`debug`/`trace` |
//! | `DFSCHED_STATS` | at the process's exit, the process-wide runtime's counters (what `dfsched_stats_json()` returns) are written to this file; `%p` in it becomes the pid, so that each process of a program writes its own | — | a non-empty path |
//! | `DFSCHED_RECORD` | record what the runtime sees into this file (see [`crate::record`] and `docs/record-format.md`); if the file exists (another process of the program writes it), into `FILE.PID`; a regular file of our uid, mode 0600, never through a symlink | — (off) | a non-empty path |
//! | `DFSCHED_RECORD_BUFFER` | events the recording's buffer holds between two writes (one per balancer pass); a full buffer drops events and counts them, it never waits | `32768` | `64`..=`16777216` |
//! | `DFSCHED_ENGINE_LOG` | log every event the engine handles and the decisions it gave into this file, JSON lines, for `dfsched engine-replay FILE` (see [`crate::engine_log`]); if the file exists, into `FILE.PID`; a regular file of our uid, mode 0600, never through a symlink | — (off) | a non-empty path |
//! | `DFSCHED_ENGINE_LOG_MAX_BYTES` | the engine log's size limit: the step that would pass it is not written, a `truncated` line ends the file and later steps are only counted (`engine_log.steps_not_logged` in the stats) | `67108864` (64 MiB) | `65536`..=`1099511627776` |
//! | `DFSCHED_LIB` | where `dfsched run` finds `libdfsched.so`; the runtime ignores it | — | a path |
//!
//! Rules:
//! - Every other variable whose name starts with `DFSCHED_` is refused as
//!   unknown, so that a typo (`DFSCHED_DISABLED=1`) is not silently ignored.
//!   The runtime reports through `tracing` events (written to stderr with
//!   `DFSCHED_LOG`, else to whatever subscriber the host installed) and
//!   through its counters ([`crate::Runtime::stats`], `dfsched_stats_json`,
//!   `DFSCHED_STATS`).
//! - A bad value is an [`Error::Env`] naming the variable and the value, and
//!   nothing of the environment's configuration is applied: the runtime
//!   refuses to start rather than run half-configured (the C calls then
//!   return `DFSCHED_E_CONFIG`).
//! - Values are checked even when `DFSCHED_DISABLE` is set, so a bad setup
//!   is seen before it is switched back on.
//!
//! `DFSCHED_POLICY=none` and `DFSCHED_DISABLE=1` both switch dfsched off;
//! `none` exists so that `dfsched run --policy none` can run a program
//! exactly as without dfsched while keeping one spelling for all three
//! choices. Either one switches it off whatever the other says.
//!
//! Why a 100 ms balance interval: Linux 2.6, whose balancer the paper
//! extends, rebalanced busy CPUs every ~100–200 ms. A shorter interval costs
//! a `/proc/stat` read and a lock round per pass for little gain (hints already
//! place threads at once); a longer one lets a bad initial placement live
//! for seconds.

use crate::error::Error;
use dfsched_core::{Config, Policy};
use std::path::PathBuf;

/// The default balancer interval; see the module doc for why.
pub const DEFAULT_BALANCE_INTERVAL_MS: u64 = 100;
/// The longest balancer interval accepted: one hour.
pub const MAX_BALANCE_INTERVAL_MS: u64 = 3_600_000;
/// The default external-load window, in samples: ~300 ms at the default
/// interval, long against a shell command's or a compiler job's moment of
/// runnability, short enough that load that lasts is seen within a third
/// of a second (see [`crate::external`]).
pub const DEFAULT_EXTERNAL_WINDOW: u32 = 3;
/// The longest external-load window accepted, in samples.
pub const MAX_EXTERNAL_WINDOW: u32 = 100;
/// The default idle window, in balancer passes: with the default interval
/// and [`crate::idle::MIN_IDLE_NS`], a thread that used no CPU for ~200 ms.
pub const DEFAULT_IDLE_PASSES: u32 = 2;
/// The longest idle window accepted, in passes.
pub const MAX_IDLE_PASSES: u32 = 100;

/// Every variable the runtime reads, in the order of the module doc's table.
pub const ENV_VARS: &[&str] = &[
    "DFSCHED_DISABLE",
    "DFSCHED_POLICY",
    "DFSCHED_SMT_PROFILE",
    "DFSCHED_PRELOAD",
    "DFSCHED_BALANCE_INTERVAL_MS",
    "DFSCHED_IMBALANCE_PCT",
    "DFSCHED_SPLIT_AFTER_PASSES",
    "DFSCHED_HEAVY_LOAD_MILLI",
    "DFSCHED_MAX_MOVES_PER_PASS",
    "DFSCHED_MOVE_UNMANAGED",
    "DFSCHED_EXTERNAL_LOAD",
    "DFSCHED_EXTERNAL_WINDOW",
    "DFSCHED_IDLE_PASSES",
    "DFSCHED_AGENT",
    "DFSCHED_AGENT_TRUST_ROOT",
    "DFSCHED_AGENT_TIMEOUT_MS",
    "DFSCHED_AGENT_LONE_PASSES",
    "DFSCHED_SCX",
    "DFSCHED_RULES",
    "DFSCHED_SYSFS_ROOT",
    "DFSCHED_LOG",
    "DFSCHED_STATS",
    "DFSCHED_LIB",
    "DFSCHED_RECORD",
    "DFSCHED_RECORD_BUFFER",
    "DFSCHED_ENGINE_LOG",
    "DFSCHED_ENGINE_LOG_MAX_BYTES",
];

/// The longest [`RuntimeConfig::agent_timeout_ms`]: 10 s, a bound on what
/// a hung agent may cost one pass whatever is configured.
pub const MAX_AGENT_TIMEOUT_MS: u64 = 10_000;

/// The most passes [`RuntimeConfig::agent_lone_passes`] may be.
pub const MAX_AGENT_LONE_PASSES: u32 = 1000;

/// Runtime configuration. Every field is also settable from a `DFSCHED_*`
/// variable (see the module doc).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// The engine's tunables (imbalance threshold, split persistence, heavy
    /// load, moves per pass); defaults as in [`dfsched_core::Config`]. Its
    /// `policy` field is set from [`RuntimeConfig::policy`] when the runtime
    /// starts; leave it at its default (a different value that disagrees
    /// with `policy` is refused by [`RuntimeConfig::validate`]).
    pub engine: Config,
    /// What becomes of threads that give no DF: under
    /// [`Policy::DataAffinity`] (the default) they are unmanaged; under
    /// [`Policy::CoThread`] the threads of the process form one co-thread
    /// group. `DFSCHED_POLICY`.
    pub policy: Policy,
    /// The `smt-pair` policy (`DFSCHED_POLICY=smt-pair`): the balancer
    /// thread's pass pins every registered thread to one CPU by the profile
    /// [`RuntimeConfig::smt_profile`], complementary threads on one core's
    /// siblings (`runtime/smt.rs`), instead of the engine's balance; the
    /// engine runs under [`Policy::DataAffinity`] (`policy` must be it).
    /// Default false.
    pub smt_pair: bool,
    /// The profile of the `smt-pair` policy (`DFSCHED_SMT_PROFILE`): set
    /// exactly when `smt_pair` is. Read and checked by
    /// [`crate::Runtime::start`], which refuses to start on a missing or
    /// garbled file or a topology without SMT siblings. Default `None`.
    pub smt_profile: Option<PathBuf>,
    /// Set by `DFSCHED_PRELOAD=1` (which `dfsched run` sets): when
    /// `libdfsched.so` is loaded by `LD_PRELOAD`, its constructor starts the
    /// global runtime and every thread is attached from its creation (see
    /// `preload.rs`). Read by nothing else. Default false.
    pub preload: bool,
    /// Milliseconds between balancer passes. Default 100 (see the module
    /// doc for why). 0 starts no balancer thread: passes then run only
    /// through [`crate::Runtime::balance_now`].
    pub balance_interval_ms: u64,
    /// Whether each balancer pass first estimates other processes' load per
    /// CPU (`/proc/stat` and a rare refresh; see [`crate::signals`]) and
    /// tells the engine. Default true.
    pub external_load: bool,
    /// The load of processes not under dfsched enters the engine as its
    /// per-CPU minimum over this many samples (one per pass); 1 takes each
    /// sample as it is. Other dfsched processes' load (from the agent) is
    /// never damped. Default [`DEFAULT_EXTERNAL_WINDOW`];
    /// `1..=`[`MAX_EXTERNAL_WINDOW`]. `DFSCHED_EXTERNAL_WINDOW`.
    pub external_window: u32,
    /// A registered thread that has used no CPU over this many balancer
    /// passes, and over at least [`crate::idle::MIN_IDLE_NS`], and is not
    /// running or queued then, is blocked in the engine (`Event::Block`:
    /// no load) until it uses CPU or hints again (`Event::Wake`). 0 turns
    /// this off: every registered thread counts as runnable until it
    /// exits. Default [`DEFAULT_IDLE_PASSES`];
    /// `0..=`[`MAX_IDLE_PASSES`]. `DFSCHED_IDLE_PASSES`.
    pub idle_passes: u32,
    /// Whether and where to reach `dfsched agent` (`DFSCHED_AGENT`).
    /// Default [`crate::agent::AgentMode::Auto`]. With `external_load` off,
    /// the agent's load view is not used either, but sharing-set homes are.
    pub agent: crate::agent::AgentMode,
    /// Whose agent the runtime talks to (`DFSCHED_AGENT_TRUST_ROOT=1`:
    /// root's too). Default [`crate::agent::Trust::OwnUid`]: an agent of
    /// this process's uid in a directory private to it; any other socket
    /// is refused, with one warning, and the runtime works alone.
    pub agent_trust: crate::agent::Trust,
    /// The budget of one exchange with the agent in a balancer pass, in
    /// milliseconds (`DFSCHED_AGENT_TIMEOUT_MS`). Default
    /// [`crate::agent::LINK_TIMEOUT`] (50); `1..=`[`MAX_AGENT_TIMEOUT_MS`].
    pub agent_timeout_ms: u64,
    /// While the agent's view names this process alone, exchange once every
    /// this many passes (`DFSCHED_AGENT_LONE_PASSES`). Default
    /// [`crate::agent::LONE_PASSES`] (10); `1..=`[`MAX_AGENT_LONE_PASSES`],
    /// 1 = every pass.
    pub agent_lone_passes: u32,
    /// Rules for this process's threads (`DFSCHED_RULES`; see
    /// [`crate::rules`]): a thread's DF or "leave alone" from its name.
    /// The process's own choice from them is applied by
    /// [`RuntimeConfig::with_process_rules`]. Default none.
    pub rules: Option<crate::rules::Rules>,
    /// Whether placements go to dfsched's sched_ext scheduler instead of
    /// affinity masks (`DFSCHED_SCX`). Default [`crate::scx::ScxMode::Auto`].
    pub scx: crate::scx::ScxMode,
    /// Whether the runtime takes the policy dfsched's sched_ext scheduler
    /// offers (`dfsched scx --policy`, the `policy` of its state) when it
    /// uses that scheduler, instead of [`RuntimeConfig::policy`]. Default
    /// true; false once the policy was chosen: by `DFSCHED_POLICY` (which
    /// `dfsched run` always sets) or by a process rule. A program that sets
    /// `policy` through the API and means to keep it under the scheduler
    /// sets this false.
    pub scx_policy: bool,
    /// The directory that holds `sys/devices/system/…`. Default `/`.
    pub sysfs_root: PathBuf,
    /// false makes every call a successful no-op (`DFSCHED_DISABLE=1`).
    /// Default true.
    pub enabled: bool,
    /// Write the runtime's events at this level and above to stderr
    /// (`DFSCHED_LOG`; `log.rs`). Default `None`: nothing is written.
    pub log: Option<tracing::Level>,
    /// Where the process-wide runtime writes its counters at the process's
    /// exit (`DFSCHED_STATS`; `%p` = the pid). Default `None`.
    pub stats_path: Option<PathBuf>,
    /// Where to record what the runtime sees (`DFSCHED_RECORD`); `None`
    /// (the default) records nothing. See [`crate::record`].
    pub record: Option<PathBuf>,
    /// Events the recording buffer holds between writes
    /// (`DFSCHED_RECORD_BUFFER`). Default
    /// [`crate::record::DEFAULT_RECORD_BUFFER`].
    pub record_buffer_events: usize,
    /// Where to log the engine's events and decisions
    /// (`DFSCHED_ENGINE_LOG`); `None` (the default) logs nothing. See
    /// [`crate::engine_log`].
    pub engine_log: Option<PathBuf>,
    /// The engine log's size limit, bytes
    /// (`DFSCHED_ENGINE_LOG_MAX_BYTES`). Default
    /// [`crate::engine_log::DEFAULT_MAX_BYTES`].
    pub engine_log_max_bytes: u64,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            // A move in user space is a pin: leave threads in no group to
            // the kernel (see Config::move_unmanaged).
            engine: Config {
                move_unmanaged: false,
                ..Config::default()
            },
            policy: Policy::default(),
            smt_pair: false,
            smt_profile: None,
            preload: false,
            balance_interval_ms: DEFAULT_BALANCE_INTERVAL_MS,
            external_load: true,
            external_window: DEFAULT_EXTERNAL_WINDOW,
            idle_passes: DEFAULT_IDLE_PASSES,
            agent: crate::agent::AgentMode::Auto,
            scx: crate::scx::ScxMode::Auto,
            scx_policy: true,
            agent_trust: crate::agent::Trust::OwnUid,
            agent_timeout_ms: crate::agent::LINK_TIMEOUT.as_millis() as u64,
            agent_lone_passes: crate::agent::LONE_PASSES,
            rules: None,
            sysfs_root: PathBuf::from("/"),
            enabled: true,
            log: None,
            stats_path: None,
            record: None,
            record_buffer_events: crate::record::DEFAULT_RECORD_BUFFER,
            engine_log: None,
            engine_log_max_bytes: crate::engine_log::DEFAULT_MAX_BYTES,
        }
    }
}

impl RuntimeConfig {
    /// The defaults with the process environment's `DFSCHED_*` variables
    /// applied.
    pub fn from_env() -> Result<RuntimeConfig, Error> {
        let mut vars = Vec::new();
        for (name, value) in std::env::vars_os() {
            let Some(name) = name.to_str() else { continue };
            if !name.starts_with("DFSCHED_") {
                continue;
            }
            let value = value.into_string().map_err(|v| Error::Env {
                var: name.to_string(),
                value: v.to_string_lossy().into_owned(),
                reason: "not valid UTF-8".into(),
            })?;
            vars.push((name.to_string(), value));
        }
        Self::from_vars(vars)
    }

    /// [`RuntimeConfig::from_env`] with its rules' choice for this process
    /// applied ([`RuntimeConfig::with_process_rules`]): what the global
    /// runtime starts with.
    pub fn for_this_process() -> Result<RuntimeConfig, Error> {
        let cfg = Self::from_env()?;
        if cfg.rules.is_none() {
            return Ok(cfg);
        }
        Ok(
            match crate::rules::ProcessFacts::read("/proc".as_ref(), std::process::id()) {
                Some(facts) => cfg.with_process_rules(&facts),
                None => cfg,
            },
        )
    }

    /// The defaults with the given `(name, value)` variables applied, as
    /// [`RuntimeConfig::apply_vars`]. Variables not starting with `DFSCHED_`
    /// are ignored.
    pub fn from_vars<I, K, V>(vars: I) -> Result<RuntimeConfig, Error>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut cfg = RuntimeConfig::default();
        cfg.apply_vars(vars)?;
        Ok(cfg)
    }

    /// Applies `DFSCHED_*` variables to `self`. All or nothing: on error
    /// `self` is unchanged. Variables not starting with `DFSCHED_` are
    /// ignored; unknown `DFSCHED_*` names are refused.
    pub fn apply_vars<I, K, V>(&mut self, vars: I) -> Result<(), Error>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut next = self.clone();
        for (name, value) in vars {
            let (name, value) = (name.as_ref(), value.as_ref());
            if name.starts_with("DFSCHED_") {
                next.apply_one(name, value)?;
            }
        }
        next.validate().map_err(|reason| Error::Env {
            var: "DFSCHED_*".into(),
            value: String::new(),
            reason,
        })?;
        *self = next;
        Ok(())
    }

    fn apply_one(&mut self, var: &str, value: &str) -> Result<(), Error> {
        let bad = |reason: String| Error::Env {
            var: var.to_string(),
            value: value.to_string(),
            reason,
        };
        // Engine tunables are checked one by one against the engine's own
        // validation, so the error names this variable and not another.
        let engine_field = |set: &dyn Fn(&mut Config, u64) -> bool| -> Result<Config, Error> {
            let n = parse_u64(value).map_err(&bad)?;
            let mut probe = Config::default();
            if !set(&mut probe, n) {
                return Err(bad(format!("{n} is too large")));
            }
            probe.validate().map_err(|e| bad(e.to_string()))?;
            Ok(probe)
        };
        match var {
            "DFSCHED_DISABLE" => self.enabled = !parse_bool(value).map_err(&bad)?,
            "DFSCHED_EXTERNAL_LOAD" => self.external_load = parse_bool(value).map_err(&bad)?,
            "DFSCHED_MOVE_UNMANAGED" => {
                self.engine.move_unmanaged = parse_bool(value).map_err(&bad)?;
            }
            "DFSCHED_EXTERNAL_WINDOW" => {
                let n = parse_u64(value).map_err(&bad)?;
                if !(1..=u64::from(MAX_EXTERNAL_WINDOW)).contains(&n) {
                    return Err(bad(format!(
                        "a number of samples from 1 to {MAX_EXTERNAL_WINDOW}"
                    )));
                }
                self.external_window = n as u32;
            }
            "DFSCHED_IDLE_PASSES" => {
                let n = parse_u64(value).map_err(&bad)?;
                if n > u64::from(MAX_IDLE_PASSES) {
                    return Err(bad(format!(
                        "a number of passes from 0 (off) to {MAX_IDLE_PASSES}"
                    )));
                }
                self.idle_passes = n as u32;
            }
            "DFSCHED_AGENT" => self.agent = value.parse().map_err(&bad)?,
            "DFSCHED_SCX" => self.scx = crate::scx::ScxMode::parse(value).map_err(&bad)?,
            "DFSCHED_AGENT_TIMEOUT_MS" => {
                let ms = parse_u64(value).map_err(&bad)?;
                if !(1..=MAX_AGENT_TIMEOUT_MS).contains(&ms) {
                    return Err(bad(format!(
                        "milliseconds from 1 to {MAX_AGENT_TIMEOUT_MS}"
                    )));
                }
                self.agent_timeout_ms = ms;
            }
            "DFSCHED_AGENT_LONE_PASSES" => {
                let n = parse_u64(value).map_err(&bad)?;
                if !(1..=u64::from(MAX_AGENT_LONE_PASSES)).contains(&n) {
                    return Err(bad(format!(
                        "a number of passes from 1 (every pass) to {MAX_AGENT_LONE_PASSES}"
                    )));
                }
                self.agent_lone_passes = n as u32;
            }
            "DFSCHED_AGENT_TRUST_ROOT" => {
                self.agent_trust = if parse_bool(value).map_err(&bad)? {
                    crate::agent::Trust::OwnUidOrRoot
                } else {
                    crate::agent::Trust::OwnUid
                };
            }
            "DFSCHED_PRELOAD" => self.preload = parse_bool(value).map_err(&bad)?,
            "DFSCHED_POLICY" if value.trim() == SMT_PAIR => {
                // The engine places nothing of its own under smt-pair (the
                // pass pins by the profile); it runs as under data-affinity.
                self.smt_pair = true;
                self.policy = Policy::DataAffinity;
                self.engine.policy = Policy::DataAffinity;
                self.scx_policy = false;
            }
            "DFSCHED_POLICY" => match parse_policy(value).map_err(|_| {
                bad("not a policy (use data-affinity, co-thread, smt-pair or none)".into())
            })? {
                Some(policy) => {
                    self.smt_pair = false;
                    self.policy = policy;
                    self.engine.policy = policy;
                    self.scx_policy = false;
                }
                None => self.enabled = false,
            },
            "DFSCHED_SMT_PROFILE" => {
                if value.trim().is_empty() {
                    return Err(bad("must be a file path, not empty".into()));
                }
                self.smt_profile = Some(PathBuf::from(value));
            }
            "DFSCHED_BALANCE_INTERVAL_MS" => {
                let ms = parse_u64(value).map_err(&bad)?;
                if ms > MAX_BALANCE_INTERVAL_MS {
                    return Err(bad(format!(
                        "at most {MAX_BALANCE_INTERVAL_MS} ms (one hour)"
                    )));
                }
                self.balance_interval_ms = ms;
            }
            "DFSCHED_IMBALANCE_PCT" => {
                let probe =
                    engine_field(&|c, n| u32::try_from(n).map(|v| c.imbalance_pct = v).is_ok())?;
                self.engine.imbalance_pct = probe.imbalance_pct;
            }
            "DFSCHED_SPLIT_AFTER_PASSES" => {
                let probe = engine_field(&|c, n| {
                    u32::try_from(n).map(|v| c.split_after_passes = v).is_ok()
                })?;
                self.engine.split_after_passes = probe.split_after_passes;
            }
            "DFSCHED_HEAVY_LOAD_MILLI" => {
                let probe = engine_field(&|c, n| {
                    c.heavy_load_milli = n;
                    true
                })?;
                self.engine.heavy_load_milli = probe.heavy_load_milli;
            }
            "DFSCHED_MAX_MOVES_PER_PASS" => {
                let probe = engine_field(&|c, n| {
                    u32::try_from(n).map(|v| c.max_moves_per_pass = v).is_ok()
                })?;
                self.engine.max_moves_per_pass = probe.max_moves_per_pass;
            }
            // Read by `dfsched run`; accepted here so that a program run with
            // it in its environment still starts.
            "DFSCHED_LIB" => {}
            "DFSCHED_RULES" => {
                self.rules = Some(crate::rules::Rules::from_json(value).map_err(&bad)?);
            }
            "DFSCHED_LOG" => self.log = crate::log::parse_level(value).map_err(&bad)?,
            "DFSCHED_STATS" => {
                if value.trim().is_empty() {
                    return Err(bad("must be a file path, not empty".into()));
                }
                self.stats_path = Some(PathBuf::from(value));
            }
            "DFSCHED_RECORD" => {
                if value.trim().is_empty() {
                    return Err(bad("must be a file path, not empty".into()));
                }
                self.record = Some(PathBuf::from(value));
            }
            "DFSCHED_RECORD_BUFFER" => {
                let n = parse_u64(value).map_err(&bad)?;
                let max = crate::record::MAX_RECORD_BUFFER as u64;
                if !(64..=max).contains(&n) {
                    return Err(bad(format!("a number of events from 64 to {max}")));
                }
                self.record_buffer_events = n as usize;
            }
            "DFSCHED_ENGINE_LOG" => {
                if value.trim().is_empty() {
                    return Err(bad("must be a file path, not empty".into()));
                }
                self.engine_log = Some(PathBuf::from(value));
            }
            "DFSCHED_ENGINE_LOG_MAX_BYTES" => {
                use crate::engine_log::{MAX_MAX_BYTES, MIN_MAX_BYTES};
                let n = parse_u64(value).map_err(&bad)?;
                if !(MIN_MAX_BYTES..=MAX_MAX_BYTES).contains(&n) {
                    return Err(bad(format!(
                        "a number of bytes from {MIN_MAX_BYTES} to {MAX_MAX_BYTES}"
                    )));
                }
                self.engine_log_max_bytes = n;
            }
            "DFSCHED_SYSFS_ROOT" => {
                if value.trim().is_empty() {
                    return Err(bad("must be a directory path, not empty".into()));
                }
                self.sysfs_root = PathBuf::from(value);
            }
            _ => {
                return Err(bad(format!(
                    "unknown dfsched variable; known: {}",
                    ENV_VARS.join(", ")
                )))
            }
        }
        Ok(())
    }

    /// `self` with its rules' choice for process `facts` applied (see
    /// [`crate::rules`]): the first process rule's policy, or dfsched off.
    /// Without rules, or when no rule decides, `self` as it is.
    pub fn with_process_rules(mut self, facts: &crate::rules::ProcessFacts) -> RuntimeConfig {
        use crate::rules::ProcessChoice;
        let Some(rules) = &self.rules else {
            return self;
        };
        match rules.process_choice(facts) {
            ProcessChoice::Policy(policy) => {
                // A rule names an engine policy: it replaces smt-pair too.
                self.smt_pair = false;
                self.smt_profile = None;
                self.policy = policy;
                self.engine.policy = policy;
                self.scx_policy = false;
            }
            ProcessChoice::Off => self.enabled = false,
            ProcessChoice::Default => {}
        }
        self
    }

    /// Checks every field. [`crate::Runtime::start`] calls this and starts
    /// nothing on error.
    pub fn validate(&self) -> Result<(), String> {
        self.engine.validate().map_err(|e| e.to_string())?;
        if self.engine.policy != self.policy && self.engine.policy != Policy::default() {
            return Err(format!(
                "engine.policy is {} but policy is {}: set RuntimeConfig::policy only",
                self.engine.policy, self.policy
            ));
        }
        match (self.smt_pair, &self.smt_profile) {
            (true, None) => {
                return Err(
                    "DFSCHED_POLICY=smt-pair needs DFSCHED_SMT_PROFILE (smt_profile): \
                     the profile `dfsched profile` writes"
                        .into(),
                )
            }
            (false, Some(path)) => {
                return Err(format!(
                    "DFSCHED_SMT_PROFILE (smt_profile) is {} but the policy is not smt-pair: \
                     set DFSCHED_POLICY=smt-pair, or unset the profile",
                    path.display()
                ))
            }
            (true, Some(_)) if self.policy != Policy::DataAffinity => {
                return Err(format!(
                    "smt-pair runs its engine under data-affinity, not {}",
                    self.policy
                ))
            }
            _ => {}
        }
        if self.balance_interval_ms > MAX_BALANCE_INTERVAL_MS {
            return Err(format!(
                "balance_interval_ms must be at most {MAX_BALANCE_INTERVAL_MS}, not {}",
                self.balance_interval_ms
            ));
        }
        if self.sysfs_root.as_os_str().is_empty() {
            return Err("sysfs_root must not be empty".into());
        }
        if self.idle_passes > MAX_IDLE_PASSES {
            return Err(format!(
                "idle_passes must be from 0 (off) to {MAX_IDLE_PASSES}, not {}",
                self.idle_passes
            ));
        }
        if !(1..=MAX_EXTERNAL_WINDOW).contains(&self.external_window) {
            return Err(format!(
                "external_window must be from 1 to {MAX_EXTERNAL_WINDOW} samples, not {}",
                self.external_window
            ));
        }
        if !(1..=MAX_AGENT_LONE_PASSES).contains(&self.agent_lone_passes) {
            return Err(format!(
                "agent_lone_passes must be from 1 (every pass) to {MAX_AGENT_LONE_PASSES}, not {}",
                self.agent_lone_passes
            ));
        }
        {
            use crate::engine_log::{MAX_MAX_BYTES, MIN_MAX_BYTES};
            if !(MIN_MAX_BYTES..=MAX_MAX_BYTES).contains(&self.engine_log_max_bytes) {
                return Err(format!(
                    "engine_log_max_bytes must be from {MIN_MAX_BYTES} to {MAX_MAX_BYTES}, not {}",
                    self.engine_log_max_bytes
                ));
            }
        }
        Ok(())
    }
}

fn parse_u64(value: &str) -> Result<u64, String> {
    value
        .trim()
        .parse()
        .map_err(|_| "not a non-negative integer".to_string())
}

/// `DFSCHED_POLICY`'s name of the `smt-pair` policy
/// ([`RuntimeConfig::smt_pair`]): a policy of the runtime, not of the
/// engine, so [`parse_policy`] does not know it.
pub const SMT_PAIR: &str = "smt-pair";

/// The name of an engine policy as `DFSCHED_POLICY` and `dfsched run
/// --policy` spell it: `Some(policy)`, or `None` for `none` (dfsched off).
/// `smt-pair` is not one (see [`SMT_PAIR`]).
pub fn parse_policy(value: &str) -> Result<Option<Policy>, String> {
    match value.trim() {
        "none" => Ok(None),
        name => name
            .parse::<Policy>()
            .map(Some)
            .map_err(|_| "not a policy (use data-affinity, co-thread or none)".to_string()),
    }
}

impl RuntimeConfig {
    /// The engine configuration a runtime starts with: `engine` with its
    /// policy taken from `policy`.
    pub(crate) fn engine_config(&self) -> Config {
        Config {
            policy: self.policy,
            ..self.engine.clone()
        }
    }
}

fn parse_bool(value: &str) -> Result<bool, String> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err("not a boolean (use 0/1, false/true, no/yes, off/on)".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err_of(vars: &[(&str, &str)]) -> Error {
        RuntimeConfig::from_vars(vars.iter().copied()).unwrap_err()
    }

    #[test]
    fn defaults_hold_without_variables() {
        let cfg = RuntimeConfig::from_vars(Vec::<(String, String)>::new()).unwrap();
        assert_eq!(cfg, RuntimeConfig::default());
        assert_eq!(cfg.balance_interval_ms, 100);
        assert_eq!(cfg.external_window, 3);
        assert_eq!(cfg.idle_passes, 2, "idle threads are seen by default");
        assert!(cfg.enabled && cfg.external_load);
        assert!(
            !cfg.engine.move_unmanaged,
            "threads in no group are the kernel's"
        );
        let on = RuntimeConfig::from_vars([("DFSCHED_MOVE_UNMANAGED", "1")]).unwrap();
        assert!(on.engine.move_unmanaged);
        assert!(RuntimeConfig::from_vars([("DFSCHED_MOVE_UNMANAGED", "maybe")]).is_err());
        assert_eq!(cfg.sysfs_root, PathBuf::from("/"));
        assert!(cfg.validate().is_ok());
    }

    #[test]
    fn every_variable_applies() {
        let cfg = RuntimeConfig::from_vars([
            ("DFSCHED_DISABLE", "yes"),
            ("DFSCHED_BALANCE_INTERVAL_MS", "250"),
            ("DFSCHED_IMBALANCE_PCT", "40"),
            ("DFSCHED_SPLIT_AFTER_PASSES", "0"),
            ("DFSCHED_HEAVY_LOAD_MILLI", "1500"),
            ("DFSCHED_MAX_MOVES_PER_PASS", "4"),
            ("DFSCHED_EXTERNAL_LOAD", "off"),
            ("DFSCHED_EXTERNAL_WINDOW", "5"),
            ("DFSCHED_IDLE_PASSES", "7"),
            ("DFSCHED_AGENT_LONE_PASSES", "3"),
            ("DFSCHED_SYSFS_ROOT", "/tmp/fixture"),
            ("PATH", "ignored"),
        ])
        .unwrap();
        assert!(!cfg.enabled);
        assert_eq!(cfg.balance_interval_ms, 250);
        assert_eq!(cfg.engine.imbalance_pct, 40);
        assert_eq!(cfg.engine.split_after_passes, 0);
        assert_eq!(cfg.engine.heavy_load_milli, 1500);
        assert_eq!(cfg.engine.max_moves_per_pass, 4);
        assert!(!cfg.external_load);
        assert_eq!(cfg.external_window, 5);
        assert_eq!(cfg.idle_passes, 7);
        assert_eq!(cfg.agent_lone_passes, 3);
        assert_eq!(cfg.sysfs_root, PathBuf::from("/tmp/fixture"));
        assert!(
            RuntimeConfig::from_vars([("DFSCHED_DISABLE", "0")])
                .unwrap()
                .enabled
        );
        let off = RuntimeConfig::from_vars([("DFSCHED_IDLE_PASSES", "0")]).unwrap();
        assert_eq!(off.idle_passes, 0, "0 turns idle detection off");
    }

    #[test]
    fn bad_values_name_the_variable_and_the_value() {
        let cases: &[(&str, &str)] = &[
            ("DFSCHED_BALANCE_INTERVAL_MS", "fast"),
            ("DFSCHED_BALANCE_INTERVAL_MS", "-5"),
            ("DFSCHED_BALANCE_INTERVAL_MS", "3600001"),
            ("DFSCHED_IMBALANCE_PCT", "0"),
            ("DFSCHED_IMBALANCE_PCT", "5000000000"),
            ("DFSCHED_HEAVY_LOAD_MILLI", "999"),
            ("DFSCHED_MAX_MOVES_PER_PASS", "0"),
            ("DFSCHED_SPLIT_AFTER_PASSES", "x"),
            ("DFSCHED_DISABLE", "maybe"),
            ("DFSCHED_EXTERNAL_LOAD", "2"),
            ("DFSCHED_EXTERNAL_WINDOW", "0"),
            ("DFSCHED_EXTERNAL_WINDOW", "101"),
            ("DFSCHED_EXTERNAL_WINDOW", "three"),
            ("DFSCHED_IDLE_PASSES", "101"),
            ("DFSCHED_IDLE_PASSES", "-1"),
            ("DFSCHED_IDLE_PASSES", "two"),
            ("DFSCHED_IDLE_PASSES", "4294967298"),
            ("DFSCHED_AGENT_LONE_PASSES", "0"),
            ("DFSCHED_AGENT_LONE_PASSES", "1001"),
            ("DFSCHED_SYSFS_ROOT", " "),
            ("DFSCHED_DISABLED", "1"),
            ("DFSCHED_POLICY", "fast"),
            ("DFSCHED_PRELOAD", "2"),
        ];
        for &(var, value) in cases {
            let e = err_of(&[(var, value)]);
            let text = e.to_string();
            assert!(text.contains(var), "{text}");
            assert!(text.contains(&format!("{value:?}")), "{text}");
            assert_eq!(e.code(), crate::error::code::E_CONFIG);
        }
    }

    #[test]
    fn a_bad_variable_applies_nothing() {
        let mut cfg = RuntimeConfig {
            balance_interval_ms: 7,
            ..RuntimeConfig::default()
        };
        let before = cfg.clone();
        // Good variables before and after the bad one: none of them applies.
        let r = cfg.apply_vars([
            ("DFSCHED_IMBALANCE_PCT", "50"),
            ("DFSCHED_HEAVY_LOAD_MILLI", "12"),
            ("DFSCHED_EXTERNAL_LOAD", "0"),
        ]);
        assert!(r.is_err());
        assert_eq!(cfg, before);
        // A bad idle window after a good one: neither applies.
        let r = cfg.apply_vars([
            ("DFSCHED_IMBALANCE_PCT", "50"),
            ("DFSCHED_IDLE_PASSES", "1000"),
        ]);
        assert!(r.is_err());
        assert_eq!(cfg, before);
        cfg.apply_vars([("DFSCHED_IMBALANCE_PCT", "50")]).unwrap();
        assert_eq!(cfg.engine.imbalance_pct, 50);
        assert_eq!(
            cfg.balance_interval_ms, 7,
            "untouched fields keep their value"
        );
    }

    #[test]
    fn a_chosen_policy_is_not_replaced_by_the_scx_schedulers_offer() {
        assert!(
            RuntimeConfig::default().scx_policy,
            "unchosen: the offer applies"
        );
        let cfg = RuntimeConfig::from_vars([("DFSCHED_IMBALANCE_PCT", "50")]).unwrap();
        assert!(cfg.scx_policy, "another variable chooses no policy");
        let cfg = RuntimeConfig::from_vars([("DFSCHED_POLICY", "data-affinity")]).unwrap();
        assert!(
            !cfg.scx_policy,
            "DFSCHED_POLICY chose one, even the default"
        );
    }

    #[test]
    fn the_policy_variable_sets_the_policy_or_switches_dfsched_off() {
        let cfg = RuntimeConfig::from_vars([("DFSCHED_POLICY", "co-thread")]).unwrap();
        assert_eq!(cfg.policy, Policy::CoThread);
        assert_eq!(cfg.engine_config().policy, Policy::CoThread);
        assert!(cfg.enabled);
        let cfg = RuntimeConfig::from_vars([("DFSCHED_POLICY", "data-affinity")]).unwrap();
        assert_eq!(cfg.policy, Policy::DataAffinity);
        let cfg = RuntimeConfig::from_vars([("DFSCHED_POLICY", "none")]).unwrap();
        assert!(!cfg.enabled);
        // `none` wins over DFSCHED_DISABLE=0, whatever the order.
        let cfg = RuntimeConfig::from_vars([("DFSCHED_DISABLE", "0"), ("DFSCHED_POLICY", "none")])
            .unwrap();
        assert!(!cfg.enabled);
        let e = err_of(&[("DFSCHED_POLICY", "cothread")]);
        let text = e.to_string();
        assert!(text.contains("DFSCHED_POLICY") && text.contains("\"cothread\""));
        assert!(
            text.contains("co-thread") && text.contains("none"),
            "{text}"
        );
    }

    #[test]
    fn smt_pair_takes_a_profile_and_runs_its_engine_under_data_affinity() {
        let cfg = RuntimeConfig::from_vars([
            ("DFSCHED_SMT_PROFILE", "/tmp/p.json"),
            ("DFSCHED_POLICY", "smt-pair"),
        ])
        .unwrap();
        assert!(cfg.smt_pair && cfg.enabled);
        assert_eq!(cfg.smt_profile, Some(PathBuf::from("/tmp/p.json")));
        assert_eq!(cfg.engine_config().policy, Policy::DataAffinity);
        assert!(!cfg.scx_policy, "smt-pair chose the policy");
        // Another policy is not smt-pair.
        let cfg = RuntimeConfig::from_vars([("DFSCHED_POLICY", "co-thread")]).unwrap();
        assert!(!cfg.smt_pair && cfg.smt_profile.is_none());
    }

    #[test]
    fn smt_pair_without_a_profile_or_a_profile_without_smt_pair_applies_nothing() {
        let mut cfg = RuntimeConfig::default();
        let e = cfg
            .apply_vars([
                ("DFSCHED_BALANCE_INTERVAL_MS", "5"),
                ("DFSCHED_POLICY", "smt-pair"),
            ])
            .unwrap_err();
        assert!(e.to_string().contains("DFSCHED_SMT_PROFILE"), "{e}");
        assert_eq!(e.code(), crate::error::code::E_CONFIG);
        assert_eq!(cfg, RuntimeConfig::default());
        let e = cfg
            .apply_vars([("DFSCHED_SMT_PROFILE", "/tmp/p.json")])
            .unwrap_err();
        assert!(e.to_string().contains("not smt-pair"), "{e}");
        assert_eq!(cfg, RuntimeConfig::default());
        let e = err_of(&[("DFSCHED_SMT_PROFILE", " "), ("DFSCHED_POLICY", "smt-pair")]);
        assert!(e.to_string().contains("DFSCHED_SMT_PROFILE"), "{e}");
        // By the API: smt-pair under another engine policy is refused too.
        let cfg = RuntimeConfig {
            smt_pair: true,
            smt_profile: Some("/tmp/p.json".into()),
            policy: Policy::CoThread,
            ..RuntimeConfig::default()
        };
        assert!(cfg.validate().unwrap_err().contains("data-affinity"));
        let e = err_of(&[("DFSCHED_POLICY", "smt-pairs")]);
        assert!(e.to_string().contains("smt-pair or none"), "{e}");
    }

    #[test]
    fn a_bad_policy_applies_nothing_of_the_environment() {
        let mut cfg = RuntimeConfig::default();
        let r = cfg.apply_vars([
            ("DFSCHED_BALANCE_INTERVAL_MS", "5"),
            ("DFSCHED_POLICY", "co-threads"),
        ]);
        assert!(r.is_err());
        assert_eq!(cfg, RuntimeConfig::default());
    }

    #[test]
    fn the_engine_log_variables_are_a_path_and_a_bounded_size() {
        let cfg = RuntimeConfig::from_vars([
            ("DFSCHED_ENGINE_LOG", "/tmp/e.log"),
            ("DFSCHED_ENGINE_LOG_MAX_BYTES", "1048576"),
        ])
        .unwrap();
        assert_eq!(cfg.engine_log, Some(PathBuf::from("/tmp/e.log")));
        assert_eq!(cfg.engine_log_max_bytes, 1 << 20);
        assert_eq!(RuntimeConfig::default().engine_log, None);
        assert_eq!(
            RuntimeConfig::default().engine_log_max_bytes,
            crate::engine_log::DEFAULT_MAX_BYTES
        );
        for (var, value) in [
            ("DFSCHED_ENGINE_LOG", " "),
            ("DFSCHED_ENGINE_LOG_MAX_BYTES", "100"),
            ("DFSCHED_ENGINE_LOG_MAX_BYTES", "2000000000000"),
        ] {
            let e = err_of(&[(var, value)]).to_string();
            assert!(e.contains(var), "{e}");
        }
    }

    #[test]
    fn the_preload_variable_is_a_boolean() {
        assert!(
            RuntimeConfig::from_vars([("DFSCHED_PRELOAD", "1")])
                .unwrap()
                .preload
        );
        assert!(!RuntimeConfig::default().preload);
        assert!(RuntimeConfig::from_vars([("DFSCHED_PRELOAD", "sure")]).is_err());
    }

    #[test]
    fn an_engine_policy_disagreeing_with_the_policy_is_refused() {
        let mut cfg = RuntimeConfig::default();
        cfg.engine.policy = Policy::CoThread;
        let e = cfg.validate().unwrap_err();
        assert!(e.contains("RuntimeConfig::policy"), "{e}");
        cfg.policy = Policy::CoThread;
        assert!(cfg.validate().is_ok());
        // Setting only `policy` is the way; the engine gets it at start.
        let cfg = RuntimeConfig {
            policy: Policy::CoThread,
            ..RuntimeConfig::default()
        };
        assert!(cfg.validate().is_ok());
        assert_eq!(cfg.engine_config().policy, Policy::CoThread);
    }

    #[test]
    fn unknown_variables_list_the_known_ones() {
        let text = err_of(&[("DFSCHED_LOGGING", "debug")]).to_string();
        for var in ENV_VARS {
            assert!(text.contains(var), "{text}");
        }
    }

    #[test]
    fn log_and_stats_are_read_and_checked() {
        let cfg = RuntimeConfig::from_vars([
            ("DFSCHED_LOG", "debug"),
            ("DFSCHED_STATS", "/tmp/s-%p.json"),
        ])
        .unwrap();
        assert_eq!(cfg.log, Some(tracing::Level::DEBUG));
        assert_eq!(cfg.stats_path, Some(PathBuf::from("/tmp/s-%p.json")));
        assert_eq!(
            RuntimeConfig::from_vars([("DFSCHED_LOG", "off")])
                .unwrap()
                .log,
            None
        );
        assert!(err_of(&[("DFSCHED_LOG", "loud")])
            .to_string()
            .contains("DFSCHED_LOG"));
        assert!(err_of(&[("DFSCHED_STATS", " ")])
            .to_string()
            .contains("DFSCHED_STATS"));
    }

    #[test]
    fn validate_refuses_out_of_range_fields() {
        let mut cfg = RuntimeConfig::default();
        cfg.engine.imbalance_pct = 0;
        assert!(cfg.validate().is_err());
        let cfg = RuntimeConfig {
            balance_interval_ms: MAX_BALANCE_INTERVAL_MS + 1,
            ..RuntimeConfig::default()
        };
        assert!(cfg.validate().is_err());
        let cfg = RuntimeConfig {
            sysfs_root: PathBuf::new(),
            ..RuntimeConfig::default()
        };
        assert!(cfg.validate().is_err());
        let cfg = RuntimeConfig {
            idle_passes: MAX_IDLE_PASSES + 1,
            ..RuntimeConfig::default()
        };
        assert!(cfg.validate().unwrap_err().contains("idle_passes"));
        for external_window in [0, MAX_EXTERNAL_WINDOW + 1] {
            let cfg = RuntimeConfig {
                external_window,
                ..RuntimeConfig::default()
            };
            assert!(cfg.validate().is_err(), "{external_window}");
        }
        for agent_lone_passes in [0, MAX_AGENT_LONE_PASSES + 1] {
            let cfg = RuntimeConfig {
                agent_lone_passes,
                ..RuntimeConfig::default()
            };
            assert!(cfg.validate().unwrap_err().contains("agent_lone_passes"));
        }
    }
}
