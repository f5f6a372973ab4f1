//! Socket mechanics shared by the agent's two sides: a connect that cannot
//! hang, the peer's credentials, reads and writes bound by a deadline, and
//! the checks on whose socket a client is about to talk to. Every `unsafe`
//! of the agent is here, small, with a `// SAFETY:` comment.
//!
//! # Why a connect needs a timeout on a Unix socket
//!
//! A `connect()` to a Unix stream socket completes in the kernel without
//! the listener's help *while its accept queue has room*: a stopped agent
//! (`SIGSTOP`) keeps taking connections until the queue is full. From then
//! on a blocking `connect()` sleeps until the listener accepts, which a
//! stopped or hostile listener never does, and a non-blocking one fails at
//! once with `EAGAIN` (there is no "in progress" state to `poll` for, as
//! there is with TCP). Linux's `unix_stream_connect` waits for room for at
//! most the socket's send timeout (`SO_SNDTIMEO`), so [`connect_timeout`]
//! sets that before connecting: the wait is bounded and a full queue reads
//! as [`std::io::ErrorKind::TimedOut`].
//!
//! # Whose agent
//!
//! A client talks to an agent only if (1) the socket's directory is a real
//! directory owned by a trusted uid, private to it ([`check_dir`]), and
//! (2) the process listening is of a trusted uid (`SO_PEERCRED` on the
//! connected socket: the credentials of the process that called
//! `listen()`, set by the kernel and unforgeable). The trusted uids are the
//! client's own effective uid, and root's when configured
//! ([`Trust::OwnUidOrRoot`]): root can read and replace any user's files
//! anyway, so trusting it adds no exposure, but an administrator's shared
//! agent must be asked for explicitly. (1) keeps a squatter from planting
//! a socket where the client looks; (2) keeps a socket passed in or
//! renamed into place by another uid from being believed.
//!
//! Invariants: every function here that waits is bounded by the timeout or
//! deadline it is given; no descriptor leaks on an error path (all are
//! `OwnedFd`s from their creation on).

use super::{geteuid, AgentError};
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// Whose agent a client accepts (module doc, "Whose agent").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Trust {
    /// Only an agent of the client's own effective uid, in a directory the
    /// client owns with mode 0700 (no group or other bits). The default.
    #[default]
    OwnUid,
    /// Also an agent run by root, in a directory owned by root that no
    /// group or other user may write (`DFSCHED_AGENT_TRUST_ROOT=1`,
    /// `dfsched agent --trust-root-agent`): an administrator's agent
    /// started with `--serve-all-users`.
    OwnUidOrRoot,
}

impl Trust {
    /// Whether a directory or listener owned by `uid` is trusted.
    pub fn trusts(self, uid: u32) -> bool {
        uid == geteuid() || (self == Trust::OwnUidOrRoot && uid == 0)
    }
}

/// Checks that `dir` (a socket's directory) is one `trust` accepts: a real
/// directory (not a symlink); owned by the client's uid with no group or
/// other permission bits, or (with [`Trust::OwnUidOrRoot`]) owned by root
/// with no group or other *write* bit (a root agent serving others must
/// let them in). `NotRunning` if it does not exist.
pub fn check_dir(dir: &Path, trust: Trust) -> Result<(), AgentError> {
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(AgentError::NotRunning {
                path: dir.to_path_buf(),
            })
        }
        Err(e) => return Err(AgentError::io(dir, e)),
    };
    let unsafe_dir = |reason: String| AgentError::UnsafeDir {
        path: dir.to_path_buf(),
        reason,
    };
    if !meta.file_type().is_dir() {
        return Err(unsafe_dir("not a directory".into()));
    }
    let (uid, mode) = (meta.uid(), meta.mode() & 0o7777);
    let me = geteuid();
    if uid == me && mode & 0o077 == 0 {
        return Ok(());
    }
    // A trusted root's directory, readable by others on purpose (an agent
    // serving every user), but never writable by them.
    if uid == 0 && trust == Trust::OwnUidOrRoot && mode & 0o022 == 0 {
        return Ok(());
    }
    if uid != me && !trust.trusts(uid) {
        return Err(unsafe_dir(format!("owned by uid {uid}, not {me}")));
    }
    Err(unsafe_dir(format!(
        "mode {mode:o} lets others in (want 0700{})",
        if trust == Trust::OwnUidOrRoot {
            ", or no group or other write for root's"
        } else {
            ""
        }
    )))
}

