//! Step 2 of a plan: Ryoo's scans set the target granularity, and the stage-2 superpages offer
//! their slow data as promotion candidates, each judged by Eq. (1) against the threshold.

use super::{Planner, Scale};
use crate::{
    engine::{HotnessView, subpage},
    policy::{
        CapacityView, PlacementView, PolicyConfig,
        benefit::CostModel,
        granularity::{LASTING_INTERVALS, ScanRegion, colder_than_fast, reaches},
        rw::{self, WritePrediction},
        splits_huge,
    },
    units::{
        Direction, Granularity, PAGE_SIZE, PageMask, SUBPAGES, SUPERPAGE_SIZE, Tier, both,
        count_pages, count_within, page_bits, set_pages, superpage_base,
    },
};

/// Slow data worth promoting: a whole superpage, a medium chunk or one hot page.
#[derive(Clone, Copy, Debug)]
pub(super) struct Candidate {
    pub(super) sp: u64,
    pub(super) start: u64,
    pub(super) gran: Granularity,
    /// Slow bytes that will move.
    pub(super) need: u64,
    pub(super) reads: f64,
    pub(super) writes: f64,
    pub(super) benefit: f64,
    /// Its share of splitting its superpage's huge page, ns per epoch (already taken off
    /// `benefit`): what Eq. (2) charges on top when it swaps.
    pub(super) split: f64,
    /// Accesses per epoch on the stage-1 scale, for the bandwidth share.
    pub(super) traffic: f64,
    pub(super) class: WritePrediction,
}

/// What the candidates of one stage-2 superpage are cut from.
struct RegionCtx<'a> {
    sp: u64,
    r: &'a [u32],
    w: &'a [u32],
    /// Stage-2 counts → reads and writes per epoch (the read and write units times k2).
    per_read: f64,
    per_write: f64,
    write_factor: f64,
    traffic_per_count: f64,
    /// Accessed pages and their density estimate.
    region: &'a ScanRegion,
    /// Its slow-resident pages.
    slow: PageMask,
    /// Pages demoted within the hysteresis window.
    blocked: &'a PageMask,
    /// Samples a part of the superpage needs (`benefit.min_samples`).
    min_counts: f64,
    class: WritePrediction,
    /// Moving part of it splits a huge page.
    splits_huge: bool,
    /// The fast tier (the target's share of it) can hold a whole superpage beside its reserve.
    whole_fits: bool,
}

impl Planner {
    /// Scans the stage-2 superpages (setting the target granularity) and returns the promotion
    /// candidates: predicted write-hot first when slow writes cost more (Memos), then by benefit
    /// per byte.
    pub(super) fn promotion_candidates(
        &mut self,
        hot: &HotnessView<'_>,
        (view, cap): (&dyn PlacementView, &CapacityView),
        costs: &CostModel,
        scale: Scale,
        epoch: u64,
    ) -> Vec<Candidate> {
        let fast_superpages =
            usize::try_from(cap.fast_reach_bytes() / SUPERPAGE_SIZE).unwrap_or(usize::MAX);
        let whole_fits = self.cfg.capacity.holdable_bytes(cap) >= SUPERPAGE_SIZE;
        let bars = RegionBars {
            min_samples: self.cfg.benefit.min_samples,
            fits_fast: hot.accesses_to_rank(fast_superpages),
            open_share: hot.open_share(),
        };
        let live = hot.stage2_superpages();
        let (regions, huge): (Vec<ScanRegion>, Vec<bool>) = live
            .iter()
            .map(|&(slot, sp)| scan_region(hot, view, slot, sp, bars))
            .unzip();
        self.granularity.update(&self.cfg.granularity, &regions);
        let target = self.granularity.current();
        let pc = &self.cfg;
        let write_first = pc.rw.write_priority && costs.writes_cost_more();
        let mut candidates = Vec::new();
        for ((&(slot, sp), region), splits_huge) in live.iter().zip(&regions).zip(huge) {
            let blocked = self.marks.reversed_pages(
                sp,
                Direction::Promote,
                epoch,
                pc.capacity.hysteresis_epochs,
            );
            let rec = hot.superpage(sp);
            let class = match rec {
                Some(rec) if write_first => rw::predict(rec.write_history, &pc.rw),
                _ => WritePrediction::UnWd,
            };
            let (r, w) = hot.counters(slot);
            let write_factor = hot.write_factor();
            // Summed as integers over the pages with a count: the same exact sum as in floats.
            let stage2_total = set_pages(region.accessed)
                .map(|p| u64::from(subpage::in_read_samples(r[p], w[p], write_factor)))
                .sum::<u64>() as f64;
            // Stage-1 accesses per stage-2 count: candidate traffic and tier traffic share a scale.
            let traffic_per_count = rec.map_or(0.0, |rec| {
                f64::from(hot.accesses(rec)) * scale.k1 / stage2_total.max(1.0)
            });
            let ctx = RegionCtx {
                sp,
                r,
                w,
                per_read: scale.k2 * hot.units.read,
                per_write: scale.k2 * hot.units.write,
                write_factor,
                traffic_per_count,
                region,
                slow: region.residency.pages_in(Tier::Slow),
                blocked: &blocked,
                min_counts: f64::from(pc.benefit.min_samples),
                class,
                splits_huge,
                whole_fits,
            };
            self.region_candidates(pc, costs, target, &ctx, &mut candidates);
        }
        candidates.sort_by(|a, b| {
            b.class
                .cmp(&a.class)
                .then((b.benefit / b.need as f64).total_cmp(&(a.benefit / a.need as f64)))
                .then(a.start.cmp(&b.start))
        });
        candidates
    }

