//! The agent's client: one Unix stream connection, one request line out,
//! one reply line back. Used by the runtime's balancer (through
//! `link.rs`), by `dfsched agent --status/--stop`, by `dfsched run`'s
//! [`super::ensure_running`], and by tests.
//!
//! Before anything is sent, the client checks whose agent it reached
//! (`sock.rs`, "Whose agent"): the socket's directory, then the listening
//! process's uid. A refusal is [`AgentError::UnsafeDir`] or
//! [`AgentError::Untrusted`], and nothing of this process (not its pid, not
//! its load) has reached the socket.
//!
//! Every wait is bounded: the connect by the timeout given
//! ([`ConnectOptions::timeout`], also for a full accept queue), and each
//! exchange, its write and its whole reply together, by one deadline
//! ([`Client::set_timeout`], or [`Client::report_by`] for the link's
//! per-pass budget). A stopped or hostile agent costs the caller at most
//! that long.

use super::proto::{
    encode, read_line_capped, AttachReply, AttachRequest, LineRead, Reply, ReplyLine, Report,
    Request, RequestLine, Status, View, MAX_LINE_BYTES, PROTOCOL_VERSION,
};
use super::sock::{self, Deadlined, Trust};
use super::AgentError;
use std::io::{BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The default bound on a connect and on each exchange, for the command
/// line (`--status`, `--stop`, `dfsched run`'s check for a live agent) and
/// tests: long against the agent's work per request (well under a
/// millisecond, a few for a status of many processes) and a busy
/// machine's scheduling delays, short enough that a stopped agent makes a
/// command fail in a second instead of hanging. The balancer's budget is
/// shorter ([`super::link::LINK_TIMEOUT`]).
pub const IO_TIMEOUT: Duration = Duration::from_secs(1);

/// The longest status reply the client reads: a status lists every
/// registered process's load per CPU (up to the agent's connection cap ×
/// the CPUs), far beyond a request line's cap on a big machine. The
/// client has checked whose agent it reads from, so this bounds memory,
/// not trust.
pub const MAX_STATUS_BYTES: usize = 16 << 20;

/// How [`Client::connect_with`] connects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectOptions {
    /// Whose agent is accepted.
    pub trust: Trust,
    /// The bound on the connect, and the client's default per-exchange
    /// timeout afterwards.
    pub timeout: Duration,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            trust: Trust::OwnUid,
            timeout: IO_TIMEOUT,
        }
    }
}

/// A connection to the agent.
#[derive(Debug)]
pub struct Client {
    path: PathBuf,
    writer: Deadlined,
    reader: BufReader<Deadlined>,
    buf: Vec<u8>,
    /// Each exchange's bound unless given a deadline.
    timeout: Duration,
    /// The agent's pid (`SO_PEERCRED`).
    agent_pid: u32,
    /// Updates sent with [`Client::update_unanswered`] whose `updated`
    /// replies have not been read: the next read takes them first.
    unread_updates: u32,
    /// The agent's refusal of one of those, returned once the current
    /// request's own reply is read.
    refused_update: Option<AgentError>,
}

impl Client {
    /// Connects to an agent of this process's own uid listening on `path`,
    /// within [`IO_TIMEOUT`].
    pub fn connect(path: &Path) -> Result<Client, AgentError> {
        Client::connect_with(path, ConnectOptions::default())
    }

