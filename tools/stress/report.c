/* SPDX-License-Identifier: MIT */
/*
 * report.c - what kairos-stress says at the end: lateness histograms,
 * the cross-check of kairos_stats() against the tool's own tallies, the text
 * report, the --json file and the --plot SVG (drawn by gnuplot when it is
 * installed).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "plot.h"
#include "stress.h"

extern char **environ;

void late_snapshot(struct lsnap *all, struct lsnap *oneshot, struct lsnap *periodic)
{
	memset(oneshot, 0, sizeof(*oneshot));
	memset(periodic, 0, sizeof(*periodic));
	for (unsigned i = 0; i < S.cfg.threads; i++)
		lsnap_add(oneshot, &S.th[i].late);
	for (unsigned i = 0; i < CB_STRIPES; i++)
		lsnap_add(periodic, &S.cb[i].late);
	if (all) {
		memset(all, 0, sizeof(*all));
		lsnap_merge(all, oneshot);
		lsnap_merge(all, periodic);
	}
}

/* ---- formatting ---------------------------------------------------------- */

static void fmt3(char *buf, size_t len, double v, const char *unit)
{
	if (v < 10)
		snprintf(buf, len, "%.2f %s", v, unit);
	else if (v < 100)
		snprintf(buf, len, "%.1f %s", v, unit);
	else
		snprintf(buf, len, "%.0f %s", v, unit);
}

void fmt_ns(char *buf, size_t len, uint64_t ns)
{
	if (ns < 1000)
		snprintf(buf, len, "%" PRIu64 " ns", ns);
	else if (ns < 1000000)
		fmt3(buf, len, (double)ns / 1e3, "us");
	else if (ns < NS_PER_S)
		fmt3(buf, len, (double)ns / 1e6, "ms");
	else
		fmt3(buf, len, (double)ns / 1e9, "s");
}

void fmt_count(char *buf, size_t len, double v)
{
	if (v < 1e3)
		snprintf(buf, len, "%.0f", v);
	else if (v < 1e6)
		snprintf(buf, len, "%.3gk", v / 1e3);
	else if (v < 1e9)
		snprintf(buf, len, "%.3gM", v / 1e6);
	else
		snprintf(buf, len, "%.3gG", v / 1e9);
}

static double mib(uint64_t kb)
{
	return (double)kb / 1024.0;
}

/* A field of /proc/self/status in kB ("VmRSS:", "VmHWM:"), 0 if unreadable. */
uint64_t rss_kb(const char *field)
{
	FILE *f = fopen("/proc/self/status", "r");
	size_t flen = strlen(field);
	char line[256];
	uint64_t kb = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, field, flen)) {
			kb = strtoull(line + flen, NULL, 10);
			break;
		}
	fclose(f);
	return kb;
}

/* ---- the cross-check ------------------------------------------------------- */

struct xcheck xchecks[XCHECKS_MAX];
unsigned nxchecks;

static void xc(const char *what, uint64_t lib, uint64_t tool)
{
	struct xcheck *c;

	if (nxchecks == XCHECKS_MAX)
		return;
	c = &xchecks[nxchecks++];
	c->what = what;
	c->lib = lib;
	c->tool = tool;
	c->ok = lib == tool;
	if (!c->ok)
		violation(V_COUNTERS, "%s: %" PRIu64 " != %" PRIu64, what, lib, tool);
}

/*
 * crosscheck - compares the final kairos_stats() with what the tool saw.
 * Call after kairos_destroy() and the final sweep.
 */
void crosscheck(void)
{
	const struct kairos_stats *f = &S.fin;
	uint64_t oneshot, periodic, drained;
	struct tally t;

	uint64_t after = 0;

	tally_sum(&t);
	cb_sum(&oneshot, &periodic, NULL, &drained);
	for (unsigned i = 0; i < S.cfg.queues; i++) {
		const struct qdrainer *d = &S.qd[i];

		if (!d->destroy_first) {
			after += d->destroy_rc > 0 ? (uint64_t)d->destroy_rc : 0;
			continue;
		}
		/*
		 * What waited in it at its destroy is a part of what ended
		 * unrun; the rest expired into it afterwards.
		 */
		if (d->destroy_rc > 0 && (uint64_t)d->destroy_rc > d->unrun)
			violation(V_COUNTERS, "queue %u: kairos_queue_destroy ended %d waiting"
				  " entries, but only %" PRIu64 " of its timers ended unrun", i,
				  d->destroy_rc, d->unrun);
	}
	nxchecks = 0;
	keys_crosscheck();
	/* The tool's own books first: they do not depend on the library's. */
	xc("tool: arms == fired + cancelled + stopped + drained + ended unrun", t.arms,
	   t.fired + t.cancelled + t.pcancelled + t.pstopped + t.drained + t.qunrun +
	   t.kcancelled + t.kreplaced + t.kstolen);
	xc("tool: one-shot timers that ran == one-shot callbacks", t.fired, oneshot);
	xc("tool: timers found drained == drained callbacks", t.drained, drained);
	if (S.cfg.queues)
		xc("kairos_queue_destroy after kairos_destroy: entries ended == 0", after, 0);
	if (S.fin_rc) {
		violation(V_API, "kairos_stats after kairos_destroy returned %d (%s)", S.fin_rc,
			  strerror(-S.fin_rc));
		return;
	}
	xc("armed == arms that returned 0", f->armed, t.arms);
	xc("fired == one-shot callbacks", f->fired, oneshot);
	xc("cancelled == cancels that returned 0 + stopped + ended by key calls",
	   f->cancelled, t.cancelled + t.pcancelled + t.pstopped + t.kcancelled + t.kreplaced +
	   t.kstolen);
	xc("drained == drained callbacks + queue timers ended unrun", f->drained,
	   drained + t.qunrun);
	xc("drained == kairos_destroy() return + queue timers ended unrun", f->drained,
	   S.destroy_rc < 0 ? UINT64_MAX : (uint64_t)S.destroy_rc + t.qunrun);
	xc("periodic_runs == periodic callbacks", f->periodic_runs, periodic);
	xc("early == 0", f->early, 0);
	xc("pending == 0 after kairos_destroy", f->pending, 0);
	xc("rejected == 0 (no max_timers)", f->rejected, 0);
	xc("armed == fired + cancelled + drained + pending", f->armed,
	   f->fired + f->cancelled + f->drained + f->pending);
	xc("shards == shards created", f->shards, S.nshards);
}

/*
 * check_stalls - the longest stretch of samples in which no callback ran
 * while resets and cancels kept finding timers pending past their deadline:
 * the service stopped delivering.  A timer that is reset often never looks
 * overdue by much on its own, so this is judged over the whole service.
 */
