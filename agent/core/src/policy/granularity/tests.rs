use super::*;
use crate::units::Tier;

fn mask(pages: impl IntoIterator<Item = usize>) -> [u64; 8] {
    let mut m = [0u64; 8];
    for p in pages {
        m[p / 64] |= 1 << (p % 64);
    }
    m
}

fn slow_region(sp: u64, accessed: [u64; 8]) -> ScanRegion {
    ScanRegion {
        sp,
        accessed,
        residency: Residency::all(Tier::Slow),
        density_scale: 1.0,
        coverage: None,
        hot: true,
        colder_than_fast: false,
        fits_fast: true,
        lasting: false,
        page_at_floor: false,
        sampled: true,
    }
}

#[test]
fn dense_2m_needs_more_than_480_and_more_than_3_regions() {
    let cfg = GranularityConfig::default();
    let mut st = GranularityState::new(&cfg);
    // Four regions with exactly 480 accessed pages: not dense.
    let r480: Vec<_> = (0..4).map(|sp| slow_region(sp, mask(0..480))).collect();
    let c = st.update(&cfg, &r480);
    assert_eq!(c.dense_2m, 0);
    // 480 of 512 spread over 16-page chunks leaves 30 chunks of 16 > 10: medium.
    assert_eq!(st.current(), Granularity::KIB_64);
    // Three regions with 481: still not more than 3.
    let mut st = GranularityState::new(&cfg);
    let r3: Vec<_> = (0..3).map(|sp| slow_region(sp, mask(0..481))).collect();
    assert_eq!(st.update(&cfg, &r3).dense_2m, 3);
    assert_ne!(st.current(), Granularity::MIB_2);
    let r4: Vec<_> = (0..4).map(|sp| slow_region(sp, mask(0..481))).collect();
    st.update(&cfg, &r4);
    assert_eq!(st.current(), Granularity::MIB_2);
}

#[test]
fn dense_medium_needs_more_than_10_of_16() {
    let cfg = GranularityConfig::default();
    // Four chunks with 10 accessed pages each: not dense.
    let ten = mask((0..4).flat_map(|c| c * 16..c * 16 + 10));
    let mut st = GranularityState::new(&cfg);
    assert_eq!(st.update(&cfg, &[slow_region(1, ten)]).dense_medium, 0);
    assert_eq!(st.current(), Granularity::KIB_4);
    let eleven = mask((0..4).flat_map(|c| c * 16..c * 16 + 11));
    assert_eq!(st.update(&cfg, &[slow_region(1, eleven)]).dense_medium, 4);
    assert_eq!(st.current(), Granularity::KIB_64);
}

#[test]
fn move_out_lowers_only_for_sparse_fast_data() {
    let cfg = GranularityConfig::default();
    let fast = |sp, accessed| ScanRegion {
        sp,
        accessed,
        residency: Residency::all(Tier::Fast),
        density_scale: 1.0,
        coverage: None,
        hot: true,
        colder_than_fast: false,
        fits_fast: true,
        lasting: false,
        page_at_floor: false,
        sampled: true,
    };
    // Dense streaming data in fast memory keeps 2 MiB.
    let mut st = GranularityState {
        current: Granularity::MIB_2,
        cursor_in: 0,
        cursor_out: 0,
    };
    st.update(
        &cfg,
        &(0..8).map(|sp| fast(sp, mask(0..512))).collect::<Vec<_>>(),
    );
    assert_eq!(st.current(), Granularity::MIB_2);
    // Sparse regions whose accessed pages form dense chunks: 2 MiB → 64 KiB.
    let clustered: Vec<_> = (0..4)
        .map(|sp| {
            let mut r = fast(sp, mask(0..16));
            r.residency = Residency::all(Tier::Slow);
            for p in 0..16 {
                r.residency.set(p, Some(Tier::Fast));
            }
            r
        })
        .collect();
    st.update(&cfg, &clustered);
    assert_eq!(st.current(), Granularity::KIB_64);
    // Isolated accessed pages: sparse chunks everywhere → 4 KiB.
    let scattered: Vec<_> = (0..4)
        .map(|sp| fast(sp, mask([0, 100, 300, 500])))
        .collect();
    let c = st.update(&cfg, &scattered);
    assert!(c.sparse_2m == 4 && c.sparse_medium > 3, "{c:?}");
    assert_eq!(st.current(), Granularity::KIB_4);
}

