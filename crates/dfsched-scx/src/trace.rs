//! The dispatch trace: what `dfsched-scx run --trace FILE` writes (its format and writer), and its
//! parser (`dfsched-scx trace FILE` summarises the parsed events: `trace_summary.rs`).
//!
//! The BPF side's `ops.running` writes a record to a ring buffer each time a thread gets a CPU (its
//! time, CPU, tid and group); the loader drains the ring into the file, and writes there too every map
//! change it makes (a group's home, a thread placed or unplaced), stamped on the same clock
//! (`CLOCK_MONOTONIC`, which is `bpf_ktime_get_ns`). So the file alone says where each thread ran and
//! where it was meant to run at that moment, and when a CPU came or went. One line per event, text
//! (version 2):
//!
//! ```text
//! # dfsched-scx trace 2 (CLOCK_MONOTONIC ns): R t cpu tid gid|-; G t gid home|- quota; P t tid gid; U t tid; C t cpu on|off
//! R 1234567890 3 4242 0          thread 4242 started running on CPU 3, in scheduler group 0 (- : none)
//! G 1234500000 0 0-3 0           group 0's home became 0-3 (- : the group ended), quota 0 (the default)
//! P 1234500100 4242 0            thread 4242 placed in group 0
//! U 1234600000 4242              thread 4242 unplaced
//! C 1234700000 5 off             CPU 5 went offline (on: came online): the BPF side's ops.cpu_offline
//! # end records 1234 dropped_ring 0 dropped_size 0
//! ```
//!
//! Version 2 added the `C` lines (version 1 traces, without them, are read as they are).
//!
//! Lines are in the order written, not in time order (records reach the file in batches, after the map
//! changes the loader wrote meanwhile): readers sort by time ([`parse`] does).
//!
//! Invariants: the file never grows past its limit (`--trace-max-mb`): what does not fit is dropped
//! and counted (`dropped_size`), as the BPF side counts what did not fit in its ring
//! (`dropped_ring`); the `# end` line is written last, within the limit (room is kept for it), so a
//! trace without it was cut short (the loader killed). The summary is `trace_summary.rs`'s.

use crate::proto::{format_cpulist, parse_cpulist};
use serde::Serialize;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// The first line's start; its version is the number after it.
pub const HEADER: &str = "# dfsched-scx trace 2";

/// The first line of a version-1 trace (no `C` lines), still read.
const HEADER_V1: &str = "# dfsched-scx trace 1";

/// Bytes kept free for the `# end` line.
const END_ROOM: u64 = 128;

/// The size of one ring record (`struct dfs_trace_rec` of intf.h; dfsched.bpf.c asserts it).
pub const RECORD_BYTES: usize = 24;

/// One ring record, as the BPF side wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawRecord {
    /// `bpf_ktime_get_ns()` when the thread started running.
    pub t_ns: u64,
    /// The CPU.
    pub cpu: u32,
    /// The thread.
    pub tid: u32,
    /// Its group, `None` when it had none in use.
    pub gid: Option<u32>,
}

impl RawRecord {
    /// Reads a record from the ring's bytes (`None` if too short).
    pub fn from_bytes(b: &[u8]) -> Option<RawRecord> {
        if b.len() < RECORD_BYTES {
            return None;
        }
        let u32_at = |o: usize| -> Option<u32> {
            Some(u32::from_ne_bytes(b.get(o..o + 4)?.try_into().ok()?))
        };
        let t_ns = u64::from_ne_bytes(b.get(..8)?.try_into().ok()?);
        let gid = u32_at(16)?;
        Some(RawRecord {
            t_ns,
            cpu: u32_at(8)?,
            tid: u32_at(12)?,
            gid: (gid != crate::intf::TRACE_UNGROUPED).then_some(gid),
        })
    }
}

