/* SPDX-License-Identifier: MIT */
/*
 * ring.c - a queue's expiries posted as CQEs into the user's own io_uring
 * ring (kairos_queue_ring()), and every line of its contract: one CQE per
 * expiry, never early, user_data the arm's arg and res the status; a cancel
 * that returns 0 means no CQE ever comes, any other answer means one does;
 * periodic timers; detaching; a post that fails waits in the queue instead.
 *
 * The service runs on io_uring (forced).  Where the kernel refuses io_uring
 * or has no IORING_OP_MSG_RING (before 5.18), the program says so and exits
 * 77, a skip.
 */
#include <liburing.h>
#include <pthread.h>
#include <sys/eventfd.h>

#include <poll.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>

#include "t_util.h"
#include "internal.h"
#include "../src/fault.h"

#define R_N	400

static struct kairos *r_service(unsigned shards)
{
	struct kairos_config c;

	kairos_config_default(&c);
	c.shards = shards;
	c.backend = KAIROS_BACKEND_URING;
	return t_create(&c);
}

/* One timer of the tests: what it was armed for, and what came for it. */
struct r_timer {
	kairos_id id;
	uint64_t deadline;	/* service clock */
	int cqes;		/* CQEs seen for it */
	int status_sum;		/* their res, added */
	int cancel_rc;		/* what its cancel returned; 1: not cancelled */
};

/* Takes every CQE within @ms; checks each against its timer.  Returns how many. */
static int r_reap(struct io_uring *ring, struct r_timer *t, int n, int want,
		  unsigned ms)
{
	uint64_t end = t_mono() + ms * T_MS;
	int got = 0;

	while (got < want && t_mono() < end) {
		struct __kernel_timespec ts = { .tv_nsec = 10 * 1000 * 1000 };
		struct io_uring_cqe *cqe;
		uint64_t now;

		if (io_uring_wait_cqe_timeout(ring, &cqe, &ts) != 0)
			continue;
		now = t_mono();	/* the service clock: CLOCK_MONOTONIC */
		{
			struct r_timer *x = (struct r_timer *)(uintptr_t)cqe->user_data;

			ck_assert_msg(x >= t && x < t + n, "a CQE for no timer of the test");
			ck_assert_msg(now >= x->deadline, "CQE %llu ns early",
				      (unsigned long long)(x->deadline - now));
			ck_assert_int_ge(cqe->res, 1);
			x->cqes++;
			x->status_sum += cqe->res;
		}
		io_uring_cqe_seen(ring, cqe);
		got++;
	}
	return got;
}

static int r_arm(struct kairos *k, struct kairos_queue *q, struct r_timer *t, uint64_t delay,
		 uint64_t period)
{
	struct kairos_timer_opts o = { .queue = q, .period_ns = period };

	t->deadline = t_now(k) + delay;
	t->cancel_rc = 1;
	return kairos_arm_opts(k, delay, &o, NULL, t, &t->id);
}

static void r_identity(struct kairos *k, uint64_t fired, uint64_t cancelled)
{
	struct kairos_stats st;

	/*
	 * A CQE reaches the user's ring inside the shard's submit, before the
	 * shard reaps its own completion of the post and counts the timer
	 * fired: a test that has just seen the CQE waits for the count.
	 */
	for (int i = 0; i < T_WAIT_MS; i++) {
		ck_assert_int_eq(kairos_stats(k, &st), 0);
		if (st.fired >= fired && st.cancelled >= cancelled)
			break;
		t_sleep_ms(1);
	}
	ck_assert_uint_eq(st.fired, fired);
	ck_assert_uint_eq(st.cancelled, cancelled);
	ck_assert_uint_eq(st.armed, st.fired + st.cancelled + st.drained + st.pending);
	ck_assert_uint_eq(st.early, 0);
}

