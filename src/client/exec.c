/*
 * Commands, exactly once. The client chooses the execution id and sends it as "id"; corral-execd
 * treats a repeated id as the same execution (re-attaches to it, never starts it twice), so a
 * submit that failed anywhere is resubmitted with the same id. A re-attached foreground stream
 * replays the execution's events from the start: the events already delivered are skipped, so
 * callbacks see every line exactly once.
 *
 * Whether the server honours the id is learnt once per client, with an idempotent probe
 * (a background "true" under a chosen id: the init event echoes the id or not). Against a
 * server without id support a submit is retried only when nothing had been sent.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "shared/id.h"

#define EXECD "/proxy/44772"
#define DEADLINE_HEADROOM_MS 60000

CORRAL_API void corral_exec_opts_init(corral_exec_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->uid = -1;
}

CORRAL_API int corral_exec_id_new(char ret[CORRAL_EXEC_ID_LEN])
{
	return id_hex32(ret);
}

CORRAL_API void corral_exec_result_clear(corral_exec_result *r)
{
	if (!r)
		return;
	free(r->out);
	free(r->err);
	memset(r, 0, sizeof(*r));
	r->exit_code = -1;
}

/* ---- output accumulation ---- */

struct outbuf {
	char **data;
	size_t *len;
	size_t cap;
	size_t lines;
};

static void out_add(corral_exec_result *res, struct outbuf *o, size_t max, const char *s,
		    size_t n)
{
	size_t need = (o->lines ? 1 : 0) + n;
	if (*o->len + need > max) {
		res->truncated = true;
		return;
	}
	if (*o->len + need + 1 > o->cap) {
		size_t cap = MAX(o->cap * 2, *o->len + need + 1);
		cap = MAX(cap, 256);
		char *nb = realloc(*o->data, cap);
		if (!nb) {
			res->truncated = true;
			return;
		}
		*o->data = nb;
		o->cap = cap;
	}
	if (o->lines)
		(*o->data)[(*o->len)++] = '\n';
	memcpy(*o->data + *o->len, s, n);
	*o->len += n;
	(*o->data)[*o->len] = '\0';
	o->lines++;
}

/* ---- the event stream ---- */

struct run {
	struct corral_sandbox *sb;
	const corral_exec_opts *o;
	corral_exec_result *res;
	struct outbuf out, err;
	char id[CORRAL_EXEC_ID_LEN];     /* the id we sent */
	char server_id[CORRAL_EXEC_ID_LEN]; /* the id the init event named */
	struct events ev;         /* the stream parser: replay skipping, end of the execution */
	bool got_init;
};

/* One event (a JSON object). Returns 1 when it ended the execution. */
static int handle_event(struct run *r, json_t *ev)
{
	const char *type = json_string_value(json_object_get(ev, "type"));
	if (!type)
		return 0;
	const char *text = json_string_value(json_object_get(ev, "text"));
	size_t tlen = text ? json_string_length(json_object_get(ev, "text")) : 0;
	size_t max = r->sb->c->o.max_output_bytes;
	bool keep = !r->o->discard_output;
	bool quiet = corral_cancel_triggered(r->o->cancel); /* no output after a cancel */
	r->res->started = true;
	if (strcmp(type, "init") == 0) {
		r->got_init = true;
		if (text && id_is_hex32(text)) {
			snprintf(r->server_id, sizeof(r->server_id), "%s", text);
			snprintf(r->res->id, sizeof(r->res->id), "%s", text);
		}
		int sup = text && strcmp(text, r->id) == 0 ? 1 : -1;
		atomic_store(&r->sb->c->ids_supported, sup);
	} else if (strcmp(type, "stdout") == 0 && text) {
		if (keep)
			out_add(r->res, &r->out, max, text, tlen);
		if (r->o->on_stdout && !quiet)
			r->o->on_stdout(r->o->userdata, text, tlen);
	} else if (strcmp(type, "stderr") == 0 && text) {
		if (keep)
			out_add(r->res, &r->err, max, text, tlen);
		if (r->o->on_stderr && !quiet)
			r->o->on_stderr(r->o->userdata, text, tlen);
	} else if (strcmp(type, "execution_complete") == 0) {
		r->res->exit_code = 0;
		return 1;
	} else if (strcmp(type, "error") == 0) {
		json_t *e = json_object_get(ev, "error");
		const char *ename = json_string_value(json_object_get(e, "ename"));
		const char *evalue = json_string_value(json_object_get(e, "evalue"));
		char *end = NULL;
		long code = evalue ? strtol(evalue, &end, 10) : 0;
		if (ename && strcmp(ename, "CommandExecError") == 0 && evalue && *evalue && !*end) {
			r->res->exit_code = (int)code;
		} else {
			r->res->exit_code = -1;
			snprintf(r->res->error_type, sizeof(r->res->error_type), "sandbox");
			snprintf(r->res->error_message, sizeof(r->res->error_message), "%s: %s",
				 ename ? ename : "Error", evalue ? evalue : "");
		}
		return 1;
	}
	return 0;
}

