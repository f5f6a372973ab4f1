//! dfsched's VM test bench: the runtime on a real Linux kernel with a
//! topology this machine does not have (several LLCs, NUMA nodes, SMT),
//! emulated by QEMU's TCG.
//!
//! # Vocabulary
//!
//! - **Preset** ([`preset::Preset`]): a named topology, the QEMU options
//!   that make it and what the guest's sysfs must then show.
//! - **Plan** ([`guest::checks::PLAN`]): the checks `dfsched-vmcheck plan`
//!   runs as root inside the guest, reading placement back from the kernel.
//! - **Record** ([`report::Record`]): one JSON line the guest prints on the
//!   serial console after the run's marker; the host reads them back into
//!   an [`report::Outcome`] and judges it.
//! - **Cache**: `target/vmbench/` ([`host::cache_dir`]): the kernel image,
//!   the release build, the initramfs and console log of each run.
//!
//! # Example
//!
//! ```no_run
//! use dfsched_vmbench::{host::Setup, preset::Preset};
//! let setup = Setup::prepare(None, None)?; // installs, downloads, builds
//! let preset = Preset::by_name("2node-2llc-smt").unwrap();
//! let boot = setup.run_preset(&preset, std::time::Duration::from_secs(900), false)?;
//! println!("{} checks held in {:?}", boot.outcome.passed(), boot.wall);
//! # Ok::<(), dfsched_vmbench::host::BenchError>(())
//! ```
//!
//! Timing in the guest means nothing (TCG has no caches); nothing here
//! judges speed. See `crates/dfsched-vmbench/README.md`.

#![warn(missing_docs)]

pub mod artifact;
pub mod cpio;
pub mod guest;
pub mod host;
pub mod preset;
pub mod report;
pub mod stress_ng;