/* Every test's end: the queue, the service and the ring go, cleanly. */
static void r_close(struct kairos *k, struct kairos_queue *q, struct io_uring *ring)
{
	ck_assert_int_eq(kairos_queue_destroy(q), 0);
	ck_assert_int_eq(kairos_destroy(k, KAIROS_DRAIN_DROP), 0);
	io_uring_queue_exit(ring);
}

START_TEST(test_ring_errors)
{
	struct kairos *k = r_service(1);
	struct kairos_config c;
	struct kairos *ke;
	struct kairos_queue *q, *qe;
	struct io_uring ring;
	int efd = eventfd(0, EFD_CLOEXEC);

	ck_assert_int_eq(kairos_queue_create(k, &q), 0);
	ck_assert_int_eq(kairos_queue_ring(NULL, 0), -EINVAL);
	ck_assert_int_eq(kairos_queue_ring(q, efd), -EBADF);	/* not a ring */
	ck_assert_int_eq(kairos_queue_ring(q, 100000), -EBADF);	/* not open */
	ck_assert_int_eq(kairos_queue_ring(q, -1), 0);		/* detaching nothing */
	/* A service on epoll cannot post. */
	kairos_config_default(&c);
	c.shards = 1;
	c.backend = KAIROS_BACKEND_EPOLL;
	ke = t_create(&c);
	ck_assert_int_eq(io_uring_queue_init(8, &ring, 0), 0);
	ck_assert_int_eq(kairos_queue_create(ke, &qe), 0);
	ck_assert_int_eq(kairos_queue_ring(qe, ring.ring_fd), -EOPNOTSUPP);
	ck_assert_int_eq(kairos_queue_destroy(qe), 0);
	ck_assert_int_eq(kairos_destroy(ke, KAIROS_DRAIN_DROP), 0);
	ck_assert_int_eq(kairos_queue_ring(q, ring.ring_fd), 0);
	ck_assert_int_eq(kairos_queue_destroy(q), 0);
	ck_assert_int_eq(kairos_destroy(k, KAIROS_DRAIN_DROP), 0);
	ck_assert_int_eq(kairos_destroy(k, KAIROS_DRAIN_DROP), -ESHUTDOWN);
	io_uring_queue_exit(&ring);
	close(efd);
}
END_TEST

/*
 * A probe for MSG_RING that could not be made (no memory here) says so, and
 * the next call probes again: only an answer is kept for the process.
 * First in its case, so that no earlier call has probed when Check does
 * not fork (CK_FORK=no).
 */
START_TEST(test_ring_probe_failure_not_kept)
{
	struct kairos *k = r_service(1);
	struct kairos_queue *q;
	struct io_uring ring;

	ck_assert_int_eq(io_uring_queue_init(8, &ring, 0), 0);
	ck_assert_int_eq(kairos_queue_create(k, &q), 0);
	atomic_store(&fault_countdown, 1);
	ck_assert_int_eq(kairos_queue_ring(q, ring.ring_fd), -ENOMEM);
	ck_assert_int_eq(atomic_exchange(&fault_countdown, 0), 0);
	ck_assert_int_eq(kairos_queue_ring(q, ring.ring_fd), 0);
	r_close(k, q, &ring);
}
END_TEST

/*
 * Without /proc (a chroot, a small container) a ring is still taken for
 * one.  A child in a mount namespace of its own unmounts /proc first; it
 * exits 77 where it may not (not root), and the test says so.
 */
