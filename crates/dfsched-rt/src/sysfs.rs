//! The machine's cache topology, read from sysfs.
//!
//! Files read, all under a root prefix (normally `/`; tests and
//! `DFSCHED_SYSFS_ROOT` point it at a fixture tree):
//!
//! ```text
//! sys/devices/system/cpu/online                                 cpulist, required
//! sys/devices/system/cpu/cpuN/cache/indexI/level                1, 2, 3…
//! sys/devices/system/cpu/cpuN/cache/indexI/type                 Data | Instruction | Unified
//! sys/devices/system/cpu/cpuN/cache/indexI/size                 "32K", "1024K", "8M" (optional)
//! sys/devices/system/cpu/cpuN/cache/indexI/shared_cpu_list      cpulist
//! sys/devices/system/cpu/cpuN/topology/thread_siblings_list     cpulist (optional)
//! sys/devices/system/node/nodeM/cpulist                         cpulist (optional dir)
//! ```
//!
//! How caches become the core's domain levels:
//! - a cache shared by exactly one core's SMT siblings (an L1, a private L2)
//!   is a [`Level::Core`] domain;
//! - a cache of the highest level on the machine that spans more than one
//!   core is the [`Level::Llc`];
//! - any other cache shared by several cores (an L2 per cluster) is
//!   [`Level::L2`];
//! - NUMA nodes are [`Level::Node`].
//!
//! A core's siblings come from `thread_siblings_list` (or, unread, from a
//! like L1: see "Siblings from the L1" below), or failing that from
//! its level-1 caches, or failing that it is the CPU alone. A CPU without a
//! `cache` directory is fine: it simply has no cache domains.
//!
//! Every list is intersected with the online CPUs (sysfs names offline CPUs
//! in shared lists). A missing required file, or any garbled one, is an
//! [`Error::Sysfs`] naming the file. Only `size` may be missing (some
//! platforms do not report it): the cache's size is then unknown.
//!
//! # Reads
//!
//! Reads are bounded, so a hostile or broken tree (a FIFO, a link to
//! `/dev/zero`, a huge file) is an error naming the file, never a hang or an
//! unbounded allocation: every file is opened with `O_NONBLOCK` (opening a
//! FIFO does not wait for a writer, and reading it gives nothing at once),
//! may hold at most [`MAX_FILE_BYTES`], and is refused as "not a regular
//! file" (as every sysfs attribute is) when what it gave is suspect: empty,
//! too long, or an error. A file costs an open, one read and a close: one
//! read of a page serves a sysfs attribute whole, so a read that returns
//! less than the page it asked for is the end.
//!
//! # Reading less on large machines
//!
//! Start-up on a machine of thousands of CPUs is bounded by the number of
//! files read (an open, a read and a close: some 3 µs each on a small VM),
//! so the reader reads each fact once:
//! - each cache is read once, not once per CPU sharing it: when CPU A's
//!   `indexI` lists CPU B in `shared_cpu_list`, B's `indexI` is the same
//!   cache (the kernel itself pairs sharing CPUs' caches by index), so B
//!   reuses what A's read gave;
//!   a CPU named in every cache of a CPU read before (an SMT sibling) has
//!   exactly those caches, and its `cache` directory is not looked at;
//! - the `indexI` directories are taken in order until the first missing
//!   one (the kernel numbers them without gaps), not listed (only the
//!   first CPU's is, to see that it has no gap);
//! - **the end of the indexes**: where the first `cache` directory's link
//!   count is 2 + its subdirectories, all of them `indexI` (sysfs, and the
//!   ext4 or tmpfs of fixture trees), each CPU's `cache` directory is
//!   looked at with one `stat` whose link count says how many `indexI`
//!   it holds, instead of two failed opens past the last one (a CPU with
//!   more or fewer cache leaves than the first is so still read whole);
//!   elsewhere the end is probed;
//! - `thread_siblings_list` is read once per core;
//! - **siblings from the L1**: a core whose first level-1 cache is like
//!   the first level-1 cache of the last core whose `thread_siblings_list`
//!   was read (the same index, level, type and size, as many sharing
//!   CPUs, at least two), where that file named exactly that cache's
//!   CPUs, takes its siblings from its L1, unread. The L1 is the core's
//!   own (SMT threads share it); a core of another kind (a hybrid part's,
//!   its L1 of another size) is unlike and read, an L1 of one CPU (no SMT,
//!   or a platform reporting L1 per thread) never stands for siblings,
//!   and once a core read had siblings other than its L1's CPUs (an SMT4
//!   core whose L1 serves pairs) every core's file is read. The price, as
//!   for like caches: a garbled `thread_siblings_list` of a like core is
//!   not seen;
//! - **like caches**: a cache whose `indexI` was read whole on an earlier
//!   CPU, and which has the same size and the same number of sharing CPUs
//!   as that one, takes its level and type from it, unread. The kernel
//!   enumerates a CPU's cache leaves in one fixed order (x86: CPUID leaf 4
//!   or 0x8000001D by subleaf; arm64: CLIDR by level, data before
//!   instruction), so the same index with the same size and sharing is the
//!   same kind of cache. A core of another kind (a hybrid part's E-core
//!   cluster L2, shared by four cores and of another size) is unlike and
//!   read whole. The price: a garbled `level` or `type` of a like cache is
//!   not seen (its `size` and `shared_cpu_list` always are).
//!
//! On 8,192 CPUs of SMT pairs (`dfsched bench topology`'s fixture) this
//! reads 16.7k files instead of 49k (20.7k before siblings came from the
//! L1), with 4.1k `stat`s and no failed opens (8.2k before the link
//! count), and every distinct cache becomes one domain spec (not one per
//! CPU sharing it).
//!
//! That is one `stat` and four files per core (its L1's and its L2's
//! `shared_cpu_list` and `size`) and two per LLC, and no fewer can be
//! read without guessing: a core's private caches are named by no CPU
//! read before (only its SMT sibling, which is skipped), a cache's size
//! cannot be taken from a like one (big.LITTLE parts have private L2s of
//! different sizes shared alike, by one core), and without the `stat` a
//! CPU with a cache more than the others goes unseen (the test
//! `a_cpu_with_more_cache_directories_than_the_first_has_them_all_read`).
//! So a file costs its three system calls and nothing else: each reading
//! thread builds paths and reads bytes in buffers it reuses, and an
//! error's path is made only for an error. (Opening each CPU's `cache`
//! directory to open its files from there, two names to walk instead of
//! four, cost more in the open and close than the look-ups it saved.)
//!
//! `tests/sysfs_oracle.rs` holds the reader to a plain reading of every
//! file of every CPU on trees a kernel could write: the shortcuts change
//! what is read, never what is found.

