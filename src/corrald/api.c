/*
 * The OpenSandbox lifecycle API over evhttp: routing (at / and /v1), auth, request ids, and one
 * handler per route. Handlers validate, act on the registry or start lifecycle work, and reply;
 * nothing here blocks.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/statvfs.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "corrald/corrald.h"
#include "corrald/admission.h"
#include "corrald/filter.h"
#include "corrald/front.h"
#include "corrald/hangup.h"
#include "corrald/idempotency.h"
#include "corrald/stats.h"
#include "corrald/token.h"
#include "corrald/upstream.h"
#include "corrald/validate.h"
#include "shared/httputil.h"
#include "shared/libevent_private.h"
#include "shared/log.h"
#include "shared/timeutil.h"
#include "shared/wire_error.h"

#define REQUEST_ID_MAX 256

/* --- replies ------------------------------------------------------------------------------ */

static void send_verr(struct evhttp_request *req, const struct verr *e, const char *where)
{
	json_t *loc = json_array();
	json_array_append_new(loc, json_string(where));
	for (int i = 0; i < e->nloc; i++)
		json_array_append_new(loc, json_string(e->loc[i]));
	json_t *detail = json_pack("[{s:o, s:s, s:s}]", "loc", loc, "msg", e->msg, "type",
				   "value_error");
	log_debug("%s %s -> %d %s: %s", "request", evhttp_request_get_uri(req), e->status, e->code,
		  e->msg);
	http_send_json(req, e->status,
		       json_pack("{s:s, s:s, s:o}", "code", e->code, "message", e->msg, "detail",
				 detail));
}

static void send_not_found(struct evhttp_request *req, const char *id)
{
	http_send_error(req, 404, WIRE_CODE(SANDBOX_NOT_FOUND), "Sandbox %s not found.", id);
}

static void add_common_headers(struct corrald *d, struct evhttp_request *req)
{
	struct evkeyvalq *out = evhttp_request_get_output_headers(req);
	const char *rid = evhttp_find_header(evhttp_request_get_input_headers(req), "X-Request-ID");
	char buf[REQUEST_ID_MAX + 1] = "";
	if (rid) {
		while (isspace((unsigned char)*rid))
			rid++;
		size_t n = strnlen(rid, REQUEST_ID_MAX);
		while (n > 0 && isspace((unsigned char)rid[n - 1]))
			n--;
		memcpy(buf, rid, n);
		buf[n] = '\0';
	}
	if (!buf[0] || evhttp_add_header(out, "X-Request-ID", buf) < 0) {
		id_hex32(buf);
		evhttp_add_header(out, "X-Request-ID", buf);
	}
	char ka[32];
	snprintf(ka, sizeof(ka), "timeout=%d", d->idle_timeout_s);
	evhttp_add_header(out, "Keep-Alive", ka);
}

/* Constant-time in the length of the configured key; the given key's length leaks nothing more. */
static bool api_key_equal(const char *key, size_t keylen, const char *given)
{
	size_t glen = strlen(given);
	unsigned char diff = keylen != glen;
	for (size_t i = 0; i < keylen; i++)
		diff |= (unsigned char)key[i] ^ (unsigned char)(i < glen ? given[i] : 0);
	return diff == 0;
}

static bool lifecycle_body_ok(struct evhttp_request *req)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	if (!in || evbuffer_get_length(in) <= CORRALD_LIFECYCLE_BODY_MAX)
		return true;
	http_send_error(req, 413, WIRE_CODE(SANDBOX_REQUEST_TOO_LARGE),
			"request body of %zu bytes exceeds the %d byte limit of lifecycle routes",
			evbuffer_get_length(in), CORRALD_LIFECYCLE_BODY_MAX);
	return false;
}

static bool body_json(struct evhttp_request *req, bool allow_empty, json_t **ret)
{
	char msg[512];
	if (http_body_json(req, allow_empty, ret, msg, sizeof(msg)) < 0) {
		struct verr e;
		verr_set(&e, 422, CODE_INVALID_PARAMETER, NULL, "%s", msg);
		send_verr(req, &e, "body");
		return false;
	}
	return true;
}

/* --- POST /sandboxes ---------------------------------------------------------------------- */

/*
 * A create's answer. Its client may give up while the create waits for capacity or is being made:
 * nobody would then learn the sandbox's id, so the sandbox must not be left behind. A queued create
 * is cancelled at once; one being made is rolled back when its runtime work ends (as a DELETE
 * would), or torn down if it was answered 202 to nobody.
 */
struct create_reply {
	struct evhttp_request *req; /* NULL once the client hung up: evhttp freed it */
	struct sandbox *sb;         /* reference */
	struct hangup hup;
	bool joiner; /* a repeat of the create (same Idempotency-Key) waiting for its answer */
	LIST_ENTRY(create_reply) link;
};

/* Every create still to be answered: the request that started it and the repeats that wait. */
static LIST_HEAD(, create_reply) create_replies = LIST_HEAD_INITIALIZER(create_replies);

static bool create_has_listener(const struct sandbox *sb)
{
	struct create_reply *it;
	LIST_FOREACH(it, &create_replies, link)
		if (it->sb == sb && it->req)
			return true;
	return false;
}

static void create_reply_free(struct create_reply *cr)
{
	LIST_REMOVE(cr, link);
	sandbox_unref(cr->sb);
	free(cr);
}

static void send_create_answer(struct evhttp_request *req, struct sandbox *sb, int status,
			       const char *code, const char *msg, bool replayed)
{
	if (replayed)
		evhttp_add_header(evhttp_request_get_output_headers(req), "Idempotent-Replayed",
				  "true");
	if (status == 202) {
		http_send_json(req, 202, sandbox_to_api(sb, true));
		return;
	}
	if (status == 503) /* a transient host limit: retryable */
		evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "5");
	else if (status == 507) /* a full state fs: retryable once space is freed */
		evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "30");
	http_send_error(req, status, code, "%s", msg);
}

static void on_created(struct sandbox *sb, int status, const char *code, const char *msg, void *arg)
{
	struct create_reply *it, *next;
	bool heard = false;
	(void)arg; /* the first of sb's create_replies; the repeats that joined it are answered too */
	if (sb->orphaned) {
		/* Rolled back because every client hung up, not for anything a repeat should hear
		 * again: the key is free for the next attempt. */
		free(sb->idem_key);
		sb->idem_key = NULL;
	}
	if (sb->idem_key && status >= 400 && status < 500 && status != 499) {
		/* Nothing is left of it, and a repeat would fail the same way: answer it alike. */
		struct idem_answer a = {.status = status};
		snprintf(a.fp, sizeof(a.fp), "%s", sb->idem_fp);
		snprintf(a.code, sizeof(a.code), "%s", code);
		snprintf(a.message, sizeof(a.message), "%s", msg);
		idem_cache_put(sb->idem_key, &a, sb->created_ms, time_now_ms());
	}
	for (it = LIST_FIRST(&create_replies); it; it = next) {
		next = LIST_NEXT(it, link);
		if (it->sb != sb)
			continue;
		hangup_unwatch(&it->hup);
		if (it->req) {
			send_create_answer(it->req, sb, status, code, msg, it->joiner);
			heard = true;
		}
		create_reply_free(it);
	}
	if (status == 202 && !heard) {
		/* Acknowledged to nobody: gone as if never made, so a repeat of its create (the key
		 * freed before the delete mark is stored) makes it anew rather than hearing 409. */
		free(sb->idem_key);
		sb->idem_key = NULL;
		lifecycle_teardown(sb, "created, but its client hung up before the answer");
	}
}

