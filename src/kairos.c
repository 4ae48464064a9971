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
#define _LGPL_SOURCE
#include <urcu-bp.h>

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "clock.h"
#include "internal.h"

/* Headers of destroyed services (see kairos_destroy()). */
static pthread_mutex_t dead_lock = PTHREAD_MUTEX_INITIALIZER;
static struct kairos *dead_list;

void kairos_die_at(const char *file, int line, const char *what)
{
	fprintf(stderr, "kairos: %s:%d: %s\n", file, line, what);
	abort();
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
	if (cfg->shards > MAX_SHARDS || cfg->workers > 1024)
		return -EINVAL;
	/* Below 1 us a tick costs more in wake-ups than it buys in precision. */
	if (cfg->tick_ns < 1000)
		return -EINVAL;
	if (cfg->clock != CLOCK_MONOTONIC && cfg->clock != CLOCK_BOOTTIME)
		return -EINVAL;
	if (cfg->delivery != KAIROS_DELIVER_WORKERS && cfg->delivery != KAIROS_DELIVER_INLINE)
		return -EINVAL;
	if (cfg->backend != KAIROS_BACKEND_AUTO && cfg->backend != KAIROS_BACKEND_URING &&
	    cfg->backend != KAIROS_BACKEND_EPOLL)
		return -EINVAL;
	if (cfg->ring_entries > 4096)
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

static void shard_free(struct shard *s)
{
	if (s->tfd >= 0)
		close(s->tfd);
	if (s->efd >= 0)
		close(s->efd);
	table_free(s);
	free(s->dq.buf);
	free(s->dbatch);
	pthread_mutex_destroy(&s->grow_lock);
	pthread_mutex_destroy(&s->dq.lock);
	pthread_cond_destroy(&s->dq.cond);
	free(s);
}

static struct shard *shard_new(struct kairos *k, unsigned index)
{
	struct shard *s = aligned_alloc(CACHELINE, (sizeof(*s) + CACHELINE - 1) & ~(size_t)(CACHELINE - 1));

	if (!s)
		return NULL;
	memset(s, 0, sizeof(*s));
	s->k = k;
	s->index = index;
	s->tfd = -1;
	s->efd = -1;
	s->thread_joined = true;	/* until a thread exists */
	wheel_init(&s->wheel, 0);	/* teardown may drain a shard that never started */
	if (pthread_mutex_init(&s->grow_lock, NULL) || pthread_mutex_init(&s->dq.lock, NULL) ||
	    pthread_cond_init(&s->dq.cond, NULL))
		kairos_die("pthread init");
	return s;
}

static void stats_collect(struct kairos *k, struct kairos_stats *out);

/* Stops and frees everything @k started; drains pending timers per @how. */
static uint64_t teardown(struct kairos *k, int how)
{
	uint64_t drained = 0;

	/* Workers first: a periodic timer they re-arm lands in a live shard. */
	for (unsigned i = 0; i < k->nshards; i++)
		if (k->shards[i])
			worker_stop(k->shards[i]);
	for (unsigned i = 0; i < k->nshards; i++)
		if (k->shards[i])
			shard_stop(k->shards[i]);
	for (unsigned i = 0; i < k->nshards; i++)
		if (k->shards[i])
			shard_drain(k, k->shards[i], how, &drained);
	if (k->reclaimer_started)
		table_reclaimer_stop(k);
	/* Nothing runs any more: these are the service's last counters. */
	stats_collect(k, &k->final);
	for (unsigned i = 0; i < k->nshards; i++)
		if (k->shards[i])
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
	k = calloc(1, sizeof(*k));
	if (!k)
		return -ENOMEM;
	if (cfg)
		k->cfg = *cfg;
	else
		kairos_config_default(&k->cfg);
	rc = config_fix(&k->cfg);
	if (rc)
		goto fail_free;
	if (getrandom(&k->salt, sizeof(k->salt), GRND_NONBLOCK) != sizeof(k->salt))
		k->salt = (uint32_t)clock_now_ns(CLOCK_MONOTONIC) * 2654435761u;
	if (k->salt == 0)
		k->salt = 1;
	k->nshards = k->cfg.shards;
	k->shards = calloc(k->nshards, sizeof(*k->shards));
	if (!k->shards) {
		rc = -ENOMEM;
		goto fail_free;
	}
	for (unsigned i = 0; i < k->nshards; i++) {
		k->shards[i] = shard_new(k, i);
		if (!k->shards[i]) {
			rc = -ENOMEM;
			goto fail;
		}
	}
	rc = table_reclaimer_start(k);
	if (rc)
		goto fail;
	k->reclaimer_started = true;
	for (unsigned i = 0; i < k->nshards; i++) {
		struct shard *s = k->shards[i];

		s->thread_joined = false;
		rc = shard_start(k, s);
		if (rc)
			goto fail;
		rc = worker_start(k, s);
		if (rc)
			goto fail;
		if (k->cfg.pin_cpus) {
			pin(s->thread, i);
			for (unsigned w = 0; w < s->nworkers; w++)
				pin(s->workers[w], i);
		}
	}
	*out = k;
	return 0;
fail:
	teardown(k, KAIROS_DRAIN_DROP);
fail_free:
	free(k->shards);
	free(k);
	return rc;
}

KAIROS_EXPORT int kairos_destroy(struct kairos *k, int how)
{
	uint64_t drained;

	if (!k || (how != KAIROS_DRAIN_DROP && how != KAIROS_DRAIN_NOTIFY))
		return -EINVAL;
	if (tls_service == k)
		return -EDEADLK;
	if (atomic_exchange_explicit(&k->dead, 1, memory_order_acq_rel))
		return -ESHUTDOWN;
	/* Every call that saw the service alive has finished after this. */
	synchronize_rcu();
	drained = teardown(k, how);
	/* Release: the final counters before the flag that publishes them. */
	atomic_store_explicit(&k->final_valid, 1, memory_order_release);
	/*
	 * The header stays so that later calls can say -ESHUTDOWN; a list keeps
	 * it reachable, so leak checkers see a deliberate, bounded keep.
	 */
	if (pthread_mutex_lock(&dead_lock))
		kairos_die("pthread_mutex_lock");
	k->dead_next = dead_list;
	dead_list = k;
	if (pthread_mutex_unlock(&dead_lock))
		kairos_die("pthread_mutex_unlock");
	return drained > INT32_MAX ? INT32_MAX : (int)drained;
}

/* Enters a call: 0 inside a read-side section, or -ESHUTDOWN outside one. */
static int enter(struct kairos *k)
{
	rcu_read_lock();
	if (atomic_load_explicit(&k->dead, memory_order_acquire)) {
		rcu_read_unlock();
		return -ESHUTDOWN;
	}
	return 0;
}

static void leave(void)
{
	rcu_read_unlock();
}

/*
 * The shard a thread arms on: the one of the CPU it ran on when it first
 * armed on this service, kept per thread.  A thread that the scheduler moves
 * keeps arming on the same shard, so the records it cancels come back to the
 * pool it takes from; choosing by the current CPU on every arm made a
 * migrating thread grow a second pool (and skipped a sched_getcpu() per arm).
 */
static _Thread_local struct kairos *tls_pick_k;
static _Thread_local unsigned tls_pick;

static struct shard *pick_shard(struct kairos *k)
{
	int cpu;

	if (k->nshards == 1)
		return k->shards[0];
	if (tls_pick_k != k) {
		cpu = sched_getcpu();
		tls_pick = (unsigned)(cpu < 0 ? 0 : cpu) % k->nshards;
		tls_pick_k = k;
	}
	return k->shards[tls_pick];
}

/* Reserves a place under max_timers; false (and counted) when full. */
static bool reserve(struct kairos *k)
{
	uint64_t max = k->cfg.max_timers;

	if (!max)
		return true;
	if (atomic_fetch_add_explicit(&k->total_pending, 1, memory_order_relaxed) < max)
		return true;
	atomic_fetch_sub_explicit(&k->total_pending, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&k->rejected, 1, memory_order_relaxed);
	return false;
}

static int arm(struct kairos *k, uint64_t deadline_ns, uint64_t period_ns, uint64_t slack_ns,
	       kairos_fn fn, void *arg, kairos_id *out)
{
	struct shard *s;
	struct rec *r;
	uint32_t index;
	uint64_t tick, st;
	int rc;

	rc = enter(k);
	if (rc)
		return rc;
	if (!reserve(k)) {
		rc = -EAGAIN;
		goto out;
	}
	s = pick_shard(k);
	rc = table_alloc(k, s, &r, &index);
	if (rc) {
		if (k->cfg.max_timers)
			atomic_fetch_sub_explicit(&k->total_pending, 1, memory_order_relaxed);
		goto out;
	}
	tick = clock_tick_ceil(deadline_ns, k->cfg.tick_ns);
	r->fn = fn;
	r->arg = arg;
	/* Whole ticks only, rounded down: the window is never exceeded. */
	r->wt.slack = slack_ns / k->cfg.tick_ns > UINT32_MAX ? UINT32_MAX
							    : (uint32_t)(slack_ns / k->cfg.tick_ns);
	r->wt.flags = 0;
	__atomic_store_n(&r->wt.deadline, tick, __ATOMIC_RELAXED);
	if (period_ns) {
		struct rec_period *p = table_period(s, index);

		if (!p) {
			/* Not reachable by anyone yet: straight back to the pool. */
			table_retire(k, s, r);
			if (k->cfg.max_timers)
				atomic_fetch_sub_explicit(&k->total_pending, 1, memory_order_relaxed);
			rc = -ENOMEM;
			goto out;
		}
		p->period_ns = period_ns;
		p->next_ns = deadline_ns;
	}
	st = atomic_load_explicit(&r->state, memory_order_relaxed);
	/* The post's release publishes the fields above with the state. */
	atomic_store_explicit(&r->state,
			      st_with(st, ST_PENDING) | ST_QUEUED | (period_ns ? ST_PERIODIC : 0),
			      memory_order_relaxed);
	atomic_fetch_add_explicit(&s->stats.armed, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->stats.pending, 1, memory_order_relaxed);
	if (out)
		*out = id_make(st_gen(st), s->index, index);
	shard_post(s, r, tick);
out:
	leave();
	return rc;
}

KAIROS_EXPORT int kairos_arm_at(struct kairos *k, uint64_t deadline_ns, kairos_fn fn, void *arg,
				kairos_id *out)
{
	if (!k || !fn)
		return -EINVAL;
	return arm(k, deadline_ns, 0, 0, fn, arg, out);
}

/* now + @delay_ns on @k's clock, or -EOVERFLOW. */
static int deadline_after(struct kairos *k, uint64_t delay_ns, uint64_t *deadline)
{
	if (clock_add_overflows(clock_now_ns(k->cfg.clock), delay_ns, deadline))
		return -EOVERFLOW;
	return 0;
}

KAIROS_EXPORT int kairos_arm(struct kairos *k, uint64_t delay_ns, kairos_fn fn, void *arg,
			     kairos_id *out)
{
	uint64_t deadline;

	if (!k || !fn)
		return -EINVAL;
	if (deadline_after(k, delay_ns, &deadline))
		return -EOVERFLOW;
	return arm(k, deadline, 0, 0, fn, arg, out);
}

KAIROS_EXPORT int kairos_arm_every(struct kairos *k, uint64_t period_ns, kairos_fn fn, void *arg,
				   kairos_id *out)
{
	uint64_t deadline;

	if (!k || !fn || !period_ns)
		return -EINVAL;
	if (deadline_after(k, period_ns, &deadline))
		return -EOVERFLOW;
	return arm(k, deadline, period_ns, 0, fn, arg, out);
}

KAIROS_EXPORT int kairos_arm_slack(struct kairos *k, uint64_t delay_ns, uint64_t slack_ns,
				   kairos_fn fn, void *arg, kairos_id *out)
{
	uint64_t deadline;

	if (!k || !fn)
		return -EINVAL;
	if (deadline_after(k, delay_ns, &deadline))
		return -EOVERFLOW;
	return arm(k, deadline, 0, slack_ns, fn, arg, out);
}

/* Looks @id up; NULL (the caller says -ENOENT) when it names no live record. */
static struct rec *lookup(struct kairos *k, kairos_id id, struct shard **sp, uint64_t *state)
{
	struct rec *r = table_lookup(k, id, sp);

	if (!r)
		return NULL;
	/* Acquire pairs with the release of every state transition. */
	*state = atomic_load_explicit(&r->state, memory_order_acquire);
	if (st_gen(*state) != id_gen(id))
		return NULL;
	return r;
}

/*
 * One cancel attempt.  Returns 0, -EBUSY or -ENOENT as kairos_cancel(); with
 * -EBUSY, *@seen is the state word seen (RUNNING), for cancel_sync to wait on.
 */
static int cancel(struct kairos *k, kairos_id id, uint64_t *seen)
{
	struct shard *s;
	unsigned spins = 0;
	uint64_t old;
	struct rec *r = lookup(k, id, &s, &old);

	if (!r)
		return -ENOENT;
	for (;;) {
		uint64_t want;

		if (st_gen(old) != id_gen(id))
			return -ENOENT;
		switch (st_of(old)) {
		case ST_PENDING:
			/* Posted so the shard unlinks it now, not when its slot comes. */
			want = st_with(old, ST_CANCELLED) | ST_QUEUED;
			break;
		case ST_FIRING:
			/* Expired, callback not started: its worker will retire it. */
			want = st_with(old, ST_CANCELLED);
			break;
		case ST_RESETTING:
			/* A resetter holds it for a few instructions. */
			cpu_relax_n(&spins);
			old = atomic_load_explicit(&r->state, memory_order_acquire);
			continue;
		case ST_RUNNING:
			*seen = old;
			if (!(old & ST_PERIODIC) || (old & ST_STOP))
				return -EBUSY;
			/* A periodic timer must not start again once this returns. */
			want = old | ST_STOP;
			if (atomic_compare_exchange_weak_explicit(&r->state, &old, want,
								  memory_order_acq_rel,
								  memory_order_acquire)) {
				*seen = want;
				return -EBUSY;
			}
			continue;
		default:
			return -ENOENT;
		}
		if (atomic_compare_exchange_weak_explicit(&r->state, &old, want,
							  memory_order_acq_rel,
							  memory_order_acquire))
			break;
	}
	atomic_fetch_add_explicit(&s->stats.cancelled, 1, memory_order_relaxed);
	atomic_fetch_sub_explicit(&s->stats.pending, 1, memory_order_relaxed);
	if (k->cfg.max_timers)
		atomic_fetch_sub_explicit(&k->total_pending, 1, memory_order_relaxed);
	/* The shard unlinks it at its next pass, or after a batch of posts. */
	if (st_of(old) == ST_PENDING && !(old & ST_QUEUED))
		shard_post(s, r, UINT64_MAX);
	return 0;
}

KAIROS_EXPORT int kairos_cancel(struct kairos *k, kairos_id id)
{
	uint64_t seen;
	int rc;

	if (!k || !id)
		return -EINVAL;
	rc = enter(k);
	if (rc)
		return rc;
	rc = cancel(k, id, &seen);
	leave();
	return rc;
}

KAIROS_EXPORT int kairos_cancel_sync(struct kairos *k, kairos_id id)
{
	struct shard *s;
	uint64_t seen;
	struct rec *r;
	int rc;

	if (!k || !id)
		return -EINVAL;
	rc = enter(k);
	if (rc)
		return rc;
	rc = cancel(k, id, &seen);
	if (rc != -EBUSY)
		goto out;
	if (tls_timer == id) {
		/* Its own callback: waiting would never end. Later runs are stopped. */
		rc = -EDEADLK;
		goto out;
	}
	r = table_lookup(k, id, &s);
	/* Sleep while this generation is still RUNNING. */
	for (;;) {
		uint64_t want = seen | ST_WAITERS;

		if (st_gen(seen) != id_gen(id) || st_of(seen) != ST_RUNNING)
			break;
		if (!(seen & ST_WAITERS) &&
		    !atomic_compare_exchange_weak_explicit(&r->state, &seen, want,
							   memory_order_acq_rel,
							   memory_order_acquire))
			continue;
		state_wait(&r->state, want);
		seen = atomic_load_explicit(&r->state, memory_order_acquire);
	}
	/*
	 * A periodic timer that went back to PENDING before the STOP bit landed
	 * is cancelled now, so it does not start again.
	 */
	if (st_gen(seen) == id_gen(id) && st_of(seen) != ST_RUNNING) {
		uint64_t ignored;

		if (cancel(k, id, &ignored) == -EBUSY)
			kairos_die("callback restarted under cancel_sync");
	}
	rc = -EBUSY;
out:
	leave();
	return rc;
}

/* Moves timer @id's deadline to the absolute @deadline_ns. */
static int reset(struct kairos *k, kairos_id id, uint64_t deadline_ns)
{
	uint64_t tick = clock_tick_ceil(deadline_ns, k->cfg.tick_ns);
	uint64_t old, held, want;
	unsigned spins = 0;
	struct shard *s;
	struct rec *r;
	bool periodic, earlier;
	int rc;

	rc = enter(k);
	if (rc)
		return rc;
	r = lookup(k, id, &s, &old);
	if (!r) {
		rc = -ENOENT;
		goto out;
	}
	periodic = old & ST_PERIODIC;
	/* Take the record: PENDING -> RESETTING, so no one fires it meanwhile. */
	for (;;) {
		if (st_gen(old) != id_gen(id)) {
			rc = -ENOENT;
			goto out;
		}
		if (st_of(old) == ST_RESETTING) {
			cpu_relax_n(&spins);
			old = atomic_load_explicit(&r->state, memory_order_acquire);
			continue;
		}
		if (st_of(old) != ST_PENDING) {
			rc = periodic && (st_of(old) == ST_FIRING || st_of(old) == ST_RUNNING)
				? -EBUSY : -ENOENT;
			goto out;
		}
		held = st_with(old, ST_RESETTING);
		if (atomic_compare_exchange_weak_explicit(&r->state, &old, held,
							  memory_order_acquire,
							  memory_order_acquire))
			break;
	}
	earlier = tick < __atomic_load_n(&r->wt.deadline, __ATOMIC_RELAXED);
	__atomic_store_n(&r->wt.deadline, tick, __ATOMIC_RELAXED);
	/*
	 * Give it back as PENDING with the next version.  A later deadline is
	 * just the store (the shard re-checks it before firing); an earlier one
	 * is posted so the shard relinks it, and so is any periodic reset,
	 * whose period restarts from the new deadline.  The shard may have
	 * cleared ST_QUEUED meanwhile, hence the CAS loop.
	 */
	for (;;) {
		/* From @held, not @old: the shard may have cleared ST_QUEUED. */
		want = st_with((held & ~ST_VER_MASK) | ((held + ST_VER_ONE) & ST_VER_MASK), ST_PENDING);
		if (earlier || periodic)
			want |= ST_QUEUED;
		if (periodic)
			want |= ST_REBASE;
		/* Release: the deadline before the word that lets the shard read it. */
		if (atomic_compare_exchange_weak_explicit(&r->state, &held, want,
							  memory_order_release,
							  memory_order_relaxed))
			break;
	}
	if ((earlier || periodic) && !(held & ST_QUEUED))
		shard_post(s, r, tick);
	else if (earlier && tick < atomic_load_explicit(&s->sleep_tick, memory_order_seq_cst))
		shard_wake(s);
	rc = 0;
out:
	leave();
	return rc;
}

KAIROS_EXPORT int kairos_reset(struct kairos *k, kairos_id id, uint64_t delay_ns)
{
	uint64_t deadline_ns;

	if (!k || !id)
		return -EINVAL;
	if (deadline_after(k, delay_ns, &deadline_ns))
		return -EOVERFLOW;
	return reset(k, id, deadline_ns);
}

KAIROS_EXPORT int kairos_reset_at(struct kairos *k, kairos_id id, uint64_t deadline_ns)
{
	if (!k || !id)
		return -EINVAL;
	return reset(k, id, deadline_ns);
}

KAIROS_EXPORT int kairos_now(struct kairos *k, uint64_t *now_ns)
{
	if (!k || !now_ns)
		return -EINVAL;
	if (atomic_load_explicit(&k->dead, memory_order_acquire))
		return -ESHUTDOWN;
	*now_ns = clock_now_ns(k->cfg.clock);
	return 0;
}

/* Adds up every shard's counters into @out. */
static void stats_collect(struct kairos *k, struct kairos_stats *out)
{
	uint64_t bucket[LAT_BUCKETS] = { 0 }, total = 0;

	memset(out, 0, sizeof(*out));
	out->shards = k->nshards;
	out->rejected = atomic_load_explicit(&k->rejected, memory_order_relaxed);
	for (unsigned i = 0; i < k->nshards; i++) {
		struct shard *s = k->shards[i];
		uint64_t max;

		out->armed += atomic_load_explicit(&s->stats.armed, memory_order_relaxed);
		out->fired += atomic_load_explicit(&s->stats.fired, memory_order_relaxed);
		out->cancelled += atomic_load_explicit(&s->stats.cancelled, memory_order_relaxed);
		out->drained += atomic_load_explicit(&s->stats.drained, memory_order_relaxed);
		out->pending += atomic_load_explicit(&s->stats.pending, memory_order_relaxed);
		out->periodic_runs += atomic_load_explicit(&s->stats.periodic_runs, memory_order_relaxed);
		out->early += atomic_load_explicit(&s->stats.early, memory_order_relaxed);
		out->wakeups += atomic_load_explicit(&s->stats.wakeups, memory_order_relaxed);
		out->timer_sets += atomic_load_explicit(&s->stats.timer_sets, memory_order_relaxed);
		for (unsigned b = 0; b < LAT_BUCKETS; b++) {
			uint64_t n = atomic_load_explicit(&s->lat.bucket[b], memory_order_relaxed);

			bucket[b] += n;
			total += n;
		}
		max = atomic_load_explicit(&s->lat.max, memory_order_relaxed);
		if (max > out->lateness_max_ns)
			out->lateness_max_ns = max;
	}
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

	if (!k || !out)
		return -EINVAL;
	rc = enter(k);
	if (rc) {
		/* After kairos_destroy() returned: its final counters. */
		if (!atomic_load_explicit(&k->final_valid, memory_order_acquire))
			return rc;
		*out = k->final;
		return 0;
	}
	stats_collect(k, out);
	leave();
	return 0;
}

KAIROS_EXPORT int kairos_backend_info(struct kairos *k, unsigned shard, const char **name,
				      const char **why)
{
	int rc;

	if (!k)
		return -EINVAL;
	rc = enter(k);
	if (rc)
		return rc;
	if (shard >= k->nshards) {
		leave();
		return -EINVAL;
	}
	if (name)
		*name = k->shards[shard]->ops->name;
	if (why)
		*why = k->shards[shard]->backend_why;
	leave();
	return 0;
}