use crate::error::Error;
use dfsched_core::{Cache, CpuId, CpuSet, DomainSpec, Level, Topology};
use std::ffi::CStr;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

/// The most bytes a sysfs file may hold. Plain sysfs attributes are at most
/// a page (4 KiB), but cpulists are binary attributes that may be longer: a
/// list of every other CPU of 8,192 (`0,2,4,…,8190`) takes about 23 KiB.
/// 64 KiB holds any of those with room to spare and still bounds what a
/// hostile file can make us allocate.
pub const MAX_FILE_BYTES: usize = 64 << 10;

/// The most `cache/indexI` directories taken per CPU: a machine has 4–5
/// cache leaves per CPU (L1d, L1i, L2, L3, sometimes an L4), so this only
/// bounds a hostile tree.
pub const MAX_CACHE_INDEXES: usize = 32;

/// One cache of one CPU, as read.
#[derive(Debug, Clone)]
struct CacheEntry {
    cache: Cache,
    shared: CpuSet,
}

/// The CPUs online now, from `root/sys/devices/system/cpu/online` (the
/// same bounded read as the topology's). The balancer reads it every pass
/// (`runtime/online.rs`): one small file, whatever the machine's size.
pub fn read_online(root: &Path) -> Result<CpuSet, Error> {
    read_cpulist(&root.join("sys/devices/system/cpu/online"))
}

/// Reads the cache topology under `root` (normally "/"):
/// `root/sys/devices/system/cpu/{online,cpu*/cache/index*/{level,type,size,shared_cpu_list}}`,
/// `root/sys/devices/system/node/node*/cpulist`. See the module doc.
pub fn read_topology(root: &Path) -> Result<Topology, Error> {
    let cpu_dir = root.join("sys/devices/system/cpu");
    let online = read_cpulist(&cpu_dir.join("online"))?;
    if online.is_empty() {
        return Err(Error::Sysfs {
            path: cpu_dir.join("online"),
            reason: "no CPU is online".into(),
        });
    }
    read_cpus(root, cpu_dir, &online)
}

/// [`read_topology`] of the online CPUs of `within` only: their files
/// alone are read, and every list is cut to them, so a process allowed on
/// a few CPUs of a large machine (a container's cpuset) reads a few CPUs'
/// files, not the machine's (16.7k on 8,192 CPUs). The result is the
/// machine's topology restricted to those CPUs: each domain's CPUs
/// intersected with them, as the runtime places threads (the test
/// `tests/sysfs_oracle.rs` holds it to that). Fails with
/// [`Error::NoUsableCpu`] when none of `within` is online.
pub fn read_topology_within(root: &Path, within: &CpuSet) -> Result<Topology, Error> {
    let cpu_dir = root.join("sys/devices/system/cpu");
    let online = read_cpulist(&cpu_dir.join("online"))?;
    let cpus = online.intersection(within);
    if cpus.is_empty() {
        return Err(Error::NoUsableCpu {
            allowed: within.clone(),
            topology: online,
        });
    }
    read_cpus(root, cpu_dir, &cpus)
}

