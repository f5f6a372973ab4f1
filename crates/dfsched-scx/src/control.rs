//! The control state: which group ids each connection made, which scheduler group each maps to, and
//! which threads each placed. It turns checked requests into map writes through [`Maps`] (the loaded
//! scheduler, or a fake in tests), and undoes a connection's work when it closes.
//!
//! Invariants:
//! - a scheduler group id belongs to at most one (connection, client group) at a time; ids are reused
//!   only after their group was reclaimed (its map entry emptied);
//! - a connection can name only its own groups;
//! - when a connection closes, its groups are emptied (queued threads drain anywhere) and the threads it
//!   placed are unplaced, so nothing outlives the program that asked.

use crate::proto::{self, Reply, Request};
use crate::server::ConnId;
use std::collections::{BTreeMap, BTreeSet};

/// The map writes the control state needs (the seam tests fake).
pub trait Maps {
    /// Writes group `gid` (an empty `home` ends it).
    fn set_group(&mut self, gid: u32, home: &[u64], quota: u32) -> Result<(), String>;
    /// Puts `tid` in group `gid`.
    fn place(&mut self, tid: u32, gid: u32) -> Result<(), String>;
    /// Takes `tid` out of its group.
    fn unplace(&mut self, tid: u32) -> Result<(), String>;
    /// The scheduler's state, for `state` requests.
    fn state(&self) -> serde_json::Value;
}

/// Who made what.
pub struct Control {
    /// Scheduler group ids: how many there are, and those free below the high mark.
    max_groups: u32,
    /// CPU words of a home.
    home_words: usize,
    /// Ids never used yet start here.
    next_gid: u32,
    /// Reclaimed ids, reused lowest first (dispatch scans ids below the highest one used).
    free: BTreeSet<u32>,
    /// (connection, its group id) → scheduler group id.
    groups: BTreeMap<(ConnId, u64), u32>,
    /// tid → the connection that placed it last, and the scheduler group it is in.
    placed: BTreeMap<u32, (ConnId, u32)>,
    /// Scheduler group id → its home as last written (for the state).
    homes: BTreeMap<u32, String>,
}

impl Control {
    /// An empty state for a scheduler of `max_groups` groups and homes of `home_words` words.
    pub fn new(max_groups: u32, home_words: usize) -> Control {
        Control {
            max_groups,
            home_words,
            next_gid: 0,
            free: BTreeSet::new(),
            groups: BTreeMap::new(),
            placed: BTreeMap::new(),
            homes: BTreeMap::new(),
        }
    }

    fn alloc(&mut self) -> Option<u32> {
        if let Some(g) = self.free.pop_first() {
            return Some(g);
        }
        (self.next_gid < self.max_groups).then(|| {
            self.next_gid += 1;
            self.next_gid - 1
        })
    }

