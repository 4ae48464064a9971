/* SPDX-License-Identifier: MIT */
/*
 * uring_echo.c - a one-thread io_uring echo server whose idle timeouts come
 * as completions in its own ring: with kairos_queue_ring(), kairos posts each
 * expiry as a CQE, so the one io_uring_submit_and_wait() of the loop sees
 * accepts, receives, sends and timeouts alike, and a connection that timed
 * out is closed and freed right there, on the loop thread.
 *
 * user_data: a connection pointer with a kind in its 3 low bits (malloc's
 * alignment leaves them 0), or a kind alone for the loop's own operations.
 * A timer is armed with such a value as its arg, which kairos hands back as
 * the CQE's user_data.  A connection is freed only when nothing can name it
 * any more: no recv or send of it in the ring (it has one at a time), and no
 * timeout CQE to come (a cancel that did not return 0 means one comes).
 *
 * Self-test: a client thread starts one thread per loopback connection (20);
 * most send a few messages and go quiet (the server must close them, never
 * earlier than IDLE_NS after their last message), some close first; the
 * server's counts and kairos_stats() must agree at the end.  Exits 0 on success,
 * 1 on a failed check, 77 (skip) without io_uring or IORING_OP_MSG_RING, or
 * with kairos on epoll (KAIROS_BACKEND=epoll).
 *
 *	cc uring_echo.c $(pkg-config --cflags --libs kairos liburing) -pthread
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <kairos/kairos.h>

#define IDLE_NS		(400 * 1000000ull)
#define SPACING_NS	(100 * 1000000ull)	/* between a busy client's messages */
#define CONNS		20
#define BATCH		64

enum ud_kind {
	UD_NONE,	/* a cancel request's own completion: nothing to do */
	UD_IO,		/* the connection's recv or send */
	UD_TIMEOUT,	/* the connection's idle timer, posted by kairos (res >= 1) */
	UD_ACCEPT,	/* the listener's accept */
	UD_QUEUE,	/* poll of the queue's fd: expiries whose post failed wait there */
	UD_STOP,	/* read of the stop eventfd: the client is done */
};
#define UD_KIND	7ull
_Static_assert(_Alignof(max_align_t) > UD_KIND, "no room for the kind bits");

struct conn {
	int fd;
	bool io_live;		/* a recv or send of it is in the ring */
	bool timer_live;	/* its timeout CQE may still come */
	bool closing;
	kairos_id timer;
	uint64_t last_rx;	/* service clock: the last message received */
	struct conn *next, **pprev;
	size_t len, off;	/* an echo: buf[off..len) is still to send */
	char buf[512];
};

static struct io_uring ring;
static struct kairos *k;
static struct kairos_queue *q;
static struct conn *conns;	/* to close them all at shutdown */
static int nconns, listen_fd = -1, stop_fd = -1;
static int arms, expiries, zero_cancels, timeouts;
static atomic_int failed;	/* failed checks of the client */
static uint64_t stop_val;
static bool stopping;

static uint64_t ud(struct conn *c, enum ud_kind kind) { return (uintptr_t)c | kind; }
static struct conn *ud_conn(uint64_t u) { return (struct conn *)(uintptr_t)(u & ~UD_KIND); }

static struct io_uring_sqe *sqe_for(uint64_t user_data)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);

	if (!sqe) {	/* the SQ is full: hand it to the kernel, then there is room */
		io_uring_submit(&ring);
		sqe = io_uring_get_sqe(&ring);
	}
	if (!sqe) {
		fprintf(stderr, "server: no room in the submission queue\n");
		exit(1);
	}
	io_uring_sqe_set_data64(sqe, user_data);
	return sqe;
}

static void conn_io(struct conn *c)
{
	struct io_uring_sqe *sqe = sqe_for(ud(c, UD_IO));

	if (c->off < c->len)
		io_uring_prep_send(sqe, c->fd, c->buf + c->off, c->len - c->off, MSG_NOSIGNAL);
	else
		io_uring_prep_recv(sqe, c->fd, c->buf, sizeof(c->buf), 0);
	c->io_live = true;
}