static void on_create_hangup(void *arg)
{
	struct create_reply *cr = arg;
	struct sandbox *sb = sandbox_ref(cr->sb);
	cr->req = NULL;
	if (cr->joiner)
		create_reply_free(cr);
	if (create_has_listener(sb)) {
		/* A repeat of the create (same Idempotency-Key) still waits for it. */
		sandbox_unref(sb);
		return;
	}
	if (sb->phase == SB_PHASE_QUEUED || sb->phase == SB_PHASE_CREATING) {
		/* Rolled back for nobody: a repeat of its create may still claim it (Creating), and
		 * its answer is not one a repeat should hear again (on_created frees the key). */
		sb->orphaned = true;
		lifecycle_delete(sb, "its client hung up"); /* may free cr */
	}
	sandbox_unref(sb);
}

/* The newest sandbox made by a create with this Idempotency-Key within the window, deleted or
 * not, or NULL. */
static struct sandbox *idem_find(struct corrald *d, const char *key, int64_t now_ms)
{
	struct sandbox *it;
	TAILQ_FOREACH(it, &d->sandboxes, link)
		if (it->idem_key && strcmp(it->idem_key, key) == 0 &&
		    now_ms - it->created_ms < idem_window_ms())
			return it;
	return NULL;
}

static void send_key_reused(struct evhttp_request *req, const char *key)
{
	http_send_error(req, 422, WIRE_CODE(SANDBOX_IDEMPOTENCY_KEY_REUSED),
			"Idempotency-Key '%s' was already used for a create with a different request body; use a new key for a different request",
			key);
}

/*
 * A repeat of a create with the same Idempotency-Key: answered (true) with what the first one got
 * or will get, or false: no create of that key is known (none yet, or it left nothing behind and
 * no answer worth repeating), so this one goes ahead.
 */
static bool idem_repeat(struct corrald *d, struct evhttp_request *req, const char *key,
			const char *fp)
{
	int64_t now = time_now_ms();
	struct sandbox *sb = idem_find(d, key, now);
	/* A create rolled back (failed, or interrupted by a restart) left no sandbox: not a match. */
	if (sb && sb->phase == SB_PHASE_DELETING && sb->state == SB_PENDING)
		sb = NULL;
	if (sb && strcmp(sb->idem_fp, fp) != 0) {
		send_key_reused(req, key);
		return true;
	}
	if (sb && (sb->phase == SB_PHASE_QUEUED || sb->phase == SB_PHASE_CREATING)) {
		struct create_reply *cr = calloc(1, sizeof(*cr));
		if (!cr) {
			http_send_error(req, 500, WIRE_CODE(GENERAL_OUT_OF_MEMORY), "out of memory");
			return true;
		}
		cr->req = req;
		cr->sb = sandbox_ref(sb);
		cr->joiner = true;
		LIST_INSERT_HEAD(&create_replies, cr, link);
		if (sb->orphaned && sb->delete_requested) {
			sb->orphaned = false;
			sb->delete_requested = false;
			log_info("sandbox %s: a repeat of its create (same Idempotency-Key) claims it: no longer rolled back",
				 sb->id);
		}
		if (evhttp_request_get_connection(req))
			hangup_watch(&cr->hup, evhttp_request_get_connection(req), on_create_hangup,
				     cr);
		log_debug("sandbox %s: a repeat of its create waits for it", sb->id);
		return true;
	}
	if (sb && sb->phase == SB_PHASE_DELETING) {
		evhttp_add_header(evhttp_request_get_output_headers(req), "Idempotent-Replayed",
				  "true");
		http_send_error(req, 409, WIRE_CODE(SANDBOX_DELETED),
				"sandbox %s, made by the create with this Idempotency-Key, has been deleted",
				sb->id);
		return true;
	}
	if (sb) {
		send_create_answer(req, sb, 202, NULL, NULL, true);
		return true;
	}
	struct idem_answer a;
	if (!idem_cache_get(key, now, &a))
		return false;
	if (strcmp(a.fp, fp) != 0) {
		send_key_reused(req, key);
		return true;
	}
	send_create_answer(req, NULL, a.status, a.code, a.message, true);
	return true;
}

/* A POST that starts new work: refused with 503 while corrald shuts down, else its JSON body in
 * *ret (false: the error was sent). */
static bool accepting_body(struct corrald *d, struct evhttp_request *req, json_t **ret)
{
	if (d->shutting_down) {
		http_send_error(req, 503, WIRE_CODE(SANDBOX_SHUTTING_DOWN),
				"corrald is shutting down; retry once it has restarted");
		return false;
	}
	return body_json(req, false, ret);
}

/*
 * The egress policy of a new sandbox with a network: its networkPolicy (validated already) or the
 * server's default. A networkPolicy for a sandbox without a network is refused (nothing could
 * enforce it; such a sandbox reaches nothing beyond its loopback anyway). False when it answered
 * req.
 */
static bool sandbox_egress_init(struct corrald *d, struct sandbox *sb, json_t *network_policy,
				struct evhttp_request *req)
{
	struct error err = {0};
	if (!sb->net.on) {
		if (!network_policy)
			return true;
		struct verr e;
		if (d->net)
			verr_set(&e, 400, CODE_INVALID_PARAMETER,
				 ((const char *const[]){"networkPolicy", NULL}),
				 "networkPolicy needs a network: it cannot go with extensions.network \"none\"");
		else
			verr_set(&e, 400, "SANDBOX::API_NOT_SUPPORTED",
				 ((const char *const[]){"networkPolicy", NULL}),
				 "networkPolicy needs sandbox networking, which this corrald runs without (--sandbox-subnet none)");
		send_verr(req, &e, "body");
		return false;
	}
	if (egress_from_create(d->egress_default, network_policy, &sb->egress, &err) < 0) {
		http_send_error(req, 500, "GENERAL::OUT_OF_MEMORY", "%s", err.msg);
		return false;
	}
	/* in the sandbox's chain from its add (lifecycle.c), whatever the policy API does before */
	sb->net.policy = &sb->egress->policy;
	sb->net.default_action = sb->egress->policy.default_action;
	return true;
}

/*
 * A create that could never be admitted (table, msg from admission_never_fits()) as the client's
 * error. Names the field the client sent: without resourceRequests its limits are the requests.
 */
static void never_fits_verr(enum admission_table table, bool requests_given, const char *msg,
			    struct verr *e)
{
	if (table == ADMISSION_PIDS)
		verr_set(e, 400, WIRE_CODE(SANDBOX_EXCEEDS_HOST_PID_TABLE),
			 ((const char *const[]){"resourceLimits", "pids", NULL}), "%s", msg);
	else if (table == ADMISSION_FILES)
		verr_set(e, 400, WIRE_CODE(SANDBOX_EXCEEDS_HOST_FILE_TABLE), NULL, "%s", msg);
	else if (table == ADMISSION_DISK)
		verr_set(e, 400, WIRE_CODE(SANDBOX_EXCEEDS_DISK_CAPACITY),
			 ((const char *const[]){"resourceLimits", "ephemeral-storage", NULL}),
			 "%s", msg);
	else if (requests_given)
		verr_set(e, 400, WIRE_CODE(SANDBOX_REQUESTS_EXCEED_CAPACITY),
			 ((const char *const[]){"resourceRequests", NULL}), "%s", msg);
	else
		verr_set(e, 400, WIRE_CODE(SANDBOX_REQUESTS_EXCEED_CAPACITY),
			 ((const char *const[]){"resourceLimits", NULL}),
			 "%s (no resourceRequests were given, so they default to resourceLimits)",
			 msg);
}

