/*
 * Sandbox lifecycle: create (ready-verified, retried under one deadline), open, info, delete.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "shared/cpucap.h"
#include "shared/id.h"

#define EXECD_PROXY "/proxy/44772"
#define PING_TIMEOUT_MS 10000L

CORRAL_API void corral_sandbox_spec_init(corral_sandbox_spec *spec)
{
	memset(spec, 0, sizeof(*spec));
	spec->image = "host";
	spec->ttl_s = 3600;
}

CORRAL_API const char *corral_sandbox_id(const corral_sandbox *sb)
{
	return sb ? sb->id : NULL;
}

CORRAL_API void corral_sandbox_free(corral_sandbox *sb)
{
	free(sb);
}

static json_t *cpu_json(double cpu)
{
	char buf[32];
	if (cpu == floor(cpu))
		snprintf(buf, sizeof(buf), "%.0f", cpu);
	else
		snprintf(buf, sizeof(buf), "%g", cpu);
	return json_string(buf);
}

static json_t *resources(double cpu, long memory_mib)
{
	json_t *r = json_object();
	if (cpu > 0)
		json_object_set_new(r, "cpu", cpu_json(cpu));
	if (memory_mib > 0)
		json_object_set_new(r, "memory", json_sprintf("%ldMi", memory_mib));
	return r;
}

/* "K=V" entries into obj (later entries win); -EINVAL names the bad entry in err. */
static int kv_into(json_t *obj, const char *const *kv, const char *field, bool sanitize,
		   corral_error *err)
{
	for (size_t i = 0; kv && kv[i]; i++) {
		const char *eq = strchr(kv[i], '=');
		if (!eq || eq == kv[i])
			return cerr_set(err, CORRAL_E_INVALID_ARGUMENT,
					"%s entry '%s': expected KEY=VALUE", field, kv[i]);
		_cleanup_free_ char *k = strndup(kv[i], (size_t)(eq - kv[i]));
		_cleanup_free_ char *v = sanitize ? policy_sanitize_label_value(eq + 1)
						  : strdup(eq + 1);
		if (!k || !v)
			return cerr_set(err, CORRAL_E_NO_MEMORY, "out of memory");
		json_object_set_new(obj, k, json_string(v));
	}
	return 0;
}

/* The create body: attribution and CPU caps first, the spec's own entries on top. */
static int create_body(struct corral_client *c, const corral_sandbox_spec *s, const char *attempt,
		       char **ret, corral_error *err)
{
	json_t *b __attribute__((cleanup(json_decrefp))) = json_object();
	json_object_set_new(b, "image", json_pack("{s:s}", "uri", s->image ? s->image : "host"));
	json_t *ep = json_array();
	if (s->entrypoint && s->entrypoint[0]) {
		for (size_t i = 0; s->entrypoint[i]; i++)
			json_array_append_new(ep, json_string(s->entrypoint[i]));
	} else {
		json_array_append_new(ep, json_string("sleep"));
		json_array_append_new(ep, json_string("infinity"));
	}
	json_object_set_new(b, "entrypoint", ep);
	if (s->ttl_s > 0)
		json_object_set_new(b, "timeout", json_integer(s->ttl_s));
	double cpu = s->cpu > 0 ? s->cpu : 1;
	if (s->cpu_quantity && *s->cpu_quantity) {
		/* The CPU-cap variables follow the quantity: "500m" -> 0.5 cores. */
		char *end = NULL;
		double v = strtod(s->cpu_quantity, &end);
		cpu = end && *end == 'm' && !end[1] ? v / 1000 : v;
	} else if (s->cpu_quantity) {
		cpu = 0; /* "": no CPU limit, so no CPU-cap variables */
	}
	json_t *limits = resources(cpu, s->memory_mib > 0 ? s->memory_mib : 512);
	if (s->cpu_quantity)
		json_object_del(limits, "cpu");
	if (s->cpu_quantity && *s->cpu_quantity)
		json_object_set_new(limits, "cpu", json_string(s->cpu_quantity));
	if (s->memory_quantity)
		json_object_del(limits, "memory");
	if (s->memory_quantity && *s->memory_quantity)
		json_object_set_new(limits, "memory", json_string(s->memory_quantity));
	json_object_set_new(b, "resourceLimits", limits);
	if (s->cpu_request > 0 || s->memory_request_mib > 0)
		json_object_set_new(b, "resourceRequests",
				    resources(s->cpu_request, s->memory_request_mib));

	json_t *env = json_object();
	json_object_set_new(b, "env", env);
	char val[32];
	if (c->o.cpu_env && !s->no_cpu_env && policy_cpu_cap_value(cpu, val))
		for (size_t i = 0; i < CPU_CAP_ENV_N; i++)
			json_object_set_new(env, cpu_cap_env_vars[i], json_string(val));
	int r = kv_into(env, s->env, "env", false, err);
	if (r < 0)
		return r;

	json_t *md = json_object();
	json_object_set_new(b, "metadata", md);
	char **labels = corral_client_labels(c);
	if (!labels)
		return cerr_set(err, CORRAL_E_NO_MEMORY, "out of memory");
	r = kv_into(md, (const char *const *)labels, "labels", false, err);
	corral_strv_free(labels);
	if (r < 0)
		return r;
	r = kv_into(md, s->metadata, "metadata", !s->raw_metadata, err);
	if (r < 0)
		return r;
	if (attempt) {
		_cleanup_free_ char *k = NULL;
		if (asprintf(&k, "%sattempt", c->label_prefix) < 0)
			return cerr_set(err, CORRAL_E_NO_MEMORY, "out of memory");
		json_object_set_new(md, k, json_string(attempt));
	}
	*ret = json_dumps(b, JSON_COMPACT);
	return *ret ? 0 : cerr_set(err, CORRAL_E_NO_MEMORY, "out of memory");
}

