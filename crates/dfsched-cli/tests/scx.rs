//! `dfsched scx` on the host, where the kernel has no sched_ext: its argument errors (exit 2), the
//! checks before it spawns anything (exit 3: no scheduler binary, no sched_ext), and, with a fake
//! loader (a shell script speaking `dfsched-scx run`'s lines) and a fake socket served by this test
//! on a sysfs fixture, the whole life: the loader's command line, the state shown (`--once --json`),
//! SIGINT forwarded for a clean unload (exit 0), and the statuses of a scheduler the kernel ended
//! (4, 5), of a loader that died (6) and of one that never loaded (3). The real scheduler in a real
//! kernel is the VM bench's (`dfsched-vmbench run --scx`: `scx-cli-partial`, `scx-cli-all`).

mod cli_support;

use cli_support::{root_or_skip, BIN};
use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Why a test that loads a scheduler skips when not root (CI runs as root).
const NOT_ROOT: &str = "SKIP: dfsched scx refuses to load as non-root, before its loader runs";

/// A fresh directory of ours named `dfsched-cli-scx-TAG-` and random
/// letters (short: a socket lives in it), removed on drop.
struct Dir(tempfile::TempDir);

impl Dir {
    fn new(tag: &str) -> Dir {
        let d = tempfile::Builder::new()
            .prefix(&format!("dfsched-cli-scx-{tag}-"))
            .tempdir()
            .unwrap();
        Dir(d)
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

/// `dfsched scx ARGS` with an empty PATH (so no dfsched-scx is found there), to its end.
fn scx(args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .arg("scx")
        .args(args)
        .env("PATH", "/nonexistent-dfsched-test")
        .output()
        .unwrap()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn bad_arguments_are_usage_errors_and_nothing_runs() {
    for (args, needle) in [
        (&["--partial", "--all"][..], "--all"),
        (&["--policy", "none"][..], "none"),
        (&["--quota", "0"][..], "--quota"),
        (&["--slice-us", "0"][..], "--slice-us"),
        (&["--interval", "0"][..], "--interval"),
        (&["--bogus"][..], "--bogus"),
    ] {
        let out = scx(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(needle), "{args:?}: {}", stderr(&out));
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn a_missing_scheduler_binary_is_named_with_how_to_build_it() {
    // The test's dfsched has no dfsched-scx beside it (that binary is built in its own workspace).
    let beside = Path::new(BIN).parent().unwrap().join("dfsched-scx");
    assert!(
        !beside.exists(),
        "premise: no {} beside the test's dfsched",
        beside.display()
    );
    let out = scx(&["--once"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let e = stderr(&out);
    assert!(
        e.contains("dfsched-scx was not found")
            && e.contains("--scheduler")
            && e.contains("cargo build"),
        "{e}"
    );
    let out = scx(&["--scheduler", "/nonexistent/dfsched-scx", "--json"]);
    assert_eq!(out.status.code(), Some(3));
    assert!(
        stderr(&out).contains("not an executable file"),
        "{}",
        stderr(&out)
    );
    let end: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--json: the end");
    assert_eq!(end["end"]["status"], 3);
    assert_eq!(end["end"]["how"], "not loaded");
}

/// A fake `dfsched-scx`: writes its arguments to `$FAKE_ARGS`, then behaves as `$FAKE_MODE` says:
/// `clean` prints the loaded line and unloads on SIGINT/SIGTERM like the real one; `stall` and
/// `sysrq` are ended by "the kernel" (exit 1 and 2); `die` is killed by a signal; `fail` exits 1
/// before loading.
fn fake_loader(dir: &Path) -> PathBuf {
    let p = dir.join("dfsched-scx");
    std::fs::write(
        &p,
        r#"#!/bin/sh
echo "$@" > "$FAKE_ARGS"
if [ "$FAKE_MODE" = fail ]; then echo "dfsched-scx: loading the BPF scheduler: EPERM" >&2; exit 1; fi
trap 'echo "dfsched-scx: unloaded: unregistered from user space (exit kind 64, code 0)"; exit 0' INT TERM
echo "dfsched-scx: loaded (state enabled, ops dfsched; fake)"
case $FAKE_MODE in
  stall) sleep 1; echo "dfsched-scx: the kernel ended the scheduler: runnable task stall (exit kind 1026, code 0)"; exit 1 ;;
  sysrq) sleep 1; echo "dfsched-scx: the kernel ended the scheduler: disabled by sysrq-S (exit kind 67, code 0)"; exit 2 ;;
  die) sleep 1; kill -KILL $$ ;;
esac
while :; do sleep 0.1; done
"#,
    )
    .unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// A sysfs fixture whose sched_ext is `disabled` (ready to load).
fn sysfs(dir: &Path) -> PathBuf {
    let root = dir.join("sysfs");
    let s = root.join("sys/kernel/sched_ext");
    std::fs::create_dir_all(s.join("root")).unwrap();
    std::fs::write(s.join("state"), "disabled\n").unwrap();
    root
}

/// A fake scheduler socket: answers every line with a state of one group.
fn fake_socket(dir: &Path) -> PathBuf {
    let path = dir.join("scx.sock");
    let listener = UnixListener::bind(&path).unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let mut w = stream.try_clone().unwrap();
            for _ in BufReader::new(stream).lines().map_while(Result::ok) {
                let reply = serde_json::json!({"ok": true, "state": {
                    "state": "enabled", "ops": "dfsched", "mode": "all", "policy": "co-thread",
                    "quota": 8, "slice_us": 5000, "nr_cpus": 4, "stats": {"kick": 1},
                    "groups": [{"gid": 0, "home": "0-1", "tids": [std::process::id()]}]}});
                if writeln!(w, "{reply}").is_err() {
                    break;
                }
            }
        }
    });
    path
}

/// `dfsched scx --json --once` with the fake loader in `mode`, on the fixture; stdout's lines come
/// through the returned channel.
fn start_fake(
    dir: &Path,
    mode: &str,
    extra: &[&str],
) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    let loader = fake_loader(dir);
    let socket = fake_socket(dir);
    let mut child = Command::new(BIN)
        .arg("scx")
        .arg("--scheduler")
        .arg(&loader)
        .arg("--socket")
        .arg(&socket)
        .arg("--sysfs-root")
        .arg(sysfs(dir))
        .args(["--once", "--json"])
        .args(extra)
        .env("FAKE_ARGS", dir.join("args"))
        .env("FAKE_MODE", mode)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    (child, rx)
}

fn wait(child: &mut std::process::Child) -> std::process::ExitStatus {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(Instant::now() < end, "dfsched scx did not end within 30 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn end_of(rx: &std::sync::mpsc::Receiver<String>) -> serde_json::Value {
    let mut last = None;
    while let Ok(l) = rx.recv_timeout(Duration::from_secs(5)) {
        last = Some(l);
    }
    let last = last.expect("an end line");
    serde_json::from_str::<serde_json::Value>(&last).unwrap()["end"].clone()
}

#[test]
fn a_loaded_scheduler_is_shown_and_unloads_cleanly_on_sigint() {
    if !root_or_skip(NOT_ROOT) {
        return;
    }
    let dir = Dir::new("clean");
    let (mut child, rx) = start_fake(dir.path(), "clean", &["--all", "--policy", "co-thread"]);
    let first = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("a state line");
    let state: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert_eq!(state["ops"], "dfsched", "{first}");
    assert_eq!(state["groups"][0]["home"], "0-1", "{first}");
    let args = std::fs::read_to_string(dir.path().join("args")).unwrap();
    assert!(
        args.starts_with("run --all --policy co-thread --socket "),
        "the loader's command line: {args}"
    );
    // SAFETY: kill has no memory effects; the pid is our child's, not yet waited for.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let status = wait(&mut child);
    let end = end_of(&rx);
    assert_eq!(status.code(), Some(0), "{end}");
    assert_eq!(end["status"], 0);
    assert!(
        end["loader"]
            .as_str()
            .unwrap()
            .contains("unregistered from user space"),
        "SIGINT reached the loader: {end}"
    );
}

#[test]
fn how_the_scheduler_ended_is_the_exit_status() {
    if !root_or_skip(NOT_ROOT) {
        return;
    }
    for (mode, status, said) in [
        ("stall", 4, "runnable task stall"),
        ("sysrq", 5, "sysrq-S"),
        ("die", 6, "signal"),
        ("fail", 3, "exit status: 1"),
    ] {
        let dir = Dir::new(mode);
        let (mut child, rx) = start_fake(dir.path(), mode, &[]);
        let s = wait(&mut child);
        let end = end_of(&rx);
        assert_eq!(s.code(), Some(status), "{mode}: {end}");
        assert_eq!(end["status"], status, "{mode}");
        assert!(
            end["loader"].as_str().unwrap().contains(said),
            "{mode}: {end}"
        );
    }
}

#[test]
fn a_kernel_without_sched_ext_is_named_before_anything_is_spawned() {
    let dir = Dir::new("nokernel");
    let loader = fake_loader(dir.path());
    let out = Command::new(BIN)
        .arg("scx")
        .arg("--scheduler")
        .arg(&loader)
        .arg("--sysfs-root")
        .arg(dir.path())
        .env("FAKE_ARGS", dir.path().join("args"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("no sched_ext"), "{}", stderr(&out));
    assert!(!dir.path().join("args").exists(), "the loader was not run");
}

/// `dfsched topology` names the body a program started now would use: affinity on a kernel
/// without sched_ext, scx once dfsched's scheduler is enabled, affinity again with
/// `DFSCHED_SCX=off`; a bad `DFSCHED_SCX` is bad usage.
#[test]
fn topology_names_the_active_body() {
    let dir = Dir::new("topo");
    dfsched::sysfs::write_test_tree(dir.path(), 1, 2, 2, 1).unwrap();
    let topo = |json: bool, scx: Option<&str>| {
        let mut c = Command::new(BIN);
        c.arg("topology").arg("--sysfs-root").arg(dir.path());
        if json {
            c.arg("--json");
        }
        match scx {
            Some(v) => c.env("DFSCHED_SCX", v),
            None => c.env_remove("DFSCHED_SCX"),
        };
        c.output().unwrap()
    };
    let body = |scx: Option<&str>| {
        let out = topo(true, scx);
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()["body"].clone()
    };
    let b = body(None);
    assert_eq!(
        (b["active"].as_str(), b["sched_ext"].as_str()),
        (Some("affinity"), Some("none"))
    );
    let text = String::from_utf8(topo(false, None).stdout).unwrap();
    assert!(
        text.trim_end()
            .ends_with("body: affinity (sched_ext: none in this kernel)"),
        "{text}"
    );

    let s = dir.path().join("sys/kernel/sched_ext");
    std::fs::create_dir_all(s.join("root")).unwrap();
    std::fs::write(s.join("state"), "enabled\n").unwrap();
    std::fs::write(s.join("root/ops"), "dfsched\n").unwrap();
    let b = body(None);
    assert_eq!(b["active"], "scx", "{b}");
    assert_eq!(b["socket"], "/run/dfsched-scx/sock", "{b}");
    let text = String::from_utf8(topo(false, None).stdout).unwrap();
    assert!(
        text.contains("body: scx (dfsched's sched_ext scheduler is enabled"),
        "{text}"
    );
    assert_eq!(body(Some("off"))["active"], "affinity");
    let out = topo(false, Some("sometimes"));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("DFSCHED_SCX"), "{}", stderr(&out));
}
