//! Parameter grids: Table 3 of Pinter & Zalmanovici (§5.2).
//!
//! The paper varies the thread count {8, 32, 128} and the DF size {1000,
//! 8000, 20000} eight-byte words with 4 DFs and 10⁷ iterations per thread.
//! Run as is, that would take hours here, so each cell's iterations are
//! scaled to a fixed budget of accesses per run ([`PAPER_ACCESS_BUDGET`],
//! split evenly over the threads), and each mode runs [`PAPER_REPEAT`] times:
//! 9 cells × 4 modes × 5 runs fit in about 15 minutes on the project's
//! 2-vCPU machine. Cells therefore compare modes with each other, not cells
//! with cells.

use crate::params::Params;

/// Threads per cell, as in Table 3.
pub const PAPER_THREADS: [usize; 3] = [8, 32, 128];
/// DF sizes in eight-byte words, as in Table 3.
pub const PAPER_DF_WORDS: [usize; 3] = [1000, 8000, 20000];
/// DFs per cell, as in Table 3.
pub const PAPER_DFS: usize = 4;
/// Runs per mode and cell unless `--repeat` says otherwise.
pub const PAPER_REPEAT: usize = 5;
/// Accesses per run (all threads together) unless `--iterations` says
/// otherwise: 2.6× the headline case's. With 1.2·10⁹ the whole grid took
/// 8.5 minutes on the 2-vCPU guest while other processes held 60 % of it;
/// alone, bouncing modes run longer, hence about 15 minutes.
pub const PAPER_ACCESS_BUDGET: u64 = 1_600_000_000;

/// Which grid to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grid {
    /// Table 3 of the paper.
    Paper,
}

impl Grid {
    /// The grid's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Grid::Paper => "paper",
        }
    }

    /// The grid's cells: `base` supplies what the grid does not fix (write
    /// ratio, switching, modes, seed); `iterations` and `repeat` override the
    /// grid's scaling when given.
    pub fn cells(
        self,
        base: &Params,
        iterations: Option<u64>,
        repeat: Option<usize>,
    ) -> Vec<Params> {
        let mut cells = Vec::new();
        for &threads in &PAPER_THREADS {
            for &words in &PAPER_DF_WORDS {
                let df_bytes = words * 8;
                let mut cell = Params {
                    threads,
                    dfs: PAPER_DFS,
                    df_bytes,
                    repeat: repeat.unwrap_or(PAPER_REPEAT),
                    ..base.clone()
                };
                let per_pass = (threads * cell.accesses_per_pass()) as u64;
                cell.iterations = iterations.unwrap_or((PAPER_ACCESS_BUDGET / per_pass).max(1));
                cells.push(cell);
            }
        }
        cells
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paper_grid_is_table_3_with_a_constant_access_budget() {
        let cells = Grid::Paper.cells(&Params::default(), None, None);
        assert_eq!(cells.len(), 9);
        for c in &cells {
            c.validate().unwrap();
            assert_eq!(c.dfs, 4);
            assert_eq!(c.repeat, PAPER_REPEAT);
            let accesses = (c.threads * c.accesses_per_pass()) as u64 * c.iterations;
            let off = accesses.abs_diff(PAPER_ACCESS_BUDGET) as f64 / PAPER_ACCESS_BUDGET as f64;
            assert!(off < 0.01, "{c:?} does {accesses} accesses");
        }
        let shape: Vec<(usize, usize)> =
            cells.iter().map(|c| (c.threads, c.df_bytes / 8)).collect();
        assert_eq!(shape[0], (8, 1000));
        assert_eq!(shape[5], (32, 20000));
        assert_eq!(shape[8], (128, 20000));
    }

    #[test]
    fn explicit_iterations_and_repeat_win_and_base_fields_carry_over() {
        let base = Params {
            write_ratio: 0.5,
            seed: 9,
            ..Params::default()
        };
        let cells = Grid::Paper.cells(&base, Some(10), Some(1));
        assert!(cells.iter().all(|c| c.iterations == 10 && c.repeat == 1));
        assert!(cells.iter().all(|c| c.write_ratio == 0.5 && c.seed == 9));
    }
}
