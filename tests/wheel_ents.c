/* SPDX-License-Identifier: MIT */
/*
 * wheel_ents.c - filing by value (wheel_file_entry(), src/wheel.h) on a
 * virtual clock: never early and exactly once through every level, records
 * pushed later and gone stale without a word to the wheel, claims that lose
 * their race, the sweep's bound on a slot's stale entries (told by the
 * owner's gone(), or by looks), flush, refusals,
 * and that the wheel leaves a far record untouched until its slot comes.
 *
 * The owner here is struct e_set: records with a generation and a "far"
 * flag, the role the service's state word plays.  An entry stands while its
 * record is in the same life and still far.
 */
#include "t_wheel.h"

#define E_MAX	60000

struct e_rec {
	struct wheel_timer wt;		/* first: a popped wheel_timer is its record */
	uint64_t deadline;		/* the owner's copy; the wheel reads it through look() */
	uint32_t slack;
	uint32_t gen;
	bool far;			/* filed by value, not claimed */
	bool linked;			/* claimed (or inserted) and not yet popped or deleted */
	bool live;			/* armed and not cancelled or popped */
	bool stale_on_claim;		/* goes stale between look() and claim() */
	unsigned pops;
};

struct e_set {
	struct wheel *w;
	struct wheel_entry_ops ops;
	struct e_rec *r;
	size_t n;
	uint8_t *ended;			/* low bits of each record's last ended life (gone()) */
	uint64_t looks, prefetches, claims, gones;
	bool flushing;			/* claims of far records are expected */
};

static uint64_t e_fire(const struct e_rec *r)
{
	return wheel_fire_tick(r->deadline, r->slack);
}

static bool e_look(void *ctx, struct wheel_entry e, uint64_t *fire)
{
	struct e_set *s = ctx;
	struct e_rec *r;

	s->looks++;
	T_UINT_LT(e.idx, s->n);
	r = &s->r[e.idx];
	if (!wheel_entry_gen(e, r->gen) || !r->far)
		return false;
	*fire = e_fire(r);
	return true;
}

static void e_prefetch(void *ctx, struct wheel_entry e)
{
	struct e_set *s = ctx;

	s->prefetches++;
	T_UINT_LT(e.idx, s->n);
}

static struct wheel_timer *e_claim(void *ctx, struct wheel_entry e)
{
	struct e_set *s = ctx;
	struct e_rec *r;

	s->claims++;
	T_UINT_LT(e.idx, s->n);
	r = &s->r[e.idx];
	if (!wheel_entry_gen(e, r->gen) || !r->far)
		return NULL;
	if (r->stale_on_claim) {
		/* A cancel won the race after the wheel looked. */
		r->far = false;
		r->live = false;
		s->ended[e.idx] = (uint8_t)r->gen;
		return NULL;
	}
	/* Claimed only when near or due: far records stay entries. */
	if (!s->flushing && e_fire(r) > s->w->curr)
		T_ASSERT_MSG(63 - __builtin_clzll(e_fire(r) ^ s->w->curr) < WHEEL_BITS * WHEEL_ENTRY_LEVEL,
			     "record %u claimed while still far (fire %" PRIu64 ", curr %" PRIu64 ")",
			     e.idx, e_fire(r), s->w->curr);
	r->far = false;
	r->linked = true;
	wheel_timer_init(&r->wt);
	r->wt.deadline = r->deadline;
	r->wt.slack = r->slack;
	return &r->wt;
}

/*
 * As the service's: by a byte kept apart from the records, the low bits of
 * the life that ended last.  An entry stands only if it names the life
 * after that one (lives count up by one here).
 */
static bool e_gone(void *ctx, struct wheel_entry e)
{
	struct e_set *s = ctx;

	s->gones++;
	T_UINT_LT(e.idx, s->n);
	return !wheel_entry_gen(e, (uint8_t)(s->ended[e.idx] + 1));
}

