//! One task per managed process: samples in, an engine, and at every epoch a plan that is
//! executed (or, in observe mode, only counted), with the metrics and status it produces.
//!
//! The epoch step does system calls (move_pages queries and moves) and can take milliseconds,
//! so it runs on the blocking pool with the task's state moved in and back out: the async
//! side never blocks, and the ingest path keeps draining while a target migrates.

use std::{
    collections::BTreeMap,
    sync::{Arc, RwLock},
    time::{Duration, Instant},
};

use memtide_common::{AccessKind, AccessSample};
use tokio::sync::mpsc;

use super::status::{AgentStatus, TargetStatus};
use crate::metrics::{
    Metrics, Migrated, PageResult, Reason, TargetDirection, TargetLabel, TargetTier,
};
use memtide_core::{
    engine::{DamonObservation, Sample},
    policy::{CapacityView, PlacementView, Plan},
    tiering::{Tiering, TieringConfig},
    units::{Direction, Residency, SUBPAGES, Tier},
};
use memtide_host::{
    exec::{ExecConfig, ExecReport, Executor, KernelBackend, TierNodes, requests_from_plan},
    sysfs::HostRoot,
    targets::{
        Target, TargetError,
        placement::{NodeCounts, TierPlacement},
    },
    topology::Topology,
};

/// Pages of a target queried per epoch at most; beyond this the placement view is partial
/// (counted in the status) so one huge process cannot stall the agent.
const MAX_QUERY_PAGES: u64 = 4 << 20;
/// Sampled pages remembered per epoch for the hit ratio.
const MAX_SAMPLED_PAGES: usize = 1 << 16;
const PAGE: u64 = 4096;
/// How long a placement query stays good when memtide moved nothing. Querying is a page-table
/// walk over the whole target (most of an idle agent's CPU when done every epoch); between
/// queries only the kernel or another tool can move pages, and the executor verifies every
/// page it moves anyway.
const PLACEMENT_MAX_AGE: Duration = Duration::from_secs(10);

/// Why the agent only observes (`Some`), read by every target at each epoch.
pub type ObserveSwitch = Arc<RwLock<Option<String>>>;

/// Everything a target task needs to start.
#[derive(Debug, Clone)]
pub struct TargetSpec {
    pub pid: u32,
    /// The metrics label.
    pub label: String,
    pub tiering: TieringConfig,
    pub exec: ExecConfig,
    /// `Some(reason)`: plan but do not move. Shared by every target and the agent, so a
    /// reload or a hotplug that turns observe mode on or off reaches running targets too.
    pub observe: ObserveSwitch,
    pub fast_nodes: Vec<u32>,
    pub slow_nodes: Vec<u32>,
    /// Where promotions and demotions go.
    pub nodes: Option<TierNodes>,
    pub root: HostRoot,
}

/// The state moved between the async loop and the blocking epoch step.
struct State {
    spec: TargetSpec,
    target: Target,
    tiering: Tiering,
    executor: Executor,
    status: TargetStatus,
    /// The last placement query and when it ran.
    placement: Option<(Instant, TierPlacement)>,
    /// `untracked_samples` already counted in the metric.
    untracked_published: u64,
    /// Observe mode: where the plans so far would have put memory.
    assumed: Assumed,
}

/// What observe mode assumes moved: the ranges its plans would have migrated, by the tier
/// they would now be on, non-overlapping and merged. Each plan sees the placement with these
/// applied, so a range is counted as "would move" once, as a migrating agent moves it once,
/// instead of at every epoch for as long as it stays hot.
#[derive(Debug, Default)]
struct Assumed {
    /// start → (end, on the fast tier).
    ranges: BTreeMap<u64, (u64, bool)>,
}

impl Assumed {
    /// Records `[start, end)` as moved to the fast (or slow) tier, replacing what was assumed
    /// there before.
    fn record(&mut self, start: u64, end: u64, fast: bool) {
        if start >= end {
            return;
        }
        // Cut what overlaps, keeping the parts outside [start, end).
        let overlapping: Vec<(u64, (u64, bool))> = self
            .ranges
            .range(..end)
            .rev()
            .take_while(|(_, (e, _))| *e > start)
            .map(|(s, v)| (*s, *v))
            .collect();
        for (s, (e, f)) in overlapping {
            self.ranges.remove(&s);
            if s < start {
                self.ranges.insert(s, (start, f));
            }
            if e > end {
                self.ranges.insert(end, (e, f));
            }
        }
        let (mut start, mut end) = (start, end);
        // Merge with touching neighbours on the same tier.
        if let Some((&s, &(e, f))) = self.ranges.range(..start).next_back()
            && e == start
            && f == fast
        {
            self.ranges.remove(&s);
            start = s;
        }
        if let Some(&(e, f)) = self.ranges.get(&end)
            && f == fast
        {
            self.ranges.remove(&end);
            end = e;
        }
        self.ranges.insert(start, (end, fast));
    }