    /// Carries out one request (its peer checks were done by the socket).
    pub fn handle(&mut self, maps: &mut dyn Maps, conn: ConnId, req: Request) -> Reply {
        match req {
            Request::Group { group, home, quota } => {
                let mask = match proto::parse_cpulist(&home, self.home_words) {
                    Ok(m) => m,
                    Err(e) => return Reply::error(e.to_string()),
                };
                let gid = match self.groups.get(&(conn, group)) {
                    Some(&g) => g,
                    None => match self.alloc() {
                        Some(g) => g,
                        None => return Reply::error("no free scheduler group"),
                    },
                };
                if let Err(e) = maps.set_group(gid, &mask, quota) {
                    if !self.groups.contains_key(&(conn, group)) {
                        self.free.insert(gid);
                    }
                    return Reply::error(e);
                }
                self.groups.insert((conn, group), gid);
                self.homes.insert(gid, home);
                Reply {
                    gid: Some(gid),
                    ..Reply::ok()
                }
            }
            Request::Place { tid, group } => {
                let Some(&gid) = self.groups.get(&(conn, group)) else {
                    return Reply::error(format!("no group {group} on this connection"));
                };
                match maps.place(tid, gid) {
                    Ok(()) => {
                        self.placed.insert(tid, (conn, gid));
                        Reply::ok()
                    }
                    Err(e) => Reply::error(e),
                }
            }
            Request::Unplace { tid } => match maps.unplace(tid) {
                Ok(()) => {
                    self.placed.remove(&tid);
                    Reply::ok()
                }
                Err(e) => Reply::error(e),
            },
            Request::Reclaim { group } => {
                let Some(gid) = self.groups.remove(&(conn, group)) else {
                    return Reply::error(format!("no group {group} on this connection"));
                };
                // Its threads leave it first: an id is reused, and a stale entry would put them in
                // the next group that gets it.
                let members: Vec<u32> = self
                    .placed
                    .iter()
                    .filter(|(_, &(_, g))| g == gid)
                    .map(|(&t, _)| t)
                    .collect();
                for tid in members {
                    let _ = maps.unplace(tid);
                    self.placed.remove(&tid);
                }
                let r = maps.set_group(gid, &[], 0);
                self.free.insert(gid);
                self.homes.remove(&gid);
                match r {
                    Ok(()) => Reply::ok(),
                    Err(e) => Reply::error(e),
                }
            }
            Request::State => {
                let mut state = maps.state();
                state["groups_in_use"] = self.groups.len().into();
                state["threads_placed"] = self.placed.len().into();
                state["groups"] = self.groups_json();
                Reply {
                    state: Some(state),
                    ..Reply::ok()
                }
            }
        }
    }

    /// The groups in use: `[{"gid":2,"home":"0-3","tids":[…]}, …]`, by gid (threads placed by
    /// this server; one that exited stays listed until its group ends).
    pub fn groups_json(&self) -> serde_json::Value {
        let mut tids: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for (&tid, &(_, gid)) in &self.placed {
            tids.entry(gid).or_default().push(tid);
        }
        self.homes
            .iter()
            .map(|(gid, home)| {
                serde_json::json!({
                    "gid": gid,
                    "home": home,
                    "tids": tids.remove(gid).unwrap_or_default(),
                })
            })
            .collect()
    }

