//! Pinter & Zalmanovici §3: the minimal penalty `T` over partitions of
//! tasks onto `m` CPUs, for the simplified penalty `g`.
//!
//! `g(vᵢ, vⱼ)` is 0 when both tasks use the same DF and `T_r + T_w` when they
//! differ or `vᵢ` is the empty CPU `φ`. A CPU's best order (`F*`) runs its
//! tasks DF by DF (the paper's bins), so `F*(X) = d(X)·(T_r + T_w)` where
//! `d(X)` is the number of distinct DFs in `X`; the brute-force test checks
//! that closed form against every permutation. A partition gives each CPU
//! at most `k = ⌈n/m⌉` tasks (the paper's equal-sized subsets, padded with
//! free tasks), and `T = min over partitions of max over CPUs of F*`.
//!
//! - [`exact`]: depth-first search over task → CPU assignments, tasks
//!   grouped by DF; symmetry breaking (a task goes to a used CPU or the
//!   first unused one; tasks of one DF take CPUs in non-decreasing order:
//!   both hold for the lexicographically least assignment among those that
//!   differ only by renaming CPUs or swapping same-DF tasks, so no class of
//!   equivalent partitions is lost)
//!   and bound pruning (stop a branch once its max `d` reaches the best
//!   found). Exponential: for small cases (`n ≤` [`EXACT_MAX_TASKS`]).
//! - [`heuristic`]: greedy, then local search. Greedy takes DFs by
//!   decreasing task count and puts each whole on the CPU with the fewest
//!   DFs that has room (ties: most room, then lowest index); a DF that fits
//!   nowhere whole is cut over the CPUs with the most room. Local search
//!   then moves whole DF pieces off the CPUs at the maximum `d` while that
//!   lowers the number of such CPUs or the maximum, up to a fixed number of
//!   rounds. Never better than exact (a test checks heuristic ≥ exact).
//! - [`online`]: what [`dfsched_core::Engine`] does with the same tasks
//!   arriving one by one and hinting their DFs: a task whose target spans
//!   several CPUs is counted on the least-loaded of them, as the body does.
//!   It need not respect `k`.

use dfsched_core::{AppId, Config, CpuId, DfId, Engine, Event, TaskId, Topology};
use serde::Serialize;
use std::collections::BTreeMap;

/// Largest instance [`exact`] accepts.
pub const EXACT_MAX_TASKS: usize = 24;

/// A partition's cost.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Solution {
    /// `max over CPUs of d(X)·(T_r + T_w)`.
    pub penalty: u64,
    /// `max over CPUs of d(X)`.
    pub max_dfs: u32,
    /// Most tasks on one CPU.
    pub max_tasks: u32,
    /// Per CPU: (DF, tasks of it), in DF order.
    pub cpus: Vec<Vec<(DfId, u32)>>,
}

/// Why a partition problem was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PartitionError {
    /// No CPUs.
    #[error("at least one CPU is needed")]
    NoCpus,
    /// The Engine refused its configuration.
    #[error("engine configuration: {0}")]
    Config(dfsched_core::ConfigError),
    /// Too many tasks for the exact search.
    #[error("{tasks} tasks: the exact search takes at most {max}")]
    TooLarge {
        /// Tasks given.
        tasks: usize,
        /// The limit.
        max: usize,
    },
}

/// `T_r + T_w` and the CPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// CPUs (`m`).
    pub cpus: u32,
    /// Price of one DF change (`T_r + T_w`).
    pub switch_cost: u64,
}

fn capacity(n: usize, m: u32) -> u32 {
    (n as u32).div_ceil(m)
}

/// Task counts per DF, in DF order.
fn counts(dfs: &[DfId]) -> Vec<(DfId, u32)> {
    let mut c: BTreeMap<DfId, u32> = BTreeMap::new();
    for d in dfs {
        *c.entry(*d).or_default() += 1;
    }
    c.into_iter().collect()
}