static int r_child_without_proc(void)
{
	struct kairos_config c;
	struct kairos *k;
	struct kairos_queue *q;
	struct io_uring ring;
	int rc;

	if (unshare(CLONE_NEWNS) || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
	    umount2("/proc", MNT_DETACH))
		return 77;
	if (access("/proc/self/fd", F_OK) == 0)
		return 77;	/* a second /proc under the first */
	kairos_config_default(&c);
	c.shards = 1;
	c.backend = KAIROS_BACKEND_URING;
	if (kairos_create(&c, &k))
		return 2;
	if (kairos_queue_create(k, &q) || io_uring_queue_init(8, &ring, 0))
		return 3;
	rc = kairos_queue_ring(q, ring.ring_fd);
	if (rc) {
		fprintf(stderr, "without /proc: kairos_queue_ring: %d\n", rc);
		return 4;
	}
	if (kairos_queue_destroy(q) || kairos_destroy(k, KAIROS_DRAIN_DROP))
		return 5;
	io_uring_queue_exit(&ring);
	return 0;
}

START_TEST(test_ring_without_proc)
{
	int status = 0;
	pid_t pid = fork();	/* no thread of this process runs yet */

	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		_exit(r_child_without_proc());
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status), "child ended with status %#x", status);
	if (WEXITSTATUS(status) == 77) {
		fprintf(stderr, "ring_without_proc: no mount namespace here; skipped\n");
		return;
	}
	ck_assert_int_eq(WEXITSTATUS(status), 0);
}
END_TEST

/* One CQE per expiry, never early; the user's ring fd may be closed meanwhile. */
START_TEST(test_ring_one_cqe_each)
{
	struct kairos *k = r_service(2);
	static struct r_timer t[R_N];
	struct kairos_queue *q;
	struct io_uring ring;
	uint64_t seed = t_seed(3);
	int fd2;

	ck_assert_int_eq(io_uring_queue_init(64, &ring, 0), 0);
	ck_assert_int_eq(kairos_queue_create(k, &q), 0);
	/* kairos holds its own duplicate: closing one of the user's is harmless. */
	fd2 = dup(ring.ring_fd);
	ck_assert_int_eq(kairos_queue_ring(q, fd2), 0);
	close(fd2);
	memset(t, 0, sizeof(t));
	for (int i = 0; i < R_N; i++)
		ck_assert_int_eq(r_arm(k, q, &t[i], t_rand_below(&seed, 50) * T_MS, 0), 0);
	ck_assert_int_eq(r_reap(&ring, t, R_N, R_N, T_WAIT_MS), R_N);
	/* And nothing more. */
	ck_assert_int_eq(r_reap(&ring, t, R_N, 1, 100), 0);
	for (int i = 0; i < R_N; i++) {
		ck_assert_int_eq(t[i].cqes, 1);
		ck_assert_int_eq(t[i].status_sum, 1);
		/* Posted: it has ended. */
		ck_assert_int_eq(kairos_cancel(k, t[i].id), -ENOENT);
		ck_assert_int_eq(kairos_reset(k, t[i].id, T_SEC), -ENOENT);
	}
	/* Nothing waits in the queue: all went to the ring. */
	{
		struct kairos_expiry e;

		ck_assert_int_eq(kairos_queue_take(q, &e, 1, 0), 0);
	}
	r_identity(k, R_N, 0);
	r_close(k, q, &ring);
}
END_TEST

/*
 * Cancels race the posts: each timer gets a CQE iff its cancel did not
 * return 0, and a reset that returns 0 moves the CQE later.
 */
struct r_race {
	struct kairos *k;
	struct r_timer *t;
	int n;
};

static void *r_canceller(void *arg)
{
	struct r_race *rc = arg;

	for (int i = 0; i < rc->n; i++) {
		/* Spread over the expiry: some before, some while, some after. */
		if (i % 64 == 0)
			t_sleep_ms(1);
		rc->t[i].cancel_rc = i % 3 == 0 ? kairos_cancel_sync(rc->k, rc->t[i].id)
						: kairos_cancel(rc->k, rc->t[i].id);
	}
	return NULL;
}

