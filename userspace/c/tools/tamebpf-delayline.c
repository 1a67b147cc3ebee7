// SPDX-License-Identifier: GPL-2.0-only
/*
 * tamebpf-delayline: a link emulator stage for the tamebpf testbed, built on
 * NFQUEUE because this kernel has no netem.
 *
 * An iptables rule in the router namespace sends one direction of traffic to
 * queue N. For every packet this program decides, in arrival order:
 *   - random loss (seeded, reproducible) -> NF_DROP at once;
 *   - RED, judged on a packet-exact mirror of the TBF + pfifo bottleneck that
 *     follows the rule -> NF_DROP at once;
 *   - otherwise the packet waits --delay-us in the kernel (we only ask for
 *     metadata) and is accepted when its time comes.
 * All packets of one queue share one delay, so release order is arrival
 * order and one batch verdict releases everything up to an id.
 *
 * Protocol with the caller: "ready" on stdout once the queue is bound, then
 * stdout is closed; errors and final statistics go to stderr. SIGTERM or
 * SIGINT ends it cleanly; SIGUSR1 prints the statistics so far. If it dies
 * the rule has no listener and packets are
 * dropped (the rule must never use --queue-bypass): a dead delay line shows as
 * a dead path, never as a silently shorter RTT.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <libnetfilter_queue/libnetfilter_queue.h>

#define RING_SIZE (1u << 17) /* > kernel queue maxlen, so it never fills */
#define COPY_BYTES 40 /* enough for an IPv4 or IPv6 header: the length */
#define ETH_OVERHEAD 14 /* TBF counts layer-2 bytes */

struct opts {
	unsigned int queue;
	uint64_t delay_ns;
	double loss; /* probability 0..1 */
	uint64_t seed;
	int red; /* RED on? then the fields below matter */
	double red_min, red_max, red_maxp, red_wq;
	double rate_bps; /* bottleneck rate, for the mirror */
	unsigned int limit; /* pfifo limit in packets */
	int fifo_prio;
	unsigned long slack_ns;
	unsigned int maxlen;
};

struct entry {
	uint32_t id;
	uint64_t release_ns;
};

struct stats {
	uint64_t packets, lost, red_drops, tail_drops, released, enobufs, verdict_errors;
	uint64_t late_sum_ns, late_max_ns;
};

/* The bottleneck mirror: departure times of packets still in the queue. */
struct mirror {
	uint64_t *depart; /* ring of departure times */
	unsigned int head, count;
	uint64_t last_depart_ns;
	uint64_t idle_since_ns;
	double avg; /* RED's averaged queue, packets */
	long since_drop; /* RED's count */
};

static volatile sig_atomic_t stop_flag, stats_flag;

static struct entry *ring;
static unsigned int ring_head, ring_count;
static struct opts o;
static struct stats st;
static struct mirror mq;
static uint64_t rng_state;

static void on_signal(int sig)
{
	if (sig == SIGUSR1)
		stats_flag = 1;
	else
		stop_flag = 1;
}

static void print_stats(void)
{
	fprintf(stderr,
		"delayline: queue %u packets %llu released %llu lost %llu red_drops %llu "
		"tail_drops %llu enobufs %llu verdict_errors %llu late_mean_us %.1f "
		"late_max_us %.1f\n",
		o.queue, (unsigned long long)st.packets, (unsigned long long)st.released,
		(unsigned long long)st.lost, (unsigned long long)st.red_drops,
		(unsigned long long)st.tail_drops, (unsigned long long)st.enobufs,
		(unsigned long long)st.verdict_errors,
		st.released ? (double)st.late_sum_ns / (double)st.released / 1e3 : 0.0,
		(double)st.late_max_ns / 1e3);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* splitmix64: small, seedable, good enough for drop decisions. */
static double rng_uniform(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return (double)(z >> 11) / 9007199254740992.0;
}

/* base^n by squaring: libm is not linked, and ns-2 counts idle time in whole packets. */
static double pow_uint(double base, uint64_t n)
{
	double r = 1.0;

	while (n) {
		if (n & 1)
			r *= base;
		base *= base;
		n >>= 1;
	}
	return r;
}

static int send_cfg(struct mnl_socket *nl, struct nlmsghdr *nlh)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	unsigned int portid = mnl_socket_get_portid(nl);
	uint32_t seq = (uint32_t)time(NULL);
	ssize_t n;

	nlh->nlmsg_flags |= NLM_F_ACK;
	nlh->nlmsg_seq = seq;
	if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0)
		return -1;
	n = mnl_socket_recvfrom(nl, buf, sizeof(buf));
	if (n < 0)
		return -1;
	return mnl_cb_run(buf, (size_t)n, seq, portid, NULL, NULL) < 0 ? -1 : 0;
}

