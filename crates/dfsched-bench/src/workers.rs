//! Worker processes steered over pipes, shared by `bench cothreads` and
//! `bench spin`.
//!
//! ```text
//!  start(cmd) × N   each with stdin and stdout piped
//!  ready_go()       read "ready" from every worker (all at their gates),
//!                   then write "go" to each in turn
//!  finish()         per worker: close its stdin (stops an until-EOF worker,
//!                   harmless to a timed one), read one JSON line, wait for
//!                   exit status 0
//! ```
//!
//! Starting every worker before telling any to go keeps the timed parts
//! together: no worker works while another is still starting.
//!
//! Invariant: [`Workers`] kills and reaps every child still running when
//! dropped, so an error at any step (or a panic) leaves no worker behind
//! and no zombie. Errors are [`WorkerError`]s naming the worker (its index
//! and the `what` it was started as); each benchmark wraps them in its own
//! error type and checks the results' contents itself.

use serde::de::DeserializeOwned;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};

/// Why a worker process failed. The benchmark adds its own context.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The process could not be started.
    #[error("could not start {what} ({program})")]
    Start {
        /// Its index among the workers.
        index: usize,
        /// What it is (`worker process 2`, `the background load`).
        what: String,
        /// The program.
        program: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// It broke the protocol, failed or ended early.
    #[error("{what} failed: {detail}")]
    Failed {
        /// Its index among the workers.
        index: usize,
        /// What it is.
        what: String,
        /// What the parent saw.
        detail: String,
    },
}

/// One started process and its pipes.
struct Worker {
    what: String,
    child: Child,
    stdin: Option<ChildStdin>,
    out: BufReader<ChildStdout>,
}

/// Started worker processes; kills and reaps those still running on drop.
pub struct Workers {
    workers: Vec<Worker>,
    /// Says what an exit status means (a benchmark may know more about its
    /// own launcher's statuses than "see stderr").
    explain: fn(ExitStatus) -> String,
}

/// The default explanation of an exit status.
pub fn explain_status(status: ExitStatus) -> String {
    format!("{status}; its own message, if any, is on stderr above")
}

impl Workers {
    /// None yet; exit statuses explained by `explain` (e.g.
    /// [`explain_status`]).
    pub fn new(explain: fn(ExitStatus) -> String) -> Workers {
        Workers {
            workers: Vec::new(),
            explain,
        }
    }

    /// How many were started.
    pub fn len(&self) -> usize {
        self.workers.len()
    }

    /// The process id of worker `index` (for a watchdog that may have to
    /// kill it; valid until the worker is reaped, which only `finish` or
    /// the drop does).
    pub fn pid(&self, index: usize) -> u32 {
        self.workers[index].child.id()
    }

    /// Whether none was started.
    pub fn is_empty(&self) -> bool {
        self.workers.is_empty()
    }

