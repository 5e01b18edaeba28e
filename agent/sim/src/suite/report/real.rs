//! The real-program section: every real trace under every policy at two fast-tier sizes, with
//! the per-trace verdicts and the corpus goals (#19's acceptance).

use std::fmt::Write as _;

use super::{Report, geomean, verdict};
use crate::{PolicyName, run::SimResult, suite::REAL_SECTIONS};

/// The prose before the tables.
const REAL: &str = include_str!("real.md");

/// The baselines memtide must match or beat on every trace.
const BASELINES: [PolicyName; 5] = [
    PolicyName::Tpp,
    PolicyName::Hemem,
    PolicyName::Memtis,
    PolicyName::Damon,
    PolicyName::NoMigration,
];
/// memtide's own planner with its granularity pinned: what the adaptive granularity must beat.
const STATICS: [PolicyName; 3] = [
    PolicyName::Static4k,
    PolicyName::Static64k,
    PolicyName::Static2m,
];

impl Report<'_> {
    pub(super) fn real_programs(&self, o: &mut String) {
        if self.real.is_empty() {
            return;
        }
        o.push_str(REAL);
        for (section, fast) in REAL_SECTIONS.with_sizes(self.base.fast) {
            self.real_table(o, section, &fast.to_string());
        }
    }

    fn real_table(&self, o: &mut String, section: &str, fast: &str) {
        let _ = writeln!(o, "### Fast tier {fast} of each footprint\n");
        let leading = [
            "trace",
            "footprint MiB",
            "records",
            "record weight",
            "memtide",
        ];
        let trailing = [
            "best baseline",
            "memtide vs best",
            "hit / bound",
            "hit / hindsight",
            "hit / hindsight-epoch",
            "verdict",
        ];
        let policies = BASELINES.iter().chain(&STATICS).map(|p| p.name());
        super::table_header(o, leading.into_iter().chain(policies).chain(trailing));
        let mut every_trace = true;
        let mut hit_shares = Vec::new();
        let mut hindsight_shares = Vec::new();
        let mut hindsight_epoch_shares = Vec::new();
        for t in &self.real {
            // A trace without its runs cannot be judged: the verdict does not hold.
            let Some(row) = self.trace_verdict(section, t) else {
                every_trace = false;
                continue;
            };
            every_trace &= row.ahead;
            hit_shares.push(row.share);
            hindsight_shares.extend(row.hindsight);
            hindsight_epoch_shares.extend(row.hindsight_epoch);
            self.write_row(o, section, t, &row);
        }
        let shares = HitShares {
            bound: geomean(hit_shares.iter().copied()),
            hindsight: geomean(hindsight_shares.iter().copied()),
            hindsight_epoch: geomean(hindsight_epoch_shares.iter().copied()),
        };
        self.corpus_goals(o, section, every_trace, &shares);
    }

    /// The corpus's goals under a real-program table (#19's acceptance lines).
    fn corpus_goals(&self, o: &mut String, section: &str, every_trace: bool, shares: &HitShares) {
        let run = |t: &str, p: PolicyName| self.get(section, t, p.name());
        let gm = |p: PolicyName| {
            geomean(
                self.real
                    .iter()
                    .filter_map(|t| run(t, p).map(|r| r.relative_time)),
            )
        };
        let memtide = gm(PolicyName::Memtide);
        let (best, best_gm) = BASELINES
            .iter()
            .map(|&p| (p, gm(p)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or((PolicyName::Tpp, f64::NAN));
        let (best_static, static_gm) = STATICS
            .iter()
            .map(|&p| (p, gm(p)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or((PolicyName::Static4k, f64::NAN));
        let _ = writeln!(
            o,
            "\n- memtide at or below every baseline on every trace: {}.\n\
             - geometric mean of relative time: memtide {memtide:.3}, best baseline {} {best_gm:.3} ({:+.1} %; goal at least 3 % ahead): {}.\n\
             - adaptive against the best static granularity ({} {static_gm:.3}): {:+.1} %: adaptive ahead {}.\n\
             - memtide's hit ratio over the bound's, geometric mean: {:.3} (goal ≥ 0.90): {}.\n\
             - memtide's hit ratio over free hindsight's (a yardstick, no goal), geometric mean: {:.3}; over free hindsight re-placed once per shortest epoch (`hindsight-epoch`): {:.3}.\n",
            verdict(every_trace),
            best.name(),
            (memtide / best_gm - 1.0) * 100.0,
            verdict(memtide <= best_gm * 0.97),
            best_static.name(),
            (memtide / static_gm - 1.0) * 100.0,
            verdict(memtide < static_gm),
            shares.bound,
            verdict(shares.bound >= 0.9),
            shares.hindsight,
            shares.hindsight_epoch
        );
    }
}

/// One real trace at one fast-tier size: memtide against the baselines and the yardsticks.
struct TraceVerdict {
    record_weight: u32,
    relative_time: f64,
    best: PolicyName,
    best_time: f64,
    ahead: bool,
    /// memtide's hit ratio over the bound's, over free hindsight's, and over free hindsight's
    /// once per shortest epoch.
    share: f64,
    hindsight: Option<f64>,
    hindsight_epoch: Option<f64>,
}

impl Report<'_> {
    fn trace_verdict(&self, section: &str, t: &str) -> Option<TraceVerdict> {
        let run = |p: PolicyName| self.get(section, t, p.name());
        let (m, bound) = (run(PolicyName::Memtide)?, run(PolicyName::Oracle)?);
        let (best, best_time) = best_of(BASELINES.iter().filter_map(|&p| run(p).map(|r| (p, r))))?;
        // `geomean` skips zeros: a memtide that hits nothing must pull the mean down, not
        // drop out of it; a bound of zero leaves nothing to reach.
        let share = if bound.fast_hit_ratio > 0.0 {
            (m.fast_hit_ratio / bound.fast_hit_ratio).max(1e-6)
        } else {
            1.0
        };
        // Free hindsight is a yardstick, not a goal: memtide may pass it. As above, a memtide
        // hitting nothing stays in the mean; a hindsight hitting nothing leaves nothing to
        // compare.
        let share_of = |p: PolicyName| {
            run(p)
                .filter(|h| h.fast_hit_ratio > 0.0)
                .map(|h| (m.fast_hit_ratio / h.fast_hit_ratio).max(1e-6))
        };
        Some(TraceVerdict {
            record_weight: m.record_weight,
            relative_time: m.relative_time,
            best,
            best_time,
            ahead: m.relative_time <= best_time,
            share,
            hindsight: share_of(PolicyName::Hindsight),
            hindsight_epoch: share_of(PolicyName::HindsightEpoch),
        })
    }

    /// One row of a real-program table.
    fn write_row(&self, o: &mut String, section: &str, t: &str, row: &TraceVerdict) {
        let fp = self.footprints.get(t);
        let _ = write!(
            o,
            "| {t} | {} | {} | {} | {:.3} |",
            fp.map_or(0, |f| f.bytes >> 20),
            fp.map_or(0, |f| f.records),
            row.record_weight,
            row.relative_time
        );
        for p in BASELINES.iter().chain(&STATICS) {
            let run = self.get(section, t, p.name());
            let _ = write!(
                o,
                " {} |",
                run.map_or("-".into(), |r| format!("{:.3}", r.relative_time))
            );
        }
        let yardstick = |s: Option<f64>| s.map_or("-".into(), |h| format!("{h:.2}"));
        let _ = writeln!(
            o,
            " {} | {:+.1} % | {:.2} | {} | {} | {} |",
            row.best.name(),
            (row.relative_time / row.best_time - 1.0) * 100.0,
            row.share,
            yardstick(row.hindsight),
            yardstick(row.hindsight_epoch),
            if row.ahead { "ahead or even" } else { "behind" }
        );
    }
}

/// memtide's hit ratio over the bound's and over free hindsight's (every batch, and once per
/// shortest epoch), geometric means.
struct HitShares {
    bound: f64,
    hindsight: f64,
    hindsight_epoch: f64,
}

/// The policy with the lowest relative time among `runs`.
fn best_of<'a>(
    runs: impl Iterator<Item = (PolicyName, &'a SimResult)>,
) -> Option<(PolicyName, f64)> {
    runs.map(|(p, r)| (p, r.relative_time))
        .min_by(|a, b| a.1.total_cmp(&b.1))
}
