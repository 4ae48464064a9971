/* SPDX-License-Identifier: MIT */
/*
 * stress_load.c - the load of kairos-stress and what it checks per timer.
 *
 * Each load thread owns the slots [lo, hi) of the table and loops: pick an
 * operation by the mix, pick a slot, call the library, and check the answer
 * against what the slot says about its timer.  A slot holds one timer at a
 * time; when the owner knows the timer has ended (its callback returned, or
 * a cancel said so) the slot goes to the back of the thread's free queue and
 * is reused later for a new timer, in a new epoch.  The ids of ended timers
 * stay in their slots, so cancels and resets aimed at them test stale ids.
 *
 * What is checked, per timer:
 *  - it ends exactly once: its callback runs (one-shot), a cancel returns 0,
 *    a periodic timer is stopped while running, or kairos_destroy() drains
 *    it; runs + cancel successes + drains == 1;
 *  - never early: a one-shot callback starts no sooner than the bound of the
 *    last arm or reset that returned 0 (the clock read before that call plus
 *    its delay); call k of a periodic timer covering s periods starts no
 *    sooner than the first deadline plus (k + s - 1) periods;
 *  - nothing after a cancel returned 0, nothing after cancel_sync returned,
 *    no second run of a one-shot timer, no call for an ended timer (a
 *    callback of an old epoch), no callback running concurrently with
 *    itself;
 *  - the return values agree with the timer's state as far as the owner can
 *    know it (0 from a call on an ended timer is a violation; -ENOENT from
 *    cancel means the callback has returned; -EBUSY never comes from a
 *    one-shot reset; ...).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "stress.h"

const char *const mix_names[M_N] = {
	[M_RESET] = "reset",
	[M_CANCEL] = "cancel",
	[M_ARM] = "arm",
	[M_SYNC] = "sync",
	[M_PERIODIC] = "periodic",
};

const char *const api_names[A_N] = {
	[A_ARM] = "kairos_arm",
	[A_ARM_EVERY] = "kairos_arm_every",
	[A_RESET] = "kairos_reset",
	[A_CANCEL] = "kairos_cancel",
	[A_CANCEL_SYNC] = "kairos_cancel_sync",
};

const char *const viol_names[V_N] = {
	[V_EARLY] = "callback started before its deadline",
	[V_TWICE] = "one-shot timer ran twice, or ran and was cancelled",
	[V_AFTER_CANCEL] = "callback after a cancel returned 0",
	[V_AFTER_STOP] = "callback after cancel/cancel_sync said it would not run",
	[V_AFTER_END] = "callback of a timer that had ended",
	[V_LOST] = "timer never ended, or ended twice",
	[V_STALE_OK] = "call on an ended timer's id succeeded",
	[V_RC] = "unexpected return value",
	[V_CONCURRENT] = "callback ran concurrently with itself",
	[V_CALLBACK] = "callback got a bad status or id",
	[V_STALL] = "timer late by more than --max-late (ran that late, or due and not run)",
	[V_COUNTERS] = "library counters disagree with the tool's tallies",
	[V_API] = "API contract (after destroy, backend info)",
};

struct viol_class viols[V_N];
static pthread_mutex_t viol_lock = PTHREAD_MUTEX_INITIALIZER;

struct stress S;

void violation(enum viol v, const char *fmt, ...)
{
	uint64_t n = atomic_fetch_add_explicit(&viols[v].count, 1, memory_order_relaxed);
	va_list ap;

	if (n >= VIOL_EXAMPLES)
		return;
	/* Rare: a lock keeps the examples whole for the report. */
	pthread_mutex_lock(&viol_lock);
	va_start(ap, fmt);
	vsnprintf(viols[v].example[n], sizeof(viols[v].example[n]), fmt, ap);
	va_end(ap);
	pthread_mutex_unlock(&viol_lock);
}

uint64_t violations_total(void)
{
	uint64_t n = 0;

	for (unsigned v = 0; v < V_N; v++)
		n += atomic_load_explicit(&viols[v].count, memory_order_relaxed);
	return n;
}

/* The service clock, read the way a callback reads it. */
uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(S.clock, &ts);
	return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

/* kairos_now(): the clock read that a bound is taken from, before a call. */
static uint64_t service_now(void)
{
	uint64_t t;
	int rc = kairos_now(S.k, &t);

	if (rc) {
		violation(V_RC, "kairos_now returned %d while the service runs", rc);
		return now_ns();
	}
	return t;
}

/* ---- the generator (splitmix64) ----------------------------------------- */

static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));

	z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
	return z ^ (z >> 31);
}

/* Uniform in [0, @n) by multiply-shift; @n > 0. */
static uint32_t rng_below(uint64_t *s, uint32_t n)
{
	return (uint32_t)(((rng_next(s) >> 32) * n) >> 32);
}

static uint64_t rng_range(uint64_t *s, const struct range_ns *r)
{
	if (r->hi <= r->lo)
		return r->lo;
	return r->lo + rng_next(s) % (r->hi - r->lo + 1);
}

/* ---- callbacks ---------------------------------------------------------- */

static struct cb_stripe *stripe(void)
{
	static _Atomic unsigned next;
	static _Thread_local unsigned mine;

	if (!mine)
		mine = atomic_fetch_add_explicit(&next, 1, memory_order_relaxed) % CB_STRIPES + 1;
	return &S.cb[mine - 1];
}

static void *slot_arg(uint32_t idx, uint32_t epoch)
{
	return (void *)(uintptr_t)((uint64_t)epoch << 32 | idx);
}

static uint32_t cur_epoch(uint64_t cur)
{
	return (uint32_t)(cur >> 32);
}

#define F_PREV_PERIODIC	0x04ull	/* the previous epoch's timer was periodic */
#define F_CANCELLED	0x08ull	/* a cancel returned 0 for this epoch's timer */
#define F_SLOW		0x10ull	/* its callback sleeps --slow-time: -EBUSY, cancel_sync waits */

