/*
 * End to end, in one process: an evhttp "execd" on a unix socket in a temp dir, raw misbehaving
 * upstreams, and an evhttp front server on loopback whose handler calls upstream_proxy(). A client
 * thread speaks raw HTTP/1.1 to the front (blocking sockets, its own clocks) while the main thread
 * runs the event loop. Also prints the proxied round-trip latency (information, not an assertion).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/queue.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>

#include "shared/http_parse.h"
#include "corrald/upstream.h"
#include "shared/macro.h"
#include "check.h"

static struct event_base *base;
static char dir[128], sock_ok[256], sock_missing[256], sock_garbage[256], sock_cut[256],
	sock_ws[256], sock_silent[256], sock_oneshot[256], sock_hang[256],
	sock_whole[256];
static int front_port;
static atomic_int client_done;

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---------------- upstream "execd" (evhttp on a unix socket) ---------------- */

static _Atomic double stream_end_ms; /* when /stream sent its last chunk */
static atomic_int upstream_conns, upstream_conn_closes, bigstream_closed, bigstream_backlog;
static struct evhttp_connection *seen[64];

static void up_conn_closed(struct evhttp_connection *evcon, void *arg)
{
	for (size_t i = 0; i < ARRAY_SIZE(seen); i++)
		if (seen[i] == evcon)
			seen[i] = NULL;
	upstream_conn_closes++;
}

static void note_conn(struct evhttp_request *req)
{
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	for (size_t i = 0; i < ARRAY_SIZE(seen); i++)
		if (seen[i] == evcon)
			return;
	for (size_t i = 0; i < ARRAY_SIZE(seen); i++)
		if (!seen[i]) {
			seen[i] = evcon;
			break;
		}
	upstream_conns++;
	evhttp_connection_set_closecb(evcon, up_conn_closed, NULL);
}

struct streamer {
	struct evhttp_request *req;
	struct event *ev;
	int left;
	int interval_us;
	size_t piece;
	bool closed;
};

static void streamer_free(struct streamer *s)
{
	event_free(s->ev);
	free(s);
}

static void stream_tick(evutil_socket_t fd, short what, void *arg)
{
	struct streamer *s = arg;
	struct evbuffer *b = evbuffer_new();
	if (s->piece) {
		static char blob[256 * 1024];
		memset(blob, 'z', sizeof(blob));
		evbuffer_add(b, blob, MIN(s->piece, sizeof(blob)));
	} else {
		evbuffer_add_printf(b, "{\"type\":\"stdout\",\"text\":\"chunk %d\"}\n\n", 5 - s->left);
	}
	evhttp_send_reply_chunk(s->req, b);
	evbuffer_free(b);
	if (s->piece) {
		struct evhttp_connection *evcon = evhttp_request_get_connection(s->req);
		struct bufferevent *bev = evhttp_connection_get_bufferevent(evcon);
		bigstream_backlog = (int)evbuffer_get_length(bufferevent_get_output(bev));
		if (bigstream_backlog > 64 << 20) {
			/* enough: stop growing (the client is expected to hang up) */
			return;
		}
	}
	if (s->piece == 0 && --s->left == 0) {
		stream_end_ms = now_ms();
		evhttp_send_reply_end(s->req);
		streamer_free(s);
		return;
	}
	struct timeval tv = { s->interval_us / 1000000, s->interval_us % 1000000 };
	event_add(s->ev, &tv);
}

static void bigstream_closed_cb(struct evhttp_connection *evcon, void *arg)
{
	struct streamer *s = arg;
	bigstream_closed = 1;
	event_del(s->ev);
	/* evhttp detached the request from the dead connection; we must free it. */
	evhttp_send_reply_end(s->req);
	streamer_free(s);
}

