/*
 * corrald -> corral-execd over AF_UNIX: a small HTTP/1.1 client on bufferevents (libevent's evhttp
 * client cannot connect to unix sockets), a keep-alive pool per socket, and the streaming reverse
 * proxy behind /sandboxes/{id}/proxy/{port}/...
 *
 * One struct exchange per request. Its life:
 *   connect (or take a pooled connection) -> write head + body -> parse the response head ->
 *   relay: the whole reply at once when it is already complete, else evhttp_send_reply_start and
 *   one evhttp_send_reply_chunk per arrival -> evhttp_send_reply_end -> connection back to the pool.
 * Ownership: the exchange owns its upstream connection until it finishes or fails; evhttp owns the
 * client request, except after a client disconnect mid-reply, when evhttp hands it back to us
 * (see client_closed).
 *
 * execd runs inside the sandbox and is untrusted: the parser (http_parse.c) bounds everything it
 * reads, and memory held per exchange is bounded by one socket read plus client_buffer_max.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_struct.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <event2/http.h>
#include <event2/http_struct.h>
#include <event2/keyvalq_struct.h>

#include "shared/httputil.h"
#include "shared/macro.h"
#include "shared/unixsock.h"

#include "http_parse.h"
#include "upstream.h"

#define PATH_MAX_LEN 512
#define MAX_INTERIM 8              /* 1xx responses skipped before the final one */
#define PING_BODY_MAX (64 * 1024)
#define ONE_SHOT_MAX (256 * 1024) /* complete bodies up to this size are sent in one reply */
#define SPLICE_BUFFER_MAX (1024 * 1024)
#define EXCHANGE_CACHE_MAX 32

static struct upstream_options opts = {
	.connect_timeout_ms = 5000,
	.io_timeout_ms = 180000,
	.idle_timeout_ms = 3000,
	.max_idle_per_socket = 8,
	.max_idle_total = 1024,
	.client_buffer_max = 4u << 20,
};

void upstream_configure(const struct upstream_options *o)
{
	if (o->connect_timeout_ms > 0)
		opts.connect_timeout_ms = o->connect_timeout_ms;
	if (o->io_timeout_ms > 0)
		opts.io_timeout_ms = o->io_timeout_ms;
	if (o->idle_timeout_ms > 0)
		opts.idle_timeout_ms = o->idle_timeout_ms;
	if (o->max_idle_per_socket > 0)
		opts.max_idle_per_socket = o->max_idle_per_socket;
	if (o->max_idle_total > 0)
		opts.max_idle_total = o->max_idle_total;
	if (o->client_buffer_max > 0)
		opts.client_buffer_max = o->client_buffer_max;
}

static struct timeval ms_tv(int ms)
{
	return (struct timeval){ .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
}

/* ---- connections and the keep-alive pool ---- */

struct uconn {
	struct bufferevent *bev;
	struct event_base *base;
	uint32_t hash;
	TAILQ_ENTRY(uconn) link; /* in the idle list while pooled */
	char path[];
};

static TAILQ_HEAD(uconn_list, uconn) idle_list = TAILQ_HEAD_INITIALIZER(idle_list);
static unsigned n_idle;

static uint32_t path_hash(const char *s)
{
	uint32_t h = 2166136261u; /* FNV-1a */
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h;
}

static void uconn_free(struct uconn *c)
{
	if (!c)
		return;
	bufferevent_free(c->bev);
	free(c);
}

static void idle_remove(struct uconn *c)
{
	TAILQ_REMOVE(&idle_list, c, link);
	n_idle--;
}

/* A pooled connection said something (execd closed it, or sent bytes nobody asked for). */
static void idle_read_cb(struct bufferevent *bev, void *arg)
{
	struct uconn *c = arg;
	idle_remove(c);
	uconn_free(c);
}

static void idle_event_cb(struct bufferevent *bev, short what, void *arg)
{
	idle_read_cb(bev, arg);
}

static void pool_put(struct uconn *c)
{
	unsigned same = 0;
	struct uconn *it;
	TAILQ_FOREACH (it, &idle_list, link)
		if (it->hash == c->hash && it->base == c->base && strcmp(it->path, c->path) == 0)
			same++;
	if (same >= opts.max_idle_per_socket) {
		uconn_free(c);
		return;
	}
	if (n_idle >= opts.max_idle_total) {
		struct uconn *oldest = TAILQ_LAST(&idle_list, uconn_list);
		idle_remove(oldest);
		uconn_free(oldest);
	}
	struct timeval tv = ms_tv(opts.idle_timeout_ms);
	bufferevent_setcb(c->bev, idle_read_cb, NULL, idle_event_cb, c);
	bufferevent_set_timeouts(c->bev, &tv, NULL);
	bufferevent_enable(c->bev, EV_READ);
	TAILQ_INSERT_HEAD(&idle_list, c, link);
	n_idle++;
}

/* The most recently pooled live connection to path, or NULL. */
static struct uconn *pool_take(struct event_base *base, const char *path, uint32_t hash)
{
	struct uconn *c, *next;
	for (c = TAILQ_FIRST(&idle_list); c; c = next) {
		next = TAILQ_NEXT(c, link);
		if (c->hash != hash || c->base != base || strcmp(c->path, path) != 0)
			continue;
		idle_remove(c);
		/* execd may have closed it since the loop last looked: check before reusing. */
		char b;
		ssize_t n = recv(bufferevent_getfd(c->bev), &b, 1, MSG_PEEK | MSG_DONTWAIT);
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) &&
		    evbuffer_get_length(bufferevent_get_input(c->bev)) == 0) {
			bufferevent_disable(c->bev, EV_READ);
			return c;
		}
		uconn_free(c);
	}
	return NULL;
}

static void exchange_cache_clear(void);

