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
//! A core's siblings come from `thread_siblings_list`, or failing that from
//! its level-1 caches, or failing that it is the CPU alone. A CPU without a
//! `cache` directory is fine: it simply has no cache domains.
//!
//! Every list is intersected with the online CPUs (sysfs names offline CPUs
//! in shared lists). A missing required file, or any garbled one, is an
//! [`Error::Sysfs`] naming the file. Only `size` may be missing (some
//! platforms do not report it): the cache's size is then unknown.
//!
//! Reads are bounded, so a hostile or broken tree (a FIFO, a link to
//! `/dev/zero`, a huge file) is an error naming the file, never a hang or an
//! unbounded allocation: every file is opened with `O_NONBLOCK` (opening a
//! FIFO does not wait for a writer), must be a regular file (as every sysfs
//! attribute is; a FIFO or a device is refused before any read), and may
//! hold at most [`MAX_FILE_BYTES`].
//!
//! Each cache is read once, not once per CPU sharing it: when CPU A's
//! `indexI` lists CPU B in `shared_cpu_list`, B's `indexI` is the same cache
//! (the kernel itself pairs sharing CPUs' caches by index), so B reuses what
//! A's read gave. Likewise `thread_siblings_list` is read once per core, and
//! the `cache` directory of a CPU whose SMT sibling was read before (and
//! shares each of its caches) is not listed at all. On 8,192 CPUs of SMT
//! pairs this reads about a third of the files, and every distinct cache
//! becomes one domain spec (not one per CPU sharing it).

use crate::error::Error;
use dfsched_core::{Cache, CpuId, CpuSet, DomainSpec, Level, Topology};
use std::collections::BTreeMap;
use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

/// The most bytes a sysfs file may hold. Plain sysfs attributes are at most
/// a page (4 KiB), but cpulists are binary attributes that may be longer: a
/// list of every other CPU of 8,192 (`0,2,4,…,8190`) takes about 23 KiB.
/// 64 KiB holds any of those with room to spare and still bounds what a
/// hostile file can make us allocate.
pub const MAX_FILE_BYTES: usize = 64 << 10;

/// One cache of one CPU, as read.
#[derive(Debug, Clone)]
struct CacheEntry {
    cache: Cache,
    shared: CpuSet,
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

    // Each CPU's caches, as positions in `known.entries` (every distinct
    // cache once: on 8,192 CPUs a copy per CPU would be some 40k cpusets of
    // 1 KiB, and as many domain specs for the core to merge).
    let mut caches: BTreeMap<CpuId, Vec<usize>> = BTreeMap::new();
    let mut siblings: BTreeMap<CpuId, CpuSet> = BTreeMap::new();
    // Caches already read, by index directory name: (their CPUs, the entry).
    // A CPU found in one of them takes the entry instead of reading its own.
    let mut known = Known::default();
    for cpu in online.iter() {
        // An SMT sibling of a CPU read before, named in every one of that
        // CPU's caches, has exactly those caches (they are the core's), so
        // its `cache` directory is not even listed: half the listings on a
        // machine of SMT pairs.
        let sibling_caches = siblings
            .get(&cpu)
            .and_then(CpuSet::first)
            .filter(|&first| first != cpu)
            .and_then(|first| caches.get(&first))
            .filter(|entries| {
                entries
                    .iter()
                    .all(|&i| known.entries[i].shared.contains(cpu))
            })
            .cloned();
        if let Some(entries) = sibling_caches {
            caches.insert(cpu, entries);
            continue;
        }
        let dir = cpu_dir.join(format!("cpu{}", cpu.0));
        let entries = read_caches(&dir.join("cache"), cpu, &online, &mut known)?;
        caches.insert(cpu, entries);
        if siblings.contains_key(&cpu) {
            continue; // a sibling read before named this CPU
        }
        let list = dir.join("topology/thread_siblings_list");
        if let Some(text) = read_optional(&list)? {
            let mut set = parse_cpulist(&list, &text)?.intersection(&online);
            set.insert(cpu);
            for other in set.iter() {
                siblings.entry(other).or_insert_with(|| set.clone());
            }
        }
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
    let mut core_of: BTreeMap<CpuId, usize> = BTreeMap::new();
    for (&cpu, entries) in &caches {
        if core_of.contains_key(&cpu) {
            continue;
        }
        let core = siblings.get(&cpu).cloned().unwrap_or_else(|| {
            entries
                .iter()
                .map(|&i| &known.entries[i])
                .filter(|c| c.cache.level == 1)
                .fold(CpuSet::single(cpu), |acc, c| acc.union(&c.shared))
        });
        for member in core.iter() {
            core_of.entry(member).or_insert(cores.len());
        }
        core_of.insert(cpu, cores.len());
        cores.push(core);
    }
    let mut specs: Vec<DomainSpec> = cores
        .iter()
        .filter(|core| core.len() > 1)
        .map(|core| DomainSpec {
            level: Level::Core,
            cpus: core.clone(),
            caches: Vec::new(),
        })
        .collect();
    // Each distinct cache once, its level by the core of its first CPU (the
    // cores partition the CPUs, so any of its CPUs gives the same answer).
    for entry in &known.entries {
        let Some(first) = entry.shared.first() else {
            continue;
        };
        let core = &cores[core_of[&first]];
        let level = if entry.shared.is_subset(core) {
            Level::Core
        } else if entry.cache.level == top_level {
            Level::Llc
        } else {
            Level::L2
        };
        specs.push(DomainSpec {
            level,
            cpus: entry.shared.clone(),
            caches: vec![entry.cache.clone()],
        });
    }
    specs.extend(read_nodes(&root.join("sys/devices/system/node"), &online)?);
    Ok(Topology::new(&online, specs)?)
}

/// Caches already read: `by_index[name][cpu]` is the position in `entries`
/// of the cache that `cpu`'s directory `name` (`index0`…) stands for.
#[derive(Default)]
struct Known {
    by_index: BTreeMap<String, BTreeMap<CpuId, usize>>,
    entries: Vec<CacheEntry>,
}

/// The caches of `cpu` under its `cache` directory, as positions in
/// `known.entries`; none if it has none. A cache some CPU read before names
/// `cpu` in its shared list is taken from `known`; the others are read and
/// added to it.
fn read_caches(
    dir: &Path,
    cpu: CpuId,
    online: &CpuSet,
    known: &mut Known,
) -> Result<Vec<usize>, Error> {
    let listing = match std::fs::read_dir(dir) {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(sysfs_err(dir, e.to_string())),
    };
    let mut names: Vec<String> = listing
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with("index"))
        .collect();
    names.sort();
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let seen = known.by_index.get(&name).and_then(|m| m.get(&cpu));
        if let Some(&i) = seen {
            out.push(i);
            continue;
        }
        let entry = read_cache(&dir.join(&name), cpu, online)?;
        let i = known.entries.len();
        let by_cpu = known.by_index.entry(name).or_default();
        for other in entry.shared.iter() {
            by_cpu.entry(other).or_insert(i);
        }
        out.push(i);
        known.entries.push(entry);
    }
    Ok(out)
}

