//! `dfsched run`: unmodified C, C++ and Rust programs (tests/run_fixtures/,
//! built here with gcc, g++ and rustc) run under `LD_PRELOAD` of
//! `libdfsched.so`; every thread's `Cpus_allowed_list` is read from
//! `/proc/PID/task/TID/status` while they spin. Exit statuses, aborts and
//! forks behave as without dfsched, and a program started by a thread
//! dfsched placed (exec after vfork, posix_spawn, system, popen,
//! `std::process::Command`) gets the allowed CPUs, not that placement: each
//! such test checks the premise (the parent thread was on one CPU just
//! before). Tests skip with a message where a
//! compiler is missing or fewer than 2 CPUs are allowed.
//!
//! A process alone on the machine keeps its co-thread group within its fair
//! share, which on a 2-CPU machine is both CPUs: nothing to see. So the
//! co-thread runs share the machine with "hogs": 6 spinning threads of
//! another process pinned to the second CPU (not under dfsched). The
//! machine is then heavily loaded, the runtime's balancer counts the hogs
//! from `/proc`, and the program's co-thread group fits its share on the
//! first CPU alone: every thread of it must end up there. The test polls
//! the masks until they settle (a correctness wait, bounded at 30 s, not a
//! timing assertion). Runs that expect no placement use
//! `--balance-interval-ms 0`, so nothing can move while the masks are read.
//!
//! The helpers shared with tests/run_agent.rs are in
//! tests/run_fixtures/support.rs; every command they build has
//! `DFSCHED_AGENT=off`, so no test here starts an agent.

#[path = "run_fixtures/support.rs"]
mod support;

