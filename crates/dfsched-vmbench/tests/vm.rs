//! The VM bench as part of `cargo test --workspace`: each preset boots
//! under QEMU (TCG) and runs the whole plan in the guest; a test fails on
//! any failed check, a guest that does not boot or finish within its
//! deadline, or a plan that does not reach its end.
//!
//! The first test to run prepares what every one needs (installs QEMU and
//! busybox with apt-get as root, downloads Debian's 6.12 kernel, builds the
//! release binaries in `target/vmbench/cargo`), once; the presets then run
//! one at a time, since three emulated machines at once on a small host
//! only slow each other. A prerequisite that cannot be had here fails the
//! test, with what is missing (a test that did not run never passes); leave
//! the bench out with `cargo test --workspace --exclude dfsched-vmbench`.
//! `DFSCHED_VMBENCH_KERNEL` boots another kernel image.

use dfsched_vmbench::host::{BenchError, Setup};
use dfsched_vmbench::preset::Preset;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// What every test needs, prepared once (or why it could not be).
fn setup() -> &'static Result<Setup, String> {
    static SETUP: OnceLock<Result<Setup, String>> = OnceLock::new();
    SETUP.get_or_init(|| {
        let kernel = std::env::var_os("DFSCHED_VMBENCH_KERNEL").map(std::path::PathBuf::from);
        match Setup::prepare(kernel.as_deref(), None) {
            Ok(s) => Ok(s),
            Err(e @ BenchError::Missing { .. }) => Err(format!("MISSING {e}")),
            Err(e) => panic!("the VM bench could not be prepared: {e}"),
        }
    })
}

/// One preset at a time.
static ONE_VM: Mutex<()> = Mutex::new(());

/// Boots `name` and runs the plan; panics with every reason it failed.
fn run(name: &str) {
    let _one = ONE_VM.lock().unwrap_or_else(|e| e.into_inner());
    let setup = match setup() {
        Ok(s) => s,
        // Never a pass without a run: a machine that cannot run the bench
        // fails it, and says how to get it or leave the crate out.
        Err(why) => panic!(
            "{name} cannot run here: {why}. Run the suite as root with apt-get (the bench installs \
             qemu-system-x86 and busybox-static itself), or leave the bench out visibly: \
             cargo test --workspace --exclude dfsched-vmbench"
        ),
    };
    let preset = Preset::by_name(name).expect("a preset");
    // A generous deadline: a correct plan takes minutes under TCG on a busy
    // 2-CPU host; this only stops a guest that hangs.
    match setup.run_preset(&preset, Duration::from_secs(1500), false) {
        Ok(boot) => eprintln!(
            "{name}: {} checks passed in {:.0} s (log {})",
            boot.outcome.passed(),
            boot.wall.as_secs_f64(),
            boot.log.display()
        ),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn plan_passes_on_2node_2llc_smt() {
    run("2node-2llc-smt");
}

#[test]
fn plan_passes_on_4llc_16() {
    run("4llc-16");
}

#[test]
fn plan_passes_on_1llc_4() {
    run("1llc-4");
}
