//! `dfsched trace import`: Valgrind lackey's text (`valgrind --tool=lackey
//! --trace-mem=yes PROG 2>&1`) on stdin to a compact binary trace (see
//! `dfsched_sim::smt::trace`), a window of it: `--skip` accesses dropped,
//! then at most `--accesses` kept.
//!
//! A `.dftrace` file is the simulator's `DFTRACE2` bytes in one zstd frame
//! (level [`LEVEL`]): the varint records are 1.0–3.0 bytes per access on
//! this machine's programs, and zstd takes them to 0.001–0.57 (loops
//! repeat their records exactly). [`read_trace`] reads both that and the
//! bare `DFTRACE2` bytes (the committed fixtures, and traces written
//! before), bounded by [`MAX_TRACE_BYTES`] either way. The simulator
//! itself stays free of the dependency: it sees bytes.
//!
//! ```text
//! valgrind --tool=lackey --trace-mem=yes gzip -c big.txt 2>&1 >/dev/null \
//!   | dfsched trace import --skip 1000000 --accesses 4000000 --out traces/gzip.dftrace
//! ```

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};
use dfsched_sim::smt::trace::{decode, encode, LackeyParser};
use dfsched_sim::smt::workload::Access;
use std::io::{BufRead, Read as _};
use std::path::{Path, PathBuf};

/// The zstd level of written traces: 9 takes a 10 MB trace to a fifth in
/// about 0.3 s here; 19 saves a tenth more and takes 10 s.
pub const LEVEL: i32 = 9;

/// The first bytes of a zstd frame (RFC 8878: 0xFD2FB528, little-endian).
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xB5, 0x2F, 0xFD];

/// The most bytes a trace may hold, decompressed: some 100 million
/// accesses, far beyond the windows of a few million the simulator is
/// fed, and a bound on what a corrupt or hostile file can make it
/// allocate (a zstd frame of a few KiB can promise gigabytes).
pub const MAX_TRACE_BYTES: u64 = 256 << 20;

/// `dfsched trace`.
#[derive(Debug, Args)]
pub struct TraceArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: TraceCommand,
}

/// Trace subcommands.
#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// Lackey text on stdin → a binary trace file.
    Import(ImportArgs),
}

/// `trace import`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The trace file to write (`*.dftrace`).
    #[arg(long)]
    out: PathBuf,
    /// Accesses to drop first (the program's start-up).
    #[arg(long, default_value_t = 0)]
    skip: u64,
    /// Accesses to keep at most.
    #[arg(long, default_value_t = 4_000_000)]
    accesses: u64,
}

/// Runs `dfsched trace …`.
pub fn run(args: TraceArgs) -> anyhow::Result<()> {
    match args.command {
        TraceCommand::Import(a) => import(a),
    }
}

fn import(a: ImportArgs) -> anyhow::Result<()> {
    let mut parser = LackeyParser::new();
    let mut kept = Vec::new();
    let mut seen = 0u64;
    let stdin = std::io::stdin().lock();
    for line in stdin.lines() {
        let line = line.context("reading stdin")?;
        if let Some(acc) = parser.line(&line)? {
            seen += 1;
            if seen > a.skip {
                kept.push(acc);
                if kept.len() as u64 >= a.accesses {
                    // Stop reading: the writer sees a closed pipe and
                    // (valgrind) ends on SIGPIPE, which is what we want.
                    break;
                }
            }
        }
    }
    if kept.is_empty() {
        anyhow::bail!("no access in the input after skipping {}", a.skip);
    }
    if (kept.len() as u64) < a.accesses {
        // Kept, not refused: a short program is still a program; but a
        // window cut short by the program's end is said, not hidden.
        eprintln!(
            "warning: the input ended after {seen} accesses: the window holds {} of the {} asked for",
            kept.len(),
            a.accesses
        );
    }
    let raw = encode(&kept);
    let bytes = zstd::bulk::compress(&raw, LEVEL).context("compressing the trace")?;
    std::fs::write(&a.out, &bytes).with_context(|| format!("writing {}", a.out.display()))?;
    eprintln!(
        "{}: {} accesses, {} bytes ({:.2} bytes per access; {:.2} before zstd)",
        a.out.display(),
        kept.len(),
        bytes.len(),
        bytes.len() as f64 / kept.len() as f64,
        raw.len() as f64 / kept.len() as f64
    );
    Ok(())
}

/// The accesses of the trace file `path`: zstd-compressed or bare
/// `DFTRACE2` bytes (module doc), at most [`MAX_TRACE_BYTES`] of them.
pub fn read_trace(path: &Path) -> anyhow::Result<Vec<Access>> {
    use std::os::unix::fs::OpenOptionsExt as _;
    // Non-blocking: opening a FIFO does not wait for a writer, and the
    // check below refuses it (on a regular file the flag does nothing).
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    let meta = file
        .metadata()
        .with_context(|| format!("reading {}", path.display()))?;
    if !meta.is_file() {
        bail!("{} is not a regular file", path.display());
    }
    // The file's bytes, and after them the frame's, each read to the bound.
    let read_capped = |from: &mut dyn std::io::Read, what: &str| -> anyhow::Result<Vec<u8>> {
        let mut bytes = Vec::new();
        from.take(MAX_TRACE_BYTES + 1)
            .read_to_end(&mut bytes)
            .with_context(|| format!("{what} {}", path.display()))?;
        if bytes.len() as u64 > MAX_TRACE_BYTES {
            bail!(
                "{} holds more than {} MiB of trace, more than the simulator takes",
                path.display(),
                MAX_TRACE_BYTES >> 20
            );
        }
        Ok(bytes)
    };
    let mut bytes = read_capped(&mut { file }, "reading")?;
    if bytes.starts_with(&ZSTD_MAGIC) {
        let mut frame = zstd::stream::read::Decoder::new(&bytes[..])
            .with_context(|| format!("decompressing {}", path.display()))?;
        bytes = read_capped(&mut frame, "decompressing")?;
    }
    decode(&bytes).with_context(|| format!("decoding {}", path.display()))
}
