//! `dfsched agent` end to end: the socket's permissions, a second agent
//! refused, a stale socket replaced, malformed and oversized requests
//! answered with errors that change nothing, a peer of another uid refused,
//! no state left by a process that exits or is SIGKILLed, two runtimes in
//! two processes seeing each other's load, and two processes sharing a pipe
//! placed on one home (read back with `sched_getaffinity`).
//!
//! Runtimes run in child processes: this test binary started again with
//! `AGENT_TEST_CHILD_THREADS` set, which makes [`child_process_body`] the
//! child's whole life (see there for its line protocol on stdin/stdout).
//! Every wait is for a state to be reached (bounded by [`DEADLINE`], only so
//! that a broken build fails instead of hanging); nothing is timed.
//!
//! The temporary directory, agent guard and helper-process plumbing shared
//! with tests/agent_load.rs are in tests/agent_support/mod.rs; that the
//! directory is private and fresh is checked here once.

mod agent_support;

use agent_support::{
    rerun, root_or_skip, skip_or_fail, AgentGuard, ChildProc, TempDir, BIN, DEADLINE,
};
use dfsched::agent::{Client, ErrorKind, Status};
use std::io::BufRead;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Set in children; names what the child does.
const CHILD_ENV: &str = "AGENT_TEST_CHILD_THREADS";
/// The agent's arguments here: a short tick, so states are reached soon.
const TICK: &[&str] = &["--tick-ms", "20"];

#[test]
fn socket_is_private_and_a_second_agent_is_refused_then_stop_removes_it() {
    let dir = TempDir::new("perm");
    let agent = AgentGuard::start(&dir.sock(), TICK);
    let mode = std::fs::metadata(dir.sock()).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "socket mode {mode:o}");
    let dir_mode = std::fs::metadata(dir.path()).unwrap().permissions().mode();
    assert_eq!(dir_mode & 0o777, 0o700);
    for args in [&["agent"][..], &["agent", "--foreground"][..]] {
        let out = Command::new(BIN)
            .args(args)
            .arg("--socket")
            .arg(dir.sock())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("already running"), "{err}");
    }
    assert!(agent.status().processes.is_empty());
    let out = Command::new(BIN)
        .args(["agent", "--stop", "--socket"])
        .arg(dir.sock())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(!dir.sock().exists(), "the socket is removed on stop");
    let out = Command::new(BIN)
        .args(["agent", "--status", "--socket"])
        .arg(dir.sock())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no dfsched agent is listening"));
}

/// The premise of every agent test here: `TempDir` is a fresh directory of
/// ours, mode 0700 (`tempfile` leaves a directory to the umask unless
/// asked), that the agent's own check accepts, named apart from any other
/// of the same tag, with room for a socket path, and gone after drop.
#[test]
fn temp_dirs_are_private_fresh_and_accepted_by_the_agent() {
    let (a, b) = (TempDir::new("priv"), TempDir::new("priv"));
    assert_ne!(a.path(), b.path(), "two directories of one tag");
    let meta = std::fs::symlink_metadata(a.path()).unwrap();
    assert!(meta.file_type().is_dir());
    // SAFETY: geteuid has no preconditions.
    assert_eq!(meta.uid(), unsafe { libc::geteuid() });
    assert_eq!(meta.mode() & 0o7777, 0o700, "mode {:o}", meta.mode());
    dfsched::agent::ensure_private_dir(a.path()).unwrap();
    // The longest path an agent binds in one: well inside sun_path's 108.
    let lock = a.lock();
    assert!(lock.as_os_str().len() < 100, "{}", lock.display());
    let name = a.path().file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("dfsched-agent-priv-"), "{name}");
    let path = a.path().to_path_buf();
    drop(a);
    assert!(!path.exists(), "{} left behind", path.display());
}

#[test]
fn a_stale_socket_is_replaced_and_a_shared_directory_refused() {
    let dir = TempDir::new("stale");
    drop(std::os::unix::net::UnixListener::bind(dir.sock()).unwrap());
    assert!(dir.sock().exists(), "a socket file with no listener");
    let agent = AgentGuard::start(&dir.sock(), TICK);
    assert!(agent.status().agent_pid > 0);
    drop(agent);

    let open = TempDir::new("open");
    std::fs::set_permissions(open.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new(BIN)
        .args(["agent", "--socket"])
        .arg(open.sock())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("lets others in"), "{err}");
    assert!(!open.sock().exists());
}

