/*
 * corral's DNS resolver for sandboxes: a filtering forwarder on corrald's event loop.
 *
 * It listens on one address (the bridge's gateway, port 53) over UDP and TCP. A query's source
 * address names the sandbox (the bridge admits only each port's own address, so it cannot be
 * forged from another sandbox). Its name is judged by that sandbox's egress policy:
 *  - denied: NXDOMAIN, answered at once, nothing leaves the host;
 *  - allowed: the query goes to the upstream servers (in order, each tried once on a timeout)
 *    from a fresh socket with a random ID (over UDP; again over TCP when the answer was truncated
 *    and the client asked over TCP); the answer is checked (ID, question), its A and AAAA
 *    records are handed to learn() with their TTL before the answer is relayed (so a connection
 *    to an answer never races its admission), unless an IP/CIDR deny rule covers the address.
 * Malformed, oversized or unidentifiable queries are dropped; a flood costs one bounded read per
 * datagram. Everything is asynchronous: nothing here blocks the loop.
 *
 * Names are judged label by label: a byte outside [A-Za-z0-9_-] inside a label (a '.' included)
 * is judged as '?', which no rule contains, so "x y.evil.test" is still a subdomain of evil.test
 * and "a\.evil.test" (one label "a.evil") is not one of test's "evil.test".
 *
 * The resolver does not log; it reports through its ops (corrald counts and logs).
 */
#pragma once

#include <event2/event.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "network/policy.h"
#include "shared/error.h"
#include "shared/id.h"

#define RESOLVER_UPSTREAM_MAX 8
#define RESOLVER_QUERY_MAX 4096      /* a longer query (UDP or TCP) is dropped */
#define RESOLVER_LEARN_PER_ANSWER 64 /* addresses of one answer admitted (dns+nft) */
#define RESOLVER_TCP_IDLE_S 10
/* Queries a TCP connection may send a second, and its burst: past them it is not read until
 * they refill. A pipelining client otherwise had corrald answer 400,000 a second on its loop;
 * the host's nftables admits a sandbox's new connections at 20 a second (net.c), so a sandbox's
 * TCP queries are bounded by RESOLVER_TCP_CONNS_PER_CLIENT times the rate plus 20 bursts a
 * second. */
#define RESOLVER_TCP_QUERY_RATE 125
#define RESOLVER_TCP_QUERY_BURST 32

/*
 * Fair shares (resolver.c, network/fairshare.h). Each sandbox may always have RESERVED forwarded
 * queries waiting for upstream and RESERVED TCP connections open, whatever the others hold; above
 * that it draws on a pool of SHARED common to all sandboxes, up to PER_CLIENT in all. When the
 * pool is taken, a sandbox holding fewer than the heaviest holder less one takes the heaviest's
 * oldest (a query is answered SERVFAIL, a connection closed); otherwise its query is dropped (the
 * client retries) or its connection closed. So at most SHARED + RESERVED x (sandboxes holding
 * any) at once, and PER_CLIENT of them one sandbox's.
 */
#define RESOLVER_INFLIGHT_RESERVED 8
#define RESOLVER_INFLIGHT_PER_CLIENT 64
#define RESOLVER_INFLIGHT_SHARED 1024
#define RESOLVER_TCP_CONNS_RESERVED 2
#define RESOLVER_TCP_CONNS_PER_CLIENT 16
#define RESOLVER_TCP_CONNS_SHARED 256

/* The sandbox behind a query, as ops->who() fills it. */
struct resolver_client {
	char id[UUID_STR_LEN];
	const struct egress_policy *policy; /* valid until the hook returns to the resolver's caller */
	bool learn;                         /* dns+nft: hand allowed answers to ops->learn() */
	void *cookie;                       /* the hook's own, for judged() and learn() right after */
};

struct resolver_ops {
	/* The sandbox at this source address: 0 with c filled, or -ENOENT (the query is dropped). */
	int (*who)(void *arg, int family, const void *addr, struct resolver_client *c);
	/* judged() and learn() get c as who() filled it in the same turn of the loop. */
	/* A query was judged (count it, log a denial). name is the query's name, lowercased. */
	void (*judged)(void *arg, const struct resolver_client *c, const char *name, uint16_t qtype,
		       bool allowed);
	/* Admit addr for ttl_s seconds for c (before the answer is relayed). */
	int (*learn)(void *arg, const struct resolver_client *c, int family, const void *addr,
		     uint32_t ttl_s, struct error *err);
	/* Something went wrong that only the operator can fix or should know (no upstream answered,
	 * a learn failed): one line. May be NULL. */
	void (*warn)(void *arg, const char *msg);
};

struct resolver_config {
	struct sockaddr_storage listen; /* address and port for UDP and TCP */
	struct sockaddr_storage upstream[RESOLVER_UPSTREAM_MAX];
	size_t n_upstream;
	int upstream_timeout_ms; /* per upstream try; 0 = 2000 */
	/* The fair shares' sizes; 0 = the RESOLVER_* default (the unit test makes them small). */
	unsigned inflight_reserved, inflight_per_client, inflight_shared;
	unsigned tcp_reserved, tcp_per_client, tcp_shared;
};

struct resolver;

/* Bind the UDP socket and TCP listener (SO_REUSEADDR) and start serving on base. */
int resolver_new(struct event_base *base, const struct resolver_config *cfg,
		 const struct resolver_ops *ops, void *arg, struct resolver **ret, struct error *err);
void resolver_free(struct resolver *r);

/*
 * A client's query as the resolver reads it (pure; fuzzed by tests/fuzz/fuzz_dns_query.c): a
 * standard query with one question and nothing in the answer and authority sections. name is the
 * question's name as the policy judges it (lowercased, no trailing dot, '?' for a byte no rule can
 * hold). -EINVAL for anything else (the resolver drops it).
 */
struct resolver_query {
	uint16_t id, qtype, qclass;
	bool rd;
	char name[256];
};
int resolver_parse_query(const uint8_t *msg, size_t len, struct resolver_query *ret);

/* Counters since resolver_new(), for tests and the log. */
struct resolver_stats {
	uint64_t received, dropped_malformed, dropped_unknown, dropped_busy, denied, allowed,
		answered, upstream_failed;
	uint64_t evicted_queries, evicted_conns; /* taken from the heaviest for a fairer share */
	uint64_t refused_conns;                  /* TCP connections closed at once (busy, unknown) */
	uint64_t tcp_paused;                     /* times a TCP client outran its query rate */
	size_t inflight, conns, clients;         /* now: queries, TCP connections, sandboxes holding */
};
void resolver_get_stats(const struct resolver *r, struct resolver_stats *ret);
/* What sandbox id holds now: forwarded queries and TCP connections (0 and 0 when nothing). */
void resolver_get_load(const struct resolver *r, const char *id, unsigned *ret_queries,
		       unsigned *ret_conns);

/* "ADDR[:PORT]" or "[V6]:PORT" (port default 53) into ss. */
int resolver_parse_addr(const char *s, int default_port, struct sockaddr_storage *ss,
			struct error *err);
/* The nameservers of a resolv.conf (at most max; loopback ones too: corrald forwards from the
 * host's network namespace, where a local stub resolver answers). Returns how many, or -errno. */
int resolver_upstreams_from_resolv_conf(const char *path, struct sockaddr_storage *out, size_t max,
					struct error *err);