static int on_event(void *ud, json_t *ev)
{
	return handle_event(ud, ev);
}

static void report_malformed(struct run *r, unsigned long before)
{
	if (r->ev.malformed > before)
		client_log(r->sb->c, 1, "skipping a malformed event from the server: %s",
			   r->ev.last_malformed);
}

static void parse_events(struct run *r, char *buf, size_t *len)
{
	unsigned long before = r->ev.malformed;
	events_parse(&r->ev, buf, len, on_event, r);
	report_malformed(r, before);
}

static void end_events(struct run *r, char *buf, size_t *len)
{
	unsigned long before = r->ev.malformed;
	events_end(&r->ev, buf, len, on_event, r);
	report_malformed(r, before);
}

static char *command_body(const char *command, const char *id, const corral_exec_opts *o,
			  bool background, corral_error *err)
{
	json_t *b __attribute__((cleanup(json_decrefp))) =
		json_pack("{s:s, s:s}", "command", command, "id", id);
	if (!b)
		return NULL;
	if (o->cwd)
		json_object_set_new(b, "cwd", json_string(o->cwd));
	if (o->timeout_s > 0)
		json_object_set_new(b, "timeout", json_integer((json_int_t)(o->timeout_s * 1000)));
	if (o->uid >= 0)
		json_object_set_new(b, "uid", json_integer(o->uid));
	if (background)
		json_object_set_new(b, "background", json_true());
	if (o->exclusive)
		json_object_set_new(b, "exclusive", json_true());
	if (o->env && o->env[0]) {
		json_t *env = json_object();
		for (size_t i = 0; o->env[i]; i++) {
			const char *eq = strchr(o->env[i], '=');
			if (!eq || eq == o->env[i]) {
				json_decref(env);
				cerr_set(err, CORRAL_E_INVALID_ARGUMENT,
					 "env entry '%s': expected KEY=VALUE", o->env[i]);
				return NULL;
			}
			_cleanup_free_ char *k = strndup(o->env[i], (size_t)(eq - o->env[i]));
			json_object_set_new(env, k, json_string(eq + 1));
		}
		json_object_set_new(b, "envs", env);
	}
	return json_dumps(b, JSON_COMPACT);
}

/* An error answer or transport failure of a submit/poll: terminal or worth another try? */
static bool transient(const struct http_resp *rs)
{
	return rs->status == 0 || policy_status_retryable(rs->status);
}

static void backoff(struct corral_client *c, int failures, struct corral_cancel *t)
{
	client_sleep_cancel(t, policy_backoff_s(failures, c->o.operation_retry_delay_s,
						c->o.operation_retry_max_delay_s, client_random()));
}

