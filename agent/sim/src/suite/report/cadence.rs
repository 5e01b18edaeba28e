//! The real programs under free hindsight at several re-placement intervals: what the cadence
//! of a policy alone allows, beside memtide's hit ratio.

use std::fmt::Write as _;

use super::{Report, fill, geomean, table_header};
use crate::{
    PolicyName,
    suite::{CADENCE_SECTIONS, CADENCES_MS, Choice, REAL_SECTIONS},
};

/// The section's prose, with the table filled in.
const CADENCE: &str = include_str!("cadence.md");

/// Where one column's runs are: free hindsight in the cadence sections, or, at memtide's
/// shortest epoch, `hindsight-epoch` in the real-program sections (the same policy, run once).
enum Column {
    Cadence(u64),
    ShortestEpoch,
}

impl Report<'_> {
    pub(super) fn cadence(&self, o: &mut String) {
        if self.real.is_empty() {
            return;
        }
        let min_ms = memtide_core::policy::EpochConfig::default().min_ms;
        let mut columns: Vec<(u64, Column)> = CADENCES_MS
            .iter()
            .map(|&ms| (ms, Column::Cadence(ms)))
            .chain([(min_ms, Column::ShortestEpoch)])
            .collect();
        columns.sort_by_key(|&(ms, _)| std::cmp::Reverse(ms));
        let mut table = String::new();
        let every = columns
            .iter()
            .map(|(ms, _)| format!("hindsight every {ms} ms"));
        table_header(
            &mut table,
            ["fast tier".to_owned(), "memtide".to_owned()]
                .into_iter()
                .chain(every)
                .chain(["hindsight every batch".to_owned(), "bound".to_owned()]),
        );
        let sizes = REAL_SECTIONS
            .with_sizes(self.base.fast)
            .into_iter()
            .zip(CADENCE_SECTIONS.with_sizes(self.base.fast));
        for ((real_section, fast), (cadence_section, _)) in sizes {
            let hit = |section: &str, choice: &str| {
                geomean(
                    self.real
                        .iter()
                        .filter_map(|t| self.get(section, t, choice))
                        .map(|r| r.fast_hit_ratio),
                )
            };
            let _ = write!(
                table,
                "| {fast} | {:.3} |",
                hit(real_section, PolicyName::Memtide.name())
            );
            for (_, column) in &columns {
                let ratio = match column {
                    Column::Cadence(ms) => hit(cadence_section, &Choice::Cadence(*ms).label()),
                    Column::ShortestEpoch => hit(real_section, PolicyName::HindsightEpoch.name()),
                };
                let _ = write!(table, " {ratio:.3} |");
            }
            let _ = writeln!(
                table,
                " {:.3} | {:.3} |",
                hit(real_section, PolicyName::Hindsight.name()),
                hit(real_section, PolicyName::Oracle.name())
            );
        }
        o.push_str(&fill(
            CADENCE,
            &[("min_ms", min_ms.to_string()), ("table", table)],
        ));
    }
}
