/*
 * libcorral internals: the transport (one libcurl multi handle driven by one worker thread),
 * the policies (pure functions, unit-tested one by one), and the client object.
 */
#pragma once

#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "corral/corral.h"
#include "shared/dynbuf.h"
#include "shared/macro.h"

/* ---- policies (policy.c) ---- */

/* Whether an HTTP status is a transient failure worth a retry (408, 425, 429, 5xx). */
bool policy_status_retryable(long status);

/*
 * Jittered exponential backoff before retry number `attempt` (1-based): uniform in
 * [cap/2, cap] where cap = min(max_s, base_s * 2^(attempt-1)). r is a random number in [0, 1).
 */
double policy_backoff_s(int attempt, double base_s, double max_s, double r);

/*
 * The keep-alive expiry (seconds) to use: from the server's "Keep-Alive: timeout=N" when
 * server_timeout_s > 0 (N-1, at least 1), else the configured value (at least 1... or whatever the
 * caller configured when > 0, else 3).
 */
double policy_keepalive_expiry_s(long server_timeout_s, double configured_s);
/*
 * The CURLOPT_MAXAGE_CONN value that keeps reuse strictly below expiry_s: libcurl compares whole
 * idle seconds with '>' (a connection idle 1.9 s passes a max age of 1), so the value is
 * ceil(expiry_s) - 1, and -1 means "never reuse" (expiry below 1 s).
 */
long policy_curl_maxage(double expiry_s);
/* The long-poll wait (whole seconds) for a status call: below the idle timeout, 1..25. */
long policy_status_wait_s(long server_timeout_s, double keepalive_expiry_s);
/* Parses a Keep-Alive header value ("timeout=5, max=100"); returns N, or 0 when absent/bad. */
long policy_parse_keepalive(const char *value);

/*
 * Label value sanitizing (the nemo-gym rule): each run of characters outside [A-Za-z0-9_.-]
 * becomes '_', leading/trailing "._-" are stripped, the value is cut to 63 characters and
 * stripped again; an empty result becomes "metadata". Returns a new string (NULL on ENOMEM).
 */
char *policy_sanitize_label_value(const char *v);
/*
 * Normalizes a label key prefix: whitespace stripped, "/" appended when missing, blank gives "".
 * The part before "/" must be a lowercase DNS subdomain. Returns 0 (*ret allocated) or -EINVAL.
 */
int policy_label_prefix(const char *prefix, char **ret);

/* Attribution: explicit values, then the environment (getenv-like lookup), then the login. */
struct attribution {
	char *team, *user, *workload, *run; /* NULL when unresolved (run never is) */
};
typedef const char *(*policy_getenv_fn)(const char *name);
/* login: the OS login name or NULL; a login of "root" is ignored. run_generated: the per-process
 * id used when none is configured. */
int policy_attribution_resolve(const char *team, const char *user, const char *workload,
			       const char *run, policy_getenv_fn getenv_fn, const char *login,
			       const char *run_generated, struct attribution *ret);
void policy_attribution_clear(struct attribution *a);

/* The CPU-cap variables are shared/cpucap.h's cpu_cap_env_vars. */
/* max(1, floor(cpu)) as a decimal string; cpu <= 0 means "no limit" (returns 0, nothing). */
int policy_cpu_cap_value(double cpu, char buf[32]);

/* Create: is this failure worth another attempt? (transport failures, retryable statuses, a
 * ready timeout; never a 4xx validation error). */
bool policy_create_retryable(const corral_error *e);
/* Whether the next create attempt repeats this one's Idempotency-Key (and so its body, attempt
 * label included): exactly when this one's answer was lost, so the server may have made a sandbox
 * that the repeat then gets back instead of a second one. An answer spends the key (a repeat would
 * get the same answer again, e.g. 409 for a sandbox the client deleted after a failed ping). */
bool policy_create_reuse_key(bool answer_lost);

/* Maps a status + server code to the typed error. */
corral_error_code policy_classify(long status, const char *server_code);

/* ---- the execd event stream (events.c) ---- */

#define EVENTS_MAX_BLOCK (16u << 20) /* one event larger than this is a protocol error */

/*
 * Parser state of one execution's event stream, across re-attaches: a re-attached stream replays
 * the execution's events from the start, so the first `delivered` events (pings never count) of
 * every stream are skipped.
 */
struct events {
	unsigned long delivered; /* events handed to the handler so far */
	unsigned long seen;      /* events seen on the current stream */
	bool finished;           /* the handler said the execution ended */
	bool overflow;           /* an event larger than EVENTS_MAX_BLOCK: the stream is unusable */
	unsigned long malformed; /* blocks that were not a JSON object (skipped) */
	char last_malformed[201]; /* the start of the last one */
	struct dynbuf block;     /* the event being assembled (lines without their framing) */
};
/* Handles one new event; returns 1 when it ended the execution. */
typedef int (*events_handler_fn)(void *ud, json_t *ev);
/* Parses the complete lines of buf, calls handler for each new event, and keeps a trailing
 * partial line in buf. */
