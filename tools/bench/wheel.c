/* SPDX-License-Identifier: MIT */
/*
 * wheel.c - kairos-bench mode "wheel": the timing wheel (src/wheel.c)
 * against a binary heap, single thread, virtual time.  Both run through one
 * table of function pointers (struct bench_queue_ops), in the same run, so
 * they do the same work in the same order: add N (deadlines U[1, 60000]
 * ticks), cancel all, re-add and push each U[1, 1000] ticks later, then as
 * much earlier (staying in the future), expire-pushed (step from one next()
 * to the next until all fired, paying for what the pushes deferred), and
 * expire on a fresh structure.  Two floors on each structure's own records
 * tell a missed goal from a slow structure: touch (independent random
 * read-modify-writes) and chase (one dependent miss after another, as a
 * walk down a slot list of scattered records).
 *
 * --slack PCT gives each wheel timer a slack of PCT% of its delay, as
 * Linux's wheel does with 12.5%; the heap stays exact either way.  Records
 * sit in one array, fresh per run and structure and faulted in before the
 * clock starts; each phase visits them in its own random permutation, as
 * records scattered through a server's memory.  Medians over the runs, after
 * one untimed warm-up run; the structures take turns going first.
 *
 * Cheap checks always run, outside the timed loops or as a few ALU ops that
 * both structures pay alike: every call succeeds, counts are right after
 * each phase, and both expiries fire exactly the N timers, never early, at
 * the tick each is due, in nondecreasing order, with the deadline sum the
 * workload predicts.  --verify adds a randomized differential test of wheel
 * against heap, with both invariant checkers after every phase.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "wheel.h"

/* ------------------------------------------------------------------------
 * Binary heap: the baseline the wheel is measured against.
 *
 * The classic array min-heap of record pointers, as libuv and libev use it
 * for their timers: keyed by (deadline, seq), where seq breaks ties so that
 * equal deadlines fire in the order they were scheduled, with each record
 * holding its position in the array so that cancel and update are
 * O(log n) sifts instead of a search.  The array is 1-based: position 0
 * means "not in the heap", so a zero-filled record is a free one, as with
 * the wheel, and parent/child arithmetic needs no +1s.
 */

struct heap_timer {
	uint64_t deadline;
	uint64_t seq;		/* tie-break: lower fires first */
	size_t pos;		/* index in heap.v, 1-based; 0: not in the heap */
};

struct heap {
	struct heap_timer **v;	/* v[1] .. v[len]; v[0] unused */
	size_t len;
	size_t cap;
	uint64_t seq;		/* next seq to hand out */
};

static bool heap_before(const struct heap_timer *a, const struct heap_timer *b)
{
	if (a->deadline != b->deadline)
		return a->deadline < b->deadline;
	return a->seq < b->seq;
}

/* Moves the hole at @i up until @t fits there, then puts @t in it. */
static void heap_sift_up(struct heap *h, struct heap_timer *t, size_t i)
{
	while (i > 1) {
		struct heap_timer *p = h->v[i / 2];

		if (!heap_before(t, p))
			break;
		h->v[i] = p;
		p->pos = i;
		i /= 2;
	}
	h->v[i] = t;
	t->pos = i;
}

/* Moves the hole at @i down until @t fits there, then puts @t in it. */
static void heap_sift_down(struct heap *h, struct heap_timer *t, size_t i)
{
	size_t len = h->len;

	for (;;) {
		size_t c = 2 * i;
		struct heap_timer *child;

		if (c > len)
			break;
		if (c < len && heap_before(h->v[c + 1], h->v[c]))
			c++;
		child = h->v[c];
		if (!heap_before(child, t))
			break;
		h->v[i] = child;
		child->pos = i;
		i = c;
	}
	h->v[i] = t;
	t->pos = i;
}

/* Places @t, whose key changed or which fills the hole at @i, where it belongs. */
static void heap_fix(struct heap *h, struct heap_timer *t, size_t i)
{
	if (i > 1 && heap_before(t, h->v[i / 2]))
		heap_sift_up(h, t, i);
	else
		heap_sift_down(h, t, i);
}

static struct heap *heap_create(size_t cap)
{
	struct heap *h = bench_alloc(sizeof(*h));

	h->v = bench_alloc((cap + 1) * sizeof(*h->v));
	h->cap = cap;
	return h;
}

static void heap_destroy(struct heap *h)
{
	free(h->v);
	free(h);
}

/* Return: 0; -EBUSY if @t is in the heap; -ENOSPC if the heap is full. */
static int heap_add(struct heap *h, struct heap_timer *t, uint64_t deadline)
{
	if (t->pos)
		return -EBUSY;
	if (h->len == h->cap)
		return -ENOSPC;
	t->deadline = deadline;
	t->seq = h->seq++;
	heap_sift_up(h, t, ++h->len);
	return 0;
}

/* Return: 0; -ENOENT if @t is not in the heap. */
static int heap_del(struct heap *h, struct heap_timer *t)
{
	size_t i = t->pos;
	struct heap_timer *last;

	if (!i)
		return -ENOENT;
	last = h->v[h->len--];
	t->pos = 0;
	/* The last record fills @t's hole, unless @t was the last record. */
	if (i <= h->len)
		heap_fix(h, last, i);
	return 0;
}

/*
 * A new seq too, so that among equal deadlines a moved record fires after
 * those already there, as it would after a cancel and re-add.
 * Return: 0; -ENOENT if @t is not in the heap.
 */
static int heap_update(struct heap *h, struct heap_timer *t, uint64_t deadline)
{
	if (!t->pos)
		return -ENOENT;
	t->deadline = deadline;
	t->seq = h->seq++;
	heap_fix(h, t, t->pos);
	return 0;
}

static struct heap_timer *heap_min(const struct heap *h)
{
	return h->len ? h->v[1] : NULL;
}

static struct heap_timer *heap_pop(struct heap *h)
{
	struct heap_timer *t = heap_min(h);

	if (t)
		heap_del(h, t);
	return t;
}

