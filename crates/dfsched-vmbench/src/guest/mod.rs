//! The guest side: the test plan `dfsched-vmcheck plan` runs as root inside
//! the VM, and the programs it observes.
//!
//! Workflow of a plan:
//!
//! 1. print `Begin`;
//! 2. check the topology sysfs shows against the preset; if it differs,
//!    stop there (every later check would test the wrong machine);
//! 3. run every other check in [`checks::PLAN`], each printing one `Check`
//!    record, whatever the others did;
//! 4. print `End` with the counts.
//!
//! Invariant: nothing here judges speed (TCG has no caches and its timing
//! means nothing). A check waits for a state by polling with a generous
//! deadline ([`poll`]), and takes a state as reached only when it held on
//! [`SETTLED`] samples in a row.

mod balancing;
mod brain;
pub mod checks;
pub mod observe;
pub mod scx;
pub mod sums;
pub mod workload;

use crate::preset::Preset;
use crate::report::Record;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Files the running check hands to the host ([`attach`]), sent after it
/// ends.
static ATTACHED: std::sync::Mutex<Vec<(String, Vec<u8>)>> = std::sync::Mutex::new(Vec::new());

/// Sends `bytes` to the host as `name` with the running check's record
/// ([`crate::artifact`]); the host judges it (an engine log is replayed).
pub fn attach(name: &str, bytes: Vec<u8>) {
    ATTACHED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push((name.to_string(), bytes));
}

/// Samples in a row a state must hold on to count as reached.
pub const SETTLED: u32 = 3;

/// Time between samples.
pub const SAMPLE: Duration = Duration::from_millis(500);

/// What every check is given.
pub struct Ctx {
    /// The preset the VM was booted with.
    pub preset: Preset,
    /// Where `dfsched`, `libdfsched.so`, `dfsched-vmspin` and this program
    /// are.
    pub bin_dir: PathBuf,
}

impl Ctx {
    /// `bin_dir/name`.
    pub fn bin(&self, name: &str) -> PathBuf {
        self.bin_dir.join(name)
    }
}

/// What one sample of a polled state says.
pub enum Step {
    /// The state is reached (with what was seen).
    Holds(String),
    /// Not yet (with what was seen).
    NotYet(String),
    /// Something that must never happen did: fail now.
    Broken(String),
}

/// Samples `f` every [`SAMPLE`] until it holds [`SETTLED`] times in a row
/// (`Ok` with the last sample) or `deadline` passes or it is broken
/// (`Err` with the last sample).
pub fn poll(deadline: Duration, mut f: impl FnMut() -> Step) -> Result<String, String> {
    let end = Instant::now() + deadline;
    let mut in_row = 0;
    loop {
        match f() {
            Step::Holds(s) => {
                in_row += 1;
                if in_row >= SETTLED {
                    return Ok(s);
                }
            }
            Step::NotYet(s) => {
                in_row = 0;
                if Instant::now() > end {
                    return Err(format!("not reached within {deadline:?}; last: {s}"));
                }
            }
            Step::Broken(s) => return Err(s),
        }
        std::thread::sleep(SAMPLE);
    }
}

/// Runs the plan on `preset`, printing records with `marker`; returns the
/// number of failed checks. With `scx`, the plan is the topology check and
/// then [`scx::PLAN`] (the sched_ext body's checks) instead of
/// [`checks::PLAN`].
pub fn run_plan(
    preset: Preset,
    marker: &str,
    bin_dir: PathBuf,
    only: Option<&str>,
    scx: bool,
) -> u32 {
    let emit = |r: Record| println!("{}", r.line(marker));
    emit(Record::Begin {
        preset: preset.name.clone(),
    });
    let ctx = Ctx { preset, bin_dir };
    let (mut passed, mut failed) = (0, 0);
    let plan: Vec<&(&str, usize, checks::CheckFn)> = if scx {
        checks::PLAN[..1].iter().chain(scx::PLAN).collect()
    } else {
        checks::PLAN.iter().collect()
    };
    for (name, needs_llcs, check) in plan {
        if only.is_some_and(|o| !o.split(',').any(|n| n == *name)) && *name != "topology-sysfs" {
            continue;
        }
        // Opt-in checks run only when named (checks::OPT_IN says why).
        if only.is_none() && checks::opt_in(name).is_some() {
            continue;
        }
        if ctx.preset.expected.llcs.len() < *needs_llcs {
            continue;
        }
        if checks::needs_smt(name) && ctx.preset.expected.smt.iter().all(|s| s.len() < 2) {
            continue;
        }
        let started = Instant::now();
        let result = check(&ctx);
        let (ok, detail) = match result {
            Ok(d) => (true, d),
            Err(d) => (false, d),
        };
        // Wall time in the guest is for the reader of the log only.
        let detail = format!("{detail} [{:.1} s]", started.elapsed().as_secs_f64());
        if ok {
            passed += 1;
        } else {
            failed += 1;
        }
        let attached = std::mem::take(
            &mut *ATTACHED
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let mut artifacts = Vec::new();
        for (file, bytes) in attached {
            let (chunks, r) = crate::artifact::split(&format!("{name}/{file}"), &bytes);
            for (seq, data) in chunks.into_iter().enumerate() {
                emit(Record::Chunk {
                    artifact: r.name.clone(),
                    seq: seq as u32,
                    data,
                });
            }
            artifacts.push(r);
        }
        emit(Record::Check {
            name: name.to_string(),
            ok,
            detail,
            known_failure: checks::known_failure(name).map(str::to_string),
            artifacts,
        });
        if !ok && *name == "topology-sysfs" {
            break;
        }
    }
    emit(Record::End { passed, failed });
    failed
}
