/*
 * libcorral: the C client of corral (and of any OpenSandbox server), built so that a rollout is
 * never lost to sandbox infrastructure noise. Every practice below is a default:
 *
 *  - One corral_client is shared by any number of threads. All requests go through one
 *    connection pool (a libcurl multi handle driven by one worker thread); there is no cap on
 *    concurrency unless max_connections / max_in_flight are set.
 *  - Pooled connections expire before the server's idle timeout: the expiry is taken from the
 *    server's "Keep-Alive: timeout=N" header (N-1 s, at least 1 s) or, before any header was seen,
 *    keepalive_expiry_s (3 s). A connect that fails before any byte was sent is retried.
 *  - Create returns only a sandbox whose execd answered GET /ping through the server proxy;
 *    retryable failures (connection failures, 408/425/429/5xx, ready timeout) are retried with
 *    jittered exponential backoff under one overall deadline, a failed attempt's sandbox is
 *    deleted first; validation errors (4xx) are never retried.
 *  - Commands run exactly once: the client chooses each execution's id and resubmits with the
 *    same id after any failure (corral-execd re-attaches, never runs twice). Against a server
 *    that ignores the id, a submit is retried only when nothing had been sent.
 *  - Teardown is off the critical path: corral_sandbox_release() queues the delete for a bounded
 *    background reaper and returns at once.
 *  - Sandboxes carry attribution labels (team/user/workload/run) so an interrupted run can be
 *    found and reaped, and CPU-cap environment variables derived from the CPU limit.
 *
 * Conventions: fallible functions return 0 or a negative errno and fill the corral_error passed
 * as their last argument (which may be NULL); err->code is the typed error to switch on.
 * Out-parameters are named ret_*. Objects are created with _new and destroyed with _free (which
 * accept NULL). Structs the caller fills are initialised with their _init function first, so
 * fields added later get their defaults.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CORRAL_API __attribute__((visibility("default")))

#define CORRAL_ID_MAX 64      /* sandbox ids (uuid4: 36 chars) fit with room */
#define CORRAL_EXEC_ID_LEN 33 /* 32 lowercase hex + NUL */

/* ---- errors ---- */

typedef enum corral_error_code {
	CORRAL_OK = 0,
	CORRAL_E_INVALID_ARGUMENT,   /* the caller's input, or a 4xx validation answer (never retried) */
	CORRAL_E_NOT_FOUND,          /* no such sandbox (a DELETE that finds nothing is success) */
	CORRAL_E_SANDBOX_ENDED,      /* 410 SANDBOX::ENDED: the sandbox is gone; err->reason says why
				      * (e.g. "OOMKilled"); terminal, never retried */
	CORRAL_E_BACKEND_UNREACHABLE, /* 502: the server could not reach the sandbox's execd, after
				       * the retries */
	CORRAL_E_LOST_EXECUTION,     /* the sandbox no longer knows the command (status 404) */
	CORRAL_E_COMMAND_TIMEOUT,    /* the command hit its timeout (killed by the server), or its
				      * result did not arrive within timeout + 60 s */
	CORRAL_E_CREATE_TIMEOUT,     /* no ready sandbox within create_timeout_s */
	CORRAL_E_CAPACITY_TIMEOUT,   /* the server had no capacity before the create deadline */
	CORRAL_E_CREATE_FAILED,      /* a create failure that retrying cannot fix (entrypoint exited,
				      * OOM during start-up) */
	CORRAL_E_CONNECTION,         /* the server could not be reached / the connection failed, after
				      * the retries */
	CORRAL_E_UNAUTHORIZED,       /* 401/403 */
	CORRAL_E_SERVER,             /* any other error answer (err->http_status, err->server_code) */
	CORRAL_E_PROTOCOL,           /* an answer that does not follow the API */
	CORRAL_E_NO_MEMORY,
	CORRAL_E_SHUTDOWN,           /* the client is being freed */
	CORRAL_E_CANCELLED,          /* the operation's corral_cancel was triggered */
} corral_error_code;