static void h_create(struct corrald *d, struct evhttp_request *req)
{
	json_t *body = NULL;
	if (!accepting_body(d, req, &body))
		return;
	char key[IDEM_KEY_MAX + 1] = "", fp[IDEM_FP_LEN + 1] = "";
	const char *hkey = evhttp_find_header(evhttp_request_get_input_headers(req),
					      "Idempotency-Key");
	if (hkey && idem_key_parse(hkey, key) < 0) {
		json_decref(body);
		http_send_error(req, 400, WIRE_CODE(SANDBOX_INVALID_IDEMPOTENCY_KEY),
				"Idempotency-Key must be 1 to %d printable ASCII characters, optionally in double quotes",
				IDEM_KEY_MAX);
		return;
	}
	if (key[0] && idem_fingerprint(body, fp) < 0) {
		json_decref(body);
		http_send_error(req, 500, WIRE_CODE(GENERAL_OUT_OF_MEMORY), "out of memory");
		return;
	}
	if (key[0] && idem_repeat(d, req, key, fp)) {
		json_decref(body);
		return;
	}
	struct create_params p;
	struct verr e;
	int r = create_params_parse(body, &p, &e);
	json_decref(body);
	if (r < 0) {
		if (r == -ENOMEM)
			http_send_error(req, 500, WIRE_CODE(GENERAL_OUT_OF_MEMORY), "out of memory");
		else
			send_verr(req, &e, "body");
		return;
	}
	/* The disk limit (explicit or the server's default) against the state fs's free space. */
	struct statvfs sv;
	uint64_t avail = statvfs(d->state_dir, &sv) == 0 ? (uint64_t)sv.f_bavail * sv.f_frsize
							 : UINT64_MAX;
	r = disk_limit_apply(&p, d->default_disk_bytes, d->default_disk, avail, &e);
	if (r < 0) {
		if (r == -ENOMEM)
			http_send_error(req, 500, WIRE_CODE(GENERAL_OUT_OF_MEMORY), "out of memory");
		else
			send_verr(req, &e, "body");
		create_params_clear(&p);
		return;
	}
	/* volumes: host paths against --allow-host-path, sizes against --volume-size. */
	r = volumes_apply(&p, d->host_paths, d->volume_size_bytes, d->volume_size, &e);
	if (r < 0) {
		send_verr(req, &e, "body");
		create_params_clear(&p);
		return;
	}
	char rootfs[PATH_MAX], msg[1536];
	bool host = false, registry = false;
	enum admission_table table;
	const struct sandbox_resources res = {
	    .cpu_limit_millis = p.cpu_limit_millis,
	    .memory_limit_bytes = p.memory_limit_bytes,
	    .pids_max = p.pids_max,
	    .cpu_request_millis = p.cpu_request_millis,
	    .memory_request_bytes = p.memory_request_bytes,
	    .disk_limit_bytes = p.disk_limit_bytes,
	};
	if (admission_never_fits(d, &res, &table, msg, sizeof(msg))) {
		never_fits_verr(table, p.requests_given, msg, &e);
		send_verr(req, &e, "body");
		create_params_clear(&p);
		return;
	}
	if (image_resolve(d, p.image_uri, rootfs, sizeof(rootfs), &host, &registry, msg,
			  sizeof(msg)) < 0) {
		verr_set(&e, 422, CODE_INVALID_PARAMETER, ((const char *const[]){"image", "uri", NULL}),
			 "%s", msg);
		send_verr(req, &e, "body");
		create_params_clear(&p);
		return;
	}
	char id[UUID_STR_LEN];
	struct sandbox *sb = NULL;
	if (id_uuid4(id) < 0 || !(sb = sandbox_new(d, id))) {
		http_send_error(req, 500, WIRE_CODE(GENERAL_OUT_OF_MEMORY), "cannot allocate a sandbox");
		create_params_clear(&p);
		return;
	}
	sb->created_ms = time_now_ms();
	sb->has_expiry = p.has_timeout;
	sb->timeout_s = p.has_timeout ? p.timeout_s : 0;
	sb->expires_ms = p.has_timeout ? sb->created_ms + p.timeout_s * 1000 : 0;
	sb->image_uri = TAKE_PTR(p.image_uri);
	sb->rootfs = strdup(rootfs);
	sb->host_image = host;
	sb->registry_image = registry;
	sb->auth_user = TAKE_PTR(p.auth_user);
	sb->auth_pass = TAKE_PTR(p.auth_pass);
	sb->pull_policy = p.pull_policy;
	sb->entrypoint = TAKE_PTR(p.entrypoint);
	sb->env = TAKE_PTR(p.env);
	sb->metadata = TAKE_PTR(p.metadata);
	sb->limits = TAKE_PTR(p.limits);
	sb->requests = TAKE_PTR(p.requests);
	sb->extensions = TAKE_PTR(p.extensions);
	sb->platform = TAKE_PTR(p.platform);
	sb->oom_group = p.oom_group;
	sb->volumes = TAKE_PTR(p.volumes);
	sb->res = res;
	if (key[0]) {
		sb->idem_key = strdup(key);
		memcpy(sb->idem_fp, fp, sizeof(sb->idem_fp));
	}
	sb->net.on = d->net && !p.network_none;
	sb->net.mode = d->egress_mode;
	sb->net.default_action = d->egress_default;
	if (!sandbox_egress_init(d, sb, p.network_policy, req)) {
		create_params_clear(&p);
		sandbox_unref(sb);
		return;
	}
	registry_add(d, sb);
	struct create_reply *cr =
	    sb->rootfs && (!key[0] || sb->idem_key) ? calloc(1, sizeof(*cr)) : NULL;
	if (cr) {
		cr->req = req;
		cr->sb = sandbox_ref(sb);
		LIST_INSERT_HEAD(&create_replies, cr, link);
	}
	/* lifecycle_create() never answers before it returns: cr is still ours here. */
	r = cr ? lifecycle_create(sb, on_created, cr) : -ENOMEM;
	if (r == 0 && evhttp_request_get_connection(req))
		hangup_watch(&cr->hup, evhttp_request_get_connection(req), on_create_hangup, cr);
	if (r < 0 && cr)
		create_reply_free(cr);
	if (r < 0) {
		log_error("create sandbox %s: %s", id, strerror(-r));
		http_send_error(req, 500, WIRE_CODE(SANDBOX_CREATE_FAILED), "create sandbox %s: %s", id,
				strerror(-r));
		lifecycle_teardown(sb, "create failed");
	}
	create_params_clear(&p);
	sandbox_unref(sb);
}

/* --- /images (extension): the registry images in the store -------------------------------- */

/* A pull ahead of time waits for its pull; a client that hangs up just stops waiting. */
struct image_reply {
	struct evhttp_request *req; /* NULL once the client hung up */
	struct hangup hup;
	char name[800];
};

static void on_image_reply_hangup(void *arg)
{
	struct image_reply *ir = arg;
	ir->req = NULL;
}

static void on_pulled_ahead(int rc, const char *msg, void *arg)
{
	struct image_reply *ir = arg;
	hangup_unwatch(&ir->hup);
	if (!ir->req)
		;
	else if (rc == 0)
		http_send_json(ir->req, 200, json_pack("{s:s, s:s}", "name", ir->name, "status",
						      "Pulled"));
	else if (rc == -ECANCELED)
		http_send_error(ir->req, 503, WIRE_CODE(SANDBOX_SHUTTING_DOWN),
				"corrald is shutting down: the pull of %s was stopped", ir->name);
	else
		http_send_error(ir->req, image_pull_http_status(rc), image_pull_code(rc),
				"pull %s: %s", ir->name, msg);
	free(ir);
}

/* POST /images {"image": {"uri", "auth"?}, "platform"?, "import"?: {"path"}}: 200 once the image
 * is in the store (pulled, or imported from an OCI layout under --import-dir). */
