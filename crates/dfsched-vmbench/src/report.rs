//! What the guest reports over the serial console, and how the host reads
//! it back.
//!
//! Each record is one line: the run's marker (a nonce the host put in the
//! guest's `/init`), a space, and one JSON [`Record`]. Anything else on the
//! console (kernel messages, a panic) is kept for the log and otherwise
//! ignored, so a line is taken as a result only when it carries this run's
//! marker.
//!
//! Invariant: a run passes only if it printed `Begin` for the expected
//! preset, at least one check, no failed check, and `End` whose counts equal
//! the checks seen ([`Outcome::verdict`]).

use serde::{Deserialize, Serialize};

/// One line of the guest's report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    /// The plan started on this preset.
    Begin {
        /// The preset's name.
        preset: String,
    },
    /// One check's result.
    Check {
        /// What it checks (a stable name).
        name: String,
        /// Whether it held.
        ok: bool,
        /// What was seen: the masks read back, the error.
        detail: String,
        /// Set when the check is known to fail today (why, and where that
        /// is tracked): its failure is reported but does not fail the run,
        /// and its passing does, so that the mark is removed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        known_failure: Option<String>,
        /// Files it sent before this record ([`crate::artifact`]), judged
        /// by the host.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        artifacts: Vec<crate::artifact::ArtifactRef>,
    },
    /// One piece of a file a check sends to the host (base64), before its
    /// `Check` record ([`crate::artifact`]).
    Chunk {
        /// The file's name (`CHECK/FILE`).
        artifact: String,
        /// The piece's place, from 0.
        seq: u32,
        /// The piece, base64.
        data: String,
    },
    /// The plan ran to its end.
    End {
        /// Checks that held.
        passed: u32,
        /// Checks that failed.
        failed: u32,
    },
}

impl Record {
    /// The console line for this record.
    pub fn line(&self, marker: &str) -> String {
        format!(
            "{marker} {}",
            serde_json::to_string(self).expect("a record serialises")
        )
    }
}

/// One check as the guest reported it.
#[derive(Clone, Debug, PartialEq)]
pub struct Seen {
    /// Its name.
    pub name: String,
    /// Whether it held: the guest said so and the host's judgement of
    /// what it sent ([`crate::artifact::judge`]) agreed.
    pub ok: bool,
    /// Whether the guest said it held (what its `End` counts).
    pub guest_ok: bool,
    /// What it saw.
    pub detail: String,
    /// Its known-failure mark, if any.
    pub known_failure: Option<String>,
}

/// Everything one boot reported.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// The preset named by `Begin`, if it came.
    pub begun: Option<String>,
    /// The checks, in order.
    pub checks: Vec<Seen>,
    /// The file pieces seen so far ([`crate::artifact`]).
    pub received: crate::artifact::Received,
    /// `End`'s counts, if it came.
    pub end: Option<(u32, u32)>,
}

impl Outcome {
    /// Takes one console line; returns whether it was a record of `marker`.
    pub fn take_line(&mut self, marker: &str, line: &str) -> bool {
        // The console may prefix a line with a carriage return or kernel
        // noise; the marker is unique, so look for it anywhere.
        let Some(at) = line.find(marker) else {
            return false;
        };
        let json = line[at + marker.len()..].trim();
        match serde_json::from_str::<Record>(json) {
            Ok(Record::Begin { preset }) => self.begun = Some(preset),
            Ok(Record::Check {
                name,
                ok,
                mut detail,
                known_failure,
                artifacts,
            }) => {
                // The host's own verdict on what the check sent: a replay
                // that differs, or a log that never came, fails it.
                let guest_ok = ok;
                let ok = match crate::artifact::judge(&self.received, &name, ok, &artifacts) {
                    Ok(said) => {
                        if !said.is_empty() {
                            detail = format!("{detail}; host: {said}");
                        }
                        ok
                    }
                    Err(why) => {
                        detail = format!("{detail}; HOST: {why}");
                        false
                    }
                };
                self.checks.push(Seen {
                    name,
                    ok,
                    guest_ok,
                    detail,
                    known_failure,
                })
            }
            Ok(Record::Chunk {
                artifact,
                seq,
                data,
            }) => self.received.chunk(artifact, seq, data),
            Ok(Record::End { passed, failed }) => self.end = Some((passed, failed)),
            Err(e) => self.checks.push(Seen {
                name: "report-line".into(),
                ok: false,
                guest_ok: false,
                detail: format!("unreadable record {json:?}: {e}"),
                known_failure: None,
            }),
        }
        true
    }

    /// Checks that held.
    pub fn passed(&self) -> u32 {
        self.checks.iter().filter(|c| c.ok).count() as u32
    }

