//! `dfsched attach PID` / `dfsched detach PID`: a process started without
//! dfsched (tests/run_fixtures/named.c, nothing preloaded) is placed from
//! outside by a private agent, by a rules file on its thread names, kept
//! placed when it starts a thread after the attach, and given its masks
//! back by detach; masks are read back from `/proc/PID/task/TID/status`.
//! Another user's process and a bad rules file are refused, and nothing is
//! attached.
//!
//! As in tests/rules.rs, the program's spinning threads make a 2-CPU
//! machine heavily loaded, so a DF group's home is one CPU. Waits are for
//! a state, bounded at 30 s (correctness, not timing).

mod agent_support;
#[path = "run_fixtures/support.rs"]
mod support;

use agent_support::{AgentGuard, TempDir, BIN};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;
use support::{
    clean, masks_named, named_program, run_cmd, scratch, thread_masks, together_on_one_cpu,
    two_cpus, wait_masks, Running, NAME_RULES,
};

/// `dfsched SUB ARGS… --socket SOCK`.
fn dfsched(sub: &str, args: &[&str], sock: &std::path::Path) -> std::process::Output {
    clean(Command::new(BIN))
        .arg(sub)
        .args(args)
        .arg("--socket")
        .arg(sock)
        .output()
        .unwrap()
}

#[test]
fn attach_places_a_running_process_by_rules_and_detach_gives_its_masks_back() {
    let Some(cpus) = two_cpus("attach_places_a_running_process") else {
        return;
    };
    let Some(prog) = named_program() else {
        return;
    };
    let dir = TempDir::new("attach");
    // The attached process's engine is logged (`--engine-log`), to be
    // replayed after the detach.
    let logs = scratch().join(format!("attach-logs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&logs);
    std::fs::create_dir_all(&logs).unwrap();
    let agent = AgentGuard::start(
        &dir.sock(),
        &["--tick-ms", "50", "--engine-log", logs.to_str().unwrap()],
    );
    let rules = scratch().join("attach.toml");
    std::fs::write(&rules, NAME_RULES).unwrap();
    let mut cmd = clean(Command::new(&prog));
    cmd.args(["worker-1", "worker-1", "worker-2", "worker-2", "other-1"]);
    let mut running = Running::start(cmd);
    let pid = running.pid;
    // Premise: nothing placed it (no preload): every thread on every CPU.
    let before = thread_masks(pid, "");
    assert!(before.iter().all(|(_, m)| *m == cpus), "{before:?}");

    let out = dfsched(
        "attach",
        &[
            &pid.to_string(),
            "--policy",
            "data-affinity",
            "--rules",
            rules.to_str().unwrap(),
            "--json",
        ],
        &dir.sock(),
    );
    assert!(out.status.success(), "{out:?}");
    let reply: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(reply["pid"], pid);
    assert_eq!(reply["threads"], 6, "{reply}");

    let (masks, placed) = wait_masks(pid, |m| {
        together_on_one_cpu(m, "worker-1", 2)
            && together_on_one_cpu(m, "worker-2", 2)
            && masks_named(m, "other-1") == [&cpus]
    });
    assert!(
        placed,
        "worker pairs each on one CPU, other-1 left alone: {masks:?}"
    );

    // A thread started after the attach is placed at a tick: a third
    // worker-1 joins its DF's CPU.
    writeln!(running.stdin.as_mut().unwrap(), "spawn worker-1").unwrap();
    let new_tid: u32 = running.line_starting("tid ").parse().unwrap();
    let (masks, joined) = wait_masks(pid, |m| together_on_one_cpu(m, "worker-1", 3));
    assert!(
        joined,
        "the new worker-1 ({new_tid}) joins its group: {masks:?}"
    );

    let out = dfsched("detach", &[&pid.to_string(), "--json"], &dir.sock());
    assert!(out.status.success(), "{out:?}");
    let after = thread_masks(pid, "");
    assert!(
        after.iter().all(|(_, m)| *m == cpus),
        "every thread back on {cpus:?}: {after:?}"
    );
    // Detached: no tick places it again.
    std::thread::sleep(Duration::from_millis(300));
    let later = thread_masks(pid, "");
    assert!(later.iter().all(|(_, m)| *m == cpus), "{later:?}");
    let out = dfsched("detach", &[&pid.to_string()], &dir.sock());
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not attached"));
    assert!(running.finish().success());
    drop(agent);
    // The engine log of the attach, ended at the detach: one brain, the
    // agent's decisions replayed identically.
    let log = logs.join(format!("attach-{pid}.log"));
    let replay = clean(Command::new(BIN))
        .args(["engine-replay", "--json"])
        .arg(&log)
        .output()
        .unwrap();
    let j: serde_json::Value = serde_json::from_slice(&replay.stdout).unwrap_or_default();
    assert!(replay.status.success(), "{j} {replay:?}");
    assert_eq!(j["replayed"]["ended"], true, "{j}");
    assert!(j["replayed"]["decisions"].as_u64().unwrap() > 0, "{j}");
    let _ = std::fs::remove_dir_all(&logs);
}

/// A process of another user: a `sleep` dropped to uid 65534 when this
/// test runs as root, else kthreadd (pid 2, root's).
fn foreign_process() -> (u32, Option<std::process::Child>) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new("sleep");
        cmd.arg("30").stdin(Stdio::null());
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().unwrap();
        (child.id(), Some(child))
    } else {
        (2, None)
    }
}

#[test]
fn attach_refuses_another_users_process_and_a_bad_rules_file() {
    let dir = TempDir::new("attach-refuse");
    let agent = AgentGuard::start(&dir.sock(), &[]);
    let (pid, child) = foreign_process();
    let owner = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| {
            l.strip_prefix("Uid:")
                .map(|r| r.split_whitespace().nth(1).unwrap().to_string())
        })
        .unwrap();
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    assert_ne!(owner, me.to_string(), "premise: {pid} is another user's");
    let out = dfsched("attach", &[&pid.to_string()], &dir.sock());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("belongs to uid {owner}")),
        "{stderr}"
    );
    if let Some(mut c) = child {
        let _ = c.kill();
        let _ = c.wait();
    }

    // A bad rules file: a usage error naming its line; nothing attached.
    let rules = scratch().join("attach-bad.toml");
    std::fs::write(&rules, "[[rule]]\nthread = \"x\"\ndf = \"prefix\"\n").unwrap();
    let me_pid = std::process::id().to_string();
    let out = dfsched(
        "attach",
        &[&me_pid, "--rules", rules.to_str().unwrap()],
        &dir.sock(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("{}:3:", rules.display())),
        "{stderr}"
    );
    let out = dfsched("detach", &[&me_pid], &dir.sock());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not attached"));
    drop(agent);
}

#[test]
fn attach_refuses_a_process_under_dfsched_run() {
    let Some(prog) = named_program() else {
        return;
    };
    let dir = TempDir::new("attach-preloaded");
    let agent = AgentGuard::start(&dir.sock(), &[]);
    // Its own runtime places it (no balancer, so nothing moves meanwhile).
    let running = Running::start(run_cmd(
        &["--balance-interval-ms", "0"],
        &prog,
        &["worker-1"],
    ));
    let out = dfsched("attach", &[&running.pid.to_string()], &dir.sock());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("runs under dfsched run"), "{stderr}");
    assert!(running.finish().success());
    drop(agent);
}
