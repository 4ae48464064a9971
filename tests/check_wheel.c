/* SPDX-License-Identifier: MIT */
/*
 * check_wheel.c - unit tests for the hierarchical timing wheel (src/wheel.h).
 *
 * The wheel reads no clock: every function that needs the time takes it in
 * ticks.  So every test here runs on a virtual clock, the tick handed to
 * wheel_advance(); nothing sleeps and every run is reproducible.
 *
 * Two kinds of tests live here:
 *
 *  - Deterministic ones, one behaviour each: never early (sub-tick, past
 *    deadlines, exact multiples, every level boundary, the far future and the
 *    overflow list), wheel_next() and the tickless loop built on it, slack,
 *    ordering of equal fire ticks, push-later in place and push-earlier,
 *    cancel from anywhere, bad input and the invariant checker itself.  Most
 *    of them go through a small harness (struct t_set) that knows each
 *    record's fire tick and checks every advance against it.
 *
 *  - Randomized ones that drive the wheel and a simple reference model (a
 *    table of live records plus a binary heap of fire ticks) through the same
 *    seeded sequence of arm / cancel / push-later / push-earlier / advance /
 *    pop steps and compare the two after every step.
 *
 * The randomized runs start from a fixed seed; KAIROS_SEED=<n> (decimal or
 * 0x-hex) overrides it.  A failure names the seed, the run and the step, so
 * "KAIROS_SEED=<seed> CK_RUN_CASE=random ./check_wheel" replays it exactly
 * (CK_FORK=no makes it easy to put under a debugger).
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wheel.h"

#define T_ARRAY_SIZE(a)	(sizeof(a) / sizeof((a)[0]))

/* Bits of tick the levels cover together (48), and that many ticks. */
#define T_SPAN_BITS	(WHEEL_BITS * WHEEL_LEVELS)
#define T_SPAN		(UINT64_C(1) << T_SPAN_BITS)

/*
 * Assertions.  Check's ck_assert*() report every passing assertion to the
 * parent process (a write(2) each), which made the hot loops here spend most
 * of their time in the kernel; these cost one branch until one fails, and
 * then fail the test through Check with the operands printed.
 */
