//! Engine tests: ingest, intervals, stage selection, forgetting, DAMON credit, hot-set
//! statistics and the memory bounds. Plans are tested one layer up (`crate::tiering`).

use std::time::Duration;

use super::{domain::MEMOS_READ_WRITE_RATIO, *};
use crate::rng::SplitMix64;
use crate::units::SUPERPAGE_SIZE;

const MS: Duration = Duration::from_millis(1);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// The defaults with the 50 ms counting interval these tests count their time in.
fn cfg() -> EngineConfig {
    EngineConfig {
        interval_ms: 50,
        retain_intervals: 512,
        ..EngineConfig::default()
    }
}

fn new_engine(config: EngineConfig) -> Engine {
    Engine::new(config, MEMOS_READ_WRITE_RATIO).unwrap()
}

fn record(e: &Engine, addr: u64) -> superpage::SuperpageRecord {
    let idx = e.stage1.find(addr >> 21).expect("record");
    e.stage1.records()[idx]
}

#[test]
fn ingest_keeps_reads_and_writes_apart() {
    let mut e = new_engine(cfg());
    let unknown = Sample {
        addr: 0x20_0000,
        kind: AccessKind::Unknown,
        weight: 0,
    };
    e.observe(
        Observations::Samples(&[
            Sample::load(0x20_0000),
            Sample::store(0x20_1000),
            Sample::store(0x20_2000),
            unknown,
        ]),
        MS,
    );
    let r = record(&e, 0x20_0000);
    // Unknown counts as a read, weight 0 as 1.
    assert_eq!((r.ivl_r, r.ivl_w), (2, 2));
    // Nothing outside the touched superpage; stage 2, which has room, counts its pages at once.
    assert_eq!(e.stage1.len(), 1);
    assert_eq!(e.stage2.live(), 1);
    let (reads, writes) = e.stage2.counters(r.slot);
    assert_eq!((reads[0], writes[1], writes[2]), (2, 1, 1));
    let heavy = Sample {
        addr: 0x20_0000,
        kind: AccessKind::Load,
        weight: 1 << 20,
    };
    e.observe_samples(&[heavy], 2 * MS);
    // Evidence is counted in samples: a heavy sample is one more count, not a saturated one.
    assert_eq!(record(&e, 0x20_0000).ivl_r, 3);
}

#[test]
fn intervals_close_on_time_and_cool() {
    let mut e = new_engine(cfg());
    e.observe_samples(&[Sample::load(0); 16], Duration::ZERO);
    e.tick(49 * MS);
    assert_eq!(e.stats().intervals, 0);
    e.tick(50 * MS);
    assert_eq!(e.stats().intervals, 1);
    assert_eq!(record(&e, 0).heat_r, 16);
    e.tick(100 * MS);
    assert_eq!(record(&e, 0).heat_r, 8);
    // A long gap closes the missed intervals at once: 8 >> 3 = 1.
    e.tick(260 * MS);
    assert_eq!(e.stats().intervals, 5);
    assert_eq!(record(&e, 0).heat_r, 1);
}

#[test]
fn heat_cools_once_per_cooling_period_whatever_the_interval() {
    // 10 ms intervals, cooling every 20 ms: every close takes in counts, every other one cools.
    let mut e = new_engine(EngineConfig {
        interval_ms: 10,
        cooling_ms: 20,
        cool_after_samples: 0,
        ..cfg()
    });
    assert_eq!(e.config().intervals_per_cooling(), 2);
    assert_eq!(e.config().cooling_period(), 20 * MS);
    e.observe_samples(&[Sample::load(0); 16], Duration::ZERO);
    let mut heats = Vec::new();
    for close in 1..=5u64 {
        e.tick(ms(10 * close));
        heats.push(record(&e, 0).heat_r);
        e.observe_samples(&[Sample::load(0); 4], ms(10 * close + 1));
    }
    // Periods end at every second close: 16; halved and +4 = 12; +4 = 16; 12; 16.
    assert_eq!(heats, [16, 12, 16, 12, 16]);
    // A catch-up of six intervals (the open one and five empty) ends three periods: three
    // halvings before the open interval's 4 are added.
    e.tick(ms(110));
    assert_eq!(e.stats().intervals, 11);
    assert_eq!(record(&e, 0).heat_r, (16 >> 3) + 4);
    // A period shorter than the interval, or not a whole number of intervals, rounds to whole
    // intervals and never to none.
    let rounds = |interval_ms, cooling_ms| {
        EngineConfig {
            interval_ms,
            cooling_ms,
            ..EngineConfig::default()
        }
        .intervals_per_cooling()
    };
    assert_eq!(
        [rounds(50, 20), rounds(10, 25), rounds(10, 34), rounds(7, 1)],
        [1, 3, 3, 1]
    );
}