/// The topology of the CPUs `online` (all online, or those of them a
/// caller wants), every list read cut to them.
fn read_cpus(root: &Path, cpu_dir: PathBuf, online: &CpuSet) -> Result<Topology, Error> {
    let parts = read_parts(&Dir::open(cpu_dir)?, online)?;
    // The parts merged: each distinct cache once (a cache that straddles
    // two parts was read by both), each CPU's caches and siblings from the
    // part that read it.
    let mut known = Known::default();
    // Caches already merged, chained by their first CPU: `first_entry[cpu]`
    // is the last one whose first CPU is `cpu`, `next_entry[i]` the one
    // before `i` (a handful per CPU: its core's caches and its LLC), so a
    // cache is found among equals without a map of small vectors.
    let mut first_entry: PerCpu<usize> = PerCpu::new(online);
    let mut next_entry: Vec<Option<usize>> = Vec::new();
    let mut caches: PerCpu<Span> = PerCpu::new(online);
    let mut lists: Vec<usize> = Vec::new();
    let mut siblings: PerCpu<usize> = PerCpu::new(online);
    let mut sibling_sets: Vec<CpuSet> = Vec::new();
    for part in parts {
        let global: Vec<usize> = part
            .known
            .entries
            .into_iter()
            .map(|entry| {
                let first = entry.shared.first().unwrap_or(CpuId(0));
                let mut at = first_entry.get(first).copied();
                while let Some(i) = at {
                    let e = &known.entries[i];
                    if e.shared == entry.shared && e.cache == entry.cache {
                        return i;
                    }
                    at = next_entry[i];
                }
                let i = known.entries.len();
                next_entry.push(first_entry.get(first).copied());
                first_entry.insert(first, i);
                known.entries.push(entry);
                i
            })
            .collect();
        let base = lists.len() as u32;
        lists.extend(part.lists.iter().map(|&i| global[i]));
        for cpu in part.cpus.iter() {
            if let Some(&(start, len)) = part.caches.get(cpu) {
                caches.insert(cpu, (base + start, len));
            }
        }
        let base = sibling_sets.len();
        for cpu in part.cpus.iter() {
            if let Some(&i) = part.siblings.get(cpu) {
                siblings.insert_if_absent(cpu, base + i);
            }
        }
        sibling_sets.extend(part.sibling_sets);
    }
    let top_level = known
        .entries
        .iter()
        .map(|c| c.cache.level)
        .max()
        .unwrap_or(0);

    // Each CPU's core, once per core: its siblings, else the CPUs of its
    // level-1 caches, else the CPU alone. `core_of[cpu]` is a position in
    // `cores`.
    let mut cores: Vec<CpuSet> = Vec::new();
    let mut core_of: PerCpu<usize> = PerCpu::new(online);
    for cpu in online.iter() {
        if core_of.get(cpu).is_some() {
            continue;
        }
        let entries = caches.get(cpu).map_or(&[][..], |&s| span(&lists, s));
        let core = siblings.get(cpu).map_or_else(
            || {
                entries
                    .iter()
                    .map(|&i| &known.entries[i])
                    .filter(|c| c.cache.level == 1)
                    .fold(CpuSet::single(cpu), |acc, c| acc.union(&c.shared))
            },
            |&i| sibling_sets[i].clone(),
        );
        for member in core.iter() {
            core_of.insert_if_absent(member, cores.len());
        }
        core_of.insert(cpu, cores.len());
        cores.push(core);
    }
    // Each distinct cache once, its level by the core of its first CPU (the
    // cores partition the CPUs, so any of its CPUs gives the same answer).
    // The caches' sets and descriptions move into their specs: at 8,192
    // CPUs a copy of each was some 8k allocations.
    let mut cache_specs: Vec<DomainSpec> = Vec::with_capacity(known.entries.len());
    for entry in known.entries {
        let Some(first) = entry.shared.first() else {
            continue;
        };
        let Some(&core) = core_of.get(first) else {
            continue; // not online: shared lists are cut to the online CPUs
        };
        let core = &cores[core];
        let level = if entry.shared.is_subset(core) {
            Level::Core
        } else if entry.cache.level == top_level {
            Level::Llc
        } else {
            Level::L2
        };
        cache_specs.push(DomainSpec {
            level,
            cpus: entry.shared,
            caches: vec![entry.cache],
        });
    }
    let mut specs: Vec<DomainSpec> = cores
        .into_iter()
        .filter(|core| core.len() > 1)
        .map(|core| DomainSpec {
            level: Level::Core,
            cpus: core,
            caches: Vec::new(),
        })
        .collect();
    specs.extend(cache_specs);
    specs.extend(read_nodes(&root.join("sys/devices/system/node"), online)?);
    Ok(Topology::new(online, specs)?)
}

/// A run of positions in a list of cache positions: its start and length.
type Span = (u32, u32);

/// The positions `s` of `list`.
fn span(list: &[usize], (start, len): Span) -> &[usize] {
    &list[start as usize..(start + len) as usize]
}

/// What one part of the CPUs gave ([`read_part`]).
struct Part {
    /// The CPUs of this part.
    cpus: CpuSet,
    /// The caches it read; positions are into `known.entries`.
    known: Known,
    /// Each of its CPUs' caches, a span of `lists` (SMT siblings share
    /// one).
    caches: PerCpu<Span>,
    lists: Vec<usize>,
    /// Each CPU's SMT siblings (a position in `sibling_sets`), for the
    /// CPUs of this part and the siblings their lists named.
    siblings: PerCpu<usize>,
    sibling_sets: Vec<CpuSet>,
}

/// The CPUs at which one reading thread is worth its start: below this
/// many online CPUs the reader runs on the calling thread alone.
const CPUS_PER_THREAD: usize = 1024;
/// The most threads that read sysfs at once.
const MAX_THREADS: usize = 8;

/// Reads the CPUs' caches and siblings in contiguous parts, one thread
/// each on a large machine (a file costs a few microseconds of system
/// time, and a machine of thousands of CPUs has the CPUs to spare), in
/// CPU order; the first error in CPU order is the one returned.
fn read_parts(cpu_dir: &Dir, online: &CpuSet) -> Result<Vec<Part>, Error> {
    let cpus: Vec<CpuId> = online.iter().collect();
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(MAX_THREADS)
        .min(cpus.len() / CPUS_PER_THREAD)
        .max(1);
    let chunks: Vec<CpuSet> = cpus
        .chunks(cpus.len().div_ceil(threads))
        .map(|c| c.iter().copied().collect())
        .collect();
    if chunks.len() == 1 {
        return Ok(vec![read_part(cpu_dir, online, &chunks[0])?]);
    }
    std::thread::scope(|scope| {
        let running: Vec<_> = chunks
            .iter()
            .map(|chunk| {
                // dfsched's own thread: under LD_PRELOAD the hook must not
                // take it for one of the program's (global.rs, "Re-entry").
                let spawned = crate::thread::internal_spawn(|| {
                    std::thread::Builder::new()
                        .name("dfsched-sysfs".into())
                        .spawn_scoped(scope, move || read_part(cpu_dir, online, chunk))
                });
                // A thread that cannot start: this one reads its part.
                spawned.map_err(|_| chunk)
            })
            .collect();
        running
            .into_iter()
            .map(|r| match r {
                Ok(handle) => handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                Err(chunk) => read_part(cpu_dir, online, chunk),
            })
            .collect()
    })
}