/* Return: 0 when the heap is sound; otherwise -EUCLEAN and *@why says why. */
static int heap_check(const struct heap *h, const char **why)
{
	const char *bad = NULL;

	if (h->len > h->cap)
		bad = "more records than capacity";
	for (size_t i = 1; i <= h->len && !bad; i++) {
		const struct heap_timer *t = h->v[i];

		if (!t)
			bad = "NULL record in the array";
		else if (t->pos != i)
			bad = "record's position does not match its place in the array";
		else if (i > 1 && heap_before(t, h->v[i / 2]))
			bad = "record orders before its parent";
		else if (t->seq >= h->seq)
			bad = "record's seq was never handed out";
	}
	if (why)
		*why = bad;
	return bad ? -EUCLEAN : 0;
}

/* ------------------------------------------------------------------------
 * One table of function pointers over both structures.
 *
 * Calls go through the table in both cases, so both pay the same indirect
 * call; the wheel adapters are tail calls into wheel.c.
 */

/* What an expiry saw: compared against the workload after the phase. */
struct bench_sink {
	uint64_t fired;
	uint64_t sum;		/* of fired deadlines */
	uint64_t early;		/* fired while now < deadline: must stay 0 */
	uint64_t late;		/* fired after the tick it was due: must stay 0 */
	uint64_t disorder;	/* fired after a later due tick: must stay 0 */
	uint64_t last;		/* due tick of the previous one fired */
};

/*
 * @fire is the tick the record is due at: its deadline, or for a wheel
 * record with slack the fire tick the wheel chose within it.  Branch-free,
 * so that both structures pay a few ALU operations per fire.
 */
static inline void sink_fire(struct bench_sink *s, uint64_t deadline, uint64_t fire,
			     uint64_t now)
{
	s->fired++;
	s->sum += deadline;
	s->early += deadline > now;
	s->late += now > fire;
	s->disorder += fire < s->last;
	s->last = fire;
}

struct bench_queue_ops {
	const char *name;
	size_t rec_size;	/* one record */
	size_t slot_size;	/* per record, outside it (the heap's array slot) */
	size_t fixed_size;	/* the structure itself, whatever N */
	/* Optional: what it allocated beyond fixed_size, as it stands now. */
	size_t (*extra_bytes)(const void *q);
	void *(*create)(size_t cap, uint64_t now);
	void (*destroy)(void *q);
	/* @slack: ticks it may fire after @deadline; a structure may ignore it. */
	int (*add)(void *q, void *rec, uint64_t deadline, uint32_t slack);
	int (*cancel)(void *q, void *rec);
	int (*update)(void *q, void *rec, uint64_t deadline);
	uint64_t (*count)(const void *q);
	/* The next tick at which expire() may have work; UINT64_MAX if empty. */
	uint64_t (*next)(const void *q);
	/* Moves time to @now and pops every record due, into @s. */
	uint64_t (*expire)(void *q, uint64_t now, struct bench_sink *s);
	int (*check)(const void *q, const char **why);
};

static void *bq_wheel_create(size_t cap, uint64_t now)
{
	struct wheel *w = bench_alloc(sizeof(*w));

	(void)cap;
	wheel_init(w, now);
	return w;
}

static void bq_wheel_destroy(void *q)
{
	wheel_fini(q);
	free(q);
}

static int bq_wheel_add(void *q, void *rec, uint64_t deadline, uint32_t slack)
{
	return wheel_add(q, rec, deadline, slack);
}

static int bq_wheel_cancel(void *q, void *rec)
{
	return wheel_del(q, rec);
}

static int bq_wheel_update(void *q, void *rec, uint64_t deadline)
{
	return wheel_update(q, rec, deadline);
}

static uint64_t bq_wheel_count(const void *q)
{
	return wheel_count(q);
}

static uint64_t bq_wheel_next(const void *q)
{
	return wheel_next(q);
}

static uint64_t bq_wheel_expire(void *q, uint64_t now, struct bench_sink *s)
{
	struct wheel_timer *t;
	uint64_t n = 0;

	wheel_advance(q, now);
	while ((t = wheel_pop(q)) != NULL) {
		/* The test keeps the exact case free of the call. */
		uint64_t fire = t->slack ? wheel_fire_tick(t->deadline, t->slack) : t->deadline;

		sink_fire(s, t->deadline, fire, now);
		n++;
	}
	return n;
}

static int bq_wheel_check(const void *q, const char **why)
{
	return wheel_check(q, why);
}

static size_t bq_wheel_extra_bytes(const void *q)
{
	return wheel_log_bytes(q);
}

static const struct bench_queue_ops bq_wheel = {
	.name = "wheel",
	.rec_size = sizeof(struct wheel_timer),
	.slot_size = 0,
	.fixed_size = sizeof(struct wheel),
	.extra_bytes = bq_wheel_extra_bytes,
	.create = bq_wheel_create,
	.destroy = bq_wheel_destroy,
	.add = bq_wheel_add,
	.cancel = bq_wheel_cancel,
	.update = bq_wheel_update,
	.count = bq_wheel_count,
	.next = bq_wheel_next,
	.expire = bq_wheel_expire,
	.check = bq_wheel_check,
};

static void *bq_heap_create(size_t cap, uint64_t now)
{
	(void)now;	/* the heap keeps no time: expire() is given it */
	return heap_create(cap);
}

static void bq_heap_destroy(void *q)
{
	heap_destroy(q);
}

/* The heap is the exact baseline: it fires at the deadline, slack or not. */
static int bq_heap_add(void *q, void *rec, uint64_t deadline, uint32_t slack)
{
	(void)slack;
	return heap_add(q, rec, deadline);
}

static int bq_heap_cancel(void *q, void *rec)
{
	return heap_del(q, rec);
}

static int bq_heap_update(void *q, void *rec, uint64_t deadline)
{
	return heap_update(q, rec, deadline);
}

static uint64_t bq_heap_count(const void *q)
{
	return ((const struct heap *)q)->len;
}