fn solution(p: Problem, cpus: Vec<BTreeMap<DfId, u32>>) -> Solution {
    let max_dfs = cpus.iter().map(|c| c.len() as u32).max().unwrap_or(0);
    Solution {
        penalty: u64::from(max_dfs) * p.switch_cost,
        max_dfs,
        max_tasks: cpus.iter().map(|c| c.values().sum()).max().unwrap_or(0),
        cpus: cpus.into_iter().map(|c| c.into_iter().collect()).collect(),
    }
}

/// The exact minimum for tasks using `dfs` (one entry per task).
pub fn exact(p: Problem, dfs: &[DfId]) -> Result<Solution, PartitionError> {
    if p.cpus == 0 {
        return Err(PartitionError::NoCpus);
    }
    if dfs.len() > EXACT_MAX_TASKS {
        return Err(PartitionError::TooLarge {
            tasks: dfs.len(),
            max: EXACT_MAX_TASKS,
        });
    }
    let mut tasks: Vec<DfId> = dfs.to_vec();
    tasks.sort();
    let m = p.cpus as usize;
    let mut s = Search {
        tasks,
        k: capacity(dfs.len(), p.cpus),
        load: vec![0; m],
        dfs: vec![BTreeMap::new(); m],
        best: u32::MAX,
        best_at: Vec::new(),
    };
    s.go(0, 0, 0, 0);
    Ok(solution(p, s.best_at))
}

/// The branch-and-bound state of [`exact`].
struct Search {
    /// Tasks' DFs, sorted, so that one DF's tasks are adjacent.
    tasks: Vec<DfId>,
    /// Capacity of a CPU.
    k: u32,
    load: Vec<u32>,
    dfs: Vec<BTreeMap<DfId, u32>>,
    best: u32,
    best_at: Vec<BTreeMap<DfId, u32>>,
}

impl Search {
    /// Assigns task `i`; `used` CPUs hold tasks; `min_cpu` is the lowest
    /// CPU the task may take (same DF as the previous task); `cur` the
    /// current max distinct DFs.
    fn go(&mut self, i: usize, used: usize, min_cpu: usize, cur: u32) {
        if cur >= self.best {
            return;
        }
        if i == self.tasks.len() {
            self.best = cur;
            self.best_at = self.dfs.clone();
            return;
        }
        let df = self.tasks[i];
        let m = self.load.len();
        let last = (used + 1).min(m);
        for c in min_cpu..last {
            if self.load[c] >= self.k {
                continue;
            }
            self.load[c] += 1;
            *self.dfs[c].entry(df).or_default() += 1;
            let d = self.dfs[c].len() as u32;
            let next_min = match self.tasks.get(i + 1) {
                Some(n) if *n == df => c,
                _ => 0,
            };
            self.go(i + 1, used.max(c + 1), next_min, cur.max(d));
            self.load[c] -= 1;
            let e = self.dfs[c].get_mut(&df).expect("just added");
            *e -= 1;
            if *e == 0 {
                self.dfs[c].remove(&df);
            }
        }
    }
}

