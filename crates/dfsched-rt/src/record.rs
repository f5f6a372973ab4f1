//! Recording what the runtime sees (`DFSCHED_RECORD=FILE`), in the format
//! of `dfsched-record` (`docs/record-format.md`).
//!
//! ```text
//!  program threads                  balancer thread (and shutdown, exit)
//!  ───────────────                  ─────────────────────────────────────
//!  register / slow hint /           pass: samples (CPU, wait, CPU last on),
//!  exit / df_size                         idle verdicts, sharing home
//!     │ push: one CAS, no lock,              │ written directly
//!     ▼ never waits                          ▼
//!  Ring (bounded, fixed slots) ──drain──► Writer (Mutex, never taken by a
//!     full → dropped += 1                   program thread) ─► FILE
//! ```
//!
//! The ring is Vyukov's bounded queue with one consumer: each slot has a
//! sequence number; a producer claims the slot at `tail` by a CAS on `tail`
//! when the slot's sequence says it is free, writes the event's words and
//! publishes it by storing the sequence. A full ring (the slot at `tail`
//! still holds an unread event) is never waited for: the event is dropped
//! and counted. Only program threads push; the writer drains it on every
//! balancer pass and at the end, so a program thread never blocks on the
//! recording and never does I/O for it. Fast-path hints (a thread repeating
//! its DF) are not recorded: they change nothing, and they stay free.
//!
//! Files: the runtime creates `FILE` if it does not exist; if it does (an
//! earlier process of the same program holds it: `dfsched run` of a
//! program that starts others), it writes `FILE.PID` instead, truncating
//! any old one. `dfsched run --record FILE` removes `FILE` first. Never
//! through a symlink, never into a FIFO, and only into a regular file of
//! our effective uid (mode 0600 when new): the same rule as the engine log
//! ([`crate::sys`]'s `create_own_output`).
//!
//! Invariants: events leave the ring in the order their slots were claimed;
//! `dropped` counts exactly the pushes that found the ring full; after
//! [`Recorder::finish`] nothing more is written (a last `End` record holds
//! the counts); a forked child never writes its parent's recording.

use dfsched_record::{encode_header, Encoder, Event, Header, Policy};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

/// Default ring capacity, events (64 bytes each: 2 MiB).
pub const DEFAULT_RECORD_BUFFER: usize = 32_768;
/// Largest ring capacity, events.
pub const MAX_RECORD_BUFFER: usize = 1 << 24;

/// Threads whose `/proc` files a pass reads for its samples, at most.
pub const SAMPLES_PER_PASS: usize = 256;

/// Words of one event in a slot: kind, time, and up to five fields.
/// (`thread_new` has six: its CPU rides in the kind word's upper bits, so
/// that a slot stays one cache line.)
const WORDS: usize = 7;

/// Event kinds in the ring (only the ones program threads push).
const K_THREAD_NEW: u64 = 1;
const K_THREAD_EXIT: u64 = 2;
const K_HINT: u64 = 3;
const K_DF_SIZE: u64 = 4;
const K_WAKE: u64 = 6;

/// One ring slot: a cache line.
#[repr(align(64))]
struct Slot {
    /// `pos` when free for the producer of position `pos`, `pos + 1` when
    /// that producer has published, `pos + capacity` once read.
    seq: AtomicU64,
    words: [AtomicU64; WORDS],
}

/// A bounded multi-producer, single-consumer queue of fixed-size events
/// that never blocks a producer (module doc).
pub(crate) struct Ring {
    slots: Box<[Slot]>,
    mask: u64,
    /// The next position a producer claims.
    tail: AtomicU64,
}

impl Ring {
    /// A ring of `capacity` rounded up to a power of two (at least 2).
    pub(crate) fn new(capacity: usize) -> Ring {
        let cap = capacity.clamp(2, MAX_RECORD_BUFFER).next_power_of_two();
        let slots = (0..cap as u64)
            .map(|i| Slot {
                seq: AtomicU64::new(i),
                words: std::array::from_fn(|_| AtomicU64::new(0)),
            })
            .collect();
        Ring {
            slots,
            mask: cap as u64 - 1,
            tail: AtomicU64::new(0),
        }
    }

