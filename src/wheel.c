/* SPDX-License-Identifier: MIT */
/*
 * wheel.c - hierarchical timing wheel.
 *
 * Why this shape
 * --------------
 * A kairos shard holds up to millions of timers, most of them idle timeouts
 * that are pushed later on every packet and cancelled at close; few ever
 * fire.  The structure must make add, cancel and push-later O(1) with a
 * small constant, find the next expiry without scanning, and expire in
 * batches.  A heap costs O(log n) cache misses per operation; a hashed
 * wheel with one level costs a scan per tick.  A hierarchy of 64-slot
 * levels with one uint64_t occupancy bitmap per level gives O(1) add and
 * cancel, and the next non-empty slot in O(levels) by ctz().
 *
 * Filing rule
 * -----------
 * Time is a 64-bit tick counter.  A record whose fire tick is F, filed
 * while the current tick is C, goes to level g = the highest 6-bit digit in
 * which F and C differ, slot = digit g of F.  Because F > C, that digit of F
 * is larger than C's, so the slot lies ahead of the current position of its
 * level; it is "visited" when the counter reaches V = F with digits below g
 * cleared.  At the visit each record either fires (F <= now) or is re-filed
 * against the new current tick, always to a lower level.  A record filed
 * directly at level 0 (F within the current 64-tick block) fires exactly at
 * its visit.  So exact timers are never early and never late by more than
 * the wake-up latency; a timer 30 s out at 1 ms ticks is re-filed at most
 * twice on its way down.
 *
 * Two useful consequences of the rule: a record's level and slot depend
 * only on (F, C), so all records with the same fire tick always share a
 * slot, and appending at the tail keeps them in the order they were added,
 * with no sequence number; and the earliest visit is always in the lowest
 * non-empty level, at its lowest set occupancy bit (wheel_next()).
 *
 * Slack
 * -----
 * A record with slack S may fire anywhere in [D, D + S].  The wheel picks
 * the fire tick in that range with the most trailing zero bits
 * (wheel_fire_tick()).  A fire tick whose low digits are zero is visited
 * directly at the level of its highest differing digit and fires there,
 * with no re-filing: Linux's non-cascading wheel gets its speed from the
 * same freedom.  Slack changes only F; the filing rule is the same.
 *
 * Push-later in place
 * -------------------
 * Moving a deadline later is a store when the record's current slot is
 * visited no later than the new fire tick: the slot's visit re-files it.
 * This is part of the wheel's contract, not a special case: the invariant
 * is that every record sits where it is visited no later than its fire tick,
 * and a later deadline keeps that true.  The store may even come from
 * another thread (the service's resetters) between two wheel calls, which
 * is why the deadline word is accessed with relaxed atomics.  Moving earlier
 * (or any move of a due record) relinks.
 *
 * Levels at the default 1 ms tick
 * -------------------------------
 *   level  slot width          level range
 *     0        1 ms               64 ms
 *     1       64 ms              4.1 s
 *     2      4.1 s               4.4 min
 *     3      4.4 min             4.7 h
 *     4      4.7 h              12.4 days
 *     5     12.4 days            2.2 years
 *     6      2.2 years           139 years
 *     7      139 years           8,900 years
 *   overflow: fire ticks in a later 2^48-tick block than the current one;
 *   the list is re-filed when the counter reaches the block of its earliest
 *   record, so a jump across many blocks costs one pass, not one per block.
 * The level range is how far ahead a record can be when filed there.
 *
 * Visiting a slot: the log
 * ------------------------
 * A visit walks the slot's list, and a list is a chain of dependent loads:
 * the next record's address is in the record before, so on a large wheel
 * each record of the walk is a cache miss that waits for the one before
 * (about the cost of the "chase" floor in kairos-bench wheel).  An exact
 * timer 30 s out is walked three times on its way down.  So each slot also
 * keeps a log of the addresses of the records filed in it, in filing
 * order, and the visit prefetches WHEEL_LOG_AHEAD entries ahead of the
 * record in hand: the misses overlap instead of queueing.
 *
 * The log is only a hint, never a second copy of the truth.  Taking a
 * record out leaves its entry stale (finding it would cost the miss the
 * log is there to hide); the walk skips stale entries by matching each
 * record against the log.  That works because the list's records appear
 * in the log in list order, both appended at the tail, so the match never
 * runs ahead of the record's true entry.  An entry keeps the address's low
 * 32 bits and borrows the high ones from the record in hand: records of
 * one owner lie far closer together than 4 GiB, and a wrong prefetch costs
 * nothing but the prefetch.  A log stops (until its slot empties or is
 * visited) when it cannot grow or when growing it would leave more than
 * half its entries stale; then the rest of that visit walks unhinted.
 *
 * Entries
 * -------
 * Linking a record writes it, and so does unlinking it (and its two
 * neighbours).  When the owner's records are armed and cancelled by other
 * threads, each such write costs the next call on the record a cache-line
 * transfer from the owner's core; even a load does, since the caller's
 * write must then take the line back.  So an owner may file a record that
 * is far off by value instead: an entry of its index and generation in an
 * array per slot, from level WHEEL_ENTRY_LEVEL up.  The wheel does not
 * touch the record until the slot is visited (at the earliest 4,096 ticks
 * after it could have been filed there, by the filing rule), and never
 * unlinks it: the owner lets an entry go stale (a cancel, a new life of
 * the record, or its own decision to link it) without telling the wheel.
 *
 * The visit asks the owner, for each entry, whether it still stands and
 * when its record fires (look()), loading the records WHEEL_ENT_AHEAD
 * entries early (prefetch()).  A record still far is filed by value again,
 * in a later slot of a lower level (never the one being visited); a near
 * or due one is claimed (claim(), which fails if it went stale meanwhile)
 * and linked as wheel_insert() would.  A slot's array detaches for its
 * visit, so nothing else changes under the walk.
 *
 * Stale entries wait for their slot; a slot that reaches WHEEL_SWEEP_MIN
 * entries, or twice what its last sweep kept if that is more, is swept
 * before it takes another: the entries that the owner's gone() rules out
 * are dropped.  gone() reads what the owner keeps apart from its records,
 * so a sweep loads no record.  A slot whose sample of WHEEL_SWEEP_SAMPLE
 * entries finds at most one stale is not swept but grows, and is looked at
 * again at twice the size.  So a slot holds at most WHEEL_SWEEP_MIN
 * entries, or about twice those that stand while the samples tell right,
 * at an amortized two gone() per entry filed.  The visit asks gone() too,
 * and loads only the records of the entries it does not rule out.  Without
 * gone(), sweeps, samples and visits look() at every record.
 */
