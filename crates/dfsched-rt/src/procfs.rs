//! What dfsched reads from `/proc`: per-thread scheduler counters (for the
//! benchmarks' migration and context-switch figures), whether one of our
//! threads is running or queued right now (for the idle step, `idle.rs`)
//! and, for the balancer, the outside load: `/proc/stat` every pass
//! (`cpustat.rs`, the signals of `signals.rs`) and, rarely, the runnable
//! threads of *other* processes with their CFS groups (`refresh.rs`, a
//! budgeted sweep spread over passes).
//!
//! A thread is runnable when its `stat` says state `R`; field 39 is the CPU
//! it last ran on. [`LoadSampler::sample_outside`] still takes the whole
//! look in one go (every process's `/proc/<pid>/stat` and, for
//! multi-threaded processes, `/proc/<pid>/task/<tid>/stat`): tests and the
//! `scan_cost` example use it to check the weighing against the real
//! kernel; no balancer pass does (its cost grows with the threads on the
//! machine, ≈ 16 µs each). Buffers are reused across reads, processes or
//! threads that vanish mid-scan are skipped, and every file opened is
//! counted ([`LoadSampler::files_opened`]).
//!
//! To weigh by CFS group (`weigh.rs`), a scan also reads each thread's nice
//! (`stat` field 19) and, once per process with a runnable thread and never
//! for the others, the process's group:
//! `/proc/PID/cgroup` (the cgroup-v1 `cpu` controller's line, else the v2
//! `0::` line: a path other than `/` is a cpu cgroup of its own) and, for
//! a process in the root cgroup while `kernel.sched_autogroup_enabled` is
//! 1, `/proc/PID/autogroup` (`/autogroup-N nice X`; empty for the root
//! autogroup of kernel threads and init). A `/` read from inside a cgroup
//! namespace (a container) is the container's cgroup, not the root, and
//! counts as a cpu cgroup. A process whose files cannot be read counts
//! thread by thread, as before weighing.

use crate::error::Error;
use crate::weigh::{GroupInfo, GroupKey, OutsideThread, SchedGroup};
use dfsched_core::CpuId;
use std::collections::HashMap;

mod cpustat;
mod groups;
mod refresh;

pub use cpustat::{clock_ticks_per_sec, parse_cpu_stat, CpuStat};
pub use groups::{GroupContext, OutsideSample};
pub use refresh::{Refresh, Stepped, DEFAULT_REFRESH_MS, REFRESH_BUDGET_US};
use std::fs::File;
use std::path::{Path, PathBuf};

/// The most bytes [`LoadSampler`] reads of one `/proc` file: `/proc/stat`
/// of 8,192 CPUs is about 1 MiB; anything longer is not one of ours.
const MAX_PROC_FILE_BYTES: usize = 4 << 20;

/// Per-thread scheduler counters from `/proc/<pid>/task/<tid>/sched` (or
/// `/proc/thread-self/sched`). All count since the thread started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ThreadSched {
    /// Times the thread moved to another CPU (`se.nr_migrations`).
    pub nr_migrations: u64,
    /// Context switches, voluntary and involuntary (`nr_switches`).
    pub nr_switches: u64,
    /// Switches because the thread blocked or yielded.
    pub nr_voluntary_switches: u64,
    /// Switches because the thread was preempted.
    pub nr_involuntary_switches: u64,
    /// CPU time the thread consumed, in nanoseconds (`se.sum_exec_runtime`,
    /// which the kernel prints in milliseconds with six decimals).
    pub sum_exec_runtime_ns: u64,
}

/// The calling thread's counters, from `/proc/thread-self/sched`.
pub fn thread_self_sched() -> Result<ThreadSched, Error> {
    read_sched(Path::new("/proc/thread-self/sched"))
}

/// Thread `tid` of process `pid`'s counters.
pub fn thread_sched(pid: u32, tid: u64) -> Result<ThreadSched, Error> {
    read_sched(&PathBuf::from(format!("/proc/{pid}/task/{tid}/sched")))
}

fn read_sched(path: &Path) -> Result<ThreadSched, Error> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::Io {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    parse_sched(&text).map_err(|reason| Error::Io {
        path: path.to_path_buf(),
        reason,
    })
}

