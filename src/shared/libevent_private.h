/*
 * The one place that knows libevent's private structures: corral depends on libevent 2.1's
 * internals only through this header, and its version check (LIBEVENT_PRIVATE_KNOWN) is the only
 * one. Porting to another libevent means reading this file and libevent_private.c, nothing else.
 *
 * What libevent 2.1's evhttp does not expose but corrald's front (src/corrald/front.c) needs: an
 * incoming connection's current request (to install a header callback on it, so requests are
 * judged on their head before any body is read; libevent 2.2 has evhttp_set_newreqcb for this),
 * its parse state, and its close callback.
 *
 * This mirrors the head of struct evhttp_connection in libevent's http-internal.h, unchanged from
 * 2.1.8 to 2.1.12 (Debian 12 ships 2.1.12). evhttp_peek_check() verifies the layout against the
 * running library through its public setters at startup; corrald refuses to start if it does not
 * match, rather than guess. Only the front reads the mirror.
 *
 * The fields below the mirror come from the *_struct.h headers, which libevent installs but
 * documents as unstable; corral reads them through these accessors only, for what 2.1 has no
 * getter for. (event_struct.h, to embed a struct event for event_assign(), is libevent's own
 * documented use and stays with the code that embeds one.)
 */
#pragma once

#include <stdbool.h>

#include <event2/bufferevent.h>
#include <event2/bufferevent_struct.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <event2/http.h>
#include <event2/http_struct.h>
#include <sys/time.h>

/* The libevent versions whose private layout this file mirrors, for messages. */
#define LIBEVENT_PRIVATE_KNOWN "2.1.8 to 2.1.12"

#if !defined(LIBEVENT_VERSION_NUMBER) || LIBEVENT_VERSION_NUMBER < 0x02010800 ||                  \
	LIBEVENT_VERSION_NUMBER >= 0x02020000
#error "libevent_private.h mirrors libevent 2.1.8-2.1.12's evhttp_connection; port it (2.2: evhttp_set_newreqcb)"
#endif

enum evhttp_peek_state {
	EVHTTP_PEEK_DISCONNECTED,
	EVHTTP_PEEK_CONNECTING,
	EVHTTP_PEEK_IDLE,
	EVHTTP_PEEK_READING_FIRSTLINE,
	EVHTTP_PEEK_READING_HEADERS,
	EVHTTP_PEEK_READING_BODY,
	EVHTTP_PEEK_READING_TRAILER,
	EVHTTP_PEEK_WRITING,
};

struct evhttp_peek_conn {
	struct {
		void *tqe_next;
		void **tqe_prev;
	} next;
	evutil_socket_t fd;
	struct bufferevent *bufev;
	struct event retry_ev;
	char *bind_address;
	ev_uint16_t bind_port;
	char *address;
	ev_uint16_t port;
	size_t max_headers_size;
	ev_uint64_t max_body_size;
	int flags;
	struct timeval timeout;
	int retry_cnt;
	int retry_max;
	struct timeval initial_retry_timeout;
	enum evhttp_peek_state state;
	struct evhttp *http_server;
	struct {
		struct evhttp_request *tqh_first;
		struct evhttp_request **tqh_last;
	} requests;
	void (*cb)(struct evhttp_connection *, void *);
	void *cb_arg;
	void (*closecb)(struct evhttp_connection *, void *);
	void *closecb_arg;
};

static inline struct evhttp_peek_conn *evhttp_peek(struct evhttp_connection *evcon)
{
	return (struct evhttp_peek_conn *)evcon;
}

/*
 * Check the mirror against the library on a throwaway client connection. On success returns 0
 * and evhttp's own bufferevent read callback (how front.c recognises a connection evhttp is
 * reading) in *ret_readcb; -EPROTO when the layout does not match.
 */
int evhttp_peek_check(struct event_base *base, void (**ret_readcb)(struct bufferevent *, void *));

/* ---- fields of event2/http_struct.h and event2/bufferevent_struct.h ---- */

/* Whether the reply to req is being sent chunked (evhttp decided when the reply started). */
static inline bool evhttp_peek_chunked(const struct evhttp_request *req)
{
	return req->chunked;
}

/* Make evhttp read req as not chunked (front.c's refusal: its body is not read at all). */
static inline void evhttp_peek_clear_chunked(struct evhttp_request *req)
{
	req->chunked = 0;
}

/* The HTTP version of req's request line. */
static inline void evhttp_peek_version(const struct evhttp_request *req, int *ret_major,
				       int *ret_minor)
{
	*ret_major = req->major;
	*ret_minor = req->minor;
}

/* The read and write timeouts set on bev (zero: none); bufferevent_set_timeouts() sets them. */
static inline void bufferevent_peek_timeouts(const struct bufferevent *bev,
					     struct timeval *ret_read, struct timeval *ret_write)
{
	*ret_read = bev->timeout_read;
	*ret_write = bev->timeout_write;
}
