#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "corrald/corrald.h"
#include "corrald/idempotency.h"
#include "shared/fsutil.h"
#include "shared/log.h"
#include "shared/quantity.h"
#include "shared/timeutil.h"

#define SANDBOX_JSON_VERSION 1
#define SANDBOX_JSON_MAX (4 * 1024 * 1024)

static const char *const state_names[] = {
	[SB_PENDING] = "Pending",       [SB_RUNNING] = "Running", [SB_PAUSED] = "Paused",
	[SB_STOPPING] = "Stopping",     [SB_TERMINATED] = "Terminated",
	[SB_FAILED] = "Failed",
};

const char *sb_state_name(enum sb_state s)
{
	return (unsigned)s < ARRAY_SIZE(state_names) ? state_names[s] : "Unknown";
}

int sb_state_parse(const char *s, enum sb_state *ret)
{
	for (size_t i = 0; i < ARRAY_SIZE(state_names); i++)
		if (s && strcasecmp(s, state_names[i]) == 0) {
			*ret = (enum sb_state)i;
			return 0;
		}
	return -EINVAL;
}

bool sandbox_visible(const struct sandbox *sb)
{
	return sb->phase != SB_PHASE_DELETING && !sb->delete_requested;
}

bool sandbox_ended(const struct sandbox *sb)
{
	return sb->state == SB_TERMINATED || sb->state == SB_FAILED;
}

struct sandbox *sandbox_new(struct corrald *d, const char *id)
{
	struct sandbox *sb = calloc(1, sizeof(*sb));
	if (!sb)
		return NULL;
	sb->ref = 1;
	sb->d = d;
	sb->watch_fd = -1;
	sb->teardown = (struct worker)WORKER_INIT;
	snprintf(sb->id, sizeof(sb->id), "%s", id);
	snprintf(sb->dir, sizeof(sb->dir), "%s/%s", d->sandboxes_dir, id);
	sandbox_set_handle(sb, NULL);
	return sb;
}

void sandbox_set_handle(struct sandbox *sb, const struct runtime_handle *h)
{
	struct corrald *d = sb->d;
	struct runtime_endpoint ep;
	struct error err = {0};
	if (h)
		sb->handle = *h;
	sb->handle.s[sizeof(sb->handle.s) - 1] = '\0';
	if (d->rt->endpoint(&d->rt_cfg, sb->id, h ? &sb->handle : NULL, &ep, &err) < 0) {
		sb->sock_path[0] = '\0'; /* an invalid id: nothing to connect to */
		sb->execd_pid = 0;
		return;
	}
	snprintf(sb->sock_path, sizeof(sb->sock_path), "%s", ep.path);
	sb->execd_pid = ep.peer_pid;
}

struct sandbox *sandbox_ref(struct sandbox *sb)
{
	if (sb)
		sb->ref++;
	return sb;
}

static void sandbox_free(struct sandbox *sb)
{
	if (sb->death_ev)
		event_free(sb->death_ev);
	if (sb->ttl_ev)
		event_free(sb->ttl_ev);
	if (sb->retry_ev)
		event_free(sb->retry_ev);
	if (sb->watch)
		sb->d->rt->unwatch(sb->watch);
	worker_clear(&sb->teardown);
	free(sb->reason);
	free(sb->message);
	free(sb->image_uri);
	free(sb->rootfs);
	free(sb->auth_user);
	if (sb->auth_pass)
		explicit_bzero(sb->auth_pass, strlen(sb->auth_pass));
	free(sb->auth_pass);
	json_decref(sb->entrypoint);
	json_decref(sb->env);
	json_decref(sb->metadata);
	json_decref(sb->limits);
	json_decref(sb->requests);
	json_decref(sb->extensions);
	json_decref(sb->platform);
	json_decref(sb->volumes);
	free(sb->idem_key);
	sb_egress_free(sb->egress);
	free(sb);
}

void sandbox_unref(struct sandbox *sb)
{
	if (sb && --sb->ref == 0)
		sandbox_free(sb);
}

void sandbox_unrefp(struct sandbox **sb)
{
	sandbox_unref(*sb);
}

