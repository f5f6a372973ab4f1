//! The sched_ext body's client: when dfsched's BPF scheduler (`crates/dfsched-scx`, loaded by the
//! root-run `dfsched-scx run`) is the kernel's scheduler, the runtime gives its threads the
//! `SCHED_EXT` policy and sends the engine's placements to that scheduler's control socket instead
//! of narrowing the threads' affinity masks. The scheduler then keeps each thread on its group's home
//! and runs a group's threads in succession there; the masks stay as the program set them.
//!
//! ```text
//!  engine ── Place {task, cpus} ──► group of task? ─ yes ─► {"op":"group",group,home:cpus} (when changed)
//!                                                          {"op":"place",tid,group}
//!                                                 └ no ──► {"op":"unplace",tid}   (the shared queue)
//!         ── GroupReclaimed {g} ──► {"op":"reclaim",group:g}
//! ```
//!
//! The policy: when the process's policy was not chosen (no `DFSCHED_POLICY`, no process rule:
//! [`crate::RuntimeConfig::scx_policy`]), the runtime's first request is `{"op":"state"}`, and a
//! `policy` in the answer (`dfsched scx --policy co-thread`) becomes the process's policy before its
//! engine starts (`scx_policy` in the stats says so).
//!
//! (`GroupMoved`, `GroupSplit` and `TaskMoved` come with the `Place` decisions of the threads they
//! move, so the `Place`s carry them.) The wire format is `crates/dfsched-scx/src/proto.rs`'s; the
//! example lines of its doc are checked here too.
//!
//! When: `DFSCHED_SCX` (see [`crate::config`]): `auto` (the default) uses the default socket when
//! `/sys/kernel/sched_ext/root/ops` reads `dfsched` and `state` reads `enabled`; `off` never; a path
//! uses that socket.
//!
//! Trust and time: the server must be root's (`SO_PEERCRED` of the socket says uid 0), else the link
//! is refused; every exchange has [`TIMEOUT`] for its write and for its answer. A link that fails is
//! dropped for good: the runtime counts it and goes back to placing by affinity (the thread's next
//! placement reads its mask back, finds it wide and re-places it).

use dfsched_core::{CpuSet, GroupId};
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where `dfsched-scx run` listens by default.
pub const DEFAULT_SOCKET: &str = "/run/dfsched-scx/sock";

/// The name dfsched's BPF scheduler registers (`ops.name`).
pub const OPS_NAME: &str = "dfsched";

/// The budget of one write and of one answer. A request is a map write in the server's main loop,
/// which polls every 100 ms: 2 s is long against that, and bounds what a stalled server costs a hint
/// (the runtime's lock is held meanwhile) before the link is dropped.
pub const TIMEOUT: Duration = Duration::from_secs(2);

/// Whether and where to reach the sched_ext scheduler (`DFSCHED_SCX`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ScxMode {
    /// The default socket, when the kernel's sched_ext scheduler is dfsched's.
    #[default]
    Auto,
    /// Never: place by affinity.
    Off,
    /// This socket (the scheduler is taken as active).
    Socket(PathBuf),
}

impl ScxMode {
    /// Parses `auto`, `off` or an absolute path.
    pub fn parse(value: &str) -> Result<ScxMode, String> {
        match value {
            "auto" => Ok(ScxMode::Auto),
            "off" => Ok(ScxMode::Off),
            p if p.starts_with('/') => Ok(ScxMode::Socket(PathBuf::from(p))),
            _ => Err("auto, off or an absolute socket path".into()),
        }
    }

    /// The socket to use, if any: for `Auto`, only when `sysfs_root`'s
    /// `sys/kernel/sched_ext` says dfsched's scheduler is enabled.
    pub fn socket(&self, sysfs_root: &Path) -> Option<PathBuf> {
        match self {
            ScxMode::Off => None,
            ScxMode::Socket(p) => Some(p.clone()),
            ScxMode::Auto => {
                let dir = sysfs_root.join("sys/kernel/sched_ext");
                let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
                (read("state").trim() == "enabled" && read("root/ops").trim() == OPS_NAME)
                    .then(|| PathBuf::from(DEFAULT_SOCKET))
            }
        }
    }
}

