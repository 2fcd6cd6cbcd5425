/*
 * corrald's shared state and the sandbox record.
 *
 * One event loop, one thread. A struct sandbox is reachable from the registry, from an in-flight
 * create, from ping callbacks and from workers, so it is ref-counted: the registry holds one
 * reference from registry_add() to registry_remove(); every async operation holds its own.
 */
#pragma once

#include <event2/event.h>
#include <event2/http.h>
#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include "corrald/egress.h"
#include "corrald/worker.h"
#include "network/net.h"
#include "runtime/runtime.h"

#define CORRALD_LIFECYCLE_BODY_MAX (1024 * 1024) /* lifecycle routes, enforced by api.c */
#define CORRALD_HTTP_BODY_MAX (128LL * 1024 * 1024) /* the proxy route's cap: uploads */
#define CORRALD_BODY_BUDGET (512LL * 1024 * 1024)  /* request bodies held at once, all connections */
#define EXECD_PORT 44772

enum sb_state {
	SB_PENDING,
	SB_RUNNING,
	SB_PAUSED,
	SB_STOPPING,
	SB_TERMINATED,
	SB_FAILED,
};

const char *sb_state_name(enum sb_state s);
int sb_state_parse(const char *s, enum sb_state *ret);

struct create_ctx;
struct admit_wait;

struct sandbox {
	unsigned ref;
	struct corrald *d;
	TAILQ_ENTRY(sandbox) link;
	bool in_registry;

	char id[UUID_STR_LEN];
	char dir[PATH_MAX];       /* <state>/sandboxes/<id> */
	char sock_path[PATH_MAX]; /* where execd listens (runtime's endpoint()) */

	enum sb_state state;
	char *reason;
	char *message;
	int64_t transition_ms;
	int64_t created_ms;
	bool has_expiry;
	int64_t expires_ms;

	char *image_uri;
	char *rootfs;     /* a directory, or a registry image's normalized reference */
	bool host_image;
	bool registry_image; /* rootfs names an image pulled into the store (images/images.h) */
	char *auth_user, *auth_pass; /* image.auth, kept in memory only (never in sandbox.json) */
	const char *pull_policy;     /* static string: "Always", "IfNotPresent", "Never" */
	json_t *entrypoint, *env, *metadata, *limits, *requests, *extensions, *platform;
	int64_t timeout_s; /* 0 = none */
	bool oom_group;

	pid_t pid; /* sandbox PID 1 (corral-execd); 0 until created */
	uint64_t starttime;
	int watch_fd; /* the runtime's watch() fd on PID 1, or -1 */
	struct event *death_ev;
	struct event *ttl_ev;
	struct event *oom_ev; /* oom_group on v1 (no kernel group kill): the OOM eventfd's event, or
			       * a poll of the OOM-kill counter where the runtime has no watch */
	int oom_fd;           /* the runtime's oom_watch() fd, or -1 */
	bool oom_fired;       /* corrald killed the group for an OOM: the death is OOMKilled */

	bool deleting;         /* marked for teardown: invisible to the API, persisted */
	bool delete_requested; /* DELETE arrived while Pending: roll back when the create ends */
	struct worker teardown;
	struct event *retry_ev;
	struct create_ctx *creating;

	/* network (network/net.h): none, or an address on corrald's bridge, kept in the record */
	struct sb_net {
		bool on;                 /* false: loopback only (extensions.network "none") */
		struct in_addr addr;     /* allocated at create, persisted */
		enum net_mode mode;
		enum egress_action default_action; /* the server default at create */
		const struct egress_policy *policy; /* the create's networkPolicy, if any: in the
						     * sandbox's chain from its first packet */
		bool attached;           /* net_sandbox_add() done in this corrald's lifetime */
	} net;

	/* admission.c */
	bool admitted;              /* holds adm_* of the capacity */
	uint64_t adm_cpu, adm_mem;  /* its requests: millicores, bytes */
	uint64_t adm_pids, adm_files; /* its shares of the host's pid and open-file tables */
	struct admit_wait *waiting; /* queued for capacity (state Pending) */

	struct sb_egress *egress; /* egress.c: its policy and mode; NULL without a network */
};