static void h_image_pull(struct corrald *d, struct evhttp_request *req)
{
	json_t *body = NULL;
	if (!accepting_body(d, req, &body))
		return;
	json_t *image = json_object_get(body, "image");
	json_t *auth = json_object_get(image, "auth");
	const char *uri = json_string_value(json_object_get(image, "uri"));
	const char *user = json_string_value(json_object_get(auth, "username"));
	const char *pass = json_string_value(json_object_get(auth, "password"));
	json_t *platform = json_object_get(body, "platform");
	char msg[1024];
	if (!uri || (auth && !json_is_null(auth) && (!user || !pass)) ||
	    (platform && !json_is_null(platform) && !json_is_object(platform))) {
		http_send_error(req, 422, CODE_INVALID_PARAMETER,
				"body must be {\"image\": {\"uri\": string, \"auth\"?: {\"username\": string, \"password\": string}}, \"platform\"?: {\"os\", \"arch\"}}");
		json_decref(body);
		return;
	}
	json_t *import = json_object_get(body, "import");
	const char *ipath = json_string_value(json_object_get(import, "path"));
	if (import && !json_is_null(import) && !ipath) {
		http_send_error(req, 422, CODE_INVALID_PARAMETER,
				"import must be {\"path\": \"<OCI layout directory or tar under --import-dir>\"}");
		json_decref(body);
		return;
	}
	struct image_reply *ir = calloc(1, sizeof(*ir));
	if (!ir) {
		http_send_error(req, 500, WIRE_CODE(GENERAL_OUT_OF_MEMORY), "out of memory");
		json_decref(body);
		return;
	}
	ir->req = req;
	snprintf(ir->name, sizeof(ir->name), "%s", uri);
	json_t *pl = json_is_object(platform) ? platform : NULL;
	int r = ipath ? image_import_start(d, uri, ipath, pl, on_pulled_ahead, ir, msg, sizeof(msg))
		      : image_pull_ahead(d, uri, pl, user, pass, on_pulled_ahead, ir, msg,
					 sizeof(msg));
	json_decref(body);
	if (r < 0) {
		free(ir);
		if (r == -EINVAL || r == -EPERM)
			http_send_error(req, r == -EPERM ? 403 : 422,
					r == -EPERM ? WIRE_CODE(SANDBOX_IMPORT_NOT_ALLOWED)
						    : CODE_INVALID_PARAMETER,
					"%s", msg);
		else
			http_send_error(req, 500, WIRE_CODE(SANDBOX_IMAGE_PULL_FAILED), "start a pull: %s",
					strerror(-r));
		return;
	}
	if (evhttp_request_get_connection(req))
		hangup_watch(&ir->hup, evhttp_request_get_connection(req), on_image_reply_hangup, ir);
}

static void method_not_allowed(struct evhttp_request *req, const char *allow);

static void h_images(struct corrald *d, struct evhttp_request *req)
{
	enum evhttp_cmd_type m = evhttp_request_get_command(req);
	if (m == EVHTTP_REQ_GET) {
		_cleanup_query_ struct http_query *gq = http_query_parse(req);
		const char *one = gq ? http_query_get(gq, "ref") : NULL;
		if (!one) {
			http_send_json(req, 200, json_pack("{s:o, s:o}", "items", image_list_json(d),
							   "pulls", image_pulls_json(d)));
			return;
		}
		/* ?ref=: inspect one image (extension of the extension). */
		json_t *items = NULL;
		char emsg[1024];
		int r = image_inspect_json(d, one, &items, emsg, sizeof(emsg));
		if (r == -ENOENT)
			http_send_error(req, 404, WIRE_CODE(SANDBOX_IMAGE_NOT_FOUND), "%s", emsg);
		else if (r < 0)
			http_send_error(req, 422, CODE_INVALID_PARAMETER, "%s", r == -ENOMEM ? "out of memory" : emsg);
		else
			http_send_json(req, 200, json_pack("{s:o}", "items", items));
		return;
	}
	if (m == EVHTTP_REQ_POST)
		return h_image_pull(d, req);
	if (m != EVHTTP_REQ_DELETE) {
		method_not_allowed(req, "GET, POST, DELETE");
		return;
	}
	_cleanup_query_ struct http_query *q = http_query_parse(req);
	const char *ref = q ? http_query_get(q, "ref") : NULL;
	char msg[1024];
	if (!ref) {
		http_send_error(req, 422, CODE_INVALID_PARAMETER,
				"DELETE /images needs the query parameter ref=<image reference>");
		return;
	}
	int r = image_forget(d, ref, msg, sizeof(msg));
	if (r == -ENOENT)
		http_send_error(req, 404, WIRE_CODE(SANDBOX_IMAGE_NOT_FOUND), "%s", msg);
	else if (r == -EBUSY)
		http_send_error(req, 409, WIRE_CODE(SANDBOX_IMAGE_IN_USE), "%s", msg);
	else if (r < 0)
		http_send_error(req, 422, CODE_INVALID_PARAMETER, "%s", msg);
	else
		http_send_empty(req, 204);
}

/* --- /volumes (extension): named volumes (runtime/volume.h) ------------------------------ */

static void h_volumes(struct corrald *d, struct evhttp_request *req, const char *name)
{
	enum evhttp_cmd_type m = evhttp_request_get_command(req);
	struct error err = {0};
	if (!d->rt->volume_list || !d->rt->volume_delete) {
		http_send_error(req, 501, WIRE_CODE(SANDBOX_API_NOT_SUPPORTED),
				"this runtime keeps no named volumes");
		return;
	}
	if (!name) {
		if (m != EVHTTP_REQ_GET)
			return method_not_allowed(req, "GET");
		struct volume_info *v = NULL;
		size_t n = 0;
		if (d->rt->volume_list(&d->rt_cfg, &v, &n, &err) < 0) {
			log_error("list volumes: %s", err.msg);
			http_send_error(req, 500, WIRE_CODE(VOLUME_LIST_FAILED), "list volumes: %s", err.msg);
			return;
		}
		json_t *items = json_array();
		for (size_t i = 0; items && i < n; i++)
			json_array_append_new(items,
					      json_pack("{s:s, s:I, s:I, s:i, s:b}", "name", v[i].name,
							"sizeBytes", (json_int_t)v[i].size_bytes,
							"usedBytes", (json_int_t)v[i].used_bytes,
							"sandboxes", (int)v[i].users,
							"deleteOnSandboxTermination",
							v[i].delete_on_end));
		free(v);
		http_send_json(req, 200, json_pack("{s:o}", "items", items));
		return;
	}
	if (m != EVHTTP_REQ_DELETE)
		return method_not_allowed(req, "DELETE");
	int r = d->rt->volume_delete(&d->rt_cfg, name, &err);
	if (r == -ENOENT)
		http_send_error(req, 404, WIRE_CODE(VOLUME_NOT_FOUND), "no volume '%s'", name);
	else if (r == -EBUSY)
		http_send_error(req, 409, WIRE_CODE(VOLUME_IN_USE), "%s; delete those sandboxes first",
				err.msg);
	else if (r < 0) {
		log_error("delete volume %s: %s", name, err.msg);
		http_send_error(req, 500, WIRE_CODE(VOLUME_DELETE_FAILED), "delete volume '%s': %s", name,
				err.msg);
	} else {
		log_info("volume %s deleted", name);
		http_send_empty(req, 204);
	}
}

/* --- GET /sandboxes ----------------------------------------------------------------------- */

static const char *metadata_get(const char *key, void *ud)
{
	return json_string_value(json_object_get(ud, key));
}

