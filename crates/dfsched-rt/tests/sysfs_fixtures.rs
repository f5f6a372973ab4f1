//! The sysfs reader on fixture trees built under a temp dir: this machine's
//! shape, a 2-node × 2-LLC × 2-core × SMT2 machine, an L2 shared by a
//! cluster of cores, and missing or garbled files.

mod common;

use common::*;
use dfsched::sysfs::read_topology;
use dfsched::{code, CpuId, CpuSet, Level, Topology};

fn set(s: &str) -> CpuSet {
    s.parse().unwrap()
}

#[test]
fn this_machines_shape_two_cpus_under_one_llc() {
    let dir = TempDir::new("sysfs-2cpu");
    write_flat_llc(&dir, &set("0-1"));
    let t = read_topology(dir.path()).unwrap();
    assert_eq!(t.cpus(), &set("0-1"));
    assert_eq!(t.domains().len(), 3, "the LLC root and two CPU leaves");
    let root = t.domain(t.root());
    assert_eq!(root.level, Level::Llc);
    assert_eq!(root.caches.len(), 1);
    assert_eq!(root.caches[0].level, 3);
    assert_eq!(root.caches[0].size_bytes, Some(107520 << 10));
    let leaf = t.domain(t.leaf(CpuId(1)).unwrap());
    assert_eq!(leaf.level, Level::Cpu);
    let sizes: Vec<_> = leaf
        .caches
        .iter()
        .map(|c| (c.level, c.kind.as_str(), c.size_bytes))
        .collect();
    assert_eq!(
        sizes,
        vec![
            (1, "Data", Some(48 << 10)),
            (1, "Instruction", Some(32 << 10)),
            (2, "Unified", Some(2048 << 10)),
        ]
    );
}

/// CPU numbering as `Topology::test`: node, LLC, core, SMT thread.
fn write_numa_smt(dir: &TempDir) {
    let mut cpus = Vec::new();
    for cpu in 0..16u32 {
        let core = cpu / 2 * 2;
        let llc = cpu / 4 * 4;
        let core_list = format!("{core}-{}", core + 1);
        let caches = vec![
            FixtureCache {
                level: 1,
                kind: "Data",
                size: "32K",
                shared: core_list.clone(),
            },
            FixtureCache {
                level: 2,
                kind: "Unified",
                size: "1024K",
                shared: core_list.clone(),
            },
            FixtureCache {
                level: 3,
                kind: "Unified",
                size: "8M",
                shared: format!("{llc}-{}", llc + 3),
            },
        ];
        cpus.push((cpu, caches, Some(core_list)));
    }
    write_sysfs(dir, "0-15", &cpus, &["0-7", "8-15"]);
}

#[test]
fn two_nodes_two_llcs_two_cores_smt2_match_the_synthetic_topology() {
    let dir = TempDir::new("sysfs-numa");
    write_numa_smt(&dir);
    let t = read_topology(dir.path()).unwrap();
    // Same domains, levels, caches and sizes as the engine's own test shape.
    assert_eq!(t, Topology::test(2, 2, 2, 2));
    let chain: Vec<Level> = t.ancestors(CpuId(5)).map(|d| d.level).collect();
    assert_eq!(
        chain,
        vec![
            Level::Cpu,
            Level::Core,
            Level::Llc,
            Level::Node,
            Level::Machine
        ]
    );
}

#[test]
fn smt_siblings_come_from_l1_when_the_topology_dir_is_missing() {
    let dir = TempDir::new("sysfs-nosiblings");
    let cpus = (0..4u32)
        .map(|cpu| {
            let core = cpu / 2 * 2;
            let caches = vec![
                FixtureCache {
                    level: 1,
                    kind: "Data",
                    size: "32K",
                    shared: format!("{core}-{}", core + 1),
                },
                FixtureCache {
                    level: 2,
                    kind: "Unified",
                    size: "1M",
                    shared: "0-3".into(),
                },
            ];
            (cpu, caches, None)
        })
        .collect::<Vec<_>>();
    write_sysfs(&dir, "0-3", &cpus, &[]);
    let t = read_topology(dir.path()).unwrap();
    assert_eq!(t.domain(t.smallest_holding(&set("0-1"))).level, Level::Core);
    assert_eq!(
        t.domain(t.root()).level,
        Level::Llc,
        "the L2 is the last level here"
    );
}