#[test]
fn lower_rule_boundaries() {
    let cfg = GranularityConfig::default();
    let c = |s2, s64| ScanCounts {
        sparse_2m: s2,
        sparse_medium: s64,
        ..ScanCounts::default()
    };
    assert_eq!(
        lower(&cfg, Granularity::MIB_2, &c(3, 100)),
        Granularity::MIB_2
    );
    assert_eq!(
        lower(&cfg, Granularity::MIB_2, &c(4, 4)),
        Granularity::KIB_4
    );
    assert_eq!(
        lower(&cfg, Granularity::MIB_2, &c(4, 3)),
        Granularity::MIB_2
    );
    assert_eq!(
        lower(&cfg, Granularity::MIB_2, &c(4, 2)),
        Granularity::KIB_64
    );
    assert_eq!(
        lower(&cfg, Granularity::KIB_64, &c(4, 2)),
        Granularity::KIB_64
    );
}

#[test]
fn scan_budget_and_cursor() {
    let cfg = GranularityConfig {
        scan_pages: 1024,
        ..GranularityConfig::default()
    };
    let regions: Vec<_> = (0..6)
        .map(|sp| slow_region(sp * 10, mask(0..512)))
        .collect();
    let mut st = GranularityState::new(&cfg);
    // 1024 pages = two regions per scan: never more than 3 dense regions at once.
    for _ in 0..4 {
        assert_eq!(st.update(&cfg, &regions).dense_2m, 2);
    }
    assert_ne!(st.current(), Granularity::MIB_2);
    let big = GranularityConfig {
        scan_pages: 4096,
        ..cfg
    };
    st.update(&big, &regions);
    assert_eq!(st.current(), Granularity::MIB_2);
}

/// A slow region whose samples resolved it (coverage 1).
fn resolved(pages: impl IntoIterator<Item = usize>) -> ScanRegion {
    ScanRegion {
        coverage: Some(1.0),
        ..slow_region(0, mask(pages))
    }
}

#[test]
fn per_region_choice() {
    let cfg = GranularityConfig::default();
    // Ryoo's density under a 2 MiB target, for regions whose samples resolve them (every
    // other page: no accessed page has an accessed neighbour).
    let scattered = |n: usize| resolved((0..SUBPAGES).step_by(2).take(n));
    let dense = |n: usize| ScanRegion {
        density_scale: 2.0,
        ..scattered(n)
    };
    assert!(cfg.moves_whole(Granularity::MIB_2, &dense(241)));
    assert!(!cfg.moves_whole(Granularity::MIB_2, &dense(240)));
    assert!(!cfg.moves_whole(Granularity::KIB_64, &dense(256)));
    assert_eq!(
        cfg.chunk_granularity(Granularity::MIB_2, 11),
        Granularity::KIB_64
    );
    assert_eq!(
        cfg.chunk_granularity(Granularity::MIB_2, 10),
        Granularity::KIB_4
    );
    assert_eq!(
        cfg.chunk_granularity(Granularity::KIB_4, 16),
        Granularity::KIB_4
    );
}

