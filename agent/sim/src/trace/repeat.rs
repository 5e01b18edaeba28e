//! A trace replayed several times back to back: a long steady state. At the sample density the
//! agent runs at in production, one pass of a trace of a few million records yields a few
//! hundred samples, while a server runs the same work for hours; repeating the trace lets its
//! hot set be sampled as many times as a longer run would sample it. What it models and what not
//! (docs/evaluation.md, "Long steady states"): the same addresses every pass, so a pass's hot set
//! is the next one's; first touch places memory once, in the first pass; every pass repeats the
//! program's start-up too, which a server would not.

use std::{sync::Arc, time::Duration};

use super::{RecordSource, TraceError, TraceMeta, TraceRecord, TraceSpec};

/// `inner` replayed `passes` times (at least once).
#[derive(Clone)]
pub struct Repeated {
    pub inner: Arc<dyn TraceSpec>,
    pub passes: u32,
}

impl TraceSpec for Repeated {
    fn name(&self) -> String {
        let name = self.inner.name();
        if self.passes > 1 {
            format!("{name}×{}", self.passes)
        } else {
            name
        }
    }

    fn repetition(&self) -> Option<(&dyn TraceSpec, u32)> {
        Some((&*self.inner, self.passes.max(1)))
    }

    fn open(&self) -> Result<Box<dyn RecordSource>, TraceError> {
        let current = self.inner.open()?;
        let meta = current.meta().clone();
        Ok(Box::new(RepeatedSource {
            inner: Arc::clone(&self.inner),
            current,
            meta,
            passes_left: self.passes.max(1) - 1,
            skipped_before: 0,
            clock_before: Duration::ZERO,
        }))
    }
}

struct RepeatedSource {
    inner: Arc<dyn TraceSpec>,
    current: Box<dyn RecordSource>,
    meta: TraceMeta,
    /// Passes still to open after the current one.
    passes_left: u32,
    /// Lines the finished passes skipped.
    skipped_before: u64,
    /// The time the finished passes took (a recording's passes follow each other in time).
    clock_before: Duration,
}

impl RecordSource for RepeatedSource {
    fn meta(&self) -> &TraceMeta {
        &self.meta
    }

    fn fill(&mut self, out: &mut Vec<TraceRecord>, max: usize) -> Result<usize, TraceError> {
        loop {
            let n = self.current.fill(out, max)?;
            if n > 0 || self.passes_left == 0 {
                return Ok(n);
            }
            self.skipped_before += self.current.skipped();
            self.clock_before += self.current.clock().unwrap_or_default();
            self.current = self.inner.open()?;
            self.passes_left -= 1;
        }
    }

    fn skipped(&self) -> u64 {
        self.skipped_before + self.current.skipped()
    }

    fn clock(&self) -> Option<Duration> {
        self.current.clock().map(|at| self.clock_before + at)
    }
}

/// A repeated trace with its repetition hidden: read and replayed pass by pass, record by
/// record, what the shortcuts for repeated traces (counting two passes, fast-forwarding the
/// rest) are tested against.
#[cfg(test)]
pub(crate) struct InFull(pub(crate) Repeated);

#[cfg(test)]
impl TraceSpec for InFull {
    fn name(&self) -> String {
        self.0.name()
    }

    fn open(&self) -> Result<Box<dyn RecordSource>, TraceError> {
        self.0.open()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{GenSpec, Workload};

    fn records(spec: &dyn TraceSpec) -> Vec<u64> {
        let mut src = spec.open().unwrap();
        let mut out = Vec::new();
        while src.fill(&mut out, 1000).unwrap() > 0 {}
        out.iter().map(|r| r.addr).collect()
    }

    #[test]
    fn passes_follow_each_other_record_for_record() {
        let one: Arc<dyn TraceSpec> = Arc::new(GenSpec {
            workload: Workload::ZipfKv,
            footprint: 64 << 20,
            records: 2500,
            seed: 7,
        });
        let once = records(&*one);
        assert_eq!(once.len(), 2500);
        let thrice = Repeated {
            inner: Arc::clone(&one),
            passes: 3,
        };
        assert_eq!(records(&thrice), once.repeat(3));
        assert_eq!(thrice.name(), format!("{}×3", one.name()));
        let single = Repeated {
            inner: Arc::clone(&one),
            passes: 0,
        };
        assert_eq!(records(&single), once, "0 passes replays once");
        assert_eq!(single.name(), one.name());
    }
}