#[test]
fn an_l2_shared_by_a_cluster_of_cores_is_an_l2_domain() {
    let dir = TempDir::new("sysfs-cluster");
    // 8 cores, no SMT; L2 per cluster of 4; one L3 over all.
    let cpus = (0..8u32)
        .map(|cpu| {
            let cluster = cpu / 4 * 4;
            let caches = vec![
                FixtureCache {
                    level: 1,
                    kind: "Data",
                    size: "64K",
                    shared: cpu.to_string(),
                },
                FixtureCache {
                    level: 2,
                    kind: "Unified",
                    size: "2M",
                    shared: format!("{cluster}-{}", cluster + 3),
                },
                FixtureCache {
                    level: 3,
                    kind: "Unified",
                    size: "32M",
                    shared: "0-7".into(),
                },
            ];
            (cpu, caches, Some(cpu.to_string()))
        })
        .collect::<Vec<_>>();
    write_sysfs(&dir, "0-7", &cpus, &["0-7"]);
    let t = read_topology(dir.path()).unwrap();
    let cluster = t.domain(t.smallest_holding(&set("4-7")));
    assert_eq!(cluster.cpus, set("4-7"));
    assert_eq!(cluster.level, Level::L2);
    assert_eq!(cluster.caches[0].size_bytes, Some(2 << 20));
    assert_eq!(t.domain(t.root()).level, Level::Llc);
}

#[test]
fn a_cpu_without_a_cache_dir_still_works() {
    let dir = TempDir::new("sysfs-nocache");
    write_flat_llc(&dir, &set("0-1"));
    dir.write("sys/devices/system/cpu/online", "0-2\n");
    // CPU 2 has no cache directory at all.
    let t = read_topology(dir.path()).unwrap();
    assert_eq!(t.cpus(), &set("0-2"));
    let leaf = t.domain(t.leaf(CpuId(2)).unwrap());
    assert!(leaf.caches.is_empty());
    assert_eq!(leaf.parent, Some(t.root()));
}

#[test]
fn offline_cpus_in_shared_lists_are_ignored() {
    let dir = TempDir::new("sysfs-offline");
    write_flat_llc(&dir, &set("0-3"));
    dir.write("sys/devices/system/cpu/online", "0-1\n");
    let t = read_topology(dir.path()).unwrap();
    assert_eq!(t.cpus(), &set("0-1"));
    assert_eq!(t.domain(t.root()).cpus, set("0-1"));
}

#[test]
fn a_missing_size_is_unknown_not_an_error() {
    let dir = TempDir::new("sysfs-nosize");
    write_flat_llc(&dir, &set("0-1"));
    for cpu in 0..2 {
        std::fs::remove_file(
            dir.path()
                .join(format!("sys/devices/system/cpu/cpu{cpu}/cache/index3/size")),
        )
        .unwrap();
    }
    let t = read_topology(dir.path()).unwrap();
    assert_eq!(t.domain(t.root()).caches[0].size_bytes, None);
}

/// Breaks one file of a good 2-CPU tree and checks the error names it.
fn broken(rel: &str, content: Option<&str>) -> dfsched::Error {
    let dir = TempDir::new("sysfs-broken");
    write_flat_llc(&dir, &set("0-1"));
    let path = dir.path().join(rel);
    match content {
        Some(text) => std::fs::write(&path, text).unwrap(),
        None => std::fs::remove_file(&path).unwrap(),
    }
    let err = read_topology(dir.path()).unwrap_err();
    assert_eq!(err.code(), code::E_TOPOLOGY, "{err}");
    let text = err.to_string();
    assert!(text.contains(rel), "{text} does not name {rel}");
    err
}

