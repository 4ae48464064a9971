/* SPDX-License-Identifier: MIT */
/*
 * kairos-stress - drives a kairos service the way a busy server does, from
 * several threads at once (more than the cores, on purpose), and checks
 * every timer's life against the contract of <kairos/kairos.h>: it ends
 * exactly once, never early, and never runs after a cancel said it would
 * not.  kairos-stress(1) describes the load, the report and the exit status.
 *
 * The load and the per-timer checks are in load.c, the key mix in keys.c,
 * the report in report.c; this file holds the options and the run.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stress.h"
#include "term.h"

/* Atomic: the handler may run on any thread of the tool (lock-free, so safe there). */
static atomic_int got_signal;

static void on_signal(int sig)
{
	atomic_store_explicit(&got_signal, sig, memory_order_relaxed);
}

/* ---- the command line ---------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
"usage: kairos-stress [options]   (--opt N or --opt=N)\n"
"\n"
"Stress a kairos timer service from several threads and check every timer's\n"
"life against the API contract: it ends exactly once, never fires early, never\n"
"runs after a successful cancel or after cancel_sync returned.  Exit status 0:\n"
"no violation; 1: a violation; 2: bad usage or setup; 128 + N: signal N (the\n"
"report of what ran comes first).  kairos-stress(1) says more.\n"
"\n"
"Load:\n"
"  -d, --duration=TIME     1ms..366 days; bare: s (default 20 s)\n"
"  -t, --threads=N         load threads, 1..4096 (default 4)\n"
"  -n, --timers=N          timer slots over all threads (default 100000)\n"
"  -m, --mix=SPEC          weights of reset, cancel, arm, sync, periodic and key\n"
"                          (default reset=60,cancel=25,arm=10,sync=3,periodic=2;\n"
"                          key=20 with --keys or --shared-keys); left out: 0\n"
"      --idle=MIN-MAX      idle timeout delays (default 50ms-500ms; bare: ms)\n"
"      --short=MIN-MAX     delays of short timers, that fire (default 1ms-20ms)\n"
"      --short-share=PCT   short one-shot arms, 0..100 (default 20)\n"
"      --period=MIN-MAX    periods of periodic timers (default 5ms-20ms)\n"
"      --periodics=N       periodic timers kept running (default timers/1000)\n"
"      --slow=PCT          short and periodic timers whose callback sleeps\n"
"                          --slow-time, 0..100 (default 5)\n"
"      --slow-time=TIME    0..10s; bare: us (default 100us)\n"
"      --fill=PCT          slots armed before the mix starts, 0..100 (default 50)\n"
"      --rate=OPS          calls/s over all threads (default 0: unlimited)\n"
"      --seed=S            0..2^64-1, decimal or 0x... (default: the clock)\n"
"      --queues=N          queues, each drained by a thread, 0..64 (default 2)\n"
"      --queue-share=PCT   arms for a queue, 0..100 (default 20)\n"
"      --queue-destroy=WHEN  mixed, before or after kairos_destroy (default\n"
"                          mixed)\n"
"      --keys=N            keys of each thread's own, 0..1000000 (default 0)\n"
"      --shared-keys=N     keys all threads race on, 0..1000000 (default 0)\n"
"      --max-late=TIME     later than this is a stall, 1ms..1 day (default 5 s)\n"
"\n"
"Service:\n"
"      --tick=TIME         wheel tick, 1us..1s; bare: ns (default 1ms)\n"
"  -s, --shards=N          0..256 (default 0: one per CPU)\n"
"      --workers=N         per shard, 0..1024 (default 0: the library's)\n"
"  -b, --backend=NAME      auto, uring or epoll (default auto: $KAIROS_BACKEND)\n"
"      --delivery=MODE     workers or inline (default workers)\n"
"      --huge-pages        KAIROS_HUGE_PAGES: records in 2 MiB regions\n"
"\n"
"Output:\n"
"      --interval=SECS     a progress line every SECS even when stderr is not a\n"
"                          terminal (default: a live line on a terminal only)\n"
"  -q, --quiet             no progress output\n"
"      --json=FILE         the report as JSON too ('-': stdout, JSON only)\n"
"      --plot=FILE.svg     lateness and calls/s drawn by gnuplot\n"
"  -h, --help, -V, --version\n");
}

enum {
	OPT_TICK = 256,
	OPT_WORKERS,
	OPT_DELIVERY,
	OPT_IDLE,
	OPT_SHORT,
	OPT_SHORT_SHARE,
	OPT_PERIOD,
	OPT_PERIODICS,
	OPT_SLOW,
	OPT_SLOW_TIME,
	OPT_FILL,
	OPT_RATE,
	OPT_SEED,
	OPT_INTERVAL,
	OPT_MAX_LATE,
	OPT_JSON,
	OPT_PLOT,
	OPT_QUEUES,
	OPT_QUEUE_SHARE,
	OPT_QUEUE_DESTROY,
	OPT_KEYS,
	OPT_SHARED_KEYS,
	OPT_HUGE_PAGES,
};

static const struct option long_opts[] = {
	{ "duration", required_argument, NULL, 'd' },
	{ "threads", required_argument, NULL, 't' },
	{ "timers", required_argument, NULL, 'n' },
	{ "mix", required_argument, NULL, 'm' },
	{ "tick", required_argument, NULL, OPT_TICK },
	{ "shards", required_argument, NULL, 's' },
	{ "workers", required_argument, NULL, OPT_WORKERS },
	{ "backend", required_argument, NULL, 'b' },
	{ "delivery", required_argument, NULL, OPT_DELIVERY },
	{ "huge-pages", no_argument, NULL, OPT_HUGE_PAGES },
	{ "idle", required_argument, NULL, OPT_IDLE },
	{ "short", required_argument, NULL, OPT_SHORT },
	{ "short-share", required_argument, NULL, OPT_SHORT_SHARE },
	{ "period", required_argument, NULL, OPT_PERIOD },
	{ "periodics", required_argument, NULL, OPT_PERIODICS },
	{ "slow", required_argument, NULL, OPT_SLOW },
	{ "slow-time", required_argument, NULL, OPT_SLOW_TIME },
	{ "fill", required_argument, NULL, OPT_FILL },
	{ "rate", required_argument, NULL, OPT_RATE },
	{ "seed", required_argument, NULL, OPT_SEED },
	{ "queues", required_argument, NULL, OPT_QUEUES },
	{ "queue-share", required_argument, NULL, OPT_QUEUE_SHARE },
	{ "queue-destroy", required_argument, NULL, OPT_QUEUE_DESTROY },
	{ "keys", required_argument, NULL, OPT_KEYS },
	{ "shared-keys", required_argument, NULL, OPT_SHARED_KEYS },
	{ "interval", required_argument, NULL, OPT_INTERVAL },
	{ "max-late", required_argument, NULL, OPT_MAX_LATE },
	{ "quiet", no_argument, NULL, 'q' },
	{ "json", required_argument, NULL, OPT_JSON },
	{ "plot", required_argument, NULL, OPT_PLOT },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

/* MIN-MAX, or one value for both; bare numbers are ms. */
static void parse_range(const char *opt, const char *s, uint64_t min, struct range_ns *r)
{
	char buf[64], *dash;

	snprintf(buf, sizeof(buf), "%s", s);
	dash = strchr(buf, '-');
	if (dash)
		*dash = 0;
	r->lo = opt_time(opt, buf, NS_PER_MS, min, 3600 * NS_PER_S);
	r->hi = dash ? opt_time(opt, dash + 1, NS_PER_MS, min, 3600 * NS_PER_S) : r->lo;
	if (r->lo > r->hi)
		opt_fail(opt, "'%s': MIN is above MAX", s);
}

