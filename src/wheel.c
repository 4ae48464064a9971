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
 */
#include "wheel.h"

#include <errno.h>

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
	link_init(&w->overflow);
	w->overflow_visit = UINT64_MAX;
	for (unsigned g = 0; g < WHEEL_LEVELS; g++) {
		w->occupied[g] = 0;
		for (unsigned s = 0; s < WHEEL_SLOTS; s++)
			link_init(&w->slot[g][s]);
	}
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

/* Links @t for fire tick @fire, relative to the current tick; not counted. */
static void file(struct wheel *w, struct wheel_timer *t, uint64_t fire)
{
	unsigned g, s;

	if (fire <= w->curr) {
		t->where = WHEEL_DUE;
		link_append(&w->due, &t->link);
		w->ndue++;
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
	w->occupied[g] |= UINT64_C(1) << s;
}

/* Unlinks @t from wherever it is; keeps occupancy and the due count right. */
static void unfile(struct wheel *w, struct wheel_timer *t)
{
	unsigned where = t->where;

	link_unlink(&t->link);
	if (where == WHEEL_DUE) {
		w->ndue--;
	} else if (where != WHEEL_OVERFLOW) {
		unsigned g = level_of(where), s = slot_of(where);

		if (link_empty(&w->slot[g][s]))
			w->occupied[g] &= ~(UINT64_C(1) << s);
	}
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

/* Visits a slot list at the current tick: fire what is due, re-file the rest. */
static uint64_t visit_list(struct wheel *w, struct wheel_link *head)
{
	struct wheel_link *l, *next, *end = head->prev;
	uint64_t ndue = w->ndue;

	if (link_empty(head))
		return 0;
	l = head->next;
	link_init(head);
	/*
	 * Walk the detached chain without unlinking node by node (file()
	 * rewrites each node's links anyway), and start the next node's cache
	 * miss before this one is re-filed: records are scattered, so the
	 * walk is a chain of misses otherwise.
	 */
	for (;;) {
		next = l->next;
		__builtin_prefetch(next, 1);
		file(w, link_timer(l), timer_fire(link_timer(l)));
		if (l == end)
			break;
		l = next;
	}
	return w->ndue - ndue;
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
			fired += visit_list(w, &w->overflow);
		} else {
			unsigned s = (unsigned)__builtin_ctzll(w->occupied[g]);

			w->occupied[g] &= ~(UINT64_C(1) << s);
			fired += visit_list(w, &w->slot[g][s]);
		}
	}
	return fired;
}

/* Moves a whole list to the tail of the due list, marking each record due. */
static void flush_list(struct wheel *w, struct wheel_link *head)
{
	while (!link_empty(head)) {
		struct wheel_timer *t = link_timer(head->next);

		link_unlink(&t->link);
		t->where = WHEEL_DUE;
		link_append(&w->due, &t->link);
		w->ndue++;
	}
}

void wheel_flush(struct wheel *w)
{
	for (unsigned g = 0; g < WHEEL_LEVELS; g++) {
		while (w->occupied[g]) {
			unsigned s = (unsigned)__builtin_ctzll(w->occupied[g]);

			w->occupied[g] &= ~(UINT64_C(1) << s);
			flush_list(w, &w->slot[g][s]);
		}
	}
	flush_list(w, &w->overflow);
	w->overflow_visit = UINT64_MAX;
}

struct wheel_timer *wheel_pop(struct wheel *w)
{
	struct wheel_timer *t;

	if (link_empty(&w->due))
		return NULL;
	t = link_timer(w->due.next);
	link_unlink(&t->link);
	t->where = WHEEL_NONE;
	w->ndue--;
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
	if (bit != (*n != 0))
		return "occupancy bit disagrees with the slot's list";
	if (!*n)
		return NULL;
	if (s <= ((w->curr >> (WHEEL_BITS * g)) & WHEEL_MASK))
		return "non-empty slot at or behind its level's current position";
	for (const struct wheel_link *l = head->next; l != head; l = l->next) {
		uint64_t fire;

		/* Pushed later in place, a record may sit in a slot visited earlier. */
		if (check_fire(ops, link_timer((struct wheel_link *)l), &fire) && fire < visit)
			return "record's fire tick comes before its slot is visited";
	}
	return NULL;
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
	if (why)
		*why = bad;
	return bad ? -EUCLEAN : 0;
}
