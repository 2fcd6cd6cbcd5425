/*
 * corrald's HTTP front: connection cap, header deadline, accept backoff, and judging each request
 * on its head before its body is read. See front.h for the contract.
 *
 * How it hooks into evhttp 2.1, which has no "new request" callback:
 *  - evhttp_set_bevcb: every accepted connection gets its bufferevent from us. That is where a
 *    connection is counted and its record (struct hconn) made.
 *  - The record attaches to evhttp's connection in the same turn of the loop, before any byte is
 *    read (on_attach): it takes the connection's close callback (chaining other users through
 *    http_conn_set_closecb) and installs a header callback and a completion callback on the
 *    connection's request.
 *  - When a reply completes, evhttp makes the connection's next request, again before reading
 *    on: the completion callback schedules hook_request() for it, which runs ahead of evhttp's own
 *    deferred read of any pipelined bytes.
 *  - An evbuffer callback on the connection's input sees the first byte of each request head and
 *    arms the header deadline (a new connection's first one is armed at the attach); the header
 *    callback disarms it.
 * After a burst (connections or bodies gone) malloc_trim() hands the freed memory back.
 */
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>

#include "corrald/front.h"
#include "shared/httputil.h"
#include "shared/libevent_private.h"
#include "shared/log.h"
#include "shared/macro.h"
#include "shared/timeutil.h"
#include "shared/wire_error.h"

#define BACKOFF_MIN_MS 10
#define BACKOFF_MAX_MS 1000
#define LOG_EVERY_MS 10000
#define TRIM_DELAY_MS 1000
#define TRIM_AFTER_BYTES (16ULL << 20) /* of bodies released, or... */
#define TRIM_AFTER_CONNECTIONS 64      /* ...a burst of connections gone by half */
/*
 * A chunked body's next chunk sits whole in the connection's input before evhttp hands it over,
 * so room for it is reserved ahead: a chunk larger than this is refused (413).
 */
#define CHUNK_ALLOWANCE (16ULL << 20)

struct hconn {
	struct evhttp_connection *evcon; /* NULL until attached */
	struct bufferevent *bev;
	struct evbuffer_cb_entry *input_cb;
	TAILQ_ENTRY(hconn) pending; /* waiting for on_attach */
	bool is_pending;

	struct event deadline; /* the head of the current request must be complete by then */
	bool deadline_armed;
	struct event next_ev; /* hook the connection's next request */

	struct evhttp_request *hooked; /* the request our callbacks are on */
	bool head_done;

	/* the current request */
	int refuse_status; /* 0: not refused */
	const char *refuse_code;
	char refuse_msg[FRONT_MESSAGE_MAX];
	uint64_t reserved;     /* bytes of the body budget it holds */
	struct evbuffer *body; /* its chunked body, accounted, until dispatch */
	uint64_t body_max;     /* its route's cap */
	uint64_t allowance;    /* chunked: reserved room for the next chunk */

	http_closecb_fn user_closecb;
	void *user_closecb_arg;
};

/* A log line at most every LOG_EVERY_MS; the ones left out are counted in the next. */
struct ratelimit {
	int64_t last_ms;
	uint64_t suppressed;
};

static struct {
	struct event_base *base;
	struct evhttp *http;
	struct front_options opts;
	const struct timeval *head_tv; /* header_timeout_s as one of the loop's common timeouts */
	front_head_fn judge;
	void *judge_arg;
	void (*evhttp_readcb)(struct bufferevent *, void *);

	struct evconnlistener *lev;
	bool accepting;
	bool backing_off;
	int backoff_ms;
	int64_t last_accept_error_ms;
	struct event backoff_ev;
	struct event attach_ev;
	TAILQ_HEAD(, hconn) pending;

	unsigned connections;
	unsigned connections_peak; /* since the last trim */
	uint64_t released;         /* body bytes released since the last trim */
	struct event trim_ev;
	bool trim_armed;
	uint64_t body_held;
	uint64_t head_timeouts, accept_errors;
	struct ratelimit rl_accept, rl_cap, rl_head;
} F;

