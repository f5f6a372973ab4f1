//! `dfsched run`: runs an unmodified program under dfsched, through
//! `LD_PRELOAD` of `libdfsched.so`.
//!
//! ```text
//! dfsched run --policy co-thread [--rules FILE] -- ./server --port 8080
//!   1. find libdfsched.so: --lib, then $DFSCHED_LIB, then next to this
//!      binary (the newer of DIR/libdfsched.so and cargo's DIR/deps/), then
//!      DIR/../lib/
//!   2. the child's environment: LD_PRELOAD=<lib>[:<LD_PRELOAD>],
//!      DFSCHED_PRELOAD=1, DFSCHED_POLICY=…, one DFSCHED_* per option given
//!      (--rules: the file checked, DFSCHED_RULES=its JSON);
//!      (--record FILE: DFSCHED_RECORD=<FILE made absolute>, FILE removed);
//!      (--smt-profile FILE: DFSCHED_SMT_PROFILE=<FILE made absolute>, read
//!      by the program's runtime when it starts);
//!      checked as the runtime will read it (nothing runs if it is bad)
//!   3. the agent: unless dfsched is off for the program (policy none,
//!      DFSCHED_DISABLE, no balancer, DFSCHED_AGENT=off / --no-agent), make
//!      sure a `dfsched agent` listens on the socket the program's runtime
//!      will use (DFSCHED_AGENT: auto = the default socket, or a path),
//!      starting one if none does; if that fails, one warning line and on
//!   4. exec the program: it replaces this process, so its pid, exit status
//!      and signals are its own
//! ```
//!
//! The agent is an optimisation, never a condition: whatever happens to it,
//! the program runs, with its own exit status. A started agent is detached
//! (adopted by init, its own process group, standard streams on
//! `/dev/null`), so `dfsched run` leaves no child behind, and it serves
//! every program on its socket until none has been connected for
//! [`dfsched::agent::ON_DEMAND_IDLE_EXIT`]. When it works nothing is
//! printed: the program's stderr is the user's.
//!
//! Exit status, as `env(1)` and `timeout(1)`: the program's own once it
//! runs; 125 if `dfsched run` itself failed (library not found, a bad
//! `DFSCHED_*` variable); 126 if the program was found but could not be
//! executed; 127 if it was not found; 2 for a bad option.

use crate::Failure;
use clap::{Args, ValueEnum};
use dfsched::agent::AgentMode;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Text of `dfsched run --help`.
pub const LONG_ABOUT: &str = "\
Run PROGRAM under dfsched, unmodified: libdfsched.so is preloaded \
(LD_PRELOAD) and every thread the program creates is known to dfsched from \
its creation and placed by the policy. Children the program starts inherit \
LD_PRELOAD and the DFSCHED_* variables, and so the policy. A program that \
also calls the hint API (dfsched_enter, dfsched_hint) gets its hints \
honoured by the same runtime.

Policies:
  co-thread      the process's threads form one group (its co-threads): under
                 heavy load (2 or more runnable threads per CPU, other
                 processes' included) they share one CPU if the group fits
                 that CPU's fair share (else the smallest cache domain that
                 does); under light load one cache domain, spread over its
                 CPUs; the balancer moves the group whole. A process alone on
                 the machine may so keep every CPU
  data-affinity  threads that give no DF are left where the kernel puts them
                 (the balancer may move them); hinted threads are grouped by DF
  smt-pair       every thread is pinned to one CPU by the profile that
                 `dfsched profile` wrote (--smt-profile FILE): threads whose
                 cache activity at their current CPU time is complementary
                 share the SMT siblings of one core (Kihm et al.), re-paired
                 at every balancer pass; threads are matched to the profile
                 in creation order. Needs SMT siblings: on a machine without
                 them, or with a missing or garbled profile, the program says
                 why on stderr and runs without dfsched. No agent is used
  none           dfsched does nothing: the program runs as without it