static void up_handler(struct evhttp_request *req, void *arg)
{
	const char *uri = evhttp_request_get_uri(req);
	struct evbuffer *out = evhttp_request_get_output_buffer(req);
	struct evkeyvalq *oh = evhttp_request_get_output_headers(req);
	note_conn(req);

	if (!strcmp(uri, "/ping")) {
		evhttp_send_reply(req, 200, "OK", NULL);
	} else if (!strcmp(uri, "/stream") || !strcmp(uri, "/bigstream") ||
		   !strcmp(uri, "/slowstream")) {
		struct streamer *s = calloc(1, sizeof(*s));
		s->req = req;
		s->left = 5;
		s->piece = !strcmp(uri, "/bigstream") ? 256 * 1024 : 0;
		s->interval_us = s->piece ? 2000 : 80000;
		if (!strcmp(uri, "/slowstream")) {
			/* silent for longer than the front server's timeout */
			s->interval_us = 1300000;
			s->left = 2;
		}
		s->ev = evtimer_new(base, stream_tick, s);
		evhttp_add_header(oh, "Content-Type", "text/event-stream");
		evhttp_send_reply_start(req, 200, "OK");
		if (s->piece)
			evhttp_connection_set_closecb(evhttp_request_get_connection(req),
						      bigstream_closed_cb, s);
		struct timeval tv = { 0, 1000 };
		event_add(s->ev, &tv);
	} else if (!strcmp(uri, "/echo")) {
		evbuffer_add_buffer(out, evhttp_request_get_input_buffer(req));
		evhttp_add_header(oh, "X-Method",
				  evhttp_request_get_command(req) == EVHTTP_REQ_PUT ? "PUT" : "other");
		evhttp_send_reply(req, 200, "OK", out);
	} else if (!strncmp(uri, "/big?n=", 7)) {
		size_t n = strtoul(uri + 7, NULL, 10);
		char *blob = malloc(n);
		for (size_t i = 0; i < n; i++)
			blob[i] = (char)('a' + (i * 7 + i / 13) % 26);
		evbuffer_add(out, blob, n);
		free(blob);
		evhttp_send_reply(req, 200, "OK", out);
	} else if (!strncmp(uri, "/headers", 8)) {
		struct evkeyval *kv;
		TAILQ_FOREACH (kv, evhttp_request_get_input_headers(req), next)
			evbuffer_add_printf(out, "%s: %s\n", kv->key, kv->value);
		evhttp_add_header(oh, "X-Hop", "must-go");
		evhttp_add_header(oh, "Connection", "X-Hop");
		evhttp_add_header(oh, "Keep-Alive", "timeout=5");
		evhttp_add_header(oh, "X-Stays", "yes");
		evhttp_send_reply(req, 201, "Made It", out);
	} else {
		evhttp_send_reply(req, 404, "Not Found", NULL);
	}
}

static int unix_listen(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 64) < 0) {
		perror("unix listen");
		exit(2);
	}
	return fd;
}

/* ---------------- raw misbehaving upstreams ---------------- */

enum raw_mode { RAW_GARBAGE, RAW_CUT, RAW_WS, RAW_ONESHOT, RAW_HANG, RAW_WHOLE, RAW_COUNT };

static atomic_int hang_requests, hang_closed;

struct raw_conn {
	enum raw_mode mode;
	int requests;
	bool shook;
	struct bufferevent *bev;
	struct raw_conn *prev, *next; /* live connections, freed at the end if still open */
};
static struct raw_conn *raw_live;

static void raw_close(struct bufferevent *bev, struct raw_conn *rc)
{
	if (rc->prev)
		rc->prev->next = rc->next;
	else
		raw_live = rc->next;
	if (rc->next)
		rc->next->prev = rc->prev;
	bufferevent_free(bev);
	free(rc);
}

/* Upstream connections still open when the test ends (a client that gave up first). */
static void raw_close_all(void)
{
	while (raw_live)
		raw_close(raw_live->bev, raw_live);
}

static void raw_event(struct bufferevent *bev, short what, void *arg)
{
	struct raw_conn *rc = arg;
	if (rc->mode == RAW_HANG)
		hang_closed++;
	raw_close(bev, arg);
}

static void raw_write_then_close(struct bufferevent *bev, void *arg)
{
	if (evbuffer_get_length(bufferevent_get_output(bev)) == 0)
		raw_close(bev, arg);
}

static void raw_read(struct bufferevent *bev, void *arg)
{
	struct raw_conn *rc = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	struct evbuffer *out = bufferevent_get_output(bev);

	if (rc->mode == RAW_WS) {
		/* After the handshake: echo everything back, upper-cased. */
		if (!rc->shook) {
			struct evbuffer_ptr p = evbuffer_search(in, "\r\n\r\n", 4, NULL);
			if (p.pos < 0)
				return;
			evbuffer_drain(in, (size_t)p.pos + 4);
			rc->shook = true;
			evbuffer_add_printf(out, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
						 "Connection: Upgrade\r\nSec-WebSocket-Accept: xyz\r\n\r\n");
		}
		size_t n = evbuffer_get_length(in);
		char buf[4096];
		while (n) {
			size_t k = MIN(n, sizeof(buf));
			evbuffer_remove(in, buf, k);
			for (size_t i = 0; i < k; i++)
				if (buf[i] >= 'a' && buf[i] <= 'z')
					buf[i] -= 32;
			evbuffer_add(out, buf, k);
			n -= k;
		}
		return;
	}
	struct evbuffer_ptr p = evbuffer_search(in, "\r\n\r\n", 4, NULL);
	if (p.pos < 0)
		return;
	evbuffer_drain(in, (size_t)p.pos + 4); /* the tests send no bodies here */
	if (rc->mode == RAW_WHOLE) {
		/* A complete chunked answer in one write. */
		evbuffer_add_printf(out, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
					 "11\r\n{\"type\":\"init\"}\n\n\r\n0\r\n\r\n");
		return;
	}
	if (rc->mode == RAW_HANG) {
		hang_requests++; /* and never answer, like a long-poll that waits */
		return;
	}
	if (rc->mode == RAW_ONESHOT) {
		/* Answer the first request with keep-alive, then hang up on the next one unanswered,
		 * as an execd closing an idle connection just as a request arrives. */
		if (rc->requests++ == 0) {
			evbuffer_add_printf(out, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
			return;
		}
		raw_close(bev, rc);
		return;
	}
	evbuffer_drain(in, evbuffer_get_length(in));
	if (rc->mode == RAW_GARBAGE)
		evbuffer_add_printf(out, "SSH-2.0-OpenSSH_9.2\r\n");
	else
		evbuffer_add_printf(out, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
					 "5\r\nhello\r\n");
	bufferevent_setcb(bev, NULL, raw_write_then_close, raw_event, rc);
}

static void raw_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len,
		       void *arg)
{
	struct raw_conn *rc = calloc(1, sizeof(*rc));
	rc->mode = (enum raw_mode)(intptr_t)arg;
	struct bufferevent *bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
	rc->bev = bev;
	rc->next = raw_live;
	if (raw_live)
		raw_live->prev = rc;
	raw_live = rc;
	bufferevent_setcb(bev, raw_read, NULL, raw_event, rc);
	bufferevent_enable(bev, EV_READ | EV_WRITE);
}

