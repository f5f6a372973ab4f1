//! Helpers shared by the `dfsched run` test files (tests/run.rs,
//! tests/run_agent.rs), included by each with `#[path]`: the fixture
//! programs compiled once per test process (gcc, g++, rustc; `None` after a
//! SKIP message when the compiler is missing), `/proc` mask reading, and
//! [`Running`], a fixture started under `dfsched run` and read up to its
//! "ready" line. The benchmark tests that read worker threads' masks or run
//! programs under `dfsched run` (tests/bench_spin.rs, bench_cothreads.rs)
//! include it too, for the mask readers and [`clean`]. The premise rule
//! ([`skip_or_fail`], [`root_or_skip`]) is dfsched-premise's, re-exported.
//!
//! Invariant: every command built here runs with the test's own `DFSCHED_*`
//! and `LD_PRELOAD` removed and `DFSCHED_AGENT=off`, so that no test talks
//! to, or starts, an agent on the user's default socket; a test that wants
//! an agent sets `DFSCHED_AGENT` to a private socket of its own.

// Each test file uses a different subset of these helpers.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

// Each test binary uses a different subset of these too.
#[allow(unused_imports)]
pub use dfsched_premise::{root_or_skip, skip_or_fail};

pub fn dfsched() -> &'static str {
    env!("CARGO_BIN_EXE_dfsched")
}

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/run_fixtures")
        .join(name)
}

/// A per-process scratch directory for the compiled fixtures, under the
/// build's own temporary directory (`target/tmp`), never the machine's
/// `/tmp`. Those of test processes that are gone are removed first, so
/// runs do not pile up.
pub fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = Path::new(env!("CARGO_TARGET_TMPDIR"));
        const PREFIX: &str = "run-fixtures-";
        if let Ok(entries) = std::fs::read_dir(base) {
            for e in entries.flatten() {
                let name = e.file_name();
                let pid = name.to_str().and_then(|n| n.strip_prefix(PREFIX));
                if let Some(pid) = pid.and_then(|p| p.parse::<u32>().ok()) {
                    if !Path::new(&format!("/proc/{pid}")).exists() {
                        let _ = std::fs::remove_dir_all(e.path());
                    }
                }
            }
        }
        let dir = base.join(format!("{PREFIX}{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    })
}

pub fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Compiles fixture `src` into `out` with `tool PRE -o out src POST` (link
/// flags go after the source); the program, or `None` (after saying why)
/// if the compiler is missing.
pub fn compile(tool: &str, pre: &[&str], src: &str, post: &[&str], out: &str) -> Option<PathBuf> {
    if !have(tool) {
        skip_or_fail(&format!("SKIP: no {tool} on this machine"));
        return None;
    }
    let prog = scratch().join(out);
    let o = Command::new(tool)
        .args(pre)
        .arg("-o")
        .arg(&prog)
        .arg(fixture(src))
        .args(post)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{tool} {src} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    Some(prog)
}

pub fn c_program() -> Option<PathBuf> {
    static P: OnceLock<Option<PathBuf>> = OnceLock::new();
    P.get_or_init(|| {
        compile(
            "gcc",
            &["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-pthread"],
            "threads.c",
            &["-ldl"],
            "threads_c",
        )
    })
    .clone()
}

pub fn cpp_program() -> Option<PathBuf> {
    static P: OnceLock<Option<PathBuf>> = OnceLock::new();
    P.get_or_init(|| {
        compile(
            "g++",
            &[
                "-std=c++17",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-O1",
                "-pthread",
            ],
            "threads.cpp",
            &[],
            "threads_cpp",
        )
    })
    .clone()
}

pub fn rust_program() -> Option<PathBuf> {
    static P: OnceLock<Option<PathBuf>> = OnceLock::new();
    P.get_or_init(|| {
        let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
        compile(
            &rustc,
            &["--edition", "2021", "-O"],
            "threads.rs",
            &[],
            "threads_rs",
        )
    })
    .clone()
}

/// tests/run_fixtures/named.c (threads named by `pthread_setname_np`, no
/// dfsched in it), compiled once per test process.
pub fn named_program() -> Option<PathBuf> {
    static P: OnceLock<Option<PathBuf>> = OnceLock::new();
    P.get_or_init(|| {
        compile(
            "gcc",
            &["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-pthread"],
            "named.c",
            &[],
            "named_c",
        )
    })
    .clone()
}

/// The CPUs this test may use.
pub fn allowed() -> BTreeSet<u32> {
    dfsched::sys::get_affinity(0)
        .unwrap()
        .iter()
        .map(|c| c.0)
        .collect()
}

/// The allowed CPUs if there are at least two, else `None` after saying
/// why the test skips.
pub fn two_cpus(test: &str) -> Option<BTreeSet<u32>> {
    let cpus = allowed();
    if cpus.len() < 2 {
        skip_or_fail(&format!(
            "SKIP {test}: needs 2 allowed CPUs, this process has {}",
            cpus.len()
        ));
        return None;
    }
    Some(cpus)
}

/// Parses a cpulist (`0-2,5`).
pub fn cpulist(text: &str) -> BTreeSet<u32> {
    let mut set = BTreeSet::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => set.extend(a.parse::<u32>().unwrap()..=b.parse().unwrap()),
            None => {
                set.insert(part.parse().unwrap());
            }
        }
    }
    set
}

/// `Cpus_allowed_list` of thread `tid` of process `pid`.
pub fn cpus_allowed(pid: u32, tid: u32) -> BTreeSet<u32> {
    let path = format!("/proc/{pid}/task/{tid}/status");
    let status = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap_or_else(|| panic!("no Cpus_allowed_list in {path}"));
    cpulist(line)
}

