/* SPDX-License-Identifier: MIT */
/*
 * manual.c - the manual clock (KAIROS_CLOCK_MANUAL, kairos_clock_advance())
 * and the periodic policies, which it makes exact to test.
 *
 * On the manual clock nothing depends on the machine's speed: every check
 * here is exact.  When kairos_clock_advance() returns, the callbacks of
 * everything due by the new time have returned and queue entries wait in
 * their queues, so a test counts right after the call, without waiting.
 * meson runs this program twice: with the backend the probe picks and with
 * KAIROS_BACKEND=epoll; some tests also force epoll through cfg.backend.
 */
#include <fcntl.h>
#include <liburing.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>

#include "t_util.h"

#define M_CALLS	16

/*
 * One timer as a manual-clock test sees it: each call's status and the
 * service time it started at (kairos_now() in the callback).  @advance_in:
 * the first @advance_calls calls move the clock this far from inside the
 * callback (a callback that "takes" that long), and record the result.
 */
struct m_timer {
	struct kairos *k;
	kairos_id id;
	uint64_t advance_in;
	int advance_calls;
	atomic_int calls;
	atomic_int covered;
	atomic_int bad;
	atomic_int advance_rc;
	atomic_uint_least64_t at[M_CALLS];
	atomic_int st[M_CALLS];
};

static void m_init(struct m_timer *m, struct kairos *k)
{
	memset(m, 0, sizeof(*m));
	m->k = k;
}

static void m_cb(void *arg, kairos_id id, int status)
{
	struct m_timer *m = arg;
	uint64_t now = 0;
	int n;

	if (status <= 0 || kairos_now(m->k, &now) != 0 || (m->id && id != m->id))
		atomic_fetch_add(&m->bad, 1);
	n = atomic_fetch_add(&m->calls, 1);
	atomic_fetch_add(&m->covered, status);
	if (n < M_CALLS) {
		atomic_store(&m->at[n], now);
		atomic_store(&m->st[n], status);
	}
	if (n < m->advance_calls)
		atomic_store(&m->advance_rc, kairos_clock_advance(m->k, m->advance_in));
}

static struct kairos_config m_cfg(int delivery, int backend)
{
	struct kairos_config c = t_cfg(2, 2);

	c.clock = KAIROS_CLOCK_MANUAL;
	c.delivery = delivery ? KAIROS_DELIVER_INLINE : KAIROS_DELIVER_WORKERS;
	c.backend = backend ? KAIROS_BACKEND_EPOLL : KAIROS_BACKEND_AUTO;
	return c;
}

static struct kairos *m_create(int delivery, int backend)
{
	struct kairos_config c = m_cfg(delivery, backend);

	return t_create(&c);
}

static void m_advance(struct kairos *k, uint64_t ns)
{
	int rc = kairos_clock_advance(k, ns);

	ck_assert_msg(rc == 0, "kairos_clock_advance(%" PRIu64 "): %d", ns, rc);
}

/* Advances to the absolute time @to (not before now). */
static void m_advance_to(struct kairos *k, uint64_t to)
{
	uint64_t now = t_now(k);

	ck_assert_uint_ge(to, now);
	m_advance(k, to - now);
	ck_assert_uint_eq(t_now(k), to);
}

static int m_calls(struct m_timer *m)
{
	return atomic_load(&m->calls);
}

static uint64_t m_at(struct m_timer *m, int n)
{
	return atomic_load(&m->at[n]);
}

static int m_st(struct m_timer *m, int n)
{
	return atomic_load(&m->st[n]);
}

static kairos_id m_arm(struct kairos *k, struct m_timer *m, uint64_t delay)
{
	ck_assert_int_eq(kairos_arm(k, delay, m_cb, m, &m->id), 0);
	return m->id;
}

static kairos_id m_arm_opts(struct kairos *k, struct m_timer *m, uint64_t when,
			    const struct kairos_timer_opts *o)
{
	ck_assert_int_eq(kairos_arm_opts(k, when, o, m_cb, m, &m->id), 0);
	return m->id;
}

/* The identity, exact: on the manual clock nothing is in flight after an advance. */
static struct kairos_stats m_identity(struct kairos *k, uint64_t armed, uint64_t fired,
				      uint64_t cancelled, uint64_t runs)
{
	struct kairos_stats s;

	ck_assert_int_eq(kairos_stats(k, &s), 0);
	ck_assert_uint_eq(s.armed, armed);
	ck_assert_uint_eq(s.fired, fired);
	ck_assert_uint_eq(s.cancelled, cancelled);
	ck_assert_uint_eq(s.periodic_runs, runs);
	ck_assert_uint_eq(s.armed, s.fired + s.cancelled + s.drained + s.pending);
	ck_assert_uint_eq(s.early, 0);
	ck_assert_uint_eq(s.timer_sets, 0);
	return s;
}

/* Timerfds of this process, from /proc/self/fd. */
static int m_count_timerfds(void)
{
	char path[64], link[64];
	int n = 0;

	for (int fd = 0; fd < 4096; fd++) {
		ssize_t len;

		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		len = readlink(path, link, sizeof(link) - 1);
		if (len < 0)
			continue;
		link[len] = '\0';
		n += strcmp(link, "anon_inode:[timerfd]") == 0;
	}
	return n;
}

/* ---- the clock itself ------------------------------------------------- */