/* An owner of @n records on a wheel at @now; @gone: whether it offers gone(). */
static struct e_set *e_new_with(size_t n, uint64_t now, bool gone)
{
	struct e_set *s = calloc(1, sizeof(*s));

	T_ASSERT(s != NULL);
	s->r = calloc(n, sizeof(*s->r));
	s->ended = calloc(n, 1);	/* life 0 ended: the first is 1 */
	T_ASSERT(s->r != NULL && s->ended != NULL);
	s->n = n;
	s->w = t_wheel_new(now);
	s->ops = (struct wheel_entry_ops){
		.look = e_look, .prefetch = e_prefetch, .claim = e_claim,
		.gone = gone ? e_gone : NULL, .ctx = s,
	};
	wheel_set_entry_ops(s->w, &s->ops);
	return s;
}

static struct e_set *e_new(size_t n, uint64_t now)
{
	return e_new_with(n, now, true);
}

static void e_free(struct e_set *s)
{
	wheel_fini(s->w);
	free(s->w);
	free(s->r);
	free(s->ended);
	free(s);
}

/*
 * Arms record @i for @deadline: by value when the wheel takes it, else
 * linked at once, as the service does.  Returns whether it went by value.
 */
static bool e_arm(struct e_set *s, size_t i, uint64_t deadline, uint32_t slack)
{
	struct e_rec *r = &s->r[i];
	int rc;

	T_ASSERT(!r->live);
	r->gen++;
	r->deadline = deadline;
	r->slack = slack;
	r->far = true;
	r->live = true;
	r->pops = 0;
	rc = wheel_file_entry(s->w, wheel_entry_of((uint32_t)i, r->gen), e_fire(r));
	if (rc == 0)
		return true;
	T_INT_EQ(rc, -EAGAIN);
	r->far = false;
	r->linked = true;
	T_INT_EQ(wheel_add(s->w, &r->wt, deadline, slack), 0);
	return false;
}

/* Cancels record @i: an entry goes stale silently, a linked record is deleted. */
static void e_cancel(struct e_set *s, size_t i)
{
	struct e_rec *r = &s->r[i];

	T_ASSERT(r->live);
	r->live = false;
	s->ended[i] = (uint8_t)r->gen;
	if (r->far) {
		r->far = false;
		return;
	}
	T_INT_EQ(wheel_del(s->w, &r->wt), 0);
	r->linked = false;
}

/* Pushes record @i's deadline later: a store for an entry, wheel_update() when linked. */
static void e_push(struct e_set *s, size_t i, uint64_t deadline)
{
	struct e_rec *r = &s->r[i];

	T_ASSERT(r->live && deadline >= r->deadline);
	r->deadline = deadline;
	if (!r->far)
		T_INT_EQ(wheel_update(s->w, &r->wt, deadline), 0);
}

/* Pops everything due; each must be live, linked, due exactly now, and popped once. */
static size_t e_pop_all(struct e_set *s)
{
	struct wheel_timer *t;
	size_t n = 0;

	while ((t = wheel_pop(s->w))) {
		struct e_rec *r = (struct e_rec *)(void *)t;

		T_ASSERT(r >= s->r && r < s->r + s->n);
		T_ASSERT_MSG(r->live && r->linked, "record %zu popped when not armed", (size_t)(r - s->r));
		T_UINT_EQ(e_fire(r), s->w->curr);
		r->pops++;
		r->live = false;
		r->linked = false;
		s->ended[r - s->r] = (uint8_t)r->gen;
		n++;
	}
	return n;
}

/* Steps the wheel tickless to @limit (each visit in turn), popping as it goes. */
static size_t e_run(struct e_set *s, uint64_t limit)
{
	size_t n = 0;

	for (;;) {
		uint64_t next = wheel_next(s->w);

		if (next == UINT64_MAX || next > limit)
			break;
		wheel_advance(s->w, next);
		n += e_pop_all(s);
	}
	return n;
}

static void e_check(const struct e_set *s)
{
	t_check(s->w);
}

