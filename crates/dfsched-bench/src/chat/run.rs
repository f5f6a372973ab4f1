//! Runs Chat cases: connections, threads, the start gate, timing, rounds.
//!
//! One run of one mode:
//!
//! ```text
//!  main                               80 threads per room
//!  ────                               ───────────────────
//!  check the open-file limit
//!  bind 127.0.0.1:0; per user: connect,
//!    send a hello, accept, read it
//!  dfsched/co-thread: start a runtime
//!  spawn every thread ───────────────► place itself (mode), read its
//!                                      /proc/thread-self/sched
//!  wait until all arrived ◄─────────── arrive at the gate, wait
//!  start = now; open the gate ───────► send / read+broadcast / write /
//!                                      receive (see `net`)
//!  join all ◄───────────────────────── receivers note when their last
//!                                      message arrived; all read counters
//!  time = last receiver's finish − start
//! ```
//!
//! Rounds interleave the modes exactly as `bench df` does
//! ([`crate::runner::round_order`]), and progress is reported through the
//! same [`Progress`] type.

use super::net::Shared;
use super::place::{thread_index, ChatPlacer, Role};
use super::report::ChatReport;
use super::{ChatError, ChatMode, ChatParams, USERS_PER_ROOM};
use crate::cothread;
use crate::gate::StartGate;
use crate::machine::{Machine, TickSample};
use crate::os::{self, ThreadSched};
use crate::runner::{Progress, Rounds};
use dfsched::{Runtime, RuntimeConfig};
use dfsched_core::{CpuId, CpuSet};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::panic::{self, AssertUnwindSafe};
use std::thread;
use std::time::Instant;

/// Stack of each chat thread: they hold little (buffers are on the heap),
/// and 2 400 threads at the default 2 MiB would reserve 4.7 GiB.
const THREAD_STACK_BYTES: usize = 256 * 1024;

/// One run of one mode.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ChatRun {
    /// The mode.
    pub mode: ChatMode,
    /// Which round (0-based).
    pub round: usize,
    /// Seconds from the gate opening to the last message's arrival.
    pub time_s: f64,
    /// Messages delivered per second: messages delivered / `time_s`.
    pub throughput_msgs_per_s: f64,
    /// Messages delivered (and checked) in the run.
    pub messages_delivered: u64,
    /// CPU seconds of the chat threads, summed.
    pub cpu_s: f64,
    /// Context switches of the chat threads, summed.
    pub ctx_switches: u64,
    /// Migrations of the chat threads, summed.
    pub migrations: u64,
    /// Pins whose read-back differed (pinned modes).
    pub pin_mismatches: u64,
    /// Share (0–1) of the allowed CPUs other processes took during the run.
    pub others_share: Option<f64>,
    /// The runtime's statistics at the end of a `dfsched` or `co-thread` run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_stats: Option<serde_json::Value>,
}

/// What the environment gives every run, read once before any.
struct ChatEnv {
    allowed: CpuSet,
    machine: Machine,
    rt_config: Option<RuntimeConfig>,
}

/// Validates every case and checks the open-file limit, then runs the
/// cases in order, each as interleaved rounds; `progress` hears about every
/// finished run.
pub fn run_chat_cases(
    cases: &[ChatParams],
    progress: &mut dyn FnMut(&Progress),
) -> Result<Vec<ChatReport>, ChatError> {
    for c in cases {
        c.validate()?;
    }
    let needed = cases.iter().map(ChatParams::fds_needed).max().unwrap_or(0);
    if let Some(limit) = open_file_limit() {
        // Headroom for what the process already holds open.
        let in_use = open_fds().unwrap_or(0) + 16;
        if needed + in_use > limit {
            return Err(ChatError::FileLimit {
                needed: needed + in_use,
                limit,
            });
        }
    }
    let allowed = os::get_affinity().map_err(ChatError::Os)?;
    let rt_config = if cases
        .iter()
        .any(|c| c.modes.iter().any(|m| m.needs_runtime()))
    {
        Some(RuntimeConfig::from_env().map_err(ChatError::Runtime)?)
    } else {
        None
    };
    let env = ChatEnv {
        machine: Machine::describe(&allowed),
        allowed,
        rt_config,
    };
    let total = cases.iter().map(|c| c.repeat * c.modes.len()).sum();
    let mut rounds = Rounds::new(cases.len(), total, progress);
    let mut reports = Vec::with_capacity(cases.len());
    for (case, params) in cases.iter().enumerate() {
        let order = (&params.modes[..], params.repeat, params.seed);
        let run_mode = |mode: ChatMode, round| -> Result<ChatRun, ChatError> {
            let run = run_once(params, mode, round, &env)?;
            tracing::debug!(
                case,
                round,
                mode = mode.as_str(),
                time_s = run.time_s,
                "chat run finished"
            );
            Ok(run)
        };
        let runs = rounds.run_case(case, order, run_mode, |r| r.time_s)?;
        reports.push(ChatReport::new(params.clone(), env.machine.clone(), runs));
    }
    Ok(reports)
}

