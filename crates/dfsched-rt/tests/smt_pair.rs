//! The `smt-pair` placement on a sysfs fixture with SMT siblings (this
//! machine has none): threads with complementary profile vectors are put on
//! the two siblings of one core, the pairing follows each thread's CPU time
//! through the profile, a topology without SMT is refused, and the threads
//! of a live process are read from /proc in creation order. The affinity
//! calls go to a recording SysOps (the fixture's CPUs are not this
//! machine's), and the test reads the placements back from it.
//!
//! The same for the runtime's policy (`DFSCHED_POLICY=smt-pair`): a linked
//! runtime on the fixture, its threads real ones that burn real CPU time,
//! placed by its balancer passes; and its refusal to start on a topology
//! without SMT siblings or with a garbled profile.

mod common;

use common::TempDir;
use dfsched::smt_pair::{sibling_cores, threads_of, ProfiledThread, SmtPair};
use dfsched::sys::SysOps;
use dfsched::sysfs::{read_topology, write_test_tree};
use dfsched::{CpuId, CpuSet, Error, Runtime, RuntimeConfig};
use dfsched_core::activity::ActivityVector;
use dfsched_core::smt_place::{SmtProfile, ThreadProfile};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Records every affinity set; reads back the last one.
#[derive(Default)]
struct Recording(Mutex<BTreeMap<u64, CpuSet>>);

impl SysOps for Recording {
    fn get_affinity(&self, tid: u64) -> Result<CpuSet, Error> {
        Ok(self
            .0
            .lock()
            .unwrap()
            .get(&tid)
            .cloned()
            .unwrap_or_default())
    }
    fn set_affinity(&self, tid: u64, cpus: &CpuSet) -> Result<(), Error> {
        self.0.lock().unwrap().insert(tid, cpus.clone());
        Ok(())
    }
}

const LO: u64 = 0x0000_ffff;
const HI: u64 = 0xffff_0000;

fn v(mask: u64) -> ActivityVector {
    ActivityVector::from_mask(mask, 32)
}

/// Four threads; per interval of 1,000 instructions (500 ns of CPU time):
/// threads 0 and 1 low then high, threads 2 and 3 high then low, except
/// that thread 1 stays low.
fn profile() -> SmtProfile {
    let t = |a, b| ThreadProfile {
        instructions: 2000,
        vectors: vec![v(a), v(b)],
    };
    SmtProfile {
        command: vec!["fixture".into()],
        interval_instructions: 1000,
        ns_per_instruction: 0.5,
        bits: 1,
        super_sets: 32,
        threads: vec![t(LO, HI), t(LO, LO), t(HI, LO), t(HI, HI)],
    }
}

fn smt_fixture(tag: &str, smt: u32) -> (TempDir, dfsched::Topology) {
    let dir = TempDir::new(tag);
    // 1 node, 1 LLC, 2 cores of `smt` siblings: CPUs 0-1 and 2-3 for SMT2.
    write_test_tree(dir.path(), 1, 1, 2, smt).unwrap();
    let t = read_topology(dir.path()).unwrap();
    (dir, t)
}

fn core_of(cores: &[Vec<CpuId>], cpu: CpuId) -> usize {
    cores.iter().position(|c| c.contains(&cpu)).unwrap()
}

fn cpu_of(sys: &Recording, tid: u64) -> CpuId {
    let set = sys.get_affinity(tid).unwrap();
    assert_eq!(set.len(), 1, "tid {tid}: one CPU, got {set}");
    let cpu = set.iter().next().unwrap();
    cpu
}

#[test]
fn complementary_threads_are_placed_on_sibling_pairs() {
    let (_dir, topo) = smt_fixture("smt-pair-fixture", 2);
    let cores = sibling_cores(&topo);
    assert_eq!(
        cores.len(),
        2,
        "premise: two SMT cores in the fixture: {cores:?}"
    );
    let policy = SmtPair::new(profile()).unwrap();
    let sys = Recording::default();
    // All at the start of their profiles: 0 and 1 low, 2 and 3 high.
    let threads: Vec<ProfiledThread> = (0..4)
        .map(|i| ProfiledThread {
            tid: 100 + i as u64,
            index: i,
            cpu_ns: 0,
        })
        .collect();
    let plan = policy.apply(&topo, &threads, &sys).unwrap();
    assert_eq!(plan.len(), 4);
    let core: Vec<usize> = (100..104)
        .map(|t| core_of(&cores, cpu_of(&sys, t)))
        .collect();
    // Low with high on each core, and the two on a core on distinct CPUs.
    assert_eq!(core[0], core[2], "{core:?}");
    assert_eq!(core[1], core[3], "{core:?}");
    assert_ne!(core[0], core[1], "{core:?}");
    assert_ne!(cpu_of(&sys, 100), cpu_of(&sys, 102));
    assert_ne!(cpu_of(&sys, 101), cpu_of(&sys, 103));
}

