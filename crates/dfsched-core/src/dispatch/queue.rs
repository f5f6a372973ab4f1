//! Squillante & Lazowska's ready-queue policies (IEEE TPDS 1993, §IV and
//! §V-B) as a pure state machine: FCFS, FP, LP, MI, LMI(A), LMR(A), the
//! last four optionally with the pause heuristic.
//!
//! ```text
//!   task_ready(t) ──► idle processor for t? ──yes──► Some(cpu): run t there
//!                          │ no
//!                          ▼
//!                 ready queue (arrival order) ◄── LMR: t matched to a cpu
//!                          │
//!   burst_done(t, cpu) ────┴─► update t's affinity, then the policy picks
//!                              for cpu: Run(task) | Pause | Idle
//! ```
//!
//! The body (the simulator) owns time: it calls [`QueueDispatcher::task_ready`]
//! when a task becomes schedulable and [`QueueDispatcher::burst_done`] when a
//! processor finishes a burst, and carries out the answers. No decision
//! depends on time, so none is passed in.
//!
//! **Affinity.** Each processor counts the bursts it completed. A task
//! remembers, per *associated* processor, that count after its own last
//! burst there; the *intervening* tasks of task `x` at processor `p` are the
//! difference (the paper's "number of tasks executed since `x` last
//! executed there"). MI associates a task with every processor it ran on;
//! LMI and LMR with at most `A`, replacing the worst (most intervening)
//! association after a burst on an unassociated processor; LP only needs
//! the last processor. A task that never ran on `p` has no affinity for it.
//!
//! **Rules** (ties always go to the earlier task in the queue, and between
//! processors to the lower id; "an arbitrary idle processor" is the one idle
//! longest):
//!
//! | policy | processor frees | task becomes ready, processors idle |
//! |---|---|---|
//! | FCFS | head of queue | an arbitrary idle processor |
//! | FP | first queued task of its own (`t mod M`), else pause | its own processor if idle, else queue |
//! | LP | first queued task that last ran here, else head | its last processor if idle, else an arbitrary one |
//! | MI, LMI | associated task with fewest intervening, else head | the idle associated processor with fewest intervening, else an arbitrary one |
//! | LMR | first task matched here, else first associated, else head | match to the associated processor with least intervening + matched; run there if idle, else on an idle associated one, else an arbitrary one |
//!
//! **Pause** (§V-B): with the heuristic engaged (`C ≥ (M/N)·Z`), a processor
//! that finds queued tasks but none *matching* it (LP: last ran here; MI,
//! LMI, LMR: associated) pauses instead of taking the head, and only a
//! matching task that becomes ready ends the pause. An idle processor takes
//! any task; a paused one only a matching task. A *cold* task — one with no
//! affinity anywhere yet (never ran; no association) — matches every
//! processor for the pause: it reloads its whole footprint wherever it runs,
//! so there is nothing better to wait for. (Without this rule the tasks
//! still queued when every processor first pauses would never run: the
//! heuristic assumes "processor affinities fairly evenly divided", §V-B.)
//! And a processor pauses only while some task with affinity for it is
//! away, since only such a task's return can end the pause: one with none
//! takes the head (migrating a task to it, which keeps the division of
//! tasks among processors even); one whose last awaited task became ready
//! elsewhere stops pausing at that moment ([`Readied::woken`]).
//!
//! **Indexes.** No pick walks the whole ready queue. Beside the queue the
//! dispatcher keeps, per processor, the tasks a free processor looks for
//! first, so each rule's answer is at the front of a list:
//!
//! ```text
//!   FP   by_cpu[p]   queued tasks t with t mod M = p      arrival order
//!   LP   by_cpu[p]   queued tasks that last ran on p      arrival order
//!   LMR  by_cpu[p]   queued tasks matched to p            arrival order
//!   MI,  by_assoc[p] every task associated with p         most recent burst
//!   LMI                                                   on p first
//!   all  cold        queued tasks with no affinity        arrival order
//!        (pausing)
//! ```
//!
//! MI's "fewest intervening" at `p` is the largest burst count `at` that a
//! queued task left at `p` (intervening = `executed[p] − at`), so the pick
//! is the first *queued* task of `by_assoc[p]`. Counts are unique (each
//! burst on `p` gets its own), so there are no ties in practice; the walk
//! still breaks them by arrival, as the rule says. The walk gives up after
//! stepping over as many absent tasks as the queue holds, and scans the
//! queue instead, so a pick never costs more than twice the queue.
//!
//! LMR's second choice, the first queued task associated with `p`, walks
//! the queue testing each task's association bits: it is needed for about
//! one pick in ten (the matched list usually answers) and finds a task
//! within a few steps, which costs less than keeping `A` more list entries
//! per queued task.
//!
//! Invariants ([`QueueDispatcher::check_invariants`]): every task is away,
//! queued once or running on exactly the processor that runs it; the idle
//! list holds exactly the idle processors and the paused list exactly the
//! paused ones; except under FP, an idle processor means an empty queue;
//! no queued task matches a paused processor; LMR's per-processor match
//! counts equal the queued tasks matched there; a task has at most `A`
//! associations and affinity data for exactly those; every index above
//! holds exactly the tasks and the order its row says; while pausing, the
//! away counts equal the away tasks with affinity for each processor.

