/*
 * corral's filtering DNS forwarder (resolver.h): UDP and TCP on one address, libevent for the
 * sockets, ldns for the wire format. One fresh connected UDP socket per forwarded query (a random
 * source port and ID, so an off-path answer has to guess both; only the upstream's address can
 * reach a connected socket).
 *
 * Fair shares. What a sandbox makes the host hold here is a forwarded query (a socket, its
 * message: up to 4 KiB) until upstream answers or times out, and a TCP connection (a socket, its
 * buffers) until it closes or idles out. Both are counted per sandbox (struct account, found by
 * the sandbox id in a hash, made at its first query or connection and freed when it holds
 * neither) and shared by fairshare.h's rule: a reservation every sandbox always gets, a common
 * pool above it, and, when the pool is taken, the heaviest holder gives its oldest to a sandbox
 * that holds less (its query answered SERVFAIL, its connection closed). A fixed global limit
 * with a per-sandbox cap is not enough: sandboxes whose allowed name server never answers keep
 * their cap in flight each, and enough of them hold every slot (20 x 64 > 1024), so a neighbour
 * resolves nothing. Every step is O(1) on corrald's loop (the heaviest holder is kept, each
 * account lists its queries and connections oldest first, each connection its queries).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <ldns/ldns.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <unistd.h>

#include "network/fairshare.h"
#include "network/resolver.h"
#include "shared/hash.h"
#include "shared/timeutil.h"

#define UDP_BURST 64          /* datagrams read per wakeup, so TCP and answers get their turn */
#define ANSWER_MAX 65535      /* largest DNS message */
#define NAME_TEXT_MAX 256
#define ACCOUNT_BUCKETS 1024  /* sandboxes holding something, hashed by id (random UUIDs) */

#define OR_DEFAULT(v, name) ((v) ? (v) : RESOLVER_##name)
#define container_of(ptr, type, member) ((type *)((char *)(ptr) - offsetof(type, member)))

struct tcp_conn;
struct account;

struct query {
	TAILQ_ENTRY(query) link;      /* in its account's queries, oldest first */
	LIST_ENTRY(query) conn_link;  /* TCP: in its connection's queries */
	struct resolver *r;
	struct account *acct;         /* whose share it takes */
	struct sockaddr_storage client;
	socklen_t client_len;
	bool tcp;
	struct tcp_conn *conn; /* TCP: the client's connection, NULL once it closed */
	char name[NAME_TEXT_MAX];
	uint16_t client_qid, our_qid;
	ldns_rr *question;
	bool rd;
	uint8_t *msg; /* the query as forwarded (our ID) */
	size_t len;
	size_t upstream; /* index tried now */
	int fd;
	struct event *ev;
	struct bufferevent *up_tcp; /* the upstream over TCP (a TCP client's truncated answer) */
};

struct tcp_conn {
	TAILQ_ENTRY(tcp_conn) link; /* in its account's connections, oldest first */
	struct resolver *r;
	struct account *acct;
	struct bufferevent *bev;
	struct sockaddr_storage peer;
	socklen_t peer_len;
	LIST_HEAD(, query) queries; /* its queries waiting for upstream */
	double tokens;              /* queries it may send now (RESOLVER_TCP_QUERY_RATE) */
	uint64_t refilled_ns;       /* when tokens was last brought up to date */
	struct event *resume;       /* reading again once a token is back */
};

/* One sandbox's share: what it holds now. Exists while it holds a query or a connection. */
struct account {
	LIST_ENTRY(account) link; /* in its hash bucket */
	char sandbox[UUID_STR_LEN];
	struct fair_member queries, conns;
	TAILQ_HEAD(, query) query_list;
	TAILQ_HEAD(, tcp_conn) conn_list;
};

struct resolver {
	struct event_base *base;
	struct resolver_config cfg;
	const struct resolver_ops *ops;
	void *arg;
	int udp_fd;
	struct event *udp_ev;
	struct evconnlistener *listener;
	struct fair_pool query_pool, conn_pool;
	LIST_HEAD(, account) accounts[ACCOUNT_BUCKETS];
	size_t n_accounts, n_conns, n_inflight;
	struct resolver_stats stats;
};

static socklen_t sa_len(const struct sockaddr_storage *ss)
{
	return ss->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

static const void *sa_addr(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET6)
		return &((const struct sockaddr_in6 *)ss)->sin6_addr;
	return &((const struct sockaddr_in *)ss)->sin_addr;
}

static void warn(struct resolver *r, const char *fmt, ...) _printf_(2, 3);
static void warn(struct resolver *r, const char *fmt, ...)
{
	if (!r->ops->warn)
		return;
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	r->ops->warn(r->arg, msg);
}

/*
 * The name of a wire-format dname, lowercased, labels joined by '.', without the trailing dot
 * ("" for the root). A byte that cannot be in a rule becomes '?', so the label structure is kept.
 */