fn error_kind(reply: dfsched::agent::proto::Reply) -> ErrorKind {
    match reply {
        dfsched::agent::proto::Reply::Error(e) => e.kind,
        other => panic!("expected an error reply, got {other:?}"),
    }
}

#[test]
fn malformed_and_oversized_requests_get_errors_and_change_nothing() {
    let dir = TempDir::new("bad");
    let agent = AgentGuard::start(&dir.sock(), TICK);
    let before = agent.status();
    let mut c = Client::connect(&dir.sock()).unwrap();
    // Lines of this protocol version but malformed or invalid, and lines of
    // another version (an old runtime's are refused, not misread).
    let v = dfsched::agent::proto::PROTOCOL_VERSION;
    let line = |text: String| format!("{text}\n").into_bytes();
    let cases: Vec<(Vec<u8>, ErrorKind)> = vec![
        (b"hello\n".to_vec(), ErrorKind::Malformed),
        (line(format!(r#"{{"v":{v},"req":"launch"}}"#)), ErrorKind::Malformed),
        (b"{\"v\":9,\"req\":\"status\"}\n".to_vec(), ErrorKind::Version),
        (
            br#"{"v":1,"req":{"report":{"load_milli":[[0,1000]],"allowed":"0","own_socket_inode":null}}}
"#
            .to_vec(),
            ErrorKind::Version,
        ),
        (
            line(format!(
                r#"{{"v":{v},"req":{{"report":{{"load_milli":[[0,1000]],"allowed":"0","own_socket_inode":null,"pid":1}}}}}}"#
            )),
            ErrorKind::Malformed,
        ),
        (
            line(format!(
                r#"{{"v":{v},"req":{{"report":{{"load_milli":[[4000,1000]],"allowed":"0","own_socket_inode":null}}}}}}"#
            )),
            ErrorKind::Invalid,
        ),
        (
            line(format!(
                r#"{{"v":{v},"req":{{"update":{{"load_milli":[[4000,1000]],"allowed":"0","own_socket_inode":null}}}}}}"#
            )),
            ErrorKind::Invalid,
        ),
        (
            {
                let mut long = vec![b' '; 70 * 1024];
                long.push(b'\n');
                long
            },
            ErrorKind::TooLong,
        ),
    ];
    let n = cases.len() as u64;
    for (line, kind) in cases {
        assert_eq!(error_kind(c.send_raw(&line).unwrap()), kind);
    }
    // The same connection still works, and nothing was registered.
    let after = c.status().unwrap();
    assert!(after.processes.is_empty(), "{after:#?}");
    assert!(after.sets.is_empty());
    assert_eq!(after.counters.reports, before.counters.reports);
    assert_eq!(after.counters.updates, before.counters.updates);
    assert_eq!(
        after.counters.scans, before.counters.scans,
        "no scan for a refusal"
    );
    assert_eq!(
        after.counters.bad_requests,
        before.counters.bad_requests + n
    );
}

#[test]
fn a_peer_of_another_uid_is_refused() {
    if !root_or_skip(
        "skipped a_peer_of_another_uid_is_refused: needs root to run the agent as uid 65534",
    ) {
        return;
    }
    // The agent runs as uid 65534 in a directory of its own; this process
    // (root) is then a peer of another uid.
    let dir = TempDir::new("uid");
    std::os::unix::fs::chown(dir.path(), Some(65534), Some(65534)).unwrap();
    let run_as_nobody = |args: &[&str]| {
        Command::new(BIN)
            .args(args)
            .arg("--socket")
            .arg(dir.sock())
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap()
    };
    /// Stops the uid-65534 agent even if an assertion fails first.
    struct StopAsNobody<'a>(&'a dyn Fn(&[&str]) -> std::process::Output);
    impl Drop for StopAsNobody<'_> {
        fn drop(&mut self) {
            let _ = (self.0)(&["agent", "--stop"]);
        }
    }
    let out = run_as_nobody(&["agent", "--tick-ms", "20"]);
    let _stop = StopAsNobody(&run_as_nobody);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("Permission denied") {
            skip_or_fail(&format!(
                "skipped a_peer_of_another_uid_is_refused: uid 65534 cannot run {BIN} here: {err}"
            ));
            return;
        }
        panic!("agent as 65534: {err}");
    }
    // Our client would not even talk to it (its directory is not ours):
    assert!(matches!(
        Client::connect(&dir.sock()),
        Err(dfsched::agent::AgentError::UnsafeDir { .. })
    ));
    // so ask by hand: the agent refuses a peer of another uid on its own.
    let mut raw = std::os::unix::net::UnixStream::connect(dir.sock()).unwrap();
    raw.set_read_timeout(Some(DEADLINE)).unwrap();
    // The agent may have refused and closed already (EPIPE): the refusal
    // is waiting all the same.
    let _ = std::io::Write::write_all(&mut raw, b"{\"v\":2,\"req\":\"status\"}\n");
    let mut line = String::new();
    std::io::BufReader::new(raw).read_line(&mut line).unwrap();
    let reply: dfsched::agent::proto::ReplyLine = serde_json::from_str(&line).unwrap();
    match reply.reply {
        dfsched::agent::proto::Reply::Error(e) => {
            assert_eq!(e.kind, ErrorKind::Denied);
            assert!(e.message.contains("65534"), "{}", e.message);
        }
        other => panic!("a root peer of a uid-65534 agent: {other:?}"),
    }
    // A peer of the agent's own uid is served, and may stop it.
    let out = run_as_nobody(&["agent", "--status"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: Status = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status.agent_uid, 65534);
    assert_eq!(status.counters.refused_peers, 1);
    assert!(status.processes.is_empty());
    assert!(run_as_nobody(&["agent", "--stop"]).status.success());
}

/// A child process running a runtime (see [`child_process_body`]).
struct ChildRt(ChildProc);

impl ChildRt {
    /// Starts a child with `threads` registered threads on DF 1, reporting
    /// to the agent on `sock`, its stderr on `stderr`. Its threads wait
    /// (in a channel) but count as runnable load: idle detection is off, or
    /// it would take them out of the load after 200 ms.
    fn start(sock: &Path, threads: u32, stderr: Stdio) -> ChildRt {
        let mut cmd = rerun("child_process_body");
        cmd.env(CHILD_ENV, threads.to_string())
            .env("DFSCHED_AGENT", sock)
            .env("DFSCHED_BALANCE_INTERVAL_MS", "20")
            .env("DFSCHED_IDLE_PASSES", "0")
            .stderr(stderr);
        ChildRt(ChildProc::spawn(cmd, "H3:"))
    }

    fn pid(&self) -> u32 {
        self.0.pid()
    }

    /// Sends a command line, returns the child's `H3:` answer.
    fn ask(&mut self, cmd: &str) -> String {
        self.0.ask(cmd)
    }

    fn link(&mut self) -> serde_json::Value {
        serde_json::from_str(&self.ask("link")).unwrap()
    }
}

/// The body of a child process, and nothing when run as an ordinary test.
///
/// Starts a runtime (configured from the environment, `DFSCHED_AGENT`
/// included), registers N threads on DF 1 (N from `AGENT_TEST_CHILD_THREADS`)
/// which then wait, prints `H3:ready`, and answers commands read from stdin:
/// `link` → the runtime's agent link as JSON; `masks` → the workers'
/// `sched_getaffinity` masks, space-separated cpulists. Exits at EOF.
#[test]
fn child_process_body() {
    let Ok(threads) = std::env::var(CHILD_ENV) else {
        return;
    };
    let threads: u32 = threads.parse().unwrap();
    let rt = dfsched::Runtime::start(dfsched::RuntimeConfig::from_env().unwrap()).unwrap();
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let stop_rx = std::sync::Arc::new(std::sync::Mutex::new(stop_rx));
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (rt, tid_tx, stop_rx) = (rt.clone(), tid_tx.clone(), stop_rx.clone());
            std::thread::spawn(move || {
                rt.enter(1).unwrap();
                tid_tx.send(dfsched::sys::gettid()).unwrap();
                let _ = stop_rx.lock().unwrap().recv();
            })
        })
        .collect();
    let tids: Vec<u64> = (0..threads).map(|_| tid_rx.recv().unwrap()).collect();
    println!("H3:ready");
    for line in std::io::stdin().lock().lines() {
        let answer = match line.unwrap().as_str() {
            "link" => serde_json::to_string(&rt.agent_link()).unwrap(),
            "masks" => tids
                .iter()
                .map(|&t| dfsched::sys::get_affinity(t).unwrap().to_string())
                .collect::<Vec<_>>()
                .join(" "),
            other => format!("unknown command {other:?}"),
        };
        println!("H3:{answer}");
    }
    drop(stop_tx);
    for w in workers {
        w.join().unwrap();
    }
    rt.shutdown();
}

