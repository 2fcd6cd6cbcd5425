#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>

#include "command.h"
#include "exec.h"
#include "session.h"
#include "sweep.h"
#include "shared/httputil.h"
#include "shared/libevent_private.h"
#include "shared/log.h"
#include "shared/timeutil.h"
#include "shared/wire_error.h"
#include "users.h"

#define STREAM_HIGH_WATER (256u * 1024) /* bytes queued to a client before we wait for it */
#define LOGS_MAX_REPLY (16u << 20)

extern struct event_base *execd_base;

/* ----- the event stream ----- */

/* The stream headers (§2.3). An HTTP/1.0 reply is delimited by closing the connection, so it
 * does not claim keep-alive. */
static void stream_headers(struct evhttp_request *req)
{
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);
	evhttp_add_header(h, "Content-Type", "text/event-stream");
	evhttp_add_header(h, "Cache-Control", "no-cache");
	int major, minor;
	evhttp_peek_version(req, &major, &minor);
	if (major > 1 || (major == 1 && minor >= 1))
		evhttp_add_header(h, "Connection", "keep-alive");
	evhttp_add_header(h, "X-Accel-Buffering", "no");
}

struct stream_client {
	struct exec_watch w;
	struct evhttp_request *req; /* NULL once the client is gone or the reply ended */
	struct evhttp_connection *evcon;
	struct execution *ex;
	uint64_t offset;    /* stream bytes sent */
	struct tr_pos pos;  /* the next transcript record to read when lagging */
	int fd;             /* the transcript, opened when the client lags */
	struct sbuf enc;    /* a record's events, when lagging */
	struct event *ping;
};

static void stream_free(struct stream_client *sc)
{
	exec_watch_remove(sc->ex, &sc->w);
	if (sc->ping)
		event_free(sc->ping);
	if (sc->fd >= 0)
		close(sc->fd);
	sbuf_clear(&sc->enc);
	exec_unref(sc->ex);
	free(sc);
}

static size_t stream_queued(struct stream_client *sc)
{
	struct bufferevent *bev = evhttp_connection_get_bufferevent(sc->evcon);
	return bev ? evbuffer_get_length(bufferevent_get_output(bev)) : 0;
}

static void stream_pump(struct stream_client *sc);

static void on_drained(struct evhttp_connection *evcon, void *arg)
{
	stream_pump(arg);
}

static void stream_send(struct stream_client *sc, const void *data, size_t len)
{
	struct evbuffer *b = evbuffer_new();
	if (!b)
		return;
	evbuffer_add(b, data, len);
	evhttp_send_reply_chunk_with_cb(sc->req, b, on_drained, sc);
	evbuffer_free(b);
}

static void stream_end(struct stream_client *sc)
{
	http_conn_set_closecb(sc->evcon, NULL, NULL);
	evhttp_send_reply_end(sc->req);
	sc->req = NULL;
	stream_free(sc);
}

/*
 * Send the events of a record that starts at stream offset wire, minus what the client already
 * has. Returns the record's stream bytes, or a negative errno.
 */
static ssize_t send_record(struct stream_client *sc, const struct tr_record *r, uint64_t wire)
{
	struct sbuf *b = &sc->enc;
	b->len = 0;
	int k = tr_record_events(r, b);
	if (k < 0)
		return k;
	if (sc->offset < wire + b->len) {
		size_t skip = sc->offset > wire ? (size_t)(sc->offset - wire) : 0;
		stream_send(sc, b->data + skip, b->len - skip);
		sc->offset = wire + b->len;
	}
	return (ssize_t)b->len;
}

/*
 * Send what the client has not seen, decoded from the transcript record by record (the record
 * being filled comes from memory), without queueing much more than STREAM_HIGH_WATER.
 */
