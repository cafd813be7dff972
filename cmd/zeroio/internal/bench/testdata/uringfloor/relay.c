/*
 * relay.c: an io_uring TCP relay with no feature at all, zeroio bench's
 * experiment with io_uring(7) beside the epoll floor (../cfloor/relay.c):
 * the same work (accept, a connect per client, 16 KiB through user space
 * each way, half-close passed on) asked of the kernel through a ring
 * instead of one system call per step.
 *
 * One ring per thread, each on its own SO_REUSEPORT listener. A multishot
 * accept (Linux 5.19) yields every client without a new request; each
 * client gets a socket, a connect, then one recv outstanding per direction
 * at a time; a recv's bytes go out with one send (resubmitted for what a
 * short send left), and the next recv from that side is queued once they
 * are out. Every request of a turn goes in with the wait for the next
 * completion in one io_uring_enter(2); with DEFER_TASKRUN (Linux 6.1) the
 * kernel runs completions only there, in the relay's own thread. No
 * splice: bulk bodies are copied through user space, so this is a
 * comparison for small requests.
 *
 *   relay LISTEN_IPV4:PORT TARGET_IPV4:PORT THREADS
 *   relay -probe
 *
 * prints "LISTEN ip:port" on stdout once it listens (port 0 picks one) and
 * serves until stdin reaches end of file; -probe exits 0 if the kernel
 * sets up a ring (io_uring may be disabled, or refused by seccomp). Built
 * with -luring.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUFSZ 16384
#define ENTRIES 4096

/* The kinds of request, in the low bits of a request's user_data; the rest
 * is the pair's address (16-byte aligned). */
enum { OP_ACCEPT, OP_CONNECT, OP_RECV, OP_SEND };

/* One direction: bytes read from fd, written to the other side's fd. */
struct side {
	int fd;
	uint32_t off, len; /* bytes in buf not yet sent to the other side */
	uint8_t eof;       /* recv returned 0: shut the other side's writing */
	char buf[BUFSZ];
};

struct pair {
	struct side s[2]; /* 0: client, 1: target */
	int inflight;     /* requests the kernel still holds */
	uint8_t dead;     /* ending: shut down, freed once inflight is 0 */
} __attribute__((aligned(16)));

static struct sockaddr_in target;

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static struct io_uring_sqe *sqe(struct io_uring *r)
{
	struct io_uring_sqe *e = io_uring_get_sqe(r);
	if (!e) { /* the ring is full: hand what it holds to the kernel */
		io_uring_submit(r);
		e = io_uring_get_sqe(r);
		if (!e)
			die("io_uring_get_sqe");
	}
	return e;
}

static uint64_t tag(struct pair *p, int op, int side)
{
	return (uint64_t)(uintptr_t)p | (uint64_t)op << 1 | (uint64_t)side;
}

static void recv_on(struct io_uring *r, struct pair *p, int i)
{
	struct io_uring_sqe *e = sqe(r);
	io_uring_prep_recv(e, p->s[i].fd, p->s[i].buf, BUFSZ, 0);
	io_uring_sqe_set_data64(e, tag(p, OP_RECV, i));
	p->inflight++;
}

/* send_from sends what side i read to the other side. */
static void send_from(struct io_uring *r, struct pair *p, int i)
{
	struct side *s = &p->s[i];
	struct io_uring_sqe *e = sqe(r);
	io_uring_prep_send(e, p->s[!i].fd, s->buf + s->off, s->len - s->off, MSG_NOSIGNAL);
	io_uring_sqe_set_data64(e, tag(p, OP_SEND, i));
	p->inflight++;
}

/* end shuts both sockets down, which ends their outstanding requests;
 * the pair is freed when the last one completes. */
static void end(struct pair *p)
{
	if (p->dead)
		return;
	p->dead = 1;
	shutdown(p->s[0].fd, SHUT_RDWR);
	shutdown(p->s[1].fd, SHUT_RDWR);
}

static void release(struct pair *p)
{
	if (p->dead && p->inflight == 0) {
		close(p->s[0].fd);
		close(p->s[1].fd);
		free(p);
	}
}

