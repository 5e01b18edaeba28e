//! Step 4 of a plan: which candidates and victims actually move, within room and budgets.
//!
//! In order: demotions to get under the watermark; promotions into free room, and where the room
//! runs out, swaps judged by Rainbow's Eq. (2) against the coldest victims; then, when the
//! workload is bandwidth-bound and the fast tier serves more than its BW-AWARE share plus a
//! tolerance, data handed back to the slow tier (read-dominant first, hot data too) until it
//! serves the share.

use std::collections::BTreeSet;

use super::{
    MoveReason, PlannedMove,
    candidates::Candidate,
    victims::{Evictable, Victim},
};
use crate::{
    policy::{
        benefit::{CostModel, Threshold},
        rw::WritePrediction,
    },
    units::{Direction, PAGE_SIZE, SUPERPAGE_SIZE},
};

/// A move the plan keeps.
pub(super) struct Accepted {
    pub(super) mv: PlannedMove,
    /// Bytes that change tier.
    pub(super) bytes: u64,
}

/// The moves chosen so far.
#[derive(Default)]
pub(super) struct Outcome {
    pub(super) moves: Vec<Accepted>,
    promoted_sps: BTreeSet<u64>,
    demoted_sps: BTreeSet<u64>,
    pub(super) promote_bytes: u64,
    pub(super) demote_bytes: u64,
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

/// What a selection chose, and what it left.
pub(super) struct Chosen {
    pub(super) out: Outcome,
    /// Fast-tier bytes still free for promotions (negative: over the room).
    pub(super) room_left: i128,
    /// Some promotion needed an eviction.
    pub(super) swapped: bool,
}

/// The state of one plan's selection: room, budgets, the victims not yet taken.
pub(super) struct Selection<'a> {
    costs: &'a CostModel,
    threshold: &'a Threshold,
    /// Coldest per byte first; `victims[next_victim..]` are still available.
    victims: Vec<Victim>,
    next_victim: usize,
    /// Hot fast data BW-AWARE may hand back (see `Evictable::donors`).
    donors: Vec<Victim>,
    /// Fast-tier bytes still free for promotions (negative: over the room already).
    room: i128,
    promote_budget: u64,
    demote_budget: u64,
    /// Accesses per epoch the fast tier serves after the moves so far.
    fast_traffic: f64,
    /// Accesses of one sample: a victim with less than that was never really sampled.
    one_sample: f64,
    swapped: bool,
    out: Outcome,
}

/// Victims picked to make room for one candidate, with their summed counts.
struct Picked {
    victims: Vec<Victim>,
    freed: u64,
    reads: f64,
    writes: f64,
    split: f64,
    /// Where the next candidate's search for victims starts.
    next: usize,
    /// What is left of a run of cold pages this candidate took only part of.
    rest_of_run: Option<Victim>,
}

/// How a promotion that needs evictions ended.
enum Swap {
    Done,
    /// Not enough victims, or not worth it: no later candidate is tried either.
    Stop,
}

impl<'a> Selection<'a> {
    pub(super) fn new(
        costs: &'a CostModel,
        threshold: &'a Threshold,
        evictable: Evictable,
        promote_room: u64,
        (promote_budget, demote_budget): (u64, u64),
        one_sample: f64,
    ) -> Self {
        Self {
            costs,
            threshold,
            victims: evictable.victims,
            next_victim: 0,
            donors: evictable.donors,
            room: i128::from(promote_room),
            promote_budget,
            demote_budget,
            fast_traffic: evictable.traffic.fast,
            one_sample,
            swapped: false,
            out: Outcome::default(),
        }
    }

    pub(super) fn finish(self) -> Chosen {
        Chosen {
            out: self.out,
            room_left: self.room,
            swapped: self.swapped,
        }
    }

    /// What demoting `v` costs: its accesses from the slow tier, plus the write-back.
    fn eviction_value(&self, v: &Victim) -> f64 {
        -(v.loss(self.costs) + self.costs.writeback_cost(v.len))
    }

    /// Demotes the coldest victims until `demand` bytes are out (the watermarks' ask).
    pub(super) fn demote_to_watermark(&mut self, demand: u64) {
        let mut demoted = 0u64;
        while demoted < demand && self.next_victim < self.victims.len() {
            let v = self.victims[self.next_victim];
            self.next_victim += 1;
            if v.len > self.demote_budget {
                continue;
            }
            self.demote_budget -= v.len;
            demoted += v.len;
            self.room += i128::from(v.len);
            self.fast_traffic -= v.traffic;
            let value = self.eviction_value(&v);
            self.out.demote(v, MoveReason::Watermark, value);
        }
    }

