/* SPDX-License-Identifier: MIT */
/*
 * kairos.c - the public API: create and destroy, and the per-timer calls.
 *
 * Every call that may touch a record runs inside an RCU read-side critical
 * section (bulletproof flavour: callers need not register, and threads that
 * exit are cleaned up by liburcu).  That keeps three promises: a record
 * looked up cannot be reused before the call is done with it; a call that
 * saw the service alive finishes before kairos_destroy() tears it down; and
 * no call takes a lock.
 */
#include "rcu.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "clock.h"
#include "fault.h"
#include "internal.h"
#include "jitter.h"
#include "key.h"
#include "table.h"
#include "timer.h"

/*
 * Every service, live or destroyed, is on one of two lists under svc_lock:
 * destroyed headers stay so that later calls can say -ESHUTDOWN (the lists
 * keep them reachable, so leak checkers see a deliberate keep: one header
 * for each service the process ever created, as kairos_destroy(3) says),
 * and a child of fork() marks every live service of its parent dead.
 */
static pthread_mutex_t svc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct kairos *live_list, *dead_list;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void svc_lock_take(void)
{
	mutex_lock(&svc_lock);
}

static void svc_lock_drop(void)
{
	mutex_unlock(&svc_lock);
}

static void list_add(struct kairos **head, struct kairos *k)
{
	k->list_prev = NULL;
	k->list_next = *head;
	if (*head)
		(*head)->list_prev = k;
	*head = k;
}

static void list_del(struct kairos **head, struct kairos *k)
{
	if (k->list_prev)
		k->list_prev->list_next = k->list_next;
	else
		*head = k->list_next;
	if (k->list_next)
		k->list_next->list_prev = k->list_prev;
}

/*
 * fork(): the parent's services keep running in the parent; in the child
 * their threads do not exist, so every one of them is marked dead there
 * (calls return -ESHUTDOWN and nothing waits for a thread that is gone).
 * liburcu-bp's own hooks keep its locks consistent across the fork, so the
 * child can make and destroy services of its own even when a parent thread
 * was inside a grace period at the time.
 */
static void fork_prepare(void)
{
	svc_lock_take();
	clock_fork_lock();
	urcu_bp_before_fork();
}

static void fork_parent(void)
{
	urcu_bp_after_fork_parent();
	clock_fork_unlock();
	svc_lock_drop();
}

static void fork_child(void)
{
	urcu_bp_after_fork_child();
	clock_fork_unlock();
	ts_forget();
	for (struct kairos *k = live_list; k; k = k->list_next) {
		atomic_store_explicit(&k->dead, 1, memory_order_relaxed);
		atomic_store_explicit(&k->forked, 1, memory_order_relaxed);
	}
	/* Destroyed ones too: a parent thread may have held a queue lock of one. */
	for (struct kairos *k = dead_list; k; k = k->list_next)
		atomic_store_explicit(&k->forked, 1, memory_order_relaxed);
	svc_lock_drop();
}

static void fork_hooks(void)
{
	int err = pthread_atfork(fork_prepare, fork_parent, fork_child);

	if (err)
		kairos_die_err("pthread_atfork", err);
}

void service_event(struct kairos *k)
{
	/* Release: what the sleepers look at next was written before this. */
	atomic_fetch_add_explicit(&k->ev_seq, 1, memory_order_seq_cst);
	futex_wake32(&k->ev_seq, INT_MAX);
}

KAIROS_EXPORT void kairos_config_default(struct kairos_config *cfg)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	if (!cfg)
		return;
	memset(cfg, 0, sizeof(*cfg));
	cfg->shards = cpus < 1 ? 1 : cpus > (long)MAX_SHARDS ? MAX_SHARDS : (unsigned)cpus;
	cfg->workers = 2;
	cfg->tick_ns = 1000000;
	cfg->clock = CLOCK_MONOTONIC;
	cfg->delivery = KAIROS_DELIVER_WORKERS;
	cfg->backend = KAIROS_BACKEND_AUTO;
	cfg->ring_entries = 8;
}

/* Fills the zero fields of @cfg with defaults; -EINVAL for a bad field. */
static int config_fix(struct kairos_config *cfg)
{
	struct kairos_config def;

	kairos_config_default(&def);
	if (!cfg->shards)
		cfg->shards = def.shards;
	if (!cfg->workers)
		cfg->workers = def.workers;
	if (!cfg->tick_ns)
		cfg->tick_ns = def.tick_ns;
	if (!cfg->ring_entries)
		cfg->ring_entries = def.ring_entries;
	/*
	 * 0 is CLOCK_REALTIME's number, but a zero-filled config means "the
	 * default" everywhere: the wall clock jumps, so it is never accepted.
	 */
	if (!cfg->clock)
		cfg->clock = def.clock;
	if (cfg->shards > MAX_SHARDS || cfg->workers > 1024)
		return -EINVAL;
	/*
	 * Below 1 us a tick costs more in wake-ups than it buys in precision;
	 * above 1 s it is no timer any more (and near 2^64 nothing would fire).
	 */
	if (cfg->tick_ns < 1000 || cfg->tick_ns > 1000000000)
		return -EINVAL;
	if (cfg->clock != CLOCK_MONOTONIC && cfg->clock != CLOCK_BOOTTIME &&
	    cfg->clock != KAIROS_CLOCK_MANUAL)
		return -EINVAL;
	if (cfg->delivery != KAIROS_DELIVER_WORKERS && cfg->delivery != KAIROS_DELIVER_INLINE)
		return -EINVAL;
	if (cfg->backend != KAIROS_BACKEND_AUTO && cfg->backend != KAIROS_BACKEND_URING &&
	    cfg->backend != KAIROS_BACKEND_EPOLL)
		return -EINVAL;
	if (cfg->ring_entries > 4096)
		return -EINVAL;
	if (cfg->flags & ~(KAIROS_HUGE_PAGES | KAIROS_EXACT_CLOCK))
		return -EINVAL;
	/* Reserved for later fields whose 0 keeps today's behaviour. */
	for (size_t i = 0; i < sizeof(cfg->reserved) / sizeof(cfg->reserved[0]); i++)
		if (cfg->reserved[i])
			return -EINVAL;
	return 0;
}

static void pin(pthread_t t, unsigned cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu % CPU_SETSIZE, &set);
	/* Best effort: a CPU outside the cgroup's set just stays unpinned. */
	(void)pthread_setaffinity_np(t, sizeof(set), &set);
}

static void stats_collect(struct kairos *k, struct kairos_stats *out);

/*
 * Makes @k's shards, reclaimer and shard threads, in that order.  Each step
 * undoes its own partial work when it fails, and this ladder undoes the
 * steps before it, so a failure leaves no fd, thread or memory.  No timer
 * exists yet: nothing needs draining on the way down.  The workers come
 * later, with the first timer that needs them (staff()).
 */
static int start(struct kairos *k)
{
	unsigned made = 0, started = 0, n = k->nshards;
	int rc = 0;

	for (; made < n; made++) {
		rc = shard_new(k, made, &k->shards[made]);
		if (rc)
			goto undo_made;
	}
	rc = table_reclaimer_start(k);
	if (rc)
		goto undo_made;
	for (; started < n; started++) {
		rc = shard_start(k->shards[started]);
		if (rc)
			goto undo_started;
	}
	return 0;
undo_started:
	while (started--)
		shard_stop(k->shards[started]);
	table_reclaimer_stop(k);
undo_made:
	while (made--)
		shard_free(k->shards[made]);
	return rc;
}

/*
 * staff_slow - starts every shard's workers, once: the first arm of a timer
 * delivered to workers comes here, outside any read-side section (thread
 * creation may sleep).  A failure stops the workers it started and returns
 * the errno, so that arm fails with nothing left behind and the next one
 * tries again.  Under staff_lock, a service not yet dead is not yet past
 * the teardown's worker_stop(), which takes the lock too.
 */