    /// The candidates of one superpage: whole when it shows heat and its samples do not show it
    /// sparse (or it is dense enough for a 2 MiB target), else per medium chunk that is dense,
    /// else per accessed page. A whole that does not pass Eq. (1) offers no parts: where the
    /// samples do not show the superpage sparse they cannot rank its pages (a sweep's ranked
    /// pages are the ones it already left). A whole the fast tier cannot hold at all (a tier,
    /// or a target's share of it, under 2 MiB) would never move: its parts are offered
    /// instead, unless the granularity is pinned. Parts of a huge page pay for splitting it
    /// together, each in proportion to its benefit; when they cannot, none is offered. A huge
    /// page only DAMON saw offers no parts.
    fn region_candidates(
        &self,
        pc: &PolicyConfig,
        costs: &CostModel,
        target: Granularity,
        ctx: &RegionCtx<'_>,
        out: &mut Vec<Candidate>,
    ) {
        let g = &pc.granularity;
        if ctx.slow == [0; 8] {
            return;
        }
        let first = out.len();
        let mut push = |start_page: usize, pages: usize, gran: Granularity| {
            if let Some(c) = self.candidate(costs, ctx, start_page, pages, gran) {
                out.push(c);
            }
        };
        // Whole when it pays; when it does not, its dense parts still may. DAMON's credits
        // cannot rank the parts of a huge page (one accessed bit covers them all, and the
        // credits follow region boundaries): it moves whole or not at all.
        let blind = !ctx.region.sampled && ctx.splits_huge && !g.fixed;
        if blind || g.moves_whole(target, ctx.region) {
            if ctx.whole_fits {
                push(0, SUBPAGES, Granularity::MIB_2);
            }
            if ctx.whole_fits || blind || g.fixed {
                return;
            }
        }
        let mp = g.medium.pages() as usize;
        for chunk in (0..SUBPAGES).step_by(mp) {
            let observed = count_within(&ctx.region.accessed, chunk, mp);
            let acc = ctx.region.estimate(observed, mp as u32);
            if g.chunk_granularity(target, acc) == g.medium {
                push(chunk, mp, g.medium);
            } else {
                for p in set_pages(both(&ctx.region.accessed, &page_bits(chunk, mp))) {
                    push(p, 1, Granularity::KIB_4);
                }
            }
        }
        if ctx.splits_huge && out.len() > first {
            let accesses: f64 = (0..SUBPAGES)
                .map(|p| {
                    f64::from(subpage::value(ctx.r[p])) * ctx.per_read
                        + f64::from(subpage::value(ctx.w[p])) * ctx.per_write
                })
                .sum();
            let split = costs.split_cost(accesses);
            let parts = &mut out[first..];
            let total: f64 = parts.iter().map(|c| c.benefit).sum();
            if total <= split {
                out.truncate(first);
                return;
            }
            for c in parts {
                c.split = split * c.benefit / total;
                c.benefit -= c.split;
            }
        }
    }

