//! Rules: how dfsched treats the processes and threads of a program that
//! was not written for it, by what can be seen of them from outside: the
//! process's command name, executable and cgroup, its user, and each
//! thread's name.
//!
//! ```text
//!  rules file (TOML, `dfsched run --rules`, `dfsched attach --rules`)
//!     │  dfsched-cli: parsed, checked, errors point at the line
//!     ▼
//!  Rules (this file) ── JSON in DFSCHED_RULES ──► the runtime in each process
//!     process start:   process_choice(facts)        → its policy, or dfsched off
//!     thread created / renamed: thread_choice(facts, name) → a DF, left alone, or the policy's way
//! ```
//!
//! # Matching: first match wins
//!
//! A [`Rule`] has matchers and one [`Action`]. A matcher left out matches
//! anything; a rule matches when all its matchers do. The rules are tried
//! in order and **the first rule that matches decides**; later rules are
//! not looked at.
//!
//! - **The process** (when the runtime starts, or when `dfsched attach`
//!   takes a process): the first rule *without* a `thread` matcher whose
//!   process matchers match decides the process's policy: `policy = P`
//!   runs it under `P` (`none`: dfsched off for this process), `leave`
//!   is `none`, and a `df` rule keeps the policy given on the command
//!   line (its threads get the DF below). No such rule: the command line's
//!   policy.
//! - **Each thread** (when it is created, and again whenever it is renamed
//!   through `pthread_setname_np`): the first rule whose process matchers
//!   and `thread` matcher match decides: `df` gives the thread that DF (as
//!   if it had called `dfsched_enter(DF)`), `leave` leaves it alone (its
//!   mask is never set; a thread dfsched had placed gets its allowed CPUs
//!   back), and `policy` (a rule without `thread`) lets the process's
//!   policy place it as any thread without a DF. No rule: the policy's
//!   way.
//!
//! A `df = "suffix"` rule matches only a thread whose name holds a decimal
//! number: the DF is `df_base` plus the **last** run of digits in the name
//! (`worker-3` → 3, `io-3-a` → 3, `worker` does not match and the next
//! rule is tried). DF 0 means "no DF" in dfsched's API, so a rule whose DF
//! comes out 0 (`worker-0` with `df_base = 0`) gives none; the default
//! `df_base` is therefore 1 in rules files (`worker-0` → DF 1). A rule's
//! DFs are DFs of application 0, the same as the program's own
//! `dfsched_enter` calls: a rule can put threads beside hinted ones.
//!
//! Patterns are globs over the whole text: `*` any run of characters, `?`
//! one character, `\` takes the next character literally. Thread and
//! command names are the kernel's (`/proc/PID/task/TID/comm`: at most 15
//! bytes; a longer name given to `pthread_setname_np` fails there).
//!
//! Not seen: a thread renamed with `prctl(PR_SET_NAME)` or by writing its
//! `comm` file (no library call to interpose) keeps the rule of its
//! earlier name until it is renamed through `pthread_setname_np`.

use dfsched_core::Policy;
use serde::{Deserialize, Serialize};

/// The longest pattern accepted, in bytes: a path-sized bound on what a
/// glob may cost to match.
pub const MAX_PATTERN_LEN: usize = 4096;
/// The most rules a file may hold: matching is a walk down the list on
/// each thread's creation and rename.
pub const MAX_RULES: usize = 1000;

/// A glob over a whole text: `*`, `?` and `\` (see the module doc).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Glob(String);

