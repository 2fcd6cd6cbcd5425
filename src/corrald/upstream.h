/*
 * corrald's client side towards each sandbox's corral-execd, over the unix socket the runtime
 * bound for it: readiness pings and the streaming reverse proxy behind
 * /sandboxes/{id}/proxy/{port}/... It is the shared reverse proxy (src/shared/revproxy.h) with
 * corrald's settings; behaviour, failures and header rules are described there.
 */
#pragma once

#include <event2/event.h>
#include <event2/http.h>
#include <sys/types.h>

#include "shared/revproxy.h"

/*
 * Called when the proxy could not relay a response, before anything was sent to the client, so the
 * caller can choose the reply (410 SANDBOX::ENDED for a dead sandbox, 502 otherwise). When it is
 * NULL the proxy itself replies 502 {"code":"SANDBOX::BACKEND_UNREACHABLE", ...}.
 */
typedef revproxy_fail_cb upstream_fail_cb;

/*
 * Called when a proxied exchange fails after the reply started (status and part of the body are
 * out). It may add a last chunk and end the reply (true); false: the client connection is dropped,
 * so a truncated body cannot pass for a complete one.
 */
typedef revproxy_broken_cb upstream_broken_cb;
void upstream_set_broken_cb(upstream_broken_cb cb, void *arg);

/*
 * Forward req to the execd at sock_path. When peer_pid > 0, a new connection whose listener is not
 * that process (SO_PEERCRED) is refused (-EPERM, reported as a connect failure). target is the
 * path and query to send upstream (e.g. "/command?x=1"): a space or control character in it, or a
 * first byte other than '/', is answered 400 SANDBOX::INVALID_PARAMETER here, a method the proxy
 * does not know 405. execd gets Host: localhost, none of corrald's credential headers
 * (Authorization, Cookie, OPEN-SANDBOX-API-KEY, OpenSandbox-Secure-Access), and X-Forwarded-For/
 * -Host/-Proto set by corrald, whatever the client sent (revproxy_headers.h).
 */
void upstream_proxy(struct event_base *base, const char *sock_path, pid_t peer_pid,
		    struct evhttp_request *req, const char *target, upstream_fail_cb fail_cb,
		    void *arg);

/*
 * Asynchronous GET /ping to the execd at sock_path. cb gets 0 when execd answered 200 within
 * timeout_ms, else a negative errno (-ECONNREFUSED, -ENOENT, -EPERM, -ETIMEDOUT, -EPROTO).
 */
int upstream_ping(struct event_base *base, const char *sock_path, pid_t peer_pid, int timeout_ms,
		  void (*cb)(int result, void *arg), void *arg);

/* Tunables. Zero fields keep their defaults. */
struct upstream_options {
	int connect_timeout_ms;       /* default 5000 */
	int io_timeout_ms;            /* execd silent (or not reading) this long mid-exchange; 180000 */
	int idle_timeout_ms;          /* pooled keep-alive connections are closed after this; 3000 */
	unsigned max_idle_per_socket; /* default 8 */
	unsigned max_idle_total;      /* default 1024 */
	size_t client_buffer_max;     /* stop reading execd above this much unsent output; 4 MiB */
};
void upstream_configure(const struct upstream_options *opts);

/* Close every pooled idle connection and free cached state; call before event_base_free(). */
void upstream_shutdown(void);

/* Pool introspection for tests and metrics. */
unsigned upstream_pool_idle(void);
