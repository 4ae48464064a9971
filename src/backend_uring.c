/* SPDX-License-Identifier: MIT */
/*
 * backend_uring.c - a shard waits on its timerfd and wake eventfd through an
 * io_uring ring: one 8-byte read outstanding on each, one io_uring_enter()
 * per wake-up that both submits the re-armed reads and waits.
 *
 * The same ring posts the CQEs of ring queues (kairos_queue_ring()): one
 * IORING_OP_MSG_RING per expiry, its user_data the record, submitted at
 * the end of the pass that fired it.  Their completions, reaped with the
 * reads', go to queue_posted().  Whatever is reaped outside a wait (while
 * posting) is kept for the next wait to report.
 *
 * Setup tries the newest useful flags first and drops them on -EINVAL, so
 * one binary runs on older kernels: SINGLE_ISSUER (6.0) and COOP_TASKRUN
 * (5.19) save the kernel work because only the shard thread submits.  The
 * ring is created on the shard thread, as SINGLE_ISSUER requires.
 */
#include <errno.h>
#include <limits.h>
#include <liburing.h>
#include <stdlib.h>
#include <time.h>

#include "fault.h"
#include "internal.h"

#define UD_TIMER	1
#define UD_WAKE		2

struct uring_state {
	struct io_uring ring;
	uint64_t tbuf, ebuf;
	bool tread, eread;	/* a read is outstanding */
	int ev, err;		/* reaped while posting, for the next wait */
	size_t unsent;		/* posts queued in the SQ, not yet taken by the kernel */
	uint64_t refused_since;	/* CLOCK_MONOTONIC ns of the first of the waits refused since one worked; 0: none */
	unsigned refusals;	/* tries refused since then */
};

/*
 * How long a shard's waits may be refused for a reason that can pass before
 * it gives the ring up (backend_fallback()): a second and as many tries, at
 * the least (a shard kept off its CPU still tries), and how long it pauses
 * between tries.  Meanwhile each pause ends in a pass, so timers run at most
 * URING_RETRY_PAUSE_NS late on top of their usual lateness, and never early.
 */
#define URING_RETRY_NS		(1000ull * 1000 * 1000)
#define URING_RETRY_TRIES	100u
#define URING_RETRY_PAUSE_NS	(1000ull * 1000)

/* Whether @ring's kernel has IORING_OP_READ; no probe (before 5.6): no. */
static bool uring_reads(struct io_uring *ring)
{
	struct io_uring_probe *p;
	bool ok;

	/* A test makes the kernel one without it (fault.h). */
	if (atomic_load_explicit(&fault_uring_no_read, memory_order_relaxed))
		return false;
	p = io_uring_get_probe_ring(ring);
	if (!p)
		return false;
	ok = io_uring_opcode_supported(p, IORING_OP_READ);
	io_uring_free_probe(p);
	return ok;
}

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
	/*
	 * The waits read the timerfd and eventfd with IORING_OP_READ (Linux
	 * 5.6, as the probe itself): a ring without it is refused here, so
	 * that the probe at create falls back with the reason (a forced one
	 * fails), rather than the first wait's read failing at run time.
	 */
	if (!uring_reads(&u->ring)) {
		io_uring_queue_exit(&u->ring);
		free(u);
		return -EOPNOTSUPP;
	}
	s->backend = u;
	return 0;
}

/*
 * After a submit: the posts the kernel has not taken yet, counted on the
 * ring itself.  A submit may take fewer entries than are queued (the
 * kernel stops at a request it cannot allocate), so a read queued by one
 * wait can stay ahead of the next pass's posts: a count of the entries
 * taken cannot tell which ones went.  The kernel takes them in order, so
 * the posts still queued are the last ones made.  Nearly always none are
 * left, and the walk is empty.
 */
static void taken(struct uring_state *u)
{
	struct io_uring_sq *sq = &u->ring.sq;
	size_t n = 0;

	for (unsigned pos = io_uring_smp_load_acquire(sq->khead); pos != sq->sqe_tail; pos++)
		if (sq->sqes[pos & sq->ring_mask].opcode == IORING_OP_MSG_RING)
			n++;
	u->unsent = n;
}