/* ------------------------------------------------------------------------ */

START_TEST(test_wheel_ents_exact_once)
{
	uint64_t rng = t_seed(0xe1), now = UINT64_C(1) << 33 | t_rand_below(&rng, 1 << 20);
	struct e_set *s = e_new(E_MAX, now);
	size_t byval = 0, fired, armed = 0;

	/* Deadlines spread over every level, a few with slack. */
	for (size_t i = 0; i < s->n; i++) {
		uint64_t d = now + 1 + t_below_log(&rng, UINT64_C(1) << 40);
		uint32_t slack = t_rand_below(&rng, 4) ? 0 : (uint32_t)t_rand_below(&rng, 100000);

		byval += e_arm(s, i, d, slack);
		armed++;
	}
	/* Far ones went by value, and the wheel has not looked at any of them. */
	T_UINT_GT(byval, s->n / 2);
	T_UINT_EQ(wheel_entries(s->w), byval);
	T_UINT_EQ(wheel_count(s->w), s->n - byval);
	T_UINT_EQ(s->looks + s->prefetches + s->claims, 0);
	e_check(s);
	fired = e_run(s, UINT64_MAX);
	T_UINT_EQ(fired, armed);
	for (size_t i = 0; i < s->n; i++)
		T_UINT_EQ(s->r[i].pops, 1);
	T_UINT_EQ(wheel_entries(s->w), 0);
	T_UINT_EQ(wheel_count(s->w), 0);
	T_UINT_EQ(s->claims, byval);
	e_check(s);
	e_free(s);
}
END_TEST

START_TEST(test_wheel_ents_churn)
{
	uint64_t rng = t_seed(0xe2), now = 5000, end = now + (UINT64_C(1) << 24);
	struct e_set *s = e_new(20000, now);
	size_t steps = 0;

	/*
	 * Arms, cancels and pushes later at random while the clock runs: no
	 * record fires early, late, twice, or after its cancel (e_pop_all()),
	 * and every one armed and not cancelled fires.
	 */
	for (size_t i = 0; i < s->n; i++)
		e_arm(s, i, now + 1 + t_below_log(&rng, UINT64_C(1) << 22), 0);
	while (s->w->curr < end) {
		uint64_t to = s->w->curr + 1 + t_rand_below(&rng, 3000);

		for (int k = 0; k < 200; k++) {
			size_t i = t_rand_below(&rng, s->n);
			struct e_rec *r = &s->r[i];
			uint64_t c = s->w->curr;

			if (!r->live)
				e_arm(s, i, c + 1 + t_below_log(&rng, UINT64_C(1) << 22), 0);
			else if (t_rand_below(&rng, 2))
				e_cancel(s, i);
			else
				e_push(s, i, r->deadline + t_below_log(&rng, UINT64_C(1) << 20));
		}
		e_run(s, to);
		if (s->w->curr < to)
			wheel_advance(s->w, to);
		T_UINT_EQ(e_pop_all(s), 0);
		if (++steps % 256 == 0)
			e_check(s);
	}
	e_check(s);
	e_run(s, UINT64_MAX);
	for (size_t i = 0; i < s->n; i++) {
		T_ASSERT(!s->r[i].live);
		T_UINT_LE(s->r[i].pops, 1);
	}
	T_UINT_EQ(wheel_entries(s->w), 0);
	T_UINT_EQ(wheel_count(s->w), 0);
	e_free(s);
}
END_TEST

