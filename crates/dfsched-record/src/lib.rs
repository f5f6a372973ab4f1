//! dfsched-record: the recording format of dfsched's runtime, encoded and
//! decoded over bytes. What a recording holds is what the runtime saw of a
//! program: threads appearing and exiting, their hints, declared DF sizes,
//! their CPU time and run-queue wait per balancer pass, the CPU each last
//! ran on, the idle step's block and wake verdicts, and the agent's
//! sharing-set home. `dfsched record inspect` summarises a recording and
//! `dfsched sim replay` replays it on a simulated machine.
//!
//! Vocabulary:
//!
//! - **header** ([`Header`]): magic, version, the recording process, the
//!   CPUs its runtime placed on, the wall clock at the runtime's start;
//! - **event** ([`Event`]): one record; times are nanoseconds since the
//!   runtime started (`t_ns`);
//! - **recording** ([`Recording`]): a decoded file: the header, the events
//!   in file order, the drop count, and whether the file ended properly
//!   (an [`Event::End`]) or was cut short (a program killed mid-run).
//!
//! The byte layout is in `docs/record-format.md`; [`encode_header`] and
//! [`Encoder::event`] write it, [`decode`] reads it. The crate does no I/O,
//! reads no clock and has no `unsafe`.
//!
//! ```
//! use dfsched_record::{decode, encode_header, Encoder, Event, Header, Policy};
//!
//! let header = Header { pid: 42, cpus: 2, start_unix_ns: 1, policy: Policy::DataAffinity,
//!                       balance_interval_ms: 100 };
//! let mut bytes = Vec::new();
//! encode_header(&header, &mut bytes);
//! let mut enc = Encoder::default();
//! enc.event(&Event::Hint { t_ns: 5, tid: 7, app: 0, cur: 0, next: 1, cpu_ns: 3 }, &mut bytes);
//! enc.event(&Event::End { t_ns: 9, events: 1, dropped: 0 }, &mut bytes);
//! let rec = decode(&bytes).unwrap();
//! assert_eq!(rec.header, header);
//! assert!(rec.complete);
//! assert_eq!(rec.events.len(), 2);
//! ```

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod summary;
mod varint;

pub use summary::{Summary, ThreadSummary};

use serde::Serialize;

/// The first eight bytes of every recording.
pub const MAGIC: [u8; 8] = *b"DFSCHREC";
/// The format version this build writes and reads.
pub const VERSION: u32 = 1;
/// Bytes of the fixed header of version 1.
pub const HEADER_BYTES: usize = 40;

/// The runtime's policy for threads that give no DF, as recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// `data-affinity` (code 0).
    DataAffinity,
    /// `co-thread` (code 1).
    CoThread,
}

/// What a recording says about where it came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Header {
    /// The recording process.
    pub pid: u32,
    /// CPUs the runtime placed threads on (its allowed CPUs).
    pub cpus: u32,
    /// The wall clock (Unix time, ns) when the runtime started: event
    /// times are counted from it, and several processes' recordings line
    /// up by it.
    pub start_unix_ns: u64,
    /// The runtime's policy.
    pub policy: Policy,
    /// The balancer's interval, ms (how often CPU time is sampled).
    pub balance_interval_ms: u32,
}

