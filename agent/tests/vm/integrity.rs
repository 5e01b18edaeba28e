//! Test 4, integrity: the workload writes its checksum pattern over 512 MiB on node 1 and keeps
//! rewriting a 64 MiB window of it, the window moving every few seconds, while memtide
//! migrates aggressively for 60 s (one-second epochs; every page DAMON sees accessed at all
//! worth moving; a fast tier capped so that new windows must push old ones out: promotions and
//! demotions all along, of pages being written). Then the workload verifies every word of the
//! 512 MiB: zero mismatches.
use std::time::{Duration, Instant};

use memtide_core::units::PAGE_SIZE;

use crate::{
    support::{self, Agent, Workload},
    vm::tiering::{self, FAST, MIB_PAGES, SLOW, Timing, pages_on},
};

const PAGES: u64 = 512 * MIB_PAGES;
const WINDOW_PAGES: u64 = 64 * MIB_PAGES;
/// Windows start every 48 MiB, so consecutive ones overlap a little.
const WINDOW_STEP: u64 = 48 * MIB_PAGES;
const WINDOW_SECONDS: u64 = 6;
const RUN: Duration = Duration::from_secs(60);
/// Fast memory the agent may fill with the workload: room for a window and a half, so every
/// new window pushes older ones out.
const ROOM: u64 = 96 << 20;
const RESERVE: u64 = 64 << 20;

#[test]
fn data_survives_a_minute_of_aggressive_migration() {
    if support::skip_unless_vm("data_survives_a_minute_of_aggressive_migration") {
        return;
    }
    let _timing = Timing::start("integrity");
    let mut w = Workload::spawn(&["--pages", &PAGES.to_string(), "--node", &SLOW.to_string()]);
    assert_eq!(
        w.command("verify"),
        format!("verified pages={PAGES} mismatches=0")
    );
    // Cap the fast tier at what it holds now plus ROOM, counted the way the agent counts it
    // (free memory above the high watermark and the executor's reserve).
    let total = tiering::node_meminfo(FAST, "MemTotal");
    let usable = tiering::node_meminfo(FAST, "MemFree")
        .saturating_sub(tiering::high_watermark(FAST) + RESERVE);
    #[expect(clippy::cast_precision_loss, reason = "a usage fraction")]
    let high = ((total - usable + ROOM) as f64 / total as f64).min(0.995);
    // A window rewritten whole every ~100 ms has each page accessed in only a few of DAMON's
    // 5 ms sampling intervals; a DAMON weight of 16 makes that worth moving (aggressive).
    let config = tiering::config(
        "integrity",
        &format!(
            "[engine]\ndamon_weight = 16\n[engine.policy.capacity]\nhigh_watermark = {high:.4}\nlow_watermark = {:.4}\nhysteresis_epochs = 1\n",
            high - 0.02
        ),
    );
    let config = config.to_string_lossy().into_owned();
    let pid = w.pid.to_string();
    let pgmigrate = || {
        tiering::vmstat()
            .get("pgmigrate_success")
            .copied()
            .unwrap_or(0)
    };
    let migrated_before = pgmigrate();
    let agent = Agent::start(
        &["--config", &config, "--pid", &pid],
        Duration::from_secs(90),
    );
    let started = Instant::now();
    let mut window = 0;
    let mut rewrites = 0;
    while started.elapsed() < RUN {
        let first = (window * WINDOW_STEP) % (PAGES - WINDOW_PAGES + 1);
        let reply = w.command(&format!("start rewrite {first} {WINDOW_PAGES}"));
        assert!(reply.starts_with("started"), "{reply}");
        std::thread::sleep(Duration::from_secs(WINDOW_SECONDS));
        let reply = w.command("stop");
        let passes: u64 = reply
            .strip_prefix("stopped passes=")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("{reply}"));
        rewrites += passes;
        let fast = pages_on(&mut w, &format!("{first} {WINDOW_PAGES}"));
        let all = pages_on(&mut w, "");
        eprintln!(
            "integrity: t={:>5.1}s window {window} (pages {first}+{WINDOW_PAGES}): {passes} rewrites, {:.0} % of it on node 0; whole buffer {:.0} MiB on node 0; {} MiB migrated so far",
            started.elapsed().as_secs_f64(),
            tiering::share(&fast, FAST, WINDOW_PAGES) * 100.0,
            tiering::mib(all.get(&FAST).copied().unwrap_or(0)),
            ((pgmigrate() - migrated_before) * PAGE_SIZE) >> 20,
        );
        window += 1;
    }
    let row = tiering::target_status(agent.port, w.pid).unwrap_or_default();
    let (exit, log) = agent.stop();
    if row.promoted_bytes == 0 {
        for line in log.lines().filter(|l| l.contains("planned")) {
            eprintln!("integrity: agent: {line}");
        }
    }
    assert!(exit.success(), "memtide run exited with {exit}:\n{log}");
    let migrated = (pgmigrate() - migrated_before) * PAGE_SIZE;
    let verify_started = Instant::now();
    let reply = w.command("verify");
    eprintln!(
        "integrity: {window} windows, {rewrites} window rewrites; {} epochs; memtide promoted {} MiB and demoted {} MiB ({} MiB migrated per /proc/vmstat) in {:.0} s; verify of 512 MiB took {:.1} s: {reply}",
        row.epochs,
        row.promoted_bytes >> 20,
        row.demoted_bytes >> 20,
        migrated >> 20,
        RUN.as_secs_f64(),
        verify_started.elapsed().as_secs_f64()
    );
    assert_eq!(reply, format!("verified pages={PAGES} mismatches=0"));
    // "Aggressive": hundreds of MiB moved, both ways, while being written.
    assert!(
        row.promoted_bytes >= 128 << 20 && row.demoted_bytes >= 64 << 20,
        "too little migration to prove anything: promoted {} MiB, demoted {} MiB",
        row.promoted_bytes >> 20,
        row.demoted_bytes >> 20
    );
}
