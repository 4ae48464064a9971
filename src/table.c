/* SPDX-License-Identifier: MIT */
/*
 * table.c - record pools, lookup by id, and reclamation after a grace period.
 *
 * Each shard keeps a directory of up to 4096 chunk pointers (fixed, so a
 * lookup never races a directory resize) and a lock-free stack of free
 * records.  An id names its shard and index directly: a lookup is two loads
 * and a generation compare, with no lock and no hashing.
 *
 * Ended records are not freed at once: a thread that looked the record up
 * may still be about to CAS its state word or store its deadline.  They go
 * to the shard's retired stack; the service's reclaimer thread takes them in
 * batches, waits for an RCU grace period (synchronize_rcu of the bulletproof
 * flavour, whose readers need no registration) and only then pushes them
 * back on the free stack.  Every API call that touches a record holds
 * rcu_read_lock() from lookup to its last access.
 *
 * A pool grows without a lock: an arm that finds the free stack empty
 * leaves its section, maps and fills a chunk (chunk_make()), and enters
 * again to number and publish it (chunk_install()).
 */
#include "rcu.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fault.h"
#include "internal.h"
#include "key.h"
#include "table.h"
#include "timer.h"

static void retired_push(struct kairos *k, struct shard *s, struct rec *head, unsigned n);

/* Appends bundle head @b to the list @first..@last of heads (inbox_next). */
static void heads_append(struct rec **first, struct rec **last, struct rec *b)
{
	rec_link_set(b, NULL);
	if (*last)
		rec_link_set(*last, b);
	else
		*first = b;
	*last = b;
}

/* Pushes the chain @first..@last onto @head (a Treiber stack). */
static void stack_push(_Atomic(struct rec *) *head, struct rec *first, struct rec *last)
{
	struct rec *old = atomic_load_explicit(head, memory_order_relaxed);

	do {
		rec_link_set(last, old);
		/* Release: the chain's links and states are visible to the popper. */
	} while (!atomic_compare_exchange_weak_explicit(head, &old, first,
							memory_order_release,
							memory_order_relaxed));
}

/*
 * Cuts the chain @first (linked through inbox_next) into bundles of up to
 * BUNDLE_RECS, their heads chained in the order made from @first, ready for
 * one push onto a free stack; returns the last head.  The records must be
 * unreachable by any popper (fresh, or past a grace period).
 */
static struct rec *bundles_cut(struct rec *first)
{
	struct rec *heads = NULL, *last = NULL, *r = first;

	while (r) {
		struct rec *head = r;

		for (unsigned n = 1;; n++) {
			struct rec *next = rec_link(r);

			if (n == BUNDLE_RECS || !next) {
				free_set_next(r, NULL);
				r = next;
				break;
			}
			free_set_next(r, next);
			r = next;
		}
		/* Bundle heads in the order made, linked through inbox_next. */
		heads_append(&heads, &last, head);
	}
	return last;
}

/*
 * Notes the life of @r that ends as it is retired (struct chunk_head's
 * ended).  Before the record can be taken again: its next life's entries
 * are read after this store.
 */
static void ended_mark(struct rec *r)
{
	uint64_t st = atomic_load_explicit(&r->state, memory_order_relaxed);

	atomic_store_explicit(ended_slot(r), (uint8_t)st_gen(st), memory_order_relaxed);
}

/*
 * @bytes (a power of two) aligned to @bytes, straight from mmap
 * (aligned_alloc() keeps an extra header page resident per chunk, 3% of a
 * record's worth of memory): over-maps by the alignment, trims both ends.
 */
