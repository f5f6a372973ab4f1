//! The agent's wire protocol: one JSON object per line, each carrying the
//! protocol version `v`, in both directions. Requests are small and typed;
//! every struct refuses unknown fields, so a typo or a newer client's field
//! is an error reply, never silently dropped.
//!
//! ```text
//!  client → {"v":2,"req":{"report":{"load_milli":[[0,1000],[1,500]],"allowed":"0-1","own_socket_inode":4711,"weighed":true}}}
//!  agent  ← {"v":2,"reply":{"view":{"others_milli":[[0,2000]],"unmanaged":[[1,3]],"unmanaged_milli":[[1,500]],"registered":[812,990],"home":"0","set":3}}}
//!  client → {"v":2,"req":{"update":{"load_milli":[[1,1500]],"allowed":"0-1","own_socket_inode":4711}}}
//!  agent  ← {"v":2,"reply":"updated"}
//!  client → {"v":2,"req":"status"}
//!  agent  ← {"v":2,"reply":{"status":{…}}}
//!  client → {"v":2,"req":"nonsense"}
//!  agent  ← {"v":2,"reply":{"error":{"kind":"malformed","message":"…"}}}
//! ```
//!
//! # Versions
//!
//! - 1: `report` answered with the others' load, the registered pids and
//!   the sharing set's home; each runtime scanned `/proc` itself for the
//!   rest of the machine's load.
//! - 2 (this one): the view also carries `unmanaged`, the runnable threads
//!   per CPU of every process the agent does not have registered, from one
//!   `/proc` scan the agent shares among all its clients (so a runtime no
//!   longer scans); and `update` reports a process's load after its
//!   balancer moved threads, without asking for a view. The version was
//!   bumped because a version-1 runtime would take a version-2 view for a
//!   malformed reply, and a version-2 runtime talking to a version-1 agent
//!   must know that no shared scan is coming: each side now gets a clear
//!   "version" refusal and the runtime falls back to its own scan.
//! - 2, additive: a report may carry `"weighed":true`, and the view to such
//!   a report carries `unmanaged_milli`, the unmanaged load weighed by CFS
//!   group against the *asking* process's group (its session's autogroup
//!   or its cpu cgroup, and its nice; see `crate::weigh`), in thousandths
//!   of one of its threads per CPU. `unmanaged` (whole threads) stays in every view. The
//!   new field is sent only when asked for because both sides refuse
//!   unknown fields: an older client never gets a field it would refuse,
//!   and an older agent refuses a report that asks (`malformed`, the
//!   connection kept), after which the runtime reports on that connection
//!   without asking and takes `unmanaged` at 1000 per thread.
//! - 2, additive (the hardening of issue 9; nothing a client sends
//!   changed): the error kind `busy` (a connection over the agent's caps,
//!   refused at once and closed), and the counters `refused_busy` and
//!   `idle_closed` in a status (absent = 0 from an older agent). An older
//!   client reads `busy` as a reply it does not understand, which it
//!   treats as a failed exchange, as it should. Reports whose load names a
//!   CPU twice or exceeds the bound (`limits.rs`, `check_load`) were
//!   always nonsense and are now refused with `invalid`.
//! - 2, additive: a report may carry `"own_sample":true` (a process alone
//!   with the agent, which samples `/proc` itself on the passes between
//!   its exchanges anyway, or one that weighs no outside load): the view
//!   then carries no `unmanaged` and the agent takes no sample for it, so
//!   that a program nobody shares the agent with costs the agent no
//!   `/proc` reading; the counter `own_sample_reports` counts them. Sent
//!   only with `weighed`, on a connection that has not refused it: an
//!   agent from before either refuses the report once (`malformed`) and
//!   is asked plainly from then on.
//! - 2, additive (issue 13, `dfsched top`; see `top.rs`): the request
//!   `top`, answered with a [`Reply::Top`] of the asker's uid's processes
//!   (root's: all); a report may carry `"watchable":true` (the runtime
//!   understands `watch`) and, while watched, `detail` (its groups and last
//!   pass); a view to a watchable report may carry `"watch":true`. Each is
//!   sent only to a peer that said it understands it, so an older peer never
//!   meets a field it would refuse: an older agent refuses `watchable` as
//!   malformed and the runtime reports on without it (as for `weighed`),
//!   and an older agent's `malformed` answer to `top` tells `dfsched top`
//!   the agent is too old.
//! - 2, additive (issue 14): a detail may carry `"body":"scx"`, the body
//!   that carries out the process's placements; absent = `affinity`, and
//!   left out when it is, so only a runtime on the scx body ever sends it.
//!   An older agent refuses such a report as malformed, and the runtime
//!   sends its details without `body` on that connection (its first step
//!   back, before `watchable`). See `top.rs`.
//!
//! Invariants: a line is at most [`MAX_LINE_BYTES`] bytes, newline
//! excluded; a request that fails to parse, has another version, or is too
//! long gets an [`ErrorKind`] reply and changes nothing on the agent; the
//! connection stays usable after it.