static void set_str(char **dst, const char *s)
{
	free(*dst);
	*dst = s ? strdup(s) : NULL;
}

void sandbox_set_status(struct sandbox *sb, enum sb_state state, const char *reason,
			const char *fmt, ...)
{
	sb->state = state;
	set_str(&sb->reason, reason);
	free(sb->message);
	sb->message = NULL;
	if (fmt) {
		va_list ap;
		va_start(ap, fmt);
		if (vasprintf(&sb->message, fmt, ap) < 0)
			sb->message = NULL;
		va_end(ap);
	}
	sb->transition_ms = time_now_ms();
}

static json_t *json_time(int64_t ms)
{
	char buf[RFC3339_MAX];
	time_format_rfc3339(ms, buf);
	return json_string(buf);
}

static json_t *status_json(const struct sandbox *sb)
{
	json_t *st = json_object();
	json_object_set_new(st, "state", json_string(sb_state_name(sb->state)));
	if (sb->reason)
		json_object_set_new(st, "reason", json_string(sb->reason));
	if (sb->message)
		json_object_set_new(st, "message", json_string(sb->message));
	json_object_set_new(st, "lastTransitionAt", json_time(sb->transition_ms));
	return st;
}

json_t *sandbox_to_api(const struct sandbox *sb, bool create_response)
{
	json_t *o = json_object();
	json_object_set_new(o, "id", json_string(sb->id));
	if (!create_response)
		json_object_set_new(o, "image", json_pack("{s:s}", "uri", sb->image_uri));
	json_object_set_new(o, "status", status_json(sb));
	json_object_set(o, "metadata", sb->metadata);
	json_object_set(o, "entrypoint", sb->entrypoint);
	if (sb->platform)
		json_object_set(o, "platform", sb->platform);
	if (sb->has_expiry)
		json_object_set_new(o, "expiresAt", json_time(sb->expires_ms));
	json_object_set_new(o, "createdAt", json_time(sb->created_ms));
	if (sb->net.on) { /* null fields are left out: a loopback-only sandbox has neither */
		json_object_set_new(o, "network", sandbox_net_to_api(sb));
		json_object_set_new(o, "egressMode", json_string(net_mode_name(sb->net.mode)));
		egress_to_api(sb->egress, o);
	}
	return o;
}

/* The sandbox's network as the API shows it (docs/network.md): {"address", "gateway"} of its eth0;
 * null for a loopback-only sandbox. */
json_t *sandbox_net_to_api(const struct sandbox *sb)
{
	if (!sb->net.on)
		return json_null();
	char a[INET_ADDRSTRLEN] = "", gw[INET_ADDRSTRLEN] = "";
	inet_ntop(AF_INET, &sb->net.addr, a, sizeof(a));
	json_t *o = json_pack("{s:s}", "address", a);
	if (sb->d->net) {
		inet_ntop(AF_INET, &sb->d->net->gateway, gw, sizeof(gw));
		json_object_set_new(o, "gateway", json_string(gw));
	}
	return o;
}

/* The record's "resources": the numbers, exactly (JSON integers up to 2^63, as all of them are). */
#define RESOURCE_FIELDS(X)                                                                         \
	X(cpu_limit_millis, "cpuLimitMillis")                                                      \
	X(memory_limit_bytes, "memoryLimitBytes")                                                  \
	X(pids_max, "pidsMax")                                                                     \
	X(cpu_request_millis, "cpuRequestMillis")                                                  \
	X(memory_request_bytes, "memoryRequestBytes")                                              \
	X(disk_limit_bytes, "diskLimitBytes")

static json_t *resources_to_json(const struct sandbox_resources *r)
{
	json_t *o = json_object();
#define X(field, key) json_object_set_new(o, key, json_integer((json_int_t)r->field));
	RESOURCE_FIELDS(X)
#undef X
	return o;
}

static void resources_from_json(json_t *o, struct sandbox_resources *r)
{
#define X(field, key) r->field = (uint64_t)json_integer_value(json_object_get(o, key));
	RESOURCE_FIELDS(X)
#undef X
}

