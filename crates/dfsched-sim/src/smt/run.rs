//! One run of a workload under one co-scheduling policy: SMT cores whose
//! contexts share an L1 and an L2, driven quantum by quantum.
//!
//! ```text
//!  for each quantum q:
//!    1. reschedule  — the policy fills the contexts (dynamic policies: each
//!                     core lets its most-run resident go, then picks)
//!    2. judge       — right pairing (synthetic labels), Fig. 12 quality of
//!                     every changed context against the activity pick
//!    3. execute     — per core, contexts interleave access by access: the
//!                     one with the smallest clock goes next, until every
//!                     clock reaches the quantum; accesses walk L1 → L2 →
//!                     memory, ITKO counted in each cache, the counters of
//!                     the monitored events filled per context
//!    4. account     — each thread's vector ← its context's counters; its
//!                     work valued at the cycles it would have taken alone;
//!                     per super-set, the quantum's ITKO against the two
//!                     threads' misses (the correlation study of Figs. 9–11)
//! ```
//!
//! Cores share nothing, so a quantum runs them one after another; the only
//! randomness is the seeded generator of the random policy and of the
//! shuffles, so a run is a pure function of its inputs.
//!
//! What is measured, and relative throughput's alone reference, are in
//! [`super::metrics`].

use super::cache::{SmtCache, ThreadIx};
use super::config::{Monitor, SmtConfig, SmtConfigError, VectorSource};
use super::mapping::ThreadMap;
use super::metrics::{l1_super_sets, Concentration, CorrelationSums, Focus, VectorFill};
pub use super::metrics::{AloneTable, Correlation, DecisionCounts, RunReport, ThreadReport};
use super::workload::{Stream, Workload};
use crate::rng::SimRng;
use dfsched_core::activity::{ActivityCounters, ActivityVector, Threshold};
use dfsched_core::smt_pair::{classify, removal, Candidate, PairPicker, Resident, Scorer};
use std::collections::VecDeque;

/// A co-scheduling policy of the simulator.
#[derive(Clone, Debug, PartialEq)]
pub enum SmtPolicy {
    /// The paper's: least vector overlap with the co-runners, plus runs.
    Kihm,
    /// The paper's procedure with no interference term: runs alone.
    RoundRobin,
    /// Linux-like: threads dealt to per-context run queues (thread `i` to
    /// context `i mod (cores·contexts)`), each queue round robin with a
    /// slice of `contexts` quanta, staggered so that one context per core
    /// switches per quantum (the switching rate of the paper's procedure);
    /// no cache information.
    Linux,
    /// The paper's removal, then a uniformly random candidate.
    Random,
    /// Distributed-Intensity-like: balance the pair's total activity,
    /// ignoring where it is.
    Intensity,
    /// The paper's picker on vectors whose super-sets are permuted by a
    /// fixed random permutation per thread.
    Shuffled,
    /// The paper's Linux prototype (§4.2) over [`SmtPolicy::Linux`]: the
    /// default scheduler's next thread runs unless the activity picker
    /// finds one with a strictly lower score among all threads not running
    /// elsewhere ([`PairPicker::pick_over_default`]); a thread so chosen
    /// moves to the back of this context's queue, and the passed-over
    /// default stays first in its own.
    KihmLinux,
    /// Oracle: for each pick, every candidate is run for the next quantum
    /// on a copy of the core; the least ITKO (plus the runs term) wins.
    Lookahead,
    /// A static grouping: groups of `contexts` threads, gang-scheduled in
    /// turn over the cores for `contexts` quanta each (group
    /// `(⌊q/contexts⌋·cores + c) mod G` on core `c`), so that a thread stays
    /// as long as under the dynamic policies.
    Static(Vec<Vec<usize>>),
}

impl SmtPolicy {
    /// The policy's name in reports.
    pub fn name(&self) -> String {
        match self {
            SmtPolicy::Kihm => "kihm".into(),
            SmtPolicy::RoundRobin => "round-robin".into(),
            SmtPolicy::Linux => "linux".into(),
            SmtPolicy::KihmLinux => "kihm-linux".into(),
            SmtPolicy::Random => "random".into(),
            SmtPolicy::Intensity => "intensity".into(),
            SmtPolicy::Shuffled => "shuffled".into(),
            SmtPolicy::Lookahead => "lookahead".into(),
            SmtPolicy::Static(g) => format!("static{g:?}"),
        }
    }
}

