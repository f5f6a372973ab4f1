//! The machine's topology as plain data: a tree of cache domains.
//!
//! ```text
//!   Machine / Node            dom0 {0-7}
//!                           /            \
//!   LLC (L3)          dom1 {0-3}        dom2 {4-7}
//!                     /      \            ...
//!   Core (SMT)   dom3 {0,1}  dom4 {2,3}
//!                 /   \
//!   CPU        {0}    {1}                leaves: one per CPU
//! ```
//!
//! Invariants, checked by [`Topology::new`]:
//! - every CPU has exactly one leaf domain holding only that CPU;
//! - domains nest (any two are disjoint or one contains the other), so they
//!   form a tree whose root holds every CPU;
//! - no two domains have the same CPU set: caches that cover the same CPUs
//!   (an L1 and an L2 private to one CPU, or an L3 that is the whole machine)
//!   are merged into one domain, which lists them all in `caches`;
//! - domain ids are indexes into [`Topology::domains`]; a parent's id is
//!   smaller than its children's, and children are in CPU order, so walks are
//!   deterministic.
//!
//! The engine never reads sysfs: the Linux runtime builds a topology from
//! `/sys/devices/system/cpu` and hands it in, tests use [`Topology::test`].

use crate::cpuset::CpuSet;
use crate::ids::{CpuId, DomainId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What kind of domain this is, from the smallest to the largest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// One logical CPU.
    Cpu,
    /// SMT siblings of one physical core.
    Core,
    /// CPUs sharing an L2 (a cluster).
    L2,
    /// CPUs sharing the last-level cache.
    Llc,
    /// A NUMA node.
    Node,
    /// Everything: the root when no cache or node spans the whole machine.
    Machine,
}

/// One cache as the hardware describes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cache {
    /// Cache level: 1, 2, 3…
    pub level: u8,
    /// `Data`, `Instruction` or `Unified`, as sysfs spells it.
    pub kind: String,
    /// Size in bytes, when known.
    pub size_bytes: Option<u64>,
}

/// A domain as a body describes it before the tree is built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainSpec {
    /// What kind of domain it is.
    pub level: Level,
    /// Its CPUs.
    pub cpus: CpuSet,
    /// The caches it stands for, if any.
    pub caches: Vec<Cache>,
}

/// A node of the domain tree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Domain {
    /// Its index in [`Topology::domains`].
    pub id: DomainId,
    /// The smallest kind of domain among those merged into this one.
    pub level: Level,
    /// Its CPUs; never empty.
    pub cpus: CpuSet,
    /// Caches shared by exactly these CPUs, smallest level first.
    pub caches: Vec<Cache>,
    /// The enclosing domain; `None` only for the root.
    pub parent: Option<DomainId>,
    /// Enclosed domains, ordered by their lowest CPU.
    pub children: Vec<DomainId>,
    /// Distance from the root (root = 0).
    pub depth: u32,
}

/// Why a set of domains does not form a topology.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    /// No CPUs at all.
    #[error("the topology has no CPUs")]
    NoCpus,
    /// A domain names a CPU that is not in the machine.
    #[error("domain {cpus} names CPUs outside the machine's {machine}")]
    Outside {
        /// The domain's CPUs.
        cpus: CpuSet,
        /// The machine's CPUs.
        machine: CpuSet,
    },
    /// Two domains overlap without nesting.
    #[error("domains {a} and {b} overlap without one holding the other")]
    NotNested {
        /// One domain's CPUs.
        a: CpuSet,
        /// The other's.
        b: CpuSet,
    },
}

/// A read-only snapshot of the machine's cache domains.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    /// All domains; index = id; the root is id 0.
    domains: Vec<Domain>,
    /// Leaf domain of each CPU.
    leaf: BTreeMap<CpuId, DomainId>,
}

