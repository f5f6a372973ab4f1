//! The benchmark's parameters, the four placement modes, and validation.
//!
//! Invariant: a [`Params`] that passed [`Params::validate`] can be run: at
//! least one thread, one DF per thread at most, DFs of whole cache lines,
//! a write ratio in `[0, 1]`, at least one mode and one repeat. Everything
//! is checked before anything runs, so bad input never runs half a bench.

use crate::df::Stride;
use serde::{Deserialize, Serialize};
use std::str::FromStr;

/// Bytes in a cache line on the machines dfsched targets (x86-64, arm64).
pub const LINE_BYTES: usize = 64;

/// Default number of worker threads (the paper's smallest Table 3 column).
pub const DEFAULT_THREADS: usize = 8;
/// Default number of data fragments.
pub const DEFAULT_DFS: usize = 2;
/// Default DF size in bytes (8 KiB: fits any L1d, so only sharing costs).
pub const DEFAULT_DF_BYTES: usize = 8192;
/// Default passes over its DF per thread. With the defaults one run makes
/// 8 × 600 000 × 128 ≈ 614 M accesses: on the project's 2-vCPU KVM guest
/// about 0.7 s when every DF stays on one CPU (oracle) and 2–3 s when DFs
/// bounce (vanilla), so all modes × 5 runs take well under two minutes.
pub const DEFAULT_ITERATIONS: u64 = 600_000;
/// Default distance between the words a pass touches, in bytes: one access
/// per cache line. The benchmark measures what placement controls, the
/// transfer of written lines between private caches; with one access per
/// line nearly every access of a bouncing DF is such a transfer. At 8 (every
/// word) seven cache hits follow each transfer and a sequential stream lets
/// the prefetcher overlap the transfers, so the same bouncing costs far less
/// time: see [`crate::df`] and the measurements in the crate's README.
pub const DEFAULT_STRIDE_BYTES: usize = 64;
/// Default fraction of accesses that write: all of them (write-shared).
pub const DEFAULT_WRITE_RATIO: f64 = 1.0;
/// Default: threads never switch DF.
pub const DEFAULT_SWITCH_EVERY: u64 = 0;
/// Default runs per mode.
pub const DEFAULT_REPEAT: usize = 5;
/// Default seed of the write-pattern phases and the per-round mode order.
pub const DEFAULT_SEED: u64 = 1;

/// At most this many threads: far beyond the paper's 128, small enough that
/// a typo cannot fork-bomb the machine.
pub const MAX_THREADS: usize = 4096;
/// At most this many bytes of DF memory in total (dfs × df-bytes): 1 GiB.
pub const MAX_TOTAL_DF_BYTES: usize = 1 << 30;
/// At most this many runs per mode.
pub const MAX_REPEAT: usize = 1000;

/// How the threads of one run are placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// No dfsched and no affinity calls: the kernel places every thread.
    Vanilla,
    /// A fresh `dfsched::Runtime` per run; each thread calls
    /// `Runtime::enter(df)` when it starts and at every DF switch.
    Dfsched,
    /// The best static placement from the known assignment: whole DFs on
    /// CPUs, balancing thread counts; each thread pinned to its DF's CPU and
    /// re-pinned when it switches DF.
    Oracle,
    /// The worst case: each DF's threads spread round-robin over all allowed
    /// CPUs, pinned there for the whole run.
    Split,
    /// `dfsched` with the runtime recording what it sees
    /// (`DFSCHED_RECORD`) into [`Params::record`], or into a file in a
    /// private (0700) temporary directory of the run's own, removed after
    /// it: interleaved with `dfsched`, the ratio of the
    /// two is the recording's overhead. Not among the default modes.
    #[serde(rename = "dfsched-record")]
    DfschedRecord,
}

/// What every benchmark's mode enum is: a fixed set of named modes
/// (implemented by the crate's `bench_modes!` macro).
pub trait BenchMode: Copy + PartialEq + 'static {
    /// The mode's name on the command line and in JSON.
    fn name(self) -> &'static str;
}

