use super::{
    candidates::Candidate,
    learn::snapshot_covers,
    select::{Riders, riders},
    victims::{Victim, granules},
    *,
};
use crate::{engine::EngineConfig, policy::rw::WritePrediction, units::SUPERPAGE_SIZE};

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
    let mut cfg = EngineConfig {
        interval_ms: 50,
        ..EngineConfig::default()
    };
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
    // The span counts cooling periods, not intervals: 10 ms intervals cooled every 20 ms hold
    // three periods, 60 ms.
    let cfg = EngineConfig {
        interval_ms: 10,
        cooling_ms: 20,
        ..EngineConfig::default()
    };
    assert!(snapshot_covers(&cfg, Some(ms(60))));
    assert!(!snapshot_covers(&cfg, Some(ms(70))));
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
        split: 1.0,
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
    let group = riders(&candidates, 2 * k, u64::MAX, |sp| sp == 3);
    assert_eq!((group.need, group.count), (2 * k, 2));
    assert_eq!((group.reads, group.writes, group.split), (50.0, 2.0, 2.0));
    // The promotion budget bounds the group as much as the room does.
    assert_eq!(riders(&candidates, 8 * k, k, |_| false).need, k);
    assert_eq!(
        riders(&candidates, 0, u64::MAX, |_| false),
        Riders::default()
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
        split: 320.0,
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
    assert!((part.split - 10.0).abs() < 1e-9 && (rest.split - 310.0).abs() < 1e-9);
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
fn a_cold_run_moves_in_the_64k_granules_it_covers() {
    let k4 = Granularity::KIB_4;
    let k64 = Granularity::KIB_64;
    let cut = |first, n| granules(first, n, k64).collect::<Vec<_>>();
    // Pages 3..51: 13 pages up to the first 64 KiB boundary, two whole granules, 3 pages after.
    assert_eq!(
        cut(3, 48),
        vec![(3, 13, k4), (16, 16, k64), (32, 16, k64), (48, 3, k4)]
    );
    // Aligned at both ends: granules only, one operation each instead of one per page.
    assert_eq!(cut(16, 32), vec![(16, 16, k64), (32, 16, k64)]);
    // Inside one granule, or short of covering one: page by page.
    assert_eq!(cut(17, 10), vec![(17, 10, k4)]);
    assert_eq!(cut(8, 16), vec![(8, 8, k4), (16, 8, k4)]);
    // A whole superpage's run up to its last page.
    let all = cut(0, SUBPAGES);
    assert_eq!(all.len(), SUBPAGES / 16);
    assert!(
        all.iter()
            .all(|&(first, n, g)| first % 16 == 0 && n == 16 && g == k64)
    );
}
