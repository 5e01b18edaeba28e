//! Records exchanged between memtide's BPF programs and its user-space agent.
//!
//! Every type here is `#[repr(C)]`, `Copy`, has explicit padding and a compile-time size
//! assertion, because the BPF side writes them byte for byte into ring buffers and maps and
//! the agent reads them back with `read_unaligned`. Changing a layout is a wire-format change:
//! bump [`RECORD_VERSION`].
#![no_std]

/// Version of the record layouts below; the agent refuses a BPF object built for another.
pub const RECORD_VERSION: u32 = 1;

/// A one-byte enum on the wire: `#[repr(u8)]` with the listed values, and `decode`, which
/// gives the variant of a byte or `None` for a value this build does not know.
macro_rules! wire_enum {
    ($(#[$meta:meta])* $vis:vis enum $name:ident {
        $($(#[$variant_meta:meta])* $variant:ident = $value:literal,)+
    }) => {
        $(#[$meta])*
        #[repr(u8)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis enum $name {
            $($(#[$variant_meta])* $variant = $value,)+
        }

        impl $name {
            /// The variant a wire byte stands for.
            #[must_use]
            pub const fn decode(value: u8) -> Option<Self> {
                match value {
                    $($value => Some(Self::$variant),)+
                    _ => None,
                }
            }
        }
    };
}

wire_enum! {
    /// What kind of memory access a sample stands for.
    pub enum AccessKind {
        /// The source cannot tell loads from stores (page faults, DAMON).
        Unknown = 0,
        Load = 1,
        Store = 2,
    }
}

impl AccessKind {
    /// Decodes the wire byte; unknown values map to [`AccessKind::Unknown`].
    #[must_use]
    pub const fn from_u8(value: u8) -> Self {
        match Self::decode(value) {
            Some(kind) => kind,
            None => Self::Unknown,
        }
    }
}

wire_enum! {
    /// Which sampling mechanism produced a sample.
    pub enum SampleSource {
        /// Software page-fault event (`PERF_COUNT_SW_PAGE_FAULTS`), available everywhere.
        SwFault = 0,
        /// Intel PEBS (`mem-loads` / `mem-stores` on the `cpu` or `cpu_core` PMU).
        Pebs = 1,
        /// AMD IBS op sampling (`ibs_op` PMU).
        Ibs = 2,
        /// Arm SPE (`arm_spe_*` PMU).
        Spe = 3,
    }
}

impl SampleSource {
    /// Decodes the wire byte; `None` for a source this build does not know.
    #[must_use]
    pub const fn from_u8(value: u8) -> Option<Self> {
        Self::decode(value)
    }
}

/// One sampled memory access, written by the `perf_event` program into the samples ring.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccessSample {
    /// Virtual data address of the access (the faulting address for page-fault samples).
    pub addr: u64,
    /// Load latency in cycles where the PMU reports it, else the sample period.
    pub weight: u64,
    /// Thread-group id (the process id user space sees).
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// CPU the sample was taken on.
    pub cpu: u32,
    /// [`AccessKind`] as a byte.
    pub kind: u8,
    /// [`SampleSource`] as a byte.
    pub source: u8,
    pub _pad: [u8; 2],
}
const _: () = assert!(size_of::<AccessSample>() == 32);

/// Reads a native-endian integer of `N` bytes at `at`; the caller checked the length.
fn ne<const N: usize>(bytes: &[u8], at: usize) -> [u8; N] {
    let mut out = [0; N];
    out.copy_from_slice(&bytes[at..at + N]);
    out
}

/// `SIZE`, `from_ne_bytes` and `to_ne_bytes` of a record the BPF side writes byte for byte:
/// each listed field, of the integer type given, at its `#[repr(C)]` offset in native endian.
/// The padding `_pad` is left out of the list: it decodes as zero and encodes as zero.
macro_rules! wire_codec {
    ($record:ty { $($field:ident: $int:ty),+ $(,)? }) => {
        impl $record {
            /// Size of the record on the wire.
            pub const SIZE: usize = size_of::<Self>();

            /// Decodes a record as the BPF program wrote it (native endian, `#[repr(C)]`
            /// layout). Returns `None` for a short record instead of reading past it.
            #[must_use]
            pub fn from_ne_bytes(bytes: &[u8]) -> Option<Self> {
                if bytes.len() < Self::SIZE {
                    return None;
                }
                Some(Self {
                    $(
                        $field: <$int>::from_ne_bytes(
                            ne(bytes, core::mem::offset_of!(Self, $field)),
                        ),
                    )+
                    _pad: Default::default(),
                })
            }

            /// Encodes the record exactly as the BPF program lays it out (tests, benches,
            /// traces).
            #[must_use]
            pub fn to_ne_bytes(&self) -> [u8; Self::SIZE] {
                let mut out = [0; Self::SIZE];
                $(
                    let at = core::mem::offset_of!(Self, $field);
                    out[at..at + size_of::<$int>()].copy_from_slice(&self.$field.to_ne_bytes());
                )+
                out
            }
        }
    };
}

wire_codec!(AccessSample {
    addr: u64,
    weight: u64,
    pid: u32,
    tid: u32,
    cpu: u32,
    kind: u8,
    source: u8,
});

/// One DAMON region at the end of an aggregation interval, forwarded from the
/// `damon:damon_aggregated` tracepoint.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DamonRegion {
    /// Index of the target inside the DAMON context (not a pid: the agent maps it back).
    pub target: u64,
    pub start: u64,
    pub end: u64,
    /// Number of sampling intervals (of one aggregation interval) the region was seen accessed.
    pub nr_accesses: u32,
    /// Number of aggregation intervals the region kept its access pattern.
    pub age: u32,
    /// Number of regions of this target in this aggregation.
    pub nr_regions: u32,
    pub _pad: u32,
}
const _: () = assert!(size_of::<DamonRegion>() == 40);

wire_codec!(DamonRegion {
    target: u64,
    start: u64,
    end: u64,
    nr_accesses: u32,
    age: u32,
    nr_regions: u32,
});

/// Byte offsets of the `damon:damon_aggregated` fields inside the tracepoint record. They are
/// read from tracefs' `format` file at start-up and handed to the BPF program as a global,
/// because the layout is not stable across kernels.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DamonFieldOffsets {
    pub target_id: u32,
    pub nr_regions: u32,
    pub start: u32,
    pub end: u32,
    pub nr_accesses: u32,
    pub age: u32,
}
const _: () = assert!(size_of::<DamonFieldOffsets>() == 24);

/// Configuration of the sampler program, set as a global at load time.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SamplerConfig {
    /// [`SampleSource`] byte stamped on every sample.
    pub source: u8,
    /// When 1, only processes in the `TARGETS` map are sampled; when 0 every process is.
    pub filter_by_target: u8,
    pub _pad: [u8; 2],
    /// Wake user space only once this many bytes wait in the ring (it also polls on a
    /// timer): one wake-up per sample would cost more than the sample itself.
    pub wakeup_bytes: u32,
}
const _: () = assert!(size_of::<SamplerConfig>() == 8);