impl Glob {
    /// `pattern` as a glob, checked: non-empty, at most
    /// [`MAX_PATTERN_LEN`] bytes, no dangling `\`.
    pub fn new(pattern: &str) -> Result<Glob, String> {
        if pattern.is_empty() {
            return Err("an empty pattern matches nothing: leave the matcher out".into());
        }
        if pattern.len() > MAX_PATTERN_LEN {
            return Err(format!(
                "a pattern of {} bytes (at most {MAX_PATTERN_LEN})",
                pattern.len()
            ));
        }
        let trailing = pattern.bytes().rev().take_while(|b| *b == b'\\').count();
        if trailing % 2 == 1 {
            return Err(format!("pattern {pattern:?} ends in a lone `\\`"));
        }
        Ok(Glob(pattern.to_string()))
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the whole of `text` matches. Linear in `text` per star
    /// (the classic backtrack to the last `*`), never exponential.
    pub fn matches(&self, text: &str) -> bool {
        let p: Vec<char> = self.0.chars().collect();
        let t: Vec<char> = text.chars().collect();
        let (mut pi, mut ti) = (0, 0);
        // The position after the last `*` seen, and the text position it
        // stood for.
        let mut star: Option<(usize, usize)> = None;
        while ti < t.len() {
            match p.get(pi) {
                Some('*') => {
                    star = Some((pi + 1, ti));
                    pi += 1;
                    continue;
                }
                Some('?') => {
                    pi += 1;
                    ti += 1;
                    continue;
                }
                Some('\\') if p.get(pi + 1) == Some(&t[ti]) => {
                    pi += 2;
                    ti += 1;
                    continue;
                }
                Some(c) if *c != '\\' && *c == t[ti] => {
                    pi += 1;
                    ti += 1;
                    continue;
                }
                _ => {}
            }
            match star {
                Some((after, from)) => {
                    pi = after;
                    ti = from + 1;
                    star = Some((after, from + 1));
                }
                None => return false,
            }
        }
        p[pi..].iter().all(|c| *c == '*')
    }
}

/// How a `df` rule names its DF.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum DfChoice {
    /// This DF, for every thread the rule matches (never 0).
    Fixed(u64),
    /// `base` plus the last run of digits in the thread's name (see the
    /// module doc); a name with no digits does not match the rule.
    Suffix {
        /// Added to the number read from the name.
        base: u64,
    },
}

/// What a rule does to what it matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum Action {
    /// The process's policy; `None` = dfsched off for the process. Only in
    /// rules without a `thread` matcher (a policy is per process).
    Policy(Option<Policy>),
    /// The thread's DF.
    Df(DfChoice),
    /// Leave alone: a thread is never placed; a process (a rule without
    /// `thread`) runs without dfsched.
    Leave,
}

/// One rule: matchers (each `None` matches anything) and an action.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// The process's command name (`/proc/PID/comm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm: Option<Glob>,
    /// The process's executable, as an absolute path (`/proc/PID/exe`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exe: Option<Glob>,
    /// One of the process's cgroup paths (`/proc/PID/cgroup`, the path
    /// after the second `:`; under cgroup v2 the one line `0::/PATH`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<Glob>,
    /// The process's real user id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// The thread's name (`/proc/PID/task/TID/comm`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<Glob>,
    /// What the rule does.
    pub action: Action,
}

impl Rule {
    /// Whether the process matchers match `p`.
    fn matches_process(&self, p: &ProcessFacts) -> bool {
        self.comm.as_ref().is_none_or(|g| g.matches(&p.comm))
            && self.exe.as_ref().is_none_or(|g| g.matches(&p.exe))
            && self
                .cgroup
                .as_ref()
                .is_none_or(|g| p.cgroups.iter().any(|c| g.matches(c)))
            && self.uid.is_none_or(|u| u == p.uid)
    }

    /// Why the rule cannot be used, if it cannot.
    pub fn check(&self) -> Result<(), String> {
        match self.action {
            Action::Policy(_) if self.thread.is_some() => Err(
                "a policy is per process: a rule with `thread` cannot set one \
                 (use `leave = true` or `df` for threads)"
                    .into(),
            ),
            Action::Df(DfChoice::Fixed(0)) => {
                Err("DF 0 means no DF; give a DF from 1 (or leave the thread to the policy)".into())
            }
            _ => Ok(()),
        }
    }
}

/// An ordered list of rules; the first that matches decides.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rules {
    /// In order.
    pub rules: Vec<Rule>,
}