/// Reads the caches and siblings of the CPUs of `part` (module doc,
/// "Reading less on large machines").
fn read_part(cpu_dir: &Dir, online: &CpuSet, part: &CpuSet) -> Result<Part, Error> {
    let mut s = Scratch::default();
    // Each CPU's caches, as a span of `lists`, positions in
    // `known.entries` (every distinct cache once: on 8,192 CPUs a copy per
    // CPU would be some 40k cpusets, and as many domain specs for the core
    // to merge).
    let mut caches: PerCpu<Span> = PerCpu::new(online);
    let mut lists: Vec<usize> = Vec::new();
    // Each CPU's SMT siblings, as a position in `sibling_sets`.
    let mut siblings: PerCpu<usize> = PerCpu::new(online);
    let mut sibling_sets: Vec<CpuSet> = Vec::new();
    // Caches already read, by index directory name: (their CPUs, the entry).
    // A CPU found in one of them takes the entry instead of reading its own.
    let mut known = Known {
        slots: slots(online),
        ..Known::default()
    };
    // Whether SMT siblings may be taken from the level-1 cache unread.
    let mut like_l1 = SiblingsFromL1::default();
    let mut indexed: Vec<(usize, usize)> = Vec::new();
    for cpu in part.iter() {
        // A CPU named in every cache of a CPU read before (an SMT sibling:
        // its first cache names it) has exactly those caches (they are
        // the core's), so its `cache` directory is not even looked at:
        // half the CPUs on a machine of SMT pairs.
        let sibling_caches = known
            .by_index
            .first()
            .and_then(|m| m.get(cpu))
            .and_then(|&i| known.entries[i].shared.first())
            .filter(|&first| first != cpu)
            .and_then(|first| caches.get(first))
            .filter(|&&entries| {
                span(&lists, entries)
                    .iter()
                    .all(|&i| known.entries[i].shared.contains(cpu))
            })
            .copied();
        if let Some(entries) = sibling_caches {
            caches.insert(cpu, entries);
            continue;
        }
        indexed.clear();
        read_caches(cpu_dir, &mut s, cpu, online, &mut known, &mut indexed)?;
        let l1 = indexed
            .iter()
            .copied()
            .find(|&(_, i)| known.entries[i].cache.level == 1);
        caches.insert(cpu, (lists.len() as u32, indexed.len() as u32));
        lists.extend(indexed.iter().map(|&(_, i)| i));
        if siblings.get(cpu).is_some() {
            continue; // a sibling read before named this CPU
        }
        if let Some(set) = l1.and_then(|l1| like_l1.siblings(&known, l1)) {
            for other in set.iter() {
                siblings.insert_if_absent(other, sibling_sets.len());
            }
            sibling_sets.push(set);
            continue;
        }
        let list = s.path.cpu_file(cpu, "topology/thread_siblings_list");
        if let Some(text) = cpu_dir.read_optional(list, &mut s.bytes)? {
            let mut set = parse_cpulist_at(text, online, || cpu_dir.path(list))?;
            set.insert(cpu);
            if let Some(l1) = l1 {
                like_l1.learn(&known, l1, &set);
            }
            for other in set.iter() {
                siblings.insert_if_absent(other, sibling_sets.len());
            }
            sibling_sets.push(set);
        }
    }
    Ok(Part {
        cpus: part.clone(),
        known,
        caches,
        lists,
        siblings,
        sibling_sets,
    })
}

/// SMT siblings taken from the level-1 cache, unread (module doc,
/// "Siblings from the L1"): the template is the level-1 cache of the last
/// core whose `thread_siblings_list` was read and named exactly that
/// cache's CPUs.
#[derive(Default)]
struct SiblingsFromL1 {
    /// The template: the index of that core's first level-1 cache and its
    /// position in `known.entries`.
    template: Option<(usize, usize)>,
    /// A core read whose siblings were not its L1's CPUs: nothing is
    /// taken unread from then on.
    refused: bool,
}

impl SiblingsFromL1 {
    /// The siblings of the core whose first level-1 cache is `l1` (index,
    /// entry), if that cache is like the template's: the same index, level,
    /// type and size, and shared by as many CPUs, at least two. An L1 of one
    /// CPU cannot tell a core without SMT from a platform that reports its
    /// L1 per thread, so it never stands for the siblings.
    fn siblings(&self, known: &Known, (index, entry): (usize, usize)) -> Option<CpuSet> {
        let (t_index, t_entry) = self.template.filter(|_| !self.refused)?;
        let (e, t) = (&known.entries[entry], &known.entries[t_entry]);
        let like = index == t_index && e.cache == t.cache && e.shared.len() == t.shared.len();
        (like && e.shared.len() >= 2).then(|| e.shared.clone())
    }