void upstream_shutdown(void)
{
	struct uconn *c;
	while ((c = TAILQ_FIRST(&idle_list))) {
		idle_remove(c);
		uconn_free(c);
	}
	exchange_cache_clear();
}

unsigned upstream_pool_idle(void)
{
	return n_idle;
}

/*
 * Connect without blocking. AF_UNIX connects complete (or fail) at once on Linux; EAGAIN means the
 * listener's backlog is full and the caller retries. Paths too long for sun_path go through
 * /proc/self/fd/<dirfd>/<name>.
 */
static int unix_connect(const char *path, pid_t peer_pid)
{
	struct sockaddr_un sa;
	_cleanup_close_ int dirfd = -1;
	int r = unix_sockaddr(path, &sa, &dirfd);
	if (r < 0)
		return r;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (RETRY_EINTR(connect(fd, (struct sockaddr *)&sa, sizeof(sa))) < 0) {
		int e = errno;
		close(fd);
		return e == EINPROGRESS ? -EAGAIN : -e;
	}
	/* The listener must be the sandbox's own PID 1: the process that called listen() on the
	 * socket (a backlog-full connect is refused above, so the peer is known here). */
	struct ucred cred;
	socklen_t len = sizeof(cred);
	if (peer_pid > 0 && (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 ||
			     cred.pid != peer_pid)) {
		close(fd);
		return -EPERM;
	}
	return fd;
}

/* ---- exchanges ---- */

struct exchange {
	struct event_base *base;
	struct uconn *conn;
	char path[PATH_MAX_LEN];
	pid_t peer_pid; /* > 0: a new connection's listener must be this process (SO_PEERCRED) */
	uint32_t hash;

	/* proxy */
	struct evhttp_request *req;
	struct evhttp_connection *evcon;
	upstream_fail_cb fail_cb;
	void *fail_arg;

	/* ping */
	void (*ping_cb)(int result, void *arg);
	void *ping_arg;
	struct event deadline;
	bool deadline_armed;
	uint64_t ping_body;
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
	bool paused;      /* not reading execd until the client drains */
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

static struct exchange *free_exchanges;
static unsigned n_free_exchanges;

static struct exchange *exchange_new(struct event_base *base, const char *path, pid_t peer_pid)
{
	size_t len = strlen(path);
	if (len >= PATH_MAX_LEN)
		return NULL;
	struct exchange *ex = free_exchanges;
	struct evbuffer *head = NULL, *chunk = NULL;
	if (ex) {
		free_exchanges = ex->next_free;
		n_free_exchanges--;
		head = ex->head;
		chunk = ex->chunk;
	} else {
		ex = malloc(sizeof(*ex));
		if (!ex)
			return NULL;
		head = evbuffer_new();
		chunk = evbuffer_new();
		if (!head || !chunk) {
			if (head)
				evbuffer_free(head);
			if (chunk)
				evbuffer_free(chunk);
			free(ex);
			return NULL;
		}
	}
	memset(ex, 0, sizeof(*ex));
	ex->base = base;
	memcpy(ex->path, path, len + 1);
	ex->peer_pid = peer_pid;
	ex->hash = path_hash(path);
	ex->head = head;
	ex->chunk = chunk;
	return ex;
}

static void exchange_cache_clear(void)
{
	struct exchange *ex;
	while ((ex = free_exchanges)) {
		free_exchanges = ex->next_free;
		evbuffer_free(ex->head);
		evbuffer_free(ex->chunk);
		free(ex);
	}
	n_free_exchanges = 0;
}

static void exchange_free(struct exchange *ex)
{
	if (ex->timer_armed)
		event_del(&ex->timer);
	if (ex->deadline_armed)
		event_del(&ex->deadline);
	uconn_free(ex->conn);
	ex->conn = NULL;
	evbuffer_drain(ex->head, evbuffer_get_length(ex->head));
	evbuffer_drain(ex->chunk, evbuffer_get_length(ex->chunk));
	if (n_free_exchanges < EXCHANGE_CACHE_MAX) {
		ex->next_free = free_exchanges;
		free_exchanges = ex;
		n_free_exchanges++;
		return;
	}
	evbuffer_free(ex->head);
	evbuffer_free(ex->chunk);
	free(ex);
}

static void up_read_cb(struct bufferevent *bev, void *arg);
static void up_write_cb(struct bufferevent *bev, void *arg);
static void up_event_cb(struct bufferevent *bev, short what, void *arg);
static void client_closed(struct evhttp_connection *evcon, void *arg);
static int exchange_connect(struct exchange *ex);

/*
 * Until the reply starts evhttp does not read the client socket, so it would not notice a client
 * that gave up (on a long-poll, say). We watch it meanwhile with callbacks of our own, which
 * evhttp replaces with its own when the reply is sent. Bytes the client sends early (a pipelined
 * request) stay buffered for evhttp, at most CLIENT_EARLY_MAX of them.
 */
#define CLIENT_EARLY_MAX (64 * 1024)

static void watch_event_cb(struct bufferevent *bev, short what, void *arg);

/* Set the client socket's timeouts, remembering evhttp's (zero: none) to restore them later. */
static void client_set_timeouts(struct exchange *ex, bool read, bool write)
{
	struct bufferevent *cbev = evhttp_connection_get_bufferevent(ex->evcon);
	if (!ex->timeouts_changed) {
		ex->client_read_tv = cbev->timeout_read;
		ex->client_write_tv = cbev->timeout_write;
		ex->timeouts_changed = true;
	}
	bufferevent_set_timeouts(cbev,
				 read && timerisset(&ex->client_read_tv) ? &ex->client_read_tv : NULL,
				 write && timerisset(&ex->client_write_tv) ? &ex->client_write_tv
									   : NULL);
}

static void watch_client(struct exchange *ex)
{
	struct bufferevent *cbev = evhttp_connection_get_bufferevent(ex->evcon);
	bufferevent_setcb(cbev, NULL, NULL, watch_event_cb, ex);
	bufferevent_setwatermark(cbev, EV_READ, 0, CLIENT_EARLY_MAX);
	client_set_timeouts(ex, false, false); /* waiting on execd is not the client's idleness */
	bufferevent_enable(cbev, EV_READ);
	ex->watching = true;
}

static void unwatch_client(struct exchange *ex)
{
	if (!ex->watching)
		return;
	struct bufferevent *cbev = evhttp_connection_get_bufferevent(ex->evcon);
	bufferevent_disable(cbev, EV_READ);
	bufferevent_setwatermark(cbev, EV_READ, 0, 0);
	bufferevent_setcb(cbev, NULL, NULL, NULL, NULL);
	ex->watching = false;
}

/* Detach from the client connection: its closecb and our timeout changes. */
static void client_detach(struct exchange *ex)
{
	if (!ex->evcon)
		return;
	unwatch_client(ex);
	http_conn_set_closecb(ex->evcon, NULL, NULL);
	if (ex->timeouts_changed) {
		client_set_timeouts(ex, true, true);
		ex->timeouts_changed = false;
	}
}

static int failure_errno(enum upstream_failure why, int err)
{
	if (err)
		return err;
	return why == UPSTREAM_TIMEOUT ? -ETIMEDOUT : why == UPSTREAM_CONNECT_FAILED ? -ECONNREFUSED
										      : -EPROTO;
}

static void abort_write_cb(struct bufferevent *bev, void *arg)
{
	if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
		evhttp_connection_free(arg);
}

static void abort_event_cb(struct bufferevent *bev, short what, void *arg)
{
	evhttp_connection_free(arg);
}

/*
 * Drop a client connection mid-reply: flush what it was already sent (so it sees as much as there
 * was), then close without ending the body, so the truncation shows (no final chunk, or fewer
 * bytes than Content-Length). evhttp keeps no callback on it meanwhile; freeing evcon frees req.
 */
static void client_abort(struct evhttp_connection *evcon)
{
	struct bufferevent *bev = evhttp_connection_get_bufferevent(evcon);
	struct timeval tv = { .tv_sec = 10 };
	bufferevent_setcb(bev, NULL, abort_write_cb, abort_event_cb, evcon);
	bufferevent_setwatermark(bev, EV_WRITE, 0, 0);
	bufferevent_disable(bev, EV_READ);
	bufferevent_set_timeouts(bev, NULL, &tv);
	if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
		evhttp_connection_free(evcon);
	else
		bufferevent_enable(bev, EV_WRITE);
}

/* The client hung up before its reply started: drop the exchange and the client connection. */
static void watch_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct exchange *ex = arg;
	if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
		return;
	struct evhttp_connection *evcon = ex->evcon;
	client_detach(ex);
	exchange_free(ex); /* closes the execd connection: its answer would have nowhere to go */
	evhttp_connection_free(evcon); /* frees the request */
}