    /// `pages` pages from `start_page` as one candidate, if they hold slow data that was not
    /// just demoted, was sampled often enough, and passes Eq. (1) against the threshold.
    fn candidate(
        &self,
        costs: &CostModel,
        ctx: &RegionCtx<'_>,
        start_page: usize,
        pages: usize,
        gran: Granularity,
    ) -> Option<Candidate> {
        let range = page_bits(start_page, pages);
        let slow = both(&range, &ctx.slow);
        let need = u64::from(count_pages(&slow)) * PAGE_SIZE;
        // Pages demoted within the hysteresis window stay where they are.
        if need == 0 || both(&range, ctx.blocked) != [0; 8] {
            return None;
        }
        // Pages without a count add nothing: the sums are the same over the counted ones, in
        // the same order.
        let (mut reads, mut writes, mut counts, mut traffic) = (0.0, 0.0, 0.0, 0.0);
        for p in set_pages(both(&slow, &ctx.region.accessed)) {
            let (cr, cw) = (
                f64::from(subpage::value(ctx.r[p])),
                f64::from(subpage::value(ctx.w[p])),
            );
            reads += cr * ctx.per_read;
            writes += cw * ctx.per_write;
            counts += cr + cw;
            traffic += cr + cw * ctx.write_factor;
        }
        let benefit = costs.eq1(reads, writes, need);
        // A part must show heat of its own, apart from its neighbours', and that takes repeated
        // samples on it (`benefit.min_samples`). A whole superpage's evidence is the traffic
        // its samples stand for, which Eq. (1) weighs against copying 512 pages: at a dense
        // rate a lone sample stands for far fewer accesses than that costs, at a PMU's period
        // (10^4 to 10^6 accesses) for far more, and a floor counted in samples kept every
        // superpage from moving there (one sample per superpage in seconds).
        let floor = if pages == SUBPAGES {
            f64::MIN_POSITIVE
        } else {
            ctx.min_counts
        };
        (counts >= floor && benefit > self.threshold.for_bytes(need)).then(|| Candidate {
            sp: ctx.sp,
            start: superpage_base(ctx.sp) + start_page as u64 * PAGE_SIZE,
            gran,
            need,
            reads,
            writes,
            benefit,
            split: 0.0,
            traffic: traffic * ctx.traffic_per_count,
            class: ctx.class,
        })
    }
}

/// What a stage-2 superpage's counts are measured against.
#[derive(Clone, Copy)]
struct RegionBars {
    /// Samples a part of a superpage needs to move on its own (`benefit.min_samples`).
    min_samples: u32,
    /// Stage-1 accesses that rank a superpage among those the fast tier can hold whole.
    fits_fast: u32,
    /// The open interval's share of the cooled counts ([`HotnessView::open_share`]).
    open_share: f64,
}

/// What Ryoo's scans see of one stage-2 superpage: its accessed pages, where its pages are, and
/// how many pages the sampled ones stand for, whether a slow page holds `min_samples`, how its
/// heat ranks and how long it has lasted; and whether moving part of it splits a huge page.
fn scan_region(
    hot: &HotnessView<'_>,
    view: &dyn PlacementView,
    slot: u32,
    sp: u64,
    bars: RegionBars,
) -> (ScanRegion, bool) {
    let (r, w) = hot.counters(slot);
    let mut accessed = hot.counted_pages(slot);
    let residency = view.residency(superpage_base(sp));
    let sampled = hot.sampled(slot);
    let huge = splits_huge(view, superpage_base(sp), &residency);
    // A page-table scan reads one accessed bit for all 512 pages of a huge page, as DAMON's
    // checks do: where DAMON's credits cover any of it, all of it was seen accessed.
    if !sampled && accessed != [0; 8] && huge {
        accessed = [u64::MAX; 8];
    }
    let rec = hot.superpage(sp);
    let count = rec.map_or(0, |rec| hot.accesses(rec));
    let evidence = (count, rec.map_or(0, |rec| hot.open_accesses(rec)));
    let region = ScanRegion {
        sp,
        accessed,
        residency,
        density_scale: hot.density_scale(slot),
        coverage: hot.sample_coverage(slot),
        sampled,
        hot: reaches(evidence, hot.hot_cutoff, bars.open_share),
        colder_than_fast: colder_than_fast(evidence, (hot.hot_cutoff, bars.fits_fast)),
        fits_fast: reaches(evidence, bars.fits_fast, bars.open_share),
        lasting: rec.is_some_and(|rec| hot.touched_run(rec) >= LASTING_INTERVALS),
        page_at_floor: {
            let slow = residency.pages_in(Tier::Slow);
            if bars.min_samples == 0 {
                slow != [0; 8]
            } else {
                set_pages(both(&slow, &accessed)).any(|p| {
                    subpage::value(r[p]).saturating_add(subpage::value(w[p])) >= bars.min_samples
                })
            }
        },
    };
    (region, huge)
}