#[test]
fn missing_or_garbled_files_are_errors_naming_the_file() {
    broken("sys/devices/system/cpu/online", None);
    broken("sys/devices/system/cpu/online", Some("0-x\n"));
    broken("sys/devices/system/cpu/online", Some("\n"));
    // CPU 0's caches are read whole (CPU 1's like ones take their level
    // and type from them: see the tests below).
    broken("sys/devices/system/cpu/cpu0/cache/index2/level", None);
    broken(
        "sys/devices/system/cpu/cpu0/cache/index2/level",
        Some("two\n"),
    );
    broken(
        "sys/devices/system/cpu/cpu0/cache/index2/level",
        Some("0\n"),
    );
    broken(
        "sys/devices/system/cpu/cpu1/cache/index2/size",
        Some("2Q\n"),
    );
    broken(
        "sys/devices/system/cpu/cpu1/cache/index2/shared_cpu_list",
        None,
    );
    broken(
        "sys/devices/system/cpu/cpu0/cache/index0/type",
        Some("Weird\n"),
    );
    broken("sys/devices/system/cpu/cpu0/cache/index0/type", None);
    broken(
        "sys/devices/system/cpu/cpu0/cache/index3/size",
        Some("8Q\n"),
    );
    broken(
        "sys/devices/system/cpu/cpu0/cache/index3/shared_cpu_list",
        None,
    );
    broken(
        "sys/devices/system/cpu/cpu0/cache/index3/shared_cpu_list",
        Some("3-1\n"),
    );
    broken(
        "sys/devices/system/cpu/cpu0/topology/thread_siblings_list",
        Some("zz\n"),
    );
    broken("sys/devices/system/node/node0/cpulist", Some("0,,1\n"));
}

/// A cache of the same index, size and number of sharing CPUs as one read
/// before is a like cache: its level and type are that one's, unread. So
/// a second CPU's private caches cost two files each, not four.
#[test]
fn a_cache_like_one_read_before_takes_its_level_and_type_unread() {
    let dir = TempDir::new("sysfs-like");
    write_flat_llc(&dir, &set("0-1"));
    let whole = read_topology(dir.path()).unwrap();
    for index in 0..3 {
        for file in ["level", "type"] {
            std::fs::remove_file(dir.path().join(format!(
                "sys/devices/system/cpu/cpu1/cache/index{index}/{file}"
            )))
            .unwrap();
        }
    }
    assert_eq!(read_topology(dir.path()).unwrap(), whole);
}

/// A cache is read once, by the first CPU it names: the other CPUs it
/// names take it at the same index unread (the kernel builds each CPU's
/// `shared_cpu_list` of an index from the same pairs of CPUs, so the lists
/// agree). Garbled files of the shared L3 of CPUs 1–3 prove them unread;
/// the L3 still spans all four CPUs.
#[test]
fn a_cache_named_by_a_cpu_read_before_is_not_read_again() {
    let dir = TempDir::new("sysfs-covered");
    write_flat_llc(&dir, &set("0-3"));
    let whole = read_topology(dir.path()).unwrap();
    for cpu in 1..4 {
        for file in ["level", "type", "size", "shared_cpu_list"] {
            dir.write(
                &format!("sys/devices/system/cpu/cpu{cpu}/cache/index3/{file}"),
                "zz\n",
            );
        }
    }
    let t = read_topology(dir.path()).unwrap();
    assert_eq!(t, whole);
    let root = t.domain(t.root());
    assert_eq!((root.level, &root.cpus), (Level::Llc, &set("0-3")));
}

/// A cache unlike the one read before at its index (another size, or
/// shared by another number of CPUs: a hybrid part's other kind of core)
/// is read whole, so its own level and type count, and a garbled one is
/// an error naming it.
#[test]
fn a_cache_unlike_the_one_read_before_is_read_whole() {
    let dir = TempDir::new("sysfs-unlike");
    write_flat_llc(&dir, &set("0-1"));
    let cpu1 =
        |index: u32, file: &str| format!("sys/devices/system/cpu/cpu1/cache/index{index}/{file}");
    // Unlike by its size: CPU 1's index 1 is a 64 KiB L1 data cache where
    // CPU 0's is a 32 KiB instruction cache.
    dir.write(&cpu1(1, "size"), "64K\n");
    dir.write(&cpu1(1, "type"), "Data\n");
    let t = read_topology(dir.path()).unwrap();
    let leaf = t.domain(t.leaf(CpuId(1)).unwrap());
    let l1: Vec<_> = leaf
        .caches
        .iter()
        .filter(|c| c.level == 1)
        .map(|c| (c.kind.as_str(), c.size_bytes))
        .collect();
    assert_eq!(l1, vec![("Data", Some(48 << 10)), ("Data", Some(64 << 10))]);
    // Unlike by its sharing: the same size, two CPUs instead of one.
    let dir = TempDir::new("sysfs-unlike-shared");
    write_flat_llc(&dir, &set("0-3"));
    for cpu in [2, 3] {
        dir.write(
            &format!("sys/devices/system/cpu/cpu{cpu}/cache/index2/shared_cpu_list"),
            "2-3\n",
        );
        dir.write(
            &format!("sys/devices/system/cpu/cpu{cpu}/cache/index2/level"),
            "x\n",
        );
    }
    let err = read_topology(dir.path()).unwrap_err();
    assert!(err.to_string().contains("cpu2/cache/index2/level"), "{err}");
}