void check_stalls(void)
{
	double run = 0;

	S.stall_s = 0;
	for (size_t i = 0; i < S.nsamples; i++) {
		const struct sample *s = &S.samples[i];

		if (!s->callbacks && s->late_pending) {
			run += s->dt;
			if (run > S.stall_s) {
				S.stall_s = run;
				S.stall_at = s->t;
			}
		} else {
			run = 0;
		}
	}
	if (S.stall_s * 1e9 >= (double)S.cfg.max_late_ns)
		violation(V_STALL, "no callback ran for %.1f s (until %.1f s into the load) while"
			  " resets and cancels found timers pending past their deadlines",
			  S.stall_s, S.stall_at);
}

/* ---- text report ------------------------------------------------------------ */

static uint64_t busy_returning(void)
{
	uint64_t n = 0;

	for (unsigned i = 0; i < S.cfg.threads; i++)
		n += S.th[i].rc_busy_returning;
	return n;
}

static const char *ok(bool good)
{
	return good ? "ok" : "VIOLATION";
}

static void print_pcts(FILE *f, const char *name, const struct lsnap *s)
{
	char p50[24], p90[24], p99[24], p999[24], max[24], mean[24];

	if (!s->n) {
		fprintf(f, "  %-9s none\n", name);
		return;
	}
	fmt_ns(p50, sizeof(p50), lsnap_pct(s, 0.50));
	fmt_ns(p90, sizeof(p90), lsnap_pct(s, 0.90));
	fmt_ns(p99, sizeof(p99), lsnap_pct(s, 0.99));
	fmt_ns(p999, sizeof(p999), lsnap_pct(s, 0.999));
	fmt_ns(max, sizeof(max), s->max);
	fmt_ns(mean, sizeof(mean), s->sum / s->n);
	fprintf(f, "  %-9s p50 %-9s p90 %-9s p99 %-9s p99.9 %-9s max %-9s mean %-9s (n %" PRIu64 ")\n",
		name, p50, p90, p99, p999, max, mean, s->n);
}

/* Octave rows of the histogram: row r holds [2^(r-1), 2^r) ns, row 0 holds 0. */
static unsigned row_of(unsigned b)
{
	uint64_t lo = lhist_lower(b);

	return lo ? 64u - (unsigned)__builtin_clzll(lo) : 0;
}

static void print_histogram(FILE *f, const struct lsnap *s)
{
	uint64_t rows[65] = { 0 }, peak = 0, cum = 0;
	unsigned first = 65, last = 0;

	for (unsigned b = 0; b < LH_BUCKETS; b++) {
		unsigned r = row_of(b);

		if (!s->bucket[b])
			continue;
		rows[r] += s->bucket[b];
		if (r < first)
			first = r;
		if (r > last)
			last = r;
	}
	if (first > last)
		return;
	for (unsigned r = first; r <= last; r++)
		if (rows[r] > peak)
			peak = rows[r];
	fprintf(f, "  histogram (log buckets; %% of callbacks, cumulative %%):\n");
	for (unsigned r = first; r <= last; r++) {
		char lo[24], hi[24], bar[52];
		unsigned w = (unsigned)((rows[r] * 50 + peak - 1) / peak);

		cum += rows[r];
		fmt_ns(lo, sizeof(lo), r ? UINT64_C(1) << (r - 1) : 0);
		fmt_ns(hi, sizeof(hi), r < 64 ? UINT64_C(1) << r : UINT64_MAX);
		memset(bar, '#', w);
		bar[w] = 0;
		fprintf(f, "    %9s .. %-9s %12" PRIu64 " %6.2f%% %7.3f%%  %s\n", lo, hi, rows[r],
			100.0 * (double)rows[r] / (double)s->n, 100.0 * (double)cum / (double)s->n,
			bar);
	}
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Whole seconds only: the last, partial sample would drag the minimum down. */
static void print_series(FILE *f)
{
	uint64_t *v = malloc(sizeof(*v) * (S.nsamples + 1));
	size_t n = 0;
	char lo[16], med[16], hi[16];

	if (!v)
		return;
	for (size_t i = 0; i < S.nsamples; i++)
		if (S.samples[i].dt > 0.9)
			v[n++] = (uint64_t)((double)ops_total(S.samples[i].ops) / S.samples[i].dt);
	if (n) {
		qsort(v, n, sizeof(*v), cmp_u64);
		fmt_count(lo, sizeof(lo), (double)v[0]);
		fmt_count(med, sizeof(med), (double)v[n / 2]);
		fmt_count(hi, sizeof(hi), (double)v[n - 1]);
		fprintf(f, "  calls/s by second (%zu s): min %s, median %s, max %s\n", n, lo, med, hi);
	}
	free(v);
}

/*
 * Whether this program runs under a sanitizer, whose runtime's own memory
 * is in the RSS: TSan's grows through a run for reasons of its own (in
 * a 30 s run with 2 threads its anonymous maps grew by 170 MiB, while
 * the service held 8 chunks of records when looked at 20 s in), ASan
 * holds freed memory in its quarantine.
 */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define STRESS_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer) || __has_feature(address_sanitizer)
#define STRESS_SANITIZED 1
#endif
#endif
#ifndef STRESS_SANITIZED
#define STRESS_SANITIZED 0
#endif

/*
 * RSS over the second half of the run against the pending count: memory
 * that keeps growing while pending does not means ended timers' records are
 * not recycled as fast as timers end.  Not a contract violation, so a
 * warning only; not given under a sanitizer (above).
 */
static void print_trend(FILE *f)
{
	const struct sample *a, *b;
	double dt, mib_s;

	if (S.nsamples < 4)
		return;
	a = &S.samples[S.nsamples / 2 - 1];
	b = &S.samples[S.nsamples - 1];
	dt = b->t - a->t;
	if (dt <= 0)
		return;
	mib_s = (mib(b->rss_kb) - mib(a->rss_kb)) / dt;
	fprintf(f, "  second half: RSS %+.1f MiB/s (%.1f -> %.1f MiB), pending %" PRIu64 " -> %" PRIu64 "\n",
		mib_s, mib(a->rss_kb), mib(b->rss_kb), a->pending, b->pending);
	if (mib_s > 2.0 && b->pending <= a->pending + a->pending / 4 && STRESS_SANITIZED)
		fprintf(f, "  (RSS grows while pending timers do not; not judged: it holds the "
			"sanitizer's own memory)\n");
	else if (mib_s > 2.0 && b->pending <= a->pending + a->pending / 4)
		fprintf(f, "  WARNING: memory grows while pending timers do not: ended timers' records"
			" are recycled slower than timers end (the service is overloaded);"
			" kairos_arm fails with -ENOMEM once a shard holds its record limit\n");
}

