//! CPU hotplug: the CPUs online, looked at once per balancer pass, and the
//! registered threads' allowed sets kept equal to what the world allows ∩
//! what is online.
//!
//! What the kernel does, and why the runtime must look:
//!
//! ```text
//!   cpuN/online ← 0   a thread whose mask holds no active CPU any more is
//!                     moved by the kernel's fallback (select_fallback_rq):
//!                     its mask becomes its cpuset's CPUs or every possible
//!                     CPU (`0-15`), a group's home is gone, its members run
//!                     anywhere; sched_getaffinity now answers mask ∩ active
//!   cpuN/online ← 1   nothing: in the root cgroup no mask is narrowed back,
//!                     so without the runtime the group stays spread for ever
//! ```
//!
//! Each pass (step 0 of `balancer.rs`'s picture, before the idle step):
//!
//! 1. read `sys/devices/system/cpu/online` under the runtime's sysfs root
//!    (one small file, bounded as every sysfs read) — unless the previous
//!    pass's `/proc/stat` (read for the outside load, `external.rs`) listed
//!    exactly the CPUs held as online: the kernel prints one `cpuN` line
//!    there per online CPU, from the same mask as the online file, so the
//!    file would say the same. Its path walk was the costliest part of a
//!    quiet pass (14 % of the balancer thread's time by `perf`, more than
//!    `/proc/stat`). The file is still read when sysfs is not the real one
//!    (a fixture knows nothing of `/proc/stat`), when the pass before read
//!    no `/proc/stat` (the agent's sample, no outside load), and every
//!    [`READ_ONLINE_EVERY`]th pass all the same (a `/proc/stat` that lists
//!    other CPUs, as a container's virtualised one may, is caught at once:
//!    it differs, so the file is read). A change is then seen one pass
//!    later than the file would show it;
//! 2. the same set as last time → done (the common case: no other work);
//! 3. else, under the state's mutex, for each registered thread (tid order):
//!    read its mask as the kernel stores it (offline CPUs included,
//!    `SysOps::stored_mask`); if it is not the mask dfsched last set, someone
//!    else set it (the hotplug fallback, taskset, a cpuset): it becomes the
//!    thread's world-allowed set (`TaskRec::allowed`) and the engine is told,
//!    as any outside change (`runtime/place.rs`); else the engine's allowed
//!    set becomes the world-allowed set ∩ the CPUs online, when that
//!    changed (narrowed when CPUs leave, widened when they return);
//! 4. carry out the decisions (`Event::Allowed` re-homes a group whose home
//!    left its members' allowed CPUs; a home that came back is taken again
//!    by the balancer's whole-group moves in the passes that follow).
//!
//! Invariants: the engine's allowed set of a registered thread is
//! `TaskRec::allowed ∩ State::online` whenever that is not empty, so the
//! engine never targets a CPU that was offline at the last look; a CPU
//! that goes offline between two looks can make a placement fail with
//! `EINVAL`, which `runtime/place.rs` handles and the next pass repairs.
//! The reads are made under the mutex, as every read-back compared with
//! `last_set` must be (`runtime/place.rs`, "Order"); they are one `/proc`
//! file per registered thread, only in a pass that saw the online CPUs
//! change.

use super::{Inner, State};
use dfsched_core::{CpuSet, Decision, Event, TaskId};

/// The CPUs of `allowed` that are `online`, if any: the engine's allowed
/// set for a thread the world allows on `allowed`.
pub(crate) fn usable(allowed: &CpuSet, online: &CpuSet) -> Option<CpuSet> {
    let set = allowed.intersection(online);
    (!set.is_empty()).then_some(set)
}

/// Drops every `Place` of a task but its last. The threads are told their
/// new allowed sets one at a time, and a group re-homed at the first
/// member's event places the members not told yet on their old allowed
/// set, offline CPUs included; their own events place them again later in
/// the queue. Only the last placement of each is the engine's answer, so
/// only it is made.
fn last_places_only(decisions: &mut Vec<Decision>) {
    let mut seen = std::collections::HashSet::new();
    let mut keep = vec![true; decisions.len()];
    for (i, d) in decisions.iter().enumerate().rev() {
        if let Decision::Place { task, .. } = d {
            keep[i] = seen.insert(*task);
        }
    }
    let mut i = 0;
    decisions.retain(|_| {
        i += 1;
        keep[i - 1]
    });
}