static void accepted(struct io_uring *r, int c)
{
	static const int one = 1;
	int t = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct pair *p = t < 0 ? NULL : aligned_alloc(16, sizeof *p);
	if (!p) {
		close(c);
		if (t >= 0)
			close(t);
		return;
	}
	setsockopt(t, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	memset(p, 0, offsetof(struct pair, s[0].buf));
	memset(&p->s[1], 0, offsetof(struct side, buf));
	p->inflight = p->dead = 0;
	p->s[0].fd = c;
	p->s[1].fd = t;
	struct io_uring_sqe *e = sqe(r);
	io_uring_prep_connect(e, t, (struct sockaddr *)&target, sizeof target);
	io_uring_sqe_set_data64(e, tag(p, OP_CONNECT, 1));
	p->inflight++;
}

static void complete(struct io_uring *r, struct io_uring_cqe *cqe, int lfd)
{
	uint64_t d = io_uring_cqe_get_data64(cqe);
	int res = cqe->res;
	if (d == OP_ACCEPT) {
		if (res >= 0)
			accepted(r, res);
		if (!(cqe->flags & IORING_CQE_F_MORE)) { /* re-arm the multishot */
			struct io_uring_sqe *e = sqe(r);
			io_uring_prep_multishot_accept(e, lfd, NULL, NULL, SOCK_CLOEXEC);
			io_uring_sqe_set_data64(e, OP_ACCEPT);
		}
		return;
	}
	struct pair *p = (struct pair *)(uintptr_t)(d & ~(uint64_t)15);
	int op = (int)(d >> 1 & 7), i = (int)(d & 1);
	p->inflight--;
	if (p->dead) {
		release(p);
		return;
	}
	struct side *s = &p->s[i];
	switch (op) {
	case OP_CONNECT:
		if (res < 0) {
			end(p);
			break;
		}
		recv_on(r, p, 0);
		recv_on(r, p, 1);
		break;
	case OP_RECV:
		if (res < 0) {
			end(p);
			break;
		}
		if (res == 0) {
			s->eof = 1;
			if (p->s[!i].eof) {
				end(p);
				break;
			}
			shutdown(p->s[!i].fd, SHUT_WR);
			break;
		}
		s->off = 0;
		s->len = (uint32_t)res;
		send_from(r, p, i);
		break;
	case OP_SEND:
		if (res < 0) {
			end(p);
			break;
		}
		s->off += (uint32_t)res;
		if (s->off < s->len)
			send_from(r, p, i);
		else
			recv_on(r, p, i);
		break;
	}
	release(p);
}

/* ring sets r up, with DEFER_TASKRUN where the kernel has it. */
static int ring(struct io_uring *r)
{
	struct io_uring_params prm = {.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN};
	if (io_uring_queue_init_params(ENTRIES, r, &prm) == 0)
		return 0;
	memset(&prm, 0, sizeof prm);
	return io_uring_queue_init_params(ENTRIES, r, &prm);
}

static void *loop(void *arg)
{
	int lfd = (int)(intptr_t)arg;
	struct io_uring r;
	int err = ring(&r);
	if (err < 0) {
		errno = -err;
		die("io_uring_queue_init");
	}
	struct io_uring_sqe *e = sqe(&r);
	io_uring_prep_multishot_accept(e, lfd, NULL, NULL, SOCK_CLOEXEC);
	io_uring_sqe_set_data64(e, OP_ACCEPT);
	for (;;) {
		err = io_uring_submit_and_wait(&r, 1);
		if (err < 0 && err != -EINTR && err != -EAGAIN && err != -EBUSY) {
			errno = -err;
			die("io_uring_submit_and_wait");
		}
		struct io_uring_cqe *cqe;
		unsigned head, n = 0;
		io_uring_for_each_cqe(&r, head, cqe)
		{
			complete(&r, cqe, lfd);
			n++;
		}
		io_uring_cq_advance(&r, n);
	}
	return NULL;
}

static void parse_addr(const char *s, struct sockaddr_in *sa)
{
	char host[64];
	const char *colon = strrchr(s, ':');
	if (!colon || colon - s >= (long)sizeof host) {
		fprintf(stderr, "relay: bad address %s (want ipv4:port)\n", s);
		exit(2);
	}
	memcpy(host, s, colon - s);
	host[colon - s] = 0;
	memset(sa, 0, sizeof *sa);
	sa->sin_family = AF_INET;
	sa->sin_port = htons((uint16_t)atoi(colon + 1));
	if (inet_pton(AF_INET, host, &sa->sin_addr) != 1) {
		fprintf(stderr, "relay: bad address %s (want ipv4:port)\n", s);
		exit(2);
	}
}

static int listener(struct sockaddr_in *sa)
{
	static const int one = 1;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0)
		die("SO_REUSEPORT");
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* inherited */
	if (bind(fd, (struct sockaddr *)sa, sizeof *sa) < 0)
		die("bind");
	if (listen(fd, 4096) < 0)
		die("listen");
	socklen_t len = sizeof *sa;
	getsockname(fd, (struct sockaddr *)sa, &len); /* the port, if 0 */
	return fd;
}

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "-probe") == 0) { /* can this kernel run it? */
		struct io_uring r;
		int err = ring(&r);
		if (err < 0) {
			fprintf(stderr, "io_uring_queue_init: %s\n", strerror(-err));
			return 1;
		}
		return 0;
	}
	if (argc != 4) {
		fprintf(stderr, "usage: relay LISTEN_IPV4:PORT TARGET_IPV4:PORT THREADS\n");
		return 2;
	}
	struct sockaddr_in lsa;
	parse_addr(argv[1], &lsa);
	parse_addr(argv[2], &target);
	int threads = atoi(argv[3]);
	if (threads < 1)
		threads = 1;
	signal(SIGPIPE, SIG_IGN);
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	for (int i = 0; i < threads; i++) {
		int lfd = listener(&lsa); /* the first picks the port the others share */
		pthread_t th;
		if (pthread_create(&th, NULL, loop, (void *)(intptr_t)lfd) != 0)
			die("pthread_create");
	}
	char ip[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &lsa.sin_addr, ip, sizeof ip);
	printf("LISTEN %s:%d\n", ip, ntohs(lsa.sin_port));
	fflush(stdout);
	char b[512];
	for (;;) {
		ssize_t n = read(0, b, sizeof b);
		if (n == 0 || (n < 0 && errno != EINTR))
			return 0;
	}
}