/* NAME=WEIGHT,...: names left out weigh 0. */
static void parse_mix(const char *s, unsigned mix[M_N])
{
	char buf[256], *save = NULL, *tok;
	unsigned total = 0;

	snprintf(buf, sizeof(buf), "%s", s);
	memset(mix, 0, sizeof(unsigned) * M_N);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(tok, '=');
		unsigned m;

		if (!eq)
			opt_fail("--mix", "'%s' is not NAME=WEIGHT", tok);
		*eq = 0;
		m = opt_choice("--mix", tok, mix_names, M_N);
		mix[m] = (unsigned)opt_u64("--mix", eq + 1, 0, 1000000);
		total += mix[m];
	}
	if (!total)
		opt_fail("--mix", "'%s' weighs nothing", s);
}

static void defaults(struct stress_config *c)
{
	static const unsigned mix[M_N] = {
		[M_RESET] = 60, [M_CANCEL] = 25, [M_ARM] = 10, [M_SYNC] = 3, [M_PERIODIC] = 2,
	};

	memset(c, 0, sizeof(*c));
	c->duration_s = 20;
	c->threads = 4;
	c->timers = 100000;
	memcpy(c->mix, mix, sizeof(mix));
	c->tick_ns = NS_PER_MS;
	c->backend = KAIROS_BACKEND_AUTO;
	c->backend_name = "auto";
	c->delivery = KAIROS_DELIVER_WORKERS;
	c->idle = (struct range_ns){ 50 * NS_PER_MS, 500 * NS_PER_MS };
	c->shorts = (struct range_ns){ 1 * NS_PER_MS, 20 * NS_PER_MS };
	c->period = (struct range_ns){ 5 * NS_PER_MS, 20 * NS_PER_MS };
	c->life = (struct range_ns){ 100 * NS_PER_MS, 1000 * NS_PER_MS };
	c->short_pct = 20;
	c->slow_pct = 5;
	c->slow_ns = 100 * 1000;
	c->fill_pct = 50;
	c->periodics = UINT32_MAX;	/* timers / 1000 once timers is known */
	c->max_late_ns = 5 * NS_PER_S;
	c->seed = 0;
	c->queues = 2;
	c->queue_pct = 20;
	c->queue_end = QE_MIXED;
}

/* Returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, struct stress_config *c)
{
	static const char *const backends[] = { "auto", "uring", "epoll", "io_uring" };
	static const enum kairos_backend backend_ids[] = {
		KAIROS_BACKEND_AUTO, KAIROS_BACKEND_URING, KAIROS_BACKEND_EPOLL, KAIROS_BACKEND_URING,
	};
	static const char *const deliveries[] = { "workers", "inline" };
	bool seeded = false, mixed = false;
	int opt;

	defaults(c);
	while ((opt = opt_next(argc, argv, "d:t:n:m:s:b:qhV", long_opts)) != -1) {
		switch (opt) {
		case 'd':
			c->duration_s = (double)opt_time("--duration", optarg, NS_PER_S, NS_PER_MS,
							 366 * 86400 * NS_PER_S) / 1e9;
			break;
		case 't':
			c->threads = (unsigned)opt_u64("--threads", optarg, 1, 4096);
			break;
		case 'n':
			c->timers = (uint32_t)opt_u64("--timers", optarg, 1, UINT32_MAX - 1);
			break;
		case 'm':
			parse_mix(optarg, c->mix);
			mixed = true;
			break;
		case OPT_TICK:
			c->tick_ns = opt_time("--tick", optarg, 1, 1000, NS_PER_S);
			break;
		case 's':
			c->shards = (unsigned)opt_u64("--shards", optarg, 0, 256);
			break;
		case OPT_WORKERS:
			c->workers = (unsigned)opt_u64("--workers", optarg, 0, 1024);
			break;
		case 'b':
			c->backend = backend_ids[opt_choice("--backend", optarg, backends, 4)];
			c->backend_name = optarg;
			break;
		case OPT_DELIVERY:
			c->delivery = opt_choice("--delivery", optarg, deliveries, 2) ?
				      KAIROS_DELIVER_INLINE : KAIROS_DELIVER_WORKERS;
			break;
		case OPT_HUGE_PAGES:
			c->huge_pages = true;
			break;
		case OPT_IDLE:
			parse_range("--idle", optarg, 0, &c->idle);
			break;
		case OPT_SHORT:
			parse_range("--short", optarg, 0, &c->shorts);
			break;
		case OPT_PERIOD:
			parse_range("--period", optarg, 1, &c->period);
			break;
		case OPT_SHORT_SHARE:
			c->short_pct = (unsigned)opt_u64("--short-share", optarg, 0, 100);
			break;
		case OPT_PERIODICS:
			c->periodics = (uint32_t)opt_u64("--periodics", optarg, 0, UINT32_MAX - 1);
			break;
		case OPT_SLOW:
			c->slow_pct = (unsigned)opt_u64("--slow", optarg, 0, 100);
			break;
		case OPT_SLOW_TIME:
			c->slow_ns = opt_time("--slow-time", optarg, 1000, 0, 10 * NS_PER_S);
			break;
		case OPT_FILL:
			c->fill_pct = (unsigned)opt_u64("--fill", optarg, 0, 100);
			break;
		case OPT_RATE:
			c->rate = opt_u64("--rate", optarg, 0, UINT64_C(1) << 40);
			break;
		case OPT_SEED:
			c->seed = opt_seed("--seed", optarg);
			seeded = true;
			break;
		case OPT_QUEUES:
			c->queues = (unsigned)opt_u64("--queues", optarg, 0, 64);
			break;
		case OPT_QUEUE_SHARE:
			c->queue_pct = (unsigned)opt_u64("--queue-share", optarg, 0, 100);
			break;
		case OPT_QUEUE_DESTROY:
			c->queue_end = (enum queue_end)opt_choice("--queue-destroy", optarg,
								  queue_end_names, 3);
			break;
		case OPT_KEYS:
			c->keys = (uint32_t)opt_u64("--keys", optarg, 0, 1000000);
			break;
		case OPT_SHARED_KEYS:
			c->shared_keys = (uint32_t)opt_u64("--shared-keys", optarg, 0, 1000000);
			break;
		case OPT_INTERVAL:
			c->interval_s = (double)opt_time("--interval", optarg, NS_PER_S,
							 100 * NS_PER_MS, 86400 * NS_PER_S) / 1e9;
			break;
		case OPT_MAX_LATE:
			c->max_late_ns = opt_time("--max-late", optarg, NS_PER_S, NS_PER_MS,
						  86400 * NS_PER_S);
			break;
		case 'q':
			c->quiet = true;
			break;
		case OPT_JSON:
			c->json_path = optarg;
			break;
		case OPT_PLOT:
			c->plot_path = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("kairos-stress %s\n", KAIROS_STRESS_VERSION);
			return 0;
		}
	}
	if (c->timers < c->threads)
		opt_fail("--timers", "%" PRIu32 " is fewer than --threads (%u)", c->timers,
			 c->threads);
	if ((c->keys || c->shared_keys) && !c->mix[M_KEY]) {
		if (mixed)
			opt_fail("--mix", "--keys and --shared-keys need key=W");
		c->mix[M_KEY] = 20;
	}
	if (c->mix[M_KEY] && !c->keys && !c->shared_keys)
		opt_fail("--mix", "key=W needs --keys or --shared-keys");
	if ((uint64_t)c->keys * c->threads + c->shared_keys > UINT32_MAX - 1)
		opt_fail("--keys", "too many keys: --keys * --threads + --shared-keys is over 2^32-2");
	if (c->periodics == UINT32_MAX)
		c->periodics = c->timers / 1000;
	if (c->periodics > c->timers / 2)
		c->periodics = c->timers / 2;
	if (!seeded)
		c->seed = opt_seed_clock();
	/* Outputs are opened now: a path that cannot be written fails before the run. */
	if (c->json_path)
		c->json_f = opt_open_out("--json", c->json_path);
	if (c->plot_path) {
		FILE *f = opt_open_out("--plot", c->plot_path);

		if (f == stdout)
			opt_fail("--plot", "'-': gnuplot writes a file, not stdout");
		fclose(f);
	}
	return -1;
}