/// The soft open-file limit (`Max open files` of `/proc/self/limits`);
/// `None` if unreadable or unlimited.
fn open_file_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    parse_open_file_limit(&text)
}

fn parse_open_file_limit(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// File descriptors the process holds open now.
fn open_fds() -> Option<u64> {
    Some(std::fs::read_dir("/proc/self/fd").ok()?.count() as u64)
}

/// Connects every user: the client end and the server end of one TCP
/// connection each, indexed by user (rooms in order).
fn connect_all(users: usize) -> Result<(Vec<TcpStream>, Vec<TcpStream>), ChatError> {
    let setup = |what| move |source| ChatError::Setup { what, source };
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(setup("bind"))?;
    let addr = listener.local_addr().map_err(setup("local_addr"))?;
    let mut clients = Vec::with_capacity(users);
    let mut servers: Vec<Option<TcpStream>> = (0..users).map(|_| None).collect();
    for user in 0..users {
        let mut c = TcpStream::connect(addr).map_err(setup("connect"))?;
        c.write_all(&(user as u32).to_le_bytes())
            .map_err(setup("send hello"))?;
        let (mut s, _) = listener.accept().map_err(setup("accept"))?;
        let mut hello = [0u8; 4];
        s.read_exact(&mut hello).map_err(setup("read hello"))?;
        let who = u32::from_le_bytes(hello) as usize;
        if who >= users || servers[who].is_some() {
            return Err(ChatError::Setup {
                what: "hello",
                source: std::io::Error::other(format!("unexpected hello from user {who}")),
            });
        }
        // No Nagle: each 100-byte message leaves at once, as in an
        // interactive chat, and a run's tail never waits on a delayed ACK.
        c.set_nodelay(true).map_err(setup("TCP_NODELAY"))?;
        s.set_nodelay(true).map_err(setup("TCP_NODELAY"))?;
        clients.push(c);
        servers[who] = Some(s);
    }
    let servers = servers
        .into_iter()
        .map(|s| s.expect("every user said hello once"))
        .collect();
    Ok((clients, servers))
}

/// What one thread hands back.
struct ThreadOut {
    /// Receivers: when the last message arrived.
    finish: Option<Instant>,
    mismatches: u64,
    before: ThreadSched,
    after: ThreadSched,
}

/// Runs one mode once.
fn run_once(
    params: &ChatParams,
    mode: ChatMode,
    round: usize,
    env: &ChatEnv,
) -> Result<ChatRun, ChatError> {
    let (client, server) = connect_all(params.users())?;
    let shared = Shared::new(params.messages, client, server);
    shared.set_timeouts().map_err(|source| ChatError::Setup {
        what: "socket timeouts",
        source,
    })?;
    let cfg = || {
        env.rt_config
            .clone()
            .expect("the runtime config is read for cases with runtime modes")
    };
    let rt = match mode {
        ChatMode::Dfsched => {
            // `dfsched` is data affinity whatever DFSCHED_POLICY says.
            let mut cfg = cfg();
            cfg.policy = dfsched_core::Policy::DataAffinity;
            Some(Runtime::start(cfg).map_err(ChatError::Runtime)?)
        }
        ChatMode::CoThread => Some(cothread::start_runtime(cfg()).map_err(ChatError::CoThread)?),
        _ => None,
    };
    let cpus: Vec<CpuId> = env.allowed.iter().collect();
    let placer = ChatPlacer::new(mode, params.rooms, &cpus, rt.clone());
    let outcome = run_threads(params, &shared, &placer, &env.allowed);
    let runtime_stats = rt.map(|rt| {
        let stats = serde_json::to_value(rt.stats()).unwrap_or(serde_json::Value::Null);
        rt.shutdown();
        stats
    });
    let (start, outs, others_share) = outcome?;
    let end = outs
        .iter()
        .filter_map(|o| o.finish)
        .max()
        .expect("every run has receivers");
    let time_s = end.saturating_duration_since(start).as_secs_f64();
    let delivered = params.messages_delivered();
    let sum = |f: fn(&ThreadOut) -> u64| outs.iter().map(f).sum::<u64>();
    Ok(ChatRun {
        mode,
        round,
        time_s,
        throughput_msgs_per_s: if time_s > 0.0 {
            delivered as f64 / time_s
        } else {
            0.0
        },
        messages_delivered: delivered,
        cpu_s: sum(|o| {
            o.after
                .sum_exec_runtime_ns
                .saturating_sub(o.before.sum_exec_runtime_ns)
        }) as f64
            * 1e-9,
        ctx_switches: sum(|o| o.after.nr_switches.saturating_sub(o.before.nr_switches)),
        migrations: sum(|o| o.after.nr_migrations.saturating_sub(o.before.nr_migrations)),
        pin_mismatches: sum(|o| o.mismatches),
        others_share,
        runtime_stats,
    })
}

/// Why a thread did not finish.
enum ThreadFail {
    /// It could not place itself or read its counters.
    Failed(usize, crate::modes::PlaceError),
    /// The run failed elsewhere (recorded in [`Shared`]) or never started.
    Aborted,
}

type Timed = (Instant, Vec<ThreadOut>, Option<f64>);

/// Spawns every thread, opens the gate, joins them all.
fn run_threads(
    params: &ChatParams,
    shared: &Shared,
    placer: &ChatPlacer,
    allowed: &CpuSet,
) -> Result<Timed, ChatError> {
    let gate = StartGate::default();
    thread::scope(|s| {
        let mut handles = Vec::with_capacity(params.threads());
        let mut spawn_error = None;
        'spawn: for user in 0..params.users() {
            for role in Role::ALL {
                let gate = &gate;
                let spawned = thread::Builder::new()
                    .name(format!("chat-{}-{}", user, &role.as_str()[..4]))
                    .stack_size(THREAD_STACK_BYTES)
                    .spawn_scoped(s, move || chat_thread(shared, placer, gate, user, role));
                match spawned {
                    Ok(h) => handles.push(h),
                    Err(e) => {
                        spawn_error = Some(e);
                        break 'spawn;
                    }
                }
            }
        }
        let all_placed = gate.wait_arrivals(handles.len());
        let go = all_placed && spawn_error.is_none();
        let ticks_before = TickSample::read(allowed);
        let start = Instant::now();
        gate.decide(go);
        // With `go` false no thread starts its role, so none can wait on a
        // peer that never comes.
        let mut outs = Vec::with_capacity(handles.len());
        let mut first_error = None;
        let mut panicked = None;
        for (i, h) in handles.into_iter().enumerate() {
            match h.join() {
                Ok(Ok(o)) => outs.push(o),
                Ok(Err(ThreadFail::Failed(t, e))) => {
                    first_error.get_or_insert(ChatError::Place {
                        thread: t,
                        source: e,
                    });
                }
                Ok(Err(ThreadFail::Aborted)) => {}
                Err(_) => {
                    panicked.get_or_insert(i);
                }
            }
        }
        let others_share = ticks_before
            .zip(TickSample::read(allowed))
            .and_then(|(a, b)| a.others_share(&b));
        if let Some(e) = spawn_error {
            return Err(ChatError::Spawn(e));
        }
        if let Some(e) = first_error.or_else(|| shared.take_error()) {
            return Err(e);
        }
        if let Some(i) = panicked {
            return Err(ChatError::Panicked(i));
        }
        Ok((start, outs, others_share))
    })
}