    /// The assumed ranges overlapping `[start, end)`, clipped to it: (start, end, fast).
    fn overlapping(&self, start: u64, end: u64) -> impl Iterator<Item = (u64, u64, bool)> + '_ {
        let first = self
            .ranges
            .range(..=start)
            .next_back()
            .map_or(start, |(&s, _)| s);
        self.ranges
            .range(first..end)
            .filter(move |(_, (e, _))| *e > start)
            .map(move |(&s, &(e, fast))| (s.max(start), e.min(end), fast))
    }
}

/// The placement observe mode plans against: the real one (the query, untouched, so the
/// gauges and the cached query stay true), with the moves earlier plans would have made laid
/// over its resident pages.
struct AssumedView<'a> {
    real: &'a TierPlacement,
    assumed: &'a Assumed,
}

impl PlacementView for AssumedView<'_> {
    fn tier_of(&self, page: u64) -> Option<Tier> {
        let real = self.real.tier_of(page)?;
        Some(match self.assumed.overlapping(page, page + PAGE).next() {
            Some((_, _, true)) => Tier::Fast,
            Some((_, _, false)) => Tier::Slow,
            None => real,
        })
    }

    fn residency(&self, superpage: u64) -> Residency {
        let mut residency = self.real.residency(superpage);
        let end = superpage + SUBPAGES as u64 * PAGE;
        for (start, stop, fast) in self.assumed.overlapping(superpage, end) {
            let tier = if fast { Tier::Fast } else { Tier::Slow };
            let first = usize::try_from((start - superpage) / PAGE).unwrap_or(SUBPAGES);
            let last = usize::try_from((stop - superpage).div_ceil(PAGE)).unwrap_or(SUBPAGES);
            for page in first..last.min(SUBPAGES) {
                if residency.tier(page).is_some() {
                    residency.set(page, Some(tier));
                }
            }
        }
        residency
    }

    fn for_each_fast_range(&self, visit: &mut dyn FnMut(u64, u64)) {
        // Really fast runs without what is assumed demoted, plus the resident pages of what
        // is assumed promoted, merged in address order.
        let mut pieces: Vec<(u64, u64)> = Vec::new();
        self.real.for_each_fast_run(&mut |start, len| {
            let mut from = start;
            for (s, e, fast) in self.assumed.overlapping(start, start + len) {
                if !fast {
                    if s > from {
                        pieces.push((from, s));
                    }
                    from = e;
                }
            }
            if from < start + len {
                pieces.push((from, start + len));
            }
        });
        for (&start, &(end, fast)) in &self.assumed.ranges {
            if !fast {
                continue;
            }
            let pages = usize::try_from((end - start).div_ceil(PAGE)).unwrap_or(usize::MAX);
            self.real.visit_pages(start, pages, &mut |index, status| {
                let page = start + index as u64 * PAGE;
                if status.node().is_some() && self.real.is_fast(page) == Some(false) {
                    pieces.push((page, page + PAGE));
                }
            });
        }
        pieces.sort_unstable();
        let mut current: Option<(u64, u64)> = None;
        for (start, end) in pieces {
            match current {
                Some((s, e)) if start <= e => current = Some((s, e.max(end))),
                Some((s, e)) => {
                    visit(s, e - s);
                    current = Some((start, end));
                }
                None => current = Some((start, end)),
            }
        }
        if let Some((s, e)) = current {
            visit(s, e - s);
        }
    }
}

/// A sample stands for `period` accesses: the BPF program stamps the sample period as its
/// weight.
fn to_engine_sample(sample: &AccessSample) -> Sample {
    Sample {
        addr: sample.addr,
        kind: AccessKind::from_u8(sample.kind),
        weight: u32::try_from(sample.weight).unwrap_or(u32::MAX).max(1),
    }
}

/// The smallest set of distinct pages, hottest first, covering `coverage` of the epoch's
/// samples (Rainbow's hot-set definition), as page addresses.
fn sampled_hot_set(sampled: &[u64], coverage: f64) -> Vec<u64> {
    let mut pages: Vec<u64> = sampled.iter().map(|addr| addr & !(PAGE - 1)).collect();
    pages.sort_unstable();
    let mut counts: Vec<(u64, u64)> = Vec::new();
    for page in pages {
        match counts.last_mut() {
            Some((last, count)) if *last == page => *count += 1,
            _ => counts.push((page, 1)),
        }
    }
    counts.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "a share of a sample count"
    )]
    let goal = (sampled.len() as f64 * coverage).ceil() as u64;
    let mut covered = 0;
    counts
        .into_iter()
        .take_while(|(_, count)| {
            let take = covered < goal;
            covered += count;
            take
        })
        .map(|(page, _)| page)
        .collect()
}

fn bytes_on(counts: &NodeCounts, nodes: &[u32]) -> u64 {
    nodes.iter().map(|&node| counts.on(node)).sum::<u64>() * PAGE
}

/// The tiers' sizes and the free memory migrations may use: on each node, what is free above
/// its zones' high watermark plus the executor's reserve (`[migration] reserve_bytes`), the
/// floor the executor never moves pages below. Planning against raw free memory would plan
/// promotions the executor then refuses, and never plan the demotions that would make room.
fn capacity_view(root: &HostRoot, fast: &[u32], slow: &[u32], reserve: u64) -> CapacityView {
    let topology = Topology::read(root).ok();
    let watermarks = memtide_host::exec::watermark::read_watermarks(root).unwrap_or_default();
    capacity_from(topology.as_ref(), &watermarks, fast, slow, reserve)
}

