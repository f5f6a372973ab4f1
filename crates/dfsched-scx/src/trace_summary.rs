//! The dispatch trace's summary (`dfsched-scx trace FILE`): a pure function of the parsed events
//! ([`crate::trace::parse`]) that says, per CPU, how the groups' threads followed one another (runs of
//! one group back to back: succession), per group where it ran and whether on its home, per thread
//! whether it followed its placement.
//!
//! ```text
//!   CPU 7:  A A A A A A A A B B B B B B B B A A …     runs of 8: 7 successions, then a switch
//!           └──── run ────┘ └──── run ────┘
//! ```
//!
//! Invariants: a run record is judged against the maps the events before it rebuilt (a home written
//! at t applies to records after t); records outside `[since, until)` are not counted; equal inputs,
//! equal summaries (ordered maps only).

use crate::proto::format_cpulist;
use crate::trace::{EndLine, Event, Trace, WORDS};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// A group's name in a summary: its id, or `-` for threads with none.
fn group_name(gid: Option<u32>) -> String {
    gid.map_or_else(|| "-".to_string(), |g| g.to_string())
}

fn has(mask: &[u64], cpu: u32) -> bool {
    mask.get(cpu as usize / 64)
        .is_some_and(|w| w >> (cpu % 64) & 1 == 1)
}

fn cpus_list(cpus: &BTreeSet<u32>) -> String {
    let mut mask = vec![0u64; WORDS.max(cpus.last().map_or(0, |&c| c as usize / 64 + 1))];
    for &c in cpus {
        mask[c as usize / 64] |= 1 << (c % 64);
    }
    format_cpulist(&mask)
}

/// One CPU's runs: maximal sequences of consecutive records on it from one group (threads with no
/// group count as one group, `-`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CpuRuns {
    /// Records (a thread getting this CPU).
    pub records: u64,
    /// Runs.
    pub runs: u64,
    /// Consecutive records from the same group: succession.
    pub successions: u64,
    /// Consecutive records from different groups.
    pub switches: u64,
    /// successions / (successions + switches); 0 with neither.
    pub succession_share: f64,
    /// Records per run, on average.
    pub mean_run: f64,
    /// The longest run, in records.
    pub max_run: u64,
    /// How many runs had each length (in records).
    pub run_lengths: BTreeMap<u64, u64>,
}

/// Where a group's threads ran in one time window.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Window {
    /// Its start, ns after the trace's first event.
    pub from_ns: u64,
    /// The CPUs its records were on.
    pub cpus: String,
    /// Its records in the window.
    pub records: u64,
}

/// Runs judged against the home in force when each started: on it; off it while in flight (the
/// thread's runs after a change of its group or home, before its first one on its new home: a thread
/// dispatched, or already queued on a CPU, before the map changed); off it after that.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Placement {
    /// Runs on the home.
    pub on_home: u64,
    /// Runs off it before the thread's first on it since the change.
    pub in_flight: u64,
    /// Runs off it after that: the scheduler ran a thread outside its home.
    pub off_home: u64,
    /// The CPUs the runs were on.
    pub cpus: String,
    #[serde(skip)]
    seen: BTreeSet<u32>,
}

impl Placement {
    fn count(&mut self, cpu: u32, on: bool, settled: bool) {
        if on {
            self.on_home += 1;
        } else if settled {
            self.off_home += 1;
        } else {
            self.in_flight += 1;
        }
        self.seen.insert(cpu);
        self.cpus = cpus_list(&self.seen);
    }
}

/// A home a group was given.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HomeChange {
    /// When (the trace's clock, ns).
    pub t_ns: u64,
    /// The home (`-`: the group ended).
    pub home: String,
}

/// One group in the trace.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct GroupSummary {
    /// Its records.
    pub records: u64,
    /// Where they were, window by window (windows with none left out).
    pub windows: Vec<Window>,
    /// The homes it was given, in order.
    pub homes: Vec<HomeChange>,
    /// Its runs since its last home change, against that home.
    pub since_home: Placement,
}

