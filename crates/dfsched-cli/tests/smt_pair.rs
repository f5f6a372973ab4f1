//! `dfsched smt-pair`: on a sysfs fixture with SMT siblings, a dry run
//! plans a live process's threads onto the fixture's CPUs from a profile;
//! on a machine without SMT (this VM) the command refuses; a missing
//! process is an error naming it.

mod cli_support;

use cli_support::{dfsched, stdout_of};
use dfsched_core::activity::ActivityVector;
use dfsched_core::smt_place::{SmtProfile, ThreadProfile};
use std::process::Command;

/// A fresh directory of ours named `dfsched-smtpair-TAG-` and random
/// letters, removed on drop.
fn temp(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("dfsched-smtpair-{tag}-"))
        .tempdir()
        .unwrap()
}

fn write_profile(dir: &std::path::Path) -> std::path::PathBuf {
    let p = SmtProfile {
        command: vec!["sleep".into()],
        interval_instructions: 1000,
        ns_per_instruction: 1.0,
        bits: 1,
        super_sets: 32,
        threads: vec![ThreadProfile {
            instructions: 1000,
            vectors: vec![ActivityVector::from_mask(0xffff, 32)],
        }],
    };
    let f = dir.join("profile.json");
    std::fs::write(&f, serde_json::to_string(&p).unwrap()).unwrap();
    f
}

/// Kills and reaps the child on drop (also when an assertion fails).
struct Child(std::process::Child);
impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn dry_run_plans_a_live_process_onto_fixture_siblings() {
    let tmp = temp("fixture");
    let dir = tmp.path();
    dfsched::sysfs::write_test_tree(dir, 1, 1, 2, 2).unwrap();
    let profile = write_profile(dir);
    let child = Child(Command::new("sleep").arg("30").spawn().unwrap());
    let pid = child.0.id().to_string();
    let out = dfsched(&[
        "smt-pair",
        "--profile",
        profile.to_str().unwrap(),
        "--pid",
        &pid,
        "--once",
        "--dry-run",
        "--sysfs-root",
        dir.to_str().unwrap(),
    ]);
    let text = stdout_of(&out);
    let plan: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    let plan = plan.as_array().unwrap();
    assert_eq!(plan.len(), 1, "sleep has one thread: {text}");
    assert_eq!(plan[0]["tid"].to_string(), pid);
    assert!(
        plan[0]["cpu"].as_u64().unwrap() < 4,
        "a fixture CPU: {text}"
    );
    drop(child);
}

#[test]
fn refused_without_smt_siblings_and_for_a_missing_process() {
    let tmp = temp("nosmt");
    let dir = tmp.path();
    dfsched::sysfs::write_test_tree(dir, 1, 1, 2, 1).unwrap();
    let profile = write_profile(dir);
    let child = Child(Command::new("sleep").arg("30").spawn().unwrap());
    let pid = child.0.id().to_string();
    let base = ["smt-pair", "--profile", profile.to_str().unwrap(), "--once"];
    let out = dfsched(
        &[
            &base[..],
            &["--pid", &pid, "--sysfs-root", dir.to_str().unwrap()],
        ]
        .concat(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("needs SMT siblings"),
        "{err}"
    );
    drop(child);
    let out = dfsched(&[&base[..], &["--pid", "999999999"]].concat());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("999999999"), "{err}");
}
