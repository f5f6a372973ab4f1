//! Measures the memory model's speed: random reads and writes by every CPU
//! of a machine over a few shared footprints (data fragments), with private
//! caches, a shared LLC per domain and coherence.
//!
//! Run: `cargo run --release -p dfsched-sim --example machine_throughput [accesses]`
//! Prints accesses per second of wall time and the miss mix. Not a test.

use dfsched_core::{CpuId, Level, Topology};
use dfsched_sim::{AccessKind, Machine, MachineConfig, Owner, SimRng};
use std::time::Instant;

fn main() {
    let accesses: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000_000);
    // 2 LLCs × 8 cores: 16 CPUs; 1 MiB private, 8 MiB per LLC.
    let topo = Topology::test(1, 2, 8, 1);
    let cfg = MachineConfig::default().with_shared(Level::Llc, MachineConfig::typical_llc());
    let mut m = Machine::new(&topo, &cfg).expect("valid machine");
    let mut rng = SimRng::new(1);
    // 16 DFs of 512 KiB; CPUs c and c + 8 (in different LLCs) share DFs
    // 2·(c mod 8) and 2·(c mod 8) + 1, so both capacity and coherence show.
    let df_bytes = 512 * 1024u64;
    let t0 = Instant::now();
    for _ in 0..accesses {
        let cpu = rng.below(16) as u32;
        let df = u64::from(cpu % 8) * 2 + rng.below(2);
        let addr = df * df_bytes + rng.below(df_bytes);
        let kind = if rng.chance(0.1) {
            AccessKind::Write
        } else {
            AccessKind::Read
        };
        let _ = m
            .access(CpuId(cpu), addr, kind, Owner(df))
            .expect("known CPU");
    }
    let secs = t0.elapsed().as_secs_f64();
    let t = m.total_stats();
    println!(
        "{accesses} accesses in {secs:.3} s = {:.2} M accesses/s",
        accesses as f64 / secs / 1e6
    );
    println!(
        "private hits {} shared hits {} transfers {} memory {} | misses cold {} reload {} capacity {} coherence {}",
        t.private_hits,
        t.shared_hits,
        t.coherence_transfers,
        t.memory_fetches,
        t.misses.cold,
        t.misses.reload,
        t.misses.capacity,
        t.misses.coherence
    );
}
