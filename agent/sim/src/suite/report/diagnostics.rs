//! Where memtide falls short of the bound, per trace, and why.

use std::fmt::Write as _;

use super::Report;
use crate::{PolicyName, suite::EPOCHS_MS};

impl Report<'_> {
    /// Per-trace figures behind the headline, and what they show.
    pub(super) fn diagnostics(&self) -> String {
        let mut o = String::from(
            "## Where memtide falls short, and why (computed from the runs above)\n\n| trace | memtide hit | bound (`oracle`) hit | share | `oracle-epoch` hit | plans | mean epoch ms | final granularity | migrated MiB |\n|---|---|---|---|---|---|---|---|---|\n",
        );
        let mut rows: Vec<(f64, String)> = Vec::new();
        for t in &self.traces {
            let (Some(m), Some(or)) = (
                self.main(t, PolicyName::Memtide),
                self.main(t, PolicyName::Oracle),
            ) else {
                continue;
            };
            let share = m.fast_hit_ratio / or.fast_hit_ratio.max(1e-9);
            let epoch_oracle = self
                .main(t, PolicyName::OracleEpoch)
                .map_or(f64::NAN, |r| r.fast_hit_ratio);
            let info = &m.policy_info;
            let num = |k: &str| {
                info.get(k)
                    .and_then(serde_json::Value::as_f64)
                    .unwrap_or(0.0)
            };
            rows.push((
                share,
                format!(
                    "| {t} | {:.3} | {:.3} | {:.0} % | {:.3} | {:.0} | {:.0} | {} KiB | {} |\n",
                    m.fast_hit_ratio,
                    or.fast_hit_ratio,
                    share * 100.0,
                    epoch_oracle,
                    num("plans"),
                    num("mean_epoch_ms"),
                    num("final_granularity_bytes") as u64 >> 10,
                    m.migrated_bytes >> 20
                ),
            ));
        }
        rows.sort_by(|a, b| a.0.total_cmp(&b.0));
        for (_, r) in &rows {
            o.push_str(r);
        }
        let hit = |t: &str, p: PolicyName| self.main(t, p).map_or(f64::NAN, |r| r.fast_hit_ratio);
        let stable_min = ["gups-hotset", "clustered-64k", "sparse-superpage", "rw-mix"]
            .iter()
            .map(|t| (*t).to_owned())
            .chain(self.real.iter().cloned())
            .map(|t| hit(&t, PolicyName::Memtide) / hit(&t, PolicyName::OracleEpoch))
            .fold(f64::INFINITY, f64::min);
        let _ = write!(
            o,
            "\nWhat the table shows:\n\n- The bound knows each batch of 1,024 records before it happens and places its pages for nothing: wherever the fast tier holds more pages than a batch touches it is 1.0, so it says how far every policy is from perfect, not what a causal policy could reach. The epoch oracle sees each epoch's accesses before they happen, including random background traffic: on uniform `gups`, where no placement policy without foresight can beat the capacity share ({:.3} for first touch), it reaches {:.3}. Traces with a large random component (gups, zipf-kv, pointer-chase, the moving hot sets) cap any causal policy well below both.\n- memtide's epoch controller lengthens the epoch when the last plan's moves did not pay back (what the promoted pages gained, less what the pages evicted for them then cost from the slow tier) or ping-ponged; the `plans` and `mean epoch` columns show it planning every few seconds on several traces whose hot set moves every one to two seconds of simulated time (gups-moving-hotset, phases, oscillating), so it trails the movement, where HeMem (every 10 ms) and MEMTIS (every 500 ms) react faster.\n- Where the hot set is stable (gups-hotset, clustered-64k, sparse-superpage, rw-mix, the real traces) memtide reaches at least {:.0} % of the epoch oracle, with 4 KiB and 64 KiB moves and few bytes migrated.\n- The projected-time lead over TPP, HeMem, MEMTIS and DAMON comes mostly from migrating little: the baselines that chase the hot set at 2 MiB pay for it in copies and shootdowns (relative times above).\n",
            hit("gups", PolicyName::NoMigration),
            hit("gups", PolicyName::OracleEpoch),
            stable_min * 100.0
        );
        let rel = |sec: &str, c: &str| {
            self.get(sec, "stream", c)
                .map_or(f64::NAN, |r| r.relative_time)
        };
        // Share of memtide's streaming migrations that were not whole huge pages.
        let chunked = |sec: &str| {
            self.get(sec, "stream", "memtide").map_or(f64::NAN, |r| {
                let g = &r.migrations_by_granularity;
                100.0 * (g.k4 + g.k64) as f64 / (g.k4 + g.k64 + g.m2).max(1) as f64
            })
        };
        let _ = writeln!(
            o,
            "- On `stream` (`ryoo` preset) memtide's relative time is {:.3} against {:.3} for static 2 MiB with 1-in-{} sampling, and {:.3} against {:.3} when every record is a sample. Sparse samples make Ryoo's density thresholds see dense 2 MiB regions as sparse: {:.0} % of memtide's streaming migrations are 4 KiB or 64 KiB chunks at 1 in {}, {:.0} % at 1 in 1 (see the sampling-sensitivity table); every chunk is one more TLB shootdown and one more split huge page. The stream's windows return after seconds away; those reuses outlast what the fast tier can hold, so they set no floor under the epoch (the floor counts only reuses the fast tier can bridge).",
            rel("granularity", "memtide"),
            rel("granularity", "static-2m"),
            self.base.sample_rate,
            rel("sampling", "memtide"),
            rel("sampling", "static-2m"),
            chunked("granularity"),
            self.base.sample_rate,
            chunked("sampling"),
        );
        let shrinking = |p: PolicyName| {
            self.main("shrinking", p)
                .map_or(f64::NAN, |r| r.relative_time)
        };
        let best_epoch = EPOCHS_MS
            .iter()
            .filter_map(|&ms| self.get("epoch", "shrinking", &format!("epoch-{ms}ms")))
            .map(|r| r.relative_time)
            .fold(f64::INFINITY, f64::min);
        let mean_epoch = self
            .main("shrinking", PolicyName::Memtide)
            .and_then(|r| r.policy_info.get("mean_epoch_ms"))
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(f64::NAN);
        let _ = write!(
            o,
            "- On `shrinking` (`pmem` preset) first touch without migration is the fastest policy of all (relative time {:.3}; best fixed epoch {:.3}; memtide {:.3}): the swept range shrinks from its top, so first touch already holds the pages swept longest, and inside the range every page is swept equally often. A swap can only trade equally warm data, but the cooled heat (halved every counting interval) ranks the pages swept last as the hot ones, so the first plans swap. memtide then measures that those swaps realised less than they cost (the promoted pages' gain, less what the pages evicted for them cost from the slow tier), lengthens the epoch and raises its benefit threshold; it does not read the heat snapshot moving along a sweep longer than the snapshot as a shifting hot set (mean epoch {:.0} ms).\n\n",
            shrinking(PolicyName::NoMigration),
            best_epoch,
            shrinking(PolicyName::Memtide),
            mean_epoch
        );
        o
    }
}
