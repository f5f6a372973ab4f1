//! Helpers shared by the agent test files (tests/agent.rs,
//! tests/agent_load.rs), included by each with `mod agent_support;`: a
//! private temporary directory for an agent's socket ([`TempDir`]), a
//! detached agent stopped on drop ([`AgentGuard`]), the two-CPU skip check
//! ([`two_cpus`]), and [`ChildProc`], this test binary started again to run
//! one test body as a helper process that answers lines on stdin; for a
//! runtime on the scx body without a sched_ext kernel, a fake scheduler
//! socket ([`fake_scheduler`], root only: [`is_root`]) and [`ExtGranted`].
//! The premise rule ([`skip_or_fail`], [`is_root`], [`root_or_skip`]) is
//! dfsched-premise's, re-exported.
//!
//! Invariants: every agent here listens on a socket in a private (0700)
//! temporary directory, never on the default socket; every wait is for a
//! state, bounded by [`DEADLINE`] only so that a broken build fails instead
//! of hanging. A helper's body must be a `#[test]` of the binary that
//! starts it: [`rerun`] starts `current_exe()`, which is that binary.

// Each test file uses a different subset of these helpers.
#![allow(dead_code)]

use dfsched::agent::{AgentMode, Client, Status};
use dfsched::{CpuId, Runtime, RuntimeConfig};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

// Each test binary uses a different subset of these too.
#[allow(unused_imports)]
pub use dfsched_premise::{is_root, root_or_skip, skip_or_fail};

pub const BIN: &str = env!("CARGO_BIN_EXE_dfsched");
/// Upper bound on waiting for a state, so a failure cannot hang the suite.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// A private temporary directory for an agent's socket, removed on drop.
/// Made by `tempfile`: a fresh random name created with `mkdir` (which
/// fails if the name exists), so no other user can have made it, or a
/// symlink in its place, first. Mode 0700 (asked for: `tempfile` otherwise
/// leaves a directory to the umask), which the agent's directory check
/// wants of a socket's directory (`ensure_private_dir`, `check_dir`).
pub struct TempDir(tempfile::TempDir);

impl TempDir {
    /// A new empty directory of mode 0700 named `dfsched-agent-TAG-` and six
    /// random letters. The name is kept short: the agent's socket and lock
    /// live in it, and a socket path must fit in 107 bytes.
    pub fn new(tag: &str) -> TempDir {
        let dir = tempfile::Builder::new()
            .prefix(&format!("dfsched-agent-{tag}-"))
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()
            .unwrap();
        TempDir(dir)
    }
    pub fn path(&self) -> &Path {
        self.0.path()
    }
    pub fn sock(&self) -> PathBuf {
        self.path().join("agent.sock")
    }
    pub fn lock(&self) -> PathBuf {
        self.path().join("agent.sock.lock")
    }
}

/// A detached agent listening on the socket it holds, stopped on drop.
/// (Built directly, it adopts an agent started some other way.)
pub struct AgentGuard(pub PathBuf);

impl AgentGuard {
    /// Starts `dfsched agent --socket SOCK ARGS` (which detaches).
    pub fn start(sock: &Path, args: &[&str]) -> AgentGuard {
        let out = Command::new(BIN)
            .args(["agent", "--socket"])
            .arg(sock)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "agent start: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        AgentGuard(sock.to_path_buf())
    }

    pub fn status(&self) -> Status {
        Client::connect(&self.0).unwrap().status().unwrap()
    }

