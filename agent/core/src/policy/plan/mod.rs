//! The planner: one pass per migration epoch that turns a read-only view of the engine's
//! hotness into a [`Plan`]. It writes nothing in the engine; its steps, each in its own module:
//! 1. [`learn`]: the epoch controller and the benefit threshold learn from the epoch that just
//!    ended (reuse distance, hot-set stability, ping-pong, payback of the last plan's moves);
//! 2. [`candidates`]: Ryoo's scans over the stage-2 superpages set the target granularity;
//!    each superpage offers its slow data whole when dense, else in dense medium chunks, else
//!    as single hot pages, each judged by Eq. (1) against the threshold; predicted write-hot
//!    regions first when slow writes cost more (Memos), then by benefit per byte;
//! 3. [`victims`]: fast-resident data that could make room, coldest per byte first (only
//!    when room, the watermarks or the bandwidth share need it), and under a bandwidth share
//!    the hot fast data that could be handed back;
//! 4. [`select`]: demotions to the low watermark, promotions into free room, then swaps judged
//!    by Eq. (2); under a bandwidth-bound workload promotions stop at the BW-AWARE share, and
//!    when the fast tier serves more than the share plus a tolerance, data (read-dominant
//!    first, hot or not) goes back to the slow tier until it serves the share;
//! 5. every move respects the budgets and the hysteresis, and is recorded for the next epoch.

mod candidates;
mod learn;
mod select;
#[cfg(test)]
mod tests;
mod victims;

use std::time::Duration;

use serde::Serialize;

use self::select::{Accepted, Chosen, Selection};
use super::{
    CapacityView, PlacementView, PolicyConfig, bandwidth,
    benefit::{CostModel, Threshold},
    capacity::MoveMarks,
    epoch::{EpochChange, EpochController},
    granularity::GranularityState,
};
use crate::{
    engine::{HotnessView, subpage, superpage::NO_SLOT},
    units::{
        Direction, Granularity, PAGE_SHIFT, PAGE_SIZE, SUBPAGES, page_bits, subpage_index,
        superpage_base, superpage_of,
    },
};

/// What bounds one plan's moves ([`Planner::limits`]).
struct Limits {
    promote_budget: u64,
    demote_budget: u64,
    /// Free fast room above the high watermark.
    promote_room: u64,
    /// Bytes the watermarks ask to demote.
    demand: u64,
    /// The workload is bandwidth-bound (BW-AWARE).
    bound: bool,
    /// The fast tier's share of the traffic when bound.
    share_target: Option<f64>,
}

/// Why a range moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MoveReason {
    /// Eq. (1) benefit above the threshold, into free fast memory.
    Hot,
    /// As `Hot`, ranked first as predicted write-hot (Memos).
    WriteHot,
    /// Eq. (2): worth more than the victims evicted for it.
    Swap,
    /// Coldest resident data, demoted to get under the high watermark.
    Watermark,
    /// Victim evicted to make room for a `Swap`.
    Evict,
    /// Read-dominant data demoted so the fast tier serves its bandwidth share (BW-AWARE).
    Bandwidth,
}

/// One range to move. `start` and `len` are multiples of `granularity`; the executor moves it
/// in `len / granularity` operations, splitting huge pages only below 2 MiB.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct PlannedMove {
    pub start: u64,
    pub len: u64,
    pub direction: Direction,
    pub granularity: Granularity,
    pub reason: MoveReason,
    /// Expected latency saved over the next epoch minus migration cost, ns (negative for
    /// demotions: what keeping the data slow costs).
    pub expected_benefit: f64,
}

