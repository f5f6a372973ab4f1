//! The checker of the state's invariants 1–4 (see `state.rs`) and of the
//! sums, lists and caches it keeps beside them (`State::external_cpus`,
//! `State::pinned`), for tests
//! and `Engine::check_invariants`: it recounts everything from the tasks
//! and compares with what the state keeps. Never on an event's path.

use super::{target_for, Census, State};
use crate::config::Policy;
use crate::cothread::Pinned;
use crate::cpuset::CpuSet;
use crate::ids::{GroupId, GroupKind};
use crate::load::LoadVec;
use crate::topology::Topology;
use std::collections::BTreeMap;

impl State {
    /// Checks invariants 1–4 under `policy`.
    pub(crate) fn check(&self, topo: &Topology, policy: Policy) -> Result<(), String> {
        let machine = topo.cpus();
        self.tasks.check()?;
        self.groups.check()?;
        for (id, _, t) in self.tasks.iter() {
            if !self.apps.contains_key(&t.app) {
                return Err(format!("{id} belongs to unknown {}", t.app));
            }
            let co_thread = policy == Policy::CoThread;
            match (t.df, t.group) {
                (None, None) if !co_thread => {}
                (df, Some(g)) if df.is_some() || co_thread => {
                    let grp = &self.groups[g];
                    let gid = self.groups.id(g);
                    let kind = df.map_or(GroupKind::CoThread, GroupKind::Df);
                    if grp.kind != kind || grp.app != t.app || !grp.members.contains(id) {
                        return Err(format!("{id} ({}, {kind}) not a member of {gid}", t.app));
                    }
                    if t.solo_home.is_some() {
                        return Err(format!("grouped {id} has a solo home"));
                    }
                }
                _ => {
                    return Err(format!(
                        "{id}: df {:?} but group {:?} under {policy}",
                        t.df, t.group
                    ))
                }
            }
            if t.allowed.is_empty() || !t.allowed.is_subset(machine) {
                return Err(format!(
                    "{id} allowed {} is empty or off the machine",
                    t.allowed
                ));
            }
            let want = target_for(topo, &t.allowed, self.home_of(t)).0;
            if t.target != want {
                return Err(format!("{id} targeted {} instead of {want}", t.target));
            }
        }
        for (id, slot, g) in self.groups.iter() {
            if g.members.is_empty() {
                return Err(format!("{id} has no members but was not reclaimed"));
            }
            if (g.home.0 as usize) >= topo.domains().len() {
                return Err(format!("{id} has a home {} not in the topology", g.home));
            }
            let mut census: BTreeMap<CpuSet, Census> = BTreeMap::new();
            for (m, ms) in g.members.iter() {
                if self.tasks.slot(&m) != Some(ms) {
                    return Err(format!("{id} lists {m} at a slot that is not its own"));
                }
                let t = &self.tasks[ms];
                let c = census.entry(t.allowed.clone()).or_default();
                c.members += 1;
                c.runnable += u32::from(t.runnable);
            }
            let census: Vec<(CpuSet, Census)> = census.into_iter().collect();
            if census != g.census {
                return Err(format!("{id} census {:?}, counted {census:?}", g.census));
            }
            let runnable = g
                .members
                .slots()
                .filter(|&m| self.tasks[m].runnable)
                .count();
            if runnable != g.runnable {
                return Err(format!(
                    "{id} counts {} runnable, has {runnable}",
                    g.runnable
                ));
            }
            for (m, ms) in g.members.iter() {
                if self.tasks[ms].group != Some(slot) {
                    return Err(format!("{id} lists {m}, which is not in it"));
                }
            }
            let listed = self.kind_groups(g.app, g.kind);
            if !listed.is_some_and(|l| l.contains(&slot)) {
                return Err(format!("{id} missing from {}'s DF map", g.app));
            }
        }
        for (app, a) in &self.apps {
            for (kind, gs) in &a.dfs {
                let ids: Vec<GroupId> = gs.iter().map(|&g| self.groups.id(g)).collect();
                if ids.is_empty() || !ids.windows(2).all(|w| w[0] < w[1]) {
                    return Err(format!("{app} {kind}: bad group list {ids:?}"));
                }
                if *kind == GroupKind::CoThread && policy != Policy::CoThread {
                    return Err(format!("{app} has co-thread groups under {policy}"));
                }
                for &g in gs {
                    let x = &self.groups[g];
                    if x.app != *app || x.kind != *kind {
                        let gid = self.groups.id(g);
                        return Err(format!("{app} {kind} lists {gid}, which is not its group"));
                    }
                }
            }
        }
        let loaded: Vec<_> = machine
            .iter()
            .filter(|c| self.external[c.0 as usize] > 0)
            .collect();
        if loaded != self.external_cpus {
            return Err(format!(
                "external load on {loaded:?} but listed on {:?}",
                self.external_cpus
            ));
        }
        let mut load = LoadVec::zero(machine);
        for c in machine.iter() {
            load.add_cpu(c, self.external[c.0 as usize]);
        }
        for (_, _, t) in self.tasks.iter().filter(|(_, _, t)| t.runnable) {
            load.add_task(&t.target);
        }
        if load != self.load {
            return Err(format!(
                "load {:?} but recomputed {:?}",
                self.load.pairs(machine),
                load.pairs(machine)
            ));
        }
        let mut pinned = Pinned::maintained(topo);
        for c in machine.iter() {
            pinned.external(topo, c, self.external[c.0 as usize], true);
        }
        for (_, _, t) in self.tasks.iter().filter(|(_, _, t)| t.runnable) {
            pinned.count_tasks(topo, &t.target, None, 1, true);
        }
        if !pinned.same_load(&self.pinned) || pinned != self.pinned {
            return Err(format!(
                "pinned load {:?} but recomputed {pinned:?}",
                self.pinned
            ));
        }
        Ok(())
    }
}
