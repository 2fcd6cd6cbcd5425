/*
 * Private to the reverse proxy (revproxy.c, revproxy_relay.c): the client object and one
 * exchange. revproxy.c is the upstream side (connect, send, parse the answer); revproxy_relay.c the
 * downstream side (the evhttp request being answered: watching it, relaying to it, splicing it).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/time.h>

#include <event2/event.h>
#include <event2/event_struct.h>
#include <event2/http.h>

#include "shared/http_parse.h"
#include "shared/revproxy.h"
#include "shared/revproxy_pool.h"

#define ONE_SHOT_MAX (256 * 1024) /* complete bodies up to this size are sent in one reply */
#define SPLICE_BUFFER_MAX (1024 * 1024)

struct exchange;

struct revproxy {
	struct event_base *base;
	struct revproxy_options opts;
	struct rp_pool pool;
	struct exchange *free_exchanges; /* a small cache: an exchange is two evbuffers and ~1 KiB */
	unsigned n_free_exchanges;
	unsigned n_live; /* exchanges running */
	bool freed;      /* revproxy_free was called: go when n_live drops to 0 */
};

static inline struct timeval ms_tv(int ms)
{
	return (struct timeval){ .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
}

struct exchange {
	struct revproxy *rp;
	struct rp_conn *conn;
	struct revproxy_target target; /* strings point into addr */
	char addr[RP_KEY_MAX];
	char key[RP_KEY_MAX];
	uint32_t hash;

	/* proxy */
	struct evhttp_request *req;
	struct evhttp_connection *evcon;
	revproxy_fail_cb fail_cb;
	void *fail_arg;

	/* probe */
	void (*probe_cb)(int result, void *arg);
	void *probe_arg;
	struct event deadline;
	bool deadline_armed;
	uint64_t probe_body;
	int deferred_err;

	struct evbuffer *head;  /* the request head, kept for a retry */
	struct evbuffer *chunk; /* payload being relayed */
	struct http_resp resp;
	/* resp.reason points into the input buffer, which is drained after the head: keep a copy */
	char reason[64];
	bool head_request;
	bool reused;      /* the connection came from the pool */
	bool retry_ok;    /* idempotent, bodiless: may be resent on a fresh connection once */
	bool got_bytes;   /* any response byte arrived */
	bool started;     /* evhttp_send_reply_start was called */
	bool paused;      /* not reading upstream until the client drains */
	bool upgrade;     /* the client asked for Connection: Upgrade */
	bool timeouts_changed;
	struct timeval client_read_tv, client_write_tv; /* the client's timeouts, to restore */
	bool watching; /* watching the client socket for a hang-up before the reply starts */
	unsigned interim;
	int connect_tries;
	struct timeval connect_deadline;
	struct event timer; /* connect retry backoff */
	bool timer_armed;

	/* splice (after a 101) */
	struct bufferevent *client_bev;
	bool closing_up, closing_client;

	struct exchange *next_free;
};

/* revproxy.c */
void exchange_free(struct exchange *ex);
/* The connection is no longer needed by ex: back to the pool when it can carry another request. */
void exchange_release_conn(struct exchange *ex);
/*
 * Consume what upstream sent so far. Returns true while the exchange lives on (waiting for more),
 * false once it finished or failed (ex is freed then).
 */
bool exchange_process(struct exchange *ex);

/* revproxy_relay.c */
/* Watch the client for a hang-up until the reply starts (evhttp does not read it meanwhile). */
void relay_watch(struct exchange *ex);
void relay_unwatch(struct exchange *ex);
/* Detach from the client connection: its closecb and our timeout changes. */
void relay_detach(struct exchange *ex);
/* Drop a client connection mid-reply once what it was sent is flushed (the truncation shows). */
void relay_abort(struct evhttp_connection *evcon);
/* The close callback on the client's connection while an exchange runs. */
void relay_client_closed(struct evhttp_connection *evcon, void *arg);
/* The response head into the client's output headers (minus hop-by-hop fields). */
void relay_copy_headers(struct exchange *ex);
/* evhttp_send_reply_start with upstream's status and reason. */
void relay_start(struct exchange *ex);
/* Hand ex->chunk to the client; pause reading upstream when the client falls behind. */
void relay_chunk(struct exchange *ex);
/* The whole answer arrived before the reply started: one reply, and ex is freed. */
void relay_whole(struct exchange *ex);
/* After upstream's 101 (head_len bytes): answer 101 and splice both sockets. Returns true. */
bool relay_splice(struct exchange *ex, size_t head_len);
