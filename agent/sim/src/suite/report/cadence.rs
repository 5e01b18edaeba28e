//! The real programs under free hindsight at several re-placement intervals, learning from
//! every access or from the samples alone: what the cadence of a policy and its evidence alone
//! allow, beside memtide's hit ratio.

use std::fmt::Write as _;

use super::{Report, fill, geomean, table_header};
use crate::{
    PolicyName,
    suite::{CADENCE_SECTIONS, Choice, REAL_SECTIONS, cadence_columns_ms},
};

/// The section's prose, with the table filled in.
const CADENCE: &str = include_str!("cadence.md");

/// Where one cell's runs are, in the cadence section or (free hindsight from every access at
/// memtide's shortest epoch and every batch, run once for the real-program tables) in the
/// real-program section.
#[derive(Clone)]
enum Runs {
    Cadence(String),
    Real(PolicyName),
}

/// A row's runs: what free hindsight learns from, and where its run is at each column's
/// interval (`None` every batch).
struct Row {
    learns: &'static str,
    at: fn(Option<u64>, u64) -> Runs,
}

const ROWS: [Row; 2] = [
    Row {
        learns: "every access",
        at: |ms, min_ms| match ms {
            None => Runs::Real(PolicyName::Hindsight),
            Some(ms) if ms == min_ms => Runs::Real(PolicyName::HindsightEpoch),
            Some(ms) => Runs::Cadence(Choice::Cadence(ms).label()),
        },
    },
    Row {
        learns: "memtide's samples",
        at: |ms, _| Runs::Cadence(Choice::SampledCadence(ms).label()),
    },
];

impl Report<'_> {
    pub(super) fn cadence(&self, o: &mut String) {
        if self.real.is_empty() {
            return;
        }
        let min_ms = memtide_core::policy::EpochConfig::default().min_ms;
        let columns: Vec<Option<u64>> = cadence_columns_ms()
            .into_iter()
            .map(Some)
            .chain([None])
            .collect();
        let mut table = String::new();
        let every = columns.iter().map(|ms| match ms {
            Some(ms) => format!("every {ms} ms"),
            None => "every batch".to_owned(),
        });
        table_header(
            &mut table,
            ["fast tier", "free hindsight learns from", "memtide"]
                .map(str::to_owned)
                .into_iter()
                .chain(every)
                .chain(["bound".to_owned()]),
        );
        let sizes = REAL_SECTIONS
            .with_sizes(self.base.fast)
            .into_iter()
            .zip(CADENCE_SECTIONS.with_sizes(self.base.fast));
        for ((real_section, fast), (cadence_section, _)) in sizes {
            let hit = |runs: &Runs| {
                let (section, choice) = match runs {
                    Runs::Cadence(label) => (cadence_section, label.as_str()),
                    Runs::Real(p) => (real_section, p.name()),
                };
                geomean(
                    self.real
                        .iter()
                        .filter_map(|t| self.get(section, t, choice))
                        .map(|r| r.fast_hit_ratio),
                )
            };
            for row in &ROWS {
                let _ = write!(
                    table,
                    "| {fast} | {} | {:.3} |",
                    row.learns,
                    hit(&Runs::Real(PolicyName::Memtide))
                );
                for &ms in &columns {
                    let _ = write!(table, " {:.3} |", hit(&(row.at)(ms, min_ms)));
                }
                let _ = writeln!(table, " {:.3} |", hit(&Runs::Real(PolicyName::Oracle)));
            }
        }
        o.push_str(&fill(
            CADENCE,
            &[
                ("min_ms", min_ms.to_string()),
                ("sample_rate", self.base.sample_rate.to_string()),
                ("table", table),
            ],
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::{
        super::{fake_run, render_section},
        Choice, PolicyName, cadence_columns_ms,
    };
    use crate::suite::{CADENCES_MS, Results};

    /// Each cell reads its own runs: every run of one real trace, `a.mt`, has a hit ratio of
    /// its own, and the table must show each where its row and column say.
    #[test]
    fn each_cell_reads_the_run_of_its_row_and_interval() {
        let mut results = Results::new();
        let mut put = |section: &'static str, label: String, hit: f64| {
            let run = fake_run(PolicyName::Memtide, "a.mt", 1.0, hit, 0);
            results.insert((section, "a.mt".to_owned(), label), run);
        };
        for (real, cadence, base) in [
            ("real-small", "cadence-small", 0.1),
            ("main", "cadence", 0.5),
        ] {
            put(real, PolicyName::Memtide.name().into(), base);
            put(real, PolicyName::Oracle.name().into(), 1.0);
            put(real, PolicyName::Hindsight.name().into(), base + 0.010);
            put(real, PolicyName::HindsightEpoch.name().into(), base + 0.011);
            for (i, ms) in (0..).zip(CADENCES_MS) {
                put(
                    cadence,
                    Choice::Cadence(ms).label(),
                    base + 0.020 + 0.001 * f64::from(i),
                );
            }
            for (i, ms) in (0..).zip(cadence_columns_ms()) {
                let label = Choice::SampledCadence(Some(ms)).label();
                put(cadence, label, base + 0.030 + 0.001 * f64::from(i));
            }
            put(cadence, Choice::SampledCadence(None).label(), base + 0.039);
        }
        let section = render_section(&results, &["a.mt"], |r, o| r.cadence(o));
        let rows: Vec<&str> = section.lines().filter(|l| l.starts_with("| ")).collect();
        assert_eq!(
            rows[0],
            "| fast tier | free hindsight learns from | memtide | every 20 ms | every 10 ms | \
             every 5 ms | every 2 ms | every batch | bound |"
        );
        assert_eq!(
            &rows[1..],
            [
                "| 10 % | every access | 0.100 | 0.120 | 0.111 | 0.121 | 0.122 | 0.110 | 1.000 |",
                "| 10 % | memtide's samples | 0.100 | 0.130 | 0.131 | 0.132 | 0.133 | 0.139 | 1.000 |",
                "| 25 % | every access | 0.500 | 0.520 | 0.511 | 0.521 | 0.522 | 0.510 | 1.000 |",
                "| 25 % | memtide's samples | 0.500 | 0.530 | 0.531 | 0.532 | 0.533 | 0.539 | 1.000 |",
            ]
        );
    }
}
