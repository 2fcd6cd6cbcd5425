#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/keyvalq_struct.h>

#include "proxy.h"
#include "shared/httputil.h"
#include "shared/log.h"
#include "shared/wire_error.h"

static struct event_base *proxy_base;

void proxy_init(struct event_base *base)
{
	proxy_base = base;
}

struct relay {
	struct evhttp_request *req;  /* the client's; NULL once it is gone or answered */
	struct evhttp_connection *client;
	struct evhttp_request *oreq; /* ours, to the backend; NULL once done */
	struct evhttp_connection *backend;
	bool started; /* response headers sent to the client */
	bool paused;  /* backend reads stopped: the client is slow */
	int port;
};

static bool hop_by_hop(const char *h)
{
	static const char *const names[] = {"Connection", "Keep-Alive", "Proxy-Authenticate",
					    "Proxy-Authorization", "Proxy-Connection", "TE",
					    "Trailer", "Transfer-Encoding", "Upgrade"};
	for (size_t i = 0; i < ARRAY_SIZE(names); i++)
		if (strcasecmp(h, names[i]) == 0)
			return true;
	return false;
}

static void copy_headers(struct evkeyvalq *from, struct evkeyvalq *to, bool response)
{
	struct evkeyval *kv;
	TAILQ_FOREACH(kv, from, next) {
		if (hop_by_hop(kv->key))
			continue;
		/* evhttp computes these itself for what it sends. */
		if (response && (strcasecmp(kv->key, "Date") == 0))
			continue;
		evhttp_add_header(to, kv->key, kv->value);
	}
}

static void relay_free(struct relay *r)
{
	if (r->client)
		evhttp_connection_set_closecb(r->client, NULL, NULL);
	free(r);
}

/* The client went away: drop the backend request too. */
static void on_client_close(struct evhttp_connection *evcon, void *arg)
{
	struct relay *r = arg;
	r->client = NULL;
	if (r->req && !evhttp_request_get_connection(r->req))
		evhttp_send_reply_end(r->req); /* frees the detached request */
	r->req = NULL;
	if (r->oreq) {
		/* No callback follows, and the auto-free backend connection goes with it. */
		evhttp_cancel_request(r->oreq);
		r->oreq = NULL;
	}
	r->backend = NULL;
	relay_free(r);
}

static void resume_backend(struct evhttp_connection *evcon, void *arg)
{
	struct relay *r = arg;
	if (r->paused && r->backend) {
		r->paused = false;
		bufferevent_enable(evhttp_connection_get_bufferevent(r->backend), EV_READ);
	}
}

static int on_headers(struct evhttp_request *oreq, void *arg)
{
	struct relay *r = arg;
	if (!r->req)
		return -1;
	int code = evhttp_request_get_response_code(oreq);
	const char *reason = evhttp_request_get_response_code_line(oreq);
	copy_headers(evhttp_request_get_input_headers(oreq), evhttp_request_get_output_headers(r->req),
		     true);
	evhttp_send_reply_start(r->req, code, reason && *reason ? reason : http_reason(code));
	r->started = true;
	return 0;
}

static void on_chunk(struct evhttp_request *oreq, void *arg)
{
	struct relay *r = arg;
	if (!r->req || !r->started)
		return;
	evhttp_send_reply_chunk_with_cb(r->req, evhttp_request_get_input_buffer(oreq), resume_backend, r);
	struct bufferevent *cb = evhttp_connection_get_bufferevent(r->client);
	if (cb && evbuffer_get_length(bufferevent_get_output(cb)) > PROXY_MAX_QUEUED && r->backend) {
		r->paused = true;
		bufferevent_disable(evhttp_connection_get_bufferevent(r->backend), EV_READ);
	}
}

static void on_done(struct evhttp_request *oreq, void *arg)
{
	struct relay *r = arg;
	r->oreq = NULL; /* evhttp frees it after this callback */
	if (r->req) {
		if (r->started) {
			if (oreq && evbuffer_get_length(evhttp_request_get_input_buffer(oreq)))
				evhttp_send_reply_chunk(r->req, evhttp_request_get_input_buffer(oreq));
			evhttp_send_reply_end(r->req);
		} else {
			int err = oreq ? evhttp_request_get_response_code(oreq) : 0;
			log_debug("proxy to port %d: no response (%d)", r->port, err);
			struct evbuffer *b = evbuffer_new();
			if (b)
				evbuffer_add_printf(b, "Bad Gateway");
			evhttp_add_header(evhttp_request_get_output_headers(r->req), "Content-Type",
					  "text/plain; charset=utf-8");
			evhttp_send_reply(r->req, 502, "Bad Gateway", b);
			if (b)
				evbuffer_free(b);
		}
		r->req = NULL;
	}
	/* The backend connection is freed by evhttp once this request completes. */
	r->backend = NULL;
	relay_free(r);
}

/* ----- Connection: Upgrade (WebSocket): a raw byte splice once the backend is connected ----- */

