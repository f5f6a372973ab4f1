//! The sysfs reader against a plain one that reads every file of every CPU
//! and takes nothing from another CPU: on trees a kernel could write (each
//! cache listed alike by all the CPUs it names, at the same index), the
//! reader's shortcuts (a cache read once for all its CPUs, SMT siblings
//! skipped, like caches' level and type, siblings from the L1, the end of
//! the indexes from the link count, parts read on threads) must give the
//! very topology the plain reading gives, so `dfsched topology` and its
//! JSON, which are drawn from the topology alone, print the same bytes.
//!
//! Shapes: `write_test_tree` machines (one with 2,048 CPUs, read in parts
//! on threads where the machine has two CPUs), hybrid parts (SMT P-cores
//! with E-core clusters, either first), a big.LITTLE part (private caches
//! of two sizes, shared alike), SMT4 cores whose L1 serves pairs,
//! an L2 per cluster, caches numbered with a gap, a CPU with a cache more,
//! one without caches, offline CPUs in lists, missing sizes and sibling
//! files, and this machine's own `/sys`.

mod common;

use common::*;
use dfsched::sysfs::{read_topology, read_topology_within};
use dfsched::{Cache, CpuId, CpuSet, Level, Topology};
use dfsched_core::DomainSpec;
use std::collections::HashMap;
use std::path::Path;

/// A file's text, trimmed; `None` if it does not exist.
fn text(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|t| t.trim().to_string())
}