use super::top::{Detail, TopView};
use dfsched_core::{CpuId, CpuSet};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, ErrorKind as IoErrorKind};

/// The protocol version both sides put in `v`. A line with another version
/// is answered with [`ErrorKind::Version`].
pub const PROTOCOL_VERSION: u32 = 2;

/// The longest line either side accepts (64 KiB, newline excluded). A report
/// lists at most one pair per CPU (a few bytes each), so this leaves room
/// for machines of thousands of CPUs while bounding what a peer can make
/// the agent buffer.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// One request line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestLine {
    /// [`PROTOCOL_VERSION`].
    pub v: u32,
    /// The request.
    pub req: Request,
}

/// What a client asks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// A runtime's balancer pass: "this is my load; what is everyone
    /// else's?". The first report registers the peer's process (its pid
    /// comes from the socket's credentials, never from the message); it
    /// stays registered until the connection closes or the pid disappears.
    Report(Report),
    /// The same load report sent right after the peer's balancer moved
    /// threads, so that the other processes' next views show where they
    /// went rather than where they were a whole interval ago. Registers the
    /// peer as [`Request::Report`] does; answered with [`Reply::Updated`]
    /// (no view, and so never a `/proc` scan).
    Update(Report),
    /// The agent's state, for `dfsched agent --status`.
    Status,
    /// What `dfsched top` shows: the asker's uid's processes with their
    /// details, and the load per CPU. Makes the agent ask runtimes for
    /// details for [`super::top::WATCH_FOR`].
    Top,
    /// Ends the agent (allowed to a peer of the agent's own uid or root).
    Stop,
    /// `dfsched attach`: place the threads of a running process from
    /// outside, and keep them placed (`attached.rs`). The peer must own
    /// the process; one not already under dfsched.
    Attach(AttachRequest),
    /// `dfsched detach`: give an attached process's threads their masks
    /// from before the attach back, and stop placing them.
    Detach {
        /// The process.
        pid: u32,
    },
}

/// What [`Request::Attach`] asks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttachRequest {
    /// The process.
    pub pid: u32,
    /// Its policy unless a rule says otherwise.
    pub policy: dfsched_core::Policy,
    /// Rules for it and its threads (see `crate::rules`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rules: Option<crate::rules::Rules>,
}

/// The answer to [`Request::Attach`] and [`Request::Detach`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttachReply {
    /// The process.
    pub pid: u32,
    /// The policy it was placed under.
    pub policy: dfsched_core::Policy,
    /// Its threads seen.
    pub threads: u32,
    /// Masks set: placements (attach) or masks given back (detach).
    pub placed: u32,
}

/// A runtime's load report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Report {
    /// The process's own load per CPU in thousandths of a runnable thread:
    /// its engine's `load_milli()` minus the external load the runtime last
    /// gave the engine (so other processes' load is never reported back).
    /// CPUs not listed count 0.
    pub load_milli: Vec<(CpuId, u64)>,
    /// The CPUs the process's runtime may place threads on; a sharing set's
    /// home is chosen within the intersection of its members'.
    pub allowed: CpuSet,
    /// The inode of the client's end of this connection, so that the agent
    /// does not mistake the agent socket (inherited by a forked child) for
    /// a socket the processes share.
    pub own_socket_inode: Option<u64>,
    /// Whether the view should carry [`View::unmanaged_milli`] (see the
    /// module doc's versions); absent = false, and left out when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub weighed: bool,
    /// The client samples `/proc` for the unmanaged load itself (it is the
    /// agent's only process, or does not weigh outside load at all): the
    /// view carries no unmanaged sample and the agent takes none for it
    /// (module doc's versions); absent = false, and left out when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub own_sample: bool,
    /// The runtime understands [`View::watch`] (module doc's versions);
    /// absent = false, and left out when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub watchable: bool,
    /// The process's groups and last pass, sent while its views say
    /// `watch`; absent = none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<Box<Detail>>,
}