/// A thread's latest placement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Placed {
    /// When (the trace's clock, ns).
    pub t_ns: u64,
    /// Its group (`-`: unplaced).
    pub gid: String,
}

/// One thread in the trace.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TidSummary {
    /// Its records.
    pub records: u64,
    /// The groups its records name, in order of first appearance.
    pub groups: Vec<String>,
    /// Its last placement (or unplacement) in the trace.
    pub last_place: Option<Placed>,
    /// Its runs since then (since the trace's start if none), against its group's home of the moment.
    pub since_place: Placement,
}

/// What `dfsched-scx trace` prints.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Run records counted (those at or after `since`).
    pub records: u64,
    /// The trace's first event's time (ns, CLOCK_MONOTONIC).
    pub t0_ns: u64,
    /// From the first to the last event, ns.
    pub span_ns: u64,
    /// Records before this time were not counted (0: all were); map events before it still apply.
    pub since_ns: u64,
    /// Records at or after this time were not counted (`None`: all were), nor map events after it.
    pub until_ns: Option<u64>,
    /// The window of [`GroupSummary::windows`], ns.
    pub window_ns: u64,
    /// The end line (`None`: the trace was cut short).
    pub end: Option<EndLine>,
    /// Per CPU.
    pub cpus: BTreeMap<u32, CpuRuns>,
    /// Per group (`-`: threads with none).
    pub groups: BTreeMap<String, GroupSummary>,
    /// Per thread.
    pub tids: BTreeMap<u32, TidSummary>,
    /// CPUs that came online and went offline (the `C` lines, in `[since, until)`).
    pub hotplug: Hotplug,
}

/// The hotplug events of a trace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Hotplug {
    /// CPUs that came online.
    pub online: u64,
    /// CPUs that went offline.
    pub offline: u64,
    /// Each event, in time order.
    pub events: Vec<CpuChange>,
}

/// One CPU coming online or going offline.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CpuChange {
    /// When (ns, CLOCK_MONOTONIC).
    pub t_ns: u64,
    /// The CPU.
    pub cpu: u32,
    /// Online (`true`) or offline.
    pub online: bool,
}

