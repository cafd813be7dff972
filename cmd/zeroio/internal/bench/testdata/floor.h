/*
 * floor.h: what the bench's C relays (cfloor/relay.c, uringfloor/relay.c,
 * udprelay/relay.c) share: their command line, listeners and lifetime.
 *
 *   relay LISTEN_IPV4:PORT TARGET_IPV4:PORT THREADS
 *
 * Each of THREADS threads runs loop on a SO_REUSEPORT listener of its own
 * (the kernel spreads connections, or UDP clients by their address and
 * port, across them): a TCP listener, or a UDP socket where the relay
 * sets listen_type to SOCK_DGRAM. The relay prints
 * "LISTEN ip:port" on stdout once it listens (port 0 picks one) and serves
 * until stdin reaches end of file.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

static struct sockaddr_in target;
static int listen_type = SOCK_STREAM;

static void die(const char *what)
{
	perror(what);
	exit(1);
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
	int fd = socket(AF_INET, listen_type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket");
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) < 0)
		die("SO_REUSEPORT");
	if (listen_type == SOCK_STREAM)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* inherited */
	if (bind(fd, (struct sockaddr *)sa, sizeof *sa) < 0)
		die("bind");
	if (listen_type == SOCK_STREAM && listen(fd, 4096) < 0)
		die("listen");
	socklen_t len = sizeof *sa;
	getsockname(fd, (struct sockaddr *)sa, &len); /* the port, if 0 */
	return fd;
}

/* parse_args reads the command line into lsa and target, and returns the
 * number of threads. It raises the descriptor limit to its maximum and
 * returns that in *maxfd. */
static int parse_args(int argc, char **argv, struct sockaddr_in *lsa, rlim_t *maxfd)
{
	if (argc != 4) {
		fprintf(stderr, "usage: relay LISTEN_IPV4:PORT TARGET_IPV4:PORT THREADS\n");
		exit(2);
	}
	parse_addr(argv[1], lsa);
	parse_addr(argv[2], &target);
	int threads = atoi(argv[3]);
	signal(SIGPIPE, SIG_IGN); /* a write to a reset peer is an error, not death */
	struct rlimit rl;
	*maxfd = 1024;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
		*maxfd = rl.rlim_cur;
	}
	return threads < 1 ? 1 : threads;
}

/* serve starts the threads, each running loop with its listener's
 * descriptor as argument, says where it listens, and returns when stdin
 * ends. */
static int serve(struct sockaddr_in *lsa, int threads, void *(*loop)(void *))
{
	for (int i = 0; i < threads; i++) {
		int lfd = listener(lsa); /* the first picks the port the others share */
		pthread_t th;
		if (pthread_create(&th, NULL, loop, (void *)(intptr_t)lfd) != 0)
			die("pthread_create");
	}
	char ip[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &lsa->sin_addr, ip, sizeof ip);
	printf("LISTEN %s:%d\n", ip, ntohs(lsa->sin_port));
	fflush(stdout);
	char b[512];
	for (;;) {
		ssize_t n = read(0, b, sizeof b);
		if (n == 0 || (n < 0 && errno != EINTR))
			return 0;
	}
}