/// CPUs numbered as `Topology::test`, SMT `smt` per core, cores of
/// `cores_per_llc` under one L3 per LLC; the L1 data cache shared by
/// `l1_cpus` consecutive CPUs (the core's threads on real parts) and of
/// size `l1(cpu)`; `thread_siblings_list` names the core.
fn write_smt(dir: &TempDir, cpus: u32, smt: u32, l1_cpus: u32, l1: impl Fn(u32) -> &'static str) {
    let range = |first: u32, n: u32| format!("{first}-{}", first + n - 1);
    let entries: Vec<_> = (0..cpus)
        .map(|cpu| {
            let caches = vec![
                FixtureCache {
                    level: 1,
                    kind: "Data",
                    size: l1(cpu),
                    shared: range(cpu / l1_cpus * l1_cpus, l1_cpus),
                },
                FixtureCache {
                    level: 2,
                    kind: "Unified",
                    size: "1024K",
                    shared: range(cpu / smt * smt, smt),
                },
                FixtureCache {
                    level: 3,
                    kind: "Unified",
                    size: "8M",
                    shared: range(0, cpus),
                },
            ];
            (cpu, caches, Some(range(cpu / smt * smt, smt)))
        })
        .collect();
    write_sysfs(dir, &range(0, cpus), &entries, &[]);
}

