//! One epoch of a target: where its pages are, what the epoch's accesses say by tier, the plan,
//! and its execution (or, in observe mode, the moves it assumes). The outcome, with what the
//! epoch measured on the way (its migration CPU, pages newly left alone), goes to `report`,
//! which publishes it; nothing here touches metrics.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use memtide_core::{
    engine::EngineStats,
    policy::{CapacityView, FastShare, Plan},
    units::Direction,
};
use memtide_host::{
    exec::ExecReport,
    targets::{Target, TargetError, placement::TierPlacement},
    topology::{ThpMode, Topology},
};

use super::{
    State,
    observe::AssumedView,
    query::{self, Mappings, QUERY_BUDGET_PAGES},
    resident::Resident,
    views::{EpochInput, TierView, knows_sampled_pages, tier_view},
};
use crate::cpu_time::{ThreadStopwatch, thread_cpu_of};

/// How long after a plan that moved nothing a target whose epochs see no samples plans again:
/// its plan changes only as its hotness cools and as free memory changes, and a thousand idle
/// targets waking every second cost the agent a tenth of a core (scripts/bench-scale.sh).
/// Each further plan without samples or moves doubles the wait, up to [`IDLE_REPLAN_MAX`]; the
/// first sample ends the wait at once.
pub(super) const IDLE_REPLAN: Duration = Duration::from_secs(10);
/// The longest wait of a quiet target: a thousand targets that saw nothing for minutes plan
/// six times a second in all.
pub(super) const IDLE_REPLAN_MAX: Duration = Duration::from_secs(160);
/// How long a placement query stays good when memtide moved nothing. Querying is a page-table
/// walk over what the epoch asks about (`query`: up to 16 GiB of pages); between
/// queries only the kernel or another tool can move pages, and the executor verifies every
/// page it moves anyway.
const PLACEMENT_MAX_AGE: Duration = Duration::from_secs(10);
/// The same for a quiet target (nothing sampled since its last plan, which moved nothing):
/// none of its pages was seen in use or moved by memtide, so a query would find what the
/// last one found unless the kernel moved them. Re-asking at each of a thousand idle
/// targets' plans would cost more than the plans.
const QUIET_PLACEMENT_MAX_AGE: Duration = Duration::from_secs(600);

/// How long a target waits for samples before planning again, after `quiet_plans` plans in a
/// row that saw none and moved nothing (0: the last plan saw samples but moved nothing).
pub(super) fn quiet_wait(quiet_plans: u32) -> Duration {
    let doublings = quiet_plans.saturating_sub(1).min(8);
    (IDLE_REPLAN * (1 << doublings)).min(IDLE_REPLAN_MAX)
}

/// One epoch: what it did, and what it measured on the way.
#[derive(Debug)]
pub(super) struct Epoch {
    pub(super) outcome: EpochOutcome,
    pub(super) measured: EpochMeasures,
}

/// What an epoch measured while it ran, handed to `report` as plain values.
#[derive(Debug, Default)]
pub(super) struct EpochMeasures {
    /// CPU time of numa_maps reads, placement queries and migrations.
    pub(super) migration_cpu: Duration,
    /// Pages newly left alone, by reason.
    pub(super) newly_skipped: BTreeMap<&'static str, u64>,
}

impl EpochMeasures {
    /// Runs `work` (reading where pages are, or moving them) and adds its CPU time to the
    /// migration CPU.
    fn migration<T>(&mut self, work: impl FnOnce() -> T) -> T {
        let (result, spent) = thread_cpu_of(work);
        self.migration_cpu += spent;
        result
    }
}

/// What one epoch did.
#[derive(Debug)]
pub(super) enum EpochOutcome {
    /// The target is gone (before the epoch, or during its migration: then with what moved).
    Exited {
        executed: Option<Box<ExecReport>>,
    },
    /// Where the pages are could not be queried: nothing was planned (the error is in the
    /// status).
    NoPlacement,
    Planned(Box<Planned>),
}

