/*
 * The client object: options, typed errors, attribution resolved once, and the background
 * reaper that takes teardown off the rollout's critical path.
 */
#include <errno.h>
#include <math.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "shared/id.h"
#include "shared/strv.h"

/* ---- errors ---- */

static const char *const code_names[] = {
	[CORRAL_OK] = "CORRAL_OK",
	[CORRAL_E_INVALID_ARGUMENT] = "CORRAL_E_INVALID_ARGUMENT",
	[CORRAL_E_NOT_FOUND] = "CORRAL_E_NOT_FOUND",
	[CORRAL_E_SANDBOX_ENDED] = "CORRAL_E_SANDBOX_ENDED",
	[CORRAL_E_BACKEND_UNREACHABLE] = "CORRAL_E_BACKEND_UNREACHABLE",
	[CORRAL_E_LOST_EXECUTION] = "CORRAL_E_LOST_EXECUTION",
	[CORRAL_E_COMMAND_TIMEOUT] = "CORRAL_E_COMMAND_TIMEOUT",
	[CORRAL_E_CREATE_TIMEOUT] = "CORRAL_E_CREATE_TIMEOUT",
	[CORRAL_E_CAPACITY_TIMEOUT] = "CORRAL_E_CAPACITY_TIMEOUT",
	[CORRAL_E_CREATE_FAILED] = "CORRAL_E_CREATE_FAILED",
	[CORRAL_E_CONNECTION] = "CORRAL_E_CONNECTION",
	[CORRAL_E_UNAUTHORIZED] = "CORRAL_E_UNAUTHORIZED",
	[CORRAL_E_SERVER] = "CORRAL_E_SERVER",
	[CORRAL_E_PROTOCOL] = "CORRAL_E_PROTOCOL",
	[CORRAL_E_NO_MEMORY] = "CORRAL_E_NO_MEMORY",
	[CORRAL_E_SHUTDOWN] = "CORRAL_E_SHUTDOWN",
	[CORRAL_E_CANCELLED] = "CORRAL_E_CANCELLED",
};

CORRAL_API const char *corral_error_code_name(corral_error_code code)
{
	if ((unsigned)code < ARRAY_SIZE(code_names) && code_names[code])
		return code_names[code];
	return "CORRAL_E_UNKNOWN";
}

CORRAL_API bool corral_error_is_transient(const corral_error *err)
{
	return err && policy_create_retryable(err);
}

int cerr_errno(corral_error_code code)
{
	switch (code) {
	case CORRAL_OK: return 0;
	case CORRAL_E_INVALID_ARGUMENT: return -EINVAL;
	case CORRAL_E_NOT_FOUND: return -ENOENT;
	case CORRAL_E_SANDBOX_ENDED: return -EOWNERDEAD;
	case CORRAL_E_BACKEND_UNREACHABLE: return -EHOSTUNREACH;
	case CORRAL_E_LOST_EXECUTION: return -ESRCH;
	case CORRAL_E_COMMAND_TIMEOUT:
	case CORRAL_E_CREATE_TIMEOUT:
	case CORRAL_E_CAPACITY_TIMEOUT: return -ETIMEDOUT;
	case CORRAL_E_CREATE_FAILED: return -ECANCELED;
	case CORRAL_E_CONNECTION: return -ECONNREFUSED;
	case CORRAL_E_UNAUTHORIZED: return -EACCES;
	case CORRAL_E_NO_MEMORY: return -ENOMEM;
	case CORRAL_E_SHUTDOWN: return -ESHUTDOWN;
	case CORRAL_E_CANCELLED: return -EINTR;
	case CORRAL_E_SERVER:
	case CORRAL_E_PROTOCOL:
	default: return -EPROTO;
	}
}

int cerr_set(corral_error *e, corral_error_code code, const char *fmt, ...)
{
	if (e) {
		memset(e, 0, sizeof(*e));
		e->code = code;
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(e->message, sizeof(e->message), fmt, ap);
		va_end(ap);
	}
	return cerr_errno(code);
}