/* ---------------- the front server ---------------- */

static atomic_int fail_calls;
static enum revproxy_failure fail_why;
static char fail_detail[512];

static void on_fail(struct evhttp_request *req, enum revproxy_failure why, const char *detail,
		    void *arg)
{
	fail_calls++;
	fail_why = why;
	snprintf(fail_detail, sizeof(fail_detail), "%s", detail);
	struct evbuffer *b = evbuffer_new();
	evbuffer_add_printf(b, "custom failure");
	evhttp_send_reply(req, 410, "Gone", b);
	evbuffer_free(b);
}

static void front_handler(struct evhttp_request *req, void *arg)
{
	const char *uri = evhttp_request_get_uri(req);
	/* /<socket>/<rest>: pick the upstream by the first segment. */
	const char *rest = strchr(uri + 1, '/');
	if (!rest)
		rest = "/";
	size_t seglen = (size_t)(rest - uri - 1);
	const char *sock = sock_ok;
	upstream_fail_cb fcb = NULL;
	if (!strncmp(uri + 1, "missing", seglen))
		sock = sock_missing, fcb = on_fail;
	else if (!strncmp(uri + 1, "missing502", seglen))
		sock = sock_missing;
	else if (!strncmp(uri + 1, "garbage", seglen))
		sock = sock_garbage;
	else if (!strncmp(uri + 1, "cut", seglen))
		sock = sock_cut;
	else if (!strncmp(uri + 1, "ws", seglen))
		sock = sock_ws;
	else if (!strncmp(uri + 1, "oneshot", seglen))
		sock = sock_oneshot;
	else if (!strncmp(uri + 1, "hang", seglen))
		sock = sock_hang;
	else if (!strncmp(uri + 1, "whole", seglen))
		sock = sock_whole;
	upstream_proxy(base, sock, 0, req, rest, fcb, NULL);
}

/* ---------------- the client (its own thread, blocking I/O) ---------------- */

static int front_connect(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)front_port) };
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		perror("connect front");
		exit(2);
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	struct timeval tv = { 10, 0 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

static void send_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n <= 0) {
			perror("send");
			return;
		}
		p += n;
		len -= (size_t)n;
	}
}

struct response {
	int status;
	bool complete; /* the message ended properly (not by a dropped connection) */
	bool eof;
	char head[8192];
	char *body;
	size_t body_len;
	double first_payload_ms;
	char *extra; /* bytes after the message (upgrade) */
	size_t extra_len;
};

static void response_clear(struct response *r)
{
	free(r->body);
	free(r->extra);
	memset(r, 0, sizeof(*r));
}

/* Read one response (with our own parser, itself tested separately). stop_after > 0: return
 * once that many payload bytes arrived. */
