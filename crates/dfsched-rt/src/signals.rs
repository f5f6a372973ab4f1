//! The outside load from per-CPU signals: the rule that turns one pass's
//! cheap readings into the unmanaged part of `Event::ExternalLoadMilli`,
//! in thousandths of one of our threads per CPU. Pure: the readings come
//! in as values (`/proc/stat` from `procfs/cpustat.rs`, the weight from the
//! refresh in `procfs/refresh.rs`); the runtime (`external.rs`) and the
//! agent (`agent/scan.rs`) both call it.
//!
//! # The signals, and why these
//!
//! A pass may cost O(CPUs + our own threads), never O(threads on the
//! machine), so it reads one file, `/proc/stat`:
//!
//! - `u_c`, the **outside busy fraction** of CPU `c`: its busy time over the
//!   last ≥ [`MIN_BUSY_WINDOW_NS`] less our own CPU time over the same
//!   window (each of our threads' on its CPU, `external.rs`), clamped to
//!   `0 ..= 1`. Time is in
//!   clock ticks (10 ms), so a window under 100 ms would be mostly
//!   rounding; faster passes reuse the last window's fractions.
//! - `n`, the **outside runnable threads** now: `procs_running` less the
//!   reading thread, less our own runnable threads (the engine's count),
//!   never below 0.
//!
//! Busy time alone saturates: one spinning thread or five on a CPU both
//! make it busy, and only the count tells them apart. The count alone has
//! no CPU. So the count is spread over the CPUs in proportion to their
//! outside busy time, and a CPU never counts less than its busy fraction:
//!
//! ```text
//!   threads_c = u_c × max(1, n / Σu)        (Σ over CPUs: max(Σu, n))
//!   load_c    = threads_c × ρ               (ρ in thousandths of our thread)
//! ```
//!
//! `ρ` is what one outside runnable thread weighs against one of ours, the
//! CFS-group weighing (`weigh.rs`) averaged over the threads a per-thread
//! refresh last saw (`procfs/refresh.rs`: rare and budgeted) and the ones
//! it did not see ([`mean_weight_milli`]): 1000 for a thread of our own
//! session at our nice, 1000/30 ≈ 33 for each of a 30-thread build in
//! another session of our group's weight. Runnable threads the refresh did
//! not see (before the first refresh, load newer than the last, another pid
//! namespace) weigh by [`crate::weigh::unseen`]: one other nice-0 group in
//! all, since they cannot be in our session (thread by thread when we are
//! in no group). Under-weighing is the safe side: it can keep a program
//! from packing itself, never make it pack. The signals decide *how much*
//! and *where*; the refresh only *how heavy*: load that goes away leaves
//! `u` and `n` at the next window and is dropped at once, lasting load is
//! seen whatever the refresh's age, and bursts are left to the window
//! (`external.rs`).
//!
//! Worked numbers (2 CPUs, another session's 10 spinning threads and our 2
//! spinning ones, each CPU shared half and half by the two groups):
//! `u = (0.5, 0.5)`, `n = 10`, `threads_c = 0.5 × 10 = 5`, ρ = 1000/10 =
//! 100 (the group weighs one of ours in all), `load_c = 500`. The same 10
//! threads in our own session take 5/6 of each CPU: `threads_c = 0.83 × 6
//! = 5`, ρ = 1000, `load_c = 5000`. (Co-thread packs a 2-thread program
//! on 2 CPUs only above 3000 a CPU.)
//!
//! # What it gets wrong
//!
//! - Where the queues are: the runnable count is machine-wide, so it is
//!   spread by busy time. Five threads queued on CPU 0 and one on CPU 1
//!   (both busy) read as three and three.
//! - One weight for all: ρ is a mean, so a light group on CPU 0 and a heavy
//!   one on CPU 1 weigh the same on both, and a change in the mix is
//!   weighed as the old mix until the next refresh (seconds); threads more
//!   than the refresh saw are taken as one other group, so a build starting
//!   in our own session is under-weighed until then.
//! - Our own threads: their runnable count is the engine's (a thread the
//!   idle step has not yet found blocked counts as runnable, so the outside
//!   count is low by as much). Their CPU time is taken off the CPU the
//!   engine pins them to, else the one their `stat` says they last ran on
//!   (one file each, for at most 64 threads a pass; past that, spread over
//!   their target), not every CPU they ran on over the window. Threads of
//!   our process that are not registered (never attached) count as outside
//!   runnable threads, and their CPU time is taken off the CPU the pass
//!   runs on.
//! - Load the refresh cannot see (another pid namespace: a container): the
//!   signals count it, as one other nice-0 group in all (the per-thread
//!   scan used to count it as nothing); several containers weigh as one.
//! - `procs_running` is an instant: a burst at the read inflates `n` for
//!   that pass (the window's minimum takes it out).
//!
//! Invariants (the property tests): every estimate is in CPU order with no
//! zero; `threads_c ≤ max(1, n)` whole threads; Σ threads = max(Σu, n);
//! `load_c ≤ threads_c × ρ`; no busy time, no load.