static int staff_slow(struct kairos *k)
{
	unsigned staffed = 0;
	int rc = 0;

	/* A child of fork() must not take a lock a parent thread may have held. */
	if (atomic_load_explicit(&k->dead, memory_order_acquire))
		return -ESHUTDOWN;
	mutex_lock(&k->staff_lock);
	if (atomic_load_explicit(&k->staffed, memory_order_relaxed))
		goto out;
	if (atomic_load_explicit(&k->dead, memory_order_acquire)) {
		rc = -ESHUTDOWN;
		goto out;
	}
	for (; staffed < k->nshards; staffed++) {
		rc = worker_start(k, k->shards[staffed]);
		if (rc) {
			while (staffed--)
				worker_stop(k->shards[staffed]);
			goto out;
		}
		if (k->cfg.pin_cpus)
			for (unsigned w = 0; w < k->shards[staffed]->nworkers; w++)
				pin(k->shards[staffed]->workers[w], staffed);
	}
	atomic_store_explicit(&k->staffed, true, memory_order_release);
out:
	mutex_unlock(&k->staff_lock);
	return rc;
}

/* Makes sure @k's workers run before a timer for them is armed. */
static inline int staff(struct kairos *k)
{
	if (__builtin_expect(atomic_load_explicit(&k->staffed, memory_order_acquire), 1) ||
	    k->cfg.delivery == KAIROS_DELIVER_INLINE)
		return 0;
	return staff_slow(k);
}

/* Stops everything start() made; drains pending timers per @how. */
static uint64_t teardown(struct kairos *k, int how)
{
	uint64_t drained = 0;

	/* Queue drainers first: they hold records and post to shards. */
	queue_teardown_wait(k);
	/* Workers next: a periodic timer they re-arm lands in a live shard. */
	mutex_lock(&k->staff_lock);
	for (unsigned i = 0; i < k->nshards; i++)
		worker_stop(k->shards[i]);
	atomic_store_explicit(&k->staffed, false, memory_order_relaxed);
	mutex_unlock(&k->staff_lock);
	for (unsigned i = 0; i < k->nshards; i++)
		shard_stop(k->shards[i]);
	for (unsigned i = 0; i < k->nshards; i++)
		shard_drain(k, k->shards[i], how, &drained);
	queue_teardown_drain(k, how, &drained);
	table_reclaimer_stop(k);
	/* What the reclaimer had not freed yet: no section is left to add more. */
	queue_reap(k);
	/* Every timer has ended and given its key up. */
	key_teardown(k);
	/* Nothing runs any more: these are the service's last counters. */
	ts_lock(k);
	stats_collect(k, &k->final);
	ts_unlock(k);
	for (unsigned i = 0; i < k->nshards; i++)
		shard_free(k->shards[i]);
	free(k->shards);
	k->shards = NULL;
	return drained;
}

KAIROS_EXPORT int kairos_create(const struct kairos_config *cfg, struct kairos **out)
{
	struct kairos *k;
	int rc;

	if (!out)
		return -EINVAL;
	rc = pthread_once(&fork_once, fork_hooks);
	if (rc)
		kairos_die_err("pthread_once", rc);
	k = fault_hit() ? NULL : aligned_alloc(CACHELINE, sizeof(*k));
	if (!k)
		return -ENOMEM;
	memset(k, 0, sizeof(*k));
	rc = pthread_mutex_init(&k->thr_lock, NULL);
	if (!rc)
		rc = pthread_mutex_init(&k->q_lock, NULL);
	if (!rc)
		rc = pthread_mutex_init(&k->staff_lock, NULL);
	if (!rc)
		rc = pthread_mutex_init(&k->key_lock, NULL);
	if (rc)
		kairos_die_err("pthread_mutex_init", rc);	/* cannot fail with default attributes */
	if (cfg)
		k->cfg = *cfg;
	else
		kairos_config_default(&k->cfg);
	rc = config_fix(&k->cfg);
	if (!rc)
		rc = backend_choose(k);
	if (rc)
		goto fail;
	if (getrandom(&k->salt, sizeof(k->salt), GRND_NONBLOCK) != sizeof(k->salt))
		k->salt = (uint32_t)clock_now_ns(CLOCK_MONOTONIC) * 2654435761u;
	k->salt &= GEN_MASK;
	if (k->salt == 0)
		k->salt = 1;
	/*
	 * Slack timers read the counter clock where it serves the service's
	 * clock: slack of at least FAST_SLACK_MIN_NS in whole ticks (clock.h).
	 */
	if (service_manual(k))
		k->clock_why = "the service runs on the manual clock";
	else if (k->cfg.clock != CLOCK_MONOTONIC)
		k->clock_why = "the service clock is CLOCK_BOOTTIME";
	else if (k->cfg.flags & KAIROS_EXACT_CLOCK)
		k->clock_why = "KAIROS_EXACT_CLOCK is set";
	else if (fast_clock_usable(&k->clock_why)) {
		k->fast_ticks = (uint32_t)((FAST_SLACK_MIN_NS + k->cfg.tick_ns - 1) / k->cfg.tick_ns);
		k->fast_slack_ns = k->fast_ticks * k->cfg.tick_ns;
	}
	if (getrandom(&k->key_seed, sizeof(k->key_seed), GRND_NONBLOCK) != sizeof(k->key_seed))
		k->key_seed = clock_now_ns(CLOCK_MONOTONIC) * UINT64_C(0x9e3779b97f4a7c15) ^ k->salt;
	k->nshards = k->cfg.shards;
	k->shards = fault_calloc(k->nshards, sizeof(*k->shards));
	if (!k->shards) {
		rc = -ENOMEM;
		goto fail;
	}
	rc = start(k);
	if (rc)
		goto fail;
	if (k->cfg.pin_cpus)
		for (unsigned i = 0; i < k->nshards; i++)
			pin(k->shards[i]->thread, i);
	svc_lock_take();
	list_add(&live_list, k);
	svc_lock_drop();
	*out = k;
	return 0;
fail:
	pthread_mutex_destroy(&k->thr_lock);
	pthread_mutex_destroy(&k->q_lock);
	pthread_mutex_destroy(&k->staff_lock);
	pthread_mutex_destroy(&k->key_lock);
	free(k->shards);
	free(k);
	return rc;
}

KAIROS_EXPORT int kairos_destroy(struct kairos *k, int how)
{
	uint64_t drained;

	if (!k)
		return -EINVAL;
	if (in_service(k))
		return -EDEADLK;
	if (atomic_load_explicit(&k->dead, memory_order_acquire))
		return -ESHUTDOWN;
	if (how != KAIROS_DRAIN_DROP && how != KAIROS_DRAIN_NOTIFY)
		return -EINVAL;
	if (atomic_exchange_explicit(&k->dead, 1, memory_order_acq_rel))
		return -ESHUTDOWN;
	/* Arms held back for a full inbox look again, see the service dying. */
	service_event(k);
	/* Every call that saw the service alive has finished after this. */
	synchronize_rcu();
	rcu_tsan_calls_done();
	/* No call can use a thread's state now: fold the counts, drop the records. */
	ts_detach_all(k);
	drained = teardown(k, how);
	/* Release: the final counters before the flag that publishes them. */
	atomic_store_explicit(&k->final_valid, 1, memory_order_release);
	svc_lock_take();
	list_del(&live_list, k);
	list_add(&dead_list, k);
	svc_lock_drop();
	/* A cancel_sync that saw the service die waits for this (kairos.c). */
	service_event(k);
	return drained > INT32_MAX ? INT32_MAX : (int)drained;
}

#ifdef __SANITIZE_THREAD__
char rcu_tsan_calls;	/* rcu.h: what every call's section releases, for destroy */
#endif

/*
 * Enters a call: 0 inside a read-side section, or -ESHUTDOWN outside one.
 * Inlined into every call here; queue.c calls the external copy.
 */
__attribute__((always_inline)) inline int service_enter(struct kairos *k)
{
	rcu_read_lock();
	if (atomic_load_explicit(&k->dead, memory_order_acquire)) {
		rcu_read_unlock();
		return -ESHUTDOWN;
	}
	return 0;
}

__attribute__((always_inline)) inline void service_leave(void)
{
	rcu_tsan_call_end();
	rcu_read_unlock();
}

