//! The README's C example, exactly as written: its C block saved as `w.c`
//! and the shell block after it run line by line. `cargo …` lines run at
//! the repository's root, as a reader would; the other lines run in a
//! scratch directory where `w.c` sits beside `include` and `target` links
//! to the repository's, so that the README's relative paths mean what they
//! mean at the root without writing into the work tree.
//!
//! The build line is the one that failed before: `cargo build --release`
//! left `libdfsched.so` in `target/release/deps/` only, and `-Ltarget/release`
//! found nothing.

mod common;

use common::TempDir;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The target directory this test was built in (`…/target/debug/deps/x`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.ancestors().nth(3).unwrap().to_path_buf()
}

/// The body of the first fenced block of `lang` after `from` in `text`,
/// and the offset just past it.
fn block_after(text: &str, from: usize, lang: &str) -> (String, usize) {
    let fence = format!("```{lang}\n");
    let start = from
        + text[from..]
            .find(&fence)
            .unwrap_or_else(|| panic!("no ```{lang} block"))
        + fence.len();
    let end = start + text[start..].find("```").expect("unclosed block");
    (text[start..end].to_string(), end + 3)
}

#[test]
fn the_readmes_c_example_compiles_and_runs_as_written() {
    if Command::new("cc").arg("--version").output().is_err() {
        common::skip_or_fail("SKIP the_readmes_c_example_compiles_and_runs_as_written: no cc");
        return;
    }
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    let at = readme
        .find("## Using the hint")
        .expect("README has a 'Using the hint' section");
    let (c, after) = block_after(&readme, at, "c");
    let (sh, _) = block_after(&readme, after, "sh");
    assert!(c.contains("int main"), "the C example is a whole program");
    let dir = TempDir::new("readme-c");
    dir.write("w.c", &c);
    std::os::unix::fs::symlink(repo_root().join("include"), dir.path().join("include")).unwrap();
    std::os::unix::fs::symlink(target_dir(), dir.path().join("target")).unwrap();
    let mut last = String::new();
    for line in sh.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let cwd = if line.starts_with("cargo ") {
            repo_root()
        } else {
            dir.path().to_path_buf()
        };
        let out = Command::new("sh")
            .arg("-c")
            .arg(line)
            .current_dir(&cwd)
            // The run line measures nothing: no balancer thread, no agent.
            .env("DFSCHED_BALANCE_INTERVAL_MS", "0")
            .env("DFSCHED_AGENT", "off")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "README line `{line}` failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        last = String::from_utf8_lossy(&out.stdout).into_owned();
    }
    // The program printed the runtime's counters: its four threads hinted.
    let stats: serde_json::Value = serde_json::from_str(last.trim())
        .unwrap_or_else(|e| panic!("the example's output is the stats JSON ({e}): {last}"));
    assert_eq!(stats["threads_registered"], 4, "{stats}");
}
