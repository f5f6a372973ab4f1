//! A comparison: one workload under several policies on one machine, with
//! the best static pairing found by trying every grouping.
//!
//! The best static pairing is the exhaustive oracle of the paper's Fig. 6
//! against Fig. 7: every partition of the threads into groups of
//! `contexts` (padded with idle slots when they do not divide, so some
//! groups are smaller) is run as a gang schedule, and the one with the
//! highest relative throughput is reported. There are
//! `n! / ((k!)^(n/k) · (n/k)!)` of them (3 for 4 threads in pairs, 105 for
//! 8); more than 2000 is refused.

use super::config::{SmtConfig, SmtConfigError};
use super::run::{run, AloneTable, RunReport, SmtPolicy};
use super::workload::Workload;
use serde::Serialize;
use std::collections::BTreeMap;

/// A policy a comparison can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyChoice {
    /// [`SmtPolicy::Kihm`].
    Kihm,
    /// [`SmtPolicy::RoundRobin`].
    RoundRobin,
    /// [`SmtPolicy::Linux`].
    Linux,
    /// [`SmtPolicy::KihmLinux`].
    KihmLinux,
    /// [`SmtPolicy::Random`].
    Random,
    /// [`SmtPolicy::Intensity`].
    Intensity,
    /// [`SmtPolicy::Shuffled`].
    Shuffled,
    /// [`SmtPolicy::Lookahead`].
    Lookahead,
    /// Every static grouping; the best one.
    BestStatic,
}

impl PolicyChoice {
    /// Every choice, in report order.
    pub const ALL: [PolicyChoice; 9] = [
        PolicyChoice::Kihm,
        PolicyChoice::RoundRobin,
        PolicyChoice::Linux,
        PolicyChoice::KihmLinux,
        PolicyChoice::Random,
        PolicyChoice::Intensity,
        PolicyChoice::Shuffled,
        PolicyChoice::BestStatic,
        PolicyChoice::Lookahead,
    ];

    /// Its name in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            PolicyChoice::Kihm => "kihm",
            PolicyChoice::RoundRobin => "round-robin",
            PolicyChoice::Linux => "linux",
            PolicyChoice::KihmLinux => "kihm-linux",
            PolicyChoice::Random => "random",
            PolicyChoice::Intensity => "intensity",
            PolicyChoice::Shuffled => "shuffled",
            PolicyChoice::Lookahead => "lookahead",
            PolicyChoice::BestStatic => "best-static",
        }
    }
}

impl std::str::FromStr for PolicyChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        PolicyChoice::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .or(match s {
                "rr" => Some(PolicyChoice::RoundRobin),
                _ => None,
            })
            .ok_or_else(|| {
                let names: Vec<&str> = PolicyChoice::ALL.iter().map(|p| p.name()).collect();
                format!("unknown policy {s:?} (one of {})", names.join(", "))
            })
    }
}

/// The best static grouping's run and what was tried.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BestStatic {
    /// The groups (thread indices).
    pub groups: Vec<Vec<usize>>,
    /// Groupings tried.
    pub tried: u64,
}

/// One workload under several policies.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    /// The workload's name.
    pub workload: String,
    /// Its threads' names.
    pub threads: Vec<String>,
    /// The machine and model.
    pub config: SmtConfig,
    /// The policies in the order asked.
    pub order: Vec<String>,
    /// Each policy's run, by name.
    pub policies: BTreeMap<String, RunReport>,
    /// The best static grouping, if it was asked for.
    pub best_static: Option<BestStatic>,
}

/// Every partition of `0..n` into groups of `k`; when `k` does not divide
/// `n`, the partitions of `n` rounded up with idle padding, the padding
/// dropped (so some groups are smaller).
pub fn groupings(n: usize, k: usize) -> Vec<Vec<Vec<usize>>> {
    let k = k.max(1);
    let padded = n.div_ceil(k) * k;
    let mut seen = std::collections::BTreeSet::new();
    full_groupings(padded, k)
        .into_iter()
        .map(|g| {
            let mut g: Vec<Vec<usize>> = g
                .into_iter()
                .map(|gr| gr.into_iter().filter(|&t| t < n).collect::<Vec<_>>())
                .filter(|gr| !gr.is_empty())
                .collect();
            g.sort();
            g
        })
        .filter(|g| seen.insert(g.clone()))
        .collect()
}