use std::collections::BTreeSet;
use std::io::{BufRead, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use support::{
    allowed, c_program, clean, cpp_program, cpulist, dfsched, have, run_cmd, rust_program, scratch,
    two_cpus, Running,
};

/// Threads to start so that the machine is heavily loaded (3 per allowed
/// CPU, at most 48).
fn heavy_threads(cpus: &BTreeSet<u32>) -> usize {
    (3 * cpus.len()).min(48)
}

/// The machine's load, as the tests of this binary share it: a test whose
/// assertion rests on a premise about load (hogs on the second CPU make the
/// first the co-thread home) holds it for writing, so no other test's
/// spinning threads run meanwhile; a test that only adds spinning threads
/// holds it for reading. Without it a concurrent test's 6 spinners, moved
/// by the kernel onto the first CPU beside hogs pinned to the second, made
/// both CPUs look alike, and the co-thread process rightly stayed put.
static MACHINE: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Holds [`MACHINE`] for a test that only adds load.
fn beside_others() -> std::sync::RwLockReadGuard<'static, ()> {
    MACHINE
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// 6 spinning threads of a process pinned to one CPU, not under dfsched,
/// on a machine no other test of this binary loads meanwhile. Held only to
/// be dropped: dropping it stops them, then frees the machine.
struct Hogs {
    _process: Running,
    _machine: std::sync::RwLockWriteGuard<'static, ()>,
}

impl Hogs {
    /// Starts them on `cpu`; `None` (after saying why) without gcc or
    /// taskset.
    fn start(cpu: u32) -> Option<Hogs> {
        let program = c_program()?;
        if !have("taskset") {
            support::skip_or_fail("SKIP: no taskset on this machine");
            return None;
        }
        let machine = MACHINE
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut cmd = clean(Command::new("taskset"));
        cmd.args(["-c", &cpu.to_string()])
            .arg(program)
            .args(["spin", "6"]);
        Some(Hogs {
            _process: Running::start(cmd),
            _machine: machine,
        })
    }
}

/// The first two allowed CPUs, hogs on the second, or `None` after saying
/// why the test skips.
fn busy_second_cpu(test: &str) -> Option<(u32, u32, Hogs)> {
    let cpus = two_cpus(test)?;
    let mut it = cpus.iter();
    let (first, second) = (*it.next().unwrap(), *it.next().unwrap());
    Some((first, second, Hogs::start(second)?))
}

/// `dfsched run --policy co-thread … -- program args` confined (with
/// taskset) to `first` and `second`.
fn co_thread_on(first: u32, second: u32, program: &Path, args: &[&str]) -> Command {
    let mut cmd = clean(Command::new("taskset"));
    cmd.args(["-c", &format!("{first},{second}"), dfsched(), "run"])
        .args(["--policy", "co-thread", "--"])
        .arg(program)
        .args(args);
    cmd
}

/// Polls `r`'s masks until every thread is on `cpu` alone (at most 30 s);
/// returns the last masks read.
fn settle_on(r: &Running, cpu: u32) -> Vec<(u32, BTreeSet<u32>)> {
    let want = BTreeSet::from([cpu]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let masks = r.masks();
        if masks.iter().all(|(_, m)| *m == want) || std::time::Instant::now() > deadline {
            return masks;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Asserts every thread of `masks` is on `cpu` alone.
fn assert_all_on(masks: &[(u32, BTreeSet<u32>)], cpu: u32) {
    for (tid, mask) in masks {
        assert_eq!(
            *mask,
            BTreeSet::from([cpu]),
            "thread {tid} is not in the process's home, CPU {cpu}: {masks:?}"
        );
    }
}

/// Runs `program` (3 spinning threads) under `--policy co-thread` beside
/// hogs on the second CPU, and asserts every thread, the main one
/// included, ends up on the first CPU: the process's one home.
fn assert_one_home(test: &str, program: Option<PathBuf>, mode: &[&str]) {
    let Some(program) = program else { return };
    let Some((first, second, hogs)) = busy_second_cpu(test) else {
        return;
    };
    let args: Vec<&str> = mode.iter().copied().chain(["3"]).collect();
    let r = Running::start(co_thread_on(first, second, &program, &args));
    assert_eq!(r.tids.len(), 4);
    assert_all_on(&settle_on(&r, first), first);
    assert!(r.finish().success());
    drop(hogs);
}

/// Runs `program` under `--policy POLICY` and asserts every thread keeps
/// the full allowed mask.
fn assert_full_masks(test: &str, policy: &str, program: Option<PathBuf>, mode: &[&str]) {
    let Some(cpus) = two_cpus(test) else { return };
    let Some(program) = program else { return };
    let _machine = beside_others();
    let n = heavy_threads(&cpus).to_string();
    let args: Vec<&str> = mode.iter().copied().chain([n.as_str()]).collect();
    let r = Running::start(run_cmd(
        &["--policy", policy, "--balance-interval-ms", "0"],
        &program,
        &args,
    ));
    for (tid, mask) in r.masks() {
        assert_eq!(mask, cpus, "thread {tid} under {policy}");
    }
    assert!(r.finish().success());
}

#[test]
fn a_c_programs_threads_share_one_home_under_co_thread() {
    assert_one_home(
        "a_c_programs_threads_share_one_home_under_co_thread",
        c_program(),
        &["spin"],
    );
}

#[test]
fn a_cpp_programs_threads_share_one_home_under_co_thread() {
    assert_one_home(
        "a_cpp_programs_threads_share_one_home_under_co_thread",
        cpp_program(),
        &[],
    );
}

#[test]
fn a_rust_programs_threads_share_one_home_under_co_thread() {
    assert_one_home(
        "a_rust_programs_threads_share_one_home_under_co_thread",
        rust_program(),
        &[],
    );
}

#[test]
fn policy_none_leaves_every_thread_its_full_mask() {
    let test = "policy_none_leaves_every_thread_its_full_mask";
    assert_full_masks(test, "none", c_program(), &["spin"]);
    assert_full_masks(test, "none", cpp_program(), &[]);
    assert_full_masks(test, "none", rust_program(), &[]);
}

#[test]
fn data_affinity_leaves_unhinted_threads_unplaced() {
    assert_full_masks(
        "data_affinity_leaves_unhinted_threads_unplaced",
        "data-affinity",
        c_program(),
        &["spin"],
    );
}

#[test]
fn the_programs_own_hints_reach_the_same_runtime() {
    let Some(program) = c_program() else { return };
    let _machine = beside_others();
    let n = 3;
    let mut r = Running::start(run_cmd(
        &["--policy", "co-thread", "--balance-interval-ms", "0"],
        &program,
        &["hint", &n.to_string()],
    ));
    assert!(
        !r.extra.iter().any(|l| l.starts_with("hint-failed")),
        "{:?}",
        r.extra
    );
    let stats: serde_json::Value = serde_json::from_str(&r.line_starting("stats")).unwrap();
    // One runtime knows every thread: attached at creation, and the hinting
    // thread registered once, not a second time by its hint.
    assert_eq!(stats["threads_attached"], n + 1, "{stats}");
    assert_eq!(stats["threads_registered"], n + 1, "{stats}");
    assert_eq!(stats["hint_calls"], 1, "{stats}");
    assert_eq!(stats["refused_calls"]["other"], 0, "{stats}");
    assert_eq!(stats["preload_attach_failures"], 0, "{stats}");
    assert!(r.finish().success());
}

#[test]
fn a_program_started_by_the_program_inherits_the_policy() {
    let test = "a_program_started_by_the_program_inherits_the_policy";
    let Some(program) = c_program() else { return };
    let Some((first, second, hogs)) = busy_second_cpu(test) else {
        return;
    };
    // sh forks and execs the C program (the `; exit` keeps sh from exec'ing
    // it in place): the grandchild gets LD_PRELOAD and DFSCHED_* from sh.
    // sh's own runtime places sh's lone thread on its CPU at once, and dash
    // starts the program with vfork, so without dfsched's exec hook the
    // program would start confined to that CPU and pass or fail by where sh
    // happened to run (see the test below).
    let r = Running::start_descendant(co_thread_on(
        first,
        second,
        Path::new("sh"),
        &["-c", "\"$0\" spin 3; exit $?", program.to_str().unwrap()],
    ));
    assert_eq!(r.tids.len(), 4);
    assert_all_on(&settle_on(&r, first), first);
    assert!(r.finish().success());
    drop(hogs);
}

/// The `Cpus_allowed_list` lines printed by `script`, run by `sh -c` under
/// `dfsched run --policy co-thread` with no balancer.
fn allowed_lists_printed_by(script: &str) -> Vec<BTreeSet<u32>> {
    let mut cmd = clean(Command::new(dfsched()));
    cmd.args(["run", "--policy", "co-thread", "--balance-interval-ms", "0"])
        .args(["--", "sh", "-c", script]);
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| cpulist(l.strip_prefix("Cpus_allowed_list:").unwrap()))
        .collect()
}

#[test]
fn a_program_execd_by_a_placed_thread_gets_the_allowed_cpus_back() {
    let test = "a_program_execd_by_a_placed_thread_gets_the_allowed_cpus_back";
    let Some(cpus) = two_cpus(test) else { return };
    if !have("grep") {
        support::skip_or_fail(&format!("SKIP {test}: no grep on this machine"));
        return;
    }
    // sh's runtime places sh's only thread on one CPU when it starts (a lone
    // thread's smallest home), and sh starts each grep with (v)fork + exec.
    // The second grep runs without dfsched (policy none), so it prints the
    // mask it was exec'd with, not a placement of its own.
    let lists = allowed_lists_printed_by(
        "grep ^Cpus_allowed_list: /proc/$$/status && \
         DFSCHED_POLICY=none grep ^Cpus_allowed_list: /proc/self/status",
    );
    let [sh, exec_d] = lists.as_slice() else {
        panic!("expected two lists: {lists:?}");
    };
    assert!(
        sh.len() == 1 && sh.is_subset(&cpus),
        "premise: dfsched placed sh on one CPU of {cpus:?}, its mask is {sh:?}"
    );
    assert_eq!(
        *exec_d, cpus,
        "a program sh started has sh's placement {sh:?}, not the allowed CPUs"
    );
}

/// The output of `program spawn`, run by `dfsched run --policy co-thread`
/// with no balancer: its lone main thread is placed on one CPU at once (a
/// lone thread's smallest home), then starts children that print the masks
/// they were created with (see the fixtures' `spawn` modes).
fn spawn_output(program: &Path) -> Vec<String> {
    let out = run_cmd(
        &["--policy", "co-thread", "--balance-interval-ms", "0"],
        program,
        &["spawn"],
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The cpulist after `tag ` on each line of `lines` that has it.
fn masks_tagged(lines: &[String], tag: &str) -> Vec<BTreeSet<u32>> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix(tag)?.strip_prefix(' '))
        .map(cpulist)
        .collect()
}

/// Asserts the premise and the restore: every `parent-mask` line (before
/// the first child and after each) is the same single CPU of `cpus`.
fn assert_placed_alone_throughout(lines: &[String], cpus: &BTreeSet<u32>, children: usize) {
    let parent = masks_tagged(lines, "parent-mask");
    assert_eq!(parent.len(), children + 1, "{lines:?}");
    assert!(
        parent[0].len() == 1 && parent[0].is_subset(cpus),
        "premise: dfsched placed the main thread on one CPU of {cpus:?}: {lines:?}"
    );
    assert!(
        parent.iter().all(|m| *m == parent[0]),
        "the thread did not get its placement back after each child: {lines:?}"
    );
}

#[test]
fn programs_started_by_a_placed_thread_with_posix_spawn_system_or_popen_get_the_allowed_cpus() {
    let test =
        "programs_started_by_a_placed_thread_with_posix_spawn_system_or_popen_get_the_allowed_cpus";
    let Some(cpus) = two_cpus(test) else { return };
    let Some(program) = c_program() else { return };
    // libc makes these children itself (system and popen through its
    // internal posix_spawn), cloned with the calling thread's mask: without
    // dfsched's hooks each would be confined to the parent's placement.
    let lines = spawn_output(&program);
    assert_placed_alone_throughout(&lines, &cpus, 4);
    for how in ["posix_spawn", "posix_spawnp", "system", "popen"] {
        assert_eq!(
            masks_tagged(&lines, &format!("{how}-mask")),
            std::slice::from_ref(&cpus),
            "a program started with {how} by a placed thread: {lines:?}"
        );
    }
    // The real call's own result passes through: ENOENT (2 on Linux).
    assert!(lines.iter().any(|l| l == "missing 2"), "{lines:?}");
    let stats: serde_json::Value = serde_json::from_str(
        lines
            .iter()
            .find_map(|l| l.strip_prefix("stats "))
            .expect("a stats line"),
    )
    .unwrap();
    assert_eq!(stats["spawn_lends"], 5, "{stats}");
    assert_eq!(stats["affinity_failures"]["eperm"], 0, "{stats}");
}

#[test]
fn a_program_started_by_a_placed_rust_thread_with_std_command_gets_the_allowed_cpus() {
    let test = "a_program_started_by_a_placed_rust_thread_with_std_command_gets_the_allowed_cpus";
    let Some(cpus) = two_cpus(test) else { return };
    let Some(program) = rust_program() else {
        return;
    };
    let lines = spawn_output(&program);
    assert_placed_alone_throughout(&lines, &cpus, 1);
    assert_eq!(
        masks_tagged(&lines, "command-mask"),
        [cpus],
        "a program started with std::process::Command by a placed thread: {lines:?}"
    );
}

#[test]
fn when_dfsched_cannot_start_the_threads_run_unplaced_and_it_is_counted() {
    let Some(program) = c_program() else { return };
    let _machine = beside_others();
    let cpus = allowed();
    let n = 4;
    // A sysfs root with no topology: the runtime cannot start in the
    // program (dfsched run only checks the variables' form).
    let mut cmd = run_cmd(
        &["--policy", "co-thread", "--balance-interval-ms", "0"],
        &program,
        &["stats", &n.to_string()],
    );
    cmd.env("DFSCHED_SYSFS_ROOT", scratch().join("no-sysfs-here"));
    cmd.stderr(Stdio::piped());
    let mut r = Running::start(cmd);
    assert_eq!(r.tids.len(), n + 1, "every thread ran");
    for (tid, mask) in r.masks() {
        assert_eq!(mask, cpus, "thread {tid} was placed");
    }
    // No runtime, so no counters: the C ABI says NULL (and why, below).
    assert_eq!(r.line_starting("stats"), "NULL");
    let last = r.line_starting("last-error");
    assert!(last.contains("no-sysfs-here"), "{last}");
    // Closing stdin ends the program, and with it its stderr.
    drop(r.stdin.take());
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut r.child.stderr.take().unwrap(), &mut stderr).unwrap();
    let status = r.child.wait().unwrap();
    assert!(status.success());
    assert!(stderr.contains("dfsched: not started"), "{stderr}");
}

#[test]
fn a_thread_dfsched_cannot_place_runs_anyway_and_is_counted() {
    let test = "a_thread_dfsched_cannot_place_runs_anyway_and_is_counted";
    let Some(cpus) = two_cpus(test) else { return };
    let Some(program) = c_program() else { return };
    if !have("taskset") {
        support::skip_or_fail(&format!("SKIP {test}: no taskset"));
        return;
    }
    let _machine = beside_others();
    let mut cpus = cpus.iter();
    let (first, second) = (*cpus.next().unwrap(), *cpus.next().unwrap());
    // The runtime starts in a main thread confined to `first`, so its CPUs
    // are {first}; a thread created on `second` alone has no CPU dfsched
    // may use: its attach fails, and it runs where it was created.
    let mut cmd = clean(Command::new("taskset"));
    cmd.args([
        "-c",
        &first.to_string(),
        dfsched(),
        "run",
        "--policy",
        "co-thread",
    ])
    .arg("--")
    .arg(&program)
    .args(["outside", &second.to_string()]);
    let o = cmd.output().unwrap();
    assert!(o.status.success(), "{o:?}");
    let text = String::from_utf8_lossy(&o.stdout);
    let line = |prefix: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} in {text}"))
            .trim()
            .to_string()
    };
    let err = line("outside-error");
    assert!(err.contains("hold no CPU"), "{err}");
    let stats: serde_json::Value = serde_json::from_str(&line("stats")).unwrap();
    assert_eq!(stats["preload_attach_failures"], 1, "{stats}");
    // The main thread (and the refused one, which exited since) only.
    assert_eq!(stats["threads_attached"], 1, "{stats}");
    assert_eq!(stats["refused_calls"]["no_cpu"], 1, "{stats}");
}