/* A record written before "resources": the numbers from the validated strings it kept. */
static void resources_from_strings(json_t *limits, json_t *requests, struct sandbox_resources *r)
{
	const char *v;
	*r = (struct sandbox_resources){0};
	if ((v = json_string_value(json_object_get(limits, "cpu"))))
		(void)quantity_parse_cpu(v, &r->cpu_limit_millis);
	if ((v = json_string_value(json_object_get(limits, "memory"))))
		(void)quantity_parse_bytes(v, &r->memory_limit_bytes);
	if ((v = json_string_value(json_object_get(limits, "pids")))) {
		char *end;
		unsigned long long n = strtoull(v, &end, 10);
		r->pids_max = *end ? 0 : n;
	}
	if ((v = json_string_value(json_object_get(limits, "ephemeral-storage"))))
		(void)quantity_parse_bytes(v, &r->disk_limit_bytes);
	if ((v = json_string_value(json_object_get(requests, "cpu"))))
		(void)quantity_parse_cpu(v, &r->cpu_request_millis);
	if ((v = json_string_value(json_object_get(requests, "memory"))))
		(void)quantity_parse_bytes(v, &r->memory_request_bytes);
}

/*
 * sandbox.json: everything needed to rebuild the record after a restart. Times are unix ms (exact)
 * with RFC 3339 copies for humans; "status.state" is the API state name.
 */
static json_t *sandbox_to_disk(const struct sandbox *sb)
{
	json_t *o = json_object();
	json_object_set_new(o, "version", json_integer(SANDBOX_JSON_VERSION));
	json_object_set_new(o, "id", json_string(sb->id));
	json_object_set_new(o, "createdAtMs", json_integer(sb->created_ms));
	json_object_set_new(o, "createdAt", json_time(sb->created_ms));
	json_object_set_new(o, "image", json_pack("{s:s}", "uri", sb->image_uri));
	json_object_set_new(o, "rootfs", json_string(sb->rootfs ? sb->rootfs : ""));
	json_object_set_new(o, "hostImage", json_boolean(sb->host_image));
	json_object_set(o, "entrypoint", sb->entrypoint);
	json_object_set(o, "env", sb->env);
	json_object_set(o, "metadata", sb->metadata);
	json_object_set(o, "resourceLimits", sb->limits);
	json_object_set(o, "resourceRequests", sb->requests);
	json_object_set(o, "extensions", sb->extensions);
	if (sb->platform)
		json_object_set(o, "platform", sb->platform);
	json_object_set_new(o, "timeoutSeconds",
			    sb->timeout_s ? json_integer(sb->timeout_s) : json_null());
	if (sb->has_expiry) {
		json_object_set_new(o, "expiresAtMs", json_integer(sb->expires_ms));
		json_object_set_new(o, "expiresAt", json_time(sb->expires_ms));
	} else {
		json_object_set_new(o, "expiresAtMs", json_null());
	}
	json_t *st = status_json(sb);
	json_object_set_new(st, "lastTransitionAtMs", json_integer(sb->transition_ms));
	json_object_set_new(o, "status", st);
	json_object_set_new(o, "handle", json_string(sb->handle.s));
	json_object_set_new(o, "resources", resources_to_json(&sb->res));
	json_object_set_new(o, "oomGroup", json_boolean(sb->oom_group));
	json_object_set_new(o, "deleting", json_boolean(sb->phase == SB_PHASE_DELETING));
	if (sb->idem_key)
		json_object_set_new(o, "idempotency",
				    json_pack("{s:s, s:s}", "key", sb->idem_key, "fingerprint",
					      sb->idem_fp));
	if (sb->net.on) {
		char a[INET_ADDRSTRLEN] = "";
		inet_ntop(AF_INET, &sb->net.addr, a, sizeof(a));
		json_object_set_new(o, "network",
				    json_pack("{s:s, s:s, s:s}", "address", a, "mode",
					      net_mode_name(sb->net.mode), "defaultAction",
					      sb->net.default_action == EGRESS_ALLOW ? "allow" : "deny"));
	}
	if (sb->egress)
		json_object_set_new(o, "egress", egress_to_record(sb->egress));
	return o;
}

