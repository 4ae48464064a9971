/* SPDX-License-Identifier: MIT */
/*
 * kairos-idle-server - a TCP echo server on 127.0.0.1 that closes every
 * connection left idle for longer than T, with one kairos timer per
 * connection: armed at accept, pushed later (kairos_reset) on every read,
 * cancelled when the peer closes.
 *
 *	kairos-idle-server [--port N] [--idle MS] [--duration S] [--progress S]
 *			   [--quiet]
 *
 * The first line on stdout is "port N", the port it listens on (--port 0,
 * the default, lets the kernel choose), so that a script can start a load
 * client against it.  It stops after --duration seconds (0: never), on
 * SIGINT or SIGTERM, or when a connection sends "QUIT\n" as its first bytes,
 * and then prints a report (connections, CPU, the kairos counters) to
 * stdout.  Every --progress seconds (default 10; 0 or --quiet: never) it
 * prints one line of counters to stderr, so that a long run shows it is
 * alive; a run shorter than that prints none.  A connection whose first
 * bytes are "STATS\n" is answered with one line of counters and its CPU
 * time:
 *
 *	stats accepted A idle I peer P open O utime_us U stime_us S
 *	      turn_max_us W handoff_max_us H accept_paused X
 *
 * (on one line; W: the longest loop turn, H: the longest lateness of an
 * idle timer's callback past its deadline, X: how often accept4() ran out
 * of descriptors and accepting paused, which leaves connections unread in
 * the backlog: a client sees them never echoed and never closed).
 *
 * Exit status: 0; 1 when kairos breaks a promise (an early callback, a
 * cancel or reset of a live timer that fails, armed != fired + cancelled +
 * drained + pending after destroy, a callback count that differs from
 * "fired") or a kairos_arm_opts() failed; 2 for a usage or setup error.
 *
 * One thread runs one epoll set: the listening socket, the connections, a
 * signalfd, and the fd of the one kairos queue that every idle timer is
 * armed for (kairos_arm_opts() with .queue).  An expired timer waits in the
 * queue until the loop runs it (kairos_queue_run(), after each batch of
 * events), so its callback runs on the loop thread and closes and frees the
 * connection itself.  Nothing is locked, handed off or tagged with a
 * generation, because:
 *  - no callback runs while the loop works on a connection, and none runs
 *    while events of the batch are left, so no event names a freed one;
 *  - kairos_cancel() at peer close returns 0, even for an expiry waiting in
 *    the queue, so the callback never runs and the connection is freed at
 *    once (-EBUSY and -ENOENT cannot happen: callbacks run only here);
 *  - kairos_reset() on a read returns 0 too: an expiry that waits untaken is
 *    withdrawn and the timer armed again, so a connection that the loop
 *    reads before it runs the queue is kept however late the loop runs.
 *
 * Idle means no bytes for T, not "no read for T".  The loop does not read
 * every socket that has bytes before each run of the queue: epoll hands out
 * MAXEV ready sockets at a time, and a loop stopped in mid-batch (the
 * machine busy) resumes past the deadlines of the sockets it read just
 * before, with their new bytes unread.  So a callback whose socket holds
 * unread bytes (FIONREAD) arms a new timer instead of closing.  One batch as
 * large as the fd set, read whole before each run, would still fail a loop
 * stopped mid-batch, and under load would hold every idle close back by up
 * to a pass over all the sockets.
 */
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <kairos/kairos.h>

#include "opt.h"

#define MS		1000000ull
#define RXBUF		4096
#define RUN_MAX		1024	/* callbacks per turn: I/O goes on under a burst */
#define ACCEPT_MAX	64	/* accepts per turn (see accept_some()) */
#define MAXEV		256	/* events per turn */

struct conn {
	int fd;			/* -1: closed, freed by its callback (see close_peer) */
	bool first;		/* no bytes read yet (control words are checked) */
	kairos_id timer;
	uint64_t deadline_ns;	/* read before the arm or reset: <= the timer's */
	struct conn *prev, *next;	/* every conn not yet freed */
};

struct server {
	struct kairos *k;
	struct kairos_timer_opts opts;	/* .queue: the loop's queue */
	uint64_t idle_ns;
	int epfd, lfd, sfd, qfd;
	struct conn *conns;
	struct epoll_event evs[MAXEV];
	uint64_t accepted, closed_idle, closed_peer, open;
	uint64_t peer_reset;	/* peer closes seen as an error (ECONNRESET...) */
	uint64_t closed_error;	/* closed at accept: no memory or no timer */
	uint64_t callbacks, early, broken;	/* broken: a cancel or reset failed */
	uint64_t revived;	/* expired with bytes unread: kept, new timer */
	uint64_t late_max_ns;	/* callback start - deadline */
	uint64_t turn_max_ns;	/* longest loop turn (work between waits) */
	uint64_t arm_failed, accept_paused, echo_short;
	uint64_t listen_resume_ns;	/* 0: accepting; else when to retry */
	bool quit, quiet;
};

