//! What the simulated threads do: synthetic kernels with controlled hot
//! super-sets, phases and intensity, and recorded traces.
//!
//! A kernel touches a *working set* of L2 lines laid out so that, under
//! the identity mapping, every line falls in the super-sets of its *hot
//! region*: a line of region `[a, b)` sits at
//! `tile · way_bytes + a · super_set_bytes + offset`, `offset <
//! (b − a) · super_set_bytes`, where a *way* of the L2 (`sets · line`
//! bytes) is one pass over every set. Each access picks a line of the
//! working set uniformly at random (the kernel's own seeded generator, so a
//! thread's accesses do not depend on how it is scheduled) and carries
//! `instrs_per_access` instructions.
//!
//! A *phase* is a stretch of `phase_accesses` of the thread's own accesses
//! (its progress, not wall time: a descheduled thread stays in its phase);
//! phase `p` uses region `regions[p mod len]`. A fixed kernel has one
//! region; a phased kernel moves its hot region every phase.
//!
//! Workloads (all seeded):
//! - [`complementary`]: `n` threads, each hot in one of `k` equal slices of
//!   the cache, `n/k` threads per slice in a seeded order. Any group of `k`
//!   threads in different slices is a right pairing.
//! - [`uniform`]: `n` threads with the same working-set size spread over
//!   the whole cache: nothing to gain from pairing.
//! - [`phased`]: like complementary, but in every phase the slices are
//!   dealt anew (balanced, seeded), so the right pairing changes every
//!   phase and no static pairing is right for long.
//!
//! Invariant: a stream never ends (a trace loops), so a run's length is
//! set by time alone.

use crate::rng::SimRng;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// One memory access of a thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Access {
    /// Virtual byte address.
    pub vaddr: u64,
    /// Instructions executed with it (itself included), ≥ 1.
    pub instrs: u32,
}

/// Where in the L2 the kernels lay their lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layout {
    /// Bytes of one way (`sets · line_bytes`).
    pub way_bytes: u64,
    /// Super-sets.
    pub super_sets: u32,
    /// L2 line bytes.
    pub line_bytes: u32,
}

impl Layout {
    fn super_set_bytes(&self) -> u64 {
        self.way_bytes / u64::from(self.super_sets)
    }

    /// L2 lines one super-set holds per way.
    pub fn lines_per_super_set_way(&self) -> u64 {
        self.super_set_bytes() / u64::from(self.line_bytes)
    }
}

/// A hot region: super-sets `[lo, hi)`, with a label telling which slice
/// it is (for judging pairings; `None` for regions that span the cache).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Region {
    /// First super-set.
    pub lo: u32,
    /// One past the last.
    pub hi: u32,
    /// The slice, if the region is one.
    pub label: Option<u32>,
}

/// A synthetic kernel's parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelParams {
    /// Hot region of each phase, in turn.
    pub regions: Vec<Region>,
    /// Accesses per phase.
    pub phase_accesses: u64,
    /// Working-set lines (L2 lines).
    pub ws_lines: u64,
    /// Instructions per access.
    pub instrs_per_access: u32,
}

/// A synthetic kernel's state.
#[derive(Clone, Debug)]
pub struct Kernel {
    /// Its parameters (shared by clones).
    params: Arc<KernelParams>,
    /// Its layout.
    layout: Layout,
    /// Accesses made.
    done: u64,
    /// Its own generator: SplitMix64 state, seeded from the run's seed and
    /// the thread (ChaCha is needlessly slow for drawing line numbers in a
    /// loop that debug-build tests run millions of times).
    rng: u64,
}

/// A recorded trace, looped.
#[derive(Clone, Debug)]
pub struct TraceStream {
    /// The accesses (shared by clones).
    accesses: Arc<[Access]>,
    /// The next one.
    pos: usize,
}

impl TraceStream {
    /// A stream over `accesses` (at least one).
    pub fn new(accesses: Arc<[Access]>) -> Option<Self> {
        (!accesses.is_empty()).then_some(TraceStream { accesses, pos: 0 })
    }
}