START_TEST(test_ring_cancel_races_post)
{
	enum { N = 3000 };
	struct kairos *k = r_service(1);
	struct r_timer *t = calloc(N, sizeof(*t));
	struct kairos_queue *q;
	struct io_uring ring;
	struct r_race rc = { .k = k, .n = N };
	pthread_t th;
	int want = 0, zero = 0;

	ck_assert_ptr_nonnull(t);
	rc.t = t;
	/* Room for every CQE: none overflows while the test looks elsewhere. */
	ck_assert_int_eq(io_uring_queue_init(N, &ring, 0), 0);
	ck_assert_int_eq(kairos_queue_create(k, &q), 0);
	ck_assert_int_eq(kairos_queue_ring(q, ring.ring_fd), 0);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(r_arm(k, q, &t[i], (uint64_t)(i % 20) * T_MS / 2, 0), 0);
	ck_assert_int_eq(pthread_create(&th, NULL, r_canceller, &rc), 0);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	for (int i = 0; i < N; i++) {
		ck_assert_msg(t[i].cancel_rc == 0 || t[i].cancel_rc == -EBUSY ||
			      t[i].cancel_rc == -ENOENT, "cancel %d: %d", i, t[i].cancel_rc);
		if (t[i].cancel_rc == 0)
			zero++;
		else
			want++;
	}
	ck_assert_int_eq(r_reap(&ring, t, N, want, T_WAIT_MS), want);
	ck_assert_int_eq(r_reap(&ring, t, N, 1, 200), 0);
	for (int i = 0; i < N; i++)
		ck_assert_msg(t[i].cqes == (t[i].cancel_rc != 0), "timer %d: cancel %d, %d CQEs",
			      i, t[i].cancel_rc, t[i].cqes);
	r_identity(k, (uint64_t)want, (uint64_t)zero);
	r_close(k, q, &ring);
	free(t);
}
END_TEST

/* A periodic timer posts one CQE per period; cancel_sync ends them. */
START_TEST(test_ring_periodic)
{
	struct kairos *k = r_service(1);
	struct r_timer t[1] = { { 0 } };
	struct kairos_queue *q;
	struct io_uring ring;
	struct kairos_stats st;
	int got;

	ck_assert_int_eq(io_uring_queue_init(64, &ring, 0), 0);
	ck_assert_int_eq(kairos_queue_create(k, &q), 0);
	ck_assert_int_eq(kairos_queue_ring(q, ring.ring_fd), 0);
	ck_assert_int_eq(r_arm(k, q, &t[0], 5 * T_MS, 5 * T_MS), 0);
	got = r_reap(&ring, t, 1, 10, T_WAIT_MS);
	ck_assert_int_eq(got, 10);
	/* Each CQE counts the periods it covers: at least one each. */
	ck_assert_int_ge(t[0].status_sum, 10);
	got = kairos_cancel_sync(k, t[0].id);
	ck_assert_msg(got == 0 || got == -EBUSY, "cancel_sync: %d", got);
	/* What was in flight has come by now; nothing after. */
	(void)r_reap(&ring, t, 1, 100, 50);
	got = t[0].cqes;
	ck_assert_int_eq(r_reap(&ring, t, 1, 1, 100), 0);
	ck_assert_int_eq(t[0].cqes, got);
	ck_assert_int_eq(kairos_stats(k, &st), 0);
	ck_assert_uint_eq(st.periodic_runs, (uint64_t)got);
	ck_assert_uint_eq(st.pending, 0);
	ck_assert_uint_eq(st.early, 0);
	r_close(k, q, &ring);
}
END_TEST

