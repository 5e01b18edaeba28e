//! What the application placed itself stays where it is (#18): a 128 MiB workload on the slow
//! node whose first 32 MiB it marks `slow` with memtide's hint library (an `mbind` policy
//! preferring the slow node), then reads and writes the first 64 MiB continuously. The real
//! `memtide run` promotes the hot half it may move and leaves the hinted half on the slow
//! node, counting its pages in `memtide_pages_skipped_total{reason="mempolicy"}`.
use std::time::{Duration, Instant};

use crate::{
    support::{self, Workload, metric_value},
    vm::{
        promotion::EPOCH_BOUND,
        tiering::{self, FAST, MIB_PAGES, SLOW, Timing, pages_on, share},
    },
};

const PAGES: u64 = 128 * MIB_PAGES;
const HINTED: u64 = 32 * MIB_PAGES;
const HOT: u64 = 64 * MIB_PAGES;

#[test]
fn a_range_the_hint_library_marked_slow_stays_slow_while_the_rest_is_promoted() {
    let name = "a_range_the_hint_library_marked_slow_stays_slow_while_the_rest_is_promoted";
    if support::skip_unless_vm(name) {
        return;
    }
    let _timing = Timing::start("hints");
    let mut w =
        Workload::spawn_without_aslr(&["--pages", &PAGES.to_string(), "--node", &SLOW.to_string()]);
    let reply = w.command(&format!("hint slow 0 {HINTED}"));
    assert_eq!(reply, format!("hinted pages={HINTED}"));
    let reply = w.command(&format!("start rw 0 {HOT}"));
    assert_eq!(reply, format!("started pages={HOT}"));
    let agent = tiering::start_agent("hints", "", w.pid, &[]);
    let started = Instant::now();
    let free_hot = format!("{HINTED} {}", HOT - HINTED);
    let hinted = format!("0 {HINTED}");
    let (mut free_fast, mut hinted_fast, mut epochs) = (0.0, 0.0, 0);
    while epochs < EPOCH_BOUND {
        std::thread::sleep(Duration::from_secs(1));
        free_fast = share(&pages_on(&mut w, &free_hot), FAST, HOT - HINTED);
        hinted_fast = share(&pages_on(&mut w, &hinted), FAST, HINTED);
        epochs = tiering::target_status(agent.port, w.pid).map_or(0, |row| row.epochs);
        eprintln!(
            "hints: t={:>5.1}s epoch {epochs:>3}: free hot half on node 0 {:>5.1} %, hinted half {:>5.1} %",
            started.elapsed().as_secs_f64(),
            free_fast * 100.0,
            hinted_fast * 100.0,
        );
        // A few epochs past the free half's promotion, to see that the hinted half stays.
        if free_fast >= 0.9 && epochs >= 10 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(EPOCH_BOUND * 3),
            "the agent planned only {epochs} epochs in {:?}",
            started.elapsed()
        );
    }
    let metrics = support::http_get(agent.port, "/metrics")
        .expect("/metrics")
        .1;
    let skipped = metric_value(
        &metrics,
        "memtide_pages_skipped_total{",
        "reason=\"mempolicy\"",
    );
    let (exit, log) = agent.stop();
    assert!(exit.success(), "memtide run exited with {exit}:\n{log}");
    let reply = w.command("stop");
    assert!(reply.starts_with("stopped passes="), "{reply}");
    assert!(
        free_fast >= 0.9,
        "the hot half memtide may move is not on node 0 after {epochs} epochs: {:.1} %",
        free_fast * 100.0
    );
    assert!(
        hinted_fast < 0.01,
        "memtide moved the range the application marked slow: {:.1} % on node 0",
        hinted_fast * 100.0
    );
    #[expect(clippy::cast_precision_loss, reason = "page counts")]
    let hinted_pages = HINTED as f64;
    assert!(
        skipped.is_some_and(|pages| pages >= hinted_pages),
        "memtide_pages_skipped_total{{reason=\"mempolicy\"}} is {skipped:?}, not the {HINTED} hinted pages"
    );
    let reply = w.command("verify");
    assert_eq!(reply, format!("verified pages={PAGES} mismatches=0"));
}
