//! The `smt-pair` placement on a sysfs fixture with SMT siblings (this
//! machine has none): threads with complementary profile vectors are put on
//! the two siblings of one core, the pairing follows each thread's CPU time
//! through the profile, a topology without SMT is refused, and the threads
//! of a live process are read from /proc in creation order. The affinity
//! calls go to a recording SysOps (the fixture's CPUs are not this
//! machine's), and the test reads the placements back from it.

mod common;

use common::TempDir;
use dfsched::smt_pair::{sibling_cores, threads_of, ProfiledThread, SmtPair};
use dfsched::sys::SysOps;
use dfsched::sysfs::{read_topology, write_test_tree};
use dfsched::{CpuId, CpuSet, Error};
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