fn capacity_from(
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
            .map(|node| {
                if free {
                    let floor = watermarks.get(&node.id).map_or(0, |w| w.high);
                    node.free_bytes
                        .saturating_sub(floor.saturating_add(reserve))
                } else {
                    node.memory_bytes
                }
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
    }
}

/// What a target saw between two epochs.
#[derive(Debug, Default)]
struct EpochInput {
    /// Addresses of sampled accesses (per-access sources).
    pages: Vec<u64>,
    /// The latest DAMON report per region start (DAMON).
    regions: BTreeMap<u64, DamonObservation>,
}

/// Sampled accesses and the hot set, by the tier their pages are on.
#[derive(Debug, Default, PartialEq, Eq)]
struct TierView {
    fast_accesses: u64,
    slow_accesses: u64,
    hot_fast_bytes: u64,
    hot_slow_bytes: u64,
}

fn sample_view(sampled: &[u64], placement: &TierPlacement, coverage: f64) -> TierView {
    let mut view = TierView::default();
    for &addr in sampled {
        match placement.is_fast(addr & !(PAGE - 1)) {
            Some(true) => view.fast_accesses += 1,
            Some(false) => view.slow_accesses += 1,
            None => {}
        }
    }
    for page in sampled_hot_set(sampled, coverage) {
        match placement.is_fast(page) {
            Some(false) => view.hot_slow_bytes += PAGE,
            // Not resident any more counts where it was sampled: fast is the optimistic guess
            // only when the page is known fast; unknown pages are left out.
            Some(true) => view.hot_fast_bytes += PAGE,
            None => {}
        }
    }
    view
}

/// DAMON reports regions, not pages: each region's accesses (`nr_accesses` × pages) are split
/// by the share of its resident pages on each tier (checked on up to 256 pages per region),
/// and the hot set is the smallest set of regions, hottest first, covering `coverage` of all
/// accesses.
fn damon_view<'a>(
    regions: impl Iterator<Item = &'a DamonObservation>,
    placement: &TierPlacement,
    coverage: f64,
) -> TierView {
    let mut weighted: Vec<(u32, u64, u64, f64)> = Vec::new();
    for region in regions {
        let pages = region.end.saturating_sub(region.start) / PAGE;
        if pages == 0 {
            continue;
        }
        let step = (pages / 256).max(1);
        let (mut fast, mut resident) = (0u64, 0u64);
        let mut page = 0;
        while page < pages {
            match placement.is_fast(region.start + page * PAGE) {
                Some(true) => {
                    fast += 1;
                    resident += 1;
                }
                Some(false) => resident += 1,
                None => {}
            }
            page += step;
        }
        if resident == 0 {
            continue;
        }
        #[expect(clippy::cast_precision_loss, reason = "a share of page counts")]
        let fast_share = fast as f64 / resident as f64;
        weighted.push((region.nr_accesses, region.start, pages, fast_share));
    }
    let mut view = TierView::default();
    let mut total = 0u64;
    for &(accesses, _, pages, share) in &weighted {
        let weight = u64::from(accesses) * pages;
        total += weight;
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss,
            reason = "splitting an access count by a share in [0, 1]"
        )]
        let fast = (weight as f64 * share).round() as u64;
        view.fast_accesses += fast;
        view.slow_accesses += weight - fast.min(weight);
    }
    weighted.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss,
        reason = "a share of an access count"
    )]
    let goal = (total as f64 * coverage).ceil() as u64;
    let mut covered = 0u64;
    for (accesses, _, pages, share) in weighted {
        if covered >= goal || accesses == 0 {
            break;
        }
        covered += u64::from(accesses) * pages;
        let bytes = pages * PAGE;
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss,
            reason = "splitting bytes by a share in [0, 1]"
        )]
        let fast = (bytes as f64 * share).round() as u64;
        view.hot_fast_bytes += fast;
        view.hot_slow_bytes += bytes - fast.min(bytes);
    }
    view
}

/// The epoch's accesses and hot set by tier, from whichever kind of input the source gave.
fn tier_view(input: &EpochInput, placement: &TierPlacement, coverage: f64) -> TierView {
    if input.regions.is_empty() {
        sample_view(&input.pages, placement, coverage)
    } else {
        damon_view(input.regions.values(), placement, coverage)
    }
}

/// Whether a cached placement still describes most of the pages sampled this epoch. Pages it
/// does not know were absent at the query (discarded, not yet faulted in, newly mapped): a view
/// that misses them would report no hot bytes until the cache expires.
fn knows_sampled_pages(placement: &TierPlacement, input: &EpochInput) -> bool {
    const CHECKED: usize = 256;
    let checked = input.pages.iter().take(CHECKED);
    let (known, total) = checked.fold((0usize, 0usize), |(known, total), &page| {
        (
            known + usize::from(placement.node_of(page & !(PAGE - 1)).is_some()),
            total + 1,
        )
    });
    known * 2 >= total
}

