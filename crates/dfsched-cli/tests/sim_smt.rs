//! Runs `dfsched sim smt` and `dfsched trace import`: the JSON names each
//! policy's ITKO and relative throughput, the same seed prints the same
//! JSON, traces imported from Valgrind lackey text run as threads, and bad
//! input fails with a message.

mod cli_support;

use cli_support::{dfsched, json, skip_or_fail, stdout_of as stdout};
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// A small, fast run: a quarter-size L2, short quanta.
const SMALL: &[&str] = &[
    "sim",
    "smt",
    "--l2-kib",
    "128",
    "--quantum-cycles",
    "100000",
    "--quanta",
    "12",
];

fn with(extra: &[&str]) -> Vec<String> {
    SMALL.iter().chain(extra).map(|s| s.to_string()).collect()
}

fn run_args(args: &[String]) -> std::process::Output {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    dfsched(&a)
}

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/smt");

#[test]
fn json_names_itko_and_relative_throughput_of_every_policy_and_is_deterministic() {
    let args = with(&[
        "--policies",
        "kihm,round-robin,shuffled,best-static",
        "--json",
    ]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let v = json(&a);
    for p in ["kihm", "round-robin", "shuffled", "best-static"] {
        let itko = v["policies"][p]["itko"].as_u64().unwrap();
        let co = v["policies"][p]["itko_co_running"].as_u64().unwrap();
        assert!(co <= itko, "{p}: the co-runners' part of the ITKO");
        // At most one change per context and quantum after the first (two
        // contexts, 12 quanta); four threads on two contexts: a lead of one
        // quantum at least, after the first.
        let changes = v["policies"][p]["context_changes"].as_u64().unwrap();
        assert!(changes <= 2 * 11, "{p}: {changes}");
        assert!(v["policies"][p]["run_lead"].as_u64().unwrap() >= 1, "{p}");
        let rt = v["policies"][p]["relative_throughput"].as_f64().unwrap();
        assert!(rt > 0.0 && rt <= 2.0, "{p}: {rt}");
        for t in v["policies"][p]["threads"].as_array().unwrap() {
            let fill = &t["vectors"];
            for k in ["mean_fill", "all_hot", "none_hot"] {
                let x = fill[k].as_f64().unwrap_or(-1.0);
                assert!((0.0..=1.0).contains(&x), "{p} {}: {k} {x}", t["name"]);
            }
        }
    }
    assert_eq!(v["best_static"]["tried"], 3);
    assert_eq!(v, json(&a), "the same seed prints the same JSON");
}

#[test]
fn table_lists_each_policy_with_its_ratio_to_round_robin() {
    let args = with(&[
        "--workload",
        "mix",
        "slice0/2,slice1/2,uniform,light",
        "--policies",
        "kihm,rr,intensity",
    ]);
    let t = stdout(&run_args(&args));
    for p in ["kihm", "round-robin", "intensity"] {
        assert!(t.lines().any(|l| l.starts_with(p)), "{p} missing:\n{t}");
    }
    assert!(t.contains("vs RR") && t.contains("mix slice0/2"), "{t}");
    assert!(t.contains("  Jain  lead chg/q "), "{t}");
    let rr = t.lines().find(|l| l.starts_with("round-robin")).unwrap();
    assert!(rr.contains(" 1.00 "), "one change per quantum: {rr}");
    let fill = t
        .lines()
        .find(|l| l.starts_with("vectors under kihm"))
        .unwrap_or_else(|| panic!("no vector fill line:\n{t}"));
    assert!(fill.contains("slice0/2") && fill.contains('%'), "{fill}");
    let fig2 = t
        .lines()
        .find(|l| l.starts_with("Fig. 2 under kihm"))
        .unwrap_or_else(|| panic!("no Fig. 2 line:\n{t}"));
    assert!(fig2.contains("light 100/0/0/0"), "{fig2}");
}

/// A scratch directory named by `tag`, removed when dropped (passed or
/// failed).
fn scratch(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("dfsched-smt-{tag}-"))
        .tempdir()
        .unwrap()
}

/// `trace import` of lackey `text` into `out` (it must succeed): its
/// stderr.
fn import(text: &[u8], out: &std::path::Path) -> String {
    let mut child = Command::new(cli_support::BIN)
        .args(["trace", "import", "--out"])
        .arg(out)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(text).unwrap();
    let done = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&done.stderr).into_owned();
    assert!(done.status.success(), "{err}");
    err
}

