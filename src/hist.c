/* SPDX-License-Identifier: MIT */
/*
 * hist.c - the lateness histogram: 1/8-octave buckets of nanoseconds, so a
 * percentile is known within an eighth of its value from 512 counters.
 * Each expiry is recorded, with relaxed atomics, in the histogram of its
 * lane (struct expiry_lane: a worker's, or its shard's own);
 * kairos_stats() adds every lane's buckets up and reads percentiles off them.
 */
#include "internal.h"

/* Bucket of @ns: its octave and the 3 bits below the leading one. */
static unsigned lat_bucket(uint64_t ns)
{
	unsigned msb;

	if (ns < (1u << LAT_SUB_BITS))
		return (unsigned)ns;
	msb = 63u - (unsigned)__builtin_clzll(ns);
	return (msb - LAT_SUB_BITS + 1) << LAT_SUB_BITS |
	       ((unsigned)(ns >> (msb - LAT_SUB_BITS)) & ((1u << LAT_SUB_BITS) - 1));
}

uint64_t lat_bucket_upper(unsigned b)
{
	unsigned oct = b >> LAT_SUB_BITS, sub = b & ((1u << LAT_SUB_BITS) - 1);
	unsigned shift;

	if (oct == 0)
		return sub;
	shift = oct - 1;
	if (shift + LAT_SUB_BITS >= 64)
		return UINT64_MAX;
	return (((uint64_t)(sub | 1u << LAT_SUB_BITS) + 1) << shift) - 1;
}

void lat_record(struct lat_hist *h, uint64_t ns)
{
	uint64_t max = atomic_load_explicit(&h->max, memory_order_relaxed);

	atomic_fetch_add_explicit(&h->bucket[lat_bucket(ns)], 1, memory_order_relaxed);
	while (ns > max && !atomic_compare_exchange_weak_explicit(&h->max, &max, ns,
								  memory_order_relaxed,
								  memory_order_relaxed))
		;
}

/* The upper bound of the bucket holding quantile @q of @total samples. */
uint64_t lat_percentile(const uint64_t *bucket, uint64_t total, double q)
{
	uint64_t want, seen = 0;

	if (!total)
		return 0;
	want = (uint64_t)((double)total * q);
	if (want >= total)
		want = total - 1;
	for (unsigned b = 0; b < LAT_BUCKETS; b++) {
		seen += bucket[b];
		if (seen > want)
			return lat_bucket_upper(b);
	}
	return UINT64_MAX;
}