use crate::weigh::Unseen;
use dfsched_core::rules::TASK_MILLI;
use dfsched_core::CpuId;
use std::collections::{BTreeMap, VecDeque};

/// The least wall time over which busy fractions are taken: `/proc/stat`
/// counts in 10 ms ticks, so 100 ms gives ±10 % per CPU.
pub const MIN_BUSY_WINDOW_NS: u64 = 100_000_000;

/// One CPU fully busy, in thousandths. A thread that keeps a CPU busy is
/// one task, so busy thousandths are thread thousandths.
const FULL: u64 = TASK_MILLI;

/// Clock ticks per CPU, in CPU order.
type Ticks = Vec<(CpuId, u64)>;

/// Outside busy fractions per CPU, from successive `/proc/stat` readings.
///
/// A CPU's busy time over a window is the larger of its busy ticks and
/// the window less its idle ticks (idle + iowait + steal), when those are
/// given: the kernel samples the busy columns at timer ticks, which a
/// virtual CPU may miss, but keeps idle time by the clock on a tickless
/// kernel (`procfs/cpustat.rs`). Taking the busy ticks alone, a TCG guest
/// with `HZ=1000` read 5 % busy on CPUs its spinning threads kept busy;
/// less our own CPU time (exact, from the threads' clocks) that left no
/// outside load at all, and eight spinning threads on four CPUs were not
/// seen (dfsched-vmbench's `scx-rehint-and-move`, Nov 26). On a kernel
/// whose idle time is tick-sampled too (no `NO_HZ`), both columns lose
/// ticks alike and the complement over-counts busy time by what was lost.
///
/// Invariants: the fractions are in thousandths, `0..=1000`, in CPU order;
/// they change only when a window of at least [`MIN_BUSY_WINDOW_NS`] has
/// closed; our CPU time is summed over exactly the window it is taken
/// from.
#[derive(Clone, Debug)]
pub struct BusyTracker {
    /// Nanoseconds per clock tick.
    ns_per_tick: u64,
    /// The reading that opened the current window: `(at_ns, busy ticks,
    /// idle ticks)`.
    start: Option<(u64, Ticks, Ticks)>,
    /// Our own CPU time since the window opened, per CPU, in nanoseconds.
    own_ns: BTreeMap<CpuId, u64>,
    /// The fractions of the last closed window.
    last: Vec<(CpuId, u64)>,
}

impl BusyTracker {
    /// A tracker of `/proc/stat` times counted in `ticks_per_sec`.
    pub fn new(ticks_per_sec: u64) -> BusyTracker {
        BusyTracker {
            ns_per_tick: 1_000_000_000 / ticks_per_sec.clamp(1, 1_000_000_000),
            start: None,
            own_ns: BTreeMap::new(),
            last: Vec::new(),
        }
    }

    /// Takes a reading at `at_ns` (monotonic; never decreasing): the busy
    /// ticks per CPU, the idle ticks per CPU (idle + iowait + steal; a CPU
    /// left out, or an empty slice, is judged by its busy ticks alone) and
    /// our own CPU time since the previous reading per CPU, in nanoseconds.
    /// Returns the outside busy fraction per CPU (in thousandths, CPUs with
    /// none left out) of the last window that closed: empty until one has.
    pub fn observe(
        &mut self,
        at_ns: u64,
        busy_ticks: &[(CpuId, u64)],
        idle_ticks: &[(CpuId, u64)],
        own_since_last_ns: &[(CpuId, u64)],
    ) -> &[(CpuId, u64)] {
        let Some((start_ns, start_busy, start_idle)) = &self.start else {
            self.start = Some((at_ns, busy_ticks.to_vec(), idle_ticks.to_vec()));
            return &self.last;
        };
        for &(cpu, ns) in own_since_last_ns {
            let e = self.own_ns.entry(cpu).or_default();
            *e = e.saturating_add(ns);
        }
        let elapsed = at_ns.saturating_sub(*start_ns);
        if elapsed < MIN_BUSY_WINDOW_NS {
            return &self.last;
        }
        // Per CPU: its busy time less ours, which may be below 0.
        let mut out: Vec<(CpuId, i128)> = Vec::with_capacity(busy_ticks.len());
        for &(cpu, ticks) in busy_ticks {
            // A CPU that came online inside the window has no start: none.
            let Ok(i) = start_busy.binary_search_by_key(&cpu, |&(c, _)| c) else {
                continue;
            };
            let ticked_ns = ticks
                .saturating_sub(start_busy[i].1)
                .saturating_mul(self.ns_per_tick);
            let at = |v: &[(CpuId, u64)]| {
                v.binary_search_by_key(&cpu, |&(c, _)| c)
                    .ok()
                    .map(|j| v[j].1)
            };
            let unticked_ns = match (at(start_idle), at(idle_ticks)) {
                (Some(before), Some(now)) => elapsed
                    .saturating_sub(now.saturating_sub(before).saturating_mul(self.ns_per_tick)),
                _ => 0,
            };
            let busy_ns = ticked_ns.max(unticked_ns);
            let own = self.own_ns.get(&cpu).copied().unwrap_or(0);
            out.push((cpu, i128::from(busy_ns) - i128::from(own)));
        }
        let out = outside_fractions(out, elapsed);
        self.last = out;
        self.start = Some((at_ns, busy_ticks.to_vec(), idle_ticks.to_vec()));
        self.own_ns.clear();
        &self.last
    }
}

