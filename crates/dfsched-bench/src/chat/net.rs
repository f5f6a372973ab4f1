//! The Chat threads' work: messages, the server's bounded queues, and the
//! four thread bodies, with the shutdown that always completes.
//!
//! A message is [`MESSAGE_BYTES`] bytes: room (u32 LE), sender's user index
//! in the room (u32 LE), sequence number (u64 LE), then filler. Every hop
//! checks what it can: the server reader that the header is its own user's
//! and in sequence, the client receiver that it comes from another user of
//! its room and is the next from that sender; at the end each receiver must
//! hold exactly `messages` from each of the 19 others. TCP and the FIFO
//! queues keep each sender's messages in order, so any loss or duplicate
//! shows as a sequence gap or an extra.
//!
//! Shutdown. Normal: a sender shuts its write half after its last message;
//! the server reader sees EOF; the last reader of a room closes the room's
//! queues; each writer drains its queue and shuts its write half; the
//! receiver sees EOF. No cycle of waits exists: receivers only read, so
//! writers always progress, so queues drain, so readers progress. On any
//! failure [`Shared::abort`] records the first error, shuts down both halves
//! of every socket (waking every blocked read and write) and aborts every
//! queue (waking every waiter), so every thread returns. As a last resort
//! every socket has read and write timeouts of [`STALL_TIMEOUT`].

use super::place::Role;
use super::{ChatError, MESSAGE_BYTES, USERS_PER_ROOM};
use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// A socket that moves nothing for this long fails the run (a safety net;
/// the normal paths never wait on a socket that will not move).
pub const STALL_TIMEOUT: Duration = Duration::from_secs(120);

/// Messages a server-side user queue holds before its readers wait.
pub const QUEUE_CAPACITY: usize = 256;

/// One message on the wire.
pub type Message = [u8; MESSAGE_BYTES];

/// The message `seq` of `user` (index in its room) in `room`.
pub fn encode(room: u32, user: u32, seq: u64) -> Message {
    let mut m = [0u8; MESSAGE_BYTES];
    m[0..4].copy_from_slice(&room.to_le_bytes());
    m[4..8].copy_from_slice(&user.to_le_bytes());
    m[8..16].copy_from_slice(&seq.to_le_bytes());
    // Filler that varies with the header, so a shifted frame cannot pass.
    for (i, b) in m[16..].iter_mut().enumerate() {
        *b = (seq as u8).wrapping_add(user as u8).wrapping_add(i as u8);
    }
    m
}

/// `(room, user, seq)` of a message, or `None` if its filler is wrong.
pub fn decode(m: &Message) -> Option<(u32, u32, u64)> {
    let room = u32::from_le_bytes(m[0..4].try_into().expect("4 bytes"));
    let user = u32::from_le_bytes(m[4..8].try_into().expect("4 bytes"));
    let seq = u64::from_le_bytes(m[8..16].try_into().expect("8 bytes"));
    let ok = m[16..]
        .iter()
        .enumerate()
        .all(|(i, &b)| b == (seq as u8).wrapping_add(user as u8).wrapping_add(i as u8));
    ok.then_some((room, user, seq))
}