/*
 * Enters a call whose arguments, but for @k, are @valid or not: -EINVAL for
 * a NULL @k, -ESHUTDOWN for a destroyed one whatever else is wrong, then
 * -EINVAL for arguments not @valid; else 0 inside the section.  Inline in
 * each call: at 1e6 pending a call's length decides how many record misses
 * overlap (docs/BENCHMARKS.md), and the compiler kept it out of line once
 * kairos_cancel() grew.
 */
static inline __attribute__((always_inline)) int enter_valid(struct kairos *k, bool valid)
{
	int rc;

	if (!k)
		return -EINVAL;
	rc = service_enter(k);
	if (!rc && !valid) {
		service_leave();
		rc = -EINVAL;
	}
	return rc;
}

/*
 * The calling thread's state on @k, joined if need be, so that what the
 * call counts is the thread's own; NULL for a NULL or destroyed @k, or a
 * thread that cannot join.  Called before the read-side section: joining
 * may take a lock.
 */
static inline struct tstate *ts_join(struct kairos *k)
{
	return k && !atomic_load_explicit(&k->dead, memory_order_relaxed) ? ts_for(k) : NULL;
}

/*
 * Reserves a place under max_timers; false (and counted) when full.  The
 * count never goes past the cap, not even for a moment: an arm refused
 * while another ends never makes a third arm see a full service.
 */
static bool reserve(struct kairos *k)
{
	uint64_t max = k->cfg.max_timers, n;

	if (!max)
		return true;
	n = atomic_load_explicit(&k->total_pending, memory_order_relaxed);
	do {
		if (n >= max) {
			atomic_fetch_add_explicit(&k->rejected, 1, memory_order_relaxed);
			return false;
		}
	} while (!atomic_compare_exchange_weak_explicit(&k->total_pending, &n, n + 1,
							memory_order_relaxed, memory_order_relaxed));
	return true;
}

/*
 * How long one arm may wait for a shard that is SHARD_POST_LIMIT posts
 * behind, or whose records the reclaimer is behind on
 * (table_reclaim_behind()).
 * Bounded, so that no arm can wait forever (say, on a shard whose inline
 * callback is blocked on a lock the arming thread holds): past it the arm
 * goes ahead, and the backlog grows by at most one post (or one bundle of
 * records) per thread per wait.
 */
#define ARM_BACKOFF_NS	(10 * 1000000ull)

/*
 * Holds an arm back while shard @index of @k, or the reclaimer on its
 * records, is far behind, outside any read-side section: it sleeps on the
 * header's event count, which inbox_drain() and the reclaimer's passes
 * bump when they see a waiter, and looks again only after entering anew.
 */
static void arm_backoff(struct kairos *k, unsigned index)
{
	uint64_t deadline = clock_now_ns(CLOCK_MONOTONIC) + ARM_BACKOFF_NS, now;

	/* seq_cst pairs with inbox_drain()'s store of inbox_posts and load of ev_waiters. */
	atomic_fetch_add_explicit(&k->ev_waiters, 1, memory_order_seq_cst);
	for (;;) {
		uint32_t seq = atomic_load_explicit(&k->ev_seq, memory_order_seq_cst);
		bool behind;

		if (service_enter(k))
			break;
		behind = atomic_load_explicit(&k->shards[index]->inbox_posts,
					      memory_order_seq_cst) >= SHARD_POST_LIMIT ||
			 table_reclaim_behind(k->shards[index]);
		service_leave();
		now = clock_now_ns(CLOCK_MONOTONIC);
		if (!behind || now >= deadline ||
		    !futex_wait32_for(&k->ev_seq, seq, deadline - now))
			break;
	}
	atomic_fetch_sub_explicit(&k->ev_waiters, 1, memory_order_relaxed);
}

static int cancel(struct kairos *k, struct tstate *t, kairos_id id, uint64_t *seen);

/* Counts an arm (@n = 1) in the calling thread's own state, or takes it back (-1). */
static void arm_count(struct kairos *k, struct tstate *t, int n)
{
	if (t)
		atomic_store_explicit(&t->armed,
				      atomic_load_explicit(&t->armed, memory_order_relaxed) +
				      (uint64_t)(int64_t)n, memory_order_release);
	else
		atomic_fetch_add_explicit(&k->base.armed, (uint64_t)(int64_t)n,
					  memory_order_release);
}

/*
 * What an arm asks for beyond its deadline and callback: kairos_arm_opts()
 * fills it from its options, the shorthands from their arguments.
 */
struct arm_req {
	uint64_t period_ns;		/* 0: one-shot */
	uint64_t slack_ns;
	uint64_t jitter_ns;
	unsigned policy;		/* a periodic timer's KAIROS_PERIOD_* */
	bool replace;			/* KAIROS_KEY_REPLACE */
	struct kairos_queue *q;		/* NULL: the workers (or inline) */
	struct key_node *kn;		/* the key to take; freed here if the arm fails */
};

/* The shorthands' request: one-shot, exact, no key, no queue. */
static const struct arm_req plain_req;

/*
 * Arms a timer for @deadline_ns; called inside the read-side section.
 * @now_ns is the clock the deadline was taken from, UINT64_MAX when it was
 * given absolute (such a timer is never filed by value).  With @a->kn, the
 * timer takes that key (key.c); the caller frees it if this fails.
 * Inline in arm_entry(), and that in each entry point (see there).
 */
static inline __attribute__((always_inline)) int
arm(struct kairos *k, struct tstate *t, uint64_t now_ns, uint64_t deadline_ns,
    const struct arm_req *a, kairos_fn fn, void *arg, kairos_id *out, unsigned *behind,
    struct table_need *need)
{
	struct kairos_queue *q = a->q;
	struct key_node *kn = a->kn;
	struct rec_ext *e = NULL;
	struct shard *s;
	struct rec *r;
	uint32_t index, slack;
	uint64_t tick, fire;
	kairos_id id;
	uint32_t gen;
	bool far, pop, look;
	int rc;