static uint64_t bq_heap_next(const void *q)
{
	const struct heap_timer *t = heap_min(q);

	return t ? t->deadline : UINT64_MAX;
}

static uint64_t bq_heap_expire(void *q, uint64_t now, struct bench_sink *s)
{
	struct heap *h = q;
	uint64_t n = 0;

	while (h->len && h->v[1]->deadline <= now) {
		struct heap_timer *t = heap_pop(h);

		sink_fire(s, t->deadline, t->deadline, now);
		n++;
	}
	return n;
}

static int bq_heap_check(const void *q, const char **why)
{
	return heap_check(q, why);
}

static const struct bench_queue_ops bq_heap = {
	.name = "heap",
	.rec_size = sizeof(struct heap_timer),
	.slot_size = sizeof(struct heap_timer *),
	/* The unused v[0] is fixed cost, not per record. */
	.fixed_size = sizeof(struct heap) + sizeof(struct heap_timer *),
	.create = bq_heap_create,
	.destroy = bq_heap_destroy,
	.add = bq_heap_add,
	.cancel = bq_heap_cancel,
	.update = bq_heap_update,
	.count = bq_heap_count,
	.next = bq_heap_next,
	.expire = bq_heap_expire,
	.check = bq_heap_check,
};

/* ------------------------------------------------------------------------
 * Mode "wheel": the wheel against the heap.
 */

#define WB_SPAN		60000u	/* deadlines U[1, WB_SPAN] ticks ahead */
#define WB_PUSH		1000u	/* pushes move U[1, WB_PUSH] ticks */
#define WB_GOAL_N	1000000u	/* the N the goals are set at */
#define WB_MAX_N	100000000u	/* indices are uint32_t; memory runs out first */

/* Table order.  The phases run in another order: see wb_run_queue(). */
enum wb_phase {
	WB_ADD,
	WB_CANCEL,
	WB_LATER,
	WB_EARLIER,
	WB_EXPIRE,
	WB_EXPIRE_PUSHED,
	WB_TOUCH,
	WB_CHASE,
	WB_NPHASES
};

static const struct wb_phase_info {
	const char *name;
	double goal;		/* ns per op at N = WB_GOAL_N; 0: none set */
} wb_phases[WB_NPHASES] = {
	[WB_ADD] = { "add", 40 },
	[WB_CANCEL] = { "cancel", 25 },
	[WB_LATER] = { "push-later", 25 },
	[WB_EARLIER] = { "push-earlier", 0 },
	[WB_EXPIRE] = { "expire", 150 },
	[WB_EXPIRE_PUSHED] = { "expire-pushed", 150 },
	[WB_TOUCH] = { "touch (floor)", 0 },
	[WB_CHASE] = { "chase (floor)", 0 },
};

#define WB_GOAL_BYTES	48.0	/* bytes per pending timer */

/* Index 0 is the subject, index 1 the baseline it is compared with. */
#define WB_NQUEUES	2
static const struct bench_queue_ops *const wb_queues[WB_NQUEUES] = {
	&bq_wheel,
	&bq_heap,
};

struct wb_opts {
	struct bench_opts b;
	double slack_pct;	/* each timer's slack, % of its delay; 0: exact */
	bool verify;
};

/*
 * One run's workload, shared by both structures.  Each phase is a list of
 * (record index, deadline) in the order the operations are made, so that a
 * timed loop reads its inputs sequentially and touches only the records at
 * random.
 */
struct wb_workload {
	size_t n;
	uint32_t *add_order;
	uint64_t *add_deadline;
	uint32_t *add_slack;	/* NULL: every timer exact */
	uint32_t *cancel_order;
	uint32_t *later_order;
	uint64_t *later_deadline;
	uint32_t *earlier_order;
	uint64_t *earlier_deadline;
	uint64_t *cur;		/* scratch: each record's deadline so far */
	uint64_t add_sum;	/* deadlines after the adds */
	uint64_t pushed_sum;	/* deadlines after both pushes */
};

static void wb_workload_alloc(struct wb_workload *wl, size_t n, bool slack)
{
	wl->n = n;
	wl->add_order = bench_alloc(n * sizeof(uint32_t));
	wl->add_deadline = bench_alloc(n * sizeof(uint64_t));
	wl->add_slack = slack ? bench_alloc(n * sizeof(uint32_t)) : NULL;
	wl->cancel_order = bench_alloc(n * sizeof(uint32_t));
	wl->later_order = bench_alloc(n * sizeof(uint32_t));
	wl->later_deadline = bench_alloc(n * sizeof(uint64_t));
	wl->earlier_order = bench_alloc(n * sizeof(uint32_t));
	wl->earlier_deadline = bench_alloc(n * sizeof(uint64_t));
	wl->cur = bench_alloc(n * sizeof(uint64_t));
}

static void wb_workload_free(struct wb_workload *wl)
{
	free(wl->add_order);
	free(wl->add_deadline);
	free(wl->add_slack);
	free(wl->cancel_order);
	free(wl->later_order);
	free(wl->later_deadline);
	free(wl->earlier_order);
	free(wl->earlier_deadline);
	free(wl->cur);
}

/*
 * A timer's slack: @pct% of its delay (the ticks from the add at tick 0 to
 * @deadline), rounded down and capped at UINT32_MAX ticks.
 */
static uint32_t wb_slack(uint64_t deadline, double pct)
{
	double s = (double)deadline * pct / 100.0;

	return s >= (double)UINT32_MAX ? UINT32_MAX : (uint32_t)s;
}

/*
 * One run's workload from its stream (bench_run_at()), the same for both
 * structures.  The slack takes nothing from the generator, so the deadlines do not
 * depend on it.
 */