struct splice {
	struct evhttp_request *req;
	struct evhttp_connection *client; /* evhttp's; its bufferevent is taken over */
	struct bufferevent *cbev;         /* the client's bufferevent (owned by evhttp) */
	struct bufferevent *bbev;         /* ours, to the backend */
	struct evbuffer *head;            /* the request to replay to the backend */
	bool spliced;
};

static void splice_close(struct splice *sp)
{
	if (sp->bbev)
		bufferevent_free(sp->bbev);
	if (sp->head)
		evbuffer_free(sp->head);
	if (sp->spliced) {
		/* Frees the client's bufferevent, fd and pending request too. */
		evhttp_connection_free(sp->client);
	} else {
		evhttp_connection_set_closecb(sp->client, NULL, NULL);
	}
	free(sp);
}

static void splice_client_read(struct bufferevent *bev, void *arg)
{
	struct splice *sp = arg;
	bufferevent_write_buffer(sp->bbev, bufferevent_get_input(bev));
}

static void splice_backend_read(struct bufferevent *bev, void *arg)
{
	struct splice *sp = arg;
	bufferevent_write_buffer(sp->cbev, bufferevent_get_input(bev));
}

static void splice_event(struct bufferevent *bev, short what, void *arg)
{
	struct splice *sp = arg;
	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT))
		splice_close(sp);
}

static void splice_client_gone(struct evhttp_connection *evcon, void *arg)
{
	struct splice *sp = arg;
	/* Still connecting to the backend: evhttp detached the request; free it and stop. */
	if (sp->req && !evhttp_request_get_connection(sp->req))
		evhttp_send_reply_end(sp->req);
	sp->req = NULL;
	sp->client = NULL;
	if (sp->bbev)
		bufferevent_free(sp->bbev);
	if (sp->head)
		evbuffer_free(sp->head);
	free(sp);
}

static void splice_backend_event(struct bufferevent *bev, short what, void *arg)
{
	struct splice *sp = arg;
	if (!(what & BEV_EVENT_CONNECTED)) {
		if (!sp->spliced) {
			evhttp_connection_set_closecb(sp->client, NULL, NULL);
			evhttp_send_reply(sp->req, 502, "Bad Gateway", NULL);
			sp->req = NULL;
			bufferevent_free(sp->bbev);
			sp->bbev = NULL;
			evbuffer_free(sp->head);
			free(sp);
			return;
		}
		splice_close(sp);
		return;
	}
	/* Connected: replay the request, then take the client's connection over from evhttp. */
	bufferevent_write_buffer(sp->bbev, sp->head);
	evbuffer_free(sp->head);
	sp->head = NULL;
	evhttp_connection_set_closecb(sp->client, NULL, NULL);
	sp->cbev = evhttp_connection_get_bufferevent(sp->client);
	sp->spliced = true;
	bufferevent_setcb(sp->cbev, splice_client_read, NULL, splice_event, sp);
	bufferevent_setcb(sp->bbev, splice_backend_read, NULL, splice_event, sp);
	bufferevent_set_timeouts(sp->cbev, NULL, NULL);
	bufferevent_enable(sp->cbev, EV_READ | EV_WRITE);
	bufferevent_enable(sp->bbev, EV_READ | EV_WRITE);
	/* Bytes the client sent right after its request (early frames). */
	if (evbuffer_get_length(bufferevent_get_input(sp->cbev)))
		bufferevent_write_buffer(sp->bbev, bufferevent_get_input(sp->cbev));
}

static bool wants_upgrade(struct evhttp_request *req)
{
	struct evkeyvalq *h = evhttp_request_get_input_headers(req);
	const char *up = evhttp_find_header(h, "Upgrade");
	const char *conn = evhttp_find_header(h, "Connection");
	return up && *up && conn && strcasestr(conn, "upgrade");
}

