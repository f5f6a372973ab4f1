//! The discrete-event engine: a model, a clock and a queue of events.
//!
//! ```text
//!            ┌───────────── Simulation ──────────────┐
//!            │  now ── EventQueue ── SimRng ── stats │
//!            └────┬──────────────────────────────▲───┘
//!   pop earliest  │                              │ schedule / cancel
//!   (time, seq)   ▼                              │ (through Context only)
//!            Model::handle(event, &mut Context) ─┘
//! ```
//!
//! Workflow of [`Simulation::run_until`]:
//! 1. on the first run, call [`Model::start`] so the model schedules its
//!    initial events;
//! 2. take the earliest live event; if it lies beyond the limit, stop there;
//! 3. advance `now` to its time (time never goes backwards) and hand it to
//!    [`Model::handle`] with a [`Context`];
//! 4. repeat until the queue is empty, the limit or event budget is reached,
//!    or the model calls [`Context::stop`].
//!
//! Invariants:
//! - time only advances here; a model reads it from its context and cannot
//!   schedule into the past (it gets [`SimError::InThePast`]);
//! - events at the same instant run in the order they were scheduled, so a
//!   run is a pure function of the model, its inputs and the seed;
//! - the model never sees the queue; it schedules and cancels through the
//!   context, and draws randomness from the engine's seeded [`SimRng`];
//! - the hot loop allocates nothing and logs nothing: it counts, in
//!   [`EngineStats`]. Log lines (at start and end of a run) carry the
//!   simulated time in a `sim_time` field; models should do the same with
//!   [`Context::now`].

use crate::error::SimError;
use crate::queue::{EventId, EventQueue};
use crate::rng::SimRng;
use crate::time::{SimTime, Ticks};
use serde::Serialize;
use std::fmt;

/// A simulated system: it reacts to its own events.
pub trait Model {
    /// What the model schedules. Kept small and `Copy` so the queue stores it
    /// inline (a few words; put bulky data in the model, keyed by an id).
    type Event: Copy + fmt::Debug;

    /// Called once, at time zero, before the first event: schedule the
    /// initial events here.
    fn start(&mut self, ctx: &mut Context<'_, Self::Event>);

    /// Reacts to one event at `ctx.now()`.
    fn handle(&mut self, event: Self::Event, ctx: &mut Context<'_, Self::Event>);
}

/// What a model may do while it handles an event.
pub struct Context<'a, E> {
    /// The current instant.
    now: SimTime,
    /// The engine's queue; private so models cannot reorder it.
    queue: &'a mut EventQueue<E>,
    /// The run's only source of randomness.
    rng: &'a mut SimRng,
    /// Set by [`Context::stop`].
    stop: &'a mut bool,
}

impl<E: Copy> Context<'_, E> {
    /// The current simulated time.
    #[inline]
    pub fn now(&self) -> SimTime {
        self.now
    }

    /// Schedules `event` `delay` ticks from now (zero: after every event
    /// already scheduled for now).
    #[inline]
    pub fn schedule_in(&mut self, delay: Ticks, event: E) -> EventId {
        self.queue.push(self.now + delay, event)
    }

    /// Schedules `event` at the instant `at`, which must not be in the past.
    #[inline]
    pub fn schedule_at(&mut self, at: SimTime, event: E) -> Result<EventId, SimError> {
        if at < self.now {
            return Err(SimError::InThePast { at, now: self.now });
        }
        Ok(self.queue.push(at, event))
    }

    /// Cancels a scheduled event; see [`EventQueue::cancel`].
    #[inline]
    pub fn cancel(&mut self, id: EventId) {
        self.queue.cancel(id);
    }

    /// The seeded random number generator.
    #[inline]
    pub fn rng(&mut self) -> &mut SimRng {
        self.rng
    }

    /// Ends the run after this event; later events stay queued and a later
    /// call to a `run*` method resumes with them.
    pub fn stop(&mut self) {
        *self.stop = true;
    }
}

/// Why a run returned.
#[must_use = "a run can end for several reasons; check which"]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunOutcome {
    /// No live event is left.
    Drained,
    /// The next event lies beyond the time limit; `now` is the limit.
    TimeLimit,
    /// The event budget of [`Simulation::run_events`] is spent.
    EventBudget,
    /// The model called [`Context::stop`].
    Stopped,
}

impl fmt::Display for RunOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RunOutcome::Drained => "drained",
            RunOutcome::TimeLimit => "time limit",
            RunOutcome::EventBudget => "event budget",
            RunOutcome::Stopped => "stopped by the model",
        })
    }
}

/// The engine's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct EngineStats {
    /// Events handed to the model.
    pub events_handled: u64,
    /// Events ever scheduled (initial ones included).
    pub events_scheduled: u64,
    /// Cancelled events dropped from the queue.
    pub events_cancelled: u64,
}

