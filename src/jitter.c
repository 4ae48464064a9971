/* SPDX-License-Identifier: MIT */
/*
 * jitter.c - the per-thread generator behind opts.jitter_ns.
 *
 * splitmix64 over a thread-local counter: one add and three multiply-xor
 * rounds per draw, statistically good enough to spread deadlines and with
 * no state shared between threads.  It is not meant to be unpredictable.
 */
#include <stdbool.h>
#include <sys/random.h>

#include "jitter.h"

static _Thread_local uint64_t jit_state;
static _Thread_local bool jit_seeded;

static uint64_t jit_next(void)
{
	uint64_t z;

	if (!jit_seeded) {
		/* A thread without entropy still gets its own stream. */
		if (getrandom(&jit_state, sizeof(jit_state), GRND_NONBLOCK) != sizeof(jit_state))
			jit_state = (uint64_t)(uintptr_t)&jit_state * UINT64_C(0x9e3779b97f4a7c15);
		jit_seeded = true;
	}
	z = (jit_state += UINT64_C(0x9e3779b97f4a7c15));
	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

uint64_t jitter_add(uint64_t deadline_ns, uint64_t jitter_ns)
{
	unsigned __int128 wide;
	uint64_t draw, out;

	if (!jitter_ns)
		return deadline_ns;
	/*
	 * Uniform over [0, jitter_ns] by the high half of a 64x64 product (its
	 * bias is at most (jitter_ns + 1) / 2^64 per value).  jitter_ns + 1
	 * wraps to 0 only for UINT64_MAX, where the draw itself is the answer.
	 */
	if (jitter_ns == UINT64_MAX) {
		draw = jit_next();
	} else {
		wide = (unsigned __int128)jit_next() * (jitter_ns + 1);
		draw = (uint64_t)(wide >> 64);
	}
	if (__builtin_add_overflow(deadline_ns, draw, &out))
		return UINT64_MAX;
	return out;
}
