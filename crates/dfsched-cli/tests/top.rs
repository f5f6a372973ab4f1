//! `dfsched top` against a real agent and a real program under
//! `dfsched run`: `--once --json` lists the program's co-thread group and
//! its home, and the live view, driven in a pseudo-terminal by `script(1)`,
//! draws a frame naming the program and quits on `q`. Each process's body
//! is named: the program's is affinity, and a runtime in this test process
//! on the scx body (a fake scheduler socket, as root) shows as scx in the
//! JSON and in the table.
//!
//! Each test has its own agent on a socket in a private directory, stopped
//! when the test ends; the program is the C fixture (tests/run_fixtures/
//! threads.c, built with gcc). The waits are for states (the runtime
//! registers on its first balancer pass and sends its detail once it hears
//! it is watched), bounded so that a failure cannot hang, never timing
//! assertions.

#[path = "run_fixtures/support.rs"]
mod support;

mod agent_support;

use agent_support::{fake_scheduler, AgentGuard, ExtGranted, TempDir, BIN};
use dfsched::agent::AgentMode;
use dfsched::scx::ScxMode;
use dfsched::{Runtime, RuntimeConfig};
use serde_json::Value;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::{c_program, root_or_skip, run_cmd, skip_or_fail, Running};

/// The longest a test waits for a state.
const PATIENCE: Duration = Duration::from_secs(20);

/// The C fixture spinning 3 threads under `dfsched run --policy co-thread`,
/// reporting to the agent on `sock`.
fn program_on(sock: &Path) -> Option<Running> {
    let prog = c_program()?;
    let mut cmd = run_cmd(&["--policy", "co-thread"], &prog, &["spin", "3"]);
    cmd.env("DFSCHED_AGENT", sock);
    Some(Running::start(cmd))
}

