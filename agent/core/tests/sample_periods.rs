//! The magnitude of the sampling period changes a decision only through the traffic it stands
//! for. PEBS samples loads and stores at periods such as 64,000 and 1,600,000 (the 1:25 split
//! memtide starts at), IBS samples ops at 128,000: one sample stands for that many accesses.
//! The engine counts samples as evidence and the period turns counts into traffic, which
//! Eq. (1) weighs against what a move costs (a whole superpage needs no more than that). So
//! one stream of samples planned at those periods, with every access worth the period's
//! fraction of what it is worth at period 1, promotes the pages it promotes at period 1: the
//! same traffic times latency, the same costs.
//!
//! These fail on a80283f, where the period was added into 16-bit stage-1 and 15-bit stage-2
//! counters: one sample saturated a superpage and no 4 KiB page could gather
//! `min_samples × period` counts.

use std::{collections::BTreeSet, time::Duration};

use memtide_core::{
    engine::{AccessKind, Sample},
    policy::Plan,
    testgen::{Pattern, TierModel, TraceGen},
    tiering::{Tiering, TieringConfig},
    units::{Direction, Granularity, PAGE_SIZE, Tier},
};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const INTERVAL_MS: u64 = 50;
const SAMPLES_PER_INTERVAL: usize = 4000;

/// Sampling periods of one source: accesses a load, a store and a kind-less sample stand for.
#[derive(Clone, Copy, Debug)]
struct Periods {
    load: u32,
    store: u32,
    /// IBS op samples carry no load/store kind.
    kindless: bool,
}

const PERIOD_ONE: Periods = Periods {
    load: 1,
    store: 1,
    kindless: false,
};
const PEBS: Periods = Periods {
    load: 64_000,
    store: 1_600_000,
    kindless: false,
};
const IBS: Periods = Periods {
    load: 128_000,
    store: 128_000,
    kindless: true,
};

/// One recorded stream: the same addresses and kinds for every period.
fn stream(write_share: f64, intervals: u64) -> (Vec<Vec<Sample>>, Vec<u64>) {
    let mut g = TraceGen::new(
        11,
        Pattern::SparseHot {
            hot_superpages: 40,
            max_hot: 16,
        },
        0,
        GIB,
    );
    g.hot_share = 0.9;
    g.write_share = write_share;
    let batches = (0..intervals)
        .map(|_| g.interval(SAMPLES_PER_INTERVAL))
        .collect();
    (batches, g.hot_pages().to_vec())
}

fn at(samples: &[Sample], p: Periods) -> Vec<Sample> {
    samples
        .iter()
        .map(|s| {
            let (kind, weight) = match (p.kindless, s.kind) {
                (true, _) => (AccessKind::Unknown, p.load),
                (false, AccessKind::Store) => (AccessKind::Store, p.store),
                (false, kind) => (kind, p.load),
            };
            Sample {
                addr: s.addr,
                kind,
                weight,
            }
        })
        .collect()
}

/// Plans the stream every 20 intervals against a tier model whose fast tier holds `fast` bytes,
/// each access worth `1 / per_access` of the default latencies' (the same traffic times latency
/// at `per_access` times the period); returns the plans (applied to the model as they come).
fn plans(batches: &[Vec<Sample>], p: Periods, fast: u64, per_access: f64) -> Vec<Plan> {
    let mut config = TieringConfig::default();
    let b = &mut config.policy.benefit;
    for ns in [
        &mut b.fast_read_ns,
        &mut b.fast_write_ns,
        &mut b.slow_read_ns,
        &mut b.slow_write_ns,
        &mut b.split_access_ns,
    ] {
        *ns /= per_access;
    }
    // A fixed epoch of the 20 intervals between plans.
    config.policy.epoch.adaptive = false;
    config.policy.epoch.initial_ms = 20 * INTERVAL_MS;
    let mut tiering = Tiering::new(config).unwrap();
    let mut model = TierModel::new(0, GIB, Tier::Slow, fast);
    let mut out = Vec::new();
    for (i, batch) in batches.iter().enumerate() {
        let i = i as u64;
        let now = Duration::from_millis(i * INTERVAL_MS + INTERVAL_MS / 2);
        tiering.observe_samples(&at(batch, p), now);
        if (i + 1).is_multiple_of(20) {
            let plan = tiering.plan(
                Duration::from_millis((i + 1) * INTERVAL_MS),
                &model,
                &model.capacity(),
            );
            model.apply(&plan);
            out.push(plan);
        }
    }
    out
}

/// Every move of every plan: where, how far, which way, at what granularity.
fn moves(plans: &[Plan]) -> Vec<(u64, u64, Direction, Granularity)> {
    plans
        .iter()
        .flat_map(|p| &p.moves)
        .map(|m| (m.start, m.len, m.direction, m.granularity))
        .collect()
}