#include "wheel.h"
#include "mapping.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define WHEEL_MASK	((uint64_t)WHEEL_SLOTS - 1)
/* Ticks covered by all levels together: 2^48. */
#define WHEEL_SPAN_BITS	(WHEEL_BITS * WHEEL_LEVELS)

static inline void link_init(struct wheel_link *head)
{
	head->next = head;
	head->prev = head;
}

static inline bool link_empty(const struct wheel_link *head)
{
	return head->next == head;
}

static inline void link_append(struct wheel_link *head, struct wheel_link *l)
{
	l->prev = head->prev;
	l->next = head;
	head->prev->next = l;
	head->prev = l;
}

static inline void link_unlink(struct wheel_link *l)
{
	l->prev->next = l->next;
	l->next->prev = l->prev;
}

/* Entries the visit prefetches ahead of the record in hand. */
#define WHEEL_LOG_AHEAD		16
/* How far the visit looks for the record in hand among stale entries. */
#define WHEEL_LOG_WINDOW	16
/* Entries of a first log; and the stale entries a log may hold past half its length. */
#define WHEEL_LOG_MIN		16u
/* The most entries an emptied log keeps its memory for (1 KiB). */
#define WHEEL_LOG_KEEP		256u
/* The most entries a log keeps in malloc()ed memory (16 KiB); more are mapped. */
#define WHEEL_LOG_HEAP		4096u

/* Entries a visit or a sweep loads ahead of the one in hand. */
#define WHEEL_ENT_AHEAD		16
/* Entries of a slot's first array. */
#define WHEEL_ENT_FIRST		32u
/* The most entries a visited slot keeps its memory for (2 KiB). */
#define WHEEL_ENT_KEEP		256u

static inline uint32_t log_key(const struct wheel_timer *t)
{
	return (uint32_t)(uintptr_t)t;
}

/* In a log's stale word: the log stopped; it is used as far as it goes. */
#define WHEEL_LOG_STOP		(UINT32_C(1) << 31)

/*
 * A slot array's memory (a log's, or a slot's entries): from malloc() up
 * to WHEEL_LOG_HEAP log entries' worth, and above that a mapping of its
 * own, so that a large array freed goes back to the kernel at once rather
 * than staying in the allocator's arena of the thread that filed it (where
 * it would still count in the process's RSS).
 */
static bool arr_mapped(size_t bytes)
{
	return bytes > WHEEL_LOG_HEAP * sizeof(uint32_t);
}

static void arr_free(void *p, size_t bytes)
{
	if (arr_mapped(bytes))
		munmap(p, bytes);
	else
		free(p);
}

/*
 * Array @p of @bytes (@used of them in use) moved to memory of @want bytes;
 * NULL (and @p as it was) on failure.
 */
static void *arr_mem(void *p, size_t used, size_t bytes, size_t want)
{
	void *q;

	if (!arr_mapped(want) && !arr_mapped(bytes))
		return realloc(p, want);
	if (arr_mapped(want)) {
		q = mapping_copy(p, used, want);
	} else {
		/* A mapped array shrinking back into the heap. */
		q = malloc(want);
		if (q && used)
			memcpy(q, p, used);
	}
	if (q && p)
		arr_free(p, bytes);
	return q;
}

static void log_free(uint32_t *ent, uint32_t cap)
{
	arr_free(ent, (size_t)cap * sizeof(*ent));
}

/* @lg's entries moved to memory for @cap of them; NULL (and @lg as it was) on failure. */
static uint32_t *log_mem(const struct wheel_log *lg, uint32_t cap)
{
	return arr_mem(lg->ent, (size_t)lg->len * sizeof(*lg->ent),
		       (size_t)lg->cap * sizeof(*lg->ent), (size_t)cap * sizeof(*lg->ent));
}

/*
 * Makes room for one more entry in @lg; false when the log stops instead:
 * it cannot grow, or more than half of it would be stale.  A stopped log is
 * still right as far as it goes: the records filed after it stopped are
 * all behind its last entry's.
 */
static bool log_grow(struct wheel_log *lg)
{
	uint32_t cap = lg->cap ? lg->cap * 2 : WHEEL_LOG_MIN;
	uint32_t *ent;

	if (lg->stale & WHEEL_LOG_STOP)
		return false;
	if (lg->stale > lg->len / 2 + WHEEL_LOG_MIN || cap <= lg->cap)
		goto stop;
	ent = log_mem(lg, cap);
	if (!ent)
		goto stop;
	lg->ent = ent;
	lg->cap = cap;
	return true;
stop:
	lg->stale |= WHEEL_LOG_STOP;
	return false;
}

/* Notes @t as appended to the list of @lg. */
static inline void log_add(struct wheel_log *lg, const struct wheel_timer *t)
{
	if (__builtin_expect(lg->len == lg->cap, 0) && !log_grow(lg))
		return;
	lg->ent[lg->len++] = log_key(t);
}