/* ---- progress --------------------------------------------------------------- */

struct progress {
	bool tty;
	uint64_t t0, last_t, last_ops;
	uint64_t sample_t, sample_ops[A_N], sample_cb, sample_wakeups, sample_late;
	struct lsnap *snap;	/* three: all, one-shot, periodic */
};

static uint64_t callbacks_now(void)
{
	uint64_t o, p;

	cb_sum(&o, &p, NULL, NULL);
	return o + p;
}

/* One sample into the series: the counters since the last one. */
static void take_sample(struct progress *p, uint64_t now)
{
	struct kairos_stats st = { 0 };
	uint64_t ops[A_N], cb = callbacks_now(), late = 0;
	struct sample *s;

	if (S.nsamples == S.samples_cap) {
		size_t cap = S.samples_cap ? S.samples_cap * 2 : 64;
		struct sample *n = realloc(S.samples, cap * sizeof(*n));

		if (!n)
			return;
		S.samples = n;
		S.samples_cap = cap;
	}
	ops_sum(ops, NULL, NULL);
	for (unsigned i = 0; i < S.cfg.threads; i++)
		late += atomic_load_explicit(&S.th[i].late_pending, memory_order_relaxed);
	kairos_stats(S.k, &st);
	s = &S.samples[S.nsamples++];
	s->late_pending = late - p->sample_late;
	p->sample_late = late;
	s->t = (double)(now - p->t0) / 1e9;
	s->dt = (double)(now - p->sample_t) / 1e9;
	for (unsigned a = 0; a < A_N; a++) {
		s->ops[a] = ops[a] - p->sample_ops[a];
		p->sample_ops[a] = ops[a];
	}
	s->callbacks = cb - p->sample_cb;
	s->wakeups = st.wakeups - p->sample_wakeups;
	s->pending = st.pending;
	s->rss_kb = rss_kb("VmRSS:");
	p->sample_cb = cb;
	p->sample_wakeups = st.wakeups;
	p->sample_t = now;
}

