//! The control socket's wire format: one JSON object per line each way.
//!
//! ```text
//! → {"op":"group","group":7,"home":"0-3","quota":0}   a group of the caller's (its own id 7) lives on 0-3
//! ← {"ok":true,"gid":2}                                  (2: the scheduler's id, for logs only)
//! → {"op":"place","tid":4242,"group":7}                 thread 4242 joins the caller's group 7
//! → {"op":"unplace","tid":4242}                         back to the shared queue
//! → {"op":"reclaim","group":7}                          the group is gone (its queued threads drain)
//! → {"op":"state"}                                      ← {"ok":true,"state":{…}}
//! ← {"ok":false,"error":"…"}                            any refusal
//! ```
//!
//! Group ids are the caller's own (dfsched-core's `GroupId`s): each connection has its own namespace,
//! mapped to the scheduler's ids by the server, and its groups are reclaimed and its threads unplaced
//! when it closes. So two programs cannot touch each other's groups, and a program that dies leaves
//! nothing behind.
//!
//! This format is also written by dfsched-rt's client (`crates/dfsched-rt/src/scx.rs`); the tests of
//! both sides hold the same example lines.

use serde::{Deserialize, Serialize};

/// Longest request line the server reads; a longer one closes the connection.
pub const MAX_LINE: usize = 4096;

/// A request from a client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Creates or updates the caller's group `group`.
    Group {
        /// The caller's id for the group.
        group: u64,
        /// Its home, as a CPU list (`0-3,8`).
        home: String,
        /// Dispatches in a row per CPU (0: the scheduler's default).
        #[serde(default)]
        quota: u32,
    },
    /// Puts thread `tid` into the caller's group `group`.
    Place {
        /// The thread (a kernel tid).
        tid: u32,
        /// The caller's id for the group.
        group: u64,
    },
    /// Takes thread `tid` out of its group.
    Unplace {
        /// The thread.
        tid: u32,
    },
    /// Ends the caller's group `group`.
    Reclaim {
        /// The caller's id for the group.
        group: u64,
    },
    /// Asks for the scheduler's state.
    State,
}

/// The server's answer to one request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    /// Whether the request was carried out.
    pub ok: bool,
    /// Why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The scheduler's id of the group (to `group`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
    /// The state (to `state`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<serde_json::Value>,
}

impl Reply {
    /// Done, nothing to say.
    pub fn ok() -> Reply {
        Reply {
            ok: true,
            error: None,
            gid: None,
            state: None,
        }
    }

    /// Refused, with why.
    pub fn error(why: impl Into<String>) -> Reply {
        Reply {
            ok: false,
            error: Some(why.into()),
            gid: None,
            state: None,
        }
    }
}

/// Why a CPU list does not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CpuListError {
    /// A piece is not a number or a range `a-b` with a ≤ b.
    #[error("bad CPU list piece {0:?}")]
    Piece(String),
    /// A CPU at or past the limit.
    #[error("CPU {cpu} is past the scheduler's limit of {limit} CPUs")]
    TooBig {
        /// The CPU.
        cpu: u32,
        /// The limit.
        limit: u32,
    },
    /// No CPU at all.
    #[error("empty CPU list")]
    Empty,
}

/// Parses a CPU list (`0-3,8`) into a bitmask of `words` 64-bit words.
pub fn parse_cpulist(text: &str, words: usize) -> Result<Vec<u64>, CpuListError> {
    let limit = (words * 64) as u32;
    let mut mask = vec![0u64; words];
    let mut any = false;
    for piece in text.trim().split(',').filter(|p| !p.is_empty()) {
        let bad = || CpuListError::Piece(piece.to_string());
        let (lo, hi) = match piece.split_once('-') {
            Some((a, b)) => (
                a.trim().parse::<u32>().map_err(|_| bad())?,
                b.trim().parse::<u32>().map_err(|_| bad())?,
            ),
            None => {
                let c = piece.trim().parse::<u32>().map_err(|_| bad())?;
                (c, c)
            }
        };
        if lo > hi {
            return Err(bad());
        }
        if hi >= limit {
            return Err(CpuListError::TooBig { cpu: hi, limit });
        }
        for c in lo..=hi {
            mask[(c / 64) as usize] |= 1 << (c % 64);
            any = true;
        }
    }
    if any {
        Ok(mask)
    } else {
        Err(CpuListError::Empty)
    }
}

