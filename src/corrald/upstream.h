/*
 * corrald's client side towards each sandbox's corral-execd, over the unix socket
 * <state>/sandboxes/<id>/run/execd.sock: readiness pings and the streaming reverse proxy behind
 * /sandboxes/{id}/proxy/{port}/...
 */
#pragma once

#include <event2/event.h>
#include <event2/http.h>
#include <sys/types.h>

/* How an upstream exchange failed before any response byte was relayed to the client. */
enum upstream_failure {
	UPSTREAM_OK = 0,
	UPSTREAM_CONNECT_FAILED, /* socket missing, refused, or connect timed out */
	UPSTREAM_PROTOCOL_ERROR, /* execd answered with something that is not HTTP/1.1 */
	UPSTREAM_TIMEOUT,
	UPSTREAM_NO_FDS,         /* corrald itself is out of file descriptors (EMFILE/ENFILE) */
};

/*
 * Called when the proxy could not relay a response, before anything was sent to the client, so the
 * caller can choose the reply (410 SANDBOX::ENDED for a dead sandbox, 502 otherwise). When it is
 * NULL the proxy itself replies 502 {"code":"SANDBOX::BACKEND_UNREACHABLE", ...}.
 */
typedef void (*upstream_fail_cb)(struct evhttp_request *req, enum upstream_failure why,
				 const char *detail, void *arg);

/*
 * Called when a proxied exchange fails after the reply started (status and part of the body are
 * out). It may add a last chunk and end the reply (true); false: the client connection is dropped,
 * so a truncated body cannot pass for a complete one.
 */
typedef bool (*upstream_broken_cb)(struct evhttp_request *req, const char *detail, void *arg);
void upstream_set_broken_cb(upstream_broken_cb cb, void *arg);

/*
 * Forward req to the execd at sock_path. When peer_pid > 0, a new connection whose listener is not
 * that process (SO_PEERCRED) is refused (-EPERM, reported as a connect failure). target is the path and query to send upstream
 * (e.g. "/command?x=1"). Method, headers (minus hop-by-hop and credential headers, plus
 * X-Forwarded-*), and body are forwarded; the response status, headers and body are streamed back
 * chunk by chunk as they arrive, so a long-running command's events reach the client live.
 * If the client goes away mid-response the upstream connection is closed (the command keeps
 * running inside the sandbox). Connection: Upgrade requests (WebSocket) are spliced both ways.
 *
 * Details (upstream.c):
 *  - fail_cb may run before upstream_proxy returns (socket missing: -ENOENT at connect time).
 *  - Answers execd framed with Content-Length go out in one reply when already complete; chunked
 *    or close-delimited answers are streamed (chunked to HTTP/1.1 clients, connection-delimited to
 *    HTTP/1.0 ones). execd's trailers are dropped (evhttp cannot send them).
 *  - After the reply started, a failure drops the client connection once what was already relayed
 *    is flushed: the body visibly ends short (no final chunk / fewer bytes than Content-Length).
 *  - A client hanging up before the reply starts (a long-poll given up) is noticed too.
 *  - Connections to each socket are kept alive in a pool. A pooled connection found dead before
 *    any answer byte is retried once on a new connection, only for GET/HEAD/OPTIONS/DELETE/PUT
 *    without a body; a POST (a command) is never sent twice.
 *  - The client socket's read timeout is suspended while waiting on execd and while a response
 *    streams, and restored afterwards. corrald must ignore SIGPIPE.
 */
void upstream_proxy(struct event_base *base, const char *sock_path, pid_t peer_pid,
		    struct evhttp_request *req,
		    const char *target, upstream_fail_cb fail_cb, void *arg);

/*
 * Asynchronous GET /ping to the execd at sock_path. cb gets 0 when execd answered 200 within
 * timeout_ms, else a negative errno (-ECONNREFUSED, -ENOENT, -ETIMEDOUT, -EPROTO).
 */
int upstream_ping(struct event_base *base, const char *sock_path, pid_t peer_pid, int timeout_ms,
		  void (*cb)(int result, void *arg), void *arg);

/*
 * Additions by the upstream work (all optional; defaults apply without any call).
 *
 * Tunables. Zero fields keep their defaults.
 */
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