static struct corral_sandbox *sandbox_new(struct corral_client *c, const char *id)
{
	struct corral_sandbox *sb = calloc(1, sizeof(*sb));
	if (sb) {
		sb->c = c;
		snprintf(sb->id, sizeof(sb->id), "%s", id);
	}
	return sb;
}

/*
 * A create whose answer was lost (the connection failed after the request went out) may still
 * have made a sandbox nobody knows the id of. Each attempt carries a unique label
 * <prefix>attempt=TOKEN, so the sandboxes of a lost attempt are found and deleted before the next
 * attempt. Best effort: what cannot be listed or deleted is left to the TTL.
 */
static void sweep_attempt(struct corral_client *c, const char *token, const char *keep_id)
{
	char path[512];
	snprintf(path, sizeof(path), "/v1/sandboxes?pageSize=200&metadata=%sattempt%%3D%s",
		 c->label_prefix, token);
	/* '/' in the prefix: fine unencoded in a query string; '.' and '-' likewise. */
	for (int attempt = 1; attempt <= c->o.operation_retries + 1; attempt++) {
		struct http_req rq = {.method = "GET", .path = path, .api_key = true,
				      .timeout_ms = (long)(c->o.request_timeout_s * 1000)};
		struct http_resp rs;
		http_do(c, &rq, &rs);
		json_t *items = json_object_get(rs.json, "items");
		if (rs.status == 200 && json_is_array(items)) {
			size_t i;
			json_t *it;
			json_array_foreach(items, i, it) {
				const char *id = json_string_value(json_object_get(it, "id"));
				if (!id || !*id || strchr(id, '/') || strlen(id) >= CORRAL_ID_MAX ||
				    (keep_id && strcmp(id, keep_id) == 0))
					continue;
				if (corral_sandbox_delete_id(c, id, NULL) < 0) {
					client_log(c, 1, "sandbox %s, made by the lost create attempt %s: delete failed; queued for the reaper", id, token);
					struct corral_sandbox *sb = sandbox_new(c, id);
					corral_sandbox_release(sb);
				} else {
					client_log(c, 2, "deleted sandbox %s, made by the lost create attempt %s", id, token);
				}
			}
			http_resp_clear(&rs);
			return;
		}
		bool transient = rs.status == 0 || policy_status_retryable(rs.status);
		http_resp_clear(&rs);
		if (!transient)
			return;
		client_sleep_s(policy_backoff_s(attempt, c->o.operation_retry_delay_s,
						c->o.operation_retry_max_delay_s, client_random()));
	}
}

/* One attempt: POST, then the ping through the proxy. On failure after the POST succeeded,
 * *ret_id holds the id to delete. */
