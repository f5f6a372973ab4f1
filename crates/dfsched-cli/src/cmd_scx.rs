//! `dfsched scx`: loads dfsched's sched_ext scheduler, shows its state until SIGINT/SIGTERM, has it
//! unload cleanly, and exits with a status saying how it ended.
//!
//! ```text
//! dfsched scx [--policy data-affinity|co-thread] [--partial|--all] [--quota N] [--slice-us US]
//!             [--scheduler PATH] [--socket PATH] [--interval SECS] [--once] [--json]
//! ```
//!
//! The scheduler is a BPF program the kernel loads only under a GPL licence, so it lives in its own
//! GPL-2.0-only crate and binary (`crates/dfsched-scx`, `dfsched-scx run`). This command never links
//! it: it finds the binary (`--scheduler PATH`, else beside `dfsched`, else on `PATH`), spawns it, and
//! talks to it the way every runtime does, through its control socket (JSON lines; the server must be
//! root's, [`dfsched::scx::ScxLink`]). The licence boundary is the process boundary.
//!
//! Invariants:
//! - Nothing is spawned before the checks that can fail cleanly have passed (the binary, a kernel
//!   with sched_ext and no other scheduler loaded, root): those end with status 3 and a message
//!   naming what is missing.
//! - Once spawned, the loader is never left behind: SIGINT/SIGTERM to this command is forwarded to
//!   it (the kernel then unregisters the scheduler), a loader that does not show the scheduler
//!   loaded within [`LOAD_TIMEOUT`] or does not exit within [`UNLOAD_TIMEOUT`] of the signal is
//!   killed (the kernel unloads a scheduler whose loader dies).
//! - The exit status is the loader's outcome ([`Outcome`]), read from its exit status, which
//!   `dfsched-scx run` derives from the kernel's exit record.

use crate::Failure;
use anyhow::Context as _;
use clap::{Args, ValueEnum};
use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

/// The name of the scheduler's binary.
pub const SCHEDULER_BINARY: &str = "dfsched-scx";

/// How long the loader may take to say the scheduler is loaded (TCG guests load it in a few
/// seconds; a busy host may take longer to verify the BPF program).
pub const LOAD_TIMEOUT: Duration = Duration::from_secs(60);

/// How long the loader may take to exit once told to (it unregisters and waits for `ops.exit`).
pub const UNLOAD_TIMEOUT: Duration = Duration::from_secs(30);

/// `dfsched scx --help`'s long text.
pub const SCX_LONG_ABOUT: &str = "\
Load dfsched's sched_ext scheduler (Linux 6.12+ built with CONFIG_SCHED_CLASS_EXT; run as root), \
show its state (groups, their homes and threads, counters) until SIGINT or SIGTERM, then unload it \
cleanly.

The scheduler runs the threads of one DF as a group on the group's home and serves a group's \
threads in succession on a CPU until the group's quota is spent. Programs using dfsched (linked with \
libdfsched, or under `dfsched run`) find it by themselves (DFSCHED_SCX=auto): their threads get the \
SCHED_EXT policy and their placements go to the scheduler instead of affinity masks.

--partial (the default): only threads whose policy is SCHED_EXT are scheduled by it; the rest of \
the system stays on the kernel's default scheduler. --all: every task of the system is, the \
threads of no group through one shared queue.

--policy: the policy a program that uses the scheduler takes when it chose none itself \
(no DFSCHED_POLICY, no process rule; `dfsched run` always chooses one, its --policy): under \
co-thread the threads of each such process form one group; under data-affinity only hinted \
threads are grouped. Without --policy, programs keep their own default (data-affinity).

The scheduler is the GPL-2.0-only program `dfsched-scx` (crates/dfsched-scx), spawned, never \
linked: --scheduler PATH, else the one beside this dfsched, else the first on PATH.

Exit status: 0 unloaded cleanly (SIGINT/SIGTERM); 1 dfsched's own failure; 2 bad usage; 3 not \
loaded (no dfsched-scx, no sched_ext in this kernel, another scheduler loaded, not root, or the \
loader failed before the kernel showed it enabled); 4 the kernel ended it with an error (a stalled \
task, a BPF error); 5 the kernel ended it otherwise (SysRq-S); 6 the loader ended otherwise \
(killed by a signal).";

/// The runtime policy the scheduler offers (`dfsched-scx run --policy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ScxPolicy {
    /// Only threads that give a DF are grouped.
    DataAffinity,
    /// The threads of a process that give no DF form one group.
    CoThread,
}

