//! Where each Chat thread goes, per mode.
//!
//! Threads are numbered room by room, user by user, role by role:
//! thread `room · 80 + user · 4 + role` ([`thread_index`]), roles in the
//! order of [`Role`]. The two static plans are pure functions of the room
//! count and the allowed CPUs, built on the DF benchmark's plans (a room
//! plays a DF of 80 threads):
//! - [`room_oracle`]: each room on one CPU, rooms spread so that CPU loads
//!   differ by at most one room (the DF oracle's LPT on equal rooms).
//! - [`room_split`]: each room's threads dealt round-robin over the CPUs,
//!   one counter running across rooms, so every room reaches every CPU (80
//!   threads ≥ any CPU count here) and CPU loads differ by at most one.
//!
//! | mode        | each thread, before the start gate          |
//! |-------------|---------------------------------------------|
//! | `vanilla`   | nothing                                     |
//! | `dfsched`   | `rt.enter(room + 1)`                        |
//! | `co-thread` | `attach()` to the co-thread runtime         |
//! | `oracle`    | pin to its room's CPU                       |
//! | `split`     | pin to its round-robin CPU                  |

use super::{ChatMode, THREADS_PER_USER, USERS_PER_ROOM};
use crate::cothread;
use crate::modes::{oracle_assignment, pin, split_assignment, PlaceError, Placed};
use dfsched_core::CpuId;
use serde::{Deserialize, Serialize};

/// What a Chat thread does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Client side: sends the user's messages.
    Sender,
    /// Client side: receives the room's other users' messages.
    Receiver,
    /// Server side: reads the user's socket, broadcasts into the room.
    Reader,
    /// Server side: writes the user's queue to its socket.
    Writer,
}

impl Role {
    /// Every role, in thread-numbering order.
    pub const ALL: [Role; THREADS_PER_USER] =
        [Role::Sender, Role::Receiver, Role::Reader, Role::Writer];

    /// The role's name, for errors and thread names.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Sender => "sender",
            Role::Receiver => "receiver",
            Role::Reader => "reader",
            Role::Writer => "writer",
        }
    }
}

/// The global index of `user`'s thread in `role`, `user` counted over all
/// rooms (`room · 20 + user in room`).
pub fn thread_index(user: usize, role: Role) -> usize {
    user * THREADS_PER_USER + role as usize
}

/// The CPU of each room under the oracle plan; `cpus` must not be empty.
pub fn room_oracle(rooms: usize, cpus: &[CpuId]) -> Vec<CpuId> {
    oracle_assignment(&vec![USERS_PER_ROOM * THREADS_PER_USER; rooms], cpus)
}

/// The CPU of each thread (by [`thread_index`]) under the split plan;
/// `cpus` must not be empty.
pub fn room_split(rooms: usize, cpus: &[CpuId]) -> Vec<CpuId> {
    let per_room = USERS_PER_ROOM * THREADS_PER_USER;
    let thread_room: Vec<usize> = (0..rooms * per_room).map(|t| t / per_room).collect();
    split_assignment(&thread_room, rooms, cpus)
}

/// One run's placement, shared by its threads.
pub(crate) enum ChatPlacer {
    /// `vanilla`.
    Vanilla,
    /// `dfsched`: the run's runtime.
    Dfsched(dfsched::Runtime),
    /// `co-thread`: the run's co-thread runtime.
    CoThread(dfsched::Runtime),
    /// `oracle`: the CPU of each room.
    Oracle(Vec<CpuId>),
    /// `split`: the CPU of each thread.
    Split(Vec<CpuId>),
}