/// What a ring record says, read by its tid and gid (intf.h's `struct dfs_trace_rec`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingEvent {
    /// A thread started running.
    Run(RawRecord),
    /// A CPU came online (`true`) or went offline, at `t_ns`.
    Hotplug {
        /// `bpf_ktime_get_ns()` in the callback.
        t_ns: u64,
        /// The CPU.
        cpu: u32,
        /// Online (`true`) or offline.
        online: bool,
    },
}

impl RingEvent {
    /// Reads a ring record (`None` if too short).
    pub fn from_bytes(b: &[u8]) -> Option<RingEvent> {
        let r = RawRecord::from_bytes(b)?;
        let hotplug = |online| RingEvent::Hotplug {
            t_ns: r.t_ns,
            cpu: r.cpu,
            online,
        };
        Some(match (r.tid, r.gid) {
            (0, Some(crate::intf::TRACE_CPU_ONLINE)) => hotplug(true),
            (0, Some(crate::intf::TRACE_CPU_OFFLINE)) => hotplug(false),
            _ => RingEvent::Run(r),
        })
    }
}

/// What a finished trace holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Run records written.
    pub records: u64,
    /// Hotplug records written (`C` lines).
    pub hotplug: u64,
    /// Lines not written because the file was at its limit.
    pub dropped_size: u64,
}

/// Writes the trace file, within its size limit.
pub struct Writer {
    out: std::io::BufWriter<std::fs::File>,
    path: PathBuf,
    max_bytes: u64,
    written: u64,
    totals: Totals,
    error: Option<std::io::Error>,
}