/// The status of `program args` run directly and under `dfsched run`.
fn statuses(program: &Path, args: &[&str]) -> (ExitStatus, ExitStatus) {
    let direct = clean(Command::new(program))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    let under = run_cmd(&["--policy", "co-thread"], program, args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    (direct, under)
}

#[test]
fn an_exit_status_passes_through() {
    let Some(program) = c_program() else { return };
    for code in ["0", "42"] {
        let (direct, under) = statuses(&program, &["exit", code]);
        assert_eq!(direct.code(), Some(code.parse().unwrap()));
        assert_eq!(under.code(), direct.code());
    }
}

#[test]
fn an_abort_passes_through_as_sigabrt() {
    let Some(program) = c_program() else { return };
    let (direct, under) = statuses(&program, &["abort"]);
    assert_eq!(direct.signal(), Some(SIGABRT));
    assert_eq!(under.signal(), direct.signal(), "{under:?}");
}

/// SIGABRT's number on Linux.
const SIGABRT: i32 = 6;

#[test]
fn a_forked_child_gets_its_cpus_back_and_a_runtime_of_its_own() {
    let test = "a_forked_child_gets_its_cpus_back_and_a_runtime_of_its_own";
    let Some(program) = c_program() else { return };
    let Some((first, second, hogs)) = busy_second_cpu(test) else {
        return;
    };
    let mut r = Running::start(co_thread_on(first, second, &program, &["fork", "3"]));
    // The parent's threads packed on the first CPU, then the fork.
    assert_all_on(&settle_on(&r, first), first);
    drop(r.stdin.take());
    let lines: Vec<String> = (&mut r.out).lines().map(Result::unwrap).collect();
    let status = r.child.wait().unwrap();
    drop(hogs);
    let find = |prefix: &str| {
        lines
            .iter()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} in {lines:?}"))
            .trim()
            .to_string()
    };
    // The forking thread was on the first CPU; the child's only thread is
    // back on both CPUs it may use, as without dfsched.
    assert_eq!(cpulist(&find("parent-mask")), BTreeSet::from([first]));
    assert_eq!(
        cpulist(&find("child-mask")),
        BTreeSet::from([first, second]),
        "{lines:?}"
    );
    // The child's own runtime knows the child's threads only: its main
    // thread and the two it started.
    let stats: serde_json::Value = serde_json::from_str(&find("child-stats")).unwrap();
    assert_eq!(stats["threads_registered"], 3, "{stats}");
    assert_eq!(stats["threads_attached"], 3, "{stats}");
    assert_eq!(stats["preload_attach_failures"], 0, "{stats}");
    // The child exited 5; the parent passed it on.
    assert_eq!(find("child-status"), (5 << 8).to_string());
    assert_eq!(status.code(), Some(5));
}

