//! Memos' read/write domains (§3.1): a region is read-dominant (RD) when `reads > ratio ×
//! writes`, write-dominant (WD) otherwise (ratio 2: writes cost at least twice reads). Each
//! counting interval shifts a superpage's domain into its 8-bit history, which the planner's
//! write predictor reads (`policy::rw`).

/// Memos' ratio: writes cost at least twice reads.
pub const MEMOS_READ_WRITE_RATIO: u32 = 2;

/// Domain of a region in one interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Domain {
    Cold,
    ReadDominant,
    WriteDominant,
}

/// Memos' classification rule.
#[must_use]
pub fn classify(reads: u64, writes: u64, ratio: u32) -> Domain {
    if reads == 0 && writes == 0 {
        Domain::Cold
    } else if reads > u64::from(ratio) * writes {
        Domain::ReadDominant
    } else {
        Domain::WriteDominant
    }
}

/// Memos' rule over sample counts: a write sample stands for `write_factor` times the accesses
/// of a read sample (PEBS samples stores at another period than loads).
#[must_use]
pub fn classify_samples(reads: u32, writes: u32, ratio: u32, write_factor: f64) -> Domain {
    if reads == 0 && writes == 0 {
        Domain::Cold
    } else if f64::from(reads) > f64::from(ratio) * f64::from(writes) * write_factor {
        Domain::ReadDominant
    } else {
        Domain::WriteDominant
    }
}

/// Shifts one interval's domain into the history (bit 0 = latest; 1 = WD).
#[must_use]
pub fn push_history(history: u8, domain: Domain) -> u8 {
    (history << 1) | u8::from(domain == Domain::WriteDominant)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rd_wd_boundary() {
        assert_eq!(classify(0, 0, 2), Domain::Cold);
        assert_eq!(classify(21, 10, 2), Domain::ReadDominant);
        // reads == 2 × writes is WD (2·writes ≥ reads).
        assert_eq!(classify(20, 10, 2), Domain::WriteDominant);
        assert_eq!(classify(1, 0, 2), Domain::ReadDominant);
        assert_eq!(classify(0, 1, 2), Domain::WriteDominant);
    }

    #[test]
    fn history_shifts_latest_into_bit0() {
        let h = push_history(push_history(0, Domain::WriteDominant), Domain::ReadDominant);
        assert_eq!(h, 0b10);
        assert_eq!(push_history(0xFF, Domain::Cold), 0xFE);
    }
}