impl Writer {
    /// Creates (truncates) `path` and writes the header, which ends with `about` (the settings).
    pub fn create(path: &Path, max_bytes: u64, about: &str) -> std::io::Result<Writer> {
        let file = std::fs::File::create(path)?;
        let mut w = Writer {
            out: std::io::BufWriter::new(file),
            path: path.to_path_buf(),
            max_bytes: max_bytes.max(2 * END_ROOM),
            written: 0,
            totals: Totals::default(),
            error: None,
        };
        w.line(&format!(
            "{HEADER} (CLOCK_MONOTONIC ns): R t cpu tid gid|-; G t gid home|- quota; P t tid gid; U t tid; C t cpu on|off; {about}"
        ));
        Ok(w)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `l` if it fits (keeping room for the end line), else counts it dropped. After a write
    /// error nothing more is written (the error is returned by [`Writer::finish`]).
    fn line(&mut self, l: &str) -> bool {
        let len = l.len() as u64 + 1;
        if self.written + len + END_ROOM > self.max_bytes {
            self.totals.dropped_size += 1;
            return false;
        }
        if self.error.is_some() {
            return false;
        }
        if let Err(e) = writeln!(self.out, "{l}") {
            self.error = Some(e);
            return false;
        }
        self.written += len;
        true
    }

    /// A record from the ring (its raw bytes; a short one is ignored): a run or a hotplug event.
    pub fn ring_record(&mut self, bytes: &[u8]) {
        match RingEvent::from_bytes(bytes) {
            Some(RingEvent::Run(r)) => self.run(r),
            Some(RingEvent::Hotplug { t_ns, cpu, online }) => self.hotplug(t_ns, cpu, online),
            None => {}
        }
    }

    /// CPU `cpu` came online (`online`) or went offline at `t_ns`.
    pub fn hotplug(&mut self, t_ns: u64, cpu: u32, online: bool) {
        let state = if online { "on" } else { "off" };
        if self.line(&format!("C {t_ns} {cpu} {state}")) {
            self.totals.hotplug += 1;
        }
    }

    /// A run record.
    pub fn run(&mut self, r: RawRecord) {
        let gid = r.gid.map_or_else(|| "-".to_string(), |g| g.to_string());
        if self.line(&format!("R {} {} {} {gid}", r.t_ns, r.cpu, r.tid)) {
            self.totals.records += 1;
        }
    }

    /// Group `gid`'s home (a CPU bitmask; no CPU: the group ended) and quota, written at `t_ns`.
    pub fn group(&mut self, t_ns: u64, gid: u32, home: &[u64], quota: u32) {
        let home = if home.iter().all(|&w| w == 0) {
            "-".to_string()
        } else {
            format_cpulist(home)
        };
        self.line(&format!("G {t_ns} {gid} {home} {quota}"));
    }

    /// Thread `tid` placed in group `gid` at `t_ns`.
    pub fn place(&mut self, t_ns: u64, tid: u32, gid: u32) {
        self.line(&format!("P {t_ns} {tid} {gid}"));
    }

    /// Thread `tid` unplaced at `t_ns`.
    pub fn unplace(&mut self, t_ns: u64, tid: u32) {
        self.line(&format!("U {t_ns} {tid}"));
    }

    /// Writes the end line (`dropped_ring`: the BPF side's count of records its full ring dropped)
    /// and flushes.
    pub fn finish(&mut self, dropped_ring: u64) -> std::io::Result<Totals> {
        let end = format!(
            "# end records {} dropped_ring {dropped_ring} dropped_size {}",
            self.totals.records, self.totals.dropped_size
        );
        if self.error.is_none() {
            // Room for it was kept by every other line.
            if let Err(e) = writeln!(self.out, "{end}").and_then(|()| self.out.flush()) {
                self.error = Some(e);
            }
        }
        match self.error.take() {
            Some(e) => Err(e),
            None => Ok(self.totals),
        }
    }
}

/// `CLOCK_MONOTONIC` now, in nanoseconds: the clock of `bpf_ktime_get_ns`.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One event of a trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A thread started running.
    Run(RawRecord),
    /// A group's home written (`None`: the group ended).
    Group {
        /// When.
        t_ns: u64,
        /// The scheduler's group id.
        gid: u32,
        /// Its home, a CPU bitmask.
        home: Option<Vec<u64>>,
    },
    /// A thread placed in a group.
    Place {
        /// When.
        t_ns: u64,
        /// The thread.
        tid: u32,
        /// The group.
        gid: u32,
    },
    /// A thread unplaced.
    Unplace {
        /// When.
        t_ns: u64,
        /// The thread.
        tid: u32,
    },
    /// A CPU came online or went offline.
    Cpu {
        /// When.
        t_ns: u64,
        /// The CPU.
        cpu: u32,
        /// Online (`true`) or offline.
        online: bool,
    },
}

impl Event {
    /// Its time.
    pub fn t_ns(&self) -> u64 {
        match self {
            Event::Run(r) => r.t_ns,
            Event::Group { t_ns, .. }
            | Event::Place { t_ns, .. }
            | Event::Unplace { t_ns, .. }
            | Event::Cpu { t_ns, .. } => *t_ns,
        }
    }
}

/// A parsed trace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    /// The events, in time order (equal times in file order).
    pub events: Vec<Event>,
    /// The end line's counts, if the trace has one (`None`: cut short).
    pub end: Option<EndLine>,
}

/// The `# end` line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct EndLine {
    /// Run records written.
    pub records: u64,
    /// Records the BPF side's full ring dropped.
    pub dropped_ring: u64,
    /// Lines dropped at the file's size limit.
    pub dropped_size: u64,
}

/// Why a trace could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TraceError {
    /// The first line is not a version-1 trace header.
    #[error("not a dfsched-scx trace (the first line is not {HEADER:?})")]
    Header,
    /// A line that does not parse.
    #[error("line {line}: {what}: {text:?}")]
    Line {
        /// Its number, from 1.
        line: usize,
        /// What is wrong.
        what: &'static str,
        /// The line.
        text: String,
    },
}

/// Home bitmask words: as the scheduler's (512 CPUs).
pub const WORDS: usize = crate::intf::HOME_WORDS as usize;

