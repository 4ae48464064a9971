/* SPDX-License-Identifier: MIT */
/*
 * kairos-idle-server - a TCP echo server on 127.0.0.1 that closes every
 * connection left idle for longer than T, with one kairos timer per
 * connection: armed at accept, pushed later (kairos_reset) on every read,
 * cancelled when the peer closes.
 *
 *	kairos-idle-server [--port N] [--idle MS] [--duration S] [--quiet]
 *
 * The first line on stdout is "port N", the port it listens on (--port 0,
 * the default, lets the kernel choose), so that a script can start a load
 * client against it.  It stops after --duration seconds (0: never), on
 * SIGINT or SIGTERM, or when a connection sends "QUIT\n" as its first bytes,
 * and then prints a report (connections, idle and peer closes, CPU, the
 * kairos counters) to stdout.  A connection whose first bytes are
 * "STATS\n" is answered with one line of counters and its CPU time:
 *
 *	stats accepted A idle I peer P open O utime_us U stime_us S
 *	      turn_max_us W handoff_max_us H
 *
 * (on one line; W: the longest loop turn, H: the longest wait of a fired
 * timer's message for the loop).
 *
 * Exit status: 0; 1 when the kairos counters break their promises (an early
 * callback, armed != fired + cancelled + drained + pending after destroy, a
 * callback count that differs from "fired", or a callback whose message the
 * loop never took) or a kairos_arm() failed; 2 for a usage or setup error.
 *
 * Threads.  One thread (main) runs an epoll loop over the listening socket,
 * the connections, a signalfd and an eventfd.  Timer callbacks run on kairos
 * worker threads and never touch a connection or its file descriptor: the
 * descriptor may have been closed and its number reused by a new connection
 * since the timer was armed.  A callback only appends the connection's
 * (slot, generation) to a mutex-protected list and signals the eventfd; the
 * loop then closes the connection if that slot still holds that generation.
 * The generation is bumped whenever the loop releases a slot, so a late
 * callback (one that lost to a peer close: kairos_cancel() said -EBUSY or
 * -ENOENT) can never close a newer connection.  Each descriptor is therefore
 * closed exactly once, by the loop thread.
 *
 * Idle means no bytes for T, not "no read for T": when the loop falls
 * behind (thousands of ready connections, or the machine not running it),
 * bytes can wait in a socket past the deadline.  So a read whose reset finds
 * the timer already firing (kairos_reset() says -ENOENT), and an expiry whose
 * socket holds unread bytes, give the connection a new timer (and a new
 * generation) instead of closing it.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <kairos/kairos.h>

#define MS		1000000ull
#define RXBUF		4096
#define MAXEV		256

/* epoll data words that are not connection slots. */
#define TAG_LISTEN	(UINT64_MAX - 0)
#define TAG_SIGNAL	(UINT64_MAX - 1)
#define TAG_EXPIRED	(UINT64_MAX - 2)

struct conn {
	int fd;			/* -1: slot free */
	uint32_t gen;		/* bumped each time the slot is released */
	bool first;		/* no bytes read yet (control words are checked) */
	kairos_id timer;
};

/*
 * Expired timers, from the callbacks to the loop.  A callback appends, the
 * loop swaps the whole list out under the lock: neither ever waits for the
 * other longer than a push.  The list grows as needed, so a callback never
 * blocks on a full queue (which would deadlock kairos_destroy(), called by
 * the loop, waiting for that callback).
 */
struct expired {
	uint64_t word;		/* the timer's arg: generation << 32 | slot */
	uint64_t at_ns;		/* when the callback ran */
};

struct expired_q {
	pthread_mutex_t lock;
	struct expired *v;
	size_t n, cap;
	int efd;		/* wakes the loop when it waits */
	atomic_bool queued;	/* checked every turn: see main() */
};