    /// Promotes the candidates in order: into free room, else by swapping out victims when
    /// Eq. (2) says so. A candidate that would push the fast tier past `share_limit` accesses
    /// per epoch (BW-AWARE) is skipped.
    pub(super) fn promote(&mut self, candidates: &[Candidate], share_limit: Option<f64>) {
        for (ci, c) in candidates.iter().enumerate() {
            if c.need > self.promote_budget || self.out.demoted_sps.contains(&c.sp) {
                continue;
            }
            if share_limit.is_some_and(|lim| self.fast_traffic + c.traffic > lim) {
                continue;
            }
            if self.room >= i128::from(c.need) {
                self.room -= i128::from(c.need);
                let reason = if c.class > WritePrediction::UnWd {
                    MoveReason::WriteHot
                } else {
                    MoveReason::Hot
                };
                self.promote_budget -= c.need;
                self.fast_traffic += c.traffic;
                self.out.promote(c, reason, c.benefit);
            } else if let Swap::Stop = self.swap(c, &candidates[ci + 1..]) {
                break;
            }
        }
    }

    /// The coldest victims that make room for `c`, from `next_victim` on; `None` when there
    /// are not enough (or the demotion budget runs out first).
    fn pick_victims(&self, c: &Candidate) -> Option<Picked> {
        let mut picked = Picked {
            victims: Vec::new(),
            freed: 0,
            reads: 0.0,
            writes: 0.0,
            split: 0.0,
            next: self.next_victim,
            rest_of_run: None,
        };
        let freed_enough = |freed: u64| self.room + i128::from(freed) >= i128::from(c.need);
        // A run of cold 4 KiB pages longer than what is still missing gives up only that much
        // (its counts pro rata); the rest stays a victim for the next candidates.
        while !freed_enough(picked.freed) && picked.next < self.victims.len() {
            let v = self.victims[picked.next];
            if self.out.promoted_sps.contains(&v.sp)
                || v.sp == c.sp
                || picked.freed + v.len > self.demote_budget
            {
                picked.next += 1;
                continue;
            }
            let missing = u64::try_from(i128::from(c.need) - self.room - i128::from(picked.freed))
                .unwrap_or(0)
                .next_multiple_of(PAGE_SIZE);
            let (part, rest) = v.take(missing);
            picked.victims.push(part);
            picked.freed += part.len;
            picked.reads += part.reads;
            picked.writes += part.writes;
            picked.split += part.split;
            if let Some(rest) = rest {
                picked.rest_of_run = Some(rest);
            } else {
                picked.next += 1;
            }
        }
        freed_enough(picked.freed).then_some(picked)
    }

    /// Eq. (2): evicts the coldest victims until `c` fits, if it is worth it. `later` are the
    /// candidates after `c`, which may ride along in room a whole evicted superpage frees.
    fn swap(&mut self, c: &Candidate, later: &[Candidate]) -> Swap {
        let Some(Picked {
            victims: picked,
            freed,
            reads: vr,
            writes: vw,
            split: vsplit,
            next: j,
            rest_of_run,
        }) = self.pick_victims(c)
        else {
            return Swap::Stop;
        };
        // A whole superpage frees more than one candidate needs. When it had no sample at all
        // this epoch, the candidates after this one that fit in the surplus share its cost
        // (Eq. 2 over the group): a 64 KiB chunk alone never pays for copying out 2 MiB, so a
        // stream's next window stayed slow behind its cold last one. A victim with any traffic
        // is still weighed against this candidate alone: trading warm superpages for groups
        // churned the 64 KiB-clustered workload.
        let surplus =
            u64::try_from(self.room + i128::from(freed) - i128::from(c.need)).unwrap_or(0);
        let group = riders(
            later,
            if vr + vw < self.one_sample {
                surplus
            } else {
                0
            },
            self.promote_budget - c.need,
            |sp| self.out.demoted_sps.contains(&sp) || picked.iter().any(|v| v.sp == sp),
        );
        let group_need = c.need + group.need;
        // Eq. (2) charges one migration; every further chunk in or out is one more operation (a
        // TLB shootdown each), or a swap out of many small cold runs would look as cheap as one
        // out of a single superpage. Huge pages split on either side are charged on top.
        let extra_ops = (group.count + picked.len()).saturating_sub(1) as f64;
        let delta = self.costs.eq2(
            (c.reads + group.reads, c.writes + group.writes, group_need),
            (vr, vw, freed),
        ) - extra_ops * self.costs.migrate_op_ns
            - (c.split + group.split + vsplit);
        if delta <= self.threshold.for_bytes(group_need) {
            return Swap::Stop;
        }
        if let Some(rest) = rest_of_run {
            self.victims[j] = rest;
        }
        self.next_victim = j;
        self.demote_budget -= freed;
        self.room += i128::from(freed) - i128::from(c.need);
        for v in picked {
            self.fast_traffic -= v.traffic;
            let value = self.eviction_value(&v);
            self.out.demote(v, MoveReason::Evict, value);
        }
        self.swapped = true;
        self.promote_budget -= c.need;
        self.fast_traffic += c.traffic;
        self.out.promote(c, MoveReason::Swap, delta);
        Swap::Done
    }