/// An epoch that planned.
#[derive(Debug)]
pub(super) struct Planned {
    /// The epoch's sampled accesses and hot set by tier, before the moves.
    pub(super) before: TierView,
    /// The same after the moves (the placement queried again when pages moved).
    pub(super) after: TierView,
    /// Bytes of the target on the fast and the slow nodes, after the moves.
    pub(super) managed: [(&'static str, u64); 2],
    pub(super) plan: Plan,
    /// Observe mode: the plan's moves were only assumed.
    pub(super) observed: bool,
    /// What the executor did, when it ran.
    pub(super) executed: Option<ExecReport>,
    pub(super) stats: EngineStats,
    pub(super) epoch: Duration,
    pub(super) granularity_bytes: u64,
}

impl State {
    /// When a target that sees no samples plans next: [`IDLE_REPLAN`] after its last plan, if
    /// that plan moved nothing, doubled for each plan since that saw nothing either (`None`:
    /// at its epoch, as any target). Until then the last plan still stands, so the task does
    /// not wake at all.
    pub(super) fn idle_until(&self) -> Option<Duration> {
        let at = self.planning.last_plan_at?;
        (!self.planning.last_plan_moved).then_some(at + quiet_wait(self.planning.quiet_plans))
    }

    /// Plans the epoch ending at `now` from what the target saw since the last one, and moves
    /// (or, observing, assumes) what the plan says.
    pub(super) fn epoch(&mut self, now: Duration, input: &EpochInput) -> Epoch {
        let mut measured = EpochMeasures::default();
        let outcome = self.plan_and_move(now, input, &mut measured);
        Epoch { outcome, measured }
    }

    fn plan_and_move(
        &mut self,
        now: Duration,
        input: &EpochInput,
        measured: &mut EpochMeasures,
    ) -> EpochOutcome {
        if self.target.check_alive().is_err() {
            return EpochOutcome::Exited { executed: None };
        }
        let deciding = ThreadStopwatch::start();
        measured.newly_skipped = measured.migration(|| self.refresh_resident(input));
        let (queried_at, placement) = match measured.migration(|| self.placement(input)) {
            Ok(found) => found,
            Err(TargetError::Exited { .. }) => return EpochOutcome::Exited { executed: None },
            Err(error) => {
                self.remember_error(error.to_string());
                return EpochOutcome::NoPlacement;
            }
        };
        let coverage = self.tiering.engine().config().hot_coverage;
        let before = tier_view(input, &placement, coverage);
        // The planner does not see what the application placed itself; the hit ratio does.
        let plan = match placement.without(&self.planning.left_alone) {
            Some(masked) => self.plan(now, &masked),
            None => self.plan(now, &placement),
        };
        // What deciding cost (where the pages are, and the plan), not the moves: those the
        // migration budget bounds. Worked out once here, not at every input the task takes.
        // The budget is a share of a core, so it is charged the thread's CPU time: on a busy
        // machine the wall time also holds the waits for a core, which would space plans out
        // most where the workloads keep every core busy.
        let took = deciding.cpu();
        self.planning
            .plan_budget
            .charge(now, took, self.spec.shares.tenants());
        self.log_plan(&plan, input, took, deciding.wall());
        let observed = self.observing() || self.spec.nodes.is_none();
        let executed = match self.carry_out(&plan, observed, measured) {
            Ok(executed) => executed,
            Err(cut_short) => {
                return EpochOutcome::Exited {
                    executed: Some(cut_short),
                };
            }
        };
        self.remember_plan(now, input, &plan);
        // After the moves: the placement is queried again only if pages moved.
        let moved = executed
            .as_ref()
            .is_some_and(|report| report.total().pages_moved > 0);
        let (placement, after, queried_at) = if moved {
            let ranges: Vec<(u64, u64)> = placement.queried().collect();
            let thp = self.spec.machine.read(&self.spec.root).thp;
            let placement = measured
                .migration(|| query_placement(&self.target, &self.spec.tiers.fast, thp, &ranges))
                .unwrap_or(placement);
            let after = tier_view(input, &placement, coverage);
            (placement, after, Instant::now())
        } else {
            (placement, before, queried_at)
        };
        let managed = self.managed(executed.as_ref());
        if moved {
            self.spec.machine.expire();
            self.spec.shares.held(self.spec.pid, managed[0].1);
        }
        self.planning.placement = Some((queried_at, placement));
        EpochOutcome::Planned(Box::new(Planned {
            before,
            after,
            managed,
            observed,
            executed,
            stats: self.tiering.stats(),
            epoch: self.tiering.epoch(),
            granularity_bytes: self.tiering.granularity().bytes(),
            plan,
        }))
    }

    /// Observing, assumes the plan's moves; else executes them, when there are any and nodes to
    /// move them to. `Err` is the report of a migration the target's exit cut short.
    fn carry_out(
        &mut self,
        plan: &Plan,
        observed: bool,
        measured: &mut EpochMeasures,
    ) -> Result<Option<ExecReport>, Box<ExecReport>> {
        if observed {
            self.assume(plan);
            return Ok(None);
        }
        let Some(nodes) = self.spec.nodes.filter(|_| !plan.moves.is_empty()) else {
            return Ok(None);
        };
        match measured.migration(|| self.execute(plan, nodes)) {
            Ok(report) if report.aborted.is_some() => Err(Box::new(report)),
            Ok(report) => Ok(Some(report)),
            Err(error) => {
                self.remember_error(error);
                Ok(None)
            }
        }
    }

    /// What the next epochs go by: when this plan was made, whether it moved anything, and
    /// how many plans in a row have seen and moved nothing.
    fn remember_plan(&mut self, now: Duration, input: &EpochInput, plan: &Plan) {
        self.planning.homes.age();
        self.planning.last_plan_at = Some(now);
        self.planning.last_plan_moved = !plan.moves.is_empty();
        self.planning.quiet_plans = match input.is_empty() && !self.planning.last_plan_moved {
            true => self.planning.quiet_plans.saturating_add(1),
            false => 0,
        };
    }

    /// What the plan decided and what it was decided on, for `RUST_LOG=memtide=debug`.
    fn log_plan(&self, plan: &Plan, input: &EpochInput, cpu: Duration, wall: Duration) {
        if !tracing::enabled!(tracing::Level::DEBUG) {
            return;
        }
        let stats = self.tiering.stats();
        tracing::debug!(
            pid = self.spec.pid,
            epoch = self.status.epochs + 1,
            moves = plan.moves.len(),
            promote = plan.promote_bytes,
            demote = plan.demote_bytes,
            would_promote = plan.would_promote_bytes,
            would_demote = plan.would_demote_bytes,
            room = plan.promote_room,
            share = ?self.planning.share.bytes,
            budget = plan.promote_budget,
            granularity = plan.granularity.bytes(),
            threshold_ns = plan.benefit_threshold_ns,
            stage2 = stats.stage2_superpages,
            hot_superpages = stats.hot_superpages,
            hot_subpages = self.tiering.hot_page_stats().hot_subpages,
            regions = input.regions.len(),
            accessed_regions = input.regions.values().filter(|r| r.nr_accesses > 0).count(),
            samples = input.pages.len(),
            decided_us = wall.as_micros(),
            decided_cpu_us = cpu.as_micros(),
            "planned"
        );
    }

    /// How old a placement query may be for this epoch's plan.
    fn placement_max_age(&self, input: &EpochInput) -> Duration {
        match input.is_empty() && !self.planning.last_plan_moved {
            true => QUIET_PLACEMENT_MAX_AGE,
            false => PLACEMENT_MAX_AGE,
        }
    }

    /// Where the target's pages are: the cached query while it is young and knows the pages
    /// sampled this epoch, else a new one.
    fn placement(&mut self, input: &EpochInput) -> Result<(Instant, TierPlacement), TargetError> {
        match self.planning.placement.take() {
            Some((at, placement))
                if at.elapsed() < self.placement_max_age(input)
                    && knows_sampled_pages(&placement, input) =>
            {
                Ok((at, placement))
            }
            _ => {
                let migratable: Vec<(u64, u64)> = self
                    .target
                    .maps()?
                    .into_iter()
                    .filter(|m| m.is_migratable())
                    .map(|m| (m.start, m.end))
                    .collect();
                self.planning.left_alone = self
                    .planning
                    .resident
                    .as_ref()
                    .map(|resident| resident.ranges_left_alone(&migratable))
                    .unwrap_or_default();
                let mappings = Mappings::new(migratable);
                let view = self.tiering.engine().view();
                let ranges = query::query_ranges(
                    &mappings,
                    view.stage2_superpage_starts(),
                    input.pages.iter().map(|sample| sample.addr),
                    view.tracked_superpages(),
                    &mut self.planning.sweep,
                    QUERY_BUDGET_PAGES,
                );
                let thp = self.spec.machine.read(&self.spec.root).thp;
                Ok((
                    Instant::now(),
                    query_placement(&self.target, &self.spec.tiers.fast, thp, &ranges)?,
                ))
            }
        }
    }

    /// Reads numa_maps again once the last reading is older than the placement may be (or,
    /// where reading it is costly, than keeps that cost to a share of the time:
    /// `Resident::read_interval`): the managed bytes and the mappings to leave alone.
    /// Returns the pages of mappings newly left alone, by reason, and drops the cached
    /// placement, which the planner would see them in.
    fn refresh_resident(&mut self, input: &EpochInput) -> BTreeMap<&'static str, u64> {
        let max_age = self.placement_max_age(input);
        if self
            .planning
            .resident
            .as_ref()
            .is_some_and(|resident| resident.read_at.elapsed() < resident.read_interval(max_age))
        {
            return BTreeMap::new();
        }
        // CPU time, not wall time: a read that waited (preempted, or on the target's mmap
        // lock) must not push the next one out.
        let (fresh, read_cost) = thread_cpu_of(|| {
            let maps = self.target.numa_maps().ok()?;
            let mut fresh = Resident::read(&maps, &self.spec.tiers.fast, &self.spec.tiers.slow);
            // smaps walks the page tables: read it only when something is locked.
            if self.target.locked_bytes().is_ok_and(|locked| locked > 0)
                && let Ok(smaps) = self.target.smaps()
            {
                fresh.add_locked(&smaps);
            }
            Some(fresh)
        });
        let Some(mut fresh) = fresh else {
            return BTreeMap::new();
        };
        fresh.read_cost = read_cost;
        let newly = fresh.newly_left_alone(self.planning.resident.as_ref());
        if !newly.is_empty() {
            self.planning.placement = None;
        }
        self.planning.resident = Some(fresh);
        newly
    }

    /// Bytes of the target on the fast and on the slow nodes: numa_maps' last reading, moved
    /// by what the executor moved since.
    fn managed(&mut self, executed: Option<&ExecReport>) -> [(&'static str, u64); 2] {
        if let (Some(resident), Some(report)) = (self.planning.resident.as_mut(), executed) {
            resident.moved(report);
        }
        let [fast, slow] = self.planning.resident.as_ref().map_or([0, 0], |r| r.bytes);
        [("fast", fast), ("slow", slow)]
    }

    /// The plan for the epoch ending at `now`. Observe mode plans against the placement its
    /// earlier plans would have produced; the gauges, the hit ratio and the cached query keep
    /// the real one.
    fn plan(&mut self, now: Duration, placement: &TierPlacement) -> Plan {
        let machine = self.spec.machine.read(&self.spec.root);
        let mut capacity = capacity_from(
            machine.topology.as_ref(),
            &machine.watermarks,
            &self.spec.tiers.fast,
            &self.spec.tiers.slow,
            self.spec.exec.reserve_bytes,
        );
        [capacity.fast, capacity.slow] = self.spec.costs;
        let observing = self.observing() || self.spec.nodes.is_none();
        if !observing {
            // Migrating (again): what is real is what counts.
            self.planning.assumed.ranges.clear();
            self.planning.assumed.net_promoted_bytes = 0;
        }
        capacity.share = self.fast_share(&capacity);
        let plan = if observing && !self.planning.assumed.ranges.is_empty() {
            let view = AssumedView {
                real: placement,
                assumed: &self.planning.assumed,
            };
            self.tiering.plan(now, &view, &capacity)
        } else {
            self.tiering.plan(now, placement, &capacity)
        };
        self.planning.last_would_promote = plan.would_promote_bytes;
        plan
    }

    /// The target's share of the fast tier (`shares`): its limit, or its fair share while the
    /// targets want more of the fast tier than they can have.
    fn fast_share(&mut self, capacity: &CapacityView) -> Option<FastShare> {
        // Observe mode plans against the moves it assumed: so does the share.
        let held = self
            .fast_held()
            .saturating_add_signed(self.planning.assumed.net_promoted_bytes);
        let limit = self
            .limit()
            .map(|limit| limit.amount.bytes(capacity.fast_total_bytes));
        let room = self.spec.tiering.policy.capacity.promote_room(capacity);
        let want = held.saturating_add(self.planning.last_would_promote);
        self.planning.share = self
            .spec
            .shares
            .share(self.spec.pid, limit, held, want, room);
        self.planning.share.bytes.map(|limit_bytes| FastShare {
            limit_bytes,
            held_bytes: held,
        })
    }

    /// Bytes of the target on the fast nodes: numa_maps' last reading, moved by what memtide
    /// moved since.
    pub(super) fn fast_held(&self) -> u64 {
        self.planning
            .resident
            .as_ref()
            .map_or(0, |resident| resident.bytes[0])
    }

    /// Observe mode: from now on the plans assume the plan's moves were made.
    fn assume(&mut self, plan: &Plan) {
        let net = i64::try_from(plan.promote_bytes).unwrap_or(i64::MAX)
            - i64::try_from(plan.demote_bytes).unwrap_or(i64::MAX);
        self.planning.assumed.net_promoted_bytes =
            self.planning.assumed.net_promoted_bytes.saturating_add(net);
        for planned in &plan.moves {
            self.planning.assumed.record(
                planned.start,
                planned.start + planned.len,
                planned.direction == Direction::Promote,
            );
        }
    }
}

/// The tiers' sizes and the free memory migrations may use: on each node, what is free above
/// its zones' high watermark plus the executor's reserve (`[migration] reserve_bytes`), the
/// floor the executor never moves pages below. Planning against raw free memory would plan
/// promotions the executor then refuses, and never plan the demotions that would make room.
pub(super) fn capacity_from(
    topology: Option<&Topology>,
    watermarks: &BTreeMap<u32, memtide_host::exec::watermark::NodeWatermarks>,
    fast: &[u32],
    slow: &[u32],
    reserve: u64,
) -> CapacityView {
    let sum = |nodes: &[u32], free: bool| -> u64 {
        nodes
            .iter()
            .filter_map(|id| topology?.node(*id))
            .map(|node| match free {
                true => room_above_floor(node, watermarks, reserve),
                false => node.memory_bytes,
            })
            .sum()
    };
    CapacityView {
        fast_total_bytes: sum(fast, false),
        fast_free_bytes: sum(fast, true),
        slow_total_bytes: sum(slow, false),
        slow_free_bytes: sum(slow, true),
        fast: memtide_core::policy::TierCost::default(),
        slow: memtide_core::policy::TierCost::default(),
        share: None,
    }
}

/// What migrations may fill on `node`: its free memory above its zones' high watermark plus
/// the executor's reserve.
pub(super) fn room_above_floor(
    node: &memtide_host::topology::Node,
    watermarks: &BTreeMap<u32, memtide_host::exec::watermark::NodeWatermarks>,
    reserve: u64,
) -> u64 {
    let floor = watermarks.get(&node.id).map_or(0, |w| w.high);
    node.free_bytes
        .saturating_sub(floor.saturating_add(reserve))
}

/// Queries where the pages of `ranges` (sorted, disjoint `[start, end)`) are; huge pages are
/// presumed where THP maps every superpage huge.
fn query_placement(
    target: &Target,
    fast_nodes: &[u32],
    thp: Option<ThpMode>,
    ranges: &[(u64, u64)],
) -> Result<TierPlacement, TargetError> {
    let mut placement =
        TierPlacement::new(fast_nodes.to_vec()).with_huge_presumed(thp == Some(ThpMode::Always));
    placement.query_all(target, ranges)?;
    Ok(placement)
}