static int create_once(struct corral_client *c, const char *body, const char *key,
		       int64_t deadline_ms,
		       struct corral_cancel *cancel, char ret_id[CORRAL_ID_MAX], bool *ret_unknown,
		       bool *ret_resent, char **ret_json, corral_error *err)
{
	ret_id[0] = '\0';
	*ret_unknown = false;
	*ret_resent = false;
	int64_t left = deadline_ms - client_now_ms();
	struct http_req rq = {.method = "POST", .path = "/v1/sandboxes", .body = body,
			      .api_key = true, .timeout_ms = MAX(1, left), .idempotency_key = key};
	struct http_resp rs;
	int r = http_do(c, &rq, &rs);
	*ret_resent = rs.resent;
	if (r < 0 || (rs.status != 202 && rs.status != 200 && rs.status != 201)) {
		/* No answer although the request went out: the sandbox may exist. */
		*ret_unknown = rs.status == 0 && !rs.sent_nothing;
		r = cerr_from_resp(err, &rs, "create sandbox");
		http_resp_clear(&rs);
		return r;
	}
	const char *id = json_string_value(json_object_get(rs.json, "id"));
	if (!id || !*id || strlen(id) >= CORRAL_ID_MAX || strchr(id, '/')) {
		r = cerr_set(err, CORRAL_E_PROTOCOL, "create sandbox: answer without a valid id");
		*ret_unknown = true;
		http_resp_clear(&rs);
		return r;
	}
	snprintf(ret_id, CORRAL_ID_MAX, "%s", id);
	if (ret_json) {
		free(*ret_json);
		*ret_json = strdup(rs.body);
	}
	http_resp_clear(&rs);

	/* Readiness: corrald answers only when ready; check anyway (other servers do not). */
	char path[256];
	snprintf(path, sizeof(path), "/sandboxes/%s" EXECD_PROXY "/ping", ret_id);
	for (;;) {
		left = deadline_ms - client_now_ms();
		if (left <= 0)
			return cerr_set(err, CORRAL_E_CREATE_TIMEOUT,
					"sandbox %s: execd did not answer /ping before the create deadline",
					ret_id);
		struct http_req pq = {.api_key = true, .method = "GET", .path = path, .timeout_ms = MIN(left, PING_TIMEOUT_MS),
				      .cancel = cancel};
		r = http_do(c, &pq, &rs);
		if (r == 0 && rs.status == 200) {
			http_resp_clear(&rs);
			return 0;
		}
		char what[128];
		snprintf(what, sizeof(what), "sandbox %s: readiness ping", ret_id);
		r = cerr_from_resp(err, &rs, what);
		http_resp_clear(&rs);
		return r;
	}
}

CORRAL_API int corral_sandbox_create(corral_client *c, const corral_sandbox_spec *spec,
				     corral_sandbox **ret, corral_error *err)
{
	return corral_sandbox_create_json(c, spec, ret, NULL, err);
}

/* The attempt tokens whose answer was lost (or resent): their sandboxes may exist unknown. */
struct lost_tokens {
	char t[64][13];
	int n;
};

static void lost_add(struct lost_tokens *l, const char *token)
{
	for (int i = 0; i < l->n; i++)
		if (strcmp(l->t[i], token) == 0)
			return;
	if (l->n < (int)ARRAY_SIZE(l->t))
		snprintf(l->t[l->n++], sizeof(l->t[0]), "%s", token);
}

static void lost_sweep(struct corral_client *c, const struct lost_tokens *l, const char *keep_id)
{
	for (int i = 0; i < l->n; i++)
		sweep_attempt(c, l->t[i], keep_id);
}

