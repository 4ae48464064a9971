/* SPDX-License-Identifier: MIT */
/*
 * hist.c - the tools' lateness histogram; see hist.h.
 */
#include <math.h>

#include "hist.h"

static unsigned lhist_bucket(uint64_t ns)
{
	unsigned msb;

	if (ns < (1u << LH_SUB_BITS))
		return (unsigned)ns;
	msb = 63u - (unsigned)__builtin_clzll(ns);
	return (msb - LH_SUB_BITS + 1) << LH_SUB_BITS |
	       ((unsigned)(ns >> (msb - LH_SUB_BITS)) & ((1u << LH_SUB_BITS) - 1));
}

uint64_t lhist_lower(unsigned b)
{
	unsigned oct = b >> LH_SUB_BITS, sub = b & ((1u << LH_SUB_BITS) - 1);

	if (oct == 0)
		return sub;
	return (uint64_t)(sub | 1u << LH_SUB_BITS) << (oct - 1);
}

uint64_t lhist_upper(unsigned b)
{
	unsigned oct = b >> LH_SUB_BITS, sub = b & ((1u << LH_SUB_BITS) - 1);

	if (oct == 0)
		return sub;
	if (oct - 1 + LH_SUB_BITS + 1 >= 64 && sub == (1u << LH_SUB_BITS) - 1)
		return UINT64_MAX;
	return ((uint64_t)((sub | 1u << LH_SUB_BITS) + 1) << (oct - 1)) - 1;
}

void lhist_add(struct lhist *h, uint64_t ns)
{
	uint64_t max = atomic_load_explicit(&h->max, memory_order_relaxed);

	atomic_fetch_add_explicit(&h->bucket[lhist_bucket(ns)], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&h->n, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&h->sum, ns, memory_order_relaxed);
	while (ns > max && !atomic_compare_exchange_weak_explicit(&h->max, &max, ns,
								  memory_order_relaxed,
								  memory_order_relaxed))
		;
}

void lsnap_add(struct lsnap *dst, const struct lhist *h)
{
	uint64_t max = atomic_load_explicit(&h->max, memory_order_relaxed);

	for (unsigned b = 0; b < LH_BUCKETS; b++)
		dst->bucket[b] += atomic_load_explicit(&h->bucket[b], memory_order_relaxed);
	dst->n += atomic_load_explicit(&h->n, memory_order_relaxed);
	dst->sum += atomic_load_explicit(&h->sum, memory_order_relaxed);
	if (max > dst->max)
		dst->max = max;
}

void lsnap_merge(struct lsnap *dst, const struct lsnap *src)
{
	for (unsigned b = 0; b < LH_BUCKETS; b++)
		dst->bucket[b] += src->bucket[b];
	dst->n += src->n;
	dst->sum += src->sum;
	if (src->max > dst->max)
		dst->max = src->max;
}

uint64_t lsnap_pct(const struct lsnap *s, double q)
{
	uint64_t total = 0, rank, seen = 0;

	for (unsigned b = 0; b < LH_BUCKETS; b++)
		total += s->bucket[b];
	if (!total)
		return 0;
	if (q >= 1.0)
		return s->max;
	rank = (uint64_t)ceil(q * (double)total);
	if (rank < 1)
		rank = 1;
	for (unsigned b = 0; b < LH_BUCKETS; b++) {
		seen += s->bucket[b];
		if (seen >= rank) {
			uint64_t up = lhist_upper(b);

			return up < s->max ? up : s->max;
		}
	}
	return s->max;
}
