//! `scripts/install.sh` into a temporary prefix, then everything a user
//! does with the result: a C program built with `pkg-config --cflags
//! --libs dfsched` against the prefix runs and its threads are placed (read
//! back with `sched_getaffinity`), `PREFIX/bin/dfsched run` finds the
//! installed library by itself, `man` renders `dfsched-run` from the
//! prefix, the completions parse, the systemd unit names the installed
//! binary, and `DESTDIR` stages the same tree without changing the paths
//! the files name.
//!
//! The script installs this test's own build (`--bin`, `--lib`) rather
//! than making a release build: what is tested is the install and its
//! result, and the suite's build is already there.

use dfsched_premise::skip_or_fail;
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_dfsched");

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The `libdfsched.so` built with this test's binary (the newer of cargo's
/// two copies, as `dfsched run` picks it).
fn built_lib() -> PathBuf {
    let dir = Path::new(BIN).parent().unwrap();
    [dir.join("libdfsched.so"), dir.join("deps/libdfsched.so")]
        .into_iter()
        .filter_map(|p| Some((p.metadata().ok()?.modified().ok()?, p)))
        .max_by_key(|(t, _)| *t)
        .map(|(_, p)| p)
        .expect("libdfsched.so is built beside the dfsched binary")
}

/// A fresh directory of ours named `dfsched-install-TAG-` and random
/// letters, removed on drop.
fn fresh_dir(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("dfsched-install-{tag}-"))
        .tempdir()
        .unwrap()
}