int cerr_from_resp(corral_error *e, const struct http_resp *rs, const char *what)
{
	if (rs->status == 0) {
		int r = cerr_set(e, rs->cc == CURLE_FAILED_INIT && rs->sent_nothing &&
					    strstr(rs->error, "shutting down")
				    ? CORRAL_E_SHUTDOWN
				    : CORRAL_E_CONNECTION,
			 "%s: %s%s", what, rs->sent_nothing ? "cannot reach the server: " : "",
			 rs->error);
		if (e) {
			snprintf(e->request_id, sizeof(e->request_id), "%s", rs->request_id);
			snprintf(e->detail, sizeof(e->detail), "%s", rs->error);
		}
		return r;
	}
	const char *code = NULL, *msg = NULL, *reason = NULL;
	_cleanup_free_ char *detail = NULL;
	if (json_is_object(rs->json)) {
		code = json_string_value(json_object_get(rs->json, "code"));
		msg = json_string_value(json_object_get(rs->json, "message"));
		reason = json_string_value(json_object_get(rs->json, "reason"));
		json_t *d = json_object_get(rs->json, "detail"); /* FastAPI-style validation errors */
		if (!msg && d) {
			detail = json_is_string(d) ? strdup(json_string_value(d))
						   : json_dumps(d, JSON_COMPACT);
			msg = detail;
		}
	}
	corral_error_code cc = policy_classify(rs->status, code);
	char excerpt[200] = "";
	if (!msg && rs->body) {
		snprintf(excerpt, sizeof(excerpt), "%s", rs->body);
		excerpt[strcspn(excerpt, "\r\n")] = '\0';
	}
	int r = cerr_set(e, cc, "%s: HTTP %ld %s: %s", what, rs->status, code ? code : "",
			 msg ? msg : (*excerpt ? excerpt : "(no message)"));
	if (e) {
		e->http_status = (int)rs->status;
		snprintf(e->server_code, sizeof(e->server_code), "%s", code ? code : "");
		snprintf(e->reason, sizeof(e->reason), "%s", reason ? reason : "");
		snprintf(e->request_id, sizeof(e->request_id), "%s", rs->request_id);
		snprintf(e->detail, sizeof(e->detail), "%s",
			 msg ? msg : (*excerpt ? excerpt : "(empty response)"));
	}
	return r;
}

/* ---- cancellation ---- */

CORRAL_API int corral_cancel_new(corral_cancel **ret)
{
	struct corral_cancel *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	pthread_mutex_init(&t->mu, NULL);
	pthread_cond_init(&t->cond, NULL);
	*ret = t;
	return 0;
}

CORRAL_API void corral_cancel_trigger(corral_cancel *t)
{
	if (!t)
		return;
	pthread_mutex_lock(&t->mu);
	atomic_store(&t->triggered, true);
	if (t->x)
		http_xfer_abort(t->x);
	pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->mu);
}

CORRAL_API bool corral_cancel_triggered(corral_cancel *t)
{
	return t && atomic_load(&t->triggered);
}

CORRAL_API void corral_cancel_free(corral_cancel *t)
{
	if (!t)
		return;
	pthread_mutex_destroy(&t->mu);
	pthread_cond_destroy(&t->cond);
	free(t);
}

void client_sleep_cancel(struct corral_cancel *t, double s)
{
	if (!t) {
		client_sleep_s(s);
		return;
	}
	if (!(s > 0))
		return;
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)s;
	ts.tv_nsec += (long)((s - floor(s)) * 1e9);
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&t->mu);
	while (!atomic_load(&t->triggered) &&
	       pthread_cond_timedwait(&t->cond, &t->mu, &ts) != ETIMEDOUT)
		;
	pthread_mutex_unlock(&t->mu);
}

/* ---- small helpers ---- */

void client_log(struct corral_client *c, int level, const char *fmt, ...)
{
	if (!c->o.log)
		return;
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	c->o.log(c->o.log_userdata, level, msg);
}

double client_random(void)
{
	uint64_t v;
	if (getrandom(&v, sizeof(v), 0) != sizeof(v))
		v = (uint64_t)client_now_ms() * 6364136223846793005ull;
	return (double)(v >> 11) / 9007199254740992.0;
}

