//! Measures the engine's speed on a closed-network workload: M processors
//! serving one FCFS ready queue, N tasks alternating exponential service
//! and think times (Squillante & Lazowska's system model, FCFS policy).
//!
//! Run: `cargo run --release -p dfsched-sim --example engine_throughput [events]`
//! Prints events per second of wall time. Not a test: timings are noisy.

use dfsched_sim::engine::{Context, Model, Simulation};
use std::collections::VecDeque;
use std::time::Instant;

/// Ticks per unit of demand.
const UNIT: f64 = 1e6;

struct Fcfs {
    tasks: u32,
    idle: u32,
    ready: VecDeque<u32>,
    completions: u64,
}

#[derive(Clone, Copy, Debug)]
enum Ev {
    Arrive(u32),
    Done(u32),
}

impl Model for Fcfs {
    type Event = Ev;
    fn start(&mut self, ctx: &mut Context<'_, Ev>) {
        for t in 0..self.tasks {
            let d = ctx.rng().exponential_ticks(UNIT);
            ctx.schedule_in(d, Ev::Arrive(t));
        }
    }
    fn handle(&mut self, ev: Ev, ctx: &mut Context<'_, Ev>) {
        match ev {
            Ev::Arrive(t) => {
                if self.idle > 0 {
                    self.idle -= 1;
                    let d = ctx.rng().exponential_ticks(UNIT);
                    ctx.schedule_in(d, Ev::Done(t));
                } else {
                    self.ready.push_back(t);
                }
            }
            Ev::Done(t) => {
                self.completions += 1;
                let d = ctx.rng().exponential_ticks(UNIT);
                ctx.schedule_in(d, Ev::Arrive(t));
                match self.ready.pop_front() {
                    Some(next) => {
                        let d = ctx.rng().exponential_ticks(UNIT);
                        ctx.schedule_in(d, Ev::Done(next));
                    }
                    None => self.idle += 1,
                }
            }
        }
    }
}

fn main() {
    let events: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000_000);
    for (m, n) in [(32u32, 32u32), (32, 128), (1024, 4096)] {
        let model = Fcfs {
            tasks: n,
            idle: m,
            ready: VecDeque::with_capacity(n as usize),
            completions: 0,
        };
        let mut sim = Simulation::new(model, 1);
        let t0 = Instant::now();
        let _ = sim.run_events(events);
        let secs = t0.elapsed().as_secs_f64();
        let st = sim.stats();
        println!(
            "M={m:5} N={n:5}: {} events in {secs:.3} s = {:.2} M events/s ({} visits, X = {:.3})",
            st.events_handled,
            st.events_handled as f64 / secs / 1e6,
            sim.model().completions,
            sim.model().completions as f64 / (sim.now().0 as f64 / UNIT),
        );
    }
}
