//! The replay of an engine log ([`crate::engine_log`]): one brain, checked.
//!
//! 1. the first line must be a `header`: its topology is taken exactly and
//!    checked to be one that `Topology::new` builds from its own domains
//!    (a hand-edited or garbled topology is refused, not trusted), its
//!    configuration must pass the engine's validation; a fresh
//!    `dfsched_core::Engine` is made from them;
//! 2. each `step` is fed to the engine, in order (`n` must run 0, 1, 2…
//!    with no gap), and the decisions it gives (or its refusal) are compared
//!    with the logged ones; the first difference ends the replay with both
//!    lists ([`ReplayError::Diverged`]);
//! 3. a later `header` starts a fresh engine (a new segment);
//! 4. `truncated` or `end` ends the log; a line after either is an error. A
//!    last line with no newline that does not parse is the tail of a log
//!    whose writer died mid-line (a killed program): the replay stops before
//!    it and says so ([`Replayed::cut_tail`]).
//!
//! Pure: reads a `BufRead`, never the clock or the system.

use crate::engine_log::{Cut, Header, Line, Step, FORMAT_VERSION};
use dfsched_core::{Decision, DomainSpec, Engine, Event, Topology};
use serde::Serialize;
use std::io::BufRead;

/// What an identical replay went through.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Replayed {
    /// Headers (engines) met.
    pub segments: u32,
    /// Steps replayed.
    pub steps: u64,
    /// Decisions compared.
    pub decisions: u64,
    /// Steps the engine refused, in the log and in the replay alike.
    pub refused: u64,
    /// Where the log was cut at its size limit, if it was.
    pub truncated: Option<Cut>,
    /// Whether the log has its `end` line.
    pub ended: bool,
    /// Whether a partial last line (no newline, not JSON) was left out.
    pub cut_tail: bool,
}

/// The first step whose decisions differ.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Divergence {
    /// Its line in the file, from 1.
    pub line: usize,
    /// Its segment (0 for the first engine).
    pub segment: u32,
    /// Its step index (`n`).
    pub step: u64,
    /// The event.
    pub event: Event,
    /// The decisions in the log.
    pub logged: Vec<Decision>,
    /// The decisions the replay gave.
    pub replayed: Vec<Decision>,
    /// The refusal in the log, if any.
    pub logged_error: Option<String>,
    /// The replay's refusal, if any.
    pub replayed_error: Option<String>,
    /// What had been replayed identically before it.
    pub before: Replayed,
}

/// Why a log did not replay identically.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The log could not be read.
    #[error("reading the engine log: {0}")]
    Io(#[from] std::io::Error),
    /// The first line is no engine log header.
    #[error("not an engine log: line 1 is no header ({why})")]
    NoHeader {
        /// What was wrong with it.
        why: String,
    },
    /// A line is not one of the log's lines.
    #[error("line {line}: garbled ({why})")]
    Garbled {
        /// Its line number, from 1.
        line: usize,
        /// What was wrong with it.
        why: String,
    },
    /// A header of another format version.
    #[error("line {line}: engine log format version {found}; this dfsched reads version {FORMAT_VERSION}")]
    Version {
        /// The header's line.
        line: usize,
        /// Its version.
        found: u32,
    },
    /// A header whose topology or configuration makes no engine.
    #[error("line {line}: the header makes no engine: {why}")]
    BadHeader {
        /// The header's line.
        line: usize,
        /// Why.
        why: String,
    },
    /// Steps out of order, or a line after the log's end.
    #[error("line {line}: {why}")]
    Order {
        /// The line.
        line: usize,
        /// What came out of order.
        why: String,
    },
    /// The replay gave other decisions.
    #[error("step {} (line {}): the replay's decisions differ from the log's", .0.step, .0.line)]
    Diverged(Box<Divergence>),
}