#[test]
fn a_stage1_count_converts_to_accesses_per_interval_at_its_steady_state() {
    // A superpage sampled `a` times in every interval settles, at a cooling close, at
    // a (1 + (k − 1) 2^−s) / (1 − 2^−s): the conversion undoes exactly that.
    for (interval_ms, cooling_ms, cooling_shift) in
        [(50, 20, 1), (10, 20, 1), (10, 40, 1), (10, 20, 2)]
    {
        let config = EngineConfig {
            interval_ms,
            cooling_ms,
            cooling_shift,
            cool_after_samples: 0,
            ..cfg()
        };
        let k = config.intervals_per_cooling();
        let mut e = new_engine(config.clone());
        let a = 64;
        for close in 1..=40 * k {
            e.observe_samples(&vec![Sample::load(0); a], ms(interval_ms * close - 1));
            e.tick(ms(interval_ms * close));
        }
        let per_interval = f64::from(record(&e, 0).heat_r) * config.stage1_per_interval();
        assert!(
            (per_interval - a as f64).abs() <= 1.0,
            "{interval_ms} ms intervals, cooling every {cooling_ms} ms by {cooling_shift}: {per_interval}"
        );
    }
}

#[test]
fn sparse_samples_are_kept_until_one_superpage_holds_enough_to_act_on() {
    // One sample every fourth interval, as a PMU's long period gives a lightly used superpage;
    // its heat read after the close of each sample's interval.
    let sparse = |cool_after_samples| {
        let mut e = new_engine(EngineConfig {
            cool_after_samples,
            ..cfg()
        });
        let mut heats = Vec::new();
        for k in 0..8u64 {
            e.observe_samples(&[Sample::load(0)], ms(200 * k + 1));
            e.tick(ms(200 * k + 50));
            heats.push(record(&e, 0).heat_r);
            for i in 2..=4 {
                e.tick(ms(200 * k + 50 * i));
            }
        }
        heats
    };
    // Cooling on time alone forgets each sample before the next arrives.
    assert_eq!(sparse(0), [1; 8]);
    // Waiting for evidence: the samples add up to twice the 3 a promotion needs, then a
    // halving leaves the 3 (and the next sample makes 4), never fewer.
    assert_eq!(sparse(3), [1, 2, 3, 4, 5, 6, 4, 5]);
    // A reset keeps nothing whatever it waits for: it waits for the 3 alone.
    let reset = EngineConfig {
        cool_after_samples: 3,
        cooling_shift: 16,
        ..cfg()
    };
    assert_eq!(reset.cooling_gate(reset.cooling_shift), 3);
}

#[test]
fn stage2_keeps_sparse_page_counts_across_epochs_until_a_page_holds_enough() {
    let counts_after_epoch_end = |cool_after_samples, samples| {
        let mut e = new_engine(EngineConfig {
            cool_after_samples,
            top_n: 1,
            ..cfg()
        });
        e.observe_samples(&[Sample::load(0)], MS);
        e.tick(50 * MS);
        let slot = record(&e, 0).slot;
        // `samples` on page 5 in stage 2, then the plan's epoch end.
        let on_page_5 = vec![Sample::load(5 * PAGE_SIZE); samples];
        e.observe_samples(&on_page_5, 60 * MS);
        e.end_epoch(0);
        e.stage2.counters(slot).0[5]
    };
    assert_eq!(counts_after_epoch_end(0, 2), 1);
    assert_eq!(counts_after_epoch_end(3, 2), 2);
    // Cooling waits until a halving leaves the hottest page the 3 a promotion needs.
    assert_eq!(counts_after_epoch_end(3, 5), 5);
    assert_eq!(counts_after_epoch_end(3, 6), 3);
}

