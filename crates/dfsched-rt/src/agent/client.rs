//! The agent's client: one Unix stream connection, one request line out,
//! one reply line back. Used by the runtime's balancer (through
//! `link.rs`), by `dfsched agent --status/--stop`, and by tests.
//!
//! Every read and write has a timeout ([`IO_TIMEOUT`]), so a stuck agent
//! costs a balancer pass at most that long and never hangs it: the runtime
//! then drops the connection and falls back to its `/proc` sample.

use super::proto::{
    encode, read_line_capped, LineRead, Reply, ReplyLine, Report, Request, RequestLine, Status,
    View, MAX_LINE_BYTES, PROTOCOL_VERSION,
};
use super::AgentError;
use std::io::{BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long one read or write to the agent may take before the client gives
/// up: long against the agent's work per request (microseconds), short
/// against a balancer interval's worth of staleness.
pub const IO_TIMEOUT: Duration = Duration::from_millis(500);

/// A connection to the agent.
#[derive(Debug)]
pub struct Client {
    path: PathBuf,
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    buf: Vec<u8>,
}

impl Client {
    /// Connects to the agent listening on `path`.
    pub fn connect(path: &Path) -> Result<Client, AgentError> {
        let io = |e: std::io::Error| AgentError::io(path, e);
        let writer = UnixStream::connect(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                AgentError::NotRunning {
                    path: path.to_path_buf(),
                }
            }
            _ => io(e),
        })?;
        writer.set_read_timeout(Some(IO_TIMEOUT)).map_err(io)?;
        writer.set_write_timeout(Some(IO_TIMEOUT)).map_err(io)?;
        let reader = BufReader::new(writer.try_clone().map_err(io)?);
        Ok(Client {
            path: path.to_path_buf(),
            writer,
            reader,
            buf: Vec::new(),
        })
    }

    /// The inode of this end of the connection (what `/proc/self/fd` shows
    /// as `socket:[N]`).
    pub fn socket_inode(&self) -> Option<u64> {
        // fstat of a socket fd gives the socket's inode in sockfs.
        let fd = std::os::fd::AsFd::as_fd(&self.writer);
        let file = std::fs::File::from(fd.try_clone_to_owned().ok()?);
        file.metadata().ok().map(|m| m.ino())
    }

    /// Sends one request and reads its reply.
    pub fn request(&mut self, req: &Request) -> Result<Reply, AgentError> {
        self.send_raw(&encode(&RequestLine {
            v: PROTOCOL_VERSION,
            req: req.clone(),
        }))
    }

    /// Sends `line` as it is (it should end with a newline) and reads one
    /// reply: for tests that send malformed requests.
    pub fn send_raw(&mut self, line: &[u8]) -> Result<Reply, AgentError> {
        // A write that fails may still have an answer waiting: an agent
        // that refuses a peer replies at once and closes, so the request
        // meets a closed socket (EPIPE) while the refusal is in our buffer.
        let written = self.writer.write_all(line);
        let read = read_line_capped(&mut self.reader, &mut self.buf, MAX_LINE_BYTES);
        let read = match (written, read) {
            (Err(e), Ok(LineRead::Eof) | Err(_)) | (Ok(()), Err(e)) => {
                return Err(AgentError::io(&self.path, e))
            }
            (_, Ok(r)) => r,
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
        Ok(line.reply)
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

    /// Asks the agent to end.
    pub fn stop(&mut self) -> Result<(), AgentError> {
        match self.request(&Request::Stop)? {
            Reply::Stopping => Ok(()),
            other => Err(unexpected(other)),
        }
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