/// The engine a header describes (step 1 of the module doc).
fn engine_of(header: &Header, line: usize) -> Result<Engine, ReplayError> {
    if header.version != FORMAT_VERSION {
        return Err(ReplayError::Version {
            line,
            found: header.version,
        });
    }
    let bad = |why: String| ReplayError::BadHeader { line, why };
    let topo = &header.topology;
    let specs = topo
        .domains()
        .iter()
        .map(|d| DomainSpec {
            level: d.level,
            cpus: d.cpus.clone(),
            caches: d.caches.clone(),
        })
        .collect();
    let rebuilt = Topology::new(topo.cpus(), specs).map_err(|e| bad(e.to_string()))?;
    if &rebuilt != topo {
        return Err(bad(
            "its topology is not the one its own domains build (edited or garbled)".into(),
        ));
    }
    if header.policy != header.config.policy {
        return Err(bad(format!(
            "policy {} but config.policy {}",
            header.policy, header.config.policy
        )));
    }
    Engine::new(topo.clone(), header.config.clone()).map_err(|e| bad(e.to_string()))
}

/// Replays the engine log read from `log` (module doc).
pub fn replay(mut log: impl BufRead) -> Result<Replayed, ReplayError> {
    let mut done = Replayed::default();
    let mut engine: Option<Engine> = None;
    let mut closed: Option<&'static str> = None;
    let mut out: Vec<Decision> = Vec::new();
    let mut buf = Vec::new();
    let mut line = 0usize;
    loop {
        buf.clear();
        if log.read_until(b'\n', &mut buf)? == 0 {
            break;
        }
        line += 1;
        let complete = buf.last() == Some(&b'\n');
        let text = buf.strip_suffix(b"\n").unwrap_or(&buf);
        if text.iter().all(u8::is_ascii_whitespace) && complete {
            continue;
        }
        let parsed: Line = match serde_json::from_slice(text) {
            Ok(l) => l,
            Err(e) if line == 1 => return Err(ReplayError::NoHeader { why: e.to_string() }),
            Err(_) if !complete => {
                done.cut_tail = true;
                break;
            }
            Err(e) => {
                return Err(ReplayError::Garbled {
                    line,
                    why: e.to_string(),
                })
            }
        };
        if let Some(what) = closed {
            return Err(ReplayError::Order {
                line,
                why: format!("a line after the log's {what} line"),
            });
        }
        match parsed {
            Line::Header(h) => {
                engine = Some(engine_of(&h, line)?);
                done.segments += 1;
            }
            Line::Step(step) => {
                let Some(engine) = engine.as_mut() else {
                    return Err(ReplayError::NoHeader {
                        why: "it is a step".into(),
                    });
                };
                step_one(engine, step, line, &mut out, &mut done)?;
            }
            Line::Truncated(cut) => {
                done.truncated = Some(cut);
                closed = Some("truncated");
            }
            Line::End(_) => {
                done.ended = true;
                closed = Some("end");
            }
        }
        if line == 1 && done.segments == 0 {
            return Err(ReplayError::NoHeader {
                why: "it is another kind of line".into(),
            });
        }
    }
    if done.segments == 0 {
        return Err(ReplayError::NoHeader {
            why: "the log is empty".into(),
        });
    }
    Ok(done)
}

/// Step 2 of the module doc for one step.
fn step_one(
    engine: &mut Engine,
    step: Step,
    line: usize,
    out: &mut Vec<Decision>,
    done: &mut Replayed,
) -> Result<(), ReplayError> {
    if step.n != done.steps {
        return Err(ReplayError::Order {
            line,
            why: format!("step {} where step {} was due", step.n, done.steps),
        });
    }
    out.clear();
    let replayed_error = engine
        .handle(step.event.clone(), out)
        .err()
        .map(|e| e.to_string());
    if *out != step.decisions || replayed_error != step.error {
        return Err(ReplayError::Diverged(Box::new(Divergence {
            line,
            segment: done.segments.saturating_sub(1),
            step: step.n,
            event: step.event,
            logged: step.decisions,
            replayed: std::mem::take(out),
            logged_error: step.error,
            replayed_error,
            before: done.clone(),
        })));
    }
    done.steps += 1;
    done.decisions += out.len() as u64;
    done.refused += u64::from(replayed_error.is_some());
    Ok(())
}
