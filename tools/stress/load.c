/* SPDX-License-Identifier: MIT */
/*
 * load.c - the load of kairos-stress and what it checks per timer.
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
 *
 * A share of the timers (--queue-share) is armed for kairos queues instead
 * of the workers.  Each queue has a drainer thread that alternates
 * kairos_queue_run(), whose callbacks are on_timer() as on a worker, and
 * kairos_queue_take(), whose entries it checks the same way (and against
 * the deadline the entry carries), and now and then pauses, as a busy event
 * loop does, so that entries wait untaken.  On top of the checks above:
 *  - a queue's timer is delivered only by its own queue's run or take, and
 *    a worker's timer never by a queue;
 *  - a run returns the number of callbacks it made;
 *  - while the drainer is paused (it calls nothing), a reset or cancel of a
 *    one-shot timer that has not run must return 0: pending, or expired and
 *    waiting untaken (withdrawn and armed again, or cancelled);
 *  - at the end, a queue destroyed before kairos_destroy() ends what waits
 *    in it (and what expires into it later) unrun, counted as drained; one
 *    destroyed after has nothing left (kairos_destroy() drained it).
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <limits.h>
#include <sched.h>
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
	[M_KEY] = "key",
};

const char *const api_names[A_N] = {
	[A_ARM] = "kairos_arm",
	[A_ARM_EVERY] = "kairos_arm_every",
	[A_ARM_OPTS] = "kairos_arm_opts",
	[A_ARM_SLACK] = "kairos_arm_slack",
	[A_RESET] = "kairos_reset",
	[A_CANCEL] = "kairos_cancel",
	[A_CANCEL_SYNC] = "kairos_cancel_sync",
	[A_KEY_RESET] = "kairos_key_reset",
	[A_KEY_CANCEL] = "kairos_key_cancel",
	[A_KEY_FIND] = "kairos_key_find",
	[A_REMAINING] = "kairos_remaining",
	[A_RESET_AT] = "kairos_reset_at",
	[A_RESET_N] = "kairos_reset_n",
	[A_CANCEL_N] = "kairos_cancel_n",
	[A_ARM_AT] = "kairos_arm_at",
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
	[V_QUEUE] = "queue delivery (wrong thread or queue, run/take counts, destroy)",
	[V_KEY] = "keys (a key call disagrees with the key's holder, a timer a key call ended"
		  " ran, a refused arm left a timer, per-key books)",
};

const char *const queue_end_names[3] = {
	[QE_MIXED] = "mixed",
	[QE_BEFORE] = "before",
	[QE_AFTER] = "after",
};

struct viol_class viols[V_N];
static pthread_mutex_t viol_lock = PTHREAD_MUTEX_INITIALIZER;

struct stress S;

static void vviolation(enum viol v, uint64_t count, const char *fmt, va_list ap)
{
	uint64_t n = atomic_fetch_add_explicit(&viols[v].count, count, memory_order_relaxed);

	if (n >= VIOL_EXAMPLES)
		return;
	/* Rare: a lock keeps the examples whole for the report. */
	pthread_mutex_lock(&viol_lock);
	vsnprintf(viols[v].example[n], sizeof(viols[v].example[n]), fmt, ap);
	pthread_mutex_unlock(&viol_lock);
}

void violation(enum viol v, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vviolation(v, 1, fmt, ap);
	va_end(ap);
}