    /// A core's siblings `read` from its file, and its first level-1 cache
    /// `l1`: agreeing, the cache becomes the template; disagreeing, nothing
    /// is taken unread any more.
    fn learn(&mut self, known: &Known, l1: (usize, usize), read: &CpuSet) {
        if known.entries[l1.1].shared == *read {
            self.template = Some(l1);
        } else {
            self.refused = true;
        }
    }
}

/// A reading thread's scratch, reused from file to file so that a file
/// costs its open, read and close and no allocation: the relative path
/// being opened and the bytes read.
#[derive(Default)]
struct Scratch {
    path: RelPath,
    bytes: Vec<u8>,
}

/// A path relative to the CPU directory, built in place and
/// NUL-terminated for `openat`.
#[derive(Default)]
struct RelPath(Vec<u8>);

impl RelPath {
    /// `cpuN/` followed by `rest`.
    fn cpu_file(&mut self, cpu: CpuId, rest: &str) -> &CStr {
        self.0.clear();
        self.0.extend_from_slice(b"cpu");
        push_decimal(&mut self.0, cpu.0 as usize);
        self.0.push(b'/');
        self.finish(rest)
    }

    /// `cpuN/cache/indexI/file`, or `cpuN/cache/indexI` for an empty
    /// `file`.
    fn cache_file(&mut self, cpu: CpuId, index: usize, file: &str) -> &CStr {
        self.0.clear();
        self.0.extend_from_slice(b"cpu");
        push_decimal(&mut self.0, cpu.0 as usize);
        self.0.extend_from_slice(b"/cache/index");
        push_decimal(&mut self.0, index);
        if !file.is_empty() {
            self.0.push(b'/');
        }
        self.finish(file)
    }

    fn finish(&mut self, rest: &str) -> &CStr {
        self.0.extend_from_slice(rest.as_bytes());
        self.0.push(0);
        // Built from digits and fixed names: one NUL, at the end.
        CStr::from_bytes_with_nul(&self.0).expect("a relative path without NUL")
    }
}

/// Appends `n` in decimal.
fn push_decimal(out: &mut Vec<u8>, mut n: usize) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

/// The sysfs CPU directory, opened once (`O_PATH`) so that every CPU's
/// files are opened relative to it: each open then walks the four or five
/// names under it instead of the whole path (a path walk was the reader's
/// largest cost on thousands of CPUs). A directory that does not exist
/// reads as holding no files.
struct Dir {
    file: Option<std::fs::File>,
    path: PathBuf,
}

impl Dir {
    fn open(path: PathBuf) -> Result<Dir, Error> {
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
            .open(&path);
        let file = match opened {
            Ok(f) => Some(f),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(sysfs_err(&path, e.to_string())),
        };
        Ok(Dir { file, path })
    }

    /// The whole path of `rel`, for messages.
    fn path(&self, rel: &CStr) -> PathBuf {
        self.path.join(rel.to_string_lossy().as_ref())
    }

    fn open_rel(&self, rel: &CStr, flags: libc::c_int) -> Option<std::io::Result<std::fs::File>> {
        Some(crate::sys::open_at(self.file.as_ref()?, rel, flags))
    }

    /// [`read_optional`] of `rel` under this directory, read into `bytes`.
    fn read_optional<'b>(
        &self,
        rel: &CStr,
        bytes: &'b mut Vec<u8>,
    ) -> Result<Option<&'b str>, Error> {
        match self.open_rel(rel, libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY) {
            None => Ok(None),
            Some(opened) => read_opened(opened, bytes, || self.path(rel)),
        }
    }

    /// [`read_text`] of `rel` under this directory, read into `bytes`.
    fn read_text<'b>(&self, rel: &CStr, bytes: &'b mut Vec<u8>) -> Result<&'b str, Error> {
        self.read_optional(rel, bytes)?
            .ok_or_else(|| sysfs_err(&self.path(rel), "missing".into()))
    }

    /// The link count of `rel` under this directory (see
    /// [`crate::sys::nlink_at`]); `None` if it does not exist.
    fn nlink(&self, rel: &CStr) -> Result<Option<u64>, Error> {
        let Some(file) = self.file.as_ref() else {
            return Ok(None);
        };
        match crate::sys::nlink_at(file, rel) {
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(sysfs_err(&self.path(rel), e.to_string())),
        }
    }

    /// Whether `rel` exists under this directory.
    fn exists(&self, rel: &CStr) -> Result<bool, Error> {
        match self.open_rel(rel, libc::O_PATH) {
            None => Ok(false),
            Some(Ok(_)) => Ok(true),
            Some(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Some(Err(e)) => Err(sysfs_err(&self.path(rel), e.to_string())),
        }
    }
}

/// The slots of a [`PerCpu`] for `online`: its highest CPU + 1.
fn slots(online: &CpuSet) -> usize {
    online.iter().last().map_or(0, |c| c.0 as usize + 1)
}

/// A value per CPU, in a vector indexed by CPU number up to the highest
/// online one (at most `dfsched_core::MAX_CPUS`): the reader looks CPUs up
/// some 100k times on 8,192 CPUs, where a tree's search showed in profiles.
#[derive(Clone, Debug)]
struct PerCpu<T>(Vec<Option<T>>);

impl<T> PerCpu<T> {
    fn new(online: &CpuSet) -> PerCpu<T> {
        PerCpu::with_slots(slots(online))
    }

    fn with_slots(slots: usize) -> PerCpu<T> {
        PerCpu(std::iter::repeat_with(|| None).take(slots).collect())
    }

