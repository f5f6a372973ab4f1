//! Tests of the machine: costs, sources, miss kinds and the coherence
//! protocol's invariants under random access sequences.

use super::*;
use proptest::prelude::*;

const DF1: Owner = Owner(1);
const DF2: Owner = Owner(2);

fn geom(sets: u32, ways: u32) -> CacheGeometry {
    CacheGeometry { sets, ways }
}

/// Two CPUs with private caches and one shared LLC, as on this machine.
fn two_cpus(private: CacheGeometry) -> Machine {
    let cfg = MachineConfig {
        private: CacheLevelConfig {
            geometry: private,
            hit_cycles: 4,
        },
        ..MachineConfig::default()
    }
    .with_shared(
        Level::Llc,
        CacheLevelConfig {
            geometry: geom(64, 8),
            hit_cycles: 40,
        },
    );
    Machine::new(&Topology::test(1, 1, 2, 1), &cfg).unwrap()
}

fn read(m: &mut Machine, cpu: u32, addr: u64, who: Owner) -> AccessOutcome {
    m.access(CpuId(cpu), addr, AccessKind::Read, who).unwrap()
}

fn write(m: &mut Machine, cpu: u32, addr: u64, who: Owner) -> AccessOutcome {
    m.access(CpuId(cpu), addr, AccessKind::Write, who).unwrap()
}

#[test]
fn a_first_read_comes_from_memory_and_the_second_hits() {
    let mut m = two_cpus(geom(16, 4));
    let first = read(&mut m, 0, 0x1000, DF1);
    assert_eq!(first.source, Source::Memory);
    assert_eq!(first.miss, Some(MissKind::Cold));
    assert_eq!(first.cycles, Cycles(200));
    let again = read(&mut m, 0, 0x1008, DF1);
    assert_eq!(again.source, Source::Private, "same 64-byte line");
    assert_eq!(again.cycles, Cycles(4));
    m.check_coherence().unwrap();
}

#[test]
fn a_line_another_cpu_fetched_comes_from_the_shared_cache() {
    let mut m = two_cpus(geom(16, 4));
    let _ = read(&mut m, 0, 0x40, DF1);
    let other = read(&mut m, 1, 0x40, DF1);
    assert!(matches!(other.source, Source::Shared(_)));
    assert_eq!(
        other.miss,
        Some(MissKind::Cold),
        "cold for CPU 1's own cache"
    );
    assert_eq!(other.cycles, Cycles(40));
}

#[test]
fn a_write_invalidates_other_copies_and_their_next_read_is_a_coherence_transfer() {
    let mut m = two_cpus(geom(16, 4));
    let _ = read(&mut m, 0, 0x80, DF1);
    let _ = read(&mut m, 1, 0x80, DF1);
    let w = write(&mut m, 0, 0x80, DF1);
    assert_eq!(w.source, Source::Private);
    assert_eq!(
        w.cycles,
        Cycles(4 + 60),
        "hit plus the invalidation round trip"
    );
    assert!(!m.private_holds(CpuId(1), 0x80).unwrap());
    m.check_coherence().unwrap();

    let r = read(&mut m, 1, 0x80, DF1);
    assert_eq!(
        r.source,
        Source::Transfer(CacheIdx(0)),
        "CPU 0 holds it dirty"
    );
    assert_eq!(r.miss, Some(MissKind::Coherence));
    assert_eq!(r.cycles, Cycles(100));
    // CPU 0 kept a clean copy: its next read hits, its next write must
    // invalidate CPU 1 again.
    assert_eq!(read(&mut m, 0, 0x80, DF1).source, Source::Private);
    let _ = write(&mut m, 0, 0x80, DF1);
    assert_eq!(m.cpu_stats(CpuId(0)).unwrap().invalidations_sent, 2);
    m.check_coherence().unwrap();
}

#[test]
fn writing_a_line_dirty_elsewhere_takes_it_over() {
    let mut m = two_cpus(geom(16, 4));
    let _ = write(&mut m, 0, 0x100, DF1);
    let w = write(&mut m, 1, 0x100, DF1);
    assert_eq!(w.source, Source::Transfer(CacheIdx(0)));
    assert_eq!(w.cycles, Cycles(100));
    assert!(!m.private_holds(CpuId(0), 0x100).unwrap());
    assert_eq!(read(&mut m, 0, 0x100, DF1).miss, Some(MissKind::Coherence));
    m.check_coherence().unwrap();
}

#[test]
fn another_dfs_data_causes_reload_misses_and_its_own_causes_capacity_misses() {
    // One set of two ways in the private cache; lines 64 bytes apart.
    let mut m = two_cpus(geom(1, 2));
    let line = |i: u64| i * 64;
    for i in 0..2 {
        let _ = read(&mut m, 0, line(i), DF1);
    }
    for i in 10..12 {
        let _ = read(&mut m, 0, line(i), DF2);
    }
    let back = read(&mut m, 0, line(0), DF1);
    assert_eq!(back.miss, Some(MissKind::Reload));
    assert!(
        matches!(back.source, Source::Shared(_)),
        "the LLC still has it"
    );
    // DF1 alone, three lines in two ways: its own data pushes it out.
    let _ = read(&mut m, 0, line(1), DF1);
    let _ = read(&mut m, 0, line(2), DF1);
    assert_eq!(read(&mut m, 0, line(0), DF1).miss, Some(MissKind::Capacity));
    let s = m.cpu_stats(CpuId(0)).unwrap();
    assert_eq!(s.misses.reload, 2, "lines 0 and 1 after DF2");
    assert_eq!(s.misses.capacity, 1);
}