/// One chat thread's life; see the module doc.
fn chat_thread(
    shared: &Shared,
    placer: &ChatPlacer,
    gate: &StartGate,
    user: usize,
    role: Role,
) -> Result<ThreadOut, ThreadFail> {
    let index = thread_index(user, role);
    let room = user / USERS_PER_ROOM;
    // A panic here must still arrive at the gate, or main would wait forever.
    let setup = panic::catch_unwind(AssertUnwindSafe(|| {
        let placed = placer.place(room, index)?;
        let before = os::thread_self_sched()?;
        Ok::<_, crate::modes::PlaceError>((placed, before))
    }));
    let setup = match setup {
        Ok(setup) => setup,
        Err(payload) => {
            gate.arrive(false);
            panic::resume_unwind(payload);
        }
    };
    let go = gate.arrive(setup.is_ok());
    let (placed, before) = setup.map_err(|e| ThreadFail::Failed(index, e))?;
    if !go {
        return Err(ThreadFail::Aborted);
    }
    // A panic in a role would leave its peers waiting: abort the run first.
    let finish = match panic::catch_unwind(AssertUnwindSafe(|| shared.run_role(user, role))) {
        Ok(Some(finish)) => finish,
        Ok(None) => return Err(ThreadFail::Aborted),
        Err(payload) => {
            shared.abort(ChatError::Panicked(index));
            panic::resume_unwind(payload);
        }
    };
    let after = os::thread_self_sched().map_err(|e| ThreadFail::Failed(index, e.into()))?;
    Ok(ThreadOut {
        finish,
        mismatches: placed.mismatches,
        before,
        after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_file_limit_is_the_soft_column() {
        let text = "Limit                     Soft Limit           Hard Limit           Units     \n\
                    Max processes             63448                63448                processes \n\
                    Max open files            1024                 524288               files     \n";
        assert_eq!(parse_open_file_limit(text), Some(1024));
        let unlimited =
            "Max open files            unlimited            unlimited            files\n";
        assert_eq!(parse_open_file_limit(unlimited), None);
        assert_eq!(parse_open_file_limit(""), None);
        assert!(open_file_limit().is_some(), "this machine has a limit");
    }

    #[test]
    fn connections_pair_up_by_user() {
        let (c, s) = connect_all(3).unwrap();
        assert_eq!((c.len(), s.len()), (3, 3));
        for (i, (mut c, mut s)) in c.into_iter().zip(s).enumerate() {
            c.write_all(&[i as u8]).unwrap();
            let mut b = [0u8];
            s.read_exact(&mut b).unwrap();
            assert_eq!(b[0] as usize, i, "server end {i} is user {i}'s");
        }
    }
}

/// `bench chat` on the shared contract ([`crate::suite::Benchmark`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct ChatBench;

impl crate::suite::Benchmark for ChatBench {
    type Params = ChatParams;
    type Report = ChatReport;
    type Error = ChatError;
    const FAILED: &'static str = "the Chat benchmark failed";

    fn run_cases(
        &self,
        cases: &[ChatParams],
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<Vec<ChatReport>, ChatError> {
        run_chat_cases(cases, progress)
    }

    fn is_usage(e: &ChatError) -> bool {
        matches!(e, ChatError::Params(_))
    }

    fn machine(r: &ChatReport) -> &Machine {
        &r.machine
    }

    fn label(r: &ChatReport) -> String {
        format!("{} rooms, {} messages", r.params.rooms, r.params.messages)
    }

    fn render(r: &ChatReport) -> String {
        super::report::render_chat_report(r)
    }

    fn render_grid(g: &super::ChatGridReport) -> String {
        super::report::render_chat_grid(g)
    }
}
