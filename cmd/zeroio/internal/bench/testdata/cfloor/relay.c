/*
 * relay.c: the floor of zeroio bench's relay suites. A TCP relay with no
 * feature at all, doing only the system calls relaying needs, so that what
 * it costs is close to the kernel's share of relaying a connection; what a
 * real relay spends above it is its own.
 *
 * One epoll loop per thread, each on its own SO_REUSEPORT listener (the
 * kernel spreads connections across them); accept4 drained until EAGAIN;
 * a non-blocking connect; both sockets registered once, edge-triggered
 * (epoll(7)), so no epoll_ctl after; read/write through a 16 KiB buffer per
 * direction, the size HAProxy's tune.bufsize defaults to, until a read
 * fills it: from then on that direction splices (splice(2)) through a pipe
 * of its own, as HAProxy's splice-auto and zeroio do for bulk; TCP_NODELAY
 * on both sockets, as HAProxy sets (set once on the listener, whose
 * accepted sockets inherit it); half-close passed on with shutdown(2),
 * except when the other direction has ended too and close(2) follows.
 * No allocation after start: connection state lives in a table indexed by
 * descriptor, mapped once.
 *
 * Command line and lifetime: ../floor.h.
 */
#define _GNU_SOURCE
#include "../floor.h"
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/mman.h>

#define BUFSZ 16384
#define MAXEVENTS 256
#define PIPESZ (1 << 20) /* the pipes zeroio's splice package uses */

/* One socket of a relayed pair. buf holds bytes read from this socket and
 * not yet written to the peer: off is where they start, len how many. The
 * readiness flags mirror what edge-triggered epoll reported and what the
 * last call found: an edge comes only on a change, so a flag stays set
 * until a call returns EAGAIN or a short count proves the state changed. */
struct conn {
	uint32_t gen;       /* bumped at close: tells stale events apart */
	int peer;           /* the other socket of the pair */
	uint8_t connecting; /* target socket, connect(2) in progress */
	uint8_t readable, writable;
	uint8_t hup;    /* the peer's FIN (or an error) is queued: read to 0 */
	uint8_t rd_eof; /* read returned 0 */
	uint32_t off, len;
	/* Once bulk: bytes go from this socket to the peer through a pipe;
	 * in_pipe of them are in it. */
	int pipe_r, pipe_w;
	uint32_t pipe_sz, in_pipe;
	char buf[BUFSZ];
};

static struct conn *conns;
static int maxfd;

static uint64_t key(int fd)
{
	return (uint64_t)__atomic_load_n(&conns[fd].gen, __ATOMIC_RELAXED) << 32 | (uint32_t)fd;
}

static void close_pipe(struct conn *c)
{
	if (c->pipe_r >= 0) {
		close(c->pipe_r);
		close(c->pipe_w);
		c->pipe_r = c->pipe_w = -1;
	}
}

static void close_pair(int fd)
{
	int peer = conns[fd].peer;
	close_pipe(&conns[fd]);
	close_pipe(&conns[peer]);
	__atomic_add_fetch(&conns[fd].gen, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&conns[peer].gen, 1, __ATOMIC_RELAXED);
	/* close(2) removes each from the epoll set: neither was dup'ed. */
	close(fd);
	close(peer);
}

/* splice_pump is pump for a bulk direction: socket to pipe, pipe to
 * socket. The pipe is filled only once empty, so an EAGAIN from the
 * socket side means the socket has nothing, never that the pipe is full.
 * A short splice proves nothing (the pipe may have run out of slots), so
 * the socket is read until EAGAIN. */