fn full_groupings(n: usize, k: usize) -> Vec<Vec<Vec<usize>>> {
    fn rec(rest: &[usize], k: usize, acc: &mut Vec<Vec<usize>>, out: &mut Vec<Vec<Vec<usize>>>) {
        let Some((&first, others)) = rest.split_first() else {
            out.push(acc.clone());
            return;
        };
        let take = (k - 1).min(others.len());
        // Every choice of `take` companions for `first`, in order.
        let mut idx: Vec<usize> = (0..take).collect();
        loop {
            let mut group = vec![first];
            group.extend(idx.iter().map(|&i| others[i]));
            let left: Vec<usize> = others
                .iter()
                .enumerate()
                .filter(|(i, _)| !idx.contains(i))
                .map(|(_, &t)| t)
                .collect();
            acc.push(group);
            rec(&left, k, acc, out);
            acc.pop();
            // Next combination.
            let mut i = take;
            loop {
                if i == 0 {
                    return;
                }
                i -= 1;
                if idx[i] < others.len() - take + i {
                    idx[i] += 1;
                    for j in i + 1..take {
                        idx[j] = idx[j - 1] + 1;
                    }
                    break;
                }
            }
        }
    }
    let mut out = Vec::new();
    let all: Vec<usize> = (0..n).collect();
    rec(&all, k, &mut Vec::new(), &mut out);
    out
}

/// How many groupings [`groupings`] would list, without listing them
/// (exact when `k` divides `n`, else an upper bound).
fn count_groupings(n: u64, k: u64) -> u64 {
    let n = n.div_ceil(k) * k;
    count_full(n, k)
}

fn count_full(n: u64, k: u64) -> u64 {
    if n <= k {
        return 1;
    }
    // Choose k−1 companions of the first, then the rest.
    let mut c: u64 = 1;
    for i in 0..k - 1 {
        c = c.saturating_mul(n - 1 - i) / (i + 1);
    }
    c.saturating_mul(count_full(n - k, k))
}

/// Runs `workload` under each of `policies`. `progress` is told each
/// run's name as it starts.
pub fn compare(
    cfg: &SmtConfig,
    workload: &Workload,
    policies: &[PolicyChoice],
    mut progress: impl FnMut(&str),
) -> Result<Comparison, SmtConfigError> {
    cfg.validate()?;
    let n = workload.threads.len();
    let k = cfg.contexts as usize;
    let mut alone = AloneTable::new(cfg, workload);
    let mut out = Comparison {
        workload: workload.name.clone(),
        threads: workload.threads.iter().map(|t| t.name.clone()).collect(),
        config: cfg.clone(),
        order: Vec::new(),
        policies: BTreeMap::new(),
        best_static: None,
    };
    for &p in policies {
        progress(p.name());
        let report = match p {
            PolicyChoice::BestStatic => {
                let count = count_groupings(n as u64, k as u64);
                if count > 2000 {
                    return Err(SmtConfigError::TooManyPartitions(count));
                }
                let mut best: Option<(RunReport, Vec<Vec<usize>>)> = None;
                for g in groupings(n, k) {
                    let r = run(cfg, workload, &SmtPolicy::Static(g.clone()), &mut alone)?;
                    let better = match &best {
                        None => true,
                        Some((b, _)) => b.relative_throughput < r.relative_throughput,
                    };
                    if better {
                        best = Some((r, g));
                    }
                }
                let (mut r, g) = best.ok_or(SmtConfigError::NoThreads)?;
                r.policy = p.name().into();
                out.best_static = Some(BestStatic {
                    groups: g,
                    tried: count,
                });
                r
            }
            other => {
                let policy = match other {
                    PolicyChoice::Kihm => SmtPolicy::Kihm,
                    PolicyChoice::RoundRobin => SmtPolicy::RoundRobin,
                    PolicyChoice::Linux => SmtPolicy::Linux,
                    PolicyChoice::KihmLinux => SmtPolicy::KihmLinux,
                    PolicyChoice::Random => SmtPolicy::Random,
                    PolicyChoice::Intensity => SmtPolicy::Intensity,
                    PolicyChoice::Shuffled => SmtPolicy::Shuffled,
                    PolicyChoice::Lookahead => SmtPolicy::Lookahead,
                    PolicyChoice::BestStatic => unreachable!("handled above"),
                };
                run(cfg, workload, &policy, &mut alone)?
            }
        };
        out.order.push(p.name().into());
        out.policies.insert(p.name().into(), report);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groupings_are_every_partition_once() {
        assert_eq!(groupings(4, 2).len(), 3);
        assert_eq!(groupings(6, 2).len(), 15);
        assert_eq!(groupings(8, 2).len(), 105);
        assert_eq!(groupings(6, 3).len(), 10);
        assert_eq!(groupings(5, 2).len(), 15, "the last group a single");
        assert_eq!(groupings(3, 4), vec![vec![vec![0, 1, 2]]]);
        for (n, k) in [(4, 2), (6, 2), (8, 2), (6, 3), (5, 2), (3, 4), (4, 3)] {
            assert!(count_groupings(n as u64, k as u64) >= groupings(n, k).len() as u64);
            if n.checked_rem(k) == Some(0) {
                assert_eq!(
                    count_groupings(n as u64, k as u64),
                    groupings(n, k).len() as u64
                );
            }
            for g in groupings(n, k) {
                let mut all: Vec<usize> = g.concat();
                all.sort_unstable();
                assert_eq!(all, (0..n).collect::<Vec<_>>());
            }
        }
    }
}
