//! `dfsched sim smt`: Kihm et al.'s SMT co-scheduling by cache activity
//! vectors on the simulator, one workload under several policies, as a
//! table for people or `--json` (`policies.<name>.itko`,
//! `policies.<name>.relative_throughput`, …).
//!
//! `--seeds N` repeats the comparison with N seeds (workload, mapping,
//! random choices) and reports each policy's mean and the spread of its
//! ratios to round robin.
//!
//! The simulator does no I/O: traces are read here (`--workload traces
//! DIR`: every `*.dftrace` file of DIR, in name order, one thread each).
//!
//! `--grid paper --workload traces DIR` runs the paper's grid instead: 16
//! mixes of 4 of DIR's programs (`dfsched_sim::smt::grid::balanced_mixes`),
//! each under every policy, once with identity pages and once with random
//! 4 KiB pages, in parallel (`--jobs`) with a progress bar; it prints each
//! policy's mean ITKO change and throughput gain against round robin, the
//! worst mix and the share of the oracles' gain (a table, or `--json`),
//! and draws both per mix in an SVG (`--plot`). `--grid-programs
//! sensitive` draws the mixes only from the programs a co-runner can cost
//! misses, by each program's miss curve alone.

use anyhow::{bail, Context as _};
use clap::Args;
use dfsched_core::activity::{Overlap, Threshold};
use dfsched_sim::smt::compare::{compare, Comparison, PolicyChoice};
use dfsched_sim::smt::config::{
    Monitor, SmtConfig, SmtConfigError, ThresholdRule, Timing, VectorSource,
};
use dfsched_sim::smt::mapping::Mapping;
use dfsched_sim::smt::workload::{self, Stream, ThreadSpec, TraceStream, Workload};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// `sim smt`.
#[derive(Debug, Args)]
pub struct SmtArgs {
    /// The threads: `complementary`, `uniform`, `phased`, `traces DIR`
    /// (one thread per `*.dftrace` file, see `dfsched trace import`) or
    /// `mix SPEC` (comma-separated `sliceI/K`, `uniform`, `light`,
    /// `phased`, one thread each).
    #[arg(long, num_args = 1..=2, value_names = ["KIND", "ARG"], default_values = ["complementary"])]
    workload: Vec<String>,
    /// Threads of a synthetic workload.
    #[arg(long, default_value_t = 4)]
    threads: u32,
    /// Slices of the cache the complementary and phased threads are hot in
    /// [default: --contexts].
    #[arg(long)]
    slices: Option<u32>,
    /// Phases of the phased workload before its deals repeat.
    #[arg(long, default_value_t = 16)]
    phases: u32,
    /// Length of a phase, in quanta of a thread's own progress.
    #[arg(long, default_value_t = 4)]
    phase_quanta: u64,
    /// SMT cores (each with its own L1 and L2).
    #[arg(long, default_value_t = 1)]
    cores: u32,
    /// Hardware contexts per core (sharing its L1 and L2).
    #[arg(long, default_value_t = 2)]
    contexts: u32,
    /// Bits per super-set of the activity vectors (1 to 8).
    #[arg(long, default_value_t = 1)]
    bits: u8,
    /// Page mapping: identity, random-4k, 2m, coloured.
    #[arg(long, default_value = "identity")]
    mapping: Mapping,
    /// Which address the activity counters see: physical (hardware) or
    /// virtual (the paper's Valgrind profiles).
    #[arg(long, default_value = "physical")]
    vectors: String,
    /// What the counters count: accesses (requests to the L2) or misses
    /// (L2 misses).
    #[arg(long, default_value = "accesses")]
    monitor: String,
    /// Threshold of the top bit: `lines` (one L2 super-set's lines per
    /// quantum), a number of events per quantum, `mean:PERCENT` of the
    /// quantum's mean per super-set, or `majority:PERCENT` (hot: the
    /// busiest super-sets that hold PERCENT % of the quantum's events).
    #[arg(long, default_value = "lines")]
    threshold: String,
    /// Overlap of two vectors: min, product, bitand.
    #[arg(long, default_value = "min")]
    overlap: String,
    /// Weight of one overlapping super-set in a score.
    #[arg(long, default_value_t = 1.0)]
    w_interference: f64,
    /// Weight of one quantum run more than the least-run candidate.
    #[arg(long, default_value_t = 2.0)]
    w_runs: f64,
    /// Policies, comma separated: kihm, round-robin, linux, kihm-linux
    /// (the paper's Linux rule: Linux's pick unless the vectors find a
    /// strictly better one), random, intensity, shuffled, best-static,
    /// lookahead.
    #[arg(
        long,
        default_value = "kihm,round-robin,linux,kihm-linux,random,intensity,shuffled,best-static,lookahead"
    )]
    policies: String,
    /// L2 size in KiB (8-way, 128-byte lines, as the paper's Table 1).
    #[arg(long, default_value_t = 512)]
    l2_kib: u64,
    /// Cycles per scheduling interval.
    #[arg(long, default_value_t = 1_000_000)]
    quantum_cycles: u64,
    /// Cycles per instruction of a context running alone (the timing
    /// model's; the paper gives no latencies).
    #[arg(long, default_value_t = 1)]
    cpi: u32,
    /// Slowdown of the compute part while the sibling context is busy
    /// (shared issue slots), 1.0 to 8.0.
    #[arg(long, default_value_t = 1.5)]
    issue_slowdown: f64,
    /// Extra cycles of an L1 miss that hits the L2.
    #[arg(long, default_value_t = 12)]
    l2_hit_cycles: u32,
    /// Extra cycles of an L2 miss (memory).
    #[arg(long, default_value_t = 200)]
    memory_cycles: u32,
    /// Intervals simulated.
    #[arg(long, default_value_t = 200)]
    quanta: u32,
    /// Seed of the workload, the mapping and the random choices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Runs with seeds --seed, --seed + 1, …: each policy's mean, and the
    /// spread of its ratios to round robin across seeds.
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Run a grid of mixes instead of one workload: `paper` (needs
    /// `--workload traces DIR`; runs identity and random 4 KiB pages, so
    /// --mapping is not used).
    #[arg(long, value_name = "NAME")]
    grid: Option<String>,
    /// Mixes of the grid (all combinations when there are fewer).
    #[arg(long, default_value_t = 16)]
    grid_mixes: usize,
    /// Programs per mix of the grid.
    #[arg(long, default_value_t = 4)]
    mix_size: usize,
    /// Which programs of DIR the grid's mixes draw on: `all`, or
    /// `sensitive`: those a co-runner can cost misses (alone, with a
    /// quarter of the L2's ways they miss at least twice as often as with
    /// all of them, and at least once per 1000 accesses: each program's
    /// miss curve, printed with the grid, says which and why).
    #[arg(long, value_enum, default_value_t = GridPrograms::All)]
    grid_programs: GridPrograms,
    /// The grid's plot (SVG): ITKO and relative throughput against round
    /// robin per mix, for each policy and mapping.
    #[arg(long, default_value = "bench-out/smt-grid-paper.svg")]
    plot: std::path::PathBuf,
    /// Comparisons of the grid run at once [default: the CPUs].
    #[arg(long)]
    jobs: Option<usize>,
}

