//! The control socket: a Unix stream socket where a program (dfsched-rt's runtime) tells the
//! scheduler its groups and threads (see [`crate::proto`]). The socket serves; the [`crate::control`]
//! owner decides and writes the maps.
//!
//! ```text
//!  client ── line ──► connection thread ── checks ──► Event::Request ──► main loop (owns the maps)
//!         ◄─ line ───                     ◄────────── reply channel ◄───
//! ```
//!
//! Checks, per request, in the connection thread:
//! - the peer's uid comes from the kernel (`SO_PEERCRED`), never from the request;
//! - a thread may be placed or unplaced only by root or by the uid that owns it (its real and
//!   effective uid in `/proc/TID/status`);
//! - every request has a deadline: a line must be complete within [`REQUEST_TIMEOUT`] of its first
//!   byte and fit in [`proto::MAX_LINE`]; a reply must be written within [`REQUEST_TIMEOUT`]; a main
//!   loop that does not answer within it is an error for that request; at most [`MAX_CONNECTIONS`]
//!   connections at once.
//!
//! Invariant: every connection's end is reported ([`Event::Closed`]), so the main loop reclaims what it
//! made.

use crate::proto::{self, Reply, Request};
use std::io::{BufRead as _, BufReader, ErrorKind, Read as _, Write as _};
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a request may take to arrive once begun, and a reply to be made and sent.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections served at once; more are closed at once.
pub const MAX_CONNECTIONS: usize = 64;

/// A connection's id, unique for the server's life.
pub type ConnId = u64;

/// What the socket hands the main loop.
pub enum Event {
    /// A checked request.
    Request {
        /// From which connection.
        conn: ConnId,
        /// The request.
        req: Request,
        /// Where the answer goes.
        reply: mpsc::SyncSender<Reply>,
    },
    /// A connection ended: reclaim what it made.
    Closed {
        /// Which.
        conn: ConnId,
    },
}

/// The peer's uid and pid, from the kernel.
fn peer_cred(stream: &UnixStream) -> std::io::Result<(u32, i32)> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: the fd is a connected Unix socket owned by `stream` for this call; `cred` and `len`
    // are valid for writes of the sizes given.
    let r = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((cred.uid, cred.pid))
}

/// The real and effective uid of thread `tid`, from `/proc/TID/status` (`proc_root` for tests).
pub fn thread_uids(proc_root: &Path, tid: u32) -> Option<(u32, u32)> {
    let text = std::fs::read_to_string(proc_root.join(tid.to_string()).join("status")).ok()?;
    let line = text.lines().find(|l| l.starts_with("Uid:"))?;
    let mut ids = line["Uid:".len()..]
        .split_whitespace()
        .map(|s| s.parse::<u32>());
    Some((ids.next()?.ok()?, ids.next()?.ok()?))
}

/// Whether a peer of uid `uid` may place or unplace thread `tid`: root may place any thread; another
/// uid only a thread whose real and effective uid are its own.
pub fn may_place(proc_root: &Path, uid: u32, tid: u32) -> Result<(), String> {
    match thread_uids(proc_root, tid) {
        None => Err(format!("no thread {tid}")),
        Some(_) if uid == 0 => Ok(()),
        Some((real, effective)) if real == uid && effective == uid => Ok(()),
        Some(_) => Err(format!("thread {tid} is not uid {uid}'s")),
    }
}

/// Creates the socket at `path` (its folder 0755, the socket 0666: any user may connect, and each
/// request is checked) and serves it on a thread of its own until the process ends.
pub fn serve(path: &Path, events: Sender<Event>) -> std::io::Result<PathBuf> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    }
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
    let open = Arc::new(AtomicUsize::new(0));
    std::thread::Builder::new()
        .name("scx-socket".into())
        .spawn(move || {
            let mut next: ConnId = 0;
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                // Relaxed: a count for a limit, no data is published through it.
                if open.fetch_add(1, Ordering::Relaxed) >= MAX_CONNECTIONS {
                    open.fetch_sub(1, Ordering::Relaxed);
                    continue; // dropped: closed
                }
                next += 1;
                let (conn, events, open) = (next, events.clone(), open.clone());
                let spawned = std::thread::Builder::new()
                    .name(format!("scx-conn-{conn}"))
                    .spawn(move || {
                        connection(conn, stream, &events);
                        let _ = events.send(Event::Closed { conn });
                        open.fetch_sub(1, Ordering::Relaxed);
                    });
                if spawned.is_err() {
                    // No thread: the stream went with the closure, so it is closed.
                    eprintln!("dfsched-scx: could not start a connection thread");
                }
            }
        })?;
    Ok(path.to_path_buf())
}