#[test]
fn a_missing_library_is_an_error_naming_where_it_looked() {
    let o = run_cmd(
        &["--lib", "/nonexistent/libdfsched.so"],
        Path::new("true"),
        &[],
    )
    .output()
    .unwrap();
    assert_eq!(o.status.code(), Some(125));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("/nonexistent/libdfsched.so"), "{err}");
    let mut cmd = run_cmd(&[], Path::new("true"), &[]);
    cmd.env("DFSCHED_LIB", "/nowhere/libdfsched.so");
    let o = cmd.output().unwrap();
    assert_eq!(o.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&o.stderr).contains("$DFSCHED_LIB /nowhere/libdfsched.so"));
}

#[test]
fn a_missing_program_is_an_error() {
    let o = run_cmd(&[], Path::new("dfsched-no-such-program"), &[])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(127));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("program not found: dfsched-no-such-program"),
        "{err}"
    );
}

#[test]
fn a_bad_policy_or_variable_runs_nothing() {
    let marker = scratch().join("ran");
    let _ = std::fs::remove_file(&marker);
    let touch = format!("touch {}", marker.display());
    let o = run_cmd(&["--policy", "cothread"], Path::new("sh"), &["-c", &touch])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("co-thread"));
    let mut cmd = run_cmd(&[], Path::new("sh"), &["-c", &touch]);
    cmd.env("DFSCHED_IMBALANCE_PCT", "0");
    let o = cmd.output().unwrap();
    assert_eq!(o.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&o.stderr).contains("DFSCHED_IMBALANCE_PCT"));
    assert!(!marker.exists(), "the program ran despite the bad setting");
}