#[test]
fn a_superpage_moves_whole_unless_its_samples_show_it_sparse() {
    let cfg = GranularityConfig::default();
    // Hot pages scattered, their samples landing on them again and again: parts.
    let sparse = resolved([3, 70, 200, 411]);
    assert!(sparse.samples_show_sparse());
    assert!(!cfg.moves_whole(Granularity::KIB_4, &sparse));
    // Dense data sampled thinly: most samples found a new page, so nothing is resolved.
    let thin = ScanRegion {
        coverage: Some(0.12),
        ..resolved([3, 70, 200, 411])
    };
    assert!(!thin.samples_show_sparse());
    assert!(cfg.moves_whole(Granularity::KIB_4, &thin));
    // No full window of samples yet: they cannot tell a few hot pages from all 512. While
    // none of its pages holds the floor nothing finer could move: whole...
    let young = ScanRegion {
        coverage: None,
        ..sparse
    };
    assert!(cfg.moves_whole(Granularity::KIB_4, &young));
    // ...and once one does, the pages move one by one until a window tells.
    let young_resolving = ScanRegion {
        page_at_floor: true,
        ..young
    };
    assert!(!young_resolving.shows_heat());
    assert!(!cfg.moves_whole(Granularity::KIB_4, &young_resolving));
    // Unless the pages its samples found mostly adjoin one another: contiguous heat, as a
    // stencil's rows show and a few scattered hot pages do not.
    let young_contiguous = ScanRegion {
        accessed: mask([3, 4, 70, 71, 200]),
        ..young_resolving
    };
    assert!(!young_contiguous.found_pages_scattered());
    assert!(cfg.moves_whole(Granularity::KIB_4, &young_contiguous));
    // Half of them with a neighbour is enough; fewer is not.
    let half = mask([3, 4, 70, 200]);
    assert!(
        !ScanRegion {
            accessed: half,
            ..young_resolving
        }
        .found_pages_scattered()
    );
    let fewer = mask([3, 4, 70, 200, 411]);
    assert!(
        ScanRegion {
            accessed: fewer,
            ..young_resolving
        }
        .found_pages_scattered()
    );
    assert!(!cfg.moves_whole(
        Granularity::KIB_4,
        &ScanRegion {
            accessed: fewer,
            ..young_resolving
        }
    ));
    // A full window decides, whatever a page holds.
    assert!(cfg.moves_whole(
        Granularity::KIB_4,
        &ScanRegion {
            page_at_floor: true,
            ..thin
        }
    ));
    // A sweep part-way through: its samples run along neighbouring pages, and the rest of
    // the superpage comes next.
    let sweep = resolved(0..40);
    assert!(!sweep.samples_show_sparse());
    assert!(cfg.moves_whole(Granularity::KIB_4, &sweep));
    // Outside stage 1's hot set the same samples are too little to move 2 MiB for.
    assert!(!cfg.moves_whole(Granularity::KIB_4, &ScanRegion { hot: false, ..thin }));
    let young_cold = ScanRegion {
        hot: false,
        colder_than_fast: true,
        ..young
    };
    assert!(!cfg.moves_whole(Granularity::KIB_4, &young_cold));
    // Unless stage 1 does not find it colder than what the fast tier holds
    // ([`colder_than_fast`]: outside the hot set by no more than sampling noise, or ranked
    // among the superpages the fast tier can hold): whether the move pays is Eq. (1)'s, on the
    // samples' traffic...
    let unranked = ScanRegion {
        colder_than_fast: false,
        ..young_cold
    };
    assert!(unranked.shows_heat());
    assert!(cfg.moves_whole(Granularity::KIB_4, &unranked));
    // ...while none of its pages holds the floor, and before a window fills.
    for not_whole in [
        ScanRegion {
            page_at_floor: true,
            ..unranked
        },
        ScanRegion {
            coverage: Some(0.12),
            ..unranked
        },
    ] {
        assert!(
            !cfg.moves_whole(Granularity::KIB_4, &not_whole),
            "{not_whole:?}"
        );
    }
    // Unless its heat lasts and ranks it among the superpages the fast tier can hold: warm
    // in place, spread too thin for a page to reach the floor, it moves whole...
    let warm = ScanRegion {
        hot: false,
        lasting: true,
        ..thin
    };
    assert!(cfg.moves_whole(Granularity::KIB_4, &warm));
    // ...but not where the fast tier cannot hold it beside hotter ones, not while its samples
    // have come and gone within fewer intervals (a sweep passing through), not before a
    // window fills where stage 1 finds it colder than what the fast tier holds, and not when the window
    // shows it sparse.
    for not_whole in [
        ScanRegion {
            fits_fast: false,
            ..warm
        },
        ScanRegion {
            lasting: false,
            ..warm
        },
        ScanRegion {
            coverage: None,
            colder_than_fast: true,
            ..warm
        },
        ScanRegion {
            hot: false,
            lasting: true,
            ..sparse
        },
    ] {
        assert!(
            !cfg.moves_whole(Granularity::KIB_4, &not_whole),
            "{not_whole:?}"
        );
    }
    // At the bound: half the pages with a neighbour is not sparse, fewer is.
    assert!(!resolved([0, 1, 10, 20]).samples_show_sparse());
    assert!(resolved([0, 1, 10, 20, 30]).samples_show_sparse());
    assert!(
        !ScanRegion {
            coverage: Some(SPARSE_COVERAGE - 0.01),
            ..sparse
        }
        .samples_show_sparse()
    );
}