/// A thread's stream of accesses.
#[derive(Clone, Debug)]
pub enum Stream {
    /// A synthetic kernel.
    Kernel(Kernel),
    /// A recorded trace.
    Trace(TraceStream),
}

impl Stream {
    /// The next access.
    #[inline]
    pub fn next_access(&mut self) -> Access {
        match self {
            Stream::Kernel(k) => k.next_access(),
            Stream::Trace(t) => {
                let a = t.accesses[t.pos];
                t.pos = (t.pos + 1) % t.accesses.len();
                a
            }
        }
    }

    /// The slice label of the current hot region, if the stream has one.
    pub fn label(&self) -> Option<u32> {
        match self {
            Stream::Kernel(k) => k.region().label,
            Stream::Trace(_) => None,
        }
    }
}

impl Kernel {
    /// A kernel with its own generator `(seed, stream)`.
    pub fn new(params: KernelParams, layout: Layout, seed: u64, stream: u64) -> Self {
        Kernel {
            params: Arc::new(params),
            layout,
            done: 0,
            rng: SimRng::with_stream(seed, stream).next_u64(),
        }
    }

    fn region(&self) -> Region {
        let p = &self.params;
        let phase = self.done / p.phase_accesses.max(1);
        p.regions[(phase % p.regions.len() as u64) as usize]
    }

    #[inline]
    fn next_access(&mut self) -> Access {
        let r = self.region();
        let l = self.layout;
        let ss = l.super_set_bytes();
        let span = u64::from(r.hi - r.lo) * ss;
        // SplitMix64, then a multiply-shift onto 0..ws (bias < ws / 2^64).
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        let line = ((u128::from(z) * u128::from(self.params.ws_lines.max(1))) >> 64) as u64;
        let byte = line * u64::from(l.line_bytes);
        // Lines fill the region's span of one way, then the next way.
        let (tile, off) = (byte / span, byte % span);
        // Each phase's region gets its own addresses (a new data set), far
        // above the others: phase p's tiles start at p · 2^32.
        let phase = self.done / self.params.phase_accesses.max(1);
        let base = (phase % self.params.regions.len() as u64) << 32;
        self.done += 1;
        Access {
            vaddr: base + tile * l.way_bytes + u64::from(r.lo) * ss + off,
            instrs: self.params.instrs_per_access,
        }
    }
}

/// A thread of a workload.
#[derive(Clone, Debug)]
pub struct ThreadSpec {
    /// Its name in reports.
    pub name: String,
    /// Its accesses.
    pub stream: Stream,
}

/// Threads to co-schedule.
#[derive(Clone, Debug)]
pub struct Workload {
    /// Its name in reports.
    pub name: String,
    /// The threads.
    pub threads: Vec<ThreadSpec>,
}

/// The shape of synthetic threads, shared by the generators.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelShape {
    /// Where lines go.
    pub layout: Layout,
    /// L2 ways (a region's capacity is its super-sets × lines × ways).
    pub l2_ways: u32,
    /// Working set as a fraction of one slice's capacity (`1/k` of the
    /// cache): below 1 a thread fits its slice alone, and two threads in
    /// one slice overflow it when above 1/2.
    pub ws_fraction_of_slice: f64,
    /// Instructions per access.
    pub instrs_per_access: u32,
    /// Accesses per phase (phased kernels).
    pub phase_accesses: u64,
}

impl KernelShape {
    fn slice(&self, k: u32, i: u32) -> Region {
        let per = self.layout.super_sets / k;
        Region {
            lo: i * per,
            hi: (i + 1) * per,
            label: Some(i),
        }
    }

    fn ws_lines(&self, k: u32) -> u64 {
        let slice_lines = u64::from(self.layout.super_sets / k)
            * self.layout.lines_per_super_set_way()
            * u64::from(self.l2_ways);
        ((slice_lines as f64) * self.ws_fraction_of_slice)
            .round()
            .max(1.0) as u64
    }

