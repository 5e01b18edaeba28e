//! Which hotness sources this machine can run, best first, and why each can or cannot.
//!
//! Best first: Intel PEBS and AMD IBS (sampled data addresses from the PMU), ARM SPE, DAMON
//! (region access counts through the `damon:damon_aggregated` tracepoint) and software page
//! faults (available everywhere, coarse). Every one of them feeds the agent's eBPF → ring
//! buffer path, so each needs BPF.

use memtide_config::SourceKind;
use serde::Serialize;

use super::{
    damon::DamonStatus,
    kernel,
    pmu::{self, MemSampling, PmuScan},
};

/// Whether one source is usable here, and why (not).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SourceCheck {
    pub kind: SourceKind,
    pub usable: bool,
    pub reason: String,
}

/// What [`rank`] looks at.
#[derive(Clone, Copy, Debug)]
pub struct SourceInputs<'a> {
    pub bpf_available: bool,
    /// The kernel's release (`/proc/sys/kernel/osrelease`): IBS needs 6.1 or later.
    pub kernel: &'a str,
    pub pmus: &'a PmuScan,
    pub damon: &'a DamonStatus,
}

/// Checks every source, best first.
#[must_use]
pub fn rank(inputs: &SourceInputs<'_>) -> Vec<SourceCheck> {
    let sampling = pmu::classify(&inputs.pmus.pmus);
    let bpf = inputs.bpf_available;
    let check = |kind: SourceKind, found: Option<String>, missing: &str| {
        let refusal = match kind {
            SourceKind::Ibs => kernel::ibs_refusal(inputs.kernel),
            _ => None,
        };
        let (usable, reason) = match (found, refusal) {
            (Some(what), Some(refusal)) => (false, format!("{what}, but {refusal}")),
            (Some(what), None) if bpf => (true, what),
            (Some(what), None) => (false, format!("{what}, but BPF is not available")),
            (None, _) => (false, missing.to_owned()),
        };
        SourceCheck {
            kind,
            usable,
            reason,
        }
    };
    let find = |pred: fn(&MemSampling) -> bool| {
        sampling.iter().find(|s| pred(s)).map(MemSampling::describe)
    };
    vec![
        check(
            SourceKind::Pebs,
            find(|s| matches!(s, MemSampling::Pebs { .. })),
            "no cpu/cpu_core PMU with mem-loads",
        ),
        check(
            SourceKind::Ibs,
            find(|s| matches!(s, MemSampling::Ibs { .. })),
            "no ibs_op PMU",
        ),
        check(
            SourceKind::Spe,
            find(|s| matches!(s, MemSampling::Spe { .. })),
            "no arm_spe PMU",
        ),
        damon_check(inputs.damon, bpf),
        check(
            SourceKind::SwFault,
            inputs.pmus.get("software").map(|p| {
                format!(
                    "software page-fault events (software PMU, type {})",
                    p.perf_type
                )
            }),
            "no software PMU",
        ),
    ]
}

fn damon_check(damon: &DamonStatus, bpf: bool) -> SourceCheck {
    let mut problems = Vec::new();
    if !damon.present {
        problems.push("not present (no DAMON sysfs)".to_owned());
    } else {
        if damon.busy() {
            let pids: Vec<String> = damon.busy_pids().iter().map(u32::to_string).collect();
            let n = damon.running().count();
            problems.push(if pids.is_empty() {
                format!("busy ({n} kdamond(s) started by someone else)")
            } else {
                format!(
                    "busy (kdamond pid {} started by someone else)",
                    pids.join(", ")
                )
            });
        } else if !damon.free_for_memtide() {
            problems.push(format!(
                "{} idle kdamond(s) configured by someone else",
                damon.nr_kdamonds
            ));
        }
        if !damon.has_operations("vaddr") {
            problems.push(if damon.operations.is_empty() {
                "operations unknown, vaddr not confirmed".to_owned()
            } else {
                format!("has no vaddr (only {})", damon.operations.join(" "))
            });
        }
        if !damon.tracepoint {
            problems.push(format!(
                "no damon_aggregated tracepoint ({})",
                damon.tracepoint_detail
            ));
        }
    }
    if !bpf {
        problems.push("BPF is not available".to_owned());
    }
    if problems.is_empty() {
        SourceCheck {
            kind: SourceKind::Damon,
            usable: true,
            reason: format!(
                "DAMON vaddr with the damon_aggregated tracepoint (operations: {})",
                damon.operations.join(" ")
            ),
        }
    } else {
        SourceCheck {
            kind: SourceKind::Damon,
            usable: false,
            reason: format!("DAMON {}", problems.join(", ")),
        }
    }
}

/// The first usable source and a sentence saying why it was chosen over the better ones.
#[must_use]
pub fn select(checks: &[SourceCheck]) -> Option<(SourceKind, String)> {
    let chosen = checks.iter().position(|c| c.usable)?;
    let check = &checks[chosen];
    let skipped = &checks[..chosen];
    let hw_missing = skipped
        .iter()
        .filter(|c| matches!(c.kind, SourceKind::Pebs | SourceKind::Ibs | SourceKind::Spe))
        .all(|c| c.reason.starts_with("no "));
    let mut why: Vec<String> = Vec::new();
    if hw_missing && skipped.len() >= 3 {
        why.push("no hardware PMU".to_owned());
        why.extend(skipped[3..].iter().map(|c| c.reason.clone()));
    } else {
        why.extend(skipped.iter().map(|c| format!("{}: {}", c.kind, c.reason)));
    }
    let using = match check.kind {
        SourceKind::SwFault => "using software page faults".to_owned(),
        _ if why.is_empty() => format!("best available: {}", check.reason),
        _ => format!("using {}", check.reason),
    };
    why.push(using);
    Some((check.kind, why.join("; ")))
}
