/*
 * impairer: drop and delay packets of any protocol handed to an NFQUEUE.
 *
 *   impairer --queue 0 --loss 0.05 --delay 20ms --jitter 0 --seed 1
 *
 * Meant to run inside a private network namespace whose loopback OUTPUT
 * chain sends packets to the queue (see scripts/latency.sh). Each queued
 * packet is dropped with probability --loss (one seeded xorshift stream in
 * queue order) or else held and accepted once delay +- uniform jitter has
 * passed; verdicts are given by packet id, so they may go out of order (the
 * kernel allows that). At most --max-held packets are held; past that new
 * packets are dropped and counted as overflow. On SIGINT/SIGTERM it prints
 * per-protocol counters (IP bytes, headers included) on stderr and exits;
 * --lifetime D makes it exit by itself after D (0, the default, never).
 *
 * Build: cc -O2 -o impairer impairer.c -lnetfilter_queue -lnfnetlink
 * (Debian: libnetfilter-queue-dev)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <libnetfilter_queue/libnetfilter_queue.h>

#ifndef NETLINK_NO_ENOBUFS
#define NETLINK_NO_ENOBUFS 5
#endif
#ifndef SOL_NETLINK
#define SOL_NETLINK 270
#endif

struct held {
	uint64_t at;  /* monotonic ns */
	uint64_t seq; /* arrival order, breaks ties */
	uint32_t id;
};

static struct held *heap;
static size_t nheld, maxheld = 8192;
static uint64_t seqno;
static double loss;
static uint64_t delay_ns, jitter_ns;
static uint64_t rng_state;
static volatile sig_atomic_t stop;

enum { P_TCP, P_UDP, P_OTHER, NP };
static const char *pname[NP] = {"tcp", "udp", "other"};
static uint64_t c_pkts[NP], c_bytes[NP], c_drop[NP], c_over[NP], c_pass[NP];
static uint64_t c_late, recv_errs;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* xorshift64*, seeded through splitmix64 so small seeds spread */
static uint64_t rnd(void)
{
	uint64_t x = rng_state;
	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	rng_state = x;
	return x * 0x2545F4914F6CDD1Dull;
}

static double rnd01(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }

static int less(const struct held *a, const struct held *b)
{
	return a->at < b->at || (a->at == b->at && a->seq < b->seq);
}

static void push(struct held h)
{
	size_t i = nheld++;
	heap[i] = h;
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (!less(&heap[i], &heap[p]))
			break;
		struct held t = heap[i];
		heap[i] = heap[p];
		heap[p] = t;
		i = p;
	}
}

static struct held pop(void)
{
	struct held top = heap[0];
	heap[0] = heap[--nheld];
	size_t i = 0;
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		if (l < nheld && less(&heap[l], &heap[m]))
			m = l;
		if (r < nheld && less(&heap[r], &heap[m]))
			m = r;
		if (m == i)
			break;
		struct held t = heap[i];
		heap[i] = heap[m];
		heap[m] = t;
		i = m;
	}
	return top;
}

static int classify(const unsigned char *p, int len, uint64_t *iplen)
{
	*iplen = len > 0 ? (uint64_t)len : 0;
	if (len >= 20 && (p[0] >> 4) == 4) {
		*iplen = ((uint64_t)p[2] << 8) | p[3];
		return p[9] == 6 ? P_TCP : p[9] == 17 ? P_UDP : P_OTHER;
	}
	if (len >= 40 && (p[0] >> 4) == 6) {
		*iplen = (((uint64_t)p[4] << 8) | p[5]) + 40;
		return p[6] == 6 ? P_TCP : p[6] == 17 ? P_UDP : P_OTHER;
	}
	return P_OTHER;
}

static int on_packet(struct nfq_q_handle *qh, struct nfgenmsg *msg, struct nfq_data *nfa, void *data)
{
	(void)msg;
	(void)data;
	struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
	if (!ph)
		return 0;
	uint32_t id = ntohl(ph->packet_id);
	unsigned char *payload = NULL;
	int len = nfq_get_payload(nfa, &payload);
	uint64_t iplen;
	int proto = classify(payload, len, &iplen);
	c_pkts[proto]++;
	c_bytes[proto] += iplen;
	double u = rnd01();
	double j = jitter_ns ? (rnd01() * 2.0 - 1.0) * (double)jitter_ns : 0.0;
	if (loss > 0 && u < loss) {
		c_drop[proto]++;
		return nfq_set_verdict(qh, id, NF_DROP, 0, NULL);
	}
	if (delay_ns == 0 && jitter_ns == 0) {
		c_pass[proto]++;
		return nfq_set_verdict(qh, id, NF_ACCEPT, 0, NULL);
	}
	if (nheld >= maxheld) {
		c_over[proto]++;
		return nfq_set_verdict(qh, id, NF_DROP, 0, NULL);
	}
	double d = (double)delay_ns + j;
	if (d < 0)
		d = 0;
	c_pass[proto]++;
	push((struct held){.at = now_ns() + (uint64_t)d, .seq = seqno++, .id = id});
	return 0;
}

