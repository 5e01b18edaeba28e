//! What an epoch did, published: the target's metrics (accesses and hit ratio, hot and managed
//! bytes by tier, what moved or would have, per direction, pages left alone) and its row of
//! `/status`.

use std::time::Duration;

use memtide_core::units::{Direction, PAGE_SIZE, SUPERPAGE_SIZE};
use memtide_host::exec::{DirectionReport, ExecReport};

use super::{
    State, density,
    epoch::{Epoch, EpochOutcome, Planned},
};
use crate::metrics::{
    Metrics, Migrated, PageResult, Reason, TargetDirection, TargetLabel, TargetTier,
};

impl State {
    /// Publishes `epoch`, the one ending at `now`, to `metrics` and the target's status.
    pub(super) fn report(&mut self, now: Duration, epoch: &Epoch, metrics: &Metrics) {
        let outcome = &epoch.outcome;
        if !matches!(outcome, EpochOutcome::Exited { .. }) {
            self.report_density(now, metrics);
        }
        match outcome {
            EpochOutcome::Exited { executed } => {
                if let Some(report) = executed {
                    tracing::info!(
                        pid = self.spec.pid,
                        target = %self.spec.label,
                        moved = report.total().pages_moved,
                        not_attempted = report.total().aborted_pages,
                        "target exited during migration"
                    );
                    self.report_migration(report, metrics);
                }
            }
            EpochOutcome::NoPlacement => {}
            EpochOutcome::Planned(planned) => self.report_planned(planned, metrics),
        }
        metrics
            .migration_cpu_seconds
            .inc_by(epoch.measured.migration_cpu.as_secs_f64());
        for (&why, &pages) in &epoch.measured.newly_skipped {
            metrics
                .pages_skipped
                .get_or_create(&Reason {
                    reason: why.to_owned(),
                })
                .inc_by(pages);
        }
    }

    fn report_planned(&mut self, planned: &Planned, metrics: &Metrics) {
        let label = self.spec.label.clone();
        let tier_label = |tier: &str| TargetTier {
            target: label.clone(),
            tier: tier.to_owned(),
        };
        let target_label = TargetLabel {
            target: label.clone(),
        };
        // Hit ratio over the accesses sampled since the last epoch, before the moves.
        let (fast, slow) = (planned.before.fast_accesses, planned.before.slow_accesses);
        metrics
            .accesses_sampled
            .get_or_create(&tier_label("fast"))
            .inc_by(fast);
        metrics
            .accesses_sampled
            .get_or_create(&tier_label("slow"))
            .inc_by(slow);
        if fast + slow > 0 {
            #[expect(clippy::cast_precision_loss, reason = "a ratio of sample counts")]
            let ratio = fast as f64 / (fast + slow) as f64;
            self.status.fast_hit_ratio = Some(ratio);
            metrics
                .fast_tier_hit_ratio
                .get_or_create(&target_label)
                .set(ratio);
        }
        self.status.epochs += 1;
        if planned.observed {
            self.report_would_move(planned, metrics);
        }
        if let Some(report) = &planned.executed {
            self.report_migration(report, metrics);
        }
        // Gauges after the moves: hot and managed bytes by tier.
        let after = &planned.after;
        for (tier, value) in [
            ("fast", after.hot_fast_bytes),
            ("slow", after.hot_slow_bytes),
        ] {
            metrics
                .hot_bytes
                .get_or_create(&tier_label(tier))
                .set(i64::try_from(value).unwrap_or(i64::MAX));
        }
        for (tier, value) in planned.managed {
            metrics
                .managed_bytes
                .get_or_create(&tier_label(tier))
                .set(i64::try_from(value).unwrap_or(i64::MAX));
        }
        self.report_untracked(planned, metrics);
        let epoch_seconds = planned.epoch.as_secs_f64();
        metrics
            .epoch_seconds
            .get_or_create(&target_label)
            .set(epoch_seconds);
        metrics
            .granularity_bytes
            .get_or_create(&target_label)
            .set(i64::try_from(planned.granularity_bytes).unwrap_or(i64::MAX));
        self.status.managed_bytes = planned
            .managed
            .iter()
            .map(|(tier, value)| ((*tier).to_owned(), *value))
            .collect();
        self.status.hot_bytes = after.hot_fast_bytes + after.hot_slow_bytes;
        self.status.granularity_bytes = planned.granularity_bytes;
        self.status.epoch_seconds = epoch_seconds;
        self.status.engine_memory_bytes = planned.stats.memory_bytes;
        self.report_share(metrics);
    }

    /// The samples the target got since the last report, and the density they make.
    fn report_density(&mut self, now: Duration, metrics: &Metrics) {
        let label = TargetLabel {
            target: self.spec.label.clone(),
        };
        let samples = self.status.samples;
        metrics
            .target_samples
            .get_or_create(&label)
            .inc_by(samples.saturating_sub(self.reported.samples_published));
        self.reported.samples_published = samples;
        let Some(per_second) = self.reported.density.update(now, samples) else {
            return;
        };
        let resident = self.status.managed_bytes.values().sum();
        let per_gib = density::per_gib(per_second, resident);
        self.status.samples_per_second = Some(per_second);
        self.status.samples_per_second_per_gib = per_gib;
        metrics
            .target_samples_per_second
            .get_or_create(&label)
            .set(per_second);
        match per_gib {
            Some(value) => {
                metrics
                    .target_samples_per_second_per_gib
                    .get_or_create(&label)
                    .set(value);
            }
            None => {
                metrics.target_samples_per_second_per_gib.remove(&label);
            }
        }
    }