    /// Starts `cmd` with stdin and stdout piped (stderr inherited: a
    /// worker's own message goes straight to the user) as `what`.
    pub fn start(&mut self, mut cmd: Command, what: String) -> Result<(), WorkerError> {
        let index = self.workers.len();
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|source| WorkerError::Start {
                index,
                what: what.clone(),
                program: cmd.get_program().to_string_lossy().into_owned(),
                source,
            })?;
        let stdin = child.stdin.take();
        let out = BufReader::new(child.stdout.take().expect("stdout is piped"));
        self.workers.push(Worker {
            what,
            child,
            stdin,
            out,
        });
        Ok(())
    }

    /// An error about worker `index`, for a benchmark's own checks of its
    /// result.
    pub fn failed(&self, index: usize, detail: String) -> WorkerError {
        WorkerError::Failed {
            index,
            what: self.workers[index].what.clone(),
            detail,
        }
    }

    /// Why worker `index`'s output ended: its exit status, explained.
    fn ended(&mut self, index: usize, before: &str) -> WorkerError {
        let detail = match self.workers[index].child.wait() {
            Ok(status) => format!("it ended before {before} ({})", (self.explain)(status)),
            Err(e) => format!("it ended before {before} (waiting for it: {e})"),
        };
        self.failed(index, detail)
    }

    /// Reads one trimmed line of worker `index`; `None` at the end of its
    /// output.
    fn line(&mut self, index: usize) -> Result<Option<String>, WorkerError> {
        let mut line = String::new();
        match self.workers[index].out.read_line(&mut line) {
            Ok(0) => Ok(None),
            Ok(_) => Ok(Some(line.trim().to_string())),
            Err(e) => Err(self.failed(index, format!("reading its output: {e}"))),
        }
    }

    /// Waits until every worker has said "ready", then tells each "go".
    pub fn ready_go(&mut self) -> Result<(), WorkerError> {
        for i in 0..self.workers.len() {
            match self.line(i)? {
                Some(l) if l == "ready" => {}
                Some(l) => return Err(self.failed(i, format!("it said {l:?} instead of ready"))),
                None => return Err(self.ended(i, "saying ready")),
            }
        }
        for i in 0..self.workers.len() {
            let stdin = self.workers[i]
                .stdin
                .as_mut()
                .expect("stdin is piped until finish");
            let sent = writeln!(stdin, "go").and_then(|()| stdin.flush());
            sent.map_err(|e| self.failed(i, format!("telling it to go: {e}")))?;
        }
        Ok(())
    }

    /// Per worker in turn: closes its stdin, reads its one JSON result line
    /// and waits for exit status 0. The results in the workers' order.
    pub fn finish<T: DeserializeOwned>(&mut self) -> Result<Vec<T>, WorkerError> {
        (0..self.workers.len())
            .map(|i| self.finish_one(i))
            .collect()
    }

    fn finish_one<T: DeserializeOwned>(&mut self, i: usize) -> Result<T, WorkerError> {
        drop(self.workers[i].stdin.take());
        let Some(line) = self.line(i)? else {
            return Err(self.ended(i, "reporting"));
        };
        let r: T = serde_json::from_str(&line)
            .map_err(|e| self.failed(i, format!("its result {line:?} is not JSON: {e}")))?;
        let status = self.workers[i]
            .child
            .wait()
            .map_err(|e| self.failed(i, format!("waiting for it: {e}")))?;
        if !status.success() {
            return Err(self.failed(i, (self.explain)(status)));
        }
        Ok(r)
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for w in &mut self.workers {
            if matches!(w.child.try_wait(), Ok(None)) {
                let _ = w.child.kill();
            }
            let _ = w.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker played by the shell (`exec` where it waits, so the kill
    /// reaches the waiting program itself).
    fn sh(script: &str) -> Command {
        let mut c = Command::new("/bin/sh");
        c.args(["-c", script]);
        c
    }

    const GOOD: &str = r#"echo ready; read l; [ "$l" = go ] && echo '{"n": 7}'"#;

    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct R {
        n: u32,
    }

    /// Whether `pid` is gone altogether: reaped, not running and not a
    /// zombie.
    fn reaped(pid: u32) -> bool {
        std::fs::metadata(format!("/proc/{pid}")).is_err()
    }

    #[test]
    fn every_worker_hears_go_after_all_are_ready_and_results_come_in_order() {
        let mut w = Workers::new(explain_status);
        // Each reports its index, so the order of the results shows.
        for i in 0..3 {
            let script = format!(r#"echo ready; read l; [ "$l" = go ] && echo '{{"n": {i}}}'"#);
            w.start(sh(&script), format!("worker process {i}")).unwrap();
        }
        assert_eq!(w.len(), 3);
        w.ready_go().unwrap();
        let r: Vec<R> = w.finish().unwrap();
        assert_eq!(r, [R { n: 0 }, R { n: 1 }, R { n: 2 }]);
    }

    #[test]
    fn protocol_breaks_name_the_worker_and_what_it_did() {
        let err = |script: &str| {
            let mut w = Workers::new(explain_status);
            w.start(sh(GOOD), "worker process 0".into()).unwrap();
            w.start(sh(script), "worker process 1".into()).unwrap();
            match w.ready_go().and_then(|()| w.finish::<R>().map(drop)) {
                Err(WorkerError::Failed { index, detail, .. }) => (index, detail),
                other => panic!("expected a failure, got {other:?}"),
            }
        };
        let (i, d) = err("echo hello");
        assert_eq!((i, d.as_str()), (1, r#"it said "hello" instead of ready"#));
        let (i, d) = err("exit 3");
        assert_eq!(i, 1);
        assert!(
            d.starts_with("it ended before saying ready (exit status: 3"),
            "{d}"
        );
        let (i, d) = err("echo ready; read l; echo nonsense");
        assert_eq!(i, 1);
        assert!(d.starts_with(r#"its result "nonsense" is not JSON"#), "{d}");
        let (i, d) = err(r#"echo ready; read l; echo '{"n": 1}'; exit 4"#);
        assert_eq!(i, 1);
        assert!(d.starts_with("exit status: 4"), "{d}");
        let (i, d) = err("echo ready; read l");
        assert_eq!(i, 1);
        assert!(
            d.starts_with("it ended before reporting (exit status: 0"),
            "{d}"
        );
    }

    #[test]
    fn a_program_that_cannot_start_is_named_and_the_others_are_reaped() {
        let mut w = Workers::new(explain_status);
        w.start(sh("echo ready; exec sleep 600"), "worker process 0".into())
            .unwrap();
        let pid = w.workers[0].child.id();
        let e = w
            .start(Command::new("/no/such/worker"), "worker process 1".into())
            .unwrap_err();
        assert!(matches!(e, WorkerError::Start { index: 1, .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "could not start worker process 1 (/no/such/worker)"
        );
        drop(w);
        assert!(
            reaped(pid),
            "worker {pid} left behind (running or a zombie)"
        );
    }

    #[test]
    fn dropping_mid_run_kills_and_reaps_every_worker() {
        let mut w = Workers::new(explain_status);
        for i in 0..2 {
            w.start(sh("echo ready; read l; exec sleep 600"), format!("w{i}"))
                .unwrap();
        }
        w.ready_go().unwrap();
        let pids: Vec<u32> = w.workers.iter().map(|x| x.child.id()).collect();
        drop(w);
        for pid in pids {
            assert!(
                reaped(pid),
                "worker {pid} left behind (running or a zombie)"
            );
        }
    }

    #[test]
    fn a_custom_explanation_is_used_for_exit_statuses() {
        fn explain(s: ExitStatus) -> String {
            format!("launcher said {}", s.code().unwrap_or(-1))
        }
        let mut w = Workers::new(explain);
        w.start(sh("exit 125"), "w".into()).unwrap();
        let e = w.ready_go().unwrap_err();
        assert_eq!(
            e.to_string(),
            "w failed: it ended before saying ready (launcher said 125)"
        );
    }
}
