//! The table `TB_cr` of Squillante & Lazowska §VI-B: reload miss ratios
//! precomputed for a few footprint classes and a range of `N_cr`, so that a
//! scheduler can price a task's cache-reload transient with one lookup.
//!
//! ```text
//!              N_cr →  0     1     2    …   (intervening tasks, or
//!   class f=0 (≤ F0)  R     R     R         cache-block replacements
//!   class f=1 (≤ F1)  R     R     R         in steps of `step_blocks`)
//!   …
//! ```
//!
//! `N_cr` counts either intervening tasks (each row is eq. 5's `R(I)`), or
//! cache blocks replaced at the processor since the task left (each entry is
//! Thiebaut & Stone's model with one program of `N_cr` blocks; §VI-B prefers
//! this count because it does not assume the intervening tasks distinct and
//! fully loaded).
//!
//! Lookups lean towards overestimating the transient, as the paper's model
//! does: a footprint belongs to the smallest class at least as large, and a
//! replacement count between grid points rounds up. Counts beyond the table
//! use its last column, where `R` is close to its limit of 1.
//!
//! Invariants: classes are strictly increasing and positive; every row has
//! the same length; entries are in `[0, 1]` and rise along each row.

use super::reload::{check_geometry, reload_ratio_after_blocks, reload_ratios};
use super::AnalyticError;
use crate::cache::CacheGeometry;
use serde::{Deserialize, Serialize};

/// What `N_cr` counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum NcrIndex {
    /// Tasks that ran on the processor since the task left (eq. 5).
    InterveningTasks,
    /// Cache blocks replaced since the task left, tabulated every
    /// `step_blocks` blocks.
    Replacements {
        /// Grid spacing, in blocks; at least 1.
        step_blocks: u64,
    },
}

/// The precomputed table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TbCr {
    /// The cache the ratios are for.
    pub geometry: CacheGeometry,
    /// Upper bound of each footprint class, in blocks, increasing.
    pub classes: Vec<u64>,
    /// What the columns count.
    pub index: NcrIndex,
    /// `ratios[f][n]`: reload miss ratio of class `f` at column `n`.
    pub ratios: Vec<Vec<f64>>,
}

/// The largest table built: rows × columns.
pub const MAX_CELLS: u64 = 1 << 22;