/// Greedy placement plus local search (see the module doc).
pub fn heuristic(p: Problem, dfs: &[DfId]) -> Result<Solution, PartitionError> {
    if p.cpus == 0 {
        return Err(PartitionError::NoCpus);
    }
    let m = p.cpus as usize;
    let k = capacity(dfs.len(), p.cpus);
    let mut by_count = counts(dfs);
    by_count.sort_by_key(|&(d, n)| (std::cmp::Reverse(n), d));
    let mut cpus: Vec<BTreeMap<DfId, u32>> = vec![BTreeMap::new(); m];
    let load = |c: &BTreeMap<DfId, u32>| c.values().sum::<u32>();
    for (df, mut n) in by_count {
        let whole = (0..m)
            .filter(|&c| load(&cpus[c]) + n <= k)
            .min_by_key(|&c| (cpus[c].len(), std::cmp::Reverse(k - load(&cpus[c])), c));
        if let Some(c) = whole {
            cpus[c].insert(df, n);
            continue;
        }
        while n > 0 {
            let c = (0..m)
                .filter(|&c| load(&cpus[c]) < k)
                .min_by_key(|&c| (std::cmp::Reverse(k - load(&cpus[c])), cpus[c].len(), c))
                .expect("k·m ≥ n leaves room");
            let take = n.min(k - load(&cpus[c]));
            *cpus[c].entry(df).or_default() += take;
            n -= take;
        }
    }
    // Local search: move a whole piece from a CPU at the maximum to one
    // where it lowers nothing else to the maximum.
    for _ in 0..(4 * m + 16) {
        let max = cpus.iter().map(|c| c.len()).max().unwrap_or(0);
        let mut moved = false;
        'outer: for from in 0..m {
            if cpus[from].len() != max {
                continue;
            }
            let pieces: Vec<(DfId, u32)> = cpus[from].iter().map(|(d, n)| (*d, *n)).collect();
            for (df, n) in pieces {
                for to in 0..m {
                    if to == from || load(&cpus[to]) + n > k {
                        continue;
                    }
                    let after = cpus[to].len() + usize::from(!cpus[to].contains_key(&df));
                    if after < max {
                        cpus[from].remove(&df);
                        *cpus[to].entry(df).or_default() += n;
                        moved = true;
                        break 'outer;
                    }
                }
            }
        }
        if !moved {
            break;
        }
    }
    Ok(solution(p, cpus))
}

/// What the Engine's online placement (with `config`) gives for the same
/// tasks, arriving in the order given, on `m` CPUs with private caches.
/// [`Config::default`] is dfsched's setting (multi-CPU homes under light
/// load); `heavy_load_milli: 1000` is the paper's (a group on one CPU).
pub fn online(p: Problem, dfs: &[DfId], config: Config) -> Result<Solution, PartitionError> {
    if p.cpus == 0 {
        return Err(PartitionError::NoCpus);
    }
    let all = dfsched_core::CpuSet::first_n(p.cpus);
    let topo = Topology::new(&all, Vec::new()).expect("m CPUs with private caches");
    let mut e = Engine::new(topo, config).map_err(PartitionError::Config)?;
    let mut out = Vec::new();
    for (i, df) in dfs.iter().enumerate() {
        let task = TaskId(i as u64 + 1);
        let new = Event::TaskNew {
            task,
            app: AppId(0),
            allowed: all.clone(),
            cpu: None,
        };
        e.handle(new, &mut out).expect("a new task");
        let hint = Event::Hint {
            task,
            app: AppId(0),
            cur: None,
            next: Some(*df),
        };
        e.handle(hint, &mut out).expect("a first hint");
    }
    let m = p.cpus as usize;
    let mut cpus: Vec<BTreeMap<DfId, u32>> = vec![BTreeMap::new(); m];
    let mut load = vec![0u32; m];
    for (i, df) in dfs.iter().enumerate() {
        let target = e.target(TaskId(i as u64 + 1)).expect("known task");
        let c = target
            .iter()
            .map(|CpuId(c)| c as usize)
            .min_by_key(|&c| (load[c], c))
            .expect("targets are never empty");
        load[c] += 1;
        *cpus[c].entry(*df).or_default() += 1;
    }
    Ok(solution(p, cpus))
}