/// Gives a benchmark's mode enum its names, in one place per enum: the
/// inherent `ALL` (every mode, in the order listed, which is the default
/// order) and `as_str` (the name on the command line and in JSON),
/// [`BenchMode`], `Display` (the name) and `FromStr` (a name of `ALL`,
/// surrounding white space ignored; anything else is
/// `$err::$unknown(trimmed name)`).
macro_rules! bench_modes {
    ($mode:ident, $err:ident::$unknown:ident { $($variant:ident => $name:literal),+ $(,)? }) => {
        impl $mode {
            /// Every mode, in the default order.
            pub const ALL: [$mode; [$($name),+].len()] = [$($mode::$variant),+];

            /// The mode's name on the command line and in JSON.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($mode::$variant => $name,)+
                }
            }
        }

        impl $crate::params::BenchMode for $mode {
            fn name(self) -> &'static str {
                self.as_str()
            }
        }

        impl ::std::fmt::Display for $mode {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::std::str::FromStr for $mode {
            type Err = $err;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                let name = s.trim();
                $mode::ALL
                    .into_iter()
                    .find(|m| m.as_str() == name)
                    .ok_or_else(|| $err::$unknown(name.to_string()))
            }
        }
    };
}
pub(crate) use bench_modes;

bench_modes!(Mode, ParamError::UnknownMode {
    Vanilla => "vanilla",
    Dfsched => "dfsched",
    Oracle => "oracle",
    Split => "split",
    DfschedRecord => "dfsched-record",
});

/// The modes `bench df` runs by default: every one but `dfsched-record`.
pub const DEFAULT_MODES: [Mode; 4] = [Mode::Vanilla, Mode::Dfsched, Mode::Oracle, Mode::Split];

impl Mode {
    /// Whether the mode runs the dfsched runtime.
    pub fn uses_runtime(self) -> bool {
        matches!(self, Mode::Dfsched | Mode::DfschedRecord)
    }
}

/// Parses a comma-separated list of modes of any benchmark (`vanilla,dfsched`).
/// Order is kept and empty names are skipped; an unknown name is the mode's
/// own parse error, the first repeated one `duplicate(mode)`, and a list with
/// no mode `none`. Every bench's `parse_*_modes` is this.
pub fn parse_mode_list<M, E>(list: &str, duplicate: impl Fn(M) -> E, none: E) -> Result<Vec<M>, E>
where
    M: FromStr<Err = E> + PartialEq + Copy,
{
    let mut modes = Vec::new();
    for name in list.split(',').filter(|s| !s.trim().is_empty()) {
        let mode: M = name.parse()?;
        if modes.contains(&mode) {
            return Err(duplicate(mode));
        }
        modes.push(mode);
    }
    if modes.is_empty() {
        return Err(none);
    }
    Ok(modes)
}

/// Checks a benchmark's mode list as `parse_mode_list` would have built it:
/// `none` if it is empty, `duplicate(mode)` for the first mode that repeats
/// an earlier one. Every bench's `validate` uses it.
pub fn check_mode_list<M, E>(modes: &[M], duplicate: impl Fn(M) -> E, none: E) -> Result<(), E>
where
    M: PartialEq + Copy,
{
    if modes.is_empty() {
        return Err(none);
    }
    match (1..modes.len()).find(|&i| modes[..i].contains(&modes[i])) {
        Some(i) => Err(duplicate(modes[i])),
        None => Ok(()),
    }
}

/// Parses a comma-separated mode list (`vanilla,dfsched`). Order is kept;
/// an empty list, an unknown name or a repeated name is an error.
pub fn parse_modes(list: &str) -> Result<Vec<Mode>, ParamError> {
    parse_mode_list(list, ParamError::DuplicateMode, ParamError::NoModes)
}

/// Why parameters were refused. Nothing was run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParamError {
    /// `--threads 0`.
    #[error("--threads must be at least 1")]
    NoThreads,
    /// More threads than [`MAX_THREADS`].
    #[error("--threads {0} is more than the limit of {MAX_THREADS}")]
    TooManyThreads(usize),
    /// `--dfs 0`.
    #[error("--dfs must be at least 1")]
    NoDfs,
    /// More DFs than threads: some DF would have no thread.
    #[error("--dfs {dfs} is more than --threads {threads}: every DF needs a thread")]
    MoreDfsThanThreads {
        /// DFs asked for.
        dfs: usize,
        /// Threads asked for.
        threads: usize,
    },
    /// A DF smaller than one cache line.
    #[error("--df-bytes {0} is less than one cache line ({LINE_BYTES} bytes)")]
    DfTooSmall(usize),
    /// A stride that is not 8, 16, 32 or 64 bytes.
    #[error("--stride-bytes {0} is not 8, 16, 32 or 64")]
    Stride(usize),
    /// A DF that is not whole cache lines.
    #[error("--df-bytes {0} is not a multiple of the cache line ({LINE_BYTES} bytes)")]
    DfNotWholeLines(usize),
    /// dfs × df-bytes beyond [`MAX_TOTAL_DF_BYTES`].
    #[error("--dfs {dfs} × --df-bytes {df_bytes} is more than {MAX_TOTAL_DF_BYTES} bytes")]
    TooMuchMemory {
        /// DFs asked for.
        dfs: usize,
        /// Bytes per DF asked for.
        df_bytes: usize,
    },
    /// `--iterations 0`.
    #[error("--iterations must be at least 1")]
    NoIterations,
    /// A write ratio outside `[0, 1]` (or NaN).
    #[error("--write-ratio {0} is not between 0.0 and 1.0")]
    WriteRatio(f64),
    /// `--repeat 0` or beyond [`MAX_REPEAT`].
    #[error("--repeat {0} is not between 1 and {MAX_REPEAT}")]
    Repeat(usize),
    /// An empty mode list.
    #[error("--modes names no mode (choose from vanilla,dfsched,oracle,split)")]
    NoModes,
    /// A mode name that does not exist.
    #[error("unknown mode {0:?} (choose from vanilla,dfsched,oracle,split)")]
    UnknownMode(String),
    /// A mode listed twice.
    #[error("mode {0} is listed twice in --modes")]
    DuplicateMode(Mode),
}

