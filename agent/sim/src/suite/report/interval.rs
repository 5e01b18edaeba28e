//! memtide counting in [`SHORT_INTERVAL_MS`] intervals beside the default: what a plan reading
//! a fresh interval at every shortest epoch gives on the real programs, and the two checks of
//! the main matrix it moves.

use std::fmt::Write as _;

use super::{
    Report,
    checks::{SPARSE_SHARE_LIMIT, mean_gap, moved_share},
    fill, geomean, table_header, verdict,
};
use crate::{
    PolicyName,
    policy::EngineVariant,
    run::SimResult,
    suite::{
        Choice, EPOCH_DRAWS, INTERVAL_EPOCH_DRAWS, INTERVAL_SECTIONS, REAL_SECTIONS,
        SHORT_INTERVAL_MS, TwoSizes,
    },
};

/// The section's prose, with the table filled in.
const INTERVAL: &str = include_str!("interval.md");

/// Where one counting interval's runs are.
struct Setting {
    /// memtide on the real programs, at both fast-tier sizes.
    real: TwoSizes,
    /// The fixed-epoch sweep of `shrinking` and memtide's adaptive run of it, per draw of the
    /// samples: (fixed-epoch section, adaptive section).
    epoch_draws: &'static [(&'static str, &'static str)],
    /// The granularity runs of `sparse-superpage` (`ryoo`).
    granularity: &'static str,
    /// The choice label of an engine variant in these sections.
    label: fn(EngineVariant) -> String,
}

const DEFAULT: Setting = Setting {
    real: REAL_SECTIONS,
    epoch_draws: &EPOCH_DRAWS,
    granularity: "granularity",
    label: EngineVariant::label,
};

const SHORT: Setting = Setting {
    real: INTERVAL_SECTIONS,
    epoch_draws: &INTERVAL_EPOCH_DRAWS,
    granularity: "interval-granularity",
    label: short_label,
};

fn short_label(variant: EngineVariant) -> String {
    Choice::Interval(SHORT_INTERVAL_MS, variant).label()
}