/* @count violations found by one check, with one example. */
static __attribute__((format(printf, 3, 4)))
void violation_n(enum viol v, uint64_t count, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vviolation(v, count, fmt, ap);
	va_end(ap);
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
uint64_t service_now(void)
{
	uint64_t t;
	int rc = kairos_now(S.k, &t);

	if (rc) {
		violation(V_RC, "kairos_now returned %d while the service runs", rc);
		return now_ns();
	}
	return t;
}

/* A delay drawn from @r, inclusive. */
uint64_t rng_range(struct rng *s, const struct range_ns *r)
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

void *slot_arg(uint32_t idx, uint32_t epoch)
{
	return (void *)(uintptr_t)((uint64_t)epoch << 32 | idx);
}

static uint32_t cur_epoch(uint64_t cur)
{
	return (uint32_t)(cur >> 32);
}

const char *end_name(unsigned e)
{
	static const char *const names[] = {
		[E_NONE] = "had ended",
		[E_FIRED] = "had run (one-shot)",
		[E_CANCELLED] = "had been cancelled (a cancel returned 0)",
		[E_STOPPED] = "had been stopped (cancel_sync returned)",
		[E_DRAINED] = "had been drained",
		[E_KEYED] = "had been ended by a key call (key_cancel, or a REPLACE arm)",
		[E_REFUSED] = "was never armed (its keyed arm said -EEXIST)",
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
	else if (last && (prev == E_KEYED || prev == E_REFUSED))
		v = V_KEY;
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

/* The drainer whose thread this is; NULL on every other thread. */
static _Thread_local struct qdrainer *tl_drainer;

static const char *via_name(const struct kairos_expiry *taken)
{
	return taken ? "kairos_queue_take" : "kairos_queue_run";
}

/*
 * A call with status > 0 must come from where the timer was armed for: a
 * queue's timer from its own queue's run or take, a worker's timer from a
 * worker.  The drainer counts what its runs and takes delivered.
 */
static void check_route(struct slot *s, uint32_t idx, kairos_id id, bool periodic,
			struct qdrainer *via, const struct kairos_expiry *taken)
{
	uint32_t qno = atomic_load_explicit(&s->qno, memory_order_relaxed);

	if (!via && qno)
		violation(V_QUEUE, "slot %" PRIu32 ": timer %#" PRIx64 " of queue %" PRIu32
			  " called by a thread that is not in kairos_queue_run", idx, id, qno - 1);
	else if (via && !qno)
		violation(V_QUEUE, "slot %" PRIu32 ": worker timer %#" PRIx64 " delivered by %s"
			  " of queue %u", idx, id, via_name(taken), via->no);
	else if (via && qno != via->no + 1)
		violation(V_QUEUE, "slot %" PRIu32 ": timer %#" PRIx64 " of queue %" PRIu32
			  " delivered by %s of queue %u", idx, id, qno - 1, via_name(taken),
			  via->no);
	if (!via)
		return;
	/* Single writer (this thread); the main thread reads them live. */
	if (taken && periodic)
		atomic_store_explicit(&via->take_periodic, via->take_periodic + 1,
				      memory_order_relaxed);
	else if (taken)
		atomic_store_explicit(&via->take_oneshot, via->take_oneshot + 1,
				      memory_order_relaxed);
	else if (periodic)
		atomic_store_explicit(&via->run_periodic, via->run_periodic + 1,
				      memory_order_relaxed);
	else
		atomic_store_explicit(&via->run_oneshot, via->run_oneshot + 1,
				      memory_order_relaxed);
}

/*
 * deliver - checks one call of a timer: a callback on a worker, one that
 * kairos_queue_run() makes on the drainer @via, or an entry that
 * kairos_queue_take() handed out to @via (@taken).  @now is when it
 * started: for a taken entry, when the take returned, so its never-early
 * check is the weaker one; the deadline the entry carries is checked too.
 * Cheap: a handful of atomics on the timer's own slot and on the calling
 * thread's stripe.
 */
static void deliver(void *arg, kairos_id id, int status, uint64_t now, struct qdrainer *via,
		    const struct kairos_expiry *taken)
{
	uint64_t a = (uint64_t)(uintptr_t)arg;
	uint32_t idx = (uint32_t)a, epoch = (uint32_t)(a >> 32);
	struct slot *s = &S.slots[idx];
	struct cb_stripe *cs = stripe();
	/* Acquire pairs with the owner's release before the arm and after a cancel. */
	uint64_t cur = atomic_load_explicit(&s->cur, memory_order_acquire);
	bool periodic = cur & F_PERIODIC;
	uint64_t c, t0, p, first, last;
	uint32_t seq;

	if (cur_epoch(cur) != epoch) {
		stale_call(cs, idx, epoch, cur, id, status);
		return;
	}
	if (cur & F_REFUSED) {
		/* No timer: counted as a one-shot call, as the library would. */
		atomic_fetch_add_explicit(status == -ECANCELED ? &cs->drained : &cs->oneshot, 1,
					  memory_order_relaxed);
		violation(V_KEY, "slot %" PRIu32 ": callback (status %d, id %#" PRIx64 ") of an arm"
			  " that returned -EEXIST", idx, status, id);
		return;
	}
	if (cur & F_KEYED)
		violation(V_KEY, "slot %" PRIu32 ": timer %#" PRIx64 " %s (status %d) after a key"
			  " call ended it (a kairos_key_cancel or a REPLACE arm cancelled it)", idx,
			  id, status == -ECANCELED ? "drained" : "called", status);
	if (id != s->id)
		violation(V_CALLBACK, "slot %" PRIu32 ": callback got id %#" PRIx64
			  ", the arm returned %#" PRIx64, idx, id, s->id);
	if (status == -ECANCELED && !taken) {
		uint32_t qno = atomic_load_explicit(&s->qno, memory_order_relaxed);

		atomic_fetch_add_explicit(&cs->drained, 1, memory_order_relaxed);
		if (qno)
			atomic_fetch_add_explicit(&S.qd[qno - 1].drained, 1, memory_order_relaxed);
		if (via)
			violation(V_QUEUE, "slot %" PRIu32 ": kairos_queue_run of queue %u called"
				  " timer %#" PRIx64 " with -ECANCELED", idx, via->no, id);
		if (atomic_fetch_add_explicit(&s->drains, 1, memory_order_relaxed))
			violation(V_LOST, "slot %" PRIu32 ": timer %#" PRIx64 " drained twice",
				  idx, id);
		if ((cur & (F_CANCELLED | F_NO_START)) && !(cur & F_KEYED))
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
	check_route(s, idx, id, periodic, via, taken);
	if (status < 1 || (!periodic && status != 1))
		violation(V_CALLBACK, "slot %" PRIu32 ": %s timer %#" PRIx64 " %s with status %d",
			  idx, periodic ? "periodic" : "one-shot", id,
			  taken ? "taken" : "called", status);
	if (taken && taken->fn != on_timer)
		violation(V_QUEUE, "slot %" PRIu32 ": entry of timer %#" PRIx64 " taken with a"
			  " callback that is not its arm's", idx, id);
	if (taken && taken->deadline_ns > now)
		violation(V_QUEUE, "slot %" PRIu32 ": entry of timer %#" PRIx64 " taken with a"
			  " deadline %" PRIu64 " ns after the take returned", idx, id,
			  taken->deadline_ns - now);
	if ((cur & (F_CANCELLED | F_NO_START)) && !(cur & F_KEYED))
		violation(cur & F_CANCELLED ? V_AFTER_CANCEL : V_AFTER_STOP,
			  "slot %" PRIu32 ": %s timer %#" PRIx64 " %s after %s", idx,
			  periodic ? "periodic" : "one-shot", id, taken ? "taken" : "started",
			  cur & F_CANCELLED ? "a cancel returned 0" : "cancel_sync returned");
	/*
	 * Release: the library marked the timer running before this; an owner
	 * that sees the count (acquire) and then calls reset or cancel must get
	 * an answer for a started callback, never 0.  Counted before @running
	 * is set: an owner that sees the call running sees it counted.  A call
	 * the flags above said came after its timer's end has its violation
	 * and is not counted: after the flag's store the owner only measures
	 * the calls that its check could not see (end_check()).
	 */
	if (!(cur & (F_CANCELLED | F_NO_START | F_KEYED)) &&
	    atomic_fetch_add_explicit(&s->runs, 1, memory_order_release) && !periodic)
		violation(V_TWICE, "slot %" PRIu32 ": one-shot timer %#" PRIx64 " ran twice", idx, id);
	/* Acquire pairs with the release of the previous call's end; release: the count. */
	if (atomic_exchange_explicit(&s->running, 1, memory_order_acq_rel))
		violation(V_CONCURRENT, "slot %" PRIu32 ": timer %#" PRIx64
			  " called while its previous call runs", idx, id);
	/*
	 * A taken entry has ended (or gone on) already: sleeping here holds up
	 * nothing.  A slow periodic one sleeps in its check below.
	 */
	if ((cur & F_SLOW) && !taken)
		slow_sleep();
	if (!periodic) {
		if (taken)
			atomic_store_explicit(&s->taken_ns, taken->deadline_ns,
					      memory_order_relaxed);
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
	 * runs, so the schedule does not change under it (a taken entry's
	 * timer has gone on already, but the owner waits for the drainer's
	 * check before it makes the schedule known again: queue_fence()).
	 * What it covered is then unknown to the schedule's checks too: it
	 * says which reset it saw (check_periodic_schedule()).
	 */
	seq = atomic_load_explicit(&s->sched, memory_order_acquire);
	if (seq & 1) {
		atomic_store_explicit(&s->sched_skipped, seq, memory_order_relaxed);
		atomic_store_explicit(&s->running, 0, memory_order_release);
		return;
	}
	/* Calls of one periodic timer never overlap: covered is this call's alone. */
	c = atomic_load_explicit(&s->covered, memory_order_relaxed);
	t0 = atomic_load_explicit(&s->t0, memory_order_relaxed);
	p = atomic_load_explicit(&s->period, memory_order_relaxed);
	/*
	 * A slow taken entry is handled slowly: the drainer sleeps between its
	 * read of the schedule and its store of covered, while its timer has
	 * gone on and the owner may reset it (see reset_periodic()).
	 */
	if ((cur & F_SLOW) && taken)
		slow_sleep();
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
	/* The entry's deadline is its first period's: not before the tool's bound of it. */
	if (taken && taken->deadline_ns < first) {
		char early[32];

		fmt_ns(early, sizeof(early), first - taken->deadline_ns);
		violation(V_EARLY, "slot %" PRIu32 ": periodic timer %#" PRIx64 " taken with the"
			  " deadline of period %" PRIu64 " %s before it", idx, id, c + 1, early);
	}
	if (status > 0) {
		atomic_store_explicit(&s->covered, c + (uint64_t)status, memory_order_relaxed);
		atomic_fetch_add_explicit(&cs->periods, (uint64_t)status, memory_order_relaxed);
	}
	/* Release: this call's effects before the next call (or cancel_sync) sees it ended. */
	atomic_store_explicit(&s->running, 0, memory_order_release);
}

/* The callback of every timer, on a worker, in a queue's run, or drained. */
void on_timer(void *arg, kairos_id id, int status)
{
	uint64_t now = now_ns();

	/* Counted first: a run's return must match the calls it made, stale ones too. */
	if (tl_drainer)
		tl_drainer->run_cb++;
	deliver(arg, id, status, now, tl_drainer, NULL);
}

/* ---- a thread's lists ---------------------------------------------------- */

void list_add(uint32_t *list, uint32_t *n, uint32_t idx)
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
void fq_push(struct lthread *t, uint32_t idx)
{
	uint32_t n = t->hi - t->lo;

	t->fq[(t->fq_head + t->fq_len) % n] = idx;
	t->fq_len++;
}

bool fq_pop(struct lthread *t, uint32_t *idx)
{
	if (!t->fq_len)
		return false;
	*idx = t->fq[t->fq_head];
	t->fq_head = (t->fq_head + 1) % (t->hi - t->lo);
	t->fq_len--;
	return true;
}

int rc_class(int rc)
{
	switch (rc) {
	case 0:
		return RC_OK;
	case -ENOENT:
		return RC_ENOENT;
	case -EBUSY:
		return RC_EBUSY;
	case -EEXIST:
		return RC_EEXIST;
	default:
		return RC_OTHER;
	}
}

void count(struct lthread *t, enum api_call a, int rc)
{
	uint64_t n = atomic_load_explicit(&t->ops[a], memory_order_relaxed);

	/* Single writer: a plain increment the main thread may read at any time. */
	atomic_store_explicit(&t->ops[a], n + 1, memory_order_relaxed);
	t->rc[a][rc_class(rc)]++;
}

/* ---- ending timers -------------------------------------------------------- */

/*
 * slot_free_at - ends slot @idx's timer as @end; @runs is its count of
 * calls when the library said it had ended (a cancel's 0 or cancel_sync's
 * return), before the owner stored the flag that the calls check.
 */
static void slot_free_at(struct lthread *t, uint32_t idx, enum slot_end end, uint32_t runs)
{
	struct slot *s = &S.slots[idx];

	/*
	 * Ended as the library said: no call of this timer starts from here
	 * on, checked when the slot is armed again, or by the final sweep
	 * (end_check()).  Not for a timer a key call may have ended, whose
	 * end another thread's call decided.
	 */
	s->runs_end = 0;
	if ((end == E_FIRED || end == E_CANCELLED || end == E_STOPPED) && !s->key &&
	    !(s->oflags & O_SHARED))
		s->runs_end = runs + 1;
	if (s->key)
		key_forget(t, idx);
	s->key = 0;
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

void slot_free(struct lthread *t, uint32_t idx, enum slot_end end)
{
	/* Acquire pairs with the calls' increments. */
	slot_free_at(t, idx, end, atomic_load_explicit(&S.slots[idx].runs, memory_order_acquire));
}

/* Checks the one run of one-shot timer @idx: once, not early, not stalled; records its lateness. */
static void check_run(struct lthread *t, uint32_t idx)
{
	struct slot *s = &S.slots[idx];
	uint32_t runs = atomic_load_explicit(&s->runs, memory_order_relaxed);
	uint32_t drains = atomic_load_explicit(&s->drains, memory_order_relaxed);
	uint64_t start = atomic_load_explicit(&s->start_ns, memory_order_relaxed);
	uint64_t taken = atomic_load_explicit(&s->taken_ns, memory_order_relaxed);
	uint64_t bound = key_bound(s);

	/* A second call was reported as it started (V_TWICE). */
	if (!runs || drains)
		violation(V_LOST, "slot %" PRIu32 ": one-shot timer %#" PRIx64
			  " ended %" PRIu32 " times by running and %" PRIu32 " by draining",
			  idx, s->id, runs, drains);
	if (taken && taken < s->bound) {
		char early[32];

		fmt_ns(early, sizeof(early), s->bound - taken);
		violation(V_EARLY, "slot %" PRIu32 ": one-shot timer %#" PRIx64 " taken with a"
			  " deadline %s before the deadline of its last successful arm/reset",
			  idx, s->id, early);
	}
	if (start < bound) {
		char early[32];

		fmt_ns(early, sizeof(early), bound - start);
		violation(V_EARLY, "slot %" PRIu32 ": one-shot timer %#" PRIx64
			  " %s %s before the deadline of its last successful arm/reset%s",
			  idx, s->id, taken ? "taken (the take returned)" : "started", early,
			  (s->oflags & O_SHARED) ? " or of any move of its shared key" : "");
	} else if (s->oflags & O_SHARED) {
		/* Another thread may have moved it later: its deadline is not known. */
		t->t.kunmeasured++;
	} else {
		lhist_add(&t->late, start - s->bound);
		if (start - s->bound > S.cfg.max_late_ns)
			stall(idx, s->id, "one-shot", start - s->bound);
	}
}

/*
 * A reset or cancel returned 0 at @now for timer @idx, due at @due: it was
 * still pending.  Past its deadline by more than a tick, the service is
 * behind; by more than --max-late, it has stalled.  A queue's timer that
 * is past its deadline most likely waits in its queue, untaken, while its
 * drainer lags: not the service's delay, and not counted, but a stall all
 * the same beyond --max-late.
 */
static void pending_late(struct lthread *t, uint32_t idx, const char *call, uint64_t now,
			 uint64_t due)
{
	uint64_t late;
	char buf[32];

	if (now <= due + S.cfg.tick_ns)
		return;
	late = now - due;
	if (atomic_load_explicit(&S.slots[idx].qno, memory_order_relaxed)) {
		if (late > S.cfg.max_late_ns) {
			fmt_ns(buf, sizeof(buf), late);
			violation(V_STALL, "slot %" PRIu32 ": %s returned 0 for queue timer %#"
				  PRIx64 " %s after its deadline: not run nor taken", idx, call,
				  S.slots[idx].id, buf);
		}
		return;
	}
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
void end_fired(struct lthread *t, uint32_t idx)
{
	check_run(t, idx);
	t->t.fired++;
	t->t.kfired += S.slots[idx].key != 0;
	slot_free(t, idx, E_FIRED);
}

/* Ends slot @idx's one-shot timer if its callback has returned. */
void reap(struct lthread *t, uint32_t idx)
{
	struct slot *s = &S.slots[idx];

	/* Acquire pairs with the callback's release of done. */
	if (s->kind == K_ONESHOT && atomic_load_explicit(&s->done, memory_order_acquire))
		end_fired(t, idx);
}

/* ---- the operations --------------------------------------------------------- */

/*
 * end_check - the calls of slot @s's last timer (@cur its word) that
 * started after the library said it had ended and that the calls' own
 * check could not see: each read the slot's flags before the owner stored
 * the end's flag, and was counted in @runs (a call that saw the flag was
 * reported then, and not counted).  @runs_end holds the count when the
 * library said it had ended, taken before that store: a call that came
 * between the library's word and the flag's store, or read the flags
 * before it and counted after, is found here, once.  A one-shot timer's
 * second call is reported as it starts (V_TWICE): only a first one, of a
 * timer cancelled before any call, is left to this check.  Checked once:
 * an arm that fails, or a refused keyed arm, puts the slot back without
 * ending a timer.
 */
static void end_check(struct slot *s, uint64_t cur)
{
	uint32_t runs = atomic_load_explicit(&s->runs, memory_order_acquire);
	uint32_t base, late;

	if (!s->runs_end)
		return;
	base = s->runs_end - 1;
	s->runs_end = 0;
	if (runs <= base)
		return;
	late = (cur & F_PERIODIC) ? runs - base : !base;
	if (!late)
		return;
	violation_n(s->last_end == E_CANCELLED ? V_AFTER_CANCEL :
		    s->last_end == E_STOPPED ? V_AFTER_STOP : V_TWICE, late,
		    "slot %td: %s timer %#" PRIx64 " started %" PRIu32 " times after %s, each"
		    " unseen by the callback's check (it read the slot's flags first)",
		    s - S.slots, (cur & F_PERIODIC) ? "periodic" : "one-shot", s->id, late,
		    s->last_end == E_FIRED ? "it ran" : s->last_end == E_CANCELLED ?
		    "a cancel returned 0" : "a cancel said it had stopped");
}

/* Resets a slot's shared words for a new timer of epoch @epoch, for queue @qno - 1 or workers. */
uint32_t slot_prepare(struct slot *s, bool periodic, bool slow, uint32_t qno)
{
	uint64_t old = atomic_load_explicit(&s->cur, memory_order_relaxed);
	uint32_t epoch = cur_epoch(old) + 1;

	end_check(s, old);
	atomic_store_explicit(&s->runs, 0, memory_order_relaxed);
	atomic_store_explicit(&s->drains, 0, memory_order_relaxed);
	atomic_store_explicit(&s->done, 0, memory_order_relaxed);
	atomic_store_explicit(&s->running, 0, memory_order_relaxed);
	atomic_store_explicit(&s->covered, 0, memory_order_relaxed);
	atomic_store_explicit(&s->start_ns, 0, memory_order_relaxed);
	atomic_store_explicit(&s->taken_ns, 0, memory_order_relaxed);
	atomic_store_explicit(&s->qno, qno, memory_order_relaxed);
	/* Release: the words above before a stale callback can see the new epoch. */
	atomic_store_explicit(&s->cur, (uint64_t)epoch << 32 |
			      (uint64_t)s->last_end << F_PREV_SHIFT |
			      ((old & F_PERIODIC) ? F_PREV_PERIODIC : 0) |
			      (periodic ? F_PERIODIC : 0) | (slow ? F_SLOW : 0), memory_order_release);
	return epoch;
}

/*
 * The queue a new timer is armed for, plus 1, or 0 for the workers.  A load
 * thread mostly uses one queue, as a loop thread arms for its own; now and
 * then another, which moves it to that queue's shard.
 */
static uint32_t pick_queue(struct lthread *t)
{
	if (!S.cfg.queues || rng_below(&t->rng, 100) >= S.cfg.queue_pct)
		return 0;
	if (rng_below(&t->rng, 8))
		return t->no % S.cfg.queues + 1;
	return rng_below(&t->rng, S.cfg.queues) + 1;
}

static void arm_oneshot(struct lthread *t, uint32_t idx, bool shorty)
{
	struct slot *s = &S.slots[idx];
	uint64_t delay = rng_range(&t->rng, shorty ? &S.cfg.shorts : &S.cfg.idle), before;
	uint32_t qno = pick_queue(t);
	bool slow = shorty && rng_below(&t->rng, 100) < S.cfg.slow_pct;
	uint32_t epoch = slot_prepare(s, false, slow, qno);
	struct kairos_timer_opts o = { 0 };
	enum api_call a = qno ? A_ARM_OPTS : A_ARM;
	int rc;

	/*
	 * An idle timeout now and then with a tenth of slack, which reads the
	 * counter clock where the machine has it (it and its resets): still
	 * never early.
	 */
	if (!shorty && !rng_below(&t->rng, 4))
		o.slack_ns = delay / 10;
	if (qno)
		o.queue = S.qd[qno - 1].q;
	else if (o.slack_ns)
		a = A_ARM_SLACK;
	before = service_now();
	if (qno)
		rc = kairos_arm_opts(S.k, delay, &o, on_timer, slot_arg(idx, epoch), &s->id);
	else if (o.slack_ns)
		rc = kairos_arm_slack(S.k, delay, o.slack_ns, on_timer, slot_arg(idx, epoch),
				      &s->id);
	else if (rng_below(&t->rng, 8))
		rc = kairos_arm(S.k, delay, on_timer, slot_arg(idx, epoch), &s->id);
	else {
		/* Now and then at an absolute deadline: exactly before + delay. */
		a = A_ARM_AT;
		rc = kairos_arm_at(S.k, before + delay, on_timer, slot_arg(idx, epoch), &s->id);
	}
	count(t, a, rc);
	if (rc) {
		violation(V_RC, "%s(%" PRIu64 " ns) returned %d (%s)", api_names[a], delay, rc,
			  strerror(-rc));
		s->last_end = E_NONE;
		fq_push(t, idx);
		return;
	}
	s->kind = K_ONESHOT;
	s->oflags = shorty ? O_SHORT : 0;
	s->bound = before + delay;
	list_add(t->live, &t->nlive, idx);
	if (slow)
		t->slow_armed = idx + 1;
	t->t.arms++;
	t->t.arms_queue += qno != 0;
}

static void arm_periodic(struct lthread *t, uint32_t idx)
{
	struct slot *s = &S.slots[idx];
	uint64_t period = rng_range(&t->rng, &S.cfg.period), before;
	uint32_t qno = pick_queue(t);
	uint32_t epoch = slot_prepare(s, true, rng_below(&t->rng, 100) < S.cfg.slow_pct, qno);
	struct kairos_timer_opts o = { .period_ns = period };
	int rc;

	before = service_now();
	atomic_store_explicit(&s->t0, before, memory_order_relaxed);
	atomic_store_explicit(&s->period, period, memory_order_relaxed);
	atomic_store_explicit(&s->sched_skipped, 0, memory_order_relaxed);
	s->sched_base = atomic_load_explicit(&s->sched, memory_order_relaxed);
	if (qno) {
		/* The first run a period from now, as kairos_arm_every()'s. */
		o.queue = S.qd[qno - 1].q;
		rc = kairos_arm_opts(S.k, period, &o, on_timer, slot_arg(idx, epoch), &s->id);
	} else {
		rc = kairos_arm_every(S.k, period, on_timer, slot_arg(idx, epoch), &s->id);
	}
	count(t, qno ? A_ARM_OPTS : A_ARM_EVERY, rc);
	if (rc) {
		violation(V_RC, "%s(period %" PRIu64 " ns) returned %d (%s)",
			  qno ? "kairos_arm_opts" : "kairos_arm_every", period, rc, strerror(-rc));
		s->last_end = E_NONE;
		fq_push(t, idx);
		return;
	}
	s->kind = K_PERIODIC;
	s->oflags = 0;
	s->t0_hi = service_now();
	s->until = before + rng_range(&t->rng, &S.cfg.life);
	s->bound = before + period * (2 + rng_below(&t->rng, 19));	/* its first reset */
	list_add(t->per, &t->nper, idx);
	t->t.arms++;
	t->t.arms_periodic++;
	t->t.arms_queue += qno != 0;
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

/*
 * queue_fence - waits until the drainer of queue @qno - 1 (0: none) has
 * checked what its take in progress handed out.  A take ends a one-shot
 * timer, or sends a periodic one on, before the drainer checks the entry:
 * an owner told that the timer ran (-ENOENT, -EBUSY) or that a periodic
 * timer is between runs (a cancel's or a reset's 0) waits here before it
 * looks at what the check records.  The library's own ordering carries
 * the odd @tseq, stored before the take, to the owner's call that saw
 * the take's effect.
 */
static void queue_fence(struct lthread *t, uint32_t qno)
{
	struct qdrainer *d;
	uint64_t until = 0;
	uint32_t seq;

	if (!qno)
		return;
	d = &S.qd[qno - 1];
	/* Acquire: what the drainer checked before it made @tseq even. */
	seq = atomic_load_explicit(&d->tseq, memory_order_acquire);
	if (!(seq & 1))
		return;
	t->t.qfences++;
	while (atomic_load_explicit(&d->tseq, memory_order_acquire) == seq) {
		uint64_t now = now_ns();

		if (!until) {
			until = now + S.cfg.max_late_ns;
		} else if (now > until) {
			violation(V_STALL, "queue %u: its drainer spent over --max-late in one"
				  " kairos_queue_take and the checks of what it took", d->no);
			return;
		}
		sched_yield();
	}
}

/* Queue @qno - 1's drainer pause word (0 for a worker's timer): odd while it calls nothing. */
static uint32_t queue_pause(uint32_t qno)
{
	/* seq_cst: read after the call it brackets (see struct qdrainer). */
	return qno ? atomic_load_explicit(&S.qd[qno - 1].pause, memory_order_seq_cst) : 0;
}

/*
 * A reset or cancel of queue timer @idx made while its drainer was paused
 * (@p1 odd before the call, unchanged after it): no entry of the queue was
 * run or taken meanwhile, so a timer that had not run by @p1 was pending
 * or waits untaken, and the call must return 0.
 */
static bool paused_call(struct lthread *t, uint32_t idx, uint32_t p1, uint64_t before,
			uint64_t due)
{
	struct slot *s = &S.slots[idx];

	if (!(p1 & 1) || queue_pause(atomic_load_explicit(&s->qno, memory_order_relaxed)) != p1)
		return false;
	t->t.qpaused++;
	if (s->kind == K_ONESHOT && before > due + S.cfg.tick_ns)
		t->t.qpaused_due++;
	return true;
}

/*
 * What a reset or cancel of one-shot timer @idx reads before its call and
 * checks after it: its queue and that queue's drainer pause word (a run
 * seen paused was made before the pause), its runs (acquire pairs with the
 * callback's increment: a run seen here came first), and the clock.
 */
struct call_pre {
	uint64_t delay, before;
	uint32_t qno, p1, runs;
};

static void call_pre(uint32_t idx, uint64_t delay, struct call_pre *pr)
{
	struct slot *s = &S.slots[idx];

	pr->delay = delay;
	pr->qno = atomic_load_explicit(&s->qno, memory_order_relaxed);
	pr->p1 = queue_pause(pr->qno);
	pr->runs = atomic_load_explicit(&s->runs, memory_order_acquire);
}

/* The delay of a reset of one-shot timer @idx: its own kind's. */
static uint64_t reset_delay(struct lthread *t, uint32_t idx)
{
	return rng_range(&t->rng, (S.slots[idx].oflags & O_SHORT) ? &S.cfg.shorts : &S.cfg.idle);
}

/* Checks what @fn (kairos_reset(), _reset_at() or _reset_n()) returned for one-shot @idx. */
static void reset_oneshot_end(struct lthread *t, uint32_t idx, const struct call_pre *pr,
			      int rc, const char *fn)
{
	struct slot *s = &S.slots[idx];
	uint64_t before = pr->before;
	uint32_t runs = pr->runs;

	if (pr->qno && paused_call(t, idx, pr->p1, before, s->bound) && rc &&
	    !runs && !(s->oflags & O_FIRING))
		violation(V_RC, "slot %" PRIu32 ": %s of one-shot queue timer %#" PRIx64
			  " returned %d while its queue's drainer was paused: pending, or expired"
			  " and waiting untaken (withdrawn and armed again), it must return 0",
			  idx, fn, s->id, rc);
	switch (rc) {
	case 0:
		if (runs || (s->oflags & O_FIRING))
			violation(V_RC, "slot %" PRIu32 ": %s of one-shot timer %#" PRIx64
				  " returned 0 after %s", idx, fn, s->id,
				  runs ? "its callback started" : "an earlier call said it was firing");
		/* Past its deadline, a queue's timer most likely waited untaken: withdrawn. */
		if (pr->qno && before > s->bound + S.cfg.tick_ns)
			t->t.qwithdrawn++;
		/* Another thread may have moved a shared key's timer later. */
		if (!(s->oflags & O_SHARED))
			pending_late(t, idx, fn, before, s->bound);
		s->bound = before + pr->delay;
		break;
	case -ENOENT:
		/* Firing or fired (or, with a shared key, ended by a key call). */
		if (s->oflags & O_SHARED) {
			key_settle(t, idx, fn);
			break;
		}
		/* The old bound stays. */
		s->oflags |= O_FIRING;
		break;
	default:
		violation(V_RC, "slot %" PRIu32 ": %s of one-shot timer %#" PRIx64
			  " returned %d (%s)", idx, fn, s->id, rc, strerror(-rc));
	}
}

/*
 * A one-shot reset: now and then to an absolute deadline, the clock read
 * just before plus the delay, which is then exactly its deadline.
 */
static void reset_oneshot(struct lthread *t, uint32_t idx)
{
	struct slot *s = &S.slots[idx];
	bool at = !rng_below(&t->rng, 8);
	struct call_pre pr;
	int rc;

	call_pre(idx, reset_delay(t, idx), &pr);
	pr.before = service_now();
	if (at)
		rc = kairos_reset_at(S.k, s->id, pr.before + pr.delay);
	else
		rc = kairos_reset(S.k, s->id, pr.delay);
	count(t, at ? A_RESET_AT : A_RESET, rc);
	reset_oneshot_end(t, idx, &pr, rc, at ? "kairos_reset_at" : "kairos_reset");
}

/* Checks what @fn (a cancel, cancel_sync if @sync, or cancel_n) returned for one-shot @idx. */
static void cancel_oneshot_end(struct lthread *t, uint32_t idx, const struct call_pre *pr,
			       int rc, bool sync, const char *fn)
{
	struct slot *s = &S.slots[idx];
	uint32_t qno = pr->qno, p1 = pr->p1, runs = pr->runs;
	uint64_t before = pr->before;

	if (qno && paused_call(t, idx, p1, before, s->bound) && rc &&
	    !runs && !(s->oflags & O_FIRING))
		violation(V_RC, "slot %" PRIu32 ": %s of one-shot queue timer %#" PRIx64
			  " returned %d while its queue's drainer was paused: pending, or expired"
			  " and waiting untaken, it must return 0", idx, fn, s->id, rc);
	/* Told that it ran: a take's check may still be under way. */
	if (rc == -ENOENT || (rc == -EBUSY && sync))
		queue_fence(t, qno);
	switch (rc) {
	case 0:
		if (runs)
			violation(V_TWICE, "slot %" PRIu32 ": %s of one-shot timer %#" PRIx64
				  " returned 0 after its callback started", idx, fn, s->id);
		if (!(s->oflags & O_SHARED))
			pending_late(t, idx, fn, before, s->bound);
		/* Release: a callback that starts after this sees the flag. */
		atomic_fetch_or_explicit(&s->cur, F_CANCELLED, memory_order_release);
		t->t.cancelled++;
		/* Measured from before the call: a callback that started since is late. */
		slot_free_at(t, idx, E_CANCELLED, runs);
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
	/* With a shared key, a key call of another thread may have ended it. */
	if (s->oflags & O_SHARED) {
		key_settle(t, idx, fn);
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

static void cancel_oneshot(struct lthread *t, uint32_t idx, bool sync)
{
	struct slot *s = &S.slots[idx];
	struct call_pre pr;
	int rc;

	call_pre(idx, 0, &pr);
	pr.before = now_ns();
	rc = sync ? kairos_cancel_sync(S.k, s->id) : kairos_cancel(S.k, s->id);
	count(t, sync ? A_CANCEL_SYNC : A_CANCEL, rc);
	cancel_oneshot_end(t, idx, &pr, rc, sync, sync ? "kairos_cancel_sync" : "kairos_cancel");
}

/*
 * Up to BATCH_MAX distinct pending one-shot timers of the thread, picked
 * at random among its live ones (reaped first: an ended one is left out),
 * into @idx, all short or all idle as the first (a batch reset gives them
 * one delay, and a short timer is reset short again).  Returns how many.
 */
#define BATCH_MAX 8

static unsigned pick_batch(struct lthread *t, uint32_t idx[BATCH_MAX])
{
	unsigned n = 0;

	for (unsigned tries = 0; tries < 2 * BATCH_MAX && n < BATCH_MAX && t->nlive; tries++) {
		uint32_t i = t->live[rng_below(&t->rng, t->nlive)];
		bool dup = false;

		for (unsigned j = 0; j < n; j++)
			dup |= idx[j] == i;
		if (dup)
			continue;
		reap(t, i);
		if (S.slots[i].kind == K_ONESHOT &&
		    (!n || !((S.slots[i].oflags ^ S.slots[idx[0]].oflags) & O_SHORT)))
			idx[n++] = i;
	}
	return n;
}

/*
 * kairos_reset_n() or kairos_cancel_n() of a batch, each timer's result
 * checked as its single call's would be, and the return value against
 * the results.  The batch's clock is read before the call, as a single
 * call's is.
 */
static bool do_batch(struct lthread *t, bool cancel)
{
	uint32_t idx[BATCH_MAX];
	struct call_pre pr[BATCH_MAX];
	kairos_id ids[BATCH_MAX];
	int res[BATCH_MAX];
	unsigned n = pick_batch(t, idx), zeros = 0;
	uint64_t delay = n ? reset_delay(t, idx[0]) : 0, before;
	const char *fn = cancel ? "kairos_cancel_n" : "kairos_reset_n";
	int rc;

	if (!n)
		return false;
	for (unsigned j = 0; j < n; j++) {
		call_pre(idx[j], delay, &pr[j]);
		ids[j] = S.slots[idx[j]].id;
		res[j] = INT_MIN;
	}
	before = cancel ? now_ns() : service_now();
	rc = cancel ? kairos_cancel_n(S.k, ids, n, res) : kairos_reset_n(S.k, ids, n, delay, res);
	for (unsigned j = 0; j < n; j++) {
		count(t, cancel ? A_CANCEL_N : A_RESET_N, res[j]);
		zeros += res[j] == 0;
	}
	if (rc < 0 || (unsigned)rc != zeros) {
		violation(V_RC, "%s of %u timers returned %d, and %u of their results were 0", fn,
			  n, rc, zeros);
		if (rc < 0)
			return true;
	}
	for (unsigned j = 0; j < n; j++) {
		pr[j].before = before;
		if (cancel)
			cancel_oneshot_end(t, idx[j], &pr[j], res[j], false, fn);
		else
			reset_oneshot_end(t, idx[j], &pr[j], res[j], fn);
	}
	return true;
}

/* Stops periodic timer @idx with kairos_cancel_sync() or kairos_cancel(). */
static void stop_periodic(struct lthread *t, uint32_t idx, bool sync)
{
	struct slot *s = &S.slots[idx];
	const char *fn = sync ? "kairos_cancel_sync" : "kairos_cancel";
	bool stopping = s->oflags & O_STOPPING;
	uint32_t qno = atomic_load_explicit(&s->qno, memory_order_relaxed);
	uint32_t p1 = queue_pause(qno);
	uint64_t due = periodic_due(s), before = now_ns();
	int rc = sync ? kairos_cancel_sync(S.k, s->id) : kairos_cancel(S.k, s->id);
	/* The calls made before its answer: acquire pairs with their increments. */
	uint32_t ran = atomic_load_explicit(&s->runs, memory_order_acquire), runs;

	count(t, sync ? A_CANCEL_SYNC : A_CANCEL, rc);
	if (qno && paused_call(t, idx, p1, before, due) && rc && !stopping)
		violation(V_RC, "slot %" PRIu32 ": %s of periodic queue timer %#" PRIx64
			  " returned %d while its queue's drainer was paused: nothing can be"
			  " running, it must return 0", idx, fn, s->id, rc);
	/*
	 * Whatever it says, what a take handed out before must be checked
	 * first: it may not have been, and would then look like a run after
	 * the cancel, or run concurrently with nothing.
	 */
	queue_fence(t, qno);
	switch (rc) {
	case 0:
		/*
		 * Its calls when the cancel found it pending: a call that came
		 * after is late.  A queue's timer's, once what a take handed
		 * out before is checked (above).
		 */
		runs = qno ? atomic_load_explicit(&s->runs, memory_order_acquire) : ran;
		pending_late(t, idx, fn, before, due);
		if (stopping)
			violation(V_RC, "slot %" PRIu32 ": %s of periodic timer %#" PRIx64
				  " returned 0 after an earlier cancel said -EBUSY", idx, fn, s->id);
		else
			t->t.pcancelled++;
		/* Between runs: nothing may be running. */
		if (atomic_load_explicit(&s->running, memory_order_acquire)) {
			violation(V_AFTER_STOP, "slot %" PRIu32 ": periodic timer %#" PRIx64
				  " running after %s returned 0", idx, s->id, fn);
			/* That call is reported: counted before it was running (on_timer). */
			runs = atomic_load_explicit(&s->runs, memory_order_acquire);
		}
		atomic_fetch_or_explicit(&s->cur, F_CANCELLED, memory_order_release);
		slot_free_at(t, idx, E_CANCELLED, runs);
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
	/* Measured from the count just checked: a call that came after it is late. */
	slot_free_at(t, idx, E_STOPPED, runs);
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
	/* Now and then a batch, as a loop resets the connections of one wake-up. */
	if (!rng_below(&t->rng, 32) && do_batch(t, false))
		return true;
	idx = t->live[rng_below(&t->rng, t->nlive)];
	reap(t, idx);
	if (S.slots[idx].kind == K_FREE)
		stale_op(t, idx, A_RESET);
	else
		reset_oneshot(t, idx);
	return true;
}

/*
 * A cancel_sync of the slow short one-shot timer (its callback sleeps) the
 * thread armed last, that waits until the callback has started: the call
 * must return only once it has returned (cancel_oneshot_end() finds done
 * set).  At most one wait every 50 ms per thread, each up to the timer's
 * deadline and 5 ms.  False when there is none to wait for.
 */
static bool sync_running_oneshot(struct lthread *t)
{
	uint64_t now = now_ns(), until;
	struct timespec ts = { 0, 20000 };
	struct slot *s;
	uint32_t idx;

	if (!t->slow_armed || now < t->next_sync_wait)
		return false;
	idx = t->slow_armed - 1;
	s = &S.slots[idx];
	t->slow_armed = 0;
	reap(t, idx);
	if (s->kind != K_ONESHOT || (s->oflags & O_SHARED) ||
	    !(atomic_load_explicit(&s->cur, memory_order_relaxed) & F_SLOW))
		return false;
	t->next_sync_wait = now + 50 * NS_PER_MS;
	/* Its deadline is a short delay ahead; a shard far behind is not waited for. */
	until = service_now() + 30 * NS_PER_MS;
	if (s->bound + 5 * NS_PER_MS < until)
		until = s->bound + 5 * NS_PER_MS;
	while (!atomic_load_explicit(&s->running, memory_order_relaxed) &&
	       !atomic_load_explicit(&s->done, memory_order_relaxed) && service_now() < until)
		nanosleep(&ts, NULL);
	if (atomic_load_explicit(&s->running, memory_order_relaxed))
		t->t.syncs_running++;
	cancel_oneshot(t, idx, true);
	return true;
}

/* Cancels a slot picked among all of the thread's: pending or ended. */
static void do_cancel(struct lthread *t, bool sync)
{
	uint32_t idx = t->lo + rng_below(&t->rng, t->hi - t->lo);
	struct slot *s = &S.slots[idx];

	/* Now and then a batch of pending ones, as a loop closes connections. */
	if (!sync && !rng_below(&t->rng, 64) && do_batch(t, true))
		return;
	if (sync && sync_running_oneshot(t))
		return;
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
	uint64_t delay = rng_next(&t->rng) % (2 * p) + 1, before, after;
	uint32_t seq = atomic_load_explicit(&s->sched, memory_order_relaxed);
	uint64_t due = periodic_due(s);
	int rc;

	/* Odd: calls from here on do not know their schedule. */
	atomic_store_explicit(&s->sched, seq + 1, memory_order_seq_cst);
	before = service_now();
	rc = kairos_reset(S.k, s->id, delay);
	after = service_now();
	count(t, A_RESET, rc);
	switch (rc) {
	case 0:
		pending_late(t, idx, "kairos_reset", before, due);
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
	/*
	 * An entry of the old schedule that a take handed out is checked first:
	 * its check may have read the schedule before it went odd, and it
	 * stores covered.  The new schedule is written after that store.
	 */
	queue_fence(t, atomic_load_explicit(&s->qno, memory_order_relaxed));
	if (rc == 0) {
		/*
		 * Run k of the new schedule is due at before + delay + (k - 1) * p,
		 * or later, and by after + delay + (k - 1) * p and a tick.
		 */
		s->t0_hi = after + delay - p;
		s->sched_base = seq + 2;
		atomic_store_explicit(&s->t0, before + delay - p, memory_order_relaxed);
		atomic_store_explicit(&s->covered, 0, memory_order_relaxed);
	}
	/* Release: t0 and covered before a call can see the schedule known again. */
	atomic_store_explicit(&s->sched, seq + 2, memory_order_release);
	/* The next reset after 2..20 periods: it should run in between. */
	s->bound = now_ns() + p * (2 + rng_below(&t->rng, 19));
}

/*
 * Periodic timer @idx (fixed rate, on the workers) between its calls: its
 * next run, as kairos_remaining() tells, must be the one after the periods
 * its calls covered.  A run the library skipped without counting it in a
 * call's status (a lost period) puts the next one whole periods later than
 * that.  The library's run k is due in [t0 + k p, t0_hi + k p + 2 ticks]
 * (the clock before and after the arm or reset; the schedule's start and
 * the run's deadline each rounded up to a tick at most).  Skipped, and counted as such, when a call starts or ends
 * around the look (covered would not be this schedule's), or the run is
 * due already (kairos_remaining() says 0 or -EBUSY).  A queue's timer is
 * not looked at: a take puts it back on its schedule before its drainer's
 * call counts what it covered.
 */
static void check_periodic_schedule(struct lthread *t, uint32_t idx)
{
	struct slot *s = &S.slots[idx];
	uint64_t p, c, t0, lo, hi, nb, na, left = 0;
	uint32_t runs, skipped;
	int rc;

	if (atomic_load_explicit(&s->qno, memory_order_relaxed))
		return;
	/* Acquire: a call that has started is seen running, one that ended, its covered. */
	runs = atomic_load_explicit(&s->runs, memory_order_acquire);
	if (atomic_load_explicit(&s->running, memory_order_acquire))
		goto skipped;
	/*
	 * A call skipped during a reset that failed (-EBUSY: this schedule's
	 * call) or that set this schedule (the call may be its first): what
	 * it covered is not in covered, so this schedule is not checked.
	 */
	skipped = atomic_load_explicit(&s->sched_skipped, memory_order_relaxed);
	if (skipped && skipped + 1 >= s->sched_base)
		goto skipped;
	c = atomic_load_explicit(&s->covered, memory_order_relaxed);
	t0 = atomic_load_explicit(&s->t0, memory_order_relaxed);
	p = atomic_load_explicit(&s->period, memory_order_relaxed);
	nb = service_now();
	rc = kairos_remaining(S.k, s->id, &left);
	na = service_now();
	count(t, A_REMAINING, rc);
	if (rc != 0 && rc != -EBUSY) {
		violation(V_RC, "slot %" PRIu32 ": kairos_remaining of running periodic timer %#"
			  PRIx64 " returned %d (%s)", idx, s->id, rc, strerror(-rc));
		return;
	}
	/*
	 * A call counted before it was marked running (deliver()) may have
	 * passed the first look and ended since: its covered moved.
	 */
	if (atomic_load_explicit(&s->runs, memory_order_acquire) != runs ||
	    atomic_load_explicit(&s->running, memory_order_acquire) || rc || !left ||
	    atomic_load_explicit(&s->covered, memory_order_relaxed) != c)
		goto skipped;
	t->t.pscheds++;
	lo = t0 + (c + 1) * p;
	hi = s->t0_hi + (c + 1) * p + 2 * S.cfg.tick_ns;
	/* The next run is at nb + left at the earliest, na + left at the latest. */
	if (nb + left > hi) {
		uint64_t gap = nb + left - hi;

		violation(V_CALLBACK, "slot %" PRIu32 ": periodic timer %#" PRIx64 " (period %" PRIu64
			  " ns): its calls covered %" PRIu64 " periods, but its next run is %" PRIu64
			  " ns past period %" PRIu64 "'s latest deadline (about %" PRIu64
			  " periods lost)", idx, s->id, p, c, gap, c + 1, (gap + p / 2) / p);
	} else if (na + left < lo) {
		violation(V_EARLY, "slot %" PRIu32 ": periodic timer %#" PRIx64 " (period %" PRIu64
			  " ns): its next run is due %" PRIu64 " ns before period %" PRIu64
			  "'s deadline", idx, s->id, p, lo - (na + left), c + 1);
	}
	return;
skipped:
	t->t.pscheds_skipped++;
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
	if (!(s->oflags & O_STOPPING) && !(atomic_load_explicit(&s->sched, memory_order_relaxed) & 1))
		check_periodic_schedule(t, idx);
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
	case M_KEY:
		key_step(t);
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
		t->rng.s = S.cfg.seed ^ (UINT64_C(0x5851f42d4c957f2d) * (i + 1));
		t->per_target = pper + (i < pextra);
		t->live = malloc(sizeof(*t->live) * n);
		t->per = malloc(sizeof(*t->per) * n);
		t->fq = malloc(sizeof(*t->fq) * n);
		t->kheld = calloc(S.cfg.keys ? S.cfg.keys : 1, sizeof(*t->kheld));
		if (!t->live || !t->per || !t->fq || !t->kheld)
			return -ENOMEM;
		for (uint32_t j = 0; j < n; j++)
			fq_push(t, t->lo + j);
	}
	return keys_setup();
}

/* ---- the queues' drainers ----------------------------------------------------- */

void sleep_ns(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / NS_PER_S), (long)(ns % NS_PER_S) };

	nanosleep(&ts, NULL);
}

/* A run or take failed with @rc: -ESHUTDOWN is the end once kairos_destroy has begun. */
static int drainer_failed(struct qdrainer *d, const char *fn, int rc)
{
	if (rc == -ESHUTDOWN && atomic_load_explicit(&S.destroying, memory_order_acquire))
		return rc;
	violation(V_RC, "queue %u: %s returned %d (%s)", d->no, fn, rc, strerror(-rc));
	/* Not a loop of failures: the load goes on, the violation stands. */
	sleep_ns(NS_PER_MS);
	return rc;
}

/* Runs up to @max callbacks, and checks that the count returned is the count made. */
static int drainer_run(struct qdrainer *d, unsigned max)
{
	int rc;

	d->run_cb = 0;
	rc = kairos_queue_run(d->q, max);
	atomic_store_explicit(&d->run_calls, d->run_calls + 1, memory_order_relaxed);
	if (rc < 0)
		return drainer_failed(d, "kairos_queue_run", rc);
	if ((unsigned)rc > max || (uint64_t)rc != d->run_cb)
		violation(V_QUEUE, "queue %u: kairos_queue_run(max %u) returned %d, and %" PRIu64
			  " callbacks ran", d->no, max, rc, d->run_cb);
	if (!rc)
		d->run_empty++;
	return rc;
}

/*
 * Takes up to @max entries, waiting up to @timeout_ns, and checks each as
 * a callback.  @tseq is odd from before the take until the checks are done
 * (see queue_fence()).
 */
static int drainer_take(struct qdrainer *d, unsigned max, int64_t timeout_ns)
{
	uint32_t seq = atomic_load_explicit(&d->tseq, memory_order_relaxed);
	uint64_t now;
	int rc;

	/* seq_cst: before the library's accesses of the take. */
	atomic_store_explicit(&d->tseq, seq + 1, memory_order_seq_cst);
	rc = kairos_queue_take(d->q, d->out, max, timeout_ns);
	now = now_ns();
	for (int i = 0; i < rc && i < (int)max; i++) {
		if ((uint32_t)(uintptr_t)d->out[i].arg >= S.cfg.timers) {
			violation(V_QUEUE, "queue %u: entry of timer %#" PRIx64 " taken with an arg"
				  " that no arm gave", d->no, d->out[i].id);
			continue;
		}
		deliver(d->out[i].arg, d->out[i].id, d->out[i].status, now, d, &d->out[i]);
	}
	/* Release: the checks before an owner's queue_fence() sees them done. */
	atomic_store_explicit(&d->tseq, seq + 2, memory_order_release);
	atomic_store_explicit(&d->take_calls, d->take_calls + 1, memory_order_relaxed);
	if (rc < 0)
		return drainer_failed(d, "kairos_queue_take", rc);
	if ((unsigned)rc > max)
		violation(V_QUEUE, "queue %u: kairos_queue_take(max %u) returned %d", d->no, max,
			  rc);
	if (!rc)
		d->take_empty++;
	return rc;
}

/* Waits up to @ms for the queue's fd to be readable. */
static void drainer_poll(struct qdrainer *d, int ms)
{
	struct pollfd pfd = { .fd = kairos_queue_fd(d->q), .events = POLLIN };

	if (pfd.fd < 0) {
		violation(V_QUEUE, "queue %u: kairos_queue_fd returned %d", d->no, pfd.fd);
		sleep_ns((uint64_t)ms * NS_PER_MS);
		return;
	}
	d->polls++;
	if (poll(&pfd, 1, ms) > 0 && (pfd.revents & POLLIN))
		d->polls_ready++;
}

/*
 * A busy loop: 2..25 ms without a call, so that entries wait untaken and
 * periodic ones coalesce.  @pause is odd meanwhile (see paused_call()).
 */
static void drainer_pause(struct qdrainer *d)
{
	uint32_t p = atomic_load_explicit(&d->pause, memory_order_relaxed);
	uint64_t len = 2 * NS_PER_MS + rng_next(&d->rng) % (23 * NS_PER_MS), t0 = now_ns();

	/* Release: what this thread checked before, for an owner that sees it odd. */
	atomic_store_explicit(&d->pause, p + 1, memory_order_release);
	sleep_ns(len);
	/* seq_cst: before the next call's accesses. */
	atomic_store_explicit(&d->pause, p + 2, memory_order_seq_cst);
	d->pauses++;
	d->paused_ns += now_ns() - t0;
}

/* When the next pause begins: 50..250 ms from now. */
static uint64_t pause_next(struct qdrainer *d)
{
	return now_ns() + 50 * NS_PER_MS + rng_next(&d->rng) % (200 * NS_PER_MS);
}

/*
 * drain_main - a queue's drainer.  During the load it waits on the fd
 * (poll) or in a take, and runs or takes batches of 1..64, pausing every
 * 50..250 ms.  After the load the drainer of a queue destroyed first
 * stops, leaving what waits and what expires later to
 * kairos_queue_destroy(); the others keep draining, blocked in takes
 * without a limit too, until kairos_destroy() ends them (-ESHUTDOWN).
 */
void *drain_main(void *arg)
{
	struct qdrainer *d = arg;
	uint64_t next_pause = pause_next(d);

	tl_drainer = d;
	while (!atomic_load_explicit(&d->wind_down, memory_order_acquire)) {
		unsigned max = 1 + rng_below(&d->rng, QTAKE_MAX);

		if (now_ns() >= next_pause) {
			drainer_pause(d);
			next_pause = pause_next(d);
			continue;
		}
		switch (rng_below(&d->rng, 4)) {
		case 0:		/* the event loop: the fd, then run */
			drainer_poll(d, 2);
			drainer_run(d, max);
			break;
		case 1:		/* run whatever waits, without waiting */
			if (!drainer_run(d, max))
				drainer_poll(d, 1);
			break;
		case 2:		/* the fd, then take what waits */
			drainer_poll(d, 2);
			drainer_take(d, max, 0);
			break;
		default:	/* a delay queue: take, waiting up to 2 ms */
			drainer_take(d, max, (int64_t)((1 + rng_below(&d->rng, 2)) * NS_PER_MS));
			break;
		}
	}
	if (d->destroy_first) {
		/*
		 * A loop thread that stops and leaves its queue: what waits
		 * there, and what expires later, kairos_queue_destroy() ends
		 * unrun; an entry that a reset withdrew while it waited is
		 * armed again and ends at its new deadline (sweep_unrun()).
		 */
		return NULL;
	}
	for (;;) {
		int rc;

		if (rng_below(&d->rng, 2)) {
			rc = drainer_take(d, QTAKE_MAX, -1);
		} else {
			drainer_poll(d, 5);
			rc = drainer_run(d, QTAKE_MAX);
		}
		if (rc < 0)
			return NULL;
	}
}

/* Creates the queues; their drainers are started with the load. */
int queues_setup(void)
{
	int rc;

	if (!S.cfg.queues)
		return 0;
	S.qd = aligned_alloc(ST_ALIGN, sizeof(*S.qd) * S.cfg.queues);
	if (!S.qd)
		return -ENOMEM;
	memset(S.qd, 0, sizeof(*S.qd) * S.cfg.queues);
	for (unsigned i = 0; i < S.cfg.queues; i++) {
		struct qdrainer *d = &S.qd[i];

		d->no = i;
		d->rng.s = S.cfg.seed ^ (UINT64_C(0x2545f4914f6cdd1d) * (i + 1));
		d->destroy_first = S.cfg.queue_end == QE_BEFORE ||
				   (S.cfg.queue_end == QE_MIXED && (i & 1));
		rc = kairos_queue_create(S.k, &d->q);
		if (rc)
			return rc;
		d->shard = kairos_queue_shard(d->q);
		/* Queue n (from 1) is on shard (n - 1) % shards: this one is number i + 1. */
		if (d->shard != (int)(i % S.nshards))
			violation(V_QUEUE, "queue %u is on shard %d, not %u", i, d->shard,
				  i % S.nshards);
	}
	return 0;
}

/* ---- after kairos_destroy() ----------------------------------------------- */

/*
 * Whether slot @idx's timer, which neither ran nor was drained with a
 * callback, ended unrun in its queue, destroyed before kairos_destroy():
 * waiting there, or expiring into it later.  Either way it had expired, so
 * not before its deadline: a timer still armed for a destroyed queue (one
 * that a reset withdrew from it and armed again included) goes on until it
 * expires or kairos_destroy() drains it, with a callback.  Counted per
 * queue for the cross-check.
 */
static bool sweep_unrun(struct lthread *t, uint32_t idx)
{
	struct slot *s = &S.slots[idx];
	uint32_t qno = atomic_load_explicit(&s->qno, memory_order_relaxed);
	uint64_t end = S.destroy_start + S.destroy_ns;

	if (!qno || !S.qd[qno - 1].destroy_first)
		return false;
	if (s->kind == K_ONESHOT && s->bound > end) {
		char early[32];

		fmt_ns(early, sizeof(early), s->bound - end);
		violation(V_QUEUE, "slot %" PRIu32 ": one-shot timer %#" PRIx64 " of queue %" PRIu32
			  " ended unrun, without the drain's callback, %s before its deadline:"
			  " ended by kairos_queue_destroy though armed (or re-armed by a reset)",
			  idx, s->id, qno - 1, early);
	}
	S.qd[qno - 1].unrun++;
	t->t.qunrun++;
	slot_free(t, idx, E_DRAINED);
	return true;
}

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
			/* A shared key's timer may have been moved later by another thread. */
			if (!(s->oflags & O_SHARED))
				check_overdue(t, idx, s->bound);
			slot_free(t, idx, E_DRAINED);
			return;
		}
		if (!runs && !drains && sweep_unrun(t, idx))
			return;
		if (!runs && !drains && (s->oflags & O_SHARED)) {
			key_sweep(t, idx);
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
		if (!drains && sweep_unrun(t, idx))
			return;
		violation(V_LOST, "slot %" PRIu32 ": periodic timer %#" PRIx64 " %s (drains %" PRIu32
			  ", never cancelled)", idx, s->id, drains ? "drained twice" : "never ended",
			  drains);
		slot_free(t, idx, E_NONE);
		return;
	default:
		break;
	}
	/*
	 * Ended earlier: what the counters say must not have changed since.
	 * What the calls' own checks reported is not counted again: a call
	 * or a drain that saw the end's flag (stored before kairos_destroy()
	 * began) had its violation and left @runs as it was, and a one-shot
	 * timer's second call was reported as it started.
	 */
	switch (s->last_end) {
	case E_CANCELLED:
	case E_STOPPED:
		/*
		 * A keyed or shared-key timer's end has no count of its own
		 * (slot_free_at()): a one-shot's run that its flag check did
		 * not see is one after its cancel returned 0.
		 */
		if (!s->runs_end && s->last_end == E_CANCELLED && runs &&
		    !(atomic_load(&s->cur) & F_PERIODIC))
			violation(V_AFTER_CANCEL, "slot %" PRIu32 ": keyed one-shot timer %#" PRIx64
				  " cancelled (a cancel returned 0) but also ran %" PRIu32 " times",
				  idx, s->id, runs);
		end_check(s, atomic_load(&s->cur));
		break;
	case E_FIRED:
		/* Drained after it ran, with no flag to tell the drain's check. */
		if (drains && !(atomic_load(&s->cur) & F_NO_START))
			violation(V_TWICE, "slot %" PRIu32 ": one-shot timer %#" PRIx64
				  " ran and was drained %" PRIu32 " times", idx, s->id, drains);
		break;
	case E_KEYED:
	case E_REFUSED:
		if (runs || (drains && !(atomic_load(&s->cur) & F_KEYED)))
			violation(V_KEY, "slot %" PRIu32 ": timer %#" PRIx64 " %s, but ran %" PRIu32
				  " times and was drained %" PRIu32 " times", idx, s->id,
				  end_name(s->last_end), runs, drains);
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

/* Every field of a tally is a count to add up, but the two maxima. */
void tally_sum(struct tally *out)
{
	uint64_t sum[sizeof(*out) / sizeof(uint64_t)] = { 0 }, one[sizeof(sum) / sizeof(sum[0])];

	_Static_assert(sizeof(sum) == sizeof(*out), "a tally holds uint64_t fields only");
	for (unsigned i = 0; i < S.cfg.threads; i++) {
		memcpy(one, &S.th[i].t, sizeof(one));
		for (size_t k = 0; k < sizeof(sum) / sizeof(sum[0]); k++)
			sum[k] += one[k];
	}
	memcpy(out, sum, sizeof(*out));
	out->late_pending_max = out->overdue_max = 0;
	for (unsigned i = 0; i < S.cfg.threads; i++) {
		const struct tally *t = &S.th[i].t;

		if (t->late_pending_max > out->late_pending_max)
			out->late_pending_max = t->late_pending_max;
		if (t->overdue_max > out->overdue_max)
			out->overdue_max = t->overdue_max;
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

uint64_t ops_total(const uint64_t ops[A_N])
{
	uint64_t n = 0;

	for (unsigned a = 0; a < A_N; a++)
		n += ops[a];
	return n;
}

void ops_sum(uint64_t totals[A_N], uint64_t rc[A_N][RC_N], uint64_t stale[A_N])
{
	memset(totals, 0, sizeof(uint64_t) * A_N);
	for (unsigned i = 0; i < S.cfg.threads; i++)
		for (unsigned a = 0; a < A_N; a++) {
			totals[a] += atomic_load_explicit(&S.th[i].ops[a], memory_order_relaxed);
			if (!rc)
				continue;
			stale[a] += S.th[i].stale[a];
			for (unsigned r = 0; r < RC_N; r++)
				rc[a][r] += S.th[i].rc[a][r];
		}
}