static void h_list(struct corrald *d, struct evhttp_request *req)
{
	_cleanup_query_ struct http_query *q = http_query_parse(req);
	if (!q) {
		http_send_error(req, 500, WIRE_CODE(GENERAL_OUT_OF_MEMORY), "out of memory");
		return;
	}
	const char *states[FILTER_MAX_STATES];
	size_t nstates = http_query_get_all(q, "state", states, FILTER_MAX_STATES);
	char msg[512];
	unsigned page, page_size;
	struct verr e;
	if (query_parse_uint("page", http_query_get(q, "page"), 1, 1000000000, 1, &page, msg,
			     sizeof(msg)) < 0) {
		verr_set(&e, 422, CODE_INVALID_PARAMETER, ((const char *const[]){"page", NULL}), "%s",
			 msg);
		send_verr(req, &e, "query");
		return;
	}
	if (query_parse_uint("pageSize", http_query_get(q, "pageSize"), 1, PAGE_SIZE_MAX,
			     PAGE_SIZE_DEFAULT, &page_size, msg, sizeof(msg)) < 0) {
		verr_set(&e, 422, CODE_INVALID_PARAMETER, ((const char *const[]){"pageSize", NULL}),
			 "%s", msg);
		send_verr(req, &e, "query");
		return;
	}
	struct meta_filter mf;
	int r = meta_filter_parse(http_query_get(q, "metadata"), &mf, msg, sizeof(msg));
	if (r < 0) {
		if (r == -ENOMEM)
			http_send_error(req, 500, WIRE_CODE(GENERAL_OUT_OF_MEMORY), "out of memory");
		else
			http_send_error(req, 400, WIRE_CODE(INVALID_METADATA_FORMAT), "%s", msg);
		return;
	}
	/* Two passes over the newest-first list: count, then emit the requested page. */
	size_t total = 0;
	struct sandbox *sb;
	TAILQ_FOREACH(sb, &d->sandboxes, link)
		if (sandbox_visible(sb) &&
		    state_filter_match(states, nstates, sb_state_name(sb->state)) &&
		    meta_filter_match(&mf, metadata_get, sb->metadata))
			total++;
	struct page_info pi;
	pagination_compute(total, page, page_size, &pi);
	json_t *items = json_array();
	size_t idx = 0;
	TAILQ_FOREACH(sb, &d->sandboxes, link) {
		if (!sandbox_visible(sb) ||
		    !state_filter_match(states, nstates, sb_state_name(sb->state)) ||
		    !meta_filter_match(&mf, metadata_get, sb->metadata))
			continue;
		if (idx >= pi.offset && idx < pi.offset + pi.count)
			json_array_append_new(items, sandbox_to_api(sb, false));
		if (++idx >= pi.offset + pi.count)
			break;
	}
	meta_filter_clear(&mf);
	json_t *pg = json_pack("{s:I, s:I, s:I, s:I, s:b}", "page", (json_int_t)pi.page, "pageSize",
			       (json_int_t)pi.page_size, "totalItems", (json_int_t)pi.total_items,
			       "totalPages", (json_int_t)pi.total_pages, "hasNextPage", pi.has_next);
	http_send_json(req, 200, json_pack("{s:o, s:o}", "items", items, "pagination", pg));
}

/* --- /sandboxes/{id}/... ------------------------------------------------------------------ */

static void h_get(struct corrald *d, struct evhttp_request *req, struct sandbox *sb)
{
	http_send_json(req, 200, sandbox_to_api(sb, false));
}

/* The network part of a sandbox's stats (docs/network.md): its mode and what the host dropped of
 * its packets (policy or always blocked). Absent for a sandbox without a network. */
static void stats_add_network(struct corrald *d, struct sandbox *sb, json_t *o)
{
	if (!sb->net.on)
		return;
	json_t *n = json_pack("{s:s}", "egressMode", net_mode_name(sb->net.mode));
	uint64_t drops = 0;
	struct error err = {0};
	if (d->net && net_sandbox_drops(d->net, sb->id, &drops, &err) == 0)
		json_object_set_new(n, "droppedPackets", json_integer((json_int_t)drops));
	json_object_set_new(o, "network", n);
}

/* Extension: usage stats from the runtime's probe (works on ended sandboxes too, until deleted:
 * the runtime keeps their numbers until destroy, so the peak and the OOM kills of a dead sandbox
 * can still be read). */
static void h_stats(struct corrald *d, struct evhttp_request *req, struct sandbox *sb)
{
	struct sandbox_probe pr = {0};
	struct error err = {0};
	if (sb->phase == SB_PHASE_QUEUED || sb->phase == SB_PHASE_CREATING) {
		http_send_error(req, 409, WIRE_CODE(SANDBOX_NOT_READY),
				"sandbox %s is still %s; stats are available once it is Running",
				sb->id,
				sb->phase == SB_PHASE_QUEUED ? "waiting for capacity" : "being created");
		return;
	}
	int r = d->rt->probe(&d->rt_cfg, sb->id, &sb->handle, &pr, &err);
	if (r < 0) {
		log_error("stats of sandbox %s: %s", sb->id, err.msg);
		http_send_error(req, 500, WIRE_CODE(SANDBOX_STATS_FAILED), "stats of sandbox %s: %s",
				sb->id, err.msg[0] ? err.msg : strerror(-r));
		return;
	}
	struct stats_disk disk = {.limit_bytes = sb->res.disk_limit_bytes};
	struct sandbox_disk_usage du = {0};
	bool have_disk = d->rt->disk_usage && d->rt->disk_usage(&d->rt_cfg, sb->id, &du, &err) == 0;
	disk.used_bytes = du.used_bytes;
	disk.exact = du.exact;
	json_t *o = stats_to_json(sb->id, sb_state_name(sb->state), &pr, sb->res.cpu_request_millis,
				  sb->res.memory_request_bytes, have_disk ? &disk : NULL);
	if (!o) {
		http_send_error(req, 500, WIRE_CODE(GENERAL_OUT_OF_MEMORY), "out of memory");
		return;
	}
	if (sb->reason)
		json_object_set_new(o, "reason", json_string(sb->reason));
	stats_add_network(d, sb, o);
	egress_stats_add(sb, json_object_get(o, "network"));
	http_send_json(req, 200, o);
}

/* A change whose record could not be stored: it was not made (the caller rolled it back). */
static void send_state_write_failed(struct evhttp_request *req, const struct sandbox *sb, int r,
				    const char *what)
{
	int status = sandbox_save_status(r);
	if (status == 507)
		evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "30");
	http_send_error(req, status, WIRE_CODE(SANDBOX_STATE_WRITE_FAILED),
			"sandbox %s was not %s: its record could not be stored (%s); nothing changed",
			sb->id, what, strerror(-r));
}

static void h_delete(struct corrald *d, struct evhttp_request *req, struct sandbox *sb)
{
	if (sb->phase == SB_PHASE_CREATING)
		sb->orphaned = false; /* deleted: a repeat of its create no longer claims it */
	int r = lifecycle_delete(sb, "deleted");
	if (r < 0) {
		send_state_write_failed(req, sb, r, "deleted");
		return;
	}
	http_send_empty(req, 204);
}

