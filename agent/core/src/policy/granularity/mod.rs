//! Ryoo's granularity-aware migration (§4), adapted to sampled per-4 KiB data.
//!
//! One granularity per target, in {4 KiB, medium (64 KiB), 2 MiB}. The move-in scan (over
//! slow-resident pages) may only raise it, the move-out scan (over fast-resident pages) may only
//! lower it. "Accessed" means a non-zero stage-2 counter. Each scan reads at most `scan_pages`
//! pages of its tier, starting after where the previous scan stopped, so the region-count
//! thresholds (3 regions) keep the meaning they have with Ryoo's 4,096-page scans.
//!
//! Ryoo's text says to lower 2 MiB → 64 KiB when "the number of sparsely accessed 64KB regions is
//! below the threshold"; read literally that would also lower it for dense streaming data, which
//! has no sparse regions at all. We require the 2 MiB regions to be sparse as well, which is what
//! the rule's purpose (64 KiB locality without 2 MiB locality) needs.
//!
//! The target granularity is a ceiling; per region the planner goes finer where the data is
//! sparse (Rainbow), a medium chunk moving only when it is dense. With sampled accesses, "dense"
//! cannot be confirmed page by page (a superpage sampled 20 times an epoch shows at most 20
//! pages), only "sparse" can: samples that keep landing on the pages already seen, away from
//! each other ([`ScanRegion::samples_show_sparse`]). So a superpage moves whole (the unit of
//! THP, HeMem and the kernel) unless its samples show it sparse; Ryoo's density then picks
//! between medium chunks and pages within it. Dense data sampled thinly, and a sweep whose
//! samples run along neighbouring pages, both move whole.

use serde::{Deserialize, Serialize};

use crate::units::{
    Granularity, PAGE_SIZE, Residency, SUBPAGES, SUPERPAGE_SIZE, both, count_pages, count_within,
};
use crate::validate::{ConfigError, check};

/// Granularity tunables; the thresholds are Ryoo's typical values.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GranularityConfig {
    /// Granularity before the first scan, bytes. Default 4096.
    pub initial: Granularity,
    /// The middle granularity, bytes: a multiple of 4 KiB dividing 2 MiB. Default 65536.
    pub medium: Granularity,
    /// A 2 MiB region is dense on move-in with more than this many accessed pages. Default 480.
    pub thr_high_2m: u32,
    /// A medium chunk is dense on move-in with more than this many accessed pages. Default 10 (of 16).
    pub thr_high_medium: u32,
    /// Raise to 2 MiB when more than this many dense 2 MiB regions are seen. Default 3.
    pub thr_high_num_reg_2m: u32,
    /// Raise to medium when more than this many dense medium chunks are seen. Default 3.
    pub thr_high_num_reg_medium: u32,
    /// A 2 MiB region is sparse on move-out with fewer than this many accessed pages. Default 480.
    pub thr_low_2m: u32,
    /// A medium chunk is sparse on move-out with fewer than this many accessed pages. Default 10.
    pub thr_low_medium: u32,
    /// Lowering needs more than this many sparse 2 MiB regions. Default 3.
    pub thr_low_num_reg_2m: u32,
    /// Lower to 4 KiB with more than, or to medium with fewer than, this many sparse chunks. Default 3.
    pub thr_low_num_reg_medium: u32,
    /// Pages of the scanned tier read per scan. Default 4096 (Ryoo).
    pub scan_pages: u32,
    /// Pin the granularity at `initial` and move every chunk at it, however sparse (Ryoo's
    /// static 4 KiB / 64 KiB / 2 MiB baselines; the simulator uses it). Default false.
    pub fixed: bool,
}