static int name_text(const ldns_rdf *dname, char *out, size_t outlen)
{
	if (ldns_rdf_get_type(dname) != LDNS_RDF_TYPE_DNAME)
		return -EINVAL;
	const uint8_t *d = ldns_rdf_data(dname);
	size_t size = ldns_rdf_size(dname), i = 0, o = 0;
	while (i < size && d[i]) {
		size_t l = d[i++];
		if (l > 63 || i + l > size)
			return -EINVAL;
		if (o && o + 1 < outlen)
			out[o++] = '.';
		for (size_t k = 0; k < l; k++, i++) {
			unsigned char c = d[i];
			if (c >= 'A' && c <= 'Z')
				c = (unsigned char)(c - 'A' + 'a');
			else if (!(c >= 'a' && c <= 'z') && !(c >= '0' && c <= '9') && c != '-' &&
				 c != '_')
				c = '?';
			if (o + 1 >= outlen)
				return -ENAMETOOLONG;
			out[o++] = (char)c;
		}
	}
	out[o] = '\0';
	return 0;
}

int resolver_parse_query(const uint8_t *msg, size_t len, struct resolver_query *ret)
{
	ldns_pkt *p = NULL;
	const ldns_rr *q = NULL;
	int r = -EINVAL;
	if (len >= 12 && len <= RESOLVER_QUERY_MAX && ldns_wire2pkt(&p, msg, len) == LDNS_STATUS_OK &&
	    !ldns_pkt_qr(p) && ldns_pkt_get_opcode(p) == LDNS_PACKET_QUERY &&
	    ldns_pkt_qdcount(p) == 1 && !ldns_pkt_ancount(p) && !ldns_pkt_nscount(p) &&
	    (q = ldns_rr_list_rr(ldns_pkt_question(p), 0)) &&
	    name_text(ldns_rr_owner(q), ret->name, sizeof(ret->name)) == 0) {
		ret->id = ldns_pkt_id(p);
		ret->rd = ldns_pkt_rd(p);
		ret->qtype = (uint16_t)ldns_rr_get_type(q);
		ret->qclass = (uint16_t)ldns_rr_get_class(q);
		r = 0;
	}
	ldns_pkt_free(p);
	return r;
}

/* --- accounts ------------------------------------------------------------------------------- */

static size_t account_bucket(const char *id)
{
	return hash_fnv1a(id) % ACCOUNT_BUCKETS;
}

static struct account *account_find(const struct resolver *r, const char *id)
{
	struct account *a;
	LIST_FOREACH(a, &r->accounts[account_bucket(id)], link)
		if (strcmp(a->sandbox, id) == 0)
			return a;
	return NULL;
}

/* id's account, made when it has none; NULL when out of memory. account_put() when done. */
static struct account *account_get(struct resolver *r, const char *id)
{
	struct account *a = account_find(r, id);
	if (a)
		return a;
	a = calloc(1, sizeof(*a));
	if (!a)
		return NULL;
	snprintf(a->sandbox, sizeof(a->sandbox), "%s", id);
	TAILQ_INIT(&a->query_list);
	TAILQ_INIT(&a->conn_list);
	LIST_INSERT_HEAD(&r->accounts[account_bucket(id)], a, link);
	r->n_accounts++;
	return a;
}

/* Free a's account once it holds nothing (it holds no memory then, whatever made it). */
static void account_put(struct resolver *r, struct account *a)
{
	if (!a || a->queries.n || a->conns.n)
		return;
	LIST_REMOVE(a, link);
	r->n_accounts--;
	free(a);
}

/* --- replies -------------------------------------------------------------------------------- */

static void send_wire(struct resolver *r, bool tcp, struct tcp_conn *conn,
		      const struct sockaddr_storage *to, socklen_t to_len, const uint8_t *wire,
		      size_t len)
{
	if (tcp) {
		if (!conn || len > 65535)
			return;
		uint8_t hdr[2] = {(uint8_t)(len >> 8), (uint8_t)len};
		struct evbuffer *out = bufferevent_get_output(conn->bev);
		evbuffer_add(out, hdr, 2);
		evbuffer_add(out, wire, len);
	} else {
		/* A full socket buffer drops the answer, as the network would; the client retries. */
		(void)sendto(r->udp_fd, wire, len, MSG_DONTWAIT | MSG_NOSIGNAL,
			     (const struct sockaddr *)to, to_len);
	}
	r->stats.answered++;
}