#[test]
fn a_misspelt_option_is_a_usage_error_not_a_program() {
    let marker = scratch().join("ran-misspelt");
    let _ = std::fs::remove_file(&marker);
    let touch = format!("touch {}", marker.display());
    let o = clean(Command::new(dfsched()))
        .args(["run", "--polcy", "data-affinity", "--", "sh", "-c", &touch])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--polcy") && err.contains("--policy"), "{err}");
    assert!(!marker.exists(), "the program ran despite the bad option");
    // The program's own options after it are still its own.
    let o = run_cmd(&[], Path::new("sh"), &["-c", "echo $0 $1", "--x", "-y"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "--x -y");
}

#[test]
fn a_lib_that_is_not_a_shared_library_is_refused() {
    // A text file, and a file named like the library but too short for an
    // ELF header.
    let short = scratch().join("libshort.so");
    std::fs::write(&short, b"\x7fELF").unwrap();
    for lib in ["/etc/passwd", short.to_str().unwrap()] {
        let o = run_cmd(&["--lib", lib], Path::new("true"), &[])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(125), "{lib}: {err}");
        assert!(
            err.contains(lib) && err.contains("not a shared library"),
            "{err}"
        );
    }
}

#[test]
fn a_bad_option_value_is_named_as_the_option() {
    let o = run_cmd(&["--imbalance-pct", "0"], Path::new("true"), &[])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--imbalance-pct"), "{err}");
    assert!(!err.contains("DFSCHED_IMBALANCE_PCT"), "{err}");
}

