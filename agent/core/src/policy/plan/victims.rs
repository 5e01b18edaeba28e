//! Step 3 of a plan: fast-resident data that could be demoted to make room, coldest per byte
//! first, and how the target's traffic splits between the tiers (for the bandwidth share).
//!
//! A sampled superpage offers its settled, not-hot fast pages (by its stage-2 counts when it has
//! them, else its stage-1 heat spread evenly), whole when all 512 are fast and none is hot;
//! resident data never sampled comes last in value and first in line: the coldest of all. The
//! cold runs of a huge page share what splitting it costs, so a hot huge page gives up its cold
//! pages only when the room pays for the TLB reach its hot ones lose. Under a bandwidth share
//! its settled hot fast data is offered too, as donors the fast tier may hand back for
//! bandwidth: whole where handing back part would split a huge page, and never in parts then.

use super::{Planner, Scale};
use crate::{
    engine::{
        HotnessView, Units,
        domain::{self, Domain},
        subpage,
        superpage::{NO_SLOT, SuperpageRecord},
    },
    policy::{PlacementView, benefit::CostModel, splits_huge},
    units::{
        Direction, Granularity, PAGE_SIZE, PageMask, Residency, SUBPAGES, SUPERPAGE_SIZE, Tier,
        both, except, page_bits, page_runs, set_pages, subpage_index, superpage_base, superpage_of,
    },
};

/// Fast-resident data that could be demoted.
#[derive(Clone, Copy, Debug)]
pub(super) struct Victim {
    pub(super) sp: u64,
    pub(super) start: u64,
    pub(super) len: u64,
    pub(super) gran: Granularity,
    pub(super) reads: f64,
    pub(super) writes: f64,
    /// Its share of splitting its superpage's huge page, ns per epoch: the cold runs of a
    /// huge page share it by length.
    pub(super) split: f64,
    /// Accesses per epoch on the stage-1 scale.
    pub(super) traffic: f64,
    pub(super) read_dominant: bool,
}

impl Victim {
    /// What demoting it loses per epoch: its accesses, now slow, and its share of a split.
    pub(super) fn loss(&self, costs: &CostModel) -> f64 {
        costs.access_value(self.reads, self.writes) + self.split
    }

    /// Splits off the first `bytes` of a run of 4 KiB pages (counts pro rata); whole-superpage
    /// victims and runs no longer than `bytes` are taken whole.
    pub(super) fn take(self, bytes: u64) -> (Self, Option<Self>) {
        if self.gran != Granularity::KIB_4 || bytes == 0 || bytes >= self.len {
            return (self, None);
        }
        let f = bytes as f64 / self.len as f64;
        let part = Self {
            len: bytes,
            reads: self.reads * f,
            writes: self.writes * f,
            split: self.split * f,
            traffic: self.traffic * f,
            ..self
        };
        let rest = Self {
            start: self.start + bytes,
            len: self.len - bytes,
            reads: self.reads - part.reads,
            writes: self.writes - part.writes,
            split: self.split - part.split,
            traffic: self.traffic - part.traffic,
            ..self
        };
        (part, Some(rest))
    }
}

/// Estimated accesses per epoch served by the fast tier, and in total.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Traffic {
    pub(super) fast: f64,
    pub(super) total: f64,
}

/// What the fast tier could give up: its cold data for room, and the hot data of the stage-2
/// superpages for bandwidth.
#[derive(Clone, Debug, Default)]
pub(super) struct Evictable {
    /// Settled, not-hot fast data, coldest per byte first: what makes room.
    pub(super) victims: Vec<Victim>,
    /// The settled hot fast data of the stage-2 superpages (whole where the superpage is):
    /// what BW-AWARE hands back when the fast tier serves more than its share, with the
    /// victims. Stage-1 victims carry their heat already.
    pub(super) donors: Vec<Victim>,
    pub(super) traffic: Traffic,
}

/// The superpage being looked at, and what it needs from the planner's state.
struct SuperpageVictims<'a> {
    rec: &'a SuperpageRecord,
    residency: Residency,
    /// Accesses per epoch on the stage-1 scale (read samples).
    accesses: f64,
    /// What a sample stands for.
    units: Units,
    /// Pages promoted within the hysteresis window (not victims).
    recent: PageMask,
    read_dominant: bool,
    /// The coarsest granule a cold run is cut into.
    granule: Granularity,
    /// Demoting part of it splits a huge page.
    splits_huge: bool,
    /// A huge page only DAMON saw: its credits cannot tell its cold parts from its hot ones
    /// (one accessed bit covers them all), so it is demoted whole or not at all.
    blind: bool,
}