static void progress_line(struct progress *p, uint64_t now)
{
	struct kairos_stats st = { 0 };
	uint64_t ops[A_N], total, nviol = violations_total();
	double dt = (double)(now - p->last_t) / 1e9;
	char f[6][40], rate[16], pend[16], fired[16], p99[24];
	const char *fields[6];

	ops_sum(ops, NULL, NULL);
	total = ops_total(ops);
	kairos_stats(S.k, &st);
	late_snapshot(&p->snap[0], &p->snap[1], &p->snap[2]);
	fmt_count(rate, sizeof(rate), dt > 0 ? (double)(total - p->last_ops) / dt : 0);
	fmt_count(pend, sizeof(pend), (double)st.pending);
	fmt_count(fired, sizeof(fired), (double)callbacks_now());
	if (p->snap[0].n)
		fmt_ns(p99, sizeof(p99), lsnap_pct(&p->snap[0], 0.99));
	else
		snprintf(p99, sizeof(p99), "-");
	p->last_t = now;
	p->last_ops = total;
	/* In order of importance: what does not fit the terminal is left out. */
	snprintf(f[0], sizeof(f[0]), "[%.1f/%.0f s]", (double)(now - p->t0) / 1e9,
		 S.cfg.duration_s);
	snprintf(f[1], sizeof(f[1]), "violations %" PRIu64, nviol);
	snprintf(f[2], sizeof(f[2]), "%s calls/s", rate);
	snprintf(f[3], sizeof(f[3]), "late p99 %s", p99);
	snprintf(f[4], sizeof(f[4]), "pending %s", pend);
	snprintf(f[5], sizeof(f[5]), "fired %s", fired);
	for (unsigned i = 0; i < 6; i++)
		fields[i] = f[i];
	if (p->tty) {
		term_progress(stderr, fields, 6);
		return;
	}
	fprintf(stderr, "kairos-stress:");
	for (unsigned i = 0; i < 6; i++)
		fprintf(stderr, " %s%s", f[i], i < 5 ? "," : "\n");
	fflush(stderr);
}

/* Runs the load for the configured time (or until a signal); returns its length in ns. */
static uint64_t run_load(void)
{
	struct progress p = { .tty = isatty(STDERR_FILENO) && !S.cfg.quiet };
	/* Plain lines, when stderr is not a terminal, only when --interval asks. */
	bool lines = !S.cfg.quiet && (p.tty || S.cfg.interval_s > 0);
	uint64_t end, next_sample, next_line, line_ns, now;
	int rc;

	p.snap = malloc(3 * sizeof(*p.snap));
	if (!p.snap) {
		fprintf(stderr, "kairos-stress: out of memory\n");
		exit(2);
	}
	p.t0 = p.last_t = p.sample_t = now_ns();
	end = p.t0 + (uint64_t)(S.cfg.duration_s * 1e9);
	line_ns = p.tty ? 250 * NS_PER_MS : (uint64_t)(S.cfg.interval_s * 1e9);
	next_sample = p.t0 + NS_PER_S;
	next_line = p.t0 + line_ns;
	/* The drainers first: the fill arms for their queues. */
	for (unsigned i = 0; i < S.cfg.queues; i++) {
		rc = pthread_create(&S.qd[i].thread, NULL, drain_main, &S.qd[i]);
		if (rc) {
			fprintf(stderr, "kairos-stress: pthread_create: %s\n", strerror(rc));
			exit(2);
		}
		S.qd[i].started = true;
	}
	for (unsigned i = 0; i < S.cfg.threads; i++) {
		rc = pthread_create(&S.th[i].thread, NULL, load_main, &S.th[i]);
		if (rc) {
			fprintf(stderr, "kairos-stress: pthread_create: %s\n", strerror(rc));
			exit(2);
		}
	}
	for (;;) {
		uint64_t wake;

		now = now_ns();
		if (now >= end || atomic_load_explicit(&got_signal, memory_order_relaxed))
			break;
		if (now >= next_sample) {
			take_sample(&p, now);
			next_sample += NS_PER_S;
		}
		if (lines && now >= next_line) {
			progress_line(&p, now);
			next_line += line_ns;
		}
		wake = next_sample < next_line || !lines ? next_sample : next_line;
		if (wake > end)
			wake = end;
		if (wake > now)
			sleep_ns(wake - now > 50 * NS_PER_MS ? 50 * NS_PER_MS : wake - now);
	}
	atomic_store_explicit(&S.stop, 1, memory_order_relaxed);
	for (unsigned i = 0; i < S.cfg.threads; i++)
		pthread_join(S.th[i].thread, NULL);
	/* No owner waits on them any more: the drainers wind down (see drain_main()). */
	for (unsigned i = 0; i < S.cfg.queues; i++)
		atomic_store_explicit(&S.qd[i].wind_down, 1, memory_order_release);
	now = now_ns();
	/* The last, partial second, unless it is too short to mean anything. */
	if (now - p.sample_t > 100 * NS_PER_MS || !S.nsamples)
		take_sample(&p, now);
	if (p.tty)
		term_progress_clear(stderr);
	else if (lines)
		progress_line(&p, now);
	if (atomic_load_explicit(&got_signal, memory_order_relaxed))
		S.interrupted = true;
	free(p.snap);
	return now - p.t0;
}