static int queue_read(struct uring_state *u, int fd, uint64_t *buf, uint64_t tag)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);

	if (!sqe) {
		/* A full ring (of one entry, or of posts): hand them over, retry. */
		int rc = io_uring_submit(&u->ring);

		if (rc < 0)
			return rc;
		taken(u);
		sqe = io_uring_get_sqe(&u->ring);
		if (!sqe)
			return -EBUSY;
	}
	io_uring_prep_read(sqe, fd, buf, sizeof(*buf), 0);
	io_uring_sqe_set_data64(sqe, tag);
	return 0;
}

/* A test's refused wait (fault.h): the errno, while its count lasts. */
static int fault_wait(void)
{
	int n = atomic_load_explicit(&fault_wait_fails, memory_order_acquire);
	int err = atomic_load_explicit(&fault_wait_fail, memory_order_relaxed);

	/* Several shards may ask at once: each refusal takes one from the count. */
	while (n > 0 && n != INT_MAX)
		if (atomic_compare_exchange_weak_explicit(&fault_wait_fails, &n, n - 1,
							  memory_order_relaxed,
							  memory_order_relaxed))
			break;
	return n > 0 ? -err : 0;
}

/* Takes every completion there is: reads into u->ev and u->err, posts to queue.c. */
static void reap(struct shard *s, struct uring_state *u)
{
	struct io_uring_cqe *cqe;
	unsigned head, seen = 0;
	/* A test fails the reads' completions, their expiry counts lost (fault.h). */
	bool fail_reads = __builtin_expect(atomic_load_explicit(&fault_wait_fails,
								memory_order_relaxed), 0) &&
			  atomic_load_explicit(&fault_wait_how, memory_order_relaxed) == 1;

	io_uring_for_each_cqe(&u->ring, head, cqe) {
		int res = cqe->res;

		seen++;
		if (cqe->user_data != UD_TIMER && cqe->user_data != UD_WAKE) {
			/* A record: 64-byte aligned, never 1 or 2. */
			queue_posted(s, (struct rec *)(uintptr_t)cqe->user_data, res);
			continue;
		}
		if (__builtin_expect(fail_reads, 0)) {
			int f = fault_wait();

			res = f ? f : res;
		}
		if (cqe->user_data == UD_TIMER) {
			u->tread = false;
			/*
			 * Any failure too (-ECANCELED: the read was cancelled;
			 * no TFD_TIMER_CANCEL_ON_SET here): whether it consumed
			 * an expiry or not, the pass re-arms the timerfd, which
			 * costs a settime at most and can lose no deadline.
			 */
			if (res == sizeof(uint64_t) || res < 0)
				u->ev |= BK_TIMER;
		} else {
			u->eread = false;
			u->ev |= BK_WAKE;
		}
		if (res < 0 && res != -ECANCELED && res != -EINTR && res != -EAGAIN)
			u->err = res;
	}
	io_uring_cq_advance(&u->ring, seen);
}

/*
 * A wait refused with @err (io_uring_enter() refused, or a read of the
 * timerfd or eventfd completed with an error).  The kernel's refusals for
 * want of memory (-EAGAIN, -ENOMEM) or of completion space (-EBUSY:
 * completions it has not been able to place yet) can pass: what there is
 * is reaped (which makes room), and after a pause the shard passes again,
 * as after a wake-up, then tries again; for URING_RETRY_NS and
 * URING_RETRY_TRIES at the least from the first refusal since a wait
 * worked.  Any other refusal, or one that lasts, returns @err: the shard
 * moves to epoll.
 */
static int uring_refused(struct shard *s, struct uring_state *u, int err)
{
	struct timespec now, pause = { .tv_nsec = URING_RETRY_PAUSE_NS };
	uint64_t ns;
	int ev;

	if (err != -EAGAIN && err != -ENOMEM && err != -EBUSY)
		return err;
	clock_gettime(CLOCK_MONOTONIC, &now);
	ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
	if (!u->refused_since) {
		u->refused_since = ns;
		u->refusals = 0;
	} else if (ns - u->refused_since >= URING_RETRY_NS && u->refusals >= URING_RETRY_TRIES) {
		return err;
	}
	u->refusals++;
	taken(u);
	reap(s, u);
	/* A read that failed is queued again by the next try. */
	ev = u->ev;
	u->ev = u->err = 0;
	while (nanosleep(&pause, &pause) == -1 && errno == EINTR)
		;
	/* The timerfd may have fired unseen: the pass re-arms it (BK_TIMER). */
	return ev | BK_TIMER | BK_WAKE;
}

