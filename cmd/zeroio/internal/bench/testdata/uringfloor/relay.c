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
 * Command line and lifetime: ../floor.h; "relay -probe" exits 0 if the
 * kernel sets up a ring (io_uring may be disabled, or refused by seccomp).
 * Built with -luring.
 */
#define _GNU_SOURCE
#include "../floor.h"
#include <liburing.h>
#include <stddef.h>

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
	struct sockaddr_in lsa;
	rlim_t maxfd;
	int threads = parse_args(argc, argv, &lsa, &maxfd);
	return serve(&lsa, threads, loop);
}
