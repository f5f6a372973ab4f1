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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine_log::{EngineLog, DEFAULT_MAX_BYTES};
    use dfsched_core::{AppId, Config, CpuId, CpuSet, DfId, Nanos, TaskId};
    use std::path::Path;

    /// A fresh directory of this test (a random name no other user can
    /// have made first), removed on drop.
    struct Dir(tempfile::TempDir);

    impl Dir {
        fn new(tag: &str) -> Dir {
            let d = tempfile::Builder::new()
                .prefix(&format!("dfsched-engine-log-{tag}-"))
                .tempdir()
                .unwrap();
            Dir(d)
        }

        fn join(&self, name: impl AsRef<Path>) -> std::path::PathBuf {
            self.0.path().join(name)
        }
    }

    /// A run's events: two apps' DFs on 16 CPUs, outside load, balancer
    /// passes, a refused hint, blocks, an allowed-set change, exits.
    fn events() -> Vec<Event> {
        let all: CpuSet = "0-15".parse().unwrap();
        let mut ev = vec![Event::AppNew { app: AppId(1) }];
        for t in 1..=8u64 {
            ev.push(Event::TaskNew {
                task: TaskId(t),
                app: AppId(t % 2),
                allowed: all.clone(),
                cpu: Some(CpuId((t % 16) as u32)),
            });
            ev.push(Event::Hint {
                task: TaskId(t),
                app: AppId(t % 2),
                cur: None,
                next: Some(DfId(1 + t % 3)),
            });
        }
        // Refused: task 1's DF is not 9.
        ev.push(Event::Hint {
            task: TaskId(1),
            app: AppId(1),
            cur: Some(DfId(9)),
            next: None,
        });
        // Outside load on the first node, where the first groups went.
        ev.push(Event::ExternalLoad {
            runnable: (0..8).map(|c| (CpuId(c), 4)).collect(),
        });
        for pass in 1..=12u64 {
            ev.push(Event::Balance {
                now: Nanos(pass * 100_000_000),
            });
        }
        ev.push(Event::Block { task: TaskId(2) });
        ev.push(Event::Allowed {
            task: TaskId(3),
            allowed: "8-15".parse().unwrap(),
        });
        ev.push(Event::Wake { task: TaskId(2) });
        ev.push(Event::Balance {
            now: Nanos(2_000_000_000),
        });
        for t in 1..=8u64 {
            ev.push(Event::Exit { task: TaskId(t) });
        }
        ev
    }

    /// Logs `events()` through an engine on a 2-node topology into `path`,
    /// with `max_bytes`; returns the engine log's stats and the decisions.
    fn write_log(path: &Path, max_bytes: u64) -> (crate::engine_log::EngineLogStats, u64) {
        let mut engine = Engine::new(Topology::test(2, 2, 2, 2), Config::default()).unwrap();
        let mut log = EngineLog::create(path, max_bytes, 1, &engine, "affinity").unwrap();
        let mut out = Vec::new();
        for e in events() {
            let _ = log.handle(&mut engine, e, &mut out);
        }
        log.finish();
        (log.stats(), out.len() as u64)
    }

    fn replay_file(path: &Path) -> Result<Replayed, ReplayError> {
        replay(std::io::BufReader::new(std::fs::File::open(path).unwrap()))
    }

    #[test]
    fn a_logged_engine_replays_identically() {
        let dir = Dir::new("same");
        let path = dir.join("e.log");
        let (stats, decisions) = write_log(&path, DEFAULT_MAX_BYTES);
        let r = replay_file(&path).unwrap();
        assert_eq!(r.steps, events().len() as u64);
        assert_eq!(r.steps, stats.steps);
        assert_eq!(r.decisions, decisions);
        assert!(decisions > 16, "the run placed threads: {decisions}");
        assert_eq!(r.refused, 1, "the bad hint was logged as refused");
        assert!(r.ended && r.truncated.is_none() && !r.cut_tail);
        assert_eq!(r.segments, 1);
        assert!(!stats.truncated);
        assert_eq!(stats.steps_not_logged, 0);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("\"event\":\"balance\""), "passes logged");
        assert!(
            text.contains("group_moved")
                || text.contains("task_moved")
                || text.contains("group_split"),
            "the balancer moved something, so its decisions are compared too"
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    #[test]
    fn an_edited_decision_is_reported_at_its_step() {
        let dir = Dir::new("edit");
        let path = dir.join("e.log");
        write_log(&path, DEFAULT_MAX_BYTES);
        let text = std::fs::read_to_string(&path).unwrap();
        // The first Place decision of a hint, given another CPU set.
        let (at, line) = text
            .lines()
            .enumerate()
            .find(|(_, l)| l.contains("\"hint\"") && l.contains("\"place\""))
            .unwrap();
        let step: Line = serde_json::from_str(line).unwrap();
        let Line::Step(mut step) = step else {
            panic!("not a step: {line}")
        };
        let Decision::Place { cpus, .. } = &mut step.decisions[0] else {
            panic!("not a place: {line}")
        };
        *cpus = if cpus.contains(CpuId(15)) {
            "0".parse().unwrap()
        } else {
            "15".parse().unwrap()
        };
        let edited_line = serde_json::to_string(&Line::Step(step.clone())).unwrap();
        let edited: Vec<String> = text
            .lines()
            .enumerate()
            .map(|(i, l)| {
                if i == at {
                    edited_line.clone()
                } else {
                    l.to_string()
                }
            })
            .collect();
        std::fs::write(&path, edited.join("\n") + "\n").unwrap();
        let Err(ReplayError::Diverged(d)) = replay_file(&path) else {
            panic!("the edit was not found")
        };
        assert_eq!(d.step, step.n);
        assert_eq!(d.line, at + 1);
        assert_eq!(d.logged, step.decisions);
        assert_ne!(d.replayed, d.logged);
        assert_eq!(d.before.steps, step.n);
    }

    #[test]
    fn a_truncated_log_replays_up_to_its_cut() {
        let dir = Dir::new("cut");
        let full = dir.join("full.log");
        write_log(&full, DEFAULT_MAX_BYTES);
        let header_len = std::fs::read_to_string(&full)
            .unwrap()
            .lines()
            .next()
            .unwrap()
            .len() as u64;
        let path = dir.join("cut.log");
        let (stats, _) = write_log(&path, header_len + 2000);
        assert!(stats.truncated);
        assert!(stats.steps > 0 && stats.steps < events().len() as u64);
        assert_eq!(stats.steps + stats.steps_not_logged, events().len() as u64);
        assert!(std::fs::metadata(&path).unwrap().len() <= header_len + 2000);
        let r = replay_file(&path).unwrap();
        assert_eq!(r.steps, stats.steps);
        let cut = r.truncated.expect("the cut is reported");
        assert_eq!(cut.steps, stats.steps);
        assert!(!r.ended);
    }

    #[test]
    fn a_garbled_header_is_a_clear_error() {
        let dir = Dir::new("garbled");
        let path = dir.join("e.log");
        write_log(&path, DEFAULT_MAX_BYTES);
        let text = std::fs::read_to_string(&path).unwrap();
        let (header, rest) = text.split_once('\n').unwrap();
        let with_header = |h: &str| format!("{h}\n{rest}");
        // Not JSON.
        let e = replay(with_header(&header[..40]).as_bytes()).unwrap_err();
        assert!(matches!(e, ReplayError::NoHeader { .. }), "{e}");
        assert!(e.to_string().contains("not an engine log"), "{e}");
        // A domain's CPUs edited: the topology is not one its domains build.
        let edited = header.replacen("\"cpus\":\"0-7\"", "\"cpus\":\"0-6\"", 1);
        assert_ne!(edited, header);
        let e = replay(with_header(&edited).as_bytes()).unwrap_err();
        assert!(matches!(e, ReplayError::BadHeader { line: 1, .. }), "{e}");
        // Another version.
        let e = replay(with_header(&header.replace("\"version\":1", "\"version\":2")).as_bytes())
            .unwrap_err();
        assert!(matches!(e, ReplayError::Version { found: 2, .. }), "{e}");
        // A config the engine refuses.
        let e = replay(
            with_header(&header.replace("\"imbalance_pct\":25", "\"imbalance_pct\":0")).as_bytes(),
        )
        .unwrap_err();
        assert!(matches!(e, ReplayError::BadHeader { .. }), "{e}");
        // No header at all, or an empty file.
        assert!(matches!(
            replay(rest.as_bytes()),
            Err(ReplayError::NoHeader { .. })
        ));
        assert!(matches!(
            replay(&b""[..]),
            Err(ReplayError::NoHeader { .. })
        ));
    }

    #[test]
    fn steps_out_of_order_lines_after_the_end_and_a_partial_tail() {
        let dir = Dir::new("order");
        let path = dir.join("e.log");
        write_log(&path, DEFAULT_MAX_BYTES);
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        // Step 2 left out.
        let gap: Vec<&str> = lines
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != 3)
            .map(|(_, l)| *l)
            .collect();
        let e = replay((gap.join("\n") + "\n").as_bytes()).unwrap_err();
        assert!(matches!(e, ReplayError::Order { line: 4, .. }), "{e}");
        // A line after the end.
        let after = format!("{text}{}\n", lines[1]);
        assert!(matches!(
            replay(after.as_bytes()),
            Err(ReplayError::Order { .. })
        ));
        // A writer that died mid-line: the tail is left out and said.
        let body = &lines[..lines.len() - 1];
        let last = lines[lines.len() - 2];
        let partial = format!(
            "{}\n{}",
            body[..body.len() - 1].join("\n"),
            &last[..last.len() / 2]
        );
        let r = replay(partial.as_bytes()).unwrap();
        assert!(r.cut_tail && !r.ended);
        assert_eq!(r.steps, events().len() as u64 - 1);
        // A garbled line in the middle is an error, not a tail.
        let mid = format!(
            "{}\n{{\"step\":\n{}\n",
            lines[..3].join("\n"),
            lines[3..].join("\n")
        );
        assert!(matches!(
            replay(mid.as_bytes()),
            Err(ReplayError::Garbled { line: 4, .. })
        ));
    }

    #[test]
    fn every_topology_shape_rebuilds_exactly_from_its_header() {
        let shapes = [
            Topology::test(1, 1, 2, 1),
            Topology::test(2, 2, 2, 2),
            Topology::test(1, 4, 4, 1),
            Topology::test(2, 2, 2, 2)
                .restricted_to(&"1-5,9".parse().unwrap())
                .unwrap(),
        ];
        for topo in shapes {
            let engine = Engine::new(topo.clone(), Config::default()).unwrap();
            let header = Header {
                version: FORMAT_VERSION,
                pid: 1,
                segment: 0,
                body: "affinity".into(),
                policy: engine.config().policy,
                topology: topo.clone(),
                config: engine.config().clone(),
                max_bytes: DEFAULT_MAX_BYTES,
            };
            let json = serde_json::to_string(&header).unwrap();
            let back: Header = serde_json::from_str(&json).unwrap();
            let rebuilt = engine_of(&back, 1).unwrap();
            assert_eq!(rebuilt.topology(), &topo);
        }
    }

    #[test]
    fn the_log_refuses_a_symlink_and_takes_file_pid_beside_an_existing_file() {
        let dir = Dir::new("files");
        let engine = Engine::new(Topology::test(1, 1, 2, 1), Config::default()).unwrap();
        let target = dir.join("target");
        std::fs::write(&target, "keep").unwrap();
        let link = dir.join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        // FILE is a symlink: it exists, so FILE.PID is tried, and a
        // symlink planted there is refused too.
        let pid_link = dir.join(format!("link.{}", std::process::id()));
        std::os::unix::fs::symlink(&target, &pid_link).unwrap();
        assert!(EngineLog::create(&link, DEFAULT_MAX_BYTES, 1, &engine, "affinity").is_err());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        // An existing FILE: FILE.PID, then FILE.PID.ID for a second runtime.
        let file = dir.join("e.log");
        EngineLog::create(&file, DEFAULT_MAX_BYTES, 1, &engine, "affinity").unwrap();
        let second = EngineLog::create(&file, DEFAULT_MAX_BYTES, 1, &engine, "affinity").unwrap();
        assert_eq!(
            second.stats().path,
            format!("{}.{}", file.display(), std::process::id())
        );
        let third = EngineLog::create(&file, DEFAULT_MAX_BYTES, 7, &engine, "affinity").unwrap();
        assert_eq!(
            third.stats().path,
            format!("{}.{}.7", file.display(), std::process::id())
        );
    }
}