/// One record. Every time is ns since the runtime started.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Event {
    /// A thread became known to the runtime (its first hint, an attach, or
    /// its creation under `dfsched run`).
    ThreadNew {
        /// When.
        t_ns: u64,
        /// Its kernel thread id.
        tid: u64,
        /// Its application.
        app: u64,
        /// The CPU it was on, if known.
        cpu: Option<u32>,
        /// Its CPU time then, ns (what it used before the runtime knew it).
        cpu_ns: u64,
        /// Its time spent runnable but waiting for a CPU so far, ns
        /// (`schedstat`; 0 when unreadable).
        wait_ns: u64,
        /// Its run periods so far: the times it was switched in
        /// (`schedstat`'s third field, voluntary plus involuntary context
        /// switches). `None` in recordings made before the field existed,
        /// or when unreadable.
        runs: Option<u64>,
        /// Its voluntary context switches so far (`status`'
        /// `voluntary_ctxt_switches`: the times it blocked). `None` as for
        /// `runs`.
        voluntary: Option<u64>,
    },
    /// A known thread exited.
    ThreadExit {
        /// When.
        t_ns: u64,
        /// Its tid.
        tid: u64,
        /// Its CPU time at exit, ns.
        cpu_ns: u64,
        /// Its run-queue wait at exit, ns (`schedstat`; 0 when unreadable).
        wait_ns: u64,
        /// Its run periods at exit (as [`Event::ThreadNew::runs`]).
        runs: Option<u64>,
        /// Its voluntary switches at exit (as
        /// [`Event::ThreadNew::voluntary`]).
        voluntary: Option<u64>,
    },
    /// A hint that changed the thread's DF (repeats of the same DF take the
    /// fast path and are not recorded: they change nothing).
    Hint {
        /// When.
        t_ns: u64,
        /// The hinting thread.
        tid: u64,
        /// Its application.
        app: u64,
        /// The DF it left (0: none).
        cur: u64,
        /// The DF it works on from now (0: none).
        next: u64,
        /// Its CPU time at the hint, ns.
        cpu_ns: u64,
    },
    /// `dfsched_df_size`: the program declared a DF's size.
    DfSize {
        /// When.
        t_ns: u64,
        /// The DF's application.
        app: u64,
        /// The DF.
        df: u64,
        /// Its size, bytes.
        bytes: u64,
    },
    /// The idle step found the thread blocked (no CPU for ≥ 2 passes).
    Block {
        /// When.
        t_ns: u64,
        /// The thread.
        tid: u64,
    },
    /// The idle step (or the thread's own call) found it running again.
    Wake {
        /// When.
        t_ns: u64,
        /// The thread.
        tid: u64,
    },
    /// A balancer pass's reading of one thread.
    Sample {
        /// When.
        t_ns: u64,
        /// The thread.
        tid: u64,
        /// Its CPU time so far, ns.
        cpu_ns: u64,
        /// Its time spent runnable but waiting for a CPU so far, ns
        /// (`schedstat`'s second field; 0 when unreadable).
        wait_ns: u64,
        /// The CPU it last ran on, if readable.
        cpu: Option<u32>,
        /// Its run periods so far (as [`Event::ThreadNew::runs`]).
        runs: Option<u64>,
        /// Its voluntary switches so far (as
        /// [`Event::ThreadNew::voluntary`]).
        voluntary: Option<u64>,
    },
    /// The agent's sharing set of this process and its home changed.
    Sharing {
        /// When.
        t_ns: u64,
        /// The set's id (0: the process shares with nobody now).
        set: u64,
        /// The CPUs of the set's home, ascending (empty with set 0).
        home: Vec<u32>,
    },
    /// A balancer pass's estimate of other processes' load per CPU (the
    /// engine's external load: unmanaged threads weighed by CFS group,
    /// other dfsched processes' reports), recorded when the runtime samples
    /// it (`DFSCHED_EXTERNAL_LOAD`, on by default).
    OutsideLoad {
        /// When.
        t_ns: u64,
        /// `(cpu, thousandths of one of our threads)`, CPUs with none left
        /// out, ascending.
        per_cpu: Vec<(u32, u64)>,
    },
    /// Events dropped so far because the buffer was full.
    Drops {
        /// When the writer counted them.
        t_ns: u64,
        /// Dropped since the start.
        dropped: u64,
    },
    /// The last record of a recording that ended properly.
    End {
        /// When.
        t_ns: u64,
        /// Events written before this one.
        events: u64,
        /// Events dropped in all.
        dropped: u64,
    },
}

