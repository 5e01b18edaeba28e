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
        self.fast.iter().map(|w| w.count_ones()).sum()
    }

    #[must_use]
    pub fn slow_pages(&self) -> u32 {
        self.slow.iter().map(|w| w.count_ones()).sum()
    }
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
