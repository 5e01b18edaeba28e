//! Which nodes are fast and which are slow: the one answer the classifier gives and every
//! consumer (the daemon, its metrics, `memtide exec`, the hint library) reads, so that none of
//! them decides a node's tier again on its own.

use memtide_core::units::Tier;
use serde::Serialize;

/// The fast and the slow nodes, each list in the classifier's order (the nearest slow node
/// first where distances tell them apart).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TierNodeSets {
    pub fast: Vec<u32>,
    pub slow: Vec<u32>,
}

impl TierNodeSets {
    /// The tier of `node`; `None` for a node in neither (one without memory, which the
    /// classifier never sees).
    #[must_use]
    pub fn tier_of(&self, node: u32) -> Option<Tier> {
        if self.fast.contains(&node) {
            Some(Tier::Fast)
        } else if self.slow.contains(&node) {
            Some(Tier::Slow)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sets(fast: &[u32], slow: &[u32]) -> TierNodeSets {
        TierNodeSets {
            fast: fast.to_vec(),
            slow: slow.to_vec(),
        }
    }

    #[test]
    fn a_node_is_in_one_tier_or_none() {
        let s = sets(&[1], &[2, 0]);
        assert_eq!(s.tier_of(1), Some(Tier::Fast));
        assert_eq!(s.tier_of(0), Some(Tier::Slow));
        assert_eq!(s.tier_of(3), None, "memoryless");
    }
}
