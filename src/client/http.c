/*
 * The transport: every request of a client goes through one libcurl multi handle, driven by one
 * worker thread, so all threads share one connection pool (libcurl's share interface cannot
 * safely share connections between concurrent threads in the libcurl versions we target).
 * Caller threads build an easy handle, queue it, and sleep on their own condition variable; the
 * worker moves bytes into the transfer's buffer. A streamed body is consumed by the caller while
 * the transfer runs; past STREAM_HIGH_WATER unconsumed bytes the transfer is paused (so a slow
 * caller holds memory bounded) and resumed by the worker when the caller has caught up.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "client.h"
#include "shared/dynbuf.h"
#include "config.h"
#include "shared/id.h"

#define STREAM_HIGH_WATER (1u << 20)
#define MAX_BODY (64u << 20)
#define IDLE_POOL_MAX 100000L

struct xfer {
	struct xfer *next;     /* pending list */
	struct xfer *ctl_next; /* control list */
	struct corral_client *c;
	CURL *easy;
	struct curl_slist *headers;
	char *url;
	char *body;
	bool stream;
	struct corral_cancel *cancel;
	pthread_cond_t cond;
	/* below: under c->mu */
	struct dynbuf resp; /* the answer's body (so far, when streamed), at most MAX_BODY */
	bool done, paused, want_unpause, want_abort, in_ctl, overflow;
	bool resent;
	bool headers_done; /* the blank line that ends the answer's headers arrived */
	int prereqs;       /* worker only: times the request was about to go out (libcurl resends
			    * a request whose reused connection died without an answer) */
	long status;
	CURLcode cc;
	bool sent_nothing;
	char request_id[40];
	char errbuf[CURL_ERROR_SIZE];
};

static size_t on_write(char *data, size_t size, size_t n, void *p)
{
	struct xfer *x = p;
	struct corral_client *c = x->c;
	size_t len = size * n;
	pthread_mutex_lock(&c->mu);
	if (!x->status) {
		long st = 0;
		curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &st);
		x->status = st;
	}
	if (x->stream && x->resp.len >= STREAM_HIGH_WATER) {
		x->paused = true;
		pthread_mutex_unlock(&c->mu);
		return CURL_WRITEFUNC_PAUSE;
	}
	int r = dynbuf_add(&x->resp, data, len);
	if (r < 0) {
		x->overflow = r == -E2BIG;
		pthread_mutex_unlock(&c->mu);
		return 0;
	}
	if (x->stream)
		pthread_cond_signal(&x->cond);
	pthread_mutex_unlock(&c->mu);
	return len;
}

static size_t on_header(char *data, size_t size, size_t n, void *p)
{
	struct xfer *x = p;
	size_t len = size * n;
	static const char ka[] = "keep-alive:";
	if ((len == 2 && data[0] == '\r' && data[1] == '\n') || (len == 1 && data[0] == '\n')) {
		pthread_mutex_lock(&x->c->mu);
		x->headers_done = true;
		pthread_mutex_unlock(&x->c->mu);
	}
	if (len > sizeof(ka) && strncasecmp(data, ka, sizeof(ka) - 1) == 0) {
		char v[128];
		size_t vl = MIN(len - (sizeof(ka) - 1), sizeof(v) - 1);
		memcpy(v, data + sizeof(ka) - 1, vl);
		v[vl] = '\0';
		long t = policy_parse_keepalive(v);
		if (t > 0)
			atomic_store(&x->c->server_keepalive_s, t);
	}
	return len;
}

/* Called right before the request is sent on a new or reused connection: from here on the
 * server may have seen (part of) it. */
static int on_prereq(void *p, char *conn_primary_ip, char *conn_local_ip, int conn_primary_port,
		     int conn_local_port)
{
	struct xfer *x = p;
	x->prereqs++;
	return CURL_PREREQFUNC_OK;
}