/*
 * The exchange failed. Before any byte reached the client the caller (or a 502) answers; after,
 * the client connection is dropped so a truncated body cannot pass for a complete one.
 */
static upstream_broken_cb broken_cb;
static void *broken_arg;

void upstream_set_broken_cb(upstream_broken_cb cb, void *arg)
{
	broken_cb = cb;
	broken_arg = arg;
}

static void exchange_fail(struct exchange *ex, enum upstream_failure why, int err,
			  const char *fmt, ...) _printf_(4, 5);
static void exchange_fail(struct exchange *ex, enum upstream_failure why, int err,
			  const char *fmt, ...)
{
	char detail[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);

	if (ex->ping_cb) {
		void (*cb)(int, void *) = ex->ping_cb;
		void *arg = ex->ping_arg;
		exchange_free(ex);
		cb(failure_errno(why, err), arg);
		return;
	}
	struct evhttp_request *req = ex->req;
	struct evhttp_connection *evcon = ex->evcon;
	bool started = ex->started;
	upstream_fail_cb fail_cb = ex->fail_cb;
	void *fail_arg = ex->fail_arg;
	client_detach(ex);
	exchange_free(ex);
	if (started) {
		if (!broken_cb || !broken_cb(req, detail, broken_arg))
			client_abort(evcon);
	} else if (fail_cb)
		fail_cb(req, why, detail, fail_arg);
	else
		http_send_error(req, 502, "SANDBOX::BACKEND_UNREACHABLE", "%s", detail);
}

/* The response is complete: recycle the connection, end the reply, report. */
static void exchange_finish(struct exchange *ex)
{
	struct bufferevent *bev = ex->conn->bev;
	bool reusable = ex->resp.keep_alive && !ex->upgrade &&
			evbuffer_get_length(bufferevent_get_input(bev)) == 0 &&
			evbuffer_get_length(bufferevent_get_output(bev)) == 0;
	if (reusable) {
		pool_put(ex->conn);
		ex->conn = NULL;
	}
	if (ex->ping_cb) {
		void (*cb)(int, void *) = ex->ping_cb;
		void *arg = ex->ping_arg;
		int result = ex->resp.status == 200 ? 0 : -EPROTO;
		exchange_free(ex);
		cb(result, arg);
		return;
	}
	struct evhttp_request *req = ex->req;
	client_detach(ex);
	exchange_free(ex);
	evhttp_send_reply_end(req);
}

/* ---- writing the request ---- */

static const char *method_name(enum evhttp_cmd_type cmd)
{
	switch (cmd) {
	case EVHTTP_REQ_GET: return "GET";
	case EVHTTP_REQ_POST: return "POST";
	case EVHTTP_REQ_HEAD: return "HEAD";
	case EVHTTP_REQ_PUT: return "PUT";
	case EVHTTP_REQ_DELETE: return "DELETE";
	case EVHTTP_REQ_OPTIONS: return "OPTIONS";
	case EVHTTP_REQ_TRACE: return "TRACE";
	case EVHTTP_REQ_PATCH: return "PATCH";
	default: return NULL;
	}
}

