//! The BPF object built from `ebpf/` and embedded in the binary, and the loader around it.
//!
//! The object holds the sampler (`perf_event`) programs and the DAMON tracepoint program; see
//! `ebpf/src/main.rs`. Loading it needs CAP_BPF (plus CAP_PERFMON to attach to perf events).

use std::{io, os::fd::OwnedFd, time::Duration};

use aya::{
    Ebpf, EbpfError, EbpfLoader,
    programs::{PerfEvent, Program, ProgramError},
};
use memtide_common::names;

/// The BPF object, or an empty slice when the agent was built with `AYA_BUILD_SKIP=1`.
pub static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/memtide"));

/// Why the BPF object could not be used.
#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    #[error(
        "this memtide was built without its BPF object (AYA_BUILD_SKIP); rebuild with the BPF \
         tool chain: scripts/bootstrap.sh host && cargo build"
    )]
    NotBuilt,
    #[error(
        "the kernel refused to load memtide's BPF object: permission denied; run as root or \
         grant CAP_BPF and CAP_PERFMON ({0})"
    )]
    PermissionDenied(#[source] EbpfError),
    #[error("loading memtide's BPF object failed: {0}")]
    Load(#[source] EbpfError),
    #[error("program {name} in memtide's BPF object: {source}")]
    Program {
        name: &'static str,
        #[source]
        source: ProgramError,
    },
    #[error("program {0} is missing from memtide's BPF object (stale build?)")]
    MissingProgram(&'static str),
    #[error("BPF map {name}: {source}")]
    Map {
        name: &'static str,
        #[source]
        source: aya::maps::MapError,
    },
}

impl BpfError {
    /// True when the failure is about privileges rather than about the kernel or the object.
    #[must_use]
    pub fn is_permission(&self) -> bool {
        match self {
            Self::PermissionDenied(_) => true,
            Self::Program { source, .. } => is_eperm_program(source),
            _ => false,
        }
    }
}

fn is_eperm_program(error: &ProgramError) -> bool {
    match error {
        ProgramError::LoadError { io_error, .. } => {
            matches!(io_error.kind(), io::ErrorKind::PermissionDenied)
        }
        ProgramError::SyscallError(syscall) => {
            matches!(syscall.io_error.kind(), io::ErrorKind::PermissionDenied)
        }
        _ => false,
    }
}

fn is_eperm_load(error: &EbpfError) -> bool {
    match error {
        EbpfError::MapError(aya::maps::MapError::CreateError { io_error, .. }) => {
            io_error.kind() == io::ErrorKind::PermissionDenied
        }
        _ => error.to_string().contains("Operation not permitted"),
    }
}

/// Creates the object's maps in the kernel with `loader`'s settings. Programs are loaded
/// separately by the source that needs them.
pub fn load_object(loader: &mut EbpfLoader<'_>) -> Result<Ebpf, BpfError> {
    if OBJECT.is_empty() {
        return Err(BpfError::NotBuilt);
    }
    loader.load(OBJECT).map_err(|error| {
        if is_eperm_load(&error) {
            BpfError::PermissionDenied(error)
        } else {
            BpfError::Load(error)
        }
    })
}

/// Program `name` of `ebpf` as the program type `P`, loaded into the kernel by `load` (that
/// type's `load`).
pub fn load_program<'a, P>(
    ebpf: &'a mut Ebpf,
    name: &'static str,
    load: impl FnOnce(&mut P) -> Result<(), ProgramError>,
) -> Result<&'a mut P, BpfError>
where
    &'a mut P: TryFrom<&'a mut Program, Error = ProgramError>,
{
    let program: &mut P = ebpf
        .program_mut(name)
        .ok_or(BpfError::MissingProgram(name))?
        .try_into()
        .map_err(|source| BpfError::Program { name, source })?;
    load(program).map_err(|source| BpfError::Program { name, source })?;
    Ok(program)
}

/// Loads the sampler program into the kernel and unloads it again: the answer to "can this
/// kernel and these privileges run memtide's BPF side?". Nothing is attached.
pub fn probe_load() -> Result<String, BpfError> {
    let mut ebpf = load_object(&mut EbpfLoader::new())?;
    let name = names::PROG_SAMPLE_ANY;
    load_program(&mut ebpf, name, PerfEvent::load)?;
    Ok(format!(
        "loaded perf_event program {name} from the embedded object ({} bytes) and unloaded it",
        OBJECT.len()
    ))
}

/// Takes map `name` out of the loaded object as a typed map (`RingBuf`, `HashMap`, ...).
pub fn take_map<M>(ebpf: &mut Ebpf, name: &'static str) -> Result<M, BpfError>
where
    M: TryFrom<aya::maps::Map, Error = aya::maps::MapError>,
{
    let map = ebpf.take_map(name).ok_or(BpfError::Map {
        name,
        source: aya::maps::MapError::InvalidName {
            name: name.to_owned(),
        },
    })?;
    M::try_from(map).map_err(|source| BpfError::Map { name, source })
}

/// Kernel-measured cost of one loaded program (needs [`enable_run_time_stats`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgramStats {
    pub name: String,
    /// Total time the kernel spent running the program.
    pub run_time: Duration,
    /// Number of times it ran.
    pub run_count: u64,
}

/// Turns on the kernel's BPF run-time accounting (`BPF_ENABLE_STATS`) for as long as the
/// returned fd is open. It costs two clock reads per program run, so it is kept on only
/// while someone asks for the figures (the metrics layer, the live benchmark).
pub fn enable_run_time_stats() -> Result<OwnedFd, io::Error> {
    aya::sys::enable_stats(aya::sys::Stats::RunTime).map_err(|error| error.io_error)
}

/// Run time and count of every loaded program of `ebpf`, as the kernel reports them.
#[must_use]
pub fn program_stats(ebpf: &Ebpf) -> Vec<ProgramStats> {
    ebpf.programs()
        .filter_map(|(name, program)| {
            let info = program.info().ok()?;
            Some(ProgramStats {
                name: name.to_owned(),
                run_time: info.run_time(),
                run_count: info.run_count(),
            })
        })
        .collect()
}