/// The `sockaddr_un` of `path` and its length; `InvalidInput` if the path
/// holds a NUL or does not fit (107 bytes).
fn sockaddr_of(path: &Path) -> std::io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain old data; all zeroes is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.contains(&0) || bytes.len() >= addr.sun_path.len() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a usable Unix socket path (a NUL, or longer than 107 bytes)",
        ));
    }
    for (dst, &src) in addr.sun_path.iter_mut().zip(bytes) {
        *dst = src as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    Ok((addr, len as libc::socklen_t))
}

/// A `timeval` of `d`, at least 1 µs (0 would mean "no timeout").
fn timeval_of(d: Duration) -> libc::timeval {
    let d = d.max(Duration::from_micros(1));
    libc::timeval {
        tv_sec: d.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_usec: libc::suseconds_t::from(d.subsec_micros()),
    }
}

/// Sets `SO_SNDTIMEO` on `fd`.
fn set_send_timeout(fd: &OwnedFd, d: Duration) -> std::io::Result<()> {
    let tv = timeval_of(d);
    // SAFETY: `tv` is a live timeval of the size given; the fd is open and
    // owned by the caller for the whole call.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Connects to the Unix stream socket at `path`, waiting at most `timeout`
/// for room in a full accept queue (module doc). A full queue, or a wait
/// cut short by signals past the timeout, is `TimedOut`. The stream keeps
/// `timeout` as its write timeout until the caller sets another.
pub fn connect_timeout(path: &Path, timeout: Duration) -> std::io::Result<UnixStream> {
    let deadline = Instant::now() + timeout;
    let (addr, len) = sockaddr_of(path)?;
    // SAFETY: socket() takes integers only and touches no caller memory.
    let raw = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `raw` is a descriptor socket() just opened and nobody else
    // holds: the OwnedFd is its only owner from here on.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timed_out("the agent's accept queue stayed full"));
        }
        set_send_timeout(&fd, left)?;
        // SAFETY: `addr` is a live sockaddr_un of which `len` bytes are
        // initialised; the fd is open and owned by `fd` for the call.
        let rc = unsafe {
            libc::connect(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_un).cast(),
                len,
            )
        };
        if rc == 0 {
            return Ok(UnixStream::from(fd));
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            // A signal: the socket is still unconnected, try again.
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) => return Err(timed_out("the agent's accept queue stayed full")),
            _ => return Err(e),
        }
    }
}

fn timed_out(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::TimedOut, what)
}