CORRAL_API int corral_sandbox_create_json(corral_client *c, const corral_sandbox_spec *spec,
					  corral_sandbox **ret, char **ret_json, corral_error *err)
{
	_cleanup_free_ char *answer = NULL;
	corral_sandbox_spec defaults;
	if (!spec) {
		corral_sandbox_spec_init(&defaults);
		spec = &defaults;
	}
	int r;
	client_op_begin(c);
	int64_t deadline = client_now_ms() + (int64_t)(c->o.create_timeout_s * 1000);
	corral_error last = {0};
	int attempts = 0;
	/*
	 * Every attempt sends an Idempotency-Key; an attempt whose answer was lost repeats the last
	 * one exactly (key, body and attempt label), so a server that honours the key (corrald) gives
	 * back the sandbox the lost answer was about instead of making a second. For servers that do
	 * not, the attempt labels of lost answers are swept at the end, keeping the one returned.
	 */
	char key[HEXID_LEN] = "";
	struct lost_tokens lost = {.n = 0};
	for (int attempt = 1; attempt <= c->o.create_retries + 1; attempt++) {
		if (client_now_ms() >= deadline)
			break;
		attempts++;
		char token[13], id[CORRAL_ID_MAX];
		if (!key[0] && id_hex32(key) < 0)
			snprintf(key, sizeof(key), "%032llx", (unsigned long long)client_now_ms());
		snprintf(token, sizeof(token), "%.12s", key);
		_cleanup_free_ char *body = NULL;
		r = create_body(c, spec, c->o.label_attempts ? token : NULL, &body, err);
		if (r < 0) {
			client_op_end(c);
			return r;
		}
		bool unknown, resent;
		r = create_once(c, body, key, deadline, spec->cancel, id, &unknown, &resent,
				ret_json ? &answer : NULL, &last);
		bool answer_lost = !id[0] && unknown;
		if ((answer_lost || resent) && c->o.label_attempts)
			lost_add(&lost, token);
		if (corral_cancel_triggered(spec->cancel)) {
			if (id[0] && corral_sandbox_delete_id(c, id, NULL) < 0)
				corral_sandbox_release(sandbox_new(c, id));
			lost_sweep(c, &lost, NULL);
			client_op_end(c);
			return cerr_set(err, CORRAL_E_CANCELLED, "create sandbox: cancelled%s%s",
					id[0] ? "; deleted sandbox " : "", id);
		}
		if (r == 0) {
			lost_sweep(c, &lost, id);
			client_op_end(c);
			struct corral_sandbox *sb = sandbox_new(c, id);
			if (!sb) {
				corral_sandbox_delete_id(c, id, NULL);
				return cerr_set(err, CORRAL_E_NO_MEMORY, "out of memory");
			}
			*ret = sb;
			if (ret_json)
				*ret_json = TAKE_PTR(answer);
			return 0;
		}
		/* Without the attempt label a lost answer's sandbox cannot be found on a server that
		 * ignores the key: retrying could leave it behind. */
		if (!id[0] && (unknown || resent) && !c->o.label_attempts)
			break;
		if (id[0]) {
			/* The failed attempt's sandbox goes before the next attempt starts. */
			corral_error de;
			if (corral_sandbox_delete_id(c, id, &de) < 0) {
				corral_sandbox *tmp = sandbox_new(c, id);
				corral_sandbox_release(tmp);
			}
		}
		if (!policy_create_reuse_key(answer_lost))
			key[0] = '\0';
		if (!policy_create_retryable(&last))
			break;
		if (attempt > c->o.create_retries)
			break;
		double d = policy_backoff_s(attempt, c->o.create_retry_delay_s,
					    c->o.create_retry_max_delay_s, client_random());
		double left_s = (double)(deadline - client_now_ms()) / 1000.0;
		if (left_s <= 0)
			break;
		client_log(c, 2, "create attempt %d failed (%s); retrying in %.2f s%s", attempt,
			   last.message, MIN(d, left_s),
			   key[0] ? " with the same Idempotency-Key" : "");
		client_sleep_cancel(spec->cancel, MIN(d, left_s));
		if (corral_cancel_triggered(spec->cancel)) {
			lost_sweep(c, &lost, NULL);
			client_op_end(c);
			return cerr_set(err, CORRAL_E_CANCELLED, "create sandbox: cancelled");
		}
	}
	lost_sweep(c, &lost, NULL);
	client_op_end(c);
	if (attempts == 0)
		last.code = CORRAL_E_CREATE_TIMEOUT;
	if (policy_create_retryable(&last) && client_now_ms() >= deadline) {
		corral_error_code code = last.code == CORRAL_E_CAPACITY_TIMEOUT ? CORRAL_E_CAPACITY_TIMEOUT
										: CORRAL_E_CREATE_TIMEOUT;
		char msg[sizeof(last.message)];
		snprintf(msg, sizeof(msg), "%s", last.message);
		r = cerr_set(err, code, "no ready sandbox within %.0f s (%d attempts; last: %s)",
			     c->o.create_timeout_s, attempts, msg);
		if (err) {
			err->http_status = last.http_status;
			memcpy(err->server_code, last.server_code, sizeof(err->server_code));
			memcpy(err->request_id, last.request_id, sizeof(err->request_id));
			memcpy(err->detail, last.detail, sizeof(err->detail));
		}
		return r;
	}
	if (err) {
		*err = last;
		if (policy_create_retryable(&last)) {
			size_t l = strlen(err->message);
			snprintf(err->message + l, sizeof(err->message) - l, " (after %d attempts)",
				 attempts);
		}
	}
	return cerr_errno(last.code);
}

