//! The executor and the move_pages query against real processes on this machine (any node
//! count; the single-node host is enough): where pages are, typed errors for impossible
//! moves, and clean aborts when a target exits mid-call.
mod support;

use std::time::Instant;

use memtide_config::ExecConfig;
use memtide_core::units::{Direction, PAGE_SIZE};
use memtide_host::{
    exec::{
        AbortReason, Backend, ExecError, Executor, HugeRange, KernelBackend, MoveDestination,
        MoveRequest, pages_on_destination, thp::SplitOutcome,
    },
    sys::mempolicy::{self, PageStatus, Pid},
    sysfs::HostRoot,
    targets::{
        Target, TargetError,
        placement::{self, NodeCounts},
        select::{Selection, Selector, TargetSet},
    },
    topology::Topology,
};
use support::Workload;

const PAGES: u64 = 1024;

fn touched_workload() -> Workload {
    let mut w = Workload::spawn(&["--pages", &PAGES.to_string(), "--no-thp"]);
    assert_eq!(w.command("touch"), format!("touched {PAGES}"));
    w
}

/// A node id that does not exist on this machine.
fn missing_node() -> u32 {
    let topo = Topology::read(&HostRoot::default()).expect("topology");
    topo.nodes.iter().map(|n| n.id).max().unwrap_or(0) + 1
}

#[test]
fn query_reports_every_resident_page_on_its_node() {
    if support::skip_unless_root("query_reports_every_resident_page_on_its_node") {
        return;
    }
    let mut w = touched_workload();
    let target = Target::open(&HostRoot::default(), w.pid).expect("open target");
    let statuses = placement::query_range(&target, w.base, w.size, 256).expect("query");
    assert_eq!(statuses.len() as u64, PAGES);
    let counts = NodeCounts::of(&statuses);
    assert_eq!(
        counts.resident(),
        PAGES,
        "every touched page is resident: {counts:?}"
    );
    let topo = Topology::read(&HostRoot::default()).expect("topology");
    if topo.nodes.len() == 1 {
        assert_eq!(
            counts.on(0),
            PAGES,
            "single node: all on node 0: {counts:?}"
        );
    }
    // The workload's own view (move_pages on itself) agrees page for page in total.
    let (nodes, absent) = w.where_pages(0, PAGES);
    assert_eq!(absent, 0);
    assert_eq!(nodes, counts.per_node);
    // numa_maps of the target agrees too: the buffer's mapping holds its pages on those nodes.
    let numa_maps = target.numa_maps().expect("numa_maps");
    let buffer = numa_maps
        .iter()
        .filter(|m| m.start <= w.base)
        .max_by_key(|m| m.start)
        .expect("a numa_maps line for the buffer");
    for (node, pages) in &counts.per_node {
        assert!(
            buffer.nodes.get(node).copied().unwrap_or(0) >= *pages,
            "{buffer:?}"
        );
    }
    // The maps parser finds the buffer in a migratable private anonymous mapping.
    let maps = target.maps().expect("maps");
    let mapping = maps
        .iter()
        .find(|m| m.contains(w.base))
        .expect("buffer mapping");
    assert!(
        mapping.is_migratable() && mapping.is_private_anonymous(),
        "{mapping:?}"
    );
    // An untouched page reads as not present, not as some node. (Large enough that the
    // buffer is a fresh mmap, not recycled heap.)
    let mut fresh = Workload::spawn(&["--pages", "256", "--no-thp"]);
    let fresh_target = Target::open(&HostRoot::default(), fresh.pid).expect("open");
    let statuses = placement::query_range(&fresh_target, fresh.base, fresh.size, 8).expect("query");
    assert!(statuses.iter().all(|s| s.node().is_none()), "{statuses:?}");
    assert_eq!(statuses.len(), 256);
    assert_eq!(fresh.where_pages(0, 256), (Default::default(), 256));
}

#[test]
fn pages_already_on_their_destination_are_counted_before_a_move() {
    if support::skip_unless_root("pages_already_on_their_destination_are_counted_before_a_move") {
        return;
    }
    let mut w = touched_workload();
    let target = Target::open(&HostRoot::default(), w.pid).expect("open target");
    let mut backend = KernelBackend::new(&target, HostRoot::default()).expect("backend");
    // Where the workload's pages are, by its own reading: every page asked to its node
    // counts, none asked to a node where it is not.
    let (nodes, absent) = w.where_pages(0, PAGES);
    assert_eq!(absent, 0);
    let (&node, &pages) = nodes
        .iter()
        .max_by_key(|(_, pages)| **pages)
        .expect("a node");
    let request = |to_node| MoveRequest {
        start: w.base,
        len: PAGES * PAGE_SIZE,
        to_node,
        granularity: PAGE_SIZE,
        direction: Direction::Demote,
    };
    let there = pages_on_destination(&mut backend, &[request(node)]).expect("query");
    assert_eq!(there, pages, "{nodes:?}");
    let elsewhere = pages_on_destination(&mut backend, &[request(missing_node())]).expect("query");
    assert_eq!(elsewhere, 0);
}