/// `--grid-programs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
enum GridPrograms {
    /// Every program of DIR.
    All,
    /// The programs a co-runner can cost misses, by each one's miss curve
    /// alone (`dfsched_sim::smt::grid::co_runner_sensitive`).
    Sensitive,
}

/// Runs `sim smt`.
pub fn run(a: SmtArgs) -> anyhow::Result<()> {
    let cfg = config(&a)?;
    let policies: Vec<PolicyChoice> = a
        .policies
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<PolicyChoice>().map_err(anyhow::Error::msg))
        .collect::<anyhow::Result<_>>()?;
    if policies.is_empty() {
        bail!("--policies names no policy");
    }
    if a.seeds == 0 {
        bail!("--seeds must be at least 1");
    }
    if let Some(g) = &a.grid {
        return grid(&a, g, &cfg, &policies);
    }
    let mut runs = Vec::new();
    for seed in a.seed..a.seed + a.seeds {
        let cfg = SmtConfig {
            seed,
            ..cfg.clone()
        };
        let w = workload_of(&a, &cfg, seed)?;
        let c = compare(&cfg, &w, &policies, |name| {
            tracing::info!(policy = name, seed, "running");
        })
        .context("sim smt")?;
        runs.push(c);
    }
    let text = if a.seeds == 1 {
        let c = runs.pop().expect("one seed, one run");
        if !a.json {
            return table(&c);
        }
        serde_json::to_string_pretty(&c)?
    } else {
        let m = across_seeds(runs);
        if !a.json {
            return seeds_table(&m);
        }
        serde_json::to_string_pretty(&m)?
    };
    // Serialised first, so that a closed pipe is an io::Error (which
    // `main` treats as a normal end), not a serde_json one.
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")?;
    Ok(())
}

/// The mean, least and greatest of some values.
#[derive(Debug, Serialize)]
struct Spread {
    mean: f64,
    min: f64,
    max: f64,
}

impl Spread {
    fn of(v: &[f64]) -> Option<Spread> {
        (!v.is_empty()).then(|| Spread {
            mean: v.iter().sum::<f64>() / v.len() as f64,
            min: v.iter().copied().fold(f64::INFINITY, f64::min),
            max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        })
    }
}

/// One policy across seeds.
#[derive(Debug, Serialize)]
struct PolicySeeds {
    /// Mean L2 ITKO.
    itko: f64,
    /// Mean relative throughput.
    relative_throughput: f64,
    /// ITKO / round robin's, per seed.
    itko_vs_round_robin: Option<Spread>,
    /// Relative throughput / round robin's, per seed.
    relative_throughput_vs_round_robin: Option<Spread>,
}

/// `--seeds N` with N > 1.
#[derive(Debug, Serialize)]
struct AcrossSeeds {
    seeds: Vec<u64>,
    order: Vec<String>,
    policies: BTreeMap<String, PolicySeeds>,
    /// The paper's policy against each control that ran, seed by seed (the
    /// issue's set-level rule: a claim needs it ahead of intensity-only and
    /// shuffled vectors by more than the spread across seeds). Empty
    /// without `kihm` and `round-robin` among the policies.
    kihm_against: BTreeMap<String, dfsched_sim::smt::grid::Paired>,
    runs: Vec<Comparison>,
}