/* Notes that a record left the list of @lg, which still holds others. */
static inline void log_stale(struct wheel_log *lg)
{
	if (!(lg->stale & WHEEL_LOG_STOP))
		lg->stale++;
}

/*
 * Empties @lg (its list emptied).  A log larger than WHEEL_LOG_KEEP entries
 * goes: a slot of a higher level is empty for a whole turn of its level once
 * visited, and the logs kept would add up to every slot's largest.
 */
static void log_reset(struct wheel_log *lg)
{
	if (lg->cap > WHEEL_LOG_KEEP) {
		log_free(lg->ent, lg->cap);
		lg->ent = NULL;
		lg->cap = 0;
	}
	lg->len = 0;
	lg->stale = 0;
}

/* Starts loading the record whose log entry is @key, near @near in memory. */
static inline void log_prefetch(const void *near, uint32_t key)
{
	uintptr_t hi = (uintptr_t)near & ~(uintptr_t)UINT32_MAX;

	__builtin_prefetch((const void *)(hi | key), 1);
}

/*
 * One step of a walk down a list with the first @len entries of its log
 * @ent: *@at is the entry after the last one matched, *@pf the next entry to
 * prefetch.  Moves *@at past the entry of @t, the record in hand (or by a
 * window, when it is not found there: it was not logged, or stale entries
 * crowd it), and prefetches up to WHEEL_LOG_AHEAD entries past it.
 */
static inline void log_follow(const uint32_t *ent, uint32_t len, uint32_t *at, uint32_t *pf,
			      const struct wheel_timer *t)
{
	uint32_t key = log_key(t), i = *at, stop = i + WHEEL_LOG_WINDOW, p = *pf;

	if (i >= len)
		return;
	if (stop > len)
		stop = len;
	while (i < stop && ent[i] != key)
		i++;
	if (i < stop)
		i++;
	while (p < len && p < i + WHEEL_LOG_AHEAD)
		log_prefetch(t, ent[p++]);
	*at = i;
	*pf = p;
}

static inline struct wheel_timer *link_timer(struct wheel_link *l)
{
	/* link is the first member, so the addresses coincide. */
	return (struct wheel_timer *)(void *)l;
}

/* The 6-bit group in which @a and @b differ, highest first; @a != @b. */
static inline unsigned diff_level(uint64_t a, uint64_t b)
{
	return (unsigned)(63 - __builtin_clzll(a ^ b)) / WHEEL_BITS;
}

static inline unsigned slot_of(unsigned where)
{
	return (where - 1) & WHEEL_MASK;
}

static inline unsigned level_of(unsigned where)
{
	return (where - 1) >> WHEEL_BITS;
}

static inline bool ents_level(unsigned g)
{
	return g >= WHEEL_ENTRY_LEVEL && g < WHEEL_LEVELS;
}

static inline struct wheel_ents *ents_at(struct wheel *w, unsigned g, unsigned s)
{
	return &w->ents[g - WHEEL_ENTRY_LEVEL][s];
}

/* Entries in slot @s of level @g (0 below the entry levels). */
static inline uint32_t slot_ents(const struct wheel *w, unsigned g, unsigned s)
{
	return ents_level(g) ? w->ents[g - WHEEL_ENTRY_LEVEL][s].len : 0;
}

/*
 * The tick at which slot @s of level @g is visited, given the current tick.
 * Non-empty slots always lie ahead of the level's current position, so the
 * visit is in the current rotation of that level.
 */
static inline uint64_t visit_tick(uint64_t curr, unsigned g, unsigned s)
{
	unsigned up = WHEEL_BITS * (g + 1);

	return ((curr >> up) << up) | ((uint64_t)s << (WHEEL_BITS * g));
}

/* The first tick of the 2^48-tick block that holds @tick. */
static inline uint64_t block_start(uint64_t tick)
{
	return tick >> WHEEL_SPAN_BITS << WHEEL_SPAN_BITS;
}

uint64_t wheel_fire_tick(uint64_t deadline, uint32_t slack)
{
	uint64_t hi;
	unsigned k;

	if (slack == 0 || deadline == 0)
		return deadline;
	hi = deadline + slack;
	if (hi < deadline)
		hi = UINT64_MAX;
	/*
	 * deadline - 1 < hi; at their highest differing bit k, hi has a 1 and
	 * deadline - 1 a 0.  Clearing hi's bits below k gives the smallest
	 * number above deadline - 1 with that prefix: the unique member of the
	 * range with the most trailing zeros.
	 */
	k = 63u - (unsigned)__builtin_clzll((deadline - 1) ^ hi);
	return hi & ~((UINT64_C(1) << k) - 1);
}

/*
 * The deadline word is read and written with relaxed atomics: the service
 * lets other threads store a later deadline into a record the wheel holds
 * (push-later as a store) and re-checks it, under the record's state word,
 * before anything fires.  Relaxed accesses compile to plain moves.
 */
static inline uint64_t deadline_of(const struct wheel_timer *t)
{
	return __atomic_load_n(&t->deadline, __ATOMIC_RELAXED);
}

static inline void deadline_set(struct wheel_timer *t, uint64_t deadline)
{
	__atomic_store_n(&t->deadline, deadline, __ATOMIC_RELAXED);
}

static inline uint64_t timer_fire(const struct wheel_timer *t)
{
	return wheel_fire_tick(deadline_of(t), t->slack);
}

