/* SPDX-License-Identifier: MIT */
/*
 * idle_timeout.c - the pattern kairos is built for: one idle timeout per
 * connection, pushed later on every packet, cancelled at close.
 *
 * Simulates 1000 connections for about a second: every 10 ms each live
 * connection gets a "packet" with probability 3/4 (kairos_reset pushes its
 * timeout 200 ms later); half of them fall silent after 300 ms and must time
 * out (the callback); a few close on their own (kairos_cancel).  Exits 1 if
 * a connection timed out within 200 ms of its last packet, a silent one
 * did not time out, or anything was early.  (A busy connection may time out
 * when this loop itself is held up for 200 ms, as on a loaded machine: that
 * is the timeout doing its job, and the program says so.)
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
	uint64_t last_packet_ns;	/* the clock before its last arm or push */
	_Atomic uint64_t timed_out_ns;	/* when on_idle ran; 0: it has not */
	bool closed;
};

static struct conn conns[CONNS];
static atomic_int timeouts;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);	/* the service's clock */
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Runs on a kairos worker thread when a connection stayed idle too long. */
static void on_idle(void *arg, kairos_id id, int status)
{
	struct conn *c = arg;

	(void)id;
	if (status < 0)
		return;		/* -ECANCELED: drained at shutdown */
	atomic_store(&c->timed_out_ns, now_ns());
	atomic_fetch_add(&timeouts, 1);
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* Silent connections, not closed, whose timeout has not run yet. */
static int silent_left(void)
{
	int n = 0;

	for (int i = 1; i < CONNS; i += 2)
		n += !conns[i].closed && !atomic_load(&conns[i].timed_out_ns);
	return n;
}

int main(void)
{
	struct kairos *k;
	struct kairos_stats st;
	int rc, closed = 0, held_up = 0;

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
		conns[i].last_packet_ns = now_ns();
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

			if (c->closed || atomic_load(&c->timed_out_ns))
				continue;
			/* Half the connections go quiet after 300 ms. */
			if (i % 2 && tick > 30)
				continue;
			if (rand() % 4) {
				/* A packet: push the idle timeout later (a store). */
				uint64_t now = now_ns();

				rc = kairos_reset(k, c->timeout, IDLE_NS);
				if (rc == 0)
					c->last_packet_ns = now;
				else if (rc != -ENOENT)
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
	/*
	 * Silent since 300 ms, timed out by 520 ms (200 ms and its slack): all
	 * of them by now, or soon on a loaded machine (waited for up to 5 s).
	 */
	for (int w = 0; w < 500 && silent_left(); w++)
		sleep_ms(10);
	kairos_stats(k, &st);
	printf("connections %d, timed out %d, closed %d, still open %llu\n", CONNS,
	       atomic_load(&timeouts), closed, (unsigned long long)st.pending);
	printf("lateness p99 %.3f ms, early %llu\n", st.lateness_p99_ns / 1e6,
	       (unsigned long long)st.early);
	rc = 0;
	for (int i = 0; i < CONNS; i++) {
		struct conn *c = &conns[i];
		uint64_t out = atomic_load(&c->timed_out_ns);
		bool silent = i % 2;

		if (c->closed || silent == !!out)
			continue;
		if (out && out >= c->last_packet_ns + IDLE_NS) {
			held_up++;	/* busy, but this loop missed 200 ms of it */
			continue;
		}
		if (!rc++)
			fprintf(stderr, "connection %d: %s\n", i,
				out ? "timed out within 200 ms of its last packet"
				    : "silent but never timed out");
	}
	if (held_up)
		printf("%d busy connections timed out after this loop was held up"
		       " for 200 ms (a loaded machine)\n", held_up);
	if (st.early)
		rc = 1;
	/* Every timer still pending ends here, once, without a callback. */
	if (kairos_destroy(k, KAIROS_DRAIN_DROP) < 0)
		rc = 1;
	return rc ? 1 : 0;
}
