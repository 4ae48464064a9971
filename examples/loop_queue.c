/* SPDX-License-Identifier: MIT */
/*
 * loop_queue.c - the event-loop pattern: one thread, one epoll set, and the
 * idle timeouts of its connections delivered into that same thread through
 * a kairos queue.  The connection state never leaves the loop: no lock, no
 * hand-off list, and a timed-out connection is freed right in its callback.
 *
 * Simulates 500 connections for about a second.  A timerfd stands in for
 * the network: every 10 ms each live "busy" connection gets a packet
 * (kairos_reset pushes its timeout 200 ms later), while the "quiet" half
 * stops after 300 ms and must time out.  Each wake-up handles its I/O
 * before its timeouts, and a reset withdraws a timeout that expired but
 * waits untaken, so however late the loop runs, a connection that showed
 * life is kept.  At the end the busy ones close together, their timeouts
 * cancelled in one call (kairos_cancel_n).  Exits 1 if a busy connection
 * timed out or did not close, a quiet one did not time out, or a timeout
 * came early.
 *
 *	cc loop_queue.c $(pkg-config --cflags --libs kairos) -o loop_queue
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <kairos/kairos.h>

#define CONNS		500
#define IDLE_NS		(200 * 1000000ull)
#define QUIET_AFTER_NS	(300 * 1000000ull)
#define RUN_NS		(1200 * 1000000ull)

struct conn {
	kairos_id timeout;
	uint64_t last_packet;	/* service clock */
	bool busy;
};

static struct kairos *k;
static struct conn *conns[CONNS];
static int busy_timeouts, quiet_timeouts, early;

static uint64_t now_ns(void)
{
	uint64_t t = 0;

	kairos_now(k, &t);
	return t;
}

/* Runs on the loop thread, from kairos_queue_run(): free the connection here. */
static void on_idle(void *arg, kairos_id id, int status)
{
	struct conn *c = arg;

	(void)id;
	(void)status;
	if (now_ns() < c->last_packet + IDLE_NS)
		early++;
	if (c->busy)
		busy_timeouts++;
	else
		quiet_timeouts++;
	for (int i = 0; i < CONNS; i++)
		if (conns[i] == c)
			conns[i] = NULL;
	free(c);
}

/*
 * Shutting down: closes the open connections, all their timeouts in one
 * call.  Returns how many it closed before their timeouts ran.
 */
static int close_all(void)
{
	static kairos_id ids[CONNS];
	static struct conn *open[CONNS];
	static int results[CONNS];
	unsigned n = 0;
	int closed = 0;

	for (int i = 0; i < CONNS; i++)
		if (conns[i]) {
			open[n] = conns[i];
			ids[n++] = conns[i]->timeout;
		}
	if (kairos_cancel_n(k, ids, n, results) < 0) {
		fprintf(stderr, "kairos_cancel_n failed\n");
		return 0;
	}
	for (unsigned i = 0; i < n; i++)
		if (results[i] == 0) {
			free(open[i]);	/* closed: its timeout never runs */
			closed++;
		}
	return closed;
}

int main(void)
{
	struct kairos_timer_opts opts = { 0 };
	struct itimerspec tick = { .it_interval.tv_nsec = 10000000, .it_value.tv_nsec = 10000000 };
	struct epoll_event ev = { .events = EPOLLIN };
	struct kairos_queue *q;
	int ep, tfd, qfd, rc, quiet = 0, closed;
	uint64_t start;

	rc = kairos_create(NULL, &k);
	if (!rc)
		rc = kairos_queue_create(k, &q);
	if (rc) {
		fprintf(stderr, "kairos: %s\n", strerror(-rc));
		return 1;
	}
	opts.queue = q;
	start = now_ns();
	for (int i = 0; i < CONNS; i++) {
		struct conn *c = calloc(1, sizeof(*c));

		if (!c)
			return 1;
		c->busy = i % 2;
		quiet += !c->busy;
		c->last_packet = now_ns();
		rc = kairos_arm_opts(k, IDLE_NS, &opts, on_idle, c, &c->timeout);
		if (rc) {
			fprintf(stderr, "kairos_arm_opts: %s\n", strerror(-rc));
			return 1;
		}
		conns[i] = c;
	}

	ep = epoll_create1(EPOLL_CLOEXEC);
	tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
	qfd = kairos_queue_fd(q);
	if (ep < 0 || tfd < 0 || qfd < 0 || timerfd_settime(tfd, 0, &tick, NULL))
		return 1;
	ev.data.fd = tfd;
	epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &ev);
	ev.data.fd = qfd;
	epoll_ctl(ep, EPOLL_CTL_ADD, qfd, &ev);

	while (now_ns() < start + RUN_NS) {
		struct epoll_event evs[8];
		int n = epoll_wait(ep, evs, 8, 100);
		bool timeouts = false;

		for (int i = 0; i < n; i++) {
			uint64_t ticks, now;

			if (evs[i].data.fd == qfd) {
				timeouts = true;	/* after the I/O of this wake-up */
				continue;
			}
			/* "Packets": every busy connection, and the quiet ones at first. */
			now = now_ns();

			if (read(tfd, &ticks, sizeof(ticks)) != sizeof(ticks))
				continue;
			for (int c = 0; c < CONNS; c++) {
				struct conn *cn = conns[c];

				if (!cn || (!cn->busy && now > start + QUIET_AFTER_NS))
					continue;
				cn->last_packet = now;
				/* 0 even if its timeout expired and waits in the queue. */
				if (kairos_reset(k, cn->timeout, IDLE_NS) != 0)
					fprintf(stderr, "reset of a live connection failed\n");
			}
		}
		/* Timeouts: their callbacks run here, on this thread. */
		if (timeouts)
			kairos_queue_run(q, 256);
	}

	closed = close_all();
	printf("quiet timed out: %d of %d; busy timed out: %d; early: %d; busy closed: %d\n",
	       quiet_timeouts, quiet, busy_timeouts, early, closed);
	kairos_queue_destroy(q);
	kairos_destroy(k, KAIROS_DRAIN_DROP);
	close(tfd);
	close(ep);
	return quiet_timeouts == quiet && busy_timeouts == 0 && early == 0 &&
	       closed == CONNS - quiet ? 0 : 1;
}
