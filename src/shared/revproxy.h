/*
 * The reverse-proxy client of both daemons: corrald -> corral-execd over the sandbox's unix socket
 * (with the SO_PEERCRED check), and corral-execd -> a server inside the sandbox over TCP loopback.
 * A libevent HTTP/1.1 client on bufferevents (evhttp's own client cannot reach a unix socket nor
 * stream a body back chunk by chunk), a keep-alive pool per target, and the relay behind an evhttp
 * server request. One header rule set for both (revproxy_headers.h).
 *
 * Files: revproxy_pool.c (targets, connecting, the keep-alive pool), revproxy.c (an exchange's
 * upstream side: connect, send the request, parse the answer with http_parse.h), revproxy_relay.c
 * (its downstream side: watch the client, relay to it, splice after a 101), revproxy_headers.c
 * (which fields go where).
 *
 * The upstream runs in the sandbox and is untrusted: the parser bounds everything it reads, and
 * memory held per exchange is bounded by one socket read plus client_buffer_max (what the unsent
 * output costs, evbuffer chains included: counted by its bytes alone it was 2.7 times that).
 *
 * Behaviour of revproxy_forward:
 *  - Method, target, headers (revproxy_headers.h) and the body go upstream; status, reason,
 *    headers and body come back as they arrive, so a long-running command's events reach the client
 *    live. Answers framed with Content-Length go out in one reply when already complete (up to
 *    256 KiB); chunked or close-delimited ones are streamed (chunked to HTTP/1.1 clients,
 *    connection-delimited to HTTP/1.0 ones). Upstream trailers are dropped (evhttp cannot send them).
 *  - fail_cb, or a 502 by the proxy, answers when nothing was relayed yet; fail_cb may run before
 *    revproxy_forward returns (socket missing: -ENOENT at connect time).
 *  - After the reply started, a failure calls broken_cb (options); unless it ended the reply, the
 *    client connection is dropped once what was relayed is flushed: the body visibly ends short (no
 *    final chunk / fewer bytes than Content-Length), so a truncated body never passes for a whole one.
 *  - A client that goes away (also before the reply starts: a long-poll given up) closes the
 *    upstream connection; whatever runs upstream keeps running.
 *  - A pooled connection found dead before any answer byte is retried once on a new connection,
 *    only for GET/HEAD/OPTIONS/DELETE/PUT without a body: a POST is never sent twice.
 *  - The client socket's read timeout is suspended while waiting on upstream and while a response
 *    streams, and restored afterwards. The process must ignore SIGPIPE.
 *  - Connection: Upgrade requests (WebSocket) are asked upstream; after its 101 both byte streams
 *    are spliced until either side closes.
 */
#pragma once

#include <event2/event.h>
#include <event2/http.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "shared/revproxy_headers.h"

/* How an exchange failed before any response byte was relayed to the client. */
enum revproxy_failure {
	REVPROXY_OK = 0,
	REVPROXY_CONNECT_FAILED, /* socket missing, refused, wrong listener, or connect timed out */
	REVPROXY_PROTOCOL_ERROR, /* upstream answered with something that is not HTTP/1.1 */
	REVPROXY_TIMEOUT,
	REVPROXY_NO_FDS,         /* this process is out of file descriptors (EMFILE/ENFILE) */
};

/* Where a request goes: a unix socket path, or a numeric IPv4/IPv6 address and a port. */
struct revproxy_target {
	const char *unix_path; /* non-NULL: AF_UNIX (at most 511 bytes) */
	pid_t peer_pid;        /* unix: > 0, a new connection whose listener is not this process
				* (SO_PEERCRED) is refused with -EPERM, never used */
	const char *host;      /* TCP: numeric address, no name resolution */
	uint16_t port;
};

typedef void (*revproxy_fail_cb)(struct evhttp_request *req, enum revproxy_failure why,
				 const char *detail, void *arg);
/* The reply broke after it started: may add a last chunk and end it (true), else false. */
typedef bool (*revproxy_broken_cb)(struct evhttp_request *req, const char *detail, void *arg);

/* Zero fields keep their defaults. */
struct revproxy_options {
	const char *peer_name;        /* failure texts call the upstream this; default "upstream" */
	int connect_timeout_ms;       /* default 5000 */
	int io_timeout_ms;            /* upstream silent (or not reading) this long; 180000 */
	int idle_timeout_ms;          /* pooled keep-alive connections are closed after this; 3000 */
	unsigned max_idle_per_target; /* default 8 */
	unsigned max_idle_total;      /* default 1024 */
	size_t client_buffer_max;     /* stop reading upstream above this much unsent output; 4 MiB */
	/* header rules (revproxy_headers.h) */
	enum revproxy_forwarded forwarded;
	const char *host;         /* Host sent upstream; NULL: the client's */
	const char *const *drop;  /* NULL-terminated request fields never forwarded; kept by pointer */
	revproxy_broken_cb broken_cb;
	void *broken_arg;
};

struct revproxy;

/* A client with its own pool and options. -ENOMEM. */
int revproxy_new(struct event_base *base, const struct revproxy_options *opts,
		 struct revproxy **ret);
/*
 * Close every pooled connection; the client is freed once its last exchange ends (call it
 * before event_base_free). NULL is fine.
 */
void revproxy_free(struct revproxy *rp);
void revproxy_set_broken_cb(struct revproxy *rp, revproxy_broken_cb cb, void *arg);

/*
 * Forward req to t (copied; the strings need not outlive the call). target is the origin-form
 * request-target to send (e.g. "/command?x=1"); the caller checked it (no space or control
 * character, starts with '/'). See the top of this file.
 */
void revproxy_forward(struct revproxy *rp, const struct revproxy_target *t,
		      struct evhttp_request *req, const char *target, revproxy_fail_cb fail_cb,
		      void *arg);

/*
 * Asynchronous GET path to t. cb gets 0 when upstream answered 200 within timeout_ms, else a
 * negative errno (-ECONNREFUSED, -ENOENT, -EPERM, -ETIMEDOUT, -EPROTO), always from the loop,
 * never before this returns. Returns 0, or -ENAMETOOLONG / -ENOMEM (cb is not called then).
 */
int revproxy_probe(struct revproxy *rp, const struct revproxy_target *t, const char *path,
		   int timeout_ms, void (*cb)(int result, void *arg), void *arg);

/* Idle pooled connections, for tests and metrics. */
unsigned revproxy_pool_idle(const struct revproxy *rp);
