//! Where memtide falls short of the bound, per trace, and why.

use super::Report;
use crate::{PolicyName, suite::EPOCHS_MS};

/// The prose under the table, with `{placeholders}` for the figures.
const TEMPLATE: &str = include_str!("diagnostics.md");

impl Report<'_> {
    /// Per-trace figures behind the headline, and what they show.
    pub(super) fn diagnostics(&self) -> String {
        let mut o = self.shortfall_table();
        let mut figures = self.real_program_figures();
        figures.extend(self.stream_figures());
        figures.extend(self.shrinking_figures());
        o.push_str(&super::fill(TEMPLATE, &figures));
        o
    }

    /// The main matrix's hit ratio of `p` on trace `t` (NaN without the run).
    fn main_hit(&self, t: &str, p: PolicyName) -> f64 {
        self.main(t, p).map_or(f64::NAN, |r| r.fast_hit_ratio)
    }

    /// memtide's figure `key` on trace `t` (NaN without it).
    fn memtide_info(&self, t: &str, key: &str) -> f64 {
        self.main(t, PolicyName::Memtide)
            .and_then(|r| r.policy_info.get(key))
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(f64::NAN)
    }

    /// gups under the bounds, and the real programs: the hindsight policies' hit ratios,
    /// memtide's share of them, their simulated length and memtide's plans.
    fn real_program_figures(&self) -> Vec<(&'static str, String)> {
        let hit = |t: &str, p: PolicyName| self.main_hit(t, p);
        let real_runs: Vec<_> = self
            .real
            .iter()
            .filter_map(|t| self.main(t, PolicyName::Memtide))
            .collect();
        let clock = range(&mut real_runs.iter().map(|r| r.simulated_clock_s));
        let plans = range(&mut self.real.iter().map(|t| self.memtide_info(t, "plans")));
        // The real traces' range of `p`'s hit ratio, and of memtide's as a share of it.
        let real_hit = |p: PolicyName| range(&mut self.real.iter().map(|t| hit(t, p)));
        let memtide_share_of = |p: PolicyName| {
            range(
                &mut self
                    .real
                    .iter()
                    .map(|t| 100.0 * hit(t, PolicyName::Memtide) / hit(t, p)),
            )
        };
        let (real_hindsight, real_hindsight_epoch) = (
            real_hit(PolicyName::Hindsight),
            real_hit(PolicyName::HindsightEpoch),
        );
        let (real_share, real_epoch_share) = (
            memtide_share_of(PolicyName::Hindsight),
            memtide_share_of(PolicyName::HindsightEpoch),
        );
        let epoch_defaults = memtide_core::policy::EpochConfig::default();
        vec![
            ("gups_first_touch", f3(hit("gups", PolicyName::NoMigration))),
            (
                "gups_epoch_oracle",
                f3(hit("gups", PolicyName::OracleEpoch)),
            ),
            ("gups_hindsight", f3(hit("gups", PolicyName::Hindsight))),
            ("real_hindsight_min", f3(real_hindsight.0)),
            ("real_hindsight_max", f3(real_hindsight.1)),
            ("real_share_min", f0(real_share.0)),
            ("real_share_max", f0(real_share.1)),
            ("real_hindsight_epoch_min", f3(real_hindsight_epoch.0)),
            ("real_hindsight_epoch_max", f3(real_hindsight_epoch.1)),
            ("real_epoch_share_min", f0(real_epoch_share.0)),
            ("real_epoch_share_max", f0(real_epoch_share.1)),
            ("real_clock_min", format!("{:.1}", clock.0)),
            ("real_clock_max", format!("{:.1}", clock.1)),
            ("initial_ms", epoch_defaults.initial_ms.to_string()),
            ("min_ms", epoch_defaults.min_ms.to_string()),
            ("real_plans_min", f0(plans.0)),
            ("real_plans_max", f0(plans.1)),
        ]
    }

    /// The time against the baseline, the lowest share of the bound on the stable traces,
    /// and memtide against `static-2m` on `stream`.
    fn stream_figures(&self) -> Vec<(&'static str, String)> {
        let stable_min = ["gups-hotset", "clustered-64k", "sparse-superpage", "rw-mix"]
            .iter()
            .map(|t| (*t).to_owned())
            .chain(self.real.iter().cloned())
            .map(|t| {
                self.main_hit(&t, PolicyName::Memtide) / self.main_hit(&t, PolicyName::OracleEpoch)
            })
            .fold(f64::INFINITY, f64::min);
        let rel = |sec: &str, c: &str| {
            self.get(sec, "stream", c)
                .map_or(f64::NAN, |r| r.relative_time)
        };
        // Share of memtide's streaming migrations that were not whole huge pages.
        let chunked = |sec: &str| {
            self.get(sec, "stream", "memtide").map_or(f64::NAN, |r| {
                let g = &r.migrations_by_granularity;
                100.0 * (g.k4 + g.k64) as f64 / (g.k4 + g.k64 + g.m2).max(1) as f64
            })
        };
        let gm_time = |p: PolicyName| self.main_geomean(p, |r| r.relative_time);
        vec![
            ("memtide_time", f3(gm_time(PolicyName::Memtide))),
            ("hemem_time", f3(gm_time(PolicyName::Hemem))),
            ("stable_min", f0(stable_min * 100.0)),
            ("stream_memtide", f3(rel("granularity", "memtide"))),
            ("stream_static_2m", f3(rel("granularity", "static-2m"))),
            ("stream_memtide_all", f3(rel("sampling", "memtide"))),
            ("stream_static_2m_all", f3(rel("sampling", "static-2m"))),
            ("sample_rate", self.base.sample_rate.to_string()),
            ("stream_chunked", f0(chunked("granularity"))),
            ("stream_chunked_all", f0(chunked("sampling"))),
        ]
    }

    /// `shrinking`: first touch, the best fixed epoch, and memtide with its mean epoch.
    fn shrinking_figures(&self) -> Vec<(&'static str, String)> {
        let shrinking = |p: PolicyName| {
            self.main("shrinking", p)
                .map_or(f64::NAN, |r| r.relative_time)
        };
        let best_epoch = EPOCHS_MS
            .iter()
            .filter_map(|&ms| self.get("epoch", "shrinking", &format!("epoch-{ms}ms")))
            .map(|r| r.relative_time)
            .fold(f64::INFINITY, f64::min);
        vec![
            (
                "shrinking_first_touch",
                f3(shrinking(PolicyName::NoMigration)),
            ),
            ("shrinking_best_epoch", f3(best_epoch)),
            ("shrinking_memtide", f3(shrinking(PolicyName::Memtide))),
            (
                "shrinking_mean_epoch",
                f0(self.memtide_info("shrinking", "mean_epoch_ms")),
            ),
        ]
    }

    /// memtide's hit ratio against the bound, the epoch oracle and free hindsight (every batch
    /// and once per shortest epoch), per trace of the main matrix, lowest share of the bound
    /// first.
    fn shortfall_table(&self) -> String {
        let mut o = String::from(
            "## Where memtide falls short, and why (computed from the runs above)\n\n| trace | memtide hit | bound (`oracle`) hit | share | `oracle-epoch` hit | `hindsight` hit | `hindsight-epoch` hit | plans | mean epoch ms | final granularity | migrated MiB |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        let mut rows: Vec<(f64, String)> = Vec::new();
        for t in &self.traces {
            let (Some(m), Some(or)) = (
                self.main(t, PolicyName::Memtide),
                self.main(t, PolicyName::Oracle),
            ) else {
                continue;
            };
            let share = m.fast_hit_ratio / or.fast_hit_ratio.max(1e-9);
            let hit = |p: PolicyName| self.main(t, p).map_or(f64::NAN, |r| r.fast_hit_ratio);
            let info = &m.policy_info;
            let num = |k: &str| {
                info.get(k)
                    .and_then(serde_json::Value::as_f64)
                    .unwrap_or(0.0)
            };
            rows.push((
                share,
                format!(
                    "| {t} | {:.3} | {:.3} | {:.0} % | {:.3} | {:.3} | {:.3} | {:.0} | {:.0} | {} KiB | {} |\n",
                    m.fast_hit_ratio,
                    or.fast_hit_ratio,
                    share * 100.0,
                    hit(PolicyName::OracleEpoch),
                    hit(PolicyName::Hindsight),
                    hit(PolicyName::HindsightEpoch),
                    num("plans"),
                    num("mean_epoch_ms"),
                    num("final_granularity_bytes") as u64 >> 10,
                    m.migrated_bytes >> 20
                ),
            ));
        }
        rows.sort_by(|a, b| a.0.total_cmp(&b.0));
        for (_, r) in &rows {
            o.push_str(r);
        }
        o
    }
}

/// The lowest and the highest of `values` (infinities when there are none).
fn range(values: &mut dyn Iterator<Item = f64>) -> (f64, f64) {
    values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
        (lo.min(x), hi.max(x))
    })
}

fn f3(x: f64) -> String {
    format!("{x:.3}")
}

fn f0(x: f64) -> String {
    format!("{x:.0}")
}