/// The output of one planning pass.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Plan {
    /// Sorted by `start`, non-overlapping.
    pub moves: Vec<PlannedMove>,
    /// Target granularity after this epoch's scans.
    pub granularity: Granularity,
    /// Length of the next epoch, and why it changed.
    pub epoch: Duration,
    pub epoch_change: EpochChange,
    /// Bytes that will change tier (pages already in the destination tier excluded).
    pub promote_bytes: u64,
    pub demote_bytes: u64,
    /// Budgets this plan was held to.
    pub promote_budget: u64,
    pub demote_budget: u64,
    /// Fast-tier bytes promotions could use before any demotion.
    pub promote_room: u64,
    /// Bytes passing the benefit rule, and bytes the watermarks asked to demote.
    pub would_promote_bytes: u64,
    pub would_demote_bytes: u64,
    /// Bytes moved that reversed a move made within the ping-pong window.
    pub pingpong_bytes: u64,
    pub benefit_threshold_ns: f64,
    pub bandwidth_bound: bool,
    /// BW-AWARE fast share, and the fast tier's estimated current share, when bandwidth is known
    /// and the workload is bandwidth-bound.
    pub fast_share_target: Option<f64>,
    pub fast_share: Option<f64>,
}

/// A move of the last plan whose outcome the payback judges.
#[derive(Clone, Copy, Debug)]
struct JudgedMove {
    sp: u64,
    start: u64,
    len: u64,
    /// Migration cost of a promotion, write-back cost of an eviction, ns.
    cost: f64,
    /// Demoted to make room for a swap: its later accesses count against the payback.
    evicted: bool,
    /// Stage-2 slot of the superpage after the plan, and its counts of the range and of the
    /// whole superpage then: the payback shares out only what was counted after the plan
    /// (the cooled counts that chose the move would otherwise vouch for it again).
    slot: u32,
    base_range: u32,
    base_all: u32,
}

/// Per-epoch conversions of the engine's counts into accesses per epoch.
#[derive(Clone, Copy, Debug)]
struct Scale {
    /// Cooled stage-1 counts → accesses over an epoch of the current length.
    k1: f64,
    /// Stage-2 counts (cooled once per epoch) → accesses per epoch.
    k2: f64,
}

/// Planner state carried across epochs. Driven by `crate::tiering::Tiering`, which runs each
/// plan between the engine's interval close and its [`end_epoch`](crate::engine::Engine::end_epoch).
#[derive(Clone, Debug)]
pub struct Planner {
    cfg: PolicyConfig,
    granularity: GranularityState,
    epoch: EpochController,
    threshold: Threshold,
    marks: MoveMarks,
    epoch_index: u64,
    last_plan_at: Option<Duration>,
    /// Last plan's promotions and the evictions made for them, for the payback.
    last_judged: Vec<JudgedMove>,
    last_moved: u64,
    last_pingpong: u64,
    last_capacity_bound: bool,
    prev_touched: Option<u64>,
    retention: learn::Retention,
    /// The engine's closed intervals when the planner last learned from an epoch.
    learned_through: Option<u64>,
    /// (promote, demote) budget the last plan left unspent, saved for the next.
    unspent: (u64, u64),
}

impl Planner {
    #[must_use]
    pub fn new(cfg: PolicyConfig) -> Self {
        Self {
            granularity: GranularityState::new(&cfg.granularity),
            epoch: EpochController::new(&cfg.epoch),
            threshold: Threshold::new(&cfg.benefit),
            marks: MoveMarks::default(),
            epoch_index: 0,
            last_plan_at: None,
            last_judged: Vec::new(),
            last_moved: 0,
            last_pingpong: 0,
            last_capacity_bound: false,
            prev_touched: None,
            retention: learn::Retention::default(),
            learned_through: None,
            unspent: (0, 0),
            cfg,
        }
    }

    #[must_use]
    pub fn config(&self) -> &PolicyConfig {
        &self.cfg
    }

    /// Current target granularity.
    #[must_use]
    pub fn granularity(&self) -> Granularity {
        self.granularity.current()
    }

    /// Current migration epoch: plan again this long after the last plan.
    #[must_use]
    pub fn epoch(&self) -> Duration {
        self.epoch.current()
    }

    /// When the last plan ran, `None` before the first.
    #[must_use]
    pub fn last_plan_at(&self) -> Option<Duration> {
        self.last_plan_at
    }

