/* SPDX-License-Identifier: MIT */
/*
 * worker.c - the threads that run callbacks, and the queue that feeds them.
 *
 * A shard hands each pass's expired records over in one batch: one lock and
 * one signal per batch, not per timer.  A worker takes up to WORKER_BATCH
 * entries at a time and runs them outside the lock, so a slow callback
 * holds up only the worker it runs on: the shard keeps expiring, the other
 * workers keep running.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "internal.h"

#define WORKER_BATCH	64

_Thread_local struct kairos *tls_service;
_Thread_local struct shard *tls_shard;
_Thread_local kairos_id tls_timer;

static void lock(pthread_mutex_t *m)
{
	if (pthread_mutex_lock(m))
		kairos_die("pthread_mutex_lock");
}

static void unlock(pthread_mutex_t *m)
{
	if (pthread_mutex_unlock(m))
		kairos_die("pthread_mutex_unlock");
}

/* Makes room for @n more entries; call with the lock held. */
static void dqueue_reserve(struct dqueue *q, size_t n)
{
	size_t cap = q->cap ? q->cap : 256;
	struct delivery *b;

	if (q->len + n <= q->cap)
		return;
	while (cap < q->len + n)
		cap *= 2;
	b = malloc(cap * sizeof(*b));
	if (!b)
		kairos_die("out of memory for the delivery queue");
	for (size_t i = 0; i < q->len; i++)
		b[i] = q->buf[(q->head + i) % q->cap];
	free(q->buf);
	q->buf = b;
	q->head = 0;
	q->cap = cap;
}

void dqueue_push(struct dqueue *q, const struct delivery *d, size_t n)
{
	lock(&q->lock);
	dqueue_reserve(q, n);
	for (size_t i = 0; i < n; i++)
		q->buf[(q->head + q->len + i) % q->cap] = d[i];
	q->len += n;
	/* One waiter per WORKER_BATCH entries, all of them for a big batch. */
	if (n > WORKER_BATCH)
		pthread_cond_broadcast(&q->cond);
	else
		pthread_cond_signal(&q->cond);
	unlock(&q->lock);
}

/* Puts entries a stopping worker took but did not start back at the front. */
static void dqueue_unshift(struct dqueue *q, const struct delivery *d, size_t n)
{
	lock(&q->lock);
	dqueue_reserve(q, n);
	q->head = (q->head + q->cap - n % q->cap) % q->cap;
	for (size_t i = 0; i < n; i++)
		q->buf[(q->head + i) % q->cap] = d[i];
	q->len += n;
	unlock(&q->lock);
}

/* Takes up to @max entries; blocks while the queue is empty. 0 means stop. */
static size_t dqueue_take(struct dqueue *q, struct delivery *out, size_t max)
{
	size_t n;

	lock(&q->lock);
	while (!q->len && !q->stop)
		if (pthread_cond_wait(&q->cond, &q->lock))
			kairos_die("pthread_cond_wait");
	if (q->stop) {
		/* What is still queued is drained by kairos_destroy(). */
		unlock(&q->lock);
		return 0;
	}
	n = q->len < max ? q->len : max;
	for (size_t i = 0; i < n; i++)
		out[i] = q->buf[(q->head + i) % q->cap];
	q->head = (q->head + n) % q->cap;
	q->len -= n;
	if (q->len)
		pthread_cond_signal(&q->cond);	/* more for another worker */
	unlock(&q->lock);
	return n;
}

/* A periodic timer goes back to its shard for its next run. */
static void rearm(struct shard *s, struct rec *r, uint64_t old)
{
	struct rec_period *p = table_period(s, table_index(s, r));
	uint64_t tick = clock_tick_ceil(p->next_ns, s->k->cfg.tick_ns);

	for (;;) {
		uint64_t want;

		if (old & ST_STOP) {
			/* Cancelled while running: it ends here, counted as cancelled. */
			want = st_with(old & ~(ST_STOP | ST_WAITERS), ST_CANCELLED);
			if (atomic_compare_exchange_weak_explicit(&r->state, &old, want,
								  memory_order_acq_rel,
								  memory_order_acquire)) {
				atomic_fetch_add_explicit(&s->stats.cancelled, 1, memory_order_relaxed);
				shard_end(s, r, old);
				return;
			}
			continue;
		}
		/* Only this thread writes the deadline of a RUNNING record. */
		__atomic_store_n(&r->wt.deadline, tick, __ATOMIC_RELAXED);
		want = st_with(old & ~ST_WAITERS, ST_PENDING) | ST_QUEUED;
		/* Release: the deadline before the record is PENDING again. */
		if (atomic_compare_exchange_weak_explicit(&r->state, &old, want,
							  memory_order_acq_rel,
							  memory_order_acquire)) {
			if (old & ST_WAITERS)
				state_wake(&r->state);
			shard_post(s, r, tick);
			return;
		}
	}
}

/*
 * worker_deliver - runs one expired record's callback, unless a cancel got
 * there first.  Runs on a worker, or on the shard thread for inline delivery.
 */