    /// Waits until `pred` holds of the agent's status; the last status.
    pub fn wait_for(&self, what: &str, pred: impl Fn(&Status) -> bool) -> Status {
        let start = Instant::now();
        loop {
            let s = self.status();
            if pred(&s) {
                return s;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "never reached: {what}; last {s:#?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `dfsched agent --stop`, which must succeed.
    pub fn stop(&self) {
        let out = self.stop_command().output().unwrap();
        assert!(out.status.success(), "{out:?}");
    }

    fn stop_command(&self) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.args(["agent", "--stop", "--socket"]).arg(&self.0);
        cmd
    }
}

impl Drop for AgentGuard {
    fn drop(&mut self) {
        let _ = self.stop_command().output();
    }
}

/// The first two CPUs this process may use, or `None` after saying why
/// the test is skipped.
pub fn two_cpus(test: &str) -> Option<(CpuId, CpuId)> {
    let allowed = dfsched::sys::get_affinity(0).unwrap();
    let mut it = allowed.iter();
    match (it.next(), it.next()) {
        (Some(a), Some(b)) => Some((a, b)),
        _ => {
            skip_or_fail(&format!(
                "skipped {test}: needs two allowed CPUs, have {allowed}"
            ));
            None
        }
    }
}

/// This test binary again, running only test `name`, on one test thread,
/// with its output not captured. The caller adds the environment that
/// tells `name` what to do.
pub fn rerun(name: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", name, "--nocapture", "--test-threads=1"]);
    cmd
}

/// A helper process: a test body of this binary (started by [`rerun`])
/// that prints `PREFIX:ready`, then answers each line on its stdin with
/// one `PREFIX:answer` line, and exits at EOF. Killed on drop.
pub struct ChildProc {
    pub child: Child,
    /// `None` once taken (dropping it is the helper's EOF).
    pub stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    /// What starts an answer, e.g. `"H3:"`.
    prefix: &'static str,
}

impl ChildProc {
    /// Spawns `cmd` with piped stdin and stdout and waits for its ready
    /// line.
    pub fn spawn(mut cmd: Command, prefix: &'static str) -> ChildProc {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut c = ChildProc {
            child,
            stdin,
            stdout,
            prefix,
        };
        assert_eq!(c.answer(), "ready");
        c
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a command line, returns the answer.
    pub fn ask(&mut self, cmd: &str) -> String {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{cmd}").unwrap();
        stdin.flush().unwrap();
        self.answer()
    }

    /// The next answer line, without its prefix.
    pub fn answer(&mut self) -> String {
        let mut line = String::new();
        loop {
            line.clear();
            assert!(self.stdout.read_line(&mut line).unwrap() > 0, "child ended");
            // libtest may print "test <name> ... " first.
            if let Some((_, answer)) = line.trim_end().split_once(self.prefix) {
                return answer.to_string();
            }
        }
    }
}

impl Drop for ChildProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A runtime configuration whose balancer runs only when the test calls
/// `balance_now` (interval 0) and that talks to the agent at `sock`; the
/// rest is the default (a test overrides fields with `..manual_config(s)`).
pub fn manual_config(sock: &Path) -> RuntimeConfig {
    RuntimeConfig {
        balance_interval_ms: 0,
        agent: AgentMode::Path(sock.to_path_buf()),
        ..RuntimeConfig::default()
    }
}

/// Runs `n` balancer passes of `rt` now, one after the other, each to its
/// end (the runtimes of [`manual_config`] run no others).
pub fn balance_passes(rt: &Runtime, n: u32) {
    for _ in 0..n {
        rt.balance_now().unwrap();
    }
}

/// A fake sched_ext scheduler socket (`dfsched-scx`'s, as the runtime sees
/// it) at `DIR/scx.sock`, served from this process: every request line on
/// every connection is answered `{"ok":true}`. Its threads end with the
/// test process.
pub fn fake_scheduler(dir: &TempDir) -> PathBuf {
    let path = dir.path().join("scx.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            std::thread::spawn(move || {
                let mut w = stream.try_clone().unwrap();
                for _ in BufReader::new(stream).lines().map_while(Result::ok) {
                    if w.write_all(b"{\"ok\":true}\n").is_err() {
                        return;
                    }
                }
            });
        }
    });
    path
}

/// The kernel's affinity calls, but `SCHED_EXT` granted without asking the
/// kernel (this one has no sched_ext): with [`fake_scheduler`], a runtime
/// stays on the scx body.
pub struct ExtGranted;

impl dfsched::sys::SysOps for ExtGranted {
    fn get_affinity(&self, tid: u64) -> Result<dfsched::CpuSet, dfsched::Error> {
        dfsched::sys::RealSys.get_affinity(tid)
    }
    fn set_affinity(&self, tid: u64, cpus: &dfsched::CpuSet) -> Result<(), dfsched::Error> {
        dfsched::sys::RealSys.set_affinity(tid, cpus)
    }
    fn affinity_if_not(
        &self,
        tid: u64,
        expected: &dfsched::CpuSet,
    ) -> Result<Option<dfsched::CpuSet>, dfsched::Error> {
        dfsched::sys::RealSys.affinity_if_not(tid, expected)
    }
    fn stored_mask(&self, tid: u64) -> Result<dfsched::CpuSet, dfsched::Error> {
        dfsched::sys::RealSys.stored_mask(tid)
    }
    fn set_sched_ext(&self, _tid: u64) -> Result<(), dfsched::Error> {
        Ok(())
    }
}