/// A model, its clock, its pending events and its random numbers.
pub struct Simulation<M: Model> {
    /// The simulated system.
    model: M,
    /// Pending events.
    queue: EventQueue<M::Event>,
    /// The seeded generator handed to the model.
    rng: SimRng,
    /// The current instant; never decreases.
    now: SimTime,
    /// Whether [`Model::start`] has run.
    started: bool,
    /// Events handed to the model.
    handled: u64,
}

impl<M: Model> Simulation<M> {
    /// A simulation of `model` with randomness from `seed` (stream 0).
    pub fn new(model: M, seed: u64) -> Self {
        Self::with_rng(model, SimRng::new(seed))
    }

    /// A simulation drawing from `rng` (for replications on separate
    /// streams, see [`SimRng::with_stream`]).
    pub fn with_rng(model: M, rng: SimRng) -> Self {
        Simulation {
            model,
            queue: EventQueue::with_capacity(1024),
            rng,
            now: SimTime::ZERO,
            started: false,
            handled: 0,
        }
    }

    /// Runs until no event is left or the model stops.
    pub fn run(&mut self) -> RunOutcome {
        self.run_inner(SimTime::MAX, u64::MAX)
    }

    /// Runs every event at or before `limit`; then `now` is `limit` (unless
    /// the model stopped earlier or the queue drained).
    pub fn run_until(&mut self, limit: SimTime) -> RunOutcome {
        self.run_inner(limit, u64::MAX)
    }

    /// Runs at most `budget` events.
    pub fn run_events(&mut self, budget: u64) -> RunOutcome {
        self.run_inner(SimTime::MAX, budget)
    }

    fn run_inner(&mut self, limit: SimTime, budget: u64) -> RunOutcome {
        let mut stop = false;
        if !self.started {
            self.started = true;
            let mut ctx = Context {
                now: self.now,
                queue: &mut self.queue,
                rng: &mut self.rng,
                stop: &mut stop,
            };
            self.model.start(&mut ctx);
        }
        tracing::debug!(
            sim_time = self.now.0,
            pending = self.queue.len(),
            "run starts"
        );
        let mut left = budget;
        let outcome = loop {
            if stop {
                break RunOutcome::Stopped;
            }
            if left == 0 {
                break RunOutcome::EventBudget;
            }
            match self.queue.peek_time() {
                None => break RunOutcome::Drained,
                Some(t) if t > limit => {
                    self.now = limit;
                    break RunOutcome::TimeLimit;
                }
                Some(_) => {}
            }
            let Some((time, _, event)) = self.queue.pop() else {
                break RunOutcome::Drained;
            };
            debug_assert!(time >= self.now, "the queue went back in time");
            self.now = time;
            left -= 1;
            self.handled += 1;
            let mut ctx = Context {
                now: time,
                queue: &mut self.queue,
                rng: &mut self.rng,
                stop: &mut stop,
            };
            self.model.handle(event, &mut ctx);
        };
        tracing::debug!(
            sim_time = self.now.0,
            events = self.handled,
            %outcome,
            "run ends"
        );
        outcome
    }

    /// The current simulated time.
    pub fn now(&self) -> SimTime {
        self.now
    }

    /// The model.
    pub fn model(&self) -> &M {
        &self.model
    }

    /// The model, mutably (between runs: to change parameters or read and
    /// reset counters).
    pub fn model_mut(&mut self) -> &mut M {
        &mut self.model
    }

    /// Ends the simulation, returning the model.
    pub fn into_model(self) -> M {
        self.model
    }

