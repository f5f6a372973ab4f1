//! `dfsched-scx`: loads dfsched's sched_ext scheduler, serves its control socket, shows its state, and
//! unloads it cleanly on SIGINT/SIGTERM, saying why it stopped (the kernel's exit record).
//!
//! ```text
//! dfsched-scx run [--all] [--policy data-affinity|co-thread] [--slice-us N] [--quota N]
//!                 [--socket PATH] [--stats-secs N] [--trace FILE [--trace-max-mb N] [--trace-ring-kib N]]
//! dfsched-scx trace FILE [--json] [--since-ns T] [--until-ns T] [--window-ms N]
//!                                               summarise a dispatch trace (src/trace.rs)
//! dfsched-scx state [--socket PATH]             one `state` request, printed as JSON
//! dfsched-scx client [--socket PATH] [--hold]   requests from stdin (one JSON line each), replies on
//!                                               stdout, over one connection (kept open with --hold
//!                                               until SIGINT/SIGTERM: groups live as long as it)
//! ```
//!
//! Exit codes of `run`: 0 when it unloaded the scheduler itself (a signal), 1 when the kernel ended the
//! scheduler with an error (a stall, a BPF error) or it could not load, 2 when the kernel ended it
//! otherwise (SysRq-S).
//!
//! Loading: the kernel's CPU hotplug count is read before the load and given to the kernel
//! (`ops.hotplug_seq`, `sched.rs`); a CPU that comes or goes before the attach makes the kernel refuse
//! it, and `run` loads again, up to [`LOAD_ATTEMPTS`] times, then fails (exit 1) saying the CPUs kept
//! changing.

#![warn(missing_docs)]