static int splice_pump(int src, int dst)
{
	struct conn *s = &conns[src], *d = &conns[dst];
	for (;;) {
		if (s->in_pipe > 0) {
			if (!d->writable)
				return 0;
			ssize_t w = splice(s->pipe_r, NULL, dst, NULL, s->in_pipe, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
			if (w < 0) {
				if (errno == EINTR)
					continue;
				if (errno == EAGAIN) {
					d->writable = 0;
					return 0;
				}
				return -1;
			}
			s->in_pipe -= w;
			if (s->in_pipe > 0) {
				d->writable = 0;
				return 0;
			}
			continue;
		}
		if (s->rd_eof || !s->readable)
			return 0;
		ssize_t n = splice(src, NULL, s->pipe_w, NULL, s->pipe_sz, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
		if (n > 0) {
			s->in_pipe = n;
			continue;
		}
		if (n == 0) {
			s->rd_eof = 1;
			if (!d->rd_eof) /* else both are done: close follows */
				shutdown(dst, SHUT_WR);
			return 0;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN) {
			s->readable = 0;
			return 0;
		}
		return -1;
	}
}

/* go_bulk gives src's direction a pipe; 0 if none could be had, and the
 * direction keeps reading and writing. */
static int go_bulk(struct conn *s)
{
	int p[2];
	if (pipe2(p, O_NONBLOCK | O_CLOEXEC) < 0)
		return 0;
	s->pipe_r = p[0];
	s->pipe_w = p[1];
	int sz = fcntl(p[1], F_SETPIPE_SZ, PIPESZ); /* may be refused: keep the default */
	if (sz < 0)
		sz = fcntl(p[1], F_GETPIPE_SZ);
	s->pipe_sz = sz > 0 ? (uint32_t)sz : 65536;
	return 1;
}

/* pump moves what src has to say to dst until one side would block;
 * -1 on an error that ends the pair. */
static int pump(int src, int dst)
{
	struct conn *s = &conns[src], *d = &conns[dst];
	if (s->pipe_r >= 0 && s->len == 0)
		return splice_pump(src, dst);
	for (;;) {
		if (s->len > 0) {
			if (!d->writable)
				return 0;
			ssize_t w = write(dst, s->buf + s->off, s->len);
			if (w < 0) {
				if (errno == EINTR)
					continue;
				if (errno == EAGAIN) {
					d->writable = 0;
					return 0;
				}
				return -1;
			}
			s->off += w;
			s->len -= w;
			if (s->len > 0) { /* short write: the send buffer is full */
				d->writable = 0;
				return 0;
			}
			s->off = 0;
			if (s->pipe_r >= 0)
				return splice_pump(src, dst);
			continue;
		}
		if (s->rd_eof || !s->readable)
			return 0;
		ssize_t n = read(src, s->buf, BUFSZ);
		if (n == BUFSZ && s->pipe_r < 0)
			go_bulk(s); /* a full buffer: bulk, splice what follows */
		if (n > 0) {
			s->len = n;
			/* A short read emptied the receive queue; more data will
			 * raise a new edge. Not so once a FIN is queued, whose
			 * edge is already spent: read on until 0. */
			if (n < BUFSZ && !s->hup)
				s->readable = 0;
			continue;
		}
		if (n == 0) {
			s->rd_eof = 1;
			if (!d->rd_eof) /* else both are done: close follows */
				shutdown(dst, SHUT_WR);
			return 0;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN) {
			s->readable = 0;
			return 0;
		}
		return -1;
	}
}

static void on_event(int fd, uint32_t ev)
{
	struct conn *a = &conns[fd];
	if (ev & EPOLLERR) { /* a reset, or a connect that failed */
		close_pair(fd);
		return;
	}
	if (ev & (EPOLLRDHUP | EPOLLHUP))
		a->hup = 1;
	if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP))
		a->readable = 1;
	if (ev & EPOLLOUT) {
		a->writable = 1;
		a->connecting = 0; /* writable without error: connected */
	}
	int peer = a->peer;
	struct conn *b = &conns[peer];
	if (a->connecting || b->connecting)
		return;
	if (pump(fd, peer) < 0 || pump(peer, fd) < 0) {
		close_pair(fd);
		return;
	}
	if (a->rd_eof && b->rd_eof && a->len == 0 && b->len == 0)
		close_pair(fd);
}

static void init_conn(int fd, int peer, int connecting)
{
	struct conn *c = &conns[fd];
	c->peer = peer;
	c->connecting = connecting;
	c->readable = c->writable = c->hup = c->rd_eof = 0;
	c->off = c->len = 0;
	c->pipe_r = c->pipe_w = -1;
	c->in_pipe = 0;
}

static void accept_all(int ep, int lfd)
{
	static const int one = 1;
	for (;;) {
		int c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (c < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			return; /* EAGAIN: drained; EMFILE and the like: later */
		}
		int t = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (t < 0 || c >= maxfd || t >= maxfd) {
			close(c);
			if (t >= 0)
				close(t);
			continue;
		}
		setsockopt(t, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		int r = connect(t, (struct sockaddr *)&target, sizeof target);
		if (r < 0 && errno != EINPROGRESS) {
			close(c);
			close(t);
			continue;
		}
		init_conn(c, t, 0);
		init_conn(t, c, r < 0);
		/* Registered once for everything: adding a socket that is
		 * already readable or writable reports it at once. */
		struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET};
		ev.data.u64 = key(c);
		if (epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev) < 0)
			die("epoll_ctl");
		ev.data.u64 = key(t);
		if (epoll_ctl(ep, EPOLL_CTL_ADD, t, &ev) < 0)
			die("epoll_ctl");
	}
}

static void *loop(void *arg)
{
	int lfd = (int)(intptr_t)arg;
	int ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0)
		die("epoll_create1");
	/* The listener is level-triggered: accept_all may stop early. */
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = UINT64_MAX};
	if (epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev) < 0)
		die("epoll_ctl");
	struct epoll_event evs[MAXEVENTS];
	for (;;) {
		int n = epoll_wait(ep, evs, MAXEVENTS, -1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			die("epoll_wait");
		}
		for (int i = 0; i < n; i++) {
			uint64_t k = evs[i].data.u64;
			if (k == UINT64_MAX) {
				accept_all(ep, lfd);
				continue;
			}
			int fd = (int)(uint32_t)k;
			/* A pair closed earlier in this batch: its fd may even be
			 * a new connection's by now, with a newer generation. */
			if ((uint32_t)(k >> 32) != __atomic_load_n(&conns[fd].gen, __ATOMIC_RELAXED))
				continue;
			on_event(fd, evs[i].events);
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct sockaddr_in lsa;
	rlim_t lim;
	int threads = parse_args(argc, argv, &lsa, &lim);
	maxfd = lim > (1 << 20) ? 1 << 20 : (int)lim;
	/* Pages are touched only for descriptors in use. */
	conns = mmap(NULL, (size_t)maxfd * sizeof *conns, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (conns == MAP_FAILED)
		die("mmap");
	return serve(&lsa, threads, loop);
}
