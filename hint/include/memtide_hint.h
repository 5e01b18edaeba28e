/* memtide-hint: tell the kernel where a range of your memory belongs.
 *
 * Link with libmemtide_hint.a (cargo build -p memtide-hint --release; target/release/) and
 * -lpthread -ldl. Linux 5.15+ for MEMTIDE_HINT_FAST/SLOW (MPOL_PREFERRED_MANY; older kernels
 * fall back to MPOL_PREFERRED on one node), 6.9+ for weighted MEMTIDE_HINT_BANDWIDTH (else plain
 * interleave).
 *
 *   void *buf = mmap(...);
 *   if (memtide_hint(buf, len, MEMTIDE_HINT_FAST) != 0) perror("memtide_hint");
 *
 * Pages already present are migrated (MPOL_MF_MOVE); later faults follow the policy.
 */
#ifndef MEMTIDE_HINT_H
#define MEMTIDE_HINT_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum memtide_hint_kind {
    /* Latency-critical data: prefer the fast tier's nodes. */
    MEMTIDE_HINT_FAST = 0,
    /* Cold or capacity data: prefer the slow tier's nodes. */
    MEMTIDE_HINT_SLOW = 1,
    /* Bandwidth-bound streams: spread over all tiers by bandwidth (BW-AWARE). */
    MEMTIDE_HINT_BANDWIDTH = 2,
};

/* Applies the hint to [addr, addr + len); addr must be page-aligned. Returns 0, or a negative
 * errno (-EINVAL for a bad hint or alignment, -ENODEV when no node fits the hint, or mbind's). */
int memtide_hint(void *addr, size_t len, int hint);

#ifdef __cplusplus
}
#endif

#endif /* MEMTIDE_HINT_H */