struct server {
	struct kairos *k;
	uint64_t idle_ns;
	int epfd, lfd, sfd;
	struct conn *conns;
	uint32_t *free_slots;	/* a stack of free slot numbers */
	uint32_t nfree, nslots;
	struct expired_q q;
	atomic_uint_fast64_t callbacks;	/* callbacks run with status > 0 */
	uint64_t accepted, closed_idle, closed_peer, open;
	uint64_t peer_reset;	/* peer closes seen as an error (ECONNRESET...) */
	uint64_t closed_error;	/* no timer could be armed */
	uint64_t cancel_raced;	/* peer close found the callback running/ran */
	uint64_t reset_raced;	/* a read found the timer already firing */
	uint64_t stale;		/* expiry messages of an older generation */
	uint64_t revived;	/* timer fired with unread bytes in the socket */
	uint64_t messages;	/* expiry messages taken from the queue */
	uint64_t handoff_max_ns;	/* callback ran -> loop took its message */
	uint64_t turn_max_ns;	/* longest loop turn (work between waits) */
	uint64_t arm_failed, accept_paused, echo_short;
	uint64_t open_at_exit;
	uint64_t listen_resume_ns;	/* 0: accepting; else when to retry */
	bool quit;
	bool quiet;
};

/* The one server; the callbacks reach it here (see on_idle()). */
static struct server *idle_server;

