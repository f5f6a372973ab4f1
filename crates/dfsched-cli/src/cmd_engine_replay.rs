//! `dfsched engine-replay LOG [--json]`: an engine log (`DFSCHED_ENGINE_LOG`)
//! replayed through `dfsched-core` and compared decision by decision
//! (`dfsched_rt::engine_replay`). Exit 0: identical; 1: the first step whose
//! decisions differ, with both lists; 2: not a log that can be replayed
//! (unreadable, garbled, another format version, a header that makes no
//! engine, steps out of order).

use clap::Args;
use dfsched::engine_replay::{replay, Divergence, ReplayError, Replayed};
use std::io::Write;
use std::path::PathBuf;

/// The long help of `dfsched engine-replay`.
pub const ENGINE_REPLAY_LONG_ABOUT: &str = "\
Replay an engine log through dfsched's engine and compare its decisions.

A program run with DFSCHED_ENGINE_LOG=FILE (the library, `dfsched run`, any
body: affinity masks or the sched_ext scheduler) logs the engine's topology,
configuration and policy, then every event its engine handled and the
decisions it gave (`dfsched agent --engine-log DIR` does the same for each
process attached with `dfsched attach`). This command rebuilds that engine
from the log's header, feeds it the events in order and compares each
decision list (and each refusal) with the logged one: one brain, checked. A log cut at its size
limit (DFSCHED_ENGINE_LOG_MAX_BYTES) is replayed up to the cut, and the
report says so.

Exit status: 0 identical (the counts of events and decisions are printed);
1 the first difference (its event index, the event, both decision lists);
2 the file is not a log that can be replayed (garbled, another format
version, a header that makes no engine, events out of order).";

/// `dfsched engine-replay`.
#[derive(Debug, Args)]
pub struct EngineReplayArgs {
    /// The engine log (`DFSCHED_ENGINE_LOG=FILE`).
    pub log: PathBuf,
    /// Print the result as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// The JSON output.
#[derive(serde::Serialize)]
struct Json<'a> {
    file: String,
    identical: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    replayed: Option<&'a Replayed>,
    #[serde(skip_serializing_if = "Option::is_none")]
    divergence: Option<&'a Divergence>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

fn summary(r: &Replayed) -> String {
    let mut s = format!(
        "{} events, {} decisions, {} refused events, {} engine(s)",
        r.steps, r.decisions, r.refused, r.segments
    );
    if let Some(cut) = &r.truncated {
        s += &format!(
            "; the log was cut at its size limit after {} events ({} bytes): replayed up to the cut",
            cut.steps, cut.bytes
        );
    } else if r.cut_tail {
        s += "; the log ends in a partial line (its writer died mid-write): replayed up to it";
    } else if !r.ended {
        s += "; the log has no end line (its program was still running, or did not exit normally)";
    }
    s
}

/// Runs `dfsched engine-replay` and exits with its status (module doc).
pub fn run(args: EngineReplayArgs) -> ! {
    let result = std::fs::File::open(&args.log)
        .map_err(ReplayError::from)
        .and_then(|f| replay(std::io::BufReader::new(f)));
    let file = args.log.display().to_string();
    let status = match &result {
        Ok(_) => 0,
        Err(ReplayError::Diverged(_)) => 1,
        Err(_) => 2,
    };
    let mut out = std::io::stdout().lock();
    let written = if args.json {
        let json = Json {
            file,
            identical: status == 0,
            replayed: result.as_ref().ok(),
            divergence: match &result {
                Err(ReplayError::Diverged(d)) => Some(d),
                _ => None,
            },
            error: result
                .as_ref()
                .err()
                .filter(|_| status == 2)
                .map(|e| e.to_string()),
        };
        serde_json::to_writer(&mut out, &json)
            .map_err(std::io::Error::from)
            .and_then(|()| writeln!(out))
    } else {
        match &result {
            Ok(r) => writeln!(out, "{file}: identical: {}", summary(r)),
            Err(ReplayError::Diverged(d)) => print_divergence(&mut out, &file, d),
            Err(e) => {
                eprintln!("error: {file}: {e}");
                Ok(())
            }
        }
    };
    drop(out);
    if let Err(e) = written {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    }
    std::process::exit(status)
}

fn print_divergence(out: &mut impl Write, file: &str, d: &Divergence) -> std::io::Result<()> {
    writeln!(
        out,
        "{file}: DIFFERENT at event {} (line {}, engine {}), after {} identical events ({} decisions)",
        d.step,
        d.line,
        d.segment,
        d.before.steps,
        d.before.decisions
    )?;
    writeln!(out, "  event:    {}", json(&d.event))?;
    writeln!(out, "  logged:   {}", json(&d.logged))?;
    writeln!(out, "  replayed: {}", json(&d.replayed))?;
    if d.logged_error.is_some() || d.replayed_error.is_some() {
        writeln!(out, "  logged refusal:   {:?}", d.logged_error)?;
        writeln!(out, "  replayed refusal: {:?}", d.replayed_error)?;
    }
    Ok(())
}

/// `v` as compact JSON, for the people's output.
fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|e| format!("<{e}>"))
}