START_TEST(test_wheel_ents_pushed_later_stays_by_value)
{
	struct e_set *s = e_new(1, 0);
	uint64_t d = 100000, visits = 0;

	/*
	 * A record pushed later by a store before each of its visits is filed
	 * by value again each time, never claimed until it is near, and fires
	 * at its last deadline.
	 */
	T_ASSERT(e_arm(s, 0, d, 0));
	for (int k = 0; k < 20; k++) {
		uint64_t next = wheel_next(s->w);

		T_UINT_LE(next, e_fire(&s->r[0]));
		e_push(s, 0, s->r[0].deadline + 50000);
		wheel_advance(s->w, next);
		T_UINT_EQ(e_pop_all(s), 0);
		visits++;
		if (!s->r[0].far)
			break;
		T_UINT_EQ(wheel_entries(s->w), 1);
		T_UINT_EQ(s->claims, 0);
	}
	T_UINT_GE(visits, 10);
	T_UINT_EQ(e_run(s, UINT64_MAX), 1);
	T_UINT_EQ(s->r[0].pops, 1);
	T_UINT_EQ(s->claims, 1);
	e_free(s);
}
END_TEST

START_TEST(test_wheel_ents_stale_never_claimed)
{
	uint64_t rng = t_seed(0xe3);
	struct e_set *s = e_new(4000, 0);
	size_t stood = 0;

	for (size_t i = 0; i < s->n; i++)
		T_ASSERT(e_arm(s, i, 10000 + t_rand_below(&rng, 200000), 0));
	/* Half go stale: cancelled, or re-armed in a new life elsewhere. */
	for (size_t i = 0; i < s->n; i += 2) {
		e_cancel(s, i);
		if (i % 4 == 0)
			T_ASSERT(e_arm(s, i, 300000 + t_rand_below(&rng, 100000), 0));
	}
	for (size_t i = 0; i < s->n; i++)
		stood += s->r[i].live;
	T_UINT_EQ(wheel_entries(s->w), s->n + s->n / 4);
	e_check(s);
	T_UINT_EQ(e_run(s, UINT64_MAX), stood);
	/* Only entries that stood were claimed: one claim per firing. */
	T_UINT_EQ(s->claims, stood);
	for (size_t i = 0; i < s->n; i++)
		T_UINT_EQ(s->r[i].pops, (i % 4 == 2) ? 0u : 1u);
	e_free(s);
}
END_TEST

START_TEST(test_wheel_ents_claim_race)
{
	struct e_set *s = e_new(300, 0);

	for (size_t i = 0; i < s->n; i++) {
		T_ASSERT(e_arm(s, i, 20000 + i, 0));
		s->r[i].stale_on_claim = (i % 3 == 0);
	}
	/* Those that went stale between look() and claim() are neither linked nor fired. */
	T_UINT_EQ(e_run(s, UINT64_MAX), s->n - s->n / 3);
	for (size_t i = 0; i < s->n; i++)
		T_UINT_EQ(s->r[i].pops, (i % 3 == 0) ? 0u : 1u);
	T_UINT_EQ(wheel_count(s->w), 0);
	T_UINT_EQ(wheel_entries(s->w), 0);
	e_check(s);
	e_free(s);
}
END_TEST

/*
 * 100 timers re-armed over and over into one far slot, 600 lives each (the
 * entries' 8 bits of life wrap): each re-arm leaves a stale entry.  Sweeps
 * keep the slot under WHEEL_SWEEP_MIN entries, at no more than two asks per
 * entry filed, and only live records fire, once.  With gone(), no record
 * is read before the visit; without it, sweeps look at the records.
 */
static void e_sweep_bound(bool gone)
{
	struct e_set *s = e_new_with(100, 0, gone);
	uint64_t filed = 0;

	for (size_t i = 0; i < s->n; i++)
		T_ASSERT(e_arm(s, i, 8192 + i, 0));
	filed = s->n;
	for (unsigned round = 0; round < 600; round++) {
		for (size_t i = 0; i < s->n; i++) {
			e_cancel(s, i);
			T_ASSERT(e_arm(s, i, 8192 + 2 * i, 0));
			filed++;
		}
		T_UINT_LE(wheel_entries(s->w), WHEEL_SWEEP_MIN);
	}
	if (gone) {
		T_UINT_EQ(s->looks + s->prefetches, 0);
		T_UINT_LE(s->gones, 2 * filed);
		T_UINT_GT(s->gones, 0);
	} else {
		T_UINT_LE(s->looks, 2 * filed);
		T_UINT_GT(s->looks, 0);
	}
	T_UINT_EQ(s->claims, 0);
	e_check(s);
	T_UINT_EQ(e_run(s, UINT64_MAX), s->n);
	T_UINT_EQ(s->claims, s->n);
	for (size_t i = 0; i < s->n; i++)
		T_UINT_EQ(s->r[i].pops, 1);
	e_free(s);
}