void events_parse(struct events *st, char *buf, size_t *len, events_handler_fn handler, void *ud);
/* The stream ended: the partial line left in buf and an unterminated last event still count. */
void events_end(struct events *st, char *buf, size_t *len, events_handler_fn handler, void *ud);
/* A new stream of the same execution begins (replay from its first event). */
void events_reattach(struct events *st);
/* Frees the block buffer. */
void events_clear(struct events *st);

/* ---- transport (http.c) ---- */

struct corral_client;

struct http_req {
	const char *method;
	const char *path;      /* appended to the server URL */
	const char *body;      /* JSON, may be NULL */
	bool api_key;          /* send the API key (corrald routes; the proxy route needs it too) */
	long timeout_ms;       /* the whole transfer; 0 = none */
	bool stream;           /* deliver the body through http_stream_next */
	long stall_s;          /* streams: abort when nothing arrives for this long (0 = never) */
	bool fresh;            /* on a new connection (no silent resend by libcurl possible) */
	struct corral_cancel *cancel; /* triggering it aborts the transfer (cc ABORTED_BY_CALLBACK) */
	const char *idempotency_key;  /* sent as Idempotency-Key when set (creates) */
};

struct http_resp {
	long status;             /* 0 = no answer */
	char *body;              /* NUL-terminated */
	size_t len;
	json_t *json;            /* body as JSON, or NULL */
	char request_id[40];
	CURLcode cc;             /* CURLE_OK when an answer arrived complete */
	char error[CURL_ERROR_SIZE + 64];
	bool sent_nothing;       /* failed before a byte of the request was sent */
	bool resent;             /* libcurl sent the request twice: its reused connection died
				  * without an answer and it retried on a new one by itself */
	bool overflow;
};

struct xfer;

/* One request, waited for; connects that sent nothing are retried (connect_retries). Returns 0
 * when an HTTP answer arrived (any status), -EIO otherwise (rs->error says why). */
int http_do(struct corral_client *c, const struct http_req *rq, struct http_resp *rs);
/* Starts a request whose body is read with http_stream_next. */
int http_stream_start(struct corral_client *c, const struct http_req *rq, struct xfer **ret);
/* Waits for more body: appends what arrived to the caller's buffer (realloc'd). Returns 1 when data was
 * added, 0 when the transfer is finished (http_stream_finish tells how). */
int http_stream_next(struct xfer *x, char **buf, size_t *len, size_t *cap);
/* Status/headers so far (valid once data arrived). */
long http_stream_status(struct xfer *x);
/* Ends (aborting if still running) and frees the transfer, filling rs (body only for a
 * non-2xx answer). */
void http_stream_finish(struct xfer *x, struct http_resp *rs);
void http_resp_clear(struct http_resp *rs);

/* Asks the worker to abort x (if still running). Called with x's cancel token locked. */
void http_xfer_abort(struct xfer *x);

int http_transport_start(struct corral_client *c);
void http_transport_stop(struct corral_client *c);

/* ---- the client (client.c) ---- */

struct reap_item {
	struct reap_item *next;
	char id[CORRAL_ID_MAX];
	int64_t first_ms;
};

struct corral_client {
	corral_options o; /* strings below are owned copies */
	char *server, *api_key, *label_prefix;
	struct attribution attr;

	/* transport */
	CURLM *multi;
	pthread_t worker;
	bool worker_started;
	pthread_mutex_t mu;        /* guards the queues below and every xfer's shared fields */
	struct xfer *pending;      /* handed to the worker, not yet added */
	struct xfer *ctl;          /* unpause/abort requests */
	bool stopping;
	atomic_long server_keepalive_s; /* from the Keep-Alive header; 0 = not seen */
	long in_flight;
	pthread_cond_t in_flight_cond;

	/* server capabilities learnt on the way (0 unknown, 1 yes, -1 no) */
	atomic_int ids_supported;
	atomic_int longpoll_supported;

	/* reaper */
	pthread_t *reapers;
	int n_reapers;
	pthread_mutex_t reap_mu;
	pthread_cond_t reap_cond, reap_done_cond;
	struct reap_item *reap_head, *reap_tail;
	int reap_busy;
	bool reap_stop;
	struct reap_item *reap_failed;
};

struct corral_cancel {
	pthread_mutex_t mu;  /* guards x; the transport takes c->mu inside it */
	pthread_cond_t cond; /* wakes cancellable sleeps */
	atomic_bool triggered;
	struct xfer *x;      /* the transfer in progress of the operation using the token */
};
/* Sleeps s seconds, or until t is triggered (t may be NULL). */
void client_sleep_cancel(struct corral_cancel *t, double s);

struct corral_sandbox {
	struct corral_client *c;
	char id[CORRAL_ID_MAX];
};

/* Error helpers. */
int cerr_set(corral_error *e, corral_error_code code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* From an HTTP exchange: a transport failure or an error answer. what names the operation. */
int cerr_from_resp(corral_error *e, const struct http_resp *rs, const char *what);
int cerr_errno(corral_error_code code);

void client_log(struct corral_client *c, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
double client_random(void);
void client_sleep_s(double s);
int64_t client_now_ms(void);
void client_op_begin(struct corral_client *c);
void client_op_end(struct corral_client *c);