/* An answer without records: NXDOMAIN for a denied name, SERVFAIL when no upstream answered. */
static void send_rcode(struct resolver *r, bool tcp, struct tcp_conn *conn,
		       const struct sockaddr_storage *to, socklen_t to_len, uint16_t qid,
		       const ldns_rr *question, bool rd, ldns_pkt_rcode rcode)
{
	ldns_pkt *p = ldns_pkt_new();
	ldns_rr *q = p ? ldns_rr_clone(question) : NULL;
	if (!q) {
		ldns_pkt_free(p);
		return;
	}
	ldns_pkt_set_id(p, qid);
	ldns_pkt_set_qr(p, true);
	ldns_pkt_set_opcode(p, LDNS_PACKET_QUERY);
	ldns_pkt_set_rd(p, rd);
	ldns_pkt_set_ra(p, true);
	ldns_pkt_set_rcode(p, rcode);
	ldns_pkt_push_rr(p, LDNS_SECTION_QUESTION, q);
	uint8_t *wire = NULL;
	size_t len = 0;
	if (ldns_pkt2wire(&wire, p, &len) == LDNS_STATUS_OK)
		send_wire(r, tcp, conn, to, to_len, wire, len);
	free(wire);
	ldns_pkt_free(p);
}

/* --- forwarding ----------------------------------------------------------------------------- */

/* The socket (and its event) of q's current upstream attempt, if any. */
static void query_close_upstream(struct query *q)
{
	if (q->ev) {
		event_free(q->ev);
		q->ev = NULL;
	}
	if (q->fd >= 0) {
		close(q->fd);
		q->fd = -1;
	}
}

/* q's end, whatever it was: its share back to its account (freed when it holds nothing more). */
static void query_free(struct query *q)
{
	if (!q)
		return;
	struct resolver *r = q->r;
	struct account *a = q->acct;
	TAILQ_REMOVE(&a->query_list, q, link);
	if (q->conn)
		LIST_REMOVE(q, conn_link);
	fair_pool_give(&r->query_pool, &a->queries);
	r->n_inflight--;
	query_close_upstream(q);
	if (q->up_tcp)
		bufferevent_free(q->up_tcp);
	ldns_rr_free(q->question);
	free(q->msg);
	free(q);
	account_put(r, a);
}

static void query_fail(struct query *q)
{
	struct resolver *r = q->r;
	r->stats.upstream_failed++;
	warn(r, "no DNS upstream answered %s for sandbox %s", q->name, q->acct->sandbox);
	send_rcode(r, q->tcp, q->conn, &q->client, q->client_len, q->client_qid, q->question, q->rd,
		   LDNS_RCODE_SERVFAIL);
	query_free(q);
}

/* The oldest query of a's, given up for a sandbox that holds less: SERVFAIL, as if it timed out
 * (its client asks again, and a's other queries still wait). */
static void query_evict(struct account *a)
{
	struct query *q = TAILQ_FIRST(&a->query_list);
	struct resolver *r = q->r;
	r->stats.evicted_queries++;
	send_rcode(r, q->tcp, q->conn, &q->client, q->client_len, q->client_qid, q->question, q->rd,
		   LDNS_RCODE_SERVFAIL);
	query_free(q);
}

static void on_upstream(evutil_socket_t fd, short what, void *arg);
static bool query_send_tcp(struct query *q);
static void deliver(struct query *q, ldns_pkt *a, uint8_t *buf, size_t n);

/* Send q to upstream i or a later one; false when none is left. */
static bool query_send(struct query *q, size_t i)
{
	struct resolver *r = q->r;
	query_close_upstream(q);
	for (; i < r->cfg.n_upstream; i++) {
		const struct sockaddr_storage *up = &r->cfg.upstream[i];
		int fd = socket(up->ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0)
			continue;
		if (connect(fd, (const struct sockaddr *)up, sa_len(up)) < 0 ||
		    send(fd, q->msg, q->len, MSG_NOSIGNAL) != (ssize_t)q->len) {
			close(fd);
			continue;
		}
		struct event *ev = event_new(r->base, fd, EV_READ | EV_PERSIST, on_upstream, q);
		int ms = r->cfg.upstream_timeout_ms > 0 ? r->cfg.upstream_timeout_ms : 2000;
		struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
		if (!ev || event_add(ev, &tv) < 0) {
			if (ev)
				event_free(ev);
			close(fd);
			continue;
		}
		q->fd = fd;
		q->ev = ev;
		q->upstream = i;
		return true;
	}
	return false;
}

/* Whether answer a is the answer to q: a response with our ID and q's question. */
static bool answer_matches(const struct query *q, const ldns_pkt *a)
{
	if (!ldns_pkt_qr(a) || ldns_pkt_id(a) != q->our_qid || ldns_pkt_qdcount(a) != 1)
		return false;
	const ldns_rr *aq = ldns_rr_list_rr(ldns_pkt_question(a), 0);
	return aq && ldns_rr_get_type(aq) == ldns_rr_get_type(q->question) &&
	       ldns_rr_get_class(aq) == ldns_rr_get_class(q->question) &&
	       ldns_dname_compare(ldns_rr_owner(aq), ldns_rr_owner(q->question)) == 0;
}