static bool is_hop_by_hop(const char *name, size_t len, const char *connection_value,
			  size_t connection_len)
{
	static const char *const hop[] = { "Connection", "Keep-Alive", "TE", "Trailer",
					   "Transfer-Encoding", "Upgrade" };
	for (size_t i = 0; i < ARRAY_SIZE(hop); i++)
		if (len == strlen(hop[i]) && strncasecmp(name, hop[i], len) == 0)
			return true;
	if (len >= 6 && strncasecmp(name, "Proxy-", 6) == 0)
		return true;
	if (connection_value) {
		char tok[128];
		if (len < sizeof(tok)) {
			memcpy(tok, name, len);
			tok[len] = 0;
			if (http_list_has_token(connection_value, connection_len, tok))
				return true;
		}
	}
	return false;
}

static bool header_ok(const char *s)
{
	for (; *s; s++)
		if (*s == '\r' || *s == '\n')
			return false;
	return true;
}

/* The request head for execd: see upstream.h for what is dropped and added. */
static int build_request_head(struct exchange *ex, const char *method, const char *target,
			      size_t body_len, bool body_method)
{
	struct evkeyvalq *in = evhttp_request_get_input_headers(ex->req);
	const char *conn_hdr = evhttp_find_header(in, "Connection");
	size_t conn_len = conn_hdr ? strlen(conn_hdr) : 0;
	const char *upgrade = evhttp_find_header(in, "Upgrade");
	bool have_xff = false, have_xfh = false, have_xfp = false;
	struct evbuffer *h = ex->head;

	ex->upgrade = conn_hdr && upgrade && http_list_has_token(conn_hdr, conn_len, "upgrade") &&
		      header_ok(upgrade);

	evbuffer_add_printf(h, "%s %s HTTP/1.1\r\nHost: localhost\r\n", method, target);
	struct evkeyval *kv;
	TAILQ_FOREACH (kv, in, next) {
		size_t nlen = strlen(kv->key);
		if (is_hop_by_hop(kv->key, nlen, conn_hdr, conn_len) ||
		    !strcasecmp(kv->key, "Host") || !strcasecmp(kv->key, "Authorization") ||
		    !strcasecmp(kv->key, "Cookie") || !strcasecmp(kv->key, "OPEN-SANDBOX-API-KEY") ||
		    !strcasecmp(kv->key, "Content-Length") || !strcasecmp(kv->key, "Expect"))
			continue;
		if (!header_ok(kv->key) || !header_ok(kv->value))
			continue;
		have_xff |= !strcasecmp(kv->key, "X-Forwarded-For");
		have_xfh |= !strcasecmp(kv->key, "X-Forwarded-Host");
		have_xfp |= !strcasecmp(kv->key, "X-Forwarded-Proto");
		evbuffer_add_printf(h, "%s: %s\r\n", kv->key, kv->value);
	}
	if (!have_xfp)
		evbuffer_add(h, "X-Forwarded-Proto: http\r\n", 25);
	if (!have_xfh) {
		const char *host = evhttp_find_header(in, "Host");
		if (host && header_ok(host))
			evbuffer_add_printf(h, "X-Forwarded-Host: %s\r\n", host);
	}
	if (!have_xff && ex->evcon) {
		char *addr = NULL;
		ev_uint16_t port = 0;
		evhttp_connection_get_peer(ex->evcon, &addr, &port);
		if (addr && header_ok(addr))
			evbuffer_add_printf(h, "X-Forwarded-For: %s\r\n", addr);
	}
	if (ex->upgrade)
		evbuffer_add_printf(h, "Connection: Upgrade\r\nUpgrade: %s\r\n", upgrade);
	if (body_len || body_method)
		evbuffer_add_printf(h, "Content-Length: %zu\r\n", body_len);
	return evbuffer_add(h, "\r\n", 2);
}

static void exchange_send(struct exchange *ex)
{
	struct bufferevent *bev = ex->conn->bev;
	struct evbuffer *out = bufferevent_get_output(bev);
	struct timeval io = ms_tv(ex->ping_cb ? opts.connect_timeout_ms : opts.io_timeout_ms);

	/* The head is copied (it is small and kept for a retry); the body is moved. */
	evbuffer_add(out, evbuffer_pullup(ex->head, -1), evbuffer_get_length(ex->head));
	if (ex->req) {
		struct evbuffer *body = evhttp_request_get_input_buffer(ex->req);
		if (evbuffer_get_length(body))
			evbuffer_add_buffer(out, body);
	}
	http_resp_init(&ex->resp, ex->head_request);
	bufferevent_setcb(bev, up_read_cb, up_write_cb, up_event_cb, ex);
	bufferevent_set_timeouts(bev, &io, &io);
	bufferevent_enable(bev, EV_READ | EV_WRITE);
}

/* A new connection to ex->path into ex->conn: 0, -EAGAIN (backlog full) or a negative errno. */
static int new_connection(struct exchange *ex)
{
	int fd = unix_connect(ex->path, ex->peer_pid);
	if (fd < 0)
		return fd;
	struct uconn *c = malloc(sizeof(*c) + strlen(ex->path) + 1);
	struct bufferevent *bev = c ? bufferevent_socket_new(ex->base, fd, BEV_OPT_CLOSE_ON_FREE)
				    : NULL;
	if (!bev) {
		close(fd);
		free(c);
		return -ENOMEM;
	}
	c->bev = bev;
	c->base = ex->base;
	c->hash = ex->hash;
	strcpy(c->path, ex->path);
	ex->conn = c;
	return 0;
}

