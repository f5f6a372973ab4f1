//! A private `dfsched agent` for the co-thread workers of one benchmark.
//!
//! A real deployment of the co-thread policy runs with the coordinator
//! (`dfsched run` starts one on demand), so the benchmark measures co-thread
//! with one too: [`PrivateAgent::start`] makes a fresh directory (mode 0700)
//! under the temporary directory, starts `dfsched agent --foreground` on a
//! socket in it with [`dfsched::agent::spawn_detached`], and the benchmark
//! exports `DFSCHED_AGENT=<socket>` to co-thread workers only. A private
//! agent rather than the user's default one: the benchmark must not count
//! or steer processes that are not its own, and must leave nothing running.
//!
//! Invariants: the directory exists exactly while the guard does (it is
//! removed by [`PrivateAgent::stop`] or, on an error path, by `Drop`), and
//! the agent is asked to stop before its directory goes. The agent is also
//! given an idle exit ([`idle_exit_secs`]) longer than any gap between two
//! co-thread runs, so that a benchmark killed before it could stop the
//! agent (Ctrl-C, SIGKILL) does not leave it running for good. The agent is a
//! child of this process: stopping it also reaps it, so no `<defunct>`
//! process stays behind for the rest of the benchmark.

use super::CoParams;
use dfsched::agent::{AgentError, Client, SpawnOptions, SpawnedAgent};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The agent's tick (its pid and sharing scan), milliseconds: the
/// runtime's default balance interval, as `dfsched run` would use.
pub const AGENT_TICK_MS: u64 = 100;

/// The private agent's idle exit for `cases`, seconds: twice the longest
/// stretch of runs that can separate two co-thread runs (a round puts
/// co-thread first and the next one last: `2·modes − 1` runs of `seconds`
/// plus up to 5 s each to start and reap), plus a minute. Only a backstop
/// for a benchmark killed before its guard ran.
pub fn idle_exit_secs(cases: &[CoParams]) -> u64 {
    let longest = cases
        .iter()
        .map(|c| (2 * c.modes.len()) as f64 * (c.seconds + 5.0))
        .fold(0.0, f64::max);
    60 + (2.0 * longest).ceil() as u64
}

/// How long [`PrivateAgent::stop`] waits for the agent to exit.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// `--agent on|off`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AgentSetting {
    /// Co-thread workers share a private agent.
    #[default]
    On,
    /// Co-thread workers run with `DFSCHED_AGENT=off`.
    Off,
}

impl AgentSetting {
    /// The name on the command line and in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentSetting::On => "on",
            AgentSetting::Off => "off",
        }
    }
}

impl fmt::Display for AgentSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AgentSetting {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "on" => Ok(AgentSetting::On),
            "off" => Ok(AgentSetting::Off),
            other => Err(format!("unknown agent setting {other:?} (use on or off)")),
        }
    }
}

/// What the co-thread workers had, for the report. JSON: `{ setting,
/// running, pid, socket, failure }`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CoAgent {
    /// `--agent` as given.
    pub setting: AgentSetting,
    /// Whether a private agent served the co-thread workers.
    pub running: bool,
    /// The agent's pid, when it ran.
    pub pid: Option<u32>,
    /// Its socket (removed at the end), when it ran.
    pub socket: Option<PathBuf>,
    /// Why it did not run although asked for.
    pub failure: Option<String>,
}

impl CoAgent {
    /// `--agent off`.
    pub fn off() -> CoAgent {
        CoAgent {
            setting: AgentSetting::Off,
            running: false,
            pid: None,
            socket: None,
            failure: None,
        }
    }

    /// `--agent on`, with `agent` running.
    pub fn running(agent: &PrivateAgent) -> CoAgent {
        CoAgent {
            setting: AgentSetting::On,
            running: true,
            pid: Some(agent.pid()),
            socket: Some(agent.socket().to_path_buf()),
            failure: None,
        }
    }