typedef struct corral_error {
	corral_error_code code;
	int http_status;        /* 0 when no HTTP answer was involved */
	char server_code[64];   /* the answer's "code", e.g. "SANDBOX::ENDED"; may be empty */
	char reason[64];        /* CORRAL_E_SANDBOX_ENDED: the server's reason, e.g. "OOMKilled" */
	char request_id[40];    /* X-Request-ID of the failing request, when there was one */
	char message[512];      /* what failed and on what */
	char detail[256];       /* the bare reason, without the operation's name: the server's own
				 * message for an error answer ("message", "detail", or the start of
				 * the body), libcurl's for a transport failure */
} corral_error;

/* "CORRAL_E_SANDBOX_ENDED" etc.; never NULL. */
CORRAL_API const char *corral_error_code_name(corral_error_code code);
/* Whether the client's own retry policy treats this failure as transient (for callers that add an
 * outer retry of their own, e.g. recreate the sandbox). */
CORRAL_API bool corral_error_is_transient(const corral_error *err);

/* ---- the client ---- */

typedef void (*corral_log_fn)(void *userdata, int level /* 0 error .. 3 debug */, const char *msg);

typedef struct corral_options {
	const char *server;  /* base URL, e.g. "http://127.0.0.1:8080" (env CORRAL_SERVER) */
	const char *api_key; /* sent as OPEN-SANDBOX-API-KEY on lifecycle calls (env CORRAL_API_KEY) */

	/* connections */
	double keepalive_expiry_s; /* until a Keep-Alive header was seen (default 3) */
	long max_connections;      /* 0 = unlimited (default) */
	long max_in_flight;        /* 0 = unlimited (default): operations running at once */
	int connect_retries;       /* retries of a connect that sent nothing (default 2) */
	double connect_timeout_s;  /* default 10 */
	double request_timeout_s;  /* GET/DELETE and other small calls, per attempt (default 60) */
	double status_poll_timeout_s; /* extra time over the long-poll wait (default 10) */
	long stream_stall_s;       /* a command stream silent this long is dead (default 30;
				    * execd pings every 3 s) */

	/* create */
	double create_timeout_s;     /* overall deadline of corral_sandbox_create (default 300) */
	int create_retries;          /* attempts = retries + 1 (default 10) */
	double create_retry_delay_s; /* backoff base (default 1) */
	double create_retry_max_delay_s; /* backoff ceiling (default 30) */

	/* operations on a sandbox */
	int operation_retries;       /* retries of a failed submit/poll/logs call (default 5) */
	double operation_retry_delay_s;     /* default 0.25 */
	double operation_retry_max_delay_s; /* default 5 */
	double poll_initial_s;  /* polling fallback (servers without ?wait=): first delay (0.25) */
	double poll_max_s;      /* ... ceiling of the ×1.5 growth (default 2) */
	size_t max_output_bytes; /* output kept per stream in a result (default 16 MiB) */

	/* teardown */
	int reaper_threads;      /* background deletes at once (default 4) */
	double reaper_retry_s;   /* how long one delete is retried (default 60) */
	double drain_timeout_s;  /* corral_client_free waits this long for queued deletes (default 30) */

	/* attribution labels and CPU environment */
	bool attribution;        /* default true */
	const char *label_prefix; /* default "corral/" ("nemo-gym.nvidia.com/" works; "" = bare keys) */
	const char *team, *user, *workload, *run; /* explicit values win over detection */
	bool cpu_env;            /* default true: CPU_CAP variables from the CPU limit */
	bool label_attempts;     /* default true: each create attempt carries the label
				  * <prefix>attempt=<12 hex>, so the sandbox of an attempt whose answer
				  * was lost is found and deleted before the next attempt. false: the
				  * sandbox gets only the caller's metadata, and an attempt whose answer
				  * was lost is not retried (it may have made a sandbox nobody can find) */
	bool exec_id_probe;      /* default true: before the first command, learn with a probe (a
				  * background "true") whether the server honours client-chosen
				  * execution ids, so even the first submit is retried after any failure.
				  * false (one-shot clients, e.g. the CLI): learn it from the first
				  * command's init event; until then a submit is retried only when
				  * nothing was sent */

	corral_log_fn log;       /* NULL: the library logs nothing */
	void *log_userdata;
} corral_options;

