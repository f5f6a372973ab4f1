//! `dfsched bench topology`: what `dfsched topology` costs on a machine of
//! thousands of CPUs (issue 10: ≤ 50 ms on 8,192), as medians in JSON.
//!
//! ```text
//!  fixture: write_test_tree(NODES, LLCS, CORES, SMT) in a temp dir (removed
//!           at the end), or an existing tree given by --sysfs-root
//!  warm-up: one run of everything (the tree then sits in the page cache)
//!  rounds:  each of --repeat rounds runs, in this order,
//!             process text   `dfsched topology --sysfs-root DIR`         (this binary)
//!             process json   `dfsched topology --json --sysfs-root DIR`
//!             read           read_topology(DIR)              in process
//!             render text    the table, into a buffer        in process
//!             render json    the JSON, into a buffer         in process
//!  report:  per item the median, min, max and standard deviation in ms
//! ```
//!
//! A process run is timed from spawn to exit with its output sent to
//! `/dev/null` (exec, reading, rendering, writing and exit): the figure the
//! issue judges. The in-process items say where that time goes. Timings are
//! never asserted anywhere: the machine must be quiet for figures
//! (`scripts/quiet.sh -- …`, README "Topology at scale").

use crate::Failure;
use anyhow::Context;
use clap::Args;
use dfsched_bench::stats::Summary;
use serde::Serialize;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// Where `bench topology` sits in the command tree, for usage errors.
const PATH: &[&str] = &["bench", "topology"];

/// The long help of `bench topology`.
pub const TOPOLOGY_LONG_ABOUT: &str = "\
What `dfsched topology` costs on a large machine: a sysfs fixture of
NODES x LLCS x CORES x SMT CPUs (default 2x64x32x2 = 8,192 CPUs, the kernel's
NR_CPUS limit; the tree the sysfs tests write) is written to a temp dir, then
each round runs `dfsched topology` and `dfsched topology --json` on it as
processes (output to /dev/null, timed from spawn to exit: the figure issue 10
judges, <= 50 ms) and, in this process, the sysfs read, the table and the
JSON alone. Reported: median, min, max and standard deviation in ms of each.

Take figures on a quiet machine only:
  scripts/quiet.sh -- target/release/dfsched bench topology --json";

/// Flags of `dfsched bench topology`.
#[derive(Debug, Args)]
pub struct TopologyBenchArgs {
    /// The fixture's shape: nodes x LLCs per node x cores per LLC x SMT
    /// threads per core.
    #[arg(long, value_name = "NxLxCxS", default_value = "2x64x32x2", value_parser = parse_shape, conflicts_with = "sysfs_root")]
    shape: Shape,

    /// Read this existing tree (PATH/sys/devices/system/cpu/…) instead of
    /// writing a fixture.
    #[arg(long, value_name = "PATH")]
    sysfs_root: Option<PathBuf>,

    /// Rounds (each runs every item once).
    #[arg(long, value_name = "N", default_value_t = 15, value_parser = clap::value_parser!(u32).range(1..))]
    repeat: u32,

    /// Print one JSON object on stdout instead of a table.
    #[arg(long)]
    json: bool,
}

/// A fixture shape, as `write_test_tree` takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Shape {
    nodes: u32,
    llcs: u32,
    cores: u32,
    smt: u32,
}

fn parse_shape(s: &str) -> Result<Shape, String> {
    let parts: Vec<u32> = s
        .split('x')
        .map(|p| p.trim().parse::<u32>())
        .collect::<Result<_, _>>()
        .map_err(|_| format!("{s:?} is not NxLxCxS (four numbers joined by x)"))?;
    let [nodes, llcs, cores, smt] = parts[..] else {
        return Err(format!("{s:?} is not NxLxCxS (four numbers joined by x)"));
    };
    if parts.contains(&0) {
        return Err(format!("{s:?}: every count must be at least 1"));
    }
    let cpus = u64::from(nodes) * u64::from(llcs) * u64::from(cores) * u64::from(smt);
    if cpus > u64::from(dfsched_core::cpuset::MAX_CPUS) {
        return Err(format!(
            "{s:?} makes {cpus} CPUs, more than the reader takes"
        ));
    }
    Ok(Shape {
        nodes,
        llcs,
        cores,
        smt,
    })
}

