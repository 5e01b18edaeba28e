//! The replay's last-level cache: which records of a trace of every access reach memory.

use super::BATCH;
use crate::{
    sampler::LineFilter,
    trace::{TraceMeta, TraceRecord},
};

/// The last-level cache between a program and its memory, for traces whose records include
/// the accesses the caches serve (lackey's): only what misses it reaches a tier, costs a
/// tier's latency and advances the policies' clock (whose pace,
/// [`super::SimConfig::access_pace_ns`], is the time a program spends per memory access, compute
/// and cache hits included). The model is the samplers'
/// 32 MiB L3 ([`LineFilter`]), in record units. Page-table policies still see every record
/// (an access sets the accessed bit whether or not its line was cached); the `ideal` sampler
/// and the bound see the misses.
pub(super) struct Llc {
    filter: Option<LineFilter>,
    /// The batch's records that reached memory, when some did not.
    reached: Vec<bool>,
    memory: Vec<TraceRecord>,
}

/// Which records of one batch reached memory.
pub(super) enum Reached<'a> {
    All,
    Some {
        reached: &'a [bool],
        memory: &'a [TraceRecord],
    },
}

impl Llc {
    pub(super) fn new(meta: &TraceMeta) -> Self {
        Self {
            filter: LineFilter::l3(meta),
            reached: Vec::with_capacity(BATCH),
            memory: Vec::with_capacity(BATCH),
        }
    }

    pub(super) fn filter(&mut self, batch: &[TraceRecord]) -> Reached<'_> {
        let Some(filter) = self.filter.as_mut() else {
            return Reached::All;
        };
        self.reached.clear();
        self.memory.clear();
        for r in batch {
            let miss = filter.passes(r.addr);
            self.reached.push(miss);
            if miss {
                self.memory.push(*r);
            }
        }
        Reached::Some {
            reached: &self.reached,
            memory: &self.memory,
        }
    }
}

impl Reached<'_> {
    pub(super) fn reached(&self, i: usize) -> bool {
        match self {
            Self::All => true,
            Self::Some { reached, .. } => reached[i],
        }
    }

    /// The batch's records that reached memory.
    pub(super) fn records<'b>(&'b self, batch: &'b [TraceRecord]) -> &'b [TraceRecord] {
        match self {
            Self::All => batch,
            Self::Some { memory, .. } => memory,
        }
    }
}
