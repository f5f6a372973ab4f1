//! dfsched's Linux runtime (`libdfsched.so`): data-affinity scheduling on an
//! unmodified kernel.
//!
//! # Vocabulary
//!
//! - **Thread** (the engine's *task*): a kernel thread of this process,
//!   known by its tid. It is *registered* on its first hint or
//!   [`Runtime::attach`] and forgotten when it exits (a thread-local
//!   destructor tells the runtime).
//! - **Policy** ([`Policy`], `DFSCHED_POLICY`): what becomes of registered
//!   threads that give no DF: unmanaged under `data-affinity` (the
//!   default); under `co-thread`, the process's threads form one co-thread
//!   group, placed and balanced as a DF's group. `smt-pair`
//!   (`DFSCHED_POLICY=smt-pair`, [`RuntimeConfig::smt_pair`]) is the
//!   runtime's own: each balancer pass pins every registered thread by an
//!   offline activity profile, complementary threads on one core's SMT
//!   siblings ([`smt_pair`], `runtime/smt.rs`), the engine running under
//!   `data-affinity` beside it.
//! - **Application**: owns a DF map. Application 0 always exists and is a
//!   thread's default; [`Runtime::create_app`] makes more.
//! - **DF** (data fragment): a piece of data threads work on together, named
//!   by a non-zero `u64` within its application; 0 means "no DF".
//! - **Hint**: the paper's system call, here a library call
//!   `hint(app, cur_df, next_df)`: the calling thread leaves `cur_df` and
//!   works on `next_df`. [`Runtime::enter`] / [`Runtime::leave`] are the
//!   everyday forms.
//! - **Home**: the cache domain (an SMT core, an L2 cluster, an LLC, a NUMA
//!   node, or one CPU under heavy load) where a DF's threads run. The engine
//!   (`dfsched-core`) decides homes; this crate carries its decisions out
//!   with `sched_setaffinity`, never outside the CPUs the process is allowed.
//! - **Balancer**: a thread that runs the engine's group-preserving balancer
//!   every `balance_interval_ms` and moves whole DF groups.
//! - **Allowed CPUs**: where a thread may ever run. At its first hint they
//!   are its kernel mask ∩ the runtime's CPUs (the CPUs allowed to the
//!   thread that started the runtime). A thread inherits its creator's
//!   mask, so a thread spawned by an already placed thread starts confined
//!   to that placement: spawn workers from a thread that has not hinted, or
//!   widen their mask before their first hint. Later, a mask set by anyone
//!   but dfsched (`taskset -p`, a cpuset, the program's own
//!   `sched_setaffinity`) is noticed at the thread's next placement and
//!   becomes its allowed set.
//!
//! # Example
//!
//! ```no_run
//! use dfsched::{Runtime, RuntimeConfig};
//!
//! let rt = Runtime::start(RuntimeConfig::default())?;
//! let workers: Vec<_> = (0..4u64)
//!     .map(|i| {
//!         let rt = rt.clone();
//!         std::thread::spawn(move || {
//!             // Threads 0 and 2 share DF 1, threads 1 and 3 share DF 2: each
//!             // pair is moved to its DF's home before `enter` returns.
//!             rt.enter(1 + i % 2).unwrap();
//!             // … work on the DF's data …
//!             rt.leave().unwrap();
//!         })
//!     })
//!     .collect();
//! for w in workers {
//!     w.join().unwrap();
//! }
//! println!("{}", rt.stats_json());
//! rt.shutdown();
//! # Ok::<(), dfsched::Error>(())
//! ```
//!
//! From C, include `dfsched.h`, link with `pkg-config --cflags --libs
//! dfsched`, and call `dfsched_enter(df)` / `dfsched_leave()`; the process's
//! default runtime starts on the first call, configured from the
//! environment. `scripts/install.sh --prefix DIR` installs the library,
//! the header and a `dfsched.pc` made from `dfsched.pc.in` (its
//! `@PREFIX@`, `@LIBDIR@`, `@INCLUDEDIR@` and `@VERSION@` substituted).
//!
//! # Unmodified programs
//!
//! `libdfsched.so` loaded by `LD_PRELOAD` with `DFSCHED_PRELOAD=1` (what
//! `dfsched run` does) attaches every thread of the program from its
//! creation; see [`preload`].
//!
//! # Configuration
//!
//! By [`RuntimeConfig`] or by `DFSCHED_*` environment variables; the table
//! is in [`config`]. A bad value refuses to start the runtime and applies
//! nothing.
//!
//! # Errors
//!
//! [`Error`]; each maps to a stable negative C code ([`Error::code`], the
//! table in [`error::code`]). After any error the program goes on and the
//! thread stays where the kernel put it.
//!
//! # Limitations
//!
//! - The kernel does not tell a library when a thread blocks. Each balancer
//!   pass reads every registered thread's CPU clock instead: one that used
//!   no CPU over the last `DFSCHED_IDLE_PASSES` passes (2) and ≥ 200 ms, and
//!   is not running or queued then, is blocked in the engine (no load)
//!   until it uses CPU or hints again ([`idle`]). A thread that waits for
//!   less than that, or runs a little in every window, counts as runnable;
//!   a thread that just woke counts again at the next pass or its next
//!   slow-path hint.
//! - A runtime does not survive `fork()`: in the child it counts as shut
//!   down (its records name the parent's threads, and it has no balancer
//!   thread). The global runtime is started anew in a child by the child's
//!   first call; a runtime of the program's own must be started anew by the
//!   child. See `fork.rs`.
//! - A program keeps the mask it was exec'd with as its allowed CPUs for
//!   good, and a child inherits its creating thread's mask. Under
//!   `LD_PRELOAD`, a program started by a thread dfsched placed gets that
//!   thread's allowed CPUs instead of its placement when it is started
//!   through `fork`, `vfork` + `execve`/`execv`/`execvp`/`execvpe`,
//!   `posix_spawn`/`posix_spawnp`, `system` or `popen` (see [`preload`]);
//!   not through the variadic `execl`, `execlp` or `execle` after a
//!   `vfork`, nor a raw `clone`.
//! - Threads are tracked by tid; a thread that vanished without running its
//!   thread-local destructors is found out (`ESRCH`) at its next placement.
//!
//! # Costs
//!
//! A hint repeating the thread's DF costs a thread-local lookup: no lock,
//! no system call. A hint that moves the thread costs one mutex, the
//! engine's `handle`, a `sched_getaffinity` (to see whether someone else
//! changed the thread's mask) and the `sched_setaffinity`; the caller's own
//! move is the last thing done under the mutex, so nothing but the unlock
//! runs cache-cold on the new CPU.
//!
//! Measured on the 2-vCPU KVM development guest with criterion
//! (`cargo bench -p dfsched-benches --bench hint`, medians; the guest was
//! quiet, the benchmark at autogroup nice −19; 2026-11-22):
//! `hint/same_df` 9.6 ns; a pair of moves costs 32.75 µs through bare
//! `sched_setaffinity` and 38.69 µs through `dfsched_hint`, side by side,
//! so dfsched's own share is ≈ 3.0 µs per move. Most of a move is the
//! kernel's migration and the halt exit of the woken vCPU; of dfsched's
//! share, the engine's `Hint` is ≈ 0.27 µs warm
//! (`engine/hint_switch_known_df` in `--bench engine`), the rest is the
//! read-back and the engine's data going cold on the new CPU.
//!
//! The outside load (processes not under dfsched) comes from per-CPU
//! signals, not a scan of every thread: a pass reads `/proc/stat` (busy time
//! per CPU, the machine's runnable count) and its own CPU clock, and a rare
//! budgeted refresh (at most one sweep of `/proc` every 2 s, 1 ms of it per
//! pass, a process's threads only if its CPU time moved, and then a sample
//! of at most 64 of them) weighs an outside thread by CFS group
//! ([`signals`], [`weigh`], [`external`]). Until 2026-11-25 every pass
//! scanned `/proc/PID/task/TID/stat` of every thread: ≈ 1.7–2.2 ms a pass
//! on a quiet machine, ≈ 33–36 ms beside one process of 2,000 sleeping
//! threads, ≈ 162 ms beside 10,000 (≈ 16 µs per thread on the machine).
//! Now (`dfsched bench overhead`, 2026-11-25, a 4-thread hinting program,
//! agent off): a pass's median CPU is 171 µs alone, 220 µs beside 10,000
//! other threads and 215 µs beside 28,500 (200 of them spinning). With
//! `dfsched agent` running, the agent takes one sample per 50 ms for all
//! its clients, the same way ([`agent`]); the table is in
//! `crates/dfsched-bench/README.md`.
//!
//! The idle step (`DFSCHED_IDLE_PASSES`, [`idle`]) adds ≈ 0.5 µs per
//! registered thread per pass — one `clock_gettime` on its CPU clock, and a
//! read of its `/proc` state once per idle episode: 0.15–0.20 ms per pass
//! for `dfsched bench chat`'s 320 threads (the `idle_cpu_ns` and
//! `balance_cpu_ns` counters, 9 runs, 2026-11-22), beside 1.2–2.0 ms for
//! the rest of the pass with the per-thread `/proc` scan it had then.

#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]

pub mod agent;
mod balancer;
pub mod config;
pub mod engine_log;
pub mod engine_replay;
pub mod error;
pub mod external;
pub mod ffi;
mod fork;
mod global;
pub mod idle;
mod log;
pub mod preload;
pub mod procfs;
pub mod record;
pub mod rules;
mod runtime;
pub mod scx;
pub mod signals;
pub mod smt_pair;
mod state;
pub mod stats;
pub mod sys;
pub mod sysfs;
mod thread;
pub mod weigh;

pub use config::RuntimeConfig;
pub use dfsched_core::{
    AppId, Cache, Config, CpuId, CpuSet, DfId, Domain, DomainId, GroupId, GroupView, Level, Policy,
    TaskId, TaskView, Topology,
};
pub use error::{code, AffinityOp, Error};
pub use global::{
    attach, balance_now, create_app, df_size, enter, global, hint, leave, stats_json,
};
pub use runtime::Runtime;
pub use stats::{PlacementFailures, RecentPasses, RefusedHints, RuntimeStats};

/// The README's Rust example runs as a doctest, so it cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
