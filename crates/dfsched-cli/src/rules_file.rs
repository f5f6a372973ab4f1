//! Rules files: the TOML a user writes for `dfsched run --rules FILE` and
//! `dfsched attach --rules FILE`, checked and turned into the runtime's
//! [`dfsched::rules::Rules`] (which `dfsched run` hands to the program as
//! JSON in `DFSCHED_RULES`). Every error names the file and the line.
//!
//! ```toml
//! # First match wins: rules are tried in order, the first that matches decides.
//! [[rule]]
//! comm = "make"            # the process's command name (glob)
//! leave = true             # dfsched leaves make itself alone
//!
//! [[rule]]
//! thread = "gc-*"          # a thread name (glob)
//! leave = true             # never placed
//!
//! [[rule]]
//! thread = "worker-*"
//! df = "suffix"            # DF = df_base + the name's last number: worker-3 → 4
//! df_base = 1              # (the default; DF 0 means "no DF")
//!
//! [[rule]]
//! exe = "/usr/lib/postgresql/*/bin/postgres"
//! user = "postgres"        # a user name or uid
//! cgroup = "/system.slice/*"
//! policy = "data-affinity" # co-thread, data-affinity or none (per process)
//! ```
//!
//! Matchers: `comm`, `exe`, `cgroup`, `user` (the process) and `thread`
//! (the thread's name). Actions, exactly one per rule: `policy`, `df` (a
//! number from 1, or `"suffix"`) or `leave = true`. The meaning of each,
//! and of "first match wins", is in [`dfsched::rules`]; `dfsched run
//! --help` repeats it.

use dfsched::rules::{Action, DfChoice, Glob, Rule, Rules, MAX_RULES};
use dfsched::Policy;
use serde::Deserialize;
use std::path::Path;
use toml::Spanned;

/// The file as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToml {
    /// `[[rule]]` tables, in order.
    #[serde(default)]
    rule: Vec<Spanned<RuleToml>>,
}

/// A user: by name or by uid.
#[derive(Deserialize)]
#[serde(untagged)]
enum UserToml {
    Uid(u32),
    Name(String),
}

/// A DF: a number, or `"suffix"`.
#[derive(Deserialize)]
#[serde(untagged)]
enum DfToml {
    Fixed(u64),
    Word(String),
}

/// One `[[rule]]` as written; each field spanned so an error can point at
/// its line.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleToml {
    comm: Option<Spanned<String>>,
    exe: Option<Spanned<String>>,
    cgroup: Option<Spanned<String>>,
    user: Option<Spanned<UserToml>>,
    thread: Option<Spanned<String>>,
    policy: Option<Spanned<String>>,
    df: Option<Spanned<DfToml>>,
    df_base: Option<Spanned<u64>>,
    leave: Option<Spanned<bool>>,
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// Reads and checks the rules file at `path`. The error is one line,
/// `PATH:LINE: what is wrong` (the line left out when the file cannot be
/// read at all).
pub fn load(path: &Path) -> Result<Rules, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    parse(&text).map_err(|(line, msg)| match line {
        Some(line) => format!("{}:{line}: {msg}", path.display()),
        None => format!("{}: {msg}", path.display()),
    })
}

