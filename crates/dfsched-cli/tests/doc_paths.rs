//! Every file or directory the READMEs and `docs/` cite is in the
//! repository, so a reader can open each one and run each command shown.
//!
//! A citation is a `code span` or a Markdown link target that looks like a
//! relative path (it has a `/` or a file extension, no spaces, no `$`, no
//! leading `/`, `-` or `.` other than `./`/`../`). It must exist relative
//! to the repository's root or to the citing file's directory (as a link
//! resolves). Paths that commands create (`target/…`, `bench-out/…`, a
//! benchmark's `runs/…`) are listed in [`MADE_BY_COMMANDS`] with why.

use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Prefixes of paths the documented commands create, not the repository.
const MADE_BY_COMMANDS: &[&str] = &[
    "target/",        // cargo's output
    "bench-out/",     // docs/kihm.md's commands write there
    "runs/",          // the VM bench's logs, under target/vmbench/
    "kernel/",        // the VM bench's kernel cache, under target/vmbench/
    "cargo/",         // the VM bench's own build, under target/vmbench/
    "boot/vmlinuz-*", // a path inside the Debian kernel package
    "w.c",            // the README's C example, saved by the reader
    "PREFIX/",        // where scripts/install.sh installs
    "/run/",          // a runtime directory (metrics socket example)
];

/// The Markdown files a reader is pointed to.
fn documents() -> Vec<PathBuf> {
    let root = repo_root();
    let mut docs = vec![
        root.join("README.md"),
        root.join("crates/dfsched-bench/README.md"),
        root.join("crates/dfsched-vmbench/README.md"),
    ];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "md") {
            docs.push(p);
        }
    }
    docs
}

/// The candidates of `text`: code spans and link targets.
fn citations(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, span) in text.split('`').enumerate() {
        if i % 2 == 1 {
            out.push(span.to_string());
        }
    }
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            out.push(rest[..end].to_string());
        }
    }
    out
}

/// Whether `c` reads as a relative path in the repository.
fn is_repo_path(c: &str) -> bool {
    let file_like = c.contains('/')
        || [".rs", ".md", ".sh", ".toml", ".h", ".c", ".in", ".json"]
            .iter()
            .any(|e| c.ends_with(e));
    file_like
        && !c.is_empty()
        && !c.contains(char::is_whitespace)
        && !c.contains(['$', ':', '<', '|', '=', '(', ','])
        && !c.starts_with('/')
        && !c.starts_with('-')
        && !c.starts_with("http")
        && !(c.starts_with('.') && !c.starts_with("./") && !c.starts_with("../"))
}

#[test]
fn every_path_the_documents_cite_is_in_the_repository() {
    let root = repo_root();
    let mut missing = Vec::new();
    let mut checked = 0;
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let dir = doc.parent().unwrap();
        for c in citations(&text).iter().filter(|c| is_repo_path(c)) {
            if MADE_BY_COMMANDS.iter().any(|p| c.starts_with(p)) {
                continue;
            }
            checked += 1;
            let path = c.trim_end_matches('/');
            if !root.join(path).exists() && !dir.join(path).exists() {
                missing.push(format!(
                    "{}: {c}",
                    doc.strip_prefix(&root).unwrap_or(&doc).display()
                ));
            }
        }
    }
    assert!(
        checked > 20,
        "the premise: the documents cite paths ({checked})"
    );
    assert!(
        missing.is_empty(),
        "cited but not in the repository:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_check_finds_a_missing_path() {
    let text = "see `notes/prio.sh` and [design](../shared/DESIGN.md), run `cargo test`";
    let found: Vec<String> = citations(text)
        .into_iter()
        .filter(|c| is_repo_path(c))
        .collect();
    assert_eq!(found, ["notes/prio.sh", "../shared/DESIGN.md"]);
}

#[test]
fn the_licenses_the_manifests_declare_are_in_the_repository() {
    let root = repo_root();
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    assert!(
        manifest.contains("license = \"MIT OR Apache-2.0\""),
        "the premise: the workspace declares MIT OR Apache-2.0"
    );
    let mit = std::fs::read_to_string(root.join("LICENSE-MIT")).unwrap();
    assert!(
        mit.contains("Permission is hereby granted, free of charge"),
        "LICENSE-MIT"
    );
    let apache = std::fs::read_to_string(root.join("LICENSE-APACHE")).unwrap();
    assert!(
        apache.contains("Apache License") && apache.contains("Version 2.0, January 2004"),
        "LICENSE-APACHE"
    );
}
