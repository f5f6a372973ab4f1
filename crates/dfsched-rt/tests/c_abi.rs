//! The C ABI: `include/dfsched.h` agrees with the Rust codes, compiles as C
//! and C++, and a C program (tests/c/smoke.c) linked against the built
//! `libdfsched.so` (directly, and through a `dfsched.pc` made from
//! `dfsched.pc.in`) runs and behaves. Skips with a message without `cc`.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn header() -> PathBuf {
    repo_root().join("include/dfsched.h")
}

/// The directory of the `libdfsched.so` built with this test binary: its
/// own `deps/` directory. (The copy one level up is refreshed only by
/// `cargo build`, so it may be stale during `cargo test`.)
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().to_path_buf();
    assert!(
        dir.join("libdfsched.so").exists(),
        "libdfsched.so is not in {} (is the cdylib built?)",
        dir.display()
    );
    dir
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn check(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Compiles tests/c/smoke.c into `dir` with `flags`; returns the program.
fn compile(dir: &TempDir, flags: &[String]) -> PathBuf {
    compile_named(dir, "smoke", flags)
}

/// Compiles tests/c/`name`.c into `dir` with `flags`; returns the program.
fn compile_named(dir: &TempDir, name: &str, flags: &[String]) -> PathBuf {
    let prog = dir.path().join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    let out = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&prog)
        .arg(&src)
        .args(flags)
        .arg("-lpthread")
        .output()
        .unwrap();
    check(&out, "cc");
    prog
}

fn direct_flags() -> Vec<String> {
    let lib = lib_dir();
    vec![
        format!("-I{}", repo_root().join("include").display()),
        format!("-L{}", lib.display()),
        "-ldfsched".into(),
        format!("-Wl,-rpath,{}", lib.display()),
    ]
}

/// Runs `prog mode` with the test's own DFSCHED_* variables removed and
/// `env` set. `LD_LIBRARY_PATH` is removed too: cargo sets it to dirs that
/// may hold a stale `libdfsched.so`, and it outranks the program's RUNPATH.
fn run(prog: &Path, mode: &str, env: &[(&str, &str)]) -> String {
    let mut cmd = Command::new(prog);
    cmd.arg(mode).env_remove("LD_LIBRARY_PATH");
    for (k, _) in std::env::vars() {
        if k.starts_with("DFSCHED_") {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.iter().copied());
    let out = cmd.output().unwrap();
    check(&out, &format!("smoke {mode}"));
    String::from_utf8(out.stdout).unwrap()
}

fn line<'a>(out: &'a str, prefix: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line {prefix:?} in:\n{out}"))
}

#[test]
fn header_codes_match_the_rust_codes() {
    let text = std::fs::read_to_string(header()).unwrap();
    let mut found = Vec::new();
    for l in text.lines() {
        let mut words = l.split_whitespace();
        if words.next() != Some("#define") {
            continue;
        }
        let (Some(name), Some(value)) = (words.next(), words.next()) else {
            continue;
        };
        if name.starts_with("DFSCHED_OK") || name.starts_with("DFSCHED_E_") {
            found.push((name.to_string(), value.parse::<i32>().unwrap()));
        }
    }
    let expected: Vec<(String, i32)> = dfsched::code::ALL
        .iter()
        .map(|&(n, v)| (n.to_string(), v))
        .collect();
    assert_eq!(
        found, expected,
        "include/dfsched.h and error::code disagree"
    );
    for (name, _) in &found {
        assert!(text.contains(name.as_str()));
    }
    // Every exported function is declared.
    for f in [
        "dfsched_init(void)",
        "dfsched_hint(uint64_t app, uint64_t cur_df, uint64_t next_df)",
        "dfsched_enter(uint64_t df)",
        "dfsched_leave(void)",
        "dfsched_df_size(uint64_t df, uint64_t bytes)",
        "dfsched_attach(void)",
        "dfsched_app_create(uint64_t *out)",
        "dfsched_balance_now(void)",
        "*dfsched_stats_json(void)",
        "*dfsched_last_error(void)",
        "*dfsched_strerror(int code)",
    ] {
        assert!(text.contains(f), "{f} is not declared");
    }
    // Every environment variable is documented.
    for var in dfsched::config::ENV_VARS {
        assert!(text.contains(var), "{var} is not documented in the header");
    }
}

