//! Resource bound, measured as the kernel sees it: a sample storm over a sparse 1 TiB address
//! range grows this process's resident memory by no more than `[engine] max_superpages`
//! allows, and the same storm without the cap would grow it far more. One test per binary, so
//! nothing else allocates while it measures.
use std::time::Duration;

use memtide_common::AccessKind;
use memtide_core::{
    engine::{Engine, EngineConfig, Sample, domain::MEMOS_READ_WRITE_RATIO},
    rng::SplitMix64,
};

const TIB: u64 = 1 << 40;

/// This process's resident set, bytes (`VmRSS` of /proc/self/status).
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .expect("VmRSS line");
    kib * 1024
}

/// Feeds `batches` batches of 4096 samples on random 4 KiB pages of a 1 TiB range.
fn storm(engine: &mut Engine, batches: u64) {
    let mut rng = SplitMix64::new(11);
    let mut batch = Vec::with_capacity(4096);
    for i in 0..batches {
        batch.clear();
        batch.extend((0..4096).map(|_| Sample {
            addr: 0x7f00_0000_0000 + ((rng.next_u64() % TIB) & !0xfff),
            kind: AccessKind::Load,
            weight: 1,
        }));
        engine.observe_samples(&batch, Duration::from_millis(i));
    }
}

#[test]
fn a_sparse_terabyte_storm_keeps_rss_under_the_cap() {
    let cap = 1 << 16; // 64 Ki superpages
    let config = EngineConfig {
        max_superpages: cap,
        ..EngineConfig::default()
    };
    let before = rss_bytes();
    let mut engine = Engine::new(config, MEMOS_READ_WRITE_RATIO).expect("engine");
    // 1 Mi samples: almost every one on a superpage never seen before (512 Ki of them).
    storm(&mut engine, 256);
    let capped_growth = rss_bytes().saturating_sub(before);
    let stats = engine.stats();
    assert!(stats.touched_superpages <= cap as u64);
    assert!(stats.untracked_samples > 0);
    // Records (40 bytes) and slots (4 bytes at <= 3/4 load, doubled) per superpage,
    // the fixed stage-2 and histogram arrays, and allocator slack.
    let bound = 16 << 20;
    eprintln!(
        "engine RSS: capped growth {capped_growth} bytes for {} superpages ({} samples left out); bound {bound}",
        stats.touched_superpages, stats.untracked_samples
    );
    assert!(
        capped_growth <= bound,
        "resident memory grew {capped_growth} bytes under a {cap}-superpage cap"
    );
    drop(engine);

    let before = rss_bytes();
    let mut unlimited =
        Engine::new(EngineConfig::default(), MEMOS_READ_WRITE_RATIO).expect("engine");
    storm(&mut unlimited, 256);
    let unlimited_growth = rss_bytes().saturating_sub(before);
    eprintln!(
        "engine RSS: uncapped growth {unlimited_growth} bytes for {} superpages",
        unlimited.stats().touched_superpages
    );
    assert!(
        unlimited_growth > 2 * capped_growth,
        "without the cap the same storm must cost more ({unlimited_growth} vs {capped_growth}): the cap is what bounds it"
    );
}
