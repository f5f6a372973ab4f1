//! `dfsched model …` and `dfsched sim closed-network | figure` end to end:
//! JSON that parses and says what the models say, the same seed printing
//! the same JSON, figure files written, and bad input refused with exit 2.

mod cli_support;

use cli_support::{dfsched, json};

#[test]
fn model_reload_prints_r_of_0_to_i_rising() {
    let v = json(&[
        "model",
        "reload",
        "--footprint",
        "1900",
        "--sets",
        "8192",
        "--ways",
        "4",
        "--max-intervening",
        "8",
        "--json",
    ]);
    let r: Vec<f64> = serde_json::from_value(v["reload_ratios"].clone()).unwrap();
    assert_eq!(r.len(), 9);
    assert_eq!(r[0], 0.0, "no intervening task, nothing to reload");
    assert!(r.windows(2).all(|w| w[1] > w[0]));
    let cold = v["cold_reload_ratio"].as_f64().unwrap();
    assert!(r[8] < cold && cold <= 1.0, "R rises towards the cold ratio");
    let table = dfsched(&["model", "reload", "--max-intervening", "3"]);
    let text = String::from_utf8(table.stdout).unwrap();
    assert_eq!(text.lines().count(), 2 + 4 + 1, "{text}");
    assert!(
        text.lines().nth(2).unwrap().trim() == "0   0.00000",
        "{text}"
    );
}

#[test]
fn model_mva_prints_the_fp_solution() {
    let v = json(&[
        "model",
        "mva",
        "--processors",
        "4",
        "--tasks",
        "16",
        "--reload",
        "0.5",
        "--json",
    ]);
    let x = v["throughput"].as_f64().unwrap();
    // Four processors can serve at most 4 visits per unit of time.
    assert!(x > 1.0 && x < 4.0, "{x}");
    assert_eq!(v["params"]["tasks"], 16);
}

#[test]
fn closed_network_json_is_the_same_for_the_same_seed() {
    let args = [
        "sim",
        "closed-network",
        "--policy",
        "lmi:2",
        "--processors",
        "4",
        "--tasks",
        "12",
        "--run-time",
        "100",
        "--warmup",
        "10",
        "--replications",
        "3",
        "--seed",
        "5",
        "--json",
    ];
    let a = dfsched(&args);
    let b = dfsched(&args);
    assert!(a.status.success());
    assert_eq!(a.stdout, b.stdout);
    let v: serde_json::Value = serde_json::from_slice(&a.stdout).unwrap();
    assert_eq!(v["params"]["policy"]["policy"], "limited_min_intervening");
    assert!(v["throughput"]["half_width_98"].as_f64().unwrap() > 0.0);
    assert_eq!(v["replications"].as_array().unwrap().len(), 3);
}

#[test]
fn figures_are_written_as_csv_and_svg() {
    let tmp = tempfile::Builder::new()
        .prefix("dfsched-fig-")
        .tempdir()
        .unwrap();
    let dir = tmp.path();
    let d = dir.to_str().unwrap();
    let out = dfsched(&[
        "sim",
        "figure",
        "5",
        "--out",
        d,
        "--points",
        "2",
        "--replications",
        "2",
        "--run-time",
        "20",
        "--warmup",
        "5",
        "--quiet",
        "--threads",
        "2",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let csv = std::fs::read_to_string(dir.join("fig5.csv")).unwrap();
    // Header + 3 curves × 2 loads × 2 values of C.
    assert_eq!(csv.lines().count(), 1 + 12);
    assert!(csv
        .lines()
        .nth(1)
        .unwrap()
        .starts_with("5,light,40,FCFS,fcfs,"));
    let svg = std::fs::read_to_string(dir.join("fig5.svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains("heavy load, N = 128"));
    let out = dfsched(&["sim", "figure", "4", "--out", d, "--max-intervening", "10"]);
    assert!(out.status.success());
    let csv = std::fs::read_to_string(dir.join("fig4.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 6 * 11);
}

#[test]
fn bad_input_is_refused_with_exit_2_or_1_and_a_message() {
    let out = dfsched(&["sim", "closed-network", "--policy", "lmi:0"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("lmi"));
    let out = dfsched(&["sim", "figure", "3"]);
    assert_eq!(out.status.code(), Some(2));
    let out = dfsched(&[
        "sim",
        "closed-network",
        "--policy",
        "fcfs",
        "--pause",
        "--run-time",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("pause"));
    let out = dfsched(&["model", "reload", "--ways", "0"]);
    assert_eq!(out.status.code(), Some(2));
}
