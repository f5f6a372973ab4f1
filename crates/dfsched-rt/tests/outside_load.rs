//! The load of processes not under dfsched, weighed by CFS group against
//! the real kernel: spinning helper processes ("hogs", `sh` loops pinned
//! per CPU by the test) started in this test's own session and in a new
//! one (`setsid`). In our session every hog thread competes with ours one
//! by one and weighs a whole nice-0 thread; in another session (with
//! autogroups on) the hogs are one CFS group weighing one nice-0 thread in
//! all, spread over the CPUs they run on.
//!
//! Each of those tests reruns itself in a child process in a new session,
//! so that "our session" is an autogroup of its own wherever `cargo test`
//! runs (a CI runner's init session is the root group, not an autogroup).
//! The tests hold one lock so that no two of them run hogs at once (their
//! hogs would be each other's outside load), wait for states with a
//! generous deadline, and skip with a message (fail under `CI=true`) where
//! the machine cannot show the difference (fewer than 2 CPUs, autogroups
//! off, this process in a cpu cgroup of its own).

mod common;

use common::*;
use dfsched::agent::AgentMode;
use dfsched::procfs::LoadSampler;
use dfsched::weigh::{GroupKey, SchedGroup};
use dfsched::{CpuId, Policy, Runtime, RuntimeConfig};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a state may take to be reached before the test fails.
const DEADLINE: Duration = Duration::from_secs(30);

/// Held by each test while its hogs run.
static HOGS: Mutex<()> = Mutex::new(());

/// Spinning single-threaded processes, children of one `sh`, each pinned
/// to a CPU; killed (by pid) on drop.
struct Hogs {
    sh: Child,
    pids: Vec<u32>,
}