	/*
	 * Under a cap, a keyed arm that finds its key held says so before it
	 * takes a place: one retried against a held key would otherwise hold
	 * a place for much of each try, and other arms be refused with a
	 * place free.  (Two arms racing for a free key still hold one each
	 * until the loser finds it taken, below.)
	 */
	if (kn && !a->replace && k->cfg.max_timers && key_held(k, kn))
		return -EEXIST;
	if (!reserve(k))
		return -EAGAIN;
	if (q) {
		s = k->shards[q->shard];
		/*
		 * A thread arms on the shard of the queue it arms for: a loop
		 * thread's timers, its queue and its free records stay on one
		 * shard.  Moving hands the records it holds back (once per move).
		 */
		if (t && t->s != s)
			ts_move(k, t, s);
	} else {
		s = t ? t->s : ts_pick(k);
	}
	pop = !t || !t->free;
	rc = table_alloc(k, s, t, &r, &index);
	if (rc) {
		if (k->cfg.max_timers)
			atomic_fetch_sub_explicit(&k->total_pending, 1, memory_order_relaxed);
		need->shard = s->index;	/* TABLE_EMPTY: the caller grows the pool */
		return rc;
	}
	/*
	 * The next arm takes a new bundle of free records: while the
	 * reclaimer is far behind, this one waits for it first, so that ended
	 * records do not outrun their reuse and the pool grow for them
	 * (table_reclaim_behind(); a look once per bundle: it reads lines
	 * other threads write).  A bundle that was handed back rather than
	 * used up (a thread that moves between shards or services) had no
	 * such look: the arm that pops the next one looks instead.  A shard
	 * thread never waits.
	 */
	look = !t || !t->free;
	if (t && pop) {
		look |= !t->looked;
		t->looked = false;
	}
	if (look && !tls_shard) {
		if (t)
			t->looked = true;
		if (table_reclaim_behind(s))
			*behind = s->index + 1;
	}
	tick = clock_tick_ceil(deadline_ns, k->cfg.tick_ns);
	r->fn = fn;
	r->arg = arg;
	/* Whole ticks only, rounded down: the window is never exceeded. */
	slack = a->slack_ns / k->cfg.tick_ns > UINT32_MAX
			? UINT32_MAX : (uint32_t)(a->slack_ns / k->cfg.tick_ns);
	/* Atomic: the shard may look at an old entry of this record meanwhile (arrival.c). */
	__atomic_store_n(&r->wt.slack, slack, __ATOMIC_RELAXED);
	__atomic_store_n(&r->wt.flags,
			 (uint16_t)((q ? q->no : 0) | (kn || a->jitter_ns ? REC_EXT : 0)),
			 __ATOMIC_RELAXED);
	__atomic_store_n(&r->wt.deadline, tick, __ATOMIC_RELAXED);
	if (a->period_ns || kn || a->jitter_ns) {
		e = table_ext_peek(s, index);
		if (!e) {
			/*
			 * The chunk's first record to need one: the caller makes
			 * the array out of its section and arms again.  This one,
			 * reachable by no one yet, goes straight back to the pool.
			 */
			__atomic_store_n(&r->wt.flags, 0, __ATOMIC_RELAXED);
			table_retire(k, s, r);
			if (k->cfg.max_timers)
				atomic_fetch_sub_explicit(&k->total_pending, 1, memory_order_relaxed);
			need->shard = s->index;
			need->chunk = index >> CHUNK_BITS;
			return TABLE_NO_EXT;
		}
		if (a->period_ns) {
			e->period_ns = a->period_ns;
			e->next_ns = deadline_ns;
			e->policy = a->policy;
		}
		/* Read by resets (reset()), published with the state below. */
		e->jitter_ns = a->jitter_ns;
		/*
		 * A node names its timer before the record holds it: a
		 * releaser that knows only an old life's id tells the nodes
		 * apart by it (key_release_of()); release pairs with its
		 * acquire of e->key.  The record is this thread's alone: its
		 * generation is the life to come.
		 */
		if (kn)
			key_node_set_id(kn, id_make(st_gen(atomic_load_explicit(&r->state,
										  memory_order_relaxed)),
						    s->index, index, slack_fast(k, slack)));
		atomic_store_explicit(&e->key, kn, memory_order_release);
	}
	/* Its queue stays until it ends (queue.c). */
	if (q)
		queue_ref(q);
	/*
	 * A plain timer far from its arm is filed by value (arrival.c): the
	 * shard does not touch its record until its slot comes.
	 */
	fire = slack ? wheel_fire_tick(tick, slack) : tick;
	/*
	 * In ns, with no division: the fire tick is at least the deadline's
	 * tick, rounded up, and the arm's own tick is the floor of @now_ns.
	 */
	far = t && !e && !q && deadline_ns > now_ns &&
	      deadline_ns - now_ns >= ARRIVAL_FAR_TICKS * k->cfg.tick_ns &&
	      arrival_room(s, t, fire, now_ns, behind);
	/* The post's (or the arrival's) release publishes the fields above with the state. */
	gen = timer_publish(r, a->period_ns != 0, far);
	id = id_make(gen, s->index, index, slack_fast(k, slack));
	/* Counted before anyone can end it: whoever does sees the count. */
	arm_count(k, t, 1);
	if (kn) {
		/*
		 * The key maps to a live timer from here on (PENDING | QUEUED:
		 * a cancel meanwhile leaves the post below to this thread).  A
		 * holder it replaces is cancelled as the key passes (key.c).
		 */
		rc = key_take(k, kn, a->replace);
		if (rc) {
			/*
			 * Held: it was never armed, and no one has its id.  (A
			 * cancel_sync holding an earlier life's id may read
			 * e->key meanwhile: it reads the generation before the
			 * node, which is freed at once, in key_release_slow().)
			 */
			atomic_store_explicit(&e->key, NULL, memory_order_relaxed);
			timer_unpublish(r);
			arm_count(k, t, -1);
			table_retire(k, s, r);
			if (q)
				queue_unref_in_section(k, q);
			if (k->cfg.max_timers)
				atomic_fetch_sub_explicit(&k->total_pending, 1, memory_order_relaxed);
			return rc;
		}
	}
	if (out)
		*out = id;
	if (far) {
		arrival_put(s, t, index, gen, fire);
		return 0;
	}
	/*
	 * A fresh record's wt.link.prev is unused until the shard files it:
	 * it carries the record this thread armed POST_HINTS arms ago, which
	 * the shard, walking its inbox newest first, loads that many steps
	 * early.  Only a hint: the shard never follows it.
	 */
	if (t) {
		struct rec **back = &t->posted[t->nposted++ % POST_HINTS];

		r->wt.link.prev = *back ? &(*back)->wt.link : NULL;
		*back = r;
	}
	/* A keyed timer is another thread's to reset before this post. */
	if (kn ? shard_post_recheck(s, r, tick) : shard_post(s, r, tick))
		*behind = s->index + 1;
	return 0;
}

/* Which clock read, if any, a deadline comes from. */
enum when { WHEN_AT, WHEN_AFTER };

/*
 * The one entry of every arm: checks in the documented order (a destroyed
 * service says -ESHUTDOWN whatever else is wrong), arms, and only then, out
 * of the read-side section, waits for a shard that is far behind.
 *
 * Each entry point gets its own copy, with its request folded in: a plain
 * kairos_arm() tests for no queue, key, period, jitter or slack it cannot
 * have.  323 -> 229 instructions an arm, the library's text 6.3 KB larger
 * (docs/BENCHMARKS.md, "Every arm entry with its own copy, again").
 */
static inline __attribute__((always_inline)) int
arm_entry(struct kairos *k, enum when when, uint64_t t_ns, const struct arm_req *a,
	  kairos_fn fn, void *arg, kairos_id *out)
{
	struct kairos_queue *q = a->q;
	uint64_t deadline, now = UINT64_MAX;	/* UINT64_MAX: not read */
	unsigned behind = 0;	/* 1 + the index of a shard far behind */
	struct table_need need;
	struct tstate *t;
	int rc;

	if (!k)
		return -EINVAL;
	/* The thread's state is joined outside the section (it may lock). */
	t = ts_join(k);
	/* So are the workers, for the first timer that needs them. */
	if (!q && fn && (rc = staff(k)) != 0)
		goto out_free;
	for (;;) {
		rc = service_enter(k);
		if (rc)
			goto out_free;
		deadline = t_ns;
		if (q ? q->k != k || atomic_load_explicit(&q->closed, memory_order_relaxed)
		      : !fn) {
			/* A queue's timer may leave the callback out (kairos_queue_take()). */
			rc = -EINVAL;
		} else if (when == WHEN_AFTER &&
			   clock_add_overflows((now = service_now_slack(k, a->slack_ns &&
							a->slack_ns >= k->fast_slack_ns)),
					       t_ns, &deadline)) {
			rc = -EOVERFLOW;
		} else {
			/* The first deadline takes the jitter; the period's grid starts there. */
			if (a->jitter_ns)
				deadline = jitter_add(deadline, a->jitter_ns);
			rc = arm(k, t, now, deadline, a, fn, arg, out, &behind, &need);
		}
		service_leave();
		if (__builtin_expect(rc <= 0, 1))
			break;
		/*
		 * A new chunk of records or an ext array, made out of the
		 * section (it maps memory and may sleep); then the arm starts
		 * over, with a fresh clock read: the deadline only moves later.
		 */
		rc = table_make(k, rc, &need);
		if (rc)
			break;
	}
	if (behind)
		arm_backoff(k, behind - 1);
out_free:
	/*
	 * The arm took its shard's last arrival block, or found none and
	 * posted: the block the next far arm opens is made here, out of the
	 * section (it allocates), whatever became of this call, so that the
	 * ask never outlives it.  A failure only leaves far arms posting.
	 */
	if (t && t->arr_grow)
		(void)arrival_grow(k, t);
	/* A key that did not go into the table is this call's to free. */
	if (rc && a->kn)
		key_node_free(a->kn);
	return rc;
}

KAIROS_EXPORT int kairos_arm_at(struct kairos *k, uint64_t deadline_ns, kairos_fn fn, void *arg,
				kairos_id *out)
{
	return arm_entry(k, WHEN_AT, deadline_ns, &plain_req, fn, arg, out);
}