CORRAL_API int corral_sandbox_delete_id(corral_client *c, const char *id, corral_error *err)
{
	if (!id || !*id || strchr(id, '/'))
		return cerr_set(err, CORRAL_E_INVALID_ARGUMENT, "delete: bad sandbox id");
	char path[256];
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	int r = 0;
	for (int attempt = 1;; attempt++) {
		struct http_req rq = {.method = "DELETE", .path = path, .api_key = true,
				      .timeout_ms = (long)(c->o.request_timeout_s * 1000)};
		struct http_resp rs;
		http_do(c, &rq, &rs);
		if ((rs.status >= 200 && rs.status < 300) || rs.status == 404) {
			http_resp_clear(&rs);
			return 0;
		}
		char what[128];
		snprintf(what, sizeof(what), "delete sandbox %s", id);
		corral_error e;
		r = cerr_from_resp(&e, &rs, what);
		http_resp_clear(&rs);
		bool transient = rs.status == 0 || policy_status_retryable(rs.status);
		if (!transient || attempt > c->o.operation_retries || e.code == CORRAL_E_SHUTDOWN) {
			if (err)
				*err = e;
			return r;
		}
		client_sleep_s(policy_backoff_s(attempt, c->o.operation_retry_delay_s,
						c->o.operation_retry_max_delay_s, client_random()));
	}
}

/* GET /v1/sandboxes/{id}{suffix} with retries of transient failures; a JSON object answer. */
static int get_object(struct corral_client *c, const char *id, const char *suffix, json_t **ret,
		      corral_error *err)
{
	if (!id || !*id || strchr(id, '/') || strchr(id, '?') || strlen(id) >= CORRAL_ID_MAX)
		return cerr_set(err, CORRAL_E_INVALID_ARGUMENT, "'%s': not a sandbox id",
				id ? id : "");
	char path[256];
	snprintf(path, sizeof(path), "/v1/sandboxes/%s%s", id, suffix);
	for (int attempt = 1;; attempt++) {
		struct http_req rq = {.method = "GET", .path = path, .api_key = true,
				      .timeout_ms = (long)(c->o.request_timeout_s * 1000)};
		struct http_resp rs;
		http_do(c, &rq, &rs);
		if (rs.status == 200 && json_is_object(rs.json)) {
			*ret = json_incref(rs.json);
			http_resp_clear(&rs);
			return 0;
		}
		char what[128];
		snprintf(what, sizeof(what), "get sandbox %s%s", id, suffix);
		int r = rs.status == 200 ? cerr_set(err, CORRAL_E_PROTOCOL, "%s: the answer is not a JSON object", what)
					 : cerr_from_resp(err, &rs, what);
		if (rs.status == 200 && err)
			snprintf(err->request_id, sizeof(err->request_id), "%s", rs.request_id);
		http_resp_clear(&rs);
		bool transient = rs.status == 0 || policy_status_retryable(rs.status);
		if (!transient || attempt > c->o.operation_retries)
			return r;
		client_sleep_s(policy_backoff_s(attempt, c->o.operation_retry_delay_s,
						c->o.operation_retry_max_delay_s, client_random()));
	}
}

static int get_sandbox(struct corral_client *c, const char *id, json_t **ret, corral_error *err)
{
	return get_object(c, id, "", ret, err);
}

CORRAL_API int corral_sandbox_stats_json(corral_client *c, const char *id, char **ret_json,
					 corral_error *err)
{
	json_t *j = NULL;
	int r = get_object(c, id, "/stats", &j, err);
	if (r < 0)
		return r;
	*ret_json = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(j);
	return *ret_json ? 0 : cerr_set(err, CORRAL_E_NO_MEMORY, "out of memory");
}