/// The path of `cpu`'s `thread_siblings_list`.
fn siblings_file(cpu: u32) -> String {
    format!("sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
}

/// A core whose first level-1 cache is like the one of a core read
/// before (same index, level, type and size, shared by as many CPUs, at
/// least two), where that core's `thread_siblings_list` named exactly its
/// L1's CPUs, has those CPUs for its siblings, unread: a core of SMT
/// pairs then costs no siblings file. A garbled file proves it unread.
#[test]
fn siblings_like_the_l1_read_before_are_taken_from_it_unread() {
    let dir = TempDir::new("sysfs-siblings-like");
    write_numa_smt(&dir);
    let whole = read_topology(dir.path()).unwrap();
    assert_eq!(whole, Topology::test(2, 2, 2, 2), "premise: the fixture");
    for core in (2..16).step_by(2) {
        dir.write(&siblings_file(core), "zz\n");
    }
    assert_eq!(read_topology(dir.path()).unwrap(), whole);
}

/// Siblings are read from their file whenever the L1 cannot stand for
/// them: a core read before had siblings other than its L1's CPUs (an SMT4
/// core whose L1 serves pairs, as POWER9's big cores report), or this
/// core's L1 is unlike that core's (another size: a hybrid part's other
/// kind of core), or the L1 serves one CPU (a core without SMT, or a
/// platform reporting the L1 per thread). A garbled file is then an error
/// naming it, and a good one gives the cores.
#[test]
fn siblings_unlike_the_l1_read_before_are_read() {
    let expect_read = |dir: &TempDir, cpu: u32| {
        dir.write(&siblings_file(cpu), "zz\n");
        let err = read_topology(dir.path()).unwrap_err();
        assert!(err.to_string().contains(&siblings_file(cpu)), "{err}");
    };
    // SMT4 cores of 4 CPUs, L1 per pair: the first core's siblings are not
    // its L1's CPUs, so the second core's file is read.
    let dir = TempDir::new("sysfs-siblings-smt4");
    write_smt(&dir, 8, 4, 2, |_| "32K");
    let t = read_topology(dir.path()).unwrap();
    // The core is the siblings' 4-7 (its L2 merged in), not the L1's 4-5.
    let core = t.domain(t.smallest_holding(&set("4-6")));
    assert_eq!((core.level, &core.cpus), (Level::Core, &set("4-7")));
    expect_read(&dir, 4);
    // SMT pairs, L1 of 48K on CPUs 0-3 and 32K on 4-7: CPU 4's core is
    // unlike the first core read.
    let dir = TempDir::new("sysfs-siblings-hybrid");
    write_smt(&dir, 8, 2, 2, |cpu| if cpu < 4 { "48K" } else { "32K" });
    let t = read_topology(dir.path()).unwrap();
    let core = t.domain(t.smallest_holding(&set("4-5")));
    assert_eq!((core.level, &core.cpus), (Level::Core, &set("4-5")));
    expect_read(&dir, 4);
    // CPU 6, like CPU 4 read before it, is taken from its L1: the template
    // follows the last core read.
    dir.write(&siblings_file(4), "4-5\n");
    dir.write(&siblings_file(6), "zz\n");
    assert_eq!(read_topology(dir.path()).unwrap(), t);
    // No SMT: every L1 serves one CPU, every core's file is read.
    let dir = TempDir::new("sysfs-siblings-nosmt");
    write_flat_llc(&dir, &set("0-3"));
    expect_read(&dir, 3);
}

/// A CPU with more cache directories than the first CPU listed has every
/// one of them read (where the directory's link count says how many there
/// are, it is looked at instead of probing past the last one; where it
/// does not, the probe finds them).
#[test]
fn a_cpu_with_more_cache_directories_than_the_first_has_them_all_read() {
    let dir = TempDir::new("sysfs-more-indexes");
    write_flat_llc(&dir, &set("0-3"));
    let extra = "sys/devices/system/cpu/cpu2/cache/index4";
    dir.write(&format!("{extra}/level"), "2\n");
    dir.write(&format!("{extra}/type"), "Unified\n");
    dir.write(&format!("{extra}/size"), "256K\n");
    dir.write(&format!("{extra}/shared_cpu_list"), "2\n");
    let t = read_topology(dir.path()).unwrap();
    let caches = |cpu| t.domain(t.leaf(CpuId(cpu)).unwrap()).caches.len();
    assert_eq!((caches(1), caches(2), caches(3)), (3, 4, 3));
    let l2: Vec<_> = t
        .domain(t.leaf(CpuId(2)).unwrap())
        .caches
        .iter()
        .filter(|c| c.level == 2)
        .map(|c| c.size_bytes)
        .collect();
    assert_eq!(l2, vec![Some(2048 << 10), Some(256 << 10)]);
}

/// A hand-made tree may number its cache directories with a gap (here
/// `index0`, `index1`, `index3`): every one is still read.
#[test]
fn cache_directories_numbered_with_a_gap_are_all_read() {
    let dir = TempDir::new("sysfs-gap");
    write_flat_llc(&dir, &set("0-3"));
    for cpu in 0..4 {
        std::fs::remove_dir_all(
            dir.path()
                .join(format!("sys/devices/system/cpu/cpu{cpu}/cache/index2")),
        )
        .unwrap();
    }
    let t = read_topology(dir.path()).unwrap();
    let root = t.domain(t.root());
    assert_eq!((root.level, root.caches[0].level), (Level::Llc, 3));
    let leaf = t.domain(t.leaf(CpuId(3)).unwrap());
    assert_eq!(leaf.caches.len(), 2, "{leaf:?}");
}

#[test]
fn caches_that_do_not_nest_are_refused() {
    let dir = TempDir::new("sysfs-overlap");
    let cpus = (0..3u32)
        .map(|cpu| {
            // L2 {0,1} and {1,2} overlap without nesting.
            let l2 = if cpu == 0 { "0-1" } else { "1-2" };
            let caches = vec![
                FixtureCache {
                    level: 2,
                    kind: "Unified",
                    size: "1M",
                    shared: l2.into(),
                },
                FixtureCache {
                    level: 3,
                    kind: "Unified",
                    size: "8M",
                    shared: "0-2".into(),
                },
            ];
            (cpu, caches, Some(cpu.to_string()))
        })
        .collect::<Vec<_>>();
    write_sysfs(&dir, "0-2", &cpus, &[]);
    let err = read_topology(dir.path()).unwrap_err();
    assert_eq!(err.code(), code::E_TOPOLOGY);
    assert!(err.to_string().contains("overlap"), "{err}");
}

/// Runs `read_topology` on a thread and waits at most 10 s for it: a reader
/// that blocks (the bug these tests guard against) fails the test instead
/// of hanging the suite. The thread is left behind if it never returns.
fn read_within_10s(root: &std::path::Path) -> Result<Topology, dfsched::Error> {
    let (tx, rx) = std::sync::mpsc::channel();
    let root = root.to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(read_topology(&root));
    });
    rx.recv_timeout(std::time::Duration::from_secs(10))
        .expect("read_topology did not return within 10 s: a sysfs read blocked")
}

