//! What `/proc/PID/numa_maps` tells a target's epochs: its resident bytes on the fast and on the
//! slow nodes (the managed-bytes gauge, at any size of target: the placement query covers only
//! the pages an epoch asks about), and the mappings memtide must leave where they are.
//!
//! A mapping with a memory policy (`mbind(2)`, memtide's hint library: bind, prefer,
//! interleave) says where the application wants its pages; moving them would undo it. An
//! mlocked mapping (`mlock(2)`, smaps flag `lo`) is one whose pages the application asked
//! never to fault. The planner sees such mappings as not mapped, the hit ratio still counts
//! their accesses, and `memtide_pages_skipped_total{reason}` (`mempolicy`, `mlocked`) counts
//! their pages when they are first found.

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use memtide_core::units::PAGE_SIZE;
use memtide_host::{
    exec::ExecReport,
    targets::{numa_maps::NumaMap, smaps::SmapsEntry},
};

/// The most of its time a target's epochs spend reading numa_maps: the read walks every page
/// table of the target (10 ms per GiB of 4 KiB pages on the test machine, docs/benchmarks.md),
/// so at a fixed age of 10 s a target of 256 GiB would cost a quarter of a core. Past that cost
/// readings age longer; between them the executor's moves keep the bytes per tier current,
/// and only what the program allocates, frees or locks meanwhile is found late.
const READ_TIME_SHARE: f64 = 0.01;

/// One reading of numa_maps, kept up to date with what memtide moved since.
#[derive(Clone, Debug)]
pub(super) struct Resident {
    pub(super) read_at: Instant,
    /// The CPU time reading it took (numa_maps, and smaps when something is locked): both
    /// walk every page table of the target, so it grows with what the target has resident.
    pub(super) read_cost: Duration,
    /// Bytes on the fast and on the slow nodes.
    pub(super) bytes: [u64; 2],
    /// Mappings to leave alone, by start address: `[start, end)` and why. The end is the next
    /// mapping's start at most; numa_maps gives starts only, so `end` comes from
    /// `/proc/PID/maps` ([`Self::ranges_left_alone`]).
    left_alone: BTreeMap<u64, (&'static str, u64)>,
}

impl Resident {
    /// From numa_maps, with `fast` and `slow` the nodes of each tier.
    pub(super) fn read(maps: &[NumaMap], fast: &[u32], slow: &[u32]) -> Self {
        let on = |nodes: &[u32]| -> u64 {
            maps.iter()
                .flat_map(|map| nodes.iter().map(|&node| map.bytes_on(node)))
                .fold(0, u64::saturating_add)
        };
        let left_alone = maps
            .iter()
            .filter_map(|map| {
                let why = map.left_alone_because()?;
                Some((map.start, (why, map.resident_pages())))
            })
            .collect();
        Self {
            read_at: Instant::now(),
            read_cost: Duration::ZERO,
            bytes: [on(fast), on(slow)],
            left_alone,
        }
    }

    /// How old this reading may get before the next: `base`, or longer where reading it
    /// costs more than [`READ_TIME_SHARE`] of that time.
    pub(super) fn read_interval(&self, base: Duration) -> Duration {
        base.max(self.read_cost.div_f64(READ_TIME_SHARE))
    }

    /// Adds the mlocked mappings of `smaps` (flag `lo`): the application asked for their pages
    /// never to fault, and a migration makes accesses wait on the pages being moved.
    pub(super) fn add_locked(&mut self, smaps: &[SmapsEntry]) {
        for entry in smaps.iter().filter(|entry| entry.has_flag("lo")) {
            self.left_alone
                .entry(entry.mapping.start)
                .or_insert(("mlocked", entry.rss_kb / 4));
        }
    }

    /// Pages of the mappings this reading leaves alone that `earlier` did not, by reason.
    pub(super) fn newly_left_alone(&self, earlier: Option<&Self>) -> BTreeMap<&'static str, u64> {
        let mut pages = BTreeMap::new();
        for (start, &(why, resident)) in &self.left_alone {
            if earlier.is_none_or(|earlier| !earlier.left_alone.contains_key(start)) {
                *pages.entry(why).or_insert(0) += resident;
            }
        }
        pages
    }

    /// Whether the mapping starting at `start` is to be left alone.
    pub(super) fn leaves_alone(&self, start: u64) -> bool {
        self.left_alone.contains_key(&start)
    }

    /// The `[start, end)` ranges left alone, their ends from `mappings` (`[start, end)` by
    /// start, as `/proc/PID/maps` lists them).
    pub(super) fn ranges_left_alone(&self, mappings: &[(u64, u64)]) -> Vec<(u64, u64)> {
        mappings
            .iter()
            .copied()
            .filter(|&(start, _)| self.leaves_alone(start))
            .collect()
    }