/// Parses the text of a `sched` file. Every counter must be present: a
/// kernel that lacks one is reported rather than read as 0.
pub(crate) fn parse_sched(text: &str) -> Result<ThreadSched, String> {
    let mut out = ThreadSched::default();
    let mut found = 0u32;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        let slot = match key {
            "se.nr_migrations" => &mut out.nr_migrations,
            "nr_switches" => &mut out.nr_switches,
            "nr_voluntary_switches" => &mut out.nr_voluntary_switches,
            "nr_involuntary_switches" => &mut out.nr_involuntary_switches,
            "se.sum_exec_runtime" => {
                out.sum_exec_runtime_ns = parse_ms_as_ns(value)
                    .ok_or_else(|| format!("bad se.sum_exec_runtime {value:?}"))?;
                found += 1;
                continue;
            }
            _ => continue,
        };
        *slot = value
            .parse()
            .map_err(|_| format!("bad {key} value {value:?}"))?;
        found += 1;
    }
    if found < 5 {
        return Err("missing counters (need se.nr_migrations, nr_switches, \
                    nr_voluntary_switches, nr_involuntary_switches, se.sum_exec_runtime)"
            .into());
    }
    Ok(out)
}

/// `"12.345678"` milliseconds (the kernel's `SPLIT_NS` format) as
/// nanoseconds.
fn parse_ms_as_ns(text: &str) -> Option<u64> {
    let (ms, frac) = text.split_once('.').unwrap_or((text, ""));
    let ms: u64 = ms.parse().ok()?;
    if frac.len() > 6 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut ns_part: u64 = if frac.is_empty() {
        0
    } else {
        frac.parse().ok()?
    };
    for _ in frac.len()..6 {
        ns_part *= 10;
    }
    ms.checked_mul(1_000_000)?.checked_add(ns_part)
}

/// The fields of a `stat` line the load sample needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StatFields {
    /// Field 3: `R` running or runnable, `S` sleeping, …
    pub state: u8,
    /// Fields 14 + 15, utime + stime: CPU time in clock ticks (of the
    /// whole process in `/proc/PID/stat`, of the thread in a task's).
    pub cpu_ticks: u64,
    /// Field 19: the thread's nice value, −20 … 19.
    pub nice: i8,
    /// Field 20: threads in the process.
    pub num_threads: u64,
    /// Field 39: the CPU the thread last ran on.
    pub processor: u32,
}

/// Parses a `/proc/…/stat` line. The command name (field 2) may hold spaces
/// and parentheses, so fields are counted after its *last* `)`. A nice
/// outside −20 … 19 is refused as garbage.
pub(crate) fn parse_stat(line: &str) -> Option<StatFields> {
    let rest = &line[line.rfind(')')? + 1..];
    let mut fields = rest.split_ascii_whitespace();
    // `fields` starts at field 3.
    let state = *fields.next()?.as_bytes().first()?;
    let utime: u64 = fields.nth(14 - 4)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    let nice: i8 = fields.nth(19 - 16)?.parse().ok()?;
    if !(-20..=19).contains(&nice) {
        return None;
    }
    let num_threads = fields.next()?.parse().ok()?;
    let processor = fields.nth(39 - 21)?.parse().ok()?;
    Some(StatFields {
        state,
        cpu_ticks: utime.saturating_add(stime),
        nice,
        num_threads,
        processor,
    })
}

/// The state letter of a `/proc/…/stat` line (field 3: `R` running or
/// runnable, `S` sleeping, `D` in uninterruptible wait, …), without
/// requiring the fields after it: `None` for a line with no `)` or no
/// field after it, or a field that is not one ASCII letter.
pub(crate) fn parse_state(line: &str) -> Option<u8> {
    let rest = &line[line.rfind(')')? + 1..];
    let field = rest.split_ascii_whitespace().next()?.as_bytes();
    match field {
        [letter] if letter.is_ascii_alphabetic() => Some(*letter),
        _ => None,
    }
}

/// Whether thread `tid` of process `pid` is running or waiting for a CPU
/// right now (state `R` in `/proc/<pid>/task/<tid>/stat`): `None` if the
/// file cannot be read or parsed (the thread is gone, `/proc` is not
/// mounted).
pub(crate) fn thread_runnable_now(pid: u32, tid: u64) -> Option<bool> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    parse_state(&text).map(|state| state == b'R')
}