/// Summarises `trace`: per CPU its runs, per group its CPUs window by window and whether it ran on
/// its home, per thread whether it followed its placement. Only records in `[since_ns, until_ns)`
/// are counted (map changes before `since_ns` still apply; none from `until_ns` on); `window_ns` (at
/// least 1) cuts time into windows from the first event.
pub fn summarise(trace: &Trace, since_ns: u64, until_ns: Option<u64>, window_ns: u64) -> Summary {
    let window_ns = window_ns.max(1);
    let t0 = trace.events.first().map_or(0, Event::t_ns);
    let t_last = trace.events.last().map_or(0, Event::t_ns);
    let mut s = Summary {
        t0_ns: t0,
        span_ns: t_last - t0,
        since_ns,
        until_ns,
        window_ns,
        end: trace.end,
        ..Summary::default()
    };
    // The maps as the events rebuild them.
    let mut homes: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    let mut members: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
    // Whether a thread has run on its home since its last change (a run off it is then no longer
    // in flight).
    let mut settled: BTreeMap<u32, bool> = BTreeMap::new();
    // Per CPU: the group of its last record, and the length of the current run.
    let mut last: BTreeMap<u32, (Option<u32>, u64)> = BTreeMap::new();
    // Per group and window index: CPUs and records.
    let mut windows: BTreeMap<String, BTreeMap<u64, (BTreeSet<u32>, u64)>> = BTreeMap::new();
    for ev in &trace.events {
        if until_ns.is_some_and(|u| ev.t_ns() >= u) {
            break;
        }
        match ev {
            Event::Group { t_ns, gid, home } => {
                let g = s.groups.entry(gid.to_string()).or_default();
                let text = home
                    .as_deref()
                    .map_or_else(|| "-".to_string(), format_cpulist);
                if g.homes.last().map(|h| &h.home) != Some(&text) {
                    g.homes.push(HomeChange {
                        t_ns: *t_ns,
                        home: text,
                    });
                    g.since_home = Placement::default();
                    for t in members.get(gid).into_iter().flatten() {
                        settled.insert(*t, false);
                    }
                }
                match home {
                    Some(h) => homes.insert(*gid, h.clone()),
                    None => homes.remove(gid),
                };
            }
            Event::Place { t_ns, tid, gid } => {
                for m in members.values_mut() {
                    m.remove(tid);
                }
                members.entry(*gid).or_default().insert(*tid);
                settled.insert(*tid, false);
                let t = s.tids.entry(*tid).or_default();
                t.last_place = Some(Placed {
                    t_ns: *t_ns,
                    gid: gid.to_string(),
                });
                t.since_place = Placement::default();
            }
            Event::Cpu { t_ns, cpu, online } => {
                if *t_ns >= since_ns {
                    if *online {
                        s.hotplug.online += 1;
                    } else {
                        s.hotplug.offline += 1;
                    }
                    s.hotplug.events.push(CpuChange {
                        t_ns: *t_ns,
                        cpu: *cpu,
                        online: *online,
                    });
                }
            }
            Event::Unplace { t_ns, tid } => {
                for m in members.values_mut() {
                    m.remove(tid);
                }
                settled.insert(*tid, false);
                let t = s.tids.entry(*tid).or_default();
                t.last_place = Some(Placed {
                    t_ns: *t_ns,
                    gid: "-".into(),
                });
                t.since_place = Placement::default();
            }
            Event::Run(r) => {
                // On its home: the home of the group the record names, at this moment; a thread
                // with no group has every CPU for home.
                let on = match r.gid {
                    None => true,
                    Some(g) => homes.get(&g).is_some_and(|h| has(h, r.cpu)),
                };
                let was_settled = *settled.get(&r.tid).unwrap_or(&false);
                if on {
                    settled.insert(r.tid, true);
                }
                if r.t_ns < since_ns {
                    continue;
                }
                s.records += 1;
                let name = group_name(r.gid);
                let g = s.groups.entry(name.clone()).or_default();
                g.records += 1;
                g.since_home.count(r.cpu, on, was_settled);
                let w = windows
                    .entry(name.clone())
                    .or_default()
                    .entry((r.t_ns - t0) / window_ns)
                    .or_default();
                w.0.insert(r.cpu);
                w.1 += 1;
                let t = s.tids.entry(r.tid).or_default();
                t.records += 1;
                if !t.groups.contains(&name) {
                    t.groups.push(name);
                }
                t.since_place.count(r.cpu, on, was_settled);
                let c = s.cpus.entry(r.cpu).or_default();
                c.records += 1;
                let run = last.entry(r.cpu).or_insert((r.gid, 0));
                if c.records == 1 {
                    c.runs = 1;
                } else if run.0 == r.gid {
                    c.successions += 1;
                } else {
                    c.switches += 1;
                    c.runs += 1;
                    *c.run_lengths.entry(run.1).or_default() += 1;
                    c.max_run = c.max_run.max(run.1);
                    *run = (r.gid, 0);
                }
                run.1 += 1;
            }
        }
    }
    // The runs still open at the end.
    for (cpu, (_, len)) in last {
        if let Some(c) = s.cpus.get_mut(&cpu) {
            *c.run_lengths.entry(len).or_default() += 1;
            c.max_run = c.max_run.max(len);
        }
    }
    for c in s.cpus.values_mut() {
        let pairs = c.successions + c.switches;
        c.succession_share = if pairs == 0 {
            0.0
        } else {
            c.successions as f64 / pairs as f64
        };
        c.mean_run = c.records as f64 / c.runs.max(1) as f64;
    }
    for (name, ws) in windows {
        if let Some(g) = s.groups.get_mut(&name) {
            g.windows = ws
                .into_iter()
                .map(|(i, (cpus, records))| Window {
                    from_ns: i * window_ns,
                    cpus: cpus_list(&cpus),
                    records,
                })
                .collect();
        }
    }
    s
}

