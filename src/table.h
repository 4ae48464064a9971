/* SPDX-License-Identifier: MIT */
/*
 * table.h - the record table's steps on the calls' hot paths, inline in the
 * calls: a take from the thread's bundle of free records (every arm) and a
 * cancel kept in the thread's bundle (every cancel of a timer filed by
 * value).  Out of line, each was a call that saved and restored six
 * registers for a dozen instructions of work.  Their slow paths, and the
 * rest of the table, are in table.c.
 */
#ifndef KAIROS_TABLE_H
#define KAIROS_TABLE_H

#include "rcu.h"

#include "internal.h"
#include "key.h"
#include "timer.h"

/* The chain inside a free bundle (or a thread's part of one): private to its holder. */
static inline struct rec *free_next(struct rec *r)
{
	return (struct rec *)(void *)r->wt.link.next;
}

static inline void free_set_next(struct rec *r, struct rec *next)
{
	r->wt.link.next = next ? &next->wt.link : NULL;
}

/* @r's byte in its chunk's ended array: address arithmetic, no load. */
static inline _Atomic uint8_t *ended_slot(struct rec *r)
{
	struct rec_chunk *c = rec_chunk(r);

	return &c->h.head.ended[r - &c->h.pad];
}

/*
 * Debug builds (where the tests run) check every hint they follow: NULL, or
 * the record exactly FREE_AHEAD links further along the chain.
 */
static inline void ahead_check(struct rec *r)
{
#ifndef NDEBUG
	struct rec *at = r;

	if (!r->ahead)
		return;
	for (unsigned i = 0; i < FREE_AHEAD && at; i++)
		at = free_next(at);
	if (at != r->ahead)
		kairos_die("free record's hint is not FREE_AHEAD along its chain");
#else
	(void)r;
#endif
}

/* Takes @r, the first record of @t's part of a bundle (table_alloc()). */
static inline int table_alloc_from(struct shard *s, struct tstate *t, struct rec *r,
				   struct rec **out, uint32_t *index)
{
	ahead_check(r);
	t->free = free_next(r);
	/*
	 * The chain is one dependent load per record, each likely a miss (the
	 * shard or a worker retired it): the record FREE_AHEAD arms away
	 * starts loading now, and the next one, in case the bundle carries no
	 * such hint.
	 */
	if (r->ahead)
		__builtin_prefetch(r->ahead, 1);
	if (t->free)
		__builtin_prefetch(t->free, 1);
	timer_recycle(r);
	*out = r;
	*index = table_index(s, r);
	return 0;
}

/*
 * What an arm inside its read-side section found missing, made for it by
 * table_make() out of the section (an arm never maps memory or makes a
 * large allocation inside one: DESIGN.md section 4).  Positive, so no errno
 * is mistaken for them.
 */
#define TABLE_EMPTY	1	/* the shard's free stack: a new chunk of records */
#define TABLE_NO_EXT	2	/* a chunk's ext array */

struct table_need {
	unsigned shard;		/* the shard's index */
	uint32_t chunk;		/* TABLE_NO_EXT: the chunk's number in it */
};

/*
 * table_make - makes what @what (TABLE_EMPTY or TABLE_NO_EXT) says @need
 * lacks: maps and fills a chunk, or allocates an ext array, out of any
 * read-side section, then enters one to publish it.  0 (the arm may try
 * again), -ENOMEM, or -ESHUTDOWN.  Call outside a read-side section.
 */
int table_make(struct kairos *k, int what, const struct table_need *need);

int table_alloc_slow(struct kairos *k, struct shard *s, struct tstate *t, struct rec **out,
		     uint32_t *index);

/*
 * table_alloc - takes a free record of @s and gives it its next generation
 * (state FREE).  With a thread state @t (whose shard is @s) the record comes
 * from the bundle the thread holds, and the next one starts loading; without
 * one, the rest of the bundle goes back through the reclaimer.  Call with
 * rcu_read_lock held.  TABLE_EMPTY when the shard has no free record.
 */
static inline int table_alloc(struct kairos *k, struct shard *s, struct tstate *t,
			      struct rec **out, uint32_t *index)
{
	if (__builtin_expect(t && t->free, 1))
		return table_alloc_from(s, t, t->free, out, index);
	return table_alloc_slow(k, s, t, out, index);
}

/* Adds ended record @r to bundle @b (its holder's own), key released. */
static inline void rbundle_link(struct kairos *k, struct rbundle *b, struct rec *r)
{
	struct rec **slot = &b->recent[b->n % FREE_AHEAD];

	key_release(k, r);
	free_set_next(r, NULL);
	r->ahead = NULL;
	/* The record FREE_AHEAD back (its line is still this thread's) learns of @r. */
	if (b->n >= FREE_AHEAD)
		(*slot)->ahead = r;
	*slot = r;
	if (b->last)
		free_set_next(b->last, r);
	else
		b->first = r;
	b->last = r;
	b->n++;
}

void table_keep_open(struct kairos *k, struct tstate *t);

/*
 * table_keep - a cancel of record @r of @t's shard, life @gen, filed by
 * value: the record joins @t's bundle of kept cancels, and the byte of the
 * life it ended is stored when the bundle goes (table_keep_flush()).  Until
 * then the wheel may take its entries for standing and look at the record,
 * which says they are stale.  The thread's own call, inside its read-side
 * section, with kept_steal seen clear in that section.
 */
static inline void table_keep(struct kairos *k, struct tstate *t, struct rec *r, uint32_t gen)
{
	if (__builtin_expect(!t->kept.n, 0))
		table_keep_open(k, t);
	t->kept_end[t->kept.n] = ended_slot(r);
	t->kept_gen[t->kept.n] = (uint8_t)gen;
	rbundle_link(k, &t->kept, r);
	if (t->kept.n == BUNDLE_RECS)
		table_keep_flush(k, t);
	/* For TSan: the grace period of a take orders this before it (thread.c). */
	tsan_published(&t->kept);
}

#endif /* KAIROS_TABLE_H */