static void stream_pump(struct stream_client *sc)
{
	struct execution *ex = sc->ex;
	char buf[TR_RECORD_MAX];
	for (;;) {
		if (stream_queued(sc) > STREAM_HIGH_WATER)
			return; /* on_drained resumes */
		struct tr_record rec;
		if (sc->pos.off < ex->tr_len) {
			ssize_t n = exec_transcript_read(ex, &sc->fd, sc->pos.off, buf, sizeof(buf));
			ssize_t k = n > 0 ? tr_record_parse(buf, (size_t)n, sc->pos.ts, &rec) : n;
			ssize_t len = k > 0 ? send_record(sc, &rec, sc->pos.wire) : -EINVAL;
			if (len < 0) {
				log_warn("execution %s: transcript unreadable at byte %" PRIu64 ": %s", ex->id,
					 sc->pos.off, n < 0 ? strerror((int)-n) : "not a record");
				/* Nothing more to replay: go on live. */
				sc->pos.off = ex->tr_len;
				sc->offset = ex->events_len;
				break;
			}
			sc->pos.off += (uint64_t)k;
			sc->pos.ts = rec.ts;
			sc->pos.wire += (uint64_t)len;
			continue;
		}
		if (ex->tail.len > 0 && sc->offset < ex->events_len) {
			/* The record being filled: it stays where it is until written out. */
			rec = (struct tr_record){ex->tail_kind, ex->tail_ts, ex->tail.data, ex->tail.len};
			send_record(sc, &rec, ex->tail_wire);
		}
		break;
	}
	if (!ex->running && sc->pos.off >= ex->tr_len && ex->tail.len == 0)
		stream_end(sc);
}

static void stream_notify(struct exec_watch *w, struct execution *ex)
{
	struct stream_client *sc = (struct stream_client *)w;
	uint64_t before = ex->events_len - ex->pending.len;
	if (sc->offset == before) {
		if (stream_queued(sc) <= STREAM_HIGH_WATER) {
			/* Caught up: send the new events straight from memory. */
			if (ex->pending.len) {
				stream_send(sc, ex->pending.data, ex->pending.len);
				sc->offset = ex->events_len;
			}
			if (!ex->running)
				stream_end(sc);
			return;
		}
		/* Falling behind: go on from the transcript, at the record these events are in. */
		sc->pos = ex->mark;
	}
	stream_pump(sc);
}

static void on_ping(evutil_socket_t fd, short what, void *arg)
{
	struct stream_client *sc = arg;
	/* Only between events: a lagging client gets its backlog first. */
	if (sc->offset != sc->ex->events_len || stream_queued(sc) > STREAM_HIGH_WATER)
		return;
	struct sbuf b = {0};
	if (stream_event_text(&b, "ping", "pong", 4, time_now_ms()) == 0)
		stream_send(sc, b.data, b.len);
	sbuf_clear(&b);
}

static void on_client_close(struct evhttp_connection *evcon, void *arg)
{
	struct stream_client *sc = arg;
	log_debug("execution %s: stream client went away; the command keeps running", sc->ex->id);
	/* evhttp detached the unfinished request from the dying connection: we free it. */
	if (sc->req && !evhttp_request_get_connection(sc->req))
		evhttp_send_reply_end(sc->req);
	sc->req = NULL;
	stream_free(sc);
}

void command_stream(struct evhttp_request *req, struct execution *ex)
{
	struct stream_client *sc = calloc(1, sizeof(*sc));
	if (!sc) {
		http_send_error(req, 500, WIRE_CODE(RUNTIME_ERROR), "out of memory");
		return;
	}
	sc->req = req;
	sc->evcon = evhttp_request_get_connection(req);
	sc->ex = exec_ref(ex);
	sc->fd = -1;
	sc->pos = (struct tr_pos){0, 0, 0};
	sc->w.notify = stream_notify;
	stream_headers(req);
	evhttp_send_reply_start(req, 200, "OK");
	http_conn_set_closecb(sc->evcon, on_client_close, sc);
	if (ex->running) {
		exec_watch_add(ex, &sc->w);
		sc->ping = event_new(execd_base, -1, EV_PERSIST, on_ping, sc);
		struct timeval tv = {COMMAND_PING_MS / 1000, (COMMAND_PING_MS % 1000) * 1000};
		if (sc->ping)
			event_add(sc->ping, &tv);
	}
	stream_pump(sc);
}

/* ----- POST /command ----- */

static void send_background_ack(struct evhttp_request *req, struct execution *ex)
{
	struct sbuf b = {0};
	int64_t now = time_now_ms();
	stream_event_text(&b, "init", ex->id, strlen(ex->id), now);
	stream_event_complete(&b, ex->running ? 0 : exec_elapsed_ms(ex), now);
	stream_headers(req);
	struct evbuffer *out = evbuffer_new();
	evhttp_send_reply_start(req, 200, "OK");
	if (out) {
		evbuffer_add(out, b.data, b.len);
		evhttp_send_reply_chunk(req, out);
		evbuffer_free(out);
	}
	evhttp_send_reply_end(req);
	sbuf_clear(&b);
}

#define BAD(...)                                                                                   \
	do {                                                                                       \
		http_send_error(req, 400, WIRE_CODE(INVALID_REQUEST_BODY), __VA_ARGS__);           \
		return;                                                                            \
	} while (0)