/// Samples other processes' runnable threads per CPU; keeps its buffers
/// between samples.
#[derive(Debug)]
pub struct LoadSampler {
    proc_root: PathBuf,
    text: Vec<u8>,
    per_cpu: Vec<u32>,
    /// One process's runnable threads as `(cpu, nice)`, while it is scanned.
    threads: Vec<(usize, i8)>,
    /// Files and directories opened so far (see [`LoadSampler::files_opened`]).
    files: u64,
    /// `PROC/stat`, kept open between reads ([`LoadSampler::read_stat_file`]).
    stat_file: Option<File>,
}

/// Reads `file` from where it stands to its end into `text` (emptied first); false if the read
/// failed or the file is longer than [`MAX_PROC_FILE_BYTES`].
fn read_whole(file: &mut File, text: &mut Vec<u8>) -> bool {
    text.clear();
    crate::sys::read_bounded(file, text, MAX_PROC_FILE_BYTES).is_ok_and(|within| within)
}

impl LoadSampler {
    /// A sampler of `proc_root` (normally `/proc`).
    pub fn new(proc_root: impl Into<PathBuf>) -> Self {
        LoadSampler {
            proc_root: proc_root.into(),
            text: Vec::with_capacity(crate::sys::READ_CHUNK),
            per_cpu: Vec::new(),
            threads: Vec::new(),
            files: 0,
            stat_file: None,
        }
    }

    /// Files and directories this sampler has opened (or tried to) since it
    /// was made: what tests count to show that a pass's reads do not grow
    /// with the threads on the machine.
    pub fn files_opened(&self) -> u64 {
        self.files
    }

    /// Runnable threads per CPU of every process but `skip_pid`, as
    /// `(cpu, count)` pairs in CPU order, CPUs with no runnable thread left
    /// out. Fails only if `proc_root` itself cannot be listed.
    pub fn sample(&mut self, skip_pid: u32) -> Result<Vec<(CpuId, u32)>, Error> {
        self.sample_except(|pid| pid == skip_pid)
    }