static void read_response(int fd, bool head, size_t stop_after, struct response *r)
{
	static struct http_resp p;
	size_t cap = 1 << 16, len = 0, start = 0, body_cap = 1 << 16;
	char *buf = malloc(cap);
	memset(r, 0, sizeof(*r));
	r->body = malloc(body_cap);
	http_resp_init(&p, head);
	for (;;) {
		/* consume */
		for (;;) {
			size_t avail = len - start;
			if (!p.head_done) {
				ssize_t n = http_resp_parse_head(&p, buf + start, avail, NULL);
				if (n <= 0) {
					if (n < 0)
						r->status = -1;
					break;
				}
				snprintf(r->head, sizeof(r->head), "%.*s", (int)n, buf + start);
				r->status = p.status;
				start += (size_t)n;
				continue;
			}
			if (http_resp_done(&p))
				break;
			uint64_t pend = http_resp_payload_pending(&p);
			if (pend) {
				size_t take = pend < avail ? (size_t)pend : avail;
				if (!take)
					break;
				if (!r->body_len)
					r->first_payload_ms = now_ms();
				while (r->body_len + take > body_cap)
					r->body = realloc(r->body, body_cap *= 2);
				memcpy(r->body + r->body_len, buf + start, take);
				r->body_len += take;
				start += take;
				http_resp_payload_consumed(&p, take);
				continue;
			}
			if (!avail)
				break;
			ssize_t n = http_resp_parse_framing(&p, buf + start, avail, NULL);
			if (n < 0) {
				r->status = -2;
				break;
			}
			if (n == 0)
				break;
			start += (size_t)n;
		}
		if (r->status < 0 || (p.head_done && http_resp_done(&p)))
			break;
		if (stop_after && r->body_len >= stop_after)
			break;
		if (start > 0 && start == len)
			start = len = 0;
		if (len == cap)
			buf = realloc(buf, cap *= 2);
		ssize_t n = recv(fd, buf + len, cap - len, 0);
		if (n <= 0) {
			r->eof = true;
			if (p.head_done && http_resp_eof(&p) == 0 && p.body == HTTP_BODY_CLOSE)
				break;
			break;
		}
		len += (size_t)n;
	}
	r->complete = p.head_done && http_resp_done(&p) && r->status > 0;
	r->extra_len = len - start;
	r->extra = malloc(r->extra_len + 1);
	memcpy(r->extra, buf + start, r->extra_len);
	r->extra[r->extra_len] = 0;
	free(buf);
}

static void request(int fd, const char *method, const char *path, const char *extra_headers,
		    const void *body, size_t body_len, struct response *r)
{
	char head[4096];
	int n = snprintf(head, sizeof(head), "%s %s HTTP/1.1\r\nHost: front.example:1234\r\n%s",
			 method, path, extra_headers ? extra_headers : "");
	if (body)
		n += snprintf(head + n, sizeof(head) - (size_t)n, "Content-Length: %zu\r\n",
			      body_len);
	n += snprintf(head + n, sizeof(head) - (size_t)n, "\r\n");
	send_all(fd, head, (size_t)n);
	if (body)
		send_all(fd, body, body_len);
	read_response(fd, !strcmp(method, "HEAD"), 0, r);
}

static bool head_has(const struct response *r, const char *needle)
{
	return strcasestr(r->head, needle) != NULL;
}

static bool body_has(const struct response *r, const char *needle)
{
	return r->body && memmem(r->body, r->body_len, needle, strlen(needle)) != NULL;
}

static void wait_for(atomic_int *flag, int ms)
{
	for (int i = 0; i < ms && !*flag; i++)
		usleep(1000);
}

static void test_streaming(void)
{
	static struct response r;
	int fd = front_connect();
	double t0 = now_ms();
	stream_end_ms = 0;
	request(fd, "GET", "/ok/stream", NULL, NULL, 0, &r);
	CHECK_INT(r.status, 200);
	CHECK(r.complete);
	CHECK(head_has(&r, "Transfer-Encoding: chunked"));
	CHECK(head_has(&r, "Content-Type: text/event-stream"));
	CHECK(body_has(&r, "\"chunk 0\"}\n\n"));
	CHECK(body_has(&r, "\"chunk 4\"}\n\n"));
	/* The first event reached us well before the upstream sent its last one (~320 ms later). */
	CHECK(stream_end_ms > 0);
	CHECK(r.first_payload_ms < stream_end_ms - 150);
	printf("stream: first event after %.1f ms, upstream finished after %.1f ms\n",
	       r.first_payload_ms - t0, stream_end_ms - t0);
	response_clear(&r);

	/* Silences longer than the front server's 1 s timeout, with a client that only listens. */
	request(fd, "GET", "/ok/slowstream", NULL, NULL, 0, &r);
	CHECK_INT(r.status, 200);
	CHECK(r.complete);
	CHECK(body_has(&r, "\"chunk 4\"}"));
	response_clear(&r);
	/* The connection is still good afterwards (and its timeout restored, see below). */
	request(fd, "GET", "/ok/ping", NULL, NULL, 0, &r);
	CHECK_INT(r.status, 200);
	response_clear(&r);
	close(fd);

	/* An HTTP/1.0 keep-alive client gets a body delimited by the connection's end. */
	fd = front_connect();
	const char *req10 = "GET /ok/stream HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";
	send_all(fd, req10, strlen(req10));
	read_response(fd, false, 0, &r);
	CHECK_INT(r.status, 200);
	CHECK(r.complete);
	CHECK(r.eof);
	CHECK(!head_has(&r, "Content-Length"));
	CHECK(!head_has(&r, "chunked"));
	CHECK(body_has(&r, "\"chunk 0\"}\n\n"));
	CHECK(body_has(&r, "\"chunk 4\"}\n\n"));
	response_clear(&r);
	close(fd);

	/* After a stream the server's idle timeout applies again: an idle client is closed. */
	fd = front_connect();
	request(fd, "GET", "/ok/stream", NULL, NULL, 0, &r);
	CHECK(r.complete);
	response_clear(&r);
	double t1 = now_ms();
	char c;
	ssize_t n = recv(fd, &c, 1, 0);
	CHECK_INT(n, 0);
	CHECK(now_ms() - t1 < 3000);
	close(fd);
}