impl ScxPolicy {
    /// As `dfsched-scx run --policy` and `DFSCHED_POLICY` spell it.
    fn name(self) -> &'static str {
        match self {
            ScxPolicy::DataAffinity => "data-affinity",
            ScxPolicy::CoThread => "co-thread",
        }
    }
}

/// Flags of `dfsched scx`.
#[derive(Debug, Args)]
pub struct ScxArgs {
    /// The policy offered to programs that use the scheduler and chose none (see above).
    #[arg(long, value_enum, value_name = "POLICY")]
    policy: Option<ScxPolicy>,
    /// Schedule only threads whose policy is SCHED_EXT (the default).
    #[arg(long, conflicts_with = "all")]
    partial: bool,
    /// Schedule every task of the system.
    #[arg(long)]
    all: bool,
    /// Dispatches in a row a CPU gives one group before the next (scheduler default 8; 1 = no
    /// batching).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    quota: Option<u32>,
    /// A thread's time slice in microseconds (scheduler default 5000).
    #[arg(long, value_name = "US", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    slice_us: Option<u64>,
    /// The dfsched-scx binary (default: beside dfsched, else on PATH).
    #[arg(long, value_name = "PATH")]
    scheduler: Option<PathBuf>,
    /// The scheduler's control socket.
    #[arg(long, value_name = "PATH", default_value = dfsched::scx::DEFAULT_SOCKET)]
    socket: PathBuf,
    /// Seconds between two views of the state.
    #[arg(long, value_name = "SECS", default_value_t = 2.0)]
    interval: f64,
    /// Show the state once, when loaded, and then only how it ended.
    #[arg(long)]
    once: bool,
    /// The state as one JSON object per line (each view; the end as {"end":…}).
    #[arg(long)]
    json: bool,
    /// Where `sys/kernel/sched_ext` is read (tests).
    #[arg(long, value_name = "PATH", default_value = "/", hide = true)]
    sysfs_root: PathBuf,
}

/// How a loaded (or not loaded) scheduler ended: the command's exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Unloaded on SIGINT/SIGTERM: "unregistered from user space".
    Unloaded = 0,
    /// Never loaded: something missing, or the loader failed first.
    NotLoaded = 3,
    /// The kernel ended it with an error (a stall, a BPF error).
    KernelError = 4,
    /// The kernel ended it otherwise (SysRq-S).
    KernelEnded = 5,
    /// The loader ended some other way (killed by a signal, an unknown status).
    LoaderDied = 6,
}

impl Outcome {
    /// The outcome of a loader that exited with `code` (`None`: killed by a signal), `loaded` or not
    /// before it did (`dfsched-scx run`'s codes: 0 unloaded by itself, 1 the kernel ended it with an
    /// error or it could not load, 2 the kernel ended it otherwise).
    pub fn of(code: Option<i32>, loaded: bool) -> Outcome {
        match (code, loaded) {
            (Some(0), true) => Outcome::Unloaded,
            (Some(1), true) => Outcome::KernelError,
            (Some(2), true) => Outcome::KernelEnded,
            (Some(_), false) => Outcome::NotLoaded,
            _ => Outcome::LoaderDied,
        }
    }

    /// What to say.
    fn describe(self) -> &'static str {
        match self {
            Outcome::Unloaded => "unloaded cleanly",
            Outcome::NotLoaded => "not loaded",
            Outcome::KernelError => "the kernel ended the scheduler with an error",
            Outcome::KernelEnded => "the kernel ended the scheduler",
            Outcome::LoaderDied => "the loader ended abnormally",
        }
    }
}

/// Why the scheduler cannot be started here (status 3).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NotStartable {
    /// `--scheduler PATH` is not an executable file.
    #[error("--scheduler {0}: not an executable file")]
    NotExecutable(PathBuf),
    /// No dfsched-scx beside dfsched nor on PATH.
    #[error(
        "the scheduler binary dfsched-scx was not found (looked beside this dfsched, {beside}, and on PATH); \
         build it (GPL-2.0-only, needs clang-19 and bpftool) with \
         `cargo build --release --manifest-path crates/dfsched-scx/Cargo.toml` and give --scheduler PATH \
         or put it beside dfsched"
    )]
    NoBinary {
        /// Where it was looked for beside dfsched.
        beside: String,
    },
    /// The kernel has no sched_ext.
    #[error(
        "this kernel has no sched_ext ({0} is missing): it needs Linux 6.12 or later built with \
         CONFIG_SCHED_CLASS_EXT (Debian's kernels are not; see crates/dfsched-vmbench/scx-kernel/)"
    )]
    NoSchedExt(String),
    /// Another scheduler is loaded (or one is still unloading).
    #[error(
        "a sched_ext scheduler is already loaded (state {state}, ops {ops:?}): unload it first"
    )]
    Busy {
        /// `/sys/kernel/sched_ext/state`.
        state: String,
        /// `root/ops`.
        ops: String,
    },
    /// Not root.
    #[error("loading a BPF scheduler needs root (euid {0})")]
    NotRoot(u32),
}