/// Parses rules from TOML `text`; an error carries its line (1-based).
pub fn parse(text: &str) -> Result<Rules, (Option<usize>, String)> {
    let file: FileToml = toml::from_str(text).map_err(|e| {
        let line = e.span().map(|s| line_of(text, s.start));
        (line, e.message().trim().to_string())
    })?;
    if file.rule.len() > MAX_RULES {
        return Err((
            None,
            format!("{} rules (at most {MAX_RULES})", file.rule.len()),
        ));
    }
    let mut rules = Vec::with_capacity(file.rule.len());
    for (i, spanned) in file.rule.iter().enumerate() {
        let at = |span: std::ops::Range<usize>| Some(line_of(text, span.start));
        let rule_line = at(spanned.span());
        let r = spanned.get_ref();
        let glob = |field: &Option<Spanned<String>>, what: &str| -> Result<Option<Glob>, _> {
            field
                .as_ref()
                .map(|s| {
                    Glob::new(s.get_ref())
                        .map_err(|e| (at(s.span()), format!("rule {}: `{what}`: {e}", i + 1)))
                })
                .transpose()
        };
        let uid = match &r.user {
            None => None,
            Some(u) => Some(match u.get_ref() {
                UserToml::Uid(uid) => *uid,
                UserToml::Name(name) => uid_of(name).ok_or_else(|| {
                    (
                        at(u.span()),
                        format!("rule {}: no user named {name:?} on this machine", i + 1),
                    )
                })?,
            }),
        };
        let mut actions = Vec::new();
        if let Some(p) = &r.policy {
            let policy = match p.get_ref().as_str() {
                "none" => None,
                other => Some(other.parse::<Policy>().map_err(|_| {
                    (
                        at(p.span()),
                        format!(
                            "rule {}: unknown policy {other:?} (co-thread, data-affinity or none)",
                            i + 1
                        ),
                    )
                })?),
            };
            actions.push((p.span(), Action::Policy(policy)));
        }
        if let Some(d) = &r.df {
            let base = r.df_base.as_ref().map_or(1, |b| *b.get_ref());
            let choice = match d.get_ref() {
                DfToml::Fixed(n) => DfChoice::Fixed(*n),
                DfToml::Word(w) if w == "suffix" => DfChoice::Suffix { base },
                DfToml::Word(w) => {
                    return Err((
                        at(d.span()),
                        format!(
                            "rule {}: df = {w:?}: a DF is a number from 1 or \"suffix\"",
                            i + 1
                        ),
                    ))
                }
            };
            actions.push((d.span(), Action::Df(choice)));
        }
        if let Some(b) = &r.df_base {
            if !matches!(r.df.as_ref().map(Spanned::get_ref), Some(DfToml::Word(_))) {
                return Err((
                    at(b.span()),
                    format!("rule {}: `df_base` goes with df = \"suffix\" only", i + 1),
                ));
            }
        }
        if let Some(l) = &r.leave {
            if !*l.get_ref() {
                return Err((
                    at(l.span()),
                    format!(
                        "rule {}: `leave = false` does nothing: remove the rule, or give \
                         a policy or a df",
                        i + 1
                    ),
                ));
            }
            actions.push((l.span(), Action::Leave));
        }
        // In the order written, so that a second action is pointed at.
        actions.sort_by_key(|(span, _)| span.start);
        let action = match actions.as_slice() {
            [(_, a)] => *a,
            [] => {
                return Err((
                    rule_line,
                    format!(
                        "rule {}: no action: give one of `policy`, `df` or `leave = true`",
                        i + 1
                    ),
                ))
            }
            [_, (span, _), ..] => {
                return Err((
                    at(span.clone()),
                    format!(
                        "rule {}: more than one action: give only one of `policy`, `df` or \
                         `leave`",
                        i + 1
                    ),
                ))
            }
        };
        let rule = Rule {
            comm: glob(&r.comm, "comm")?,
            exe: glob(&r.exe, "exe")?,
            cgroup: glob(&r.cgroup, "cgroup")?,
            uid,
            thread: glob(&r.thread, "thread")?,
            action,
        };
        rule.check()
            .map_err(|e| (rule_line, format!("rule {}: {e}", i + 1)))?;
        rules.push(rule);
    }
    Ok(Rules { rules })
}

