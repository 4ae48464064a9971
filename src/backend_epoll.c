/* SPDX-License-Identifier: MIT */
/*
 * backend_epoll.c - the fallback when io_uring is refused: the shard sleeps in
 * epoll_wait() on its timerfd and wake eventfd, then reads whichever fired.
 *
 * When a ring stops working at run time and no epoll instance can be made
 * (no fd left), the shard waits with poll() on the same two descriptors:
 * that needs neither an fd nor memory, so the move cannot fail.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "fault.h"
#include "clock.h"
#include "internal.h"

static int add(int epfd, int fd, uint32_t tag)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u32 = tag };

	if (fault_hit())
		return -ENOMEM;
	return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) ? -errno : 0;
}

static int nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	/* Reads after a readiness report must never block. */
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

static int epoll_init(struct shard *s)
{
	int rc, epfd;

	s->epfd = -1;
	/* A manual-clock shard has no timerfd (tfd -1); poll() skips a -1 too. */
	rc = s->tfd >= 0 ? nonblock(s->tfd) : 0;
	if (!rc)
		rc = nonblock(s->efd);
	if (rc)
		return rc;
	if (fault_hit())
		return -EMFILE;
	epfd = epoll_create1(EPOLL_CLOEXEC);
	if (epfd < 0)
		return -errno;
	rc = s->tfd >= 0 ? add(epfd, s->tfd, BK_TIMER) : 0;
	if (!rc)
		rc = add(epfd, s->efd, BK_WAKE);
	if (rc) {
		close(epfd);
		return rc;
	}
	s->epfd = epfd;
	return 0;
}

/* Reads the fd that fired, so that it stops reporting; returns its BK_* bit. */
static int consume(struct shard *s, int bit)
{
	uint64_t v;

	/* EAGAIN: a settime raced the report; ECANCELED only with TFD_TIMER_CANCEL_ON_SET (unused). */
	if (read(bit == BK_TIMER ? s->tfd : s->efd, &v, sizeof(v)) < 0 && errno != EAGAIN &&
	    errno != ECANCELED)
		return -errno;
	return bit;
}

/*
 * The timeout of a wait: none, but for a while after a move from io_uring
 * (shard->watch_until, backend.c).
 */
static int wait_ms(struct shard *s)
{
	if (__builtin_expect(!s->watch_until, 1))
		return -1;
	if (clock_now_ns(CLOCK_MONOTONIC) >= s->watch_until) {
		s->watch_until = 0;
		return -1;
	}
	return FALLBACK_WATCH_POLL_MS;
}

/* A wait that timed out while watching: the pass re-arms the timerfd and takes its wake-ups. */
#define WATCH_PASS	(BK_TIMER | BK_WAKE)

static int poll_wait(struct shard *s)
{
	struct pollfd p[2] = { { .fd = s->tfd, .events = POLLIN }, { .fd = s->efd, .events = POLLIN } };
	int n, ev = 0, rc;

	do {
		n = poll(p, 2, wait_ms(s));
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if (n == 0)
		return WATCH_PASS;
	for (int i = 0; i < 2; i++) {
		if (!p[i].revents)
			continue;
		rc = consume(s, i ? BK_WAKE : BK_TIMER);
		if (rc < 0)
			return rc;
		ev |= rc;
	}
	return ev;
}

static int epoll_wait_ev(struct shard *s)
{
	struct epoll_event evs[2];
	int n, ev = 0, rc;

	if (s->epfd < 0)
		return poll_wait(s);
	do {
		n = epoll_wait(s->epfd, evs, 2, wait_ms(s));
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if (n == 0)
		return WATCH_PASS;
	for (int i = 0; i < n; i++) {
		rc = consume(s, (int)evs[i].data.u32);
		if (rc < 0)
			return rc;
		ev |= rc;
	}
	return ev;
}

static void epoll_fini(struct shard *s)
{
	if (s->epfd >= 0)
		close(s->epfd);
	s->epfd = -1;
}

const struct backend_ops backend_epoll_ops = {
	.name = "epoll",
	.init = epoll_init,
	.wait = epoll_wait_ev,
	.fini = epoll_fini,
};
