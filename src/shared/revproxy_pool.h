/*
 * The connection side of the reverse proxy (revproxy.h): naming a target, opening a connection to
 * it, and the keep-alive pool. Knows nothing of HTTP.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include <event2/bufferevent.h>

#include "shared/revproxy.h"

#define RP_KEY_MAX 600 /* "unix <pid> <path of at most 511 bytes>" */

struct rp_conn {
	struct bufferevent *bev;
	struct rp_pool *pool; /* while idle in it */
	uint32_t hash;
	bool connecting; /* TCP: connect() in progress, BEV_EVENT_CONNECTED not seen yet */
	TAILQ_ENTRY(rp_conn) link;
	char key[];
};

TAILQ_HEAD(rp_conn_list, rp_conn);

struct rp_pool {
	struct event_base *base;
	struct rp_conn_list idle; /* most recently used first */
	unsigned n_idle;
	unsigned max_per_key, max_total;
	int idle_timeout_ms;
};

/*
 * The pool key of t ("unix <pid> <path>", "tcp <addr> <port>"): connections are shared only by
 * requests to the same listener with the same peer check. -ENAMETOOLONG, -EINVAL (no target).
 */
int rp_target_key(const struct revproxy_target *t, char *buf, size_t len);

/*
 * A new connection to t: 0, -EAGAIN (a unix listener's backlog is full: retry later), -EPERM
 * (SO_PEERCRED: not t->peer_pid's socket) or a negative errno. A TCP connection may still be
 * connecting (ret->connecting); its failure arrives as BEV_EVENT_ERROR. fd close-on-exec.
 */
int rp_conn_open(struct event_base *base, const struct revproxy_target *t, const char *key,
		 uint32_t hash, struct rp_conn **ret);
void rp_conn_free(struct rp_conn *c);

void rp_pool_init(struct rp_pool *p, struct event_base *base, unsigned max_per_key,
		  unsigned max_total, int idle_timeout_ms);
void rp_pool_clear(struct rp_pool *p);
/* Keep c for reuse (or close it when the pool is full for its key). */
void rp_pool_put(struct rp_pool *p, struct rp_conn *c);
/* The most recently pooled connection to key that still looks alive, or NULL. */
struct rp_conn *rp_pool_take(struct rp_pool *p, const char *key, uint32_t hash);