static void proxy_upgrade(struct evhttp_request *req, int port, const char *target)
{
	static const char *const methods[] = {"GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS",
					      "TRACE", "CONNECT", "PATCH"};
	enum evhttp_cmd_type m = evhttp_request_get_command(req);
	const char *method = "GET";
	for (unsigned i = 0; i < ARRAY_SIZE(methods); i++)
		if (m == (enum evhttp_cmd_type)(1 << i))
			method = methods[i];
	struct splice *sp = calloc(1, sizeof(*sp));
	if (!sp || !(sp->head = evbuffer_new()) ||
	    !(sp->bbev = bufferevent_socket_new(proxy_base, -1,
						BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS))) {
		if (sp && sp->head)
			evbuffer_free(sp->head);
		free(sp);
		http_send_error(req, 500, WIRE_CODE(RUNTIME_ERROR), "out of memory");
		return;
	}
	sp->req = req;
	sp->client = evhttp_request_get_connection(req);
	evbuffer_add_printf(sp->head, "%s %s HTTP/1.1\r\n", method, target);
	struct evkeyval *kv;
	TAILQ_FOREACH(kv, evhttp_request_get_input_headers(req), next)
		evbuffer_add_printf(sp->head, "%s: %s\r\n", kv->key, kv->value);
	if (!evhttp_find_header(evhttp_request_get_input_headers(req), "X-Forwarded-For"))
		evbuffer_add_printf(sp->head, "X-Forwarded-For: 127.0.0.1\r\n");
	evbuffer_add_printf(sp->head, "\r\n");
	evbuffer_add_buffer(sp->head, evhttp_request_get_input_buffer(req));
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	bufferevent_setcb(sp->bbev, NULL, NULL, splice_backend_event, sp);
	evhttp_connection_set_closecb(sp->client, splice_client_gone, sp);
	/* A refused connection is reported through splice_backend_event (deferred). */
	if (bufferevent_socket_connect(sp->bbev, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		evhttp_connection_set_closecb(sp->client, NULL, NULL);
		bufferevent_free(sp->bbev);
		evbuffer_free(sp->head);
		free(sp);
		evhttp_send_reply(req, 502, "Bad Gateway", NULL);
	}
}

bool proxy_dispatch(struct evhttp_request *req, const char *path)
{
	if (strncmp(path, "/proxy/", 7) != 0 && strcmp(path, "/proxy") != 0)
		return false;
	/* The raw URI, so the rest of the path and the query go out exactly as they came. */
	const char *uri = evhttp_request_get_uri(req);
	const char *p = uri + strspn(uri, "/");
	p += strcspn(p, "/?"); /* past "proxy" */
	if (*p != '/') {
		http_send_error(req, 400, WIRE_CODE(INVALID_REQUEST_BODY), "expected /proxy/{port}/...");
		return true;
	}
	p++;
	char *end;
	errno = 0;
	long port = strtol(p, &end, 10);
	if (end == p || errno || port < 1 || port > 65535 || (*end && *end != '/' && *end != '?')) {
		http_send_error(req, 400, WIRE_CODE(INVALID_REQUEST_BODY),
				"port in /proxy/{port}/ must be an integer from 1 to 65535");
		return true;
	}
	char target[8192];
	if ((size_t)snprintf(target, sizeof(target), "%s%s", *end == '/' ? "" : "/", end) >= sizeof(target)) {
		http_send_error(req, 414, WIRE_CODE(INVALID_REQUEST_BODY), "request URI too long");
		return true;
	}
	if (wants_upgrade(req)) {
		proxy_upgrade(req, (int)port, target);
		return true;
	}
	struct relay *r = calloc(1, sizeof(*r));
	if (!r) {
		http_send_error(req, 500, WIRE_CODE(RUNTIME_ERROR), "out of memory");
		return true;
	}
	r->req = req;
	r->port = (int)port;
	r->client = evhttp_request_get_connection(req);
	r->backend = evhttp_connection_base_new(proxy_base, NULL, "127.0.0.1", (unsigned short)port);
	r->oreq = evhttp_request_new(on_done, r);
	if (!r->backend || !r->oreq) {
		if (r->oreq)
			evhttp_request_free(r->oreq);
		if (r->backend)
			evhttp_connection_free(r->backend);
		free(r);
		http_send_error(req, 500, WIRE_CODE(RUNTIME_ERROR), "out of memory");
		return true;
	}
	evhttp_connection_set_timeout(r->backend, PROXY_TIMEOUT_S);
	evhttp_connection_set_retries(r->backend, 0);
	evhttp_connection_free_on_completion(r->backend);
	evhttp_request_set_header_cb(r->oreq, on_headers);
	evhttp_request_set_chunked_cb(r->oreq, on_chunk);

	struct evkeyvalq *in = evhttp_request_get_input_headers(req);
	struct evkeyvalq *out = evhttp_request_get_output_headers(r->oreq);
	copy_headers(in, out, false);
	if (!evhttp_find_header(out, "Host")) {
		char host[32];
		snprintf(host, sizeof(host), "127.0.0.1:%ld", port);
		evhttp_add_header(out, "Host", host);
	}
	if (!evhttp_find_header(out, "X-Forwarded-For"))
		evhttp_add_header(out, "X-Forwarded-For", "127.0.0.1");
	if (!evhttp_find_header(out, "X-Forwarded-Proto"))
		evhttp_add_header(out, "X-Forwarded-Proto", "http");
	evbuffer_add_buffer(evhttp_request_get_output_buffer(r->oreq), evhttp_request_get_input_buffer(req));

	evhttp_connection_set_closecb(r->client, on_client_close, r);
	if (evhttp_make_request(r->backend, r->oreq, evhttp_request_get_command(req), target) < 0) {
		/* evhttp freed oreq; answer like any unreachable backend. */
		r->oreq = NULL;
		evhttp_connection_set_closecb(r->client, NULL, NULL);
		evhttp_connection_free(r->backend);
		free(r);
		evhttp_send_reply(req, 502, "Bad Gateway", NULL);
	}
	return true;
}