/* ---- after destroy: the API must answer -ESHUTDOWN ------------------------- */

static void never(void *arg, kairos_id id, int status)
{
	(void)arg;
	violation(V_API, "callback of timer %#" PRIx64 " armed after kairos_destroy ran"
		  " (status %d)", id, status);
}

static void expect_shutdown(const char *call, int rc)
{
	if (rc != -ESHUTDOWN)
		violation(V_API, "%s after kairos_destroy returned %d (%s), not -ESHUTDOWN", call,
			  rc, strerror(rc < 0 ? -rc : rc));
}

/* A queue that kairos_destroy() left alive (destroyed after it), or NULL. */
static struct kairos_queue *queue_alive(void)
{
	for (unsigned i = 0; i < S.cfg.queues; i++)
		if (!S.qd[i].destroy_first)
			return S.qd[i].q;
	return NULL;
}

static void check_after_destroy(void)
{
	kairos_id id = S.slots[0].id ? S.slots[0].id : 1, out = 0;
	struct kairos_queue *q = queue_alive(), *nq = NULL;
	struct kairos_expiry e;
	const char *name;
	uint64_t t;

	expect_shutdown("kairos_arm", kairos_arm(S.k, NS_PER_MS, never, NULL, &out));
	expect_shutdown("kairos_arm_at", kairos_arm_at(S.k, 0, never, NULL, &out));
	expect_shutdown("kairos_arm_every", kairos_arm_every(S.k, NS_PER_MS, never, NULL, &out));
	expect_shutdown("kairos_reset", kairos_reset(S.k, id, NS_PER_MS));
	expect_shutdown("kairos_cancel", kairos_cancel(S.k, id));
	expect_shutdown("kairos_cancel_sync", kairos_cancel_sync(S.k, id));
	expect_shutdown("kairos_now", kairos_now(S.k, &t));
	expect_shutdown("kairos_backend_info", kairos_backend_info(S.k, 0, &name, NULL));
	expect_shutdown("kairos_clock_info", kairos_clock_info(S.k, &name, NULL));
	expect_shutdown("kairos_destroy (a second time)", kairos_destroy(S.k, KAIROS_DRAIN_NOTIFY));
	if (S.cfg.keys || S.cfg.shared_keys) {
		unsigned char kb[KAIROS_KEY_MAX];
		struct kairos_timer_opts o = { .key = kb, .flags = KAIROS_KEY_REPLACE };

		key_bytes(0, kb, &o.key_len);
		expect_shutdown("kairos_arm_opts (with a key)",
				kairos_arm_opts(S.k, NS_PER_MS, &o, never, NULL, &out));
		expect_shutdown("kairos_key_reset", kairos_key_reset(S.k, kb, o.key_len, NS_PER_MS));
		expect_shutdown("kairos_key_cancel", kairos_key_cancel(S.k, kb, o.key_len));
		expect_shutdown("kairos_key_find", kairos_key_find(S.k, kb, o.key_len, &out));
	}
	expect_shutdown("kairos_queue_create", kairos_queue_create(S.k, &nq));
	if (nq)
		kairos_queue_destroy(nq);
	if (q) {
		struct kairos_timer_opts o = { .queue = q };

		expect_shutdown("kairos_arm_opts (for a queue)",
				kairos_arm_opts(S.k, NS_PER_MS, &o, never, NULL, &out));
		expect_shutdown("kairos_queue_run", kairos_queue_run(q, 1));
		expect_shutdown("kairos_queue_take", kairos_queue_take(q, &e, 1, 0));
	}
}

/*
 * Destroys the queues destroyed @first (before kairos_destroy()) or after
 * it, once their drainers have returned.  Before, each returns how many
 * entries waited; after, kairos_destroy() has drained every one: 0.
 */
static void queues_end(bool first)
{
	bool waited = false;

	for (unsigned i = 0; i < S.cfg.queues; i++) {
		struct qdrainer *d = &S.qd[i];

		if (d->destroy_first != first)
			continue;
		if (d->started)
			pthread_join(d->thread, NULL);
		d->started = false;
		/*
		 * A loop thread that has gone: its queue fills for a while
		 * (short timers, periodic ones), and its destroy ends that.
		 */
		if (first && !waited) {
			sleep_ns(30 * NS_PER_MS);
			waited = true;
		}
		d->destroy_rc = kairos_queue_destroy(d->q);
		if (d->destroy_rc < 0)
			violation(V_QUEUE, "kairos_queue_destroy of queue %u returned %d (%s)", i,
				  d->destroy_rc, strerror(-d->destroy_rc));
		else if (!first && d->destroy_rc)
			violation(V_QUEUE, "kairos_queue_destroy of queue %u after kairos_destroy"
				  " returned %d: kairos_destroy ends every entry", i,
				  d->destroy_rc);
	}
}

