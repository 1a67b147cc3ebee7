// SPDX-License-Identifier: GPL-2.0-only
/*
 * tamebpf-delayline: the emulated bottleneck link of the tamebpf testbed,
 * built on NFQUEUE because this kernel has no netem.
 *
 * iptables rules in the router namespace send the data direction of each
 * source (our sender, the cross traffic) to its own queue. One process serves
 * all of them, because they share one link. For every packet, in arrival
 * order:
 *   - random loss (seeded, reproducible) -> NF_DROP at once;
 *   - the bottleneck (--rate-bps, --limit): a drop-tail FIFO of LIMIT packets
 *     drained at the link rate, or RED in front of it -> NF_DROP at once when
 *     full (or when RED says so);
 *   - otherwise the packet waits in the kernel (we only copy its IP header)
 *     until it has left the bottleneck and crossed its source's one-way
 *     delay, and is then accepted.
 *
 * The link runs on a virtual clock: a packet's departure is computed from the
 * previous packet's departure and the rate, and its arrival is the kernel's
 * receive timestamp. A late timer wake-up (this VM wakes sleepers up to ms
 * late after hours of uptime) then releases a batch on schedule instead of
 * losing link time, which a qdisc's token bucket of two frames cannot do.
 *
 * All packets of one queue share one delay and leave the FIFO in order, so
 * release order is arrival order and one batch verdict releases everything
 * up to an id.
 *
 * Protocol with the caller: "ready" on stdout once the queues are bound, then
 * stdout is closed; errors and statistics go to stderr. SIGTERM or SIGINT
 * ends it cleanly; SIGUSR1 prints the statistics so far. If it dies the
 * rules have no listener and packets are dropped (the rules must never use
 * --queue-bypass): a dead link shows as a dead path, never as a faster one.
 */
#define _GNU_SOURCE
#include <errno.h>
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
#include <endian.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <libnetfilter_queue/libnetfilter_queue.h>

#define RING_SIZE (1u << 17) /* > kernel queue maxlen, so it never fills */
#define COPY_BYTES 40 /* enough for an IPv4 or IPv6 header: the length */
#define ETH_OVERHEAD 14 /* the link counts layer-2 bytes, as a qdisc does */
#define MAX_QUEUES 4
#define RECV_BATCH 64
#define READ_ROUNDS 16 /* batches read before the due packets are released */

struct entry {
	uint32_t id;
	uint64_t release_ns;
};

/* One NFQUEUE: one source's packets, one one-way delay, FIFO release. */
struct queue {
	unsigned int num;
	uint64_t delay_ns;
	struct entry *ring;
	unsigned int head, count;
};

struct opts {
	struct queue q[MAX_QUEUES];
	unsigned int nq;
	double loss; /* probability 0..1 */
	uint64_t seed;
	double rate_bps; /* 0: no bottleneck, a pure delay line */
	unsigned int limit; /* FIFO limit in packets */
	int red; /* RED on? then the fields below matter */
	double red_min, red_max, red_maxp, red_wq;
	int fifo_prio;
	unsigned long slack_ns;
	unsigned int maxlen;
};

struct stats {
	uint64_t packets, lost, red_drops, tail_drops, released, enobufs, verdict_errors;
	uint64_t late_sum_ns, late_max_ns, read_late_max_ns, stamped;
};

/* The bottleneck: departure times of the packets still in the FIFO. */
struct link {
	uint64_t *depart; /* ring of departure times, LIMIT long */
	unsigned int head, count;
	uint64_t last_arrival_ns, last_depart_ns;
	uint64_t idle_since_ns;
	double avg; /* RED's averaged queue, packets */
	long since_drop; /* RED's count */
};

static volatile sig_atomic_t stop_flag, stats_flag;

static struct opts o;
static struct stats st;
static struct link lk;
static uint64_t rng_state;

static void on_signal(int sig)
{
	if (sig == SIGUSR1)
		stats_flag = 1;
	else
		stop_flag = 1;
}

static unsigned int held(void)
{
	unsigned int n = 0;

	for (unsigned int i = 0; i < o.nq; i++)
		n += o.q[i].count;
	return n;
}

static void print_stats(void)
{
	fprintf(stderr,
		"delayline: packets %llu released %llu held %u lost %llu red_drops %llu "
		"tail_drops %llu backlog %u enobufs %llu verdict_errors %llu stamped %llu "
		"read_late_max_us %.1f late_mean_us %.1f late_max_us %.1f\n",
		(unsigned long long)st.packets, (unsigned long long)st.released, held(),
		(unsigned long long)st.lost, (unsigned long long)st.red_drops,
		(unsigned long long)st.tail_drops, lk.count, (unsigned long long)st.enobufs,
		(unsigned long long)st.verdict_errors, (unsigned long long)st.stamped,
		(double)st.read_late_max_ns / 1e3,
		st.released ? (double)st.late_sum_ns / (double)st.released / 1e3 : 0.0,
		(double)st.late_max_ns / 1e3);
}