#[test]
fn colder_than_the_hot_set_means_beyond_poisson_noise() {
    use super::below_beyond_noise;
    // At a PMU's period the cut falls at one or two samples: nothing below it is colder.
    assert!(!below_beyond_noise(0, 1));
    assert!(!below_beyond_noise(1, 2));
    assert!(!below_beyond_noise(0, 2), "P(0 | 2) = 0.135");
    // P(0 | 3) = 0.0498: at a cut-off of three only an unsampled superpage is colder.
    assert!(below_beyond_noise(0, 3));
    assert!(!below_beyond_noise(1, 3));
    // At a dense rate's cut-off of ten, four is colder (P = 0.029) and five is not (0.067).
    assert!(below_beyond_noise(4, 10));
    assert!(!below_beyond_noise(5, 10));
    // At or above the cut-off it is in the hot set.
    assert!(!below_beyond_noise(10, 10) && !below_beyond_noise(11, 10));
    // Past the exact test's range the normal tail: 2 sigma under is colder, 1 sigma is not.
    assert!(!below_beyond_noise(380, 400) && below_beyond_noise(360, 400));
    assert!(!below_beyond_noise(99_700, 100_000) && below_beyond_noise(99_000, 101_000));
    // The two agree where they meet: at a cut-off of 100, 83 is colder (P = 0.047), 84 not.
    assert!(below_beyond_noise(83, 100) && !below_beyond_noise(84, 100));
    assert!(below_beyond_noise(83, 101) && !below_beyond_noise(85, 101));
}

#[test]
fn medium_is_configurable() {
    let cfg = GranularityConfig {
        medium: Granularity::new(128 << 10).unwrap(),
        thr_high_medium: 20,
        thr_low_medium: 20,
        ..GranularityConfig::default()
    };
    cfg.validate().unwrap();
    let bad = GranularityConfig {
        medium: Granularity::new(12 << 10).unwrap(),
        ..GranularityConfig::default()
    };
    assert!(bad.validate().is_err());
    let r = slow_region(0, mask((0..4).flat_map(|c| c * 32..c * 32 + 21)));
    let mut st = GranularityState::new(&cfg);
    assert_eq!(st.update(&cfg, &[r]).dense_medium, 4);
    assert_eq!(st.current().bytes(), 128 << 10);
}