static bool get_u32(json_t *v, uint32_t *ret)
{
	if (!json_is_integer(v))
		return false;
	json_int_t i = json_integer_value(v);
	if (i < 0 || i > (json_int_t)UINT32_MAX)
		return false;
	*ret = (uint32_t)i;
	return true;
}

void command_run(struct evhttp_request *req)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	if (in && evbuffer_get_length(in) > COMMAND_MAX_BODY) {
		http_send_error(req, 413, WIRE_CODE(INVALID_REQUEST_BODY), "request body too large (limit %u bytes)",
				COMMAND_MAX_BODY);
		return;
	}
	char msg[512];
	json_t *body = NULL;
	if (http_body_json(req, false, &body, msg, sizeof(msg)) < 0)
		BAD("%s", msg);
	json_t *j __attribute__((cleanup(json_decrefp))) = body;
	if (!json_is_object(j))
		BAD("request body must be a JSON object");

	struct exec_request r = {0};
	json_t *v = json_object_get(j, "command");
	if (!v)
		BAD("field 'command' is required");
	if (!json_is_string(v) || json_string_length(v) == 0)
		BAD("field 'command' must be a non-empty string");
	if (strlen(json_string_value(v)) != json_string_length(v))
		BAD("field 'command' must not contain NUL characters");
	r.command = json_string_value(v);

	v = json_object_get(j, "cwd");
	if (v && !json_is_null(v)) {
		if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
			BAD("field 'cwd' must be a string");
		r.cwd = json_string_value(v);
	}
	v = json_object_get(j, "background");
	if (v && !json_is_null(v)) {
		if (!json_is_boolean(v))
			BAD("field 'background' must be a boolean");
		r.background = json_is_true(v);
	}
	v = json_object_get(j, "timeout");
	if (v && !json_is_null(v)) {
		if (!json_is_integer(v) || json_integer_value(v) < 0)
			BAD("field 'timeout' must be a non-negative integer (milliseconds)");
		r.timeout_ms = json_integer_value(v);
	}
	uint32_t u;
	char ranges[128];
	v = json_object_get(j, "uid");
	if (v && !json_is_null(v)) {
		if (!get_u32(v, &u))
			BAD("field 'uid' must be an integer between 0 and 4294967294");
		/* Refused here rather than by setuid() in the child after the command was accepted. */
		if (users_id_mapped(false, u, ranges, sizeof(ranges)) < 0)
			BAD("field 'uid': %u is not a user id of this sandbox (valid: %s)", u, ranges);
		r.has_uid = true;
		r.uid = u;
	}
	v = json_object_get(j, "gid");
	if (v && !json_is_null(v)) {
		if (!get_u32(v, &u))
			BAD("field 'gid' must be an integer between 0 and 4294967294");
		if (users_id_mapped(true, u, ranges, sizeof(ranges)) < 0)
			BAD("field 'gid': %u is not a group id of this sandbox (valid: %s)", u, ranges);
		if (!r.has_uid)
			BAD("field 'gid' requires field 'uid'");
		r.has_gid = true;
		r.gid = u;
	}
	v = json_object_get(j, "envs");
	if (v && !json_is_null(v)) {
		if (!json_is_object(v))
			BAD("field 'envs' must be an object of strings");
		const char *k;
		json_t *val;
		json_object_foreach(v, k, val) {
			if (!json_is_string(val))
				BAD("field 'envs': value of '%s' must be a string", k);
			if (!*k || strchr(k, '=') || strlen(k) >= 256)
				BAD("field 'envs': invalid variable name '%s'", k);
			if (strlen(json_string_value(val)) != json_string_length(val))
				BAD("field 'envs': value of '%s' contains a NUL character", k);
		}
		r.envs = v;
	}
	v = json_object_get(j, "output_cap");
	if (v && !json_is_null(v)) {
		if (!json_is_integer(v) || json_integer_value(v) < 1)
			BAD("field 'output_cap' must be a positive integer (bytes)");
		r.output_cap = (uint64_t)json_integer_value(v);
	}
	v = json_object_get(j, "id");
	if (v && !json_is_null(v)) {
		if (!json_is_string(v) || !id_is_hex32(json_string_value(v)))
			BAD("field 'id' must be 32 lowercase hex characters");
		r.id = json_string_value(v);
	}
	bool exclusive = false;
	v = json_object_get(j, "exclusive");
	if (v && !json_is_null(v)) {
		if (!json_is_boolean(v))
			BAD("field 'exclusive' must be a boolean");
		exclusive = json_is_true(v);
	}
	/* Run alone: nothing the workload left running may touch this command (sweep.h). Not again
	 * for a resubmitted id, which exec_start() answers with the first run. */
	struct execution *known = exclusive && r.id ? exec_find(r.id) : NULL;
	if (known) {
		exec_unref(known);
	} else if (exclusive) {
		int n = sweep_others();
		if (n == -EPERM)
			BAD("field 'exclusive': only corral-execd as a sandbox's PID 1 can clear it");
		if (n < 0) {
			http_send_error(req, 503, WIRE_CODE(RUNTIME_ERROR),
					"field 'exclusive': processes kept appearing while the sandbox was cleared; retry");
			return;
		}
		log_info("exclusive command: %d process(es) of the sandbox killed first", n);
	}

	struct error err = {0};
	struct execution *ex = NULL;
	int rc = exec_start(&r, &ex, &err);
	if (rc == -EEXIST) {
		log_info("execution %s: submitted again; not running it twice", ex->id);
	} else if (rc == -EAGAIN) {
		http_send_error(req, 429, WIRE_CODE(RUNTIME_ERROR), "%s", err.msg);
		return;
	} else if (rc == -EXEC_E_NO_PROCESS) { /* issue 12: typed, retryable, id not consumed */
		evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "1");
		http_send_error(req, 503, WIRE_CODE(PROCESS_LIMIT), "%s", err.msg);
		return;
	} else if (rc == -EBUSY) {
		http_send_error(req, 409, WIRE_CODE(RUNTIME_ERROR), "%s", err.msg);
		return;
	} else if (rc == -EINVAL) {
		BAD("%s", err.msg);
	} else if (rc < 0) {
		http_send_error(req, 500, WIRE_CODE(RUNTIME_ERROR), "%s", err.msg);
		exec_unref(ex);
		return;
	}
	if (r.background)
		send_background_ack(req, ex);
	else
		command_stream(req, ex);
	exec_unref(ex);
}

