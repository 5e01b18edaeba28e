//! The vocabulary every layer shares: page geometry, the two tiers, which way a range moves,
//! the migration granularity and a superpage's residency bitmap. Defined here once; nothing in
//! this module knows about hotness or policy.

use serde::{Deserialize, Serialize};

/// log2 of [`PAGE_SIZE`].
pub const PAGE_SHIFT: u32 = 12;
/// log2 of [`SUPERPAGE_SIZE`].
pub const SUPERPAGE_SHIFT: u32 = 21;

/// Size of a base page.
pub const PAGE_SIZE: u64 = 1 << PAGE_SHIFT;
/// Size of a superpage (x86-64 PMD huge page).
pub const SUPERPAGE_SIZE: u64 = 1 << SUPERPAGE_SHIFT;
/// Base pages per superpage.
pub const SUBPAGES: usize = 1 << (SUPERPAGE_SHIFT - PAGE_SHIFT);

/// A memory tier as the policy sees it: two classes, whatever the number of NUMA nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Tier {
    Fast,
    Slow,
}

/// Migration granularity: the size of one virtually contiguous chunk moved in one operation.
/// Always a non-zero multiple of 4 KiB.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "u64", into = "u64")]
pub struct Granularity(u64);

impl Default for Granularity {
    fn default() -> Self {
        Self::KIB_4
    }
}

impl Granularity {
    /// One base page: the finest granularity, splits huge pages.
    pub const KIB_4: Self = Self(PAGE_SIZE);
    /// Ryoo's middle granularity (16 base pages).
    pub const KIB_64: Self = Self(64 << 10);
    /// A whole superpage: keeps a THP intact.
    pub const MIB_2: Self = Self(SUPERPAGE_SIZE);

    /// `None` unless `bytes` is a non-zero multiple of 4 KiB.
    #[must_use]
    pub const fn new(bytes: u64) -> Option<Self> {
        if bytes == 0 || !bytes.is_multiple_of(PAGE_SIZE) {
            None
        } else {
            Some(Self(bytes))
        }
    }

    #[must_use]
    pub const fn bytes(self) -> u64 {
        self.0
    }

    /// Number of 4 KiB pages in one chunk.
    #[must_use]
    pub const fn pages(self) -> u64 {
        self.0 / PAGE_SIZE
    }
}

impl TryFrom<u64> for Granularity {
    type Error = String;

    fn try_from(bytes: u64) -> Result<Self, Self::Error> {
        Self::new(bytes)
            .ok_or_else(|| format!("granularity {bytes} is not a non-zero multiple of 4096"))
    }
}

impl From<Granularity> for u64 {
    fn from(g: Granularity) -> Self {
        g.0
    }
}

/// Which 4 KiB pages of one superpage sit in each tier: Rainbow's 512-bit migration bitmap,
/// plus a second bitmap because a page can also be unmapped (in neither tier).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Residency {
    pub fast: [u64; 8],
    pub slow: [u64; 8],
}

impl Residency {
    /// Every page of the superpage in `tier`.
    #[must_use]
    pub const fn all(tier: Tier) -> Self {
        match tier {
            Tier::Fast => Self {
                fast: [u64::MAX; 8],
                slow: [0; 8],
            },
            Tier::Slow => Self {
                fast: [0; 8],
                slow: [u64::MAX; 8],
            },
        }
    }

    pub fn set(&mut self, page: usize, tier: Option<Tier>) {
        let (word, bit) = (page / 64, 1u64 << (page % 64));
        self.fast[word] &= !bit;
        self.slow[word] &= !bit;
        match tier {
            Some(Tier::Fast) => self.fast[word] |= bit,
            Some(Tier::Slow) => self.slow[word] |= bit,
            None => {}
        }
    }

    #[must_use]
    pub const fn tier(&self, page: usize) -> Option<Tier> {
        let (word, bit) = (page / 64, 1u64 << (page % 64));
        if self.fast[word] & bit != 0 {
            Some(Tier::Fast)
        } else if self.slow[word] & bit != 0 {
            Some(Tier::Slow)
        } else {
            None
        }
    }