    /// As [`LoadSampler::sample`], skipping every process for which `skip`
    /// is true (ours, and those whose load the agent reports).
    pub fn sample_except(
        &mut self,
        skip: impl Fn(u32) -> bool,
    ) -> Result<Vec<(CpuId, u32)>, Error> {
        let mut per_cpu = std::mem::take(&mut self.per_cpu);
        per_cpu.iter_mut().for_each(|n| *n = 0);
        let scanned = self.scan(skip, |_, _, threads| {
            for &(cpu, _) in threads {
                if per_cpu.len() <= cpu {
                    per_cpu.resize(cpu + 1, 0);
                }
                per_cpu[cpu] += 1;
            }
        });
        let out = per_cpu
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(cpu, &n)| (CpuId(cpu as u32), n))
            .collect();
        self.per_cpu = per_cpu;
        scanned.map(|()| out)
    }

    /// The runnable threads of every process for which `skip` is false,
    /// each with its nice value and its process's CFS group, ready to be
    /// weighed ([`OutsideSample::weigh`]). A process's group files are read
    /// once, and only for a process with a runnable thread; a process whose
    /// files cannot be read counts thread by thread. Fails only if
    /// `proc_root` itself cannot be listed.
    pub fn sample_outside(&mut self, skip: impl Fn(u32) -> bool) -> Result<OutsideSample, Error> {
        let context = self.group_context();
        let mut out = OutsideSample {
            context: Some(context),
            ..OutsideSample::default()
        };
        let mut index: HashMap<GroupKey, u32> = HashMap::new();
        self.scan(skip, |sampler, pid, threads| {
            let group = match sampler.group_of(context, pid) {
                SchedGroup::Group { key, weight } => {
                    let next = out.groups.len() as u32;
                    let g = *index.entry(key.clone()).or_insert(next);
                    if g == next {
                        out.groups.push(GroupInfo {
                            key,
                            weight,
                            runnable: 0,
                        });
                    }
                    let n = &mut out.groups[g as usize].runnable;
                    *n = n.saturating_add(threads.len() as u32);
                    Some(g)
                }
                SchedGroup::Root | SchedGroup::Unknown => None,
            };
            out.threads
                .extend(threads.iter().map(|&(cpu, nice)| OutsideThread {
                    pid,
                    group,
                    cpu: CpuId(cpu as u32),
                    nice,
                }));
        })?;
        Ok(out)
    }

    /// The text of a small file in the sampler's buffer: an open, one read
    /// and a close for a `/proc` file (std's `read_to_string` adds a
    /// `statx`, an `lseek` and a read to see the end: twice the calls, on
    /// every pass and for every process of a sweep). A `/proc` file is a
    /// seq_file, which fills a read as far as it has text: a read that
    /// returns less than it was offered is the end. At most
    /// [`MAX_PROC_FILE_BYTES`].
    /// `PROC/stat` read whole through a descriptor kept open between calls
    /// and rewound (the kernel writes the file afresh at offset 0): every
    /// balancer pass reads it, and on a VM a pass's `open` of it, path walk
    /// and buffer included, cost about as much as the read (≈ 20 µs of a
    /// pass's CPU after the thread wakes with cold caches). A failed read
    /// drops the descriptor and opens the file once more.
    fn read_stat_file(&mut self) -> Option<&str> {
        use std::io::{Seek as _, SeekFrom};
        self.files += 1;
        for _ in 0..2 {
            let file = match &mut self.stat_file {
                Some(file) => file,
                None => self
                    .stat_file
                    .insert(File::open(self.proc_root.join("stat")).ok()?),
            };
            if file.seek(SeekFrom::Start(0)).is_ok() && read_whole(file, &mut self.text) {
                return std::str::from_utf8(&self.text).ok();
            }
            self.stat_file = None;
        }
        None
    }

    fn read_small(&mut self, path: &Path) -> Option<&str> {
        self.files += 1;
        let mut file = File::open(path).ok()?;
        read_whole(&mut file, &mut self.text).then(|| std::str::from_utf8(&self.text).ok())?
    }

    /// Calls `runnable(self, pid, threads)` once per process not skipped
    /// that has a runnable thread, `threads` its runnable threads as
    /// `(cpu, nice)`. Fails only if `proc_root` itself cannot be listed.
    fn scan(
        &mut self,
        skip: impl Fn(u32) -> bool,
        mut runnable: impl FnMut(&mut Self, u32, &[(usize, i8)]),
    ) -> Result<(), Error> {
        let dir = std::fs::read_dir(&self.proc_root).map_err(|e| Error::Io {
            path: self.proc_root.clone(),
            reason: e.to_string(),
        })?;
        let mut path = self.proc_root.clone();
        let mut threads = std::mem::take(&mut self.threads);
        let keep = |threads: &mut Vec<(usize, i8)>, f: StatFields| {
            // CPU numbers come from the kernel; bound them anyway so a
            // garbled file cannot make a caller allocate without limit.
            if f.state == b'R' && f.processor < dfsched_core::cpuset::MAX_CPUS {
                threads.push((f.processor as usize, f.nice));
            }
        };
        for entry in dir.flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if skip(pid) {
                continue;
            }
            threads.clear();
            path.push(name);
            path.push("stat");
            let fields = self.read_stat(&path);
            path.pop();
            match fields {
                Some(f) if f.num_threads <= 1 => keep(&mut threads, f),
                // A process that vanished, or a kernel whose stat we cannot
                // parse: skip it rather than fail the whole sample.
                None => {}
                Some(_) => {
                    path.push("task");
                    if let Ok(tasks) = std::fs::read_dir(&path) {
                        for task in tasks.flatten() {
                            path.push(task.file_name());
                            path.push("stat");
                            if let Some(f) = self.read_stat(&path) {
                                keep(&mut threads, f);
                            }
                            path.pop();
                            path.pop();
                        }
                    }
                    path.pop();
                }
            }
            path.pop();
            if !threads.is_empty() {
                runnable(self, pid, &threads);
            }
        }
        self.threads = threads;
        Ok(())
    }

    fn read_stat(&mut self, path: &Path) -> Option<StatFields> {
        parse_stat(self.read_small(path)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of several pages is read whole (reads go on while they fill
    /// what they were offered), an empty one as empty, this machine's
    /// `/proc/stat` as the kernel prints it, and a missing one as `None`.
    #[test]
    fn read_small_reads_whole_files_of_any_size_up_to_the_cap() {
        let tmp = tempfile::Builder::new()
            .prefix("dfsched-read-small-")
            .tempdir()
            .unwrap();
        let dir = tmp.path();
        let long: String = (0..3000).map(|i| format!("{i} ")).collect();
        assert!(long.len() > 3 * crate::sys::READ_CHUNK);
        std::fs::write(dir.join("long"), &long).unwrap();
        std::fs::write(dir.join("empty"), "").unwrap();
        let mut s = LoadSampler::new(dir);
        assert_eq!(s.read_small(&dir.join("long")), Some(long.as_str()));
        assert_eq!(s.read_small(&dir.join("empty")), Some(""));
        assert_eq!(s.read_small(&dir.join("missing")), None);
        let stat = s.read_small(Path::new("/proc/stat")).unwrap().to_string();
        assert!(stat.starts_with("cpu ") && stat.ends_with('\n'), "{stat}");
        assert_eq!(s.files_opened(), 4);
    }

    const SCHED: &str = "cat (6343, #threads: 1)
-------------------------------------------------------------------
se.exec_start                                :        636190.433954
se.sum_exec_runtime                          :            12.000345
se.nr_migrations                             :                    5
nr_switches                                  :                   11
nr_voluntary_switches                        :                    7
nr_involuntary_switches                      :                    4
se.load.weight                               :              1048576
";

    #[test]
    fn parses_sched_counters() {
        let s = parse_sched(SCHED).unwrap();
        assert_eq!(
            s,
            ThreadSched {
                nr_migrations: 5,
                nr_switches: 11,
                nr_voluntary_switches: 7,
                nr_involuntary_switches: 4,
                sum_exec_runtime_ns: 12_000_345,
            }
        );
    }

    #[test]
    fn refuses_sched_text_missing_counters_or_garbled() {
        let missing = SCHED.replace("nr_switches", "nr_whatever");
        assert!(parse_sched(&missing).is_err());
        let garbled = SCHED.replace("  5\n", "  x\n");
        assert!(parse_sched(&garbled)
            .unwrap_err()
            .contains("se.nr_migrations"));
    }

    #[test]
    fn milliseconds_convert_to_nanoseconds() {
        assert_eq!(parse_ms_as_ns("0.000000"), Some(0));
        assert_eq!(parse_ms_as_ns("1.5"), Some(1_500_000));
        assert_eq!(parse_ms_as_ns("7"), Some(7_000_000));
        assert_eq!(parse_ms_as_ns("1.1234567"), None);
        assert_eq!(parse_ms_as_ns("1.-3"), None);
    }

    #[test]
    fn reads_this_threads_real_counters() {
        let s = thread_self_sched().unwrap();
        assert!(s.nr_switches >= s.nr_voluntary_switches);
        let again = thread_sched(std::process::id(), crate::sys::gettid()).unwrap();
        assert!(again.sum_exec_runtime_ns >= s.sum_exec_runtime_ns);
        assert!(thread_sched(std::process::id(), u32::MAX as u64).is_err());
    }

    pub(super) fn stat_line(comm: &str, state: char, threads: u64, cpu: u32) -> String {
        nice_stat_line(comm, state, threads, cpu, 0)
    }

    pub(super) fn nice_stat_line(
        comm: &str,
        state: char,
        threads: u64,
        cpu: u32,
        nice: i8,
    ) -> String {
        // 52 fields as in Linux 6.x; only 2, 3, 19, 20 and 39 matter here.
        let mut f: Vec<String> = (1..=52).map(|i| i.to_string()).collect();
        f[1] = format!("({comm})");
        f[2] = state.to_string();
        f[18] = nice.to_string();
        f[19] = threads.to_string();
        f[38] = cpu.to_string();
        f.join(" ")
    }

    #[test]
    fn parses_stat_even_with_parentheses_in_the_name() {
        let f = parse_stat(&stat_line("a) R (b", 'S', 3, 1)).unwrap();
        assert_eq!(
            f,
            StatFields {
                state: b'S',
                cpu_ticks: 14 + 15,
                nice: 0,
                num_threads: 3,
                processor: 1
            }
        );
        assert!(parse_stat("12 (x) R 1 2").is_none(), "too short");
    }

    #[test]
    fn parses_the_threads_nice_and_refuses_a_garbled_one() {
        for nice in [-20, -1, 0, 5, 19] {
            let f = parse_stat(&nice_stat_line("n", 'R', 1, 0, nice)).unwrap();
            assert_eq!(f.nice, nice);
        }
        let line = nice_stat_line("n", 'R', 1, 0, 0);
        let mut f: Vec<&str> = line.split(' ').collect();
        for bad in ["20", "-21", "x", "1.5", "--1"] {
            f[18] = bad;
            assert_eq!(parse_stat(&f.join(" ")), None, "nice {bad:?}");
        }
        // Truncated right after the nice field.
        let cut: Vec<&str> = line.split(' ').take(19).collect();
        assert_eq!(parse_stat(&cut.join(" ")), None);
    }

    #[test]
    fn parses_the_state_letter_and_refuses_truncated_or_garbled_lines() {
        assert_eq!(parse_state(&stat_line("a) R (b", 'S', 3, 1)), Some(b'S'));
        assert_eq!(
            parse_state("12 (x) D"),
            Some(b'D'),
            "fields after it optional"
        );
        assert_eq!(parse_state("12 (x) R 1 2\n"), Some(b'R'));
        for bad in [
            "",
            "12 (x)",
            "12 (x) ",
            "12 x R 1",
            "12 (x) 7 1",
            "12 (x) RS 1",
            "12 (x) \u{e9} 1",
        ] {
            assert_eq!(parse_state(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn tells_a_running_thread_from_a_sleeping_one() {
        let pid = std::process::id();
        // The calling thread is running as it reads its own state.
        assert_eq!(thread_runnable_now(pid, crate::sys::gettid()), Some(true));
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let sleeper = std::thread::spawn(move || {
            tid_tx.send(crate::sys::gettid()).unwrap();
            let _ = stop_rx.recv();
        });
        let tid = tid_rx.recv().unwrap();
        // It reaches its recv soon; until then it may still be running.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while thread_runnable_now(pid, tid) != Some(false) {
            assert!(std::time::Instant::now() < deadline, "never seen asleep");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        drop(stop_tx);
        sleeper.join().unwrap();
        assert_eq!(thread_runnable_now(pid, u32::MAX as u64), None);
    }

    #[test]
    fn sample_counts_runnable_threads_of_other_processes_per_cpu() {
        let tmp = tempfile::Builder::new()
            .prefix("dfsched-procfs-")
            .tempdir()
            .unwrap();
        let root = tmp.path();
        let write = |rel: &str, text: String| {
            let p = root.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        // pid 10: single-threaded, runnable on CPU 1.
        write("10/stat", stat_line("one", 'R', 1, 1));
        // pid 20: three threads: R on 0, R on 3, S on 0.
        write("20/stat", stat_line("many", 'S', 3, 0));
        write("20/task/20/stat", stat_line("many", 'R', 3, 0));
        write("20/task/21/stat", stat_line("many", 'R', 3, 3));
        write("20/task/22/stat", stat_line("many", 'S', 3, 0));
        // pid 30 is "us": skipped although runnable.
        write("30/stat", stat_line("me", 'R', 1, 0));
        // Noise: a non-numeric entry and a process with a garbled stat.
        write("self/stat", stat_line("self", 'R', 1, 0));
        write("40/stat", "garbage".into());
        let mut sampler = LoadSampler::new(root);
        let got = sampler.sample(30).unwrap();
        assert_eq!(got, vec![(CpuId(0), 1), (CpuId(1), 1), (CpuId(3), 1)]);
        // Buffers are reused and counts start afresh.
        std::fs::remove_dir_all(root.join("20")).unwrap();
        assert_eq!(sampler.sample(30).unwrap(), vec![(CpuId(1), 1)]);
        tmp.close().unwrap();
        assert!(sampler.sample(30).is_err(), "a missing /proc is an error");
    }

    #[test]
    fn sample_of_the_real_proc_skips_our_own_threads() {
        let mut sampler = LoadSampler::new("/proc");
        let got = sampler.sample(std::process::id()).unwrap();
        // Whatever else runs, CPU numbers are real ones.
        let cpus = crate::sys::get_affinity(0).unwrap();
        let online: dfsched_core::CpuSet =
            std::fs::read_to_string("/sys/devices/system/cpu/online")
                .unwrap()
                .parse()
                .unwrap();
        for (cpu, n) in got {
            assert!(n > 0);
            assert!(online.contains(cpu) || cpus.contains(cpu), "{cpu}");
        }
    }
}