static void connect_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	struct exchange *ex = arg;
	ex->timer_armed = false;
	exchange_connect(ex);
}

/* Get a connection (pooled or new) and send; on failure the exchange is failed and freed. */
static int exchange_connect(struct exchange *ex)
{
	if (ex->connect_tries == 0) {
		ex->conn = pool_take(ex->base, ex->path, ex->hash);
		ex->reused = ex->conn != NULL;
	}
	if (!ex->conn) {
		int r = new_connection(ex);
		if (r == -EAGAIN) {
			/* Backlog full: back off 1, 2, 4 ... 32 ms until the connect deadline. */
			struct timeval now, delay;
			event_base_gettimeofday_cached(ex->base, &now);
			if (ex->connect_tries == 0) {
				struct timeval limit = ms_tv(opts.connect_timeout_ms);
				timeradd(&now, &limit, &ex->connect_deadline);
			}
			if (timercmp(&now, &ex->connect_deadline, >)) {
				exchange_fail(ex, UPSTREAM_TIMEOUT, -ETIMEDOUT,
					      "connect to execd: timed out, listen backlog full");
				return -ETIMEDOUT;
			}
			delay = ms_tv(1 << MIN(ex->connect_tries, 5));
			ex->connect_tries++;
			evtimer_assign(&ex->timer, ex->base, connect_retry_cb, ex);
			evtimer_add(&ex->timer, &delay);
			ex->timer_armed = true;
			return 0;
		}
		if (r < 0) {
			exchange_fail(ex,
				      r == -EMFILE || r == -ENFILE ? UPSTREAM_NO_FDS
								   : UPSTREAM_CONNECT_FAILED,
				      r, "connect to execd: %s",
				      r == -EPERM ? "the socket is not served by the sandbox's PID 1"
						  : strerror(-r));
			return r;
		}
	}
	exchange_send(ex);
	return 0;
}

/* ---- relaying the response ---- */

static bool start_splice(struct exchange *ex, size_t head_len);

/* Copy the response head into the client's output headers (minus hop-by-hop ones). */
static void copy_response_headers(struct exchange *ex)
{
	static char name[HTTP_RESP_MAX_HEAD + 1], value[HTTP_RESP_MAX_HEAD + 1];
	struct evkeyvalq *out = evhttp_request_get_output_headers(ex->req);
	const struct http_header *conn = http_resp_header(&ex->resp, "Connection");
	bool keep_cl = ex->resp.body == HTTP_BODY_LENGTH || ex->head_request;

	for (unsigned i = 0; i < ex->resp.n_headers; i++) {
		const struct http_header *h = &ex->resp.headers[i];
		if (is_hop_by_hop(h->name, h->name_len, conn ? conn->value : NULL,
				  conn ? conn->value_len : 0))
			continue;
		if (!keep_cl && h->name_len == 14 && !strncasecmp(h->name, "Content-Length", 14))
			continue;
		/* corrald already answers with the client's request id; never send two. */
		if (h->name_len == 12 && !strncasecmp(h->name, "X-Request-ID", 12) &&
		    evhttp_find_header(out, "X-Request-ID"))
			continue;
		memcpy(name, h->name, h->name_len);
		name[h->name_len] = 0;
		memcpy(value, h->value, h->value_len);
		value[h->value_len] = 0;
		evhttp_add_header(out, name, value);
	}
}

static void client_drained(struct evhttp_connection *evcon, void *arg)
{
	struct exchange *ex = arg;
	if (!ex->paused)
		return;
	ex->paused = false;
	bufferevent_enable(ex->conn->bev, EV_READ);
	/* Process what is already buffered from the loop, not from inside evhttp's callback. */
	bufferevent_trigger(ex->conn->bev, EV_READ,
			    BEV_TRIG_DEFER_CALLBACKS | BEV_TRIG_IGNORE_WATERMARKS);
}

static const char *reason_of(const struct http_resp *resp, char *buf, size_t len)
{
	if (!resp->reason_len)
		return NULL; /* evhttp picks the standard phrase */
	snprintf(buf, len, "%.*s", (int)resp->reason_len, resp->reason);
	return buf;
}

static void reply_start(struct exchange *ex)
{
	char rbuf[256];
	unwatch_client(ex);
	/*
	 * An HTTP/1.0 client cannot take chunks: without a length the body must end with the
	 * connection, but evhttp would answer "Connection: keep-alive" with "Content-Length: 0".
	 * Forgetting the client's keep-alive wish makes evhttp close instead.
	 */
	if (ex->req->major == 1 && ex->req->minor == 0 &&
	    !evhttp_find_header(evhttp_request_get_output_headers(ex->req), "Content-Length"))
		evhttp_remove_header(evhttp_request_get_input_headers(ex->req), "Connection");
	evhttp_send_reply_start(ex->req, ex->resp.status, reason_of(&ex->resp, rbuf, sizeof(rbuf)));
	ex->started = true;
	/* A client that only listens to a long stream must not hit the server's read timeout. */
	client_set_timeouts(ex, false, true);
}

/* Hand ex->chunk to the client; pause reading execd when the client falls behind. */
static void relay_chunk(struct exchange *ex)
{
	size_t n = evbuffer_get_length(ex->chunk);
	if (!n)
		return;
	struct bufferevent *cbev = evhttp_connection_get_bufferevent(ex->evcon);
	size_t queued = evbuffer_get_length(bufferevent_get_output(cbev));
	if (queued + n > opts.client_buffer_max) {
		ex->paused = true;
		bufferevent_disable(ex->conn->bev, EV_READ);
		evhttp_send_reply_chunk_with_cb(ex->req, ex->chunk, client_drained, ex);
	} else {
		evhttp_send_reply_chunk(ex->req, ex->chunk);
	}
	/* evhttp ignores chunks for bodiless replies; never let them pile up here. */
	evbuffer_drain(ex->chunk, evbuffer_get_length(ex->chunk));
}