/// A thread's scheduling state in a run.
#[derive(Clone, Debug)]
struct Thread {
    stream: Stream,
    map: ThreadMap,
    /// Accesses made.
    done: u64,
    runs: u64,
    last_ran: Option<u64>,
    /// Its last interval's vector (one monitored level: the L2).
    profile: Vec<ActivityVector>,
    /// The same, permuted (the shuffled control).
    shuffled: Vec<ActivityVector>,
    /// Its permutation of super-sets.
    perm: Vec<usize>,
    /// Progress in alone-cycles.
    alone_cycles: u64,
    /// Its vectors' fill, summed over the quanta it ran: hot super-sets
    /// over all (levels over their most at more than one bit).
    fill_sum: f64,
    /// Quanta whose vector was hot in every super-set, and in none.
    all_hot: u64,
    none_hot: u64,
    /// Per quantum run: its monitored events and where they fell (Fig. 2).
    samples: Vec<(u64, Focus)>,
}

#[derive(Clone, Debug)]
struct Core {
    l1: SmtCache,
    l2: SmtCache,
    /// The thread in each context.
    slots: Vec<Option<usize>>,
    /// The quantum each resident arrived in.
    since: Vec<u64>,
    /// L2 ITKO whose victim was running on this core at the time.
    itko_co_running: u64,
}

/// What a core's quantum did: per context, (thread, first access, end
/// access, counters).
struct CoreQuantum {
    work: Vec<(usize, u64, u64, ActivityCounters)>,
    /// L2 misses per super-set (physical), per context.
    misses: Vec<Vec<u32>>,
    /// L2 ITKO per super-set during the quantum.
    itko: Vec<u64>,
}

struct Run<'a> {
    cfg: &'a SmtConfig,
    policy: &'a SmtPolicy,
    threshold: Threshold,
    picker: PairPicker,
    threads: Vec<Thread>,
    cores: Vec<Core>,
    rng: SimRng,
    right: (u64, u64),
    decisions: DecisionCounts,
    correlation: CorrelationSums,
    /// The Linux-like policies' run queue of each context (core-major).
    queues: Vec<VecDeque<usize>>,
    /// Contexts whose thread changed from one quantum to the next.
    context_changes: u64,
    /// The largest lead in quanta run of one thread over another, at the
    /// end of any quantum.
    run_lead: u64,
}

