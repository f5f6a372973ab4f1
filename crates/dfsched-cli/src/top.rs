//! `dfsched top`: a live view of every program under dfsched, through the
//! agent (its `top` request; `dfsched::agent::top` says what a runtime
//! sends and when).
//!
//! ```text
//! dfsched top [--socket PATH] [--interval-ms MS] [--sort KEY] [--filter TEXT]
//! dfsched top --once [--json]      one sample for scripts (waits up to
//!                                  ONCE_PATIENCE for the runtimes' details)
//!
//! ┌ dfsched top: agent 812, 2 processes, sort pid, filter — ─────────┐
//! │ CPU  ours  others  ████░░░░                                      │  per CPU
//! │ PID COMM POLICY BODY LOAD THR GRP MOVES SPLITS REHOMES LAST PASS  │  per process
//! │ PID  GROUP DF  HOME  MEMBERS RUNNABLE                              │  per group
//! └ q quit  s sort  r reverse  / filter  c clear ─────────────────────┘
//! ```
//!
//! BODY is what carries out a process's placements: `affinity` (masks) or
//! `scx` (dfsched's sched_ext scheduler); a runtime or agent from before the
//! field says nothing, which means affinity (`dfsched::agent::top`). The
//! `--json` output names it in every detail, the default filled in.
//!
//! The first request makes the agent ask runtimes for their details; each
//! sends one with its next report (within a balancer interval, or a
//! second for a process alone), so the first frame may show processes
//! without groups ("—").
//!
//! The terminal is restored on every way out (a guard's `Drop`, a panic
//! included). Rendering ([`draw`]) is a pure function of the view and the
//! UI state, so a test draws frames on ratatui's `TestBackend`.

use crate::Failure;
use anyhow::Context;
use clap::{Args, ValueEnum};
use dfsched::agent::top::{ProcessTop, TopView};
use dfsched::agent::{self, Client, ConnectOptions, Trust};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::crossterm::{execute, terminal};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Paragraph, Row, Table};
use ratatui::Frame;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long `--once` asks again until every process has sent its detail:
/// a process alone talks to the agent once a second, and needs two
/// exchanges (one to hear it is watched, one to send).
const ONCE_PATIENCE: Duration = Duration::from_secs(6);

/// Flags of `dfsched top`.
#[derive(Debug, Args)]
pub struct TopArgs {
    /// The agent's socket (default: the user's, as `dfsched agent`).
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,

    /// Print one sample and exit (a table, or JSON with --json).
    #[arg(long)]
    once: bool,

    /// With --once: the agent's view as one JSON object.
    #[arg(long, requires = "once")]
    json: bool,

    /// Milliseconds between samples.
    #[arg(long, value_name = "MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(100..=60_000))]
    interval_ms: u64,

    /// The order of processes (key `s` cycles, `r` reverses).
    #[arg(long, value_enum, default_value = "pid")]
    sort: SortKey,

    /// Show only processes whose pid or command name contains TEXT (key
    /// `/` sets it, `c` clears it).
    #[arg(long, value_name = "TEXT")]
    filter: Option<String>,

    /// Also talk to an agent run by root (as DFSCHED_AGENT_TRUST_ROOT=1).
    #[arg(long)]
    trust_root_agent: bool,
}

/// What processes are sorted by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SortKey {
    /// Process id.
    Pid,
    /// Reported load, most first.
    Load,
    /// Threads registered, most first.
    Threads,
    /// Group and thread moves, most first.
    Moves,
}

impl SortKey {
    fn next(self) -> SortKey {
        match self {
            SortKey::Pid => SortKey::Load,
            SortKey::Load => SortKey::Threads,
            SortKey::Threads => SortKey::Moves,
            SortKey::Moves => SortKey::Pid,
        }
    }

    fn name(self) -> &'static str {
        match self {
            SortKey::Pid => "pid",
            SortKey::Load => "load",
            SortKey::Threads => "threads",
            SortKey::Moves => "moves",
        }
    }
}

