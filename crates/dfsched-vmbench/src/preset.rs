//! The named topologies the bench boots: the QEMU options that make each
//! one and what the guest's sysfs must then report.
//!
//! Invariant: a preset's [`Expected`] topology is checked in the guest
//! against sysfs before any other check runs (see `guest::topology`); a
//! preset whose QEMU options stop producing it fails there, never later.
//!
//! How the LLCs are made (QEMU 7.2, TCG): with `-cpu EPYC` the guest reads
//! its caches from CPUID leaf 0x8000001D only with `topoext`, which TCG does
//! not support, so the L3 falls back to one per socket: fine for
//! `2node-2llc-smt` (two sockets). For four LLCs in one socket an Intel model
//! (`-cpu Skylake-Server`) with `dies=4` is used: QEMU's leaf 4 shares the L3
//! among the logical CPUs of one die, so the guest sees an L3 per die.

use dfsched_core::CpuSet;
use serde::{Deserialize, Serialize};

/// What the guest's sysfs must show: every list as a set of CPU sets,
/// compared as sorted lists.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Expected {
    /// `/sys/devices/system/cpu/online`.
    pub online: CpuSet,
    /// The distinct `shared_cpu_list`s of the level-3 caches: one per LLC.
    pub llcs: Vec<CpuSet>,
    /// The distinct `shared_cpu_list`s of the level-2 caches.
    pub l2s: Vec<CpuSet>,
    /// Each NUMA node's `cpulist` (one node when the preset has no NUMA).
    pub nodes: Vec<CpuSet>,
    /// The distinct `thread_siblings_list`s: SMT siblings.
    pub smt: Vec<CpuSet>,
}

/// One named topology.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Preset {
    /// Its name on the command line.
    pub name: String,
    /// One line for `list`.
    pub about: String,
    /// QEMU's `-cpu` model.
    pub cpu_model: String,
    /// QEMU's `-smp` value.
    pub smp: String,
    /// Each NUMA node's CPUs as QEMU's `cpus=` value; empty for no `-numa`.
    pub numa: Vec<String>,
    /// Guest memory, MiB (split evenly over the NUMA nodes).
    pub mem_mib: u32,
    /// What the guest must see.
    pub expected: Expected,
}

/// Parses a list of cpulists (a preset's literal data).
fn sets(lists: &[&str]) -> Vec<CpuSet> {
    lists
        .iter()
        .map(|l| l.parse().expect("a preset's cpulist"))
        .collect()
}

/// One set per CPU in `0..n` (private L2s, no SMT).
fn singles(n: u32) -> Vec<CpuSet> {
    (0..n)
        .map(|c| c.to_string().parse().expect("a cpu number"))
        .collect()
}

impl Preset {
    /// Every preset, in the order the bench runs them.
    pub fn all() -> Vec<Preset> {
        vec![
            Preset {
                name: "2node-2llc-smt".into(),
                about: "8 CPUs: 2 sockets = 2 LLCs = 2 NUMA nodes, SMT pairs".into(),
                cpu_model: "EPYC".into(),
                smp: "8,sockets=2,cores=2,threads=2".into(),
                numa: vec!["0-3".into(), "4-7".into()],
                mem_mib: 1024,
                expected: Expected {
                    online: "0-7".parse().expect("cpulist"),
                    llcs: sets(&["0-3", "4-7"]),
                    // Without topoext QEMU reports a private L2 per logical
                    // CPU, even for SMT siblings; the siblings still show in
                    // thread_siblings_list.
                    l2s: singles(8),
                    nodes: sets(&["0-3", "4-7"]),
                    smt: sets(&["0-1", "2-3", "4-5", "6-7"]),
                },
            },
            Preset {
                name: "4llc-16".into(),
                about: "16 CPUs: 4 LLCs of 4 (one per die), one node, no SMT".into(),
                cpu_model: "Skylake-Server".into(),
                smp: "16,sockets=1,dies=4,cores=4,threads=1".into(),
                numa: vec![],
                mem_mib: 1024,
                expected: Expected {
                    online: "0-15".parse().expect("cpulist"),
                    llcs: sets(&["0-3", "4-7", "8-11", "12-15"]),
                    l2s: singles(16),
                    nodes: sets(&["0-15"]),
                    smt: singles(16),
                },
            },
            Preset {
                name: "1llc-4".into(),
                about: "4 CPUs: one LLC, one node, no SMT (a laptop)".into(),
                cpu_model: "Skylake-Server".into(),
                smp: "4,sockets=1,cores=4,threads=1".into(),
                numa: vec![],
                mem_mib: 768,
                expected: Expected {
                    online: "0-3".parse().expect("cpulist"),
                    llcs: sets(&["0-3"]),
                    l2s: singles(4),
                    nodes: sets(&["0-3"]),
                    smt: singles(4),
                },
            },
        ]
    }

    /// The preset called `name`.
    pub fn by_name(name: &str) -> Option<Preset> {
        Preset::all().into_iter().find(|p| p.name == name)
    }

    /// QEMU's options for this topology (CPU model, SMP, memory, NUMA).
    pub fn qemu_args(&self) -> Vec<String> {
        let mut args = vec![
            "-cpu".to_string(),
            self.cpu_model.clone(),
            "-smp".into(),
            self.smp.clone(),
            "-m".into(),
            format!("{}M", self.mem_mib),
        ];
        let nodes = self.numa.len() as u32;
        for (i, cpus) in self.numa.iter().enumerate() {
            args.push("-object".into());
            args.push(format!(
                "memory-backend-ram,id=m{i},size={}M",
                self.mem_mib / nodes
            ));
            args.push("-numa".into());
            args.push(format!("node,memdev=m{i},cpus={cpus},nodeid={i}"));
        }
        args
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_partitions_its_cpus_at_every_level() {
        for p in Preset::all() {
            let e = &p.expected;
            for (what, sets) in [
                ("llcs", &e.llcs),
                ("l2s", &e.l2s),
                ("nodes", &e.nodes),
                ("smt", &e.smt),
            ] {
                let mut union = CpuSet::default();
                for s in sets.iter() {
                    assert!(!union.intersects(s), "{} {what} overlap", p.name);
                    union = union.union(s);
                }
                assert_eq!(union, e.online, "{} {what}", p.name);
            }
        }
    }

    #[test]
    fn numa_presets_give_qemu_one_memory_backend_per_node() {
        let p = Preset::by_name("2node-2llc-smt").unwrap();
        let args = p.qemu_args().join(" ");
        assert!(
            args.contains("-numa node,memdev=m1,cpus=4-7,nodeid=1"),
            "{args}"
        );
        assert!(
            args.contains("memory-backend-ram,id=m0,size=512M"),
            "{args}"
        );
        assert!(!Preset::by_name("1llc-4")
            .unwrap()
            .qemu_args()
            .contains(&"-numa".to_string()));
    }
}
