//! The Chat benchmark of Pinter & Zalmanovici §5.1, written here from its
//! published design (the LBS "chat" benchmark, itself after VolanoMark).
//!
//! A server and a client talk over TCP on 127.0.0.1 (real sockets, an
//! ephemeral port). Users come in rooms of [`USERS_PER_ROOM`]; each user has
//! one TCP connection and four threads:
//!
//! ```text
//!   client (per user)                  server (per user)
//!   ─────────────────                  ─────────────────
//!   sender   ── M × 100 B ──socket──►  reader ──► the queue of each of the
//!                                                 room's other 19 users
//!   receiver ◄── 19 × M × 100 B ────── writer ◄── its own queue
//! ```
//!
//! This is the server split of the LBS chat program as we read it: a
//! reader thread per user that broadcasts each message it reads into the
//! bounded queues of the room's other users, and a writer thread per user
//! that drains its own queue to its socket (whatever is queued, in one
//! write). Every message is [`MESSAGE_BYTES`] bytes; each user sends
//! `messages` of them; each is delivered to the room's 19 other users.
//!
//! **Figures.** A run is timed by the client side, from the start gate (all
//! users connected and all threads placed) to the moment the last receiver
//! holds its last message: `time_s`. *Messages delivered* =
//! rooms × 20 × 19 × messages (each send reaching one receiver counts once);
//! *throughput* = messages delivered / `time_s`, in messages per second. The
//! paper also counts the sends themselves ("20·100·(1+19)"); the report
//! gives that count as `messages_transmitted` but the throughput is of
//! deliveries only.
//!
//! **One process.** Server and client live in the bench process, so one
//! dfsched runtime sees both ends of every room and can put a room's server
//! and client threads on the same CPU. With two processes each would run its
//! own runtime, and nothing would make the two choose the same CPU for a
//! room.
//!
//! Modes ([`ChatMode`]): `vanilla`; `dfsched` (every thread, server and
//! client, calls `enter(room)`); `co-thread` (a runtime with the co-thread
//! policy, every thread `attach()`ed — see [`crate::cothread`]); `oracle` (a room's
//! 80 threads pinned to one CPU, rooms spread evenly); `split` (each room's
//! threads dealt round-robin over every CPU).
//!
//! Invariants: every message is checked on arrival (room, sender, sequence
//! number in order per sender) and at the end every receiver must hold
//! exactly `messages` from each of the other 19 users, or the run fails;
//! every queue is bounded; a failure anywhere shuts every socket and queue
//! down so that no thread stays blocked, and every thread is joined before
//! a run returns.

pub mod net;
pub mod place;
pub mod report;
pub mod run;

use crate::cothread;
use serde::{Deserialize, Serialize};

pub use report::{ChatGridReport, ChatModeReport, ChatRatios, ChatReport};
pub use run::{run_chat_cases, ChatBench, ChatRun};

/// Users per room, as in the paper.
pub const USERS_PER_ROOM: usize = 20;
/// Bytes per message, as in the paper.
pub const MESSAGE_BYTES: usize = 100;
/// Threads per user: client sender and receiver, server reader and writer.
pub const THREADS_PER_USER: usize = 4;

/// Default rooms (`--rooms`).
pub const DEFAULT_ROOMS: usize = 4;
/// Default messages each user sends (`--messages`).
pub const DEFAULT_MESSAGES: u64 = 1000;
/// Default runs per mode (`--repeat`).
pub const DEFAULT_REPEAT: usize = 5;
/// Default seed of the per-round mode order.
pub const DEFAULT_SEED: u64 = 1;

/// At most this many rooms: 80 threads and 40 file descriptors each.
pub const MAX_ROOMS: usize = 100;
/// At most this many messages per user.
pub const MAX_MESSAGES: u64 = 1_000_000;
/// At most this many runs per mode.
pub const MAX_REPEAT: usize = 1000;

