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

use std::path::PathBuf;
use support::{
    masks_named, named_program, run_cmd, scratch, together_on_one_cpu, two_cpus, wait_masks,
    Running, NAME_RULES,
};

/// Writes `text` as a rules file in the scratch directory.
fn rules_file(name: &str, text: &str) -> PathBuf {
    let path = scratch().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_rules_file_groups_threads_by_name_in_a_program_without_dfsched_calls() {
    let Some(cpus) = two_cpus("a_rules_file_groups_threads_by_name") else {
        return;
    };
    let Some(prog) = named_program() else {
        return;
    };
    let rules = rules_file("groups.toml", NAME_RULES);
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
    let (last, settled) = wait_masks(pid, |m| {
        together_on_one_cpu(m, "worker-1", 2)
            && together_on_one_cpu(m, "worker-2", 2)
            && masks_named(m, "other-1") == [&cpus]
    });
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
