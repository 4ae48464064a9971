/* SPDX-License-Identifier: MIT */
/*
 * shard.c - one shard: its thread, wheel, inbox, timerfd and expiry.
 *
 * The loop, once per wake-up:
 *   1. mark itself awake (sleep_tick = 0: posters need not wake it);
 *   2. take the whole inbox and make the wheel agree with each record;
 *   3. read the clock once, advance the wheel, hand due records to workers;
 *   4. arm the timerfd (absolute time) if the next visit moved earlier;
 *   5. publish the tick it sleeps until, look at the inbox once more, and
 *      block in the backend until the timerfd or the wake eventfd fires.
 * A posted deadline earlier than sleep_tick wakes the shard through its
 * eventfd; all others wait for the next pass.  Nothing is polled: an idle
 * shard sleeps with its timerfd disarmed.
 */
#define _LGPL_SOURCE
#include <urcu-bp.h>

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "clock.h"
#include "internal.h"

static struct rec *rec_of(struct wheel_timer *t)
{
	return (struct rec *)(void *)t;	/* wt is the first member */
}

/* Posts that wake a sleeping shard even when no deadline moved earlier. */
#define SHARD_POST_BATCH	1024
/*
 * Posts a shard may be behind before posters wait for it: 64 Ki records,
 * 4 MiB.  Without a bound, threads that outnumber the cores can post faster
 * than a shard thread gets CPU to drain, and every record they arm and
 * cancel stays out of the pool: memory grows until arms fail.
 */
#define SHARD_POST_LIMIT	65536

/*
 * Holds a poster back until its shard has taken the inbox.  Called inside
 * the poster's RCU read-side section, which only delays reclamation: the
 * shard keeps draining until destroy has waited for this call.
 */
static void post_backoff(struct shard *s)
{
	uint32_t seq;

	shard_wake(s);
	/* seq_cst pairs with the shard's bump of drain_seq and load of waiters. */
	atomic_fetch_add_explicit(&s->drain_waiters, 1, memory_order_seq_cst);
	seq = atomic_load_explicit(&s->drain_seq, memory_order_seq_cst);
	while (atomic_load_explicit(&s->inbox_posts, memory_order_relaxed) >= SHARD_POST_LIMIT &&
	       atomic_load_explicit(&s->drain_seq, memory_order_acquire) == seq)
		futex_wait32(&s->drain_seq, seq);
	atomic_fetch_sub_explicit(&s->drain_waiters, 1, memory_order_relaxed);
}

kairos_id shard_rec_id(struct shard *s, struct rec *r, uint64_t state)
{
	return id_make(st_gen(state), s->index, table_index(s, r));
}

void shard_post(struct shard *s, struct rec *r, uint64_t tick)
{
	struct rec *old = atomic_load_explicit(&s->inbox, memory_order_relaxed);
	uint64_t n, sleep;

	do {
		__atomic_store_n(&r->inbox_next, old, __ATOMIC_RELAXED);
		/* Release: the record's fields before it is visible on the inbox. */
	} while (!atomic_compare_exchange_weak_explicit(&s->inbox, &old, r,
							memory_order_seq_cst,
							memory_order_relaxed));
	/*
	 * seq_cst on the push and on this load pairs with the shard's seq_cst
	 * store of sleep_tick and its load of the inbox: either the shard sees
	 * this record before it sleeps, or this thread sees the tick it sleeps
	 * until and wakes it.
	 */
	sleep = atomic_load_explicit(&s->sleep_tick, memory_order_seq_cst);
	if (tick < sleep)
		goto wake;
	/*
	 * Posts that need no early wake (a later deadline, a cancel) still
	 * hold records the pool cannot reuse until the shard drains them.
	 * A sleeping shard is woken every SHARD_POST_BATCH of them, so the
	 * backlog stays bounded and small without a wake-up per cancel.  The
	 * count is approximate (racing posters may lose increments): it only
	 * paces wake-ups.
	 */
	n = atomic_load_explicit(&s->inbox_posts, memory_order_relaxed) + 1;
	atomic_store_explicit(&s->inbox_posts, n, memory_order_relaxed);
	/* The shard itself (inline callbacks) must never wait for itself. */
	if (n >= SHARD_POST_LIMIT && tls_shard != s) {
		post_backoff(s);
		return;
	}
	if (n < SHARD_POST_BATCH || sleep == 0)
		return;
wake:
	shard_wake(s);
}

