//! Memos' read/write awareness (§3.2, §5.2): the write predictor and its tunables.
//!
//! The engine classifies each superpage read- or write-dominant every counting interval and
//! keeps the last eight in a history (`crate::engine::domain`); the predictor reads that history
//! as Memos does: a run of the last
//! `reverse_len` intervals overrides the window majority (the "Reverse" case, a phase change),
//! otherwise the number of WD intervals in the window picks high, low or no write frequency.
//! Memos leaves K_Len and the frequency cut-offs open; the defaults here are the digest's reading.

use serde::{Deserialize, Serialize};

use crate::{
    engine::domain::MEMOS_READ_WRITE_RATIO,
    validate::{ConfigError, check},
};

/// Read/write tunables.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RwConfig {
    /// RD ⇔ reads > `read_write_ratio` × writes. Default 2 (Memos).
    pub read_write_ratio: u32,
    /// Intervals of history the predictor reads, 1..=8. Default 8 (Memos' Window_Len).
    pub window: u32,
    /// Length of the trailing run that overrides the window majority (K_Len). Default 3.
    pub reverse_len: u32,
    /// WD intervals in the window for a high write-frequency prediction. Default 6.
    pub high_min: u32,
    /// WD intervals in the window for a low write-frequency prediction. Default 4.
    pub low_min: u32,
    /// Promote predicted write-hot regions first when the slow tier's writes cost more than its
    /// reads (relative to the fast tier). Default true.
    pub write_priority: bool,
}

impl Default for RwConfig {
    fn default() -> Self {
        Self {
            read_write_ratio: MEMOS_READ_WRITE_RATIO,
            window: 8,
            reverse_len: 3,
            high_min: 6,
            low_min: 4,
            write_priority: true,
        }
    }
}

impl RwConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        check(
            (1..=8).contains(&self.window),
            "rw.window",
            self.window,
            "must be within 1..=8",
        )?;
        check(
            self.reverse_len >= 1 && self.reverse_len <= self.window,
            "rw.reverse_len",
            self.reverse_len,
            "must be within 1..=window",
        )?;
        check(
            self.low_min <= self.high_min && self.high_min <= self.window,
            "rw.high_min",
            self.high_min,
            "need low_min <= high_min <= window",
        )
    }
}

/// Predicted write behaviour for the coming intervals, in promotion-priority order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum WritePrediction {
    /// Not write-dominant.
    UnWd,
    /// Write-dominant some of the time.
    WdFreqLow,
    /// Write-dominant most of the time.
    WdFreqHigh,
}

/// Memos' predictor over the last `cfg.window` intervals of `history`.
#[must_use]
pub fn predict(history: u8, cfg: &RwConfig) -> WritePrediction {
    let run_mask = low_bits(cfg.reverse_len);
    if history & run_mask == run_mask {
        return WritePrediction::WdFreqHigh;
    }
    if history & run_mask == 0 {
        return WritePrediction::UnWd;
    }
    let wd = (history & low_bits(cfg.window)).count_ones();
    if wd >= cfg.high_min {
        WritePrediction::WdFreqHigh
    } else if wd >= cfg.low_min {
        WritePrediction::WdFreqLow
    } else {
        WritePrediction::UnWd
    }
}

fn low_bits(n: u32) -> u8 {
    u8::try_from((1u32 << n.min(8)) - 1).unwrap_or(u8::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memos_figure4_cases() {
        let cfg = RwConfig::default();
        // Histories are written oldest bit first, as in the paper; bit 0 is the latest.
        assert_eq!(predict(0b1011_1111, &cfg), WritePrediction::WdFreqHigh);
        assert_eq!(predict(0b0010_0000, &cfg), WritePrediction::UnWd);
        assert_eq!(predict(0b1001_1011, &cfg), WritePrediction::WdFreqLow);
        // Reverse: the window majority says Un_WD but the last three are consecutive WD.
        assert_eq!(predict(0b0000_0111, &cfg), WritePrediction::WdFreqHigh);
        // And the opposite phase change: mostly WD, latest three not.
        assert_eq!(predict(0b1111_1000, &cfg), WritePrediction::UnWd);
    }

    #[test]
    fn predictor_frequency_cutoffs() {
        let cfg = RwConfig::default();
        // Trailing bits 0b01 / 0b10 avoid the reverse rule; count decides.
        assert_eq!(predict(0b1111_0101, &cfg), WritePrediction::WdFreqHigh); // 6 ones
        assert_eq!(predict(0b1101_0101, &cfg), WritePrediction::WdFreqLow); // 5
        assert_eq!(predict(0b1100_0101, &cfg), WritePrediction::WdFreqLow); // 4
        assert_eq!(predict(0b1000_0101, &cfg), WritePrediction::UnWd); // 3
        let short = RwConfig {
            window: 4,
            high_min: 3,
            low_min: 2,
            ..RwConfig::default()
        };
        // Bits beyond the window are ignored: 0b1111_0101 has 2 ones in its last four.
        assert_eq!(predict(0b1111_0101, &short), WritePrediction::WdFreqLow);
    }
}
