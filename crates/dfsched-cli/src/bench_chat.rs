//! `dfsched bench chat`: flags, validation, progress and output of the Chat
//! benchmark (Pinter & Zalmanovici §5.1). The benchmark itself is
//! [`dfsched_bench::chat`]; progress lines are `bench df`'s.

use crate::bench::{print_bench, run_bench};
use crate::Failure;
use clap::{Args, ValueEnum};
use dfsched_bench::chat::{
    paper_grid, parse_chat_modes, ChatBench, ChatMode, ChatParams, DEFAULT_MESSAGES,
    DEFAULT_REPEAT, DEFAULT_ROOMS, DEFAULT_SEED,
};

/// Where `bench chat` sits in the command tree, for usage errors.
const CHAT_PATH: &[&str] = &["bench", "chat"];

/// The long help of `bench chat`.
pub const CHAT_LONG_ABOUT: &str = "\
The Chat benchmark (Pinter & Zalmanovici §5.1, after the LBS chat benchmark).

A server and a client in this process talk over TCP on 127.0.0.1 (an
ephemeral port). ROOMS rooms of 20 users; each user has one connection and
four threads: on the client a sender (MESSAGES messages of 100 bytes) and a
receiver, on the server a reader (which puts each message into the bounded
queues of the room's 19 other users) and a writer (which writes its queue to
its socket). Every message reaches the room's 19 other users; receivers check
each one (room, sender, sequence) and the run fails on any loss or duplicate.

Time: from the start gate (all connected, all threads placed) to the last
receiver's last message. Throughput: messages delivered per second, where
messages delivered = ROOMS x 20 x 19 x MESSAGES (the paper's 'transmitted'
count, x 20 instead of x 19, also counts the sends and is in --json).

Server and client share one process so that one dfsched runtime sees both
ends of every room: with two processes, each with its own runtime, nothing
would put a room's server and client threads on the same CPU.

Modes (run interleaved: every round runs each mode once, in an order shuffled
from --seed):
  vanilla    the kernel alone
  dfsched    a fresh dfsched runtime per run; every thread calls enter(room)
  co-thread  a runtime with the co-thread policy; every thread attach()es
             (one process: all rooms form one co-thread group)
  oracle     each room's 80 threads pinned to one CPU, rooms spread evenly
  split      each room's threads dealt round-robin over all allowed CPUs

Per mode: median, min, max and standard deviation of time and throughput,
CPU time, context switches, migrations, the share of the CPUs other
processes took, and throughput ratios to vanilla (above 1 = faster).

A run holds ROOMS x 40 + 1 sockets open and runs ROOMS x 80 threads; the
open-file limit is checked first (ulimit -n).

With no flags: 4 rooms x 1000 messages, 5 runs per mode: 38 s for the five
modes on a 2-vCPU KVM guest. --grid paper runs Table 1 (rooms {10, 20, 30} x
messages {500, 1000, 1500}, 3 runs per mode and cell): 1.0e9 deliveries in
all, about 20 minutes there (estimated from the default case's throughput).

On a KVM guest a wake-up on another vCPU costs tens of µs (an IPI and a halt
exit), so packing communicating threads on one CPU looks better there than on
bare metal.";

/// The grids `--grid` accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ChatGridArg {
    /// Table 1 of the paper: rooms {10, 20, 30} × messages {500, 1000,
    /// 1500}, 3 runs per mode and cell (about 20 minutes on a 2-vCPU machine).
    Paper,
}

/// Flags of `dfsched bench chat`.
#[derive(Debug, Args)]
pub struct ChatArgs {
    /// Rooms of 20 users (80 threads and 40 sockets each) [default: 4].
    #[arg(long, value_name = "N", conflicts_with = "grid")]
    rooms: Option<usize>,

    /// Messages of 100 bytes each user sends [default: 1000].
    #[arg(long, value_name = "N", conflicts_with = "grid")]
    messages: Option<u64>,

    /// Runs per mode [default: 5; with --grid: 3].
    #[arg(long, value_name = "N")]
    repeat: Option<usize>,

    /// Comma-separated modes: vanilla, dfsched, co-thread, oracle, split
    /// [default: all five].
    #[arg(long, value_name = "LIST", value_parser = parse_mode_list)]
    modes: Option<ChatModeList>,

    /// Print one JSON object on stdout instead of tables.
    #[arg(long)]
    json: bool,

