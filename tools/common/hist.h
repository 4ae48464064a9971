/* SPDX-License-Identifier: MIT */
/*
 * hist.h - the tools' lateness histogram.  Log buckets, 16 per power of
 * two, so a percentile read from the bucket bounds is within 1/16 (6%) of
 * the true value; bucket b < 16 holds b ns.  Recorded from many threads with
 * relaxed atomics (struct lhist), read from a plain copy (struct lsnap).
 *
 * kairos keeps its own histogram (src/hist.c, 1/8 octave) behind
 * kairos_stats(); the tools measure from outside, through the public API,
 * and kairos-stress compares its numbers with the library's, so they do not
 * share code with it.
 */
#ifndef KAIROS_TOOLS_HIST_H
#define KAIROS_TOOLS_HIST_H

#include <stdatomic.h>
#include <stdint.h>

#define LH_SUB_BITS	4
#define LH_BUCKETS	(64 << LH_SUB_BITS)

struct lhist {
	_Atomic uint64_t bucket[LH_BUCKETS];
	_Atomic uint64_t n, max, sum;
} __attribute__((aligned(64)));

struct lsnap {
	uint64_t bucket[LH_BUCKETS];
	uint64_t n, max, sum;
};

void lhist_add(struct lhist *h, uint64_t ns);
uint64_t lhist_lower(unsigned b);
uint64_t lhist_upper(unsigned b);
void lsnap_add(struct lsnap *dst, const struct lhist *h);
void lsnap_merge(struct lsnap *dst, const struct lsnap *src);
/* Quantile @q: the upper bound of its bucket (within 1/16), at most the max. */
uint64_t lsnap_pct(const struct lsnap *s, double q);

#endif /* KAIROS_TOOLS_HIST_H */