/// One `cache/indexI` directory of `cpu`.
fn read_cache(index: &Path, cpu: CpuId, online: &CpuSet) -> Result<CacheEntry, Error> {
    let level_path = index.join("level");
    let level_text = read_text(&level_path)?;
    let level: u8 = level_text
        .parse()
        .ok()
        .filter(|&l| l >= 1)
        .ok_or_else(|| sysfs_err(&level_path, format!("bad cache level {level_text:?}")))?;
    let type_path = index.join("type");
    let kind = read_text(&type_path)?;
    if !matches!(kind.as_str(), "Data" | "Instruction" | "Unified") {
        return Err(sysfs_err(&type_path, format!("bad cache type {kind:?}")));
    }
    let size_path = index.join("size");
    let size_bytes = match read_optional(&size_path)? {
        Some(text) => Some(parse_size(&text).map_err(|reason| sysfs_err(&size_path, reason))?),
        None => None,
    };
    let mut shared = read_cpulist(&index.join("shared_cpu_list"))?.intersection(online);
    shared.insert(cpu);
    Ok(CacheEntry {
        cache: Cache {
            level,
            kind,
            size_bytes,
        },
        shared,
    })
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
        let cpus = read_cpulist(&path.join("cpulist"))?.intersection(online);
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
fn read_optional(path: &Path) -> Result<Option<String>, Error> {
    let file = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(sysfs_err(path, e.to_string())),
    };
    let kind = file
        .metadata()
        .map_err(|e| sysfs_err(path, e.to_string()))?
        .file_type();
    if !kind.is_file() {
        return Err(sysfs_err(
            path,
            format!(
                "not a regular file (a {}), as sysfs files are",
                describe(kind)
            ),
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| sysfs_err(path, e.to_string()))?;
    if bytes.len() > MAX_FILE_BYTES {
        return Err(sysfs_err(
            path,
            format!("longer than {MAX_FILE_BYTES} bytes, more than any sysfs file holds"),
        ));
    }
    let text = String::from_utf8(bytes).map_err(|_| sysfs_err(path, "not UTF-8 text".into()))?;
    Ok(Some(text.trim().to_string()))
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
    parse_cpulist(path, &read_text(path)?)
}

fn parse_cpulist(path: &Path, text: &str) -> Result<CpuSet, Error> {
    text.parse()
        .map_err(|e: dfsched_core::CpuListError| sysfs_err(path, e.to_string()))
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