void client_sleep_s(double s)
{
	if (!(s > 0))
		return;
	struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

int64_t client_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void client_op_begin(struct corral_client *c)
{
	if (c->o.max_in_flight <= 0)
		return;
	pthread_mutex_lock(&c->mu);
	while (c->in_flight >= c->o.max_in_flight)
		pthread_cond_wait(&c->in_flight_cond, &c->mu);
	c->in_flight++;
	pthread_mutex_unlock(&c->mu);
}

void client_op_end(struct corral_client *c)
{
	if (c->o.max_in_flight <= 0)
		return;
	pthread_mutex_lock(&c->mu);
	c->in_flight--;
	pthread_cond_signal(&c->in_flight_cond);
	pthread_mutex_unlock(&c->mu);
}

CORRAL_API void corral_strv_free(char **v)
{
	strv_free(v);
}

/* ---- options ---- */

CORRAL_API void corral_options_init(corral_options *o)
{
	memset(o, 0, sizeof(*o));
	o->server = getenv("CORRAL_SERVER");
	if (!o->server || !*o->server)
		o->server = "http://127.0.0.1:8080";
	o->api_key = getenv("CORRAL_API_KEY");
	o->keepalive_expiry_s = 3.0;
	o->connect_retries = 2;
	o->connect_timeout_s = 10;
	o->request_timeout_s = 60;
	o->status_poll_timeout_s = 10;
	o->stream_stall_s = 30;
	o->create_timeout_s = 300;
	o->create_retries = 10;
	o->create_retry_delay_s = 1;
	o->create_retry_max_delay_s = 30;
	o->operation_retries = 5;
	o->operation_retry_delay_s = 0.25;
	o->operation_retry_max_delay_s = 5;
	o->poll_initial_s = 0.25;
	o->poll_max_s = 2;
	o->max_output_bytes = 16u << 20;
	o->reaper_threads = 4;
	o->reaper_retry_s = 60;
	o->drain_timeout_s = 30;
	o->attribution = true;
	o->label_prefix = "corral/";
	o->cpu_env = true;
	o->label_attempts = true;
	o->exec_id_probe = true;
}

/* ---- attribution: the run id is generated once per process ---- */

static pthread_once_t run_once = PTHREAD_ONCE_INIT;
static char process_run_id[13];

static void make_run_id(void)
{
	char hex[HEXID_LEN];
	if (id_hex32(hex) < 0)
		snprintf(hex, sizeof(hex), "%032llx", (unsigned long long)getpid());
	memcpy(process_run_id, hex, 12);
	process_run_id[12] = '\0';
}

static const char *env_lookup(const char *name)
{
	return getenv(name);
}

static const char *login_name(char *buf, size_t len)
{
	struct passwd pw, *res = NULL;
	char tmp[1024];
	if (getpwuid_r(geteuid(), &pw, tmp, sizeof(tmp), &res) == 0 && res) {
		snprintf(buf, len, "%s", res->pw_name);
		return buf;
	}
	const char *u = getenv("USER");
	if (u && *u) {
		snprintf(buf, len, "%s", u);
		return buf;
	}
	return NULL;
}

CORRAL_API char **corral_client_labels(corral_client *c)
{
	const char *names[] = {"team", "user", "workload", "run"};
	const char *vals[] = {c->attr.team, c->attr.user, c->attr.workload, c->attr.run};
	char **v = calloc(5, sizeof(char *));
	if (!v)
		return NULL;
	size_t n = 0;
	for (size_t i = 0; i < 4 && c->o.attribution; i++) {
		if (!vals[i])
			continue;
		_cleanup_free_ char *s = policy_sanitize_label_value(vals[i]);
		if (!s || asprintf(&v[n], "%s%s=%s", c->label_prefix, names[i], s) < 0) {
			v[n] = NULL;
			corral_strv_free(v);
			return NULL;
		}
		n++;
	}
	return v;
}

CORRAL_API double corral_client_keepalive_expiry(corral_client *c)
{
	return policy_keepalive_expiry_s(atomic_load(&c->server_keepalive_s),
					 c->o.keepalive_expiry_s);
}

/* ---- the reaper ---- */

static bool reap_one(struct corral_client *c, struct reap_item *it)
{
	corral_error e;
	int r = corral_sandbox_delete_id(c, it->id, &e);
	if (r == 0)
		return true;
	client_log(c, 1, "delete sandbox %s: %s", it->id, e.message);
	return false;
}

static void *reaper_main(void *arg)
{
	struct corral_client *c = arg;
	pthread_mutex_lock(&c->reap_mu);
	for (;;) {
		while (!c->reap_head && !c->reap_stop)
			pthread_cond_wait(&c->reap_cond, &c->reap_mu);
		if (!c->reap_head && c->reap_stop)
			break;
		struct reap_item *it = c->reap_head;
		c->reap_head = it->next;
		if (!c->reap_head)
			c->reap_tail = NULL;
		c->reap_busy++;
		bool stop = c->reap_stop;
		pthread_mutex_unlock(&c->reap_mu);
		bool ok = stop ? false : reap_one(c, it);
		pthread_mutex_lock(&c->reap_mu);
		c->reap_busy--;
		if (ok) {
			free(it);
		} else if (!stop && client_now_ms() - it->first_ms < (int64_t)(c->o.reaper_retry_s * 1000)) {
			/* Back to the end of the queue; corral_sandbox_delete_id already backed off. */
			it->next = NULL;
			if (c->reap_tail)
				c->reap_tail->next = it;
			else
				c->reap_head = it;
			c->reap_tail = it;
		} else {
			it->next = c->reap_failed;
			c->reap_failed = it;
		}
		pthread_cond_broadcast(&c->reap_done_cond);
	}
	pthread_mutex_unlock(&c->reap_mu);
	return NULL;
}

CORRAL_API void corral_sandbox_release(corral_sandbox *sb)
{
	if (!sb)
		return;
	struct corral_client *c = sb->c;
	struct reap_item *it = calloc(1, sizeof(*it));
	if (it) {
		snprintf(it->id, sizeof(it->id), "%s", sb->id);
		it->first_ms = client_now_ms();
		pthread_mutex_lock(&c->reap_mu);
		if (c->reap_tail)
			c->reap_tail->next = it;
		else
			c->reap_head = it;
		c->reap_tail = it;
		pthread_cond_signal(&c->reap_cond);
		pthread_mutex_unlock(&c->reap_mu);
	} else {
		client_log(c, 0, "out of memory: sandbox %s left to its TTL", sb->id);
	}
	free(sb);
}

CORRAL_API int corral_client_drain(corral_client *c, double timeout_s, char ***ret_ids,
				   corral_error *err)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += (time_t)timeout_s;
	ts.tv_nsec += (long)((timeout_s - floor(timeout_s)) * 1e9);
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&c->reap_mu);
	while ((c->reap_head || c->reap_busy) &&
	       pthread_cond_timedwait(&c->reap_done_cond, &c->reap_mu, &ts) != ETIMEDOUT)
		;
	size_t n = 0;
	for (struct reap_item *it = c->reap_head; it; it = it->next)
		n++;
	for (struct reap_item *it = c->reap_failed; it; it = it->next)
		n++;
	n += (size_t)c->reap_busy;
	int r = 0;
	if (ret_ids)
		*ret_ids = NULL;
	if (n) {
		r = cerr_set(err, CORRAL_E_SERVER, "%zu sandbox(es) not deleted within %.0f s", n,
			     timeout_s);
		r = -ETIMEDOUT;
		if (ret_ids && (*ret_ids = calloc(n + 1, sizeof(char *)))) {
			size_t i = 0;
			for (struct reap_item *it = c->reap_head; it && i < n; it = it->next)
				(*ret_ids)[i++] = strdup(it->id);
			for (struct reap_item *it = c->reap_failed; it && i < n; it = it->next)
				(*ret_ids)[i++] = strdup(it->id);
		}
	}
	pthread_mutex_unlock(&c->reap_mu);
	return r;
}