/// `trace import` of the committed lackey sample into `sample.dftrace` of a
/// fresh directory named by `tag`: the directory, the file, the sample's
/// text and the import's stderr.
fn import_sample(tag: &str) -> (tempfile::TempDir, PathBuf, Vec<u8>, String) {
    let dir = scratch(tag);
    let out = dir.path().join("sample.dftrace");
    let sample = std::fs::read(format!("{FIXTURES}/lackey-sample.txt")).unwrap();
    let err = import(&sample, &out);
    (dir, out, sample, err)
}

#[test]
fn lackey_text_imports_to_a_trace_that_runs_as_a_thread() {
    let (tmp, _, _, err) = import_sample("lackey");
    let dir = tmp.path();
    // The sample holds 16 loads, stores and modifies.
    assert!(err.contains(": 16 accesses"), "{err}");
    // Far short of the default window (4 000 000): said, and still kept.
    assert!(
        err.contains(
            "the input ended after 16 accesses: the window holds 16 of the 4000000 asked for"
        ),
        "{err}"
    );
    // Beside the committed traces of /bin/true, three threads.
    for f in ["true-start.dftrace", "true-later.dftrace"] {
        std::fs::copy(format!("{FIXTURES}/{f}"), dir.join(f)).unwrap();
    }
    let args = with(&[
        "--workload",
        "traces",
        dir.to_str().unwrap(),
        "--policies",
        "kihm,rr",
        "--json",
    ]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let v = json(&a);
    let names: Vec<&str> = v["threads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(names, ["sample", "true-later", "true-start"]);
    let threads = v["policies"]["kihm"]["threads"].as_array().unwrap();
    assert!(
        threads.iter().all(|t| t["accesses"].as_u64().unwrap() > 0),
        "{v}"
    );
}

/// `trace import` writes one zstd frame of the simulator's bare trace
/// bytes, and `--workload traces` reads the compressed file and the bare
/// bytes alike; a trace that decompresses past the bound, or a FIFO named
/// like a trace, is a prompt error naming the file.
#[test]
fn imported_traces_are_zstd_frames_and_bare_traces_still_read() {
    use dfsched_sim::smt::trace::{encode, LackeyParser};
    let (tmp, out, sample, _) = import_sample("zstd");
    let dir = tmp.path();
    let written = std::fs::read(&out).unwrap();
    assert_eq!(written[..4], [0x28, 0xB5, 0x2F, 0xFD], "a zstd frame");
    let mut parser = LackeyParser::new();
    let accesses: Vec<_> = String::from_utf8(sample)
        .unwrap()
        .lines()
        .filter_map(|l| parser.line(l).unwrap())
        .collect();
    let bare = encode(&accesses);
    assert_eq!(zstd::decode_all(&written[..]).unwrap(), bare);

    let run = |dir: &std::path::Path| {
        let args = with(&["--workload", "traces", dir.to_str().unwrap(), "--json"]);
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        json(&a)
    };
    let compressed = run(dir);
    std::fs::write(&out, &bare).unwrap();
    assert_eq!(run(dir), compressed, "bare and compressed bytes run alike");

    // A frame of a few KiB that promises more than the bound allows.
    let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
    enc.write_all(&bare).unwrap();
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..=256 {
        enc.write_all(&zeros).unwrap();
    }
    let bomb = enc.finish().unwrap();
    assert!(bomb.len() < 64 << 10, "{} bytes", bomb.len());
    std::fs::write(&out, &bomb).unwrap();
    let args = with(&["--workload", "traces", dir.to_str().unwrap()]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let err = dfsched(&a);
    let text = String::from_utf8_lossy(&err.stderr);
    assert!(!err.status.success(), "{text}");
    assert!(
        text.contains("sample.dftrace") && text.contains("256 MiB"),
        "{text}"
    );

    // A FIFO nobody writes to: refused before it is opened for reading.
    std::fs::remove_file(&out).unwrap();
    let fifo = std::ffi::CString::new(dir.join("fifo.dftrace").to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path that outlives the call.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let started = std::time::Instant::now();
    let err = dfsched(&a);
    let text = String::from_utf8_lossy(&err.stderr);
    assert!(
        !err.status.success() && text.contains("fifo.dftrace"),
        "{text}"
    );
    assert!(text.contains("not a regular file"), "{text}");
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
}

#[test]
fn bad_input_fails_with_a_message() {
    for (extra, needle) in [
        (&["--policies", "kihm,nope"][..], "unknown policy"),
        (
            &["--workload", "traces", "/nonexistent-dfsched"][..],
            "nonexistent",
        ),
        (&["--workload", "sideways"][..], "sideways"),
        (&["--bits", "9"][..], "bits"),
        (&["--mapping", "diagonal"][..], "diagonal"),
        (&["--issue-slowdown", "0.5"][..], "--issue-slowdown"),
        (&["--threshold", "majority:150"][..], "1 to 100"),
        (&["--threshold", "majority:x"][..], "majority:PERCENT"),
        (&["--threshold", "0"][..], "at least 1"),
        (&["--cpi", "0"][..], "--cpi"),
        (
            &["--l2-hit-cycles", "300", "--memory-cycles", "200"][..],
            "--memory-cycles",
        ),
    ] {
        let out = run_args(&with(extra));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?} succeeded");
        assert!(err.contains(needle), "{extra:?}: {err}");
        assert!(out.stdout.is_empty(), "{extra:?} printed a result");
    }
}

/// The timing flags reach the model: the JSON's config holds them, the
/// table's header names them, and a slower memory changes the throughput.
#[test]
fn timing_flags_set_the_model_and_show_in_json_and_table() {
    let base = with(&["--policies", "kihm,round-robin", "--json"]);
    let run = |extra: &[&str]| {
        let mut a = base.clone();
        a.extend(extra.iter().map(|s| s.to_string()));
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        json(&a)
    };
    let default = run(&[]);
    let slow = run(&["--memory-cycles", "400", "--issue-slowdown", "1.25"]);
    let t = &slow["config"]["timing"];
    assert_eq!(t["memory_cycles"], 400, "{t}");
    assert_eq!(t["issue_slowdown_milli"], 1250, "{t}");
    assert_eq!(default["config"]["timing"]["memory_cycles"], 200);
    let rr = |v: &serde_json::Value, k: &str| v["policies"]["round-robin"][k].clone();
    assert_ne!(
        rr(&default, "relative_throughput"),
        rr(&slow, "relative_throughput")
    );
    // The premise: the run has misses for the latency to act on.
    assert!(rr(&slow, "l2_misses").as_u64().unwrap() > 0);
    let mut a = with(&["--policies", "kihm,round-robin", "--memory-cycles", "400"]);
    a.retain(|s| s != "--json");
    let text = stdout(&run_args(&a));
    assert!(
        text.contains(
            "timing: CPI 1, x1.5 issue beside a busy sibling, L2 hit +12, memory +400 cycles"
        ),
        "{text}"
    );
}

#[test]
fn seeds_report_each_policys_mean_and_spread_against_round_robin() {
    let args = with(&["--seeds", "2", "--policies", "kihm,round-robin", "--json"]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let v = json(&a);
    assert_eq!(v["seeds"], serde_json::json!([1, 2]));
    assert_eq!(v["runs"].as_array().unwrap().len(), 2);
    let k = &v["policies"]["kihm"];
    assert!(
        k["itko"].is_number() && k["relative_throughput"].is_number(),
        "{k}"
    );
    let s = &k["relative_throughput_vs_round_robin"];
    let (lo, mean, hi) = (
        s["min"].as_f64().unwrap(),
        s["mean"].as_f64().unwrap(),
        s["max"].as_f64().unwrap(),
    );
    assert!(lo <= mean && mean <= hi, "{s}");
    // Round robin against itself is exactly 1 on every seed.
    assert_eq!(
        v["policies"]["round-robin"]["itko_vs_round_robin"]["min"],
        1.0
    );
    // No control ran: nothing to pair the paper's policy with.
    assert_eq!(v["kihm_against"], serde_json::json!({}));
}

/// With controls beside it, the paper's policy is paired with each seed by
/// seed: the difference of the two ratios to round robin in each run, in
/// the JSON and as a line of the table.
#[test]
fn seeds_pair_the_papers_policy_with_each_control_seed_by_seed() {
    let args = with(&[
        "--seeds",
        "3",
        "--policies",
        "kihm,round-robin,shuffled,intensity",
        "--json",
    ]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let v = json(&a);
    let pair = v["kihm_against"].as_object().unwrap();
    assert_eq!(
        pair.keys().collect::<Vec<_>>(),
        ["intensity", "shuffled"],
        "{v}"
    );
    let runs = v["runs"].as_array().unwrap();
    let ratio = |r: &serde_json::Value, p: &str| {
        r["policies"][p]["itko"].as_f64().unwrap()
            / r["policies"]["round-robin"]["itko"].as_f64().unwrap()
    };
    let d: Vec<f64> = runs
        .iter()
        .map(|r| ratio(r, "kihm") - ratio(r, "shuffled"))
        .collect();
    let s = &pair["shuffled"];
    let mean = d.iter().sum::<f64>() / 3.0;
    assert!((s["itko_difference"]["mean"].as_f64().unwrap() - mean).abs() < 1e-12);
    assert_eq!(
        s["fewer_itko"].as_u64().unwrap() as usize,
        d.iter().filter(|&&x| x < 0.0).count()
    );
    let mut t = with(&["--seeds", "3", "--policies", "kihm,rr,shuffled"]);
    t.retain(|s| s != "--json");
    let text = stdout(&run_args(&t));
    assert!(
        text.lines()
            .any(|l| l.starts_with("kihm - shuffled, seed by seed: ITKO") && l.contains("/3 seeds")),
        "{text}"
    );
}

/// A traces directory of `n` programs made of the two committed fixtures
/// under distinct names (p0, p1, …), for a tiny grid.
fn fixture_programs(tag: &str, n: usize) -> tempfile::TempDir {
    let dir = scratch(tag);
    for i in 0..n {
        let f = ["true-start.dftrace", "true-later.dftrace"][i % 2];
        let to = dir.path().join(format!("p{i}.dftrace"));
        std::fs::copy(format!("{FIXTURES}/{f}"), to).unwrap();
    }
    dir
}

#[test]
fn paper_grid_runs_every_mix_under_both_mappings_and_writes_json_and_an_svg_plot() {
    let tmp = fixture_programs("grid", 5);
    let dir = tmp.path();
    let plot = dir.join("grid.svg");
    let args = with(&[
        "--workload",
        "traces",
        dir.to_str().unwrap(),
        "--grid",
        "paper",
        "--grid-mixes",
        "3",
        "--policies",
        "kihm,rr,intensity,best-static,lookahead",
        "--jobs",
        "2",
        "--plot",
        plot.to_str().unwrap(),
        "--json",
    ]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = cli_support::dfsched(&a);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let v = cli_support::stdout_json(&out);
    // 5 programs give 5 combinations of 4; --grid-mixes 3 keeps 3, each of
    // 4 distinct programs.
    let mixes = v["mixes"].as_array().unwrap();
    assert_eq!(mixes.len(), 3, "{v}");
    for m in mixes {
        let mut names: Vec<&str> = m
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        assert_eq!(names.len(), 4);
        names.dedup();
        assert_eq!(names.len(), 4, "distinct programs: {m}");
    }
    // A progress line per comparison when stderr is not a terminal.
    assert!(err.contains("[  6/6]"), "{err}");
    assert!(err.contains("miss curves: 5 programs alone"), "{err}");
    for mapping in ["identity", "random-4k"] {
        let g = &v["mappings"][mapping];
        assert_eq!(g["mixes"].as_array().unwrap().len(), 3, "{mapping}");
        assert_eq!(v["runs"][mapping].as_array().unwrap().len(), 3);
        for p in [
            "kihm",
            "round-robin",
            "intensity",
            "best-static",
            "lookahead",
        ] {
            let s = &g["policies"][p];
            for k in [
                "itko_change",
                "co_running_itko_change",
                "throughput_gain",
                "l2_miss_change",
                "context_changes",
                "run_lead",
            ] {
                let (lo, mean, hi) = (
                    s[k]["min"].as_f64().unwrap(),
                    s[k]["mean"].as_f64().unwrap(),
                    s[k]["max"].as_f64().unwrap(),
                );
                assert!(lo <= mean && mean <= hi, "{mapping} {p} {k}: {s}");
                assert!(s[k]["min_mix"].as_u64().unwrap() < 3);
            }
        }
        // The paper's policy against the one control that ran, and the
        // vectors of each of the five programs.
        let pair = &g["kihm_against"];
        assert_eq!(pair.as_object().unwrap().len(), 1, "{pair}");
        let fewer = pair["intensity"]["fewer_itko"].as_u64().unwrap();
        assert!(fewer <= 3, "{pair}");
        assert!(pair["intensity"]["itko_difference"]["mean"].is_number());
        let fill = g["vector_fill"].as_object().unwrap();
        assert_eq!(fill.len(), 5, "{fill:?}");
        for (name, f) in fill {
            let x = f["mean_fill"].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&x), "{name}: {f}");
            // Fig. 2's four shares of its quanta sum to one.
            let k = &f["concentration"];
            let sum: f64 = ["low", "spread", "half", "eighth"]
                .iter()
                .map(|c| k[c].as_f64().unwrap())
                .sum();
            assert!((sum - 1.0).abs() < 1e-9, "{name}: {k}");
        }
        // Round robin against itself is exactly 0 in every mix.
        let rr = &g["policies"]["round-robin"];
        assert_eq!(rr["itko_change"]["min"], 0.0);
        assert_eq!(rr["throughput_gain"]["max"], 0.0);
        assert_eq!(rr["l2_miss_change"]["max"], 0.0);
        // Round robin changes one context per quantum (two contexts).
        assert_eq!(rr["context_changes"]["min"], 1.0);
        assert_eq!(rr["context_changes"]["max"], 1.0);
        // A mix's change of L2 misses is its runs' own ratio.
        let runs = v["runs"][mapping].as_array().unwrap();
        let misses = |p: &str| runs[0]["policies"][p]["l2_misses"].as_f64().unwrap();
        let change = g["mixes"][0]["l2_miss_change"]["kihm"].as_f64().unwrap();
        assert!(
            (change - (misses("kihm") / misses("round-robin") - 1.0)).abs() < 1e-12,
            "{change}"
        );
        // Each run is a full comparison of its mix under that mapping.
        let run0 = &v["runs"][mapping][0];
        // (serde spells random-4k `random4k`).
        let m = run0["config"]["mapping"].as_str().unwrap().replace('-', "");
        assert_eq!(m, mapping.replace('-', ""));
        assert_eq!(run0["threads"], mixes[0]);
    }
    // Each program's misses alone at the whole L2 (128 KiB, 8 ways) and
    // at half and a quarter of its ways; fewer ways never miss less.
    let curves = v["miss_curves"].as_object().unwrap();
    assert_eq!(curves.len(), 5, "{curves:?}");
    for (name, c) in curves {
        let pts = c["points"].as_array().unwrap();
        let kib: Vec<u64> = pts.iter().map(|p| p["kib"].as_u64().unwrap()).collect();
        assert_eq!(kib, [128, 64, 32], "{name}");
        let m: Vec<f64> = pts
            .iter()
            .map(|p| p["misses_per_kilo_access"].as_f64().unwrap())
            .collect();
        assert!(m.windows(2).all(|w| w[0] <= w[1]), "{name}: {m:?}");
        assert!(c["accesses"].as_u64().unwrap() > 0, "{name}");
    }
    let svg = std::fs::read_to_string(&plot).expect("the plot was written");
    assert!(svg.trim_start().starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    for needle in [
        "identity pages",
        "random-4k pages",
        "kihm",
        "lookahead",
        "L2 ITKO vs round robin",
    ] {
        assert!(svg.contains(needle), "{needle} missing from the plot");
    }
}

#[test]
fn paper_grid_table_names_both_mappings_and_bad_grids_fail_with_a_message() {
    let tmp = fixture_programs("grid-table", 4);
    let dir = tmp.path();
    let plot = dir.join("g.svg");
    let base = with(&[
        "--workload",
        "traces",
        dir.to_str().unwrap(),
        "--plot",
        plot.to_str().unwrap(),
    ]);
    let mut args = base.clone();
    args.extend(["--grid", "paper", "--policies", "kihm,rr,shuffled"].map(String::from));
    let t = stdout(&run_args(&args));
    assert!(t.contains("mix  1: p0 p1 p2 p3"), "{t}");
    assert!(
        t.contains("identity pages") && t.contains("random-4k pages"),
        "{t}"
    );
    let count = |p: &dyn Fn(&str) -> bool| t.lines().filter(|l| p(l)).count();
    assert_eq!(
        count(&|l| l.starts_with("kihm ") && !l.starts_with("kihm - ")),
        2,
        "{t}"
    );
    // Per mapping: the paper's policy against the control that ran, and
    // the vectors' fill per program.
    assert_eq!(
        count(&|l| l.starts_with("kihm - shuffled: ITKO") && l.contains("/1 mixes")),
        2,
        "{t}"
    );
    assert_eq!(
        count(&|l| l.starts_with("vectors under kihm") && l.contains("p0 ")),
        2,
        "{t}"
    );
    assert_eq!(
        count(&|l| l.starts_with("Fig. 2 under kihm") && l.contains("p0 ")),
        2,
        "{t}"
    );
    assert!(t.contains("L2 misses"), "{t}");
    assert_eq!(
        count(&|l| l.starts_with("L2 ITKO between co-runners only")
            && l.contains("kihm ")
            && l.contains("shuffled ")
            && !l.contains("round-robin")),
        2,
        "{t}"
    );
    assert_eq!(
        count(&|l| l.starts_with("context changes per core and quantum")
            && l.contains("round-robin 1.00 [1.00, 1.00]")
            && l.contains("kihm ")),
        2,
        "{t}"
    );
    assert_eq!(
        count(&|l| l.starts_with("L2 misses per 1000 accesses alone")
            && l.contains("at 128/64/32 KiB")
            && l.contains(", p3")),
        1,
        "{t}"
    );
    for (extra, needle) in [
        (
            &["--grid", "paper", "--mix-size", "5"][..],
            "at least --mix-size 5",
        ),
        (
            &["--grid", "paper", "--policies", "kihm"][..],
            "round-robin",
        ),
        (&["--grid", "huge"][..], "huge"),
        (&["--grid", "paper", "--seeds", "2"][..], "--seeds"),
    ] {
        let mut args = base.clone();
        args.extend(extra.iter().map(|s| s.to_string()));
        let out = run_args(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?} succeeded");
        assert!(err.contains(needle), "{extra:?}: {err}");
    }
    let args = with(&["--grid", "paper"]);
    let err = String::from_utf8_lossy(&run_args(&args).stderr).into_owned();
    assert!(err.contains("needs --workload traces DIR"), "{err}");
}

/// Imports a cyclic sweep of loads over `bytes` bytes at 64-byte steps,
/// as lackey text, into `dir/name.dftrace`.
fn sweep_trace(dir: &std::path::Path, name: &str, bytes: u64) {
    let mut text = String::new();
    for off in (0..bytes).step_by(64) {
        text.push_str(&format!("I  00400000,4\n L {:x},8\n", 0x1000_0000 + off));
    }
    import(text.as_bytes(), &dir.join(format!("{name}.dftrace")));
}

#[test]
fn grid_programs_sensitive_draws_the_mixes_only_from_programs_a_co_runner_can_hurt() {
    let tmp = scratch("grid-sensitive");
    let dir = tmp.path();
    // On the small machine (a 128 KiB 8-way L2, a quarter is 32 KiB):
    // sweeps over 64 KiB fit the whole L2 and thrash a quarter of it;
    // sweeps over 4 KiB live in the L1 whatever the L2 keeps.
    for name in ["big0", "big1", "big2", "big3"] {
        sweep_trace(dir, name, 64 << 10);
    }
    for name in ["tiny0", "tiny1"] {
        sweep_trace(dir, name, 4 << 10);
    }
    let plot = dir.join("g.svg");
    let base = with(&[
        "--workload",
        "traces",
        dir.to_str().unwrap(),
        "--grid",
        "paper",
        "--policies",
        "kihm,rr",
        "--plot",
        plot.to_str().unwrap(),
    ]);
    let grid = |extra: &[&str]| {
        let mut args = base.clone();
        args.extend(extra.iter().map(|s| s.to_string()));
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        json(&a)
    };
    let names = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap().to_string())
            .collect()
    };
    let v = grid(&["--grid-programs", "sensitive", "--json"]);
    // The premise, read from the curves the grid printed.
    for (name, sensitive) in [
        ("big0", true),
        ("big3", true),
        ("tiny0", false),
        ("tiny1", false),
    ] {
        let c = &v["miss_curves"][name];
        assert_eq!(c["co_runner_sensitive"], sensitive, "{name}: {c}");
    }
    let big = ["big0", "big1", "big2", "big3"];
    assert_eq!(v["grid_programs"], "sensitive");
    assert_eq!(names(&v["programs"]), big);
    let mixes = v["mixes"].as_array().unwrap();
    assert_eq!(mixes.len(), 1, "one combination of the four: {v}");
    assert_eq!(names(&mixes[0]), big);
    assert_eq!(
        v["miss_curves"].as_object().unwrap().len(),
        6,
        "every program's curve"
    );
    // `all` (the default) draws on all six.
    let v = grid(&["--grid-mixes", "2", "--json"]);
    assert_eq!(v["grid_programs"], "all");
    assert_eq!(names(&v["programs"]).len(), 6);
    assert!(
        v["mixes"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(names)
            .any(|n| n.starts_with("tiny")),
        "{v}"
    );
    // The table says which programs the mixes draw on and marks the
    // sensitive ones.
    let mut args = base.clone();
    args.extend(["--grid-programs", "sensitive"].map(String::from));
    let t = stdout(&run_args(&args));
    assert!(
        t.contains("programs: 4 of 6 (those a co-runner can cost misses, marked * below): big0 big1 big2 big3"),
        "{t}"
    );
    assert!(t.contains("big0* ") && t.contains("tiny0 "), "{t}");
    // Too few for a mix: a clear error naming those that qualify.
    args.extend(["--mix-size", "5"].map(String::from));
    let out = run_args(&args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("only 4 of the 6 programs")
            && err.contains("(big0, big1, big2, big3), fewer than --mix-size 5"),
        "{err}"
    );
}

#[test]
fn profile_writes_per_thread_vectors_of_a_program_run_under_valgrind() {
    if Command::new("valgrind").arg("--version").output().is_err() {
        skip_or_fail("SKIP profile test: valgrind is not installed");
        return;
    }
    let tmp = scratch("profile");
    let dir = tmp.path();
    let out = dir.join("true.json");
    let run = cli_support::dfsched(&[
        "profile",
        "--out",
        out.to_str().unwrap(),
        "--interval",
        "20000",
        "--",
        "/bin/true",
    ]);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{err}");
    let p: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(p["command"], serde_json::json!(["/bin/true"]));
    assert_eq!(p["interval_instructions"], 20000);
    assert!(p["ns_per_instruction"].as_f64().unwrap() > 0.0);
    let threads = p["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 1, "/bin/true has one thread: {err}");
    let instrs = threads[0]["instructions"].as_u64().unwrap();
    let vectors = threads[0]["vectors"].as_array().unwrap();
    // /bin/true runs some 100k instructions (the dynamic loader): one
    // vector per 20,000, the last partial.
    assert!(instrs > 20_000, "{instrs}");
    assert_eq!(vectors.len() as u64, instrs.div_ceil(20_000));
    assert!(vectors
        .iter()
        .all(|v| v["levels"].as_array().unwrap().len() == 32));
    assert!(err.contains("1 thread(s)"), "{err}");
}

/// A profile whose valgrind run is ended by `--timeout` leaves nothing in
/// the temporary directory (a killed valgrind would leave its gdbserver's
/// three FIFOs there, `vgdb-pipe-*`, on every such run).
#[test]
fn a_profile_cut_short_by_its_timeout_leaves_no_vgdb_fifos() {
    assert!(
        Command::new("valgrind").arg("--version").output().is_ok(),
        "premise: valgrind is installed (apt-get install valgrind)"
    );
    let scratch_dir = scratch("profile-tmo");
    let dir = scratch_dir.path();
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    // About 0.1 s natively, minutes under lackey: the second run is cut.
    let out = Command::new(env!("CARGO_BIN_EXE_dfsched"))
        .env("TMPDIR", &tmp)
        .args(["profile", "--timeout", "3", "--out"])
        .arg(dir.join("p.json"))
        .args([
            "--",
            "sh",
            "-c",
            "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the lackey run was not cut: {err}");
    let left: Vec<_> = std::fs::read_dir(&tmp)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "left in TMPDIR: {left:?} ({err})");
}