/* The answer's A/AAAA addresses to ops->learn() (dns+nft), but those an IP/CIDR deny rule covers. */
static void learn_answers(struct query *q, const struct resolver_client *c, const ldns_pkt *a)
{
	struct resolver *r = q->r;
	const ldns_rr_list *an = ldns_pkt_answer(a);
	/* Bounded: an answer of thousands of addresses (an allowed domain's name server can send
	 * one) must not cost corrald's loop thousands of nftables transactions. */
	unsigned tried = 0;
	for (size_t i = 0; i < ldns_rr_list_rr_count(an) && tried < RESOLVER_LEARN_PER_ANSWER; i++) {
		const ldns_rr *rr = ldns_rr_list_rr(an, i);
		ldns_rr_type t = ldns_rr_get_type(rr);
		if ((t != LDNS_RR_TYPE_A && t != LDNS_RR_TYPE_AAAA) ||
		    ldns_rr_get_class(rr) != LDNS_RR_CLASS_IN || ldns_rr_rd_count(rr) != 1)
			continue;
		const ldns_rdf *d = ldns_rr_rdf(rr, 0);
		int family = t == LDNS_RR_TYPE_A ? AF_INET : AF_INET6;
		if (ldns_rdf_size(d) != (family == AF_INET ? 4u : 16u))
			continue;
		enum egress_action act;
		if (egress_policy_match_addr(c->policy, family, ldns_rdf_data(d), &act) >= 0 &&
		    act == EGRESS_DENY)
			continue;
		struct error e = {0};
		tried++;
		if (r->ops->learn(r->arg, c, family, ldns_rdf_data(d), ldns_rr_ttl(rr), &e) < 0) {
			/* its set is full, most likely: the rest would fail the same way */
			warn(r, "admitting an answer of %s for sandbox %s: %s", q->name, c->id, e.msg);
			break;
		}
	}
}

static void on_upstream(evutil_socket_t fd, short what, void *arg)
{
	struct query *q = arg;
	if (what & EV_TIMEOUT) {
		if (!query_send(q, q->upstream + 1))
			query_fail(q);
		return;
	}
	static uint8_t buf[ANSWER_MAX + 1];
	ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
	if (n < 0) {
		if (errno == EAGAIN || errno == EINTR)
			return;
		/* ICMP port unreachable and the like: the next upstream */
		if (!query_send(q, q->upstream + 1))
			query_fail(q);
		return;
	}
	ldns_pkt *a = NULL;
	if (n < 12 || n > ANSWER_MAX || ldns_wire2pkt(&a, buf, (size_t)n) != LDNS_STATUS_OK ||
	    !answer_matches(q, a)) {
		ldns_pkt_free(a); /* not the answer: keep waiting for it */
		return;
	}
	if (ldns_pkt_tc(a) && q->tcp) {
		/* Too large for UDP, and the client asked over TCP: ask the same upstream over TCP. */
		ldns_pkt_free(a);
		if (!query_send_tcp(q))
			query_fail(q);
		return;
	}
	deliver(q, a, buf, (size_t)n);
}

/*
 * The answer a (wire form buf, n bytes, writable) to q's client: judged again (the policy may
 * have changed while upstream worked), its addresses learned, relayed with the client's ID.
 * Frees a and q.
 */
static void deliver(struct query *q, ldns_pkt *a, uint8_t *buf, size_t n)
{
	struct resolver *r = q->r;
	/* The policy may have changed while upstream worked: judge the name again. */
	struct resolver_client c = {0};
	if (r->ops->who(r->arg, q->client.ss_family, sa_addr(&q->client), &c) < 0 ||
	    strcmp(c.id, q->acct->sandbox) != 0) {
		ldns_pkt_free(a);
		query_free(q);
		return;
	}
	enum egress_action act;
	egress_policy_match_name(c.policy, q->name, &act);
	if (act != EGRESS_ALLOW) {
		send_rcode(r, q->tcp, q->conn, &q->client, q->client_len, q->client_qid, q->question,
			   q->rd, LDNS_RCODE_NXDOMAIN);
	} else {
		if (c.learn && ldns_pkt_get_rcode(a) == LDNS_RCODE_NOERROR)
			learn_answers(q, &c, a);
		buf[0] = (uint8_t)(q->client_qid >> 8);
		buf[1] = (uint8_t)q->client_qid;
		send_wire(r, q->tcp, q->conn, &q->client, q->client_len, buf, n);
	}
	ldns_pkt_free(a);
	query_free(q);
}

static void on_upstream_tcp_read(struct bufferevent *bev, void *arg)
{
	struct query *q = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	uint8_t hdr[2];
	if (evbuffer_copyout(in, hdr, 2) < 2)
		return;
	size_t len = (size_t)hdr[0] << 8 | hdr[1];
	if (evbuffer_get_length(in) < len + 2)
		return;
	uint8_t *buf = malloc(len ? len : 1);
	ldns_pkt *a = NULL;
	if (!buf || len < 12 || evbuffer_drain(in, 2) < 0 ||
	    evbuffer_remove(in, buf, len) != (int)len ||
	    ldns_wire2pkt(&a, buf, len) != LDNS_STATUS_OK || !answer_matches(q, a)) {
		/* one message per connection: anything else is a failed try */
		ldns_pkt_free(a);
		free(buf);
		query_fail(q);
		return;
	}
	deliver(q, a, buf, len);
	free(buf);
}

