//! The worked example of Pinter & Zalmanovici §2 (Figs. 2 and 3): five
//! threads on two CPUs, run under CPU affinity and under data affinity, in
//! the paper's unit-cost cache model.
//!
//! # The cost model (§2.2, and `f` of §3)
//!
//! Each CPU's cache holds one DF at a time, whole (the example's "cache with
//! a single cache line"). A thread `v` that starts on a CPU whose cache
//! holds another DF first flushes the cache if a previous thread wrote it
//! (`T_w`), then reads its DF (`T_r`); then it executes for `ex(v)`. A
//! thread of the DF already cached starts at once (`f = 0`). When a CPU has
//! nothing left to run it flushes a dirty cache (`T_w`). `v0` only spawns
//! the others and writes nothing, which is why neither figure shows a
//! `T_w(v0)`; `v1`–`v4` write their DF.
//!
//! # The story
//!
//! `v0` (DF1) runs on P1 from time 0. At its end it spawns `v1`–`v4`
//! (`v2`, `v3`: DF1; `v1`, `v4`: DF2) and exits.
//!
//! - **CPU affinity** (Fig. 2): the children start on their parent's CPU;
//!   the balancer then moves half of P1's queue (the two threads that
//!   joined last, `v3` and `v4`) to the idle P2. Each CPU runs its queue
//!   round robin ([`RqPolicy::Vanilla`]).
//! - **Data affinity** (Fig. 3): each thread hints its DF as it starts;
//!   [`dfsched_core::Engine`] places the DF2 group on the idle P2 and the
//!   DF1 threads with `v0` on P1, and each CPU runs its groups in
//!   succession ([`RqPolicy::DataAffinity`]). The engine runs with
//!   `heavy_load_milli = 1000`, so that a group's home is one CPU at any
//!   load, as in the paper.
//!
//! # Lengths
//!
//! The paper's figures number the time slots 0, 1, 2, … and its text
//! quotes the number of the last slot used: the CPU-affinity schedule
//! fills slots 0–22 (23 time units) and is called "22 time units", the
//! data-affinity one fills slots 0–14 (15 time units) and is called "14".
//! [`Schedule::paper_length`] is that number; [`Schedule::makespan`] is the
//! count of time units. Both are computed from the schedule, not stated.

use dfsched_core::dispatch::runqueue::{RqPolicy, RunQueues};
use dfsched_core::{
    AppId, Config, CpuId, CpuSet, Decision, DfId, Engine, Event, Nanos, TaskId, Topology,
};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The example's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PinterParams {
    /// Time to read a whole DF into a cache (`T_r`). Paper: 4.
    pub t_r: u64,
    /// Time to flush a dirty cache (`T_w`). Paper: 4.
    pub t_w: u64,
    /// Execution time of each thread (`ex`). Paper: 1.
    pub ex: u64,
}

impl Default for PinterParams {
    fn default() -> Self {
        PinterParams {
            t_r: 4,
            t_w: 4,
            ex: 1,
        }
    }
}

/// What a CPU does in a stretch of time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Activity {
    /// Reading a thread's DF into the cache (`T_r(v)`).
    Read,
    /// Executing (`ex(v)`).
    Execute,
    /// Flushing the dirty cache that thread `v` left (`T_w(v)`).
    Flush,
}

/// One stretch of a Gantt chart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Segment {
    /// Index of the CPU (0 is P1).
    pub cpu: u32,
    /// First time unit.
    pub start: u64,
    /// One past the last time unit.
    pub end: u64,
    /// What happens.
    pub activity: Activity,
    /// The thread it is for (`v` of `T_r(v)`, `ex(v)`, `T_w(v)`).
    pub thread: u32,
}

/// One schedule of the example.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Schedule {
    /// `cpu-affinity` or `data-affinity`.
    pub policy: String,
    /// The chart, CPU by CPU, in time order.
    pub segments: Vec<Segment>,
    /// Time units until the last CPU is done.
    pub makespan: u64,
    /// The paper's figure: the number of the last time slot used
    /// (`makespan − 1`, slots being numbered from 0).
    pub paper_length: u64,
    /// The children each CPU ran from its queue after the spawn, in order
    /// (`v0` ran on P1 before).
    pub order: Vec<Vec<u32>>,
}

/// Both schedules.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PinterExample {
    /// The parameters used.
    pub params: PinterParams,
    /// Fig. 2.
    pub cpu_affinity: Schedule,
    /// Fig. 3.
    pub data_affinity: Schedule,
}

/// The example's threads: DF of `v0`…`v4`, and whether each writes.
const THREADS: [(u64, bool); 5] = [(1, false), (2, true), (1, true), (1, true), (2, true)];

/// Runs the example with `params`.
pub fn run(params: PinterParams) -> PinterExample {
    PinterExample {
        params,
        cpu_affinity: cpu_affinity(params),
        data_affinity: data_affinity(params),
    }
}

fn task(v: u32) -> TaskId {
    TaskId(u64::from(v) + 1)
}

fn thread(t: TaskId) -> u32 {
    (t.0 - 1) as u32
}