/// How the threads of one Chat run are placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ChatMode {
    /// No dfsched and no affinity calls: the kernel places every thread.
    Vanilla,
    /// A fresh `dfsched::Runtime` per run; every thread calls
    /// `enter(room + 1)` once, before the start gate.
    Dfsched,
    /// A fresh runtime with the co-thread policy; every thread calls
    /// `attach()` (the whole process is one co-thread group, server and
    /// client alike: the policy knows processes, not rooms).
    CoThread,
    /// Each room's threads pinned to one CPU, rooms spread evenly.
    Oracle,
    /// Each room's threads dealt round-robin over every allowed CPU.
    Split,
}

crate::params::bench_modes!(ChatMode, ChatParamError::UnknownMode {
    Vanilla => "vanilla",
    Dfsched => "dfsched",
    CoThread => "co-thread",
    Oracle => "oracle",
    Split => "split",
});

impl ChatMode {
    /// The modes a run uses when none are named: all of them.
    pub fn available() -> Vec<ChatMode> {
        ChatMode::ALL.to_vec()
    }

    /// Whether this mode runs a dfsched runtime.
    pub fn needs_runtime(self) -> bool {
        matches!(self, ChatMode::Dfsched | ChatMode::CoThread)
    }
}

/// Parses a comma-separated mode list; order is kept; empty, unknown,
/// unavailable or repeated names are errors.
pub fn parse_chat_modes(list: &str) -> Result<Vec<ChatMode>, ChatParamError> {
    crate::params::parse_mode_list(list, ChatParamError::DuplicateMode, ChatParamError::NoModes)
}