mod bpf {
    #![allow(missing_docs, clippy::all, unused_imports)]
    include!(concat!(env!("OUT_DIR"), "/dfsched.skel.rs"));
}
mod control;
mod intf {
    //! Constants shared with the BPF side, generated from `src/bpf/intf.h` (all of them, used or not).
    #![allow(dead_code)]
    include!(concat!(env!("OUT_DIR"), "/intf.rs"));
}
mod proto;
mod sched;
mod server;
mod trace;
mod trace_summary;

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};
use libbpf_rs::OpenObject;
use sched::{exit_kind, ExitInfo, SchedError, Scheduler, Settings};
use std::io::{BufRead as _, Write as _};
use std::mem::MaybeUninit;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Loads tried before `run` gives up when a CPU comes or goes during each (the kernel refuses an
/// attach whose hotplug count is stale: `sched.rs`, `ops.hotplug_seq`). Hotplug is rare; five in a
/// row means the CPUs keep changing, and the error says so.
const LOAD_ATTEMPTS: usize = 5;

/// For the hotplug check only: milliseconds `run` pauses between reading the kernel's hotplug count
/// and attaching, at each attempt (`Settings::test_attach_pause`).
const TEST_ATTACH_PAUSE_ENV: &str = "DFSCHED_SCX_TEST_ATTACH_PAUSE_MS";

/// Where the control socket is by default.
const DEFAULT_SOCKET: &str = "/run/dfsched-scx/sock";

/// dfsched's sched_ext scheduler (partial mode, only SCHED_EXT threads, unless `run --all`).
#[derive(Parser)]
#[command(name = "dfsched-scx", version)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Load the scheduler and serve its control socket until SIGINT/SIGTERM.
    Run {
        /// Schedule every task of the system (SCX_OPS_SWITCH_PARTIAL off); ungrouped ones go through
        /// the shared queue. Without it only threads whose policy is SCHED_EXT are scheduled here.
        #[arg(long)]
        all: bool,
        /// The policy a runtime that uses this scheduler takes when its own was not chosen
        /// (DFSCHED_POLICY, a rule); sent in `state` as "policy". Without it runtimes keep their
        /// default (data-affinity).
        #[arg(long, value_enum, value_name = "POLICY")]
        policy: Option<Policy>,
        /// A thread's time slice, in microseconds.
        #[arg(long, default_value_t = 5000, value_name = "US")]
        slice_us: u64,
        /// Dispatches in a row a CPU gives one group before it serves the next group with queued
        /// threads (a group may set its own). 1 turns batching off.
        #[arg(long, default_value_t = 8, value_name = "N")]
        quota: u32,
        /// The control socket.
        #[arg(long, default_value = DEFAULT_SOCKET, value_name = "PATH")]
        socket: PathBuf,
        /// Print the state every N seconds (0: at start and end only).
        #[arg(long, default_value_t = 0, value_name = "N")]
        stats_secs: u64,
        /// The kernel's watchdog: a runnable SCHED_EXT thread not run for this long ends the
        /// scheduler (0: the kernel's default, 30 s).
        #[arg(long, default_value_t = 0, value_name = "MS")]
        timeout_ms: u32,
        /// For the safety-net check only: never dispatch this scheduler group (its threads stall
        /// and the kernel's watchdog must end the scheduler).
        #[arg(long, value_name = "GID", hide = true)]
        test_stall_group: Option<u32>,
        /// Write a trace of the dispatches to FILE: a record each time a thread gets a CPU, and each
        /// map change (`dfsched-scx trace FILE` summarises it). Off by default (then it costs nothing).
        #[arg(long, value_name = "FILE")]
        trace: Option<PathBuf>,
        /// The trace file's limit, in MiB: lines past it are dropped and counted.
        #[arg(long, default_value_t = 64, value_name = "MIB")]
        trace_max_mb: u64,
        /// The BPF side's trace ring, in KiB (a power of 2, at least 4): records that find it full are
        /// dropped and counted (`trace_drop`); it is drained every 100 ms at most.
        #[arg(long, default_value_t = 4096, value_name = "KIB")]
        trace_ring_kib: u32,
    },
    /// Summarise a dispatch trace (`run --trace FILE`): per CPU its runs (consecutive records of one
    /// group), per group its homes and CPUs by time window, per thread whether it followed its
    /// placement.
    Trace {
        /// The trace file.
        file: PathBuf,
        /// Print the summary as one JSON object.
        #[arg(long)]
        json: bool,
        /// Count only records at or after this time (ns, CLOCK_MONOTONIC, the trace's clock); map
        /// changes before it still apply.
        #[arg(long, default_value_t = 0, value_name = "T")]
        since_ns: u64,
        /// Count only records before this time (ns), and no map change from it on.
        #[arg(long, value_name = "T")]
        until_ns: Option<u64>,
        /// The time window of the per-group CPU lists, in milliseconds.
        #[arg(long, default_value_t = 1000, value_name = "MS")]
        window_ms: u64,
    },
    /// Ask a running scheduler for its state.
    State {
        /// The control socket.
        #[arg(long, default_value = DEFAULT_SOCKET, value_name = "PATH")]
        socket: PathBuf,
    },
    /// Send requests (JSON lines on stdin) over one connection; print the replies.
    Client {
        /// The control socket.
        #[arg(long, default_value = DEFAULT_SOCKET, value_name = "PATH")]
        socket: PathBuf,
        /// After stdin ends, keep the connection (and so its groups) until SIGINT/SIGTERM.
        #[arg(long)]
        hold: bool,
    },
    /// Run a command with the SCHED_EXT policy (inherited by its threads and children), so the loaded
    /// scheduler schedules it.
    Ext {
        /// The command and its arguments.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
}

/// The runtime policies a scheduler may offer its clients (dfsched-core's `Policy`, by name: this
/// crate does not link the MIT/Apache workspace's crates, it only speaks their names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum Policy {
    /// A thread that gives no DF is left alone.
    DataAffinity,
    /// The threads of a process that give no DF form one co-thread group.
    CoThread,
}

impl Policy {
    /// The name runtimes parse (`DFSCHED_POLICY`'s spelling).
    fn name(self) -> &'static str {
        match self {
            Policy::DataAffinity => "data-affinity",
            Policy::CoThread => "co-thread",
        }
    }
}

/// `SCHED_EXT` (include/uapi/linux/sched.h, Linux 6.12): not in the libc crate yet.
const SCHED_EXT: libc::c_int = 7;

/// Sets SCHED_EXT on the calling thread and execs `command`.
fn exec_ext(command: &[String]) -> Result<i32> {
    use std::os::unix::process::CommandExt as _;
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param for the call's duration.
    if unsafe { libc::sched_setscheduler(0, SCHED_EXT, &param) } != 0 {
        return Err(std::io::Error::last_os_error())
            .context("sched_setscheduler(SCHED_EXT) (is the kernel built with sched_ext?)");
    }
    let err = std::process::Command::new(&command[0])
        .args(&command[1..])
        .exec();
    Err(err).with_context(|| format!("exec {}", command[0]))
}

