/* SPDX-License-Identifier: MIT */
/*
 * idle_timeout.c - the pattern kairos is built for: one idle timeout per
 * connection, pushed later on every packet, cancelled at close.
 *
 * Simulates 1000 connections for about a second: every 10 ms each live
 * connection gets a "packet" with probability 3/4 (kairos_reset pushes its
 * timeout 200 ms later); half of them fall silent after 300 ms and must time
 * out (the callback); a few close on their own (kairos_cancel).  Exits 1 if
 * a busy connection timed out, a silent one did not, or anything was early.
 *
 *	cc idle_timeout.c $(pkg-config --cflags --libs kairos) -o idle_timeout
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <kairos/kairos.h>

#define CONNS		1000
#define IDLE_NS		(200 * 1000000ull)

struct conn {
	kairos_id timeout;
	atomic_bool timed_out;
	bool closed;
};

static struct conn conns[CONNS];
static atomic_int timeouts;

/* Runs on a kairos worker thread when a connection stayed idle too long. */
static void on_idle(void *arg, kairos_id id, int status)
{
	struct conn *c = arg;

	(void)id;
	if (status < 0)
		return;		/* -ECANCELED: drained at shutdown */
	atomic_store(&c->timed_out, true);
	atomic_fetch_add(&timeouts, 1);
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

int main(void)
{
	struct kairos *k;
	struct kairos_stats st;
	int rc, closed = 0;

	rc = kairos_create(NULL, &k);
	if (rc) {
		fprintf(stderr, "kairos_create: %d\n", rc);
		return 1;
	}
	for (int i = 0; i < CONNS; i++) {
		/*
		 * A tenth of slack: the timeout may fire up to 20 ms late, never
		 * early, so the wheel files it fewer times, and where the machine
		 * allows it the arm and every reset read the CPU's counter rather
		 * than clock_gettime() (kairos_arm_slack(3), kairos_clock_info(3)).
		 */
		rc = kairos_arm_slack(k, IDLE_NS, IDLE_NS / 10, on_idle, &conns[i],
				      &conns[i].timeout);
		if (rc) {
			fprintf(stderr, "kairos_arm_slack: %d\n", rc);
			return 1;
		}
	}
	srand(1);
	for (int tick = 0; tick < 100; tick++) {
		for (int i = 0; i < CONNS; i++) {
			struct conn *c = &conns[i];

			if (c->closed || atomic_load(&c->timed_out))
				continue;
			/* Half the connections go quiet after 300 ms. */
			if (i % 2 && tick > 30)
				continue;
			if (rand() % 4) {
				/* A packet: push the idle timeout later (a store). */
				rc = kairos_reset(k, c->timeout, IDLE_NS);
				if (rc && rc != -ENOENT)
					fprintf(stderr, "kairos_reset: %d\n", rc);
			}
			if (rand() % 5000 == 0) {
				/* The peer closed: 0 means on_idle will never run. */
				if (kairos_cancel(k, c->timeout) == 0) {
					c->closed = true;
					closed++;
				}
			}
		}
		sleep_ms(10);
	}
	/* Silent since 300 ms, timed out by 500 ms: all of them by now. */
	kairos_stats(k, &st);
	printf("connections %d, timed out %d, closed %d, still open %llu\n", CONNS,
	       atomic_load(&timeouts), closed, (unsigned long long)st.pending);
	printf("lateness p99 %.3f ms, early %llu\n", st.lateness_p99_ns / 1e6,
	       (unsigned long long)st.early);
	rc = 0;
	for (int i = 0; i < CONNS; i++) {
		bool silent = i % 2, out = atomic_load(&conns[i].timed_out);

		if (!conns[i].closed && silent != out && !rc++)
			fprintf(stderr, "connection %d: %s\n", i,
				out ? "busy but timed out" : "silent but never timed out");
	}
	if (st.early)
		rc = 1;
	/* Every timer still pending ends here, once, without a callback. */
	if (kairos_destroy(k, KAIROS_DRAIN_DROP) < 0)
		rc = 1;
	return rc ? 1 : 0;
}