static const char *end_name(unsigned e)
{
	static const char *const names[] = {
		[E_NONE] = "had ended",
		[E_FIRED] = "had run (one-shot)",
		[E_CANCELLED] = "had been cancelled (a cancel returned 0)",
		[E_STOPPED] = "had been stopped (cancel_sync returned)",
		[E_DRAINED] = "had been drained",
	};

	return e < sizeof(names) / sizeof(names[0]) ? names[e] : "had ended";
}

/* A call for an epoch that is not the slot's current one: its timer ended. */
static void stale_call(struct cb_stripe *cs, uint32_t idx, uint32_t epoch, uint64_t cur,
		       kairos_id id, int status)
{
	unsigned prev = (unsigned)(cur >> F_PREV_SHIFT) & 0xff;
	bool last = epoch + 1 == cur_epoch(cur);
	enum viol v = V_AFTER_END;

	/* Count it where the library does, so the cross-check stays meaningful. */
	if (status == -ECANCELED)
		atomic_fetch_add_explicit(&cs->drained, 1, memory_order_relaxed);
	else if (last && (cur & F_PREV_PERIODIC))
		atomic_fetch_add_explicit(&cs->periodic, 1, memory_order_relaxed);
	else
		atomic_fetch_add_explicit(&cs->oneshot, 1, memory_order_relaxed);
	if (last && prev == E_CANCELLED)
		v = V_AFTER_CANCEL;
	else if (last && prev == E_FIRED)
		v = V_TWICE;
	else if (last && prev == E_STOPPED)
		v = V_AFTER_STOP;
	violation(v, "slot %" PRIu32 ": callback (status %d) of timer %#" PRIx64
		  " (epoch %" PRIu32 ") after that timer %s; the slot is at epoch %" PRIu32,
		  idx, status, id, epoch, last ? end_name(prev) : "had ended", cur_epoch(cur));
}

static void stall(uint32_t idx, kairos_id id, const char *kind, uint64_t late)
{
	char buf[32];

	fmt_ns(buf, sizeof(buf), late);
	violation(V_STALL, "slot %" PRIu32 ": %s timer %#" PRIx64 " ran %s after its deadline",
		  idx, kind, id, buf);
}

/* A slow callback: long enough for cancels to find it running. */
static void slow_sleep(void)
{
	struct timespec ts = {
		(time_t)(S.cfg.slow_ns / NS_PER_S), (long)(S.cfg.slow_ns % NS_PER_S)
	};

	nanosleep(&ts, NULL);
}

/*
 * on_timer - the callback of every timer: cheap, a handful of atomics on the
 * timer's own slot and on the calling thread's stripe.
 */
void on_timer(void *arg, kairos_id id, int status)
{
	uint64_t now = now_ns();
	uint64_t a = (uint64_t)(uintptr_t)arg;
	uint32_t idx = (uint32_t)a, epoch = (uint32_t)(a >> 32);
	struct slot *s = &S.slots[idx];
	struct cb_stripe *cs = stripe();
	/* Acquire pairs with the owner's release before the arm and after a cancel. */
	uint64_t cur = atomic_load_explicit(&s->cur, memory_order_acquire);
	bool periodic = cur & F_PERIODIC;
	uint64_t c, t0, p, first, last;

	if (cur_epoch(cur) != epoch) {
		stale_call(cs, idx, epoch, cur, id, status);
		return;
	}
	if (id != s->id)
		violation(V_CALLBACK, "slot %" PRIu32 ": callback got id %#" PRIx64
			  ", the arm returned %#" PRIx64, idx, id, s->id);
	if (status == -ECANCELED) {
		atomic_fetch_add_explicit(&cs->drained, 1, memory_order_relaxed);
		if (atomic_fetch_add_explicit(&s->drains, 1, memory_order_relaxed))
			violation(V_LOST, "slot %" PRIu32 ": timer %#" PRIx64 " drained twice",
				  idx, id);
		if (cur & (F_CANCELLED | F_NO_START))
			violation(cur & F_CANCELLED ? V_AFTER_CANCEL : V_AFTER_STOP,
				  "slot %" PRIu32 ": timer %#" PRIx64 " drained after %s", idx, id,
				  cur & F_CANCELLED ? "a cancel returned 0"
						    : "a cancel said it had ended");
		return;
	}
	if (periodic) {
		atomic_fetch_add_explicit(&cs->periodic, 1, memory_order_relaxed);
	} else {
		atomic_fetch_add_explicit(&cs->oneshot, 1, memory_order_relaxed);
	}
	if (status < 1 || (!periodic && status != 1))
		violation(V_CALLBACK, "slot %" PRIu32 ": %s timer %#" PRIx64 " called with status %d",
			  idx, periodic ? "periodic" : "one-shot", id, status);
	if (cur & (F_CANCELLED | F_NO_START))
		violation(cur & F_CANCELLED ? V_AFTER_CANCEL : V_AFTER_STOP,
			  "slot %" PRIu32 ": %s timer %#" PRIx64 " started after %s", idx,
			  periodic ? "periodic" : "one-shot", id,
			  cur & F_CANCELLED ? "a cancel returned 0" : "cancel_sync returned");
	/* Acquire pairs with the release of the previous call's end. */
	if (atomic_exchange_explicit(&s->running, 1, memory_order_acquire))
		violation(V_CONCURRENT, "slot %" PRIu32 ": timer %#" PRIx64
			  " called while its previous call runs", idx, id);
	/*
	 * Release: the library marked the timer running before this; an owner
	 * that sees the count (acquire) and then calls reset or cancel must get
	 * an answer for a started callback, never 0.
	 */
	if (atomic_fetch_add_explicit(&s->runs, 1, memory_order_release) && !periodic)
		violation(V_TWICE, "slot %" PRIu32 ": one-shot timer %#" PRIx64 " ran twice", idx, id);
	if (cur & F_SLOW)
		slow_sleep();
	if (!periodic) {
		atomic_store_explicit(&s->start_ns, now, memory_order_relaxed);
		atomic_store_explicit(&s->running, 0, memory_order_relaxed);
		/* Release: start_ns and runs before the owner sees done. */
		atomic_store_explicit(&s->done, 1, memory_order_release);
		return;
	}
	/*
	 * Acquire pairs with the owner's release after a reset.  While the
	 * owner resets the timer (odd), this call may belong to the old
	 * schedule or the new one: it is neither checked nor counted, which
	 * only weakens later checks.  A reset cannot succeed while this call
	 * runs, so the schedule does not change under it.
	 */
	if (atomic_load_explicit(&s->sched, memory_order_acquire) & 1) {
		atomic_store_explicit(&s->running, 0, memory_order_release);
		return;
	}
	/* Calls of one periodic timer never overlap: covered is this call's alone. */
	c = atomic_load_explicit(&s->covered, memory_order_relaxed);
	t0 = atomic_load_explicit(&s->t0, memory_order_relaxed);
	p = atomic_load_explicit(&s->period, memory_order_relaxed);
	first = t0 + (c + 1) * p;
	last = t0 + (c + (uint64_t)(status > 0 ? status : 1)) * p;
	if (now < last) {
		char early[32];

		fmt_ns(early, sizeof(early), last - now);
		violation(V_EARLY, "slot %" PRIu32 ": periodic timer %#" PRIx64 " (period %" PRIu64
			  " ns) call covering periods %" PRIu64 "..%" PRIu64 " started %s early",
			  idx, id, p, c + 1, c + (uint64_t)status, early);
	} else {
		lhist_add(&cs->late, now - first);
		if (now - first > S.cfg.max_late_ns)
			stall(idx, id, "periodic", now - first);
	}
	if (status > 0) {
		atomic_store_explicit(&s->covered, c + (uint64_t)status, memory_order_relaxed);
		atomic_fetch_add_explicit(&cs->periods, (uint64_t)status, memory_order_relaxed);
	}
	/* Release: this call's effects before the next call (or cancel_sync) sees it ended. */
	atomic_store_explicit(&s->running, 0, memory_order_release);
}