/* Learns once per client whether the server honours client-chosen ids (idempotent probe). */
static int learn_id_support(struct corral_sandbox *sb, corral_error *err)
{
	struct corral_client *c = sb->c;
	if (atomic_load(&c->ids_supported) != 0)
		return 0;
	char id[CORRAL_EXEC_ID_LEN], path[256];
	if (id_hex32(id) < 0)
		return cerr_set(err, CORRAL_E_NO_MEMORY, "cannot generate an execution id");
	snprintf(path, sizeof(path), "/sandboxes/%s" EXECD "/command", sb->id);
	char body[160];
	snprintf(body, sizeof(body), "{\"command\":\"true\",\"background\":true,\"id\":\"%s\"}", id);
	for (int failures = 1;; failures++) {
		struct http_req rq = {.api_key = true, .method = "POST", .path = path, .body = body,
				      .timeout_ms = (long)(c->o.request_timeout_s * 1000)};
		struct http_resp rs;
		http_do(c, &rq, &rs);
		if (rs.status == 200) {
			/* "{"type":"init","text":"<id>",...}" */
			const char *p = strstr(rs.body, "\"init\"");
			bool same = p && strstr(p, id);
			atomic_store(&c->ids_supported, same ? 1 : -1);
			http_resp_clear(&rs);
			return 0;
		}
		int r = cerr_from_resp(err, &rs, "probe the execd");
		bool again = transient(&rs);
		http_resp_clear(&rs);
		if (!again || failures > c->o.operation_retries)
			return r;
		backoff(c, failures, NULL);
	}
}

/* GET status (optionally long-polling). Returns 0 with *ret (caller decrefs) or an error. */
static int get_status(struct corral_sandbox *sb, const char *id, long wait_s, json_t **ret,
		      struct http_resp *last, corral_error *err)
{
	struct corral_client *c = sb->c;
	char path[256];
	if (wait_s > 0)
		snprintf(path, sizeof(path), "/sandboxes/%s" EXECD "/command/status/%s?wait=%ld",
			 sb->id, id, wait_s);
	else
		snprintf(path, sizeof(path), "/sandboxes/%s" EXECD "/command/status/%s", sb->id, id);
	struct http_req rq = {.api_key = true, .method = "GET", .path = path,
			      .timeout_ms = (long)((wait_s + c->o.status_poll_timeout_s) * 1000)};
	http_do(c, &rq, last);
	if (last->status == 200 && json_is_object(last->json)) {
		*ret = json_incref(last->json);
		return 0;
	}
	char what[160];
	snprintf(what, sizeof(what), "status of execution %s in sandbox %s", id, sb->id);
	int r = cerr_from_resp(err, last, what);
	if (last->status == 404 && err) {
		err->code = CORRAL_E_LOST_EXECUTION;
		r = cerr_errno(CORRAL_E_LOST_EXECUTION);
	}
	return r;
}

/* A non-zero exit under a timeout: was it the server's timeout kill? */
static void check_timeout(struct run *r, const char *id)
{
	if (r->o->timeout_s <= 0 || r->res->exit_code == 0)
		return;
	json_t *st = NULL;
	struct http_resp rs;
	corral_error e;
	if (get_status(r->sb, id, 0, &st, &rs, &e) == 0) {
		const char *msg = json_string_value(json_object_get(st, "error"));
		if (msg && strncmp(msg, "timed out", 9) == 0) {
			snprintf(r->res->error_type, sizeof(r->res->error_type), "timeout");
			snprintf(r->res->error_message, sizeof(r->res->error_message), "%s", msg);
		}
		json_decref(st);
	}
	http_resp_clear(&rs);
}

static int finish_result(struct run *r, corral_error *err)
{
	if (strcmp(r->res->error_type, "timeout") == 0)
		return cerr_set(err, CORRAL_E_COMMAND_TIMEOUT,
				"command %s in sandbox %s: killed at its %.3g s timeout", r->id,
				r->sb->id, r->o->timeout_s);
	return 0;
}

static bool cancelled(const struct run *r)
{
	return corral_cancel_triggered(r->o->cancel);
}