fn registered(s: &Status, pid: u32) -> bool {
    s.processes.iter().any(|p| p.pid == pid)
}

#[test]
fn a_process_that_exits_or_is_killed_leaves_no_state() {
    let dir = TempDir::new("exit");
    let agent = AgentGuard::start(&dir.sock(), TICK);
    let mut quits = ChildRt::start(&dir.sock(), 1, Stdio::null());
    let mut killed = ChildRt::start(&dir.sock(), 1, Stdio::null());
    let (q, k) = (quits.pid(), killed.pid());
    agent.wait_for("both registered", |s| registered(s, q) && registered(s, k));
    // EOF on stdin: the child ends normally.
    drop(quits.0.stdin.take());
    quits.0.child.wait().unwrap();
    let s = agent.wait_for("the exited one gone", |s| !registered(s, q));
    assert!(registered(&s, k));
    killed.0.child.kill().unwrap();
    killed.0.child.wait().unwrap();
    let s = agent.wait_for("the killed one gone", |s| !registered(s, k));
    assert!(s.processes.is_empty(), "{s:#?}");
    assert!(s.sets.is_empty());
    assert!(s.counters.dropped_on_close + s.counters.dropped_on_exit >= 2);
}

/// With one process registered no sharing set can exist, so the ticks read
/// no process's open files (`file_scans` stays 0 while `ticks` grows); a
/// second process starts the reading.
#[test]
fn a_lone_process_costs_the_ticks_no_open_file_reads() {
    let dir = TempDir::new("lone");
    let agent = AgentGuard::start(&dir.sock(), TICK);
    let a = ChildRt::start(&dir.sock(), 1, Stdio::null());
    let pa = a.pid();
    let s = agent.wait_for("two ticks with A alone", |s| {
        registered(s, pa) && s.counters.ticks >= 2
    });
    assert_eq!(s.processes.len(), 1, "{s:#?}");
    let before = s.counters.ticks;
    let s = agent.wait_for("two more ticks", |s| s.counters.ticks >= before + 2);
    assert_eq!(s.counters.file_scans, 0, "{:?}", s.counters);
    let b = ChildRt::start(&dir.sock(), 1, Stdio::null());
    let pb = b.pid();
    agent.wait_for("a tick reading both processes' files", |s| {
        registered(s, pa) && registered(s, pb) && s.counters.file_scans >= 1
    });
}

