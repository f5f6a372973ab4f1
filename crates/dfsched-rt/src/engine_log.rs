//! The engine log (`DFSCHED_ENGINE_LOG=FILE`): every event a runtime's
//! engine handles and the decisions it gave, so that the same brain can be
//! checked anywhere: `dfsched engine-replay FILE` rebuilds the engine from
//! the log's header, feeds it the events in order and compares each decision
//! list with the logged one ([`crate::engine_replay`]). Whatever the body
//! (affinity masks, the sched_ext scheduler), the engine is the same
//! deterministic `dfsched_core::Engine`, so a replay must give the same
//! decisions, byte for byte.
//!
//! The format (JSON lines, [`FORMAT_VERSION`] 1):
//!
//! ```text
//! {"header":{"version":1,"pid":…,"segment":0,"body":"scx","policy":"co-thread",
//!            "topology":{…},"config":{…},"max_bytes":…}}
//! {"step":{"n":0,"event":{"event":"app_new","app":1},"decisions":[]}}
//! {"step":{"n":1,"event":{"event":"task_new",…},"decisions":[{"decision":"place",…}]}}
//! {"step":{"n":7,"event":{"event":"hint",…},"decisions":[],"error":"…"}}   an event the engine refused
//! …
//! {"truncated":{"steps":N,"bytes":B}}   the next step would have passed max_bytes: nothing follows
//! {"end":{"steps":N}}                    the runtime shut down (or the process exited)
//! ```
//!
//! - `topology` is the engine's own [`Topology`] (serde, exact), and
//!   `config` its [`Config`] *as the engine has it*: after the sched_ext
//!   scheduler's offered policy was taken (`runtime.rs`, `scx_link`), which
//!   happens before the engine is made, so one header describes it for its
//!   whole life. A runtime's engine is never rebuilt nor reconfigured after
//!   that: CPUs going offline and coming back, cpusets and the agent's
//!   homes reach it as `Allowed` events, the outside load as `ExternalLoad*`
//!   events, idle threads as `Block`/`Wake`, all through `State::handle`,
//!   so they are steps like any other; the runtime never calls
//!   `Engine::set_config`. A body that did rebuild or reconfigure its
//!   engine would write a new `header` (the next `segment`); the replay
//!   starts a fresh engine at each one. The agent's engines for
//!   `dfsched attach` (`agent/attached.rs`, `dfsched agent --engine-log
//!   DIR`) are logged the same way, body `attach`.
//! - `n` counts steps from 0 over the whole file, with no gap.
//!
//! Bounds and failures: the header is always written whole; a step that
//! would take the file past `max_bytes` (`DFSCHED_ENGINE_LOG_MAX_BYTES`,
//! default [`DEFAULT_MAX_BYTES`]) is not written, a `truncated` line is, and
//! every later step is only counted (`steps_not_logged`). A write error
//! stops the log (counted, `write_errors`, warned once); the program goes
//! on. Writes go through a buffer, flushed at each balancer pass and at the
//! end, under the runtime's state lock, so the order is the engine's.
//!
//! Files: `FILE` if it does not exist; else (another process of the program
//! writes it) `FILE.PID`, or `FILE.PID.ID` for a second runtime of one
//! process. Opened with `O_NOFOLLOW` (a symlink is refused), `O_NONBLOCK`
//! (a FIFO planted there cannot block the open), mode 0600, and kept only if
//! it is a regular file owned by our effective uid, which is checked before
//! an old `FILE.PID` is emptied.
//!
//! Cost when off: `State::handle` tests one `Option`.

use dfsched_core::{Config, CoreError, Decision, Engine, Event, Policy, Topology};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The format's version, in every header.
pub const FORMAT_VERSION: u32 = 1;
/// Default `max_bytes`: 64 MiB. A step is 100–400 bytes (a hint and its
/// `Place`), so this holds a few hundred thousand: minutes of a program
/// that changes DF hundreds of times a second, far more than a check or a
/// bug report needs, and small enough for any disk.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;
/// Smallest `max_bytes` accepted: 64 KiB.
pub const MIN_MAX_BYTES: u64 = 64 << 10;
/// Largest `max_bytes` accepted: 1 TiB.
pub const MAX_MAX_BYTES: u64 = 1 << 40;
/// The write buffer.
const BUFFER_BYTES: usize = 64 << 10;
/// Room kept for the `truncated` line.
const TRUNCATED_LINE_ROOM: u64 = 96;

