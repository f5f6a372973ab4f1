//! `dfsched calibrate` and the commands that read its machine profile:
//! a quick calibration writes a well-formed profile whose costs keep the
//! orderings that must hold on any machine, to the path given or the
//! user's config directory; with one CPU the cross-CPU costs are null with
//! a reason; a bad profile is refused with an error naming the file and the
//! problem, before anything runs; `bench df --predict` shows predicted and
//! measured ratios side by side.

mod cli_support;

use cli_support::{dfsched, stdout_json, BIN, TINY};
use dfsched_core::{CpuId, CpuSet};
use dfsched_sim::profile::{MachineProfile, PROFILE_VERSION};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A scratch directory for one test, removed when it is dropped (passed
/// or failed).
fn scratch(test: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("dfsched-calibrate-{test}-"))
        .tempdir()
        .unwrap()
}

fn read_profile(path: &Path) -> MachineProfile {
    let text = std::fs::read_to_string(path).unwrap();
    let p: MachineProfile = serde_json::from_str(&text).unwrap();
    p.validate().unwrap();
    p
}

fn median(p: &MachineProfile, name: &str) -> f64 {
    p.costs
        .named()
        .iter()
        .find(|(n, _)| *n == name)
        .and_then(|(_, c)| c.median_ns)
        .unwrap_or_else(|| panic!("{name} was not measured: {:?}", p.costs))
}