mod chain;
mod index;
mod invariants;
mod lists;
mod policy;
#[cfg(test)]
mod reference;
#[cfg(test)]
mod tests;

pub use policy::{
    CpuState, PauseRule, Pick, PolicyParseError, QueueConfig, QueueError, QueuePolicy, TaskState,
};

use crate::ids::{CpuId, TaskId};
use chain::{Chain, NONE};
use lists::Lists;
use serde::Serialize;

/// The most affinity cells (`M·N`) a dispatcher keeps: 16 Mi, 128 MiB of
/// burst counts; MI and LMI add 8 bytes of recency links per task and
/// association rounded up to a power of two (at most 256 MiB here).
pub const MAX_AFFINITY_CELLS: u64 = 1 << 24;

/// Counters of a dispatcher's decisions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct QueueStats {
    /// Tasks handed straight to a waiting processor when they became ready.
    pub direct: u64,
    /// Tasks that waited on the ready queue.
    pub queued: u64,
    /// Picks of a task matching the processor (affinity, FP's own task, or
    /// LMR's match).
    pub picked_matching: u64,
    /// Picks of the head of the queue without affinity.
    pub picked_head: u64,
    /// Times a processor paused with tasks waiting.
    pub pauses: u64,
    /// Times a processor went idle on an empty queue.
    pub idles: u64,
    /// Association replacements (LMI, LMR).
    pub replacements: u64,
}

/// What became of a task that turned ready.
#[must_use = "the processors named here must start these tasks"]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Readied {
    /// The processor that runs the task at once, or `None`: it is queued.
    pub cpu: Option<CpuId>,
    /// Paused processors that lost their last awaited task to another
    /// processor and now run the head of the queue (empty almost always).
    pub woken: Vec<(CpuId, TaskId)>,
}