/* The queues' part of the text report: what each drainer ran and took, and how each ended. */
static void print_queues(FILE *f, const struct tally *t)
{
	uint64_t ro = 0, rp = 0, to = 0, tp = 0, before = 0;
	char b1[32];

	if (!S.cfg.queues)
		return;
	fprintf(f, "\nqueues: %u, %u%% of arms (%" PRIu64 " timers armed for one), each drained"
		" by a thread with kairos_queue_run and kairos_queue_take\n", S.cfg.queues,
		S.cfg.queue_pct, t->arms_queue);
	for (unsigned i = 0; i < S.cfg.queues; i++) {
		const struct qdrainer *d = &S.qd[i];

		ro += d->run_oneshot;
		rp += d->run_periodic;
		to += d->take_oneshot;
		tp += d->take_periodic;
		if (d->destroy_first && d->destroy_rc > 0)
			before += (uint64_t)d->destroy_rc;
		fmt_ns(b1, sizeof(b1), d->paused_ns);
		fprintf(f, "  queue %u (shard %d): run %" PRIu64 " calls (%" PRIu64 " empty): %"
			PRIu64 " one-shot + %" PRIu64 " periodic callbacks; take %" PRIu64
			" calls (%" PRIu64 " empty): %" PRIu64 " one-shot + %" PRIu64
			" periodic entries\n", i, d->shard, d->run_calls, d->run_empty,
			d->run_oneshot, d->run_periodic, d->take_calls, d->take_empty,
			d->take_oneshot, d->take_periodic);
		fprintf(f, "    fd polled %" PRIu64 " times (%" PRIu64 " readable); paused %"
			PRIu64 " times (%s); drained by kairos_destroy %" PRIu64
			"; kairos_queue_destroy %s kairos_destroy returned %d", d->polls,
			d->polls_ready, d->pauses, b1, d->drained,
			d->destroy_first ? "before" : "after", d->destroy_rc);
		if (d->destroy_first)
			fprintf(f, "; %" PRIu64 " of its timers ended unrun", d->unrun);
		fprintf(f, "\n");
	}
	fprintf(f, "  delivered by queues: run %" PRIu64 " (one-shot %" PRIu64 ", periodic %"
		PRIu64 "), taken %" PRIu64 " (one-shot %" PRIu64 ", periodic %" PRIu64 ")\n",
		ro + rp, ro, rp, to + tp, to, tp);
	fprintf(f, "  ended unrun in a queue destroyed before kairos_destroy: %" PRIu64 " (%" PRIu64
		" waiting at its kairos_queue_destroy, the others expired into it after)\n",
		t->qunrun, before);
	fprintf(f, "  one-shot queue timers reset (0) over a tick past their deadline: %" PRIu64
		" (expired and waiting untaken: withdrawn; or pending on a shard behind)\n",
		t->qwithdrawn);
	fprintf(f, "  resets and cancels made while their queue's drainer was paused: %" PRIu64
		" (%" PRIu64 " on one-shot timers over a tick past their deadline); a one-shot"
		" timer that had not run must get 0\n", t->qpaused, t->qpaused_due);
	fprintf(f, "  waits for a drainer to check what a take handed out: %" PRIu64 "\n",
		t->qfences);
}

/* The shared keys' books, added up: what key calls ended, and what can have. */
static void skeys_sum(uint64_t *remove0, uint64_t *replaced, uint64_t *stolen, uint64_t *eexist)
{
	*remove0 = *replaced = *stolen = *eexist = 0;
	for (uint32_t g = 0; g < S.cfg.shared_keys; g++) {
		*remove0 += atomic_load(&S.skeys[g].remove0);
		*replaced += atomic_load(&S.skeys[g].replaced);
		*stolen += atomic_load(&S.skeys[g].stolen);
		*eexist += atomic_load(&S.skeys[g].eexist);
	}
}

static void kc_sum(struct kcounts *kc)
{
	memset(kc, 0, sizeof(*kc));
	for (unsigned i = 0; i < S.cfg.threads; i++)
		for (unsigned sh = 0; sh < 2; sh++)
			for (unsigned op = 0; op < K_NOPS; op++)
				for (unsigned r = 0; r < RC_N; r++)
					kc->rc[sh][op][r] += S.th[i].kc.rc[sh][op][r];
}

/* The keys' part of the text report: each key call's answers, and how keyed timers ended. */
static void print_keys(FILE *f, const struct tally *t)
{
	uint64_t rm, rp, st, ee;
	struct kcounts kc;

	if (!S.cfg.keys && !S.cfg.shared_keys)
		return;
	kc_sum(&kc);
	skeys_sum(&rm, &rp, &st, &ee);
	fprintf(f, "\nkeys: %" PRIu32 " own per thread, %" PRIu32 " shared by all threads; %"
		PRIu64 " keyed timers armed (%" PRIu64 " on shared keys), %" PRIu64 " of them ran\n",
		S.cfg.keys, S.cfg.shared_keys, t->karms, t->karms_shared, t->kfired);
	fprintf(f, "  %-20s %10s %10s %10s %10s %10s %8s\n", "call", "calls", "0", "-ENOENT",
		"-EBUSY", "-EEXIST", "other");
	for (unsigned sh = 0; sh < 2; sh++) {
		if (!(sh ? S.cfg.shared_keys : S.cfg.keys))
			continue;
		for (unsigned op = 0; op < K_NOPS; op++) {
			const uint64_t *r = kc.rc[sh][op];
			char name[32];

			snprintf(name, sizeof(name), "%s %s", sh ? "shared" : "own", key_op_names[op]);
			fprintf(f, "  %-20s %10" PRIu64 " %10" PRIu64 " %10" PRIu64 " %10" PRIu64
				" %10" PRIu64 " %8" PRIu64 "\n", name, r[RC_OK] + r[RC_ENOENT] +
				r[RC_EBUSY] + r[RC_EEXIST] + r[RC_OTHER], r[RC_OK], r[RC_ENOENT],
				r[RC_EBUSY], r[RC_EEXIST], r[RC_OTHER]);
		}
	}
	fprintf(f, "  own keys: removed (key_cancel 0) %" PRIu64 ", holders cancelled by a REPLACE"
		" set %" PRIu64 " (replaced while firing, so they ran: %" PRIu64 "); calls whose"
		" one answer was known (holder pending, not due): %" PRIu64 "\n", t->kcancelled,
		t->kreplaced, t->kreplaced_ran, t->kexact);
	if (S.cfg.shared_keys)
		fprintf(f, "  shared keys: %" PRIu64 " timers ended by key calls (found by their"
			" owners), within [key_cancel 0s %" PRIu64 ", + REPLACE sets %" PRIu64
			"] per key: %s; so REPLACE sets cancelled %" PRIu64 " holders; plain sets"
			" refused (-EEXIST) %" PRIu64 "; holders found before a set or remove"
			" checked not pending after it: %" PRIu64 "\n", st, rm, rp,
			st >= rm && st <= rm + rp ? "ok" : "VIOLATION", st >= rm ? st - rm : 0, ee,
			t->kprobes);
	fprintf(f, "  cancel_syncs that settled how a keyed timer ended: %" PRIu64 "; shared-key"
		" runs not in the lateness (a move may have pushed them later): %" PRIu64 "\n",
		t->ksettles, t->kunmeasured);
}