static void test_framing_kept(void)
{
	static struct response r;
	int fd = front_connect();
	/* Chunked stays chunked even when it arrives whole (Python's http.client needs it). */
	request(fd, "GET", "/whole/x", NULL, NULL, 0, &r);
	CHECK_INT(r.status, 200);
	CHECK(r.complete);
	CHECK(head_has(&r, "Transfer-Encoding: chunked"));
	CHECK(body_has(&r, "{\"type\":\"init\"}\n\n"));
	response_clear(&r);
	/* Content-Length stays Content-Length. */
	request(fd, "GET", "/ok/big?n=10", NULL, NULL, 0, &r);
	CHECK(r.complete);
	CHECK(head_has(&r, "Content-Length: 10"));
	CHECK(!head_has(&r, "chunked"));
	response_clear(&r);
	close(fd);
}

static void test_big_bodies(void)
{
	static struct response r;
	int fd = front_connect();
	size_t n = 6u << 20;
	char *blob = malloc(n);
	for (size_t i = 0; i < n; i++)
		blob[i] = (char)(i * 131 + (i >> 12));

	/* Upload several MiB; the upstream echoes them back (Content-Length both ways). */
	request(fd, "PUT", "/ok/echo", NULL, blob, n, &r);
	CHECK_INT(r.status, 200);
	CHECK(r.complete);
	CHECK_U64(r.body_len, n);
	CHECK(r.body_len == n && memcmp(r.body, blob, n) == 0);
	CHECK(head_has(&r, "X-Method: PUT"));
	response_clear(&r);

	/* Download several MiB on the same client connection. */
	size_t m = 5u << 20;
	char path[64];
	snprintf(path, sizeof(path), "/ok/big?n=%zu", m);
	request(fd, "GET", path, NULL, NULL, 0, &r);
	CHECK_INT(r.status, 200);
	CHECK(r.complete);
	CHECK_U64(r.body_len, m);
	bool same = r.body_len == m;
	for (size_t i = 0; same && i < m; i++)
		same = r.body[i] == (char)('a' + (i * 7 + i / 13) % 26);
	CHECK(same);

	/* Same through HEAD: the length is passed on, no body follows. */
	response_clear(&r);
	request(fd, "HEAD", path, NULL, NULL, 0, &r);
	CHECK_INT(r.status, 200);
	CHECK(r.complete);
	CHECK_U64(r.body_len, 0);

	/* An empty POST still works and the connection stays usable. */
	response_clear(&r);
	request(fd, "POST", "/ok/echo", NULL, "", 0, &r);
	CHECK_INT(r.status, 200);
	CHECK(r.complete);
	CHECK_U64(r.body_len, 0);
	response_clear(&r);
	free(blob);
	close(fd);
}

static void test_headers(void)
{
	static struct response r;
	int fd = front_connect();
	request(fd, "GET", "/ok/headers?x=1",
		"Authorization: Bearer secret\r\nCookie: a=b\r\nOPEN-SANDBOX-API-KEY: k\r\n"
		"Connection: X-Drop-Me\r\nX-Drop-Me: 1\r\nKeep-Alive: 300\r\nProxy-Authorization: p\r\n"
		"TE: trailers\r\nX-Keep: kept\r\n",
		NULL, 0, &r);
	CHECK_INT(r.status, 201);
	CHECK(head_has(&r, "201 Made It"));
	CHECK(body_has(&r, "Host: localhost\n"));
	CHECK(body_has(&r, "X-Keep: kept\n"));
	CHECK(body_has(&r, "X-Forwarded-For: 127.0.0.1\n"));
	CHECK(body_has(&r, "X-Forwarded-Proto: http\n"));
	CHECK(body_has(&r, "X-Forwarded-Host: front.example:1234\n"));
	CHECK(!body_has(&r, "secret"));
	CHECK(!body_has(&r, "Cookie"));
	CHECK(!body_has(&r, "OPEN-SANDBOX-API-KEY"));
	CHECK(!body_has(&r, "X-Drop-Me"));
	CHECK(!body_has(&r, "Keep-Alive"));
	CHECK(!body_has(&r, "Proxy-"));
	CHECK(!body_has(&r, "TE:"));
	CHECK(!body_has(&r, "front.example:1234\nHost"));
	/* Response side: hop-by-hop and Connection-named headers stripped, others kept. */
	CHECK(head_has(&r, "X-Stays: yes"));
	CHECK(!head_has(&r, "X-Hop"));
	CHECK(!head_has(&r, "Keep-Alive"));
	response_clear(&r);

	/*
	 * Attack: a client forges X-Forwarded-* (and Forwarded) so the sandbox's server takes 10.1.2.3
	 * for an address corrald vouched for. corrald replaces them with what it saw.
	 */
	request(fd, "GET", "/ok/headers",
		"X-Forwarded-For: 10.1.2.3\r\nX-Forwarded-Host: evil.example\r\n"
		"X-Forwarded-Proto: https\r\nForwarded: for=10.1.2.3\r\n",
		NULL, 0, &r);
	CHECK_INT(r.status, 201);
	CHECK(!body_has(&r, "10.1.2.3"));
	CHECK(!body_has(&r, "evil.example"));
	CHECK(!body_has(&r, "https"));
	CHECK(!body_has(&r, "Forwarded: "));
	CHECK(body_has(&r, "X-Forwarded-For: 127.0.0.1\n"));
	CHECK(body_has(&r, "X-Forwarded-Proto: http\n"));
	CHECK(body_has(&r, "X-Forwarded-Host: front.example:1234\n"));
	response_clear(&r);
	close(fd);
}