/// Queries where the target's migratable memory is.
fn placement_of(target: &Target, fast_nodes: &[u32]) -> Result<TierPlacement, TargetError> {
    let mut placement = TierPlacement::new(fast_nodes.to_vec());
    let mut budget = MAX_QUERY_PAGES * PAGE;
    for mapping in target.maps()?.into_iter().filter(|m| m.is_migratable()) {
        let len = (mapping.end - mapping.start).min(budget);
        if len == 0 {
            break;
        }
        placement.query(target, mapping.start, len)?;
        budget -= len;
    }
    Ok(placement)
}

/// The outcome of one epoch, for the async side.
enum Epoch {
    Done,
    Exited,
}

impl State {
    fn observing(&self) -> bool {
        match self.spec.observe.read() {
            Ok(reason) => reason.is_some(),
            // A writer panicked mid-update: err on the side of moving nothing.
            Err(_) => true,
        }
    }

    fn remember_error(&mut self, error: String) {
        self.status.last_errors.push(error);
        let excess = self.status.last_errors.len().saturating_sub(3);
        self.status.last_errors.drain(..excess);
    }

    fn epoch(&mut self, now: Duration, input: &EpochInput, metrics: &Metrics) -> Epoch {
        if self.target.check_alive().is_err() {
            return Epoch::Exited;
        }
        let label = self.spec.label.clone();
        let (queried_at, placement) = match self.placement.take() {
            Some((at, placement))
                if at.elapsed() < PLACEMENT_MAX_AGE && knows_sampled_pages(&placement, input) =>
            {
                (at, placement)
            }
            _ => match placement_of(&self.target, &self.spec.fast_nodes) {
                Ok(placement) => (Instant::now(), placement),
                Err(TargetError::Exited { .. }) => return Epoch::Exited,
                Err(error) => {
                    self.remember_error(error.to_string());
                    return Epoch::Done;
                }
            },
        };

        // Hit ratio over the accesses sampled since the last epoch.
        let coverage = self.tiering.engine().config().hot_coverage;
        let view = tier_view(input, &placement, coverage);
        for (tier, count) in [("fast", view.fast_accesses), ("slow", view.slow_accesses)] {
            metrics
                .accesses_sampled
                .get_or_create(&TargetTier {
                    target: label.clone(),
                    tier: tier.to_owned(),
                })
                .inc_by(count);
        }
        let (fast, slow) = (view.fast_accesses, view.slow_accesses);
        if fast + slow > 0 {
            #[expect(clippy::cast_precision_loss, reason = "a ratio of sample counts")]
            let ratio = fast as f64 / (fast + slow) as f64;
            self.status.fast_hit_ratio = Some(ratio);
            metrics
                .fast_tier_hit_ratio
                .get_or_create(&TargetLabel {
                    target: label.clone(),
                })
                .set(ratio);
        }

        let capacity = capacity_view(
            &self.spec.root,
            &self.spec.fast_nodes,
            &self.spec.slow_nodes,
            self.spec.exec.reserve_bytes,
        );
        // Observe mode plans against the placement its earlier plans would have produced; the
        // gauges, the hit ratio and the cached query keep the real one.
        let observing = self.observing() || self.spec.nodes.is_none();
        if !observing {
            // Migrating (again): what is real is what counts.
            self.assumed.ranges.clear();
        }
        let plan = if observing && !self.assumed.ranges.is_empty() {
            let view = AssumedView {
                real: &placement,
                assumed: &self.assumed,
            };
            self.tiering.plan(now, &view, &capacity)
        } else {
            self.tiering.plan(now, &placement, &capacity)
        };
        self.status.epochs += 1;
        let stats = self.tiering.stats();
        tracing::debug!(
            pid = self.spec.pid,
            epoch = self.status.epochs,
            moves = plan.moves.len(),
            promote = plan.promote_bytes,
            demote = plan.demote_bytes,
            would_promote = plan.would_promote_bytes,
            would_demote = plan.would_demote_bytes,
            room = plan.promote_room,
            budget = plan.promote_budget,
            granularity = plan.granularity.bytes(),
            threshold_ns = plan.benefit_threshold_ns,
            stage2 = stats.stage2_superpages,
            hot_superpages = stats.hot_superpages,
            hot_subpages = stats.hot_subpages,
            regions = input.regions.len(),
            accessed_regions = input.regions.values().filter(|r| r.nr_accesses > 0).count(),
            samples = input.pages.len(),
            "planned"
        );
        self.record_plan(&plan, metrics);
        let mut moved = false;
        if !self.observing()
            && let Some(nodes) = self.spec.nodes
            && !plan.moves.is_empty()
        {
            match self.execute(&plan, nodes, metrics) {
                Ok(report) if report.aborted.is_some() => {
                    tracing::info!(
                        pid = self.spec.pid,
                        target = %self.spec.label,
                        moved = report.pages_moved,
                        not_attempted = report.aborted_pages,
                        "target exited during migration"
                    );
                    return Epoch::Exited;
                }
                Ok(report) => moved = report.pages_moved > 0,
                Err(error) => self.remember_error(error),
            }
        }

        // Gauges after the moves: hot and managed bytes by tier. The placement is queried
        // again only if pages moved.
        let (placement, view, queried_at) = if moved {
            let placement = placement_of(&self.target, &self.spec.fast_nodes).unwrap_or(placement);
            let view = tier_view(input, &placement, coverage);
            (placement, view, Instant::now())
        } else {
            (placement, view, queried_at)
        };
        for (tier, value) in [("fast", view.hot_fast_bytes), ("slow", view.hot_slow_bytes)] {
            metrics
                .hot_bytes
                .get_or_create(&TargetTier {
                    target: label.clone(),
                    tier: tier.to_owned(),
                })
                .set(i64::try_from(value).unwrap_or(i64::MAX));
        }
        let counts = placement.counts();
        let managed = [
            ("fast", bytes_on(&counts, &self.spec.fast_nodes)),
            ("slow", bytes_on(&counts, &self.spec.slow_nodes)),
        ];
        for (tier, value) in managed {
            metrics
                .managed_bytes
                .get_or_create(&TargetTier {
                    target: label.clone(),
                    tier: tier.to_owned(),
                })
                .set(i64::try_from(value).unwrap_or(i64::MAX));
        }
        let stats = self.tiering.stats();
        let untracked = stats
            .untracked_samples
            .saturating_sub(self.untracked_published);
        if untracked > 0 {
            if self.untracked_published == 0 {
                tracing::warn!(
                    pid = self.spec.pid,
                    max = self.tiering.engine().config().max_superpages,
                    "engine at [engine] max_superpages; samples of new superpages are left out (memtide_engine_untracked_samples_total)"
                );
            }
            self.untracked_published = stats.untracked_samples;
            metrics
                .engine_untracked_samples
                .get_or_create(&TargetLabel {
                    target: label.clone(),
                })
                .inc_by(untracked);
        }
        let epoch_seconds = self.tiering.epoch().as_secs_f64();
        metrics
            .epoch_seconds
            .get_or_create(&TargetLabel {
                target: label.clone(),
            })
            .set(epoch_seconds);
        metrics
            .granularity_bytes
            .get_or_create(&TargetLabel { target: label })
            .set(i64::try_from(self.tiering.granularity().bytes()).unwrap_or(i64::MAX));
        self.status.managed_bytes = managed
            .iter()
            .map(|(tier, value)| ((*tier).to_owned(), *value))
            .collect::<BTreeMap<_, _>>();
        self.status.hot_bytes = view.hot_fast_bytes + view.hot_slow_bytes;
        self.status.granularity_bytes = self.tiering.granularity().bytes();
        self.status.epoch_seconds = epoch_seconds;
        self.status.engine_memory_bytes = stats.memory_bytes;
        self.placement = Some((queried_at, placement));
        Epoch::Done
    }