/* Detached, the queue holds its expiries again; attached again, it posts. */
START_TEST(test_ring_detach)
{
	struct kairos *k = r_service(1);
	struct r_timer t[2] = { { 0 } };
	struct kairos_queue *q;
	struct io_uring ring;
	struct kairos_expiry e;

	ck_assert_int_eq(io_uring_queue_init(8, &ring, 0), 0);
	ck_assert_int_eq(kairos_queue_create(k, &q), 0);
	ck_assert_int_eq(kairos_queue_ring(q, ring.ring_fd), 0);
	ck_assert_int_eq(kairos_queue_ring(q, -1), 0);
	ck_assert_int_eq(r_arm(k, q, &t[0], T_MS, 0), 0);
	ck_assert_int_eq(kairos_queue_take(q, &e, 1, (int64_t)T_WAIT_MS * (int64_t)T_MS), 1);
	ck_assert_ptr_eq(e.arg, &t[0]);
	ck_assert_int_eq(r_reap(&ring, t, 2, 1, 50), 0);
	ck_assert_int_eq(kairos_queue_ring(q, ring.ring_fd), 0);
	ck_assert_int_eq(r_arm(k, q, &t[1], T_MS, 0), 0);
	ck_assert_int_eq(r_reap(&ring, t, 2, 1, T_WAIT_MS), 1);
	ck_assert_int_eq(t[1].cqes, 1);
	ck_assert_int_eq(kairos_queue_take(q, &e, 1, 0), 0);
	r_identity(k, 2, 0);
	r_close(k, q, &ring);
}
END_TEST

/* The expiries waiting on @q's list. */
static int r_listed(struct kairos_queue *q)
{
	int n = 0;

	pthread_mutex_lock(&q->lock);
	for (struct rec *r = q->head; r; r = rec_chain_next(r))
		n++;
	pthread_mutex_unlock(&q->lock);
	return n;
}

/*
 * A post that fails (the kernel refuses the message: the ring's owner has
 * exited, its completion queue cannot grow) waits in the queue instead,
 * once, and stays cancellable there.  The failure is injected (fault.h):
 * kernels differ in which rings refuse.
 */
START_TEST(test_ring_failed_post_waits_in_queue)
{
	struct kairos *k = r_service(1);
	struct r_timer t[3] = { { 0 } };
	struct kairos_expiry e[4];
	struct kairos_queue *q;
	struct io_uring ring;
	struct kairos_stats st;
	struct pollfd p;
	int n, rc;

	ck_assert_int_eq(io_uring_queue_init(8, &ring, 0), 0);
	ck_assert_int_eq(kairos_queue_create(k, &q), 0);
	ck_assert_int_eq(kairos_queue_ring(q, ring.ring_fd), 0);
	atomic_store(&fault_post, 1);
	/* Two one-shots and a periodic timer, all due within 2 ms. */
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(r_arm(k, q, &t[i], T_MS, i == 2 ? T_MS : 0), 0);
	p = (struct pollfd){ .fd = kairos_queue_fd(q), .events = POLLIN };
	ck_assert_int_eq(poll(&p, 1, T_WAIT_MS), 1);
	/* Each has failed (later on a stalled machine): a periodic one waits untaken. */
	for (int i = 0; i < T_WAIT_MS && r_listed(q) < 3; i++)
		t_sleep_ms(1);
	ck_assert_int_eq(r_listed(q), 3);
	t_sleep_ms(100);	/* periods for the periodic one to count */
	atomic_store(&fault_post, 0);
	/* Waiting in the queue, it is still cancellable: it never comes. */
	ck_assert_int_eq(kairos_cancel(k, t[1].id), 0);
	n = kairos_queue_take(q, e, 4, 0);
	ck_assert_int_eq(n, 2);
	ck_assert_ptr_eq(e[0].arg, &t[0]);
	ck_assert_int_eq(e[0].status, 1);
	ck_assert_uint_ge(e[0].deadline_ns, t[0].deadline - T_MS);
	ck_assert_ptr_eq(e[1].arg, &t[2]);
	/* The periods it waited through are counted in its one entry. */
	ck_assert_int_ge(e[1].status, 50);
	rc = kairos_cancel_sync(k, t[2].id);
	ck_assert_msg(rc == 0 || rc == -EBUSY, "cancel_sync: %d", rc);
	/* The periodic one posts again once the fault is gone; the others never. */
	(void)r_reap(&ring, t, 3, 100, 50);
	ck_assert_int_eq(t[0].cqes, 0);
	ck_assert_int_eq(t[1].cqes, 0);
	ck_assert_int_eq(kairos_queue_take(q, e, 4, 0), 0);
	ck_assert_int_eq(kairos_stats(k, &st), 0);
	ck_assert_uint_eq(st.fired, 1);
	ck_assert_uint_eq(st.cancelled, 2);
	ck_assert_uint_eq(st.periodic_runs, 1 + (uint64_t)t[2].cqes);
	ck_assert_uint_eq(st.pending, 0);
	ck_assert_uint_eq(st.early, 0);
	r_close(k, q, &ring);
}
END_TEST