fn across_seeds(runs: Vec<Comparison>) -> AcrossSeeds {
    let order = runs[0].order.clone();
    let mut policies = BTreeMap::new();
    for name in &order {
        let col = |f: &dyn Fn(&Comparison) -> Option<f64>| -> Vec<f64> {
            runs.iter().filter_map(f).collect()
        };
        let mean = |v: Vec<f64>| v.iter().sum::<f64>() / v.len().max(1) as f64;
        let ratio = |get: fn(&dfsched_sim::smt::run::RunReport) -> f64| {
            Spread::of(&col(&|c: &Comparison| {
                let rr = c.policies.get("round-robin").map(get)?;
                (rr > 0.0).then(|| get(&c.policies[name]) / rr)
            }))
        };
        policies.insert(
            name.clone(),
            PolicySeeds {
                itko: mean(col(&|c: &Comparison| Some(c.policies[name].itko as f64))),
                relative_throughput: mean(col(&|c: &Comparison| {
                    Some(c.policies[name].relative_throughput)
                })),
                itko_vs_round_robin: ratio(|r| r.itko as f64),
                relative_throughput_vs_round_robin: ratio(|r| r.relative_throughput),
            },
        );
    }
    // Each seed is one "mix" of the grid's pairing: the same differences,
    // taken seed by seed.
    let kihm_against = dfsched_sim::smt::grid::summarise(&runs)
        .map(|g| g.kihm_against)
        .unwrap_or_default();
    AcrossSeeds {
        seeds: runs.iter().map(|c| c.config.seed).collect(),
        order,
        policies,
        kihm_against,
        runs,
    }
}

fn seeds_table(m: &AcrossSeeds) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "sim smt: {} over seeds {:?}; ratios to round robin per seed: mean [min, max]",
        m.runs[0].workload, m.seeds
    )?;
    writeln!(
        out,
        "{:<12} {:>12} {:>26} {:>9} {:>26}",
        "policy", "L2 ITKO", "ITKO vs RR", "rel.thr", "rel.thr vs RR"
    )?;
    let fmt = |s: &Option<Spread>| {
        s.as_ref().map_or("-".to_string(), |s| {
            format!(
                "{:+.1}% [{:+.1}, {:+.1}]",
                (s.mean - 1.0) * 100.0,
                (s.min - 1.0) * 100.0,
                (s.max - 1.0) * 100.0
            )
        })
    };
    for name in &m.order {
        let p = &m.policies[name];
        writeln!(
            out,
            "{:<12} {:>12.0} {:>26} {:>9.4} {:>26}",
            name,
            p.itko,
            fmt(&p.itko_vs_round_robin),
            p.relative_throughput,
            fmt(&p.relative_throughput_vs_round_robin)
        )?;
    }
    for (control, p) in &m.kihm_against {
        let line = paired_line(
            &format!("{control}, seed by seed"),
            p,
            m.seeds.len(),
            "seeds",
        );
        writeln!(out, "{line}")?;
    }
    Ok(())
}

fn config(a: &SmtArgs) -> anyhow::Result<SmtConfig> {
    let base = SmtConfig::default();
    let threshold = match a.threshold.as_str() {
        "lines" => ThresholdRule::SuperSetLines,
        t => match (t.strip_prefix("mean:"), t.strip_prefix("majority:")) {
            (Some(p), _) => ThresholdRule::Fixed(Threshold::OfMean {
                percent: p.parse().context("--threshold mean:PERCENT")?,
            }),
            (_, Some(p)) => ThresholdRule::Fixed(Threshold::Majority {
                percent: p.parse().context("--threshold majority:PERCENT")?,
            }),
            (None, None) => ThresholdRule::Fixed(Threshold::Absolute {
                hot: t
                    .parse()
                    .context("--threshold: lines, a number, mean:PERCENT or majority:PERCENT")?,
            }),
        },
    };
    let cfg = SmtConfig {
        cores: a.cores,
        contexts: a.contexts,
        l2: dfsched_sim::smt::cache::LevelShape {
            bytes: a.l2_kib << 10,
            ..base.l2
        },
        bits: a.bits,
        threshold,
        monitor: match a.monitor.as_str() {
            "accesses" => Monitor::L2Accesses,
            "misses" => Monitor::L2Misses,
            m => bail!("--monitor {m:?}: accesses or misses"),
        },
        vector_source: match a.vectors.as_str() {
            "physical" => VectorSource::Physical,
            "virtual" => VectorSource::Virtual,
            v => bail!("--vectors {v:?}: physical or virtual"),
        },
        overlap: match a.overlap.as_str() {
            "min" => Overlap::Min,
            "product" => Overlap::Product,
            "bitand" => Overlap::BitAnd,
            o => bail!("--overlap {o:?}: min, product or bitand"),
        },
        weights: dfsched_core::smt_pair::PairWeights {
            interference: a.w_interference,
            runs: a.w_runs,
            ..base.weights
        },
        mapping: a.mapping,
        quantum_cycles: a.quantum_cycles,
        quanta: a.quanta,
        seed: a.seed,
        timing: timing(a),
        ..base
    };
    cfg.validate().map_err(|e| match e {
        SmtConfigError::BadTiming { .. } => {
            anyhow::anyhow!("{e} (--cpi, --issue-slowdown, --l2-hit-cycles, --memory-cycles)")
        }
        e => e.into(),
    })?;
    Ok(cfg)
}