void wheel_init(struct wheel *w, uint64_t now)
{
	w->curr = now;
	w->count = 0;
	w->ndue = 0;
	link_init(&w->due);
	w->due_log = (struct wheel_log){ 0 };
	w->due_at = 0;
	w->due_pf = 0;
	link_init(&w->overflow);
	w->overflow_visit = UINT64_MAX;
	w->eops = NULL;
	w->nents = 0;
	for (unsigned g = WHEEL_ENTRY_LEVEL; g < WHEEL_LEVELS; g++)
		for (unsigned s = 0; s < WHEEL_SLOTS; s++)
			*ents_at(w, g, s) = (struct wheel_ents){ 0 };
	for (unsigned g = 0; g < WHEEL_LEVELS; g++) {
		w->occupied[g] = 0;
		for (unsigned s = 0; s < WHEEL_SLOTS; s++) {
			link_init(&w->slot[g][s]);
			w->log[g][s] = (struct wheel_log){ 0 };
		}
	}
}

void wheel_fini(struct wheel *w)
{
	if (!w)
		return;
	for (unsigned g = 0; g < WHEEL_LEVELS; g++) {
		for (unsigned s = 0; s < WHEEL_SLOTS; s++) {
			log_free(w->log[g][s].ent, w->log[g][s].cap);
			w->log[g][s] = (struct wheel_log){ 0 };
		}
	}
	log_free(w->due_log.ent, w->due_log.cap);
	w->due_log = (struct wheel_log){ 0 };
	for (unsigned g = WHEEL_ENTRY_LEVEL; g < WHEEL_LEVELS; g++) {
		for (unsigned s = 0; s < WHEEL_SLOTS; s++) {
			struct wheel_ents *es = ents_at(w, g, s);

			arr_free(es->ent, (size_t)es->cap * sizeof(*es->ent));
			*es = (struct wheel_ents){ 0 };
		}
	}
	w->nents = 0;
}

void wheel_timer_init(struct wheel_timer *t)
{
	t->link.next = NULL;
	t->link.prev = NULL;
	deadline_set(t, 0);
	t->slack = 0;
	t->where = WHEEL_NONE;
	t->flags = 0;
}

size_t wheel_log_bytes(const struct wheel *w)
{
	size_t bytes = (size_t)w->due_log.cap * sizeof(*w->due_log.ent);

	for (unsigned g = 0; g < WHEEL_LEVELS; g++)
		for (unsigned s = 0; s < WHEEL_SLOTS; s++)
			bytes += (size_t)w->log[g][s].cap * sizeof(*w->log[g][s].ent) +
				 (ents_level(g) ? (size_t)w->ents[g - WHEEL_ENTRY_LEVEL][s].cap *
						  sizeof(struct wheel_entry) : 0);
	return bytes;
}

/*
 * The due log is full: drops the entries the pops are past, when they are
 * most of it, so that an owner that never empties the due list (it pops a
 * batch a round while more come due) does not grow the log for ever.  The
 * stale count may then count entries dropped: the log stops sooner, never
 * later.
 */
static void due_log_trim(struct wheel *w)
{
	struct wheel_log *lg = &w->due_log;
	uint32_t at = w->due_at;

	if (at <= lg->len / 2 || (lg->stale & WHEEL_LOG_STOP))
		return;
	memmove(lg->ent, lg->ent + at, (size_t)(lg->len - at) * sizeof(*lg->ent));
	lg->len -= at;
	w->due_pf = w->due_pf > at ? w->due_pf - at : 0;
	w->due_at = 0;
}

/* Appends @t to the due list. */
static inline void make_due(struct wheel *w, struct wheel_timer *t)
{
	t->where = WHEEL_DUE;
	link_append(&w->due, &t->link);
	if (__builtin_expect(w->due_log.len == w->due_log.cap, 0))
		due_log_trim(w);
	log_add(&w->due_log, t);
	w->ndue++;
}

/* The due list emptied: its log starts afresh. */
static inline void due_reset(struct wheel *w)
{
	log_reset(&w->due_log);
	w->due_at = 0;
	w->due_pf = 0;
}

/* Links @t for fire tick @fire, relative to the current tick; not counted. */
static void file(struct wheel *w, struct wheel_timer *t, uint64_t fire)
{
	unsigned g, s;

	if (fire <= w->curr) {
		make_due(w, t);
		return;
	}
	g = diff_level(fire, w->curr);
	if (g >= WHEEL_LEVELS) {
		/*
		 * Visit the list when the earliest block arrives, not at every
		 * 2^48 boundary: a jump across many blocks then costs one pass.
		 * Deletions leave the bound low (an early, harmless visit); an
		 * empty list starts it afresh.
		 */
		if (link_empty(&w->overflow) || block_start(fire) < w->overflow_visit)
			w->overflow_visit = block_start(fire);
		t->where = WHEEL_OVERFLOW;
		link_append(&w->overflow, &t->link);
		return;
	}
	s = (unsigned)(fire >> (WHEEL_BITS * g)) & WHEEL_MASK;
	t->where = (uint16_t)(1 + g * WHEEL_SLOTS + s);
	link_append(&w->slot[g][s], &t->link);
	log_add(&w->log[g][s], t);
	w->occupied[g] |= UINT64_C(1) << s;
}

/* Unlinks @t from wherever it is; keeps occupancy and the due count right. */
static void unfile(struct wheel *w, struct wheel_timer *t)
{
	unsigned where = t->where;

	link_unlink(&t->link);
	if (where == WHEEL_DUE) {
		if (--w->ndue == 0)
			due_reset(w);
		else
			log_stale(&w->due_log);
	} else if (where != WHEEL_OVERFLOW) {
		unsigned g = level_of(where), s = slot_of(where);

		if (link_empty(&w->slot[g][s])) {
			if (!slot_ents(w, g, s))
				w->occupied[g] &= ~(UINT64_C(1) << s);
			/* Starts afresh. */
			log_reset(&w->log[g][s]);
		} else {
			log_stale(&w->log[g][s]);
		}
	}
}