KAIROS_EXPORT int kairos_arm(struct kairos *k, uint64_t delay_ns, kairos_fn fn, void *arg,
			     kairos_id *out)
{
	return arm_entry(k, WHEN_AFTER, delay_ns, &plain_req, fn, arg, out);
}

KAIROS_EXPORT int kairos_arm_every(struct kairos *k, uint64_t period_ns, kairos_fn fn, void *arg,
				   kairos_id *out)
{
	const struct arm_req a = { .period_ns = period_ns };

	if (k && !period_ns && !atomic_load_explicit(&k->dead, memory_order_acquire))
		return -EINVAL;
	return arm_entry(k, WHEN_AFTER, period_ns, &a, fn, arg, out);
}

KAIROS_EXPORT int kairos_arm_slack(struct kairos *k, uint64_t delay_ns, uint64_t slack_ns,
				   kairos_fn fn, void *arg, kairos_id *out)
{
	const struct arm_req a = { .slack_ns = slack_ns };

	return arm_entry(k, WHEN_AFTER, delay_ns, &a, fn, arg, out);
}

/* The flags kairos_arm_opts() knows; every other bit is -EINVAL. */
#define OPTS_POLICY	(KAIROS_PERIOD_FIXED_DELAY | KAIROS_PERIOD_SKIP)
#define OPTS_FLAGS	(KAIROS_ABSTIME | KAIROS_KEY_REPLACE | OPTS_POLICY)

KAIROS_EXPORT int kairos_arm_opts(struct kairos *k, uint64_t when_ns,
				  const struct kairos_timer_opts *o, kairos_fn fn, void *arg,
				  kairos_id *out)
{
	static const struct kairos_timer_opts none;
	struct arm_req a;
	int rc;

	if (!k)
		return -EINVAL;
	if (atomic_load_explicit(&k->dead, memory_order_acquire))
		return -ESHUTDOWN;
	if (!o)
		o = &none;
	if ((o->flags & ~OPTS_FLAGS) || o->reserved_int)
		return -EINVAL;
	for (size_t i = 0; i < sizeof(o->reserved) / sizeof(o->reserved[0]); i++)
		if (o->reserved[i])
			return -EINVAL;
	if (o->key ? key_check(o->key, o->key_len) != 0
		   : o->key_len || (o->flags & KAIROS_KEY_REPLACE))
		return -EINVAL;
	/* One policy at most, and only for a periodic timer. */
	if ((o->flags & OPTS_POLICY) == OPTS_POLICY || ((o->flags & OPTS_POLICY) && !o->period_ns))
		return -EINVAL;
	a = (struct arm_req){
		.period_ns = o->period_ns,
		.slack_ns = o->slack_ns,
		.jitter_ns = o->jitter_ns,
		.policy = (unsigned)(o->flags & OPTS_POLICY),
		.replace = o->flags & KAIROS_KEY_REPLACE,
		.q = o->queue,
	};
	/*
	 * The key's node is made outside the read-side section: it allocates,
	 * and the first makes the key table.  So an arm that cannot be valid
	 * (no callback and no queue, or another service's queue) says so
	 * first, having made nothing; arm_entry() checks again in its section.
	 */
	if (o->key) {
		if (o->queue ? o->queue->k != k : !fn)
			return -EINVAL;
		rc = key_node_new(k, o->key, o->key_len, &a.kn);
		if (rc)
			return rc;
	}
	/* @when_ns is the first deadline (a delay, or absolute); @period_ns follows it. */
	return arm_entry(k, o->flags & KAIROS_ABSTIME ? WHEN_AT : WHEN_AFTER, when_ns, &a, fn, arg,
			 out);
}

/* @r (from table_lookup(), or NULL) if it is @id's record alive, else NULL. */
static struct rec *lookup_rec(struct rec *r, kairos_id id, uint64_t *state)
{
	if (!r)
		return NULL;
	/* Acquire pairs with the release of every state transition. */
	*state = atomic_load_explicit(&r->state, memory_order_acquire);
	if (st_gen(*state) != id_gen(id))
		return NULL;
	return r;
}

/* Looks @id up; NULL (the caller says -ENOENT) when it names no live record. */
static struct rec *lookup(struct kairos *k, kairos_id id, struct shard **sp, uint64_t *state)
{
	return lookup_rec(table_lookup(k, id, sp), id, state);
}

/*
 * One cancel attempt of @id, whose record table_lookup() gave as @r (NULL:
 * none) of shard @s.  Returns 0, -EBUSY or -ENOENT as kairos_cancel(); with
 * -EBUSY, *@seen is the state word seen (RUNNING), for cancel_sync to wait on.
 * @t is ts_mine(@k), or what ts_for(@k) gave before the section (one look
 * at the thread's state per cancel, not two).  Inline in cancel() and in
 * the batch loop, as reset_rec() is.
 */
static inline __attribute__((always_inline)) int
cancel_rec(struct kairos *k, struct tstate *t, kairos_id id, struct shard *s, struct rec *r,
	   uint64_t *seen)
{
	uint64_t old;
	bool keep, unlink;
	int rc;

	r = lookup_rec(r, id, &old);
	if (!r)
		return -ENOENT;
	/*
	 * A record of this thread's shard, filed by value, is retired here,
	 * unposted, unless the reclaimer is taking the thread's kept cancels
	 * (acquire: then it has handed them over; see thread.c).
	 */
	keep = t && t->s == s && !atomic_load_explicit(&t->kept_steal, memory_order_acquire);
	rc = timer_cancel(r, id_gen(id), &old, seen, keep);
	if (rc)
		return rc;
	/* This thread's own count when it is on @k, else the shared one. */
	if (t)
		ts_bump(&t->cancelled);
	else
		atomic_fetch_add_explicit(&k->base.cancelled, 1, memory_order_release);
	if (k->cfg.max_timers)
		atomic_fetch_sub_explicit(&k->total_pending, 1, memory_order_relaxed);
	/* Ended: its queue may go (the record's number stays valid meanwhile). */
	if (rec_queue_no(r))
		queue_unref_in_section(k, queue_get(k, rec_queue_no(r)));
	/*
	 * The shard unlinks it at its next pass, or after a batch of posts.
	 * Filed by value, it is in no list (its entries go stale), so the
	 * shard would only retire it: a thread of its shard retires it itself
	 * (table_keep()).  A cancel never waits for a shard that is behind:
	 * it adds no record.  Ended, its key is free as this returns: a kept
	 * record's bundle frees it (rbundle_link()), the others here.
	 */
	unlink = st_of(old) == ST_PENDING && !(old & ST_QUEUED);
	if (unlink && keep && (old & ST_FAR)) {
		table_keep(k, t, r, id_gen(id));
		return 0;
	}
	key_release(k, r);
	if (unlink)
		(void)shard_post(s, r, UINT64_MAX);
	return 0;
}

/* One cancel attempt of @id, as cancel_rec(). */
static int cancel(struct kairos *k, struct tstate *t, kairos_id id, uint64_t *seen)
{
	struct shard *s = NULL;
	struct rec *r = table_lookup(k, id, &s);

	return cancel_rec(k, t, id, s, r, seen);
}

void cancel_for_key(struct kairos *k, kairos_id id)
{
	uint64_t seen;

	(void)cancel(k, ts_mine(k), id, &seen);
}

KAIROS_EXPORT int kairos_cancel(struct kairos *k, kairos_id id)
{
	struct shard *s = NULL;
	struct rec *r;
	struct tstate *t;
	uint64_t seen;
	int rc;

	t = ts_join(k);
	rc = enter_valid(k, id != 0);
	if (rc)
		return rc;
	/*
	 * A state joined before the section is still this thread's on @k
	 * inside it: only a destroy takes it away, and the section saw @k
	 * alive (ts_for()).  The cancel is inline here, as the arm is in
	 * kairos_arm().
	 */
	r = table_lookup(k, id, &s);
	rc = cancel_rec(k, t, id, s, r, &seen);
	service_leave();
	return rc;
}

/*
 * Inside the read-side section: whether @id's callback is still running, with
 * ST_WAITERS set so that its end bumps the event count.  *@seen is the
 * state word last read.
 */