/// Outside busy fractions (thousandths, in CPU order, zeros left out) from
/// each CPU's busy time less ours over a window of `elapsed_ns` (`residue`,
/// which is below 0 where more of our time was put than the CPU was busy).
///
/// Our time is put on the CPU each thread last ran on, but a thread that
/// moved between CPUs in the window (under the sched_ext body a grouped
/// thread changes CPU within its home every few slices; under CFS a pair of
/// threads on a 2-CPU home may swap) ran part of it elsewhere: one CPU then
/// has too much of ours (a residue below 0) and another too little, which
/// reads as outside load that is not there. Clamping each CPU at 0 kept the
/// second and dropped the first, so the total outside time came out high
/// (553 thousandths on each CPU of a 2-CPU home, a whole task to the home
/// rule's room test, in dfsched-vmbench's `scx-rehint-and-move`). So the
/// time put where it did not fit is taken off the CPUs with a residue
/// above 0, in proportion to it: the total outside time stays the
/// machine's busy time less ours, exactly, and only where it lands is
/// estimated.
fn outside_fractions(residue: Vec<(CpuId, i128)>, elapsed_ns: u64) -> Vec<(CpuId, u64)> {
    let deficit: i128 = residue.iter().map(|&(_, r)| (-r).max(0)).sum();
    let surplus: i128 = residue.iter().map(|&(_, r)| r.max(0)).sum();
    let mut out: Vec<(CpuId, u64)> = residue
        .into_iter()
        .filter(|&(_, r)| r > 0)
        .map(|(cpu, r)| {
            let left = if deficit >= surplus {
                0
            } else {
                r - deficit * r / surplus
            };
            let frac = u128::try_from(left).unwrap_or(0) * u128::from(FULL)
                / u128::from(elapsed_ns.max(1));
            (cpu, u64::try_from(frac).unwrap_or(FULL).min(FULL))
        })
        .filter(|&(_, f)| f > 0)
        .collect();
    out.sort_unstable();
    out
}

/// Our own CPU time `delta_ns` spread over the CPUs in proportion to
/// `shares` (our runnable threads' load per CPU, in thousandths), in CPU
/// order; all of it on no CPU if there are no shares (then it cannot be
/// told from the outside's, and is not taken off).
pub fn attribute(delta_ns: u64, shares: &[(CpuId, u64)]) -> Vec<(CpuId, u64)> {
    let total: u128 = shares.iter().map(|&(_, m)| u128::from(m)).sum();
    if total == 0 {
        return Vec::new();
    }
    let mut out: BTreeMap<CpuId, u64> = BTreeMap::new();
    for &(cpu, m) in shares {
        let ns = (u128::from(delta_ns) * u128::from(m) / total) as u64;
        *out.entry(cpu).or_default() += ns;
    }
    out.into_iter().filter(|&(_, ns)| ns > 0).collect()
}

/// The least outside load on some CPU, unweighed (in thousandths of a
/// thread, each outside thread at one of ours), that is worth weighing:
/// unless a CPU has it at each sample of the window ([`WeighGate`]), no
/// refresh sweep starts
/// (`procfs/refresh.rs`, "Why only when wanted"). Two clock ticks of a
/// 100 ms window: one tick is a daemon's wake-up, or our own CPU time
/// rounded against the tick count. Far below where a decision turns (the
/// co-thread rule packs a 2-thread program on 2 CPUs above 3000 a CPU).
pub const WORTH_WEIGHING_MILLI: u64 = 200;

/// The last K samples of a load per CPU and their per-CPU minimum: the
/// runtime's damping of the unmanaged load (`external.rs`, "Why only the
/// unmanaged part is damped") and the gate of the refresh sweep
/// ([`WeighGate`]).
///
/// Invariants: holds at most K samples, each in CPU order with no zero
/// loads; the minimum counts a CPU missing from a sample as 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SustainedWindow {
    /// K, at least 1.
    samples_wanted: usize,
    /// The latest samples (thousandths per CPU), oldest first.
    samples: VecDeque<Vec<(CpuId, u64)>>,
}