/// The first line of a log and of each later segment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    /// [`FORMAT_VERSION`] of the writer.
    pub version: u32,
    /// The process that wrote it.
    pub pid: u32,
    /// 0 for the first engine, then 1, 2… for each rebuilt one.
    pub segment: u32,
    /// The body the runtime placed through when it started: `affinity` or
    /// `scx` (for the reader; the replay does not depend on it).
    pub body: String,
    /// The engine's policy (also in `config`; here for the reader).
    pub policy: Policy,
    /// The engine's topology, exactly.
    pub topology: Topology,
    /// The engine's configuration, exactly.
    pub config: Config,
    /// The log's size limit, bytes.
    pub max_bytes: u64,
}

/// One event the engine handled.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// Its index among the file's steps, from 0.
    pub n: u64,
    /// The event.
    pub event: Event,
    /// The decisions it gave, in order.
    #[serde(default)]
    pub decisions: Vec<Decision>,
    /// The engine's refusal, when it refused the event (then no decision).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Where the log was cut.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cut {
    /// Steps written before the cut.
    pub steps: u64,
    /// Bytes written before this line.
    pub bytes: u64,
}

/// The log's regular end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct End {
    /// Steps written.
    pub steps: u64,
}

/// One line of a log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Line {
    /// A (new) engine: see [`Header`].
    Header(Box<Header>),
    /// An event and its decisions.
    Step(Step),
    /// The size limit was reached; nothing follows.
    Truncated(Cut),
    /// The runtime finished the log.
    End(End),
}

/// The engine log's counters, in the runtime's stats (`engine_log`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct EngineLogStats {
    /// The file written.
    pub path: String,
    /// Steps written.
    pub steps: u64,
    /// Bytes handed to the file (buffered ones included).
    pub bytes: u64,
    /// The size limit, bytes.
    pub max_bytes: u64,
    /// Whether the limit was reached (a `truncated` line ends the file).
    pub truncated: bool,
    /// Steps the engine handled that the log does not hold (after a cut, a
    /// write error or the end).
    pub steps_not_logged: u64,
    /// Write errors (the first one stops the log).
    pub write_errors: u64,
}

/// Where the writer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Writing steps.
    Open,
    /// Cut at the limit.
    Truncated,
    /// Stopped by a write error.
    Failed,
    /// Ended (shutdown or exit).
    Ended,
}

/// A runtime's engine log, kept in its `State` (so written under its lock).
pub(crate) struct EngineLog {
    /// The file, buffered; `None` only while a forked child drops its copy.
    out: Option<std::io::BufWriter<File>>,
    /// The process that opened it: a forked child that drops its copy
    /// never writes the parent's buffer into the file.
    pid: u32,
    path: PathBuf,
    phase: Phase,
    /// The next step's index.
    next: u64,
    bytes: u64,
    max_bytes: u64,
    not_logged: u64,
    write_errors: u64,
    /// The limit was reached (a `truncated` line was written).
    truncated: bool,
    /// The event serialised before the engine takes it, and the line.
    event_json: Vec<u8>,
    line: Vec<u8>,
}

impl std::fmt::Debug for EngineLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineLog")
            .field("path", &self.path)
            .field("phase", &self.phase)
            .field("next", &self.next)
            .finish()
    }
}

/// Opens `path` as the module doc says: `FILE`, else `FILE.PID` (first
/// runtime of the process) or `FILE.PID.ID`.
fn open(path: &Path, pid: u32, runtime: u64) -> std::io::Result<(File, PathBuf)> {
    let suffix = if runtime > 1 {
        format!(".{pid}.{runtime}")
    } else {
        format!(".{pid}")
    };
    crate::sys::create_own_output(path, &suffix)
}