static bool still_running(struct kairos *k, kairos_id id, uint64_t *seen)
{
	struct shard *s;
	struct rec *r = lookup(k, id, &s, seen);

	return r && timer_wait_mark(r, id_gen(id), seen);
}

/*
 * cancel_sync from one of @k's own threads (a callback on a worker, a
 * shard or a queue's drainer) when @k's destroy has begun: destroy joins
 * (or waits for) that thread, so it cannot wait for destroy to return.
 * It waits for @id's run alone, outside any section: a destroy frees
 * records only once every such thread is done.  Each run's end bumps the
 * event count (ST_WAITERS, set by still_running()).
 */
static void wait_run_in_destroy(struct kairos *k, kairos_id id)
{
	uint64_t seen;

	for (;;) {
		uint32_t seq = atomic_load_explicit(&k->ev_seq, memory_order_seq_cst);

		if (!still_running(k, id, &seen))
			return;
		futex_wait32(&k->ev_seq, seq);
	}
}

/* Sleeps until kairos_destroy() of @k has returned (its callbacks too). */
static void wait_destroyed(struct kairos *k)
{
	for (;;) {
		uint32_t seq = atomic_load_explicit(&k->ev_seq, memory_order_seq_cst);

		if (atomic_load_explicit(&k->final_valid, memory_order_seq_cst))
			return;
		futex_wait32(&k->ev_seq, seq);
	}
}

/*
 * A cancel_sync that found @k's destroy begun: returns once no callback of
 * @k can run, or, on one of @k's own threads (which that destroy waits
 * for), once @id's run is over.
 */
static void wait_destroy_over(struct kairos *k, kairos_id id)
{
	if (in_service(k))
		wait_run_in_destroy(k, id);
	else
		wait_destroyed(k);
}

/*
 * cancel_sync waits outside the read-side section: it reads the event count,
 * sets ST_WAITERS on the record (so the run's end bumps the count), leaves
 * the section, sleeps until the count moves, and looks the id up anew.  The
 * record may be reused meanwhile; the generation in the id tells.
 */
KAIROS_EXPORT int kairos_cancel_sync(struct kairos *k, kairos_id id)
{
	uint64_t seen;
	int rc;

	rc = enter_valid(k, id != 0);
	if (rc == -ESHUTDOWN && id && !in_callback(k, id) &&
	    !atomic_load_explicit(&k->forked, memory_order_relaxed)) {
		/*
		 * Destroy has begun, and its callbacks may still run: as for a
		 * wait that sees it begin (at once when destroy has returned).
		 */
		wait_destroy_over(k, id);
	}
	if (rc)
		return rc;
	rc = cancel(k, ts_mine(k), id, &seen);
	if (rc != -EBUSY || in_callback(k, id)) {
		/* From its own callback waiting would never end; later runs are stopped. */
		service_leave();
		return rc == -EBUSY ? -EDEADLK : rc;
	}
again:
	for (;;) {
		/* seq_cst: read before ST_WAITERS is set, so no bump is missed. */
		uint32_t seq = atomic_load_explicit(&k->ev_seq, memory_order_seq_cst);

		if (!still_running(k, id, &seen))
			break;
		service_leave();
		futex_wait32(&k->ev_seq, seq);
		if (service_enter(k)) {
			/* Destroy has begun: it returns once no callback runs. */
			wait_destroy_over(k, id);
			return -EBUSY;
		}
	}
	/*
	 * A periodic timer that went back to PENDING before the STOP bit landed
	 * is cancelled now, so it does not start again.
	 */
	if (st_gen(seen) == id_gen(id)) {
		uint64_t ignored;

		rc = cancel(k, ts_mine(k), id, &ignored);
		/*
		 * Running again: a ring queue's post failed and put the expiry
		 * back on the queue's list (timer_unrun()), where a drainer
		 * took it before this cancel.  That run is waited for too.
		 */
		if (rc == -EBUSY)
			goto again;
		/*
		 * A one-shot that is cancellable again was never delivered (a
		 * ring queue's post failed, timer_unrun()): this cancel wins.
		 */
		if (rc == 0 && !(seen & ST_PERIODIC)) {
			service_leave();
			return 0;
		}
		/*
		 * A periodic timer this call stopped has ended (CANCELLED), but
		 * the thread that ended its run may not have released its key
		 * yet: released here (whichever of the two comes second finds
		 * it gone), so that the key is free as this returns, as after
		 * a cancel that returns 0.  The record may have been retired
		 * and even reused since (its state keeps the old life until
		 * then): only a key that @id's own life holds is released.
		 */
		if (rc == -ENOENT && (seen & ST_PERIODIC)) {
			struct shard *s;
			struct rec *r = lookup(k, id, &s, &seen);

			if (r && st_of(seen) == ST_CANCELLED)
				key_release_of(k, r, id);
		}
	}
	service_leave();
	return -EBUSY;
}

/*
 * table_lookup(), and starts loading the record found, if any; reads
 * nothing in it.
 */
static struct rec *prefetch_rec(struct kairos *k, kairos_id id, struct shard **sp)
{
	struct rec *r = table_lookup(k, id, sp);

	if (r)
		__builtin_prefetch(&r->state, 1);
	return r;
}

/*
 * Moves timer @id's deadline to the absolute @deadline_ns; @r and @s are
 * what table_lookup() gave for @id (@r NULL: no such record).  Inline in
 * each caller: kairos_reset() 173 -> 161 instructions (callgrind), the
 * text 1.3 KB larger.
 */
static inline __attribute__((always_inline)) int
reset_rec(struct kairos *k, kairos_id id, struct shard *s, struct rec *r, uint64_t deadline_ns)
{
	uint64_t tick, held, was;
	bool periodic, earlier, parked;
	int rc;

	r = lookup_rec(r, id, &held);
	if (!r)
		return -ENOENT;
	/* Take the record: PENDING -> RESETTING, so no one fires it meanwhile. */
	rc = timer_reset_take(r, id_gen(id), &held, &parked);
	if (rc)
		return rc;
	periodic = held & ST_PERIODIC;
	/* A jitter is drawn again at each reset (fixed at arm: read without a lock). */
	if (rec_has_ext(r))
		deadline_ns = jitter_add(deadline_ns,
					 table_ext_peek(s, table_index(s, r))->jitter_ns);
	/* The period restarts from this deadline, not from its tick (inbox_one()). */
	if (periodic)
		atomic_store_explicit(&table_ext(s, table_index(s, r))->rebase_ns, deadline_ns,
				      memory_order_relaxed);
	tick = clock_tick_ceil(deadline_ns, k->cfg.tick_ns);
	earlier = tick < __atomic_load_n(&r->wt.deadline, __ATOMIC_RELAXED);
	__atomic_store_n(&r->wt.deadline, tick, __ATOMIC_RELAXED);
	if (parked) {
		/*
		 * Its expiry waits in a queue, untaken: withdrawn.  The queue's
		 * next drainer sends it back to the shard (queue.c).  (Only a
		 * one-shot: a periodic one waiting there is FIRING, -EBUSY.)
		 */
		(void)timer_reset_give(r, held, false, false, true);
		return 0;
	}
	/*
	 * Give it back as PENDING with the next version.  A later deadline is
	 * just the store (the shard re-checks it before firing); an earlier one
	 * is posted so the shard relinks it, and so is any periodic reset,
	 * whose period restarts from the new deadline.
	 */
	was = timer_reset_give(r, held, earlier || periodic, periodic, false);
	/* A reset never waits for a shard that is behind: it adds no record. */
	if ((earlier || periodic) && !(was & ST_QUEUED)) {
		/* A test holds the post here, the record QUEUED (fault.h). */
		if (__builtin_expect(atomic_load_explicit(&fault_reset_hold, memory_order_relaxed), 0))
			fault_hold(&fault_reset_hold, &fault_reset_held);
		(void)shard_post_recheck(s, r, tick);
	}
	else if (earlier &&
		 tick < sleep_tick_of(atomic_load_explicit(&s->sleep_tick, memory_order_seq_cst)))
		shard_wake(s);
	return 0;
}