static int setup_queue(struct mnl_socket *nl)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	struct nlmsghdr *nlh;
	int need_len = o.red;

	nlh = nfq_nlmsg_put(buf, NFQNL_MSG_CONFIG, o.queue);
	nfq_nlmsg_cfg_put_cmd(nlh, AF_INET, NFQNL_CFG_CMD_BIND);
	if (send_cfg(nl, nlh) < 0) {
		fprintf(stderr, "delayline: cannot bind queue %u: %s (another listener on it?)\n",
			o.queue, strerror(errno));
		return -1;
	}
	nlh = nfq_nlmsg_put(buf, NFQNL_MSG_CONFIG, o.queue);
	/* Metadata only unless RED needs the packet length from the IP header. */
	nfq_nlmsg_cfg_put_params(nlh, need_len ? NFQNL_COPY_PACKET : NFQNL_COPY_META,
				 need_len ? COPY_BYTES : 0);
	nfq_nlmsg_cfg_put_qmaxlen(nlh, o.maxlen);
	if (send_cfg(nl, nlh) < 0) {
		fprintf(stderr, "delayline: cannot configure queue %u: %s\n", o.queue,
			strerror(errno));
		return -1;
	}
	return 0;
}

static int send_verdict(struct mnl_socket *nl, int type, uint32_t id, int verdict)
{
	char buf[256];
	struct nlmsghdr *nlh = nfq_nlmsg_put(buf, type, o.queue);

	nfq_nlmsg_verdict_put(nlh, (int)id, verdict);
	if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0) {
		fprintf(stderr, "delayline: verdict failed: %s\n", strerror(errno));
		return -1;
	}
	return 0;
}

/* Releases every packet whose time has come with one batch verdict. */
static int release_due(struct mnl_socket *nl, uint64_t now)
{
	uint32_t last = 0;
	int any = 0;

	while (ring_count) {
		struct entry *e = &ring[ring_head];
		uint64_t late;

		if (e->release_ns > now)
			break;
		late = now - e->release_ns;
		st.late_sum_ns += late;
		if (late > st.late_max_ns)
			st.late_max_ns = late;
		last = e->id;
		any = 1;
		ring_head = (ring_head + 1) % RING_SIZE;
		ring_count--;
		st.released++;
	}
	if (!any)
		return 0;
	return send_verdict(nl, NFQNL_MSG_VERDICT_BATCH, last, NF_ACCEPT);
}

/* Releases everything held, early: at exit (rather than leave it to the
 * unbind, which drops) and if the ring were ever full. Not counted as late. */
static int release_all(struct mnl_socket *nl)
{
	uint32_t last;

	if (!ring_count)
		return 0;
	last = ring[(ring_head + ring_count - 1) % RING_SIZE].id;
	st.released += ring_count;
	ring_count = 0;
	return send_verdict(nl, NFQNL_MSG_VERDICT_BATCH, last, NF_ACCEPT);
}