/* ----- DELETE /command?id= ----- */

void command_interrupt(struct evhttp_request *req, struct http_query *q)
{
	const char *id = http_query_get(q, "id");
	if (!id || !*id) {
		http_send_error(req, 400, WIRE_CODE(MISSING_QUERY), "missing query parameter 'id'");
		return;
	}
	struct execution *ex = exec_find(id);
	if (!ex) {
		/* The reference also takes a bash session's id here. */
		int r = session_interrupt(id);
		if (r == 0)
			http_send_empty(req, 200);
		else if (r == -ESRCH)
			http_send_error(req, 500, WIRE_CODE(RUNTIME_ERROR), "bash session %s is not running a command", id);
		else
			http_send_error(req, 500, WIRE_CODE(RUNTIME_ERROR), "no execution or bash session with id '%s'", id);
		return;
	}
	int r = exec_interrupt(ex);
	if (r == -ESRCH)
		http_send_error(req, 500, WIRE_CODE(RUNTIME_ERROR), "execution %s is not running", id);
	else if (r < 0)
		http_send_error(req, 500, WIRE_CODE(RUNTIME_ERROR), "interrupt execution %s: %s", id, strerror(-r));
	else
		http_send_empty(req, 200);
	exec_unref(ex);
}

/* ----- GET /command/status/{id}[?wait=S] ----- */

struct status_waiter {
	struct exec_watch w;
	struct evhttp_request *req;
	struct execution *ex;
	struct event *timer;
};

static void waiter_reply(struct status_waiter *sw)
{
	exec_watch_remove(sw->ex, &sw->w);
	/* Replying to a request whose client left just frees it (evhttp). */
	http_send_json(sw->req, 200, exec_status_json(sw->ex));
	if (sw->timer)
		event_free(sw->timer);
	exec_unref(sw->ex);
	free(sw);
}

static void waiter_notify(struct exec_watch *w, struct execution *ex)
{
	if (!ex->running)
		waiter_reply((struct status_waiter *)w);
}

static void waiter_timeout(evutil_socket_t fd, short what, void *arg)
{
	waiter_reply(arg);
}

