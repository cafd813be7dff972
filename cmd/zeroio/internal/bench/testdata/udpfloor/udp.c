/*
 * udp.c: the floor of zeroio bench's UDP suites. A sender and a receiver
 * on loopback doing only the system calls that move the datagrams, so
 * that what it costs is close to the kernel's share; what a Go program
 * spends above it is its own.
 *
 *   udp MODE PATTERN SIZE BATCH COUNT SOCKBUF [GROBUFS [SENDIOV]]
 *
 * MODE gso: each send is one sendmmsg whose headers each carry one
 * contiguous iovec of up to 64 datagrams (and 65,507 bytes) with
 * UDP_SEGMENT (kernel commit bec1f6f69736); the receiver has UDP_GRO on
 * (kernel commit e20cf8d3f1f7) and reads GROBUFS (default 8) 64 KiB
 * buffers per recvmmsg, counting datagrams by the segment size the kernel
 * reports. SENDIOV "each" gives each datagram an iovec of its own instead
 * (the shape of a sender that does not copy into one buffer), "copy"
 * copies each datagram from a buffer of its own into the contiguous one
 * before sending (the shape of one that does).
 * MODE mmsg: one sendmmsg of BATCH datagrams, one header each, and
 * recvmmsg of as many.
 *
 * PATTERN pingpong: COUNT rounds, each sending BATCH datagrams of SIZE
 * bytes and reading them back, on one thread (BenchmarkUDP).
 * PATTERN stream: a sender thread sends COUNT datagrams in batches of
 * BATCH, at most WINDOW ahead of what the receiver thread has read; after
 * 50 ms without progress it stops waiting and goes on; the receiver gives
 * up 200 ms after the sender is done and nothing arrives
 * (BenchmarkUDPThroughput).
 *
 * Both sockets are bound to 127.0.0.1 with SOCKBUF-byte buffers
 * (SO_RCVBUFFORCE and SO_SNDBUFFORCE where allowed, else the plain ones).
 * The program prints "READY" once set up, starts when a line arrives on
 * stdin, and prints "DONE elapsed-ns delivered last-ns cpu-ns": the time
 * of the run, the datagrams received, the time until the last arrived,
 * and the CPU time (user and system) both threads spent in it.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

#define WINDOW 4096
#define MAXGSO 64
#define MAXGSOBYTES (65535 - 20 - 8)
#define GROBUF 65536
#define MAXGROBUFS 64

static int gso, each, copyin, size, batch, grobufs = 8;
static int per; /* datagrams per send header */
static char *sepbuf; /* copyin: the datagrams in buffers of their own */
static long count;
static int tx, rx;
static struct sockaddr_in dst;

/* Sender state: the headers, iovecs and control buffers of one batch. */
static struct mmsghdr *shs;
static struct iovec *siov;
static char *sbuf;
static union {
	char buf[CMSG_SPACE(sizeof(uint16_t))];
	struct cmsghdr align;
} *sctl;

/* Receiver state. */
static struct mmsghdr *rhs;
static struct iovec *riov;
static char *rbuf;
static union {
	char buf[CMSG_SPACE(sizeof(int))];
	struct cmsghdr align;
} *rctl;
static int rslots;

static volatile long got, sent_all;
static int64_t last_ns;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t credit = PTHREAD_COND_INITIALIZER;

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static int64_t now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t cpu(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ((int64_t)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000 +
	       ((int64_t)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
}

static int sock(int bufsz, struct sockaddr_in *sa)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket");
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bufsz, sizeof bufsz) < 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bufsz, sizeof bufsz);
	if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &bufsz, sizeof bufsz) < 0)
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bufsz, sizeof bufsz);
	memset(sa, 0, sizeof *sa);
	sa->sin_family = AF_INET;
	sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)sa, sizeof *sa) < 0)
		die("bind");
	socklen_t len = sizeof *sa;
	getsockname(fd, (struct sockaddr *)sa, &len);
	return fd;
}

/* setup_send lays out one batch: with gso, groups of per datagrams, each
 * one header with one iovec over the contiguous payload (or, with each,
 * an iovec per datagram) and UDP_SEGMENT; without, a header per
 * datagram. It returns the number of headers. */