#[test]
fn two_runtimes_in_two_processes_see_each_others_load() {
    let dir = TempDir::new("load");
    let agent = AgentGuard::start(&dir.sock(), TICK);
    let mut a = ChildRt::start(&dir.sock(), 2, Stdio::null());
    let mut b = ChildRt::start(&dir.sock(), 1, Stdio::null());
    let (pa, pb) = (a.pid(), b.pid());
    let start = Instant::now();
    let others = |v: &serde_json::Value| -> u64 {
        v["others_milli"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p[1].as_u64().unwrap())
            .sum()
    };
    loop {
        let (la, lb) = (a.link(), b.link());
        let has = |v: &serde_json::Value, pid: u32| {
            v["registered"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p.as_u64() == Some(u64::from(pid)))
        };
        // Each sees the other's registered threads (and nothing of its
        // own): B's one thread in A's view, A's two in B's.
        if others(&la) == 1000 && others(&lb) == 2000 && has(&la, pb) && has(&lb, pa) {
            assert_eq!(la["connected"], true);
            assert!(la["set"].is_null(), "no shared pipe, no sharing set: {la}");
            break;
        }
        assert!(start.elapsed() < DEADLINE, "A {la}, B {lb}");
        std::thread::sleep(Duration::from_millis(10));
    }
    // The agent holds each process's reported load: its registered threads
    // and any unregistered thread of it found runnable (`runtime/pass.rs`,
    // `ours`). The polling above runs each child's main thread, which a
    // report may catch runnable (B at 2000 once in ten runs), so the loads
    // are awaited once the polling has stopped and the main threads sleep.
    let load = |s: &Status, pid: u32| -> Option<u64> {
        s.processes
            .iter()
            .find(|p| p.pid == pid)
            .map(|p| p.load_milli.iter().map(|&(_, m)| m).sum())
    };
    agent.wait_for("A's two threads and B's one in the agent's loads", |s| {
        (load(s, pa), load(s, pb)) == (Some(2000), Some(1000))
    });
}

