//! Free hindsight (`--policy hindsight`): what knowledge of every past access reaches when
//! migration costs nothing. A yardstick between memtide and [the bound](crate::bound).
//!
//! The bound knows each batch before it happens; wherever the fast tier holds more pages than
//! a batch touches it is 1.0, which says how far a policy is from perfect, not what a policy
//! without foresight could reach. This policy has no foresight but every other advantage: it
//! sees every access that reached memory (no sampling), re-places the whole fast tier before
//! every batch of [`BATCH`] records, and moves for nothing (nothing is counted or charged), so
//! its projected time bounds nothing either. A causal policy can beat it, but only by knowing
//! something about the program that recency does not.
//!
//! It follows one of two placements, whichever served more of the recent batches (the score of
//! each halves every batch and gains the hits it would have had on the last one):
//! - **pages**: the most recently accessed 4 KiB pages that fit (recency by batch; ties: more
//!   accesses in their last batch), what an LRU over pages keeps;
//! - **superpages**: the most recently accessed 2 MiB superpages that fit whole, what an LRU
//!   over huge pages keeps, which carries a page's neighbours into the fast tier before
//!   they are touched (a scan's next pages).
//!
//! Each re-placement costs time in proportion to the pages seen so far (the recency tables are
//! ranked afresh): a second or so per million-record trace, affordable for a yardstick. One
//! that follows nothing new is skipped (it would place the same pages), so from the samples
//! alone at a sparse density it re-ranks only after the batches that brought a sample: an
//! hour of a server's samples replays in seconds.
//!
//! `--policy hindsight-epoch` is the same knowledge re-placed only once per memtide's shortest
//! epoch ([`EpochConfig::min_ms`]: 10 ms of the policies' clock by default, or
//! `--engine-config`'s), the shortest time between two of memtide's plans: between
//! re-placements the fast tier stays as placed, and the first one, at the start, knows nothing
//! yet. What it lacks against `hindsight` is what the cadence alone costs. It is no ceiling
//! for memtide, which ranks by cooled counts (how often as well as how recently) and places
//! first touches in the fast tier while it has room, and beats it on some traces.
//!
//! [`Hindsight::from_samples`] knows only what memtide knows: the samples its source delivered
//! (1 in 4 records at the suite's rate), one count each, counted once their batch has run, when
//! memtide's engine gets them. Re-placed every batch or every so often, for nothing, it is free recency from
//! memtide's own evidence: memtide above it ranks better, below it pays for its moves and its
//! cadence.
//!
//! [`BATCH`]: crate::run::BATCH
//! [`EpochConfig::min_ms`]: memtide_core::policy::epoch::EpochConfig::min_ms

use std::{
    collections::{HashMap, HashSet},
    time::Duration,
};

use crate::{
    bound::FreePlacement,
    model::TierModel,
    policy::{Clock, SimPolicy},
    trace::TraceRecord,
};
use memtide_common::AccessSample;
use memtide_core::units::{PAGE_SIZE, SUBPAGES, Tier};

#[derive(Default)]
pub struct Hindsight {
    fast: FreePlacement,
    /// Batches seen.
    batch: u64,
    pages: Recency,
    superpages: Recency,
    /// Hits each placement would have had, halved every batch: `[pages, superpages]`, as the
    /// last re-placement ranked them (at every batch for `hindsight`).
    score: [f64; 2],
    /// Re-place at most this often (`hindsight-epoch`); every batch when `None`.
    every: Option<Duration>,
    /// What it counts: every access that reached memory, or the samples alone.
    seen: Seen,
    /// The policies' clock at the end of the last batch.
    now: Duration,
    /// When the next re-placement is due (`hindsight-epoch`).
    due: Duration,
    /// The pages and the superpages the last re-placement ranked first.
    ranked: [HashSet<u64>; 2],
    /// Something was counted since the last re-placement. A re-placement with nothing new
    /// ranks the same keys in the same order; while the scores still choose the same
    /// placement (halving both keeps their order until both reach zero) it would hold the
    /// same pages, and is skipped: at a sparse sampler's density (a sample every few batches)
    /// that is most of them.
    counted_since: bool,
    /// The placement the last re-placement held (superpages: `true`; `None` before any).
    held_superpages: Option<bool>,
    /// Re-placements that ranked the tables.
    #[cfg(test)]
    rankings: u64,
}