static uint64_t clock_ns(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
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

static struct queue *queue_by_num(unsigned int num)
{
	for (unsigned int i = 0; i < o.nq; i++)
		if (o.q[i].num == num)
			return &o.q[i];
	return NULL;
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

static int setup_queue(struct mnl_socket *nl, unsigned int num)
{
	char buf[MNL_SOCKET_BUFFER_SIZE];
	struct nlmsghdr *nlh;
	int need_len = o.rate_bps > 0;

	nlh = nfq_nlmsg_put(buf, NFQNL_MSG_CONFIG, num);
	nfq_nlmsg_cfg_put_cmd(nlh, AF_INET, NFQNL_CFG_CMD_BIND);
	if (send_cfg(nl, nlh) < 0) {
		fprintf(stderr, "delayline: cannot bind queue %u: %s (another listener on it?)\n",
			num, strerror(errno));
		return -1;
	}
	nlh = nfq_nlmsg_put(buf, NFQNL_MSG_CONFIG, num);
	/* Metadata only unless the link needs the packet length from the IP header. */
	nfq_nlmsg_cfg_put_params(nlh, need_len ? NFQNL_COPY_PACKET : NFQNL_COPY_META,
				 need_len ? COPY_BYTES : 0);
	nfq_nlmsg_cfg_put_qmaxlen(nlh, o.maxlen);
	if (send_cfg(nl, nlh) < 0) {
		fprintf(stderr, "delayline: cannot configure queue %u: %s\n", num,
			strerror(errno));
		return -1;
	}
	return 0;
}

static int send_verdict(struct mnl_socket *nl, unsigned int num, int type, uint32_t id,
			int verdict)
{
	char buf[256];
	struct nlmsghdr *nlh = nfq_nlmsg_put(buf, type, num);

	nfq_nlmsg_verdict_put(nlh, (int)id, verdict);
	if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0) {
		fprintf(stderr, "delayline: verdict failed: %s\n", strerror(errno));
		return -1;
	}
	return 0;
}

/* Releases every packet of q whose time has come with one batch verdict. */
static int release_due(struct mnl_socket *nl, struct queue *q, uint64_t now)
{
	uint32_t last = 0;
	int any = 0;

	while (q->count) {
		struct entry *e = &q->ring[q->head];
		uint64_t late;

		if (e->release_ns > now)
			break;
		late = now - e->release_ns;
		st.late_sum_ns += late;
		if (late > st.late_max_ns)
			st.late_max_ns = late;
		last = e->id;
		any = 1;
		q->head = (q->head + 1) % RING_SIZE;
		q->count--;
		st.released++;
	}
	if (!any)
		return 0;
	return send_verdict(nl, q->num, NFQNL_MSG_VERDICT_BATCH, last, NF_ACCEPT);
}

/* Releases everything q holds, early: at exit (rather than leave it to the
 * unbind, which drops) and if the ring were ever full. Not counted as late. */
static int release_all(struct mnl_socket *nl, struct queue *q)
{
	uint32_t last;

	if (!q->count)
		return 0;
	last = q->ring[(q->head + q->count - 1) % RING_SIZE].id;
	st.released += q->count;
	q->count = 0;
	return send_verdict(nl, q->num, NFQNL_MSG_VERDICT_BATCH, last, NF_ACCEPT);
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
 * When the packet reached the router, on the monotonic clock. The kernel
 * stamps received packets (CLOCK_REALTIME, us) once any socket asked for
 * timestamps, which main() does; we convert the packet's age. Without a stamp,
 * or with a nonsense one (a clock step), the time we read it is the best we
 * have. Arrivals never go backwards: the link is one FIFO.
 */
static uint64_t arrival_ns(struct nlattr **attr, uint64_t now_mono, uint64_t now_real)
{
	uint64_t arr = now_mono;

	if (attr[NFQA_TIMESTAMP] &&
	    mnl_attr_get_payload_len(attr[NFQA_TIMESTAMP]) >= sizeof(struct nfqnl_msg_packet_timestamp)) {
		struct nfqnl_msg_packet_timestamp ts;
		uint64_t stamp, age;

		memcpy(&ts, mnl_attr_get_payload(attr[NFQA_TIMESTAMP]), sizeof(ts));
		stamp = be64toh(ts.sec) * 1000000000ull + be64toh(ts.usec) * 1000ull;
		age = now_real > stamp ? now_real - stamp : 0;
		if (age < 1000000000ull) {
			arr = now_mono - age;
			st.stamped++;
			if (age > st.read_late_max_ns)
				st.read_late_max_ns = age;
		}
	}
	if (arr < lk.last_arrival_ns)
		arr = lk.last_arrival_ns;
	lk.last_arrival_ns = arr;
	return arr;
}

/* Forgets the packets that have left the FIFO by time t. */
static void link_drain(uint64_t t)
{
	while (lk.count && lk.depart[lk.head] <= t) {
		lk.head = (lk.head + 1) % o.limit;
		lk.count--;
	}
}

/*
 * RED (Floyd & Jacobson, "gentle" variant as in ns-2) on the FIFO's length at
 * an arrival. Returns 1 to drop. q is the number of packets in the FIFO.
 */
static int red_drop(uint64_t arr, unsigned int q)
{
	double pb, pa;

	if (q == 0 && lk.idle_since_ns && arr > lk.idle_since_ns) {
		/* Decay the average over the idle time, counted in typical packets. */
		double m = (double)(arr - lk.idle_since_ns) / (1514.0 * 8e9 / o.rate_bps);

		lk.avg *= pow_uint(1.0 - o.red_wq, (uint64_t)m);
	} else {
		lk.avg = (1.0 - o.red_wq) * lk.avg + o.red_wq * q;
	}
	lk.idle_since_ns = 0; /* set again by the next enqueue */
	if (lk.avg < o.red_min) {
		lk.since_drop = -1;
		return 0;
	}
	if (lk.avg < o.red_max)
		pb = o.red_maxp * (lk.avg - o.red_min) / (o.red_max - o.red_min);
	else if (lk.avg < 2 * o.red_max)
		pb = o.red_maxp + (1 - o.red_maxp) * (lk.avg - o.red_max) / o.red_max;
	else
		pb = 1.0;
	lk.since_drop++;
	pa = lk.since_drop * pb >= 1.0 ? 1.0 : pb / (1.0 - lk.since_drop * pb);
	if (rng_uniform() < pa) {
		lk.since_drop = 0;
		return 1;
	}
	return 0;
}

/*
 * A packet of `bytes` arrives at the bottleneck at `arr`. Returns 0 and its
 * departure time, or 1 if it is dropped (RED, or the FIFO is full: a packet
 * joins when fewer than LIMIT packets wait, counting the one being sent, as
 * a pfifo under a shaper counts them).
 */
static int link_enqueue(uint64_t arr, unsigned int bytes, uint64_t *depart)
{
	uint64_t start, dep;
	unsigned int q;

	link_drain(arr);
	q = lk.count;
	if (o.red && red_drop(arr, q)) {
		st.red_drops++;
		return 1;
	}
	if (q >= o.limit) {
		st.tail_drops++;
		return 1;
	}
	start = lk.last_depart_ns > arr ? lk.last_depart_ns : arr;
	dep = start + (uint64_t)((double)bytes * 8e9 / o.rate_bps);
	lk.depart[(lk.head + lk.count) % o.limit] = dep;
	lk.count++;
	lk.last_depart_ns = dep;
	lk.idle_since_ns = dep; /* empty from then on, unless refilled */
	*depart = dep;
	return 0;
}

struct cb_ctx {
	struct mnl_socket *nl;
	uint64_t now, now_real;
};

static int drop(struct cb_ctx *ctx, unsigned int num, uint32_t id)
{
	return send_verdict(ctx->nl, num, NFQNL_MSG_VERDICT, id, NF_DROP) < 0 ? MNL_CB_ERROR
										: MNL_CB_OK;
}

static int on_packet(const struct nlmsghdr *nlh, void *data)
{
	struct cb_ctx *ctx = data;
	struct nlattr *attr[NFQA_MAX + 1] = { 0 };
	struct nfgenmsg *nfg = mnl_nlmsg_get_payload(nlh);
	unsigned int num = ntohs(nfg->res_id);
	struct queue *q = queue_by_num(num);
	struct nfqnl_msg_packet_hdr *ph;
	uint64_t leave = ctx->now;
	uint32_t id;

	if (!q || nfq_nlmsg_parse(nlh, attr) < 0 || !attr[NFQA_PACKET_HDR])
		return MNL_CB_OK;
	ph = mnl_attr_get_payload(attr[NFQA_PACKET_HDR]);
	id = ntohl(ph->packet_id);
	st.packets++;

	if (o.loss > 0 && rng_uniform() < o.loss) {
		st.lost++;
		return drop(ctx, num, id);
	}
	if (o.rate_bps > 0) {
		uint64_t arr = arrival_ns(attr, ctx->now, ctx->now_real);
		unsigned int bytes = l2_len(attr);

		if (!bytes) /* not IP: cannot happen behind our rules; count it as a frame */
			bytes = 1514;
		if (link_enqueue(arr, bytes, &leave))
			return drop(ctx, num, id);
	}
	if (q->count == RING_SIZE) /* cannot happen with maxlen < RING_SIZE */
		release_all(ctx->nl, q);
	q->ring[(q->head + q->count) % RING_SIZE] =
		(struct entry){ .id = id, .release_ns = leave + q->delay_ns };
	q->count++;
	return MNL_CB_OK;
}

/* Reads the queued notifications, at most READ_ROUNDS batches so that a
 * flood of arrivals cannot hold back the releases; -1 on a fatal error. */
static int read_packets(struct mnl_socket *nl)
{
	static char bufs[RECV_BATCH][4096];
	struct mmsghdr msgs[RECV_BATCH];
	struct iovec iov[RECV_BATCH];
	int fd = mnl_socket_get_fd(nl);
	unsigned int portid = mnl_socket_get_portid(nl);

	for (int round = 0; round < READ_ROUNDS; round++) {
		struct cb_ctx ctx = { .nl = nl };
		int n;

		memset(msgs, 0, sizeof(msgs));
		for (int i = 0; i < RECV_BATCH; i++) {
			iov[i] = (struct iovec){ .iov_base = bufs[i], .iov_len = sizeof(bufs[i]) };
			msgs[i].msg_hdr.msg_iov = &iov[i];
			msgs[i].msg_hdr.msg_iovlen = 1;
		}
		n = recvmmsg(fd, msgs, RECV_BATCH, MSG_DONTWAIT, NULL);
		if (n < 0) {
			if (errno == ENOBUFS) {
				/* Lost notifications: those packets are released by the
				 * next batch verdict of their queue. Count them. */
				st.enobufs++;
				continue;
			}
			if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
				return 0;
			perror("delayline: recv");
			return -1;
		}
		ctx.now = clock_ns(CLOCK_MONOTONIC);
		ctx.now_real = clock_ns(CLOCK_REALTIME);
		for (int i = 0; i < n; i++) {
			if (mnl_cb_run(bufs[i], msgs[i].msg_len, 0, portid, on_packet, &ctx) < 0) {
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
		if (n < RECV_BATCH)
			return 0;
	}
	return 0;
}

static int run(struct mnl_socket *nl)
{
	struct pollfd pfd = { .fd = mnl_socket_get_fd(nl), .events = POLLIN };
	sigset_t unblocked;

	sigemptyset(&unblocked);
	while (!stop_flag) {
		struct timespec ts, *tsp = NULL;
		uint64_t now = clock_ns(CLOCK_MONOTONIC), due = UINT64_MAX;
		int r;

		for (unsigned int i = 0; i < o.nq; i++)
			if (o.q[i].count && o.q[i].ring[o.q[i].head].release_ns < due)
				due = o.q[i].ring[o.q[i].head].release_ns;
		if (due != UINT64_MAX) {
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
		if (r > 0 && read_packets(nl) < 0)
			return -1;
		now = clock_ns(CLOCK_MONOTONIC);
		for (unsigned int i = 0; i < o.nq; i++)
			if (release_due(nl, &o.q[i], now) < 0)
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
		"usage: tamebpf-delayline --queue N[:DELAY_US] [--queue N[:DELAY_US] ...]\n"
		"         [--rate-bps R --limit PKTS [--red MIN,MAX,MAXP,WQ]]\n"
		"         [--loss PCT] [--seed S] [--fifo-prio P] [--slack-ns NS] [--maxlen PKTS]\n"
		"The packets iptables NFQUEUE rules send to the queues share one bottleneck\n"
		"(rate R bit/s, a FIFO of PKTS packets, optionally RED) and then wait their\n"
		"queue's one-way delay. Without --rate-bps only the delays apply.\n"
		"Prints \"ready\" when bound; statistics on stderr at exit and on SIGUSR1.\n");
}

static int parse_queue(const char *arg)
{
	struct queue *q = &o.q[o.nq];
	char *end;

	if (o.nq == MAX_QUEUES) {
		fprintf(stderr, "delayline: at most %d queues\n", MAX_QUEUES);
		return -1;
	}
	q->num = (unsigned int)strtoul(arg, &end, 10);
	if (end == arg || (*end && *end != ':')) {
		fprintf(stderr, "delayline: bad --queue %s: want N or N:DELAY_US\n", arg);
		return -1;
	}
	if (*end == ':')
		q->delay_ns = strtoull(end + 1, NULL, 10) * 1000ull;
	if (queue_by_num(q->num)) {
		fprintf(stderr, "delayline: queue %u given twice\n", q->num);
		return -1;
	}
	o.nq++;
	return 0;
}

static int parse(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "queue", required_argument, 0, 'q' },    { "loss", required_argument, 0, 'l' },
		{ "seed", required_argument, 0, 's' },     { "red", required_argument, 0, 'r' },
		{ "rate-bps", required_argument, 0, 'R' }, { "limit", required_argument, 0, 'L' },
		{ "fifo-prio", required_argument, 0, 'f' }, { "slack-ns", required_argument, 0, 'S' },
		{ "maxlen", required_argument, 0, 'm' },   { "help", no_argument, 0, 'h' },
		{ 0, 0, 0, 0 },
	};
	int c;

	o.slack_ns = 50000;
	o.maxlen = 65536;
	o.seed = 1;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 'q':
			if (parse_queue(optarg) < 0)
				return -1;
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
	if (!o.nq || o.loss < 0 || o.loss > 1 || o.maxlen == 0 || o.maxlen >= RING_SIZE ||
	    o.rate_bps < 0) {
		usage(stderr);
		return -1;
	}
	if ((o.rate_bps > 0) != (o.limit > 0)) {
		fprintf(stderr, "delayline: --rate-bps and --limit go together (the bottleneck)\n");
		return -1;
	}
	if (o.red && o.rate_bps <= 0) {
		fprintf(stderr, "delayline: --red needs the bottleneck's --rate-bps and --limit\n");
		return -1;
	}
	return 0;
}

/*
 * Asks the kernel to stamp received packets (a socket that wants timestamps
 * turns stamping on for the whole machine while it is open): the link then
 * knows when a packet arrived, not when we got round to reading it.
 */
static int want_rx_timestamps(void)
{
	int fd = socket(AF_INET, SOCK_DGRAM, 0), on = 1;

	if (fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof(on)) < 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

int main(int argc, char **argv)
{
	struct mnl_socket *nl = NULL;
	struct sigaction sa = { .sa_handler = on_signal };
	sigset_t block;
	int rcvbuf = 8 << 20, err = 1, stamp_fd = -1;

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

	/* Late releases are delay error: small timer slack, and real-time
	 * priority when asked (cuts the worst case from ms to sub-ms on a busy VM). */
	prctl(PR_SET_TIMERSLACK, o.slack_ns ? o.slack_ns : 1, 0, 0, 0);
	if (o.fifo_prio > 0) {
		struct sched_param sp = { .sched_priority = o.fifo_prio };

		if (sched_setscheduler(0, SCHED_FIFO, &sp) < 0)
			fprintf(stderr, "delayline: SCHED_FIFO not available (%s), running without\n",
				strerror(errno));
	}

	for (unsigned int i = 0; i < o.nq; i++) {
		o.q[i].ring = calloc(RING_SIZE, sizeof(*o.q[i].ring));
		if (!o.q[i].ring)
			goto oom;
	}
	if (o.limit) {
		lk.depart = calloc(o.limit, sizeof(*lk.depart));
		if (!lk.depart)
			goto oom;
		stamp_fd = want_rx_timestamps();
		if (stamp_fd < 0)
			fprintf(stderr, "delayline: no receive timestamps (%s): arrivals are read times\n",
				strerror(errno));
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
	for (unsigned int i = 0; i < o.nq; i++)
		if (setup_queue(nl, o.q[i].num) < 0)
			goto cleanup;

	printf("ready\n");
	fflush(stdout);
	/* Nothing more goes to stdout: the caller may have closed its end. */
	if (!freopen("/dev/null", "w", stdout))
		fclose(stdout);

	err = run(nl) < 0;
	for (unsigned int i = 0; i < o.nq; i++)
		release_all(nl, &o.q[i]);
	print_stats();
	goto cleanup;
oom:
	fprintf(stderr, "delayline: out of memory\n");
cleanup:
	if (nl)
		mnl_socket_close(nl);
	if (stamp_fd >= 0)
		close(stamp_fd);
	for (unsigned int i = 0; i < o.nq; i++)
		free(o.q[i].ring);
	free(lk.depart);
	return err;
}