/// The specs merged by CPU set (the smallest level and every cache of
/// those with the same set), with a leaf per CPU and the machine's root
/// added, largest first and, among equal sizes, by lowest CPU (then by
/// the sets' order, for determinism), so that a parent comes before its
/// children.
///
/// Equal sets are found among the sets of the same first CPU, chained
/// through a table indexed by CPU (a CPU is the first of a handful of
/// sets: its leaf, its core, its LLC…): a map ordered by the sets compared
/// 1 KiB bitmaps word by word at every step of its search, and a map keyed
/// by first CPU and size still made a small vector for each of an
/// 8,192-CPU machine's 12k sets.
fn merge_specs(
    cpus: &CpuSet,
    specs: Vec<DomainSpec>,
) -> Result<Vec<(CpuSet, Level, Vec<Cache>)>, TopologyError> {
    let mut merged: Vec<(CpuSet, Level, Vec<Cache>)> = Vec::new();
    // `last_of[cpu]`: the last merged set whose first CPU is `cpu`;
    // `before[i]`: the one merged before set `i` with the same first CPU.
    // Every set added lies within `cpus` (checked below), so its first CPU
    // has a slot.
    let mut last_of: Vec<Option<u32>> =
        vec![None; cpus.iter().last().map_or(0, |c| c.0 as usize + 1)];
    let mut before: Vec<Option<u32>> = Vec::new();
    let mut add = |level: Level, set: CpuSet, caches: Vec<Cache>| {
        let Some(first) = set.first() else {
            return;
        };
        let slot = &mut last_of[first.0 as usize];
        let mut at = *slot;
        while let Some(i) = at {
            if merged[i as usize].0 == set {
                break;
            }
            at = before[i as usize];
        }
        let at = match at {
            Some(i) => i as usize,
            None => {
                before.push(*slot);
                *slot = Some(merged.len() as u32);
                merged.push((set, level, Vec::new()));
                merged.len() - 1
            }
        };
        let e = &mut merged[at];
        e.1 = e.1.min(level);
        // The first caches of a set are taken as they are when they hold
        // no duplicate (as a cache read from sysfs comes, one per spec):
        // no vector made and dropped per set.
        let distinct = || {
            caches
                .iter()
                .enumerate()
                .all(|(i, c)| !caches[..i].contains(c))
        };
        if e.2.is_empty() && distinct() {
            e.2 = caches;
            return;
        }
        for c in caches {
            if !e.2.contains(&c) {
                e.2.push(c);
            }
        }
    };
    for cpu in cpus.iter() {
        add(Level::Cpu, CpuSet::single(cpu), Vec::new());
    }
    add(Level::Machine, cpus.clone(), Vec::new());
    for spec in specs {
        if spec.cpus.is_empty() {
            continue;
        }
        if !spec.cpus.is_subset(cpus) {
            return Err(TopologyError::Outside {
                cpus: spec.cpus,
                machine: cpus.clone(),
            });
        }
        let level = if spec.cpus.len() == 1 {
            Level::Cpu
        } else {
            spec.level
        };
        add(level, spec.cpus, spec.caches);
    }
    let mut order: Vec<(std::cmp::Reverse<usize>, Option<CpuId>, usize)> = merged
        .iter()
        .enumerate()
        .map(|(i, (set, _, _))| (std::cmp::Reverse(set.len()), set.first(), i))
        .collect();
    order.sort_by(|a, b| {
        (a.0, a.1)
            .cmp(&(b.0, b.1))
            .then_with(|| merged[a.2].0.cmp(&merged[b.2].0))
    });
    let mut slots: Vec<Option<(CpuSet, Level, Vec<Cache>)>> =
        merged.into_iter().map(Some).collect();
    Ok(order
        .into_iter()
        .map(|(_, _, i)| slots[i].take().expect("each set once"))
        .collect())
}