/* Fills every field with its default (reading CORRAL_SERVER and CORRAL_API_KEY). */
CORRAL_API void corral_options_init(corral_options *opts);

typedef struct corral_client corral_client;

/*
 * Creates the client and starts its transport and reaper threads. opts is copied (strings too).
 * Fails with CORRAL_E_INVALID_ARGUMENT on a bad option (e.g. a label_prefix that is not a DNS
 * subdomain followed by '/').
 */
CORRAL_API int corral_client_new(const corral_options *opts, corral_client **ret,
				 corral_error *err);

/*
 * Waits (at most timeout_s) until every sandbox queued by corral_sandbox_release() is deleted.
 * Returns 0, or -ETIMEDOUT with the ids still undeleted in *ret_ids (NULL-terminated, free with
 * corral_strv_free; may be NULL).
 */
CORRAL_API int corral_client_drain(corral_client *c, double timeout_s, char ***ret_ids,
				   corral_error *err);

/*
 * Drains the reaper within drain_timeout_s, reports every sandbox it could not delete through
 * the log callback (the server's TTL is the backstop), then stops the threads and frees. All
 * operations on the client must have returned. Accepts NULL.
 */
CORRAL_API void corral_client_free(corral_client *c);

/*
 * The attribution labels the client puts on every sandbox, as a NULL-terminated "key=value"
 * vector (free with corral_strv_free). The generated run id is found here.
 */
CORRAL_API char **corral_client_labels(corral_client *c);

/* The keep-alive expiry in use now, in seconds (from the server's header or the option). */
CORRAL_API double corral_client_keepalive_expiry(corral_client *c);

CORRAL_API void corral_strv_free(char **v);

/* ---- sandboxes ---- */

typedef struct corral_sandbox_spec {
	const char *image;              /* image uri (corral: a name under --image-dir, or "host") */
	const char *const *entrypoint;  /* NULL-terminated argv; default ["sleep","infinity"] */
	double cpu;                     /* CPU limit in cores; 0 = server default of 1 */
	long memory_mib;                /* memory limit; 0 = 512 */
	double cpu_request;             /* resourceRequests (corral extension); 0 = same as limit */
	long memory_request_mib;
	long ttl_s;                     /* server-side lifetime, the backstop; 0 = none. default 3600 */
	const char *const *env;         /* NULL-terminated "KEY=VALUE"; wins over derived CPU caps */
	const char *const *metadata;    /* NULL-terminated "key=value"; wins over attribution */
	bool no_cpu_env;                /* do not derive CPU-cap variables for this sandbox */
	const char *cpu_quantity;       /* the CPU limit as a quantity string ("500m", "2"); wins over
					 * cpu. NULL: from cpu. "": no CPU limit is sent (the server's
					 * own default applies; corrald: none) */
	const char *memory_quantity;    /* the memory limit as a quantity string ("1G", "512Mi");
					 * wins over memory_mib. NULL: from memory_mib. "": none sent */
	bool raw_metadata;              /* send metadata values as given (the server validates them)
					 * instead of sanitizing them to label rules */
	struct corral_cancel *cancel;   /* optional: triggering it ends the create without leaving a
					 * sandbox behind: a create request already sent is let finish
					 * (aborting it could leave a sandbox nobody knows), what it made
					 * is deleted, no new attempt starts; CORRAL_E_CANCELLED */
} corral_sandbox_spec;

CORRAL_API void corral_sandbox_spec_init(corral_sandbox_spec *spec);

