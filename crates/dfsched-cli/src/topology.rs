//! `dfsched topology`: the machine's cache domains as the runtime sees them.
//!
//! The topology comes from `dfsched::sysfs::read_topology` (so a fixture
//! tree can stand in for `/sys` with `--sysfs-root`) and the allowed set from
//! `sched_getaffinity` of this process. Output, for people:
//!
//! ```text
//! CPUs 0-1 (2), allowed 0-1 (2)
//! dom0 llc {0-1}: L3 Unified 105 MiB
//! ├── dom1 cpu {0}: L1 Data 48 KiB, L1 Instruction 32 KiB, L2 Unified 2 MiB
//! └── dom2 cpu {1}: …
//! ```
//!
//! With `--json`: `{ "topology": <dfsched_core::Topology>, "allowed": "0-1" }`.

use crate::Failure;
use anyhow::Context;
use clap::Args;
use dfsched_core::{Cache, CpuSet, DomainId, Level, Topology};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

/// Flags of `dfsched topology`.
#[derive(Debug, Args)]
pub struct TopologyArgs {
    /// Print one JSON object: the topology (as dfsched-core serialises it)
    /// and the allowed CPUs as a cpulist.
    #[arg(long)]
    json: bool,

    /// Read sysfs under this directory instead of / (for fixture trees):
    /// PATH/sys/devices/system/cpu/….
    #[arg(long, value_name = "PATH", default_value = "/")]
    sysfs_root: PathBuf,
}

/// Runs `topology`.
pub fn run(args: TopologyArgs) -> Result<(), Failure> {
    let topo = dfsched::sysfs::read_topology(&args.sysfs_root).with_context(|| {
        format!(
            "reading the CPU topology under {}",
            args.sysfs_root.display()
        )
    })?;
    let allowed = dfsched::sys::get_affinity(0).context("reading this process's allowed CPUs")?;
    let text = if args.json {
        let v = serde_json::json!({ "topology": topo, "allowed": allowed });
        serde_json::to_string_pretty(&v).context("serialising the topology")?
    } else {
        render(&topo, &allowed)
    };
    writeln!(std::io::stdout().lock(), "{}", text.trim_end()).context("writing the topology")?;
    Ok(())
}

/// The tree, for people.
pub fn render(topo: &Topology, allowed: &CpuSet) -> String {
    let mut out = format!(
        "CPUs {} ({}), allowed {} ({})\n",
        topo.cpus(),
        topo.nr_cpus(),
        allowed,
        allowed.len()
    );
    render_domain(topo, topo.root(), "", None, &mut out);
    out
}

/// One domain line and, below it, its children; `last` is `None` for the
/// root, else whether this is its parent's last child.
fn render_domain(
    topo: &Topology,
    id: DomainId,
    prefix: &str,
    last: Option<bool>,
    out: &mut String,
) {
    let d = topo.domain(id);
    let (branch, child_prefix) = match last {
        None => ("", String::new()),
        Some(true) => ("└── ", format!("{prefix}    ")),
        Some(false) => ("├── ", format!("{prefix}│   ")),
    };
    let caches = if d.caches.is_empty() {
        String::new()
    } else {
        let list: Vec<String> = d.caches.iter().map(describe_cache).collect();
        format!(": {}", list.join(", "))
    };
    let _ = writeln!(
        out,
        "{prefix}{branch}{} {} {{{}}}{caches}",
        d.id,
        level_name(d.level),
        d.cpus
    );
    for (i, &c) in d.children.iter().enumerate() {
        render_domain(topo, c, &child_prefix, Some(i + 1 == d.children.len()), out);
    }
}

fn level_name(level: Level) -> &'static str {
    match level {
        Level::Cpu => "cpu",
        Level::Core => "core",
        Level::L2 => "l2",
        Level::Llc => "llc",
        Level::Node => "node",
        Level::Machine => "machine",
    }
}

/// `L2 Unified 2 MiB`.
fn describe_cache(c: &Cache) -> String {
    let size = match c.size_bytes {
        None => String::new(),
        Some(b) if b >= 1 << 20 && b % (1 << 20) == 0 => format!(" {} MiB", b >> 20),
        Some(b) if b >= 1 << 10 && b % (1 << 10) == 0 => format!(" {} KiB", b >> 10),
        Some(b) => format!(" {b} B"),
    };
    format!("L{} {}{}", c.level, c.kind, size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_shows_every_domain_with_its_caches() {
        let topo = Topology::test(1, 1, 2, 1);
        let text = render(&topo, &"0-1".parse().unwrap());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "CPUs 0-1 (2), allowed 0-1 (2)");
        assert_eq!(lines[1], "dom0 llc {0-1}: L3 Unified 8 MiB");
        assert_eq!(
            lines[2],
            "├── dom1 cpu {0}: L1 Data 32 KiB, L2 Unified 1 MiB"
        );
        assert_eq!(
            lines[3],
            "└── dom2 cpu {1}: L1 Data 32 KiB, L2 Unified 1 MiB"
        );
        assert_eq!(lines.len(), 4);
    }

    #[test]
    fn deeper_trees_indent_under_open_branches() {
        let topo = Topology::test(1, 2, 2, 1);
        let text = render(&topo, &"0-3".parse().unwrap());
        assert!(text.contains("├── dom1 llc {0-1}"), "{text}");
        assert!(text.contains("│   ├── dom3 cpu {0}"), "{text}");
        assert!(text.contains("    └── dom6 cpu {3}"), "{text}");
    }

    #[test]
    fn cache_sizes_use_the_largest_exact_unit() {
        let c = |b| Cache {
            level: 2,
            kind: "Unified".into(),
            size_bytes: b,
        };
        assert_eq!(describe_cache(&c(Some(2 << 20))), "L2 Unified 2 MiB");
        assert_eq!(describe_cache(&c(Some(48 << 10))), "L2 Unified 48 KiB");
        assert_eq!(describe_cache(&c(Some(1000))), "L2 Unified 1000 B");
        assert_eq!(describe_cache(&c(None)), "L2 Unified");
    }
}
