//! The dispatcher as first written: every pick scans the ready queue, the
//! away counts are kept whether or not processors pause, and nothing is
//! indexed. Kept as the oracle the indexed [`super::QueueDispatcher`] must
//! agree with answer for answer (tests only): the rules are in their
//! plainest form here, so a divergence is a bug in the indexes.

#![allow(dead_code)]

use super::chain::{Chain, NONE};
use super::{
    CpuState, Pick, QueueConfig, QueueError, QueuePolicy, QueueStats, Readied, TaskState,
    MAX_AFFINITY_CELLS,
};
use crate::ids::{CpuId, TaskId};

#[derive(Clone, Debug)]
pub(super) struct Reference {
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
    /// Idle (not paused) processors, longest idle first.
    idle: Chain,
    /// Away tasks with affinity for each processor (LP: last ran there;
    /// MI, LMI, LMR: associated): the tasks whose return a pause awaits.
    away_matching: Vec<u32>,
    /// Counters.
    stats: QueueStats,
}

impl Reference {
    /// A dispatcher with every task away and every processor idle.
    pub(super) fn new(config: QueueConfig) -> Result<Self, QueueError> {
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
        let mut idle = Chain::new(mu);
        for p in 0..m {
            idle.push_back(p);
        }
        Ok(Reference {
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
            idle,
            away_matching: vec![0; mu],
            stats: QueueStats::default(),
        })
    }

    pub(super) fn stats(&self) -> QueueStats {
        self.stats
    }

    pub(super) fn queued(&self) -> Vec<u32> {
        self.queue.iter().collect()
    }

    pub(super) fn states(&self) -> (Vec<TaskState>, Vec<CpuState>) {
        (self.task_state.clone(), self.cpu_state.clone())
    }

    /// another.
    pub(super) fn task_ready(&mut self, task: TaskId) -> Result<Readied, QueueError> {
        let t = self.task_index(task)?;
        if self.task_state[t] != TaskState::Away {
            return Err(QueueError::NotAway {
                task,
                state: self.task_state[t],
            });
        }
        self.count_away(t, false);
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
                .then(|| self.cpu_state.iter().position(|s| *s == CpuState::Paused))
                .flatten()
                .map(|p| p as u32)
        });
        match cpu {
            Some(p) => {
                self.start(t, p);
                self.stats.direct += 1;
            }
            None => {
                self.queue.push_back(t as u32);
                self.task_state[t] = TaskState::Queued;
                if matched != NONE {
                    self.matched_to[t] = matched;
                    self.matched[matched as usize] += 1;
                }
                self.stats.queued += 1;
            }
        }
        let woken = if self.pausing {
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
        let cpus: Vec<u32> = match self.config.policy {
            QueuePolicy::LastProcessor => vec![self.last_cpu[t]],
            _ => self.assoc_of(t).to_vec(),
        };
        for p in cpus {
            let pu = p as usize;
            if p == NONE || self.cpu_state[pu] != CpuState::Paused || self.away_matching[pu] > 0 {
                continue;
            }
            match self.queue.front() {
                Some(h) => {
                    self.queue.remove(h);
                    self.unmatch(h as usize);
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
    pub(super) fn burst_done(&mut self, task: TaskId, cpu: CpuId) -> Result<Pick, QueueError> {
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
        self.count_away(t, true);
        let pick = self.pick_for(p);
        match pick {
            Pick::Run(next) => {
                let x = next.0 as usize;
                self.queue.remove(x as u32);
                self.unmatch(x);
                self.cpu_state[p] = CpuState::Running(next);
                self.task_state[x] = TaskState::Running(cpu);
            }
            Pick::Pause => {
                self.cpu_state[p] = CpuState::Paused;
                self.stats.pauses += 1;
            }
            Pick::Idle => {
                self.cpu_state[p] = CpuState::Idle;
                self.idle.push_back(p as u32);
                self.stats.idles += 1;
            }
        }
        Ok(pick)
    }

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
    /// the fewest intervening tasks; ties to the lower id.
    fn best_waiting_association(&self, t: usize) -> Option<u32> {
        let mut best: Option<(u64, u32)> = None;
        for &p in self.assoc_of(t) {
            if !matches!(
                self.cpu_state[p as usize],
                CpuState::Idle | CpuState::Paused
            ) {
                continue;
            }
            let key = (self.inter(t, p as usize).unwrap_or(u64::MAX), p);
            if best.is_none_or(|b| key < b) {
                best = Some(key);
            }
        }
        best.map(|(_, p)| p)
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
        if self.cpu_state[p as usize] == CpuState::Idle {
            self.idle.remove(p);
        }
        let task = TaskId(t as u64);
        self.cpu_state[p as usize] = CpuState::Running(task);
        self.task_state[t] = TaskState::Running(CpuId(p));
    }

    /// Forgets LMR's match of a task leaving the queue.
    #[inline]
    fn unmatch(&mut self, t: usize) {
        let q = self.matched_to[t];
        if q != NONE {
            self.matched[q as usize] -= 1;
            self.matched_to[t] = NONE;
        }
    }

    /// Records `t`'s burst on `p` (whose count is now `now`): refresh an
    /// association, add one while fewer than `A`, or replace the worst.
    fn associate(&mut self, t: usize, p: usize, now: u64) {
        let mu = self.m as usize;
        let cell = t * mu + p;
        if self.at[cell] == 0 {
            let a = self.a as usize;
            let len = self.assoc_len[t] as usize;
            if len < a {
                self.assoc[t * a + len] = p as u32;
                self.assoc_len[t] += 1;
            } else {
                // The worst association: most intervening; ties to the
                // earliest made.
                let slot = (0..a)
                    .max_by_key(|&s| {
                        let q = self.assoc[t * a + s] as usize;
                        (self.executed[q] - self.at[t * mu + q], std::cmp::Reverse(s))
                    })
                    .expect("A ≥ 1");
                let old = self.assoc[t * a + slot] as usize;
                self.at[t * mu + old] = 0;
                self.assoc[t * a + slot] = p as u32;
                self.stats.replacements += 1;
            }
        }
        self.at[cell] = now;
    }

    /// What free processor `p` does next.
    fn pick_for(&mut self, p: usize) -> Pick {
        let Some(head) = self.queue.front() else {
            return Pick::Idle;
        };
        let found = match self.config.policy {
            QueuePolicy::Fcfs => None,
            QueuePolicy::FixedProcessor | QueuePolicy::LastProcessor => {
                self.queue.iter().find(|&t| self.matches(t as usize, p))
            }
            QueuePolicy::MinIntervening | QueuePolicy::LimitedMinIntervening { .. } => {
                let mu = self.m as usize;
                let ex = self.executed[p];
                let mut best: Option<(u64, u32)> = None;
                for t in self.queue.iter() {
                    let at = self.at[t as usize * mu + p];
                    if at != 0 && best.is_none_or(|(b, _)| ex - at < b) {
                        best = Some((ex - at, t));
                        if ex == at {
                            break; // nothing beats zero
                        }
                    }
                }
                best.map(|(_, t)| t)
            }
            QueuePolicy::LimitedMinInterveningRouting { .. } => {
                let pu = p as u32;
                let by_match = if self.matched[p] > 0 {
                    self.queue
                        .iter()
                        .find(|&t| self.matched_to[t as usize] == pu)
                } else {
                    None
                };
                by_match.or_else(|| self.queue.iter().find(|&t| self.matches(t as usize, p)))
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
                    .queue
                    .iter()
                    .find(|&t| self.is_cold(t as usize))
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