TAILQ_HEAD(sandbox_list, sandbox);

struct corrald {
	struct event_base *base;
	struct evhttp *http;
	struct evhttp_bound_socket *bound;
	const struct runtime_ops *rt;
	struct runtime_config rt_cfg;
	char state_dir[PATH_MAX];
	char sandboxes_dir[PATH_MAX];
	const char *image_dir; /* NULL: only the host image */
	char image_store[PATH_MAX]; /* <state>/images */
	const char *insecure[33];   /* --insecure-registry, NULL-terminated */
	size_t n_insecure;
	const char *registry_auth;  /* --registry-auth FILE or NULL */
	char import_dir[PATH_MAX];  /* --import-dir, resolved; "" = imports off */
	const char *mirrors[9];     /* --registry-mirror, NULL-terminated */
	size_t n_mirrors;
	int pull_timeout_s;
	const char *api_key;   /* NULL: no auth (loopback only) */
	size_t api_key_len;
	int idle_timeout_s;
	int header_timeout_s;     /* a request head must be complete this long after its first byte */
	unsigned max_connections; /* client connections open at once */
	uint8_t proxy_secret[32]; /* keys the per-sandbox proxy tokens (token.h); with api_key only */
	int create_timeout_s; /* runtime work plus execd readiness, from admission */
	int capacity_wait_s;  /* longest wait in the admission queue */
	uint64_t default_disk_bytes; /* --default-disk: ephemeral-storage of a sandbox without one */
	const char *default_disk;    /* as the operator spelled it; NULL when off */
	/* network: NULL when sandboxes get none (--sandbox-subnet none, or no setup possible) */
	struct net *net;
	enum net_mode egress_mode;          /* --egress-mode */
	enum egress_action egress_default;  /* --egress-default */
	const char *dns_upstream[9];        /* --dns-upstream, NULL-terminated (the resolver's) */
	size_t n_dns_upstream;
	bool shutting_down;
	struct corrald_egress egress; /* egress.c: resolver, --egress-* defaults */
	struct sandbox_list sandboxes; /* newest first */
	size_t n_sandboxes;
};

/* sandbox.c: the record, its JSON forms, the registry. */
struct sandbox *sandbox_new(struct corrald *d, const char *id);
struct sandbox *sandbox_ref(struct sandbox *sb);
void sandbox_unref(struct sandbox *sb);
void sandbox_unrefp(struct sandbox **sb);
#define _cleanup_sandbox_ _cleanup_(sandbox_unrefp)
void sandbox_set_status(struct sandbox *sb, enum sb_state state, const char *reason,
			const char *fmt, ...) _printf_(4, 5);
/* Write sandbox.json durably (write, fsync, rename, fsync the directory). Logs on failure (the
 * boundary) and returns -errno: the caller then rolls its change back and says so. */
int sandbox_save(struct sandbox *sb);
/* A state change whose record could not be stored: 507 when the file system is full, else 500. */
#define CODE_STATE_WRITE_FAILED "SANDBOX::STATE_WRITE_FAILED"
/* A create that hit the host's process limit (fork/clone EAGAIN): 503, retryable. */
#define CODE_HOST_PID_LIMIT "SANDBOX::HOST_PID_LIMIT"
int sandbox_save_status(int r);
/* Load <dir>/sandbox.json into a new record. */
int sandbox_load(struct corrald *d, const char *id, struct sandbox **ret, char *msg, size_t msglen);
/* The API's Sandbox object; the create response omits image. */
json_t *sandbox_to_api(const struct sandbox *sb, bool create_response);
bool sandbox_ended(const struct sandbox *sb);
/* lifecycle.c: drop the sandbox's network state (veth, nftables); its teardown does. */
void lifecycle_net_release(struct sandbox *sb);
json_t *sandbox_net_to_api(const struct sandbox *sb);

void registry_add(struct corrald *d, struct sandbox *sb);
void registry_remove(struct corrald *d, struct sandbox *sb);
/* Visible (not deleting) sandbox by id, or NULL. */
struct sandbox *registry_find(struct corrald *d, const char *id);
struct sandbox *registry_find_any(struct corrald *d, const char *id);