static void on_upstream_tcp_event(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	if (what & BEV_EVENT_CONNECTED)
		return;
	query_fail(arg); /* EOF before the answer, an error or the timeout */
}

/* q again over TCP to the upstream that truncated its answer; false when it cannot start. */
static bool query_send_tcp(struct query *q)
{
	struct resolver *r = q->r;
	query_close_upstream(q);
	const struct sockaddr_storage *up = &r->cfg.upstream[q->upstream];
	int fd = socket(up->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	/* deferred callbacks: none runs inside bufferevent_socket_connect() (q is still ours) */
	struct bufferevent *bev = bufferevent_socket_new(r->base, fd, BEV_OPT_CLOSE_ON_FREE |
									  BEV_OPT_DEFER_CALLBACKS);
	if (!bev) {
		close(fd);
		return false;
	}
	q->up_tcp = bev;
	int ms = r->cfg.upstream_timeout_ms > 0 ? r->cfg.upstream_timeout_ms : 2000;
	struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
	bufferevent_set_timeouts(bev, &tv, &tv);
	bufferevent_setcb(bev, on_upstream_tcp_read, NULL, on_upstream_tcp_event, q);
	uint8_t hdr[2] = {(uint8_t)(q->len >> 8), (uint8_t)q->len};
	struct evbuffer *out = bufferevent_get_output(bev);
	if (evbuffer_add(out, hdr, 2) < 0 || evbuffer_add(out, q->msg, q->len) < 0 ||
	    bufferevent_enable(bev, EV_READ | EV_WRITE) < 0 ||
	    bufferevent_socket_connect(bev, (const struct sockaddr *)up, (int)sa_len(up)) < 0)
		return false; /* query_free() frees bev */
	return true;
}

/* One query from a client (a UDP datagram or a TCP message). */
static void handle_query(struct resolver *r, const uint8_t *msg, size_t len,
			 const struct sockaddr_storage *from, socklen_t from_len,
			 struct tcp_conn *conn)
{
	r->stats.received++;
	struct resolver_client c = {0};
	if (from->ss_family != AF_INET && from->ss_family != AF_INET6) {
		r->stats.dropped_unknown++;
		return;
	}
	if (r->ops->who(r->arg, from->ss_family, sa_addr(from), &c) < 0) {
		r->stats.dropped_unknown++;
		return;
	}
	struct resolver_query rq;
	ldns_pkt *p = NULL;
	const ldns_rr *question = NULL;
	if (resolver_parse_query(msg, len, &rq) < 0 ||
	    ldns_wire2pkt(&p, msg, len) != LDNS_STATUS_OK ||
	    !(question = ldns_rr_list_rr(ldns_pkt_question(p), 0))) {
		r->stats.dropped_malformed++;
		ldns_pkt_free(p);
		return;
	}
	const char *name = rq.name;
	enum egress_action act;
	egress_policy_match_name(c.policy, name, &act);
	bool allowed = act == EGRESS_ALLOW;
	r->ops->judged(r->arg, &c, name, rq.qtype, allowed);
	bool tcp = conn != NULL;
	if (!allowed) {
		r->stats.denied++;
		send_rcode(r, tcp, conn, from, from_len, ldns_pkt_id(p), question, ldns_pkt_rd(p),
			   LDNS_RCODE_NXDOMAIN);
		ldns_pkt_free(p);
		return;
	}
	r->stats.allowed++;
	struct account *a = account_get(r, c.id);
	struct fair_member *victim = NULL;
	enum fair_verdict v = a ? fair_pool_admit(&r->query_pool, &a->queries, &victim)
				: FAIR_REFUSE;
	if (v == FAIR_REFUSE) {
		/* Dropped, not refused: the client retries once answers have come back. */
		r->stats.dropped_busy++;
		account_put(r, a);
		ldns_pkt_free(p);
		return;
	}
	struct query *q = calloc(1, sizeof(*q));
	uint8_t *copy = q ? malloc(len) : NULL;
	ldns_rr *qc = copy ? ldns_rr_clone(question) : NULL;
	if (!qc) {
		free(copy);
		free(q);
		account_put(r, a);
		ldns_pkt_free(p);
		return;
	}
	if (v == FAIR_EVICT) /* another sandbox's account (it holds more than a): a stays */
		query_evict(container_of(victim, struct account, queries));
	q->r = r;
	q->acct = a;
	q->fd = -1;
	q->client = *from;
	q->client_len = from_len;
	q->tcp = tcp;
	q->conn = conn;
	snprintf(q->name, sizeof(q->name), "%s", name);
	q->client_qid = ldns_pkt_id(p);
	evutil_secure_rng_get_bytes(&q->our_qid, sizeof(q->our_qid));
	q->question = qc;
	q->rd = ldns_pkt_rd(p);
	memcpy(copy, msg, len);
	copy[0] = (uint8_t)(q->our_qid >> 8);
	copy[1] = (uint8_t)q->our_qid;
	q->msg = copy;
	q->len = len;
	TAILQ_INSERT_TAIL(&a->query_list, q, link);
	if (conn)
		LIST_INSERT_HEAD(&conn->queries, q, conn_link);
	fair_pool_take(&r->query_pool, &a->queries);
	r->n_inflight++;
	ldns_pkt_free(p);
	if (!query_send(q, 0))
		query_fail(q);
}

/* --- UDP ------------------------------------------------------------------------------------ */

static void on_udp(evutil_socket_t fd, short what, void *arg)
{
	(void)what;
	struct resolver *r = arg;
	uint8_t buf[RESOLVER_QUERY_MAX + 1];
	for (int i = 0; i < UDP_BURST; i++) {
		struct sockaddr_storage from;
		socklen_t from_len = sizeof(from);
		ssize_t n = recvfrom(fd, buf, sizeof(buf), MSG_DONTWAIT | MSG_TRUNC,
				     (struct sockaddr *)&from, &from_len);
		if (n < 0)
			return; /* EAGAIN, or an ICMP error of an earlier answer: nothing to do */
		if ((size_t)n > RESOLVER_QUERY_MAX) {
			r->stats.received++;
			r->stats.dropped_malformed++;
			continue;
		}
		handle_query(r, buf, (size_t)n, &from, from_len, NULL);
	}
}

/* --- TCP ------------------------------------------------------------------------------------ */

/* Its queries stay in flight (their share is taken until upstream answers), answered to no one. */
static void conn_free(struct tcp_conn *c)
{
	struct resolver *r = c->r;
	struct account *a = c->acct;
	struct query *q;
	while ((q = LIST_FIRST(&c->queries))) {
		LIST_REMOVE(q, conn_link);
		q->conn = NULL;
	}
	TAILQ_REMOVE(&a->conn_list, c, link);
	fair_pool_give(&r->conn_pool, &a->conns);
	r->n_conns--;
	bufferevent_free(c->bev);
	if (c->resume)
		event_free(c->resume);
	free(c);
	account_put(r, a);
}

#define TCP_OUT_MAX (64 * 1024) /* answers queued for a client that does not read them */

/* Takes a token of c's for a query, or stops reading c until one is back (false). */
static bool conn_take_token(struct tcp_conn *c)
{
	uint64_t now = time_mono_ns();
	c->tokens += (double)(now - c->refilled_ns) * RESOLVER_TCP_QUERY_RATE / 1e9;
	if (c->tokens > RESOLVER_TCP_QUERY_BURST)
		c->tokens = RESOLVER_TCP_QUERY_BURST;
	c->refilled_ns = now;
	if (c->tokens >= 1) {
		c->tokens -= 1;
		return true;
	}
	long wait_us = (long)((1 - c->tokens) * 1e6 / RESOLVER_TCP_QUERY_RATE) + 1;
	struct timeval tv = {wait_us / 1000000, wait_us % 1000000};
	bufferevent_disable(c->bev, EV_READ);
	evtimer_add(c->resume, &tv);
	c->r->stats.tcp_paused++;
	return false;
}

static void on_tcp_read(struct bufferevent *bev, void *arg);

static void on_tcp_resume(evutil_socket_t fd, short what, void *arg)
{
	struct tcp_conn *c = arg;
	(void)fd;
	(void)what;
	bufferevent_enable(c->bev, EV_READ);
	on_tcp_read(c->bev, c);
}

static void on_tcp_read(struct bufferevent *bev, void *arg)
{
	struct tcp_conn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	for (;;) {
		/* Queries wait (and, past the read watermark, so does reading) until answers drain. */
		if (evbuffer_get_length(bufferevent_get_output(bev)) > TCP_OUT_MAX)
			return;
		uint8_t hdr[2];
		if (evbuffer_copyout(in, hdr, 2) < 2)
			return;
		if (evtimer_pending(c->resume, NULL))
			return; /* waiting for a token: on_tcp_resume() goes on */
		size_t len = (size_t)hdr[0] << 8 | hdr[1];
		if (len < 12 || len > RESOLVER_QUERY_MAX) {
			c->r->stats.received++;
			c->r->stats.dropped_malformed++;
			conn_free(c);
			return;
		}
		if (evbuffer_get_length(in) < len + 2)
			return;
		if (!conn_take_token(c))
			return;
		uint8_t msg[RESOLVER_QUERY_MAX];
		evbuffer_drain(in, 2);
		evbuffer_remove(in, msg, len);
		handle_query(c->r, msg, len, &c->peer, c->peer_len, c);
	}
}

/* The output drained below the write watermark: go on with queries that waited for it. */
static void on_tcp_write(struct bufferevent *bev, void *arg)
{
	if (evbuffer_get_length(bufferevent_get_input(bev)) >= 2)
		on_tcp_read(bev, arg);
}

static void on_tcp_event(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	(void)what; /* EOF, an error or the idle timeout: all end the connection */
	conn_free(arg);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
		      void *arg)
{
	(void)l;
	struct resolver *r = arg;
	struct sockaddr_storage peer = {0};
	struct resolver_client who = {0};
	if (salen > (int)sizeof(peer) || (sa->sa_family != AF_INET && sa->sa_family != AF_INET6)) {
		r->stats.refused_conns++;
		close(fd);
		return;
	}
	memcpy(&peer, sa, (size_t)salen);
	/* A connection is held by its sandbox: no one else's can take it, and its share decides. */
	if (r->ops->who(r->arg, peer.ss_family, sa_addr(&peer), &who) < 0) {
		r->stats.refused_conns++;
		close(fd);
		return;
	}
	/* Each sandbox its share: ones that hold their connections open (a byte now and then keeps
	 * the idle timeout away) must not leave the others none. */
	struct account *a = account_get(r, who.id);
	struct fair_member *victim = NULL;
	enum fair_verdict v = a ? fair_pool_admit(&r->conn_pool, &a->conns, &victim) : FAIR_REFUSE;
	struct tcp_conn *c = v != FAIR_REFUSE ? calloc(1, sizeof(*c)) : NULL;
	struct event *resume = c ? evtimer_new(r->base, on_tcp_resume, c) : NULL;
	struct bufferevent *bev =
		resume ? bufferevent_socket_new(r->base, fd, BEV_OPT_CLOSE_ON_FREE) : NULL;
	if (!bev) {
		r->stats.refused_conns++;
		if (resume)
			event_free(resume);
		free(c);
		close(fd);
		account_put(r, a);
		return;
	}
	if (v == FAIR_EVICT) { /* the oldest of the heaviest holder's, another sandbox's */
		r->stats.evicted_conns++;
		conn_free(TAILQ_FIRST(&container_of(victim, struct account, conns)->conn_list));
	}
	c->r = r;
	c->acct = a;
	c->bev = bev;
	c->resume = resume;
	c->tokens = RESOLVER_TCP_QUERY_BURST;
	c->refilled_ns = time_mono_ns();
	c->peer = peer;
	c->peer_len = (socklen_t)salen;
	LIST_INIT(&c->queries);
	TAILQ_INSERT_TAIL(&a->conn_list, c, link);
	fair_pool_take(&r->conn_pool, &a->conns);
	r->n_conns++;
	struct timeval idle = {RESOLVER_TCP_IDLE_S, 0};
	bufferevent_set_timeouts(bev, &idle, &idle);
	/* A client that never reads its answers stops being read from: bounded memory. */
	bufferevent_setwatermark(bev, EV_READ, 0, 2 * (RESOLVER_QUERY_MAX + 2));
	bufferevent_setwatermark(bev, EV_WRITE, TCP_OUT_MAX / 2, 0);
	bufferevent_setcb(bev, on_tcp_read, on_tcp_write, on_tcp_event, c);
	bufferevent_enable(bev, EV_READ | EV_WRITE);
}

/* --- setup ---------------------------------------------------------------------------------- */

int resolver_new(struct event_base *base, const struct resolver_config *cfg,
		 const struct resolver_ops *ops, void *arg, struct resolver **ret, struct error *err)
{
	char where[INET6_ADDRSTRLEN + 8] = "?";
	const struct sockaddr_storage *ls = &cfg->listen;
	inet_ntop(ls->ss_family, sa_addr(ls), where, sizeof(where));
	int port = ntohs(ls->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)ls)->sin6_port
						   : ((const struct sockaddr_in *)ls)->sin_port);
	if (cfg->n_upstream == 0)
		return error_set(err, EINVAL, "no DNS upstream to forward to");
	struct resolver *r = calloc(1, sizeof(*r));
	if (!r)
		return error_set(err, ENOMEM, "out of memory");
	r->base = base;
	r->cfg = *cfg;
	r->ops = ops;
	r->arg = arg;
	r->udp_fd = -1;
	for (size_t i = 0; i < ACCOUNT_BUCKETS; i++)
		LIST_INIT(&r->accounts[i]);
	int e = fair_pool_init(&r->query_pool, OR_DEFAULT(cfg->inflight_reserved, INFLIGHT_RESERVED),
			       OR_DEFAULT(cfg->inflight_per_client, INFLIGHT_PER_CLIENT),
			       OR_DEFAULT(cfg->inflight_shared, INFLIGHT_SHARED));
	if (e >= 0)
		e = fair_pool_init(&r->conn_pool, OR_DEFAULT(cfg->tcp_reserved, TCP_CONNS_RESERVED),
				   OR_DEFAULT(cfg->tcp_per_client, TCP_CONNS_PER_CLIENT),
				   OR_DEFAULT(cfg->tcp_shared, TCP_CONNS_SHARED));
	if (e < 0) {
		resolver_free(r);
		return error_set(err, -e, "DNS: the fair shares' sizes (reserved above per client?)");
	}

	int one = 1;
	r->udp_fd = socket(ls->ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (r->udp_fd < 0 || setsockopt(r->udp_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(r->udp_fd, (const struct sockaddr *)ls, sa_len(ls)) < 0) {
		e = errno;
		resolver_free(r);
		return error_set_errno(err, e, "DNS: bind UDP %s port %d", where, port);
	}
	r->udp_ev = event_new(base, r->udp_fd, EV_READ | EV_PERSIST, on_udp, r);
	if (!r->udp_ev || event_add(r->udp_ev, NULL) < 0) {
		resolver_free(r);
		return error_set(err, ENOMEM, "DNS: cannot watch the UDP socket");
	}
	r->listener = evconnlistener_new_bind(base, on_accept, r,
					      LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE |
						      LEV_OPT_CLOSE_ON_EXEC,
					      64, (const struct sockaddr *)ls, (int)sa_len(ls));
	if (!r->listener) {
		e = errno;
		resolver_free(r);
		return error_set_errno(err, e ? e : EADDRINUSE, "DNS: listen on TCP %s port %d",
				       where, port);
	}
	*ret = r;
	return 0;
}

void resolver_free(struct resolver *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < ACCOUNT_BUCKETS; i++) {
		struct account *a;
		/* the last query or connection of an account frees it */
		while ((a = LIST_FIRST(&r->accounts[i]))) {
			if (!TAILQ_EMPTY(&a->conn_list))
				conn_free(TAILQ_FIRST(&a->conn_list));
			else
				query_free(TAILQ_FIRST(&a->query_list));
		}
	}
	fair_pool_clear(&r->query_pool);
	fair_pool_clear(&r->conn_pool);
	if (r->listener)
		evconnlistener_free(r->listener);
	if (r->udp_ev)
		event_free(r->udp_ev);
	if (r->udp_fd >= 0)
		close(r->udp_fd);
	free(r);
}