/* Layer-2 length from the copied IP header (0 if it cannot be read). */
static unsigned int l2_len(struct nlattr **attr)
{
	const uint8_t *p;
	uint16_t len;

	if (!attr[NFQA_PAYLOAD] || mnl_attr_get_payload_len(attr[NFQA_PAYLOAD]) < 20)
		return 0;
	p = mnl_attr_get_payload(attr[NFQA_PAYLOAD]);
	if ((p[0] >> 4) == 4) {
		memcpy(&len, p + 2, 2);
		return ntohs(len) + ETH_OVERHEAD;
	}
	if ((p[0] >> 4) == 6 && mnl_attr_get_payload_len(attr[NFQA_PAYLOAD]) >= 40) {
		memcpy(&len, p + 4, 2);
		return ntohs(len) + 40 + ETH_OVERHEAD;
	}
	return 0;
}

/*
 * RED (Floyd & Jacobson, "gentle" variant as in ns-2) on the mirror of the
 * bottleneck queue. Returns 1 to drop. A packet the real pfifo would tail-drop
 * is dropped here too, so the mirror never holds packets the qdisc lost.
 */
static int red_judge(uint64_t now, unsigned int bytes)
{
	double tx_ns = (double)bytes * 8e9 / o.rate_bps;
	double pb, pa;
	unsigned int q;

	while (mq.count && mq.depart[mq.head] <= now) {
		mq.head = (mq.head + 1) % o.limit;
		mq.count--;
	}
	q = mq.count;
	if (q == 0 && mq.idle_since_ns) {
		/* Decay the average over the idle time, counted in typical packets. */
		double m = (double)(now - mq.idle_since_ns) / (1514.0 * 8e9 / o.rate_bps);

		mq.avg *= pow_uint(1.0 - o.red_wq, (uint64_t)m);
	} else {
		mq.avg = (1.0 - o.red_wq) * mq.avg + o.red_wq * q;
	}
	mq.idle_since_ns = 0;

	if (mq.avg < o.red_min) {
		mq.since_drop = -1;
		goto enqueue;
	}
	if (mq.avg < o.red_max)
		pb = o.red_maxp * (mq.avg - o.red_min) / (o.red_max - o.red_min);
	else if (mq.avg < 2 * o.red_max)
		pb = o.red_maxp + (1 - o.red_maxp) * (mq.avg - o.red_max) / o.red_max;
	else
		pb = 1.0;
	mq.since_drop++;
	pa = mq.since_drop * pb >= 1.0 ? 1.0 : pb / (1.0 - mq.since_drop * pb);
	if (rng_uniform() < pa) {
		mq.since_drop = 0;
		st.red_drops++;
		return 1;
	}
enqueue:
	if (q >= o.limit) {
		st.tail_drops++;
		return 1;
	}
	{
		uint64_t start = mq.last_depart_ns > now ? mq.last_depart_ns : now;
		uint64_t dep = start + (uint64_t)tx_ns;

		mq.depart[(mq.head + mq.count) % o.limit] = dep;
		mq.count++;
		mq.last_depart_ns = dep;
		mq.idle_since_ns = dep; /* the queue is empty from then on, unless refilled */
	}
	return 0;
}

struct cb_ctx {
	struct mnl_socket *nl;
	uint64_t now;
};

static int on_packet(const struct nlmsghdr *nlh, void *data)
{
	struct cb_ctx *ctx = data;
	struct nlattr *attr[NFQA_MAX + 1] = { 0 };
	struct nfqnl_msg_packet_hdr *ph;
	uint32_t id;

	if (nfq_nlmsg_parse(nlh, attr) < 0 || !attr[NFQA_PACKET_HDR])
		return MNL_CB_OK;
	ph = mnl_attr_get_payload(attr[NFQA_PACKET_HDR]);
	id = ntohl(ph->packet_id);
	st.packets++;

	if (o.loss > 0 && rng_uniform() < o.loss) {
		st.lost++;
		return send_verdict(ctx->nl, NFQNL_MSG_VERDICT, id, NF_DROP) < 0 ? MNL_CB_ERROR
										: MNL_CB_OK;
	}
	if (o.red) {
		unsigned int bytes = l2_len(attr);

		if (bytes && red_judge(ctx->now, bytes))
			return send_verdict(ctx->nl, NFQNL_MSG_VERDICT, id, NF_DROP) < 0
				       ? MNL_CB_ERROR
				       : MNL_CB_OK;
	}
	if (ring_count == RING_SIZE) /* cannot happen with maxlen < RING_SIZE */
		release_all(ctx->nl);
	ring[(ring_head + ring_count) % RING_SIZE] =
		(struct entry){ .id = id, .release_ns = ctx->now + o.delay_ns };
	ring_count++;
	return MNL_CB_OK;
}