/// Record kinds on disk.
mod kind {
    pub const THREAD_NEW: u8 = 1;
    pub const THREAD_EXIT: u8 = 2;
    pub const HINT: u8 = 3;
    pub const DF_SIZE: u8 = 4;
    pub const BLOCK: u8 = 5;
    pub const WAKE: u8 = 6;
    pub const SAMPLE: u8 = 7;
    pub const SHARING: u8 = 8;
    pub const DROPS: u8 = 9;
    pub const OUTSIDE_LOAD: u8 = 10;
    pub const END: u8 = 255;
}

impl Event {
    /// Its time, ns since the runtime started.
    pub fn t_ns(&self) -> u64 {
        match *self {
            Event::ThreadNew { t_ns, .. }
            | Event::ThreadExit { t_ns, .. }
            | Event::Hint { t_ns, .. }
            | Event::DfSize { t_ns, .. }
            | Event::Block { t_ns, .. }
            | Event::Wake { t_ns, .. }
            | Event::Sample { t_ns, .. }
            | Event::Sharing { t_ns, .. }
            | Event::OutsideLoad { t_ns, .. }
            | Event::Drops { t_ns, .. }
            | Event::End { t_ns, .. } => t_ns,
        }
    }

    /// Its kind's name (as in JSON and `record inspect`).
    pub fn name(&self) -> &'static str {
        match self {
            Event::ThreadNew { .. } => "thread_new",
            Event::ThreadExit { .. } => "thread_exit",
            Event::Hint { .. } => "hint",
            Event::DfSize { .. } => "df_size",
            Event::Block { .. } => "block",
            Event::Wake { .. } => "wake",
            Event::Sample { .. } => "sample",
            Event::Sharing { .. } => "sharing",
            Event::OutsideLoad { .. } => "outside_load",
            Event::Drops { .. } => "drops",
            Event::End { .. } => "end",
        }
    }
}

/// Writes the fixed header (see the format document).
pub fn encode_header(h: &Header, out: &mut Vec<u8>) {
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(HEADER_BYTES as u32).to_le_bytes());
    out.extend_from_slice(&h.pid.to_le_bytes());
    out.extend_from_slice(&h.cpus.to_le_bytes());
    out.extend_from_slice(&h.start_unix_ns.to_le_bytes());
    out.push(match h.policy {
        Policy::DataAffinity => 0,
        Policy::CoThread => 1,
    });
    out.extend_from_slice(&[0; 3]);
    out.extend_from_slice(&h.balance_interval_ms.to_le_bytes());
}

/// Encodes events one after another: each record's time is written as the
/// signed difference from the previous record's (zigzag varint), so the
/// encoder remembers the last time. One encoder per file, from its first
/// record.
#[derive(Clone, Debug, Default)]
pub struct Encoder {
    prev_t: u64,
}

/// `Some(cpu)` as `cpu + 1`, `None` as 0.
fn opt_cpu(c: Option<u32>) -> u64 {
    c.map_or(0, |c| u64::from(c) + 1)
}

