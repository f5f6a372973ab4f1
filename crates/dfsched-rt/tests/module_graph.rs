//! dfsched-rt's files import in one direction: no loop through the crate's
//! modules. A loop is how a runtime state that every file reaches into
//! comes back (the balancer pass reading the runtime, the runtime calling
//! the pass); the shape is the core's: a pass gathers plain values, and
//! only the balancer locks the state.
//!
//! The graph is read from the sources: module `m` depends on module `n`
//! when `m`'s code outside its unit tests names `crate::n…` or `super::n…`
//! (a parent module reached from a child, as in `runtime/threads.rs`, is
//! the same module for this purpose: a child file is part of its parent).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, recursively.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to (`agent/link.rs` → `agent::link`,
/// `runtime/threads.rs` → `runtime`, `lib.rs` → `crate`).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .filter(|p| p != "mod")
        .collect();
    match parts.as_slice() {
        [only] if only == "lib" => "crate".into(),
        // agent/* are modules of their own; runtime/* and procfs/* are
        // parts of their parent's file.
        [first, second, ..] if first == "agent" => format!("agent::{second}"),
        [first, ..] => first.clone(),
        [] => unreachable!(),
    }
}

/// The code of `text` before its unit-test module, with `//` comments
/// removed.
fn code(text: &str) -> String {
    let end = text.find("#[cfg(test)]\nmod tests").unwrap_or(text.len());
    text[..end]
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The modules `module` names, of `known`.
fn imports(module: &str, code: &str, known: &BTreeSet<String>) -> BTreeSet<String> {
    let parent: Vec<&str> = match module.rsplit_once("::") {
        Some((p, _)) => vec![p],
        None => vec![],
    };
    let mut out = BTreeSet::new();
    let resolve = |base: &str, path: &[&str], out: &mut BTreeSet<String>| {
        let mut prefix: Vec<&str> = if base == "crate" {
            vec![]
        } else {
            parent.clone()
        };
        let mut best = None;
        for seg in path {
            prefix.push(seg);
            let cand = prefix.join("::");
            if known.contains(&cand) {
                best = Some(cand);
            }
        }
        if let Some(b) = best {
            if b != module {
                out.insert(b);
            }
        }
    };
    let bytes = code.as_bytes();
    for base in ["crate", "super"] {
        let needle = format!("{base}::");
        let mut at = 0;
        while let Some(i) = code[at..].find(&needle) {
            let start = at + i;
            at = start + needle.len();
            if start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
                continue;
            }
            let rest = &code[at..];
            if let Some(group) = rest.strip_prefix('{') {
                // `use crate::{a, b::c}`: each item's first segment.
                let items = &group[..group.find('}').unwrap_or(group.len())];
                for item in items.split(',') {
                    let first = item.trim().split("::").next().unwrap_or("");
                    resolve(base, &[first], &mut out);
                }
                continue;
            }
            let path: Vec<&str> = rest
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .next()
                .unwrap_or("")
                .split("::")
                .filter(|s| !s.is_empty())
                .collect();
            resolve(base, &path, &mut out);
        }
    }
    out
}

/// The strongly connected components of two or more modules (Tarjan).
fn loops(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        for w in &t.edges[v] {
            let w = w.as_str();
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = t.stack.pop().unwrap();
                t.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

fn graph_of(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let mut text: BTreeMap<String, String> = BTreeMap::new();
    for f in &files {
        let m = module_of(src, f);
        let body = code(&std::fs::read_to_string(f).unwrap());
        text.entry(m).or_default().push_str(&body);
    }
    let known: BTreeSet<String> = text.keys().cloned().collect();
    text.iter()
        .map(|(m, code)| (m.clone(), imports(m, code, &known)))
        .collect()
}

#[test]
fn the_runtime_s_modules_import_in_one_direction() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = graph_of(&src);
    // The premise: the graph was read (the runtime and the balancer are
    // there, and the runtime imports the balancer).
    assert!(
        edges.get("runtime").is_some_and(|e| e.contains("balancer")),
        "the module graph was not read: {edges:?}"
    );
    let found = loops(&edges);
    let shown: Vec<String> = found
        .iter()
        .map(|comp| {
            comp.iter()
                .map(|m| {
                    let inside: Vec<&str> = edges[m]
                        .iter()
                        .filter(|n| comp.contains(n))
                        .map(String::as_str)
                        .collect();
                    format!("{m} -> {inside:?}")
                })
                .collect::<Vec<_>>()
                .join("; ")
        })
        .collect();
    assert!(found.is_empty(), "import loops: {shown:#?}");
}

#[test]
fn a_loop_is_found_when_there_is_one() {
    let edges: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
    .collect();
    assert_eq!(loops(&edges), vec![vec!["a", "b", "c"]]);
    let known: BTreeSet<String> = ["agent::link", "agent::proto", "runtime", "error"]
        .into_iter()
        .map(String::from)
        .collect();
    let code = "use super::proto::{Report, View};\nuse crate::{error::Error, runtime};\n";
    assert_eq!(
        imports("agent::link", code, &known),
        ["agent::proto", "error", "runtime"]
            .into_iter()
            .map(String::from)
            .collect()
    );
}