impl Default for GranularityConfig {
    fn default() -> Self {
        Self {
            initial: Granularity::KIB_4,
            medium: Granularity::KIB_64,
            thr_high_2m: 480,
            thr_high_medium: 10,
            thr_high_num_reg_2m: 3,
            thr_high_num_reg_medium: 3,
            thr_low_2m: 480,
            thr_low_medium: 10,
            thr_low_num_reg_2m: 3,
            thr_low_num_reg_medium: 3,
            scan_pages: 4096,
            fixed: false,
        }
    }
}

impl GranularityConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let m = self.medium.bytes();
        check(
            m > PAGE_SIZE && m < SUPERPAGE_SIZE && SUPERPAGE_SIZE.is_multiple_of(m),
            "granularity.medium",
            m,
            "must lie strictly between 4 KiB and 2 MiB and divide 2 MiB",
        )?;
        check(
            [Granularity::KIB_4, self.medium, Granularity::MIB_2].contains(&self.initial),
            "granularity.initial",
            self.initial.bytes(),
            "must be 4 KiB, medium or 2 MiB",
        )?;
        let pages = u32::try_from(self.medium.pages()).unwrap_or(u32::MAX);
        check(
            self.thr_high_medium < pages && self.thr_low_medium <= pages,
            "granularity.thr_*_medium",
            self.thr_high_medium,
            "must be below the pages of a medium chunk",
        )?;
        check(
            self.thr_high_2m < 512 && self.thr_low_2m <= 512,
            "granularity.thr_*_2m",
            self.thr_high_2m,
            "must be below 512",
        )
    }

    fn medium_pages(&self) -> usize {
        usize::try_from(self.medium.pages()).unwrap_or(SUBPAGES)
    }

    /// Whether a superpage moves whole under `target`: pinned, when any page was accessed;
    /// adaptive, when Ryoo's move-in rule finds it dense under a 2 MiB target, or when it was
    /// sampled, shows heat and its samples do not show it sparse.
    #[must_use]
    pub fn moves_whole(&self, target: Granularity, region: &ScanRegion) -> bool {
        let accessed: u32 = region.accessed.iter().map(|w| w.count_ones()).sum();
        if self.fixed {
            return target >= Granularity::MIB_2 && accessed > 0;
        }
        let dense = region.estimate(accessed, SUBPAGES as u32) > self.thr_high_2m;
        (target >= Granularity::MIB_2 && dense)
            || (region.sampled && region.shows_heat() && !region.samples_show_sparse())
    }

    /// Granularity of a medium chunk with `accessed` pages under `target` (when not moved whole).
    #[must_use]
    pub fn chunk_granularity(&self, target: Granularity, accessed: u32) -> Granularity {
        if self.fixed {
            return if target >= self.medium && accessed > 0 {
                self.medium
            } else {
                Granularity::KIB_4
            };
        }
        if target >= self.medium && accessed > self.thr_high_medium {
            self.medium
        } else {
            Granularity::KIB_4
        }
    }
}

/// One stage-2 superpage as a scan sees it.
#[derive(Clone, Copy, Debug)]
pub struct ScanRegion {
    /// Superpage number (address >> 21); scans walk regions in this order.
    pub sp: u64,
    /// Pages with a non-zero access counter.
    pub accessed: [u64; 8],
    pub residency: Residency,
    /// Accessed pages each observed accessed page stands for (≥ 1): sampling misses pages of
    /// dense data, and Ryoo's thresholds assume complete access bits.
    pub density_scale: f64,
    /// Good–Turing coverage of the region's last full window of samples (`None`: none filled
    /// yet): the share of its coming accesses expected on pages already sampled.
    pub coverage: Option<f64>,
    /// Stage 1 ranks the superpage in the hot set (the superpages carrying 70 % of accesses),
    /// by its open interval's samples where it holds no heat for it yet ([`reaches`]).
    pub hot: bool,
    /// Stage 1 finds it colder than what the fast tier holds ([`colder_than_fast`]): being
    /// outside the hot set is evidence of being colder only where the fast tier could not hold
    /// it beside the hotter superpages anyway, and only beyond sampling noise.
    pub colder_than_fast: bool,
    /// One of its pages holds the samples a promotion needs (`benefit.min_samples`): its pages
    /// can move one by one.
    pub page_at_floor: bool,
    /// Its stage-1 heat ranks it among the superpages the fast tier (the target's reach) can
    /// hold whole (as `hot`, by [`reaches`]).
    pub fits_fast: bool,
    /// Sampled in each of the last [`LASTING_INTERVALS`] counting intervals.
    pub lasting: bool,
    /// Samples reached it (a PMU or page-fault source). DAMON's credits are not samples: its
    /// regions' accessed bits are complete at its resolution, and Ryoo's thresholds read them
    /// as they are.
    pub sampled: bool,
}