    fn get(&self, cpu: CpuId) -> Option<&T> {
        self.0.get(cpu.0 as usize)?.as_ref()
    }

    /// Sets `cpu`'s value; a CPU beyond the highest online one (which no
    /// list cut to the online CPUs names) is ignored.
    fn insert(&mut self, cpu: CpuId, value: T) {
        if let Some(slot) = self.0.get_mut(cpu.0 as usize) {
            *slot = Some(value);
        }
    }

    fn insert_if_absent(&mut self, cpu: CpuId, value: T) {
        if let Some(slot @ None) = self.0.get_mut(cpu.0 as usize) {
            *slot = Some(value);
        }
    }
}

/// Caches already read: `by_index[I][cpu]` is the position in `entries`
/// of the cache that `cpu`'s directory `indexI` stands for.
#[derive(Default)]
struct Known {
    /// Slots of each `by_index` map (the highest online CPU + 1).
    slots: usize,
    by_index: Vec<PerCpu<usize>>,
    /// Per index, the last cache of that index read whole: the template
    /// of a like cache (module doc, "Like caches").
    templates: Vec<Option<usize>>,
    entries: Vec<CacheEntry>,
    /// Whether the first `cache` directory listed had a gap in its
    /// `indexI` numbers (then every CPU's is listed); `None` until one
    /// with caches was listed.
    gaps: Option<bool>,
    /// Whether a `cache` directory's link count is 2 + its `indexI`
    /// directories here (seen on the first one listed): then it says where
    /// each CPU's indexes end.
    nlink_counts: bool,
}

/// The caches of `cpu` under its `cache` directory, pushed on `out` as
/// their index and their position in `known.entries`; none if it has none.
/// A cache some CPU read before names `cpu` in its shared list is taken
/// from `known`; the others are read and added to it.
///
/// The kernel numbers a CPU's cache directories `index0`, `index1`, … with
/// no gap (one per cache leaf it found), so after the first CPU's
/// directory was listed and found so numbered, they are taken in that
/// order, instead of listing each directory: a cache a CPU read before
/// names `cpu` costs no system call at all. Where the link count counts
/// them (module doc, "The end of the indexes") one `stat` of the `cache`
/// directory says how many there are; elsewhere they are taken until the
/// first that does not exist, which costs one failed open and one failed
/// `O_PATH` open (which tells the end from an `indexI` without its
/// `shared_cpu_list`, an error). A tree whose first listing has a gap (a
/// hand-made one: `index0` and `index3` only) has every CPU's directory
/// listed. At most [`MAX_CACHE_INDEXES`] are taken.
fn read_caches(
    dir: &Dir,
    s: &mut Scratch,
    cpu: CpuId,
    online: &CpuSet,
    known: &mut Known,
    out: &mut Vec<(usize, usize)>,
) -> Result<(), Error> {
    let listed = match known.gaps {
        Some(false) => None,
        _ => {
            let cache_rel = s.path.cpu_file(cpu, "cache");
            let (listed, subdirs) = list_indexes(&dir.path(cache_rel))?;
            if known.gaps.is_none() && !listed.is_empty() {
                let numbered = listed.iter().enumerate().all(|(i, &index)| i == index);
                known.gaps = Some(!numbered);
                // The link count stands for the index directories when it
                // counted this listing's subdirectories, all of them
                // `indexI` (module doc, "The end of the indexes").
                let nlink = dir.nlink(cache_rel)?;
                known.nlink_counts = subdirs == listed.len()
                    && nlink.and_then(|n| n.checked_sub(2)) == Some(subdirs as u64);
            }
            Some(listed)
        }
    };
    let count = match &listed {
        Some(listed) => listed.len(),
        None if known.nlink_counts => match dir.nlink(s.path.cpu_file(cpu, "cache"))? {
            None => return Ok(()), // no `cache` directory
            Some(n) => (n.saturating_sub(2) as usize).min(MAX_CACHE_INDEXES),
        },
        None => MAX_CACHE_INDEXES,
    };
    for k in 0..count {
        let index = listed.as_ref().map_or(k, |l| l[k]);
        if let Some(&i) = known.by_index.get(index).and_then(|m| m.get(cpu)) {
            out.push((index, i));
            continue;
        }
        let template = known
            .templates
            .get(index)
            .copied()
            .flatten()
            .map(|t| &known.entries[t]);
        let Some((entry, whole)) = read_cache(dir, s, index, cpu, online, template)? else {
            break;
        };
        let i = known.entries.len();
        if known.by_index.len() <= index {
            let slots = known.slots;
            known
                .by_index
                .resize_with(index + 1, || PerCpu::with_slots(slots));
            known.templates.resize(index + 1, None);
        }
        if whole {
            known.templates[index] = Some(i);
        }
        for other in entry.shared.iter() {
            known.by_index[index].insert_if_absent(other, i);
        }
        out.push((index, i));
        known.entries.push(entry);
    }
    Ok(())
}

/// The `indexI` numbers under the `cache` directory `path`, in order
/// (below [`MAX_CACHE_INDEXES`]), and how many subdirectories it has of
/// any name; none if there is no such directory.
fn list_indexes(path: &Path) -> Result<(Vec<usize>, usize), Error> {
    let listing = match std::fs::read_dir(path) {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), 0)),
        Err(e) => return Err(sysfs_err(path, e.to_string())),
    };
    let mut subdirs = 0;
    let mut indexes = Vec::new();
    for entry in listing.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            subdirs += 1;
        }
        let index = entry
            .file_name()
            .to_str()
            .and_then(|n| n.strip_prefix("index")?.parse::<usize>().ok());
        if let Some(i) = index.filter(|&i| i < MAX_CACHE_INDEXES) {
            indexes.push(i);
        }
    }
    indexes.sort_unstable();
    Ok((indexes, subdirs))
}