static int run(struct mnl_socket *nl)
{
	static char buf[1 << 18];
	int fd = mnl_socket_get_fd(nl);
	unsigned int portid = mnl_socket_get_portid(nl);
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	sigset_t unblocked;

	sigemptyset(&unblocked);
	while (!stop_flag) {
		struct timespec ts, *tsp = NULL;
		uint64_t now = now_ns();
		int r;

		if (ring_count) {
			uint64_t due = ring[ring_head].release_ns;
			uint64_t wait = due > now ? due - now : 0;

			ts.tv_sec = (time_t)(wait / 1000000000ull);
			ts.tv_nsec = (long)(wait % 1000000000ull);
			tsp = &ts;
		}
		/* Signals are blocked except while we sleep here: no lost wake-up. */
		r = ppoll(&pfd, 1, tsp, &unblocked);
		if (r < 0 && errno != EINTR) {
			perror("delayline: ppoll");
			return -1;
		}
		if (r > 0) {
			for (;;) {
				ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
				struct cb_ctx ctx = { .nl = nl, .now = now_ns() };

				if (n < 0) {
					if (errno == ENOBUFS) {
						/* Lost notifications: those packets are released
						 * by the next batch verdict. Count them. */
						st.enobufs++;
						continue;
					}
					if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
						break;
					perror("delayline: recv");
					return -1;
				}
				if (mnl_cb_run(buf, (size_t)n, 0, portid, on_packet, &ctx) < 0) {
					/* A verdict for packets the kernel already dropped
					 * (e.g. a device going down) is not fatal. */
					if (errno == ENOENT) {
						st.verdict_errors++;
						continue;
					}
					perror("delayline: netlink");
					return -1;
				}
			}
		}
		if (release_due(nl, now_ns()) < 0)
			return -1;
		if (stats_flag) {
			stats_flag = 0;
			print_stats();
		}
	}
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: tamebpf-delayline --queue N [--delay-us US] [--loss PCT] [--seed S]\n"
		"         [--red MIN,MAX,MAXP,WQ --rate-bps R --limit PKTS]\n"
		"         [--fifo-prio P] [--slack-ns NS] [--maxlen PKTS]\n"
		"Delays (and optionally drops) the packets an iptables NFQUEUE rule sends to\n"
		"queue N. Prints \"ready\" when bound; statistics on stderr at exit and on SIGUSR1.\n");
}

