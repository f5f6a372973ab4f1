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
    fn describes_this_machine() {
        let allowed: CpuSet = "0".parse().unwrap();
        let m = Machine::describe(&allowed);
        assert_eq!(m.nr_cpus_allowed, 1);
        assert_eq!(m.cpus_allowed.to_string(), "0");
    }
}
