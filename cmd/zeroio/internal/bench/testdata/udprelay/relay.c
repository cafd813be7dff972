/*
 * relay.c: the floor of zeroio bench's UDP relay suite (RelayUDP,
 * impl=c-floor). A UDP relay with no feature at all, doing only the
 * system calls relaying datagrams needs, so that what it costs is close to
 * the kernel's share; what a real relay spends above it is its own.
 *
 * One epoll loop per thread, each on its own SO_REUSEPORT UDP socket: the
 * kernel hashes a client's address and port to one of them, so all of a
 * client's datagrams reach one thread. A session per client address and
 * port: a socket connected to the target, opened at the client's first
 * datagram and never closed (a benchmark baseline, as the suite's naive
 * Go relay). Datagrams arrive with recvmmsg(2), up to BATCH a call; each
 * run of consecutive datagrams from one client goes to its session's
 * socket with one sendmmsg(2); what the target sends back arrives on that
 * socket with recvmmsg and goes to the client from the listening socket
 * with one sendmmsg. Level-triggered epoll(7) and one recvmmsg per
 * readiness, so a busy socket cannot starve the others. Every socket gets
 * 4 MiB buffers, as every relay of the suite does (relayUDPBuf). No
 * allocation once a loop runs: sessions live in a table of fixed size
 * (open addressing); a client beyond its capacity is dropped.
 *
 * Command line and lifetime: ../floor.h.
 */
#define _GNU_SOURCE
#include "../floor.h"
#include <sys/epoll.h>

#define BATCH 64
#define DGRAM 65536       /* the largest UDP payload fits */
#define TABLE (1 << 16)   /* session slots per thread, a power of two */
#define SOCKBUF (4 << 20) /* relayUDPBuf */

struct session {
	struct sockaddr_in client;
	int fd; /* the socket connected to the target; -1: a free slot */
};

struct loop {
	int ep, lfd;
	struct session *tab;
	struct mmsghdr in[BATCH], out[BATCH];
	struct iovec iov[BATCH], oiov[BATCH];
	struct sockaddr_in from[BATCH];
	char *bufs;
};

/* sockbuf sizes fd's buffers; past net.core.rmem_max only with
 * CAP_NET_ADMIN (SO_RCVBUFFORCE), else as far as the limit allows. */
static void sockbuf(int fd)
{
	int n = SOCKBUF;
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &n, sizeof n) < 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &n, sizeof n);
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &n, sizeof n) < 0)
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &n, sizeof n);
}

static int same(const struct sockaddr_in *a, const struct sockaddr_in *b)
{
	return a->sin_addr.s_addr == b->sin_addr.s_addr && a->sin_port == b->sin_port;
}

/* session finds the client's session, opening it at its first datagram;
 * NULL if the table is full or a socket cannot be had. */
static struct session *session(struct loop *l, const struct sockaddr_in *c)
{
	uint32_t h = (c->sin_addr.s_addr * 2654435761u) ^ (c->sin_port * 40503u);
	for (uint32_t i = 0; i < TABLE; i++) {
		struct session *s = &l->tab[(h + i) & (TABLE - 1)];
		if (s->fd >= 0) {
			if (same(&s->client, c))
				return s;
			continue;
		}
		int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return NULL;
		sockbuf(fd);
		struct epoll_event ev = {.events = EPOLLIN, .data.ptr = s};
		if (connect(fd, (struct sockaddr *)&target, sizeof target) < 0 ||
		    epoll_ctl(l->ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
			close(fd);
			return NULL;
		}
		s->client = *c;
		s->fd = fd;
		return s;
	}
	return NULL;
}

/* send_all sends n prepared messages on fd; what the kernel refuses
 * (a full buffer, an ICMP error queued) is dropped, as UDP may. */
static void send_all(int fd, struct mmsghdr *m, int n)
{
	while (n > 0) {
		int k = sendmmsg(fd, m, n, 0);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			k = 1; /* drop the datagram the error is about */
		}
		m += k;
		n -= k;
	}
}

/* from_clients reads a batch from the listening socket and passes each
 * run of one client's datagrams to its session's socket. */
static void from_clients(struct loop *l)
{
	for (int i = 0; i < BATCH; i++) {
		l->in[i].msg_hdr.msg_name = &l->from[i];
		l->in[i].msg_hdr.msg_namelen = sizeof l->from[i];
	}
	int n = recvmmsg(l->lfd, l->in, BATCH, 0, NULL);
	for (int i = 0, j; i < n; i = j) {
		for (j = i; j < n && same(&l->from[j], &l->from[i]); j++) {
			l->oiov[j].iov_len = l->in[j].msg_len;
			l->out[j].msg_hdr.msg_name = NULL; /* connected */
			l->out[j].msg_hdr.msg_namelen = 0;
		}
		struct session *s = session(l, &l->from[i]);
		if (s)
			send_all(s->fd, &l->out[i], j - i);
	}
}

/* from_target reads a batch from a session's socket and sends it to the
 * session's client from the listening socket. */
static void from_target(struct loop *l, struct session *s)
{
	for (int i = 0; i < BATCH; i++) {
		l->in[i].msg_hdr.msg_name = NULL;
		l->in[i].msg_hdr.msg_namelen = 0;
	}
	int n = recvmmsg(s->fd, l->in, BATCH, 0, NULL);
	for (int i = 0; i < n; i++) {
		l->oiov[i].iov_len = l->in[i].msg_len;
		l->out[i].msg_hdr.msg_name = &s->client;
		l->out[i].msg_hdr.msg_namelen = sizeof s->client;
	}
	if (n > 0)
		send_all(l->lfd, l->out, n);
}

static void *loop(void *arg)
{
	struct loop *l = calloc(1, sizeof *l);
	if (!l || !(l->tab = malloc(TABLE * sizeof *l->tab)) || !(l->bufs = malloc((size_t)BATCH * DGRAM)))
		die("malloc");
	for (int i = 0; i < TABLE; i++)
		l->tab[i].fd = -1;
	/* in[i] and out[i] share buffer i: a datagram is sent from where it
	 * was read. */
	for (int i = 0; i < BATCH; i++) {
		l->iov[i] = (struct iovec){l->bufs + (size_t)i * DGRAM, DGRAM};
		l->oiov[i] = l->iov[i];
		l->in[i].msg_hdr.msg_iov = &l->iov[i];
		l->in[i].msg_hdr.msg_iovlen = 1;
		l->out[i].msg_hdr.msg_iov = &l->oiov[i];
		l->out[i].msg_hdr.msg_iovlen = 1;
	}
	l->lfd = (int)(intptr_t)arg;
	sockbuf(l->lfd);
	if ((l->ep = epoll_create1(EPOLL_CLOEXEC)) < 0)
		die("epoll_create1");
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
	if (epoll_ctl(l->ep, EPOLL_CTL_ADD, l->lfd, &ev) < 0)
		die("epoll_ctl");
	struct epoll_event evs[256];
	for (;;) {
		int n = epoll_wait(l->ep, evs, 256, -1);
		for (int i = 0; i < n; i++) {
			if (evs[i].data.ptr == NULL)
				from_clients(l);
			else
				from_target(l, evs[i].data.ptr);
		}
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct sockaddr_in lsa;
	rlim_t maxfd;
	listen_type = SOCK_DGRAM;
	int threads = parse_args(argc, argv, &lsa, &maxfd);
	return serve(&lsa, threads, loop);
}
