//! `/proc/stat`, the per-pass signal of the outside load (`signals.rs`):
//! each CPU's busy time and the machine's runnable-thread count, one file
//! of O(CPUs + IRQ lines) whatever the number of threads on the machine.
//!
//! ```text
//!   cpu  27623 0 8651 56374 904 0 66 19 0 0      ← the sum: ignored
//!   cpu0 13276 0 4106 29170 254 0 9 7 0 0        ← user nice system idle
//!   cpu1 14347 0 4544 27203 650 0 56 12 0 0        iowait irq softirq steal …
//!   intr 295445 0 0 …                            ← skipped
//!   procs_running 3                              ← runnable now, ours included
//! ```
//!
//! Busy = user + nice + system + irq + softirq, in clock ticks
//! (`sysconf(_SC_CLK_TCK)`, 100 a second on Linux). Idle and iowait are
//! not busy; steal (the hypervisor's) and guest (already inside user) are
//! left out. A CPU that is offline has no line. `procs_running` counts the
//! threads in state R on every CPU at the moment of the read, the reading
//! thread itself included.
//!
//! Not busy = idle + iowait + steal, kept apart: the kernel counts the busy
//! columns one timer tick at a time (`TICK_CPU_ACCOUNTING`, the default),
//! so a CPU whose ticks are late or lost has its busy time under-counted,
//! while on a tickless kernel (`NO_HZ`, every distribution's) idle and
//! iowait are clock deltas (`get_cpu_idle_time_us`) and exact, and steal is
//! the hypervisor's steal clock. Under QEMU's TCG a guest with `HZ=1000`
//! handled about one tick in twenty: its busy columns said 5 % on CPUs that
//! were fully busy (dfsched-vmbench's `scx-rehint-and-move`, Nov 26), and
//! the complement of the idle columns said 100 %. `signals::BusyTracker`
//! takes the larger of the two.
//!
//! Invariants: a parse either gives every online CPU's line and the
//! runnable count, or fails (`None`): a truncated or garbled file is never
//! half-read.

use super::LoadSampler;
use crate::error::Error;
use dfsched_core::CpuId;

/// What a pass reads from `/proc/stat`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuStat {
    /// Busy clock ticks since boot, per CPU, in the file's order (CPU
    /// order on Linux).
    pub busy_ticks: Vec<(CpuId, u64)>,
    /// Idle + iowait + steal clock ticks since boot, per CPU, the same
    /// CPUs in the same order (steal 0 on kernels that print no steal).
    pub idle_ticks: Vec<(CpuId, u64)>,
    /// Threads running or runnable on the whole machine at the read.
    pub procs_running: u32,
}

/// Parses the text of `/proc/stat`; `None` if a `cpuN` line is garbled or
/// has fewer than the 7 fields up to softirq, if there is no `cpuN` line or
/// no `procs_running` line, or if a CPU number is past
/// [`dfsched_core::cpuset::MAX_CPUS`].
pub fn parse_cpu_stat(text: &str) -> Option<CpuStat> {
    let mut out = CpuStat::default();
    let mut running = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("cpu") {
            let (cpu, fields) = rest.split_once(' ')?;
            if cpu.is_empty() {
                continue; // the machine's sum
            }
            let cpu: u32 = cpu.parse().ok()?;
            if cpu >= dfsched_core::cpuset::MAX_CPUS {
                return None;
            }
            let mut f = fields.split_ascii_whitespace().map(|v| v.parse::<u64>());
            let mut next = || f.next()?.ok();
            let (user, nice, system) = (next()?, next()?, next()?);
            let (idle, iowait) = (next()?, next()?);
            let (irq, softirq) = (next()?, next()?);
            let steal = next().unwrap_or(0);
            let busy = [nice, system, irq, softirq]
                .iter()
                .try_fold(user, |a, &b| a.checked_add(b))?;
            let not_busy = idle.checked_add(iowait)?.checked_add(steal)?;
            out.busy_ticks.push((CpuId(cpu), busy));
            out.idle_ticks.push((CpuId(cpu), not_busy));
        } else if let Some(n) = line.strip_prefix("procs_running ") {
            running = Some(n.trim().parse().ok()?);
        }
    }
    out.procs_running = running?;
    (!out.busy_ticks.is_empty()).then_some(out)
}

impl LoadSampler {
    /// Reads and parses `PROC/stat` (one file, kept open).
    pub fn cpu_stat(&mut self) -> Result<CpuStat, Error> {
        let parsed = match self.read_stat_file() {
            Some(text) => parse_cpu_stat(text).ok_or("unparsable"),
            None => Err("unreadable"),
        };
        parsed.map_err(|reason| Error::Io {
            path: self.proc_root.join("stat"),
            reason: reason.into(),
        })
    }

    /// The CPU thread `tid` of process `pid` last ran on (its `stat` field
    /// 39; one file); `None` if it cannot be read.
    pub fn thread_last_cpu(&mut self, pid: u32, tid: u64) -> Option<CpuId> {
        let path = self.proc_root.join(format!("{pid}/task/{tid}/stat"));
        self.read_stat(&path).map(|f| CpuId(f.processor))
    }

    /// Process `pid`'s CPU time, all its threads', in clock ticks (`PROC/PID/stat`
    /// fields 14 + 15); `None` if it cannot be read.
    pub fn process_cpu_ticks(&mut self, pid: u32) -> Option<u64> {
        let path = self.proc_root.join(pid.to_string()).join("stat");
        self.read_stat(&path).map(|f| f.cpu_ticks)
    }
}