#[test]
fn stage2_cools_at_most_once_per_cooling_period() {
    let mut e = new_engine(EngineConfig {
        cool_after_samples: 0,
        top_n: 1,
        ..cfg()
    });
    e.observe_samples(&[Sample::load(0)], MS);
    e.tick(50 * MS);
    let slot = record(&e, 0).slot;
    e.observe_samples(&[Sample::load(5 * PAGE_SIZE); 8], 60 * MS);
    let page_5 = |e: &Engine| e.stage2.counters(slot).0[5];
    e.end_epoch(0);
    assert_eq!(page_5(&e), 4);
    // A second epoch end before the next interval closes (epochs shorter than the interval)
    // leaves the counts as they are: they halve with time, as stage 1's heat does.
    e.end_epoch(0);
    assert_eq!(page_5(&e), 4);
    e.tick(100 * MS);
    e.end_epoch(0);
    assert_eq!(page_5(&e), 2);
    // With 10 ms intervals cooling every 20 ms, plans after every close cool at every other.
    let mut e = new_engine(EngineConfig {
        interval_ms: 10,
        cooling_ms: 20,
        cool_after_samples: 0,
        top_n: 1,
        ..cfg()
    });
    e.observe_samples(&[Sample::load(0)], MS);
    e.tick(10 * MS);
    let slot = record(&e, 0).slot;
    e.observe_samples(&[Sample::load(5 * PAGE_SIZE); 16], 11 * MS);
    let page_5 = |e: &Engine| e.stage2.counters(slot).0[5];
    let mut counts = Vec::new();
    for close in 2..=5 {
        e.tick(ms(10 * close));
        e.end_epoch(0);
        counts.push(page_5(&e));
    }
    assert_eq!(counts, [8, 8, 4, 4]);
}

/// A superpage sampled while stage 2 has a free slot is counted page by page from its first
/// sample; once the N slots are taken, a new one waits for the close to rank it.
#[test]
fn a_free_stage2_slot_is_taken_at_the_first_sample_and_a_full_stage2_waits_for_the_close() {
    let mut e = new_engine(EngineConfig {
        top_n: 1,
        top_n_max: 1,
        ..cfg()
    });
    e.observe_samples(&[Sample::load(SUPERPAGE_SIZE + 3 * PAGE_SIZE)], MS);
    let first = record(&e, SUPERPAGE_SIZE);
    assert_ne!(first.slot, NO_SLOT);
    assert_eq!(e.stage2.counters(first.slot).0[3], 1);
    // Stage 2 is full: the second superpage is counted in stage 1 only, however hot.
    e.observe_samples(&[Sample::load(2 * SUPERPAGE_SIZE); 5], 2 * MS);
    assert_eq!(record(&e, 2 * SUPERPAGE_SIZE).slot, NO_SLOT);
    // The close ranks the hotter one into stage 2.
    e.tick(50 * MS);
    assert_ne!(record(&e, 2 * SUPERPAGE_SIZE).slot, NO_SLOT);
    assert_eq!(record(&e, SUPERPAGE_SIZE).slot, NO_SLOT);
}

#[test]
fn write_weight_ranks_stage1_and_top_n_gets_stage2() {
    let c = EngineConfig {
        top_n: 2,
        top_n_max: 2,
        ..cfg()
    };
    let mut e = new_engine(c);
    // Superpage 1: 5 reads; superpage 2: 3 writes (weighted 6); superpage 3: 4 reads.
    let mut s = vec![Sample::load(SUPERPAGE_SIZE); 5];
    s.extend([Sample::store(2 * SUPERPAGE_SIZE); 3]);
    s.extend([Sample::load(3 * SUPERPAGE_SIZE); 4]);
    e.observe_samples(&s, MS);
    e.tick(50 * MS);
    let with_slot: Vec<u64> = e
        .stage1
        .records()
        .iter()
        .filter(|r| r.slot != NO_SLOT)
        .map(|r| r.sp)
        .collect();
    assert_eq!(with_slot, vec![1, 2]);
    // Stage 2 now counts per 4 KiB page of the selected superpages only.
    e.observe_samples(
        &[
            Sample::load(SUPERPAGE_SIZE + 5 * PAGE_SIZE),
            Sample::store(2 * SUPERPAGE_SIZE + 7 * PAGE_SIZE),
            Sample::load(3 * SUPERPAGE_SIZE),
        ],
        60 * MS,
    );
    let slot = record(&e, SUPERPAGE_SIZE).slot;
    assert_eq!(e.stage2.counters(slot).0[5], 1);
    assert_eq!(
        e.stage2.counters(record(&e, 2 * SUPERPAGE_SIZE).slot).1[7],
        1
    );
    assert_eq!(e.stats().stage2_superpages, 2);
}