void shard_wake(struct shard *s)
{
	/* One eventfd write per sleep: the shard clears wake_pending when it wakes. */
	if (!atomic_exchange_explicit(&s->wake_pending, 1, memory_order_acq_rel)) {
		uint64_t one = 1;

		if (write(s->efd, &one, sizeof(one)) != sizeof(one) && errno != EAGAIN)
			kairos_die("eventfd write");
	}
}

/*
 * Ends record @r whose state word was @old: wakes cancel_sync waiters, counts
 * it out of pending, and retires it.  The caller counted how it ended.
 */
void shard_end(struct shard *s, struct rec *r, uint64_t old)
{
	if (old & ST_WAITERS)
		state_wake(&r->state);
	atomic_fetch_sub_explicit(&s->stats.pending, 1, memory_order_relaxed);
	if (s->k->cfg.max_timers)
		atomic_fetch_sub_explicit(&s->k->total_pending, 1, memory_order_relaxed);
	if (r->wt.where != WHEEL_NONE)
		kairos_die("ended record still in the wheel");
	table_retire(s->k, s, r);
}

/* Makes the wheel agree with one posted record. */
static void inbox_one(struct shard *s, struct rec *r)
{
	uint64_t old = atomic_fetch_and_explicit(&r->state, ~(ST_QUEUED | ST_REBASE),
						 memory_order_acq_rel);

	switch (st_of(old)) {
	case ST_PENDING:
	case ST_RESETTING:
		/*
		 * A RESETTING record is mid-store; the resetter posts again if
		 * it moves the deadline earlier, and the wheel re-checks the
		 * deadline before anything fires, so filing it now is safe.
		 */
		if (old & ST_REBASE) {
			struct rec_period *p = table_period(s, table_index(s, r));

			p->next_ns = clock_tick_ns(__atomic_load_n(&r->wt.deadline, __ATOMIC_RELAXED),
						   s->k->cfg.tick_ns);
		}
		if (r->wt.where == WHEEL_NONE)
			wheel_insert(&s->wheel, &r->wt);
		else
			wheel_refresh(&s->wheel, &r->wt);
		break;
	case ST_CANCELLED:
		if (r->wt.where != WHEEL_NONE)
			wheel_del(&s->wheel, &r->wt);
		/* The canceller counted it; only the record is left to retire. */
		table_retire(s->k, s, r);
		break;
	default:
		/* Posts are made only from PENDING; anything else is corruption. */
		kairos_die("posted record in an impossible state");
	}
}

static void inbox_drain(struct shard *s)
{
	struct rec *list, *rev = NULL;

	if (!atomic_load_explicit(&s->inbox, memory_order_relaxed))
		return;
	/* Acquire pairs with the posters' release. */
	list = atomic_exchange_explicit(&s->inbox, NULL, memory_order_acquire);
	atomic_store_explicit(&s->inbox_posts, 0, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->drain_seq, 1, memory_order_seq_cst);
	if (atomic_load_explicit(&s->drain_waiters, memory_order_seq_cst))
		futex_wake32(&s->drain_seq, INT_MAX);
	/* The stack is newest first; reverse it so equal deadlines keep post order. */
	while (list) {
		struct rec *next = __atomic_load_n(&list->inbox_next, __ATOMIC_RELAXED);

		/* Atomic like every other access: a stale popper may read it. */
		__atomic_store_n(&list->inbox_next, rev, __ATOMIC_RELAXED);
		rev = list;
		list = next;
	}
	while (rev) {
		struct rec *next = __atomic_load_n(&rev->inbox_next, __ATOMIC_RELAXED);

		inbox_one(s, rev);
		rev = next;
	}
}