/*
 * Consume what execd sent so far. Returns true while the exchange lives on (waiting for more),
 * false once it finished or failed (ex is freed then).
 */
static bool process(struct exchange *ex)
{
	struct bufferevent *bev = ex->conn->bev;
	struct evbuffer *in = bufferevent_get_input(bev);
	const char *err = NULL;

	if (evbuffer_get_length(in))
		ex->got_bytes = true;

	while (!ex->resp.head_done) {
		size_t len = evbuffer_get_length(in);
		if (!len)
			return true;
		size_t n = MIN(len, (size_t)HTTP_RESP_MAX_HEAD);
		const char *data = (const char *)evbuffer_pullup(in, (ev_ssize_t)n);
		ssize_t r = http_resp_parse_head(&ex->resp, data, n, &err);
		if (r < 0) {
			exchange_fail(ex, UPSTREAM_PROTOCOL_ERROR, -EPROTO,
				      "invalid response from execd: %s", err);
			return false;
		}
		if (r == 0)
			return true;
		int status = ex->resp.status;
		if (status == 101) {
			if (!ex->upgrade || !ex->req) {
				exchange_fail(ex, UPSTREAM_PROTOCOL_ERROR, -EPROTO,
					      "execd switched protocols unasked");
				return false;
			}
			return start_splice(ex, (size_t)r);
		}
		if (status < 200) {
			if (++ex->interim > MAX_INTERIM) {
				exchange_fail(ex, UPSTREAM_PROTOCOL_ERROR, -EPROTO,
					      "execd sent too many 1xx responses");
				return false;
			}
			evbuffer_drain(in, (size_t)r);
			http_resp_init(&ex->resp, ex->head_request);
			continue;
		}
		if (ex->req)
			copy_response_headers(ex);
		snprintf(ex->reason, sizeof(ex->reason), "%.*s", (int)ex->resp.reason_len,
			 ex->resp.reason ? ex->resp.reason : "");
		ex->resp.reason = ex->reason;
		ex->resp.reason_len = strlen(ex->reason);
		evbuffer_drain(in, (size_t)r);
	}

	/* Body: move payload into ex->chunk without copying, consume framing in place. */
	while (!http_resp_done(&ex->resp)) {
		size_t avail = evbuffer_get_length(in);
		if (!avail)
			break;
		uint64_t pend = http_resp_payload_pending(&ex->resp);
		if (pend) {
			size_t take = pend < avail ? (size_t)pend : avail;
			if (ex->ping_cb) {
				ex->ping_body += take;
				evbuffer_drain(in, take);
				if (ex->ping_body > PING_BODY_MAX) {
					exchange_fail(ex, UPSTREAM_PROTOCOL_ERROR, -EPROTO,
						      "execd: ping body too large");
					return false;
				}
			} else {
				evbuffer_remove_buffer(in, ex->chunk, take);
			}
			http_resp_payload_consumed(&ex->resp, take);
			continue;
		}
		struct evbuffer_iovec v;
		if (evbuffer_peek(in, -1, NULL, &v, 1) < 1)
			break;
		ssize_t r = http_resp_parse_framing(&ex->resp, v.iov_base, v.iov_len, &err);
		if (r < 0) {
			exchange_fail(ex, UPSTREAM_PROTOCOL_ERROR, -EPROTO,
				      "invalid response body from execd: %s", err);
			return false;
		}
		evbuffer_drain(in, (size_t)r);
	}

	bool done = http_resp_done(&ex->resp);
	if (ex->ping_cb) {
		if (done)
			exchange_finish(ex);
		return !done;
	}
	if (!ex->started) {
		/*
		 * Complete already, and execd gave its length: one reply. A chunked answer stays
		 * chunked even when it arrived whole, so clients see execd's framing (some, like
		 * Python's http.client reading lines, only notice the end of a streamed body by
		 * its last chunk).
		 */
		if (done && ex->resp.body != HTTP_BODY_CHUNKED &&
		    evbuffer_get_length(ex->chunk) <= ONE_SHOT_MAX) {
			char rbuf[256];
			const char *reason = reason_of(&ex->resp, rbuf, sizeof(rbuf));
			struct evhttp_request *req = ex->req;
			bool reusable = ex->resp.keep_alive && !ex->upgrade &&
					evbuffer_get_length(in) == 0 &&
					evbuffer_get_length(bufferevent_get_output(bev)) == 0;
			if (reusable) {
				pool_put(ex->conn);
				ex->conn = NULL;
			}
			client_detach(ex);
			evhttp_send_reply(req, ex->resp.status, reason, ex->chunk);
			exchange_free(ex);
			return false;
		}
		reply_start(ex);
	}
	relay_chunk(ex);
	if (done) {
		exchange_finish(ex);
		return false;
	}
	return true;
}

static void up_read_cb(struct bufferevent *bev, void *arg)
{
	process(arg);
}

static void up_write_cb(struct bufferevent *bev, void *arg)
{
	/* The request is written; the write timeout stops while the output stays empty. */
}

/* A pooled connection turned out dead before any response byte: resend once on a new one. */
static bool maybe_retry(struct exchange *ex)
{
	if (!ex->reused || !ex->retry_ok || ex->got_bytes)
		return false;
	uconn_free(ex->conn);
	ex->conn = NULL;
	ex->reused = false;
	ex->retry_ok = false;
	ex->connect_tries = 1; /* from here on exchange_connect never consults the pool */
	int r = new_connection(ex);
	if (r < 0) {
		exchange_fail(ex, UPSTREAM_CONNECT_FAILED, r, "reconnect to execd: %s",
			      strerror(-r));
		return true;
	}
	exchange_send(ex);
	return true;
}