/// What free hindsight learns from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Seen {
    /// Every record that reached memory, counted right after its batch was placed for.
    #[default]
    EveryAccess,
    /// The samples the source delivered from the batch, one count each, when memtide's engine
    /// gets them.
    Samples,
}

/// When each key (a page or a superpage number) was last accessed, and how often then.
#[derive(Default)]
struct Recency(HashMap<u64, (u64, u32)>);

impl Recency {
    fn touch(&mut self, key: u64, batch: u64) {
        let last = self.0.entry(key).or_insert((batch, 0));
        if last.0 != batch {
            *last = (batch, 0);
        }
        last.1 += 1;
    }

    /// The `n` keys accessed most recently (ties: more accesses in that batch, then the lower
    /// key, so that a replay is deterministic).
    fn most_recent(&self, n: usize) -> HashSet<u64> {
        let mut keys: Vec<(u64, (u64, u32))> = self.0.iter().map(|(&k, &v)| (k, v)).collect();
        if keys.len() > n {
            keys.select_nth_unstable_by(n, |a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            keys.truncate(n);
        }
        keys.into_iter().map(|(k, _)| k).collect()
    }
}

impl Hindsight {
    /// Free hindsight re-placed at most once per `every` of the policies' clock.
    #[must_use]
    pub fn every(every: Duration) -> Self {
        Self {
            every: Some(every),
            ..Self::default()
        }
    }

    /// Free hindsight from the samples alone, re-placed at most once per `every` of the
    /// policies' clock (every batch when `None`).
    #[must_use]
    pub fn from_samples(every: Option<Duration>) -> Self {
        Self {
            every,
            seen: Seen::Samples,
            ..Self::default()
        }
    }

    /// Counts the addresses seen in the batch that was just placed for: the hits each
    /// placement had on them, then their recency.
    fn count(&mut self, addrs: impl Iterator<Item = u64>) {
        let mut hits = [0u32; 2];
        let [pages, superpages] = &self.ranked;
        for addr in addrs {
            let page = addr / PAGE_SIZE;
            let sp = page / SUBPAGES as u64;
            hits[0] += u32::from(pages.contains(&page));
            hits[1] += u32::from(superpages.contains(&sp));
            self.pages.touch(page, self.batch);
            self.superpages.touch(sp, self.batch);
            self.counted_since = true;
        }
        for (score, hits) in self.score.iter_mut().zip(hits) {
            *score = *score / 2.0 + f64::from(hits);
        }
        self.batch += 1;
    }

    /// Ranks both placements afresh from everything seen, and holds the one that served more
    /// of the recent batches.
    fn replace(&mut self, model: &mut TierModel) {
        let superpages_serve_more = self.score[1] > self.score[0];
        let counted = std::mem::take(&mut self.counted_since);
        if !counted && self.held_superpages == Some(superpages_serve_more) {
            return;
        }
        self.held_superpages = Some(superpages_serve_more);
        #[cfg(test)]
        {
            self.rankings += 1;
        }
        let capacity = model.fast_capacity_bytes() / PAGE_SIZE;
        let pages = self
            .pages
            .most_recent(usize::try_from(capacity).unwrap_or(usize::MAX));
        let superpages = self
            .superpages
            .most_recent(usize::try_from(capacity / SUBPAGES as u64).unwrap_or(usize::MAX));
        if superpages_serve_more {
            let whole = |sp: u64| (0..SUBPAGES as u64).map(move |i| (sp * SUBPAGES as u64 + i, 1));
            self.fast
                .hold(model, superpages.iter().flat_map(|&sp| whole(sp)));
        } else {
            self.fast.hold(model, pages.iter().map(|&page| (page, 1)));
        }
        self.ranked = [pages, superpages];
    }
}

impl SimPolicy for Hindsight {
    fn name(&self) -> String {
        match (self.seen, self.every) {
            (Seen::EveryAccess, None) => "hindsight".into(),
            (Seen::EveryAccess, Some(_)) => "hindsight-epoch".into(),
            (Seen::Samples, None) => "hindsight-samples".into(),
            (Seen::Samples, Some(every)) => {
                format!("hindsight-samples-every-{}ms", every.as_millis())
            }
        }
    }

    /// Every superpage is mapped slow; [`Self::before_batch`] places the pages that count.
    fn place(&mut self, _: u64, _: &TierModel) -> Tier {
        Tier::Slow
    }