/* ---- a thread's lists ---------------------------------------------------- */

static void list_add(uint32_t *list, uint32_t *n, uint32_t idx)
{
	S.slots[idx].pos = *n;
	list[(*n)++] = idx;
}

static void list_del(uint32_t *list, uint32_t *n, uint32_t idx)
{
	uint32_t pos = S.slots[idx].pos, last = list[--*n];

	list[pos] = last;
	S.slots[last].pos = pos;
}

/* Free slots go to the back: a slot is reused as late as possible. */
static void fq_push(struct lthread *t, uint32_t idx)
{
	uint32_t n = t->hi - t->lo;

	t->fq[(t->fq_head + t->fq_len) % n] = idx;
	t->fq_len++;
}

static bool fq_pop(struct lthread *t, uint32_t *idx)
{
	if (!t->fq_len)
		return false;
	*idx = t->fq[t->fq_head];
	t->fq_head = (t->fq_head + 1) % (t->hi - t->lo);
	t->fq_len--;
	return true;
}

static void count(struct lthread *t, enum api_call a, int rc)
{
	uint64_t n = atomic_load_explicit(&t->ops[a], memory_order_relaxed);

	/* Single writer: a plain increment the main thread may read at any time. */
	atomic_store_explicit(&t->ops[a], n + 1, memory_order_relaxed);
	t->rc[a][rc == 0 ? RC_OK : rc == -ENOENT ? RC_ENOENT : rc == -EBUSY ? RC_EBUSY : RC_OTHER]++;
}

/* ---- ending timers -------------------------------------------------------- */

static void slot_free(struct lthread *t, uint32_t idx, enum slot_end end)
{
	struct slot *s = &S.slots[idx];

	if (s->kind == K_ONESHOT)
		list_del(t->live, &t->nlive, idx);
	else if (s->kind == K_PERIODIC)
		list_del(t->per, &t->nper, idx);
	s->kind = K_FREE;
	s->oflags = 0;
	s->last_end = (uint8_t)end;
	t->t.checked++;
	fq_push(t, idx);
}

/* Checks the one run of one-shot timer @idx: once, not early, not stalled; records its lateness. */
static void check_run(struct lthread *t, uint32_t idx)
{
	struct slot *s = &S.slots[idx];
	uint32_t runs = atomic_load_explicit(&s->runs, memory_order_relaxed);
	uint32_t drains = atomic_load_explicit(&s->drains, memory_order_relaxed);
	uint64_t start = atomic_load_explicit(&s->start_ns, memory_order_relaxed);

	if (runs != 1 || drains)
		violation(V_LOST, "slot %" PRIu32 ": one-shot timer %#" PRIx64
			  " ended %" PRIu32 " times by running and %" PRIu32 " by draining",
			  idx, s->id, runs, drains);
	if (start < s->bound) {
		char early[32];

		fmt_ns(early, sizeof(early), s->bound - start);
		violation(V_EARLY, "slot %" PRIu32 ": one-shot timer %#" PRIx64
			  " started %s before the deadline of its last successful arm/reset",
			  idx, s->id, early);
	} else {
		lhist_add(&t->late, start - s->bound);
		if (start - s->bound > S.cfg.max_late_ns)
			stall(idx, s->id, "one-shot", start - s->bound);
	}
}

/*
 * A reset or cancel returned 0 at @now for timer @idx, due at @due: it was
 * still pending.  Past its deadline by more than a tick, the service is
 * behind; by more than --max-late, it has stalled.
 */