/// Prints a bitmask as a CPU list (`0-3,8`).
pub fn format_cpulist(mask: &[u64]) -> String {
    let mut out: Vec<String> = Vec::new();
    let bit = |c: usize| mask[c / 64] >> (c % 64) & 1 == 1;
    let n = mask.len() * 64;
    let mut c = 0;
    while c < n {
        if bit(c) {
            let start = c;
            while c + 1 < n && bit(c + 1) {
                c += 1;
            }
            out.push(if start == c {
                start.to_string()
            } else {
                format!("{start}-{c}")
            });
        }
        c += 1;
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readme_lines_parse_to_the_requests() {
        let cases = [
            (
                r#"{"op":"group","group":7,"home":"0-3","quota":0}"#,
                Request::Group {
                    group: 7,
                    home: "0-3".into(),
                    quota: 0,
                },
            ),
            (
                r#"{"op":"place","tid":4242,"group":7}"#,
                Request::Place {
                    tid: 4242,
                    group: 7,
                },
            ),
            (
                r#"{"op":"unplace","tid":4242}"#,
                Request::Unplace { tid: 4242 },
            ),
            (
                r#"{"op":"reclaim","group":7}"#,
                Request::Reclaim { group: 7 },
            ),
            (r#"{"op":"state"}"#, Request::State),
        ];
        for (line, want) in cases {
            let got: Request = serde_json::from_str(line).unwrap();
            assert_eq!(got, want, "{line}");
            assert_eq!(serde_json::to_string(&want).unwrap(), line);
        }
    }

    /// dfsched-rt's client (`crates/dfsched-rt/src/scx.rs`) writes its keys in alphabetical order and
    /// no quota; its test holds these lines.
    #[test]
    fn the_runtime_clients_lines_parse() {
        let got: Request =
            serde_json::from_str(r#"{"group":7,"home":"0-3","op":"group"}"#).unwrap();
        assert_eq!(
            got,
            Request::Group {
                group: 7,
                home: "0-3".into(),
                quota: 0
            }
        );
        let got: Request = serde_json::from_str(r#"{"group":7,"op":"place","tid":4242}"#).unwrap();
        assert_eq!(
            got,
            Request::Place {
                tid: 4242,
                group: 7
            }
        );
        let got: Request = serde_json::from_str(r#"{"group":7,"op":"reclaim"}"#).unwrap();
        assert_eq!(got, Request::Reclaim { group: 7 });
    }

    #[test]
    fn unknown_ops_and_fields_are_refused() {
        assert!(serde_json::from_str::<Request>(r#"{"op":"format_disk"}"#).is_err());
        assert!(
            serde_json::from_str::<Request>(r#"{"op":"place","tid":1,"group":2,"uid":0}"#).is_err()
        );
    }

    #[test]
    fn cpu_lists_round_trip_and_respect_the_limit() {
        let m = parse_cpulist("0-3,8,62-65", 2).unwrap();
        assert_eq!(m, vec![0b1_0000_1111 | (3 << 62), 0b11]);
        assert_eq!(format_cpulist(&m), "0-3,8,62-65");
        assert_eq!(
            parse_cpulist("127-128", 2),
            Err(CpuListError::TooBig {
                cpu: 128,
                limit: 128
            })
        );
        assert_eq!(parse_cpulist("", 2), Err(CpuListError::Empty));
        assert!(matches!(
            parse_cpulist("3-1", 2),
            Err(CpuListError::Piece(_))
        ));
        assert!(matches!(parse_cpulist("x", 2), Err(CpuListError::Piece(_))));
    }
}
