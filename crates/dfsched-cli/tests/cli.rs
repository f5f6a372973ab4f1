//! Runs the built `dfsched` binary: JSON output parses and has the
//! documented keys, bad usage exits 2 with a message and runs nothing,
//! failures exit 1.

mod cli_support;

use cli_support::{assert_usage_errors, dfsched, stdout_json, TINY};

#[test]
fn topology_json_has_domains_and_the_allowed_set() {
    let v = stdout_json(&dfsched(&["topology", "--json"]));
    let domains = v["topology"]["domains"].as_array().expect("domains array");
    assert!(!domains.is_empty());
    let root_cpus = domains[0]["cpus"].as_str().unwrap();
    assert!(!root_cpus.is_empty(), "the root holds every CPU");
    let allowed = v["allowed"].as_str().expect("allowed is a cpulist");
    assert!(!allowed.is_empty());
    // The core's Topology deserialises back from what we printed.
    let _: dfsched_core::Topology = serde_json::from_value(v["topology"].clone()).unwrap();
}

#[test]
fn topology_text_draws_the_tree() {
    let out = dfsched(&["topology"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("CPUs "), "{text}");
    assert!(text.contains("dom0 "), "{text}");
}

#[test]
fn topology_from_a_missing_sysfs_root_fails_with_exit_1() {
    let out = dfsched(&["topology", "--sysfs-root", "/nonexistent/dfsched-test"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/dfsched-test"), "{err}");
    assert!(out.stdout.is_empty());
}

/// `bench topology` writes its fixture, runs `dfsched topology` on it as a
/// process in both forms and in process, and reports a median of each
/// (never judged: timing belongs to benchmarks), and removes the fixture.
#[test]
fn bench_topology_json_reports_every_item_on_its_fixture() {
    let v = stdout_json(&dfsched(&[
        "bench", "topology", "--shape", "1x2x2x2", "--repeat", "2", "--json",
    ]));
    assert_eq!(v["cpus"], 8);
    assert_eq!(v["shape"]["llcs"], 2);
    assert_eq!(v["repeat"], 2);
    for item in [
        "process_text_ms",
        "process_json_ms",
        "read_ms",
        "render_text_ms",
        "render_json_ms",
    ] {
        let s = &v[item];
        let (min, median) = (s["min"].as_f64(), s["median"].as_f64());
        assert!(min.is_some_and(|m| m > 0.0) && median >= min, "{item}: {s}");
    }
    assert!(v["json_bytes"].as_u64().unwrap() > v["text_bytes"].as_u64().unwrap());
    let mut args = vec!["bench", "topology", "--shape", "1x1x2x0"];
    let out = dfsched(&args);
    assert_eq!(out.status.code(), Some(2), "a zero count is a usage error");
    args.truncate(2);
    args.extend(["--sysfs-root", "/nonexistent/dfsched-test"]);
    assert_eq!(dfsched(&args).status.code(), Some(2));
}

#[test]
fn tiny_bench_json_has_the_documented_keys() {
    let mut args = TINY.to_vec();
    args.extend(["--json", "--quiet"]);
    let out = dfsched(&args);
    let v = stdout_json(&out);
    assert!(
        out.stderr.is_empty(),
        "--quiet printed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    for mode in ["vanilla", "dfsched", "oracle", "split"] {
        let m = &v["modes"][mode];
        for key in [
            "median_s",
            "min_s",
            "max_s",
            "median_cpu_s",
            "median_ctx_switches",
            "median_migrations",
        ] {
            assert!(m[key].is_number(), "modes.{mode}.{key} in {m}");
        }
        assert_eq!(m["runs_s"].as_array().map(Vec::len), Some(1), "{mode}");
        assert!(m.get("median_others_share").is_some(), "{mode}");
    }
    for key in [
        "dfsched_vs_vanilla",
        "dfsched_vs_oracle",
        "oracle_vs_vanilla",
        "split_vs_vanilla",
    ] {
        assert!(v["ratios"][key].is_number(), "ratios.{key}");
    }
    assert_eq!(v["params"]["threads"], 4);
    assert_eq!(v["params"]["df_bytes"], 1024);
    assert!(v["machine"]["cpus_allowed"].is_string());
    assert!(v["machine"]["hypervisor"].is_boolean());
    assert!(v["modes"]["dfsched"]["runs"][0]["runtime_stats"].is_object());
}

#[test]
fn tiny_bench_table_shows_modes_progress_and_the_vm_note() {
    let mut args = TINY.to_vec();
    args.extend(["--modes", "split,vanilla"]);
    let out = dfsched(&args);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    // Table rows: a mode name, then the median in seconds.
    let rows: Vec<&str> = text
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let name = words.next()?;
            words.next()?.parse::<f64>().ok().map(|_| name)
        })
        .collect();
    assert!(
        rows.contains(&"split") && rows.contains(&"vanilla"),
        "a row per mode: {text}"
    );
    assert!(
        !rows.contains(&"oracle") && !rows.contains(&"dfsched"),
        "only the asked modes run: {text}"
    );
    assert!(
        text.contains("KVM guest") || text.contains("bare metal"),
        "the machine note: {text}"
    );
    assert!(text.contains("ratios of medians"), "{text}");
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("[  2/2]"), "progress on stderr: {err}");
}