static void h_renew(struct corrald *d, struct evhttp_request *req, struct sandbox *sb)
{
	json_t *body = NULL;
	if (!body_json(req, false, &body))
		return;
	struct verr e;
	int64_t t;
	int r = renew_parse(body, &t, &e);
	json_decref(body);
	if (r < 0) {
		send_verr(req, &e, "body");
		return;
	}
	char ts[RFC3339_MAX];
	time_format_rfc3339(t, ts);
	int64_t now = time_now_ms();
	if (!sb->has_expiry) {
		http_send_error(req, 409, WIRE_CODE(SANDBOX_INVALID_EXPIRATION),
				"sandbox %s does not have automatic expiration enabled (it was created with timeout null: manual cleanup)",
				sb->id);
		return;
	}
	if (t <= now) {
		http_send_error(req, 400, WIRE_CODE(SANDBOX_INVALID_EXPIRATION),
				"expiresAt %s is not in the future", ts);
		return;
	}
	if (t - now > CREATE_TIMEOUT_MAX_S * 1000) {
		http_send_error(req, 400, WIRE_CODE(SANDBOX_INVALID_EXPIRATION),
				"expiresAt %s is more than %lld seconds in the future", ts,
				(long long)CREATE_TIMEOUT_MAX_S);
		return;
	}
	int64_t old = sb->expires_ms;
	sb->expires_ms = t;
	r = sandbox_save(sb);
	if (r < 0) {
		sb->expires_ms = old;
		send_state_write_failed(req, sb, r, "renewed");
		return;
	}
	lifecycle_arm_ttl(sb);
	http_send_json(req, 200, json_pack("{s:s}", "expiresAt", ts));
}

static void h_patch_metadata(struct corrald *d, struct evhttp_request *req, struct sandbox *sb)
{
	json_t *body = NULL, *n = NULL;
	if (!body_json(req, false, &body))
		return;
	struct verr e;
	int r = metadata_merge_patch(sb->metadata, body, &n, &e);
	json_decref(body);
	if (r < 0) {
		send_verr(req, &e, "body");
		return;
	}
	json_t *old = sb->metadata;
	sb->metadata = n;
	r = sandbox_save(sb);
	if (r < 0) {
		sb->metadata = old;
		json_decref(n);
		send_state_write_failed(req, sb, r, "updated");
		return;
	}
	json_decref(old);
	http_send_json(req, 200, sandbox_to_api(sb, false));
}

static void h_pause_resume(struct corrald *d, struct evhttp_request *req, struct sandbox *sb,
			   bool pause)
{
	char msg[768];
	int werr = 0;
	int r = pause ? lifecycle_pause(sb, msg, sizeof(msg), &werr)
		      : lifecycle_resume(sb, msg, sizeof(msg), &werr);
	if (werr < 0) {
		send_state_write_failed(req, sb, werr, pause ? "paused" : "resumed");
	} else if (r == -EBUSY) {
		http_send_error(req, 409,
				pause ? WIRE_CODE(SANDBOX_NOT_RUNNING) : WIRE_CODE(SANDBOX_NOT_PAUSED),
				"%s", msg);
	} else if (r < 0) {
		log_error("%s", msg);
		http_send_error(req, 500,
				pause ? WIRE_CODE(SANDBOX_PAUSE_FAILED) : WIRE_CODE(SANDBOX_RESUME_FAILED),
				"%s", msg);
	} else {
		log_info("sandbox %s: %s", sb->id, pause ? "paused" : "resumed");
		http_send_empty(req, 202);
	}
}

static int parse_port(const char *s)
{
	if (!s || !*s || strlen(s) > 5 || strspn(s, "0123456789") != strlen(s))
		return -EINVAL;
	int p = atoi(s);
	return p >= 1 && p <= 65535 ? p : -ERANGE;
}

static int parse_bool(const char *s, bool *ret)
{
	static const char *const yes[] = {"true", "1", "yes", "on"};
	static const char *const no[] = {"false", "0", "no", "off"};
	for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*ret = true;
			return 0;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*ret = false;
			return 0;
		}
	}
	return -EINVAL;
}

/*
 * Sandboxes have no externally reachable address, so every endpoint is the server-proxy form,
 * whatever use_server_proxy says (a documented difference from the reference): the SDK then talks
 * to {Host}/sandboxes/{id}/proxy/{port}/... on this server. Port 18080 (egress) is answered too.
 */
static void h_endpoint(struct corrald *d, struct evhttp_request *req, struct sandbox *sb,
		       const char *port_s)
{
	int port = parse_port(port_s);
	if (port < 0) {
		http_send_error(req, 400, WIRE_CODE(SANDBOX_INVALID_PORT),
				"port '%s' is not valid: expected an integer from 1 to 65535", port_s);
		return;
	}
	_cleanup_query_ struct http_query *q = http_query_parse(req);
	bool use_proxy = false;
	const char *usp = q ? http_query_get(q, "use_server_proxy") : NULL;
	if (usp && parse_bool(usp, &use_proxy) < 0) {
		struct verr e;
		verr_set(&e, 422, CODE_INVALID_PARAMETER,
			 ((const char *const[]){"use_server_proxy", NULL}),
			 "use_server_proxy must be a boolean (true or false), got '%s'", usp);
		send_verr(req, &e, "query");
		return;
	}
	if (use_proxy && q && http_query_get(q, "expires")) {
		http_send_error(req, 400, CODE_INVALID_PARAMETER,
				"use_server_proxy=true cannot be combined with expires (signed routes)");
		return;
	}
	const char *host = evhttp_find_header(evhttp_request_get_input_headers(req), "Host");
	char ep[1024];
	snprintf(ep, sizeof(ep), "%s/sandboxes/%s/proxy/%d", host && *host ? host : "localhost",
		 sb->id, port);
	json_t *headers = json_object();
	/* The SDKs send an endpoint's headers on every call to it: the proxy route's credential. */
	if (d->api_key) {
		char token[TOKEN_HEX_LEN + 1];
		token_for(d->proxy_secret, sb->id, token);
		json_object_set_new(headers, TOKEN_HEADER, json_string(token));
	}
	/* Port 18080 is corrald's own policy API for the sandbox (egress.c): its token too. */
	if (port == EGRESS_PORT) {
		char et[65];
		egress_token_for(d, sb->id, et);
		json_object_set_new(headers, EGRESS_TOKEN_HEADER, json_string(et));
	}
	if (json_object_size(headers) == 0) {
		json_decref(headers);
		http_send_json(req, 200, json_pack("{s:s}", "endpoint", ep));
		return;
	}
	http_send_json(req, 200, json_pack("{s:s, s:o}", "endpoint", ep, "headers", headers));
}

/* --- the proxy route ---------------------------------------------------------------------- */

/* The sandbox id in ".../sandboxes/{id}/proxy/...", from the request URI. */
static bool proxy_id_of(struct evhttp_request *req, char id[UUID_STR_LEN])
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *p = uri ? evhttp_uri_get_path(uri) : NULL;
	const char *s = p ? strstr(p, "/sandboxes/") : NULL;
	if (!s)
		return false;
	s += strlen("/sandboxes/");
	size_t n = strcspn(s, "/");
	if (n != UUID_STR_LEN - 1)
		return false;
	memcpy(id, s, n);
	id[n] = '\0';
	return true;
}

static void on_proxy_fail(struct evhttp_request *req, enum revproxy_failure why,
			  const char *detail, void *arg)
{
	struct corrald *d = arg;
	char id[UUID_STR_LEN] = "";
	struct sandbox *sb = proxy_id_of(req, id) ? registry_find(d, id) : NULL;
	/* execd closed the connection without answering: PID 1 may be dying, and closes its
	 * sockets a moment before it is reported dead. A long-poll waiting on it (status ?wait=)
	 * must hear SANDBOX::ENDED, not a 502: wait for the death watch a little (rare: a live
	 * execd does not close a request unanswered). */
	if (sb)
		lifecycle_check_alive_within(sb, why == REVPROXY_PROTOCOL_ERROR ? 200 : 0);
	if (sb && sandbox_ended(sb)) {
		http_send_json(req, 410,
			       json_pack("{s:s, s:s, s:s}", "code", WIRE_CODE(SANDBOX_ENDED), "message",
					 sb->message ? sb->message : "the sandbox has ended", "reason",
					 sb->reason ? sb->reason : "Unknown"));
		return;
	}
	if (why == REVPROXY_NO_FDS) {
		/* corrald's own limit, not the sandbox's: transient, retry. */
		log_warn("proxy to sandbox %s: corrald is out of file descriptors: %s", id,
			 detail ? detail : "?");
		evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "1");
		http_send_error(req, 503, WIRE_CODE(SANDBOX_HOST_FD_LIMIT),
				"corrald has no file descriptor free to reach sandbox %s (%s); retry shortly",
				id, detail ? detail : "EMFILE");
		return;
	}
	log_warn("proxy to sandbox %s failed: %s", id, detail ? detail : "unknown error");
	http_send_error(req, 502, WIRE_CODE(SANDBOX_BACKEND_UNREACHABLE),
			"cannot reach corral-execd in sandbox %s: %s", id,
			detail ? detail : "unknown error");
}