static uint64_t parse_dur(const char *s)
{
	char *end;
	double v = strtod(s, &end);
	if (end == s || v < 0) {
		fprintf(stderr, "impairer: bad duration %s\n", s);
		exit(2);
	}
	if (!strcmp(end, "") || !strcmp(end, "ms"))
		return (uint64_t)(v * 1e6);
	if (!strcmp(end, "us"))
		return (uint64_t)(v * 1e3);
	if (!strcmp(end, "s"))
		return (uint64_t)(v * 1e9);
	if (!strcmp(end, "ns"))
		return (uint64_t)v;
	fprintf(stderr, "impairer: bad duration unit in %s\n", s);
	exit(2);
}

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static void usage(void)
{
	fprintf(stderr, "usage: impairer [--queue N] [--loss P] [--delay D] [--jitter D] [--seed S] [--max-held N] [--lifetime D]\n"
			"  durations: 20ms, 500us, 0.02s (a bare number is milliseconds)\n");
	exit(2);
}

int main(int argc, char **argv)
{
	unsigned queue = 0;
	uint64_t seed = 1, lifetime_ns = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (i + 1 >= argc)
			usage();
		const char *v = argv[++i];
		if (!strcmp(a, "--queue"))
			queue = (unsigned)strtoul(v, NULL, 10);
		else if (!strcmp(a, "--loss"))
			loss = strtod(v, NULL);
		else if (!strcmp(a, "--delay"))
			delay_ns = parse_dur(v);
		else if (!strcmp(a, "--jitter"))
			jitter_ns = parse_dur(v);
		else if (!strcmp(a, "--seed"))
			seed = strtoull(v, NULL, 10);
		else if (!strcmp(a, "--lifetime"))
			lifetime_ns = parse_dur(v);
		else if (!strcmp(a, "--max-held"))
			maxheld = strtoul(v, NULL, 10);
		else
			usage();
	}
	if (loss < 0 || loss > 1 || maxheld == 0)
		usage();
	/* splitmix64 of the seed */
	uint64_t z = seed + 0x9E3779B97F4A7C15ull;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	rng_state = (z ^ (z >> 31)) | 1;

	heap = calloc(maxheld, sizeof *heap);
	if (!heap)
		return 1;

	struct nfq_handle *h = nfq_open();
	if (!h) {
		perror("impairer: nfq_open");
		return 1;
	}
	nfq_unbind_pf(h, AF_INET);
	if (nfq_bind_pf(h, AF_INET) < 0) {
		perror("impairer: nfq_bind_pf");
		return 1;
	}
	struct nfq_q_handle *qh = nfq_create_queue(h, queue, on_packet, NULL);
	if (!qh) {
		perror("impairer: nfq_create_queue");
		return 1;
	}
	if (nfq_set_mode(qh, NFQNL_COPY_PACKET, 128) < 0) {
		perror("impairer: nfq_set_mode");
		return 1;
	}
	nfq_set_queue_maxlen(qh, (uint32_t)(maxheld * 2));
	int fd = nfq_fd(h);
	nfnl_rcvbufsiz(nfq_nfnlh(h), 8 << 20);
	int one = 1;
	setsockopt(fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &one, sizeof one);

	struct sigaction sa = {0};
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	printf("impairer ready queue=%u loss=%g delay_ns=%llu jitter_ns=%llu seed=%llu max_held=%zu\n", queue, loss,
	       (unsigned long long)delay_ns, (unsigned long long)jitter_ns, (unsigned long long)seed, maxheld);
	fflush(stdout);

	static char buf[65536 + 4096] __attribute__((aligned));
	uint64_t started = now_ns();
	while (!stop) {
		uint64_t now = now_ns();
		if (lifetime_ns && now - started >= lifetime_ns)
			break;
		while (nheld > 0 && heap[0].at <= now) {
			struct held x = pop();
			if (now - x.at > 1000000)
				c_late++;
			nfq_set_verdict(qh, x.id, NF_ACCEPT, 0, NULL);
		}
		struct timespec to = {0, 100000000}; /* wake at least every 100 ms to notice signals */
		if (nheld > 0) {
			uint64_t w = heap[0].at - now;
			if (w < 100000000ull)
				to = (struct timespec){(time_t)(w / 1000000000ull), (long)(w % 1000000000ull)};
		}
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		int r = ppoll(&pfd, 1, &to, NULL);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			perror("impairer: ppoll");
			break;
		}
		if (r > 0 && (pfd.revents & POLLIN)) {
			/* drain what is ready without blocking */
			for (int k = 0; k < 64; k++) {
				ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
				if (n < 0) {
					if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
						recv_errs++;
					break;
				}
				nfq_handle_packet(h, buf, (int)n);
			}
		}
	}
	/* let the held packets go so nothing hangs on the way out */
	while (nheld > 0) {
		struct held x = pop();
		nfq_set_verdict(qh, x.id, NF_ACCEPT, 0, NULL);
	}
	fprintf(stderr, "impairer: late_over_1ms=%llu recv_errs=%llu", (unsigned long long)c_late,
		(unsigned long long)recv_errs);
	for (int p = 0; p < NP; p++)
		fprintf(stderr, " %s_pkts=%llu %s_bytes=%llu %s_dropped=%llu %s_overflow=%llu %s_passed=%llu", pname[p],
			(unsigned long long)c_pkts[p], pname[p], (unsigned long long)c_bytes[p], pname[p],
			(unsigned long long)c_drop[p], pname[p], (unsigned long long)c_over[p], pname[p],
			(unsigned long long)c_pass[p]);
	fprintf(stderr, "\n");
	nfq_destroy_queue(qh);
	nfq_close(h);
	return 0;
}