int sandbox_save(struct sandbox *sb)
{
	if (sb->waiting)
		return 0; /* a queued create has no directory and is not persisted: admission.h */
	json_t *o = sandbox_to_disk(sb);
	_cleanup_free_ char *s = json_dumps(o, JSON_INDENT(1));
	json_decref(o);
	if (!s)
		return -ENOMEM;
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/sandbox.json", sb->dir);
	int r = fs_write_atomic(path, s, strlen(s), 0600);
	if (r < 0)
		log_error("sandbox %s: write %s: %s", sb->id, path, strerror(-r));
	return r;
}

int sandbox_save_status(int r)
{
	return r == -ENOSPC || r == -EDQUOT ? 507 : 500;
}

static json_t *obj_or_empty(json_t *v)
{
	return json_is_object(v) ? json_incref(v) : json_object();
}

int sandbox_load(struct corrald *d, const char *id, struct sandbox **ret, char *msg, size_t msglen)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s/sandbox.json", d->sandboxes_dir, id);
	_cleanup_free_ char *buf = NULL;
	size_t len;
	int r = fs_read_file(path, SANDBOX_JSON_MAX, &buf, &len);
	if (r < 0) {
		snprintf(msg, msglen, "read %s: %s", path, strerror(-r));
		return r;
	}
	json_error_t jerr;
	json_t *o = json_loadb(buf, len, 0, &jerr);
	if (!o) {
		snprintf(msg, msglen, "parse %s: %s", path, jerr.text);
		return -EINVAL;
	}
	const char *fid = json_string_value(json_object_get(o, "id"));
	const char *uri = json_string_value(json_object_get(json_object_get(o, "image"), "uri"));
	json_t *st = json_object_get(o, "status");
	enum sb_state state;
	if (!fid || strcmp(fid, id) != 0 || !uri || !json_is_array(json_object_get(o, "entrypoint")) ||
	    sb_state_parse(json_string_value(json_object_get(st, "state")), &state) < 0) {
		snprintf(msg, msglen, "%s: missing or inconsistent fields", path);
		json_decref(o);
		return -EINVAL;
	}
	struct sandbox *sb = sandbox_new(d, id);
	if (!sb) {
		json_decref(o);
		return -ENOMEM;
	}
	sb->state = state;
	set_str(&sb->reason, json_string_value(json_object_get(st, "reason")));
	set_str(&sb->message, json_string_value(json_object_get(st, "message")));
	sb->transition_ms = json_integer_value(json_object_get(st, "lastTransitionAtMs"));
	sb->created_ms = json_integer_value(json_object_get(o, "createdAtMs"));
	json_t *exp = json_object_get(o, "expiresAtMs");
	sb->has_expiry = json_is_integer(exp);
	sb->expires_ms = json_integer_value(exp);
	sb->image_uri = strdup(uri);
	const char *rootfs = json_string_value(json_object_get(o, "rootfs"));
	sb->rootfs = strdup(rootfs ? rootfs : "");
	sb->host_image = json_is_true(json_object_get(o, "hostImage"));
	sb->registry_image = !sb->host_image && sb->rootfs && sb->rootfs[0] && sb->rootfs[0] != '/';
	sb->entrypoint = json_incref(json_object_get(o, "entrypoint"));
	sb->env = obj_or_empty(json_object_get(o, "env"));
	sb->metadata = obj_or_empty(json_object_get(o, "metadata"));
	sb->limits = obj_or_empty(json_object_get(o, "resourceLimits"));
	sb->requests = obj_or_empty(json_object_get(o, "resourceRequests"));
	sb->extensions = obj_or_empty(json_object_get(o, "extensions"));
	json_t *res = json_object_get(o, "resources");
	if (json_is_object(res))
		resources_from_json(res, &sb->res);
	else
		resources_from_strings(sb->limits, sb->requests, &sb->res);
	json_t *pl = json_object_get(o, "platform");
	sb->platform = json_is_object(pl) ? json_incref(pl) : NULL;
	sb->timeout_s = json_integer_value(json_object_get(o, "timeoutSeconds"));
	/* Records before handles have "pid" and "starttime" instead: an empty handle, which the
	 * runtime resolves by the sandbox's id (the native one from its own pid file). */
	struct runtime_handle h = {{0}};
	const char *hs = json_string_value(json_object_get(o, "handle"));
	if (hs && strlen(hs) < sizeof(h.s))
		memcpy(h.s, hs, strlen(hs));
	sandbox_set_handle(sb, &h);
	sb->oom_group = json_is_true(json_object_get(o, "oomGroup"));
	sb->phase = json_is_true(json_object_get(o, "deleting")) ? SB_PHASE_DELETING : SB_PHASE_LIVE;
	json_t *idem = json_object_get(o, "idempotency");
	const char *ikey = json_string_value(json_object_get(idem, "key"));
	const char *ifp = json_string_value(json_object_get(idem, "fingerprint"));
	if (ikey && ifp && strlen(ifp) < sizeof(sb->idem_fp)) {
		sb->idem_key = strdup(ikey);
		snprintf(sb->idem_fp, sizeof(sb->idem_fp), "%s", ifp);
	}
	json_t *net = json_object_get(o, "network");
	if (json_is_object(net)) {
		const char *a = json_string_value(json_object_get(net, "address"));
		const char *m = json_string_value(json_object_get(net, "mode"));
		const char *da = json_string_value(json_object_get(net, "defaultAction"));
		if (!a || inet_pton(AF_INET, a, &sb->net.addr) != 1 || !m ||
		    net_mode_parse(m, &sb->net.mode) < 0) {
			snprintf(msg, msglen, "%s: bad network field", path);
			json_decref(o);
			sandbox_unref(sb);
			return -EINVAL;
		}
		sb->net.on = true;
		sb->net.default_action = da && strcmp(da, "deny") == 0 ? EGRESS_DENY : EGRESS_ALLOW;
	}
	struct error eerr = {0};
	r = egress_from_record(json_object_get(o, "egress"), &sb->egress, &eerr);
	json_decref(o);
	if (r < 0) {
		snprintf(msg, msglen, "%s: %s", path, eerr.msg);
		sandbox_unref(sb);
		return r;
	}
	if (sb->egress) /* a chain re-made at re-adoption gets the policy, not just its default */
		sb->net.policy = &sb->egress->policy;
	if (!sb->image_uri || !sb->rootfs) {
		sandbox_unref(sb);
		return -ENOMEM;
	}
	*ret = sb;
	return 0;
}

