//! The simulated machine's memory side: one private cache per CPU, optional
//! caches shared by the CPUs of a cache domain, a coherence directory, and
//! the cost of every access in cycles.
//!
//! ```text
//!   CPU 0        CPU 1        CPU 2        CPU 3
//!  [priv 0]     [priv 1]     [priv 2]     [priv 3]     private: one per CPU
//!      └──[shared: dom {0,1}]──┘  └──[shared: dom {2,3}]──┘   e.g. L2 clusters
//!              └───────────[shared: dom {0-3}]──────┘          e.g. the LLC
//!                               memory
//! ```
//!
//! A CPU's *path* is its private cache and then the shared caches of the
//! domains holding it, smallest first. An access walks the path:
//!
//! 1. hit in the private cache → its hit latency (a write to a clean line
//!    first invalidates copies off the path);
//! 2. otherwise, if a private cache off the path holds the line dirty → a
//!    coherence transfer from it;
//! 3. otherwise the first shared cache on the path that holds it, else
//!    memory;
//! 4. the line is filled into every cache of the path below the one that
//!    supplied it (non-inclusive: a shared cache does not see hits above
//!    it); dirty victims are written back;
//! 5. a write then invalidates every copy off the path and leaves the
//!    private copy dirty.
//!
//! The miss of an access is classified in the private cache (see
//! [`crate::cache`]): cold, reload, capacity or coherence.
//!
//! Invariants: those of [`crate::coherence`], checked by
//! [`Machine::check_coherence`]; one line size for every cache, so a line
//! means the same bytes everywhere.

use crate::cache::{
    CacheGeometry, CacheStats, LineAddr, MissCounts, MissKind, Owner, SetAssocCache,
};
use crate::coherence::{CacheIdx, Directory};
use crate::cost::{CostModel, Cycles};
use crate::error::{ConfigError, MachineError};
use dfsched_core::{CpuId, CpuSet, DomainId, Level, Topology};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One cache level's shape and speed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheLevelConfig {
    /// Sets and ways.
    pub geometry: CacheGeometry,
    /// Cycles for a hit.
    pub hit_cycles: u64,
}

/// A cache shared by the CPUs of every domain at one topology level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedCacheConfig {
    /// Every domain at this level gets one such cache.
    pub level: Level,
    /// Its shape and speed.
    pub cache: CacheLevelConfig,
}

/// A machine's memory side, before it is built on a topology.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineConfig {
    /// Bytes per line, the same in every cache: a power of two, ≥ 8.
    pub line_bytes: u32,
    /// The cache of each CPU.
    pub private: CacheLevelConfig,
    /// Shared caches, one entry per topology level (in any order).
    pub shared: Vec<SharedCacheConfig>,
    /// Prices beyond hits.
    pub cost: CostModel,
}

impl Default for MachineConfig {
    /// A 1 MiB, 16-way private cache (an L2; 64-byte lines, 14-cycle hits)
    /// and no shared cache. Add one with [`MachineConfig::with_shared`].
    fn default() -> Self {
        MachineConfig {
            line_bytes: 64,
            private: CacheLevelConfig {
                geometry: CacheGeometry {
                    sets: 1024,
                    ways: 16,
                },
                hit_cycles: 14,
            },
            shared: Vec::new(),
            cost: CostModel::default(),
        }
    }
}

impl MachineConfig {
    /// This configuration plus a shared cache at `level`.
    pub fn with_shared(mut self, level: Level, cache: CacheLevelConfig) -> Self {
        self.shared.push(SharedCacheConfig { level, cache });
        self
    }

    /// An 8 MiB, 16-way last-level cache (64-byte lines, 40-cycle hits).
    pub fn typical_llc() -> CacheLevelConfig {
        CacheLevelConfig {
            geometry: CacheGeometry {
                sets: 8192,
                ways: 16,
            },
            hit_cycles: 40,
        }
    }
}

/// Whether an access reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AccessKind {
    /// A load.
    Read,
    /// A store.
    Write,
}