/// What the user chose on screen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UiState {
    /// The sort key.
    pub sort: SortKey,
    /// Reversed order.
    pub reverse: bool,
    /// The filter applied.
    pub filter: Option<String>,
    /// The filter being typed after `/`, if any.
    pub typing: Option<String>,
    /// The last error talking to the agent, shown in the footer.
    pub error: Option<String>,
}

/// Runs `dfsched top`.
pub fn run(args: TopArgs) -> Result<(), Failure> {
    let socket = args
        .socket
        .clone()
        .unwrap_or_else(agent::default_socket_path);
    let options = ConnectOptions {
        trust: if args.trust_root_agent {
            Trust::OwnUidOrRoot
        } else {
            Trust::OwnUid
        },
        timeout: agent::IO_TIMEOUT,
    };
    let fetch = move || -> anyhow::Result<TopView> {
        Client::connect_with(&socket, options)
            .and_then(|mut c| c.top())
            .with_context(|| format!("asking the agent on {} (dfsched top)", socket.display()))
    };
    let state = UiState {
        sort: args.sort,
        reverse: false,
        filter: args.filter.clone(),
        typing: None,
        error: None,
    };
    if args.once {
        let view = once(&fetch)?;
        return print_once(&view, &state, args.json).map_err(Failure::Run);
    }
    interactive(&fetch, state, Duration::from_millis(args.interval_ms)).map_err(Failure::Run)
}

/// Prints one sample: JSON, or the frame as text.
fn print_once(view: &TopView, state: &UiState, json: bool) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &json_view(view)?)?;
        writeln!(out)?;
    } else {
        let lines = frame_text(view, state, 120);
        // The frame's blank rows before its footer are screen filler.
        let footer = lines.len().saturating_sub(1);
        for (i, line) in lines.iter().enumerate() {
            if i < footer && line.trim().is_empty() {
                continue;
            }
            writeln!(out, "{}", line.trim_end())?;
        }
    }
    Ok(())
}

/// `view` as the JSON `--once --json` prints: the wire's, with every
/// detail's `body` named (the wire leaves out the default, affinity).
pub fn json_view(view: &TopView) -> anyhow::Result<serde_json::Value> {
    let mut v = serde_json::to_value(view)?;
    let details = v["processes"]
        .as_array_mut()
        .into_iter()
        .flatten()
        .filter_map(|p| p.get_mut("detail").and_then(|d| d.as_object_mut()));
    for d in details {
        d.entry("body")
            .or_insert_with(|| dfsched::scx::Body::Affinity.to_string().into());
    }
    Ok(v)
}