#[test]
fn the_header_compiles_as_c_and_cpp() {
    if !have("cc") {
        common::skip_or_fail("SKIP the_header_compiles_as_c_and_cpp: no cc");
        return;
    }
    let dir = TempDir::new("hdr");
    dir.write(
        "c.c",
        "#include <dfsched.h>\nint main(void) { return dfsched_leave(); }\n",
    );
    let inc = format!("-I{}", repo_root().join("include").display());
    let out = Command::new("cc")
        .args([
            "-std=c99",
            "-Wall",
            "-Wextra",
            "-pedantic",
            "-Werror",
            "-fsyntax-only",
            &inc,
        ])
        .arg(dir.path().join("c.c"))
        .output()
        .unwrap();
    check(&out, "cc -std=c99 on the header");
    if have("c++") {
        let out = Command::new("c++")
            .args(["-x", "c++", "-Wall", "-Werror", "-fsyntax-only", &inc])
            .arg(dir.path().join("c.c"))
            .output()
            .unwrap();
        check(&out, "c++ on the header");
    } else {
        eprintln!("note: no c++, the header's extern \"C\" guard is not compiled");
    }
}

fn check_ok_run(out: &str) {
    assert_eq!(line(out, "init"), "init rc=0");
    let workers: Vec<(&str, &str)> = out
        .lines()
        .filter(|l| l.starts_with("worker"))
        .map(|l| {
            assert!(l.contains(" reg=0 rc=0 again=0 "), "{l}");
            let df = l.split_whitespace().nth(1).unwrap();
            let cpus = l.rsplit("cpus=").next().unwrap();
            (df, cpus)
        })
        .collect();
    assert_eq!(workers.len(), 4, "{out}");
    let of =
        |df: &str| -> Vec<&str> { workers.iter().filter(|w| w.0 == df).map(|w| w.1).collect() };
    let (df1, df2) = (of("df=1"), of("df=2"));
    assert!(
        df1.iter().all(|c| *c == df1[0]) && !df1[0].contains(','),
        "{out}"
    );
    assert!(
        df2.iter().all(|c| *c == df2[0]) && !df2[0].contains(','),
        "{out}"
    );
    assert_ne!(df1[0], df2[0], "{out}");

    let unknown = line(out, "unknown_app");
    assert!(
        unknown.starts_with("unknown_app rc=-6 msg=unknown application app999"),
        "{unknown}"
    );
    let not_in = line(out, "not_in_df");
    assert!(not_in.starts_with("not_in_df rc=-8 msg="), "{not_in}");
    assert!(not_in.contains("df5"), "{not_in}");
    let null = line(out, "null_out");
    assert!(
        null.starts_with("null_out rc=-2 msg=invalid argument"),
        "{null}"
    );
    assert_eq!(line(out, "app_create"), "app_create rc=0 app=1");
    let wrong = line(out, "wrong_app");
    assert!(wrong.starts_with("wrong_app rc=-7 msg=task"), "{wrong}");
    assert!(wrong.contains("belongs to app0, not app1"), "{wrong}");
    assert_eq!(line(out, "leave"), "leave rc=0");
    assert_eq!(line(out, "balance"), "balance rc=0");
    assert_eq!(
        line(out, "strerror "),
        "strerror the thread is not in the DF it claims to leave"
    );
    assert_eq!(
        line(out, "strerror_unknown"),
        "strerror_unknown unknown dfsched error code"
    );
    let json: serde_json::Value =
        serde_json::from_str(line(out, "stats ").trim_start_matches("stats ")).unwrap();
    assert_eq!(json["threads_registered"], 5, "4 workers and main: {json}");
    assert_eq!(
        json["threads_exited"], 4,
        "the workers' exits were noticed: {json}"
    );
    // Each worker's repeated enter, and main's leave while in no DF.
    assert_eq!(json["fast_hints"], 5, "{json}");
    assert_eq!(json["refused_calls"]["unknown_app"], 1);
    assert_eq!(json["refused_calls"]["not_in_df"], 1);
    assert_eq!(json["refused_calls"]["wrong_app"], 1);
    assert_eq!(json["apps_created"], 1);
    assert_eq!(json["engine"]["balance_passes"], 1);
    assert_eq!(json["affinity_failures"]["eperm"], 0);
    assert_eq!(line(out, "done"), "done");
}

#[test]
fn a_c_program_links_and_runs() {
    with_two_cpus("a_c_program_links_and_runs", |_, _| {
        if !have("cc") {
            common::skip_or_fail("SKIP a_c_program_links_and_runs: no cc");
            return;
        }
        let dir = TempDir::new("cabi");
        let prog = compile(&dir, &direct_flags());
        let env = [
            ("DFSCHED_BALANCE_INTERVAL_MS", "0"),
            ("DFSCHED_EXTERNAL_LOAD", "0"),
        ];
        check_ok_run(&run(&prog, "ok", &env));
    });
}

