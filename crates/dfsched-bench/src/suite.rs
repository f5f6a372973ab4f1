//! The one contract every workload benchmark keeps (`bench df`, `chat`,
//! `cothreads`, `spin`, and `dfsched compare`), and the one shape of a
//! grid's report, so that the command line drives them all the same way:
//!
//! ```text
//!  cases (one, or a grid's cells) ──► Benchmark::run_cases(&self, cases, progress)
//!                                        one report per case; Progress after every run
//!  one case  ──► Benchmark::render(report)            or JSON: the report
//!  a grid    ──► GridOf { grid, machine, cells }      or JSON: the same struct
//!                Benchmark::render_grid(grid)
//! ```
//!
//! What a benchmark brings: its parameters, its case report (each keeps its
//! own JSON fields), its error (with which of its errors are the user's:
//! [`Benchmark::is_usage`]), and its renderers. The context a run needs
//! (the worker program, a private agent) lives in the value `self`, so
//! that `run_cases` has one signature for all. The command line's driver
//! (`dfsched-cli`'s `bench.rs`: progress, JSON or text, predictions) is
//! written once against this trait.

use crate::machine::Machine;
use crate::runner::Progress;
use serde::{Deserialize, Serialize};

/// A grid of cases, of any benchmark: JSON `{grid, machine, cells}`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GridOf<C> {
    /// Which grid (`paper`).
    pub grid: String,
    /// Where it ran.
    pub machine: Machine,
    /// One report per cell, in the order they ran.
    pub cells: Vec<C>,
}

/// A workload benchmark, as the command line drives it (see the module
/// doc).
pub trait Benchmark {
    /// One case's parameters.
    type Params;
    /// One case's report: a grid's cell.
    type Report: Serialize;
    /// Why it did not complete.
    type Error: std::error::Error + Send + Sync + 'static;

    /// What a failure is said under ("the DF benchmark failed").
    const FAILED: &'static str;

    /// Runs every case in order; `progress` after every run.
    fn run_cases(
        &self,
        cases: &[Self::Params],
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<Vec<Self::Report>, Self::Error>;

    /// Whether `e` is the user's (its parameters were refused; nothing
    /// ran): a usage error on the command line.
    fn is_usage(e: &Self::Error) -> bool;

    /// Where a report's runs ran.
    fn machine(r: &Self::Report) -> &Machine;

    /// One line naming a case (a grid's cell labels).
    fn label(r: &Self::Report) -> String;

    /// One case's report for people.
    fn render(r: &Self::Report) -> String;

    /// A grid's report for people.
    fn render_grid(g: &GridOf<Self::Report>) -> String;

    /// `cells` as the grid `grid`, on the first cell's machine; `None`
    /// without cells.
    fn grid(grid: &str, cells: Vec<Self::Report>) -> Option<GridOf<Self::Report>> {
        let machine = Self::machine(cells.first()?).clone();
        Some(GridOf {
            grid: grid.to_string(),
            machine,
            cells,
        })
    }
}