/// One sample in which every process has a detail, or the last one asked
/// within [`ONCE_PATIENCE`].
fn once(fetch: &dyn Fn() -> anyhow::Result<TopView>) -> anyhow::Result<TopView> {
    let deadline = Instant::now() + ONCE_PATIENCE;
    loop {
        let view = fetch()?;
        let complete = view.processes.iter().all(|p| p.detail.is_some());
        if complete || Instant::now() > deadline {
            return Ok(view);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Puts the terminal back (raw mode off, main screen) when dropped.
struct TerminalGuard;

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        let _ = terminal::disable_raw_mode();
        let _ = execute!(std::io::stdout(), terminal::LeaveAlternateScreen);
    }
}

fn interactive(
    fetch: &dyn Fn() -> anyhow::Result<TopView>,
    mut state: UiState,
    interval: Duration,
) -> anyhow::Result<()> {
    terminal::enable_raw_mode().context("dfsched top needs a terminal (try --once)")?;
    let _guard = TerminalGuard;
    execute!(std::io::stdout(), terminal::EnterAlternateScreen)?;
    let mut term =
        ratatui::Terminal::new(ratatui::backend::CrosstermBackend::new(std::io::stdout()))?;
    let mut view = TopView {
        agent_pid: 0,
        cpus: Vec::new(),
        processes: Vec::new(),
    };
    let mut next_fetch = Instant::now();
    loop {
        if Instant::now() >= next_fetch {
            match fetch() {
                Ok(v) => {
                    view = v;
                    state.error = None;
                }
                Err(e) => state.error = Some(format!("{e:#}")),
            }
            next_fetch = Instant::now() + interval;
        }
        term.draw(|f| draw(f, &view, &state))?;
        let wait = next_fetch.saturating_duration_since(Instant::now());
        if event::poll(wait)? {
            if let Event::Key(k) = event::read()? {
                if k.kind != KeyEventKind::Press {
                    continue;
                }
                if !key(&mut state, k.code, k.modifiers) {
                    return Ok(());
                }
            }
        }
    }
}

/// Applies one key to `state`; false to quit.
pub fn key(state: &mut UiState, code: KeyCode, mods: KeyModifiers) -> bool {
    if let Some(text) = &mut state.typing {
        match code {
            KeyCode::Enter => {
                let t = std::mem::take(text);
                state.filter = (!t.is_empty()).then_some(t);
                state.typing = None;
            }
            KeyCode::Esc => state.typing = None,
            KeyCode::Backspace => {
                text.pop();
            }
            KeyCode::Char(c) if text.len() < 64 => text.push(c),
            _ => {}
        }
        return true;
    }
    match code {
        KeyCode::Char('q') | KeyCode::Esc => return false,
        KeyCode::Char('c') if mods.contains(KeyModifiers::CONTROL) => return false,
        KeyCode::Char('s') => state.sort = state.sort.next(),
        KeyCode::Char('r') => state.reverse = !state.reverse,
        KeyCode::Char('/') => state.typing = Some(String::new()),
        KeyCode::Char('c') => state.filter = None,
        _ => {}
    }
    true
}

/// The processes to show, filtered and in order.
pub fn shown<'a>(view: &'a TopView, state: &UiState) -> Vec<&'a ProcessTop> {
    let mut ps: Vec<&ProcessTop> = view
        .processes
        .iter()
        .filter(|p| match &state.filter {
            None => true,
            Some(f) => {
                p.pid.to_string().contains(f.as_str())
                    || p.comm.as_deref().is_some_and(|c| c.contains(f.as_str()))
            }
        })
        .collect();
    let load = |p: &ProcessTop| p.load_milli.iter().map(|&(_, m)| m).sum::<u64>();
    let moves = |p: &ProcessTop| {
        p.detail
            .as_ref()
            .map_or(0, |d| d.group_moves + d.task_moves)
    };
    let threads = |p: &ProcessTop| p.detail.as_ref().map_or(0, |d| d.threads);
    match state.sort {
        SortKey::Pid => ps.sort_by_key(|p| p.pid),
        SortKey::Load => ps.sort_by_key(|p| (std::cmp::Reverse(load(p)), p.pid)),
        SortKey::Threads => ps.sort_by_key(|p| (std::cmp::Reverse(threads(p)), p.pid)),
        SortKey::Moves => ps.sort_by_key(|p| (std::cmp::Reverse(moves(p)), p.pid)),
    }
    if state.reverse {
        ps.reverse();
    }
    ps
}

fn milli(m: u64) -> String {
    format!("{}.{:02}", m / 1000, (m % 1000) / 10)
}

/// A bar of `width` cells for `ours` and `others` thousandths against one
/// runnable thread per cell-eighth… kept simple: full at 2 threads.
fn bar(ours: u64, others: u64, width: usize) -> String {
    let scale = |m: u64| ((m as usize * width) / 2000).min(width);
    let o = scale(ours);
    let t = scale(ours + others).max(o);
    format!(
        "{}{}{}",
        "█".repeat(o),
        "▒".repeat(t - o),
        "·".repeat(width - t)
    )
}