static void pending_late(struct lthread *t, uint32_t idx, const char *call, uint64_t now,
			 uint64_t due)
{
	uint64_t late;
	char buf[32];

	if (now <= due + S.cfg.tick_ns)
		return;
	late = now - due;
	t->t.late_pending++;
	atomic_store_explicit(&t->late_pending, t->t.late_pending, memory_order_relaxed);
	if (late > t->t.late_pending_max)
		t->t.late_pending_max = late;
	if (late <= S.cfg.max_late_ns)
		return;
	fmt_ns(buf, sizeof(buf), late);
	violation(V_STALL, "slot %" PRIu32 ": %s returned 0 for timer %#" PRIx64 " %s after its"
		  " deadline: it was still pending, not run", idx, call, S.slots[idx].id, buf);
}

/* The deadline of periodic timer @s's next run, as far as the owner knows. */
static uint64_t periodic_due(struct slot *s)
{
	return atomic_load_explicit(&s->t0, memory_order_relaxed) +
	       (atomic_load_explicit(&s->covered, memory_order_relaxed) + 1) *
	       atomic_load_explicit(&s->period, memory_order_relaxed);
}

/* A timer drained at destroy that was due at @due: how long it had waited. */
static void check_overdue(struct lthread *t, uint32_t idx, uint64_t due)
{
	uint64_t late;
	char buf[32];

	if (due >= S.destroy_start)
		return;
	late = S.destroy_start - due;
	t->t.overdue++;
	if (late > t->t.overdue_max)
		t->t.overdue_max = late;
	if (late <= S.cfg.max_late_ns)
		return;
	fmt_ns(buf, sizeof(buf), late);
	violation(V_STALL, "slot %" PRIu32 ": timer %#" PRIx64 " was due %s before kairos_destroy"
		  " and had not run", idx, S.slots[idx].id, buf);
}

/* A one-shot timer whose callback has returned: it ended by firing. */
static void end_fired(struct lthread *t, uint32_t idx)
{
	check_run(t, idx);
	t->t.fired++;
	slot_free(t, idx, E_FIRED);
}

/* Ends slot @idx's one-shot timer if its callback has returned. */
static void reap(struct lthread *t, uint32_t idx)
{
	struct slot *s = &S.slots[idx];

	/* Acquire pairs with the callback's release of done. */
	if (s->kind == K_ONESHOT && atomic_load_explicit(&s->done, memory_order_acquire))
		end_fired(t, idx);
}

/* ---- the operations --------------------------------------------------------- */

/* Resets a slot's shared words for a new timer of epoch @epoch. */
static uint32_t slot_prepare(struct slot *s, bool periodic, bool slow)
{
	uint64_t old = atomic_load_explicit(&s->cur, memory_order_relaxed);
	uint32_t epoch = cur_epoch(old) + 1;

	atomic_store_explicit(&s->runs, 0, memory_order_relaxed);
	atomic_store_explicit(&s->drains, 0, memory_order_relaxed);
	atomic_store_explicit(&s->done, 0, memory_order_relaxed);
	atomic_store_explicit(&s->running, 0, memory_order_relaxed);
	atomic_store_explicit(&s->covered, 0, memory_order_relaxed);
	atomic_store_explicit(&s->start_ns, 0, memory_order_relaxed);
	/* Release: the words above before a stale callback can see the new epoch. */
	atomic_store_explicit(&s->cur, (uint64_t)epoch << 32 |
			      (uint64_t)s->last_end << F_PREV_SHIFT |
			      ((old & F_PERIODIC) ? F_PREV_PERIODIC : 0) |
			      (periodic ? F_PERIODIC : 0) | (slow ? F_SLOW : 0), memory_order_release);
	return epoch;
}

static void arm_oneshot(struct lthread *t, uint32_t idx, bool shorty)
{
	struct slot *s = &S.slots[idx];
	uint64_t delay = rng_range(&t->rng, shorty ? &S.cfg.shorts : &S.cfg.idle), before;
	uint32_t epoch = slot_prepare(s, false, shorty && rng_below(&t->rng, 100) < S.cfg.slow_pct);
	int rc;

	before = service_now();
	rc = kairos_arm(S.k, delay, on_timer, slot_arg(idx, epoch), &s->id);
	count(t, A_ARM, rc);
	if (rc) {
		violation(V_RC, "kairos_arm(%" PRIu64 " ns) returned %d (%s)", delay, rc,
			  strerror(-rc));
		s->last_end = E_NONE;
		fq_push(t, idx);
		return;
	}
	s->kind = K_ONESHOT;
	s->oflags = shorty ? O_SHORT : 0;
	s->bound = before + delay;
	list_add(t->live, &t->nlive, idx);
	t->t.arms++;
}

static void arm_periodic(struct lthread *t, uint32_t idx)
{
	struct slot *s = &S.slots[idx];
	uint64_t period = rng_range(&t->rng, &S.cfg.period), before;
	uint32_t epoch = slot_prepare(s, true, rng_below(&t->rng, 100) < S.cfg.slow_pct);
	int rc;

	before = service_now();
	atomic_store_explicit(&s->t0, before, memory_order_relaxed);
	atomic_store_explicit(&s->period, period, memory_order_relaxed);
	rc = kairos_arm_every(S.k, period, on_timer, slot_arg(idx, epoch), &s->id);
	count(t, A_ARM_EVERY, rc);
	if (rc) {
		violation(V_RC, "kairos_arm_every(%" PRIu64 " ns) returned %d (%s)", period, rc,
			  strerror(-rc));
		s->last_end = E_NONE;
		fq_push(t, idx);
		return;
	}
	s->kind = K_PERIODIC;
	s->oflags = 0;
	s->until = before + rng_range(&t->rng, &S.cfg.life);
	s->bound = before + period * (2 + rng_below(&t->rng, 19));	/* its first reset */
	list_add(t->per, &t->nper, idx);
	t->t.arms++;
	t->t.arms_periodic++;
}

