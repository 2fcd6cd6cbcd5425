/*
 * The reverse proxy's exchanges: see revproxy.h. Connections and the pool are revproxy_pool.c's,
 * header rules revproxy_headers.c's; this file sends, parses, relays and splices.
 *
 * One struct exchange per request. Its life:
 *   connect (or take a pooled connection) -> write head + body -> parse the response head ->
 *   relay: the whole reply at once when it is already complete, else evhttp_send_reply_start and
 *   one evhttp_send_reply_chunk per arrival -> evhttp_send_reply_end -> connection back to the pool.
 *   After a 101: splice the two sockets until either side closes.
 * Ownership: the exchange owns its upstream connection until it finishes or fails; evhttp owns the
 * client request, except after a client disconnect mid-reply, when evhttp hands it back to us
 * (see client_closed). Each exchange holds its struct revproxy alive.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_struct.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <event2/http.h>
#include <event2/http_struct.h>
#include <event2/keyvalq_struct.h>

#include "shared/http_parse.h"
#include "shared/httputil.h"
#include "shared/macro.h"
#include "shared/revproxy.h"
#include "shared/revproxy_pool.h"

#define MAX_INTERIM 8 /* 1xx responses skipped before the final one */
#define PROBE_BODY_MAX (64 * 1024)
#define ONE_SHOT_MAX (256 * 1024) /* complete bodies up to this size are sent in one reply */
#define SPLICE_BUFFER_MAX (1024 * 1024)
#define EXCHANGE_CACHE_MAX 32

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

