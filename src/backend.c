/* SPDX-License-Identifier: MIT */
/*
 * backend.c - which kernel interface a shard sleeps with, and what happens
 * when that interface is refused, at create time or later.
 *
 * The policy, in one place:
 *  - The configuration's backend wins; with KAIROS_BACKEND_AUTO the
 *    environment variable KAIROS_BACKEND (read once per kairos_create())
 *    may force one.  An unknown value fails the create with -EINVAL: a typo
 *    must not pass for a choice.
 *  - AUTO tries io_uring and falls back to epoll + timerfd when the kernel
 *    refuses it: ENOSYS (no io_uring), EPERM or EACCES (seccomp,
 *    kernel.io_uring_disabled), or ENOMEM while RLIMIT_MEMLOCK is finite
 *    (kernels that charge rings to that limit refuse them to unprivileged
 *    users long before memory runs out), or a ring without IORING_OP_READ
 *    or that refuses its probe (EOPNOTSUPP from uring_init(): before Linux
 *    5.6).  Other failures fail the create.
 *  - A forced io_uring fails the create rather than fall back.
 *  - A ring that stops working after create (a sandbox installed later,
 *    io_uring_enter() refused) moves its shard to epoll at run time,
 *    whatever was asked for: the shard must keep firing what it holds; for a
 *    second after, its waits are short (the old ring's reads are cancelled
 *    by the kernel later, and may take a count meanwhile).
 * Every choice is reported with a sentence that kairos_backend_info() gives
 * back, and that stays readable until kairos_destroy().
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>

#include "clock.h"
#include "internal.h"

int backend_choose(struct kairos *k)
{
	const char *env = getenv("KAIROS_BACKEND");

	k->backend = k->cfg.backend;
	switch (k->cfg.backend) {
	case KAIROS_BACKEND_URING:
		k->backend_why = "io_uring forced by the configuration";
		return 0;
	case KAIROS_BACKEND_EPOLL:
		k->backend_why = "epoll + timerfd forced by the configuration";
		return 0;
	default:
		break;
	}
	k->backend_why = "io_uring available (probed at create)";
	if (!env || !*env || !strcasecmp(env, "auto"))
		return 0;
	/* "io_uring" is what kairos_backend_info() prints, so it is accepted too. */
	if (!strcasecmp(env, "uring") || !strcasecmp(env, "io_uring")) {
		k->backend = KAIROS_BACKEND_URING;
		k->backend_why = "io_uring forced by KAIROS_BACKEND";
	} else if (!strcasecmp(env, "epoll")) {
		k->backend = KAIROS_BACKEND_EPOLL;
		k->backend_why = "epoll + timerfd forced by KAIROS_BACKEND";
	} else {
		return -EINVAL;
	}
	return 0;
}

/* Whether io_uring's setup error @rc means "refused here", not "broken". */
static bool uring_refused(int rc, char *why, size_t len)
{
	struct rlimit rl;

	if (rc == -EOPNOTSUPP) {
		snprintf(why, len, "io_uring lacks IORING_OP_READ, or refused its probe "
			 "(Linux 5.6 or later needed); using epoll + timerfd");
		return true;
	}
	if (rc == -ENOSYS || rc == -EPERM || rc == -EACCES) {
		snprintf(why, len, "io_uring refused by the kernel (%s); using epoll + timerfd",
			 strerror(-rc));
		return true;
	}
	if (rc == -ENOMEM && !getrlimit(RLIMIT_MEMLOCK, &rl) && rl.rlim_cur != RLIM_INFINITY) {
		snprintf(why, len,
			 "io_uring setup failed with ENOMEM under RLIMIT_MEMLOCK of %llu KiB; "
			 "using epoll + timerfd", (unsigned long long)rl.rlim_cur / 1024);
		return true;
	}
	return false;
}

static void report(struct shard *s, unsigned which, const struct backend_ops *ops,
		   const char *why)
{
	struct backend_report *r = &s->report[which];

	s->ops = ops;
	r->name = ops->name;
	if (why != r->why)
		snprintf(r->why, sizeof(r->why), "%s", why);
	/* Release: the text before the pointer kairos_backend_info() reads. */
	atomic_store_explicit(&s->rep, r, memory_order_release);
}

int backend_start(struct shard *s)
{
	struct kairos *k = s->k;
	char *why = s->report[0].why;
	int rc;

	if (k->backend == KAIROS_BACKEND_EPOLL) {
		rc = backend_epoll_ops.init(s);
		if (!rc)
			report(s, 0, &backend_epoll_ops, k->backend_why);
		return rc;
	}
	rc = backend_uring_ops.init(s);
	if (!rc) {
		report(s, 0, &backend_uring_ops, k->backend_why);
		return 0;
	}
	if (k->backend == KAIROS_BACKEND_URING ||
	    !uring_refused(rc, why, sizeof(s->report[0].why)))
		return rc;
	rc = backend_epoll_ops.init(s);
	if (!rc)
		report(s, 0, &backend_epoll_ops, why);
	return rc;
}

void backend_fallback(struct shard *s, int err)
{
	char *why = s->report[1].why;

	if (s->ops != &backend_uring_ops)
		kairos_die_err("epoll wait failed", -err);	/* EBADF, EFAULT, EINVAL: a bug */
	s->ops->fini(s);
	snprintf(why, sizeof(s->report[1].why),
		 "io_uring stopped working at run time (%s); using epoll + timerfd",
		 strerror(-err));
	/*
	 * The epoll backend cannot fail here for want of an fd or memory: it
	 * then waits with poll() on the same two descriptors.
	 */
	backend_epoll_ops.init(s);
	/*
	 * The ring's reads of the timerfd and eventfd are cancelled by the
	 * kernel after the ring is gone, not with it: until then (on some
	 * kernels, from a worker thread) one may still consume an expiry or a
	 * wake-up that epoll then never reports.  For a while, epoll's waits
	 * are short, and one that times out passes as if both had fired.
	 */
	s->watch_until = clock_now_ns(CLOCK_MONOTONIC) + FALLBACK_WATCH_NS;
	report(s, 1, &backend_epoll_ops, why);
}