/// Parses a trace file's text.
pub fn parse(text: &str) -> Result<Trace, TraceError> {
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, l)) if l.starts_with(HEADER) || l.starts_with(HEADER_V1) => {}
        _ => return Err(TraceError::Header),
    }
    let mut trace = Trace::default();
    for (i, l) in lines {
        let bad = |what| TraceError::Line {
            line: i + 1,
            what,
            text: l.to_string(),
        };
        let w: Vec<&str> = l.split_whitespace().collect();
        let num = |k: usize| -> Result<u64, TraceError> {
            w.get(k)
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| bad("a field is not a number"))
        };
        let small = |k: usize| -> Result<u32, TraceError> {
            u32::try_from(num(k)?).map_err(|_| bad("a field is too big"))
        };
        let ev = match w.first().copied() {
            None => continue,
            Some("#") => {
                if w.get(1) == Some(&"end") {
                    trace.end = Some(EndLine {
                        records: num(3)?,
                        dropped_ring: num(5)?,
                        dropped_size: num(7)?,
                    });
                }
                continue;
            }
            Some("R") if w.len() == 5 => Event::Run(RawRecord {
                t_ns: num(1)?,
                cpu: small(2)?,
                tid: small(3)?,
                gid: if w[4] == "-" { None } else { Some(small(4)?) },
            }),
            Some("G") if w.len() == 5 => Event::Group {
                t_ns: num(1)?,
                gid: small(2)?,
                home: if w[3] == "-" {
                    None
                } else {
                    Some(parse_cpulist(w[3], WORDS).map_err(|_| bad("a bad CPU list"))?)
                },
            },
            Some("P") if w.len() == 4 => Event::Place {
                t_ns: num(1)?,
                tid: small(2)?,
                gid: small(3)?,
            },
            Some("U") if w.len() == 3 => Event::Unplace {
                t_ns: num(1)?,
                tid: small(2)?,
            },
            Some("C") if w.len() == 4 => Event::Cpu {
                t_ns: num(1)?,
                cpu: small(2)?,
                online: match w[3] {
                    "on" => true,
                    "off" => false,
                    _ => return Err(bad("a CPU is on or off")),
                },
            },
            _ => return Err(bad("not an event of version 2")),
        };
        trace.events.push(ev);
    }
    // Stable: equal times keep their file order.
    trace.events.sort_by_key(Event::t_ns);
    Ok(trace)
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: &str = "# dfsched-scx trace 1 (CLOCK_MONOTONIC ns): test\n";

    #[test]
    fn the_end_line_is_read_and_a_missing_one_means_cut_short() {
        let t = parse(&format!(
            "{H}# end records 3 dropped_ring 2 dropped_size 1\n"
        ))
        .unwrap();
        assert_eq!(
            t.end,
            Some(EndLine {
                records: 3,
                dropped_ring: 2,
                dropped_size: 1
            })
        );
        assert_eq!(parse(H).unwrap().end, None);
    }

    #[test]
    fn bad_traces_are_refused_with_the_line() {
        assert_eq!(parse("R 1 2 3 4\n"), Err(TraceError::Header));
        let e = parse(&format!("{H}R 1 x 3 4\n")).unwrap_err();
        assert!(matches!(e, TraceError::Line { line: 2, .. }), "{e}");
        assert!(parse(&format!("{H}Q 1\n")).is_err());
        assert!(parse(&format!("{H}G 1 0 0-x 0\n")).is_err());
    }

    /// `NAME` in a fresh directory of ours (a random name no other user
    /// can have made first), removed when the directory is dropped.
    fn tmp(name: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::Builder::new()
            .prefix("dfsched-scx-trace-")
            .tempdir()
            .unwrap();
        let path = dir.path().join(name);
        (dir, path)
    }

    #[test]
    fn the_writer_round_trips_through_the_parser() {
        let (_dir, path) = tmp("round");
        let mut w = Writer::create(&path, 1 << 20, "slice_us 5000").unwrap();
        let mut home = vec![0u64; WORDS];
        home[0] = 0b1100;
        w.group(5, 0, &home, 8);
        w.place(6, 42, 0);
        let mut raw = Vec::new();
        raw.extend_from_slice(&7u64.to_ne_bytes());
        raw.extend_from_slice(&3u32.to_ne_bytes());
        raw.extend_from_slice(&42u32.to_ne_bytes());
        raw.extend_from_slice(&0u32.to_ne_bytes());
        raw.extend_from_slice(&0u32.to_ne_bytes());
        w.ring_record(&raw);
        w.run(RawRecord {
            t_ns: 8,
            cpu: 1,
            tid: 43,
            gid: None,
        });
        w.unplace(9, 42);
        w.group(10, 0, &[0; WORDS], 0);
        // CPU 5 going offline, as ops.cpu_offline writes it (tid 0, the offline marker).
        let mut off = Vec::new();
        off.extend_from_slice(&11u64.to_ne_bytes());
        off.extend_from_slice(&5u32.to_ne_bytes());
        off.extend_from_slice(&0u32.to_ne_bytes());
        off.extend_from_slice(&crate::intf::TRACE_CPU_OFFLINE.to_ne_bytes());
        off.extend_from_slice(&0u32.to_ne_bytes());
        w.ring_record(&off);
        w.hotplug(12, 5, true);
        assert_eq!(
            w.finish(4).unwrap(),
            Totals {
                records: 2,
                hotplug: 2,
                dropped_size: 0
            }
        );
        let t = parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(
            t.events,
            vec![
                Event::Group {
                    t_ns: 5,
                    gid: 0,
                    home: Some(home)
                },
                Event::Place {
                    t_ns: 6,
                    tid: 42,
                    gid: 0
                },
                Event::Run(RawRecord {
                    t_ns: 7,
                    cpu: 3,
                    tid: 42,
                    gid: Some(0)
                }),
                Event::Run(RawRecord {
                    t_ns: 8,
                    cpu: 1,
                    tid: 43,
                    gid: None
                }),
                Event::Unplace { t_ns: 9, tid: 42 },
                Event::Group {
                    t_ns: 10,
                    gid: 0,
                    home: None
                },
                Event::Cpu {
                    t_ns: 11,
                    cpu: 5,
                    online: false
                },
                Event::Cpu {
                    t_ns: 12,
                    cpu: 5,
                    online: true
                },
            ]
        );
        // A version-1 trace (before the C lines) is read as it is.
        let v1 = "# dfsched-scx trace 1 (CLOCK_MONOTONIC ns): old\nR 7 3 42 -\n";
        assert_eq!(parse(v1).unwrap().events.len(), 1);
        assert!(parse("# dfsched-scx trace 2 x\nC 7 3 maybe\n").is_err());
        assert_eq!(
            t.end,
            Some(EndLine {
                records: 2,
                dropped_ring: 4,
                dropped_size: 0
            })
        );
    }

    #[test]
    fn the_writer_stays_within_its_limit_and_counts_what_it_dropped() {
        let (_dir, path) = tmp("limit");
        let max = 1000;
        let mut w = Writer::create(&path, max, "x").unwrap();
        for i in 0..200 {
            w.run(RawRecord {
                t_ns: 1_000_000_000 + i,
                cpu: 1,
                tid: 4242,
                gid: Some(7),
            });
        }
        let totals = w.finish(0).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.len() as u64 <= max, "{} bytes", text.len());
        assert!(totals.dropped_size > 0 && totals.records > 0);
        assert_eq!(totals.records + totals.dropped_size, 200);
        let t = parse(&text).unwrap();
        assert_eq!(t.end.unwrap().dropped_size, totals.dropped_size);
        assert_eq!(t.events.len() as u64, totals.records);
    }
}