#define T_ASSERT(cond)								\
	do {									\
		if (!(cond))							\
			ck_abort_msg("Assertion '%s' failed", #cond);		\
	} while (0)

#define T_ASSERT_MSG(cond, fmt, ...)						\
	do {									\
		if (!(cond))							\
			ck_abort_msg("Assertion '%s' failed: " fmt, #cond,	\
				     ##__VA_ARGS__);				\
	} while (0)

#define T_UINT_OP(a, op, b)							\
	do {									\
		uintmax_t t_x_ = (a), t_y_ = (b);				\
		if (!(t_x_ op t_y_))						\
			ck_abort_msg("Assertion '%s %s %s' failed: %ju vs %ju",	\
				     #a, #op, #b, t_x_, t_y_);			\
	} while (0)

#define T_UINT_EQ(a, b)	T_UINT_OP(a, ==, b)
#define T_UINT_NE(a, b)	T_UINT_OP(a, !=, b)
#define T_UINT_LT(a, b)	T_UINT_OP(a, <, b)
#define T_UINT_LE(a, b)	T_UINT_OP(a, <=, b)
#define T_UINT_GT(a, b)	T_UINT_OP(a, >, b)
#define T_UINT_GE(a, b)	T_UINT_OP(a, >=, b)

#define T_INT_EQ(a, b)								\
	do {									\
		intmax_t t_x_ = (a), t_y_ = (b);				\
		if (t_x_ != t_y_)						\
			ck_abort_msg("Assertion '%s == %s' failed: %jd vs %jd",	\
				     #a, #b, t_x_, t_y_);			\
	} while (0)

#define T_MEM_EQ(a, b, n)	T_ASSERT_MSG(!memcmp((a), (b), (n)), "memory differs")

/* ------------------------------------------------------------------------ */
/* Small helpers: arithmetic, the PRNG, the reference fire tick.             */
/* ------------------------------------------------------------------------ */

/* 64^k: the width of one slot of level k, and how far level k - 1 reaches. */
static uint64_t t_pow64(unsigned int k)
{
	return UINT64_C(1) << (WHEEL_BITS * k);
}

static uint64_t t_sat_add(uint64_t a, uint64_t b)
{
	return a + b < a ? UINT64_MAX : a + b;
}

static uint64_t t_sat_sub(uint64_t a, uint64_t b)
{
	return a < b ? 0 : a - b;
}

static uint64_t t_max(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

/* Trailing zero bits, with 0 counting as 64 (it is a multiple of everything). */
static unsigned int t_ctz(uint64_t x)
{
	return x ? (unsigned int)__builtin_ctzll(x) : 64;
}

/* The smallest multiple of @a at or after @x, saturating at UINT64_MAX. */
static uint64_t t_align_up(uint64_t x, uint64_t a)
{
	uint64_t r = x % a;

	return r ? t_sat_add(x, a - r) : x;
}

/*
 * The seed of every randomized run derives from this one.  It is fixed so
 * that a plain run is reproducible; KAIROS_SEED overrides it (see main()).
 */
static uint64_t t_base_seed = UINT64_C(0x6b6169726f73);	/* "kairos" */

/* splitmix64: tiny, fast, and every 64-bit state is a good one. */
static uint64_t t_rand(uint64_t *state)
{
	uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* A value in [0, n); 0 when n is 0.  The modulo bias is irrelevant here. */
static uint64_t t_below(uint64_t *state, uint64_t n)
{
	return n ? t_rand(state) % n : 0;
}

/*
 * A value in [0, n) whose number of bits is uniform: tiny and huge values
 * come up equally often, which is what exercises every level of the wheel.
 */
static uint64_t t_below_log(uint64_t *state, uint64_t n)
{
	unsigned int bits;

	if (n <= 1)
		return 0;
	bits = (unsigned int)t_below(state, 65);
	if (!bits)
		return 0;
	return (t_rand(state) >> (64 - bits)) % n;
}

/*
 * t_ref_fire_tick - the reference for wheel_fire_tick(): the member of
 * [deadline, deadline + slack] (clamped at UINT64_MAX) with the most trailing
 * zero bits.  It tries the coarsest alignment first: the first multiple of
 * 2^k at or after the deadline, for k from 63 down, until one is in range.
 */
static uint64_t t_ref_fire_tick(uint64_t deadline, uint32_t slack)
{
	uint64_t last = t_sat_add(deadline, slack);
	int k;

	if (deadline == 0)
		return 0;	/* zero beats every other tick */
	for (k = 63; k >= 0; k--) {
		/* The tick just before the first multiple of 2^k >= deadline. */
		uint64_t before = (deadline - 1) | ((UINT64_C(1) << k) - 1);

		if (before != UINT64_MAX && before + 1 <= last)
			return before + 1;
	}
	return deadline;	/* not reached: k = 0 gives the deadline */
}

/* The same by brute force over the whole range, for small ranges only. */
static uint64_t t_brute_fire_tick(uint64_t deadline, uint32_t slack)
{
	uint64_t last = t_sat_add(deadline, slack), best = deadline, x;

	for (x = deadline;; x++) {
		if (t_ctz(x) > t_ctz(best))
			best = x;
		if (x == last)
			break;
	}
	return best;
}

/* ------------------------------------------------------------------------ */
/* Wheel helpers.                                                           */
/* ------------------------------------------------------------------------ */

static struct wheel *t_wheel_new(uint64_t now)
{
	struct wheel *w = malloc(sizeof(*w));

	T_ASSERT((w) != NULL);
	/* Garbage first: wheel_init() must not rely on zeroed memory. */
	memset(w, 0xa5, sizeof(*w));
	wheel_init(w, now);
	T_UINT_EQ(w->curr, now);
	T_UINT_EQ(wheel_count(w), 0);
	T_UINT_EQ(w->ndue, 0);
	return w;
}

/* Asserts every invariant of @w, printing wheel_check()'s reason if one breaks. */
static void t_check(const struct wheel *w)
{
	const char *why = NULL;
	int rc = wheel_check(w, &why);

	T_ASSERT_MSG(rc == 0, "wheel_check() = %d at curr %" PRIu64 ": %s",
		     rc, w->curr, why ? why : "(no reason given)");
}

static bool t_in_slot(uint16_t where)
{
	return where >= 1 && where < WHEEL_OVERFLOW;
}

/*
 * t_where_bad - whether the placement of a pending record (@where; @moved:
 * the test pushed it later in place and it has not been re-filed since)
 * with fire tick @fire is one the header rules out while the wheel is at
 * @curr: due iff fire <= curr; on the overflow list when the fire tick is
 * more than the levels' 2^48 ticks ahead, unless it was pushed there in
 * place (it waits in its old slot); in a slot when it is so
 * near (half that, in the same 2^48 block) that any layout of eight 64-slot
 * levels has one for it.  In between, the choice is wheel.c's and
 * wheel_check() judges it.
 *
 * Return: NULL when allowed, else what is wrong.
 */
static const char *t_where_bad(uint16_t where, bool moved, uint64_t fire, uint64_t curr)
{
	if (fire <= curr)
		return where == WHEEL_DUE ? NULL : "due record not on the due list";
	if (where == WHEEL_NONE)
		return "pending record in no list";
	if (where > WHEEL_OVERFLOW)
		return "record not yet due on the due list (fired early)";
	if (fire - curr > T_SPAN && where != WHEEL_OVERFLOW && !moved)
		return "record beyond the top level not on the overflow list";
	if (fire - curr <= T_SPAN / 2 && (fire >> T_SPAN_BITS) == (curr >> T_SPAN_BITS) &&
	    !t_in_slot(where))
		return "record well within the levels' reach not in a slot";
	return NULL;
}

/* ------------------------------------------------------------------------ */
/* The deterministic harness: a set of records whose fire ticks it knows.   */
/* ------------------------------------------------------------------------ */

#define T_SET_MAX	4096
/*
 * order[] of a record pushed later (or refreshed): its rank among records
 * due at the same tick is not promised.
 */
#define T_UNORDERED	UINT64_MAX

enum t_state { T_IDLE, T_PENDING, T_FIRED };

struct t_set {
	struct wheel *w;
	size_t n;			/* records in use: t[0..n) */
	uint64_t stamp;			/* add order */
	struct wheel_timer t[T_SET_MAX];
	uint64_t fire[T_SET_MAX];	/* reference fire tick */
	uint64_t eff[T_SET_MAX];	/* the tick it became due at: max(fire, tick when armed) */
	uint64_t order[T_SET_MAX];	/* stamp of its add (or move earlier) */
	uint64_t at[T_SET_MAX];		/* tick it was popped at */
	uint16_t moved_where[T_SET_MAX];	/* where a push-later in place left it, or 0 */
	enum t_state state[T_SET_MAX];
};

static struct t_set *t_set_new(uint64_t now)
{
	struct t_set *s = calloc(1, sizeof(*s));

	T_ASSERT((s) != NULL);
	s->w = t_wheel_new(now);
	return s;
}

static void t_set_free(struct t_set *s)
{
	free(s->w);
	free(s);
}

/* Records i and over are not yet in use; lets a test arm them in any order. */
static void t_set_reserve(struct t_set *s, size_t n)
{
	T_UINT_LE(n, T_SET_MAX);
	if (n > s->n)
		s->n = n;
}

/* Asserts that the record's placement is one the header allows. */
static void t_set_where_ok(const struct t_set *s, size_t i)
{
	const char *bad = t_where_bad(s->t[i].where, s->moved_where[i] == s->t[i].where,
				      s->fire[i], s->w->curr);

	T_ASSERT_MSG(!bad, "record %zu (deadline %" PRIu64 " slack %u fire %" PRIu64
		     ") at curr %" PRIu64 ": %s (where %u)", i, s->t[i].deadline,
		     s->t[i].slack, s->fire[i], s->w->curr, bad, s->t[i].where);
}

/*
 * t_set_arm_by - arms record @i with wheel_add(), or with wheel_insert()
 * after storing deadline and slack in the record (@insert), asserting what
 * the header promises.
 */
static void t_set_arm_by(struct t_set *s, size_t i, uint64_t deadline, uint32_t slack,
			 bool insert)
{
	struct wheel_timer *t = &s->t[i];
	uint64_t count = wheel_count(s->w), ndue = s->w->ndue, curr = s->w->curr;
	int rc;

	T_UINT_LT(i, s->n);
	T_ASSERT(!wheel_timer_pending(t));
	if (insert) {
		t->deadline = deadline;
		t->slack = slack;
		rc = wheel_insert(s->w, t);
	} else {
		rc = wheel_add(s->w, t, deadline, slack);
	}
	T_ASSERT_MSG(rc == 0, "wheel_%s(%" PRIu64 ", %u) at %" PRIu64 " = %d",
		     insert ? "insert" : "add", deadline, slack, curr, rc);
	T_ASSERT(wheel_timer_pending(t));
	T_UINT_EQ(t->deadline, deadline);
	T_UINT_EQ(t->slack, slack);
	T_UINT_EQ(wheel_count(s->w), count + 1);
	T_UINT_EQ(s->w->curr, curr);
	s->fire[i] = t_ref_fire_tick(deadline, slack);
	s->eff[i] = t_max(s->fire[i], curr);
	s->order[i] = ++s->stamp;
	s->state[i] = T_PENDING;
	s->moved_where[i] = 0;
	/* A fire tick at or before the current tick goes straight to the due list. */
	T_UINT_EQ(s->w->ndue, ndue + (s->fire[i] <= curr));
	t_set_where_ok(s, i);
	t_check(s->w);
}

static void t_set_arm(struct t_set *s, size_t i, uint64_t deadline, uint32_t slack)
{
	t_set_arm_by(s, i, deadline, slack, false);
}

/* t_set_add - arms the next unused record; returns its index. */
static size_t t_set_add(struct t_set *s, uint64_t deadline, uint32_t slack)
{
	size_t i = s->n;

	t_set_reserve(s, i + 1);
	t_set_arm(s, i, deadline, slack);
	return i;
}

/*
 * t_set_update - wheel_update()s record @i.  An earlier deadline, or any new
 * deadline for a due record, relinks it as if added now, so that is its rank
 * among records that become due at the same tick; a later deadline is a
 * store and leaves its rank unspecified (it joins when its old slot comes
 * round and it is re-filed).
 */
static void t_set_update(struct t_set *s, size_t i, uint64_t deadline)
{
	struct wheel_timer *t = &s->t[i];
	uint64_t fire = t_ref_fire_tick(deadline, t->slack), curr = s->w->curr;
	uint64_t count = wheel_count(s->w), old_deadline = t->deadline;
	uint32_t slack = t->slack;
	int rc;

	T_UINT_EQ(s->state[i], T_PENDING);
	rc = wheel_update(s->w, t, deadline);
	T_ASSERT_MSG(rc == 0, "wheel_update(%zu, %" PRIu64 ") = %d", i, deadline, rc);
	T_UINT_EQ(t->deadline, deadline);
	T_UINT_EQ(t->slack, slack);	/* keeps its slack */
	T_UINT_EQ(wheel_count(s->w), count);
	s->order[i] = deadline < old_deadline || s->fire[i] <= curr ? ++s->stamp : T_UNORDERED;
	if (fire > s->fire[i] && t->where != WHEEL_DUE)
		s->moved_where[i] = t->where;
	s->fire[i] = fire;
	s->eff[i] = t_max(fire, curr);
	t_set_where_ok(s, i);
	t_check(s->w);
}

/*
 * t_set_refresh - stores @deadline into record @i from "outside" (a relaxed
 * atomic store, as the header says) and wheel_refresh()es it.  Whether it
 * then stays in place is wheel.c's choice for an earlier deadline, so its
 * rank among records due at the same tick is left unspecified.
 */
static void t_set_refresh(struct t_set *s, size_t i, uint64_t deadline)
{
	struct wheel_timer *t = &s->t[i];
	uint64_t count = wheel_count(s->w);
	uint32_t slack = t->slack;
	int rc;

	T_UINT_EQ(s->state[i], T_PENDING);
	__atomic_store_n(&t->deadline, deadline, __ATOMIC_RELAXED);
	rc = wheel_refresh(s->w, t);
	T_ASSERT_MSG(rc == 0, "wheel_refresh(%zu, %" PRIu64 ") = %d", i, deadline, rc);
	T_UINT_EQ(t->deadline, deadline);
	T_UINT_EQ(t->slack, slack);
	T_UINT_EQ(wheel_count(s->w), count);
	if (t_ref_fire_tick(deadline, slack) > s->fire[i] && t->where != WHEEL_DUE)
		s->moved_where[i] = t->where;
	s->fire[i] = t_ref_fire_tick(deadline, slack);
	s->eff[i] = t_max(s->fire[i], s->w->curr);
	s->order[i] = T_UNORDERED;
	t_set_where_ok(s, i);
	t_check(s->w);
}

static void t_set_del(struct t_set *s, size_t i)
{
	uint64_t count = wheel_count(s->w), ndue = s->w->ndue;
	bool due = s->fire[i] <= s->w->curr;

	T_UINT_EQ(s->state[i], T_PENDING);
	T_INT_EQ(wheel_del(s->w, &s->t[i]), 0);
	T_ASSERT(!wheel_timer_pending(&s->t[i]));
	T_UINT_EQ(s->t[i].where, WHEEL_NONE);
	T_UINT_EQ(wheel_count(s->w), count - 1);
	T_UINT_EQ(s->w->ndue, ndue - due);
	s->state[i] = T_IDLE;
	t_check(s->w);
}

/* Maps a popped pointer back to its index, failing on a foreign one. */
static size_t t_set_index(const struct t_set *s, const struct wheel_timer *t)
{
	uintptr_t off = (uintptr_t)t - (uintptr_t)s->t;

	T_ASSERT_MSG(off % sizeof(*t) == 0 && off / sizeof(*t) < s->n,
		     "wheel_pop() returned a record that is not one of ours");
	return off / sizeof(*t);
}

/*
 * t_set_pop_all - pops until NULL and asserts what came out: only pending
 * records whose fire tick has come, each once, in the order they became due
 * (at their fire tick, or at once when armed with a fire tick already
 * past), records that became due at the same tick in the order they were
 * added; and that every pending record whose fire tick has come did come
 * out.  @expect is how many must come out.  Returns that number.
 */
static size_t t_set_pop_all(struct t_set *s, uint64_t expect)
{
	struct wheel *w = s->w;
	uint64_t curr = w->curr, count = wheel_count(w), last_eff = 0;
	uint64_t last_ord_eff = 0, last_order = 0;
	bool have_ordered = false;
	struct wheel_timer *t;
	size_t i, n = 0;

	while ((t = wheel_pop(w))) {
		i = t_set_index(s, t);
		T_ASSERT_MSG(s->state[i] == T_PENDING,
			     "record %zu popped while not pending (state %d)", i, s->state[i]);
		T_ASSERT_MSG(s->fire[i] <= curr, "record %zu (deadline %" PRIu64 " slack %u fire %"
			     PRIu64 ") popped EARLY at %" PRIu64, i, t->deadline, t->slack,
			     s->fire[i], curr);
		T_ASSERT(!wheel_timer_pending(t));
		T_UINT_EQ(t->where, WHEEL_NONE);
		T_UINT_EQ(wheel_count(w), count - n - 1);
		T_ASSERT_MSG(s->eff[i] >= last_eff, "record %zu (due since %" PRIu64
			     ") popped after one due since %" PRIu64, i, s->eff[i], last_eff);
		last_eff = s->eff[i];
		/* Due at the same tick: add order (pushed-later ones aside). */
		if (s->order[i] != T_UNORDERED) {
			if (have_ordered && s->eff[i] == last_ord_eff)
				T_ASSERT_MSG(s->order[i] > last_order, "record %zu (fire %" PRIu64
					     ", due since %" PRIu64 ", add #%" PRIu64 ") popped after"
					     " add #%" PRIu64 " due since the same tick", i,
					     s->fire[i], s->eff[i], s->order[i], last_order);
			have_ordered = true;
			last_ord_eff = s->eff[i];
			last_order = s->order[i];
		}
		s->state[i] = T_FIRED;
		s->at[i] = curr;
		n++;
	}
	T_UINT_EQ(w->ndue, 0);
	T_UINT_EQ(n, expect);
	for (i = 0; i < s->n; i++) {
		if (s->state[i] != T_PENDING)
			continue;
		T_ASSERT_MSG(s->fire[i] > curr, "record %zu (fire %" PRIu64
			     ") not popped by %" PRIu64, i, s->fire[i], curr);
		T_ASSERT(wheel_timer_pending(&s->t[i]));
		t_set_where_ok(s, i);
	}
	t_check(w);
	return n;
}

/*
 * t_set_advance - wheel_advance()s to @now, checks its return value against
 * the records whose fire tick it passes, then pops everything due (see
 * t_set_pop_all()).  Returns how many came out.
 */
static size_t t_set_advance(struct t_set *s, uint64_t now)
{
	struct wheel *w = s->w;
	uint64_t prev = w->curr, curr = t_max(prev, now), ndue = w->ndue;
	uint64_t expect = 0, ret;
	size_t i;

	for (i = 0; i < s->n; i++)
		if (s->state[i] == T_PENDING && s->fire[i] > prev && s->fire[i] <= curr)
			expect++;
	ret = wheel_advance(w, now);
	T_UINT_EQ(w->curr, curr);
	T_ASSERT_MSG(ret == expect, "wheel_advance(%" PRIu64 ") from %" PRIu64
		     " = %" PRIu64 ", expected %" PRIu64, now, prev, ret, expect);
	T_UINT_EQ(w->ndue, ndue + ret);
	t_check(w);
	return t_set_pop_all(s, ndue + ret);
}

/* The earliest fire tick of a pending record, or UINT64_MAX if none. */
static bool t_set_min_fire(const struct t_set *s, uint64_t *fire)
{
	bool any = false;
	size_t i;

	*fire = UINT64_MAX;
	for (i = 0; i < s->n; i++) {
		if (s->state[i] == T_PENDING && s->fire[i] <= *fire) {
			*fire = s->fire[i];
			any = true;
		}
	}
	return any;
}

/* wheel_next() must be <= the earliest fire tick, and > curr when none is due. */
static void t_set_check_next(const struct t_set *s)
{
	uint64_t next = wheel_next(s->w), min;

	if (s->w->ndue) {
		T_UINT_EQ(next, s->w->curr);
	} else if (!t_set_min_fire(s, &min)) {
		T_UINT_EQ(next, UINT64_MAX);
	} else {
		T_ASSERT_MSG(next > s->w->curr && next <= min, "wheel_next() = %" PRIu64
			     " at curr %" PRIu64 " with the earliest fire tick %" PRIu64,
			     next, s->w->curr, min);
	}
}

/*
 * t_set_walk - advances through every pending fire tick in turn: first to
 * one tick before it, where nothing may fire, then onto it, where exactly the
 * records with that fire tick must (t_set_pop_all() checks both).
 */
static void t_set_walk(struct t_set *s)
{
	uint64_t f;

	t_set_advance(s, s->w->curr);	/* anything already due */
	while (t_set_min_fire(s, &f)) {
		t_set_check_next(s);
		T_UINT_EQ(t_set_advance(s, f - 1), 0);
		T_UINT_GE(t_set_advance(s, f), 1);
	}
	T_UINT_EQ(wheel_count(s->w), 0);
	T_UINT_EQ(wheel_next(s->w), UINT64_MAX);
}

/*
 * t_set_tickless - the loop a tickless shard runs: sleep until wheel_next(),
 * advance to it, pop.  Every record must pop exactly at its fire tick, and
 * the loop must not take more than @limit wake-ups.  Returns the wake-ups.
 */
static uint64_t t_set_tickless(struct t_set *s, uint64_t limit)
{
	uint64_t iters = 0, next;
	size_t i;

	t_set_advance(s, s->w->curr);	/* anything already due */
	while (wheel_count(s->w)) {
		t_set_check_next(s);
		next = wheel_next(s->w);
		t_set_advance(s, next);
		T_ASSERT_MSG(++iters <= limit, "tickless loop: over %" PRIu64
			     " wake-ups with %" PRIu64 " records left at %" PRIu64,
			     limit, wheel_count(s->w), s->w->curr);
	}
	T_UINT_EQ(wheel_next(s->w), UINT64_MAX);
	for (i = 0; i < s->n; i++) {
		if (s->state[i] != T_FIRED)
			continue;
		T_ASSERT_MSG(s->at[i] == s->eff[i], "record %zu (deadline %" PRIu64 " slack %u "
			     "fire %" PRIu64 ") popped at %" PRIu64 ", not at its fire tick",
			     i, s->t[i].deadline, s->t[i].slack, s->fire[i], s->at[i]);
		T_UINT_GE(s->at[i], s->t[i].deadline);
		T_UINT_LE(s->at[i] - s->t[i].deadline, s->t[i].slack);
	}
	return iters;
}

/* ------------------------------------------------------------------------ */
/* wheel_fire_tick()                                                        */
/* ------------------------------------------------------------------------ */

START_TEST(test_wheel_fire_tick_slack_zero)
{
	static const uint64_t edge[] = {
		0, 1, 2, 3, 63, 64, 65, 4095, 4096, UINT64_C(1) << 48,
		(UINT64_C(1) << 63) + 1, UINT64_MAX - 1, UINT64_MAX,
	};
	uint64_t rng = t_base_seed, d;
	size_t i;

	/* No slack, no choice: it fires at its deadline. */
	for (i = 0; i < T_ARRAY_SIZE(edge); i++)
		T_UINT_EQ(wheel_fire_tick(edge[i], 0), edge[i]);
	for (i = 0; i < 100000; i++) {
		d = t_rand(&rng) >> t_below(&rng, 64);
		T_UINT_EQ(wheel_fire_tick(d, 0), d);
	}
}
END_TEST

START_TEST(test_wheel_fire_tick_brute_force)
{
	static const unsigned int pow2[] = { 12, 20, 32, 42, 47, 48, 63 };
	uint64_t d, base;
	uint32_t s;
	size_t i;

	/* Every small deadline with every small slack, against a full scan. */
	for (d = 0; d < 1100; d++)
		for (s = 0; s < 260; s++)
			T_ASSERT_MSG(wheel_fire_tick(d, s) == t_brute_fire_tick(d, s),
				     "wheel_fire_tick(%" PRIu64 ", %u) = %" PRIu64 ", want %" PRIu64,
				     d, s, wheel_fire_tick(d, s), t_brute_fire_tick(d, s));
	/* Around big powers of two, where the best tick is far more aligned. */
	for (i = 0; i < T_ARRAY_SIZE(pow2); i++) {
		base = UINT64_C(1) << pow2[i];
		for (d = base - 70; d < base + 70; d++)
			for (s = 0; s < 150; s++)
				T_ASSERT_MSG(wheel_fire_tick(d, s) == t_brute_fire_tick(d, s),
					     "wheel_fire_tick(%" PRIu64 ", %u) = %" PRIu64
					     ", want %" PRIu64, d, s, wheel_fire_tick(d, s),
					     t_brute_fire_tick(d, s));
	}
	/* At the end of time the range is clamped, never wrapped. */
	for (d = UINT64_MAX - 300;; d++) {
		for (s = 0; s < 400; s++)
			T_ASSERT_MSG(wheel_fire_tick(d, s) == t_brute_fire_tick(d, s),
				     "wheel_fire_tick(%" PRIu64 ", %u) = %" PRIu64 ", want %" PRIu64,
				     d, s, wheel_fire_tick(d, s), t_brute_fire_tick(d, s));
		if (d == UINT64_MAX)
			break;
	}
	/* The reference used everywhere else agrees with the brute force. */
	for (d = 0; d < 300; d++)
		for (s = 0; s < 300; s++)
			T_UINT_EQ(t_ref_fire_tick(d, s), t_brute_fire_tick(d, s));
}
END_TEST

START_TEST(test_wheel_fire_tick_random)
{
	uint64_t rng = t_base_seed ^ 0xf1, d, f, f1;
	uint32_t s;
	size_t i;

	for (i = 0; i < 200000; i++) {
		d = t_below_log(&rng, UINT64_MAX) + t_below(&rng, 2);
		s = (uint32_t)t_below_log(&rng, UINT64_C(1) << 32);
		f = wheel_fire_tick(d, s);
		T_ASSERT_MSG(f == t_ref_fire_tick(d, s), "wheel_fire_tick(%" PRIu64 ", %u) = %"
			     PRIu64 ", want %" PRIu64, d, s, f, t_ref_fire_tick(d, s));
		/* Never early, never past its slack. */
		T_UINT_GE(f, d);
		T_UINT_LE(f - d, s);
		/* A later deadline never gives an earlier fire tick. */
		if (d < UINT64_MAX) {
			f1 = wheel_fire_tick(d + 1, s);
			T_ASSERT_MSG(f1 >= f, "fire tick went back: (%" PRIu64 ", %u) -> %" PRIu64
				     " but (%" PRIu64 ", %u) -> %" PRIu64, d, s, f, d + 1, s, f1);
		}
	}
}
END_TEST

START_TEST(test_wheel_fire_tick_known_values)
{
	/* Worked examples, so a shared mistake in both references shows up. */
	T_UINT_EQ(wheel_fire_tick(1000, 100), 1024);
	T_UINT_EQ(wheel_fire_tick(1000, 23), 1008);
	T_UINT_EQ(wheel_fire_tick(1, UINT32_MAX), UINT64_C(1) << 32);
	T_UINT_EQ(wheel_fire_tick(2, UINT32_MAX), UINT64_C(1) << 32);
	T_UINT_EQ(wheel_fire_tick((UINT64_C(1) << 40) + 1, 1u << 20),
		  (UINT64_C(1) << 40) + (UINT64_C(1) << 20));
	T_UINT_EQ(wheel_fire_tick(65, 62), 96);	/* 64 and 128 are out of range */
	T_UINT_EQ(wheel_fire_tick(0, 1000), 0);	/* zero is a multiple of all */
}
END_TEST

START_TEST(test_wheel_fire_tick_saturates)
{
	static const uint32_t slack[] = { 0, 1, 2, 1u << 31, UINT32_MAX };
	uint64_t rng = t_base_seed ^ 0x5a7, d, f;
	size_t i;

	for (i = 0; i < T_ARRAY_SIZE(slack); i++)
		T_UINT_EQ(wheel_fire_tick(UINT64_MAX, slack[i]), UINT64_MAX);
	/* [MAX-1, MAX]: MAX-1 has the trailing zero. */
	T_UINT_EQ(wheel_fire_tick(UINT64_MAX - 1, 1), UINT64_MAX - 1);
	T_UINT_EQ(wheel_fire_tick(UINT64_MAX - 1, UINT32_MAX), UINT64_MAX - 1);
	/* The best in range is 2^64 - 2^31; 2^64 itself would wrap to 0. */
	T_UINT_EQ(wheel_fire_tick(UINT64_MAX - UINT32_MAX + 2, UINT32_MAX),
		  UINT64_MAX - (UINT64_C(1) << 31) + 1);
	/* Deadlines whose range runs past UINT64_MAX never wrap to small ticks. */
	for (i = 0; i < 100000; i++) {
		uint32_t sl = UINT32_MAX - (uint32_t)t_below(&rng, 1u << 20);

		d = UINT64_MAX - t_below_log(&rng, UINT64_C(1) << 33);
		f = wheel_fire_tick(d, sl);
		T_ASSERT_MSG(f >= d, "wheel_fire_tick(%" PRIu64 ", %u) wrapped to %" PRIu64,
			     d, sl, f);
		T_UINT_EQ(f, t_ref_fire_tick(d, sl));
	}
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Basics: init, zeroed records, bad input, counts.                         */
/* ------------------------------------------------------------------------ */

START_TEST(test_wheel_init_empty)
{
	struct wheel *w = t_wheel_new(12345);

	T_UINT_EQ(wheel_next(w), UINT64_MAX);
	T_ASSERT((wheel_pop(w)) == NULL);
	T_INT_EQ(wheel_check(w, NULL), 0);
	t_check(w);
	/* An empty wheel just moves its clock. */
	T_UINT_EQ(wheel_advance(w, 20000), 0);
	T_UINT_EQ(w->curr, 20000);
	T_UINT_EQ(wheel_count(w), 0);
	T_UINT_EQ(wheel_next(w), UINT64_MAX);
	T_UINT_EQ(wheel_advance(w, UINT64_MAX), 0);
	T_UINT_EQ(w->curr, UINT64_MAX);
	t_check(w);
	/* Re-init over a used wheel starts afresh. */
	wheel_init(w, 0);
	T_UINT_EQ(w->curr, 0);
	T_UINT_EQ(wheel_next(w), UINT64_MAX);
	t_check(w);
	free(w);
}
END_TEST

START_TEST(test_wheel_zeroed_record)
{
	struct wheel *w = t_wheel_new(100);
	struct wheel_timer zero, t, *arr;
	size_t i, n = 64;

	memset(&zero, 0, sizeof(zero));
	/* wheel_timer_init() is documented as the same as zero-filling. */
	memset(&t, 0xff, sizeof(t));
	wheel_timer_init(&t);
	T_MEM_EQ(&t, &zero, sizeof(t));
	T_ASSERT(!wheel_timer_pending(&t));

	/* Records from calloc() need no init and are in no wheel. */
	arr = calloc(n, sizeof(*arr));
	T_ASSERT((arr) != NULL);
	for (i = 0; i < n; i++) {
		T_ASSERT(!wheel_timer_pending(&arr[i]));
		T_INT_EQ(wheel_del(w, &arr[i]), -ENOENT);
		T_INT_EQ(wheel_update(w, &arr[i], 500), -ENOENT);
		/* A refused call leaves the record as it was. */
		T_MEM_EQ(&arr[i], &zero, sizeof(zero));
	}
	T_UINT_EQ(wheel_count(w), 0);
	t_check(w);
	/* ...and can be armed as they are. */
	for (i = 0; i < n; i++)
		T_INT_EQ(wheel_add(w, &arr[i], 101 + i, 0), 0);
	T_UINT_EQ(wheel_count(w), n);
	t_check(w);
	T_UINT_EQ(wheel_advance(w, 100 + n), n);
	for (i = 0; i < n; i++)
		T_ASSERT(wheel_pop(w) == &arr[i]);
	T_ASSERT((wheel_pop(w)) == NULL);
	t_check(w);
	free(arr);
	free(w);
}
END_TEST

START_TEST(test_wheel_bad_input)
{
	struct wheel *w = t_wheel_new(100), *w2 = t_wheel_new(100);
	struct wheel_timer a, b, zero;

	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	memset(&zero, 0, sizeof(zero));

	/* NULL arguments are refused and change nothing. */
	T_INT_EQ(wheel_add(NULL, &a, 200, 0), -EINVAL);
	T_INT_EQ(wheel_add(w, NULL, 200, 0), -EINVAL);
	T_INT_EQ(wheel_del(NULL, &a), -EINVAL);
	T_INT_EQ(wheel_del(w, NULL), -EINVAL);
	T_INT_EQ(wheel_update(NULL, &a, 300), -EINVAL);
	T_INT_EQ(wheel_update(w, NULL, 300), -EINVAL);
	T_MEM_EQ(&a, &zero, sizeof(a));
	T_UINT_EQ(wheel_count(w), 0);
	t_check(w);

	/* Never added: nothing to cancel or move. */
	T_INT_EQ(wheel_del(w, &a), -ENOENT);
	T_INT_EQ(wheel_update(w, &a, 300), -ENOENT);
	T_MEM_EQ(&a, &zero, sizeof(a));

	/* Adding twice is refused and the first deadline stands. */
	T_INT_EQ(wheel_add(w, &a, 200, 0), 0);
	T_INT_EQ(wheel_add(w, &a, 300, 7), -EBUSY);
	T_UINT_EQ(a.deadline, 200);
	T_UINT_EQ(a.slack, 0);
	T_UINT_EQ(wheel_count(w), 1);
	/* ...and so is adding it to another wheel while it is in this one. */
	T_INT_EQ(wheel_add(w2, &a, 150, 0), -EBUSY);
	T_UINT_EQ(wheel_count(w2), 0);
	T_UINT_EQ(wheel_next(w2), UINT64_MAX);
	t_check(w);
	t_check(w2);
	T_INT_EQ(wheel_add(NULL, &a, 150, 0), -EINVAL);
	T_INT_EQ(wheel_update(NULL, &a, 150), -EINVAL);
	T_INT_EQ(wheel_del(NULL, &a), -EINVAL);
	T_UINT_EQ(a.deadline, 200);
	T_ASSERT(wheel_timer_pending(&a));

	/* Cancel once: 0; twice: -ENOENT; then it cannot be moved either. */
	T_INT_EQ(wheel_del(w, &a), 0);
	T_ASSERT(!wheel_timer_pending(&a));
	T_INT_EQ(wheel_del(w, &a), -ENOENT);
	T_INT_EQ(wheel_update(w, &a, 400), -ENOENT);
	T_UINT_EQ(wheel_count(w), 0);
	t_check(w);
	/* A cancelled record never fires. */
	T_UINT_EQ(wheel_advance(w, 1000), 0);
	T_ASSERT((wheel_pop(w)) == NULL);

	/* A due record is still in the wheel until it is popped. */
	T_INT_EQ(wheel_add(w, &b, 50, 0), 0);
	T_UINT_EQ(b.where, WHEEL_DUE);
	T_INT_EQ(wheel_add(w, &b, 60, 0), -EBUSY);
	T_UINT_EQ(b.deadline, 50);
	T_ASSERT(wheel_pop(w) == &b);
	T_ASSERT(!wheel_timer_pending(&b));
	/* A popped record is in no wheel: not cancellable, free to re-arm. */
	T_INT_EQ(wheel_del(w, &b), -ENOENT);
	T_INT_EQ(wheel_update(w, &b, 2000), -ENOENT);
	T_INT_EQ(wheel_add(w, &b, 2000, 0), 0);
	T_UINT_EQ(wheel_count(w), 1);
	t_check(w);
	T_UINT_EQ(wheel_advance(w, 1999), 0);
	T_UINT_EQ(wheel_advance(w, 2000), 1);
	T_ASSERT(wheel_pop(w) == &b);
	T_UINT_EQ(wheel_count(w), 0);
	t_check(w);
	free(w);
	free(w2);
}
END_TEST

/* Count and due count follow adds, cancels, advances and pops exactly. */
START_TEST(test_wheel_count)
{
	struct t_set *s = t_set_new(5000);
	struct wheel *w = s->w;
	uint64_t rng = t_base_seed ^ 0xc0, count, ndue, ret;
	struct wheel_timer *t;
	size_t i, n = 600;

	for (i = 0; i < n; i++) {
		uint64_t d;

		switch (i % 4) {
		case 0:		/* past: straight to the due list */
			d = 5000 - t_below(&rng, 5001);
			break;
		case 1:		/* near */
			d = 5001 + t_below(&rng, 3000);
			break;
		case 2:		/* any level */
			d = 5000 + 1 + t_below_log(&rng, T_SPAN);
			break;
		default:	/* the overflow list */
			d = 5000 + T_SPAN + 1 + t_below_log(&rng, UINT64_C(1) << 52);
			break;
		}
		t_set_add(s, d, (uint32_t)(i % 3 ? 0 : t_below(&rng, 100)));
		T_UINT_EQ(wheel_count(w), i + 1);
	}
	T_UINT_EQ(w->ndue, n / 4);
	/* Cancel a third, from everywhere. */
	for (i = 0; i < n; i += 3) {
		count = wheel_count(w);
		t_set_del(s, i);
		T_UINT_EQ(wheel_count(w), count - 1);
	}
	/* An advance moves records to the due list; they still count until popped. */
	count = wheel_count(w);
	ndue = w->ndue;
	ret = wheel_advance(w, 7000);
	T_UINT_GT(ret, 0);
	T_UINT_EQ(wheel_count(w), count);
	T_UINT_EQ(w->ndue, ndue + ret);
	t_check(w);
	/* Each pop takes exactly one. */
	while ((t = wheel_pop(w))) {
		i = t_set_index(s, t);
		T_UINT_LE(s->fire[i], 7000);
		s->state[i] = T_FIRED;
		T_UINT_EQ(wheel_count(w), --count);
		T_UINT_EQ(w->ndue, --ndue + ret);
	}
	T_UINT_EQ(w->ndue, 0);
	t_check(w);
	t_set_walk(s);
	T_UINT_EQ(wheel_count(w), 0);
	t_set_free(s);
}
END_TEST

/* "A @now at or before the current tick changes nothing." */
START_TEST(test_wheel_advance_backwards)
{
	struct t_set *s = t_set_new(1000);
	struct wheel *snap = malloc(sizeof(*snap));
	struct wheel_timer *tsnap = malloc(sizeof(s->t));
	static const uint64_t back[] = { 999, 1, 0, 1000 };
	size_t i;

	T_ASSERT((snap) != NULL);
	T_ASSERT((tsnap) != NULL);
	t_set_add(s, 1001, 0);
	t_set_add(s, 1500, 0);
	t_set_add(s, 70000, 3);
	t_set_add(s, UINT64_C(1) << 50, 0);
	t_set_add(s, 900, 0);		/* due */
	t_set_update(s, 1, 2500);	/* pushed later in place */
	for (i = 0; i < T_ARRAY_SIZE(back); i++) {
		memcpy(snap, s->w, sizeof(*snap));
		memcpy(tsnap, s->t, sizeof(s->t));
		T_UINT_EQ(wheel_advance(s->w, back[i]), 0);
		T_MEM_EQ(s->w, snap, sizeof(*snap));
		T_MEM_EQ(s->t, tsnap, sizeof(s->t));
	}
	/* The due record is still there to pop, and the rest fire on time. */
	t_set_walk(s);
	free(tsnap);
	free(snap);
	t_set_free(s);
}
END_TEST

/* flags is the user's: the wheel never touches it. */
START_TEST(test_wheel_user_flags)
{
	struct wheel *w = t_wheel_new(0);
	struct wheel_timer a, b, c;

	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	memset(&c, 0, sizeof(c));
	a.flags = 0x5aa5;
	b.flags = 0xffff;
	c.flags = 0x8101;
	T_INT_EQ(wheel_add(w, &a, 100, 0), 0);
	T_INT_EQ(wheel_add(w, &b, 0, 0), 0);		/* due */
	T_INT_EQ(wheel_add(w, &c, 1u << 20, 9), 0);
	T_UINT_EQ(a.flags, 0x5aa5);
	T_INT_EQ(wheel_update(w, &a, 5000), 0);		/* in place */
	T_UINT_EQ(a.flags, 0x5aa5);
	T_ASSERT(wheel_pop(w) == &b);
	T_UINT_EQ(b.flags, 0xffff);
	T_UINT_EQ(wheel_advance(w, 100), 0);		/* re-files a */
	T_UINT_EQ(a.flags, 0x5aa5);
	T_INT_EQ(wheel_update(w, &c, 50), 0);		/* relinks c */
	T_UINT_EQ(c.flags, 0x8101);
	T_INT_EQ(wheel_del(w, &c), 0);
	T_UINT_EQ(c.flags, 0x8101);
	T_UINT_EQ(wheel_advance(w, 5000), 1);
	T_ASSERT(wheel_pop(w) == &a);
	T_UINT_EQ(a.flags, 0x5aa5);
	t_check(w);
	free(w);
}
END_TEST

/* wheel_check() must actually catch broken invariants, or it proves nothing. */
START_TEST(test_wheel_check_detects_corruption)
{
	struct wheel *w = t_wheel_new(0);
	struct wheel_timer a, b, c;
	const char *why;
	uint64_t saved;
	uint16_t where;
	unsigned int lvl;

	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	memset(&c, 0, sizeof(c));
	T_INT_EQ(wheel_add(w, &a, 5000, 0), 0);
	T_INT_EQ(wheel_add(w, &b, 10, 0), 0);
	T_INT_EQ(wheel_add(w, &c, 0, 0), 0);	/* due */
	t_check(w);

#define T_EXPECT_BROKEN(what)							\
	do {									\
		why = NULL;							\
		T_ASSERT_MSG(wheel_check(w, &why) == -EUCLEAN,			\
			     "wheel_check() missed: " what);			\
		T_ASSERT_MSG(why && *why, "no reason for: " what);		\
		T_INT_EQ(wheel_check(w, NULL), -EUCLEAN);		\
	} while (0)

	w->count++;
	T_EXPECT_BROKEN("record count off by one");
	w->count--;
	t_check(w);

	w->ndue++;
	T_EXPECT_BROKEN("due count off by one");
	w->ndue--;
	t_check(w);

	/* An occupancy bit for a slot nothing is in (no record is at level 4). */
	lvl = 4;
	T_UINT_EQ(w->occupied[lvl], 0);
	w->occupied[lvl] |= UINT64_C(1) << 17;
	T_EXPECT_BROKEN("occupancy bit of an empty slot");
	w->occupied[lvl] = 0;
	t_check(w);

	/* A record whose slot is visited after its fire tick would fire late. */
	saved = a.deadline;
	a.deadline = 70;
	T_EXPECT_BROKEN("record filed later than its fire tick");
	a.deadline = saved;
	t_check(w);

	/* A record claiming another list than the one it is on. */
	where = b.where;
	b.where = a.where;
	T_EXPECT_BROKEN("record's where names another slot");
	b.where = where;
	t_check(w);

	/* A due record whose fire tick has not come. */
	c.deadline = 10;
	T_EXPECT_BROKEN("due record not yet due");
	c.deadline = 0;
	t_check(w);
#undef T_EXPECT_BROKEN
	free(w);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Never early.                                                             */
/* ------------------------------------------------------------------------ */

/* Current ticks that sit on, just before and just after level boundaries. */
static const uint64_t t_bases[] = {
	0, 1, 62, 63, 64, 65, 4095, 4096, 262143, 262145,
	(UINT64_C(1) << 47) + 3, T_SPAN - 1, T_SPAN, T_SPAN + 1,
	3 * T_SPAN - 70, UINT64_C(0x0123456789abcd),
};

/* The smallest delay that is not due: one tick. */
START_TEST(test_wheel_sub_tick)
{
	size_t b;
	uint32_t slack;

	for (b = 0; b < T_ARRAY_SIZE(t_bases); b++) {
		for (slack = 0; slack < 3; slack++) {
			uint64_t base = t_bases[b];
			struct t_set *s = t_set_new(base);
			size_t i = t_set_add(s, base + 1, slack);

			T_UINT_NE(s->t[i].where, WHEEL_DUE);
			T_UINT_EQ(s->w->ndue, 0);
			/* Never later than the fire tick; exactly it at level 0. */
			T_UINT_GT(wheel_next(s->w), base);
			T_UINT_LE(wheel_next(s->w), s->fire[i]);
			if (!slack)
				T_UINT_EQ(wheel_next(s->w), base + 1);
			T_UINT_EQ(t_set_advance(s, base), 0);
			T_ASSERT(wheel_timer_pending(&s->t[i]));
			T_UINT_EQ(t_set_advance(s, s->fire[i] - 1), 0);
			T_UINT_EQ(t_set_advance(s, s->fire[i]), 1);
			T_UINT_LE(s->fire[i] - (base + 1), slack);
			t_set_free(s);
		}
	}
	/* At the very end of time the next tick is UINT64_MAX itself. */
	{
		struct t_set *s = t_set_new(UINT64_MAX - 1);

		t_set_add(s, UINT64_MAX, 0);
		T_UINT_EQ(wheel_next(s->w), UINT64_MAX);
		T_UINT_EQ(t_set_advance(s, UINT64_MAX - 1), 0);
		T_UINT_EQ(t_set_advance(s, UINT64_MAX), 1);
		t_set_free(s);
	}
}
END_TEST

/*
 * A fire tick at or before the current tick goes straight to the due list:
 * wheel_pop() returns it without any advance, and wheel_next() says "now".
 */
START_TEST(test_wheel_past_deadline)
{
	struct t_set *s = t_set_new(1000);
	struct wheel *w = s->w;
	size_t now_i, past_i, zero_i, slack_i, fut_i, late_i;

	now_i = t_set_add(s, 1000, 0);		/* deadline == curr */
	past_i = t_set_add(s, 999, 0);
	zero_i = t_set_add(s, 0, 0);		/* "delay 0" from tick 0 */
	slack_i = t_set_add(s, 900, 50);	/* fires at 928 */
	T_UINT_EQ(s->fire[slack_i], 928);
	T_UINT_EQ(s->t[now_i].where, WHEEL_DUE);
	T_UINT_EQ(s->t[past_i].where, WHEEL_DUE);
	T_UINT_EQ(s->t[zero_i].where, WHEEL_DUE);
	T_UINT_EQ(s->t[slack_i].where, WHEEL_DUE);
	T_UINT_EQ(w->ndue, 4);
	T_UINT_EQ(wheel_count(w), 4);
	T_UINT_EQ(wheel_next(w), 1000);
	/* Popped with no advance at all. */
	T_UINT_EQ(t_set_pop_all(s, 4), 4);
	T_UINT_EQ(wheel_next(w), UINT64_MAX);

	/* A record whose deadline is in the past but whose slack reaches the future is not due. */
	fut_i = t_set_add(s, 990, 100);		/* [990, 1090]: 1024 */
	T_UINT_EQ(s->fire[fut_i], 1024);
	T_UINT_NE(s->t[fut_i].where, WHEEL_DUE);
	T_UINT_EQ(w->ndue, 0);

	/* Past records pop before what the next advance makes due. */
	past_i = t_set_add(s, 5, 0);
	late_i = t_set_add(s, 1001, 0);
	T_UINT_EQ(wheel_next(w), 1000);
	T_UINT_EQ(t_set_advance(s, 1001), 2);
	T_UINT_EQ(s->at[past_i], 1001);
	T_UINT_EQ(s->at[late_i], 1001);

	/* Added while the due list is not empty: it joins, nothing is lost. */
	T_UINT_EQ(wheel_advance(w, 1024), 1);	/* fut_i */
	past_i = t_set_add(s, 1024, 0);
	T_UINT_EQ(w->ndue, 2);
	T_UINT_EQ(t_set_pop_all(s, 2), 2);
	T_UINT_EQ(s->state[fut_i], T_FIRED);
	T_UINT_EQ(s->state[past_i], T_FIRED);
	/* Added "for now" and popped without advancing past it. */
	past_i = t_set_add(s, 1024, 0);
	T_UINT_EQ(wheel_advance(w, 1024), 0);
	T_ASSERT(wheel_pop(w) == &s->t[past_i]);
	s->state[past_i] = T_FIRED;
	T_ASSERT((wheel_pop(w)) == NULL);
	t_check(w);
	t_set_free(s);
}
END_TEST

/*
 * "The due list is in the order records became due: at their fire tick,
 * or, for a record added (or moved) with a fire tick already at or before
 * the current tick, at once.  So what one call makes due is in fire-tick
 * order, after everything already on the due list."
 */
START_TEST(test_wheel_past_deadline_due_order)
{
	struct wheel *w = t_wheel_new(1000);
	struct wheel_timer t[9];
	size_t i;

	memset(t, 0, sizeof(t));
	T_INT_EQ(wheel_add(w, &t[0], 1001, 0), 0);
	T_INT_EQ(wheel_add(w, &t[7], 1003, 0), 0);
	T_INT_EQ(wheel_add(w, &t[6], 1002, 0), 0);
	T_INT_EQ(wheel_add(w, &t[8], 1500, 0), 0);
	T_UINT_EQ(wheel_advance(w, 1001), 1);		/* t[0] due at 1001 */
	/* Past fire ticks, in no particular order: due at once, in that order. */
	T_INT_EQ(wheel_add(w, &t[1], 900, 0), 0);
	T_INT_EQ(wheel_add(w, &t[2], 500, 0), 0);
	T_INT_EQ(wheel_add(w, &t[3], 1001, 0), 0);
	T_INT_EQ(wheel_update(w, &t[8], 950), 0);	/* moved into the past */
	T_INT_EQ(wheel_add(w, &t[4], 0, 0), 0);
	T_INT_EQ(wheel_add(w, &t[5], 700, 5), 0);
	/* This call makes 1002 and 1003 due, behind everything above. */
	T_UINT_EQ(wheel_advance(w, 1003), 2);
	T_UINT_EQ(w->ndue, 9);
	{
		static const size_t want[] = { 0, 1, 2, 3, 8, 4, 5, 6, 7 };

		for (i = 0; i < T_ARRAY_SIZE(want); i++) {
			struct wheel_timer *p = wheel_pop(w);

			T_ASSERT_MSG(p == &t[want[i]], "pop #%zu is record %td, want %zu",
				     i, p ? p - t : -1, want[i]);
		}
	}
	T_ASSERT(wheel_pop(w) == NULL);
	t_check(w);
	free(w);
}
END_TEST

/* Deadlines on exact multiples of slot widths, of powers of two, and slack landing on them. */
START_TEST(test_wheel_exact_multiples)
{
	static const uint64_t starts[] = { 7, 3 * T_SPAN + 5 };
	static const uint64_t mult[] = { 1, 2, 3, 63, 64 };
	size_t b, m;
	unsigned int k;

	for (b = 0; b < T_ARRAY_SIZE(starts); b++) {
		uint64_t base = starts[b], off = base & ~(T_SPAN - 1);
		struct t_set *s = t_set_new(base);

		for (k = 0; k <= WHEEL_LEVELS; k++) {
			for (m = 0; m < T_ARRAY_SIZE(mult); m++) {
				uint64_t d = off + mult[m] * t_pow64(k);

				if (d <= base)
					continue;
				t_set_add(s, d, 0);
				/* Slack that lands on the same multiple. */
				if (k > 0)
					t_set_add(s, d - 3, 3);
			}
		}
		for (k = 3; k < 64; k++)
			if ((UINT64_C(1) << k) > base)
				t_set_add(s, UINT64_C(1) << k, 0);
		t_set_walk(s);
		t_set_free(s);
	}
}
END_TEST

/* 64^k - 1, 64^k, 64^k + 1 ticks ahead, k = 1..8, all in one wheel. */
START_TEST(test_wheel_level_boundaries)
{
	size_t b;
	unsigned int k;
	int d;

	for (b = 0; b < T_ARRAY_SIZE(t_bases); b++) {
		uint64_t base = t_bases[b];
		struct t_set *s = t_set_new(base);

		t_set_add(s, base + 1, 0);
		t_set_add(s, base + 63, 0);
		for (k = 1; k <= WHEEL_LEVELS; k++) {
			for (d = -1; d <= 1; d++) {
				t_set_add(s, base + t_pow64(k) + (uint64_t)(int64_t)d, 0);
				/* The same boundary again from a deadline with slack. */
				t_set_add(s, base + t_pow64(k) + (uint64_t)(int64_t)d - 1, 1);
			}
		}
		t_set_walk(s);
		t_set_free(s);
	}
}
END_TEST

/* The same boundaries one record at a time: no neighbour to mask a miss. */
START_TEST(test_wheel_level_boundaries_alone)
{
	size_t b;
	unsigned int k;
	int d;

	for (b = 0; b < T_ARRAY_SIZE(t_bases); b++) {
		for (k = 1; k <= WHEEL_LEVELS; k++) {
			for (d = -1; d <= 1; d++) {
				uint64_t base = t_bases[b];
				struct t_set *s = t_set_new(base);
				size_t i;

				i = t_set_add(s, base + t_pow64(k) + (uint64_t)(int64_t)d, 0);

				T_UINT_EQ(t_set_advance(s, s->fire[i] - 1), 0);
				T_ASSERT(wheel_timer_pending(&s->t[i]));
				T_UINT_EQ(t_set_advance(s, s->fire[i]), 1);
				t_set_free(s);
			}
		}
	}
}
END_TEST

/* Far future, including the overflow list, reached by single big jumps. */
START_TEST(test_wheel_far_future)
{
	static const uint64_t starts[] = { 0, 12345, T_SPAN - 5, 5 * T_SPAN + 77 };
	static const uint64_t delay[] = {
		UINT64_C(1) << 47, T_SPAN - 1, T_SPAN, T_SPAN + 1, UINT64_C(1) << 50,
		UINT64_C(1) << 60, UINT64_MAX - 1,
	};
	size_t b, j;

	for (b = 0; b < T_ARRAY_SIZE(starts); b++) {
		uint64_t base = starts[b];
		struct t_set *s = t_set_new(base);

		for (j = 0; j < T_ARRAY_SIZE(delay); j++) {
			size_t i = t_set_add(s, t_sat_add(base, delay[j]), 0);

			/* More than 2^48 ahead: nothing but the overflow list can hold it. */
			if (delay[j] > T_SPAN)
				T_UINT_EQ(s->t[i].where, WHEEL_OVERFLOW);
			else if (delay[j] <= T_SPAN / 2 && base % T_SPAN <= T_SPAN / 2)
				T_ASSERT(t_in_slot(s->t[i].where));
		}
		t_set_add(s, UINT64_MAX - 1, 0);
		t_set_add(s, UINT64_MAX, 0);
		t_set_add(s, UINT64_MAX - 5, 5);
		t_set_walk(s);
		t_set_free(s);
	}
}
END_TEST

/* Far future approached in odd-sized steps across several 2^48 boundaries. */
START_TEST(test_wheel_far_future_steps)
{
	struct t_set *s = t_set_new(0);
	uint64_t step = (UINT64_C(1) << 45) + 12345, now = 0;
	size_t i;

	t_set_add(s, T_SPAN + 1, 0);
	t_set_add(s, UINT64_C(1) << 49, 0);
	t_set_add(s, (UINT64_C(1) << 50) + 3, 0);
	t_set_add(s, 3 * T_SPAN - 1, 0);
	t_set_add(s, 3 * T_SPAN, 0);
	t_set_add(s, (UINT64_C(1) << 50) + 3, 7);
	while (wheel_count(s->w)) {
		now += step;
		t_set_advance(s, now);	/* asserts nothing early, nothing missed */
	}
	for (i = 0; i < s->n; i++)
		T_UINT_LT(s->at[i] - s->fire[i], step);
	t_set_free(s);
}
END_TEST

/* Deadline UINT64_MAX is a valid deadline, and the end of time is usable. */
START_TEST(test_wheel_deadline_max)
{
	struct t_set *s = t_set_new(0);
	size_t a, b, c, d;

	a = t_set_add(s, UINT64_MAX, 0);
	b = t_set_add(s, UINT64_MAX, UINT32_MAX);
	c = t_set_add(s, UINT64_MAX - 1, 1);
	T_UINT_EQ(s->fire[c], UINT64_MAX - 1);
	T_UINT_EQ(s->t[a].where, WHEEL_OVERFLOW);
	T_UINT_EQ(s->t[b].where, WHEEL_OVERFLOW);
	T_UINT_EQ(t_set_advance(s, UINT64_MAX - 2), 0);
	T_UINT_EQ(t_set_advance(s, UINT64_MAX - 1), 1);
	T_UINT_EQ(s->state[c], T_FIRED);
	T_UINT_EQ(t_set_advance(s, UINT64_MAX), 2);	/* a then b */
	T_UINT_EQ(wheel_count(s->w), 0);
	T_UINT_EQ(wheel_next(s->w), UINT64_MAX);
	/* With the clock at UINT64_MAX everything is due as soon as added. */
	d = t_set_add(s, UINT64_MAX, 0);
	T_UINT_EQ(s->t[d].where, WHEEL_DUE);
	T_UINT_EQ(wheel_next(s->w), UINT64_MAX);
	T_UINT_EQ(wheel_advance(s->w, UINT64_MAX), 0);
	T_UINT_EQ(t_set_pop_all(s, 1), 1);
	t_set_free(s);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* wheel_next() and the tickless loop.                                      */
/* ------------------------------------------------------------------------ */

START_TEST(test_wheel_next_bounds)
{
	struct t_set *s = t_set_new(10);
	size_t far, due;

	T_UINT_EQ(wheel_next(s->w), UINT64_MAX);
	far = t_set_add(s, UINT64_C(1) << 50, 0);
	/* Only the overflow list: still some tick no later than its fire tick. */
	t_set_check_next(s);
	t_set_add(s, (UINT64_C(1) << 30) + 7, 0);
	t_set_check_next(s);
	t_set_add(s, 5000, 0);
	t_set_check_next(s);
	t_set_add(s, 100, 0);
	t_set_check_next(s);
	t_set_add(s, 15, 0);
	t_set_check_next(s);
	T_UINT_EQ(wheel_next(s->w), 15);	/* level 0: the fire tick itself */
	/* A due record makes it "now". */
	due = t_set_add(s, 3, 0);
	T_UINT_EQ(wheel_next(s->w), 10);
	t_set_del(s, due);
	t_set_check_next(s);
	t_set_walk(s);	/* checks wheel_next() before every fire tick */
	T_UINT_EQ(s->state[far], T_FIRED);
	t_set_free(s);
}
END_TEST

/*
 * Thousands of records across the levels, some with slack, some crossing a
 * 2^48 boundary: sleeping until wheel_next() must fire each exactly at its
 * fire tick, and re-filing must cost a bounded number of wake-ups.
 */
START_TEST(test_wheel_next_tickless)
{
	static const uint64_t starts[] = { 0, 999, T_SPAN - (UINT64_C(1) << 30) };
	size_t b, i, n = 2000;

	for (b = 0; b < T_ARRAY_SIZE(starts); b++) {
		uint64_t rng = t_base_seed + b, iters;
		struct t_set *s = t_set_new(starts[b]);

		for (i = 0; i < n; i++) {
			uint64_t d = starts[b] + 1 + t_below_log(&rng, UINT64_C(1) << 36);
			uint32_t slack = i % 4 ? 0 : (uint32_t)t_below_log(&rng, 1u << 20);

			t_set_add(s, d, slack);
		}
		/* Each record is re-filed at most once per level on its way down. */
		iters = t_set_tickless(s, 2 * (WHEEL_LEVELS + 2) * n + 1024);
		T_UINT_GE(iters, 1);
		t_set_free(s);
	}
}
END_TEST

/* The tickless loop with nothing but far-future records. */
START_TEST(test_wheel_next_tickless_far)
{
	struct t_set *s = t_set_new(0);

	t_set_add(s, UINT64_C(1) << 47, 0);
	t_set_add(s, T_SPAN + 1, 0);
	t_set_add(s, UINT64_C(1) << 50, 0);
	t_set_add(s, (UINT64_C(1) << 50) + 1000, 100);
	t_set_add(s, UINT64_C(1) << 60, 0);
	t_set_add(s, UINT64_MAX - 1, 0);
	t_set_add(s, UINT64_MAX, 0);
	/*
	 * The overflow list is re-filed at each 2^48 boundary, so reaching
	 * UINT64_MAX may take one wake-up per boundary: 2^16 of them.
	 */
	t_set_tickless(s, (UINT64_C(1) << 16) + 1024);
	t_set_free(s);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Slack.                                                                   */
/* ------------------------------------------------------------------------ */

/* Fired inside [deadline, deadline + slack], exactly at the chosen tick. */
START_TEST(test_wheel_slack_window)
{
	struct t_set *s = t_set_new(1000);
	uint64_t rng = t_base_seed ^ 0x51ac;
	size_t i, n = 3000;

	for (i = 0; i < n; i++) {
		uint64_t d = 1001 + t_below_log(&rng, UINT64_C(1) << 32);
		uint32_t slack = (uint32_t)t_below_log(&rng, UINT64_C(1) << 32);

		t_set_add(s, d, slack);
		T_UINT_EQ(s->fire[i], wheel_fire_tick(d, slack));
	}
	t_set_tickless(s, 2 * (WHEEL_LEVELS + 2) * n + 1024);
	t_set_free(s);

	/* The same, walked fire tick by fire tick. */
	s = t_set_new(77);
	for (i = 0; i < 500; i++)
		t_set_add(s, 78 + t_below_log(&rng, UINT64_C(1) << 40),
			  (uint32_t)t_below_log(&rng, UINT64_C(1) << 32));
	t_set_walk(s);
	t_set_free(s);
}
END_TEST

/* Slack lets a timer wait for an aligned tick, and never makes it early. */
START_TEST(test_wheel_slack_coarse)
{
	struct t_set *s = t_set_new(0);
	size_t a, b, c;

	a = t_set_add(s, 1000, 100);
	b = t_set_add(s, 1, UINT32_MAX);
	c = t_set_add(s, (UINT64_C(1) << 40) + 1, 1u << 20);
	T_UINT_EQ(s->fire[a], 1024);
	T_UINT_EQ(s->fire[b], UINT64_C(1) << 32);
	T_UINT_EQ(s->fire[c], (UINT64_C(1) << 40) + (UINT64_C(1) << 20));
	T_UINT_EQ(t_set_advance(s, 1000), 0);	/* its deadline: may wait */
	T_UINT_EQ(t_set_advance(s, 1023), 0);
	T_UINT_EQ(t_set_advance(s, 1024), 1);
	T_UINT_EQ(t_set_advance(s, 2), 0);	/* backwards: nothing */
	T_UINT_EQ(t_set_advance(s, (UINT64_C(1) << 32) - 1), 0);
	T_UINT_EQ(t_set_advance(s, UINT64_C(1) << 32), 1);
	t_set_walk(s);
	t_set_free(s);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Order of records with equal fire ticks.                                  */
/* ------------------------------------------------------------------------ */

/* A fisher-yates shuffle of 0..n-1: records are used in scattered order. */
static void t_perm(uint64_t *rng, size_t *p, size_t n)
{
	size_t i, j, tmp;

	for (i = 0; i < n; i++)
		p[i] = i;
	for (i = n; i > 1; i--) {
		j = (size_t)t_below(rng, i);
		tmp = p[i - 1];
		p[i - 1] = p[j];
		p[j] = tmp;
	}
}

START_TEST(test_wheel_order_same_tick)
{
	static const uint64_t fires[] = { 63, 24576, (UINT64_C(1) << 40) + 4096, 5 * T_SPAN };
	size_t f, j, n = 256, perm[256], order[256];
	uint64_t rng = t_base_seed ^ 0x0bd;

	for (f = 0; f < T_ARRAY_SIZE(fires); f++) {
		struct t_set *s = t_set_new(7);
		uint64_t D = fires[f];
		struct wheel_timer *t;

		t_set_reserve(s, n);
		t_perm(&rng, perm, n);
		for (j = 0; j < n; j++) {
			/* Half exact, half with slack whose best tick is D. */
			uint64_t back = t_below(&rng, 4);
			uint32_t slack = (uint32_t)(back + t_below(&rng, 2));

			if (j % 2 || D % 16)
				back = slack = 0;
			t_set_arm(s, perm[j], D - back, slack);
			T_UINT_EQ(s->fire[perm[j]], D);
		}
		T_UINT_EQ(t_set_advance(s, D - 1), 0);
		T_UINT_EQ(wheel_advance(s->w, D), n);
		for (j = 0; (t = wheel_pop(s->w)); j++) {
			T_UINT_LT(j, n);
			order[j] = t_set_index(s, t);
		}
		T_UINT_EQ(j, n);
		for (j = 0; j < n; j++)
			T_ASSERT_MSG(order[j] == perm[j], "pop #%zu is record %zu, added as #%zu",
				     j, order[j], perm[j]);
		t_check(s->w);
		t_set_free(s);
	}
}
END_TEST

/*
 * One record added long before its fire tick, the others added at every
 * interesting moment on its way down the levels (just before, on and after
 * each slot boundary), all with the same fire tick: they pop in add order.
 */
START_TEST(test_wheel_order_across_levels)
{
	static const uint64_t fires[] = {
		10000, 300000, (UINT64_C(1) << 40) + 5, (UINT64_C(1) << 40) + 4096,
		T_SPAN + (UINT64_C(1) << 20) + 3, T_SPAN + (UINT64_C(1) << 20),
		5 * T_SPAN + 1, UINT64_MAX - 64, UINT64_MAX - 63,
	};
	uint64_t times[256];
	size_t f, n, i, j;
	unsigned int k;

	for (f = 0; f < T_ARRAY_SIZE(fires); f++) {
		uint64_t D = fires[f];
		struct t_set *s = t_set_new(0);

		n = 0;
		for (k = 0; k <= WHEEL_LEVELS; k++) {
			uint64_t p = t_pow64(k), a = D & ~(p - 1);

			times[n++] = D - p - 1;
			times[n++] = D - p;
			times[n++] = D - p + 1;
			times[n++] = D - p / 2;
			times[n++] = a;
			times[n++] = a - 1;
			times[n++] = a + 1;
		}
		times[n++] = T_SPAN - 1;
		times[n++] = T_SPAN;
		times[n++] = T_SPAN + 1;
		times[n++] = D - 1;
		/* Sort (insertion: n is small), then drop repeats and those out of (0, D). */
		for (i = 1; i < n; i++)
			for (j = i; j > 0 && times[j - 1] > times[j]; j--) {
				uint64_t tmp = times[j];

				times[j] = times[j - 1];
				times[j - 1] = tmp;
			}
		t_set_add(s, D, 0);
		if (D % 2 == 0)
			t_set_add(s, D - 1, 2);	/* [D - 1, D + 1]: slack onto D */
		for (i = 0; i < n; i++) {
			if (times[i] == 0 || times[i] >= D || (i && times[i] == times[i - 1]))
				continue;
			T_UINT_EQ(t_set_advance(s, times[i]), 0);
			t_set_add(s, D, 0);
			if (D % 4 == 0)
				t_set_add(s, D - 2, 3);
		}
		/* The harness asserts add order among equal fire ticks. */
		T_UINT_EQ(t_set_advance(s, D - 1), 0);
		T_UINT_GE(t_set_advance(s, D), 3);
		T_UINT_EQ(wheel_count(s->w), 0);
		t_set_free(s);
	}
}
END_TEST

/* A record moved earlier ranks as if added at that moment. */
START_TEST(test_wheel_order_update_earlier)
{
	struct t_set *s = t_set_new(0);
	struct wheel_timer *t;
	size_t A, B, C, D, E, F, H, I, j = 0;
	size_t want[8];

	B = t_set_add(s, 100, 0);
	A = t_set_add(s, 500, 0);
	C = t_set_add(s, 1000, 0);
	D = t_set_add(s, 100, 0);
	F = t_set_add(s, UINT64_C(1) << 50, 0);
	t_set_update(s, C, 100);
	t_set_update(s, A, 100);
	E = t_set_add(s, 100, 0);
	t_set_update(s, F, 100);
	T_UINT_EQ(t_set_advance(s, 50), 0);
	H = t_set_add(s, 100, 0);
	I = t_set_add(s, 3000, 0);
	t_set_update(s, I, 100);
	want[0] = B, want[1] = D, want[2] = C, want[3] = A;
	want[4] = E, want[5] = F, want[6] = H, want[7] = I;
	T_UINT_EQ(wheel_advance(s->w, 100), 8);
	while ((t = wheel_pop(s->w))) {
		T_UINT_LT(j, 8);
		T_ASSERT_MSG(t == &s->t[want[j]], "pop #%zu is record %zu, want %zu",
			     j, t_set_index(s, t), want[j]);
		j++;
	}
	T_UINT_EQ(j, 8);
	t_check(s->w);
	t_set_free(s);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Push later, push earlier, cancel.                                        */
/* ------------------------------------------------------------------------ */

/*
 * t_push_later - moves record @i later and asserts it was a store: same
 * place.  Its slot is visited no later than its old fire
 * tick, so no later than the new one, which is the header's condition.
 */
static void t_push_later(struct t_set *s, size_t i, uint64_t deadline)
{
	uint16_t where = s->t[i].where;
	uint64_t old_fire = s->fire[i];

	T_UINT_GE(deadline, s->t[i].deadline);
	t_set_update(s, i, deadline);
	T_ASSERT_MSG(s->t[i].where == where, "push-later of record %zu to %" PRIu64
		     " relinked it: where %u -> %u", i, deadline, where, s->t[i].where);
	if (s->fire[i] > old_fire)
		T_ASSERT_MSG(s->moved_where[i] == where, "push-later in place of record %zu"
			     " not seen as one", i);
}

START_TEST(test_wheel_update_later_in_place)
{
	struct t_set *s = t_set_new(0);
	size_t a, b, c, d;

	/* Level 0: the old tick passes quietly, the new one fires. */
	a = t_set_add(s, 10, 0);
	t_push_later(s, a, 20);
	T_UINT_EQ(t_set_advance(s, 9), 0);
	T_UINT_EQ(t_set_advance(s, 10), 0);
	T_ASSERT(wheel_timer_pending(&s->t[a]));
	T_UINT_EQ(t_set_advance(s, 19), 0);
	T_UINT_EQ(t_set_advance(s, 20), 1);
	T_UINT_EQ(s->at[a], 20);

	/* A higher level, with slack that it keeps. */
	b = t_set_add(s, 5000, 0);
	c = t_set_add(s, 5000, 100);
	t_push_later(s, b, 9000);
	t_push_later(s, c, 9000);
	T_UINT_EQ(s->t[c].slack, 100);
	T_UINT_EQ(s->fire[c], 9088);
	T_UINT_EQ(t_set_advance(s, 4999), 0);
	T_UINT_EQ(t_set_advance(s, 5000), 0);
	T_UINT_EQ(t_set_advance(s, 5056), 0);	/* c's old fire tick */
	T_UINT_EQ(t_set_advance(s, 8999), 0);
	T_UINT_EQ(t_set_advance(s, 9000), 1);
	T_UINT_EQ(s->state[b], T_FIRED);
	T_UINT_EQ(t_set_advance(s, 9087), 0);
	T_UINT_EQ(t_set_advance(s, 9088), 1);

	/* Pushed past the levels: re-filed onto the overflow list when its slot comes round. */
	d = t_set_add(s, 10000, 0);
	t_push_later(s, d, UINT64_C(1) << 50);
	T_UINT_EQ(t_set_advance(s, 10000), 0);
	T_UINT_EQ(s->t[d].where, WHEEL_OVERFLOW);
	/* From the overflow list a push later is a store too. */
	t_push_later(s, d, (UINT64_C(1) << 50) + 5);
	T_UINT_EQ(t_set_advance(s, UINT64_C(1) << 50), 0);
	T_UINT_EQ(t_set_advance(s, (UINT64_C(1) << 50) + 4), 0);
	T_UINT_EQ(t_set_advance(s, (UINT64_C(1) << 50) + 5), 1);
	t_set_free(s);
}
END_TEST

/*
 * The idle-timeout pattern: every record pushed to now + timeout on every
 * "packet" for a long while.  None may fire meanwhile; once the pushes
 * stop, each fires exactly at its last deadline.
 */
START_TEST(test_wheel_update_later_repeated)
{
	struct t_set *s = t_set_new(0);
	uint64_t now = 0, rng = t_base_seed ^ 0x1d1e;
	size_t i, n = 128, round;

	for (i = 0; i < n; i++)
		t_set_add(s, 1000 + i * 37, i % 3 ? 0 : 7);
	for (round = 0; round < 600; round++) {
		now += 1 + t_below(&rng, 20);
		T_UINT_EQ(t_set_advance(s, now), 0);
		for (i = 0; i < n; i++)
			if (t_below(&rng, 4))
				t_push_later(s, i, t_max(s->t[i].deadline, now + 1000 + i * 37));
	}
	t_set_walk(s);
	t_set_free(s);
}
END_TEST

START_TEST(test_wheel_update_earlier_relinks)
{
	struct t_set *s = t_set_new(0);
	uint16_t where;
	size_t a, b, c, d, e;

	/* From level 2 to level 1: relinked, fires at the new tick only. */
	a = t_set_add(s, 5000, 0);
	where = s->t[a].where;
	t_set_update(s, a, 100);
	T_UINT_NE(s->t[a].where, where);
	T_UINT_NE(s->moved_where[a], s->t[a].where);
	/* From the overflow list to level 1. */
	b = t_set_add(s, UINT64_C(1) << 50, 0);
	T_UINT_EQ(s->t[b].where, WHEEL_OVERFLOW);
	t_set_update(s, b, 70);
	T_ASSERT(t_in_slot(s->t[b].where));
	/* Pushed later in place, then back earlier (still after the original). */
	c = t_set_add(s, 10, 0);
	t_push_later(s, c, 1000);
	t_set_update(s, c, 500);
	T_UINT_EQ(t_set_advance(s, 10), 0);
	T_UINT_EQ(t_set_advance(s, 69), 0);
	T_UINT_EQ(t_set_advance(s, 70), 1);
	T_UINT_EQ(t_set_advance(s, 99), 0);
	T_UINT_EQ(t_set_advance(s, 100), 1);
	T_UINT_EQ(t_set_advance(s, 499), 0);
	T_UINT_EQ(t_set_advance(s, 500), 1);
	T_UINT_EQ(s->state[c], T_FIRED);
	/* Nothing fires again at the old ticks. */
	T_UINT_EQ(t_set_advance(s, 6000), 0);

	/* Into the past: straight to the due list, popped without an advance. */
	d = t_set_add(s, 9000, 0);
	e = t_set_add(s, 7000, 0);
	t_set_update(s, d, 150);
	T_UINT_EQ(s->t[d].where, WHEEL_DUE);
	t_set_update(s, e, 6000);	/* == curr */
	T_UINT_EQ(s->t[e].where, WHEEL_DUE);
	T_UINT_EQ(s->w->ndue, 2);
	T_UINT_EQ(wheel_next(s->w), 6000);
	T_UINT_EQ(t_set_pop_all(s, 2), 2);
	t_set_free(s);
}
END_TEST

/* Moving a due record relinks it: out of the due list, or back onto its tail. */
START_TEST(test_wheel_update_due_record)
{
	struct t_set *s = t_set_new(100);
	size_t a, b, c;

	a = t_set_add(s, 50, 0);
	T_UINT_EQ(s->w->ndue, 1);
	t_set_update(s, a, 150);
	T_UINT_NE(s->t[a].where, WHEEL_DUE);
	T_UINT_EQ(s->w->ndue, 0);
	T_ASSERT((wheel_pop(s->w)) == NULL);
	t_set_check_next(s);
	/* Made due by an advance, not yet popped, then moved later. */
	b = t_set_add(s, 120, 0);
	T_UINT_EQ(wheel_advance(s->w, 120), 1);
	T_UINT_EQ(s->t[b].where, WHEEL_DUE);
	t_set_update(s, b, 300);
	T_UINT_NE(s->t[b].where, WHEEL_DUE);
	T_UINT_EQ(s->w->ndue, 0);
	/* Due, moved to another past tick: still due, still popped once. */
	c = t_set_add(s, 110, 0);
	t_set_update(s, c, 90);
	T_UINT_EQ(s->t[c].where, WHEEL_DUE);
	T_UINT_EQ(s->w->ndue, 1);
	T_UINT_EQ(t_set_pop_all(s, 1), 1);
	T_UINT_EQ(t_set_advance(s, 149), 0);
	T_UINT_EQ(t_set_advance(s, 150), 1);
	T_UINT_EQ(t_set_advance(s, 299), 0);
	T_UINT_EQ(t_set_advance(s, 300), 1);
	t_set_free(s);
}
END_TEST

/* wheel_insert() takes deadline and slack from the record and acts as wheel_add(). */
START_TEST(test_wheel_insert)
{
	struct t_set *s = t_set_new(100);
	struct wheel_timer before;
	size_t i;

	T_INT_EQ(wheel_insert(NULL, &s->t[0]), -EINVAL);
	T_INT_EQ(wheel_insert(s->w, NULL), -EINVAL);
	t_set_reserve(s, 7);
	t_set_arm_by(s, 0, 50, 0, true);		/* past: due at once */
	T_UINT_EQ(s->t[0].where, WHEEL_DUE);
	t_set_arm_by(s, 1, 101, 0, true);
	t_set_arm_by(s, 2, 5000, 100, true);
	T_UINT_EQ(s->fire[2], 5056);
	t_set_arm_by(s, 3, UINT64_C(1) << 50, 0, true);
	T_UINT_EQ(s->t[3].where, WHEEL_OVERFLOW);
	t_set_arm_by(s, 4, UINT64_MAX, 7, true);
	t_set_arm_by(s, 5, 101, 0, false);		/* same tick as 1, added after it */
	/* A zero-filled record inserted as it is: deadline 0, due at once. */
	t_set_arm_by(s, 6, 0, 0, true);
	T_UINT_EQ(s->t[6].where, WHEEL_DUE);
	/* Inserting a pending record is refused and changes nothing. */
	for (i = 0; i < 7; i++) {
		before = s->t[i];
		T_INT_EQ(wheel_insert(s->w, &s->t[i]), -EBUSY);
		T_MEM_EQ(&s->t[i], &before, sizeof(before));
	}
	T_UINT_EQ(wheel_count(s->w), 7);
	t_set_walk(s);
	t_set_free(s);
}
END_TEST

/*
 * wheel_refresh(): a deadline stored from outside.  Later is a store; an
 * earlier one may stay in place while its slot is still visited in time,
 * else it is relinked; either way it fires exactly at its new fire tick.
 */
START_TEST(test_wheel_refresh)
{
	struct t_set *s = t_set_new(0);
	struct wheel_timer zero;
	uint16_t where;
	size_t a, b, c, d, e, f;

	memset(&zero, 0, sizeof(zero));
	T_INT_EQ(wheel_refresh(NULL, &zero), -EINVAL);
	T_INT_EQ(wheel_refresh(s->w, NULL), -EINVAL);
	T_INT_EQ(wheel_refresh(s->w, &zero), -ENOENT);
	T_MEM_EQ(&zero, &(struct wheel_timer){ 0 }, sizeof(zero));

	/* Later: in place, fires at the new tick and not the old. */
	a = t_set_add(s, 10, 0);
	where = s->t[a].where;
	t_set_refresh(s, a, 20);
	T_UINT_EQ(s->t[a].where, where);
	T_UINT_EQ(t_set_advance(s, 10), 0);
	T_UINT_EQ(t_set_advance(s, 19), 0);
	T_UINT_EQ(t_set_advance(s, 20), 1);

	/* Earlier, but still after its slot's visit (4096): may stay, fires exactly. */
	b = t_set_add(s, 5000, 0);
	t_set_refresh(s, b, 4500);
	/* Earlier than its slot's visit: must be relinked. */
	c = t_set_add(s, 5000, 0);
	where = s->t[c].where;
	t_set_refresh(s, c, 100);
	T_UINT_NE(s->t[c].where, where);
	/* Due, refreshed into the future: off the due list. */
	d = t_set_add(s, 5, 0);
	T_UINT_EQ(s->t[d].where, WHEEL_DUE);
	t_set_refresh(s, d, 70);
	T_UINT_NE(s->t[d].where, WHEEL_DUE);
	T_UINT_EQ(s->w->ndue, 0);
	/* Refreshed into the past: due at once. */
	e = t_set_add(s, 3000, 0);
	t_set_refresh(s, e, 20);
	T_UINT_EQ(s->t[e].where, WHEEL_DUE);
	T_UINT_EQ(t_set_pop_all(s, 1), 1);
	/* On the overflow list: later stays there, earlier comes down. */
	f = t_set_add(s, UINT64_C(1) << 50, 0);
	t_set_refresh(s, f, (UINT64_C(1) << 50) + 10);
	T_UINT_EQ(s->t[f].where, WHEEL_OVERFLOW);
	t_set_refresh(s, f, 300);
	T_ASSERT(t_in_slot(s->t[f].where));
	t_set_walk(s);
	T_UINT_EQ(s->at[b], 4500);
	T_UINT_EQ(s->at[c], 100);
	T_UINT_EQ(s->at[d], 70);
	T_UINT_EQ(s->at[f], 300);
	t_set_free(s);
}
END_TEST

/* Cancel works wherever the record is, and a cancelled record never fires. */
START_TEST(test_wheel_del_anywhere)
{
	struct t_set *s = t_set_new(0);
	size_t i, lvl0, lvl3, ovf, due, moved, advdue, keep;

	lvl0 = t_set_add(s, 10, 0);
	lvl3 = t_set_add(s, 300000, 0);
	ovf = t_set_add(s, UINT64_C(1) << 50, 0);
	moved = t_set_add(s, 20, 0);
	t_push_later(s, moved, 5000);
	advdue = t_set_add(s, 5, 0);
	keep = t_set_add(s, 5, 0);
	T_UINT_EQ(wheel_advance(s->w, 5), 2);	/* advdue and keep due, not popped */
	due = t_set_add(s, 1, 0);			/* due at once */
	T_UINT_EQ(s->w->ndue, 3);
	t_set_del(s, lvl0);
	t_set_del(s, lvl3);
	t_set_del(s, ovf);
	t_set_del(s, moved);
	t_set_del(s, advdue);
	t_set_del(s, due);
	T_UINT_EQ(s->w->ndue, 1);
	T_UINT_EQ(wheel_count(s->w), 1);
	T_UINT_EQ(t_set_pop_all(s, 1), 1);
	T_UINT_EQ(s->state[keep], T_FIRED);
	T_UINT_EQ(t_set_advance(s, UINT64_MAX - 1), 0);
	T_UINT_EQ(wheel_next(s->w), UINT64_MAX);
	/* Cancelled records can be armed again and fire normally. */
	for (i = 0; i < s->n; i++)
		if (s->state[i] == T_IDLE)
			t_set_arm(s, i, UINT64_MAX, 0);
	T_UINT_EQ(t_set_advance(s, UINT64_MAX), 6);
	t_set_free(s);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Randomized runs against a reference model.                               */
/* ------------------------------------------------------------------------ */

/*
 * The model keeps, per record, what the wheel must know: live or not, its
 * deadline, slack and fire tick.  A binary min-heap of fire ticks (entries
 * invalidated lazily by a version number) answers "which live records are
 * due by now" and "what is the earliest fire tick" in O(log n), so the same
 * model serves a run with a million records.
 */
struct t_ref {
	uint64_t deadline;
	uint64_t fire;
	uint64_t eff;		/* when it became due: max(fire, tick when armed) */
	uint64_t seq;		/* add (or move-earlier) order, for equal fire ticks */
	uint32_t slack;
	uint32_t ver;		/* bumped on every change; stale heap entries mismatch */
	uint32_t pos;		/* index in ids[] */
	uint16_t moved_where;	/* where a push-later in place left it, or 0 */
	bool live;
	bool ordered;		/* seq is its rank among records due at the same tick */
};

struct t_hent {
	uint64_t fire;
	uint32_t id;
	uint32_t ver;
};

struct t_model {
	struct wheel *w;
	struct wheel_timer *t;	/* the records: one array, used in random order */
	struct t_ref *ref;
	uint32_t *ids;		/* ids[0..nlive) live, ids[nlive..nrec) free */
	struct t_hent *heap;
	size_t nrec, nlive, nheap, heapcap;
	uint64_t curr;		/* the model's idea of the wheel's current tick */
	uint64_t ndue;		/* live records with fire <= curr */
	uint64_t seq;
	uint64_t rng;
	uint64_t step;
	uint64_t check_every;	/* wheel_check() and a full comparison every this many steps */
	uint64_t near;		/* typical delay */
	uint64_t adv;		/* typical advance; with near, sets how many records fire */
	unsigned int run;
	bool far_pushes;	/* allow pushes to (and arms at) the end of time */
	unsigned int big_odds;	/* 1 in this many "big" advances goes up to 2^50; 0: never */
	uint64_t nfired, nadvance, ntickless, nmoved, live_sum;	/* what the run covered */
};

/*
 * T_REQUIRE - fails the test with the seed, run, step and tick that
 * reproduce it.  Check's own ck_assert*() records a "last passing line" on
 * every call, which is too slow for millions of steps; this only costs a
 * branch until something is wrong.
 */
#define T_REQUIRE(m, cond, fmt, ...)						\
	do {									\
		if (!(cond))							\
			ck_abort_msg("KAIROS_SEED=%#" PRIx64 " run %u step %" PRIu64	\
				     " curr %" PRIu64 ": failed: %s: " fmt,	\
				     t_base_seed, (m)->run, (m)->step, (m)->curr,	\
				     #cond, ##__VA_ARGS__);			\
	} while (0)

/* Each record's flags (the user's), to prove the wheel leaves them alone. */
static uint16_t t_user_flags(uint32_t id)
{
	return (uint16_t)(id * 40503u);
}

static bool t_hent_valid(const struct t_model *m, const struct t_hent *e)
{
	const struct t_ref *r = &m->ref[e->id];

	return r->live && r->ver == e->ver;
}

static void t_heap_sift_down(struct t_model *m, size_t i)
{
	struct t_hent e = m->heap[i];
	size_t c;

	for (;;) {
		c = 2 * i + 1;
		if (c >= m->nheap)
			break;
		if (c + 1 < m->nheap && m->heap[c + 1].fire < m->heap[c].fire)
			c++;
		if (e.fire <= m->heap[c].fire)
			break;
		m->heap[i] = m->heap[c];
		i = c;
	}
	m->heap[i] = e;
}

/* Drops stale entries and re-heapifies, so the heap stays O(live) under churn. */
static void t_heap_compact(struct t_model *m)
{
	size_t i, n = 0;

	for (i = 0; i < m->nheap; i++)
		if (t_hent_valid(m, &m->heap[i]))
			m->heap[n++] = m->heap[i];
	m->nheap = n;
	for (i = n / 2; i-- > 0;)
		t_heap_sift_down(m, i);
}

static void t_heap_push(struct t_model *m, uint32_t id)
{
	struct t_hent e = { m->ref[id].fire, id, m->ref[id].ver };
	size_t i, p;

	if (m->nheap == m->heapcap) {
		t_heap_compact(m);
		if (m->nheap > m->heapcap / 2) {
			m->heapcap *= 2;
			m->heap = realloc(m->heap, m->heapcap * sizeof(*m->heap));
			T_ASSERT((m->heap) != NULL);
		}
	}
	for (i = m->nheap++; i > 0; i = p) {
		p = (i - 1) / 2;
		if (m->heap[p].fire <= e.fire)
			break;
		m->heap[i] = m->heap[p];
	}
	m->heap[i] = e;
}

static void t_heap_pop(struct t_model *m)
{
	m->heap[0] = m->heap[--m->nheap];
	if (m->nheap)
		t_heap_sift_down(m, 0);
}

/* The earliest fire tick of a live record; false when none is live. */
static bool t_heap_min(struct t_model *m, uint64_t *fire)
{
	while (m->nheap && !t_hent_valid(m, &m->heap[0]))
		t_heap_pop(m);
	if (!m->nheap)
		return false;
	*fire = m->heap[0].fire;
	return true;
}

static void t_model_init(struct t_model *m, unsigned int run, size_t nrec, uint64_t start,
			 uint64_t near, uint64_t check_every)
{
	uint32_t id;

	memset(m, 0, sizeof(*m));
	m->run = run;
	/* Each run gets its own stream, derived from the one seed. */
	m->rng = t_base_seed;
	m->rng = t_rand(&m->rng) ^ (UINT64_C(0x9e3779b97f4a7c15) * (run + 1));
	m->nrec = nrec;
	m->near = near;
	m->adv = near;
	m->check_every = check_every;
	m->curr = start;
	m->far_pushes = true;
	m->big_odds = 32;
	m->w = t_wheel_new(start);
	m->t = calloc(nrec, sizeof(*m->t));
	m->ref = calloc(nrec, sizeof(*m->ref));
	m->ids = malloc(nrec * sizeof(*m->ids));
	m->heapcap = 2 * nrec + 64;
	m->heap = malloc(m->heapcap * sizeof(*m->heap));
	T_ASSERT(m->t && m->ref && m->ids && m->heap);
	for (id = 0; id < nrec; id++) {
		m->ids[id] = id;
		m->ref[id].pos = id;
		m->t[id].flags = t_user_flags(id);
	}
}

static void t_model_free(struct t_model *m)
{
	free(m->w);
	free(m->t);
	free(m->ref);
	free(m->ids);
	free(m->heap);
}

/* Moves @id between the live and free parts of ids[]. */
static void t_model_set_live(struct t_model *m, uint32_t id, bool live)
{
	size_t p = m->ref[id].pos, q = live ? m->nlive++ : --m->nlive;
	uint32_t other = m->ids[q];

	m->ids[q] = id;
	m->ids[p] = other;
	m->ref[other].pos = (uint32_t)p;
	m->ref[id].pos = (uint32_t)q;
	m->ref[id].live = live;
	m->ref[id].moved_where = 0;
	m->ref[id].ver++;
}

/* A random live (or free) record: records are touched in scattered order. */
static uint32_t t_model_pick(struct t_model *m, bool live)
{
	if (live)
		return m->ids[t_below(&m->rng, m->nlive)];
	return m->ids[m->nlive + t_below(&m->rng, m->nrec - m->nlive)];
}

/* Deadlines across everything the wheel distinguishes. */
static uint64_t t_gen_deadline(struct t_model *m)
{
	uint64_t c = m->curr, *r = &m->rng, p;
	unsigned int k;

	switch (t_below(r, 24)) {
	case 0:		/* in the past, or now: straight to the due list */
		return c - t_below(r, c < 1000 ? c + 1 : 1000);
	case 1:		/* the next tick */
		return t_sat_add(c, 1);
	case 2:		/* level edges: 64^k - 1, 64^k, 64^k + 1 ahead */
		k = 1 + (unsigned int)t_below(r, WHEEL_LEVELS);
		return t_sat_add(c, t_pow64(k) - 1 + t_below(r, 3));
	case 3:		/* the first tick of a slot of some level */
		k = (unsigned int)t_below(r, WHEEL_LEVELS);
		return t_align_up(t_sat_add(c, 1), t_pow64(k));
	case 4:
	case 5:		/* anywhere in some level's range */
		k = (unsigned int)t_below(r, WHEEL_LEVELS);
		p = t_pow64(k);
		return t_sat_add(c, p + t_below(r, 63 * p));
	case 6:		/* beyond the levels: the overflow list */
		return t_sat_add(c, T_SPAN + t_below_log(r, UINT64_C(1) << 52));
	case 7:		/* the end of time */
		if (m->far_pushes)
			return UINT64_MAX - t_below(r, 2);
		return t_sat_add(c, 1 + t_below(r, m->near));
	case 8:
	case 9:
	case 10:	/* near, any magnitude */
		return t_sat_add(c, 1 + t_below_log(r, m->near));
	default:	/* near: these are the ones that keep firing */
		return t_sat_add(c, 1 + t_below(r, m->near));
	}
}

static uint32_t t_gen_slack(struct t_model *m)
{
	switch (t_below(&m->rng, 4)) {
	case 0:
	case 1:
		return 0;
	case 2:
		return (uint32_t)t_below(&m->rng, 64);
	default:
		return (uint32_t)t_below_log(&m->rng, UINT64_C(1) << 32);
	}
}

/* A later deadline: a little or a lot past the old one, or "now + timeout". */
static uint64_t t_gen_later(struct t_model *m, uint64_t old)
{
	uint64_t *r = &m->rng, base = t_below(r, 2) ? old : t_max(old, m->curr), delta;

	switch (t_below(r, 8)) {
	case 0:
		delta = t_below(r, 2);	/* 0: same deadline, still a valid "later" */
		break;
	case 1:
		delta = t_below(r, 64);
		break;
	case 2:
	case 3:
		delta = t_below(r, m->near);
		break;
	case 4:
	case 5:
		delta = t_below_log(r, UINT64_C(1) << 50);
		break;
	case 6:
		delta = T_SPAN + t_below(r, 5);
		break;
	default:
		delta = m->far_pushes && !t_below(r, 4) ? t_rand(r) : t_below_log(r, m->near);
		break;
	}
	return t_sat_add(base, delta);
}

/* An earlier deadline than @old (> 0): just before it, near now, or anywhere below. */
static uint64_t t_gen_earlier(struct t_model *m, uint64_t old)
{
	uint64_t *r = &m->rng, lo = t_sat_sub(m->curr, 50), span;

	if (lo >= old)
		lo = 0;
	span = old - lo;	/* >= 1: the new deadline is in [lo, old) */
	switch (t_below(r, 3)) {
	case 0:
		return old - 1 - t_below(r, span < 64 ? span : 64);
	case 1:
		return lo + t_below(r, span);
	default:
		return lo + t_below_log(r, span);
	}
}

/* Checks the record's fields against the model after the wheel touched it. */
static void t_model_check_rec(struct t_model *m, uint32_t id)
{
	const struct wheel_timer *t = &m->t[id];
	const struct t_ref *r = &m->ref[id];
	const char *bad;

	T_REQUIRE(m, t->flags == t_user_flags(id),
		  "record %u: user flags %#x", id, t->flags);
	if (!r->live) {
		T_REQUIRE(m, !wheel_timer_pending(t) && t->where == WHEEL_NONE,
			  "record %u is not live but pending (where %u)", id, t->where);
		return;
	}
	T_REQUIRE(m, wheel_timer_pending(t), "live record %u (deadline %" PRIu64 " slack %u)"
		  " not pending", id, r->deadline, r->slack);
	T_REQUIRE(m, t->deadline == r->deadline && t->slack == r->slack,
		  "record %u: deadline %" PRIu64 " slack %u, model %" PRIu64 " %u",
		  id, t->deadline, t->slack, r->deadline, r->slack);
	bad = t_where_bad(t->where, r->moved_where == t->where, r->fire, m->curr);
	T_REQUIRE(m, !bad, "record %u (deadline %" PRIu64 " slack %u fire %" PRIu64 "): %s"
		  " (where %u)", id, r->deadline, r->slack, r->fire, bad, t->where);
}

/*
 * t_model_check - what must hold after every step: counts, current tick and
 * wheel_next() always (they are cheap); wheel_check() and a comparison of
 * every record with the model when @full.
 */
static void t_model_check(struct t_model *m, bool full)
{
	struct wheel *w = m->w;
	uint64_t next = wheel_next(w), min;
	const char *why = NULL;
	uint32_t id;
	int rc;

	T_REQUIRE(m, wheel_count(w) == m->nlive, "count %" PRIu64 ", model %zu",
		  wheel_count(w), m->nlive);
	T_REQUIRE(m, w->ndue == m->ndue, "ndue %" PRIu64 ", model %" PRIu64, w->ndue, m->ndue);
	T_REQUIRE(m, w->curr == m->curr, "wheel curr %" PRIu64, w->curr);
	if (m->ndue) {
		T_REQUIRE(m, next == m->curr, "wheel_next() %" PRIu64 " with records due", next);
	} else if (!t_heap_min(m, &min)) {
		T_REQUIRE(m, next == UINT64_MAX, "wheel_next() %" PRIu64 " when empty", next);
	} else {
		T_REQUIRE(m, min > m->curr, "model: a record due but not counted");
		T_REQUIRE(m, next > m->curr && next <= min, "wheel_next() %" PRIu64
			  " with the earliest fire tick %" PRIu64, next, min);
	}
	if (!full)
		return;
	rc = wheel_check(w, &why);
	T_REQUIRE(m, rc == 0, "wheel_check() = %d: %s", rc, why ? why : "(no reason given)");
	for (id = 0; id < m->nrec; id++)
		t_model_check_rec(m, id);
}

static void t_model_add(struct t_model *m)
{
	uint32_t id = t_model_pick(m, false);
	struct wheel_timer *t = &m->t[id];
	struct t_ref *r = &m->ref[id];
	uint64_t deadline = t_gen_deadline(m), fire;
	uint32_t slack = t_gen_slack(m);
	int rc;

	fire = wheel_fire_tick(deadline, slack);
	T_REQUIRE(m, fire == t_ref_fire_tick(deadline, slack), "wheel_fire_tick(%" PRIu64
		  ", %u) = %" PRIu64 ", want %" PRIu64, deadline, slack, fire,
		  t_ref_fire_tick(deadline, slack));
	/* One add in four goes through wheel_insert(), which must act the same. */
	if (t_below(&m->rng, 4)) {
		rc = wheel_add(m->w, t, deadline, slack);
	} else {
		t->deadline = deadline;
		t->slack = slack;
		rc = wheel_insert(m->w, t);
	}
	T_REQUIRE(m, rc == 0, "wheel_add/insert(record %u, %" PRIu64 ", %u) = %d",
		  id, deadline, slack, rc);
	t_model_set_live(m, id, true);
	r->deadline = deadline;
	r->slack = slack;
	r->fire = fire;
	r->eff = t_max(fire, m->curr);
	r->seq = ++m->seq;
	r->ordered = true;
	m->ndue += fire <= m->curr;
	t_heap_push(m, id);
	t_model_check_rec(m, id);
}

static void t_model_del(struct t_model *m)
{
	uint32_t id = t_model_pick(m, true);
	int rc = wheel_del(m->w, &m->t[id]);

	T_REQUIRE(m, rc == 0, "wheel_del(record %u) = %d", id, rc);
	m->ndue -= m->ref[id].fire <= m->curr;
	t_model_set_live(m, id, false);
	t_model_check_rec(m, id);
}

/*
 * t_model_update - moves a live record later or earlier.  Later must be a
 * store for a record in a slot or on the overflow list (its slot is visited
 * no later than its old fire tick, so no later than the new one).  An
 * earlier deadline, or any move of a due record, relinks it as if added
 * now, which is then its rank; a store leaves its rank unspecified.
 */
static void t_model_update(struct t_model *m, bool later)
{
	uint32_t id = t_model_pick(m, true);
	struct wheel_timer *t = &m->t[id];
	struct t_ref *r = &m->ref[id];
	uint64_t deadline, fire, old_fire = r->fire;
	bool was_due = old_fire <= m->curr, refresh = !t_below(&m->rng, 4);
	uint16_t where = t->where;
	int rc;

	if (!later && r->deadline == 0)
		later = true;
	deadline = later ? t_gen_later(m, r->deadline) : t_gen_earlier(m, r->deadline);
	fire = wheel_fire_tick(deadline, r->slack);
	/*
	 * One move in four is a deadline stored from outside plus
	 * wheel_refresh(): the same rules, except that an earlier deadline
	 * may also stay in place, so its rank is then unspecified.
	 */
	if (refresh) {
		__atomic_store_n(&t->deadline, deadline, __ATOMIC_RELAXED);
		rc = wheel_refresh(m->w, t);
	} else {
		rc = wheel_update(m->w, t, deadline);
	}
	T_REQUIRE(m, rc == 0, "wheel_%s(record %u, %" PRIu64 " -> %" PRIu64 ") = %d",
		  refresh ? "refresh" : "update", id, r->deadline, deadline, rc);
	if (later && !was_due) {
		T_REQUIRE(m, t->where == where, "push-later of record %u (deadline %" PRIu64
			  " -> %" PRIu64 ", slack %u) relinked it: where %u -> %u",
			  id, r->deadline, deadline, r->slack, where, t->where);
		if (fire != old_fire)
			r->moved_where = where;
		m->nmoved++;
	}
	m->ndue += (fire <= m->curr) - (uint64_t)was_due;
	r->ordered = !refresh && (deadline < r->deadline || was_due);
	if (r->ordered)
		r->seq = ++m->seq;
	r->deadline = deadline;
	r->fire = fire;
	r->eff = t_max(fire, m->curr);
	r->ver++;
	t_heap_push(m, id);
	t_model_check_rec(m, id);
}

/*
 * t_model_pop_all - pops until NULL after the wheel reached m->curr (from
 * @prev) and compares with the model: every popped record is live and due
 * (never early, within its slack), each comes out once, in the order they
 * became due, those due at the same tick in add order; exactly @expect come
 * out; and no live record with fire tick <= curr stays behind.  After
 * wheel_advance() to wheel_next() (@tickless) every record that became due
 * in that advance must have its fire tick exactly at the new tick.
 */
static void t_model_pop_all(struct t_model *m, uint64_t prev, uint64_t expect, bool tickless)
{
	uint64_t n = 0, last_eff = 0, last_ord_eff = 0, last_seq = 0;
	bool have_ordered = false;
	struct wheel_timer *t;

	while ((t = wheel_pop(m->w))) {
		uintptr_t off = (uintptr_t)t - (uintptr_t)m->t;
		uint32_t id = (uint32_t)(off / sizeof(*t));
		struct t_ref *r = &m->ref[id];

		T_REQUIRE(m, off % sizeof(*t) == 0 && off / sizeof(*t) < m->nrec,
			  "wheel_pop() returned a foreign pointer");
		T_REQUIRE(m, r->live, "record %u popped but not live (popped twice or cancelled)", id);
		T_REQUIRE(m, r->fire <= m->curr, "record %u (deadline %" PRIu64 " slack %u fire %"
			  PRIu64 ") popped EARLY", id, r->deadline, r->slack, r->fire);
		T_REQUIRE(m, r->fire >= r->deadline && r->fire - r->deadline <= r->slack,
			  "record %u fire %" PRIu64 " outside its slack", id, r->fire);
		T_REQUIRE(m, !wheel_timer_pending(t), "popped record %u still pending", id);
		T_REQUIRE(m, r->eff >= last_eff, "record %u (due since %" PRIu64 ", fire %"
			  PRIu64 ") popped after one due since %" PRIu64,
			  id, r->eff, r->fire, last_eff);
		if (tickless && r->fire > prev)
			T_REQUIRE(m, r->fire == m->curr, "tickless: record %u (fire %" PRIu64
				  ") popped at %" PRIu64, id, r->fire, m->curr);
		if (r->ordered) {
			T_REQUIRE(m, !have_ordered || r->eff != last_ord_eff || r->seq > last_seq,
				  "record %u (fire %" PRIu64 ", due since %" PRIu64 ", added #%"
				  PRIu64 ") popped after add #%" PRIu64 " due since the same tick",
				  id, r->fire, r->eff, r->seq, last_seq);
			have_ordered = true;
			last_ord_eff = r->eff;
			last_seq = r->seq;
		}
		last_eff = r->eff;
		t_model_set_live(m, id, false);
		t_model_check_rec(m, id);
		n++;
	}
	T_REQUIRE(m, n == expect, "popped %" PRIu64 " records, expected %" PRIu64, n, expect);
	m->ndue = 0;
	m->nfired += n;
	/* Whatever the heap still holds at or before now must be dead. */
	while (m->nheap && m->heap[0].fire <= m->curr) {
		const struct t_hent *e = &m->heap[0];
		const struct t_ref *r = &m->ref[e->id];

		T_REQUIRE(m, !t_hent_valid(m, e), "record %u (deadline %" PRIu64 " slack %u fire %"
			  PRIu64 ") not popped", e->id, r->deadline, r->slack, r->fire);
		t_heap_pop(m);
	}
}

static void t_model_advance(struct t_model *m)
{
	uint64_t *r = &m->rng, c = m->curr, now, prev = c, ndue = m->ndue, ret;
	bool tickless = false;
	uint32_t id;

	/*
	 * Mostly steps shorter than the typical delay, so that the wheel stays
	 * well filled and records fire a few at a time; now and then a jump
	 * that empties whole levels or crosses 2^48 boundaries.
	 */
	switch (t_below(r, 16)) {
	case 0:		/* backwards or standing still: nothing may change */
		now = t_sat_sub(c, t_below(r, 100));
		break;
	case 1:
		now = t_sat_add(c, 1);
		break;
	case 2:
	case 3:
		now = t_sat_add(c, t_below(r, 64));
		break;
	case 4:
	case 5:
		now = t_sat_add(c, t_below(r, m->adv / 8 + 1));
		break;
	case 6:		/* rarely, a big jump: up to 2^50 ticks */
		if (m->big_odds && !t_below(r, m->big_odds))
			now = t_sat_add(c, t_below_log(r, UINT64_C(1) << 50));
		else
			now = t_sat_add(c, t_below_log(r, m->adv));
		break;
	case 7:
	case 8:
	case 9:		/* tickless: exactly where the wheel has work */
		now = wheel_next(m->w);
		tickless = true;
		m->ntickless++;
		break;
	case 10:
	case 11:	/* onto a near record's fire tick, or one before it */
		if (m->nlive) {
			id = t_model_pick(m, true);
			if (m->ref[id].fire > c && m->ref[id].fire - c <= m->adv) {
				now = m->ref[id].fire - t_below(r, 2);
				break;
			}
		}
		/* fall through */
	default:
		now = t_sat_add(c, t_below(r, m->adv / 16 + 1));
		break;
	}
	ret = wheel_advance(m->w, now);
	if (now > c)
		m->curr = now;
	else
		T_REQUIRE(m, ret == 0, "wheel_advance(%" PRIu64 ") backwards returned %" PRIu64,
			  now, ret);
	T_REQUIRE(m, m->w->curr == m->curr, "wheel_advance(%" PRIu64 ") left curr at %" PRIu64,
		  now, m->w->curr);
	T_REQUIRE(m, m->w->ndue == ndue + ret, "wheel_advance() = %" PRIu64 " but ndue %"
		  PRIu64 " -> %" PRIu64, ret, ndue, m->w->ndue);
	m->nadvance++;
	t_model_pop_all(m, prev, ndue + ret, tickless);
}

/* Calls that must be refused, and leave everything as it was. */
static void t_model_bad(struct t_model *m)
{
	struct wheel_timer *t, before;
	uint32_t id;
	int rc;

	if (m->nlive && t_below(&m->rng, 2)) {
		id = t_model_pick(m, true);
		t = &m->t[id];
		before = *t;
		rc = wheel_add(m->w, t, t_gen_deadline(m), t_gen_slack(m));
		T_REQUIRE(m, rc == -EBUSY, "wheel_add() of live record %u = %d", id, rc);
		T_REQUIRE(m, !memcmp(t, &before, sizeof(before)), "refused add changed record %u", id);
		rc = wheel_add(NULL, t, 1, 0);
		T_REQUIRE(m, rc == -EINVAL, "wheel_add(NULL) = %d", rc);
	} else if (m->nlive < m->nrec) {
		id = t_model_pick(m, false);
		t = &m->t[id];
		before = *t;
		rc = wheel_del(m->w, t);
		T_REQUIRE(m, rc == -ENOENT, "wheel_del() of free record %u = %d", id, rc);
		rc = wheel_update(m->w, t, t_gen_deadline(m));
		T_REQUIRE(m, rc == -ENOENT, "wheel_update() of free record %u = %d", id, rc);
		T_REQUIRE(m, !memcmp(t, &before, sizeof(before)), "refused call changed record %u", id);
	}
}

enum { T_OP_ADD, T_OP_DEL, T_OP_LATER, T_OP_EARLIER, T_OP_ADVANCE, T_OP_POP, T_OP_BAD, T_OP_COUNT };

static void t_model_step(struct t_model *m, const unsigned int mix[T_OP_COUNT])
{
	unsigned int total = 0, op, x;

	for (op = 0; op < T_OP_COUNT; op++)
		total += mix[op];
	x = (unsigned int)t_below(&m->rng, total);
	for (op = 0; x >= mix[op]; op++)
		x -= mix[op];
	if (op == T_OP_ADD && m->nlive == m->nrec)
		op = T_OP_ADVANCE;
	if ((op == T_OP_DEL || op == T_OP_LATER || op == T_OP_EARLIER) && !m->nlive)
		op = T_OP_ADD;
	switch (op) {
	case T_OP_ADD:
		t_model_add(m);
		break;
	case T_OP_DEL:
		t_model_del(m);
		break;
	case T_OP_LATER:
	case T_OP_EARLIER:
		t_model_update(m, op == T_OP_LATER);
		break;
	case T_OP_ADVANCE:
		t_model_advance(m);
		break;
	case T_OP_POP:		/* pop without advancing: only what is due already */
		t_model_pop_all(m, m->curr, m->ndue, false);
		break;
	default:
		t_model_bad(m);
		break;
	}
}

static void t_model_run(struct t_model *m, uint64_t steps, const unsigned int mix[T_OP_COUNT])
{
	uint64_t end = m->step + steps;

	while (m->step < end) {
		m->step++;
		t_model_step(m, mix);
		m->live_sum += m->nlive;
		t_model_check(m, m->step % m->check_every == 0);
	}
}

/* The end of the run: jump to the end of time; every record left must fire. */
static void t_model_finish(struct t_model *m)
{
	uint64_t prev = m->curr, ndue = m->ndue, ret;

	m->step++;
	ret = wheel_advance(m->w, UINT64_MAX);
	m->curr = UINT64_MAX;
	t_model_pop_all(m, prev, ndue + ret, false);
	T_REQUIRE(m, m->nlive == 0, "%zu records left", m->nlive);
	t_model_check(m, true);
	T_REQUIRE(m, wheel_count(m->w) == 0 && wheel_next(m->w) == UINT64_MAX, "not empty");
	/* KAIROS_VERBOSE=1 shows what a run covered, to tune the mixes. */
	if (getenv("KAIROS_VERBOSE"))
		fprintf(stderr, "check_wheel: run %u: %" PRIu64 " steps, %" PRIu64 " fired, %"
			PRIu64 " advances (%" PRIu64 " tickless), %" PRIu64 " pushed later in place, %"
			PRIu64 " live on average\n", m->run, m->step, m->nfired, m->nadvance,
			m->ntickless, m->nmoved, m->live_sum / m->step);
}

/* The op mix of the small runs: every kind of step, often. */
static const unsigned int t_mix_small[T_OP_COUNT] = {
	[T_OP_ADD] = 34, [T_OP_DEL] = 8, [T_OP_LATER] = 24, [T_OP_EARLIER] = 10,
	[T_OP_ADVANCE] = 14, [T_OP_POP] = 3, [T_OP_BAD] = 4,
};

/*
 * Small runs, each with wheel_check() and a full comparison after EVERY
 * step.  They differ in where the clock starts (on a 2^48 boundary, just
 * before one, near the end of time), how many records there are and how
 * near the deadlines cluster.
 */
/*
 * wheel_flush() hands every record out at once, from every level and the
 * overflow list, without moving the current tick.
 */
START_TEST(test_wheel_flush)
{
	static struct wheel w;
	static struct wheel_timer t[5];
	static const uint64_t deadline[5] = {
		3, 100, 300000, UINT64_C(1) << 50, UINT64_MAX,
	};
	struct wheel_timer *p;
	bool seen[5] = { false };
	unsigned n = 0;

	wheel_init(&w, 1);
	for (unsigned i = 0; i < 5; i++)
		T_INT_EQ(wheel_add(&w, &t[i], deadline[i], 0), 0);
	wheel_flush(&w);
	T_UINT_EQ(w.curr, 1);
	T_UINT_EQ(w.ndue, 5);
	T_UINT_EQ(wheel_next(&w), 1);
	while ((p = wheel_pop(&w))) {
		T_ASSERT(p >= t && p < t + 5);
		T_ASSERT(!seen[p - t]);
		seen[p - t] = true;
		T_ASSERT(!wheel_timer_pending(p));
		n++;
	}
	T_UINT_EQ(n, 5);
	T_UINT_EQ(wheel_count(&w), 0);
	T_UINT_EQ(wheel_next(&w), UINT64_MAX);
	t_check(&w);
}
END_TEST

/*
 * The overflow list is visited at the block of its earliest record.  A bound
 * left low by a deletion must not survive the list emptying: a record filed
 * later, after the counter moved on, is then visited at its own block.
 */
START_TEST(test_wheel_overflow_bound_after_empty)
{
	static struct wheel w;
	static struct wheel_timer a, b;
	uint64_t far = 5 * T_SPAN + 7;

	wheel_init(&w, 0);
	T_INT_EQ(wheel_add(&w, &a, T_SPAN + 1, 0), 0);		/* next block */
	T_UINT_EQ(a.where, WHEEL_OVERFLOW);
	T_INT_EQ(wheel_del(&w, &a), 0);
	T_UINT_EQ(wheel_advance(&w, 2 * T_SPAN + 3), 0);	/* past a's block */
	T_INT_EQ(wheel_add(&w, &b, far, 0), 0);
	T_UINT_EQ(b.where, WHEEL_OVERFLOW);
	t_check(&w);
	T_UINT_GT(wheel_next(&w), w.curr);
	T_UINT_LE(wheel_next(&w), far);
	/* A jump over several blocks: one visit re-files it, it fires on time. */
	T_UINT_EQ(wheel_advance(&w, far - 1), 0);
	t_check(&w);
	T_UINT_EQ(wheel_advance(&w, far), 1);
	T_ASSERT(wheel_pop(&w) == &b);
	t_check(&w);
}
END_TEST

START_TEST(test_wheel_random_small)
{
	static const struct {
		uint64_t start, near;
		size_t nrec;
		uint64_t steps;
	} cfg[] = {
		{ 0, 4096, 512, 40000 },
		{ UINT64_C(0x3b9aca00123), 1u << 14, 2048, 30000 },
		{ T_SPAN - 5000, 1u << 12, 1024, 40000 },
		{ 7 * T_SPAN - 1, 256, 1024, 40000 },
		{ UINT64_MAX - (UINT64_C(1) << 55), 1u << 16, 1024, 40000 },
		{ UINT64_C(0x2468ace013579bd), 1u << 20, 4096, 20000 },
		{ 0, 64, 64, 60000 },
		{ 12345, 1u << 10, 2048, 30000 },
	};
	struct t_model m;

	T_UINT_LT((size_t)_i, T_ARRAY_SIZE(cfg));
	t_model_init(&m, (unsigned int)_i, cfg[_i].nrec, cfg[_i].start, cfg[_i].near, 1);
	t_model_run(&m, cfg[_i].steps, t_mix_small);
	t_model_finish(&m);
	T_UINT_GT(m.nfired, 0);
	t_model_free(&m);
}
END_TEST

/*
 * A million records, used in scattered order, under the churn of a busy
 * server: mostly pushes later, plus adds, cancels, moves earlier and
 * advances that fire the near ones a few at a time while the wheel stays
 * full; then a jump that expires most of them in one go, more churn, and
 * the final jump to the end of time that expires the rest.
 *
 * wheel_check() and the full comparison are O(records), so here they run
 * after filling, every 2^18 steps and at the end rather than after every
 * step; counts, wheel_next() and each touched record are still checked
 * after every step.  Arms at the end of time are left out: the overflow
 * list is re-filed at every 2^48 boundary, so the final jump would re-file
 * each of them 2^16 times.
 */
START_TEST(test_wheel_random_1e6)
{
	static const unsigned int mix[T_OP_COUNT] = {
		/* An add when all records are in use advances instead: it stays full. */
		[T_OP_ADD] = 40, [T_OP_DEL] = 5, [T_OP_LATER] = 40, [T_OP_EARLIER] = 8,
		[T_OP_ADVANCE] = 4, [T_OP_POP] = 1, [T_OP_BAD] = 2,
	};
	size_t nrec = 1000000, i;
	uint64_t prev, ndue, ret;
	struct t_model m;

	/*
	 * Deadlines spread over 2^32 ticks while the clock moves ~2^27: the
	 * wheel stays near full, the short delays keep firing.
	 */
	t_model_init(&m, 100, nrec, UINT64_C(1) << 40, UINT64_C(1) << 32, UINT64_C(1) << 18);
	m.adv = 1u << 12;
	m.far_pushes = false;
	m.big_odds = 0;
	for (i = 0; i < nrec; i++) {
		m.step++;
		t_model_add(&m);
	}
	t_model_check(&m, true);
	T_UINT_EQ(wheel_count(m.w), nrec);
	t_model_run(&m, 1500000, mix);
	if (getenv("KAIROS_VERBOSE"))
		fprintf(stderr, "check_wheel: 1e6 run: %zu live before the mass expiry, clock +%"
			PRIu64 "\n", m.nlive, m.curr - (UINT64_C(1) << 40));
	T_UINT_GE(m.nlive, nrec / 2);

	/* One jump over half the spread of deadlines: a mass expiry. */
	m.step++;
	prev = m.curr;
	ndue = m.ndue;
	ret = wheel_advance(m.w, m.curr + m.near / 2);
	m.curr += m.near / 2;
	T_UINT_GE(ret, nrec / 4);
	t_model_pop_all(&m, prev, ndue + ret, false);
	t_model_check(&m, true);

	t_model_run(&m, 1500000, mix);
	t_model_check(&m, true);
	t_model_finish(&m);
	T_UINT_GT(m.nfired, nrec);
	t_model_free(&m);
}
END_TEST

/* ------------------------------------------------------------------------ */

static Suite *t_wheel_suite(void)
{
	Suite *s = suite_create("wheel");
	TCase *tc;

	tc = tcase_create("fire_tick");
	tcase_add_test(tc, test_wheel_fire_tick_slack_zero);
	tcase_add_test(tc, test_wheel_fire_tick_brute_force);
	tcase_add_test(tc, test_wheel_fire_tick_random);
	tcase_add_test(tc, test_wheel_fire_tick_known_values);
	tcase_add_test(tc, test_wheel_fire_tick_saturates);
	suite_add_tcase(s, tc);

	tc = tcase_create("basic");
	tcase_add_test(tc, test_wheel_init_empty);
	tcase_add_test(tc, test_wheel_zeroed_record);
	tcase_add_test(tc, test_wheel_bad_input);
	tcase_add_test(tc, test_wheel_count);
	tcase_add_test(tc, test_wheel_advance_backwards);
	tcase_add_test(tc, test_wheel_user_flags);
	tcase_add_test(tc, test_wheel_check_detects_corruption);
	suite_add_tcase(s, tc);

	tc = tcase_create("never_early");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_wheel_sub_tick);
	tcase_add_test(tc, test_wheel_past_deadline);
	tcase_add_test(tc, test_wheel_exact_multiples);
	tcase_add_test(tc, test_wheel_level_boundaries);
	tcase_add_test(tc, test_wheel_level_boundaries_alone);
	tcase_add_test(tc, test_wheel_far_future);
	tcase_add_test(tc, test_wheel_far_future_steps);
	tcase_add_test(tc, test_wheel_deadline_max);
	suite_add_tcase(s, tc);

	tc = tcase_create("next");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_wheel_next_bounds);
	tcase_add_test(tc, test_wheel_next_tickless);
	tcase_add_test(tc, test_wheel_next_tickless_far);
	suite_add_tcase(s, tc);

	tc = tcase_create("slack");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_wheel_slack_window);
	tcase_add_test(tc, test_wheel_slack_coarse);
	suite_add_tcase(s, tc);

	tc = tcase_create("order");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_wheel_order_same_tick);
	tcase_add_test(tc, test_wheel_order_across_levels);
	tcase_add_test(tc, test_wheel_order_update_earlier);
	tcase_add_test(tc, test_wheel_past_deadline_due_order);
	suite_add_tcase(s, tc);

	tc = tcase_create("update");
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_wheel_update_later_in_place);
	tcase_add_test(tc, test_wheel_update_later_repeated);
	tcase_add_test(tc, test_wheel_update_earlier_relinks);
	tcase_add_test(tc, test_wheel_update_due_record);
	tcase_add_test(tc, test_wheel_del_anywhere);
	tcase_add_test(tc, test_wheel_insert);
	tcase_add_test(tc, test_wheel_refresh);
	tcase_add_test(tc, test_wheel_flush);
	tcase_add_test(tc, test_wheel_overflow_bound_after_empty);
	suite_add_tcase(s, tc);

	tc = tcase_create("random");
	/* The million-record run takes seconds, more under sanitizers. */
	tcase_set_timeout(tc, 300);
	tcase_add_loop_test(tc, test_wheel_random_small, 0, 8);
	tcase_add_test(tc, test_wheel_random_1e6);
	suite_add_tcase(s, tc);

	return s;
}

int main(void)
{
	const char *env = getenv("KAIROS_SEED");
	SRunner *sr;
	int failed;

	if (env && *env) {
		char *end;

		errno = 0;
		t_base_seed = strtoull(env, &end, 0);
		if (errno || *end) {
			fprintf(stderr, "check_wheel: bad KAIROS_SEED '%s'\n", env);
			return EXIT_FAILURE;
		}
	}
	/* Printed up front so that a failure in CI can be replayed. */
	printf("check_wheel: KAIROS_SEED=%#" PRIx64 "\n", t_base_seed);
	fflush(stdout);

	sr = srunner_create(t_wheel_suite());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