/* Joins the drainers of the queues destroyed after kairos_destroy(). */
static void queues_join(void)
{
	for (unsigned i = 0; i < S.cfg.queues; i++) {
		if (S.qd[i].started && !S.qd[i].destroy_first) {
			pthread_join(S.qd[i].thread, NULL);
			S.qd[i].started = false;
		}
	}
}

/* A start that failed: the queues made so far, then the service. */
static void queues_abandon(void)
{
	for (unsigned i = 0; S.qd && i < S.cfg.queues; i++)
		if (S.qd[i].q)
			kairos_queue_destroy(S.qd[i].q);
	free(S.qd);
	S.qd = NULL;
}

/*
 * The run's first line on stderr: what it will do, in fields that wrap
 * between them at the terminal's width (a field that is 0 is left out).
 */
static void start_line(const char *seed)
{
	char f[8][64];
	unsigned n = 0, col, width = term_columns(STDERR_FILENO);

	snprintf(f[n++], sizeof(f[0]), "%.1f s", S.cfg.duration_s);
	snprintf(f[n++], sizeof(f[0]), "%u threads", S.cfg.threads);
	snprintf(f[n++], sizeof(f[0]), "%" PRIu32 " timers", S.cfg.timers);
	snprintf(f[n++], sizeof(f[0]), "%u shards (%s)", S.nshards,
		 S.nshards ? S.backends[0].name : "?");
	if (S.cfg.queues)
		snprintf(f[n++], sizeof(f[0]), "%u queues", S.cfg.queues);
	if (S.cfg.keys)
		snprintf(f[n++], sizeof(f[0]), "%" PRIu32 " own keys per thread", S.cfg.keys);
	if (S.cfg.shared_keys)
		snprintf(f[n++], sizeof(f[0]), "%" PRIu32 " shared keys", S.cfg.shared_keys);
	snprintf(f[n++], sizeof(f[0]), "seed %s", seed);
	col = (unsigned)fprintf(stderr, "kairos-stress:");
	for (unsigned i = 0; i < n; i++) {
		unsigned len = (unsigned)strlen(f[i]) + (i + 1 < n);	/* and its comma */

		if (col + 1 + len > width && col > 2) {
			fputs("\n ", stderr);
			col = 1;
		}
		col += (unsigned)fprintf(stderr, " %s%s", f[i], i + 1 < n ? "," : "");
	}
	fputc('\n', stderr);
}

static int start_service(void)
{
	struct kairos_config kc;
	struct kairos_stats st;
	const char *name, *why;
	int rc;

	kairos_config_default(&kc);
	if (S.cfg.shards)
		kc.shards = S.cfg.shards;
	if (S.cfg.workers)
		kc.workers = S.cfg.workers;
	kc.tick_ns = S.cfg.tick_ns;
	kc.backend = S.cfg.backend;
	kc.delivery = S.cfg.delivery;
	if (S.cfg.huge_pages)
		kc.flags |= KAIROS_HUGE_PAGES;
	S.clock = kc.clock;
	rc = kairos_create(&kc, &S.k);
	if (rc) {
		fprintf(stderr, "kairos-stress: kairos_create: %s\n", strerror(-rc));
		return rc;
	}
	rc = kairos_stats(S.k, &st);
	if (rc) {
		fprintf(stderr, "kairos-stress: kairos_stats: %s\n", strerror(-rc));
		return rc;
	}
	S.nshards = st.shards;
	S.backends = calloc(S.nshards, sizeof(*S.backends));
	if (!S.backends)
		return -ENOMEM;
	for (unsigned i = 0; i < S.nshards; i++) {
		rc = kairos_backend_info(S.k, i, &name, &why);
		if (rc || !name || !why) {
			violation(V_API, "kairos_backend_info(shard %u) returned %d", i, rc);
			continue;
		}
		snprintf(S.backends[i].name, sizeof(S.backends[i].name), "%s", name);
		snprintf(S.backends[i].why, sizeof(S.backends[i].why), "%s", why);
	}
	rc = kairos_clock_info(S.k, &name, &why);
	if (rc || !name || !why) {
		violation(V_API, "kairos_clock_info returned %d", rc);
	} else {
		snprintf(S.slack_clock.name, sizeof(S.slack_clock.name), "%s", name);
		snprintf(S.slack_clock.why, sizeof(S.slack_clock.why), "%s", why);
	}
	rc = kairos_backend_info(S.k, S.nshards, &name, &why);
	if (rc != -EINVAL)
		violation(V_API, "kairos_backend_info(shard %u of %u) returned %d, not -EINVAL",
			  S.nshards, S.nshards, rc);
	return 0;
}