impl Hogs {
    /// `per_cpu[i].1` hogs pinned to `per_cpu[i].0`, in a new session if
    /// `new_session`.
    fn start(per_cpu: &[(CpuId, usize)], new_session: bool) -> Hogs {
        let n: usize = per_cpu.iter().map(|&(_, k)| k).sum();
        // Each loop is a subshell of its own; `echo $!` gives us its pid.
        let script = format!(
            "i=0; while [ $i -lt {n} ]; do (while :; do :; done) & echo $!; i=$((i+1)); done; wait"
        );
        let mut cmd = Command::new("sh");
        cmd.args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        if new_session {
            // SAFETY: setsid is async-signal-safe and touches no memory of
            // the parent; it cannot fail in a fresh child (not a group
            // leader), and if it did the spawn reports the error.
            unsafe {
                cmd.pre_exec(|| {
                    if libc::setsid() < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let mut sh = cmd.spawn().expect("spawn sh");
        let mut lines = BufReader::new(sh.stdout.take().unwrap()).lines();
        let mut hogs = Hogs {
            sh,
            pids: Vec::new(),
        };
        for _ in 0..n {
            let line = lines.next().expect("a hog's pid").unwrap();
            hogs.pids.push(line.trim().parse().expect("a pid"));
        }
        let cpus = per_cpu.iter().flat_map(|&(c, k)| std::iter::repeat_n(c, k));
        for (&pid, cpu) in hogs.pids.iter().zip(cpus) {
            dfsched::sys::set_affinity(u64::from(pid), &set_of(&[cpu])).unwrap();
        }
        hogs
    }

    fn contains(&self, pid: u32) -> bool {
        self.pids.contains(&pid)
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for &pid in &self.pids {
            // SAFETY: kill has no memory effects; the pids are our
            // grandchildren, which live until killed (sh waits for them).
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
            }
        }
        let _ = self.sh.kill();
        let _ = self.sh.wait();
    }
}

/// Set in the child that [`in_own_session`] runs a test in.
const OWN_SESSION_ENV: &str = "DFSCHED_TEST_OWN_SESSION";

/// How long a test run in a session of its own may take.
const CHILD_DEADLINE: Duration = Duration::from_secs(150);

/// Where a test that needs its own autogroup runs its body.
enum Session {
    /// Here: this process is the child in a new session, and this is its
    /// CFS group.
    Here(SchedGroup),
    /// In a child process in a new session, which ran the whole test and
    /// passed (its failure fails the caller); nothing is left to do here.
    RanInChild,
}

/// Establishes the premise of the tests that compare hogs in our session
/// with hogs in another: this process is in an autogroup of its own.
/// Whatever session `cargo test` runs in (a terminal's autogroup, or the
/// root group of a CI runner's init session, where a session is no CFS
/// group), the test reruns itself (`--exact test`) in a child that calls
/// `setsid`, which gives it a new autogroup; the child finds it here and
/// returns [`Session::Here`]. Only where the kernel has autogroups off (or
/// the process sits in a cpu cgroup) can no session be a CFS group: then
/// this skips, or fails under `CI=true`, and returns `None`.
fn in_own_session(test: &str) -> Option<Session> {
    if std::env::var_os(OWN_SESSION_ENV).is_none() {
        run_in_new_session(test);
        return Some(Session::RanInChild);
    }
    let mut sampler = LoadSampler::new("/proc");
    let ctx = sampler.group_context();
    match sampler.group_of(ctx, std::process::id()) {
        g @ SchedGroup::Group {
            key: GroupKey::Autogroup(_),
            ..
        } => Some(Session::Here(g)),
        other => {
            common::skip_or_fail(&format!(
                "SKIP {test}: a new session's process is not in an autogroup \
                 ({other:?}, {ctx:?}); a session is then no CFS group of its own"
            ));
            None
        }
    }
}

/// Runs `test` of this binary in a child process in a new session, its
/// output passed through, and fails unless the child passes within
/// [`CHILD_DEADLINE`] (a stuck child is killed).
fn run_in_new_session(test: &str) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(OWN_SESSION_ENV, "1")
        .stdin(Stdio::null());
    // SAFETY: setsid is async-signal-safe and touches no memory of the
    // parent; it cannot fail in a fresh child (not a group leader), and if
    // it did the spawn reports the error.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("the test's child in a new session");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break status;
        }
        if start.elapsed() > CHILD_DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{test} in a new session did not end in {CHILD_DEADLINE:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{test} in a new session: {status}");
}

/// Polls `f` until it returns `Some`, failing with `what` after
/// [`DEADLINE`].
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{what} not reached in {DEADLINE:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn hogs_in_our_session_weigh_a_thread_each_and_in_another_half_a_thread_per_cpu() {
    let test = "hogs_in_our_session_weigh_a_thread_each_and_in_another_half_a_thread_per_cpu";
    let _one = HOGS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(Session::Here(ours)) = in_own_session(test) else {
        return;
    };
    let Some((c0, c1)) = two_cpus(test) else {
        return;
    };
    let mut sampler = LoadSampler::new("/proc");
    // The hogs inherit our nice, and a new session's autogroup starts at
    // nice 0 (weight 1024): against our own nice and group weight, 2 hogs
    // per CPU of our session are 2 whole tasks per CPU, and 4 of another
    // are that group's weight over ours, half on each CPU (500 per CPU
    // when ours is at nice 0 too).
    let our_nice = sampler.nice_of(std::process::id());
    let SchedGroup::Group {
        weight: our_weight, ..
    } = ours
    else {
        unreachable!("in_own_session gives a group");
    };
    let another = 1024 * 1000 * 2 / (our_weight * 4);
    for (new_session, want) in [(false, 2000), (true, another)] {
        let hogs = Hogs::start(&[(c0, 2), (c1, 2)], new_session);
        // Only the hogs' threads, weighed against our group: exact, whatever
        // else runs on the machine.
        let got = wait_for("the hogs running on their CPUs", || {
            let sample = sampler.sample_outside(|pid| !hogs.contains(pid)).unwrap();
            let counted = sample.count(|_| false);
            (counted == vec![(c0, 2), (c1, 2)]).then(|| sample.weigh(&ours, our_nice, |_| false))
        });
        assert_eq!(
            got,
            vec![(c0, want), (c1, want)],
            "new session: {new_session}"
        );
    }
}

/// A runtime that samples the outside load itself (no agent) every
/// `balance_now`, with no damping.
fn sampling(policy: Policy) -> Runtime {
    Runtime::start(RuntimeConfig {
        external_load: true,
        external_window: 1,
        agent: AgentMode::Off,
        policy,
        ..quiet()
    })
    .unwrap()
}

/// A co-thread runtime that samples the outside load itself (no agent)
/// every `balance_now`, damped by the default window as every program is:
/// on a shared machine an undamped pass can catch a burst of other
/// sessions' threads, which is the window's job, not the weighing's.
fn co_thread_as_shipped() -> Runtime {
    Runtime::start(RuntimeConfig {
        external_load: true,
        external_window: dfsched::config::DEFAULT_EXTERNAL_WINDOW,
        agent: AgentMode::Off,
        policy: Policy::CoThread,
        ..quiet()
    })
    .unwrap()
}

/// The external load per CPU the runtime's last pass gave its engine.
fn external_on(rt: &Runtime, c: CpuId) -> u64 {
    let s = rt.stats();
    s.external_load_per_cpu_milli
        .iter()
        .find(|&&(cpu, _)| cpu == c)
        .map_or(0, |&(_, m)| m)
}

#[test]
fn the_runtimes_own_scan_weighs_hogs_of_another_session_as_one_group() {
    let test = "the_runtimes_own_scan_weighs_hogs_of_another_session_as_one_group";
    let _one = HOGS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(Session::Here(_)) = in_own_session(test) else {
        return;
    };
    with_two_cpus(test, move |c0, c1| {
        let rt = sampling(Policy::DataAffinity);
        // In our session: 2 threads per CPU, whatever else runs (other load
        // only adds).
        let hogs = Hogs::start(&[(c0, 2), (c1, 2)], false);
        wait_for("2 hog threads per CPU seen", || {
            rt.balance_now().unwrap();
            (external_on(&rt, c0) >= 2000 && external_on(&rt, c1) >= 2000).then_some(())
        });
        drop(hogs);
        // In another session the same 4 threads weigh 500 per CPU: a pass
        // that saw all 4 (external_runnable) with less than 2000 on each
        // CPU. Counted one by one they would always weigh 2000 or more.
        let hogs = Hogs::start(&[(c0, 2), (c1, 2)], true);
        wait_for("the hogs weighed below 2 threads per CPU", || {
            rt.balance_now().unwrap();
            let s = rt.stats();
            let (m0, m1) = (external_on(&rt, c0), external_on(&rt, c1));
            (s.external_runnable >= 4 && m0 < 2000 && m1 < 2000).then_some(())
        });
        drop(hogs);
        assert!(rt.stats().external_load_own_scans > 0);
        rt.shutdown();
    });
}

/// A thread that attached to a runtime and spins until dropped.
struct Spinner {
    tid: u64,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Spinner {
    fn start(rt: &Runtime) -> Spinner {
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let (rt, flag) = (rt.clone(), Arc::clone(&stop));
        let handle = std::thread::spawn(move || {
            rt.attach().unwrap();
            tid_tx.send(dfsched::sys::gettid()).unwrap();
            while !flag.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        Spinner {
            tid: tid_rx.recv().unwrap(),
            stop,
            handle: Some(handle),
        }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Runs passes until one saw at least `n` outside threads after the
/// refresh that weighs them by group has published (its second sweep: the
/// first is a baseline) and the weighed load has come through the window to
/// the engine, so that a thread started next is placed by it.
fn see_hogs(rt: &Runtime, n: u64) {
    wait_for("the hogs seen and weighed by a pass", || {
        rt.balance_now().unwrap();
        let s = rt.stats();
        let weighed = s.external_refreshes >= 2 && s.external_runnable >= n;
        (weighed && s.external_load_milli > 0).then_some(())
    });
}

/// Passes in a row the pair must stay spread for.
const SPREAD_PASSES: u32 = 5;

/// 10 hogs, 5 per CPU, beside a co-thread runtime of 2 spinning threads:
/// counted one by one they make the load heavy (7000 against an average
/// of 6000 with the pair on one CPU: acceptable, so packed); weighed as
/// another session's one group (500 per CPU) the load is light and the
/// pair stays on both CPUs.
#[test]
fn a_co_thread_pair_beside_another_sessions_hogs_is_not_packed() {
    let test = "a_co_thread_pair_beside_another_sessions_hogs_is_not_packed";
    let _one = HOGS.lock().unwrap_or_else(|e| e.into_inner());
    let Some(Session::Here(_)) = in_own_session(test) else {
        return;
    };
    with_two_cpus(test, move |c0, c1| {
        let mask = |s: &Spinner| dfsched::sys::get_affinity(s.tid).unwrap();
        let one_cpu = |a: &Spinner, b: &Spinner| {
            let m = mask(a);
            m.len() == 1 && m == mask(b)
        };
        // The premise: hogs in our session pack the pair on one CPU as soon
        // as it starts (the co-thread rules place a new thread by the load
        // the engine has).
        let hogs = Hogs::start(&[(c0, 5), (c1, 5)], false);
        let rt = co_thread_as_shipped();
        see_hogs(&rt, 10);
        let pair = [Spinner::start(&rt), Spinner::start(&rt)];
        wait_for("premise: the pair packed beside our session's hogs", || {
            rt.balance_now().unwrap();

            one_cpu(&pair[0], &pair[1]).then_some(())
        });
        drop(pair);
        rt.shutdown();
        drop(hogs);

        // The same hogs in a new session: the pair stays on both CPUs for
        // SPREAD_PASSES passes in a row that all saw the 10 hogs.
        let hogs = Hogs::start(&[(c0, 5), (c1, 5)], true);
        let rt = co_thread_as_shipped();
        see_hogs(&rt, 10);
        let pair = [Spinner::start(&rt), Spinner::start(&rt)];
        let both = set_of(&[c0, c1]);
        let mut in_a_row = 0;
        wait_for("the pair on both CPUs for passes that saw the hogs", || {
            rt.balance_now().unwrap();
            let seen = rt.stats().external_runnable >= 10;
            let spread = mask(&pair[0]) == both && mask(&pair[1]) == both;
            in_a_row = if seen && spread { in_a_row + 1 } else { 0 };
            (in_a_row >= SPREAD_PASSES).then_some(())
        });
        rt.check_invariants().unwrap();
        drop(pair);
        rt.shutdown();
        drop(hogs);
    });
}

/// The sleeping threads the pass-cost test puts beside a runtime.
const SLEEPERS: usize = 2000;

/// Not a test: the body of the child process of
/// `a_pass_reads_the_same_files_beside_thousands_of_sleeping_threads`,
/// which runs this binary with `--ignored --exact` and the variable set.
#[test]
#[ignore = "the child body of the pass-cost test, run by it in its own process"]
fn sleepers_child() {
    let n: usize = std::env::var("DFSCHED_TEST_SLEEPERS")
        .expect("run by the pass-cost test")
        .parse()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let rx = Arc::new(Mutex::new(rx));
    let threads: Vec<JoinHandle<()>> = (0..n)
        .map(|_| {
            let rx = Arc::clone(&rx);
            std::thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    // Each sleeps in the lock or the channel until stdin ends.
                    let _ = rx.lock().map(|r| r.recv());
                })
                .unwrap()
        })
        .collect();
    // One spinner: the outside load a refresh sweep is wanted for
    // (`signals::WeighGate`), and it makes this process's CPU ticks move,
    // so a sweep looks at its threads (a sample of them, not 2,000).
    let stop = Arc::new(AtomicBool::new(false));
    let spinner = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        })
    };
    println!("ready");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    stop.store(true, Ordering::Relaxed);
    let _ = spinner.join();
    drop(tx);
    for t in threads {
        let _ = t.join();
    }
}

/// Threads of process `pid` (its `status`), 0 if unreadable.
fn threads_of(pid: u32) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Threads:"))
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// A pass beside another process of 2,000 sleeping threads and one
/// spinning one opens one file (`/proc/stat`) when no refresh is due, and a
/// refresh opens a few per process on the machine and a sample of the busy
/// process's threads, never the sleepers' 2,000: the pass's work does not
/// grow with threads that are not ours. Counted, not timed. The spinner is
/// what makes a refresh wanted at all (on a quiet machine none starts,
/// `signals::WeighGate`).
#[test]
fn a_pass_reads_the_same_files_beside_thousands_of_sleeping_threads() {
    let _one = HOGS.lock().unwrap_or_else(|e| e.into_inner());
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", "sleepers_child", "--nocapture"])
        .env("DFSCHED_TEST_SLEEPERS", SLEEPERS.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the sleepers' process");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    wait_for("the sleepers ready", || {
        lines
            .next()
            .and_then(Result::ok)
            .filter(|l| l.trim() == "ready")
    });
    // Premise: the child holds the sleepers, and the machine's processes
    // are few enough that reading the sleepers would show in the count.
    let pid = child.id();
    assert!(threads_of(pid) > SLEEPERS, "{} threads", threads_of(pid));
    let processes = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|s| s.parse::<u32>().is_ok())
        })
        .count();
    assert!(
        processes * 8 < SLEEPERS,
        "{processes} processes: too many to tell the sleepers' files apart"
    );
    let rt = sampling(Policy::DataAffinity);
    // Three refreshes: the baseline, then two that compare CPU ticks.
    wait_for("three refreshes", || {
        rt.balance_now().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        (rt.stats().external_refreshes >= 3).then_some(())
    });
    let s = rt.stats();
    assert!(
        s.external_files_read < SLEEPERS as u64,
        "{} files in {} passes, {} refreshes",
        s.external_files_read,
        s.external_load_own_scans,
        s.external_refreshes
    );
    // Right after a refresh ends the next is seconds away: one file a pass.
    rt.balance_now().unwrap();
    let before = rt.stats();
    for _ in 0..5 {
        rt.balance_now().unwrap();
    }
    let after = rt.stats();
    if after.external_refreshes == before.external_refreshes {
        assert_eq!(after.external_files_read - before.external_files_read, 5);
    }
    assert_eq!(
        after.external_load_own_scans - before.external_load_own_scans,
        5
    );
    rt.shutdown();
    drop(child.stdin.take());
    let _ = child.kill();
    let _ = child.wait();
}
