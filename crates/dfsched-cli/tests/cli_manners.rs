//! The manners of a Unix tool, checked on the built binary: a closed
//! stdout (`dfsched … --json | head -c 100`) ends a command quietly with
//! status 0, and log lines carry no colour codes when stderr is not a
//! terminal.

mod cli_support;

use cli_support::BIN;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Stdio};

/// The write end of a pipe whose read end is already closed: every write
/// to it fails with EPIPE, from the first byte (no race with a reader).
fn widowed_pipe() -> OwnedFd {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe(2) to fill.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: pipe(2) succeeded, so both are open descriptors that we own;
    // each is wrapped once and so closed once.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    write
}

#[test]
fn a_closed_stdout_ends_every_printing_command_quietly_with_status_0() {
    let dir = tempfile::Builder::new()
        .prefix("dfsched-epipe-")
        .tempdir()
        .unwrap();
    let out_dir = dir.path().to_str().unwrap();
    let commands: &[&[&str]] = &[
        &["topology", "--json"],
        &["topology"],
        &["sim", "pinter-example", "--json"],
        &["sim", "pinter-example"],
        &["model", "reload", "--json"],
        &["model", "mva", "--json"],
        &["sim", "figure", "4", "--out", out_dir],
        &["--help"],
    ];
    for args in commands {
        let out = Command::new(BIN)
            .args(*args)
            .stdout(Stdio::from(widowed_pipe()))
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(err.is_empty(), "{args:?} said on stderr: {err}");
    }
}

#[test]
fn log_lines_carry_no_colour_codes_when_stderr_is_not_a_terminal() {
    // `-v` logs `run`'s exec line at info; stderr is a pipe here.
    let out = Command::new(BIN)
        .args(["-v", "run", "--policy", "none", "--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("dfsched run: exec"),
        "the premise: a log line was written: {err}"
    );
    assert!(!err.contains('\x1b'), "colour codes on a pipe: {err:?}");
}

/// `dfsched ARGS`, killed if it has not ended within `secs` (a refusal
/// that is missing must fail the test, not hang it or fill the memory).
fn dfsched_within(args: &[&str], secs: u64) -> std::process::Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn sim_df_bench_refuses_what_cannot_run_up_front_with_the_limit() {
    for (args, limit) in [
        (&["--threads", "1000000000"][..], "100000"),
        (&["--df-bytes", "1000000000000000"][..], "1073741824"),
        (
            &["--df-bytes", "1000000000"][..],
            "1000000000 line accesses",
        ),
    ] {
        let out = dfsched_within(&[&["sim", "df-bench"], args].concat(), 30);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(limit), "{args:?}: {err}");
    }
}
