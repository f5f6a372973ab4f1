//! `dfsched run` and the agent: it starts `dfsched agent` on demand on the
//! socket the program's runtime will use, the program's runtime registers
//! with it, and a program that exits, aborts, or forks a child that outlives
//! it leaves no record behind; when no agent can be started the program runs
//! anyway with one warning; `--no-agent`, `--policy none` and
//! `--balance-interval-ms 0` start none.
//!
//! Every test has its own agent socket in a private (0700) directory of its
//! own, given to `dfsched run` as `DFSCHED_AGENT`, never the user's default
//! one; [`PrivateAgent`] stops whatever agent listens there when the test
//! ends, pass or fail. The waits below are correctness waits (the runtime
//! registers on its first balancer pass; the agent drops a record when its
//! connection closes, or on its next tick when the pid is gone), bounded at
//! [`PATIENCE`], never timing assertions. The C fixture is built with gcc;
//! tests skip with a message without it.

#[path = "run_fixtures/support.rs"]
mod support;

use dfsched::agent::{self, Client};
use std::collections::BTreeSet;
use std::io::{BufRead, Read, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::{c_program, run_cmd, scratch, Running};

/// The longest a test waits for the agent to see a change.
const PATIENCE: Duration = Duration::from_secs(10);

/// SIGABRT's number on Linux.
const SIGABRT: i32 = 6;

/// The start of the warning `dfsched run` prints when it cannot start the
/// agent.
const WARNING: &str = "dfsched run: warning: could not start the agent (";

/// A socket path for one test's agent, in a fresh 0700 directory. Dropping
/// it stops any agent listening there and removes the directory.
struct PrivateAgent {
    dir: PathBuf,
    socket: PathBuf,
}

impl PrivateAgent {
    /// A fresh directory `agent-NAME` in the scratch directory (short: a
    /// Unix socket path has at most 107 bytes).
    fn new(name: &str) -> PrivateAgent {
        let dir = scratch().join(format!("agent-{name}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
        let socket = dir.join("agent.sock");
        PrivateAgent { dir, socket }
    }

    /// `dfsched run ARGS -- program program_args` using this socket.
    fn run_cmd(&self, args: &[&str], program: &Path, program_args: &[&str]) -> Command {
        let mut cmd = run_cmd(args, program, program_args);
        cmd.env("DFSCHED_AGENT", &self.socket);
        cmd
    }

    fn is_live(&self) -> bool {
        agent::is_live(&self.socket)
    }

    /// The agent's status; panics if it does not answer.
    fn status(&self) -> agent::Status {
        Client::connect(&self.socket)
            .and_then(|mut c| c.status())
            .unwrap_or_else(|e| panic!("agent on {}: {e}", self.socket.display()))
    }

    /// The pids the agent has records for.
    fn registered(&self) -> BTreeSet<u32> {
        self.status().processes.iter().map(|p| p.pid).collect()
    }

    /// Polls the registered pids until `ok` holds of them (at most
    /// [`PATIENCE`]); returns the last ones read.
    fn registered_until(&self, ok: impl Fn(&BTreeSet<u32>) -> bool) -> BTreeSet<u32> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let pids = self.registered();
            if ok(&pids) || Instant::now() > deadline {
                return pids;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Asserts the agent comes to list `pid` (its runtime registers on its
    /// first balancer pass).
    fn assert_comes_to_list(&self, pid: u32) {
        let pids = self.registered_until(|p| p.contains(&pid));
        assert!(
            pids.contains(&pid),
            "the agent never listed {pid}: {pids:?}"
        );
    }

    /// Asserts the agent comes to list none of `pids` (stale records are
    /// dropped on disconnect, or by the pid check of the agent's tick).
    fn assert_comes_to_forget(&self, pids: &[u32]) {
        let left = self.registered_until(|p| pids.iter().all(|q| !p.contains(q)));
        assert!(
            pids.iter().all(|q| !left.contains(q)),
            "stale records: the agent still lists {:?} of {pids:?}",
            left
        );
    }
}

impl Drop for PrivateAgent {
    fn drop(&mut self) {
        if let Ok(mut c) = Client::connect(&self.socket) {
            let _ = c.stop();
            let deadline = Instant::now() + PATIENCE;
            while agent::is_live(&self.socket) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The parent pid of `pid`, from `/proc/PID/stat`.
fn ppid(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // "pid (comm) state ppid …": comm may hold spaces, so after the last ')'.
    let after = &stat[stat.rfind(')').unwrap() + 1..];
    after.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Starts `cmd` (a fixture under `dfsched run`) with its stderr captured.
fn start_with_stderr(mut cmd: Command) -> Running {
    cmd.stderr(Stdio::piped());
    Running::start(cmd)
}

/// Everything the program wrote on stderr (call once its stdin is closed).
fn stderr_of(r: &mut Running) -> String {
    let mut text = String::new();
    r.child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    text
}

#[test]
fn run_starts_the_agent_on_demand_and_the_program_registers_with_it() {
    let Some(program) = c_program() else { return };
    let a = PrivateAgent::new("start");
    assert!(!a.is_live());
    let mut r = start_with_stderr(a.run_cmd(&["--policy", "co-thread"], &program, &["spin", "2"]));
    // dfsched run returned from ensuring the agent before it exec'd the
    // program, so it listens by now.
    assert!(a.is_live(), "no agent on {}", a.socket.display());
    a.assert_comes_to_list(r.pid);
    // Detached: not a child of the program (which might wait() for it).
    let agent_pid = a.status().agent_pid;
    assert_ne!(ppid(agent_pid), r.pid, "the agent is the program's child");
    drop(r.stdin.take());
    let stderr = stderr_of(&mut r);
    assert!(r.child.wait().unwrap().success());
    // Nothing said when it works: the program's stderr is the user's.
    assert_eq!(stderr, "");
    // A second program joins the same agent, and nothing is printed.
    let o = a
        .run_cmd(&["--policy", "co-thread"], &program, &["exit", "0"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    assert_eq!(String::from_utf8_lossy(&o.stderr), "");
    assert_eq!(
        a.status().agent_pid,
        agent_pid,
        "a second agent was started"
    );
}

#[test]
fn a_program_that_exits_leaves_no_record_in_the_agent() {
    let Some(program) = c_program() else { return };
    let a = PrivateAgent::new("exit");
    let r = Running::start(a.run_cmd(&["--policy", "co-thread"], &program, &["spin", "2"]));
    let pid = r.pid;
    a.assert_comes_to_list(pid);
    assert!(r.finish().success());
    a.assert_comes_to_forget(&[pid]);
}

#[test]
fn a_program_that_aborts_leaves_no_record_in_the_agent() {
    let Some(program) = c_program() else { return };
    let a = PrivateAgent::new("abort");
    let r = Running::start(a.run_cmd(&["--policy", "co-thread"], &program, &["crash", "2"]));
    let pid = r.pid;
    a.assert_comes_to_list(pid);
    let status = r.finish();
    assert_eq!(status.signal(), Some(SIGABRT), "{status:?}");
    a.assert_comes_to_forget(&[pid]);
}

#[test]
fn a_forked_child_outliving_its_parent_leaves_no_record_of_either() {
    let Some(program) = c_program() else { return };
    let a = PrivateAgent::new("fork");
    let mut r = Running::start(a.run_cmd(&["--policy", "co-thread"], &program, &["orphan", "2"]));
    let parent = r.pid;
    a.assert_comes_to_list(parent);
    // The parent forks and exits at once; the child runs on, holding the
    // parent's agent connection (inherited by fork) and one of its own.
    r.stdin.as_mut().unwrap().write_all(b"fork\n").unwrap();
    let child: u32 = r.line_starting("child-pid").parse().unwrap();
    r.line_starting("child-ready");
    assert!(r.child.wait().unwrap().success());
    // The parent is gone though its connection lives on in the child: the
    // agent's pid check drops it; the child registers for itself.
    let pids = a.registered_until(|p| p.contains(&child) && !p.contains(&parent));
    assert!(
        pids.contains(&child) && !pids.contains(&parent),
        "want the child {child} and not the exited parent {parent}: {pids:?}"
    );
    // The child ends when stdin closes; its stdout (the last holder) with it.
    drop(r.stdin.take());
    let rest: Vec<String> = (&mut r.out).lines().map(Result::unwrap).collect();
    assert!(rest.is_empty(), "{rest:?}");
    a.assert_comes_to_forget(&[parent, child]);
}

/// Runs `threads exit 42` under `dfsched run` with the agent's socket at
/// `socket`, where no agent can be started, and asserts the program ran,
/// its status passed through, and stderr holds one warning naming `shown`.
fn assert_runs_without_the_agent(program: &Path, socket: &Path, shown: &Path) {
    let mut cmd = run_cmd(&["--policy", "co-thread"], program, &["exit", "42"]);
    cmd.env("DFSCHED_AGENT", socket);
    let o = cmd.output().unwrap();
    assert_eq!(o.status.code(), Some(42), "{o:?}");
    let stderr = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "want one warning line: {stderr}");
    assert!(lines[0].starts_with(WARNING), "{stderr}");
    assert!(lines[0].ends_with("); continuing without it"), "{stderr}");
    assert!(lines[0].contains(&shown.display().to_string()), "{stderr}");
    assert!(!agent::is_live(socket));
}

#[test]
fn when_the_agent_cannot_start_the_program_runs_with_one_warning() {
    let Some(program) = c_program() else { return };
    let dir = scratch().join("no-agent-here");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    // A directory others may write to: the agent refuses it.
    let open = dir.join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    assert_runs_without_the_agent(&program, &open.join("agent.sock"), &open);
    // A path under a regular file: no directory to put a socket in.
    let file = dir.join("file");
    std::fs::write(&file, "").unwrap();
    assert_runs_without_the_agent(&program, &file.join("agent.sock"), &file);
    // The program's exit status passes through an abort too.
    let mut cmd = run_cmd(&[], &program, &["abort"]);
    cmd.env("DFSCHED_AGENT", open.join("agent.sock"));
    let o = cmd.output().unwrap();
    assert_eq!(o.status.signal(), Some(SIGABRT), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stderr).contains(WARNING));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn no_agent_is_started_with_no_agent_policy_none_or_no_balancer() {
    let a = PrivateAgent::new("none");
    let show = ["-c", "echo \"$DFSCHED_AGENT\""];
    let o = a
        .run_cmd(&["--no-agent"], Path::new("sh"), &show)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    // The program's runtime is told too, so it will not look for one.
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "off");
    assert_eq!(String::from_utf8_lossy(&o.stderr), "");
    assert!(!a.is_live());
    assert!(!a.socket.exists());
    // Policy none: dfsched does nothing, agent included.
    let o = a
        .run_cmd(&["--policy", "none"], Path::new("true"), &[])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    assert!(!a.is_live());
    // No balancer thread: the runtime would never talk to an agent.
    let o = a
        .run_cmd(&["--balance-interval-ms", "0"], Path::new("true"), &[])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    assert!(!a.is_live());
    // The same command without any of these does start it (so the two above
    // would have seen one).
    let o = a.run_cmd(&[], Path::new("true"), &[]).output().unwrap();
    assert!(o.status.success(), "{o:?}");
    assert!(a.is_live());
}

/// The names of `pid`'s environment variables.
fn environ_names(pid: u32) -> Vec<String> {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    raw.split(|&b| b == 0)
        .filter(|v| !v.is_empty())
        .map(|v| {
            let v = String::from_utf8_lossy(v);
            v.split_once('=').map_or(&*v, |(k, _)| k).to_owned()
        })
        .collect()
}

#[test]
fn an_agent_started_from_a_program_under_dfsched_is_not_itself_under_dfsched() {
    // The outer run preloads libdfsched.so and sets DFSCHED_* for `sh`; the
    // inner run (the dfsched binary, preloaded) starts the agent. Without
    // clearing them the agent would run a runtime and register with itself.
    let a = PrivateAgent::new("nested");
    let inner = format!(
        "DFSCHED_AGENT='{}' exec '{}' run -- true",
        a.socket.display(),
        support::dfsched()
    );
    let o = a
        .run_cmd(&["--no-agent"], Path::new("sh"), &["-c", &inner])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    assert!(a.is_live(), "the inner run started no agent");
    let status = a.status();
    let names = environ_names(status.agent_pid);
    assert!(
        !names
            .iter()
            .any(|n| n == "LD_PRELOAD" || n.starts_with("DFSCHED_")),
        "the agent inherited dfsched's environment: {names:?}"
    );
    assert!(
        status.processes.iter().all(|p| p.pid != status.agent_pid),
        "the agent registered with itself: {:?}",
        status.processes
    );
}

#[test]
fn an_agent_started_on_demand_holds_none_of_the_callers_files() {
    // A caller reading a pipe until its end would wait as long as the agent
    // lives if the agent kept an inherited write end; a file stands in for
    // it here (fd 7, opened by the shell without close-on-exec).
    let a = PrivateAgent::new("fds");
    let held = a.dir.join("held-by-caller");
    let script = format!(
        "exec 7>'{}'; DFSCHED_AGENT='{}' exec '{}' run -- true",
        held.display(),
        a.socket.display(),
        support::dfsched()
    );
    let o = support::clean(Command::new("sh"))
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    assert!(a.is_live());
    let agent_pid = a.status().agent_pid;
    let fd_dir = format!("/proc/{agent_pid}/fd");
    let targets: Vec<PathBuf> = std::fs::read_dir(&fd_dir)
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .collect();
    assert!(
        !targets.iter().any(|t| t == &held),
        "the agent holds the caller's file: {targets:?}"
    );
}
