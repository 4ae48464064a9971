/* SPDX-License-Identifier: MIT */
/*
 * worker.c - the threads that run callbacks, and the queue that feeds them.
 *
 * A shard hands each pass's expired records over in runs of up to
 * WORKER_BATCH: one lock and one signal per pass, not per timer.  A worker
 * takes one run under the lock (a pointer) and runs it outside, so a slow
 * callback holds up only the worker it runs on: the shard keeps expiring,
 * the other workers keep running.  What a run's records end is counted and
 * retired once per run (struct wtally).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "fault.h"
#include "internal.h"
#include "key.h"
#include "timer.h"

_Thread_local struct kairos *tls_service;
_Thread_local struct shard *tls_shard;
_Thread_local const struct cb_frame *tls_frame;

/* Appends the runs @first..@last (@nruns of them): one lock and one signal. */
void dqueue_push(struct dqueue *q, struct rec *first, struct rec *last, size_t nruns)
{
	mutex_lock(&q->lock);
	rec_link_set(last, NULL);
	if (q->tail)
		rec_link_set(q->tail, first);
	else
		q->head = first;
	q->tail = last;
	q->len += nruns;
	/* One waiter per run, all of them for many. */
	if (nruns > 1)
		pthread_cond_broadcast(&q->cond);
	else
		pthread_cond_signal(&q->cond);
	mutex_unlock(&q->lock);
}

/* Puts the rest of a run a stopping worker did not start back at the front. */
static void dqueue_unshift(struct dqueue *q, struct rec *run)
{
	mutex_lock(&q->lock);
	rec_link_set(run, q->head);
	q->head = run;
	if (!q->tail)
		q->tail = run;
	q->len++;
	mutex_unlock(&q->lock);
}

/* Takes one run; blocks while the queue is empty.  NULL means stop. */
static struct rec *dqueue_take(struct dqueue *q)
{
	struct rec *run;

	mutex_lock(&q->lock);
	while (!q->len && !q->stop) {
		int err = pthread_cond_wait(&q->cond, &q->lock);

		if (err)
			kairos_die_err("pthread_cond_wait", err);
	}
	if (q->stop) {
		/* What is still queued is drained by kairos_destroy(). */
		mutex_unlock(&q->lock);
		return NULL;
	}
	run = q->head;
	q->head = rec_link(run);
	if (!q->head)
		q->tail = NULL;
	if (--q->len)
		pthread_cond_signal(&q->cond);	/* more for another worker */
	mutex_unlock(&q->lock);
	return run;
}

/* Publishes what @w counted and hands its records to the reclaimer. */
void worker_tally_flush(struct shard *s, struct wtally *w)
{
	if (w->finished)
		/* Release: kairos_stats() that counts them sees their arms counted. */
		atomic_fetch_add_explicit(&s->stats.finished, w->finished, memory_order_release);
	w->finished = 0;
	rbundle_flush(s->k, s, &w->rb);
}

/*
 * A periodic timer goes back to its shard for its next run, after its
 * worker (or queue drainer) is done with it.
 */
void worker_rearm(struct shard *s, struct rec *r)
{
	struct rec_ext *p = table_ext(s, table_index(s, r));
	uint64_t tick, old;

	/* Only this thread writes a RUNNING record's ext entry. */
	if (p->policy == KAIROS_PERIOD_FIXED_DELAY)
		period_restart(p, service_now(s->k));
	tick = clock_tick_ceil(p->next_ns, s->k->cfg.tick_ns);

	if (!timer_rearm(r, tick, &old)) {
		/* Cancelled while running: it ends here, counted as cancelled. */
		atomic_fetch_add_explicit(&s->stats.cancelled, 1, memory_order_release);
		if (rec_queue_no(r))
			queue_unref(queue_get(s->k, rec_queue_no(r)));
		shard_end(s, r, old, NULL);
		return;
	}
	if (old & ST_WAITERS)
		service_event(s->k);
	/* Never waits (only arms do): a worker may be what the shard waits on. */
	(void)shard_post_recheck(s, r, tick);
}

/*
 * expiry_begin - the deadline and status of the expiry that record @r,
 * just claimed (RUNNING), delivers, with its lateness against now recorded
 * in @lane.
 * @coalesce: a queue's periodic entry that waited there; the periods since
 * join this call.
 */
