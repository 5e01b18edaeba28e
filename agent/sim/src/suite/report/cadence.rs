//! The real programs under free hindsight at several re-placement intervals: what the cadence
//! of a policy alone allows, beside memtide's hit ratio.

use std::fmt::Write as _;

use super::{Report, fill, geomean, table_header};
use crate::{
    PolicyName,
    run::FastSize,
    suite::{CADENCES_MS, Choice, REAL_SMALL_FAST},
};

/// The section's prose, with the table filled in.
const CADENCE: &str = include_str!("cadence.md");

impl Report<'_> {
    pub(super) fn cadence(&self, o: &mut String) {
        if self.real.is_empty() {
            return;
        }
        let sizes = [
            (
                "real-small",
                "cadence-small",
                FastSize::Ratio(REAL_SMALL_FAST).to_string(),
            ),
            ("main", "cadence", self.base.fast.to_string()),
        ];
        let mut table = String::new();
        let every = CADENCES_MS
            .iter()
            .map(|ms| format!("hindsight every {ms} ms"));
        table_header(
            &mut table,
            ["fast tier".to_owned(), "memtide".to_owned()]
                .into_iter()
                .chain(every)
                .chain(["hindsight every batch".to_owned(), "bound".to_owned()]),
        );
        for (real_section, cadence_section, fast) in &sizes {
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
            for ms in CADENCES_MS {
                let _ = write!(
                    table,
                    " {:.3} |",
                    hit(cadence_section, &Choice::Cadence(ms).label())
                );
            }
            let _ = writeln!(
                table,
                " {:.3} | {:.3} |",
                hit(real_section, PolicyName::Hindsight.name()),
                hit(real_section, PolicyName::Oracle.name())
            );
        }
        let min_ms = memtide_core::policy::EpochConfig::default().min_ms;
        o.push_str(&fill(
            CADENCE,
            &[("min_ms", min_ms.to_string()), ("table", table)],
        ));
    }
}
