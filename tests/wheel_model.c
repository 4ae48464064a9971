/* SPDX-License-Identifier: MIT */
/*
 * wheel_model.c - randomized runs that drive the wheel and a simple
 * reference model (a table of live records plus a binary heap of fire
 * ticks) through the same seeded sequence of arm / cancel / push-later /
 * push-earlier / advance / pop steps and compare the two after every step,
 * with wheel_check() between.  A failure names the seed, the run and the
 * step: "T_SEED=<seed> CK_RUN_CASE=random build/tests/wheel_model" replays
 * it exactly (CK_FORK=no puts it under a debugger).
 */
#include "t_wheel.h"

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
			ck_abort_msg("T_SEED=%#" PRIx64 " run %u step %" PRIu64	\
				     " curr %" PRIu64 ": failed: %s: " fmt,	\
				     t_seed_value, (m)->run, (m)->step, (m)->curr,	\
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
	m->rng = t_seed(0);
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
	wheel_fini(m->w);
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
		return m->ids[t_rand_below(&m->rng, m->nlive)];
	return m->ids[m->nlive + t_rand_below(&m->rng, m->nrec - m->nlive)];
}

/* Deadlines across everything the wheel distinguishes. */
static uint64_t t_gen_deadline(struct t_model *m)
{
	uint64_t c = m->curr, *r = &m->rng, p;
	unsigned int k;

	switch (t_rand_below(r, 24)) {
	case 0:		/* in the past, or now: straight to the due list */
		return c - t_rand_below(r, c < 1000 ? c + 1 : 1000);
	case 1:		/* the next tick */
		return t_sat_add(c, 1);
	case 2:		/* level edges: 64^k - 1, 64^k, 64^k + 1 ahead */
		k = 1 + (unsigned int)t_rand_below(r, WHEEL_LEVELS);
		return t_sat_add(c, t_pow64(k) - 1 + t_rand_below(r, 3));
	case 3:		/* the first tick of a slot of some level */
		k = (unsigned int)t_rand_below(r, WHEEL_LEVELS);
		return t_align_up(t_sat_add(c, 1), t_pow64(k));
	case 4:
	case 5:		/* anywhere in some level's range */
		k = (unsigned int)t_rand_below(r, WHEEL_LEVELS);
		p = t_pow64(k);
		return t_sat_add(c, p + t_rand_below(r, 63 * p));
	case 6:		/* beyond the levels: the overflow list */
		return t_sat_add(c, T_SPAN + t_below_log(r, UINT64_C(1) << 52));
	case 7:		/* the end of time */
		if (m->far_pushes)
			return UINT64_MAX - t_rand_below(r, 2);
		return t_sat_add(c, 1 + t_rand_below(r, m->near));
	case 8:
	case 9:
	case 10:	/* near, any magnitude */
		return t_sat_add(c, 1 + t_below_log(r, m->near));
	default:	/* near: these are the ones that keep firing */
		return t_sat_add(c, 1 + t_rand_below(r, m->near));
	}
}

static uint32_t t_gen_slack(struct t_model *m)
{
	switch (t_rand_below(&m->rng, 4)) {
	case 0:
	case 1:
		return 0;
	case 2:
		return (uint32_t)t_rand_below(&m->rng, 64);
	default:
		return (uint32_t)t_below_log(&m->rng, UINT64_C(1) << 32);
	}
}

/* A later deadline: a little or a lot past the old one, or "now + timeout". */
static uint64_t t_gen_later(struct t_model *m, uint64_t old)
{
	uint64_t *r = &m->rng, base = t_rand_below(r, 2) ? old : t_max(old, m->curr), delta;

	switch (t_rand_below(r, 8)) {
	case 0:
		delta = t_rand_below(r, 2);	/* 0: same deadline, still a valid "later" */
		break;
	case 1:
		delta = t_rand_below(r, 64);
		break;
	case 2:
	case 3:
		delta = t_rand_below(r, m->near);
		break;
	case 4:
	case 5:
		delta = t_below_log(r, UINT64_C(1) << 50);
		break;
	case 6:
		delta = T_SPAN + t_rand_below(r, 5);
		break;
	default:
		delta = m->far_pushes && !t_rand_below(r, 4) ? t_rand(r) : t_below_log(r, m->near);
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
	switch (t_rand_below(r, 3)) {
	case 0:
		return old - 1 - t_rand_below(r, span < 64 ? span : 64);
	case 1:
		return lo + t_rand_below(r, span);
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
	if (t_rand_below(&m->rng, 4)) {
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
	bool was_due = old_fire <= m->curr, refresh = !t_rand_below(&m->rng, 4);
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
	switch (t_rand_below(r, 16)) {
	case 0:		/* backwards or standing still: nothing may change */
		now = t_sat_sub(c, t_rand_below(r, 100));
		break;
	case 1:
		now = t_sat_add(c, 1);
		break;
	case 2:
	case 3:
		now = t_sat_add(c, t_rand_below(r, 64));
		break;
	case 4:
	case 5:
		now = t_sat_add(c, t_rand_below(r, m->adv / 8 + 1));
		break;
	case 6:		/* rarely, a big jump: up to 2^50 ticks */
		if (m->big_odds && !t_rand_below(r, m->big_odds))
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
				now = m->ref[id].fire - t_rand_below(r, 2);
				break;
			}
		}
		/* fall through */
	default:
		now = t_sat_add(c, t_rand_below(r, m->adv / 16 + 1));
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

	if (m->nlive && t_rand_below(&m->rng, 2)) {
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
	x = (unsigned int)t_rand_below(&m->rng, total);
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
		fprintf(stderr, "wheel_model: run %u: %" PRIu64 " steps, %" PRIu64 " fired, %"
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
		fprintf(stderr, "wheel_model: 1e6 run: %zu live before the mass expiry, clock +%"
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

int main(void)
{
	Suite *s = suite_create("wheel_model");
	TCase *tc;

	tc = tcase_create("random");
	/* The million-record run takes seconds, more under sanitizers. */
	tcase_set_timeout(tc, 300);
	tcase_add_loop_test(tc, test_wheel_random_small, 0, 8);
	tcase_add_test(tc, test_wheel_random_1e6);
	suite_add_tcase(s, tc);
	return t_main(s, "wheel_model");
}