/* Moves timer @id's deadline to the absolute @deadline_ns. */
static int reset(struct kairos *k, kairos_id id, uint64_t deadline_ns)
{
	struct shard *s = NULL;
	struct rec *r = table_lookup(k, id, &s);

	return reset_rec(k, id, s, r, deadline_ns);
}

KAIROS_EXPORT int kairos_reset(struct kairos *k, kairos_id id, uint64_t delay_ns)
{
	struct shard *s = NULL;
	struct rec *r;
	uint64_t deadline_ns;
	int rc;

	rc = enter_valid(k, id != 0);
	if (rc)
		return rc;
	/*
	 * An exact timer's record loads while the clock is read: the ordered
	 * read waits for the loads ahead of it, not for a prefetch.  A slack
	 * timer's counter read (its id's fast bit) waits for neither, so its
	 * record is just loaded where it is first used, right after.  With
	 * the prefetch kept, a reset among 10^6 took 474-491 ns (once 243)
	 * against 309-364 without it, on a machine whose prefetch waits for
	 * its page walk (docs/BENCHMARKS.md, "The counter clock").
	 */
	if (id & ID_FAST)
		r = table_lookup(k, id, &s);
	else
		r = prefetch_rec(k, id, &s);
	if (clock_add_overflows(service_now_slack(k, id & ID_FAST), delay_ns, &deadline_ns))
		rc = -EOVERFLOW;
	else
		rc = reset_rec(k, id, s, r, deadline_ns);
	service_leave();
	return rc;
}

/*
 * Only the record's address: table_lookup() reads the shard's directory of
 * chunks (small, and read by every call) and never the record, whose miss
 * is what the caller wants started.  A stale id loads a line that the call
 * after it will find has moved on; no harm beyond the load.
 */
KAIROS_EXPORT int kairos_prefetch(struct kairos *k, kairos_id id)
{
	struct shard *s;
	int rc;

	rc = enter_valid(k, id != 0);
	if (rc)
		return rc;
	rc = prefetch_rec(k, id, &s) ? 0 : -ENOENT;
	service_leave();
	return rc;
}

KAIROS_EXPORT int kairos_reset_at(struct kairos *k, kairos_id id, uint64_t deadline_ns)
{
	int rc;

	rc = enter_valid(k, id != 0);
	if (rc)
		return rc;
	rc = reset(k, id, deadline_ns);
	service_leave();
	return rc;
}

/*
 * How many records ahead a batch call (kairos_reset_n(), kairos_cancel_n())
 * starts loading.  A record is one cache line at a random address, and
 * each id's work lies between one load and the next: sixteen in flight
 * cover a memory latency of 250 ns (measured on a virtual machine) where
 * eight left the loop waiting (docs/BENCHMARKS.md, "A second machine").
 */
#define BATCH_AHEAD	16

/* What a batch call does to each of its timers. */
struct batch_op {
	bool cancel;		/* cancel_rec(), else reset_rec() */
	uint64_t deadline_ns;	/* a reset's new deadline */
	struct tstate *t;	/* a cancel's: what ts_for() gave before the section */
};

/*
 * The loop of a batch call, inside its read-side section: @op on each of
 * the @n timers in @ids, each record loaded BATCH_AHEAD timers before its
 * turn, each result in @results (if not NULL).  Returns how many gave 0.
 * Inline in each call, so that @op's branch and step fold away.
 */
static inline __attribute__((always_inline)) int
batch_run(struct kairos *k, const kairos_id *ids, unsigned n, const struct batch_op *op,
	  int *results)
{
	struct {
		struct rec *r;
		struct shard *s;
	} ahead[BATCH_AHEAD] = { { 0 } };
	int done = 0;

	for (unsigned i = 0; i < n && i < BATCH_AHEAD; i++)
		ahead[i].r = prefetch_rec(k, ids[i], &ahead[i].s);
	for (unsigned i = 0; i < n; i++) {
		unsigned a = i % BATCH_AHEAD;
		struct rec *r = ahead[a].r;
		struct shard *s = ahead[a].s;
		uint64_t seen;
		int one;

		if (i + BATCH_AHEAD < n)
			ahead[a].r = prefetch_rec(k, ids[i + BATCH_AHEAD], &ahead[a].s);
		if (!ids[i])
			one = -EINVAL;
		else if (op->cancel)
			one = cancel_rec(k, op->t, ids[i], s, r, &seen);
		else
			one = reset_rec(k, ids[i], s, r, op->deadline_ns);
		done += one == 0;
		if (results)
			results[i] = one;
	}
	return done;
}

/* A batch call's arguments: @n ids at @ids. */
static inline bool batch_valid(const kairos_id *ids, unsigned n)
{
	return (ids || !n) && n <= INT_MAX;
}

KAIROS_EXPORT int kairos_reset_n(struct kairos *k, const kairos_id *ids, unsigned n,
				 uint64_t delay_ns, int *results)
{
	struct batch_op op = { .cancel = false };
	int rc;

	rc = enter_valid(k, batch_valid(ids, n));
	if (rc)
		return rc;
	/* One clock read for the whole batch. */
	if (clock_add_overflows(service_now(k), delay_ns, &op.deadline_ns))
		rc = -EOVERFLOW;
	else
		rc = batch_run(k, ids, n, &op, results);
	service_leave();
	return rc;
}

KAIROS_EXPORT int kairos_cancel_n(struct kairos *k, const kairos_id *ids, unsigned n,
				  int *results)
{
	struct batch_op op = { .cancel = true };
	int rc;

	op.t = ts_join(k);
	rc = enter_valid(k, batch_valid(ids, n));
	if (rc)
		return rc;
	rc = batch_run(k, ids, n, &op, results);
	service_leave();
	return rc;
}

/*
 * What the key calls do to the timer that holds a key: cancel it, or move
 * its deadline to an absolute time.
 */
enum key_op { KEY_CANCEL, KEY_RESET };

/*
 * Applies @op to the holder of @key, inside the read-side section.  A holder
 * that ended between the lookup and the call may have passed the key on:
 * then the call goes to the new holder, so that a key held throughout is
 * never reported missing.
 */
static int key_apply(struct kairos *k, const void *key, size_t len, enum key_op op,
		     uint64_t deadline_ns)
{
	kairos_id id, again;
	uint64_t seen;
	int rc;

	for (rc = key_lookup(k, key, len, &id); rc == 0; id = again) {
		rc = op == KEY_CANCEL ? cancel(k, ts_mine(k), id, &seen) : reset(k, id, deadline_ns);
		if (rc != -ENOENT || key_lookup(k, key, len, &again) || again == id)
			break;
	}
	return rc;
}

KAIROS_EXPORT int kairos_key_cancel(struct kairos *k, const void *key, size_t len)
{
	int rc;

	(void)ts_join(k);
	rc = enter_valid(k, key_check(key, len) == 0);
	if (rc)
		return rc;
	rc = key_apply(k, key, len, KEY_CANCEL, 0);
	service_leave();
	return rc;
}

KAIROS_EXPORT int kairos_key_reset(struct kairos *k, const void *key, size_t len,
				   uint64_t delay_ns)
{
	uint64_t deadline_ns;
	int rc;

	rc = enter_valid(k, key_check(key, len) == 0);
	if (rc)
		return rc;
	if (clock_add_overflows(service_now(k), delay_ns, &deadline_ns))
		rc = -EOVERFLOW;
	else
		rc = key_apply(k, key, len, KEY_RESET, deadline_ns);
	service_leave();
	return rc;
}

KAIROS_EXPORT int kairos_key_find(struct kairos *k, const void *key, size_t len, kairos_id *out)
{
	int rc;

	rc = enter_valid(k, key_check(key, len) == 0);
	if (rc)
		return rc;
	rc = out ? key_lookup(k, key, len, out) : -EINVAL;
	service_leave();
	return rc;
}

/*
 * The deadline (ns, the start of its tick: the earliest it may run) of the
 * life @id of @r, whose state word lookup() read as @old, into *@due_ns
 * (0 when it is due), or a negative errno.  Reads the state word again
 * after the deadline: a deadline read between two equal words belongs to
 * that pending life.
 */