    fn before_batch(&mut self, batch: &[TraceRecord], model: &mut TierModel) {
        match self.every {
            None => self.replace(model),
            Some(every) if self.now >= self.due => {
                self.replace(model);
                self.due = self.now + every;
            }
            Some(_) => {}
        }
        // Only now does the batch count: what is placed for it was chosen without it.
        if self.seen == Seen::EveryAccess {
            self.count(batch.iter().map(|r| r.addr));
        }
    }

    /// The samples of the batch just replayed, when they are all it learns from.
    fn observe(&mut self, _: &[TraceRecord], samples: &[AccessSample], _: &TierModel, _: Clock) {
        if self.seen == Seen::Samples {
            self.count(samples.iter().map(|s| s.addr));
        }
    }

    fn learns_from_samples_only(&self) -> bool {
        self.seen == Seen::Samples
    }

    fn step(&mut self, clock: Clock, _: &mut TierModel) {
        self.now = clock.now;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::{
        PolicyName,
        model::PresetName,
        run::{BATCH, FastSize, MemTrace, SimConfig},
        simulate,
        trace::{TraceMeta, TraceRecord},
        workload::BASE,
    };
    use memtide_core::units::{PAGE_SIZE, SUPERPAGE_SIZE};

    /// Hit ratios of `policies` on `records` (all past the caches) with a fast tier of
    /// `fast_bytes`, at the default sample rate.
    fn hit_ratios(records: Vec<TraceRecord>, fast_bytes: u64, policies: &[PolicyName]) -> Vec<f64> {
        let rate = SimConfig::new(PresetName::Pmem.preset()).sample_rate;
        let runs: Vec<(PolicyName, u32)> = policies.iter().map(|&p| (p, rate)).collect();
        hit_ratios_sampled(records, fast_bytes, &runs)
    }

    /// [`hit_ratios`] of each policy at its sample rate (one sample per so many records).
    fn hit_ratios_sampled(
        records: Vec<TraceRecord>,
        fast_bytes: u64,
        runs: &[(PolicyName, u32)],
    ) -> Vec<f64> {
        let trace = MemTrace {
            name: "hindsight".into(),
            records: Arc::new(records),
            meta: TraceMeta {
                past_caches: true,
                ..TraceMeta::default()
            },
        };
        let mut cfg = SimConfig::new(PresetName::Pmem.preset());
        cfg.fast = FastSize::Bytes(fast_bytes);
        runs.iter()
            .map(|&(p, rate)| {
                cfg.sample_rate = rate;
                let r = simulate(&trace, p, &cfg).unwrap();
                if matches!(
                    p,
                    PolicyName::Hindsight
                        | PolicyName::HindsightEpoch
                        | PolicyName::HindsightSamples
                ) {
                    assert_eq!(r.migrated_bytes, 0, "hindsight's placements are not moves");
                }
                r.fast_hit_ratio
            })
            .collect()
    }

    /// `sets` hot sets of `pages` pages `stride` bytes apart, one after the other, each read in
    /// turn for three batches.
    fn moving_hot_set(sets: u64, pages: u64, stride: u64) -> Vec<TraceRecord> {
        let set_bytes = pages * stride;
        (0..sets)
            .flat_map(|set| {
                (0..3 * BATCH as u64 / pages).flat_map(move |_| {
                    (0..pages).map(move |i| TraceRecord::load(BASE + set * set_bytes + i * stride))
                })
            })
            .collect()
    }

    /// Free hindsight from the samples alone knows what the full one knows when every record
    /// is a sample, and as early: the same placements, so the same hit ratio. A hot set of
    /// 512 pages, each read twice a batch, moves every three batches: the first batch of each
    /// set misses (2/3 hit). With 1 in 4 sampled, a page goes unsampled in a batch with
    /// probability (3/4)^2, so only some 44 % of the set is known after its first batch and
    /// 68 % after its second: about 0.37.
    #[test]
    fn hindsight_from_samples_is_hindsight_with_every_record_sampled_and_knows_less_with_fewer() {
        let [full, samples_of_all, sampled] = hit_ratios_sampled(
            moving_hot_set(100, 512, 7 * PAGE_SIZE),
            1024 * PAGE_SIZE,
            &[
                (PolicyName::Hindsight, 1),
                (PolicyName::HindsightSamples, 1),
                (PolicyName::HindsightSamples, 4),
            ],
        )[..] else {
            unreachable!()
        };
        assert!((0.66..0.67).contains(&full), "hindsight {full}");
        assert_eq!(samples_of_all.to_bits(), full.to_bits());
        assert!((0.33..0.41).contains(&sampled), "1 in 4: {sampled}");
    }

    /// From the samples alone it ranks again only after a batch that brought one: batches
    /// without a sample leave the tables as they were, and the placement with them.
    #[test]
    fn a_re_placement_follows_only_the_batches_that_brought_samples() {
        let mut model = TierModel::new(PresetName::Pmem.preset(), 64 * PAGE_SIZE);
        let mut policy = Hindsight::from_samples(None);
        let sample = |page: u64| AccessSample {
            addr: BASE + page * PAGE_SIZE,
            weight: 1,
            pid: 1,
            tid: 1,
            cpu: 0,
            kind: 1,
            source: 0,
            _pad: [0; 2],
        };
        let clock = Clock {
            now: Duration::ZERO,
            records: 0,
        };
        let batch = [TraceRecord::load(BASE)];
        for i in 0..10u64 {
            policy.before_batch(&batch, &mut model);
            let samples = if i % 3 == 0 { vec![sample(i)] } else { vec![] };
            policy.observe(&batch, &samples, &model, clock);
        }
        // The first placement (of nothing), then one after each of batches 0, 3 and 6 (before
        // batches 1, 4 and 7), each of which brought a sample.
        assert_eq!(policy.rankings, 4);
    }

    /// One hot page in each of 64 superpages, read in turn: the fast tier (128 pages) holds no
    /// superpage whole but every hot page, and only the first batch, before anything is known,
    /// misses.
    #[test]
    fn scattered_hot_pages_are_held_page_by_page() {
        let records: Vec<TraceRecord> = (0..2000)
            .flat_map(|_| (0..64).map(|sp| TraceRecord::load(BASE + sp * SUPERPAGE_SIZE)))
            .collect();
        let [hindsight, first_touch] = hit_ratios(
            records,
            128 * PAGE_SIZE,
            &[PolicyName::Hindsight, PolicyName::NoMigration],
        )[..] else {
            unreachable!()
        };
        assert!(hindsight > 0.99, "hindsight {hindsight}");
        assert!(first_touch < 0.01, "first touch {first_touch}");
    }

    /// 64 hot pages, one per superpage, replaced by 64 others every 3 batches: re-placed every
    /// batch, hindsight misses the first batch of each set (2/3 hit); re-placed only every
    /// 10 ms of the clock (40 batches here), it serves the set current at a re-placement for
    /// the 0, 1 or 2 batches left of it, about one batch in 40, and then holds one long gone.
    /// Never re-placing would hit nothing; re-placing every 20 or 80 batches, twice or half
    /// as much.
    #[test]
    fn a_hot_set_moving_faster_than_an_epoch_is_lost_between_re_placements() {
        let [per_batch, per_epoch] = hit_ratios(
            moving_hot_set(300, 64, SUPERPAGE_SIZE),
            128 * PAGE_SIZE,
            &[PolicyName::Hindsight, PolicyName::HindsightEpoch],
        )[..] else {
            unreachable!()
        };
        assert!((0.66..0.67).contains(&per_batch), "hindsight {per_batch}");
        assert!(
            (0.02..0.03).contains(&per_epoch),
            "hindsight-epoch {per_epoch}"
        );
    }

    /// A scan reading every line of 16 superpages once: no page is read again once the scan
    /// has left it, so recency over pages serves nothing of the next batch; recency over
    /// superpages holds the superpage being scanned, and misses only its first batch.
    #[test]
    fn a_scan_is_served_by_whole_superpages() {
        let records: Vec<TraceRecord> = (0..16 * SUPERPAGE_SIZE / 64)
            .map(|line| TraceRecord::load(BASE + line * 64))
            .collect();
        let [hindsight, bound, first_touch] = hit_ratios(
            records,
            4 * SUPERPAGE_SIZE,
            &[
                PolicyName::Hindsight,
                PolicyName::Oracle,
                PolicyName::NoMigration,
            ],
        )[..] else {
            unreachable!()
        };
        // 32 batches per superpage, the first of each a miss: 31/32. A policy that placed for
        // the batch it was about to count (foresight) would miss nothing.
        assert!(
            (0.95..0.975).contains(&hindsight),
            "hindsight {hindsight}, not 31/32"
        );
        assert!(
            hindsight <= bound,
            "hindsight {hindsight} above the bound {bound}"
        );
        assert!(first_touch < 0.3, "first touch {first_touch}");
    }
}