static int parse(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "queue", required_argument, 0, 'q' },    { "delay-us", required_argument, 0, 'd' },
		{ "loss", required_argument, 0, 'l' },     { "seed", required_argument, 0, 's' },
		{ "red", required_argument, 0, 'r' },      { "rate-bps", required_argument, 0, 'R' },
		{ "limit", required_argument, 0, 'L' },    { "fifo-prio", required_argument, 0, 'f' },
		{ "slack-ns", required_argument, 0, 'S' }, { "maxlen", required_argument, 0, 'm' },
		{ "help", no_argument, 0, 'h' },           { 0, 0, 0, 0 },
	};
	int c, have_queue = 0;

	o.slack_ns = 50000;
	o.maxlen = 65536;
	o.seed = 1;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 'q':
			o.queue = (unsigned int)strtoul(optarg, NULL, 10);
			have_queue = 1;
			break;
		case 'd':
			o.delay_ns = strtoull(optarg, NULL, 10) * 1000ull;
			break;
		case 'l':
			o.loss = strtod(optarg, NULL) / 100.0;
			break;
		case 's':
			o.seed = strtoull(optarg, NULL, 10);
			break;
		case 'r':
			if (sscanf(optarg, "%lf,%lf,%lf,%lf", &o.red_min, &o.red_max, &o.red_maxp,
				   &o.red_wq) != 4 ||
			    o.red_max <= o.red_min || o.red_wq <= 0 || o.red_wq >= 1) {
				fprintf(stderr, "delayline: --red wants MIN,MAX,MAXP,WQ with MIN < MAX, 0 < WQ < 1\n");
				return -1;
			}
			o.red = 1;
			break;
		case 'R':
			o.rate_bps = strtod(optarg, NULL);
			break;
		case 'L':
			o.limit = (unsigned int)strtoul(optarg, NULL, 10);
			break;
		case 'f':
			o.fifo_prio = atoi(optarg);
			break;
		case 'S':
			o.slack_ns = strtoul(optarg, NULL, 10);
			break;
		case 'm':
			o.maxlen = (unsigned int)strtoul(optarg, NULL, 10);
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -1;
		}
	}
	if (!have_queue || o.loss < 0 || o.loss > 1 || o.maxlen == 0 || o.maxlen >= RING_SIZE) {
		usage(stderr);
		return -1;
	}
	if (o.red && (o.rate_bps <= 0 || o.limit == 0)) {
		fprintf(stderr, "delayline: --red needs --rate-bps and --limit of the bottleneck\n");
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct mnl_socket *nl = NULL;
	struct sigaction sa = { .sa_handler = on_signal };
	sigset_t block;
	int rcvbuf = 8 << 20, err = 1;

	if (parse(argc, argv) < 0)
		return 2;
	rng_state = o.seed;

	/* Handle SIGTERM/SIGINT only inside ppoll (see run()). */
	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGINT);
	sigaddset(&block, SIGUSR1);
	sigprocmask(SIG_BLOCK, &block, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL); /* statistics so far, on stderr */

	/* Late releases are RTT error: small timer slack, and real-time priority
	 * when asked (cuts the worst case from ms to sub-ms on a busy VM). */
	prctl(PR_SET_TIMERSLACK, o.slack_ns ? o.slack_ns : 1, 0, 0, 0);
	if (o.fifo_prio > 0) {
		struct sched_param sp = { .sched_priority = o.fifo_prio };

		if (sched_setscheduler(0, SCHED_FIFO, &sp) < 0)
			fprintf(stderr, "delayline: SCHED_FIFO not available (%s), running without\n",
				strerror(errno));
	}

	ring = calloc(RING_SIZE, sizeof(*ring));
	if (o.red)
		mq.depart = calloc(o.limit, sizeof(*mq.depart));
	if (!ring || (o.red && !mq.depart)) {
		fprintf(stderr, "delayline: out of memory\n");
		goto cleanup;
	}
	nl = mnl_socket_open(NETLINK_NETFILTER);
	if (!nl || mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) {
		fprintf(stderr, "delayline: netlink socket: %s (root needed)\n", strerror(errno));
		goto cleanup;
	}
	/* A large socket buffer: bursts of notifications must not overflow it. */
	if (setsockopt(mnl_socket_get_fd(nl), SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf,
		       sizeof(rcvbuf)) < 0)
		setsockopt(mnl_socket_get_fd(nl), SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	if (setup_queue(nl) < 0)
		goto cleanup;

	printf("ready\n");
	fflush(stdout);
	/* Nothing more goes to stdout: the caller may have closed its end. */
	freopen("/dev/null", "w", stdout);

	err = run(nl) < 0;
	release_all(nl);
	print_stats();
cleanup:
	if (nl)
		mnl_socket_close(nl);
	free(ring);
	free(mq.depart);
	return err;
}