static int run_foreground(struct run *r, const char *body, int64_t deadline, corral_error *err)
{
	struct corral_sandbox *sb = r->sb;
	struct corral_client *c = sb->c;
	char path[256];
	snprintf(path, sizeof(path), "/sandboxes/%s" EXECD "/command", sb->id);
	char what[160];
	snprintf(what, sizeof(what), "command %s in sandbox %s", r->id, sb->id);
	int failures = 0;
	char *buf = NULL;
	size_t cap = 0;
	int ret;
	for (;;) {
		int64_t left = deadline ? deadline - client_now_ms() : 0;
		if (deadline && left <= 0) {
			ret = cerr_set(err, CORRAL_E_COMMAND_TIMEOUT,
				       "%s: no result within its timeout + 60 s", what);
			break;
		}
		/* Without id support a silent resend by libcurl could run the command twice: such
		 * submits go on a new connection. */
		struct http_req rq = {.api_key = true, .method = "POST", .path = path, .body = body,
				      .timeout_ms = deadline ? left : 0, .stall_s = c->o.stream_stall_s,
				      .fresh = atomic_load(&c->ids_supported) != 1,
				      .cancel = r->o->cancel};
		struct xfer *x = NULL;
		int rc = http_stream_start(c, &rq, &x);
		if (rc == -ECANCELED) {
			ret = cerr_set(err, CORRAL_E_CANCELLED, "%s: cancelled", what);
			break;
		}
		if (rc < 0) {
			ret = cerr_set(err, rc == -ESHUTDOWN ? CORRAL_E_SHUTDOWN : CORRAL_E_NO_MEMORY,
				       "submit command: %s", strerror(-rc));
			break;
		}
		r->res->submits++;
		events_reattach(&r->ev);
		unsigned long before = r->ev.delivered;
		size_t len = 0;
		while (!r->ev.finished && !r->ev.overflow && http_stream_next(x, &buf, &len, &cap) > 0) {
			if (http_stream_status(x) != 200)
				continue; /* an error body: read whole, judged below */
			parse_events(r, buf, &len);
		}
		struct http_resp rs;
		http_stream_finish(x, &rs);
		if (rs.status != 200 && len > 0 && !rs.json) {
			/* An error answer: its body went through the stream buffer. */
			free(rs.body);
			rs.body = strndup(buf, len);
			rs.len = rs.body ? len : 0;
			rs.json = json_loadb(buf, len, 0, NULL);
		}
		/* A last event without its closing blank line still counts. */
		if (rs.status == 200 && rs.cc == CURLE_OK && !r->ev.finished)
			end_events(r, buf, &len);
		if (r->ev.finished && !cancelled(r)) {
			http_resp_clear(&rs);
			free(buf);
			check_timeout(r, r->server_id[0] ? r->server_id : r->id);
			return finish_result(r, err);
		}
		if (cancelled(r)) {
			http_resp_clear(&rs);
			ret = cerr_set(err, CORRAL_E_CANCELLED, "%s: cancelled", what);
			break;
		}
		if (r->ev.overflow) {
			http_resp_clear(&rs);
			ret = cerr_set(err, CORRAL_E_PROTOCOL, "%s: an event larger than %u MiB",
				       what, EVENTS_MAX_BLOCK >> 20);
			break;
		}
		if (rs.status == 200 && rs.cc == CURLE_OK)
			ret = cerr_set(err, CORRAL_E_CONNECTION,
				       "%s: the event stream ended without execution_complete or error",
				       what);
		else if (rs.status >= 200 && rs.status < 300)
			ret = cerr_set(err, CORRAL_E_CONNECTION, "%s: %s", what, rs.error);
		else
			ret = cerr_from_resp(err, &rs, what);
		if (err && !err->request_id[0])
			snprintf(err->request_id, sizeof(err->request_id), "%s", rs.request_id);
		/* Resubmit? With id support always (execd re-attaches); without, only when
		 * nothing was sent. An error answer from execd itself (4xx) is final. */
		bool again = (rs.status == 0 || rs.status == 200 || transient(&rs));
		if (atomic_load(&c->ids_supported) != 1 && !rs.sent_nothing)
			again = false;
		http_resp_clear(&rs);
		if (r->ev.delivered > before)
			failures = 0; /* progress: the budget is for failures in a row */
		if (!again || ++failures > c->o.operation_retries + 1)
			break;
		client_log(c, 3, "%s; resubmitting (same id)", err ? err->message : what);
		backoff(c, failures, r->o->cancel);
	}
	free(buf);
	return ret;
}