#[test]
fn cold_superpages_are_forgotten() {
    let c = EngineConfig {
        retain_intervals: 4,
        top_n: 1,
        ..cfg()
    };
    let mut e = new_engine(c);
    // Superpage 1 holds enough samples for cooling to run (see `cool_after_samples`).
    let mut samples = vec![Sample::load(SUPERPAGE_SIZE); 6];
    samples.push(Sample::load(0));
    e.observe_samples(&samples, MS);
    for i in 1..=3u64 {
        e.observe_samples(&[Sample::load(SUPERPAGE_SIZE)], ms(i * 50 + 1));
    }
    assert_eq!(e.stage1.len(), 2);
    e.tick(400 * MS);
    // Superpage 0 is cold, slot-less and untouched for more than 4 intervals.
    assert_eq!(e.stage1.len(), 1);
    assert!(e.stage1.find(1).is_some());
}

#[test]
fn damon_regions_spread_over_superpages_and_pages() {
    let mut e = new_engine(EngineConfig { top_n: 1, ..cfg() });
    // 2 MiB + 64 KiB starting 1 MiB into superpage 0: 256 pages of sp 0, 256 + 16 of sp 1.
    let region = DamonObservation {
        start: MIB,
        end: 3 * MIB + 64 * 1024,
        nr_accesses: 3,
        max_nr_accesses: 20,
        age: 1,
    };
    e.observe_damon(&[region], MS);
    assert_eq!(record(&e, 0).ivl_r, 3 * 256);
    assert_eq!(record(&e, SUPERPAGE_SIZE).ivl_r, 3 * 272);
    e.tick(50 * MS);
    e.observe_damon(&[region], 51 * MS);
    let slot = record(&e, SUPERPAGE_SIZE).slot;
    let (r, _) = e.stage2.counters(slot);
    assert_eq!(r.iter().filter(|c| **c == 3).count(), 272);
    assert_eq!(r[271], 3);
    assert_eq!(r[272], 0);
    // Inactive regions create no state.
    e.observe_damon(
        &[DamonObservation {
            start: 10 * GIB,
            end: 11 * GIB,
            nr_accesses: 0,
            max_nr_accesses: 20,
            age: 9,
        }],
        52 * MS,
    );
    assert_eq!(e.stage1.len(), 2);
}

#[test]
fn records_at_rest_are_skipped_by_the_close_and_still_forgotten() {
    let c = EngineConfig {
        retain_intervals: 20,
        top_n: 1,
        ..cfg()
    };
    let mut e = new_engine(c);
    e.observe_samples(&[Sample::load(0), Sample::load(SUPERPAGE_SIZE)], MS);
    e.tick(50 * MS);
    e.end_epoch(0);
    // Superpage 1 stays warm; superpage 0 cools to zero and, once the epoch's counts and its
    // domain history are gone, rests.
    for i in 1..=12u64 {
        e.observe_samples(&[Sample::load(SUPERPAGE_SIZE)], ms(i * 50 + 1));
        e.tick(ms((i + 1) * 50));
        e.end_epoch(0);
    }
    let rest = record(&e, 0);
    assert!(rest.at_rest(), "{rest:?}");
    assert!(!record(&e, SUPERPAGE_SIZE).at_rest());
    e.tick(ms(14 * 50));
    assert_eq!(
        record(&e, 0),
        rest,
        "a close leaves a record at rest as it is"
    );
    // It is forgotten like any cold record once untouched for retain_intervals; the warm one
    // keeps its stage-2 slot.
    e.tick(ms(29 * 50));
    e.observe_samples(&[Sample::load(SUPERPAGE_SIZE)], ms(29 * 50 + 1));
    e.tick(ms(30 * 50));
    assert!(e.stage1.find(0).is_none());
    assert_ne!(record(&e, SUPERPAGE_SIZE).slot, NO_SLOT);
}

#[test]
fn hot_set_statistics_follow_the_70_percent_rule() {
    let mut e = new_engine(EngineConfig { top_n: 1, ..cfg() });
    e.observe_samples(&[Sample::load(0)], MS);
    e.tick(50 * MS);
    // In superpage 0 (now in stage 2): ten pages × 10 accesses, a hundred pages × 1.
    let mut s = Vec::new();
    for p in 0..10u64 {
        s.extend([Sample::load(p * PAGE_SIZE); 10]);
    }
    for p in 100..200u64 {
        s.push(Sample::load(p * PAGE_SIZE));
    }
    e.observe_samples(&s, 60 * MS);
    e.tick(100 * MS);
    let st = e.stats();
    let pages = e.hot_page_stats();
    // 70 % of 200 = 140 → ten 10s and forty 1s; 110 touched pages.
    assert_eq!(pages.hot_subpages, 50);
    assert_eq!(pages.hot_set_bytes, 50 * PAGE_SIZE);
    assert!((pages.hot_page_pct - 100.0 * 50.0 / 110.0).abs() < 1e-9);
    assert_eq!(pages.hot_page_min_access, 1);
    assert_eq!(st.hot_superpages, 1);
    assert_eq!((st.read_dominant, st.write_dominant), (1, 0));
}