/* Whether @e is stale by the owner's word: gone(), else a look at its record. */
static bool ent_stale(const struct wheel_entry_ops *ops, struct wheel_entry e)
{
	uint64_t fire;

	return ops->gone ? ops->gone(ops->ctx, e) : !ops->look(ops->ctx, e, &fire);
}

/* Starts loading @e's record, unless gone() rules it out. */
static void ent_load(const struct wheel_entry_ops *ops, struct wheel_entry e)
{
	if (!ops->gone || !ops->gone(ops->ctx, e))
		ops->prefetch(ops->ctx, e);
}

/* Drops the stale entries of @es, keeping the others in their order. */
static void ents_sweep(struct wheel *w, struct wheel_ents *es)
{
	const struct wheel_entry_ops *ops = w->eops;
	uint32_t len = es->len, keep = 0;

	/* gone() reads owner memory of its own; only looks load records ahead. */
	for (uint32_t i = 0; !ops->gone && i < len && i < WHEEL_ENT_AHEAD; i++)
		ops->prefetch(ops->ctx, es->ent[i]);
	for (uint32_t i = 0; i < len; i++) {
		if (!ops->gone && i + WHEEL_ENT_AHEAD < len)
			ops->prefetch(ops->ctx, es->ent[i + WHEEL_ENT_AHEAD]);
		if (!ent_stale(ops, es->ent[i]))
			es->ent[keep++] = es->ent[i];
	}
	w->nents -= len - keep;
	es->len = keep;
	es->swept = keep;
}

/*
 * Whether the entries of @es mostly stand, judged by WHEEL_SWEEP_SAMPLE of
 * them spread over the array (at most one stale): then a sweep would ask
 * about every entry to drop few, and the slot grows instead (a slot of idle
 * timeouts, all standing, is never swept).  Its next look at a sweep is at
 * twice its size.
 */
#define WHEEL_SWEEP_SAMPLE	8

static bool sample_stands(const struct wheel_entry_ops *ops, struct wheel_ents *es)
{
	unsigned stale = 0;

	for (unsigned i = 0; i < WHEEL_SWEEP_SAMPLE; i++)
		stale += ent_stale(ops, es->ent[(uint64_t)es->len * i / WHEEL_SWEEP_SAMPLE]);
	if (stale >= WHEEL_SWEEP_SAMPLE / 4)
		return false;
	es->swept = es->len;
	return true;
}

/* Moves @es's entries to memory for @cap of them; false (and @es as it was) on failure. */
static bool ents_mem(struct wheel_ents *es, uint32_t cap)
{
	void *p = arr_mem(es->ent, (size_t)es->len * sizeof(*es->ent),
			  (size_t)es->cap * sizeof(*es->ent), (size_t)cap * sizeof(*es->ent));

	if (!p)
		return false;
	es->ent = p;
	es->cap = cap;
	return true;
}

/* The length at which @es is next looked at for a sweep. */
static uint32_t ents_limit(const struct wheel_ents *es)
{
	return es->swept > WHEEL_SWEEP_MIN / 2 ? es->swept * 2 : WHEEL_SWEEP_MIN;
}

/*
 * After a sweep of @es: gives back the memory that most of a large array
 * no longer needs, and sets the length at which an add next stops by.
 */
static void ents_fit(struct wheel_ents *es)
{
	uint32_t limit;

	while (es->cap > WHEEL_ENT_KEEP && es->len < es->cap / 4 && ents_mem(es, es->cap / 2))
		;
	limit = ents_limit(es);
	es->room = es->cap < limit ? es->cap : limit;
}

/*
 * Makes room for one more entry in @es, which reached its room: a sweep
 * when it holds WHEEL_SWEEP_MIN entries or twice what the last sweep kept,
 * then more memory if it is still full.  False when it cannot grow.
 */
static bool ents_room(struct wheel *w, struct wheel_ents *es)
{
	if (es->len >= ents_limit(es) && !sample_stands(w->eops, es))
		ents_sweep(w, es);
	if (es->len == es->cap) {
		uint32_t cap = es->cap ? es->cap * 2 : WHEEL_ENT_FIRST;

		if (cap <= es->cap || !ents_mem(es, cap))
			return false;
	}
	ents_fit(es);
	return true;
}

/* Files @e by value in slot (@g, digit @g of @fire); false when the slot cannot grow. */
static bool ents_add(struct wheel *w, unsigned g, uint64_t fire, struct wheel_entry e)
{
	unsigned s = (unsigned)(fire >> (WHEEL_BITS * g)) & WHEEL_MASK;
	struct wheel_ents *es = ents_at(w, g, s);

	if (__builtin_expect(es->len >= es->room, 0) && !ents_room(w, es))
		return false;
	es->ent[es->len++] = e;
	w->nents++;
	w->occupied[g] |= UINT64_C(1) << s;
	return true;
}

void wheel_set_entry_ops(struct wheel *w, const struct wheel_entry_ops *ops)
{
	w->eops = ops;
}

int wheel_file_entry(struct wheel *w, struct wheel_entry e, uint64_t fire)
{
	unsigned g;

	if (!w || !w->eops)
		return -EINVAL;
	if (fire <= w->curr)
		return -EAGAIN;
	g = diff_level(fire, w->curr);
	if (!ents_level(g))
		return -EAGAIN;
	return ents_add(w, g, fire, e) ? 0 : -ENOMEM;
}

