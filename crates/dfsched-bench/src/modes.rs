//! Placement per mode: what each thread does about where it runs.
//!
//! | mode      | at thread start                  | at a DF switch             |
//! |-----------|----------------------------------|----------------------------|
//! | `vanilla` | nothing                          | nothing                    |
//! | `dfsched` | `Runtime::enter(df)`             | `Runtime::enter(new df)`   |
//! | `dfsched-record` | as `dfsched`, the runtime recording | as `dfsched` |
//! | `oracle`  | pin to its DF's CPU              | re-pin to the new DF's CPU |
//! | `split`   | pin to its round-robin CPU       | nothing                    |
//!
//! The two static plans are pure functions of the DF assignment and the
//! allowed CPUs, so they are unit-tested without threads:
//! - [`oracle_assignment`]: whole DFs onto CPUs, largest DF (most threads)
//!   first, each onto the CPU with the fewest threads so far (ties: the
//!   lower DF, the lower CPU). This is LPT scheduling: the busiest CPU ends
//!   at most one DF's threads above the least busy one.
//! - [`split_assignment`]: the threads grouped by DF, dealt round-robin over
//!   the CPUs with one counter running across DFs, so each DF reaches
//!   `min(its threads, CPUs)` CPUs and CPU loads differ by at most one.
//!
//! Pinned modes read the affinity back after every pin and count any
//! difference, so a silently ignored `sched_setaffinity` shows in the report.

use crate::os::{self, OsError};
use crate::params::{Mode, Params};
use dfsched_core::{CpuId, CpuSet};

/// The CPU of each DF under the oracle plan, by DF index. `threads_per_df`
/// gives each DF's thread count; `cpus` must not be empty.
pub fn oracle_assignment(threads_per_df: &[usize], cpus: &[CpuId]) -> Vec<CpuId> {
    assert!(!cpus.is_empty(), "the oracle needs at least one CPU");
    let mut order: Vec<usize> = (0..threads_per_df.len()).collect();
    // Stable sort: equal DFs keep index order.
    order.sort_by(|&a, &b| threads_per_df[b].cmp(&threads_per_df[a]));
    let mut load = vec![0usize; cpus.len()];
    let mut home = vec![cpus[0]; threads_per_df.len()];
    for df in order {
        let (best, _) = load
            .iter()
            .enumerate()
            .min_by_key(|&(i, &l)| (l, i))
            .expect("cpus is not empty");
        load[best] += threads_per_df[df];
        home[df] = cpus[best];
    }
    home
}

/// The CPU of each thread under the split plan, by thread index, for
/// threads whose DFs are `thread_df`; `cpus` must not be empty.
pub fn split_assignment(thread_df: &[usize], dfs: usize, cpus: &[CpuId]) -> Vec<CpuId> {
    assert!(!cpus.is_empty(), "split needs at least one CPU");
    let mut out = vec![cpus[0]; thread_df.len()];
    let mut next = 0usize;
    for df in 0..dfs {
        for (t, _) in thread_df.iter().enumerate().filter(|&(_, &d)| d == df) {
            out[t] = cpus[next % cpus.len()];
            next += 1;
        }
    }
    out
}