/// The body that carries out the engine's placements.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Body {
    /// Affinity masks (`sched_setaffinity`): the kernel's own scheduler orders the threads.
    #[default]
    Affinity,
    /// dfsched's sched_ext scheduler: groups run in succession on their homes.
    Scx,
}

impl Body {
    /// The body of a runtime whose placements go to the sched_ext scheduler (`scx_body`, the
    /// stats' flag) or not.
    pub fn of_scx_flag(scx_body: bool) -> Body {
        if scx_body {
            Body::Scx
        } else {
            Body::Affinity
        }
    }

    /// Whether this is the affinity body: what a runtime that names no body means (an older one,
    /// or one that leaves the field out because it is the default; `agent/top.rs`).
    pub fn is_affinity(&self) -> bool {
        *self == Body::Affinity
    }
}

impl std::fmt::Display for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Body::Affinity => "affinity",
            Body::Scx => "scx",
        })
    }
}

/// The kernel's sched_ext as `sys/kernel/sched_ext` under a sysfs root shows it, and the body a
/// program starting now with a given [`ScxMode`] would use (for `dfsched topology`).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct BodyView {
    /// The body a program starting now would use (before it reaches the socket: a scheduler
    /// that cannot be reached then leaves it with affinity).
    pub active: Body,
    /// `sys/kernel/sched_ext/state` (`enabled`, `disabled`, …), or `none` when the kernel has
    /// no sched_ext.
    pub sched_ext: String,
    /// `root/ops`: the loaded scheduler's name (empty when none).
    pub ops: String,
    /// The socket placements would go to, under the scx body.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socket: Option<PathBuf>,
}

impl BodyView {
    /// Reads `sysfs_root`'s sched_ext and applies `mode` to it.
    pub fn read(sysfs_root: &Path, mode: &ScxMode) -> BodyView {
        let dir = sysfs_root.join("sys/kernel/sched_ext");
        let read = |f: &str| {
            std::fs::read_to_string(dir.join(f))
                .ok()
                .map(|s| s.trim().to_string())
        };
        let socket = mode.socket(sysfs_root);
        BodyView {
            active: if socket.is_some() {
                Body::Scx
            } else {
                Body::Affinity
            },
            sched_ext: read("state").unwrap_or_else(|| "none".into()),
            ops: read("root/ops").unwrap_or_default(),
            socket,
        }
    }
}

/// Why an exchange with the scheduler failed.
#[derive(Debug, thiserror::Error)]
pub enum ScxError {
    /// The socket could not be reached, written or read in time.
    #[error("sched_ext scheduler socket {path}: {source}")]
    Io {
        /// The socket.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The server is not root's.
    #[error("sched_ext scheduler socket {path} is served by uid {uid}, not root: refused")]
    NotRoot {
        /// The socket.
        path: PathBuf,
        /// Its server's uid.
        uid: u32,
    },
    /// The scheduler refused the request.
    #[error("the sched_ext scheduler refused {request}: {why}")]
    Refused {
        /// The request line.
        request: String,
        /// Its answer.
        why: String,
    },
    /// `sched_setscheduler(SCHED_EXT)` failed.
    #[error("{0}")]
    Policy(crate::error::Error),
}

/// Group keys on the wire: the engine's group ids as they are.
fn key(group: GroupId) -> u64 {
    group.0
}

/// One connection to the scheduler, with what was already sent on it. The scheduler ties the
/// groups to the connection: they end when it closes (the process exits).
pub struct ScxLink {
    path: PathBuf,
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    /// The home last sent per group, so a group's home is written only when it changes.
    homes: BTreeMap<u64, CpuSet>,
    /// Threads given SCHED_EXT (by tid).
    ext: BTreeSet<u64>,
    /// Requests answered `ok`.
    pub requests: u64,
}

impl ScxLink {
    /// Connects to `path` and checks that root serves it.
    pub fn connect(path: &Path) -> Result<ScxLink, ScxError> {
        let io = |source| ScxError::Io {
            path: path.to_path_buf(),
            source,
        };
        let stream = UnixStream::connect(path).map_err(io)?;
        let (_, uid) = crate::agent::sock::peer_cred(&stream).map_err(io)?;
        if uid != 0 {
            return Err(ScxError::NotRoot {
                path: path.to_path_buf(),
                uid,
            });
        }
        stream.set_read_timeout(Some(TIMEOUT)).map_err(io)?;
        stream.set_write_timeout(Some(TIMEOUT)).map_err(io)?;
        let writer = stream.try_clone().map_err(io)?;
        Ok(ScxLink {
            path: path.to_path_buf(),
            reader: BufReader::new(stream),
            writer,
            homes: BTreeMap::new(),
            ext: BTreeSet::new(),
            requests: 0,
        })
    }