/// Coverage from which a region's samples count as resolving its pages: most samples fell on
/// pages seen before. 32 hot pages give about 0.86 over a 64-sample window, 512 about 0.12.
pub const SPARSE_COVERAGE: f64 = 0.5;

/// The significance level of "colder than the hot set": a count whose chance of being that low
/// or lower, were the superpage as hot as the hot set's coolest member, is below this.
pub const NOISE_LEVEL: f64 = 0.05;

/// Cut-offs above which [`below_beyond_noise`] reads the Poisson tail from its normal
/// approximation (within a count of the exact test there).
const EXACT_POISSON_UP_TO: u32 = 100;
/// The standard normal quantile of [`NOISE_LEVEL`].
const NOISE_Z: f64 = 1.645;

/// Whether `count` samples are below `cutoff` by more than sampling noise: under a Poisson
/// count with the cut-off's mean, `count` or fewer has a chance below [`NOISE_LEVEL`]. Cooled
/// counts vary less than a Poisson count of the same mean (a halved sum of them), so the test
/// errs towards "not colder". With the cut-off at 3 only a count of 0 is colder; at 10, up to 4.
/// Integer powers and a square root only: the core links into C programs (memtide-hint) that
/// are not linked against libm.
#[must_use]
pub fn below_beyond_noise(count: u32, cutoff: u32) -> bool {
    if count >= cutoff {
        return false;
    }
    let mean = f64::from(cutoff);
    if cutoff > EXACT_POISSON_UP_TO {
        // Continuity-corrected normal approximation of the lower tail.
        return f64::from(count) + 0.5 - mean < -NOISE_Z * mean.sqrt();
    }
    let exponent = i32::try_from(cutoff).unwrap_or(i32::MAX);
    let mut term = std::f64::consts::E.powi(-exponent);
    let mut at_most = term;
    for i in 1..=count {
        term *= mean / f64::from(i);
        at_most += term;
    }
    at_most < NOISE_LEVEL
}

/// Whether a superpage whose cooled stage-1 count is `cooled` is colder than what the fast
/// tier holds, by more than sampling noise. Its count must be below, beyond noise
/// ([`below_beyond_noise`]), both the hot set's cut-off (`hot_cutoff`) and the count that ranks
/// a superpage among those the fast tier can hold (`fits_fast`): where the fast tier holds more
/// superpages than the hot set (one superpage carrying 70 % of the accesses, a few warm ones
/// beside it), a superpage it could hold beside every hotter one is not colder than what
/// deserves it. A superpage stage 1 holds no heat for (a first touch, or one back after
/// cooling to nothing) is judged by the samples of the interval still open (`open`), the only
/// evidence there is of it: judged by its cooled nothing, its first whole move waited for the
/// interval's close, and at a PMU's period most promotions are first moves of superpages so
/// sampled (at 1 in 8192 that wait left memtide up to 0.4 % behind `static-2m`). Those
/// samples are part of one interval, the cut-off a cooled sum over several, so the test
/// still errs towards "colder" for a first touch. One stage 1
/// holds heat for is judged on closed intervals alone, as the cut-off is: counting the open
/// interval too moved dense bursts whole before a window of samples could show them passing
/// (cc1 at 1 in 4, `pebs`, fast 10 %: 4.5 % slower).
///
/// A burst that has passed (cooled to nothing, nothing in the open interval) is colder by the
/// same test wherever the cut-off can tell it (at 3 or more). A rule that also called
/// colder every superpage cooled to nothing whose pages still held `min_samples` cost the
/// real corpus at every density denser than the production one (1 in 64, `ibs`, fast 25 %:
/// 1.089 against `static-2m`'s 1.076); the trace it guarded (`bw-multistream`) needed it only
/// while the simulator's clock ran 80 times slower than that program's run.
#[must_use]
pub fn colder_than_fast((cooled, open): (u32, u32), (hot_cutoff, fits_fast): (u32, u32)) -> bool {
    let evidence = if cooled == 0 { open } else { cooled };
    below_beyond_noise(evidence, hot_cutoff.max(1).min(fits_fast.max(1)))
}

