//! The closed network as a model of the engine: tasks think, become
//! ready, are dispatched by the core's [`QueueDispatcher`], and are served
//! for `Exp(D + C·R(i))` ticks, where `i` counts the distinct tasks that
//! ran on the processor since this task last ran there.
//!
//! ```text
//!   Ready(t) ─► task_ready ─► begin(t, p): R(i) from p's row of `last`,
//!                                          draw service, schedule Done(p)
//!   Done(p)  ─► stamp t in p's row, measure, draw think time, schedule
//!               Ready(t), burst_done ─► begin(next, p) if it runs one
//! ```
//!
//! Everything here runs once or twice per event, so it is written for
//! speed without changing a single draw or sum: events are one word, the
//! distinct count scans a row of narrow burst stamps (16 bits for up to
//! [`NARROW_TASKS`] tasks, so eight to a vector register), and conversions
//! avoid the slow unsigned paths of baseline x86-64.
//!
//! Invariants: a row's non-zero stamps are distinct and at most its
//! processor's burst count, which only grows (until a renumbering that
//! keeps their order); `serving[p]` is the task processor `p` runs
//! whenever a `Done(p)` is pending.

use super::{ClosedNetworkError, ClosedNetworkParams, TICKS_PER_UNIT};
use crate::analytic::reload::cold_reload_ratio;
use crate::engine::{Context, Model};
use crate::rng::SimRng;
use crate::time::{SimTime, Ticks};
use dfsched_core::dispatch::queue::{PauseRule, Pick, QueueConfig, QueueDispatcher};
use dfsched_core::{CpuId, TaskId};
use std::fmt::Debug;

/// The most tasks simulated with 16-bit stamps: a row is then renumbered
/// at most every `i16::MAX − 4096` bursts of its processor, a sort of at
/// most 4096 entries, a few operations per burst at worst.
pub(super) const NARROW_TASKS: u32 = 4096;

/// A burst stamp in a processor's row: a signed integer, so the vector
/// compare needs no bias; narrow ones pack more lanes into the scan.
pub(super) trait Stamp: Copy + Ord + Default + Debug + 'static {
    /// The largest stamp; a row is renumbered before its count passes it.
    const MAX: Self;
    /// Stamp `rank + 1` (ranks are below the number of tasks).
    fn from_rank(rank: usize) -> Self;
    /// The next stamp.
    fn succ(self) -> Self;
    /// How many entries of `row` are above `mine` (at most the row's
    /// length, which fits the type).
    fn count_above(row: &[Self], mine: Self) -> usize;
}

impl Stamp for i16 {
    const MAX: i16 = i16::MAX;
    #[inline]
    fn from_rank(rank: usize) -> i16 {
        (rank + 1) as i16
    }
    #[inline]
    fn succ(self) -> i16 {
        self + 1
    }
    #[inline]
    fn count_above(row: &[i16], mine: i16) -> usize {
        // Branch-free, in 16-bit lanes: eight entries to an SSE register.
        row.iter().map(|&x| i16::from(x > mine)).sum::<i16>() as usize
    }
}

impl Stamp for i32 {
    const MAX: i32 = i32::MAX;
    #[inline]
    fn from_rank(rank: usize) -> i32 {
        (rank + 1) as i32
    }
    #[inline]
    fn succ(self) -> i32 {
        self + 1
    }
    #[inline]
    fn count_above(row: &[i32], mine: i32) -> usize {
        // Branch-free, in 32-bit lanes: four entries to an SSE register.
        row.iter().map(|&x| i32::from(x > mine)).sum::<i32>() as usize
    }
}

/// The simulated system, with burst stamps of type `S`.
pub(super) struct Network<S: Stamp> {
    /// The policy's state, from the core.
    pub(super) dispatcher: QueueDispatcher,
    /// `N`.
    pub(super) n: usize,
    /// `D`, `Z`, in ticks.
    demand_ticks: f64,
    think_ticks: f64,
    /// `C/(1 − U_bus)`, in ticks: the reload time of a whole footprint.
    reload_ticks: f64,
    /// `R(0..N)`.
    ratios: Vec<f64>,
    /// The ratio of a task on a processor where it never ran:
    /// [`cold_reload_ratio`], the limit of `R(I)` (1 for a footprint that
    /// fits).
    cold_ratio: f64,
    /// `last[p·N + t]`: processor `p`'s burst count after `t`'s last burst
    /// there; 0 if `t` never ran there. Distinct intervening tasks are the
    /// entries of the row above the task's own. Narrow stamps shorten the
    /// scan; a row is renumbered (order kept) before its count would
    /// overflow.
    pub(super) last: Vec<S>,
    /// Bursts completed per processor since its last renumbering (the
    /// row's largest entry).
    pub(super) bursts: Vec<S>,
    /// When each task last became ready.
    ready_at: Vec<SimTime>,
    /// The task each processor serves (meaningless while it waits).
    serving: Vec<u32>,
    /// The reload ratio of each running task's current visit.
    visit_ratio: Vec<f64>,
    /// When each processor began the visit it is serving; `None` while it
    /// waits or pauses. Utilisation is credited from it, clipped to the
    /// measured window at both edges.
    pub(super) busy_since: Vec<Option<SimTime>>,
    /// Measuring since this instant, if at all.
    measuring: Option<SimTime>,
    /// Visits measured.
    pub(super) visits: u64,
    /// Sum of measured response times, in units.
    pub(super) response_sum: f64,
    /// Sum of their squares.
    pub(super) response_sq_sum: f64,
    /// Sum of measured visits' reload ratios.
    pub(super) ratio_sum: f64,
    /// Service time inside the measured window, in ticks, summed over
    /// processors: the part of each visit after measuring started, up to
    /// its end or to [`Network::stop_measuring`]'s instant, whichever is
    /// first. So it never exceeds `M ×` the window; whole ticks keep the
    /// sum exact (a sum of doubles could round past `M ×` the window).
    pub(super) busy_ticks: u128,
    /// Dispatcher pauses before measuring started.
    pub(super) pauses_before: u64,
}

