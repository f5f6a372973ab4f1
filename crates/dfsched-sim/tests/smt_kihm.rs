//! The acceptance lines of Kihm et al.'s SMT co-scheduling that synthetic
//! workloads can reach, each on the paper's machine with a quarter of its
//! L2 (`SmtConfig::quarter`: 128 KiB, 4 sets per super-set, 250 000-cycle
//! intervals) so that a debug build runs them in seconds. One core with
//! two contexts and four threads, as in the paper's §4.1.
//!
//! Every run is deterministic (seeded); no assertion is on time.

use dfsched_sim::smt::compare::{compare, Comparison, PolicyChoice};
use dfsched_sim::smt::config::SmtConfig;
use dfsched_sim::smt::run::RunReport;
use dfsched_sim::smt::workload::{self, Workload};

fn machine(quanta: u32) -> SmtConfig {
    SmtConfig {
        quanta,
        ..SmtConfig::quarter()
    }
}

fn mix(cfg: &SmtConfig, spec: &str) -> Workload {
    workload::mix(&cfg.kernel_shape(4), spec, 1).expect("a valid mix")
}

fn run(cfg: &SmtConfig, w: &Workload, policies: &[PolicyChoice]) -> Comparison {
    compare(cfg, w, policies, |_| {}).expect("a valid configuration")
}

fn get<'a>(c: &'a Comparison, name: &str) -> &'a RunReport {
    &c.policies[name]
}

/// The three ways to order two threads hot in the lower half of the cache
/// and two hot in the upper half. Round robin's fixed rotation pairs them
/// right in every quantum for one order and in half the quanta for the
/// other two, so each is checked.
const ORDERS: [&str; 3] = [
    "slice0/2,slice0/2,slice1/2,slice1/2",
    "slice0/2,slice1/2,slice0/2,slice1/2",
    "slice0/2,slice1/2,slice1/2,slice0/2",
];

#[test]
fn complementary_kihm_pairs_right_and_beats_round_robin_where_it_mispairs() {
    let cfg = machine(60);
    let mut mispaired = 0;
    for spec in ORDERS {
        let c = run(
            &cfg,
            &mix(&cfg, spec),
            &[PolicyChoice::Kihm, PolicyChoice::RoundRobin],
        );
        let (k, rr) = (get(&c, "kihm"), get(&c, "round-robin"));
        let right = k.right_pairing.expect("slices are labelled");
        assert!(right >= 0.95, "{spec}: right pairing {right}");
        // Never worse than round robin (2% for the first, vector-less
        // quanta).
        assert!(
            k.itko as f64 <= rr.itko as f64 * 1.02,
            "{spec}: {} vs {}",
            k.itko,
            rr.itko
        );
        assert!(
            k.relative_throughput >= rr.relative_throughput * 0.98,
            "{spec}"
        );
        if rr.right_pairing.expect("labelled") < 0.9 {
            mispaired += 1;
            assert!(
                (k.itko as f64) <= 0.5 * rr.itko as f64,
                "{spec}: ITKO {} is not half of round robin's {}",
                k.itko,
                rr.itko
            );
            assert!(
                k.relative_throughput >= 1.10 * rr.relative_throughput,
                "{spec}: relative throughput {} vs round robin's {}",
                k.relative_throughput,
                rr.relative_throughput
            );
        }
        // Fig. 12: the activity pick is never a poor one by its own measure.
        assert_eq!(k.decisions.poor, 0, "{spec}");
    }
    assert_eq!(mispaired, 2, "round robin mispairs two of the three orders");
}

#[test]
fn complementary_kihm_is_within_two_percent_of_the_best_static_pairing() {
    let cfg = machine(100);
    let c = run(
        &cfg,
        &mix(&cfg, ORDERS[1]),
        &[PolicyChoice::Kihm, PolicyChoice::BestStatic],
    );
    let (k, best) = (get(&c, "kihm"), get(&c, "best-static"));
    let groups = &c.best_static.as_ref().expect("asked for").groups;
    // ORDERS[1]: thread i is hot in slice i mod 2.
    assert!(
        groups.iter().all(|g| g.len() == 2 && g[0] % 2 != g[1] % 2),
        "the static optimum pairs the halves: {groups:?}"
    );
    assert!(
        k.relative_throughput >= 0.98 * best.relative_throughput,
        "{} vs best static {}",
        k.relative_throughput,
        best.relative_throughput
    );
}