/// Draws one frame of `view` as `state` asks.
pub fn draw(f: &mut Frame, view: &TopView, state: &UiState) {
    let ps = shown(view, state);
    let groups: usize = ps
        .iter()
        .map(|p| p.detail.as_ref().map_or(0, |d| d.groups.len()))
        .sum();
    let cpu_rows = view.cpus.len().min(16) as u16;
    let [head, cpus, procs, grps, foot] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(cpu_rows + 3),
        Constraint::Length((ps.len() as u16).min(20) + 3),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(f.area());
    let title = format!(
        "dfsched top: agent {}, {} process{} ({} shown), {} group{}, sort {}{}, filter {}",
        view.agent_pid,
        view.processes.len(),
        if view.processes.len() == 1 { "" } else { "es" },
        ps.len(),
        groups,
        if groups == 1 { "" } else { "s" },
        state.sort.name(),
        if state.reverse { " (reversed)" } else { "" },
        state.filter.as_deref().unwrap_or("—"),
    );
    f.render_widget(
        Paragraph::new(title).style(Style::new().add_modifier(Modifier::BOLD)),
        head,
    );
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let cpu_table = Table::new(
        view.cpus.iter().take(16).map(|c| {
            let others = c.others_milli.unwrap_or(0);
            Row::new(vec![
                c.cpu.0.to_string(),
                milli(c.ours_milli),
                c.others_milli.map_or("?".into(), milli),
                bar(c.ours_milli, others, 20),
            ])
        }),
        [
            Constraint::Length(5),
            Constraint::Length(8),
            Constraint::Length(8),
            Constraint::Length(22),
        ],
    )
    .header(Row::new(vec!["CPU", "OURS", "OTHERS", "█ OURS ▒ OTHERS"]).style(bold))
    .block(
        Block::new()
            .borders(Borders::TOP)
            .title("per CPU: runnable threads"),
    );
    f.render_widget(cpu_table, cpus);
    let proc_table = Table::new(
        ps.iter().map(|p| {
            let load: u64 = p.load_milli.iter().map(|&(_, m)| m).sum();
            let (policy, body, thr, grp, moves, splits, rehomes, last) = match &p.detail {
                None => (
                    "—".into(),
                    "—".into(),
                    "—".into(),
                    "—".into(),
                    "—".into(),
                    "—".into(),
                    "—".into(),
                    "no detail yet".into(),
                ),
                Some(d) => (
                    d.policy.clone(),
                    d.body.to_string(),
                    d.threads.to_string(),
                    (d.groups.len() + d.groups_omitted as usize).to_string(),
                    format!("{}/{}", d.group_moves, d.task_moves),
                    d.splits.to_string(),
                    d.rehomes.to_string(),
                    match &d.last_pass {
                        None => "no pass yet".to_string(),
                        Some(l) => format!(
                            "{} {}→{} moved {}/{}{}{}",
                            if l.imbalanced {
                                "imbalanced"
                            } else {
                                "balanced"
                            },
                            milli(l.spread_before_milli),
                            milli(l.spread_after_milli),
                            l.group_moves,
                            l.task_moves,
                            if l.split { " split" } else { "" },
                            if l.rehomes > 0 {
                                format!(" rehomes {}", l.rehomes)
                            } else {
                                String::new()
                            },
                        ),
                    },
                ),
            };
            Row::new(vec![
                p.pid.to_string(),
                p.comm.clone().unwrap_or_else(|| "?".into()),
                policy,
                body,
                milli(load),
                thr,
                grp,
                moves,
                splits,
                rehomes,
                last,
            ])
        }),
        // Narrow enough that LAST PASS keeps 30 columns of a 120-column
        // frame (`--once`): pids have at most 7 digits, policy names 13
        // letters, bodies 8.
        [
            Constraint::Length(7),
            Constraint::Length(16),
            Constraint::Length(13),
            Constraint::Length(8),
            Constraint::Length(6),
            Constraint::Length(4),
            Constraint::Length(4),
            Constraint::Length(9),
            Constraint::Length(6),
            Constraint::Length(7),
            Constraint::Min(20),
        ],
    )
    .header(
        Row::new(vec![
            "PID",
            "COMM",
            "POLICY",
            "BODY",
            "LOAD",
            "THR",
            "GRP",
            "MOVES g/t",
            "SPLITS",
            "REHOMES",
            "LAST PASS",
        ])
        .style(bold),
    )
    .block(Block::new().borders(Borders::TOP).title("per process"));
    f.render_widget(proc_table, procs);
    let group_rows = ps.iter().flat_map(|p| {
        p.detail.iter().flat_map(move |d| {
            d.groups.iter().map(move |g| {
                Row::new(vec![
                    p.pid.to_string(),
                    g.id.to_string(),
                    g.df.map_or("co-thread".into(), |df| format!("df {df}")),
                    g.home.to_string(),
                    g.members.to_string(),
                    g.runnable.to_string(),
                ])
            })
        })
    });
    let group_table = Table::new(
        group_rows,
        [
            Constraint::Length(8),
            Constraint::Length(6),
            Constraint::Length(12),
            Constraint::Length(16),
            Constraint::Length(8),
            Constraint::Length(9),
        ],
    )
    .header(Row::new(vec!["PID", "GROUP", "DF", "HOME", "MEMBERS", "RUNNABLE"]).style(bold))
    .block(Block::new().borders(Borders::TOP).title("per group"));
    f.render_widget(group_table, grps);
    let footer = match (&state.typing, &state.error) {
        (Some(t), _) => format!("filter (pid or command, Enter to apply, Esc to cancel): {t}"),
        (None, Some(e)) => format!("error: {e}"),
        (None, None) => "q quit  s sort  r reverse  / filter  c clear filter".into(),
    };
    f.render_widget(Paragraph::new(Line::from(footer)), foot);
}

