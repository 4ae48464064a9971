/* SPDX-License-Identifier: MIT */
/*
 * rng.h - the generator of every tool: splitmix64, tiny and fast, and
 * reproducible from the seed a run prints.
 */
#ifndef KAIROS_TOOLS_RNG_H
#define KAIROS_TOOLS_RNG_H

#include <stdint.h>

struct rng {
	uint64_t s;
};

static inline uint64_t rng_next(struct rng *r)
{
	uint64_t z = (r->s += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/*
 * Uniform in [0, @bound) by multiply-shift: no division.  The bias, below
 * @bound / 2^32 relative, is far under the noise.
 */
static inline uint32_t rng_below(struct rng *r, uint32_t bound)
{
	return (uint32_t)(((rng_next(r) >> 32) * bound) >> 32);
}

#endif /* KAIROS_TOOLS_RNG_H */
