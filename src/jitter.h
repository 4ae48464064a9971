/* SPDX-License-Identifier: MIT */
/*
 * jitter.h - a deadline spread uniformly over [deadline, deadline + jitter],
 * so that timers armed together do not all fire in the same tick.
 */
#ifndef KAIROS_JITTER_H
#define KAIROS_JITTER_H

#include <stdint.h>

/*
 * @deadline_ns plus a uniform draw from [0, @jitter_ns], saturating at
 * UINT64_MAX (a deadline that never comes, never one that wrapped into the
 * past).  Never earlier than @deadline_ns.  Each thread draws from its own
 * generator, seeded from getrandom() on first use: no shared state.
 */
uint64_t jitter_add(uint64_t deadline_ns, uint64_t jitter_ns);

#endif /* KAIROS_JITTER_H */