/// One frame of `width` columns as text lines (for `--once` without
/// `--json`): the same drawing as on screen.
fn frame_text(view: &TopView, state: &UiState, width: u16) -> Vec<String> {
    let groups: usize = view
        .processes
        .iter()
        .map(|p| p.detail.as_ref().map_or(0, |d| d.groups.len()))
        .sum();
    let height = (8 + view.cpus.len().min(16) + view.processes.len().min(20) + groups + 3) as u16;
    render_lines(view, state, Rect::new(0, 0, width, height))
}

/// Draws on a `TestBackend` of `area`'s size and returns its lines.
pub fn render_lines(view: &TopView, state: &UiState, area: Rect) -> Vec<String> {
    let backend = ratatui::backend::TestBackend::new(area.width, area.height);
    let mut term = ratatui::Terminal::new(backend).expect("a test backend always starts");
    term.draw(|f| draw(f, view, state))
        .expect("drawing on a test backend cannot fail");
    let buf = term.backend().buffer();
    (0..area.height)
        .map(|y| {
            (0..area.width)
                .map(|x| buf[(x, y)].symbol().to_string())
                .collect::<String>()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use dfsched::agent::top::{CpuTop, Detail, GroupTop, PassTop};
    use dfsched::scx::Body;
    use dfsched::CpuId;

    fn view() -> TopView {
        let detail = |groups: Vec<GroupTop>, moves, body| Detail {
            policy: "co-thread".into(),
            body,
            threads: 4,
            groups,
            groups_omitted: 0,
            group_moves: moves,
            task_moves: 0,
            splits: 1,
            rehomes: 2,
            passes: 10,
            last_pass: Some(PassTop {
                imbalanced: true,
                busiest: Some(CpuId(0)),
                idlest: Some(CpuId(1)),
                spread_before_milli: 2000,
                spread_after_milli: 0,
                rehomes: 0,
                group_moves: 1,
                task_moves: 0,
                split: false,
            }),
        };
        let group = |id, df: Option<u64>, home: &str| GroupTop {
            id,
            app: 0,
            df,
            home: home.parse().unwrap(),
            members: 3,
            runnable: 2,
        };
        TopView {
            agent_pid: 812,
            cpus: vec![
                CpuTop {
                    cpu: CpuId(0),
                    ours_milli: 1500,
                    others_milli: Some(500),
                },
                CpuTop {
                    cpu: CpuId(1),
                    ours_milli: 0,
                    others_milli: None,
                },
            ],
            processes: vec![
                ProcessTop {
                    pid: 4242,
                    uid: 1000,
                    comm: Some("server".into()),
                    load_milli: vec![(CpuId(0), 1500)],
                    set: None,
                    detail: Some(detail(vec![group(7, None, "0")], 5, Body::Scx)),
                    detail_age_ms: Some(100),
                },
                ProcessTop {
                    pid: 777,
                    uid: 1000,
                    comm: Some("batch".into()),
                    load_milli: vec![],
                    set: None,
                    detail: Some(detail(vec![group(3, Some(9), "1")], 1, Body::Affinity)),
                    detail_age_ms: Some(100),
                },
            ],
        }
    }

    fn state() -> UiState {
        UiState {
            sort: SortKey::Pid,
            reverse: false,
            filter: None,
            typing: None,
            error: None,
        }
    }

    #[test]
    fn a_frame_shows_cpus_processes_groups_and_their_homes() {
        let text = render_lines(&view(), &state(), Rect::new(0, 0, 120, 30)).join("\n");
        for needle in [
            "agent 812",
            "OURS",
            "1.50",
            "4242",
            "server",
            "co-thread",
            "5/0",
            "imbalanced 2.00→0.00 moved 1/0",
            "df 9",
            "HOME",
        ] {
            assert!(text.contains(needle), "{needle:?} missing from\n{text}");
        }
    }

    #[test]
    fn each_process_row_names_its_body() {
        let lines = render_lines(&view(), &state(), Rect::new(0, 0, 120, 30));
        let row = |pid: &str| {
            lines
                .iter()
                .find(|l| l.trim_start().starts_with(pid))
                .unwrap_or_else(|| panic!("no row for {pid} in\n{}", lines.join("\n")))
                .clone()
        };
        assert!(lines.iter().any(|l| l.contains("BODY")), "{lines:#?}");
        let server = row("4242");
        assert!(server.contains(" scx "), "{server}");
        let batch = row("777");
        assert!(batch.contains(" affinity "), "{batch}");
    }

    #[test]
    fn the_json_names_every_body_the_default_included() {
        let v = json_view(&view()).unwrap();
        let body = |i: usize| v["processes"][i]["detail"]["body"].clone();
        assert_eq!(body(0), "scx");
        // Left out on the wire (affinity), named here.
        assert_eq!(body(1), "affinity");
        let wire = serde_json::to_value(view()).unwrap();
        assert!(
            wire["processes"][1]["detail"].get("body").is_none(),
            "{wire}"
        );
    }

    #[test]
    fn keys_sort_and_filter_by_process() {
        let v = view();
        let mut s = state();
        assert_eq!(
            shown(&v, &s).iter().map(|p| p.pid).collect::<Vec<_>>(),
            [777, 4242]
        );
        key(&mut s, KeyCode::Char('s'), KeyModifiers::NONE);
        assert_eq!(s.sort, SortKey::Load);
        assert_eq!(shown(&v, &s)[0].pid, 4242);
        key(&mut s, KeyCode::Char('r'), KeyModifiers::NONE);
        assert_eq!(shown(&v, &s)[0].pid, 777);
        for c in ['/', 'b', 'a', 't'] {
            key(&mut s, KeyCode::Char(c), KeyModifiers::NONE);
        }
        key(&mut s, KeyCode::Enter, KeyModifiers::NONE);
        assert_eq!(s.filter.as_deref(), Some("bat"));
        assert_eq!(
            shown(&v, &s).iter().map(|p| p.pid).collect::<Vec<_>>(),
            [777]
        );
        key(&mut s, KeyCode::Char('c'), KeyModifiers::NONE);
        assert_eq!(shown(&v, &s).len(), 2);
        assert!(!key(&mut s, KeyCode::Char('q'), KeyModifiers::NONE));
    }
}