/// The report: JSON as printed by `--json`.
#[derive(Debug, Serialize)]
pub struct TopologyBenchReport {
    /// The fixture's shape (`null` with `--sysfs-root`).
    shape: Option<Shape>,
    /// CPUs and domains of the topology read.
    cpus: usize,
    /// Domains of the topology read.
    domains: usize,
    /// Rounds.
    repeat: u32,
    /// `dfsched topology` as a process, spawn to exit, ms.
    process_text_ms: Summary,
    /// `dfsched topology --json` as a process, spawn to exit, ms.
    process_json_ms: Summary,
    /// `read_topology` in this process, ms.
    read_ms: Summary,
    /// The table rendered into a buffer, ms.
    render_text_ms: Summary,
    /// The JSON rendered into a buffer, ms.
    render_json_ms: Summary,
    /// Bytes of the table and of the JSON.
    text_bytes: usize,
    /// Bytes of the JSON.
    json_bytes: usize,
}

/// Runs `bench topology`.
pub fn run(args: TopologyBenchArgs) -> Result<(), Failure> {
    let (root, _tree, shape) = match &args.sysfs_root {
        Some(root) => (root.clone(), None, None),
        None => {
            let tree = fixture_dir().with_context(|| {
                format!(
                    "making a directory for the fixture in {}",
                    std::env::temp_dir().display()
                )
            })?;
            let dir = tree.path().to_path_buf();
            let s = args.shape;
            dfsched::sysfs::write_test_tree(&dir, s.nodes, s.llcs, s.cores, s.smt)
                .with_context(|| format!("writing the fixture under {}", dir.display()))?;
            (dir, Some(tree), Some(s))
        }
    };
    let report = measure(&root, shape, args.repeat)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report).context("writing the report")?;
        writeln!(out).context("writing the report")?;
    } else {
        write!(out, "{}", render(&report)).context("writing the report")?;
    }
    Ok(())
}

/// A fresh directory for the fixture, removed when dropped: a random name
/// under the system temp dir made by `mkdir` (which fails if the name
/// exists), mode 0700, so no other user can have made it or a symlink in
/// its place first, nor change the tree while it is measured.
fn fixture_dir() -> std::io::Result<tempfile::TempDir> {
    dfsched_bench::private_temp_dir("dfsched-bench-topology-")
}