/// What the rules say of a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessChoice {
    /// Run under this policy.
    Policy(Policy),
    /// dfsched off for this process (`policy = "none"` or `leave`).
    Off,
    /// No rule decides: the policy given by the command line or
    /// `DFSCHED_POLICY`.
    Default,
}

/// What the rules say of a thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadChoice {
    /// Give it this DF (never 0).
    Df(u64),
    /// Never place it.
    Leave,
    /// Place it by the process's policy, with no DF.
    Default,
}

/// What the rules look at of a process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessFacts {
    /// `/proc/PID/comm`, without its newline.
    pub comm: String,
    /// `/proc/PID/exe`'s target; empty if unreadable.
    pub exe: String,
    /// The paths of `/proc/PID/cgroup`'s lines.
    pub cgroups: Vec<String>,
    /// The real user id (`/proc/PID/status`'s first `Uid:` field).
    pub uid: u32,
}

impl ProcessFacts {
    /// Reads process `pid`'s facts under `proc_root` (`/proc`). A file that
    /// cannot be read leaves its field empty (a rule on it then does not
    /// match), except the uid: `None` if the status cannot be read.
    pub fn read(proc_root: &std::path::Path, pid: u32) -> Option<ProcessFacts> {
        let dir = proc_root.join(pid.to_string());
        let status = std::fs::read_to_string(dir.join("status")).ok()?;
        let uid = status
            .lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|u| u.parse().ok())?;
        let comm = std::fs::read_to_string(dir.join("comm"))
            .map(|s| s.trim_end_matches('\n').to_string())
            .unwrap_or_default();
        let exe = std::fs::read_link(dir.join("exe"))
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let cgroups = std::fs::read_to_string(dir.join("cgroup"))
            .map(|s| {
                s.lines()
                    .filter_map(|l| Some(l.splitn(3, ':').nth(2)?.to_string()))
                    .collect()
            })
            .unwrap_or_default();
        Some(ProcessFacts {
            comm,
            exe,
            cgroups,
            uid,
        })
    }
}

/// The last run of decimal digits in `name`, if any (and if it fits).
fn last_number(name: &str) -> Option<u64> {
    let end = name.rfind(|c: char| c.is_ascii_digit())? + 1;
    let start = name[..end]
        .rfind(|c: char| !c.is_ascii_digit())
        .map_or(0, |i| i + 1);
    name[start..end].parse().ok()
}

impl Rules {
    /// The rules from their JSON form (what `DFSCHED_RULES` holds), each
    /// checked ([`Rule::check`]) and their number bounded.
    pub fn from_json(text: &str) -> Result<Rules, String> {
        let rules: Rules = serde_json::from_str(text).map_err(|e| e.to_string())?;
        rules.check()?;
        Ok(rules)
    }

    /// Checks every rule and their number; the error names the rule (from 1).
    pub fn check(&self) -> Result<(), String> {
        if self.rules.len() > MAX_RULES {
            return Err(format!("{} rules (at most {MAX_RULES})", self.rules.len()));
        }
        for (i, r) in self.rules.iter().enumerate() {
            r.check().map_err(|e| format!("rule {}: {e}", i + 1))?;
            for g in [&r.comm, &r.exe, &r.cgroup, &r.thread]
                .into_iter()
                .flatten()
            {
                Glob::new(g.as_str()).map_err(|e| format!("rule {}: {e}", i + 1))?;
            }
        }
        Ok(())
    }

