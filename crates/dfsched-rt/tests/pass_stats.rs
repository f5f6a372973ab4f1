//! The per-pass CPU record of `dfsched_stats_json` (`recent_pass_cpu_ns`):
//! every balancer pass adds one sample, the samples add up to
//! `balance_cpu_ns`, and the JSON carries them. What `dfsched bench
//! overhead` takes its per-pass median, p99 and maximum from. No timing is
//! asserted.

mod common;

use common::*;
use dfsched::agent::AgentMode;
use dfsched::{Runtime, RuntimeConfig};

#[test]
fn every_pass_leaves_one_cpu_sample_and_they_sum_to_the_total() {
    let rt = Runtime::start(RuntimeConfig {
        agent: AgentMode::Off,
        ..quiet()
    })
    .unwrap();
    let before = rt.stats();
    assert_eq!(
        before.recent_pass_cpu_ns.recorded, 0,
        "no balancer thread runs"
    );
    for _ in 0..5 {
        rt.balance_now().unwrap();
    }
    let s = rt.stats();
    assert_eq!(s.recent_pass_cpu_ns.recorded, 5, "{s:?}");
    assert_eq!(s.engine.balance_passes, 5);
    let samples = s
        .recent_pass_cpu_ns
        .since(before.recent_pass_cpu_ns.recorded);
    assert_eq!(samples.len(), 5);
    assert_eq!(samples.iter().sum::<u64>(), s.balance_cpu_ns);
    let json: serde_json::Value = serde_json::from_str(&rt.stats_json()).unwrap();
    assert_eq!(json["recent_pass_cpu_ns"]["recorded"], 5);
    assert_eq!(
        json["recent_pass_cpu_ns"]["cpu_ns"]
            .as_array()
            .map(Vec::len),
        Some(5)
    );
    rt.shutdown();
}