impl Topology {
    /// Builds the tree from the machine's CPUs and any number of domain
    /// specs (in any order, duplicates allowed). Leaves and a root are added
    /// where the specs lack them. Empty specs are ignored.
    pub fn new(cpus: &CpuSet, specs: Vec<DomainSpec>) -> Result<Topology, TopologyError> {
        if cpus.is_empty() {
            return Err(TopologyError::NoCpus);
        }
        let sets = merge_specs(cpus, specs)?;
        // One pass in that order, linear in the total size of the sets rather
        // than quadratic in their number (8,192 CPUs make some 12,000 sets):
        // `owner[cpu]` is the last placed domain holding `cpu`. While the
        // placed domains nest, those holding a CPU form a chain, so the owner
        // is the smallest of them. A new set nests with every placed domain
        // exactly when all its CPUs have one owner, and that owner is its
        // parent: the smallest earlier domain holding it. The root (every
        // CPU) is placed first, so every CPU has an owner from then on.
        let slot = |cpu: CpuId| cpu.0 as usize;
        let mut owner: Vec<u32> = vec![0; cpus.iter().last().map_or(0, |c| slot(c) + 1)];
        let mut domains: Vec<Domain> = Vec::with_capacity(sets.len());
        // Leaves come last (sets of one CPU are the smallest) and in CPU
        // order, so the map is built at the end from a sorted run, in one
        // pass rather than by 8,192 searches and inserts.
        let mut leaves: Vec<(CpuId, DomainId)> = Vec::with_capacity(owner.len());
        for (i, (set, level, mut caches)) in sets.into_iter().enumerate() {
            caches.sort_by(|a, b| a.level.cmp(&b.level).then(a.kind.cmp(&b.kind)));
            let id = DomainId(i as u32);
            let parent = match set.first() {
                Some(first) if i > 0 => {
                    let p = owner[slot(first)];
                    let stray = set.iter().map(|c| owner[slot(c)]).find(|&o| o != p);
                    if let Some(other) = stray {
                        // `set` is not inside `p`, or it is but a smaller
                        // domain `other` holds some of its CPUs and not its
                        // first: either pair overlaps without nesting.
                        let a = if set.is_subset(&domains[p as usize].cpus) {
                            other
                        } else {
                            p
                        };
                        return Err(TopologyError::NotNested {
                            a: domains[a as usize].cpus.clone(),
                            b: set,
                        });
                    }
                    Some(DomainId(p))
                }
                _ => None,
            };
            for c in set.iter() {
                owner[slot(c)] = id.0;
            }
            let depth = parent.map_or(0, |p| domains[p.0 as usize].depth + 1);
            if let Some(p) = parent {
                domains[p.0 as usize].children.push(id);
            }
            if set.len() == 1 {
                leaves.push((set.first().expect("non-empty"), id));
            }
            domains.push(Domain {
                id,
                level,
                cpus: set,
                caches,
                parent,
                children: Vec::new(),
                depth,
            });
        }
        let by_first = |d: &DomainId, domains: &Vec<Domain>| domains[d.0 as usize].cpus.first();
        for i in 0..domains.len() {
            let mut ch = std::mem::take(&mut domains[i].children);
            ch.sort_by_key(|c| by_first(c, &domains));
            domains[i].children = ch;
        }
        let leaf = leaves.into_iter().collect();
        Ok(Topology { domains, leaf })
    }