static bool ratelimit_ok(struct ratelimit *rl, uint64_t *ret_suppressed)
{
	int64_t now = time_now_ms();
	if (rl->last_ms && now - rl->last_ms < LOG_EVERY_MS) {
		rl->suppressed++;
		return false;
	}
	rl->last_ms = now;
	*ret_suppressed = rl->suppressed;
	rl->suppressed = 0;
	return true;
}

/* ---- the listener -------------------------------------------------------------------------- */

static void listener_update(void)
{
	if (!F.lev)
		return;
	bool want = F.connections < F.opts.max_connections && !F.backing_off;
	if (want == F.accepting)
		return;
	if (want ? evconnlistener_enable(F.lev) : evconnlistener_disable(F.lev))
		return;
	F.accepting = want;
	uint64_t n;
	if (!want && !F.backing_off && ratelimit_ok(&F.rl_cap, &n))
		log_warn("%u client connections open (--max-connections): not accepting more until one closes (%" PRIu64 " more pauses since the last report)",
			 F.connections, n);
}

static void on_backoff_done(evutil_socket_t fd, short what, void *arg)
{
	F.backing_off = false;
	listener_update();
}

/* accept() failed with something other than EAGAIN/EINTR: mostly EMFILE or ENFILE. */
static void on_accept_error(struct evconnlistener *lev, void *arg)
{
	int err = EVUTIL_SOCKET_ERROR();
	int64_t now = time_now_ms();
	F.accept_errors++;
	if (F.backoff_ms == 0 || now - F.last_accept_error_ms > 5 * BACKOFF_MAX_MS)
		F.backoff_ms = BACKOFF_MIN_MS;
	else
		F.backoff_ms = MIN(F.backoff_ms * 2, BACKOFF_MAX_MS);
	F.last_accept_error_ms = now;
	F.backing_off = true;
	listener_update();
	struct timeval tv = {F.backoff_ms / 1000, (F.backoff_ms % 1000) * 1000};
	evtimer_add(&F.backoff_ev, &tv);
	uint64_t n;
	if (ratelimit_ok(&F.rl_accept, &n))
		log_warn("accept: %s: not accepting connections for %d ms (%u client connections open; %" PRIu64 " more accept errors since the last report)",
			 strerror(err), F.backoff_ms, F.connections, n);
}

void front_listen(struct evhttp_bound_socket *bound)
{
	F.lev = evhttp_bound_socket_get_listener(bound);
	F.accepting = true;
	evconnlistener_set_error_cb(F.lev, on_accept_error);
	listener_update();
}

void front_unlisten(void)
{
	F.lev = NULL;
	if (evtimer_initialized(&F.backoff_ev))
		evtimer_del(&F.backoff_ev);
}

/* ---- connection records -------------------------------------------------------------------- */

/*
 * Give memory back after a burst: what a flood of connections or bodies made malloc take stays
 * in its free lists (fragmented heap) unless trimmed, so corrald's RSS would stay at the flood's
 * peak after the clients left.
 */
static void on_trim(evutil_socket_t fd, short what, void *arg)
{
	F.trim_armed = false;
	F.connections_peak = F.connections;
	F.released = 0;
	malloc_trim(0);
}

static void maybe_trim(void)
{
	if (F.trim_armed || !F.base)
		return;
	if (F.released < TRIM_AFTER_BYTES && (F.connections_peak < TRIM_AFTER_CONNECTIONS ||
					      F.connections > F.connections_peak / 2))
		return;
	struct timeval tv = {TRIM_DELAY_MS / 1000, (TRIM_DELAY_MS % 1000) * 1000};
	evtimer_add(&F.trim_ev, &tv);
	F.trim_armed = true;
}

static void body_release(struct hconn *c)
{
	F.released += c->reserved;
	F.body_held -= c->reserved;
	c->reserved = 0;
	c->allowance = 0;
	if (c->body)
		evbuffer_drain(c->body, evbuffer_get_length(c->body));
}

static void hconn_free(struct hconn *c)
{
	if (c->is_pending)
		TAILQ_REMOVE(&F.pending, c, pending);
	if (c->input_cb)
		evbuffer_remove_cb_entry(bufferevent_get_input(c->bev), c->input_cb);
	if (c->deadline_armed)
		evtimer_del(&c->deadline);
	evtimer_del(&c->next_ev);
	body_release(c);
	if (c->body)
		evbuffer_free(c->body);
	free(c);
	F.connections--;
	listener_update();
	maybe_trim();
}