static void wb_workload_generate(struct wb_workload *wl, uint64_t stream, double slack_pct)
{
	struct rng r = { stream };
	size_t n = wl->n;

	wl->add_sum = 0;
	wl->pushed_sum = 0;

	rng_permutation(&r, wl->add_order, n);
	for (size_t i = 0; i < n; i++) {
		uint64_t d = 1 + rng_below(&r, WB_SPAN);

		wl->add_deadline[i] = d;
		wl->cur[wl->add_order[i]] = d;
		wl->add_sum += d;
		if (wl->add_slack)
			wl->add_slack[i] = wb_slack(d, slack_pct);
	}
	rng_permutation(&r, wl->cancel_order, n);
	rng_permutation(&r, wl->later_order, n);
	for (size_t i = 0; i < n; i++) {
		uint64_t *c = &wl->cur[wl->later_order[i]];

		*c += 1 + rng_below(&r, WB_PUSH);
		wl->later_deadline[i] = *c;
	}
	rng_permutation(&r, wl->earlier_order, n);
	for (size_t i = 0; i < n; i++) {
		uint64_t *c = &wl->cur[wl->earlier_order[i]];
		uint64_t k = 1 + rng_below(&r, WB_PUSH);

		/* *c >= 2 after the push later, so 1 is still earlier. */
		*c = *c > k ? *c - k : 1;
		wl->earlier_deadline[i] = *c;
	}
	for (size_t i = 0; i < n; i++)
		wl->pushed_sum += wl->cur[i];
}

/*
 * The timed loops.  The function pointer is loaded once: reloading it from
 * the table after every call (the compiler must assume the call may have
 * changed it) would add a load the real callers would not have.
 */
static double wb_add_all(const struct bench_queue_ops *ops, void *q, char *recs,
			 const uint32_t *order, const uint64_t *deadline,
			 const uint32_t *slack, size_t n)
{
	int (*add)(void *, void *, uint64_t, uint32_t) = ops->add;
	size_t sz = ops->rec_size;
	uint64_t t0, t1;
	int err = 0;

	/* Two loops, so that exact timers do not read a slack list. */
	t0 = bench_now_ns();
	if (slack) {
		for (size_t i = 0; i < n; i++)
			err |= add(q, recs + (size_t)order[i] * sz, deadline[i], slack[i]);
	} else {
		for (size_t i = 0; i < n; i++)
			err |= add(q, recs + (size_t)order[i] * sz, deadline[i], 0);
	}
	t1 = bench_now_ns();
	if (err)
		bench_die("%s: add failed", ops->name);
	return (double)(t1 - t0) / (double)n;
}

static double wb_cancel_all(const struct bench_queue_ops *ops, void *q, char *recs,
			    const uint32_t *order, size_t n)
{
	int (*cancel)(void *, void *) = ops->cancel;
	size_t sz = ops->rec_size;
	uint64_t t0, t1;
	int err = 0;

	t0 = bench_now_ns();
	for (size_t i = 0; i < n; i++)
		err |= cancel(q, recs + (size_t)order[i] * sz);
	t1 = bench_now_ns();
	if (err)
		bench_die("%s: cancel failed", ops->name);
	return (double)(t1 - t0) / (double)n;
}

static double wb_update_all(const struct bench_queue_ops *ops, void *q, char *recs,
			    const uint32_t *order, const uint64_t *deadline, size_t n)
{
	int (*update)(void *, void *, uint64_t) = ops->update;
	size_t sz = ops->rec_size;
	uint64_t t0, t1;
	int err = 0;

	t0 = bench_now_ns();
	for (size_t i = 0; i < n; i++)
		err |= update(q, recs + (size_t)order[i] * sz, deadline[i]);
	t1 = bench_now_ns();
	if (err)
		bench_die("%s: update failed", ops->name);
	return (double)(t1 - t0) / (double)n;
}

/* Keeps the floor loop's loads from being optimized away. */
static volatile uint64_t wb_touch_sum;

/*
 * The floor: one read-modify-write of a word of each record, in random
 * order, with no structure and no call.  No structure can do an operation
 * that touches the record for less; what an op costs above this is its own.
 */
static double wb_touch_all(const struct bench_queue_ops *ops, char *recs,
			   const uint32_t *order, size_t n)
{
	size_t sz = ops->rec_size;
	uint64_t t0, t1, acc = 0;

	t0 = bench_now_ns();
	for (size_t i = 0; i < n; i++) {
		uint64_t *p = (uint64_t *)(void *)(recs + (size_t)order[i] * sz);

		acc += (*p += i);
	}
	t1 = bench_now_ns();
	wb_touch_sum = acc;
	return (double)(t1 - t0) / (double)n;
}

/*
 * The other floor: a walk down a list threaded through the records in random
 * order, so that each step waits for the miss before it.  A wheel walks its
 * slot lists like this when it re-files or fires their records; only the
 * threading is untimed.
 */
static double wb_chase_all(const struct bench_queue_ops *ops, char *recs,
			   const uint32_t *order, size_t n)
{
	size_t sz = ops->rec_size;
	uint64_t t0, t1, steps = 0;
	char *p;

	for (size_t i = 0; i < n; i++) {
		char **link = (char **)(void *)(recs + (size_t)order[i] * sz);

		*link = i + 1 < n ? recs + (size_t)order[i + 1] * sz : NULL;
	}
	p = recs + (size_t)order[0] * sz;
	t0 = bench_now_ns();
	while (p) {
		p = *(char **)(void *)p;
		steps++;
	}
	t1 = bench_now_ns();
	if (steps != n)
		bench_die("%s: chase took %" PRIu64 " steps, not %zu", ops->name, steps, n);
	return (double)(t1 - t0) / (double)n;
}

/*
 * Steps time from one next() to the next until all @n have fired, the way
 * a shard's loop would sleep until the wheel's next tick; then checks that
 * exactly the expected timers fired, none early, none after the tick it was
 * due, in the order of those ticks.
 */