uint64_t expiry_begin(struct kairos *k, struct shard *s, struct expiry_lane *lane, struct rec *r,
		      bool periodic, bool coalesce, int *status)
{
	uint64_t now = service_now(k), deadline_ns;

	/* A one-shot ends here: its key is free before its callback runs. */
	if (!periodic)
		key_release(k, r);
	if (periodic) {
		struct rec_ext *p = table_ext(s, table_index(s, r));

		if (coalesce)
			period_advance(p, p->fire_ns, now);
		deadline_ns = p->fire_ns;
		*status = p->fire_status;
	} else {
		/* Only resets move it, and none can while it is RUNNING. */
		deadline_ns = clock_tick_ns(__atomic_load_n(&r->wt.deadline, __ATOMIC_RELAXED),
					    k->cfg.tick_ns);
		*status = 1;
	}
	if (now < deadline_ns)
		atomic_fetch_add_explicit(&lane->early, 1, memory_order_relaxed);
	else
		lat_record(&lane->lat, now - deadline_ns);
	return deadline_ns;
}

/*
 * worker_deliver - runs one expired record's callback, unless a cancel got
 * there first.  Runs on a worker, or on the shard thread for inline delivery.
 */
void worker_deliver(struct kairos *k, struct shard *s, struct rec *r, struct wtally *w)
{
	struct cb_frame f;
	uint64_t old;
	int status;
	bool periodic;
	kairos_id id;

	switch (timer_claim(r, &old, false)) {
	case CLAIM_CANCELLED:
		/* Cancelled after it expired: the canceller counted it. */
		rbundle_add(k, s, &w->rb, r);
		return;
	case CLAIM_UNPARKED:
		kairos_die("a worker's record was parked");	/* only queues park */
	case CLAIM_RUN:
		break;
	}
	periodic = old & ST_PERIODIC;
	id = shard_rec_id(s, r, old);
	(void)expiry_begin(k, s, w->lane, r, periodic, false, &status);
	if (periodic)
		atomic_fetch_add_explicit(&w->lane->periodic_runs, 1, memory_order_relaxed);
	else
		atomic_fetch_add_explicit(&w->lane->fired, 1, memory_order_relaxed);

	cb_enter(&f, k, id);
	r->fn(r->arg, id, status);
	cb_leave(&f);

	if (periodic) {
		worker_rearm(s, r);
		return;
	}
	old = timer_done(r);
	/* Counted when the run is done (worker_tally_flush()). */
	w->finished++;
	shard_end(s, r, old, &w->rb);
}

static void *worker_main(void *arg)
{
	struct shard *s = arg;
	struct wtally w = { 0 };
	struct rec *run;
	unsigned seq = atomic_fetch_add_explicit(&s->worker_seq, 1, memory_order_relaxed);

	tls_service = s->k;
	thread_name("work", (int)s->index, (int)seq);
	w.lane = &s->lanes[seq % s->nlanes];
	while ((run = dqueue_take(&s->dq))) {
		for (struct rec *r = run, *next; r; r = next) {
			/* Read first: the record is another thread's once delivered. */
			next = rec_chain_next(r);
			if (next)
				__builtin_prefetch(next, 1);
			if (r->wt.link.prev)
				__builtin_prefetch(r->wt.link.prev, 1);	/* RUN_AHEAD on */
			/* Stopping: what has not started goes back to be drained. */
			if (atomic_load_explicit(&s->dq.stop, memory_order_relaxed)) {
				dqueue_unshift(&s->dq, r);
				break;
			}
			worker_deliver(s->k, s, r, &w);
		}
		worker_tally_flush(s, &w);
		/* The run is over, its callbacks returned: an advance may look (clock.c). */
		if (service_manual(s->k)) {
			clock_quiet_mark(s->k);
			atomic_fetch_add_explicit(&s->dq.runs_done, 1, memory_order_seq_cst);
			service_event(s->k);
		}
	}
	return NULL;
}

int worker_start(struct kairos *k, struct shard *s)
{
	int rc;

	if (k->cfg.delivery == KAIROS_DELIVER_INLINE)
		return 0;
	/* A start that failed before stopped what it had started. */
	s->dq.stop = false;
	s->workers = fault_calloc(k->cfg.workers, sizeof(*s->workers));
	if (!s->workers)
		return -ENOMEM;
	for (unsigned i = 0; i < k->cfg.workers; i++) {
		rc = fault_hit() ? -EAGAIN : -thread_start(&s->workers[i], worker_main, s);
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
