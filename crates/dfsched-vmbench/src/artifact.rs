//! Files a guest check hands to the host over the serial console, and the
//! host's judgement of the one kind there is: an engine log
//! (`DFSCHED_ENGINE_LOG`), replayed on the host through `dfsched-core`
//! (`dfsched::engine_replay`): one brain, the guest's decisions and the
//! host's, compared event by event.
//!
//! ```text
//!  guest: check ─ attach(name, bytes) ─► after the check: Chunk records (base64, ≤ CHUNK chars each)
//!                                        then its Check record with artifacts [{name, bytes, fnv64, chunks}]
//!  host:  Chunk lines kept by name ─► at the Check: each artifact reassembled, its length and
//!         FNV-1a hash checked, replayed; a check that must bring a log (MUST_BRING_ENGINE_LOG)
//!         and brought none fails
//! ```
//!
//! Why the console and not a 9p share: the normal plan boots Debian's
//! kernel, whose 9p is a module the initramfs does not carry; the console
//! is the one channel both plans have, and the logs are small (tens to
//! hundreds of KiB: a bench of a few seconds). Under TCG a console line
//! may be broken by kernel messages written between its bytes; the hash
//! then fails the check (never a false pass), and a rerun sends it again.
//!
//! Invariant: a check whose record names an artifact passes on the host
//! only if every chunk of it arrived, its bytes hash to the named value,
//! and its replay is identical.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Base64 characters per `Chunk` record.
pub const CHUNK: usize = 3072;

/// Checks that pass only with an engine log that replays identically on
/// the host: the guest's `Ok` alone is not enough.
pub const MUST_BRING_ENGINE_LOG: &[&str] = &["engine-replay", "scx-engine-replay"];

/// What a `Check` record says of one file it attached.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactRef {
    /// Its name, unique in the run (`CHECK/FILE`).
    pub name: String,
    /// Its length, bytes.
    pub bytes: u64,
    /// FNV-1a 64 of its bytes.
    pub fnv64: u64,
    /// How many `Chunk` records carry it.
    pub chunks: u32,
}

/// FNV-1a, 64 bits: a check of what arrived, not a defence against anyone.
pub fn fnv64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding.
pub fn base64(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The bytes of standard base64 text, or `None` if it is not.
pub fn unbase64(text: &str) -> Option<Vec<u8>> {
    let text = text.as_bytes();
    if !text.len().is_multiple_of(4) {
        return None;
    }
    let value = |c: u8| ALPHABET.iter().position(|&a| a == c).map(|v| v as u32);
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    for (i, q) in text.chunks(4).enumerate() {
        let last = i == text.len() / 4 - 1;
        let pad = q.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut n = 0u32;
        for &c in &q[..4 - pad] {
            n = n << 6 | value(c)?;
        }
        n <<= 6 * pad as u32;
        let b = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&b[..3 - pad]);
    }
    Some(out)
}

/// `bytes` as the chunks of artifact `name`, and its reference.
pub fn split(name: &str, bytes: &[u8]) -> (Vec<String>, ArtifactRef) {
    let text = base64(bytes);
    let chunks: Vec<String> = text
        .as_bytes()
        .chunks(CHUNK)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect();
    let r = ArtifactRef {
        name: name.to_string(),
        bytes: bytes.len() as u64,
        fnv64: fnv64(bytes),
        chunks: chunks.len() as u32,
    };
    (chunks, r)
}

/// The chunks seen on the console, by artifact name and sequence number.
#[derive(Clone, Debug, Default)]
pub struct Received {
    parts: BTreeMap<String, BTreeMap<u32, String>>,
}

impl Received {
    /// Keeps one chunk.
    pub fn chunk(&mut self, name: String, seq: u32, data: String) {
        self.parts.entry(name).or_default().insert(seq, data);
    }