START_TEST(test_wheel_ents_sweep_bound)
{
	e_sweep_bound(true);
}
END_TEST

START_TEST(test_wheel_ents_sweep_bound_by_looks)
{
	e_sweep_bound(false);
}
END_TEST

START_TEST(test_wheel_ents_sweep_reads_no_record)
{
	enum { LIVE = 3 * WHEEL_SWEEP_MIN, GONE = 2 * LIVE };
	struct e_set *s = e_new(LIVE + GONE, 0);

	/*
	 * A slot whose timers all stand passes the sweep's size, again and
	 * again: its samples ask gone(), find nothing stale and let it grow,
	 * reading none of the records.  Beside it, a slot of entries that all
	 * went stale: its sweeps drop them, also without a look.
	 */
	for (size_t i = 0; i < LIVE; i++)
		T_ASSERT(e_arm(s, i, 8192 + i % 100, 0));
	T_UINT_EQ(wheel_entries(s->w), LIVE);
	T_UINT_GT(s->gones, 0);
	for (size_t i = LIVE; i < LIVE + GONE; i++) {
		T_ASSERT(e_arm(s, i, 300000, 0));
		e_cancel(s, i);
	}
	T_UINT_LE(wheel_entries(s->w), LIVE + WHEEL_SWEEP_MIN);
	T_UINT_EQ(s->looks + s->prefetches + s->claims, 0);
	/* The visit loads and looks at the standing only. */
	T_UINT_EQ(e_run(s, UINT64_MAX), LIVE);
	T_UINT_EQ(s->claims, LIVE);
	T_UINT_LE(s->looks, 2 * (uint64_t)LIVE);
	T_UINT_LE(s->prefetches, s->looks);
	e_free(s);
}
END_TEST

START_TEST(test_wheel_ents_sweep_all)
{
	enum { N = 3000 };
	struct e_set *s = e_new(2 * N, 0);
	uint64_t rng = t_seed(0xe6);

	/*
	 * A slot that takes no more entries is never swept as it grows:
	 * wheel_sweep_entries() sweeps every slot.  N timers in one slot,
	 * N more spread far, two thirds of each cancelled: the sweep drops
	 * exactly the cancelled ones, reads no record, and what stands fires
	 * once, never early.  Without gone() it does nothing.
	 */
	for (size_t i = 0; i < N; i++)
		T_ASSERT(e_arm(s, i, 70000 + i % 50, 0));
	for (size_t i = N; i < 2 * N; i++)
		T_ASSERT(e_arm(s, i, 10000 + t_rand_below(&rng, 5000000), 0));
	for (size_t i = 0; i < 2 * N; i++)
		if (i % 3)
			e_cancel(s, i);
	T_UINT_EQ(wheel_entries(s->w), 2 * N);
	T_UINT_EQ(wheel_sweep_entries(s->w), 2 * N - 2 * N / 3);
	T_UINT_EQ(wheel_entries(s->w), 2 * N / 3);
	T_UINT_EQ(s->looks + s->prefetches + s->claims, 0);
	e_check(s);
	T_UINT_EQ(wheel_sweep_entries(s->w), 0);
	T_UINT_EQ(e_run(s, UINT64_MAX), 2 * N / 3);
	for (size_t i = 0; i < 2 * N; i++)
		T_UINT_EQ(s->r[i].pops, i % 3 ? 0u : 1u);
	e_free(s);

	s = e_new_with(10, 0, false);
	for (size_t i = 0; i < s->n; i++)
		T_ASSERT(e_arm(s, i, 70000, 0));
	e_cancel(s, 0);
	T_UINT_EQ(wheel_sweep_entries(s->w), 0);
	T_UINT_EQ(wheel_entries(s->w), s->n);
	T_UINT_EQ(s->looks, 0);
	T_UINT_EQ(e_run(s, UINT64_MAX), s->n - 1);
	e_free(s);
}
END_TEST