    fn request(&mut self, line: serde_json::Value) -> Result<serde_json::Value, ScxError> {
        let io = |source| ScxError::Io {
            path: self.path.clone(),
            source,
        };
        let mut text = line.to_string();
        text.push('\n');
        self.writer.write_all(text.as_bytes()).map_err(io)?;
        let mut answer = String::new();
        match self.reader.read_line(&mut answer) {
            Ok(0) => return Err(io(std::io::ErrorKind::UnexpectedEof.into())),
            Ok(_) => {}
            Err(e) => return Err(io(e)),
        }
        let reply: serde_json::Value =
            serde_json::from_str(&answer).map_err(|e| ScxError::Refused {
                request: text.trim().to_string(),
                why: format!("unreadable answer {answer:?}: {e}"),
            })?;
        if reply["ok"] == true {
            self.requests += 1;
            Ok(reply)
        } else {
            Err(ScxError::Refused {
                request: text.trim().to_string(),
                why: reply["error"].as_str().unwrap_or("no reason").to_string(),
            })
        }
    }

    /// Carries out `Place { tid, cpus }` for a thread in `group` (or in none): the thread gets
    /// SCHED_EXT (once), its group the home `cpus` (when it changed), and the thread the group.
    /// `sys` makes the policy call (the kernel, or a test's fake).
    pub fn place(
        &mut self,
        sys: &dyn crate::sys::SysOps,
        tid: u64,
        group: Option<GroupId>,
        cpus: &CpuSet,
    ) -> Result<(), ScxError> {
        if !self.ext.contains(&tid) {
            sys.set_sched_ext(tid).map_err(ScxError::Policy)?;
            self.ext.insert(tid);
        }
        let Some(group) = group else {
            return self
                .request(serde_json::json!({"op": "unplace", "tid": tid}))
                .map(drop);
        };
        let g = key(group);
        if self.homes.get(&g) != Some(cpus) {
            self.request(serde_json::json!({"op": "group", "group": g, "home": cpus.to_string()}))?;
            self.homes.insert(g, cpus.clone());
        }
        self.request(serde_json::json!({"op": "place", "tid": tid, "group": g}))
            .map(drop)
    }

    /// The scheduler's state (the `state` of its answer to `{"op":"state"}`: counters, groups with
    /// their homes and threads, mode, policy), for `dfsched scx`'s view.
    pub fn state(&mut self) -> Result<serde_json::Value, ScxError> {
        let mut reply = self.request(serde_json::json!({"op": "state"}))?;
        Ok(reply["state"].take())
    }