    /// `Ok` if the run passed on `preset`, else every reason it did not.
    pub fn verdict(&self, preset: &str) -> Result<(), String> {
        let mut why = Vec::new();
        match &self.begun {
            None => why.push("the plan never started (no Begin record)".to_string()),
            Some(p) if p != preset => why.push(format!("the plan ran preset {p}, not {preset}")),
            Some(_) => {}
        }
        for c in &self.checks {
            match (&c.known_failure, c.ok) {
                (None, false) => why.push(format!("check {} failed: {}", c.name, c.detail)),
                (Some(k), true) => why.push(format!(
                    "check {} passed but is marked as a known failure ({k}): remove the mark",
                    c.name
                )),
                _ => {}
            }
        }
        if self.checks.is_empty() {
            why.push("no check ran".into());
        }
        // The guest's End counts what the guest said of its checks (a
        // report line that did not parse counts as one it never printed).
        let printed = self.checks.iter().filter(|c| c.name != "report-line");
        let guest_passed = printed.clone().filter(|c| c.guest_ok).count() as u32;
        let failed = printed.count() as u32 - guest_passed;
        match self.end {
            None => why.push("the plan did not reach its end (no End record)".into()),
            Some(end) if end != (guest_passed, failed) => why.push(format!(
                "End says {end:?} passed/failed, the console showed ({guest_passed}, {failed})"
            )),
            Some(_) => {}
        }
        if why.is_empty() {
            Ok(())
        } else {
            Err(why.join("\n"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(lines: &[String]) -> Outcome {
        let mut o = Outcome::default();
        for l in lines {
            o.take_line("MK", l);
        }
        o
    }

    #[test]
    fn a_complete_run_passes_and_noise_is_ignored() {
        let o = run(&[
            "[    1.0] kernel noise".into(),
            Record::Begin { preset: "p".into() }.line("MK"),
            format!(
                "\r{}",
                Record::Check {
                    name: "a".into(),
                    ok: true,
                    detail: String::new(),
                    known_failure: None,
                    artifacts: Vec::new(),
                }
                .line("MK")
            ),
            Record::End {
                passed: 1,
                failed: 0,
            }
            .line("MK"),
        ]);
        assert_eq!(o.verdict("p"), Ok(()));
    }

    #[test]
    fn a_failed_check_a_missing_end_or_a_wrong_preset_fails() {
        let begin = Record::Begin { preset: "p".into() }.line("MK");
        let bad = Record::Check {
            name: "a".into(),
            ok: false,
            detail: "x".into(),
            known_failure: None,
            artifacts: Vec::new(),
        }
        .line("MK");
        let good = Record::Check {
            name: "b".into(),
            ok: true,
            detail: String::new(),
            known_failure: None,
            artifacts: Vec::new(),
        }
        .line("MK");
        let end = Record::End {
            passed: 1,
            failed: 1,
        }
        .line("MK");
        assert!(
            run(&[begin.clone(), bad.clone(), good.clone(), end.clone()])
                .verdict("p")
                .unwrap_err()
                .contains("check a failed")
        );
        let no_end = run(&[begin.clone(), good.clone()])
            .verdict("p")
            .unwrap_err();
        assert!(no_end.contains("did not reach its end"), "{no_end}");
        assert!(run(&[
            begin.clone(),
            good.clone(),
            Record::End {
                passed: 1,
                failed: 0
            }
            .line("MK")
        ])
        .verdict("q")
        .unwrap_err()
        .contains("not q"));
        assert!(run(&[]).verdict("p").unwrap_err().contains("never started"));
    }

    #[test]
    fn a_known_failure_fails_the_run_only_when_it_passes() {
        let begin = Record::Begin { preset: "p".into() }.line("MK");
        let check = |ok| {
            Record::Check {
                name: "k".into(),
                ok,
                detail: String::new(),
                known_failure: Some("tracked".into()),
                artifacts: Vec::new(),
            }
            .line("MK")
        };
        let failing = run(&[
            begin.clone(),
            check(false),
            Record::End {
                passed: 0,
                failed: 1,
            }
            .line("MK"),
        ]);
        assert_eq!(failing.verdict("p"), Ok(()));
        let passing = run(&[
            begin,
            check(true),
            Record::End {
                passed: 1,
                failed: 0,
            }
            .line("MK"),
        ]);
        assert!(passing
            .verdict("p")
            .unwrap_err()
            .contains("remove the mark"));
    }

    #[test]
    fn a_record_of_another_marker_is_not_taken() {
        let o = run(&[Record::Begin { preset: "p".into() }.line("OTHER")]);
        assert!(o.begun.is_none());
    }

    #[test]
    fn a_check_whose_engine_log_never_arrived_fails_on_the_host_alone() {
        let (chunks, r) = crate::artifact::split("scx-engine-replay/engine.log", b"x\n");
        let begin = Record::Begin { preset: "p".into() }.line("MK");
        let check = Record::Check {
            name: "scx-engine-replay".into(),
            ok: true,
            detail: "guest ok".into(),
            known_failure: None,
            artifacts: vec![r],
        }
        .line("MK");
        let end = Record::End {
            passed: 1,
            failed: 0,
        }
        .line("MK");
        // The chunk never came: the host fails the check the guest passed,
        // and the guest's End still matches what the guest printed.
        let o = run(&[begin.clone(), check.clone(), end.clone()]);
        let why = o.verdict("p").unwrap_err();
        assert!(
            why.contains("HOST: scx-engine-replay/engine.log: 0 of its 1 chunks arrived"),
            "{why}"
        );
        assert!(!why.contains("End says"), "{why}");
        // It came, but is no engine log: not replayable.
        let chunk = Record::Chunk {
            artifact: "scx-engine-replay/engine.log".into(),
            seq: 0,
            data: chunks[0].clone(),
        }
        .line("MK");
        let why = run(&[begin, chunk, check, end]).verdict("p").unwrap_err();
        assert!(why.contains("not replayable on the host"), "{why}");
    }
}