fn cpulist(path: &Path) -> CpuSet {
    text(path)
        .unwrap_or_else(|| panic!("{} is missing", path.display()))
        .parse()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn size(text: &str) -> u64 {
    let (digits, mult) = match text.as_bytes().last() {
        Some(b'K') => (&text[..text.len() - 1], 1 << 10),
        Some(b'M') => (&text[..text.len() - 1], 1 << 20),
        Some(b'G') => (&text[..text.len() - 1], 1 << 30),
        _ => (text, 1),
    };
    digits.parse::<u64>().unwrap() * mult
}

/// The topology under `root` read the plain way: every online CPU's every
/// `cache/indexI` directory (listed, in index order) and its
/// `thread_siblings_list`, each list cut to the online CPUs with the CPU
/// itself added; the distinct caches in the order first met; each core
/// from its first CPU's siblings, else its level-1 caches, else the CPU
/// alone; a cache within its first CPU's core a core domain, one of the
/// top level an LLC, any other an L2; the nodes in number order. (The
/// rules of `dfsched::sysfs`'s module doc, without its shortcuts.)
fn read_plainly(root: &Path) -> Topology {
    let cpu_dir = root.join("sys/devices/system/cpu");
    let online = cpulist(&cpu_dir.join("online"));
    let mut caches: Vec<(CpuSet, Cache)> = Vec::new();
    // Each distinct cache's position in `caches`, by its CPUs and fields.
    let mut seen: HashMap<(CpuSet, u8, String, Option<u64>), usize> = HashMap::new();
    let mut of_cpu: Vec<(CpuId, Vec<usize>, Option<CpuSet>)> = Vec::new();
    for cpu in online.iter() {
        let dir = cpu_dir.join(format!("cpu{}", cpu.0));
        let mut indexes: Vec<usize> = std::fs::read_dir(dir.join("cache"))
            .map(|l| {
                l.flatten()
                    .filter_map(|e| e.file_name().to_str()?.strip_prefix("index")?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        indexes.sort_unstable();
        let mut mine = Vec::new();
        for index in indexes {
            let leaf = dir.join(format!("cache/index{index}"));
            let mut shared = cpulist(&leaf.join("shared_cpu_list")).intersection(&online);
            shared.insert(cpu);
            let cache = Cache {
                level: text(&leaf.join("level")).unwrap().parse().unwrap(),
                kind: text(&leaf.join("type")).unwrap(),
                size_bytes: text(&leaf.join("size")).map(|t| size(&t)),
            };
            let key = (
                shared.clone(),
                cache.level,
                cache.kind.clone(),
                cache.size_bytes,
            );
            let at = *seen.entry(key).or_insert_with(|| {
                caches.push((shared, cache));
                caches.len() - 1
            });
            mine.push(at);
        }
        let siblings_file = dir.join("topology/thread_siblings_list");
        let siblings = text(&siblings_file).map(|_| {
            let mut s = cpulist(&siblings_file).intersection(&online);
            s.insert(cpu);
            s
        });
        of_cpu.push((cpu, mine, siblings));
    }
    let top_level = caches.iter().map(|c| c.1.level).max().unwrap_or(0);
    let mut cores: Vec<CpuSet> = Vec::new();
    let mut core_of: std::collections::BTreeMap<CpuId, usize> = Default::default();
    for (cpu, mine, siblings) in &of_cpu {
        if core_of.contains_key(cpu) {
            continue;
        }
        let core = siblings.clone().unwrap_or_else(|| {
            mine.iter()
                .map(|&i| &caches[i])
                .filter(|c| c.1.level == 1)
                .fold(CpuSet::single(*cpu), |acc, c| acc.union(&c.0))
        });
        for member in core.iter() {
            core_of.entry(member).or_insert(cores.len());
        }
        core_of.insert(*cpu, cores.len());
        cores.push(core);
    }
    let mut specs: Vec<DomainSpec> = cores
        .iter()
        .filter(|c| c.len() > 1)
        .map(|c| DomainSpec {
            level: Level::Core,
            cpus: c.clone(),
            caches: Vec::new(),
        })
        .collect();
    for (shared, cache) in caches {
        let core = &cores[core_of[&shared.first().unwrap()]];
        let level = if shared.is_subset(core) {
            Level::Core
        } else if cache.level == top_level {
            Level::Llc
        } else {
            Level::L2
        };
        specs.push(DomainSpec {
            level,
            cpus: shared,
            caches: vec![cache],
        });
    }
    let node_dir = root.join("sys/devices/system/node");
    let mut nodes: Vec<(u32, CpuSet)> = std::fs::read_dir(&node_dir)
        .map(|l| {
            l.flatten()
                .filter_map(|e| {
                    let n = e.file_name().to_str()?.strip_prefix("node")?.parse().ok()?;
                    Some((n, cpulist(&e.path().join("cpulist")).intersection(&online)))
                })
                .collect()
        })
        .unwrap_or_default();
    nodes.sort_by_key(|n| n.0);
    specs.extend(nodes.into_iter().map(|(_, cpus)| DomainSpec {
        level: Level::Node,
        cpus,
        caches: Vec::new(),
    }));
    Topology::new(&online, specs).expect("the plain reading nests")
}

/// The reader and the plain reading agree on the tree under `root`; and
/// reading only some CPUs (`read_topology_within`, what a process confined
/// to them reads) gives the plain reading restricted to them, for subsets
/// that cut SMT pairs, cores, caches and nodes in every way.
fn agree(root: &Path, what: &str) {
    let fast = read_topology(root).unwrap_or_else(|e| panic!("{what}: {e}"));
    let plain = read_plainly(root);
    assert!(
        fast == plain,
        "{what}: the reader gave\n{fast:#?}\nthe plain reading\n{plain:#?}"
    );
    for within in subsets(plain.cpus()) {
        let part = read_topology_within(root, &within)
            .unwrap_or_else(|e| panic!("{what} within {within}: {e}"));
        let expected = plain.restricted_to(&within).unwrap();
        assert!(
            part == expected,
            "{what} within {within}: the reader gave\n{part:#?}\nthe plain reading restricted\n{expected:#?}"
        );
    }
    // None of them online: the error a process allowed nowhere gets.
    let beyond = CpuSet::single(CpuId(plain.cpus().iter().last().unwrap().0 + 1));
    let err = read_topology_within(root, &beyond).unwrap_err();
    assert!(
        matches!(err, dfsched::Error::NoUsableCpu { .. }),
        "{what}: {err}"
    );
}

/// Sets of CPUs to read a tree within: the first CPU alone, the first two,
/// the first three (a core and half of the next), the first half and the
/// second, every other CPU, every third, the last CPU with one beyond the
/// machine, and all of them.
fn subsets(cpus: &CpuSet) -> Vec<CpuSet> {
    let all: Vec<CpuId> = cpus.iter().collect();
    let of = |pick: &dyn Fn(usize) -> bool| -> CpuSet {
        all.iter()
            .enumerate()
            .filter(|(i, _)| pick(*i))
            .map(|(_, c)| *c)
            .collect()
    };
    let n = all.len();
    let mut last = CpuSet::single(all[n - 1]);
    last.insert(CpuId(all[n - 1].0 + 1));
    let mut sets = vec![
        of(&|i| i == 0),
        of(&|i| i < 2),
        of(&|i| i < 3),
        of(&|i| i < n.div_ceil(2)),
        of(&|i| i >= n / 2),
        of(&|i| i % 2 == 0),
        of(&|i| i % 3 == 1),
        last,
        cpus.clone(),
    ];
    sets.retain(|s| !s.intersection(cpus).is_empty());
    sets
}

fn set(s: &str) -> CpuSet {
    s.parse().unwrap()
}

fn range(first: u32, n: u32) -> String {
    if n == 1 {
        first.to_string()
    } else {
        format!("{first}-{}", first + n - 1)
    }
}

#[test]
fn generated_trees_read_as_every_file_says() {
    let mut shapes = vec![
        (1, 1, 1, 1),
        (1, 1, 2, 1),
        (1, 1, 4, 2),
        (2, 2, 2, 2),
        (2, 4, 8, 2),
        (1, 3, 4, 4),
    ];
    // 2,048 CPUs: read in two parts on two threads where there are two
    // CPUs to run them (a cache may straddle the parts' boundary only on
    // hand-made trees; here the parts' caches meet at it).
    shapes.push((2, 8, 64, 2));
    for (nodes, llcs, cores, smt) in shapes {
        let dir = TempDir::new("oracle-gen");
        dfsched::sysfs::write_test_tree(dir.path(), nodes, llcs, cores, smt).unwrap();
        agree(dir.path(), &format!("{nodes}x{llcs}x{cores}x{smt}"));
    }
}

/// One CPU's caches, for [`write_sysfs`]: level, type, size and the
/// shared list of each, in index order.
fn caches(list: &[(u8, &'static str, &'static str, String)]) -> Vec<FixtureCache<'static>> {
    list.iter()
        .map(|(level, kind, size, shared)| FixtureCache {
            level: *level,
            kind,
            size,
            shared: shared.clone(),
        })
        .collect()
}

/// A hybrid part: `p` SMT2 P-cores (L1d 48K, L1i 32K, L2 2M per core) and
/// `e` E-cores without SMT in clusters of four (L1d 32K, L1i 64K per core,
/// L2 4M per cluster), one L3 over all; the P-cores' CPUs first or last.
fn write_hybrid(dir: &TempDir, p: u32, e: u32, p_first: bool) {
    let total = 2 * p + e;
    let (p_base, e_base) = if p_first { (0, 2 * p) } else { (e, 0) };
    let all = range(0, total);
    let mut cpus = Vec::new();
    for cpu in 0..total {
        let entry = if (p_base..p_base + 2 * p).contains(&cpu) {
            let core = range(cpu / 2 * 2, 2);
            let list = [
                (1, "Data", "48K", core.clone()),
                (1, "Instruction", "32K", core.clone()),
                (2, "Unified", "2048K", core.clone()),
                (3, "Unified", "30M", all.clone()),
            ];
            (cpu, caches(&list), Some(core))
        } else {
            let me = cpu.to_string();
            let cluster = range(e_base + (cpu - e_base) / 4 * 4, 4);
            let list = [
                (1, "Data", "32K", me.clone()),
                (1, "Instruction", "64K", me.clone()),
                (2, "Unified", "4096K", cluster),
                (3, "Unified", "30M", all.clone()),
            ];
            (cpu, caches(&list), Some(me))
        };
        cpus.push(entry);
    }
    write_sysfs(dir, &all, &cpus, &[&all]);
}

#[test]
fn hybrid_parts_read_as_every_file_says() {
    for p_first in [true, false] {
        let dir = TempDir::new("oracle-hybrid");
        write_hybrid(&dir, 4, 8, p_first);
        agree(dir.path(), &format!("hybrid, P-cores first: {p_first}"));
        let t = read_topology(dir.path()).unwrap();
        let e_cluster = if p_first { "8-11" } else { "0-3" };
        let cluster = t.domain(t.smallest_holding(&set(e_cluster)));
        assert_eq!((cluster.level, &cluster.cpus), (Level::L2, &set(e_cluster)));
    }
}

/// A big.LITTLE part: four big and four little cores, no SMT, every L1
/// and L2 private, so each cache is shared alike (by one CPU) on both
/// kinds and only the sizes tell them apart; one L3 over all.
#[test]
fn big_little_parts_read_as_every_file_says() {
    let dir = TempDir::new("oracle-big-little");
    let cpus: Vec<_> = (0..8u32)
        .map(|cpu| {
            let me = cpu.to_string();
            let (l1, l2) = if cpu < 4 {
                ("64K", "1024K")
            } else {
                ("32K", "256K")
            };
            let list = [
                (1, "Data", l1, me.clone()),
                (1, "Instruction", l1, me.clone()),
                (2, "Unified", l2, me.clone()),
                (3, "Unified", "8M", range(0, 8)),
            ];
            (cpu, caches(&list), Some(me))
        })
        .collect();
    write_sysfs(&dir, "0-7", &cpus, &["0-7"]);
    agree(dir.path(), "big.LITTLE");
    let t = read_topology(dir.path()).unwrap();
    let l2 = |cpu| {
        let leaf = t.domain(t.leaf(CpuId(cpu)).unwrap());
        leaf.caches
            .iter()
            .find(|c| c.level == 2)
            .unwrap()
            .size_bytes
    };
    assert_eq!((l2(0), l2(7)), (Some(1 << 20), Some(256 << 10)));
}

/// SMT4 cores whose L1 serves pairs, an L2 per core; two LLCs.
#[test]
fn smt4_cores_with_an_l1_per_pair_read_as_every_file_says() {
    let dir = TempDir::new("oracle-smt4");
    let cpus: Vec<_> = (0..16u32)
        .map(|cpu| {
            let list = [
                (1, "Data", "32K", range(cpu / 2 * 2, 2)),
                (2, "Unified", "512K", range(cpu / 4 * 4, 4)),
                (3, "Unified", "10M", range(cpu / 8 * 8, 8)),
            ];
            (cpu, caches(&list), Some(range(cpu / 4 * 4, 4)))
        })
        .collect();
    write_sysfs(&dir, "0-15", &cpus, &["0-7", "8-15"]);
    agree(dir.path(), "SMT4");
}

/// Hand-made trees: a gap in the index numbers, a CPU with a cache more
/// than the others, a CPU without a `cache` directory, offline CPUs named
/// in lists, no sizes, no sibling files.
#[test]
fn odd_trees_read_as_every_file_says() {
    let flat = |tag: &str, cpus: &str| {
        let dir = TempDir::new(tag);
        write_flat_llc(&dir, &set(cpus));
        dir
    };
    let dir = flat("oracle-gap", "0-3");
    for cpu in 0..4 {
        std::fs::remove_dir_all(
            dir.path()
                .join(format!("sys/devices/system/cpu/cpu{cpu}/cache/index2")),
        )
        .unwrap();
    }
    agree(dir.path(), "indexes 0, 1 and 3");

    let dir = flat("oracle-more", "0-3");
    let extra = "sys/devices/system/cpu/cpu2/cache/index4";
    dir.write(&format!("{extra}/level"), "2\n");
    dir.write(&format!("{extra}/type"), "Unified\n");
    dir.write(&format!("{extra}/size"), "256K\n");
    dir.write(&format!("{extra}/shared_cpu_list"), "2\n");
    agree(dir.path(), "CPU 2 with a fifth cache");

    let dir = flat("oracle-nocache", "0-1");
    dir.write("sys/devices/system/cpu/online", "0-2\n");
    agree(dir.path(), "CPU 2 without caches");

    let dir = flat("oracle-offline", "0-7");
    dir.write("sys/devices/system/cpu/online", "0-2,5\n");
    agree(dir.path(), "CPUs 3, 4, 6 and 7 offline");

    let dir = TempDir::new("oracle-bare");
    dfsched::sysfs::write_test_tree(dir.path(), 1, 2, 4, 2).unwrap();
    for cpu in 0..16 {
        let base = format!("sys/devices/system/cpu/cpu{cpu}");
        std::fs::remove_dir_all(dir.path().join(format!("{base}/topology"))).unwrap();
        for index in 0..3 {
            std::fs::remove_file(dir.path().join(format!("{base}/cache/index{index}/size")))
                .unwrap();
        }
    }
    agree(dir.path(), "no sizes, no sibling files");
}

/// This machine's own sysfs.
#[test]
fn this_machine_reads_as_every_file_says() {
    let root = Path::new("/");
    assert!(
        root.join("sys/devices/system/cpu/online").exists(),
        "premise: /sys is mounted"
    );
    agree(root, "/");
}