/*
 * A proxied reply broke after it started. A command's event stream gets a last error event naming
 * the cause (SANDBOX::ENDED and the reason when PID 1 died) and ends cleanly; anything else is cut.
 */
static bool on_proxy_broken(struct evhttp_request *req, const char *detail, void *arg)
{
	struct corrald *d = arg;
	char id[UUID_STR_LEN] = "";
	struct sandbox *sb = proxy_id_of(req, id) ? registry_find_any(d, id) : NULL;
	if (sb)
		lifecycle_check_alive_within(sb, 200);
	bool ended = sb && sandbox_ended(sb);
	const char *reason = ended && sb->reason ? sb->reason : "Unknown";
	const char *msg = ended && sb->message ? sb->message : "the sandbox has ended";
	log_warn("proxy to sandbox %s broke mid-reply: %s%s%s%s%s", id, detail ? detail : "?",
		 ended ? "; the sandbox ended: " : "", ended ? reason : "", ended ? ": " : "",
		 ended ? msg : "");
	const char *ct = evhttp_find_header(evhttp_request_get_output_headers(req), "Content-Type");
	if (!evhttp_peek_chunked(req) || !ct || !strstr(ct, "text/event-stream"))
		return false;
	json_t *ev = json_pack("{s:s, s:I, s:{s:s, s:s, s:[s]}}", "type", "error", "timestamp",
			       (json_int_t)time_now_ms(), "error", "ename",
			       ended ? WIRE_CODE(SANDBOX_ENDED) : WIRE_CODE(SANDBOX_BACKEND_UNREACHABLE),
			       "evalue",
			       ended ? reason : "StreamBroken", "traceback",
			       ended ? msg : "corral-execd closed the stream before the command ended");
	_cleanup_free_ char *s = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
	json_decref(ev);
	struct evbuffer *b = s ? evbuffer_new() : NULL;
	/* The leading newline ends a line the break may have cut. */
	if (!b || evbuffer_add_printf(b, "\n%s\n\n", s) < 0) {
		if (b)
			evbuffer_free(b);
		return false;
	}
	evhttp_send_reply_chunk(req, b);
	evbuffer_free(b);
	evhttp_send_reply_end(req);
	return true;
}

static void h_proxy(struct corrald *d, struct evhttp_request *req, struct sandbox *sb,
		    const char *port_s, const char *rest)
{
	int port = parse_port(port_s);
	if (port < 0) {
		http_send_error(req, 400, WIRE_CODE(SANDBOX_INVALID_PORT),
				"port '%s' is not valid: expected an integer from 1 to 65535", port_s);
		return;
	}
	if (sandbox_ended(sb)) {
		http_send_json(req, 410,
			       json_pack("{s:s, s:s, s:s}", "code", WIRE_CODE(SANDBOX_ENDED), "message",
					 sb->message ? sb->message : "the sandbox has ended", "reason",
					 sb->reason ? sb->reason : "Unknown"));
		return;
	}
	/* corrald's own policy API: never forwarded into the sandbox, which must not change it. */
	if (port == EGRESS_PORT)
		return egress_api(d, req, sb, rest);
	if (sb->state == SB_PAUSED) {
		/* Its processes are frozen: a call would only wait for the upstream timeout. */
		http_send_error(req, 409, WIRE_CODE(SANDBOX_PAUSED),
				"sandbox %s is paused: resume it first (POST /v1/sandboxes/%s/resume)",
				sb->id, sb->id);
		return;
	}
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *query = uri ? evhttp_uri_get_query(uri) : NULL;
	_cleanup_free_ char *target = NULL;
	int r;
	if (port == EXECD_PORT)
		r = asprintf(&target, "%s%s%s", *rest ? rest : "/", query ? "?" : "",
			     query ? query : "");
	else
		r = asprintf(&target, "/proxy/%d%s%s%s", port, *rest ? rest : "/", query ? "?" : "",
			     query ? query : "");
	if (r < 0) {
		http_send_error(req, 500, WIRE_CODE(GENERAL_OUT_OF_MEMORY), "out of memory");
		return;
	}
	/* corrald's credential for this sandbox is no business of the sandbox */
	while (evhttp_remove_header(evhttp_request_get_input_headers(req), TOKEN_HEADER) == 0)
		;
	upstream_set_broken_cb(on_proxy_broken, d);
	upstream_proxy(d->base, sb->sock_path, sb->execd_pid, req, target, on_proxy_fail, d);
}

/* --- routing ------------------------------------------------------------------------------ */

static const char *method_name(enum evhttp_cmd_type m)
{
	const char *s = http_method_name(m);
	return s ? s : "?";
}

static void method_not_allowed(struct evhttp_request *req, const char *allow)
{
	evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", allow);
	http_send_error(req, 405, WIRE_CODE(GENERAL_METHOD_NOT_ALLOWED),
			"method %s is not allowed here (allowed: %s)",
			method_name(evhttp_request_get_command(req)), allow);
}

/* Split off up to max leading segments of p; *ret_rest points at what follows the last one. */
static int split_segments(const char *p, char segs[][128], int max, const char **ret_rest)
{
	int n = 0;
	while (n < max) {
		while (*p == '/')
			p++;
		if (!*p)
			break;
		size_t len = strcspn(p, "/");
		if (len >= 128)
			return -E2BIG;
		memcpy(segs[n], p, len);
		segs[n][len] = '\0';
		n++;
		p += len;
	}
	*ret_rest = p;
	return n;
}

/* A request's route, from its path alone: what is known once its head is read. */
struct route {
	char segs[4][128];
	const char *rest; /* for the proxy, what follows {port}: it goes upstream */
	const char *path; /* without /v1 */
	int n;            /* segments; -E2BIG: longer than any route */
	bool health, proxy;
};

static void route_parse(struct evhttp_request *req, struct route *rt)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
	if (!path || !*path)
		path = "/";
	if (strncmp(path, "/v1", 3) == 0 && (path[3] == '/' || path[3] == '\0'))
		path += 3;
	rt->path = path;
	rt->rest = "";
	/* Every route has at most 4 segments. */
	rt->n = split_segments(path, rt->segs, 4, &rt->rest);
	rt->proxy = rt->n == 4 && strcmp(rt->segs[0], "sandboxes") == 0 &&
		    strcmp(rt->segs[2], "proxy") == 0;
	if (!rt->proxy && rt->n >= 0 && rt->rest[strspn(rt->rest, "/")] != '\0')
		rt->n = -E2BIG;
	rt->health = rt->n >= 1 && strcmp(rt->segs[0], "health") == 0;
}

/*
 * With an API key every route but /health needs it. The proxy route also takes the sandbox's own
 * token from its endpoint reply (not on paths with "..": those need the key). Returns true when
 * allowed; else fills v with the 401.
 */