static bool conn_arm(struct conn *c, uint64_t deadline)
{
	struct kairos_timer_opts o = { .queue = q, .slack_ns = IDLE_NS / 10,
				       .flags = KAIROS_ABSTIME };
	int rc = kairos_arm_opts(k, deadline, &o, NULL, (void *)(uintptr_t)ud(c, UD_TIMEOUT),
				 &c->timer);

	if (rc) {
		fprintf(stderr, "server: kairos_arm_opts: %s\n", strerror(-rc));
		return false;
	}
	c->timer_live = true;
	arms++;
	return true;
}

/* Starts closing @c (once), and frees it as soon as nothing in flight names it. */
static void conn_close(struct conn *c)
{
	if (!c->closing) {
		c->closing = true;
		/* 0: no CQE will come.  -EBUSY (being posted), -ENOENT (posted): one will. */
		if (c->timer_live && kairos_cancel(k, c->timer) == 0) {
			c->timer_live = false;
			zero_cancels++;
		}
		if (c->io_live)	/* its CQE (-ECANCELED, or what it did first) ends it */
			io_uring_prep_cancel64(sqe_for(UD_NONE), ud(c, UD_IO), 0);
	}
	if (c->io_live || c->timer_live)
		return;
	if ((*c->pprev = c->next))
		c->next->pprev = c->pprev;
	close(c->fd);
	free(c);
	nconns--;
}

static void on_accept(int fd)
{
	struct conn *c = fd >= 0 ? calloc(1, sizeof(*c)) : NULL;

	io_uring_prep_accept(sqe_for(UD_ACCEPT), listen_fd, NULL, NULL, SOCK_CLOEXEC);
	if (!c) {
		fprintf(stderr, "server: accept: %s\n", strerror(fd < 0 ? -fd : ENOMEM));
		if (fd >= 0)
			close(fd);
		return;
	}
	c->fd = fd;
	if ((c->next = conns))
		conns->pprev = &c->next;
	c->pprev = &conns;
	conns = c;
	nconns++;
	kairos_now(k, &c->last_rx);
	if (conn_arm(c, c->last_rx + IDLE_NS) && !stopping)
		conn_io(c);
	else
		conn_close(c);
}

static void on_io(struct conn *c, int res)
{
	c->io_live = false;
	if (c->closing || res <= 0) {	/* closing, peer closed (0), or an error */
		conn_close(c);
		return;
	}
	if (c->off < c->len) {		/* a send completed, maybe in part */
		c->off += (size_t)res;
	} else {			/* a message: echo it, push the timeout later */
		c->len = (size_t)res;
		c->off = 0;
		kairos_now(k, &c->last_rx);
		/* -ENOENT: the expiry is already on its way; on_timeout() re-arms. */
		(void)kairos_reset_at(k, c->timer, c->last_rx + IDLE_NS);
	}
	conn_io(c);
}

static void on_timeout(struct conn *c)
{
	uint64_t now;

	expiries++;
	c->timer_live = false;
	kairos_now(k, &now);
	/* A message handled since its post was claimed: arm again for the rest. */
	if (!c->closing && now < c->last_rx + IDLE_NS && conn_arm(c, c->last_rx + IDLE_NS))
		return;
	timeouts += !c->closing;
	conn_close(c);
}

/* Expiries whose CQE could not be posted wait in the queue: take them too. */
static void on_queue(uint64_t *tmo, unsigned *nt)
{
	struct kairos_expiry e[16];
	int n = kairos_queue_take(q, e, 16, 0);

	for (int i = 0; i < n; i++)
		tmo[(*nt)++] = (uintptr_t)e[i].arg;
	io_uring_prep_poll_add(sqe_for(UD_QUEUE), kairos_queue_fd(q), POLLIN);
}

