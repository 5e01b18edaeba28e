//! Executing a plan: its moves as requests for concrete nodes (near the CPUs that access each
//! superpage, where there is more than one node per tier), and a bounded target's swaps
//! promoting only what their demotions freed.

use std::time::Instant;

use memtide_core::{
    policy::Plan,
    units::{Direction, PAGE_SIZE},
};
use memtide_host::exec::{
    ExecReport, KernelBackend, MoveRequest, TierNodes, pages_on_destination, requests_from_plan,
};

use super::{State, epoch::room_above_floor, homes::busiest_node};

impl State {
    /// The plan's moves as requests for concrete nodes: with more than one node per tier,
    /// each superpage's to the nodes near the CPUs that access it (`homes`).
    fn requests(&self, plan: &Plan, nodes: TierNodes) -> Vec<MoveRequest> {
        let Some(locality) = &self.spec.locality else {
            return requests_from_plan(plan, nodes);
        };
        // Read only if a superpage has no vote: thousands of threads are thousands of files.
        let fallback = || {
            self.target
                .thread_cpus()
                .ok()
                .and_then(|cpus| busiest_node(&cpus, locality))
        };
        let machine = self.spec.machine.read(&self.spec.root);
        let slow_room = self
            .spec
            .tiers
            .slow
            .iter()
            .filter_map(|&id| machine.topology.as_ref()?.node(id))
            .map(|node| {
                let room =
                    room_above_floor(node, &machine.watermarks, self.spec.exec.reserve_bytes);
                (node.id, room)
            })
            .collect();
        self.planning
            .homes
            .requests(plan, locality, fallback, slow_room)
    }

    pub(super) fn execute(&mut self, plan: &Plan, nodes: TierNodes) -> Result<ExecReport, String> {
        let requests = self.requests(plan, nodes);
        let mut backend =
            KernelBackend::new(&self.target, self.spec.root.clone()).map_err(|e| e.to_string())?;
        let Some(share) = self.planning.share.bytes else {
            return self
                .executor
                .execute(&mut backend, &requests, Instant::now())
                .map_err(|e| e.to_string());
        };
        // A bounded target's swaps promote only what their demotions really freed: a victim
        // that cannot move (a library page other processes map too) must not let the target
        // past its share.
        self.executor
            .drop_retries(self.spec.pid, Direction::Promote);
        let (demotions, promotions): (Vec<_>, Vec<_>) = requests
            .into_iter()
            .partition(|request| request.direction == Direction::Demote);
        // Nor a victim already in the slow tier (the kernel's own demotion, another agent):
        // the executor counts it as moved, and it freed nothing. Asked before the demotions,
        // for a bounded target only: the query walks the pages' tables once more. A failed
        // query (the target exiting) counts none; the demotions then report the exit.
        let already_placed = pages_on_destination(&mut backend, &demotions).unwrap_or(0);
        let mut report = self
            .executor
            .execute(&mut backend, &demotions, Instant::now())
            .map_err(|e| e.to_string())?;
        report.demote.pages_already_placed = already_placed.min(report.demote.pages_moved);
        if report.aborted.is_some() {
            return Ok(report);
        }
        let held = self.fast_held();
        let demoted = report.demote.pages_relocated() * PAGE_SIZE;
        let room = share.saturating_sub(held.saturating_sub(demoted));
        let affordable = within(promotions, room);
        if !affordable.is_empty() {
            let promoted = self
                .executor
                .execute(&mut backend, &affordable, Instant::now())
                .map_err(|e| e.to_string())?;
            report.add(&promoted);
        }
        Ok(report)
    }
}

/// The first of `promotions` that `room` bytes pay for, the last one cut to the room (in whole
/// units of its granularity).
fn within(promotions: Vec<MoveRequest>, mut room: u64) -> Vec<MoveRequest> {
    let mut affordable = Vec::with_capacity(promotions.len());
    for mut request in promotions {
        let unit = request.granularity.max(PAGE_SIZE);
        request.len = request.len.min(room / unit * unit);
        if request.len == 0 {
            continue;
        }
        room -= request.len;
        affordable.push(request);
    }
    affordable
}