#[test]
fn evicting_a_dirty_line_costs_a_write_back() {
    let mut m = two_cpus(geom(1, 1));
    let _ = write(&mut m, 0, 0, DF1);
    let r = read(&mut m, 0, 64, DF1);
    assert_eq!(r.cycles, Cycles(200 + 50));
    assert_eq!(m.cpu_stats(CpuId(0)).unwrap().writebacks, 1);
    // Clean now: CPU 1 reads it from the LLC, not from CPU 0.
    assert!(matches!(read(&mut m, 1, 0, DF1).source, Source::Shared(_)));
    m.check_coherence().unwrap();
}

#[test]
fn context_switches_are_charged_and_counted() {
    let mut m = two_cpus(geom(4, 2));
    assert_eq!(m.context_switch(CpuId(1)).unwrap(), Cycles(3000));
    assert_eq!(m.cpu_stats(CpuId(1)).unwrap().context_switches, 1);
    assert_eq!(m.total_stats().cycles, Cycles(3000));
}

#[test]
fn paths_run_from_the_private_cache_to_the_largest_shared_one() {
    let t = Topology::test(1, 2, 2, 1);
    let small = CacheLevelConfig {
        geometry: geom(4, 2),
        hit_cycles: 30,
    };
    let cfg = MachineConfig::default()
        .with_shared(Level::Node, small)
        .with_shared(Level::Llc, small);
    let m = Machine::new(&t, &cfg).unwrap();
    let path = m.path(CpuId(3)).unwrap();
    let sizes: Vec<usize> = path
        .iter()
        .map(|c| m.caches()[c.0 as usize].cpus.len())
        .collect();
    assert_eq!(sizes, vec![1, 2, 4]);
    assert_eq!(m.caches()[path[1].0 as usize].cpus.to_string(), "2-3");
}

#[test]
fn bad_configurations_and_unknown_cpus_are_refused() {
    let t = Topology::test(1, 1, 2, 1);
    let ok = MachineConfig::default();
    let bad_line = MachineConfig {
        line_bytes: 48,
        ..ok.clone()
    };
    assert_eq!(
        Machine::new(&t, &bad_line).unwrap_err(),
        ConfigError::BadLineSize(48)
    );
    let llc = MachineConfig::typical_llc();
    assert!(matches!(
        Machine::new(&t, &ok.clone().with_shared(Level::Core, llc)),
        Err(ConfigError::NoDomainAtLevel {
            level: Level::Core,
            ..
        })
    ));
    assert_eq!(
        Machine::new(&t, &ok.clone().with_shared(Level::Cpu, llc)).unwrap_err(),
        ConfigError::SharedAtCpuLevel
    );
    assert_eq!(
        Machine::new(
            &t,
            &ok.clone()
                .with_shared(Level::Llc, llc)
                .with_shared(Level::Llc, llc)
        )
        .unwrap_err(),
        ConfigError::DuplicateLevel(Level::Llc)
    );
    let mut m = Machine::new(&t, &ok).unwrap();
    assert_eq!(
        m.access(CpuId(7), 0, AccessKind::Read, DF1).unwrap_err(),
        MachineError::UnknownCpu(CpuId(7))
    );
    assert_eq!(
        m.total_stats(),
        CpuMemStats::default(),
        "a refused access counts nothing"
    );
}

/// Four CPUs, two LLC domains of two, a node cache over all; tiny caches so
/// that evictions happen all the time.
fn tiny_four() -> Machine {
    let cfg = MachineConfig {
        private: CacheLevelConfig {
            geometry: geom(2, 2),
            hit_cycles: 4,
        },
        ..MachineConfig::default()
    }
    .with_shared(
        Level::Llc,
        CacheLevelConfig {
            geometry: geom(2, 3),
            hit_cycles: 30,
        },
    )
    .with_shared(
        Level::Node,
        CacheLevelConfig {
            geometry: geom(4, 2),
            hit_cycles: 60,
        },
    );
    Machine::new(&Topology::test(1, 2, 2, 1), &cfg).unwrap()
}

proptest! {
    #[test]
    fn random_accesses_keep_the_directory_exact_and_never_read_stale_data(
        ops in proptest::collection::vec((0u32..4, 0u64..24, any::<bool>()), 1..400),
    ) {
        let mut m = tiny_four();
        for (cpu, line, is_write) in ops {
            let addr = line * 64;
            let path = m.path(CpuId(cpu)).unwrap().to_vec();
            let dirty_before = m.directory.dirty(line);
            let kind = if is_write { AccessKind::Write } else { AccessKind::Read };
            let out = m.access(CpuId(cpu), addr, kind, Owner(line % 3)).unwrap();
            let dirty_off_path = dirty_before.filter(|d| !path.contains(d));
            match out.source {
                // Data from our own path is only fresh if nobody else has a
                // newer copy.
                Source::Private | Source::Shared(_) | Source::Memory => {
                    prop_assert_eq!(dirty_off_path, None, "stale data served")
                }
                Source::Transfer(x) => prop_assert_eq!(dirty_off_path, Some(x)),
            }
            if is_write {
                let st = m.directory.get(line).expect("the writer holds it");
                prop_assert!(st.holders().iter().all(|h| path.contains(h)));
                prop_assert_eq!(st.dirty(), Some(path[0]));
            }
            prop_assert_eq!(out.miss.is_none(), out.source == Source::Private);
            if let Err(e) = m.check_coherence() {
                return Err(TestCaseError::fail(e));
            }
        }
        let t = m.total_stats();
        prop_assert_eq!(t.reads + t.writes, t.private_hits + t.shared_hits + t.coherence_transfers + t.memory_fetches);
        prop_assert_eq!(t.misses.total(), t.shared_hits + t.coherence_transfers + t.memory_fetches);
    }
}
