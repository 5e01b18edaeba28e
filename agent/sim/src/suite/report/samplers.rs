//! memtide under each sampler ([`crate::sampler`]): the check that the period's magnitude
//! changes no decision, and the table of every real trace under every sampler.

use std::fmt::Write as _;

use super::{Report, geomean, verdict};
use crate::{
    run::SimResult,
    sampler::SamplerName,
    suite::{Choice, SAMPLER_SEEDS, sampler_draws},
};

/// What the section says before its table (the samplers' models).
const SAMPLERS: &str = include_str!("samplers.md");
/// How close `pebs` must come to `ideal` in geomean hit ratio and relative time.
const PEBS_TOLERANCE: f64 = 0.01;

impl Report<'_> {
    /// memtide's runs of `trace` under `sampler`, one per draw of the samples.
    fn sampled(&self, trace: &str, sampler: SamplerName) -> Vec<&SimResult> {
        (0..sampler_draws(sampler))
            .filter_map(|draw| self.get("sampler", trace, &Choice::Sampled(sampler, draw).label()))
            .collect()
    }

    /// Geometric means of hit ratio and relative time over every trace and draw, and how many
    /// traces.
    fn sampler_geomeans(&self, sampler: SamplerName) -> (f64, f64, usize) {
        let per_trace: Vec<Vec<&SimResult>> = self
            .traces
            .iter()
            .map(|t| self.sampled(t, sampler))
            .filter(|runs| !runs.is_empty())
            .collect();
        let runs = || per_trace.iter().flatten();
        (
            geomean(runs().map(|r| r.fast_hit_ratio)),
            geomean(runs().map(|r| r.relative_time)),
            per_trace.len(),
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
            "- The sampling period's magnitude changes no decision: memtide under `pebs` samples (as many as `ideal`'s, loads and stores split by the shares that reach memory) vs `ideal`, geometric mean over {n} traces and {SAMPLER_SEEDS} draws of the samples: hit ratio {pebs_hit:.3} vs {ideal_hit:.3} ({:+.2} %), relative time {pebs_time:.3} vs {ideal_time:.3} ({:+.2} %); goal within {:.0} %: {}.",
            hit * 100.0,
            time * 100.0,
            PEBS_TOLERANCE * 100.0,
            verdict(hit.abs() <= PEBS_TOLERANCE && time.abs() <= PEBS_TOLERANCE)
        );
    }

    /// Every real trace under every sampler (the mean over the draws, and the range of the hit
    /// ratio), and each sampler's geometric means.
    pub(super) fn samplers(&self, o: &mut String) {
        o.push_str(SAMPLERS);
        o.push_str(
            "| trace | sampler | samples | hit ratio | hit ratio over the draws | relative time |\n|---|---|---|---|---|---|\n",
        );
        for t in &self.real {
            for sampler in SamplerName::ALL {
                let runs = self.sampled(t, sampler);
                if runs.is_empty() {
                    continue;
                }
                let mean = |figure: fn(&SimResult) -> f64| {
                    runs.iter().map(|r| figure(r)).sum::<f64>() / runs.len() as f64
                };
                let (low, high) = hit_range(&runs);
                let _ = writeln!(
                    o,
                    "| {t} | {} | {:.0} | {:.3} | {low:.3} to {high:.3} | {:.3} |",
                    sampler.name(),
                    mean(|r| r.samples as f64),
                    mean(|r| r.fast_hit_ratio),
                    mean(|r| r.relative_time)
                );
            }
        }
        for sampler in SamplerName::ALL {
            let (hit, time, n) = self.sampler_geomeans(sampler);
            if n > 0 {
                let _ = writeln!(
                    o,
                    "| geomean, all {n} traces | {} | | {hit:.3} | | {time:.3} |",
                    sampler.name()
                );
            }
        }
        o.push('\n');
        self.draw_spread(o);
    }

    /// The widest range of `ideal`'s hit ratio over the draws, among all traces: how far apart
    /// one trace's figures may be by the draw alone.
    fn draw_spread(&self, o: &mut String) {
        let widest = self
            .traces
            .iter()
            .map(|t| (t, hit_range(&self.sampled(t, SamplerName::Ideal))))
            .max_by(|a, b| (a.1.1 - a.1.0).total_cmp(&(b.1.1 - b.1.0)));
        if let Some((trace, (low, high))) = widest {
            let _ = writeln!(
                o,
                "Under `ideal`, the draw alone moves `{trace}`'s hit ratio from {low:.3} to {high:.3}, the widest range of the {} traces.\n",
                self.traces.len()
            );
        }
    }
}

/// The lowest and highest hit ratio of `runs` (zeros when there are none).
fn hit_range(runs: &[&SimResult]) -> (f64, f64) {
    if runs.is_empty() {
        return (0.0, 0.0);
    }
    runs.iter()
        .map(|r| r.fast_hit_ratio)
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(low, high), hit| {
            (low.min(hit), high.max(hit))
        })
}
