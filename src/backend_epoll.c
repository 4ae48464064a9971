/* SPDX-License-Identifier: MIT */
/*
 * backend_epoll.c - the fallback when io_uring is refused: the shard sleeps in
 * epoll_wait() on its timerfd and wake eventfd, then reads whichever fired.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "internal.h"

struct epoll_state {
	int epfd;
};

static int add(int epfd, int fd, uint32_t tag)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u32 = tag };
	int fl = fcntl(fd, F_GETFL);

	/* Reads after a readiness report must never block. */
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) ? -errno : 0;
}

static int epoll_init(struct shard *s)
{
	struct epoll_state *e = calloc(1, sizeof(*e));
	int rc;

	if (!e)
		return -ENOMEM;
	e->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (e->epfd < 0) {
		rc = -errno;
		free(e);
		return rc;
	}
	rc = add(e->epfd, s->tfd, BK_TIMER);
	if (!rc)
		rc = add(e->epfd, s->efd, BK_WAKE);
	if (rc) {
		close(e->epfd);
		free(e);
		return rc;
	}
	s->backend = e;
	return 0;
}

static int epoll_wait_ev(struct shard *s)
{
	struct epoll_state *e = s->backend;
	struct epoll_event evs[2];
	int n, ev = 0;

	do {
		n = epoll_wait(e->epfd, evs, 2, -1);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	for (int i = 0; i < n; i++) {
		int fd = evs[i].data.u32 == BK_TIMER ? s->tfd : s->efd;
		uint64_t v;

		/* EAGAIN: a settime raced the report; ECANCELED: clock was set. */
		if (read(fd, &v, sizeof(v)) < 0 && errno != EAGAIN && errno != ECANCELED)
			return -errno;
		ev |= (int)evs[i].data.u32;
	}
	return ev;
}

static void epoll_fini(struct shard *s)
{
	struct epoll_state *e = s->backend;

	if (!e)
		return;
	close(e->epfd);
	free(e);
	s->backend = NULL;
}

const struct backend_ops backend_epoll_ops = {
	.name = "epoll",
	.init = epoll_init,
	.wait = epoll_wait_ev,
	.fini = epoll_fini,
};
