//! The platforms the tier model can stand for: each tier's latency per access kind, its
//! bandwidth, the compute between misses, the TLB-reach penalty and a shootdown's cost.

use serde::Serialize;

use memtide_core::policy::TierCost;

/// Platform presets (digest §6.2 H2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum PresetName {
    /// Optane-like: latency 1:3, bandwidth 1:0.37 (Doudali).
    Pmem,
    /// CXL / disaggregated: latency 1:22.2, bandwidth 1:0.1 (Doudali).
    Cxl,
    /// Ryoo's projection: latency 1:3, equal bandwidth.
    Ryoo,
    /// Rainbow's DRAM vs PCM: 13.5/28.5 vs 19.5/171 ns read/write (+40 ns uncore), 10.7 GB/s.
    RainbowPcm,
    /// BW-AWARE's GPU platform: 200 vs 80 GB/s, slow +100 cycles.
    BwAware,
}

/// Costs of one platform.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Preset {
    pub name: PresetName,
    pub fast_read_ns: f64,
    pub fast_write_ns: f64,
    pub slow_read_ns: f64,
    pub slow_write_ns: f64,
    /// Bytes per ns (= GB/s).
    pub fast_gbps: f64,
    pub slow_gbps: f64,
    /// Compute time between two misses (C of the leading-loads model), ns.
    pub compute_ns: f64,
    /// Extra time of an access to a 4 KiB-mapped (split) superpage, ns: TLB reach.
    pub tlb_4k_ns: f64,
    /// One TLB shootdown, ns.
    pub shootdown_ns: f64,
}

impl PresetName {
    pub const ALL: [Self; 5] = [
        Self::Pmem,
        Self::Cxl,
        Self::Ryoo,
        Self::RainbowPcm,
        Self::BwAware,
    ];

    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::Pmem => "pmem",
            Self::Cxl => "cxl",
            Self::Ryoo => "ryoo",
            Self::RainbowPcm => "rainbow-pcm",
            Self::BwAware => "bw-aware",
        }
    }

    #[must_use]
    pub fn preset(self) -> Preset {
        let base = Preset {
            name: self,
            fast_read_ns: 80.0,
            fast_write_ns: 80.0,
            slow_read_ns: 240.0,
            slow_write_ns: 240.0,
            fast_gbps: 20.0,
            slow_gbps: 20.0,
            compute_ns: 150.0,
            tlb_4k_ns: 10.0,
            shootdown_ns: 13_200.0,
        };
        match self {
            Self::Pmem => Preset {
                slow_gbps: 7.4,
                ..base
            },
            Self::Cxl => Preset {
                slow_read_ns: 80.0 * 22.2,
                slow_write_ns: 80.0 * 22.2,
                slow_gbps: 2.0,
                ..base
            },
            Self::Ryoo => base,
            Self::RainbowPcm => Preset {
                fast_read_ns: 53.5,
                fast_write_ns: 68.5,
                slow_read_ns: 59.5,
                slow_write_ns: 211.0,
                fast_gbps: 10.7,
                slow_gbps: 10.7,
                ..base
            },
            Self::BwAware => Preset {
                fast_read_ns: 100.0,
                fast_write_ns: 100.0,
                slow_read_ns: 150.0,
                slow_write_ns: 150.0,
                fast_gbps: 200.0,
                slow_gbps: 80.0,
                ..base
            },
        }
    }
}

impl Preset {
    #[must_use]
    pub fn latency(&self, fast: bool, write: bool) -> f64 {
        match (fast, write) {
            (true, false) => self.fast_read_ns,
            (true, true) => self.fast_write_ns,
            (false, false) => self.slow_read_ns,
            (false, true) => self.slow_write_ns,
        }
    }

    /// Copy time of `bytes`, ns.
    #[must_use]
    pub fn copy_ns(&self, bytes: u64) -> f64 {
        bytes as f64 * (1.0 / self.fast_gbps + 1.0 / self.slow_gbps)
    }

    #[must_use]
    pub fn tier_costs(&self) -> (TierCost, TierCost) {
        (
            TierCost {
                read_ns: Some(self.fast_read_ns),
                write_ns: Some(self.fast_write_ns),
                bandwidth_bytes_per_s: Some(self.fast_gbps * 1e9),
            },
            TierCost {
                read_ns: Some(self.slow_read_ns),
                write_ns: Some(self.slow_write_ns),
                bandwidth_bytes_per_s: Some(self.slow_gbps * 1e9),
            },
        )
    }
}