/// The rounds (module doc) on the tree under `root`.
fn measure(root: &Path, shape: Option<Shape>, repeat: u32) -> Result<TopologyBenchReport, Failure> {
    let exe = std::env::current_exe().context("finding this program")?;
    let topo = dfsched::sysfs::read_topology(root)
        .with_context(|| format!("reading the topology under {}", root.display()))
        .map_err(|e| Failure::usage(PATH, format!("{e:#}")))?;
    let allowed = dfsched::sys::get_affinity(0).context("reading this process's allowed CPUs")?;
    let text_bytes = crate::topology::render(&topo, &allowed).len();
    let json_bytes = crate::topology::json(&topo, &allowed)?.len();
    let mut times: [Vec<f64>; 5] = Default::default();
    // Round 0 is the warm-up, not counted.
    for round in 0..=repeat {
        let mut lap = |i: usize, ms: f64| {
            if round > 0 {
                times[i].push(ms);
            }
        };
        lap(0, process(&exe, root, false)?);
        lap(1, process(&exe, root, true)?);
        let t = Instant::now();
        let read = dfsched::sysfs::read_topology(root).context("reading the topology")?;
        lap(2, ms_since(t));
        let t = Instant::now();
        let text = crate::topology::render(&read, &allowed);
        lap(3, ms_since(t));
        let t = Instant::now();
        let json = crate::topology::json(&read, &allowed)?;
        lap(4, ms_since(t));
        if text.len() != text_bytes || json.len() != json_bytes {
            return Err(anyhow::anyhow!(
                "the topology read differently from one round to the next"
            )
            .into());
        }
    }
    let summary = |v: &[f64]| Summary::of(v).expect("at least one round, no NaN");
    Ok(TopologyBenchReport {
        shape,
        cpus: topo.nr_cpus(),
        domains: topo.domains().len(),
        repeat,
        process_text_ms: summary(&times[0]),
        process_json_ms: summary(&times[1]),
        read_ms: summary(&times[2]),
        render_text_ms: summary(&times[3]),
        render_json_ms: summary(&times[4]),
        text_bytes,
        json_bytes,
    })
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// One `dfsched topology [--json] --sysfs-root ROOT`, spawn to exit, in ms;
/// a failed run is an error.
fn process(exe: &Path, root: &Path, json: bool) -> Result<f64, Failure> {
    let mut cmd = Command::new(exe);
    cmd.arg("topology");
    if json {
        cmd.arg("--json");
    }
    cmd.arg("--sysfs-root")
        .arg(root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let t = Instant::now();
    let out = cmd.output().context("running dfsched topology")?;
    let ms = ms_since(t);
    if !out.status.success() {
        return Err(anyhow::anyhow!(
            "dfsched topology{} failed ({}): {}",
            if json { " --json" } else { "" },
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    Ok(ms)
}

/// The report, for people.
fn render(r: &TopologyBenchReport) -> String {
    let shape = match r.shape {
        Some(s) => format!(
            "fixture {}x{}x{}x{} (nodes x LLCs x cores x SMT)",
            s.nodes, s.llcs, s.cores, s.smt
        ),
        None => "an existing tree".into(),
    };
    let mut out = format!(
        "dfsched topology on {shape}: {} CPUs, {} domains, {} rounds\n",
        r.cpus, r.domains, r.repeat
    );
    out.push_str("item                          median      min      max  (ms)\n");
    for (name, s) in [
        ("process: topology", &r.process_text_ms),
        ("process: topology --json", &r.process_json_ms),
        ("in process: read sysfs", &r.read_ms),
        ("in process: render table", &r.render_text_ms),
        ("in process: render JSON", &r.render_json_ms),
    ] {
        out.push_str(&format!(
            "{name:<28} {:>8.2} {:>8.2} {:>8.2}\n",
            s.median, s.min, s.max
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_parse_and_bad_ones_are_refused() {
        assert_eq!(
            parse_shape("2x64x32x2"),
            Ok(Shape {
                nodes: 2,
                llcs: 64,
                cores: 32,
                smt: 2
            })
        );
        for bad in [
            "2x64x32",
            "2x64x32x2x1",
            "2x0x32x2",
            "axbxcxd",
            "1000x1000x1x1",
        ] {
            assert!(parse_shape(bad).is_err(), "{bad} parsed");
        }
    }

    /// The fixture's directory is fresh (two apart), ours, mode 0700, and
    /// gone with the tree in it once dropped.
    #[test]
    fn the_fixture_directory_is_private_fresh_and_removed() {
        use std::os::unix::fs::MetadataExt;
        let (a, b) = (fixture_dir().unwrap(), fixture_dir().unwrap());
        assert_ne!(a.path(), b.path());
        assert_eq!(a.path().parent().unwrap(), std::env::temp_dir());
        let name = a.path().file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("dfsched-bench-topology-"), "{name}");
        let meta = std::fs::symlink_metadata(a.path()).unwrap();
        assert!(meta.file_type().is_dir());
        assert_eq!(meta.mode() & 0o7777, 0o700, "mode {:o}", meta.mode());
        // SAFETY: geteuid has no preconditions.
        assert_eq!(meta.uid(), unsafe { libc::geteuid() });
        let path = a.path().to_path_buf();
        dfsched::sysfs::write_test_tree(&path, 1, 1, 2, 1).unwrap();
        drop(a);
        assert!(!path.exists(), "{} left behind", path.display());
    }
}