    fn kernel(&self, regions: Vec<Region>, ws_lines: u64, seed: u64, thread: u64) -> Stream {
        Stream::Kernel(Kernel::new(
            KernelParams {
                regions,
                phase_accesses: self.phase_accesses,
                ws_lines,
                instrs_per_access: self.instrs_per_access,
            },
            self.layout,
            seed,
            thread + 1,
        ))
    }
}

/// `n` labels, `n/k` of each (the rest spread from 0), in a seeded order.
fn balanced_labels(n: u32, k: u32, rng: &mut SimRng) -> Vec<u32> {
    let mut labels: Vec<u32> = (0..n).map(|i| i % k).collect();
    for i in (1..labels.len()).rev() {
        labels.swap(i, rng.below(i as u64 + 1) as usize);
    }
    labels
}

/// See the module doc. `k` ≥ 1 slices.
pub fn complementary(shape: &KernelShape, n: u32, k: u32, seed: u64) -> Workload {
    let mut rng = SimRng::with_stream(seed, 0);
    let labels = balanced_labels(n, k, &mut rng);
    let ws = shape.ws_lines(k);
    Workload {
        name: "complementary".into(),
        threads: labels
            .iter()
            .enumerate()
            .map(|(t, &l)| ThreadSpec {
                name: format!("t{t}-slice{l}"),
                stream: shape.kernel(vec![shape.slice(k, l)], ws, seed, t as u64),
            })
            .collect(),
    }
}

/// See the module doc: the working set of a complementary thread, spread
/// over every super-set.
pub fn uniform(shape: &KernelShape, n: u32, k: u32, seed: u64) -> Workload {
    let ws = shape.ws_lines(k);
    let all = Region {
        lo: 0,
        hi: shape.layout.super_sets,
        label: None,
    };
    Workload {
        name: "uniform".into(),
        threads: (0..n)
            .map(|t| ThreadSpec {
                name: format!("t{t}-uniform"),
                stream: shape.kernel(vec![all], ws, seed, u64::from(t)),
            })
            .collect(),
    }
}

/// See the module doc: `phases` phases (then the cycle repeats).
pub fn phased(shape: &KernelShape, n: u32, k: u32, phases: u32, seed: u64) -> Workload {
    let mut rng = SimRng::with_stream(seed, 0);
    let deals: Vec<Vec<u32>> = (0..phases.max(1))
        .map(|_| balanced_labels(n, k, &mut rng))
        .collect();
    let ws = shape.ws_lines(k);
    Workload {
        name: "phased".into(),
        threads: (0..n as usize)
            .map(|t| ThreadSpec {
                name: format!("t{t}-phased"),
                stream: shape.kernel(
                    deals.iter().map(|d| shape.slice(k, d[t])).collect(),
                    ws,
                    seed,
                    t as u64,
                ),
            })
            .collect(),
    }
}