    fn record_plan(&mut self, plan: &Plan, metrics: &Metrics) {
        if !self.observing() && self.spec.nodes.is_some() {
            return;
        }
        // Observe mode: what the plan would have moved, had migration been on: the bytes that
        // would change tier. From now on the plans assume it did.
        for planned in &plan.moves {
            self.assumed.record(
                planned.start,
                planned.start + planned.len,
                planned.direction == Direction::Promote,
            );
        }
        let would = [plan.promote_bytes, plan.demote_bytes];
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

    fn execute(
        &mut self,
        plan: &Plan,
        nodes: TierNodes,
        metrics: &Metrics,
    ) -> Result<ExecReport, String> {
        let requests = requests_from_plan(plan, nodes);
        let mut backend =
            KernelBackend::new(&self.target, self.spec.root.clone()).map_err(|e| e.to_string())?;
        let report = self
            .executor
            .execute(&mut backend, &requests, Instant::now())
            .map_err(|e| e.to_string())?;
        let label = &self.spec.label;
        // Bytes by direction and granularity, from what was requested and the share that
        // moved (the executor verifies per page; granularity is per request).
        #[expect(clippy::cast_precision_loss, reason = "a ratio of page counts")]
        let moved_share = if report.pages_attempted == 0 {
            0.0
        } else {
            (report.pages_moved as f64 / report.pages_attempted.max(report.pages_moved) as f64)
                .min(1.0)
        };
        for request in &requests {
            let granularity = match request.granularity {
                g if g >= 2 << 20 => "2m",
                g if g >= 64 << 10 => "64k",
                _ => "4k",
            };
            let direction = match request.direction {
                Direction::Promote => "promote",
                Direction::Demote => "demote",
            };
            #[expect(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                clippy::cast_precision_loss,
                reason = "bytes scaled by a share in [0, 1]"
            )]
            let bytes = (request.len as f64 * moved_share) as u64;
            metrics
                .migrated_bytes
                .get_or_create(&Migrated {
                    target: label.clone(),
                    direction: direction.to_owned(),
                    granularity: granularity.to_owned(),
                })
                .inc_by(bytes);
            if direction == "promote" {
                self.status.promoted_bytes += bytes;
            } else {
                self.status.demoted_bytes += bytes;
            }
        }
        let direction = if plan.promote_bytes >= plan.demote_bytes {
            "promote"
        } else {
            "demote"
        };
        count_pages(metrics, label, direction, &report);
        Ok(report)
    }
}