impl SustainedWindow {
    /// A window of `k` samples (at least 1; 1 passes each sample through).
    pub fn new(k: u32) -> SustainedWindow {
        let samples_wanted = (k as usize).max(1);
        SustainedWindow {
            samples_wanted,
            samples: VecDeque::with_capacity(samples_wanted),
        }
    }

    /// Adds `sample` (load per CPU in thousandths; CPUs not listed count 0,
    /// a CPU listed twice the sum) and returns the per-CPU minimum over the
    /// last K samples, the ones not yet taken counting as empty: CPUs with
    /// a minimum of 0 are left out, the rest in CPU order.
    pub fn push(&mut self, sample: &[(CpuId, u64)]) -> Vec<(CpuId, u64)> {
        let mut summed: BTreeMap<CpuId, u64> = Default::default();
        for &(cpu, m) in sample {
            let e = summed.entry(cpu).or_default();
            *e = e.saturating_add(m);
        }
        let sample: Vec<(CpuId, u64)> = summed.into_iter().filter(|&(_, m)| m > 0).collect();
        if self.samples.len() == self.samples_wanted {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
        if self.samples.len() < self.samples_wanted {
            return Vec::new();
        }
        let Some(latest) = self.samples.back() else {
            return Vec::new();
        };
        let older = self.samples.len() - 1;
        latest
            .iter()
            .map(|&(cpu, m)| {
                let least = self.samples.range(..older).fold(m, |least, s| {
                    let there = s
                        .binary_search_by_key(&cpu, |&(c, _)| c)
                        .map_or(0, |i| s[i].1);
                    least.min(there)
                });
                (cpu, least)
            })
            .filter(|&(_, m)| m > 0)
            .collect()
    }
}

/// Whether a refresh sweep is worth its files: the outside load, unweighed
/// (each thread at one of ours), has reached [`WORTH_WEIGHING_MILLI`] on
/// some CPU at each of the last K samples (K = the external window,
/// `DFSCHED_EXTERNAL_WINDOW`).
///
/// Why sustained: what the sweep weighs reaches the engine only through
/// the same window's per-CPU minimum (`external.rs`), so load that is gone
/// within K samples is dropped whatever it weighs. Gated on one sample, a
/// daemon's wake-up or a shell command on a quiet machine started a sweep
/// of every process (≈ 150 `stat` files, 5 ms of CPU here) a few times in
/// ten seconds, and those sweeps were a third of a quiet runtime's cost.
#[derive(Clone, Debug)]
pub struct WeighGate {
    window: SustainedWindow,
}

impl WeighGate {
    /// A gate over `k` samples (at least 1: then one sample is enough).
    pub fn new(k: u32) -> WeighGate {
        WeighGate {
            window: SustainedWindow::new(k),
        }
    }

    /// Takes this sample's signals ([`estimate`]'s inputs) and says whether
    /// a sweep is wanted now.
    pub fn wanted(&mut self, busy: &[(CpuId, u64)], runnable: u32) -> bool {
        let est = estimate(busy, runnable, TASK_MILLI);
        self.window
            .push(&est.milli)
            .iter()
            .any(|&(_, m)| m >= WORTH_WEIGHING_MILLI)
    }
}

/// Outside runnable threads now: `procs_running` less the reading thread
/// and `ours_milli` (our own runnable threads, in thousandths: rounded to
/// the nearest thread), never below 0.
pub fn outside_runnable(procs_running: u32, ours_milli: u64) -> u32 {
    let ours =
        u32::try_from(ours_milli.saturating_add(TASK_MILLI / 2) / TASK_MILLI).unwrap_or(u32::MAX);
    procs_running.saturating_sub(1).saturating_sub(ours)
}

/// ρ: the mean weight of one of `runnable` outside threads now, in
/// thousandths of one of ours, when the last refresh saw `seen` threads
/// weighing `seen_milli` in all (0 and 0 before any refresh) and the rest,
/// `runnable − seen`, weigh by the `unseen` rule. With no thread at all
/// (busy time but nothing runnable at the read) one unseen thread stands
/// in.
pub fn mean_weight_milli(seen_milli: u64, seen: u64, runnable: u32, unseen: Unseen) -> u64 {
    let unseen_threads = u64::from(runnable).saturating_sub(seen);
    let (threads, unseen_threads) = match seen + unseen_threads {
        0 => (1, 1),
        n => (n, unseen_threads),
    };
    let unseen_milli = match (unseen, unseen_threads) {
        (_, 0) => 0,
        (Unseen::OneGroup(m), _) => m,
        (Unseen::EachThread(m), k) => m.saturating_mul(k),
    };
    seen_milli.saturating_add(unseen_milli) / threads
}

/// One pass's estimate of the unmanaged load.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Estimate {
    /// Weighed load per CPU in thousandths of one of our threads (`load_c`
    /// of the module doc), CPUs with none left out, in CPU order.
    pub milli: Vec<(CpuId, u64)>,
    /// Outside threads per CPU, unweighed and rounded to whole threads
    /// (`threads_c`), CPUs with none left out, in CPU order.
    pub counted: Vec<(CpuId, u32)>,
}