/* Destroying the service with posts due ends each timer once. */
/*
 * A periodic timer whose post the kernel refuses on the spot while a
 * cancel stops it (the cancel says -EBUSY: the delivery was under way):
 * it ends there, counted cancelled, and never comes again, as a CQE or on
 * the queue's list.  The refusal is injected and held open (fault.h) until
 * the cancel is in.
 */
START_TEST(test_ring_refused_post_of_a_stopped_timer)
{
	struct kairos *k = r_service(1);
	struct r_timer t = { 0 };
	struct kairos_expiry e[2];
	struct kairos_queue *q;
	struct io_uring ring;

	ck_assert_int_eq(io_uring_queue_init(8, &ring, 0), 0);
	ck_assert_int_eq(kairos_queue_create(k, &q), 0);
	ck_assert_int_eq(kairos_queue_ring(q, ring.ring_fd), 0);
	atomic_store(&fault_post, 2);
	ck_assert_int_eq(r_arm(k, q, &t, T_MS, T_MS), 0);
	for (int i = 0; i < T_WAIT_MS && atomic_load(&fault_post_held) != 1; i++)
		t_sleep_ms(1);
	ck_assert_int_eq(atomic_load(&fault_post_held), 1);
	ck_assert_int_eq(kairos_cancel(k, t.id), -EBUSY);
	atomic_store(&fault_post, 0);
	atomic_store(&fault_post_held, 2);
	/* The shard ends it once the refusal returns (later on a stalled machine). */
	t_wait_ended(k, t.id);
	ck_assert_int_eq(kairos_cancel(k, t.id), -ENOENT);
	t_sleep_ms(100);
	ck_assert_int_eq(kairos_queue_take(q, e, 2, 0), 0);
	ck_assert_int_eq(r_reap(&ring, &t, 1, 1, 50), 0);
	r_identity(k, 0, 1);
	atomic_store(&fault_post_held, 0);
	r_close(k, q, &ring);
}
END_TEST

/*
 * A post that a failed submit left queued is not sent by number to a ring
 * fd that was closed meanwhile: the number may be another ring's by then.
 * Here the queue's ring is detached while the shard holds such a post
 * (fault.h: fault_post 3), and a second ring takes the number; once the
 * shard goes on, the expiry waits on the queue's list, and the second ring
 * gets nothing.
 */