/// One `cache/indexI` directory of `cpu`, and whether all of its files
/// were read; `None` if there is no such directory (the CPU's caches end
/// before it). With a `template` (the last cache of the same index read
/// whole) shared by as many CPUs and of the same size, the level and type
/// are the template's (module doc, "Like caches").
fn read_cache(
    dir: &Dir,
    s: &mut Scratch,
    index: usize,
    cpu: CpuId,
    online: &CpuSet,
    template: Option<&CacheEntry>,
) -> Result<Option<(CacheEntry, bool)>, Error> {
    let shared_rel = s.path.cache_file(cpu, index, "shared_cpu_list");
    let Some(shared_text) = dir.read_optional(shared_rel, &mut s.bytes)? else {
        let missing = dir.path(shared_rel);
        return if dir.exists(s.path.cache_file(cpu, index, ""))? {
            Err(sysfs_err(&missing, "missing".into()))
        } else {
            Ok(None)
        };
    };
    let mut shared = parse_cpulist_at(shared_text, online, || dir.path(shared_rel))?;
    shared.insert(cpu);
    let size_rel = s.path.cache_file(cpu, index, "size");
    let size_bytes = match dir.read_optional(size_rel, &mut s.bytes)? {
        Some(text) => {
            Some(parse_size(text).map_err(|reason| sysfs_err(&dir.path(size_rel), reason))?)
        }
        None => None,
    };
    if let Some(t) = template.filter(|t| {
        size_bytes.is_some() && t.cache.size_bytes == size_bytes && t.shared.len() == shared.len()
    }) {
        let cache = Cache {
            level: t.cache.level,
            kind: t.cache.kind.clone(),
            size_bytes,
        };
        return Ok(Some((CacheEntry { cache, shared }, false)));
    }
    let level_rel = s.path.cache_file(cpu, index, "level");
    let level_text = dir.read_text(level_rel, &mut s.bytes)?;
    let level: u8 = level_text.parse().ok().filter(|&l| l >= 1).ok_or_else(|| {
        sysfs_err(
            &dir.path(level_rel),
            format!("bad cache level {level_text:?}"),
        )
    })?;
    let type_rel = s.path.cache_file(cpu, index, "type");
    let kind = dir.read_text(type_rel, &mut s.bytes)?;
    if !matches!(kind, "Data" | "Instruction" | "Unified") {
        return Err(sysfs_err(
            &dir.path(type_rel),
            format!("bad cache type {kind:?}"),
        ));
    }
    let cache = Cache {
        level,
        kind: kind.to_string(),
        size_bytes,
    };
    Ok(Some((CacheEntry { cache, shared }, true)))
}

/// One domain per NUMA node with online CPUs; none if the kernel has no
/// node directory.
fn read_nodes(dir: &Path, online: &CpuSet) -> Result<Vec<DomainSpec>, Error> {
    let listing = match std::fs::read_dir(dir) {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(sysfs_err(dir, e.to_string())),
    };
    let mut nodes: Vec<(u32, PathBuf)> = listing
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let n = name.to_str()?.strip_prefix("node")?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    nodes.sort();
    let mut specs = Vec::new();
    for (_, path) in nodes {
        let list = path.join("cpulist");
        let cpus = parse_cpulist_at(&read_text(&list)?, online, || list.clone())?;
        specs.push(DomainSpec {
            level: Level::Node,
            cpus,
            caches: Vec::new(),
        });
    }
    Ok(specs)
}

fn sysfs_err(path: &Path, reason: String) -> Error {
    Error::Sysfs {
        path: path.to_path_buf(),
        reason,
    }
}

/// A file's text without surrounding whitespace; a missing file is an
/// error.
fn read_text(path: &Path) -> Result<String, Error> {
    read_optional(path)?.ok_or_else(|| sysfs_err(path, "missing".into()))
}

/// A file's text without surrounding whitespace, `None` if it does not
/// exist. Bounded (see the module doc): anything but a regular file, or a
/// file longer than [`MAX_FILE_BYTES`], is an error naming it.
///
/// An open, one read and a close for a sysfs attribute: a read that
/// returns less than the page it asked for ends the file (a
/// sysfs attribute is served whole by one read of a page, a longer binary
/// one a page per read; a regular file returns less only at its end), so
/// no read is spent to see the end. The file's kind is looked at only when
/// what was read is suspect (nothing, too much, an error): a FIFO opened
/// without waiting reads empty at once, `/dev/zero` reads full pages up to
/// the cap, and either is then named for what it is.
fn read_optional(path: &Path) -> Result<Option<String>, Error> {
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path);
    let mut bytes = Vec::new();
    Ok(read_opened(opened, &mut bytes, || path.to_path_buf())?.map(str::to_string))
}