impl Encoder {
    /// Appends `ev` to `out`.
    pub fn event(&mut self, ev: &Event, out: &mut Vec<u8>) {
        let t = ev.t_ns();
        let dt = t.wrapping_sub(self.prev_t) as i64;
        self.prev_t = t;
        let mut p: Vec<u8> = Vec::with_capacity(32);
        varint::put(&mut p, varint::zigzag(dt));
        let k = match ev {
            Event::ThreadNew {
                tid,
                app,
                cpu,
                cpu_ns,
                wait_ns,
                runs,
                voluntary,
                ..
            } => {
                for v in [*tid, *app, opt_cpu(*cpu), *cpu_ns, *wait_ns] {
                    varint::put(&mut p, v);
                }
                put_trailing(&mut p, &[*runs, *voluntary]);
                kind::THREAD_NEW
            }
            Event::ThreadExit {
                tid,
                cpu_ns,
                wait_ns,
                runs,
                voluntary,
                ..
            } => {
                varint::put(&mut p, *tid);
                varint::put(&mut p, *cpu_ns);
                varint::put(&mut p, *wait_ns);
                put_trailing(&mut p, &[*runs, *voluntary]);
                kind::THREAD_EXIT
            }
            Event::Hint {
                tid,
                app,
                cur,
                next,
                cpu_ns,
                ..
            } => {
                for v in [*tid, *app, *cur, *next, *cpu_ns] {
                    varint::put(&mut p, v);
                }
                kind::HINT
            }
            Event::DfSize { app, df, bytes, .. } => {
                for v in [*app, *df, *bytes] {
                    varint::put(&mut p, v);
                }
                kind::DF_SIZE
            }
            Event::Block { tid, .. } => {
                varint::put(&mut p, *tid);
                kind::BLOCK
            }
            Event::Wake { tid, .. } => {
                varint::put(&mut p, *tid);
                kind::WAKE
            }
            Event::Sample {
                tid,
                cpu_ns,
                wait_ns,
                cpu,
                runs,
                voluntary,
                ..
            } => {
                for v in [*tid, *cpu_ns, *wait_ns, opt_cpu(*cpu)] {
                    varint::put(&mut p, v);
                }
                put_trailing(&mut p, &[*runs, *voluntary]);
                kind::SAMPLE
            }
            Event::Sharing { set, home, .. } => {
                varint::put(&mut p, *set);
                let ranges = ranges(home);
                varint::put(&mut p, ranges.len() as u64);
                // Each range as (gap from the previous range's end, length − 1).
                let mut next = 0u64;
                for (lo, hi) in ranges {
                    varint::put(&mut p, u64::from(lo) - next);
                    varint::put(&mut p, u64::from(hi - lo));
                    next = u64::from(hi) + 1;
                }
                kind::SHARING
            }
            Event::OutsideLoad { per_cpu, .. } => {
                varint::put(&mut p, per_cpu.len() as u64);
                for &(cpu, milli) in per_cpu {
                    varint::put(&mut p, u64::from(cpu));
                    varint::put(&mut p, milli);
                }
                kind::OUTSIDE_LOAD
            }
            Event::Drops { dropped, .. } => {
                varint::put(&mut p, *dropped);
                kind::DROPS
            }
            Event::End {
                events, dropped, ..
            } => {
                varint::put(&mut p, *events);
                varint::put(&mut p, *dropped);
                kind::END
            }
        };
        out.push(k);
        varint::put(out, p.len() as u64);
        out.extend_from_slice(&p);
    }
}

/// Optional trailing fields, each as its value + 1 (0: unknown, as
/// [`opt_cpu`]), up to the last one known: a record none of them is known
/// for is written as an older build wrote it.
fn put_trailing(p: &mut Vec<u8>, fields: &[Option<u64>]) {
    let known = fields
        .iter()
        .rposition(Option::is_some)
        .map_or(0, |i| i + 1);
    for v in &fields[..known] {
        varint::put(p, v.map_or(0, |v| v.saturating_add(1)));
    }
}

/// An optional trailing field ([`put_trailing`]): `None` when absent or 0.
fn trailing(f: &mut Fields<'_>) -> Option<u64> {
    f.next().and_then(|v| v.checked_sub(1))
}

/// Ascending, deduplicated CPUs as inclusive ranges.
fn ranges(cpus: &[u32]) -> Vec<(u32, u32)> {
    let mut v: Vec<u32> = cpus.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut out: Vec<(u32, u32)> = Vec::new();
    for c in v {
        match out.last_mut() {
            Some((_, hi)) if *hi + 1 == c => *hi = c,
            _ => out.push((c, c)),
        }
    }
    out
}