/// The peer's (pid, effective uid) from `SO_PEERCRED`: for a connected
/// client, the process that called `listen()`; for an accepted connection,
/// the process that called `connect()`. Set by the kernel at that moment,
/// unforgeable.
pub fn peer_cred(stream: &UnixStream) -> std::io::Result<(u32, u32)> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` and `len` are valid for writes of the sizes given, and
    // the fd is an open socket owned by `stream` for the whole call.
    let rc = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((cred.pid as u32, cred.uid))
}

/// A stream whose reads and writes all end by one deadline, however the
/// peer trickles its bytes: before each system call the socket's timeout
/// is set to the time left (a per-call timeout alone would let a peer that
/// sends a byte just within it hold the caller forever).
#[derive(Debug)]
pub struct Deadlined {
    stream: UnixStream,
    deadline: Instant,
}

impl Deadlined {
    /// `stream`, with its deadline already passed until [`Self::set`].
    pub fn new(stream: UnixStream) -> Deadlined {
        Deadlined {
            stream,
            deadline: Instant::now(),
        }
    }

    /// The stream.
    pub fn stream(&self) -> &UnixStream {
        &self.stream
    }

    /// Every read and write from now on ends by `deadline`.
    pub fn set(&mut self, deadline: Instant) {
        self.deadline = deadline;
    }

    /// The time left, or `TimedOut` if none.
    fn left(&self) -> std::io::Result<Duration> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timed_out("the deadline passed"));
        }
        Ok(left)
    }
}

/// A timeout error as the kernel reports it on a socket with a timeout.
fn as_timeout(e: std::io::Error) -> std::io::Error {
    if e.kind() == std::io::ErrorKind::WouldBlock {
        return timed_out("the deadline passed");
    }
    e
}

impl Read for Deadlined {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.left()?;
        self.stream.set_read_timeout(Some(left))?;
        self.stream.read(buf).map_err(as_timeout)
    }
}

impl Write for Deadlined {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let left = self.left()?;
        self.stream.set_write_timeout(Some(left))?;
        self.stream.write(buf).map_err(as_timeout)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::net::UnixListener;

    /// A fresh private (0700) directory of ours named `dfsched-sock-TAG-`
    /// and random letters, removed on drop.
    fn temp(tag: &str) -> tempfile::TempDir {
        tempfile::Builder::new()
            .prefix(&format!("dfsched-sock-{tag}-"))
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir()
            .unwrap()
    }

    #[test]
    fn a_private_directory_passes_and_an_open_one_or_a_symlink_does_not() {
        let tmp = temp("dir");
        let dir = tmp.path();
        assert!(check_dir(dir, Trust::OwnUid).is_ok());
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = check_dir(dir, Trust::OwnUid).unwrap_err();
        assert!(matches!(e, AgentError::UnsafeDir { .. }), "{e}");
        // Others may write: refused whoever is trusted.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o775)).unwrap();
        let e = check_dir(dir, Trust::OwnUidOrRoot).unwrap_err();
        assert!(matches!(e, AgentError::UnsafeDir { .. }), "{e}");
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let links = temp("link");
        let link = links.path().join("link");
        std::os::unix::fs::symlink(dir, &link).unwrap();
        let e = check_dir(&link, Trust::OwnUid).unwrap_err();
        assert!(e.to_string().contains("not a directory"), "{e}");
        assert!(matches!(
            check_dir(&dir.join("missing"), Trust::OwnUid),
            Err(AgentError::NotRunning { .. })
        ));
    }

    #[test]
    fn the_peer_of_a_connection_is_this_process_and_uid() {
        let dir = temp("cred");
        let path = dir.path().join("s.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let c = connect_timeout(&path, Duration::from_secs(1)).unwrap();
        let (s, _) = listener.accept().unwrap();
        assert_eq!(peer_cred(&c).unwrap(), (std::process::id(), geteuid()));
        assert_eq!(peer_cred(&s).unwrap(), (std::process::id(), geteuid()));
    }

    #[test]
    fn a_connect_to_a_full_accept_queue_times_out_instead_of_hanging() {
        let dir = temp("full");
        let path = dir.path().join("s.sock");
        let _listener = listen_with_backlog(&path, 0);
        // Fill the queue: with a backlog of 0 the kernel queues one
        // connection, and the next waits for room.
        let mut held = Vec::new();
        let mut timed_out = false;
        for _ in 0..8 {
            match connect_timeout(&path, Duration::from_millis(50)) {
                Ok(s) => held.push(s),
                Err(e) => {
                    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
                    timed_out = true;
                    break;
                }
            }
        }
        assert!(
            timed_out,
            "the queue never filled: {} connections",
            held.len()
        );
    }

    /// A listener on `path` with the given backlog (std's is the maximum).
    fn listen_with_backlog(path: &Path, backlog: i32) -> OwnedFd {
        let (addr, len) = sockaddr_of(path).unwrap();
        // SAFETY: socket() takes integers only.
        let raw = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
        assert!(raw >= 0);
        // SAFETY: a fresh descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: `addr` is a live sockaddr_un of `len` initialised bytes.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_un).cast(),
                len,
            )
        };
        assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
        // SAFETY: integers only, on an open socket.
        assert_eq!(unsafe { libc::listen(fd.as_raw_fd(), backlog) }, 0);
        fd
    }

    #[test]
    fn a_deadline_ends_a_read_however_the_peer_trickles() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let mut r = Deadlined::new(a);
        r.set(Instant::now() + Duration::from_millis(150));
        let writer = std::thread::spawn(move || {
            // A byte every 40 ms: each read would return within any
            // per-call timeout longer than that.
            for _ in 0..20 {
                if b.write_all(b"x").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(40));
            }
        });
        let mut buf = [0u8; 1];
        let mut got = 0;
        let err = loop {
            match r.read(&mut buf) {
                Ok(0) => panic!("eof"),
                Ok(_) => got += 1,
                Err(e) => break e,
            }
        };
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        assert!(got < 20, "read all {got} bytes: the deadline did not hold");
        drop(r);
        writer.join().unwrap();
    }
}
