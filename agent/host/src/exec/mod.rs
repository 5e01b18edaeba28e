//! Everything between a placement plan and the kernel.
//!
//! - [`executor`]: batched, rate-limited, watermark-guarded, verified move_pages, with huge
//!   page handling and a retry queue; kernel access behind [`executor::Backend`];
//! - [`KernelBackend`]: the real backend for one [`Target`];
//! - [`ratelimit`], [`watermark`], [`thp`]: its parts;
//! - [`launch`]: `memtide exec`'s initial placement (set_mempolicy before execve);
//! - [`pages_on_destination`]: what of a batch of moves is already done;
//! - [`coexist`]: other tiering agents and kernel features that would fight memtide;
//! - `plan` (private): the glue from the planner's `Plan` to [`MoveRequest`]s.

pub mod coexist;
pub mod executor;
mod huge;
pub mod launch;
mod placed;
mod plan;
pub mod ratelimit;
pub mod thp;
pub mod watermark;

use std::collections::BTreeMap;

pub use self::executor::{
    AbortReason, Backend, DirectionReport, ExecReport, Executor, MoveDestination, MoveRequest,
};
pub use self::huge::HugeRange;
pub use self::placed::pages_on_destination;
// The only dependency on `policy` (drop this line and `mod plan;` to build without it).
pub use self::plan::{TierNodes, requests_by_node, requests_from_plan};
use crate::{
    sys::{
        mempolicy::{self, PageStatus, Pid},
        pidfd::{self, RemoteAdvice},
    },
    sysfs::{HostRoot, SysfsError},
    targets::{Target, TargetError},
};

/// A failure of a whole executor call.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The destination node does not exist (or has no memory): nothing was moved.
    #[error("pid {pid}: NUMA node {node} does not exist or has no memory")]
    NoSuchNode { pid: u32, node: u32 },
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error(transparent)]
    Sysfs(#[from] SysfsError),
}

/// The real [`Backend`]: move_pages on a live [`Target`], free memory from sysfs, watermarks
/// from `/proc/zoneinfo`, huge pages from `PAGEMAP_SCAN` (smaps where it cannot tell), splits
/// through debugfs.
#[derive(Debug)]
pub struct KernelBackend<'a> {
    target: &'a Target,
    root: HostRoot,
    watermarks: BTreeMap<u32, watermark::NodeWatermarks>,
    splitter: thp::Splitter,
    nodes: Vec<u32>,
}

impl<'a> KernelBackend<'a> {
    /// A backend for `target` on this machine (`root` is `/` except in tests of the sysfs
    /// parts).
    pub fn new(target: &'a Target, root: HostRoot) -> Result<Self, ExecError> {
        let watermarks = watermark::read_watermarks(&root)?;
        Ok(Self {
            target,
            splitter: thp::Splitter::new(&root),
            watermarks,
            root,
            nodes: Vec::new(),
        })
    }

    fn map_error(&self, call: &'static str, error: std::io::Error, node: u32) -> ExecError {
        match error.raw_os_error() {
            Some(libc::ENODEV) => ExecError::NoSuchNode {
                pid: self.target.pid(),
                node,
            },
            _ => TargetError::syscall(self.target.pid(), call, error).into(),
        }
    }
}

impl Backend for KernelBackend<'_> {
    fn pid(&self) -> u32 {
        self.target.pid()
    }

    fn alive(&self) -> Result<(), TargetError> {
        self.target.check_alive()
    }

    fn query(&mut self, pages: &[usize], out: &mut Vec<PageStatus>) -> Result<(), TargetError> {
        self.target.with_pid(|pid| {
            mempolicy::query_pages(Pid::Other(pid), pages, out)
                .map_err(|e| TargetError::syscall(pid, "move_pages(query)", e))
        })
    }

    fn move_to(
        &mut self,
        pages: &[usize],
        to: MoveDestination,
        out: &mut Vec<PageStatus>,
    ) -> Result<usize, ExecError> {
        self.nodes.clear();
        self.nodes.resize(pages.len(), to.node);
        let pid = self.target.pid();
        self.target.check_alive()?;
        let result = mempolicy::move_pages(Pid::Other(pid), pages, &self.nodes, to.flags(), out);
        // An exit during the call makes the statuses meaningless, whatever they say.
        self.target.check_alive()?;
        result.map_err(|e| self.map_error("move_pages", e, to.node))
    }

    fn node_room(&mut self, node: u32) -> Result<Option<(u64, u64)>, ExecError> {
        let Some(free) = watermark::read_node_free(&self.root, node)? else {
            return Ok(None);
        };
        let floor = self.watermarks.get(&node).map_or(0, |w| w.high);
        Ok(Some((free, floor)))
    }

    fn huge_mappings(&mut self, ranges: &[(u64, u64)]) -> Result<Vec<HugeRange>, ExecError> {
        huge::huge_ranges(self.target, ranges)
    }

    fn split_huge(&mut self, start: u64, end: u64) -> thp::SplitOutcome {
        match self.target.check_alive() {
            Ok(()) => self.splitter.split(self.target.pid(), start, end),
            Err(e) => thp::SplitOutcome::Failed(e.to_string()),
        }
    }

    fn collapse(&mut self, start: u64, len: u64) -> Result<(), ExecError> {
        let (start, len) = (
            usize::try_from(start).unwrap_or(usize::MAX),
            usize::try_from(len).unwrap_or(0),
        );
        pidfd::process_madvise(self.target.pidfd(), &[(start, len)], RemoteAdvice::Collapse)
            .map(drop)
            .map_err(|e| TargetError::syscall(self.target.pid(), "process_madvise(COLLAPSE)", e))
            .map_err(ExecError::from)
    }
}