impl EngineLog {
    /// Starts a log at `path` (module doc) for `engine`, whose header is
    /// written at once; `body` names the body for the reader.
    pub(crate) fn create(
        path: &Path,
        max_bytes: u64,
        runtime: u64,
        engine: &Engine,
        body: &str,
    ) -> std::io::Result<EngineLog> {
        let pid = std::process::id();
        let (file, path) = open(path, pid, runtime)?;
        let mut log = EngineLog {
            out: Some(std::io::BufWriter::with_capacity(BUFFER_BYTES, file)),
            pid,
            path,
            phase: Phase::Open,
            next: 0,
            bytes: 0,
            max_bytes,
            not_logged: 0,
            write_errors: 0,
            truncated: false,
            event_json: Vec::with_capacity(256),
            line: Vec::with_capacity(1024),
        };
        let header = Line::Header(Box::new(Header {
            version: FORMAT_VERSION,
            pid,
            segment: 0,
            body: body.to_string(),
            policy: engine.config().policy,
            topology: engine.topology().clone(),
            config: engine.config().clone(),
            max_bytes,
        }));
        let mut line = serde_json::to_vec(&header).map_err(std::io::Error::other)?;
        line.push(b'\n');
        log.write_all(&line)?;
        log.flush_out()?;
        log.bytes = line.len() as u64;
        Ok(log)
    }

    /// Feeds `event` to `engine` (decisions appended to `out`, as
    /// `Engine::handle` does) and logs the step.
    pub(crate) fn handle(
        &mut self,
        engine: &mut Engine,
        event: Event,
        out: &mut Vec<Decision>,
    ) -> Result<(), CoreError> {
        if self.phase != Phase::Open {
            self.not_logged += 1;
            return engine.handle(event, out);
        }
        self.event_json.clear();
        let serialised = serde_json::to_writer(&mut self.event_json, &event).is_ok();
        let start = out.len();
        let result = engine.handle(event, out);
        if serialised {
            self.step(&out[start..], result.as_ref().err());
        } else {
            // An event always serialises; if one ever did not, the log
            // would have a gap, so it stops here as on a write error.
            self.fail(&std::io::Error::other("an event did not serialise"));
            self.not_logged += 1;
        }
        result
    }

    /// Writes one step (`self.event_json` is its event).
    fn step(&mut self, decisions: &[Decision], error: Option<&CoreError>) {
        self.line.clear();
        self.line.extend_from_slice(b"{\"step\":{\"n\":");
        self.line
            .extend_from_slice(self.next.to_string().as_bytes());
        self.line.extend_from_slice(b",\"event\":");
        self.line.extend_from_slice(&self.event_json);
        self.line.extend_from_slice(b",\"decisions\":");
        if serde_json::to_writer(&mut self.line, decisions).is_err() {
            self.fail(&std::io::Error::other("a decision did not serialise"));
            self.not_logged += 1;
            return;
        }
        if let Some(e) = error {
            self.line.extend_from_slice(b",\"error\":");
            let _ = serde_json::to_writer(&mut self.line, &e.to_string());
        }
        self.line.extend_from_slice(b"}}\n");
        let len = self.line.len() as u64;
        if self.bytes + len + TRUNCATED_LINE_ROOM > self.max_bytes {
            self.not_logged += 1;
            let cut = Line::Truncated(Cut {
                steps: self.next,
                bytes: self.bytes,
            });
            self.phase = Phase::Truncated;
            self.truncated = true;
            self.write_line(&cut);
            self.flush();
            return;
        }
        let line = std::mem::take(&mut self.line);
        let written = self.write_all(&line);
        self.line = line;
        match written {
            Ok(()) => {
                self.bytes += len;
                self.next += 1;
            }
            Err(e) => {
                self.not_logged += 1;
                self.fail(&e);
            }
        }
    }

    /// Writes a line that is not a step (cut or end), whatever the limit.
    fn write_line(&mut self, line: &Line) {
        let Ok(mut text) = serde_json::to_vec(line) else {
            return;
        };
        text.push(b'\n');
        match self.write_all(&text) {
            Ok(()) => self.bytes += text.len() as u64,
            Err(e) => self.fail(&e),
        }
    }