    /// Heap bytes held between plans.
    #[must_use]
    pub fn memory_bytes(&self) -> usize {
        self.marks.memory_bytes() + self.last_judged.capacity() * size_of::<JudgedMove>()
    }

    /// Addresses of the 4 KiB pages of stage-2 superpages that Eq. (1) classifies hot under the
    /// current threshold and `cap`'s (or the configured) latencies, ascending. A page is hot
    /// when one epoch of its accesses pays for its move, not shared out over its residence:
    /// over a long residence a page sampled once would pay too.
    #[must_use]
    pub fn hot_subpages(&self, hot: &HotnessView<'_>, cap: &CapacityView) -> Vec<u64> {
        let costs = CostModel::new(&self.cfg.benefit, cap);
        let k2 = hot.config().stage2_per_epoch();
        let (per_read, per_write) = (k2 * hot.units.read, k2 * hot.units.write);
        let mut out = Vec::new();
        for (slot, sp) in hot.stage2_superpages() {
            let (r, w) = hot.counters(slot);
            for page in 0..SUBPAGES {
                let (pr, pw) = (
                    f64::from(subpage::value(r[page])) * per_read,
                    f64::from(subpage::value(w[page])) * per_write,
                );
                if costs.eq1(pr, pw, PAGE_SIZE) > self.threshold.for_bytes(PAGE_SIZE) {
                    out.push(superpage_base(sp) + page as u64 * PAGE_SIZE);
                }
            }
        }
        out
    }

    /// Plans the epoch ending at `now` from `hot` (the engine's intervals closed up to `now`),
    /// where the pages are (`view`) and how much room each tier has (`cap`).
    pub(crate) fn plan(
        &mut self,
        hot: &HotnessView<'_>,
        now: Duration,
        view: &dyn PlacementView,
        cap: &CapacityView,
    ) -> Plan {
        let (epoch, elapsed_ms) = self.begin_epoch(now);
        let scale = self.scale(hot);
        let (learns, epoch_change) = self.learn_once(hot, cap);
        let costs = self.costs(cap);
        self.prune_marks(epoch);
        let candidates = self.promotion_candidates(hot, (view, cap), &costs, scale, epoch);
        let target = self.granularity.current();
        let would_promote: u64 = candidates.iter().map(|c| c.need).sum();

        let Limits {
            promote_budget,
            demote_budget,
            promote_room,
            demand,
            bound,
            share_target,
        } = self.limits(hot, cap, elapsed_ms);
        let needs_victims = demand > 0 || would_promote > promote_room || bound;
        let evictable = if needs_victims {
            self.collect_victims(hot, &costs, view, (epoch, scale), share_target.is_some())
        } else {
            victims::Evictable::default()
        };
        let traffic = evictable.traffic;

        let mut selection = Selection::new(
            &costs,
            &self.threshold,
            evictable,
            promote_room,
            (promote_budget, demote_budget),
            hot.units.read.min(hot.units.write),
        );
        selection.demote_to_watermark(demand);
        let tolerance = self.cfg.bandwidth.share_tolerance;
        // Promotions fill up to the share, hand-backs start above the share plus the tolerance:
        // between the two, estimates of the traffic that moves may err without moving it back.
        let share_limit = share_target.map(|f| f * traffic.total);
        selection.promote(&candidates, share_limit);
        let fast_share = selection.hand_back_bandwidth(share_target, tolerance, traffic.total);

        let Chosen {
            out,
            room_left,
            swapped,
        } = selection.finish();
        self.unspent = (
            promote_budget.saturating_sub(out.promote_bytes),
            demote_budget.saturating_sub(out.demote_bytes),
        );
        let pingpong = self.record_moves(&out.moves, &costs, epoch, learns);
        self.last_capacity_bound = swapped || (room_left <= 0 && out.promote_bytes < would_promote);
        let moves = out.moves.iter().map(|m| m.mv).collect();
        Plan {
            moves: finish(moves),
            granularity: target,
            epoch: self.epoch.current(),
            epoch_change,
            promote_bytes: out.promote_bytes,
            demote_bytes: out.demote_bytes,
            promote_budget,
            demote_budget,
            promote_room,
            would_promote_bytes: would_promote,
            would_demote_bytes: demand,
            pingpong_bytes: pingpong,
            benefit_threshold_ns: self.threshold.per_page_ns(),
            bandwidth_bound: bound,
            fast_share_target: share_target,
            fast_share,
        }
    }