/// Indexes of the per-CPU drop counters (`DROPS` map) kept by the sampler program: a reason's
/// value is its position in [`DropReason::ALL`] (checked at compile time below).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The ring buffer had no room: user space is not draining fast enough.
    RingFull,
    /// The sampled process is not a target.
    NotTarget,
    /// The event carried no data address.
    NoAddress,
    /// The data address is in kernel space ([`KERNEL_SPACE_START`] and above): IBS, which
    /// cannot exclude the kernel, samples the kernel's own accesses made on a target's behalf.
    KernelAddress,
}

/// Where kernel space starts on the 64-bit architectures memtide runs on: x86-64 (4- and
/// 5-level paging) and arm64 both keep user space in the lower half and the kernel in the
/// upper half of the address space, so a data address with bit 63 set is the kernel's.
pub const KERNEL_SPACE_START: u64 = 1 << 63;

impl DropReason {
    /// Every reason, in index order.
    pub const ALL: [Self; 4] = [
        Self::RingFull,
        Self::NotTarget,
        Self::NoAddress,
        Self::KernelAddress,
    ];
    /// Number of counters in the `DROPS` map.
    pub const COUNT: u32 = Self::ALL.len() as u32;

    /// Label used in metrics and logs.
    #[must_use]
    pub const fn label(self) -> &'static str {
        match self {
            Self::RingFull => "ring_full",
            Self::NotTarget => "not_target",
            Self::NoAddress => "no_address",
            Self::KernelAddress => "kernel_address",
        }
    }
}

// Every reason indexes its own counter, and `ALL` lists them in index order.
const _: () = {
    let mut i = 0;
    while i < DropReason::ALL.len() {
        assert!(DropReason::ALL[i] as usize == i);
        i += 1;
    }
};

/// Names of the programs and maps in the BPF object, shared so neither side can drift.
pub mod names {
    /// `perf_event` program for loads.
    pub const PROG_SAMPLE_LOAD: &str = "on_sample_load";
    /// `perf_event` program for stores.
    pub const PROG_SAMPLE_STORE: &str = "on_sample_store";
    /// `perf_event` program for sources that cannot tell loads from stores.
    pub const PROG_SAMPLE_ANY: &str = "on_sample_any";
    /// Tracepoint program on `damon:damon_aggregated`.
    pub const PROG_DAMON_AGGREGATED: &str = "on_damon_aggregated";
    pub const MAP_SAMPLES: &str = "SAMPLES";
    pub const MAP_DAMON_REGIONS: &str = "DAMON_REGIONS";
    pub const MAP_TARGETS: &str = "TARGETS";
    pub const MAP_DROPS: &str = "DROPS";
    pub const MAP_DAMON_OWNER: &str = "DAMON_OWNER";
    pub const GLOBAL_SAMPLER_CONFIG: &str = "SAMPLER_CONFIG";
    pub const GLOBAL_DAMON_OFFSETS: &str = "DAMON_OFFSETS";
}