    /// BW-AWARE: when the fast tier serves more than its share `share_target` plus `tolerance`
    /// of `total` traffic, hands data back to the slow tier (Memos: read-dominant first, then
    /// the most traffic per byte, so the fewest bytes move) until it serves its share, never
    /// less than the share minus `tolerance`. Promotions stop at the share ([`Self::promote`]'s
    /// limit), so the two leave a band of `tolerance` between them instead of handing back and
    /// promoting the same data at one edge. Returns the fast tier's share before that, when a
    /// share applies.
    pub(super) fn hand_back_bandwidth(
        &mut self,
        share_target: Option<f64>,
        tolerance: f64,
        total: f64,
    ) -> Option<f64> {
        let f = share_target.filter(|_| total > 0.0)?;
        let fast_share = self.fast_traffic / total;
        if self.fast_traffic <= (f + tolerance) * total {
            return Some(fast_share);
        }
        let (excess, most) = (
            self.fast_traffic - f * total,
            self.fast_traffic - (f - tolerance).max(0.0) * total,
        );
        let mut rest: Vec<Victim> = self.victims[self.next_victim..]
            .iter()
            .chain(&self.donors)
            .filter(|v| !self.out.promoted_sps.contains(&v.sp) && v.traffic > 0.0)
            .copied()
            .collect();
        rest.sort_by(|a, b| {
            b.read_dominant
                .cmp(&a.read_dominant)
                .then((b.traffic / b.len as f64).total_cmp(&(a.traffic / a.len as f64)))
                .then(a.start.cmp(&b.start))
        });
        // A donor may be a whole superpage whose cold runs are victims too: never both.
        let mut whole_out = BTreeSet::new();
        let mut moved = 0.0;
        for v in rest {
            if moved >= excess {
                break;
            }
            let whole = v.len >= SUPERPAGE_SIZE;
            let overlaps =
                whole_out.contains(&v.sp) || (whole && self.out.demoted_sps.contains(&v.sp));
            if v.len > self.demote_budget || moved + v.traffic > most || overlaps {
                continue;
            }
            if whole {
                whole_out.insert(v.sp);
            }
            self.demote_budget -= v.len;
            moved += v.traffic;
            let value = self.eviction_value(&v);
            self.out.demote(v, MoveReason::Bandwidth, value);
        }
        self.fast_traffic -= moved;
        Some(fast_share)
    }
}

/// The candidates that ride along in the room a swap frees beyond its own candidate's need.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Riders {
    pub(super) reads: f64,
    pub(super) writes: f64,
    pub(super) need: u64,
    pub(super) count: usize,
    /// Their shares of huge-page splits, ns per epoch.
    pub(super) split: f64,
}

/// The candidates, in order, that fit in `surplus` bytes of room and `budget` bytes of
/// promotion budget, skipping the superpages `excluded` says to.
pub(super) fn riders(
    candidates: &[Candidate],
    surplus: u64,
    budget: u64,
    excluded: impl Fn(u64) -> bool,
) -> Riders {
    let mut group = Riders::default();
    for c in candidates {
        if group.need + c.need > surplus.min(budget) || excluded(c.sp) {
            continue;
        }
        group.reads += c.reads;
        group.writes += c.writes;
        group.need += c.need;
        group.count += 1;
        group.split += c.split;
    }
    group
}
