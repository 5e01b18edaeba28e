//! L: long steady states. The server-like real programs replayed [`LONG_PASSES`] times back to
//! back ([`Repeated`]), so that at the production density their hot sets are sampled as a longer
//! run would sample them, under the sampling policies at the production density and at the rest
//! of the page's rate, with the page-table baselines beside them.

use std::sync::Arc;

use super::{
    Choice, Job, Matrix, TwoSizes,
    density::{DENSITY_REFERENCES, PRODUCTION_SAMPLE_RATE},
};
use crate::{
    PolicyName,
    model::PresetName,
    sampler::SamplerName,
    trace::{TraceSpec, repeat::Repeated},
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
pub(crate) const LONG_SECTIONS: TwoSizes = TwoSizes::new("long-small", "long");

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

impl Matrix<'_> {
    /// L: every long trace under [`LONG_SAMPLING`] at each of [`LONG_RATES`] and under
    /// [`LONG_REFERENCES`], at both fast-tier sizes.
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
                for p in LONG_REFERENCES {
                    jobs.push(self.job(section, t, Choice::Named(p), pmem));
                }
            }
        }
        jobs
    }
}