/* Tags of the epoll entries that are not connections. */
static char tag_listen, tag_signal, tag_queue;

/* The one server; callbacks reach it here (their arg is the connection). */
static struct server *idle_server;

/* A failed setup call: "kairos-idle-server: WHAT: <strerror>", exit 2. */
#define die(what, err)	opt_fail(what, "%s", strerror(err))

/* CLOCK_MONOTONIC, the clock of a service created with the defaults. */
static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void ep_ctl(struct server *sv, int op, int fd, uint32_t events, void *tag)
{
	struct epoll_event ev = { .events = events, .data.ptr = tag };

	if (epoll_ctl(sv->epfd, op, fd, &ev))
		die("epoll_ctl", errno);
}

/* Closes @c's socket (which leaves the epoll set: it is never dup'ed). */
static void conn_close(struct server *sv, struct conn *c)
{
	close(c->fd);
	c->fd = -1;
	sv->open--;
}

static void conn_free(struct server *sv, struct conn *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		sv->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	free(c);
}

/* Runs on the loop thread, from kairos_queue_run(): no read of @c for T. */
static void on_idle(void *arg, kairos_id id, int status)
{
	struct server *sv = idle_server;
	struct conn *c = arg;
	uint64_t now = now_ns();
	int unread = 0, rc;

	(void)id;
	(void)status;	/* always 1: a one-shot, and destroy drops */
	sv->callbacks++;
	if (now < c->deadline_ns)
		sv->early++;
	else if (now - c->deadline_ns > sv->late_max_ns)
		sv->late_max_ns = now - c->deadline_ns;
	if (c->fd >= 0 && ioctl(c->fd, FIONREAD, &unread) == 0 && unread > 0) {
		/* Not idle: the loop has yet to read its bytes (see the top). */
		c->deadline_ns = now + sv->idle_ns;
		rc = kairos_arm_opts(sv->k, sv->idle_ns, &sv->opts, on_idle, c, &c->timer);
		if (rc == 0) {
			sv->revived++;
			return;
		}
		fprintf(stderr, "kairos-idle-server: kairos_arm_opts: %s\n", strerror(-rc));
		sv->arm_failed++;
	}
	if (c->fd >= 0) {
		sv->closed_idle++;
		conn_close(sv, c);
	}
	conn_free(sv, c);
}

/* The peer closed (or failed): cancel the timer, then close and free. */
static void close_peer(struct server *sv, struct conn *c, bool error)
{
	int rc = kairos_cancel(sv->k, c->timer);

	/* A peer that closes with echoes unread sends a reset: still a close. */
	if (error)
		sv->peer_reset++;
	sv->closed_peer++;
	conn_close(sv, c);
	if (rc == 0) {
		conn_free(sv, c);
		return;
	}
	/* Cannot happen (see the top); should the callback still run, it frees @c. */
	fprintf(stderr, "kairos-idle-server: kairos_cancel: %s\n", strerror(-rc));
	sv->broken++;
}

/* The first bytes of a connection may be a control word. */
static bool control(struct server *sv, struct conn *c, const char *buf, ssize_t n)
{
	struct rusage ru;
	char line[256];

	if (n == 5 && !memcmp(buf, "QUIT\n", 5))
		return sv->quit = true;
	if (n != 6 || memcmp(buf, "STATS\n", 6))
		return false;
	getrusage(RUSAGE_SELF, &ru);
	snprintf(line, sizeof(line), "stats accepted %llu idle %llu peer %llu open %llu "
		 "utime_us %lld stime_us %lld turn_max_us %llu handoff_max_us %llu "
		 "accept_paused %llu\n",
		 (unsigned long long)sv->accepted, (unsigned long long)sv->closed_idle,
		 (unsigned long long)sv->closed_peer, (unsigned long long)sv->open,
		 (long long)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec,
		 (long long)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec,
		 (unsigned long long)sv->turn_max_ns / 1000,
		 (unsigned long long)sv->late_max_ns / 1000,
		 (unsigned long long)sv->accept_paused);
	(void)send(c->fd, line, strlen(line), MSG_NOSIGNAL);
	return true;
}