int report_text(FILE *f)
{
	const struct stress_config *c = &S.cfg;
	char seed[19];
	uint64_t totals[A_N] = { 0 }, rc[A_N][RC_N] = { { 0 } }, stale[A_N] = { 0 }, all = 0;
	uint64_t oneshot, periodic, periods, drained, nviol = violations_total();
	struct lsnap *la = malloc(3 * sizeof(*la)), *lo, *lp;
	double el = S.elapsed_s > 0 ? S.elapsed_s : 1e-9;
	char b1[32], b2[32], b3[32], b4[32];
	struct tally t;

	if (!la)
		return -ENOMEM;
	lo = la + 1;
	lp = la + 2;
	late_snapshot(la, lo, lp);
	tally_sum(&t);
	cb_sum(&oneshot, &periodic, &periods, &drained);
	ops_sum(totals, rc, stale);

	opt_seed_str(seed, c->seed);
	fprintf(f, "\nkairos-stress: %.1f s of load%s, %u threads, %" PRIu32 " timers, seed %s\n",
		S.elapsed_s, S.interrupted ? " (interrupted by a signal)" : "", c->threads, c->timers,
		seed);
	fmt_ns(b1, sizeof(b1), c->tick_ns);
	fprintf(f, "service: %u shards, %s delivery%s, tick %s, backend %s%s\n", S.nshards,
		c->delivery == KAIROS_DELIVER_INLINE ? "inline" : "worker",
		c->workers ? "" : " (2 workers per shard)", b1, c->backend_name,
		c->huge_pages ? ", huge pages" : "");
	for (unsigned i = 0; i < S.nshards && S.backends; i++)
		fprintf(f, "  shard %u: %s (%s)\n", i, S.backends[i].name, S.backends[i].why);
	if (S.slack_clock.name[0])
		fprintf(f, "  slack timers read: %s (%s)\n", S.slack_clock.name, S.slack_clock.why);
	if (S.slack_clock_end.name[0] && strcmp(S.slack_clock_end.name, S.slack_clock.name))
		fprintf(f, "  by the end of the load: %s (%s)\n", S.slack_clock_end.name,
			S.slack_clock_end.why);
	fprintf(f, "mix:");
	for (unsigned m = 0; m < M_N; m++)
		fprintf(f, " %s=%u", mix_names[m], c->mix[m]);
	fmt_ns(b1, sizeof(b1), c->idle.lo);
	fmt_ns(b2, sizeof(b2), c->idle.hi);
	fmt_ns(b3, sizeof(b3), c->shorts.lo);
	fmt_ns(b4, sizeof(b4), c->shorts.hi);
	fprintf(f, "; idle timeouts %s..%s, short timers %s..%s (%u%% of arms)", b1, b2, b3, b4,
		c->short_pct);
	fmt_ns(b1, sizeof(b1), c->period.lo);
	fmt_ns(b2, sizeof(b2), c->period.hi);
	fprintf(f, ", %" PRIu32 " periodic %s..%s", c->periodics, b1, b2);
	if (c->keys || c->shared_keys)
		fprintf(f, "; keys: %" PRIu32 " own per thread, %" PRIu32 " shared", c->keys,
			c->shared_keys);
	fprintf(f, "\n");

	fprintf(f, "\noperations %22s %10s %10s %10s %10s %10s %8s %11s\n", "calls", "per s", "0",
		"-ENOENT", "-EBUSY", "-EEXIST", "other", "(stale id)");
	for (unsigned a = 0; a < A_N; a++) {
		fmt_count(b1, sizeof(b1), (double)totals[a] / el);
		fprintf(f, "  %-20s %10" PRIu64 " %10s %10" PRIu64 " %10" PRIu64 " %10" PRIu64
			" %10" PRIu64 " %8" PRIu64 " %11" PRIu64 "\n", api_names[a], totals[a], b1,
			rc[a][RC_OK], rc[a][RC_ENOENT], rc[a][RC_EBUSY], rc[a][RC_EEXIST],
			rc[a][RC_OTHER], stale[a]);
		all += totals[a];
	}
	fmt_count(b1, sizeof(b1), (double)all / el);
	fprintf(f, "  %-20s %10" PRIu64 " %10s\n", "all", all, b1);
	print_series(f);

	fprintf(f, "\ntimers\n");
	fprintf(f, "  armed      %12" PRIu64 "  (one-shot %" PRIu64 ", periodic %" PRIu64 ")\n",
		t.arms, t.arms - t.arms_periodic, t.arms_periodic);
	fprintf(f, "  fired      %12" PRIu64 "  one-shot timers whose callback ran\n", t.fired);
	fprintf(f, "  cancelled  %12" PRIu64 "  one-shot %" PRIu64 " + periodic %" PRIu64
		" (cancel returned 0) + periodic stopped while running %" PRIu64,
		t.cancelled + t.pcancelled + t.pstopped + t.kcancelled + t.kreplaced + t.kstolen,
		t.cancelled, t.pcancelled, t.pstopped);
	if (c->keys || c->shared_keys)
		fprintf(f, " + own key removed %" PRIu64 " + own key replaced %" PRIu64
			" + shared key ended by key calls %" PRIu64, t.kcancelled, t.kreplaced,
			t.kstolen);
	fprintf(f, "\n");
	fmt_ns(b1, sizeof(b1), S.destroy_ns);
	fmt_ns(b2, sizeof(b2), t.overdue_max);
	fprintf(f, "  drained    %12" PRIu64 "  by kairos_destroy(KAIROS_DRAIN_NOTIFY), which took %s;"
		" %" PRIu64 " of them were already due (the most by %s)\n", t.drained, b1,
		t.overdue, b2);
	fmt_ns(b1, sizeof(b1), t.late_pending_max);
	fprintf(f, "  still pending over a tick after their deadline when a reset or cancel returned 0:"
		" %" PRIu64 " (by up to %s)\n", t.late_pending, b1);
	fprintf(f, "  longest delivery stall (no callback while timers were overdue): %.1f s\n",
		S.stall_s);
	fprintf(f, "  periodic timers reset %" PRIu64 " times (and %" PRIu64 " resets found one"
		" firing: -EBUSY)\n", t.preset, t.preset_busy);
	fprintf(f, "  periodic schedules checked between calls (next run == the one after the periods"
		" covered): %" PRIu64 " (%" PRIu64 " looks skipped: a call or a due run around them)\n",
		t.pscheds, t.pscheds_skipped);
	fprintf(f, "  cancel_sync of a one-shot whose slow callback was seen running: %" PRIu64
		" (each must return after the callback has)\n", t.syncs_running);
	fprintf(f, "  callbacks  one-shot %" PRIu64 ", periodic %" PRIu64 " (covering %" PRIu64
		" periods), drained %" PRIu64 "\n", oneshot, periodic, periods, drained);
	fprintf(f, "  calls on ended timers' ids: %" PRIu64 " (-EBUSY while a reaped callback was"
		" still returning: %" PRIu64 ")\n", t.stale, busy_returning());
	fprintf(f, "  per timer: %" PRIu64 " timers checked: runs + cancels + drains == 1, never early,"
		" nothing after a cancel: %s\n", t.checked,
		ok(!atomic_load(&viols[V_LOST].count) && !atomic_load(&viols[V_TWICE].count) &&
		   !atomic_load(&viols[V_EARLY].count) && !atomic_load(&viols[V_AFTER_CANCEL].count) &&
		   !atomic_load(&viols[V_AFTER_STOP].count) && !atomic_load(&viols[V_AFTER_END].count) &&
		   !atomic_load(&viols[V_KEY].count)));

	print_queues(f, &t);
	print_keys(f, &t);

	fprintf(f, "\nlateness: callback start - deadline (the clock read before the arm or last"
		" reset, plus the delay)\n");
	print_pcts(f, "all", la);
	print_pcts(f, "one-shot", lo);
	print_pcts(f, "periodic", lp);
	print_histogram(f, la);

	fprintf(f, "\nlibrary counters (kairos_stats after kairos_destroy)\n");
	if (!S.fin_rc) {
		const struct kairos_stats *k = &S.fin;

		fprintf(f, "  armed %" PRIu64 ", fired %" PRIu64 ", cancelled %" PRIu64 ", drained %" PRIu64
			", pending %" PRIu64 ", rejected %" PRIu64 ", periodic_runs %" PRIu64
			", early %" PRIu64 "\n", k->armed, k->fired, k->cancelled, k->drained,
			k->pending, k->rejected, k->periodic_runs, k->early);
		fmt_ns(b1, sizeof(b1), k->lateness_p50_ns);
		fmt_ns(b2, sizeof(b2), k->lateness_p99_ns);
		fmt_ns(b3, sizeof(b3), k->lateness_max_ns);
		fprintf(f, "  lateness (library's, from the tick-rounded deadline): p50 %s, p99 %s, max %s\n",
			b1, b2, b3);
		fmt_count(b1, sizeof(b1), (double)k->wakeups / el);
		fmt_count(b2, sizeof(b2), (double)k->timer_sets / el);
		fprintf(f, "  wake-ups %" PRIu64 " (%s/s), timer_sets %" PRIu64 " (%s/s)\n",
			k->wakeups, b1, k->timer_sets, b2);
	} else {
		fprintf(f, "  kairos_stats failed: %s\n", strerror(-S.fin_rc));
	}
	fprintf(f, "  at the end of the load: pending %" PRIu64 " (the tool's slots hold %" PRIu64 ")\n",
		S.live.pending, (uint64_t)0 + S.live_tool_pending);
	fprintf(f, "  cross-check:\n");
	for (unsigned i = 0; i < nxchecks; i++)
		fprintf(f, "    %-70s %12" PRIu64 " %s %-12" PRIu64 " %s\n", xchecks[i].what,
			xchecks[i].lib, xchecks[i].ok ? "==" : "!=", xchecks[i].tool,
			ok(xchecks[i].ok));

	fprintf(f, "\nmemory: RSS %.1f MiB at start, %.1f MiB at the end of the load, %.1f MiB after"
		" destroy; peak (VmHWM) %.1f MiB\n", mib(S.rss_start_kb), mib(S.rss_load_kb),
		mib(S.rss_end_kb), mib(S.hwm_kb));

	print_trend(f);

	fprintf(f, "\nviolations: %" PRIu64 "\n", nviol);
	for (unsigned v = 0; v < V_N; v++) {
		uint64_t n = atomic_load_explicit(&viols[v].count, memory_order_relaxed);

		if (!n)
			continue;
		fprintf(f, "  %s: %" PRIu64 "\n", viol_names[v], n);
		for (unsigned e = 0; e < VIOL_EXAMPLES && e < n; e++)
			fprintf(f, "    e.g. %s\n", viols[v].example[e]);
	}
	fprintf(f, "%s\n", nviol ? "FAIL" : "PASS");
	free(la);
	return 0;
}