uint64_t wheel_sweep_entries(struct wheel *w)
{
	uint64_t held;

	if (!w || !w->eops || !w->eops->gone)
		return 0;
	held = w->nents;
	for (unsigned g = WHEEL_ENTRY_LEVEL; g < WHEEL_LEVELS; g++) {
		for (unsigned s = 0; s < WHEEL_SLOTS; s++) {
			struct wheel_ents *es = ents_at(w, g, s);

			if (!es->len)
				continue;
			ents_sweep(w, es);
			ents_fit(es);
			if (!es->len && link_empty(&w->slot[g][s]))
				w->occupied[g] &= ~(UINT64_C(1) << s);
		}
	}
	return held - w->nents;
}

int wheel_add(struct wheel *w, struct wheel_timer *t, uint64_t deadline, uint32_t slack)
{
	if (!w || !t)
		return -EINVAL;
	if (t->where != WHEEL_NONE)
		return -EBUSY;
	deadline_set(t, deadline);
	t->slack = slack;
	return wheel_insert(w, t);
}

int wheel_insert(struct wheel *w, struct wheel_timer *t)
{
	if (!w || !t)
		return -EINVAL;
	if (t->where != WHEEL_NONE)
		return -EBUSY;
	file(w, t, timer_fire(t));
	w->count++;
	return 0;
}

int wheel_del(struct wheel *w, struct wheel_timer *t)
{
	if (!w || !t)
		return -EINVAL;
	if (t->where == WHEEL_NONE)
		return -ENOENT;
	unfile(w, t);
	t->where = WHEEL_NONE;
	w->count--;
	return 0;
}

/* Files @t again for its current fire tick. */
static void relink(struct wheel *w, struct wheel_timer *t)
{
	unfile(w, t);
	file(w, t, timer_fire(t));
}

/* Whether @t's current slot is visited no later than its fire tick. */
static bool visit_in_time(const struct wheel *w, const struct wheel_timer *t)
{
	unsigned where = t->where;
	uint64_t visit;

	if (where == WHEEL_DUE)
		return false;	/* already handed out: must relink */
	if (where == WHEEL_OVERFLOW)
		visit = w->overflow_visit;
	else
		visit = visit_tick(w->curr, level_of(where), slot_of(where));
	return visit <= timer_fire(t);
}

int wheel_update(struct wheel *w, struct wheel_timer *t, uint64_t deadline)
{
	bool later;

	if (!w || !t)
		return -EINVAL;
	if (t->where == WHEEL_NONE)
		return -ENOENT;
	/*
	 * Moving later needs no look at the slot: fire ticks grow with the
	 * deadline (wheel_fire_tick() is monotonic for a fixed slack) and the
	 * slot is visited no later than the old fire tick.  Only a due record
	 * must move.  Moving earlier always relinks, so it keeps the add order.
	 */
	later = deadline >= deadline_of(t) && t->where != WHEEL_DUE;
	deadline_set(t, deadline);
	if (later)
		return 0;	/* the slot's visit comes first and re-files it */
	relink(w, t);
	return 0;
}

int wheel_refresh(struct wheel *w, struct wheel_timer *t)
{
	if (!w || !t)
		return -EINVAL;
	if (t->where == WHEEL_NONE)
		return -ENOENT;
	if (!visit_in_time(w, t))
		relink(w, t);
	return 0;
}

/*
 * Visits a slot list at the current tick: fire what is due, re-file the
 * rest; or, with @flush, make every record due whatever its fire tick.
 * @lg is the slot's log (NULL for the overflow list), which the caller
 * empties afterwards; nothing is filed back into the slot being visited (a
 * record re-files to a lower level, or to a later slot of its own level
 * when pushed there in place), so its entries stay put during the walk.
 */
static uint64_t visit_list(struct wheel *w, struct wheel_link *head, struct wheel_log *lg,
			   bool flush)
{
	struct wheel_link *l, *next, *end = head->prev;
	uint64_t ndue = w->ndue;
	const uint32_t *ent = lg ? lg->ent : NULL;
	uint32_t len = lg ? lg->len : 0, at = 0, pf = 0;

	if (link_empty(head))
		return 0;
	l = head->next;
	link_init(head);
	/*
	 * Walk the detached chain without unlinking node by node (file()
	 * rewrites each node's links anyway), prefetching from the log.
	 */
	for (;;) {
		struct wheel_timer *t = link_timer(l);

		log_follow(ent, len, &at, &pf, t);
		next = l->next;
		if (flush)
			make_due(w, t);
		else
			file(w, t, timer_fire(t));
		if (l == end)
			break;
		l = next;
	}
	return w->ndue - ndue;
}

/* Takes the record of @e from its owner and links it (due, with @flush). */
static void ent_take(struct wheel *w, struct wheel_entry e, bool flush)
{
	struct wheel_timer *t = w->eops->claim(w->eops->ctx, e);

	if (!t)
		return;	/* stale since it was looked at */
	w->count++;
	if (flush)
		make_due(w, t);
	else
		file(w, t, timer_fire(t));
}

/*
 * Visits the entries of slot @s of level @g at the current tick (as
 * visit_list() does its list): drops the stale, files the far by value
 * again, claims and links the rest; with @flush, claims every one that
 * stands and makes it due.
 */
