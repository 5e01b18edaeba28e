//! The perf sources' ring of [`memtide_common::AccessSample`]s, drained into `memtide-core`'s
//! router on every wake-up (and on a timer, since the BPF side batches wake-ups); each target's
//! batches go to its task's channel.

use aya::maps::{MapData, RingBuf};
use memtide_host::sys::async_fd;
use tokio::{sync::mpsc, task::JoinHandle};

use crate::{
    cpu_time::CpuAccount,
    sources::{Delivery, SampleRoute, SampleRouter},
};

/// How often the ring is drained when the BPF side has not woken us (it batches wake-ups), by
/// default: the engine's default counting interval (20 ms); the daemon passes its configured
/// one. Samples count in the interval they are drained in, so a longer timer would lump a
/// lightly sampled target's samples into every second or third interval, and its reuse gaps
/// and heat would move in steps of the timer.
pub const DRAIN_INTERVAL: std::time::Duration = std::time::Duration::from_millis(20);

fn drain(ring: &mut RingBuf<MapData>, router: &mut SampleRouter) {
    while let Some(record) = ring.next() {
        router.push_record(&record);
    }
    router.flush();
}

/// Starts the task that drains `ring` into the targets `delivery` routes to, until its route
/// channel closes.
pub fn spawn(ring: RingBuf<MapData>, delivery: Delivery) -> std::io::Result<JoinHandle<()>> {
    let router = SampleRouter::new(delivery.batch, delivery.counters);
    Ok(tokio::spawn(async move {
        let drain_every = delivery.drain_every;
        if let Err(error) =
            drain_sample_ring(ring, router, delivery.routes, drain_every, &delivery.cpu).await
        {
            tracing::error!(%error, "the sample ring failed; no more samples arrive");
        }
    }))
}

/// Drains `ring` into `router` until `control` is closed, at least every `drain_every`. Returns
/// the router (with its final batches sent) so a caller can inspect it.
pub async fn run_sample_ring(
    ring: RingBuf<MapData>,
    router: SampleRouter,
    control: mpsc::UnboundedReceiver<SampleRoute>,
    drain_every: std::time::Duration,
) -> std::io::Result<SampleRouter> {
    drain_sample_ring(ring, router, control, drain_every, &CpuAccount::default()).await
}

/// [`run_sample_ring`], adding the CPU time of each drain (decode and route) to `cpu`: the
/// agent's part of what its samples cost, which the sampling budget charges.
async fn drain_sample_ring(
    ring: RingBuf<MapData>,
    mut router: SampleRouter,
    mut control: mpsc::UnboundedReceiver<SampleRoute>,
    drain_every: std::time::Duration,
    cpu: &CpuAccount,
) -> std::io::Result<SampleRouter> {
    let drain_charged = |ring: &mut RingBuf<MapData>, router: &mut SampleRouter| {
        cpu.charge(|| drain(ring, router));
    };
    let mut ring = async_fd::register_readable(ring)?;
    // The BPF side wakes us only when an eighth of the ring is full; the timer picks up the
    // rest, so a quiet target's samples wait at most one tick.
    let mut tick = tokio::time::interval(drain_every.max(std::time::Duration::from_millis(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            // Route changes first: a target added before its first samples must not miss them.
            biased;
            command = control.recv() => match command {
                Some(command) => router.apply(command),
                None => break,
            },
            guard = ring.readable_mut() => {
                let mut guard = guard?;
                drain_charged(guard.get_inner_mut(), &mut router);
                guard.clear_ready();
            }
            _ = tick.tick() => drain_charged(ring.get_mut(), &mut router),
        }
    }
    // Whatever arrived before shutdown still counts.
    drain_charged(ring.get_mut(), &mut router);
    Ok(router)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_drain_timer_is_the_default_counting_interval() {
        assert_eq!(
            super::DRAIN_INTERVAL,
            memtide_core::engine::EngineConfig::default().interval()
        );
    }
}