/// `n` tasks dealt over `d` DFs at random (seeded), for experiments.
pub fn random_tasks(n: usize, d: u64, seed: u64) -> Vec<DfId> {
    let mut rng = crate::rng::SimRng::new(seed);
    (0..n).map(|_| DfId(rng.below(d.max(1)) + 1)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brute_force(p: Problem, dfs: &[DfId]) -> u64 {
        // Every assignment of tasks to CPUs within capacity; every
        // permutation of every CPU's tasks for F*; g from φ included.
        let n = dfs.len();
        let m = p.cpus as usize;
        let k = capacity(n, p.cpus) as usize;
        let mut best = u64::MAX;
        let mut a = vec![0usize; n];
        loop {
            let mut ok = true;
            let mut worst = 0;
            for c in 0..m {
                let x: Vec<DfId> = (0..n).filter(|&i| a[i] == c).map(|i| dfs[i]).collect();
                if x.len() > k {
                    ok = false;
                    break;
                }
                worst = worst.max(min_over_permutations(p, &x));
            }
            if ok {
                best = best.min(worst);
            }
            // Next assignment (odometer).
            let mut i = 0;
            while i < n {
                a[i] += 1;
                if a[i] < m {
                    break;
                }
                a[i] = 0;
                i += 1;
            }
            if i == n {
                return best;
            }
        }
    }

    fn min_over_permutations(p: Problem, x: &[DfId]) -> u64 {
        fn rec(p: Problem, left: &mut Vec<DfId>, prev: Option<DfId>, cost: u64, best: &mut u64) {
            if left.is_empty() {
                *best = (*best).min(cost);
                return;
            }
            for i in 0..left.len() {
                let v = left.remove(i);
                let g = if prev == Some(v) { 0 } else { p.switch_cost };
                rec(p, left, Some(v), cost + g, best);
                left.insert(i, v);
            }
        }
        let mut best = u64::MAX;
        rec(p, &mut x.to_vec(), None, 0, &mut best);
        best
    }

    #[test]
    fn exact_equals_brute_force_on_small_random_cases() {
        for seed in 0..40 {
            let n = 3 + (seed % 5) as usize; // 3..=7 tasks
            let m = 1 + (seed % 3) as u32; // 1..=3 CPUs
            let d = 1 + seed % 4;
            let dfs = random_tasks(n, d, seed);
            let p = Problem {
                cpus: m,
                switch_cost: 8,
            };
            let e = exact(p, &dfs).unwrap();
            assert_eq!(e.penalty, brute_force(p, &dfs), "seed {seed}: {dfs:?}");
            assert!(e.max_tasks <= capacity(n, m));
        }
    }

    #[test]
    fn the_heuristic_is_never_better_than_exact_and_respects_capacity() {
        for seed in 0..60 {
            let n = 4 + (seed % 13) as usize;
            let m = 1 + (seed % 4) as u32;
            let dfs = random_tasks(n, 1 + seed % 6, seed);
            let p = Problem {
                cpus: m,
                switch_cost: 8,
            };
            let e = exact(p, &dfs).unwrap();
            let h = heuristic(p, &dfs).unwrap();
            assert!(h.penalty >= e.penalty, "seed {seed}");
            assert!(h.max_tasks <= capacity(n, m), "seed {seed}");
            let placed: u32 = h.cpus.iter().flatten().map(|(_, n)| n).sum();
            assert_eq!(placed as usize, n);
        }
    }

    #[test]
    fn the_paper_example_needs_one_df_per_cpu() {
        // v1..v4 of §2: DF1, DF2, DF1, DF2 on two CPUs: one DF each.
        let dfs = [DfId(2), DfId(1), DfId(1), DfId(2)];
        let p = Problem {
            cpus: 2,
            switch_cost: 8,
        };
        assert_eq!(exact(p, &dfs).unwrap().penalty, 8);
        assert_eq!(heuristic(p, &dfs).unwrap().penalty, 8);
        let paper = Config {
            heavy_load_milli: 1000,
            ..Config::default()
        };
        let o = online(p, &dfs, paper).unwrap();
        assert_eq!(o.max_dfs, 1, "{o:?}");
        // dfsched's default lets DF1 span both CPUs under light load.
        let d = online(p, &dfs, Config::default()).unwrap();
        assert!(d.penalty >= 8);
    }

    #[test]
    fn refusals_name_their_cause() {
        let p = Problem {
            cpus: 0,
            switch_cost: 1,
        };
        assert_eq!(exact(p, &[DfId(1)]), Err(PartitionError::NoCpus));
        let big = random_tasks(EXACT_MAX_TASKS + 1, 3, 1);
        let p = Problem {
            cpus: 2,
            switch_cost: 1,
        };
        assert!(matches!(
            exact(p, &big),
            Err(PartitionError::TooLarge { .. })
        ));
        assert!(heuristic(p, &big).is_ok());
    }
}