    /// Moves `report`'s migrated pages between the tiers' counts (those that were already
    /// where they were sent stay where they were counted).
    pub(super) fn moved(&mut self, report: &ExecReport) {
        let [fast, slow] = &mut self.bytes;
        let promoted = report.promote.pages_relocated() * PAGE_SIZE;
        let demoted = report.demote.pages_relocated() * PAGE_SIZE;
        *fast = (*fast + promoted).saturating_sub(demoted);
        *slow = (*slow + demoted).saturating_sub(promoted);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(start: u64, policy: &str, pages_on_node0: u64) -> NumaMap {
        NumaMap {
            start,
            policy: policy.into(),
            nodes: [(0, pages_on_node0)].into_iter().collect(),
            kernel_page_kb: 4,
            ..NumaMap::default()
        }
    }

    #[test]
    fn pages_already_where_they_were_sent_stay_counted_where_they_were() {
        // 10 pages on node 0 (fast), nothing slow.
        let mut resident = Resident::read(&[map(0x1000, "default", 10)], &[0], &[1]);
        let mut report = ExecReport::default();
        // Six victims demoted, two of which the kernel had demoted before: four left the
        // fast tier. One page promoted.
        report.demote.pages_moved = 6;
        report.demote.pages_already_placed = 2;
        report.promote.pages_moved = 1;
        resident.moved(&report);
        assert_eq!(resident.bytes, [(10 - 4 + 1) * 4096, (4 - 1) * 4096]);
    }

    #[test]
    fn a_costly_reading_ages_longer_so_its_walks_stay_a_share_of_the_time() {
        let mut resident = Resident::read(&[map(0x1000, "default", 10)], &[0], &[1]);
        let ten_s = Duration::from_secs(10);
        // A small target (a millisecond's walk) ages as the placement does.
        resident.read_cost = Duration::from_millis(1);
        assert_eq!(resident.read_interval(ten_s), ten_s);
        // 256 GiB of 4 KiB pages at 10 ms per GiB: a reading every 10 s would spend a quarter
        // of the time walking; at most 1 % is every 256 s.
        resident.read_cost = Duration::from_millis(2560);
        assert_eq!(resident.read_interval(ten_s), Duration::from_secs(256));
        // A quiet target's longer age stands.
        assert_eq!(
            resident.read_interval(Duration::from_secs(600)),
            Duration::from_secs(600)
        );
    }

    #[test]
    fn mlocked_mappings_are_left_alone_unless_already_for_their_policy() {
        let smaps = memtide_host::targets::smaps::parse(
            std::path::Path::new("smaps"),
            "7f0000000000-7f0000010000 rw-p 00000000 00:00 0\n\
             Rss:                  64 kB\n\
             VmFlags: rd wr mr mw me lo ac\n\
             7f0000020000-7f0000030000 rw-p 00000000 00:00 0\n\
             Rss:                  64 kB\n\
             VmFlags: rd wr mr mw me ac\n\
             7f0000040000-7f0000050000 rw-p 00000000 00:00 0\n\
             Rss:                  32 kB\n\
             VmFlags: rd wr mr mw me lo ac\n",
        )
        .unwrap();
        let mut resident = Resident::read(&[map(0x7f00_0004_0000, "bind", 8)], &[0], &[1]);
        resident.add_locked(&smaps);
        assert!(resident.leaves_alone(0x7f00_0000_0000));
        assert!(!resident.leaves_alone(0x7f00_0002_0000));
        assert_eq!(
            resident.newly_left_alone(None),
            [("mempolicy", 8), ("mlocked", 16)].into()
        );
    }

    #[test]
    fn mappings_with_a_memory_policy_are_left_alone_and_counted_once() {
        let first = Resident::read(
            &[map(0x1000, "default", 10), map(0x9000, "bind", 3)],
            &[0],
            &[1],
        );
        assert_eq!(first.bytes, [13 * 4096, 0]);
        assert!(first.leaves_alone(0x9000) && !first.leaves_alone(0x1000));
        assert_eq!(first.newly_left_alone(None), [("mempolicy", 3)].into());
        let second = Resident::read(
            &[
                map(0x1000, "local", 10),
                map(0x9000, "bind", 3),
                map(0x20000, "prefer", 5),
                map(0x30000, "interleave", 2),
            ],
            &[0],
            &[1],
        );
        // Only what the first reading did not already leave alone.
        assert_eq!(
            second.newly_left_alone(Some(&first)),
            [("mempolicy", 7)].into()
        );
        assert_eq!(
            second.ranges_left_alone(&[(0x1000, 0x8000), (0x9000, 0x10000), (0x20000, 0x28000)]),
            [(0x9000, 0x10000), (0x20000, 0x28000)]
        );
    }
}