static int serve(void)
{
	struct io_uring_cqe *cqes[BATCH];
	uint64_t tmo[BATCH + 16];

	io_uring_prep_accept(sqe_for(UD_ACCEPT), listen_fd, NULL, NULL, SOCK_CLOEXEC);
	io_uring_prep_poll_add(sqe_for(UD_QUEUE), kairos_queue_fd(q), POLLIN);
	io_uring_prep_read(sqe_for(UD_STOP), stop_fd, &stop_val, sizeof(stop_val), 0);
	while (!stopping || nconns) {
		int rc = io_uring_submit_and_wait(&ring, 1);
		unsigned n, nt = 0;

		if (rc < 0 && rc != -EINTR) {
			fprintf(stderr, "server: io_uring_submit_and_wait: %s\n", strerror(-rc));
			return -1;
		}
		/*
		 * The I/O of a wake-up first, its timeouts after: a message that
		 * comes with its connection's expiry keeps the connection.  A
		 * connection with a timeout CQE in this batch has timer_live set,
		 * so it is still allocated when its turn comes.
		 */
		n = io_uring_peek_batch_cqe(&ring, cqes, BATCH);
		for (unsigned i = 0; i < n; i++) {
			uint64_t u = cqes[i]->user_data;
			struct conn *c, *next;

			switch (u & UD_KIND) {
			case UD_IO:
				on_io(ud_conn(u), cqes[i]->res);
				break;
			case UD_TIMEOUT:
				tmo[nt++] = u;
				break;
			case UD_ACCEPT:
				on_accept(cqes[i]->res);
				break;
			case UD_QUEUE:
				on_queue(tmo, &nt);
				break;
			case UD_STOP:
				stopping = true;
				for (c = conns; c; c = next) {
					next = c->next;
					conn_close(c);
				}
				break;
			}
		}
		io_uring_cq_advance(&ring, n);
		for (unsigned i = 0; i < nt; i++)
			on_timeout(ud_conn(tmo[i]));
	}
	return 0;
}

/* The client: one thread per connection, blocking sockets. */
static struct sockaddr_in addr;

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Connection @arg: 2 messages, then closes (i % 4 == 3); or 3 to 11, then quiet. */
static void *peer(void *arg)
{
	int i = (int)(intptr_t)arg, n = i % 4 == 3 ? 2 : 3 + (i % 3) * 4, r = 1;
	struct timeval rcv_timeout = { .tv_sec = 6 };	/* bounds every wait below */
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	const char *bad = NULL;
	char msg[64], echo[64];
	uint64_t last = mono_ns();

	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &rcv_timeout, sizeof(rcv_timeout)) ||
	    connect(fd, (struct sockaddr *)&addr, sizeof(addr)))
		bad = "no connection";
	for (int m = 0; m < n && !bad; m++) {
		int len = snprintf(msg, sizeof(msg), "connection %d, message %d\n", i, m);

		if (m)
			nanosleep(&(struct timespec){ .tv_nsec = SPACING_NS }, NULL);
		last = mono_ns();
		if (send(fd, msg, (size_t)len, MSG_NOSIGNAL) != len)
			bad = "send failed while busy";
		for (int got = 0; !bad && got < len; got += r)
			if ((r = (int)recv(fd, echo + got, (size_t)(len - got), 0)) <= 0)
				bad = "closed while busy";
		if (!bad && memcmp(msg, echo, (size_t)len))
			bad = "wrong echo";
	}
	if (!bad && n != 2) {	/* quiet: the server closes it, never before IDLE_NS */
		r = (int)recv(fd, echo, 1, 0);
		if (r)
			bad = r > 0 ? "unexpected data" : "not closed by the server in 6 s";
		else if (mono_ns() - last < IDLE_NS)
			bad = "closed before its idle time";
	}
	if (bad) {
		fprintf(stderr, "FAIL: connection %d: %s (%llu ms after its last message)\n", i,
			bad, (unsigned long long)(mono_ns() - last) / 1000000);
		atomic_fetch_add(&failed, 1);
	}
	if (fd >= 0)
		close(fd);
	return NULL;
}

static void *client(void *unused)
{
	pthread_t th[CONNS];
	int n;

	(void)unused;
	for (n = 0; n < CONNS; n++)
		if (pthread_create(&th[n], NULL, peer, (void *)(intptr_t)n)) {
			fprintf(stderr, "FAIL: no thread for connection %d\n", n);
			atomic_fetch_add(&failed, 1);
			break;
		}
	while (n--)
		pthread_join(th[n], NULL);
	if (write(stop_fd, &(uint64_t){ 1 }, 8) != 8)
		abort();	/* the server would wait forever */
	return NULL;
}