void command_status(struct evhttp_request *req, const char *id, struct http_query *q)
{
	struct execution *ex = exec_find(id);
	if (!ex) {
		http_send_error(req, 404, WIRE_CODE(INVALID_REQUEST_BODY), "no execution with id '%s'", id);
		return;
	}
	const char *w = http_query_get(q, "wait");
	double wait_s = 0;
	if (w && *w) {
		char *end;
		wait_s = strtod(w, &end);
		if (*end || wait_s != wait_s || wait_s < 0) {
			exec_unref(ex);
			http_send_error(req, 400, WIRE_CODE(INVALID_REQUEST_BODY),
					"query parameter 'wait' must be a number of seconds (0-%d)",
					COMMAND_STATUS_WAIT_MAX_S);
			return;
		}
		if (wait_s > COMMAND_STATUS_WAIT_MAX_S)
			wait_s = COMMAND_STATUS_WAIT_MAX_S;
	}
	if (!ex->running || wait_s <= 0) {
		http_send_json(req, 200, exec_status_json(ex));
		exec_unref(ex);
		return;
	}
	struct status_waiter *sw = calloc(1, sizeof(*sw));
	if (!sw) {
		exec_unref(ex);
		http_send_error(req, 500, WIRE_CODE(RUNTIME_ERROR), "out of memory");
		return;
	}
	sw->req = req;
	sw->ex = ex;
	sw->w.notify = waiter_notify;
	sw->timer = evtimer_new(execd_base, waiter_timeout, sw);
	int64_t us = (int64_t)(wait_s * 1e6);
	struct timeval tv = {us / 1000000, us % 1000000};
	if (sw->timer)
		evtimer_add(sw->timer, &tv);
	exec_watch_add(ex, &sw->w);
}

/* ----- GET /command/{id}/logs?cursor=N ----- */

void command_logs(struct evhttp_request *req, const char *id, struct http_query *q)
{
	struct execution *ex = exec_find(id);
	if (!ex) {
		http_send_error(req, 400, WIRE_CODE(INVALID_REQUEST_BODY), "no execution with id '%s'", id);
		return;
	}
	if (!ex->background) {
		http_send_error(req, 400, WIRE_CODE(INVALID_REQUEST_BODY),
				"execution %s is not running in background; its output was streamed", id);
		exec_unref(ex);
		return;
	}
	const char *c = http_query_get(q, "cursor");
	uint64_t cursor = 0;
	if (c && *c) {
		char *end;
		errno = 0;
		long long v = strtoll(c, &end, 10);
		if (!errno && !*end && v > 0)
			cursor = (uint64_t)v;
	}
	char path[PATH_MAX];
	exec_path(ex, "output", path, sizeof(path));
	/* The output file says so in a marker line too; a client that only follows the cursor can
	 * tell from this header. */
	if (ex->out_truncated) {
		char v[64];
		snprintf(v, sizeof(v), "cap=%" PRIu64 "; dropped=%" PRIu64, ex->out_cap, ex->out_dropped);
		evhttp_add_header(evhttp_request_get_output_headers(req), "EXECD-COMMANDS-OUTPUT-TRUNCATED", v);
	}
	if (ex->store_errno) { /* issue 12: the output could not be stored in full */
		char v[160];
		exec_store_error(ex, v, sizeof(v));
		evhttp_add_header(evhttp_request_get_output_headers(req), "EXECD-COMMANDS-OUTPUT-ERROR", v);
	}
	struct evbuffer *out = evbuffer_new();
	if (!out) {
		exec_unref(ex);
		http_send_error(req, 500, WIRE_CODE(RUNTIME_ERROR), "out of memory");
		return;
	}
	uint64_t next = cursor;
	/* Until its files exist (created off the command's path), the output is held in memory. */
	int fd = -1;
	if (!ex->files_ready) {
		if (ex->early_out.len > cursor && evbuffer_add(out, ex->early_out.data + cursor,
							       ex->early_out.len - cursor) == 0)
			next = ex->early_out.len;
	} else {
		fd = open(path, O_RDONLY | O_CLOEXEC);
	}
	exec_unref(ex);
	struct stat st;
	if (fd >= 0 && fstat(fd, &st) == 0 && (uint64_t)st.st_size > cursor) {
		uint64_t len = MIN((uint64_t)st.st_size - cursor, (uint64_t)LOGS_MAX_REPLY);
		/* evbuffer takes the fd: the bytes go out by sendfile, never all in memory. */
		if (evbuffer_add_file(out, fd, (ev_off_t)cursor, (ev_off_t)len) == 0) {
			fd = -1;
			next = cursor + len;
		}
	}
	if (fd >= 0)
		close(fd);
	char cur[32];
	snprintf(cur, sizeof(cur), "%" PRIu64, next);
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);
	evhttp_add_header(h, "Content-Type", "text/plain; charset=utf-8");
	evhttp_add_header(h, "EXECD-COMMANDS-TAIL-CURSOR", cur);
	evhttp_send_reply(req, 200, "OK", out);
	evbuffer_free(out);
}