/// Replaces one file of a good 2-CPU tree with a FIFO nobody writes to.
fn with_fifo_at(rel: &str) -> (TempDir, std::path::PathBuf) {
    let dir = TempDir::new("sysfs-fifo");
    write_flat_llc(&dir, &set("0-1"));
    let path = dir.path().join(rel);
    std::fs::remove_file(&path).unwrap();
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    (dir, path)
}

#[test]
fn a_fifo_at_cpu_online_is_a_prompt_error_naming_it() {
    let (dir, _) = with_fifo_at("sys/devices/system/cpu/online");
    let err = read_within_10s(dir.path()).unwrap_err();
    assert_eq!(err.code(), code::E_TOPOLOGY, "{err}");
    let text = err.to_string();
    assert!(text.contains("sys/devices/system/cpu/online"), "{text}");
    assert!(text.contains("FIFO"), "{text}");
}

#[test]
fn a_fifo_at_a_cache_file_is_a_prompt_error_naming_it() {
    let rel = "sys/devices/system/cpu/cpu0/cache/index3/shared_cpu_list";
    let (dir, _) = with_fifo_at(rel);
    let err = read_within_10s(dir.path()).unwrap_err();
    let text = err.to_string();
    assert!(text.contains(rel) && text.contains("FIFO"), "{text}");
}

#[test]
fn a_link_to_dev_zero_is_a_prompt_error_naming_it() {
    assert!(
        std::path::Path::new("/dev/zero").exists(),
        "premise: /dev/zero exists"
    );
    for rel in [
        "sys/devices/system/cpu/online",
        "sys/devices/system/cpu/cpu0/cache/index0/level",
        "sys/devices/system/node/node0/cpulist",
    ] {
        let dir = TempDir::new("sysfs-zero");
        write_flat_llc(&dir, &set("0-1"));
        dir.write("sys/devices/system/node/node0/cpulist", "0-1\n");
        let path = dir.path().join(rel);
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
        let err = read_within_10s(dir.path()).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(rel) && text.contains("character device"),
            "{text}"
        );
    }
}

#[test]
fn a_file_longer_than_the_cap_is_an_error_naming_it() {
    let rel = "sys/devices/system/cpu/online";
    // A valid list padded past the cap: refused for its length alone.
    let long = format!("0-1{}\n", " ".repeat(dfsched::sysfs::MAX_FILE_BYTES));
    let err = broken(rel, Some(&long));
    assert!(err.to_string().contains("longer than"), "{err}");
    // At the cap it is still read.
    let dir = TempDir::new("sysfs-at-cap");
    write_flat_llc(&dir, &set("0-1"));
    let at_cap = format!("0-1{}", " ".repeat(dfsched::sysfs::MAX_FILE_BYTES - 3));
    assert_eq!(at_cap.len(), dfsched::sysfs::MAX_FILE_BYTES);
    dir.write(rel, &at_cap);
    assert_eq!(read_topology(dir.path()).unwrap().cpus(), &set("0-1"));
}

#[test]
fn a_cpulist_of_every_other_cpu_of_8192_fits_the_cap() {
    let list: Vec<String> = (0..8192).step_by(2).map(|c: u32| c.to_string()).collect();
    let text = list.join(",");
    assert!(
        text.len() < dfsched::sysfs::MAX_FILE_BYTES,
        "{}",
        text.len()
    );
    let dir = TempDir::new("sysfs-sparse");
    write_flat_llc(&dir, &set("0-1"));
    dir.write("sys/devices/system/cpu/online", &format!("{text}\n"));
    // The list is read whole: 4,096 CPUs, most of them without caches.
    let t = read_topology(dir.path()).unwrap();
    assert_eq!(t.nr_cpus(), 4096);
    assert_eq!(t.cpus().to_string(), text);
}

