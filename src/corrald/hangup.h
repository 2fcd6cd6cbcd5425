/*
 * Notice a client that hangs up while its request waits for a reply. Once a request is complete,
 * libevent 2.1's evhttp stops reading its connection until the reply is sent, so a client that
 * gives up meanwhile goes unnoticed. hangup_watch() reads the socket with callbacks of its own
 * (evhttp sets its own again when the reply starts); bytes the client sends early (a pipelined
 * request) stay buffered for evhttp, at most HANGUP_EARLY_MAX of them. The connection's idle
 * timeouts are suspended meanwhile (waiting for the reply is not the client's idleness) and
 * restored by hangup_unwatch().
 *
 * On EOF or an error cb(arg) runs, then the connection is freed, and the request with it: cb must
 * forget the request. cb also runs if evhttp frees the connection for its own reasons. Either way
 * the watch has ended when cb runs (hangup_unwatch() is then a no-op, and h may be freed by cb).
 * Unwatch before replying.
 */
#pragma once

#include <stdbool.h>
#include <sys/time.h>

#include <event2/http.h>

#define HANGUP_EARLY_MAX (64 * 1024)

struct hangup {
	struct evhttp_connection *evcon; /* NULL: not watching */
	void (*cb)(void *arg);
	void *arg;
	struct timeval read_tv, write_tv;
};

void hangup_watch(struct hangup *h, struct evhttp_connection *evcon, void (*cb)(void *arg),
		  void *arg);
/* Stop watching, hand the connection back to evhttp as it was. Idempotent. */
void hangup_unwatch(struct hangup *h);
