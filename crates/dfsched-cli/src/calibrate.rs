//! `dfsched calibrate`: measure this machine's costs and write a machine
//! profile; and the one place that finds, reads and checks a profile for
//! the commands that use one (`sim df-bench --machine`, `bench … --predict`).
//!
//! The profile ([`dfsched_sim::profile::MachineProfile`]) is JSON: a
//! version, the host, the topology as `dfsched topology --json` reads it
//! from sysfs, and one cost per probe of [`dfsched_bench::calibrate`] (a
//! median over interleaved rounds, with the smallest and largest round).
//! It goes to `--output PATH`, else to `$XDG_CONFIG_HOME/dfsched/machine.json`
//! (`~/.config/dfsched/machine.json` without XDG_CONFIG_HOME), written to a
//! temporary file beside it and renamed, so a reader never sees half a
//! profile.

use crate::Failure;
use anyhow::{bail, Context};
use clap::Args;
use dfsched_bench::calibrate::{run_probes, CacheSizes, ProbePlan};
use dfsched_sim::profile::{
    cache_sizes, Calibration, Cost, Costs, MachineProfile, ProfileHost, PROFILE_VERSION,
};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

/// The long help of `calibrate`.
pub const CALIBRATE_LONG_ABOUT: &str = "\
Measure what things cost on this machine and write a machine profile for the
simulator (`dfsched sim df-bench --machine`, `dfsched bench df --predict`).

Probes, each in rounds interleaved with the others (medians of medians, with
the smallest and largest round as the spread): the clock (dependent
multiplies), bench df's own access, L1/L2/LLC hits and a memory fetch
(pointer chases over buffers sized from sysfs's cache sizes), a written line
moving between two CPUs and a read of a line another CPU wrote, bench df's
access with two CPUs writing one DF at once, a wake-up on
the same and on another CPU (socket ping-pong), a context switch, a
migration, sched_setaffinity, and the kernel's time slice. With one CPU
allowed the cross-CPU probes are recorded as not measured, with the reason.

Run it on a quiet machine: other programs' load shows up as spread. About
40 s; --quick takes a few seconds and is for tests.";

/// Flags of `dfsched calibrate`.
#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// Write the profile here [default: $XDG_CONFIG_HOME/dfsched/machine.json,
    /// or ~/.config/dfsched/machine.json].
    #[arg(short, long, value_name = "PATH")]
    output: Option<PathBuf>,

    /// Three short rounds instead of seven full ones (seconds, for tests).
    #[arg(long)]
    quick: bool,

    /// Print the profile as JSON on stdout instead of a table.
    #[arg(long)]
    json: bool,

    /// Read sysfs under this directory instead of / (fixture trees).
    #[arg(long, value_name = "PATH", default_value = "/")]
    sysfs_root: PathBuf,
}

/// Where a profile goes when no path is given: `$XDG_CONFIG_HOME/dfsched/
/// machine.json`, else `$HOME/.config/dfsched/machine.json`.
pub fn default_profile_path() -> anyhow::Result<PathBuf> {
    let base = match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(x) => PathBuf::from(x),
        None => match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
            Some(h) => PathBuf::from(h).join(".config"),
            None => bail!("neither XDG_CONFIG_HOME nor HOME is set: give the profile's path"),
        },
    };
    Ok(base.join("dfsched").join("machine.json"))
}

/// Reads and checks the profile at `path` (the default path if `None`),
/// and converts it to the simulator's parameters. Either all of it is
/// good, or an error names the file and what is wrong.
pub fn load_profile(path: Option<&Path>) -> anyhow::Result<(PathBuf, MachineProfile, Calibration)> {
    let path = match path {
        Some(p) => p.to_path_buf(),
        None => default_profile_path()?,
    };
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "reading the machine profile {} (make one with `dfsched calibrate`)",
            path.display()
        )
    })?;
    let profile: MachineProfile = serde_json::from_str(&text)
        .with_context(|| format!("the machine profile {} is not a profile", path.display()))?;
    let cal = profile
        .calibration()
        .with_context(|| format!("the machine profile {} was refused", path.display()))?;
    Ok((path, profile, cal))
}

