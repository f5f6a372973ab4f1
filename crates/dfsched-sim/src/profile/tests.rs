//! Tests of the machine profile: its JSON round trip, its validation, and
//! the mapping onto the simulator's parameters.

use super::*;

fn example() -> MachineProfile {
    MachineProfile::example(Topology::test(1, 1, 2, 1))
}

#[test]
fn a_profile_survives_a_json_round_trip_unchanged() {
    let mut p = example();
    p.costs.line_write_transfer = Cost::unavailable("only one CPU allowed");
    let text = serde_json::to_string_pretty(&p).unwrap();
    let back: MachineProfile = serde_json::from_str(&text).unwrap();
    assert_eq!(back, p);
    back.validate().unwrap();
    // The unmeasured cost is a null median with its reason beside it.
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let c = &v["costs"]["line_write_transfer"];
    assert!(c["median_ns"].is_null());
    assert_eq!(c["reason"], "only one CPU allowed");
    assert_eq!(v["version"], PROFILE_VERSION);
}

#[test]
fn every_malformed_profile_is_refused_by_what_is_wrong() {
    let mut p = example();
    p.version = 99;
    assert_eq!(p.validate(), Err(ProfileError::Version { found: 99 }));
    assert!(
        p.calibration().is_err(),
        "nothing applied from a bad profile"
    );

    let mut p = example();
    p.costs.l2_hit.median_ns = Some(-1.0);
    p.costs.l2_hit.min_ns = Some(-2.0);
    assert!(matches!(
        p.validate(),
        Err(ProfileError::Cost { name: "l2_hit", .. })
    ));

    let mut p = example();
    p.costs.llc_hit.max_ns = Some(1.0); // below its median
    assert!(matches!(
        p.validate(),
        Err(ProfileError::Cost {
            name: "llc_hit",
            ..
        })
    ));

    let mut p = example();
    p.costs.migration = Cost::default(); // neither a median nor a reason
    assert!(matches!(
        p.validate(),
        Err(ProfileError::Cost {
            name: "migration",
            ..
        })
    ));

    let mut p = example();
    p.costs.cycle = Cost::unavailable("no clock");
    assert_eq!(p.validate(), Err(ProfileError::NoClock));

    let mut p = example();
    p.host.allowed = CpuSet::single(dfsched_core::CpuId(7));
    assert!(matches!(p.validate(), Err(ProfileError::Allowed { .. })));
}

#[test]
fn calibration_converts_measured_ns_to_cycles_of_the_measured_clock() {
    let p = example();
    let c = p.calibration().unwrap();
    assert!((c.cycle_ns - 0.4).abs() < 1e-12);
    assert_eq!(c.l1_hit_cycles, 3); // 1.2 ns / 0.4
    assert_eq!(c.l2_hit_cycles, 13); // 5 / 0.4 = 12.5, rounded
    assert_eq!(c.llc_hit_cycles, 50);
    assert_eq!(c.cost.memory_cycles, 225);
    assert_eq!(c.cost.coherence_transfer_cycles, 125);
    // A write transfer costs 60 ns = 150 cycles: 25 more than a read.
    assert_eq!(c.cost.write_transfer_extra_cycles, 25);
    assert_eq!(c.cost.context_switch_cycles, 3750);
    assert_eq!(c.quantum_cycles, 7_500_000);
    assert_eq!(c.migration_cycles, 10_000);
    // A 20 µs leg across CPUs, 12 µs of it on CPUs: an 8 µs wait; the
    // waker's work is the 12 µs less a 2 µs leg on one CPU.
    assert_eq!(c.wake_other_cycles, 20_000);
    assert_eq!(c.wake_other_cpu_cycles, 25_000);
    assert!(c.defaulted.is_empty());
    // Topology::test's caches: 32 KiB L1d, 1 MiB L2, an 8 MiB LLC.
    assert_eq!(
        (c.l1_bytes, c.l2_bytes, c.llc_bytes),
        (32 << 10, 1 << 20, 8 << 20)
    );
}

#[test]
fn an_unmeasured_cost_keeps_its_default_time_and_is_named() {
    let mut p = example();
    p.costs.line_write_transfer = Cost::unavailable("only one CPU allowed");
    p.costs.line_read_transfer = Cost::unavailable("only one CPU allowed");
    p.costs.line_contended = Cost::unavailable("only one CPU allowed");
    let c = p.calibration().unwrap();
    assert_eq!(
        c.defaulted,
        vec!["line_read_transfer", "line_write_transfer"]
    );
    // The default 100 cycles at 3 GHz are 33.3 ns: 83 cycles at 0.4 ns.
    assert_eq!(c.cost.coherence_transfer_cycles, 83);
    assert_eq!(c.cost.write_transfer_extra_cycles, 0);
}

#[test]
fn cache_sizes_come_from_the_topology() {
    use dfsched_core::{Cache, CpuId, DomainSpec};
    let cpus: CpuSet = [CpuId(0), CpuId(1)].into_iter().collect();
    let cache = |level, kind: &str, kib: u64| Cache {
        level,
        kind: kind.into(),
        size_bytes: Some(kib << 10),
    };
    let mut specs: Vec<DomainSpec> = (0..2)
        .map(|c| DomainSpec {
            level: Level::Core,
            cpus: CpuSet::single(CpuId(c)),
            caches: vec![
                cache(1, "Data", 48),
                cache(1, "Instruction", 64),
                cache(2, "Unified", 2048),
            ],
        })
        .collect();
    specs.push(DomainSpec {
        level: Level::Llc,
        cpus: cpus.clone(),
        caches: vec![cache(3, "Unified", 32 << 10)],
    });
    let topo = Topology::new(&cpus, specs).unwrap();
    assert_eq!(
        cache_sizes(&topo, CpuId(1)),
        (Some(48 << 10), Some(2 << 20), Some(32 << 20))
    );
    let c = MachineProfile::example(topo).calibration().unwrap();
    assert_eq!(
        (c.l1_bytes, c.l2_bytes, c.llc_bytes),
        (48 << 10, 2 << 20, 32 << 20)
    );
}

#[test]
fn a_profile_without_the_wake_up_cpu_time_parses_and_keeps_the_whole_leg_as_latency() {
    // A profile written before `wake_other_cpu_time` existed.
    let mut v = serde_json::to_value(example()).unwrap();
    v["costs"]
        .as_object_mut()
        .unwrap()
        .remove("wake_other_cpu_time");
    let p: MachineProfile = serde_json::from_value(v).unwrap();
    assert!(p.costs.wake_other_cpu_time.median_ns.is_none());
    let c = p.calibration().unwrap();
    assert_eq!(c.defaulted, vec!["wake_other_cpu_time"]);
    assert_eq!(
        c.wake_other_cycles, 50_000,
        "20 µs at 0.4 ns, all of it a wait"
    );
    assert_eq!(c.wake_other_cpu_cycles, 0);
}