#[track_caller]
fn ok(out: std::process::Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn install(prefix: &Path, destdir: Option<&Path>) -> String {
    let mut cmd = Command::new("bash");
    cmd.arg(repo_root().join("scripts/install.sh"))
        .arg("--prefix")
        .arg(prefix)
        .arg("--bin")
        .arg(BIN)
        .arg("--lib")
        .arg(built_lib());
    cmd.env_remove("DESTDIR");
    if let Some(d) = destdir {
        cmd.env("DESTDIR", d);
    }
    ok(cmd.output().unwrap(), "install.sh")
}

fn have(tool: &str, arg: &str) -> bool {
    Command::new(tool)
        .arg(arg)
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn an_installed_prefix_builds_runs_and_documents_dfsched() {
    for (tool, arg) in [
        ("cc", "--version"),
        ("pkg-config", "--version"),
        ("man", "--version"),
    ] {
        if !have(tool, arg) {
            skip_or_fail(&format!("SKIP an_installed_prefix_…: no {tool}"));
            return;
        }
    }
    let allowed = dfsched::sys::get_affinity(0).unwrap();
    let cpus: Vec<_> = allowed.iter().take(2).collect();
    if cpus.len() < 2 {
        skip_or_fail("SKIP an_installed_prefix_…: fewer than 2 CPUs allowed");
        return;
    }
    let tmp = fresh_dir("prefix");
    let root = tmp.path();
    let prefix = root.join("usr");
    install(&prefix, None);
    let lib = prefix.join("lib");

    // The library under its versioned name, with the SONAME's link.
    let link = std::fs::read_link(lib.join("libdfsched.so")).unwrap();
    assert!(
        link.to_string_lossy().starts_with("libdfsched.so."),
        "{}",
        link.display()
    );
    assert!(lib.join(&link).is_file());

    // A C program against the prefix, through pkg-config alone.
    let flags = ok(
        Command::new("pkg-config")
            .args(["--cflags", "--libs", "dfsched"])
            .env("PKG_CONFIG_PATH", lib.join("pkgconfig"))
            .output()
            .unwrap(),
        "pkg-config",
    );
    assert!(
        flags.contains(&format!("-I{}", prefix.join("include").display())),
        "{flags}"
    );
    let src = repo_root().join("crates/dfsched-rt/tests/c/placement_order.c");
    let prog = root.join("placement_order");
    ok(
        Command::new("cc")
            .arg("-std=c11")
            .arg("-o")
            .arg(&prog)
            .arg(&src)
            .args(flags.split_whitespace())
            .arg("-lpthread")
            .output()
            .unwrap(),
        "cc with pkg-config's flags",
    );
    // On exactly two CPUs 8 runnable threads are heavy load: each DF's
    // threads end on one CPU (the program reads its masks back).
    let (c0, c1) = (cpus[0], cpus[1]);
    let prog2 = prog.clone();
    let lib2 = lib.clone();
    let out = std::thread::spawn(move || {
        let two: dfsched::CpuSet = [c0, c1].into_iter().collect();
        dfsched::sys::set_affinity(0, &two).unwrap();
        Command::new(&prog2)
            .arg("5000000")
            .env("LD_LIBRARY_PATH", &lib2)
            .env("DFSCHED_BALANCE_INTERVAL_MS", "0")
            .env("DFSCHED_AGENT", "off")
            .env("DFSCHED_IDLE_PASSES", "0")
            .env("DFSCHED_EXTERNAL_LOAD", "0")
            .output()
            .unwrap()
    })
    .join()
    .unwrap();
    let out = ok(out, "the program built against the prefix");
    for df in ["1", "2"] {
        let late: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with("thread ") && l.contains(&format!(" df={df} ")))
            .filter_map(|l| l.split_whitespace().find_map(|w| w.strip_prefix("late=")))
            .collect();
        assert_eq!(late.len(), 4, "{out}");
        assert!(
            late.iter().all(|m| *m == late[0]) && !late[0].contains(','),
            "DF {df}'s threads are not placed on one CPU:\n{out}"
        );
    }

    // `dfsched run` from the prefix finds the installed library itself.
    let echoed = ok(
        Command::new(prefix.join("bin/dfsched"))
            .args([
                "run",
                "--no-agent",
                "--",
                "sh",
                "-c",
                "echo \"$LD_PRELOAD\"",
            ])
            .env_remove("DFSCHED_LIB")
            .env_remove("LD_PRELOAD")
            .output()
            .unwrap(),
        "PREFIX/bin/dfsched run",
    );
    let preloaded = PathBuf::from(echoed.trim());
    assert!(
        preloaded.starts_with(lib.canonicalize().unwrap()),
        "{} is not the installed library",
        preloaded.display()
    );

    // man renders dfsched-run from the prefix, by MANPATH and by file.
    let man = |args: &[&str]| {
        ok(
            Command::new("man")
                .args(args)
                .env("MANPATH", prefix.join("share/man"))
                .env("MANPAGER", "cat")
                .env("MANWIDTH", "80")
                .output()
                .unwrap(),
            "man",
        )
    };
    let page = man(&["dfsched-run"]);
    assert!(
        page.contains("dfsched-run") && page.contains("LD_PRELOAD"),
        "{page}"
    );
    let by_file = prefix.join("share/man/man1/dfsched-run.1");
    assert!(man(&["-l", by_file.to_str().unwrap()]).contains("LD_PRELOAD"));
    assert!(prefix.join("share/man/man1/dfsched-top.1").is_file());

    // Completions parse; the unit runs the installed agent.
    let bash = prefix.join("share/bash-completion/completions/dfsched");
    ok(
        Command::new("bash").arg("-n").arg(&bash).output().unwrap(),
        "bash -n",
    );
    assert!(prefix.join("share/zsh/site-functions/_dfsched").is_file());
    assert!(prefix
        .join("share/fish/vendor_completions.d/dfsched.fish")
        .is_file());
    let unit =
        std::fs::read_to_string(prefix.join("lib/systemd/user/dfsched-agent.service")).unwrap();
    assert!(
        unit.contains(&format!(
            "ExecStart={}/bin/dfsched agent --foreground",
            prefix.display()
        )),
        "{unit}"
    );
}

#[test]
fn destdir_stages_the_tree_with_the_prefixs_paths_inside() {
    let tmp = fresh_dir("stage");
    let stage = tmp.path();
    install(Path::new("/opt/dfsched"), Some(stage));
    let pc = std::fs::read_to_string(stage.join("opt/dfsched/lib/pkgconfig/dfsched.pc")).unwrap();
    assert!(pc.contains("prefix=/opt/dfsched\n"), "{pc}");
    assert!(!pc.contains(stage.to_str().unwrap()), "{pc}");
    assert!(stage.join("opt/dfsched/bin/dfsched").is_file());
    assert!(stage.join("opt/dfsched/include/dfsched.h").is_file());
}