static int run_background(struct run *r, const char *body, int64_t deadline, corral_error *err)
{
	struct corral_sandbox *sb = r->sb;
	struct corral_client *c = sb->c;
	char path[256];
	snprintf(path, sizeof(path), "/sandboxes/%s" EXECD "/command", sb->id);
	char what[160];
	snprintf(what, sizeof(what), "command %s in sandbox %s", r->id, sb->id);
	int ret;

	/* Submit (the answer is the init event and an immediate completion). */
	for (int failures = 0;;) {
		struct http_req rq = {.api_key = true, .method = "POST", .path = path, .body = body,
				      .timeout_ms = (long)(c->o.request_timeout_s * 1000),
				      .fresh = atomic_load(&c->ids_supported) != 1};
		struct http_resp rs;
		r->res->submits++;
		http_do(c, &rq, &rs);
		if (rs.status == 200) {
			size_t len = rs.len;
			r->ev = (struct events){0};
			parse_events(r, rs.body, &len);
			http_resp_clear(&rs);
			if (!r->got_init) {
				return cerr_set(err, CORRAL_E_PROTOCOL,
						"%s: background submit answered without an init event",
						what);
			}
			break;
		}
		ret = cerr_from_resp(err, &rs, what);
		bool again = transient(&rs);
		if (atomic_load(&c->ids_supported) != 1 && !rs.sent_nothing)
			again = false;
		http_resp_clear(&rs);
		if (!again || ++failures > c->o.operation_retries + 1)
			return ret;
		backoff(c, failures, NULL);
	}
	const char *id = r->server_id[0] ? r->server_id : r->id;

	/* Wait: long-poll below the idle timeout, or poll with a growing delay. */
	json_t *st = NULL;
	double delay = c->o.poll_initial_s;
	for (int failures = 0;;) {
		if (cancelled(r)) {
			json_decref(st);
			return cerr_set(err, CORRAL_E_CANCELLED, "%s: cancelled", what);
		}
		int64_t left = deadline ? deadline - client_now_ms() : 0;
		if (deadline && left <= 0)
			return cerr_set(err, CORRAL_E_COMMAND_TIMEOUT,
					"%s: no result within its timeout + 60 s", what);
		bool lp = atomic_load(&c->longpoll_supported) >= 0;
		long wait_s = lp ? policy_status_wait_s(atomic_load(&c->server_keepalive_s),
							 c->o.keepalive_expiry_s)
				 : 0;
		if (deadline && wait_s * 1000 > left)
			wait_s = MAX(1, left / 1000);
		int64_t t0 = client_now_ms();
		struct http_resp rs;
		ret = get_status(sb, id, wait_s, &st, &rs, err);
		/* A 200 whose body is not the status object was damaged on the way: ask again. */
		bool again = ret < 0 && (transient(&rs) || rs.status == 200);
		http_resp_clear(&rs);
		if (ret < 0) {
			if (!again || ++failures > c->o.operation_retries + 1)
				return ret;
			backoff(c, failures, NULL);
			continue;
		}
		failures = 0;
		json_t *running = json_object_get(st, "running");
		if (!json_is_boolean(running)) {
			json_decref(st);
			return cerr_set(err, CORRAL_E_PROTOCOL, "%s: status without 'running'", what);
		}
		if (!json_is_true(running))
			break;
		json_decref(st);
		st = NULL;
		if (lp && wait_s >= 2 && client_now_ms() - t0 < wait_s * 1000 / 2) {
			/* Answered "running" at once: the server does not long-poll. */
			atomic_store(&c->longpoll_supported, -1);
			lp = false;
		}
		if (lp)
			atomic_store(&c->longpoll_supported, 1);
		else {
			client_sleep_s(delay);
			delay = MIN(delay * 1.5, c->o.poll_max_s);
		}
	}
	json_t *ec = json_object_get(st, "exit_code");
	r->res->exit_code = json_is_integer(ec) ? (int)json_integer_value(ec) : -1;
	const char *emsg = json_string_value(json_object_get(st, "error"));
	if (emsg) {
		snprintf(r->res->error_message, sizeof(r->res->error_message), "%s", emsg);
		if (strncmp(emsg, "timed out", 9) == 0)
			snprintf(r->res->error_type, sizeof(r->res->error_type), "timeout");
		else if (!json_is_integer(ec))
			snprintf(r->res->error_type, sizeof(r->res->error_type), "sandbox");
	}
	json_decref(st);

	/* The output: byte-offset cursor until nothing more comes. */
	uint64_t cursor = 0;
	for (int failures = 0;;) {
		char lpath[300];
		snprintf(lpath, sizeof(lpath), "/sandboxes/%s" EXECD "/command/%s/logs?cursor=%llu",
			 sb->id, id, (unsigned long long)cursor);
		struct http_req rq = {.api_key = true, .method = "GET", .path = lpath,
				      .timeout_ms = (long)(c->o.request_timeout_s * 1000)};
		struct http_resp rs;
		http_do(c, &rq, &rs);
		if (rs.status == 200) {
			failures = 0;
			if (rs.len == 0) {
				http_resp_clear(&rs);
				break;
			}
			size_t max = c->o.max_output_bytes;
			size_t room = max > r->res->out_len ? max - r->res->out_len : 0;
			size_t take = MIN(room, rs.len);
			if (take < rs.len)
				r->res->truncated = true;
			if (take) {
				char *nb = realloc(r->res->out, r->res->out_len + take + 1);
				if (nb) {
					memcpy(nb + r->res->out_len, rs.body, take);
					r->res->out_len += take;
					nb[r->res->out_len] = '\0';
					r->res->out = nb;
				}
			}
			cursor += rs.len;
			http_resp_clear(&rs);
			if (r->res->truncated)
				break;
			continue;
		}
		ret = cerr_from_resp(err, &rs, what);
		bool again = transient(&rs);
		http_resp_clear(&rs);
		if (!again || ++failures > c->o.operation_retries + 1)
			return ret;
		backoff(c, failures, NULL);
	}
	return finish_result(r, err);
}