    /// Run a grid of cases (paper: Table 1, about 20 minutes here); conflicts
    /// with --rooms and --messages.
    #[arg(long, value_enum, value_name = "GRID")]
    grid: Option<ChatGridArg>,

    /// Seed of the mode order in each round.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_SEED)]
    seed: u64,

    /// No progress lines on stderr.
    #[arg(short, long)]
    quiet: bool,

    /// Also simulate each case on the machine profile PROFILE (default: the
    /// one `dfsched calibrate` wrote) and show each mode's predicted
    /// throughput ratio to vanilla beside the measured one, with the error
    /// (needs the vanilla mode).
    #[arg(long, value_name = "PROFILE", num_args = 0..=1)]
    #[allow(clippy::option_option)] // absent, given bare, or given a path
    predict: Option<Option<std::path::PathBuf>>,
}

/// A parsed `--modes` list.
#[derive(Clone, Debug)]
pub struct ChatModeList(Vec<ChatMode>);

fn parse_mode_list(s: &str) -> Result<ChatModeList, String> {
    parse_chat_modes(s)
        .map(ChatModeList)
        .map_err(|e| e.to_string())
}

impl ChatArgs {
    /// The cases to run, validated.
    fn cases(&self) -> Result<Vec<ChatParams>, Failure> {
        let base = ChatParams {
            rooms: self.rooms.unwrap_or(DEFAULT_ROOMS),
            messages: self.messages.unwrap_or(DEFAULT_MESSAGES),
            repeat: self.repeat.unwrap_or(DEFAULT_REPEAT),
            modes: self
                .modes
                .as_ref()
                .map_or_else(ChatMode::available, |m| m.0.clone()),
            seed: self.seed,
        };
        let cases = match self.grid {
            None => vec![base],
            Some(ChatGridArg::Paper) => paper_grid(&base, self.repeat),
        };
        for c in &cases {
            c.validate().map_err(|e| Failure::usage(CHAT_PATH, e))?;
        }
        Ok(cases)
    }
}

/// Runs `bench chat`.
pub fn run(args: ChatArgs) -> Result<(), Failure> {
    let cases = args.cases()?;
    if args.predict.is_some() && cases.iter().any(|c| !c.modes.contains(&ChatMode::Vanilla)) {
        return Err(Failure::usage(
            CHAT_PATH,
            "--predict needs the vanilla mode in --modes (the ratios are to vanilla)",
        ));
    }
    // A bad profile fails here, before anything runs.
    let predictor = match &args.predict {
        Some(p) => Some(crate::predict::Predictor::load(p.as_deref())?),
        None => None,
    };
    let reports = run_bench(&ChatBench, CHAT_PATH, &cases, args.quiet)?;
    let grid = args.grid.map(|ChatGridArg::Paper| "paper");
    print_bench::<ChatBench>(
        reports,
        grid,
        args.json,
        predictor.as_ref().map(|p| move |r: &_| p.chat(r)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_flags::{assert_refused, parse};

    fn cases(args: &[&str]) -> Result<Vec<ChatParams>, String> {
        parse::<ChatArgs>(args)?
            .cases()
            .map_err(Failure::usage_message)
    }

    #[test]
    fn no_flags_is_the_default_case_with_every_available_mode() {
        assert_eq!(cases(&[]).unwrap(), vec![ChatParams::default()]);
    }

    #[test]
    fn bad_values_are_usage_errors_naming_the_flag() {
        let bad: &[(&[&str], &str)] = &[
            (&["--rooms", "0"][..], "--rooms"),
            (&["--rooms", "1000"], "--rooms"),
            (&["--messages", "0"], "--messages"),
            (&["--repeat", "0"], "--repeat"),
            (&["--modes", "vanilla,warp"], "warp"),
            (&["--modes", "split,split"], "twice"),
            (&["--grid", "paper", "--rooms", "4"], "--rooms"),
            (&["--grid", "huge"], "huge"),
        ];
        assert_refused(cases, bad);
    }

    #[test]
    fn grid_is_table_1_with_the_given_modes() {
        let c = cases(&[
            "--grid",
            "paper",
            "--modes",
            "vanilla,oracle",
            "--repeat",
            "2",
        ])
        .unwrap();
        assert_eq!(c.len(), 9);
        assert!(c
            .iter()
            .all(|p| p.repeat == 2 && p.modes == vec![ChatMode::Vanilla, ChatMode::Oracle]));
        assert_eq!((c[8].rooms, c[8].messages), (30, 1500));
    }
}