/// The ready queue, the processors and every task's affinity.
#[derive(Clone, Debug)]
pub struct QueueDispatcher {
    /// What it was built from.
    config: QueueConfig,
    /// `M`.
    m: u32,
    /// Associations kept per task: `A` for LMI/LMR, `M` for MI, 0 otherwise.
    a: u32,
    /// Whether the pause heuristic is engaged.
    pausing: bool,
    /// Where each task is.
    task_state: Vec<TaskState>,
    /// Each task's last processor, or [`NONE`].
    last_cpu: Vec<u32>,
    /// `executed[last_cpu[t]]` after `t`'s last burst.
    last_at: Vec<u64>,
    /// `at[t·M + p]`: `executed[p]` after `t`'s last burst on `p`, for
    /// associated processors; 0 means not associated. Empty unless `a > 0`.
    at: Vec<u64>,
    /// `assoc[t·A ..][.. assoc_len[t]]`: the processors `t` is associated
    /// with, in the order the associations were made.
    assoc: Vec<u32>,
    /// Associations each task holds.
    assoc_len: Vec<u32>,
    /// LMR: the processor each queued task is matched to, or [`NONE`].
    matched_to: Vec<u32>,
    /// LMR: queued tasks matched to each processor.
    matched: Vec<u32>,
    /// What each processor does.
    cpu_state: Vec<CpuState>,
    /// Bursts each processor completed; starts at 0, so `at` is ≥ 1.
    executed: Vec<u64>,
    /// Ready tasks in arrival order.
    queue: Chain,
    /// When each queued task arrived (a count of arrivals): orders tasks
    /// found through an index rather than by walking the queue.
    arrival: Vec<u64>,
    /// Arrivals so far.
    arrivals: u64,
    /// Idle (not paused) processors, longest idle first.
    idle: Chain,
    /// Paused processors, in the order they paused (only the set matters).
    paused: Chain,
    /// 64-bit words in a bitset of processors: `⌈M/64⌉`.
    words: usize,
    /// Bitset of the waiting (idle or paused) processors.
    waiting: Vec<u64>,
    /// `assoc_bits[t·words ..][.. words]`: bitset of the processors `t` is
    /// associated with (MI, LMI, LMR), so that `waiting & assoc_bits` gives
    /// the processors an arrival may start on at once.
    assoc_bits: Vec<u64>,
    /// Per processor, the queued tasks it takes first, in arrival order:
    /// FP its own, LP those that last ran on it, LMR those matched to it.
    /// Nodes are tasks. Unused by FCFS, MI and LMI.
    by_cpu: Lists,
    /// MI and LMI: per processor, every task associated with it, the most
    /// recent burst there first, as nodes `t << node_shift | s` (task `t`'s
    /// association slot `s`; MI: `s` is the processor). Unused otherwise.
    by_assoc: Lists,
    /// `⌈log2 A⌉`: a node's task is `node >> node_shift`, a shift rather
    /// than a division on the walks.
    node_shift: u32,
    /// Queued cold tasks in arrival order; kept only while pausing (only
    /// the pause looks for them).
    cold: Chain,
    /// Away tasks with affinity for each processor (LP: last ran there;
    /// MI, LMI, LMR: associated): the tasks whose return a pause awaits.
    /// Kept only while pausing (only the pause reads it).
    away_matching: Vec<u32>,
    /// Counters.
    stats: QueueStats,
}

impl QueueDispatcher {
    /// A dispatcher with every task away and every processor idle.
    pub fn new(config: QueueConfig) -> Result<Self, QueueError> {
        let (m, n) = (config.processors, config.tasks);
        if m == 0 || n == 0 {
            return Err(QueueError::Empty {
                processors: m,
                tasks: n,
            });
        }
        if u64::from(m) * u64::from(n) > MAX_AFFINITY_CELLS {
            return Err(QueueError::TooLarge {
                processors: m,
                tasks: n,
                limit: MAX_AFFINITY_CELLS,
            });
        }
        let a = match config.policy {
            QueuePolicy::MinIntervening => m,
            p => match p.associations() {
                Some(a) if (1..=m).contains(&a) => a,
                Some(_) => {
                    return Err(QueueError::BadAssociations {
                        policy: p,
                        processors: m,
                    })
                }
                None => 0,
            },
        };
        let pausing = match config.pause {
            None => false,
            Some(rule) => {
                if !config.policy.can_pause() {
                    return Err(QueueError::PauseNotApplicable(config.policy));
                }
                let ok = |v: f64| v.is_finite() && v >= 0.0;
                if !ok(rule.reload_time) || !ok(rule.think_time) {
                    return Err(QueueError::BadPauseRule {
                        reload_time: rule.reload_time,
                        think_time: rule.think_time,
                    });
                }
                rule.engaged(m, n)
            }
        };
        let (mu, nu, au) = (m as usize, n as usize, a as usize);
        let node_shift = a.max(1).next_power_of_two().trailing_zeros();
        let mut idle = Chain::new(mu);
        let words = mu.div_ceil(64);
        let mut waiting = vec![0u64; words];
        for p in 0..m {
            idle.push_back(p);
            waiting[p as usize / 64] |= 1 << (p % 64);
        }
        let mut d = QueueDispatcher {
            config,
            m,
            a,
            pausing,
            task_state: vec![TaskState::Away; nu],
            last_cpu: vec![NONE; nu],
            last_at: vec![0; nu],
            at: if a > 0 { vec![0; nu * mu] } else { Vec::new() },
            assoc: vec![NONE; nu * au],
            assoc_len: vec![0; if a > 0 { nu } else { 0 }],
            matched_to: vec![NONE; nu],
            matched: vec![0; mu],
            cpu_state: vec![CpuState::Idle; mu],
            executed: vec![0; mu],
            queue: Chain::new(nu),
            arrival: vec![0; nu],
            arrivals: 0,
            idle,
            paused: Chain::new(mu),
            words,
            waiting,
            assoc_bits: vec![0; if a > 0 { nu * words } else { 0 }],
            by_cpu: Lists::unused(),
            by_assoc: Lists::unused(),
            node_shift,
            cold: Chain::new(if pausing { nu } else { 0 }),
            away_matching: vec![0; mu],
            stats: QueueStats::default(),
        };
        if d.uses_by_cpu() {
            d.by_cpu = Lists::new(mu, nu);
        }
        if d.by_recency() {
            d.by_assoc = Lists::new(mu, nu << node_shift);
        }
        Ok(d)
    }