/// Whether `path` is a regular file someone may execute.
fn executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The scheduler binary: `given`, else `beside` (the directory of the running dfsched), else the
/// first executable `dfsched-scx` in `path_var`.
pub fn find_scheduler(
    given: Option<&Path>,
    beside: Option<&Path>,
    path_var: Option<&std::ffi::OsStr>,
) -> Result<PathBuf, NotStartable> {
    if let Some(p) = given {
        return if executable(p) {
            Ok(p.to_path_buf())
        } else {
            Err(NotStartable::NotExecutable(p.to_path_buf()))
        };
    }
    let near = beside.map(|d| d.join(SCHEDULER_BINARY));
    if let Some(p) = near.as_deref().filter(|p| executable(p)) {
        return Ok(p.to_path_buf());
    }
    if let Some(found) = path_var
        .into_iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(SCHEDULER_BINARY))
        .find(|p| executable(p))
    {
        return Ok(found);
    }
    Err(NotStartable::NoBinary {
        beside: near.map_or("(unknown)".into(), |p| p.display().to_string()),
    })
}

/// The kernel's sched_ext state under `sysfs_root`: `Ok` when a scheduler may be loaded.
pub fn check_kernel(sysfs_root: &Path) -> Result<(), NotStartable> {
    let dir = sysfs_root.join("sys/kernel/sched_ext");
    let state_path = dir.join("state");
    let state = std::fs::read_to_string(&state_path)
        .map_err(|_| NotStartable::NoSchedExt(state_path.display().to_string()))?;
    let state = state.trim().to_string();
    if state != "disabled" {
        let ops = std::fs::read_to_string(dir.join("root/ops"))
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        return Err(NotStartable::Busy { state, ops });
    }
    Ok(())
}

/// The loader's command line for `args`.
fn loader_args(args: &ScxArgs) -> Vec<String> {
    let mut v = vec!["run".to_string()];
    if args.all {
        v.push("--all".into());
    }
    if let Some(p) = args.policy {
        v.extend(["--policy".into(), p.name().into()]);
    }
    if let Some(q) = args.quota {
        v.extend(["--quota".into(), q.to_string()]);
    }
    if let Some(s) = args.slice_us {
        v.extend(["--slice-us".into(), s.to_string()]);
    }
    v.extend(["--socket".into(), args.socket.display().to_string()]);
    v
}

/// The signal (SIGINT or SIGTERM) this command received, 0 before one.
static SIGNALLED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // Relaxed: the main loop polls it; nothing else is published with it.
    SIGNALLED.store(sig, Ordering::Relaxed);
}

/// SIGINT and SIGTERM set [`SIGNALLED`] instead of ending the process.
fn catch_signals() -> anyhow::Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic (async-signal-safe); the struct is zeroed
        // (empty mask, no flags) before its handler is set.
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

fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: kill has no memory effects; the pid is our child's, not yet reaped (callers check
    // try_wait first), so it names no other process.
    unsafe { libc::kill(child.id() as libc::pid_t, sig) };
}

/// A thread's name (`/proc/TID/comm`), if it still exists.
fn comm(tid: u64) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{tid}/comm"))
        .ok()
        .map(|s| s.trim().to_string())
}

