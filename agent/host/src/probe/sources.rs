//! Which hotness sources this machine can run, best first, and why each can or cannot.
//!
//! Best first: Intel PEBS and AMD IBS (sampled data addresses from the PMU), ARM SPE, DAMON
//! (region access counts through the `damon:damon_aggregated` tracepoint) and software page
//! faults (available everywhere, coarse). Every one of them feeds the agent's eBPF → ring
//! buffer path, so each needs BPF.
//!
//! Memory-sampling capability ([`classify`]):
//! - Intel PEBS: a `cpu` (or hybrid `cpu_core`) PMU with `events/mem-loads` (load latency; the
//!   `ldlat` format field is `config1:0-15`). `mem-stores` is optional. On Sapphire/Emerald Rapids
//!   `events/mem-loads-aux` exists and must lead the group (`{mem-loads-aux,mem-loads}`).
//! - AMD IBS: an `ibs_op` PMU (dynamic `type`). Zen 4+ adds the `l3missonly` format field.
//! - ARM SPE: `arm_spe_N` PMUs.
//!
//! A new sampler is recognised here: its PMU in [`classify`], its check in [`rank`].

use memtide_config::SourceKind;
use serde::Serialize;

use super::{
    damon::DamonStatus,
    kernel,
    pmu::{Pmu, PmuScan},
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
    let sampling = classify(&inputs.pmus.pmus);
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

/// A memory-sampling facility found among the PMUs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum MemSampling {
    /// Intel PEBS load latency (and stores) on a core PMU.
    Pebs {
        pmu: String,
        perf_type: u32,
        /// `events/mem-loads`, for example `event=0xcd,umask=0x1,ldlat=3`.
        mem_loads: String,
        /// `events/mem-stores` exists.
        mem_stores: bool,
        /// `events/mem-loads-aux` exists (Sapphire Rapids+): it must lead the sampling group.
        needs_aux_leader: bool,
        /// The `ldlat` format field (`config1:0-15`), if present.
        ldlat: Option<String>,
    },
    /// AMD IBS op sampling.
    Ibs {
        perf_type: u32,
        /// Zen 4+: `format/l3missonly` (sample only L3 misses).
        l3missonly: bool,
        /// All format fields, `name=spec`.
        formats: Vec<String>,
    },
    /// ARM Statistical Profiling Extension.
    Spe { pmu: String, perf_type: u32 },
}

impl MemSampling {
    /// One line for humans.
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            Self::Pebs {
                pmu,
                perf_type,
                mem_loads,
                mem_stores,
                needs_aux_leader,
                ..
            } => {
                let mut s =
                    format!("Intel PEBS on {pmu} (type {perf_type}): mem-loads {mem_loads}");
                if *mem_stores {
                    s.push_str(", mem-stores");
                }
                if *needs_aux_leader {
                    s.push_str(", needs mem-loads-aux group leader");
                }
                s
            }
            Self::Ibs {
                perf_type,
                l3missonly,
                ..
            } => format!(
                "AMD IBS op (type {perf_type}){}",
                if *l3missonly {
                    ", l3missonly filter"
                } else {
                    ""
                }
            ),
            Self::Spe { pmu, perf_type } => format!("ARM SPE {pmu} (type {perf_type})"),
        }
    }
}

/// The memory-sampling facilities among `pmus`, best first (PEBS, IBS, SPE). `cpu_core` is
/// preferred over `cpu` only when `cpu` lacks `mem-loads` (hybrid parts have no `cpu` PMU).
#[must_use]
pub fn classify(pmus: &[Pmu]) -> Vec<MemSampling> {
    let mut found = Vec::new();
    let core = ["cpu", "cpu_core"]
        .iter()
        .filter_map(|name| pmus.iter().find(|p| p.name == *name))
        .find(|p| p.has_event("mem-loads"));
    if let Some(pmu) = core {
        found.push(MemSampling::Pebs {
            pmu: pmu.name.clone(),
            perf_type: pmu.perf_type,
            mem_loads: pmu.events["mem-loads"].to_string(),
            mem_stores: pmu.has_event("mem-stores"),
            needs_aux_leader: pmu.has_event("mem-loads-aux"),
            ldlat: pmu.formats.get("ldlat").map(ToString::to_string),
        });
    }
    if let Some(pmu) = pmus.iter().find(|p| p.name == "ibs_op") {
        found.push(MemSampling::Ibs {
            perf_type: pmu.perf_type,
            l3missonly: pmu.has_format("l3missonly"),
            formats: pmu
                .formats
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect(),
        });
    }
    for pmu in pmus.iter().filter(|p| p.name.starts_with("arm_spe_")) {
        found.push(MemSampling::Spe {
            pmu: pmu.name.clone(),
            perf_type: pmu.perf_type,
        });
    }
    found
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