/* Queues one expired record for delivery (or runs it, inline). */
static void deliver(struct shard *s, struct rec *r, uint64_t state, uint64_t deadline_ns, int status)
{
	struct delivery d = {
		.r = r,
		.id = shard_rec_id(s, r, state),
		.deadline_ns = deadline_ns,
		.status = status,
	};

	if (s->k->cfg.delivery == KAIROS_DELIVER_INLINE) {
		worker_deliver(s->k, s, &d);
		return;
	}
	if (s->dlen == s->dcap) {
		size_t cap = s->dcap ? s->dcap * 2 : 256;
		struct delivery *b = realloc(s->dbatch, cap * sizeof(*b));

		if (!b)
			kairos_die("out of memory for a delivery batch");
		s->dbatch = b;
		s->dcap = cap;
	}
	s->dbatch[s->dlen++] = d;
}

/*
 * Decides one due record: fire it, re-file it (its deadline was pushed
 * later), or defer it (a post or a resetter holds it).
 */
static void expire_one(struct shard *s, struct rec *r)
{
	uint64_t tick_ns = s->k->cfg.tick_ns;
	/* Acquire pairs with a resetter's release of the new deadline. */
	uint64_t old = atomic_load_explicit(&r->state, memory_order_acquire);

	for (;;) {
		uint64_t deadline, deadline_ns;
		int status = 1;

		if ((old & ST_QUEUED) || st_of(old) == ST_RESETTING) {
			/*
			 * Its post (or the resetter's store) is handled first.  The
			 * record may be on the inbox already, so it is kept on the
			 * wheel link, which wheel_pop() left free.
			 */
			r->wt.link.next = s->deferred ? &s->deferred->wt.link : NULL;
			s->deferred = r;
			return;
		}
		if (st_of(old) != ST_PENDING)
			kairos_die("due record in an impossible state");
		deadline = __atomic_load_n(&r->wt.deadline, __ATOMIC_RELAXED);
		if (wheel_fire_tick(deadline, r->wt.slack) > s->wheel.curr) {
			/* Pushed later by a store: back in, at its new place. */
			wheel_insert(&s->wheel, &r->wt);
			return;
		}
		deadline_ns = clock_tick_ns(deadline, tick_ns);
		if (old & ST_PERIODIC) {
			struct rec_period *p = table_period(s, table_index(s, r));
			uint64_t late = s->now_ns - p->next_ns;

			/* Only this thread and the running worker touch next_ns. */
			if (s->now_ns < p->next_ns)
				late = 0;
			status = (int)(late / p->period_ns + 1 > INT32_MAX ? INT32_MAX
								      : late / p->period_ns + 1);
			deadline_ns = p->next_ns;
			p->next_ns += (uint64_t)status * p->period_ns;
		}
		/* The version in @old makes this fail after any reset or cancel. */
		if (atomic_compare_exchange_strong_explicit(&r->state, &old,
							    st_with(old, ST_FIRING),
							    memory_order_acq_rel,
							    memory_order_acquire)) {
			deliver(s, r, old, deadline_ns, status);
			return;
		}
		if (old & ST_PERIODIC) {
			/* Undo the period step; the next attempt redoes it. */
			struct rec_period *p = table_period(s, table_index(s, r));

			p->next_ns = deadline_ns;
		}
		if (st_of(old) == ST_CANCELLED && !(old & ST_QUEUED))
			kairos_die("cancelled record not posted");
	}
}

static void expire(struct shard *s)
{
	struct wheel_timer *t;

	while ((t = wheel_pop(&s->wheel)))
		expire_one(s, rec_of(t));
	/* Deferred records go back on the due list for the next pass. */
	while (s->deferred) {
		struct rec *r = s->deferred;

		s->deferred = r->wt.link.next ? rec_of((struct wheel_timer *)(void *)r->wt.link.next) : NULL;
		wheel_insert(&s->wheel, &r->wt);
	}
	if (s->dlen) {
		dqueue_push(&s->dq, s->dbatch, s->dlen);
		s->dlen = 0;
	}
}