    /// The policy the scheduler offers its clients (`dfsched scx --policy`: the `policy` of its
    /// state), by name; `None` when it offers none. A scheduler that refuses the request (one
    /// from before the offer existed would not) offers none; an I/O error is an error.
    pub fn offered_policy(&mut self) -> Result<Option<String>, ScxError> {
        match self.request(serde_json::json!({"op": "state"})) {
            Ok(reply) => Ok(reply["state"]["policy"].as_str().map(str::to_string)),
            Err(ScxError::Refused { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Carries out `GroupReclaimed { group }`.
    pub fn reclaim(&mut self, group: GroupId) -> Result<(), ScxError> {
        let g = key(group);
        if self.homes.remove(&g).is_none() {
            return Ok(()); // never sent: nothing to end
        }
        self.request(serde_json::json!({"op": "reclaim", "group": g}))
            .map(drop)
    }

    /// Forgets thread `tid` (it exited; the scheduler drops its entry itself).
    pub fn forget(&mut self, tid: u64) {
        self.ext.remove(&tid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dfsched_premise as test_premise;
    use std::os::unix::net::UnixListener;

    /// A fresh directory of ours under the system temp dir, named `prefix`
    /// and random letters (never one another user could have made first),
    /// removed on drop.
    fn scratch(prefix: &str) -> tempfile::TempDir {
        tempfile::Builder::new().prefix(prefix).tempdir().unwrap()
    }

    #[test]
    fn auto_uses_the_socket_only_when_dfscheds_scheduler_is_enabled() {
        let tmp = scratch("dfsched-scx-mode-");
        let root = tmp.path();
        let dir = root.join("sys/kernel/sched_ext");
        std::fs::create_dir_all(dir.join("root")).unwrap();
        let set = |state: &str, ops: &str| {
            std::fs::write(dir.join("state"), format!("{state}\n")).unwrap();
            std::fs::write(dir.join("root/ops"), format!("{ops}\n")).unwrap();
        };
        set("enabled", "dfsched");
        assert_eq!(
            ScxMode::Auto.socket(root),
            Some(PathBuf::from(DEFAULT_SOCKET))
        );
        set("enabled", "simple");
        assert_eq!(ScxMode::Auto.socket(root), None, "another scheduler");
        set("disabled", "dfsched");
        assert_eq!(ScxMode::Auto.socket(root), None);
        assert_eq!(ScxMode::Off.socket(root), None);
        assert_eq!(ScxMode::Auto.socket(Path::new("/nonexistent")), None);
    }

    #[test]
    fn the_body_view_says_scx_only_when_dfscheds_scheduler_is_enabled() {
        let tmp = scratch("dfsched-scx-body-");
        let root = tmp.path();
        let v = BodyView::read(root, &ScxMode::Auto);
        assert_eq!((v.active, v.sched_ext.as_str()), (Body::Affinity, "none"));
        let dir = root.join("sys/kernel/sched_ext");
        std::fs::create_dir_all(dir.join("root")).unwrap();
        std::fs::write(dir.join("state"), "enabled\n").unwrap();
        std::fs::write(dir.join("root/ops"), "dfsched\n").unwrap();
        let v = BodyView::read(root, &ScxMode::Auto);
        assert_eq!(v.active, Body::Scx);
        assert_eq!(v.socket.as_deref(), Some(Path::new(DEFAULT_SOCKET)));
        let json = serde_json::to_value(&v).unwrap();
        assert_eq!(json["active"], "scx");
        assert_eq!(json["ops"], "dfsched");
        assert_eq!(BodyView::read(root, &ScxMode::Off).active, Body::Affinity);
        std::fs::write(dir.join("root/ops"), "simple\n").unwrap();
        let v = BodyView::read(root, &ScxMode::Auto);
        assert_eq!((v.active, v.ops.as_str()), (Body::Affinity, "simple"));
    }

    #[test]
    fn modes_parse_and_a_relative_path_is_refused() {
        assert_eq!(ScxMode::parse("auto"), Ok(ScxMode::Auto));
        assert_eq!(ScxMode::parse("off"), Ok(ScxMode::Off));
        assert_eq!(
            ScxMode::parse("/run/x.sock"),
            Ok(ScxMode::Socket("/run/x.sock".into()))
        );
        assert!(ScxMode::parse("run/x.sock").is_err());
    }

    /// A server run by another uid (a child of this test that became `nobody`) is refused. Needs
    /// root to change uid; elsewhere the next test covers our own, non-root uid.
    #[test]
    fn a_server_of_another_uid_is_refused() {
        if !test_premise::is_root() {
            test_premise::skip_or_fail(
                "SKIP a_server_of_another_uid_is_refused: not root, cannot change uid",
            );
            return;
        }
        const NOBODY: libc::uid_t = 65534;
        // A fresh directory of ours, opened to all (0777) on purpose: the
        // child, as nobody, binds its socket in it.
        let tmp = scratch("dfsched-scx-nobody-");
        let dir = tmp.path();
        std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        let path = dir.join("s.sock");
        // Everything the child needs is made before the fork: it only makes system calls.
        // SAFETY: an all-zero sockaddr_un is valid; the path fits (a short temp path, checked).
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let bytes = path.to_str().unwrap().as_bytes();
        assert!(bytes.len() < addr.sun_path.len());
        for (d, &b) in addr.sun_path.iter_mut().zip(bytes) {
            *d = b as libc::c_char;
        }
        // SAFETY: the child runs only async-signal-safe system calls (setgid, setuid, socket, bind,
        // listen, pause, _exit) on memory prepared before the fork, and never returns.
        let child = unsafe { libc::fork() };
        if child == 0 {
            // SAFETY: as above; `addr` is a valid sockaddr_un of the size passed.
            unsafe {
                if libc::setgid(NOBODY) != 0 || libc::setuid(NOBODY) != 0 {
                    libc::_exit(1);
                }
                let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
                let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
                if fd < 0
                    || libc::bind(fd, (&addr as *const libc::sockaddr_un).cast(), len) != 0
                    || libc::listen(fd, 4) != 0
                {
                    libc::_exit(2);
                }
                loop {
                    libc::pause();
                }
            }
        }
        assert!(child > 0, "fork failed");
        let end = std::time::Instant::now() + Duration::from_secs(10);
        while !path.exists() && std::time::Instant::now() < end {
            std::thread::sleep(Duration::from_millis(10));
        }
        let r = ScxLink::connect(&path);
        // SAFETY: kill and waitpid on our own child.
        unsafe {
            libc::kill(child, libc::SIGKILL);
            libc::waitpid(child, std::ptr::null_mut(), 0);
        }
        drop(tmp);
        assert!(
            matches!(r, Err(ScxError::NotRoot { uid: NOBODY, .. })),
            "a server of uid {NOBODY} must be refused"
        );
    }

    /// A server of our own uid: refused unless we are root (then it is root's).
    #[test]
    fn a_server_that_is_not_root_is_refused() {
        let tmp = scratch("dfsched-scx-peer-");
        let path = tmp.path().join("s.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let r = ScxLink::connect(&path);
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        if euid == 0 {
            assert!(r.is_ok(), "root's own server is root's");
        } else {
            assert!(matches!(r, Err(ScxError::NotRoot { uid, .. }) if uid == euid));
        }
        drop(listener);
    }

    /// The lines this client writes are the ones `crates/dfsched-scx/src/proto.rs` documents and
    /// parses (its test holds the same lines).
    #[test]
    fn requests_are_the_documented_lines() {
        let (a, b) = UnixStream::pair().unwrap();
        let server = std::thread::spawn(move || {
            let mut r = BufReader::new(b.try_clone().unwrap());
            let mut w = b;
            let mut got = Vec::new();
            for _ in 0..3 {
                let mut line = String::new();
                r.read_line(&mut line).unwrap();
                got.push(line.trim().to_string());
                w.write_all(b"{\"ok\":true}\n").unwrap();
            }
            got
        });
        let writer = a.try_clone().unwrap();
        let mut link = ScxLink {
            path: "pair".into(),
            reader: BufReader::new(a),
            writer,
            homes: BTreeMap::new(),
            ext: BTreeSet::from([4242]), // as if SCHED_EXT were set already
            requests: 0,
        };
        let cpus: CpuSet = "0-3".parse().unwrap();
        let sys = crate::sys::RealSys;
        link.place(&sys, 4242, Some(GroupId(7)), &cpus).unwrap();
        link.place(&sys, 4242, Some(GroupId(7)), &cpus).unwrap();
        let got = server.join().unwrap();
        assert_eq!(
            got,
            [
                r#"{"group":7,"home":"0-3","op":"group"}"#,
                r#"{"group":7,"op":"place","tid":4242}"#,
                r#"{"group":7,"op":"place","tid":4242}"#,
            ]
        );
        assert_eq!(link.requests, 3, "the unchanged home was not sent again");
    }
}