/// Where the data of an access came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// The CPU's private cache.
    Private,
    /// A shared cache on the CPU's path.
    Shared(CacheIdx),
    /// Another CPU's private cache, which held it dirty.
    Transfer(CacheIdx),
    /// Memory.
    Memory,
}

/// The result of one access.
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccessOutcome {
    /// What it cost.
    pub cycles: Cycles,
    /// Who supplied the data.
    pub source: Source,
    /// The private cache's miss, by kind; `None` on a private hit.
    pub miss: Option<MissKind>,
}

/// What a cache of the machine is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CacheInfo {
    /// The domain whose CPUs use it (a CPU's leaf for private caches).
    pub domain: DomainId,
    /// [`Level::Cpu`] for private caches, else the shared level.
    pub level: Level,
    /// The CPUs using it.
    pub cpus: CpuSet,
    /// Cycles for a hit.
    pub hit_cycles: u64,
}

/// Per-CPU counters of the memory side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CpuMemStats {
    /// Loads.
    pub reads: u64,
    /// Stores.
    pub writes: u64,
    /// Accesses served by the private cache.
    pub private_hits: u64,
    /// Private misses served by a shared cache on the path.
    pub shared_hits: u64,
    /// Private misses served by another CPU's dirty copy.
    pub coherence_transfers: u64,
    /// Private misses served by memory.
    pub memory_fetches: u64,
    /// Private-cache misses by kind.
    pub misses: MissCounts,
    /// Copies in other caches this CPU's writes invalidated.
    pub invalidations_sent: u64,
    /// Dirty lines this CPU's fills pushed out (at any level of its path).
    pub writebacks: u64,
    /// Context switches charged with [`Machine::context_switch`].
    pub context_switches: u64,
    /// Cycles of all the above.
    pub cycles: Cycles,
}

impl CpuMemStats {
    /// Adds `o`'s counts to these.
    pub fn merge(&mut self, o: &CpuMemStats) {
        self.reads += o.reads;
        self.writes += o.writes;
        self.private_hits += o.private_hits;
        self.shared_hits += o.shared_hits;
        self.coherence_transfers += o.coherence_transfers;
        self.memory_fetches += o.memory_fetches;
        self.misses.merge(&o.misses);
        self.invalidations_sent += o.invalidations_sent;
        self.writebacks += o.writebacks;
        self.context_switches += o.context_switches;
        self.cycles += o.cycles;
    }
}

/// Marks a CPU number the machine does not have.
const NO_CPU: u32 = u32::MAX;

/// The caches of a machine and their coherence.
#[derive(Clone, Debug)]
pub struct Machine {
    /// `log2(line_bytes)`.
    line_shift: u32,
    /// Every cache: the private ones first, in CPU order, then shared ones.
    caches: Vec<SetAssocCache>,
    /// What each cache is (same index).
    info: Vec<CacheInfo>,
    /// CPU number → dense CPU index, [`NO_CPU`] where absent.
    slot: Vec<u32>,
    /// Dense CPU index → CPU number.
    cpu_ids: Vec<CpuId>,
    /// All paths, one after another.
    path_flat: Vec<CacheIdx>,
    /// Dense CPU index → its path's range in `path_flat`.
    path_range: Vec<(u32, u32)>,
    /// Who holds what.
    directory: Directory,
    /// Prices.
    cost: CostModel,
    /// Dense CPU index → counters.
    stats: Vec<CpuMemStats>,
}

