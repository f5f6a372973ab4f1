//! The dispatcher's invariants (listed in the module doc), checked against
//! its state recomputed from scratch: the queue, the processors, the
//! associations, and every index and count derived from them.
//!
//! The derived state is what the hot paths keep incrementally; here it is
//! rebuilt the slow, obvious way, so a check compares two independent
//! computations of the same thing.

use super::chain::NONE;
use super::{CpuState, QueueDispatcher, QueuePolicy, TaskState};
use crate::ids::{CpuId, TaskId};

/// What the incremental indexes should hold, computed from scratch.
struct Expected {
    /// Away tasks with affinity for each processor (zeros unless pausing).
    away: Vec<u32>,
    /// Each `by_cpu` list (none when unused).
    by_cpu: Vec<Vec<u32>>,
    /// Each `by_assoc` list (none when unused: all but MI and LMI). Tasks
    /// with equal counts are in task order; the check accepts them in any
    /// order.
    by_assoc: Vec<Vec<u32>>,
    /// The cold queued tasks (empty unless pausing).
    cold: Vec<u32>,
}

impl QueueDispatcher {
    /// Checks the invariants of the module doc; the first broken one is
    /// described in the error.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut seen = vec![false; self.task_state.len()];
        let mut last_arrival = 0;
        for t in self.queue.iter() {
            let tu = t as usize;
            if seen[tu] || self.task_state[tu] != TaskState::Queued {
                return Err(format!(
                    "task{t} is on the queue twice or not marked queued"
                ));
            }
            if self.arrival[tu] <= last_arrival {
                return Err(format!("task{t} is queued out of arrival order"));
            }
            last_arrival = self.arrival[tu];
            seen[tu] = true;
        }
        let mut matched = vec![0u32; self.m as usize];
        for (t, s) in self.task_state.iter().enumerate() {
            match *s {
                TaskState::Queued if !seen[t] => {
                    return Err(format!("task{t} is marked queued but not on the queue"))
                }
                TaskState::Running(c)
                    if self.cpu_state[c.0 as usize] != CpuState::Running(TaskId(t as u64)) =>
                {
                    return Err(format!("task{t} claims {c}, which does not run it"))
                }
                _ => {}
            }
            if self.matched_to[t] != NONE {
                if *s != TaskState::Queued {
                    return Err(format!("task{t} is matched but not queued"));
                }
                matched[self.matched_to[t] as usize] += 1;
            }
            if self.a > 0 {
                let list = self.assoc_of(t);
                if list.len() > self.a as usize {
                    return Err(format!("task{t} has {} associations", list.len()));
                }
                for p in 0..self.m as usize {
                    let has = self.at[t * self.m as usize + p] != 0;
                    let bit = self.assoc_bits[t * self.words + p / 64] >> (p % 64) & 1 == 1;
                    if has != list.contains(&(p as u32)) || has != bit {
                        return Err(format!(
                            "task{t}'s affinity for cpu{p} disagrees with its associations"
                        ));
                    }
                }
            }
        }
        let want = self.expected();
        if self.pausing && want.away != self.away_matching {
            return Err(format!(
                "away counts {:?}, expected {:?}",
                self.away_matching, want.away
            ));
        }
        if matched != self.matched {
            return Err(format!(
                "LMR match counts {:?}, expected {matched:?}",
                self.matched
            ));
        }
        self.check_indexes(&want)?;
        for (p, s) in self.cpu_state.iter().enumerate() {
            if let CpuState::Running(task) = *s {
                if self.task_state[task.0 as usize] != TaskState::Running(CpuId(p as u32)) {
                    return Err(format!("cpu{p} runs {task}, which is elsewhere"));
                }
            }
            if (*s == CpuState::Idle) != self.idle.contains(p as u32) {
                return Err(format!("cpu{p} is {s:?} but the idle list disagrees"));
            }
            if (*s == CpuState::Paused) != self.paused.contains(p as u32) {
                return Err(format!("cpu{p} is {s:?} but the paused list disagrees"));
            }
            if matches!(s, CpuState::Idle | CpuState::Paused) != self.is_waiting(p) {
                return Err(format!("cpu{p} is {s:?} but its waiting bit disagrees"));
            }
            if *s == CpuState::Paused && self.pausing && self.away_matching[p] == 0 {
                return Err(format!("cpu{p} pauses with no awaited task away"));
            }
            let fp = self.config.policy == QueuePolicy::FixedProcessor;
            if *s == CpuState::Idle && !fp && !self.queue.is_empty() {
                return Err(format!("cpu{p} is idle while tasks wait"));
            }
            if matches!(s, CpuState::Idle | CpuState::Paused) {
                if let Some(t) = self.queue.iter().find(|&t| self.ends_pause(t as usize, p)) {
                    return Err(format!(
                        "cpu{p} waits ({s:?}) while matching task{t} is queued"
                    ));
                }
            }
        }
        Ok(())
    }

    /// The indexes against what they should hold.
    fn check_indexes(&self, want: &Expected) -> Result<(), String> {
        for (p, list) in want.by_cpu.iter().enumerate() {
            let have: Vec<u32> = self.by_cpu.iter(p as u32).collect();
            if &have != list {
                return Err(format!(
                    "cpu{p}'s task index is {have:?}, expected {list:?}"
                ));
            }
        }
        for (p, list) in want.by_assoc.iter().enumerate() {
            let have: Vec<u32> = self.by_assoc.iter(p as u32).collect();
            // Equal counts may sit in any order; the counts must fall.
            let key = |x: &u32| self.at[(*x >> self.node_shift) as usize * self.m as usize + p];
            let (mut h, mut w) = (have.clone(), list.clone());
            h.sort_unstable();
            w.sort_unstable();
            if h != w || have.windows(2).any(|x| key(&x[0]) < key(&x[1])) {
                return Err(format!(
                    "cpu{p}'s association index is {have:?}, expected {list:?}"
                ));
            }
        }
        let cold: Vec<u32> = self.cold.iter().collect();
        if cold != want.cold {
            return Err(format!("cold tasks {cold:?}, expected {:?}", want.cold));
        }
        Ok(())
    }

    /// The derived state, from the queue, the processors and the
    /// associations alone.
    fn expected(&self) -> Expected {
        let m = self.m as usize;
        let mut away = vec![0u32; m];
        if self.pausing {
            for t in 0..self.task_state.len() {
                if self.task_state[t] == TaskState::Away {
                    for (p, c) in away.iter_mut().enumerate() {
                        *c += u32::from(self.matches(t, p));
                    }
                }
            }
        }
        let queued = |f: &dyn Fn(usize) -> bool| -> Vec<u32> {
            self.queue.iter().filter(|&t| f(t as usize)).collect()
        };
        let policy = self.config.policy;
        let cpu_lists = if self.uses_by_cpu() { m } else { 0 };
        let by_cpu = (0..cpu_lists)
            .map(|p| match policy {
                QueuePolicy::FixedProcessor => queued(&|t| t % m == p),
                QueuePolicy::LastProcessor => queued(&|t| self.last_cpu[t] == p as u32),
                _ => queued(&|t| self.matched_to[t] == p as u32),
            })
            .collect();
        let slot = |t: usize, p: usize| -> u32 {
            let s = self.assoc_of(t).iter().position(|&q| q as usize == p);
            self.assoc_node(t, p, s.expect("associated"))
        };
        let assoc_lists = if self.by_recency() { m } else { 0 };
        let by_assoc = (0..assoc_lists)
            .map(|p| {
                let mut ts: Vec<usize> = (0..self.task_state.len())
                    .filter(|&t| self.matches(t, p))
                    .collect();
                ts.sort_by_key(|&t| (std::cmp::Reverse(self.at[t * m + p]), t));
                ts.into_iter().map(|t| slot(t, p)).collect()
            })
            .collect();
        let cold = if self.pausing {
            queued(&|t| self.is_cold(t))
        } else {
            Vec::new()
        };
        Expected {
            away,
            by_cpu,
            by_assoc,
            cold,
        }
    }

    /// Rebuilds the derived state from scratch (tests that set affinity
    /// directly call this to keep the indexes true).
    #[cfg(test)]
    pub(super) fn rebuild_derived(&mut self) {
        use super::chain::Chain;
        use super::lists::Lists;
        let want = self.expected();
        self.away_matching = want.away;
        if self.a > 0 {
            let (m, w) = (self.m as usize, self.words);
            self.assoc_bits.fill(0);
            for (cell, &at) in self.at.iter().enumerate() {
                let (t, p) = (cell / m, cell % m);
                if at != 0 {
                    self.assoc_bits[t * w + p / 64] |= 1 << (p % 64);
                }
            }
        }
        let (m, n) = (self.m as usize, self.task_state.len());
        if self.uses_by_cpu() {
            self.by_cpu = Lists::new(m, n);
            for (p, list) in want.by_cpu.iter().enumerate() {
                for &t in list {
                    self.by_cpu.push_back(p as u32, t);
                }
            }
        }
        if self.by_recency() {
            self.by_assoc = Lists::new(m, n << self.node_shift);
            for (p, list) in want.by_assoc.iter().enumerate() {
                for &x in list {
                    self.by_assoc.push_back(p as u32, x);
                }
            }
        }
        if self.pausing {
            self.cold = Chain::new(n);
            for &t in &want.cold {
                self.cold.push_back(t);
            }
        }
    }
}