/// A CPU of the unit-cost machine: its clock and its cache.
#[derive(Clone, Copy, Debug, Default)]
struct UnitCpu {
    now: u64,
    /// The cached DF and the thread that last wrote it, if dirty.
    df: Option<u64>,
    dirty_by: Option<u32>,
}

/// Runs thread `v` on `cpu` at the CPU's time, charging the model's costs.
fn run_thread(cpu: u32, c: &mut UnitCpu, v: u32, p: PinterParams, out: &mut Vec<Segment>) {
    let (df, writes) = THREADS[v as usize];
    let mut seg = |c: &mut UnitCpu, len: u64, activity, thread| {
        out.push(Segment {
            cpu,
            start: c.now,
            end: c.now + len,
            activity,
            thread,
        });
        c.now += len;
    };
    if c.df != Some(df) {
        if let Some(w) = c.dirty_by.take() {
            seg(c, p.t_w, Activity::Flush, w);
        }
        seg(c, p.t_r, Activity::Read, v);
        c.df = Some(df);
    }
    seg(c, p.ex, Activity::Execute, v);
    if writes {
        c.dirty_by = Some(v);
    }
}

/// Drains every CPU's run queue (threads run to completion: `ex` is far
/// below a quantum), then flushes dirty caches.
fn drain(
    policy: &str,
    mut cpus: Vec<UnitCpu>,
    rq: &mut RunQueues,
    p: PinterParams,
    mut segments: Vec<Segment>,
) -> Schedule {
    let mut order = vec![Vec::new(); cpus.len()];
    for (i, c) in cpus.iter_mut().enumerate() {
        while let Some(pick) = rq.pick(CpuId(i as u32)).expect("CPU exists") {
            let v = thread(pick.task);
            order[i].push(v);
            run_thread(i as u32, c, v, p, &mut segments);
        }
        if let Some(w) = c.dirty_by.take() {
            segments.push(Segment {
                cpu: i as u32,
                start: c.now,
                end: c.now + p.t_w,
                activity: Activity::Flush,
                thread: w,
            });
            c.now += p.t_w;
        }
    }
    segments.sort_by_key(|s| (s.cpu, s.start));
    let makespan = cpus.iter().map(|c| c.now).max().unwrap_or(0);
    Schedule {
        policy: policy.to_string(),
        segments,
        makespan,
        paper_length: makespan.saturating_sub(1),
        order,
    }
}

/// Runs `v0` on P1 from time 0; returns the CPUs and its segments.
fn start_v0(p: PinterParams) -> (Vec<UnitCpu>, Vec<Segment>) {
    let mut cpus = vec![UnitCpu::default(); 2];
    let mut segments = Vec::new();
    run_thread(0, &mut cpus[0], 0, p, &mut segments);
    let spawn = cpus[0].now;
    cpus[1].now = spawn; // P2 idles until there is work
    (cpus, segments)
}

fn all_cpus() -> CpuSet {
    CpuSet::first_n(2)
}

/// Fig. 2: the children stay on P1; the balancer moves the two that
/// joined last to P2.
fn cpu_affinity(p: PinterParams) -> Schedule {
    let (cpus, segments) = start_v0(p);
    let quantum = Nanos(u64::MAX);
    let mut rq = RunQueues::new(RqPolicy::Vanilla, &all_cpus(), quantum).expect("valid");
    for v in 1..=4 {
        rq.enqueue(CpuId(0), task(v), None).expect("new task");
    }
    // The balancer evens the queues (4 vs 0): half of P1's queue, taken
    // from its tail, keeps its order on P2.
    let moved = rq.waiting(CpuId(0)) / 2;
    let tail: Vec<u32> = ((5 - moved as u32)..=4).collect();
    for v in tail {
        rq.remove(task(v));
        rq.enqueue(CpuId(1), task(v), None).expect("moved task");
    }
    drain("cpu-affinity", cpus, &mut rq, p, segments)
}

/// Fig. 3: placement by the Engine, groups run in succession.
fn data_affinity(p: PinterParams) -> Schedule {
    let (cpus, segments) = start_v0(p);
    let topo = Topology::new(&all_cpus(), Vec::new()).expect("two CPUs, private caches");
    let config = Config {
        heavy_load_milli: 1000,
        ..Config::default()
    };
    let mut engine = Engine::new(topo, config).expect("valid config");
    let mut out: Vec<Decision> = Vec::new();
    let mut ev = |e: Event, out: &mut Vec<Decision>| engine.handle(e, out).expect("valid event");
    let mut placed: BTreeMap<TaskId, CpuId> = BTreeMap::new();
    for v in 0..5u32 {
        let t = task(v);
        ev(
            Event::TaskNew {
                task: t,
                app: AppId(0),
                allowed: all_cpus(),
                cpu: Some(CpuId(0)),
            },
            &mut out,
        );
        ev(
            Event::Hint {
                task: t,
                app: AppId(0),
                cur: None,
                next: Some(DfId(THREADS[v as usize].0)),
            },
            &mut out,
        );
    }
    // v0 is done once it has spawned the others.
    ev(Event::Exit { task: task(0) }, &mut out);
    for d in &out {
        if let Decision::Place { task, cpus } = d {
            placed.insert(*task, cpus.first().expect("never empty"));
        }
    }
    let mut rq =
        RunQueues::new(RqPolicy::DataAffinity, &all_cpus(), Nanos(u64::MAX)).expect("valid");
    for v in 1..=4 {
        let t = task(v);
        let view = engine.task(t).expect("known");
        let cpu = placed[&t];
        rq.enqueue(cpu, t, view.group).expect("new task");
    }
    drain("data-affinity", cpus, &mut rq, p, segments)
}