/* lifecycle.c: create, death watch, TTL, pause/resume, teardown, recovery. */
typedef void (*create_done_fn)(struct sandbox *sb, int status, const char *code, const char *msg,
			       void *arg);
/* Takes ownership of sb's spec fields; done gets status 202 or an error status/code/message. */
int lifecycle_create(struct sandbox *sb, uint64_t cpu_limit, uint64_t mem_limit, uint64_t pids_max,
		     uint64_t cpu_req, uint64_t mem_req, create_done_fn done, void *arg);
void lifecycle_teardown(struct sandbox *sb, const char *why);
/* DELETE: like lifecycle_teardown, but only once the delete mark is durable; else -errno, nothing
 * changed. */
int lifecycle_delete(struct sandbox *sb, const char *why);
void lifecycle_arm_ttl(struct sandbox *sb);
/* -EBUSY: wrong state; *write_err < 0 (and the change undone): the record could not be stored. */
int lifecycle_pause(struct sandbox *sb, char *msg, size_t msglen, int *write_err);
int lifecycle_resume(struct sandbox *sb, char *msg, size_t msglen, int *write_err);
/* Check the PID 1 right now (a proxy call just failed): handles a death not yet seen. */
void lifecycle_check_alive(struct sandbox *sb);
/* The same, waiting up to wait_ms for PID 1 to end (a stream from it just broke: it closes its
 * sockets a moment before it is reported dead). Blocks the loop: only for a broken stream. */
void lifecycle_check_alive_within(struct sandbox *sb, int wait_ms);
int lifecycle_recover(struct corrald *d);

/* images.c */
/* Resolve image uri to a lower dir ("host", an --image-dir name) or, for anything else that is a
 * valid reference, to its normalized name with *ret_registry set. -ENOENT/-EINVAL with msg. */
int image_resolve(const struct corrald *d, const char *uri, char *rootfs, size_t len,
		  bool *ret_host, bool *ret_registry, char *msg, size_t msglen);
/* Make sure sb's registry image is in the store (unless its policy says it need not be): joins a
 * pull of the same image already running or forks one. done runs on the loop with 0 or -errno
 * and the pull's message; never before this returns. */
typedef void (*image_pull_done_fn)(int rc, const char *msg, void *arg);
int image_ensure(struct sandbox *sb, image_pull_done_fn done, void *arg);
/* Whether a create of sb must pull first: policy Always, or IfNotPresent and not in the store (a
 * stat; fine on the loop). Never: no pull (image_fill_spec() fails when it is missing). */
bool image_needs_pull(const struct sandbox *sb);
/* POST /v1/images: pull uri (a registry reference) now, sharing a running pull of it. */
int image_pull_ahead(struct corrald *d, const char *uri, json_t *platform, const char *user,
		     const char *pass, image_pull_done_fn done, void *arg, char *msg,
		     size_t msglen);
/* Remove unused layers in a worker (image_gc()); the result is logged. */
int image_gc_start(struct corrald *d);
/* POST /v1/images {"import": {"path"}}: import the OCI layout (dir or tar) at path, which must be
 * under --import-dir once symlinks are resolved (-EPERM otherwise, msg says why), as uri. */
int image_import_start(struct corrald *d, const char *uri, const char *path, json_t *platform,
		       image_pull_done_fn done, void *arg, char *msg, size_t msglen);
/* The HTTP status of a failed pull (-errno of image_pull()). */
int image_pull_http_status(int rc);
/* GET /v1/images: the images in the store (reads their small records). */
json_t *image_list_json(const struct corrald *d);
/* DELETE /v1/images?ref=: forget the image (its records) and start a garbage collection of the
 * layers nothing uses any more. -EBUSY while a live sandbox uses the image. */
int image_forget(const struct corrald *d, const char *uri, char *msg, size_t msglen);
/* Shutdown: kill running pulls; their creates fail with 503 SANDBOX::SHUTTING_DOWN. */
void image_pulls_cancel(void);
/* In a worker: the image's layers, env, workdir and user into spec (memory of the worker). */
int image_fill_spec(const struct corrald *d, const struct sandbox *sb, struct sandbox_spec *spec,
		    char *msg, size_t msglen);

/* api.c */
int api_init(struct corrald *d);