fn promoted_pages(plans: &[Plan]) -> BTreeSet<u64> {
    let mut pages = BTreeSet::new();
    for m in plans.iter().flat_map(|p| &p.moves) {
        if m.direction == Direction::Promote {
            pages.extend((m.start..m.start + m.len).step_by(PAGE_SIZE as usize));
        }
    }
    pages
}

/// Same moves from the same samples at both periods: with room for every hot page, and with a
/// fast tier of 1 MiB that holds about half of them (so the ranking decides, and demotions
/// happen).
fn assert_same_decisions(write_share: f64, reference: Periods, sampled: Periods) {
    let (batches, hot) = stream(write_share, 120);
    for fast in [64 * MIB, MIB] {
        let want = plans(&batches, reference, fast, 1.0);
        let scale = f64::from(sampled.load) / f64::from(reference.load);
        let got = plans(&batches, sampled, fast, scale);
        let promoted = promoted_pages(&want);
        let hot_promoted = hot.iter().filter(|p| promoted.contains(p)).count();
        let room = (fast / PAGE_SIZE) as usize;
        assert!(
            hot_promoted * 2 > hot.len().min(room),
            "at {reference:?} with {fast} fast bytes the stream must promote most of the hot \
             pages that fit (got {hot_promoted} of {}): otherwise the comparison proves nothing",
            hot.len()
        );
        assert_eq!(
            moves(&got),
            moves(&want),
            "{sampled:?} must plan the moves {reference:?} plans from the same samples \
             ({fast} fast bytes)"
        );
    }
}

#[test]
fn pebs_load_samples_promote_what_period_one_promotes() {
    let loads_only = Periods {
        store: PEBS.load,
        ..PEBS
    };
    assert_same_decisions(0.0, PERIOD_ONE, loads_only);
}

#[test]
fn pebs_loads_and_stores_at_their_own_periods_promote_what_period_one_promotes() {
    // Stores sampled 25 times more sparsely than loads stand for 25 times more accesses: the
    // same stream at period 1 keeps that ratio.
    let scaled_down = Periods {
        load: 1,
        store: PEBS.store / PEBS.load,
        kindless: false,
    };
    assert_same_decisions(0.3, scaled_down, PEBS);
}

#[test]
fn ibs_op_samples_promote_what_period_one_promotes() {
    let kindless_one = Periods {
        kindless: true,
        ..PERIOD_ONE
    };
    assert_same_decisions(0.3, kindless_one, IBS);
}

#[test]
fn pebs_periods_promote_the_hot_pages_when_the_fast_tier_holds_them() {
    // Real periods against period 1 for both kinds: stores now weigh 25 loads, which may reorder
    // the promotions, but with room for the whole hot set the same pages end up fast.
    let (batches, hot) = stream(0.3, 120);
    let fast = 256 * MIB;
    let want = promoted_pages(&plans(&batches, PERIOD_ONE, fast, 1.0));
    let got = promoted_pages(&plans(&batches, PEBS, fast, f64::from(PEBS.load)));
    let hot: BTreeSet<u64> = hot.into_iter().collect();
    assert!(hot.is_subset(&want), "period 1 promotes every hot page");
    assert!(
        hot.is_subset(&got),
        "PEBS periods promote every hot page: {} of {} missing",
        hot.difference(&got).count(),
        hot.len()
    );
}

/// Plans once after a single sampled load of one superpage standing for `weight` accesses, with
/// the whole target slow and room for it in the fast tier; returns the plan's moves.
fn moves_after_one_sample(weight: u32) -> Vec<(u64, u64, Direction, Granularity)> {
    let mut tiering = Tiering::new(TieringConfig::default()).unwrap();
    let model = TierModel::new(0, GIB, Tier::Slow, 64 * MIB);
    let addr = 300 * MIB + 12 * PAGE_SIZE;
    let sample = Sample {
        addr,
        kind: AccessKind::Load,
        weight,
    };
    tiering.observe_samples(&[sample], Duration::from_millis(5));
    // Past the interval's close, so the plan reads it.
    let plan = tiering.plan(Duration::from_millis(45), &model, &model.capacity());
    moves(std::slice::from_ref(&plan))
}

#[test]
fn one_sample_at_a_pmu_period_moves_its_superpage_whole_and_one_at_a_dense_rate_does_not() {
    // At PEBS's load period one sample stands for 64,000 accesses, far more than copying 2 MiB
    // costs (about 6,400 reads' worth at the default latencies): the superpage moves whole.
    // The samples cannot tell which of its pages carry the traffic, so nothing finer moves.
    let superpage = 300 * MIB;
    assert_eq!(
        moves_after_one_sample(PEBS.load),
        vec![(superpage, 2 * MIB, Direction::Promote, Granularity::MIB_2)]
    );
    // At a dense rate the same lone sample stands for a few accesses: a stray one, not worth
    // the copy, and too little to rank the page it landed on.
    assert_eq!(moves_after_one_sample(4), vec![]);
}