/// The tree `write_test_tree` writes reads back as the engine's own
/// synthetic topology of that shape, so every cache the reader took from a
/// sibling rather than its own files is the one it would have read.
#[test]
fn a_generated_tree_reads_back_as_the_synthetic_topology() {
    for (nodes, llcs, cores, smt) in [(1, 1, 2, 1), (2, 2, 2, 2), (2, 4, 8, 2), (1, 3, 4, 4)] {
        let dir = TempDir::new("sysfs-gen");
        dfsched::sysfs::write_test_tree(dir.path(), nodes, llcs, cores, smt).unwrap();
        let t = read_topology(dir.path()).unwrap();
        assert_eq!(
            t,
            Topology::test(nodes, llcs, cores, smt),
            "{nodes}x{llcs}x{cores}x{smt}"
        );
    }
}

/// The largest fixture: 8,192 CPUs (the kernel's `NR_CPUS` limit), 2 nodes
/// × 64 LLCs × 32 cores × SMT2. Its speed is measured by the `topology`
/// bench in benches/, not here.
#[test]
fn an_8192_cpu_tree_reads_with_every_domain() {
    let dir = TempDir::new("sysfs-8k");
    dfsched::sysfs::write_test_tree(dir.path(), 2, 64, 32, 2).unwrap();
    let t = read_topology(dir.path()).unwrap();
    assert_eq!(t.nr_cpus(), 8192);
    let count = |l: Level| t.domains().iter().filter(|d| d.level == l).count();
    assert_eq!(count(Level::Cpu), 8192);
    assert_eq!(count(Level::Core), 4096);
    assert_eq!(count(Level::Llc), 128);
    assert_eq!(count(Level::Node), 2);
    assert_eq!(count(Level::Machine), 1);
    assert_eq!(t, Topology::test(2, 64, 32, 2));
}

/// The runtime's start (what `dfsched_init()` does, with
/// `DFSCHED_SYSFS_ROOT` as `sysfs_root`) reads the same bounded way: a FIFO
/// at `cpu/online` is a prompt topology error, not a hang.
#[test]
fn the_runtime_refuses_a_fifo_tree_promptly() {
    let (dir, _) = with_fifo_at("sys/devices/system/cpu/online");
    let cfg = dfsched::RuntimeConfig {
        sysfs_root: dir.path().to_path_buf(),
        external_load: false,
        ..Default::default()
    };
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(dfsched::Runtime::start(cfg).map(|rt| rt.shutdown()));
    });
    let err = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("Runtime::start did not return within 10 s")
        .unwrap_err();
    assert_eq!(err.code(), code::E_TOPOLOGY, "{err}");
    assert!(err.to_string().contains("FIFO"), "{err}");
}

/// A process confined to some CPUs reads their files alone
/// (`read_topology_within`, what the runtime reads at its start): a broken
/// file of a CPU it may not use, which fails the machine's whole reading,
/// is never opened, and the part read is the machine's topology restricted
/// to those CPUs.
#[test]
fn reading_within_some_cpus_opens_none_of_the_others_files() {
    let dir = TempDir::new("sysfs-within");
    dfsched::sysfs::write_test_tree(dir.path(), 1, 2, 2, 2).unwrap();
    let whole = read_topology(dir.path()).unwrap();
    assert_eq!(whole, Topology::test(1, 2, 2, 2), "premise: the tree reads");
    // CPU 6's L1 list (the first of its core, so the whole reading opens
    // it) made a FIFO nobody writes to: reading it is an error.
    let rel = "sys/devices/system/cpu/cpu6/cache/index0/shared_cpu_list";
    let path = dir.path().join(rel);
    std::fs::remove_file(&path).unwrap();
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    let err = read_within_10s(dir.path()).unwrap_err();
    assert!(
        err.to_string().contains(rel),
        "premise: it is read whole: {err}"
    );

    for within in ["0-3", "2-5", "0,2,4", "0-5,7"] {
        let within = set(within);
        let part = dfsched::sysfs::read_topology_within(dir.path(), &within)
            .unwrap_or_else(|e| panic!("within {within}: {e}"));
        assert_eq!(
            part,
            whole.restricted_to(&within).unwrap(),
            "within {within}"
        );
    }
    // With CPU 6 among them its file is read, and the error names it.
    let err = dfsched::sysfs::read_topology_within(dir.path(), &set("6-7")).unwrap_err();
    assert!(err.to_string().contains(rel), "{err}");
}