static void die(const char *what, int err)
{
	fprintf(stderr, "kairos-idle-server: %s: %s\n", what, strerror(err));
	exit(2);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *enc(uint32_t slot, uint32_t gen)
{
	return (void *)(uintptr_t)(((uint64_t)gen << 32) | slot);
}

/* Runs on a kairos worker thread: hands the close to the loop thread. */
static void on_idle(void *arg, kairos_id id, int status)
{
	struct server *sv;
	struct expired_q *q;
	uint64_t one = 1;

	(void)id;
	if (status < 0)
		return;		/* -ECANCELED: not used (we destroy with DROP) */
	/*
	 * The arg carries only (slot, generation), never a pointer to the
	 * connection, so nothing it names can have been freed.  The server is
	 * reached through a global because the arg word is taken.
	 */
	sv = idle_server;
	q = &sv->q;
	/* Relaxed: only compared with kairos' "fired" after destroy joined us. */
	atomic_fetch_add_explicit(&sv->callbacks, 1, memory_order_relaxed);
	if (pthread_mutex_lock(&q->lock))
		abort();
	if (q->n == q->cap) {
		size_t cap = q->cap ? q->cap * 2 : 1024;
		struct expired *v = realloc(q->v, cap * sizeof(*v));

		if (!v) {
			fprintf(stderr, "kairos-idle-server: out of memory in callback\n");
			abort();
		}
		q->v = v;
		q->cap = cap;
	}
	q->v[q->n].word = (uint64_t)(uintptr_t)arg;
	q->v[q->n].at_ns = now_ns();
	q->n++;
	if (pthread_mutex_unlock(&q->lock))
		abort();
	/* Relaxed: a hint; the entry itself is published by the mutex. */
	atomic_store_explicit(&q->queued, true, memory_order_relaxed);
	/* An eventfd write only fails on counter overflow, which 2^64 prevents. */
	if (write(q->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		abort();
}

static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
}

static void ep_add(struct server *sv, int fd, uint32_t events, uint64_t tag)
{
	struct epoll_event ev = { .events = events, .data.u64 = tag };

	if (epoll_ctl(sv->epfd, EPOLL_CTL_ADD, fd, &ev))
		die("epoll_ctl add", errno);
}

/* Releases @slot: closes its descriptor and makes old timers' words stale. */
static void conn_release(struct server *sv, uint32_t slot)
{
	struct conn *c = &sv->conns[slot];

	/* close() also removes it from the epoll set: the fd is never dup'ed. */
	close(c->fd);
	c->fd = -1;
	c->gen++;
	c->timer = 0;
	sv->free_slots[sv->nfree++] = slot;
	sv->open--;
}

/*
 * Gives @slot a new timer of T under a new generation, so that a message of
 * the old timer, already queued or about to be, finds nothing to close.
 * Returns false (and closes the connection) if no timer could be armed.
 */
static bool conn_rearm(struct server *sv, uint32_t slot)
{
	struct conn *c = &sv->conns[slot];
	int rc;

	c->gen++;
	rc = kairos_arm(sv->k, sv->idle_ns, on_idle, enc(slot, c->gen), &c->timer);
	if (rc == 0)
		return true;
	fprintf(stderr, "kairos-idle-server: kairos_arm: %s\n", strerror(-rc));
	sv->arm_failed++;
	sv->closed_error++;
	conn_release(sv, slot);
	return false;
}

/* The peer closed (or failed): cancel the timer, then close once. */
static void conn_close_peer(struct server *sv, uint32_t slot, bool error)
{
	struct conn *c = &sv->conns[slot];
	int rc = kairos_cancel(sv->k, c->timer);

	/*
	 * 0: the callback will never run.  -EBUSY (running) or -ENOENT (it
	 * ran): its message is queued or about to be, and finds the generation
	 * bumped by conn_release(), so it closes nothing.
	 */
	if (rc == -EBUSY || rc == -ENOENT)
		sv->cancel_raced++;
	else if (rc)
		fprintf(stderr, "kairos-idle-server: kairos_cancel: %s\n", strerror(-rc));
	/* A peer that closes with echoes unread sends a reset: still a close. */
	if (error)
		sv->peer_reset++;
	sv->closed_peer++;
	conn_release(sv, slot);
}

static void stats_line(struct server *sv, char *buf, size_t len)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	snprintf(buf, len, "stats accepted %llu idle %llu peer %llu open %llu "
		 "utime_us %lld stime_us %lld turn_max_us %llu handoff_max_us %llu\n",
		 (unsigned long long)sv->accepted, (unsigned long long)sv->closed_idle,
		 (unsigned long long)sv->closed_peer,
		 (unsigned long long)sv->open,
		 (long long)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec,
		 (long long)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec,
		 (unsigned long long)sv->turn_max_ns / 1000,
		 (unsigned long long)sv->handoff_max_ns / 1000);
}

/* The first bytes of a connection may be a control word. */
static bool control(struct server *sv, uint32_t slot, const char *buf, ssize_t n)
{
	char line[256];

	if (n == 6 && !memcmp(buf, "STATS\n", 6)) {
		stats_line(sv, line, sizeof(line));
		(void)send(sv->conns[slot].fd, line, strlen(line), MSG_NOSIGNAL);
		return true;
	}
	if (n == 5 && !memcmp(buf, "QUIT\n", 5)) {
		sv->quit = true;
		return true;
	}
	return false;
}

static void conn_readable(struct server *sv, uint32_t slot)
{
	struct conn *c = &sv->conns[slot];
	char buf[RXBUF];
	ssize_t n, w;
	int rc;

	n = recv(c->fd, buf, sizeof(buf), 0);
	if (n == 0) {
		conn_close_peer(sv, slot, false);
		return;
	}
	if (n < 0) {
		if (errno == EAGAIN || errno == EINTR)
			return;
		conn_close_peer(sv, slot, true);
		return;
	}
	/*
	 * Activity: push the idle deadline T later.  -ENOENT means the timer
	 * is firing: its deadline passed while these bytes waited in the
	 * socket for this thread (a busy or descheduled loop).  The peer was
	 * not idle, so it gets a new timer and the old one's message is left
	 * to find a stale generation.
	 */
	rc = kairos_reset(sv->k, c->timer, sv->idle_ns);
	if (rc == -ENOENT) {
		sv->reset_raced++;
		if (!conn_rearm(sv, slot))
			return;
	} else if (rc) {
		fprintf(stderr, "kairos-idle-server: kairos_reset: %s\n", strerror(-rc));
	}
	if (c->first) {
		c->first = false;
		if (control(sv, slot, buf, n))
			return;
	}
	/* Echo.  The client reads every echo, so a short send is only counted. */
	w = send(c->fd, buf, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (w != n)
		sv->echo_short++;
}

static void accept_all(struct server *sv)
{
	for (;;) {
		int fd = accept4(sv->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		uint32_t slot;
		struct conn *c;
		int one = 1;

		if (fd < 0) {
			if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)
				return;
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			    errno == ENOMEM) {
				/* Out of descriptors: stop accepting for 10 ms. */
				struct epoll_event ev = { .events = 0, .data.u64 = TAG_LISTEN };

				epoll_ctl(sv->epfd, EPOLL_CTL_MOD, sv->lfd, &ev);
				sv->listen_resume_ns = now_ns() + 10 * MS;
				sv->accept_paused++;
				return;
			}
			die("accept4", errno);
		}
		if (!sv->nfree) {
			close(fd);
			sv->accept_paused++;
			continue;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		slot = sv->free_slots[--sv->nfree];
		c = &sv->conns[slot];
		c->fd = fd;
		c->first = true;
		sv->accepted++;
		sv->open++;
		/* Before the fd joins the epoll set, so a failure just closes it. */
		if (conn_rearm(sv, slot))
			ep_add(sv, fd, EPOLLIN | EPOLLRDHUP, slot);
	}
}

/*
 * Closes the connections whose timers fired (loop thread only).  @final:
 * after kairos_destroy(), when no timer can be armed again and every
 * connection is about to be closed anyway.
 */
static void drain_expired(struct server *sv, bool final)
{
	struct expired_q *q = &sv->q;
	struct expired *v;
	uint64_t cnt, now;
	size_t n;

	if (read(q->efd, &cnt, sizeof(cnt)) < 0 && errno != EAGAIN)
		die("read eventfd", errno);
	if (pthread_mutex_lock(&q->lock))
		abort();
	v = q->v;
	n = q->n;
	q->v = NULL;
	q->n = q->cap = 0;
	if (pthread_mutex_unlock(&q->lock))
		abort();
	now = now_ns();
	sv->messages += n;
	for (size_t i = 0; i < n; i++) {
		uint32_t slot = (uint32_t)v[i].word, gen = (uint32_t)(v[i].word >> 32);
		struct conn *c = &sv->conns[slot];
		int unread = 0;

		if (!final && now > v[i].at_ns && now - v[i].at_ns > sv->handoff_max_ns)
			sv->handoff_max_ns = now - v[i].at_ns;
		if (c->fd < 0 || c->gen != gen) {
			sv->stale++;
			continue;
		}
		/*
		 * Bytes waiting in the socket arrived after the last read: the
		 * peer was active and only this thread was slow to look.  Not
		 * idle, then: a new timer, and the bytes are read next turn.
		 */
		if (!final && ioctl(c->fd, FIONREAD, &unread) == 0 && unread > 0) {
			sv->revived++;
			conn_rearm(sv, slot);
			continue;
		}
		sv->closed_idle++;
		conn_release(sv, slot);
	}
	free(v);
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
		"usage: kairos-idle-server [options]\n"
		"  --port N       TCP port on 127.0.0.1 (default 0: the kernel picks;\n"
		"                 the first stdout line says \"port N\")\n"
		"  --idle MS      idle timeout T in ms (default 1000)\n"
		"  --duration S   exit after S seconds (default 0: on SIGINT/SIGTERM\n"
		"                 or a \"QUIT\\n\" control connection)\n"
		"  --quiet        no report at exit\n");
}

static unsigned long num(const char *opt, const char *s, unsigned long max)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s ? s : "", &end, 10);
	if (!s || errno || *end || end == s || v > max) {
		fprintf(stderr, "kairos-idle-server: bad value for %s\n", opt);
		exit(2);
	}
	return v;
}