static void up_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct exchange *ex = arg;
	int err = EVUTIL_SOCKET_ERROR();

	if (what & BEV_EVENT_TIMEOUT) {
		exchange_fail(ex, UPSTREAM_TIMEOUT, -ETIMEDOUT, "execd: no %s within %d ms",
			      (what & BEV_EVENT_WRITING) ? "progress writing the request" : "response",
			      ex->ping_cb ? opts.connect_timeout_ms : opts.io_timeout_ms);
		return;
	}
	/* Whatever arrived before the end counts. */
	if (evbuffer_get_length(bufferevent_get_input(bev)) && !process(ex))
		return;
	if (!ex->resp.head_done && maybe_retry(ex))
		return;
	if (what & BEV_EVENT_EOF) {
		if (ex->resp.head_done && http_resp_eof(&ex->resp) == 0) {
			process(ex); /* a close-delimited body ends here */
			return;
		}
		exchange_fail(ex, UPSTREAM_PROTOCOL_ERROR, -EPROTO,
			      ex->resp.head_done
				      ? "execd closed the connection mid-response"
				      : "execd closed the connection without answering");
		return;
	}
	exchange_fail(ex, UPSTREAM_PROTOCOL_ERROR, -EPROTO, "execd: %s",
		      strerror(err ? err : EIO));
}

/* The client went away (or the server is being freed) while the exchange was running. */
static void client_closed(struct evhttp_connection *evcon, void *arg)
{
	struct exchange *ex = arg;
	struct evhttp_request *req = ex->req;
	/* Mid-reply disconnects hand the request back to us; otherwise evcon frees it. */
	bool ours = evhttp_request_get_connection(req) == NULL;
	ex->evcon = NULL;
	exchange_free(ex); /* closes the upstream connection: the response was not fully read */
	if (ours)
		evhttp_request_free(req);
}

/* ---- WebSocket and other upgrades: after a 101, splice the two byte streams ---- */

static void splice_teardown(struct exchange *ex)
{
	struct evhttp_connection *evcon = ex->evcon;
	http_conn_set_closecb(evcon, NULL, NULL);
	ex->evcon = NULL;
	exchange_free(ex);
	evhttp_connection_free(evcon); /* frees the request and the client socket */
}

static void splice_move(struct exchange *ex, struct bufferevent *from, struct bufferevent *to)
{
	struct evbuffer *out = bufferevent_get_output(to);
	evbuffer_add_buffer(out, bufferevent_get_input(from));
	if (evbuffer_get_length(out) > SPLICE_BUFFER_MAX)
		bufferevent_disable(from, EV_READ); /* resumed by to's write callback */
}

static void splice_read_cb(struct bufferevent *bev, void *arg)
{
	struct exchange *ex = arg;
	bool from_client = bev == ex->client_bev;
	splice_move(ex, bev, from_client ? ex->conn->bev : ex->client_bev);
}

static void splice_write_cb(struct bufferevent *bev, void *arg)
{
	struct exchange *ex = arg;
	bool to_client = bev == ex->client_bev;
	struct bufferevent *from = to_client ? ex->conn->bev : ex->client_bev;
	bool from_closed = to_client ? ex->closing_up : ex->closing_client;
	if (from_closed) {
		if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
			splice_teardown(ex);
		return;
	}
	if (evbuffer_get_length(bufferevent_get_output(bev)) <= SPLICE_BUFFER_MAX / 2)
		bufferevent_enable(from, EV_READ);
}

static void splice_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct exchange *ex = arg;
	bool from_client = bev == ex->client_bev;
	struct bufferevent *to = from_client ? ex->conn->bev : ex->client_bev;

	if (!(what & BEV_EVENT_EOF)) {
		splice_teardown(ex); /* an error: nothing more can be delivered reliably */
		return;
	}
	/* Deliver what is left, then close both sides. */
	evbuffer_add_buffer(bufferevent_get_output(to), bufferevent_get_input(bev));
	bufferevent_disable(bev, EV_READ);
	if (from_client)
		ex->closing_client = true;
	else
		ex->closing_up = true;
	if (evbuffer_get_length(bufferevent_get_output(to)) == 0) {
		splice_teardown(ex);
		return;
	}
	bufferevent_setwatermark(to, EV_WRITE, 0, 0);
}