impl Machine {
    /// Builds the caches of `config` on `topology`: a private cache per CPU
    /// and, per shared entry, one cache for every domain at that level.
    pub fn new(topology: &Topology, config: &MachineConfig) -> Result<Machine, ConfigError> {
        let lb = config.line_bytes;
        if !lb.is_power_of_two() || lb < 8 {
            return Err(ConfigError::BadLineSize(lb));
        }
        config.private.geometry.validate()?;
        let mut seen = Vec::new();
        for s in &config.shared {
            s.cache.geometry.validate()?;
            if s.level == Level::Cpu {
                return Err(ConfigError::SharedAtCpuLevel);
            }
            if seen.contains(&s.level) {
                return Err(ConfigError::DuplicateLevel(s.level));
            }
            seen.push(s.level);
            if !topology.domains().iter().any(|d| d.level == s.level) {
                let mut present: Vec<Level> = topology
                    .domains()
                    .iter()
                    .filter(|d| d.cpus.len() > 1)
                    .map(|d| d.level)
                    .collect();
                present.sort();
                present.dedup();
                return Err(ConfigError::NoDomainAtLevel {
                    level: s.level,
                    present,
                });
            }
        }
        let cpu_ids: Vec<CpuId> = topology.cpus().iter().collect();
        let max_cpu = cpu_ids.last().map_or(0, |c| c.0 as usize);
        let mut slot = vec![NO_CPU; max_cpu + 1];
        let mut caches = Vec::new();
        let mut info = Vec::new();
        for (i, &cpu) in cpu_ids.iter().enumerate() {
            slot[cpu.0 as usize] = i as u32;
            caches.push(SetAssocCache::new(config.private.geometry)?);
            info.push(CacheInfo {
                domain: topology.leaf(cpu).expect("every CPU has a leaf"),
                level: Level::Cpu,
                cpus: CpuSet::single(cpu),
                hit_cycles: config.private.hit_cycles,
            });
        }
        for s in &config.shared {
            for d in topology.domains().iter().filter(|d| d.level == s.level) {
                caches.push(SetAssocCache::new(s.cache.geometry)?);
                info.push(CacheInfo {
                    domain: d.id,
                    level: s.level,
                    cpus: d.cpus.clone(),
                    hit_cycles: s.cache.hit_cycles,
                });
            }
        }
        let mut path_flat = Vec::new();
        let mut path_range = Vec::new();
        for (i, &cpu) in cpu_ids.iter().enumerate() {
            let start = path_flat.len() as u32;
            path_flat.push(CacheIdx(i as u32));
            // Shared caches holding this CPU, smallest domain first.
            let mut shared: Vec<(usize, CacheIdx)> = info
                .iter()
                .enumerate()
                .skip(cpu_ids.len())
                .filter(|(_, ci)| ci.cpus.contains(cpu))
                .map(|(j, ci)| (ci.cpus.len(), CacheIdx(j as u32)))
                .collect();
            shared.sort();
            path_flat.extend(shared.into_iter().map(|(_, c)| c));
            path_range.push((start, path_flat.len() as u32));
        }
        Ok(Machine {
            line_shift: lb.trailing_zeros(),
            caches,
            info,
            slot,
            stats: vec![CpuMemStats::default(); cpu_ids.len()],
            cpu_ids,
            path_flat,
            path_range,
            directory: Directory::new(),
            cost: config.cost,
        })
    }

    #[inline]
    fn index(&self, cpu: CpuId) -> Result<usize, MachineError> {
        match self.slot.get(cpu.0 as usize) {
            Some(&s) if s != NO_CPU => Ok(s as usize),
            _ => Err(MachineError::UnknownCpu(cpu)),
        }
    }

    /// The line holding byte address `addr`.
    #[inline]
    pub fn line_of(&self, addr: u64) -> LineAddr {
        LineAddr(addr >> self.line_shift)
    }

    /// Bytes per line.
    pub fn line_bytes(&self) -> u64 {
        1 << self.line_shift
    }