START_TEST(test_wheel_ents_untouched_until_visit)
{
	uint64_t rng = t_seed(0xe4);
	struct e_set *s = e_new(WHEEL_SWEEP_MIN - 1, 0);

	/* Below the sweep's threshold, filing reads no record at all. */
	for (size_t i = 0; i < s->n; i++)
		T_ASSERT(e_arm(s, i, 70000 + t_rand_below(&rng, 4096), 0));
	for (size_t i = 0; i < s->n; i += 3)
		e_cancel(s, i);
	T_UINT_EQ(s->looks + s->prefetches + s->claims, 0);
	/* Up to the slot's visit, still nothing. */
	wheel_advance(s->w, 65535);
	T_UINT_EQ(s->looks + s->prefetches + s->claims, 0);
	T_UINT_EQ(e_run(s, UINT64_MAX), s->n - (s->n + 2) / 3);
	/*
	 * The visit looked at each that stood, once, and loaded each ahead of
	 * its look; those gone() ruled out it neither loaded nor looked at.
	 */
	T_UINT_EQ(s->looks, s->n - (s->n + 2) / 3);
	T_UINT_EQ(s->prefetches, s->looks);
	e_free(s);
}
END_TEST

START_TEST(test_wheel_ents_flush)
{
	struct e_set *s = e_new(1000, 0);
	size_t stood = 0, popped = 0;
	struct wheel_timer *t;

	for (size_t i = 0; i < s->n; i++)
		e_arm(s, i, (i % 10 == 0) ? 10 + i : 100000 + 1000 * i, 0);
	for (size_t i = 0; i < s->n; i += 7)
		e_cancel(s, i);
	for (size_t i = 0; i < s->n; i++)
		stood += s->r[i].live;
	/* Every record that stands is claimed and made due; the stale are dropped. */
	s->flushing = true;
	wheel_flush(s->w);
	T_UINT_EQ(wheel_entries(s->w), 0);
	T_UINT_EQ(wheel_count(s->w), stood);
	while ((t = wheel_pop(s->w))) {
		struct e_rec *r = (struct e_rec *)(void *)t;

		T_ASSERT(r->live && r->linked);
		r->live = false;
		r->pops++;
		popped++;
	}
	T_UINT_EQ(popped, stood);
	for (size_t i = 0; i < s->n; i++)
		T_UINT_EQ(s->r[i].pops, (i % 7 == 0) ? 0u : 1u);
	e_free(s);
}
END_TEST

START_TEST(test_wheel_ents_gen_alias)
{
	struct e_set *s = e_new(1, 0);

	/*
	 * An entry keeps 8 bits of its record's life.  A stale entry whose bits
	 * match a later life stands for that life: its visit re-files or claims
	 * the live record, which still fires once, exactly at its own time.
	 */
	T_ASSERT(e_arm(s, 0, 10000, 0));
	e_cancel(s, 0);
	/* 255 lives come and go: the next one's low 8 bits are the old one's. */
	s->r[0].gen += 255;
	s->ended[0] = (uint8_t)s->r[0].gen;
	T_ASSERT(e_arm(s, 0, 300000, 0));
	T_ASSERT(wheel_entry_gen(wheel_entry_of(0, s->r[0].gen - 256), s->r[0].gen));
	T_UINT_EQ(wheel_entries(s->w), 2);
	T_UINT_EQ(e_run(s, UINT64_MAX), 1);
	T_UINT_EQ(s->r[0].pops, 1);
	T_UINT_EQ(wheel_entries(s->w), 0);
	e_check(s);
	e_free(s);
}
END_TEST