#[test]
fn fixed_granularity_never_changes_and_ignores_density() {
    let cfg = GranularityConfig {
        initial: Granularity::MIB_2,
        fixed: true,
        ..GranularityConfig::default()
    };
    let mut st = GranularityState::new(&cfg);
    // Many sparse fast regions would lower an adaptive target.
    let sparse: Vec<ScanRegion> = (0..8)
        .map(|sp| ScanRegion {
            sp,
            accessed: mask([0]),
            residency: Residency::all(Tier::Fast),
            density_scale: 1.0,
            coverage: Some(1.0),
            hot: true,
            colder_than_fast: false,
            fits_fast: true,
            lasting: false,
            page_at_floor: false,
            sampled: true,
        })
        .collect();
    st.update(&cfg, &sparse);
    assert_eq!(st.current(), Granularity::MIB_2);
    assert!(cfg.moves_whole(Granularity::MIB_2, &sparse[0]));
    assert!(!cfg.moves_whole(Granularity::MIB_2, &resolved([])));
    let adaptive = GranularityConfig {
        initial: Granularity::MIB_2,
        ..GranularityConfig::default()
    };
    let mut a = GranularityState::new(&adaptive);
    a.update(&adaptive, &sparse);
    assert_ne!(a.current(), Granularity::MIB_2);
    assert!(!adaptive.moves_whole(Granularity::MIB_2, &resolved([0])));
    let m = GranularityConfig {
        initial: Granularity::KIB_64,
        fixed: true,
        ..GranularityConfig::default()
    };
    assert_eq!(
        m.chunk_granularity(Granularity::KIB_64, 1),
        Granularity::KIB_64
    );
    assert_eq!(
        m.chunk_granularity(Granularity::KIB_4, 16),
        Granularity::KIB_4
    );
}

#[test]
fn colder_than_what_the_fast_tier_holds_needs_both_bars() {
    // Below the hot set's cut-off beyond noise, and the fast tier holds no more than the hot
    // set: colder.
    assert!(colder_than_fast((0, 0), (10, 10)));
    assert!(colder_than_fast((4, 0), (10, 12)));
    // One superpage carries the hot set (cut-off 205) while the fast tier holds ten, the tenth
    // with a count of 2: a superpage with 1 ranks among them within noise.
    assert!(!colder_than_fast((1, 0), (205, 2)));
    assert!(!colder_than_fast((0, 0), (205, 1)));
    // Beyond noise of the fast tier's bar too: colder.
    assert!(colder_than_fast((2, 0), (205, 20)));
    // Cooled to nothing with nothing in the open interval: colder where the bars can tell
    // (3 or more), not where a steadily warm superpage draws a sample or two in all.
    assert!(colder_than_fast((0, 0), (3, 3)));
    assert!(!colder_than_fast((0, 0), (2, 2)));
    assert!(!colder_than_fast((1, 0), (1, 1)));
}

#[test]
fn a_superpage_without_cooled_heat_is_judged_by_its_open_interval() {
    let bars = (3, 3);
    // A first touch whose samples all fell in the interval still open: two samples against a
    // cut-off of 3 are within noise, whatever its cooled count of 0 says.
    assert!(!colder_than_fast((0, 2), bars));
    // Nothing sampled in the open interval either: colder.
    assert!(colder_than_fast((0, 0), bars));
    // Against a hot set at 10, two open samples are below beyond noise.
    assert!(colder_than_fast((0, 2), (10, 10)));
    // With cooled heat, the open interval is not read: closed intervals alone, as the cut-off.
    assert!(colder_than_fast((1, 9), (10, 10)));
    assert!(!colder_than_fast((5, 0), (10, 10)));
}

#[test]
fn a_superpage_without_cooled_heat_reaches_a_bar_by_what_the_open_interval_drew_so_far() {
    // The open interval holds a twentieth of the cooled counts' mass: a superpage at a cut-off
    // of 100 has drawn about 5 samples in it so far.
    let share = 0.05;
    assert!(reaches((0, 5), 100, share));
    assert!(!reaches((0, 4), 100, share));
    // Rounded up: 2.5 expected samples ask for 3.
    assert!(reaches((0, 3), 50, share));
    assert!(!reaches((0, 2), 50, share));
    // Never fewer than one sample, never more than the bar itself.
    assert!(!reaches((0, 0), 3, share));
    assert!(reaches((0, 1), 3, share));
    assert!(reaches((0, 3), 3, 1.0));
    assert!(!reaches((0, 2), 3, 1.0));
    // With cooled heat, the cooled count alone, as the bar was cut: the open interval is not
    // read.
    assert!(!reaches((4, 500), 100, share));
    assert!(reaches((100, 0), 100, share));
    // A bar of 0 (nothing warm) is one sample.
    assert!(reaches((1, 0), 0, share));
    assert!(!reaches((0, 0), 0, share));
}