/// `readelf -d FILE`'s dynamic section, as text.
fn dynamic_section(file: &Path) -> String {
    let out = Command::new("readelf")
        .arg("-d")
        .arg(file)
        .output()
        .expect("readelf (binutils, which cc links with) must be installed");
    check(&out, "readelf -d");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_library_has_a_soname_and_a_linked_program_needs_it_by_name() {
    // Without a SONAME, a program linked with `-L DIR -ldfsched` records
    // the library as the linker found it, and an installed copy elsewhere
    // is not the one it names.
    let lib = lib_dir().join("libdfsched.so");
    let dynamic = dynamic_section(&lib);
    assert!(
        dynamic.contains("Library soname: [libdfsched.so]"),
        "no SONAME in {}:\n{dynamic}",
        lib.display()
    );
    let dir = TempDir::new("cabi-soname");
    let prog = compile(&dir, &direct_flags());
    let needed = dynamic_section(&prog);
    assert!(
        needed.contains("Shared library: [libdfsched.so]"),
        "the program does not need libdfsched.so by its SONAME:\n{needed}"
    );
}

#[test]
fn the_preloaded_library_carries_no_agent_server() {
    // `dfsched run` preloads libdfsched.so into every process of a program:
    // the agent's server (its accept loop, shared sample, sharing
    // detection, limits) is the `dfsched` command's, unreachable from the C
    // ABI, and the linker drops it. The runtime's side (link, client) stays.
    let lib = lib_dir().join("libdfsched.so");
    let out = Command::new("nm")
        .args(["--demangle", "--defined-only"])
        .arg(&lib)
        .output()
        .expect("nm (binutils, which cc links with) must be installed");
    check(&out, "nm");
    let symbols = String::from_utf8_lossy(&out.stdout);
    let count = |module: &str| {
        symbols
            .matches(&format!("dfsched::agent::{module}::"))
            .count()
    };
    // The premise: the symbols were read, and the runtime's side is there.
    assert!(
        count("link") > 0,
        "no dfsched::agent::link symbol in {}",
        lib.display()
    );
    for module in ["server", "scan", "sharing", "limits"] {
        assert_eq!(
            count(module),
            0,
            "agent::{module} is linked into {}",
            lib.display()
        );
    }
}

#[test]
fn a_c_program_builds_with_pkg_config() {
    with_two_cpus("a_c_program_builds_with_pkg_config", |_, _| {
        if !have("cc") || !have("pkg-config") {
            common::skip_or_fail(
                "SKIP a_c_program_builds_with_pkg_config: needs cc and pkg-config",
            );
            return;
        }
        let dir = TempDir::new("pc");
        let template = std::fs::read_to_string(repo_root().join("dfsched.pc.in")).unwrap();
        let lib = lib_dir();
        let pc = template
            .replace("@PREFIX@", &repo_root().display().to_string())
            .replace("@LIBDIR@", &lib.display().to_string())
            .replace(
                "@INCLUDEDIR@",
                &repo_root().join("include").display().to_string(),
            )
            .replace("@VERSION@", env!("CARGO_PKG_VERSION"));
        assert!(!pc.contains('@'), "unsubstituted placeholder in\n{pc}");
        dir.write("dfsched.pc", &pc);
        let out = Command::new("pkg-config")
            .args(["--cflags", "--libs", "dfsched"])
            .env("PKG_CONFIG_PATH", dir.path())
            .output()
            .unwrap();
        check(&out, "pkg-config");
        let flags_text = String::from_utf8(out.stdout).unwrap();
        assert!(flags_text.contains("-ldfsched"), "{flags_text}");
        let mut flags: Vec<String> = flags_text.split_whitespace().map(String::from).collect();
        flags.push(format!("-Wl,-rpath,{}", lib.display()));
        let modversion = Command::new("pkg-config")
            .args(["--modversion", "dfsched"])
            .env("PKG_CONFIG_PATH", dir.path())
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8(modversion.stdout).unwrap().trim(),
            env!("CARGO_PKG_VERSION")
        );
        let prog = compile(&dir, &flags);
        let env = [
            ("DFSCHED_BALANCE_INTERVAL_MS", "0"),
            ("DFSCHED_EXTERNAL_LOAD", "0"),
        ];
        check_ok_run(&run(&prog, "ok", &env));
    });
}

#[test]
fn a_bad_environment_fails_every_call_and_the_program_goes_on() {
    if !have("cc") {
        common::skip_or_fail("SKIP a_bad_environment_fails_every_call: no cc");
        return;
    }
    let dir = TempDir::new("cabi-badenv");
    let prog = compile(&dir, &direct_flags());
    let out = run(&prog, "badenv", &[("DFSCHED_IMBALANCE_PCT", "abc")]);
    let enter = line(&out, "enter");
    assert!(enter.starts_with("enter rc=-3 msg="), "{enter}");
    assert!(
        enter.contains("DFSCHED_IMBALANCE_PCT") && enter.contains("\"abc\""),
        "{enter}"
    );
    assert_eq!(line(&out, "init"), "init rc=-3");
    assert_eq!(line(&out, "stats"), "stats NULL");
    assert_eq!(line(&out, "unmoved"), "unmoved 1");
    assert_eq!(line(&out, "done"), "done");

    let out = run(&prog, "badenv", &[("DFSCHED_DISABLED", "1")]);
    let enter = line(&out, "enter");
    assert!(enter.contains("unknown dfsched variable"), "{enter}");
}

