//! memtide under each sampler ([`crate::sampler`]): the check that the period's magnitude
//! changes no decision, and the table of every real trace under every sampler.

use std::fmt::Write as _;

use super::{Report, geomean, verdict};
use crate::{run::SimResult, sampler::SamplerName};

/// What the section says before its table (the samplers' models).
const SAMPLERS: &str = include_str!("samplers.md");
/// How close `pebs` must come to `ideal` in geomean hit ratio and relative time.
const PEBS_TOLERANCE: f64 = 0.01;

impl Report<'_> {
    fn sampled(&self, trace: &str, sampler: SamplerName) -> Option<&SimResult> {
        self.get("sampler", trace, &format!("memtide/{}", sampler.name()))
    }

    /// Geometric means of hit ratio and relative time over every trace, and how many traces.
    fn sampler_geomeans(&self, sampler: SamplerName) -> (f64, f64, usize) {
        let runs: Vec<&SimResult> = self
            .traces
            .iter()
            .filter_map(|t| self.sampled(t, sampler))
            .collect();
        (
            geomean(runs.iter().map(|r| r.fast_hit_ratio)),
            geomean(runs.iter().map(|r| r.relative_time)),
            runs.len(),
        )
    }

    /// The check of the headline list: `pebs` within 1 % of `ideal`.
    pub(super) fn sampler_check(&self, o: &mut String) {
        let (ideal_hit, ideal_time, n) = self.sampler_geomeans(SamplerName::Ideal);
        let (pebs_hit, pebs_time, _) = self.sampler_geomeans(SamplerName::Pebs);
        if n == 0 {
            return;
        }
        let hit = pebs_hit / ideal_hit - 1.0;
        let time = pebs_time / ideal_time - 1.0;
        let _ = writeln!(
            o,
            "- The sampling period's magnitude changes no decision: memtide under `pebs` samples (as many as `ideal`'s, loads and stores at the default periods' ratio) vs `ideal`, geometric mean over {n} traces: hit ratio {pebs_hit:.3} vs {ideal_hit:.3} ({:+.2} %), relative time {pebs_time:.3} vs {ideal_time:.3} ({:+.2} %); goal within {:.0} %: {}.",
            hit * 100.0,
            time * 100.0,
            PEBS_TOLERANCE * 100.0,
            verdict(hit.abs() <= PEBS_TOLERANCE && time.abs() <= PEBS_TOLERANCE)
        );
    }

    /// Every real trace under every sampler, and each sampler's geometric means.
    pub(super) fn samplers(&self, o: &mut String) {
        o.push_str(SAMPLERS);
        o.push_str(
            "| trace | sampler | samples | hit ratio | relative time |\n|---|---|---|---|---|\n",
        );
        for t in &self.real {
            for sampler in SamplerName::ALL {
                if let Some(r) = self.sampled(t, sampler) {
                    let _ = writeln!(
                        o,
                        "| {t} | {} | {} | {:.3} | {:.3} |",
                        sampler.name(),
                        r.samples,
                        r.fast_hit_ratio,
                        r.relative_time
                    );
                }
            }
        }
        for sampler in SamplerName::ALL {
            let (hit, time, n) = self.sampler_geomeans(sampler);
            if n > 0 {
                let _ = writeln!(
                    o,
                    "| geomean, all {n} traces | {} | | {hit:.3} | {time:.3} |",
                    sampler.name()
                );
            }
        }
        o.push('\n');
    }
}