/// One reply line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplyLine {
    /// [`PROTOCOL_VERSION`].
    pub v: u32,
    /// The reply.
    pub reply: Reply,
}

/// What the agent answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Reply {
    /// The answer to a [`Request::Report`] (boxed, as [`Reply::Status`]:
    /// every reply line would otherwise be as large).
    View(Box<View>),
    /// The answer to [`Request::Update`]: the load is recorded.
    Updated,
    /// The answer to [`Request::Status`] (boxed: it is by far the largest
    /// reply, and every reply line would otherwise be as large).
    Status(Box<Status>),
    /// The answer to [`Request::Stop`]: the agent is ending.
    Stopping,
    /// The answer to [`Request::Attach`]: the process is placed.
    Attached(AttachReply),
    /// The answer to [`Request::Detach`]: its masks are given back.
    Detached(AttachReply),
    /// The answer to [`Request::Top`].
    Top(Box<TopView>),
    /// The request was refused; nothing changed.
    Error(ErrorReply),
}

/// The shared load view sent to one process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct View {
    /// Σ of the latest reports of every *other* registered process, per CPU,
    /// in thousandths of a runnable thread; CPUs with 0 left out.
    pub others_milli: Vec<(CpuId, u64)>,
    /// Runnable threads per CPU of every process the agent does not have
    /// registered (nor the agent itself): the rest of the machine's load,
    /// in whole threads (the signals' estimate, rounded), CPUs with none
    /// left out. It comes from one sample shared by all clients (per-CPU
    /// busy time and the runnable count from `/proc/stat`, less the
    /// registered processes' CPU time and reported load; `crate::signals`),
    /// at most the agent's freshness bound old (50 ms by default). `None`
    /// when the agent could not take it: the runtime then samples itself.
    pub unmanaged: Option<Vec<(CpuId, u32)>>,
    /// The same load weighed by CFS group against the asking process's
    /// group, per CPU in thousandths of one of our threads, CPUs with none
    /// left out: the estimate times the mean weight of an outside runnable
    /// thread that the agent's last refresh found (a thread of the asker's
    /// own group, or of an unknown group, weighs 1000 at nice 0, another
    /// group 1000 in all at nice 0; see `crate::weigh` and
    /// `crate::signals`).
    /// Only in answer to a report with [`Report::weighed`], and `None`
    /// whenever `unmanaged` is; absent = `None`, and left out when `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unmanaged_milli: Option<Vec<(CpuId, u64)>>,
    /// Every registered pid, the asking one included, ascending: the
    /// runtime's `/proc` sample skips them, since their load is in
    /// `others_milli` (or is its own).
    pub registered: Vec<u32>,
    /// The home of the process's sharing set, if it shares a pipe or a
    /// socket with another registered process; `None` otherwise.
    pub home: Option<CpuSet>,
    /// The id of that sharing set.
    pub set: Option<u64>,
    /// Someone watches (`dfsched top`): send a [`Report::detail`] with the
    /// next reports. Only in answer to a [`Report::watchable`] report;
    /// absent = false, and left out when false.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub watch: bool,
}

/// The agent's state as `--status` prints it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Status {
    /// The agent's process id.
    pub agent_pid: u32,
    /// The agent's uid.
    pub agent_uid: u32,
    /// Registered processes, by pid.
    pub processes: Vec<ProcessStatus>,
    /// Sharing sets of two or more processes, by id.
    pub sets: Vec<SetStatus>,
    /// Counters since the agent started.
    pub counters: Counters,
}

/// One registered process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProcessStatus {
    /// Its pid.
    pub pid: u32,
    /// Its uid (from the socket's credentials).
    pub uid: u32,
    /// Its latest report's load.
    pub load_milli: Vec<(CpuId, u64)>,
    /// Its latest report's allowed CPUs.
    pub allowed: CpuSet,
    /// Its sharing set, if any.
    pub set: Option<u64>,
}

