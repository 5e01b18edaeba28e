//! DAMON's regions, from the tracepoint's ring to the targets: each region is reported by DAMON
//! target index, mapped to the process monitored at that index, and handed to that process's
//! target as [`DamonObservation`]s, one batch per process per wake-up.

use std::{
    collections::{BTreeMap, HashMap},
    sync::atomic::Ordering,
};

use aya::maps::{MapData, RingBuf};
use memtide_common::DamonRegion;
use memtide_core::{
    engine::DamonObservation,
    ingest::{IngestCounters, RouteCommand, Undelivered},
};
use memtide_host::sys::async_fd;
use tokio::{sync::watch, task::JoinHandle};

use crate::sources::{Delivery, TargetChannel, TargetInput};

/// Where a process's regions go.
#[derive(Debug, Default)]
struct Routes {
    by_pid: HashMap<u32, TargetChannel>,
}

impl Routes {
    fn apply(&mut self, command: RouteCommand<TargetChannel>) {
        match command {
            RouteCommand::Add { pid, sender } => {
                self.by_pid.insert(pid, sender);
            }
            RouteCommand::Remove { pid } => {
                self.by_pid.remove(&pid);
            }
            // DAMON monitors named processes only: there is no "everyone else".
            RouteCommand::SetDefault { .. } => {}
        }
    }
}

/// Starts the task that drains the region ring into the targets `delivery` routes to, until its
/// route channel closes. `targets` holds the monitored pids by DAMON target index.
pub fn spawn(
    ring: RingBuf<MapData>,
    targets: watch::Receiver<Vec<u32>>,
    max_nr_accesses: u32,
    delivery: Delivery,
) -> std::io::Result<JoinHandle<()>> {
    let ring = async_fd::register_readable(ring)?;
    Ok(tokio::spawn(async move {
        let Delivery {
            mut routes,
            counters,
            ..
        } = delivery;
        let mut table = Routes::default();
        let mut ring = ring;
        loop {
            tokio::select! {
                // Route changes first: a target added before its first regions must not miss them.
                biased;
                command = routes.recv() => match command {
                    Some(command) => table.apply(command),
                    None => break,
                },
                guard = ring.readable_mut() => {
                    let mut guard = match guard {
                        Ok(guard) => guard,
                        Err(error) => {
                            tracing::error!(%error, "the DAMON region ring failed; no more regions arrive");
                            break;
                        }
                    };
                    let regions = drain(guard.get_inner_mut(), &counters);
                    guard.clear_ready();
                    let by_pid = attribute(&regions, &targets.borrow(), max_nr_accesses);
                    deliver(by_pid, &table, &counters);
                }
            }
        }
    }))
}

/// Every record in the ring; short ones are counted as malformed.
fn drain(ring: &mut RingBuf<MapData>, counters: &IngestCounters) -> Vec<DamonRegion> {
    let mut regions = Vec::new();
    let mut malformed = 0;
    while let Some(record) = ring.next() {
        match DamonRegion::from_ne_bytes(&record) {
            Some(region) => regions.push(region),
            None => malformed += 1,
        }
    }
    counters.malformed.fetch_add(malformed, Ordering::Relaxed);
    counters
        .decoded
        .fetch_add(regions.len() as u64, Ordering::Relaxed);
    regions
}

/// The regions of each monitored process, as the engine takes them. Regions of a target index
/// no longer monitored are left out.
fn attribute(
    regions: &[DamonRegion],
    targets: &[u32],
    max_nr_accesses: u32,
) -> BTreeMap<Option<u32>, Vec<DamonObservation>> {
    let mut by_pid: BTreeMap<Option<u32>, Vec<DamonObservation>> = BTreeMap::new();
    for region in regions {
        let pid = usize::try_from(region.target)
            .ok()
            .and_then(|index| targets.get(index).copied());
        by_pid.entry(pid).or_default().push(DamonObservation {
            start: region.start,
            end: region.end,
            nr_accesses: region.nr_accesses,
            max_nr_accesses,
            age: region.age,
        });
    }
    by_pid
}

/// Hands each process's regions to its target; counts what was delivered, dropped (a full or
/// closed channel) or had no target.
fn deliver(
    by_pid: BTreeMap<Option<u32>, Vec<DamonObservation>>,
    routes: &Routes,
    counters: &IngestCounters,
) {
    for (pid, observations) in by_pid {
        let n = observations.len() as u64;
        let Some(channel) = pid.and_then(|pid| routes.by_pid.get(&pid)) else {
            counters.unrouted.fetch_add(n, Ordering::Relaxed);
            continue;
        };
        match channel.try_send(TargetInput::Regions(observations)) {
            Ok(()) => counters.delivered.fetch_add(n, Ordering::Relaxed),
            Err(Undelivered::Full | Undelivered::Closed) => counters
                .dropped_channel_full
                .fetch_add(n, Ordering::Relaxed),
        };
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::mpsc;

    use super::*;

    fn region(target: u64, start: u64, nr_accesses: u32) -> DamonRegion {
        DamonRegion {
            target,
            start,
            end: start + 0x10_0000,
            nr_accesses,
            age: 3,
            nr_regions: 3,
            _pad: 0,
        }
    }

    #[test]
    fn regions_reach_the_process_monitored_at_their_index() {
        let counters = IngestCounters::default();
        let (tx_a, mut rx_a) = mpsc::channel(4);
        let (tx_b, _rx_b) = mpsc::channel(1);
        let mut routes = Routes::default();
        routes.apply(RouteCommand::Add {
            pid: 10,
            sender: TargetChannel(tx_a),
        });
        routes.apply(RouteCommand::Add {
            pid: 20,
            sender: TargetChannel(tx_b.clone()),
        });
        // Index 0 is pid 10, index 1 pid 20, index 7 nobody; pid 20's channel is already full.
        tx_b.try_send(TargetInput::Samples(Vec::new())).unwrap();
        let regions = [
            region(0, 0x1000_0000, 5),
            region(1, 0x2000_0000, 1),
            region(7, 0, 2),
        ];
        let by_pid = attribute(&regions, &[10, 20], 20);
        deliver(by_pid, &routes, &counters);
        let Ok(TargetInput::Regions(got)) = rx_a.try_recv() else {
            panic!("no regions for pid 10");
        };
        assert_eq!(
            got,
            [DamonObservation {
                start: 0x1000_0000,
                end: 0x1010_0000,
                nr_accesses: 5,
                max_nr_accesses: 20,
                age: 3,
            }]
        );
        let load = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
        assert_eq!(load(&counters.delivered), 1);
        assert_eq!(load(&counters.dropped_channel_full), 1);
        assert_eq!(load(&counters.unrouted), 1);
        routes.apply(RouteCommand::Remove { pid: 10 });
        deliver(attribute(&regions[..1], &[10], 20), &routes, &counters);
        assert_eq!(
            load(&counters.unrouted),
            2,
            "a removed route no longer delivers"
        );
    }
}