    /// One load or store of byte address `addr` by `cpu`, on behalf of
    /// `owner` (for classifying misses). See the module doc for the walk.
    pub fn access(
        &mut self,
        cpu: CpuId,
        addr: u64,
        kind: AccessKind,
        owner: Owner,
    ) -> Result<AccessOutcome, MachineError> {
        let c = self.index(cpu)?;
        let line = self.line_of(addr);
        let write = kind == AccessKind::Write;
        let (a, b) = self.path_range[c];
        let path = &self.path_flat[a as usize..b as usize];
        let p0 = path[0];
        let st = &mut self.stats[c];
        if write {
            st.writes += 1;
        } else {
            st.reads += 1;
        }

        let cache0 = &mut self.caches[p0.0 as usize];
        if cache0.touch(line) {
            let mut cycles = self.info[p0.0 as usize].hit_cycles;
            if write && !cache0.is_dirty(line) {
                let n = invalidate_off_path(&mut self.caches, &mut self.directory, path, line);
                if n > 0 {
                    cycles += self.cost.invalidate_cycles;
                }
                st.invalidations_sent += n;
                self.caches[p0.0 as usize].mark_dirty(line);
                self.directory.set_dirty(line.0, p0);
            }
            st.private_hits += 1;
            st.cycles += Cycles(cycles);
            return Ok(AccessOutcome {
                cycles: Cycles(cycles),
                source: Source::Private,
                miss: None,
            });
        }

        // A private miss: who supplies the line?
        let remote = self.directory.dirty(line.0).filter(|x| !path.contains(x));
        let (source, mut cycles, fill_to) = if let Some(x) = remote {
            st.coherence_transfers += 1;
            (
                Source::Transfer(x),
                self.cost.coherence_transfer_cycles,
                path.len(),
            )
        } else if let Some(k) =
            (1..path.len()).find(|&k| self.caches[path[k].0 as usize].touch(line))
        {
            st.shared_hits += 1;
            let ck = path[k];
            (Source::Shared(ck), self.info[ck.0 as usize].hit_cycles, k)
        } else {
            st.memory_fetches += 1;
            (Source::Memory, self.cost.memory_cycles, path.len())
        };
        if let (Some(x), false) = (remote, write) {
            // M → S: the owner keeps a clean copy; the data is written back
            // as part of the transfer.
            self.caches[x.0 as usize].clean(line);
            self.directory.clear_dirty(line.0);
        }

        let mut miss = None;
        for (i, &ci) in path[..fill_to].iter().enumerate() {
            let Some(fill) = self.caches[ci.0 as usize].fill(line, owner) else {
                continue; // a shared cache already held it (transfer case)
            };
            if i == 0 {
                miss = Some(fill.kind);
            }
            self.directory.add_holder(line.0, ci);
            if let Some(v) = fill.victim {
                self.directory.remove_holder(v.line.0, ci);
                if v.dirty {
                    st.writebacks += 1;
                    cycles += self.cost.writeback_cycles;
                }
            }
        }
        if let Some(k) = miss {
            st.misses.add(k);
        }

        if write {
            if remote.is_some() {
                cycles += self.cost.write_transfer_extra_cycles;
            }
            let n = invalidate_off_path(&mut self.caches, &mut self.directory, path, line);
            // Taking a dirty line over already settles ownership.
            if n > 0 && remote.is_none() {
                cycles += self.cost.invalidate_cycles;
            }
            st.invalidations_sent += n;
            self.caches[p0.0 as usize].mark_dirty(line);
            self.directory.set_dirty(line.0, p0);
        }
        st.cycles += Cycles(cycles);
        Ok(AccessOutcome {
            cycles: Cycles(cycles),
            source,
            miss,
        })
    }

    /// Charges a context switch on `cpu` and returns its cost.
    pub fn context_switch(&mut self, cpu: CpuId) -> Result<Cycles, MachineError> {
        let c = self.index(cpu)?;
        let cost = Cycles(self.cost.context_switch_cycles);
        self.stats[c].context_switches += 1;
        self.stats[c].cycles += cost;
        Ok(cost)
    }

    /// The CPUs, in order.
    pub fn cpus(&self) -> &[CpuId] {
        &self.cpu_ids
    }

    /// Every cache's description; index = [`CacheIdx`].
    pub fn caches(&self) -> &[CacheInfo] {
        &self.info
    }