static uint8_t *map_aligned(size_t bytes)
{
	uint8_t *p = fault_hit() ? MAP_FAILED : mmap(NULL, 2 * bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uintptr_t start;
	size_t head;

	if (p == MAP_FAILED)
		return NULL;
	start = ((uintptr_t)p + bytes - 1) & ~(uintptr_t)(bytes - 1);
	head = start - (uintptr_t)p;
	if (head)
		munmap(p, head);
	munmap((uint8_t *)start + bytes, bytes - head);
	return (uint8_t *)start;
}

/* A chunk's memory: CHUNK_BYTES aligned to CHUNK_BYTES, faulted in. */
static struct rec_chunk *chunk_map(void)
{
	uint8_t *start = map_aligned(CHUNK_BYTES);

	if (!start)
		return NULL;
	/*
	 * chunk_make() writes every record at once: one call faults the pages
	 * in, where page by page it took a fault each (the first fill of 1e6
	 * arms 11% faster, docs/BENCHMARKS.md).  Linux 5.14; an older kernel
	 * says EINVAL, and the writes fault the pages in as before.
	 */
#ifdef MADV_POPULATE_WRITE
	(void)madvise(start, CHUNK_BYTES, MADV_POPULATE_WRITE);
#endif
	return (struct rec_chunk *)start;
}

/*
 * chunk_make - a chunk of fresh records for shard @shard, its records in
 * bundles, numbered and published later by chunk_install().  Outside any
 * read-side section (table_make() checks): the mapping, its page faults and
 * the first write of every record take tens of microseconds and may sleep
 * in the kernel, and a reader that sleeps holds back the grace periods of
 * the whole process.
 * In @mem when not NULL (a carve of a region), else in a mapping of its
 * own; either is unmapped if this fails.
 */
static struct rec_chunk *chunk_make(struct kairos *k, unsigned shard, void *mem)
{
	struct rec_chunk *c = mem ? mem : chunk_map();	/* zero-filled */

	if (!c)
		return NULL;
	c->h.head.ended = fault_hit() ? NULL : malloc(CHUNK_RECS);
	if (!c->h.head.ended) {
		munmap(c, CHUNK_BYTES);
		return NULL;
	}
	/* Life salt - 1 is the one each record ended before its first. */
	memset((void *)c->h.head.ended, (uint8_t)(k->salt - 1), CHUNK_RECS);
	c->h.head.shard = shard;
	for (unsigned i = 0; i < CHUNK_RECS - 1; i++) {
		/* Generation salt - 1: the first allocation bumps it to salt. */
		atomic_init(&c->recs[i].state, (uint64_t)(k->salt - 1) << 32 | ST_FREE);
		c->recs[i].inbox_next = i + 1 < CHUNK_RECS - 1 ? &c->recs[i + 1] : NULL;
	}
	c->h.head.last_bundle = bundles_cut(&c->recs[0]);
	return c;
}

/*
 * KAIROS_HUGE_PAGES: chunks are carved from REGION_BYTES regions, mapped
 * aligned to their size and advised MADV_HUGEPAGE, so that the kernel can
 * back each with one huge page.  A shard carves from one region at a time
 * (struct shard's region: address | chunks taken), inside a read-side
 * section so that teardown, past its grace period, sees every carve; the
 * mapping and its page faults are outside any.  A carved chunk is unmapped
 * as every chunk is (table_free(), or chunk_unmake() if it is never
 * installed); teardown unmaps the rest of the shard's last region.
 */
#define REGION_BYTES	(UINT64_C(2) << 20)
#define REGION_CHUNKS	((unsigned)(REGION_BYTES / CHUNK_BYTES))

_Static_assert(REGION_BYTES % CHUNK_BYTES == 0, "a region holds whole chunks");

/* A shard's region word, taken apart: the region's address, and its chunks carved. */
static inline uint8_t *region_base(uint64_t word)
{
	return (uint8_t *)(uintptr_t)(word & ~(REGION_BYTES - 1));
}

static inline unsigned region_used(uint64_t word)
{
	return (unsigned)(word & (REGION_BYTES - 1));
}

/* A fresh region, its pages faulted in (a huge page each, where THP allows). */
static uint8_t *region_map(void)
{
	uint8_t *start;

	rcu_might_sleep();
	start = map_aligned(REGION_BYTES);
	if (!start)
		return NULL;
	/* Refused where THP is off or unknown: the region is then plain pages. */
	(void)madvise(start, REGION_BYTES, MADV_HUGEPAGE);
#ifdef MADV_POPULATE_WRITE
	(void)madvise(start, REGION_BYTES, MADV_POPULATE_WRITE);
#endif
	return start;
}

/*
 * A chunk's memory carved from shard @shard's region, mapping a new region
 * when that one is used up; NULL with *@rc -ENOMEM or -ESHUTDOWN.  Call
 * outside any read-side section.
 */
static void *region_carve(struct kairos *k, unsigned shard, int *rc)
{
	uint8_t *fresh = NULL, *mem = NULL;

	for (;;) {
		struct shard *s;
		uint64_t old;

		*rc = service_enter(k);
		if (*rc)
			break;
		s = k->shards[shard];
		old = atomic_load_explicit(&s->region, memory_order_relaxed);
		for (;;) {
			uint8_t *base = region_base(old);
			unsigned used = region_used(old);
			bool carve = base && used < REGION_CHUNKS;

			if (!carve && !fresh)
				break;
			/* Relaxed: the region's memory is this thread's own mapping or carve. */
			if (atomic_compare_exchange_weak_explicit(
				    &s->region, &old,
				    carve ? old + 1 : (uint64_t)(uintptr_t)fresh | 1,
				    memory_order_relaxed, memory_order_relaxed)) {
				if (carve) {
					mem = base + (size_t)used * CHUNK_BYTES;
				} else {
					mem = fresh;
					fresh = NULL;
				}
				break;
			}
		}
		service_leave();
		if (mem)
			break;
		/* Used up (or none yet): a new one, mapped out of the section. */
		fresh = region_map();
		if (!fresh) {
			*rc = -ENOMEM;
			break;
		}
	}
	/* Mapped, but another thread's new region came first. */
	if (fresh)
		munmap(fresh, REGION_BYTES);
	return mem;
}

/* Gives back a chunk that chunk_make() made and no one ever saw. */
static void chunk_unmake(struct rec_chunk *c)
{
	free((void *)c->h.head.ended);
	munmap(c, CHUNK_BYTES);
}

/*
 * Counts chunk @no of @s, which is in place, unless another thread has;
 * returns the count after (the next number to try).
 */
static unsigned chunks_count(struct shard *s, unsigned no)
{
	unsigned at = no;

	if (atomic_compare_exchange_strong_explicit(&s->nchunks, &at, no + 1,
						    memory_order_acq_rel, memory_order_acquire))
		return no + 1;
	return at;	/* past @no already: nchunks only grows while the shard lives */
}

/*
 * chunk_install - numbers @c as @s's next chunk, publishes it and pushes
 * its records onto the free stack; false when @s has MAX_CHUNKS already.
 * Inside a read-side section, lock-free: every thread that found the pool
 * empty installs the chunk it made (the pool then grows by one chunk per
 * such thread, not by one).  A thread that finds a number taken counts that
 * chunk before it tries the next, so nchunks lags only by the installs
 * under way, and by none once the sections have ended (table_free()).
 */
static bool chunk_install(struct shard *s, struct rec_chunk *c)
{
	unsigned no = atomic_load_explicit(&s->nchunks, memory_order_acquire);

	for (;;) {
		struct rec_chunk *none = NULL;

		if (no >= MAX_CHUNKS)
			return false;
		c->h.head.no = no;
		/* Release: the chunk's contents before its pointer, for lookups. */
		if (atomic_compare_exchange_strong_explicit(&s->chunk[no], &none, c,
							    memory_order_release,
							    memory_order_relaxed))
			break;
		no = chunks_count(s, no);
	}
	(void)chunks_count(s, no);
	stack_push(&s->free_head, &c->recs[0], c->h.head.last_bundle);
	return true;
}

/*
 * Pops one bundle off @s's free stack, or says TABLE_EMPTY when there is
 * none.  Call with rcu_read_lock held (the stack relies on it).
 */
static struct rec *bundle_pop(struct shard *s, int *rc)
{
	/* Acquire pairs with the release of stack_push(). */
	struct rec *b = atomic_load_explicit(&s->free_head, memory_order_acquire);

	while (b) {
		struct rec *next = rec_link(b);

		if (atomic_compare_exchange_weak_explicit(&s->free_head, &b, next,
							  memory_order_acquire,
							  memory_order_acquire))
			return b;
	}
	*rc = TABLE_EMPTY;
	return NULL;
}

/*
 * The slow path of table_alloc() (table.h): the thread holds no free record,
 * or the caller is no thread on the service.  Pops a bundle and takes its
 * first record; a thread keeps the rest, anyone else hands it back through
 * the reclaimer.  TABLE_EMPTY when the pool is empty: the caller grows it
 * with table_make(), out of its section.
 */
int table_alloc_slow(struct kairos *k, struct shard *s, struct tstate *t, struct rec **out,
		     uint32_t *index)
{
	struct rec *r;
	int rc = 0;

	r = bundle_pop(s, &rc);
	if (!r)
		return rc;
	if (t)
		return table_alloc_from(s, t, r, out, index);
	if (free_next(r))
		table_give_back(k, s, free_next(r));
	timer_recycle(r);
	*out = r;
	*index = table_index(s, r);
	return 0;
}

/*
 * table_give_back - returns free records of @s that a thread took but did
 * not use (@chain, linked through wt.link.next).  They go through the
 * reclaimer like every ended record: a popper that read one of them as the
 * stack's head must not see it come back before its section ends.
 */
void table_give_back(struct kairos *k, struct shard *s, struct rec *chain)
{
	unsigned n = 0;

	for (struct rec *r = chain; r; r = free_next(r))
		n++;
	retired_push(k, s, chain, n);
}

struct rec_ext *table_ext_peek(struct shard *s, uint32_t index)
{
	struct rec_chunk *c = table_chunk(s, index);
	struct rec_ext *p = atomic_load_explicit(&c->h.head.ext, memory_order_acquire);

	return p ? &p[index & (CHUNK_RECS - 1)] : NULL;
}

/* The ext entry of record @index, whose chunk has its array (the record uses it). */
struct rec_ext *table_ext(struct shard *s, uint32_t index)
{
	struct rec_ext *p = table_ext_peek(s, index);

	if (!p)
		kairos_die("a record's ext entry is used before its chunk has the array");
	return p;
}

int table_make(struct kairos *k, int what, const struct table_need *need)
{
	struct rec_chunk *c = NULL;
	struct rec_ext *p = NULL;
	int rc;

	/* Made out of any read-side section (see chunk_make()). */
	rcu_might_sleep();
	if (what == TABLE_EMPTY && (k->cfg.flags & KAIROS_HUGE_PAGES)) {
		void *mem = region_carve(k, need->shard, &rc);

		if (!mem)
			return rc;
		c = chunk_make(k, need->shard, mem);	/* unmaps @mem if it fails */
	} else if (what == TABLE_EMPTY) {
		c = chunk_make(k, need->shard, NULL);
	} else {
		p = fault_calloc(CHUNK_RECS, sizeof(*p));
	}
	if (!c && !p)
		return -ENOMEM;
	rc = service_enter(k);
	if (rc == 0) {
		struct shard *s = k->shards[need->shard];

		if (c) {
			if (chunk_install(s, c))
				c = NULL;
			else
				rc = -ENOMEM;
		} else {
			struct rec_chunk *owner = atomic_load_explicit(&s->chunk[need->chunk],
								       memory_order_acquire);
			struct rec_ext *none = NULL;

			/* Release: the array's zeroes before its pointer.  Lost: another made it. */
			if (atomic_compare_exchange_strong_explicit(&owner->h.head.ext, &none, p,
								    memory_order_release,
								    memory_order_relaxed))
				p = NULL;
		}
		service_leave();
	}
	if (c)
		chunk_unmake(c);
	free(p);
	return rc;
}

void table_kick(struct kairos *k)
{
	atomic_fetch_add_explicit(&k->reclaim_seq, 1, memory_order_release);
	futex_wake32(&k->reclaim_seq, 1);
}
/*
 * Retired records wait for the reclaimer as bundles, like free ones: a
 * stack of bundle heads linked through inbox_next, each bundle chained
 * through wt.link.next, its size in the head's wt.slack (dead data once a
 * record has ended).  Pushes @head's bundle of @n records.
 */
static void retired_push(struct kairos *k, struct shard *s, struct rec *head, unsigned n)
{
	struct rec *old = atomic_load_explicit(&s->retired, memory_order_relaxed);

	/* Atomic: the shard may look at an old entry of this record meanwhile (arrival.c). */
	__atomic_store_n(&head->wt.slack, n, __ATOMIC_RELAXED);
	atomic_fetch_add_explicit(&s->retired_n, n, memory_order_relaxed);
	do {
		rec_link_set(head, old);
	} while (!atomic_compare_exchange_weak_explicit(&s->retired, &old, head,
							memory_order_release,
							memory_order_relaxed));
	/* The first bundle of a batch wakes the reclaimer; later ones ride along. */
	if (!old)
		table_kick(k);
}

/*
 * table_retire - hands an ended record of @s to the reclaimer.  Any thread;
 * the record must not be reachable from any queue of the service any more.
 */
void table_retire(struct kairos *k, struct shard *s, struct rec *r)
{
	ended_mark(r);
	key_release(k, r);
	free_set_next(r, NULL);
	r->ahead = NULL;
	retired_push(k, s, r, 1);
}

/*
 * rbundle_add - a thread that ends many records in a row (the shard taking
 * its inbox) collects them into bundles of its own and hands each over with
 * one CAS, so that neither it nor the reclaimer touches a record twice.
 */
void rbundle_add(struct kairos *k, struct shard *s, struct rbundle *b, struct rec *r)
{
	ended_mark(r);
	rbundle_link(k, b, r);
	if (b->n == BUNDLE_RECS)
		rbundle_flush(k, s, b);
}

/*
 * The first cancel a thread keeps into an empty bundle (table_keep(),
 * table.h): the bundle is for the thread's shard, and the reclaimer must
 * know that one is open.
 */
void table_keep_open(struct kairos *k, struct tstate *t)
{
	t->kept_s = t->s;
	/*
	 * seq_cst store, then load: pairs with ts_collect_kept()'s clear of
	 * kept_watch and its look at kept_open, so that either the reclaimer
	 * sees this bundle open or this thread sees it not watching and wakes
	 * it.  Once a bundle.
	 */
	atomic_store_explicit(&t->kept_open, 1, memory_order_seq_cst);
	if (!atomic_load_explicit(&k->kept_watch, memory_order_seq_cst) &&
	    !atomic_exchange_explicit(&k->kept_watch, 1, memory_order_seq_cst))
		table_kick(k);
}

/*
 * Hands @t's kept cancels to the reclaimer, their ended bytes stored first,
 * and counts them towards their shard's next sweep of stale entries.  The
 * flush that brings the count to where the shard said a sweep comes due
 * (sweep_due_kept) asks the reclaimer to wake the shard once they stop
 * coming (shard_sweep_asks()), so that a quiet shard sweeps them as it
 * would posted cancels, and not in the middle of the burst whose ended
 * bytes the sweep reads.  Called by the bundle's holder: the thread, or
 * the reclaimer while kept_steal is set.
 */
void table_keep_flush(struct kairos *k, struct tstate *t)
{
	struct shard *s = t->kept_s;
	unsigned n = t->kept.n;
	uint64_t was, due;

	if (!n)
		return;
	for (unsigned i = 0; i < n; i++)
		atomic_store_explicit(t->kept_end[i], t->kept_gen[i], memory_order_relaxed);
	rbundle_flush(k, s, &t->kept);
	atomic_store_explicit(&t->kept_open, 0, memory_order_relaxed);
	atomic_store_explicit(&t->kept_flushes,
			      atomic_load_explicit(&t->kept_flushes, memory_order_relaxed) + 1,
			      memory_order_relaxed);
	/*
	 * seq_cst add, then load: pairs with the shard's store of a new
	 * sweep_due_kept and its look at far_kept after it (sweep_due_at()),
	 * so that either this flush sees the bound or the shard sees the count.
	 */
	was = atomic_fetch_add_explicit(&s->far_kept, n, memory_order_seq_cst);
	due = atomic_load_explicit(&s->sweep_due_kept, memory_order_seq_cst);
	if (was < due && was + n >= due) {
		/* Release: this flush's far_kept before the ask (shard_sweep_asks()). */
		atomic_store_explicit(&s->sweep_ask, 1, memory_order_release);
		table_kick(k);
	}
	/* For TSan, as in table_keep(): a flush by the thread, in its section. */
	tsan_published(&t->kept);
}

void rbundle_flush(struct kairos *k, struct shard *s, struct rbundle *b)
{
	if (b->n)
		retired_push(k, s, b->first, b->n);
	b->first = b->last = NULL;
	b->n = 0;
}

/*
 * Makes the bundles retired on @s free, past their grace period: large ones
 * as they are, small ones (a worker retires one record at a time) merged,
 * so that a thread's pop still brings it many records.  One CAS in all.
 */
static void reclaim_shard(struct shard *s, struct rec *heads)
{
	struct rec *out = NULL, *out_last = NULL, *acc = NULL, *acc_last = NULL;
	unsigned acc_n = 0;
	uint64_t all = 0;

	while (heads) {
		struct rec *b = heads, *tail = b;
		unsigned n = __atomic_load_n(&b->wt.slack, __ATOMIC_RELAXED);

		all += n;
		heads = rec_link(b);
		if (n < BUNDLE_RECS / 2) {
			/* Small: walk it (it is short) onto the bundle being merged. */
			while (free_next(tail))
				tail = free_next(tail);
			if (acc_last)
				free_set_next(acc_last, b);
			else
				acc = b;
			acc_last = tail;
			acc_n += n;
			if (acc_n < BUNDLE_RECS / 2)
				continue;
			b = acc;
			acc = acc_last = NULL;
			acc_n = 0;
		}
		heads_append(&out, &out_last, b);
	}
	if (acc)
		heads_append(&out, &out_last, acc);
	if (out)
		stack_push(&s->free_head, out, out_last);
	/* seq_cst: before the reclaimer's look at ev_waiters (reclaim_pass()). */
	atomic_fetch_sub_explicit(&s->retired_n, all, memory_order_seq_cst);
}

/*
 * Whether an arm about to take a new bundle of @s's records should wait for
 * the reclaimer first (internal.h says why each): RECLAIM_LIMIT_HARD of
 * them are in its hands; or none is free, so the bundle would grow the
 * pool, while it holds RECLAIM_LIMIT in a pass that has lasted
 * RECLAIM_SLOW_NS.  The clock is read only past the counts.
 */
bool table_reclaim_behind(struct shard *s)
{
	/* seq_cst: pairs with reclaim_shard()'s, for a held-back arm (kairos.c). */
	uint64_t n = atomic_load_explicit(&s->retired_n, memory_order_seq_cst);

	if (n >= RECLAIM_LIMIT_HARD)
		return true;
	return n >= RECLAIM_LIMIT && !atomic_load_explicit(&s->free_head, memory_order_relaxed) &&
	       clock_now_ns(CLOCK_MONOTONIC) -
			       atomic_load_explicit(&s->k->reclaim_begun, memory_order_relaxed) >=
		       RECLAIM_SLOW_NS;
}

/*
 * Moves every retired record back to its free stack after one grace period,
 * and frees the key nodes removed so far (key.c) after the same one.
 */
static bool reclaim_pass(struct kairos *k)
{
	struct rec *taken[MAX_SHARDS];
	struct key_node *garbage = key_garbage_take(k);
	bool any = garbage != NULL;

	for (unsigned i = 0; i < k->nshards; i++) {
		/* Acquire pairs with table_retire()'s release. */
		taken[i] = atomic_exchange_explicit(&k->shards[i]->retired, NULL,
						    memory_order_acquire);
		any |= taken[i] != NULL;
	}
	if (!any)
		return false;
	/* Relaxed: a held-back arm only compares it with its own clock read. */
	atomic_store_explicit(&k->reclaim_begun, clock_now_ns(CLOCK_MONOTONIC),
			      memory_order_relaxed);
	/* No reader that could still see these records survives this. */
	synchronize_rcu();
	for (unsigned i = 0; i < k->nshards; i++)
		if (taken[i])
			reclaim_shard(k->shards[i], taken[i]);
	if (garbage) {
		tsan_key_grace_done(k);
		key_garbage_free(garbage);
	}
	/* Arms held back for a reclaimer that was behind look again (kairos.c). */
	if (atomic_load_explicit(&k->ev_waiters, memory_order_seq_cst))
		service_event(k);
	return true;
}

/*
 * The least time from one grace period to the next while records keep
 * retiring.  Each grace period interrupts every CPU that runs a thread of
 * the process (liburcu's membarrier), and back to back they came thousands
 * of times a second under churn; paced, the records of a busy service wait
 * up to this much longer for reuse instead.
 */
#define RECLAIM_PACE_NS	(1000 * 1000)

static void *reclaimer_main(void *arg)
{
	struct kairos *k = arg;
	uint64_t look = 0;	/* when to look at the threads' kept cancels next */

	thread_name("reclaim", -1, -1);
	for (;;) {
		uint32_t seq = atomic_load_explicit(&k->reclaim_seq, memory_order_acquire);
		uint64_t now, sweep, at;

		/* The key table follows its count; a kick after inserts asks for it. */
		key_resize(k);
		/* Queues whose last timer was cancelled after their destroy. */
		queue_reap(k);
		now = clock_now_ns(CLOCK_MONOTONIC);
		/* Kept cancels of quiet threads, every KEPT_SCAN_NS while any may be held. */
		if (atomic_load_explicit(&k->kept_watch, memory_order_acquire) && now >= look) {
			look = ts_collect_kept(k) ? now + KEPT_SCAN_NS : 0;
			now = clock_now_ns(CLOCK_MONOTONIC);
		}
		/* Sweeps asked for by kept cancels, once these pause. */
		sweep = shard_sweep_asks(k, now);
		if (reclaim_pass(k)) {
			/* Only a stop cuts the pause short. */
			(void)futex_wait32_for(&k->reclaim_stop, 0, RECLAIM_PACE_NS);
			continue;
		}
		if (atomic_load_explicit(&k->reclaim_stop, memory_order_acquire))
			break;
		/*
		 * Sleeps until a retire, a kept bundle, a sweep's ask or the stop
		 * bumps the sequence, or until it must look again.
		 */
		at = look && (!sweep || look < sweep) ? look : sweep;
		if (at > now)
			(void)futex_wait32_for(&k->reclaim_seq, seq, at - now);
		else if (!at)
			futex_wait32(&k->reclaim_seq, seq);
	}
	return NULL;
}

int table_reclaimer_start(struct kairos *k)
{
	if (fault_hit())
		return -EAGAIN;
	/* As if a pass began now: no arm waits before the first one. */
	atomic_store_explicit(&k->reclaim_begun, clock_now_ns(CLOCK_MONOTONIC),
			      memory_order_relaxed);
	return -thread_start(&k->reclaimer, reclaimer_main, k);
}

void table_reclaimer_stop(struct kairos *k)
{
	atomic_store_explicit(&k->reclaim_stop, 1, memory_order_release);
	futex_wake32(&k->reclaim_stop, 1);
	table_kick(k);
	thread_join(k->reclaimer);
}

void table_free(struct shard *s)
{
	unsigned n = atomic_load_explicit(&s->nchunks, memory_order_acquire);
	uint64_t region = atomic_load_explicit(&s->region, memory_order_relaxed);
	unsigned used = region_used(region);

	/* The chunks of the last region that no one carved. */
	if (region && used < REGION_CHUNKS)
		munmap(region_base(region) + (size_t)used * CHUNK_BYTES,
		       (size_t)(REGION_CHUNKS - used) * CHUNK_BYTES);

	for (unsigned i = 0; i < n; i++) {
		struct rec_chunk *c = atomic_load_explicit(&s->chunk[i], memory_order_relaxed);

		free(atomic_load_explicit(&c->h.head.ext, memory_order_relaxed));
		free((void *)c->h.head.ended);
		munmap(c, CHUNK_BYTES);
	}
	atomic_store_explicit(&s->nchunks, 0, memory_order_relaxed);
}