/// Runs `workload` under `policy`; `alone` must be the table of this
/// workload and configuration.
pub fn run(
    cfg: &SmtConfig,
    workload: &Workload,
    policy: &SmtPolicy,
    alone: &mut AloneTable,
) -> Result<RunReport, SmtConfigError> {
    cfg.validate()?;
    let n = workload.threads.len();
    if n == 0 {
        return Err(SmtConfigError::NoThreads);
    }
    if n > 1000 {
        return Err(SmtConfigError::TooBig);
    }
    let s = cfg.super_sets as usize;
    let mut rng = SimRng::with_stream(cfg.seed, 2);
    let idle = ActivityVector::idle(cfg.bits, s).map_err(|_| SmtConfigError::BadBits(cfg.bits))?;
    let threads = workload
        .threads
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let mut perm: Vec<usize> = (0..s).collect();
            for j in (1..s).rev() {
                perm.swap(j, rng.below(j as u64 + 1) as usize);
            }
            Thread {
                stream: t.stream.clone(),
                map: ThreadMap::new(cfg.mapping, cfg.seed, i as ThreadIx),
                done: 0,
                runs: 0,
                last_ran: None,
                profile: vec![idle.clone()],
                shuffled: vec![idle.clone()],
                perm,
                alone_cycles: 0,
                fill_sum: 0.0,
                all_hot: 0,
                none_hot: 0,
                samples: Vec::new(),
            }
        })
        .collect();
    let k = cfg.contexts as usize;
    let cores_n = cfg.cores as usize;
    let cores = (0..cfg.cores)
        .map(|_| Core {
            l1: SmtCache::new(cfg.l1, l1_super_sets(cfg)),
            l2: SmtCache::new(cfg.l2, cfg.super_sets),
            slots: vec![None; k],
            since: vec![0; k],
            itko_co_running: 0,
        })
        .collect();
    let scorer = match policy {
        SmtPolicy::RoundRobin => Scorer::Fair,
        SmtPolicy::Intensity => Scorer::Intensity,
        _ => Scorer::Overlap(cfg.overlap),
    };
    let mut r = Run {
        cfg,
        policy,
        threshold: cfg.threshold(),
        picker: PairPicker {
            scorer,
            weights: cfg.weights,
        },
        threads,
        cores,
        rng,
        right: (0, 0),
        decisions: DecisionCounts::default(),
        correlation: CorrelationSums::default(),
        // Thread i to context i mod (cores · contexts).
        queues: (0..cores_n * k)
            .map(|g| (0..n).filter(|t| t % (cores_n * k) == g).collect())
            .collect(),
        context_changes: 0,
        run_lead: 0,
    };
    let mut rt_sum = 0u64;
    for q in 0..u64::from(cfg.quanta) {
        let before: Vec<Vec<Option<usize>>> = r.cores.iter().map(|c| c.slots.clone()).collect();
        r.reschedule(q, alone);
        r.judge(&before);
        if q > 0 {
            for (core, was) in r.cores.iter().zip(&before) {
                let changed = core.slots.iter().zip(was).filter(|(now, then)| now != then);
                r.context_changes += changed.count() as u64;
            }
        }
        for c in 0..r.cores.len() {
            let cq = execute(cfg, &mut r.cores[c], &mut r.threads);
            if let [a, b] = cq.misses.as_slice() {
                r.correlation.add(a, b, &cq.itko, cfg);
            }
            for (t, a0, a1, counters) in cq.work {
                let th = &mut r.threads[t];
                th.runs += 1;
                th.last_ran = Some(q);
                let v = counters
                    .vector(cfg.bits, r.threshold)
                    .map_err(|_| SmtConfigError::BadBits(cfg.bits))?;
                let fill = v.intensity() / v.super_sets() as f64;
                th.fill_sum += fill;
                th.all_hot += u64::from(fill >= 1.0);
                th.none_hot += u64::from(fill <= 0.0);
                let counts = counters.counts();
                let events = counts.iter().map(|&c| u64::from(c)).sum();
                th.samples.push((events, Focus::of(counts)));
                th.shuffled = vec![v.permuted(&th.perm).expect("perm is a permutation")];
                th.profile = vec![v];
                let ac = alone.cycles(cfg, t, a0, a1);
                th.alone_cycles += ac;
                rt_sum += ac;
            }
        }
        let runs = r.threads.iter().map(|t| t.runs);
        let lead = runs.clone().max().unwrap_or(0) - runs.min().unwrap_or(0);
        r.run_lead = r.run_lead.max(lead);
    }
    Ok(r.report(rt_sum, workload))
}

/// Runs one quantum on `core`: contexts interleave by their clocks.
fn execute(cfg: &SmtConfig, core: &mut Core, threads: &mut [Thread]) -> CoreQuantum {
    let s = cfg.super_sets as usize;
    let busy: Vec<usize> = core.slots.iter().flatten().copied().collect();
    let slow = if busy.len() > 1 {
        u64::from(cfg.timing.issue_slowdown_milli)
    } else {
        1000
    };
    let tm = cfg.timing;
    let end = cfg.quantum_cycles * 1000;
    let mut clocks = vec![0u64; busy.len()];
    let mut counters: Vec<ActivityCounters> =
        busy.iter().map(|_| ActivityCounters::new(s)).collect();
    let starts: Vec<u64> = busy.iter().map(|&t| threads[t].done).collect();
    let mut misses = vec![vec![0u32; s]; busy.len()];
    let itko_before = core.l2.stats().itko_by_super_set.clone();
    loop {
        // The context with the smallest clock goes next (ties: lower slot).
        let mut i = usize::MAX;
        let mut least = end;
        for (j, &c) in clocks.iter().enumerate() {
            if c < least {
                (i, least) = (j, c);
            }
        }
        if i == usize::MAX {
            break;
        }
        let t = busy[i];
        let th = &mut threads[t];
        let a = th.stream.next_access();
        th.done += 1;
        let pa = th.map.translate(a.vaddr);
        let mut cost = u64::from(a.instrs) * u64::from(tm.cpi) * slow;
        if !core.l1.access(pa, t as ThreadIx).hit {
            let at = match cfg.vector_source {
                VectorSource::Physical => pa,
                VectorSource::Virtual => a.vaddr,
            };
            let ss = core.l2.super_set_of(at);
            if cfg.monitor == Monitor::L2Accesses {
                counters[i].record(ss);
            }
            let o = core.l2.access(pa, t as ThreadIx);
            if o.victim.is_some_and(|v| busy.contains(&usize::from(v))) {
                core.itko_co_running += 1;
            }
            if o.hit {
                cost += u64::from(tm.l2_hit_cycles) * 1000;
            } else {
                cost += u64::from(tm.memory_cycles) * 1000;
                let m = &mut misses[i][core.l2.super_set_of(pa)];
                *m = m.saturating_add(1);
                if cfg.monitor == Monitor::L2Misses {
                    counters[i].record(ss);
                }
            }
        }
        clocks[i] += cost;
    }
    let itko = core
        .l2
        .stats()
        .itko_by_super_set
        .iter()
        .zip(&itko_before)
        .map(|(a, b)| a - b)
        .collect();
    CoreQuantum {
        misses,
        itko,
        work: busy
            .iter()
            .zip(starts)
            .zip(counters)
            .map(|((&t, a0), c)| (t, a0, threads[t].done, c))
            .collect(),
    }
}