    /// Undoes what connection `conn` made: its threads unplaced, its groups emptied.
    pub fn closed(&mut self, maps: &mut dyn Maps, conn: ConnId) {
        let tids: Vec<u32> = self
            .placed
            .iter()
            .filter(|(_, &(c, _))| c == conn)
            .map(|(&t, _)| t)
            .collect();
        for tid in tids {
            let _ = maps.unplace(tid);
            self.placed.remove(&tid);
        }
        let keys: Vec<(ConnId, u64)> = self
            .groups
            .keys()
            .filter(|(c, _)| *c == conn)
            .copied()
            .collect();
        for key in keys {
            if let Some(gid) = self.groups.remove(&key) {
                let _ = maps.set_group(gid, &[], 0);
                self.free.insert(gid);
                self.homes.remove(&gid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Fake {
        groups: BTreeMap<u32, (Vec<u64>, u32)>,
        tids: BTreeMap<u32, u32>,
    }

    impl Maps for Fake {
        fn set_group(&mut self, gid: u32, home: &[u64], quota: u32) -> Result<(), String> {
            self.groups.insert(gid, (home.to_vec(), quota));
            Ok(())
        }
        fn place(&mut self, tid: u32, gid: u32) -> Result<(), String> {
            self.tids.insert(tid, gid);
            Ok(())
        }
        fn unplace(&mut self, tid: u32) -> Result<(), String> {
            self.tids.remove(&tid);
            Ok(())
        }
        fn state(&self) -> serde_json::Value {
            serde_json::json!({})
        }
    }

    fn group(group: u64, home: &str) -> Request {
        Request::Group {
            group,
            home: home.into(),
            quota: 0,
        }
    }

    #[test]
    fn two_connections_using_the_same_group_id_get_different_scheduler_groups() {
        let (mut c, mut m) = (Control::new(4, 1), Fake::default());
        let a = c.handle(&mut m, 1, group(7, "0-1"));
        let b = c.handle(&mut m, 2, group(7, "2-3"));
        assert!(a.ok && b.ok);
        assert_ne!(a.gid, b.gid);
        assert_eq!(m.groups[&a.gid.unwrap()].0, vec![0b0011]);
        assert_eq!(m.groups[&b.gid.unwrap()].0, vec![0b1100]);
    }

    #[test]
    fn a_connection_cannot_place_into_or_reclaim_another_ones_group() {
        let (mut c, mut m) = (Control::new(4, 1), Fake::default());
        assert!(c.handle(&mut m, 1, group(7, "0")).ok);
        assert!(!c.handle(&mut m, 2, Request::Place { tid: 9, group: 7 }).ok);
        assert!(!c.handle(&mut m, 2, Request::Reclaim { group: 7 }).ok);
        assert!(m.tids.is_empty());
    }

    #[test]
    fn a_moved_group_keeps_its_scheduler_id_and_its_threads() {
        let (mut c, mut m) = (Control::new(4, 1), Fake::default());
        let g = c.handle(&mut m, 1, group(3, "0-1")).gid.unwrap();
        assert!(c.handle(&mut m, 1, Request::Place { tid: 50, group: 3 }).ok);
        assert_eq!(c.handle(&mut m, 1, group(3, "2-3")).gid, Some(g));
        assert_eq!(m.groups[&g].0, vec![0b1100]);
        assert_eq!(m.tids[&50], g);
    }

    #[test]
    fn closing_a_connection_unplaces_its_threads_and_empties_its_groups_for_reuse() {
        let (mut c, mut m) = (Control::new(1, 1), Fake::default());
        let g = c.handle(&mut m, 1, group(1, "0")).gid.unwrap();
        assert!(c.handle(&mut m, 1, Request::Place { tid: 8, group: 1 }).ok);
        assert!(
            !c.handle(&mut m, 2, group(1, "1")).ok,
            "only one group exists"
        );
        c.closed(&mut m, 1);
        assert!(m.tids.is_empty());
        assert_eq!(m.groups[&g].0, Vec::<u64>::new());
        assert_eq!(
            c.handle(&mut m, 2, group(1, "1")).gid,
            Some(g),
            "its id is free again"
        );
    }

    #[test]
    fn the_state_lists_each_group_with_its_home_and_threads() {
        let (mut c, mut m) = (Control::new(4, 1), Fake::default());
        let g = c.handle(&mut m, 1, group(3, "0-1")).gid.unwrap();
        assert!(c.handle(&mut m, 1, Request::Place { tid: 50, group: 3 }).ok);
        assert!(c.handle(&mut m, 1, Request::Place { tid: 51, group: 3 }).ok);
        assert_eq!(
            c.groups_json(),
            serde_json::json!([{"gid": g, "home": "0-1", "tids": [50, 51]}])
        );
        assert!(c.handle(&mut m, 1, Request::Reclaim { group: 3 }).ok);
        assert_eq!(c.groups_json(), serde_json::json!([]));
        assert!(
            m.tids.is_empty(),
            "its threads left it, so a reuse of its id takes none of them"
        );
    }

    #[test]
    fn a_reclaimed_group_is_emptied_and_its_id_reused() {
        let (mut c, mut m) = (Control::new(2, 1), Fake::default());
        let g = c.handle(&mut m, 1, group(1, "0")).gid.unwrap();
        assert!(c.handle(&mut m, 1, Request::Reclaim { group: 1 }).ok);
        assert!(m.groups[&g].0.is_empty());
        assert_eq!(c.handle(&mut m, 1, group(2, "1")).gid, Some(g));
        assert_eq!(c.groups.len(), 1);
    }
}
