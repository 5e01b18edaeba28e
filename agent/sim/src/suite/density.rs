//! K: the density sweep. The real programs under every sampling policy at sample densities from
//! one sample per a hundred-odd LLC misses to four times sparser than the agent's shipped
//! defaults give a busy server, under the two PMU samplers, at both fast-tier sizes. The
//! page-table baselines (TPP, DAMON, no migration) sample nothing: the real-program sections
//! hold their runs, the references of every row.

use std::time::Duration;

use super::{Choice, Job, Matrix, TwoSizes};
use crate::{PolicyName, hindsight::Hindsight, model::PresetName, sampler::SamplerName};

/// The sweep's densities, one sample per this many records that reach memory (`--sample-rate`).
/// At the corpus's record weights (16 or 32 accesses each, every one past the LLC model) they
/// run from one sample per 64-128 LLC misses (the rest of the page's 4) to one per 0.5-1 M.
pub const DENSITY_RATES: [u32; 5] = [4, 64, 1024, 8192, 32768];
/// The production density: what the agent's shipped defaults give a busy 32-CPU server, about
/// one sample per 128,000 LLC misses (1 % of one core for the whole agent at 2 µs a sample,
/// 64 PEBS streams at about 78 samples/s each: load period 256,000), which at the corpus's
/// record weights is one sample per 4,000 to 8,000 records: the power of two nearest
/// [`crate::density::DensityModel`]'s 32-CPU figure at the sparser end (a test checks it).
pub const PRODUCTION_SAMPLE_RATE: u32 = 8192;
/// From this many records per sample on, the sweep runs every sampling policy under
/// [`DENSITY_DRAWS`] draws of the samples and reports their geometric mean: with a few hundred
/// samples per trace or fewer, which pages a draw happens to catch moves memtide's geometric
/// mean over the corpus by 4 to 6 % from one draw to the next (8 draws, `pebs`, fast 10 %:
/// 1.305 to 1.378 at 1024, 1.401 to 1.455 at 8192, 1.499 to 1.561 at 32768; 1.276 to 1.294
/// at 64), more than most differences between the policies there.
pub const DRAWN_FROM_RATE: u32 = 1024;
/// Draws of the samples at [`DRAWN_FROM_RATE`] and sparser: the suite's seed and the next ones.
pub const DENSITY_DRAWS: u64 = super::SAMPLER_SEEDS;

/// How many draws of the samples the sweep makes at `rate`.
#[must_use]
pub const fn density_draws(rate: u32) -> u64 {
    if rate >= DRAWN_FROM_RATE {
        DENSITY_DRAWS
    } else {
        1
    }
}

/// The samplers of the sweep: the two that draw from a PMU.
pub const DENSITY_SAMPLERS: [SamplerName; 2] = [SamplerName::Pebs, SamplerName::Ibs];
/// The policies that learn from samples. `hindsight-samples` runs here at memtide's shortest
/// epoch: free re-placement from the very samples memtide got, at the cadence it can act on.
pub const DENSITY_POLICIES: [PolicyName; 7] = [
    PolicyName::Memtide,
    PolicyName::Static4k,
    PolicyName::Static64k,
    PolicyName::Static2m,
    PolicyName::Hemem,
    PolicyName::Memtis,
    PolicyName::HindsightSamples,
];
/// The baselines that sample nothing, read from the real-program sections.
pub const DENSITY_REFERENCES: [PolicyName; 3] =
    [PolicyName::Tpp, PolicyName::Damon, PolicyName::NoMigration];
pub(crate) const DENSITY_SECTIONS: TwoSizes = TwoSizes::new("density-small", "density");
/// The synthetic workloads of the main matrix at the production density.
pub(crate) const SYNTHETIC_DENSITY_SECTION: &str = "density-synthetic";

/// `hindsight-samples` at memtide's shortest epoch, as the sweep runs it.
pub(super) fn hindsight_at_shortest_epoch() -> Hindsight {
    let min_ms = memtide_core::policy::EpochConfig::default().min_ms;
    Hindsight::from_samples(Some(Duration::from_millis(min_ms)))
}

impl Matrix<'_> {
    /// K: every real program under [`DENSITY_POLICIES`] at each of [`DENSITY_RATES`] under
    /// each of [`DENSITY_SAMPLERS`], at both fast-tier sizes.
    pub(super) fn density_jobs(&self, real: &[String]) -> Vec<Job> {
        let mut jobs = Vec::new();
        for t in real {
            for (section, fast) in DENSITY_SECTIONS.with_sizes(self.base.fast) {
                for sampler in DENSITY_SAMPLERS {
                    for rate in DENSITY_RATES {
                        for draw in 0..density_draws(rate) {
                            for p in DENSITY_POLICIES {
                                let choice = Choice::Density(p, sampler, rate, draw);
                                let preset = (PresetName::Pmem, fast);
                                let mut job = self.job(section, t, choice, preset);
                                job.cfg.sampler = sampler;
                                job.cfg.sample_rate = rate;
                                job.cfg.seed = job.cfg.seed.wrapping_add(draw);
                                jobs.push(job);
                            }
                        }
                    }
                }
            }
        }
        jobs
    }

    /// K': the main matrix's synthetic workloads under [`DENSITY_POLICIES`] at the production
    /// density, [`DENSITY_DRAWS`] draws, with the main matrix's sampler and fast-tier size:
    /// what the agent's defaults do with heaps whose heat is uniform, moving, or skewed.
    pub(super) fn synthetic_density_jobs(&self, synthetic: &[String]) -> Vec<Job> {
        let mut jobs = Vec::new();
        let rate = PRODUCTION_SAMPLE_RATE;
        for t in synthetic {
            for draw in 0..DENSITY_DRAWS {
                for p in DENSITY_POLICIES {
                    let choice = Choice::Density(p, self.base.sampler, rate, draw);
                    let preset = (PresetName::Pmem, self.base.fast);
                    let mut job = self.job(SYNTHETIC_DENSITY_SECTION, t, choice, preset);
                    job.cfg.sample_rate = rate;
                    job.cfg.seed = job.cfg.seed.wrapping_add(draw);
                    jobs.push(job);
                }
            }
        }
        jobs
    }
}