typedef struct corral_sandbox corral_sandbox;

/*
 * Creates a sandbox and waits until it is ready (the server answered Running and execd answered
 * GET /ping through the proxy). Retries as described at the top, under create_timeout_s.
 * Errors: CORRAL_E_INVALID_ARGUMENT (the server refused the spec), CORRAL_E_CREATE_FAILED,
 * CORRAL_E_CREATE_TIMEOUT, CORRAL_E_CAPACITY_TIMEOUT, CORRAL_E_CONNECTION, CORRAL_E_UNAUTHORIZED.
 */
CORRAL_API int corral_sandbox_create(corral_client *c, const corral_sandbox_spec *spec,
				     corral_sandbox **ret, corral_error *err);

/* Like corral_sandbox_create, and *ret_json (free()) receives the server's create answer (the
 * sandbox object as JSON text). */
CORRAL_API int corral_sandbox_create_json(corral_client *c, const corral_sandbox_spec *spec,
					  corral_sandbox **ret, char **ret_json, corral_error *err);

/* A handle on an existing sandbox (checked with one GET; CORRAL_E_NOT_FOUND if unknown). */
CORRAL_API int corral_sandbox_open(corral_client *c, const char *id, corral_sandbox **ret,
				   corral_error *err);

/* A handle on sandbox id without asking the server (one round trip less; the first operation
 * finds out whether it exists). CORRAL_E_INVALID_ARGUMENT for an id that cannot be one. */
CORRAL_API int corral_sandbox_from_id(corral_client *c, const char *id, corral_sandbox **ret,
				      corral_error *err);

CORRAL_API const char *corral_sandbox_id(const corral_sandbox *sb);

/* Queues the sandbox's deletion for the background reaper and frees the handle; returns at once.
 * Accepts NULL. */
CORRAL_API void corral_sandbox_release(corral_sandbox *sb);

/* Frees the handle only; the sandbox lives on (until its TTL). Accepts NULL. */
CORRAL_API void corral_sandbox_free(corral_sandbox *sb);

/* Deletes now, with retries; a sandbox that is already gone counts as deleted. */
CORRAL_API int corral_sandbox_delete_id(corral_client *c, const char *id, corral_error *err);

/*
 * Ids of every sandbox whose metadata has all the "key=value" pairs given (exact equality,
 * server-side filter), following every page. *ret_ids is NULL-terminated (corral_strv_free).
 */
CORRAL_API int corral_sandbox_list(corral_client *c, const char *const *metadata, char ***ret_ids,
				   corral_error *err);

/*
 * The server's sandbox objects (id, image, status, metadata, entrypoint, createdAt, expiresAt,
 * ...) as a JSON array text in *ret_json (free()), every page followed, each id once, in the
 * server's order. metadata: "key=value" pairs that must all match (may be NULL); states: state
 * names of which one must match (may be NULL).
 */
CORRAL_API int corral_sandbox_list_json(corral_client *c, const char *const *metadata,
					const char *const *states, char **ret_json,
					corral_error *err);

/* One sandbox as the server describes it: its JSON object text in *ret_json (free()).
 * CORRAL_E_NOT_FOUND if unknown. */
CORRAL_API int corral_sandbox_get_json(corral_client *c, const char *id, char **ret_json,
				       corral_error *err);

/* What a sandbox uses (corral extension GET /v1/sandboxes/{id}/stats: memory, OOM kills, CPU,
 * pids, disk; docs/resources.md): the JSON object text in *ret_json (free()). Readable after the
 * sandbox ended, until it is deleted. */
CORRAL_API int corral_sandbox_stats_json(corral_client *c, const char *id, char **ret_json,
					 corral_error *err);

