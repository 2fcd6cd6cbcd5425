/*
 * corrald's HTTP front: what happens to a client connection before a route handler sees it.
 *
 *  - Every request is judged on its head, before any body byte is read: the route's judge
 *    (front_head_fn, api.c) authenticates and names the largest body the route takes. A refused
 *    request, or one whose Content-Length is over its route's cap or over what corrald may still
 *    hold in bodies (body_budget), is answered {code, message} without reading its body, and its
 *    connection closed.
 *  - Bodies held in memory are accounted across all connections (body_budget): a Content-Length
 *    is reserved at the head; a chunked body reserves room for its next chunk (16 MiB at most,
 *    larger chunks get 413) and then its chunks as they arrive. Memory freed after a burst is
 *    trimmed back to the system.
 *  - At most max_connections client connections: at the cap the listener stops accepting (the
 *    kernel's backlog holds new ones) until one closes.
 *  - A request head must be complete within header_timeout_s of its first byte, and a new
 *    connection's first head within header_timeout_s of the accept, else the connection is closed
 *    (slowloris, idle sockets). Keep-alive connections between requests keep evhttp's idle timeout.
 *  - accept() failing (EMFILE, ENFILE, ENOMEM...) pauses accepting with a backoff from 10 ms to
 *    1 s instead of spinning, and is logged at most once per 10 s with a count.
 *
 * Connections and their close callbacks: the front keeps its own close callback on every client
 * connection. Other code sets its close callback with http_conn_set_closecb() (httputil.h), which
 * the front chains, never with evhttp_connection_set_closecb().
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <event2/event.h>
#include <event2/http.h>

#define FRONT_MESSAGE_MAX 320

/* What the judge decides from a request's head. */
struct front_verdict {
	int status;       /* 0: go on; else refuse with status, code and message, then close */
	const char *code; /* static string */
	char message[FRONT_MESSAGE_MAX];
	uint64_t body_max; /* the largest body this route takes */
};

typedef void (*front_head_fn)(struct evhttp_request *req, struct front_verdict *v, void *arg);

struct front_options {
	unsigned max_connections;
	int header_timeout_s;
	uint64_t body_budget;
};

/* Check libevent's evhttp (libevent_private.h) and hook http's new connections. -EPROTO: unknown layout. */
int front_init(struct event_base *base, struct evhttp *http, const struct front_options *opts,
	       front_head_fn judge, void *arg);
/* Watch the listener of bound: pause it at the connection cap and on accept errors. */
void front_listen(struct evhttp_bound_socket *bound);
/* The listener is going away (shutdown): stop touching it. */
void front_unlisten(void);

/*
 * First thing a route handler calls: if the request was refused at its head (or its chunked body
 * outgrew the budget) this replies with the error, closes the connection and returns true.
 * Otherwise it puts back a chunked body the front accounted, and returns false.
 */
bool front_dispatch(struct evhttp_request *req);

/* Counters, for tests and logs. */
struct front_stats {
	unsigned connections;
	uint64_t body_bytes_held;
	uint64_t head_timeouts;
	uint64_t accept_errors;
};
void front_get_stats(struct front_stats *ret);
