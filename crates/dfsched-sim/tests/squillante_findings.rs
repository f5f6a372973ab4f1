//! Squillante & Lazowska's findings (§V), each checked on a small sweep of
//! the simulated closed network at the paper's setting (M = 32, D = Z = 1,
//! F = 1900 blocks, 4-way 8K-set cache), with fixed seeds and short runs so
//! the whole file stays fast in a debug build. "Light" load is N = 40 tasks
//! and "heavy" N = 128 (4 per processor); the pause finding uses N = 64,
//! where the paper reports the pause paying off ("as system load increases
//! somewhat").
//!
//! Each comparison is of means over replications; the margins asserted are
//! several times the 98% half-widths these runs report (printed with
//! `--nocapture`).

use dfsched_core::dispatch::queue::QueuePolicy;
use dfsched_sim::analytic::mva::{fixed_processor, FixedProcessorParams};
use dfsched_sim::closed_network::{simulate, ClosedNetworkParams, ClosedNetworkResult};

const LIGHT: u32 = 40;
const HEAVY: u32 = 128;

fn point(policy: &str, tasks: u32, c: f64, pause: bool) -> ClosedNetworkResult {
    let p = ClosedNetworkParams {
        replications: 3,
        warmup_time: 50.0,
        run_time: 300.0,
        pause,
        seed: 7,
        ..ClosedNetworkParams::paper(policy.parse::<QueuePolicy>().unwrap(), tasks, c)
    };
    let r = simulate(&p).unwrap();
    println!(
        "{policy:>6}{} N={tasks:3} C={c:.2}: X {:.3} ± {:.3}  T {:.3}  T² {:.2} ± {:.2}",
        if pause { "+pause" } else { "" },
        r.throughput.mean,
        r.throughput.half_width_98.unwrap(),
        r.response.mean,
        r.response_second_moment.mean,
        r.response_second_moment.half_width_98.unwrap(),
    );
    r
}

fn x(policy: &str, tasks: u32, c: f64) -> f64 {
    point(policy, tasks, c, false).throughput.mean
}

#[test]
fn fcfs_beats_fp_under_light_load_at_small_c_and_fp_wins_under_heavy_load_at_large_c() {
    assert!(x("fcfs", LIGHT, 0.1) > 1.03 * x("fp", LIGHT, 0.1));
    assert!(x("fp", HEAVY, 1.0) > 1.3 * x("fcfs", HEAVY, 1.0));
}

#[test]
fn lp_tracks_fcfs_under_light_load_and_fp_under_heavy_load() {
    let (lp, fcfs) = (x("lp", LIGHT, 0.1), x("fcfs", LIGHT, 0.1));
    assert!((lp - fcfs).abs() < 0.02 * fcfs, "LP {lp} vs FCFS {fcfs}");
    for c in [0.5, 1.0] {
        let (lp, fp, fcfs) = (x("lp", HEAVY, c), x("fp", HEAVY, c), x("fcfs", HEAVY, c));
        assert!((lp - fp).abs() < 0.1 * fp, "C={c}: LP {lp} vs FP {fp}");
        assert!(
            (lp - fp).abs() < 0.25 * (lp - fcfs).abs(),
            "C={c}: LP nearer FCFS"
        );
    }
}

#[test]
fn mi_is_at_least_lp() {
    for (n, c) in [(LIGHT, 0.5), (LIGHT, 1.0), (HEAVY, 0.5), (HEAVY, 1.0)] {
        let (mi, lp) = (x("mi", n, c), x("lp", n, c));
        assert!(mi >= lp, "N={n} C={c}: MI {mi} < LP {lp}");
    }
}