START_TEST(test_manual_starts_at_zero_and_stands_still)
{
	struct kairos *k = m_create(0, 0);

	ck_assert_uint_eq(t_now(k), 0);
	t_sleep_ms(20);
	ck_assert_uint_eq(t_now(k), 0);
	m_advance(k, 5);
	ck_assert_uint_eq(t_now(k), 5);
	m_advance(k, 0);
	ck_assert_uint_eq(t_now(k), 5);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

START_TEST(test_manual_errors)
{
	struct kairos_timer_opts o = { 0 };
	struct kairos *k = m_create(0, 0), *sys = t_create(NULL);
	kairos_id id;

	ck_assert_int_eq(kairos_clock_advance(NULL, 1), -EINVAL);
	/* A system clock is not moved by anyone. */
	ck_assert_int_eq(kairos_clock_advance(sys, 1), -EINVAL);
	ck_assert_int_eq(kairos_clock_advance(sys, 0), -EINVAL);

	/*
	 * To the ns before 2^64 - 1 (never), and not one further; the time
	 * stays where it was.
	 */
	m_advance(k, UINT64_MAX - 10);
	ck_assert_int_eq(kairos_clock_advance(k, 11), -EOVERFLOW);
	ck_assert_int_eq(kairos_clock_advance(k, 10), -EOVERFLOW);
	ck_assert_uint_eq(t_now(k), UINT64_MAX - 10);
	ck_assert_int_eq(kairos_clock_advance(k, UINT64_MAX), -EOVERFLOW);
	m_advance(k, 9);
	ck_assert_uint_eq(t_now(k), UINT64_MAX - 1);
	ck_assert_int_eq(kairos_clock_advance(k, 1), -EOVERFLOW);
	m_advance(k, 0);
	/* Delays from the end of time overflow; absolute times do not. */
	ck_assert_int_eq(kairos_arm(k, 2, t_cb_never, NULL, &id), -EOVERFLOW);
	ck_assert_int_eq(kairos_reset(k, 1, 2), -EOVERFLOW);

	/* A policy is for a periodic timer, and one at a time. */
	o.flags = KAIROS_PERIOD_FIXED_DELAY;
	ck_assert_int_eq(kairos_arm_opts(sys, T_MS, &o, t_cb_never, NULL, &id), -EINVAL);
	o.flags = KAIROS_PERIOD_SKIP;
	ck_assert_int_eq(kairos_arm_opts(sys, T_MS, &o, t_cb_never, NULL, &id), -EINVAL);
	o.period_ns = T_MS;
	o.flags = KAIROS_PERIOD_FIXED_DELAY | KAIROS_PERIOD_SKIP;
	ck_assert_int_eq(kairos_arm_opts(sys, T_MS, &o, t_cb_never, NULL, &id), -EINVAL);
	m_identity(sys, 0, 0, 0, 0);

	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	ck_assert_int_eq(kairos_clock_advance(k, 1), -ESHUTDOWN);
	t_destroy(sys, KAIROS_DRAIN_DROP, 0);
	ck_assert_int_eq(kairos_clock_advance(sys, 1), -ESHUTDOWN);
	ck_assert_uint_eq(t_u64(&tt.bad), 0);
}
END_TEST

/*
 * No timerfd exists and no system clock is waited for: an hour of service
 * time, with a 1 ms periodic timer in it, takes no hour.
 */
START_TEST(test_manual_no_timerfd_hour_at_once)
{
	int before = m_count_timerfds();
	struct kairos *k = m_create(_i, 0);
	struct m_timer p, late;
	uint64_t t0;

	ck_assert_int_eq(m_count_timerfds(), before);
	m_init(&p, k);
	m_init(&late, k);
	ck_assert_int_eq(kairos_arm_every(k, T_MS, m_cb, &p, &p.id), 0);
	m_arm(k, &late, 59 * 60 * T_SEC);
	t0 = t_mono();
	m_advance(k, 3600 * T_SEC);
	ck_assert_msg(t_mono() - t0 < 60 * T_SEC, "an hour of manual time took %" PRIu64 " ns",
		      t_mono() - t0);
	ck_assert_int_eq(m_calls(&late), 1);
	ck_assert_uint_eq(m_at(&late, 0), 3600 * T_SEC);
	/* One call for the whole hour: its status counts every period. */
	ck_assert_int_eq(m_calls(&p), 1);
	ck_assert_int_eq(m_st(&p, 0), 3600 * 1000);
	ck_assert_int_eq(m_count_timerfds(), before);
	m_identity(k, 2, 1, 0, 1);
	ck_assert_int_eq(kairos_cancel(k, p.id), 0);
	ck_assert_int_eq(t_int(&p.bad) + t_int(&late.bad), 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* ---- never early, all due by the return ---------------------------------- */

/*
 * Exact tick boundaries, sub-tick deadlines (rounded up to the tick) and
 * the wheel's level boundaries (64 and 4096 ticks): nothing before its
 * tick, everything at it.  _i: bit 0 inline delivery, bit 1 epoll by cfg.
 */
START_TEST(test_manual_never_early_exact_ticks)
{
	static const uint64_t delays[] = {
		0, 1, T_MS - 1, T_MS, T_MS + 1, 2 * T_MS, 63 * T_MS, 64 * T_MS, 65 * T_MS,
		4095 * T_MS, 4096 * T_MS, 4097 * T_MS, 262144 * T_MS,
	};
	enum { N = sizeof(delays) / sizeof(delays[0]) };
	struct kairos *k = m_create(_i & 1, _i & 2);
	struct m_timer m[N];
	uint64_t fired = 0;

	for (int i = 0; i < N; i++) {
		m_init(&m[i], k);
		m_arm(k, &m[i], delays[i]);
	}
	/* Each tick boundary: one ns before it, then at it. */
	for (int i = 0; i < N; i++) {
		uint64_t due = (delays[i] + T_MS - 1) / T_MS * T_MS;

		if (due && due - 1 > t_now(k)) {
			m_advance_to(k, due - 1);
			for (int j = 0; j < N; j++)
				ck_assert_msg(m_calls(&m[j]) == (delays[j] <= due - T_MS ? 1 : 0),
					      "timer %d (delay %" PRIu64 ") calls %d at %" PRIu64, j,
					      delays[j], m_calls(&m[j]), due - 1);
		}
		if (due > t_now(k))
			m_advance_to(k, due);
		else
			m_advance(k, 0);
		for (int j = 0; j < N; j++) {
			uint64_t dj = (delays[j] + T_MS - 1) / T_MS * T_MS;

			ck_assert_msg(m_calls(&m[j]) == (dj <= due ? 1 : 0),
				      "timer %d (delay %" PRIu64 ") calls %d at %" PRIu64, j,
				      delays[j], m_calls(&m[j]), due);
			/* It saw the time it fired at: its own tick, never before. */
			if (m_calls(&m[j]) && dj == due)
				ck_assert_uint_eq(m_at(&m[j], 0), due);
		}
	}
	for (int i = 0; i < N; i++) {
		ck_assert_int_eq(t_int(&m[i].bad), 0);
		fired += (uint64_t)m_calls(&m[i]);
	}
	ck_assert_uint_eq(fired, N);
	m_identity(k, N, N, 0, 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

#define MANY	2000
#define ARMERS	2

struct many {
	struct kairos *k;
	uint64_t delay[MANY];
	atomic_int calls[MANY];
	atomic_int bad;
	unsigned from, to;
};

static void many_cb(void *arg, kairos_id id, int status)
{
	atomic_int *c = arg;

	(void)id;
	(void)status;
	atomic_fetch_add(c, 1);
}

static void *many_arm(void *arg)
{
	struct many *m = ((struct many **)arg)[0];
	unsigned part = (unsigned)(uintptr_t)((void **)arg)[1];

	for (unsigned i = part; i < MANY; i += ARMERS) {
		kairos_id id;

		if (kairos_arm(m->k, m->delay[i], many_cb, &m->calls[i], &id) != 0)
			atomic_fetch_add(&m->bad, 1);
	}
	return NULL;
}

/*
 * Timers armed by several threads (so on several shards) at random delays;
 * after each random advance, exactly those due have run.  _i: inline.
 */
START_TEST(test_manual_all_due_by_return)
{
	static struct many m;
	uint64_t seed = t_seed(10 + (uint64_t)_i);
	pthread_t th[ARMERS];
	void *args[ARMERS][2];

	memset(&m, 0, sizeof(m));
	m.k = m_create(_i, 0);
	for (unsigned i = 0; i < MANY; i++)
		m.delay[i] = t_rand_below(&seed, 1000 * T_MS);
	for (unsigned a = 0; a < ARMERS; a++) {
		args[a][0] = &m;
		args[a][1] = (void *)(uintptr_t)a;
		ck_assert_int_eq(pthread_create(&th[a], NULL, many_arm, args[a]), 0);
	}
	for (unsigned a = 0; a < ARMERS; a++)
		pthread_join(th[a], NULL);
	ck_assert_int_eq(t_int(&m.bad), 0);
	while (t_now(m.k) < 1000 * T_MS) {
		uint64_t now;

		m_advance(m.k, t_rand_below(&seed, 40 * T_MS));
		now = t_now(m.k);
		for (unsigned i = 0; i < MANY; i++) {
			int want = (m.delay[i] + T_MS - 1) / T_MS * T_MS <= now;

			ck_assert_msg(atomic_load(&m.calls[i]) == want,
				      "timer %u (delay %" PRIu64 "): %d calls at %" PRIu64, i,
				      m.delay[i], atomic_load(&m.calls[i]), now);
		}
	}
	m_identity(m.k, MANY, MANY, 0, 0);
	t_destroy(m.k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/*
 * By its return an advance waits for worker callbacks to return, not only
 * to start.
 */
struct slow {
	struct kairos *k;
	atomic_int done;
};

static void slow_cb(void *arg, kairos_id id, int status)
{
	struct slow *s = arg;

	(void)id;
	(void)status;
	t_sleep_ms(50);
	atomic_store(&s->done, 1);
}

START_TEST(test_manual_waits_for_callbacks)
{
	struct kairos *k = m_create(_i, 0);
	struct slow s = { .k = k };
	kairos_id id;

	ck_assert_int_eq(kairos_arm(k, 10 * T_MS, slow_cb, &s, &id), 0);
	m_advance(k, 10 * T_MS);
	ck_assert_int_eq(t_int(&s.done), 1);
	m_identity(k, 1, 1, 0, 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/*
 * A callback's own arms and advances: a timer it arms that is due at once
 * fires before the enclosing advance returns, and its own advance does not
 * wait (that would wait for itself) but moves the time, and the enclosing
 * advance waits for what that made due.
 */
struct chain {
	struct kairos *k;
	struct m_timer next;
	atomic_int arm_rc;
	atomic_int adv_rc;
	atomic_int calls;
};

static void chain_cb(void *arg, kairos_id id, int status)
{
	struct chain *c = arg;

	(void)id;
	(void)status;
	atomic_fetch_add(&c->calls, 1);
	atomic_store(&c->arm_rc, kairos_arm(c->k, 0, m_cb, &c->next, NULL));
	atomic_store(&c->adv_rc, kairos_clock_advance(c->k, 5 * T_MS));
}

START_TEST(test_manual_callback_arms_and_advances)
{
	struct kairos *k = m_create(_i, 0);
	struct chain c;
	struct m_timer at10;

	memset(&c, 0, sizeof(c));
	c.k = k;
	m_init(&c.next, k);
	m_init(&at10, k);
	ck_assert_int_eq(kairos_arm(k, 5 * T_MS, chain_cb, &c, NULL), 0);
	m_arm(k, &at10, 10 * T_MS);
	m_advance(k, 5 * T_MS);
	ck_assert_int_eq(t_int(&c.calls), 1);
	ck_assert_int_eq(t_int(&c.arm_rc), 0);
	ck_assert_int_eq(t_int(&c.adv_rc), 0);
	ck_assert_uint_eq(t_now(k), 10 * T_MS);
	/* Armed by the callback at 5 ms with no delay. */
	ck_assert_int_eq(m_calls(&c.next), 1);
	ck_assert_uint_ge(m_at(&c.next, 0), 5 * T_MS);
	/* Made due by the callback's advance. */
	ck_assert_int_eq(m_calls(&at10), 1);
	ck_assert_uint_eq(m_at(&at10, 0), 10 * T_MS);
	m_identity(k, 3, 3, 0, 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

struct arms_now {
	struct kairos *k;
	_Atomic int runs;	/* of the timers it armed */
	_Atomic int arm_fails;
};

static void arms_now_ran(void *arg, kairos_id id, int status)
{
	struct arms_now *c = arg;

	(void)id;
	(void)status;
	atomic_fetch_add(&c->runs, 1);
}

/* A callback that arms a timer due at once. */
static void arms_now_cb(void *arg, kairos_id id, int status)
{
	struct arms_now *c = arg;

	(void)id;
	(void)status;
	if (kairos_arm(c->k, 0, arms_now_ran, c, NULL))
		atomic_fetch_add(&c->arm_fails, 1);
}

/*
 * The same promise, many times over: an advance returns only once a timer
 * that a callback armed due at once has run, however the shard's wake-up
 * for that arm falls against the advance's last look (in tens of
 * thousands of rounds, the look read the shard asleep and its inbox empty
 * between the shard's wake and its pass, and returned early).
 */
START_TEST(test_manual_callback_arm_due_at_once_each_round)
{
	struct kairos *k = m_create(_i, 0);
	struct arms_now c = { k, 0, 0 };
	uint64_t end = t_mono() + 2 * T_SEC;
	int rounds = 0;

	while (rounds < 100000 && t_mono() < end) {
		ck_assert_int_eq(kairos_arm(k, T_MS, arms_now_cb, &c, NULL), 0);
		m_advance(k, T_MS);
		rounds++;
		ck_assert_msg(t_int(&c.runs) == rounds,
			      "round %d: the advance returned with %d of its timers run",
			      rounds, t_int(&c.runs));
	}
	ck_assert_int_eq(t_int(&c.arm_fails), 0);
	m_identity(k, 2 * (uint64_t)rounds, 2 * (uint64_t)rounds, 0, 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* ---- cancel, reset, slack --------------------------------------------- */

START_TEST(test_manual_cancel_and_reset)
{
	struct kairos *k = m_create(_i, 0);
	struct m_timer gone, early, late;

	m_init(&gone, k);
	m_init(&early, k);
	m_init(&late, k);
	m_arm(k, &gone, 10 * T_MS);
	m_arm(k, &early, 50 * T_MS);
	m_arm(k, &late, 10 * T_MS);
	ck_assert_int_eq(kairos_cancel(k, gone.id), 0);
	ck_assert_int_eq(kairos_reset(k, early.id, 5 * T_MS), 0);
	ck_assert_int_eq(kairos_reset(k, late.id, 30 * T_MS), 0);
	m_advance(k, 5 * T_MS - 1);
	ck_assert_int_eq(m_calls(&early), 0);
	m_advance(k, 1);
	ck_assert_int_eq(m_calls(&early), 1);
	ck_assert_uint_eq(m_at(&early, 0), 5 * T_MS);
	m_advance_to(k, 30 * T_MS - 1);
	ck_assert_int_eq(m_calls(&late), 0);
	ck_assert_int_eq(m_calls(&gone), 0);
	m_advance(k, 1);
	ck_assert_int_eq(m_calls(&late), 1);
	ck_assert_uint_eq(m_at(&late, 0), 30 * T_MS);
	/* reset_at to the past fires at the next advance, even of 0. */
	m_init(&gone, k);
	m_arm(k, &gone, T_SEC);
	ck_assert_int_eq(kairos_reset_at(k, gone.id, 0), 0);
	m_advance(k, 0);
	ck_assert_int_eq(m_calls(&gone), 1);
	m_advance(k, T_SEC);
	ck_assert_int_eq(m_calls(&gone), 1);
	m_identity(k, 4, 3, 1, 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* Slack timers fire within their window, never before their deadline. */
START_TEST(test_manual_slack)
{
	enum { N = 64 };
	struct kairos *k = m_create(_i, 0);
	uint64_t seed = t_seed(20), delay[N], slack[N];
	static struct m_timer m[N];

	for (int i = 0; i < N; i++) {
		delay[i] = T_MS + t_rand_below(&seed, 400 * T_MS);
		slack[i] = t_rand_below(&seed, delay[i] / 4 + 1);
		m_init(&m[i], k);
		ck_assert_int_eq(kairos_arm_slack(k, delay[i], slack[i], m_cb, &m[i], &m[i].id), 0);
	}
	/* One tick at a time: the time of each call is the tick it fired at. */
	while (t_now(k) < 600 * T_MS)
		m_advance(k, T_MS);
	for (int i = 0; i < N; i++) {
		uint64_t due = (delay[i] + T_MS - 1) / T_MS * T_MS;

		ck_assert_int_eq(m_calls(&m[i]), 1);
		ck_assert_msg(m_at(&m[i], 0) >= due && m_at(&m[i], 0) <= due + slack[i] / T_MS * T_MS,
			      "timer %d: delay %" PRIu64 " slack %" PRIu64 " fired at %" PRIu64, i,
			      delay[i], slack[i], m_at(&m[i], 0));
	}
	m_identity(k, N, N, 0, 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* ---- periodic policies --------------------------------------------------- */

static kairos_id m_arm_every(struct kairos *k, struct m_timer *m, uint64_t period, int policy)
{
	struct kairos_timer_opts o = { .period_ns = period, .flags = policy };

	return m_arm_opts(k, m, period, &o);
}

/* Fixed rate: next = previous deadline + period; missed periods coalesce. */
START_TEST(test_manual_fixed_rate_coalesces)
{
	struct kairos *k = m_create(_i, 0);
	struct m_timer p;

	m_init(&p, k);
	m_arm_every(k, &p, 10 * T_MS, KAIROS_PERIOD_FIXED_RATE);
	m_advance(k, 10 * T_MS - 1);
	ck_assert_int_eq(m_calls(&p), 0);
	m_advance(k, 1);
	ck_assert_int_eq(m_calls(&p), 1);
	ck_assert_uint_eq(m_at(&p, 0), 10 * T_MS);
	ck_assert_int_eq(m_st(&p, 0), 1);
	/* To 45 ms: the deadlines 20, 30 and 40 ms in one call. */
	m_advance(k, 35 * T_MS);
	ck_assert_int_eq(m_calls(&p), 2);
	ck_assert_int_eq(m_st(&p, 1), 3);
	ck_assert_uint_eq(m_at(&p, 1), 45 * T_MS);
	/* Still on the grid: 50 ms. */
	m_advance_to(k, 50 * T_MS - 1);
	ck_assert_int_eq(m_calls(&p), 2);
	m_advance(k, 1);
	ck_assert_int_eq(m_calls(&p), 3);
	ck_assert_int_eq(m_st(&p, 2), 1);
	ck_assert_int_eq(t_int(&p.covered), 5);
	ck_assert_int_eq(kairos_cancel(k, p.id), 0);
	m_advance(k, T_SEC);
	ck_assert_int_eq(m_calls(&p), 3);
	ck_assert_int_eq(t_int(&p.bad), 0);
	m_identity(k, 1, 0, 1, 3);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/*
 * Fixed rate, late by more periods than a status holds: one call, its
 * status saturated at INT_MAX, and the next deadline past every period it
 * covered (not the INT_MAX-th, which lies in the past: that would fire
 * again at once).  25 days of a 1 ms timer, then one period more.
 */
START_TEST(test_manual_fixed_rate_status_saturates)
{
	struct kairos *k = m_create(_i, 0);
	struct m_timer p;

	m_init(&p, k);
	ck_assert_int_eq(kairos_arm_every(k, T_MS, m_cb, &p, &p.id), 0);
	m_advance(k, ((uint64_t)INT_MAX + 5) * T_MS);
	ck_assert_int_eq(m_calls(&p), 1);
	ck_assert_int_eq(m_st(&p, 0), INT_MAX);
	m_advance(k, T_MS);
	ck_assert_int_eq(m_calls(&p), 2);
	ck_assert_int_eq(m_st(&p, 1), 1);
	ck_assert_int_eq(kairos_cancel(k, p.id), 0);
	ck_assert_int_eq(t_int(&p.bad), 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/*
 * 2^64 - 1 ns stands for never, on every tick: with a tick that divides
 * it (65535 = 3 x 5 x 17 x 257), that time is a tick's start, and a clock
 * that reached it found a saturated periodic timer due again after every
 * run (the advance never returned).  The clock stops short of it.
 */
START_TEST(test_manual_never_is_not_reached)
{
	struct kairos_config c = m_cfg(_i, 0);
	struct kairos_timer_opts o = { .period_ns = T_MS, .flags = KAIROS_PERIOD_FIXED_DELAY };
	struct m_timer rate, delay, at;
	struct kairos_stats st;
	struct kairos *k;

	c.tick_ns = 65535;
	k = t_create(&c);
	m_init(&rate, k);
	m_init(&delay, k);
	m_init(&at, k);
	ck_assert_int_eq(kairos_arm_every(k, 1000 * T_MS, m_cb, &rate, &rate.id), 0);
	m_arm_opts(k, &delay, UINT64_MAX - 3 * T_MS, &o);
	ck_assert_int_eq(kairos_arm_at(k, UINT64_MAX, m_cb, &at, &at.id), 0);
	/* The last ns the clock reaches: each periodic runs once, its next run never. */
	m_advance_to(k, UINT64_MAX - 1);
	ck_assert_int_eq(m_calls(&rate), 1);
	ck_assert_int_eq(m_st(&rate, 0), INT_MAX);
	ck_assert_int_eq(m_calls(&delay), 1);
	ck_assert_int_eq(m_calls(&at), 0);
	ck_assert_int_eq(kairos_clock_advance(k, 1), -EOVERFLOW);
	ck_assert_uint_eq(t_now(k), UINT64_MAX - 1);
	m_advance(k, 0);
	ck_assert_int_eq(m_calls(&rate), 1);
	ck_assert_int_eq(m_calls(&delay), 1);
	ck_assert_int_eq(m_calls(&at), 0);
	st = m_identity(k, 3, 0, 0, 2);
	ck_assert_uint_eq(st.pending, 3);
	ck_assert_int_eq(t_int(&rate.bad) + t_int(&delay.bad) + t_int(&at.bad), 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 3);
}
END_TEST

/*
 * Fixed delay: next = end of the callback + period.  The callback "takes"
 * 3 ms (it advances the clock itself), so the runs are at 10, 23, 36 ms;
 * a late run covers one expiration and the next is a period after it.
 */
START_TEST(test_manual_fixed_delay)
{
	struct kairos *k = m_create(_i, 0);
	struct m_timer p;

	m_init(&p, k);
	p.advance_in = 3 * T_MS;
	p.advance_calls = 2;
	m_arm_every(k, &p, 10 * T_MS, KAIROS_PERIOD_FIXED_DELAY);
	m_advance(k, 10 * T_MS);
	ck_assert_int_eq(m_calls(&p), 1);
	ck_assert_int_eq(t_int(&p.advance_rc), 0);
	ck_assert_uint_eq(m_at(&p, 0), 10 * T_MS);
	ck_assert_uint_eq(t_now(k), 13 * T_MS);
	m_advance_to(k, 23 * T_MS - 1);
	ck_assert_int_eq(m_calls(&p), 1);
	m_advance(k, 1);
	ck_assert_int_eq(m_calls(&p), 2);
	ck_assert_uint_eq(m_at(&p, 1), 23 * T_MS);
	ck_assert_uint_eq(t_now(k), 26 * T_MS);
	m_advance_to(k, 36 * T_MS - 1);
	ck_assert_int_eq(m_calls(&p), 2);
	m_advance(k, 1);
	ck_assert_int_eq(m_calls(&p), 3);
	ck_assert_uint_eq(m_at(&p, 2), 36 * T_MS);
	/* 50 ms late: one call, status 1, and the next a period after it. */
	m_advance(k, 60 * T_MS);
	ck_assert_int_eq(m_calls(&p), 4);
	ck_assert_int_eq(m_st(&p, 3), 1);
	ck_assert_uint_eq(m_at(&p, 3), 96 * T_MS);
	m_advance(k, 10 * T_MS - 1);
	ck_assert_int_eq(m_calls(&p), 4);
	m_advance(k, 1);
	ck_assert_int_eq(m_calls(&p), 5);
	ck_assert_int_eq(t_int(&p.covered), 5);
	ck_assert_int_eq(t_int(&p.bad), 0);
	ck_assert_int_eq(kairos_cancel(k, p.id), 0);
	m_identity(k, 1, 0, 1, 5);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* Skip: missed periods are dropped (status 1); the grid stays. */
START_TEST(test_manual_skip)
{
	struct kairos *k = m_create(_i, 0);
	struct m_timer p;

	m_init(&p, k);
	m_arm_every(k, &p, 10 * T_MS, KAIROS_PERIOD_SKIP);
	m_advance(k, 10 * T_MS);
	ck_assert_int_eq(m_calls(&p), 1);
	ck_assert_int_eq(m_st(&p, 0), 1);
	/* To 45 ms: 20, 30 and 40 ms missed, one call with status 1. */
	m_advance(k, 35 * T_MS);
	ck_assert_int_eq(m_calls(&p), 2);
	ck_assert_int_eq(m_st(&p, 1), 1);
	ck_assert_uint_eq(m_at(&p, 1), 45 * T_MS);
	/* The next is the grid's 50 ms, not 55. */
	m_advance_to(k, 50 * T_MS - 1);
	ck_assert_int_eq(m_calls(&p), 2);
	m_advance(k, 1);
	ck_assert_int_eq(m_calls(&p), 3);
	ck_assert_uint_eq(m_at(&p, 2), 50 * T_MS);
	m_advance(k, 10 * T_MS + T_MS / 2);
	ck_assert_int_eq(m_calls(&p), 4);
	ck_assert_uint_eq(m_at(&p, 3), 60 * T_MS + T_MS / 2);
	m_advance_to(k, 70 * T_MS);
	ck_assert_int_eq(m_calls(&p), 5);
	ck_assert_int_eq(t_int(&p.covered), 5);
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(m_st(&p, i), 1);
	ck_assert_int_eq(t_int(&p.bad), 0);
	ck_assert_int_eq(kairos_cancel(k, p.id), 0);
	m_identity(k, 1, 0, 1, 5);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/*
 * A reset periodic timer's period restarts from the new deadline itself, not
 * from the tick it falls in: every 1.5 ms on 1 ms ticks, reset at 0 to
 * 0.25 ms, its deadlines are 0.25, 1.75, 3.25 ms, each run in the tick
 * after (1, 2 and 4 ms).  (From the tick, 1, 2.5 and 4 ms: the second run
 * came at 3 ms, up to two ticks after its deadline.)
 */
START_TEST(test_manual_reset_periodic_off_tick)
{
	struct kairos *k = m_create(_i, 0);
	struct m_timer p;

	m_init(&p, k);
	m_arm_every(k, &p, 1500 * T_US, KAIROS_PERIOD_FIXED_RATE);
	ck_assert_int_eq(kairos_reset(k, p.id, 250 * T_US), 0);
	m_advance_to(k, T_MS);
	ck_assert_int_eq(m_calls(&p), 1);
	m_advance_to(k, 2 * T_MS);
	ck_assert_int_eq(m_calls(&p), 2);
	m_advance_to(k, 3 * T_MS);
	ck_assert_int_eq(m_calls(&p), 2);
	m_advance_to(k, 4 * T_MS);
	ck_assert_int_eq(m_calls(&p), 3);
	ck_assert_uint_eq(m_at(&p, 0), T_MS);
	ck_assert_uint_eq(m_at(&p, 1), 2 * T_MS);
	ck_assert_uint_eq(m_at(&p, 2), 4 * T_MS);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(m_st(&p, i), 1);
	ck_assert_int_eq(kairos_cancel(k, p.id), 0);
	ck_assert_int_eq(t_int(&p.bad), 0);
	m_identity(k, 1, 0, 1, 3);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* ---- queues and keys --------------------------------------------------- */

static bool m_readable(struct kairos_queue *q)
{
	struct pollfd p = { .fd = kairos_queue_fd(q), .events = POLLIN };

	return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

/*
 * Queue entries are takeable (timeout 0) and the fd readable as the advance
 * returns; a periodic entry's policy holds through the queue, and a fixed
 * delay counts from the take.  _i bit 1: epoll by cfg.
 */
START_TEST(test_manual_queue)
{
	struct kairos *k = m_create(0, _i & 2);
	struct kairos_timer_opts o = { 0 };
	struct kairos_expiry e[8];
	struct kairos_queue *q;
	struct m_timer run;
	kairos_id one, rate, delay;

	ck_assert_int_eq(kairos_queue_create(k, &q), 0);
	o.queue = q;
	ck_assert_int_eq(kairos_arm_opts(k, 10 * T_MS, &o, NULL, NULL, &one), 0);
	o.period_ns = 10 * T_MS;
	ck_assert_int_eq(kairos_arm_opts(k, 10 * T_MS, &o, NULL, NULL, &rate), 0);
	o.flags = KAIROS_PERIOD_FIXED_DELAY;
	ck_assert_int_eq(kairos_arm_opts(k, 10 * T_MS, &o, NULL, NULL, &delay), 0);

	m_advance(k, 10 * T_MS - 1);
	ck_assert(!m_readable(q));
	ck_assert_int_eq(kairos_queue_take(q, e, 8, 0), 0);
	m_advance(k, 1);
	ck_assert(m_readable(q));
	ck_assert_int_eq(kairos_queue_take(q, e, 8, 0), 3);
	for (int i = 0; i < 3; i++) {
		ck_assert_uint_eq(e[i].deadline_ns, 10 * T_MS);
		ck_assert_int_eq(e[i].status, 1);
	}
	ck_assert(!m_readable(q));

	/* At 45 ms: the fixed-rate entry covers 20, 30, 40; fixed delay: 20 (taken at 10). */
	m_advance(k, 35 * T_MS);
	ck_assert_int_eq(kairos_queue_take(q, e, 8, 0), 2);
	for (int i = 0; i < 2; i++) {
		if (e[i].id == rate) {
			ck_assert_uint_eq(e[i].deadline_ns, 20 * T_MS);
			ck_assert_int_eq(e[i].status, 3);
		} else {
			ck_assert_uint_eq(e[i].id, delay);
			ck_assert_uint_eq(e[i].deadline_ns, 20 * T_MS);
			ck_assert_int_eq(e[i].status, 1);
		}
	}
	/* Taken at 45 ms: the fixed delay's next is 55 ms, the rate's 50 ms. */
	m_advance_to(k, 50 * T_MS);
	ck_assert_int_eq(kairos_queue_take(q, e, 8, 0), 1);
	ck_assert_uint_eq(e[0].id, rate);
	m_advance_to(k, 55 * T_MS - 1);
	ck_assert_int_eq(kairos_queue_take(q, e, 8, 0), 0);
	m_advance(k, 1);
	ck_assert_int_eq(kairos_queue_take(q, e, 8, 0), 1);
	ck_assert_uint_eq(e[0].id, delay);
	ck_assert_uint_eq(e[0].deadline_ns, 55 * T_MS);

	ck_assert_int_eq(kairos_cancel(k, rate), 0);
	ck_assert_int_eq(kairos_cancel(k, delay), 0);

	/* kairos_queue_run() runs a callback here. */
	m_init(&run, k);
	o.period_ns = 0;
	o.flags = 0;
	m_arm_opts(k, &run, 5 * T_MS, &o);
	m_advance(k, 5 * T_MS);
	ck_assert_int_eq(m_calls(&run), 0);
	ck_assert_int_eq(kairos_queue_run(q, 8), 1);
	ck_assert_int_eq(m_calls(&run), 1);
	ck_assert_uint_eq(m_at(&run, 0), 60 * T_MS);
	m_identity(k, 4, 2, 2, 6);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	ck_assert_int_eq(kairos_queue_destroy(q), 0);
}
END_TEST

/* The CQEs waiting in @ring, without waiting: user_data into @data, res into @res. */
static int m_reap(struct io_uring *ring, uint64_t *data, int *res, int max)
{
	struct io_uring_cqe *cqe;
	int n = 0;

	while (n < max && io_uring_peek_cqe(ring, &cqe) == 0) {
		data[n] = cqe->user_data;
		res[n++] = cqe->res;
		io_uring_cqe_seen(ring, cqe);
	}
	return n;
}

/*
 * A ring queue on the manual clock: the CQEs are in the user's ring as the
 * advance returns.  Passes without checking where io_uring or MSG_RING is
 * refused, or on epoll (the ring program tests that).
 */
START_TEST(test_manual_ring_queue)
{
	struct kairos *k = m_create(0, 0);
	struct kairos_timer_opts o = { 0 };
	struct kairos_queue *q;
	struct io_uring ring;
	uint64_t data[4];
	int res[4], rc;
	kairos_id id;

	ck_assert_int_eq(kairos_queue_create(k, &q), 0);
	if (io_uring_queue_init(8, &ring, 0) != 0) {
		t_destroy(k, KAIROS_DRAIN_DROP, 0);
		ck_assert_int_eq(kairos_queue_destroy(q), 0);
		return;
	}
	rc = kairos_queue_ring(q, ring.ring_fd);
	if (rc == -EOPNOTSUPP)
		goto out;
	ck_assert_int_eq(rc, 0);
	o.queue = q;
	ck_assert_int_eq(kairos_arm_opts(k, 10 * T_MS, &o, NULL, (void *)0x1000, &id), 0);
	o.period_ns = 10 * T_MS;
	ck_assert_int_eq(kairos_arm_opts(k, 10 * T_MS, &o, NULL, (void *)0x2000, &id), 0);
	m_advance(k, 10 * T_MS - 1);
	ck_assert_int_eq(m_reap(&ring, data, res, 4), 0);
	m_advance(k, 1);
	ck_assert_int_eq(m_reap(&ring, data, res, 4), 2);
	ck_assert_uint_eq(data[0] + data[1], 0x3000);
	ck_assert_int_eq(res[0], 1);
	ck_assert_int_eq(res[1], 1);
	/* To 45 ms: one CQE for 20, 30 and 40 ms. */
	m_advance(k, 35 * T_MS);
	ck_assert_int_eq(m_reap(&ring, data, res, 4), 1);
	ck_assert_uint_eq(data[0], 0x2000);
	ck_assert_int_eq(res[0], 3);
	ck_assert_int_eq(kairos_cancel(k, id), 0);
	m_identity(k, 2, 1, 1, 2);
out:
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	ck_assert_int_eq(kairos_queue_destroy(q), 0);
	io_uring_queue_exit(&ring);
}
END_TEST

START_TEST(test_manual_keys)
{
	struct kairos *k = m_create(_i, 0);
	struct kairos_timer_opts o = { .key = "a", .key_len = 1 };
	struct m_timer a, b, c;
	kairos_id found;

	m_init(&a, k);
	m_init(&b, k);
	m_init(&c, k);
	m_arm_opts(k, &a, 10 * T_MS, &o);
	o.key = "b";
	m_arm_opts(k, &b, 10 * T_MS, &o);
	ck_assert_int_eq(kairos_key_find(k, "a", 1, &found), 0);
	ck_assert_uint_eq(found, a.id);
	/* Pushed to now + 20 ms. */
	ck_assert_int_eq(kairos_key_reset(k, "a", 1, 20 * T_MS), 0);
	ck_assert_int_eq(kairos_key_cancel(k, "b", 1), 0);
	m_advance(k, 10 * T_MS);
	ck_assert_int_eq(m_calls(&a), 0);
	ck_assert_int_eq(m_calls(&b), 0);
	ck_assert_int_eq(kairos_key_find(k, "a", 1, &found), 0);
	ck_assert_int_eq(kairos_key_find(k, "b", 1, &found), -ENOENT);
	/* The reset counts from the time it was made: 20 ms. */
	m_advance(k, 10 * T_MS - 1);
	ck_assert_int_eq(m_calls(&a), 0);
	m_advance(k, 1);
	ck_assert_int_eq(m_calls(&a), 1);
	ck_assert_uint_eq(m_at(&a, 0), 20 * T_MS);
	ck_assert_int_eq(kairos_key_find(k, "a", 1, &found), -ENOENT);
	/* The key is free again: a new timer takes it. */
	o.key = "a";
	m_arm_opts(k, &c, 0, &o);
	m_advance(k, 0);
	ck_assert_int_eq(m_calls(&c), 1);
	ck_assert_int_eq(kairos_key_find(k, "a", 1, &found), -ENOENT);
	m_identity(k, 3, 2, 1, 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

/* ---- threads ------------------------------------------------------------- */

#define RACE_ROUNDS	300

struct race {
	struct kairos *k;
	unsigned part;
	atomic_int calls[ARMERS][RACE_ROUNDS];
	uint64_t deadline[ARMERS][RACE_ROUNDS];
	atomic_int late;	/* due by an advance's return, not run */
	atomic_int bad;
};

static void *race_main(void *arg)
{
	struct race *r = ((struct race **)arg)[0];
	unsigned me = (unsigned)(uintptr_t)((void **)arg)[1];
	uint64_t seed = t_seed(30 + me);

	for (unsigned i = 0; i < RACE_ROUNDS; i++) {
		uint64_t delay = t_rand_below(&seed, 5 * T_MS), step = t_rand_below(&seed, 2 * T_MS);
		uint64_t before;
		kairos_id id;

		/* Absolute: the other thread may move the time between the two calls. */
		if (kairos_now(r->k, &before) ||
		    kairos_arm_at(r->k, before + delay, many_cb, &r->calls[me][i], &id) ||
		    kairos_clock_advance(r->k, step))
			atomic_fetch_add(&r->bad, 1);
		r->deadline[me][i] = (before + delay + T_MS - 1) / T_MS * T_MS;
		/* Everything this thread armed that was due by its advance has run. */
		for (unsigned j = 0; j <= i; j++)
			if (r->deadline[me][j] <= before + step && !atomic_load(&r->calls[me][j]))
				atomic_fetch_add(&r->late, 1);
	}
	return NULL;
}

/* Threads that arm and advance at once: each advance covers its own thread's arms. */
START_TEST(test_manual_concurrent_advances)
{
	static struct race r;
	pthread_t th[ARMERS];
	void *args[ARMERS][2];
	uint64_t now, fired = 0;

	memset(&r, 0, sizeof(r));
	r.k = m_create(_i, 0);
	for (unsigned a = 0; a < ARMERS; a++) {
		args[a][0] = &r;
		args[a][1] = (void *)(uintptr_t)a;
		ck_assert_int_eq(pthread_create(&th[a], NULL, race_main, args[a]), 0);
	}
	for (unsigned a = 0; a < ARMERS; a++)
		pthread_join(th[a], NULL);
	ck_assert_int_eq(t_int(&r.bad), 0);
	ck_assert_int_eq(t_int(&r.late), 0);
	m_advance(r.k, 0);
	now = t_now(r.k);
	for (unsigned a = 0; a < ARMERS; a++)
		for (unsigned i = 0; i < RACE_ROUNDS; i++) {
			int calls = atomic_load(&r.calls[a][i]);

			ck_assert_int_eq(calls, r.deadline[a][i] <= now);
			fired += (uint64_t)calls;
		}
	m_identity(r.k, ARMERS * RACE_ROUNDS, fired, 0, 0);
	t_destroy(r.k, KAIROS_DRAIN_DROP, (int)(ARMERS * RACE_ROUNDS - fired));
}
END_TEST

struct adv_thread {
	struct kairos *k;
	atomic_int rc;
	atomic_int returned;
};

static void *adv_main(void *arg)
{
	struct adv_thread *a = arg;

	atomic_store(&a->rc, kairos_clock_advance(a->k, 10 * T_MS));
	atomic_store(&a->returned, 1);
	return NULL;
}

/* An advance waiting on a running callback ends when the service is destroyed. */
START_TEST(test_manual_destroy_during_advance)
{
	struct kairos *k = m_create(0, 0);
	struct adv_thread a = { .k = k };
	struct t_block b;
	pthread_t th;
	int rc;

	t_block_init(&b, 0, 0);
	(void)t_block_arm(k, &b, 10 * T_MS);
	ck_assert_int_eq(pthread_create(&th, NULL, adv_main, &a), 0);
	t_block_wait_started(&b);
	t_sleep_ms(20);
	ck_assert_int_eq(t_int(&a.returned), 0);
	atomic_store(&b.release, 1);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	pthread_join(th, NULL);
	rc = atomic_load(&a.rc);
	ck_assert_msg(rc == 0 || rc == -ESHUTDOWN, "advance: %d", rc);
	ck_assert_int_eq(t_int(&b.done), 1);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("manual");
	TCase *tc = tcase_create("manual");

	tcase_add_checked_fixture(tc, t_setup, NULL);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_manual_starts_at_zero_and_stands_still);
	tcase_add_test(tc, test_manual_errors);
	tcase_add_loop_test(tc, test_manual_no_timerfd_hour_at_once, 0, 2);
	tcase_add_loop_test(tc, test_manual_never_early_exact_ticks, 0, 4);
	tcase_add_loop_test(tc, test_manual_all_due_by_return, 0, 2);
	tcase_add_loop_test(tc, test_manual_waits_for_callbacks, 0, 2);
	tcase_add_loop_test(tc, test_manual_callback_arms_and_advances, 0, 2);
	tcase_add_loop_test(tc, test_manual_callback_arm_due_at_once_each_round, 0, 2);
	tcase_add_loop_test(tc, test_manual_cancel_and_reset, 0, 2);
	tcase_add_loop_test(tc, test_manual_slack, 0, 2);
	tcase_add_loop_test(tc, test_manual_fixed_rate_coalesces, 0, 2);
	tcase_add_loop_test(tc, test_manual_fixed_rate_status_saturates, 0, 2);
	tcase_add_loop_test(tc, test_manual_never_is_not_reached, 0, 2);
	tcase_add_loop_test(tc, test_manual_fixed_delay, 0, 2);
	tcase_add_loop_test(tc, test_manual_skip, 0, 2);
	tcase_add_loop_test(tc, test_manual_reset_periodic_off_tick, 0, 2);
	tcase_add_loop_test(tc, test_manual_queue, 0, 4);
	tcase_add_test(tc, test_manual_ring_queue);
	tcase_add_loop_test(tc, test_manual_keys, 0, 2);
	tcase_add_loop_test(tc, test_manual_concurrent_advances, 0, 2);
	tcase_add_test(tc, test_manual_destroy_during_advance);
	suite_add_tcase(s, tc);
	return t_main(s, "manual");
}