/// Runs `calibrate`.
pub fn run(args: CalibrateArgs) -> Result<(), Failure> {
    let path = match &args.output {
        Some(p) => p.clone(),
        None => default_profile_path()?,
    };
    let topology = dfsched::sysfs::read_topology(&args.sysfs_root).with_context(|| {
        format!(
            "reading the CPU topology under {}",
            args.sysfs_root.display()
        )
    })?;
    let allowed = dfsched::sys::get_affinity(0).context("reading this process's allowed CPUs")?;
    let allowed = allowed.intersection(topology.cpus());
    let Some(first) = allowed.iter().next() else {
        return Err(anyhow::anyhow!("no allowed CPU is in the topology").into());
    };
    let (l1, l2, llc) = cache_sizes(&topology, first);
    let d = Calibration::default();
    let sizes = CacheSizes {
        l1: l1.unwrap_or(d.l1_bytes),
        l2: l2.unwrap_or(d.l2_bytes),
        llc: llc.unwrap_or(d.llc_bytes),
    };
    let plan = if args.quick {
        ProbePlan::quick()
    } else {
        ProbePlan::full()
    };
    let tty = std::io::stderr().is_terminal();
    let t0 = std::time::Instant::now();
    let outcomes = run_probes(&allowed, sizes, plan, |done, total| {
        if tty {
            eprint!("\rcalibrating: {done}/{total}");
            if done == total {
                eprintln!();
            }
        }
    });
    let mut costs = Costs::default();
    for (name, o) in &outcomes {
        let c = costs.get_mut(name).expect("probe names are cost names");
        *c = match &o.rounds_ns {
            Ok(r) if !r.is_empty() => Cost {
                buffer_bytes: o.buffer_bytes,
                ..Cost::from_rounds(r)
            },
            Ok(_) => Cost::unavailable("no round ran"),
            Err(why) => Cost::unavailable(why.clone()),
        };
    }
    let machine = dfsched_bench::Machine::describe(&allowed);
    let profile = MachineProfile {
        version: PROFILE_VERSION,
        host: ProfileHost {
            model_name: machine.model_name.unwrap_or_default(),
            hypervisor: machine.hypervisor,
            kernel: machine.kernel.unwrap_or_default(),
            allowed,
            quick: args.quick,
            unix_time_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        },
        topology,
        costs,
    };
    profile
        .validate()
        .context("the measured profile is malformed (a bug of calibrate)")?;
    let text = serde_json::to_string_pretty(&profile).context("serialising the profile")?;
    write_atomically(&path, &text)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{text}").context("writing the profile")?;
    } else {
        write!(out, "{}", render(&profile)).context("writing the table")?;
        writeln!(
            out,
            "wrote {} in {:.1} s",
            path.display(),
            t0.elapsed().as_secs_f64()
        )
        .context("writing the table")?;
    }
    Ok(())
}

/// Writes `text` to `path` through a temporary file beside it.
fn write_atomically(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the directory {}", dir.display()))?;
    }
    let tmp = path.with_extension(format!("json.tmp.{}", std::process::id()));
    std::fs::write(&tmp, format!("{text}\n"))
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| {
        let _ = std::fs::remove_file(&tmp);
        format!("renaming {} to {}", tmp.display(), path.display())
    })
}

/// The profile's costs, for people.
pub fn render(p: &MachineProfile) -> String {
    let mut s = format!(
        "machine profile v{}: {} ({}), kernel {}, CPUs {}{}\n",
        p.version,
        p.host.model_name,
        if p.host.hypervisor {
            "VM"
        } else {
            "bare metal"
        },
        p.host.kernel,
        p.host.allowed,
        if p.host.quick { ", --quick" } else { "" }
    );
    s.push_str(&format!(
        "{:<20} {:>12} {:>12} {:>12}  note\n",
        "cost", "median", "min", "max"
    ));
    let t = |x: Option<f64>| x.map_or("-".to_string(), human_ns);
    for (name, c) in p.costs.named() {
        let note = match (&c.reason, c.buffer_bytes) {
            (Some(r), _) => format!("not measured: {r}"),
            (None, Some(b)) => format!("buffer {} KiB", b >> 10),
            (None, None) => String::new(),
        };
        s.push_str(&format!(
            "{:<20} {:>12} {:>12} {:>12}  {}\n",
            name,
            t(c.median_ns),
            t(c.min_ns),
            t(c.max_ns),
            note
        ));
    }
    s
}

/// `ns` with a unit that keeps it short.
fn human_ns(ns: f64) -> String {
    if ns >= 1e6 {
        format!("{:.3} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{ns:.2} ns")
    }
}