    /// The rules as JSON, for `DFSCHED_RULES`.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("rules serialize")
    }

    /// Whether any rule looks at thread names (otherwise a rename changes
    /// nothing and need not be looked at).
    pub fn uses_thread_names(&self) -> bool {
        self.rules
            .iter()
            .any(|r| r.thread.is_some() || matches!(r.action, Action::Df(DfChoice::Suffix { .. })))
    }

    /// The process's policy (see the module doc).
    pub fn process_choice(&self, p: &ProcessFacts) -> ProcessChoice {
        let rule = self
            .rules
            .iter()
            .find(|r| r.thread.is_none() && r.matches_process(p));
        match rule.map(|r| r.action) {
            Some(Action::Policy(Some(policy))) => ProcessChoice::Policy(policy),
            Some(Action::Policy(None) | Action::Leave) => ProcessChoice::Off,
            Some(Action::Df(_)) | None => ProcessChoice::Default,
        }
    }

    /// What becomes of a thread named `name` of process `p` (see the
    /// module doc).
    pub fn thread_choice(&self, p: &ProcessFacts, name: &str) -> ThreadChoice {
        for r in &self.rules {
            if !r.matches_process(p) || !r.thread.as_ref().is_none_or(|g| g.matches(name)) {
                continue;
            }
            return match r.action {
                Action::Df(DfChoice::Fixed(df)) => ThreadChoice::Df(df),
                Action::Df(DfChoice::Suffix { base }) => {
                    let Some(n) = last_number(name) else {
                        continue;
                    };
                    match n.checked_add(base) {
                        Some(0) | None => ThreadChoice::Default,
                        Some(df) => ThreadChoice::Df(df),
                    }
                }
                Action::Leave => ThreadChoice::Leave,
                Action::Policy(_) => ThreadChoice::Default,
            };
        }
        ThreadChoice::Default
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn glob(p: &str) -> Glob {
        Glob::new(p).unwrap()
    }

    fn rule(thread: Option<&str>, action: Action) -> Rule {
        Rule {
            comm: None,
            exe: None,
            cgroup: None,
            uid: None,
            thread: thread.map(glob),
            action,
        }
    }

    fn facts(comm: &str) -> ProcessFacts {
        ProcessFacts {
            comm: comm.into(),
            exe: format!("/usr/bin/{comm}"),
            cgroups: vec!["/user.slice/app.scope".into()],
            uid: 1000,
        }
    }

    #[test]
    fn globs_match_the_whole_text() {
        assert!(glob("worker-*").matches("worker-3"));
        assert!(glob("worker-*").matches("worker-"));
        assert!(!glob("worker-*").matches("a worker-3"));
        assert!(glob("*-?").matches("io-3"));
        assert!(!glob("*-?").matches("io-33"));
        assert!(glob("a*b*c").matches("axxbyybzc"));
        assert!(!glob("a*b*c").matches("axxbyyb"));
        assert!(glob("\\*x").matches("*x"));
        assert!(!glob("\\*x").matches("ax"));
        assert!(glob("*").matches(""));
        assert!(glob("/usr/*/post*").matches("/usr/lib/postgres"));
    }

    #[test]
    fn bad_globs_are_refused() {
        assert!(Glob::new("").is_err());
        assert!(Glob::new("ab\\").is_err());
        assert!(Glob::new("ab\\\\").is_ok());
        assert!(Glob::new(&"x".repeat(MAX_PATTERN_LEN + 1)).is_err());
    }

    #[test]
    fn the_df_suffix_is_the_last_number_in_the_name() {
        assert_eq!(last_number("worker-3"), Some(3));
        assert_eq!(last_number("io-3-a"), Some(3));
        assert_eq!(last_number("w12x45"), Some(45));
        assert_eq!(last_number("worker"), None);
        assert_eq!(last_number("99999999999999999999999"), None);
    }

    #[test]
    fn the_first_matching_rule_decides_a_thread() {
        let rules = Rules {
            rules: vec![
                rule(Some("gc*"), Action::Leave),
                rule(Some("worker-*"), Action::Df(DfChoice::Suffix { base: 1 })),
                rule(Some("worker*"), Action::Df(DfChoice::Fixed(100))),
                rule(None, Action::Policy(Some(Policy::CoThread))),
            ],
        };
        let p = facts("server");
        assert_eq!(rules.thread_choice(&p, "gc-1"), ThreadChoice::Leave);
        assert_eq!(rules.thread_choice(&p, "worker-0"), ThreadChoice::Df(1));
        assert_eq!(rules.thread_choice(&p, "worker-3"), ThreadChoice::Df(4));
        // No digits: the suffix rule does not match, the next one does.
        assert_eq!(rules.thread_choice(&p, "worker-x"), ThreadChoice::Df(100));
        assert_eq!(rules.thread_choice(&p, "main"), ThreadChoice::Default);
        assert_eq!(
            rules.process_choice(&p),
            ProcessChoice::Policy(Policy::CoThread)
        );
    }

    #[test]
    fn a_suffix_df_of_zero_is_no_df() {
        let rules = Rules {
            rules: vec![rule(Some("w*"), Action::Df(DfChoice::Suffix { base: 0 }))],
        };
        assert_eq!(
            rules.thread_choice(&facts("x"), "w0"),
            ThreadChoice::Default
        );
        assert_eq!(rules.thread_choice(&facts("x"), "w2"), ThreadChoice::Df(2));
    }

    #[test]
    fn process_matchers_select_the_process_policy() {
        let mut make = rule(None, Action::Leave);
        make.comm = Some(glob("make"));
        let mut pg = rule(None, Action::Policy(Some(Policy::DataAffinity)));
        pg.exe = Some(glob("/usr/bin/post*"));
        pg.uid = Some(1000);
        let mut other_user = rule(None, Action::Policy(None));
        other_user.uid = Some(0);
        let mut scoped = rule(None, Action::Policy(Some(Policy::CoThread)));
        scoped.cgroup = Some(glob("/user.slice/*"));
        let rules = Rules {
            rules: vec![make, other_user, pg, scoped],
        };
        assert_eq!(rules.process_choice(&facts("make")), ProcessChoice::Off);
        assert_eq!(
            rules.process_choice(&facts("postgres")),
            ProcessChoice::Policy(Policy::DataAffinity)
        );
        assert_eq!(
            rules.process_choice(&facts("cc1")),
            ProcessChoice::Policy(Policy::CoThread)
        );
        let mut elsewhere = facts("cc1");
        elsewhere.cgroups = vec!["/system.slice/x".into()];
        assert_eq!(rules.process_choice(&elsewhere), ProcessChoice::Default);
    }

    #[test]
    fn thread_rules_do_not_decide_the_process_policy() {
        let rules = Rules {
            rules: vec![
                rule(Some("main"), Action::Leave),
                rule(None, Action::Policy(Some(Policy::CoThread))),
            ],
        };
        assert_eq!(
            rules.process_choice(&facts("x")),
            ProcessChoice::Policy(Policy::CoThread)
        );
    }

    #[test]
    fn bad_rules_are_refused_with_their_number() {
        let rules = Rules {
            rules: vec![
                rule(Some("a"), Action::Leave),
                rule(Some("b"), Action::Policy(Some(Policy::CoThread))),
            ],
        };
        let e = rules.check().unwrap_err();
        assert!(e.starts_with("rule 2: a policy is per process"), "{e}");
        let zero = Rules {
            rules: vec![rule(None, Action::Df(DfChoice::Fixed(0)))],
        };
        assert!(zero.check().unwrap_err().contains("DF 0 means no DF"));
    }

    #[test]
    fn rules_round_trip_through_their_json() {
        let rules = Rules {
            rules: vec![
                rule(Some("w-*"), Action::Df(DfChoice::Suffix { base: 1 })),
                rule(None, Action::Policy(None)),
                rule(None, Action::Df(DfChoice::Fixed(7))),
            ],
        };
        assert_eq!(Rules::from_json(&rules.to_json()).unwrap(), rules);
        assert!(Rules::from_json(r#"{"rules":[{"action":"leave","colour":"x"}]}"#).is_err());
        assert!(Rules::from_json(r#"{"rules":[{"thread":"","action":"leave"}]}"#).is_err());
    }

    #[test]
    fn facts_are_read_from_proc() {
        let me = ProcessFacts::read(std::path::Path::new("/proc"), std::process::id()).unwrap();
        assert!(!me.comm.is_empty());
        assert!(me.exe.starts_with('/'), "{}", me.exe);
        // SAFETY: getuid has no preconditions.
        assert_eq!(me.uid, unsafe { libc::getuid() });
        assert!(ProcessFacts::read(std::path::Path::new("/nonexistent"), 1).is_none());
    }
}