static void test_pool(void)
{
	static struct response r;
	int before = upstream_conns;
	int fd = front_connect();
	for (int i = 0; i < 20; i++) {
		request(fd, "GET", "/ok/ping", NULL, NULL, 0, &r);
		CHECK_INT(r.status, 200);
		response_clear(&r);
	}
	/* Sequential requests reuse one pooled execd connection. */
	CHECK(upstream_conns - before <= 1);
	CHECK(upstream_pool_idle() >= 1);
	close(fd);
}

static void test_stale_pooled(void)
{
	static struct response r;
	int fd = front_connect();
	/* The first answer leaves a pooled connection that execd will hang up on. */
	request(fd, "GET", "/oneshot/a", NULL, NULL, 0, &r);
	CHECK_INT(r.status, 200);
	response_clear(&r);
	/* Idempotent and bodiless: resent once on a fresh connection, the client never knows. */
	request(fd, "GET", "/oneshot/b", NULL, NULL, 0, &r);
	CHECK_INT(r.status, 200);
	CHECK(body_has(&r, "ok"));
	response_clear(&r);
	/* A POST is never resent (it might run a command twice): a clear 502 instead. */
	request(fd, "POST", "/oneshot/c", NULL, "", 0, &r);
	CHECK_INT(r.status, 502);
	CHECK(body_has(&r, "closed the connection without answering"));
	response_clear(&r);
	close(fd);
}

static void test_disconnect(void)
{
	static struct response r;
	int fd = front_connect();
	bigstream_closed = 0;
	bigstream_backlog = 0;
	const char *req = "GET /ok/bigstream HTTP/1.1\r\nHost: x\r\n\r\n";
	send_all(fd, req, strlen(req));
	/* Do not read for a while: the proxy must stop reading execd (over 100 MiB/s) rather than
	 * buffer for the client, so the unsent bytes pile up on the upstream side. */
	usleep(1000 * 1000);
	CHECK(bigstream_backlog > 8 << 20);
	printf("backpressure: %d MiB held back at the upstream after 1 s\n", bigstream_backlog >> 20);
	/* Read some of the endless stream, intact, then hang up. */
	read_response(fd, false, 12 << 20, &r);
	CHECK_INT(r.status, 200);
	CHECK(r.body_len >= 12 << 20);
	bool all_z = true;
	for (size_t i = 0; i < r.body_len && all_z; i++)
		all_z = r.body[i] == 'z';
	CHECK(all_z);
	response_clear(&r);
	close(fd);
	/* The proxy must close its execd connection, which the upstream sees. */
	wait_for(&bigstream_closed, 3000);
	CHECK(bigstream_closed);
}

static void test_early_hangup(void)
{
	int fd = front_connect();
	const char *req = "GET /hang/command/status/x?wait=60 HTTP/1.1\r\nHost: x\r\n\r\n";
	hang_requests = hang_closed = 0;
	send_all(fd, req, strlen(req));
	wait_for(&hang_requests, 3000);
	CHECK_INT(hang_requests, 1);
	/* Longer than the front's 1 s timeout: waiting on execd is not the client idling. */
	usleep(1300 * 1000);
	CHECK_INT(hang_closed, 0);
	/* The client gives up before any answer: the proxy lets go of execd too. */
	close(fd);
	wait_for(&hang_closed, 3000);
	CHECK_INT(hang_closed, 1);
}

