/* SPDX-License-Identifier: MIT */
/*
 * wheel.c - the hierarchical timing wheel (src/wheel.h), one behaviour per
 * test, on a virtual clock: never early (sub-tick, past deadlines, exact
 * multiples, every level boundary, the far future and the overflow list),
 * wheel_next() and the tickless loop built on it, slack, the order of equal
 * fire ticks, push-later in place and push-earlier, cancel from anywhere,
 * flush, bad input and the invariant checker itself.  Most go through
 * struct t_set (t_wheel.h), which knows each record's fire tick.
 */
#include "t_wheel.h"

/* ------------------------------------------------------------------------ */
/* wheel_fire_tick()                                                        */
/* ------------------------------------------------------------------------ */

START_TEST(test_wheel_fire_tick_slack_zero)
{
	static const uint64_t edge[] = {
		0, 1, 2, 3, 63, 64, 65, 4095, 4096, UINT64_C(1) << 48,
		(UINT64_C(1) << 63) + 1, UINT64_MAX - 1, UINT64_MAX,
	};
	uint64_t rng = t_seed(0), d;
	size_t i;

	/* No slack, no choice: it fires at its deadline. */
	for (i = 0; i < T_ARRAY_SIZE(edge); i++)
		T_UINT_EQ(wheel_fire_tick(edge[i], 0), edge[i]);
	for (i = 0; i < 100000; i++) {
		d = t_rand(&rng) >> t_rand_below(&rng, 64);
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
	uint64_t rng = t_seed(0xf1), d, f, f1;
	uint32_t s;
	size_t i;

	for (i = 0; i < 200000; i++) {
		d = t_below_log(&rng, UINT64_MAX) + t_rand_below(&rng, 2);
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
	uint64_t rng = t_seed(0x5a7), d, f;
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
		uint32_t sl = UINT32_MAX - (uint32_t)t_rand_below(&rng, 1u << 20);

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
	wheel_fini(w);
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
	wheel_fini(w);
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
	wheel_fini(w);
	free(w);
	wheel_fini(w2);
	free(w2);
}
END_TEST

/* Count and due count follow adds, cancels, advances and pops exactly. */
START_TEST(test_wheel_count)
{
	struct t_set *s = t_set_new(5000);
	struct wheel *w = s->w;
	uint64_t rng = t_seed(0xc0), count, ndue, ret;
	struct wheel_timer *t;
	size_t i, n = 600;

	for (i = 0; i < n; i++) {
		uint64_t d;

		switch (i % 4) {
		case 0:		/* past: straight to the due list */
			d = 5000 - t_rand_below(&rng, 5001);
			break;
		case 1:		/* near */
			d = 5001 + t_rand_below(&rng, 3000);
			break;
		case 2:		/* any level */
			d = 5000 + 1 + t_below_log(&rng, T_SPAN);
			break;
		default:	/* the overflow list */
			d = 5000 + T_SPAN + 1 + t_below_log(&rng, UINT64_C(1) << 52);
			break;
		}
		t_set_add(s, d, (uint32_t)(i % 3 ? 0 : t_rand_below(&rng, 100)));
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
	wheel_fini(w);
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
	wheel_fini(w);
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
	wheel_fini(w);
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
		uint64_t rng = t_seed(0x100 + b), iters;
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
	uint64_t rng = t_seed(0x51ac);
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
		j = (size_t)t_rand_below(rng, i);
		tmp = p[i - 1];
		p[i - 1] = p[j];
		p[j] = tmp;
	}
}

START_TEST(test_wheel_order_same_tick)
{
	static const uint64_t fires[] = { 63, 24576, (UINT64_C(1) << 40) + 4096, 5 * T_SPAN };
	size_t f, j, n = 256, perm[256], order[256];
	uint64_t rng = t_seed(0x0bd);

	for (f = 0; f < T_ARRAY_SIZE(fires); f++) {
		struct t_set *s = t_set_new(7);
		uint64_t D = fires[f];
		struct wheel_timer *t;

		t_set_reserve(s, n);
		t_perm(&rng, perm, n);
		for (j = 0; j < n; j++) {
			/* Half exact, half with slack whose best tick is D. */
			uint64_t back = t_rand_below(&rng, 4);
			uint32_t slack = (uint32_t)(back + t_rand_below(&rng, 2));

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
	uint64_t now = 0, rng = t_seed(0x1d1e);
	size_t i, n = 128, round;

	for (i = 0; i < n; i++)
		t_set_add(s, 1000 + i * 37, i % 3 ? 0 : 7);
	for (round = 0; round < 600; round++) {
		now += 1 + t_rand_below(&rng, 20);
		T_UINT_EQ(t_set_advance(s, now), 0);
		for (i = 0; i < n; i++)
			if (t_rand_below(&rng, 4))
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
	wheel_fini(&w);
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
	wheel_fini(&w);
}
END_TEST

/*
 * An owner that never empties the due list (it pops a bounded batch each
 * round while one more record is always due): the due list's log is
 * trimmed to what follows the pops when it fills, instead of growing with
 * every record that comes due.  Pops still come in order.
 */
START_TEST(test_wheel_due_log_bounded_when_never_empty)
{
	enum { ROUNDS = 200000 };
	struct wheel_timer t[2];
	struct wheel *w = t_wheel_new(0);
	unsigned cur = 0;

	memset(t, 0, sizeof(t));
	T_INT_EQ(wheel_add(w, &t[0], 1, 0), 0);
	T_UINT_EQ(wheel_advance(w, 1), 1);
	for (unsigned i = 0; i < ROUNDS; i++) {
		struct wheel_timer *n = &t[cur ^ 1];

		/* The next is due before the one due now is popped. */
		T_INT_EQ(wheel_add(w, n, w->curr + 1, 0), 0);
		T_UINT_EQ(wheel_advance(w, w->curr + 1), 1);
		T_ASSERT(wheel_pop(w) == &t[cur]);
		T_UINT_EQ(w->ndue, 1);
		cur ^= 1;
		if (i % 50000 == 0)
			t_check(w);
	}
	t_check(w);
	T_UINT_LE(w->due_log.cap, 64);
	T_ASSERT(!(w->due_log.stale >> 31));	/* trimmed, never stopped */
	T_ASSERT(wheel_pop(w) == &t[cur]);
	T_UINT_EQ(w->due_log.len, 0);
	t_check(w);
	wheel_fini(w);
	free(w);
}
END_TEST

/*
 * A slot's log is only a prefetch hint: a log crowded with stale entries
 * stops, and the slot still fires every record, once, in the order added;
 * the log starts afresh once the slot has emptied.  The due list's log
 * likewise survives records taken off the due list between pops.
 */
START_TEST(test_wheel_log_stops_and_restarts)
{
	enum { N = 4096 };
	struct wheel_timer *t = calloc(N, sizeof(*t));
	struct wheel *w = t_wheel_new(0);
	const uint64_t fire = 5 * 4096 + 7;	/* level 2 at tick 0 */
	unsigned g, s, n = 0, rounds = 0;
	struct wheel_timer *p;

	T_ASSERT(t != NULL);
	for (unsigned i = 0; i < N; i++)
		T_INT_EQ(wheel_add(w, &t[i], fire, 0), 0);
	T_ASSERT(t_in_slot(t[0].where));
	g = (t[0].where - 1u) / WHEEL_SLOTS;
	s = (t[0].where - 1u) % WHEEL_SLOTS;
	T_UINT_EQ(w->log[g][s].len, N);
	T_UINT_GE(wheel_log_bytes(w), N * sizeof(uint32_t));
	t_check(w);
	/* Take out and put back all but record 0 until the log stops growing. */
	while (!(w->log[g][s].stale >> 31)) {
		T_UINT_LT(++rounds, 64);
		for (unsigned i = 1; i < N; i++) {
			T_INT_EQ(wheel_del(w, &t[i]), 0);
			T_INT_EQ(wheel_add(w, &t[i], fire, 0), 0);
		}
		t_check(w);
	}
	T_UINT_LE(w->log[g][s].len, 4 * N);
	/* Fires all, in the order of the last adds: 0, then 1..N-1. */
	T_UINT_EQ(wheel_advance(w, fire), N);
	t_check(w);
	/* Take some off the due list first, as a cancel would. */
	for (unsigned i = 2; i < N; i += 3)
		T_INT_EQ(wheel_del(w, &t[i]), 0);
	t_check(w);
	for (unsigned i = 0; i < N; i++) {
		if (i >= 2 && (i - 2) % 3 == 0)
			continue;
		p = wheel_pop(w);
		T_ASSERT_MSG(p == &t[i], "pop %u gave record %td", n, p ? p - t : -1);
		n++;
		if (n % 512 == 0)
			t_check(w);
	}
	T_ASSERT(wheel_pop(w) == NULL);
	t_check(w);
	T_UINT_EQ(w->log[g][s].len, 0);
	T_UINT_EQ(w->log[g][s].stale, 0);
	T_UINT_EQ(w->due_log.len, 0);
	/* The slot logs afresh. */
	T_INT_EQ(wheel_add(w, &t[0], w->curr + 5 * 4096, 0), 0);
	t_check(w);
	T_UINT_EQ(wheel_advance(w, w->curr + 5 * 4096), 1);
	T_ASSERT(wheel_pop(w) == &t[0]);
	t_check(w);
	wheel_fini(w);
	T_UINT_EQ(wheel_log_bytes(w), 0);
	free(w);
	free(t);
}
END_TEST

int main(void)
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
	tcase_add_test(tc, test_wheel_log_stops_and_restarts);
	tcase_add_test(tc, test_wheel_due_log_bounded_when_never_empty);
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
	return t_main(s, "wheel");
}