/// [`read_optional`] of a file already opened (or not), its text read
/// into `bytes` (cleared first) and borrowed from there; `path` names the
/// file in an error (made only then: the reader's thousands of files each
/// cost no allocation).
fn read_opened(
    opened: std::io::Result<std::fs::File>,
    bytes: &mut Vec<u8>,
    path: impl Fn() -> PathBuf,
) -> Result<Option<&str>, Error> {
    let mut file = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(sysfs_err(&path(), e.to_string())),
    };
    bytes.clear();
    let suspect = match crate::sys::read_bounded(&mut file, bytes, MAX_FILE_BYTES) {
        Ok(true) => bytes.is_empty().then(String::new),
        Ok(false) => Some(format!(
            "longer than {MAX_FILE_BYTES} bytes, more than any sysfs file holds"
        )),
        Err(e) => Some(e.to_string()),
    };
    if let Some(reason) = suspect {
        let kind = file
            .metadata()
            .map_err(|e| sysfs_err(&path(), e.to_string()))?
            .file_type();
        if !kind.is_file() {
            return Err(sysfs_err(
                &path(),
                format!(
                    "not a regular file (a {}), as sysfs files are",
                    describe(kind)
                ),
            ));
        }
        if !reason.is_empty() {
            return Err(sysfs_err(&path(), reason));
        }
    }
    drop(file);
    let text =
        std::str::from_utf8(bytes).map_err(|_| sysfs_err(&path(), "not UTF-8 text".into()))?;
    Ok(Some(text.trim()))
}

/// What kind of non-regular file this is, for an error message.
fn describe(kind: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt as _;
    if kind.is_fifo() {
        "FIFO"
    } else if kind.is_char_device() {
        "character device"
    } else if kind.is_block_device() {
        "block device"
    } else if kind.is_socket() {
        "socket"
    } else if kind.is_dir() {
        "directory"
    } else {
        "special file"
    }
}

fn read_cpulist(path: &Path) -> Result<CpuSet, Error> {
    text_to_cpulist(&read_text(path)?).map_err(|reason| sysfs_err(path, reason))
}

/// The cpulist `text` cut to the `online` CPUs; a garbled one is an error
/// naming the file `path` (made only then).
fn parse_cpulist_at(
    text: &str,
    online: &CpuSet,
    path: impl Fn() -> PathBuf,
) -> Result<CpuSet, Error> {
    let set = text_to_cpulist(text).map_err(|reason| sysfs_err(&path(), reason))?;
    // Most lists name online CPUs only: cut them only when they do not (a
    // cut set is a new one).
    Ok(if set.is_subset(online) {
        set
    } else {
        set.intersection(online)
    })
}

fn text_to_cpulist(text: &str) -> Result<CpuSet, String> {
    text.parse()
        .map_err(|e: dfsched_core::CpuListError| e.to_string())
}

/// A sysfs cache size: digits with an optional binary suffix, `"32K"`,
/// `"1024K"`, `"8M"`, `"1G"`, or plain bytes.
pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (digits, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => (&text[..i], &text[i..]),
        None => (text, ""),
    };
    let mult: u64 = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return Err(format!("bad cache size {text:?} (unit {unit:?})")),
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("bad cache size {text:?}"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("cache size {text:?} overflows"))
}

/// Writes a sysfs tree under `root` shaped like [`Topology::test`]`(nodes,
/// llcs, cores, smt)`: the same CPUs, domains and cache sizes (an L1d and an
/// L2 per core, an L3 per LLC, a node list per node), so that reading it
/// back gives exactly that topology. For tests and benchmarks of the reader
/// at any scale (8,192 CPUs write in about a second); not for production.
#[doc(hidden)]
pub fn write_test_tree(
    root: &Path,
    nodes: u32,
    llcs: u32,
    cores: u32,
    smt: u32,
) -> std::io::Result<()> {
    let cpu_dir = root.join("sys/devices/system/cpu");
    let per_llc = cores * smt;
    let total = nodes * llcs * per_llc;
    let list = |first: u32, n: u32| match n {
        1 => format!("{first}\n"),
        _ => format!("{first}-{}\n", first + n - 1),
    };
    std::fs::create_dir_all(&cpu_dir)?;
    std::fs::write(cpu_dir.join("online"), list(0, total))?;
    for cpu in 0..total {
        let dir = cpu_dir.join(format!("cpu{cpu}"));
        let core = list(cpu / smt * smt, smt);
        let llc = list(cpu / per_llc * per_llc, per_llc);
        let caches = [
            ("1", "Data", "32K", &core),
            ("2", "Unified", "1024K", &core),
            ("3", "Unified", "8M", &llc),
        ];
        for (i, (level, kind, size, shared)) in caches.into_iter().enumerate() {
            let index = dir.join(format!("cache/index{i}"));
            std::fs::create_dir_all(&index)?;
            std::fs::write(index.join("level"), level)?;
            std::fs::write(index.join("type"), kind)?;
            std::fs::write(index.join("size"), size)?;
            std::fs::write(index.join("shared_cpu_list"), shared)?;
        }
        std::fs::create_dir_all(dir.join("topology"))?;
        std::fs::write(dir.join("topology/thread_siblings_list"), &core)?;
    }
    for n in 0..nodes {
        let dir = root.join(format!("sys/devices/system/node/node{n}"));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(
            dir.join("cpulist"),
            list(n * llcs * per_llc, llcs * per_llc),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("32K"), Ok(32 * 1024));
        assert_eq!(parse_size("1024K\n"), Ok(1024 * 1024));
        assert_eq!(parse_size("8M"), Ok(8 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("512"), Ok(512));
        for bad in ["", "K", "12Q", "1.5M", "-3K", "99999999999999999999K"] {
            assert!(parse_size(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn reads_this_machines_topology() {
        let t = read_topology(Path::new("/")).unwrap();
        let online: CpuSet = std::fs::read_to_string("/sys/devices/system/cpu/online")
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(t.cpus(), &online);
        assert!(t.domains().iter().any(|d| !d.caches.is_empty()));
    }
}