/// Reads one whole message: `Ok(true)` when read, `Ok(false)` at a clean
/// end of stream (before its first byte), an error for a torn message.
fn read_message(r: &mut impl Read, m: &mut Message) -> io::Result<bool> {
    let mut got = 0;
    while got < m.len() {
        match r.read(&mut m[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("stream ended {got} bytes into a message"),
                ))
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// A bounded FIFO of messages for one user's writer.
pub struct Queue {
    state: Mutex<QueueState>,
    /// Signalled when a message is pushed, or on close or abort.
    readable: Condvar,
    /// Signalled when the writer took messages, or on abort.
    writable: Condvar,
}

struct QueueState {
    items: VecDeque<Message>,
    /// No more pushes will come (every reader of the room is done).
    closed: bool,
    /// The run failed; everyone leaves.
    aborted: bool,
}

/// The run was aborted while a thread waited on a queue.
#[derive(Debug)]
pub struct Aborted;

impl Default for Queue {
    fn default() -> Self {
        Queue {
            state: Mutex::new(QueueState {
                items: VecDeque::with_capacity(QUEUE_CAPACITY),
                closed: false,
                aborted: false,
            }),
            readable: Condvar::new(),
            writable: Condvar::new(),
        }
    }
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends `m`, waiting while the queue is full.
    pub fn push(&self, m: &Message) -> Result<(), Aborted> {
        let mut s = self.lock();
        while s.items.len() >= QUEUE_CAPACITY && !s.aborted {
            s = self.writable.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        if s.aborted {
            return Err(Aborted);
        }
        s.items.push_back(*m);
        self.readable.notify_one();
        Ok(())
    }

    /// Moves every queued message into `out`, waiting while there is none;
    /// `Ok(false)` once the queue is closed and empty.
    pub fn take_all(&self, out: &mut Vec<u8>) -> Result<bool, Aborted> {
        let mut s = self.lock();
        while s.items.is_empty() && !s.closed && !s.aborted {
            s = self.readable.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        if s.aborted {
            return Err(Aborted);
        }
        if s.items.is_empty() {
            return Ok(false);
        }
        for m in s.items.drain(..) {
            out.extend_from_slice(&m);
        }
        self.writable.notify_all();
        Ok(true)
    }

    /// No more pushes will come.
    pub fn close(&self) {
        self.lock().closed = true;
        self.readable.notify_all();
    }

    /// Wakes every waiter with [`Aborted`].
    pub fn abort(&self) {
        self.lock().aborted = true;
        self.readable.notify_all();
        self.writable.notify_all();
    }
}

/// Everything one run's threads share.
pub struct Shared {
    /// Messages each user sends.
    pub messages: u64,
    /// Per user (over all rooms): the client end of its connection.
    pub client: Vec<TcpStream>,
    /// Per user: the server end.
    pub server: Vec<TcpStream>,
    /// Per user: the server's queue for its writer.
    pub queues: Vec<Queue>,
    /// Per room: server readers still reading.
    readers_left: Vec<AtomicUsize>,
    /// Set once by the first failure.
    aborted: AtomicBool,
    /// The first failure.
    first_error: Mutex<Option<ChatError>>,
}

impl Shared {
    /// The shared state of a run whose connections are `client` and
    /// `server` (one per user, rooms of [`USERS_PER_ROOM`] in order).
    pub fn new(messages: u64, client: Vec<TcpStream>, server: Vec<TcpStream>) -> Shared {
        let rooms = client.len() / USERS_PER_ROOM;
        Shared {
            messages,
            queues: (0..client.len()).map(|_| Queue::default()).collect(),
            readers_left: (0..rooms)
                .map(|_| AtomicUsize::new(USERS_PER_ROOM))
                .collect(),
            client,
            server,
            aborted: AtomicBool::new(false),
            first_error: Mutex::new(None),
        }
    }

    /// Whether the run was aborted.
    pub fn is_aborted(&self) -> bool {
        // Acquire: pairs with the Release in `abort`, so a thread that sees
        // the flag also sees the recorded error.
        self.aborted.load(Ordering::Acquire)
    }

    /// Fails the run with `e` (kept only if it is the first failure) and
    /// wakes every thread; see the module doc.
    pub fn abort(&self, e: ChatError) {
        {
            let mut first = self.first_error.lock().unwrap_or_else(|p| p.into_inner());
            if first.is_none() {
                *first = Some(e);
            }
        }
        if self.aborted.swap(true, Ordering::AcqRel) {
            return;
        }
        for s in self.client.iter().chain(&self.server) {
            // Errors here mean the socket is already shut: nothing to wake.
            let _ = s.shutdown(Shutdown::Both);
        }
        for q in &self.queues {
            q.abort();
        }
    }

    /// The first failure, if any.
    pub fn take_error(&self) -> Option<ChatError> {
        self.first_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    /// Runs `user`'s thread in `role` to its end; the receiver returns when
    /// it held its last message. Failures abort the run and return `None`.
    pub fn run_role(&self, user: usize, role: Role) -> Option<Option<Instant>> {
        let out = match role {
            Role::Sender => self.send(user).map(|()| None),
            Role::Receiver => self.receive(user).map(Some),
            Role::Reader => self.read(user).map(|()| None),
            Role::Writer => self.write(user).map(|()| None),
        };
        match out {
            Ok(finish) => Some(finish),
            Err(e) => {
                // After an abort, our own error is only its echo.
                if !self.is_aborted() {
                    self.abort(e);
                }
                None
            }
        }
    }

    fn io_error(user: usize, role: Role, source: io::Error) -> ChatError {
        ChatError::Io {
            room: user / USERS_PER_ROOM,
            user: user % USERS_PER_ROOM,
            role,
            source,
        }
    }

    fn protocol(user: usize, role: Role, detail: String) -> ChatError {
        ChatError::Protocol {
            room: user / USERS_PER_ROOM,
            user: user % USERS_PER_ROOM,
            role,
            detail,
        }
    }

    /// Client sender: `messages` writes of one message, then EOF.
    fn send(&self, user: usize) -> Result<(), ChatError> {
        let (room, me) = (
            (user / USERS_PER_ROOM) as u32,
            (user % USERS_PER_ROOM) as u32,
        );
        let mut s = &self.client[user];
        for seq in 0..self.messages {
            s.write_all(&encode(room, me, seq))
                .map_err(|e| Self::io_error(user, Role::Sender, e))?;
        }
        s.shutdown(Shutdown::Write)
            .map_err(|e| Self::io_error(user, Role::Sender, e))
    }

    /// Server reader: each message of its user into the room's other
    /// queues; the room's last reader closes the room's queues.
    fn read(&self, user: usize) -> Result<(), ChatError> {
        let room = user / USERS_PER_ROOM;
        let me = user % USERS_PER_ROOM;
        let first = room * USERS_PER_ROOM;
        let mut r = io::BufReader::with_capacity(16 * 1024, &self.server[user]);
        let mut m = [0u8; MESSAGE_BYTES];
        let mut next = 0u64;
        while read_message(&mut r, &mut m).map_err(|e| Self::io_error(user, Role::Reader, e))? {
            if decode(&m) != Some((room as u32, me as u32, next)) {
                return Err(Self::protocol(
                    user,
                    Role::Reader,
                    format!("message {next} arrived as {:?}", decode(&m)),
                ));
            }
            next += 1;
            for other in (first..first + USERS_PER_ROOM).filter(|&o| o != user) {
                if self.queues[other].push(&m).is_err() {
                    return Ok(()); // aborted: the cause is recorded already
                }
            }
        }
        if self.is_aborted() {
            return Ok(());
        }
        if next != self.messages {
            return Err(Self::protocol(
                user,
                Role::Reader,
                format!("{next} messages arrived, {} were sent", self.messages),
            ));
        }
        // AcqRel: the last reader sees every other reader's pushes done.
        if self.readers_left[room].fetch_sub(1, Ordering::AcqRel) == 1 {
            for q in &self.queues[first..first + USERS_PER_ROOM] {
                q.close();
            }
        }
        Ok(())
    }

    /// Server writer: drains its queue to its socket, then EOF.
    fn write(&self, user: usize) -> Result<(), ChatError> {
        let mut s = &self.server[user];
        let mut buf = Vec::with_capacity(QUEUE_CAPACITY * MESSAGE_BYTES);
        loop {
            match self.queues[user].take_all(&mut buf) {
                Err(Aborted) => return Ok(()),
                Ok(false) => break,
                Ok(true) => {
                    s.write_all(&buf)
                        .map_err(|e| Self::io_error(user, Role::Writer, e))?;
                    buf.clear();
                }
            }
        }
        s.shutdown(Shutdown::Write)
            .map_err(|e| Self::io_error(user, Role::Writer, e))
    }

    /// Client receiver: every message of the room's other users, checked;
    /// returns when the last one arrived, after reading on to EOF (so an
    /// extra message is caught).
    fn receive(&self, user: usize) -> Result<Instant, ChatError> {
        let room = (user / USERS_PER_ROOM) as u32;
        let me = user % USERS_PER_ROOM;
        let want = self.messages * (USERS_PER_ROOM as u64 - 1);
        let mut expected = [0u64; USERS_PER_ROOM];
        let mut got = 0u64;
        let mut finish = None;
        let mut r = io::BufReader::with_capacity(64 * 1024, &self.client[user]);
        let mut m = [0u8; MESSAGE_BYTES];
        while read_message(&mut r, &mut m).map_err(|e| Self::io_error(user, Role::Receiver, e))? {
            let ok = match decode(&m) {
                Some((rm, from, seq)) => {
                    let from = from as usize;
                    rm == room
                        && from < USERS_PER_ROOM
                        && from != me
                        && seq == expected[from]
                        && seq < self.messages
                }
                None => false,
            };
            if !ok {
                return Err(Self::protocol(
                    user,
                    Role::Receiver,
                    format!(
                        "unexpected message {:?} after {got} (lost, duplicated or foreign)",
                        decode(&m)
                    ),
                ));
            }
            let (_, from, _) = decode(&m).expect("checked above");
            expected[from as usize] += 1;
            got += 1;
            if got == want {
                finish = Some(Instant::now());
            }
        }
        if self.is_aborted() {
            return Ok(Instant::now());
        }
        match finish {
            Some(t) => Ok(t),
            None => Err(Self::protocol(
                user,
                Role::Receiver,
                format!("{got} of {want} messages arrived before the end of stream"),
            )),
        }
    }

    /// Sets [`STALL_TIMEOUT`] on every socket.
    pub fn set_timeouts(&self) -> io::Result<()> {
        for s in self.client.iter().chain(&self.server) {
            s.set_read_timeout(Some(STALL_TIMEOUT))?;
            s.set_write_timeout(Some(STALL_TIMEOUT))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_a_shifted_frame_fails() {
        let m = encode(3, 19, 123_456);
        assert_eq!(m.len(), 100);
        assert_eq!(decode(&m), Some((3, 19, 123_456)));
        let mut shifted = [0u8; MESSAGE_BYTES];
        shifted[1..].copy_from_slice(&m[..99]);
        assert_eq!(decode(&shifted), None);
    }

    #[test]
    fn torn_messages_are_errors_and_clean_ends_are_not() {
        let m = encode(0, 1, 2);
        let mut two = m.to_vec();
        two.extend_from_slice(&m[..40]);
        let mut r = &two[..];
        let mut buf = [0u8; MESSAGE_BYTES];
        assert!(read_message(&mut r, &mut buf).unwrap());
        assert_eq!(buf, m);
        assert!(
            read_message(&mut r, &mut buf).is_err(),
            "40 bytes of a message"
        );
        let mut empty: &[u8] = &[];
        assert!(!read_message(&mut empty, &mut buf).unwrap());
    }

    #[test]
    fn a_full_queue_waits_and_abort_wakes_every_waiter() {
        let q = Queue::default();
        for i in 0..QUEUE_CAPACITY {
            q.push(&encode(0, 0, i as u64)).unwrap();
        }
        std::thread::scope(|s| {
            let pusher = s.spawn(|| q.push(&encode(0, 0, 999)));
            // The pusher waits (the queue is full) until the abort.
            q.abort();
            assert!(pusher.join().unwrap().is_err());
        });
        let mut out = Vec::new();
        assert!(q.take_all(&mut out).is_err(), "aborted queues give nothing");
    }

    #[test]
    fn a_closed_queue_drains_then_ends() {
        let q = Queue::default();
        q.push(&encode(1, 2, 0)).unwrap();
        q.push(&encode(1, 2, 1)).unwrap();
        q.close();
        let mut out = Vec::new();
        assert!(q.take_all(&mut out).unwrap());
        assert_eq!(out.len(), 2 * MESSAGE_BYTES);
        assert_eq!(&out[..MESSAGE_BYTES], &encode(1, 2, 0)[..], "FIFO");
        assert!(!q.take_all(&mut out).unwrap(), "closed and empty");
    }
}