#[test]
fn the_pairing_follows_each_threads_cpu_time_through_the_profile() {
    let (_dir, topo) = smt_fixture("smt-pair-aligned", 2);
    let cores = sibling_cores(&topo);
    let policy = SmtPair::new(profile()).unwrap();
    let sys = Recording::default();
    // Threads 0 and 2 are in their second interval (600 ns >= 500 ns of
    // CPU time): 0 high, 1 low, 2 low, 3 high. Each pair on a core must be
    // low with high by these aligned vectors, which separates 0 from 2
    // (paired at the start of the profile).
    let cpu = [600, 0, 600, 0];
    let threads: Vec<ProfiledThread> = (0..4)
        .map(|i| ProfiledThread {
            tid: 200 + i as u64,
            index: i,
            cpu_ns: cpu[i],
        })
        .collect();
    policy.apply(&topo, &threads, &sys).unwrap();
    let high = |i: usize| policy.profile().vector_at(i, cpu[i]) == Some(&v(HI));
    assert!(
        high(0) && !high(1) && !high(2) && high(3),
        "premise of the profile"
    );
    let core = |i: usize| core_of(&cores, cpu_of(&sys, 200 + i as u64));
    for i in 0..4 {
        let partner = (0..4).find(|&j| j != i && core(j) == core(i)).unwrap();
        assert_ne!(
            high(i),
            high(partner),
            "thread {i} shares a core with {partner}"
        );
    }
    // A move from the start-of-profile pairing (0 with 2).
    assert_ne!(core(0), core(2));
}

#[test]
fn a_topology_without_smt_siblings_is_refused() {
    let (_dir, topo) = smt_fixture("smt-pair-nosmt", 1);
    assert!(sibling_cores(&topo).is_empty());
    let sys = Recording::default();
    let threads = [ProfiledThread {
        tid: 1,
        index: 0,
        cpu_ns: 0,
    }];
    let e = SmtPair::new(profile())
        .unwrap()
        .apply(&topo, &threads, &sys)
        .unwrap_err();
    assert!(e.to_string().contains("SMT siblings"), "{e}");
    assert!(sys.0.lock().unwrap().is_empty(), "nothing placed");
}

#[test]
fn a_profile_file_loads_and_a_bad_one_is_refused_with_its_path() {
    let dir = TempDir::new("smt-pair-profile");
    let good = dir.path().join("p.json");
    std::fs::write(&good, serde_json::to_string(&profile()).unwrap()).unwrap();
    assert_eq!(SmtPair::load(&good).unwrap().profile(), &profile());
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"threads\": 3}").unwrap();
    let e = SmtPair::load(&bad).unwrap_err().to_string();
    assert!(
        e.contains("bad.json") && e.contains("not an SMT profile"),
        "{e}"
    );
}