/* A call on the id of a timer that has ended: -ENOENT and nothing else. */
static void stale_op(struct lthread *t, uint32_t idx, enum api_call a)
{
	struct slot *s = &S.slots[idx];
	uint64_t delay = S.cfg.idle.lo;
	int rc;

	if (a == A_RESET)
		rc = kairos_reset(S.k, s->id, delay);
	else if (a == A_CANCEL)
		rc = kairos_cancel(S.k, s->id);
	else
		rc = kairos_cancel_sync(S.k, s->id);
	count(t, a, rc);
	t->stale[a]++;
	t->t.stale++;
	if (rc == 0)
		violation(V_STALE_OK, "slot %" PRIu32 ": %s on timer %#" PRIx64
			  ", which %s, returned 0", idx, api_names[a], s->id, end_name(s->last_end));
	else if (rc == -EBUSY && a != A_RESET && s->last_end == E_FIRED)
		/*
		 * on_timer's last store is done, but the library counts the
		 * callback as running until the call has come back to it: for
		 * a moment after the reap a cancel may still say -EBUSY.
		 */
		t->rc_busy_returning++;
	else if (rc != -ENOENT)
		violation(V_RC, "slot %" PRIu32 ": %s on ended timer %#" PRIx64 " returned %d (%s)",
			  idx, api_names[a], s->id, rc, strerror(-rc));
}

static void reset_oneshot(struct lthread *t, uint32_t idx)
{
	struct slot *s = &S.slots[idx];
	uint64_t delay = rng_range(&t->rng, (s->oflags & O_SHORT) ? &S.cfg.shorts : &S.cfg.idle);
	/* Acquire pairs with the callback's increment: a run seen here came first. */
	uint32_t runs = atomic_load_explicit(&s->runs, memory_order_acquire);
	uint64_t before = service_now();
	int rc = kairos_reset(S.k, s->id, delay);

	count(t, A_RESET, rc);
	switch (rc) {
	case 0:
		if (runs || (s->oflags & O_FIRING))
			violation(V_RC, "slot %" PRIu32 ": kairos_reset of one-shot timer %#" PRIx64
				  " returned 0 after %s", idx, s->id,
				  runs ? "its callback started" : "an earlier call said it was firing");
		pending_late(t, idx, "kairos_reset", before, s->bound);
		s->bound = before + delay;
		break;
	case -ENOENT:
		/* Firing or fired: the old bound stays. */
		s->oflags |= O_FIRING;
		break;
	default:
		violation(V_RC, "slot %" PRIu32 ": kairos_reset of one-shot timer %#" PRIx64
			  " returned %d (%s)", idx, s->id, rc, strerror(-rc));
	}
}

static void cancel_oneshot(struct lthread *t, uint32_t idx, bool sync)
{
	struct slot *s = &S.slots[idx];
	const char *fn = sync ? "kairos_cancel_sync" : "kairos_cancel";
	uint32_t runs = atomic_load_explicit(&s->runs, memory_order_acquire);
	uint64_t before = now_ns();
	int rc = sync ? kairos_cancel_sync(S.k, s->id) : kairos_cancel(S.k, s->id);

	count(t, sync ? A_CANCEL_SYNC : A_CANCEL, rc);
	switch (rc) {
	case 0:
		if (runs)
			violation(V_TWICE, "slot %" PRIu32 ": %s of one-shot timer %#" PRIx64
				  " returned 0 after its callback started", idx, fn, s->id);
		pending_late(t, idx, fn, before, s->bound);
		/* Release: a callback that starts after this sees the flag. */
		atomic_fetch_or_explicit(&s->cur, F_CANCELLED, memory_order_release);
		t->t.cancelled++;
		slot_free(t, idx, E_CANCELLED);
		return;
	case -EBUSY:
		if (!sync) {
			/* Running now: it ends when it returns; reaped then. */
			s->oflags |= O_FIRING;
			return;
		}
		break;
	case -ENOENT:
		break;
	default:
		violation(V_RC, "slot %" PRIu32 ": %s of one-shot timer %#" PRIx64 " returned %d (%s)",
			  idx, fn, s->id, rc, strerror(-rc));
		return;
	}
	/*
	 * -ENOENT, or -EBUSY from cancel_sync: the callback has run and returned
	 * (the owner cancelled nothing), so done must be visible now.
	 */
	if (!atomic_load_explicit(&s->done, memory_order_acquire)) {
		runs = atomic_load_explicit(&s->runs, memory_order_relaxed);
		if (!runs)
			violation(V_LOST, "slot %" PRIu32 ": %s of one-shot timer %#" PRIx64
				  " returned %d, yet its callback never started and no cancel returned 0",
				  idx, fn, s->id, rc);
		else
			violation(V_AFTER_STOP, "slot %" PRIu32 ": %s of one-shot timer %#" PRIx64
				  " returned %d while its callback was still running", idx, fn,
				  s->id, rc);
		s->oflags |= O_FIRING;
		return;
	}
	atomic_fetch_or_explicit(&s->cur, F_NO_START, memory_order_release);
	end_fired(t, idx);
}