    /// A synthetic machine: `nodes` NUMA nodes × `llcs` LLCs per node ×
    /// `cores` cores per LLC × `smt` threads per core, CPUs numbered in that
    /// order (the threads of a core are adjacent). Levels with one member are
    /// merged into their parent, as on real machines. Cache sizes are typical
    /// figures (32 KiB L1d, 1 MiB L2 per core, 8 MiB L3 per LLC).
    pub fn test(nodes: u32, llcs: u32, cores: u32, smt: u32) -> Topology {
        assert!(nodes >= 1 && llcs >= 1 && cores >= 1 && smt >= 1);
        let total = nodes * llcs * cores * smt;
        let all = CpuSet::first_n(total);
        let range = |start: u32, n: u32| -> CpuSet { (start..start + n).map(CpuId).collect() };
        let cache = |level: u8, kind: &str, kib: u64| Cache {
            level,
            kind: kind.to_string(),
            size_bytes: Some(kib * 1024),
        };
        let mut specs = Vec::new();
        for n in 0..nodes {
            let node_first = n * llcs * cores * smt;
            specs.push(DomainSpec {
                level: Level::Node,
                cpus: range(node_first, llcs * cores * smt),
                caches: vec![],
            });
            for l in 0..llcs {
                let llc_first = node_first + l * cores * smt;
                specs.push(DomainSpec {
                    level: Level::Llc,
                    cpus: range(llc_first, cores * smt),
                    caches: vec![cache(3, "Unified", 8 * 1024)],
                });
                for c in 0..cores {
                    specs.push(DomainSpec {
                        level: Level::Core,
                        cpus: range(llc_first + c * smt, smt),
                        caches: vec![cache(1, "Data", 32), cache(2, "Unified", 1024)],
                    });
                }
            }
        }
        Topology::new(&all, specs).expect("the synthetic topology is well formed")
    }

    /// Every CPU of the machine.
    pub fn cpus(&self) -> &CpuSet {
        &self.domains[0].cpus
    }

    /// Number of CPUs.
    pub fn nr_cpus(&self) -> usize {
        self.leaf.len()
    }

    /// All domains, root first (index = id).
    pub fn domains(&self) -> &[Domain] {
        &self.domains
    }

    /// The root domain (every CPU).
    pub fn root(&self) -> DomainId {
        DomainId(0)
    }

    /// One domain. Panics on an id from another topology.
    pub fn domain(&self, id: DomainId) -> &Domain {
        &self.domains[id.0 as usize]
    }

    /// The leaf domain of `cpu`, if the machine has that CPU.
    pub fn leaf(&self, cpu: CpuId) -> Option<DomainId> {
        self.leaf.get(&cpu).copied()
    }