/// Everything one benchmark case needs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Params {
    /// Worker threads.
    pub threads: usize,
    /// Data fragments; thread `t` starts on DF `t mod dfs`.
    pub dfs: usize,
    /// Bytes per DF; whole cache lines.
    pub df_bytes: usize,
    /// Bytes from one touched word to the next in a pass: 8, 16, 32 or 64.
    pub stride_bytes: usize,
    /// Passes over its DF per thread.
    pub iterations: u64,
    /// Fraction of accesses that write, in `[0, 1]`.
    pub write_ratio: f64,
    /// A thread moves to the next DF every this many iterations; 0 = never.
    pub switch_every: u64,
    /// Runs per mode.
    pub repeat: usize,
    /// Modes to run, interleaved round by round.
    pub modes: Vec<Mode>,
    /// Seed of the write-pattern phases and of the mode order per round.
    pub seed: u64,
    /// Where `dfsched-record` runs record (each run replaces the file, so
    /// the last run's recording is kept); `None`: a file in a private
    /// (0700) temporary directory made for each run, both removed after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<std::path::PathBuf>,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            threads: DEFAULT_THREADS,
            dfs: DEFAULT_DFS,
            df_bytes: DEFAULT_DF_BYTES,
            stride_bytes: DEFAULT_STRIDE_BYTES,
            iterations: DEFAULT_ITERATIONS,
            write_ratio: DEFAULT_WRITE_RATIO,
            switch_every: DEFAULT_SWITCH_EVERY,
            repeat: DEFAULT_REPEAT,
            modes: DEFAULT_MODES.to_vec(),
            seed: DEFAULT_SEED,
            record: None,
        }
    }
}

impl Params {
    /// Checks every parameter; the first problem found is returned.
    pub fn validate(&self) -> Result<(), ParamError> {
        if self.threads == 0 {
            return Err(ParamError::NoThreads);
        }
        if self.threads > MAX_THREADS {
            return Err(ParamError::TooManyThreads(self.threads));
        }
        if self.dfs == 0 {
            return Err(ParamError::NoDfs);
        }
        if self.dfs > self.threads {
            return Err(ParamError::MoreDfsThanThreads {
                dfs: self.dfs,
                threads: self.threads,
            });
        }
        if self.df_bytes < LINE_BYTES {
            return Err(ParamError::DfTooSmall(self.df_bytes));
        }
        if !self.df_bytes.is_multiple_of(LINE_BYTES) {
            return Err(ParamError::DfNotWholeLines(self.df_bytes));
        }
        if self
            .dfs
            .checked_mul(self.df_bytes)
            .filter(|&total| total <= MAX_TOTAL_DF_BYTES)
            .is_none()
        {
            return Err(ParamError::TooMuchMemory {
                dfs: self.dfs,
                df_bytes: self.df_bytes,
            });
        }
        if Stride::from_bytes(self.stride_bytes).is_none() {
            return Err(ParamError::Stride(self.stride_bytes));
        }
        if self.iterations == 0 {
            return Err(ParamError::NoIterations);
        }
        if !(0.0..=1.0).contains(&self.write_ratio) {
            return Err(ParamError::WriteRatio(self.write_ratio));
        }
        if !(1..=MAX_REPEAT).contains(&self.repeat) {
            return Err(ParamError::Repeat(self.repeat));
        }
        check_mode_list(&self.modes, ParamError::DuplicateMode, ParamError::NoModes)
    }

    /// Cache lines per DF.
    pub fn lines_per_df(&self) -> usize {
        self.df_bytes / LINE_BYTES
    }