#[test]
fn bad_flags_exit_2_with_a_message_and_run_nothing() {
    assert_usage_errors(
        dfsched,
        &["bench"],
        &[
            (&["df", "--threads", "0"], "--threads"),
            (&["df", "--threads", "2", "--dfs", "3"], "--dfs"),
            (&["df", "--df-bytes", "8"], "--df-bytes"),
            (&["df", "--write-ratio", "1.01"], "--write-ratio"),
            (&["df", "--modes", "vanilla,fast"], "fast"),
            (&["df", "--threads", "lots"], "lots"),
            (&["df", "--grid", "paper", "--dfs", "2"], "--dfs"),
            (&["df", "--no-such-flag"], "--no-such-flag"),
            (&["nope"], "nope"),
        ],
    );
}

#[test]
fn help_explains_modes_defaults_and_units() {
    let out = dfsched(&["bench", "df", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for needle in [
        "vanilla",
        "dfsched",
        "oracle",
        "split",
        "[default: 8]",
        "BYTES",
        "KVM",
    ] {
        assert!(help.contains(needle), "--help lacks {needle:?}");
    }
}

#[test]
fn paper_grid_json_has_nine_cells_of_table_3() {
    let out = dfsched(&[
        "bench",
        "df",
        "--grid",
        "paper",
        "--iterations",
        "1",
        "--repeat",
        "1",
        "--modes",
        "vanilla,oracle",
        "--json",
        "--quiet",
    ]);
    let v = stdout_json(&out);
    assert_eq!(v["grid"], "paper");
    let cells = v["cells"].as_array().expect("cells array");
    let shape: Vec<(u64, u64, u64)> = cells
        .iter()
        .map(|c| {
            let p = &c["params"];
            (
                p["threads"].as_u64().unwrap(),
                p["df_bytes"].as_u64().unwrap() / 8,
                p["dfs"].as_u64().unwrap(),
            )
        })
        .collect();
    let mut want = Vec::new();
    for t in [8, 32, 128] {
        for w in [1000, 8000, 20000] {
            want.push((t, w, 4));
        }
    }
    assert_eq!(shape, want);
    for c in cells {
        assert!(c["modes"]["oracle"]["median_s"].is_number());
        assert!(c["ratios"]["oracle_vs_vanilla"].is_number());
    }
}

/// A fixture sysfs tree: 4 CPUs, private 32K L1d each, an 8M L3 per pair.
/// Removed when dropped.
fn fixture_sysfs() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("dfsched-cli-sysfs-")
        .tempdir()
        .unwrap();
    let cpu = dir.path().join("sys/devices/system/cpu");
    std::fs::create_dir_all(&cpu).unwrap();
    std::fs::write(cpu.join("online"), "0-3\n").unwrap();
    for n in 0..4u32 {
        let pair = if n < 2 { "0-1" } else { "2-3" };
        for (index, level, kind, size, shared) in [
            ("index0", "1", "Data", "32K", n.to_string()),
            ("index3", "3", "Unified", "8192K", pair.to_string()),
        ] {
            let dir = cpu.join(format!("cpu{n}/cache/{index}"));
            std::fs::create_dir_all(&dir).unwrap();
            for (file, text) in [("level", level), ("type", kind), ("size", size)] {
                std::fs::write(dir.join(file), format!("{text}\n")).unwrap();
            }
            std::fs::write(dir.join("shared_cpu_list"), format!("{shared}\n")).unwrap();
        }
    }
    dir
}

#[test]
fn topology_reads_a_fixture_tree_under_sysfs_root() {
    let root = fixture_sysfs();
    let path = root.path().to_str().unwrap();
    let v = stdout_json(&dfsched(&["topology", "--json", "--sysfs-root", path]));
    let cpus: Vec<&str> = v["topology"]["domains"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["cpus"].as_str().unwrap())
        .collect();
    assert_eq!(cpus, vec!["0-3", "0-1", "2-3", "0", "1", "2", "3"]);
    let text = dfsched(&["topology", "--sysfs-root", path]);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(text.contains("llc {0-1}: L3 Unified 8 MiB"), "{text}");
    assert!(text.contains("cpu {3}: L1 Data 32 KiB"), "{text}");
}