#[test]
fn lmi_with_one_association_is_lp_and_approaches_mi_as_a_grows() {
    let c = 1.0;
    let (lp, lmi1) = (x("lp", LIGHT, c), x("lmi:1", LIGHT, c));
    assert!((lmi1 - lp).abs() < 0.02 * lp, "LMI(1) {lmi1} vs LP {lp}");
    let mi = x("mi", LIGHT, c);
    let gaps: Vec<f64> = [1, 2, 4, 8]
        .iter()
        .map(|a| mi - x(&format!("lmi:{a}"), LIGHT, c))
        .collect();
    assert!(gaps.windows(2).all(|w| w[1] < w[0]), "gaps to MI {gaps:?}");
    assert!(gaps[3] < 0.02 * mi, "LMI(8) is essentially MI: {gaps:?}");
}

#[test]
fn mi_has_a_far_larger_t2_than_lp_at_heavy_load_and_lmr_less_than_lmi() {
    let t2 = |p: &str| point(p, HEAVY, 1.0, false).response_second_moment.mean;
    let (mi, lp) = (t2("mi"), t2("lp"));
    assert!(mi > 1.3 * lp, "MI T² {mi} vs LP {lp}");
    for a in [2, 4] {
        let (lmr, lmi) = (t2(&format!("lmr:{a}")), t2(&format!("lmi:{a}")));
        assert!(lmr < 0.8 * lmi, "A={a}: LMR T² {lmr} vs LMI {lmi}");
    }
}

#[test]
fn the_pause_heuristic_lifts_lp_and_lmi_under_heavier_load() {
    for policy in ["lp", "lmi:2"] {
        let plain = point(policy, 64, 1.0, false);
        let paused = point(policy, 64, 1.0, true);
        assert!(paused.pausing && !plain.pausing);
        assert!(
            paused.throughput.mean > 1.04 * plain.throughput.mean,
            "{policy}: {} with pause vs {} without",
            paused.throughput.mean,
            plain.throughput.mean
        );
    }
    // Below the threshold C ≥ (M/N)·Z = 0.5 the heuristic changes nothing.
    let below = point("lp", 64, 0.4, true);
    assert!(!below.pausing);
    assert_eq!(below.throughput, point("lp", 64, 0.4, false).throughput);
}

#[test]
fn with_bus_interference_fcfs_saturates_the_bus_at_large_c() {
    let bus = |policy: &str, c: f64| {
        let p = ClosedNetworkParams {
            replications: 2,
            warmup_time: 30.0,
            run_time: 150.0,
            bus_f_ba: Some(0.1),
            ..ClosedNetworkParams::paper(policy.parse::<QueuePolicy>().unwrap(), HEAVY, c)
        };
        let r = simulate(&p).unwrap();
        println!(
            "{policy} C={c}: U_bus {:?} saturated {} X {:.3}",
            r.bus_utilization, r.bus_saturated, r.throughput.mean
        );
        r
    };
    let fcfs = bus("fcfs", 1.0);
    assert!(fcfs.bus_saturated && fcfs.bus_utilization == Some(1.0));
    let small = bus("fcfs", 0.2);
    assert!(!small.bus_saturated);
    let fp = bus("fp", 1.0);
    assert!(!fp.bus_saturated && fp.bus_utilization.unwrap() < 0.5);
}

#[test]
fn mva_for_fp_is_within_3_percent_of_the_simulated_throughput() {
    for (tasks, c) in [(64, 1.0), (128, 0.5)] {
        let p = ClosedNetworkParams {
            processors: 8,
            replications: 4,
            warmup_time: 100.0,
            run_time: 1500.0,
            ..ClosedNetworkParams::paper(QueuePolicy::FixedProcessor, tasks, c)
        };
        let sim = simulate(&p).unwrap();
        let mva = fixed_processor(&FixedProcessorParams {
            processors: 8,
            ..FixedProcessorParams::paper(tasks, c)
        })
        .unwrap();
        let off = (mva.throughput - sim.throughput.mean).abs() / sim.throughput.mean;
        println!(
            "FP N={tasks} C={c}: MVA {:.4} sim {:.4}",
            mva.throughput, sim.throughput.mean
        );
        assert!(
            off < 0.03,
            "MVA {} vs simulated {}",
            mva.throughput,
            sim.throughput.mean
        );
    }
}