#[test]
fn move_to_missing_node_is_a_typed_error() {
    if support::skip_unless_root("move_to_missing_node_is_a_typed_error") {
        return;
    }
    let w = touched_workload();
    let target = Target::open(&HostRoot::default(), w.pid).expect("open target");
    let node = missing_node();
    let request = MoveRequest {
        start: w.base,
        len: 16 * PAGE_SIZE,
        to_node: node,
        granularity: PAGE_SIZE,
        direction: Direction::Demote,
    };
    let mut backend = KernelBackend::new(&target, HostRoot::default()).expect("backend");
    let mut executor = Executor::new(ExecConfig::default());
    let err = executor
        .execute(&mut backend, &[request], Instant::now())
        .expect_err("a move to a node that does not exist must fail");
    assert!(
        matches!(err, ExecError::NoSuchNode { pid, node: n } if pid == w.pid && n == node),
        "{err}"
    );
    assert!(err.to_string().contains(&format!("node {node}")), "{err}");
    // The kernel's own answer, when asked anyway, maps to the same error.
    let mut status = Vec::new();
    let err = backend
        .move_to(
            &[w.base as usize],
            MoveDestination {
                node,
                move_shared: false,
            },
            &mut status,
        )
        .expect_err("kernel refuses");
    assert!(matches!(err, ExecError::NoSuchNode { .. }), "{err}");
    let raw = mempolicy::move_pages(
        Pid::Other(w.pid),
        &[w.base as usize],
        &[node],
        0,
        &mut status,
    )
    .expect_err("kernel refuses");
    assert_eq!(raw.raw_os_error(), Some(libc::ENODEV), "{raw}");
}

/// The real backend, but the target is killed (and reaped) right after the first move call.
struct KillAfterFirstMove<'a> {
    inner: KernelBackend<'a>,
    workload: &'a mut Workload,
    calls: usize,
}

impl Backend for KillAfterFirstMove<'_> {
    fn pid(&self) -> u32 {
        self.inner.pid()
    }
    fn alive(&self) -> Result<(), TargetError> {
        self.inner.alive()
    }
    fn query(&mut self, pages: &[usize], out: &mut Vec<PageStatus>) -> Result<(), TargetError> {
        self.inner.query(pages, out)
    }
    fn move_to(
        &mut self,
        pages: &[usize],
        to: MoveDestination,
        out: &mut Vec<PageStatus>,
    ) -> Result<usize, ExecError> {
        let result = self.inner.move_to(pages, to, out);
        self.calls += 1;
        if self.calls == 1 {
            self.workload.kill();
        }
        result
    }
    fn node_room(&mut self, node: u32) -> Result<Option<(u64, u64)>, ExecError> {
        self.inner.node_room(node)
    }
    fn huge_mappings(&mut self, ranges: &[(u64, u64)]) -> Result<Vec<HugeRange>, ExecError> {
        self.inner.huge_mappings(ranges)
    }
    fn split_huge(&mut self, start: u64, end: u64) -> SplitOutcome {
        self.inner.split_huge(start, end)
    }
    fn collapse(&mut self, start: u64, len: u64) -> Result<(), ExecError> {
        self.inner.collapse(start, len)
    }
}

#[test]
fn target_exit_mid_batch_aborts_cleanly() {
    if support::skip_unless_root("target_exit_mid_batch_aborts_cleanly") {
        return;
    }
    let mut w = touched_workload();
    let (pid, base) = (w.pid, w.base);
    let target = Target::open(&HostRoot::default(), pid).expect("open target");
    let inner = KernelBackend::new(&target, HostRoot::default()).expect("backend");
    let mut backend = KillAfterFirstMove {
        inner,
        workload: &mut w,
        calls: 0,
    };
    // Node 0 always exists; the pages are already there, so each call is cheap but real.
    let request = MoveRequest {
        start: base,
        len: PAGES * PAGE_SIZE,
        to_node: 0,
        granularity: PAGE_SIZE,
        direction: Direction::Promote,
    };
    let mut executor = Executor::new(ExecConfig {
        batch_pages: 64,
        ..ExecConfig::default()
    });
    let report = executor
        .execute(&mut backend, &[request], Instant::now())
        .expect("an exit is a counted outcome, not an error");
    assert_eq!(
        report.aborted,
        Some(AbortReason::TargetExited),
        "{report:?}"
    );
    assert_eq!(backend.calls, 1, "no move_pages call after the exit");
    assert_eq!(report.total().pages_attempted, 64);
    assert_eq!(report.total().aborted_pages, PAGES - 64, "{report:?}");
    assert_eq!(executor.pending_retries(pid), 0);
    // The pidfd keeps saying so, whatever process gets the pid next.
    assert!(target.exited().expect("poll pidfd"));
    assert!(matches!(
        placement::query_range(&target, base, PAGE_SIZE, 1),
        Err(TargetError::Exited { .. })
    ));
}

#[test]
fn target_set_follows_a_pid_until_it_exits() {
    if support::skip_unless_root("target_set_follows_a_pid_until_it_exits") {
        return;
    }
    let mut w = touched_workload();
    let selection = Selection {
        include: vec![Selector::Pid(w.pid), Selector::Pid(std::process::id())],
        ..Selection::default()
    };
    let mut set = TargetSet::new();
    let changes = set
        .refresh(&HostRoot::default(), &selection)
        .expect("refresh");
    assert_eq!(changes.added, vec![w.pid], "self is never a target");
    assert_eq!(
        set.get(w.pid).map(|t| t.stat().comm.as_str()),
        Some("memtide-workloa")
    );
    w.kill();
    let changes = set
        .refresh(&HostRoot::default(), &selection)
        .expect("refresh");
    assert_eq!(changes.removed, vec![w.pid]);
    assert!(set.is_empty());
}
