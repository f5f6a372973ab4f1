//! A runtime's recording (`DFSCHED_RECORD`), from the runtime's side: the
//! balancer pass's samples and write-out, the end of the recording at
//! shutdown or at `exit()`. The recorder itself (the buffer, the writer,
//! the `/proc` readings) is `record.rs`, which knows nothing of the
//! runtime; this file only reads the registered threads and calls it.
//! The engine log's end (`DFSCHED_ENGINE_LOG`, `engine_log.rs`) shares the
//! same two moments, shutdown and the `atexit` handler.
//!
//! Invariants: samples are read outside the state's lock (the tids are
//! copied under it); nothing here runs on a program thread but the
//! `atexit` handler, on the thread that calls `exit()`.

use super::Inner;
use crate::record::{read_sample, Recorder};
use dfsched_record::Event;
use std::sync::{Arc, Mutex, PoisonError, Weak};

impl Inner {
    /// The recording's part of a balancer pass: a `Sample` of every
    /// registered thread (its `/proc` files, read outside the state's
    /// lock), then everything waiting written out. Nothing without a
    /// recording.
    pub(crate) fn record_pass(&self) {
        let Some(rec) = &self.recorder else {
            return;
        };
        let samples = self.samples(rec, false);
        rec.flush(&samples);
    }

    /// `Sample` events of the registered threads now: all of them at the
    /// end (`all`), else at most [`crate::record::SAMPLES_PER_PASS`] a pass, in tid order
    /// from where the last pass stopped, so that a program of thousands of
    /// threads costs the balancer a bounded time per pass (≈ 20 µs a
    /// thread) and each thread is still read every few passes.
    fn samples(&self, rec: &Recorder, all: bool) -> Vec<Event> {
        let mut tids: Vec<u64> = match self.lock() {
            Ok(st) => st.tasks.keys().copied().collect(),
            Err(_) => return Vec::new(),
        };
        tids.sort_unstable();
        if !all {
            rec.sample_turn(&mut tids);
        }
        tids.into_iter()
            .filter_map(|tid| {
                let (sched, cpu) = read_sample(tid)?;
                Some(Event::Sample {
                    t_ns: rec.now_ns(),
                    tid,
                    cpu_ns: sched.cpu_ns,
                    wait_ns: sched.wait_ns,
                    cpu,
                    runs: sched.runs,
                    voluntary: sched.voluntary,
                })
            })
            .collect()
    }

    /// The recording's end: a last sample of every thread still
    /// registered, the `End` record. Idempotent; nothing in a forked child.
    pub(crate) fn finish_recording(&self) {
        let Some(rec) = &self.recorder else {
            return;
        };
        if self.forked() {
            return;
        }
        let samples = self.samples(rec, true);
        rec.finish(&samples);
    }
}

impl Inner {
    /// The engine log's end (`engine_log.rs`): its `end` line, flushed.
    /// Idempotent; nothing in a forked child. At `exit()` (`at_exit`)
    /// another thread may hold the state's lock: it is tried for at most
    /// 100 ms, and a log whose lock never came keeps what the last pass
    /// flushed (the replay of a log with no `end` says so).
    pub(crate) fn finish_engine_log(&self, at_exit: bool) {
        if self.config.engine_log.is_none() || self.forked() {
            return;
        }
        let mut st = if at_exit {
            let mut tries = 0;
            loop {
                match self.state.try_lock() {
                    Ok(st) => break st,
                    Err(std::sync::TryLockError::Poisoned(p)) => break p.into_inner(),
                    Err(std::sync::TryLockError::WouldBlock) if tries < 100 => {
                        tries += 1;
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    }
                    Err(std::sync::TryLockError::WouldBlock) => return,
                }
            }
        } else {
            self.state.lock().unwrap_or_else(PoisonError::into_inner)
        };
        if let Some(log) = st.engine_log.as_deref_mut() {
            log.finish();
        }
    }
}

/// Runtimes with a recording, finished by the `atexit` handler: the
/// process's global runtime is never shut down, and a program ends by
/// `exit`.
static AT_EXIT: Mutex<Vec<Weak<Inner>>> = Mutex::new(Vec::new());
static AT_EXIT_REGISTERED: std::sync::Once = std::sync::Once::new();

/// Finishes `inner`'s recording and engine log when the process exits (if
/// they have not been finished by a shutdown before).
pub(crate) fn finish_at_exit(inner: &Arc<Inner>) {
    AT_EXIT
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Arc::downgrade(inner));
    AT_EXIT_REGISTERED.call_once(|| {
        // SAFETY: `at_exit` is an `extern "C" fn()` that never unwinds
        // (its body is caught) and lives as long as the program (this
        // library is never unloaded while the process runs).
        unsafe {
            libc::atexit(at_exit);
        }
    });
}

extern "C" fn at_exit() {
    let _ = std::panic::catch_unwind(|| {
        // try_lock: in a forked child a parent thread may hold it for ever.
        let Ok(list) = AT_EXIT.try_lock() else {
            return;
        };
        for inner in list.iter().filter_map(Weak::upgrade) {
            inner.finish_recording();
            inner.finish_engine_log(true);
        }
    });
}