    /// The engine's counters.
    pub fn stats(&self) -> EngineStats {
        EngineStats {
            events_handled: self.handled,
            events_scheduled: self.queue.pushed(),
            events_cancelled: self.queue.skipped(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records the order in which events arrive; each event may schedule
    /// follow-ups.
    #[derive(Default)]
    struct Recorder {
        seen: Vec<(u64, u32)>,
        to_cancel: Option<EventId>,
    }

    #[derive(Clone, Copy, Debug)]
    enum Ev {
        Mark(u32),
        Spawn,
        CancelLater,
        Stop,
    }

    impl Model for Recorder {
        type Event = Ev;
        fn start(&mut self, ctx: &mut Context<'_, Ev>) {
            ctx.schedule_in(Ticks(10), Ev::Mark(1));
            ctx.schedule_in(Ticks(10), Ev::Mark(2));
            ctx.schedule_in(Ticks(5), Ev::Spawn);
        }
        fn handle(&mut self, ev: Ev, ctx: &mut Context<'_, Ev>) {
            match ev {
                Ev::Mark(n) => self.seen.push((ctx.now().0, n)),
                Ev::Spawn => {
                    // Same instant as Mark(1) and Mark(2), scheduled later:
                    // must run after both.
                    ctx.schedule_in(Ticks(5), Ev::Mark(3));
                    ctx.schedule_in(Ticks(0), Ev::Mark(0));
                    ctx.schedule_in(Ticks(7), Ev::CancelLater);
                    self.to_cancel = Some(ctx.schedule_in(Ticks(20), Ev::Mark(99)));
                    ctx.schedule_in(Ticks(30), Ev::Stop);
                    ctx.schedule_in(Ticks(40), Ev::Mark(4));
                }
                Ev::CancelLater => {
                    if let Some(id) = self.to_cancel.take() {
                        ctx.cancel(id);
                    }
                    let past = ctx.schedule_at(SimTime(1), Ev::Mark(98));
                    assert!(matches!(past, Err(SimError::InThePast { .. })));
                }
                Ev::Stop => ctx.stop(),
            }
        }
    }

    #[test]
    fn ties_run_in_scheduling_order_and_cancelled_events_never_run() {
        let mut sim = Simulation::new(Recorder::default(), 1);
        assert_eq!(sim.run(), RunOutcome::Stopped);
        assert_eq!(sim.now(), SimTime(35));
        assert_eq!(
            sim.model().seen,
            vec![(5, 0), (10, 1), (10, 2), (10, 3)],
            "Mark(99) was cancelled; Mark(4) is after the stop"
        );
        // Resuming after a stop runs the rest.
        assert_eq!(sim.run(), RunOutcome::Drained);
        assert_eq!(sim.model().seen.last(), Some(&(45, 4)));
        assert_eq!(sim.stats().events_cancelled, 1);
    }

    #[test]
    fn run_until_stops_at_the_limit_and_resumes() {
        let mut sim = Simulation::new(Recorder::default(), 1);
        assert_eq!(sim.run_until(SimTime(9)), RunOutcome::TimeLimit);
        assert_eq!(sim.now(), SimTime(9));
        assert_eq!(sim.model().seen, vec![(5, 0)]);
        assert_eq!(sim.run_events(2), RunOutcome::EventBudget);
        assert_eq!(sim.model().seen.len(), 3);
    }

    /// A closed network: `n` customers alternate between an exponential
    /// think time `z` (infinite server) and one FCFS server with exponential
    /// service `s`. Its exact throughput is known (product form).
    struct Closed {
        n: u32,
        s_ticks: f64,
        z_ticks: f64,
        queue: std::collections::VecDeque<u32>,
        busy: bool,
        completions: u64,
    }

    #[derive(Clone, Copy, Debug)]
    enum CEv {
        Arrive(u32),
        Done(u32),
    }

    impl Model for Closed {
        type Event = CEv;
        fn start(&mut self, ctx: &mut Context<'_, CEv>) {
            for c in 0..self.n {
                let d = ctx.rng().exponential_ticks(self.z_ticks);
                ctx.schedule_in(d, CEv::Arrive(c));
            }
        }
        fn handle(&mut self, ev: CEv, ctx: &mut Context<'_, CEv>) {
            match ev {
                CEv::Arrive(c) => {
                    if self.busy {
                        self.queue.push_back(c);
                    } else {
                        self.busy = true;
                        let d = ctx.rng().exponential_ticks(self.s_ticks);
                        ctx.schedule_in(d, CEv::Done(c));
                    }
                }
                CEv::Done(c) => {
                    self.completions += 1;
                    let d = ctx.rng().exponential_ticks(self.z_ticks);
                    ctx.schedule_in(d, CEv::Arrive(c));
                    match self.queue.pop_front() {
                        Some(next) => {
                            let d = ctx.rng().exponential_ticks(self.s_ticks);
                            ctx.schedule_in(d, CEv::Done(next));
                        }
                        None => self.busy = false,
                    }
                }
            }
        }
    }

    fn closed(seed: u64) -> Simulation<Closed> {
        Simulation::new(
            Closed {
                n: 3,
                s_ticks: 1e6,
                z_ticks: 2e6,
                queue: Default::default(),
                busy: false,
                completions: 0,
            },
            seed,
        )
    }

    #[test]
    fn closed_network_throughput_matches_product_form() {
        // Exact: P(k at server) ∝ s^k z^(n-k)/(n-k)!, X = (1-P(0))/s.
        let (s, z, n) = (1.0f64, 2.0f64, 3i32);
        let w: Vec<f64> = (0..=n)
            .map(|k| s.powi(k) * z.powi(n - k) / (1..=(n - k)).product::<i32>() as f64)
            .collect();
        let exact = (1.0 - w[0] / w.iter().sum::<f64>()) / s;
        let mut sim = closed(11);
        let horizon = 100_000u64;
        assert_eq!(
            sim.run_until(SimTime(horizon * 1_000_000)),
            RunOutcome::TimeLimit
        );
        let x = sim.model().completions as f64 / horizon as f64;
        // About 40,000 completions: the standard error is well under 1%.
        assert!(
            (x - exact).abs() / exact < 0.03,
            "simulated {x}, exact {exact}"
        );
        assert!(sim.stats().events_handled > 80_000);
    }

    #[test]
    fn same_seed_same_run_different_seed_different_run() {
        let run = |seed| {
            let mut sim = closed(seed);
            let _ = sim.run_events(10_000);
            (sim.now(), sim.model().completions)
        };
        assert_eq!(run(5), run(5));
        assert_ne!(run(5), run(6));
    }
}