/// One sharing set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetStatus {
    /// Its id (kept while any of its members stays in it).
    pub id: u64,
    /// Its member pids, ascending.
    pub members: Vec<u32>,
    /// The pipe and socket inodes that join them, ascending.
    pub inodes: Vec<u64>,
    /// Its home's CPUs.
    pub home: CpuSet,
}

/// The agent's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Counters {
    /// Connections accepted (of any uid).
    pub connections: u64,
    /// Connections refused for their uid.
    pub refused_peers: u64,
    /// Connections refused at a connection cap (total or per uid).
    #[serde(default)]
    pub refused_busy: u64,
    /// Connections closed for sending no whole request within the idle
    /// timeout.
    #[serde(default)]
    pub idle_closed: u64,
    /// Requests answered with an error.
    pub bad_requests: u64,
    /// Reports answered.
    pub reports: u64,
    /// Processes dropped because their connection closed.
    pub dropped_on_close: u64,
    /// Processes dropped because their pid disappeared or changed owner.
    pub dropped_on_exit: u64,
    /// Sharing detection passes.
    pub ticks: u64,
    /// Ticks that read the registered processes' open files: only those
    /// with two or more processes registered (a set needs two members).
    #[serde(default)]
    pub file_scans: u64,
    /// `/proc` scans for the unmanaged load (at most one per freshness
    /// bound, whatever the number of clients).
    pub scans: u64,
    /// Scans that failed (their views carried no unmanaged sample).
    pub scan_errors: u64,
    /// Reports that asked for no unmanaged sample ([`Report::own_sample`]):
    /// answered without a scan.
    #[serde(default)]
    pub own_sample_reports: u64,
    /// Load updates after moves ([`Request::Update`]) recorded.
    pub updates: u64,
}

/// Why a request was refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorReply {
    /// The kind, for programs.
    pub kind: ErrorKind,
    /// The detail, for people.
    pub message: String,
}

/// The kinds of refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// Not a JSON request of this protocol.
    Malformed,
    /// Longer than [`MAX_LINE_BYTES`].
    TooLong,
    /// Another protocol version.
    Version,
    /// The peer may not do this (another uid).
    Denied,
    /// The request names CPUs or a process the agent cannot accept, or a
    /// number out of range.
    Invalid,
    /// The agent has its maximum of connections open (in all, or of the
    /// peer's uid); the connection is closed.
    Busy,
}

impl ReplyLine {
    /// A reply of this protocol's version.
    pub fn new(reply: Reply) -> ReplyLine {
        ReplyLine {
            v: PROTOCOL_VERSION,
            reply,
        }
    }

    /// An error reply.
    pub fn error(kind: ErrorKind, message: impl Into<String>) -> ReplyLine {
        ReplyLine::new(Reply::Error(ErrorReply {
            kind,
            message: message.into(),
        }))
    }
}

/// Parses one request line (without its newline): the request, or the
/// error reply to send.
pub fn parse_request(line: &[u8]) -> Result<Request, ReplyLine> {
    // The version is checked first, from a loose parse, so that a newer
    // client gets "version" rather than a field-by-field complaint.
    #[derive(Deserialize)]
    struct VersionOnly {
        v: Option<u32>,
    }
    let version = serde_json::from_slice::<VersionOnly>(line)
        .map_err(|e| ReplyLine::error(ErrorKind::Malformed, e.to_string()))?;
    match version.v {
        Some(PROTOCOL_VERSION) => {}
        Some(v) => {
            return Err(ReplyLine::error(
                ErrorKind::Version,
                format!(
                    "protocol version {v} is not supported; this agent speaks {PROTOCOL_VERSION}"
                ),
            ))
        }
        None => return Err(ReplyLine::error(ErrorKind::Malformed, "missing field `v`")),
    }
    serde_json::from_slice::<RequestLine>(line)
        .map(|l| l.req)
        .map_err(|e| ReplyLine::error(ErrorKind::Malformed, e.to_string()))
}