    /// The capacity, events.
    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Pushes `words`; false (nothing written) if the ring is full.
    #[inline]
    pub(crate) fn push(&self, words: [u64; WORDS]) -> bool {
        // Relaxed: the slot's sequence (Acquire) orders what matters.
        let mut pos = self.tail.load(Ordering::Relaxed);
        loop {
            let slot = &self.slots[(pos & self.mask) as usize];
            // Acquire pairs with the consumer's Release of `pos`: the slot's
            // old words were read before we overwrite them.
            let seq = slot.seq.load(Ordering::Acquire);
            let diff = seq.wrapping_sub(pos) as i64;
            if diff == 0 {
                match self.tail.compare_exchange_weak(
                    pos,
                    pos + 1,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        for (w, v) in slot.words.iter().zip(words) {
                            w.store(v, Ordering::Relaxed);
                        }
                        // Release: the words are visible before the slot
                        // reads as published.
                        slot.seq.store(pos + 1, Ordering::Release);
                        return true;
                    }
                    Err(now) => pos = now,
                }
            } else if diff < 0 {
                // The slot still holds an event a lap behind: full.
                return false;
            } else {
                // Another producer took this position; try the next.
                pos = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    /// Pops the event at `*head` if published (single consumer: `head` is
    /// the consumer's own).
    pub(crate) fn pop(&self, head: &mut u64) -> Option<[u64; WORDS]> {
        let slot = &self.slots[(*head & self.mask) as usize];
        // Acquire pairs with the producer's Release: the words are there.
        if slot.seq.load(Ordering::Acquire) != *head + 1 {
            return None;
        }
        let words = std::array::from_fn(|i| slot.words[i].load(Ordering::Relaxed));
        // Release: our reads happen before a producer reuses the slot.
        slot.seq.store(*head + self.mask + 1, Ordering::Release);
        *head += 1;
        Some(words)
    }
}

/// What only the writer touches.
struct Writer {
    file: Option<File>,
    enc: Encoder,
    buf: Vec<u8>,
    /// The consumer's ring position.
    head: u64,
    /// Events written (End excluded).
    written: u64,
    /// The drop count last written in a `Drops` record.
    drops_written: u64,
    /// The sharing set and home last recorded.
    sharing: Option<(u64, Vec<u32>)>,
    /// I/O failed once: nothing more is written (the program goes on).
    failed: bool,
}

/// A runtime's recorder.
pub(crate) struct Recorder {
    ring: Ring,
    dropped: AtomicU64,
    /// The runtime's clock origin: event times count from it.
    started: Instant,
    writer: Mutex<Writer>,
    finished: AtomicBool,
    /// The file actually written.
    path: PathBuf,
    /// Bytes written so far (for the stats).
    bytes: AtomicU64,
    written: AtomicU64,
    /// The tid the next pass's samples start from (module doc of
    /// `samples`).
    next_sample: AtomicU64,
}

/// What the stats report of the recording.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RecordStats {
    /// The file written.
    pub path: String,
    /// Events written so far.
    pub events: u64,
    /// Events dropped because the buffer was full.
    pub dropped: u64,
    /// Bytes written so far.
    pub bytes: u64,
    /// The buffer's capacity, events.
    pub buffer_events: u64,
}

/// Opens `path`, or `path.PID` if `path` exists (module doc).
fn open(path: &Path, pid: u32) -> std::io::Result<(File, PathBuf)> {
    crate::sys::create_own_output(path, &format!(".{pid}"))
}

impl Recorder {
    /// Starts a recording at `path` (module doc) for a runtime that started
    /// at `started`; the header is written at once.
    pub(crate) fn create(
        path: &Path,
        capacity: usize,
        started: Instant,
        header: Header,
    ) -> std::io::Result<Recorder> {
        let (mut file, path) = open(path, header.pid)?;
        let mut buf = Vec::with_capacity(64 << 10);
        encode_header(&header, &mut buf);
        file.write_all(&buf)?;
        let bytes = buf.len() as u64;
        buf.clear();
        Ok(Recorder {
            ring: Ring::new(capacity),
            dropped: AtomicU64::new(0),
            started,
            writer: Mutex::new(Writer {
                file: Some(file),
                enc: Encoder::default(),
                buf,
                head: 0,
                written: 0,
                drops_written: 0,
                sharing: None,
                failed: false,
            }),
            finished: AtomicBool::new(false),
            path,
            bytes: AtomicU64::new(bytes),
            written: AtomicU64::new(0),
            next_sample: AtomicU64::new(0),
        })
    }