    /// The domains holding `cpu`, from its leaf up to the root. Empty for a
    /// CPU the machine lacks.
    pub fn ancestors(&self, cpu: CpuId) -> impl Iterator<Item = &Domain> + '_ {
        let mut next = self.leaf(cpu);
        std::iter::from_fn(move || {
            let d = self.domain(next?);
            next = d.parent;
            Some(d)
        })
    }

    /// This topology restricted to the CPUs of `cpus`: every domain
    /// intersected with them (intersections of nested sets still nest) and
    /// the tree built anew, so domains that become equal merge. What a
    /// process confined to `cpus` places on. Fails with
    /// [`TopologyError::NoCpus`] when none of `cpus` is in it.
    pub fn restricted_to(&self, cpus: &CpuSet) -> Result<Topology, TopologyError> {
        let cpus = self.cpus().intersection(cpus);
        if cpus.is_empty() {
            return Err(TopologyError::NoCpus);
        }
        if &cpus == self.cpus() {
            return Ok(self.clone());
        }
        let specs = self
            .domains
            .iter()
            .map(|d| DomainSpec {
                level: d.level,
                cpus: d.cpus.intersection(&cpus),
                caches: d.caches.clone(),
            })
            .collect();
        Topology::new(&cpus, specs)
    }

    /// The smallest domain holding every CPU of `cpus` (the root for an
    /// empty set).
    pub fn smallest_holding(&self, cpus: &CpuSet) -> DomainId {
        match cpus.first() {
            None => self.root(),
            Some(first) => self
                .ancestors(first)
                .find(|d| cpus.is_subset(&d.cpus))
                .map_or(self.root(), |d| d.id),
        }
    }

    /// How far apart two CPUs are: the depth of the tree minus the depth of
    /// their smallest common domain. 0 for the same CPU; larger is farther.
    pub fn distance(&self, a: CpuId, b: CpuId) -> u32 {
        let mut pair = CpuSet::single(a);
        pair.insert(b);
        let common = self.domain(self.smallest_holding(&pair));
        let leaf_depth = self.leaf(a).map_or(0, |l| self.domain(l).depth);
        leaf_depth.saturating_sub(common.depth)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(s: &str) -> CpuSet {
        s.parse().unwrap()
    }

    /// `Topology::new` as it was before the one-pass build: every pair of
    /// sets checked for nesting, each parent found by a scan. Quadratic, but
    /// plainly right; the fast build must give the same topologies.
    fn reference_new(cpus: &CpuSet, specs: Vec<DomainSpec>) -> Result<Topology, TopologyError> {
        if cpus.is_empty() {
            return Err(TopologyError::NoCpus);
        }
        // Merge specs by CPU set, keeping the smallest level and every cache.
        let mut merged: BTreeMap<CpuSet, (Level, Vec<Cache>)> = BTreeMap::new();
        let mut add = |level: Level, set: CpuSet, caches: Vec<Cache>| {
            let e = merged.entry(set).or_insert((level, Vec::new()));
            e.0 = e.0.min(level);
            for c in caches {
                if !e.1.contains(&c) {
                    e.1.push(c);
                }
            }
        };
        for cpu in cpus.iter() {
            add(Level::Cpu, CpuSet::single(cpu), Vec::new());
        }
        add(Level::Machine, cpus.clone(), Vec::new());
        for spec in specs {
            if spec.cpus.is_empty() {
                continue;
            }
            if !spec.cpus.is_subset(cpus) {
                return Err(TopologyError::Outside {
                    cpus: spec.cpus,
                    machine: cpus.clone(),
                });
            }
            let level = if spec.cpus.len() == 1 {
                Level::Cpu
            } else {
                spec.level
            };
            add(level, spec.cpus, spec.caches);
        }
        // Largest first; among equal sizes, by lowest CPU. A parent then always
        // comes before its children.
        let mut sets: Vec<(CpuSet, Level, Vec<Cache>)> =
            merged.into_iter().map(|(s, (l, c))| (s, l, c)).collect();
        sets.sort_by(|a, b| {
            b.0.len()
                .cmp(&a.0.len())
                .then(a.0.first().cmp(&b.0.first()))
        });
        for (i, a) in sets.iter().enumerate() {
            for b in &sets[i + 1..] {
                if a.0.intersects(&b.0) && !b.0.is_subset(&a.0) {
                    return Err(TopologyError::NotNested {
                        a: a.0.clone(),
                        b: b.0.clone(),
                    });
                }
            }
        }
        let mut domains: Vec<Domain> = Vec::with_capacity(sets.len());
        let mut leaf = BTreeMap::new();
        for (i, (set, level, mut caches)) in sets.into_iter().enumerate() {
            caches.sort_by(|a, b| a.level.cmp(&b.level).then(a.kind.cmp(&b.kind)));
            // The parent is the smallest earlier domain holding this one: the
            // last such in the order above.
            let parent = domains
                .iter()
                .rev()
                .find(|d| set.is_subset(&d.cpus))
                .map(|d| d.id);
            let id = DomainId(i as u32);
            let depth = parent.map_or(0, |p| domains[p.0 as usize].depth + 1);
            if let Some(p) = parent {
                domains[p.0 as usize].children.push(id);
            }
            if set.len() == 1 {
                leaf.insert(set.first().expect("non-empty"), id);
            }
            domains.push(Domain {
                id,
                level,
                cpus: set,
                caches,
                parent,
                children: Vec::new(),
                depth,
            });
        }
        let by_first = |d: &DomainId, domains: &Vec<Domain>| domains[d.0 as usize].cpus.first();
        for i in 0..domains.len() {
            let mut ch = std::mem::take(&mut domains[i].children);
            ch.sort_by_key(|c| by_first(c, &domains));
            domains[i].children = ch;
        }
        Ok(Topology { domains, leaf })
    }

    /// Specs of a random laminar family over `n` CPUs (nested intervals cut
    /// at random points, with random levels and caches and duplicates),
    /// from a small deterministic generator so failures replay.
    fn random_specs(seed: u64, n: u32) -> Vec<DomainSpec> {
        let mut x = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let mut next = move |m: u32| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % u64::from(m.max(1))) as u32
        };
        let levels = [Level::Core, Level::L2, Level::Llc, Level::Node];
        let mut specs = Vec::new();
        let mut stack = vec![(0u32, n)];
        while let Some((lo, hi)) = stack.pop() {
            if hi - lo < 2 {
                continue;
            }
            let cut = lo + 1 + next(hi - lo - 1);
            for (a, b) in [(lo, cut), (cut, hi)] {
                if next(3) > 0 {
                    let cache = Cache {
                        level: 1 + next(3) as u8,
                        kind: ["Data", "Unified"][next(2) as usize].to_string(),
                        size_bytes: Some(u64::from(next(4)) << 20),
                    };
                    let spec = DomainSpec {
                        level: levels[next(4) as usize],
                        cpus: (a..b).map(CpuId).collect(),
                        caches: vec![cache],
                    };
                    if next(4) == 0 {
                        specs.push(spec.clone());
                    }
                    specs.push(spec);
                }
                stack.push((a, b));
            }
        }
        specs
    }

    #[test]
    fn the_one_pass_build_gives_what_the_pairwise_build_gave() {
        for (nodes, llcs, cores, smt) in [(1, 1, 1, 1), (2, 2, 2, 2), (2, 8, 8, 2), (1, 3, 5, 4)] {
            let t = Topology::test(nodes, llcs, cores, smt);
            let specs: Vec<DomainSpec> = t
                .domains()
                .iter()
                .map(|d| DomainSpec {
                    level: d.level,
                    cpus: d.cpus.clone(),
                    caches: d.caches.clone(),
                })
                .collect();
            assert_eq!(reference_new(t.cpus(), specs.clone()), Ok(t.clone()));
            assert_eq!(Topology::new(t.cpus(), specs), Ok(t));
        }
        for seed in 0..300 {
            let n = 1 + (seed as u32 * 7) % 70;
            let cpus = CpuSet::first_n(n);
            let specs = random_specs(seed, n);
            assert_eq!(
                Topology::new(&cpus, specs.clone()),
                reference_new(&cpus, specs),
                "seed {seed}"
            );
        }
    }

    #[test]
    fn the_one_pass_build_refuses_what_the_pairwise_build_refused() {
        let mut refused = 0;
        for seed in 0..300 {
            let n = 2 + (seed as u32 * 5) % 40;
            let cpus = CpuSet::first_n(n);
            let mut specs = random_specs(seed, n);
            // An interval straddling some cut of the family, unless it
            // happens to nest: then both builds accept it alike.
            let lo = (seed as u32 * 3) % (n - 1);
            let hi = lo + 2 + (seed as u32) % (n - lo - 1).max(1);
            specs.push(DomainSpec {
                level: Level::L2,
                cpus: (lo..hi.min(n)).map(CpuId).collect(),
                caches: vec![],
            });
            let fast = Topology::new(&cpus, specs.clone());
            let slow = reference_new(&cpus, specs);
            match (&fast, &slow) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "seed {seed}"),
                (Err(TopologyError::NotNested { a, b }), Err(TopologyError::NotNested { .. })) => {
                    // The pair named truly overlaps without nesting.
                    assert!(
                        a.intersects(b) && !a.is_subset(b) && !b.is_subset(a),
                        "seed {seed}"
                    );
                    refused += 1;
                }
                _ => panic!("seed {seed}: {fast:?} vs {slow:?}"),
            }
        }
        // Premise: the cases exercise both outcomes.
        assert!((50..250).contains(&refused), "{refused} of 300 refused");
    }

    #[test]
    fn test_topology_nests_node_llc_core_cpu() {
        let t = Topology::test(2, 2, 2, 2);
        assert_eq!(t.nr_cpus(), 16);
        let chain: Vec<(Level, String)> = t
            .ancestors(CpuId(5))
            .map(|d| (d.level, d.cpus.to_string()))
            .collect();
        assert_eq!(
            chain,
            vec![
                (Level::Cpu, "5".into()),
                (Level::Core, "4-5".into()),
                (Level::Llc, "4-7".into()),
                (Level::Node, "0-7".into()),
                (Level::Machine, "0-15".into()),
            ]
        );
        assert_eq!(t.distance(CpuId(4), CpuId(4)), 0);
        assert_eq!(t.distance(CpuId(4), CpuId(5)), 1);
        assert!(t.distance(CpuId(0), CpuId(15)) > t.distance(CpuId(0), CpuId(7)));
    }

    #[test]
    fn single_member_levels_merge() {
        // This machine's shape: 2 CPUs, private L1/L2, one shared L3.
        let t = Topology::test(1, 1, 2, 1);
        assert_eq!(t.domains().len(), 3);
        let root = t.domain(t.root());
        assert_eq!(root.level, Level::Llc, "the L3 is the whole machine");
        assert_eq!(root.caches.len(), 1);
        let leaf = t.domain(t.leaf(CpuId(1)).unwrap());
        assert_eq!(leaf.level, Level::Cpu);
        assert_eq!(leaf.caches.len(), 2, "L1d and L2 of a one-CPU core");
    }

    #[test]
    fn rejects_overlapping_domains_and_strangers() {
        let all = set("0-3");
        let spec = |s: &str| DomainSpec {
            level: Level::L2,
            cpus: set(s),
            caches: vec![],
        };
        assert!(matches!(
            Topology::new(&all, vec![spec("0-1"), spec("1-2")]),
            Err(TopologyError::NotNested { .. })
        ));
        assert!(matches!(
            Topology::new(&all, vec![spec("3-4")]),
            Err(TopologyError::Outside { .. })
        ));
        assert_eq!(
            Topology::new(&CpuSet::new(), vec![]),
            Err(TopologyError::NoCpus)
        );
    }

    #[test]
    fn restricted_to_keeps_the_nesting_within_the_cpus() {
        let machine = Topology::test(2, 2, 2, 2);
        let t = machine.restricted_to(&set("4-7,9")).unwrap();
        assert_eq!(t.cpus(), &set("4-7,9"));
        let llc = t.domain(t.smallest_holding(&set("4-7")));
        assert_eq!(llc.cpus, set("4-7"));
        assert_eq!(llc.level, Level::Llc);
        let core = t.domain(t.smallest_holding(&set("4-5")));
        assert_eq!(core.level, Level::Core);
        // CPU 9's core and LLC shrink to the CPU itself.
        assert_eq!(t.domain(t.leaf(CpuId(9)).unwrap()).cpus, set("9"));
        assert_eq!(machine.restricted_to(machine.cpus()).unwrap(), machine);
    }

    #[test]
    fn restricted_to_cpus_outside_the_machine_is_no_topology() {
        let machine = Topology::test(1, 1, 2, 1);
        assert_eq!(
            machine.restricted_to(&set("5-6")),
            Err(TopologyError::NoCpus)
        );
    }

    #[test]
    fn smallest_holding_finds_the_common_domain() {
        let t = Topology::test(1, 2, 2, 1);
        assert_eq!(t.domain(t.smallest_holding(&set("0-1"))).cpus, set("0-1"));
        assert_eq!(t.domain(t.smallest_holding(&set("1-2"))).cpus, set("0-3"));
        assert_eq!(t.domain(t.smallest_holding(&set("3"))).cpus, set("3"));
    }

    #[test]
    fn sparse_cpu_numbers_work() {
        let t = Topology::new(&set("0,2,5"), vec![]).unwrap();
        assert_eq!(t.nr_cpus(), 3);
        assert_eq!(t.domain(t.leaf(CpuId(5)).unwrap()).parent, Some(t.root()));
        assert!(t.leaf(CpuId(1)).is_none());
    }
}