impl Report<'_> {
    pub(super) fn interval(&self, o: &mut String) {
        if self.real.is_empty() {
            return;
        }
        let mut table = String::new();
        let sizes = REAL_SECTIONS
            .with_sizes(self.base.fast)
            .map(|(_, fast)| fast);
        let columns = [
            format!("hit / bound, fast {}", sizes[0]),
            format!("hit / bound, fast {}", sizes[1]),
            format!("relative time, fast {}", sizes[0]),
            format!("relative time, fast {}", sizes[1]),
            "`shrinking`: adaptive over the best fixed epoch (geometric mean over the draws of the samples)".to_owned(),
            "`sparse-superpage` (`ryoo`): bytes moved over `static-2m`'s".to_owned(),
        ];
        table_header(
            &mut table,
            std::iter::once("counting interval".to_owned()).chain(columns),
        );
        let engine = memtide_core::engine::EngineConfig::default();
        for (name, setting) in [
            (format!("{} ms (default)", engine.interval_ms), &DEFAULT),
            (format!("{SHORT_INTERVAL_MS} ms"), &SHORT),
        ] {
            let _ = writeln!(table, "| {name} | {} |", self.interval_row(setting));
        }
        o.push_str(&fill(
            INTERVAL,
            &[
                ("default_ms", engine.interval_ms.to_string()),
                ("cooling_ms", engine.cooling_ms.to_string()),
                ("short_ms", SHORT_INTERVAL_MS.to_string()),
                (
                    "min_ms",
                    memtide_core::policy::EpochConfig::default()
                        .min_ms
                        .to_string(),
                ),
                ("table", table),
            ],
        ));
    }

    /// One row's cells after the first, each figure with its verdict.
    fn interval_row(&self, setting: &Setting) -> String {
        let oracle = PolicyName::Oracle.name();
        let memtide = (setting.label)(EngineVariant::Adaptive);
        let mut cells = Vec::new();
        let real = setting.real.with_sizes(self.base.fast);
        let bounds = REAL_SECTIONS.with_sizes(self.base.fast);
        for ((section, _), (bound_section, _)) in real.iter().zip(&bounds) {
            let share = geomean(self.real.iter().filter_map(|t| {
                let m = self.get(section, t, &memtide)?;
                let b = self.get(bound_section, t, oracle)?;
                (b.fast_hit_ratio > 0.0).then(|| m.fast_hit_ratio / b.fast_hit_ratio)
            }));
            cells.push(format!("{share:.3}: {}", verdict(share >= 0.9)));
        }
        for (section, _) in &real {
            let rel = geomean(
                self.real
                    .iter()
                    .filter_map(|t| self.get(section, t, &memtide))
                    .map(|r| r.relative_time),
            );
            cells.push(format!("{rel:.3}"));
        }
        cells.push(self.shrinking_cell(setting));
        cells.push(self.sparse_cell(setting));
        cells.join(" | ")
    }

    fn shrinking_cell(&self, setting: &Setting) -> String {
        let draws = self.epoch_draws("shrinking", setting.epoch_draws, setting.label);
        if draws.is_empty() {
            return "-".to_owned();
        }
        let gap = mean_gap(&draws);
        format!("{:+.1} %: {}", gap * 100.0, verdict(gap <= 0.05))
    }

    fn sparse_cell(&self, setting: &Setting) -> String {
        let run = |variant| -> Option<&SimResult> {
            self.get(
                setting.granularity,
                "sparse-superpage",
                &(setting.label)(variant),
            )
        };
        let whole = EngineVariant::StaticGranularity(memtide_core::units::Granularity::MIB_2);
        match (run(EngineVariant::Adaptive), run(whole)) {
            (Some(m), Some(s)) => {
                let share = moved_share(m.migrated_bytes, s.migrated_bytes);
                let ok = share <= SPARSE_SHARE_LIMIT && m.fast_hit_ratio >= s.fast_hit_ratio;
                format!(
                    "{:.1} % (hit {:.3} vs {:.3}): {}",
                    share * 100.0,
                    m.fast_hit_ratio,
                    s.fast_hit_ratio,
                    verdict(ok)
                )
            }
            _ => "-".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;

    use super::{
        super::{fake_run, render_section},
        EPOCH_DRAWS, EngineVariant, PolicyName, mean_gap, short_label,
    };
    use crate::{
        run::SimResult,
        suite::{EPOCHS_MS, Results},
    };

    /// The interval section of a report on one real trace, `a.mt`, whose runs at the default
    /// and at the short interval differ in every figure; the `shrinking` and
    /// `sparse-superpage` runs only when `checks`.
    fn section(checks: bool) -> String {
        let mut results = Results::new();
        let mut put = |section: &'static str, trace: &str, label: String, r: SimResult| {
            results.insert((section, trace.to_owned(), label), r);
        };
        let memtide = || EngineVariant::Adaptive.label();
        let oracle = PolicyName::Oracle.name().to_owned();
        for (section, hit) in [("real-small", 0.5), ("main", 0.8)] {
            put(
                section,
                "a.mt",
                oracle.clone(),
                fake_run(PolicyName::Oracle, "a.mt", 1.0, 1.0, 0),
            );
            let m = fake_run(PolicyName::Memtide, "a.mt", 1.2, hit, 0);
            put(section, "a.mt", memtide(), m);
        }
        let short = short_label(EngineVariant::Adaptive);
        for (section, hit) in [("interval-small", 0.6), ("interval", 0.95)] {
            put(
                section,
                "a.mt",
                short.clone(),
                fake_run(PolicyName::Memtide, "a.mt", 1.1, hit, 0),
            );
        }
        if checks {
            for &ms in &EPOCHS_MS {
                let time = if ms == 800 { 2.0 } else { 3.0 };
                let fixed = EngineVariant::FixedEpochMs(ms);
                let r = || fake_run(PolicyName::Memtide, "shrinking", time, 0.5, 0);
                put("epoch", "shrinking", fixed.label(), r());
                put("interval-epoch", "shrinking", short_label(fixed), r());
            }
            put(
                "main",
                "shrinking",
                memtide(),
                fake_run(PolicyName::Memtide, "shrinking", 2.02, 0.5, 0),
            );
            let short_shrinking = fake_run(PolicyName::Memtide, "shrinking", 2.5, 0.5, 0);
            put(
                "interval-epoch",
                "shrinking",
                short.clone(),
                short_shrinking,
            );
            let whole = EngineVariant::StaticGranularity(memtide_core::units::Granularity::MIB_2);
            for (section, label, whole_label, bytes) in [
                ("granularity", memtide(), whole.label(), 40u64),
                ("interval-granularity", short, short_label(whole), 60),
            ] {
                let mut m = fake_run(PolicyName::Memtide, "sparse-superpage", 1.2, 0.75, 0);
                m.migrated_bytes = bytes << 20;
                let mut s = fake_run(PolicyName::Static2m, "sparse-superpage", 1.3, 0.55, 0);
                s.migrated_bytes = 100 << 20;
                put(section, "sparse-superpage", label, m);
                put(section, "sparse-superpage", whole_label, s);
            }
        }
        render_section(&results, &["a.mt"], |report, o| report.interval(o))
    }

    /// The epoch check's verdict is over every draw of the samples whose runs are there: one
    /// draw 10 % behind the best fixed epoch and one level with it pass at their geometric
    /// mean; a draw missing memtide's run is left out.
    #[test]
    fn the_epoch_check_takes_the_geometric_mean_over_the_draws() {
        let mut results = Results::new();
        let run = |time| fake_run(PolicyName::Memtide, "shrinking", time, 0.5, 0);
        for (fixed, _) in EPOCH_DRAWS.iter().take(3) {
            for &ms in &EPOCHS_MS {
                let time = if ms == 800 { 2.0 } else { 3.0 };
                let label = EngineVariant::FixedEpochMs(ms).label();
                results.insert((*fixed, "shrinking".to_owned(), label), run(time));
            }
        }
        let memtide = EngineVariant::Adaptive.label();
        for (section, time) in [(EPOCH_DRAWS[0].1, 2.2), (EPOCH_DRAWS[1].1, 2.0)] {
            results.insert(
                (section, "shrinking".to_owned(), memtide.clone()),
                run(time),
            );
        }
        let text = render_section(&results, &[], |report, o| {
            let draws = report.epoch_draws("shrinking", &EPOCH_DRAWS, EngineVariant::label);
            let gaps: Vec<String> = draws.iter().map(|d| format!("{:.3}", d.gap())).collect();
            let _ = write!(o, "{} {:.4}", gaps.join(" "), mean_gap(&draws));
        });
        assert_eq!(text.trim(), "0.100 0.000 0.0488", "{text}");
    }

    #[test]
    fn the_interval_table_reads_each_setting_from_its_own_runs() {
        let text = section(true);
        let rows: Vec<&str> = text.lines().filter(|l| l.starts_with("| ")).collect();
        assert_eq!(rows.len(), 3, "{text}");
        assert!(
            rows[1].starts_with("| 20 ms (default) | 0.500: **does not hold** | 0.800"),
            "{}",
            rows[1]
        );
        assert!(
            rows[1].contains(
                "| 1.200 | 1.200 | +1.0 %: **holds** | 40.0 % (hit 0.750 vs 0.550): **holds** |"
            ),
            "{}",
            rows[1]
        );
        assert!(
            rows[2].starts_with(
                "| 10 ms | 0.600: **does not hold** | 0.950: **holds** | 1.100 | 1.100"
            ),
            "{}",
            rows[2]
        );
        assert!(
            rows[2].contains(
                "+25.0 %: **does not hold** | 60.0 % (hit 0.750 vs 0.550): **does not hold** |"
            ),
            "{}",
            rows[2]
        );
        assert!(!text.contains('{'), "a placeholder left: {text}");
    }

    #[test]
    fn missing_check_runs_read_as_dashes() {
        let text = section(false);
        let short = text
            .lines()
            .find(|l| l.starts_with("| 10 ms"))
            .expect("the short row");
        assert!(short.ends_with("| 1.100 | 1.100 | - | - |"), "{short}");
    }
}