CORRAL_API int corral_sandbox_get_json(corral_client *c, const char *id, char **ret_json,
				       corral_error *err)
{
	json_t *j = NULL;
	int r = get_sandbox(c, id, &j, err);
	if (r < 0)
		return r;
	*ret_json = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(j);
	return *ret_json ? 0 : cerr_set(err, CORRAL_E_NO_MEMORY, "out of memory");
}

CORRAL_API int corral_sandbox_from_id(corral_client *c, const char *id, corral_sandbox **ret,
				      corral_error *err)
{
	if (!id || !*id || strchr(id, '/') || strchr(id, '?') || strchr(id, '%') ||
	    strlen(id) >= CORRAL_ID_MAX)
		return cerr_set(err, CORRAL_E_INVALID_ARGUMENT, "'%s': not a sandbox id",
				id ? id : "");
	*ret = sandbox_new(c, id);
	return *ret ? 0 : cerr_set(err, CORRAL_E_NO_MEMORY, "out of memory");
}

CORRAL_API int corral_sandbox_open(corral_client *c, const char *id, corral_sandbox **ret,
				   corral_error *err)
{
	json_t *j = NULL;
	int r = get_sandbox(c, id, &j, err);
	if (r < 0)
		return r;
	json_decref(j);
	*ret = sandbox_new(c, id);
	return *ret ? 0 : cerr_set(err, CORRAL_E_NO_MEMORY, "out of memory");
}

CORRAL_API int corral_sandbox_info_get(corral_sandbox *sb, corral_sandbox_info *ret,
				       corral_error *err)
{
	json_t *j = NULL;
	int r = get_sandbox(sb->c, sb->id, &j, err);
	if (r < 0)
		return r;
	memset(ret, 0, sizeof(*ret));
	json_t *st = json_object_get(j, "status");
	const char *s;
	if ((s = json_string_value(json_object_get(st, "state"))))
		snprintf(ret->state, sizeof(ret->state), "%s", s);
	if ((s = json_string_value(json_object_get(st, "reason"))))
		snprintf(ret->reason, sizeof(ret->reason), "%s", s);
	if ((s = json_string_value(json_object_get(st, "message"))))
		snprintf(ret->message, sizeof(ret->message), "%s", s);
	json_decref(j);
	return 0;
}

CORRAL_API int corral_label_prefix_normalize(const char *prefix, char **ret)
{
	return policy_label_prefix(prefix ? prefix : "", ret);
}

CORRAL_API char *corral_label_value_sanitize(const char *value)
{
	return value ? policy_sanitize_label_value(value) : NULL;
}

/* Appends s percent-encoded (everything but unreserved characters). */
static void url_escape_into(char *out, size_t cap, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = strlen(out);
	for (const unsigned char *p = (const unsigned char *)s; *p && n + 4 < cap; p++) {
		if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
		    strchr("-._~", *p)) {
			out[n++] = (char)*p;
		} else {
			out[n++] = '%';
			out[n++] = hex[*p >> 4];
			out[n++] = hex[*p & 15];
		}
	}
	out[n] = '\0';
}

/* Every sandbox object matching the filters, all pages, each id once (pages may shift while
 * they are read). */