/// `dfsched top --once --json` on `sock`, until the entry of `pid` has a
/// detail with a group (or [`PATIENCE`] is out): the whole view and that
/// entry.
fn top_once_until_detail(sock: &Path, pid: u32) -> (Value, Value) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let out = Command::new(BIN)
            .args(["top", "--once", "--json", "--socket"])
            .arg(sock)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "top --once: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let view: Value = serde_json::from_slice(&out.stdout).unwrap();
        let entry = view["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["pid"] == pid)
            .cloned();
        if let Some(e) = &entry {
            if e["detail"]["groups"]
                .as_array()
                .is_some_and(|g| !g.is_empty())
            {
                return (view, e.clone());
            }
        }
        assert!(Instant::now() < deadline, "no detail for {pid} in {view:#}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn top_once_json_lists_a_run_programs_groups_and_homes() {
    let dir = TempDir::new("top");
    let _agent = AgentGuard::start(&dir.sock(), &[]);
    let Some(program) = program_on(&dir.sock()) else {
        skip_or_fail("SKIP top_once_json_lists_a_run_programs_groups_and_homes: no gcc");
        return;
    };
    let (view, entry) = top_once_until_detail(&dir.sock(), program.pid);
    let detail = &entry["detail"];
    assert_eq!(detail["policy"], "co-thread", "{entry:#}");
    // No sched_ext here: its placements are affinity masks, and the JSON
    // says so (the wire leaves the default out; `--json` names it).
    assert_eq!(detail["body"], "affinity", "{entry:#}");
    // Its main thread and 3 spinning ones are one co-thread group.
    let group = &detail["groups"][0];
    assert!(
        group["df"].is_null(),
        "a co-thread group has no DF: {group}"
    );
    assert!(group["members"].as_u64().unwrap() >= 3, "{group}");
    let home = group["home"].as_str().unwrap();
    assert!(!home.is_empty(), "{group}");
    assert_eq!(entry["comm"], "threads_c", "{entry}");
    // Per CPU, ours and others': every CPU of the machine, ours > 0 where
    // the program runs.
    let cpus = view["cpus"].as_array().unwrap();
    assert!(!cpus.is_empty());
    assert!(
        cpus.iter().any(|c| c["ours_milli"].as_u64().unwrap() > 0),
        "{view:#}"
    );
    program.finish();
}

#[test]
fn top_draws_a_frame_in_a_pseudo_terminal_and_quits_on_q() {
    if Command::new("script").arg("--version").output().is_err() {
        skip_or_fail("SKIP top_draws_a_frame_in_a_pseudo_terminal_and_quits_on_q: no script(1)");
        return;
    }
    let dir = TempDir::new("toptty");
    let _agent = AgentGuard::start(&dir.sock(), &[]);
    let Some(program) = program_on(&dir.sock()) else {
        skip_or_fail("SKIP top_draws_a_frame_in_a_pseudo_terminal_and_quits_on_q: no gcc");
        return;
    };
    // The detail is there before the terminal is looked at.
    top_once_until_detail(&dir.sock(), program.pid);
    // script(1) gives the command a pseudo-terminal; its size is set inside,
    // since this test's own stdin is no terminal to copy it from.
    let inner = format!(
        "stty rows 40 cols 140; exec {BIN} top --interval-ms 200 --socket {}",
        dir.sock().display()
    );
    let mut child = Command::new("script")
        .args(["-qfec", &inner, "/dev/null"])
        .env("TERM", "xterm-256color")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Vec<u8>>();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stdout.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut screen = Vec::new();
    let deadline = Instant::now() + PATIENCE;
    let pid = program.pid.to_string();
    let seen = |s: &[u8]| {
        let t = String::from_utf8_lossy(s);
        t.contains("dfsched top: agent") && t.contains(&pid) && t.contains("co-thread")
    };
    while !seen(&screen) && Instant::now() < deadline {
        if let Ok(chunk) = rx.recv_timeout(Duration::from_millis(100)) {
            screen.extend(chunk);
        }
    }
    let text = String::from_utf8_lossy(&screen).into_owned();
    child.stdin.as_mut().unwrap().write_all(b"q").unwrap();
    let quit_by = Instant::now() + PATIENCE;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if Instant::now() > quit_by {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(child.stdin.take());
    let _ = child.wait();
    let _ = reader.join();
    program.finish();
    assert!(
        seen(text.as_bytes()),
        "no frame naming {pid} and its policy:\n{text}"
    );
    assert!(
        text.contains("PID") && text.contains("HOME") && text.contains("OURS"),
        "{text}"
    );
    assert!(
        status.is_some_and(|s| s.success()),
        "top did not quit on q: {status:?}"
    );
}

#[test]
fn top_names_the_scx_body_of_a_runtime_on_it() {
    if !root_or_skip(
        "SKIP top_names_the_scx_body_of_a_runtime_on_it: the scx body talks only to a root-run \
         scheduler socket, and this test's fake is its own",
    ) {
        return;
    }
    let dir = TempDir::new("topscx");
    let _agent = AgentGuard::start(&dir.sock(), &[]);
    let cfg = RuntimeConfig {
        balance_interval_ms: 100,
        agent: AgentMode::Path(dir.sock()),
        // Alone with the agent, yet exchanging every pass, so the detail
        // comes within a few passes of being asked for.
        agent_lone_passes: 1,
        scx: ScxMode::Socket(fake_scheduler(&dir)),
        ..RuntimeConfig::default()
    };
    let rt = Runtime::start_with_sys(cfg, std::sync::Arc::new(ExtGranted)).unwrap();
    assert!(
        rt.stats().scx_body,
        "the premise: the runtime is on the scx body"
    );
    // One thread in DF 1, waiting, so the detail has a group.
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let (entered, has_entered) = std::sync::mpsc::channel::<()>();
    let worker = {
        let rt = rt.clone();
        std::thread::spawn(move || {
            rt.enter(1).unwrap();
            entered.send(()).unwrap();
            let _ = stopped.recv();
        })
    };
    has_entered.recv().unwrap();
    let pid = std::process::id();
    let (_, entry) = top_once_until_detail(&dir.sock(), pid);
    assert_eq!(entry["detail"]["body"], "scx", "{entry:#}");
    assert!(
        rt.stats().scx_body,
        "still on the scx body: {:?}",
        rt.stats()
    );
    // The table's row of this process names the body too.
    let out = Command::new(BIN)
        .args(["top", "--once", "--socket"])
        .arg(dir.sock())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "top --once: {text}");
    assert!(text.contains("BODY"), "{text}");
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with(&pid.to_string()))
        .unwrap_or_else(|| panic!("no row for {pid} in\n{text}"));
    assert!(row.contains(" scx "), "{row}");
    stop.send(()).unwrap();
    worker.join().unwrap();
    rt.shutdown();
}