/// Set by SIGINT/SIGTERM.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // Relaxed: the main loop polls the flag; no other data is published with it.
    STOP.store(true, Ordering::Relaxed);
}

/// Makes SIGINT and SIGTERM set [`STOP`] instead of killing the process.
fn catch_stop_signals() -> Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe; the sigaction
        // struct is zeroed (an empty mask, no flags) before its handler is set.
        let r = unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigaction(sig, &act, std::ptr::null_mut())
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error()).context("sigaction");
        }
    }
    Ok(())
}

/// The machine's possible CPUs (`/sys/devices/system/cpu/possible`, e.g. `0-7`), as a count.
/// The test pause of [`TEST_ATTACH_PAUSE_ENV`], if set.
fn test_attach_pause() -> Result<Option<Duration>> {
    match std::env::var(TEST_ATTACH_PAUSE_ENV) {
        Err(_) => Ok(None),
        Ok(v) => {
            let ms: u64 = v
                .trim()
                .parse()
                .with_context(|| format!("{TEST_ATTACH_PAUSE_ENV}={v}: milliseconds"))?;
            Ok(Some(Duration::from_millis(ms.min(60_000))))
        }
    }
}

fn possible_cpus() -> Result<u32> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .context("/sys/devices/system/cpu/possible")?;
    let last = text
        .trim()
        .rsplit([',', '-'])
        .next()
        .and_then(|s| s.parse::<u32>().ok())
        .context("parsing /sys/devices/system/cpu/possible")?;
    Ok(last + 1)
}

/// The loaded scheduler as the control state's [`control::Maps`], with the policy it offers.
struct Loaded<'a, 'obj>(&'a mut Scheduler<'obj>, Option<Policy>);

impl control::Maps for Loaded<'_, '_> {
    fn set_group(&mut self, gid: u32, home: &[u64], quota: u32) -> Result<(), String> {
        self.0
            .set_group(gid, home, quota)
            .map_err(|e| e.to_string())
    }
    fn place(&mut self, tid: u32, gid: u32) -> Result<(), String> {
        self.0.place(tid, gid).map_err(|e| e.to_string())
    }
    fn unplace(&mut self, tid: u32) -> Result<(), String> {
        self.0.unplace(tid).map_err(|e| e.to_string())
    }
    fn state(&self) -> serde_json::Value {
        state_json(self.0, self.1)
    }
}

fn state_json(s: &Scheduler, policy: Option<Policy>) -> serde_json::Value {
    let (state, ops) = sched::sysfs_state();
    let stats: serde_json::Map<String, serde_json::Value> = sched::STAT_NAMES
        .iter()
        .zip(s.stats())
        .map(|(n, v)| (n.to_string(), v.into()))
        .collect();
    let set = s.settings();
    serde_json::json!({
        "state": state,
        "ops": ops,
        "mode": if set.switch_all { "all" } else { "partial" },
        "policy": policy.map(Policy::name),
        "slice_us": set.slice_ns / 1000,
        "quota": set.quota_dfl,
        "nr_cpus": set.nr_cpus,
        "stats": stats,
    })
}

fn describe(e: &ExitInfo) -> String {
    let msg = if e.msg.is_empty() {
        String::new()
    } else {
        format!(": {}", e.msg)
    };
    format!(
        "{}{msg} (exit kind {}, code {})",
        e.reason, e.kind, e.exit_code
    )
}

/// Where `run` writes its dispatch trace, and its limit.
struct TraceTo {
    path: PathBuf,
    max_bytes: u64,
}