/* Registry images in corrald's store (corral extension /v1/images; docs/images.md). */
/* GET /v1/images: {"items": [{name, digest, layers, sizeBytes, platform}]} as JSON text. */
CORRAL_API int corral_image_list_json(corral_client *c, char **ret_json, corral_error *err);
/* POST /v1/images: pull ref into the store now (sharing a pull corrald already runs), waiting up
 * to timeout_s; username/password (may be NULL) are the registry credentials. *ret_json (may be
 * NULL) gets the answer {name, status}. A failed pull is CORRAL_E_... from the server's
 * SANDBOX::IMAGE_PULL_FAILED with the registry's message. */
CORRAL_API int corral_image_pull(corral_client *c, const char *ref, const char *username,
				 const char *password, double timeout_s, char **ret_json,
				 corral_error *err);
/* POST /v1/images with "import": the OCI image layout (directory, or tar such as a docker save)
 * at path ON THE SERVER'S HOST, under its --import-dir, into the store as ref. */
CORRAL_API int corral_image_import(corral_client *c, const char *path, const char *ref,
				   double timeout_s, char **ret_json, corral_error *err);
/* GET /v1/images?ref=: the image's records {"items": [{name, digest, platform, layers: [{digest,
 * unpackedBytes}], unpackedBytes, sizeBytes, env, workingDir, user, lastUsedAt, inUse}]} (one per
 * platform pulled) as JSON text; not in the store: CORRAL_E_... from SANDBOX::IMAGE_NOT_FOUND. */
CORRAL_API int corral_image_inspect_json(corral_client *c, const char *ref, char **ret_json,
					 corral_error *err);
/* Named volumes (corral extension /v1/volumes; docs/volumes.md): GET as JSON text
 * {"items": [{name, sizeBytes, usedBytes, sandboxes, deleteOnSandboxTermination}]}, and DELETE
 * (refused while a sandbox uses it: CORRAL_E_... from VOLUME::IN_USE). */
CORRAL_API int corral_volume_list_json(corral_client *c, char **ret_json, corral_error *err);
CORRAL_API int corral_volume_remove(corral_client *c, const char *name, corral_error *err);
/* DELETE /v1/images?ref=: forget the image; its unused layers are collected by corrald. */
CORRAL_API int corral_image_remove(corral_client *c, const char *ref, corral_error *err);

/* Label helpers, as the client applies them: the normalized key prefix ("corral" -> "corral/",
 * blank -> "", -EINVAL when not a DNS subdomain) and a value sanitized to label rules. */
CORRAL_API int corral_label_prefix_normalize(const char *prefix, char **ret);
CORRAL_API char *corral_label_value_sanitize(const char *value);

typedef struct corral_sandbox_info {
	char state[32];    /* "Pending", "Running", "Paused", "Terminated", "Failed", ... */
	char reason[64];
	char message[256];
} corral_sandbox_info;

CORRAL_API int corral_sandbox_info_get(corral_sandbox *sb, corral_sandbox_info *ret,
				       corral_error *err);

/* ---- cancellation ---- */

/*
 * A cancellation token. Give it to operations (corral_exec_opts.cancel); corral_cancel_trigger()
 * makes them return CORRAL_E_CANCELLED as soon as they can: the transfer in progress is aborted
 * and backoff sleeps end. Trigger is safe from any thread and from inside an output callback (not
 * from a signal handler: use a thread that sigwait()s). A triggered token stays triggered.
 */
typedef struct corral_cancel corral_cancel;

CORRAL_API int corral_cancel_new(corral_cancel **ret);
CORRAL_API void corral_cancel_trigger(corral_cancel *t);
CORRAL_API bool corral_cancel_triggered(corral_cancel *t);
/* Accepts NULL. No operation may be using the token. */
CORRAL_API void corral_cancel_free(corral_cancel *t);

/* ---- commands ---- */

typedef void (*corral_line_fn)(void *userdata, const char *line, size_t len);