static double wb_expire_all(const struct bench_queue_ops *ops, void *q, size_t n,
			    uint64_t sum, const char *phase)
{
	uint64_t (*next)(const void *) = ops->next;
	uint64_t (*expire)(void *, uint64_t, struct bench_sink *) = ops->expire;
	struct bench_sink s = { 0 };
	uint64_t now = 0, fired = 0, t0, t1;

	t0 = bench_now_ns();
	while (fired < n) {
		uint64_t tick = next(q);
		uint64_t got;

		if (tick == UINT64_MAX || tick < now)
			bench_die("%s: %s: next() = %" PRIu64 " at tick %" PRIu64
				  " with %" PRIu64 " of %zu fired",
				  ops->name, phase, tick, now, fired, n);
		got = expire(q, tick, &s);
		/* A next() that names the current tick must have work there. */
		if (got == 0 && tick == now)
			bench_die("%s: %s: no progress at tick %" PRIu64,
				  ops->name, phase, now);
		now = tick;
		fired += got;
	}
	t1 = bench_now_ns();
	if (s.fired != n || fired != n)
		bench_die("%s: %s: fired %" PRIu64 " of %zu", ops->name, phase, s.fired, n);
	if (s.early)
		bench_die("%s: %s: %" PRIu64 " fired before their deadline",
			  ops->name, phase, s.early);
	if (s.late)
		bench_die("%s: %s: %" PRIu64 " fired after the tick they were due",
			  ops->name, phase, s.late);
	if (s.disorder)
		bench_die("%s: %s: %" PRIu64 " fired out of deadline order",
			  ops->name, phase, s.disorder);
	if (s.sum != sum)
		bench_die("%s: %s: fired deadlines sum to %" PRIu64 ", not %" PRIu64,
			  ops->name, phase, s.sum, sum);
	return (double)(t1 - t0) / (double)n;
}

/*
 * After each phase: the count, and under --verify the structure's
 * invariants; *@extra keeps the most the structure held beyond its fixed
 * size after any phase, per pending timer of the run (@n).
 */
static void wb_expect(const struct bench_queue_ops *ops, const void *q, uint64_t count,
		      const char *phase, bool verify, size_t n, double *extra)
{
	double held = ops->extra_bytes ? (double)ops->extra_bytes(q) / (double)n : 0;
	const char *why = NULL;

	if (held > *extra)
		*extra = held;

	if (ops->count(q) != count)
		bench_die("%s: after %s: %" PRIu64 " records, expected %" PRIu64,
			  ops->name, phase, ops->count(q), count);
	if (verify && ops->check(q, &why) != 0)
		bench_die("%s: after %s: %s", ops->name, phase, why ? why : "check failed");
}

static void wb_progress(size_t n, const char *label, const struct bench_queue_ops *ops,
			const char *phase)
{
	bench_progress("kairos-bench wheel: N=%zu %s %s %s", n, label, ops->name, phase);
}

/* All phases of one run on one structure, with its own fresh records. */
static void wb_run_queue(const struct bench_queue_ops *ops, const struct wb_workload *wl,
			 const struct wb_opts *o, const char *label, double ns[WB_NPHASES],
			 double *extra)
{
	size_t n = wl->n;
	char *recs = bench_alloc(n * ops->rec_size);
	void *q = ops->create(n, 0);

	*extra = 0;

	wb_progress(n, label, ops, "add");
	ns[WB_ADD] = wb_add_all(ops, q, recs, wl->add_order, wl->add_deadline, wl->add_slack, n);
	wb_expect(ops, q, n, "add", o->verify, n, extra);

	wb_progress(n, label, ops, "cancel");
	ns[WB_CANCEL] = wb_cancel_all(ops, q, recs, wl->cancel_order, n);
	wb_expect(ops, q, 0, "cancel", o->verify, n, extra);

	/* Untimed: N pending again, for the pushes. */
	wb_add_all(ops, q, recs, wl->add_order, wl->add_deadline, wl->add_slack, n);
	wb_expect(ops, q, n, "re-add", o->verify, n, extra);

	wb_progress(n, label, ops, "push-later");
	ns[WB_LATER] = wb_update_all(ops, q, recs, wl->later_order, wl->later_deadline, n);
	wb_expect(ops, q, n, "push-later", o->verify, n, extra);

	wb_progress(n, label, ops, "push-earlier");
	ns[WB_EARLIER] = wb_update_all(ops, q, recs, wl->earlier_order,
				       wl->earlier_deadline, n);
	wb_expect(ops, q, n, "push-earlier", o->verify, n, extra);

	wb_progress(n, label, ops, "expire-pushed");
	ns[WB_EXPIRE_PUSHED] = wb_expire_all(ops, q, n, wl->pushed_sum, "expire-pushed");
	wb_expect(ops, q, 0, "expire-pushed", o->verify, n, extra);
	ops->destroy(q);

	/* Every record has fired, so all are free: reuse them on a fresh structure. */
	q = ops->create(n, 0);
	wb_add_all(ops, q, recs, wl->add_order, wl->add_deadline, wl->add_slack, n);
	wb_expect(ops, q, n, "fresh add", o->verify, n, extra);
	wb_progress(n, label, ops, "expire");
	ns[WB_EXPIRE] = wb_expire_all(ops, q, n, wl->add_sum, "expire");
	wb_expect(ops, q, 0, "expire", o->verify, n, extra);
	ops->destroy(q);

	/* Last, as they scribble on the records. */
	wb_progress(n, label, ops, "touch");
	ns[WB_TOUCH] = wb_touch_all(ops, recs, wl->cancel_order, n);
	wb_progress(n, label, ops, "chase");
	ns[WB_CHASE] = wb_chase_all(ops, recs, wl->earlier_order, n);

	free(recs);
}

/* @extra: the median over the runs of the most it allocated, per timer. */
static double wb_bytes_per_timer(const struct bench_queue_ops *ops, size_t n, double extra)
{
	return (double)(ops->rec_size + ops->slot_size) + (double)ops->fixed_size / (double)n +
	       extra;
}

static void wb_print_row(const struct bench_table *t, const char *op, double a, double b,
			 const char *goal)
{
	char ac[32], bc[32], ratio[32];

	snprintf(ac, sizeof(ac), "%.1f", a);
	snprintf(bc, sizeof(bc), "%.1f", b);
	snprintf(ratio, sizeof(ratio), "%.2fx", b / a);
	bench_row(t, (const char *const[]){ op, ac, bc, ratio, goal }, false);
}