/* Stops periodic timer @idx with kairos_cancel_sync() or kairos_cancel(). */
static void stop_periodic(struct lthread *t, uint32_t idx, bool sync)
{
	struct slot *s = &S.slots[idx];
	const char *fn = sync ? "kairos_cancel_sync" : "kairos_cancel";
	bool stopping = s->oflags & O_STOPPING;
	uint64_t due = periodic_due(s), before = now_ns();
	int rc = sync ? kairos_cancel_sync(S.k, s->id) : kairos_cancel(S.k, s->id);
	uint32_t runs;

	count(t, sync ? A_CANCEL_SYNC : A_CANCEL, rc);
	switch (rc) {
	case 0:
		pending_late(t, idx, fn, before, due);
		if (stopping)
			violation(V_RC, "slot %" PRIu32 ": %s of periodic timer %#" PRIx64
				  " returned 0 after an earlier cancel said -EBUSY", idx, fn, s->id);
		else
			t->t.pcancelled++;
		/* Between runs: nothing may be running. */
		if (atomic_load_explicit(&s->running, memory_order_acquire))
			violation(V_AFTER_STOP, "slot %" PRIu32 ": periodic timer %#" PRIx64
				  " running after %s returned 0", idx, s->id, fn);
		atomic_fetch_or_explicit(&s->cur, F_CANCELLED, memory_order_release);
		slot_free(t, idx, E_CANCELLED);
		return;
	case -EBUSY:
		if (!stopping) {
			/* Stopped while running: counted as cancelled when that call returns. */
			t->t.pstopped++;
			s->oflags |= O_STOPPING;
			/*
			 * The call in progress may not have reached on_timer's
			 * count yet: at most one more run.
			 */
			s->allowed = atomic_load_explicit(&s->runs, memory_order_acquire) + 1;
		}
		if (!sync)
			return;
		break;
	case -ENOENT:
		if (!stopping) {
			violation(V_LOST, "slot %" PRIu32 ": %s of periodic timer %#" PRIx64
				  " returned -ENOENT, but nothing had cancelled it", idx, fn, s->id);
			return;
		}
		break;
	default:
		violation(V_RC, "slot %" PRIu32 ": %s of periodic timer %#" PRIx64 " returned %d (%s)",
			  idx, fn, s->id, rc, strerror(-rc));
		return;
	}
	/* Ended: nothing running, and nothing starts again. */
	if (atomic_load_explicit(&s->running, memory_order_acquire))
		violation(V_AFTER_STOP, "slot %" PRIu32 ": periodic timer %#" PRIx64
			  " still running after %s returned %d", idx, s->id, fn, rc);
	runs = atomic_load_explicit(&s->runs, memory_order_relaxed);
	if (runs > s->allowed)
		violation(V_AFTER_STOP, "slot %" PRIu32 ": periodic timer %#" PRIx64
			  " ran %" PRIu32 " times after kairos_cancel said -EBUSY (at most 1 allowed)",
			  idx, s->id, runs - s->allowed + 1);
	atomic_fetch_or_explicit(&s->cur, F_NO_START, memory_order_release);
	slot_free(t, idx, E_STOPPED);
}

static bool do_arm(struct lthread *t)
{
	uint32_t idx;

	if (!fq_pop(t, &idx))
		return false;
	arm_oneshot(t, idx, rng_below(&t->rng, 100) < S.cfg.short_pct);
	return true;
}

static bool do_reset(struct lthread *t)
{
	uint32_t idx;

	if (!rng_below(&t->rng, 16)) {
		/* Now and then any slot: ended timers' ids get a reset too. */
		idx = t->lo + rng_below(&t->rng, t->hi - t->lo);
		reap(t, idx);
		if (S.slots[idx].kind == K_FREE && S.slots[idx].id) {
			stale_op(t, idx, A_RESET);
			return true;
		}
		if (S.slots[idx].kind == K_ONESHOT) {
			reset_oneshot(t, idx);
			return true;
		}
	}
	if (!t->nlive)
		return false;
	idx = t->live[rng_below(&t->rng, t->nlive)];
	reap(t, idx);
	if (S.slots[idx].kind == K_FREE)
		stale_op(t, idx, A_RESET);
	else
		reset_oneshot(t, idx);
	return true;
}

/* Cancels a slot picked among all of the thread's: pending or ended. */
static void do_cancel(struct lthread *t, bool sync)
{
	uint32_t idx = t->lo + rng_below(&t->rng, t->hi - t->lo);
	struct slot *s = &S.slots[idx];

	reap(t, idx);
	switch (s->kind) {
	case K_FREE:
		if (s->id)
			stale_op(t, idx, sync ? A_CANCEL_SYNC : A_CANCEL);
		else if (!do_arm(t))
			do_reset(t);
		break;
	case K_ONESHOT:
		cancel_oneshot(t, idx, sync);
		break;
	case K_PERIODIC:
		/* Periodic timers live their span (see do_periodic), unless stopping. */
		if ((s->oflags & O_STOPPING) || now_ns() >= s->until)
			stop_periodic(t, idx, sync || (s->oflags & O_STOPPING));
		else if (!do_reset(t))
			do_arm(t);
		break;
	}
}

/*
 * Moves periodic timer @idx's next run to now + a delay of up to two
 * periods; the period continues from there.  -EBUSY while it is firing.
 */
static void reset_periodic(struct lthread *t, uint32_t idx)
{
	struct slot *s = &S.slots[idx];
	uint64_t p = atomic_load_explicit(&s->period, memory_order_relaxed);
	uint64_t delay = rng_next(&t->rng) % (2 * p) + 1, before;
	uint32_t seq = atomic_load_explicit(&s->sched, memory_order_relaxed);
	uint64_t due = periodic_due(s);
	int rc;

	/* Odd: calls from here on do not know their schedule. */
	atomic_store_explicit(&s->sched, seq + 1, memory_order_seq_cst);
	before = service_now();
	rc = kairos_reset(S.k, s->id, delay);
	count(t, A_RESET, rc);
	switch (rc) {
	case 0:
		pending_late(t, idx, "kairos_reset", before, due);
		/* Run k of the new schedule is due at before + delay + (k - 1) * p, or later. */
		atomic_store_explicit(&s->t0, before + delay - p, memory_order_relaxed);
		atomic_store_explicit(&s->covered, 0, memory_order_relaxed);
		t->t.preset++;
		break;
	case -EBUSY:
		t->t.preset_busy++;
		break;
	case -ENOENT:
		violation(V_LOST, "slot %" PRIu32 ": kairos_reset of periodic timer %#" PRIx64
			  " returned -ENOENT, but nothing had cancelled it", idx, s->id);
		break;
	default:
		violation(V_RC, "slot %" PRIu32 ": kairos_reset of periodic timer %#" PRIx64
			  " returned %d (%s)", idx, s->id, rc, strerror(-rc));
	}
	/* Release: t0 and covered before a call can see the schedule known again. */
	atomic_store_explicit(&s->sched, seq + 2, memory_order_release);
	/* The next reset after 2..20 periods: it should run in between. */
	s->bound = now_ns() + p * (2 + rng_below(&t->rng, 19));
}