#[test]
fn two_processes_sharing_a_pipe_are_placed_on_one_home() {
    let allowed = dfsched::sys::get_affinity(0).unwrap();
    if allowed.len() < 2 {
        skip_or_fail(
            "skipped two_processes_sharing_a_pipe_are_placed_on_one_home: \
             one allowed CPU, every home is the same",
        );
        return;
    }
    let dir = TempDir::new("share");
    let agent = AgentGuard::start(&dir.sock(), TICK);
    // A's stderr is the read end of a pipe, B's its write end: they hold
    // one pipe inode, which this process no longer holds once both are
    // spawned (an inode also held outside the registered processes would
    // not count). Two threads each make 4 runnable threads: on 2 CPUs at
    // the default heavy load (2 per CPU) the set's home is one CPU (on
    // bigger machines, a domain that holds 4 threads).
    let (read, write) = std::io::pipe().unwrap();
    let mut a = ChildRt::start(&dir.sock(), 2, Stdio::from(read));
    let mut b = ChildRt::start(&dir.sock(), 2, Stdio::from(write));
    let (pa, pb) = (a.pid(), b.pid());
    // The set can form before every worker has registered, and its first
    // home then is that of a lighter load; on 2 CPUs the agent must move
    // it to one CPU once the four threads are reported.
    let two = allowed.len() == 2;
    let what = if two {
        "one sharing set of both, homed on one CPU (4 threads on 2 CPUs are heavy load)"
    } else {
        "one sharing set of both"
    };
    let s = agent.wait_for(what, |s| {
        s.sets.len() == 1
            && s.sets[0].members == {
                let mut m = vec![pa, pb];
                m.sort();
                m
            }
            && (!two || s.sets[0].home.len() == 1)
    });
    let home = s.sets[0].home.clone();
    assert!(!home.is_empty() && home.is_subset(&allowed));
    // Both runtimes hear of the home, and every worker of both processes
    // ends up confined to it. (The engine alone may put a process's threads
    // on one CPU, so the masks are read after the links name the home.)
    let start = Instant::now();
    let want = serde_json::Value::String(home.to_string());
    loop {
        let (la, lb) = (a.link(), b.link());
        let (ma, mb) = (a.ask("masks"), b.ask("masks"));
        let masks: Vec<dfsched::CpuSet> = ma
            .split(' ')
            .chain(mb.split(' '))
            .map(|m| m.parse().unwrap())
            .collect();
        assert_eq!(masks.len(), 4);
        let told = la["home"] == want && lb["home"] == want;
        if told && masks.iter().all(|m| m.is_subset(&home)) {
            assert!(la["allowed_events"].as_u64().unwrap() >= 1, "{la}");
            break;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "home {home}, masks {ma} / {mb}, links {la} / {lb}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // The set dissolves when B goes; A's two threads get their own allowed
    // CPUs back: two more Allowed events after the two that narrowed them.
    drop(b);
    agent.wait_for("no set", |s| s.sets.is_empty());
    let start = Instant::now();
    loop {
        let ma = a.ask("masks");
        let link = a.link();
        if link["home"].is_null() && link["allowed_events"].as_u64().unwrap() >= 4 {
            break;
        }
        assert!(start.elapsed() < DEADLINE, "masks {ma}, link {link}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn ensure_running_starts_an_agent_once() {
    use dfsched::agent::{ensure_running_with, Ensured, Trust};
    let dir = TempDir::new("ensure");
    let first = ensure_running_with(&dir.sock(), Path::new(BIN), Trust::OwnUid).unwrap();
    let agent = AgentGuard(dir.sock());
    assert_eq!(first, Ensured::Started);
    let pid = agent.status().agent_pid;
    // Started on demand, it ends by itself once unused.
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let args: Vec<String> = cmdline
        .split(|&b| b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let secs = dfsched::agent::ON_DEMAND_IDLE_EXIT.as_secs().to_string();
    assert!(
        args.windows(2)
            .any(|w| w[0] == "--idle-exit" && w[1] == secs),
        "{args:?}"
    );
    let again = ensure_running_with(&dir.sock(), Path::new(BIN), Trust::OwnUid).unwrap();
    assert_eq!(again, Ensured::AlreadyRunning);
    assert_eq!(agent.status().agent_pid, pid, "the same agent serves");
    // A directory others may enter is refused with the reason.
    let open = TempDir::new("ensure-open");
    std::fs::set_permissions(open.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
    let err = ensure_running_with(&open.sock(), Path::new(BIN), Trust::OwnUid).unwrap_err();
    assert!(err.to_string().contains("lets others in"), "{err}");
}
