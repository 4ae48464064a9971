/* SPDX-License-Identifier: MIT */
/*
 * kairos-idle-load - a load client for kairos-idle-server that checks its
 * idle timeouts from the outside; kairos-idle-load(1) lists the options and
 * exit statuses.
 *
 * It opens C connections to 127.0.0.1:N.  A random subset of them (F of C,
 * rounded) stops sending at a random moment; the others send a 16-byte
 * message every --interval ms until the end and read the echoes.  One thread
 * drives them all with epoll.  When the server closes a connection (a read
 * returns 0, or ECONNRESET) the client notes when it saw the close.
 *
 * The server resets a connection's timer when it reads, after the client's
 * send began (on loopback the bytes can reach the server, and be read, before
 * send() returns) and before it echoes, so the server's deadline lies between
 * send + T and echo + T, where "send" is when the last send that came back
 * echoed was called and "echo" when that echo was read.  (A send whose echo
 * never came may have crossed the server's close: the server need not have
 * read it.)  The verdict, after --duration s:
 *   - every idle connection whose close was due was closed by the server.
 *     Due: its last send or echo + T + slack lay DUE_MARGIN_NS or more
 *     before the end; the others are reported as "not due", and an idle
 *     connection whose connect finished after its stop time sends nothing
 *     and is only checked for an early close (its deadline is the
 *     server's accept, which this side does not see);
 *   - no busy connection was closed by the server, and no connection
 *     closed while a send of it that the server never echoed was in
 *     before the server's deadline (see next_send());
 *   - no close was early: seen before send + T - 1 ms (a close seen that
 *     early certainly happened before the server's deadline);
 *   - no close was late: came after echo + T + slack (default 1 tick of
 *     1 ms + 50 ms, for a loaded two-core machine).  Measuring from the echo
 *     leaves out how long the server took to accept and read, which under
 *     load says nothing about the timers.
 *
 * When a close came is bounded on both sides.  It came before it was seen;
 * and it came after this client last looked without finding it: the start
 * of the last recv on that connection that found nothing, or of the last
 * epoll_wait that had room for every ready connection and did not report
 * it.  Every blocking wait is preceded by a look with a zero timeout, so a
 * close that a blocking wait reports came after that wait began, not after
 * the start of a turn a whole --interval (or, with nothing to send, seconds)
 * earlier.  And a close that woke a blocking wait came no earlier than the
 * wait's return less the time this thread spent runnable or running during
 * the wait (run_delay from /proc/thread-self/schedstat, CPU time from
 * CLOCK_THREAD_CPUTIME_ID): the rest of the wait it slept, and the close
 * would have woken it.  A close counts as late only when that earliest
 * moment is past echo + T + slack.
 * One seen past the slack but not shown late is a close this client
 * noticed late because its loop measurably stalled (a long turn, or a
 * wake-up that waited for a CPU): those are counted and reported, not
 * blamed on the server.  Both lateness figures are printed: "seen" is an
 * upper bound on the timer's lateness plus the server's scheduling delay,
 * "at the earliest" a lower bound.
 *
 * With more than 10000 connections it spreads them over several loopback
 * source addresses (127.0.0.1, 127.0.0.2, ...; see --sources) because a
 * connect() from one address that has used most of its ephemeral ports
 * costs a millisecond of kernel port search.
 *
 * --race-frac makes some idle connections close themselves between 1 ms
 * before and 2 ms after T, racing the server's timer (its kairos_cancel()
 * then meets a callback that runs or ran); either side may close first, so
 * they are only checked for an early close by the server.
 *
 * The server's CPU time over the run is read from its "STATS\n" control
 * answer at the start and at the end.  --quit-server sends "QUIT\n" at the
 * end so the server exits.
 *
 * It also measures how long the machine stalled it: its loop waking later
 * than asked or taking long over a turn, and a thread that only sleeps 1 ms
 * at a time waking late.
 *
 * A loaded machine makes the server or this client late, never early.  So
 * the verdict is FAIL (exit 1) only for what the server did: a close early
 * (idle or busy), a close late or a due close missing while the sleeper ran
 * on time, a close of a connection (busy or idle) with a send in: one the
 * server never echoed that had reached it before the earliest deadline it
 * can have had (its last echoed send, or connect, + T), a connection it
 * closed in order (EOF: so it had accepted it) without echoing anything
 * sent in time (either only when the close was in order with every byte
 * acknowledged by the server's kernel: arrived()), a connect it refused or timed out, its going away (a
 * connect refused, or connections closing as a dead process's do and its
 * port refusing).  It is INCONCLUSIVE (exit 3) for what this client failed
 * to do or the machine held up: connections it could not open (its own
 * descriptor or port limits) or had not opened by the end; a busy
 * connection the server closed whose next send began T or more after the
 * last echoed one returned (this client's loop came too late, so it was
 * not kept busy), or was under way at the deadline (too close to call); a
 * connection reset (an error, not EOF) before the server read anything
 * (its kernel's listen backlog overflowed: no timer of the server's was
 * involved); late or missing closes while the sleeper stalled over half
 * the slack (the server's threads were as likely held up).  Nothing opened
 * at all is exit 2, with a hint.  Every --progress seconds (default 10;
 * --quiet: never) a line of counters goes to stderr.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <linux/sockios.h>

#include "opt.h"
#include "rng.h"

#define MS		1000000ull
#define MAXEV		4096	/* a turn that fills this is not a full look */
#define CONNECTING_MAX	256	/* connects in flight at once */
#define CONNECT_TURN	32	/* connects started per loop turn (~80 us each) */
#define EARLY_EPS_NS	(1 * MS)	/* loopback transit allowance */
#define DUE_MARGIN_NS	(10 * MS)	/* a close due this near the end may be in flight */
#define WAKE_EPS_NS	(100 * 1000ull)	/* a wake-up's own latency (see the wait) */
#define GONE_WINDOW_NS	(100 * MS)	/* closes this near a server's death: its death */
#define SUSPECT_NS	(500 * MS)	/* how long a death-like close keeps the port asked */
#define PROBE_GAP_NS	(10 * MS)	/* ... at most once per */
#define MSG		"kairos-idle-pin\n"
#define MSG_LEN		16
#define SHOW		5	/* offending connections described, per kind */

struct lconn {
	int fd;			/* -1: not open (yet, or any more) */
	bool idle;		/* in the subset that falls silent */
	bool connecting;	/* connect() in flight */
	bool opened;
	int open_err;		/* why the connect failed, else 0 */
	bool stopped;		/* idle and past stop_at: sends no more */
	bool late_open;		/* idle, and its connect finished after stop_at */
	bool racer;		/* idle, and closes itself about when T ends */
	bool self_closed;	/* a racer that closed before the server did */
	int64_t race_at;	/* racer: closes at last_send + T + this */
	bool closed;		/* closed by the server */
	int close_err;		/* 0 for EOF, else the errno seen */
	int close_outq;		/* EOF: bytes sent that its peer had not acked (SIOCOUTQ); -1: not known */
	uint64_t stop_at;	/* idle only: no send at or after this */
	uint64_t last_send;	/* when the last send returned */
	uint64_t send_start;	/* when the last send was called */
	uint64_t acked_start;	/* send_start of the last send echoed back */
	uint64_t acked_end;	/* ... and when it returned (or connect seen) */
	uint64_t unacked_start;	/* send_start of the first send after that one */
	uint64_t unacked_end;	/* ... and when it returned */
	uint64_t acked_bytes;	/* bytes sent before it (all echoed then) */
	uint64_t last_echo;	/* when echo bytes were last read */
	uint64_t echo_done;	/* when every byte sent had been echoed */
	uint64_t close_seen;	/* when the close was seen */
	uint64_t close_after;	/* the close certainly came after this */
	uint64_t close_est;	/* ... and, as measured, after this (>= close_after) */
	uint64_t quiet_at;	/* a recv begun then found no close pending */
	uint64_t seen_turn;	/* the last loop turn that reported an event */
	uint64_t sent, echoed;	/* bytes */
};

/* Sends due, in order: every busy connection has the same interval. */
struct fifo {
	uint32_t *idx;
	uint64_t *due;
	uint32_t head, len, cap;
};