impl SuperpageVictims<'_> {
    /// Its fast pages not promoted within the hysteresis window.
    fn settled_fast(&self) -> PageMask {
        except(&self.residency.pages_in(Tier::Fast), &self.recent)
    }

    fn whole_fast_and_settled(&self) -> bool {
        self.residency.fast_pages() as usize == SUBPAGES && self.recent == [0; 8]
    }

    /// The whole superpage as one victim, moved as a huge page.
    fn whole(&self, reads: f64, writes: f64, traffic: f64) -> Victim {
        Victim {
            sp: self.rec.sp,
            start: superpage_base(self.rec.sp),
            len: SUPERPAGE_SIZE,
            gran: Granularity::MIB_2,
            reads,
            writes,
            split: 0.0,
            read_dominant: self.read_dominant,
            traffic,
        }
    }

    /// A run of `n` pages from page `first`, moved in granules of `gran`.
    fn run(
        &self,
        first: usize,
        n: usize,
        gran: Granularity,
        reads: f64,
        writes: f64,
        traffic: f64,
    ) -> Victim {
        Victim {
            start: superpage_base(self.rec.sp) + first as u64 * PAGE_SIZE,
            len: n as u64 * PAGE_SIZE,
            gran,
            ..self.whole(reads, writes, traffic)
        }
    }
}

impl Planner {
    /// The coarsest granule cold runs move in: the medium granularity (64 KiB by default), or
    /// 4 KiB when the granularity is pinned there (Ryoo's static 4 KiB baseline moves every page
    /// on its own).
    fn victim_granule(&self) -> Granularity {
        let g = &self.cfg.granularity;
        if g.fixed && g.initial == Granularity::KIB_4 {
            Granularity::KIB_4
        } else {
            g.medium
        }
    }

    /// Fast-resident data that could be demoted, coldest per byte first, the hot data that
    /// could be handed back for bandwidth (when `with_donors`: a bandwidth share applies), and
    /// the traffic split between the tiers.
    pub(super) fn collect_victims(
        &self,
        hot: &HotnessView<'_>,
        costs: &CostModel,
        view: &dyn PlacementView,
        (epoch, scale): (u64, Scale),
        with_donors: bool,
    ) -> Evictable {
        let pc = &self.cfg;
        let mut victims = Vec::new();
        let mut donors = Vec::new();
        let mut traffic = Traffic::default();
        let granule = self.victim_granule();
        for rec in hot.superpages() {
            let acc = f64::from(hot.accesses(rec)) * scale.k1;
            traffic.total += acc;
            let residency = view.residency(superpage_base(rec.sp));
            if residency.fast_pages() == 0 {
                continue;
            }
            // Stage 2 says which pages carry the traffic; without it assume it is spread evenly.
            traffic.fast += acc * fast_fraction(hot, rec.slot, &residency);
            let huge = splits_huge(view, superpage_base(rec.sp), &residency);
            let sv = SuperpageVictims {
                rec,
                residency,
                accesses: acc,
                units: hot.units,
                recent: self.marks.reversed_pages(
                    rec.sp,
                    Direction::Demote,
                    epoch,
                    pc.capacity.hysteresis_epochs,
                ),
                read_dominant: domain::classify_samples(
                    rec.heat_r,
                    rec.heat_w,
                    pc.rw.read_write_ratio,
                    hot.write_factor(),
                ) == Domain::ReadDominant,
                granule,
                splits_huge: huge,
                blind: huge
                    && rec.slot != NO_SLOT
                    && !hot.sampled(rec.slot)
                    && !pc.granularity.fixed,
            };
            let first = victims.len();
            let accesses = if rec.slot == NO_SLOT {
                stage1_victims(&sv, scale.k1, &mut victims)
            } else {
                let donors = with_donors.then_some(&mut donors);
                self.stage2_victims(hot, costs, &sv, scale.k2, (&mut victims, donors))
            };
            let runs = &mut victims[first..];
            if sv.splits_huge && runs.iter().any(|v| v.len < SUPERPAGE_SIZE) {
                share_split(runs, costs.split_cost(accesses));
            }
        }
        self.never_sampled_victims(hot, view, epoch, &mut victims);
        victims.sort_by(|a, b| {
            let va = a.loss(costs) / a.len as f64;
            let vb = b.loss(costs) / b.len as f64;
            va.total_cmp(&vb).then(a.start.cmp(&b.start))
        });
        Evictable {
            victims,
            donors,
            traffic,
        }
    }