static bool auth_ok(struct corrald *d, struct evhttp_request *req, const struct route *rt,
		    struct front_verdict *v)
{
	if (!d->api_key || rt->health)
		return true;
	struct evkeyvalq *h = evhttp_request_get_input_headers(req);
	const char *k = evhttp_find_header(h, "OPEN-SANDBOX-API-KEY");
	if (k && api_key_equal(d->api_key, d->api_key_len, k))
		return true;
	bool token_route = rt->proxy && !strstr(rt->path, "..");
	const char *t = token_route ? evhttp_find_header(h, TOKEN_HEADER) : NULL;
	if (t && token_check(d->proxy_secret, rt->segs[1], t))
		return true;
	v->status = 401;
	if (k) {
		v->code = WIRE_CODE(INVALID_API_KEY);
		snprintf(v->message, sizeof(v->message), "Invalid API key");
	} else if (t) {
		v->code = WIRE_CODE(INVALID_ACCESS_TOKEN);
		snprintf(v->message, sizeof(v->message),
			 "Invalid %s token for sandbox %.64s: use the headers of GET /sandboxes/{id}/endpoints/{port}",
			 TOKEN_HEADER, rt->segs[1]);
	} else if (token_route) {
		v->code = WIRE_CODE(MISSING_API_KEY);
		snprintf(v->message, sizeof(v->message),
			 "Authentication credentials were not provided: send the OPEN-SANDBOX-API-KEY header, or the %s header of GET /sandboxes/{id}/endpoints/{port}",
			 TOKEN_HEADER);
	} else {
		v->code = WIRE_CODE(MISSING_API_KEY);
		snprintf(v->message, sizeof(v->message),
			 "Authentication credentials were not provided: send the OPEN-SANDBOX-API-KEY header");
	}
	return false;
}

/* front.c: judge a request on its head, before any of its body is read. */
static void judge_head(struct evhttp_request *req, struct front_verdict *v, void *arg)
{
	struct corrald *d = arg;
	struct route rt;
	route_parse(req, &rt);
	if (!auth_ok(d, req, &rt, v))
		return;
	v->body_max = rt.health ? 0 : rt.proxy ? CORRALD_HTTP_BODY_MAX : CORRALD_LIFECYCLE_BODY_MAX;
	if (rt.proxy && strcmp(rt.segs[3], STR(EGRESS_PORT)) == 0)
		v->body_max = CORRALD_LIFECYCLE_BODY_MAX; /* the policy API's bodies (egress.c) */
}

static void dispatch(struct evhttp_request *req, void *arg)
{
	struct corrald *d = arg;
	add_common_headers(d, req);
	if (front_dispatch(req))
		return;
	enum evhttp_cmd_type m = evhttp_request_get_command(req);
	log_debug("%s %s", method_name(m), evhttp_request_get_uri(req));
	struct route rt;
	route_parse(req, &rt);
	int n = rt.n;
	char(*segs)[128] = rt.segs;
	const char *rest = rt.rest;
	bool is_proxy = rt.proxy, is_health = rt.health;

	/* Judged at the head already; again here in case the front could not watch this connection. */
	struct front_verdict v = {0};
	if (!auth_ok(d, req, &rt, &v)) {
		http_send_error(req, v.status, v.code, "%s", v.message);
		return;
	}
	if (n < 0) {
		http_send_error(req, 404, WIRE_CODE(GENERAL_NOT_FOUND), "no route for %s %s", method_name(m),
				evhttp_request_get_uri(req));
		return;
	}
	if (!is_proxy && !lifecycle_body_ok(req))
		return;

	if (is_health && n == 1) {
		if (m != EVHTTP_REQ_GET && m != EVHTTP_REQ_HEAD)
			return method_not_allowed(req, "GET");
		http_send_json(req, 200, json_pack("{s:s}", "status", "healthy"));
		return;
	}
	if (n == 1 && strcmp(segs[0], "images") == 0)
		return h_images(d, req);
	if ((n == 1 || n == 2) && strcmp(segs[0], "volumes") == 0)
		return h_volumes(d, req, n == 2 ? segs[1] : NULL);
	if (n < 1 || strcmp(segs[0], "sandboxes") != 0)
		goto not_found;
	if (n == 1) {
		if (m == EVHTTP_REQ_POST)
			return h_create(d, req);
		if (m == EVHTTP_REQ_GET)
			return h_list(d, req);
		return method_not_allowed(req, "GET, POST");
	}

	const char *id = segs[1];
	const char *sub = n >= 3 ? segs[2] : NULL;
	const char *allow = NULL;
	/* Route shape first (404 for unknown shapes, 405 for a wrong method), then the sandbox. */
	if (n == 2)
		allow = m == EVHTTP_REQ_GET || m == EVHTTP_REQ_DELETE ? NULL : "GET, DELETE";
	else if (n == 3 && strcmp(sub, "metadata") == 0)
		allow = m == EVHTTP_REQ_PATCH ? NULL : "PATCH";
	else if (n == 3 && strcmp(sub, "stats") == 0)
		allow = m == EVHTTP_REQ_GET ? NULL : "GET";
	else if (n == 3 && (strcmp(sub, "pause") == 0 || strcmp(sub, "resume") == 0 ||
			    strcmp(sub, "renew-expiration") == 0))
		allow = m == EVHTTP_REQ_POST ? NULL : "POST";
	else if (n == 4 && strcmp(sub, "endpoints") == 0)
		allow = m == EVHTTP_REQ_GET ? NULL : "GET";
	else if (!is_proxy)
		goto not_found;
	if (allow)
		return method_not_allowed(req, allow);

	struct sandbox *sb = registry_find(d, id);
	if (!sb)
		return send_not_found(req, id);
	if (is_proxy)
		return h_proxy(d, req, sb, segs[3], rest);
	if (n == 2)
		return m == EVHTTP_REQ_GET ? h_get(d, req, sb) : h_delete(d, req, sb);
	if (strcmp(sub, "metadata") == 0)
		return h_patch_metadata(d, req, sb);
	if (strcmp(sub, "stats") == 0)
		return h_stats(d, req, sb);
	if (strcmp(sub, "pause") == 0)
		return h_pause_resume(d, req, sb, true);
	if (strcmp(sub, "resume") == 0)
		return h_pause_resume(d, req, sb, false);
	if (strcmp(sub, "renew-expiration") == 0)
		return h_renew(d, req, sb);
	return h_endpoint(d, req, sb, segs[3]);

not_found:
	http_send_error(req, 404, WIRE_CODE(GENERAL_NOT_FOUND), "no route for %s %s", method_name(m),
			evhttp_request_get_uri(req));
}

int api_init(struct corrald *d)
{
	d->http = evhttp_new(d->base);
	if (!d->http)
		return -ENOMEM;
	evhttp_set_gencb(d->http, dispatch, d);
	evhttp_set_allowed_methods(d->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
						    EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
						    EVHTTP_REQ_PATCH | EVHTTP_REQ_OPTIONS);
	/* Each request's cap is set once its head is judged (judge_head); this is the fallback. */
	evhttp_set_max_body_size(d->http, CORRALD_LIFECYCLE_BODY_MAX);
	evhttp_set_max_headers_size(d->http, 64 * 1024);
	evhttp_set_timeout(d->http, d->idle_timeout_s);
	struct front_options fo = {
		.max_connections = d->max_connections,
		.header_timeout_s = d->header_timeout_s,
		.body_budget = CORRALD_BODY_BUDGET,
	};
	int r = front_init(d->base, d->http, &fo, judge_head, d);
	if (r < 0)
		return r;
	/* No invented text/html Content-Type on replies that have no body (proxied empty 200s). */
	evhttp_set_default_content_type(d->http, NULL);
	return 0;
}