/// The summary as text, for people.
pub fn render(s: &Summary) -> String {
    let mut out = String::new();
    let ms = |ns: u64| ns as f64 / 1e6;
    out += &format!(
        "{} run records over {:.1} ms{}; {}\n",
        s.records,
        ms(s.span_ns),
        if s.since_ns > 0 {
            format!(" (counted from {} ns)", s.since_ns)
        } else {
            String::new()
        },
        match s.end {
            Some(e) => format!(
                "ended: {} written, {} dropped (ring full), {} dropped (size limit)",
                e.records, e.dropped_ring, e.dropped_size
            ),
            None => "no end line: the trace was cut short".into(),
        }
    );
    if !s.hotplug.events.is_empty() {
        let changes: Vec<String> = s
            .hotplug
            .events
            .iter()
            .map(|c| {
                format!(
                    "cpu {} {} at +{:.1} ms",
                    c.cpu,
                    if c.online { "online" } else { "offline" },
                    ms(c.t_ns - s.t0_ns)
                )
            })
            .collect();
        out += &format!(
            "hotplug: {} online, {} offline: {}\n",
            s.hotplug.online,
            s.hotplug.offline,
            changes.join(", ")
        );
    }
    out += "per CPU: records, runs (same group back to back), successions / switches, mean and longest run\n";
    for (cpu, c) in &s.cpus {
        out += &format!(
            "  cpu {cpu}: {} records, {} runs, {} successions / {} switches ({:.0} %), mean run {:.2}, longest {}\n",
            c.records,
            c.runs,
            c.successions,
            c.switches,
            c.succession_share * 100.0,
            c.mean_run,
            c.max_run
        );
    }
    out += &format!(
        "per group: homes, runs since the last home (on / in flight / off), CPUs per {:.0} ms window\n",
        ms(s.window_ns)
    );
    for (name, g) in &s.groups {
        let homes: Vec<String> = g
            .homes
            .iter()
            .map(|h| format!("{}@{:.1}ms", h.home, ms(h.t_ns.saturating_sub(s.t0_ns))))
            .collect();
        let p = &g.since_home;
        out += &format!(
            "  group {name}: {} records; homes [{}]; since: {} on / {} in flight / {} off ({})\n   ",
            g.records,
            homes.join(" "),
            p.on_home,
            p.in_flight,
            p.off_home,
            p.cpus
        );
        for w in &g.windows {
            out += &format!(" {:.0}ms:{}", ms(w.from_ns), w.cpus);
        }
        out += "\n";
    }
    out += "per thread: groups, last placement, runs since (on / in flight / off)\n";
    for (tid, t) in &s.tids {
        let p = &t.since_place;
        out += &format!(
            "  tid {tid}: {} records, groups [{}], placed {}, since: {} on / {} in flight / {} off ({})\n",
            t.records,
            t.groups.join(" "),
            t.last_place
                .as_ref()
                .map_or_else(|| "never".to_string(), |p| format!("in {} at {:.1}ms", p.gid, ms(p.t_ns.saturating_sub(s.t0_ns)))),
            p.on_home,
            p.in_flight,
            p.off_home,
            p.cpus
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::parse;

    const H: &str = "# dfsched-scx trace 1 (CLOCK_MONOTONIC ns): test\n";

    fn run(t: u64, cpu: u32, tid: u32, gid: Option<u32>) -> String {
        format!("R {t} {cpu} {tid} {}\n", group_name(gid))
    }

    /// Two groups alternating on CPU 3 by the given pattern of group ids, 1 ms apart.
    fn on_one_cpu(pattern: &[u32]) -> Trace {
        let mut text = String::from(H);
        text += "G 0 0 3 0\nG 0 1 3 0\nP 0 10 0\nP 0 11 0\nP 0 20 1\nP 0 21 1\n";
        for (i, &g) in pattern.iter().enumerate() {
            let tid = if g == 0 {
                10 + i as u32 % 2
            } else {
                20 + i as u32 % 2
            };
            text += &run(1_000_000 * (i as u64 + 1), 3, tid, Some(g));
        }
        parse(&text).unwrap()
    }

    #[test]
    fn hotplug_lines_are_counted_and_listed_from_since_on() {
        let text = "# dfsched-scx trace 2 (CLOCK_MONOTONIC ns): test\n\
                    C 1000000 5 off\nR 1500000 4 10 -\nC 2000000 4 off\nC 3000000 4 on\nC 4000000 5 on\n";
        let t = parse(text).unwrap();
        let s = summarise(&t, 0, None, 1_000_000);
        assert_eq!((s.hotplug.online, s.hotplug.offline), (2, 2));
        assert_eq!(
            s.hotplug.events[0],
            CpuChange {
                t_ns: 1_000_000,
                cpu: 5,
                online: false
            }
        );
        assert_eq!(s.records, 1, "hotplug lines are not run records");
        assert!(render(&s).contains("hotplug: 2 online, 2 offline: cpu 5 offline at +0.0 ms"));
        let later = summarise(&t, 2_500_000, Some(3_500_000), 1_000_000);
        assert_eq!((later.hotplug.online, later.hotplug.offline), (1, 0));
    }

    #[test]
    fn batches_of_a_group_count_as_runs_with_successions_inside_them() {
        // Quota 4: AAAA BBBB AAAA.
        let s = summarise(
            &on_one_cpu(&[0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0]),
            0,
            None,
            1_000_000_000,
        );
        let c = &s.cpus[&3];
        assert_eq!(
            (c.records, c.runs, c.successions, c.switches),
            (12, 3, 9, 2)
        );
        assert_eq!(c.run_lengths, BTreeMap::from([(4, 3)]));
        assert_eq!(c.max_run, 4);
        assert!((c.mean_run - 4.0).abs() < 1e-9);
        assert!((c.succession_share - 9.0 / 11.0).abs() < 1e-9);
    }

    #[test]
    fn one_task_per_batch_has_no_succession() {
        let s = summarise(&on_one_cpu(&[0, 1, 0, 1, 0, 1]), 0, None, 1_000_000_000);
        let c = &s.cpus[&3];
        assert_eq!((c.runs, c.successions, c.switches), (6, 0, 5));
        assert_eq!(c.run_lengths, BTreeMap::from([(1, 6)]));
        assert_eq!(c.succession_share, 0.0);
    }

    #[test]
    fn records_on_different_cpus_do_not_make_runs_together() {
        let text = format!(
            "{H}{}{}{}{}",
            run(1, 0, 10, Some(0)),
            run(2, 1, 20, Some(1)),
            run(3, 0, 11, Some(0)),
            run(4, 1, 21, Some(1))
        );
        let s = summarise(&parse(&text).unwrap(), 0, None, 1_000_000_000);
        for cpu in [0, 1] {
            assert_eq!((s.cpus[&cpu].runs, s.cpus[&cpu].successions), (1, 1));
        }
    }

    #[test]
    fn lines_out_of_time_order_are_sorted_and_map_events_apply_from_their_time() {
        // The ring's records reach the file after the re-home the loader wrote meanwhile.
        let text = format!(
            "{H}G 0 0 0-1 0\nP 0 10 0\nG 100 0 6-7 0\n{}{}{}{}",
            run(50, 1, 10, Some(0)),
            run(150, 1, 10, Some(0)),
            run(160, 6, 10, Some(0)),
            run(170, 7, 10, Some(0))
        );
        let s = summarise(&parse(&text).unwrap(), 0, None, 1_000_000_000);
        let g = &s.groups["0"];
        assert_eq!(
            g.homes,
            vec![
                HomeChange {
                    t_ns: 0,
                    home: "0-1".into()
                },
                HomeChange {
                    t_ns: 100,
                    home: "6-7".into()
                }
            ]
        );
        // The run at 150 on CPU 1 was dispatched before the move: in flight, not off its home.
        assert_eq!(
            (
                g.since_home.on_home,
                g.since_home.in_flight,
                g.since_home.off_home
            ),
            (2, 1, 0)
        );
        assert_eq!(g.since_home.cpus, "1,6-7");
    }

    #[test]
    fn a_run_off_home_after_one_on_it_is_off_home() {
        let text = format!(
            "{H}G 0 0 6-7 0\nP 0 10 0\n{}{}",
            run(10, 6, 10, Some(0)),
            run(20, 2, 10, Some(0))
        );
        let s = summarise(&parse(&text).unwrap(), 0, None, 1_000_000_000);
        let p = &s.tids[&10].since_place;
        assert_eq!((p.on_home, p.in_flight, p.off_home), (1, 0, 1));
    }

    #[test]
    fn a_rehinted_thread_is_judged_from_its_new_placement_on() {
        let text = format!(
            "{H}G 0 0 0-3 0\nG 0 1 4-7 0\nP 0 10 0\n{}{}P 100 10 1\n{}{}{}",
            run(10, 2, 10, Some(0)),
            run(90, 3, 10, Some(0)),
            run(110, 3, 10, Some(1)),
            run(120, 5, 10, Some(1)),
            run(130, 4, 10, Some(1))
        );
        let s = summarise(&parse(&text).unwrap(), 0, None, 1_000_000_000);
        let t = &s.tids[&10];
        assert_eq!(t.groups, vec!["0".to_string(), "1".to_string()]);
        assert_eq!(
            t.last_place,
            Some(Placed {
                t_ns: 100,
                gid: "1".into()
            })
        );
        let p = &t.since_place;
        assert_eq!((p.on_home, p.in_flight, p.off_home), (2, 1, 0));
        assert_eq!(p.cpus, "3-5");
    }

    #[test]
    fn since_leaves_earlier_records_out_but_keeps_the_maps() {
        let text = format!(
            "{H}G 0 0 0-1 0\nP 0 10 0\n{}{}",
            run(10, 0, 10, Some(0)),
            run(20, 1, 10, Some(0))
        );
        let s = summarise(&parse(&text).unwrap(), 15, None, 1_000_000_000);
        assert_eq!(s.records, 1);
        assert_eq!(s.groups["0"].since_home.on_home, 1);
        assert_eq!(s.cpus[&1].records, 1);
        assert!(!s.cpus.contains_key(&0));
    }

    #[test]
    fn until_ends_the_count_and_the_maps_there() {
        let text = format!(
            "{H}G 0 0 0-1 0\nP 0 10 0\n{}G 30 0 6-7 0\n{}",
            run(10, 0, 10, Some(0)),
            run(40, 6, 10, Some(0))
        );
        let s = summarise(&parse(&text).unwrap(), 0, Some(30), 1_000_000_000);
        assert_eq!(s.records, 1);
        assert_eq!(s.groups["0"].homes.len(), 1);
        assert_eq!(s.groups["0"].since_home.cpus, "0");
    }

    #[test]
    fn windows_list_the_cpus_a_group_ran_on() {
        let text = format!(
            "{H}{}{}{}{}",
            run(0, 0, 10, Some(0)),
            run(5, 1, 11, Some(0)),
            run(12, 6, 10, Some(0)),
            run(25, 7, 10, None)
        );
        let s = summarise(&parse(&text).unwrap(), 0, None, 10);
        assert_eq!(
            s.groups["0"].windows,
            vec![
                Window {
                    from_ns: 0,
                    cpus: "0-1".into(),
                    records: 2
                },
                Window {
                    from_ns: 10,
                    cpus: "6".into(),
                    records: 1
                }
            ]
        );
        assert_eq!(s.groups["-"].windows[0].from_ns, 20);
        assert_eq!(s.span_ns, 25);
    }
}