fn run(
    socket: &Path,
    stats_secs: u64,
    settings: Settings,
    policy: Option<Policy>,
    trace_to: Option<TraceTo>,
) -> Result<i32> {
    catch_stop_signals()?;
    // One libbpf object per attempt: a refused attempt's scheduler is detached, but its object
    // stays borrowed for the lifetime a successful one would have had.
    let mut storages: [MaybeUninit<OpenObject>; LOAD_ATTEMPTS] =
        std::array::from_fn(|_| MaybeUninit::uninit());
    let mut refusals = Vec::new();
    let mut loaded = None;
    for (attempt, storage) in storages.iter_mut().enumerate() {
        match Scheduler::load(storage, settings) {
            Ok(s) => {
                loaded = Some(s);
                break;
            }
            Err(e @ SchedError::Hotplug { .. }) => {
                println!(
                    "dfsched-scx: attempt {} of {LOAD_ATTEMPTS} refused by the kernel: {e}",
                    attempt + 1
                );
                let _ = std::io::stdout().flush();
                refusals.push(e.to_string());
            }
            Err(e) => return Err(e.into()),
        }
    }
    let Some(mut sched) = loaded else {
        anyhow::bail!(
            "not loaded: the CPUs changed (hotplug) during each of {LOAD_ATTEMPTS} attempts to load the scheduler; the last: {}",
            refusals.last().map_or("", String::as_str)
        );
    };
    // The trace starts before the socket serves: every map change is in it.
    let tracing = match &trace_to {
        Some(t) => {
            let about = format!(
                "slice_us {} quota {} nr_cpus {} mode {}",
                settings.slice_ns / 1000,
                settings.quota_dfl,
                settings.nr_cpus,
                if settings.switch_all {
                    "all"
                } else {
                    "partial"
                }
            );
            let writer = std::rc::Rc::new(std::cell::RefCell::new(
                trace::Writer::create(&t.path, t.max_bytes, &about)
                    .with_context(|| format!("trace file {}", t.path.display()))?,
            ));
            let ring = sched.trace_to(writer.clone())?;
            Some((writer, ring))
        }
        None => None,
    };
    let (tx, rx) = std::sync::mpsc::channel();
    server::serve(socket, tx).with_context(|| format!("control socket {}", socket.display()))?;
    let mut control = control::Control::new(intf::MAX_GROUPS, intf::HOME_WORDS as usize);
    let (state, ops) = sched::sysfs_state();
    println!(
        "dfsched-scx: loaded (state {state}, ops {ops}; {} mode, policy {}; slice {} us, quota {}, {} CPUs); socket {}",
        if settings.switch_all { "all" } else { "partial" },
        policy.map_or("not offered", Policy::name),
        settings.slice_ns / 1000,
        settings.quota_dfl,
        settings.nr_cpus,
        socket.display()
    );
    println!("dfsched-scx: state {}", state_json(&sched, policy));
    let _ = std::io::stdout().flush();
    let mut last_stats = Instant::now();
    let ended_by_kernel = loop {
        // Relaxed: see on_signal.
        if STOP.load(Ordering::Relaxed) {
            break None;
        }
        if let Some(e) = sched.exit_info() {
            break Some(e);
        }
        if let Some((_, ring)) = &tracing {
            // Drains what is there; a record that found the ring full was counted by the BPF side.
            let _ = ring.consume();
        }
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(server::Event::Request { conn, req, reply }) => {
                let r = control.handle(&mut Loaded(&mut sched, policy), conn, req);
                let _ = reply.send(r);
            }
            Ok(server::Event::Closed { conn }) => {
                control.closed(&mut Loaded(&mut sched, policy), conn)
            }
            Err(_) => {}
        }
        if stats_secs > 0 && last_stats.elapsed() >= Duration::from_secs(stats_secs) {
            last_stats = Instant::now();
            println!("dfsched-scx: state {}", state_json(&sched, policy));
            let _ = std::io::stdout().flush();
        }
    };
    println!("dfsched-scx: state {}", state_json(&sched, policy));
    let _ = std::fs::remove_file(socket);
    let code = match ended_by_kernel {
        Some(e) => {
            sched.detach();
            println!(
                "dfsched-scx: the kernel ended the scheduler: {}",
                describe(&e)
            );
            if e.is_error() {
                1
            } else {
                2
            }
        }
        None => match sched.detach() {
            Some(e) if e.kind == exit_kind::UNREG => {
                println!("dfsched-scx: unloaded: {}", describe(&e));
                0
            }
            Some(e) => {
                println!(
                    "dfsched-scx: unloaded, but the kernel said: {}",
                    describe(&e)
                );
                if e.is_error() {
                    1
                } else {
                    2
                }
            }
            None => {
                println!("dfsched-scx: unloaded; the kernel left no exit record");
                1
            }
        },
    };
    if let Some((writer, ring)) = tracing {
        let _ = ring.consume();
        drop(ring);
        let dropped_ring = sched.stats()[intf::STAT_TRACE_DROP as usize];
        let mut w = writer.borrow_mut();
        match w.finish(dropped_ring) {
            Ok(t) => println!(
                "dfsched-scx: trace {}: {} records, {dropped_ring} dropped (ring full), {} lines dropped (size limit)",
                w.path().display(),
                t.records,
                t.dropped_size
            ),
            Err(e) => println!("dfsched-scx: trace {}: write failed: {e}", w.path().display()),
        }
    }
    let (state, _) = sched::sysfs_state();
    println!("dfsched-scx: sched_ext state now {state}");
    Ok(code)
}