/// The online file is read at least every this many passes even when
/// `/proc/stat` says nothing changed (step 1 of the module doc).
pub(crate) const READ_ONLINE_EVERY: u32 = 10;

impl Inner {
    /// Steps 1–4 of the module doc.
    pub(crate) fn online_pass(&self) {
        if self.online_listed_by_stat() {
            return;
        }
        let online = match crate::sysfs::read_online(&self.config.sysfs_root) {
            Ok(set) => set.intersection(self.topology.cpus()),
            Err(e) => {
                tracing::debug!(runtime = self.id, error = %e, "dfsched: online CPUs unreadable");
                if let Ok(mut st) = self.lock() {
                    st.stats.online_read_errors += 1;
                }
                return;
            }
        };
        let Ok(mut st) = self.lock() else {
            return;
        };
        // An empty set is a broken file, not a machine without CPUs.
        if online == st.online || online.is_empty() {
            return;
        }
        st.online = online;
        st.stats.online_changes += 1;
        let mut tids: Vec<u64> = st.tasks.keys().copied().collect();
        tids.sort_unstable();
        for tid in tids {
            self.reconcile(&mut st, tid);
        }
        last_places_only(&mut st.decisions);
        self.apply(&mut st, None);
    }

    /// Step 1's shortcut: whether the previous pass's `/proc/stat` listed
    /// the online CPUs held, so the file need not be read (counted).
    fn online_listed_by_stat(&self) -> bool {
        if self.config.sysfs_root != std::path::Path::new("/") {
            return false;
        }
        let listed = self
            .external
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take_stat_cpus();
        let Some(listed) = listed else {
            return false;
        };
        let Ok(mut st) = self.lock() else {
            return false;
        };
        if st.online_reads_skipped_in_a_row + 1 >= READ_ONLINE_EVERY
            || listed.intersection(self.topology.cpus()) != st.online
        {
            st.online_reads_skipped_in_a_row = 0;
            return false;
        }
        st.online_reads_skipped_in_a_row += 1;
        st.stats.online_reads_skipped += 1;
        true
    }

