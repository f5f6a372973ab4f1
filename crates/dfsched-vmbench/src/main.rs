//! `dfsched-vmbench`: boots named topologies under QEMU (TCG) and runs
//! dfsched's test plan inside each, as root. See the crate README.

use anyhow::{bail, Result};
use clap::{Parser, Subcommand};
use dfsched_vmbench::host::{self, Setup};
use dfsched_vmbench::preset::Preset;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// dfsched's VM test bench.
///
/// Boots a Linux kernel under QEMU's software emulation (TCG: no KVM needed)
/// with a named CPU topology, runs dfsched's test plan in the guest as root,
/// and fails if any check fails, the guest does not boot, or the plan does
/// not reach its end. Installs qemu-system-x86 and busybox-static with
/// apt-get when missing (as root), downloads Debian's linux-image-6.12
/// kernel once, builds the release binaries; everything is cached in
/// target/vmbench/ (or $DFSCHED_VMBENCH_CACHE). Timing in the guest means
/// nothing: no check judges speed.
#[derive(Parser)]
#[command(name = "dfsched-vmbench", version)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Boot presets and run the plan on each.
    Run {
        /// A preset to run (repeatable); default: every preset.
        #[arg(long = "preset", value_name = "NAME")]
        presets: Vec<String>,
        /// Boot this kernel image instead of Debian's (with --scx: instead of
        /// the sched_ext kernel `scx-kernel` builds and caches). Also
        /// $DFSCHED_VMBENCH_KERNEL.
        #[arg(long, value_name = "PATH")]
        kernel: Option<PathBuf>,
        /// Take dfsched, libdfsched.so, dfsched-vmcheck and dfsched-vmspin
        /// from DIR instead of building them.
        #[arg(long, value_name = "DIR")]
        bin_dir: Option<PathBuf>,
        /// Run only this check (after the topology check); several: a comma-separated list.
        #[arg(long, value_name = "CHECK")]
        only: Option<String>,
        /// Kill a guest that has not powered off after this many seconds.
        #[arg(long, default_value_t = 1200, value_name = "SECS")]
        timeout_secs: u64,
        /// Copy the guest's console to stderr as it runs.
        #[arg(long)]
        console: bool,
        /// Run the sched_ext checks instead of the plan (after the topology
        /// check): builds dfsched-scx (needs clang-19, libelf-dev, bpftool)
        /// and puts it in the guest. Boots a kernel with sched_ext: --kernel,
        /// else the one `scx-kernel` builds (once, ≈ 30-40 min) and caches.
        #[arg(long)]
        scx: bool,
    },
    /// Build (once) and cache the sched_ext kernel `run --scx` boots, from
    /// Debian's linux-source-6.12 and the config fragment
    /// crates/dfsched-vmbench/scx-kernel/scx.config (≈ 30-40 min on 2
    /// cores; apt-installs the source and build tools when missing, as
    /// root); prints the image's path.
    ScxKernel,
    /// List the presets.
    List,
    /// List the checks of the plan.
    Checks,
}

fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::ScxKernel => println!("{}", host::scx_kernel(&host::cache_dir())?.display()),
        Cmd::List => {
            for p in Preset::all() {
                println!("{:16} {}", p.name, p.about);
                println!("{:16} qemu {}", "", p.qemu_args().join(" "));
            }
        }
        Cmd::Checks => {
            let scx = dfsched_vmbench::guest::scx::PLAN
                .iter()
                .map(|(n, l, c)| (*n, *l, *c, true));
            for (name, llcs, _, is_scx) in dfsched_vmbench::guest::checks::PLAN
                .iter()
                .map(|(n, l, c)| (*n, *l, *c, false))
                .chain(scx)
            {
                if is_scx {
                    print!("(--scx) ");
                }
                println!(
                    "{name}{}",
                    if llcs > 1 {
                        format!(" (needs {llcs} LLCs)")
                    } else {
                        String::new()
                    }
                );
            }
        }
        Cmd::Run {
            presets,
            kernel,
            bin_dir,
            only,
            timeout_secs,
            console,
            scx,
        } => {
            let chosen: Vec<Preset> = if presets.is_empty() {
                Preset::all()
            } else {
                presets
                    .iter()
                    .map(|n| {
                        Preset::by_name(n).ok_or_else(|| {
                            let names: Vec<String> =
                                Preset::all().into_iter().map(|p| p.name).collect();
                            anyhow::anyhow!("no preset {n:?}; presets: {}", names.join(", "))
                        })
                    })
                    .collect::<Result<_>>()?
            };
            let mut kernel =
                kernel.or_else(|| std::env::var_os("DFSCHED_VMBENCH_KERNEL").map(PathBuf::from));
            if scx && kernel.is_none() {
                kernel = Some(host::scx_kernel(&host::cache_dir())?);
            }
            let mut setup = Setup::prepare(kernel.as_deref(), bin_dir.as_deref())?;
            setup.only = only;
            if scx {
                setup.scx = Some(host::build_scx(&setup.cache, &setup.kernel)?);
                setup.extra = dfsched_vmbench::stress_ng::ensure_stress_ng(&setup.cache)?;
            }
            let start = Instant::now();
            let mut failed = Vec::new();
            for p in &chosen {
                eprintln!(
                    "vmbench: {} ({}) on {}",
                    p.name,
                    p.about,
                    setup.kernel.display()
                );
                match setup.run_preset(p, Duration::from_secs(timeout_secs), console) {
                    Ok(boot) => {
                        for c in &boot.outcome.checks {
                            let tag = if c.ok { "ok   " } else { "XFAIL" };
                            let known = c
                                .known_failure
                                .as_deref()
                                .map(|k| format!(" (known failure: {k})"))
                                .unwrap_or_default();
                            println!("  {tag} {}: {}: {}{known}", p.name, c.name, c.detail);
                        }
                        println!(
                            "{}: {} checks passed, {} known failures ({:.0} s; log {})",
                            p.name,
                            boot.outcome.passed(),
                            boot.outcome.checks.len() as u32 - boot.outcome.passed(),
                            boot.wall.as_secs_f64(),
                            boot.log.display()
                        );
                    }
                    Err(e) => {
                        println!("{}: FAILED: {e}", p.name);
                        failed.push(p.name.clone());
                    }
                }
            }
            println!(
                "vmbench: {} presets in {:.0} s",
                chosen.len(),
                start.elapsed().as_secs_f64()
            );
            if !failed.is_empty() {
                bail!("failed: {}", failed.join(", "));
            }
            let _ = host::cache_dir;
        }
    }
    Ok(())
}