    /// The victims of a stage-2 superpage: its fast pages that are settled and not hot, valued
    /// by their own counts; its settled hot fast pages go to `donors`, whole when the whole
    /// superpage is fast and settled. Returns the superpage's accesses per epoch.
    fn stage2_victims(
        &self,
        hot: &HotnessView<'_>,
        costs: &CostModel,
        sv: &SuperpageVictims<'_>,
        k2: f64,
        (victims, donors): (&mut Vec<Victim>, Option<&mut Vec<Victim>>),
    ) -> f64 {
        let (r, w) = hot.counters(sv.rec.slot);
        let factor = sv.units.write_factor();
        let counted = hot.counted_pages(sv.rec.slot);
        // A run's read, write and read-sample counts, summed as integers and scaled once, over
        // its pages with a count: this is the planner's hottest loop (every stage-2 superpage
        // with fast data).
        let counts = |first: usize, n: usize| {
            let pages = set_pages(both(&counted, &page_bits(first, n)));
            pages.fold((0u64, 0u64, 0u64), |(cr, cw, cs), p| {
                (
                    cr + u64::from(subpage::value(r[p])),
                    cw + u64::from(subpage::value(w[p])),
                    cs + u64::from(subpage::in_read_samples(r[p], w[p], factor)),
                )
            })
        };
        let all = counts(0, SUBPAGES);
        let total = all.2 as f64 * k2;
        // Stage-1 traffic per stage-2 read sample: the superpage's traffic shared by its pages.
        let per = sv.accesses / total.max(1.0);
        let scaled = |(cr, cw, cs): (u64, u64, u64)| {
            (
                cr as f64 * k2 * sv.units.read,
                cw as f64 * k2 * sv.units.write,
                cs as f64 * k2 * per,
            )
        };
        // Worked out once: the runs below ask up to twice per page, and only of fast pages.
        let threshold = self.cfg.benefit.threshold_ns;
        let hot_pages = hot_fast_pages(costs, threshold, sv, (r, w), k2);
        let sum = |first: usize, n: usize| scaled(counts(first, n));
        let (reads, writes, traffic) = scaled(all);
        // Every page is fast here, so "no fast page hot" is "no page hot".
        if sv.whole_fast_and_settled() && hot_pages == [0; 8] {
            victims.push(sv.whole(reads, writes, traffic));
            return reads + writes;
        }
        let push_runs = |hot_runs: bool, out: &mut Vec<Victim>| {
            let settled = sv.settled_fast();
            let pages = if hot_runs {
                both(&settled, &hot_pages)
            } else {
                except(&settled, &hot_pages)
            };
            page_runs(&pages, |first, n| {
                for (first, n, gran) in granules(first, n, sv.granule) {
                    let (reads, writes, traffic) = sum(first, n);
                    out.push(sv.run(first, n, gran, reads, writes, traffic));
                }
            });
        };
        if !sv.blind {
            push_runs(false, victims);
        }
        // Bandwidth hands hot data back whole where handing back part would split a huge page.
        match donors {
            Some(donors) if sv.whole_fast_and_settled() && (sv.blind || sv.splits_huge) => {
                donors.push(sv.whole(reads, writes, traffic));
            }
            Some(donors) if !sv.blind && !sv.splits_huge => push_runs(true, donors),
            _ => {}
        }
        reads + writes
    }

    /// Resident data never sampled: the coldest of all, whole superpages where they are whole.
    fn never_sampled_victims(
        &self,
        hot: &HotnessView<'_>,
        view: &dyn PlacementView,
        epoch: u64,
        victims: &mut Vec<Victim>,
    ) {
        let hysteresis = self.cfg.capacity.hysteresis_epochs;
        view.for_each_fast_range(&mut |start, len| {
            let (mut a, end) = (
                start.next_multiple_of(PAGE_SIZE),
                (start + len) & !(PAGE_SIZE - 1),
            );
            while a < end {
                let sp = superpage_of(a);
                let piece_end = superpage_base(sp + 1).min(end);
                let first = subpage_index(a);
                let pages = ((piece_end - a) / PAGE_SIZE) as usize;
                if hot.superpage(sp).is_none()
                    && !self.marks.reverses(
                        sp,
                        &page_bits(first, pages),
                        Direction::Demote,
                        epoch,
                        hysteresis,
                    )
                {
                    let whole = a == superpage_base(sp) && piece_end == superpage_base(sp + 1);
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
                        split: 0.0,
                        traffic: 0.0,
                        read_dominant: true,
                    });
                }
                a = piece_end;
            }
        });
    }
}

