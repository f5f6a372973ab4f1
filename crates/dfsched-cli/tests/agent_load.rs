//! The agent's shared load view end to end: one sample serves every
//! client (an unregistered spinning process is in the unmanaged load, a
//! registered one is not, reports within the freshness bound cost one
//! sample); a runtime uses the agent's sample instead of sampling itself
//! and falls back to its own signals when the agent is gone or speaks
//! another protocol; a pass that moves threads reports the new load at once; an
//! agent with an idle exit ends by itself when no one is connected, and
//! stays while someone is.
//!
//! Every agent here listens on a socket in a private temporary directory,
//! never on the default socket. Helper processes are this test binary
//! started again with `AGENT_LOAD_CHILD` set (see [`child_body`]). Waits
//! are for states, bounded by [`DEADLINE`] only so that a broken build
//! fails instead of hanging; nothing is timed.
//!
//! The temporary directory, agent guard and helper-process plumbing shared
//! with tests/agent.rs are in tests/agent_support/mod.rs.

mod agent_support;

use agent_support::{
    balance_passes, fake_scheduler, manual_config, rerun, root_or_skip, skip_or_fail, two_cpus,
    AgentGuard, ChildProc, ExtGranted, TempDir, BIN, DEADLINE,
};
use dfsched::agent::{Client, Report, Status};
use dfsched::{CpuId, CpuSet, Runtime, RuntimeConfig};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Set in helper children: `CPU THREADS`, the CPU they spin on.
const CHILD_ENV: &str = "AGENT_LOAD_CHILD";
/// Set in a child that runs one test alone (see [`alone`]): its name.
const ALONE_ENV: &str = "AGENT_LOAD_ALONE";

/// Whether the caller, test `name`, should run its body here: `true` in a
/// child started for it, where no other test of this binary runs. Otherwise
/// runs this test binary again with only `name` and `--test-threads=1`, in
/// a new session when the `setsid` tool is there, fails if that child
/// fails, and returns `false`.
///
/// For tests that read this process's load back from the agent: the
/// runtime counts every runnable thread of its process, and under the
/// harness the threads of tests running beside it are such threads (a CI
/// run once saw 2000 extra on the CPU a group had just left).
fn alone(name: &str) -> bool {
    if std::env::var(ALONE_ENV).as_deref() == Ok(name) {
        return true;
    }
    // In a session of its own (the `setsid` tool), so that "our session"
    // is an autogroup of the test's own whatever started the suite: a CI
    // runner started outside any session left the tests in the root group,
    // where there is no session to weigh.
    let rerun = rerun(name);
    let mut cmd = if Command::new("setsid")
        .arg("true")
        .status()
        .is_ok_and(|s| s.success())
    {
        let mut cmd = Command::new("setsid");
        cmd.arg(rerun.get_program()).args(rerun.get_args());
        cmd
    } else {
        rerun
    };
    let out = cmd
        .env(ALONE_ENV, name)
        .env_remove(CHILD_ENV)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{name} alone failed:\n{text}");
    // A filter that matched nothing would pass vacuously.
    assert!(
        text.contains("1 passed"),
        "{name} did not run alone:\n{text}"
    );
    // Pass a skip message through.
    for line in text.lines().filter(|l| l.starts_with("skipped ")) {
        eprintln!("{line}");
    }
    false
}

/// A helper process (see [`child_body`]).
struct Helper(ChildProc);

impl Helper {
    /// A process with `threads` threads spinning on `cpu`.
    fn spin(cpu: CpuId, threads: u32) -> Helper {
        let mut cmd = rerun("child_body");
        cmd.env(CHILD_ENV, format!("{} {threads}", cpu.0))
            .stderr(Stdio::null());
        Helper(ChildProc::spawn(cmd, "H4:"))
    }

    /// A process with `per_cpu[i].1` threads spinning on `per_cpu[i].0`,
    /// in a session of its own if `new_session` (started through the
    /// `setsid` tool, which then execs it under the same pid).
    fn spin_on(per_cpu: &[(CpuId, u32)], new_session: bool) -> Helper {
        let spec: Vec<String> = per_cpu
            .iter()
            .map(|&(c, n)| format!("{} {n}", c.0))
            .collect();
        let rerun = rerun("child_body");
        let mut cmd = if new_session {
            let mut cmd = Command::new("setsid");
            cmd.arg(rerun.get_program()).args(rerun.get_args());
            cmd
        } else {
            rerun
        };
        cmd.env(CHILD_ENV, spec.join(" ")).stderr(Stdio::null());
        Helper(ChildProc::spawn(cmd, "H4:"))
    }

    fn pid(&self) -> u32 {
        self.0.pid()
    }