START_TEST(test_ring_queued_post_outlives_its_fd)
{
	struct kairos *k = r_service(1);
	struct r_timer t = { 0 };
	struct kairos_queue *q;
	struct io_uring ring, other;
	struct kairos_expiry e;
	int fd;

	ck_assert_int_eq(io_uring_queue_init(8, &ring, 0), 0);
	ck_assert_int_eq(kairos_queue_create(k, &q), 0);
	ck_assert_int_eq(kairos_queue_ring(q, ring.ring_fd), 0);
	fd = q->ring_fd;	/* the service's duplicate */
	atomic_store(&fault_post, 3);
	ck_assert_int_eq(r_arm(k, q, &t, T_MS, 0), 0);
	for (int i = 0; i < T_WAIT_MS && atomic_load(&fault_post_held) != 1; i++)
		t_sleep_ms(1);
	ck_assert_int_eq(atomic_load(&fault_post_held), 1);
	/* Detached: the duplicate is closed, and another ring gets its number. */
	ck_assert_int_eq(kairos_queue_ring(q, -1), 0);
	ck_assert_int_eq(io_uring_queue_init(8, &other, 0), 0);
	if (other.ring_fd != fd) {
		ck_assert_int_eq(dup2(other.ring_fd, fd), fd);
		ck_assert_int_eq(close(other.ring_fd), 0);
		other.ring_fd = fd;
		other.enter_ring_fd = fd;
	}
	atomic_store(&fault_post, 0);
	atomic_store(&fault_post_held, 2);
	ck_assert_int_eq(kairos_queue_take(q, &e, 1, (int64_t)T_WAIT_MS * (int64_t)T_MS), 1);
	ck_assert_ptr_eq(e.arg, &t);
	ck_assert_int_eq(e.status, 1);
	ck_assert_int_eq(r_reap(&other, &t, 1, 1, 100), 0);
	ck_assert_int_eq(r_reap(&ring, &t, 1, 1, 50), 0);
	ck_assert_int_eq(t.cqes, 0);
	r_identity(k, 1, 0);
	atomic_store(&fault_post_held, 0);
	io_uring_queue_exit(&other);
	r_close(k, q, &ring);
}
END_TEST

/*
 * A short submit (the kernel took some entries and not others) leaves a
 * post queued behind a read it took; then the ring stops working.  The
 * post never sent goes back to its queue's list: every expiry comes once,
 * as a CQE or from the queue, and the counts add up.  The submits and the
 * refusal are injected (fault.h: fault_post 4).
 */
START_TEST(test_ring_short_submit_then_refused)
{
	enum { N = 40 };
	struct kairos *k = r_service(1);
	static struct r_timer t[N];
	struct kairos_expiry e[N];
	struct kairos_queue *q;
	struct io_uring ring;
	int got, taken = 0;

	ck_assert_int_eq(io_uring_queue_init(2 * N, &ring, 0), 0);
	ck_assert_int_eq(kairos_queue_create(k, &q), 0);
	ck_assert_int_eq(kairos_queue_ring(q, ring.ring_fd), 0);
	memset(t, 0, sizeof(t));
	atomic_store(&fault_post, 4);
	/* Due one after another, so that several passes post. */
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(r_arm(k, q, &t[i], 5 * T_MS + (uint64_t)i * T_MS / 2, 0), 0);
	(void)t_backend_becomes(k, "epoll");
	ck_assert_int_eq(atomic_load(&fault_post), 5);
	/* The short submit left a post queued, sent by nothing after it. */
	ck_assert_int_ge(atomic_load(&fault_post_held), 1);
	atomic_store(&fault_post, 0);
	atomic_store(&fault_post_held, 0);
	atomic_store(&fault_wait_fails, 0);
	/* The CQEs of what was sent; the rest from the queue. */
	got = r_reap(&ring, t, N, N, 200);
	for (int n; taken < N - got &&
		    (n = kairos_queue_take(q, e, N, (int64_t)T_WAIT_MS * T_MS)) > 0;) {
		for (int j = 0; j < n; j++) {
			struct r_timer *x = e[j].arg;

			ck_assert(x >= t && x < t + N);
			ck_assert_int_eq(e[j].status, 1);
			ck_assert_uint_ge(t_mono(), x->deadline);
			x->cqes++;
		}
		taken += n;
	}
	for (int i = 0; i < N; i++)
		ck_assert_msg(t[i].cqes == 1, "timer %d came %d times (%d CQEs, %d from the queue)",
			      i, t[i].cqes, got, taken);
	ck_assert_int_gt(taken, 0);
	ck_assert_int_eq(r_reap(&ring, t, N, 1, 50), 0);
	ck_assert_int_eq(kairos_queue_take(q, e, N, 0), 0);
	r_identity(k, N, 0);
	r_close(k, q, &ring);
}
END_TEST