static int setup_send(void)
{
	per = gso ? MAXGSOBYTES / size : 1;
	if (per > MAXGSO)
		per = MAXGSO;
	if (per < 1)
		per = 1;
	int groups = (batch + per - 1) / per;
	shs = calloc(groups, sizeof *shs);
	siov = calloc(batch, sizeof *siov);
	sctl = calloc(groups, sizeof *sctl);
	sbuf = calloc(batch, size);
	if (!shs || !siov || !sctl || !sbuf)
		die("calloc");
	for (int g = 0; g < groups; g++) {
		int first = g * per, n = batch - first < per ? batch - first : per;
		struct msghdr *h = &shs[g].msg_hdr;
		h->msg_name = &dst;
		h->msg_namelen = sizeof dst;
		h->msg_iov = &siov[first];
		if (gso && !each) {
			siov[first].iov_base = sbuf + (size_t)first * size;
			siov[first].iov_len = (size_t)n * size;
			h->msg_iovlen = 1;
		} else {
			for (int i = 0; i < n; i++) {
				siov[first + i].iov_base = sbuf + (size_t)(first + i) * size;
				siov[first + i].iov_len = size;
			}
			h->msg_iovlen = n;
		}
		if (gso && n > 1) {
			h->msg_control = sctl[g].buf;
			h->msg_controllen = sizeof sctl[g].buf;
			struct cmsghdr *c = CMSG_FIRSTHDR(h);
			c->cmsg_level = SOL_UDP;
			c->cmsg_type = UDP_SEGMENT;
			c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
			*(uint16_t *)CMSG_DATA(c) = (uint16_t)size;
		}
	}
	return groups;
}

/* send_n sends the first n datagrams of the batch (n <= batch). */
static void send_n(int n)
{
	int groups = (n + per - 1) / per, last = n - (groups - 1) * per;
	/* Trim the last group to what is sent, and restore it after. */
	struct msghdr *h = &shs[groups - 1].msg_hdr;
	size_t oldlen = h->msg_iovlen == 1 ? h->msg_iov[0].iov_len : 0;
	size_t oldiovlen = h->msg_iovlen;
	size_t oldctl = h->msg_controllen;
	if (gso && !each)
		h->msg_iov[0].iov_len = (size_t)last * size;
	else if (gso || last < per)
		h->msg_iovlen = last;
	if (last == 1) {
		h->msg_control = NULL;
		h->msg_controllen = 0;
	}
	if (copyin)
		for (int i = 0; i < n; i++)
			memcpy(sbuf + (size_t)i * size, sepbuf + (size_t)i * 4096, size);
	for (int done = 0; done < groups;) {
		int k = sendmmsg(tx, shs + done, groups - done, 0);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			die("sendmmsg");
		}
		done += k;
	}
	if (gso && !each)
		h->msg_iov[0].iov_len = oldlen;
	h->msg_iovlen = oldiovlen;
	if (oldctl) {
		h->msg_control = sctl[groups - 1].buf;
		h->msg_controllen = oldctl;
	}
}

static void setup_recv(void)
{
	int bufsz = gso ? GROBUF : size + 1;
	rslots = gso ? grobufs : batch;
	rhs = calloc(rslots, sizeof *rhs);
	riov = calloc(rslots, sizeof *riov);
	rctl = calloc(rslots, sizeof *rctl);
	rbuf = calloc(rslots, bufsz);
	if (!rhs || !riov || !rctl || !rbuf)
		die("calloc");
	for (int i = 0; i < rslots; i++) {
		riov[i].iov_base = rbuf + (size_t)i * bufsz;
		riov[i].iov_len = bufsz;
		rhs[i].msg_hdr.msg_iov = &riov[i];
		rhs[i].msg_hdr.msg_iovlen = 1;
	}
	if (gso) {
		int one = 1;
		if (setsockopt(rx, SOL_UDP, UDP_GRO, &one, sizeof one) < 0)
			die("UDP_GRO");
	}
}

/* recv_some reads at most max datagrams' worth of headers (all GRO
 * buffers with gso), blocking for the first unless flags has
 * MSG_DONTWAIT, and returns the datagrams received, 0 on a receive
 * timeout or when nothing is queued. */
static int recv_some(int max, int flags)
{
	int vlen = gso ? rslots : (max < rslots ? max : rslots);
	for (int i = 0; i < vlen; i++) {
		rhs[i].msg_hdr.msg_control = rctl[i].buf;
		rhs[i].msg_hdr.msg_controllen = gso ? sizeof rctl[i].buf : 0;
	}
	int k = recvmmsg(rx, rhs, vlen, MSG_WAITFORONE | flags, NULL);
	if (k < 0) {
		if (errno == EAGAIN || errno == EINTR)
			return 0;
		die("recvmmsg");
	}
	int n = 0;
	for (int i = 0; i < k; i++) {
		int len = rhs[i].msg_len, seg = 0;
		struct msghdr *h = &rhs[i].msg_hdr;
		if (gso)
			for (struct cmsghdr *c = CMSG_FIRSTHDR(h); c; c = CMSG_NXTHDR(h, c))
				if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO)
					seg = *(int *)CMSG_DATA(c);
		n += seg > 0 && seg < len ? (len + seg - 1) / seg : 1;
	}
	return n;
}