static uint64_t visit_ents(struct wheel *w, unsigned g, unsigned s, bool flush)
{
	struct wheel_ents *es = ents_at(w, g, s), mine = *es;
	const struct wheel_entry_ops *ops = w->eops;
	uint64_t ndue = w->ndue;

	if (!mine.len)
		return 0;
	/* Detached: re-filing never comes back to this slot, but may sweep others. */
	*es = (struct wheel_ents){ 0 };
	w->nents -= mine.len;
	for (uint32_t i = 0; i < mine.len && i < WHEEL_ENT_AHEAD; i++)
		ent_load(ops, mine.ent[i]);
	for (uint32_t i = 0; i < mine.len; i++) {
		struct wheel_entry e = mine.ent[i];
		uint64_t fire;

		if (i + WHEEL_ENT_AHEAD < mine.len)
			ent_load(ops, mine.ent[i + WHEEL_ENT_AHEAD]);
		/* A record that gone() rules out is neither loaded nor looked at. */
		if ((ops->gone && ops->gone(ops->ctx, e)) || !ops->look(ops->ctx, e, &fire))
			continue;
		if (!flush && fire > w->curr) {
			unsigned g2 = diff_level(fire, w->curr);

			if (ents_level(g2) && ents_add(w, g2, fire, e))
				continue;
		}
		ent_take(w, e, flush);
	}
	/* A visited slot's level moves on past it: keep only a small array. */
	if (mine.cap > WHEEL_ENT_KEEP) {
		arr_free(mine.ent, (size_t)mine.cap * sizeof(*mine.ent));
	} else {
		es->ent = mine.ent;
		es->cap = mine.cap;
	}
	return w->ndue - ndue;
}

/*
 * Visits the lowest occupied slot of level @g (as visit_list(), then its
 * entries), and empties it and its log.
 */
static uint64_t visit_first_slot(struct wheel *w, unsigned g, bool flush)
{
	unsigned s = (unsigned)__builtin_ctzll(w->occupied[g]);
	uint64_t n;

	w->occupied[g] &= ~(UINT64_C(1) << s);
	n = visit_list(w, &w->slot[g][s], &w->log[g][s], flush);
	log_reset(&w->log[g][s]);
	if (ents_level(g))
		n += visit_ents(w, g, s, flush);
	return n;
}

/* The next tick at which a slot (or the overflow list) is visited. */
static uint64_t next_visit(const struct wheel *w)
{
	for (unsigned g = 0; g < WHEEL_LEVELS; g++) {
		uint64_t bits = w->occupied[g];

		if (bits)
			return visit_tick(w->curr, g, (unsigned)__builtin_ctzll(bits));
	}
	if (!link_empty(&w->overflow))
		return w->overflow_visit;
	return UINT64_MAX;
}

uint64_t wheel_advance(struct wheel *w, uint64_t now)
{
	uint64_t fired = 0;

	while (w->curr < now) {
		uint64_t next = next_visit(w);
		unsigned g;

		if (next > now) {
			/* Nothing is visited before @now: jump straight there. */
			w->curr = now;
			break;
		}
		/*
		 * next_visit() is the visit of the lowest set bit of the lowest
		 * non-empty level, or the overflow boundary when the levels are
		 * empty; exactly one list is visited at that tick.
		 */
		w->curr = next;
		for (g = 0; g < WHEEL_LEVELS; g++)
			if (w->occupied[g])
				break;
		if (g == WHEEL_LEVELS) {
			/* Re-filing recomputes the bound from what stays. */
			w->overflow_visit = UINT64_MAX;
			fired += visit_list(w, &w->overflow, NULL, false);
		} else {
			fired += visit_first_slot(w, g, false);
		}
	}
	return fired;
}

void wheel_flush(struct wheel *w)
{
	for (unsigned g = 0; g < WHEEL_LEVELS; g++)
		while (w->occupied[g])
			visit_first_slot(w, g, true);
	visit_list(w, &w->overflow, NULL, true);
	w->overflow_visit = UINT64_MAX;
}

struct wheel_timer *wheel_pop(struct wheel *w)
{
	struct wheel_timer *t;

	if (link_empty(&w->due))
		return NULL;
	t = link_timer(w->due.next);
	log_follow(w->due_log.ent, w->due_log.len, &w->due_at, &w->due_pf, t);
	link_unlink(&t->link);
	t->where = WHEEL_NONE;
	if (--w->ndue == 0)
		due_reset(w);
	w->count--;
	return t;
}

uint64_t wheel_next(const struct wheel *w)
{
	return w->ndue ? w->curr : next_visit(w);
}

/* Checks one list's links and that every node claims @where; counts nodes. */
static const char *check_list(const struct wheel_link *head, unsigned where, uint64_t *n)
{
	const struct wheel_link *l = head;

	*n = 0;
	do {
		if (!l->next || !l->prev)
			return "NULL link in a list";
		if (l->next->prev != l)
			return "list link not mirrored (next->prev != node)";
		l = l->next;
		if (l != head) {
			if (link_timer((struct wheel_link *)l)->where != where)
				return "record's where does not name the list it is on";
			if (++*n > (UINT64_C(1) << 40))
				return "list does not close (cycle without its head)";
		}
	} while (l != head);
	return NULL;
}

/* The fire tick to check @t against, or false when its owner says it is in flight. */
static bool check_fire(const struct wheel_check_ops *ops, const struct wheel_timer *t,
		       uint64_t *fire)
{
	if (ops)
		return ops->fire(t, ops->ctx, fire);
	*fire = timer_fire(t);
	return true;
}

/* Whether the records of the list @head appear in @lg from entry @at on, in list order. */
static bool check_log_order(const struct wheel_log *lg, const struct wheel_link *head, uint32_t at)
{
	for (const struct wheel_link *l = head->next; l != head; l = l->next) {
		uint32_t key = log_key(link_timer((struct wheel_link *)l));

		while (at < lg->len && lg->ent[at] != key)
			at++;
		if (at == lg->len)
			return false;
		at++;
	}
	return true;
}

/*
 * Checks a slot's log against its list of @n records.  While the log has not
 * stopped, every record filed since the slot was last empty left an entry
 * and every one taken out left a stale one, and the list's records appear
 * in it in list order (what the visit's matching relies on to stay behind
 * the true entry).
 */