    /// The header of a runtime's recording.
    pub(crate) fn header(
        pid: u32,
        cpus: u32,
        policy: dfsched_core::Policy,
        interval_ms: u64,
    ) -> Header {
        let start_unix_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        Header {
            pid,
            cpus,
            start_unix_ns,
            policy: match policy {
                dfsched_core::Policy::CoThread => Policy::CoThread,
                _ => Policy::DataAffinity,
            },
            balance_interval_ms: u32::try_from(interval_ms).unwrap_or(u32::MAX),
        }
    }

    /// Now, ns since the runtime started.
    #[inline]
    pub(crate) fn now_ns(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    #[inline]
    fn push(&self, words: [u64; WORDS]) {
        if !self.ring.push(words) {
            // Relaxed: a counter, read for reports.
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A thread became known (program thread; never blocks); `sched` is
    /// its reading from [`own_schedstat`].
    pub(crate) fn thread_new(&self, tid: u64, app: u64, cpu: Option<u32>, sched: SchedReading) {
        // The CPU (+1, 0: unknown; 32 bits) shares the kind's word.
        let kind = K_THREAD_NEW | cpu.map_or(0, |c| u64::from(c) + 1) << 8;
        self.push([
            kind,
            self.now_ns(),
            tid,
            app,
            sched.cpu_ns,
            sched.wait_ns,
            pack_counts(sched.runs, sched.voluntary),
        ]);
    }

    /// A thread exited; `sched` as for [`Recorder::thread_new`], with its
    /// voluntary switches.
    pub(crate) fn thread_exit(&self, tid: u64, sched: SchedReading) {
        self.push([
            K_THREAD_EXIT,
            self.now_ns(),
            tid,
            sched.cpu_ns,
            sched.wait_ns,
            opt_plus_one(sched.runs),
            opt_plus_one(sched.voluntary),
        ]);
    }

    /// A hint changed a thread's DF.
    pub(crate) fn hint(&self, tid: u64, app: u64, cur: u64, next: u64, cpu_ns: u64) {
        self.push([K_HINT, self.now_ns(), tid, app, cur, next, cpu_ns]);
    }

    /// A DF's declared size.
    pub(crate) fn df_size(&self, app: u64, df: u64, bytes: u64) {
        self.push([K_DF_SIZE, self.now_ns(), app, df, bytes, 0, 0]);
    }

    /// A thread's own call woke it from the idle step's block.
    pub(crate) fn wake_by_call(&self, tid: u64) {
        self.push([K_WAKE, self.now_ns(), tid, 0, 0, 0, 0]);
    }

    /// Keeps the ascending `tids` this pass samples: at most
    /// [`SAMPLES_PER_PASS`], in turn from where the last pass stopped.
    /// Called by the balancer thread only.
    pub(crate) fn sample_turn(&self, tids: &mut Vec<u64>) {
        // Relaxed: only the balancer thread reads and writes it.
        let from = self.next_sample.load(Ordering::Relaxed);
        let next = in_turn(tids, from, SAMPLES_PER_PASS);
        self.next_sample.store(next, Ordering::Relaxed);
    }

    /// Events dropped so far.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// The counters for the stats.
    pub(crate) fn stats(&self) -> RecordStats {
        RecordStats {
            path: self.path.display().to_string(),
            events: self.written.load(Ordering::Relaxed),
            dropped: self.dropped(),
            bytes: self.bytes.load(Ordering::Relaxed),
            buffer_events: self.ring.capacity() as u64,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Writer> {
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes events the balancer thread made itself (samples, idle
    /// verdicts) and everything waiting in the ring, and the drop count if
    /// it grew. Called off the program's threads.
    pub(crate) fn flush(&self, own: &[Event]) {
        if self.finished.load(Ordering::Acquire) {
            return;
        }
        let mut w = self.lock();
        self.drain(&mut w, own);
        self.write_out(&mut w);
    }

    /// An event the balancer (or the end) made itself: encoded at once,
    /// written with the next flush. Never called on a program thread.
    pub(crate) fn note(&self, ev: &Event) {
        if self.finished.load(Ordering::Acquire) {
            return;
        }
        let mut w = self.lock();
        let Writer {
            enc, buf, written, ..
        } = &mut *w;
        enc.event(ev, buf);
        *written += 1;
    }

    /// The agent's sharing set and its home, recorded when they change.
    pub(crate) fn sharing(&self, set: Option<u64>, home: Option<Vec<u32>>) {
        let now = (set.unwrap_or(0), home.unwrap_or_default());
        let mut w = self.lock();
        let first_none = w.sharing.is_none() && now.0 == 0;
        if w.sharing.as_ref() == Some(&now) || first_none {
            return;
        }
        w.sharing = Some(now.clone());
        let ev = Event::Sharing {
            t_ns: self.now_ns(),
            set: now.0,
            home: now.1,
        };
        let Writer {
            enc, buf, written, ..
        } = &mut *w;
        enc.event(&ev, buf);
        *written += 1;
    }

    /// The last flush and the `End` record; nothing is written after.
    pub(crate) fn finish(&self, own: &[Event]) {
        let mut w = self.lock();
        if self.finished.swap(true, Ordering::AcqRel) {
            return;
        }
        self.drain(&mut w, own);
        let ev = Event::End {
            t_ns: self.now_ns(),
            events: w.written,
            dropped: self.dropped(),
        };
        let Writer { enc, buf, .. } = &mut *w;
        enc.event(&ev, buf);
        self.write_out(&mut w);
        if let Some(f) = w.file.take() {
            let _ = f.sync_data();
        }
    }

    fn drain(&self, w: &mut Writer, own: &[Event]) {
        let Writer {
            enc,
            buf,
            head,
            written,
            drops_written,
            ..
        } = w;
        let mut n = 0u64;
        while let Some(x) = self.ring.pop(head) {
            let (t_ns, f) = (x[1], &x[2..]);
            let ev = match x[0] & 0xff {
                K_THREAD_NEW => Event::ThreadNew {
                    t_ns,
                    tid: f[0],
                    app: f[1],
                    cpu: (x[0] >> 8).checked_sub(1).map(|c| c as u32),
                    cpu_ns: f[2],
                    wait_ns: f[3],
                    runs: unpack_counts(f[4]).0,
                    voluntary: unpack_counts(f[4]).1,
                },
                K_THREAD_EXIT => Event::ThreadExit {
                    t_ns,
                    tid: f[0],
                    cpu_ns: f[1],
                    wait_ns: f[2],
                    runs: f[3].checked_sub(1),
                    voluntary: f[4].checked_sub(1),
                },
                K_HINT => Event::Hint {
                    t_ns,
                    tid: f[0],
                    app: f[1],
                    cur: f[2],
                    next: f[3],
                    cpu_ns: f[4],
                },
                K_DF_SIZE => Event::DfSize {
                    t_ns,
                    app: f[0],
                    df: f[1],
                    bytes: f[2],
                },
                _ => Event::Wake { t_ns, tid: f[0] },
            };
            enc.event(&ev, buf);
            n += 1;
        }
        for ev in own {
            enc.event(ev, buf);
            n += 1;
        }
        *written += n;
        let dropped = self.dropped();
        if dropped > *drops_written {
            *drops_written = dropped;
            enc.event(
                &Event::Drops {
                    t_ns: self.now_ns(),
                    dropped,
                },
                buf,
            );
        }
        self.written.store(*written, Ordering::Relaxed);
    }

    fn write_out(&self, w: &mut Writer) {
        if w.buf.is_empty() {
            return;
        }
        if !w.failed {
            if let Some(f) = w.file.as_mut() {
                match f.write_all(&w.buf) {
                    Ok(()) => {
                        self.bytes.fetch_add(w.buf.len() as u64, Ordering::Relaxed);
                    }
                    Err(e) => {
                        w.failed = true;
                        tracing::warn!(path = %self.path.display(), error = %e,
                            "dfsched could not write its recording; recording stops");
                    }
                }
            }
        }
        w.buf.clear();
    }
}

/// Keeps at most `budget` of the ascending `tids`, starting at the first
/// tid ≥ `from` and wrapping around; returns where the next turn starts.
fn in_turn(tids: &mut Vec<u64>, from: u64, budget: usize) -> u64 {
    if tids.len() <= budget {
        return 0;
    }
    let at = tids.partition_point(|&t| t < from);
    tids.rotate_left(at);
    tids.truncate(budget);
    tids.last().map_or(0, |&t| t + 1)
}

/// `Some(v)` as `v + 1` (saturating), `None` as 0, in a ring word.
fn opt_plus_one(v: Option<u64>) -> u64 {
    v.map_or(0, |v| v.saturating_add(1))
}

/// Two counts in one ring word (`thread_new` has no word to spare): each
/// as `v + 1` in 32 bits, 0 for unknown, and a count of 2³² − 1 or more
/// (a thread attached after billions of switches) as unknown.
fn pack_counts(a: Option<u64>, b: Option<u64>) -> u64 {
    let half = |v: Option<u64>| v.filter(|&v| v < u64::from(u32::MAX)).map_or(0, |v| v + 1);
    half(a) | half(b) << 32
}

/// The counts of [`pack_counts`].
fn unpack_counts(w: u64) -> (Option<u64>, Option<u64>) {
    ((w & 0xffff_ffff).checked_sub(1), (w >> 32).checked_sub(1))
}

/// A thread's `schedstat`: CPU time and run-queue wait, ns, and its run
/// periods (the times it was switched in: voluntary plus involuntary
/// context switches), all cumulative since the thread started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SchedReading {
    /// Time on a CPU, ns.
    pub cpu_ns: u64,
    /// Time runnable but waiting for a CPU, ns (0 when unreadable).
    pub wait_ns: u64,
    /// Run periods (`None` when unreadable).
    pub runs: Option<u64>,
    /// Voluntary context switches, from `status` (`None` when not read or
    /// unreadable).
    pub voluntary: Option<u64>,
}

impl SchedReading {
    /// The calling thread's CPU clock alone: what is known when its
    /// `schedstat` cannot be read.
    pub(crate) fn own_clock() -> SchedReading {
        SchedReading {
            cpu_ns: crate::sys::own_cpu_ns(),
            ..SchedReading::default()
        }
    }
}

/// A `schedstat` line: `cpu_ns wait_ns runs`; `None` without a CPU time.
fn parse_schedstat(s: &str) -> Option<SchedReading> {
    let mut it = s.split_ascii_whitespace().map(|x| x.parse::<u64>().ok());
    Some(SchedReading {
        cpu_ns: it.next()??,
        wait_ns: it.next().flatten().unwrap_or(0),
        runs: it.next().flatten(),
        voluntary: None,
    })
}

/// `voluntary_ctxt_switches` of a `status` file.
fn parse_voluntary(status: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|v| v.trim().parse().ok())
}

/// The calling thread's voluntary switches (`/proc/thread-self/status`,
/// ~11 µs: read at its registration and its exit, only when recording).
pub(crate) fn own_voluntary() -> Option<u64> {
    parse_voluntary(&std::fs::read_to_string("/proc/thread-self/status").ok()?)
}

/// The calling thread's reading from `/proc/thread-self/schedstat` (one
/// file read, ~10 µs: made once per thread, at its registration and its
/// exit, and only when recording); its CPU clock alone if the file is
/// unreadable.
pub(crate) fn own_schedstat() -> SchedReading {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| parse_schedstat(&s))
        .unwrap_or_else(SchedReading::own_clock)
}

/// A thread's reading for a `Sample`: its `schedstat` from
/// `/proc/self/task/TID/schedstat` (the run periods are its third field),
/// its voluntary switches from its `status`, and the CPU it last ran on
/// from its `stat`; `None` if the thread is gone. Three small reads,
/// ≈ 20 µs on the development guest.
pub(crate) fn read_sample(tid: u64) -> Option<(SchedReading, Option<u32>)> {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    let mut sched = parse_schedstat(&s)?;
    sched.voluntary = std::fs::read_to_string(format!("/proc/self/task/{tid}/status"))
        .ok()
        .and_then(|t| parse_voluntary(&t));
    let cpu = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))
        .ok()
        .and_then(|t| crate::procfs::parse_stat(&t))
        .map(|f| f.processor);
    Some((sched, cpu))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_and_status_give_cpu_wait_runs_and_blocks_and_thread_events_keep_them_through_the_ring(
    ) {
        assert_eq!(
            parse_schedstat("123 45 6\n"),
            Some(SchedReading {
                cpu_ns: 123,
                wait_ns: 45,
                runs: Some(6),
                voluntary: None,
            })
        );
        assert_eq!(
            parse_schedstat("123\n"),
            Some(SchedReading {
                cpu_ns: 123,
                wait_ns: 0,
                runs: None,
                voluntary: None,
            }),
            "a short line keeps what it has"
        );
        assert_eq!(parse_schedstat(""), None);
        let own = own_schedstat();
        assert!(own.runs.is_some_and(|r| r >= 1), "this thread ran: {own:?}");
        assert_eq!(
            parse_voluntary(
                "Name:\tx\nvoluntary_ctxt_switches:\t17\nnonvoluntary_ctxt_switches:\t3\n"
            ),
            Some(17)
        );
        assert_eq!(parse_voluntary("Name:\tx\n"), None);
        assert!(
            own_voluntary().is_some(),
            "this thread's status is readable"
        );
        let (sample, _) = read_sample(crate::sys::gettid()).unwrap();
        assert!(
            sample.runs.is_some() && sample.voluntary.is_some(),
            "{sample:?}"
        );
        let rec = test_recorder(16);
        let sched = SchedReading {
            cpu_ns: 10,
            wait_ns: 2,
            runs: Some(0),
            voluntary: Some(7),
        };
        rec.thread_new(5, 1, Some(u32::MAX - 1), sched);
        rec.thread_new(
            6,
            1,
            None,
            SchedReading {
                runs: None,
                ..sched
            },
        );
        rec.thread_exit(
            5,
            SchedReading {
                runs: Some(9),
                ..sched
            },
        );
        let mut w = rec.lock();
        rec.drain(&mut w, &[]);
        let evs = dfsched_record::decode(&[header_bytes(), w.buf.clone()].concat())
            .unwrap()
            .events;
        assert_eq!(
            evs,
            vec![
                Event::ThreadNew {
                    t_ns: evs[0].t_ns(),
                    tid: 5,
                    app: 1,
                    cpu: Some(u32::MAX - 1),
                    cpu_ns: 10,
                    wait_ns: 2,
                    runs: Some(0),
                    voluntary: Some(7),
                },
                Event::ThreadNew {
                    t_ns: evs[1].t_ns(),
                    tid: 6,
                    app: 1,
                    cpu: None,
                    cpu_ns: 10,
                    wait_ns: 2,
                    runs: None,
                    voluntary: Some(7),
                },
                Event::ThreadExit {
                    t_ns: evs[2].t_ns(),
                    tid: 5,
                    cpu_ns: 10,
                    wait_ns: 2,
                    runs: Some(9),
                    voluntary: Some(7),
                },
            ]
        );
    }

    /// A recorder writing to no file (its bytes stay in the writer's
    /// buffer until written out).
    fn test_recorder(capacity: usize) -> Recorder {
        Recorder {
            ring: Ring::new(capacity),
            dropped: AtomicU64::new(0),
            started: Instant::now(),
            writer: Mutex::new(Writer {
                file: None,
                enc: Encoder::default(),
                buf: Vec::new(),
                head: 0,
                written: 0,
                drops_written: 0,
                sharing: None,
                failed: false,
            }),
            finished: AtomicBool::new(false),
            path: PathBuf::new(),
            bytes: AtomicU64::new(0),
            written: AtomicU64::new(0),
            next_sample: AtomicU64::new(0),
        }
    }

    fn header_bytes() -> Vec<u8> {
        let mut b = Vec::new();
        dfsched_record::encode_header(
            &Header {
                pid: 1,
                cpus: 1,
                start_unix_ns: 0,
                policy: Policy::DataAffinity,
                balance_interval_ms: 100,
            },
            &mut b,
        );
        b
    }

    /// The recording is opened as the engine log is: a symlink planted at
    /// FILE or at FILE.PID is refused and its target left as it was, a FIFO
    /// there is an error at once rather than a hang, and beside an existing
    /// FILE a private FILE.PID (0600) is written.
    #[test]
    fn a_recording_never_writes_through_a_symlink_or_into_a_fifo() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("dfsched-record-open-")
            .tempdir()
            .unwrap();
        let header = || Header {
            pid: std::process::id(),
            cpus: 1,
            start_unix_ns: 0,
            policy: Policy::DataAffinity,
            balance_interval_ms: 100,
        };
        let create = |p: &Path| Recorder::create(p, 16, Instant::now(), header());
        let pid = std::process::id();
        let target = dir.path().join("target");
        std::fs::write(&target, "keep").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join(format!("link.{pid}"))).unwrap();
        assert!(create(&link).is_err(), "a symlink at FILE.PID is refused");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        let fifo = dir.path().join("fifo");
        for p in [fifo.clone(), dir.path().join(format!("fifo.{pid}"))] {
            let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: a NUL-terminated path that outlives the call.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
        }
        let started = Instant::now();
        assert!(create(&fifo).is_err(), "a FIFO at FILE.PID is refused");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        // An existing regular FILE: FILE.PID, new, 0600, with the header.
        let file = dir.path().join("r.dfrec");
        let first = create(&file).unwrap();
        assert_eq!(first.stats().path, file.display().to_string());
        let second = create(&file).unwrap();
        let other = dir.path().join(format!("r.dfrec.{pid}"));
        assert_eq!(second.stats().path, other.display().to_string());
        let mode = std::fs::metadata(&other).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
        assert!(std::fs::metadata(&other).unwrap().len() > 0, "the header");
    }

