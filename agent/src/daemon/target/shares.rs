//! The fast tier shared between targets (#18 point 4): each target's `[[targets.limits]]`
//! cap, and a fair share when the targets together want more of the fast tier than they can
//! have.
//!
//! Fair is max-min fair (water-filling, the starting point of MaxMem's per-tenant shares): the
//! fast memory the targets can hold, what they hold now plus the free room above the
//! watermarks, is divided so that no target gets less than an equal part unless it wants
//! less, and what one leaves goes to the others. A target wants what it holds in the fast
//! tier plus what its last plan would have promoted, capped by its limit. While the wants
//! fit, only the limits apply: a lone hungry target is never held back by idle ones.

use std::{
    collections::BTreeMap,
    sync::Mutex,
    time::{Duration, Instant},
};

/// What one target told the shares at its last plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Tenant {
    limit: Option<u64>,
    held: u64,
    want: u64,
}

#[derive(Debug, Default)]
struct Tenants {
    by_pid: BTreeMap<u32, Tenant>,
    /// The fair share in force (`None`: the wants fit) and when it was worked out.
    level: Option<u64>,
    computed_at: Option<Instant>,
}

/// The shares all targets plan with.
#[derive(Debug)]
pub struct FastShares {
    max_age: Duration,
    tenants: Mutex<Tenants>,
}

impl Default for FastShares {
    fn default() -> Self {
        Self::new(Self::MAX_AGE)
    }
}

/// What a target may hold of the fast tier at this plan.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Share {
    /// Bytes; `None`: no bound but the free memory.
    pub(super) bytes: Option<u64>,
    /// Whether the fair share, not the target's limit, set `bytes`.
    pub(super) fair: bool,
}

impl FastShares {
    /// How long a fair share stands before it is worked out again: the wants change at each
    /// plan, and a thousand targets must not each sort all the others' every second.
    pub const MAX_AGE: Duration = Duration::from_secs(1);