Rules (--rules FILE, TOML): unmodified programs steered by what can be \
seen of them. Each [[rule]] has matchers (comm, exe, cgroup, user: the \
process; thread: a thread's name; globs with * and ?) and one action: \
policy = \"co-thread\"|\"data-affinity\"|\"none\" (per process: a rule \
without thread), df = N or df = \"suffix\" (the thread's DF: df_base, \
default 1, plus the last number in its name, so worker-3 gets DF 4 and \
threads with the same number share a DF group), or leave = true (never \
placed). First match wins: the rules are tried in order and the first \
whose matchers all match decides; for the process's policy only rules \
without thread count. Threads are matched when created and again when \
renamed with pthread_setname_np. Example:
  [[rule]]
  thread = \"gc-*\"
  leave = true
  [[rule]]
  thread = \"worker-*\"
  df = \"suffix\"
A bad file is refused with its line, and nothing runs.

libdfsched.so is looked for, in order: --lib PATH; $DFSCHED_LIB; next to the \
dfsched binary (the newer of DIR/libdfsched.so and DIR/deps/libdfsched.so, \
where cargo builds it); DIR/../lib/libdfsched.so.

The agent: processes under dfsched share one view of the machine's load \
through a per-user coordinator, `dfsched agent`, so that two of them do not \
pile their threads onto the same CPU, and processes that share a pipe or a \
socket are placed together. Each program's runtime reports to it once per \
balancer pass over a Unix socket (mode 0600 in a 0700 directory): \
$XDG_RUNTIME_DIR/dfsched/agent.sock, or /tmp/dfsched-$UID/agent.sock \
without XDG_RUNTIME_DIR, or the absolute path in $DFSCHED_AGENT. Only a \
socket in a directory of the user's own with mode 0700, and only an agent \
running as the same user, is used (root's too with \
DFSCHED_AGENT_TRUST_ROOT=1); anything else, such as a directory another \
user created first, is refused with one warning and the program runs \
without the agent. A stopped or unresponsive agent delays neither the \
start (about a second at most) nor the program's balancer (50 ms at most \
per attempt, ever rarer). dfsched \
run starts the agent there when none listens, detached (not a child of \
the program), and prints nothing when that works; an agent started so \
serves every program on that socket and exits by itself 30 s after the \
last one has gone (no connection open); the next dfsched run starts \
another. If it cannot be started, dfsched run prints one warning and runs \
the program anyway, which then judges the load from its own /proc sample. No agent is started for --policy \
none, DFSCHED_DISABLE=1, --balance-interval-ms 0 (no balancer to talk to \
it) or --no-agent / DFSCHED_AGENT=off. See its state with `dfsched agent \
--status`, stop it with `dfsched agent --stop`.

Recording: --record FILE records what the runtime sees (threads, hints, \
DF sizes, CPU time and run-queue wait per balancer pass, blocking, the \
CPUs each thread ran on) into FILE, for `dfsched record inspect FILE` and \
`dfsched sim replay FILE --cpus N`. The first of the program's processes \
to start its runtime writes FILE; every other process (a child it starts, \
a shell's command) writes FILE.PID; replay them together by naming every \
file. The buffer never makes the program wait: when it is full, events \
are dropped and counted (in the file and in the stats).

Exit status: the program's own (it replaces dfsched run: same pid, same \
signals); 125 if dfsched run failed before starting it; 126 if it could not \
be executed; 127 if it was not found; 2 for a bad option.

