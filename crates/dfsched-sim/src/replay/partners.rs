//! Closed-loop blocking in a replay: which recorded threads wait for each
//! other, and the token rings that replay them.
//!
//! A recording says how long a thread was blocked, not who woke it. Open
//! loop (the replay's default), a block lasts its recorded time whatever
//! the other threads do. For threads that hand work to each other (a
//! ping-pong on pipes, a token ring, a pipeline of hand-offs), that is
//! wrong twice: a wake comes when the partner has done its part, so on a
//! slower or busier machine it comes later, and a pair that ran strictly in
//! turn on one CPU is replayed as two threads that may overlap on two.
//!
//! What the recording lets us infer, per *group* — the threads of one
//! process that each spend one contiguous stay on the same DF, and on no
//! other DF (the hint is the program saying they work on the same data):
//!
//! ```text
//!  per member i over its stay: cpu_i, wait_i, blocked_i, wall_i, runs_i, vol_i
//!    (runs: run periods, schedstat's third field = voluntary + involuntary
//!     switches; vol: voluntary switches, status' voluntary_ctxt_switches;
//!     both interpolated between their readings at the stay's ends;
//!     blocked_i = wall_i − cpu_i − wait_i over the whole stay)
//!
//!  p' = n · Σ cpu_i / Σ (cpu_i + blocked_i)   members that would run at once
//!                                             if every runnable moment ran
//!  p  = Σ cpu_i / max wall_i                   members that did run at once
//!
//!  round(p') < n  and  8 · Σ vol_i ≥ Σ runs_i  →  they block on each other: a ring
//!     k = clamp(round(p), 1, round(p'))  tokens in flight
//!     R = Σ runs_i / n                    rounds (each a hand-off)
//!  else  →  open loop (blocking that is not waiting for the group)
//! ```
//!
//! A ring of n members in tid order, k of them holding a token at the
//! start (spread evenly): member i does R rounds of
//! `Wait(i) · piece_i · Signal(i + 1 mod n)`, a token holder skipping its
//! first wait; `piece_i` is member i's stay CPU time over R. So a member's
//! wake is tied to its predecessor's progress, never to the clock: with one
//! token the group runs strictly in turn (ping-pong, a ring), with k tokens
//! at most k members run at once. Tokens are conserved, every member does
//! the same R rounds and belongs to one ring at most, so a ring cannot
//! deadlock: each wait is answered by its predecessor's signal of the same
//! round (or the initial token).
//!
//! Why the run periods count hand-offs: a member that blocks for its
//! partner switches out voluntarily; a member its woken partner preempts on
//! a shared CPU switches out involuntarily, and its "run-queue wait" is
//! then its partner's turn. Both end one of its runs, so runs per member
//! are the rounds whichever way the kernel played them. Involuntary
//! switches for other reasons (time slices, other processes) inflate the
//! count, with pieces far shorter than a slice they are few; a member
//! preempted and run again before it blocks counts two (a ring of three on
//! one CPU: up to 1.4 a round seen); with several tokens a member may take
//! the next one without switching out and the count runs low (half the
//! rounds seen with two tokens in four).
//!
//! Why an eighth of the switches voluntary: in a hand-off every round
//! ends in a block of at least one of the two members it passes between —
//! all of them block when they have CPUs of their own, one in two when a
//! woken member preempts its waker on a shared CPU — so voluntary switches
//! are half or more of a hand-off group's when it runs alone; other
//! processes' preemptions dilute that (a quarter was seen with a loaded
//! test run beside it). A group that only ever loses its CPU (`bench df`'s
//! threads, sliced by the kernel and by each other) has almost none (2 in
//! 170). An eighth is a factor of two from the diluted hand-offs and far
//! above the CPU-bound; with no voluntary counts recorded there is no
//! evidence and no ring. Blocked time alone is no
//! evidence: a busy machine's run-queue wait is read late (the kernel adds
//! a wait when it ends), so a CPU-bound thread's intervals show "blocked"
//! time that a later one takes back; the stay's total is used for the same
//! reason.
//!
//! Why `p` for the tokens and `p'` for the decision: `p` is what the
//! recording showed at once, the honest token count for a group that
//! hands off; but on a saturated machine it is also capped by the CPUs, so
//! it cannot tell a group that waits for itself from one that waits for
//! CPUs (`bench df`'s four threads per DF on two CPUs: p ≈ 1). `p'` counts
//! run-queue wait as running: CPU shortage does not lower it, blocking
//! does; a group that blocks little (a barrier now and then, `bench df`
//! not at all) keeps `round(p') = n` and stays open loop.
//!
//! Limits, stated: a group is one ring in tid order (the order of hand-offs
//! is not recorded; for equal members it does not change the replay's
//! time); a member's pieces are equal (its stay's CPU over R); a producer
//! that never waits for its consumer is replayed as waiting for it (a ring
//! has no one-way hand-off); recordings without run periods (made before
//! the fields) and threads on several DFs replay open loop.
//!
//! Scaling: a scaled replay ([`super::ReplayPlan::scale`]) keeps each
//! piece's real length and makes `max(1, round(R · scale))` rounds, so the
//! per-hand-off costs (a context switch, a wake-up on another CPU) weigh
//! what they weighed in the real run.