void worker_deliver(struct kairos *k, struct shard *s, const struct delivery *d)
{
	struct rec *r = d->r;
	uint64_t old = atomic_load_explicit(&r->state, memory_order_acquire);
	bool periodic = old & ST_PERIODIC;
	uint64_t now;

	do {
		if (st_of(old) == ST_CANCELLED) {
			/* Cancelled after it expired: the canceller counted it. */
			table_retire(k, s, r);
			return;
		}
		if (st_of(old) != ST_FIRING)
			kairos_die("delivered record in an impossible state");
		/* Acquire: the callback sees everything done before the arm. */
	} while (!atomic_compare_exchange_weak_explicit(&r->state, &old, st_with(old, ST_RUNNING),
							 memory_order_acquire,
							 memory_order_acquire));
	now = clock_now_ns(k->cfg.clock);
	if (now < d->deadline_ns)
		atomic_fetch_add_explicit(&s->stats.early, 1, memory_order_relaxed);
	else
		lat_record(&s->lat, now - d->deadline_ns);
	if (periodic)
		atomic_fetch_add_explicit(&s->stats.periodic_runs, 1, memory_order_relaxed);
	else
		atomic_fetch_add_explicit(&s->stats.fired, 1, memory_order_relaxed);

	tls_timer = d->id;
	r->fn(r->arg, d->id, d->status);
	tls_timer = 0;

	old = atomic_load_explicit(&r->state, memory_order_acquire);
	if (periodic) {
		rearm(s, r, old);
		return;
	}
	/* Release: the callback's effects before cancel_sync sees it ended. */
	old = atomic_exchange_explicit(&r->state, st_with(old & ~ST_WAITERS, ST_DONE),
				       memory_order_acq_rel);
	shard_end(s, r, old);
}

static void *worker_main(void *arg)
{
	struct shard *s = arg;
	struct delivery batch[WORKER_BATCH];
	size_t n;

	tls_service = s->k;
	while ((n = dqueue_take(&s->dq, batch, WORKER_BATCH))) {
		for (size_t i = 0; i < n; i++) {
			/* Stopping: what has not started goes back to be drained. */
			if (atomic_load_explicit(&s->dq.stop, memory_order_relaxed)) {
				dqueue_unshift(&s->dq, &batch[i], n - i);
				break;
			}
			worker_deliver(s->k, s, &batch[i]);
		}
	}
	return NULL;
}

int worker_start(struct kairos *k, struct shard *s)
{
	int rc;

	if (k->cfg.delivery == KAIROS_DELIVER_INLINE)
		return 0;
	s->workers = calloc(k->cfg.workers, sizeof(*s->workers));
	if (!s->workers)
		return -ENOMEM;
	for (unsigned i = 0; i < k->cfg.workers; i++) {
		rc = -pthread_create(&s->workers[i], NULL, worker_main, s);
		if (rc)
			return rc;
		s->nworkers++;
	}
	return 0;
}

void worker_stop(struct shard *s)
{
	lock(&s->dq.lock);
	s->dq.stop = true;
	pthread_cond_broadcast(&s->dq.cond);
	unlock(&s->dq.lock);
	for (unsigned i = 0; i < s->nworkers; i++)
		if (pthread_join(s->workers[i], NULL))
			kairos_die("pthread_join");
	s->nworkers = 0;
	free(s->workers);
	s->workers = NULL;
}

/* ---- lateness histogram ---------------------------------------------------- */

/* Bucket of @ns: its octave and the 3 bits below the leading one. */
static unsigned lat_bucket(uint64_t ns)
{
	unsigned msb;

	if (ns < (1u << LAT_SUB_BITS))
		return (unsigned)ns;
	msb = 63u - (unsigned)__builtin_clzll(ns);
	return (msb - LAT_SUB_BITS + 1) << LAT_SUB_BITS |
	       ((unsigned)(ns >> (msb - LAT_SUB_BITS)) & ((1u << LAT_SUB_BITS) - 1));
}

uint64_t lat_bucket_upper(unsigned b)
{
	unsigned oct = b >> LAT_SUB_BITS, sub = b & ((1u << LAT_SUB_BITS) - 1);
	unsigned shift;

	if (oct == 0)
		return sub;
	shift = oct - 1;
	if (shift + LAT_SUB_BITS >= 64)
		return UINT64_MAX;
	return (((uint64_t)(sub | 1u << LAT_SUB_BITS) + 1) << shift) - 1;
}

void lat_record(struct lat_hist *h, uint64_t ns)
{
	uint64_t max = atomic_load_explicit(&h->max, memory_order_relaxed);

	atomic_fetch_add_explicit(&h->bucket[lat_bucket(ns)], 1, memory_order_relaxed);
	while (ns > max && !atomic_compare_exchange_weak_explicit(&h->max, &max, ns,
								  memory_order_relaxed,
								  memory_order_relaxed))
		;
}

/* The upper bound of the bucket holding quantile @q of @total samples. */
uint64_t lat_percentile(const uint64_t *bucket, uint64_t total, double q)
{
	uint64_t want, seen = 0;

	if (!total)
		return 0;
	want = (uint64_t)((double)total * q);
	if (want >= total)
		want = total - 1;
	for (unsigned b = 0; b < LAT_BUCKETS; b++) {
		seen += bucket[b];
		if (seen > want)
			return lat_bucket_upper(b);
	}
	return UINT64_MAX;
}