void resolver_get_stats(const struct resolver *r, struct resolver_stats *ret)
{
	*ret = r->stats;
	ret->inflight = r->n_inflight;
	ret->conns = r->n_conns;
	ret->clients = r->n_accounts;
}

void resolver_get_load(const struct resolver *r, const char *id, unsigned *ret_queries,
		       unsigned *ret_conns)
{
	const struct account *a = account_find(r, id);
	*ret_queries = a ? a->queries.n : 0;
	*ret_conns = a ? a->conns.n : 0;
}

int resolver_parse_addr(const char *s, int default_port, struct sockaddr_storage *ss,
			struct error *err)
{
	char host[INET6_ADDRSTRLEN + 1];
	const char *port_s = NULL;
	size_t hl;
	if (s[0] == '[') {
		const char *end = strchr(s, ']');
		if (!end || (end[1] && end[1] != ':'))
			return error_set(err, EINVAL, "'%s' is not ADDR[:PORT] or [V6ADDR]:PORT", s);
		hl = (size_t)(end - s - 1);
		s++;
		port_s = end[1] == ':' ? end + 2 : NULL;
	} else {
		const char *colon = strchr(s, ':');
		/* One colon: v4:port; more: a bare IPv6 address. */
		if (colon && !strchr(colon + 1, ':')) {
			hl = (size_t)(colon - s);
			port_s = colon + 1;
		} else {
			hl = strlen(s);
		}
	}
	if (hl == 0 || hl >= sizeof(host))
		return error_set(err, EINVAL, "'%s' is not an IP address", s);
	memcpy(host, s, hl);
	host[hl] = '\0';
	long port = default_port;
	if (port_s) {
		char *end;
		errno = 0;
		port = strtol(port_s, &end, 10);
		if (!*port_s || *end || errno || port < 1 || port > 65535)
			return error_set(err, EINVAL, "port '%s' is not a number from 1 to 65535",
					 port_s);
	}
	memset(ss, 0, sizeof(*ss));
	struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
	if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
		v4->sin_family = AF_INET;
		v4->sin_port = htons((uint16_t)port);
	} else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
		v6->sin6_family = AF_INET6;
		v6->sin6_port = htons((uint16_t)port);
	} else {
		return error_set(err, EINVAL, "'%s' is not an IP address (names are not resolved)",
				 host);
	}
	return 0;
}

int resolver_upstreams_from_resolv_conf(const char *path, struct sockaddr_storage *out, size_t max,
					struct error *err)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return error_set_errno(err, errno, "read %s", path);
	char line[512];
	size_t n = 0;
	while (n < max && fgets(line, sizeof(line), f)) {
		char addr[128];
		if (sscanf(line, " nameserver %127s", addr) != 1)
			continue;
		char *pct = strchr(addr, '%'); /* fe80::1%eth0: the scope cannot be used here */
		if (pct)
			continue;
		if (resolver_parse_addr(addr, 53, &out[n], NULL) == 0)
			n++;
	}
	fclose(f);
	return (int)n;
}
