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

/* Where a sandbox is in corrald's hands (its API state is enum sb_state). */
enum sb_phase {
	SB_PHASE_QUEUED,   /* asking admission for capacity (sb->waiting while it waits); a new
			    * record starts here. Nothing on disk yet. */
	SB_PHASE_CREATING, /* image pull, runtime create, readiness pings (sb->creating) */
	SB_PHASE_LIVE,     /* created or recovered: Running, Paused or ended, per sb->state */
	SB_PHASE_DELETING, /* marked for teardown: invisible to the API, persisted as "deleting" */
};

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

/* A sandbox's validated resources as numbers: parsed once (create_params_parse() and
 * disk_limit_apply()), then carried and persisted with the sandbox ("resources" in sandbox.json). */
struct sandbox_resources {
	uint64_t cpu_limit_millis;     /* 0 = no quota */
	uint64_t memory_limit_bytes;   /* 0 = no limit */
	uint64_t pids_max;             /* 0 = RUNTIME_DEFAULT_PIDS_MAX */
	uint64_t cpu_request_millis;   /* admission, stats; the limit when none was requested */
	uint64_t memory_request_bytes;
	uint64_t disk_limit_bytes;     /* ephemeral-storage; 0 = the state dir's, unlimited */
};

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
	json_t *volumes; /* the create's normalized volumes (validate.h), or NULL; in memory only:
			  * the runtime keeps what outlives the create (volume.h) */
	struct sandbox_resources res; /* limits and requests as numbers */
	int64_t timeout_s; /* 0 = none */
	bool oom_group;

	struct runtime_handle handle; /* the runtime's name for it (persisted); empty until created */
	pid_t execd_pid; /* the endpoint's peer_pid: execd's listener must be it; 0 = unknown */
	struct runtime_watch *watch; /* the runtime's watch (death, and the oomGroup policy) */
	int watch_fd;                /* its fd, or -1 */
	struct event *death_ev;
	struct event *ttl_ev;
	bool oom_fired; /* the runtime saw a group OOM (and killed the group): the death is OOMKilled */

	enum sb_phase phase;
	bool delete_requested; /* Creating only: a DELETE came; roll back when the create ends */
	struct worker teardown;
	struct event *retry_ev;
	struct create_ctx *creating;
	char *idem_key;  /* the Idempotency-Key of its create, or NULL (idempotency.h); persisted */
	char idem_fp[65]; /* that create's request fingerprint */
	bool orphaned;    /* every client of its create hung up: rolled back unless a repeat of the
			   * create (same key) claims it first */

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
	uint64_t adm_disk;            /* its disk, held of --capacity disk= (0: not counted) */
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
	uint64_t image_unpacked_max; /* --image-unpacked-max: what one image may unpack to */
	uint64_t image_store_max;    /* --image-store-max: LRU eviction above it; 0 = none */
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
	char *host_paths[33];        /* --allow-host-path, NULL-terminated (runtime_config's) */
	size_t n_host_paths;
	const char *volume_size;     /* --volume-size as spelled */
	uint64_t volume_size_bytes;
	/* network: NULL when sandboxes get none (--sandbox-subnet none, or no setup possible) */
	struct net *net;
	struct net_reaper *net_reaper;      /* lifecycle.c: removed sandboxes' nftables objects */
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
/* The status of a SANDBOX::STATE_WRITE_FAILED for sandbox_save()'s r: 507 when the file system is
 * full, else 500. */
int sandbox_save_status(int r);
/* The runtime's handle of sb (after create, or from its record), and the endpoint that goes with it. */
void sandbox_set_handle(struct sandbox *sb, const struct runtime_handle *h);
/* Load <dir>/sandbox.json into a new record. */
int sandbox_load(struct corrald *d, const char *id, struct sandbox **ret, char *msg, size_t msglen);
/* The API's Sandbox object; the create response omits image. */
json_t *sandbox_to_api(const struct sandbox *sb, bool create_response);
bool sandbox_ended(const struct sandbox *sb);
/* Shown by the API: not being deleted (nor asked to be while it was created). */
bool sandbox_visible(const struct sandbox *sb);
/* lifecycle.c: drop the sandbox's network state (veth, nftables); its teardown does. */
void lifecycle_net_release(struct sandbox *sb);
/* lifecycle.c: remove the retired sandboxes' nftables objects now (shutdown); true when a worker
 * for it runs. */
bool lifecycle_net_reap_now(struct corrald *d);
json_t *sandbox_net_to_api(const struct sandbox *sb);

void registry_add(struct corrald *d, struct sandbox *sb);
void registry_remove(struct corrald *d, struct sandbox *sb);
/* Visible (not deleting) sandbox by id, or NULL. */
struct sandbox *registry_find(struct corrald *d, const char *id);
struct sandbox *registry_find_any(struct corrald *d, const char *id);

/* lifecycle.c: create, death watch, TTL, pause/resume, teardown, recovery. */
typedef void (*create_done_fn)(struct sandbox *sb, int status, const char *code, const char *msg,
			       void *arg);
/* Creates sb as its record says (sb->res included); done gets status 202 or an error
 * status/code/message. */
int lifecycle_create(struct sandbox *sb, create_done_fn done, void *arg);
void lifecycle_teardown(struct sandbox *sb, const char *why);
/*
 * End sb whatever its phase (DELETE, a create's client gone): a queued create is taken out of
 * the queue, answered 409 SANDBOX::DELETED and torn down; one being made is rolled back once its
 * runtime work ends; a live one is torn down once the delete mark is durable (else -errno,
 * nothing changed). why ("deleted", "its client hung up") goes to the log.
 */
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
/* At start: the paths and names every pull's job carries (the store, --registry-auth, ...)
 * encode as JSON, so that no pull fails for them later. 0 or -EINVAL naming the option. */
int image_pull_job_check(const struct corrald *d, struct error *err);
/* corrald exec'd as a pull worker (images.c): argv[1] is IMAGE_PULL_WORKER_ARG. */
#define IMAGE_PULL_WORKER_ARG "--internal-pull-worker"
enum { PULL_FD_JOB = 3, PULL_FD_PROGRESS = 4, PULL_FD_RESULT = 5 };
_noreturn_ void image_pull_worker_main(void);
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
/* Its error code: SANDBOX::IMAGE_TOO_LARGE past --image-unpacked-max, else
 * SANDBOX::IMAGE_PULL_FAILED. */
const char *image_pull_code(int rc);
/* GET /v1/images: the images in the store (reads their small records). */
json_t *image_list_json(const struct corrald *d);
/* The pulls and imports running now: [{"name", "bytesDone", "bytesTotal"}] (blob bytes). */
json_t *image_pulls_json(const struct corrald *d);
/* GET /v1/images?ref=: the image's records (one per platform pulled) with their layers, disk
 * usage, config, last use; -ENOENT when not in the store, -EINVAL for a bad reference. */
int image_inspect_json(const struct corrald *d, const char *uri, json_t **ret, char *msg,
		       size_t msglen);
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
