//! `dfsched profile -- PROG [ARGS…]`: a program's per-thread cache
//! activity profile for the `smt-pair` placement (Kihm et al. §4.2: the
//! Linux prototype's vectors came from offline Valgrind profiles).
//!
//! Two runs of the program, both with stdin from /dev/null:
//!
//! 1. natively, for its CPU time (the children's user + system time from
//!    `/proc/self/stat`, in clock ticks of 10 ms), which with the
//!    instructions of run 2 gives the nanoseconds per instruction that
//!    align a profile interval with a thread's CPU time at run time;
//! 2. under `valgrind --tool=lackey --trace-mem=yes --trace-sched=yes`,
//!    whose text (through `sh`, on fd 3, the program's stdout discarded)
//!    is folded into one activity vector per `--interval` instructions of
//!    each thread (`dfsched_sim::smt::profile`).
//!
//! Cost: lackey runs a program some 50–200 times slower than natively and
//! prints some 30 bytes per instruction and per access; a program of a
//! few billion instructions takes minutes to hours. The profile is
//! offline, like the paper's: it describes the run that was profiled, and a
//! run with other input behaves otherwise. Both runs are killed after
//! `--timeout` seconds.

use anyhow::{bail, Context as _};
use clap::Args;
use dfsched_sim::smt::profile::{ProfileBuilder, ProfileCache};
use std::io::BufRead;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `dfsched profile`.
#[derive(Debug, Args)]
pub struct ProfileArgs {
    /// The profile file to write (JSON).
    #[arg(long, default_value = "dfsched-profile.json")]
    out: PathBuf,
    /// Instructions per interval of a thread (the paper: 50 M).
    #[arg(long, default_value_t = 50_000_000)]
    interval: u64,
    /// Bits per super-set (1 to 8).
    #[arg(long, default_value_t = 1)]
    bits: u8,
    /// Size of the modelled cache in KiB (the paper's L2: 512).
    #[arg(long, default_value_t = 512)]
    cache_kib: u64,
    /// Its ways.
    #[arg(long, default_value_t = 8)]
    ways: u64,
    /// Its line size in bytes.
    #[arg(long, default_value_t = 128)]
    line_bytes: u64,
    /// Super-sets.
    #[arg(long, default_value_t = 32)]
    super_sets: usize,
    /// Seconds after which either run is killed.
    #[arg(long, default_value_t = 3600)]
    timeout: u64,
    /// The program and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<String>,
}

/// Children's CPU time so far (user + system of waited-for children), in
/// nanoseconds, from fields 16 and 17 of `/proc/self/stat` (USER_HZ is 100
/// on Linux).
fn children_cpu_ns() -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").context("reading /proc/self/stat")?;
    // The command name (field 2) may hold spaces: count after its ')'.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("no ')' in /proc/self/stat")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3, so field N is f[N - 3].
    let ticks = |n: usize| -> anyhow::Result<u64> {
        f.get(n - 3)
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("field {n} of /proc/self/stat"))
    };
    Ok((ticks(16)? + ticks(17)?) * 10_000_000)
}

/// Waits for `child` at most `timeout`, killing it (our own child, by its
/// handle) when it runs longer.
fn wait_with_timeout(
    child: Arc<Mutex<std::process::Child>>,
    timeout: Duration,
) -> anyhow::Result<std::process::ExitStatus> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.lock().expect("no panic holding it").try_wait()? {
            return Ok(status);
        }
        if start.elapsed() > timeout {
            let mut c = child.lock().expect("no panic holding it");
            let _ = c.kill();
            let _ = c.wait();
            bail!("killed after {} s (--timeout)", timeout.as_secs());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `dfsched profile`.
pub fn run(a: ProfileArgs) -> anyhow::Result<()> {
    let cache = ProfileCache {
        bytes: a.cache_kib << 10,
        ways: a.ways,
        line_bytes: a.line_bytes,
        super_sets: a.super_sets,
    };
    let mut builder = ProfileBuilder::new(cache, a.interval, a.bits)?;
    let timeout = Duration::from_secs(a.timeout);
    let (prog, args) = a.command.split_first().context("no program")?;

    // 1. Natively, for the CPU time.
    let before = children_cpu_ns()?;
    let child = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .with_context(|| format!("running {prog}"))?;
    let status = wait_with_timeout(Arc::new(Mutex::new(child)), timeout)
        .with_context(|| format!("the native run of {prog}"))?;
    let native_ns = children_cpu_ns()?.saturating_sub(before);
    if !status.success() {
        tracing::warn!(%status, "the native run did not exit 0");
    }

    // 2. Under lackey: the trace on fd 3 (our pipe), the program's stdout
    // discarded, `exec` so that the child we hold is valgrind itself.
    // `--vgdb=no`: no gdbserver, whose three FIFOs in /tmp a valgrind
    // ended by our timeout (SIGKILL) would leave behind on every run.
    let script = "exec valgrind --tool=lackey --vgdb=no --trace-mem=yes --trace-sched=yes --log-fd=3 \"$@\" 3>&1 1>/dev/null";
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("sh")
        .arg(prog)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .context("running valgrind (apt-get install valgrind)")?;
    let stdout = child.stdout.take().context("valgrind's pipe")?;
    let child = Arc::new(Mutex::new(child));
    let watchdog = {
        let child = child.clone();
        std::thread::spawn(move || wait_with_timeout(child, timeout))
    };
    let mut lines = 0u64;
    let mut valgrind_said = Vec::new();
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.context("reading valgrind's output")?;
        if line.starts_with("valgrind:") || line.contains("command not found") {
            valgrind_said.push(line.clone());
        }
        builder.line(&line)?;
        lines += 1;
    }
    let status = watchdog
        .join()
        .map_err(|_| anyhow::anyhow!("the watchdog panicked"))??;
    if !status.success() && lines == 0 {
        bail!(
            "valgrind failed ({status}) and printed nothing{}",
            valgrind_said.join("; ")
        );
    }
    let mut command = vec![prog.clone()];
    command.extend(args.iter().cloned());
    let instructions_total = |p: &dfsched_core::smt_place::SmtProfile| -> u64 {
        p.threads.iter().map(|t| t.instructions).sum()
    };
    let mut profile = builder.finish(command, 0.0);
    let instructions = instructions_total(&profile);
    if instructions == 0 {
        bail!("valgrind traced no instruction of {prog}");
    }
    if native_ns == 0 {
        eprintln!(
            "warning: the native run took less than one clock tick (10 ms) of CPU: the alignment by CPU time is coarse (1 ns per {instructions} instructions assumed)"
        );
    }
    profile.ns_per_instruction = native_ns.max(1) as f64 / instructions as f64;
    let json = serde_json::to_string(&profile)?;
    std::fs::write(&a.out, json).with_context(|| format!("writing {}", a.out.display()))?;
    eprintln!(
        "{}: {} thread(s), {} instructions, {} interval(s) of {} instructions (~{:.1} ms of CPU each at {:.3} ns/instruction, native CPU {:.2} s)",
        a.out.display(),
        profile.threads.len(),
        instructions,
        profile.threads.iter().map(|t| t.vectors.len()).sum::<usize>(),
        a.interval,
        profile.interval_ns() as f64 / 1e6,
        profile.ns_per_instruction,
        native_ns as f64 / 1e9
    );
    Ok(())
}