impl Run<'_> {
    fn resident(&self, t: usize) -> bool {
        self.cores.iter().any(|c| c.slots.contains(&Some(t)))
    }

    fn mean_intensity(&self) -> f64 {
        let n = self.threads.len() as f64;
        self.threads
            .iter()
            .map(|t| t.profile[0].intensity())
            .sum::<f64>()
            / n
    }

    fn reschedule(&mut self, q: u64, alone: &mut AloneTable) {
        let (nc, k) = (self.cores.len(), self.cfg.contexts as usize);
        match self.policy {
            SmtPolicy::Linux | SmtPolicy::KihmLinux => {
                // Per-context queues, a slice of `k` quanta each, staggered
                // so that one context per core switches per quantum (all
                // fill at the start).
                for c in 0..nc {
                    for x in 0..k {
                        if q > 0 && (q as usize + x).checked_rem(k) != Some(0) {
                            continue;
                        }
                        let g = c * k + x;
                        self.cores[c].slots[x] = None;
                        let pick = self.linux_pick(c, x, g);
                        self.set_slot(c, x, pick, q);
                    }
                }
            }
            SmtPolicy::Static(groups) => {
                // A group keeps its core for `k` quanta, as long as a
                // thread stays under the one-swap-per-quantum policies.
                let g = groups.len().max(1);
                let turn = q as usize / k;
                for c in 0..nc {
                    let group = groups.get((turn * nc + c) % g);
                    for x in 0..k {
                        let pick = group.and_then(|gr| gr.get(x)).copied();
                        self.set_slot(c, x, pick, q);
                    }
                }
            }
            _ => {
                if q > 0 {
                    for c in 0..nc {
                        let core = &self.cores[c];
                        let occupied: Vec<usize> =
                            (0..k).filter(|&x| core.slots[x].is_some()).collect();
                        let rs: Vec<Resident> = occupied
                            .iter()
                            .map(|&x| Resident {
                                runs: self.threads[core.slots[x].expect("occupied")].runs,
                                since: core.since[x],
                            })
                            .collect();
                        if let Some(i) = removal(&rs) {
                            self.cores[c].slots[occupied[i]] = None;
                        }
                    }
                }
                for c in 0..nc {
                    for x in 0..k {
                        if self.cores[c].slots[x].is_some() {
                            continue;
                        }
                        let pool: Vec<usize> = (0..self.threads.len())
                            .filter(|&t| !self.resident(t))
                            .collect();
                        if pool.is_empty() {
                            break;
                        }
                        let chosen = self.pick(c, x, &pool, alone);
                        self.set_slot(c, x, Some(chosen), q);
                    }
                }
            }
        }
    }

    /// The next thread of context `g`'s queue (which rotates), or, under
    /// [`SmtPolicy::KihmLinux`], a strictly better one by the activity score.
    fn linux_pick(&mut self, c: usize, x: usize, g: usize) -> Option<usize> {
        // The default: the first queued thread not running elsewhere.
        let pos = self.queues[g].iter().position(|&t| !self.resident(t))?;
        let default = self.queues[g][pos];
        let mut chosen = default;
        if matches!(self.policy, SmtPolicy::KihmLinux) {
            let pool: Vec<usize> = (0..self.threads.len())
                .filter(|&t| !self.resident(t))
                .collect();
            let co = self.co_runners(c, x);
            let cands: Vec<Candidate<'_>> = pool
                .iter()
                .map(|&t| candidate(&self.threads[t], &self.threads[t].profile))
                .collect();
            let cov: Vec<&[ActivityVector]> = co
                .iter()
                .map(|&t| self.threads[t].profile.as_slice())
                .collect();
            let d = pool
                .iter()
                .position(|&t| t == default)
                .expect("default is free");
            let p = self
                .picker
                .pick_over_default(&cands, d, &cov, self.mean_intensity())
                .expect("vectors of one run share their shape")
                .expect("the pool holds the default");
            chosen = pool[p.index];
        }
        if chosen == default {
            self.queues[g].remove(pos);
        } else {
            // Taken from wherever it was queued; the default keeps its turn.
            for queue in &mut self.queues {
                queue.retain(|&t| t != chosen);
            }
        }
        self.queues[g].push_back(chosen);
        Some(chosen)
    }

    fn set_slot(&mut self, c: usize, x: usize, t: Option<usize>, q: u64) {
        let core = &mut self.cores[c];
        if core.slots[x] != t {
            core.since[x] = q;
        }
        core.slots[x] = t;
    }

    fn co_runners(&self, c: usize, x: usize) -> Vec<usize> {
        let core = &self.cores[c];
        (0..core.slots.len())
            .filter(|&y| y != x)
            .filter_map(|y| core.slots[y])
            .collect()
    }

    /// The dynamic policies' pick for context `x` of core `c`.
    fn pick(&mut self, c: usize, x: usize, pool: &[usize], alone: &mut AloneTable) -> usize {
        let co = self.co_runners(c, x);
        match self.policy {
            SmtPolicy::Random => pool[self.rng.below(pool.len() as u64) as usize],
            SmtPolicy::Lookahead => self.lookahead(c, x, pool, alone),
            _ => {
                let shuffled = matches!(self.policy, SmtPolicy::Shuffled);
                fn view(t: &Thread, shuffled: bool) -> &[ActivityVector] {
                    if shuffled {
                        &t.shuffled
                    } else {
                        &t.profile
                    }
                }
                let cands: Vec<Candidate<'_>> = pool
                    .iter()
                    .map(|&t| candidate(&self.threads[t], view(&self.threads[t], shuffled)))
                    .collect();
                let co: Vec<&[ActivityVector]> = co
                    .iter()
                    .map(|&t| view(&self.threads[t], shuffled))
                    .collect();
                let p = self
                    .picker
                    .pick(&cands, &co, self.mean_intensity())
                    .expect("vectors of one run share their shape")
                    .expect("the pool is not empty");
                pool[p.index]
            }
        }
    }

    /// Runs each candidate for one quantum on a copy of the core.
    fn lookahead(&mut self, c: usize, x: usize, pool: &[usize], _alone: &mut AloneTable) -> usize {
        let fewest = pool
            .iter()
            .map(|&t| self.threads[t].runs)
            .min()
            .unwrap_or(0);
        let unit = (self.cfg.l2.lines() / u64::from(self.cfg.super_sets)).max(1) as f64;
        let w = self.cfg.weights;
        let mut best: Option<(f64, u64, usize)> = None;
        for &t in pool {
            let mut core = self.cores[c].clone();
            core.slots[x] = Some(t);
            let mut threads = self.threads.clone();
            let before = core.l2.stats().itko;
            let _ = execute(self.cfg, &mut core, &mut threads);
            let itko = core.l2.stats().itko - before;
            let score = w.interference * itko as f64 / unit
                + w.runs * (self.threads[t].runs - fewest) as f64;
            let key = (score, self.threads[t].runs, t);
            let better = match best {
                None => true,
                Some(b) => key
                    .0
                    .total_cmp(&b.0)
                    .then(key.1.cmp(&b.1))
                    .then(key.2.cmp(&b.2))
                    .is_lt(),
            };
            if better {
                best = Some(key);
            }
        }
        best.expect("the pool is not empty").2
    }

    /// Right pairing and Fig. 12 quality of the contexts that changed.
    fn judge(&mut self, before: &[Vec<Option<usize>>]) {
        let mi = self.mean_intensity();
        let judge = PairPicker {
            scorer: Scorer::Overlap(self.cfg.overlap),
            weights: self.cfg.weights,
        };
        for (c, was) in before.iter().enumerate() {
            let labels: Vec<u32> = self.cores[c]
                .slots
                .iter()
                .flatten()
                .filter_map(|&t| self.threads[t].stream.label())
                .collect();
            if labels.len() >= 2 {
                let mut distinct = labels.clone();
                distinct.sort_unstable();
                distinct.dedup();
                self.right.1 += 1;
                if distinct.len() == labels.len() {
                    self.right.0 += 1;
                }
            }
            for (x, &prev) in was.iter().enumerate() {
                let Some(t) = self.cores[c].slots[x] else {
                    continue;
                };
                if prev == Some(t) {
                    continue;
                }
                let co = self.co_runners(c, x);
                if co.is_empty() {
                    continue;
                }
                // Candidates: every thread not in another context.
                let pool: Vec<usize> = (0..self.threads.len())
                    .filter(|&u| u == t || !self.resident(u))
                    .collect();
                let cands: Vec<Candidate<'_>> = pool
                    .iter()
                    .map(|&u| candidate(&self.threads[u], &self.threads[u].profile))
                    .collect();
                let cov: Vec<&[ActivityVector]> = co
                    .iter()
                    .map(|&u| self.threads[u].profile.as_slice())
                    .collect();
                let scores = judge.scores(&cands, &cov, mi).expect("same shapes");
                let best = judge
                    .pick(&cands, &cov, mi)
                    .expect("same shapes")
                    .expect("t is a candidate");
                let inter: Vec<f64> = scores.iter().map(|s| s.1).collect();
                let least = inter.iter().copied().fold(f64::INFINITY, f64::min);
                let most = inter.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let mine = inter[pool.iter().position(|&u| u == t).expect("in pool")];
                self.decisions
                    .add(classify(mine, best.interference, least, most));
            }
        }
    }

    fn report(&self, rt_sum: u64, workload: &Workload) -> RunReport {
        let total = self.cfg.quantum_cycles as f64 * f64::from(self.cfg.quanta);
        let progress: Vec<f64> = self
            .threads
            .iter()
            .map(|t| t.alone_cycles as f64 / total)
            .collect();
        let sum: f64 = progress.iter().sum();
        let sq: f64 = progress.iter().map(|p| p * p).sum();
        let n = progress.len() as f64;
        let (lo, hi) = progress
            .iter()
            .fold((f64::INFINITY, 0.0f64), |(l, h), &p| (l.min(p), h.max(p)));
        let samples: Vec<&[(u64, Focus)]> =
            self.threads.iter().map(|t| t.samples.as_slice()).collect();
        let concentration = Concentration::of_run(&samples);
        let mut by_ss = vec![0; self.cfg.super_sets as usize];
        let (mut itko, mut itko_l1, mut inter, mut misses, mut accesses) = (0, 0, 0, 0, 0);
        let mut itko_co_running = 0;
        for c in &self.cores {
            let s2 = c.l2.stats();
            itko += s2.itko;
            itko_co_running += c.itko_co_running;
            itko_l1 += c.l1.stats().itko;
            inter += s2.inter_thread_misses;
            misses += s2.misses;
            accesses += s2.accesses;
            for (a, b) in by_ss.iter_mut().zip(&s2.itko_by_super_set) {
                *a += b;
            }
        }
        RunReport {
            policy: self.policy.name(),
            itko,
            itko_co_running,
            itko_l1,
            itko_by_super_set: by_ss,
            inter_thread_misses: inter,
            l2_misses: misses,
            l2_accesses: accesses,
            relative_throughput: rt_sum as f64 / total,
            context_changes: self.context_changes,
            run_lead: self.run_lead,
            fairness_jain: if sq > 0.0 { sum * sum / (n * sq) } else { 1.0 },
            fairness_min_max: if hi > 0.0 { lo / hi } else { 1.0 },
            right_pairing: (self.right.1 > 0).then(|| self.right.0 as f64 / self.right.1 as f64),
            decisions: self.decisions,
            correlation: self.correlation.report(),
            threads: self
                .threads
                .iter()
                .zip(&workload.threads)
                .zip(&progress)
                .zip(concentration)
                .map(|(((t, spec), &p), concentration)| ThreadReport {
                    name: spec.name.clone(),
                    runs: t.runs,
                    accesses: t.done,
                    progress: p,
                    vectors: VectorFill::of(t),
                    concentration,
                })
                .collect(),
        }
    }
}

