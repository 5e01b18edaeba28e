//! The main matrix's synthetic workloads at the production density: what the agent's shipped
//! defaults do with a heap whose heat is uniform, moving or skewed, when a run gets a couple of
//! samples per superpage.

use std::fmt::Write as _;

use super::{Report, density::Cell, fill, geomean, table_header, verdict};
use crate::{
    PolicyName,
    run::SimResult,
    suite::{
        DENSITY_DRAWS, DENSITY_POLICIES, DENSITY_REFERENCES, PRODUCTION_SAMPLE_RATE, REAL_SECTIONS,
        density::SYNTHETIC_DENSITY_SECTION, density_draws,
    },
};

/// The section's prose, with the table and the check filled in.
const SYNTHETIC: &str = include_str!("density-synthetic.md");

impl Report<'_> {
    /// The synthetic workloads: the traces that are not real programs.
    fn synthetic(&self) -> Vec<&str> {
        self.traces
            .iter()
            .filter(|t| !self.real.contains(t))
            .map(String::as_str)
            .collect()
    }

    /// `p`'s runs of `trace` in `cell` at the production density, one per draw (a policy
    /// that samples nothing: its main-matrix run, the same in every draw).
    fn synthetic_runs<'r>(
        &'r self,
        cell: &Cell<'_>,
        trace: &str,
        p: PolicyName,
    ) -> impl Iterator<Item = &'r SimResult> {
        (0..density_draws(PRODUCTION_SAMPLE_RATE)).filter_map(move |draw| {
            self.density_run(cell, trace, (p, PRODUCTION_SAMPLE_RATE, draw))
        })
    }

    /// Geometric mean over the workloads of what `time` gives each, when every one has it.
    fn over_synthetic(&self, time: impl Fn(&str) -> Option<f64>) -> Option<f64> {
        let workloads = self.synthetic();
        let times: Option<Vec<f64>> = workloads.iter().map(|t| time(t)).collect();
        times.filter(|t| !t.is_empty()).map(geomean)
    }

    /// `p`'s geometric mean over the workloads at the production density.
    fn synthetic_geomean(&self, cell: &Cell<'_>, p: PolicyName) -> Option<f64> {
        self.over_synthetic(|t| self.density_time(cell, t, p, PRODUCTION_SAMPLE_RATE))
    }

    /// One row per policy: the main matrix's time, the time at the production density and
    /// the median MiB a run migrated there.
    fn synthetic_table(&self, cell: &Cell<'_>, workloads: &[&str]) -> String {
        let mut table = String::new();
        table_header(
            &mut table,
            [
                "policy".to_owned(),
                format!("1 in {} (main matrix)", self.base.sample_rate),
                format!("1 in {PRODUCTION_SAMPLE_RATE}"),
                format!("MiB migrated at 1 in {PRODUCTION_SAMPLE_RATE}"),
            ],
        );
        for &p in DENSITY_POLICIES.iter().chain(&DENSITY_REFERENCES) {
            let main = self.over_synthetic(|t| self.main(t, p).map(|r| r.relative_time));
            let show = |g: Option<f64>| g.map_or("-".to_owned(), |g| format!("{g:.3}"));
            let mut moved: Vec<u64> = workloads
                .iter()
                .flat_map(|t| self.synthetic_runs(cell, t, p))
                .map(|r| r.migrated_bytes >> 20)
                .collect();
            moved.sort_unstable();
            let median = moved
                .get(moved.len() / 2)
                .map_or("-".to_owned(), u64::to_string);
            let _ = writeln!(
                table,
                "| {} | {} | {} | {median} |",
                p.name(),
                show(main),
                show(self.synthetic_geomean(cell, p))
            );
        }
        table
    }

    /// The workloads memtide is slower on than not migrating, with both times, for the check
    /// line (empty when there are none).
    fn slower_than_not_migrating(&self, cell: &Cell<'_>, workloads: &[&str]) -> String {
        let slower: Vec<String> = workloads
            .iter()
            .filter_map(|t| {
                let time = |p| self.density_time(cell, t, p, PRODUCTION_SAMPLE_RATE);
                let (m, n) = (time(PolicyName::Memtide)?, time(PolicyName::NoMigration)?);
                (m > n).then(|| format!("{t} ({m:.3} vs {n:.3}, {:+.1} %)", (m / n - 1.0) * 100.0))
            })
            .collect();
        if slower.is_empty() {
            String::new()
        } else {
            format!(
                "; slower than not migrating on {} of {}: {}",
                slower.len(),
                workloads.len(),
                slower.join(", ")
            )
        }
    }

    pub(super) fn density_synthetic(&self, o: &mut String) {
        let workloads = self.synthetic();
        let fast = self.base.fast.to_string();
        let cell = Cell {
            section: SYNTHETIC_DENSITY_SECTION,
            real_section: REAL_SECTIONS.main,
            fast: &fast,
            sampler: self.base.sampler,
        };
        let (Some(memtide), Some(none)) = (
            self.synthetic_geomean(&cell, PolicyName::Memtide),
            self.synthetic_geomean(&cell, PolicyName::NoMigration),
        ) else {
            return;
        };
        let table = self.synthetic_table(&cell, &workloads);
        let slower = self.slower_than_not_migrating(&cell, &workloads);
        let samples: Vec<u64> = workloads
            .iter()
            .flat_map(|t| self.synthetic_runs(&cell, t, PolicyName::Memtide))
            .map(|r| r.samples)
            .collect();
        let mean_samples = samples.iter().sum::<u64>() / (samples.len() as u64).max(1);
        let superpages = (self.args.footprint >> 21).max(1);
        o.push_str(&fill(
            SYNTHETIC,
            &[
                ("workloads", workloads.len().to_string()),
                ("records", self.args.records.to_string()),
                ("footprint_mib", (self.args.footprint >> 20).to_string()),
                ("samples", mean_samples.to_string()),
                ("production", PRODUCTION_SAMPLE_RATE.to_string()),
                (
                    "per_superpage",
                    format!("{:.1}", mean_samples as f64 / superpages as f64),
                ),
                ("sampler", self.base.sampler.name().to_owned()),
                ("fast", self.base.fast.to_string()),
                ("draws", DENSITY_DRAWS.to_string()),
                ("rate", self.base.sample_rate.to_string()),
                ("table", table),
                ("verdict", verdict(memtide <= none).to_owned()),
                ("memtide", format!("{memtide:.3}")),
                ("none", format!("{none:.3}")),
                ("slower", slower),
            ],
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::suite::{
        Choice,
        report::{Results, fake_run, render_section_of},
    };

    #[test]
    fn the_synthetic_workloads_are_held_against_not_migrating() {
        let mut results = Results::new();
        let workloads = ["gups", "zipf-kv"];
        let base = crate::run::SimConfig::new(crate::model::PresetName::Pmem.preset());
        for (i, &t) in workloads.iter().enumerate() {
            for (k, &p) in DENSITY_POLICIES
                .iter()
                .chain(&DENSITY_REFERENCES)
                .enumerate()
            {
                let main = fake_run(p, t, 1.1 + 0.01 * k as f64, 0.5, 1);
                results.insert(("main", t.to_owned(), p.name().to_owned()), main);
            }
            for &p in &DENSITY_POLICIES {
                for draw in 0..DENSITY_DRAWS {
                    // memtide: slower than not migrating (1.6) on gups, faster on zipf-kv.
                    let time = if p == PolicyName::Memtide {
                        [1.7, 1.4][i]
                    } else {
                        1.5
                    };
                    let mut run = fake_run(p, t, time, 0.2, 1);
                    run.migrated_bytes = (100 + draw) << 20;
                    run.samples = 240;
                    let choice = Choice::Density(p, base.sampler, PRODUCTION_SAMPLE_RATE, draw);
                    let key = (SYNTHETIC_DENSITY_SECTION, t.to_owned(), choice.label());
                    results.insert(key, run);
                }
            }
        }
        let mut none = fake_run(PolicyName::NoMigration, "gups", 1.6, 0.1, 0);
        none.migrated_bytes = 0;
        results.insert(("main", "gups".into(), "no-migration".into()), none.clone());
        none.trace = "zipf-kv".into();
        results.insert(("main", "zipf-kv".into(), "no-migration".into()), none);
        let all = ["gups", "zipf-kv", "kv.mt"];
        let section = render_section_of(&results, (&all, &["kv.mt"]), (&[], &[]), |r, o| {
            r.density_synthetic(o);
        });
        assert!(
            section.contains("The main matrix's 2 synthetic workloads"),
            "{section}"
        );
        assert!(section.contains("about 240 samples per run"), "{section}");
        // memtide: 1.1 at the main matrix's density; sqrt(1.7 * 1.4) at the production one;
        // the median of its 2 x 4 runs' migrations is the upper middle one (102 MiB).
        assert!(
            section.contains("| memtide | 1.100 | 1.543 | 102 |"),
            "{section}"
        );
        assert!(
            section.contains("| no-migration | 1.600 | 1.600 | 0 |"),
            "{section}"
        );
        assert!(
            section.contains(
                "on the synthetic workloads: **holds** (memtide 1.543, no migration 1.600); \
                 slower than not migrating on 1 of 2: gups (1.700 vs 1.600, +6.2 %)"
            ),
            "{section}"
        );
    }
}