/// Per-page outcomes of one executor call: moved, failed by reason, and the pages an exit of
/// the target left unattempted (`target_exited`), which would otherwise vanish from the counts.
fn count_pages(metrics: &Metrics, label: &str, direction: &str, report: &ExecReport) {
    metrics
        .migration_pages
        .get_or_create(&PageResult {
            target: label.to_owned(),
            direction: direction.to_owned(),
            result: "moved".to_owned(),
        })
        .inc_by(report.pages_moved);
    let exited = report
        .aborted
        .is_some()
        .then_some(("target_exited", report.aborted_pages));
    for (reason, pages) in report
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
    for (reason, count) in &report.split_fallbacks {
        metrics
            .migration_failures
            .get_or_create(&Reason {
                reason: format!("split_{reason}"),
            })
            .inc_by(*count);
    }
}

/// Handle the main loop keeps for a running target task. Dropping both senders ends it.
#[derive(Debug)]
pub struct TargetHandle {
    /// Sample batches, handed to the ingest router.
    pub samples: mpsc::Sender<Vec<AccessSample>>,
    /// DAMON observations, from the main loop's DAMON dispatcher.
    pub damon: mpsc::Sender<Vec<DamonObservation>>,
    pub task: tokio::task::JoinHandle<()>,
}

/// Opens the target and starts its task. `origin` is the agent's clock origin.
pub fn spawn(
    spec: TargetSpec,
    queue: usize,
    origin: Instant,
    metrics: Metrics,
    status: Arc<RwLock<AgentStatus>>,
) -> Result<TargetHandle, String> {
    let target = Target::open(spec.pid).map_err(|e| e.to_string())?;
    let tiering = Tiering::new(spec.tiering.clone()).map_err(|e| e.to_string())?;
    let executor = Executor::new(spec.exec.clone());
    metrics.register_target(&spec.label);
    let (samples, samples_rx) = mpsc::channel(queue.max(1));
    let (damon, damon_rx) = mpsc::channel(queue.max(1));
    let state = State {
        status: TargetStatus {
            target: spec.label.clone(),
            pid: spec.pid,
            ..TargetStatus::default()
        },
        spec,
        target,
        tiering,
        executor,
        placement: None,
        untracked_published: 0,
        assumed: Assumed::default(),
    };
    let task = tokio::spawn(run(state, samples_rx, damon_rx, origin, metrics, status));
    Ok(TargetHandle {
        samples,
        damon,
        task,
    })
}

fn publish(status: &RwLock<AgentStatus>, target: &TargetStatus) {
    let mut agent = match status.write() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    };
    match agent.targets.iter_mut().find(|t| t.pid == target.pid) {
        Some(row) => *row = target.clone(),
        None => {
            agent.targets.push(target.clone());
            agent.targets.sort_by(|a, b| a.target.cmp(&b.target));
        }
    }
}

fn unpublish(status: &RwLock<AgentStatus>, pid: u32) {
    let mut agent = match status.write() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    };
    agent.targets.retain(|t| t.pid != pid);
}

