//! `dfsched topology`: the machine's cache domains as the runtime sees them.
//!
//! The topology comes from `dfsched::sysfs::read_topology` (so a fixture
//! tree can stand in for `/sys` with `--sysfs-root`) and the allowed set from
//! `sched_getaffinity` of this process. Output, for people:
//!
//! ```text
//! CPUs 0-1 (2), allowed 0-1 (2)
//! dom0 llc {0-1}: L3 Unified 105 MiB
//! ├── dom1 cpu {0}: L1 Data 48 KiB, L1 Instruction 32 KiB, L2 Unified 2 MiB
//! └── dom2 cpu {1}: …
//! body: affinity (sched_ext: none in this kernel)
//! ```
//!
//! The last line is the body a program started now would place its threads with (see
//! [`dfsched::scx::BodyView`]): `scx` when dfsched's sched_ext scheduler is enabled (`dfsched scx`)
//! and `DFSCHED_SCX` (of this process's environment) does not turn it off, else `affinity`.
//!
//! With `--json`: `{ "allowed": "0-1", "body": {"active": "affinity", "sched_ext": "none", "ops": ""},
//! "topology": <dfsched_core::Topology> }`.

use crate::Failure;
use anyhow::Context;
use clap::Args;
use dfsched_core::{Cache, CpuId, CpuSet, DomainId, Level, Topology};
use serde::Serialize;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

/// Flags of `dfsched topology`.
#[derive(Debug, Args)]
pub struct TopologyArgs {
    /// Print one JSON object: the topology (as dfsched-core serialises it)
    /// and the allowed CPUs as a cpulist.
    #[arg(long)]
    json: bool,

    /// Read sysfs under this directory instead of / (for fixture trees):
    /// PATH/sys/devices/system/cpu/….
    #[arg(long, value_name = "PATH", default_value = "/")]
    sysfs_root: PathBuf,
}

/// Runs `topology`.
pub fn run(args: TopologyArgs) -> Result<(), Failure> {
    let topo = dfsched::sysfs::read_topology(&args.sysfs_root).with_context(|| {
        format!(
            "reading the CPU topology under {}",
            args.sysfs_root.display()
        )
    })?;
    let allowed = dfsched::sys::get_affinity(0).context("reading this process's allowed CPUs")?;
    let mode = match std::env::var("DFSCHED_SCX") {
        Ok(v) => dfsched::scx::ScxMode::parse(&v)
            .map_err(|e| Failure::usage(&["topology"], format!("DFSCHED_SCX={v:?}: {e}")))?,
        Err(_) => dfsched::scx::ScxMode::Auto,
    };
    let body = dfsched::scx::BodyView::read(&args.sysfs_root, &mode);
    // Buffered: stdout alone is line-buffered, and the JSON of a large
    // machine is some 170k lines.
    let mut out = std::io::BufWriter::with_capacity(OUT_BUFFER_BYTES, std::io::stdout().lock());
    if args.json {
        write_json(&topo, &allowed, Some(&body), &mut out).context("writing the topology")?;
        writeln!(out).context("writing the topology")?;
    } else {
        writeln!(out, "{}", render(&topo, &allowed).trim_end()).context("writing the topology")?;
        writeln!(out, "{}", body_line(&body)).context("writing the topology")?;
    }
    out.flush().context("writing the topology")?;
    // The process exits next and the kernel takes its memory back whole:
    // freeing the tree piece by piece first (some 40k allocations at 8,192
    // CPUs, about a millisecond) would only delay the exit.
    std::mem::forget(topo);
    Ok(())
}

/// The output buffer: 3.5 MB of JSON at 8,192 CPUs leave in some 50
/// writes.
const OUT_BUFFER_BYTES: usize = 64 << 10;

/// The JSON object `--json` prints (without its closing newline), as a
/// string.
pub fn json(topo: &Topology, allowed: &CpuSet) -> anyhow::Result<String> {
    let mut out = Vec::new();
    write_json(topo, allowed, None, &mut out).context("serialising the topology")?;
    Ok(String::from_utf8(out).expect("serde_json writes UTF-8"))
}