struct opts {
	unsigned port;
	unsigned long conns;
	double idle_frac, race_frac;
	unsigned long interval_ms, idle_ms, slack_ms, duration_s;
	unsigned long sources;	/* source addresses 127.0.0.1 .. 127.0.0.N */
	uint64_t seed;
	unsigned long progress_s;	/* 0: no progress lines */
	bool quit_server, quiet;
};

struct cpu {
	bool ok;
	long long utime_us, stime_us;
	unsigned long long turn_max_us, handoff_max_us;	/* end of run only */
	unsigned long long accept_paused;	/* 0 from a server that does not say */
	int err;		/* why the connect for STATS failed */
};

/*
 * The sleeper: a thread that sleeps 1 ms at a time and records how much
 * later than asked it woke.  It shares nothing with kairos or the server, so
 * what it sees is the machine itself failing to run a thread on time (CPU
 * contention, a stall on I/O), which delays the server and this client too.
 */
struct sleeper {
	pthread_t thread;
	atomic_bool stop;
	uint64_t max_ns;	/* read after the join */
};

static struct sockaddr_in server_addr;
static unsigned long nsources = 1;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A failed setup call: "kairos-idle-load: WHAT: <strerror>", exit 2. */
#define die(what, err)	opt_fail(what, "%s", strerror(err))

static void fifo_push(struct fifo *f, uint32_t i, uint64_t due)
{
	uint32_t at = (f->head + f->len) % f->cap;

	f->idx[at] = i;
	f->due[at] = due;
	f->len++;
}

static uint32_t fifo_pop(struct fifo *f)
{
	uint32_t i = f->idx[f->head];

	f->head = (f->head + 1) % f->cap;
	f->len--;
	return i;
}

/* A blocking socket to the server with 2 s timeouts, or -1. */
static int dial(void)
{
	struct timeval tv = { 2, 0 };
	int fd, one = 1;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	/* Linux bounds connect() by SO_SNDTIMEO: a full backlog fails fast. */
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (struct sockaddr *)&server_addr, sizeof(server_addr))) {
		int err = errno;

		close(fd);
		errno = err;
		return -1;
	}
	return fd;
}

/* Asks the server for its counters and CPU time ("STATS\n"). */
static struct cpu server_cpu(void)
{
	struct cpu c = { 0 };
	char buf[512];
	size_t got = 0;
	int fd = dial();
	char *p;

	if (fd < 0) {
		c.err = errno;
		return c;
	}
	if (send(fd, "STATS\n", 6, MSG_NOSIGNAL) != 6)
		goto out;
	while (got < sizeof(buf) - 1) {
		ssize_t n = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);

		if (n <= 0)
			break;
		got += (size_t)n;
		if (memchr(buf, '\n', got))
			break;
	}
	buf[got] = '\0';
	p = strstr(buf, "utime_us ");
	if (p && sscanf(p, "utime_us %lld stime_us %lld", &c.utime_us, &c.stime_us) == 2)
		c.ok = true;
	p = strstr(buf, "turn_max_us ");
	if (p)
		(void)sscanf(p, "turn_max_us %llu handoff_max_us %llu", &c.turn_max_us,
			     &c.handoff_max_us);
	p = strstr(buf, "accept_paused ");
	if (p)
		(void)sscanf(p, "accept_paused %llu", &c.accept_paused);
out:
	close(fd);
	return c;
}

static void quit_server(void)
{
	int fd = dial();

	if (fd < 0) {
		fprintf(stderr, "kairos-idle-load: QUIT: connect: %s\n", strerror(errno));
		return;
	}
	if (send(fd, "QUIT\n", 5, MSG_NOSIGNAL) != 5)
		fprintf(stderr, "kairos-idle-load: QUIT: send failed\n");
	close(fd);
}

static void *sleeper_main(void *arg)
{
	struct sleeper *sl = arg;
	struct timespec ts = { 0, 1000000 };

	/* Relaxed: the flag only has to be seen eventually. */
	while (!atomic_load_explicit(&sl->stop, memory_order_relaxed)) {
		uint64_t t0 = now_ns(), late;

		nanosleep(&ts, NULL);
		late = now_ns() - t0;
		late = late > MS ? late - MS : 0;
		if (late > sl->max_ns)
			sl->max_ns = late;
	}
	return NULL;
}

/*
 * When this client last looked at every connection: the latest epoll_wait
 * that returned fewer events than it could hold (so every ready connection
 * was in it), numbered by turn and timed at its call.  A close that this
 * look did not report came after it began.
 */
static uint64_t look_turn, look_at, cur_turn;

/*
 * Set while the events of a blocking wait are handled: the wait's return
 * less what this thread spent runnable or running during it, and less
 * WAKE_EPS_NS (see the wait).  The event that woke the wait came no
 * earlier (until then the thread slept, and any ready connection would
 * have woken it), and every other event it reports came after that one.
 * 0: not a blocking wait, or not measured.
 */
static uint64_t wake_after;

/* Connections open now (opened, not closed); closes by the server so far. */
static unsigned long nlive, srv_closed_idle, srv_closed_busy;

/*
 * This thread's run_delay (time runnable but not running), in ns, from
 * /proc/thread-self/schedstat; false when that cannot be read (a kernel
 * without CONFIG_SCHED_INFO shows "0 0 0" or no file; the third number,
 * how often the thread got a CPU, is never 0 for a thread reading it, the
 * first two are before its first tick or wait).  run_delay is whole while
 * the thread runs: a wait for a CPU is added when the CPU is given.  The
 * CPU time beside it is not: it is summed at the scheduler's updates (a
 * tick, a switch) and lacks the slice running now, which just after a
 * wake-up is all the wait did since, such as copying out 4096 events;
 * thread_cpu_ns() has it.
 */
static int schedstat_fd = -1;

static bool sched_delay_ns(uint64_t *delay)
{
	unsigned long long cpu, d, runs;
	char buf[96];
	ssize_t n;

	if (schedstat_fd < 0)
		return false;
	n = pread(schedstat_fd, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	if (sscanf(buf, "%llu %llu %llu", &cpu, &d, &runs) != 3 || !runs)
		return false;
	*delay = d;
	return true;
}

/* This thread's CPU time to the nanosecond, the running slice included. */
static bool thread_cpu_ns(uint64_t *ns)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts))
		return false;
	*ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	return true;
}

/* The server closed connection @c (seen now). */
static void mark_closed(int epfd, struct lconn *c, int err)
{
	c->closed = true;
	c->close_err = err;
	c->close_seen = now_ns();
	/*
	 * The earliest the close can have come: after the last recv that
	 * found nothing, and after the last full look that did not report
	 * this connection.  (If that look reported it, its recvs ran to
	 * EAGAIN after the look began, and quiet_at is later anyway.)
	 */
	c->close_after = c->quiet_at;
	/*
	 * At an orderly close, whether the server's kernel had every byte
	 * sent: its FIN acknowledges what it received, and a server that
	 * closes with bytes unread resets instead.  So nothing outstanding
	 * means that what it never echoed, it had read (arrived()).
	 */
	c->close_outq = -1;
	if (!err && ioctl(c->fd, SIOCOUTQ, &c->close_outq))
		c->close_outq = -1;
	if (look_turn && c->seen_turn != look_turn && look_at > c->close_after)
		c->close_after = look_at;
	/*
	 * A close that a blocking wait reported: measured, it came no
	 * earlier than the wake-up.  Without this, the wait's start bounds
	 * it, which can be a whole wait before.
	 */
	c->close_est = c->close_after;
	if (wake_after > c->close_est)
		c->close_est = wake_after;
	epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->fd = -1;
	nlive--;
	if (c->idle)
		srv_closed_idle++;
	else
		srv_closed_busy++;
}

static void on_readable(int epfd, struct lconn *c)
{
	uint64_t begun = now_ns();	/* before the next recv */
	char buf[4096];

	for (;;) {
		ssize_t n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);

		if (n > 0) {
			c->echoed += (uint64_t)n;
			c->last_echo = begun = now_ns();
			if (c->echoed == c->sent) {
				c->echo_done = c->last_echo;
				c->acked_start = c->send_start;
				c->acked_end = c->last_send;
			}
			continue;
		}
		if (n == 0)
			mark_closed(epfd, c, 0);
		else if (errno == EAGAIN)
			c->quiet_at = begun;
		else if (errno != EINTR)
			mark_closed(epfd, c, errno);
		return;
	}
}