async fn run(
    mut state: State,
    mut samples_rx: mpsc::Receiver<Vec<AccessSample>>,
    mut damon_rx: mpsc::Receiver<Vec<DamonObservation>>,
    origin: Instant,
    metrics: Metrics,
    status: Arc<RwLock<AgentStatus>>,
) {
    let pid = state.spec.pid;
    let mut input = EpochInput::default();
    let mut samples: Vec<Sample> = Vec::with_capacity(1024);
    publish(&status, &state.status);
    // The first plan comes one epoch after the target was found, not after agent start.
    let first_plan = origin.elapsed() + state.tiering.epoch();
    // An epoch step that fails before planning must still wait an epoch before the next try.
    let mut last_step: Option<Duration> = None;
    loop {
        let due = state.tiering.next_plan_at().unwrap_or(first_plan);
        let due = last_step.map_or(due, |last| due.max(last + state.tiering.epoch()));
        let next_plan = origin + due;
        tokio::select! {
            batch = samples_rx.recv() => {
                let Some(batch) = batch else {
                    tracing::debug!(pid, "sample channel closed");
                    break;
                };
                samples.clear();
                samples.extend(batch.iter().map(to_engine_sample));
                state.tiering.observe_samples(&samples, origin.elapsed());
                state.status.samples += batch.len() as u64;
                let room = MAX_SAMPLED_PAGES.saturating_sub(input.pages.len());
                input.pages.extend(batch.iter().take(room).map(|s| s.addr));
            }
            regions = damon_rx.recv() => {
                let Some(regions) = regions else {
                    tracing::debug!(pid, "DAMON channel closed");
                    break;
                };
                // The latest report of each region stands for the epoch.
                for region in &regions {
                    if input.regions.len() < MAX_SAMPLED_PAGES || input.regions.contains_key(&region.start) {
                        input.regions.insert(region.start, *region);
                    }
                }
                state.status.samples += regions.len() as u64;
                state.tiering.observe_damon(&regions, origin.elapsed());
            }
            () = tokio::time::sleep_until(next_plan.into()) => {
                let now = origin.elapsed();
                last_step = Some(now);
                state.tiering.tick(now);
                let epoch_input = std::mem::take(&mut input);
                let step_metrics = metrics.clone();
                let joined = tokio::task::spawn_blocking(move || {
                    let outcome = state.epoch(now, &epoch_input, &step_metrics);
                    (state, outcome, epoch_input)
                })
                .await;
                let Ok((returned, outcome, mut reused)) = joined else {
                    tracing::error!(pid, "epoch step panicked; dropping the target");
                    unpublish(&status, pid);
                    return;
                };
                state = returned;
                reused.pages.clear();
                reused.regions.clear();
                input = reused;
                publish(&status, &state.status);
                if matches!(outcome, Epoch::Exited) {
                    tracing::info!(pid, target = %state.spec.label, "target exited");
                    break;
                }
            }
        }
    }
    unpublish(&status, pid);
    // Gauges of a gone process would otherwise report its last values forever; counters stay
    // (their totals remain true).
    metrics.forget_target(&state.spec.label);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hot_set_is_the_smallest_hottest_cover() {
        // Page 0x1000 sampled 6 times, 0x2000 3 times, 0x3000 once: 70 % of 10 is 7 samples,
        // which the two hottest pages cover.
        let mut sampled = vec![0x1000; 6];
        sampled.extend([0x2008; 3]);
        sampled.push(0x3010);
        assert_eq!(sampled_hot_set(&sampled, 0.7), [0x1000, 0x2000]);
        assert_eq!(sampled_hot_set(&sampled, 0.5), [0x1000]);
        assert_eq!(sampled_hot_set(&sampled, 1.0).len(), 3);
        assert!(sampled_hot_set(&[], 0.7).is_empty());
    }

    fn placement(fast: &[(u64, u64)], slow: &[(u64, u64)]) -> TierPlacement {
        use memtide_host::sys::mempolicy::PageStatus;
        let mut placement = TierPlacement::new(vec![0]);
        for (ranges, node) in [(fast, 0), (slow, 1)] {
            for &(start, pages) in ranges {
                placement.insert(
                    start,
                    vec![PageStatus::Node(node); usize::try_from(pages).unwrap()],
                );
            }
        }
        placement
    }

    #[test]
    fn a_cached_placement_that_misses_the_sampled_pages_is_queried_again() {
        let placement = placement(&[(0x10_0000, 16)], &[]);
        let input = |pages: &[u64]| EpochInput {
            pages: pages.to_vec(),
            regions: BTreeMap::new(),
        };
        assert!(knows_sampled_pages(
            &placement,
            &input(&[0x10_0010, 0x10_1000, 0x90_0000])
        ));
        assert!(
            !knows_sampled_pages(&placement, &input(&[0x10_0010, 0x90_0000, 0x90_1000])),
            "most samples fall on pages the view has never seen"
        );
        assert!(
            knows_sampled_pages(&placement, &input(&[])),
            "no samples: keep it"
        );
    }

    #[test]
    fn damon_regions_split_accesses_and_hot_bytes_by_tier() {
        // A hot 64-page region on the fast node, a cold 512-page region on the slow node.
        let placement = placement(&[(0x10_0000, 64)], &[(0x20_0000, 512)]);
        let regions = [
            DamonObservation {
                start: 0x10_0000,
                end: 0x10_0000 + 64 * PAGE,
                nr_accesses: 10,
                max_nr_accesses: 20,
                age: 1,
            },
            DamonObservation {
                start: 0x20_0000,
                end: 0x20_0000 + 512 * PAGE,
                nr_accesses: 0,
                max_nr_accesses: 20,
                age: 9,
            },
        ];
        let view = damon_view(regions.iter(), &placement, 0.7);
        assert_eq!(view.fast_accesses, 640);
        assert_eq!(view.slow_accesses, 0);
        assert_eq!(
            view.hot_fast_bytes,
            64 * PAGE,
            "only the accessed region is hot"
        );
        assert_eq!(view.hot_slow_bytes, 0);
    }

    #[test]
    fn sampled_pages_count_by_tier() {
        let placement = placement(&[(0x1000, 1)], &[(0x2000, 1)]);
        let view = sample_view(&[0x1000, 0x1008, 0x2000, 0x9000], &placement, 1.0);
        assert_eq!((view.fast_accesses, view.slow_accesses), (2, 1));
        assert_eq!((view.hot_fast_bytes, view.hot_slow_bytes), (PAGE, PAGE));
    }

    #[test]
    fn assumed_moves_replace_overlaps_and_merge_neighbours() {
        let mut assumed = Assumed::default();
        assumed.record(0x1000, 0x5000, true);
        assumed.record(0x5000, 0x6000, true);
        assert_eq!(assumed.ranges, BTreeMap::from([(0x1000, (0x6000, true))]));
        // A demotion in the middle cuts the promoted range in three.
        assumed.record(0x2000, 0x3000, false);
        assert_eq!(
            assumed.ranges,
            BTreeMap::from([
                (0x1000, (0x2000, true)),
                (0x2000, (0x3000, false)),
                (0x3000, (0x6000, true)),
            ])
        );
        // Promoting it again (and beyond) merges everything back into one range.
        assumed.record(0x2000, 0x7000, true);
        assert_eq!(assumed.ranges, BTreeMap::from([(0x1000, (0x7000, true))]));
        assumed.record(0x0, 0x8000, false);
        assert_eq!(assumed.ranges, BTreeMap::from([(0x0, (0x8000, false))]));
        assumed.record(0x9000, 0x9000, true);
        assert_eq!(assumed.ranges.len(), 1, "empty ranges are ignored");
    }

    #[test]
    fn observe_mode_plans_against_the_moves_it_assumed() {
        // Two superpages: the first on the slow node (1) with page 3 not resident, the second
        // on the fast node (0). Assumed: pages 1..4 of the first promoted, the first half of
        // the second demoted.
        let sp = 0x20_0000;
        let real = placement(&[(sp + 0x20_0000, 512)], &[(sp, 3), (sp + 4 * PAGE, 508)]);
        let mut assumed = Assumed::default();
        assumed.record(sp + PAGE, sp + 4 * PAGE, true);
        assumed.record(sp + 0x20_0000, sp + 0x30_0000, false);
        let view = AssumedView {
            real: &real,
            assumed: &assumed,
        };
        assert_eq!(view.tier_of(sp), Some(Tier::Slow));
        assert_eq!(view.tier_of(sp + PAGE), Some(Tier::Fast));
        assert_eq!(view.tier_of(sp + 2 * PAGE), Some(Tier::Fast));
        assert_eq!(view.tier_of(sp + 4 * PAGE), Some(Tier::Slow));
        let first = view.residency(sp);
        assert_eq!((first.fast_pages(), first.slow_pages()), (2, 509));
        let second = view.residency(sp + 0x20_0000);
        assert_eq!((second.fast_pages(), second.slow_pages()), (256, 256));
        // The real placement is untouched.
        assert_eq!(real.is_fast(sp + PAGE), Some(false));
        let mut fast = Vec::new();
        view.for_each_fast_range(&mut |start, len| fast.push((start, len)));
        assert_eq!(
            fast,
            vec![(sp + PAGE, 2 * PAGE), (sp + 0x30_0000, 0x10_0000)],
            "assumed-promoted resident pages plus the fast half not assumed demoted"
        );
    }

    #[test]
    fn free_memory_counts_above_the_executors_floor_only() {
        use memtide_host::{exec::watermark::NodeWatermarks, topology::Node};
        let node = |id, free_mib: u64| Node {
            id,
            cpus: Vec::new(),
            memory_bytes: 1 << 30,
            free_bytes: free_mib << 20,
            tier: None,
        };
        let topology = Topology {
            nodes: vec![node(0, 100), node(1, 900)],
            tiers: Vec::new(),
            numa_sysfs: true,
        };
        let marks = |high_mib: u64| NodeWatermarks {
            min: 0,
            low: 0,
            high: high_mib << 20,
        };
        let watermarks = BTreeMap::from([(0, marks(10)), (1, marks(10))]);
        let view = capacity_from(Some(&topology), &watermarks, &[0], &[1], 64 << 20);
        assert_eq!(view.fast_total_bytes, 1 << 30);
        // 100 MiB free, 10 MiB high watermark, 64 MiB reserve: 26 MiB usable.
        assert_eq!(view.fast_free_bytes, 26 << 20);
        assert_eq!(view.slow_free_bytes, 826 << 20);
        // Below the floor there is no room at all (not a wrapped-around huge number).
        let tight = capacity_from(Some(&topology), &watermarks, &[0], &[1], 128 << 20);
        assert_eq!(tight.fast_free_bytes, 0);
        assert_eq!(
            capacity_from(None, &watermarks, &[0], &[1], 0).fast_total_bytes,
            0
        );
    }

    #[test]
    fn pages_left_by_an_exit_are_counted_as_target_exited() {
        let (metrics, registry) = Metrics::new();
        let report = ExecReport {
            pages_moved: 7,
            failures: BTreeMap::from([("ebusy", 2)]),
            aborted: Some(memtide_host::exec::AbortReason::TargetExited),
            aborted_pages: 5,
            ..ExecReport::default()
        };
        count_pages(&metrics, "w:1", "promote", &report);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let value = |needle: &str| {
            text.lines()
                .find(|line| line.contains(needle))
                .and_then(|line| line.rsplit(' ').next())
                .map(str::to_owned)
        };
        assert_eq!(
            value("memtide_migration_failures_total{reason=\"target_exited\"}").as_deref(),
            Some("5"),
            "{text}"
        );
        assert_eq!(
            value("result=\"target_exited\"").as_deref(),
            Some("5"),
            "{text}"
        );
        assert_eq!(value("result=\"moved\"").as_deref(), Some("7"), "{text}");
        assert_eq!(value("reason=\"ebusy\"").as_deref(), Some("2"), "{text}");
    }

    #[test]
    fn a_sample_weighs_its_period() {
        let sample = AccessSample {
            addr: 0x7000,
            weight: 4,
            pid: 1,
            tid: 1,
            cpu: 0,
            kind: AccessKind::Store as u8,
            source: 0,
            _pad: [0; 2],
        };
        let engine_sample = to_engine_sample(&sample);
        assert_eq!(engine_sample.weight, 4);
        assert_eq!(engine_sample.kind, AccessKind::Store);
    }
}