/* ---- JSON ------------------------------------------------------------------ */

struct jw {
	FILE *f;
	int depth;
	bool comma[16];
};

static void jw_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

static void jw_sep(struct jw *w, const char *key)
{
	if (w->comma[w->depth])
		fputc(',', w->f);
	w->comma[w->depth] = true;
	fprintf(w->f, "\n%*s", 2 * w->depth, "");
	if (key) {
		jw_str(w->f, key);
		fputs(": ", w->f);
	}
}

static void jw_open(struct jw *w, const char *key, char ch)
{
	jw_sep(w, key);
	fputc(ch, w->f);
	w->comma[++w->depth] = false;
}

static void jw_close(struct jw *w, char ch)
{
	w->depth--;
	fprintf(w->f, "\n%*s%c", 2 * w->depth, "", ch);
}

static void jw_u64(struct jw *w, const char *key, uint64_t v)
{
	jw_sep(w, key);
	fprintf(w->f, "%" PRIu64, v);
}

static void jw_dbl(struct jw *w, const char *key, double v)
{
	jw_sep(w, key);
	if (isfinite(v))
		fprintf(w->f, "%.6g", v);
	else
		fputs("null", w->f);
}

static void jw_s(struct jw *w, const char *key, const char *v)
{
	jw_sep(w, key);
	jw_str(w->f, v);
}

static void jw_bool(struct jw *w, const char *key, bool v)
{
	jw_sep(w, key);
	fputs(v ? "true" : "false", w->f);
}

static void jw_range(struct jw *w, const char *key, const struct range_ns *r)
{
	jw_open(w, key, '[');
	jw_u64(w, NULL, r->lo);
	jw_u64(w, NULL, r->hi);
	jw_close(w, ']');
}

static void jw_late(struct jw *w, const char *key, const struct lsnap *s)
{
	jw_open(w, key, '{');
	jw_u64(w, "n", s->n);
	jw_u64(w, "p50", lsnap_pct(s, 0.50));
	jw_u64(w, "p90", lsnap_pct(s, 0.90));
	jw_u64(w, "p99", lsnap_pct(s, 0.99));
	jw_u64(w, "p999", lsnap_pct(s, 0.999));
	jw_u64(w, "max", s->max);
	jw_u64(w, "mean", s->n ? s->sum / s->n : 0);
	jw_close(w, '}');
}

