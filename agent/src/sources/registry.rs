//! The one table of hotness sources: which to try ([`candidates`], from what `memtide probe`
//! ranks usable), how each kind's perf events are planned ([`perf_spec_for`]) and how each kind
//! starts ([`start`]). A new sampler is added here, beside its folder.

use memtide_config::{DamonMonitorConfig, SourceKind};
use memtide_host::{
    probe::{
        self,
        damon::{DamonStatus, OpsProbe},
        pmu::PmuScan,
    },
    sysfs::HostRoot,
};

use super::{
    HotnessSource, PerfSpecError, SourceError, SourceRequest,
    damon::DamonSource,
    ibs,
    pebs::{self, source::PebsSource},
    perf::{PerfSourceOptions, PerfSourceSpec, source::PerfSource},
    swfault,
};

/// The sources that produce individual accesses (the perf samplers), best first: what
/// `memtide record` can record.
pub const PER_ACCESS: [SourceKind; 3] = [SourceKind::Pebs, SourceKind::Ibs, SourceKind::SwFault];

/// Whether `kind`'s samples are the accesses the caches missed: PEBS (ldlat) and IBS
/// (l3missonly).
#[must_use]
pub fn past_caches(kind: SourceKind) -> bool {
    matches!(kind, SourceKind::Pebs | SourceKind::Ibs)
}

/// The sampler spec for `kind` (PEBS, IBS or software page faults), with periods chosen from
/// the CPU budget ([`choose_period`](super::perf::budget::choose_period)); every sampling
/// stream (event × CPU) gets an equal share, except that PEBS splits its loads against its
/// stores by what reaches memory
/// ([`load_store_shares`](super::perf::budget::load_store_shares)). `root` is where the PMU
/// directories live (for `cpus` files and error messages).
pub fn perf_spec_for(
    kind: SourceKind,
    scan: &PmuScan,
    root: &HostRoot,
    options: &PerfSourceOptions,
) -> Result<PerfSourceSpec, PerfSpecError> {
    if options.cpus.is_empty() {
        return Err(PerfSpecError::NoCpus);
    }
    match kind {
        SourceKind::Pebs => pebs::source_spec(scan, root, options),
        SourceKind::Ibs => ibs::source_spec(scan, root, options),
        SourceKind::SwFault => swfault::source_spec(options),
        SourceKind::Spe | SourceKind::Damon => Err(PerfSpecError::NotPerf(kind)),
    }
}

/// Sources to try, best first: the configured order, else what `memtide probe` ranks usable.
pub(super) fn candidates(request: &SourceRequest<'_>, pmus: &PmuScan) -> Vec<SourceKind> {
    let mut order = if request.config.order.is_empty() {
        let damon = DamonStatus::read(request.root, OpsProbe::ReadOnly).unwrap_or_else(|error| {
            tracing::warn!(%error, "reading DAMON's status; not using DAMON");
            DamonStatus::unreadable(&error)
        });
        // Loading BPF is what starting a source does anyway; a failure there is reported
        // with its reason and the next source is tried.
        let kernel =
            memtide_host::sysfs::read_trimmed(&request.root.path(probe::kernel::OSRELEASE))
                .unwrap_or_default();
        let checks = probe::rank(&probe::SourceInputs {
            bpf_available: true,
            kernel: &kernel,
            pmus,
            damon: &damon,
        });
        let mut order = Vec::new();
        for check in checks {
            if check.usable || (check.kind == SourceKind::Damon && !damon_ruled_out(&damon)) {
                order.push(check.kind);
            } else if check.kind == SourceKind::Damon && !request.observe_all {
                tracing::info!(
                    "not trying DAMON: {} (as `memtide probe` says)",
                    check.reason
                );
            }
        }
        order
    } else {
        request.config.order.clone()
    };
    // DAMON monitors named processes; with no targets there is nothing to give it.
    if request.observe_all {
        order.retain(|kind| *kind != SourceKind::Damon);
    }
    order
}