impl VectorFill {
    fn of(t: &Thread) -> VectorFill {
        // Per quantum run (0 for a thread that never ran).
        let per_run = |x: f64| if t.runs == 0 { 0.0 } else { x / t.runs as f64 };
        VectorFill {
            mean_fill: per_run(t.fill_sum),
            all_hot: per_run(t.all_hot as f64),
            none_hot: per_run(t.none_hot as f64),
        }
    }
}

fn candidate<'a>(t: &Thread, profile: &'a [ActivityVector]) -> Candidate<'a> {
    Candidate {
        runs: t.runs,
        last_ran: t.last_ran,
        priority: 0,
        profile,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::smt::metrics::Pearson;
    use crate::smt::workload;

    fn small(quanta: u32) -> SmtConfig {
        SmtConfig {
            quanta,
            ..SmtConfig::quarter()
        }
    }

    #[test]
    fn pearson_of_a_line_is_one_and_of_a_constant_is_none() {
        let mut p = Pearson::default();
        for x in 0..10 {
            p.add(f64::from(x), 3.0 * f64::from(x) + 1.0);
        }
        assert!((p.r().unwrap() - 1.0).abs() < 1e-12);
        let mut c = Pearson::default();
        c.add(1.0, 2.0);
        c.add(1.0, 3.0);
        assert_eq!(c.r(), None);
    }

    #[test]
    fn a_thread_alone_on_a_core_has_relative_throughput_one() {
        // The IPC model agrees with itself: run alone, a thread's cycles
        // are its alone cycles (up to the last access's overshoot of each
        // quantum).
        let cfg = SmtConfig {
            contexts: 1,
            ..small(5)
        };
        let w = workload::uniform(&cfg.kernel_shape(4), 1, 2, 3);
        let mut alone = AloneTable::new(&cfg, &w);
        let r = run(&cfg, &w, &SmtPolicy::RoundRobin, &mut alone).unwrap();
        assert!(
            (r.relative_throughput - 1.0).abs() < 1e-3,
            "{}",
            r.relative_throughput
        );
        assert_eq!(r.itko, 0, "one thread kicks out no one");
        assert_eq!(r.correlation.samples, 0, "no two-context quantum");
    }

    #[test]
    fn co_running_itko_is_the_part_between_threads_on_one_core_at_once() {
        let rr = |cfg: &SmtConfig, w: &Workload| {
            run(cfg, w, &SmtPolicy::RoundRobin, &mut AloneTable::new(cfg, w)).unwrap()
        };
        // One context per core: threads take turns, so every kick-out is of
        // a descheduled thread's line and none is between co-runners.
        let shape = small(12).kernel_shape(4);
        let w = workload::uniform(&shape, 4, 2, 3);
        let turns = SmtConfig {
            contexts: 1,
            ..small(12)
        };
        let r = rr(&turns, &w);
        assert!(r.itko > 0, "four threads take turns on one L2");
        assert_eq!(r.itko_co_running, 0, "{r:?}");
        // Two threads, each with a working set of the whole L2, on the two
        // contexts of one core never leave it: every kick-out is between
        // co-runners.
        let cfg = small(12);
        let r = rr(&cfg, &workload::uniform(&shape, 2, 1, 3));
        assert!(r.itko > 0, "two working sets share one L2");
        assert_eq!(r.itko_co_running, r.itko);
        // Four threads on two contexts: some of each.
        let r = rr(&cfg, &w);
        assert!(
            0 < r.itko_co_running && r.itko_co_running < r.itko,
            "{} of {}",
            r.itko_co_running,
            r.itko
        );
    }

    #[test]
    fn context_changes_and_the_run_lead_follow_the_switching_and_the_runs_weight() {
        let cfg = small(12);
        let shape = cfg.kernel_shape(4);
        let go = |cfg: &SmtConfig, w: &Workload, p: &SmtPolicy| {
            run(cfg, w, p, &mut AloneTable::new(cfg, w)).unwrap()
        };
        // Round robin lets one context go per quantum and fills it with a
        // thread that has run less: one change per quantum after the first,
        // and no thread more than two quanta ahead of another.
        let four = workload::uniform(&shape, 4, 2, 3);
        let r = go(&cfg, &four, &SmtPolicy::RoundRobin);
        assert_eq!(r.context_changes, 11);
        assert!(r.run_lead <= 2, "{}", r.run_lead);
        let runs: Vec<u64> = r.threads.iter().map(|t| t.runs).collect();
        let spread = runs.iter().max().unwrap() - runs.iter().min().unwrap();
        assert!(
            spread <= r.run_lead,
            "the end is one of the quanta: {runs:?}"
        );
        // Two threads on two contexts: nobody else to switch to.
        let two = workload::uniform(&shape, 2, 1, 3);
        let r = go(&cfg, &two, &SmtPolicy::Kihm);
        assert_eq!((r.context_changes, r.run_lead), (0, 0));
        // One thread hot in the upper half, three in the lower: under the
        // paper's policy with the default weights the upper one pairs with
        // each of the others and keeps its context while the lower three
        // share the other (a lead of several quanta); a runs weight above
        // the most overlap there is (32 super-sets) makes the policy as
        // fair as round robin, and it switches as often.
        let comp = workload::mix(&shape, "slice0/2,slice1/2,slice0/2,slice0/2", 1).unwrap();
        let keep = go(&cfg, &comp, &SmtPolicy::Kihm);
        let fair_cfg = SmtConfig {
            weights: dfsched_core::smt_pair::PairWeights {
                runs: 64.0,
                ..cfg.weights
            },
            ..cfg.clone()
        };
        let fair = go(&fair_cfg, &comp, &SmtPolicy::Kihm);
        assert!(fair.run_lead <= 2, "{}", fair.run_lead);
        assert!(
            keep.run_lead > fair.run_lead,
            "{} vs {}",
            keep.run_lead,
            fair.run_lead
        );
        assert!(keep.context_changes < fair.context_changes);
    }

    #[test]
    fn kihm_linux_overrides_the_default_only_when_vectors_tell_threads_apart() {
        let cfg = small(24);
        let shape = cfg.kernel_shape(4);
        let both = |w: &Workload| {
            let mut alone = AloneTable::new(&cfg, w);
            let l = run(&cfg, w, &SmtPolicy::Linux, &mut alone).unwrap();
            let k = run(&cfg, w, &SmtPolicy::KihmLinux, &mut alone).unwrap();
            (l, k)
        };
        // Linux's queues pair the two lower-half threads and the two upper
        // ones half of the time; the override fixes that.
        let w = workload::mix(&shape, "slice0/2,slice0/2,slice1/2,slice1/2", 1).unwrap();
        let (l, k) = both(&w);
        assert!(l.right_pairing.unwrap() <= 0.6, "{:?}", l.right_pairing);
        assert!(k.right_pairing.unwrap() >= 0.9, "{:?}", k.right_pairing);
        assert!(k.itko < l.itko);
        // Uniform threads: nothing is strictly better; Linux's own run.
        let w = workload::uniform(&shape, 4, 2, 1);
        let (l, k) = both(&w);
        assert_eq!(
            (l.itko, l.relative_throughput),
            (k.itko, k.relative_throughput)
        );
    }

    #[test]
    fn two_context_runs_report_the_correlation_study() {
        let cfg = small(4);
        let w = workload::complementary(&cfg.kernel_shape(4), 4, 2, 1);
        let mut alone = AloneTable::new(&cfg, &w);
        let r = run(&cfg, &w, &SmtPolicy::Random, &mut alone).unwrap();
        let c = &r.correlation;
        assert_eq!(c.samples, 4 * 32);
        assert!(c.r_sum.is_some() && c.r_min.is_some(), "{c:?}");
        assert_eq!(c.r_bits.len(), 5);
        assert!(r.itko > 0 && r.relative_throughput > 0.0);
        assert!(r.threads.iter().all(|t| t.accesses > 0 || t.runs == 0));
    }
}
