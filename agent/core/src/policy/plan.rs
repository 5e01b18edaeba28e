//! The planner: one pass per migration epoch that turns hotness into a [`Plan`].
//!
//! Order of decisions, each from its own module:
//! 1. epoch controller and benefit threshold learn from the epoch that just ended;
//! 2. Ryoo's scans over the stage-2 superpages set the target granularity;
//! 3. promotion candidates: per stage-2 superpage, whole when dense, else dense medium chunks,
//!    else single hot pages; each must pass Eq. (1) against the threshold; predicted write-hot
//!    regions first when slow writes cost more (Memos), then by benefit per byte;
//! 4. victims (only when needed): fast-resident data, coldest per byte first;
//! 5. demotions to the low watermark, promotions into free room, then swaps judged by Eq. (2);
//!    under a bandwidth-bound workload promotions stop at the BW-AWARE share and read-dominant
//!    data is demoted when the fast tier serves more than it;
//! 6. every move respects the budgets and the hysteresis, and is recorded for the next epoch.

use std::{collections::BTreeSet, time::Duration};

use serde::Serialize;

use super::{
    CapacityView, PlacementView, PolicyConfig, bandwidth,
    benefit::{CostModel, Threshold},
    capacity::{MoveMarks, page_bits},
    epoch::{EpochChange, EpochController, EpochInputs, ReuseHistogram},
    granularity::{GranularityState, ScanRegion},
    rw::{self, WritePrediction},
};
use crate::engine::{
    EngineConfig,
    subpage::{self, Stage2},
    superpage::{HOT_PREV, NO_SLOT, SEEN, Stage1, TOUCHED_EPOCH},
};
use crate::units::{Direction, Granularity, PAGE_SIZE, Residency, SUBPAGES, SUPERPAGE_SIZE};

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

/// Engine state the planner reads (and, for epoch bookkeeping, updates).
pub(crate) struct Hotness<'a> {
    pub cfg: &'a EngineConfig,
    pub stage1: &'a mut Stage1,
    pub stage2: &'a mut Stage2,
    pub reuse: &'a mut ReuseHistogram,
    pub hot_cutoff: u32,
    pub access_rate: f64,
    /// Counter units one sample adds (the mean sample weight).
    pub evidence_unit: f64,
    /// Stamp of the last closed interval (what `last_touch` is compared with).
    pub interval_stamp: u16,
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

#[derive(Clone, Copy, Debug)]
struct Candidate {
    sp: u64,
    start: u64,
    gran: Granularity,
    /// Slow bytes that will move.
    need: u64,
    reads: f64,
    writes: f64,
    benefit: f64,
    /// Accesses per epoch on the stage-1 scale, for the bandwidth share.
    traffic: f64,
    class: WritePrediction,
}

#[derive(Clone, Copy, Debug)]
struct Victim {
    sp: u64,
    start: u64,
    len: u64,
    gran: Granularity,
    reads: f64,
    writes: f64,
    /// Accesses per epoch on the stage-1 scale.
    traffic: f64,
    read_dominant: bool,
}

impl Victim {
    /// Splits off the first `bytes` of a run of 4 KiB pages (counts pro rata); whole-superpage
    /// victims and runs no longer than `bytes` are taken whole.
    fn take(self, bytes: u64) -> (Self, Option<Self>) {
        if self.gran != Granularity::KIB_4 || bytes == 0 || bytes >= self.len {
            return (self, None);
        }
        let f = bytes as f64 / self.len as f64;
        let part = Self {
            len: bytes,
            reads: self.reads * f,
            writes: self.writes * f,
            traffic: self.traffic * f,
            ..self
        };
        let rest = Self {
            start: self.start + bytes,
            len: self.len - bytes,
            reads: self.reads - part.reads,
            writes: self.writes - part.writes,
            traffic: self.traffic - part.traffic,
            ..self
        };
        (part, Some(rest))
    }
}

/// Reads, writes, bytes and number of the candidates, in order, that fit in `surplus` bytes of
/// room and `budget` bytes of promotion budget, skipping the superpages `excluded` says to.
fn riders(
    candidates: &[Candidate],
    surplus: u64,
    budget: u64,
    excluded: impl Fn(u64) -> bool,
) -> (f64, f64, u64, usize) {
    let (mut reads, mut writes, mut need, mut count) = (0.0, 0.0, 0u64, 0);
    for c in candidates {
        if need + c.need > surplus.min(budget) || excluded(c.sp) {
            continue;
        }
        reads += c.reads;
        writes += c.writes;
        need += c.need;
        count += 1;
    }
    (reads, writes, need, count)
}

/// Planner state carried across epochs.
#[derive(Clone, Debug)]
pub(crate) struct Planner {
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
}