START_TEST(test_ring_destroy_with_posts)
{
	enum { N = 500 };
	struct kairos *k = r_service(2);
	static struct r_timer t[N];
	struct kairos_queue *q;
	struct io_uring ring;
	struct kairos_stats st;

	ck_assert_int_eq(io_uring_queue_init(N, &ring, 0), 0);
	ck_assert_int_eq(kairos_queue_create(k, &q), 0);
	ck_assert_int_eq(kairos_queue_ring(q, ring.ring_fd), 0);
	memset(t, 0, sizeof(t));
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(r_arm(k, q, &t[i], (uint64_t)(i % 10) * T_MS / 4, 0), 0);
	t_sleep_ms(1);
	ck_assert_int_ge(kairos_destroy(k, KAIROS_DRAIN_DROP), 0);
	ck_assert_int_eq(kairos_stats(k, &st), 0);
	ck_assert_uint_eq(st.armed, N);
	ck_assert_uint_eq(st.pending, 0);
	ck_assert_uint_eq(st.armed, st.fired + st.cancelled + st.drained);
	/* Every fired one has its CQE, and no other has one. */
	ck_assert_int_eq(r_reap(&ring, t, N, (int)st.fired, T_WAIT_MS), (int)st.fired);
	ck_assert_int_eq(r_reap(&ring, t, N, 1, 50), 0);
	ck_assert_int_eq(kairos_queue_destroy(q), 0);
	io_uring_queue_exit(&ring);
}
END_TEST

/* 0 when io_uring and MSG_RING are there, else the reason's -errno. */
static int r_probe(void)
{
	struct io_uring_probe *p;
	struct kairos *k;
	struct kairos_config c;
	int rc;

	kairos_config_default(&c);
	c.shards = 1;
	c.backend = KAIROS_BACKEND_URING;
	rc = kairos_create(&c, &k);
	if (rc)
		return rc;
	kairos_destroy(k, KAIROS_DRAIN_DROP);
	p = io_uring_get_probe();
	if (!p)
		return -EOPNOTSUPP;
	rc = io_uring_opcode_supported(p, IORING_OP_MSG_RING) ? 0 : -EOPNOTSUPP;
	io_uring_free_probe(p);
	return rc;
}

int main(void)
{
	Suite *s;
	TCase *tc;
	int rc = r_probe();

	if (rc == -ENOSYS || rc == -EPERM || rc == -EACCES || rc == -EOPNOTSUPP ||
	    rc == -ENOMEM) {
		printf("io_uring or IORING_OP_MSG_RING refused here (%s): skipping\n",
		       strerror(-rc));
		return 77;
	}
	if (rc) {
		printf("probe failed: %d (%s)\n", rc, strerror(-rc));
		return EXIT_FAILURE;
	}
	s = suite_create("ring");
	tc = tcase_create("ring");
	tcase_add_checked_fixture(tc, t_setup, NULL);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_ring_probe_failure_not_kept);
	tcase_add_test(tc, test_ring_errors);
	tcase_add_test(tc, test_ring_without_proc);
	tcase_add_test(tc, test_ring_one_cqe_each);
	tcase_add_test(tc, test_ring_cancel_races_post);
	tcase_add_test(tc, test_ring_periodic);
	tcase_add_test(tc, test_ring_detach);
	tcase_add_test(tc, test_ring_failed_post_waits_in_queue);
	tcase_add_test(tc, test_ring_refused_post_of_a_stopped_timer);
	tcase_add_test(tc, test_ring_queued_post_outlives_its_fd);
	tcase_add_test(tc, test_ring_short_submit_then_refused);
	tcase_add_test(tc, test_ring_destroy_with_posts);
	suite_add_tcase(s, tc);
	return t_main(s, "ring");
}