/// The paper's policy against one control over `n` runs (`over`: mixes or
/// seeds), in points: `kihm - LABEL: ITKO … fewer in k/n …; rel.thr …`.
fn paired_line(label: &str, p: &dfsched_sim::smt::grid::Paired, n: usize, over: &str) -> String {
    let pts = |x: f64| format!("{:+.1}", x * 100.0);
    // Throughput differences are fractions of a point.
    let pts2 = |x: f64| format!("{:+.2}", x * 100.0);
    let (i, th) = (&p.itko_difference, &p.throughput_difference);
    format!(
        "kihm - {label}: ITKO {} pts [{}, {}], fewer in {}/{n} {over}; rel.thr {} pts [{}, {}], higher in {}/{n}",
        pts(i.mean),
        pts(i.min),
        pts(i.max),
        p.fewer_itko,
        pts2(th.mean),
        pts2(th.min),
        pts2(th.max),
        p.higher_throughput
    )
}

/// Fig. 2's four shares as whole percentages, `low/spread/half/eighth`.
fn concentration_text(k: &dfsched_sim::smt::metrics::Concentration) -> String {
    format!(
        "{:.0}/{:.0}/{:.0}/{:.0}",
        k.low * 100.0,
        k.spread * 100.0,
        k.half * 100.0,
        k.eighth * 100.0
    )
}

/// The timing model in a header line.
fn timing_text(t: &Timing) -> String {
    format!(
        "timing: CPI {}, x{} issue beside a busy sibling, L2 hit +{}, memory +{} cycles",
        t.cpi,
        f64::from(t.issue_slowdown_milli) / 1000.0,
        t.l2_hit_cycles,
        t.memory_cycles
    )
}

/// The timing flags as the model's; [`SmtConfig::validate`] judges them.
fn timing(a: &SmtArgs) -> Timing {
    Timing {
        cpi: a.cpi,
        // A negative, NaN or huge slowdown saturates to a value validate
        // refuses.
        issue_slowdown_milli: (a.issue_slowdown * 1000.0).round() as u32,
        l2_hit_cycles: a.l2_hit_cycles,
        memory_cycles: a.memory_cycles,
    }
}

fn workload_of(a: &SmtArgs, cfg: &SmtConfig, seed: u64) -> anyhow::Result<Workload> {
    let shape = cfg.kernel_shape(a.phase_quanta);
    let slices = a.slices.unwrap_or(a.contexts);
    if slices == 0 || !cfg.super_sets.is_multiple_of(slices) {
        bail!(
            "--slices {slices} must divide the {} super-sets",
            cfg.super_sets
        );
    }
    let arg = a.workload.get(1);
    Ok(match (a.workload[0].as_str(), arg) {
        ("complementary", None) => workload::complementary(&shape, a.threads, slices, seed),
        ("uniform", None) => workload::uniform(&shape, a.threads, slices, seed),
        ("phased", None) => workload::phased(&shape, a.threads, slices, a.phases, seed),
        ("mix", Some(spec)) => workload::mix(&shape, spec, seed).map_err(anyhow::Error::msg)?,
        ("traces", Some(dir)) => traces(Path::new(dir))?,
        (kind, _) => {
            bail!("--workload {kind:?}: complementary, uniform, phased, `traces DIR` or `mix SPEC`")
        }
    })
}

/// One thread per `*.dftrace` file of `dir`, in name order.
fn traces(dir: &Path) -> anyhow::Result<Workload> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "dftrace"))
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("no *.dftrace file in {}", dir.display());
    }
    let mut threads = Vec::new();
    for f in files {
        let accesses = crate::cmd_trace::read_trace(&f)?;
        let stream = TraceStream::new(accesses.into())
            .with_context(|| format!("{} holds no access", f.display()))?;
        threads.push(ThreadSpec {
            name: f
                .file_stem()
                .map_or_else(String::new, |s| s.to_string_lossy().into_owned()),
            stream: Stream::Trace(stream),
        });
    }
    Ok(Workload {
        name: format!("traces {}", dir.display()),
        threads,
    })
}