/// Whether what `memtide probe` found rules DAMON out for good: no DAMON, no tracepoint, or
/// operations that are known and lack `vaddr`. A busy DAMON, or operations a read-only probe
/// could not list, is still tried: the kdamond may be a killed agent's, which starting DAMON
/// removes, and starting is what finds out the operations.
fn damon_ruled_out(damon: &DamonStatus) -> bool {
    !damon.present
        || !damon.tracepoint
        || (!damon.operations.is_empty() && !damon.has_operations("vaddr"))
}

/// What starting a source needs.
#[derive(Debug)]
pub struct StartContext<'a> {
    pub root: &'a HostRoot,
    pub pmus: &'a PmuScan,
    pub perf: &'a PerfSourceOptions,
    pub damon: &'a DamonMonitorConfig,
    /// Processes to watch from the start (DAMON needs at least one to run).
    pub pids: &'a [u32],
}

/// Starts one source.
pub fn start(
    kind: SourceKind,
    context: &StartContext<'_>,
) -> Result<Box<dyn HotnessSource>, SourceError> {
    let perf_spec = || perf_spec_for(kind, context.pmus, context.root, context.perf);
    let source: Box<dyn HotnessSource> = match kind {
        SourceKind::Damon => Box::new(DamonSource::start(
            context.root,
            context.damon,
            context.pids,
        )?),
        SourceKind::Pebs => Box::new(PebsSource::start(
            &perf_spec()?,
            context.perf,
            context.pids,
        )?),
        // SPE has no events of its own yet: perf_spec_for refuses it as not a perf source.
        SourceKind::Ibs | SourceKind::SwFault | SourceKind::Spe => Box::new(PerfSource::start(
            kind,
            &perf_spec()?,
            context.perf,
            context.pids,
        )?),
    };
    Ok(source)
}

/// One source that could not be started, and why.
#[derive(Debug)]
pub struct FailedStart {
    pub kind: SourceKind,
    pub error: SourceError,
}

/// Tries `candidates` in order and returns the first that starts, with the failures before
/// it (each logged as a warning naming the source and the reason).
pub fn start_first(
    candidates: &[SourceKind],
    context: &StartContext<'_>,
) -> (Option<Box<dyn HotnessSource>>, Vec<FailedStart>) {
    let mut failed = Vec::new();
    for &kind in candidates {
        match start(kind, context) {
            Ok(source) => {
                if let Some(previous) = failed.last() {
                    let FailedStart { kind: tried, .. } = previous;
                    tracing::warn!(source = %kind, "falling back to {kind} after {tried} failed");
                }
                return (Some(source), failed);
            }
            Err(error) => {
                tracing::warn!(source = %kind, %error, "cannot start {kind}");
                failed.push(FailedStart { kind, error });
            }
        }
    }
    (None, failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn damon_is_skipped_only_when_the_probe_rules_it_out_for_good() {
        let usable = DamonStatus {
            present: true,
            nr_kdamonds: 0,
            kdamonds: Vec::new(),
            operations: vec!["vaddr".into(), "paddr".into()],
            operations_source: String::new(),
            tracepoint: true,
            tracepoint_detail: String::new(),
        };
        assert!(!damon_ruled_out(&usable));
        // Operations a read-only probe could not list: starting finds out.
        let unknown = DamonStatus {
            operations: Vec::new(),
            ..usable.clone()
        };
        assert!(!damon_ruled_out(&unknown));
        for ruled_out in [
            DamonStatus {
                present: false,
                ..usable.clone()
            },
            DamonStatus {
                tracepoint: false,
                ..usable.clone()
            },
            DamonStatus {
                operations: vec!["paddr".into()],
                ..usable
            },
        ] {
            assert!(damon_ruled_out(&ruled_out), "{ruled_out:?}");
        }
    }
}
