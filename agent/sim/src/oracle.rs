//! The epoch oracle (`--policy oracle-epoch`): per-epoch optimal placement with future
//! knowledge, the best hit ratio of placements that change once per epoch. Policies that move
//! more often can beat it (on `stream` they do); the bound that no policy beats is
//! [`crate::bound`].
//!
//! It reads the trace a second time, one epoch ahead of the replay. At the start of each epoch
//! it counts the accesses every 4 KiB page will receive during the epoch and makes the fast tier
//! hold the most-accessed pages that fit (ties: lower address), demoting only what it must to
//! make room. A superpage the oracle wants whole moves as one 2 MiB operation and stays huge;
//! anything less moves per 4 KiB page. It pays the same migration costs as every policy, so its
//! projected time is not a bound; its hit ratio is.

use std::collections::HashMap;

use crate::{
    model::{SpMap, TierModel},
    policy::{Clock, SimPolicy},
    sampler::LineFilter,
    trace::{RecordSource, TraceError, TraceRecord, TraceSpec},
};
use memtide_common::AccessSample;
use memtide_core::units::{PAGE_SIZE, SUBPAGES, SUPERPAGE_SIZE, Tier};

pub struct EpochOracle {
    ahead: Box<dyn RecordSource>,
    /// The replay's last-level cache over the look-ahead (none for traces past the caches).
    llc: Option<LineFilter>,
    /// Records reaching memory per epoch.
    window: u64,
    next_boundary: u64,
    /// Pages wanted in the fast tier this epoch, per superpage.
    wanted: SpMap<[u64; 8]>,
    done: bool,
}

impl EpochOracle {
    /// `window` is the epoch length in records.
    pub fn new(
        spec: &dyn TraceSpec,
        window: u64,
        fast_capacity_bytes: u64,
    ) -> Result<Self, TraceError> {
        let ahead = spec.open()?;
        let mut o = Self {
            llc: LineFilter::l3(ahead.meta()),
            ahead,
            window: window.max(1),
            next_boundary: 0,
            wanted: SpMap::default(),
            done: false,
        };
        o.look_ahead(fast_capacity_bytes)?;
        Ok(o)
    }

    fn look_ahead(&mut self, cap_bytes: u64) -> Result<(), TraceError> {
        let mut counts: HashMap<u64, u32> = HashMap::new();
        let mut buf = Vec::with_capacity(4096);
        let mut left = self.window;
        while left > 0 {
            buf.clear();
            let n = self.ahead.fill(&mut buf, left.min(4096) as usize)?;
            if n == 0 {
                self.done = true;
                break;
            }
            // The window and the counts are in records that reach memory, as the replay's
            // clock and hits are (`run::Llc`, the same model over the same stream).
            for r in &buf {
                if self.llc.as_mut().is_none_or(|llc| llc.passes(r.addr)) {
                    *counts.entry(r.addr / PAGE_SIZE).or_default() += 1;
                    left -= 1;
                }
            }
        }
        self.wanted.clear();
        self.wanted
            .extend(most_accessed(counts, cap_bytes / PAGE_SIZE));
        self.next_boundary += self.window;
        Ok(())
    }

    fn apply(&self, model: &mut TierModel, now_ms: u32) {
        // Promotions needed (wanted, not fast), in address order.
        let mut need = 0u64;
        for s in model.superpages() {
            if let Some(w) = self.wanted.get(&s.sp) {
                need += w
                    .iter()
                    .zip(&s.fast)
                    .map(|(w, f)| u64::from((w & !f).count_ones()))
                    .sum::<u64>();
            }
        }
        // Demote unwanted fast pages until the promotions fit.
        let mut free = model.fast_free_bytes() / PAGE_SIZE;
        let sps: Vec<(u64, [u64; 8], bool)> = model
            .superpages()
            .iter()
            .map(|s| (s.sp, s.fast, s.huge))
            .collect();
        for &(sp, fast, _) in &sps {
            if free >= need {
                break;
            }
            let w = self.wanted.get(&sp).copied().unwrap_or([0; 8]);
            let base = sp * SUPERPAGE_SIZE;
            if w == [0; 8] && fast == [u64::MAX; 8] {
                model.migrate(base, SUPERPAGE_SIZE, Tier::Slow, SUPERPAGE_SIZE, now_ms);
                free += SUBPAGES as u64;
                continue;
            }
            for p in 0..SUBPAGES {
                if free >= need {
                    break;
                }
                let bit = 1u64 << (p % 64);
                if fast[p / 64] & bit != 0 && w[p / 64] & bit == 0 {
                    model.migrate_page(sp, p, Tier::Slow, now_ms);
                    free += 1;
                }
            }
        }
        for &(sp, fast, _) in &sps {
            let Some(w) = self.wanted.get(&sp).copied() else {
                continue;
            };
            let base = sp * SUPERPAGE_SIZE;
            if w == [u64::MAX; 8] {
                model.migrate(base, SUPERPAGE_SIZE, Tier::Fast, SUPERPAGE_SIZE, now_ms);
                continue;
            }
            for p in 0..SUBPAGES {
                let bit = 1u64 << (p % 64);
                if w[p / 64] & bit != 0 && fast[p / 64] & bit == 0 {
                    model.migrate_page(sp, p, Tier::Fast, now_ms);
                }
            }
        }
    }
}

/// The `capacity` most-accessed pages of `counts` (accesses per 4 KiB page number; ties to
/// the lower page), as a bit per page of each superpage they lie in, by superpage number: what
/// a placement with foresight holds in the fast tier (the epoch oracle per epoch, the bound
/// per batch).
pub(crate) fn most_accessed(
    counts: impl IntoIterator<Item = (u64, u32)>,
    capacity: u64,
) -> Vec<(u64, [u64; 8])> {
    let mut pages: Vec<(u32, u64)> = counts.into_iter().map(|(page, n)| (n, page)).collect();
    let capacity = usize::try_from(capacity).unwrap_or(usize::MAX);
    if pages.len() > capacity {
        pages.select_nth_unstable_by(capacity, |a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        pages.truncate(capacity);
    }
    pages.sort_unstable_by_key(|&(_, page)| page);
    let per_superpage = SUBPAGES as u64;
    pages
        .chunk_by(|a, b| a.1 / per_superpage == b.1 / per_superpage)
        .map(|pages| {
            let mut fast = [0u64; 8];
            for &(_, page) in pages {
                let i = (page % per_superpage) as usize;
                fast[i / 64] |= 1 << (i % 64);
            }
            (pages[0].1 / per_superpage, fast)
        })
        .collect()
}

impl SimPolicy for EpochOracle {
    fn name(&self) -> String {
        "oracle-epoch".into()
    }

    fn place(&mut self, sp: u64, model: &TierModel) -> Tier {
        if self
            .wanted
            .get(&sp)
            .is_some_and(|w| w.iter().any(|&x| x != 0))
        {
            model.first_touch()
        } else {
            Tier::Slow
        }
    }

    fn observe(&mut self, _: &[TraceRecord], _: &[AccessSample], _: &TierModel, _: Clock) {}

    fn step(&mut self, clock: Clock, model: &mut TierModel) {
        if self.done || clock.records < self.next_boundary {
            return;
        }
        let now_ms = u32::try_from(clock.now.as_millis()).unwrap_or(u32::MAX);
        // A read error in the look-ahead ends the oracle's foresight; the replay reports the
        // same error itself when it reaches that point.
        if self.look_ahead(model.fast_capacity_bytes()).is_ok() {
            self.apply(model, now_ms);
        } else {
            self.done = true;
        }
    }
}