/* Arms the timerfd for @tick if that is earlier than what it is armed for. */
static void arm_timer(struct shard *s, uint64_t tick)
{
	struct itimerspec its = { 0 };
	uint64_t ns;

	if (tick >= s->timer_tick)
		return;
	ns = clock_tick_ns(tick, s->k->cfg.tick_ns);
	if (ns == 0)
		ns = 1;		/* 0 would disarm it */
	its.it_value.tv_sec = (time_t)(ns / 1000000000u);
	its.it_value.tv_nsec = (long)(ns % 1000000000u);
	if (timerfd_settime(s->tfd, TFD_TIMER_ABSTIME, &its, NULL))
		kairos_die("timerfd_settime");
	s->timer_tick = tick;
	atomic_fetch_add_explicit(&s->stats.timer_sets, 1, memory_order_relaxed);
}

/* One pass: inbox, clock, wheel, delivery, timer. Returns the next visit. */
static uint64_t pass(struct shard *s)
{
	inbox_drain(s);
	s->now_ns = clock_now_ns(s->k->cfg.clock);
	wheel_advance(&s->wheel, clock_tick_floor(s->now_ns, s->k->cfg.tick_ns));
	expire(s);
	return wheel_next(&s->wheel);
}

static void *shard_main(void *arg)
{
	struct shard *s = arg;
	struct kairos *k = s->k;
	unsigned spins = 0;

	tls_service = k;
	tls_shard = s;
	s->init_rc = s->ops->init(s);
	if (s->init_rc && s->ops == &backend_uring_ops && s->want == KAIROS_BACKEND_AUTO &&
	    (s->init_rc == -ENOSYS || s->init_rc == -EPERM || s->init_rc == -EACCES)) {
		/* io_uring refused (seccomp, io_uring_disabled, old kernel): fall back. */
		snprintf(s->why_buf, sizeof(s->why_buf),
			 "io_uring refused by the kernel (%s); using epoll + timerfd",
			 strerror(-s->init_rc));
		s->backend_why = s->why_buf;
		s->ops = &backend_epoll_ops;
		s->init_rc = s->ops->init(s);
	}
	/* Tells kairos_create the outcome (it waits on init_done). */
	atomic_store_explicit(&s->init_done, 1, memory_order_release);
	futex_wake32(&s->init_done, 1);
	if (s->init_rc)
		return NULL;

	while (!atomic_load_explicit(&s->stop, memory_order_acquire)) {
		uint64_t next;
		int ev;

		atomic_store_explicit(&s->sleep_tick, 0, memory_order_seq_cst);
		next = pass(s);
		if (next <= s->wheel.curr) {
			/* Only deferred records are due: their holders are mid-update. */
			cpu_relax_n(&spins);
			continue;
		}
		spins = 0;
		if (next != UINT64_MAX)
			arm_timer(s, next);
		atomic_store_explicit(&s->sleep_tick, s->timer_tick, memory_order_seq_cst);
		if (atomic_load_explicit(&s->inbox, memory_order_seq_cst))
			continue;
		if (atomic_load_explicit(&s->stop, memory_order_acquire))
			break;
		ev = s->ops->wait(s);
		if (ev < 0)
			kairos_die("backend wait failed");
		atomic_fetch_add_explicit(&s->stats.wakeups, 1, memory_order_relaxed);
		if (ev & BK_TIMER)
			s->timer_tick = UINT64_MAX;	/* a one-shot timerfd disarms itself */
		if (ev & BK_WAKE)
			atomic_store_explicit(&s->wake_pending, 0, memory_order_release);
	}
	/* Leave no post behind: every record ends up in the wheel or retired. */
	inbox_drain(s);
	return NULL;
}