/* One send; false when the connection turned out closed by the server. */
static bool send_one(int epfd, struct lconn *c, uint64_t *stalls)
{
	uint64_t start = now_ns();
	ssize_t n = send(c->fd, MSG, MSG_LEN, MSG_NOSIGNAL | MSG_DONTWAIT);

	if (n == MSG_LEN) {
		c->send_start = start;
		c->last_send = now_ns();
		if (c->sent == c->echoed) {
			c->unacked_start = start;
			c->unacked_end = c->last_send;
			c->acked_bytes = c->sent;
		}
		c->sent += MSG_LEN;
		return true;
	}
	if (n >= 0 || errno == EAGAIN) {
		/* A full send buffer on loopback: the server is not reading. */
		(*stalls)++;
		return true;
	}
	mark_closed(epfd, c, errno);
	return false;
}

static double pct_ms(const int64_t *v, size_t n, double p)
{
	size_t i;

	if (!n)
		return 0;
	i = (size_t)(p * (double)(n - 1) + 0.5);
	return (double)v[i] / 1e6;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return x < y ? -1 : x > y;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kairos-idle-load --port N [options]   (--opt N or --opt=N)\n"
		"  --port N        the server's port on 127.0.0.1 (1..65535, required)\n"
		"  --conns C       connections (1..1000000, default 2000)\n"
		"  --idle-frac F   fraction that falls idle (0..1, default 0.1)\n"
		"  --interval MS   busy connections send every MS ms (1..3600000,\n"
		"                  at most half of --idle; default 100)\n"
		"  --idle MS       the server's idle timeout T (1..3600000, default 1000)\n"
		"  --slack MS      allowed lateness of a close (0..3600000, default 51:\n"
		"                  1 tick + 50)\n"
		"  --duration S    run time in seconds (1..86400, default 5)\n"
		"  --seed X        random seed (0..2^64-1, decimal or 0x..., default 1)\n"
		"  --sources N     spread connections over source addresses 127.0.0.1\n"
		"                  to 127.0.0.N (1..254; default: one per 10000 connections)\n"
		"  --race-frac F   fraction of the idle connections that close themselves\n"
		"                  within a millisecond or two of T, racing the server's\n"
		"                  timer: either side may close first (0..1, default 0)\n"
		"  --quit-server   send QUIT to the server at the end\n"
		"  --progress S    a line of counters on stderr every S seconds\n"
		"                  (0..86400; default 10; 0: none)\n"
		"  --quiet         no progress lines\n");
}

static void parse(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
		{ "port", required_argument, NULL, 'p' },
		{ "conns", required_argument, NULL, 'c' },
		{ "idle-frac", required_argument, NULL, 'f' },
		{ "race-frac", required_argument, NULL, 'r' },
		{ "interval", required_argument, NULL, 'i' },
		{ "idle", required_argument, NULL, 'I' },
		{ "slack", required_argument, NULL, 'S' },
		{ "duration", required_argument, NULL, 'd' },
		{ "seed", required_argument, NULL, 's' },
		{ "sources", required_argument, NULL, 'a' },
		{ "quit-server", no_argument, NULL, 'q' },
		{ "progress", required_argument, NULL, 'P' },
		{ "quiet", no_argument, NULL, 'Q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	*o = (struct opts){ .conns = 2000, .idle_frac = 0.1, .interval_ms = 100,
			    .idle_ms = 1000, .slack_ms = 51, .duration_s = 5, .seed = 1,
			    .progress_s = 10 };
	opt_prog = "kairos-idle-load";
	while ((c = opt_next(argc, argv, "h", longopts)) != -1) {
		switch (c) {
		case 'p':
			o->port = (unsigned)opt_u64("--port", optarg, 1, 65535);
			break;
		case 'c':
			o->conns = opt_u64("--conns", optarg, 1, 1000000);
			break;
		case 'f':
			o->idle_frac = opt_double("--idle-frac", optarg, 0, 1);
			break;
		case 'r':
			o->race_frac = opt_double("--race-frac", optarg, 0, 1);
			break;
		case 'i':
			o->interval_ms = opt_u64("--interval", optarg, 1, 3600000);
			break;
		case 'I':
			o->idle_ms = opt_u64("--idle", optarg, 1, 3600000);
			break;
		case 'S':
			o->slack_ms = opt_u64("--slack", optarg, 0, 3600000);
			break;
		case 'd':
			o->duration_s = opt_u64("--duration", optarg, 1, 86400);
			break;
		case 's':
			o->seed = opt_seed("--seed", optarg);
			break;
		case 'a':
			o->sources = opt_u64("--sources", optarg, 1, 254);
			break;
		case 'q':
			o->quit_server = true;
			break;
		case 'P':
			o->progress_s = opt_u64("--progress", optarg, 0, 86400);
			break;
		case 'Q':
			o->quiet = true;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		}
	}
	if (!o->port)
		opt_fail(NULL, "--port is required (1..65535)");
	if (!o->sources)
		o->sources = (o->conns + 9999) / 10000;
	/* Busy connections must send well within T, or they time out too. */
	if (o->interval_ms * 2 > o->idle_ms)
		opt_fail("--interval", "%lu is over half of --idle (%lu)", o->interval_ms,
			 o->idle_ms);
}

static void raise_nofile(unsigned long need)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		die("getrlimit", errno);
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl))
			die("setrlimit", errno);
	}
	if (rl.rlim_cur != RLIM_INFINITY && need > rl.rlim_cur) {
		fprintf(stderr, "kairos-idle-load: %lu connections need %lu files, "
			"RLIMIT_NOFILE allows %llu\n", need - 16, need,
			(unsigned long long)rl.rlim_cur);
		exit(2);
	}
}

/* Starts a non-blocking connect for @c; false (and noted) if it failed. */
static bool start_connect(int epfd, struct lconn *c, unsigned long i)
{
	struct epoll_event ev = { .events = EPOLLOUT | EPOLLIN | EPOLLRDHUP, .data.u64 = i };
	int one = 1;

	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->fd < 0) {
		c->open_err = errno;
		return false;
	}
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (nsources > 1) {
		struct sockaddr_in src = { .sin_family = AF_INET };

		/*
		 * Once one address has used most of its ephemeral ports, the
		 * kernel's search for a free one makes each connect() cost a
		 * millisecond (measured here: 30 us up to 14000 connections,
		 * 1 ms beyond).  Other loopback source addresses have their
		 * own ports; NO_PORT leaves the port to connect(), which only
		 * needs the 4-tuple to be unique.
		 */
		src.sin_addr.s_addr = htonl(INADDR_LOOPBACK + (uint32_t)(i % nsources));
		setsockopt(c->fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
		if (bind(c->fd, (struct sockaddr *)&src, sizeof(src))) {
			c->open_err = errno;
			close(c->fd);
			c->fd = -1;
			return false;
		}
	}
	/*
	 * The server arms its timer at accept, after this call; when this
	 * side sees the connect complete may be later still.
	 */
	c->acked_start = now_ns();
	if (connect(c->fd, (struct sockaddr *)&server_addr, sizeof(server_addr)) &&
	    errno != EINPROGRESS) {
		c->open_err = errno;
		close(c->fd);
		c->fd = -1;
		return false;
	}
	/* Even a connect that completed at once reports EPOLLOUT. */
	if (epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev))
		die("epoll_ctl add", errno);
	c->connecting = true;
	return true;
}

/* The connect of @c reported an event: opened, or failed (false). */
static bool finish_connect(int epfd, struct lconn *c, unsigned long i)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.u64 = i };
	socklen_t len = sizeof(c->open_err);

	c->connecting = false;
	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &c->open_err, &len))
		c->open_err = errno;
	if (c->open_err) {
		close(c->fd);
		c->fd = -1;
		return false;
	}
	if (epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev))
		die("epoll_ctl mod", errno);
	c->opened = true;
	c->send_start = c->last_send = c->last_echo = c->acked_end = now_ns();
	return true;
}

/* A connect that failed for want of something on this side, not the server's. */
static bool local_err(int err)
{
	return err == EADDRNOTAVAIL || err == EADDRINUSE || err == EAGAIN || err == EMFILE ||
	       err == ENFILE || err == ENOBUFS || err == ENOMEM;
}