static void wb_print_table(const struct wb_opts *o, size_t n, double med[WB_NQUEUES][WB_NPHASES],
			   const double extra[WB_NQUEUES])
{
	const struct bench_table t = { o->b.markdown, "%-15s %9s %9s %11s  %s" };
	const char *a = wb_queues[0]->name, *b = wb_queues[1]->name;
	char goal[32], ratio[32], slack[32] = "";

	if (o->slack_pct > 0)
		snprintf(slack, sizeof(slack), " slack=%g%%", o->slack_pct);
	bench_title(&t, "N=%zu runs=%u seed=%" PRIu64 "%s (median ns per op)", n, o->b.runs,
		    o->b.seed, slack);
	snprintf(ratio, sizeof(ratio), "%s/%s", b, a);
	bench_row(&t, (const char *const[]){ "op", a, b, ratio, "goal" }, true);
	for (int p = 0; p < WB_NPHASES; p++) {
		bench_goal_le(goal, sizeof(goal), wb_phases[p].goal, med[0][p], n == WB_GOAL_N);
		wb_print_row(&t, wb_phases[p].name, med[0][p], med[1][p], goal);
	}
	bench_goal_le(goal, sizeof(goal), WB_GOAL_BYTES,
		      wb_bytes_per_timer(wb_queues[0], n, extra[0]), n == WB_GOAL_N);
	wb_print_row(&t, "bytes/timer", wb_bytes_per_timer(wb_queues[0], n, extra[0]),
		     wb_bytes_per_timer(wb_queues[1], n, extra[1]), goal);
	printf("\n");
	fflush(stdout);
}

/* Once, above the tables: what the rows mean, so a pasted table explains itself. */
static void wb_print_legend(const struct wb_opts *o)
{
	const char *pre = o->b.markdown ? "" : "# ";
	char slack[64] = "slack 0";

	if (o->slack_pct > 0)
		snprintf(slack, sizeof(slack), "wheel slack %g%% of the delay (heap exact)",
			 o->slack_pct);
	printf("%sworkload: deadlines U[1,%u] ticks ahead, %s; push-later +U[1,%u], "
	       "push-earlier -U[1,%u] (stays > 0);\n", pre, WB_SPAN, slack, WB_PUSH, WB_PUSH);
	printf("%srecords in one array, used in a random order per phase; "
	       "expire steps next() to next() until all fired,\n", pre);
	printf("%sexpire-pushed does so after the pushes; heap: binary min-heap of "
	       "pointers, (deadline, seq) keys, position in record;\n", pre);
	printf("%sfloors: touch = one random read-modify-write per record, "
	       "chase = one dependent miss per record;\n", pre);
	printf("%sbytes: record + per-record slot + structure / N, and for the wheel its slots' "
	       "logs at their largest after any phase.\n\n", pre);
}

static void wb_bench_size(const struct wb_opts *o, size_t n)
{
	double (*ns)[WB_NPHASES][WB_NQUEUES];	/* [run][phase][queue] */
	double (*extra)[WB_NQUEUES];		/* [run][queue], bytes per timer */
	double med[WB_NQUEUES][WB_NPHASES], extra_med[WB_NQUEUES];
	struct wb_workload wl;

	ns = bench_alloc(o->b.runs * sizeof(*ns));
	extra = bench_alloc(o->b.runs * sizeof(*extra));
	wb_workload_alloc(&wl, n, o->slack_pct > 0);
	/*
	 * Warm-up runs come first and are thrown away: the first run of each
	 * size is much slower than the rest here (fresh memory from the kernel,
	 * and under a hypervisor from the host), which no long-running server
	 * sees.  Runs are numbered from the first timed one.
	 */
	for (int run = -(int)o->b.warmup; run < (int)o->b.runs; run++) {
		struct bench_run br = bench_run_at(run, o->b.warmup, o->b.runs, o->b.seed, n);
		double one[WB_NPHASES], one_extra;

		bench_progress("kairos-bench wheel: N=%zu %s generating workload", n, br.label);
		wb_workload_generate(&wl, br.seed, o->slack_pct);
		/* Take turns going first, so neither always meets a cold cache. */
		for (unsigned int k = 0; k < WB_NQUEUES; k++) {
			unsigned int qi = (br.idx + k) % WB_NQUEUES;

			wb_run_queue(wb_queues[qi], &wl, o, br.label, one, &one_extra);
			for (int p = 0; p < WB_NPHASES && run >= 0; p++)
				ns[br.idx][p][qi] = one[p];
			if (run >= 0)
				extra[br.idx][qi] = one_extra;
		}
	}
	bench_progress_done();
	/* --raw: every run's numbers, to see the spread behind a median. */
	if (o->b.raw)
		printf("kairos-bench wheel: N=%zu, ns per op in each run (%s first in even runs)\n",
		       n, wb_queues[0]->name);
	for (unsigned int qi = 0; qi < WB_NQUEUES; qi++) {
		for (int p = 0; p < WB_NPHASES; p++) {
			if (o->b.raw) {
				printf("%-6s %-15s", wb_queues[qi]->name, wb_phases[p].name);
				bench_raw_runs(&ns[0][p][qi], WB_NPHASES * WB_NQUEUES, o->b.runs, 8,
					       1, 1);
			}
			med[qi][p] = bench_aggregate(BENCH_MEDIAN, &ns[0][p][qi],
						     WB_NPHASES * WB_NQUEUES, o->b.runs);
		}
		extra_med[qi] = bench_aggregate(BENCH_MEDIAN, &extra[0][qi], WB_NQUEUES,
						o->b.runs);
	}
	if (o->b.raw)
		printf("\n");
	wb_print_table(o, n, med, extra_med);
	wb_workload_free(&wl);
	free(extra);
	free(ns);
}