#[test]
fn quick_calibration_writes_a_well_formed_profile_with_the_orderings_that_must_hold() {
    let tmp = scratch("quick");
    let dir = tmp.path();
    let path = dir.join("m.json");
    let out = dfsched(&["calibrate", "--quick", "--output", path.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("memory_fetch"), "{text}");
    let p = read_profile(&path);
    assert_eq!(p.version, PROFILE_VERSION);
    assert!(p.host.quick);
    // The topology is the runtime's reading of this machine's sysfs.
    let topo = dfsched::sysfs::read_topology(Path::new("/")).unwrap();
    assert_eq!(p.topology, topo);
    // A cycle is shorter than any load; a load that hits the L1 is faster
    // than one that goes to the L2, and that faster than memory.
    let (cycle, l1, l2, mem) = (
        median(&p, "cycle"),
        median(&p, "l1_hit"),
        median(&p, "l2_hit"),
        median(&p, "memory_fetch"),
    );
    assert!(cycle < l1, "cycle {cycle} ns, L1 hit {l1} ns");
    assert!(l1 < l2, "L1 {l1} ns, L2 {l2} ns");
    assert!(l2 < mem, "L2 {l2} ns, memory {mem} ns");
    assert!(median(&p, "pass_access") < mem);
    // The memory probe walked a buffer larger than the L2 it was sized against.
    let walked = p.costs.memory_fetch.buffer_bytes.unwrap();
    assert!(walked >= 64 << 20, "{walked}");
    // Every cost has a spread around its median.
    for (name, c) in p.costs.named() {
        if let Some(m) = c.median_ns {
            assert!(c.min_ns.unwrap() <= m && m <= c.max_ns.unwrap(), "{name}");
            assert_eq!(c.rounds, 3, "{name}: --quick runs three rounds");
        }
    }
    // A wake-up onto another CPU is a wait plus work on CPUs: its CPU
    // time (both threads') is measured where two CPUs are allowed, and a
    // leg's CPU time cannot exceed what the two threads had between them
    // (twice the leg).
    if p.host.allowed.len() >= 2 {
        let (leg, cpu) = (
            median(&p, "wake_other_cpu"),
            median(&p, "wake_other_cpu_time"),
        );
        assert!(cpu > 0.0 && cpu <= 2.0 * leg, "leg {leg} ns, CPU {cpu} ns");
    }
    // The simulator takes it.
    p.calibration().unwrap();
}

#[test]
fn with_no_path_the_profile_goes_to_the_config_directory() {
    let tmp = scratch("xdg");
    let dir = tmp.path();
    let out = Command::new(BIN)
        .args(["calibrate", "--quick", "--json"])
        .env("XDG_CONFIG_HOME", dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: MachineProfile = serde_json::from_value(stdout_json(&out)).unwrap();
    let written = read_profile(&dir.join("dfsched/machine.json"));
    assert_eq!(printed, written, "--json prints what was written");
    // And the simulator finds it there by default.
    let out = Command::new(BIN)
        .args([
            "bench",
            "df",
            "--threads",
            "2",
            "--dfs",
            "1",
            "--df-bytes",
            "1024",
            "--iterations",
            "20",
            "--repeat",
            "1",
            "--modes",
            "vanilla",
            "--quiet",
            "--json",
            "--predict",
        ])
        .env("XDG_CONFIG_HOME", dir)
        .output()
        .unwrap();
    let v = stdout_json(&out);
    let want = dir.join("dfsched/machine.json");
    assert_eq!(v["prediction"]["profile"], want.to_str().unwrap());
}

/// Runs `dfsched ARGS` with this thread's affinity narrowed to `cpus` (the
/// child inherits it), restoring it afterwards.
fn dfsched_on(cpus: &CpuSet, args: &[&str]) -> Output {
    let before = dfsched::sys::get_affinity(0).unwrap();
    dfsched::sys::set_affinity(0, cpus).unwrap();
    let out = dfsched(args);
    dfsched::sys::set_affinity(0, &before).unwrap();
    out
}

#[test]
fn with_one_cpu_the_cross_cpu_costs_are_null_with_a_reason() {
    let allowed = dfsched::sys::get_affinity(0).unwrap();
    let first: CpuId = allowed.iter().next().unwrap();
    let tmp = scratch("one-cpu");
    let dir = tmp.path();
    let path = dir.join("m.json");
    let out = dfsched_on(
        &CpuSet::single(first),
        &["calibrate", "--quick", "-o", path.to_str().unwrap()],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let p = read_profile(&path);
    assert_eq!(p.host.allowed, CpuSet::single(first));
    for name in [
        "line_write_transfer",
        "line_read_transfer",
        "line_contended",
        "wake_other_cpu",
        "wake_other_cpu_time",
        "migration",
    ] {
        let c = p
            .costs
            .named()
            .into_iter()
            .find(|(n, _)| *n == name)
            .unwrap()
            .1;
        assert!(c.median_ns.is_none(), "{name} invented on one CPU: {c:?}");
        assert!(
            c.reason.as_deref().unwrap_or("").contains("one CPU"),
            "{name}: {c:?}"
        );
    }
    // The same-CPU costs were measured.
    assert!(p.costs.wake_same_cpu.median_ns.is_some());
    // The simulator keeps its defaults for them and says which.
    let cal = p.calibration().unwrap();
    assert!(
        cal.defaulted.contains(&"line_read_transfer"),
        "{:?}",
        cal.defaulted
    );
}

/// A profile of round figures for this machine's topology.
fn example_profile(dir: &Path) -> (PathBuf, MachineProfile) {
    let topo = dfsched::sysfs::read_topology(Path::new("/")).unwrap();
    let mut p = MachineProfile::example(topo);
    p.host.allowed = dfsched::sys::get_affinity(0)
        .unwrap()
        .intersection(p.topology.cpus());
    let path = dir.join("example.json");
    std::fs::write(&path, serde_json::to_string_pretty(&p).unwrap()).unwrap();
    (path, p)
}

#[test]
fn a_bad_profile_is_refused_with_the_file_and_the_problem_before_anything_runs() {
    let tmp = scratch("bad");
    let dir = tmp.path();
    let (good_path, good) = example_profile(dir);
    let write = |name: &str, text: String| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let mut v99 = good.clone();
    v99.version = 99;
    let mut inverted = good.clone();
    inverted.costs.l2_hit.min_ns = Some(1e9);
    let cases: Vec<(PathBuf, &str)> = vec![
        (dir.join("missing.json"), "reading the machine profile"),
        (
            write("garbage.json", "{ not json".into()),
            "is not a profile",
        ),
        (
            write("v99.json", serde_json::to_string(&v99).unwrap()),
            "profile version 99",
        ),
        (
            write("inverted.json", serde_json::to_string(&inverted).unwrap()),
            "cost l2_hit",
        ),
    ];
    // A short simulated df-bench on the machine profile at `p`.
    let sim_on = |p: &str| {
        dfsched(&[
            "sim",
            "df-bench",
            "--threads",
            "4",
            "--dfs",
            "2",
            "--passes",
            "2",
            "--machine",
            p,
        ])
    };
    for (path, needle) in &cases {
        let p = path.to_str().unwrap();
        let sim = sim_on(p);
        let bench = dfsched(&[
            "bench",
            "df",
            "--threads",
            "2",
            "--dfs",
            "1",
            "--iterations",
            "10",
            "--repeat",
            "1",
            "--predict",
            p,
        ]);
        for (what, out) in [("sim df-bench", &sim), ("bench df", &bench)] {
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(1), "{what} {p}: {err}");
            assert!(err.contains(p), "{what}: the error names the file: {err}");
            assert!(err.contains(needle), "{what} {p}: want {needle:?} in {err}");
            assert!(out.stdout.is_empty(), "{what} {p}: printed a result");
            assert!(!err.contains("[  1/"), "{what} {p}: a run started: {err}");
        }
    }
    // The good one is taken.
    let out = sim_on(good_path.to_str().unwrap());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn bench_df_predict_puts_each_modes_predicted_ratio_beside_the_measured_one() {
    let tmp = scratch("predict");
    let dir = tmp.path();
    let (path, _) = example_profile(dir);
    let predict = [TINY, &["--quiet", "--predict", path.to_str().unwrap()]].concat();
    let v = stdout_json(&dfsched(&[&predict[..], &["--json"]].concat()));
    // The report's own keys are still there.
    assert!(v["modes"]["vanilla"]["median_s"].is_number());
    let p = &v["prediction"];
    let rows = p["rows"].as_array().unwrap();
    let modes: Vec<&str> = rows.iter().map(|r| r["mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["vanilla", "dfsched", "oracle", "split"]);
    for r in rows {
        let (m, pr) = (
            r["measured_ratio"].as_f64().unwrap(),
            r["predicted_ratio"].as_f64().unwrap(),
        );
        let e = r["error"].as_f64().unwrap();
        assert!((e - (pr / m - 1.0)).abs() < 1e-9, "{r}");
        assert!(r["predicted_s"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert_eq!(rows[0]["predicted_ratio"], 1.0);
    assert_eq!(rows[1]["policy"], "dfsched-rr");
    assert!(p["scale"].as_f64().unwrap() <= 1.0);
    // The table shows the same side by side.
    let out = dfsched(&predict);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("predicted on"), "{text}");
    assert!(text.contains("measured  predicted"), "{text}");
    // --switch-every is not modelled: a usage error, nothing runs.
    let out = dfsched(&[
        "bench",
        "df",
        "--switch-every",
        "2",
        "--predict",
        path.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
}

/// Asserts a `--predict` report's rows: the modes `modes` in that order, each
/// measured ratio `measured(mode)` (to 1e-9), each predicted ratio positive.
fn assert_prediction_rows(v: &Value, modes: &[&str], measured: impl Fn(&str) -> f64) {
    let rows = v["prediction"]["rows"].as_array().unwrap();
    let got: Vec<&str> = rows.iter().map(|r| r["mode"].as_str().unwrap()).collect();
    assert_eq!(got, modes);
    for r in rows {
        let mode = r["mode"].as_str().unwrap();
        let want = measured(mode);
        let got = r["measured_ratio"].as_f64().unwrap();
        assert!((got - want).abs() < 1e-9, "{mode}: {got} vs {want}");
        assert!(r["predicted_ratio"].as_f64().unwrap() > 0.0, "{r}");
    }
}

#[test]
fn bench_cothreads_predict_gives_throughput_ratios_beside_the_measured_ones() {
    let tmp = scratch("co-predict");
    let dir = tmp.path();
    let (path, _) = example_profile(dir);
    let p = path.to_str().unwrap();
    let base = [
        "bench",
        "cothreads",
        "--processes",
        "2",
        "--threads",
        "2",
        "--seconds",
        "0.2",
        "--repeat",
        "1",
        "--quiet",
        "--json",
    ];
    let v = stdout_json(&dfsched(&[&base[..], &["--predict", p]].concat()));
    let pr = &v["prediction"];
    assert!(
        pr["ratio"].as_str().unwrap().starts_with("throughput"),
        "{pr}"
    );
    // Measured ratio = the mode's operations over vanilla's.
    let ops = |m: &str| v["modes"][m]["ops"]["median"].as_f64().unwrap();
    assert_prediction_rows(&v, &["vanilla", "co-thread", "oracle", "split"], |mode| {
        ops(mode) / ops("vanilla")
    });
    // Without vanilla there is no length to simulate: a usage error.
    let out = dfsched(&[&base[..], &["--modes", "oracle,split", "--predict", p]].concat());
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("vanilla"));
}

#[test]
fn bench_chat_predict_gives_throughput_ratios_beside_the_measured_ones() {
    let tmp = scratch("chat-predict");
    let dir = tmp.path();
    let (path, _) = example_profile(dir);
    let p = path.to_str().unwrap();
    let base = [
        "bench",
        "chat",
        "--rooms",
        "1",
        "--messages",
        "5",
        "--repeat",
        "1",
        "--quiet",
        "--json",
    ];
    let v = stdout_json(&dfsched(&[&base[..], &["--predict", p]].concat()));
    // Measured ratio = vanilla's median time over the mode's.
    let t = |m: &str| v["modes"][m]["time_s"]["median"].as_f64().unwrap();
    assert_prediction_rows(
        &v,
        &["vanilla", "dfsched", "co-thread", "oracle", "split"],
        |mode| t("vanilla") / t(mode),
    );
    let out = dfsched(&[&base[..], &["--modes", "oracle", "--predict", p]].concat());
    assert_eq!(out.status.code(), Some(2));
}