int main(int argc, char **argv)
{
	/* A second signal ends the process at once. */
	struct sigaction sa = { .sa_handler = on_signal, .sa_flags = SA_RESETHAND };
	char seed[19];
	uint64_t t, nviol;
	int rc;

	opt_prog = "kairos-stress";
	rc = parse_args(argc, argv, &S.cfg);
	if (rc >= 0)
		return rc;
	/* --json - takes stdout: the report goes to stderr then. */
	FILE *out = S.cfg.json_path && !strcmp(S.cfg.json_path, "-") ? stderr : stdout;

	S.rss_start_kb = rss_kb("VmRSS:");
	if (start_service())
		return 2;
	if (load_setup()) {
		fprintf(stderr, "kairos-stress: out of memory for %" PRIu32 " slots\n", S.cfg.timers);
		kairos_destroy(S.k, KAIROS_DRAIN_DROP);
		return 2;
	}
	rc = queues_setup();
	if (rc) {
		fprintf(stderr, "kairos-stress: kairos_queue_create: %s\n", strerror(-rc));
		queues_abandon();
		kairos_destroy(S.k, KAIROS_DRAIN_DROP);
		return 2;
	}
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	opt_seed_str(seed, S.cfg.seed);
	if (!S.cfg.quiet)
		start_line(seed);

	S.elapsed_s = (double)run_load() / 1e9;
	for (unsigned i = 0; i < S.cfg.threads; i++)
		S.live_tool_pending += S.th[i].nlive + S.th[i].nper;
	kairos_stats(S.k, &S.live);
	S.rss_load_kb = rss_kb("VmRSS:");
	{
		/* The counter clock may have been turned off during the run. */
		const char *name, *why;

		if (kairos_clock_info(S.k, &name, &why) == 0 && name && why) {
			snprintf(S.slack_clock_end.name, sizeof(S.slack_clock_end.name), "%s", name);
			snprintf(S.slack_clock_end.why, sizeof(S.slack_clock_end.why), "%s", why);
		}
	}

	/* What waits in the queues destroyed first ends unrun, counted as drained. */
	queues_end(true);
	/*
	 * Every timer still pending is drained now, its callback called with
	 * -ECANCELED, while the other queues' drainers still run and take.
	 */
	t = now_ns();
	S.destroy_start = t;
	atomic_store_explicit(&S.destroying, 1, memory_order_release);
	S.destroy_rc = kairos_destroy(S.k, KAIROS_DRAIN_NOTIFY);
	S.destroy_ns = now_ns() - t;
	if (S.destroy_rc < 0)
		violation(V_API, "kairos_destroy returned %d (%s)", S.destroy_rc,
			  strerror(-S.destroy_rc));
	S.fin_rc = kairos_stats(S.k, &S.fin);
	queues_join();
	check_after_destroy();
	queues_end(false);
	load_final_sweep();
	crosscheck();
	check_stalls();
	S.rss_end_kb = rss_kb("VmRSS:");
	/* VmHWM lags the per-thread RSS counters a little: keep the largest seen. */
	S.hwm_kb = rss_kb("VmHWM:");
	if (S.rss_load_kb > S.hwm_kb)
		S.hwm_kb = S.rss_load_kb;
	for (size_t i = 0; i < S.nsamples; i++)
		if (S.samples[i].rss_kb > S.hwm_kb)
			S.hwm_kb = S.samples[i].rss_kb;

	report_text(out);
	fflush(out);
	rc = 0;
	if (S.cfg.json_f) {
		int jr = report_json(S.cfg.json_f);

		if (jr) {
			fprintf(stderr, "kairos-stress: --json %s: %s\n", S.cfg.json_path, strerror(-jr));
			rc = 2;
		}
	}
	if (S.cfg.plot_path && report_plot(S.cfg.plot_path))
		rc = 2;
	nviol = violations_total();
	if (nviol)
		return 1;
	/* What ran was checked and reported, but it was not the run asked for. */
	if (S.interrupted) {
		int sig = atomic_load_explicit(&got_signal, memory_order_relaxed);

		fprintf(stderr, "kairos-stress: interrupted by signal %d\n", sig);
		return 128 + sig;
	}
	return rc;
}