struct verdict {
	unsigned long busy, idle, open_failed, open_failed_local, not_open;
	int local_err;		/* one errno of open_failed_local */
	unsigned long idle_judged;	/* opened in time, not racing */
	unsigned long idle_closed, idle_missing, not_due, late_open, early, late;
	unsigned long busy_closed, busy_early, busy_unkept, busy_unread;
	unsigned long busy_in, idle_in;	/* closed busy: a send was in (next_send()) */
	unsigned long busy_unread_eof, idle_unread_eof;	/* ... and nothing echoed, EOF */
	unsigned long busy_at;	/* a send under way at the deadline */
	unsigned long unproven;	/* NEXT_IN by this client's clock, not arrived() */
	unsigned long idle_unread;	/* reset, nothing echoed, not early */
	unsigned long idle_unkept;	/* EOF, nothing echoed, its first send not in */
	unsigned long late_seen;	/* seen past the slack, not shown late */
	unsigned long racers, race_self, race_server_first;
	unsigned long never_read;	/* sent to, never echoed: never read */
	unsigned long gone_closed;	/* closed as the server went */
	int64_t *lat;		/* idle closes: seen - (echo + T) */
	size_t nlat;
	int64_t late_min_max;	/* most of close_est - (echo + T) */
	int64_t margin;		/* least of seen - (acked_start + T) */
};

/*
 * The early rule for connection @i, closed at close_seen: not before its
 * acked_start (its last echoed send, or its connect) + T, less EARLY_EPS_NS.
 * An early close is counted and, the first SHOW of them, told as "@kind
 * connection i closed EARLY: x ms after @since".
 */
static bool closed_early(struct verdict *v, const struct lconn *c, unsigned long i,
			 uint64_t t_ns, const char *kind, const char *since, unsigned *shown)
{
	if (c->close_seen + EARLY_EPS_NS >= c->acked_start + t_ns)
		return false;
	v->early++;
	if ((*shown)++ < SHOW)
		printf("  %s connection %lu closed EARLY: %.3f ms after %s (T %llu ms, %s)\n",
		       kind, i, (double)(c->close_seen - c->acked_start) / 1e6, since,
		       (unsigned long long)(t_ns / MS),
		       c->close_err ? strerror(c->close_err) : "EOF");
	return true;
}

/* What a close says of the first send that never came back (next_send()). */
enum next {
	NEXT_NONE,	/* every send came back */
	NEXT_IN,	/* in before the earliest deadline: the server's fault */
	NEXT_AT,	/* under way at the deadline: too close to call */
	NEXT_AFTER,	/* begun T after the one before: not kept busy */
};

/* The times next_send() judged by, for the lines that tell them. */
struct next_times {
	uint64_t lo, hi;	/* the server's deadline, no earlier; a send begun at hi is late */
	uint64_t from, to;	/* the send: begun no earlier, in by */
};

/*
 * Connection @c was closed by the server, not early, with sends it never
 * echoed: was the first of those in before the server's deadline?
 *
 * The server's deadline is its last read + T, no earlier than the start of
 * the last send that came back + T (its bytes cannot be read before they
 * are sent); with nothing echoed, its accept + T, no earlier than the
 * connect began + T.  The first send that never came back is one it never
 * read (it echoes what it reads at once, before any close): its bytes
 * reached the server's socket after the send began and, on loopback, by
 * the time send() returned (the softirq that the send runs on its way out
 * delivers them; EARLY_EPS_NS, as for the early rule, for a kernel that
 * leaves that to ksoftirqd).  So:
 *  - in before the earliest deadline (NEXT_IN): the server closed after
 *    its deadline with those bytes in its socket, or before it (early):
 *    its fault either way;
 *  - begun T or more after the previous send returned (with nothing
 *    echoed, after the connect was seen) (NEXT_AFTER): past the deadline
 *    of a server that read that send as it came, the latest one that the
 *    send's own times allow: this client did not keep it busy.  A server
 *    that read it later has a later deadline, which this one may have
 *    missed, but this client failed its part first;
 *  - between (NEXT_AT): under way at the deadline, too close to call.
 * This client keeps the times of two sends: the first after everything
 * last came back (unacked_*) and the last.  When some of the later ones
 * came back, the server read the first of them, and the first it did not
 * read is the last send or one between the two, begun after the first
 * returned and in before the last began; the send before it is known only
 * when it is that first one.
 */
static enum next next_send(const struct lconn *c, uint64_t t_ns, struct next_times *nt)
{
	bool last = c->echoed + MSG_LEN == c->sent;

	if (c->echoed >= c->sent)
		return NEXT_NONE;
	if (c->echoed == c->acked_bytes) {
		nt->lo = c->acked_start + t_ns;
		nt->hi = c->acked_end + t_ns;
		nt->from = c->unacked_start;
		nt->to = c->unacked_end;
	} else {
		nt->lo = c->unacked_start + t_ns;
		nt->hi = last && c->echoed == c->acked_bytes + MSG_LEN ?
			 c->unacked_end + t_ns : UINT64_MAX;
		nt->from = last ? c->send_start : c->unacked_end;
		nt->to = last ? c->last_send : c->send_start;
	}
	if (nt->to + EARLY_EPS_NS < nt->lo)
		return NEXT_IN;
	if (nt->from >= nt->hi)
		return NEXT_AFTER;
	return NEXT_AT;
}

/*
 * Whether the sends connection @c never got back had reached the server
 * for certain: an orderly close with nothing left unacknowledged (see
 * mark_closed()), so the server read them and closed without echoing.
 * Otherwise (a reset, or bytes the server's kernel never acknowledged) a
 * send that this client's clock puts in before the deadline may have
 * reached the server late all the same: a segment dropped on a full
 * listen queue or backlog and sent again, or held in a softirq deferred
 * to ksoftirqd on a loaded machine.  NEXT_IN counts as the server's fault
 * only with this proof (unproven: INCONCLUSIVE).
 */
static bool arrived(const struct lconn *c)
{
	return !c->close_err && c->close_outq == 0;
}

/* ms from @t0 to @t, signed. */
static double ms_from(uint64_t t0, uint64_t t)
{
	return (double)(int64_t)(t - t0) / 1e6;
}

/*
 * Judges every connection; @end is when this client last looked (a close
 * due before it, less DUE_MARGIN_NS, must have been seen); a server found
 * gone died at @gone_from (0: it did not), and closes seen since are its
 * death, not its timers.
 */
static void judge(const struct opts *o, struct lconn *cs, uint64_t end, uint64_t gone_from,
		  struct verdict *v)
{
	uint64_t t_ns = o->idle_ms * MS, slack_ns = o->slack_ms * MS;
	unsigned shown_missing = 0, shown_busy = 0, shown_bad = 0;
	struct next_times nt;
	enum next next;