static int uring_wait(struct shard *s)
{
	struct uring_state *u = s->backend;
	int rc, ev;

	/* A manual-clock shard has no timerfd to read. */
	if (!u->tread && s->tfd >= 0) {
		rc = queue_read(u, s->tfd, &u->tbuf, UD_TIMER);
		if (rc)
			return uring_refused(s, u, rc);
		u->tread = true;
	}
	if (!u->eread) {
		rc = queue_read(u, s->efd, &u->ebuf, UD_WAKE);
		if (rc)
			return uring_refused(s, u, rc);
		u->eread = true;
	}
	rc = atomic_load_explicit(&fault_post, memory_order_relaxed);
	if (__builtin_expect(rc >= 3, 0)) {
		/* A test holds the shard here, past a failed submit of posts (fault.h). */
		if (rc == 3 && u->unsent)
			(void)fault_post_refuse();
		/* A test's short submits: this wait hands the kernel nothing. */
		if (rc == 4) {
			reap(s, u);
			ev = u->ev;
			u->ev = u->err = 0;
			return ev | BK_WAKE;
		}
	}
	/* A test makes the kernel refuse the enter, the reads queued (fault.h). */
	if (__builtin_expect(atomic_load_explicit(&fault_wait_fails, memory_order_relaxed), 0) &&
	    atomic_load_explicit(&fault_wait_how, memory_order_relaxed) == 0) {
		rc = fault_wait();
		if (rc)
			return uring_refused(s, u, rc);
	}
	do {
		/* What a post reaped already is news: do not sleep on it. */
		rc = u->ev || u->err ? io_uring_submit(&u->ring)
				     : io_uring_submit_and_wait(&u->ring, 1);
	} while (rc == -EINTR);
	if (rc < 0)
		return uring_refused(s, u, rc);
	taken(u);
	reap(s, u);
	ev = u->ev;
	rc = u->err;
	u->ev = u->err = 0;
	if (rc < 0)
		return uring_refused(s, u, rc);
	u->refused_since = 0;
	/* Nothing but a re-check is needed: the loop looks at the inbox and clock. */
	return ev ? ev : BK_WAKE;
}

/*
 * A test's short submit (fault.h, fault_post 4): the kernel takes nothing,
 * until a read is queued ahead of the last post; then it takes all but that
 * post, and the ring stops working (the next wait is refused with EPERM,
 * the settle sends nothing).  liburing has no call that hands the kernel
 * fewer entries than are queued: the tail is published here as
 * io_uring_submit() would, and io_uring_enter() told how many to take.
 */
static int fault_short_submit(struct shard *s, struct uring_state *u)
{
	struct io_uring_sq *sq = &u->ring.sq;
	unsigned head = io_uring_smp_load_acquire(sq->khead), n = sq->sqe_tail - head;
	bool read_first = false;
	int rc;

	for (unsigned i = 0; i + 1 < n; i++)
		read_first |= sq->sqes[(head + i) & sq->ring_mask].opcode != IORING_OP_MSG_RING;
	if (!read_first ||
	    sq->sqes[(sq->sqe_tail - 1) & sq->ring_mask].opcode != IORING_OP_MSG_RING)
		return -EAGAIN;
	sq->sqe_head = sq->sqe_tail;
	io_uring_smp_store_release(sq->ktail, sq->sqe_tail);
	rc = io_uring_enter((unsigned)u->ring.ring_fd, n - 1, 0, 0, NULL);
	/* What the kernel left, the last post among it, by the count asked for. */
	atomic_store_explicit(&fault_post_held, rc >= 0 ? (int)n - rc : (int)n,
			      memory_order_relaxed);
	taken(u);
	reap(s, u);
	atomic_store_explicit(&fault_wait_fail, EPERM, memory_order_relaxed);
	atomic_store_explicit(&fault_wait_how, 0, memory_order_relaxed);
	atomic_store_explicit(&fault_wait_fails, 1, memory_order_release);
	atomic_store_explicit(&fault_post, 5, memory_order_relaxed);
	return rc < 0 ? rc : 0;
}