static void xfer_free(struct xfer *x)
{
	if (!x)
		return;
	if (x->easy)
		curl_easy_cleanup(x->easy);
	curl_slist_free_all(x->headers);
	pthread_cond_destroy(&x->cond);
	free(x->url);
	free(x->body);
	dynbuf_free(&x->resp);
	free(x);
}

static struct xfer *xfer_new(struct corral_client *c, const struct http_req *rq)
{
	struct xfer *x = calloc(1, sizeof(*x));
	if (!x)
		return NULL;
	dynbuf_init(&x->resp, MAX_BODY);
	x->c = c;
	x->stream = rq->stream;
	x->cancel = rq->cancel;
	pthread_cond_init(&x->cond, NULL);
	x->easy = curl_easy_init();
	if (!x->easy || asprintf(&x->url, "%s%s", c->server, rq->path) < 0) {
		x->url = NULL;
		xfer_free(x);
		return NULL;
	}
	if (rq->body && !(x->body = strdup(rq->body))) {
		xfer_free(x);
		return NULL;
	}
	if (id_hex32(x->request_id) < 0)
		snprintf(x->request_id, sizeof(x->request_id), "%032d", 0);

	char h[600];
	snprintf(h, sizeof(h), "X-Request-ID: %s", x->request_id);
	x->headers = curl_slist_append(x->headers, h);
	if (rq->api_key && c->api_key && *c->api_key) {
		snprintf(h, sizeof(h), "OPEN-SANDBOX-API-KEY: %s", c->api_key);
		x->headers = curl_slist_append(x->headers, h);
	}
	if (rq->idempotency_key && *rq->idempotency_key) {
		snprintf(h, sizeof(h), "Idempotency-Key: %s", rq->idempotency_key);
		x->headers = curl_slist_append(x->headers, h);
	}
	if (x->body)
		x->headers = curl_slist_append(x->headers, "Content-Type: application/json");
	x->headers = curl_slist_append(x->headers, "Expect:");

	CURL *e = x->easy;
	curl_easy_setopt(e, CURLOPT_URL, x->url);
	curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, rq->method);
	if (x->body) {
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, x->body);
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)strlen(x->body));
	} else if (strcmp(rq->method, "POST") == 0) {
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, 0L);
	} else if (strcmp(rq->method, "GET") == 0) {
		curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
	}
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, x->headers);
	curl_easy_setopt(e, CURLOPT_USERAGENT, "libcorral/" CORRAL_VERSION);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)(c->o.connect_timeout_s * 1000));
	if (rq->timeout_ms > 0)
		curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, rq->timeout_ms);
	if (rq->fresh)
		curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, 1L);
	if (rq->stall_s > 0) {
		curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
		curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, rq->stall_s);
	}
	double expiry = policy_keepalive_expiry_s(atomic_load(&c->server_keepalive_s),
						  c->o.keepalive_expiry_s);
	long maxage = policy_curl_maxage(expiry);
	if (maxage < 0) {
		curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, 1L);
		curl_easy_setopt(e, CURLOPT_FORBID_REUSE, 1L);
	} else {
		curl_easy_setopt(e, CURLOPT_MAXAGE_CONN, maxage);
	}
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, x->errbuf);
	curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, on_prereq);
	curl_easy_setopt(e, CURLOPT_PREREQDATA, x);
	curl_easy_setopt(e, CURLOPT_PRIVATE, x);
	return x;
}

/* ---- the worker ---- */

static void finish_locked(struct xfer *x, CURLcode cc)
{
	x->cc = cc;
	x->done = true;
	pthread_cond_signal(&x->cond);
}

static void collect(struct xfer *x, CURLcode cc)
{
	long st = 0;
	curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &st);
	/* Failed before the request was about to go out (resolve, connect): nothing was sent.
	 * (CURLINFO_REQUEST_SIZE is not a reliable witness: it stays 0 for requests that were
	 * sent when the answer never came.) */
	bool nothing = cc != CURLE_OK && x->prereqs == 0;
	curl_multi_remove_handle(x->c->multi, x->easy);
	pthread_mutex_lock(&x->c->mu);
	if (st)
		x->status = st;
	x->sent_nothing = nothing;
	x->resent = x->prereqs > 1;
	finish_locked(x, cc);
	pthread_mutex_unlock(&x->c->mu);
}

