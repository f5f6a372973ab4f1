//! A description of the machine a benchmark ran on, for its report.
//!
//! Read once per invocation from `/proc/cpuinfo`, `/proc/sys/kernel/osrelease`
//! and the process's affinity. Whether we are a VM matters for reading the
//! results: on a KVM guest a wake-up on another vCPU costs an IPI and a halt
//! exit, tens of microseconds, which favours packing threads together.

use dfsched_core::CpuSet;
use serde::{Deserialize, Serialize};

/// What the report says about the machine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Machine {
    /// The CPUs this process may run on, as a cpulist (`0-1`).
    pub cpus_allowed: CpuSet,
    /// How many CPUs that is.
    pub nr_cpus_allowed: usize,
    /// The first `model name` of `/proc/cpuinfo`, if any.
    pub model_name: Option<String>,
    /// Whether the CPU flags include `hypervisor` (we run in a VM).
    pub hypervisor: bool,
    /// The kernel release (`uname -r`), if readable.
    pub kernel: Option<String>,
}

impl Machine {
    /// Describes this machine, with `allowed` as the process's CPUs.
    pub fn describe(allowed: &CpuSet) -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let (model_name, hypervisor) = parse_cpuinfo(&cpuinfo);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());
        Machine {
            cpus_allowed: allowed.clone(),
            nr_cpus_allowed: allowed.len(),
            model_name,
            hypervisor,
            kernel,
        }
    }
}

/// CPU-time counters for telling how busy the machine was around a run:
/// the allowed CPUs' time (`/proc/stat`) and this process's own CPU time
/// (`/proc/self/stat`), all in the kernel's clock ticks (`USER_HZ`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TickSample {
    /// All time of the allowed CPUs, idle included.
    total: u64,
    /// Their non-idle time: user, nice, system, irq, softirq and steal (time
    /// the hypervisor gave to others counts as taken).
    busy: u64,
    /// This process's user + system time.
    own: u64,
}

impl TickSample {
    /// Reads the counters now; `None` where `/proc` is not readable.
    pub fn read(allowed: &CpuSet) -> Option<TickSample> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let own = std::fs::read_to_string("/proc/self/stat").ok()?;
        let (total, busy) = parse_proc_stat(&stat, allowed)?;
        Some(TickSample {
            total,
            busy,
            own: parse_self_ticks(&own)?,
        })
    }

    /// The share (0–1) of the allowed CPUs' time between `self` and `later`
    /// that went to other processes or the hypervisor; `None` if no time
    /// passed (the counters tick every 10 ms or so).
    pub fn others_share(&self, later: &TickSample) -> Option<f64> {
        let total = later.total.checked_sub(self.total)?;
        if total == 0 {
            return None;
        }
        let busy = later.busy.saturating_sub(self.busy);
        let own = later.own.saturating_sub(self.own);
        Some((busy.saturating_sub(own) as f64 / total as f64).clamp(0.0, 1.0))
    }
}

/// `(total, busy)` ticks summed over the `cpuN` lines of `/proc/stat` whose
/// CPU is in `allowed`.
fn parse_proc_stat(text: &str, allowed: &CpuSet) -> Option<(u64, u64)> {
    let (mut total, mut busy, mut seen) = (0u64, 0u64, false);
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let Some(cpu) = fields.next().and_then(|n| n.strip_prefix("cpu")) else {
            continue;
        };
        let Ok(cpu) = cpu.parse::<u32>() else {
            continue; // the aggregate "cpu" line
        };
        if !allowed.contains(dfsched_core::CpuId(cpu)) {
            continue;
        }
        // user nice system idle iowait irq softirq steal [guest guest_nice]:
        // guest time is already inside user and nice.
        let v: Vec<u64> = fields
            .take(8)
            .map(|f| f.parse().ok())
            .collect::<Option<_>>()?;
        if v.len() < 8 {
            return None;
        }
        total += v.iter().sum::<u64>();
        busy += v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
        seen = true;
    }
    seen.then_some((total, busy))
}

/// utime + stime (fields 14 and 15) of a `/proc/<pid>/stat` line. The
/// command name (field 2) may hold spaces and parentheses, so fields are
/// counted from the last `)`.
fn parse_self_ticks(text: &str) -> Option<u64> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ")", field 3 (state) is index 0, so field n is index n - 3.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// The first model name and whether any `flags` line lists `hypervisor`.
fn parse_cpuinfo(text: &str) -> (Option<String>, bool) {
    let mut model = None;
    let mut hypervisor = false;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        match key.trim() {
            "model name" if model.is_none() => model = Some(value.trim().to_string()),
            "flags" => hypervisor |= value.split_whitespace().any(|f| f == "hypervisor"),
            _ => {}
        }
    }
    (model.filter(|m| !m.is_empty()), hypervisor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuinfo_gives_model_and_hypervisor_flag() {
        let vm = "processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\n\
                  flags\t\t: fpu vme hypervisor lahf_lm\n\nprocessor\t: 1\n\
                  model name\t: Other\nflags\t\t: fpu\n";
        assert_eq!(
            parse_cpuinfo(vm),
            (Some("Intel(R) Xeon(R) Processor".into()), true)
        );
        let metal = "model name : X\nflags : fpu hypervisorish sse\n";
        assert_eq!(parse_cpuinfo(metal), (Some("X".into()), false));
        assert_eq!(parse_cpuinfo(""), (None, false));
    }

    #[test]
    fn proc_stat_sums_only_the_allowed_cpus() {
        let text = "cpu  100 0 50 800 10 0 5 2 0 0\n\
                    cpu0 60 0 30 400 5 0 3 1 0 0\n\
                    cpu1 40 0 20 400 5 0 2 1 0 0\n\
                    intr 12345\n";
        let cpu1: CpuSet = "1".parse().unwrap();
        assert_eq!(parse_proc_stat(text, &cpu1), Some((468, 63)));
        let both: CpuSet = "0-1".parse().unwrap();
        assert_eq!(parse_proc_stat(text, &both), Some((967, 157)));
        assert_eq!(parse_proc_stat(text, &"7".parse().unwrap()), None);
        assert_eq!(parse_proc_stat("cpu0 1 2\n", &both), None, "short line");
    }

    #[test]
    fn self_stat_ticks_survive_odd_command_names() {
        let text = "42 (a) b (c)) R 1 42 42 0 -1 4194304 100 0 0 0 250 30 0 0 20 0 3 0";
        assert_eq!(parse_self_ticks(text), Some(280));
        assert_eq!(parse_self_ticks("42 (x) R 1"), None);
    }

    #[test]
    fn others_share_is_busy_time_not_ours_over_all_time() {
        let a = TickSample {
            total: 1000,
            busy: 100,
            own: 50,
        };
        let b = TickSample {
            total: 1200,
            busy: 260,
            own: 150,
        };
        // 160 busy ticks of 200, 100 of them ours: 60 / 200.
        assert_eq!(a.others_share(&b), Some(0.3));
        assert_eq!(a.others_share(&a), None, "no time passed");
        let ours_only = TickSample {
            total: 1200,
            busy: 200,
            own: 160,
        };
        assert_eq!(a.others_share(&ours_only), Some(0.0), "clamped at 0");
        assert!(TickSample::read(&"0".parse().unwrap()).is_some());
    }

    #[test]
    fn describes_this_machine() {
        let allowed: CpuSet = "0".parse().unwrap();
        let m = Machine::describe(&allowed);
        assert_eq!(m.nr_cpus_allowed, 1);
        assert_eq!(m.cpus_allowed.to_string(), "0");
    }
}
