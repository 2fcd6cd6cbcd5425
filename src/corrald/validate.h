/*
 * Validation of lifecycle request bodies, as pure functions over parsed JSON (unit-tested in
 * tests/unit/test_corrald_validate.c). Every failure fills struct verr with the HTTP status, the
 * error code, the field's location and a message that names the field and the rule; api.c turns it
 * into {"code","message","detail":[{"loc":["body",...],"msg","type"}]}.
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "shared/cpucap.h"
#include "shared/label.h"
#include "shared/wire_error.h"

#define VERR_LOC_MAX 3
/* Short names of the codes validation uses most (shared/wire_error.h). */
#define CODE_INVALID_PARAMETER WIRE_CODE(SANDBOX_INVALID_PARAMETER)
#define CODE_INVALID_METADATA_LABEL WIRE_CODE(SANDBOX_INVALID_METADATA_LABEL)
#define CODE_INSUFFICIENT_STORAGE WIRE_CODE(SANDBOX_INSUFFICIENT_STORAGE)

struct verr {
	int status;       /* 422 for shape/type/range problems, 400 for label-rule violations */
	const char *code; /* static string */
	int nloc;
	char loc[VERR_LOC_MAX][128]; /* field path below "body" */
	char msg[768];
};

/* The label rules metadata follows: shared/label.h (label_key_valid, label_value_valid...). */

/* What POST /sandboxes asked for, normalized. The json_t members are owned references. */
struct create_params {
	char *image_uri;
	json_t *entrypoint;    /* array of strings, at least one */
	json_t *env;           /* object string->string, null values dropped */
	json_t *metadata;      /* object string->string, label rules checked */
	json_t *limits;        /* object string->string as given */
	json_t *requests;      /* object string->string; a copy of limits when absent */
	bool requests_given;   /* resourceRequests was sent (else requests = limits) */
	json_t *extensions;    /* object string->string */
	json_t *platform;      /* object or NULL */
	char *auth_user;       /* image.auth.username / password (registry images), or NULL */
	char *auth_pass;
	const char *pull_policy; /* "Always", "IfNotPresent" (default) or "Never", from extensions
				  * imagePullPolicy or opensandbox.extensions.image-pull-policy */
	bool has_timeout;      /* false = manual cleanup, no expiry */
	int64_t timeout_s;
	uint64_t cpu_limit_millis, memory_limit_bytes, pids_max;
	uint64_t cpu_request_millis, memory_request_bytes;
	uint64_t disk_limit_bytes; /* set by disk_limit_apply() */
	bool oom_group;
	json_t *volumes;       /* normalized array (see volumes_apply), or NULL: none */
	json_t *network_policy; /* networkPolicy as given (validated), or NULL */
	bool network_none; /* extensions.network "none": loopback only (docs/network.md) */
};

/*
 * Floors below which a sandbox cannot start (measured: with 1Mi its first command is OOM-killed,
 * below that execd dies starting; 6Mi is Docker's minimum too), and the kernel's limit on one
 * exec string (MAX_ARG_STRLEN, 32 pages, with the NUL) for entrypoint items and NAME=VALUE.
 */
#define CREATE_MEMORY_MIN (6ULL << 20)
#define CREATE_PIDS_MIN 3
#define CREATE_EXEC_STRING_MAX (32 * 4096 - 1)

/* Timeouts are capped at ten years so expiry arithmetic can never overflow. */
#define CREATE_TIMEOUT_MAX_S (10LL * 366 * 24 * 3600)

/*
 * The CPU-cap environment variables (reference/nemo-gym-provider.md section 3): thread-pool sizes
 * of OpenMP, BLAS, Python, Go, Rust, libuv, pytest-xdist... Each gets max(1, floor(cpu)) for a CPU
 * limit; a name env already has is left alone (explicit env wins); no CPU limit adds nothing.
 * create_params_parse() applies it unless extensions.cpuCapEnv is "false".
 */
int cpu_cap_env_add(json_t *env, uint64_t cpu_millis);

int create_params_parse(json_t *body, struct create_params *ret, struct verr *e);
void create_params_clear(struct create_params *p);

/*
 * resourceLimits.ephemeral-storage against the state file system, which has avail_bytes free: an
 * explicit limit above that is a 422 naming the field. Without one, the server's default
 * (default_bytes, spelled default_str; 0 = none) is added to p->limits, so the record, stats and a
 * restarted corrald see it as if it had been sent; a default above the free space is a 503
 * SANDBOX::INSUFFICIENT_STORAGE. Only each limit is checked: images are sparse, so their sum may
 * exceed the free space (overcommit, as with memory limits).
 */
int disk_limit_apply(struct create_params *p, uint64_t default_bytes, const char *default_str,
		     uint64_t avail_bytes, struct verr *e);

/*
 * volumes (parsed by create_params_parse into p->volumes: [{name, mountPath (normalized),
 * readOnly, subPath?, host: {path} | pvc: {claimName, createIfNotExists, deleteOnSandboxTermination,
 * storage?}}]) against the server's settings: a host path must be under one of host_paths
 * (NULL-terminated, absolute; none = host volumes refused, 400 VOLUME::HOST_PATH_NOT_ALLOWED
 * naming --allow-host-path), a pvc.storage at most size_max (spelled size_max_str).
 */
#define VOLUMES_MAX 32
int volumes_apply(struct create_params *p, char *const *host_paths, uint64_t size_max,
		  const char *size_max_str, struct verr *e);

/*
 * RFC 7396 merge patch of a flat string map: a string sets, null deletes, absent keys stay, {}
 * changes nothing. The whole patch is checked before anything changes; *ret_new is a new object.
 */
int metadata_merge_patch(json_t *current, json_t *patch, json_t **ret_new, struct verr *e);

/* {"expiresAt": RFC 3339} -> unix ms (the "in the future" check needs the clock: caller). */
int renew_parse(json_t *body, int64_t *ret_ms, struct verr *e);

/* Fill e; returns -EINVAL. loc is NULL-terminated list of path components. */
int verr_set(struct verr *e, int status, const char *code, const char *const *loc, const char *fmt,
	     ...) __attribute__((format(printf, 5, 6)));