use super::Interval;
use dfsched_core::DfId;
use serde::Serialize;
use std::collections::BTreeMap;

/// A ring the replay found and replays (module doc).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Ring {
    /// The process (recording) of its members.
    pub process: u32,
    /// The DF they share (the replay's numbering).
    pub df: DfId,
    /// Its members' tids, in ring order.
    pub tids: Vec<u64>,
    /// `p`: members on a CPU at once, on average, thousandths.
    pub running_milli: u64,
    /// `p'`: members that would have been on a CPU at once had every
    /// runnable moment run, thousandths.
    pub runnable_milli: u64,
    /// Tokens in flight: members that may run at once.
    pub tokens: u32,
    /// Hand-off rounds of each member in the recorded run.
    pub recorded_rounds: u64,
    /// Rounds replayed (scaled).
    pub replayed_rounds: u64,
    /// The members' blocked time in their stays, ns: replaced by the ring's
    /// waits.
    pub blocked_ns: u64,
}

/// One thread's part in a ring: its intervals `first..end` are replayed
/// as `rounds` rounds of `Wait(wait_chan) · piece · Signal(signal_chan)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Role {
    /// First interval of its stay.
    pub first: usize,
    /// One past the last.
    pub end: usize,
    /// The channel it waits on.
    pub wait_chan: u32,
    /// The channel of its successor.
    pub signal_chan: u32,
    /// Whether it holds a token at the start (skips its first wait).
    pub holds_token: bool,
    /// Rounds to replay.
    pub rounds: u64,
}

/// What [`find`] needs of a recorded thread.
pub(super) struct Member<'a> {
    /// Its process.
    pub process: u32,
    /// Its tid.
    pub tid: u64,
    /// Its intervals.
    pub intervals: &'a [Interval],
}

/// A thread's one stay on a DF: `(df, first, end)`, when every interval
/// it spends on a DF is on that DF and they are contiguous.
fn one_stay(ivs: &[Interval]) -> Option<(DfId, usize, usize)> {
    let first = ivs.iter().position(|iv| iv.df.is_some())?;
    let df = ivs[first].df?;
    let end = first
        + ivs[first..]
            .iter()
            .take_while(|iv| iv.df == Some(df))
            .count();
    ivs[end..]
        .iter()
        .all(|iv| iv.df.is_none())
        .then_some((df, first, end))
}