static void test_failures(void)
{
	static struct response r;
	int fd = front_connect();

	request(fd, "GET", "/missing/ping", NULL, NULL, 0, &r);
	CHECK_INT(r.status, 410);
	CHECK(body_has(&r, "custom failure"));
	CHECK_INT(fail_calls, 1);
	CHECK_INT(fail_why, REVPROXY_CONNECT_FAILED);
	CHECK(strstr(fail_detail, sock_missing) == NULL); /* no host path reaches a client */
	CHECK(strstr(fail_detail, "No such file or directory") != NULL);
	response_clear(&r);

	request(fd, "GET", "/missing502/ping", NULL, NULL, 0, &r);
	CHECK_INT(r.status, 502);
	CHECK(body_has(&r, "\"code\":\"SANDBOX::BACKEND_UNREACHABLE\""));
	CHECK(!body_has(&r, "missing.sock"));
	response_clear(&r);

	/* Garbage from the upstream: a clear 502, the client connection stays usable. */
	request(fd, "GET", "/garbage/x", NULL, NULL, 0, &r);
	CHECK_INT(r.status, 502);
	CHECK(body_has(&r, "invalid response"));
	response_clear(&r);
	request(fd, "GET", "/ok/ping", NULL, NULL, 0, &r);
	CHECK_INT(r.status, 200);
	response_clear(&r);
	close(fd);

	/* Upstream dies mid-body: the client sees the connection drop, never a clean end. */
	fd = front_connect();
	request(fd, "GET", "/cut/x", NULL, NULL, 0, &r);
	CHECK_INT(r.status, 200);
	CHECK(body_has(&r, "hello"));
	CHECK(!r.complete);
	CHECK(r.eof);
	response_clear(&r);
	close(fd);
}

static void test_websocket(void)
{
	static struct response r;
	int fd = front_connect();
	const char *req = "GET /ws/pty/abc/ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
			  "Upgrade: websocket\r\nSec-WebSocket-Key: abc\r\nSec-WebSocket-Version: 13\r\n\r\n";
	send_all(fd, req, strlen(req));
	read_response(fd, false, 0, &r);
	CHECK_INT(r.status, 101);
	CHECK(head_has(&r, "Upgrade: websocket"));
	CHECK(head_has(&r, "Sec-WebSocket-Accept: xyz"));
	response_clear(&r);
	send_all(fd, "hello splice", 12);
	char buf[64] = { 0 };
	size_t got = 0;
	while (got < 12) {
		ssize_t n = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	CHECK_STR(buf, "HELLO SPLICE");
	close(fd);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int execd_connect(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock_ok);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		perror("connect execd");
		exit(2);
	}
	return fd;
}

static double p50_round_trip(int fd, const char *path, double *p99)
{
	static struct response r;
	enum { N = 2000 };
	static double t[N];
	for (int i = 0; i < N; i++) {
		double t0 = now_ms();
		request(fd, "POST", path, NULL, "{\"command\":\"true\"}", 18, &r);
		t[i] = now_ms() - t0;
		if (r.status != 200)
			CHECK_INT(r.status, 200);
		response_clear(&r);
	}
	qsort(t, N, sizeof(t[0]), cmp_double);
	*p99 = t[N * 99 / 100];
	return t[N / 2];
}

/* Information only (never a pass/fail timing): the proxy's share of a small round trip. */
static void measure_latency(void)
{
	double p99_direct, p99_proxied;
	int fd = execd_connect();
	double direct = p50_round_trip(fd, "/echo", &p99_direct);
	close(fd);
	fd = front_connect();
	double proxied = p50_round_trip(fd, "/ok/echo", &p99_proxied);
	close(fd);
	printf("round trip, 2000 small POSTs on keep-alive: direct to the execd socket p50 %.3f ms "
	       "(p99 %.3f); through front + upstream_proxy p50 %.3f ms (p99 %.3f); proxy adds "
	       "%.3f ms at p50\n",
	       direct, p99_direct, proxied, p99_proxied, proxied - direct);
}

static void *client_main(void *arg)
{
	test_streaming();
	test_framing_kept();
	test_big_bodies();
	test_headers();
	test_pool();
	test_stale_pooled();
	test_disconnect();
	test_early_hangup();
	test_failures();
	test_websocket();
	measure_latency();
	client_done = 1;
	return NULL;
}

/* ---------------- pings (on the loop thread, before the client starts) ---------------- */

static int ping_results[6];
static int pings_done;

static void ping_cb(int result, void *arg)
{
	ping_results[(intptr_t)arg] = result;
	pings_done++;
}

static void poll_done(evutil_socket_t fd, short what, void *arg)
{
	if (client_done)
		event_base_loopbreak(base);
}