/// The state as text: a header, the groups with their homes and threads, the counters.
pub fn render(state: &serde_json::Value, names: impl Fn(u64) -> Option<String>) -> String {
    let s = |k: &str| match &state[k] {
        serde_json::Value::String(v) => v.clone(),
        serde_json::Value::Null => "-".into(),
        v => v.to_string(),
    };
    let mut out = format!(
        "sched_ext {} (ops {}), {} mode, policy offered {}; quota {}, slice {} us, {} CPUs\n",
        s("state"),
        s("ops"),
        s("mode"),
        s("policy"),
        s("quota"),
        s("slice_us"),
        s("nr_cpus")
    );
    let groups = state["groups"].as_array().cloned().unwrap_or_default();
    let threads: usize = groups
        .iter()
        .map(|g| g["tids"].as_array().map_or(0, Vec::len))
        .sum();
    out += &format!("{} groups, {threads} threads placed\n", groups.len());
    if !groups.is_empty() {
        out += "  group  home          threads\n";
    }
    for g in &groups {
        let tids: Vec<String> = g["tids"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(serde_json::Value::as_u64)
            .map(|t| match names(t) {
                Some(n) => format!("{t} ({n})"),
                None => t.to_string(),
            })
            .collect();
        out += &format!(
            "  {:<6} {:<13} {}\n",
            format!("g{}", g["gid"]),
            g["home"].as_str().unwrap_or("?"),
            if tids.is_empty() {
                "-".to_string()
            } else {
                tids.join(", ")
            }
        );
    }
    if let Some(stats) = state["stats"].as_object() {
        let line: Vec<String> = stats.iter().map(|(k, v)| format!("{k} {v}")).collect();
        out += &format!("counters: {}\n", line.join(", "));
    }
    out
}

/// Reads the loader's stdout lines into a channel (the thread ends at its EOF).
fn forward_lines(child: &mut Child) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    if let Some(out) = child.stdout.take() {
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
    }
    rx
}

/// What the view shows and where.
struct View {
    json: bool,
    once: bool,
    clear: bool,
    shown: bool,
}

impl View {
    fn show(&mut self, state: Result<serde_json::Value, String>) -> std::io::Result<()> {
        let mut out = std::io::stdout().lock();
        match (state, self.json) {
            (Ok(s), true) => writeln!(out, "{s}")?,
            (Ok(s), false) => {
                if self.clear {
                    write!(out, "\x1b[H\x1b[2J")?;
                }
                write!(out, "{}", render(&s, comm))?;
                if !self.clear {
                    writeln!(out)?;
                }
            }
            (Err(e), true) => writeln!(out, "{}", serde_json::json!({ "error": e }))?,
            (Err(e), false) => writeln!(out, "state unavailable: {e}")?,
        }
        out.flush()?;
        self.shown = true;
        Ok(())
    }

    fn due(&self, last: Option<Instant>, every: Duration) -> bool {
        if self.once {
            return !self.shown;
        }
        last.is_none_or(|t| t.elapsed() >= every)
    }
}

/// Asks the scheduler for its state (a new connection when the last one failed).
fn query(
    link: &mut Option<dfsched::scx::ScxLink>,
    socket: &Path,
) -> Result<serde_json::Value, String> {
    if link.is_none() {
        *link = Some(dfsched::scx::ScxLink::connect(socket).map_err(|e| e.to_string())?);
    }
    let r = link.as_mut().expect("connected above").state();
    if r.is_err() {
        *link = None;
    }
    r.map_err(|e| e.to_string())
}

/// Says how it ended (stderr; with --json also `{"end":…}` on stdout) and exits with its status.
fn finish(json: bool, outcome: Outcome, said: &str) -> ! {
    let how = outcome.describe();
    if said.is_empty() {
        eprintln!("dfsched scx: {how}");
    } else {
        eprintln!("dfsched scx: {how}: {said}");
    }
    if json {
        println!(
            "{}",
            serde_json::json!({"end": {"status": outcome as i32, "how": how, "loader": said}})
        );
    }
    std::process::exit(outcome as i32)
}