static int list_items(struct corral_client *c, const char *const *metadata,
		      const char *const *states, json_t **ret, corral_error *err)
{
	/* The metadata filter is one query parameter holding a url-encoded query string. */
	char inner[2048] = "", filter[8192] = "";
	for (size_t i = 0; metadata && metadata[i]; i++) {
		const char *eq = strchr(metadata[i], '=');
		if (!eq || eq == metadata[i])
			return cerr_set(err, CORRAL_E_INVALID_ARGUMENT,
					"metadata filter '%s': expected key=value", metadata[i]);
		_cleanup_free_ char *k = strndup(metadata[i], (size_t)(eq - metadata[i]));
		if (i)
			strncat(inner, "&", sizeof(inner) - strlen(inner) - 1);
		url_escape_into(inner, sizeof(inner), k);
		strncat(inner, "=", sizeof(inner) - strlen(inner) - 1);
		url_escape_into(inner, sizeof(inner), eq + 1);
	}
	if (*inner) {
		strncat(filter, "&metadata=", sizeof(filter) - strlen(filter) - 1);
		url_escape_into(filter, sizeof(filter), inner);
	}
	for (size_t i = 0; states && states[i]; i++) {
		strncat(filter, "&state=", sizeof(filter) - strlen(filter) - 1);
		url_escape_into(filter, sizeof(filter), states[i]);
	}
	if (strlen(filter) + 8 >= sizeof(filter))
		return cerr_set(err, CORRAL_E_INVALID_ARGUMENT, "list sandboxes: filter too long");
	json_t *all = json_array(), *seen = json_object();
	if (!all || !seen) {
		json_decref(all);
		json_decref(seen);
		return cerr_set(err, CORRAL_E_NO_MEMORY, "out of memory");
	}
	int r = 0;
	for (int page = 1;; page++) {
		char path[8400];
		snprintf(path, sizeof(path), "/v1/sandboxes?page=%d&pageSize=200%s", page, filter);
		json_t *j = NULL;
		for (int attempt = 1;; attempt++) {
			struct http_req rq = {.method = "GET", .path = path, .api_key = true,
					      .timeout_ms = (long)(c->o.request_timeout_s * 1000)};
			struct http_resp rs;
			http_do(c, &rq, &rs);
			if (rs.status == 200 && json_is_array(json_object_get(rs.json, "items"))) {
				j = json_incref(rs.json);
				http_resp_clear(&rs);
				break;
			}
			if (rs.status == 200) {
				r = cerr_set(err, CORRAL_E_PROTOCOL,
					     "list sandboxes: answer without 'items'");
				if (err)
					snprintf(err->request_id, sizeof(err->request_id), "%s",
						 rs.request_id);
			} else {
				r = cerr_from_resp(err, &rs, "list sandboxes");
			}
			bool transient = rs.status == 0 || policy_status_retryable(rs.status);
			http_resp_clear(&rs);
			if (!transient || attempt > c->o.operation_retries)
				goto fail;
			client_sleep_s(policy_backoff_s(attempt, c->o.operation_retry_delay_s,
							c->o.operation_retry_max_delay_s, client_random()));
		}
		size_t i;
		json_t *it, *items = json_object_get(j, "items");
		json_array_foreach(items, i, it) {
			const char *id = json_string_value(json_object_get(it, "id"));
			if (!id || !*id || json_object_get(seen, id))
				continue;
			json_object_set_new(seen, id, json_true());
			json_array_append(all, it);
		}
		bool more = json_is_true(json_object_get(json_object_get(j, "pagination"), "hasNextPage")) &&
			    json_array_size(items) > 0;
		json_decref(j);
		if (!more || page > 100000)
			break;
	}
	json_decref(seen);
	*ret = all;
	return 0;
fail:
	json_decref(seen);
	json_decref(all);
	return r;
}

CORRAL_API int corral_sandbox_list(corral_client *c, const char *const *metadata, char ***ret_ids,
				   corral_error *err)
{
	json_t *all = NULL;
	int r = list_items(c, metadata, NULL, &all, err);
	if (r < 0)
		return r;
	size_t n = json_array_size(all), i;
	char **ids = calloc(n + 1, sizeof(char *));
	json_t *it;
	if (!ids) {
		json_decref(all);
		return cerr_set(err, CORRAL_E_NO_MEMORY, "out of memory");
	}
	json_array_foreach(all, i, it) {
		if (!(ids[i] = strdup(json_string_value(json_object_get(it, "id"))))) {
			corral_strv_free(ids);
			json_decref(all);
			return cerr_set(err, CORRAL_E_NO_MEMORY, "out of memory");
		}
	}
	json_decref(all);
	*ret_ids = ids;
	return 0;
}

CORRAL_API int corral_sandbox_list_json(corral_client *c, const char *const *metadata,
					const char *const *states, char **ret_json,
					corral_error *err)
{
	json_t *all = NULL;
	int r = list_items(c, metadata, states, &all, err);
	if (r < 0)
		return r;
	*ret_json = json_dumps(all, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(all);
	return *ret_json ? 0 : cerr_set(err, CORRAL_E_NO_MEMORY, "out of memory");
}