    /// Forgets the moves older than both the hysteresis and the ping-pong window look back.
    fn prune_marks(&mut self, epoch: u64) {
        let pc = &self.cfg;
        self.marks.prune(
            epoch,
            pc.capacity
                .hysteresis_epochs
                .max(pc.benefit.pingpong_window_epochs),
        );
    }

    /// Stage 1's counts per interval and stage 2's per epoch, in accesses per epoch.
    fn scale(&self, hot: &HotnessView<'_>) -> Scale {
        let engine = hot.config();
        Scale {
            k1: engine.stage1_per_interval()
                * (self.epoch.current().as_secs_f64() / engine.interval().as_secs_f64()).max(1.0),
            k2: engine.stage2_per_epoch(),
        }
    }

    /// Learns from the epoch that ended, once per interval close: returns whether it learned
    /// and the epoch change. Stage 1 takes in counts only at an interval close. An epoch
    /// shorter than the interval can end before one: its plan reads the counts the last plan
    /// read, and the epoch's own (superpages touched, the payback's accesses) are still empty,
    /// which would read as moves that realised nothing. It learns nothing; its moves are
    /// judged with the last plan's, at the next plan that follows a close.
    fn learn_once(&mut self, hot: &HotnessView<'_>, cap: &CapacityView) -> (bool, EpochChange) {
        if self.learned_through == Some(hot.intervals_closed) {
            return (false, EpochChange::Hold);
        }
        self.learned_through = Some(hot.intervals_closed);
        let costs = CostModel::new(&self.cfg.benefit, cap);
        (true, self.learn(hot, &costs, cap))
    }

    /// What bounds this plan's moves: the migration budgets accrued over `elapsed_ms`, the
    /// free room above the high watermark, the watermarks' demand, and whether the workload
    /// is bandwidth-bound with the fast tier's BW-AWARE share of the traffic.
    fn limits(&self, hot: &HotnessView<'_>, cap: &CapacityView, elapsed_ms: u64) -> Limits {
        let pc = &self.cfg;
        let (promote_budget, demote_budget) = pc.capacity.budget_after(elapsed_ms, self.unspent);
        let bw = if pc.bandwidth.enabled {
            pc.bandwidth.bandwidths(cap)
        } else {
            None
        };
        let bound = bw.is_some_and(|(fast, _)| {
            bandwidth::is_bandwidth_bound(hot.access_rate, fast, &pc.bandwidth)
        });
        Limits {
            promote_budget,
            demote_budget,
            promote_room: pc.capacity.promote_room(cap),
            demand: pc.capacity.watermark_demand(cap),
            bound,
            share_target: if bound {
                bw.and_then(|(f, s)| bandwidth::fast_share(f, s))
            } else {
                None
            },
        }
    }

    /// The plan's costs, each shared out over the epochs the hot set is expected to stay hot:
    /// a promotion pays its copy once and is used for as long as its data stays hot, so a
    /// short epoch does not make a stable hot set look too cheap to move. At most the longest
    /// epoch's worth of time.
    fn costs(&self, cap: &CapacityView) -> CostModel {
        let cap_epochs =
            self.cfg.epoch.max_ms as f64 / self.epoch.current().as_millis().max(1) as f64;
        CostModel::new(&self.cfg.benefit, cap)
            .over_residence(self.retention.residence_epochs(cap_epochs))
    }