/// The rings among `threads` (module doc), for a replay at `scale`: each
/// thread's role (by index) and the rings found. Channels are numbered
/// from `first_chan`.
pub(super) fn find(
    threads: &[Member<'_>],
    scale: f64,
    first_chan: u32,
) -> (Vec<Option<Role>>, Vec<Ring>) {
    let mut roles = vec![None; threads.len()];
    // (process, DF) → its candidates: (tid, thread index, stay first, end).
    type Stay = (u64, usize, usize, usize);
    let mut groups: BTreeMap<(u32, DfId), Vec<Stay>> = BTreeMap::new();
    for (i, th) in threads.iter().enumerate() {
        if let Some((df, first, end)) = one_stay(th.intervals) {
            groups
                .entry((th.process, df))
                .or_default()
                .push((th.tid, i, first, end));
        }
    }
    let mut rings = Vec::new();
    let mut chan = first_chan;
    for ((process, df), mut members) in groups {
        let n = members.len();
        if n < 2 {
            continue;
        }
        members.sort_unstable();
        // Per member over its stay: CPU, blocked, wall; over the group,
        // run periods and voluntary switches (None: not recorded).
        let mut cpu = vec![0u64; n];
        let (mut blocked, mut wall) = (0u64, 0u64);
        let (mut runs, mut voluntary) = (Some(0u64), Some(0u64));
        for (m, &(_, i, first, end)) in members.iter().enumerate() {
            let (mut w, mut waited) = (0u64, 0u64);
            for iv in &threads[i].intervals[first..end] {
                cpu[m] += iv.cpu_ns;
                w += iv.cpu_ns + iv.wait_ns + iv.blocked_ns;
                waited += iv.wait_raw_ns;
                runs = runs.zip(iv.runs).map(|(a, b)| a + b);
                voluntary = voluntary.zip(iv.voluntary).map(|(a, b)| a + b);
            }
            // Over the whole stay, from the unclamped wait: a reading's lag
            // (the kernel adds a wait when it ends) cancels out.
            blocked += (w - cpu[m]).saturating_sub(waited);
            wall = wall.max(w);
        }
        let cpu_sum: u64 = cpu.iter().sum();
        let (Some(runs), Some(voluntary)) = (runs, voluntary) else {
            // No switch counts recorded: open loop.
            continue;
        };
        if cpu_sum == 0 || wall == 0 || runs == 0 {
            continue;
        }
        if voluntary * BLOCKING_SHARE_DENOMINATOR < runs {
            // They switch out mostly because something else takes the CPU.
            continue;
        }
        let runnable = n as f64 * cpu_sum as f64 / (cpu_sum + blocked) as f64;
        let running = cpu_sum as f64 / wall as f64;
        let runnable_round = runnable.round() as usize;
        if runnable_round >= n {
            continue;
        }
        let tokens = (running.round() as usize).clamp(1, runnable_round.max(1));
        let recorded_rounds = (runs as f64 / n as f64).round().max(1.0) as u64;
        let rounds = ((recorded_rounds as f64 * scale).round() as u64).max(1);
        let holders: Vec<usize> = (0..tokens).map(|t| t * n / tokens).collect();
        for (m, &(_, i, first, end)) in members.iter().enumerate() {
            roles[i] = Some(Role {
                first,
                end,
                wait_chan: chan + m as u32,
                signal_chan: chan + ((m + 1) % n) as u32,
                holds_token: holders.contains(&m),
                rounds,
            });
        }
        chan += n as u32;
        rings.push(Ring {
            process,
            df,
            tids: members.iter().map(|m| m.0).collect(),
            running_milli: (running * 1000.0).round() as u64,
            runnable_milli: (runnable * 1000.0).round() as u64,
            tokens: tokens as u32,
            recorded_rounds,
            replayed_rounds: rounds,
            blocked_ns: blocked,
        });
    }
    (roles, rings)
}

/// A group hands off only if at least 1 in this many of its switches are
/// voluntary (module doc).
const BLOCKING_SHARE_DENOMINATOR: u64 = 8;

#[cfg(test)]
mod tests {
    use super::*;

    /// An interval on `df` of `cpu` ms CPU, `wait` ms waiting, `blocked`
    /// ms blocked, with `runs` run periods over its CPU time, all of them
    /// blocks when `blocked` > 0, none else.
    fn iv(df: Option<u64>, cpu: u64, wait: u64, blocked: u64, runs: Option<u64>) -> Interval {
        Interval {
            df: df.map(DfId),
            cpu_ns: cpu * 1_000_000,
            wait_ns: wait * 1_000_000,
            blocked_ns: blocked * 1_000_000,
            runs,
            voluntary: runs.map(|r| if blocked > 0 { r } else { 0 }),
            wait_raw_ns: wait * 1_000_000,
        }
    }

    fn members(ivs: &[Vec<Interval>]) -> Vec<Member<'_>> {
        ivs.iter()
            .enumerate()
            .map(|(i, v)| Member {
                process: 0,
                tid: 100 + i as u64,
                intervals: v,
            })
            .collect()
    }

    #[test]
    fn a_pair_that_runs_in_turn_is_a_ring_of_one_token_with_one_round_per_run() {
        // Ping-pong on one CPU: each runs half the time; its partner's
        // turn shows as blocked or, preempted, as run-queue wait. 1,000
        // runs each over the stay.
        let a = vec![
            iv(None, 1, 0, 0, None),
            iv(Some(1), 50, 50, 0, Some(500)),
            iv(Some(1), 50, 0, 50, Some(500)),
            iv(None, 1, 0, 0, Some(1)),
        ];
        let b = vec![
            iv(Some(1), 50, 0, 50, Some(500)),
            iv(Some(1), 50, 25, 25, Some(500)),
        ];
        let (roles, rings) = find(&members(&[a, b]), 0.5, 3);
        assert_eq!(rings.len(), 1);
        let r = &rings[0];
        assert_eq!(r.tids, vec![100, 101]);
        assert_eq!(r.tokens, 1);
        assert_eq!(r.running_milli, 1000, "200 ms of CPU in 200 ms");
        assert_eq!(r.recorded_rounds, 1000);
        assert_eq!(r.replayed_rounds, 500, "scaled by 0.5");
        assert_eq!(r.blocked_ns, 125_000_000);
        let a = roles[0].unwrap();
        let b = roles[1].unwrap();
        assert_eq!((a.first, a.end), (1, 3), "the stay, not before or after");
        assert_eq!((b.first, b.end), (0, 2));
        assert_eq!((a.wait_chan, a.signal_chan), (3, 4));
        assert_eq!((b.wait_chan, b.signal_chan), (4, 3));
        assert!(a.holds_token && !b.holds_token, "one token: the first");
    }

    #[test]
    fn threads_that_never_block_stay_open_loop_even_when_cpus_were_short() {
        // bench df: four threads on a DF, two CPUs: each ran half the time
        // and waited for a CPU the other half, never blocked.
        let ivs: Vec<Vec<Interval>> = (0..4)
            .map(|_| vec![iv(Some(1), 50, 50, 0, Some(40))])
            .collect();
        let (roles, rings) = find(&members(&ivs), 1.0, 0);
        assert!(rings.is_empty());
        assert!(roles.iter().all(Option::is_none));
    }

    #[test]
    fn a_group_that_blocks_a_little_stays_open_loop_and_tokens_follow_what_ran_at_once() {
        // A barrier now and then: 90 % CPU, 10 % blocked: p' = 1.8 → 2.
        let ivs = vec![
            vec![iv(Some(1), 90, 0, 10, Some(10))],
            vec![iv(Some(1), 90, 0, 10, Some(10))],
        ];
        assert!(find(&members(&ivs), 1.0, 0).1.is_empty());
        // Four members, each blocked half its time; two ran at once: a
        // ring of two tokens, on members 0 and 2.
        let ivs: Vec<Vec<Interval>> = (0..4)
            .map(|_| vec![iv(Some(1), 50, 0, 50, Some(100))])
            .collect();
        let (roles, rings) = find(&members(&ivs), 1.0, 0);
        assert_eq!(rings[0].tokens, 2);
        assert_eq!(rings[0].runnable_milli, 2000);
        let holders: Vec<bool> = roles.iter().map(|r| r.unwrap().holds_token).collect();
        assert_eq!(holders, vec![true, false, true, false]);
    }

    #[test]
    fn switches_that_are_mostly_preemptions_or_blocked_time_that_a_lagging_wait_made_are_no_ring() {
        // Blocked half the time, but 1 switch in 10 voluntary: CPU-bound
        // threads that something else preempts, blocking now and then.
        let mut ivs = vec![
            vec![iv(Some(1), 50, 0, 50, Some(100))],
            vec![iv(Some(1), 50, 0, 50, Some(100))],
        ];
        for v in &mut ivs {
            v[0].voluntary = Some(10);
        }
        assert!(find(&members(&ivs), 1.0, 0).1.is_empty());
        // bench df on a busy machine: the first interval reads "blocked"
        // 40 ms because its wait was read late; the next gives it back
        // (its wait exceeds its wall, cut to it). Over the stay: none.
        let lagging = || {
            let mut a = iv(Some(1), 10, 50, 40, Some(5));
            let mut b = iv(Some(1), 10, 90, 0, Some(5));
            b.wait_raw_ns = 130 * 1_000_000;
            for x in [&mut a, &mut b] {
                x.voluntary = Some(5);
            }
            vec![a, b]
        };
        let ivs: Vec<Vec<Interval>> = (0..4).map(|_| lagging()).collect();
        assert!(find(&members(&ivs), 1.0, 0).1.is_empty());
    }

    #[test]
    fn no_run_periods_or_several_dfs_or_a_lone_thread_mean_open_loop() {
        let old = vec![
            vec![iv(Some(1), 50, 0, 50, None)],
            vec![iv(Some(1), 50, 0, 50, None)],
        ];
        assert!(find(&members(&old), 1.0, 0).1.is_empty(), "older record");
        let two_dfs = vec![
            vec![
                iv(Some(1), 50, 0, 50, Some(10)),
                iv(Some(2), 50, 0, 50, Some(10)),
            ],
            vec![iv(Some(1), 50, 0, 50, Some(10))],
        ];
        let (roles, rings) = find(&members(&two_dfs), 1.0, 0);
        assert!(rings.is_empty() && roles.iter().all(Option::is_none));
        let back = vec![
            vec![
                iv(Some(1), 50, 0, 50, Some(10)),
                iv(None, 50, 0, 50, Some(10)),
                iv(Some(1), 50, 0, 50, Some(10)),
            ],
            vec![iv(Some(1), 50, 0, 50, Some(10))],
        ];
        assert!(
            find(&members(&back), 1.0, 0).1.is_empty(),
            "a DF left and taken again is two stays"
        );
        let alone = vec![vec![iv(Some(1), 10, 0, 90, Some(10))]];
        assert!(find(&members(&alone), 1.0, 0).1.is_empty());
    }
}