/// The victims of a superpage without stage-2 counters: its stage-1 heat spread evenly over its
/// settled fast pages.
/// Returns the superpage's accesses per epoch.
fn stage1_victims(sv: &SuperpageVictims<'_>, k1: f64, victims: &mut Vec<Victim>) -> f64 {
    let share = |n: usize| n as f64 / SUBPAGES as f64;
    let victim = |first: usize, n: usize| {
        let f = k1 * share(n);
        let (reads, writes) = (f64::from(sv.rec.heat_r) * f, f64::from(sv.rec.heat_w) * f);
        let traffic = reads + writes * sv.units.write_factor();
        (
            reads * sv.units.read,
            writes * sv.units.write,
            traffic,
            first,
            n,
        )
    };
    let (reads, writes, traffic, _, _) = victim(0, SUBPAGES);
    if sv.whole_fast_and_settled() {
        victims.push(sv.whole(reads, writes, traffic));
    } else {
        page_runs(&sv.settled_fast(), |first, n| {
            for (first, n, gran) in granules(first, n, sv.granule) {
                let (reads, writes, traffic, first, n) = victim(first, n);
                victims.push(sv.run(first, n, gran, reads, writes, traffic));
            }
        });
    }
    reads + writes
}

/// Shares what splitting their huge page costs among the cold runs of one superpage, by length:
/// demoting any of them splits it, and the split costs the same however much goes.
fn share_split(runs: &mut [Victim], split: f64) {
    let total: u64 = runs.iter().map(|v| v.len).sum();
    for v in runs {
        v.split = split * v.len as f64 / total as f64;
    }
}

/// Share of a superpage's accesses that falls on its fast-resident pages.
fn fast_fraction(hot: &HotnessView<'_>, slot: u32, res: &Residency) -> f64 {
    if slot == NO_SLOT {
        return f64::from(res.fast_pages()) / SUBPAGES as f64;
    }
    let (r, w) = hot.counters(slot);
    let factor = hot.write_factor();
    // Integer sums over the pages with a count: the same as summing every page's count in
    // floats (each partial sum is exact).
    let (mut fast, mut all) = (0u64, 0u64);
    for p in set_pages(hot.counted_pages(slot)) {
        let c = u64::from(subpage::in_read_samples(r[p], w[p], factor));
        all += c;
        fast += c * ((res.fast[p / 64] >> (p % 64)) & 1);
    }
    if all > 0 {
        fast as f64 / all as f64
    } else {
        f64::from(res.fast_pages()) / SUBPAGES as f64
    }
}

/// A run of `n` pages from page `first` cut where it can move in fewer operations: the aligned
/// `granule`s it covers whole move one operation each, the pages before and after them one by
/// one. Demoting a cold run page by page would cost a TLB shootdown per 4 KiB.
pub(super) fn granules(
    first: usize,
    n: usize,
    granule: Granularity,
) -> impl Iterator<Item = (usize, usize, Granularity)> {
    let pages = usize::try_from(granule.pages()).unwrap_or(1).max(1);
    let end = first + n;
    let body_start = first.next_multiple_of(pages).min(end);
    let body_end = (end / pages * pages).max(body_start);
    let head = (body_start > first).then_some((first, body_start - first, Granularity::KIB_4));
    let body = (body_start..body_end)
        .step_by(pages)
        .map(move |p| (p, pages, granule));
    let tail = (end > body_end).then_some((body_end, end - body_end, Granularity::KIB_4));
    head.into_iter().chain(body).chain(tail)
}

/// The fast pages of a stage-2 superpage (a bit each) whose own counts pass Eq. (1) against the
/// per-page threshold: a page whose accesses pay for its copy is hot whatever the promotion
/// threshold, so a threshold raised to make promotions pickier does not make warm data an
/// eviction victim (it would hand the watermark whole superpages of it).
fn hot_fast_pages(
    costs: &CostModel,
    threshold: f64,
    sv: &SuperpageVictims<'_>,
    (r, w): (&[u32], &[u32]),
    k2: f64,
) -> PageMask {
    let uncounted_is_hot = costs.eq1(0.0, 0.0, PAGE_SIZE) > threshold;
    let mut hot = [0u64; 8];
    for p in set_pages(sv.residency.fast) {
        let passes = if r[p] | w[p] == 0 {
            uncounted_is_hot
        } else {
            let reads = f64::from(subpage::value(r[p])) * k2 * sv.units.read;
            let writes = f64::from(subpage::value(w[p])) * k2 * sv.units.write;
            costs.eq1(reads, writes, PAGE_SIZE) > threshold
        };
        hot[p / 64] |= u64::from(passes) << (p % 64);
    }
    hot
}