START_TEST(test_wheel_ents_refused)
{
	struct e_set *s = e_new(1, 1000);
	struct wheel *bare = t_wheel_new(0);
	struct wheel_entry e = { 0, 1 };

	/* Without entry ops a wheel takes no entries. */
	T_INT_EQ(wheel_file_entry(bare, e, 1 << 20), -EINVAL);
	T_INT_EQ(wheel_file_entry(NULL, e, 1 << 20), -EINVAL);
	/* Due, or near (levels 0 and 1): the owner links it instead. */
	T_INT_EQ(wheel_file_entry(s->w, e, 1000), -EAGAIN);
	T_INT_EQ(wheel_file_entry(s->w, e, 999), -EAGAIN);
	T_INT_EQ(wheel_file_entry(s->w, e, 1001), -EAGAIN);
	T_INT_EQ(wheel_file_entry(s->w, e, 4095), -EAGAIN);
	/* Beyond the levels' span (the overflow list): linked too. */
	T_INT_EQ(wheel_file_entry(s->w, e, T_SPAN + 5), -EAGAIN);
	T_UINT_EQ(wheel_entries(s->w), 0);
	/* From the first tick whose level is WHEEL_ENTRY_LEVEL. */
	T_INT_EQ(wheel_file_entry(s->w, e, 4096), 0);
	T_INT_EQ(wheel_file_entry(s->w, e, T_SPAN - 1), 0);
	T_UINT_EQ(wheel_entries(s->w), 2);
	wheel_fini(bare);
	free(bare);
	e_free(s);
}
END_TEST

START_TEST(test_wheel_ents_next_and_check)
{
	struct e_set *s = e_new(1, 0);
	const char *why = NULL;
	uint64_t next, steps = 0;

	/* wheel_next() sees a slot that holds only entries, no later than the fire tick. */
	T_ASSERT(e_arm(s, 0, 3000000, 0));
	next = wheel_next(s->w);
	T_UINT_LE(next, 3000000);
	T_UINT_GT(next, 0);
	e_check(s);
	/* An entry whose record fires before its slot comes is what wheel_check() reports. */
	s->r[0].deadline = 10;
	T_INT_EQ(wheel_check(s->w, &why), -EUCLEAN);
	T_ASSERT(why && strstr(why, "entry"));
	s->r[0].deadline = 3000000;
	e_check(s);
	/* Tickless, it fires exactly on time after at most one visit per level. */
	while (s->r[0].pops == 0) {
		T_UINT_LT(++steps, WHEEL_LEVELS + 2);
		wheel_advance(s->w, wheel_next(s->w));
		e_pop_all(s);
	}
	T_UINT_EQ(s->w->curr, 3000000);
	e_free(s);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("wheel_ents");
	TCase *tc = tcase_create("entries");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_wheel_ents_exact_once);
	tcase_add_test(tc, test_wheel_ents_churn);
	tcase_add_test(tc, test_wheel_ents_pushed_later_stays_by_value);
	tcase_add_test(tc, test_wheel_ents_stale_never_claimed);
	tcase_add_test(tc, test_wheel_ents_claim_race);
	tcase_add_test(tc, test_wheel_ents_sweep_bound);
	tcase_add_test(tc, test_wheel_ents_sweep_bound_by_looks);
	tcase_add_test(tc, test_wheel_ents_sweep_all);
	tcase_add_test(tc, test_wheel_ents_untouched_until_visit);
	tcase_add_test(tc, test_wheel_ents_sweep_reads_no_record);
	tcase_add_test(tc, test_wheel_ents_flush);
	tcase_add_test(tc, test_wheel_ents_refused);
	tcase_add_test(tc, test_wheel_ents_gen_alias);
	tcase_add_test(tc, test_wheel_ents_next_and_check);
	suite_add_tcase(s, tc);
	return t_main(s, "wheel_ents");
}