    /// The share of the fast tier the plan was made with, while one bounds the target.
    fn report_share(&mut self, metrics: &Metrics) {
        let label = TargetLabel {
            target: self.spec.label.clone(),
        };
        self.status.fast_share_bytes = self.planning.share.bytes;
        self.status.fast_share_reason = match (self.planning.share.bytes, self.limit()) {
            (None, _) => None,
            (Some(_), Some(limit)) if !self.planning.share.fair => {
                Some(format!("limit ({})", limit.matched))
            }
            (Some(_), _) => Some("fair share".to_owned()),
        };
        match self.planning.share.bytes {
            Some(bytes) => {
                metrics
                    .fast_share_bytes
                    .get_or_create(&label)
                    .set(i64::try_from(bytes).unwrap_or(i64::MAX));
            }
            None => {
                metrics.fast_share_bytes.remove(&label);
            }
        }
    }

    /// Observe mode: what the plan would have moved, had migration been on (the bytes that
    /// would change tier).
    fn report_would_move(&mut self, planned: &Planned, metrics: &Metrics) {
        let would = [planned.plan.promote_bytes, planned.plan.demote_bytes];
        for (direction, bytes) in [("promote", would[0]), ("demote", would[1])] {
            metrics
                .would_migrate_bytes
                .get_or_create(&TargetDirection {
                    target: self.spec.label.clone(),
                    direction: direction.to_owned(),
                })
                .inc_by(bytes);
        }
        self.status.would_promote_bytes += would[0];
        self.status.would_demote_bytes += would[1];
    }

    /// Samples the engine left out at its superpage cap, counted once each.
    fn report_untracked(&mut self, planned: &Planned, metrics: &Metrics) {
        let total = planned.stats.untracked_samples;
        let untracked = total.saturating_sub(self.reported.untracked_published);
        if untracked == 0 {
            return;
        }
        if self.reported.untracked_published == 0 {
            tracing::warn!(
                pid = self.spec.pid,
                max = self.tiering.engine().config().max_superpages,
                "engine at [engine] max_superpages; samples of new superpages are left out (memtide_engine_untracked_samples_total)"
            );
        }
        self.reported.untracked_published = total;
        metrics
            .engine_untracked_samples
            .get_or_create(&TargetLabel {
                target: self.spec.label.clone(),
            })
            .inc_by(untracked);
    }

    /// What the executor did, each direction on its own.
    fn report_migration(&mut self, report: &ExecReport, metrics: &Metrics) {
        let [promoted, demoted] = publish_migration(metrics, &self.spec.label, report);
        self.status.promoted_bytes += promoted;
        self.status.demoted_bytes += demoted;
    }
}

/// Publishes what one executor call did, each direction on its own: bytes moved by the
/// granularity they were asked at, pages by outcome, and split fallbacks. Returns the bytes
/// promoted and demoted.
pub(super) fn publish_migration(metrics: &Metrics, label: &str, report: &ExecReport) -> [u64; 2] {
    let mut moved_bytes = [0; 2];
    for (direction, bytes) in [Direction::Promote, Direction::Demote]
        .into_iter()
        .zip(&mut moved_bytes)
    {
        let side = report.direction(direction);
        let name = match direction {
            Direction::Promote => "promote",
            Direction::Demote => "demote",
        };
        for (&granularity, &pages) in &side.moved_by_granularity {
            let class = match granularity {
                g if g >= SUPERPAGE_SIZE => "2m",
                g if g >= 64 << 10 => "64k",
                _ => "4k",
            };
            let moved = pages * PAGE_SIZE;
            *bytes += moved;
            metrics
                .migrated_bytes
                .get_or_create(&Migrated {
                    target: label.to_owned(),
                    direction: name.to_owned(),
                    granularity: class.to_owned(),
                })
                .inc_by(moved);
        }
        count_pages(metrics, label, name, side, report.aborted.is_some());
    }
    for (reason, count) in &report.split_fallbacks {
        metrics
            .migration_failures
            .get_or_create(&Reason {
                reason: format!("split_{reason}"),
            })
            .inc_by(*count);
    }
    moved_bytes
}

/// Per-page outcomes of one direction of an executor call: moved, failed by reason, and the
/// pages an exit of the target left unattempted (`target_exited`), which would otherwise vanish
/// from the counts.
pub(super) fn count_pages(
    metrics: &Metrics,
    label: &str,
    direction: &str,
    side: &DirectionReport,
    aborted: bool,
) {
    metrics
        .migration_pages
        .get_or_create(&PageResult {
            target: label.to_owned(),
            direction: direction.to_owned(),
            result: "moved".to_owned(),
        })
        .inc_by(side.pages_moved);
    let exited = aborted.then_some(("target_exited", side.aborted_pages));
    for (reason, pages) in side
        .failures
        .iter()
        .map(|(reason, pages)| (*reason, *pages))
        .chain(exited)
    {
        metrics
            .migration_pages
            .get_or_create(&PageResult {
                target: label.to_owned(),
                direction: direction.to_owned(),
                result: reason.to_owned(),
            })
            .inc_by(pages);
        metrics
            .migration_failures
            .get_or_create(&Reason {
                reason: reason.to_owned(),
            })
            .inc_by(pages);
    }
}
