/*
 * The reverse proxy's downstream side (see revproxy_internal.h): the evhttp request an exchange
 * answers. Watching the client for a hang-up until the reply starts (evhttp does not read it
 * meanwhile), suspending and restoring its timeouts, relaying upstream's head and body to it with
 * backpressure, dropping it when a started reply breaks, and splicing it to upstream after a 101.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "shared/httputil.h"
#include "shared/libevent_private.h"
#include "shared/macro.h"
#include "shared/revproxy_internal.h"

/* ---- watching the client until the reply starts; its timeouts; dropping it ---- */

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
		bufferevent_peek_timeouts(cbev, &ex->client_read_tv, &ex->client_write_tv);
		ex->timeouts_changed = true;
	}
	bufferevent_set_timeouts(cbev,
				 read && timerisset(&ex->client_read_tv) ? &ex->client_read_tv : NULL,
				 write && timerisset(&ex->client_write_tv) ? &ex->client_write_tv
									   : NULL);
}

void relay_watch(struct exchange *ex)
{
	struct bufferevent *cbev = evhttp_connection_get_bufferevent(ex->evcon);
	bufferevent_setcb(cbev, NULL, NULL, watch_event_cb, ex);
	bufferevent_setwatermark(cbev, EV_READ, 0, CLIENT_EARLY_MAX);
	client_set_timeouts(ex, false, false); /* waiting on upstream is not the client's idleness */
	bufferevent_enable(cbev, EV_READ);
	ex->watching = true;
}

void relay_unwatch(struct exchange *ex)
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
void relay_detach(struct exchange *ex)
{
	if (!ex->evcon)
		return;
	relay_unwatch(ex);
	http_conn_set_closecb(ex->evcon, NULL, NULL);
	if (ex->timeouts_changed) {
		client_set_timeouts(ex, true, true);
		ex->timeouts_changed = false;
	}
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
void relay_abort(struct evhttp_connection *evcon)
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
	relay_detach(ex);
	exchange_free(ex); /* closes the upstream connection: its answer would have nowhere to go */
	evhttp_connection_free(evcon); /* frees the request */
}


/* ---- relaying the response ---- */

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
void relay_copy_headers(struct exchange *ex)
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

void relay_start(struct exchange *ex)
{
	char rbuf[256];
	relay_unwatch(ex);
	/*
	 * An HTTP/1.0 client cannot take chunks: without a length the body must end with the
	 * connection, but evhttp would answer "Connection: keep-alive" with "Content-Length: 0".
	 * Forgetting the client's keep-alive wish makes evhttp close instead.
	 */
	int major, minor;
	evhttp_peek_version(ex->req, &major, &minor);
	if (major == 1 && minor == 0 &&
	    !evhttp_find_header(evhttp_request_get_output_headers(ex->req), "Content-Length"))
		evhttp_remove_header(evhttp_request_get_input_headers(ex->req), "Connection");
	evhttp_send_reply_start(ex->req, ex->resp.status, reason_of(&ex->resp, rbuf, sizeof(rbuf)));
	ex->started = true;
	/* A client that only listens to a long stream must not hit the server's read timeout. */
	client_set_timeouts(ex, false, true);
}

/*
 * What a client's unsent output costs in memory: evbuffer chains hold more than their payload (a
 * 4 KiB read sits in an 8 KiB chain, and every relayed piece adds a chain for its chunk header),
 * so each chain counts a page besides its bytes. Counted by bytes alone, 4 MiB of a response a
 * client did not read held 11 MiB. Chains are walked only once the bytes alone are near the bound.
 */
static size_t queued_cost(struct evbuffer *out, size_t max)
{
	size_t len = evbuffer_get_length(out);
	if (len < max / 4)
		return len;
	int chains = evbuffer_peek(out, -1, NULL, NULL, 0);
	return len + (chains > 0 ? (size_t)chains * 4096 : 0);
}

/* Hand ex->chunk to the client; pause reading upstream when the client falls behind. */
void relay_chunk(struct exchange *ex)
{
	size_t n = evbuffer_get_length(ex->chunk);
	if (!n)
		return;
	struct bufferevent *cbev = evhttp_connection_get_bufferevent(ex->evcon);
	size_t max = ex->rp->opts.client_buffer_max;
	size_t queued = queued_cost(bufferevent_get_output(cbev), max);
	if (queued + n > max) {
		ex->paused = true;
		bufferevent_disable(ex->conn->bev, EV_READ);
		evhttp_send_reply_chunk_with_cb(ex->req, ex->chunk, client_drained, ex);
	} else {
		evhttp_send_reply_chunk(ex->req, ex->chunk);
	}
	/* evhttp ignores chunks for bodiless replies; never let them pile up here. */
	evbuffer_drain(ex->chunk, evbuffer_get_length(ex->chunk));
}


void relay_whole(struct exchange *ex)
{
	char rbuf[256];
	const char *reason = reason_of(&ex->resp, rbuf, sizeof(rbuf));
	struct evhttp_request *req = ex->req;
	exchange_release_conn(ex);
	relay_detach(ex);
	evhttp_send_reply(req, ex->resp.status, reason, ex->chunk);
	exchange_free(ex);
}

/* The client went away (or the server is being freed) while the exchange was running. */
void relay_client_closed(struct evhttp_connection *evcon, void *arg)
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

bool relay_splice(struct exchange *ex, size_t head_len)
{
	static char conn_buf[HTTP_RESP_MAX_HEAD + 1];
	struct bufferevent *up = ex->conn->bev;
	struct bufferevent *cb = evhttp_connection_get_bufferevent(ex->evcon);
	struct evbuffer *out = bufferevent_get_output(cb);
	const struct http_header *upg = http_resp_header(&ex->resp, "Upgrade");
	size_t conn_len;
	const char *conn = resp_connection(&ex->resp, conn_buf, sizeof(conn_buf), &conn_len);

	relay_unwatch(ex);
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

