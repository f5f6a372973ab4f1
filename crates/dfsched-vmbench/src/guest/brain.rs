//! One brain (issue 14): the engine's decisions logged in the guest
//! (`DFSCHED_ENGINE_LOG`) are replayed through `dfsched-core` on the host
//! and must be identical.
//!
//! - `engine-replay` (the plan): `dfsched bench df --modes dfsched` with DF switches, placing by
//!   affinity (`DFSCHED_SCX=off`), its engine logged.
//! - `scx-engine-replay` (`--scx`): the same bench under dfsched's sched_ext scheduler
//!   (`dfsched-scx run`, `DFSCHED_SCX=auto`): the log's header must say the runtime placed through
//!   the `scx` body, and the runtime's stats `scx_body: true` with no `scx_failures`.
//!
//! Here, in the guest, a check requires: the bench's JSON; the runtime's `engine_log` stats with no
//! write error, no cut and no step left out; a log that starts with a header of the right body, holds
//! balancer passes (so the balancer's decisions are compared too) and ends with its `end` line. It then
//! attaches each log file ([`super::attach`]); the host replays them
//! ([`crate::artifact::judge`]) and fails the check on any difference, or if no log arrived.

use super::scx::Loaded;
use super::workload::Running;
use super::Ctx;
use std::path::Path;
use std::process::Command;

/// Where the bench writes its log.
const DIR: &str = "/tmp/dfsched-engine-log";

/// The bench's iterations and DF switches: a few seconds under TCG (2,000,000 take about 30 s),
/// so the balancer passes tens of times, and tens of DF switches per worker; the log stays around
/// 100 KiB, a few hundred console lines.
const ITERATIONS: &str = "400000";
const SWITCH_EVERY: &str = "10000";

/// The affinity body's check (module doc).
pub fn engine_replay(ctx: &Ctx) -> Result<String, String> {
    logged_bench(ctx, false)
}

/// The sched_ext body's check (module doc).
pub fn scx_engine_replay(ctx: &Ctx) -> Result<String, String> {
    let loaded = Loaded::start(ctx, &[])?;
    let seen = logged_bench(ctx, true)?;
    let unloaded = loaded.unload()?;
    Ok(format!("{seen}; {unloaded}"))
}

/// Runs the bench with its engine logged, checks what the guest can, attaches the logs.
fn logged_bench(ctx: &Ctx, scx: bool) -> Result<String, String> {
    let _ = std::fs::remove_dir_all(DIR);
    std::fs::create_dir_all(DIR).map_err(|e| format!("{DIR}: {e}"))?;
    let log = Path::new(DIR).join("engine.log");
    let mut cmd = Command::new(ctx.bin("dfsched"));
    cmd.args([
        "bench",
        "df",
        "--modes",
        "dfsched",
        "--threads",
        "8",
        "--dfs",
        "4",
    ])
    .args(["--iterations", ITERATIONS, "--switch-every", SWITCH_EVERY])
    .args(["--repeat", "1", "--json"])
    .env("DFSCHED_ENGINE_LOG", &log)
    .env("DFSCHED_AGENT", "off")
    .env("DFSCHED_SCX", if scx { "auto" } else { "off" });
    let out = Running::start(cmd, "dfsched bench df (engine logged)")?.finish(900)?;
    let v: serde_json::Value =
        serde_json::from_str(&out).map_err(|e| format!("bench JSON: {e}: {out}"))?;
    let stats = &v["modes"]["dfsched"]["runs"][0]["runtime_stats"];
    let el = &stats["engine_log"];
    if el.is_null() {
        return Err(format!("the runtime's stats have no engine_log: {stats}"));
    }
    if el["write_errors"] != 0 || el["truncated"] != false || el["steps_not_logged"] != 0 {
        return Err(format!("the engine log is not whole: {el}"));
    }
    if scx && (stats["scx_body"] != true || stats["scx_failures"] != 0) {
        return Err(format!(
            "the runtime did not place through the scheduler: scx_body {}, scx_failures {}",
            stats["scx_body"], stats["scx_failures"]
        ));
    }
    let body = if scx { "scx" } else { "affinity" };
    let mut files: Vec<_> = std::fs::read_dir(DIR)
        .map_err(|e| format!("{DIR}: {e}"))?
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    let mut seen = Vec::new();
    for f in &files {
        let bytes = std::fs::read(f).map_err(|e| format!("{}: {e}", f.display()))?;
        let text = String::from_utf8_lossy(&bytes);
        let first = text.lines().next().unwrap_or_default();
        if !first.starts_with("{\"header\":") || !first.contains(&format!("\"body\":\"{body}\"")) {
            return Err(format!(
                "{}: no header of the {body} body: {:.200}",
                f.display(),
                first
            ));
        }
        if !text
            .lines()
            .last()
            .unwrap_or_default()
            .starts_with("{\"end\":")
        {
            return Err(format!("{}: no end line", f.display()));
        }
        let passes = text.matches("\"event\":\"balance\"").count();
        if passes == 0 {
            return Err(format!(
                "{}: no balancer pass in the log (the bench ended before the first)",
                f.display()
            ));
        }
        let name = f
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        seen.push(format!(
            "{name}: {} bytes, {} steps, {passes} passes",
            bytes.len(),
            text.lines().filter(|l| l.starts_with("{\"step\":")).count()
        ));
        super::attach(&name, bytes);
    }
    if files.is_empty() {
        return Err(format!("no engine log was written in {DIR}"));
    }
    let _ = std::fs::remove_dir_all(DIR);
    Ok(format!(
        "body {body}; {}; sent to the host",
        seen.join(", ")
    ))
}