fn table(c: &Comparison) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    let cfg = &c.config;
    writeln!(
        out,
        "sim smt: {} ({} threads) on {} core(s) x {} contexts; L1 {} KiB {}-way, L2 {} KiB {}-way, {} super-sets, {} bit(s), {:?} mapping; {} quanta of {} cycles; {}",
        c.workload,
        c.threads.len(),
        cfg.cores,
        cfg.contexts,
        cfg.l1.bytes >> 10,
        cfg.l1.ways,
        cfg.l2.bytes >> 10,
        cfg.l2.ways,
        cfg.super_sets,
        cfg.bits,
        cfg.mapping,
        cfg.quanta,
        cfg.quantum_cycles,
        timing_text(&cfg.timing)
    )?;
    let rr = c.policies.get("round-robin");
    writeln!(
        out,
        "{:<12} {:>10} {:>7} {:>10} {:>10} {:>10} {:>8} {:>7} {:>6} {:>5} {:>5} {:>6} {:>6}",
        "policy",
        "L2 ITKO",
        "vs RR",
        "co-runner",
        "L2 misses",
        "inter-thr",
        "rel.thr",
        "vs RR",
        "Jain",
        "lead",
        "chg/q",
        "right",
        "poor"
    )?;
    for name in &c.order {
        let r = &c.policies[name];
        let vs = |x: f64, base: Option<f64>| {
            base.filter(|b| *b > 0.0).map_or("-".to_string(), |b| {
                format!("{:+.1}%", (x / b - 1.0) * 100.0)
            })
        };
        writeln!(
            out,
            "{:<12} {:>10} {:>7} {:>10} {:>10} {:>10} {:>8.4} {:>7} {:>6.3} {:>5} {:>5.2} {:>6} {:>5.1}%",
            name,
            r.itko,
            vs(r.itko as f64, rr.map(|b| b.itko as f64)),
            r.itko_co_running,
            r.l2_misses,
            r.inter_thread_misses,
            r.relative_throughput,
            vs(r.relative_throughput, rr.map(|b| b.relative_throughput)),
            r.fairness_jain,
            r.run_lead,
            r.context_changes as f64 / cfg.switch_points() as f64,
            r.right_pairing
                .map_or("-".to_string(), |x| format!("{:.1}%", x * 100.0)),
            r.decisions.poor_share() * 100.0
        )?;
    }
    if let Some(first) = c.order.first() {
        let k = &c.policies[first].correlation;
        let f = |r: Option<f64>| r.map_or("-".to_string(), |x| format!("{x:.3}"));
        let bits: Vec<String> = k.r_bits.iter().map(|&r| f(r)).collect();
        writeln!(
            out,
            "Figs. 9-11 under {first}: ITKO per super-set and quantum vs the pair's L2 misses, r(sum) {}, r(min) {}, r(sum at 1..5 bits) {} ({} samples)",
            f(k.r_sum),
            f(k.r_min),
            bits.join(" "),
            k.samples
        )?;
    }
    if let Some(first) = c.order.first() {
        let fills: Vec<String> = c.policies[first]
            .threads
            .iter()
            .map(|t| {
                let v = t.vectors;
                format!(
                    "{} {:.0}% ({:.0}/{:.0})",
                    t.name,
                    v.mean_fill * 100.0,
                    v.all_hot * 100.0,
                    v.none_hot * 100.0
                )
            })
            .collect();
        writeln!(
            out,
            "vectors under {first}: hot super-sets, mean (quanta hot everywhere/nowhere): {}",
            fills.join(", ")
        )?;
        let focus: Vec<String> = c.policies[first]
            .threads
            .iter()
            .map(|t| format!("{} {}", t.name, concentration_text(&t.concentration)))
            .collect();
        writeln!(
            out,
            "Fig. 2 under {first}, share of quanta below the median / spread / 60 % in a half / in an eighth: {}",
            focus.join(", ")
        )?;
    }
    if let Some(b) = &c.best_static {
        writeln!(
            out,
            "best static grouping: {:?} (of {} tried)",
            b.groups, b.tried
        )?;
    }
    writeln!(
        out,
        "rel.thr: sum over contexts of IPC together / IPC alone, mean over quanta (max {}); lead: the largest lead in quanta run of one thread over another; chg/q: context changes per core and quantum; right: quanta whose co-runners are hot in different slices; poor: Fig. 12's poor picks among context changes",
        cfg.cores * cfg.contexts
    )?;
    Ok(())
}

/// The mappings every grid runs: the paper's (virtual = physical) and the
/// one a physically indexed L2 sees with ordinary pages.
const GRID_MAPPINGS: [Mapping; 2] = [Mapping::Identity, Mapping::Random4k];

/// `--grid` as JSON.
#[derive(Debug, Serialize)]
struct GridReport {
    grid: String,
    /// The machine and model (the mapping is per entry of `mappings`).
    config: SmtConfig,
    /// Each mix's programs, in grid order.
    mixes: Vec<Vec<String>>,
    /// The policies, in the order asked.
    order: Vec<String>,
    /// Per mapping (`identity`, `random-4k`): each mix's ratios to round
    /// robin and each policy's summary.
    mappings: BTreeMap<String, dfsched_sim::smt::grid::GridSummary>,
    /// Per mapping, every mix's full comparison.
    runs: BTreeMap<String, Vec<Comparison>>,
    /// `--grid-programs`: which programs of DIR the mixes draw on.
    grid_programs: GridPrograms,
    /// The programs the mixes draw on, in name order.
    programs: Vec<String>,
    /// Per program of DIR (drawn on or not), its L2 misses alone with the
    /// whole L2 and with half and a quarter of its ways, identity pages
    /// (what a pairing could save it at all), and whether a co-runner can
    /// cost it misses.
    miss_curves: BTreeMap<String, dfsched_sim::smt::grid::MissCurve>,
}

/// The mapping as `--mapping` spells it.
fn mapping_name(m: Mapping) -> String {
    match m {
        Mapping::Identity => "identity".into(),
        Mapping::Random4k => "random-4k".into(),
        Mapping::Huge2m => "2m".into(),
        Mapping::Coloured { colour_bits } => format!("coloured:{colour_bits}"),
    }
}