    #[test]
    fn a_full_ring_refuses_without_waiting_and_frees_slots_as_they_are_read() {
        let r = Ring::new(4);
        for i in 0..4 {
            assert!(r.push([i; WORDS]));
        }
        assert!(!r.push([9; WORDS]), "a full ring takes nothing");
        let mut head = 0;
        assert_eq!(r.pop(&mut head), Some([0; WORDS]));
        assert!(r.push([4; WORDS]));
        let rest: Vec<u64> = std::iter::from_fn(|| r.pop(&mut head))
            .map(|w| w[0])
            .collect();
        assert_eq!(rest, vec![1, 2, 3, 4]);
    }

    #[test]
    fn samples_beyond_the_budget_are_taken_in_turn_and_every_thread_comes_up() {
        let all: Vec<u64> = (100..110).collect();
        let mut seen = std::collections::BTreeSet::new();
        let mut from = 0;
        for _ in 0..3 {
            let mut tids = all.clone();
            from = in_turn(&mut tids, from, 4);
            assert_eq!(tids.len(), 4);
            seen.extend(tids);
        }
        assert_eq!(seen.len(), 10, "three turns of 4 cover 10 threads");
        let mut few = vec![1, 2];
        assert_eq!(in_turn(&mut few, 7, 4), 0);
        assert_eq!(few, vec![1, 2], "within the budget: everyone");
    }

    #[test]
    fn concurrent_producers_lose_nothing_that_fits_and_count_every_drop() {
        let rec = std::sync::Arc::new(test_recorder(1024));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let rec = std::sync::Arc::clone(&rec);
                std::thread::spawn(move || {
                    for i in 0..1000 {
                        rec.hint(t, 0, i, i + 1, 0);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        // Nothing drained: exactly the capacity got in, the rest dropped.
        assert_eq!(rec.dropped(), 4000 - 1024);
        rec.finish(&[]);
        let w = rec.lock();
        assert_eq!(w.written, 1024);
    }
}
