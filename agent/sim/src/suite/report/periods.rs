//! The real programs at PMU-scale sampling periods: memtide, HeMem and `static-2m` under the
//! samplers that draw from a PMU, at [`PMU_SAMPLE_RATE`].

use std::fmt::Write as _;

use super::{Report, fill, geomean, verdict};
use crate::{
    PolicyName,
    sampler::SamplerName,
    suite::{Choice, PERIOD_SECTIONS, PMU_POLICIES, PMU_SAMPLE_RATE, PMU_SAMPLERS},
};

/// The section's prose, with the tables and the check filled in.
const PERIODS: &str = include_str!("periods.md");

impl Report<'_> {
    pub(super) fn pmu_periods(&self, o: &mut String) {
        if self.real.is_empty() {
            return;
        }
        let sizes = PERIOD_SECTIONS.with_sizes(self.base.fast);
        let mut tables = String::new();
        for (section, fast) in &sizes {
            self.period_table(&mut tables, section, &fast.to_string());
        }
        let all = |p: PolicyName| {
            let times: Vec<f64> = sizes
                .iter()
                .flat_map(|(section, _)| self.period_times(section, p))
                .collect();
            (geomean(times.iter().copied()), times.len())
        };
        let ((memtide, runs), (hemem, _)) = (all(PolicyName::Memtide), all(PolicyName::Hemem));
        let weights: Vec<u32> = self
            .real
            .iter()
            .filter_map(|t| self.main(t, PolicyName::Memtide).map(|r| r.record_weight))
            .collect();
        let (low, high) = (
            weights.iter().min().copied().unwrap_or(1),
            weights.iter().max().copied().unwrap_or(1),
        );
        let accesses = |w: u32| u64::from(w) * u64::from(PMU_SAMPLE_RATE);
        o.push_str(&fill(
            PERIODS,
            &[
                ("rate", PMU_SAMPLE_RATE.to_string()),
                (
                    "accesses",
                    format!("{} to {}", accesses(low), accesses(high)),
                ),
                ("tables", tables),
                ("runs", runs.to_string()),
                ("memtide", format!("{memtide:.3}")),
                ("hemem", format!("{hemem:.3}")),
                (
                    "delta",
                    format!("{:+.1} %", (memtide / hemem - 1.0) * 100.0),
                ),
                ("verdict", verdict(memtide <= hemem).to_owned()),
            ],
        ));
    }

    /// `p`'s relative time on every real trace under every PMU sampler in `section`.
    fn period_times(&self, section: &str, p: PolicyName) -> Vec<f64> {
        self.real
            .iter()
            .flat_map(|t| PMU_SAMPLERS.map(|s| (t, s)))
            .filter_map(|(t, s)| self.period_run(section, t, p, s).map(|r| r.relative_time))
            .collect()
    }

    fn period_run(
        &self,
        section: &str,
        trace: &str,
        p: PolicyName,
        sampler: SamplerName,
    ) -> Option<&crate::run::SimResult> {
        self.get(section, trace, &Choice::Period(p, sampler).label())
    }

    fn period_table(&self, o: &mut String, section: &str, fast: &str) {
        let _ = writeln!(o, "### Fast tier {fast} of each footprint\n");
        let policies = PMU_POLICIES.iter().map(|p| p.name());
        super::table_header(
            o,
            ["trace", "sampler", "samples"].into_iter().chain(policies),
        );
        for t in &self.real {
            for s in PMU_SAMPLERS {
                let samples = self
                    .period_run(section, t, PolicyName::Memtide, s)
                    .map_or(0, |r| r.samples);
                let _ = write!(o, "| {t} | {} | {samples} |", s.name());
                for p in PMU_POLICIES {
                    let time = self.period_run(section, t, p, s);
                    let _ = write!(
                        o,
                        " {} |",
                        time.map_or("-".into(), |r| format!("{:.3}", r.relative_time))
                    );
                }
                o.push('\n');
            }
        }
        for s in PMU_SAMPLERS {
            let _ = write!(o, "| geomean | {} | |", s.name());
            for p in PMU_POLICIES {
                let times = self
                    .real
                    .iter()
                    .filter_map(|t| self.period_run(section, t, p, s).map(|r| r.relative_time));
                let _ = write!(o, " {:.3} |", geomean(times));
            }
            o.push('\n');
        }
        o.push('\n');
    }
}
