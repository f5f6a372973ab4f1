//! Sanity tests of the FP model: known closed forms, bounds, monotonicity,
//! agreement of the MVA recursion with the product form, and the bus.

use super::*;

fn params(processors: u32, tasks: u32, reload_time: f64) -> FixedProcessorParams {
    FixedProcessorParams {
        processors,
        tasks,
        demand: 1.0,
        think_time: 1.0,
        reload_time,
        footprint_blocks: 300,
        cache: CacheGeometry { sets: 256, ways: 4 },
        bus_f_ba: None,
    }
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * b.abs().max(1e-300)
}

#[test]
fn one_task_gets_the_single_task_closed_form() {
    let p = params(4, 1, 0.8);
    let r0 = reload_ratios(300, 256, 4, 0).unwrap()[0];
    let s = 1.0 + 0.8 * r0;
    let sol = fixed_processor(&p).unwrap();
    assert!(close(sol.throughput, 1.0 / (s + 1.0), 1e-12));
    assert!(close(sol.response, s, 1e-12));
    assert!(
        close(sol.response_second_moment, 2.0 * s * s, 1e-12),
        "exponential service"
    );
    assert!(close(sol.mean_reload_ratio, r0, 1e-12));
    // F = 300 in 1024 lines has self-conflicts, but they are the task's
    // own: alone on its processor it never reloads (R(0) = 0, issue 12).
    assert_eq!(r0, 0.0);
    assert!(close(sol.response, 1.0, 1e-12), "s = D");
}

#[test]
fn with_at_most_one_task_per_processor_nobody_waits() {
    let sol = fixed_processor(&params(8, 8, 1.0)).unwrap();
    for pt in &sol.per_population {
        assert!(close(pt.response, sol.per_population[0].response, 1e-12));
        assert!(close(
            pt.throughput,
            f64::from(pt.tasks) * sol.per_population[0].throughput,
            1e-12
        ));
    }
}

#[test]
fn without_reloads_it_is_the_textbook_machine_repairman_model() {
    // C = 0: each processor is an M/M/1//n queue. For n = 2, D = Z = 1:
    // P(0) ∝ 1/2, P(1) ∝ 1, P(2) ∝ 1 → U = 4/5, X = 4/5 per processor.
    let sol = fixed_processor(&params(3, 6, 0.0)).unwrap();
    assert!(close(sol.throughput, 3.0 * 0.8, 1e-12));
    assert!(
        close(sol.response, 2.0 / 0.8 - 1.0, 1e-12),
        "Little: T = n/X − Z"
    );
}

#[test]
fn throughput_rises_with_tasks_when_reloads_are_cheap_or_rare() {
    // No reload cost: the classic closed network, monotone in N.
    let free = fixed_processor(&params(4, 60, 0.0)).unwrap();
    // The paper's cache and footprint: R stays small at these loads.
    let paper = fixed_processor(&FixedProcessorParams::paper(160, 1.0)).unwrap();
    for sol in [free, paper] {
        for w in sol.per_population.windows(2) {
            assert!(w[1].throughput >= w[0].throughput - 1e-12, "{w:?}");
        }
    }
}

#[test]
fn a_thrashing_cache_makes_more_tasks_slower() {
    // F = 300 blocks in a 1024-line cache with C = D: a fourth task per
    // processor adds more reload time than it removes idle time (§V-A:
    // "as the system load continues to rise … significant degradation").
    let sol = fixed_processor(&params(4, 16, 1.0)).unwrap();
    let x = |n: usize| sol.per_population[n - 1].throughput;
    assert!(x(12) > x(16), "X(12) = {}, X(16) = {}", x(12), x(16));
}

#[test]
fn every_population_respects_the_bounds_and_littles_law() {
    let sol = fixed_processor(&params(4, 60, 1.0)).unwrap();
    assert_eq!(sol.per_population.len(), 60);
    let r_max = *sol.reload_ratios.last().unwrap();
    for pt in &sol.per_population {
        let n = f64::from(pt.tasks);
        // Never faster than the demand alone allows.
        assert!(pt.throughput <= (n / 2.0).min(4.0) + 1e-12);
        // The busiest processor holds ⌈n/4⌉ tasks; at worst each visit
        // queues behind all of them and pays the largest reload.
        let most = (pt.tasks.div_ceil(4)) as f64;
        assert!(pt.throughput >= most / (most * (1.0 + r_max) + 1.0) - 1e-12);
        assert!(pt.cpu_utilization <= 1.0 + 1e-12);
        // Little's law over the whole network.
        assert!(close(pt.throughput * (pt.response + 1.0), n, 1e-9));
        // A second moment is at least the square of the mean.
        assert!(pt.response_second_moment >= pt.response * pt.response);
    }
    let last = sol.per_population.last().unwrap();
    assert_eq!(last.throughput, sol.throughput);
    assert!(sol.throughput < 4.0, "bounded by M/D");
}