static void conn_readable(struct server *sv, struct conn *c)
{
	char buf[RXBUF];
	ssize_t n;
	int rc;

	n = recv(c->fd, buf, sizeof(buf), 0);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		close_peer(sv, c, n < 0);
		return;
	}
	/*
	 * Activity: push the deadline T later.  0 even when the timer expired
	 * and waits in the queue: the expiry is withdrawn.
	 */
	c->deadline_ns = now_ns() + sv->idle_ns;
	rc = kairos_reset(sv->k, c->timer, sv->idle_ns);
	if (rc) {
		fprintf(stderr, "kairos-idle-server: kairos_reset: %s\n", strerror(-rc));
		sv->broken++;
	}
	if (c->first) {
		c->first = false;
		if (control(sv, c, buf, n))
			return;
	}
	/* Echo.  The client reads every echo, so a short send is only counted. */
	if (send(c->fd, buf, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) != n)
		sv->echo_short++;
}

/*
 * Accepts up to ACCEPT_MAX connections.  Accepting until EAGAIN while a
 * client keeps connecting would hold the turn as long, reading no socket
 * and running no expired timer meanwhile.
 */
static void accept_some(struct server *sv)
{
	for (int i = 0; i < ACCEPT_MAX; i++) {
		int fd = accept4(sv->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		struct conn *c;
		int one = 1, rc;

		if (fd < 0) {
			if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)
				return;
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			    errno == ENOMEM) {
				/* Out of descriptors: stop accepting for 10 ms. */
				ep_ctl(sv, EPOLL_CTL_MOD, sv->lfd, 0, &tag_listen);
				sv->listen_resume_ns = now_ns() + 10 * MS;
				sv->accept_paused++;
				return;
			}
			die("accept4", errno);
		}
		sv->accepted++;
		c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			sv->closed_error++;
			continue;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c->fd = fd;
		c->first = true;
		c->deadline_ns = now_ns() + sv->idle_ns;
		rc = kairos_arm_opts(sv->k, sv->idle_ns, &sv->opts, on_idle, c, &c->timer);
		if (rc) {
			fprintf(stderr, "kairos-idle-server: kairos_arm_opts: %s\n",
				strerror(-rc));
			sv->arm_failed++;
			sv->closed_error++;
			close(fd);
			free(c);
			continue;
		}
		c->next = sv->conns;
		if (c->next)
			c->next->prev = c;
		sv->conns = c;
		sv->open++;
		ep_ctl(sv, EPOLL_CTL_ADD, fd, EPOLLIN | EPOLLRDHUP, c);
	}
}

static int listen_on(uint16_t port, uint16_t *bound)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	socklen_t len = sizeof(sa);
	int fd, one = 1;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket", errno);
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)))
		die("bind 127.0.0.1", errno);
	/* The kernel caps the backlog at net.core.somaxconn. */
	if (listen(fd, 65535))
		die("listen", errno);
	if (getsockname(fd, (struct sockaddr *)&sa, &len))
		die("getsockname", errno);
	*bound = ntohs(sa.sin_port);
	return fd;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kairos-idle-server [options]   (--opt N or --opt=N)\n"
		"  --port N       TCP port on 127.0.0.1 (0..65535; default 0: the kernel\n"
		"                 picks; the first stdout line says \"port N\")\n"
		"  --idle MS      idle timeout T in ms (1..3600000, default 1000)\n"
		"  --duration S   exit after S seconds (0..86400; default 0: on SIGINT,\n"
		"                 SIGTERM or a \"QUIT\\n\" control connection)\n"
		"  --progress S   a line of counters on stderr every S seconds\n"
		"                 (0..86400; default 10; 0: none)\n"
		"  --quiet        no report at exit, no progress lines\n");
}