    /// `--agent on` with no agent: `failure` says why (`None` when no
    /// co-thread mode needed one).
    pub fn not_started(failure: Option<String>) -> CoAgent {
        CoAgent {
            setting: AgentSetting::On,
            running: false,
            pid: None,
            socket: None,
            failure,
        }
    }

    /// The value of `DFSCHED_AGENT` for co-thread workers.
    pub fn env_value(&self) -> std::ffi::OsString {
        match (&self.socket, self.running) {
            (Some(s), true) => s.clone().into_os_string(),
            _ => "off".into(),
        }
    }

    /// The report's header line.
    pub fn describe(&self, modes: &[super::CoMode]) -> String {
        if !modes.contains(&super::CoMode::CoThread) {
            return format!("agent: {} (not used: no co-thread mode)", self.setting);
        }
        match (self.setting, self.running, &self.failure) {
            (AgentSetting::On, true, _) => format!(
                "agent: on (a private dfsched agent, pid {}, for the co-thread workers)",
                self.pid.map_or("?".into(), |p| p.to_string())
            ),
            (AgentSetting::On, false, Some(why)) => format!(
                "agent: on asked, but it could not start ({why}); co-thread workers ran with \
                 DFSCHED_AGENT=off"
            ),
            (AgentSetting::On, false, None) => {
                "agent: on asked, none running; co-thread workers ran with DFSCHED_AGENT=off".into()
            }
            (AgentSetting::Off, ..) => {
                "agent: off (co-thread workers ran with DFSCHED_AGENT=off)".into()
            }
        }
    }
}

/// A running private agent and its directory; stops both when dropped.
#[derive(Debug)]
pub struct PrivateAgent {
    dir: PathBuf,
    socket: PathBuf,
    agent: SpawnedAgent,
    done: bool,
}

impl PrivateAgent {
    /// Makes a fresh 0700 directory under the temporary directory and
    /// starts `dfsched_exe agent --foreground` on a socket in it, with an
    /// idle exit after `idle_exit_secs`; returns once it listens. On failure
    /// nothing is left behind.
    pub fn start(dfsched_exe: &Path, idle_exit_secs: u64) -> Result<PrivateAgent, AgentError> {
        let dir = fresh_private_dir(&std::env::temp_dir())?;
        let socket = dir.join("agent.sock");
        let options = SpawnOptions {
            tick_ms: AGENT_TICK_MS,
            idle_exit_secs: Some(idle_exit_secs),
            ..SpawnOptions::default()
        };
        match dfsched::agent::spawn_detached(dfsched_exe, &socket, &options) {
            Ok(agent) => Ok(PrivateAgent {
                dir,
                socket,
                agent,
                done: false,
            }),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }

    /// The socket co-thread workers connect to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The agent's pid.
    pub fn pid(&self) -> u32 {
        self.agent.pid()
    }

    /// Asks the agent to stop, waits for it to exit (and reaps it) and
    /// removes its directory. An error says what was left (the directory is removed
    /// whatever happened, so a stuck agent is left without a socket).
    pub fn stop(mut self) -> Result<(), AgentError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), AgentError> {
        if std::mem::replace(&mut self.done, true) {
            return Ok(());
        }
        let asked = Client::connect(&self.socket).and_then(|mut c| c.stop());
        let started = Instant::now();
        // Reaping as we wait: an exited agent leaves no zombie behind.
        let mut exited = || match self.agent.try_wait() {
            Ok(status) => status.is_some(),
            // Not ours to wait for after all (cannot happen for a child we
            // hold): judge by /proc as before.
            Err(_) => !process_running(self.agent.pid()),
        };
        let mut gone = exited();
        while !gone && started.elapsed() < STOP_TIMEOUT {
            std::thread::sleep(Duration::from_millis(5));
            gone = exited();
        }
        let still_running = !gone;
        let removed = std::fs::remove_dir_all(&self.dir);
        asked?;
        if still_running {
            return Err(AgentError::Setup(format!(
                "the private agent (pid {}) did not exit within {STOP_TIMEOUT:?} of being \
                 asked to stop",
                self.agent.pid()
            )));
        }
        removed.map_err(|e| AgentError::Io {
            path: self.dir.clone(),
            reason: e.to_string(),
        })
    }
}

