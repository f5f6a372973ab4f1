//! The `smt-pair` policy of the runtime (`DFSCHED_POLICY=smt-pair`,
//! `DFSCHED_SMT_PROFILE=FILE`; Kihm et al. §4.2): each balancer pass pins
//! the process's registered threads by their offline activity vectors,
//! complementary threads on the SMT siblings of one core, instead of
//! running the engine's balance.
//!
//! ```text
//!  start:  profile file ─► SmtPair::load (parsed, checked) ─┐ refused: the runtime
//!          topology ─► sibling_cores (none: refused) ───────┘ does not start
//!  pass:   1. registered tids, sorted (creation order), under the lock
//!          2. each one's CPU time (its thread clock), outside the lock
//!          3. the decision: dfsched_core::smt_place::SmtPlacer::plan
//!          4. under the lock: one `Place { tid, one CPU }` per thread whose
//!             CPU changed, carried out by `runtime/place.rs` as any engine
//!             placement (read-back, book-keeping, failures)
//! ```
//!
//! Why the pass replaces the engine's balance rather than being an engine
//! policy ("one brain"): the decision is pure and lives in the core
//! (`smt_place`), but it is not a placement of groups of DFs, which is what
//! the engine and its `Policy` are; a variant there would have to be
//! handled by every dispatch policy the simulator runs and by the sched_ext
//! body, none of which has vectors. So the engine runs under
//! `data-affinity` and keeps its registry of threads (no DF, so it places
//! none of them and its balance, which would not move them either, is not
//! run), and this pass, from the same balancer thread, gathers plain
//! values, asks the core, and applies the answer through the one path
//! that carries out placements.
//!
//! Matching threads to the profile is the command's (`crate::smt_pair`):
//! by creation order, i.e. the registered threads' tids in increasing
//! order, the main thread first. Under `dfsched run` every thread of the
//! program is registered from its creation and dfsched's own threads (the
//! balancer) never are, so the order is the program's. A thread that
//! exited no longer counts, as in the command.
//!
//! Invariants: a pass never places a thread outside its allowed CPUs (such
//! a thread stays where it is and is counted); a thread whose planned CPU
//! is already its mask is not touched; every placement goes through
//! `Inner::apply`, under the runtime's mutex.
//!
//! What it does not do: a thread that hints a DF is placed by the engine
//! at its hint (on its DF's home), and re-pinned by the next pass: the
//! profile wins. `smt-pair` is meant for unmodified programs.

use super::Inner;
use crate::config::RuntimeConfig;
use crate::error::Error;
use crate::smt_pair::{no_siblings, sibling_cores, ProfiledThread, SmtPair};
use dfsched_core::{CpuId, CpuSet, Decision, TaskId, Topology};

/// What the policy needs at every pass, read once at start.
#[derive(Debug)]
pub(crate) struct SmtRun {
    /// The checked profile and the decision around it.
    policy: SmtPair,
    /// The SMT cores of the runtime's topology (its CPUs in order each).
    cores: Vec<Vec<CpuId>>,
}

impl SmtRun {
    /// The policy's inputs when `config` asks for it (`None` otherwise):
    /// the profile read and checked, the topology's sibling cores. A
    /// missing or garbled profile and a topology without SMT siblings are
    /// [`Error::Config`]s naming the cause: the runtime does not start.
    pub(crate) fn start(
        config: &RuntimeConfig,
        topology: &Topology,
    ) -> Result<Option<SmtRun>, Error> {
        if !config.smt_pair {
            return Ok(None);
        }
        let Some(path) = &config.smt_profile else {
            return Err(Error::Config(
                "DFSCHED_POLICY=smt-pair needs DFSCHED_SMT_PROFILE".into(),
            ));
        };
        let policy = SmtPair::load(path)
            .map_err(|e| Error::Config(format!("DFSCHED_POLICY=smt-pair: {e}")))?;
        let cores = sibling_cores(topology);
        if cores.is_empty() {
            return Err(no_siblings(topology));
        }
        Ok(Some(SmtRun { policy, cores }))
    }
}

impl Inner {
    /// One pass of the policy (the module doc's steps 1–4). `cpu_before` is
    /// the balancer's CPU clock when the pass began, for its cost.
    pub(super) fn smt_pass(&self, smt: &SmtRun, cpu_before: u64) -> Result<(), Error> {
        let mut tids: Vec<u64> = self.lock()?.tasks.keys().copied().collect();
        tids.sort_unstable();
        // The index is taken before the read, as the command does: a
        // thread that exits meanwhile keeps the others' positions.
        let threads: Vec<ProfiledThread> = tids
            .iter()
            .enumerate()
            .filter_map(|(index, &tid)| {
                Some(ProfiledThread {
                    tid,
                    index,
                    cpu_ns: crate::sys::thread_cpu_ns(tid).ok()?,
                })
            })
            .collect();
        let plan = smt.policy.plan_on(&smt.cores, &threads);
        let mut st = self.lock()?;
        st.stats.smt_pair_passes += 1;
        let out = plan.map(|plan| {
            for (tid, cpu) in plan {
                let online = st.online.contains(cpu);
                // Exited since step 1: its exit hook has it.
                let Some(rec) = st.tasks.get(&tid) else {
                    continue;
                };
                if !(online && rec.allowed.contains(cpu)) {
                    st.stats.smt_pair_not_allowed += 1;
                    continue;
                }
                let cpus = CpuSet::single(cpu);
                if rec.last_set == cpus && !rec.stale {
                    continue;
                }
                st.stats.smt_pair_moves += 1;
                st.decisions.push(Decision::Place {
                    task: TaskId(tid),
                    cpus,
                });
            }
            self.apply(&mut st, None);
        });
        if out.is_err() {
            st.stats.balance_errors += 1;
        }
        let pass_cpu_ns = crate::sys::own_cpu_ns().saturating_sub(cpu_before);
        st.stats.balance_cpu_ns += pass_cpu_ns;
        st.stats.recent_pass_cpu_ns.record(pass_cpu_ns);
        out
    }
}