static struct hconn *hconn_of(struct evhttp_connection *evcon);

static void on_close(struct evhttp_connection *evcon, void *arg)
{
	struct hconn *c = arg;
	if (c->user_closecb)
		c->user_closecb(evcon, c->user_closecb_arg);
	hconn_free(c);
}

static struct hconn *hconn_of(struct evhttp_connection *evcon)
{
	struct evhttp_peek_conn *m = evcon ? evhttp_peek(evcon) : NULL;
	return m && m->closecb == on_close ? m->closecb_arg : NULL;
}

static bool closecb_hook(struct evhttp_connection *evcon, http_closecb_fn cb, void *arg)
{
	struct hconn *c = hconn_of(evcon);
	if (!c)
		return false;
	c->user_closecb = cb;
	c->user_closecb_arg = arg;
	return true;
}

static bool reading_head(struct hconn *c)
{
	enum evhttp_peek_state s = evhttp_peek(c->evcon)->state;
	return !c->head_done && (s == EVHTTP_PEEK_READING_FIRSTLINE || s == EVHTTP_PEEK_READING_HEADERS);
}

static void deadline_arm(struct hconn *c)
{
	evtimer_add(&c->deadline, F.head_tv);
	c->deadline_armed = true;
}

static void deadline_disarm(struct hconn *c)
{
	if (c->deadline_armed)
		evtimer_del(&c->deadline);
	c->deadline_armed = false;
}

static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
	struct hconn *c = arg;
	c->deadline_armed = false;
	if (!reading_head(c))
		return;
	F.head_timeouts++;
	uint64_t n;
	if (ratelimit_ok(&F.rl_head, &n))
		log_info("closed a client connection that sent no complete request head within %d s (%" PRIu64 " more since the last report)",
			 F.opts.header_timeout_s, n);
	evhttp_connection_free(c->evcon); /* nobody else holds a request still being read; frees c */
}

/* Bytes arrived: the first of a request head starts its deadline. */
static void on_input(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct hconn *c = arg;
	if (info->n_added && c->evcon && !c->deadline_armed && reading_head(c))
		deadline_arm(c);
}

static int on_head(struct evhttp_request *req, void *arg);
static void on_chunk(struct evhttp_request *req, void *arg);
static void on_complete(struct evhttp_request *req, void *arg);

/* Put our callbacks on the connection's current request, before evhttp reads its head. */
static void hook_request(struct hconn *c)
{
	struct evhttp_request *req = evhttp_peek(c->evcon)->requests.tqh_first;
	/* Not by address: the next request is often allocated where the last one was freed. */
	if (!req || req->header_cb == on_head || req->evcon != c->evcon)
		return;
	c->hooked = req;
	c->head_done = false;
	c->refuse_status = 0;
	body_release(c);
	deadline_disarm(c);
	evhttp_request_set_header_cb(req, on_head);
	evhttp_request_set_on_complete_cb(req, on_complete, c);
	/* Until the head is judged, no route's cap applies: the smallest. */
	evhttp_connection_set_max_body_size(c->evcon, 0);
	if (evbuffer_get_length(bufferevent_get_input(c->bev)) && reading_head(c))
		deadline_arm(c);
}

static void on_next(evutil_socket_t fd, short what, void *arg)
{
	hook_request(arg);
}

static void on_complete(struct evhttp_request *req, void *arg)
{
	struct hconn *c = arg;
	body_release(c);
	maybe_trim();
	event_active(&c->next_ev, EV_TIMEOUT, 1);
}

static void on_attach(evutil_socket_t fd, short what, void *arg)
{
	struct hconn *c;
	while ((c = TAILQ_FIRST(&F.pending))) {
		TAILQ_REMOVE(&F.pending, c, pending);
		c->is_pending = false;
		void (*readcb)(struct bufferevent *, void *) = NULL;
		void *cbarg = NULL;
		bufferevent_getcb(c->bev, &readcb, NULL, NULL, &cbarg);
		if (readcb != F.evhttp_readcb || !cbarg ||
		    evhttp_peek(cbarg)->bufev != c->bev) {
			/* evhttp already gave up on it (it freed the bufferevent: our reference holds it) */
			struct bufferevent *bev = c->bev;
			hconn_free(c);
			bufferevent_decref(bev);
			continue;
		}
		c->evcon = cbarg;
		evhttp_connection_set_closecb(c->evcon, on_close, c);
		bufferevent_decref(c->bev);
		hook_request(c);
		/* A new connection owes its first head from the start: no idle wait before it. */
		if (!c->deadline_armed && reading_head(c))
			deadline_arm(c);
	}
}

