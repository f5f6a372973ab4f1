//! Helpers for the unit tests of a subcommand's flags (bench.rs,
//! bench_chat.rs, bench_cothreads.rs, bench_spin.rs, bench_overhead.rs):
//! parse a flattened `clap::Args` struct from a list of arguments, and
//! check that each bad list is refused with an error naming the flag or
//! value. Test-only (`cfg(test)` in main.rs).

use clap::Parser;
use std::fmt::Debug;

/// A command line of the flags `A` alone, as a subcommand sees them.
#[derive(Parser)]
struct Only<A: clap::Args> {
    #[command(flatten)]
    flags: A,
}

/// `args` parsed as the flags `A`; clap's error as text.
pub fn parse<A: clap::Args>(args: &[&str]) -> Result<A, String> {
    Only::<A>::try_parse_from(std::iter::once("x").chain(args.iter().copied()))
        .map(|o| o.flags)
        .map_err(|e| e.to_string())
}

/// Asserts `check(args)` fails with an error containing `needle`, for each
/// `(args, needle)` of `cases`.
pub fn assert_refused<T: Debug>(
    check: impl Fn(&[&str]) -> Result<T, String>,
    cases: &[(&[&str], &str)],
) {
    for &(args, needle) in cases {
        let err = check(args).expect_err(&format!("{args:?} was accepted"));
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