	memset(v, 0, sizeof(*v));
	v->margin = INT64_MAX;
	v->late_min_max = INT64_MIN;
	v->lat = calloc(o->conns, sizeof(*v->lat));
	if (!v->lat)
		die("calloc", ENOMEM);
	if (gone_from)
		end = gone_from;
	for (unsigned long i = 0; i < o->conns; i++) {
		struct lconn *c = &cs[i];
		uint64_t echo, last;
		int64_t lat, lat_min;
		bool due;

		if (c->idle)
			v->idle++;
		else
			v->busy++;
		if (!c->opened) {
			if (!c->open_err) {
				v->not_open++;
				continue;
			}
			if (local_err(c->open_err)) {
				v->open_failed_local++;
				v->local_err = c->open_err;
				continue;
			}
			if (v->open_failed++ < SHOW)
				printf("  connection %lu failed to open: %s\n", i,
				       strerror(c->open_err));
			continue;
		}
		/* Its first message never came back: the server never read it. */
		if (c->sent && !c->echoed)
			v->never_read++;
		/* A dying server's closes are its death, not its timers. */
		if (gone_from && c->closed && c->close_seen >= gone_from) {
			v->gone_closed++;
			continue;
		}
		if (!c->idle) {
			if (!c->closed)
				continue;
			v->busy_closed++;
			/* The early rule: the echo proves the server read that send. */
			if (closed_early(v, c, i, t_ns, "busy", "its last echoed send",
					 &shown_bad)) {
				v->busy_early++;
				continue;
			}
			/*
			 * Reset (an error, not EOF) with nothing echoed: its
			 * kernel dropped it before the server read it (a listen
			 * backlog that overflowed), no timer of the server's;
			 * a server that closes it with the bytes unread resets
			 * it too, and is excused with it: a reset cannot tell.
			 * An orderly close (EOF) comes from a server that had
			 * accepted it, and is judged as any other: not before
			 * its last echoed send (or connect) + T, so whether
			 * this client's next send was in before the server's
			 * deadline decides.
			 */
			next = c->echoed || !c->close_err ? next_send(c, t_ns, &nt) : NEXT_NONE;
			if (!c->echoed && c->close_err)
				v->busy_unread++;
			else if (next == NEXT_IN && !arrived(c))
				v->unproven++;
			else if (next == NEXT_IN && c->echoed)
				v->busy_in++;
			else if (next == NEXT_IN)
				v->busy_unread_eof++;
			else if (next == NEXT_AT)
				v->busy_at++;
			else
				v->busy_unkept++;
			if (shown_busy++ >= SHOW)
				continue;
			printf("  busy connection %lu closed by the server (%s) %.3f ms after its "
			       "last echoed send or connect (T %lu ms): ", i,
			       c->close_err ? strerror(c->close_err) : "EOF",
			       (double)(c->close_seen - c->acked_start) / 1e6, o->idle_ms);
			if (!c->echoed && c->close_err)
				printf("reset with nothing echoed, its kernel dropped it (or the "
				       "server closed it unread: a reset does not say)\n");
			else if (next == NEXT_IN && !arrived(c))
				printf("its %s send was in %.3f ms before the earliest deadline "
				       "by this client's clock, but %s: whether it reached the "
				       "server in time cannot be told\n", c->echoed ? "next" : "first",
				       ms_from(nt.to, nt.lo), c->close_err ? "the close was a reset"
				       : "the server's kernel had not acknowledged it");
			else if (next == NEXT_IN && c->echoed)
				printf("CLOSED BUSY, its next send was in %.3f ms before the "
				       "earliest deadline the server can have had\n",
				       ms_from(nt.to, nt.lo));
			else if (next == NEXT_IN)
				printf("CLOSED UNREAD, the server accepted it and closed it "
				       "without echoing anything, though its first send was in "
				       "%.3f ms before the earliest deadline it can have had\n",
				       ms_from(nt.to, nt.lo));
			else if (next == NEXT_AT)
				printf("its %s send was under way at the server's deadline, too "
				       "close to call (begun at %+.3f ms, in by %+.3f ms of the "
				       "earliest deadline)\n", c->echoed ? "next" : "first",
				       ms_from(nt.lo, nt.from), ms_from(nt.lo, nt.to));
			else if (next == NEXT_AFTER)
				printf("not kept busy, its %s send began T + %.3f ms after %s\n",
				       c->echoed ? "next" : "first", ms_from(nt.hi, nt.from),
				       c->echoed ? "the previous one returned" :
				       "its connect was seen");
			else
				printf("not kept busy, no send after it\n");
			continue;
		}
		if (c->late_open) {
			/*
			 * Connected after its stop time: it sent nothing, and its
			 * deadline is the server's accept, unseen here.  Only an
			 * early close (before the connect began + T) tells.
			 */
			v->late_open++;
			if (c->closed)
				(void)closed_early(v, c, i, t_ns, "idle", "its connect began",
						   &shown_bad);
			continue;
		}
		/*
		 * The server's deadline is at most its last read + T, which came
		 * before this client read the echo (or, echo missing, after the
		 * send: then the echo's time bounds nothing, the send's does).
		 */
		last = c->last_echo > c->last_send ? c->last_echo : c->last_send;
		due = last + t_ns + slack_ns + DUE_MARGIN_NS < end;
		if (c->racer) {
			/* Either side may close first; the server never early. */
			v->racers++;
			if (c->self_closed) {
				v->race_self++;
				continue;
			}
			if (!c->closed) {
				if (due) {
					v->idle_missing++;
					printf("  racing connection %lu never closed\n", i);
				}
				continue;
			}
			v->race_server_first++;
			(void)closed_early(v, c, i, t_ns, "racing", "its last send", &shown_bad);
			continue;
		}
		v->idle_judged++;
		if (!c->closed) {
			if (!due) {
				v->not_due++;
				continue;
			}
			v->idle_missing++;
			if (shown_missing++ < SHOW)
				printf("  idle connection %lu never closed: last send %.3f ms "
				       "before the end\n", i, (double)(end - c->last_send) / 1e6);
			continue;
		}
		v->idle_closed++;
		if (!c->echoed) {
			/*
			 * See the busy case: reset, its kernel dropped it; EOF,
			 * the server closed it, at fault if its first send was
			 * in before the deadline, else not judged (this client
			 * sent too late).
			 */
			if (closed_early(v, c, i, t_ns, "idle",
					 "its connect began, nothing echoed", &shown_bad))
				continue;
			if (c->close_err) {
				v->idle_unread++;
				continue;
			}
			if (next_send(c, t_ns, &nt) != NEXT_IN) {
				v->idle_unkept++;
				continue;
			}
			if (!arrived(c)) {
				v->unproven++;
				continue;
			}
			v->idle_unread_eof++;
			if (shown_bad++ < SHOW)
				printf("  idle connection %lu CLOSED UNREAD: the server accepted "
				       "it and closed it (EOF) %.3f ms after its connect began "
				       "(T %lu ms) without echoing anything, though its first "
				       "send was in %.3f ms before the earliest deadline it can "
				       "have had\n", i,
				       (double)(c->close_seen - c->acked_start) / 1e6, o->idle_ms,
				       ms_from(nt.to, nt.lo));
			continue;
		}
		/* Every send echoed: the server's reset came before the echo. */
		echo = c->echoed == c->sent && c->echo_done ? c->echo_done : c->last_send;
		lat = (int64_t)(c->close_seen - (echo + t_ns));
		v->lat[v->nlat++] = lat;
		/* At the earliest the close can have come, as measured. */
		lat_min = (int64_t)(c->close_est - (echo + t_ns));
		if (lat_min > v->late_min_max)
			v->late_min_max = lat_min;
		if ((int64_t)(c->close_seen - (c->acked_start + t_ns)) < v->margin)
			v->margin = (int64_t)(c->close_seen - (c->acked_start + t_ns));
		if (c->close_seen + EARLY_EPS_NS < c->acked_start + t_ns) {
			v->early++;
			if (shown_bad++ < SHOW)
				printf("  idle connection %lu closed EARLY: %.3f ms after its last "
				       "send (T %lu ms)\n", i,
				       (double)(c->close_seen - c->acked_start) / 1e6, o->idle_ms);
		} else if (c->sent > c->echoed && next_send(c, t_ns, &nt) == NEXT_IN &&
			   arrived(c)) {
			/*
			 * Closed before it fell idle: as a busy connection's.
			 * Without the proof, judged as an idle one below.
			 */
			v->idle_in++;
			if (shown_bad++ < SHOW)
				printf("  idle connection %lu CLOSED BUSY (%s) %.3f ms after its "
				       "last echoed send (T %lu ms), though a send it never "
				       "echoed was in %.3f ms before the earliest deadline it "
				       "can have had\n", i,
				       c->close_err ? strerror(c->close_err) : "EOF",
				       (double)(c->close_seen - c->acked_start) / 1e6, o->idle_ms,
				       ms_from(nt.to, nt.lo));
		} else if (lat_min > (int64_t)slack_ns) {
			v->late++;
			if (shown_bad++ < SHOW)
				printf("  idle connection %lu closed late: %.3f ms or more after its "
				       "last echo + T (seen %.3f ms after it)\n", i,
				       (double)lat_min / 1e6, (double)lat / 1e6);
		} else if (lat > (int64_t)slack_ns) {
			v->late_seen++;
		}
	}
	qsort(v->lat, v->nlat, sizeof(*v->lat), cmp_i64);
}

/*
 * Is the server's port refusing connects (the server gone)?  Waits 5 ms at
 * most: a live server with a full backlog drops the SYN, and a blocking
 * connect would stall this loop for the retransmit.  On loopback a
 * refusal comes back at once.
 */
static bool server_refuses(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	struct pollfd pfd = { .fd = fd, .events = POLLOUT };
	socklen_t len = sizeof(int);
	int err = 0;

	if (fd < 0)
		return false;
	if (connect(fd, (struct sockaddr *)&server_addr, sizeof(server_addr)))
		err = errno;
	if (err == EINPROGRESS) {
		err = 0;
		if (poll(&pfd, 1, 5) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len))
			err = 0;
	}
	close(fd);
	return err == ECONNREFUSED;
}