#[test]
fn threads_of_this_process_are_read_in_creation_order_with_cpu_time() {
    let (tx, rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let done_rx = std::sync::Arc::new(Mutex::new(done_rx));
    let mut handles = Vec::new();
    for _ in 0..2 {
        let tx = tx.clone();
        let done = done_rx.clone();
        handles.push(std::thread::spawn(move || {
            tx.send(dfsched::sys::gettid()).unwrap();
            let _ = done.lock().unwrap().recv();
        }));
    }
    let mut spawned: Vec<u64> = (0..2).map(|_| rx.recv().unwrap()).collect();
    spawned.sort_unstable();
    let threads = threads_of(std::path::Path::new("/proc"), std::process::id()).unwrap();
    let tids: Vec<u64> = threads.iter().map(|t| t.tid).collect();
    assert!(tids.windows(2).all(|w| w[0] < w[1]), "{tids:?}");
    assert_eq!(
        threads[0].tid,
        u64::from(std::process::id()),
        "the main thread first"
    );
    for (i, t) in threads.iter().enumerate() {
        assert_eq!(t.index, i);
    }
    for s in &spawned {
        assert!(tids.contains(s), "{s} not in {tids:?}");
    }
    assert!(threads[0].cpu_ns > 0, "the main thread has run");
    for _ in 0..2 {
        done_tx.send(()).unwrap();
    }
    for h in handles {
        h.join().unwrap();
    }
}

/// The kernel of a runtime on the fixture: masks live in a map (the
/// fixture's CPUs 2-3 are not this machine's, so nothing reaches the real
/// kernel), tid 0 is the calling thread, and a thread never set has every
/// CPU of the fixture. Every set is also logged, in order.
struct FixtureSys {
    all: CpuSet,
    masks: Mutex<BTreeMap<u64, CpuSet>>,
    sets: Mutex<Vec<(u64, CpuSet)>>,
}

impl FixtureSys {
    fn new(all: &str) -> Self {
        FixtureSys {
            all: all.parse().unwrap(),
            masks: Mutex::default(),
            sets: Mutex::default(),
        }
    }
    fn real(tid: u64) -> u64 {
        if tid == 0 {
            dfsched::sys::gettid()
        } else {
            tid
        }
    }
    fn cpu_of(&self, tid: u64) -> CpuId {
        let set = self.get_affinity(tid).unwrap();
        assert_eq!(set.len(), 1, "tid {tid}: one CPU, got {set}");
        let cpu = set.iter().next().unwrap();
        cpu
    }
}

impl SysOps for FixtureSys {
    fn get_affinity(&self, tid: u64) -> Result<CpuSet, Error> {
        let tid = Self::real(tid);
        Ok(self
            .masks
            .lock()
            .unwrap()
            .get(&tid)
            .cloned()
            .unwrap_or_else(|| self.all.clone()))
    }
    fn set_affinity(&self, tid: u64, cpus: &CpuSet) -> Result<(), Error> {
        let tid = Self::real(tid);
        self.masks.lock().unwrap().insert(tid, cpus.clone());
        self.sets.lock().unwrap().push((tid, cpus.clone()));
        Ok(())
    }
}

/// A runtime under the smt-pair policy on the fixture under `root`, with
/// the profile at `profile`; no balancer thread (the test runs each pass)
/// and nothing of the outside world (no agent, no external load).
fn smt_config(root: &std::path::Path, profile: &std::path::Path) -> RuntimeConfig {
    RuntimeConfig::from_vars([
        ("DFSCHED_POLICY", "smt-pair"),
        ("DFSCHED_SMT_PROFILE", profile.to_str().unwrap()),
        ("DFSCHED_SYSFS_ROOT", root.to_str().unwrap()),
        ("DFSCHED_BALANCE_INTERVAL_MS", "0"),
        ("DFSCHED_EXTERNAL_LOAD", "0"),
        ("DFSCHED_AGENT", "off"),
        ("DFSCHED_SCX", "off"),
    ])
    .unwrap()
}

/// Burns CPU on the calling thread until its own CPU clock reaches `ns`.
fn burn_until(ns: u64) {
    let tid = dfsched::sys::gettid();
    let mut x = 0u64;
    while dfsched::sys::thread_cpu_ns(tid).unwrap() < ns {
        for i in 0..10_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
    }
}

/// What a worker thread of the runtime test is told to do.
enum Order {
    Burn(u64),
    Quit,
}

#[test]
fn the_runtime_policy_pairs_complementary_threads_and_re_pairs_them_as_their_cpu_time_moves() {
    let (dir, topo) = smt_fixture("smt-pair-runtime", 2);
    let cores = sibling_cores(&topo);
    assert_eq!(cores.len(), 2, "premise: two SMT cores: {cores:?}");
    // The profile of the fixture tests above, with intervals of 100 ms of
    // CPU time: threads 0 and 1 low then high, 2 and 3 high then low, but
    // 1 stays low and 3 stays high. Starting threads use far less than
    // 100 ms of CPU, so they start in their first interval.
    let mut p = profile();
    p.interval_instructions = 100_000_000;
    p.ns_per_instruction = 1.0;
    let interval_ns = p.interval_ns();
    let path = dir.path().join("profile.json");
    std::fs::write(&path, serde_json::to_string(&p).unwrap()).unwrap();
    let sys = std::sync::Arc::new(FixtureSys::new("0-3"));
    let rt = Runtime::start_with_sys(smt_config(dir.path(), &path), sys.clone()).unwrap();
    assert_eq!(
        rt.topology().cpus().to_string(),
        "0-3",
        "premise: the fixture's CPUs"
    );

    // Four threads, started one after the other (tids increase in creation
    // order), each registered with the runtime, then waiting for orders.
    let mut workers = Vec::new();
    for _ in 0..4 {
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (order_tx, order_rx) = std::sync::mpsc::channel::<Order>();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let rt = rt.clone();
        let handle = std::thread::spawn(move || {
            rt.attach().unwrap();
            tid_tx.send(dfsched::sys::gettid()).unwrap();
            while let Ok(Order::Burn(ns)) = order_rx.recv() {
                burn_until(ns);
                done_tx.send(()).unwrap();
            }
        });
        let tid = tid_rx.recv().unwrap();
        workers.push((tid, order_tx, done_rx, handle));
    }
    let tids: Vec<u64> = workers.iter().map(|w| w.0).collect();
    assert!(
        tids.windows(2).all(|w| w[0] < w[1]),
        "premise: creation order {tids:?}"
    );
    let cpu_ns = |i: usize| dfsched::sys::thread_cpu_ns(tids[i]).unwrap();
    assert!(
        (0..4).all(|i| cpu_ns(i) < interval_ns),
        "premise: every thread in its first interval"
    );

    let core = |tid: u64| core_of(&cores, sys.cpu_of(tid));
    let one_per_cpu = || {
        let mut cpus: Vec<CpuId> = tids.iter().map(|&t| sys.cpu_of(t)).collect();
        cpus.sort_unstable();
        cpus.dedup();
        assert_eq!(cpus.len(), 4, "each thread on a CPU of its own");
    };
    // Pass 1: 0 and 1 low, 2 and 3 high: low with high on each core.
    rt.balance_now().unwrap();
    one_per_cpu();
    assert_eq!(core(tids[0]), core(tids[2]));
    assert_eq!(core(tids[1]), core(tids[3]));
    assert_ne!(core(tids[0]), core(tids[1]));
    let stats = rt.stats();
    assert_eq!(stats.smt_pair_passes, 1);
    assert_eq!(stats.smt_pair_moves, 4, "every thread pinned once");
    assert_eq!(
        stats.engine.balance_passes, 0,
        "the engine's balance did not run"
    );
    // The pins went through the runtime's one placement path: its record
    // of each thread's mask is what the kernel holds.
    rt.check_placements().unwrap();

    // A pass with nothing moved to another interval changes nothing.
    let sets_before = sys.sets.lock().unwrap().len();
    rt.balance_now().unwrap();
    assert_eq!(
        sys.sets.lock().unwrap().len(),
        sets_before,
        "no affinity call"
    );
    assert_eq!(rt.stats().smt_pair_moves, 4);

    // Threads 0 and 2 burn into their second interval: now 0 high, 1 low,
    // 2 low, 3 high. The next pass must pair each low with a high, which
    // separates 0 from 2 (together before).
    for i in [0, 2] {
        workers[i].1.send(Order::Burn(interval_ns + 1)).unwrap();
        workers[i].2.recv().unwrap();
    }
    assert!(cpu_ns(0) >= interval_ns && cpu_ns(2) >= interval_ns);
    assert!(
        cpu_ns(1) < interval_ns && cpu_ns(3) < interval_ns,
        "premise: 1 and 3 still in their first interval"
    );
    rt.balance_now().unwrap();
    one_per_cpu();
    let high = [true, false, false, true];
    for i in 0..4 {
        let partner = (0..4)
            .find(|&j| j != i && core(tids[j]) == core(tids[i]))
            .unwrap();
        assert_ne!(
            high[i], high[partner],
            "thread {i} shares a core with {partner}"
        );
    }
    assert_ne!(core(tids[0]), core(tids[2]), "re-paired");
    let stats = rt.stats();
    assert_eq!(stats.smt_pair_passes, 3);
    assert!(stats.smt_pair_moves > 4, "the re-pairing moved threads");
    assert_eq!(stats.affinity_failures.total(), 0);
    rt.check_placements().unwrap();

    for (_, order, _, handle) in workers {
        order.send(Order::Quit).unwrap();
        handle.join().unwrap();
    }
    rt.shutdown();
}

#[test]
fn the_runtime_policy_refuses_to_start_without_smt_siblings_or_with_a_bad_profile() {
    let (dir, _) = smt_fixture("smt-pair-runtime-nosmt", 1);
    let good = dir.path().join("p.json");
    std::fs::write(&good, serde_json::to_string(&profile()).unwrap()).unwrap();
    let sys = std::sync::Arc::new(FixtureSys::new("0-1"));
    let e = Runtime::start_with_sys(smt_config(dir.path(), &good), sys.clone()).unwrap_err();
    assert!(e.to_string().contains("needs SMT siblings"), "{e}");
    assert_eq!(e.code(), dfsched::error::code::E_CONFIG);

    let (dir, _) = smt_fixture("smt-pair-runtime-bad", 2);
    let missing = dir.path().join("missing.json");
    let e = Runtime::start_with_sys(smt_config(dir.path(), &missing), sys.clone()).unwrap_err();
    assert!(e.to_string().contains("missing.json"), "{e}");
    let garbled = dir.path().join("garbled.json");
    let mut p = profile();
    p.ns_per_instruction = 0.0;
    std::fs::write(&garbled, serde_json::to_string(&p).unwrap()).unwrap();
    let e = Runtime::start_with_sys(smt_config(dir.path(), &garbled), sys.clone()).unwrap_err();
    assert!(
        e.to_string().contains("garbled.json") && e.to_string().contains("ns_per_instruction"),
        "{e}"
    );
    assert!(sys.sets.lock().unwrap().is_empty(), "nothing placed");
}