/* evhttp_set_bevcb: a connection was just accepted. */
static struct bufferevent *on_accept(struct event_base *base, void *arg)
{
	struct bufferevent *bev = bufferevent_socket_new(base, -1, 0); /* what evhttp would make */
	struct hconn *c = bev ? calloc(1, sizeof(*c)) : NULL;
	if (!c)
		return bev; /* out of memory: evhttp's own limits still apply */
	c->bev = bev;
	evtimer_assign(&c->deadline, base, on_deadline, c);
	evtimer_assign(&c->next_ev, base, on_next, c);
	c->input_cb = evbuffer_add_cb(bufferevent_get_input(bev), on_input, c);
	bufferevent_incref(bev); /* until on_attach: evhttp may free it before */
	TAILQ_INSERT_TAIL(&F.pending, c, pending);
	c->is_pending = true;
	event_active(&F.attach_ev, EV_TIMEOUT, 1);
	F.connections++;
	F.connections_peak = MAX(F.connections_peak, F.connections);
	listener_update();
	return bev;
}

/* ---- judging a head ------------------------------------------------------------------------ */

static void refuse(struct hconn *c, struct evhttp_request *req, int status, const char *code,
		   const char *fmt, ...) _printf_(5, 6);
static void refuse(struct hconn *c, struct evhttp_request *req, int status, const char *code,
		   const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(c->refuse_msg, sizeof(c->refuse_msg), fmt, ap);
	va_end(ap);
	c->refuse_status = status;
	c->refuse_code = code;
	/*
	 * evhttp then takes the request as bodiless: it dispatches it at once and reads nothing more.
	 * Debian's evhttp decides chunked-ness before the header callback (req->chunked).
	 */
	struct evkeyvalq *h = evhttp_request_get_input_headers(req);
	evhttp_remove_header(h, "Transfer-Encoding");
	evhttp_remove_header(h, "Content-Length");
	evhttp_add_header(h, "Content-Length", "0");
	evhttp_peek_clear_chunked(req);
	evhttp_connection_set_max_body_size(c->evcon, 0);
}

static int on_head(struct evhttp_request *req, void *arg)
{
	struct hconn *c = hconn_of(evhttp_request_get_connection(req));
	if (!c || c->hooked != req)
		return -1; /* cannot happen: close rather than read an unjudged body */
	deadline_disarm(c);
	c->head_done = true;

	struct front_verdict v = {0};
	F.judge(req, &v, F.judge_arg);
	if (v.status) {
		refuse(c, req, v.status, v.code ? v.code : WIRE_CODE(GENERAL_REFUSED), "%s", v.message);
		return 0;
	}
	struct evkeyvalq *h = evhttp_request_get_input_headers(req);
	const char *te = evhttp_find_header(h, "Transfer-Encoding");
	const char *cl = evhttp_find_header(h, "Content-Length");
	if (te && strcasecmp(te, "chunked") == 0) {
		if (v.body_max == 0) {
			refuse(c, req, 413, WIRE_CODE(SANDBOX_REQUEST_TOO_LARGE),
			       "this route takes no request body");
			return 0;
		}
		uint64_t a = MIN(v.body_max, CHUNK_ALLOWANCE);
		if (a > F.opts.body_budget - F.body_held) {
			evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "1");
			refuse(c, req, 503, WIRE_CODE(GENERAL_BODY_BUDGET_EXHAUSTED),
			       "corrald holds %" PRIu64 " bytes of request bodies (limit %" PRIu64 "): retry later",
			       F.body_held, F.opts.body_budget);
			return 0;
		}
		if (!c->body && !(c->body = evbuffer_new()))
			return -1;
		c->allowance = a;
		c->reserved = a;
		F.body_held += a;
		c->body_max = v.body_max;
		evhttp_request_set_chunked_cb(req, on_chunk);
		evhttp_connection_set_max_body_size(c->evcon, a);
		return 0;
	} else if (cl) {
		char *end;
		errno = 0;
		unsigned long long n = strtoull(cl, &end, 10);
		if (*cl < '0' || *cl > '9' || *end || errno)
			return 0; /* evhttp answers 400 to a malformed Content-Length */
		if (n > v.body_max && v.body_max == 0) {
			refuse(c, req, 413, WIRE_CODE(SANDBOX_REQUEST_TOO_LARGE),
			       "this route takes no request body (got Content-Length %llu)", n);
			return 0;
		}
		if (n > v.body_max) {
			refuse(c, req, 413, WIRE_CODE(SANDBOX_REQUEST_TOO_LARGE),
			       "request body of %llu bytes exceeds the %" PRIu64 " byte limit of this route",
			       n, v.body_max);
			return 0;
		}
		if (n > F.opts.body_budget - F.body_held) {
			evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "1");
			refuse(c, req, 503, WIRE_CODE(GENERAL_BODY_BUDGET_EXHAUSTED),
			       "corrald holds %" PRIu64 " bytes of request bodies (limit %" PRIu64 "): retry later",
			       F.body_held, F.opts.body_budget);
			return 0;
		}
		c->reserved = n;
		F.body_held += n;
	}
	evhttp_connection_set_max_body_size(c->evcon, v.body_max);
	return 0;
}