/* "; " between the reasons of a verdict. */
__attribute__((format(printf, 3, 4)))
static void add_reason(char *buf, size_t size, const char *fmt, ...)
{
	size_t len = strlen(buf);
	va_list ap;

	if (len && len + 2 < size) {
		memcpy(buf + len, "; ", 3);
		len += 2;
	}
	va_start(ap, fmt);
	vsnprintf(buf + len, size - len, fmt, ap);
	va_end(ap);
}

/* A line on stderr every --progress seconds, so that a long run shows it is alive. */
static void progress(uint64_t elapsed_ns, unsigned long nopened, unsigned long conns,
		     unsigned long connecting, uint64_t sends)
{
	fprintf(stderr, "kairos-idle-load: %.0f s: %lu open, %lu opened of %lu (%lu connecting), "
		"%" PRIu64 " sends, closed by the server: %lu idle, %lu busy\n", elapsed_ns / 1e9,
		nlive, nopened, conns, connecting, sends, srv_closed_idle, srv_closed_busy);
}

int main(int argc, char **argv)
{
	struct epoll_event evs[MAXEV];
	struct opts o;
	struct verdict v;
	struct lconn *cs;
	struct fifo q;
	struct cpu cpu0, cpu1;
	struct rusage ru;
	struct rng rng;
	uint64_t t_start, t_end, window_ns, *pick, stalls = 0, sends = 0;
	uint64_t sent = 0, echoed = 0;
	unsigned long nidle, nracers, next_open = 0, connecting = 0, nopened = 0;
	uint64_t stall_max = 0, stall_limit;
	struct sleeper sl = { 0 };
	const char *verdict, *gone_why = NULL;
	char why[1024] = "";
	int rc, wait_cap = -1;
	uint32_t *racers;
	uint64_t t_opened = 0, turn, look_called = 0, t_look_end, gone_from = 0;
	uint64_t next_progress = UINT64_MAX, last_probe = 0, suspect_at = 0, suspect_until = 0;
	int epfd;

	parse(argc, argv, &o);
	raise_nofile(o.conns + 16);
	signal(SIGPIPE, SIG_IGN);
	server_addr.sin_family = AF_INET;
	server_addr.sin_port = htons((uint16_t)o.port);
	server_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	nsources = o.sources;

	/*
	 * Idle connections stop sending within the first part of the run, so
	 * that each one's close is due (T + slack after its last send) before
	 * the end, with room for a few intervals of scheduling delay.
	 */
	if (o.duration_s * 1000 <= o.idle_ms + o.slack_ms + 2 * o.interval_ms + 100) {
		fprintf(stderr, "kairos-idle-load: --duration must exceed T + slack + "
			"2 intervals + 100 ms (%lu ms)\n",
			o.idle_ms + o.slack_ms + 2 * o.interval_ms + 100);
		return 2;
	}
	window_ns = (o.duration_s * 1000 - o.idle_ms - o.slack_ms - 2 * o.interval_ms - 100) * MS;

	cs = calloc(o.conns, sizeof(*cs));
	pick = calloc(o.conns, sizeof(*pick));
	q.cap = (uint32_t)o.conns;
	q.head = q.len = 0;
	q.idx = calloc(o.conns, sizeof(*q.idx));
	q.due = calloc(o.conns, sizeof(*q.due));
	if (!cs || !pick || !q.idx || !q.due)
		die("calloc", ENOMEM);

	/* Exactly round(F * C) idle connections, chosen by a partial shuffle. */
	rng.s = o.seed;
	nidle = (unsigned long)(o.idle_frac * (double)o.conns + 0.5);
	for (unsigned long i = 0; i < o.conns; i++) {
		cs[i].fd = -1;
		pick[i] = i;
	}
	for (unsigned long i = 0; i < nidle; i++) {
		unsigned long j = i + rng_next(&rng) % (o.conns - i);
		uint64_t t = pick[i];

		pick[i] = pick[j];
		pick[j] = t;
		cs[pick[i]].idle = true;
	}
	/* The picks are in random order: the first ones race. */
	nracers = (unsigned long)(o.race_frac * (double)nidle + 0.5);
	racers = calloc(nracers + 1, sizeof(*racers));
	if (!racers)
		die("calloc", ENOMEM);
	for (unsigned long i = 0; i < nracers; i++) {
		struct lconn *c = &cs[pick[i]];

		c->racer = true;
		/* From 1 ms before T to 2 ms after: the server fires just after T. */
		c->race_at = (int64_t)(rng_next(&rng) % (3 * MS)) - (int64_t)MS;
		racers[i] = (uint32_t)pick[i];
	}
	free(pick);

	epfd = epoll_create1(EPOLL_CLOEXEC);
	if (epfd < 0)
		die("epoll_create1", errno);
	/* This thread's own: read in the loop, which runs on this thread. */
	schedstat_fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
	if (schedstat_fd >= 0) {
		uint64_t delay, cpu;

		if (!sched_delay_ns(&delay) || !thread_cpu_ns(&cpu)) {
			close(schedstat_fd);
			schedstat_fd = -1;
		}
	}
	cpu0 = server_cpu();
	if (!cpu0.ok) {
		fprintf(stderr, "kairos-idle-load: no STATS answer from 127.0.0.1:%u\n", o.port);
		return 2;
	}
	printf("load: %lu connections (%lu idle) from %lu address%s, interval %lu ms, T %lu ms, "
	       "slack %lu ms, %lu s, seed %llu\n", o.conns, nidle, o.sources,
	       o.sources > 1 ? "es" : "", o.interval_ms, o.idle_ms, o.slack_ms, o.duration_s,
	       (unsigned long long)o.seed);
	if (schedstat_fd < 0) {
		/*
		 * No measure of how long a wake-up took: a blocking wait's
		 * start is all that bounds a close it reports, so keep the
		 * waits short enough for that bound to mean something.
		 */
		wait_cap = o.slack_ms / 4 ? (int)(o.slack_ms / 4) : 1;
		printf("load: no /proc/thread-self/schedstat: waits capped at %d ms\n", wait_cap);
	}
	fflush(stdout);

	if (pthread_create(&sl.thread, NULL, sleeper_main, &sl))
		die("pthread_create", EAGAIN);
	t_start = now_ns();
	t_end = t_start + o.duration_s * 1000000000ull;
	if (o.progress_s && !o.quiet)
		next_progress = t_start + o.progress_s * 1000000000ull;
	for (unsigned long i = 0; i < o.conns; i++)
		if (cs[i].idle)
			cs[i].stop_at = t_start + rng_next(&rng) % window_ns;

	turn = now_ns();
	for (;;) {
		uint64_t now = now_ns();
		unsigned long live_before = nlive, busy_before = srv_closed_busy;
		unsigned long closed_before = srv_closed_idle + srv_closed_busy, closes;
		int timeout, n;

		if (now >= t_end)
			break;
		if (now >= next_progress) {
			progress(now - t_start, nopened, o.conns, connecting, sends);
			next_progress += o.progress_s * 1000000000ull;
			if (next_progress <= now)	/* a stall of several periods: one line */
				next_progress = now + o.progress_s * 1000000000ull;
		}
		/*
		 * Start connects without waiting for them, so that a slow
		 * accept on the server side (a SYN dropped from a full backlog
		 * waits a second for its retransmit) never stalls the sends
		 * and reads of the connections already open.
		 */
		for (int b = 0; b < CONNECT_TURN && next_open < o.conns &&
				connecting < CONNECTING_MAX; b++) {
			if (start_connect(epfd, &cs[next_open], next_open))
				connecting++;
			else if (cs[next_open].open_err == ECONNREFUSED)
				gone_why = "a connect was refused";
			next_open++;
		}
		now = now_ns();
		while (q.len && q.due[q.head] <= now) {
			uint32_t i = fifo_pop(&q);
			struct lconn *c = &cs[i];

			if (c->closed)
				continue;
			if (c->idle && now >= c->stop_at) {
				c->stopped = true;
				continue;
			}
			if (!send_one(epfd, c, &stalls))
				continue;
			sends++;
			/* Same interval for all: pushing now + interval keeps order. */
			fifo_push(&q, i, now_ns() + o.interval_ms * MS);
		}
		now = now_ns();
		{
			uint64_t until = t_end < next_progress ? t_end : next_progress;

			/* Racers close themselves about when the server's T ends. */
			for (unsigned long r = 0; r < nracers; r++) {
				struct lconn *c = &cs[racers[r]];
				uint64_t due = c->last_send + o.idle_ms * MS + (uint64_t)c->race_at;

				if (!c->stopped || c->fd < 0)
					continue;
				if (now >= due) {
					epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
					close(c->fd);
					c->fd = -1;
					c->self_closed = true;
					nlive--;
				} else if (due < until) {
					until = due;
				}
			}
			if (q.len && q.due[q.head] < until)
				until = q.due[q.head];
			if (suspect_until > now && last_probe + PROBE_GAP_NS < until)
				until = last_probe + PROBE_GAP_NS;	/* ask the port again */
			timeout = until > now ? (int)((until - now + MS - 1) / MS) : 0;
			if (next_open < o.conns && connecting < CONNECTING_MAX)
				timeout = 0;	/* more connects to start */
			if (wait_cap >= 0 && timeout > wait_cap)
				timeout = wait_cap;
		}
		/*
		 * A stall of this loop: a wait that returned later than asked,
		 * or a turn whose work took long.  Either delays sends (a busy
		 * connection may look idle) and the noticing of closes.
		 *
		 * Look first with a zero timeout.  Only when that finds nothing
		 * block: then that look, just before the wait, is the last look
		 * without any close the wait reports, and the wake-up is
		 * measured (see wake_after).
		 */
		{
			uint64_t called = now_ns(), woke, asked = called;
			uint64_t delay0 = 0, delay1, tcpu0 = 0, tcpu1, busy;
			bool measured;

			if (now > turn && now - turn > stall_max)
				stall_max = now - turn;
			n = epoll_wait(epfd, evs, MAXEV, 0);
			look_called = called;
			if (n == 0 && timeout > 0) {
				cur_turn++;
				look_turn = cur_turn;
				look_at = called;
				/*
				 * Read outside called..woke, run_delay outermost:
				 * the differences then hold all the time this
				 * thread was runnable or running in between, to
				 * the nanosecond; the rest it slept.  The CPU
				 * time is the thread clock's, not schedstat's
				 * (see sched_delay_ns()).  Left unmeasured is
				 * the wake-up's own latency: from the event's
				 * arrival in its socket to this thread's being
				 * queued for a CPU (the rest of the softirq that
				 * delivered it; an interrupt to wake an idle
				 * CPU) it is neither runnable nor running:
				 * WAKE_EPS_NS.
				 */
				measured = sched_delay_ns(&delay0) && thread_cpu_ns(&tcpu0);
				called = now_ns();
				asked = called + (uint64_t)timeout * MS;
				n = epoll_wait(epfd, evs, MAXEV, timeout);
				woke = now_ns();
				if (n > 0 && measured && thread_cpu_ns(&tcpu1) &&
				    sched_delay_ns(&delay1) && delay1 >= delay0 && tcpu1 >= tcpu0) {
					busy = delay1 - delay0 + tcpu1 - tcpu0 + WAKE_EPS_NS;
					if (woke - called > busy)
						wake_after = woke - busy;
				}
				look_called = called;
			} else {
				woke = now_ns();
			}
			if (woke > asked && woke - asked > stall_max)
				stall_max = woke - asked;
			turn = woke;
		}
		if (n < 0) {
			wake_after = 0;
			if (errno == EINTR)
				continue;
			die("epoll_wait", errno);
		}
		cur_turn++;
		for (int e = 0; e < n; e++) {
			uint32_t i = (uint32_t)evs[e].data.u64;
			struct lconn *c = &cs[i];

			if (c->fd < 0)
				continue;
			if (!c->connecting) {
				on_readable(epfd, c);
				c->seen_turn = cur_turn;
				continue;
			}
			c->seen_turn = cur_turn;
			connecting--;
			if (!finish_connect(epfd, c, i)) {
				if (c->open_err == ECONNREFUSED)
					gone_why = "a connect was refused";
				continue;
			}
			nlive++;
			if (++nopened == o.conns)
				t_opened = now_ns();
			/*
			 * An idle connection connected after its stop time sends
			 * nothing: a send now could leave its close not due by
			 * the end.  judge() only checks it for an early close.
			 */
			if (c->idle && c->last_send >= c->stop_at) {
				c->stopped = c->late_open = true;
				continue;
			}
			/* Every other connection sends once, idle ones included. */
			if (send_one(epfd, c, &stalls)) {
				sends++;
				fifo_push(&q, i, c->last_send + o.interval_ms * MS);
			}
		}
		wake_after = 0;
		if (n < MAXEV) {
			look_turn = cur_turn;
			look_at = look_called;
		}
		/*
		 * A server that died closes every connection and refuses
		 * connects: stop there, rather than judge its death as busy
		 * connections closed and idle ones closed early.  A close that
		 * looks like one (a busy connection's, half or more of those
		 * open at once, the last one open) has its port asked every
		 * PROBE_GAP_NS for SUSPECT_NS: a dying process closes its
		 * connections before its listening socket, or after.
		 */
		closes = srv_closed_idle + srv_closed_busy - closed_before;
		if (closes && (srv_closed_busy > busy_before || (live_before && !nlive) ||
			       (closes >= 2 && closes * 2 >= live_before))) {
			if (now_ns() > suspect_until)
				suspect_at = turn;
			suspect_until = now_ns() + SUSPECT_NS;
		}
		if (!gone_why && now_ns() < suspect_until &&
		    now_ns() - last_probe >= PROBE_GAP_NS) {
			last_probe = now_ns();
			if (server_refuses())
				gone_why = "connections closed at once and its port refuses connects";
		}
		if (gone_why) {
			/*
			 * Closes seen since just before the first sign (of this
			 * suspicion, not an old one that passed) are its death.
			 */
			gone_from = (suspect_at && now_ns() < suspect_until ? suspect_at : turn) -
				    GONE_WINDOW_NS;
			break;
		}
	}
	/* Closes already delivered but not yet read count too. */
	t_look_end = now_ns();
	for (;;) {
		int n = epoll_wait(epfd, evs, MAXEV, 0);

		if (n < 0)
			break;
		cur_turn++;
		for (int e = 0; e < n; e++) {
			struct lconn *c = &cs[evs[e].data.u64];

			if (c->fd >= 0 && !c->connecting)
				on_readable(epfd, c);
			c->seen_turn = cur_turn;
		}
		if (n < MAXEV)
			break;
	}

	atomic_store_explicit(&sl.stop, true, memory_order_relaxed);
	if (pthread_join(sl.thread, NULL))
		die("pthread_join", EINVAL);
	/* Before judging: a server that died late in the run refuses STATS. */
	cpu1 = server_cpu();
	if (!gone_why && !cpu1.ok && cpu1.err == ECONNREFUSED) {
		gone_why = "its port refused STATS at the end";
		/* It died about its last close, or after everything was seen. */
		for (unsigned long i = 0; i < o.conns; i++)
			if (cs[i].closed && cs[i].close_seen > gone_from)
				gone_from = cs[i].close_seen;
		gone_from = (gone_from ? gone_from : t_look_end) - GONE_WINDOW_NS;
	}
	judge(&o, cs, t_look_end, gone_from, &v);
	for (unsigned long i = 0; i < o.conns; i++) {
		sent += cs[i].sent;
		echoed += cs[i].echoed;
		if (cs[i].fd >= 0)
			close(cs[i].fd);
	}
	if (o.quit_server && !gone_why)
		quit_server();
	getrusage(RUSAGE_SELF, &ru);

	printf("connections: %lu opened of %lu (%lu busy, %lu idle), %lu failed to open, "
	       "%lu not open by the end\n", nopened, o.conns, v.busy, v.idle,
	       v.open_failed + v.open_failed_local, v.not_open);
	if (t_opened)
		printf("all open after %.1f ms\n", (double)(t_opened - t_start) / 1e6);
	printf("idle closed by server: %lu of %lu (early %lu, late %lu, never %lu, not due %lu, "
	       "closed busy %lu, closed unread %lu)\n", v.idle_closed, v.idle_judged,
	       v.early - v.busy_early, v.late, v.idle_missing, v.not_due, v.idle_in,
	       v.idle_unread_eof);
	if (v.late_open)
		printf("idle connections opened after their stop time: %lu (sent nothing; only "
		       "checked for an early close)\n", v.late_open);
	printf("busy closed by server: %lu", v.busy_closed);
	if (v.busy_closed)
		printf(" (early %lu, closed busy %lu, closed unread %lu, not kept busy by this "
		       "client %lu, a send under way at the deadline %lu, reset unread %lu)",
		       v.busy_early, v.busy_in, v.busy_unread_eof, v.busy_unkept, v.busy_at,
		       v.busy_unread);
	printf("\n");
	if (v.racers)
		printf("racing closes: of %lu idle connections set to close themselves near T, "
		       "%lu did and the server closed %lu first\n", v.racers, v.race_self,
		       v.race_server_first);
	printf("close lateness (seen - (echo + T)): min %.3f p50 %.3f p99 %.3f max %.3f ms\n",
	       v.nlat ? (double)v.lat[0] / 1e6 : 0.0, pct_ms(v.lat, v.nlat, 0.50),
	       pct_ms(v.lat, v.nlat, 0.99), v.nlat ? (double)v.lat[v.nlat - 1] / 1e6 : 0.0);
	if (v.nlat)
		printf("close lateness at the earliest the close can have come (the last look "
		       "without it - (echo + T)): max %.3f ms\n", (double)v.late_min_max / 1e6);
	if (v.late_seen)
		printf("seen past the slack only because this client's loop stalled: %lu "
		       "(not counted as late)\n", v.late_seen);
	if (v.nlat)
		printf("closest to early: seen %.3f ms after last echoed send + T (early below -%.3f)\n",
		       (double)v.margin / 1e6, EARLY_EPS_NS / 1e6);
	printf("traffic: %llu sends, %llu bytes sent, %llu echoed, %llu stalled sends\n",
	       (unsigned long long)sends, (unsigned long long)sent,
	       (unsigned long long)echoed, (unsigned long long)stalls);
	if (cpu1.ok)
		printf("server cpu during run: user %.3f s, system %.3f s\n",
		       (double)(cpu1.utime_us - cpu0.utime_us) / 1e6,
		       (double)(cpu1.stime_us - cpu0.stime_us) / 1e6);
	else
		printf("server cpu during run: unavailable (no STATS answer at the end)\n");
	if (cpu1.ok && cpu1.accept_paused > cpu0.accept_paused)
		printf("server accept paused: %llu times (out of descriptors)\n",
		       cpu1.accept_paused - cpu0.accept_paused);
	if (v.never_read && !gone_why) {
		printf("server never read %lu connections (their first message never came back): ",
		       v.never_read);
		if (cpu1.ok && cpu1.accept_paused > cpu0.accept_paused)
			printf("its fd limit? (it paused accepting)\n");
		else
			printf("its fd limit, or a listen backlog that overflowed "
			       "(net.core.somaxconn)?\n");
	}
	if (v.idle_unread)
		printf("idle closed by server before it read anything: %lu (reset by its kernel: "
		       "not judged for lateness)\n", v.idle_unread);
	if (v.unproven)
		printf("closed with a send in before the deadline by this client's clock, not "
		       "shown to have reached the server (a reset, or bytes its kernel had not "
		       "acknowledged): %lu (not judged)\n", v.unproven);
	if (v.idle_unkept)
		printf("idle closed by server (EOF) before it read anything: %lu (their first "
		       "send not in before the earliest deadline: not judged)\n", v.idle_unkept);
	if (v.gone_closed)
		printf("closed as the server went: %lu (not judged)\n", v.gone_closed);
	printf("client cpu: user %.3f s, system %.3f s\n",
	       ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6,
	       ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6);
	printf("stalls: client loop %.3f ms, client sleeper %.3f ms", stall_max / 1e6,
	       sl.max_ns / 1e6);
	if (cpu1.ok)
		printf(", server loop turn %.3f ms, server fire-to-close hand-off %.3f ms",
		       cpu1.turn_max_us / 1e3, cpu1.handoff_max_us / 1e3);
	printf("\n");

	/*
	 * What the server did fails the run; what this client could not do,
	 * or the machine held up, makes it inconclusive (see the top).  An
	 * early close is never excused: a stall only delays.  A late close
	 * already allows for this loop's measured delays, and a missing one
	 * was due (its lateness is over the slack and the margin), so only
	 * the sleeper's stall, the machine not running threads at all,
	 * excuses them: the server's threads were as likely stopped too.
	 */
	stall_limit = o.slack_ms * MS / 2;
	if (gone_why)
		add_reason(why, sizeof(why), "server gone: %s", gone_why);
	if (v.early)
		add_reason(why, sizeof(why), "%lu closes early", v.early);
	if (v.busy_in + v.idle_in)
		add_reason(why, sizeof(why), "%lu closed busy (a send it never echoed was in "
			   "before its deadline)", v.busy_in + v.idle_in);
	if (v.busy_unread_eof + v.idle_unread_eof)
		add_reason(why, sizeof(why), "%lu closed unread (accepted and closed, EOF, with "
			   "nothing echoed though a send was in before its deadline)",
			   v.busy_unread_eof + v.idle_unread_eof);
	if (v.open_failed)
		add_reason(why, sizeof(why), "%lu connects failed at the server", v.open_failed);
	if ((v.late || v.idle_missing) && sl.max_ns <= stall_limit) {
		if (v.late)
			add_reason(why, sizeof(why), "%lu closes late", v.late);
		if (v.idle_missing)
			add_reason(why, sizeof(why), "%lu due closes missing%s", v.idle_missing,
				   v.never_read ? " (the server never read some: its fd limit?)" : "");
	}
	if (why[0]) {
		verdict = "FAIL";
		rc = 1;
	} else if (!nopened) {
		fprintf(stderr, "kairos-idle-load: no connection opened (%lu failed here%s%s, %lu not "
			"open by the end): raise the fd limit (ulimit -n), lower --conns or raise "
			"--duration\n", v.open_failed_local, v.open_failed_local ? ": " : "",
			v.open_failed_local ? strerror(v.local_err) : "", v.not_open);
		rc = 2;
		verdict = NULL;
	} else {
		if (v.open_failed_local)
			add_reason(why, sizeof(why), "%lu connects failed here (%s): raise the fd "
				   "limit (ulimit -n), lower --conns or add --sources",
				   v.open_failed_local, strerror(v.local_err));
		if (v.not_open)
			add_reason(why, sizeof(why), "%lu connections not open by the end: raise "
				   "--duration or lower --conns", v.not_open);
		if (v.busy_unkept + v.idle_unkept)
			add_reason(why, sizeof(why), "%lu connections closed with no send "
				   "begun within T of the last echoed one's return (or the "
				   "connect's): this client did not keep them busy (its loop "
				   "stalled %.3f ms)", v.busy_unkept + v.idle_unkept,
				   stall_max / 1e6);
		if (v.busy_at)
			add_reason(why, sizeof(why), "%lu busy connections closed with a send "
				   "under way at the server's deadline: too close to call",
				   v.busy_at);
		if (v.unproven)
			add_reason(why, sizeof(why), "%lu connections closed with a send in before "
				   "the deadline by this client's clock that the server's kernel "
				   "had not acknowledged (or a reset): whether it arrived in time "
				   "cannot be told", v.unproven);
		if (v.busy_unread || v.idle_unread)
			add_reason(why, sizeof(why), "%lu connections reset before the server "
				   "read anything (by its kernel: a listen backlog that "
				   "overflowed?)", v.busy_unread + v.idle_unread);
		if (v.late || v.idle_missing)
			add_reason(why, sizeof(why), "the machine stalled this client %.3f ms, over "
				   "half the slack: run it again on a quieter machine",
				   sl.max_ns / 1e6);
		verdict = why[0] ? "INCONCLUSIVE" : "PASS";
		rc = why[0] ? 3 : 0;
	}
	if (verdict && why[0])
		printf("verdict: %s (%s)\n", verdict, why);
	else if (verdict)
		printf("verdict: %s\n", verdict);
	free(v.lat);
	free(racers);
	free(cs);
	free(q.idx);
	free(q.due);
	close(epfd);
	return rc;
}