/// Runs `--grid NAME`.
fn grid(a: &SmtArgs, name: &str, cfg: &SmtConfig, policies: &[PolicyChoice]) -> anyhow::Result<()> {
    use dfsched_sim::smt::grid::{balanced_mixes, summarise};
    use indicatif::{ProgressBar, ProgressStyle};
    use std::io::IsTerminal as _;
    use std::sync::atomic::{AtomicUsize, Ordering};

    if name != "paper" {
        bail!("--grid {name:?}: only `paper` (16 mixes of 4 traced programs)");
    }
    if a.seeds > 1 {
        // The grid's spread is across mixes, one seed each.
        bail!("--grid runs one seed per mix: --seeds is not supported with it");
    }
    let dir = match (a.workload[0].as_str(), a.workload.get(1)) {
        ("traces", Some(dir)) => Path::new(dir),
        _ => bail!("--grid paper needs --workload traces DIR"),
    };
    if !policies.contains(&PolicyChoice::RoundRobin) {
        bail!("--grid reports every policy against round-robin: add it to --policies");
    }
    let mut all = traces(dir)?;
    if all.threads.len() < a.mix_size || a.mix_size == 0 {
        bail!(
            "--grid needs at least --mix-size {} traces in {} (found {})",
            a.mix_size,
            dir.display(),
            all.threads.len()
        );
    }
    let workers = a
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    // Before the mixes: `--grid-programs sensitive` chooses by them.
    let curves = miss_curves(cfg, &all, workers);
    if a.grid_programs == GridPrograms::Sensitive {
        all.threads
            .retain(|t| curves.get(&t.name).is_some_and(|c| c.co_runner_sensitive));
        if all.threads.len() < a.mix_size {
            let kept: Vec<&str> = all.threads.iter().map(|t| t.name.as_str()).collect();
            bail!(
                "--grid-programs sensitive: only {} of the {} programs in {} miss more beside a co-runner ({}), fewer than --mix-size {}; their miss curves: {}",
                kept.len(),
                curves.len(),
                dir.display(),
                if kept.is_empty() { "none".to_string() } else { kept.join(", ") },
                a.mix_size,
                miss_curve_text(&curves)
            );
        }
    }
    let mixes = balanced_mixes(all.threads.len(), a.mix_size, a.grid_mixes);
    let jobs: Vec<(Mapping, usize)> = GRID_MAPPINGS
        .iter()
        .flat_map(|&m| (0..mixes.len()).map(move |i| (m, i)))
        .collect();
    let workers = workers.clamp(1, jobs.len());
    let tty = std::io::stderr().is_terminal();
    let bar = if tty {
        let bar = ProgressBar::new(jobs.len() as u64);
        bar.set_style(
            ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} mixes, eta {eta} {msg}",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
        bar
    } else {
        ProgressBar::hidden()
    };
    let done = AtomicUsize::new(0);
    let results = in_parallel(jobs.len(), workers, |i| {
        let (mapping, mix) = jobs[i];
        let threads: Vec<_> = mixes[mix].iter().map(|&t| all.threads[t].clone()).collect();
        let names: Vec<&str> = threads.iter().map(|t| t.name.as_str()).collect();
        let w = Workload {
            name: format!("mix {} {}", mix + 1, names.join(" ")),
            threads,
        };
        let cfg = SmtConfig {
            mapping,
            ..cfg.clone()
        };
        let r = compare(&cfg, &w, policies, |_| {}).context("sim smt --grid");
        // Relaxed: the counter only counts.
        let n = done.fetch_add(1, Ordering::Relaxed) + 1;
        if tty {
            bar.set_message(format!("{} {}", mapping_name(mapping), w.name));
            bar.inc(1);
        } else {
            // A line per comparison in logs and CI.
            eprintln!(
                "[{n:>3}/{}] {} {}",
                jobs.len(),
                mapping_name(mapping),
                w.name
            );
        }
        r
    });
    bar.finish_and_clear();
    let mut results = results.into_iter();
    let mut report = GridReport {
        grid: name.into(),
        config: cfg.clone(),
        mixes: mixes
            .iter()
            .map(|m| m.iter().map(|&t| all.threads[t].name.clone()).collect())
            .collect(),
        order: policies.iter().map(|p| p.name().to_string()).collect(),
        mappings: BTreeMap::new(),
        runs: BTreeMap::new(),
        grid_programs: a.grid_programs,
        programs: all.threads.iter().map(|t| t.name.clone()).collect(),
        miss_curves: curves,
    };
    for &m in &GRID_MAPPINGS {
        let runs: Vec<Comparison> = results
            .by_ref()
            .take(mixes.len())
            .collect::<anyhow::Result<_>>()?;
        report.mappings.insert(
            mapping_name(m),
            summarise(&runs).context("summarising the grid")?,
        );
        report.runs.insert(mapping_name(m), runs);
    }
    if let Some(parent) = a.plot.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    plot_grid(&a.plot, &report).with_context(|| format!("drawing {}", a.plot.display()))?;
    let text = if a.json {
        serde_json::to_string_pretty(&report)?
    } else {
        grid_table(&report)
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", text.trim_end())?;
    if !a.json {
        writeln!(out, "plot: {}", a.plot.display())?;
    }
    Ok(())
}

/// Each program's [`miss_curve`](dfsched_sim::smt::grid::miss_curve)
/// with identity pages, `workers` at a time.
fn miss_curves(
    cfg: &SmtConfig,
    all: &Workload,
    workers: usize,
) -> BTreeMap<String, dfsched_sim::smt::grid::MissCurve> {
    let cfg = SmtConfig {
        mapping: Mapping::Identity,
        ..cfg.clone()
    };
    // Each program alone for the run's length: seconds, after the bar.
    eprintln!(
        "miss curves: {} programs alone, with the whole L2 and fewer ways",
        all.threads.len()
    );
    let curves = in_parallel(all.threads.len(), workers, |i| {
        dfsched_sim::smt::grid::miss_curve(&cfg, i as u16, &all.threads[i])
    });
    all.threads
        .iter()
        .map(|t| t.name.clone())
        .zip(curves)
        .collect()
}

/// `job(i)` for every `i` in `0..n`, on `workers` threads (at least one,
/// at most `n`), the results in the order of `i`.
fn in_parallel<R: Send>(n: usize, workers: usize, job: impl Fn(usize) -> R + Sync) -> Vec<R> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    let next = AtomicUsize::new(0);
    let slots: Mutex<Vec<Option<R>>> = Mutex::new((0..n).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..workers.clamp(1, n.max(1)) {
            s.spawn(|| loop {
                // Relaxed: the counter only hands out indices; results are
                // published through the mutex.
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let r = job(i);
                slots.lock().expect("no worker panics holding the lock")[i] = Some(r);
            });
        }
    });
    slots
        .into_inner()
        .expect("the workers have ended")
        .into_iter()
        .map(|r| r.expect("every job ran"))
        .collect()
}

