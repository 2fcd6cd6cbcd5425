/*
 * The reverse proxy's exchanges, upstream side: see revproxy.h. Connections and the pool are
 * revproxy_pool.c's, header rules revproxy_headers.c's, and the downstream side (the evhttp request
 * being answered: watching the client, relaying to it, splicing after a 101) is revproxy_relay.c's.
 * This file connects, sends the request, parses the answer with http_parse.h, and decides.
 *
 * One struct exchange per request. Its life:
 *   connect (or take a pooled connection) -> write head + body -> parse the response head ->
 *   relay: the whole reply at once when it is already complete, else evhttp_send_reply_start and
 *   one evhttp_send_reply_chunk per arrival -> evhttp_send_reply_end -> connection back to the pool.
 *   After a 101: splice the two sockets until either side closes.
 * Ownership: the exchange owns its upstream connection until it finishes or fails; evhttp owns the
 * client request, except after a client disconnect mid-reply, when evhttp hands it back to us
 * (see relay_client_closed). Each exchange holds its struct revproxy alive.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "shared/hash.h"
#include "shared/httputil.h"
#include "shared/macro.h"
#include "shared/revproxy_internal.h"
#include "shared/wire_error.h"

#define MAX_INTERIM 8 /* 1xx responses skipped before the final one */
#define PROBE_BODY_MAX (64 * 1024)
#define EXCHANGE_CACHE_MAX 32

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
	ex->hash = hash_fnv1a(key);
	ex->head = head;
	ex->chunk = chunk;
	return ex;
}

void exchange_free(struct exchange *ex)
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

void exchange_release_conn(struct exchange *ex)
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
static int exchange_connect(struct exchange *ex);

/* ---- failing and finishing ---- */

static int failure_errno(enum revproxy_failure why, int err)
{
	if (err)
		return err;
	return why == REVPROXY_TIMEOUT	      ? -ETIMEDOUT
	       : why == REVPROXY_CONNECT_FAILED ? -ECONNREFUSED
						: -EPROTO;
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
	relay_detach(ex);
	exchange_free(ex);
	if (started) {
		if (!broken_cb || !broken_cb(req, detail, broken_arg))
			relay_abort(evcon);
	} else if (fail_cb) {
		fail_cb(req, why, detail, fail_arg);
	} else {
		http_send_error(req, 502, WIRE_CODE(SANDBOX_BACKEND_UNREACHABLE), "%s", detail);
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
	relay_detach(ex);
	exchange_free(ex);
	evhttp_send_reply_end(req);
}

/* ---- sending the request ---- */

/* What the proxy forwards: every method but CONNECT (a tunnel to wherever the client names). */
static const char *method_name(enum evhttp_cmd_type cmd)
{
	return cmd == EVHTTP_REQ_CONNECT ? NULL : http_method_name(cmd);
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
	exchange_fail(ex, r == -EMFILE || r == -ENFILE ? REVPROXY_NO_FDS : REVPROXY_CONNECT_FAILED, r,
		      "connect to %s: %s", ex->rp->opts.peer_name,
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

/* ---- reading the response ---- */

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
			*ret_alive = relay_splice(ex, (size_t)r);
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
			relay_copy_headers(ex);
		snprintf(ex->reason, sizeof(ex->reason), "%.*s", (int)ex->resp.reason_len,
			 ex->resp.reason ? ex->resp.reason : "");
		ex->resp.reason = ex->reason;
		ex->resp.reason_len = strlen(ex->reason);
		evbuffer_drain(in, (size_t)r);
	}
	return true;
}

/* See revproxy_internal.h. */
bool exchange_process(struct exchange *ex)
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
			relay_whole(ex);
			return false;
		}
		relay_start(ex);
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
	exchange_process(arg);
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
		exchange_fail(ex,
			      r == -EMFILE || r == -ENFILE ? REVPROXY_NO_FDS : REVPROXY_CONNECT_FAILED,
			      r, "reconnect to %s: %s", ex->rp->opts.peer_name, strerror(-r));
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
	if (evbuffer_get_length(bufferevent_get_input(bev)) && !exchange_process(ex))
		return;
	if (!ex->resp.head_done && maybe_retry(ex))
		return;
	if (what & BEV_EVENT_EOF) {
		if (ex->resp.head_done && http_resp_eof(&ex->resp) == 0) {
			exchange_process(ex); /* a close-delimited body ends here */
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
			http_send_error(req, 502, WIRE_CODE(SANDBOX_BACKEND_UNREACHABLE), "%s", detail);
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
		http_conn_set_closecb(ex->evcon, relay_client_closed, ex);
		relay_watch(ex);
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