    #[must_use]
    pub fn fast_pages(&self) -> u32 {
        count_pages(&self.fast)
    }

    #[must_use]
    pub fn slow_pages(&self) -> u32 {
        count_pages(&self.slow)
    }

    /// The pages for which [`Self::tier`] answers `tier` (a page in both bitmaps reads fast).
    #[must_use]
    pub fn pages_in(&self, tier: Tier) -> PageMask {
        match tier {
            Tier::Fast => self.fast,
            Tier::Slow => std::array::from_fn(|w| self.slow[w] & !self.fast[w]),
        }
    }
}

/// One bit per 4 KiB page of a superpage: page `p` is bit `p % 64` of word `p / 64`. The
/// planner's per-page work runs on these a word at a time: most pages of a superpage have no
/// count, and a loop over all 512 is its hottest.
pub type PageMask = [u64; 8];

/// Pages `[first, first + n)` of a superpage (clipped at its end).
#[must_use]
pub fn page_bits(first: usize, n: usize) -> PageMask {
    let end = (first + n).min(SUBPAGES);
    std::array::from_fn(|word| {
        let (lo, hi) = (first.max(word * 64), end.min(word * 64 + 64));
        if lo >= hi {
            0
        } else {
            ones(hi - lo) << (lo - word * 64)
        }
    })
}

/// The low `n` bits (`n` ≤ 64).
const fn ones(n: usize) -> u64 {
    if n >= 64 { u64::MAX } else { (1 << n) - 1 }
}

/// Pages in both masks.
#[must_use]
pub fn both(a: &PageMask, b: &PageMask) -> PageMask {
    std::array::from_fn(|w| a[w] & b[w])
}

/// Pages in `a` but not in `b`.
#[must_use]
pub fn except(a: &PageMask, b: &PageMask) -> PageMask {
    std::array::from_fn(|w| a[w] & !b[w])
}

/// Number of pages in the mask.
#[must_use]
pub fn count_pages(mask: &PageMask) -> u32 {
    mask.iter().map(|w| w.count_ones()).sum()
}

/// Pages of the mask among pages `[first, first + n)`.
#[must_use]
pub fn count_within(mask: &PageMask, first: usize, n: usize) -> u32 {
    count_pages(&both(mask, &page_bits(first, n)))
}

/// The pages of the mask, in ascending order.
pub fn set_pages(mask: PageMask) -> impl Iterator<Item = usize> {
    mask.into_iter().enumerate().flat_map(|(word, bits)| {
        let mut left = bits;
        std::iter::from_fn(move || {
            (left != 0).then(|| {
                let p = word * 64 + left.trailing_zeros() as usize;
                left &= left - 1;
                p
            })
        })
    })
}

/// Calls `f(first, n)` for each maximal run of pages in the mask, in ascending order.
pub fn page_runs(mask: &PageMask, mut f: impl FnMut(usize, usize)) {
    let mut from = 0;
    while let Some(first) = next_page(mask, from, true) {
        let end = next_page(mask, first, false).unwrap_or(SUBPAGES);
        f(first, end - first);
        from = end;
    }
}

/// The first page at or after `from` that is in the mask (`inside`) or out of it.
fn next_page(mask: &PageMask, from: usize, inside: bool) -> Option<usize> {
    let mut p = from;
    while p < SUBPAGES {
        let (word, bit) = (p / 64, p % 64);
        let bits = if inside { mask[word] } else { !mask[word] };
        // Bits shifted in from the top read as "neither": the next word decides.
        let left = bits >> bit;
        if left != 0 {
            return Some(p + left.trailing_zeros() as usize);
        }
        p = (word + 1) * 64;
    }
    None
}

/// Which way a range moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Slow → fast.
    Promote,
    /// Fast → slow.
    Demote,
}

/// The superpage (2 MiB-aligned number) an address falls in.
#[must_use]
pub const fn superpage_of(addr: u64) -> u64 {
    addr >> SUPERPAGE_SHIFT
}

/// The first address of superpage `sp`.
#[must_use]
pub const fn superpage_base(sp: u64) -> u64 {
    sp << SUPERPAGE_SHIFT
}