    /// One cache's counters.
    pub fn cache_stats(&self, cache: CacheIdx) -> &CacheStats {
        self.caches[cache.0 as usize].stats()
    }

    /// The caches on `cpu`'s path, private first.
    pub fn path(&self, cpu: CpuId) -> Result<&[CacheIdx], MachineError> {
        let (a, b) = self.path_range[self.index(cpu)?];
        Ok(&self.path_flat[a as usize..b as usize])
    }

    /// Whether the private cache of `cpu` holds the byte address `addr`.
    /// Changes nothing.
    pub fn private_holds(&self, cpu: CpuId, addr: u64) -> Result<bool, MachineError> {
        let c = self.index(cpu)?;
        Ok(self.caches[c].contains(self.line_of(addr)))
    }

    /// The prices in use.
    pub fn cost(&self) -> &CostModel {
        &self.cost
    }

    /// The counters of one CPU.
    pub fn cpu_stats(&self, cpu: CpuId) -> Result<&CpuMemStats, MachineError> {
        Ok(&self.stats[self.index(cpu)?])
    }

    /// The counters of all CPUs added up.
    pub fn total_stats(&self) -> CpuMemStats {
        let mut t = CpuMemStats::default();
        for s in &self.stats {
            t.merge(s);
        }
        t
    }

    /// Lines currently cached somewhere.
    pub fn cached_lines(&self) -> usize {
        self.directory.len()
    }

    /// Checks every invariant of the caches and the directory; returns the
    /// first violation found. Costs a walk over every cache: for tests.
    pub fn check_coherence(&self) -> Result<(), String> {
        let mut held: BTreeMap<u64, Vec<CacheIdx>> = BTreeMap::new();
        let mut dirty: BTreeMap<u64, Vec<CacheIdx>> = BTreeMap::new();
        for (i, c) in self.caches.iter().enumerate() {
            c.check_invariants()
                .map_err(|e| format!("cache {i}: {e}"))?;
            for (line, d) in c.lines() {
                held.entry(line.0).or_default().push(CacheIdx(i as u32));
                if d {
                    dirty.entry(line.0).or_default().push(CacheIdx(i as u32));
                }
            }
        }
        let entries = self.directory.entries();
        if entries.len() != held.len() {
            return Err(format!(
                "directory lists {} lines, caches hold {}",
                entries.len(),
                held.len()
            ));
        }
        for (line, st) in entries {
            let mut listed = st.holders().to_vec();
            listed.sort();
            let actual = held.get(&line).cloned().unwrap_or_default();
            if listed != actual {
                return Err(format!(
                    "line {line}: directory {listed:?}, caches {actual:?}"
                ));
            }
            let d = dirty.get(&line).cloned().unwrap_or_default();
            if d.len() > 1 || st.dirty() != d.first().copied() {
                return Err(format!(
                    "line {line}: dirty in {d:?}, directory {:?}",
                    st.dirty()
                ));
            }
            if let Some(x) = st.dirty() {
                let Some(cpu) = self.info[x.0 as usize]
                    .cpus
                    .first()
                    .filter(|_| x.0 < self.cpu_ids.len() as u32)
                else {
                    return Err(format!("line {line}: dirty in shared cache {x:?}"));
                };
                let path = self.path(cpu).map_err(|e| e.to_string())?;
                if let Some(stray) = actual.iter().find(|h| !path.contains(h)) {
                    return Err(format!(
                        "line {line}: dirty in {x:?} yet held off its path by {stray:?}"
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Invalidates every copy of `line` in caches off `path`; returns how many.
fn invalidate_off_path(
    caches: &mut [SetAssocCache],
    directory: &mut Directory,
    path: &[CacheIdx],
    line: LineAddr,
) -> u64 {
    let mut n = 0;
    while let Some(h) = directory
        .get(line.0)
        .and_then(|s| s.holders().iter().copied().find(|h| !path.contains(h)))
    {
        caches[h.0 as usize].invalidate(line);
        directory.remove_holder(line.0, h);
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests;