static void report(struct server *sv, const struct kairos_stats *st, int drained,
		   uint64_t callbacks, bool ok)
{
	struct rusage ru;
	uint64_t ends = st->fired + st->cancelled + st->drained + st->pending;

	getrusage(RUSAGE_SELF, &ru);
	printf("connections: accepted %llu, closed idle %llu, closed by peer %llu "
	       "(%llu with an error), not armed %llu, open at exit %llu\n",
	       (unsigned long long)sv->accepted, (unsigned long long)sv->closed_idle,
	       (unsigned long long)sv->closed_peer, (unsigned long long)sv->peer_reset,
	       (unsigned long long)sv->closed_error,
	       (unsigned long long)sv->open_at_exit);
	printf("races: cancel after fire %llu, reset after fire %llu, fired with bytes unread "
	       "%llu, stale expiries %llu, accept paused %llu, short echoes %llu\n",
	       (unsigned long long)sv->cancel_raced, (unsigned long long)sv->reset_raced,
	       (unsigned long long)sv->revived, (unsigned long long)sv->stale,
	       (unsigned long long)sv->accept_paused, (unsigned long long)sv->echo_short);
	printf("loop: longest turn %.3f ms, longest callback-to-close hand-off %.3f ms\n",
	       sv->turn_max_ns / 1e6, sv->handoff_max_ns / 1e6);
	printf("cpu: user %.3f s, system %.3f s\n",
	       ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6,
	       ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6);
	printf("kairos: armed %llu fired %llu cancelled %llu drained %llu (destroy said %d) "
	       "pending %llu; callbacks %llu; identity %s\n",
	       (unsigned long long)st->armed, (unsigned long long)st->fired,
	       (unsigned long long)st->cancelled, (unsigned long long)st->drained, drained,
	       (unsigned long long)st->pending, (unsigned long long)callbacks,
	       st->armed == ends ? "holds" : "BROKEN");
	printf("kairos: lateness p50 %.3f ms p99 %.3f ms max %.3f ms, early %llu, "
	       "wakeups %llu, timer_sets %llu\n",
	       st->lateness_p50_ns / 1e6, st->lateness_p99_ns / 1e6, st->lateness_max_ns / 1e6,
	       (unsigned long long)st->early, (unsigned long long)st->wakeups,
	       (unsigned long long)st->timer_sets);
	printf("server: %s\n", ok ? "ok" : "FAILED");
}