/// `dfsched scx`.
pub fn run(args: ScxArgs) -> Result<(), Failure> {
    if !(args.interval.is_finite() && (0.1..=3600.0).contains(&args.interval)) {
        return Err(Failure::usage(
            &["scx"],
            format!("--interval {}: from 0.1 to 3600 seconds", args.interval),
        ));
    }
    let every = Duration::from_secs_f64(args.interval);
    let beside = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf));
    let checks = find_scheduler(
        args.scheduler.as_deref(),
        beside.as_deref(),
        std::env::var_os("PATH").as_deref(),
    )
    .and_then(|bin| check_kernel(&args.sysfs_root).map(|()| bin))
    .and_then(|bin| {
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        if euid == 0 {
            Ok(bin)
        } else {
            Err(NotStartable::NotRoot(euid))
        }
    });
    let bin = match checks {
        Ok(bin) => bin,
        Err(e) => finish(args.json, Outcome::NotLoaded, &e.to_string()),
    };
    catch_signals()?;
    let mut child = Command::new(&bin)
        .args(loader_args(&args))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let lines = forward_lines(&mut child);
    let mut view = View {
        json: args.json,
        once: args.once,
        clear: !args.json && !args.once && std::io::stdout().is_terminal(),
        shown: false,
    };
    let started = Instant::now();
    let mut loaded = false;
    let mut said = String::new();
    let mut told: Option<Instant> = None;
    let mut killed = false;
    let mut link = None;
    let mut last_view: Option<Instant> = None;
    let status = loop {
        if let Some(status) = child.try_wait().context("waiting for the loader")? {
            break status;
        }
        // Relaxed: see on_signal.
        let sig = SIGNALLED.load(Ordering::Relaxed);
        if sig != 0 && told.is_none() {
            signal(&child, sig);
            told = Some(Instant::now());
        }
        let late = match told {
            Some(t) => t.elapsed() > UNLOAD_TIMEOUT,
            None => !loaded && started.elapsed() > LOAD_TIMEOUT,
        };
        if late && !killed {
            eprintln!(
                "dfsched scx: the loader did not {} in time; killing it",
                if told.is_some() {
                    "exit"
                } else {
                    "load the scheduler"
                }
            );
            signal(&child, libc::SIGKILL);
            killed = true;
        }
        while let Ok(line) = lines.try_recv() {
            if line.starts_with("dfsched-scx: loaded") {
                loaded = true;
                if !args.json {
                    eprintln!("{line}");
                }
            } else if line.contains("unloaded") || line.contains("the kernel ended") {
                said = line.trim_start_matches("dfsched-scx: ").to_string();
            }
        }
        if loaded && told.is_none() && view.due(last_view, every) {
            view.show(query(&mut link, &args.socket))
                .context("writing the state")?;
            last_view = Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    // The rest of the loader's output (it has exited: its stdout ends).
    let end = Instant::now() + Duration::from_secs(2);
    while let Ok(line) = lines.recv_timeout(end.saturating_duration_since(Instant::now())) {
        if line.starts_with("dfsched-scx: loaded") {
            loaded = true;
        } else if line.contains("unloaded") || line.contains("the kernel ended") {
            said = line.trim_start_matches("dfsched-scx: ").to_string();
        }
    }
    let outcome = if killed {
        // Killed by us: for not loading in time (never loaded), or for not exiting in time.
        if loaded {
            Outcome::LoaderDied
        } else {
            Outcome::NotLoaded
        }
    } else {
        Outcome::of(status.code(), loaded)
    };
    if said.is_empty() && outcome != Outcome::Unloaded {
        said = format!("the loader {status}");
    }
    finish(args.json, outcome, &said)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_follow_the_loaders_exit_codes() {
        assert_eq!(Outcome::of(Some(0), true), Outcome::Unloaded);
        assert_eq!(Outcome::of(Some(1), true), Outcome::KernelError);
        assert_eq!(Outcome::of(Some(2), true), Outcome::KernelEnded);
        assert_eq!(Outcome::of(Some(1), false), Outcome::NotLoaded);
        assert_eq!(Outcome::of(Some(0), false), Outcome::NotLoaded);
        assert_eq!(Outcome::of(None, true), Outcome::LoaderDied);
        assert_eq!(Outcome::of(Some(9), true), Outcome::LoaderDied);
        let codes = [0, 3, 4, 5, 6];
        let got = [
            Outcome::Unloaded,
            Outcome::NotLoaded,
            Outcome::KernelError,
            Outcome::KernelEnded,
            Outcome::LoaderDied,
        ]
        .map(|o| o as i32);
        assert_eq!(
            got, codes,
            "documented statuses, none clap's 2 or the CLI's 1"
        );
    }

    #[test]
    fn the_loader_gets_mode_policy_and_settings() {
        use clap::Parser as _;
        let cli = crate::Cli::try_parse_from([
            "dfsched",
            "scx",
            "--all",
            "--policy",
            "co-thread",
            "--quota",
            "4",
            "--socket",
            "/x/s",
        ])
        .unwrap();
        let crate::Command::Scx(args) = cli.command else {
            panic!("not scx");
        };
        assert_eq!(
            loader_args(&args),
            [
                "run",
                "--all",
                "--policy",
                "co-thread",
                "--quota",
                "4",
                "--socket",
                "/x/s"
            ]
        );
        let cli = crate::Cli::try_parse_from(["dfsched", "scx", "--partial"]).unwrap();
        let crate::Command::Scx(args) = cli.command else {
            panic!("not scx");
        };
        assert_eq!(
            loader_args(&args),
            ["run", "--socket", dfsched::scx::DEFAULT_SOCKET],
            "partial is the loader's default"
        );
    }

    #[test]
    fn the_scheduler_is_found_as_given_beside_dfsched_or_on_path() {
        use std::os::unix::fs::PermissionsExt as _;
        let tmp = tempfile::Builder::new()
            .prefix("dfsched-scx-find-")
            .tempdir()
            .unwrap();
        let root = tmp.path();
        let (near, on_path) = (root.join("bin"), root.join("path"));
        std::fs::create_dir_all(&near).unwrap();
        std::fs::create_dir_all(&on_path).unwrap();
        let path_var = std::env::join_paths([root.join("nothing"), on_path.clone()]).unwrap();
        let put = |dir: &Path, mode: u32| {
            let p = dir.join(SCHEDULER_BINARY);
            std::fs::write(&p, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
            p
        };
        let missing = find_scheduler(None, Some(&near), Some(&path_var));
        assert!(
            matches!(&missing, Err(NotStartable::NoBinary { beside }) if beside.contains("bin/dfsched-scx")),
            "{missing:?}"
        );
        let text = missing.unwrap_err().to_string();
        assert!(
            text.contains("--scheduler") && text.contains("cargo build"),
            "{text}"
        );
        let p = put(&on_path, 0o755);
        assert_eq!(find_scheduler(None, Some(&near), Some(&path_var)), Ok(p));
        put(&near, 0o644);
        assert!(
            find_scheduler(None, Some(&near), Some(&path_var))
                .unwrap()
                .starts_with(&on_path),
            "a file beside dfsched that is not executable is passed over"
        );
        let n = put(&near, 0o755);
        assert_eq!(
            find_scheduler(None, Some(&near), Some(&path_var)),
            Ok(n.clone())
        );
        let given = root.join("nope");
        assert_eq!(
            find_scheduler(Some(&given), Some(&near), Some(&path_var)),
            Err(NotStartable::NotExecutable(given)),
            "a given path is used or refused, never searched around"
        );
        assert_eq!(find_scheduler(Some(&n), None, None), Ok(n));
    }

    #[test]
    fn the_kernel_check_names_a_missing_sched_ext_and_a_loaded_scheduler() {
        let tmp = tempfile::Builder::new()
            .prefix("dfsched-scx-kern-")
            .tempdir()
            .unwrap();
        let root = tmp.path();
        let e = check_kernel(root).unwrap_err();
        assert!(matches!(e, NotStartable::NoSchedExt(_)), "{e:?}");
        assert!(e.to_string().contains("CONFIG_SCHED_CLASS_EXT"));
        let dir = root.join("sys/kernel/sched_ext");
        std::fs::create_dir_all(dir.join("root")).unwrap();
        std::fs::write(dir.join("state"), "enabled\n").unwrap();
        std::fs::write(dir.join("root/ops"), "simple\n").unwrap();
        assert_eq!(
            check_kernel(root),
            Err(NotStartable::Busy {
                state: "enabled".into(),
                ops: "simple".into()
            })
        );
        std::fs::write(dir.join("state"), "disabled\n").unwrap();
        assert_eq!(check_kernel(root), Ok(()));
    }

    #[test]
    fn the_view_shows_groups_homes_threads_and_counters() {
        let state = serde_json::json!({
            "state": "enabled", "ops": "dfsched", "mode": "all", "policy": null,
            "quota": 8, "slice_us": 5000, "nr_cpus": 8,
            "stats": {"disp_same_group": 12, "kick": 3},
            "groups": [{"gid": 0, "home": "0-1", "tids": [41, 42]}, {"gid": 1, "home": "4-5", "tids": []}],
        });
        let text = render(&state, |t| (t == 41).then(|| "spin-0".to_string()));
        assert!(
            text.starts_with("sched_ext enabled (ops dfsched), all mode, policy offered -;"),
            "{text}"
        );
        assert!(text.contains("2 groups, 2 threads placed"), "{text}");
        assert!(
            text.contains("g0     0-1           41 (spin-0), 42"),
            "{text}"
        );
        assert!(text.contains("g1     4-5           -"), "{text}");
        assert!(
            text.contains("counters: disp_same_group 12, kick 3"),
            "{text}"
        );
    }
}
