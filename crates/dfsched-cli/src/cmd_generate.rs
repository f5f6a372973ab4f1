//! `dfsched generate man DIR | completions SHELL`: the manual pages and
//! shell completions, made from the command-line definition itself (clap),
//! so they cannot drift from `--help`. Run by `scripts/install.sh`, not by
//! people (the subcommand is hidden).
//!
//! Man pages: one per visible subcommand, named as `man` looks them up:
//! `dfsched.1`, `dfsched-run.1`, `dfsched-agent.1`, `dfsched-bench-df.1`, …

use clap::{Args, CommandFactory, Subcommand};
use std::io::Write as _;
use std::path::PathBuf;

/// Flags of `dfsched generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, Subcommand)]
enum What {
    /// Section-1 manual pages of every visible subcommand into DIR.
    Man {
        /// The directory (created if missing).
        dir: PathBuf,
    },
    /// The completion script for SHELL on stdout.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

/// Runs `dfsched generate`.
pub fn run(args: GenerateArgs) -> anyhow::Result<()> {
    let mut cmd = crate::Cli::command().bin_name("dfsched");
    match args.what {
        What::Man { dir } => {
            std::fs::create_dir_all(&dir)?;
            // Subcommand pages are named dfsched-SUB (clap_mangen uses the
            // display name, which clap sets to "dfsched-sub" once built);
            // the `help` subcommands clap adds at every level get none.
            let mut cmd = without_help_subcommands(cmd);
            cmd.build();
            clap_mangen::generate_to(cmd, &dir)?;
            Ok(())
        }
        What::Completions { shell } => {
            // Into memory first: clap_complete panics on a failed write, and
            // a closed pipe must end the command quietly (main.rs).
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cmd, "dfsched", &mut script);
            let mut out = std::io::stdout().lock();
            out.write_all(&script)?;
            out.flush()?;
            Ok(())
        }
    }
}

/// `cmd` with clap's `help` subcommand turned off at every level.
fn without_help_subcommands(cmd: clap::Command) -> clap::Command {
    cmd.disable_help_subcommand(true)
        .mut_subcommands(without_help_subcommands)
}