impl ChatPlacer {
    /// The plan for `mode` over `rooms` rooms and the allowed `cpus`; `rt`
    /// is the run's runtime for the modes that need one.
    pub fn new(
        mode: ChatMode,
        rooms: usize,
        cpus: &[CpuId],
        rt: Option<dfsched::Runtime>,
    ) -> ChatPlacer {
        match mode {
            ChatMode::Vanilla => ChatPlacer::Vanilla,
            ChatMode::Dfsched => {
                ChatPlacer::Dfsched(rt.expect("the dfsched mode runs with a runtime"))
            }
            ChatMode::CoThread => {
                ChatPlacer::CoThread(rt.expect("the co-thread mode runs with a runtime"))
            }
            ChatMode::Oracle => ChatPlacer::Oracle(room_oracle(rooms, cpus)),
            ChatMode::Split => ChatPlacer::Split(room_split(rooms, cpus)),
        }
    }

    /// Places the calling thread, which is thread `thread` of room `room`.
    pub fn place(&self, room: usize, thread: usize) -> Result<Placed, PlaceError> {
        match self {
            ChatPlacer::Vanilla => Ok(Placed::default()),
            ChatPlacer::Dfsched(rt) => {
                rt.enter(room as u64 + 1).map_err(PlaceError::Runtime)?;
                Ok(Placed::default())
            }
            ChatPlacer::CoThread(rt) => {
                cothread::attach(rt).map_err(PlaceError::CoThread)?;
                Ok(Placed::default())
            }
            ChatPlacer::Oracle(room_cpu) => pin(room_cpu[room]),
            ChatPlacer::Split(thread_cpu) => pin(thread_cpu[thread]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dfsched_core::CpuSet;

    fn cpus(n: u32) -> Vec<CpuId> {
        (0..n).map(CpuId).collect()
    }

    #[test]
    fn oracle_puts_each_room_on_one_cpu_and_spreads_rooms_evenly() {
        for (rooms, n) in [(1, 2), (4, 2), (5, 2), (10, 2), (7, 3), (30, 4), (2, 8)] {
            let home = room_oracle(rooms, &cpus(n));
            assert_eq!(home.len(), rooms);
            let per_cpu: Vec<usize> = cpus(n)
                .iter()
                .map(|c| home.iter().filter(|h| *h == c).count())
                .collect();
            let (lo, hi) = (per_cpu.iter().min().unwrap(), per_cpu.iter().max().unwrap());
            assert!(hi - lo <= 1, "{rooms} rooms on {n} CPUs: {per_cpu:?}");
        }
        assert_eq!(room_oracle(2, &cpus(2)), vec![CpuId(0), CpuId(1)]);
        let odd = [CpuId(3), CpuId(7)];
        assert!(room_oracle(5, &odd).iter().all(|c| odd.contains(c)));
    }

    #[test]
    fn split_puts_every_room_on_every_cpu_with_even_loads() {
        for (rooms, n) in [(1, 2), (3, 2), (4, 4), (2, 3)] {
            let c = cpus(n);
            let plan = room_split(rooms, &c);
            assert_eq!(plan.len(), rooms * 80);
            for room in 0..rooms {
                let on: CpuSet = plan[room * 80..(room + 1) * 80].iter().copied().collect();
                assert_eq!(on.len(), n as usize, "room {room} reaches {on}");
            }
            let per_cpu: Vec<usize> = c
                .iter()
                .map(|x| plan.iter().filter(|h| *h == x).count())
                .collect();
            assert!(per_cpu.iter().max().unwrap() - per_cpu.iter().min().unwrap() <= 1);
        }
    }

    #[test]
    fn split_deals_a_users_threads_over_both_cpus() {
        // With two CPUs consecutive threads alternate, so a user's sender
        // and receiver never share a CPU.
        let plan = room_split(1, &cpus(2));
        let user = 3;
        let s = plan[thread_index(user, Role::Sender)];
        let r = plan[thread_index(user, Role::Receiver)];
        assert_ne!(s, r);
    }

    #[test]
    fn thread_indices_are_dense_and_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for user in 0..40 {
            for role in Role::ALL {
                assert!(seen.insert(thread_index(user, role)));
            }
        }
        assert_eq!(seen.len(), 160);
        assert_eq!(*seen.iter().next_back().unwrap(), 159);
    }
}