int shard_start(struct kairos *k, struct shard *s)
{
	const char *env = getenv("KAIROS_BACKEND");
	enum kairos_backend want = k->cfg.backend;
	int rc;

	s->tfd = timerfd_create(k->cfg.clock, TFD_CLOEXEC);
	if (s->tfd < 0)
		return -errno;
	s->efd = eventfd(0, EFD_CLOEXEC);
	if (s->efd < 0)
		return -errno;
	s->timer_tick = UINT64_MAX;
	atomic_init(&s->sleep_tick, 0);
	wheel_init(&s->wheel, clock_tick_floor(clock_now_ns(k->cfg.clock), k->cfg.tick_ns));
	if (want == KAIROS_BACKEND_AUTO && env && *env) {
		if (!strcmp(env, "epoll")) {
			want = KAIROS_BACKEND_EPOLL;
			s->backend_why = "epoll + timerfd forced by KAIROS_BACKEND=epoll";
		} else if (!strcmp(env, "uring")) {
			want = KAIROS_BACKEND_URING;
			s->backend_why = "io_uring forced by KAIROS_BACKEND=uring";
		} else if (strcmp(env, "auto")) {
			return -EINVAL;	/* a typo must not pass for a choice */
		}
	}
	if (want == KAIROS_BACKEND_EPOLL) {
		s->ops = &backend_epoll_ops;
		if (!s->backend_why)
			s->backend_why = "epoll + timerfd forced by the configuration";
	} else {
		s->ops = &backend_uring_ops;
		if (!s->backend_why)
			s->backend_why = want == KAIROS_BACKEND_URING
				? "io_uring forced by the configuration"
				: "io_uring available (probed at create)";
	}
	s->want = want;
	rc = -pthread_create(&s->thread, NULL, shard_main, s);
	if (rc)
		return rc;
	/* Wait for the thread to set up its backend. */
	while (!atomic_load_explicit(&s->init_done, memory_order_acquire))
		futex_wait32(&s->init_done, 0);
	if (s->init_rc) {
		if (pthread_join(s->thread, NULL))
			kairos_die("pthread_join");
		s->thread_joined = true;
		return s->init_rc;
	}
	return 0;
}

void shard_stop(struct shard *s)
{
	uint64_t one = 1;

	if (s->thread_joined)
		return;
	atomic_store_explicit(&s->stop, 1, memory_order_release);
	atomic_store_explicit(&s->wake_pending, 1, memory_order_relaxed);
	if (write(s->efd, &one, sizeof(one)) != sizeof(one))
		kairos_die("eventfd write");
	if (pthread_join(s->thread, NULL))
		kairos_die("pthread_join");
	s->thread_joined = true;
	s->ops->fini(s);
}

/* Ends one record still held at destroy: once, counted as drained. */
static void drain_one(struct kairos *k, struct shard *s, struct rec *r, int how, uint64_t *count)
{
	uint64_t old = atomic_load_explicit(&r->state, memory_order_acquire);
	unsigned st = st_of(old);

	if (st == ST_CANCELLED) {
		/* Cancelled while queued for a worker: the canceller counted it. */
		table_retire(k, s, r);
		return;
	}
	if (st != ST_PENDING && st != ST_FIRING)
		kairos_die("drained record in an impossible state");
	atomic_store_explicit(&r->state, st_with(old & ~ST_QUEUED, ST_DONE), memory_order_release);
	atomic_fetch_add_explicit(&s->stats.drained, 1, memory_order_relaxed);
	(*count)++;
	if (how == KAIROS_DRAIN_NOTIFY)
		r->fn(r->arg, shard_rec_id(s, r, old), -ECANCELED);
	shard_end(s, r, old);
}

/*
 * shard_drain - after the shard thread and its workers have stopped, ends
 * every record still in the wheel or the delivery queue.
 */
void shard_drain(struct kairos *k, struct shard *s, int how, uint64_t *count)
{
	struct wheel_timer *t;

	/* Queued deliveries first: they expired earliest. */
	for (size_t i = 0; i < s->dq.len; i++) {
		struct delivery *d = &s->dq.buf[(s->dq.head + i) % s->dq.cap];

		drain_one(k, s, d->r, how, count);
	}
	s->dq.len = 0;
	wheel_flush(&s->wheel);
	while ((t = wheel_pop(&s->wheel)))
		drain_one(k, s, rec_of(t), how, count);
}

void cpu_relax_n(unsigned *spins)
{
	if (++*spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
		__builtin_ia32_pause();
#endif
		return;
	}
	sched_yield();
}