static void jw_config(struct jw *w)
{
	const struct stress_config *c = &S.cfg;
	char seed[19];

	jw_open(w, "config", '{');
	jw_dbl(w, "duration_s", c->duration_s);
	jw_u64(w, "threads", c->threads);
	jw_u64(w, "timers", c->timers);
	jw_open(w, "mix", '{');
	for (unsigned m = 0; m < M_N; m++)
		jw_u64(w, mix_names[m], c->mix[m]);
	jw_close(w, '}');
	jw_u64(w, "tick_ns", c->tick_ns);
	jw_u64(w, "shards", c->shards);
	jw_u64(w, "workers", c->workers);
	jw_s(w, "backend", c->backend_name);
	jw_s(w, "delivery", c->delivery == KAIROS_DELIVER_INLINE ? "inline" : "workers");
	jw_bool(w, "huge_pages", c->huge_pages);
	jw_range(w, "idle_ns", &c->idle);
	jw_range(w, "short_ns", &c->shorts);
	jw_u64(w, "short_pct", c->short_pct);
	jw_range(w, "period_ns", &c->period);
	jw_u64(w, "periodics", c->periodics);
	jw_u64(w, "fill_pct", c->fill_pct);
	jw_u64(w, "rate", c->rate);
	jw_u64(w, "max_late_ns", c->max_late_ns);
	/* A string: a JSON number is a double, which cannot hold every seed. */
	opt_seed_str(seed, c->seed);
	jw_s(w, "seed", seed);
	jw_u64(w, "queues", c->queues);
	jw_u64(w, "queue_share_pct", c->queue_pct);
	jw_s(w, "queue_destroy", queue_end_names[c->queue_end]);
	jw_u64(w, "keys", c->keys);
	jw_u64(w, "shared_keys", c->shared_keys);
	jw_close(w, '}');
}

static void jw_queues(struct jw *w, const struct tally *t)
{
	jw_open(w, "queues", '{');
	jw_u64(w, "armed", t->arms_queue);
	jw_u64(w, "ended_unrun", t->qunrun);
	jw_u64(w, "withdrawn_resets", t->qwithdrawn);
	jw_u64(w, "paused_calls", t->qpaused);
	jw_u64(w, "paused_calls_overdue", t->qpaused_due);
	jw_u64(w, "take_fences", t->qfences);
	jw_open(w, "list", '[');
	for (unsigned i = 0; i < S.cfg.queues; i++) {
		const struct qdrainer *d = &S.qd[i];

		jw_open(w, NULL, '{');
		jw_u64(w, "queue", i);
		jw_sep(w, "shard");
		fprintf(w->f, "%d", d->shard);
		jw_s(w, "destroyed", d->destroy_first ? "before" : "after");
		jw_u64(w, "run_calls", d->run_calls);
		jw_u64(w, "run_empty", d->run_empty);
		jw_u64(w, "run_oneshot", d->run_oneshot);
		jw_u64(w, "run_periodic", d->run_periodic);
		jw_u64(w, "take_calls", d->take_calls);
		jw_u64(w, "take_empty", d->take_empty);
		jw_u64(w, "take_oneshot", d->take_oneshot);
		jw_u64(w, "take_periodic", d->take_periodic);
		jw_u64(w, "polls", d->polls);
		jw_u64(w, "polls_readable", d->polls_ready);
		jw_u64(w, "pauses", d->pauses);
		jw_u64(w, "paused_ns", d->paused_ns);
		jw_u64(w, "drained_callbacks", d->drained);
		jw_sep(w, "destroy_return");
		fprintf(w->f, "%d", d->destroy_rc);
		jw_u64(w, "ended_unrun", d->unrun);
		jw_close(w, '}');
	}
	jw_close(w, ']');
	jw_close(w, '}');
}

static void jw_keys(struct jw *w, const struct tally *t)
{
	uint64_t rm, rp, st, ee;
	struct kcounts kc;
	static const char *const rcn[RC_N] = {
		[RC_OK] = "ok", [RC_ENOENT] = "enoent", [RC_EBUSY] = "ebusy",
		[RC_EEXIST] = "eexist", [RC_OTHER] = "other",
	};
	static const char *const opn[K_NOPS] = {
		[K_SET] = "set", [K_REPLACE] = "set_replace", [K_MOVE] = "move",
		[K_REMOVE] = "remove", [K_FIND] = "find",
	};

	kc_sum(&kc);
	skeys_sum(&rm, &rp, &st, &ee);
	jw_open(w, "keys", '{');
	jw_u64(w, "own_per_thread", S.cfg.keys);
	jw_u64(w, "shared", S.cfg.shared_keys);
	jw_u64(w, "armed", t->karms);
	jw_u64(w, "armed_shared", t->karms_shared);
	jw_u64(w, "fired", t->kfired);
	for (unsigned sh = 0; sh < 2; sh++) {
		jw_open(w, sh ? "calls_shared" : "calls_own", '{');
		for (unsigned op = 0; op < K_NOPS; op++) {
			jw_open(w, opn[op], '{');
			for (unsigned r = 0; r < RC_N; r++)
				jw_u64(w, rcn[r], kc.rc[sh][op][r]);
			jw_close(w, '}');
		}
		jw_close(w, '}');
	}
	jw_u64(w, "own_removed", t->kcancelled);
	jw_u64(w, "own_replaced", t->kreplaced);
	jw_u64(w, "own_replaced_ran", t->kreplaced_ran);
	jw_u64(w, "own_exact_calls", t->kexact);
	jw_u64(w, "shared_ended_by_key_calls", st);
	jw_u64(w, "shared_key_cancel_ok", rm);
	jw_u64(w, "shared_replace_sets", rp);
	jw_u64(w, "shared_eexist", ee);
	jw_u64(w, "shared_probes", t->kprobes);
	jw_u64(w, "settles", t->ksettles);
	jw_u64(w, "shared_runs_unmeasured", t->kunmeasured);
	jw_close(w, '}');
}

static void jw_library(struct jw *w, const char *key, const struct kairos_stats *k)
{
	jw_open(w, key, '{');
	jw_u64(w, "armed", k->armed);
	jw_u64(w, "fired", k->fired);
	jw_u64(w, "cancelled", k->cancelled);
	jw_u64(w, "drained", k->drained);
	jw_u64(w, "pending", k->pending);
	jw_u64(w, "rejected", k->rejected);
	jw_u64(w, "periodic_runs", k->periodic_runs);
	jw_u64(w, "early", k->early);
	jw_u64(w, "lateness_p50_ns", k->lateness_p50_ns);
	jw_u64(w, "lateness_p99_ns", k->lateness_p99_ns);
	jw_u64(w, "lateness_max_ns", k->lateness_max_ns);
	jw_u64(w, "wakeups", k->wakeups);
	jw_u64(w, "timer_sets", k->timer_sets);
	jw_u64(w, "shards", k->shards);
	jw_close(w, '}');
}