    #[must_use]
    pub fn new(max_age: Duration) -> Self {
        Self {
            max_age,
            tenants: Mutex::new(Tenants::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tenants> {
        match self.tenants.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Records that `pid` holds `held` bytes of the fast tier and wants `want`, under `limit`,
    /// with `room` bytes of the fast tier free above its watermarks; returns its share.
    pub(super) fn share(
        &self,
        pid: u32,
        limit: Option<u64>,
        held: u64,
        want: u64,
        room: u64,
    ) -> Share {
        let mut tenants = self.lock();
        let tenant = Tenant {
            limit,
            held,
            want: limit.map_or(want, |limit| want.min(limit)),
        };
        let joined = tenants.by_pid.insert(pid, tenant).is_none();
        if joined
            || tenants
                .computed_at
                .is_none_or(|at| at.elapsed() >= self.max_age)
        {
            let pool = tenants
                .by_pid
                .values()
                .map(|t| t.held)
                .fold(room, u64::saturating_add);
            tenants.level = water_level(tenants.by_pid.values().map(|t| t.want), pool);
            tenants.computed_at = Some(Instant::now());
        }
        match (limit, tenants.level) {
            (limit, None) => Share {
                bytes: limit,
                fair: false,
            },
            (Some(limit), Some(level)) if limit <= level => Share {
                bytes: Some(limit),
                fair: false,
            },
            (_, Some(level)) => Share {
                bytes: Some(level),
                fair: true,
            },
        }
    }

    /// Records what `pid` holds after its moves. The free room the next share is worked out
    /// with (the machine is read afresh after moves) already lacks what it promoted: without
    /// this the pool would too, until the target's next plan, and every other target would be
    /// cut for it meanwhile.
    pub(super) fn held(&self, pid: u32, held: u64) {
        if let Some(tenant) = self.lock().by_pid.get_mut(&pid) {
            tenant.held = held;
        }
    }

    /// Forgets a gone target: what it held is free for the others at the next working-out.
    /// Targets that have planned and not left.
    pub(super) fn tenants(&self) -> usize {
        self.lock().by_pid.len()
    }

    pub(super) fn leave(&self, pid: u32) {
        let mut tenants = self.lock();
        if tenants.by_pid.remove(&pid).is_some() {
            tenants.computed_at = None;
        }
    }
}

/// The max-min fair share of `pool` between `wants`: the largest amount each may have such
/// that the wants below it are met in full and the rest get it. `None` when all wants fit.
fn water_level(wants: impl Iterator<Item = u64>, pool: u64) -> Option<u64> {
    let mut wants: Vec<u64> = wants.collect();
    let total: u128 = wants.iter().map(|&w| u128::from(w)).sum();
    if total <= u128::from(pool) {
        return None;
    }
    wants.sort_unstable();
    let mut left = pool;
    for (met, &want) in wants.iter().enumerate() {
        let even = left / (wants.len() - met) as u64;
        if want > even {
            return Some(even);
        }
        left -= want;
    }
    // The wants sum to more than the pool, so the last one cannot be met in full.
    Some(left)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn the_level_meets_small_wants_and_splits_the_rest_evenly() {
        assert_eq!(water_level([10, 20].into_iter(), 30), None);
        assert_eq!(water_level([].into_iter(), 0), None);
        assert_eq!(water_level([100, 100].into_iter(), 100), Some(50));
        // 10 is met; 90 left for two.
        assert_eq!(water_level([10, 100, 200].into_iter(), 100), Some(45));
        assert_eq!(
            water_level([u64::MAX, u64::MAX].into_iter(), u64::MAX),
            Some(u64::MAX / 2)
        );
    }

    #[test]
    fn a_limited_target_keeps_its_limit_and_the_other_gets_the_rest() {
        let shares = FastShares::new(Duration::ZERO);
        // Both want 500 MiB of a pool of 400 MiB (nothing held yet); one is limited to 64.
        let limited = shares.share(1, Some(64 * MIB), 0, 500 * MIB, 400 * MIB);
        assert_eq!(
            limited,
            Share {
                bytes: Some(64 * MIB),
                fair: false
            }
        );
        let other = shares.share(2, None, 0, 500 * MIB, 400 * MIB);
        assert_eq!(
            other,
            Share {
                bytes: Some(336 * MIB),
                fair: true
            }
        );
        // Both move: the room is gone, and what each holds is recorded after its moves.
        shares.held(1, 64 * MIB);
        shares.held(2, 336 * MIB);
        assert_eq!(
            shares
                .share(1, Some(64 * MIB), 64 * MIB, 500 * MIB, 0)
                .bytes,
            Some(64 * MIB)
        );
        assert_eq!(
            shares.share(2, None, 336 * MIB, 500 * MIB, 0).bytes,
            Some(336 * MIB)
        );
    }

    #[test]
    fn without_competition_only_limits_bound_and_a_leaver_frees_its_part() {
        let shares = FastShares::new(Duration::ZERO);
        // Small wants: no fair share, the limit alone.
        assert_eq!(
            shares.share(1, None, 10 * MIB, 20 * MIB, 500 * MIB).bytes,
            None
        );
        assert_eq!(
            shares
                .share(2, Some(50 * MIB), 0, 20 * MIB, 500 * MIB)
                .bytes,
            Some(50 * MIB)
        );
        // Two hungry unlimited targets and no room left: half each of what they hold.
        let shares = FastShares::new(Duration::ZERO);
        shares.share(1, None, 300 * MIB, 600 * MIB, 0);
        assert_eq!(
            shares.share(2, None, 100 * MIB, 600 * MIB, 0).bytes,
            Some(200 * MIB)
        );
        assert_eq!(
            shares.share(1, None, 300 * MIB, 600 * MIB, 0).bytes,
            Some(200 * MIB)
        );
        // The first leaves (its 300 MiB freed): the second may have all of them.
        shares.leave(1);
        assert_eq!(
            shares.share(2, None, 100 * MIB, 600 * MIB, 300 * MIB).bytes,
            Some(400 * MIB)
        );
    }

    #[test]
    fn a_level_stands_until_it_is_old_unless_a_target_joins() {
        let shares = FastShares::new(Duration::MAX);
        shares.share(1, None, 0, 100 * MIB, 100 * MIB);
        assert_eq!(
            shares.share(2, None, 0, 100 * MIB, 100 * MIB).bytes,
            Some(50 * MIB)
        );
        // Target 2 now wants little, but the level stands until it is old.
        assert_eq!(
            shares.share(2, None, 0, MIB, 100 * MIB).bytes,
            Some(50 * MIB)
        );
        // A joiner makes it worked out again.
        assert_eq!(
            shares.share(3, None, 0, MIB, 100 * MIB).bytes,
            Some(98 * MIB)
        );
    }
}