/*
 * --verify: a randomized differential test, wheel against heap.  Both get
 * the same adds, cancels, updates (earlier and later, slack kept) and time
 * steps, from a few ticks to 2^44 ticks, across 2^48-tick overflow
 * boundaries; deadlines reach up to 2^50 ahead and to UINT64_MAX.  The heap
 * is keyed by the wheel's fire tick, so after each advance both must pop the
 * same set, and each call must return the same.  Both invariant checkers
 * run after every step.
 */
#define WB_VERIFY_RECS	1000u
#define WB_VERIFY_STEPS	200000u

/* Delays spanning every level: mostly short, some far, a few vast. */
static uint64_t wb_verify_delay(struct rng *r)
{
	uint32_t p = rng_below(r, 100);

	if (p < 60)
		return rng_next(r) % 4097;
	if (p < 85)
		return rng_next(r) % ((UINT64_C(1) << 20) + 1);
	if (p < 95)
		return rng_next(r) % ((UINT64_C(1) << 36) + 1);
	return rng_next(r) % ((UINT64_C(1) << 50) + 1);
}

static uint64_t wb_verify_deadline(struct rng *r, uint64_t now)
{
	/* The far end of time: must neither fire early nor overflow. */
	if (rng_below(r, 100) == 0)
		return UINT64_MAX - rng_next(r) % 100000;
	return now + wb_verify_delay(r);
}

static int wb_cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

struct wb_verify {
	struct wheel *w;
	struct heap *h;
	struct wheel_timer *wt;
	struct heap_timer *ht;
	uint32_t *wfired;
	uint32_t *hfired;
	uint64_t now;
	uint64_t last_fire;	/* fire tick of the last record the wheel popped */
	unsigned int step;
};

__attribute__((format(printf, 2, 3), noreturn))
static void wb_verify_fail(const struct wb_verify *v, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	bench_die("verify: step %u, tick %" PRIu64 ": %s", v->step, v->now, msg);
}

static void wb_verify_advance(struct wb_verify *v, uint64_t to)
{
	uint64_t ndue = v->w->ndue, became, nw = 0, nh = 0;
	struct wheel_timer *t;
	struct heap_timer *x;

	v->now = to;
	became = wheel_advance(v->w, to);
	while ((t = wheel_pop(v->w)) != NULL) {
		uint64_t fire = wheel_fire_tick(t->deadline, t->slack);

		if (t->deadline > to)
			wb_verify_fail(v, "wheel fired deadline %" PRIu64 " early", t->deadline);
		if (fire < t->deadline || fire - t->deadline > t->slack)
			wb_verify_fail(v, "fire tick %" PRIu64 " outside deadline %" PRIu64
				       " + slack %" PRIu32, fire, t->deadline, t->slack);
		if (fire < v->last_fire)
			wb_verify_fail(v, "wheel fired out of fire-tick order");
		if (wheel_timer_pending(t))
			wb_verify_fail(v, "popped record still pending");
		v->last_fire = fire;
		if (nw == WB_VERIFY_RECS)
			wb_verify_fail(v, "wheel popped more records than exist");
		v->wfired[nw++] = (uint32_t)(t - v->wt);
	}
	while ((x = heap_min(v->h)) != NULL && x->deadline <= to) {
		heap_pop(v->h);
		v->hfired[nh++] = (uint32_t)(x - v->ht);
	}
	if (nw != ndue + became)
		wb_verify_fail(v, "popped %" PRIu64 ", but %" PRIu64 " were due and "
			       "wheel_advance() said %" PRIu64 " became due", nw, ndue, became);
	if (nw != nh)
		wb_verify_fail(v, "wheel fired %" PRIu64 ", heap %" PRIu64, nw, nh);
	qsort(v->wfired, nw, sizeof(uint32_t), wb_cmp_u32);
	qsort(v->hfired, nh, sizeof(uint32_t), wb_cmp_u32);
	if (memcmp(v->wfired, v->hfired, nw * sizeof(uint32_t)) != 0)
		wb_verify_fail(v, "wheel and heap fired different records");
}

static void wb_verify_step(struct wb_verify *v, struct rng *r)
{
	uint32_t i = rng_below(r, WB_VERIFY_RECS), op = rng_below(r, 100);
	struct wheel_timer *t = &v->wt[i];
	struct heap_timer *x = &v->ht[i];
	int rw, rh;

	if (op < 40) {
		uint64_t d = wb_verify_deadline(r, v->now);
		uint32_t slack = 0;

		if (rng_below(r, 10) < 3)
			slack = (uint32_t)(rng_next(r) % ((d - v->now) / 8 + 1));
		rw = wheel_add(v->w, t, d, slack);
		/* The heap models the wheel's choice of fire tick. */
		rh = heap_add(v->h, x, wheel_fire_tick(d, slack));
	} else if (op < 55) {
		rw = wheel_del(v->w, t);
		rh = heap_del(v->h, x);
	} else if (op < 80) {
		uint64_t d = wb_verify_deadline(r, v->now);

		rw = wheel_update(v->w, t, d);
		rh = heap_update(v->h, x, wheel_fire_tick(d, t->slack));
	} else {
		uint64_t to, next = wheel_next(v->w);
		uint32_t how = rng_below(r, 100);

		if (heap_min(v->h) && next > heap_min(v->h)->deadline)
			wb_verify_fail(v, "wheel_next() %" PRIu64 " is after the earliest "
				       "fire tick %" PRIu64, next, heap_min(v->h)->deadline);
		if (!heap_min(v->h) && next != UINT64_MAX)
			wb_verify_fail(v, "wheel_next() %" PRIu64 " on an empty wheel", next);
		if (how < 50)
			to = v->now + rng_below(r, 65);
		else if (how < 75)
			to = v->now + rng_below(r, 5000);
		else if (how < 90)
			to = v->now + rng_next(r) % 300000;
		else if (how < 97)
			to = next < v->now + (UINT64_C(1) << 44) ? next : v->now;
		else
			to = v->now + rng_next(r) % (UINT64_C(1) << 44);
		wb_verify_advance(v, to);
		rw = rh = 0;
	}
	if (rw != rh)
		wb_verify_fail(v, "record %" PRIu32 ": wheel returned %d, heap %d", i, rw, rh);
	if (wheel_timer_pending(t) != (x->pos != 0))
		wb_verify_fail(v, "record %" PRIu32 ": pending in one, not the other", i);
}