#[test]
fn dfsched_disable_makes_every_call_a_successful_no_op() {
    if !have("cc") {
        common::skip_or_fail("SKIP dfsched_disable_makes_every_call_a_successful_no_op: no cc");
        return;
    }
    let dir = TempDir::new("cabi-disabled");
    let prog = compile(&dir, &direct_flags());
    let out = run(&prog, "disabled", &[("DFSCHED_DISABLE", "1")]);
    assert_eq!(line(&out, "enter"), "enter rc=0");
    assert_eq!(line(&out, "hint"), "hint rc=0");
    assert_eq!(line(&out, "app_create"), "app_create rc=0");
    assert_eq!(line(&out, "app "), "app 1");
    assert_eq!(line(&out, "unmoved"), "unmoved 1");
    let json: serde_json::Value =
        serde_json::from_str(line(&out, "stats ").trim_start_matches("stats ")).unwrap();
    assert_eq!(json["enabled"], false);
    assert_eq!(json["hint_calls"], 0);
}

/// Issue 9's held-out client (tests/c/placement_order.c: 8 spinning threads
/// in 2 DFs, each hinting once as it starts) read masks at 30 % of each
/// thread's work and found a DF's threads apart (`t1:0,1` beside `t3:1`).
/// Those reads were early: a thread that hints before the others are known
/// is placed for the load known then (a DF's home is the LLC under light
/// load), and a later hint that re-homes its group moves it. Once every
/// hint has returned, every thread of a DF sits on its DF's one CPU; and a
/// read made after every hint returned already sees that placement.
#[test]
fn once_all_hints_returned_a_c_clients_threads_sit_with_their_df() {
    const TEST: &str = "once_all_hints_returned_a_c_clients_threads_sit_with_their_df";
    if !have("cc") {
        skip(TEST, "no cc");
        return;
    }
    let Some((c0, c1)) = two_cpus(TEST) else {
        return;
    };
    let dir = TempDir::new("cabi-order");
    let prog = compile_named(&dir, "placement_order", &direct_flags());
    // The program runs on exactly two CPUs: 8 runnable threads are then
    // heavy load (homes of one CPU) on any host.
    let runs: Vec<String> = std::thread::spawn(move || {
        dfsched::sys::set_affinity(0, &set_of(&[c0, c1])).unwrap();
        let env = [
            ("DFSCHED_BALANCE_INTERVAL_MS", "0"),
            ("DFSCHED_AGENT", "off"),
            ("DFSCHED_IDLE_PASSES", "0"),
            ("DFSCHED_EXTERNAL_LOAD", "0"),
        ];
        (0..5).map(|_| run(&prog, "5000000", &env)).collect()
    })
    .join()
    .unwrap();
    let mut early_elsewhere = 0;
    for out in &runs {
        let threads: Vec<(String, String, u32, String)> = out
            .lines()
            .filter(|l| l.starts_with("thread "))
            .map(|l| {
                let field = |name: &str| {
                    l.split_whitespace()
                        .find_map(|w| w.strip_prefix(name))
                        .unwrap_or_else(|| panic!("no {name} in {l}"))
                        .to_string()
                };
                assert_eq!(field("rc="), "0", "{l}");
                (
                    field("df="),
                    field("early="),
                    field("early_hinted=").parse().unwrap(),
                    field("late="),
                )
            })
            .collect();
        assert_eq!(threads.len(), 8, "{out}");
        for df in ["1", "2"] {
            let late: Vec<&str> = threads
                .iter()
                .filter(|t| t.0 == df)
                .map(|t| t.3.as_str())
                .collect();
            assert!(
                late.iter().all(|m| *m == late[0]) && !late[0].contains(','),
                "DF {df}'s threads are not on one CPU once all hints returned:\n{out}"
            );
        }
        for (_, early, hinted, late) in &threads {
            if early != late {
                assert!(
                    *hinted < 8,
                    "a read made after all 8 hints returned saw {early}, not {late}:\n{out}"
                );
                early_elsewhere += 1;
            }
        }
    }
    eprintln!(
        "{early_elsewhere} of {} early reads (before all hints returned) saw an earlier placement",
        8 * runs.len()
    );
}