    /// Step 3 for one thread.
    fn reconcile(&self, st: &mut State, tid: u64) {
        let Some(rec) = st.tasks.get(&tid) else {
            return;
        };
        // Lent to a call that starts a program (`runtime/spawn.rs`): its
        // mask is the call's until the call ends.
        if rec.lent.is_some() {
            return;
        }
        let (last, world) = (rec.last_set.clone(), rec.allowed.clone());
        match self.sys.stored_mask(tid) {
            Ok(stored) if stored != last => {
                // Counted and reported there; the thread's next placement
                // retries if this one failed.
                let _ = self.allowed_changed(st, tid, stored);
                return;
            }
            Ok(_) => {}
            Err(e) => {
                let _ = self.placement_failed(st, tid, e);
                return;
            }
        }
        let Some(want) = usable(&world, &st.online) else {
            return;
        };
        let task = TaskId(tid);
        if st.engine.task(task).is_some_and(|v| v.allowed != want) {
            match st.handle(Event::Allowed {
                task,
                allowed: want,
            }) {
                Ok(()) => st.stats.online_allowed_changes += 1,
                Err(_) => st.stats.balance_errors += 1,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The hotplug scenario of the VM bench's `cpu-online-groups-return`,
    //! on a fixture sysfs tree of 4 LLCs of 4 CPUs and a simulated kernel
    //! (masks, active CPUs, the hotplug fallback), with passes run by hand.

    use super::*;
    use crate::config::RuntimeConfig;
    use crate::error::Error;
    use crate::sys::SysOps;
    use crate::Runtime;
    use std::collections::HashMap;
    use std::sync::{mpsc, Arc, Mutex};

    fn set(s: &str) -> CpuSet {
        s.parse().unwrap()
    }

    /// A kernel's masks and active CPUs, as far as affinity goes: a mask
    /// is stored as set; `get_affinity` answers it ∩ the active CPUs;
    /// `set_affinity` with no active CPU in the mask is `EINVAL`; taking
    /// CPUs offline moves every thread left with no active CPU to every
    /// CPU (the fallback of the root cgroup); bringing them back changes
    /// no mask.
    struct HotplugSys {
        all: CpuSet,
        inner: Mutex<Kernel>,
    }

    struct Kernel {
        active: CpuSet,
        masks: HashMap<u64, CpuSet>,
        /// Every mask ever set, with the CPUs active then.
        history: Vec<(u64, CpuSet, CpuSet)>,
    }

    impl HotplugSys {
        fn new(all: CpuSet) -> HotplugSys {
            HotplugSys {
                inner: Mutex::new(Kernel {
                    active: all.clone(),
                    masks: HashMap::new(),
                    history: Vec::new(),
                }),
                all,
            }
        }

        fn tid(tid: u64) -> u64 {
            if tid == 0 {
                crate::sys::gettid()
            } else {
                tid
            }
        }

        fn set_active(&self, active: CpuSet) {
            let mut k = self.inner.lock().unwrap();
            for mask in k.masks.values_mut() {
                if !mask.intersects(&active) {
                    *mask = self.all.clone();
                }
            }
            k.active = active;
        }

        fn mask(&self, tid: u64) -> CpuSet {
            let k = self.inner.lock().unwrap();
            k.masks
                .get(&tid)
                .cloned()
                .unwrap_or_else(|| self.all.clone())
        }
    }

    impl SysOps for HotplugSys {
        fn get_affinity(&self, tid: u64) -> Result<CpuSet, Error> {
            let k = self.inner.lock().unwrap();
            let mask = k
                .masks
                .get(&Self::tid(tid))
                .cloned()
                .unwrap_or_else(|| self.all.clone());
            Ok(mask.intersection(&k.active))
        }

        fn set_affinity(&self, tid: u64, cpus: &CpuSet) -> Result<(), Error> {
            let mut k = self.inner.lock().unwrap();
            if !cpus.intersects(&k.active) {
                return Err(Error::Affinity {
                    op: crate::error::AffinityOp::Set,
                    tid,
                    errno: libc::EINVAL,
                });
            }
            let (tid, active) = (Self::tid(tid), k.active.clone());
            k.masks.insert(tid, cpus.clone());
            k.history.push((tid, cpus.clone(), active));
            Ok(())
        }

        fn stored_mask(&self, tid: u64) -> Result<CpuSet, Error> {
            Ok(self.mask(Self::tid(tid)))
        }
    }

    /// The LLC (of 4 CPUs) holding `mask`, if one does.
    fn llc_of(mask: &CpuSet) -> Option<u32> {
        let first = mask.first()?.0 / 4;
        mask.iter().all(|c| c.0 / 4 == first).then_some(first)
    }

    /// Every group's members share one mask inside one LLC, and the groups
    /// are in different LLCs; else what is wrong.
    fn one_llc_each(sys: &HotplugSys, groups: &[Vec<u64>]) -> Result<(), String> {
        let mut used = Vec::new();
        let masks: Vec<Vec<String>> = groups
            .iter()
            .map(|g| g.iter().map(|&t| sys.mask(t).to_string()).collect())
            .collect();
        for (g, tids) in groups.iter().enumerate() {
            let first = sys.mask(tids[0]);
            if tids.iter().any(|&t| sys.mask(t) != first) {
                return Err(format!("group {g} is not in one home: {masks:?}"));
            }
            let Some(llc) = llc_of(&first) else {
                return Err(format!("group {g} straddles LLCs: {masks:?}"));
            };
            if used.contains(&llc) {
                return Err(format!("two groups share LLC {llc}: {masks:?}"));
            }
            used.push(llc);
        }
        Ok(())
    }

    #[test]
    fn proc_stat_stands_in_for_the_online_file_nine_passes_in_ten_on_the_real_sysfs() {
        // Premise: this machine's online CPUs are the topology's (what
        // /proc/stat lists is then the set the runtime holds).
        let online = crate::sysfs::read_online(std::path::Path::new("/")).unwrap();
        let real = |external_load| RuntimeConfig {
            balance_interval_ms: 0,
            external_load,
            idle_passes: 0,
            agent: crate::agent::AgentMode::Off,
            ..RuntimeConfig::default()
        };
        let rt = Runtime::start(real(true)).unwrap();
        assert_eq!(&online, rt.topology().cpus(), "premise: every CPU online");
        for _ in 0..25 {
            rt.balance_now().unwrap();
        }
        // Read at passes 1 (no /proc/stat before it), 11 and 21.
        assert_eq!(rt.stats().online_reads_skipped, 22);
        // No /proc/stat read (no outside load weighed): the file every pass.
        let rt = Runtime::start(real(false)).unwrap();
        for _ in 0..5 {
            rt.balance_now().unwrap();
        }
        assert_eq!(rt.stats().online_reads_skipped, 0);
        // A fixture's online file is not the kernel's /proc/stat's.
        let tmp = tempfile::Builder::new()
            .prefix("dfsched-online-stat-")
            .tempdir()
            .unwrap();
        let dir = tmp.path().to_path_buf();
        crate::sysfs::write_test_tree(&dir, 1, 1, 2, 1).unwrap();
        let rt = Runtime::start(RuntimeConfig {
            sysfs_root: dir.clone(),
            ..real(true)
        })
        .unwrap();
        for _ in 0..5 {
            rt.balance_now().unwrap();
        }
        assert_eq!(rt.stats().online_reads_skipped, 0);
        drop(rt);
    }

    #[test]
    fn a_group_whose_cpus_went_offline_and_came_back_returns_to_one_home() {
        let tmp = tempfile::Builder::new()
            .prefix("dfsched-online-")
            .tempdir()
            .unwrap();
        let dir = tmp.path().to_path_buf();
        crate::sysfs::write_test_tree(&dir, 1, 4, 4, 1).unwrap();
        let online_file = dir.join("sys/devices/system/cpu/online");
        let sys = Arc::new(HotplugSys::new(set("0-15")));
        let config = RuntimeConfig {
            sysfs_root: dir.clone(),
            balance_interval_ms: 0,
            external_load: false,
            idle_passes: 0,
            agent: crate::agent::AgentMode::Off,
            ..RuntimeConfig::default()
        };
        let rt = Runtime::start_with_sys(config, sys.clone()).unwrap();
        // 4 DFs of 4 threads, each thread parked after its hint.
        let (tid_tx, tid_rx) = mpsc::channel();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let stop_rx = Arc::new(Mutex::new(stop_rx));
        let mut workers = Vec::new();
        for df in 1..=4u64 {
            for _ in 0..4 {
                let (rt, tx, stop) = (rt.clone(), tid_tx.clone(), stop_rx.clone());
                workers.push(std::thread::spawn(move || {
                    rt.enter(df).unwrap();
                    tx.send((df, crate::sys::gettid())).unwrap();
                    let _ = stop.lock().unwrap().recv();
                }));
            }
        }
        let mut groups = vec![Vec::new(); 4];
        for _ in 0..16 {
            let (df, tid) = tid_rx.recv().unwrap();
            groups[df as usize - 1].push(tid);
        }
        for _ in 0..3 {
            rt.balance_now().unwrap();
        }
        one_llc_each(&sys, &groups).expect("one LLC per group at the start");
        let last_llc = groups
            .iter()
            .position(|g| llc_of(&sys.mask(g[0])) == Some(3))
            .expect("a group in LLC 12-15");

        // CPUs 12-15 go offline: the kernel spreads that group everywhere.
        sys.set_active(set("0-11"));
        std::fs::write(&online_file, "0-11\n").unwrap();
        assert_eq!(sys.mask(groups[last_llc][0]), set("0-15"));
        for _ in 0..3 {
            rt.balance_now().unwrap();
        }
        let first = sys.mask(groups[last_llc][0]);
        for &t in &groups[last_llc] {
            assert_eq!(
                sys.mask(t),
                first,
                "the group has one home while 12-15 are away"
            );
        }
        assert!(first.is_subset(&set("0-11")), "its home {first} is online");

        // They come back: within a bounded number of passes every group is
        // in an LLC of its own again.
        sys.set_active(set("0-15"));
        std::fs::write(&online_file, "0-15\n").unwrap();
        let mut passes = 0;
        while one_llc_each(&sys, &groups).is_err() && passes < 20 {
            rt.balance_now().unwrap();
            passes += 1;
        }
        one_llc_each(&sys, &groups).unwrap_or_else(|e| panic!("after {passes} passes: {e}"));
        rt.check_invariants().unwrap();

        // Nothing was ever placed where no CPU was active.
        let history = sys.inner.lock().unwrap().history.clone();
        for (tid, mask, active) in history {
            assert!(
                mask.is_subset(&active),
                "tid {tid} placed on {mask} with only {active} online"
            );
        }
        drop(stop_tx);
        for w in workers {
            w.join().unwrap();
        }
        rt.shutdown();
    }
}
