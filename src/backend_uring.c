/* SPDX-License-Identifier: MIT */
/*
 * backend_uring.c - a shard waits on its timerfd and wake eventfd through an
 * io_uring ring: one 8-byte read outstanding on each, one io_uring_enter()
 * per wake-up that both submits the re-armed reads and waits.
 *
 * Setup tries the newest useful flags first and drops them on -EINVAL, so
 * one binary runs on older kernels: SINGLE_ISSUER (6.0) and COOP_TASKRUN
 * (5.19) save the kernel work because only the shard thread submits.  The
 * ring is created on the shard thread, as SINGLE_ISSUER requires.
 */
#include <errno.h>
#include <liburing.h>
#include <stdlib.h>

#include "fault.h"
#include "internal.h"

#define UD_TIMER	1
#define UD_WAKE		2

struct uring_state {
	struct io_uring ring;
	uint64_t tbuf, ebuf;
	bool tread, eread;	/* a read is outstanding */
};

static int uring_init(struct shard *s)
{
	static const unsigned ladder[] = {
		IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN,
		IORING_SETUP_COOP_TASKRUN,
		0,
	};
	unsigned entries = s->k->cfg.ring_entries;
	struct uring_state *u = fault_calloc(1, sizeof(*u));
	int rc = -EINVAL;

	if (!u)
		return -ENOMEM;
	/* A test may refuse the ring (see fault.h). */
	rc = fault_hit() ? -ENOMEM : -atomic_load_explicit(&fault_uring, memory_order_relaxed);
	if (rc) {
		free(u);
		return rc;
	}
	rc = -EINVAL;
	for (size_t i = 0; i < sizeof(ladder) / sizeof(ladder[0]); i++) {
		struct io_uring_params p = { .flags = ladder[i] };

		rc = io_uring_queue_init_params(entries, &u->ring, &p);
		if (rc != -EINVAL)
			break;
	}
	if (rc) {
		free(u);
		return rc;
	}
	s->backend = u;
	return 0;
}

static int queue_read(struct uring_state *u, int fd, uint64_t *buf, uint64_t tag)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);

	if (!sqe) {
		/* A ring of one entry: hand the first read to the kernel, retry. */
		int rc = io_uring_submit(&u->ring);

		if (rc < 0)
			return rc;
		sqe = io_uring_get_sqe(&u->ring);
		if (!sqe)
			return -EBUSY;
	}
	io_uring_prep_read(sqe, fd, buf, sizeof(*buf), 0);
	io_uring_sqe_set_data64(sqe, tag);
	return 0;
}

static int uring_wait(struct shard *s)
{
	struct uring_state *u = s->backend;
	struct io_uring_cqe *cqe;
	unsigned head, seen = 0;
	int rc, ev = 0;

	if (!u->tread) {
		rc = queue_read(u, s->tfd, &u->tbuf, UD_TIMER);
		if (rc)
			return rc;
		u->tread = true;
	}
	if (!u->eread) {
		rc = queue_read(u, s->efd, &u->ebuf, UD_WAKE);
		if (rc)
			return rc;
		u->eread = true;
	}
	do {
		rc = io_uring_submit_and_wait(&u->ring, 1);
	} while (rc == -EINTR);
	if (rc < 0)
		return rc;
	io_uring_for_each_cqe(&u->ring, head, cqe) {
		seen++;
		if (cqe->user_data == UD_TIMER) {
			u->tread = false;
			/* -ECANCELED: the clock was set (CANCEL_ON_SET is not used). */
			if (cqe->res == sizeof(uint64_t) || cqe->res == -ECANCELED)
				ev |= BK_TIMER;
		} else if (cqe->user_data == UD_WAKE) {
			u->eread = false;
			ev |= BK_WAKE;
		}
		if (cqe->res < 0 && cqe->res != -ECANCELED && cqe->res != -EINTR &&
		    cqe->res != -EAGAIN)
			rc = cqe->res;
	}
	io_uring_cq_advance(&u->ring, seen);
	if (rc < 0)
		return rc;
	/* Nothing but a re-check is needed: the loop looks at the inbox and clock. */
	return ev ? ev : BK_WAKE;
}

static void uring_fini(struct shard *s)
{
	struct uring_state *u = s->backend;

	if (!u)
		return;
	io_uring_queue_exit(&u->ring);
	free(u);
	s->backend = NULL;
}

const struct backend_ops backend_uring_ops = {
	.name = "io_uring",
	.init = uring_init,
	.wait = uring_wait,
	.fini = uring_fini,
};
