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
#include "fault.h"
#include "internal.h"
#include "timer.h"

#define WORKER_BATCH	64

_Thread_local struct kairos *tls_service;
_Thread_local struct shard *tls_shard;
_Thread_local kairos_id tls_timer;

static struct rec *dq_next(struct rec *r)
{
	/* wt.link is the record's first member; see struct dqueue. */
	return r->wt.link.next ? (struct rec *)(void *)r->wt.link.next : NULL;
}

/* Appends the chain @first..@last of @n records: one lock and one signal. */
void dqueue_push(struct dqueue *q, struct rec *first, struct rec *last, size_t n)
{
	mutex_lock(&q->lock);
	rec_chain_append(&q->head, &q->tail, first, last);
	q->len += n;
	/* One waiter per WORKER_BATCH entries, all of them for a big batch. */
	if (n > WORKER_BATCH)
		pthread_cond_broadcast(&q->cond);
	else
		pthread_cond_signal(&q->cond);
	mutex_unlock(&q->lock);
}

/* Puts records a stopping worker took but did not start back at the front. */
static void dqueue_unshift(struct dqueue *q, struct rec **r, size_t n)
{
	if (!n)
		return;
	mutex_lock(&q->lock);
	for (size_t i = n; i-- > 0;) {
		r[i]->wt.link.next = q->head ? &q->head->wt.link : NULL;
		q->head = r[i];
		if (!q->tail)
			q->tail = r[i];
	}
	q->len += n;
	mutex_unlock(&q->lock);
}

/* Takes up to @max records; blocks while the queue is empty. 0 means stop. */
static size_t dqueue_take(struct dqueue *q, struct rec **out, size_t max)
{
	size_t n = 0;

	mutex_lock(&q->lock);
	while (!q->len && !q->stop) {
		int err = pthread_cond_wait(&q->cond, &q->lock);

		if (err)
			kairos_die_err("pthread_cond_wait", err);
	}
	if (q->stop) {
		/* What is still queued is drained by kairos_destroy(). */
		mutex_unlock(&q->lock);
		return 0;
	}
	while (n < max && q->head) {
		out[n++] = q->head;
		q->head = dq_next(q->head);
	}
	if (!q->head)
		q->tail = NULL;
	q->len -= n;
	if (q->len)
		pthread_cond_signal(&q->cond);	/* more for another worker */
	mutex_unlock(&q->lock);
	return n;
}

/* A periodic timer goes back to its shard for its next run. */
static void rearm(struct shard *s, struct rec *r)
{
	struct rec_period *p = table_period(s, table_index(s, r));
	uint64_t tick = clock_tick_ceil(p->next_ns, s->k->cfg.tick_ns);
	uint64_t old;

	if (!timer_rearm(r, tick, &old)) {
		/* Cancelled while running: it ends here, counted as cancelled. */
		atomic_fetch_add_explicit(&s->stats.cancelled, 1, memory_order_release);
		shard_end(s, r, old);
		return;
	}
	if (old & ST_WAITERS)
		service_event(s->k);
	/* Never waits (only arms do): a worker may be what the shard waits on. */
	(void)shard_post(s, NULL, r, tick);
}

/*
 * worker_deliver - runs one expired record's callback, unless a cancel got
 * there first.  Runs on a worker, or on the shard thread for inline delivery.
 */
void worker_deliver(struct kairos *k, struct shard *s, struct rec *r)
{
	uint64_t old, now, deadline_ns;
	int status = 1;
	bool periodic;
	kairos_id id;

	if (!timer_run(r, &old)) {
		/* Cancelled after it expired: the canceller counted it. */
		table_retire(k, s, r);
		return;
	}
	periodic = old & ST_PERIODIC;
	id = shard_rec_id(s, r, old);
	if (periodic) {
		const struct rec_period *p = table_period(s, table_index(s, r));

		deadline_ns = p->fire_ns;
		status = p->fire_status;
	} else {
		/* Only resets move it, and none can while it is FIRING. */
		deadline_ns = clock_tick_ns(__atomic_load_n(&r->wt.deadline, __ATOMIC_RELAXED),
					    k->cfg.tick_ns);
	}
	now = clock_now_ns(k->cfg.clock);
	if (now < deadline_ns)
		atomic_fetch_add_explicit(&s->stats.early, 1, memory_order_relaxed);
	else
		lat_record(&s->lat, now - deadline_ns);
	if (periodic)
		atomic_fetch_add_explicit(&s->stats.periodic_runs, 1, memory_order_relaxed);
	else
		atomic_fetch_add_explicit(&s->stats.fired, 1, memory_order_relaxed);

	tls_timer = id;
	r->fn(r->arg, id, status);
	tls_timer = 0;

	if (periodic) {
		rearm(s, r);
		return;
	}
	old = timer_done(r);
	/* Release: kairos_stats() that counts it sees its arm counted. */
	atomic_fetch_add_explicit(&s->stats.finished, 1, memory_order_release);
	shard_end(s, r, old);
}

static void *worker_main(void *arg)
{
	struct shard *s = arg;
	struct rec *batch[WORKER_BATCH];
	size_t n;

	tls_service = s->k;
	while ((n = dqueue_take(&s->dq, batch, WORKER_BATCH))) {
		for (size_t i = 0; i < n; i++) {
			/* Stopping: what has not started goes back to be drained. */
			if (atomic_load_explicit(&s->dq.stop, memory_order_relaxed)) {
				dqueue_unshift(&s->dq, &batch[i], n - i);
				break;
			}
			worker_deliver(s->k, s, batch[i]);
		}
	}
	return NULL;
}

int worker_start(struct kairos *k, struct shard *s)
{
	int rc;

	if (k->cfg.delivery == KAIROS_DELIVER_INLINE)
		return 0;
	s->workers = fault_calloc(k->cfg.workers, sizeof(*s->workers));
	if (!s->workers)
		return -ENOMEM;
	for (unsigned i = 0; i < k->cfg.workers; i++) {
		rc = fault_hit() ? -EAGAIN : -pthread_create(&s->workers[i], NULL, worker_main, s);
		if (rc) {
			/* Undo this shard's part: the caller undoes the shards before. */
			worker_stop(s);
			return rc;
		}
		s->nworkers++;
	}
	return 0;
}

void worker_stop(struct shard *s)
{
	mutex_lock(&s->dq.lock);
	s->dq.stop = true;
	pthread_cond_broadcast(&s->dq.cond);
	mutex_unlock(&s->dq.lock);
	for (unsigned i = 0; i < s->nworkers; i++)
		thread_join(s->workers[i]);
	s->nworkers = 0;
	free(s->workers);
	s->workers = NULL;
}