/* ---- new/free ---- */

CORRAL_API int corral_client_new(const corral_options *opts, corral_client **ret,
				 corral_error *err)
{
	corral_options defaults;
	if (!opts) {
		corral_options_init(&defaults);
		opts = &defaults;
	}
	if (!opts->server || !*opts->server)
		return cerr_set(err, CORRAL_E_INVALID_ARGUMENT, "server: no URL given");
	struct corral_client *c = calloc(1, sizeof(*c));
	if (!c)
		return cerr_set(err, CORRAL_E_NO_MEMORY, "out of memory");
	c->o = *opts;
	if (c->o.reaper_threads <= 0)
		c->o.reaper_threads = 1;
	if (c->o.stream_stall_s <= 0)
		c->o.stream_stall_s = 30;
	if (c->o.max_output_bytes == 0)
		c->o.max_output_bytes = 16u << 20;
	c->server = strdup(opts->server);
	if (c->server) {
		size_t n = strlen(c->server);
		while (n > 0 && c->server[n - 1] == '/')
			c->server[--n] = '\0';
	}
	c->api_key = opts->api_key ? strdup(opts->api_key) : NULL;
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->in_flight_cond, NULL);
	pthread_mutex_init(&c->reap_mu, NULL);
	pthread_cond_init(&c->reap_cond, NULL);
	pthread_cond_init(&c->reap_done_cond, NULL);
	int r;
	if (!c->server) {
		r = cerr_set(err, CORRAL_E_NO_MEMORY, "out of memory");
		goto fail;
	}
	r = policy_label_prefix(opts->label_prefix, &c->label_prefix);
	if (r < 0) {
		r = cerr_set(err, CORRAL_E_INVALID_ARGUMENT,
			     "label_prefix '%s': expected a lowercase DNS subdomain followed by '/' (e.g. \"corral/\", \"nemo-gym.nvidia.com/\") or \"\"",
			     opts->label_prefix);
		goto fail;
	}
	pthread_once(&run_once, make_run_id);
	char login[256];
	r = policy_attribution_resolve(opts->team, opts->user, opts->workload, opts->run, env_lookup,
				       login_name(login, sizeof(login)), process_run_id, &c->attr);
	if (r < 0) {
		r = cerr_set(err, CORRAL_E_NO_MEMORY, "out of memory");
		goto fail;
	}
	/* Prefixed keys must still be valid label names. */
	if (strlen(c->label_prefix) > 254) {
		r = cerr_set(err, CORRAL_E_INVALID_ARGUMENT, "label_prefix too long");
		goto fail;
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	r = http_transport_start(c);
	if (r < 0) {
		r = cerr_set(err, CORRAL_E_NO_MEMORY, "start the transport: %s", strerror(-r));
		goto fail;
	}
	c->reapers = calloc((size_t)c->o.reaper_threads, sizeof(pthread_t));
	for (int i = 0; c->reapers && i < c->o.reaper_threads; i++) {
		if (pthread_create(&c->reapers[i], NULL, reaper_main, c) != 0)
			break;
		c->n_reapers++;
	}
	if (c->n_reapers == 0) {
		r = cerr_set(err, CORRAL_E_NO_MEMORY, "cannot start the reaper thread");
		goto fail;
	}
	static atomic_bool logged; /* once per process, like the generated run id */
	if (c->o.attribution && c->o.log && !atomic_exchange(&logged, true)) {
		char **labels = corral_client_labels(c);
		char line[1024] = "";
		for (char **p = labels; p && *p; p++) {
			size_t l = strlen(line);
			snprintf(line + l, sizeof(line) - l, "%s%s", l ? " " : "", *p);
		}
		corral_strv_free(labels);
		client_log(c, 2, "sandbox attribution labels: %s", line);
	}
	*ret = c;
	return 0;
fail:
	corral_client_free(c);
	return r;
}