Example:
  cargo build --release
  target/release/dfsched run --policy co-thread -- ./my-server --threads 8
  # every thread of my-server, and of the children it starts, is placed by
  # dfsched; read back with:
  grep Cpus_allowed_list /proc/$(pidof my-server)/task/*/status";

/// The policy a program runs under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RunPolicy {
    /// Threads with no DF are unmanaged; hinted threads group by DF.
    DataAffinity,
    /// The process's threads form one co-thread group.
    CoThread,
    /// Threads pinned by their activity profile on SMT siblings.
    SmtPair,
    /// dfsched does nothing.
    None,
}

impl RunPolicy {
    /// As `DFSCHED_POLICY` spells it.
    fn env_value(self) -> &'static str {
        match self {
            RunPolicy::DataAffinity => "data-affinity",
            RunPolicy::CoThread => "co-thread",
            RunPolicy::SmtPair => dfsched::config::SMT_PAIR,
            RunPolicy::None => "none",
        }
    }
}

/// Flags of `dfsched run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// What becomes of threads that give no DF (see above).
    #[arg(long, value_enum, default_value = "co-thread")]
    policy: RunPolicy,

    /// Milliseconds between balancer passes; 0 = no balancer thread
    /// (DFSCHED_BALANCE_INTERVAL_MS; runtime default 100).
    #[arg(long, value_name = "N")]
    balance_interval_ms: Option<u64>,

    /// A CPU is imbalanced when its load is this many percent above the
    /// least-loaded CPU's (DFSCHED_IMBALANCE_PCT; default 25).
    #[arg(long, value_name = "N")]
    imbalance_pct: Option<u64>,

    /// Runnable threads per CPU, in thousandths, from which a group's home
    /// is one CPU (DFSCHED_HEAVY_LOAD_MILLI; default 2000).
    #[arg(long, value_name = "N")]
    heavy_load_milli: Option<u64>,

    /// Stuck imbalanced balancer passes before a group is split; 0 = never
    /// (DFSCHED_SPLIT_AFTER_PASSES; default 10).
    #[arg(long, value_name = "N")]
    split_after_passes: Option<u64>,

    /// Moves per balancer pass (DFSCHED_MAX_MOVES_PER_PASS; default 16).
    #[arg(long, value_name = "N")]
    max_moves_per_pass: Option<u64>,

    /// Whether each pass counts other processes' runnable threads from
    /// /proc (DFSCHED_EXTERNAL_LOAD; default true).
    #[arg(long, value_name = "BOOL")]
    external_load: Option<bool>,

    /// The profile `dfsched profile` wrote, for --policy smt-pair (and only
    /// for it; DFSCHED_SMT_PROFILE, made absolute).
    #[arg(long, value_name = "FILE")]
    smt_profile: Option<PathBuf>,

    /// Neither start nor use `dfsched agent`: the program's runtime judges
    /// the load from its own /proc sample alone (DFSCHED_AGENT=off).
    #[arg(long)]
    no_agent: bool,

    /// A rules file (TOML): each process's policy and each thread's DF or
    /// "leave alone", by command name, executable, cgroup, user and
    /// thread name; first match wins (see RULES above). Checked before
    /// anything runs; handed to the program as DFSCHED_RULES.
    #[arg(long, value_name = "FILE")]
    rules: Option<PathBuf>,
    /// Record what the runtime sees into FILE (DFSCHED_RECORD; replaced if
    /// it exists), for `dfsched record inspect` and `dfsched sim replay`.
    /// The program's first process to start its runtime writes FILE; any
    /// other process it starts writes FILE.PID.
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,

    /// The libdfsched.so to preload (else $DFSCHED_LIB, else next to this
    /// binary).
    #[arg(long, value_name = "PATH")]
    lib: Option<PathBuf>,

    /// The program and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        value_name = "PROGRAM [ARGS]"
    )]
    command: Vec<OsString>,
}

/// Exit status when `dfsched run` itself failed.
const EXIT_FAILED: i32 = 125;
/// Exit status when the program could not be executed.
const EXIT_CANNOT_EXEC: i32 = 126;
/// Exit status when the program was not found.
const EXIT_NOT_FOUND: i32 = 127;

/// Runs `run`: on success it does not return (the program replaces this
/// process); failures exit with the statuses in the module doc.
pub fn run(args: RunArgs) -> Result<(), Failure> {
    let (program, program_args) = args.command.split_first().expect("clap requires PROGRAM");
    let lib = match find_lib(args.lib.as_deref(), std::env::var_os("DFSCHED_LIB")) {
        Ok(lib) => lib,
        Err(msg) => fail(EXIT_FAILED, &msg),
    };
    let mut vars = dfsched_vars(&args);
    if let Some(path) = &args.rules {
        match crate::rules_file::load(path) {
            Ok(rules) => vars.push(("DFSCHED_RULES", rules.to_json())),
            Err(msg) => fail(EXIT_FAILED, &format!("{msg}; nothing was run")),
        }
    }
    if let Some(file) = &args.record {
        // Absolute, so that a program that changes directory records where
        // it was asked; removed, so that the program's first runtime (not
        // an old recording) holds the name.
        let file = std::path::absolute(file).unwrap_or_else(|_| file.clone());
        match std::fs::remove_file(&file) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => fail(
                EXIT_FAILED,
                &format!("--record {}: cannot replace it: {e}", file.display()),
            ),
        }
        vars.push(("DFSCHED_RECORD", file.display().to_string()));
    }
    // The runtime in the program will read the inherited DFSCHED_*
    // variables with ours on top: check them now, as it will, so a bad one
    // is said here and nothing runs.
    let mut seen: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| k.starts_with("DFSCHED_") && !vars.iter().any(|(n, _)| n == k))
        .collect();
    seen.extend(vars.iter().map(|(k, v)| (k.to_string(), v.clone())));
    let config = match dfsched::RuntimeConfig::from_vars(seen) {
        Ok(config) => config,
        // A value an option set is that option's fault, not the variable's.
        Err(dfsched::Error::Env { var, value, reason })
            if vars.iter().any(|(k, _)| *k == var) && option_of(&var).is_some() =>
        {
            return Err(Failure::usage(
                &["run"],
                format!(
                    "invalid value '{value}' for '{} <N>': {reason}",
                    option_of(&var).unwrap_or_default()
                ),
            ));
        }
        Err(e) => fail(
            EXIT_FAILED,
            &format!("{e}; nothing was run (check the options and the DFSCHED_* environment)"),
        ),
    };
    if let Some(socket) = agent_socket(&config) {
        // The agent only improves placement: the program runs without it.
        // Bounded: a socket in a directory or of an agent this user does
        // not trust is refused without a word sent to it, and a stopped or
        // full agent costs at most the client's timeout (agent::IO_TIMEOUT).
        // Its reason says which: a directory or agent not trusted
        // ("refusing to use it"), one that does not answer, one that
        // cannot start.
        if let Err(e) = dfsched::agent::ensure_running(&socket, config.agent_trust) {
            eprintln!(
                "dfsched run: warning: could not start the agent ({}); continuing without it",
                one_line(&e.to_string())
            );
        }
    }
    let preload = prepend_preload(&lib, std::env::var_os("LD_PRELOAD").as_deref());
    tracing::info!(lib = %lib.display(), policy = args.policy.env_value(), "dfsched run: exec");
    let mut cmd = Command::new(program);
    cmd.args(program_args).env("LD_PRELOAD", &preload);
    for (k, v) in &vars {
        cmd.env(k, v);
    }
    // exec returns only on failure.
    let err = cmd.exec();
    let shown = Path::new(program).display();
    match err.kind() {
        std::io::ErrorKind::NotFound => fail(
            EXIT_NOT_FOUND,
            &format!(
                "program not found: {shown}{}",
                if program.as_encoded_bytes().contains(&b'/') {
                    String::new()
                } else {
                    " (searched $PATH)".to_string()
                }
            ),
        ),
        _ => fail(EXIT_CANNOT_EXEC, &format!("cannot execute {shown}: {err}")),
    }
}

/// Says `msg` and exits with `status` (the statuses are `dfsched run`'s
/// own, so they do not go through the CLI's 1/2 convention).
fn fail(status: i32, msg: &str) -> ! {
    eprintln!("dfsched run: error: {msg}");
    std::process::exit(status)
}

/// The `DFSCHED_*` variables the options ask for.
fn dfsched_vars(args: &RunArgs) -> Vec<(&'static str, String)> {
    let mut vars = vec![
        ("DFSCHED_PRELOAD", "1".to_string()),
        ("DFSCHED_POLICY", args.policy.env_value().to_string()),
    ];
    let numbers = [
        ("DFSCHED_BALANCE_INTERVAL_MS", args.balance_interval_ms),
        ("DFSCHED_IMBALANCE_PCT", args.imbalance_pct),
        ("DFSCHED_HEAVY_LOAD_MILLI", args.heavy_load_milli),
        ("DFSCHED_SPLIT_AFTER_PASSES", args.split_after_passes),
        ("DFSCHED_MAX_MOVES_PER_PASS", args.max_moves_per_pass),
    ];
    vars.extend(
        numbers
            .into_iter()
            .filter_map(|(k, v)| Some((k, v?.to_string()))),
    );
    if let Some(on) = args.external_load {
        vars.push(("DFSCHED_EXTERNAL_LOAD", if on { "1" } else { "0" }.into()));
    }
    if args.no_agent {
        vars.push(("DFSCHED_AGENT", "off".into()));
    }
    if let Some(file) = &args.smt_profile {
        // Absolute, so that a program that changes directory before its
        // runtime starts still finds it.
        let file = std::path::absolute(file).unwrap_or_else(|_| file.clone());
        vars.push(("DFSCHED_SMT_PROFILE", file.display().to_string()));
    }
    vars
}

/// The option of `dfsched run` that sets `var`, if one does.
fn option_of(var: &str) -> Option<&'static str> {
    Some(match var {
        "DFSCHED_BALANCE_INTERVAL_MS" => "--balance-interval-ms",
        "DFSCHED_IMBALANCE_PCT" => "--imbalance-pct",
        "DFSCHED_HEAVY_LOAD_MILLI" => "--heavy-load-milli",
        "DFSCHED_SPLIT_AFTER_PASSES" => "--split-after-passes",
        "DFSCHED_MAX_MOVES_PER_PASS" => "--max-moves-per-pass",
        "DFSCHED_EXTERNAL_LOAD" => "--external-load",
        _ => return None,
    })
}

/// `text` on one line: its non-blank lines joined with `; ` (the agent's
/// reasons may span lines; the warning is one).
fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// The socket of the agent the program's runtime will talk to, read from
/// the configuration it will start with; `None` when it will not talk to
/// one: dfsched off (policy none, `DFSCHED_DISABLE`), no balancer thread
/// (the link runs from its passes), or `DFSCHED_AGENT=off`.
fn agent_socket(config: &dfsched::RuntimeConfig) -> Option<PathBuf> {
    // smt-pair's passes pin by the profile and exchange nothing with it.
    if !config.enabled || config.balance_interval_ms == 0 || config.smt_pair {
        return None;
    }
    match &config.agent {
        AgentMode::Off => None,
        AgentMode::Auto => Some(dfsched::agent::default_socket_path()),
        AgentMode::Path(p) => Some(p.clone()),
    }
}

/// `lib` first in an `LD_PRELOAD` list (ld.so takes `:` or spaces between
/// entries), once.
fn prepend_preload(lib: &Path, existing: Option<&OsStr>) -> OsString {
    let mut out = OsString::from(lib.as_os_str());
    if let Some(rest) = existing {
        let rest: Vec<&[u8]> = rest
            .as_encoded_bytes()
            .split(|b| *b == b':' || *b == b' ')
            .filter(|e| !e.is_empty() && *e != lib.as_os_str().as_encoded_bytes())
            .collect();
        for entry in rest {
            out.push(":");
            out.push(OsStr::from_bytes(entry));
        }
    }
    out
}

/// Finds `libdfsched.so` (see the module doc); the error names every place
/// looked at.
fn find_lib(flag: Option<&Path>, env: Option<OsString>) -> Result<PathBuf, String> {
    let check = |p: &Path, what: &str| -> Result<PathBuf, String> {
        if !p.is_file() {
            return Err(format!("{what} {} is not a file", p.display()));
        }
        // ld.so skips an LD_PRELOAD entry it cannot load with one line on
        // stderr and runs the program anyway: without dfsched, silently
        // to whoever does not read it. Refuse anything but a shared object.
        is_shared_object(p).map_err(|e| format!("{what} {}: {e}", p.display()))?;
        p.canonicalize()
            .map_err(|e| format!("{what} {}: {e}", p.display()))
    };
    if let Some(p) = flag {
        return check(p, "--lib");
    }
    if let Some(p) = env.filter(|p| !p.is_empty()) {
        return check(Path::new(&p), "$DFSCHED_LIB");
    }
    let exe = std::env::current_exe()
        .map_err(|e| format!("cannot find the dfsched binary's directory: {e}"))?;
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let beside = [dir.join("libdfsched.so"), dir.join("deps/libdfsched.so")];
    let newest = beside
        .iter()
        .filter_map(|p| Some((p.metadata().ok()?.modified().ok()?, p)))
        .max_by_key(|(t, _)| *t)
        .map(|(_, p)| p.clone());
    let installed = dir.join("../lib/libdfsched.so");
    if let Some(p) = newest.or_else(|| installed.is_file().then(|| installed.clone())) {
        return check(&p, "library");
    }
    Err(format!(
        "libdfsched.so not found: no --lib, no $DFSCHED_LIB, and none at {}, {} or {} \
         (build it with `cargo build --release`, or give --lib PATH)",
        beside[0].display(),
        beside[1].display(),
        installed.display()
    ))
}

/// `Ok` when `path` starts as an ELF shared object (`ET_DYN`) does; else
/// what it is not. (A PIE executable is `ET_DYN` too and passes: ld.so
/// then refuses it loudly, which is not the silent case this guards.)
fn is_shared_object(path: &Path) -> Result<(), String> {
    use std::io::Read;
    let mut head = [0u8; 18];
    let mut file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let n = file.read(&mut head).map_err(|e| e.to_string())?;
    if n < head.len() || &head[..4] != b"\x7fELF" {
        return Err("not a shared library (no ELF header)".into());
    }
    // e_type at offset 16, in the byte order EI_DATA (offset 5) names.
    let e_type = match head[5] {
        1 => u16::from_le_bytes([head[16], head[17]]),
        2 => u16::from_be_bytes([head[16], head[17]]),
        _ => return Err("not a shared library (bad ELF byte order)".into()),
    };
    const ET_DYN: u16 = 3;
    if e_type != ET_DYN {
        return Err(format!(
            "not a shared library (ELF type {e_type}, not ET_DYN)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_comes_first_in_ld_preload_and_only_once() {
        let lib = Path::new("/x/libdfsched.so");
        assert_eq!(prepend_preload(lib, None), "/x/libdfsched.so");
        assert_eq!(
            prepend_preload(lib, Some(OsStr::new("/a.so /x/libdfsched.so:/b.so"))),
            "/x/libdfsched.so:/a.so:/b.so"
        );
        assert_eq!(
            prepend_preload(lib, Some(OsStr::new(""))),
            "/x/libdfsched.so"
        );
    }

    fn config(vars: &[(&str, &str)]) -> dfsched::RuntimeConfig {
        dfsched::RuntimeConfig::from_vars(vars.iter().copied()).unwrap()
    }

    #[test]
    fn the_agent_socket_is_the_one_the_runtime_will_use() {
        assert_eq!(
            agent_socket(&config(&[("DFSCHED_POLICY", "co-thread")])),
            Some(dfsched::agent::default_socket_path())
        );
        assert_eq!(
            agent_socket(&config(&[("DFSCHED_AGENT", "/x/a.sock")])),
            Some(PathBuf::from("/x/a.sock"))
        );
    }

    #[test]
    fn no_agent_is_wanted_when_the_runtime_will_not_talk_to_one() {
        for vars in [
            [("DFSCHED_AGENT", "off"), ("DFSCHED_POLICY", "co-thread")],
            [("DFSCHED_AGENT", "/x/a.sock"), ("DFSCHED_POLICY", "none")],
            [("DFSCHED_AGENT", "/x/a.sock"), ("DFSCHED_DISABLE", "1")],
            [
                ("DFSCHED_AGENT", "auto"),
                ("DFSCHED_BALANCE_INTERVAL_MS", "0"),
            ],
        ] {
            assert_eq!(agent_socket(&config(&vars)), None, "{vars:?}");
        }
    }

    #[test]
    fn help_states_the_on_demand_agents_idle_exit() {
        let secs = dfsched::agent::ON_DEMAND_IDLE_EXIT.as_secs();
        let text = LONG_ABOUT.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            text.contains(&format!("exits by itself {secs} s after the last one")),
            "{text}"
        );
    }

    #[test]
    fn the_warning_is_one_line() {
        assert_eq!(one_line("a failed:\n  error: x\n\n"), "a failed:; error: x");
    }

    #[test]
    fn a_missing_library_names_where_it_looked() {
        let e = find_lib(Some(Path::new("/nonexistent/libdfsched.so")), None).unwrap_err();
        assert!(e.contains("--lib /nonexistent/libdfsched.so"), "{e}");
        let e = find_lib(None, Some("/nowhere/lib.so".into())).unwrap_err();
        assert!(e.contains("$DFSCHED_LIB /nowhere/lib.so"), "{e}");
    }
}
