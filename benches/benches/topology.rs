//! Start-up cost on large machines: `read_topology` on generated sysfs trees
//! of 4,096 and 8,192 CPUs (2 nodes, 32 or 64 LLCs of 32 SMT2 cores: an
//! EPYC-like shape at the kernel's `NR_CPUS` limit), which is what
//! `dfsched topology`, `dfsched_init()` and the agent spend reading the
//! machine. The goal is ≤ 50 ms at 8,192 CPUs for the whole
//! `dfsched topology` process; this measures the read and the tree build in
//! process (the process adds exec and printing: `dfsched bench topology`
//! times the whole process, README "Topology at scale"). Trees are written
//! once per size in a temp dir (about a second each) and read warm from
//! the page cache.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use dfsched::sysfs::{read_topology, write_test_tree};
use std::path::Path;

/// A generated tree in a fresh directory of ours (a random name no other
/// user can have made first), removed when dropped.
struct Tree(tempfile::TempDir);

impl Tree {
    fn new(nodes: u32, llcs: u32, cores: u32, smt: u32) -> Tree {
        let dir = tempfile::Builder::new()
            .prefix(&format!(
                "dfsched-bench-topology-{}-",
                nodes * llcs * cores * smt
            ))
            .tempdir()
            .expect("a temp dir");
        write_test_tree(dir.path(), nodes, llcs, cores, smt).expect("the tree is written");
        Tree(dir)
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

fn read(c: &mut Criterion) {
    let mut group = c.benchmark_group("topology/read");
    group.sample_size(10);
    for (llcs, cpus) in [(32u32, 4096u32), (64, 8192)] {
        let tree = Tree::new(2, llcs, 32, 2);
        let t = read_topology(tree.path()).expect("the tree reads");
        assert_eq!(t.nr_cpus(), cpus as usize);
        group.bench_with_input(BenchmarkId::from_parameter(cpus), tree.path(), |b, root| {
            b.iter(|| read_topology(root).expect("the tree reads"))
        });
    }
    group.finish();
}

criterion_group!(benches, read);
criterion_main!(benches);
