//! L: long steady states. The server-like real programs replayed [`LONG_PASSES`] times back to
//! back ([`Repeated`]), so that at the production density their hot sets are sampled as a longer
//! run would sample them, under the sampling policies at the production density and at the rest
//! of the page's rate, with the page-table baselines beside them; and replayed for an hour of
//! their clocks ([`LONG_HOUR`]) under the sampling policies at the production density, which
//! the replay fast-forwards (`run::fast_forward`).

use std::{sync::Arc, time::Duration};

use super::{
    Choice, Job, Matrix, TwoSizes,
    density::{DENSITY_REFERENCES, PRODUCTION_SAMPLE_RATE},
};
use crate::{
    PolicyName,
    model::PresetName,
    run::{self, SimConfig},
    sampler::SamplerName,
    trace::{TraceError, TraceSpec, repeat::Repeated},
};

/// Passes of each trace: 16 passes give a few hundred to a thousand samples per trace at the
/// production density, against a few dozen in one pass.
pub const LONG_PASSES: u32 = 16;
/// The server-like programs of the corpus, whose one pass is a steady state a server repeats.
pub const LONG_TRACES: [&str; 3] = ["kv.mt", "sqlite.mt", "python.mt"];
/// The sampler of the section (the agent's first choice where the PMU has it).
pub const LONG_SAMPLER: SamplerName = SamplerName::Pebs;
/// The sample rates of the section: the rest of the page's and the production density.
pub const LONG_RATES: [u32; 2] = [4, PRODUCTION_SAMPLE_RATE];
/// The policies that learn from samples, run at each of [`LONG_RATES`].
pub const LONG_SAMPLING: [PolicyName; 5] = [
    PolicyName::Memtide,
    PolicyName::Static2m,
    PolicyName::Hemem,
    PolicyName::Memtis,
    PolicyName::HindsightSamples,
];
/// The baselines that sample nothing, run once: the density sweep's references.
pub const LONG_REFERENCES: [PolicyName; 3] = DENSITY_REFERENCES;
/// The yardstick of what a settled estimate reaches: the best placement held still for the whole
/// replay (`oracle-fixed`), run once per long trace.
pub const LONG_FIXED: PolicyName = PolicyName::OracleFixed;
pub(crate) const LONG_SECTIONS: TwoSizes = TwoSizes::new("long-small", "long");
/// How long the hour-long replays run, of the programs' clocks: what a server's hour of the same
/// work gives a policy at the production density.
pub const LONG_HOUR: Duration = Duration::from_secs(3600);
/// The policies replayed for [`LONG_HOUR`] at the production density: those that learn from
/// samples, which the replay fast-forwards. Free hindsight (`hindsight-samples`) among them
/// says how much of the hot set an hour of the samples can show at all.
pub const LONG_HOUR_SAMPLING: [PolicyName; 5] = [
    PolicyName::Memtide,
    PolicyName::Static2m,
    PolicyName::Hemem,
    PolicyName::Memtis,
    PolicyName::HindsightSamples,
];

/// The long versions of the [`LONG_TRACES`] among `real`.
pub(super) fn long_traces(real: &[Arc<dyn TraceSpec>]) -> Vec<Arc<dyn TraceSpec>> {
    real.iter()
        .filter(|t| LONG_TRACES.contains(&t.name().as_str()))
        .map(|t| {
            Arc::new(Repeated {
                inner: Arc::clone(t),
                passes: LONG_PASSES,
            }) as Arc<dyn TraceSpec>
        })
        .collect()
}

/// The hour-long versions of the [`LONG_TRACES`] among `real`: as many passes as make at least
/// [`LONG_HOUR`] of the policies' clock at `cfg`'s pace per access. A pass lasts its records that
/// reach memory times the accesses each stands for; the first pass, with cold caches, has more
/// of them than the later ones, so the passes after it are counted from the second. A trace
/// whose clock is its own (a recording) or whose later passes reach no memory (their clock
/// would never move) gets no hour-long replay, with a note on stderr: its hour columns are `-`.
pub(super) fn hour_traces(
    real: &[Arc<dyn TraceSpec>],
    cfg: &SimConfig,
) -> Result<Vec<Arc<dyn TraceSpec>>, TraceError> {
    let mut hour = Vec::new();
    for t in real {
        if !LONG_TRACES.contains(&t.name().as_str()) {
            continue;
        }
        let meta = t.open()?.meta().clone();
        let clock = cfg.record_clock(&meta);
        let first = run::measure_footprint(&**t)?.filters.past_l3;
        let two = Repeated {
            inner: Arc::clone(t),
            passes: 2,
        };
        let second = run::measure_footprint(&two)?.filters.past_l3 - first;
        if meta.time_marks || second == 0 {
            eprintln!(
                "no hour-long replay of {}: {}",
                t.name(),
                if meta.time_marks {
                    "its clock is the recording's"
                } else {
                    "its passes after the first reach no memory"
                }
            );
            continue;
        }
        let after_first = LONG_HOUR.as_nanos() as f64 - clock.ns(first);
        let later = (after_first / clock.ns(second)).ceil().max(1.0);
        hour.push(Arc::new(Repeated {
            inner: Arc::clone(t),
            passes: (1.0 + later).min(f64::from(u32::MAX)) as u32,
        }) as Arc<dyn TraceSpec>);
    }
    Ok(hour)
}

impl Matrix<'_> {
    /// L: every hour-long trace under [`LONG_HOUR_SAMPLING`] at the production density, at both
    /// fast-tier sizes.
    pub(super) fn hour_jobs(&self, hour: &[String]) -> Vec<Job> {
        let mut jobs = Vec::new();
        for t in hour {
            for (section, fast) in LONG_SECTIONS.with_sizes(self.base.fast) {
                for p in LONG_HOUR_SAMPLING {
                    let choice = Choice::Density(p, LONG_SAMPLER, PRODUCTION_SAMPLE_RATE, 0);
                    let mut job = self.job(section, t, choice, (PresetName::Pmem, fast));
                    job.cfg.sampler = LONG_SAMPLER;
                    job.cfg.sample_rate = PRODUCTION_SAMPLE_RATE;
                    jobs.push(job);
                }
            }
        }
        jobs
    }

    /// L: every long trace under [`LONG_SAMPLING`] at each of [`LONG_RATES`], under
    /// [`LONG_REFERENCES`] and under [`LONG_FIXED`], at both fast-tier sizes.
    pub(super) fn long_jobs(&self, long: &[String]) -> Vec<Job> {
        let mut jobs = Vec::new();
        for t in long {
            for (section, fast) in LONG_SECTIONS.with_sizes(self.base.fast) {
                let pmem = (PresetName::Pmem, fast);
                for rate in LONG_RATES {
                    for p in LONG_SAMPLING {
                        let choice = Choice::Density(p, LONG_SAMPLER, rate, 0);
                        let mut job = self.job(section, t, choice, pmem);
                        job.cfg.sampler = LONG_SAMPLER;
                        job.cfg.sample_rate = rate;
                        jobs.push(job);
                    }
                }
                for p in LONG_REFERENCES.into_iter().chain([LONG_FIXED]) {
                    jobs.push(self.job(section, t, Choice::Named(p), pmem));
                }
            }
        }
        jobs
    }
}