/// Why bytes are not a recording.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Shorter than the header.
    #[error("{0} bytes: too short for a recording's header ({HEADER_BYTES} bytes)")]
    Short(usize),
    /// The first eight bytes are not [`MAGIC`].
    #[error("not a dfsched recording (no DFSCHREC magic)")]
    Magic,
    /// A version this build does not read.
    #[error("recording format version {0}; this build reads version {VERSION}")]
    Version(u32),
    /// A header length below the fixed part.
    #[error("header length {0} is below {HEADER_BYTES}")]
    HeaderLen(u32),
    /// A policy code not in the format.
    #[error("unknown policy code {0} in the header")]
    Policy(u8),
    /// A record whose payload does not hold its kind's fields.
    #[error("record {index} (kind {kind}, at byte {offset}) is malformed: {why}")]
    Record {
        /// Records before it.
        index: usize,
        /// Its kind byte.
        kind: u8,
        /// Its first byte's offset in the file.
        offset: usize,
        /// What is wrong.
        why: &'static str,
    },
}

/// A decoded recording.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Recording {
    /// Its header.
    pub header: Header,
    /// Its events in file order (times need not be sorted: threads push
    /// events concurrently).
    pub events: Vec<Event>,
    /// Whether it ended with an [`Event::End`].
    pub complete: bool,
    /// Whether its last record was cut short (the program died while the
    /// writer wrote); the records before it are kept.
    pub truncated: bool,
    /// Records of kinds this build does not know, skipped.
    pub unknown_records: u64,
    /// Events dropped by the recorder (the largest count any `Drops` or
    /// `End` record gives).
    pub dropped: u64,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Decodes a whole recording (see the format document). A last record cut
