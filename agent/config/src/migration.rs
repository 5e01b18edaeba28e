//! `[migration]`: the settings of the host's migration executor (`memtide_host::exec`), kept
//! here so that the file can be read and checked without the crate that moves pages.

use serde::{Deserialize, Serialize};

/// Executor settings. Rates are bytes per second; 0 means unlimited.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExecConfig {
    /// Pages per move_pages call.
    pub batch_pages: usize,
    pub promote_rate: u64,
    pub promote_burst: u64,
    pub demote_rate: u64,
    pub demote_burst: u64,
    /// Bytes kept free on a destination node above its zones' high watermark.
    pub reserve_bytes: u64,
    /// Attempts for a page that fails transiently, across calls.
    pub max_attempts: u8,
    /// Re-query pages after moving them.
    pub verify: bool,
    /// Re-query only the batches in which the kernel reported pages as not migrated (a
    /// partially failed move_pages still reports the destination for them; a fully successful
    /// one reports the truth). Saves a query per batch.
    pub verify_only_when_reported: bool,
    /// Split huge pages before sub-2 MiB moves when debugfs allows it.
    pub split_huge: bool,
    /// Collapse 2 MiB chunks fully promoted at 4 KiB back into huge pages.
    pub collapse_promoted: bool,
    /// `MPOL_MF_MOVE_ALL`: also move pages shared with other processes (CAP_SYS_NICE).
    pub move_shared: bool,
}

impl Default for ExecConfig {
    fn default() -> Self {
        Self {
            batch_pages: 1024,
            promote_rate: 0,
            promote_burst: 0,
            demote_rate: 0,
            demote_burst: 0,
            reserve_bytes: 64 << 20,
            max_attempts: 3,
            verify: true,
            verify_only_when_reported: false,
            split_huge: true,
            collapse_promoted: false,
            move_shared: false,
        }
    }
}