CORRAL_API int corral_exec(corral_sandbox *sb, const char *command, const corral_exec_opts *opts,
			   corral_exec_result *ret, corral_error *err)
{
	corral_exec_opts defaults;
	if (!opts) {
		corral_exec_opts_init(&defaults);
		opts = &defaults;
	}
	memset(ret, 0, sizeof(*ret));
	ret->exit_code = -1;
	if (!sb || !command || !*command)
		return cerr_set(err, CORRAL_E_INVALID_ARGUMENT, "exec: no sandbox or empty command");
	struct run r = {.sb = sb, .o = opts, .res = ret};
	r.out = (struct outbuf){.data = &ret->out, .len = &ret->out_len};
	r.err = (struct outbuf){.data = &ret->err, .len = &ret->err_len};
	if (opts->exec_id) {
		if (!id_is_hex32(opts->exec_id))
			return cerr_set(err, CORRAL_E_INVALID_ARGUMENT,
					"exec_id '%s': expected 32 lowercase hex characters",
					opts->exec_id);
		snprintf(r.id, sizeof(r.id), "%s", opts->exec_id);
	} else if (id_hex32(r.id) < 0) {
		return cerr_set(err, CORRAL_E_NO_MEMORY, "cannot generate an execution id");
	}
	snprintf(ret->id, sizeof(ret->id), "%s", r.id);
	_cleanup_free_ char *body = command_body(command, r.id, opts, opts->background, err);
	if (!body)
		return err && err->code ? cerr_errno(err->code)
					: cerr_set(err, CORRAL_E_NO_MEMORY, "out of memory");
	client_op_begin(sb->c);
	int rc = sb->c->o.exec_id_probe ? learn_id_support(sb, err) : 0;
	if (rc == 0) {
		int64_t deadline = opts->timeout_s > 0
					   ? client_now_ms() + (int64_t)(opts->timeout_s * 1000) +
						     DEADLINE_HEADROOM_MS
					   : 0;
		rc = opts->background ? run_background(&r, body, deadline, err)
				      : run_foreground(&r, body, deadline, err);
	}
	client_op_end(sb->c);
	events_clear(&r.ev);
	if (rc < 0 && cancelled(&r)) {
		/* Stop what may run on: by the id the server named, or by ours when it may honour
		 * it. */
		const char *id = r.server_id[0] ? r.server_id
				 : atomic_load(&sb->c->ids_supported) >= 0 && ret->submits ? r.id
											    : NULL;
		corral_error ie;
		ret->stopped = !ret->submits;
		if (!id)
			rc = cerr_set(err, CORRAL_E_CANCELLED, "command in sandbox %s: cancelled%s",
				      sb->id, ret->submits ? "; the server did not name it, so it could not be stopped" : " before it was sent");
		else if (corral_exec_interrupt(sb, id, &ie) < 0)
			rc = cerr_set(err, CORRAL_E_CANCELLED,
				      "command %s in sandbox %s: cancelled, but stopping it failed: %s",
				      id, sb->id, ie.message);
		else {
			ret->stopped = true;
			rc = cerr_set(err, CORRAL_E_CANCELLED,
				      "command %s in sandbox %s: cancelled and stopped", id, sb->id);
		}
	}
	if (rc == 0 && err)
		memset(err, 0, sizeof(*err));
	return rc;
}