/// Writes the JSON object `--json` prints (without its closing newline):
/// `{"allowed": …, "topology": …}`, the topology as dfsched-core serialises
/// it, pretty-printed, with every object's keys in sorted order (the order
/// in which `serde_json::json!`'s map printed them before this was
/// streamed; the leaf map's keys are CPU numbers sorted as strings).
///
/// Streamed through borrowing mirrors of the core's types rather than
/// built as a `serde_json::Value` first: the tree of an 8,192-CPU machine
/// took some 100k small allocations to build and drop. The test
/// `the_streamed_json_is_what_the_value_tree_printed` holds the mirrors to
/// the core's own serialisation, so a field added there and not here fails
/// it.
pub fn write_json(
    topo: &Topology,
    allowed: &CpuSet,
    body: Option<&dfsched::scx::BodyView>,
    out: &mut impl std::io::Write,
) -> serde_json::Result<()> {
    let mut ser = serde_json::Serializer::with_formatter(out, Pretty::default());
    SortedOutput {
        allowed,
        body,
        topology: SortedTopology(topo),
    }
    .serialize(&mut ser)
}

/// serde_json's pretty printing (`to_writer_pretty`: two spaces per
/// level), the same bytes, with each line break and its indent written as
/// one piece: serde_json writes the indent two spaces at a time, some
/// 800k writes for the 170k lines of an 8,192-CPU machine's JSON, which
/// were most of the time taken to print it. The test
/// `the_streamed_json_is_what_the_value_tree_printed` holds it to
/// serde_json's own.
#[derive(Default)]
struct Pretty {
    /// Levels of objects and arrays open.
    depth: usize,
    /// Whether the innermost open object or array has a value yet.
    has_value: bool,
}

impl Pretty {
    /// An array or object opens: one level deeper, nothing in it yet.
    fn open<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        bracket: &[u8],
    ) -> std::io::Result<()> {
        self.depth += 1;
        self.has_value = false;
        w.write_all(bracket)
    }

    /// It closes: on a line of its own at the outer indent, unless it was empty.
    fn close<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        bracket: &[u8],
    ) -> std::io::Result<()> {
        self.depth -= 1;
        if self.has_value {
            Pretty::newline(w, self.depth)?;
        }
        w.write_all(bracket)
    }

    /// An element or key begins: after a comma unless it is the first, on a new line.
    fn item<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if !first {
            w.write_all(b",")?;
        }
        Pretty::newline(w, self.depth)
    }

    /// A line break and the indent of `depth` levels.
    fn newline<W: ?Sized + std::io::Write>(w: &mut W, depth: usize) -> std::io::Result<()> {
        const BREAK: &[u8] = b"\n                                                                ";
        let mut spaces = 2 * depth;
        let first = spaces.min(BREAK.len() - 1);
        w.write_all(&BREAK[..1 + first])?;
        spaces -= first;
        while spaces > 0 {
            let n = spaces.min(BREAK.len() - 1);
            w.write_all(&BREAK[1..1 + n])?;
            spaces -= n;
        }
        Ok(())
    }
}

impl serde_json::ser::Formatter for Pretty {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.open(w, b"[")
    }

    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.close(w, b"]")
    }

    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.item(w, first)
    }

    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, _w: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }

    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.open(w, b"{")
    }

    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.close(w, b"}")
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.item(w, first)
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }

    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, _w: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }
}

/// `--json`'s object, keys sorted.
#[derive(Serialize)]
struct SortedOutput<'a> {
    allowed: &'a CpuSet,
    #[serde(skip_serializing_if = "Option::is_none")]
    body: Option<&'a dfsched::scx::BodyView>,
    topology: SortedTopology<'a>,
}

/// The body line of the text output: which body places threads, and why.
pub fn body_line(b: &dfsched::scx::BodyView) -> String {
    use dfsched::scx::Body;
    match (b.active, b.sched_ext.as_str()) {
        (Body::Scx, _) => format!(
            "body: scx (dfsched's sched_ext scheduler is enabled; placements go to {})",
            b.socket
                .as_deref()
                .map_or("?".into(), |p| p.display().to_string())
        ),
        (Body::Affinity, "none") => "body: affinity (sched_ext: none in this kernel)".into(),
        (Body::Affinity, "enabled") if b.ops == dfsched::scx::OPS_NAME => {
            "body: affinity (dfsched's sched_ext scheduler is enabled, but DFSCHED_SCX=off)".into()
        }
        (Body::Affinity, state) if b.ops.is_empty() => {
            format!("body: affinity (sched_ext {state})")
        }
        (Body::Affinity, state) => {
            format!("body: affinity (sched_ext {state}, scheduler {})", b.ops)
        }
    }
}

/// [`Topology`]'s serialisation, keys sorted: `domains`, `leaf`.
struct SortedTopology<'a>(&'a Topology);

