/* SPDX-License-Identifier: MIT */
/*
 * backends.c - what each backend must do alike: backend_info says which and why,
 * the epoll backend forced, tiny io_uring rings under bursts.
 *
 * Real clock, shared 2-core machine: lower bounds are strict, upper bounds
 * generous, and nothing asserts speed.  meson runs this program twice: with
 * the backend the probe picks and with KAIROS_BACKEND=epoll.
 */
#include <limits.h>
#include <pthread.h>
#include <sys/types.h>
#include <sys/wait.h>

#include "t_util.h"

/* ------------------------------------------------------------------ */
/* Backends                                                            */

START_TEST(test_backends_backend_info)
{
	const char *env = getenv("KAIROS_BACKEND");
	struct kairos_config c = t_cfg(2, 1);
	struct kairos_stats s;
	struct kairos *k = t_create(NULL);

	ck_assert_int_eq(kairos_stats(k, &s), 0);
	for (unsigned i = 0; i < s.shards; i++) {
		const char *name = NULL, *why = NULL;

		ck_assert_int_eq(kairos_backend_info(k, i, &name, &why), 0);
		ck_assert_ptr_nonnull(name);
		ck_assert_ptr_nonnull(why);
		ck_assert_msg(!strcmp(name, "io_uring") || !strcmp(name, "epoll"), "backend \"%s\"",
			      name);
		ck_assert_msg(why[0] != '\0', "shard %u: no reason given", i);
		/* The environment overrides AUTO. */
		if (env && !strcmp(env, "epoll"))
			ck_assert_str_eq(name, "epoll");
		if (env && !strcmp(env, "uring"))
			ck_assert_str_eq(name, "io_uring");
		/* Both outputs are optional. */
		ck_assert_int_eq(kairos_backend_info(k, i, NULL, NULL), 0);
		ck_assert_int_eq(kairos_backend_info(k, i, &name, NULL), 0);
		ck_assert_int_eq(kairos_backend_info(k, i, NULL, &why), 0);
	}
	ck_assert_int_eq(kairos_backend_info(k, s.shards, NULL, NULL), -EINVAL);
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);

	/* Forced by the configuration. */
	c.backend = KAIROS_BACKEND_EPOLL;
	k = t_create(&c);
	for (unsigned i = 0; i < 2; i++) {
		const char *name = NULL, *why = NULL;

		ck_assert_int_eq(kairos_backend_info(k, i, &name, &why), 0);
		ck_assert_str_eq(name, "epoll");
		ck_assert(why && why[0]);
	}
	t_setup();
	t_check_identity(k, &tt);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
}
END_TEST

START_TEST(test_backends_epoll_forced_fires)
{
	enum { N = 500 };
	struct kairos_config c = t_cfg(2, 2);
	struct t_timer *tm = calloc(N, sizeof(*tm));
	uint64_t seed = t_seed(9);
	struct kairos *k;

	ck_assert_ptr_nonnull(tm);
	c.backend = KAIROS_BACKEND_EPOLL;
	k = t_create(&c);
	for (int i = 0; i < N; i++)
		ck_assert_int_eq(t_arm(k, &tt, &tm[i], t_rand_below(&seed, 20 * T_MS)), 0);
	for (int i = 0; i < N; i += 5)
		t_cancel(k, &tt, &tm[i]);
	t_wait_fired(t_u64(&tt.armed) - t_u64(&tt.cancelled));
	t_check_calls(&tt, T_LATE);
	ck_assert_uint_eq(t_check_identity(k, &tt).pending, 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	free(tm);
}
END_TEST

#define BURST_THREADS	4
#define BURST_PER	1500

struct t_burst {
	struct kairos *k;
	struct t_timer *tm;
	int idx;
};

static void *t_burst_thread(void *arg)
{
	struct t_burst *b = arg;
	uint64_t seed = t_seed(400 + (uint64_t)b->idx);

	for (int i = 0; i < BURST_PER; i++) {
		if (t_arm(b->k, &tt, &b->tm[i], t_rand_below(&seed, 2 * T_MS)) != 0)
			atomic_fetch_add(&tt.bad, 1);
		if (i % 7 == 0) {
			int rc = t_cancel(b->k, &tt, &b->tm[i]);

			if (rc != 0 && rc != -ENOENT && rc != -EBUSY)
				atomic_fetch_add(&tt.bad, 1);
		}
	}
	return NULL;
}

START_TEST(test_backends_tiny_ring_burst)
{
	struct kairos_config c = t_cfg(2, 2);
	struct t_timer *tm = calloc(BURST_THREADS * BURST_PER, sizeof(*tm));
	struct t_burst b[BURST_THREADS];
	pthread_t th[BURST_THREADS];
	struct kairos *k;

	ck_assert_ptr_nonnull(tm);
	/* Two submission entries against thousands of posts a millisecond. */
	c.ring_entries = 2;
	k = t_create(&c);
	for (int i = 0; i < BURST_THREADS; i++) {
		b[i] = (struct t_burst){ .k = k, .tm = &tm[i * BURST_PER], .idx = i };
		ck_assert_int_eq(pthread_create(&th[i], NULL, t_burst_thread, &b[i]), 0);
	}
	for (int i = 0; i < BURST_THREADS; i++)
		pthread_join(th[i], NULL);
	t_wait_fired(t_u64(&tt.armed) - t_u64(&tt.cancelled));
	for (int i = 0; i < BURST_THREADS * BURST_PER; i++)
		ck_assert_int_eq(tm[i].runs + tm[i].cancel_ok, 1);
	t_check_calls(&tt, T_LATE);
	ck_assert_uint_eq(t_check_identity(k, &tt).pending, 0);
	t_destroy(k, KAIROS_DRAIN_DROP, 0);
	free(tm);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("backends");
	TCase *tc = tcase_create("backends");

	tcase_add_checked_fixture(tc, t_setup, NULL);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_backends_backend_info);
	tcase_add_test(tc, test_backends_epoll_forced_fires);
	tcase_add_test(tc, test_backends_tiny_ring_burst);
	suite_add_tcase(s, tc);
	return t_main(s, "backends");
}