/// The uid of user `name`, from the system's user database.
fn uid_of(name: &str) -> Option<u32> {
    let cname = std::ffi::CString::new(name).ok()?;
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: passwd is plain data (pointers and integers), valid zeroed.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: a NUL-terminated name, a live passwd and buffer of the length
    // given, and a live out-pointer; getpwnam_r writes only into them.
    let rc = unsafe {
        libc::getpwnam_r(
            cname.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut found,
        )
    };
    (rc == 0 && !found.is_null()).then_some(pwd.pw_uid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dfsched::rules::{ProcessChoice, ProcessFacts, ThreadChoice};

    fn err(text: &str) -> (Option<usize>, String) {
        parse(text).unwrap_err()
    }

    #[test]
    fn a_rules_file_is_read_in_order() {
        let rules = parse(
            r#"
# leave make alone
[[rule]]
comm = "make"
leave = true

[[rule]]
thread = "worker-*"
df = "suffix"

[[rule]]
thread = "io"
df = 9

[[rule]]
user = 0
policy = "none"

[[rule]]
user = "root"
exe = "/usr/*"
policy = "co-thread"
"#,
        )
        .unwrap();
        assert_eq!(rules.rules.len(), 5);
        assert_eq!(
            rules.rules[1].action,
            Action::Df(DfChoice::Suffix { base: 1 })
        );
        assert_eq!(rules.rules[2].action, Action::Df(DfChoice::Fixed(9)));
        assert_eq!(rules.rules[3].action, Action::Policy(None));
        assert_eq!(rules.rules[4].uid, Some(0));
        let p = ProcessFacts {
            comm: "make".into(),
            ..ProcessFacts::default()
        };
        assert_eq!(rules.process_choice(&p), ProcessChoice::Off);
        let p = ProcessFacts {
            comm: "server".into(),
            uid: 1000,
            ..ProcessFacts::default()
        };
        assert_eq!(rules.thread_choice(&p, "worker-3"), ThreadChoice::Df(4));
        assert_eq!(rules.thread_choice(&p, "io"), ThreadChoice::Df(9));
    }

    #[test]
    fn an_empty_file_has_no_rules() {
        assert!(parse("").unwrap().rules.is_empty());
    }

    #[test]
    fn errors_point_at_the_line() {
        let (line, msg) = err("[[rule]]\nthread = \"w*\"\npolicy = \"co-thread\"\n");
        assert_eq!(line, Some(1), "{msg}");
        assert!(msg.contains("a policy is per process"), "{msg}");

        let (line, msg) = err("[[rule]]\n\nthread = \"w*\"\ndf = \"prefix\"\n");
        assert_eq!(line, Some(4), "{msg}");
        assert!(msg.contains("a number from 1 or \"suffix\""), "{msg}");

        let (line, msg) =
            err("[[rule]]\nthread = \"w\"\nleave = true\n\n[[rule]]\npolicy = \"fast\"\n");
        assert_eq!(line, Some(6), "{msg}");
        assert!(msg.contains("rule 2: unknown policy \"fast\""), "{msg}");

        let (line, msg) = err("[[rule]]\nthread = \"w\"\ncolour = \"red\"\nleave = true\n");
        assert_eq!(line, Some(3), "{msg}");
        assert!(msg.contains("colour"), "{msg}");

        let (line, msg) = err("[[rule]]\nthread = \"w\"\nleave = true\ndf = 3\n");
        assert_eq!(line, Some(4), "{msg}");
        assert!(msg.contains("more than one action"), "{msg}");

        let (line, msg) = err("[[rule]]\nthread = \"w\"\n");
        assert_eq!(line, Some(1), "{msg}");
        assert!(msg.contains("no action"), "{msg}");

        let (line, msg) = err("[[rule]]\nthread = \"\"\nleave = true\n");
        assert_eq!(line, Some(2), "{msg}");
        assert!(msg.contains("empty pattern"), "{msg}");

        let (line, msg) = err("[[rule]]\nuser = \"no-such-user-here\"\nleave = true\n");
        assert_eq!(line, Some(2), "{msg}");

        let (line, msg) = err("[[rule]]\ndf = 0\n");
        assert_eq!(line, Some(1), "{msg}");
        assert!(msg.contains("DF 0"), "{msg}");

        let (line, msg) = err("[[rule]]\ndf = 2\ndf_base = 3\n");
        assert_eq!(line, Some(3), "{msg}");

        let (line, msg) = err("[[rule]\nleave = true\n");
        assert_eq!(line, Some(1), "{msg}");
    }

    #[test]
    fn load_names_the_file_and_line() {
        let tmp = tempfile::Builder::new()
            .prefix("dfsched-rules-")
            .tempdir()
            .unwrap();
        let path = tmp.path().join("bad.toml");
        std::fs::write(&path, "[[rule]]\nthread = \"x\"\nleave = 1\n").unwrap();
        let e = load(&path).unwrap_err();
        assert!(e.starts_with(&format!("{}:3: ", path.display())), "{e}");
        let e = load(&tmp.path().join("missing.toml")).unwrap_err();
        assert!(e.contains("cannot read"), "{e}");
    }
}