    /// The pass stride.
    pub fn stride(&self) -> Stride {
        Stride::from_bytes(self.stride_bytes).unwrap_or(Stride::LINE)
    }

    /// Word accesses in one pass over a DF.
    pub fn accesses_per_pass(&self) -> usize {
        self.lines_per_df() * self.stride().per_line()
    }

    /// The DF thread `thread` starts on.
    pub fn initial_df(&self, thread: usize) -> usize {
        thread % self.dfs
    }

    /// How many threads start on each DF, by DF index.
    pub fn threads_per_df(&self) -> Vec<usize> {
        let mut count = vec![0; self.dfs];
        for t in 0..self.threads {
            count[self.initial_df(t)] += 1;
        }
        count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(f: impl FnOnce(&mut Params)) -> Result<(), ParamError> {
        let mut p = Params::default();
        f(&mut p);
        p.validate()
    }

    #[test]
    fn defaults_are_valid_and_are_the_headline_case() {
        let p = Params::default();
        p.validate().unwrap();
        assert_eq!((p.threads, p.dfs, p.df_bytes), (8, 2, 8192));
        assert_eq!(p.write_ratio, 1.0);
        assert_eq!(p.modes, DEFAULT_MODES.to_vec());
        assert_eq!(p.threads_per_df(), vec![4, 4]);
    }

    #[test]
    fn every_bad_parameter_is_refused_with_its_reason() {
        assert_eq!(with(|p| p.threads = 0), Err(ParamError::NoThreads));
        assert_eq!(
            with(|p| p.threads = MAX_THREADS + 1),
            Err(ParamError::TooManyThreads(MAX_THREADS + 1))
        );
        assert_eq!(with(|p| p.dfs = 0), Err(ParamError::NoDfs));
        assert_eq!(
            with(|p| p.dfs = 9),
            Err(ParamError::MoreDfsThanThreads { dfs: 9, threads: 8 })
        );
        assert_eq!(with(|p| p.df_bytes = 63), Err(ParamError::DfTooSmall(63)));
        assert_eq!(
            with(|p| p.df_bytes = 100),
            Err(ParamError::DfNotWholeLines(100))
        );
        assert!(matches!(
            with(|p| p.df_bytes = usize::MAX - 63),
            Err(ParamError::TooMuchMemory { .. })
        ));
        assert_eq!(with(|p| p.iterations = 0), Err(ParamError::NoIterations));
        assert_eq!(with(|p| p.stride_bytes = 12), Err(ParamError::Stride(12)));
        assert_eq!(
            with(|p| p.write_ratio = 1.5),
            Err(ParamError::WriteRatio(1.5))
        );
        assert_eq!(
            with(|p| p.write_ratio = -0.1),
            Err(ParamError::WriteRatio(-0.1))
        );
        assert!(matches!(
            with(|p| p.write_ratio = f64::NAN),
            Err(ParamError::WriteRatio(_))
        ));
        assert_eq!(with(|p| p.repeat = 0), Err(ParamError::Repeat(0)));
        assert_eq!(with(|p| p.modes.clear()), Err(ParamError::NoModes));
        assert_eq!(
            with(|p| p.modes = vec![Mode::Oracle, Mode::Split, Mode::Oracle]),
            Err(ParamError::DuplicateMode(Mode::Oracle))
        );
        // Edges that are fine.
        with(|p| {
            p.threads = 1;
            p.dfs = 1;
            p.df_bytes = 64;
            p.write_ratio = 0.0;
            p.repeat = 1;
        })
        .unwrap();
    }

    #[test]
    fn mode_lists_parse_in_order_and_refuse_strangers() {
        assert_eq!(
            parse_modes("split, vanilla").unwrap(),
            vec![Mode::Split, Mode::Vanilla]
        );
        assert_eq!(
            parse_modes("vanilla,turbo"),
            Err(ParamError::UnknownMode("turbo".into()))
        );
        assert_eq!(
            parse_modes("oracle,oracle"),
            Err(ParamError::DuplicateMode(Mode::Oracle))
        );
        assert_eq!(parse_modes(" , "), Err(ParamError::NoModes));
        for m in Mode::ALL {
            assert_eq!(m.as_str().parse::<Mode>().unwrap(), m);
        }
    }

    #[test]
    fn threads_start_on_dfs_round_robin() {
        let p = Params {
            threads: 7,
            dfs: 3,
            ..Params::default()
        };
        let starts: Vec<usize> = (0..7).map(|t| p.initial_df(t)).collect();
        assert_eq!(starts, vec![0, 1, 2, 0, 1, 2, 0]);
        assert_eq!(p.threads_per_df(), vec![3, 2, 2]);
    }
}