impl Serialize for SortedTopology<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct as _;
        let topo = self.0;
        let mut st = s.serialize_struct("Topology", 2)?;
        st.serialize_field(
            "domains",
            &Seq(topo.domains().iter().map(|d| SortedDomain {
                caches: SortedCaches(&d.caches),
                children: &d.children,
                cpus: &d.cpus,
                depth: d.depth,
                id: d.id,
                level: d.level,
                parent: d.parent,
            })),
        )?;
        st.serialize_field("leaf", &SortedLeaves(topo))?;
        st.end()
    }
}

/// [`dfsched_core::Domain`]'s fields, sorted.
#[derive(Serialize)]
struct SortedDomain<'a> {
    caches: SortedCaches<'a>,
    children: &'a [DomainId],
    cpus: &'a CpuSet,
    depth: u32,
    id: DomainId,
    level: Level,
    parent: Option<DomainId>,
}

/// A domain's caches, each with [`Cache`]'s fields sorted.
struct SortedCaches<'a>(&'a [Cache]);

impl Serialize for SortedCaches<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(|c| SortedCache {
            kind: &c.kind,
            level: c.level,
            size_bytes: c.size_bytes,
        }))
    }
}

/// [`Cache`]'s fields, sorted.
#[derive(Serialize)]
struct SortedCache<'a> {
    kind: &'a str,
    level: u8,
    size_bytes: Option<u64>,
}

/// The topology's map from each CPU to its leaf domain, keyed by CPU
/// number in string order (`"0"`, `"1"`, `"10"`, `"100"`, …), as a JSON
/// object's sorted keys are.
struct SortedLeaves<'a>(&'a Topology);

impl Serialize for SortedLeaves<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let topo = self.0;
        let mut cpus: Vec<CpuId> = topo.cpus().iter().collect();
        cpus.sort_by_key(|c| decimal_string_order(c.0));
        let mut map = s.serialize_map(Some(cpus.len()))?;
        for cpu in cpus {
            let leaf = topo
                .leaf(cpu)
                .expect("every CPU of the topology has a leaf");
            map.serialize_entry(&cpu, &leaf)?;
        }
        map.end()
    }
}

/// A key that orders numbers as their decimal strings order: the digits
/// left-aligned to ten places, then the number of digits (a string before
/// the longer ones it begins: "1" < "10").
fn decimal_string_order(n: u32) -> (u64, u32) {
    let digits = n.checked_ilog10().map_or(1, |d| d + 1);
    (u64::from(n) * 10u64.pow(10 - digits), digits)
}

/// A sequence serialised from an iterator (cloned, since `serialize`
/// takes `&self`).
struct Seq<I>(I);

impl<I> Serialize for Seq<I>
where
    I: Iterator + Clone,
    I::Item: Serialize,
{
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.clone())
    }
}

/// The tree, for people.
pub fn render(topo: &Topology, allowed: &CpuSet) -> String {
    let mut out = format!(
        "CPUs {} ({}), allowed {} ({})\n",
        topo.cpus(),
        topo.nr_cpus(),
        allowed,
        allowed.len()
    );
    render_domain(topo, topo.root(), &mut String::new(), None, &mut out);
    out
}

/// One domain line and, below it, its children; `last` is `None` for the
/// root, else whether this is its parent's last child. `prefix` (the
/// branches of the domains above) is one buffer for the whole walk, grown
/// and cut back level by level: the tree of an 8,192-CPU machine has 12k
/// lines, and a string of its own for each line's pieces was most of the
/// time taken to draw it.
fn render_domain(
    topo: &Topology,
    id: DomainId,
    prefix: &mut String,
    last: Option<bool>,
    out: &mut String,
) {
    let d = topo.domain(id);
    let (branch, child_branch) = match last {
        None => ("", ""),
        Some(true) => ("└── ", "    "),
        Some(false) => ("├── ", "│   "),
    };
    out.push_str(prefix);
    out.push_str(branch);
    let _ = write!(out, "{} {} {{{}}}", d.id, level_name(d.level), d.cpus);
    for (i, c) in d.caches.iter().enumerate() {
        out.push_str(if i == 0 { ": " } else { ", " });
        write_cache(out, c);
    }
    out.push('\n');
    let at = prefix.len();
    prefix.push_str(child_branch);
    for (i, &c) in d.children.iter().enumerate() {
        render_domain(topo, c, prefix, Some(i + 1 == d.children.len()), out);
    }
    prefix.truncate(at);
}

fn level_name(level: Level) -> &'static str {
    match level {
        Level::Cpu => "cpu",
        Level::Core => "core",
        Level::L2 => "l2",
        Level::Llc => "llc",
        Level::Node => "node",
        Level::Machine => "machine",
    }
}

/// `L2 Unified 2 MiB`.
#[cfg(test)]
fn describe_cache(c: &Cache) -> String {
    let mut out = String::new();
    write_cache(&mut out, c);
    out
}