/* Keep the list sorted by createdAt, newest first (listing wants that order). */
void registry_add(struct corrald *d, struct sandbox *sb)
{
	struct sandbox *it;
	sandbox_ref(sb);
	sb->in_registry = true;
	d->n_sandboxes++;
	TAILQ_FOREACH(it, &d->sandboxes, link)
		if (it->created_ms <= sb->created_ms) {
			TAILQ_INSERT_BEFORE(it, sb, link);
			return;
		}
	TAILQ_INSERT_TAIL(&d->sandboxes, sb, link);
}

void registry_remove(struct corrald *d, struct sandbox *sb)
{
	if (!sb->in_registry)
		return;
	if (sb->idem_key && sb->state != SB_PENDING) {
		/* It was made: a repeat of its create learns that it is gone, not makes another. */
		struct idem_answer a = {.status = 409, .code = "SANDBOX::DELETED"};
		snprintf(a.fp, sizeof(a.fp), "%s", sb->idem_fp);
		snprintf(a.message, sizeof(a.message),
			 "sandbox %s, made by the create with this Idempotency-Key, has been deleted",
			 sb->id);
		idem_cache_put(sb->idem_key, &a, sb->created_ms, time_now_ms());
	}
	TAILQ_REMOVE(&d->sandboxes, sb, link);
	sb->in_registry = false;
	d->n_sandboxes--;
	sandbox_unref(sb);
}

struct sandbox *registry_find_any(struct corrald *d, const char *id)
{
	struct sandbox *it;
	TAILQ_FOREACH(it, &d->sandboxes, link)
		if (strcmp(it->id, id) == 0)
			return it;
	return NULL;
}

struct sandbox *registry_find(struct corrald *d, const char *id)
{
	struct sandbox *sb = registry_find_any(d, id);
	return sb && sandbox_visible(sb) ? sb : NULL;
}
