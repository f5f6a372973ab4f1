//! The guest's test driver (runs as root inside the VM):
//!
//! - `dfsched-vmcheck plan --preset NAME --marker M --expected FILE --bin-dir DIR [--only CHECK] [--scx]`
//!   runs the plan (with `--scx`, the sched_ext checks instead) and prints its records on stdout
//!   (the console);
//! - `dfsched-vmcheck workload DFS PER_DF [--no-split]` is the DF workload the plan
//!   observes (see `guest/workload.rs`);
//! - `dfsched-vmcheck split N` is the one-group workload of the
//!   split-persistence check, with `split_after_passes` N;
//! - `dfsched-vmcheck sums DFS PER_DF` is the benchmark with a checked
//!   result that the sched_ext fault checks run (see `guest/sums.rs`);
//! - `dfsched-vmcheck rehint` is the re-hint workload of `scx-rehint-and-move`
//!   (see `guest/scx_trace.rs`).

use dfsched_vmbench::guest;
use dfsched_vmbench::preset::Preset;
use std::path::PathBuf;

fn usage() -> ! {
    eprintln!(
        "usage: dfsched-vmcheck plan --preset NAME --marker M --expected FILE --bin-dir DIR [--only CHECK] [--scx]\n       dfsched-vmcheck workload DFS PER_DF [--no-split]\n       dfsched-vmcheck split N\n       dfsched-vmcheck sums DFS PER_DF\n       dfsched-vmcheck rehint"
    );
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    match args.first().map(String::as_str) {
        Some("workload") => {
            let num = |i: usize| args.get(i).and_then(|a| a.parse::<u64>().ok());
            let (Some(dfs), Some(per)) = (num(1), num(2)) else {
                usage()
            };
            let no_split = args.iter().any(|a| a == "--no-split");
            std::process::exit(guest::workload::workload_main(dfs, per as usize, no_split));
        }
        Some("sums") => {
            let num = |i: usize| args.get(i).and_then(|a| a.parse::<u64>().ok());
            let (Some(dfs), Some(per)) = (num(1), num(2)) else {
                usage()
            };
            std::process::exit(guest::sums::sums_main(dfs, per as usize));
        }
        Some("split") => {
            let Some(n) = args.get(1).and_then(|a| a.parse::<u32>().ok()) else {
                usage()
            };
            std::process::exit(guest::workload::split_main(n));
        }
        Some("rehint") => std::process::exit(guest::scx::trace::rehint_main()),
        Some("plan") => {
            let (Some(name), Some(marker), Some(expected), Some(bin_dir)) = (
                flag("--preset"),
                flag("--marker"),
                flag("--expected"),
                flag("--bin-dir"),
            ) else {
                usage()
            };
            let text = std::fs::read_to_string(&expected).unwrap_or_else(|e| {
                eprintln!("{expected}: {e}");
                std::process::exit(2)
            });
            let preset: Preset = serde_json::from_str(&text).unwrap_or_else(|e| {
                eprintln!("{expected}: {e}");
                std::process::exit(2)
            });
            if preset.name != name {
                eprintln!("{expected} is preset {}, not {name}", preset.name);
                std::process::exit(2);
            }
            let only = flag("--only");
            let scx = args.iter().any(|a| a == "--scx");
            let failed = guest::run_plan(
                preset,
                &marker,
                PathBuf::from(bin_dir),
                only.as_deref(),
                scx,
            );
            std::process::exit(if failed == 0 { 0 } else { 1 });
        }
        _ => usage(),
    }
}
