//! `dfsched smt-pair --profile FILE --pid PID`: the `smt-pair` placement
//! (`dfsched::smt_pair`) applied to a running process: every `--every-ms`
//! its threads are read from /proc (creation order, CPU time), looked up in
//! the profile that `dfsched profile` wrote, and pinned so that threads with
//! complementary activity vectors share a core's SMT siblings. Stops when
//! the process ends, or after one pass with `--once`. `--dry-run` prints
//! the plan (JSON lines) instead of setting affinities.
//!
//! Only the caller's own processes can be placed: the kernel refuses
//! `sched_setaffinity` on another user's threads (EPERM), which is
//! reported. On a machine without SMT siblings (such as the 2-CPU VM this
//! was written on) the command refuses to run.

use anyhow::Context as _;
use clap::Args;
use dfsched::smt_pair::{threads_of, SmtPair};
use dfsched::sys::RealSys;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `dfsched smt-pair`.
#[derive(Debug, Args)]
pub struct SmtPairArgs {
    /// The profile (`dfsched profile --out FILE`).
    #[arg(long)]
    profile: PathBuf,
    /// The process to place.
    #[arg(long)]
    pid: u32,
    /// Milliseconds between passes.
    #[arg(long, default_value_t = 100)]
    every_ms: u64,
    /// One pass, then exit.
    #[arg(long)]
    once: bool,
    /// Print each pass's plan as a JSON line instead of applying it.
    #[arg(long)]
    dry_run: bool,
    /// Root of the sysfs tree to read the topology from (tests use
    /// fixtures).
    #[arg(long, default_value = "/")]
    sysfs_root: PathBuf,
}

/// Runs `dfsched smt-pair`.
pub fn run(a: SmtPairArgs) -> anyhow::Result<()> {
    let policy = SmtPair::load(&a.profile)?;
    let topo = dfsched::sysfs::read_topology(&a.sysfs_root)
        .with_context(|| format!("reading the topology under {}", a.sysfs_root.display()))?;
    let proc_root = Path::new("/proc");
    let mut passes = 0u64;
    loop {
        let gone = !proc_root.join(a.pid.to_string()).exists();
        let threads = match threads_of(proc_root, a.pid) {
            Ok(t) if !t.is_empty() && !gone => t,
            // The process has ended (after a pass: done) or never existed.
            _ if passes > 0 => return Ok(()),
            Ok(_) => anyhow::bail!("process {} has no thread", a.pid),
            Err(e) => return Err(e).context(format!("no process {}", a.pid)),
        };
        passes += 1;
        if a.dry_run {
            let plan = policy.plan(&topo, &threads)?;
            let line: Vec<serde_json::Value> = plan
                .iter()
                .map(|(tid, cpu)| serde_json::json!({"tid": tid, "cpu": cpu.0}))
                .collect();
            writeln!(
                std::io::stdout().lock(),
                "{}",
                serde_json::Value::from(line)
            )?;
        } else {
            policy.apply(&topo, &threads, &RealSys)?;
        }
        if a.once {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(a.every_ms.max(1)));
    }
}