/// Whether a superpage's stage-1 evidence reaches `bar`, a cooled count (the hot set's
/// cut-off, or the count that ranks a superpage among those the fast tier can hold). One
/// stage 1 holds heat for is judged by its cooled count (`cooled`), as the bar was cut. One it
/// holds none for (a first touch, or one back after cooling to nothing) is judged by the
/// samples of the interval still open (`open`) against what a superpage at the bar has drawn
/// in that interval so far: the bar times `open_share`, the open interval's share of the
/// cooled counts' mass ([`crate::engine::HotnessView::open_share`]), at least one sample.
/// Against the bar itself, a sum over several closed intervals, a first touch's samples always
/// read small until the interval closed: a stream's next window, swept every 15 ms at 1 in 4,
/// waited for the close and moved in pieces meanwhile (`stream`, `ryoo`: 4 % behind
/// `static-2m`). The share is measured, not modelled, so it holds at any density and any
/// cooling. [`colder_than_fast`] still reads the open interval against the bar itself: scaled
/// there, superpages touched in passing stopped looking colder and moved whole (`sqlite` at
/// 1 in 64, `pebs`, fast 10 %: twice the bytes, 5 % slower).
#[must_use]
pub fn reaches((cooled, open): (u32, u32), bar: u32, open_share: f64) -> bool {
    let bar = bar.max(1);
    if cooled > 0 {
        return cooled >= bar;
    }
    // Rounded up without `f64::ceil`, which needs libm (see `below_beyond_noise`).
    let drawn = f64::from(bar) * open_share.clamp(0.0, 1.0);
    let truncated = drawn as u32;
    let expected = truncated + u32::from(f64::from(truncated) < drawn);
    open >= expected.clamp(1, bar)
}

/// Consecutive counting intervals with samples that make a superpage's heat lasting: its
/// reuse spans at least one whole interval (the middle one), which a sweep moving on within an
/// interval cannot show. From 2 to 8 the real-program corpus's geometric means move by 0.2 %
/// at most; 1 (sampled in the last interval) does not tell a sweep (`shrinking`'s relative
/// time 1.41 -> 1.60).
pub const LASTING_INTERVALS: u8 = 3;