/// The network's events, packed in one word because the engine's queue
/// moves them on every push and pop: a task ends its think time
/// (`Ready(t)`, the task's index) or a processor ends a burst (`Done(p)`,
/// [`Ev::DONE`] plus the processor's index; the task is in
/// [`Network::serving`]). Processors number at most `2^24` (the
/// dispatcher's cell limit) and tasks [`super::MAX_TASKS`], so both fit beside
/// the flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Ev(pub(super) u32);

impl Ev {
    /// The flag of `Done` events.
    pub(super) const DONE: u32 = 1 << 31;

    /// Task `t` ends its think time.
    #[inline]
    pub(super) fn ready(t: usize) -> Ev {
        Ev(t as u32)
    }

    /// Processor `p` ends a burst.
    #[inline]
    pub(super) fn done(p: usize) -> Ev {
        Ev(Ev::DONE | p as u32)
    }
}

/// `x.round() as u64` for a duration `x ≥ 0` in ticks, without the libm
/// call `f64::round` costs on baseline x86-64: below `2^52` the fraction
/// `x − ⌊x⌋` is exact, so comparing it with one half rounds half away
/// from zero exactly as `round` does; from `2^52` on every double is an
/// integer already (and the cast saturates as before). The conversions go
/// through `i64`, one instruction each way, where `u64` takes several.
#[inline]
pub(super) fn round_ticks(x: f64) -> Ticks {
    const EXACT: f64 = (1u64 << 52) as f64;
    if (0.0..EXACT).contains(&x) {
        let whole = x as i64;
        Ticks(whole as u64 + u64::from(x - whole as f64 >= 0.5))
    } else {
        Ticks(x.round() as u64)
    }
}

/// `ticks as f64 / TICKS_PER_UNIT`, converting through `i64` below `2^63`
/// (one instruction, where `u64` takes several, and the same double).
/// Responses always are (the parameter check bounds a run to `10^18`
/// ticks); a
/// service draw could pass it only with an absurd `C`.
#[inline]
pub(super) fn units(ticks: u64) -> f64 {
    let x = match i64::try_from(ticks) {
        Ok(small) => small as f64,
        Err(_) => ticks as f64,
    };
    x / TICKS_PER_UNIT
}

/// An exponential draw with mean `mean_ticks`, in whole ticks: the same
/// draw and the same ticks as [`SimRng::exponential_ticks`], rounded by
/// [`round_ticks`].
#[inline]
pub(super) fn exponential_ticks(rng: &mut SimRng, mean_ticks: f64) -> Ticks {
    round_ticks(rng.exponential(mean_ticks))
}

impl<S: Stamp> Network<S> {
    /// The network at time zero: every task away, every processor idle.
    pub(super) fn new(
        p: &ClosedNetworkParams,
        ratios: &[f64],
        u_bus: f64,
    ) -> Result<Network<S>, ClosedNetworkError> {
        let dispatcher = QueueDispatcher::new(QueueConfig {
            policy: p.policy,
            processors: p.processors,
            tasks: p.tasks,
            pause: p.pause.then_some(PauseRule {
                reload_time: p.reload_time,
                think_time: p.think_time,
            }),
        })?;
        let (m, n) = (p.processors as usize, p.tasks as usize);
        Ok(Network {
            dispatcher,
            n,
            demand_ticks: p.demand * TICKS_PER_UNIT,
            think_ticks: p.think_time * TICKS_PER_UNIT,
            reload_ticks: p.reload_time / (1.0 - u_bus) * TICKS_PER_UNIT,
            ratios: ratios.to_vec(),
            cold_ratio: cold_reload_ratio(p.footprint_blocks, p.cache)?,
            last: vec![S::default(); m * n],
            bursts: vec![S::default(); m],
            ready_at: vec![SimTime::ZERO; n],
            serving: vec![0; m],
            visit_ratio: vec![0.0; n],
            busy_since: vec![None; m],
            measuring: None,
            visits: 0,
            response_sum: 0.0,
            response_sq_sum: 0.0,
            ratio_sum: 0.0,
            busy_ticks: 0,
            pauses_before: 0,
        })
    }