/// Index (0..512) of the 4 KiB page of `addr` within its superpage.
#[must_use]
pub const fn subpage_index(addr: u64) -> usize {
    ((addr >> PAGE_SHIFT) as usize) & (SUBPAGES - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn granularity_must_be_page_multiple() {
        assert_eq!(Granularity::new(0), None);
        assert_eq!(Granularity::new(4095), None);
        assert_eq!(Granularity::new(8192).map(Granularity::pages), Some(2));
        assert_eq!(Granularity::MIB_2.pages(), 512);
        assert!(serde_json::from_str::<Granularity>("4097").is_err());
        assert_eq!(
            serde_json::from_str::<Granularity>("65536").ok(),
            Some(Granularity::KIB_64)
        );
    }

    /// The word-at-a-time helpers against a page-at-a-time reading of the same masks.
    #[test]
    fn page_masks_agree_with_a_page_by_page_reading() {
        let by_page = |first: usize, n: usize| {
            let mut m = [0u64; 8];
            for p in first..(first + n).min(SUBPAGES) {
                m[p / 64] |= 1 << (p % 64);
            }
            m
        };
        for (first, n) in [
            (0, 0),
            (0, 1),
            (0, 64),
            (3, 61),
            (63, 2),
            (60, 200),
            (500, 40),
            (0, 512),
        ] {
            assert_eq!(page_bits(first, n), by_page(first, n), "pages {first}+{n}");
        }
        let mut mask = by_page(0, 3);
        for (first, n) in [(62, 4), (127, 1), (200, 64), (511, 1)] {
            mask = std::array::from_fn(|w| mask[w] | by_page(first, n)[w]);
        }
        let listed: Vec<usize> = set_pages(mask).collect();
        let expected: Vec<usize> = (0..SUBPAGES)
            .filter(|&p| mask[p / 64] & (1 << (p % 64)) != 0)
            .collect();
        assert_eq!(listed, expected);
        assert_eq!(count_pages(&mask) as usize, expected.len());
        let mut got = Vec::new();
        page_runs(&mask, |first, n| got.push((first, n)));
        assert_eq!(got, [(0, 3), (62, 4), (127, 1), (200, 64), (511, 1)]);
        let mut got = Vec::new();
        page_runs(&[u64::MAX; 8], |first, n| got.push((first, n)));
        assert_eq!(got, [(0, SUBPAGES)]);
        page_runs(&[0; 8], |_, _| panic!("no run in an empty mask"));
        let r = Residency {
            fast: by_page(0, 2),
            slow: by_page(1, 3),
        };
        assert_eq!(r.pages_in(Tier::Slow), by_page(2, 2));
        assert_eq!(both(&mask, &by_page(60, 10)), by_page(62, 4));
        assert_eq!(
            except(&by_page(0, 10), &by_page(2, 6)),
            [0b11_0000_0011, 0, 0, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn count_within_counts_the_range_only_across_word_boundaries() {
        let mask = [
            0xF0F0_0000_0000_000F,
            u64::MAX,
            0,
            1,
            1 << 63,
            0xAAAA_AAAA_AAAA_AAAA,
            0,
            u64::MAX,
        ];
        let naive = |first: usize, n: usize| {
            (first..first + n)
                .filter(|&p| mask[p / 64] & (1 << (p % 64)) != 0)
                .count() as u32
        };
        for (first, n) in [
            (0, 512),
            (0, 16),
            (48, 16),
            (60, 8),
            (56, 80),
            (255, 2),
            (320, 64),
            (1, 510),
            (511, 1),
        ] {
            assert_eq!(
                count_within(&mask, first, n),
                naive(first, n),
                "{first}+{n}"
            );
        }
    }

    #[test]
    fn residency_bitmaps() {
        let mut r = Residency::all(Tier::Slow);
        r.set(3, Some(Tier::Fast));
        r.set(511, None);
        assert_eq!(r.tier(3), Some(Tier::Fast));
        assert_eq!(r.tier(511), None);
        assert_eq!(r.tier(0), Some(Tier::Slow));
        assert_eq!((r.fast_pages(), r.slow_pages()), (1, 510));
    }
}