#[test]
fn dfsched_log_writes_the_runtimes_events_and_dfsched_stats_its_counters_at_exit() {
    let Some(prog) = c_program() else {
        support::skip_or_fail("SKIP dfsched_log_…: no gcc");
        return;
    };
    let dir = scratch().join(format!("stats-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pattern = dir.join("stats-%p.json");
    let mut cmd = run_cmd(&["--policy", "co-thread"], &prog, &["spin", "2"]);
    cmd.env("DFSCHED_LOG", "info")
        .env("DFSCHED_STATS", &pattern)
        .stderr(Stdio::piped());
    let mut r = Running::start(cmd);
    let mut stderr = r.child.stderr.take().unwrap();
    let pid = r.pid;
    assert!(r.finish().success());
    let mut err = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut err).unwrap();
    // The runtime's start, on stderr, plain.
    assert!(
        err.lines().any(
            |l| l.starts_with(&format!("dfsched[{pid}] INFO dfsched")) && l.contains("started")
        ),
        "{err}"
    );
    let path = dir.join(format!("stats-{pid}.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; stderr: {err}", path.display()));
    let stats: serde_json::Value = serde_json::from_str(&text).unwrap();
    // The main thread and 2 spinning ones were attached.
    assert!(
        stats["threads_registered"].as_u64().unwrap() >= 3,
        "{stats}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_child_gets_ld_preload_first_and_the_policy_variables() {
    let mut cmd = run_cmd(
        &["--policy", "data-affinity", "--heavy-load-milli", "1500"],
        Path::new("sh"),
        &[
            "-c",
            "echo \"$LD_PRELOAD|$DFSCHED_PRELOAD|$DFSCHED_POLICY|$DFSCHED_HEAVY_LOAD_MILLI\"",
        ],
    );
    cmd.env("LD_PRELOAD", "");
    let o = cmd.output().unwrap();
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    let fields: Vec<&str> = text.trim().split('|').collect();
    assert!(fields[0].ends_with("libdfsched.so"), "{text}");
    assert!(Path::new(fields[0]).is_absolute(), "{text}");
    assert_eq!(&fields[1..], ["1", "data-affinity", "1500"], "{text}");
}

#[test]
fn help_explains_the_policies_and_gives_an_example() {
    let o = Command::new(dfsched())
        .args(["run", "--help"])
        .output()
        .unwrap();
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    for needle in [
        "co-thread",
        "data-affinity",
        "none",
        "LD_PRELOAD",
        "--lib",
        "Example",
        "Cpus_allowed_list",
        "127",
        "dfsched agent",
        "agent.sock",
        "--no-agent",
        "DFSCHED_AGENT",
    ] {
        assert!(text.contains(needle), "{needle} missing from:\n{text}");
    }
}

#[test]
fn a_program_writing_to_stdout_and_stdin_works_unchanged() {
    // The program's stdin, stdout and status are its own (exec).
    let mut child = run_cmd(&[], Path::new("cat"), &[])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"hello\n").unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success());
    assert_eq!(o.stdout, b"hello\n");
}

