//! The sample density the agent delivers a server, which `memtide sim` replays at unless told
//! `--sample-rate`: the agent's sampling budget buys a fixed number of samples a second for the
//! whole machine, and the machine's memory traffic shares them out, so the density is one
//! sample per `cpus × misses per CPU per second / samples per second` LLC misses.
//!
//! The defaults are the agent's (`sources::perf::budget::SamplingBudget`: 1 % of one core at
//! 2 µs a sample; `ExpectedRates`: a memory-bound CPU's 10^7 loads and 10^7 stores a second past
//! the LLC); a test of the agent's crate keeps them in step. docs/operations.md ("What the agent
//! costs") tabulates what they give 8-, 32- and 128-CPU servers.

use serde::Serialize;

/// A server and the agent's sampling budget on it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct DensityModel {
    /// CPUs of the server, every one as busy as `misses_per_cpu_per_s` says.
    pub cpus: u32,
    /// LLC misses (memory accesses) a busy CPU makes a second.
    pub misses_per_cpu_per_s: f64,
    /// The agent's sampling budget, percent of one core (`[sources] cpu_budget_percent`).
    pub cpu_budget_percent: f64,
    /// CPU one sample costs, kernel and agent, ns.
    pub sample_cost_ns: f64,
}

impl DensityModel {
    /// The CPUs of the server the evaluation calls production: 32.
    pub const PRODUCTION_CPUS: u32 = 32;

    /// The agent's shipped defaults on a busy server of `cpus` CPUs.
    #[must_use]
    pub const fn shipped(cpus: u32) -> Self {
        Self {
            cpus,
            misses_per_cpu_per_s: 2e7,
            cpu_budget_percent: 1.0,
            sample_cost_ns: 2_000.0,
        }
    }

    /// Samples a second the budget buys, for the whole machine.
    #[must_use]
    pub fn samples_per_s(&self) -> f64 {
        self.cpu_budget_percent / 100.0 * 1e9 / self.sample_cost_ns
    }

    /// LLC misses per sample.
    #[must_use]
    pub fn misses_per_sample(&self) -> f64 {
        f64::from(self.cpus) * self.misses_per_cpu_per_s / self.samples_per_s()
    }

    /// Trace records per sample (`--sample-rate`) for a trace whose records stand for
    /// `record_weight` accesses each, every one of them a miss: at least 1.
    #[must_use]
    pub fn records_per_sample(&self, record_weight: u32) -> u32 {
        let records = self.misses_per_sample() / f64::from(record_weight.max(1));
        if records.is_finite() && records >= 1.0 {
            // Saturating: a density sparser than one sample per 4 G records is no sampling.
            #[expect(clippy::cast_possible_truncation, reason = "clamped to u32")]
            #[expect(clippy::cast_sign_loss, reason = "at least 1")]
            let rounded = records.round().min(f64::from(u32::MAX)) as u32;
            rounded
        } else {
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::DensityModel;

    #[test]
    fn the_shipped_budget_gives_a_busy_32_cpu_server_one_sample_per_128000_misses() {
        let server = DensityModel::shipped(DensityModel::PRODUCTION_CPUS);
        assert!((server.samples_per_s() - 5_000.0).abs() < 1e-9);
        assert!((server.misses_per_sample() - 128_000.0).abs() < 1e-6);
        // The corpus's records stand for 16 or 32 accesses.
        assert_eq!(server.records_per_sample(16), 8_000);
        assert_eq!(server.records_per_sample(32), 4_000);
        // The budget is the machine's: four times the CPUs, a quarter of the density.
        assert_eq!(DensityModel::shipped(128).records_per_sample(16), 32_000);
    }

    #[test]
    fn the_evaluations_production_density_is_the_32_cpu_servers() {
        // The sweep's densities are powers of two: the production one is the nearest to the
        // model's, at the corpus's lighter records (16 accesses: the sparser end).
        let rate = DensityModel::shipped(DensityModel::PRODUCTION_CPUS).records_per_sample(16);
        let nearest = 1u32 << f64::from(rate).log2().round() as u32;
        assert_eq!(crate::suite::PRODUCTION_SAMPLE_RATE, nearest);
    }

    #[test]
    fn a_density_denser_than_every_record_samples_every_record() {
        let generous = DensityModel {
            cpu_budget_percent: 1e6,
            ..DensityModel::shipped(1)
        };
        assert_eq!(generous.records_per_sample(64), 1);
        assert_eq!(DensityModel::shipped(32).records_per_sample(0), 128_000);
    }
}