/* A chunk of a chunked body: account it and keep it aside (evhttp drains the input after this). */
static void on_chunk(struct evhttp_request *req, void *arg)
{
	struct hconn *c = hconn_of(evhttp_request_get_connection(req));
	if (!c || c->refuse_status)
		return;
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	uint64_t n = evbuffer_get_length(in);
	evbuffer_add_buffer(c->body, in);
	/* The chunk used n bytes of the allowance: reserve them again, as far as the budget allows. */
	uint64_t more = MIN(n, F.opts.body_budget - F.body_held);
	c->allowance = c->allowance - MIN(n, c->allowance) + more;
	c->reserved += more;
	F.body_held += more;
	evhttp_connection_set_max_body_size(
		c->evcon, MIN(c->body_max, evbuffer_get_length(c->body) + c->allowance));
}

bool front_dispatch(struct evhttp_request *req)
{
	struct hconn *c = hconn_of(evhttp_request_get_connection(req));
	if (!c || c->hooked != req)
		return false;
	if (c->refuse_status) {
		evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
		log_debug("%s refused at its head: %d %s: %s", evhttp_request_get_uri(req),
			  c->refuse_status, c->refuse_code, c->refuse_msg);
		http_send_error(req, c->refuse_status, c->refuse_code, "%s", c->refuse_msg);
		return true;
	}
	if (c->body && evbuffer_get_length(c->body))
		evbuffer_add_buffer(evhttp_request_get_input_buffer(req), c->body);
	return false;
}

void front_get_stats(struct front_stats *ret)
{
	ret->connections = F.connections;
	ret->body_bytes_held = F.body_held;
	ret->head_timeouts = F.head_timeouts;
	ret->accept_errors = F.accept_errors;
}

int front_init(struct event_base *base, struct evhttp *http, const struct front_options *opts,
	       front_head_fn judge, void *arg)
{
	int r = evhttp_peek_check(base, &F.evhttp_readcb);
	if (r < 0)
		return r;
	F.base = base;
	F.http = http;
	F.opts = *opts;
	F.judge = judge;
	F.judge_arg = arg;
	TAILQ_INIT(&F.pending);
	struct timeval tv = {opts->header_timeout_s, 0};
	F.head_tv = event_base_init_common_timeout(base, &tv);
	if (!F.head_tv)
		return -ENOMEM;
	evtimer_assign(&F.backoff_ev, base, on_backoff_done, NULL);
	evtimer_assign(&F.trim_ev, base, on_trim, NULL);
	event_assign(&F.attach_ev, base, -1, 0, on_attach, NULL);
	evhttp_set_bevcb(http, on_accept, NULL);
	http_set_closecb_hook(closecb_hook);
	return 0;
}