/// The rule of the module doc: `busy` (outside busy fractions per CPU, in
/// thousandths, each CPU once), `runnable` (`n`) and `weight_milli` (`ρ`).
pub fn estimate(busy: &[(CpuId, u64)], runnable: u32, weight_milli: u64) -> Estimate {
    let busy_total: u128 = busy.iter().map(|&(_, u)| u128::from(u.min(FULL))).sum();
    if busy_total == 0 {
        return Estimate::default();
    }
    // threads_c in thousandths: u_c × max(1, n / Σu), with Σu in CPUs.
    let n_milli = u128::from(runnable) * u128::from(TASK_MILLI);
    let mut out = Estimate::default();
    let mut sorted: Vec<(CpuId, u64)> = busy.to_vec();
    sorted.sort_unstable();
    for (cpu, u) in sorted {
        let u = u128::from(u.min(FULL));
        let threads = if n_milli > busy_total {
            u * n_milli / busy_total
        } else {
            u
        };
        let load = threads * u128::from(weight_milli) / u128::from(TASK_MILLI);
        let load = u64::try_from(load).unwrap_or(u64::MAX);
        if load > 0 {
            out.milli.push((cpu, load));
        }
        let whole =
            u32::try_from((threads + u128::from(FULL / 2)) / u128::from(FULL)).unwrap_or(u32::MAX);
        if whole > 0 {
            out.counted.push((cpu, whole));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_burst_shorter_than_the_window_is_ignored() {
        let mut w = SustainedWindow::new(3);
        assert!(w.push(&[]).is_empty());
        assert!(w.push(&[]).is_empty());
        assert!(w.push(&[]).is_empty());
        // Two threads for two samples: never seen.
        assert!(w.push(&[(C0, 2000)]).is_empty());
        assert!(w.push(&[(C0, 2000), (C1, 1000)]).is_empty());
        assert!(w.push(&[]).is_empty());
        assert!(w.push(&[(C1, 1000)]).is_empty());
    }

    #[test]
    fn sustained_load_is_seen_on_the_kth_sample() {
        let mut w = SustainedWindow::new(3);
        assert!(w.push(&[(C1, 2000)]).is_empty(), "1st sample");
        assert!(w.push(&[(C1, 2000)]).is_empty(), "2nd sample");
        assert_eq!(w.push(&[(C1, 2000)]), vec![(C1, 2000)], "3rd sample");
        // It lasts, with a burst on top: only what lasted counts.
        assert_eq!(w.push(&[(C0, 4000), (C1, 3000)]), vec![(C1, 2000)]);
    }

    #[test]
    fn weighed_load_is_damped_in_thousandths() {
        let mut w = SustainedWindow::new(2);
        assert!(w.push(&[(C0, 500), (C1, 1500)]).is_empty());
        // The least of each CPU's last 2 samples, to the thousandth.
        assert_eq!(
            w.push(&[(C0, 666), (C1, 1250)]),
            vec![(C0, 500), (C1, 1250)]
        );
        // A CPU listed twice counts the sum.
        assert_eq!(w.push(&[(C0, 400), (C0, 400)]), vec![(C0, 666)]);
    }

    #[test]
    fn load_that_goes_away_is_dropped_at_once() {
        let mut w = SustainedWindow::new(3);
        for _ in 0..5 {
            w.push(&[(C0, 3000), (C1, 1000)]);
        }
        assert_eq!(
            w.push(&[(C0, 3000), (C1, 1000)]),
            vec![(C0, 3000), (C1, 1000)]
        );
        // One thread on CPU 0 ends and CPU 1 empties: seen at the next
        // sample, not K samples later.
        assert_eq!(w.push(&[(C0, 2000)]), vec![(C0, 2000)]);
        assert!(w.push(&[]).is_empty());
    }

    #[test]
    fn a_window_of_one_passes_samples_through() {
        let mut w = SustainedWindow::new(1);
        assert_eq!(
            w.push(&[(C1, 1000), (C0, 2000)]),
            vec![(C0, 2000), (C1, 1000)]
        );
        assert!(w.push(&[(C0, 0)]).is_empty());
        assert_eq!(SustainedWindow::new(0), SustainedWindow::new(1));
    }

    proptest! {
        /// The signals through the window: outside busy time and runnable
        /// threads that last fewer passes than the window never reach the
        /// engine, whatever their size; the same that last K passes do, as
        /// the estimate gives them.
        #[test]
        fn a_burst_of_signals_moves_nothing_and_lasting_ones_are_seen(
            k in 2u32..6,
            burst in proptest::collection::vec(
                (0u64..=1000, 0u64..=1000, 0u32..200, 1u64..100_000), 1..6),
            lasting in (1u64..=1000, 0u64..=1000, 0u32..200, 1u64..100_000),
        ) {
            let mut w = SustainedWindow::new(k);
            let quiet = estimate(&[], 0, 1000);
            for _ in 0..k {
                w.push(&quiet.milli);
            }
            for &(u0, u1, n, rho) in burst.iter().take(k as usize - 1) {
                let e = estimate(&[(C0, u0), (C1, u1)], n, rho);
                prop_assert!(w.push(&e.milli).is_empty());
            }
            prop_assert!(w.push(&quiet.milli).is_empty());
            let (u0, u1, n, rho) = lasting;
            let e = estimate(&[(C0, u0), (C1, u1)], n, rho);
            let mut seen = Vec::new();
            for _ in 0..k {
                seen = w.push(&e.milli);
            }
            prop_assert_eq!(seen, e.milli);
        }
    }

    const C0: CpuId = CpuId(0);
    const C1: CpuId = CpuId(1);
    const MS: u64 = 1_000_000;

    #[test]
    fn load_that_does_not_last_the_window_starts_no_sweep() {
        let mut gate = WeighGate::new(3);
        // A daemon's wake-up: a CPU's worth for one sample, then two.
        for (busy, runnable) in [(vec![], 0), (vec![(C0, 1000)], 1), (vec![], 0)] {
            assert!(!gate.wanted(&busy, runnable), "{busy:?}");
        }
        assert!(!gate.wanted(&[(C1, 1000)], 1));
        assert!(!gate.wanted(&[(C1, 1000)], 1));
        // The same load on another CPU at the third sample: no CPU had it
        // at each one, so the window would drop it too.
        assert!(!gate.wanted(&[(C0, 1000)], 1));
        // Lasting load is wanted at the third sample of it, and as long as
        // it lasts; gone for one sample, it must last three again.
        assert!(!gate.wanted(&[(C0, 1000)], 1));
        assert!(gate.wanted(&[(C0, 1000)], 1));
        assert!(gate.wanted(&[(C0, 1000), (C1, 100)], 1));
        assert!(!gate.wanted(&[(C1, 100)], 0));
        assert!(!gate.wanted(&[(C0, 1000)], 1));
    }

    #[test]
    fn only_load_beyond_a_ticks_noise_is_worth_weighing() {
        // A window of one sample: each sample decides alone.
        let worth_weighing =
            |busy: &[(CpuId, u64)], runnable| WeighGate::new(1).wanted(busy, runnable);
        // Nothing, or one tick of a 100 ms window on one CPU: not worth it.
        assert!(!worth_weighing(&[], 0));
        assert!(!worth_weighing(&[], 40), "runnable without busy time");
        assert!(!worth_weighing(&[(C0, 100)], 0));
        assert!(!worth_weighing(&[(C0, 100), (C1, 100)], 0));
        // A tick on each, but a thread runnable at the read: the estimate
        // spreads it over the busy CPUs, half a thread each.
        assert!(worth_weighing(&[(C0, 100), (C1, 100)], 1));
        // Two ticks on one CPU, or a CPU's worth anywhere.
        assert!(worth_weighing(&[(C0, 200)], 0));
        assert!(worth_weighing(&[(C1, 1000)], 0));
        // Little busy time but many runnable threads: they crowd it.
        assert!(worth_weighing(&[(C0, 100)], 3));
    }

    #[test]
    fn another_sessions_build_beside_our_pair_weighs_its_share() {
        // The module doc's numbers: each CPU half ours, half theirs.
        let e = estimate(&[(C0, 500), (C1, 500)], 10, 100);
        assert_eq!(e.counted, vec![(C0, 5), (C1, 5)]);
        assert_eq!(e.milli, vec![(C0, 500), (C1, 500)]);
        // In our own session: 5/6 of each CPU, 10 threads, 1000 each.
        let e = estimate(&[(C0, 833), (C1, 833)], 10, 1000);
        assert_eq!(e.milli, vec![(C0, 5000), (C1, 5000)]);
    }

    #[test]
    fn the_mean_weight_counts_unseen_threads_by_the_rule() {
        let group = Unseen::OneGroup(1000);
        // A refresh saw 4 threads of another session weighing 1000 in all.
        assert_eq!(mean_weight_milli(1000, 4, 4, group), 250);
        assert_eq!(mean_weight_milli(1000, 4, 2, group), 250);
        // 6 more runnable now than it saw: one more group.
        assert_eq!(mean_weight_milli(1000, 4, 10, group), 200);
        // Before any refresh: all unseen, one group spread over them.
        assert_eq!(mean_weight_milli(0, 0, 4, group), 250);
        assert_eq!(mean_weight_milli(0, 0, 0, group), 1000);
        // Thread by thread: each unseen one a nice-0 thread.
        let each = Unseen::EachThread(1000);
        assert_eq!(mean_weight_milli(1000, 4, 10, each), 700);
        assert_eq!(mean_weight_milli(0, 0, 0, each), 1000);
    }

    #[test]
    fn a_busy_cpu_counts_at_least_its_busy_fraction() {
        // One thread busy 60 % of CPU 1, nothing runnable at the read.
        let e = estimate(&[(C1, 600)], 0, 1000);
        assert_eq!(e.milli, vec![(C1, 600)]);
        assert_eq!(e.counted, vec![(C1, 1)]);
        // Nothing busy: nothing, whatever the count says (threads that woke
        // just now; their CPU shows at the next window).
        assert_eq!(estimate(&[], 7, 1000), Estimate::default());
    }

    #[test]
    fn the_count_goes_where_the_busy_time_is() {
        // 5 runnable threads, CPU 0 busy, CPU 1 a quarter busy.
        let e = estimate(&[(C0, 1000), (C1, 250)], 5, 1000);
        assert_eq!(e.milli, vec![(C0, 4000), (C1, 1000)]);
        assert_eq!(e.counted, vec![(C0, 4), (C1, 1)]);
    }

    #[test]
    fn busy_fractions_need_a_whole_window_and_leave_our_time_out() {
        let mut t = BusyTracker::new(100);
        // Ticks are 10 ms: 10 ticks over 100 ms is a whole CPU.
        assert!(t.observe(0, &[(C0, 100), (C1, 100)], &[], &[]).is_empty());
        // 50 ms on: not a window yet; our 20 ms on CPU 0 is kept for it.
        assert!(t
            .observe(50 * MS, &[(C0, 105), (C1, 103)], &[], &[(C0, 20 * MS)])
            .is_empty());
        // 100 ms: CPU 0 busy 100 ms of which 40 ours, CPU 1 busy 50 ms.
        let got = t
            .observe(100 * MS, &[(C0, 110), (C1, 105)], &[], &[(C0, 20 * MS)])
            .to_vec();
        assert_eq!(got, vec![(C0, 600), (C1, 500)]);
        // The next window starts afresh; our 90 ms put on CPU 0, busy 10 ms
        // there, ran 80 ms elsewhere: taken off CPU 1's 120 ms (ticks
        // rounding), 40 ms outside.
        let got = t
            .observe(200 * MS, &[(C0, 111), (C1, 117)], &[], &[(C0, 90 * MS)])
            .to_vec();
        assert_eq!(got, vec![(C1, 400)]);
        // A CPU that came online mid-window waits for the next one.
        let got = t
            .observe(300 * MS, &[(C0, 121), (C1, 117), (CpuId(2), 9)], &[], &[])
            .to_vec();
        assert_eq!(got, vec![(C0, 1000)]);
    }

    #[test]
    fn busy_time_whose_ticks_were_lost_is_the_window_less_the_idle_time() {
        // A TCG guest at HZ=1000: CPU 0 spun the whole 200 ms window but its
        // busy columns gained 1 tick of 20, its idle columns none (they are
        // clock deltas on a tickless kernel); CPU 1 was idle throughout
        // (idle 20 ticks, busy 0). Our thread ran 50 ms of the window on
        // CPU 0.
        let mut t = BusyTracker::new(100);
        let busy = |b0, b1| [(C0, b0), (C1, b1)];
        let idle = |i0, i1| [(C0, i0), (C1, i1)];
        assert!(t
            .observe(0, &busy(500, 700), &idle(900, 300), &[])
            .is_empty());
        let got = t
            .observe(200 * MS, &busy(501, 700), &idle(900, 320), &[(C0, 50 * MS)])
            .to_vec();
        assert_eq!(
            got,
            vec![(C0, 750)],
            "150 ms of 200 outside on CPU 0, none on CPU 1"
        );
        // With the busy ticks alone (no idle columns given) the same window
        // read as 10 ms busy: less our 50 ms, nothing outside.
        let mut ticks_only = BusyTracker::new(100);
        ticks_only.observe(0, &busy(500, 700), &[], &[]);
        let got = ticks_only.observe(200 * MS, &busy(501, 700), &[], &[(C0, 50 * MS)]);
        assert!(got.is_empty(), "{got:?}");
        // Ticks that are not lost agree with the idle time: the larger wins,
        // so nothing is counted twice.
        let mut both = BusyTracker::new(100);
        both.observe(0, &busy(0, 0), &idle(0, 0), &[]);
        let got = both
            .observe(100 * MS, &busy(6, 0), &idle(4, 10), &[])
            .to_vec();
        assert_eq!(got, vec![(C0, 600)]);
    }

    #[test]
    fn our_time_put_on_the_wrong_cpu_of_a_busy_pair_leaves_no_outside_load() {
        // Two of our threads kept CPUs 0 and 1 busy the whole 100 ms window,
        // each half the time on each, and both last ran on CPU 0, so all
        // 200 ms of ours is put there. Nothing else ran: the outside load is
        // none, not CPU 1's whole 100 ms (what clamping CPU 0 at 0 gave).
        let mut t = BusyTracker::new(100);
        t.observe(0, &[(C0, 0), (C1, 0)], &[], &[]);
        let got = t.observe(100 * MS, &[(C0, 10), (C1, 10)], &[], &[(C0, 200 * MS)]);
        assert!(got.is_empty(), "{got:?}");
        // With an outside thread on CPU 2 as well, it keeps its CPU but for
        // its share of what was misplaced: 100 ms of ours ran on CPUs 0-1
        // beyond what CPU 0 could hold, and CPUs 1 and 2 had 100 ms each
        // left over; the total outside time is exact (100 ms).
        let c2 = CpuId(2);
        let mut t = BusyTracker::new(100);
        t.observe(0, &[(C0, 0), (C1, 0), (c2, 0)], &[], &[]);
        let got = t
            .observe(
                100 * MS,
                &[(C0, 10), (C1, 10), (c2, 10)],
                &[],
                &[(C0, 200 * MS)],
            )
            .to_vec();
        assert_eq!(got, vec![(C1, 500), (c2, 500)]);
    }

    #[test]
    fn our_time_is_attributed_by_our_shares() {
        assert_eq!(
            attribute(90, &[(C0, 2000), (C1, 1000)]),
            vec![(C0, 60), (C1, 30)]
        );
        assert!(attribute(90, &[]).is_empty());
        assert!(attribute(90, &[(C0, 0)]).is_empty());
    }

    #[test]
    fn the_outside_count_leaves_out_the_reader_and_our_threads() {
        assert_eq!(outside_runnable(7, 2000), 4);
        assert_eq!(outside_runnable(7, 2499), 4);
        assert_eq!(outside_runnable(7, 2500), 3);
        assert_eq!(outside_runnable(1, 0), 0);
        assert_eq!(outside_runnable(0, 5000), 0);
        assert_eq!(outside_runnable(3, u64::MAX), 0);
    }

    fn arb_busy() -> impl Strategy<Value = Vec<(CpuId, u64)>> {
        prop::collection::btree_map(0u32..16, 0u64..1500, 0..16)
            .prop_map(|m| m.into_iter().map(|(c, u)| (CpuId(c), u)).collect())
    }

    proptest! {
        #[test]
        fn no_cpu_carries_more_than_it_can(
            busy in arb_busy(), n in 0u32..100_000, w in 0u64..90_000_000
        ) {
            let e = estimate(&busy, n, w);
            let most_threads = u64::from(n.max(1)) * TASK_MILLI;
            for &(cpu, m) in &e.milli {
                // threads_c ≤ max(1, n), so load_c ≤ max(1, n) × ρ.
                prop_assert!(
                    u128::from(m) <= u128::from(most_threads) * u128::from(w) / 1000,
                    "{cpu}: {m}"
                );
                prop_assert!(busy.iter().any(|&(c, u)| c == cpu && u > 0));
            }
            for &(_, k) in &e.counted {
                prop_assert!(k <= n.max(1));
            }
            prop_assert!(e.milli.windows(2).all(|p| p[0].0 < p[1].0));
            prop_assert!(e.milli.iter().all(|&(_, m)| m > 0));
            prop_assert!(e.counted.iter().all(|&(_, k)| k > 0));
        }

        #[test]
        fn the_threads_add_up_to_the_busy_time_or_the_count(
            busy in arb_busy(), n in 0u32..1000
        ) {
            // At ρ = 1000 the load is threads_c: Σ = max(Σu, n), less the
            // rounding down of each CPU.
            let e = estimate(&busy, n, 1000);
            let total: u64 = e.milli.iter().map(|&(_, m)| m).sum();
            let busy_total: u64 = busy.iter().map(|&(_, u)| u.min(1000)).sum();
            let want = if busy_total == 0 { 0 } else { busy_total.max(u64::from(n) * 1000) };
            prop_assert!(total <= want && total + busy.len() as u64 >= want,
                "{total} vs {want}");
        }

        #[test]
        fn fractions_stay_within_a_cpu(
            steps in prop::collection::vec((0u64..400, 0u64..60, 0u64..60, 0u64..200), 1..30)
        ) {
            let mut t = BusyTracker::new(100);
            let (mut now, mut b0, mut b1) = (0u64, 0u64, 0u64);
            t.observe(0, &[(C0, 0), (C1, 0)], &[], &[]);
            for (d_ms, d0, d1, own_ms) in steps {
                now += d_ms * MS;
                b0 += d0;
                b1 += d1;
                let got = t.observe(now, &[(C0, b0), (C1, b1)], &[], &[(C1, own_ms * MS)]);
                prop_assert!(got.iter().all(|&(_, f)| f > 0 && f <= 1000));
            }
        }
    }
}