    /// Counts the epoch and returns its index and its length so far, ms (capped at the longest
    /// epoch, which is what the migration budget accrues over).
    fn begin_epoch(&mut self, now: Duration) -> (u64, u64) {
        self.epoch_index += 1;
        let elapsed = self
            .last_plan_at
            .map_or(self.epoch.current(), |t| now.saturating_sub(t));
        let elapsed_ms = u64::try_from(elapsed.as_millis())
            .unwrap_or(u64::MAX)
            .min(self.cfg.epoch.max_ms);
        self.last_plan_at = Some(now);
        (self.epoch_index, elapsed_ms)
    }

    /// Records this plan's moves for the next epochs: the ping-pong bytes they reverse (returned),
    /// the promotions and evictions the payback will judge, and the move marks the hysteresis
    /// reads. A plan that learned nothing (`judged_now` false) adds its moves to the last
    /// plan's, to be judged together.
    fn record_moves(
        &mut self,
        moves: &[Accepted],
        costs: &CostModel,
        epoch: u64,
        judged_now: bool,
    ) -> u64 {
        let window = self.cfg.benefit.pingpong_window_epochs;
        let mut pingpong = 0;
        let mut moved = 0;
        if judged_now {
            self.last_judged.clear();
            self.last_moved = 0;
            self.last_pingpong = 0;
        }
        let pages_of =
            |mv: &PlannedMove| page_bits(subpage_index(mv.start), (mv.len >> PAGE_SHIFT) as usize);
        for m in moves {
            let sp = superpage_of(m.mv.start);
            let back = self.marks.reversed_pages(sp, m.mv.direction, epoch, window);
            let reversed: u32 = back
                .iter()
                .zip(&pages_of(&m.mv))
                .map(|(a, b)| (a & b).count_ones())
                .sum();
            pingpong += u64::from(reversed) * PAGE_SIZE;
            moved += m.bytes;
            let judged = |cost, evicted| JudgedMove {
                sp,
                start: m.mv.start,
                len: m.mv.len,
                cost,
                evicted,
                slot: NO_SLOT,
                base_range: 0,
                base_all: 0,
            };
            match (m.mv.direction, m.mv.reason) {
                (Direction::Promote, _) => {
                    self.last_judged
                        .push(judged(costs.migrate_cost(m.bytes), false));
                }
                (Direction::Demote, MoveReason::Evict) => {
                    self.last_judged
                        .push(judged(costs.writeback_cost(m.bytes), true));
                }
                (Direction::Demote, _) => {}
            }
        }
        for m in moves {
            self.marks.record(
                superpage_of(m.mv.start),
                &pages_of(&m.mv),
                m.mv.direction,
                epoch,
            );
        }
        self.last_moved += moved;
        self.last_pingpong += pingpong;
        pingpong
    }

    /// After the engine has ended the epoch (stage 2 cooled): notes what stage 2 holds for each
    /// judged move, so the next payback counts only what was accessed after this plan.
    pub(crate) fn after_epoch_end(&mut self, hot: &HotnessView<'_>) {
        for m in &mut self.last_judged {
            if let Some(rec) = hot.superpage(m.sp) {
                m.slot = rec.slot;
                if m.slot != NO_SLOT {
                    (m.base_range, m.base_all) = hot.stage2_sums(m.slot, m.start, m.len);
                }
            }
        }
    }
}

/// Sorts by address and merges touching ranges of the same kind, so a run of hot 4 KiB pages
/// becomes one range (still moved page by page at its granularity).
fn finish(mut moves: Vec<PlannedMove>) -> Vec<PlannedMove> {
    moves.sort_by_key(|m| m.start);
    let mut out: Vec<PlannedMove> = Vec::with_capacity(moves.len());
    for m in moves {
        if let Some(last) = out.last_mut()
            && last.start + last.len == m.start
            && (last.direction, last.granularity, last.reason)
                == (m.direction, m.granularity, m.reason)
        {
            last.len += m.len;
            last.expected_benefit += m.expected_benefit;
            continue;
        }
        out.push(m);
    }
    out
}