/// Why a Chat benchmark did not complete.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// The parameters were refused; nothing ran.
    #[error(transparent)]
    Params(#[from] ChatParamError),
    /// The open-file limit is below what one run holds open.
    #[error(
        "a run with these rooms holds {needed} sockets open but the open-file limit is {limit}; \
         raise it (ulimit -n {needed}) or use fewer --rooms"
    )]
    FileLimit {
        /// File descriptors one run needs.
        needed: u64,
        /// The soft RLIMIT_NOFILE.
        limit: u64,
    },
    /// Setting up the listener or a connection failed.
    #[error("setting up the loopback connections ({what}): {source}")]
    Setup {
        /// Which step failed.
        what: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Reading the process's own state failed.
    #[error(transparent)]
    Os(crate::OsError),
    /// The dfsched runtime could not be configured or started.
    #[error("dfsched runtime: {0}")]
    Runtime(#[source] dfsched::Error),
    /// The co-thread runtime could not be started.
    #[error("co-thread runtime: {0}")]
    CoThread(#[source] cothread::CoThreadError),
    /// A thread could not be created.
    #[error("could not start a chat thread (thread limit? {0})")]
    Spawn(#[source] std::io::Error),
    /// A thread could not place itself or read its counters.
    #[error("chat thread {thread}: {source}")]
    Place {
        /// The thread's index (see `place::thread_index`).
        thread: usize,
        /// What failed.
        #[source]
        source: crate::modes::PlaceError,
    },
    /// A socket failed.
    #[error("room {room} user {user} {}: {source}", role.as_str())]
    Io {
        /// The room.
        room: usize,
        /// The user's index in the room.
        user: usize,
        /// The thread's role.
        role: place::Role,
        /// What failed.
        #[source]
        source: std::io::Error,
    },
    /// A message was lost, duplicated, reordered or malformed.
    #[error("room {room} user {user} {}: {detail}", role.as_str())]
    Protocol {
        /// The room.
        room: usize,
        /// The user's index in the room.
        user: usize,
        /// The thread's role.
        role: place::Role,
        /// What was wrong.
        detail: String,
    },
    /// A thread panicked.
    #[error("chat thread {0} panicked")]
    Panicked(usize),
}

impl ChatError {
    /// Whether this is bad input rather than a failure while running.
    pub fn is_usage(&self) -> bool {
        matches!(self, ChatError::Params(_))
    }
}

/// Why Chat parameters were refused. Nothing was run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ChatParamError {
    /// `--rooms` 0 or beyond [`MAX_ROOMS`].
    #[error("--rooms {0} is not between 1 and {MAX_ROOMS}")]
    Rooms(usize),
    /// `--messages` 0 or beyond [`MAX_MESSAGES`].
    #[error("--messages {0} is not between 1 and {MAX_MESSAGES}")]
    Messages(u64),
    /// `--repeat` 0 or beyond [`MAX_REPEAT`].
    #[error("--repeat {0} is not between 1 and {MAX_REPEAT}")]
    Repeat(usize),
    /// An empty mode list.
    #[error("--modes names no mode (choose from vanilla,dfsched,co-thread,oracle,split)")]
    NoModes,
    /// A mode name that does not exist.
    #[error("unknown mode {0:?} (choose from vanilla,dfsched,co-thread,oracle,split)")]
    UnknownMode(String),
    /// A mode listed twice.
    #[error("mode {0} is listed twice in --modes")]
    DuplicateMode(ChatMode),
}

/// One Chat case.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatParams {
    /// Rooms of [`USERS_PER_ROOM`] users.
    pub rooms: usize,
    /// Messages each user sends.
    pub messages: u64,
    /// Runs per mode.
    pub repeat: usize,
    /// Modes, in the order given.
    pub modes: Vec<ChatMode>,
    /// Seed of the per-round mode order.
    pub seed: u64,
}

impl Default for ChatParams {
    fn default() -> Self {
        ChatParams {
            rooms: DEFAULT_ROOMS,
            messages: DEFAULT_MESSAGES,
            repeat: DEFAULT_REPEAT,
            modes: ChatMode::available(),
            seed: DEFAULT_SEED,
        }
    }
}

impl ChatParams {
    /// Checks every limit; see [`ChatParamError`].
    pub fn validate(&self) -> Result<(), ChatParamError> {
        if !(1..=MAX_ROOMS).contains(&self.rooms) {
            return Err(ChatParamError::Rooms(self.rooms));
        }
        if !(1..=MAX_MESSAGES).contains(&self.messages) {
            return Err(ChatParamError::Messages(self.messages));
        }
        if !(1..=MAX_REPEAT).contains(&self.repeat) {
            return Err(ChatParamError::Repeat(self.repeat));
        }
        crate::params::check_mode_list(
            &self.modes,
            ChatParamError::DuplicateMode,
            ChatParamError::NoModes,
        )
    }

    /// Users in all rooms.
    pub fn users(&self) -> usize {
        self.rooms * USERS_PER_ROOM
    }

    /// Threads in one run (client and server).
    pub fn threads(&self) -> usize {
        self.users() * THREADS_PER_USER
    }

    /// Messages delivered in one run: each send reaches the room's 19 other
    /// users.
    pub fn messages_delivered(&self) -> u64 {
        self.users() as u64 * (USERS_PER_ROOM as u64 - 1) * self.messages
    }

    /// Messages transmitted in one run, the paper's count: each send plus
    /// its 19 deliveries.
    pub fn messages_transmitted(&self) -> u64 {
        self.users() as u64 * USERS_PER_ROOM as u64 * self.messages
    }

    /// File descriptors one run holds open: both ends of one TCP connection
    /// per user, plus the listener.
    pub fn fds_needed(&self) -> u64 {
        self.users() as u64 * 2 + 1
    }
}

/// Table 1 of the paper: rooms × messages per user.
pub const PAPER_ROOMS: [usize; 3] = [10, 20, 30];
/// Table 1 of the paper: messages each user sends.
pub const PAPER_MESSAGES: [u64; 3] = [500, 1000, 1500];
/// Runs per mode and cell of `--grid paper` unless `--repeat` says otherwise
/// (the paper averaged five).
pub const PAPER_REPEAT: usize = 3;

/// The cells of `--grid paper`: `base` supplies the modes and seed;
/// `repeat` overrides [`PAPER_REPEAT`].
pub fn paper_grid(base: &ChatParams, repeat: Option<usize>) -> Vec<ChatParams> {
    let mut cells = Vec::new();
    for &rooms in &PAPER_ROOMS {
        for &messages in &PAPER_MESSAGES {
            cells.push(ChatParams {
                rooms,
                messages,
                repeat: repeat.unwrap_or(PAPER_REPEAT),
                ..base.clone()
            });
        }
    }
    cells
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_follow_the_paper() {
        // The paper: 100 messages per user are 20·100·(1+19) = 40 000
        // transmitted per room.
        let p = ChatParams {
            rooms: 1,
            messages: 100,
            ..ChatParams::default()
        };
        assert_eq!(p.messages_transmitted(), 40_000);
        assert_eq!(p.messages_delivered(), 38_000);
        assert_eq!(p.threads(), 80);
        assert_eq!(p.fds_needed(), 41);
        // Table 1's smallest and largest cells: "2 million … 18 million".
        let small = ChatParams {
            rooms: 10,
            messages: 500,
            ..p.clone()
        };
        assert_eq!(small.messages_transmitted(), 2_000_000);
        let big = ChatParams {
            rooms: 30,
            messages: 1500,
            ..p
        };
        assert_eq!(big.messages_transmitted(), 18_000_000);
    }

    #[test]
    fn bad_params_are_refused_naming_the_flag() {
        let with = |f: fn(&mut ChatParams)| {
            let mut p = ChatParams::default();
            f(&mut p);
            p.validate()
        };
        assert_eq!(with(|_| {}), Ok(()));
        assert_eq!(with(|p| p.rooms = 0), Err(ChatParamError::Rooms(0)));
        assert_eq!(with(|p| p.rooms = 101), Err(ChatParamError::Rooms(101)));
        assert_eq!(with(|p| p.messages = 0), Err(ChatParamError::Messages(0)));
        assert_eq!(with(|p| p.repeat = 0), Err(ChatParamError::Repeat(0)));
        assert_eq!(with(|p| p.modes.clear()), Err(ChatParamError::NoModes));
        assert_eq!(
            with(|p| p.modes = vec![ChatMode::Split, ChatMode::Split]),
            Err(ChatParamError::DuplicateMode(ChatMode::Split))
        );
        assert!(ChatParamError::Rooms(0).to_string().contains("--rooms"));
    }

    #[test]
    fn mode_lists_parse_in_order_and_refuse_strangers() {
        assert_eq!(
            parse_chat_modes("split, vanilla").unwrap(),
            vec![ChatMode::Split, ChatMode::Vanilla]
        );
        assert_eq!(
            parse_chat_modes("vanilla,turbo"),
            Err(ChatParamError::UnknownMode("turbo".into()))
        );
        assert_eq!(parse_chat_modes(","), Err(ChatParamError::NoModes));
        for m in ChatMode::available() {
            assert_eq!(m.as_str().parse::<ChatMode>().unwrap(), m);
            let json = serde_json::to_string(&m).unwrap();
            assert_eq!(json, format!("\"{}\"", m.as_str()));
        }
        assert_eq!(ChatParams::default().modes, ChatMode::ALL.to_vec());
    }

    #[test]
    fn paper_grid_is_table_1() {
        let cells = paper_grid(&ChatParams::default(), None);
        let shape: Vec<(usize, u64)> = cells.iter().map(|c| (c.rooms, c.messages)).collect();
        assert_eq!(
            shape,
            vec![
                (10, 500),
                (10, 1000),
                (10, 1500),
                (20, 500),
                (20, 1000),
                (20, 1500),
                (30, 500),
                (30, 1000),
                (30, 1500)
            ]
        );
        assert!(cells
            .iter()
            .all(|c| c.repeat == PAPER_REPEAT && c.validate().is_ok()));
        assert!(paper_grid(&ChatParams::default(), Some(1))
            .iter()
            .all(|c| c.repeat == 1));
    }
}