fn grid_table(r: &GridReport) -> String {
    use std::fmt::Write as _;
    let mut t = String::new();
    let pct = |x: f64| format!("{:+.1}%", x * 100.0);
    let _ = writeln!(
        t,
        "sim smt --grid {}: {} mixes of {} programs, L2 {} KiB {}-way, {} bit(s), {} quanta of {} cycles; {}; ratios to round robin, mean [min, max] over mixes",
        r.grid,
        r.mixes.len(),
        r.mixes.first().map_or(0, Vec::len),
        r.config.l2.bytes >> 10,
        r.config.l2.ways,
        r.config.bits,
        r.config.quanta,
        r.config.quantum_cycles,
        timing_text(&r.config.timing)
    );
    let _ = writeln!(
        t,
        "programs: {} of {} ({}): {}",
        r.programs.len(),
        r.miss_curves.len(),
        match r.grid_programs {
            GridPrograms::All => "all",
            GridPrograms::Sensitive => "those a co-runner can cost misses, marked * below",
        },
        r.programs.join(" ")
    );
    for (i, m) in r.mixes.iter().enumerate() {
        let _ = writeln!(t, "  mix {:>2}: {}", i + 1, m.join(" "));
    }
    for (mapping, g) in &r.mappings {
        let _ = writeln!(t, "\n{mapping} pages");
        let _ = writeln!(
            t,
            "{:<12} {:>26} {:>26} {:>9} {:>10} {:>10} {:>10}",
            "policy",
            "L2 ITKO vs RR",
            "rel.thr vs RR",
            "L2 misses",
            "worst mix",
            "of static",
            "of l.ahead"
        );
        let spread = |s: &dfsched_sim::smt::grid::Spread| {
            format!("{} [{}, {}]", pct(s.mean), pct(s.min), pct(s.max))
        };
        for name in &r.order {
            let p = &g.policies[name];
            let share =
                |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{:.0}%", x * 100.0));
            let _ = writeln!(
                t,
                "{:<12} {:>26} {:>26} {:>9} {:>10} {:>10} {:>10}",
                name,
                spread(&p.itko_change),
                spread(&p.throughput_gain),
                pct(p.l2_miss_change.mean),
                format!("{}", p.throughput_gain.min_mix + 1),
                share(p.share_of_best_static_gain),
                share(p.share_of_lookahead_itko_cut)
            );
        }
        for (control, p) in &g.kihm_against {
            let _ = writeln!(t, "{}", paired_line(control, p, g.mixes.len(), "mixes"));
        }
        // The policies of this mapping's grid, in the order asked.
        let in_order = || {
            r.order
                .iter()
                .filter_map(|n| g.policies.get(n).map(|p| (n, p)))
        };
        let co: Vec<String> = in_order()
            .filter(|(n, _)| *n != "round-robin")
            .map(|(n, p)| format!("{n} {}", spread(&p.co_running_itko_change)))
            .collect();
        let _ = writeln!(
            t,
            "L2 ITKO between co-runners only (the victim ran on the sibling context then; without descheduled threads' lines) vs RR: {}",
            co.join(", ")
        );
        let switching: Vec<String> = in_order()
            .map(|(n, p)| {
                let (c, l) = (&p.context_changes, &p.run_lead);
                format!(
                    "{n} {:.2} [{:.2}, {:.2}] / {:.1} [{:.0}, {:.0}]",
                    c.mean, c.min, c.max, l.mean, l.min, l.max
                )
            })
            .collect();
        let _ = writeln!(
            t,
            "context changes per core and quantum / largest lead in quanta run of one thread over another, mean [min, max] over mixes: {}",
            switching.join(", ")
        );
        if !g.vector_fill.is_empty() {
            let fills: Vec<String> = g
                .vector_fill
                .iter()
                .map(|(name, f)| {
                    format!(
                        "{name} {:.0}% ({:.0}%)",
                        f.mean_fill * 100.0,
                        f.all_hot * 100.0
                    )
                })
                .collect();
            let _ = writeln!(
                t,
                "vectors under kihm, hot super-sets (quanta hot everywhere), mean over mixes: {}",
                fills.join(", ")
            );
            let focus: Vec<String> = g
                .vector_fill
                .iter()
                .map(|(name, f)| format!("{name} {}", concentration_text(&f.concentration)))
                .collect();
            let _ = writeln!(
                t,
                "Fig. 2 under kihm, share of quanta below the median / spread / 60 % in a half / in an eighth, mean over mixes: {}",
                focus.join(", ")
            );
        }
    }
    if !r.miss_curves.is_empty() {
        let _ = writeln!(t, "\n{}", miss_curve_text(&r.miss_curves));
    }
    let _ = writeln!(
        t,
        "\nworst mix: the mix of the least rel.thr gain; L2 misses: mean change of all L2 misses (what rel.thr follows); of static: mean rel.thr gain / best static pairing's; of l.ahead: mean ITKO cut / look-ahead oracle's; kihm - X: the paper's policy's ratio to round robin minus the control's, mix by mix (set-level value needs kihm ahead of intensity and shuffled by more than that spread)"
    );
    t
}