/// Appends `L2 Unified 2 MiB`: the level, the kind and the size in the
/// largest unit that gives it exactly.
fn write_cache(out: &mut String, c: &Cache) {
    let _ = write!(out, "L{} {}", c.level, c.kind);
    let _ = match c.size_bytes {
        None => Ok(()),
        Some(b) if b >= 1 << 20 && b % (1 << 20) == 0 => write!(out, " {} MiB", b >> 20),
        Some(b) if b >= 1 << 10 && b % (1 << 10) == 0 => write!(out, " {} KiB", b >> 10),
        Some(b) => write!(out, " {b} B"),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_shows_every_domain_with_its_caches() {
        let topo = Topology::test(1, 1, 2, 1);
        let text = render(&topo, &"0-1".parse().unwrap());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "CPUs 0-1 (2), allowed 0-1 (2)");
        assert_eq!(lines[1], "dom0 llc {0-1}: L3 Unified 8 MiB");
        assert_eq!(
            lines[2],
            "├── dom1 cpu {0}: L1 Data 32 KiB, L2 Unified 1 MiB"
        );
        assert_eq!(
            lines[3],
            "└── dom2 cpu {1}: L1 Data 32 KiB, L2 Unified 1 MiB"
        );
        assert_eq!(lines.len(), 4);
    }

    #[test]
    fn deeper_trees_indent_under_open_branches() {
        let topo = Topology::test(1, 2, 2, 1);
        let text = render(&topo, &"0-3".parse().unwrap());
        assert!(text.contains("├── dom1 llc {0-1}"), "{text}");
        assert!(text.contains("│   ├── dom3 cpu {0}"), "{text}");
        assert!(text.contains("    └── dom6 cpu {3}"), "{text}");
    }

    /// The JSON as it was printed before it was streamed: a
    /// `serde_json::Value` tree (whose maps sort their keys) of the core's
    /// own serialisation.
    fn value_tree_json(topo: &Topology, allowed: &CpuSet) -> String {
        let v = serde_json::json!({ "topology": topo, "allowed": allowed });
        serde_json::to_string_pretty(&v).unwrap()
    }

    #[test]
    fn the_streamed_json_is_what_the_value_tree_printed() {
        let mut shapes: Vec<Topology> = [(1, 1, 1, 1), (1, 1, 2, 1), (2, 2, 2, 2), (2, 3, 4, 2)]
            .into_iter()
            .map(|(n, l, c, s)| Topology::test(n, l, c, s))
            .collect();
        // An L2 cluster, a cache of unknown size, CPUs numbered with gaps
        // and past 100 (the leaf map's keys sort as strings).
        let cpus: CpuSet = "0-3,98-101,1000".parse().unwrap();
        let spec = |level, cpus: &str, size_bytes| dfsched_core::DomainSpec {
            level,
            cpus: cpus.parse().unwrap(),
            caches: vec![Cache {
                level: 2,
                kind: "Unified".into(),
                size_bytes,
            }],
        };
        shapes.push(
            Topology::new(
                &cpus,
                vec![
                    spec(Level::L2, "0-3", Some(2 << 20)),
                    spec(Level::L2, "98-101", None),
                    spec(Level::Core, "98-99", Some(1000)),
                ],
            )
            .unwrap(),
        );
        for topo in shapes {
            let allowed = topo.cpus().clone();
            assert_eq!(
                json(&topo, &allowed).unwrap(),
                value_tree_json(&topo, &allowed),
                "{} CPUs",
                topo.nr_cpus()
            );
        }
    }

    #[test]
    fn numbers_order_as_their_decimal_strings() {
        let mut v: Vec<u32> = vec![0, 1, 2, 9, 10, 11, 19, 100, 101, 1000, 8191, 99, u32::MAX];
        let mut by_string = v.clone();
        by_string.sort_by_key(|n| n.to_string());
        v.sort_by_key(|&n| decimal_string_order(n));
        assert_eq!(v, by_string);
    }

    #[test]
    fn cache_sizes_use_the_largest_exact_unit() {
        let c = |b| Cache {
            level: 2,
            kind: "Unified".into(),
            size_bytes: b,
        };
        assert_eq!(describe_cache(&c(Some(2 << 20))), "L2 Unified 2 MiB");
        assert_eq!(describe_cache(&c(Some(48 << 10))), "L2 Unified 48 KiB");
        assert_eq!(describe_cache(&c(Some(1000))), "L2 Unified 1000 B");
        assert_eq!(describe_cache(&c(None)), "L2 Unified");
    }
}