static int check_stats(void)
{
	struct kairos_stats st = { 0 };

	/* The shard counts a post as fired when its own completion of it comes back. */
	for (int i = 0; i < 200 && !kairos_stats(k, &st) && st.pending; i++)
		usleep(10000);
	printf("uring_echo: %d timed out; %d arms, %d expiries, %d cancels returned 0; kairos: "
	       "armed %llu fired %llu cancelled %llu drained %llu pending %llu\n", timeouts, arms,
	       expiries, zero_cancels, (unsigned long long)st.armed, (unsigned long long)st.fired,
	       (unsigned long long)st.cancelled, (unsigned long long)st.drained,
	       (unsigned long long)st.pending);
	if (st.armed != st.fired + st.cancelled + st.drained + st.pending || st.pending ||
	    st.armed != (uint64_t)arms || st.fired != (uint64_t)expiries ||
	    st.cancelled != (uint64_t)zero_cancels) {
		fprintf(stderr, "FAIL: the counts do not add up\n");
		return 1;
	}
	if (timeouts != CONNS - CONNS / 4) {
		fprintf(stderr, "FAIL: %d connections timed out, not %d\n", timeouts,
			CONNS - CONNS / 4);
		return 1;
	}
	return 0;
}

/* Returns 77, meson's "skipped", for io_uring refused; 1 for other errors. */
static int setup_failed(const char *what, int rc, bool skip)
{
	fprintf(skip ? stdout : stderr, "%s: %s: %s\n", skip ? "SKIP" : "FAIL", what,
		strerror(-rc));
	return skip ? 77 : 1;
}

int main(void)
{
	socklen_t salen = sizeof(addr);
	const char *backend = "?", *why = "?";
	pthread_t th;
	int rc, ret;

	rc = kairos_create(NULL, &k);
	if (rc)
		return setup_failed("kairos_create", rc, false);
	rc = kairos_queue_create(k, &q);
	if (rc) {
		ret = setup_failed("kairos_queue_create", rc, false);
		goto out_service;
	}
	kairos_backend_info(k, (unsigned)kairos_queue_shard(q), &backend, &why);
	if (strcmp(backend, "io_uring")) {
		printf("SKIP: kairos runs on %s (%s)\n", backend, why);
		ret = 77;
		goto out_queue;
	}
	rc = io_uring_queue_init(256, &ring, 0);
	if (rc) {
		ret = setup_failed("io_uring_queue_init", rc, rc == -ENOSYS || rc == -EPERM ||
				   rc == -EACCES || rc == -ENOMEM);
		goto out_queue;
	}
	/* From here on, each expiry of @q is a CQE of @ring. */
	rc = kairos_queue_ring(q, ring.ring_fd);
	if (rc) {
		ret = setup_failed("kairos_queue_ring", rc, rc == -EOPNOTSUPP);
		goto out_ring;
	}
	addr = (struct sockaddr_in){ .sin_family = AF_INET,
				     .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	stop_fd = eventfd(0, EFD_CLOEXEC);
	if (listen_fd < 0 || stop_fd < 0 || bind(listen_fd, (struct sockaddr *)&addr, salen) ||
	    listen(listen_fd, CONNS) || getsockname(listen_fd, (struct sockaddr *)&addr, &salen)) {
		ret = setup_failed("listener", -errno, false);
		goto out_fds;
	}
	rc = pthread_create(&th, NULL, client, NULL);
	if (rc) {
		ret = setup_failed("pthread_create", -rc, false);
		goto out_fds;
	}
	rc = serve();
	pthread_join(th, NULL);
	ret = rc ? 1 : check_stats();
	if (failed)
		ret = 1;
out_fds:
	if (listen_fd >= 0)
		close(listen_fd);
	if (stop_fd >= 0)
		close(stop_fd);
out_ring:
	io_uring_queue_exit(&ring);
out_queue:
	kairos_queue_destroy(q);
out_service:
	kairos_destroy(k, KAIROS_DRAIN_DROP);
	while (conns) {		/* left only when the loop failed */
		struct conn *c = conns;

		conns = c->next;
		close(c->fd);
		free(c);
	}
	return ret;
}