CORRAL_API int corral_exec_logs(corral_sandbox *sb, const char *exec_id, uint64_t cursor,
				char **ret_data, size_t *ret_len, uint64_t *ret_next,
				corral_error *err)
{
	if (!sb || !exec_id || !id_is_hex32(exec_id))
		return cerr_set(err, CORRAL_E_INVALID_ARGUMENT,
				"execution id '%s': expected 32 lowercase hex characters",
				exec_id ? exec_id : "");
	struct corral_client *c = sb->c;
	char path[300];
	snprintf(path, sizeof(path), "/sandboxes/%s" EXECD "/command/%s/logs?cursor=%llu", sb->id,
		 exec_id, (unsigned long long)cursor);
	char what[160];
	snprintf(what, sizeof(what), "output of execution %s in sandbox %s", exec_id, sb->id);
	for (int failures = 0;;) {
		struct http_req rq = {.api_key = true, .method = "GET", .path = path,
				      .timeout_ms = (long)(c->o.request_timeout_s * 1000)};
		struct http_resp rs;
		http_do(c, &rq, &rs);
		if (rs.status == 200) {
			*ret_data = rs.body;
			*ret_len = rs.len;
			*ret_next = cursor + rs.len;
			rs.body = NULL;
			http_resp_clear(&rs);
			return 0;
		}
		int r = cerr_from_resp(err, &rs, what);
		if (rs.status == 400 && err && strstr(err->message, "no execution"))
			err->code = CORRAL_E_LOST_EXECUTION, r = cerr_errno(CORRAL_E_LOST_EXECUTION);
		bool again = transient(&rs);
		http_resp_clear(&rs);
		if (!again || ++failures > c->o.operation_retries + 1)
			return r;
		backoff(c, failures, NULL);
	}
}

CORRAL_API int corral_exec_interrupt(corral_sandbox *sb, const char *exec_id, corral_error *err)
{
	if (!sb || !exec_id || !id_is_hex32(exec_id))
		return cerr_set(err, CORRAL_E_INVALID_ARGUMENT,
				"execution id '%s': expected 32 lowercase hex characters",
				exec_id ? exec_id : "");
	struct corral_client *c = sb->c;
	char path[300], what[160];
	snprintf(path, sizeof(path), "/sandboxes/%s" EXECD "/command?id=%s", sb->id, exec_id);
	snprintf(what, sizeof(what), "stop command %s in sandbox %s", exec_id, sb->id);
	for (int failures = 0;;) {
		struct http_req rq = {.api_key = true, .method = "DELETE", .path = path,
				      .timeout_ms = (long)(c->o.request_timeout_s * 1000)};
		struct http_resp rs;
		http_do(c, &rq, &rs);
		if ((rs.status >= 200 && rs.status < 300) || rs.status == 404) {
			http_resp_clear(&rs);
			return 0;
		}
		int r = cerr_from_resp(err, &rs, what);
		bool again = transient(&rs);
		http_resp_clear(&rs);
		if (!again || ++failures > c->o.operation_retries + 1)
			return r;
		backoff(c, failures, NULL);
	}
}