fn client(socket: &Path, hold: bool) -> Result<i32> {
    catch_stop_signals()?;
    let mut stream = std::os::unix::net::UnixStream::connect(socket)
        .with_context(|| format!("connecting to {}", socket.display()))?;
    stream.set_read_timeout(Some(server::REQUEST_TIMEOUT))?;
    stream.set_write_timeout(Some(server::REQUEST_TIMEOUT))?;
    let mut replies = std::io::BufReader::new(stream.try_clone()?);
    let mut failed = 0;
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        stream.write_all(format!("{}\n", line.trim()).as_bytes())?;
        let mut answer = String::new();
        replies.read_line(&mut answer)?;
        print!("{answer}");
        let _ = std::io::stdout().flush();
        if !serde_json::from_str::<proto::Reply>(&answer).is_ok_and(|r| r.ok) {
            failed += 1;
        }
    }
    if hold {
        // Relaxed: see on_signal.
        while !STOP.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Ok(if failed == 0 { 0 } else { 1 })
}

fn main() {
    let result = match Cli::parse().cmd {
        Cmd::Run {
            all,
            policy,
            slice_us,
            quota,
            socket,
            stats_secs,
            timeout_ms,
            test_stall_group,
            trace,
            trace_max_mb,
            trace_ring_kib,
        } => possible_cpus().and_then(|cpus| {
            let trace_ring_bytes = match trace {
                None => 0,
                Some(_) => {
                    let kib = trace_ring_kib.max(4);
                    if !kib.is_power_of_two() || kib > 1 << 20 {
                        anyhow::bail!("--trace-ring-kib {kib}: a power of 2 from 4 to 1048576");
                    }
                    kib * 1024
                }
            };
            let settings = Settings {
                slice_ns: slice_us.max(1) * 1000,
                quota_dfl: quota.max(1),
                nr_cpus: cpus.min(intf::MAX_CPUS),
                timeout_ms,
                stall_group: test_stall_group,
                switch_all: all,
                trace_ring_bytes,
                test_attach_pause: test_attach_pause()?,
            };
            let trace_to = trace.map(|path| TraceTo {
                path,
                max_bytes: trace_max_mb.saturating_mul(1 << 20),
            });
            run(&socket, stats_secs, settings, policy, trace_to)
        }),
        Cmd::Trace {
            file,
            json,
            since_ns,
            until_ns,
            window_ms,
        } => std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))
            .and_then(|text| {
                let t = trace::parse(&text).with_context(|| file.display().to_string())?;
                let s = trace_summary::summarise(
                    &t,
                    since_ns,
                    until_ns,
                    window_ms.saturating_mul(1_000_000),
                );
                if json {
                    println!("{}", serde_json::to_string(&s)?);
                } else {
                    print!("{}", trace_summary::render(&s));
                }
                Ok(0)
            }),
        Cmd::State { socket } => server::request(&socket, &proto::Request::State)
            .with_context(|| format!("asking {}", socket.display()))
            .map(|r| {
                println!("{}", serde_json::to_string(&r).expect("a reply serialises"));
                if r.ok {
                    0
                } else {
                    1
                }
            }),
        Cmd::Client { socket, hold } => client(&socket, hold),
        Cmd::Ext { command } => exec_ext(&command),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("dfsched-scx: {e:#}");
            std::process::exit(1)
        }
    }
}