static void *worker_main(void *arg)
{
	struct corral_client *c = arg;
	int running = 0;
	for (;;) {
		pthread_mutex_lock(&c->mu);
		struct xfer *add = c->pending, *ctl = c->ctl;
		c->pending = NULL;
		c->ctl = NULL;
		bool stop = c->stopping;
		pthread_mutex_unlock(&c->mu);

		while (add) {
			struct xfer *x = add;
			add = x->next;
			CURLMcode mc = curl_multi_add_handle(c->multi, x->easy);
			if (mc != CURLM_OK) {
				pthread_mutex_lock(&c->mu);
				snprintf(x->errbuf, sizeof(x->errbuf), "%s", curl_multi_strerror(mc));
				x->sent_nothing = true;
				finish_locked(x, CURLE_FAILED_INIT);
				pthread_mutex_unlock(&c->mu);
			}
		}
		while (ctl) {
			struct xfer *x = ctl;
			pthread_mutex_lock(&c->mu);
			ctl = x->ctl_next;
			x->in_ctl = false; /* from here on the caller may queue x again */
			bool abort_it = x->want_abort && !x->done;
			bool unpause = !abort_it && x->want_unpause && !x->done;
			x->want_unpause = false;
			if (unpause)
				x->paused = false;
			pthread_mutex_unlock(&c->mu);
			if (abort_it) {
				curl_multi_remove_handle(c->multi, x->easy);
				pthread_mutex_lock(&c->mu);
				snprintf(x->errbuf, sizeof(x->errbuf), "aborted by the client");
				finish_locked(x, CURLE_ABORTED_BY_CALLBACK);
				pthread_mutex_unlock(&c->mu);
			} else if (unpause) {
				curl_easy_pause(x->easy, CURLPAUSE_CONT); /* may call on_write */
			}
		}

		curl_multi_perform(c->multi, &running);
		CURLMsg *m;
		int left;
		while ((m = curl_multi_info_read(c->multi, &left))) {
			if (m->msg != CURLMSG_DONE)
				continue;
			struct xfer *x = NULL;
			curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
			collect(x, m->data.result);
		}
		if (stop && running == 0)
			break;
		curl_multi_poll(c->multi, NULL, 0, 1000, NULL);
	}
	return NULL;
}

int http_transport_start(struct corral_client *c)
{
	c->multi = curl_multi_init();
	if (!c->multi)
		return -ENOMEM;
	curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, IDLE_POOL_MAX);
	curl_multi_setopt(c->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, c->o.max_connections);
	curl_multi_setopt(c->multi, CURLMOPT_PIPELINING, (long)CURLPIPE_NOTHING);
	int r = pthread_create(&c->worker, NULL, worker_main, c);
	if (r) {
		curl_multi_cleanup(c->multi);
		c->multi = NULL;
		return -r;
	}
	c->worker_started = true;
	return 0;
}

void http_transport_stop(struct corral_client *c)
{
	if (c->worker_started) {
		pthread_mutex_lock(&c->mu);
		c->stopping = true;
		pthread_mutex_unlock(&c->mu);
		curl_multi_wakeup(c->multi);
		pthread_join(c->worker, NULL);
		c->worker_started = false;
	}
	if (c->multi)
		curl_multi_cleanup(c->multi);
	c->multi = NULL;
}

static int submit(struct corral_client *c, struct xfer *x)
{
	pthread_mutex_lock(&c->mu);
	if (c->stopping) {
		pthread_mutex_unlock(&c->mu);
		return -ESHUTDOWN;
	}
	x->next = c->pending;
	c->pending = x;
	pthread_mutex_unlock(&c->mu);
	curl_multi_wakeup(c->multi);
	return 0;
}

