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

use anyhow::{bail, Context as _};
use clap::Args;
use dfsched_core::activity::{Overlap, Threshold};
use dfsched_sim::smt::compare::{compare, Comparison, PolicyChoice};
use dfsched_sim::smt::config::{Monitor, SmtConfig, ThresholdRule, VectorSource};
use dfsched_sim::smt::mapping::Mapping;
use dfsched_sim::smt::trace;
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
    /// quantum), a number of events per quantum, or `mean:PERCENT` of the
    /// quantum's mean per super-set.
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
    AcrossSeeds {
        seeds: runs.iter().map(|c| c.config.seed).collect(),
        order,
        policies,
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
    Ok(())
}

fn config(a: &SmtArgs) -> anyhow::Result<SmtConfig> {
    let base = SmtConfig::default();
    let threshold = match a.threshold.as_str() {
        "lines" => ThresholdRule::SuperSetLines,
        t => match t.strip_prefix("mean:") {
            Some(p) => ThresholdRule::Fixed(Threshold::OfMean {
                percent: p.parse().context("--threshold mean:PERCENT")?,
            }),
            None => ThresholdRule::Fixed(Threshold::Absolute {
                hot: t
                    .parse()
                    .context("--threshold: lines, a number or mean:PERCENT")?,
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
        ..base
    };
    cfg.validate()?;
    Ok(cfg)
}

fn workload_of(a: &SmtArgs, cfg: &SmtConfig, seed: u64) -> anyhow::Result<Workload> {
    let shape = cfg.kernel_shape(a.phase_quanta);
    let slices = a.slices.unwrap_or(a.contexts);
    if slices == 0 || cfg.super_sets % slices != 0 {
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
        let bytes = std::fs::read(&f).with_context(|| format!("reading {}", f.display()))?;
        let accesses =
            trace::decode(&bytes).with_context(|| format!("decoding {}", f.display()))?;
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
        "sim smt: {} ({} threads) on {} core(s) x {} contexts; L1 {} KiB {}-way, L2 {} KiB {}-way, {} super-sets, {} bit(s), {:?} mapping; {} quanta of {} cycles",
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
        cfg.quantum_cycles
    )?;
    let rr = c.policies.get("round-robin");
    writeln!(
        out,
        "{:<12} {:>10} {:>7} {:>10} {:>10} {:>8} {:>7} {:>6} {:>6} {:>6}",
        "policy",
        "L2 ITKO",
        "vs RR",
        "L2 misses",
        "inter-thr",
        "rel.thr",
        "vs RR",
        "Jain",
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
            "{:<12} {:>10} {:>7} {:>10} {:>10} {:>8.4} {:>7} {:>6.3} {:>6} {:>5.1}%",
            name,
            r.itko,
            vs(r.itko as f64, rr.map(|b| b.itko as f64)),
            r.l2_misses,
            r.inter_thread_misses,
            r.relative_throughput,
            vs(r.relative_throughput, rr.map(|b| b.relative_throughput)),
            r.fairness_jain,
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
    if let Some(b) = &c.best_static {
        writeln!(
            out,
            "best static grouping: {:?} (of {} tried)",
            b.groups, b.tried
        )?;
    }
    writeln!(
        out,
        "rel.thr: sum over contexts of IPC together / IPC alone, mean over quanta (max {}); right: quanta whose co-runners are hot in different slices; poor: Fig. 12's poor picks among context changes",
        cfg.cores * cfg.contexts
    )?;
    Ok(())
}