static int uring_submit(struct shard *s)
{
	struct uring_state *u = s->backend;
	int rc = atomic_load_explicit(&fault_post, memory_order_relaxed);

	if (__builtin_expect(rc >= 3, 0)) {
		/* A test's failed submit: the kernel takes nothing (fault.h). */
		if (rc == 3 || rc == 5)
			return -EAGAIN;
		if (rc == 4)
			return fault_short_submit(s, u);
	}
	do {
		rc = io_uring_submit(&u->ring);
	} while (rc == -EINTR);
	if (rc < 0)
		return rc;
	taken(u);
	/* A post to an ordinary ring completes inside the submit: end it now. */
	reap(s, u);
	return 0;
}

static int uring_post(struct shard *s, int fd, uint64_t data, uint32_t len, struct rec *r)
{
	struct uring_state *u = s->backend;
	struct io_uring_sqe *sqe;

	/* A test's post refused on the spot, held open for its cancel (fault.h). */
	if (__builtin_expect(atomic_load_explicit(&fault_post, memory_order_relaxed) == 2, 0))
		return fault_post_refuse();
	sqe = io_uring_get_sqe(&u->ring);

	if (!sqe) {
		int rc = uring_submit(s);

		if (rc < 0)
			return rc;
		sqe = io_uring_get_sqe(&u->ring);
		if (!sqe)
			return -EBUSY;
	}
	io_uring_prep_msg_ring(sqe, fd, len, data, 0);
	/* A test's failed post: a message kind the kernel does not know. */
	if (atomic_load_explicit(&fault_post, memory_order_relaxed) == 1)
		sqe->addr = UINT32_MAX;
	io_uring_sqe_set_data(sqe, r);
	u->unsent++;
	return 0;
}

/*
 * A post names its ring by fd number, which the kernel looks up only as it
 * takes the entry.  One that a failed submit left queued would be sent by
 * the next submit to whatever holds the number then: its queue's ring fd
 * may be closed as soon as the queue's ring_lock is released, and the
 * number reused, even for another ring.  So those still queued for @fd go
 * to fd -1 instead: sent, they fail (-EBADF), and the expiry waits on its
 * queue's list (queue_posted()).  The entries from the kernel's head to
 * liburing's tail are this thread's alone until it next enters the kernel.
 */
static void uring_unsend(struct shard *s, int fd)
{
	struct io_uring_sq *sq = &((struct uring_state *)s->backend)->ring.sq;

	for (unsigned pos = io_uring_smp_load_acquire(sq->khead); pos != sq->sqe_tail; pos++) {
		struct io_uring_sqe *sqe = &sq->sqes[pos & sq->ring_mask];

		if (sqe->opcode == IORING_OP_MSG_RING && sqe->fd == fd)
			sqe->fd = -1;
	}
}

/*
 * Ends the posts in flight: those the kernel took complete (a post to a
 * ring whose owner runs its completions itself completes when that thread
 * next runs, so this waits, up to a second); those it never took, and any
 * still in flight after that, go to queue_posts_abandon().  On the shard
 * thread as it stops, and from fini (when the ring stopped working, or on
 * another thread, where nothing is left by then).
 */
static void uring_settle(struct shard *s)
{
	struct uring_state *u = s->backend;

	if (!u)
		return;
	/* A test's ring that stopped working after a short submit sends nothing (fault.h). */
	if (s->nposting && atomic_load_explicit(&fault_post, memory_order_relaxed) != 5)
		(void)io_uring_submit(&u->ring);
	/* What it did not take (a short or failed submit) is abandoned below. */
	taken(u);
	reap(s, u);
	for (int i = 0; i < 100 && s->nposting > u->unsent; i++) {
		struct __kernel_timespec ts = { .tv_nsec = 10 * 1000 * 1000 };
		struct io_uring_cqe *cqe;
		int rc = io_uring_wait_cqe_timeout(&u->ring, &cqe, &ts);

		if (rc < 0 && rc != -ETIME && rc != -EINTR)
			break;
		reap(s, u);
	}
	if (s->nposting)
		queue_posts_abandon(s, u->unsent);
	u->unsent = 0;
}

static void uring_fini(struct shard *s)
{
	struct uring_state *u = s->backend;

	if (!u)
		return;
	uring_settle(s);
	io_uring_queue_exit(&u->ring);
	free(u);
	s->backend = NULL;
}

const struct backend_ops backend_uring_ops = {
	.name = "io_uring",
	.init = uring_init,
	.wait = uring_wait,
	.fini = uring_fini,
	.post = uring_post,
	.submit = uring_submit,
	.unsend = uring_unsend,
	.settle = uring_settle,
};