    /// Registers the helper with the agent on `sock`, reporting `milli`
    /// thousandths of load on `cpu`; its connection stays open.
    fn register(&mut self, sock: &Path, cpu: CpuId, milli: u64) {
        let cmd = format!("report {} {} {milli}", sock.display(), cpu.0);
        assert_eq!(self.0.ask(&cmd), "ok");
    }
}

/// The body of a helper process, and nothing when run as an ordinary test.
///
/// With `AGENT_LOAD_CHILD="CPU N"`: pins itself to CPU, starts N threads
/// spinning there (always runnable, always on that CPU; more `CPU N` pairs
/// may follow, each thread pinned to its pair's CPU), prints `H4:ready`,
/// then answers `report SOCK CPU MILLI` (connect to the agent on SOCK,
/// report MILLI thousandths on CPU, keep the connection) with `H4:ok`.
/// Exits at EOF.
#[test]
fn child_body() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return;
    };
    let numbers: Vec<u32> = spec.split(' ').map(|w| w.parse().unwrap()).collect();
    let on = |cpu: u32| -> CpuSet { [CpuId(cpu)].into_iter().collect() };
    dfsched::sys::set_affinity(0, &on(numbers[0])).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spinners: Vec<_> = numbers
        .chunks(2)
        .flat_map(|pair| std::iter::repeat_n(pair[0], pair[1] as usize))
        .map(|cpu| {
            let stop = stop.clone();
            let on = on(cpu);
            std::thread::spawn(move || {
                dfsched::sys::set_affinity(0, &on).unwrap();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    println!("H4:ready");
    let mut clients = Vec::new();
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let words: Vec<&str> = line.split(' ').collect();
        let answer = match words[..] {
            ["report", sock, cpu, milli] => {
                let mut c = Client::connect(Path::new(sock)).unwrap();
                let report = Report {
                    watchable: false,
                    detail: None,
                    load_milli: vec![(CpuId(cpu.parse().unwrap()), milli.parse().unwrap())],
                    allowed: dfsched::sys::get_affinity(0).unwrap(),
                    own_socket_inode: c.socket_inode(),
                    weighed: false,
                    own_sample: false,
                };
                match c.report(report) {
                    Ok(_) => {
                        clients.push(c);
                        "ok".to_string()
                    }
                    Err(e) => e.to_string(),
                }
            }
            _ => format!("unknown command {line:?}"),
        };
        println!("H4:{answer}");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for s in spinners {
        s.join().unwrap();
    }
}

/// Threads per CPU in a view's unmanaged load.
fn on_cpu(unmanaged: &[(CpuId, u32)], cpu: CpuId) -> u32 {
    unmanaged
        .iter()
        .find(|&&(c, _)| c == cpu)
        .map_or(0, |&(_, n)| n)
}

/// A report of no load from this process (registers it), as a client
/// that does not ask for the weighed load.
fn empty_report(c: &Client) -> Report {
    Report {
        watchable: false,
        detail: None,
        load_milli: Vec::new(),
        allowed: dfsched::sys::get_affinity(0).unwrap(),
        own_socket_inode: c.socket_inode(),
        weighed: false,
        own_sample: false,
    }
}

/// Thousandths per CPU in a weighed load.
fn milli_on(load: &[(CpuId, u64)], cpu: CpuId) -> u64 {
    load.iter().find(|&&(c, _)| c == cpu).map_or(0, |&(_, m)| m)
}

/// The link's budget for the runtimes here, which count on every pass
/// getting the agent's view: with the default (50 ms) a machine busy
/// enough leaves a pass without it (the runtime then scans for itself, as
/// it should; tests/agent_hardening.rs covers that), and these tests are
/// about what the view holds, not about the agent's speed.
const PATIENT_AGENT_MS: u64 = 5000;

#[test]
fn the_agent_weighs_the_unmanaged_load_against_the_clients_own_group() {
    const NAME: &str = "the_agent_weighs_the_unmanaged_load_against_the_clients_own_group";
    // Alone: other tests' unregistered spinners would be outside load in
    // our own session.
    if !alone(NAME) {
        return;
    }
    let Some((c0, c1)) = two_cpus(NAME) else {
        return;
    };
    let mut sampler = dfsched::procfs::LoadSampler::new("/proc");
    let ctx = sampler.group_context();
    let ours = sampler.group_of(ctx, std::process::id());
    if !matches!(
        ours,
        dfsched::weigh::SchedGroup::Group {
            key: dfsched::weigh::GroupKey::Autogroup(_),
            ..
        }
    ) {
        skip_or_fail(&format!("skipped {NAME}: not in an autogroup ({ours:?})"));
        return;
    }
    if !Command::new("setsid")
        .arg("true")
        .status()
        .is_ok_and(|s| s.success())
    {
        skip_or_fail(&format!("skipped {NAME}: no setsid tool"));
        return;
    }
    let dir = TempDir::new("weigh");
    let agent = AgentGuard::start(&dir.sock(), &["--tick-ms", "20", "--scan-fresh-ms", "0"]);
    let rt = Runtime::start(RuntimeConfig {
        external_load: true,
        external_window: 1,
        idle_passes: 0,
        agent_timeout_ms: PATIENT_AGENT_MS,
        // Alone with the agent, yet exchanging every pass: these tests
        // are about the exchange itself.
        agent_lone_passes: 1,
        ..manual_config(&dir.sock())
    })
    .unwrap();
    let deadline = Instant::now() + DEADLINE;
    // Our session: 2 threads per CPU weigh 2000 there at least (other
    // load only adds). Another session: the same 4 threads are one group
    // of 500 per CPU, so a pass that saw them has less than 2000 on each
    // CPU, in the agent's view and in what the runtime gave its engine.
    // Counted one by one, both would be 2000 or more.
    for new_session in [false, true] {
        let hogs = Helper::spin_on(&[(c0, 2), (c1, 2)], new_session);
        loop {
            rt.balance_now().unwrap();
            let link = rt.agent_link();
            let s = rt.stats();
            let counted = link.unmanaged.clone().unwrap_or_default();
            let milli = link.unmanaged_milli.clone().expect("the agent weighed");
            let engine = &s.external_load_per_cpu_milli;
            let seen = on_cpu(&counted, c0) >= 2 && on_cpu(&counted, c1) >= 2;
            let reached = if new_session {
                seen && [c0, c1]
                    .iter()
                    .all(|&c| milli_on(&milli, c) < 2000 && milli_on(engine, c) < 2000)
            } else {
                [c0, c1]
                    .iter()
                    .all(|&c| milli_on(&milli, c) >= 2000 && milli_on(engine, c) >= 2000)
            };
            if reached {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "new session {new_session}: {link:?} {engine:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!rt.agent_link().registered.contains(&hogs.pid()));
        drop(hogs);
    }
    let s = rt.stats();
    assert_eq!(s.external_load_own_scans, 0, "{s:?}");
    assert!(s.external_load_agent_samples > 0);
    rt.shutdown();
    drop(agent);
}

#[test]
fn one_sample_serves_every_report_within_the_freshness_bound() {
    let Some((cpu, _)) = two_cpus("one_sample_serves_every_report") else {
        return;
    };
    let dir = TempDir::new("scan");
    // A freshness bound far longer than the test: every report after the
    // first is answered from the first sample.
    let agent = AgentGuard::start(
        &dir.sock(),
        &["--tick-ms", "20", "--scan-fresh-ms", "60000"],
    );
    let mut spinner = Helper::spin(cpu, 2);
    let mut me = Client::connect(&dir.sock()).unwrap();
    let first = me.report(empty_report(&me)).unwrap();
    assert!(first.unmanaged.is_some(), "the agent sampled");
    assert!(!first.registered.contains(&spinner.pid()));
    spinner.register(&dir.sock(), cpu, 2000);
    let second = me.report(empty_report(&me)).unwrap();
    assert!(second.registered.contains(&spinner.pid()));
    assert_eq!(second.unmanaged, first.unmanaged, "the same sample");
    // Three reports (ours twice, the spinner's once), one sample.
    let s = agent.status();
    assert_eq!(s.counters.reports, 3);
    assert_eq!(s.counters.scans, 1, "{:?}", s.counters);
    assert_eq!(s.counters.scan_errors, 0);
}

/// An unregistered process's spinning threads are unmanaged load on their
/// CPU; once it registers, its CPU time and runnable threads are its own
/// report's and leave the unmanaged load: its CPU can then read empty,
/// which it never does while the spinner is unregistered (busy time and
/// two runnable threads there make at least one thread).
#[test]
fn an_unregistered_spinner_is_unmanaged_and_a_registered_one_is_not() {
    let Some((cpu, _)) = two_cpus("an_unregistered_spinner_is_unmanaged") else {
        return;
    };
    let dir = TempDir::new("unreg");
    let agent = AgentGuard::start(&dir.sock(), &["--tick-ms", "20", "--scan-fresh-ms", "0"]);
    // The unmanaged count is the spinner's threads plus whatever else
    // runs (a build or another test beside this one: a busy machine
    // failed `== 0` here every time), and the agent places it on CPUs by
    // their busy time (`crate::signals`: /proc/stat has one runnable
    // count for the machine), so with the other CPU busy too the
    // spinner's threads show on both. So the whole machine's count is
    // judged, the spinner is many threads, and registering it must take
    // the count below half of them, which other processes alone do not
    // reach unless more than SPIN / 2 of their threads stay runnable.
    const SPIN: u32 = 16;
    let total = |u: &[(CpuId, u32)]| u.iter().map(|&(_, n)| n).sum::<u32>();
    let mut spinner = Helper::spin(cpu, SPIN);
    let mut me = Client::connect(&dir.sock()).unwrap();
    let deadline = Instant::now() + DEADLINE;
    loop {
        let view = me.report(empty_report(&me)).unwrap();
        let unmanaged = view.unmanaged.expect("the agent sampled");
        if total(&unmanaged) >= SPIN {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "spinner never seen: {unmanaged:?}"
        );
        std::thread::sleep(Duration::from_millis(30));
    }
    spinner.register(&dir.sock(), cpu, u64::from(SPIN) * 1000);
    loop {
        let view = me.report(empty_report(&me)).unwrap();
        assert!(view.registered.contains(&spinner.pid()));
        let unmanaged = view.unmanaged.expect("the agent sampled");
        if total(&unmanaged) < SPIN / 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "registered spinner still unmanaged: {unmanaged:?}"
        );
        std::thread::sleep(Duration::from_millis(30));
    }
    assert_eq!(agent.status().counters.scan_errors, 0);
}

/// A runtime in this process reporting to the agent on `sock`, with no
/// balancer thread (passes run by `balance_now`, so each is seen whole).
fn runtime_on(sock: &Path) -> Runtime {
    let mut cfg = RuntimeConfig {
        external_load: true,
        // The waiting threads below stand for load: they must not turn
        // blocked however many passes a slow machine needs.
        idle_passes: 0,
        agent_timeout_ms: PATIENT_AGENT_MS,
        // Alone with the agent, yet exchanging every pass: these tests
        // are about the exchange itself.
        agent_lone_passes: 1,
        ..manual_config(sock)
    };
    // Heavy load from one runnable thread per CPU: a group's home is then
    // one CPU, so a move is a change of CPU.
    cfg.engine.heavy_load_milli = 1000;
    Runtime::start(cfg).unwrap()
}

/// Asserts how many of `rt`'s passes so far took the agent's sample of
/// the outside load and how many scanned `/proc` themselves
/// (`(agent_samples, own_scans)`); `rt`'s stats, for further checks.
#[track_caller]
fn assert_samples(rt: &Runtime, want: (u64, u64), what: &str) -> dfsched::RuntimeStats {
    let s = rt.stats();
    assert_eq!(
        (s.external_load_agent_samples, s.external_load_own_scans),
        want,
        "{what}: {s:?}"
    );
    s
}

#[test]
fn a_runtime_uses_the_agents_sample_and_scans_itself_only_without_it() {
    let dir = TempDir::new("rt");
    let agent = AgentGuard::start(
        &dir.sock(),
        &["--tick-ms", "20", "--scan-fresh-ms", "60000"],
    );
    let rt = runtime_on(&dir.sock());
    balance_passes(&rt, 3);
    let s = assert_samples(
        &rt,
        (3, 0),
        "three passes on the agent's sample, no scan of our own",
    );
    assert_eq!(s.external_load_samples, 3);
    let link = rt.agent_link();
    assert!(link.connected && link.unmanaged.is_some(), "{link:?}");
    assert_eq!(agent.status().counters.scans, 1);
    // The agent goes: the next passes scan /proc themselves.
    agent.stop();
    balance_passes(&rt, 2);
    assert_samples(&rt, (3, 2), "the agent gone, each pass scans itself");
    assert!(!rt.agent_link().connected);
    rt.shutdown();
}

/// A stand-in agent on `sock` for one connection: each line it reads is
/// answered with `answer(&mut state, line)`, until the client closes;
/// joining it gives `state` back.
fn stand_in_agent<S: Send + 'static>(
    sock: &Path,
    mut state: S,
    answer: fn(&mut S, &str) -> &'static str,
) -> std::thread::JoinHandle<S> {
    let listener = std::os::unix::net::UnixListener::bind(sock).unwrap();
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut writer = stream;
        let mut line = String::new();
        while reader.read_line(&mut line).unwrap_or(0) > 0 {
            if writeln!(writer, "{}", answer(&mut state, &line)).is_err() {
                break;
            }
            line.clear();
        }
        state
    })
}

#[test]
fn an_agent_of_another_protocol_version_means_an_own_scan() {
    // A stand-in for an old agent: it answers every line as version 1 did.
    let dir = TempDir::new("old");
    let server = stand_in_agent(
        &dir.sock(),
        (),
        |(), _| r#"{"v":1,"reply":{"view":{"others_milli":[],"registered":[],"home":null,"set":null}}}"#,
    );
    let rt = runtime_on(&dir.sock());
    rt.balance_now().unwrap();
    assert_samples(&rt, (0, 1), "an agent of another version: an own scan");
    let link = rt.agent_link();
    assert_eq!(link.failures, 1, "{link:?}");
    rt.shutdown();
    drop(rt);
    server.join().unwrap();
}

#[test]
fn an_agent_from_before_the_weighed_field_still_serves_its_sample() {
    // A stand-in for a version-2 agent that predates `weighed`: it refuses
    // a report carrying the field as malformed (it refuses unknown fields)
    // and keeps the connection; a plain report gets a view with `unmanaged`
    // only.
    let dir = TempDir::new("preweigh");
    let server = stand_in_agent(&dir.sock(), 0, |refused: &mut u32, line| {
        if line.contains("weighed") {
            *refused += 1;
            r#"{"v":2,"reply":{"error":{"kind":"malformed","message":"unknown field `weighed`"}}}"#
        } else {
            r#"{"v":2,"reply":{"view":{"others_milli":[],"unmanaged":[[0,3]],"registered":[],"home":null,"set":null}}}"#
        }
    });
    let rt = runtime_on(&dir.sock());
    balance_passes(&rt, 3);
    assert_samples(&rt, (3, 0), "the older agent's sample on every pass");
    let link = rt.agent_link();
    assert_eq!((link.failures, link.reports), (0, 3), "{link:?}");
    assert_eq!(link.unmanaged, Some(vec![(CpuId(0), 3)]));
    assert_eq!(link.unmanaged_milli, None);
    rt.shutdown();
    drop(rt);
    // Refused twice on the connection (with `watchable`, which this agent
    // predates too, then with `weighed`), then plain reports only.
    assert_eq!(server.join().unwrap(), 2);
}

#[test]
fn an_agent_from_before_top_still_gets_weighed_reports() {
    // A stand-in for an agent that knows `weighed` but predates
    // `watchable` (dfsched top): it refuses a report with that field as
    // malformed; the runtime must drop only that field and keep asking
    // for the weighed load.
    let dir = TempDir::new("pretop");
    let server = stand_in_agent(
        &dir.sock(),
        (0, 0),
        |(refused, weighed): &mut (u32, u32), line| {
            if line.contains("watchable") {
                *refused += 1;
                r#"{"v":2,"reply":{"error":{"kind":"malformed","message":"unknown field `watchable`"}}}"#
            } else {
                if line.contains(r#""weighed":true"#) {
                    *weighed += 1;
                }
                r#"{"v":2,"reply":{"view":{"others_milli":[],"unmanaged":[[0,3]],"unmanaged_milli":[[0,1500]],"registered":[],"home":null,"set":null}}}"#
            }
        },
    );
    let rt = runtime_on(&dir.sock());
    balance_passes(&rt, 3);
    let link = rt.agent_link();
    assert_eq!((link.failures, link.reports), (0, 3), "{link:?}");
    assert_eq!(link.unmanaged_milli, Some(vec![(CpuId(0), 1500)]));
    rt.shutdown();
    drop(rt);
    // `watchable` refused once; every report weighed.
    assert_eq!(server.join().unwrap(), (1, 3));
}

#[test]
fn an_agent_from_before_the_body_still_gets_details_without_it() {
    // A stand-in for an agent that knows `dfsched top` but predates the
    // detail's `body`: it refuses a report naming a body as malformed, and
    // asks for details (`watch`). A runtime on the scx body must drop only
    // the body, and go on sending its details.
    if !root_or_skip(
        "SKIP an_agent_from_before_the_body_still_gets_details_without_it: the scx body \
         talks only to a root-run scheduler socket, and this test's fake is its own",
    ) {
        return;
    }
    let dir = TempDir::new("prebody");
    let server = stand_in_agent(
        &dir.sock(),
        (0, 0),
        |(refused, details): &mut (u32, u32), line| {
            if line.contains(r#""body""#) {
                *refused += 1;
                r#"{"v":2,"reply":{"error":{"kind":"malformed","message":"unknown field `body`"}}}"#
            } else {
                if line.contains(r#""detail""#) {
                    *details += 1;
                }
                r#"{"v":2,"reply":{"view":{"others_milli":[],"unmanaged":[[0,3]],"unmanaged_milli":[[0,1500]],"registered":[],"home":null,"set":null,"watch":true}}}"#
            }
        },
    );
    let mut cfg = RuntimeConfig {
        agent_timeout_ms: PATIENT_AGENT_MS,
        agent_lone_passes: 1,
        scx: dfsched::scx::ScxMode::Socket(fake_scheduler(&dir)),
        ..manual_config(&dir.sock())
    };
    cfg.idle_passes = 0;
    let rt = Runtime::start_with_sys(cfg, std::sync::Arc::new(ExtGranted)).unwrap();
    assert!(
        rt.stats().scx_body,
        "the premise: the runtime is on the scx body"
    );
    // Pass 1 hears it is watched; pass 2 sends a detail naming the body,
    // refused, and again without; pass 3 without at once.
    balance_passes(&rt, 3);
    let link = rt.agent_link();
    assert_eq!((link.failures, link.reports), (0, 3), "{link:?}");
    assert!(rt.stats().scx_body, "the body itself is kept");
    rt.shutdown();
    drop(rt);
    assert_eq!(
        server.join().unwrap(),
        (1, 2),
        "the body refused once; details sent on without it"
    );
}

/// Two threads of the test process that joined `rt` (by `join`) and wait
/// until [`Waiting::finish`]; the runtime counts them runnable meanwhile
/// (with idle detection off, `idle_passes: 0`).
struct Waiting {
    tids: Vec<u64>,
    stop: std::sync::mpsc::Sender<()>,
    workers: Vec<std::thread::JoinHandle<()>>,
}

impl Waiting {
    fn start(rt: &Runtime, join: fn(&Runtime)) -> Waiting {
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (stop, stop_rx) = std::sync::mpsc::channel::<()>();
        let stop_rx = std::sync::Arc::new(std::sync::Mutex::new(stop_rx));
        let workers = (0..2)
            .map(|_| {
                let (rt, tid_tx, stop_rx) = (rt.clone(), tid_tx.clone(), stop_rx.clone());
                std::thread::spawn(move || {
                    join(&rt);
                    tid_tx.send(dfsched::sys::gettid()).unwrap();
                    let _ = stop_rx.lock().unwrap().recv();
                })
            })
            .collect();
        let tids = (0..2).map(|_| tid_rx.recv().unwrap()).collect();
        Waiting {
            tids,
            stop,
            workers,
        }
    }

    /// The first thread's affinity mask.
    fn mask(&self) -> CpuSet {
        dfsched::sys::get_affinity(self.tids[0]).unwrap()
    }

    fn finish(self) {
        drop(self.stop);
        for w in self.workers {
            w.join().unwrap();
        }
    }
}

/// Waits (no pass runs meanwhile: the tests have no balancer thread) until
/// the agent's record of this process has its load on `to` and none on
/// `from`: the update the moving pass sent without waiting for its reply.
/// Returns the agent's status then. Run [`alone`]: then the only runnable
/// threads of this process are the two waiting ones (2000 on `to`), and
/// the balancing thread itself, which the runtime leaves out.
fn wait_record_moved(agent: &AgentGuard, from: CpuId, to: &CpuSet) -> Status {
    let on_to = |s: &Status| -> Option<(u64, u64)> {
        let mine = s.processes.iter().find(|p| p.pid == std::process::id())?;
        let on = |cpu: CpuId| {
            mine.load_milli
                .iter()
                .find(|&&(c, _)| c == cpu)
                .map_or(0, |&(_, m)| m)
        };
        Some((to.iter().map(on).sum(), on(from)))
    };
    agent.wait_for("the record moved by the pass's update", |s| {
        on_to(s).is_some_and(|(to, from)| to >= 2000 && from == 0)
    })
}

#[test]
fn a_pass_that_moves_threads_reports_the_new_load_at_once() {
    if !alone("a_pass_that_moves_threads_reports_the_new_load_at_once") {
        return;
    }
    let Some(_) = two_cpus("a_pass_that_moves_threads_reports_the_new_load_at_once") else {
        return;
    };
    let dir = TempDir::new("moved");
    // No tick during the test: the helper shares its stdin and stdout
    // pipes with this process, and sharing detection would give both one
    // home, which is not what this test is about.
    let agent = AgentGuard::start(&dir.sock(), &["--tick-ms", "60000"]);
    let rt = runtime_on(&dir.sock());
    // Two threads on DF 1, then waiting (the runtime counts them runnable).
    let threads = Waiting::start(&rt, |rt| rt.enter(1).unwrap());
    let mask = || threads.mask();
    rt.balance_now().unwrap();
    let home = mask();
    assert_eq!(home.len(), 1, "heavy load: one CPU, got {home}");
    let from = home.iter().next().unwrap();
    // Another process reports 8 threads on that CPU: the group moves away.
    let mut other = Helper::spin(from, 0);
    other.register(&dir.sock(), from, 8000);
    let moves_before = rt.stats().engine.group_moves;
    let start = Instant::now();
    while rt.stats().engine.group_moves == moves_before {
        rt.balance_now().unwrap();
        assert!(start.elapsed() < DEADLINE, "never moved: {:?}", rt.stats());
    }
    let to = mask();
    assert!(!to.contains(from), "moved to {to}");
    // The pass that moved sent the new load before returning: with no pass
    // since, the agent's record of this process comes to have it where the
    // threads went.
    let link = rt.agent_link();
    assert!(link.updates >= 1, "{link:?}");
    let s = wait_record_moved(&agent, from, &to);
    assert!(s.counters.updates >= 1, "{:?}", s.counters);
    threads.finish();
    rt.shutdown();
}

#[test]
fn an_idle_agent_exits_and_removes_its_socket_and_lock() {
    let dir = TempDir::new("idle");
    let _agent = AgentGuard::start(&dir.sock(), &["--tick-ms", "20", "--idle-exit", "1"]);
    assert!(dir.sock().exists() && dir.lock().exists());
    let start = Instant::now();
    while dir.sock().exists() || dir.lock().exists() {
        assert!(
            start.elapsed() < DEADLINE,
            "still there after {DEADLINE:?}: socket {}, lock {}",
            dir.sock().exists(),
            dir.lock().exists()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!dfsched::agent::is_live(&dir.sock()));
}

#[test]
fn an_agent_with_a_connected_client_stays_past_its_idle_exit() {
    let dir = TempDir::new("busy");
    let agent = AgentGuard::start(&dir.sock(), &["--tick-ms", "20", "--idle-exit", "2"]);
    let mut client = Client::connect(&dir.sock()).unwrap();
    let pid = client.status().unwrap().agent_pid;
    // Twice the idle exit with the connection open: still serving it.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(client.status().unwrap().agent_pid, pid);
    assert!(dfsched::agent::is_live(&dir.sock()));
    drop(client);
    // And once it closes, the agent goes.
    let start = Instant::now();
    while dir.sock().exists() {
        assert!(
            start.elapsed() < DEADLINE,
            "the agent stayed after its client left"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(agent);
}

#[test]
fn agent_help_explains_the_idle_exit() {
    let out = Command::new(BIN)
        .args(["agent", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "--idle-exit <SECS>",
        "--scan-fresh-ms <MS>",
        "dfsched run",
        "--idle-exit 30",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
}

/// Whether process `pid` has ended (gone, or a zombie nobody reaped yet).
fn ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

#[test]
fn a_stopped_agent_ends_without_waiting_for_its_tick() {
    let dir = TempDir::new("longtick");
    // A tick far longer than the deadline: a stop that waited for the tick
    // thread's sleep would leave the process running past it.
    let agent = AgentGuard::start(&dir.sock(), &["--tick-ms", "60000"]);
    let pid = agent.status().agent_pid;
    agent.stop();
    let start = Instant::now();
    while !ended(pid) {
        assert!(start.elapsed() < DEADLINE, "agent {pid} still running");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!dir.lock().exists(), "lock file left behind");
}

#[test]
fn a_co_thread_group_rehomed_by_the_home_rule_reports_its_new_cpu_at_once() {
    if !alone("a_co_thread_group_rehomed_by_the_home_rule_reports_its_new_cpu_at_once") {
        return;
    }
    let Some((c0, c1)) =
        two_cpus("a_co_thread_group_rehomed_by_the_home_rule_reports_its_new_cpu_at_once")
    else {
        return;
    };
    let dir = TempDir::new("rehomed");
    let agent = AgentGuard::start(&dir.sock(), &["--tick-ms", "60000"]);
    let mut cfg = RuntimeConfig {
        external_load: true,
        policy: dfsched::Policy::CoThread,
        // As in `runtime_on`: the waiting threads count, however long.
        idle_passes: 0,
        ..manual_config(&dir.sock())
    };
    cfg.engine.heavy_load_milli = 1000;
    let rt = Runtime::start(cfg).unwrap();
    // Two attached threads (no DF): the process's co-thread group.
    let threads = Waiting::start(&rt, |rt| rt.attach().unwrap());
    let mask = || threads.mask();
    // Another process with two threads on c0: the group is within its fair
    // share packed on c1 (alone, 2 threads on 2 CPUs, it would not be).
    let mut first = Helper::spin(c0, 0);
    first.register(&dir.sock(), c0, 2000);
    let start = Instant::now();
    while mask() != CpuSet::single(c1) {
        rt.balance_now().unwrap();
        assert!(
            start.elapsed() < DEADLINE,
            "never packed on {c1}: {}",
            mask()
        );
    }
    let from = c1;
    // A third reports 8 threads on c1: the home rule's keep test fails and
    // the group is re-homed in the pass's step 0, which is no GroupMoved.
    let mut other = Helper::spin(from, 0);
    other.register(&dir.sock(), from, 8000);
    let group_moves = rt.stats().engine.group_moves;
    let start = Instant::now();
    while mask().contains(from) {
        rt.balance_now().unwrap();
        assert!(
            start.elapsed() < DEADLINE,
            "never re-homed: {:?}",
            rt.stats()
        );
    }
    let to = mask();
    assert_eq!(
        rt.stats().engine.group_moves,
        group_moves,
        "re-homed, not moved"
    );
    // The pass that re-homed told the agent before returning.
    wait_record_moved(&agent, from, &to);
    threads.finish();
    rt.shutdown();
}

/// A runtime that is the agent's only registered process exchanges once
/// every `LONE_PASSES` passes and samples the outside load itself between
/// (one process has no one to coordinate with, and an exchange costs both
/// sides more than that sample); once a second process registers, the next
/// exchange hears of it and every pass exchanges again.
#[test]
fn a_lone_runtime_reports_once_in_lone_passes_until_a_second_registers() {
    use dfsched::agent::LONE_PASSES;
    let dir = TempDir::new("lone");
    // Every report that asks for the sample gets a fresh one.
    let agent = AgentGuard::start(&dir.sock(), &["--tick-ms", "20", "--scan-fresh-ms", "0"]);
    let rt = Runtime::start(manual_config(&dir.sock())).unwrap();
    rt.balance_now().unwrap();
    let link = rt.agent_link();
    assert!(link.connected && link.alone, "{link:?}");
    assert_eq!(link.reports, 1, "{link:?}");
    let scans_before = rt.stats().external_load_own_scans;
    balance_passes(&rt, 2 * LONE_PASSES);
    // Passes 1, 1 + LONE_PASSES and 1 + 2 × LONE_PASSES exchanged.
    let link = rt.agent_link();
    assert_eq!(
        (link.reports, link.lone_passes),
        (3, u64::from(2 * (LONE_PASSES - 1))),
        "{link:?}"
    );
    // Every pass after the first samples for itself, the two that
    // exchanged too: their reports asked for no sample, and the agent
    // took none for them (the first report, before the runtime knew it
    // was alone, got one).
    let own = rt.stats().external_load_own_scans - scans_before;
    assert_eq!(own, u64::from(2 * LONE_PASSES), "own samples on every pass");
    let c = agent.status().counters;
    assert_eq!((c.scans, c.own_sample_reports), (1, 2), "{c:?}");
    // A second process registers: heard of within LONE_PASSES passes.
    let cpu = dfsched::sys::get_affinity(0)
        .unwrap()
        .iter()
        .next()
        .unwrap();
    let mut other = Helper::spin(cpu, 0);
    other.register(&dir.sock(), cpu, 1000);
    let mut passes = 0;
    while rt.agent_link().alone {
        rt.balance_now().unwrap();
        passes += 1;
        assert!(passes <= LONE_PASSES, "{:?}", rt.agent_link());
    }
    let before = rt.agent_link().reports;
    balance_passes(&rt, 5);
    let link = rt.agent_link();
    assert_eq!(link.reports, before + 5, "{link:?}");
    assert!(link.registered.contains(&other.pid()), "{link:?}");
    // The exchange that heard of the other was still sent alone; no
    // longer alone, each of the five reports after it asked for the sample.
    let after = agent.status().counters;
    assert_eq!(
        after.own_sample_reports,
        c.own_sample_reports + 1,
        "{after:?}"
    );
    assert!(after.scans >= c.scans + 5, "{after:?}");
    rt.shutdown();
}

/// A runtime that weighs no outside load never has the agent sample
/// `/proc` for it, even exchanging on every pass.
#[test]
fn a_runtime_without_outside_load_costs_the_agent_no_sample() {
    let dir = TempDir::new("noext");
    let agent = AgentGuard::start(&dir.sock(), &["--tick-ms", "20", "--scan-fresh-ms", "0"]);
    let rt = Runtime::start(RuntimeConfig {
        external_load: false,
        agent_timeout_ms: PATIENT_AGENT_MS,
        agent_lone_passes: 1,
        ..manual_config(&dir.sock())
    })
    .unwrap();
    balance_passes(&rt, 3);
    let link = rt.agent_link();
    assert_eq!(
        (link.reports, link.unmanaged.clone()),
        (3, None),
        "{link:?}"
    );
    let c = agent.status().counters;
    assert_eq!(
        (c.reports, c.scans, c.own_sample_reports),
        (3, 0, 3),
        "{c:?}"
    );
    rt.shutdown();
}