impl Drop for PrivateAgent {
    fn drop(&mut self) {
        // An error path: the benchmark's own error is the one to report.
        let _ = self.shutdown();
    }
}

/// Whether `pid` is a process that has not exited (absent and zombie
/// processes are not running).
pub fn process_running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name in parentheses, which may
        // itself contain ") ".
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X')),
        Err(_) => false,
    }
}

/// Creates a new directory `dfsched-cothreads-PID-N` under `base`, mode
/// 0700, that did not exist before (so nobody else can have put anything
/// in it), and checks it is private.
fn fresh_private_dir(base: &Path) -> Result<PathBuf, AgentError> {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    for attempt in 0..100u32 {
        let dir = base.join(format!(
            "dfsched-cothreads-{}-{}",
            std::process::id(),
            nanos.wrapping_add(attempt)
        ));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {
                if let Err(e) = dfsched::agent::ensure_private_dir(&dir) {
                    let _ = std::fs::remove_dir(&dir);
                    return Err(e);
                }
                return Ok(dir);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(AgentError::Io {
                    path: dir,
                    reason: e.to_string(),
                })
            }
        }
    }
    Err(AgentError::Setup(format!(
        "no fresh directory name under {} after 100 tries",
        base.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn fresh_dirs_are_new_private_and_distinct() {
        let base = std::env::temp_dir();
        let a = fresh_private_dir(&base).unwrap();
        let b = fresh_private_dir(&base).unwrap();
        assert_ne!(a, b);
        for d in [&a, &b] {
            assert_eq!(std::fs::metadata(d).unwrap().mode() & 0o777, 0o700);
            std::fs::remove_dir(d).unwrap();
        }
    }

    #[test]
    fn a_missing_base_is_an_error_naming_the_path() {
        let e = fresh_private_dir(Path::new("/nonexistent-dfsched-base")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent-dfsched-base"), "{e}");
    }

    #[test]
    fn settings_parse_and_bad_ones_are_named() {
        assert_eq!("on".parse(), Ok(AgentSetting::On));
        assert_eq!(" off".parse(), Ok(AgentSetting::Off));
        let e = "maybe".parse::<AgentSetting>().unwrap_err();
        assert!(e.contains("\"maybe\"") && e.contains("on or off"), "{e}");
    }

    #[test]
    fn workers_get_the_socket_only_when_an_agent_runs() {
        assert_eq!(CoAgent::off().env_value(), "off");
        assert_eq!(CoAgent::not_started(Some("x".into())).env_value(), "off");
        let on = CoAgent {
            socket: Some("/tmp/d/agent.sock".into()),
            running: true,
            pid: Some(7),
            ..CoAgent::not_started(None)
        };
        assert_eq!(on.env_value(), "/tmp/d/agent.sock");
        let modes = [super::super::CoMode::CoThread];
        assert!(on.describe(&modes).starts_with("agent: on"));
        assert!(CoAgent::off().describe(&modes).starts_with("agent: off"));
        let failed = CoAgent::not_started(Some("no socket".into())).describe(&modes);
        assert!(failed.contains("no socket") && failed.contains("DFSCHED_AGENT=off"));
    }

    #[test]
    fn idle_exit_outlasts_the_longest_gap_between_co_thread_runs() {
        let short = CoParams::default();
        let long = CoParams {
            seconds: 100.0,
            ..CoParams::default()
        };
        // 4 modes: 8 runs of 4 s + 5 s = 72 s, doubled, plus a minute.
        assert_eq!(idle_exit_secs(std::slice::from_ref(&short)), 60 + 144);
        assert!(idle_exit_secs(&[short, long]) > 2 * 7 * 100);
    }

    #[test]
    fn this_process_runs_and_a_missing_one_does_not() {
        assert!(process_running(std::process::id()));
        assert!(!process_running(u32::MAX));
    }
}