impl ScanRegion {
    /// Whether the region shows heat rather than stray accesses, so that it may move whole.
    /// Once a full window of samples has been seen: stage 1 ranks it hot; or the samples keep
    /// returning to the pages they found (coverage at least [`SPARSE_COVERAGE`]); or its heat is
    /// lasting and ranks it among the superpages the fast tier can hold, warm in place though
    /// spread too thin for any page to reach the evidence floor (`benefit.min_samples`), which
    /// only a whole move brings in. A superpage outside the hot set whose every sample found a
    /// new page and whose samples came and went within an interval or two is as likely touched
    /// in passing (a sweep) as warm: only the pages its samples resolve move, one by one, by
    /// the floor. Where the fast tier cannot hold it beside the hotter ones, moving it whole
    /// evicts hotter data.
    ///
    /// Before a window fills the samples cannot tell heat on a few pages from heat on all 512,
    /// and moving 2 MiB for a few hot pages costs 512 times the move of one: a superpage moves
    /// whole only while none of its pages holds the floor (nothing finer could move); once one
    /// does, its pages move one by one until a window tells, unless the pages its samples
    /// found mostly adjoin one another ([`Self::found_pages_scattered`]): contiguous heat, as a
    /// stencil's rows show, which a few scattered hot pages do not (at 1 in 64 a window takes
    /// 16 times as long to fill as at 1 in 4, and the page-by-page moves lag the heat). Nor
    /// can its samples tell lasting heat from a sweep passing through, so stage 1 must not find
    /// it colder than what the fast tier holds (`colder_than_fast`). Membership of the hot set
    /// itself is not the test: at a PMU's period, with one or two samples per superpage in
    /// seconds, the cut falls between counts of one and two, and where one superpage carries
    /// most of the accesses the hot set is that one while the fast tier holds ten; requiring it
    /// kept memtide from moving most sampled superpages at sparse densities. What a whole move
    /// would bring in is then Eq. (1)'s call on the traffic the samples stand for.
    #[must_use]
    pub fn shows_heat(&self) -> bool {
        match self.coverage {
            Some(_) => self.hot || self.resolves_pages() || (self.lasting && self.fits_fast),
            None => {
                !self.colder_than_fast && (!self.page_at_floor || !self.found_pages_scattered())
            }
        }
    }

    /// Whether the samples rank the region's pages: a full window's coverage at least
    /// [`SPARSE_COVERAGE`], most samples on pages seen before.
    #[must_use]
    pub fn resolves_pages(&self) -> bool {
        self.coverage.is_some_and(|c| c >= SPARSE_COVERAGE)
    }

    /// Whether the samples show the region's heat on a few scattered pages: a full window of
    /// them, mostly on pages seen before (coverage at least [`SPARSE_COVERAGE`]), and the pages
    /// they found mostly without an accessed neighbour (a sweep samples page after page).
    #[must_use]
    pub fn samples_show_sparse(&self) -> bool {
        self.resolves_pages() && self.found_pages_scattered()
    }

    /// Whether the pages the samples found mostly lack a found neighbour: a sweep or a
    /// stencil samples page after page, scattered hot pages do not.
    #[must_use]
    pub fn found_pages_scattered(&self) -> bool {
        let accessed = |p: usize| self.accessed[p / 64] & (1 << (p % 64)) != 0;
        let (mut pages, mut with_neighbour) = (0u32, 0u32);
        for p in (0..SUBPAGES).filter(|&p| accessed(p)) {
            pages += 1;
            let neighbour = (p > 0 && accessed(p - 1)) || (p + 1 < SUBPAGES && accessed(p + 1));
            with_neighbour += u32::from(neighbour);
        }
        with_neighbour * 2 < pages
    }

    /// Estimated accessed pages among `observed`, at most `pages`.
    #[must_use]
    pub fn estimate(&self, observed: u32, pages: u32) -> u32 {
        ((f64::from(observed) * self.density_scale.max(1.0)).round() as u32).min(pages)
    }
}

/// Counts of one move-in and one move-out scan.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScanCounts {
    pub dense_2m: u32,
    pub dense_medium: u32,
    pub sparse_2m: u32,
    pub sparse_medium: u32,
}

/// The per-target granularity and the two scan cursors.
#[derive(Clone, Debug)]
pub struct GranularityState {
    current: Granularity,
    cursor_in: u64,
    cursor_out: u64,
}

impl GranularityState {
    #[must_use]
    pub fn new(cfg: &GranularityConfig) -> Self {
        Self {
            current: cfg.initial,
            cursor_in: 0,
            cursor_out: 0,
        }
    }