/* Waits (for at most two periods) until slot @s's periodic callback runs. */
static void wait_running(struct slot *s)
{
	uint64_t until = now_ns() + 2 * atomic_load_explicit(&s->period, memory_order_relaxed);
	struct timespec ts = { 0, 20000 };

	while (!atomic_load_explicit(&s->running, memory_order_relaxed) && now_ns() < until)
		nanosleep(&ts, NULL);
}

static void do_periodic(struct lthread *t)
{
	uint32_t idx;
	struct slot *s;

	if (t->nper < t->per_target) {
		if (fq_pop(t, &idx))
			arm_periodic(t, idx);
		else
			do_reset(t);
		return;
	}
	if (!t->nper) {
		/* --periodics 0: none to look after. */
		if (!do_reset(t))
			do_arm(t);
		return;
	}
	idx = t->per[rng_below(&t->rng, t->nper)];
	s = &S.slots[idx];
	if (s->oflags & O_STOPPING) {
		stop_periodic(t, idx, true);
	} else if (now_ns() >= s->until) {
		/* A slow one is stopped while it runs: cancel says -EBUSY. */
		if (atomic_load_explicit(&s->cur, memory_order_relaxed) & F_SLOW)
			wait_running(s);
		stop_periodic(t, idx, rng_below(&t->rng, 4) != 0);
	} else if (now_ns() >= s->bound) {
		reset_periodic(t, idx);
	} else if (!do_reset(t)) {
		do_arm(t);
	}
}

static enum mix_op pick(struct lthread *t, unsigned total)
{
	unsigned r = rng_below(&t->rng, total);

	for (unsigned m = 0; m < M_N; m++) {
		if (r < S.cfg.mix[m])
			return (enum mix_op)m;
		r -= S.cfg.mix[m];
	}
	return M_RESET;
}

static void step(struct lthread *t, unsigned total)
{
	switch (pick(t, total)) {
	case M_RESET:
		if (!do_reset(t))
			do_arm(t);
		break;
	case M_ARM:
		if (!do_arm(t))
			do_reset(t);
		break;
	case M_CANCEL:
		do_cancel(t, false);
		break;
	case M_SYNC:
		do_cancel(t, true);
		break;
	case M_PERIODIC:
		do_periodic(t);
		break;
	default:
		break;
	}
}

/* Sleeps as needed to hold the thread to its share of --rate. */
static void pace(uint64_t ops, uint64_t start, uint64_t per_op_ns)
{
	uint64_t due = start + ops * per_op_ns, now = now_ns();
	struct timespec ts;

	if (now >= due)
		return;
	ts.tv_sec = (time_t)((due - now) / NS_PER_S);
	ts.tv_nsec = (long)((due - now) % NS_PER_S);
	nanosleep(&ts, NULL);
}

void *load_main(void *arg)
{
	struct lthread *t = arg;
	uint32_t n = t->hi - t->lo, fill = (uint32_t)((uint64_t)n * S.cfg.fill_pct / 100);
	uint64_t ops = 0, start, per_op_ns = 0;
	unsigned total = 0;

	for (unsigned m = 0; m < M_N; m++)
		total += S.cfg.mix[m];
	/* The idle connections a server has before the churn starts. */
	for (uint32_t i = 0; i < fill && !atomic_load_explicit(&S.stop, memory_order_relaxed); i++) {
		uint32_t idx;

		/* Idle timeouts only: a burst of short ones would all fire at once. */
		if (fq_pop(t, &idx))
			arm_oneshot(t, idx, false);
	}
	atomic_fetch_add_explicit(&S.started, 1, memory_order_release);
	if (S.cfg.rate)
		per_op_ns = NS_PER_S * S.cfg.threads / S.cfg.rate;
	start = now_ns();
	while (!atomic_load_explicit(&S.stop, memory_order_relaxed)) {
		step(t, total);
		if (++ops % 64)
			continue;
		/* Incremental reap: every slot is looked at every n operations. */
		for (unsigned i = 0; i < 64; i++) {
			reap(t, t->lo + t->sweep);
			if (++t->sweep == n)
				t->sweep = 0;
		}
		if (per_op_ns)
			pace(ops, start, per_op_ns);
	}
	return NULL;
}

int load_setup(void)
{
	uint32_t per = S.cfg.timers / S.cfg.threads, extra = S.cfg.timers % S.cfg.threads, lo = 0;
	uint32_t pper = S.cfg.periodics / S.cfg.threads, pextra = S.cfg.periodics % S.cfg.threads;

	S.slots = calloc(S.cfg.timers, sizeof(*S.slots));
	S.th = aligned_alloc(ST_ALIGN, sizeof(*S.th) * S.cfg.threads);
	if (!S.slots || !S.th)
		return -ENOMEM;
	memset(S.th, 0, sizeof(*S.th) * S.cfg.threads);
	for (unsigned i = 0; i < S.cfg.threads; i++) {
		struct lthread *t = &S.th[i];
		uint32_t n = per + (i < extra);

		t->no = i;
		t->lo = lo;
		t->hi = lo + n;
		lo += n;
		t->rng = S.cfg.seed ^ (UINT64_C(0x5851f42d4c957f2d) * (i + 1));
		t->per_target = pper + (i < pextra);
		t->live = malloc(sizeof(*t->live) * n);
		t->per = malloc(sizeof(*t->per) * n);
		t->fq = malloc(sizeof(*t->fq) * n);
		if (!t->live || !t->per || !t->fq)
			return -ENOMEM;
		for (uint32_t j = 0; j < n; j++)
			fq_push(t, t->lo + j);
	}
	return 0;
}