#[test]
fn more_reload_time_means_less_throughput() {
    let xs: Vec<f64> = [0.0, 0.25, 0.5, 1.0]
        .iter()
        .map(|&c| fixed_processor(&params(4, 16, c)).unwrap().throughput)
        .collect();
    assert!(xs.windows(2).all(|w| w[1] < w[0]), "{xs:?}");
}

#[test]
fn without_think_time_every_visit_follows_all_other_tasks() {
    // Z = 0: the queue always holds all n tasks, so i = n − 1 on every visit
    // and the model is exact: X = M / (D + C·R(n−1)).
    let mut p = params(2, 10, 1.0);
    p.think_time = 0.0;
    let sol = fixed_processor(&p).unwrap();
    let r4 = reload_ratios(300, 256, 4, 4).unwrap()[4];
    assert!(close(sol.throughput, 2.0 / (1.0 + r4), 1e-12));
    assert!(close(sol.mean_reload_ratio, r4, 1e-12));
}

#[test]
fn mva_recursion_agrees_with_the_product_form() {
    let p = params(1, 7, 0.6);
    let r = reload_ratios(300, 256, 4, 6).unwrap();
    let st = Stations::new(&p, &r);
    let sol = st.solve(7, 1.0).unwrap();
    let s = sol.utilization / sol.throughput;
    let dist = st.queue_distribution(7, s);
    assert!(close(sol.utilization, 1.0 - dist[0], 1e-12));
    let q: f64 = dist.iter().enumerate().map(|(k, pk)| k as f64 * pk).sum();
    assert!(close(sol.response, q / sol.throughput, 1e-12));
}

#[test]
fn the_bus_slows_fp_down_and_can_saturate() {
    let mut p = params(16, 64, 1.0);
    let free = fixed_processor(&p).unwrap();
    p.bus_f_ba = Some(0.1);
    let bus = fixed_processor(&p).unwrap();
    let u = bus.bus_utilization.unwrap();
    assert!(u > 0.0 && u < 1.0 && !bus.bus_saturated);
    assert!(bus.throughput < free.throughput);
    // The fixed point holds: eq. 9 of the solution returns U_bus.
    let again = super::super::bus::bus_utilization(
        16,
        0.1,
        1.0,
        bus.mean_reload_ratio,
        1.0,
        bus.cpu_utilization,
    );
    assert!(close(again, u, 1e-6), "{again} vs {u}");
    // Every reload on the bus, many processors, huge footprints: saturated.
    let mut p = params(64, 512, 1.0);
    p.footprint_blocks = 5000;
    p.bus_f_ba = Some(1.0);
    let sat = fixed_processor(&p).unwrap();
    assert!(sat.bus_saturated);
    assert_eq!(sat.bus_utilization, Some(1.0));
}

#[test]
fn the_papers_setting_shows_fp_nearly_flat_under_heavy_load() {
    // §V-A: "although the FP curve appears to remain constant, it does
    // decrease with increasing C".
    let x0 = fixed_processor(&FixedProcessorParams::paper(128, 0.0)).unwrap();
    let x1 = fixed_processor(&FixedProcessorParams::paper(128, 1.0)).unwrap();
    assert!(x1.throughput < x0.throughput);
    assert!(
        x1.throughput > 0.85 * x0.throughput,
        "{} vs {}",
        x1.throughput,
        x0.throughput
    );
}

#[test]
fn bad_parameters_are_refused() {
    let ok = params(2, 4, 0.5);
    let mut bad = ok;
    bad.processors = 0;
    assert!(fixed_processor(&bad).is_err());
    let mut bad = ok;
    bad.tasks = 0;
    assert!(fixed_processor(&bad).is_err());
    let mut bad = ok;
    bad.demand = 0.0;
    assert!(fixed_processor(&bad).is_err());
    let mut bad = ok;
    bad.think_time = f64::NAN;
    assert!(fixed_processor(&bad).is_err());
    let mut bad = ok;
    bad.reload_time = -1.0;
    assert!(fixed_processor(&bad).is_err());
    let mut bad = ok;
    bad.footprint_blocks = 0;
    assert_eq!(
        fixed_processor(&bad).unwrap_err(),
        AnalyticError::EmptyFootprint
    );
    let mut bad = ok;
    bad.bus_f_ba = Some(1.5);
    assert!(fixed_processor(&bad).is_err());
    let mut bad = ok;
    bad.cache.ways = 0;
    assert!(fixed_processor(&bad).is_err());
}

#[test]
fn the_result_serializes_with_every_population() {
    let sol = fixed_processor(&params(2, 3, 0.5)).unwrap();
    let v: serde_json::Value = serde_json::to_value(&sol).unwrap();
    assert_eq!(v["per_population"].as_array().unwrap().len(), 3);
    assert!(v["throughput"].as_f64().unwrap() > 0.0);
}