static void wb_verify_check(const struct wb_verify *v)
{
	const char *why = NULL;

	if (wheel_check(v->w, &why) != 0)
		wb_verify_fail(v, "wheel_check: %s", why ? why : "failed");
	if (heap_check(v->h, &why) != 0)
		wb_verify_fail(v, "heap_check: %s", why ? why : "failed");
	if (wheel_count(v->w) != v->h->len)
		wb_verify_fail(v, "wheel holds %" PRIu64 ", heap %zu",
			       wheel_count(v->w), v->h->len);
}

static void wb_verify(const struct wb_opts *o)
{
	struct rng r = { o->b.seed ^ UINT64_C(0x5eed) };
	struct wb_verify v = { 0 };

	/* Start a little before a 2^48 boundary, so the overflow list turns. */
	v.now = (UINT64_C(1) << 48) - 1 - rng_next(&r) % (UINT64_C(1) << 40);
	v.w = bench_alloc(sizeof(*v.w));
	wheel_init(v.w, v.now);
	v.h = heap_create(WB_VERIFY_RECS);
	v.wt = bench_alloc(WB_VERIFY_RECS * sizeof(*v.wt));
	v.ht = bench_alloc(WB_VERIFY_RECS * sizeof(*v.ht));
	v.wfired = bench_alloc(WB_VERIFY_RECS * sizeof(uint32_t));
	v.hfired = bench_alloc(WB_VERIFY_RECS * sizeof(uint32_t));
	v.last_fire = v.now;

	for (v.step = 0; v.step < WB_VERIFY_STEPS; v.step++) {
		if (v.step % 4096 == 0)
			bench_progress("kairos-bench wheel: verify step %u/%u",
				       v.step, WB_VERIFY_STEPS);
		wb_verify_step(&v, &r);
		wb_verify_check(&v);
	}
	/* The end of time: everything, UINT64_MAX fire ticks included, fires. */
	wb_verify_advance(&v, UINT64_MAX);
	wb_verify_check(&v);
	if (wheel_count(v.w) != 0)
		wb_verify_fail(&v, "%" PRIu64 " records left at UINT64_MAX", wheel_count(v.w));
	bench_progress_done();
	printf("kairos-bench wheel: verify: %u random steps, wheel and heap agree, "
	       "both checkers pass\n\n", WB_VERIFY_STEPS);

	wheel_fini(v.w);
	free(v.w);
	heap_destroy(v.h);
	free(v.wt);
	free(v.ht);
	free(v.wfired);
	free(v.hfired);
}

static void wb_usage(FILE *f)
{
	fprintf(f,
		"usage: kairos-bench wheel [--n N]... [--runs N] [--seed S] [--markdown]\n"
		"                          [--warmup N] [--slack PCT] [--verify] [--raw]\n"
		"\n"
		"The timing wheel against a binary heap, one thread, virtual time, through\n"
		"one ops table; median ns per op over the runs, both in the same run.\n"
		"Deadlines U[1,%u] ticks; pushes move U[1,%u] ticks; slack 0 unless --slack.\n"
		"\n"
		"  --n N        pending timers (1..%u, 1e6 style allowed); repeat for\n"
		"               more sizes (default: 100000 and 1000000)\n"
		"  --runs N     runs per size, median reported (default 5)\n"
		"  --warmup N   untimed runs per size before those (default 1)\n"
		"  --seed S     workload seed (default 1)\n"
		"  --slack PCT  give each wheel timer a slack of PCT%% of its delay\n"
		"               (0..100, e.g. 12.5 as Linux; default 0: exact); the\n"
		"               heap stays exact\n"
		"  --markdown   print the tables as markdown\n"
		"  --verify     first a differential test of wheel against heap, then\n"
		"               both invariant checkers after every benchmark phase\n"
		"  --raw        also print every run's numbers, not only the medians\n"
		"  -h, --help   this text\n"
		"\n"
		"Goals (met/MISSED) are judged at N=%u only.\n",
		WB_SPAN, WB_PUSH, WB_MAX_N, WB_GOAL_N);
}


/* @argv[0] is "wheel". */
int wb_main(int argc, char **argv)
{
	static const struct option longopts[] = {
		BENCH_OPT_N, BENCH_OPT_RUNS, BENCH_OPT_WARMUP, BENCH_OPT_SEED,
		BENCH_OPT_MARKDOWN, BENCH_OPT_RAW, BENCH_OPT_HELP,
		{ "verify", no_argument, NULL, 'v' },
		{ "slack", required_argument, NULL, 'S' },
		{ NULL, 0, NULL, 0 },
	};
	struct wb_opts o = { .b = { .runs = 5, .warmup = 1, .seed = 1 } };
	int c;

	bench_opt_start("wheel");
	while ((c = opt_next(argc, argv, "h", longopts)) != -1) {
		if (bench_opt(c, &o.b, 1, WB_MAX_N))
			continue;
		switch (c) {
		case 'v':
			o.verify = true;
			break;
		case 'S':
			o.slack_pct = opt_double("--slack", optarg, 0, 100);
			break;
		case 'h':
			wb_usage(stdout);
			return 0;
		}
	}
	if (!o.b.nsizes) {
		o.b.sizes[o.b.nsizes++] = 100000;
		o.b.sizes[o.b.nsizes++] = 1000000;
	}

	bench_warn_unoptimized();
	wb_print_legend(&o);
	if (o.verify)
		wb_verify(&o);
	for (unsigned int i = 0; i < o.b.nsizes; i++)
		wb_bench_size(&o, o.b.sizes[i]);
	return 0;
}