static void report(struct server *sv, const struct kairos_stats *st, int drained,
		   uint64_t open_at_exit, bool ok)
{
	struct rusage ru;
	uint64_t ends = st->fired + st->cancelled + st->drained + st->pending;

	getrusage(RUSAGE_SELF, &ru);
	printf("connections: accepted %llu, closed idle %llu, closed by peer %llu "
	       "(%llu with an error), not armed %llu, open at exit %llu\n",
	       (unsigned long long)sv->accepted, (unsigned long long)sv->closed_idle,
	       (unsigned long long)sv->closed_peer, (unsigned long long)sv->peer_reset,
	       (unsigned long long)sv->closed_error, (unsigned long long)open_at_exit);
	printf("promises: failed cancels and resets %llu, early callbacks %llu; expired with "
	       "bytes unread %llu, accept paused %llu, short echoes %llu\n",
	       (unsigned long long)sv->broken, (unsigned long long)sv->early,
	       (unsigned long long)sv->revived,
	       (unsigned long long)sv->accept_paused, (unsigned long long)sv->echo_short);
	printf("loop: longest turn %.3f ms, longest idle close after its deadline %.3f ms\n",
	       sv->turn_max_ns / 1e6, sv->late_max_ns / 1e6);
	printf("cpu: user %.3f s, system %.3f s\n",
	       ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6,
	       ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6);
	printf("kairos: armed %llu fired %llu cancelled %llu drained %llu (destroy said %d) "
	       "pending %llu; callbacks %llu; identity %s\n",
	       (unsigned long long)st->armed, (unsigned long long)st->fired,
	       (unsigned long long)st->cancelled, (unsigned long long)st->drained, drained,
	       (unsigned long long)st->pending, (unsigned long long)sv->callbacks,
	       st->armed == ends ? "holds" : "BROKEN");
	printf("kairos: lateness p50 %.3f ms p99 %.3f ms max %.3f ms, early %llu, "
	       "wakeups %llu, timer_sets %llu\n",
	       st->lateness_p50_ns / 1e6, st->lateness_p99_ns / 1e6, st->lateness_max_ns / 1e6,
	       (unsigned long long)st->early, (unsigned long long)st->wakeups,
	       (unsigned long long)st->timer_sets);
	printf("server: %s\n", ok ? "ok" : "FAILED");
}

/*
 * A line on stderr every --progress seconds: a long run shows it is alive,
 * and a stuck accept (out of descriptors) shows while it lasts.
 */
static void progress(struct server *sv, uint64_t elapsed_ns)
{
	fprintf(stderr, "kairos-idle-server: %.0f s: open %llu, accepted %llu, closed idle %llu, "
		"closed by peer %llu, accept paused %llu\n", elapsed_ns / 1e9,
		(unsigned long long)sv->open, (unsigned long long)sv->accepted,
		(unsigned long long)sv->closed_idle, (unsigned long long)sv->closed_peer,
		(unsigned long long)sv->accept_paused);
}

/* One turn: every ready fd's event, then the expired timers. */
static void turn(struct server *sv, int n)
{
	int rc;

	for (int i = 0; i < n; i++) {
		void *tag = sv->evs[i].data.ptr;

		if (tag == &tag_listen) {
			accept_some(sv);
		} else if (tag == &tag_signal) {
			struct signalfd_siginfo si;

			if (read(sv->sfd, &si, sizeof(si)) == sizeof(si))
				sv->quit = true;
		} else if (tag != &tag_queue) {
			/*
			 * Read first even on EPOLLHUP/RDHUP: data sent just
			 * before the close is still activity; the read that
			 * returns 0 ends the connection.
			 */
			conn_readable(sv, tag);
		}
	}
	/*
	 * No event of the batch is left to name a connection a callback frees.
	 * The queue runs after every batch, its fd in it or not: with thousands
	 * of sockets ready, epoll reports the fd only once per pass over them
	 * all, and a run that finds the queue empty costs a lock.
	 */
	rc = kairos_queue_run(sv->opts.queue, RUN_MAX);
	if (rc < 0)
		die("kairos_queue_run", -rc);
}