impl Schedule {
    /// The schedule as a text Gantt chart: one row per CPU, one
    /// three-character cell per time slot (`R2` = `T_r(v2)`, `x2` =
    /// `ex(v2)`, `W2` = `T_w(v2)`, `.` = idle), slot numbers above.
    pub fn gantt(&self) -> String {
        let width = self.makespan as usize;
        let mut s = String::new();
        let _ = write!(s, "    ");
        for t in 0..width {
            let _ = write!(s, "{t:>3}");
        }
        s.push('\n');
        for cpu in 0..self.order.len() as u32 {
            let mut cells = vec![" .".to_string(); width];
            for seg in self.segments.iter().filter(|g| g.cpu == cpu) {
                let c = match seg.activity {
                    Activity::Read => 'R',
                    Activity::Execute => 'x',
                    Activity::Flush => 'W',
                };
                for cell in &mut cells[seg.start as usize..seg.end as usize] {
                    *cell = format!("{c}{}", seg.thread);
                }
            }
            let _ = write!(s, "P{:<3}", cpu + 1);
            for cell in cells {
                let _ = write!(s, "{cell:>3}");
            }
            s.push('\n');
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(cpu: u32, start: u64, end: u64, activity: Activity, thread: u32) -> Segment {
        Segment {
            cpu,
            start,
            end,
            activity,
            thread,
        }
    }

    #[test]
    fn the_paper_example_gives_22_and_14() {
        let ex = run(PinterParams::default());
        assert_eq!(ex.cpu_affinity.paper_length, 22);
        assert_eq!(ex.data_affinity.paper_length, 14);
        assert_eq!(ex.cpu_affinity.makespan, 23);
        assert_eq!(ex.data_affinity.makespan, 15);
    }

    #[test]
    fn cpu_affinity_matches_fig_2_slot_for_slot() {
        use Activity::*;
        let s = run(PinterParams::default()).cpu_affinity;
        assert_eq!(s.order, vec![vec![1, 2], vec![3, 4]]);
        assert_eq!(
            s.segments,
            vec![
                seg(0, 0, 4, Read, 0),
                seg(0, 4, 5, Execute, 0),
                seg(0, 5, 9, Read, 1),
                seg(0, 9, 10, Execute, 1),
                seg(0, 10, 14, Flush, 1),
                seg(0, 14, 18, Read, 2),
                seg(0, 18, 19, Execute, 2),
                seg(0, 19, 23, Flush, 2),
                seg(1, 5, 9, Read, 3),
                seg(1, 9, 10, Execute, 3),
                seg(1, 10, 14, Flush, 3),
                seg(1, 14, 18, Read, 4),
                seg(1, 18, 19, Execute, 4),
                seg(1, 19, 23, Flush, 4),
            ]
        );
    }

    #[test]
    fn data_affinity_matches_fig_3_slot_for_slot() {
        use Activity::*;
        let s = run(PinterParams::default()).data_affinity;
        assert_eq!(s.order, vec![vec![2, 3], vec![1, 4]]);
        assert_eq!(
            s.segments,
            vec![
                seg(0, 0, 4, Read, 0),
                seg(0, 4, 5, Execute, 0),
                seg(0, 5, 6, Execute, 2),
                seg(0, 6, 7, Execute, 3),
                seg(0, 7, 11, Flush, 3),
                seg(1, 5, 9, Read, 1),
                seg(1, 9, 10, Execute, 1),
                seg(1, 10, 11, Execute, 4),
                seg(1, 11, 15, Flush, 4),
            ]
        );
    }

    #[test]
    fn the_gantt_chart_is_golden() {
        let g = run(PinterParams::default()).data_affinity.gantt();
        let want = "      0  1  2  3  4  5  6  7  8  9 10 11 12 13 14\n\
                    P1   R0 R0 R0 R0 x0 x2 x3 W3 W3 W3 W3  .  .  .  .\n\
                    P2    .  .  .  .  . R1 R1 R1 R1 x1 x4 W4 W4 W4 W4\n";
        assert_eq!(g, want);
    }

    #[test]
    fn the_gap_grows_with_the_reload_time() {
        // On the critical path data affinity saves one read and one flush:
        // 3·T_r + 2·T_w + 3 against 2·T_r + T_w + 3.
        for (t_r, t_w) in [(1, 1), (4, 4), (10, 3)] {
            let ex = run(PinterParams { t_r, t_w, ex: 1 });
            let gap = ex.cpu_affinity.makespan - ex.data_affinity.makespan;
            assert_eq!(gap, t_r + t_w);
        }
    }
}