/* ---- after kairos_destroy() ----------------------------------------------- */

/* Every timer still in a slot must have ended exactly once by now. */
static void sweep_slot(struct lthread *t, uint32_t idx)
{
	struct slot *s = &S.slots[idx];
	uint32_t runs = atomic_load_explicit(&s->runs, memory_order_acquire);
	uint32_t drains = atomic_load_explicit(&s->drains, memory_order_relaxed);

	switch (s->kind) {
	case K_ONESHOT:
		if (runs && !drains) {
			if (!atomic_load_explicit(&s->done, memory_order_acquire))
				violation(V_LOST, "slot %" PRIu32 ": one-shot timer %#" PRIx64
					  " callback had not returned after kairos_destroy", idx, s->id);
			end_fired(t, idx);
			return;
		}
		if (drains == 1 && !runs) {
			t->t.drained++;
			check_overdue(t, idx, s->bound);
			slot_free(t, idx, E_DRAINED);
			return;
		}
		violation(V_LOST, "slot %" PRIu32 ": one-shot timer %#" PRIx64 " %s: runs %" PRIu32
			  ", drains %" PRIu32 ", no cancel returned 0", idx, s->id,
			  runs + drains ? "ended twice" : "never ended", runs, drains);
		slot_free(t, idx, E_NONE);
		return;
	case K_PERIODIC:
		if (s->oflags & O_STOPPING) {
			/* Stopped while running: it ended as cancelled, not drained. */
			if (drains)
				violation(V_LOST, "slot %" PRIu32 ": periodic timer %#" PRIx64
					  " stopped while running (cancel said -EBUSY) and drained too",
					  idx, s->id);
			if (runs > s->allowed)
				violation(V_AFTER_STOP, "slot %" PRIu32 ": periodic timer %#" PRIx64
					  " ran %" PRIu32 " times after kairos_cancel said -EBUSY"
					  " (at most 1 allowed)", idx, s->id, runs - s->allowed + 1);
			slot_free(t, idx, E_STOPPED);
			return;
		}
		if (drains == 1) {
			t->t.drained++;
			/* Its next run: the first period its calls have not covered. */
			check_overdue(t, idx, atomic_load(&s->t0) +
				      (atomic_load(&s->covered) + 1) * atomic_load(&s->period));
			slot_free(t, idx, E_DRAINED);
			return;
		}
		violation(V_LOST, "slot %" PRIu32 ": periodic timer %#" PRIx64 " %s (drains %" PRIu32
			  ", never cancelled)", idx, s->id, drains ? "drained twice" : "never ended",
			  drains);
		slot_free(t, idx, E_NONE);
		return;
	default:
		break;
	}
	/* Ended earlier: what the counters say must not have changed since. */
	switch (s->last_end) {
	case E_CANCELLED:
		/* A periodic timer ran before its cancel; a callback after it was reported. */
		if (drains || (runs && !(atomic_load(&s->cur) & F_PERIODIC)))
			violation(V_AFTER_CANCEL, "slot %" PRIu32 ": timer %#" PRIx64
				  " cancelled (a cancel returned 0) but also ran %" PRIu32
				  " times and was drained %" PRIu32 " times", idx, s->id, runs, drains);
		break;
	case E_FIRED:
		if (runs != 1 || drains)
			violation(V_TWICE, "slot %" PRIu32 ": one-shot timer %#" PRIx64
				  " ran %" PRIu32 " times and was drained %" PRIu32 " times",
				  idx, s->id, runs, drains);
		break;
	case E_STOPPED:
		if (drains)
			violation(V_AFTER_STOP, "slot %" PRIu32 ": periodic timer %#" PRIx64
				  " stopped by a cancel but drained too", idx, s->id);
		break;
	default:
		break;
	}
}

void load_final_sweep(void)
{
	for (unsigned i = 0; i < S.cfg.threads; i++) {
		struct lthread *t = &S.th[i];

		for (uint32_t idx = t->lo; idx < t->hi; idx++)
			sweep_slot(t, idx);
	}
}

void tally_sum(struct tally *out)
{
	memset(out, 0, sizeof(*out));
	for (unsigned i = 0; i < S.cfg.threads; i++) {
		const struct tally *t = &S.th[i].t;

		out->arms += t->arms;
		out->arms_periodic += t->arms_periodic;
		out->fired += t->fired;
		out->cancelled += t->cancelled;
		out->pcancelled += t->pcancelled;
		out->pstopped += t->pstopped;
		out->preset += t->preset;
		out->preset_busy += t->preset_busy;
		out->drained += t->drained;
		out->overdue += t->overdue;
		out->late_pending += t->late_pending;
		if (t->late_pending_max > out->late_pending_max)
			out->late_pending_max = t->late_pending_max;
		if (t->overdue_max > out->overdue_max)
			out->overdue_max = t->overdue_max;
		out->checked += t->checked;
		out->stale += t->stale;
	}
}

void cb_sum(uint64_t *oneshot, uint64_t *periodic, uint64_t *periods, uint64_t *drained)
{
	uint64_t a = 0, b = 0, c = 0, d = 0;

	for (unsigned i = 0; i < CB_STRIPES; i++) {
		a += atomic_load_explicit(&S.cb[i].oneshot, memory_order_relaxed);
		b += atomic_load_explicit(&S.cb[i].periodic, memory_order_relaxed);
		c += atomic_load_explicit(&S.cb[i].periods, memory_order_relaxed);
		d += atomic_load_explicit(&S.cb[i].drained, memory_order_relaxed);
	}
	if (oneshot)
		*oneshot = a;
	if (periodic)
		*periodic = b;
	if (periods)
		*periods = c;
	if (drained)
		*drained = d;
}