#[test]
fn a_sample_storm_over_a_sparse_terabyte_stays_under_the_superpage_cap() {
    const TIB: u64 = 1 << 40;
    let cap = 1 << 14;
    let capped = EngineConfig {
        max_superpages: cap,
        ..cfg()
    };
    capped.validate().unwrap();
    let mut engine = new_engine(capped);
    let mut rng = SplitMix64::new(7);
    // 2^18 samples, each on a random superpage of 1 TiB (512 Ki superpages): nearly all new.
    let samples: Vec<Sample> = (0..1 << 18)
        .map(|_| Sample::load(0x7f00_0000_0000 + ((rng.next_u64() % TIB) & !(PAGE_SIZE - 1))))
        .collect();
    for (i, batch) in samples.chunks(4096).enumerate() {
        engine.observe_samples(batch, ms(i as u64));
    }
    let stats = engine.stats();
    assert!(
        stats.touched_superpages <= cap as u64,
        "{}",
        stats.touched_superpages
    );
    assert!(
        stats.untracked_samples > (1 << 17),
        "{}",
        stats.untracked_samples
    );
    // Records plus a 4/3-loaded power-of-two slot table (at most 8 bytes a record), the
    // stage-2 counters of the `top_n` superpages (in a vector that may have doubled) (512 reads and 512 writes, 4 bytes
    // each), plus the fixed arrays.
    let record = size_of::<superpage::SuperpageRecord>() + 8;
    let stage2 = 2 * cfg().top_n * SUBPAGES * 2 * size_of::<u32>();
    let bound = new_engine(cfg()).memory_bytes() + cap * record + stage2;
    assert!(
        engine.memory_bytes() <= bound,
        "{} bytes over the {bound}-byte bound",
        engine.memory_bytes()
    );
    let mut unlimited = new_engine(cfg());
    for (i, batch) in samples.chunks(4096).enumerate() {
        unlimited.observe_samples(batch, ms(i as u64));
    }
    assert!(
        unlimited.memory_bytes() > 4 * engine.memory_bytes(),
        "the cap is what bounds it: {} vs {}",
        unlimited.memory_bytes(),
        engine.memory_bytes()
    );
}

#[test]
fn max_superpages_below_top_n_max_is_refused_by_name() {
    let bad = EngineConfig {
        max_superpages: 10,
        ..cfg()
    };
    let error = bad.validate().unwrap_err();
    assert!(error.to_string().contains("max_superpages"), "{error}");
}

#[test]
fn memory_for_a_1_tib_target_is_a_small_fraction_of_naive() {
    let c = EngineConfig {
        top_n: 1000,
        adapt_top_n: false,
        ..cfg()
    };
    let mut e = new_engine(c);
    let samples: Vec<Sample> = (0..512 * 1024u64)
        .map(|sp| Sample::load(sp * SUPERPAGE_SIZE + (sp % 512) * PAGE_SIZE))
        .collect();
    e.observe_samples(&samples, MS);
    e.tick(50 * MS);
    assert_eq!(e.stats().touched_superpages, 512 * 1024);
    assert_eq!(e.stats().stage2_superpages, 1000);
    let naive = (1u64 << 40) / PAGE_SIZE * 2;
    let mem = e.memory_bytes() as u64;
    assert!(mem * 16 <= naive, "{mem} bytes vs naive {naive}");
}

#[test]
fn a_ring_record_becomes_a_sample_weighing_its_period() {
    let record = |weight: u64| memtide_common::AccessSample {
        addr: 0x7000,
        weight,
        pid: 1,
        tid: 1,
        cpu: 0,
        kind: AccessKind::Store as u8,
        source: 0,
        _pad: [0; 2],
    };
    let sample = Sample::from_record(&record(1_600_000));
    assert_eq!(
        (sample.addr, sample.kind, sample.weight),
        (0x7000, AccessKind::Store, 1_600_000)
    );
    assert_eq!(
        Sample::from_record(&record(0)).weight,
        1,
        "a period of 0 counts as 1"
    );
    assert_eq!(Sample::from_record(&record(u64::MAX)).weight, u32::MAX);
}

mod open_interval;