    /// The bytes of `r`, if every chunk arrived and they hash right.
    pub fn assemble(&self, r: &ArtifactRef) -> Result<Vec<u8>, String> {
        let parts = self.parts.get(&r.name);
        let got = parts.map_or(0, BTreeMap::len);
        if got != r.chunks as usize {
            return Err(format!(
                "{}: {got} of its {} chunks arrived",
                r.name, r.chunks
            ));
        }
        let text: String = parts
            .into_iter()
            .flat_map(|p| p.values())
            .cloned()
            .collect();
        let bytes = unbase64(&text)
            .ok_or_else(|| format!("{}: not base64 (garbled on the console?)", r.name))?;
        if bytes.len() as u64 != r.bytes || fnv64(&bytes) != r.fnv64 {
            return Err(format!(
                "{}: {} bytes hashing {:#x} arrived, {} hashing {:#x} were sent (garbled on the console?)",
                r.name,
                bytes.len(),
                fnv64(&bytes),
                r.bytes,
                r.fnv64
            ));
        }
        Ok(bytes)
    }
}

/// The host's verdict on a check's artifacts: `Ok` with what the replays
/// said, `Err` with why the check must fail. `check` and `ok` are the
/// guest's record; `artifacts` what it attached.
pub fn judge(
    received: &Received,
    check: &str,
    ok: bool,
    artifacts: &[ArtifactRef],
) -> Result<String, String> {
    let must = MUST_BRING_ENGINE_LOG.contains(&check);
    if artifacts.is_empty() {
        return if must && ok {
            Err("the guest sent no engine log: nothing was replayed on the host".into())
        } else {
            Ok(String::new())
        };
    }
    let mut said = Vec::new();
    for r in artifacts {
        let bytes = received.assemble(r)?;
        match dfsched::engine_replay::replay(bytes.as_slice()) {
            Ok(done) if done.truncated.is_some() || done.cut_tail || !done.ended => {
                return Err(format!(
                    "{}: replayed identically but incomplete (cut {:?}, partial tail {}, end line {}): {done:?}",
                    r.name, done.truncated, done.cut_tail, done.ended
                ))
            }
            Ok(done) => said.push(format!(
                "{}: replayed on the host, identical: {} events, {} decisions",
                r.name, done.steps, done.decisions
            )),
            Err(dfsched::engine_replay::ReplayError::Diverged(d)) => {
                return Err(format!(
                    "{}: the host's replay differs at event {} (line {}): event {}; logged {}; replayed {}",
                    r.name,
                    d.step,
                    d.line,
                    serde_json::to_string(&d.event).unwrap_or_default(),
                    serde_json::to_string(&d.logged).unwrap_or_default(),
                    serde_json::to_string(&d.replayed).unwrap_or_default(),
                ))
            }
            Err(e) => return Err(format!("{}: not replayable on the host: {e}", r.name)),
        }
    }
    Ok(said.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_every_tail_length_and_refuses_garbage() {
        for n in 0..70u8 {
            let bytes: Vec<u8> = (0..n).map(|i| i.wrapping_mul(37)).collect();
            assert_eq!(unbase64(&base64(&bytes)).unwrap(), bytes, "{n} bytes");
        }
        assert_eq!(base64(b"Man"), "TWFu");
        assert_eq!(base64(b"Ma"), "TWE=");
        assert_eq!(base64(b"M"), "TQ==");
        assert!(unbase64("TWE").is_none());
        assert!(unbase64("TW=u").is_none());
        assert!(unbase64("TW!u").is_none());
    }

    #[test]
    fn an_artifact_arrives_whole_or_is_refused() {
        let bytes: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let (chunks, r) = split("c/f", &bytes);
        assert!(chunks.len() > 1);
        let mut got = Received::default();
        // Out of order is fine.
        for (i, c) in chunks.iter().enumerate().rev() {
            got.chunk("c/f".into(), i as u32, c.clone());
        }
        assert_eq!(got.assemble(&r).unwrap(), bytes);
        // A missing chunk, or one garbled in transit, fails.
        let mut missing = Received::default();
        for (i, c) in chunks.iter().enumerate().skip(1) {
            missing.chunk("c/f".into(), i as u32, c.clone());
        }
        assert!(missing.assemble(&r).unwrap_err().contains("chunks arrived"));
        let mut garbled = got.clone();
        let mut bad = chunks[0].clone();
        bad.replace_range(0..4, "AAAA");
        garbled.chunk("c/f".into(), 0, bad);
        assert!(garbled.assemble(&r).unwrap_err().contains("garbled"));
    }

    #[test]
    fn a_check_that_must_bring_a_log_fails_without_one_or_with_a_bad_one() {
        let got = Received::default();
        assert!(judge(&got, "scx-engine-replay", true, &[]).is_err());
        assert_eq!(judge(&got, "scx-faults", true, &[]), Ok(String::new()));
        // A failed check need not bring one (it already fails).
        assert!(judge(&got, "scx-engine-replay", false, &[]).is_ok());
        let (chunks, r) = split("scx-engine-replay/engine.log", b"not a log\n");
        let mut got = Received::default();
        got.chunk(r.name.clone(), 0, chunks[0].clone());
        let e = judge(&got, "scx-engine-replay", true, &[r]).unwrap_err();
        assert!(e.contains("not replayable"), "{e}");
    }
}

#[cfg(test)]
mod replay_tests {
    use super::*;
    use dfsched::engine_log::{Header, Line, Step, FORMAT_VERSION};
    use dfsched_core::{AppId, Config, CpuId, DfId, Engine, Event, Nanos, TaskId, Topology};

    /// A real engine's log, as the runtime writes it (its lines).
    fn log() -> Vec<Line> {
        let topo = Topology::test(1, 2, 2, 1);
        let mut engine = Engine::new(topo.clone(), Config::default()).unwrap();
        let mut lines = vec![Line::Header(Box::new(Header {
            version: FORMAT_VERSION,
            pid: 1,
            segment: 0,
            body: "scx".into(),
            policy: engine.config().policy,
            topology: topo.clone(),
            config: engine.config().clone(),
            max_bytes: 1 << 20,
        }))];
        let mut events = Vec::new();
        for t in 1..=4u64 {
            events.push(Event::TaskNew {
                task: TaskId(t),
                app: AppId(0),
                allowed: topo.cpus().clone(),
                cpu: Some(CpuId(0)),
            });
            events.push(Event::Hint {
                task: TaskId(t),
                app: AppId(0),
                cur: None,
                next: Some(DfId(t % 2 + 1)),
            });
        }
        events.push(Event::Balance { now: Nanos(1) });
        for (n, event) in events.into_iter().enumerate() {
            let mut out = Vec::new();
            engine.handle(event.clone(), &mut out).unwrap();
            lines.push(Line::Step(Step {
                n: n as u64,
                event,
                decisions: out,
                error: None,
            }));
        }
        lines.push(Line::End(dfsched::engine_log::End { steps: 9 }));
        lines
    }

    fn sent(lines: &[Line]) -> (Received, ArtifactRef) {
        let text: String = lines
            .iter()
            .map(|l| serde_json::to_string(l).unwrap() + "\n")
            .collect();
        let (chunks, r) = split("scx-engine-replay/engine.log", text.as_bytes());
        let mut got = Received::default();
        for (i, c) in chunks.into_iter().enumerate() {
            got.chunk(r.name.clone(), i as u32, c);
        }
        (got, r)
    }

    #[test]
    fn a_log_sent_from_the_guest_replays_identically_on_the_host() {
        let (got, r) = sent(&log());
        let said = judge(&got, "scx-engine-replay", true, &[r]).unwrap();
        assert!(said.contains("identical: 9 events"), "{said}");
    }

    #[test]
    fn a_decision_the_host_does_not_make_fails_the_check_at_its_event() {
        let mut lines = log();
        let Line::Step(step) = &mut lines[2] else {
            panic!("line 2 is a step")
        };
        step.decisions.clear();
        let (got, r) = sent(&lines);
        let e = judge(&got, "scx-engine-replay", true, &[r]).unwrap_err();
        assert!(e.contains("differs at event 1 (line 3)"), "{e}");
    }

    #[test]
    fn a_log_with_no_end_line_fails_the_check() {
        let mut lines = log();
        lines.pop();
        let (got, r) = sent(&lines);
        let e = judge(&got, "engine-replay", true, &[r]).unwrap_err();
        assert!(e.contains("incomplete"), "{e}");
    }
}