int main(int argc, char **argv)
{
	static struct server server;
	struct server *sv = &server;
	struct epoll_event evs[MAXEV];
	struct kairos_stats st;
	struct rlimit rl;
	const char *backend = "?";
	unsigned long port = 0, idle_ms = 1000, duration_s = 0;
	uint64_t stop_ns = UINT64_MAX, callbacks;
	uint16_t bound;
	sigset_t mask;
	int rc, drained;
	bool ok;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--port"))
			port = num(a, v, 65535), i++;
		else if (!strcmp(a, "--idle"))
			idle_ms = num(a, v, 3600000), i++;
		else if (!strcmp(a, "--duration"))
			duration_s = num(a, v, 86400), i++;
		else if (!strcmp(a, "--quiet"))
			sv->quiet = true;
		else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (!idle_ms) {
		fprintf(stderr, "kairos-idle-server: --idle must be at least 1 ms\n");
		return 2;
	}
	sv->idle_ns = idle_ms * MS;
	idle_server = sv;

	raise_nofile();
	if (getrlimit(RLIMIT_NOFILE, &rl))
		die("getrlimit", errno);
	sv->nslots = rl.rlim_cur > 1000000 ? 1000000 : (uint32_t)rl.rlim_cur;
	sv->conns = calloc(sv->nslots, sizeof(*sv->conns));
	sv->free_slots = calloc(sv->nslots, sizeof(*sv->free_slots));
	if (!sv->conns || !sv->free_slots)
		die("calloc", ENOMEM);
	/* Popped from the top: slot 0 first. */
	for (uint32_t i = 0; i < sv->nslots; i++) {
		sv->conns[i].fd = -1;
		sv->free_slots[i] = sv->nslots - 1 - i;
	}
	sv->nfree = sv->nslots;

	/* Signals arrive as events of the loop; kairos threads inherit the mask. */
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	if (pthread_sigmask(SIG_BLOCK, &mask, NULL))
		die("pthread_sigmask", EINVAL);
	signal(SIGPIPE, SIG_IGN);

	rc = kairos_create(NULL, &sv->k);
	if (rc)
		die("kairos_create", -rc);
	kairos_backend_info(sv->k, 0, &backend, NULL);

	if (pthread_mutex_init(&sv->q.lock, NULL))
		die("pthread_mutex_init", EINVAL);
	sv->q.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	sv->sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	sv->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (sv->q.efd < 0 || sv->sfd < 0 || sv->epfd < 0)
		die("eventfd/signalfd/epoll_create1", errno);
	sv->lfd = listen_on((uint16_t)port, &bound);
	ep_add(sv, sv->lfd, EPOLLIN, TAG_LISTEN);
	ep_add(sv, sv->sfd, EPOLLIN, TAG_SIGNAL);
	ep_add(sv, sv->q.efd, EPOLLIN, TAG_EXPIRED);

	printf("port %u\n", bound);
	if (!sv->quiet)
		printf("idle %lu ms, backend %s, %u slots\n", idle_ms, backend, sv->nslots);
	fflush(stdout);
	if (duration_s)
		stop_ns = now_ns() + duration_s * 1000000000ull;

	while (!sv->quit) {
		uint64_t now = now_ns(), turn;
		int timeout = -1, n;

		if (now >= stop_ns)
			break;
		if (stop_ns != UINT64_MAX)
			timeout = (int)((stop_ns - now) / MS) + 1;
		if (sv->listen_resume_ns) {
			if (now >= sv->listen_resume_ns) {
				struct epoll_event ev = { .events = EPOLLIN, .data.u64 = TAG_LISTEN };

				epoll_ctl(sv->epfd, EPOLL_CTL_MOD, sv->lfd, &ev);
				sv->listen_resume_ns = 0;
			} else {
				timeout = 10;
			}
		}
		n = epoll_wait(sv->epfd, evs, MAXEV, timeout);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			die("epoll_wait", errno);
		}
		turn = now_ns();
		for (int i = 0; i < n; i++) {
			uint64_t tag = evs[i].data.u64;

			if (tag == TAG_LISTEN) {
				accept_all(sv);
			} else if (tag == TAG_SIGNAL) {
				struct signalfd_siginfo si;

				if (read(sv->sfd, &si, sizeof(si)) == sizeof(si))
					sv->quit = true;
			} else if (tag == TAG_EXPIRED) {
				drain_expired(sv, false);
			} else if (sv->conns[tag].fd >= 0) {
				/*
				 * Read first even on EPOLLHUP/RDHUP: data sent
				 * just before the close is still activity; the
				 * read that returns 0 ends the connection.
				 */
				conn_readable(sv, (uint32_t)tag);
			}
		}
		/*
		 * With thousands of connections ready, epoll hands out MAXEV at
		 * a time and the eventfd can wait many turns for its own; the
		 * queue is looked at every turn instead.  Clearing the hint
		 * before taking the queue loses nothing: a callback that pushes
		 * after the take sets it again.
		 */
		if (atomic_exchange_explicit(&sv->q.queued, false, memory_order_relaxed))
			drain_expired(sv, false);
		turn = now_ns() - turn;
		if (turn > sv->turn_max_ns)
			sv->turn_max_ns = turn;
	}

	/*
	 * Destroy first: after it returns no callback runs, so the counters
	 * are final and the queue can be freed.  Pending timers are dropped.
	 */
	drained = kairos_destroy(sv->k, KAIROS_DRAIN_DROP);
	if (drained < 0)
		fprintf(stderr, "kairos-idle-server: kairos_destroy: %s\n", strerror(-drained));
	rc = kairos_stats(sv->k, &st);
	if (rc)
		die("kairos_stats", -rc);
	callbacks = atomic_load_explicit(&sv->callbacks, memory_order_relaxed);
	/*
	 * Every fired timer's message is in the queue now; those that fired
	 * after the loop stopped close their connections (and count as idle).
	 */
	drain_expired(sv, true);
	ok = drained >= 0 && !sv->arm_failed && st.early == 0 && st.pending == 0 &&
	     st.armed == st.fired + st.cancelled + st.drained + st.pending &&
	     callbacks == st.fired && sv->messages == callbacks &&
	     (uint64_t)drained == st.drained;
	sv->open_at_exit = sv->open;
	for (uint32_t i = 0; i < sv->nslots; i++)
		if (sv->conns[i].fd >= 0)
			conn_release(sv, i);
	if (!sv->quiet)
		report(sv, &st, drained, callbacks, ok);
	fflush(stdout);
	close(sv->lfd);
	close(sv->sfd);
	close(sv->epfd);
	close(sv->q.efd);
	free(sv->conns);
	free(sv->free_slots);
	return ok ? 0 : 1;
}