/* pingpong polls for what it sent rather than sleep in recvmmsg: a
 * round trip on loopback takes microseconds, less than waking a thread
 * that slept, and a Go program's scheduler spins that long before it
 * parks. */
static void pingpong(void)
{
	for (long op = 0; op < count; op++) {
		send_n(batch);
		int64_t deadline = now() + 5000000000LL;
		for (int g = 0, polls = 0; g < batch; polls++) {
			int k = recv_some(batch - g, MSG_DONTWAIT);
			if (k == 0 && (polls & 1023) == 1023 && now() > deadline) {
				fprintf(stderr, "udp: received %d of %d\n", g, batch);
				exit(1);
			}
			g += k;
			got += k;
		}
	}
	last_ns = now();
}

static void *receiver(void *arg)
{
	(void)arg;
	struct timeval tv = {0, 200000};
	setsockopt(rx, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
	while (got < count) {
		int k = recv_some(batch, 0);
		if (k == 0) {
			if (__atomic_load_n(&sent_all, __ATOMIC_ACQUIRE))
				break;
			continue;
		}
		__atomic_add_fetch(&got, k, __ATOMIC_RELEASE);
		last_ns = now();
		pthread_mutex_lock(&mu);
		pthread_cond_signal(&credit);
		pthread_mutex_unlock(&mu);
	}
	return NULL;
}

static void stream(void)
{
	pthread_t th;
	if (pthread_create(&th, NULL, receiver, NULL) != 0)
		die("pthread_create");
	for (long sent = 0; sent < count;) {
		while (sent - __atomic_load_n(&got, __ATOMIC_ACQUIRE) > WINDOW) {
			struct timespec dl;
			clock_gettime(CLOCK_REALTIME, &dl);
			dl.tv_nsec += 50000000;
			if (dl.tv_nsec >= 1000000000) {
				dl.tv_sec++;
				dl.tv_nsec -= 1000000000;
			}
			pthread_mutex_lock(&mu);
			int r = 0;
			if (sent - __atomic_load_n(&got, __ATOMIC_ACQUIRE) > WINDOW)
				r = pthread_cond_timedwait(&credit, &mu, &dl);
			pthread_mutex_unlock(&mu);
			if (r == ETIMEDOUT)
				break;
		}
		int k = count - sent < batch ? (int)(count - sent) : batch;
		send_n(k);
		sent += k;
	}
	__atomic_store_n(&sent_all, 1, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
}

int main(int argc, char **argv)
{
	if (argc < 7 || argc > 9) {
		fprintf(stderr, "usage: udp gso|mmsg pingpong|stream SIZE BATCH COUNT SOCKBUF [GROBUFS [each|copy]]\n");
		return 2;
	}
	gso = strcmp(argv[1], "gso") == 0;
	int streaming = strcmp(argv[2], "stream") == 0;
	size = atoi(argv[3]);
	batch = atoi(argv[4]);
	count = atol(argv[5]);
	int sockbuf = atoi(argv[6]);
	if (argc > 7)
		grobufs = atoi(argv[7]);
	each = argc > 8 && strcmp(argv[8], "each") == 0;
	copyin = argc > 8 && strcmp(argv[8], "copy") == 0;
	if (copyin && size <= 4096 && !(sepbuf = calloc(batch, 4096)))
		die("calloc");
	if (copyin && size > 4096)
		copyin = 0;
	if (size < 1 || size > MAXGSOBYTES || batch < 1 || count < 0 || grobufs < 1 || grobufs > MAXGROBUFS) {
		fprintf(stderr, "udp: bad arguments\n");
		return 2;
	}
	struct sockaddr_in txa;
	tx = sock(sockbuf, &txa);
	rx = sock(sockbuf, &dst);
	setup_send();
	setup_recv();
	printf("READY\n");
	fflush(stdout);
	char line[64];
	if (!fgets(line, sizeof line, stdin))
		return 0;
	int64_t c0 = cpu(), t0 = now();
	last_ns = t0;
	if (streaming)
		stream();
	else
		pingpong();
	int64_t t1 = now(), c1 = cpu();
	printf("DONE %lld %ld %lld %lld\n", (long long)(t1 - t0), (long)got, (long long)(last_ns - t0), (long long)(c1 - c0));
	fflush(stdout);
	return 0;
}
