//! Rules files: a C program with no line of dfsched in it (tests/
//! run_fixtures/named.c) names its threads `worker-N` with
//! `pthread_setname_np` (some threads name themselves, the main thread
//! names the others right after creating them) and gets DF groups by name
//! under `dfsched run --rules FILE`; masks are read back from
//! `/proc/PID/task/TID/status`. A bad rules file is refused with its line,
//! and nothing runs.
//!
//! The program's 5 spinning threads make a 2-CPU machine heavily loaded
//! (2 or more runnable threads per CPU), so a DF group's home is one CPU:
//! the two `worker-1` threads must share one CPU, as must the two
//! `worker-2`; `other-1` matches a `leave` rule before the DF rule and must
//! keep every allowed CPU. The masks are polled until they settle (a
//! correctness wait bounded at 30 s, not a timing assertion).

#[path = "run_fixtures/support.rs"]
mod support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use support::{named_program, run_cmd, scratch, thread_masks, two_cpus, Running};

/// Writes `text` as a rules file in the scratch directory.
fn rules_file(name: &str, text: &str) -> PathBuf {
    let path = scratch().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

const RULES: &str = r#"
# other-1 would match the DF rule below: the first match wins.
[[rule]]
thread = "other-1"
leave = true

[[rule]]
thread = "*-*"
df = "suffix"
"#;

#[test]
fn a_rules_file_groups_threads_by_name_in_a_program_without_dfsched_calls() {
    let Some(cpus) = two_cpus("a_rules_file_groups_threads_by_name") else {
        return;
    };
    let Some(prog) = named_program() else {
        return;
    };
    let rules = rules_file("groups.toml", RULES);
    let names = ["worker-1", "worker-1", "worker-2", "worker-2", "other-1"];
    let cmd = run_cmd(
        &[
            "--policy",
            "data-affinity",
            "--rules",
            rules.to_str().unwrap(),
        ],
        &prog,
        &names,
    );
    let running = Running::start(cmd);
    let pid = running.pid;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last: Vec<(String, BTreeSet<u32>)>;
    let settled = loop {
        last = thread_masks(pid, "");
        let of = |name: &str| -> Vec<&BTreeSet<u32>> {
            last.iter()
                .filter(|(n, _)| n == name)
                .map(|(_, m)| m)
                .collect()
        };
        let (w1, w2, other) = (of("worker-1"), of("worker-2"), of("other-1"));
        let one_cpu_together =
            |g: &[&BTreeSet<u32>]| g.len() == 2 && g[0].len() == 1 && g[0] == g[1];
        if one_cpu_together(&w1) && one_cpu_together(&w2) && other.len() == 1 && *other[0] == cpus {
            break true;
        }
        if Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let main_mask = support::cpus_allowed(pid, pid);
    assert!(running.finish().success());
    assert!(
        settled,
        "worker-1s and worker-2s each on one CPU together, other-1 on {cpus:?}; last read: {last:?}"
    );
    // The main thread matches no rule: data-affinity leaves it unplaced.
    assert_eq!(main_mask, cpus);
}

#[test]
fn a_bad_rules_file_is_refused_with_its_line_and_nothing_runs() {
    let marker = scratch().join("bad-rules-ran");
    let _ = std::fs::remove_file(&marker);
    let rules = rules_file(
        "bad.toml",
        "[[rule]]\nthread = \"worker-*\"\npolicy = \"co-thread\"\n\n[[rule]]\ndf = \"prefix\"\n",
    );
    let script = format!("touch {}", marker.display());
    let out = run_cmd(
        &["--rules", rules.to_str().unwrap()],
        std::path::Path::new("/bin/sh"),
        &["-c", &script],
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{}:1: rule 1: a policy is per process",
            rules.display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was run"), "{stderr}");
    assert!(!marker.exists(), "the program ran");
}