static struct timeval ms_tv(int ms)
{
	return (struct timeval){ .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
}

int revproxy_new(struct event_base *base, const struct revproxy_options *o,
		 struct revproxy **ret)
{
	struct revproxy *rp = calloc(1, sizeof(*rp));
	if (!rp)
		return -ENOMEM;
	rp->base = base;
	rp->opts = (struct revproxy_options){
		.peer_name = "upstream",
		.connect_timeout_ms = 5000,
		.io_timeout_ms = 180000,
		.idle_timeout_ms = 3000,
		.max_idle_per_target = 8,
		.max_idle_total = 1024,
		.client_buffer_max = 4u << 20,
	};
	if (o) {
		struct revproxy_options *d = &rp->opts;
		if (o->peer_name)
			d->peer_name = o->peer_name;
		if (o->connect_timeout_ms > 0)
			d->connect_timeout_ms = o->connect_timeout_ms;
		if (o->io_timeout_ms > 0)
			d->io_timeout_ms = o->io_timeout_ms;
		if (o->idle_timeout_ms > 0)
			d->idle_timeout_ms = o->idle_timeout_ms;
		if (o->max_idle_per_target > 0)
			d->max_idle_per_target = o->max_idle_per_target;
		if (o->max_idle_total > 0)
			d->max_idle_total = o->max_idle_total;
		if (o->client_buffer_max > 0)
			d->client_buffer_max = o->client_buffer_max;
		d->forwarded = o->forwarded;
		d->host = o->host;
		d->drop = o->drop;
		d->broken_cb = o->broken_cb;
		d->broken_arg = o->broken_arg;
	}
	rp_pool_init(&rp->pool, base, rp->opts.max_idle_per_target, rp->opts.max_idle_total,
		     rp->opts.idle_timeout_ms);
	*ret = rp;
	return 0;
}

void revproxy_set_broken_cb(struct revproxy *rp, revproxy_broken_cb cb, void *arg)
{
	rp->opts.broken_cb = cb;
	rp->opts.broken_arg = arg;
}

unsigned revproxy_pool_idle(const struct revproxy *rp)
{
	return rp ? rp->pool.n_idle : 0;
}

/* ---- exchanges ---- */

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

static void exchange_cache_clear(struct revproxy *rp)
{
	struct exchange *ex;
	while ((ex = rp->free_exchanges)) {
		rp->free_exchanges = ex->next_free;
		evbuffer_free(ex->head);
		evbuffer_free(ex->chunk);
		free(ex);
	}
	rp->n_free_exchanges = 0;
}

static void revproxy_destroy(struct revproxy *rp)
{
	rp_pool_clear(&rp->pool);
	exchange_cache_clear(rp);
	free(rp);
}

void revproxy_free(struct revproxy *rp)
{
	if (!rp)
		return;
	rp->freed = true;
	rp_pool_clear(&rp->pool);
	exchange_cache_clear(rp);
	if (!rp->n_live)
		revproxy_destroy(rp);
}

/* A new exchange towards t, or NULL (*ret_err: -ENAMETOOLONG, -EINVAL, -ENOMEM). */
static struct exchange *exchange_new(struct revproxy *rp, const struct revproxy_target *t,
				     int *ret_err)
{
	char key[RP_KEY_MAX];
	const char *addr = t->unix_path ? t->unix_path : t->host;
	int r = rp_target_key(t, key, sizeof(key));
	if (r < 0 || strlen(addr) >= RP_KEY_MAX) {
		*ret_err = r < 0 ? r : -ENAMETOOLONG;
		return NULL;
	}
	struct exchange *ex = rp->free_exchanges;
	struct evbuffer *head = NULL, *chunk = NULL;
	if (ex) {
		rp->free_exchanges = ex->next_free;
		rp->n_free_exchanges--;
		head = ex->head;
		chunk = ex->chunk;
	} else {
		ex = malloc(sizeof(*ex));
		head = evbuffer_new();
		chunk = evbuffer_new();
		if (!ex || !head || !chunk) {
			if (head)
				evbuffer_free(head);
			if (chunk)
				evbuffer_free(chunk);
			free(ex);
			*ret_err = -ENOMEM;
			return NULL;
		}
	}
	memset(ex, 0, sizeof(*ex));
	ex->rp = rp;
	rp->n_live++;
	strcpy(ex->addr, addr);
	strcpy(ex->key, key);
	ex->target = *t;
	if (t->unix_path)
		ex->target.unix_path = ex->addr;
	else
		ex->target.host = ex->addr;
	ex->hash = rp_key_hash(key);
	ex->head = head;
	ex->chunk = chunk;
	return ex;
}

static void exchange_free(struct exchange *ex)
{
	struct revproxy *rp = ex->rp;
	if (ex->timer_armed)
		event_del(&ex->timer);
	if (ex->deadline_armed)
		event_del(&ex->deadline);
	rp_conn_free(ex->conn);
	ex->conn = NULL;
	evbuffer_drain(ex->head, evbuffer_get_length(ex->head));
	evbuffer_drain(ex->chunk, evbuffer_get_length(ex->chunk));
	if (!rp->freed && rp->n_free_exchanges < EXCHANGE_CACHE_MAX) {
		ex->next_free = rp->free_exchanges;
		rp->free_exchanges = ex;
		rp->n_free_exchanges++;
	} else {
		evbuffer_free(ex->head);
		evbuffer_free(ex->chunk);
		free(ex);
	}
	if (--rp->n_live == 0 && rp->freed)
		revproxy_destroy(rp);
}

/* The connection is no longer needed by ex: back to the pool when it can carry another request. */
static void exchange_release_conn(struct exchange *ex)
{
	struct bufferevent *bev = ex->conn->bev;
	bool reusable = ex->resp.keep_alive && !ex->upgrade && !ex->conn->connecting &&
			!ex->rp->freed && evbuffer_get_length(bufferevent_get_input(bev)) == 0 &&
			evbuffer_get_length(bufferevent_get_output(bev)) == 0;
	if (reusable) {
		rp_pool_put(&ex->rp->pool, ex->conn);
		ex->conn = NULL;
	}
}

static void up_read_cb(struct bufferevent *bev, void *arg);
static void up_write_cb(struct bufferevent *bev, void *arg);
static void up_event_cb(struct bufferevent *bev, short what, void *arg);
static void client_closed(struct evhttp_connection *evcon, void *arg);
static int exchange_connect(struct exchange *ex);

/* ---- the client side: watching it, timeouts, failing and finishing ---- */

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
	client_set_timeouts(ex, false, false); /* waiting on upstream is not the client's idleness */
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

static int failure_errno(enum revproxy_failure why, int err)
{
	if (err)
		return err;
	return why == REVPROXY_TIMEOUT	      ? -ETIMEDOUT
	       : why == REVPROXY_CONNECT_FAILED ? -ECONNREFUSED
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
	exchange_free(ex); /* closes the upstream connection: its answer would have nowhere to go */
	evhttp_connection_free(evcon); /* frees the request */
}

/*
 * The exchange failed. Before any byte reached the client the caller (or a 502) answers; after,
 * broken_cb may end the reply, else the client connection is dropped so a truncated body cannot
 * pass for a complete one.
 */
static void exchange_fail(struct exchange *ex, enum revproxy_failure why, int err,
			  const char *fmt, ...) _printf_(4, 5);
static void exchange_fail(struct exchange *ex, enum revproxy_failure why, int err,
			  const char *fmt, ...)
{
	char detail[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(detail, sizeof(detail), fmt, ap);
	va_end(ap);

	if (ex->probe_cb) {
		void (*cb)(int, void *) = ex->probe_cb;
		void *arg = ex->probe_arg;
		exchange_free(ex);
		cb(failure_errno(why, err), arg);
		return;
	}
	struct evhttp_request *req = ex->req;
	struct evhttp_connection *evcon = ex->evcon;
	bool started = ex->started;
	revproxy_fail_cb fail_cb = ex->fail_cb;
	void *fail_arg = ex->fail_arg;
	revproxy_broken_cb broken_cb = ex->rp->opts.broken_cb;
	void *broken_arg = ex->rp->opts.broken_arg;
	client_detach(ex);
	exchange_free(ex);
	if (started) {
		if (!broken_cb || !broken_cb(req, detail, broken_arg))
			client_abort(evcon);
	} else if (fail_cb) {
		fail_cb(req, why, detail, fail_arg);
	} else {
		http_send_error(req, 502, "SANDBOX::BACKEND_UNREACHABLE", "%s", detail);
	}
}

/* The response is complete: recycle the connection, end the reply, report. */
static void exchange_finish(struct exchange *ex)
{
	exchange_release_conn(ex);
	if (ex->probe_cb) {
		void (*cb)(int, void *) = ex->probe_cb;
		void *arg = ex->probe_arg;
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

/* ---- sending the request ---- */

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

/* The client's IP address, or NULL (a unix-socket client, or none known). */
static const char *client_address(struct evhttp_connection *evcon)
{
	char *addr = NULL;
	ev_uint16_t port = 0;
	unsigned char buf[sizeof(struct in6_addr)];
	if (!evcon)
		return NULL;
	evhttp_connection_get_peer(evcon, &addr, &port);
	if (!addr || (inet_pton(AF_INET, addr, buf) != 1 && inet_pton(AF_INET6, addr, buf) != 1))
		return NULL;
	return addr;
}

static void exchange_send(struct exchange *ex)
{
	struct rp_conn *c = ex->conn;
	struct evbuffer *out = bufferevent_get_output(c->bev);
	int io_ms = ex->probe_cb ? ex->rp->opts.connect_timeout_ms : ex->rp->opts.io_timeout_ms;
	struct timeval io = ms_tv(io_ms);
	struct timeval conn_tv = ms_tv(MIN(io_ms, ex->rp->opts.connect_timeout_ms));

	/* The head is copied (it is small and kept for a retry); the body is moved. */
	evbuffer_add(out, evbuffer_pullup(ex->head, -1), evbuffer_get_length(ex->head));
	if (ex->req) {
		struct evbuffer *body = evhttp_request_get_input_buffer(ex->req);
		if (evbuffer_get_length(body))
			evbuffer_add_buffer(out, body);
	}
	http_resp_init(&ex->resp, ex->head_request);
	bufferevent_setcb(c->bev, up_read_cb, up_write_cb, up_event_cb, ex);
	/* A TCP connect gets the connect timeout; up_event_cb switches to io once connected. */
	bufferevent_set_timeouts(c->bev, &io, c->connecting ? &conn_tv : &io);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
}

/* A new connection into ex->conn: 0, -EAGAIN (backlog full) or a negative errno. */
static int new_connection(struct exchange *ex)
{
	return rp_conn_open(ex->rp->base, &ex->target, ex->key, ex->hash, &ex->conn);
}

static void connect_retry_cb(evutil_socket_t fd, short what, void *arg)
{
	struct exchange *ex = arg;
	ex->timer_armed = false;
	exchange_connect(ex);
}

static void connect_failed(struct exchange *ex, int r)
{
	exchange_fail(ex, REVPROXY_CONNECT_FAILED, r, "connect to %s: %s", ex->rp->opts.peer_name,
		      r == -EPERM ? "the socket is not served by the sandbox's PID 1" : strerror(-r));
}

/* Get a connection (pooled or new) and send; on failure the exchange is failed and freed. */
static int exchange_connect(struct exchange *ex)
{
	struct revproxy *rp = ex->rp;
	if (ex->connect_tries == 0) {
		ex->conn = rp_pool_take(&rp->pool, ex->key, ex->hash);
		ex->reused = ex->conn != NULL;
	}
	if (!ex->conn) {
		int r = new_connection(ex);
		if (r == -EAGAIN) {
			/* Backlog full: back off 1, 2, 4 ... 32 ms until the connect deadline. */
			struct timeval now, delay;
			event_base_gettimeofday_cached(rp->base, &now);
			if (ex->connect_tries == 0) {
				struct timeval limit = ms_tv(rp->opts.connect_timeout_ms);
				timeradd(&now, &limit, &ex->connect_deadline);
			}
			if (timercmp(&now, &ex->connect_deadline, >)) {
				exchange_fail(ex, REVPROXY_TIMEOUT, -ETIMEDOUT,
					      "connect to %s: timed out, listen backlog full",
					      rp->opts.peer_name);
				return -ETIMEDOUT;
			}
			delay = ms_tv(1 << MIN(ex->connect_tries, 5));
			ex->connect_tries++;
			evtimer_assign(&ex->timer, rp->base, connect_retry_cb, ex);
			evtimer_add(&ex->timer, &delay);
			ex->timer_armed = true;
			return 0;
		}
		if (r < 0) {
			connect_failed(ex, r);
			return r;
		}
	}
	exchange_send(ex);
	return 0;
}

/* ---- relaying the response ---- */

static bool start_splice(struct exchange *ex, size_t head_len);

/* Every Connection field of the response, joined with commas into buf (NULL when none). */
static const char *resp_connection(const struct http_resp *resp, char *buf, size_t len,
				   size_t *ret_len)
{
	size_t n = 0;
	for (unsigned i = 0; i < resp->n_headers; i++) {
		const struct http_header *h = &resp->headers[i];
		if (h->name_len != 10 || strncasecmp(h->name, "Connection", 10) != 0)
			continue;
		if (n && n < len)
			buf[n++] = ',';
		size_t take = MIN(h->value_len, len - 1 - n);
		memcpy(buf + n, h->value, take);
		n += take;
	}
	buf[n] = 0;
	*ret_len = n;
	return n ? buf : NULL;
}

/* Copy the response head into the client's output headers (minus hop-by-hop ones). */
static void copy_response_headers(struct exchange *ex)
{
	static char name[HTTP_RESP_MAX_HEAD + 1], value[HTTP_RESP_MAX_HEAD + 1];
	static char conn_buf[HTTP_RESP_MAX_HEAD + 1];
	struct evkeyvalq *out = evhttp_request_get_output_headers(ex->req);
	size_t conn_len;
	const char *conn = resp_connection(&ex->resp, conn_buf, sizeof(conn_buf), &conn_len);
	bool keep_cl = ex->resp.body == HTTP_BODY_LENGTH || ex->head_request;

	for (unsigned i = 0; i < ex->resp.n_headers; i++) {
		const struct http_header *h = &ex->resp.headers[i];
		if (!revproxy_response_field_kept(h->name, h->name_len, conn, conn_len, keep_cl))
			continue;
		/* The server already answers with the client's request id; never send two. */
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

/* Hand ex->chunk to the client; pause reading upstream when the client falls behind. */
static void relay_chunk(struct exchange *ex)
{
	size_t n = evbuffer_get_length(ex->chunk);
	if (!n)
		return;
	struct bufferevent *cbev = evhttp_connection_get_bufferevent(ex->evcon);
	size_t queued = evbuffer_get_length(bufferevent_get_output(cbev));
	if (queued + n > ex->rp->opts.client_buffer_max) {
		ex->paused = true;
		bufferevent_disable(ex->conn->bev, EV_READ);
		evhttp_send_reply_chunk_with_cb(ex->req, ex->chunk, client_drained, ex);
	} else {
		evhttp_send_reply_chunk(ex->req, ex->chunk);
	}
	/* evhttp ignores chunks for bodiless replies; never let them pile up here. */
	evbuffer_drain(ex->chunk, evbuffer_get_length(ex->chunk));
}

/* Parse the response head; true when it is complete (or the exchange went on to a splice). */
static bool process_head(struct exchange *ex, bool *ret_alive)
{
	const char *name = ex->rp->opts.peer_name;
	struct evbuffer *in = bufferevent_get_input(ex->conn->bev);
	const char *err = NULL;

	*ret_alive = true;
	while (!ex->resp.head_done) {
		size_t len = evbuffer_get_length(in);
		if (!len)
			return false;
		size_t n = MIN(len, (size_t)HTTP_RESP_MAX_HEAD);
		const char *data = (const char *)evbuffer_pullup(in, (ev_ssize_t)n);
		ssize_t r = http_resp_parse_head(&ex->resp, data, n, &err);
		if (r < 0) {
			exchange_fail(ex, REVPROXY_PROTOCOL_ERROR, -EPROTO,
				      "invalid response from %s: %s", name, err);
			*ret_alive = false;
			return false;
		}
		if (r == 0)
			return false;
		int status = ex->resp.status;
		if (status == 101) {
			if (!ex->upgrade || !ex->req) {
				exchange_fail(ex, REVPROXY_PROTOCOL_ERROR, -EPROTO,
					      "%s switched protocols unasked", name);
				*ret_alive = false;
				return false;
			}
			*ret_alive = start_splice(ex, (size_t)r);
			return false;
		}
		if (status < 200) {
			if (++ex->interim > MAX_INTERIM) {
				exchange_fail(ex, REVPROXY_PROTOCOL_ERROR, -EPROTO,
					      "%s sent too many 1xx responses", name);
				*ret_alive = false;
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
	return true;
}

/*
 * Consume what upstream sent so far. Returns true while the exchange lives on (waiting for more),
 * false once it finished or failed (ex is freed then).
 */
static bool process(struct exchange *ex)
{
	struct bufferevent *bev = ex->conn->bev;
	struct evbuffer *in = bufferevent_get_input(bev);
	const char *err = NULL;
	bool alive;

	if (evbuffer_get_length(in))
		ex->got_bytes = true;
	if (!ex->resp.head_done && !process_head(ex, &alive))
		return alive;

	/* Body: move payload into ex->chunk without copying, consume framing in place. */
	while (!http_resp_done(&ex->resp)) {
		size_t avail = evbuffer_get_length(in);
		if (!avail)
			break;
		uint64_t pend = http_resp_payload_pending(&ex->resp);
		if (pend) {
			size_t take = pend < avail ? (size_t)pend : avail;
			if (ex->probe_cb) {
				ex->probe_body += take;
				evbuffer_drain(in, take);
				if (ex->probe_body > PROBE_BODY_MAX) {
					exchange_fail(ex, REVPROXY_PROTOCOL_ERROR, -EPROTO,
						      "%s: ping body too large",
						      ex->rp->opts.peer_name);
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
			exchange_fail(ex, REVPROXY_PROTOCOL_ERROR, -EPROTO,
				      "invalid response body from %s: %s", ex->rp->opts.peer_name,
				      err);
			return false;
		}
		evbuffer_drain(in, (size_t)r);
	}

	bool done = http_resp_done(&ex->resp);
	if (ex->probe_cb) {
		if (done)
			exchange_finish(ex);
		return !done;
	}
	if (!ex->started) {
		/*
		 * Complete already, and upstream gave its length: one reply. A chunked answer stays
		 * chunked even when it arrived whole, so clients see upstream's framing (some, like
		 * Python's http.client reading lines, only notice the end of a streamed body by
		 * its last chunk).
		 */
		if (done && ex->resp.body != HTTP_BODY_CHUNKED &&
		    evbuffer_get_length(ex->chunk) <= ONE_SHOT_MAX) {
			char rbuf[256];
			const char *reason = reason_of(&ex->resp, rbuf, sizeof(rbuf));
			struct evhttp_request *req = ex->req;
			exchange_release_conn(ex);
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
	rp_conn_free(ex->conn);
	ex->conn = NULL;
	ex->reused = false;
	ex->retry_ok = false;
	ex->connect_tries = 1; /* from here on exchange_connect never consults the pool */
	int r = new_connection(ex);
	if (r < 0) {
		exchange_fail(ex, REVPROXY_CONNECT_FAILED, r, "reconnect to %s: %s",
			      ex->rp->opts.peer_name, strerror(-r));
		return true;
	}
	exchange_send(ex);
	return true;
}

static void up_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct exchange *ex = arg;
	const char *name = ex->rp->opts.peer_name;
	int err = EVUTIL_SOCKET_ERROR();

	if (what & BEV_EVENT_CONNECTED) {
		int io_ms = ex->probe_cb ? ex->rp->opts.connect_timeout_ms
					 : ex->rp->opts.io_timeout_ms;
		struct timeval io = ms_tv(io_ms);
		ex->conn->connecting = false;
		bufferevent_set_timeouts(bev, &io, &io);
		return;
	}
	if (ex->conn->connecting) {
		if (what & BEV_EVENT_TIMEOUT)
			exchange_fail(ex, REVPROXY_TIMEOUT, -ETIMEDOUT, "connect to %s: timed out",
				      name);
		else
			connect_failed(ex, -(err ? err : ECONNREFUSED));
		return;
	}
	if (what & BEV_EVENT_TIMEOUT) {
		exchange_fail(ex, REVPROXY_TIMEOUT, -ETIMEDOUT, "%s: no %s within %d ms", name,
			      (what & BEV_EVENT_WRITING) ? "progress writing the request" : "response",
			      ex->probe_cb ? ex->rp->opts.connect_timeout_ms
					   : ex->rp->opts.io_timeout_ms);
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
		exchange_fail(ex, REVPROXY_PROTOCOL_ERROR, -EPROTO,
			      ex->resp.head_done ? "%s closed the connection mid-response"
						 : "%s closed the connection without answering",
			      name);
		return;
	}
	exchange_fail(ex, REVPROXY_PROTOCOL_ERROR, -EPROTO, "%s: %s", name,
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
	static char conn_buf[HTTP_RESP_MAX_HEAD + 1];
	struct bufferevent *up = ex->conn->bev;
	struct bufferevent *cb = evhttp_connection_get_bufferevent(ex->evcon);
	struct evbuffer *out = bufferevent_get_output(cb);
	const struct http_header *upg = http_resp_header(&ex->resp, "Upgrade");
	size_t conn_len;
	const char *conn = resp_connection(&ex->resp, conn_buf, sizeof(conn_buf), &conn_len);

	unwatch_client(ex);
	/* evhttp has no API for a 101; write it raw and take the client socket over. */
	evbuffer_add_printf(out, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n");
	if (upg)
		evbuffer_add_printf(out, "Upgrade: %.*s\r\n", (int)upg->value_len, upg->value);
	for (unsigned i = 0; i < ex->resp.n_headers; i++) {
		const struct http_header *h = &ex->resp.headers[i];
		if (revproxy_hop_by_hop(h->name, h->name_len, conn, conn_len))
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

void revproxy_forward(struct revproxy *rp, const struct revproxy_target *t,
		      struct evhttp_request *req, const char *target, revproxy_fail_cb fail_cb,
		      void *arg)
{
	enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
	const char *method = method_name(cmd);
	int err = 0;
	struct exchange *ex = method ? exchange_new(rp, t, &err) : NULL;
	if (!ex) {
		char detail[128];
		snprintf(detail, sizeof(detail), "%s",
			 !method		 ? "method not supported by the proxy"
			 : err == -ENOMEM ? "out of memory"
					  : "upstream address too long or not valid");
		if (fail_cb)
			fail_cb(req, REVPROXY_CONNECT_FAILED, detail, arg);
		else
			http_send_error(req, 502, "SANDBOX::BACKEND_UNREACHABLE", "%s", detail);
		return;
	}
	ex->req = req;
	ex->evcon = evhttp_request_get_connection(req);
	ex->fail_cb = fail_cb;
	ex->fail_arg = arg;
	ex->head_request = cmd == EVHTTP_REQ_HEAD;

	struct evkeyvalq *in = evhttp_request_get_input_headers(req);
	size_t body_len = evbuffer_get_length(evhttp_request_get_input_buffer(req));
	struct revproxy_head h = {
		.method = method,
		.target = target,
		.headers = in,
		.client_addr = client_address(ex->evcon),
		.host = rp->opts.host,
		.host_default = t->unix_path ? "localhost" : NULL,
		.forwarded = rp->opts.forwarded,
		.drop = rp->opts.drop,
		.body_len = body_len,
		.body_method = cmd == EVHTTP_REQ_POST || cmd == EVHTTP_REQ_PUT ||
			       cmd == EVHTTP_REQ_PATCH,
	};
	char host_buf[RP_KEY_MAX + 16];
	if (!t->unix_path) {
		bool v6 = strchr(t->host, ':') != NULL;
		snprintf(host_buf, sizeof(host_buf), "%s%s%s:%u", v6 ? "[" : "", t->host,
			 v6 ? "]" : "", (unsigned)t->port);
		h.host_default = host_buf;
	}
	ex->upgrade = revproxy_wants_upgrade(in, NULL);
	if (revproxy_head_write(ex->head, &h) < 0) {
		exchange_fail(ex, REVPROXY_CONNECT_FAILED, -ENOMEM, "out of memory");
		return;
	}
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
static void probe_deferred_fail(evutil_socket_t fd, short what, void *arg)
{
	struct exchange *ex = arg;
	ex->deadline_armed = false;
	void (*cb)(int, void *) = ex->probe_cb;
	void *cb_arg = ex->probe_arg;
	int result = ex->deferred_err;
	exchange_free(ex);
	cb(result, cb_arg);
}

static void probe_deadline(evutil_socket_t fd, short what, void *arg)
{
	struct exchange *ex = arg;
	ex->deadline_armed = false;
	exchange_fail(ex, REVPROXY_TIMEOUT, -ETIMEDOUT, "probe %s: timed out",
		      ex->rp->opts.peer_name);
}

int revproxy_probe(struct revproxy *rp, const struct revproxy_target *t, const char *path,
		   int timeout_ms, void (*cb)(int result, void *arg), void *arg)
{
	int err = 0;
	struct exchange *ex = exchange_new(rp, t, &err);
	if (!ex)
		return err;
	ex->probe_cb = cb;
	ex->probe_arg = arg;
	ex->retry_ok = true;
	if (evbuffer_add_printf(ex->head, "GET %s HTTP/1.1\r\nHost: localhost\r\n\r\n", path) < 0) {
		exchange_free(ex);
		return -ENOMEM;
	}
	int limit_ms = timeout_ms > 0 ? timeout_ms : rp->opts.connect_timeout_ms;

	ex->conn = rp_pool_take(&rp->pool, ex->key, ex->hash);
	ex->reused = ex->conn != NULL;
	int r = ex->conn ? 0 : new_connection(ex);
	if (r < 0 && r != -EAGAIN) {
		/* Report from the loop: callers may not expect cb before we return. */
		struct timeval zero = { 0, 0 };
		ex->deferred_err = r;
		evtimer_assign(&ex->deadline, rp->base, probe_deferred_fail, ex);
		evtimer_add(&ex->deadline, &zero);
		ex->deadline_armed = true;
		return 0;
	}
	struct timeval tv = ms_tv(limit_ms);
	evtimer_assign(&ex->deadline, rp->base, probe_deadline, ex);
	evtimer_add(&ex->deadline, &tv);
	ex->deadline_armed = true;
	if (r == -EAGAIN) {
		ex->connect_tries = 1;
		struct timeval delay = ms_tv(1);
		struct timeval now;
		event_base_gettimeofday_cached(rp->base, &now);
		timeradd(&now, &tv, &ex->connect_deadline);
		evtimer_assign(&ex->timer, rp->base, connect_retry_cb, ex);
		evtimer_add(&ex->timer, &delay);
		ex->timer_armed = true;
		return 0;
	}
	exchange_send(ex);
	return 0;
}