/// A mix from a spec: comma-separated kinds, one thread each —
/// `sliceI/K` (hot in slice I of K), `uniform`, `light` (an eighth of a
/// half-cache working set spread over the cache), `phased` (a fresh
/// random half each phase).
pub fn mix(shape: &KernelShape, spec: &str, seed: u64) -> Result<Workload, String> {
    let mut threads = Vec::new();
    let mut rng = SimRng::with_stream(seed, 1);
    let all = Region {
        lo: 0,
        hi: shape.layout.super_sets,
        label: None,
    };
    for (t, tok) in spec.split(',').map(str::trim).enumerate() {
        let t64 = t as u64;
        let stream = if let Some(rest) = tok.strip_prefix("slice") {
            let (i, k) = rest
                .split_once('/')
                .and_then(|(i, k)| Some((i.parse::<u32>().ok()?, k.parse::<u32>().ok()?)))
                .filter(|&(i, k)| {
                    k >= 1 && i < k && shape.layout.super_sets.checked_rem(k) == Some(0)
                })
                .ok_or_else(|| {
                    format!("bad slice {tok:?}: want sliceI/K, I < K, K divides the super-sets")
                })?;
            shape.kernel(vec![shape.slice(k, i)], shape.ws_lines(k), seed, t64)
        } else {
            match tok {
                "uniform" => shape.kernel(vec![all], shape.ws_lines(2), seed, t64),
                "light" => shape.kernel(vec![all], (shape.ws_lines(2) / 8).max(1), seed, t64),
                "phased" => {
                    let regions = (0..16)
                        .map(|_| shape.slice(2, rng.below(2) as u32))
                        .collect();
                    shape.kernel(regions, shape.ws_lines(2), seed, t64)
                }
                other => {
                    return Err(format!(
                        "unknown thread kind {other:?} (sliceI/K, uniform, light, phased)"
                    ))
                }
            }
        };
        threads.push(ThreadSpec {
            name: format!("t{t}-{tok}"),
            stream,
        });
    }
    if threads.is_empty() {
        return Err("an empty mix".into());
    }
    Ok(Workload {
        name: format!("mix {spec}"),
        threads,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> KernelShape {
        KernelShape {
            layout: Layout {
                way_bytes: 64 * 1024,
                super_sets: 32,
                line_bytes: 128,
            },
            l2_ways: 8,
            ws_fraction_of_slice: 0.75,
            instrs_per_access: 4,
            phase_accesses: 100,
        }
    }

    fn super_set(vaddr: u64) -> u64 {
        (vaddr % (64 * 1024)) / 2048
    }

    #[test]
    fn a_slice_kernel_touches_only_its_slice() {
        let w = complementary(&shape(), 4, 2, 3);
        for th in &w.threads {
            let mut s = th.stream.clone();
            let label = s.label().unwrap();
            for _ in 0..2000 {
                let ss = super_set(s.next_access().vaddr);
                assert_eq!(ss / 16, u64::from(label), "{}", th.name);
            }
        }
        let labels: Vec<u32> = w
            .threads
            .iter()
            .map(|t| t.stream.label().unwrap())
            .collect();
        assert_eq!(labels.iter().filter(|&&l| l == 0).count(), 2, "balanced");
    }

    #[test]
    fn working_set_is_the_asked_fraction_of_a_slice() {
        // Half the cache = 16 super-sets × 16 lines × 8 ways = 2048 lines.
        assert_eq!(shape().ws_lines(2), 1536);
        let w = uniform(&shape(), 1, 2, 1);
        let mut s = w.threads[0].stream.clone();
        let lines: std::collections::BTreeSet<u64> =
            (0..50_000).map(|_| s.next_access().vaddr / 128).collect();
        assert_eq!(lines.len(), 1536);
    }

    #[test]
    fn phased_threads_change_slice_every_phase_and_stay_balanced() {
        let w = phased(&shape(), 4, 2, 8, 5);
        let mut streams: Vec<Stream> = w.threads.iter().map(|t| t.stream.clone()).collect();
        let mut deals = Vec::new();
        for _ in 0..8 {
            let labels: Vec<u32> = streams.iter().map(|s| s.label().unwrap()).collect();
            assert_eq!(labels.iter().sum::<u32>(), 2, "two of four in slice 1");
            deals.push(labels);
            for s in &mut streams {
                for _ in 0..100 {
                    s.next_access();
                }
            }
        }
        deals.dedup();
        assert!(deals.len() > 2, "the deal changes: {deals:?}");
    }

    #[test]
    fn streams_are_their_own_seeded_sequence() {
        let a = complementary(&shape(), 2, 2, 9);
        let b = complementary(&shape(), 2, 2, 9);
        let take = |w: &Workload| {
            let mut s = w.threads[1].stream.clone();
            (0..100).map(|_| s.next_access().vaddr).collect::<Vec<_>>()
        };
        assert_eq!(take(&a), take(&b));
        assert!(mix(&shape(), "slice0/2,uniform,light,phased,slice3/4", 1).is_ok());
        assert!(mix(&shape(), "slice2/2", 1).is_err());
        assert!(mix(&shape(), "bogus", 1).is_err());
    }
}