    /// Counts from `now` on.
    pub(super) fn start_measuring(&mut self, now: SimTime) {
        self.measuring = Some(now);
        self.pauses_before = self.dispatcher.stats().pauses;
    }

    /// Ends the measured window at `now`: credits the part of every visit
    /// still in service that lies inside the window (it ends later, so
    /// [`Model::handle`] would never credit it), and stops counting. Call
    /// it at the window's end, after the run's last event.
    pub(super) fn stop_measuring(&mut self, now: SimTime) {
        if let Some(from) = self.measuring {
            for began in self.busy_since.iter().flatten() {
                self.busy_ticks += u128::from(now.since((*began).max(from)).0);
            }
        }
        self.measuring = None;
    }

    /// The reload ratio of task `t` on processor `p` now: `R(i)` for `i`
    /// distinct intervening tasks, or the cold ratio if `t` never ran
    /// there.
    #[inline]
    pub(super) fn ratio(&self, t: usize, p: usize) -> f64 {
        let row = &self.last[p * self.n..(p + 1) * self.n];
        let mine = row[t];
        if mine == S::default() {
            return self.cold_ratio;
        }
        self.ratios[S::count_above(row, mine)]
    }

    /// Renumbers processor `p`'s row to `1..=k` in the same order, so its
    /// burst count can go on without overflowing.
    #[cold]
    pub(super) fn renumber(&mut self, p: usize) {
        let row = &mut self.last[p * self.n..(p + 1) * self.n];
        let mut ran: Vec<(S, usize)> = row
            .iter()
            .enumerate()
            .filter(|(_, &v)| v != S::default())
            .map(|(t, &v)| (v, t))
            .collect();
        ran.sort_unstable();
        for (rank, &(_, t)) in ran.iter().enumerate() {
            row[t] = S::from_rank(rank);
        }
        self.bursts[p] = if ran.is_empty() {
            S::default()
        } else {
            S::from_rank(ran.len() - 1)
        };
    }

    /// Starts task `t`'s burst on processor `p`.
    #[inline]
    fn begin(&mut self, t: usize, p: usize, ctx: &mut Context<'_, Ev>) {
        let r = self.ratio(t, p);
        let d = exponential_ticks(ctx.rng(), self.demand_ticks + self.reload_ticks * r);
        self.visit_ratio[t] = r;
        self.busy_since[p] = Some(ctx.now());
        self.serving[p] = t as u32;
        ctx.schedule_in(d, Ev::done(p));
    }
}

impl<S: Stamp> Model for Network<S> {
    type Event = Ev;

    fn start(&mut self, ctx: &mut Context<'_, Ev>) {
        for t in 0..self.n {
            let d = exponential_ticks(ctx.rng(), self.think_ticks);
            ctx.schedule_in(d, Ev::ready(t));
        }
    }

    fn handle(&mut self, ev: Ev, ctx: &mut Context<'_, Ev>) {
        if ev.0 & Ev::DONE == 0 {
            let t = ev.0;
            self.ready_at[t as usize] = ctx.now();
            let ready = self
                .dispatcher
                .task_ready(TaskId(u64::from(t)))
                .expect("the network only readies away tasks");
            if let Some(cpu) = ready.cpu {
                self.begin(t as usize, cpu.0 as usize, ctx);
            }
            for (cpu, task) in ready.woken {
                self.begin(task.0 as usize, cpu.0 as usize, ctx);
            }
        } else {
            let pu = (ev.0 & !Ev::DONE) as usize;
            let t = self.serving[pu];
            let tu = t as usize;
            if self.bursts[pu] == S::MAX {
                self.renumber(pu);
            }
            self.bursts[pu] = self.bursts[pu].succ();
            self.last[pu * self.n + tu] = self.bursts[pu];
            let began = self.busy_since[pu]
                .take()
                .expect("a processor ends only a visit it began");
            if let Some(from) = self.measuring {
                // Visits that end in the window count whole for X, T, T²
                // and R̄ (the paper's per-visit measures), but only their
                // part inside the window counts as busy time: a visit that
                // began during warm-up was partly served before it.
                let resp = units((ctx.now() - self.ready_at[tu]).0);
                self.visits += 1;
                self.response_sum += resp;
                self.response_sq_sum += resp * resp;
                self.ratio_sum += self.visit_ratio[tu];
                self.busy_ticks += u128::from(ctx.now().since(began.max(from)).0);
            }
            let think = exponential_ticks(ctx.rng(), self.think_ticks);
            ctx.schedule_in(think, Ev::ready(tu));
            let pick = self
                .dispatcher
                .burst_done(TaskId(u64::from(t)), CpuId(pu as u32))
                .expect("the network only finishes running bursts");
            if let Pick::Run(next) = pick {
                self.begin(next.0 as usize, pu, ctx);
            }
        }
    }
}