#[test]
fn uniform_threads_leave_kihm_within_one_percent_of_round_robin() {
    let cfg = machine(60);
    let w = workload::uniform(&cfg.kernel_shape(4), 4, 2, 1);
    let c = run(&cfg, &w, &[PolicyChoice::Kihm, PolicyChoice::RoundRobin]);
    let (k, rr) = (get(&c, "kihm"), get(&c, "round-robin"));
    let ratio = k.relative_throughput / rr.relative_throughput;
    assert!(
        (0.99..=1.01).contains(&ratio),
        "kihm / round robin = {ratio}"
    );
    let itko = k.itko as f64 / rr.itko as f64;
    assert!((0.99..=1.01).contains(&itko), "ITKO ratio {itko}");
}

#[test]
fn phased_threads_make_dynamic_pairing_beat_the_best_static_one_by_five_percent() {
    let cfg = machine(60);
    let w = workload::phased(&cfg.kernel_shape(4), 4, 2, 16, 2);
    let c = run(&cfg, &w, &[PolicyChoice::Kihm, PolicyChoice::BestStatic]);
    let (k, best) = (get(&c, "kihm"), get(&c, "best-static"));
    assert!(
        k.relative_throughput >= 1.05 * best.relative_throughput,
        "{} vs best static {}",
        k.relative_throughput,
        best.relative_throughput
    );
    assert!(
        k.itko as f64 <= 0.95 * best.itko as f64,
        "ITKO {} vs best static {}",
        k.itko,
        best.itko
    );
}

/// One phased mix only: the gains of single runs differ by up to a third
/// between seeds because decisions diverge, and over other seeds and at the
/// paper's full size the bar is not always met (docs/kihm.md gives the
/// figures); this locks the mechanism (more bits never needed here), not a
/// general claim.
#[test]
fn one_and_two_bit_vectors_reach_ninety_percent_of_the_eight_bit_gain_on_one_phased_mix() {
    // The gain over round robin on phased threads, whose counts vary.
    let base = machine(60);
    let w = workload::phased(&base.kernel_shape(4), 4, 2, 16, 2);
    let rr = run(&base, &w, &[PolicyChoice::RoundRobin]);
    let rr = get(&rr, "round-robin");
    let gain = |bits: u8| {
        let cfg = SmtConfig {
            bits,
            ..base.clone()
        };
        let c = run(&cfg, &w, &[PolicyChoice::Kihm]);
        let k = get(&c, "kihm");
        (
            k.relative_throughput - rr.relative_throughput,
            rr.itko as f64 - k.itko as f64,
        )
    };
    let eight = gain(8);
    assert!(
        eight.0 > 0.0 && eight.1 > 0.0,
        "8 bits gain nothing: {eight:?}"
    );
    for bits in [1, 2] {
        let g = gain(bits);
        assert!(
            g.0 >= 0.9 * eight.0,
            "{bits} bits: throughput gain {} vs {}",
            g.0,
            eight.0
        );
        assert!(
            g.1 >= 0.9 * eight.1,
            "{bits} bits: ITKO saved {} vs {}",
            g.1,
            eight.1
        );
    }
}

#[test]
fn same_seed_same_report_and_the_seed_matters() {
    let cfg = machine(8);
    let policies = [PolicyChoice::Random, PolicyChoice::Shuffled];
    let w = workload::complementary(&cfg.kernel_shape(4), 4, 2, 1);
    let a = run(&cfg, &w, &policies);
    let b = run(&cfg, &w, &policies);
    assert_eq!(a, b);
    let other = SmtConfig {
        seed: 2,
        ..cfg.clone()
    };
    let c = run(&other, &w, &policies);
    assert_ne!(get(&a, "random"), get(&c, "random"));
}