int main(int argc, char **argv)
{
	static struct server server;
	struct server *sv = &server;
	struct kairos_queue *q;
	struct kairos_stats st;
	const char *backend = "?";
	static const struct option longopts[] = {
		{ "port", required_argument, NULL, 'p' },
		{ "idle", required_argument, NULL, 'i' },
		{ "duration", required_argument, NULL, 'd' },
		{ "progress", required_argument, NULL, 'P' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	uint64_t port = 0, idle_ms = 1000, duration_s = 0, progress_s = 10;
	uint64_t stop_ns = UINT64_MAX, open_at_exit, start_ns, progress_ns = UINT64_MAX;
	struct rlimit rl;
	uint16_t bound;
	sigset_t mask;
	int c, rc, drained, left;
	bool ok;

	opt_prog = "kairos-idle-server";
	while ((c = opt_next(argc, argv, "h", longopts)) != -1) {
		switch (c) {
		case 'p':
			port = opt_u64("--port", optarg, 0, 65535);
			break;
		case 'i':
			idle_ms = opt_u64("--idle", optarg, 1, 3600000);
			break;
		case 'd':
			duration_s = opt_u64("--duration", optarg, 0, 86400);
			break;
		case 'P':
			progress_s = opt_u64("--progress", optarg, 0, 86400);
			break;
		case 'q':
			sv->quiet = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		}
	}
	sv->idle_ns = idle_ms * MS;
	idle_server = sv;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
	/* Signals arrive as events of the loop; kairos threads inherit the mask. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	if (sigprocmask(SIG_BLOCK, &mask, NULL))
		die("sigprocmask", errno);
	signal(SIGPIPE, SIG_IGN);

	rc = kairos_create(NULL, &sv->k);
	if (!rc)
		rc = kairos_queue_create(sv->k, &q);
	if (rc)
		die("kairos_create/kairos_queue_create", -rc);
	sv->opts.queue = q;
	sv->qfd = kairos_queue_fd(q);
	kairos_backend_info(sv->k, 0, &backend, NULL);

	sv->sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	sv->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (sv->sfd < 0 || sv->epfd < 0)
		die("signalfd/epoll_create1", errno);
	sv->lfd = listen_on((uint16_t)port, &bound);
	ep_ctl(sv, EPOLL_CTL_ADD, sv->lfd, EPOLLIN, &tag_listen);
	ep_ctl(sv, EPOLL_CTL_ADD, sv->sfd, EPOLLIN, &tag_signal);
	ep_ctl(sv, EPOLL_CTL_ADD, sv->qfd, EPOLLIN, &tag_queue);

	printf("port %u\n", bound);
	if (!sv->quiet)
		printf("idle %" PRIu64 " ms, backend %s, queue on shard %d\n", idle_ms, backend,
		       kairos_queue_shard(q));
	fflush(stdout);
	start_ns = now_ns();
	if (duration_s)
		stop_ns = start_ns + duration_s * 1000000000ull;
	if (progress_s && !sv->quiet)
		progress_ns = start_ns + progress_s * 1000000000ull;

	while (!sv->quit) {
		uint64_t now = now_ns(), t0;
		int timeout = -1, n;

		if (now >= stop_ns)
			break;
		if (now >= progress_ns) {
			progress(sv, now - start_ns);
			progress_ns += progress_s * 1000000000ull;
			if (progress_ns <= now)	/* a stall of several periods: one line */
				progress_ns = now + progress_s * 1000000000ull;
		}
		if (stop_ns != UINT64_MAX)
			timeout = (int)((stop_ns - now) / MS) + 1;
		if (progress_ns != UINT64_MAX &&
		    (timeout < 0 || (progress_ns - now) / MS + 1 < (uint64_t)timeout))
			timeout = (int)((progress_ns - now) / MS) + 1;
		if (sv->listen_resume_ns) {
			if (now >= sv->listen_resume_ns) {
				ep_ctl(sv, EPOLL_CTL_MOD, sv->lfd, EPOLLIN, &tag_listen);
				sv->listen_resume_ns = 0;
			} else {
				timeout = 10;
			}
		}
		n = epoll_wait(sv->epfd, sv->evs, MAXEV, timeout);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			die("epoll_wait", errno);
		}
		t0 = now_ns();
		turn(sv, n);
		t0 = now_ns() - t0;
		if (t0 > sv->turn_max_ns)
			sv->turn_max_ns = t0;
	}

	/*
	 * Destroy ends the timers still armed and the expiries still waiting
	 * in the queue (dropped, counted as drained): the counters are final,
	 * and the queue is left empty.
	 */
	drained = kairos_destroy(sv->k, KAIROS_DRAIN_DROP);
	if (drained < 0)
		fprintf(stderr, "kairos-idle-server: kairos_destroy: %s\n", strerror(-drained));
	rc = kairos_stats(sv->k, &st);
	if (rc)
		die("kairos_stats", -rc);
	left = kairos_queue_destroy(q);
	ok = drained >= 0 && left == 0 && !sv->arm_failed && !sv->broken && !sv->early &&
	     st.early == 0 && st.pending == 0 &&
	     st.armed == st.fired + st.cancelled + st.drained + st.pending &&
	     sv->callbacks == st.fired && (uint64_t)drained == st.drained;
	open_at_exit = sv->open;
	while (sv->conns) {
		if (sv->conns->fd >= 0)
			conn_close(sv, sv->conns);
		conn_free(sv, sv->conns);
	}
	if (!sv->quiet)
		report(sv, &st, drained, open_at_exit, ok);
	fflush(stdout);
	close(sv->lfd);
	close(sv->sfd);
	close(sv->epfd);
	return ok ? 0 : 1;
}