CORRAL_API void corral_client_free(corral_client *c)
{
	if (!c)
		return;
	if (c->n_reapers) {
		char **left = NULL;
		if (corral_client_drain(c, c->o.drain_timeout_s, &left, NULL) < 0) {
			for (char **p = left; p && *p; p++)
				client_log(c, 0,
					   "sandbox %s was not deleted before the client closed; its TTL will reap it",
					   *p);
		}
		corral_strv_free(left);
		pthread_mutex_lock(&c->reap_mu);
		c->reap_stop = true;
		pthread_cond_broadcast(&c->reap_cond);
		pthread_mutex_unlock(&c->reap_mu);
		for (int i = 0; i < c->n_reapers; i++)
			pthread_join(c->reapers[i], NULL);
	}
	free(c->reapers);
	for (struct reap_item *it = c->reap_head, *n; it; it = n) {
		n = it->next;
		free(it);
	}
	for (struct reap_item *it = c->reap_failed, *n; it; it = n) {
		n = it->next;
		free(it);
	}
	http_transport_stop(c);
	policy_attribution_clear(&c->attr);
	free(c->server);
	free(c->api_key);
	free(c->label_prefix);
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->in_flight_cond);
	pthread_mutex_destroy(&c->reap_mu);
	pthread_cond_destroy(&c->reap_cond);
	pthread_cond_destroy(&c->reap_done_cond);
	free(c);
}