static const char *check_log(const struct wheel *w, unsigned g, unsigned s, uint64_t n)
{
	const struct wheel_log *lg = &w->log[g][s];

	if (lg->len > lg->cap || (lg->cap && !lg->ent))
		return "slot log longer than its memory";
	if (!n && (lg->len || lg->stale))
		return "empty slot with a log";
	if (lg->stale & WHEEL_LOG_STOP)
		return NULL;
	if (lg->len != n + lg->stale)
		return "slot log's length is not its records plus its stale entries";
	if (!check_log_order(lg, &w->slot[g][s], 0))
		return "record missing from its slot's log (or out of list order)";
	return NULL;
}

/* The due list's log: the pops' place in it, and the records still due after it. */
static const char *check_due_log(const struct wheel *w)
{
	const struct wheel_log *lg = &w->due_log;

	if (lg->len > lg->cap || (lg->cap && !lg->ent))
		return "due log longer than its memory";
	if (w->due_at > lg->len || w->due_pf > lg->len)
		return "pops' place beyond the due log";
	if (!w->ndue && (lg->len || lg->stale || w->due_at))
		return "empty due list with a log";
	if (!(lg->stale & WHEEL_LOG_STOP) && !check_log_order(lg, &w->due, w->due_at))
		return "due record missing from the due log after the pops' place";
	return NULL;
}

/* A slot's entries: their memory, and that each that stands fires no earlier than @visit. */
static const char *check_ents(const struct wheel *w, unsigned g, unsigned s, uint64_t visit)
{
	const struct wheel_ents *es;

	if (!ents_level(g))
		return NULL;
	es = &w->ents[g - WHEEL_ENTRY_LEVEL][s];
	if (es->len > es->cap || (es->cap && !es->ent))
		return "slot entries longer than their memory";
	if (es->len && !w->eops)
		return "entries in a wheel without entry ops";
	for (uint32_t i = 0; i < es->len; i++) {
		uint64_t fire;

		if (w->eops->look(w->eops->ctx, es->ent[i], &fire) && fire < visit)
			return "entry's record fires before its slot is visited";
	}
	return NULL;
}

static const char *check_slot(const struct wheel *w, const struct wheel_check_ops *ops,
			      unsigned g, unsigned s, uint64_t *n)
{
	const struct wheel_link *head = &w->slot[g][s];
	bool bit = (w->occupied[g] >> s) & 1;
	uint64_t visit = visit_tick(w->curr, g, s);
	const char *why;

	why = check_list(head, 1 + g * WHEEL_SLOTS + s, n);
	if (why)
		return why;
	if (bit != (*n != 0 || slot_ents(w, g, s) != 0))
		return "occupancy bit disagrees with the slot's list and entries";
	why = check_log(w, g, s, *n);
	if (why)
		return why;
	if (!bit)
		return NULL;
	if (s <= ((w->curr >> (WHEEL_BITS * g)) & WHEEL_MASK))
		return "non-empty slot at or behind its level's current position";
	for (const struct wheel_link *l = head->next; l != head; l = l->next) {
		uint64_t fire;

		/* Pushed later in place, a record may sit in a slot visited earlier. */
		if (check_fire(ops, link_timer((struct wheel_link *)l), &fire) && fire < visit)
			return "record's fire tick comes before its slot is visited";
	}
	return check_ents(w, g, s, visit);
}

int wheel_check(const struct wheel *w, const char **why)
{
	return wheel_check_with(w, NULL, why);
}

int wheel_check_with(const struct wheel *w, const struct wheel_check_ops *ops, const char **why)
{
	const char *bad = NULL;
	uint64_t n, total = 0, fire;

	for (unsigned g = 0; g < WHEEL_LEVELS && !bad; g++) {
		for (unsigned s = 0; s < WHEEL_SLOTS && !bad; s++) {
			bad = check_slot(w, ops, g, s, &n);
			total += n;
		}
	}
	if (!bad)
		bad = check_list(&w->overflow, WHEEL_OVERFLOW, &n);
	if (!bad) {
		total += n;
		for (const struct wheel_link *l = w->overflow.next; l != &w->overflow; l = l->next) {
			if (!check_fire(ops, link_timer((struct wheel_link *)l), &fire))
				continue;
			if (fire < w->overflow_visit || w->overflow_visit <= w->curr) {
				bad = "overflow record fires before the overflow list is visited";
				break;
			}
		}
	}
	if (!bad)
		bad = check_list(&w->due, WHEEL_DUE, &n);
	if (!bad) {
		total += n;
		if (n != w->ndue)
			bad = "due count disagrees with the due list";
	}
	if (!bad)
		bad = check_due_log(w);
	/*
	 * An owner that lets other threads store later deadlines (@ops) may find
	 * one on the due list: it re-checks every due record before firing it,
	 * so only a wheel whose deadlines move through wheel_update() promises
	 * that due records are due.
	 */
	if (!bad && !ops) {
		for (const struct wheel_link *l = w->due.next; l != &w->due; l = l->next) {
			if (check_fire(ops, link_timer((struct wheel_link *)l), &fire) &&
			    fire > w->curr) {
				bad = "due record whose fire tick is still ahead";
				break;
			}
		}
	}
	if (!bad && total != w->count)
		bad = "record count disagrees with the lists";
	if (!bad) {
		uint64_t ents = 0;

		for (unsigned g = WHEEL_ENTRY_LEVEL; g < WHEEL_LEVELS; g++)
			for (unsigned s = 0; s < WHEEL_SLOTS; s++)
				ents += slot_ents(w, g, s);
		if (ents != w->nents)
			bad = "entry count disagrees with the slots";
	}
	if (why)
		*why = bad;
	return bad ? -EUCLEAN : 0;
}