int report_json(FILE *f)
{
	struct jw w = { .f = f };
	uint64_t totals[A_N] = { 0 }, rc[A_N][RC_N] = { { 0 } }, stale[A_N] = { 0 }, all = 0;
	uint64_t oneshot, periodic, periods, drained, nviol = violations_total();
	struct lsnap *la = malloc(3 * sizeof(*la));
	double el = S.elapsed_s > 0 ? S.elapsed_s : 1e-9;
	struct tally t;
	int err = 0;

	if (!la)
		return -ENOMEM;
	late_snapshot(la, la + 1, la + 2);
	tally_sum(&t);
	cb_sum(&oneshot, &periodic, &periods, &drained);
	ops_sum(totals, rc, stale);

	fputc('{', f);
	w.comma[0] = false;
	jw_s(&w, "tool", "kairos-stress");
	jw_s(&w, "version", KAIROS_STRESS_VERSION);
	jw_config(&w);
	jw_dbl(&w, "elapsed_s", S.elapsed_s);
	jw_bool(&w, "interrupted", S.interrupted);

	jw_open(&w, "shards", '[');
	for (unsigned i = 0; i < S.nshards && S.backends; i++) {
		jw_open(&w, NULL, '{');
		jw_u64(&w, "shard", i);
		jw_s(&w, "backend", S.backends[i].name);
		jw_s(&w, "why", S.backends[i].why);
		jw_close(&w, '}');
	}
	jw_close(&w, ']');
	jw_open(&w, "clock", '{');
	jw_s(&w, "slack_timers_read", S.slack_clock.name);
	jw_s(&w, "why", S.slack_clock.why);
	jw_s(&w, "slack_timers_read_at_end", S.slack_clock_end.name);
	jw_close(&w, '}');

	jw_open(&w, "ops", '{');
	for (unsigned a = 0; a < A_N; a++) {
		jw_open(&w, api_names[a], '{');
		jw_u64(&w, "calls", totals[a]);
		jw_dbl(&w, "per_s", (double)totals[a] / el);
		jw_u64(&w, "ok", rc[a][RC_OK]);
		jw_u64(&w, "enoent", rc[a][RC_ENOENT]);
		jw_u64(&w, "ebusy", rc[a][RC_EBUSY]);
		jw_u64(&w, "eexist", rc[a][RC_EEXIST]);
		jw_u64(&w, "other", rc[a][RC_OTHER]);
		jw_u64(&w, "stale_ids", stale[a]);
		jw_close(&w, '}');
		all += totals[a];
	}
	jw_open(&w, "all", '{');
	jw_u64(&w, "calls", all);
	jw_dbl(&w, "per_s", (double)all / el);
	jw_close(&w, '}');
	jw_close(&w, '}');

	jw_open(&w, "timers", '{');
	jw_u64(&w, "armed", t.arms);
	jw_u64(&w, "armed_periodic", t.arms_periodic);
	jw_u64(&w, "fired", t.fired);
	jw_u64(&w, "cancelled_oneshot", t.cancelled);
	jw_u64(&w, "cancelled_periodic", t.pcancelled);
	jw_u64(&w, "stopped_while_running", t.pstopped);
	jw_u64(&w, "cancelled_by_key_calls", t.kcancelled + t.kreplaced + t.kstolen);
	jw_u64(&w, "drained", t.drained);
	jw_u64(&w, "drained_overdue", t.overdue);
	jw_u64(&w, "drained_overdue_max_ns", t.overdue_max);
	jw_u64(&w, "late_pending", t.late_pending);
	jw_u64(&w, "late_pending_max_ns", t.late_pending_max);
	jw_dbl(&w, "longest_stall_s", S.stall_s);
	jw_u64(&w, "periodic_resets", t.preset);
	jw_u64(&w, "periodic_resets_ebusy", t.preset_busy);
	jw_u64(&w, "periodic_schedules_checked", t.pscheds);
	jw_u64(&w, "periodic_schedule_checks_skipped", t.pscheds_skipped);
	jw_u64(&w, "cancel_syncs_of_running_oneshots", t.syncs_running);
	jw_u64(&w, "checked", t.checked);
	jw_u64(&w, "stale_id_calls", t.stale);
	jw_u64(&w, "stale_id_ebusy_returning", busy_returning());
	jw_close(&w, '}');

	jw_open(&w, "callbacks", '{');
	jw_u64(&w, "oneshot", oneshot);
	jw_u64(&w, "periodic", periodic);
	jw_u64(&w, "periodic_periods", periods);
	jw_u64(&w, "drained", drained);
	jw_close(&w, '}');

	jw_queues(&w, &t);
	jw_keys(&w, &t);

	jw_open(&w, "lateness_ns", '{');
	jw_late(&w, "all", la);
	jw_late(&w, "oneshot", la + 1);
	jw_late(&w, "periodic", la + 2);
	jw_open(&w, "histogram", '[');
	for (unsigned b = 0; b < LH_BUCKETS; b++) {
		if (!la->bucket[b])
			continue;
		jw_open(&w, NULL, '{');
		jw_u64(&w, "lo", lhist_lower(b));
		jw_u64(&w, "hi", lhist_upper(b));
		jw_u64(&w, "count", la->bucket[b]);
		jw_close(&w, '}');
	}
	jw_close(&w, ']');
	jw_close(&w, '}');

	if (!S.fin_rc)
		jw_library(&w, "library", &S.fin);
	jw_library(&w, "library_end_of_load", &S.live);
	jw_open(&w, "crosscheck", '[');
	for (unsigned i = 0; i < nxchecks; i++) {
		jw_open(&w, NULL, '{');
		jw_s(&w, "what", xchecks[i].what);
		jw_u64(&w, "library", xchecks[i].lib);
		jw_u64(&w, "tool", xchecks[i].tool);
		jw_bool(&w, "ok", xchecks[i].ok);
		jw_close(&w, '}');
	}
	jw_close(&w, ']');

	jw_open(&w, "destroy", '{');
	jw_sep(&w, "return");
	fprintf(f, "%d", S.destroy_rc);
	jw_u64(&w, "ns", S.destroy_ns);
	jw_close(&w, '}');

	jw_open(&w, "memory_kb", '{');
	jw_u64(&w, "rss_start", S.rss_start_kb);
	jw_u64(&w, "rss_end_of_load", S.rss_load_kb);
	jw_u64(&w, "rss_end", S.rss_end_kb);
	jw_u64(&w, "hwm", S.hwm_kb);
	jw_close(&w, '}');

	jw_open(&w, "series", '[');
	for (size_t i = 0; i < S.nsamples; i++) {
		const struct sample *s = &S.samples[i];

		jw_open(&w, NULL, '{');
		jw_dbl(&w, "t", s->t);
		jw_dbl(&w, "dt", s->dt);
		jw_open(&w, "ops_per_s", '{');
		for (unsigned a = 0; a < A_N; a++)
			jw_dbl(&w, api_names[a], (double)s->ops[a] / s->dt);
		jw_dbl(&w, "all", (double)ops_total(s->ops) / s->dt);
		jw_close(&w, '}');
		jw_dbl(&w, "callbacks_per_s", (double)s->callbacks / s->dt);
		jw_u64(&w, "late_pending", s->late_pending);
		jw_dbl(&w, "wakeups_per_s", (double)s->wakeups / s->dt);
		jw_u64(&w, "pending", s->pending);
		jw_u64(&w, "rss_kb", s->rss_kb);
		jw_close(&w, '}');
	}
	jw_close(&w, ']');

	jw_open(&w, "violations", '{');
	jw_u64(&w, "total", nviol);
	jw_open(&w, "classes", '[');
	for (unsigned v = 0; v < V_N; v++) {
		uint64_t n = atomic_load_explicit(&viols[v].count, memory_order_relaxed);

		if (!n)
			continue;
		jw_open(&w, NULL, '{');
		jw_s(&w, "class", viol_names[v]);
		jw_u64(&w, "count", n);
		jw_open(&w, "examples", '[');
		for (unsigned e = 0; e < VIOL_EXAMPLES && e < n; e++)
			jw_s(&w, NULL, viols[v].example[e]);
		jw_close(&w, ']');
		jw_close(&w, '}');
	}
	jw_close(&w, ']');
	jw_close(&w, '}');
	jw_bool(&w, "pass", nviol == 0);
	fputs("\n}\n", f);
	if (ferror(f))
		err = -EIO;
	if (f != stdout && fclose(f))
		err = -errno;
	free(la);
	return err;
}