/// Clock ticks per second of `/proc` times (`_SC_CLK_TCK`); 100 if it
/// cannot be read (the value of every Linux architecture).
pub fn clock_ticks_per_sec() -> u64 {
    // SAFETY: sysconf reads a constant of the C library; no memory is
    // passed.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(hz).ok().filter(|&h| h > 0).unwrap_or(100)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const STAT: &str = "cpu  27623 0 8651 56374 904 0 66 19 0 0
cpu0 13276 1 4106 29170 254 2 9 7 0 0
cpu1 14347 0 4544 27203 650 0 56 12 0 0
intr 295445 0 0 0 0 0 1 1 16
ctxt 552839
btime 1764072000
processes 18424
procs_running 3
procs_blocked 0
softirq 1 2 3
";

    #[test]
    fn the_kept_stat_file_is_read_afresh_through_one_descriptor() {
        use std::os::fd::AsRawFd as _;
        let mut s = LoadSampler::new("/proc");
        let busy = |s: &mut LoadSampler| -> u64 {
            s.cpu_stat()
                .unwrap()
                .busy_ticks
                .iter()
                .map(|&(_, t)| t)
                .sum()
        };
        let before = busy(&mut s);
        let fd = s.stat_file.as_ref().map(|f| f.as_raw_fd());
        assert!(fd.is_some(), "the file is kept open");
        // 80 ms of this thread's CPU: at least a clock tick more busy time.
        let spun = crate::sys::own_cpu_ns();
        while crate::sys::own_cpu_ns() < spun + 80_000_000 {
            std::hint::spin_loop();
        }
        let after = busy(&mut s);
        assert!(
            after > before,
            "busy ticks {before} -> {after}: a stale read"
        );
        assert_eq!(s.stat_file.as_ref().map(|f| f.as_raw_fd()), fd, "reopened");
        assert_eq!(s.files_opened(), 2, "each read counts");
    }

    #[test]
    fn a_stat_file_that_cannot_be_read_is_an_error_and_is_reopened_later() {
        let tmp = tempfile::Builder::new()
            .prefix("dfsched-kept-stat-")
            .tempdir()
            .unwrap();
        let dir = tmp.path();
        let mut s = LoadSampler::new(dir);
        assert!(s.cpu_stat().is_err(), "no stat file yet");
        assert!(s.stat_file.is_none());
        std::fs::write(dir.join("stat"), STAT).unwrap();
        assert_eq!(s.cpu_stat().unwrap(), parse_cpu_stat(STAT).unwrap());
    }

    #[test]
    fn parses_busy_ticks_per_cpu_and_the_runnable_count() {
        let s = parse_cpu_stat(STAT).unwrap();
        assert_eq!(
            s.busy_ticks,
            vec![
                (CpuId(0), 13276 + 1 + 4106 + 2 + 9),
                (CpuId(1), 14347 + 4544 + 56)
            ]
        );
        assert_eq!(s.procs_running, 3);
        assert_eq!(
            s.idle_ticks,
            vec![(CpuId(0), 29170 + 254 + 7), (CpuId(1), 27203 + 650 + 12)]
        );
        // Old kernels print only the first 7 fields.
        let old = "cpu0 1 2 3 4 5 6 7\nprocs_running 1\n";
        assert_eq!(
            parse_cpu_stat(old).unwrap().busy_ticks,
            vec![(CpuId(0), 1 + 2 + 3 + 6 + 7)]
        );
        // Sparse CPU numbers (CPU 1 offline) are kept as they are.
        let sparse = "cpu0 1 0 0 9 0 0 0\ncpu2 2 0 0 9 0 0 0\nprocs_running 0\n";
        let s = parse_cpu_stat(sparse).unwrap();
        assert_eq!(s.busy_ticks, vec![(CpuId(0), 1), (CpuId(2), 2)]);
    }

    #[test]
    fn refuses_truncated_or_garbled_text() {
        // Cut inside the file: the runnable count is missing.
        let cut = &STAT[..STAT.find("procs_running").unwrap()];
        assert_eq!(parse_cpu_stat(cut), None);
        // Cut inside a CPU's line.
        let cut = STAT.replace("cpu1 14347 0 4544 27203 650 0 56 12 0 0", "cpu1 14347 0");
        assert_eq!(parse_cpu_stat(&cut), None);
        for bad in [
            "",
            "garbage",
            "procs_running 3\n",
            "cpu0 1 2 3 4 5 6 x\nprocs_running 1\n",
            "cpux 1 2 3 4 5 6 7\nprocs_running 1\n",
            "cpu0 1 2 3 4 5 6 7\nprocs_running many\n",
            "cpu0 1 2 3 4 5 6 7\nprocs_running -1\n",
            "cpu99999999 1 2 3 4 5 6 7\nprocs_running 1\n",
            "cpu0 18446744073709551615 1 0 0 0 0 0\nprocs_running 1\n",
            "\u{0}\u{1}\u{2}",
        ] {
            assert_eq!(parse_cpu_stat(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn reads_this_machines_file() {
        let text = std::fs::read_to_string("/proc/stat").unwrap();
        let s = parse_cpu_stat(&text).unwrap();
        // The reading thread is running.
        assert!(s.procs_running >= 1);
        let online: dfsched_core::CpuSet =
            std::fs::read_to_string("/sys/devices/system/cpu/online")
                .unwrap()
                .trim()
                .parse()
                .unwrap();
        assert_eq!(s.busy_ticks.len(), online.len());
        assert_eq!(clock_ticks_per_sec(), 100);
    }
}