/// Why a thread could not be placed.
#[derive(Debug, thiserror::Error)]
pub enum PlaceError {
    /// An affinity call failed.
    #[error(transparent)]
    Os(#[from] OsError),
    /// The runtime refused a hint.
    #[error("dfsched refused the hint: {0}")]
    Runtime(#[source] dfsched::Error),
    /// The co-thread runtime could not attach the thread.
    #[error("dfsched could not attach the thread: {0}")]
    CoThread(#[source] crate::cothread::CoThreadError),
}

/// One run's placement, shared by its threads.
pub(crate) enum Placer {
    /// `vanilla`.
    Vanilla,
    /// `oracle`: the CPU of each DF.
    Oracle { df_cpu: Vec<CpuId> },
    /// `split`: the CPU of each thread.
    Split { thread_cpu: Vec<CpuId> },
    /// `dfsched`: the run's runtime.
    Dfsched { rt: dfsched::Runtime },
}

/// What a thread saw when it placed itself.
#[derive(Clone, Debug, Default)]
pub(crate) struct Placed {
    /// The CPUs a pinned mode pinned it to; `None` for unpinned modes.
    pub expected: Option<CpuSet>,
    /// Pins whose read-back differed from what was asked.
    pub mismatches: u64,
}

impl Placer {
    /// The plan for `mode`; `rt` is the run's runtime for `dfsched`.
    pub fn new(
        mode: Mode,
        params: &Params,
        allowed: &CpuSet,
        rt: Option<dfsched::Runtime>,
    ) -> Placer {
        let cpus: Vec<CpuId> = allowed.iter().collect();
        match mode {
            Mode::Vanilla => Placer::Vanilla,
            Mode::Oracle => Placer::Oracle {
                df_cpu: oracle_assignment(&params.threads_per_df(), &cpus),
            },
            Mode::Split => {
                let thread_df: Vec<usize> =
                    (0..params.threads).map(|t| params.initial_df(t)).collect();
                Placer::Split {
                    thread_cpu: split_assignment(&thread_df, params.dfs, &cpus),
                }
            }
            Mode::Dfsched | Mode::DfschedRecord => Placer::Dfsched {
                rt: rt.expect("the dfsched mode runs with a runtime"),
            },
        }
    }

    /// Called by thread `thread` (starting on DF `df`) before the start gate.
    pub fn start(&self, thread: usize, df: usize) -> Result<Placed, PlaceError> {
        match self {
            Placer::Vanilla => Ok(Placed::default()),
            Placer::Oracle { df_cpu } => pin(df_cpu[df]),
            Placer::Split { thread_cpu } => pin(thread_cpu[thread]),
            Placer::Dfsched { rt } => {
                rt.enter(df_id(df)).map_err(PlaceError::Runtime)?;
                Ok(Placed::default())
            }
        }
    }

    /// Called by a thread moving to DF `to`; records its new pin (if any)
    /// and any mismatch in `placed`.
    pub fn switch(&self, to: usize, placed: &mut Placed) -> Result<(), PlaceError> {
        match self {
            Placer::Vanilla | Placer::Split { .. } => Ok(()),
            Placer::Oracle { df_cpu } => {
                let p = pin(df_cpu[to])?;
                placed.expected = p.expected;
                placed.mismatches += p.mismatches;
                Ok(())
            }
            Placer::Dfsched { rt } => rt.enter(df_id(to)).map_err(PlaceError::Runtime),
        }
    }
}

/// DF index → the runtime's DF id (0 means "no DF" there).
fn df_id(df: usize) -> u64 {
    df as u64 + 1
}

/// Pins the calling thread to `cpu` and reads the affinity back.
pub(crate) fn pin(cpu: CpuId) -> Result<Placed, PlaceError> {
    let want = CpuSet::single(cpu);
    os::set_affinity(&want)?;
    let got = os::get_affinity()?;
    Ok(Placed {
        mismatches: u64::from(got != want),
        expected: Some(want),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpus(n: u32) -> Vec<CpuId> {
        (0..n).map(CpuId).collect()
    }

    fn loads(home: &[CpuId], threads_per_df: &[usize], cpus: &[CpuId]) -> Vec<usize> {
        cpus.iter()
            .map(|c| {
                home.iter()
                    .zip(threads_per_df)
                    .filter(|(h, _)| *h == c)
                    .map(|(_, n)| n)
                    .sum()
            })
            .collect()
    }

    #[test]
    fn oracle_balances_thread_counts() {
        // The headline case and the paper's 4-DF grid on 2 CPUs: even splits.
        assert_eq!(
            oracle_assignment(&[4, 4], &cpus(2)),
            vec![CpuId(0), CpuId(1)]
        );
        let home = oracle_assignment(&[32, 32, 32, 32], &cpus(2));
        assert_eq!(loads(&home, &[32; 4], &cpus(2)), vec![64, 64]);
        // Largest first: 5 goes alone, 3+2 share.
        let tpd = [2, 5, 3];
        let home = oracle_assignment(&tpd, &cpus(2));
        assert_eq!(home, vec![CpuId(1), CpuId(0), CpuId(1)]);
        assert_eq!(loads(&home, &tpd, &cpus(2)), vec![5, 5]);
    }

    #[test]
    fn oracle_keeps_imbalance_within_one_df() {
        let tpd = [7, 6, 5, 4, 3, 3, 2, 1, 1];
        for n in 1..=5 {
            let c = cpus(n);
            let l = loads(&oracle_assignment(&tpd, &c), &tpd, &c);
            let spread = l.iter().max().unwrap() - l.iter().min().unwrap();
            assert!(spread <= 7, "{n} CPUs: loads {l:?}");
            assert_eq!(l.iter().sum::<usize>(), tpd.iter().sum::<usize>());
        }
    }

    #[test]
    fn oracle_uses_only_the_given_cpus_and_spreads_dfs_first() {
        let allowed = vec![CpuId(3), CpuId(5), CpuId(9)];
        let home = oracle_assignment(&[2, 2, 2], &allowed);
        assert_eq!(home, allowed, "one DF per CPU when there are enough");
    }

    #[test]
    fn split_puts_every_df_on_every_cpu_when_threads_allow() {
        let p = Params {
            threads: 8,
            dfs: 2,
            ..Params::default()
        };
        let tdf: Vec<usize> = (0..8).map(|t| p.initial_df(t)).collect();
        for n in [1, 2, 4] {
            let c = cpus(n);
            let home = split_assignment(&tdf, 2, &c);
            for df in 0..2 {
                let on: CpuSet = (0..8).filter(|&t| tdf[t] == df).map(|t| home[t]).collect();
                assert_eq!(on.len(), n as usize, "DF {df} on {on} with {n} CPUs");
            }
            let per_cpu: Vec<usize> = c
                .iter()
                .map(|x| home.iter().filter(|h| *h == x).count())
                .collect();
            assert!(per_cpu.iter().max().unwrap() - per_cpu.iter().min().unwrap() <= 1);
        }
    }

    #[test]
    fn split_balances_cpus_when_dfs_have_odd_thread_counts() {
        // 6 threads, 2 DFs of 3: a per-DF counter would give 4/2.
        let tdf = [0, 1, 0, 1, 0, 1];
        let home = split_assignment(&tdf, 2, &cpus(2));
        let on0 = home.iter().filter(|&&c| c == CpuId(0)).count();
        assert_eq!(on0, 3);
        for df in 0..2 {
            let on: CpuSet = (0..6).filter(|&t| tdf[t] == df).map(|t| home[t]).collect();
            assert_eq!(on.len(), 2);
        }
    }

    #[test]
    fn dfs_map_to_nonzero_runtime_ids() {
        assert_eq!(df_id(0), 1, "0 means no DF in the runtime");
        assert_eq!(df_id(3), 4);
    }
}