/// short is no error (`truncated`); a malformed complete record is.
pub fn decode(bytes: &[u8]) -> Result<Recording, DecodeError> {
    if bytes.len() < HEADER_BYTES {
        return Err(DecodeError::Short(bytes.len()));
    }
    if bytes[..8] != MAGIC {
        return Err(DecodeError::Magic);
    }
    let version = u32_at(bytes, 8);
    if version != VERSION {
        return Err(DecodeError::Version(version));
    }
    let header_len = u32_at(bytes, 12);
    if (header_len as usize) < HEADER_BYTES {
        return Err(DecodeError::HeaderLen(header_len));
    }
    let policy = match bytes[32] {
        0 => Policy::DataAffinity,
        1 => Policy::CoThread,
        p => return Err(DecodeError::Policy(p)),
    };
    let header = Header {
        pid: u32_at(bytes, 16),
        cpus: u32_at(bytes, 20),
        start_unix_ns: u64::from_le_bytes(bytes[24..32].try_into().expect("8 bytes")),
        policy,
        balance_interval_ms: u32_at(bytes, 36),
    };
    let mut rec = Recording {
        header,
        events: Vec::new(),
        complete: false,
        truncated: false,
        unknown_records: 0,
        dropped: 0,
    };
    let mut at = (header_len as usize).min(bytes.len());
    let mut prev_t = 0u64;
    let mut index = 0usize;
    while at < bytes.len() {
        let offset = at;
        let k = bytes[at];
        let Some((len, n)) = varint::get(&bytes[at + 1..]) else {
            rec.truncated = true;
            break;
        };
        let start = at + 1 + n;
        let Some(end) = usize::try_from(len)
            .ok()
            .and_then(|l| start.checked_add(l))
            .filter(|&e| e <= bytes.len())
        else {
            rec.truncated = true;
            break;
        };
        at = end;
        let bad = |why| DecodeError::Record {
            index,
            kind: k,
            offset,
            why,
        };
        let mut f = Fields {
            b: &bytes[start..end],
        };
        let dt = varint::unzigzag(f.next().ok_or_else(|| bad("no time"))?);
        let t_ns = prev_t.wrapping_add(dt as u64);
        prev_t = t_ns;
        let want = |f: &mut Fields| f.next().ok_or_else(|| bad("a field is missing"));
        let cpu_of = |v: u64| -> Result<Option<u32>, DecodeError> {
            match v {
                0 => Ok(None),
                v => u32::try_from(v - 1)
                    .map(Some)
                    .map_err(|_| bad("a CPU number beyond 32 bits")),
            }
        };
        let ev = match k {
            kind::THREAD_NEW => Event::ThreadNew {
                t_ns,
                tid: want(&mut f)?,
                app: want(&mut f)?,
                cpu: cpu_of(want(&mut f)?)?,
                cpu_ns: want(&mut f)?,
                wait_ns: want(&mut f)?,
                runs: trailing(&mut f),
                voluntary: trailing(&mut f),
            },
            kind::THREAD_EXIT => Event::ThreadExit {
                t_ns,
                tid: want(&mut f)?,
                cpu_ns: want(&mut f)?,
                wait_ns: want(&mut f)?,
                runs: trailing(&mut f),
                voluntary: trailing(&mut f),
            },
            kind::HINT => Event::Hint {
                t_ns,
                tid: want(&mut f)?,
                app: want(&mut f)?,
                cur: want(&mut f)?,
                next: want(&mut f)?,
                cpu_ns: want(&mut f)?,
            },
            kind::DF_SIZE => Event::DfSize {
                t_ns,
                app: want(&mut f)?,
                df: want(&mut f)?,
                bytes: want(&mut f)?,
            },
            kind::BLOCK => Event::Block {
                t_ns,
                tid: want(&mut f)?,
            },
            kind::WAKE => Event::Wake {
                t_ns,
                tid: want(&mut f)?,
            },
            kind::SAMPLE => Event::Sample {
                t_ns,
                tid: want(&mut f)?,
                cpu_ns: want(&mut f)?,
                wait_ns: want(&mut f)?,
                cpu: cpu_of(want(&mut f)?)?,
                runs: trailing(&mut f),
                voluntary: trailing(&mut f),
            },
            kind::SHARING => {
                let set = want(&mut f)?;
                let n = want(&mut f)?;
                let mut home = Vec::new();
                let mut next = 0u64;
                for _ in 0..n {
                    let lo = next
                        .checked_add(want(&mut f)?)
                        .ok_or_else(|| bad("a CPU range overflows"))?;
                    let hi = lo
                        .checked_add(want(&mut f)?)
                        .filter(|&h| h <= u64::from(u32::MAX))
                        .ok_or_else(|| bad("a CPU range beyond 32 bits"))?;
                    if hi - lo > 1 << 20 {
                        return Err(bad("a CPU range of more than 2^20 CPUs"));
                    }
                    home.extend(lo as u32..=hi as u32);
                    next = hi + 1;
                }
                Event::Sharing { t_ns, set, home }
            }
            kind::OUTSIDE_LOAD => {
                let n = want(&mut f)?;
                let mut per_cpu = Vec::new();
                for _ in 0..n {
                    let cpu = u32::try_from(want(&mut f)?)
                        .map_err(|_| bad("a CPU number beyond 32 bits"))?;
                    per_cpu.push((cpu, want(&mut f)?));
                }
                Event::OutsideLoad { t_ns, per_cpu }
            }
            kind::DROPS => Event::Drops {
                t_ns,
                dropped: want(&mut f)?,
            },
            kind::END => Event::End {
                t_ns,
                events: want(&mut f)?,
                dropped: want(&mut f)?,
            },
            _ => {
                rec.unknown_records += 1;
                index += 1;
                continue;
            }
        };
        match &ev {
            Event::Drops { dropped, .. } => rec.dropped = rec.dropped.max(*dropped),
            Event::End { dropped, .. } => {
                rec.dropped = rec.dropped.max(*dropped);
                rec.complete = true;
            }
            _ => {}
        }
        rec.events.push(ev);
        index += 1;
    }
    Ok(rec)
}

/// The varint fields of one payload, in order; fields a newer writer added
/// at the end are ignored.
struct Fields<'a> {
    b: &'a [u8],
}

impl Fields<'_> {
    fn next(&mut self) -> Option<u64> {
        let (v, n) = varint::get(self.b)?;
        self.b = &self.b[n..];
        Some(v)
    }
}

#[cfg(test)]
mod tests;