static int remaining_of(struct kairos *k, struct rec *r, kairos_id id, uint64_t old,
			uint64_t *due_ns)
{
	unsigned spins = 0;

	for (;;) {
		uint64_t tick, again;

		if (st_gen(old) != id_gen(id))
			return -ENOENT;
		switch (st_of(old)) {
		case ST_RESETTING:
			/* A resetter holds it for a few instructions. */
			cpu_relax_n(&spins);
			old = atomic_load_explicit(&r->state, memory_order_acquire);
			continue;
		case ST_PENDING:
		case ST_PARKED:
			/* Acquire: the deadline is read before the state word again. */
			tick = __atomic_load_n(&r->wt.deadline, __ATOMIC_ACQUIRE);
			again = atomic_load_explicit(&r->state, memory_order_relaxed);
			if (again != old) {
				old = again;
				continue;
			}
			*due_ns = clock_tick_ns(tick, k->cfg.tick_ns);
			return 0;
		case ST_FIRING:
			/* Expired, not started (or waiting in a queue, untaken). */
			*due_ns = 0;
			return 0;
		case ST_RUNNING:
			/*
			 * A one-shot timer whose callback started has fired.  A
			 * periodic one gets its next deadline when the callback
			 * returns (or none, when it was cancelled meanwhile).
			 */
			return (old & ST_PERIODIC) && !(old & ST_STOP) ? -EBUSY : -ENOENT;
		default:
			return -ENOENT;
		}
	}
}

KAIROS_EXPORT int kairos_remaining(struct kairos *k, kairos_id id, uint64_t *ns)
{
	uint64_t state, due_ns = 0, now;
	struct shard *s;
	struct rec *r;
	int rc;

	rc = enter_valid(k, id != 0);
	if (rc)
		return rc;
	if (!ns) {
		service_leave();
		return -EINVAL;
	}
	r = lookup(k, id, &s, &state);
	rc = r ? remaining_of(k, r, id, state, &due_ns) : -ENOENT;
	service_leave();
	if (rc)
		return rc;
	/*
	 * Read after the deadline: the timer does not run within *@ns of the
	 * call's start, whatever the delay before this read.
	 */
	now = service_now(k);
	*ns = due_ns > now ? due_ns - now : 0;
	return 0;
}

KAIROS_EXPORT int kairos_now(struct kairos *k, uint64_t *now_ns)
{
	if (!k)
		return -EINVAL;
	if (atomic_load_explicit(&k->dead, memory_order_acquire))
		return -ESHUTDOWN;
	if (!now_ns)
		return -EINVAL;
	*now_ns = service_now(k);
	return 0;
}

/* Adds lane @l's counts into @out, its histogram into @bucket and *@total. */
static void lane_add(const struct expiry_lane *l, struct kairos_stats *out, uint64_t *bucket,
		     uint64_t *total)
{
	uint64_t max;

	out->fired += atomic_load_explicit(&l->fired, memory_order_relaxed);
	out->periodic_runs += atomic_load_explicit(&l->periodic_runs, memory_order_relaxed);
	out->early += atomic_load_explicit(&l->early, memory_order_relaxed);
	for (unsigned b = 0; b < LAT_BUCKETS; b++) {
		uint64_t n = atomic_load_explicit(&l->lat.bucket[b], memory_order_relaxed);

		bucket[b] += n;
		*total += n;
	}
	max = atomic_load_explicit(&l->lat.max, memory_order_relaxed);
	if (max > out->lateness_max_ns)
		out->lateness_max_ns = max;
}

/*
 * Adds up every shard's and every calling thread's counters into @out.  Call
 * with thr_lock held (ts_lock()), inside the read-side section or after the
 * shards have stopped.  What ended is read before what was armed, so the
 * derived pending count never goes below 0.
 */
static void stats_collect(struct kairos *k, struct kairos_stats *out)
{
	uint64_t bucket[LAT_BUCKETS] = { 0 }, total = 0, finished = 0, armed, cancelled;

	memset(out, 0, sizeof(*out));
	out->shards = k->nshards;
	out->rejected = atomic_load_explicit(&k->rejected, memory_order_relaxed);
	for (unsigned i = 0; i < k->nshards; i++) {
		struct shard *s = k->shards[i];

		/* Acquire pairs with the enders' release: their arms are counted. */
		finished += atomic_load_explicit(&s->stats.finished, memory_order_acquire);
		out->cancelled += atomic_load_explicit(&s->stats.cancelled, memory_order_acquire);
		out->drained += atomic_load_explicit(&s->stats.drained, memory_order_acquire);
		out->wakeups += atomic_load_explicit(&s->stats.wakeups, memory_order_relaxed);
		out->timer_sets += atomic_load_explicit(&s->stats.timer_sets, memory_order_relaxed);
		lane_add(&s->own, out, bucket, &total);
		for (unsigned l = 0; l < s->nlanes; l++)
			lane_add(&s->lanes[l], out, bucket, &total);
	}
	ts_sum(k, &armed, &cancelled);
	out->armed = armed;
	out->cancelled += cancelled;
	/*
	 * Pending is what was armed and has not ended: a one-shot ends when its
	 * callback returns, so it is pending (and fired) while the callback runs.
	 */
	out->pending = armed - out->cancelled - out->drained - finished;
	if (out->pending > armed)
		out->pending = 0;	/* cannot happen: see above */
	/* A bucket's upper bound can pass the largest sample actually seen. */
	out->lateness_p50_ns = lat_percentile(bucket, total, 0.50);
	if (out->lateness_p50_ns > out->lateness_max_ns)
		out->lateness_p50_ns = out->lateness_max_ns;
	out->lateness_p99_ns = lat_percentile(bucket, total, 0.99);
	if (out->lateness_p99_ns > out->lateness_max_ns)
		out->lateness_p99_ns = out->lateness_max_ns;
}

KAIROS_EXPORT int kairos_stats(struct kairos *k, struct kairos_stats *out)
{
	int rc;

	if (!k)
		return -EINVAL;
	rc = service_enter(k);
	if (rc) {
		/* After kairos_destroy() returned: its final counters. */
		if (!atomic_load_explicit(&k->final_valid, memory_order_acquire))
			return rc;
		if (!out)
			return -EINVAL;
		*out = k->final;
		return 0;
	}
	if (!out) {
		service_leave();
		return -EINVAL;
	}
	service_leave();
	/*
	 * thr_lock first, then the section: the lock is never taken inside
	 * one.  Destroy cannot pass its synchronize_rcu() while this section
	 * runs, and the lock keeps the thread list still.
	 */
	ts_lock(k);
	rc = service_enter(k);
	if (!rc) {
		stats_collect(k, out);
		service_leave();
	}
	ts_unlock(k);
	if (rc)
		return kairos_stats(k, out);	/* destroyed meanwhile: the final counters */
	return 0;
}

KAIROS_EXPORT int kairos_clock_info(struct kairos *k, const char **name, const char **why)
{
	if (!k)
		return -EINVAL;
	if (atomic_load_explicit(&k->dead, memory_order_acquire))
		return -ESHUTDOWN;
	/* Fixed at create, but for a counter found behind the clock later; static strings. */
	if (k->fast_ticks && fast_clock_off()) {
		if (name)
			*name = "clock_gettime";
		if (why)
			*why = FAST_OFF_WHY;
		return 0;
	}
	if (name)
		*name = k->fast_ticks ? "tsc" : service_manual(k) ? "manual" : "clock_gettime";
	if (why)
		*why = k->clock_why;
	return 0;
}

KAIROS_EXPORT int kairos_backend_info(struct kairos *k, unsigned shard, const char **name,
				      const char **why)
{
	const struct backend_report *rep;
	int rc;

	if (!k)
		return -EINVAL;
	rc = service_enter(k);
	if (rc)
		return rc;
	if (shard >= k->nshards) {
		service_leave();
		return -EINVAL;
	}
	/* Acquire pairs with backend.c's release of the report. */
	rep = atomic_load_explicit(&k->shards[shard]->rep, memory_order_acquire);
	if (name)
		*name = rep->name;
	if (why)
		*why = rep->why;
	service_leave();
	return 0;
}