/* ---- --plot ----------------------------------------------------------------- */

static int write_plot_data(const char *dir, char *late, char *ops, char *gp, size_t len)
{
	struct lsnap *la = malloc(3 * sizeof(*la));
	FILE *f;

	snprintf(late, len, "%s/lateness.dat", dir);
	snprintf(ops, len, "%s/ops.dat", dir);
	snprintf(gp, len, "%s/plot.gp", dir);
	if (!la)
		return -ENOMEM;
	late_snapshot(la, la + 1, la + 2);
	f = fopen(late, "w");
	if (!f) {
		free(la);
		return -errno;
	}
	fprintf(f, "# lo_ms hi_ms callbacks\n");
	for (unsigned b = 0; b < LH_BUCKETS; b++) {
		uint64_t lo = lhist_lower(b), hi = lhist_upper(b) + 1;

		if (!la->bucket[b])
			continue;
		/* A log axis has no 0: the [0, 1) ns bucket starts at 0.5 ns. */
		fprintf(f, "%.9g %.9g %" PRIu64 "\n", lo ? (double)lo / 1e6 : 0.5e-6,
			(double)hi / 1e6, la->bucket[b]);
	}
	if (!la->n)
		fprintf(f, "1e-3 2e-3 0\n");
	free(la);
	if (fclose(f))
		return -errno;
	f = fopen(ops, "w");
	if (!f)
		return -errno;
	fprintf(f, "t");
	for (unsigned a = 0; a < A_N; a++)
		fprintf(f, " %s", api_names[a]);
	fprintf(f, " all\n");
	for (size_t i = 0; i < S.nsamples; i++) {
		const struct sample *s = &S.samples[i];

		fprintf(f, "%.3f", s->t);
		for (unsigned a = 0; a < A_N; a++)
			fprintf(f, " %.1f", (double)s->ops[a] / s->dt);
		fprintf(f, " %.1f\n", (double)ops_total(s->ops) / s->dt);
	}
	if (!S.nsamples) {
		fprintf(f, "0");
		for (unsigned a = 0; a <= A_N; a++)
			fprintf(f, " 0");
		fprintf(f, "\n");
	}
	if (fclose(f))
		return -errno;
	return 0;
}

static int write_plot_script(const char *gp, const char *late, const char *ops, const char *out)
{
	FILE *f = fopen(gp, "w");

	if (!f)
		return -errno;
	fprintf(f, "set terminal svg size 1000,900 dynamic noenhanced background rgb 'white'"
		   " font 'Sans,11'\nset output ");
	plot_quote(f, out);
	fprintf(f, "\nset multiplot layout 2,1 title 'kairos-stress: %.1f s, %u threads, %" PRIu32
		   " timers, %u shards, %s'\n", S.elapsed_s, S.cfg.threads, S.cfg.timers,
		S.nshards, S.nshards && S.backends ? S.backends[0].name : "?");
	fprintf(f, "set title 'Callback lateness (callback start - deadline)'\n"
		   "set logscale xy\nset xlabel 'lateness (ms)'\n"
		   "set ylabel 'callbacks per 1/16 octave'\n"
		   "set grid\nset style fill solid 0.6 border -1\nset yrange [0.5:*]\n"
		   "plot ");
	plot_quote(f, late);
	/* Buckets double in width each octave: plot a density, so the octaves join. */
	fprintf(f, " using (sqrt($1*$2)):3:1:2:(0.5):($3/(16*log($2/$1)/log(2)))"
		   " with boxxyerror lc rgb '#3b75af' notitle\n");
	fprintf(f, "unset logscale\nset yrange [0:*]\nset title 'Calls per second'\n"
		   "set xrange [0:*]\nset xlabel 'time (s)'\nset ylabel 'calls/s'\nset key outside right top\n"
		   "set format y '%%.1s%%c'\n"
		   "plot for [i=2:%u] ", A_N + 2);
	plot_quote(f, ops);
	fprintf(f, " using 1:i with linespoints pt 7 ps 0.4 title columnheader(i)\n"
		   "unset multiplot\n");
	if (fclose(f))
		return -errno;
	return 0;
}

/*
 * report_plot - draws the lateness histogram and calls/s over time into one
 * SVG with gnuplot.  Without gnuplot it says so and returns 0: the rest of
 * the run stands.
 */
int report_plot(const char *path)
{
	const char *tmp = getenv("TMPDIR");
	char dir[4096], late[4200], ops[4200], gp[4200];
	char prog[] = "gnuplot";
	char *argv[] = { prog, gp, NULL };
	int rc, status;
	pid_t pid;

	if (!plot_have_gnuplot()) {
		fprintf(stderr, "kairos-stress: gnuplot not found; install it (apt-get install"
			" gnuplot-nox) for --plot\n");
		return 0;
	}
	snprintf(dir, sizeof(dir), "%s/kairos-stress.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		rc = -errno;
		fprintf(stderr, "kairos-stress: --plot: cannot make a temporary directory: %s\n",
			strerror(-rc));
		return rc;
	}
	rc = write_plot_data(dir, late, ops, gp, sizeof(late));
	if (!rc)
		rc = write_plot_script(gp, late, ops, path);
	if (!rc) {
		rc = -posix_spawnp(&pid, "gnuplot", NULL, NULL, argv, environ);
		if (!rc && waitpid(pid, &status, 0) < 0)
			rc = -errno;
		else if (!rc && (!WIFEXITED(status) || WEXITSTATUS(status)))
			rc = -ECHILD;
	}
	if (rc)
		fprintf(stderr, "kairos-stress: --plot: gnuplot failed%s%s; data kept in %s\n",
			rc == -ECHILD ? "" : ": ", rc == -ECHILD ? "" : strerror(-rc), dir);
	else {
		unlink(late);
		unlink(ops);
		unlink(gp);
		rmdir(dir);
		fprintf(stderr, "kairos-stress: plot written to %s\n", path);
	}
	return rc;
}
