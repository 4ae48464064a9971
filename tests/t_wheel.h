/* SPDX-License-Identifier: MIT */
/*
 * t_wheel.h - the harness of the wheel programs (wheel.c, wheel_model.c):
 * assertions that print both operands, a reference for wheel_fire_tick(),
 * the placements the header allows, and struct t_set, a small set of
 * records whose fire ticks the harness knows and checks every advance
 * against.  The wheel reads no clock: everything runs on a virtual one.
 */
#ifndef KAIROS_T_WHEEL_H
#define KAIROS_T_WHEEL_H

#include "t_util.h"
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
static inline uint64_t t_pow64(unsigned int k)
{
	return UINT64_C(1) << (WHEEL_BITS * k);
}

static inline uint64_t t_sat_add(uint64_t a, uint64_t b)
{
	return a + b < a ? UINT64_MAX : a + b;
}

static inline uint64_t t_sat_sub(uint64_t a, uint64_t b)
{
	return a < b ? 0 : a - b;
}

static inline uint64_t t_max(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

/* Trailing zero bits, with 0 counting as 64 (it is a multiple of everything). */
static inline unsigned int t_ctz(uint64_t x)
{
	return x ? (unsigned int)__builtin_ctzll(x) : 64;
}

/* The smallest multiple of @a at or after @x, saturating at UINT64_MAX. */
static inline uint64_t t_align_up(uint64_t x, uint64_t a)
{
	uint64_t r = x % a;

	return r ? t_sat_add(x, a - r) : x;
}

/*
 * A value in [0, n) whose number of bits is uniform: tiny and huge values
 * come up equally often, which is what exercises every level of the wheel.
 */
static inline uint64_t t_below_log(uint64_t *state, uint64_t n)
{
	unsigned int bits;

	if (n <= 1)
		return 0;
	bits = (unsigned int)t_rand_below(state, 65);
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
static inline uint64_t t_ref_fire_tick(uint64_t deadline, uint32_t slack)
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
static inline uint64_t t_brute_fire_tick(uint64_t deadline, uint32_t slack)
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

static inline struct wheel *t_wheel_new(uint64_t now)
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
static inline void t_check(const struct wheel *w)
{
	const char *why = NULL;
	int rc = wheel_check(w, &why);

	T_ASSERT_MSG(rc == 0, "wheel_check() = %d at curr %" PRIu64 ": %s",
		     rc, w->curr, why ? why : "(no reason given)");
}

static inline bool t_in_slot(uint16_t where)
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
static inline const char *t_where_bad(uint16_t where, bool moved, uint64_t fire, uint64_t curr)
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

static inline struct t_set *t_set_new(uint64_t now)
{
	struct t_set *s = calloc(1, sizeof(*s));

	T_ASSERT((s) != NULL);
	s->w = t_wheel_new(now);
	return s;
}

static inline void t_set_free(struct t_set *s)
{
	wheel_fini(s->w);
	free(s->w);
	free(s);
}

/* Records i and over are not yet in use; lets a test arm them in any order. */
static inline void t_set_reserve(struct t_set *s, size_t n)
{
	T_UINT_LE(n, T_SET_MAX);
	if (n > s->n)
		s->n = n;
}

/* Asserts that the record's placement is one the header allows. */
static inline void t_set_where_ok(const struct t_set *s, size_t i)
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
static inline void t_set_arm_by(struct t_set *s, size_t i, uint64_t deadline, uint32_t slack,
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

static inline void t_set_arm(struct t_set *s, size_t i, uint64_t deadline, uint32_t slack)
{
	t_set_arm_by(s, i, deadline, slack, false);
}

/* t_set_add - arms the next unused record; returns its index. */
static inline size_t t_set_add(struct t_set *s, uint64_t deadline, uint32_t slack)
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
static inline void t_set_update(struct t_set *s, size_t i, uint64_t deadline)
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
static inline void t_set_refresh(struct t_set *s, size_t i, uint64_t deadline)
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

static inline void t_set_del(struct t_set *s, size_t i)
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
static inline size_t t_set_index(const struct t_set *s, const struct wheel_timer *t)
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
static inline size_t t_set_pop_all(struct t_set *s, uint64_t expect)
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
static inline size_t t_set_advance(struct t_set *s, uint64_t now)
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
static inline bool t_set_min_fire(const struct t_set *s, uint64_t *fire)
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
static inline void t_set_check_next(const struct t_set *s)
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
static inline void t_set_walk(struct t_set *s)
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
static inline uint64_t t_set_tickless(struct t_set *s, uint64_t limit)
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

#endif /* KAIROS_T_WHEEL_H */