    #[must_use]
    pub fn current(&self) -> Granularity {
        self.current
    }

    /// Runs the move-out then the move-in scan over `regions` (sorted by `sp`) and updates the
    /// granularity. Returns what the scans counted.
    pub fn update(&mut self, cfg: &GranularityConfig, regions: &[ScanRegion]) -> ScanCounts {
        let mut counts = ScanCounts::default();
        self.cursor_out = scan(
            cfg,
            regions,
            self.cursor_out,
            |r| r.residency.fast,
            |region_pages, chunks| {
                counts.sparse_2m += u32::from(region_pages < cfg.thr_low_2m);
                counts.sparse_medium += chunks
                    .iter()
                    .filter(|(has, a)| *has && *a < cfg.thr_low_medium)
                    .count() as u32;
            },
        );
        self.cursor_in = scan(
            cfg,
            regions,
            self.cursor_in,
            |r| r.residency.slow,
            |region_pages, chunks| {
                counts.dense_2m += u32::from(region_pages > cfg.thr_high_2m);
                counts.dense_medium += chunks
                    .iter()
                    .filter(|(_, a)| *a > cfg.thr_high_medium)
                    .count() as u32;
            },
        );
        if !cfg.fixed {
            self.current = lower(cfg, self.current, &counts);
            self.current = raise(cfg, self.current, &counts);
        }
        counts
    }
}

/// Ryoo's move-in rule: may only raise.
#[must_use]
pub fn raise(cfg: &GranularityConfig, current: Granularity, c: &ScanCounts) -> Granularity {
    if c.dense_2m > cfg.thr_high_num_reg_2m {
        Granularity::MIB_2
    } else if c.dense_medium > cfg.thr_high_num_reg_medium {
        current.max(cfg.medium)
    } else {
        current
    }
}

/// Ryoo's move-out rule: may only lower.
#[must_use]
pub fn lower(cfg: &GranularityConfig, current: Granularity, c: &ScanCounts) -> Granularity {
    if c.sparse_2m <= cfg.thr_low_num_reg_2m {
        current
    } else if c.sparse_medium > cfg.thr_low_num_reg_medium {
        Granularity::KIB_4
    } else if c.sparse_medium < cfg.thr_low_num_reg_medium && current == Granularity::MIB_2 {
        cfg.medium
    } else {
        current
    }
}

/// Walks regions from the first one after `cursor` (wrapping), calling `visit` with the accessed
/// tier pages of each region holding tier pages and, per medium chunk, (has tier pages, accessed
/// tier pages); stops after `scan_pages` tier pages. Returns the new cursor.
fn scan(
    cfg: &GranularityConfig,
    regions: &[ScanRegion],
    cursor: u64,
    tier: impl Fn(&ScanRegion) -> [u64; 8],
    mut visit: impl FnMut(u32, &[(bool, u32)]),
) -> u64 {
    if regions.is_empty() {
        return cursor;
    }
    let start = regions.partition_point(|r| r.sp <= cursor) % regions.len();
    let mp = cfg.medium_pages();
    let mut chunks = vec![(false, 0u32); SUBPAGES / mp];
    let mut seen = 0u32;
    let mut last = cursor;
    for r in regions[start..].iter().chain(&regions[..start]) {
        let t = tier(r);
        let n = count_pages(&t);
        if n == 0 {
            continue;
        }
        let acc = both(&t, &r.accessed);
        for (ci, chunk) in chunks.iter_mut().enumerate() {
            let tier_pages = count_within(&t, ci * mp, mp);
            *chunk = (
                tier_pages > 0,
                r.estimate(count_within(&acc, ci * mp, mp), tier_pages),
            );
        }
        visit(r.estimate(count_pages(&acc), n), &chunks);
        seen += n;
        last = r.sp;
        if seen >= cfg.scan_pages {
            break;
        }
    }
    last
}

#[cfg(test)]
mod tests;