static bool start_splice(struct exchange *ex, size_t head_len)
{
	struct bufferevent *up = ex->conn->bev;
	struct bufferevent *cb = evhttp_connection_get_bufferevent(ex->evcon);
	struct evbuffer *out = bufferevent_get_output(cb);
	const struct http_header *upg = http_resp_header(&ex->resp, "Upgrade");
	const struct http_header *conn = http_resp_header(&ex->resp, "Connection");

	unwatch_client(ex);
	/* evhttp has no API for a 101; write it raw and take the client socket over. */
	evbuffer_add_printf(out, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n");
	if (upg)
		evbuffer_add_printf(out, "Upgrade: %.*s\r\n", (int)upg->value_len, upg->value);
	for (unsigned i = 0; i < ex->resp.n_headers; i++) {
		const struct http_header *h = &ex->resp.headers[i];
		if (is_hop_by_hop(h->name, h->name_len, conn ? conn->value : NULL,
				  conn ? conn->value_len : 0))
			continue;
		evbuffer_add_printf(out, "%.*s: %.*s\r\n", (int)h->name_len, h->name,
				    (int)h->value_len, h->value);
	}
	evbuffer_add(out, "\r\n", 2);
	evbuffer_drain(bufferevent_get_input(up), head_len);

	ex->started = true;
	ex->client_bev = cb;
	bufferevent_setcb(cb, splice_read_cb, splice_write_cb, splice_event_cb, ex);
	bufferevent_setcb(up, splice_read_cb, splice_write_cb, splice_event_cb, ex);
	bufferevent_set_timeouts(cb, NULL, NULL);
	bufferevent_set_timeouts(up, NULL, NULL);
	bufferevent_setwatermark(cb, EV_WRITE, SPLICE_BUFFER_MAX / 2, 0);
	bufferevent_setwatermark(up, EV_WRITE, SPLICE_BUFFER_MAX / 2, 0);
	bufferevent_enable(cb, EV_READ | EV_WRITE);
	bufferevent_enable(up, EV_READ | EV_WRITE);
	/* Bytes either side sent right behind the handshake. */
	splice_move(ex, up, cb);
	splice_move(ex, cb, up);
	return true;
}

/* ---- entry points ---- */

void upstream_proxy(struct event_base *base, const char *sock_path, pid_t peer_pid,
		    struct evhttp_request *req,
		    const char *target, upstream_fail_cb fail_cb, void *arg)
{
	enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
	const char *method = method_name(cmd);
	if (!method) {
		http_send_error(req, 405, "SANDBOX::INVALID_PARAMETER",
				"method not supported by the sandbox proxy");
		return;
	}
	for (const char *t = target; *t; t++)
		if ((unsigned char)*t <= 0x20 || *t == 0x7f) {
			http_send_error(req, 400, "SANDBOX::INVALID_PARAMETER",
					"proxied path contains a space or control character");
			return;
		}
	if (target[0] != '/') {
		http_send_error(req, 400, "SANDBOX::INVALID_PARAMETER",
				"proxied path must start with '/'");
		return;
	}

	struct exchange *ex = exchange_new(base, sock_path, peer_pid);
	if (!ex) {
		char detail[PATH_MAX_LEN + 64];
		snprintf(detail, sizeof(detail), "execd socket path too long or out of memory");
		if (fail_cb)
			fail_cb(req, UPSTREAM_CONNECT_FAILED, detail, arg);
		else
			http_send_error(req, 502, "SANDBOX::BACKEND_UNREACHABLE", "%s", detail);
		return;
	}
	ex->req = req;
	ex->evcon = evhttp_request_get_connection(req);
	ex->fail_cb = fail_cb;
	ex->fail_arg = arg;
	ex->head_request = cmd == EVHTTP_REQ_HEAD;

	size_t body_len = evbuffer_get_length(evhttp_request_get_input_buffer(req));
	bool body_method = cmd == EVHTTP_REQ_POST || cmd == EVHTTP_REQ_PUT || cmd == EVHTTP_REQ_PATCH;
	build_request_head(ex, method, target, body_len, body_method);
	ex->retry_ok = body_len == 0 && !ex->upgrade &&
		       (cmd == EVHTTP_REQ_GET || cmd == EVHTTP_REQ_HEAD || cmd == EVHTTP_REQ_OPTIONS ||
			cmd == EVHTTP_REQ_DELETE || cmd == EVHTTP_REQ_PUT);
	if (ex->evcon) {
		http_conn_set_closecb(ex->evcon, client_closed, ex);
		watch_client(ex);
	}
	exchange_connect(ex);
}

/* Failures found before the first turn of the loop are reported from the loop, as promised. */
static void ping_deferred_fail(evutil_socket_t fd, short what, void *arg)
{
	struct exchange *ex = arg;
	ex->deadline_armed = false;
	void (*cb)(int, void *) = ex->ping_cb;
	void *cb_arg = ex->ping_arg;
	int result = ex->deferred_err;
	exchange_free(ex);
	cb(result, cb_arg);
}

static void ping_deadline(evutil_socket_t fd, short what, void *arg)
{
	struct exchange *ex = arg;
	ex->deadline_armed = false;
	exchange_fail(ex, UPSTREAM_TIMEOUT, -ETIMEDOUT, "ping execd: timed out");
}

int upstream_ping(struct event_base *base, const char *sock_path, pid_t peer_pid, int timeout_ms,
		  void (*cb)(int result, void *arg), void *arg)
{
	struct exchange *ex = exchange_new(base, sock_path, peer_pid);
	if (!ex)
		return strlen(sock_path) >= PATH_MAX_LEN ? -ENAMETOOLONG : -ENOMEM;
	ex->ping_cb = cb;
	ex->ping_arg = arg;
	ex->retry_ok = true;
	evbuffer_add(ex->head, "GET /ping HTTP/1.1\r\nHost: localhost\r\n\r\n", 39);

	if (ex->connect_tries == 0) {
		ex->conn = pool_take(base, ex->path, ex->hash);
		ex->reused = ex->conn != NULL;
	}
	int r = ex->conn ? 0 : new_connection(ex);
	if (r < 0 && r != -EAGAIN) {
		/* Report from the loop: callers may not expect cb before we return. */
		struct timeval zero = { 0, 0 };
		ex->deferred_err = r;
		evtimer_assign(&ex->deadline, base, ping_deferred_fail, ex);
		evtimer_add(&ex->deadline, &zero);
		ex->deadline_armed = true;
		return 0;
	}
	struct timeval tv = ms_tv(timeout_ms > 0 ? timeout_ms : opts.connect_timeout_ms);
	evtimer_assign(&ex->deadline, base, ping_deadline, ex);
	evtimer_add(&ex->deadline, &tv);
	ex->deadline_armed = true;
	if (r == -EAGAIN) {
		ex->connect_tries = 1;
		struct timeval delay = ms_tv(1);
		struct timeval limit = ms_tv(timeout_ms > 0 ? timeout_ms : opts.connect_timeout_ms);
		struct timeval now;
		event_base_gettimeofday_cached(base, &now);
		timeradd(&now, &limit, &ex->connect_deadline);
		evtimer_assign(&ex->timer, base, connect_retry_cb, ex);
		evtimer_add(&ex->timer, &delay);
		ex->timer_armed = true;
		return 0;
	}
	exchange_send(ex);
	return 0;
}