/// `Cpus_allowed_list` of every thread of process `pid` whose name
/// (`comm`) starts with `prefix`, with that name; a thread that ends while
/// it is read is left out.
pub fn thread_masks(pid: u32, prefix: &str) -> Vec<(String, BTreeSet<u32>)> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let Ok(comm) = std::fs::read_to_string(t.path().join("comm")) else {
            continue; // the thread ended meanwhile
        };
        let Ok(status) = std::fs::read_to_string(t.path().join("status")) else {
            continue;
        };
        if comm.trim().starts_with(prefix) {
            let list = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .unwrap();
            out.push((comm.trim().to_string(), cpulist(list)));
        }
    }
    out
}

/// Waits (at most 30 s) until `pred` holds of process `pid`'s thread
/// masks (by name); the last reading and whether it held.
pub fn wait_masks(
    pid: u32,
    pred: impl Fn(&[(String, BTreeSet<u32>)]) -> bool,
) -> (Vec<(String, BTreeSet<u32>)>, bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let masks = thread_masks(pid, "");
        if pred(&masks) {
            return (masks, true);
        }
        if Instant::now() > deadline {
            return (masks, false);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The masks of the threads named `name`.
pub fn masks_named<'a>(masks: &'a [(String, BTreeSet<u32>)], name: &str) -> Vec<&'a BTreeSet<u32>> {
    masks
        .iter()
        .filter(|(n, _)| n == name)
        .map(|(_, m)| m)
        .collect()
}

/// `n` threads named `name`, all on the same single CPU.
pub fn together_on_one_cpu(masks: &[(String, BTreeSet<u32>)], name: &str, n: usize) -> bool {
    let g = masks_named(masks, name);
    g.len() == n && g[0].len() == 1 && g.iter().all(|m| *m == g[0])
}

/// The rules file of the name-rules tests (tests/rules.rs, attach.rs) for
/// [`named_program`]'s threads: `worker-N` and `other-N` threads in DFs by
/// their suffix, except `other-1`, which is left alone.
pub const NAME_RULES: &str = r#"
# other-1 would match the DF rule below: the first match wins.
[[rule]]
thread = "other-1"
leave = true

[[rule]]
thread = "*-*"
df = "suffix"
"#;

/// A command with the test's own dfsched and preload variables removed,
/// and the agent off (see the module doc).
pub fn clean(mut cmd: Command) -> Command {
    for (k, _) in std::env::vars_os() {
        if k.to_str()
            .is_some_and(|k| k.starts_with("DFSCHED_") || k == "LD_PRELOAD")
        {
            cmd.env_remove(k);
        }
    }
    cmd.env("DFSCHED_AGENT", "off");
    cmd
}

/// `dfsched run ARGS…` as a command (not started).
pub fn run_cmd(args: &[&str], program: &Path, program_args: &[&str]) -> Command {
    let mut cmd = clean(Command::new(dfsched()));
    cmd.arg("run")
        .args(args)
        .arg("--")
        .arg(program)
        .args(program_args);
    cmd
}

/// A fixture program running under `dfsched run`, its threads spinning.
pub struct Running {
    pub child: Child,
    pub stdin: Option<ChildStdin>,
    pub out: BufReader<ChildStdout>,
    pub pid: u32,
    /// The spinning threads' tids, and the main thread's (the pid).
    pub tids: Vec<u32>,
    /// Lines other than pid/tid/ready, in order.
    pub extra: Vec<String>,
}

impl Running {
    /// Starts the program and reads its output up to its "ready" line. The
    /// program must be the process started (`dfsched run` execs it).
    pub fn start(cmd: Command) -> Running {
        Self::start_inner(cmd, true)
    }

    /// As [`Running::start`], for a program started by the process started
    /// (a grandchild): its pid is the one it prints.
    pub fn start_descendant(cmd: Command) -> Running {
        Self::start_inner(cmd, false)
    }

    fn start_inner(mut cmd: Command, same_pid: bool) -> Running {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let out = BufReader::new(child.stdout.take().unwrap());
        let mut r = Running {
            pid: child.id(),
            child,
            stdin,
            out,
            tids: Vec::new(),
            extra: Vec::new(),
        };
        loop {
            let mut line = String::new();
            if r.out.read_line(&mut line).unwrap() == 0 {
                let status = r.child.wait().unwrap();
                panic!("the program ended ({status}) before it was ready");
            }
            let line = line.trim();
            if let Some(pid) = line.strip_prefix("pid ") {
                let pid: u32 = pid.parse().unwrap();
                if same_pid {
                    // exec keeps the pid: the program is the process we started.
                    assert_eq!(pid, r.pid);
                }
                r.pid = pid;
                r.tids.push(pid);
            } else if let Some(tid) = line.strip_prefix("tid ") {
                r.tids.push(tid.parse().unwrap());
            } else if line.starts_with("ready") {
                return r;
            } else {
                r.extra.push(line.to_string());
            }
        }
    }

    /// Every thread's (tid, Cpus_allowed_list), main thread first.
    pub fn masks(&self) -> Vec<(u32, BTreeSet<u32>)> {
        self.tids
            .iter()
            .map(|&t| (t, cpus_allowed(self.pid, t)))
            .collect()
    }

    /// Lines printed after "ready", up to one starting with `prefix`.
    pub fn line_starting(&mut self, prefix: &str) -> String {
        loop {
            let mut line = String::new();
            assert!(
                self.out.read_line(&mut line).unwrap() > 0,
                "no {prefix:?} line"
            );
            if let Some(rest) = line.trim().strip_prefix(prefix) {
                return rest.trim().to_string();
            }
        }
    }

    /// Closes stdin (the program's signal to stop) and waits for it.
    pub fn finish(mut self) -> ExitStatus {
        drop(self.stdin.take());
        self.child.wait().unwrap()
    }
}