    fn fail(&mut self, e: &std::io::Error) {
        self.write_errors += 1;
        if self.phase == Phase::Open || self.phase == Phase::Truncated {
            tracing::warn!(path = %self.path.display(), error = %e, "engine log stopped");
        }
        self.phase = Phase::Failed;
    }

    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        match self.out.as_mut() {
            Some(out) => out.write_all(bytes),
            None => Err(std::io::Error::other("the log is closed")),
        }
    }

    fn flush_out(&mut self) -> std::io::Result<()> {
        self.out.as_mut().map_or(Ok(()), std::io::Write::flush)
    }

    /// Writes out the buffer (each balancer pass).
    pub(crate) fn flush(&mut self) {
        if self.phase == Phase::Failed {
            return;
        }
        if let Err(e) = self.flush_out() {
            self.fail(&e);
        }
    }

    /// The `end` line and a flush; nothing is written after. Idempotent.
    pub(crate) fn finish(&mut self) {
        if self.phase == Phase::Open {
            let end = Line::End(End { steps: self.next });
            self.write_line(&end);
            if self.phase == Phase::Open {
                self.phase = Phase::Ended;
            }
        }
        self.flush();
        if self.phase == Phase::Truncated {
            // Flushed once more above; nothing more will come.
            self.phase = Phase::Ended;
        }
    }

    /// Its counters.
    pub(crate) fn stats(&self) -> EngineLogStats {
        EngineLogStats {
            path: self.path.display().to_string(),
            steps: self.next,
            bytes: self.bytes,
            max_bytes: self.max_bytes,
            truncated: self.truncated,
            steps_not_logged: self.not_logged,
            write_errors: self.write_errors,
        }
    }
}

impl Drop for EngineLog {
    /// An engine log dropped with its owner (a runtime's state, an
    /// attached process) is ended; [`EngineLog::finish`] is idempotent.
    fn drop(&mut self) {
        if std::process::id() == self.pid {
            self.finish();
        } else {
            // A forked child's copy: its buffer is the parent's to write,
            // and `into_parts` drops it without the flush a drop does.
            if let Some(out) = self.out.take() {
                let _ = out.into_parts();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dfsched_core::{AppId, CpuId, DfId, TaskId};

    #[test]
    fn a_write_error_stops_the_log_counts_it_and_the_engine_goes_on() {
        let dir = tempfile::Builder::new()
            .prefix("dfsched-engine-log-werr-")
            .tempdir()
            .unwrap();
        let path = dir.path().join("e.log");
        let topo = Topology::test(1, 1, 4, 1);
        let mut engine = Engine::new(topo.clone(), Config::default()).unwrap();
        let mut log = EngineLog::create(&path, DEFAULT_MAX_BYTES, 1, &engine, "affinity").unwrap();
        // The file under the log becomes one opened read-only: every write
        // fails (EBADF), as a full disk or a revoked file would.
        log.out = Some(std::io::BufWriter::with_capacity(
            64,
            File::open(&path).unwrap(),
        ));
        let mut out = Vec::new();
        for t in 1..=8u64 {
            log.handle(
                &mut engine,
                Event::TaskNew {
                    task: TaskId(t),
                    app: AppId(0),
                    allowed: topo.cpus().clone(),
                    cpu: Some(CpuId(0)),
                },
                &mut out,
            )
            .unwrap();
            log.handle(
                &mut engine,
                Event::Hint {
                    task: TaskId(t),
                    app: AppId(0),
                    cur: None,
                    next: Some(DfId(t % 2 + 1)),
                },
                &mut out,
            )
            .unwrap();
        }
        log.finish();
        let s = log.stats();
        assert_eq!(s.write_errors, 1, "the first error stops the log: {s:?}");
        assert_eq!(s.steps + s.steps_not_logged, 16, "{s:?}");
        assert!(s.steps_not_logged > 0, "{s:?}");
        assert!(!s.truncated);
        // The engine itself went on: every thread was placed.
        assert_eq!(
            out.iter()
                .filter(|d| matches!(d, Decision::Place { .. }))
                .count(),
            8
        );
        drop(log);
    }
}