static void ctl_locked(struct corral_client *c, struct xfer *x)
{
	if (x->in_ctl)
		return;
	x->in_ctl = true;
	x->ctl_next = c->ctl;
	c->ctl = x;
}

void http_xfer_abort(struct xfer *x)
{
	struct corral_client *c = x->c;
	pthread_mutex_lock(&c->mu);
	if (!x->done) {
		x->want_abort = true;
		ctl_locked(c, x);
	}
	pthread_mutex_unlock(&c->mu);
	curl_multi_wakeup(c->multi);
}

/* Makes x the transfer its cancel token aborts; false (x not submitted) when already triggered. */
static bool cancel_register(struct xfer *x)
{
	struct corral_cancel *t = x->cancel;
	if (!t)
		return true;
	pthread_mutex_lock(&t->mu);
	bool ok = !atomic_load(&t->triggered);
	if (ok)
		t->x = x;
	pthread_mutex_unlock(&t->mu);
	return ok;
}

/* After this, a trigger no longer touches x; then waits until the worker let go of x. */
static void cancel_unregister(struct xfer *x)
{
	struct corral_client *c = x->c;
	struct corral_cancel *t = x->cancel;
	if (t) {
		pthread_mutex_lock(&t->mu);
		if (t->x == x)
			t->x = NULL;
		pthread_mutex_unlock(&t->mu);
	}
	pthread_mutex_lock(&c->mu);
	while (x->in_ctl) {
		pthread_mutex_unlock(&c->mu);
		curl_multi_wakeup(c->multi);
		client_sleep_s(0.001);
		pthread_mutex_lock(&c->mu);
	}
	pthread_mutex_unlock(&c->mu);
}

static void cancelled_resp(struct http_resp *rs)
{
	memset(rs, 0, sizeof(*rs));
	snprintf(rs->error, sizeof(rs->error), "cancelled");
	rs->cc = CURLE_ABORTED_BY_CALLBACK;
	rs->sent_nothing = true;
}

/* Fills rs from a finished transfer and frees it. */
static void take_result(struct xfer *x, struct http_resp *rs)
{
	memset(rs, 0, sizeof(*rs));
	snprintf(rs->request_id, sizeof(rs->request_id), "%s", x->request_id);
	/* libcurl (7.88) reports a connection closed in the middle of the headers as a complete
	 * answer with an empty body: that is a broken answer. */
	if (x->cc == CURLE_OK && !x->headers_done) {
		x->cc = CURLE_PARTIAL_FILE;
		snprintf(x->errbuf, sizeof(x->errbuf),
			 "the connection closed in the middle of the answer's headers");
	}
	rs->cc = x->cc;
	rs->sent_nothing = x->sent_nothing;
	rs->resent = x->resent;
	rs->overflow = x->overflow;
	if (x->cc == CURLE_OK)
		rs->status = x->status;
	rs->len = x->resp.len;
	rs->body = dynbuf_take(&x->resp, NULL);
	if (x->cc != CURLE_OK) {
		if (x->overflow)
			snprintf(rs->error, sizeof(rs->error), "response larger than %u MiB",
				 MAX_BODY >> 20);
		else
			snprintf(rs->error, sizeof(rs->error), "%s",
				 x->errbuf[0] ? x->errbuf : curl_easy_strerror(x->cc));
	} else if (rs->len && rs->body) {
		rs->json = json_loadb(rs->body, rs->len, 0, NULL);
	}
	xfer_free(x);
}