impl TbCr {
    /// Builds the table for footprint classes `classes` (upper bounds in
    /// blocks, strictly increasing) and columns `0..=columns-1`, i.e. `N_cr`
    /// up to `(columns − 1)` intervening tasks or `(columns − 1)·step`
    /// replacements.
    pub fn build(
        geometry: CacheGeometry,
        classes: &[u64],
        index: NcrIndex,
        columns: u32,
    ) -> Result<TbCr, AnalyticError> {
        check_geometry(geometry)?;
        if classes.is_empty() || classes[0] == 0 || classes.windows(2).any(|w| w[0] >= w[1]) {
            return Err(AnalyticError::BadClasses);
        }
        if columns == 0 {
            return Err(AnalyticError::OutOfRange {
                name: "columns",
                value: 0.0,
                why: "the table needs at least one column",
            });
        }
        let cells = classes.len() as u64 * u64::from(columns);
        if cells > MAX_CELLS {
            return Err(AnalyticError::TooLarge {
                what: "TB_cr cells",
                size: cells,
                limit: MAX_CELLS,
            });
        }
        let ratios = classes
            .iter()
            .map(|&f| match index {
                NcrIndex::InterveningTasks => {
                    reload_ratios(f, geometry.sets, geometry.ways, columns - 1)
                }
                NcrIndex::Replacements { step_blocks } => {
                    if step_blocks == 0 {
                        return Err(AnalyticError::OutOfRange {
                            name: "step_blocks",
                            value: 0.0,
                            why: "the replacement grid needs a step of at least one block",
                        });
                    }
                    (0..u64::from(columns))
                        .map(|n| reload_ratio_after_blocks(f, n * step_blocks, geometry))
                        .collect()
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(TbCr {
            geometry,
            classes: classes.to_vec(),
            index,
            ratios,
        })
    }

    /// The class of a footprint: the smallest class at least as large, or
    /// the largest class for footprints beyond every class.
    pub fn class_of(&self, footprint_blocks: u64) -> usize {
        self.classes
            .partition_point(|&c| c < footprint_blocks)
            .min(self.classes.len() - 1)
    }

    /// The column of a count: intervening tasks map one to one; a
    /// replacement count rounds up to the grid. Clamped to the last column.
    pub fn column_of(&self, n_cr: u64) -> usize {
        let col = match self.index {
            NcrIndex::InterveningTasks => n_cr,
            NcrIndex::Replacements { step_blocks } => n_cr.div_ceil(step_blocks),
        };
        col.min(self.ratios[0].len() as u64 - 1) as usize
    }

    /// `TB_cr(f, N_cr)` as a reload miss ratio.
    pub fn ratio(&self, class: usize, n_cr: u64) -> f64 {
        self.ratios[class.min(self.classes.len() - 1)][self.column_of(n_cr)]
    }

    /// `TB_cr(f, N_cr)` as an expected reload transient, for a full reload
    /// time `reload_time` (the `C·R` added to a task's expected service in
    /// delay-cost scheduling).
    pub fn transient(&self, class: usize, n_cr: u64, reload_time: f64) -> f64 {
        reload_time * self.ratio(class, n_cr)
    }

    /// §VI-B's non-time-dependent priority `BP + (1 − TB_cr(f, N_cr))·RP`:
    /// a base priority raised by up to `range` for a warm cache.
    pub fn affinity_priority(&self, base: f64, class: usize, n_cr: u64, range: f64) -> f64 {
        base + (1.0 - self.ratio(class, n_cr)) * range
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GEO: CacheGeometry = CacheGeometry { sets: 512, ways: 4 };

    #[test]
    fn rows_are_eq_5_for_intervening_tasks() {
        let t = TbCr::build(GEO, &[100, 400, 1600], NcrIndex::InterveningTasks, 6).unwrap();
        assert_eq!(t.ratios[1], reload_ratios(400, 512, 4, 5).unwrap());
        // Bigger footprints lose more to the same intervening tasks.
        assert!(t.ratio(2, 2) > t.ratio(0, 2));
        assert!(t.ratios.iter().all(|r| r.windows(2).all(|w| w[1] >= w[0])));
    }

    #[test]
    fn lookups_round_towards_the_larger_transient() {
        let t = TbCr::build(
            GEO,
            &[100, 400],
            NcrIndex::Replacements { step_blocks: 50 },
            10,
        )
        .unwrap();
        assert_eq!(t.class_of(1), 0);
        assert_eq!(t.class_of(100), 0);
        assert_eq!(t.class_of(101), 1);
        assert_eq!(t.class_of(10_000), 1, "beyond the last class: the last");
        assert_eq!(t.column_of(0), 0);
        assert_eq!(t.column_of(1), 1);
        assert_eq!(t.column_of(50), 1);
        assert_eq!(t.column_of(51), 2);
        assert_eq!(t.column_of(1_000_000), 9);
        assert_eq!(t.ratio(0, 120), t.ratios[0][3]);
        assert_eq!(t.transient(1, 0, 2.0), 2.0 * t.ratios[1][0]);
    }

    #[test]
    fn affinity_priority_is_highest_for_a_warm_cache() {
        let t = TbCr::build(GEO, &[200], NcrIndex::InterveningTasks, 8).unwrap();
        let warm = t.affinity_priority(10.0, 0, 0, 5.0);
        let cold = t.affinity_priority(10.0, 0, 7, 5.0);
        assert!(warm > cold && warm <= 15.0 && cold >= 10.0);
    }

    #[test]
    fn bad_tables_are_refused() {
        let it = NcrIndex::InterveningTasks;
        assert_eq!(TbCr::build(GEO, &[], it, 4), Err(AnalyticError::BadClasses));
        assert_eq!(
            TbCr::build(GEO, &[5, 5], it, 4),
            Err(AnalyticError::BadClasses)
        );
        assert_eq!(
            TbCr::build(GEO, &[0, 5], it, 4),
            Err(AnalyticError::BadClasses)
        );
        assert!(TbCr::build(GEO, &[5], it, 0).is_err());
        let zero_step = NcrIndex::Replacements { step_blocks: 0 };
        assert!(TbCr::build(GEO, &[5], zero_step, 3).is_err());
        assert!(matches!(
            TbCr::build(GEO, &[5], it, u32::MAX),
            Err(AnalyticError::TooLarge { .. })
        ));
    }

    #[test]
    fn serializes_for_the_cli() {
        let t = TbCr::build(GEO, &[100], NcrIndex::InterveningTasks, 2).unwrap();
        let json = serde_json::to_string(&t).unwrap();
        assert!(json.contains("\"kind\":\"intervening_tasks\""), "{json}");
    }
}