#[cfg(feature = "user")]
mod user {
    use super::{AccessSample, DamonFieldOffsets, DamonRegion, SamplerConfig};

    // SAFETY: each type is #[repr(C)], Copy, has no padding the compiler inserts (the size
    // asserts above pin the explicit layout) and every bit pattern is a valid value.
    unsafe impl aya::Pod for AccessSample {}
    // SAFETY: as above.
    unsafe impl aya::Pod for DamonRegion {}
    // SAFETY: as above.
    unsafe impl aya::Pod for DamonFieldOffsets {}
    // SAFETY: as above.
    unsafe impl aya::Pod for SamplerConfig {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_sample_round_trips_and_matches_the_repr_c_offsets() {
        let sample = AccessSample {
            addr: 0x7f00_dead_b000,
            weight: 17,
            pid: 4242,
            tid: 4243,
            cpu: 1,
            kind: AccessKind::Store as u8,
            source: SampleSource::SwFault as u8,
            _pad: [0; 2],
        };
        let bytes = sample.to_ne_bytes();
        assert_eq!(AccessSample::from_ne_bytes(&bytes), Some(sample));
        assert_eq!(&bytes[16..20], &4242u32.to_ne_bytes(), "pid at offset 16");
        assert_eq!(AccessSample::from_ne_bytes(&bytes[..31]), None);
    }

    #[test]
    fn wire_enums_decode_their_own_bytes_and_nothing_else() {
        for kind in [AccessKind::Unknown, AccessKind::Load, AccessKind::Store] {
            assert_eq!(AccessKind::from_u8(kind as u8), kind);
        }
        assert_eq!(AccessKind::decode(3), None);
        assert_eq!(AccessKind::from_u8(3), AccessKind::Unknown);
        for source in [
            SampleSource::SwFault,
            SampleSource::Pebs,
            SampleSource::Ibs,
            SampleSource::Spe,
        ] {
            assert_eq!(SampleSource::from_u8(source as u8), Some(source));
        }
        assert_eq!(SampleSource::from_u8(4), None);
        assert_eq!(SampleSource::from_u8(u8::MAX), None);
    }

    #[test]
    fn damon_region_round_trips() {
        let region = DamonRegion {
            target: 2,
            start: 0x1000,
            end: 0x20_0000,
            nr_accesses: 7,
            age: 3,
            nr_regions: 10,
            _pad: 0,
        };
        assert_eq!(
            DamonRegion::from_ne_bytes(&region.to_ne_bytes()),
            Some(region)
        );
        assert_eq!(DamonRegion::from_ne_bytes(&[0; 39]), None);
    }

    /// The bytes the BPF programs write, field by field, and zeros where the padding is.
    #[test]
    fn the_codec_reads_and_writes_the_bpf_programs_bytes() {
        let mut wire = [0u8; AccessSample::SIZE];
        wire[0..8].copy_from_slice(&0x7f00_dead_b000u64.to_ne_bytes());
        wire[8..16].copy_from_slice(&17u64.to_ne_bytes());
        wire[16..20].copy_from_slice(&4242u32.to_ne_bytes());
        wire[20..24].copy_from_slice(&4243u32.to_ne_bytes());
        wire[24..28].copy_from_slice(&1u32.to_ne_bytes());
        wire[28] = AccessKind::Load as u8;
        wire[29] = SampleSource::Ibs as u8;
        let sample = AccessSample::from_ne_bytes(&wire).expect("a whole record");
        assert_eq!(sample.to_ne_bytes(), wire);
        let mut dirty = wire;
        dirty[30..].fill(0xff);
        assert_eq!(AccessSample::from_ne_bytes(&dirty), Some(sample));

        let mut wire = [0u8; DamonRegion::SIZE];
        for (at, value) in [(0, 2u64), (8, 0x1000), (16, 0x20_0000)] {
            wire[at..at + 8].copy_from_slice(&value.to_ne_bytes());
        }
        for (at, value) in [(24, 7u32), (28, 3), (32, 10)] {
            wire[at..at + 4].copy_from_slice(&value.to_ne_bytes());
        }
        let region = DamonRegion::from_ne_bytes(&wire).expect("a whole record");
        assert_eq!((region.start, region.age, region._pad), (0x1000, 3, 0));
        assert_eq!(region.to_ne_bytes(), wire);
    }
}