typedef struct corral_exec_opts {
	const char *cwd;
	const char *const *env;  /* NULL-terminated "KEY=VALUE" */
	double timeout_s;        /* enforced by the server; 0 = none. The client gives up at
				  * timeout + 60 s */
	long long uid;           /* -1 (default) = execd's user */
	bool background;         /* submit in background and wait by long-poll (no stream held
				  * open); the output is then combined into result.out */
	corral_line_fn on_stdout; /* foreground: called once per line, in order, never twice */
	corral_line_fn on_stderr;
	void *userdata;
	const char *exec_id;     /* optional: the execution id to use (32 lowercase hex), e.g. to
				  * resume after a crash: an id the sandbox already ran returns that
				  * execution's result without running it again. Default: a fresh
				  * random id */
	corral_cancel *cancel;   /* optional: triggering it stops the command in the sandbox
				  * (corral_exec_interrupt) and makes corral_exec return
				  * CORRAL_E_CANCELLED with the output so far */
	bool discard_output;     /* foreground with callbacks: do not also keep the output in the
				  * result (out/err stay empty; for output of any size) */
	bool exclusive;          /* run alone: before the command starts, every other process of
				  * the sandbox but its entrypoint is stopped and killed, so nothing
				  * the workload left running can write into it (for graders;
				  * docs/security.md). A resume under the same exec_id clears
				  * nothing again. Added in ABI 1 (libcorral.so.1) */
} corral_exec_opts;

CORRAL_API void corral_exec_opts_init(corral_exec_opts *opts);

typedef struct corral_exec_result {
	char id[CORRAL_EXEC_ID_LEN]; /* the execution id used (the server's, when it ignored ours) */
	int exit_code;     /* -1 when the command produced none */
	char *out;         /* stdout lines joined with '\n' (background: stdout+stderr combined) */
	size_t out_len;
	char *err;         /* stderr lines joined with '\n' */
	size_t err_len;
	bool truncated;    /* more than max_output_bytes was produced; the rest was dropped */
	char error_type[32]; /* "" on a normal exit; "timeout", "sandbox" (an error with no exit
			      * code) */
	char error_message[256];
	unsigned submits;  /* how many times the submit was sent (1 unless retried) */
	bool started;      /* the server acknowledged the execution (its init event or output
			    * arrived): after a failure the command may be running or have run */
	bool stopped;      /* CORRAL_E_CANCELLED: the command was stopped in the sandbox (or
			    * was never sent) */
} corral_exec_result;

/*
 * Runs command (bash -c) in the sandbox and fills *ret (clear it with corral_exec_result_clear).
 * Returns 0 when the command ran to an exit status (any exit code), else a negative errno:
 * CORRAL_E_COMMAND_TIMEOUT (ret holds the partial output and exit code), CORRAL_E_SANDBOX_ENDED,
 * CORRAL_E_BACKEND_UNREACHABLE, CORRAL_E_LOST_EXECUTION, CORRAL_E_CONNECTION, ...
 */
CORRAL_API int corral_exec(corral_sandbox *sb, const char *command, const corral_exec_opts *opts,
			   corral_exec_result *ret, corral_error *err);

CORRAL_API void corral_exec_result_clear(corral_exec_result *r);

/*
 * The output of a background execution from byte offset cursor (stdout and stderr combined):
 * *ret_data (free()) holds what there is now, *ret_next the cursor to continue from.
 */
CORRAL_API int corral_exec_logs(corral_sandbox *sb, const char *exec_id, uint64_t cursor,
				char **ret_data, size_t *ret_len, uint64_t *ret_next,
				corral_error *err);

/*
 * Stops an execution: execd sends SIGTERM to the command's process group, then SIGKILL. An
 * execution the sandbox does not know (already ended and forgotten) counts as stopped.
 */
CORRAL_API int corral_exec_interrupt(corral_sandbox *sb, const char *exec_id, corral_error *err);

/* Generates an execution id (32 lowercase hex). Returns 0 or -errno. */
CORRAL_API int corral_exec_id_new(char ret[CORRAL_EXEC_ID_LEN]);

#ifdef __cplusplus
}
#endif