int http_do(struct corral_client *c, const struct http_req *rq, struct http_resp *rs)
{
	struct http_req once = *rq;
	once.stream = false;
	for (int attempt = 0;; attempt++) {
		struct xfer *x = xfer_new(c, &once);
		if (!x) {
			memset(rs, 0, sizeof(*rs));
			snprintf(rs->error, sizeof(rs->error), "out of memory");
			rs->cc = CURLE_OUT_OF_MEMORY;
			return -ENOMEM;
		}
		if (!cancel_register(x)) {
			xfer_free(x);
			cancelled_resp(rs);
			return -ECANCELED;
		}
		int r = submit(c, x);
		if (r < 0) {
			cancel_unregister(x);
			xfer_free(x);
			memset(rs, 0, sizeof(*rs));
			snprintf(rs->error, sizeof(rs->error), "the client is shutting down");
			rs->cc = CURLE_FAILED_INIT;
			rs->sent_nothing = true;
			return r;
		}
		pthread_mutex_lock(&c->mu);
		while (!x->done)
			pthread_cond_wait(&x->cond, &c->mu);
		pthread_mutex_unlock(&c->mu);
		cancel_unregister(x);
		take_result(x, rs);
		if (rs->cc == CURLE_OK)
			return 0;
		if (corral_cancel_triggered(rq->cancel))
			return -ECANCELED;
		if (!rs->sent_nothing || attempt >= c->o.connect_retries)
			return -EIO;
		http_resp_clear(rs);
		client_sleep_s(0.05 * (attempt + 1));
	}
}

int http_stream_start(struct corral_client *c, const struct http_req *rq, struct xfer **ret)
{
	struct http_req s = *rq;
	s.stream = true;
	struct xfer *x = xfer_new(c, &s);
	if (!x)
		return -ENOMEM;
	if (!cancel_register(x)) {
		xfer_free(x);
		return -ECANCELED;
	}
	int r = submit(c, x);
	if (r < 0) {
		cancel_unregister(x);
		xfer_free(x);
		return r;
	}
	*ret = x;
	return 0;
}

int http_stream_next(struct xfer *x, char **buf, size_t *len, size_t *cap)
{
	struct corral_client *c = x->c;
	pthread_mutex_lock(&c->mu);
	while (!x->done && x->resp.len == 0)
		pthread_cond_wait(&x->cond, &c->mu);
	if (x->resp.len == 0) {
		pthread_mutex_unlock(&c->mu);
		return 0;
	}
	if (*len + x->resp.len + 1 > *cap) {
		size_t nc = MAX(*cap * 2, *len + x->resp.len + 1);
		char *nb = realloc(*buf, nc);
		if (!nb) {
			pthread_mutex_unlock(&c->mu);
			return -ENOMEM;
		}
		*buf = nb;
		*cap = nc;
	}
	memcpy(*buf + *len, x->resp.data, x->resp.len);
	*len += x->resp.len;
	(*buf)[*len] = '\0';
	dynbuf_reset(&x->resp);
	bool wake = false;
	if (x->paused && !x->want_unpause && !x->done) {
		x->want_unpause = true;
		ctl_locked(c, x);
		wake = true;
	}
	pthread_mutex_unlock(&c->mu);
	if (wake)
		curl_multi_wakeup(c->multi);
	return 1;
}

long http_stream_status(struct xfer *x)
{
	pthread_mutex_lock(&x->c->mu);
	long st = x->status;
	pthread_mutex_unlock(&x->c->mu);
	return st;
}

void http_stream_finish(struct xfer *x, struct http_resp *rs)
{
	struct corral_client *c = x->c;
	cancel_unregister(x);
	pthread_mutex_lock(&c->mu);
	if (!x->done) {
		x->want_abort = true;
		ctl_locked(c, x);
		pthread_mutex_unlock(&c->mu);
		curl_multi_wakeup(c->multi);
		pthread_mutex_lock(&c->mu);
		while (!x->done)
			pthread_cond_wait(&x->cond, &c->mu);
	}
	/* The worker may still hold x in its control batch: wait until it let go. */
	while (x->in_ctl) {
		pthread_mutex_unlock(&c->mu);
		curl_multi_wakeup(c->multi);
		client_sleep_s(0.001);
		pthread_mutex_lock(&c->mu);
	}
	pthread_mutex_unlock(&c->mu);
	take_result(x, rs);
}

void http_resp_clear(struct http_resp *rs)
{
	free(rs->body);
	json_decref(rs->json);
	rs->body = NULL;
	rs->json = NULL;
}