int main(void)
{
	snprintf(dir, sizeof(dir), "/tmp/test_upstream.XXXXXX");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 2;
	}
	snprintf(sock_ok, sizeof(sock_ok), "%s/execd.sock", dir);
	snprintf(sock_missing, sizeof(sock_missing), "%s/missing.sock", dir);
	snprintf(sock_garbage, sizeof(sock_garbage), "%s/garbage.sock", dir);
	snprintf(sock_cut, sizeof(sock_cut), "%s/cut.sock", dir);
	snprintf(sock_ws, sizeof(sock_ws), "%s/ws.sock", dir);
	snprintf(sock_silent, sizeof(sock_silent), "%s/silent.sock", dir);
	snprintf(sock_oneshot, sizeof(sock_oneshot), "%s/oneshot.sock", dir);
	snprintf(sock_hang, sizeof(sock_hang), "%s/hang.sock", dir);
	snprintf(sock_whole, sizeof(sock_whole), "%s/whole.sock", dir);

	signal(SIGPIPE, SIG_IGN); /* as in corrald: peers hang up mid-write */
	base = event_base_new();
	struct evhttp *up = evhttp_new(base);
	evhttp_set_gencb(up, up_handler, NULL);
	evhttp_set_allowed_methods(up, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
					       EVHTTP_REQ_HEAD | EVHTTP_REQ_DELETE);
	evhttp_accept_socket(up, unix_listen(sock_ok));

	struct evconnlistener *raw[RAW_COUNT];
	const char *raw_paths[] = { sock_garbage, sock_cut, sock_ws, sock_oneshot, sock_hang,
				    sock_whole };
	for (int i = 0; i < RAW_COUNT; i++)
		raw[i] = evconnlistener_new(base, raw_accept, (void *)(intptr_t)i,
					    LEV_OPT_CLOSE_ON_FREE, -1, unix_listen(raw_paths[i]));
	int silent = unix_listen(sock_silent); /* accepts nothing, answers nothing */

	struct evhttp *front = evhttp_new(base);
	evhttp_set_gencb(front, front_handler, NULL);
	evhttp_set_allowed_methods(front, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
						  EVHTTP_REQ_HEAD | EVHTTP_REQ_DELETE);
	evhttp_set_timeout(front, 1); /* streams outlive it: the proxy suspends the read timeout */
	struct evhttp_bound_socket *bs = evhttp_bind_socket_with_handle(front, "127.0.0.1", 0);
	struct sockaddr_in sa;
	socklen_t slen = sizeof(sa);
	getsockname(evhttp_bound_socket_get_fd(bs), (struct sockaddr *)&sa, &slen);
	front_port = ntohs(sa.sin_port);

	/* Pings: a live execd, a missing socket, a socket that never answers. */
	CHECK_INT(upstream_ping(base, sock_ok, 0, 1000, ping_cb, (void *)0), 0);
	CHECK_INT(upstream_ping(base, sock_missing, 0, 1000, ping_cb, (void *)1), 0);
	CHECK_INT(upstream_ping(base, sock_silent, 0, 200, ping_cb, (void *)2), 0);
	/* The listener's process is checked (SO_PEERCRED): this one serves sock_ok. */
	CHECK_INT(upstream_ping(base, sock_ok, getpid(), 1000, ping_cb, (void *)3), 0);
	CHECK_INT(upstream_ping(base, sock_ok, getpid() + 1, 1000, ping_cb, (void *)4), 0);
	CHECK_INT(pings_done, 0); /* never before returning */
	double t0 = now_ms();
	while (pings_done < 5 && now_ms() - t0 < 3000)
		event_base_loop(base, EVLOOP_ONCE);
	CHECK_INT(pings_done, 5);
	CHECK_INT(ping_results[0], 0);
	CHECK_INT(ping_results[1], -ENOENT);
	CHECK_INT(ping_results[2], -ETIMEDOUT);
	CHECK_INT(ping_results[3], 0);
	CHECK_INT(ping_results[4], -EPERM);

	/*
	 * Attack: a connection checked against one PID 1 sits in the pool; a request that expects
	 * another process at the same path must not be handed it. It connects anew and is refused.
	 */
	CHECK(upstream_pool_idle() >= 1);
	CHECK_INT(upstream_ping(base, sock_ok, getpid() + 1, 1000, ping_cb, (void *)5), 0);
	t0 = now_ms();
	while (pings_done < 6 && now_ms() - t0 < 3000)
		event_base_loop(base, EVLOOP_ONCE);
	CHECK_INT(pings_done, 6);
	CHECK_INT(ping_results[5], -EPERM);

	pthread_t th;
	pthread_create(&th, NULL, client_main, NULL);
	struct event *poll_ev = event_new(base, -1, EV_PERSIST, poll_done, NULL);
	struct timeval tick = { 0, 5000 };
	event_add(poll_ev, &tick);
	event_base_dispatch(base);
	pthread_join(th, NULL);

	event_free(poll_ev);
	upstream_shutdown();
	CHECK_INT(upstream_pool_idle(), 0);
	evhttp_free(front);
	evhttp_free(up);
	for (int i = 0; i < RAW_COUNT; i++)
		evconnlistener_free(raw[i]);
	raw_close_all();
	close(silent);
	event_base_free(base);
	const char *paths[] = { sock_ok, sock_garbage, sock_cut, sock_ws, sock_silent, sock_oneshot,
				sock_hang, sock_whole };
	for (size_t i = 0; i < ARRAY_SIZE(paths); i++)
		unlink(paths[i]);
	rmdir(dir);
	return check_summary("upstream_proxy");
}