/// The miss curves as a line for people: misses per 1000 accesses at each
/// share of the L2, a `*` after a program a co-runner can cost misses.
fn miss_curve_text(curves: &BTreeMap<String, dfsched_sim::smt::grid::MissCurve>) -> String {
    let each: Vec<String> = curves
        .iter()
        .map(|(name, c)| {
            let m: Vec<String> = c
                .points
                .iter()
                .map(|p| format!("{:.1}", p.misses_per_kilo_access))
                .collect();
            let mark = if c.co_runner_sensitive { "*" } else { "" };
            format!("{name}{mark} {}", m.join("/"))
        })
        .collect();
    let kib: Vec<String> = curves
        .values()
        .next()
        .map(|c| c.points.iter().map(|p| p.kib.to_string()).collect())
        .unwrap_or_default();
    format!(
        "L2 misses per 1000 accesses alone, identity pages, at {} KiB (the same sets, fewer ways: the share a co-runner leaves; * a co-runner can cost it misses: x{} on the least share and at least {}): {}",
        kib.join("/"),
        dfsched_sim::smt::grid::SENSITIVE_FACTOR,
        dfsched_sim::smt::grid::SENSITIVE_FLOOR,
        each.join(", ")
    )
}

/// Four panels: ITKO and relative throughput against round robin (rows)
/// per mix, with identity and random 4 KiB pages (columns); a line with
/// points per policy.
fn plot_grid(path: &Path, r: &GridReport) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let e = |e: plotters::drawing::DrawingAreaErrorKind<std::io::Error>| anyhow::anyhow!("{e}");
    let root = SVGBackend::new(path, (1300, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(e)?;
    let root = root
        .titled(
            &format!(
                "sim smt --grid {}: {} mixes of {} traced programs, against round robin",
                r.grid,
                r.mixes.len(),
                r.mixes.first().map_or(0, Vec::len)
            ),
            ("sans-serif", 18),
        )
        .map_err(e)?;
    let cells = root.split_evenly((2, GRID_MAPPINGS.len()));
    let n = r.mixes.len() as f64;
    for (row, metric) in [
        "L2 ITKO vs round robin (%)",
        "relative throughput vs round robin (%)",
    ]
    .into_iter()
    .enumerate()
    {
        for (col, m) in GRID_MAPPINGS.iter().enumerate() {
            let name = mapping_name(*m);
            let Some(g) = r.mappings.get(&name) else {
                continue;
            };
            let value = |mix: &dfsched_sim::smt::grid::MixRatios, p: &str| {
                100.0
                    * if row == 0 {
                        mix.itko_change[p]
                    } else {
                        mix.throughput_gain[p]
                    }
            };
            let (mut y0, mut y1) = (0.0f64, 0.0f64);
            for mix in &g.mixes {
                for p in &r.order {
                    y0 = y0.min(value(mix, p));
                    y1 = y1.max(value(mix, p));
                }
            }
            let pad = ((y1 - y0) * 0.05).max(0.5);
            let cell = &cells[row * GRID_MAPPINGS.len() + col];
            let mut chart = ChartBuilder::on(cell)
                .caption(format!("{name} pages"), ("sans-serif", 14))
                .margin(10)
                .x_label_area_size(35)
                .y_label_area_size(55)
                .build_cartesian_2d(0.5..n + 0.5, (y0 - pad)..(y1 + pad))
                .map_err(e)?;
            chart
                .configure_mesh()
                .x_desc("mix")
                .y_desc(metric)
                .x_labels(r.mixes.len().max(2))
                .x_label_formatter(&|x| format!("{x:.0}"))
                .draw()
                .map_err(e)?;
            for (k, p) in r.order.iter().enumerate() {
                let color = Palette99::pick(k).to_rgba();
                let pts: Vec<(f64, f64)> = g
                    .mixes
                    .iter()
                    .enumerate()
                    .map(|(i, mix)| ((i + 1) as f64, value(mix, p)))
                    .collect();
                chart
                    .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
                    .map_err(e)?
                    .label(p.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 16, y)], color.stroke_width(2))
                    });
                chart
                    .draw_series(pts.iter().map(|&pt| Circle::new(pt, 3, color.filled())))
                    .map_err(e)?;
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()
                .map_err(e)?;
        }
    }
    root.present().map_err(e)?;
    Ok(())
}
