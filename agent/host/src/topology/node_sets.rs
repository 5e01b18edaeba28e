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

/// Which nodes a placement or a hint asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlacementTier {
    Fast,
    Slow,
    /// Both tiers (an interleave).
    Every,
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

    /// The nodes a placement of `tier` goes to. With no slow node, slow memory goes to the
    /// fast nodes: a machine that cannot tier still has somewhere to put it. `Every` lists the
    /// nodes in id order, as the kernel reads a node mask.
    #[must_use]
    pub fn nodes_for(&self, tier: PlacementTier) -> Vec<u32> {
        match tier {
            PlacementTier::Fast => self.fast.clone(),
            PlacementTier::Slow if self.slow.is_empty() => self.fast.clone(),
            PlacementTier::Slow => self.slow.clone(),
            PlacementTier::Every => {
                let mut every: Vec<u32> = self.fast.iter().chain(&self.slow).copied().collect();
                every.sort_unstable();
                every
            }
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

    #[test]
    fn slow_falls_back_to_fast_and_every_is_in_node_order() {
        let s = sets(&[1], &[3, 2]);
        assert_eq!(s.nodes_for(PlacementTier::Fast), [1]);
        assert_eq!(s.nodes_for(PlacementTier::Slow), [3, 2]);
        assert_eq!(s.nodes_for(PlacementTier::Every), [1, 2, 3]);
        let uniform = sets(&[0, 1], &[]);
        assert_eq!(uniform.nodes_for(PlacementTier::Slow), [0, 1]);
    }
}
