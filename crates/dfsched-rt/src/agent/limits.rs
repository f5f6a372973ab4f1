//! What the agent accepts, in numbers: its connection caps' and idle
//! timeout's defaults, and the range check on every load a client reports
//! ([`check_load`]).
//!
//! Why a bound at all: a report's numbers are summed over every registered
//! process and shown by `--status`; unchecked, `u64::MAX` and 2 summed to 1,
//! 2^63 became 833 of external load, and a CPU listed many times made a
//! status too long to read. Why this bound: it is the most load one process
//! can have ([`max_load_milli`]), so an honest runtime is never refused,
//! whatever its size, and the agent's sums (at most its connection cap ×
//! the bound per CPU) stay far below `u64::MAX`.
//!
//! Invariant: a load [`check_load`] accepts names each CPU of the machine
//! at most once, in CPU order, each value and their sum at most the bound.

use dfsched_core::{CpuId, CpuSet};
use std::path::Path;
use std::time::Duration;

/// The default [`super::AgentConfig::max_connections`]: a connection costs the
/// agent a thread and three descriptors, so 256 stay far below the usual
/// limits (1024 descriptors, thousands of threads) while serving ten times
/// more processes under dfsched than a machine has reason to run.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 256;
/// The default [`super::AgentConfig::max_connections_per_uid`]: a runtime holds
/// one connection (`--status` and `--stop` one more for a moment), so one
/// uid's 64 are 60 programs under dfsched at once; a uid that holds them
/// all leaves the other uids of a shared (root) agent 192.
pub const DEFAULT_MAX_CONNECTIONS_PER_UID: u32 = 64;
/// The default [`super::AgentConfig::idle_timeout`]: a runtime exchanges once per
/// balancer pass (100 ms by default), so a minute without a request is a
/// connection nobody uses, or a peer that trickles its bytes to hold a
/// thread. A runtime drops a connection it has not used for half this
/// long and connects afresh (`link.rs`).
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// The kernel's upper limit on `pid_max` on 64-bit (`PID_MAX_LIMIT`, 2^22):
/// the fallback when `/proc/sys/kernel/pid_max` cannot be read.
const PID_MAX_LIMIT: u64 = 1 << 22;

/// The most load one process can put on the machine, in thousandths: every
/// thread is a pid, so a process has at most `pid_max` threads, and one
/// thread counts 1000 in all (the core's load formula spreads its 1000
/// over the CPUs it may use). So no CPU's load from one report, nor its
/// sum over CPUs, can honestly exceed 1000 × `pid_max`
/// (`/proc/sys/kernel/pid_max` under `proc_root`; `PID_MAX_LIMIT` (2^22), the
/// kernel's ceiling, if unreadable). A per-process bound from the
/// reporter's current thread count would be tighter but races with its
/// threads' exits, and a report refused for that would cost an honest
/// runtime its view.
pub fn max_load_milli(proc_root: &Path) -> u64 {
    let pid_max = std::fs::read_to_string(proc_root.join("sys/kernel/pid_max"))
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(PID_MAX_LIMIT)
        .min(PID_MAX_LIMIT);
    pid_max * 1000
}

/// Checks a report's load ([`super::Report::load_milli`]) against the machine's
/// `cpus` and the bound `max_milli` ([`super::AgentConfig::max_load_milli`]): each
/// CPU one of `cpus` and named once, each load and their sum at most
/// `max_milli`. The load in CPU order, or why it is refused.
pub(crate) fn check_load(
    load: &[(CpuId, u64)],
    cpus: &CpuSet,
    max_milli: u64,
) -> Result<Vec<(CpuId, u64)>, String> {
    let mut sorted = load.to_vec();
    sorted.sort_unstable();
    let mut sum = 0u64;
    for (i, &(cpu, milli)) in sorted.iter().enumerate() {
        if !cpus.contains(cpu) {
            return Err(format!("CPU {cpu} is not a CPU of this machine ({cpus})"));
        }
        if i > 0 && sorted[i - 1].0 == cpu {
            return Err(format!("CPU {cpu} is listed more than once"));
        }
        if milli > max_milli {
            return Err(format!(
                "a load of {milli} on CPU {cpu} is more than one process can have \
                 ({max_milli}: 1000 per possible thread)"
            ));
        }
        sum = sum
            .checked_add(milli)
            .filter(|&s| s <= max_milli)
            .ok_or_else(|| {
                format!(
                    "the loads add up to more than one process can have ({max_milli}: \
                     1000 per possible thread)"
                )
            })?;
    }
    Ok(sorted)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: u64 = 4_194_304_000;

    fn cpus() -> CpuSet {
        "0-1".parse().unwrap()
    }

    fn refused(load: &[(CpuId, u64)]) -> String {
        check_load(load, &cpus(), MAX).unwrap_err()
    }

    #[test]
    fn a_load_that_would_wrap_is_refused_not_summed() {
        // u64::MAX and 2 on two CPUs once summed to 1 (wrapping).
        let why = refused(&[(CpuId(0), u64::MAX), (CpuId(1), 2)]);
        assert!(why.contains("more than one process can have"), "{why}");
        // 2^63 once became 833 of external load.
        assert!(refused(&[(CpuId(1), 1 << 63)]).contains("more than one process"));
        // Each within the bound, their sum not.
        let why = refused(&[(CpuId(0), MAX), (CpuId(1), 1)]);
        assert!(why.contains("add up"), "{why}");
    }

    #[test]
    fn a_cpu_named_twice_or_not_of_this_machine_is_refused() {
        let why = refused(&[(CpuId(1), 1), (CpuId(0), 5), (CpuId(1), 1)]);
        assert!(why.contains("more than once"), "{why}");
        assert!(refused(&[(CpuId(2), 1)]).contains("not a CPU of this machine"));
    }

    #[test]
    fn an_honest_load_is_kept_in_cpu_order() {
        assert_eq!(
            check_load(&[(CpuId(1), 500), (CpuId(0), MAX - 500)], &cpus(), MAX),
            Ok(vec![(CpuId(0), MAX - 500), (CpuId(1), 500)])
        );
        assert_eq!(check_load(&[], &cpus(), MAX), Ok(vec![]));
    }

    #[test]
    fn the_load_bound_is_1000_per_possible_pid() {
        let tmp = tempfile::Builder::new()
            .prefix("dfsched-pidmax-")
            .tempdir()
            .unwrap();
        let root = tmp.path();
        std::fs::create_dir_all(root.join("sys/kernel")).unwrap();
        std::fs::write(root.join("sys/kernel/pid_max"), "32768\n").unwrap();
        assert_eq!(max_load_milli(root), 32_768_000);
        // Unreadable or absurd: the kernel's ceiling.
        std::fs::write(root.join("sys/kernel/pid_max"), "99999999999\n").unwrap();
        assert_eq!(max_load_milli(root), PID_MAX_LIMIT * 1000);
        std::fs::remove_file(root.join("sys/kernel/pid_max")).unwrap();
        assert_eq!(max_load_milli(root), PID_MAX_LIMIT * 1000);
        drop(tmp);
        // Even the ceiling leaves the agent's sums far from overflowing:
        // every CPU of every connection at the bound.
        let worst = u128::from(PID_MAX_LIMIT * 1000)
            * u128::from(DEFAULT_MAX_CONNECTIONS)
            * u128::from(dfsched_core::cpuset::MAX_CPUS);
        assert!(worst < u128::from(u64::MAX), "{worst}");
    }
}