impl Planner {
    pub(crate) fn new(cfg: &PolicyConfig) -> Self {
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
        }
    }

    pub(crate) fn granularity(&self) -> Granularity {
        self.granularity.current()
    }

    pub(crate) fn epoch(&self) -> Duration {
        self.epoch.current()
    }

    pub(crate) fn last_plan_at(&self) -> Option<Duration> {
        self.last_plan_at
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        self.marks.memory_bytes() + self.last_judged.capacity() * size_of::<JudgedMove>()
    }

    pub(crate) fn hot_subpages(
        &self,
        cfg: &EngineConfig,
        stage2: &Stage2,
        cap: &CapacityView,
    ) -> Vec<u64> {
        let costs = CostModel::new(&cfg.policy.benefit, cap);
        let k2 = cfg.stage2_per_epoch();
        let mut out = Vec::new();
        for (slot, sp) in stage2.live_sorted() {
            let (r, w) = stage2.counters(slot);
            for page in 0..SUBPAGES {
                let (pr, pw) = (
                    f64::from(subpage::value(r[page])) * k2,
                    f64::from(subpage::value(w[page])) * k2,
                );
                if costs.eq1(pr, pw, PAGE_SIZE) > self.threshold.for_bytes(PAGE_SIZE) {
                    out.push((sp << 21) + page as u64 * PAGE_SIZE);
                }
            }
        }
        out
    }

    pub(crate) fn plan(
        &mut self,
        mut h: Hotness<'_>,
        now: Duration,
        view: &dyn PlacementView,
        cap: &CapacityView,
    ) -> Plan {
        let pc = &h.cfg.policy;
        self.epoch_index += 1;
        let epoch = self.epoch_index;
        let elapsed = self
            .last_plan_at
            .map_or(self.epoch.current(), |t| now.saturating_sub(t));
        let elapsed_ms = u64::try_from(elapsed.as_millis())
            .unwrap_or(u64::MAX)
            .min(pc.epoch.max_ms);
        self.last_plan_at = Some(now);
        let costs = CostModel::new(&pc.benefit, cap);
        let k2 = h.cfg.stage2_per_epoch();
        // Cooled stage-1 counts → accesses over an epoch of the current length.
        let k1 = h.cfg.stage1_per_interval()
            * (self.epoch.current().as_secs_f64() / h.cfg.interval().as_secs_f64()).max(1.0);

        let epoch_change = self.learn(&mut h, &costs, cap);
        self.marks.prune(
            epoch,
            pc.capacity
                .hysteresis_epochs
                .max(pc.benefit.pingpong_window_epochs),
        );

        // Granularity scans and promotion candidates over the stage-2 superpages.
        let live = h.stage2.live_sorted();
        let mut regions = Vec::with_capacity(live.len());
        let mut residencies = Vec::with_capacity(live.len());
        for &(slot, sp) in &live {
            let (r, w) = h.stage2.counters(slot);
            let mut accessed = [0u64; 8];
            for i in 0..SUBPAGES {
                if r[i] | w[i] != 0 {
                    accessed[i / 64] |= 1 << (i % 64);
                }
            }
            let residency = view.residency(sp << 21);
            regions.push(ScanRegion {
                sp,
                accessed,
                residency,
                density_scale: h.stage2.density_scale(slot),
            });
            residencies.push(residency);
        }
        self.granularity.update(&pc.granularity, &regions);
        let target = self.granularity.current();
        let write_first = pc.rw.write_priority && costs.writes_cost_more();
        let mut candidates = Vec::new();
        for (&(slot, sp), region) in live.iter().zip(&regions) {
            let blocked = self.marks.reversed_pages(
                sp,
                Direction::Promote,
                epoch,
                pc.capacity.hysteresis_epochs,
            );
            let rec = h.stage1.find(sp).map(|idx| h.stage1.records()[idx]);
            let class = match rec {
                Some(rec) if write_first => rw::predict(rec.write_history, &pc.rw),
                _ => WritePrediction::UnWd,
            };
            let (r, w) = h.stage2.counters(slot);
            let stage2_total: f64 = r
                .iter()
                .chain(w)
                .map(|c| f64::from(subpage::value(*c)))
                .sum();
            // Stage-1 accesses per stage-2 count: candidate traffic and tier traffic share a scale.
            let traffic_per_count = rec.map_or(0.0, |rec| {
                f64::from(rec.accesses()) * k1 / stage2_total.max(1.0)
            });
            let ctx = RegionCtx {
                sp,
                r,
                w,
                k2,
                traffic_per_count,
                region,
                blocked: &blocked,
                min_counts: f64::from(pc.benefit.min_samples) * h.evidence_unit,
                class,
            };
            self.region_candidates(pc, &costs, target, &ctx, &mut candidates);
        }
        candidates.sort_by(|a, b| {
            b.class
                .cmp(&a.class)
                .then((b.benefit / b.need as f64).total_cmp(&(a.benefit / a.need as f64)))
                .then(a.start.cmp(&b.start))
        });
        let would_promote: u64 = candidates.iter().map(|c| c.need).sum();

        // Capacity, budget, bandwidth.
        let (mut p_budget, mut d_budget) = pc.capacity.budget(elapsed_ms);
        let (promote_budget, demote_budget) = (p_budget, d_budget);
        let promote_room = pc.capacity.promote_room(cap);
        let demand = pc.capacity.watermark_demand(cap);
        let bw = if pc.bandwidth.enabled {
            pc.bandwidth.bandwidths(cap)
        } else {
            None
        };
        let bound = bw.is_some_and(|(fast, _)| {
            bandwidth::is_bandwidth_bound(h.access_rate, fast, &pc.bandwidth)
        });
        let share_target = if bound {
            bw.and_then(|(f, s)| bandwidth::fast_share(f, s))
        } else {
            None
        };
        let needs_victims = demand > 0 || would_promote > promote_room || bound;
        let (mut victims, traffic) = if needs_victims {
            self.collect_victims(&h, &costs, view, epoch, k1, k2)
        } else {
            (Vec::new(), Traffic::default())
        };
        victims.sort_by(|a, b| {
            let va = costs.access_value(a.reads, a.writes) / a.len as f64;
            let vb = costs.access_value(b.reads, b.writes) / b.len as f64;
            va.total_cmp(&vb).then(a.start.cmp(&b.start))
        });

        let mut out = Outcome::default();
        let mut room = i128::from(promote_room);
        let mut vi = 0;
        // 1. Watermarks.
        let mut demoted = 0u64;
        while demoted < demand && vi < victims.len() {
            let v = victims[vi];
            vi += 1;
            if v.len > d_budget {
                continue;
            }
            d_budget -= v.len;
            demoted += v.len;
            room += i128::from(v.len);
            out.demote(
                v,
                MoveReason::Watermark,
                -(costs.access_value(v.reads, v.writes) + costs.writeback_cost(v.len)),
            );
        }
        // 2. Promotions, then swaps.
        let mut fast_traffic = traffic.fast;
        let share_limit = share_target.map(|f| (f + pc.bandwidth.share_tolerance) * traffic.total);
        let mut swapped = false;
        for (ci, c) in candidates.iter().enumerate() {
            if c.need > p_budget || out.demoted_sps.contains(&c.sp) {
                continue;
            }
            let c_traffic = c.traffic;
            if share_limit.is_some_and(|lim| fast_traffic + c_traffic > lim) {
                continue;
            }
            let reason = if c.class > WritePrediction::UnWd {
                MoveReason::WriteHot
            } else {
                MoveReason::Hot
            };
            if room >= i128::from(c.need) {
                room -= i128::from(c.need);
            } else {
                // Eq. (2): evict the coldest until the candidate fits, if it is worth it.
                let mut picked = Vec::new();
                let (mut freed, mut vr, mut vw) = (0u64, 0.0, 0.0);
                let mut j = vi;
                // A run of cold 4 KiB pages longer than what is still missing gives up only that
                // much (its counts pro rata); the rest stays a victim for the next candidates.
                let mut split = None;
                while room + i128::from(freed) < i128::from(c.need) && j < victims.len() {
                    let v = victims[j];
                    if out.promoted_sps.contains(&v.sp) || v.sp == c.sp || freed + v.len > d_budget
                    {
                        j += 1;
                        continue;
                    }
                    let missing = u64::try_from(i128::from(c.need) - room - i128::from(freed))
                        .unwrap_or(0)
                        .next_multiple_of(PAGE_SIZE);
                    let (part, rest) = v.take(missing);
                    picked.push(part);
                    freed += part.len;
                    vr += part.reads;
                    vw += part.writes;
                    if let Some(rest) = rest {
                        split = Some(rest);
                    } else {
                        j += 1;
                    }
                }
                if room + i128::from(freed) < i128::from(c.need) {
                    break;
                }
                // A whole superpage frees more than one candidate needs. When it had no sample
                // at all this epoch, the candidates after this one that fit in the surplus share
                // its cost (Eq. 2 over the group): a 64 KiB chunk alone never pays for copying
                // out 2 MiB, so a stream's next window stayed slow behind its cold last one. A
                // victim with any traffic is still weighed against this candidate alone: trading
                // warm superpages for groups churned the 64 KiB-clustered workload.
                let surplus =
                    u64::try_from(room + i128::from(freed) - i128::from(c.need)).unwrap_or(0);
                let (gr, gw, gneed, gcount) = riders(
                    &candidates[ci + 1..],
                    if vr + vw < h.evidence_unit {
                        surplus
                    } else {
                        0
                    },
                    p_budget - c.need,
                    |sp| out.demoted_sps.contains(&sp) || picked.iter().any(|v| v.sp == sp),
                );
                let group_need = c.need + gneed;
                // Eq. (2) charges one migration; every further chunk in or out is one more
                // operation (a TLB shootdown each), or a swap out of many small cold runs
                // would look as cheap as one out of a single superpage.
                let extra_ops = (gcount + picked.len()).saturating_sub(1) as f64;
                let delta = costs.eq2((c.reads + gr, c.writes + gw, group_need), (vr, vw, freed))
                    - extra_ops * costs.migrate_op_ns;
                if delta <= self.threshold.for_bytes(group_need) {
                    break;
                }
                if let Some(rest) = split {
                    victims[j] = rest;
                }
                vi = j;
                d_budget -= freed;
                room += i128::from(freed) - i128::from(c.need);
                for v in picked {
                    out.demote(
                        v,
                        MoveReason::Evict,
                        -(costs.access_value(v.reads, v.writes) + costs.writeback_cost(v.len)),
                    );
                }
                swapped = true;
                p_budget -= c.need;
                fast_traffic += c_traffic;
                out.promote(c, MoveReason::Swap, delta);
                continue;
            }
            p_budget -= c.need;
            fast_traffic += c_traffic;
            out.promote(c, reason, c.benefit);
        }
        // 3. Bandwidth: hand read-dominant traffic back to the slow tier (Memos: RD first).
        let mut fast_share = None;
        if let Some(f) = share_target.filter(|_| traffic.total > 0.0) {
            fast_share = Some(fast_traffic / traffic.total);
            let excess = fast_traffic - (f + pc.bandwidth.share_tolerance) * traffic.total;
            if excess > 0.0 {
                let mut rest: Vec<Victim> = victims[vi..]
                    .iter()
                    .filter(|v| !out.promoted_sps.contains(&v.sp))
                    .copied()
                    .collect();
                rest.sort_by(|a, b| {
                    b.read_dominant
                        .cmp(&a.read_dominant)
                        .then(
                            ((b.reads + b.writes) / b.len as f64)
                                .total_cmp(&((a.reads + a.writes) / a.len as f64)),
                        )
                        .then(a.start.cmp(&b.start))
                });
                let mut moved = 0.0;
                for v in rest {
                    if moved >= excess {
                        break;
                    }
                    if v.len > d_budget {
                        continue;
                    }
                    d_budget -= v.len;
                    moved += v.traffic;
                    out.demote(
                        v,
                        MoveReason::Bandwidth,
                        -costs.access_value(v.reads, v.writes),
                    );
                }
            }
        }

        // Bookkeeping for the next epoch.
        let window = pc.benefit.pingpong_window_epochs;
        let mut pingpong = 0;
        let mut moved = 0;
        self.last_judged.clear();
        let pages_of = |mv: &PlannedMove| {
            let first = ((mv.start >> 12) & (SUBPAGES as u64 - 1)) as usize;
            page_bits(first, (mv.len / PAGE_SIZE) as usize)
        };
        for m in &out.moves {
            let sp = m.mv.start >> 21;
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
        for m in &out.moves {
            self.marks
                .record(m.mv.start >> 21, &pages_of(&m.mv), m.mv.direction, epoch);
        }
        self.last_moved = moved;
        self.last_pingpong = pingpong;
        self.last_capacity_bound = swapped || (room <= 0 && out.promote_bytes < would_promote);
        h.stage2.cool_all(h.cfg.stage2_cooling_shift);
        for m in &mut self.last_judged {
            if let Some(idx) = h.stage1.find(m.sp) {
                m.slot = h.stage1.records()[idx].slot;
                if m.slot != NO_SLOT {
                    (m.base_range, m.base_all) = stage2_sums(h.stage2, m.slot, m.start, m.len);
                }
            }
        }

        Plan {
            moves: finish(out.moves.iter().map(|m| m.mv).collect()),
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

    /// Feeds the epoch that just ended to the epoch controller and the threshold.
    fn learn(&mut self, h: &mut Hotness<'_>, costs: &CostModel, cap: &CapacityView) -> EpochChange {
        let pc = &h.cfg.policy;
        let payback = self.payback(h, costs);
        let (mut inter, mut union, mut touched, mut hot_now) = (0u64, 0u64, 0u64, 0u64);
        let cutoff = h.hot_cutoff.max(1);
        let had_prev = self.prev_touched.is_some();
        // How long ago each remembered superpage was last touched, to find the fast tier's reach.
        let mut ages = ReuseHistogram::default();
        for rec in h.stage1.records_mut() {
            if rec.flags & SEEN != 0 {
                ages.record(u32::from(h.interval_stamp.wrapping_sub(rec.last_touch)));
            }
            let hot = rec.accesses() >= cutoff;
            let prev = rec.flags & HOT_PREV != 0;
            hot_now += u64::from(hot);
            inter += u64::from(hot && prev);
            union += u64::from(hot || prev);
            touched += u64::from(rec.flags & TOUCHED_EPOCH != 0);
            rec.flags &= !(HOT_PREV | TOUCHED_EPOCH);
            if hot {
                rec.flags |= HOT_PREV;
            }
            rec.epoch_r = 0;
            rec.epoch_w = 0;
        }
        let interval = h.cfg.interval();
        let reuse_median = h.reuse.median().map(|g| interval * g);
        // The fast tier's reach: the superpages touched within it would fill the fast tier. A
        // reuse after longer than that finds its data evicted whatever the epoch (a cyclic sweep
        // larger than the tier; a window that returns after the others), so it sets no floor.
        let reach = ages.reached_by((cap.fast_total_bytes / SUPERPAGE_SIZE).max(1));
        let bridgeable = reach.map_or(reuse_median, |r| {
            h.reuse.median_within(r).map(|g| interval * g)
        });
        let inputs = EpochInputs {
            reuse_median: bridgeable,
            // When the hot set is most of what was touched, heat is flat across superpages
            // (sparse hotness inside each, or uniform access) and which superpages make the
            // 70 % cut is sampling noise: their overlap says nothing about the workload moving.
            // Nor does it when the cooled heat forgets faster than the data is reused: a sweep
            // longer than that snapshot shows a different hot set every epoch without moving.
            jaccard: (had_prev
                && union > 0
                && hot_now * 2 <= touched
                && snapshot_covers(h.cfg, reuse_median))
            .then(|| inter as f64 / union as f64),
            touched,
            prev_touched: self.prev_touched,
            pingpong_share: if self.last_moved == 0 {
                0.0
            } else {
                self.last_pingpong as f64 / self.last_moved as f64
            },
            payback,
            capacity_bound: self.last_capacity_bound,
        };
        h.reuse.halve();
        self.prev_touched = Some(touched);
        let unpaid = payback.is_some_and(|p| p < pc.epoch.min_payback);
        self.threshold
            .update(&pc.benefit, self.last_pingpong, self.last_moved, unpaid);
        self.epoch.update(&pc.epoch, &inputs)
    }

    /// Realised value of last epoch's promotions, less what the data evicted for them cost
    /// from the slow tier, over the migrations' cost. A swap of equally warm data (a sweep
    /// larger than the fast tier, sampling noise taken for heat) realises nothing net, although
    /// the promoted pages are used just as predicted. Each range is valued with its
    /// superpage's uncooled epoch counts, shared out by what stage 2 counted after the plan.
    fn payback(&self, h: &Hotness<'_>, costs: &CostModel) -> Option<f64> {
        if !self.last_judged.iter().any(|m| !m.evicted) {
            return None;
        }
        let cost: f64 = self.last_judged.iter().map(|m| m.cost).sum();
        if cost <= 0.0 {
            return None;
        }
        let mut realised = 0.0;
        for m in &self.last_judged {
            let Some(idx) = h.stage1.find(m.sp) else {
                continue;
            };
            let rec = &h.stage1.records()[idx];
            let mut share = (m.len / PAGE_SIZE) as f64 / SUBPAGES as f64;
            if rec.slot != NO_SLOT {
                let (range, all) = stage2_sums(h.stage2, rec.slot, m.start, m.len);
                let (range, all) =
                    if rec.slot == m.slot && range >= m.base_range && all >= m.base_all {
                        (range - m.base_range, all - m.base_all)
                    } else {
                        (range, all)
                    };
                if all > 0 {
                    share = f64::from(range) / f64::from(all);
                }
            }
            let value = costs.access_value(
                f64::from(rec.epoch_r) * share,
                f64::from(rec.epoch_w) * share,
            );
            realised += if m.evicted { -value } else { value };
        }
        Some(realised / cost)
    }

    fn region_candidates(
        &self,
        pc: &PolicyConfig,
        costs: &CostModel,
        target: Granularity,
        ctx: &RegionCtx<'_>,
        out: &mut Vec<Candidate>,
    ) {
        let g = &pc.granularity;
        let base = ctx.sp << 21;
        let accessed: u32 = ctx.region.accessed.iter().map(|w| w.count_ones()).sum();
        let slow = ctx.region.residency.slow_pages();
        if slow == 0 {
            return;
        }
        let mut push = |start_page: usize, pages: usize, gran: Granularity| {
            let (mut reads, mut writes, mut counts, mut need) = (0.0, 0.0, 0.0, 0u64);
            for p in start_page..start_page + pages {
                if ctx.region.residency.tier(p) == Some(super::Tier::Slow) {
                    let (cr, cw) = (
                        f64::from(subpage::value(ctx.r[p])),
                        f64::from(subpage::value(ctx.w[p])),
                    );
                    reads += cr * ctx.k2;
                    writes += cw * ctx.k2;
                    counts += cr + cw;
                    need += PAGE_SIZE;
                }
            }
            if need == 0 {
                return;
            }
            // Pages demoted within the hysteresis window stay where they are.
            let range = page_bits(start_page, pages);
            if range.iter().zip(ctx.blocked).any(|(a, b)| a & b != 0) {
                return;
            }
            let benefit = costs.eq1(reads, writes, need);
            if counts >= ctx.min_counts && benefit > self.threshold.for_bytes(need) {
                out.push(Candidate {
                    sp: ctx.sp,
                    start: base + start_page as u64 * PAGE_SIZE,
                    gran,
                    need,
                    reads,
                    writes,
                    benefit,
                    traffic: counts * ctx.traffic_per_count,
                    class: ctx.class,
                });
            }
        };
        if g.moves_whole(target, accessed) {
            push(0, SUBPAGES, Granularity::MIB_2);
            return;
        }
        let mp = g.medium.pages() as usize;
        for chunk in (0..SUBPAGES).step_by(mp) {
            let observed = (chunk..chunk + mp)
                .filter(|&p| ctx.region.accessed[p / 64] & (1 << (p % 64)) != 0)
                .count() as u32;
            let acc = ctx.region.estimate(observed, mp as u32);
            if g.chunk_granularity(target, acc) == g.medium {
                push(chunk, mp, g.medium);
            } else {
                for p in chunk..chunk + mp {
                    if ctx.region.accessed[p / 64] & (1 << (p % 64)) != 0 {
                        push(p, 1, Granularity::KIB_4);
                    }
                }
            }
        }
    }

    /// Fast-resident data that could be demoted, and the traffic split between the tiers.
    fn collect_victims(
        &self,
        h: &Hotness<'_>,
        costs: &CostModel,
        view: &dyn PlacementView,
        epoch: u64,
        k1: f64,
        k2: f64,
    ) -> (Vec<Victim>, Traffic) {
        let pc = &h.cfg.policy;
        let mut victims = Vec::new();
        let mut traffic = Traffic::default();
        // A page whose accesses pay for its copy is hot whatever the promotion threshold: a
        // threshold raised to make promotions pickier must not make warm data an eviction
        // victim (it would hand the watermark whole superpages of it).
        let page_thr = pc.benefit.threshold_ns;
        for rec in h.stage1.records() {
            let acc = f64::from(rec.accesses()) * k1;
            traffic.total += acc;
            let base = rec.sp << 21;
            let res = view.residency(base);
            let fast = res.fast_pages();
            if fast == 0 {
                continue;
            }
            // Stage 2 says which pages carry the traffic; without it assume it is spread evenly.
            traffic.fast += acc * fast_fraction(h.stage2, rec.slot, &res);
            // Pages promoted within the hysteresis window are not victims.
            let recent = self.marks.reversed_pages(
                rec.sp,
                Direction::Demote,
                epoch,
                pc.capacity.hysteresis_epochs,
            );
            let settled = |p: usize| recent[p / 64] & (1 << (p % 64)) == 0;
            let rd = rw::classify(
                u64::from(rec.heat_r),
                u64::from(rec.heat_w),
                pc.rw.read_write_ratio,
            ) == rw::Domain::ReadDominant;
            if rec.slot != NO_SLOT {
                let (r, w) = h.stage2.counters(rec.slot);
                let total: f64 = r
                    .iter()
                    .chain(w)
                    .map(|c| f64::from(subpage::value(*c)))
                    .sum::<f64>()
                    * k2;
                let per = acc / total.max(1.0);
                let page = |p: usize| {
                    (
                        f64::from(subpage::value(r[p])) * k2,
                        f64::from(subpage::value(w[p])) * k2,
                    )
                };
                let hot = |p: usize| {
                    let (pr, pw) = page(p);
                    costs.eq1(pr, pw, PAGE_SIZE) > page_thr
                };
                if fast as usize == SUBPAGES && recent == [0; 8] && !(0..SUBPAGES).any(hot) {
                    let (reads, writes) = (0..SUBPAGES)
                        .map(page)
                        .fold((0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1));
                    victims.push(Victim {
                        sp: rec.sp,
                        start: base,
                        len: SUPERPAGE_SIZE,
                        gran: Granularity::MIB_2,
                        reads,
                        writes,
                        read_dominant: rd,
                        traffic: (reads + writes) * per,
                    });
                } else {
                    runs(
                        &res,
                        |p| settled(p) && !hot(p),
                        |first, n| {
                            let (reads, writes) = (first..first + n)
                                .map(page)
                                .fold((0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1));
                            victims.push(Victim {
                                sp: rec.sp,
                                start: base + first as u64 * PAGE_SIZE,
                                len: n as u64 * PAGE_SIZE,
                                gran: Granularity::KIB_4,
                                reads,
                                writes,
                                read_dominant: rd,
                                traffic: (reads + writes) * per,
                            });
                        },
                    );
                }
            } else {
                let per_page = |n: usize| {
                    let f = n as f64 / SUBPAGES as f64;
                    (
                        f64::from(rec.heat_r) * k1 * f,
                        f64::from(rec.heat_w) * k1 * f,
                    )
                };
                if fast as usize == SUBPAGES && recent == [0; 8] {
                    let (reads, writes) = per_page(SUBPAGES);
                    victims.push(Victim {
                        sp: rec.sp,
                        start: base,
                        len: SUPERPAGE_SIZE,
                        gran: Granularity::MIB_2,
                        reads,
                        writes,
                        read_dominant: rd,
                        traffic: reads + writes,
                    });
                } else {
                    runs(&res, settled, |first, n| {
                        let (reads, writes) = per_page(n);
                        victims.push(Victim {
                            sp: rec.sp,
                            start: base + first as u64 * PAGE_SIZE,
                            len: n as u64 * PAGE_SIZE,
                            gran: Granularity::KIB_4,
                            reads,
                            writes,
                            read_dominant: rd,
                            traffic: reads + writes,
                        });
                    });
                }
            }
        }
        // Resident data never sampled: the coldest of all.
        view.for_each_fast_range(&mut |start, len| {
            let (mut a, end) = (
                start.next_multiple_of(PAGE_SIZE),
                (start + len) & !(PAGE_SIZE - 1),
            );
            while a < end {
                let sp = a >> 21;
                let piece_end = ((sp + 1) << 21).min(end);
                let first = ((a >> 12) & (SUBPAGES as u64 - 1)) as usize;
                let pages = ((piece_end - a) / PAGE_SIZE) as usize;
                if h.stage1.find(sp).is_none()
                    && !self.marks.reverses(
                        sp,
                        &page_bits(first, pages),
                        Direction::Demote,
                        epoch,
                        pc.capacity.hysteresis_epochs,
                    )
                {
                    let whole = a == sp << 21 && piece_end == (sp + 1) << 21;
                    let gran = if whole {
                        Granularity::MIB_2
                    } else {
                        Granularity::KIB_4
                    };
                    victims.push(Victim {
                        sp,
                        start: a,
                        len: piece_end - a,
                        gran,
                        reads: 0.0,
                        writes: 0.0,
                        traffic: 0.0,
                        read_dominant: true,
                    });
                }
                a = piece_end;
            }
        });
        (victims, traffic)
    }
}

struct RegionCtx<'a> {
    sp: u64,
    r: &'a [u16],
    w: &'a [u16],
    k2: f64,
    traffic_per_count: f64,
    /// Accessed pages and their density estimate.
    region: &'a ScanRegion,
    /// Pages demoted within the hysteresis window.
    blocked: &'a [u64; 8],
    /// Raw stage-2 counts a candidate needs (`benefit.min_samples` samples' worth).
    min_counts: f64,
    class: WritePrediction,
}

/// Estimated accesses per epoch served by the fast tier, and in total.
#[derive(Clone, Copy, Debug, Default)]
struct Traffic {
    fast: f64,
    total: f64,
}

/// Share of a superpage's accesses that falls on its fast-resident pages.
fn fast_fraction(stage2: &Stage2, slot: u32, res: &Residency) -> f64 {
    if slot == NO_SLOT {
        return f64::from(res.fast_pages()) / SUBPAGES as f64;
    }
    let (r, w) = stage2.counters(slot);
    let (mut fast, mut all) = (0.0, 0.0);
    for p in 0..SUBPAGES {
        let c = f64::from(subpage::value(r[p]) + subpage::value(w[p]));
        all += c;
        if res.tier(p) == Some(super::Tier::Fast) {
            fast += c;
        }
    }
    if all > 0.0 {
        fast / all
    } else {
        f64::from(res.fast_pages()) / SUBPAGES as f64
    }
}

/// Calls `f(first, n)` for each maximal run of fast-resident pages for which `keep` holds.
fn runs(res: &Residency, keep: impl Fn(usize) -> bool, mut f: impl FnMut(usize, usize)) {
    let mut start = None;
    for p in 0..=SUBPAGES {
        let inside = p < SUBPAGES && res.tier(p) == Some(super::Tier::Fast) && keep(p);
        match (inside, start) {
            (true, None) => start = Some(p),
            (false, Some(s)) => {
                f(s, p - s);
                start = None;
            }
            _ => {}
        }
    }
}

struct Accepted {
    mv: PlannedMove,
    /// Bytes that change tier.
    bytes: u64,
}

#[derive(Default)]
struct Outcome {
    moves: Vec<Accepted>,
    promoted_sps: BTreeSet<u64>,
    demoted_sps: BTreeSet<u64>,
    promote_bytes: u64,
    demote_bytes: u64,
}

impl Outcome {
    fn promote(&mut self, c: &Candidate, reason: MoveReason, benefit: f64) {
        self.promoted_sps.insert(c.sp);
        self.promote_bytes += c.need;
        let len = c.gran.bytes();
        self.moves.push(Accepted {
            mv: PlannedMove {
                start: c.start,
                len,
                direction: Direction::Promote,
                granularity: c.gran,
                reason,
                expected_benefit: benefit,
            },
            bytes: c.need,
        });
    }

    fn demote(&mut self, v: Victim, reason: MoveReason, benefit: f64) {
        self.demoted_sps.insert(v.sp);
        self.demote_bytes += v.len;
        self.moves.push(Accepted {
            mv: PlannedMove {
                start: v.start,
                len: v.len,
                direction: Direction::Demote,
                granularity: v.gran,
                reason,
                expected_benefit: benefit,
            },
            bytes: v.len,
        });
    }
}

/// Stage-2 counts (reads and writes) of `len` bytes at `start`, and of the whole superpage.
fn stage2_sums(stage2: &Stage2, slot: u32, start: u64, len: u64) -> (u32, u32) {
    let (r, w) = stage2.counters(slot);
    let first = ((start >> 12) as usize) & (SUBPAGES - 1);
    let pages = ((len / PAGE_SIZE) as usize).min(SUBPAGES - first);
    let sum = |range: std::ops::Range<usize>| -> u32 {
        range
            .map(|p| subpage::value(r[p]) + subpage::value(w[p]))
            .sum()
    };
    (sum(first..first + pages), sum(0..SUBPAGES))
}

/// Whether the cooled heat still holds data reused `reuse` apart: it halves (for a cooling
/// shift of 1) every counting interval, so after three intervals a superpage keeps an eighth
/// of its heat and drops out of the 70 % hot set.
fn snapshot_covers(cfg: &EngineConfig, reuse: Option<Duration>) -> bool {
    let span = cfg.interval() * 3u32.div_ceil(cfg.cooling_shift.max(1));
    reuse.is_none_or(|r| r <= span)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn mv(start: u64, len: u64, gran: Granularity, reason: MoveReason) -> PlannedMove {
        PlannedMove {
            start,
            len,
            direction: Direction::Promote,
            granularity: gran,
            reason,
            expected_benefit: 1.0,
        }
    }

    #[test]
    fn a_heat_snapshot_judges_shifts_only_of_data_reused_within_it() {
        let mut cfg = EngineConfig::default();
        let ms = Duration::from_millis;
        // 50 ms intervals, heat halved at each: three intervals, 150 ms.
        assert!(snapshot_covers(&cfg, None));
        assert!(snapshot_covers(&cfg, Some(ms(150))));
        // A sweep seen again only after a second looks like a new hot set every epoch.
        assert!(!snapshot_covers(&cfg, Some(ms(200))));
        assert!(!snapshot_covers(&cfg, Some(ms(1000))));
        // Cooling by 3 bits forgets within one interval.
        cfg.cooling_shift = 3;
        assert!(snapshot_covers(&cfg, Some(ms(50))));
        assert!(!snapshot_covers(&cfg, Some(ms(100))));
    }

    #[test]
    fn riders_take_what_fits_in_order_and_skip_excluded_superpages() {
        let chunk = |sp: u64, need: u64, reads: f64| Candidate {
            sp,
            start: sp << 21,
            gran: Granularity::KIB_64,
            need,
            reads,
            writes: 1.0,
            benefit: reads,
            traffic: reads,
            class: WritePrediction::UnWd,
        };
        let k = 64 * 1024;
        let candidates = [
            chunk(1, k, 10.0),
            chunk(2, 2 * k, 20.0), // does not fit after the first: skipped, not a stop
            chunk(3, k, 30.0),     // excluded
            chunk(4, k, 40.0),
        ];
        let (reads, writes, need, count) = riders(&candidates, 2 * k, u64::MAX, |sp| sp == 3);
        assert_eq!((need, count), (2 * k, 2));
        assert_eq!((reads, writes), (50.0, 2.0));
        // The promotion budget bounds the group as much as the room does.
        assert_eq!(riders(&candidates, 8 * k, k, |_| false).2, k);
        assert_eq!(
            riders(&candidates, 0, u64::MAX, |_| false),
            (0.0, 0.0, 0, 0)
        );
    }

    #[test]
    fn finish_sorts_and_merges_only_like_ranges() {
        let g = Granularity::KIB_4;
        let out = finish(vec![
            mv(8192, 4096, g, MoveReason::Hot),
            mv(0, 4096, g, MoveReason::Hot),
            mv(4096, 4096, g, MoveReason::Hot),
            mv(12288, 4096, g, MoveReason::Swap),
        ]);
        assert_eq!(out.len(), 2);
        assert_eq!(
            (out[0].start, out[0].len, out[0].expected_benefit),
            (0, 12288, 3.0)
        );
        assert_eq!(out[1].reason, MoveReason::Swap);
    }

    #[test]
    fn a_long_cold_run_gives_up_only_what_a_candidate_needs() {
        let v = Victim {
            sp: 1,
            start: 1 << 21,
            len: 32 * PAGE_SIZE,
            gran: Granularity::KIB_4,
            reads: 32.0,
            writes: 8.0,
            traffic: 64.0,
            read_dominant: true,
        };
        let (part, rest) = v.take(PAGE_SIZE);
        let rest = rest.expect("the rest stays a victim");
        assert_eq!((part.start, part.len), (1 << 21, PAGE_SIZE));
        assert_eq!(
            (rest.start, rest.len),
            ((1 << 21) + PAGE_SIZE, 31 * PAGE_SIZE)
        );
        assert!((part.reads - 1.0).abs() < 1e-9 && (rest.reads - 31.0).abs() < 1e-9);
        assert!((part.writes + rest.writes - 8.0).abs() < 1e-9);
        assert!((part.traffic - 2.0).abs() < 1e-9);
        // Whole superpages and runs no longer than the need are taken whole.
        assert!(v.take(32 * PAGE_SIZE).1.is_none());
        let whole = Victim {
            len: SUPERPAGE_SIZE,
            gran: Granularity::MIB_2,
            ..v
        };
        assert_eq!(whole.take(PAGE_SIZE).0.len, SUPERPAGE_SIZE);
    }

    #[test]
    fn runs_split_on_tier_and_predicate() {
        let mut r = Residency::all(super::super::Tier::Slow);
        for p in [0, 1, 2, 5, 6, 511] {
            r.set(p, Some(super::super::Tier::Fast));
        }
        let mut got = Vec::new();
        runs(&r, |p| p != 1, |s, n| got.push((s, n)));
        assert_eq!(got, vec![(0, 1), (2, 1), (5, 2), (511, 1)]);
    }
}