/// Reads one line, with [`REQUEST_TIMEOUT`] from its first byte; `Ok(None)` at the end of the stream.
fn read_line(reader: &mut BufReader<UnixStream>) -> std::io::Result<Option<String>> {
    let mut line = Vec::new();
    let mut began: Option<Instant> = None;
    loop {
        // An idle connection (no byte of a request yet) may wait as long as it likes; once a request
        // began, its rest must come in time.
        let wait = match began {
            None => None,
            Some(t) => Some(
                REQUEST_TIMEOUT
                    .checked_sub(t.elapsed())
                    .filter(|d| !d.is_zero())
                    .ok_or_else(|| std::io::Error::new(ErrorKind::TimedOut, "request timed out"))?,
            ),
        };
        reader.get_ref().set_read_timeout(wait)?;
        let mut byte = [0u8; 1];
        match reader.read(&mut byte) {
            Ok(0) if line.is_empty() => return Ok(None),
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(_) => {
                began.get_or_insert_with(Instant::now);
                if byte[0] == b'\n' {
                    return String::from_utf8(line)
                        .map(Some)
                        .map_err(|_| std::io::Error::new(ErrorKind::InvalidData, "not UTF-8"));
                }
                if line.len() >= proto::MAX_LINE {
                    return Err(std::io::Error::new(ErrorKind::InvalidData, "line too long"));
                }
                line.push(byte[0]);
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(std::io::Error::new(
                    ErrorKind::TimedOut,
                    "request timed out",
                ))
            }
            Err(e) => return Err(e),
        }
    }
}

fn connection(conn: ConnId, stream: UnixStream, events: &Sender<Event>) {
    let Ok((uid, _pid)) = peer_cred(&stream) else {
        return;
    };
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    if writer.set_write_timeout(Some(REQUEST_TIMEOUT)).is_err() {
        return;
    }
    let mut reader = BufReader::new(stream);
    let proc_root = Path::new("/proc");
    loop {
        let line = match read_line(&mut reader) {
            Ok(Some(l)) => l,
            Ok(None) | Err(_) => return,
        };
        let reply = match serde_json::from_str::<Request>(&line) {
            Err(e) => Reply::error(format!("bad request: {e}")),
            Ok(req) => {
                let allowed = match &req {
                    Request::Place { tid, .. } | Request::Unplace { tid } => {
                        may_place(proc_root, uid, *tid)
                    }
                    _ => Ok(()),
                };
                match allowed {
                    Err(why) => Reply::error(why),
                    Ok(()) => {
                        let (tx, rx) = mpsc::sync_channel(1);
                        if events
                            .send(Event::Request {
                                conn,
                                req,
                                reply: tx,
                            })
                            .is_err()
                        {
                            return; // the scheduler is going away
                        }
                        rx.recv_timeout(REQUEST_TIMEOUT).unwrap_or_else(|_| {
                            Reply::error("the scheduler did not answer in time")
                        })
                    }
                }
            }
        };
        let mut text = serde_json::to_string(&reply).expect("a reply serialises");
        text.push('\n');
        if writer.write_all(text.as_bytes()).is_err() {
            return;
        }
    }
}

/// Sends one request to the socket at `path` and waits (with [`REQUEST_TIMEOUT`]) for its reply.
pub fn request(path: &Path, req: &Request) -> std::io::Result<Reply> {
    let mut stream = UnixStream::connect(path)?;
    stream.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    stream.set_write_timeout(Some(REQUEST_TIMEOUT))?;
    let mut line = serde_json::to_string(req).expect("a request serialises");
    line.push('\n');
    stream.write_all(line.as_bytes())?;
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer)?;
    serde_json::from_str(&answer).map_err(|e| std::io::Error::new(ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `/proc` with thread `tid` of these uids, in a fresh directory of
    /// ours (a random name no other user can have made first), removed on
    /// drop.
    fn fake_proc(tid: u32, real: u32, effective: u32) -> tempfile::TempDir {
        let d = tempfile::Builder::new()
            .prefix("dfsched-scx-test-")
            .tempdir()
            .unwrap();
        let t = d.path().join(tid.to_string());
        std::fs::create_dir_all(&t).unwrap();
        std::fs::write(
            t.join("status"),
            format!("Name:\tx\nUid:\t{real}\t{effective}\t{real}\t{real}\nGid:\t0\t0\t0\t0\n"),
        )
        .unwrap();
        d
    }

    #[test]
    fn a_user_may_place_only_its_own_threads_and_root_any() {
        let p = fake_proc(77, 1000, 1000);
        assert_eq!(may_place(p.path(), 1000, 77), Ok(()));
        assert_eq!(may_place(p.path(), 0, 77), Ok(()));
        assert!(may_place(p.path(), 1001, 77).is_err());
        assert!(may_place(p.path(), 1000, 78).is_err(), "no such thread");
    }

    #[test]
    fn a_setuid_thread_is_not_its_callers() {
        // Real uid 1000 but effective 0 (a setuid program run by 1000): not 1000's to move.
        let p = fake_proc(5, 1000, 0);
        assert!(may_place(p.path(), 1000, 5).is_err());
    }

    #[test]
    fn a_request_that_stalls_halfway_is_dropped_after_the_timeout() {
        let (a, mut b) = UnixStream::pair().unwrap();
        b.write_all(b"{\"op\":").unwrap();
        let mut r = BufReader::new(a);
        let t = Instant::now();
        let e = read_line(&mut r).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::TimedOut);
        assert!(t.elapsed() >= REQUEST_TIMEOUT - Duration::from_millis(50));
    }
}