    /// The configuration.
    pub fn config(&self) -> &QueueConfig {
        &self.config
    }

    /// Whether the pause heuristic is engaged (`C ≥ (M/N)·Z`).
    pub fn pausing(&self) -> bool {
        self.pausing
    }

    /// The counters.
    pub fn stats(&self) -> QueueStats {
        self.stats
    }

    /// Where a task is.
    pub fn task_state(&self, task: TaskId) -> Result<TaskState, QueueError> {
        Ok(self.task_state[self.task_index(task)?])
    }

    /// What a processor does.
    pub fn cpu_state(&self, cpu: CpuId) -> Result<CpuState, QueueError> {
        Ok(self.cpu_state[self.cpu_index(cpu)?])
    }

    /// The ready queue, in arrival order.
    pub fn queued(&self) -> impl Iterator<Item = TaskId> + '_ {
        self.queue.iter().map(|t| TaskId(u64::from(t)))
    }

    /// Tasks on the ready queue.
    pub fn queue_len(&self) -> usize {
        self.queue.len()
    }

    /// The processor a task last ran on.
    pub fn last_cpu(&self, task: TaskId) -> Result<Option<CpuId>, QueueError> {
        let l = self.last_cpu[self.task_index(task)?];
        Ok((l != NONE).then_some(CpuId(l)))
    }

    /// The processors a task is associated with (MI: every one it ran on;
    /// LMI, LMR: at most `A`), in the order the associations were made.
    /// Empty for FCFS, FP and LP.
    pub fn associations(&self, task: TaskId) -> Result<Vec<CpuId>, QueueError> {
        let t = self.task_index(task)?;
        if self.a == 0 {
            return Ok(Vec::new());
        }
        Ok(self.assoc_of(t).iter().map(|&p| CpuId(p)).collect())
    }

    /// Bursts completed on `cpu` since `task`'s last burst there, if the
    /// task keeps affinity for it (LP: its last processor; MI, LMI, LMR: an
    /// association; FCFS, FP: never).
    pub fn intervening(&self, task: TaskId, cpu: CpuId) -> Result<Option<u64>, QueueError> {
        let (t, p) = (self.task_index(task)?, self.cpu_index(cpu)?);
        Ok(match self.config.policy {
            QueuePolicy::Fcfs | QueuePolicy::FixedProcessor => None,
            QueuePolicy::LastProcessor => {
                (self.last_cpu[t] == p as u32).then(|| self.executed[p] - self.last_at[t])
            }
            _ => self.inter(t, p),
        })
    }

    /// A task becomes schedulable. Returns the processor that runs it at
    /// once (or `None`: it waits on the ready queue), and any paused
    /// processor whose last awaited task this was and that now runs
    /// another.
    pub fn task_ready(&mut self, task: TaskId) -> Result<Readied, QueueError> {
        let t = self.task_index(task)?;
        if self.task_state[t] != TaskState::Away {
            return Err(QueueError::NotAway {
                task,
                state: self.task_state[t],
            });
        }
        if self.pausing {
            self.count_away(t, false);
        }
        let waiting = |s: CpuState| matches!(s, CpuState::Idle | CpuState::Paused);
        let mut matched = NONE;
        let cpu = match self.config.policy {
            QueuePolicy::Fcfs => self.idle.front(),
            QueuePolicy::FixedProcessor => {
                let home = (t % self.m as usize) as u32;
                waiting(self.cpu_state[home as usize]).then_some(home)
            }
            QueuePolicy::LastProcessor => {
                let l = self.last_cpu[t];
                if l != NONE && waiting(self.cpu_state[l as usize]) {
                    Some(l)
                } else {
                    self.idle.front()
                }
            }
            QueuePolicy::MinIntervening | QueuePolicy::LimitedMinIntervening { .. } => self
                .best_waiting_association(t)
                .or_else(|| self.idle.front()),
            QueuePolicy::LimitedMinInterveningRouting { .. } => {
                matched = self.route(t);
                if matched != NONE && waiting(self.cpu_state[matched as usize]) {
                    Some(matched)
                } else {
                    self.best_waiting_association(t)
                        .or_else(|| self.idle.front())
                }
            }
        };
        // A cold task ends any pause (lowest id first) when no processor idles.
        let cpu = cpu.or_else(|| {
            (self.pausing && self.is_cold(t))
                .then(|| self.paused.iter().min())
                .flatten()
        });
        match cpu {
            Some(p) => {
                self.start(t, p);
                self.stats.direct += 1;
            }
            None => {
                self.enqueue(t, matched);
                self.stats.queued += 1;
            }
        }
        let woken = if self.pausing && !self.paused.is_empty() {
            self.unstrand(t)
        } else {
            Vec::new()
        };
        Ok(Readied {
            cpu: cpu.map(CpuId),
            woken,
        })
    }

    /// Ends the pause of every processor with affinity for `t` that has no
    /// awaited task left away (`t` went elsewhere): it takes the head of
    /// the queue, or idles on an empty one.
    #[cold]
    fn unstrand(&mut self, t: usize) -> Vec<(CpuId, TaskId)> {
        let mut woken = Vec::new();
        let lp = self.config.policy == QueuePolicy::LastProcessor;
        let cpus = if lp { 1 } else { self.assoc_len[t] as usize };
        for i in 0..cpus {
            let p = if lp {
                self.last_cpu[t]
            } else {
                self.assoc[t * self.a as usize + i]
            };
            let pu = p as usize;
            if p == NONE || self.cpu_state[pu] != CpuState::Paused || self.away_matching[pu] > 0 {
                continue;
            }
            self.paused.remove(p);
            match self.queue.front() {
                Some(h) => {
                    self.set_waiting(pu, false);
                    self.dequeue(h as usize);
                    let task = TaskId(u64::from(h));
                    self.cpu_state[pu] = CpuState::Running(task);
                    self.task_state[h as usize] = TaskState::Running(CpuId(p));
                    self.stats.picked_head += 1;
                    woken.push((CpuId(p), task));
                }
                None => {
                    self.cpu_state[pu] = CpuState::Idle;
                    self.idle.push_back(p);
                }
            }
        }
        woken
    }

    /// Adds (`away`) or removes task `t` from the away counts of the
    /// processors it has affinity for.
    #[inline]
    fn count_away(&mut self, t: usize, away: bool) {
        let step = |c: &mut u32| {
            if away {
                *c += 1
            } else {
                *c -= 1
            }
        };
        match self.config.policy {
            QueuePolicy::Fcfs | QueuePolicy::FixedProcessor => {}
            QueuePolicy::LastProcessor => {
                let l = self.last_cpu[t];
                if l != NONE {
                    step(&mut self.away_matching[l as usize]);
                }
            }
            _ => {
                let a = self.a as usize;
                for i in 0..self.assoc_len[t] as usize {
                    let p = self.assoc[t * a + i] as usize;
                    step(&mut self.away_matching[p]);
                }
            }
        }
    }

    /// `cpu` finished `task`'s burst: the task leaves (it becomes away),
    /// its affinity is updated, and the policy picks what `cpu` does next.
    pub fn burst_done(&mut self, task: TaskId, cpu: CpuId) -> Result<Pick, QueueError> {
        let t = self.task_index(task)?;
        let p = self.cpu_index(cpu)?;
        if self.cpu_state[p] != CpuState::Running(task) {
            return Err(QueueError::NotRunning {
                task,
                cpu,
                state: self.cpu_state[p],
            });
        }
        self.executed[p] += 1;
        let now = self.executed[p];
        self.last_cpu[t] = p as u32;
        self.last_at[t] = now;
        if self.a > 0 {
            self.associate(t, p, now);
        }
        self.task_state[t] = TaskState::Away;
        if self.pausing {
            self.count_away(t, true);
        }
        let pick = self.pick_for(p);
        match pick {
            Pick::Run(next) => {
                let x = next.0 as usize;
                self.dequeue(x);
                self.cpu_state[p] = CpuState::Running(next);
                self.task_state[x] = TaskState::Running(cpu);
            }
            Pick::Pause => {
                self.cpu_state[p] = CpuState::Paused;
                self.paused.push_back(p as u32);
                self.set_waiting(p, true);
                self.stats.pauses += 1;
            }
            Pick::Idle => {
                self.cpu_state[p] = CpuState::Idle;
                self.idle.push_back(p as u32);
                self.set_waiting(p, true);
                self.stats.idles += 1;
            }
        }
        Ok(pick)
    }

    // ---- internals ----

    fn task_index(&self, task: TaskId) -> Result<usize, QueueError> {
        if task.0 < u64::from(self.config.tasks) {
            Ok(task.0 as usize)
        } else {
            Err(QueueError::UnknownTask(task))
        }
    }

    fn cpu_index(&self, cpu: CpuId) -> Result<usize, QueueError> {
        if cpu.0 < self.m {
            Ok(cpu.0 as usize)
        } else {
            Err(QueueError::UnknownCpu(cpu))
        }
    }

    /// Task `t`'s associations.
    #[inline]
    fn assoc_of(&self, t: usize) -> &[u32] {
        let a = self.a as usize;
        &self.assoc[t * a..t * a + self.assoc_len[t] as usize]
    }

    /// Intervening bursts at `p` since `t`'s last there, if associated.
    #[inline]
    fn inter(&self, t: usize, p: usize) -> Option<u64> {
        let at = self.at[t * self.m as usize + p];
        (at != 0).then(|| self.executed[p] - at)
    }

    /// Whether task `t` has no affinity anywhere yet (LP, MI, LMI, LMR).
    #[inline]
    fn is_cold(&self, t: usize) -> bool {
        match self.config.policy {
            QueuePolicy::Fcfs | QueuePolicy::FixedProcessor => false,
            QueuePolicy::LastProcessor => self.last_cpu[t] == NONE,
            _ => self.assoc_len[t] == 0,
        }
    }

    /// Whether task `t` ends processor `p`'s pause: a matching or a cold
    /// task.
    #[inline]
    fn ends_pause(&self, t: usize, p: usize) -> bool {
        self.matches(t, p) || (self.pausing && self.is_cold(t))
    }

    /// Whether queued task `t` is one processor `p` waits for: its own
    /// task (FP), one that last ran there (LP), an associated one (MI, LMI,
    /// LMR). FCFS matches nothing.
    #[inline]
    fn matches(&self, t: usize, p: usize) -> bool {
        match self.config.policy {
            QueuePolicy::Fcfs => false,
            QueuePolicy::FixedProcessor => t % self.m as usize == p,
            QueuePolicy::LastProcessor => self.last_cpu[t] == p as u32,
            _ => self.at[t * self.m as usize + p] != 0,
        }
    }

    /// The waiting (idle or paused) processor associated with `t` that has
    /// the fewest intervening tasks; ties to the lower id. Looks through
    /// the bitsets of waiting and associated processors, or through `t`'s
    /// associations if they are fewer than the bitsets' words (the key
    /// makes the answer the same either way).
    fn best_waiting_association(&self, t: usize) -> Option<u32> {
        if self.idle.is_empty() && self.paused.is_empty() {
            return None;
        }
        let (mu, w) = (self.m as usize, self.words);
        if w <= self.assoc_len[t] as usize {
            // Ascending processor ids: a strict `<` keeps the lower id on a
            // tie, and the selects compile without a branch to mispredict.
            let (mut best_i, mut best_p) = (u64::MAX, NONE);
            let mine = &self.assoc_bits[t * w..(t + 1) * w];
            for (i, (&wait, &assoc)) in self.waiting.iter().zip(mine).enumerate() {
                let mut bits = wait & assoc;
                while bits != 0 {
                    let p = i * 64 + bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    let k = self.executed[p] - self.at[t * mu + p];
                    let better = k < best_i;
                    best_i = if better { k } else { best_i };
                    best_p = if better { p as u32 } else { best_p };
                }
            }
            return (best_p != NONE).then_some(best_p);
        }
        let key = |p: usize| (self.executed[p] - self.at[t * mu + p], p as u32);
        let mut best: Option<(u64, u32)> = None;
        for &p in self.assoc_of(t) {
            if self.is_waiting(p as usize) {
                let k = key(p as usize);
                if best.is_none_or(|b| k < b) {
                    best = Some(k);
                }
            }
        }
        best.map(|(_, p)| p)
    }

    /// Whether processor `p` is waiting (idle or paused), by its bit.
    #[inline]
    fn is_waiting(&self, p: usize) -> bool {
        self.waiting[p / 64] & (1 << (p % 64)) != 0
    }

    /// Sets processor `p`'s waiting bit.
    #[inline]
    fn set_waiting(&mut self, p: usize, on: bool) {
        let bit = 1u64 << (p % 64);
        if on {
            self.waiting[p / 64] |= bit;
        } else {
            self.waiting[p / 64] &= !bit;
        }
    }

    /// LMR's routing: the associated processor with the least intervening
    /// tasks plus queued tasks already matched to it; ties to the lower id.
    fn route(&self, t: usize) -> u32 {
        let mut best: Option<(u64, u32)> = None;
        for &p in self.assoc_of(t) {
            let i = self.inter(t, p as usize).unwrap_or(u64::MAX);
            let key = (i.saturating_add(u64::from(self.matched[p as usize])), p);
            if best.is_none_or(|b| key < b) {
                best = Some(key);
            }
        }
        best.map_or(NONE, |(_, p)| p)
    }

    /// Starts `t` on the waiting processor `p`.
    fn start(&mut self, t: usize, p: u32) {
        match self.cpu_state[p as usize] {
            CpuState::Idle => self.idle.remove(p),
            CpuState::Paused => self.paused.remove(p),
            CpuState::Running(_) => unreachable!("cpu{p} is not waiting"),
        }
        self.set_waiting(p as usize, false);
        let task = TaskId(t as u64);
        self.cpu_state[p as usize] = CpuState::Running(task);
        self.task_state[t] = TaskState::Running(CpuId(p));
    }

    /// What free processor `p` does next.
    fn pick_for(&mut self, p: usize) -> Pick {
        let Some(head) = self.queue.front() else {
            return Pick::Idle;
        };
        let pu = p as u32;
        let found = match self.config.policy {
            QueuePolicy::Fcfs => None,
            QueuePolicy::FixedProcessor | QueuePolicy::LastProcessor => self.by_cpu.front(pu),
            QueuePolicy::MinIntervening | QueuePolicy::LimitedMinIntervening { .. } => {
                self.min_intervening(p)
            }
            QueuePolicy::LimitedMinInterveningRouting { .. } => {
                self.by_cpu.front(pu).or_else(|| self.first_associated(p))
            }
        };
        match found {
            Some(t) => {
                self.stats.picked_matching += 1;
                Pick::Run(TaskId(u64::from(t)))
            }
            None if self.pausing => {
                // A cold task first (nothing better will come for it), else
                // wait if a task with affinity here is away, else migrate
                // the head (no awaited task exists: waiting would be
                // forever).
                let pick = self
                    .cold
                    .front()
                    .or((self.away_matching[p] == 0).then_some(head));
                match pick {
                    Some(t) => {
                        self.stats.picked_head += 1;
                        Pick::Run(TaskId(u64::from(t)))
                    }
                    None => Pick::Pause,
                }
            }
            None if self.config.policy == QueuePolicy::FixedProcessor => Pick::Pause,
            None => {
                self.stats.picked_head += 1;
                Pick::Run(TaskId(u64::from(head)))
            }
        }
    }
}