    /// Connects to the agent listening on `path` if `options.trust`
    /// accepts it (the module doc), within `options.timeout`.
    pub fn connect_with(path: &Path, options: ConnectOptions) -> Result<Client, AgentError> {
        let io = |e: std::io::Error| AgentError::io(path, e);
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        sock::check_dir(dir, options.trust).map_err(|e| match e {
            AgentError::NotRunning { .. } => AgentError::NotRunning {
                path: path.to_path_buf(),
            },
            other => other,
        })?;
        let stream = sock::connect_timeout(path, options.timeout).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                AgentError::NotRunning {
                    path: path.to_path_buf(),
                }
            }
            _ => io(e),
        })?;
        let (agent_pid, uid) = sock::peer_cred(&stream).map_err(io)?;
        if !options.trust.trusts(uid) {
            return Err(AgentError::Untrusted {
                path: path.to_path_buf(),
                uid,
            });
        }
        let read_half = stream.try_clone().map_err(io)?;
        Ok(Client {
            path: path.to_path_buf(),
            writer: Deadlined::new(stream),
            reader: BufReader::new(Deadlined::new(read_half)),
            buf: Vec::new(),
            timeout: options.timeout,
            agent_pid,
            unread_updates: 0,
            refused_update: None,
        })
    }

    /// The bound on each exchange from now on (a status of a big agent may
    /// want longer than the connect).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// The agent's pid, from the connection's credentials.
    pub fn agent_pid(&self) -> u32 {
        self.agent_pid
    }

    /// The inode of this end of the connection (what `/proc/self/fd` shows
    /// as `socket:[N]`).
    pub fn socket_inode(&self) -> Option<u64> {
        // fstat of a socket fd gives the socket's inode in sockfs.
        let fd = std::os::fd::AsFd::as_fd(self.writer.stream());
        let file = std::fs::File::from(fd.try_clone_to_owned().ok()?);
        file.metadata().ok().map(|m| m.ino())
    }

    /// Sends one request and reads its reply, within the client's timeout.
    pub fn request(&mut self, req: &Request) -> Result<Reply, AgentError> {
        let deadline = Instant::now() + self.timeout;
        self.request_by(req, deadline)
    }

    /// Sends one request and reads its reply, both done by `deadline`.
    pub fn request_by(&mut self, req: &Request, deadline: Instant) -> Result<Reply, AgentError> {
        let cap = match req {
            Request::Status => MAX_STATUS_BYTES,
            _ => MAX_LINE_BYTES,
        };
        let line = encode(&RequestLine {
            v: PROTOCOL_VERSION,
            req: req.clone(),
        });
        self.exchange(&line, deadline, cap)
    }

    /// Sends `line` as it is (it should end with a newline) and reads one
    /// reply: for tests that send malformed requests.
    pub fn send_raw(&mut self, line: &[u8]) -> Result<Reply, AgentError> {
        let deadline = Instant::now() + self.timeout;
        self.exchange(line, deadline, MAX_LINE_BYTES)
    }

    fn exchange(
        &mut self,
        line: &[u8],
        deadline: Instant,
        cap: usize,
    ) -> Result<Reply, AgentError> {
        match self.send_then_receive(line, deadline, cap)? {
            Some(reply) => Ok(reply),
            None => Err(AgentError::io(
                &self.path,
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no reply from the agent in time",
                ),
            )),
        }
    }

    /// Sends `line` and reads the reply by `deadline`: `None` if none of it
    /// came by then (it may still come: [`Client::late_view`]).
    fn send_then_receive(
        &mut self,
        line: &[u8],
        deadline: Instant,
        cap: usize,
    ) -> Result<Option<Reply>, AgentError> {
        self.writer.set(deadline);
        // A write that fails may still have an answer waiting: an agent
        // that refuses a peer replies at once and closes, so the request
        // meets a closed socket (EPIPE) while the refusal is in our buffer.
        let written = self.writer.write_all(line);
        match (written, self.receive(deadline, cap)) {
            (_, Ok(Some(reply))) => Ok(Some(reply)),
            (Err(e), _) => Err(AgentError::io(&self.path, e)),
            (Ok(()), other) => other,
        }
    }

    /// Reads one reply line by `deadline`: `None` if not a byte of it came
    /// (the same reply can be read later); an error otherwise, a reply cut
    /// off mid-line included (the stream is then out of step).
    fn receive(&mut self, deadline: Instant, cap: usize) -> Result<Option<Reply>, AgentError> {
        // The replies to updates sent unanswered come first (the agent
        // answers in order); each is taken off as it is read, so a deadline
        // that ends the drain leaves the rest for the next read.
        // A refusal among them is kept until this request's own reply has
        // been read too, so that the connection stays in step.
        while self.unread_updates > 0 {
            match self.receive_line(deadline, MAX_LINE_BYTES)? {
                None => return Ok(None),
                Some(Reply::Updated) => self.unread_updates -= 1,
                Some(other) => {
                    self.unread_updates -= 1;
                    self.refused_update.get_or_insert(unexpected(other));
                }
            }
        }
        let reply = self.receive_line(deadline, cap)?;
        if reply.is_some() {
            if let Some(refusal) = self.refused_update.take() {
                return Err(refusal);
            }
        }
        Ok(reply)
    }

    /// Reads one reply line by `deadline` (see [`Client::receive`]).
    fn receive_line(&mut self, deadline: Instant, cap: usize) -> Result<Option<Reply>, AgentError> {
        self.reader.get_mut().set(deadline);
        let read = match read_line_capped(&mut self.reader, &mut self.buf, cap) {
            Ok(r) => r,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut && self.buf.is_empty() => {
                return Ok(None)
            }
            Err(e) => return Err(AgentError::io(&self.path, e)),
        };
        match read {
            LineRead::Line => {}
            LineRead::TooLong => {
                return Err(AgentError::Protocol("the agent's reply is too long".into()))
            }
            LineRead::Eof => {
                return Err(AgentError::Protocol(
                    "the agent closed the connection".into(),
                ))
            }
        }
        let line: ReplyLine = serde_json::from_slice(&self.buf)
            .map_err(|e| AgentError::Protocol(format!("bad reply from the agent: {e}")))?;
        if line.v != PROTOCOL_VERSION {
            return Err(AgentError::Protocol(format!(
                "the agent speaks protocol version {}, this client {PROTOCOL_VERSION}",
                line.v
            )));
        }
        Ok(Some(line.reply))
    }

    /// Sends a report and reads its view by `deadline`; `None` if the
    /// agent has not answered by then (read it with [`Client::late_view`]
    /// before sending anything else on this connection).
    pub(crate) fn report_or_late(
        &mut self,
        report: Report,
        deadline: Instant,
    ) -> Result<Option<View>, AgentError> {
        let line = encode(&RequestLine {
            v: PROTOCOL_VERSION,
            req: Request::Report(report),
        });
        self.send_then_receive(&line, deadline, MAX_LINE_BYTES)?
            .map(view_of)
            .transpose()
    }

    /// The view answering the report [`Client::report_or_late`] sent and
    /// found unanswered, read by `deadline`; `None` if it has still not
    /// come.
    pub(crate) fn late_view(&mut self, deadline: Instant) -> Result<Option<View>, AgentError> {
        self.receive(deadline, MAX_LINE_BYTES)?
            .map(view_of)
            .transpose()
    }

    /// [`Client::report`] done by `deadline`.
    pub fn report_by(&mut self, report: Report, deadline: Instant) -> Result<View, AgentError> {
        match self.request_by(&Request::Report(report), deadline)? {
            Reply::View(v) => Ok(*v),
            other => Err(unexpected(other)),
        }
    }

    /// [`Client::update`] done by `deadline`.
    pub fn update_by(&mut self, report: Report, deadline: Instant) -> Result<(), AgentError> {
        match self.request_by(&Request::Update(report), deadline)? {
            Reply::Updated => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Sends an update by `deadline` and does not wait for its reply: the
    /// next read on this connection takes it first, and if the agent
    /// refused the update, that read's request fails with the refusal
    /// (its own reply read and dropped, so the connection stays in step). The balancer uses this after a pass that moved
    /// threads, so that the pass does not sleep for an acknowledgement.
    pub fn update_unanswered(
        &mut self,
        report: Report,
        deadline: Instant,
    ) -> Result<(), AgentError> {
        let line = encode(&RequestLine {
            v: PROTOCOL_VERSION,
            req: Request::Update(report),
        });
        self.writer.set(deadline);
        self.writer
            .write_all(&line)
            .map_err(|e| AgentError::io(&self.path, e))?;
        self.unread_updates += 1;
        Ok(())
    }

    /// Reports this process's load; the agent's view of everyone else's.
    pub fn report(&mut self, report: Report) -> Result<View, AgentError> {
        match self.request(&Request::Report(report))? {
            Reply::View(v) => Ok(*v),
            other => Err(unexpected(other)),
        }
    }

    /// Reports this process's load after its balancer moved threads; no
    /// view comes back.
    pub fn update(&mut self, report: Report) -> Result<(), AgentError> {
        match self.request(&Request::Update(report))? {
            Reply::Updated => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// The agent's state.
    pub fn status(&mut self) -> Result<Status, AgentError> {
        match self.request(&Request::Status)? {
            Reply::Status(s) => Ok(*s),
            other => Err(unexpected(other)),
        }
    }

    /// Asks the agent to place process `pid` from outside
    /// ([`Request::Attach`]).
    pub fn attach(&mut self, req: AttachRequest) -> Result<AttachReply, AgentError> {
        match self.request(&Request::Attach(req))? {
            Reply::Attached(r) => Ok(r),
            other => Err(unexpected(other)),
        }
    }

    /// Asks the agent to give an attached process's masks back.
    pub fn detach(&mut self, pid: u32) -> Result<AttachReply, AgentError> {
        match self.request(&Request::Detach { pid })? {
            Reply::Detached(r) => Ok(r),
            other => Err(unexpected(other)),
        }
    }

    /// What `dfsched top` shows (see `top.rs`); asking also makes the
    /// agent gather the processes' details for the next
    /// [`super::top::WATCH_FOR`].
    pub fn top(&mut self) -> Result<super::top::TopView, AgentError> {
        match self.request(&Request::Top)? {
            Reply::Top(t) => Ok(*t),
            other => Err(unexpected(other)),
        }
    }

    /// Asks the agent to end.
    pub fn stop(&mut self) -> Result<(), AgentError> {
        match self.request(&Request::Stop)? {
            Reply::Stopping => Ok(()),
            other => Err(unexpected(other)),
        }
    }
}

fn view_of(reply: Reply) -> Result<View, AgentError> {
    match reply {
        Reply::View(v) => Ok(*v),
        other => Err(unexpected(other)),
    }
}

fn unexpected(reply: Reply) -> AgentError {
    match reply {
        Reply::Error(e) => AgentError::Refused {
            kind: e.kind,
            message: e.message,
        },
        other => AgentError::Protocol(format!("unexpected reply {other:?}")),
    }
}