/// Serialises a line, newline included.
pub fn encode<T: Serialize>(line: &T) -> Vec<u8> {
    // Serialising these types cannot fail: no maps with non-string keys, no
    // floats.
    let mut out = serde_json::to_vec(line).expect("protocol types always serialise");
    out.push(b'\n');
    out
}

/// What [`read_line_capped`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum LineRead {
    /// A whole line (newline removed) is in the buffer.
    Line,
    /// The line was longer than the cap; it was read up to its newline and
    /// thrown away, so the next read starts at the next line.
    TooLong,
    /// The peer closed the connection (a partial last line is dropped).
    Eof,
}

/// Reads one line into `buf` (cleared first), holding at most `cap` bytes of
/// it: a longer line is consumed to its end and reported as
/// [`LineRead::TooLong`], so memory stays bounded whatever the peer sends.
pub fn read_line_capped(
    r: &mut impl BufRead,
    buf: &mut Vec<u8>,
    cap: usize,
) -> std::io::Result<LineRead> {
    buf.clear();
    let mut too_long = false;
    loop {
        let chunk = match r.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == IoErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok(LineRead::Eof);
        }
        let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (chunk.len(), false),
        };
        if !too_long {
            if buf.len() + take > cap {
                too_long = true;
                buf.clear();
            } else {
                buf.extend_from_slice(&chunk[..take]);
            }
        }
        r.consume(take + usize::from(done));
        if done {
            return Ok(if too_long {
                LineRead::TooLong
            } else {
                LineRead::Line
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Request {
        Request::Report(Report {
            watchable: false,
            detail: None,
            load_milli: vec![(CpuId(0), 1000), (CpuId(1), 500)],
            allowed: "0-1".parse().unwrap(),
            own_socket_inode: Some(4711),
            weighed: true,
            own_sample: true,
        })
    }

    #[test]
    fn requests_round_trip_through_their_line() {
        let Request::Report(r) = report() else {
            unreachable!()
        };
        for req in [report(), Request::Update(r), Request::Status, Request::Stop] {
            let line = encode(&RequestLine {
                v: PROTOCOL_VERSION,
                req: req.clone(),
            });
            assert_eq!(line.last(), Some(&b'\n'));
            assert_eq!(parse_request(&line[..line.len() - 1]).unwrap(), req);
        }
    }

    fn kind_of(line: &str) -> ErrorKind {
        match parse_request(line.as_bytes()).unwrap_err().reply {
            Reply::Error(e) => e.kind,
            other => panic!("not an error: {other:?}"),
        }
    }

    #[test]
    fn malformed_lines_are_refused_with_their_kind() {
        assert_eq!(kind_of("not json"), ErrorKind::Malformed);
        assert_eq!(kind_of(r#"{"req":"status"}"#), ErrorKind::Malformed);
        assert_eq!(kind_of(r#"{"v":2,"req":"dance"}"#), ErrorKind::Malformed);
        assert_eq!(
            kind_of(r#"{"v":2,"req":"status","extra":1}"#),
            ErrorKind::Malformed
        );
        assert_eq!(
            kind_of(
                r#"{"v":2,"req":{"report":{"load_milli":[],"allowed":"0","own_socket_inode":null,"pid":1}}}"#
            ),
            ErrorKind::Malformed,
            "unknown fields inside a request are refused too"
        );
        assert_eq!(
            kind_of(
                r#"{"v":2,"req":{"report":{"load_milli":[],"allowed":"x","own_socket_inode":null}}}"#
            ),
            ErrorKind::Malformed
        );
        assert_eq!(kind_of(r#"{"v":1,"req":"status"}"#), ErrorKind::Version);
        assert_eq!(kind_of(r#"{"v":3,"req":"status"}"#), ErrorKind::Version);
    }

    #[test]
    fn capped_reads_skip_a_long_line_and_keep_the_next() {
        let long = "x".repeat(100);
        let text = format!("short\n{long}\nnext\npartial");
        let mut r = std::io::BufReader::with_capacity(7, text.as_bytes());
        let mut buf = Vec::new();
        assert_eq!(
            read_line_capped(&mut r, &mut buf, 10).unwrap(),
            LineRead::Line
        );
        assert_eq!(buf, b"short");
        assert_eq!(
            read_line_capped(&mut r, &mut buf, 10).unwrap(),
            LineRead::TooLong
        );
        assert!(buf.len() <= 10);
        assert_eq!(
            read_line_capped(&mut r, &mut buf, 10).unwrap(),
            LineRead::Line
        );
        assert_eq!(buf, b"next");
        assert_eq!(
            read_line_capped(&mut r, &mut buf, 10).unwrap(),
            LineRead::Eof
        );
    }

    #[test]
    fn replies_round_trip() {
        let view = ReplyLine::new(Reply::View(Box::new(View {
            watch: false,
            others_milli: vec![(CpuId(1), 2000)],
            unmanaged: Some(vec![(CpuId(0), 3)]),
            unmanaged_milli: Some(vec![(CpuId(0), 1500)]),
            registered: vec![3, 9],
            home: Some("1".parse().unwrap()),
            set: Some(2),
        })));
        for reply in [view, ReplyLine::new(Reply::Updated)] {
            let line = encode(&reply);
            let back: ReplyLine = serde_json::from_slice(&line).unwrap();
            assert_eq!(back, reply);
        }
    }

    #[test]
    fn the_hardening_fields_are_additive() {
        // A status from an agent before the connection caps parses, its
        // new counters 0.
        let old = r#"{"v":2,"reply":{"status":{"agent_pid":7,"agent_uid":0,"processes":[],"sets":[],"counters":{"connections":1,"refused_peers":0,"bad_requests":0,"reports":0,"dropped_on_close":0,"dropped_on_exit":0,"ticks":0,"scans":0,"scan_errors":0,"updates":0}}}}"#;
        let Reply::Status(s) = serde_json::from_str::<ReplyLine>(old).unwrap().reply else {
            panic!("not a status")
        };
        assert_eq!((s.counters.refused_busy, s.counters.idle_closed), (0, 0));
        // The new refusal kind round-trips by its name.
        let busy = encode(&ReplyLine::error(ErrorKind::Busy, "full"));
        assert!(String::from_utf8_lossy(&busy).contains(r#""kind":"busy""#));
        let back: ReplyLine = serde_json::from_slice(&busy).unwrap();
        assert_eq!(back, ReplyLine::error(ErrorKind::Busy, "full"));
    }

    #[test]
    fn the_weighed_field_is_additive_both_ways() {
        // An older client's report (no `weighed`) parses, not weighed, and
        // a report not asking leaves the key out.
        let old = r#"{"v":2,"req":{"report":{"load_milli":[[0,1000]],"allowed":"0-1","own_socket_inode":null}}}"#;
        let Request::Report(r) = parse_request(old.as_bytes()).unwrap() else {
            panic!("not a report")
        };
        assert!(!r.weighed);
        let line = encode(&RequestLine {
            v: PROTOCOL_VERSION,
            req: Request::Report(r),
        });
        assert!(!String::from_utf8(line).unwrap().contains("weighed"));
        // A view to such a report has no `unmanaged_milli` key, so an older
        // client (which refuses unknown fields) reads it; an older agent's
        // view parses with none.
        let view = View {
            watch: false,
            others_milli: vec![],
            unmanaged: Some(vec![(CpuId(1), 2)]),
            unmanaged_milli: None,
            registered: vec![7],
            home: None,
            set: None,
        };
        let line = encode(&ReplyLine::new(Reply::View(Box::new(view.clone()))));
        let text = String::from_utf8(line).unwrap();
        assert!(!text.contains("unmanaged_milli"), "{text}");
        let old_view = r#"{"v":2,"reply":{"view":{"others_milli":[],"unmanaged":[[1,2]],"registered":[7],"home":null,"set":null}}}"#;
        let back: ReplyLine = serde_json::from_str(old_view).unwrap();
        assert_eq!(back.reply, Reply::View(Box::new(view)));
        // A weighed view carries both fields.
        let weighed = r#"{"v":2,"reply":{"view":{"others_milli":[],"unmanaged":[[1,2]],"unmanaged_milli":[[1,500]],"registered":[7],"home":null,"set":null}}}"#;
        let Reply::View(v) = serde_json::from_str::<ReplyLine>(weighed).unwrap().reply else {
            panic!("not a view")
        };
        assert_eq!(v.unmanaged_milli, Some(vec![(CpuId(1), 500)]));
    }
}