/// On a machine of thousands of CPUs the sysfs reader reads in several
/// threads, created while the runtime starts. Under `LD_PRELOAD` each of
/// them went through the `pthread_create` hook, which asked for the global
/// runtime from the very thread that was starting it, holding the start
/// lock: the program spun in `sched_yield` for ever before its `main`
/// (seen with `dfsched run -- sleep 0.2` on the 8,192-CPU fixture). A tree
/// of 2,048 CPUs makes the reader use two threads wherever two CPUs are
/// available; the program must start, run and exit, with the runtime
/// started.
#[test]
fn a_preloaded_program_starts_on_a_machine_whose_topology_is_read_in_several_threads() {
    let test = "a_preloaded_program_starts_on_a_machine_whose_topology_is_read_in_several_threads";
    let parallel = std::thread::available_parallelism().map_or(1, usize::from);
    if parallel < 2 {
        support::skip_or_fail(&format!(
            "SKIP {test}: the sysfs reader reads in one thread with {parallel} CPU available"
        ));
        return;
    }
    let dir = scratch().join(format!("large-sysfs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // 1 node x 32 LLCs x 32 cores x SMT2 = 2,048 CPUs: two reading threads
    // (one per 1,024 CPUs, crates/dfsched-rt/src/sysfs.rs `read_parts`).
    dfsched::sysfs::write_test_tree(&dir, 1, 32, 32, 2).unwrap();
    let stats = dir.join("stats.json");
    let mut cmd = run_cmd(&["--policy", "co-thread"], Path::new("sleep"), &["0.1"]);
    cmd.env("DFSCHED_SYSFS_ROOT", &dir)
        .env("DFSCHED_STATS", &stats)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`dfsched run -- sleep 0.1` on a 2,048-CPU tree did not exit within 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "{status:?}: {err}");
    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    assert_eq!(stats["enabled"], true, "the runtime started: {stats}");
    assert!(
        stats["threads_registered"].as_u64() >= Some(1),
        "the main thread was attached: {stats}"
    );
    assert_eq!(stats["preload_attach_failures"], 0, "{stats}");
    let _ = std::fs::remove_dir_all(&dir);
}