#[test]
fn random_4k_pages_shrink_the_gain_that_virtual_vectors_promise() {
    // The caveat: the paper's vectors are virtual (Valgrind), the
    // L2 is physically indexed. With pages placed at random the virtual
    // vectors still say "complementary" and the policy still pairs by them,
    // but the halves no longer exist in the cache, and most of the gain
    // over round robin goes.
    use dfsched_sim::smt::config::VectorSource;
    use dfsched_sim::smt::mapping::Mapping;
    let gain = |mapping| {
        let cfg = SmtConfig {
            mapping,
            vector_source: VectorSource::Virtual,
            ..machine(60)
        };
        let c = run(
            &cfg,
            &mix(&cfg, ORDERS[0]), // an order round robin mispairs
            &[PolicyChoice::Kihm, PolicyChoice::RoundRobin],
        );
        let (k, rr) = (get(&c, "kihm"), get(&c, "round-robin"));
        assert!(
            k.right_pairing.unwrap() >= 0.95,
            "{mapping:?}: pairs by the vectors"
        );
        k.relative_throughput / rr.relative_throughput - 1.0
    };
    let identity = gain(Mapping::Identity);
    let random = gain(Mapping::Random4k);
    assert!(identity > 0.2, "identity gain {identity}");
    assert!(
        random < 0.5 * identity,
        "random 4 KiB gain {random} vs identity {identity}"
    );
}

/// The vectors' fill says what the picker had to go on: threads hot in
/// one half of the cache fill half their vectors, never all or none;
/// uniform threads, busy everywhere, fill all of them (a picker that sees
/// only full vectors cannot tell where threads work).
#[test]
fn vector_fill_is_half_for_half_cache_threads_and_full_for_uniform_ones() {
    let cfg = machine(40);
    let c = run(
        &cfg,
        &mix(&cfg, ORDERS[1]),
        &[PolicyChoice::Kihm, PolicyChoice::RoundRobin],
    );
    for t in &get(&c, "kihm").threads {
        let v = t.vectors;
        assert!(t.runs > 0, "{} never ran", t.name);
        assert!(
            (0.45..=0.55).contains(&v.mean_fill),
            "{}: fill {}",
            t.name,
            v.mean_fill
        );
        assert_eq!((v.all_hot, v.none_hot), (0.0, 0.0), "{}", t.name);
    }
    let w = workload::uniform(&cfg.kernel_shape(4), 4, 2, 1);
    let c = run(&cfg, &w, &[PolicyChoice::Kihm, PolicyChoice::RoundRobin]);
    for t in &get(&c, "round-robin").threads {
        assert!(t.runs > 0, "{} never ran", t.name);
        assert!(t.vectors.all_hot > 0.9, "{}: {:?}", t.name, t.vectors);
        assert!(t.vectors.mean_fill > 0.9, "{}: {:?}", t.name, t.vectors);
    }
}

/// Fig. 2's classes: threads hot in one half of the cache put their L2
/// requests in a half, an eighth-of-the-cache thread (`slice3/8`) in an
/// eighth, a uniform thread in no half (it is spread, or below the median
/// when the others are busier), and a light thread is below the run's
/// median; every thread's shares sum to one.
#[test]
fn concentration_classes_follow_where_the_kernels_are_hot() {
    let cfg = machine(40);
    let w = workload::mix(
        &cfg.kernel_shape(4),
        "slice0/2,slice1/2,uniform,slice3/8,light",
        1,
    )
    .unwrap();
    let c = run(&cfg, &w, &[PolicyChoice::RoundRobin]);
    let threads = &get(&c, "round-robin").threads;
    let by = |name: &str| {
        threads
            .iter()
            .find(|t| t.name.ends_with(name))
            .unwrap_or_else(|| panic!("{name} in {threads:?}"))
            .concentration
    };
    for t in threads {
        assert!(t.runs > 5, "{} ran {}", t.name, t.runs);
        let k = t.concentration;
        let sum = k.low + k.spread + k.half + k.eighth;
        assert!((sum - 1.0).abs() < 1e-9, "{}: {k:?}", t.name);
    }
    for half in [by("slice0/2"), by("slice1/2")] {
        assert_eq!((half.spread, half.eighth), (0.0, 0.0), "{half:?}");
        assert!(half.half > 0.4, "{half:?}");
    }
    let eighth = by("slice3/8");
    assert!(eighth.eighth > 0.9, "{eighth:?}");
    let uniform = by("uniform");
    assert_eq!((uniform.half, uniform.eighth), (0.0, 0.0), "{uniform:?}");
    assert!(uniform.spread > 0.0, "{uniform:?}");
    assert_eq!(by("light").low, 1.0);
}
