/*
 * The runtime interface: how corrald asks a backend to make, pause, inspect and remove a sandbox.
 *
 * Contract with corrald:
 *  - create() and destroy() block (mounts, cgroup setup, waiting for processes to die). corrald never
 *    calls them on its event loop: it forks a worker process that calls them and reports the result
 *    over a pipe (see corrald/worker.c). Everything else returns quickly and may run inline.
 *  - The runtime never logs; every failure is returned with a message in struct error.
 *  - A sandbox outlives the process that created it. create() hands back an opaque handle
 *    (struct runtime_handle) that corrald stores in its record and passes back, uninterpreted, to
 *    probe(), watch() and endpoint(), also after a restart of corrald. corrald learns that the
 *    sandbox ended from watch()'s fd, never from a pid of its own.
 *  - docs/runtime.md ("Writing a runtime backend") lists every op with its contract.
 *
 * On-disk layout of one sandbox (everything below <id>/ is on the host side: the sandbox sees none
 * of these paths, and the directory itself is 0700 root):
 *
 *   <state_dir>/sandboxes/<id>/
 *     sandbox.json      corrald's record (spec, metadata, expiry, status); corrald owns it
 *     rootfs/           overlay mount point (lower = image, upper/work below); runtime owns it
 *     upper/ work/      the sandbox's private writable layer (upper owned by sandbox root)
 *     disk/             instead of upper/ work/ with an ephemeral-storage limit (every sandbox,
 *                       with corrald's --default-disk): the layer's own ext4 file system (an
 *                       unnamed image, see disk.h) holding upper/, work/ and run/
 *     lower/            mount point of an --image-dir image, or of a registry image's layer root
 *                       (<state>/images/layers, images/images.h), idmapped (in PID 1's namespace
 *                       only); a registry image's overlay names its layers "lower/<digest>"
 *     run/              execd's state (disk/run/ with a disk limit), owned by sandbox root, 0700:
 *       execs/          one entry per execution: output, status (execd owns it)
 *       exit.json       written by execd just before PID 1 exits: {"reason","exitCode","message"}
 *     execd.sock        corral-execd's HTTP/1.1 listener (OpenSandbox execd API): bound here by
 *                       the runtime, listened on by execd through an inherited fd (fd 3)
 *     pid               "<pid> <starttime-in-clock-ticks>\n" of the sandbox's PID 1 (runtime;
 *                       written to pid.tmp and renamed, so a reader never sees half of it)
 *     userns            the sandbox's slot of host ids (userns.h), "<slot>\n"
 *
 * PID 1 is corral-execd, exec'd from an fd of the host's binary (no path of it in the sandbox):
 *     corral-execd --listen-fd 3 --state /proc/self/fd/4/execs --exit-file /proc/self/fd/4/exit.json
 *                  [-- ENTRYPOINT...]
 * fd 4 is run/. execd is non-dumpable, so no other process of the sandbox can open its fds through
 * /proc; nothing in the sandbox can reach, replace or impersonate the socket or the state.
 * It runs with the spec's environment (plus PATH and HOME=/root when the spec has none),
 * stdin/stdout/stderr on /dev/null, all signals at their defaults, in its own session, as root of
 * the sandbox's user namespace (host ids base..base+65535, userns.h) unless cfg->no_userns.
 *
 * Native backend (runtime_native, src/runtime/native*.c; cgroup managers in cgroup.h):
 *  - cgroups: <root>/<cgroup_name>/<id> (v2), <root>/<ctrl>/<cgroup_name>/<id> for ctrl in cpu,
 *    cpuacct, memory, pids, freezer, and the membership-only systemd, unified and cpuset (v1);
 *    <root> = /sys/fs/cgroup or $CORRAL_CGROUP_ROOT. The parent cgroup is created on first use and
 *    never removed. A CPU limit below the host's CPU count pins the sandbox (affinity + cpuset)
 *    and gives it its own CPU view (sysview.h); a memory limit its own /proc/meminfo.
 *  - $CORRAL_CGROUP_FAVORDYNMODS=1: opt-in remount of the host's cgroup2 mount with favordynmods
 *    (see cgroup_favor_dynmods()).
 *  - The handle is "<pid> <starttime>" of PID 1 (the pid file's line); watch() is a pidfd on it.
 *  - On v1 there is no group OOM kill in the kernel: with oom_group, watch()'s fd also turns
 *    readable on an OOM of the sandbox (an eventfd registered on memory.oom_control, or a timer
 *    polling the OOM-kill counter), and watch_check() kills the group (native_live.c).
 */
#pragma once

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "shared/error.h"
#include "shared/id.h"

#define EXECD_LISTEN_FD 3 /* PID 1's inherited listening socket */
#define EXECD_STATE_FD 4  /* PID 1's inherited run/ directory */
#define SANDBOX_EXIT_REASON_MAX 32
#define SANDBOX_EXIT_MESSAGE_MAX 256
#define RUNTIME_DEFAULT_PIDS_MAX 4096

struct runtime_config {
	const char *state_dir;  /* e.g. /var/lib/corral */
	const char *execd_path; /* host path of the static corral-execd binary */
	const char *cgroup_name; /* parent cgroup under each hierarchy, default "corral" */
	uint64_t nofile;        /* RLIMIT_NOFILE of every sandbox; 0 = CONFINE_DEFAULT_NOFILE */
	bool no_userns;         /* opt-out: no user namespace (sandbox root is host root) */
	const char *userns_dir; /* host-wide id-range slots (userns.h); NULL = the default */
	char *const *host_paths; /* --allow-host-path: directories host volumes may come from
				  * (absolute, no trailing '/'), NULL-terminated; NULL = none */
	uint64_t volume_size;    /* size of a named volume made without one; 0 = VOLUME_SIZE_DEFAULT */
};

/*
 * Volumes (runtime/volume.h): a host directory (or file) under one of cfg->host_paths, or a named
 * volume kept by the runtime under <state>/volumes/<name> on a file system of its own size. A
 * request the runtime refuses fails create() with one of these codes (the message says why):
 */
#define RUNTIME_EVOL_DENIED EBADE      /* the source is outside the allowed directories (a
					* symlink, '..', not listed) or not a directory or file */
#define RUNTIME_EVOL_NOTFOUND EBADRQC  /* the host path (or a subPath in it) does not exist */
#define RUNTIME_EVOL_NOCLAIM ENOCSI    /* the named volume does not exist (createIfNotExists false) */
#define RUNTIME_EVOL_MOUNTPATH EBADSLT /* mountPath cannot be used in this image */
#define RUNTIME_EVOL_SUBPATH ENOANO    /* subPath goes through a symlink or is not a directory */
#define RUNTIME_VOLUMES_MAX 32

enum volume_kind { VOLUME_HOST = 1, VOLUME_NAMED = 2 };

#define VOLUME_NAME_MAX 63

/* A named volume as volume_list() reports it. */
struct volume_info {
	char name[VOLUME_NAME_MAX + 1];
	uint64_t size_bytes; /* the file system's size */
	uint64_t used_bytes; /* what its image takes on the host */
	unsigned users;      /* sandboxes using it */
	bool delete_on_end;  /* made with deleteOnSandboxTermination */
};

struct sandbox_volume {
	const char *name;       /* the request's name (messages only) */
	enum volume_kind kind;
	const char *source;     /* VOLUME_HOST: absolute host path; VOLUME_NAMED: the volume's name */
	const char *sub_path;   /* relative path inside the source, or NULL */
	const char *mount_path; /* absolute path inside the sandbox */
	bool read_only;
	bool create;            /* VOLUME_NAMED: make it when missing (createIfNotExists) */
	bool delete_on_end;     /* VOLUME_NAMED: remove it once no sandbox uses it any more */
	uint64_t size_bytes;    /* VOLUME_NAMED: its size when made here; 0 = cfg->volume_size */
};

/* What PID 1 reported as it ended, as read by the backend from where the sandbox cannot write,
 * checked: reason is one execd writes, message printable ASCII only. */
struct sandbox_exit {
	char reason[SANDBOX_EXIT_REASON_MAX]; /* "EntrypointExited", "ExecdExited" or
					       * "ResourceExhausted" (execd could not start the
					       * entrypoint: fork EAGAIN/ENOMEM) */
	int exit_code;                        /* -1..255 */
	char message[SANDBOX_EXIT_MESSAGE_MAX];
};

struct sandbox_spec {
	char id[UUID_STR_LEN];
	const char *hostname;   /* defaults to the first 12 characters of the id */
	const char *rootfs;     /* image lower dir: "/" for the host image, else <image-dir>/<name> */
	bool host_image;        /* the lower dir is the host's own "/" */
	/* A registry image instead of rootfs: layer directories under layer_root, lowest first
	 * (NULL-terminated names without '/', ',' or ':'). The overlay stacks them as its lower
	 * layers, named relative to one (idmapped) mount of layer_root. */
	const char *layer_root;
	char *const *layers;
	const char *workdir;     /* PID 1's working directory, made if missing (execd's commands
				  * and entrypoint inherit it); NULL = "/" */
	const char *user;        /* the entrypoint's user, "USER[:GROUP]" (execd --user); NULL: root */
	char *const *entrypoint; /* NULL-terminated argv, or NULL: execd only */
	char *const *env;        /* NULL-terminated "KEY=VALUE" list, may be NULL */
	uint64_t cpu_limit_millis;      /* 0 = no quota */
	uint64_t memory_limit_bytes;    /* 0 = no limit */
	uint64_t pids_max;              /* 0 = RUNTIME_DEFAULT_PIDS_MAX */
	uint64_t cpu_request_millis;    /* proportional share; 0 = same as limit (or default) */
	uint64_t memory_request_bytes;  /* soft protection; 0 = none */
	bool oom_group;                 /* kill the whole sandbox on OOM (Kubernetes behaviour) */
	uint64_t disk_limit_bytes;      /* ephemeral-storage: size of the writable layer's own file
					 * system (runtime/disk.h); 0 = the state dir's, unlimited */
	const struct sandbox_volume *volumes; /* mounted in this order after the sandbox's own
					       * mounts (so parents before children) */
	size_t n_volumes;               /* at most RUNTIME_VOLUMES_MAX */
	const char *resolv_conf;        /* /etc/resolv.conf of the sandbox (its own file in its
					 * layer); NULL = a copy of the host's */
};

/* The backend's name for a created sandbox: NUL-terminated printable ASCII, at most
 * RUNTIME_HANDLE_MAX - 1 bytes, meaningful only to the backend that made it. corrald persists it
 * with the sandbox's record. An empty handle (a record written before handles existed) asks the
 * backend to find the sandbox by its id alone; native: from its pid file. */
#define RUNTIME_HANDLE_MAX 64
struct runtime_handle {
	char s[RUNTIME_HANDLE_MAX];
};

/* How to reach a sandbox's execd: a unix socket now (TCP or vsock would add fields). */
struct runtime_endpoint {
	char path[PATH_MAX]; /* host side; nothing the sandbox can replace */
	pid_t peer_pid; /* > 0: the listener must be this host process (SO_PEERCRED): PID 1, also
			 * named in messages; 0: not known (no handle yet) or not a host process */
};

/* Bytes the sandbox's writable layer holds. */
struct sandbox_disk_usage {
	uint64_t used_bytes;
	bool exact; /* false: counted only up to a bound (a walk of a huge tree stops early) */
};

/* What a watch saw (watch_check()). */
enum {
	RUNTIME_WATCH_ENDED = 1 << 0, /* the sandbox has ended (PID 1 is gone) */
	RUNTIME_WATCH_OOM = 1 << 1,   /* oom_group: an OOM of the sandbox; the backend is killing
				       * (or has killed) all of it, so its end is an OOM kill */
};
struct runtime_watch_report {
	unsigned events;        /* RUNTIME_WATCH_* */
	const char *oom_source; /* with RUNTIME_WATCH_OOM: what told the backend (a static string
				 * for the log, e.g. "memory.oom_control event") */
};
struct runtime_watch; /* the backend's */

/* What the runtime knows about a live or dead sandbox, read without blocking. */
struct sandbox_probe {
	bool alive;              /* the sandbox the handle names still runs (native: PID 1 exists
				  * with the recorded start time and is not a zombie) */
	bool frozen;
	uint64_t oom_kills;      /* processes killed by the OOM killer in this sandbox's cgroup */
	uint64_t oom_events;     /* times the cgroup hit OOM (v2 memory.events "oom"); v1: unknown */
	bool oom_events_known;   /* false on v1, which only signals OOM through an eventfd */
	uint64_t memory_max_events; /* limit hits that forced reclaim (v2 "max", v1 memory.failcnt) */
	uint64_t memory_current; /* bytes */
	uint64_t memory_peak;    /* bytes, 0 when the backend cannot tell */
	uint64_t memory_limit;   /* bytes, 0 = unlimited */
	uint64_t pids_current;
	uint64_t pids_max;
	uint64_t cpu_usage_ns;
	uint64_t cpu_nr_throttled;
	uint64_t cpu_throttled_ns;
	uint64_t cpu_nr_periods;
	uint64_t cpu_limit_millis; /* from the quota; 0 = none */
};

struct runtime_ops {
	const char *name;
	/* Blocking. On success the sandbox runs (native: PID 1 has exec'd corral-execd) and
	 * *ret_handle names it for every later call. On failure nothing of it is left. */
	int (*create)(const struct runtime_config *cfg, const struct sandbox_spec *spec,
		      struct runtime_handle *ret_handle, struct error *err);
	/* Blocking. Kill every process, unmount, remove the cgroup, then remove files (never crossing
	 * a mount point). Idempotent: parts already gone are success. Needs only the id (a create
	 * interrupted before it returned a handle is destroyed too). */
	int (*destroy)(const struct runtime_config *cfg, const char *id, struct error *err);
	int (*pause)(const struct runtime_config *cfg, const char *id, struct error *err);
	int (*resume)(const struct runtime_config *cfg, const char *id, struct error *err);
	/* Kill every process of the sandbox now (forced stop). Non-blocking. */
	int (*kill)(const struct runtime_config *cfg, const char *id, struct error *err);
	/* Usage numbers and whether the sandbox still runs. Quick; fine on the event loop. */
	int (*probe)(const struct runtime_config *cfg, const char *id,
		     const struct runtime_handle *h, struct sandbox_probe *ret, struct error *err);
	/* Optional (may be NULL). Call once in the long-lived process that forks the create workers,
	 * before the first fork: the per-process work of a create (compiling the seccomp filter,
	 * finding the cgroup layout) is then done once and inherited by every worker instead of
	 * being redone in each (~1 ms per create). Quick; fine on the event loop at start-up. */
	int (*prepare)(const struct runtime_config *cfg, struct error *err);
	/*
	 * Watch the sandbox h names. *ret gets the watch; the return value is an fd (close-on-exec,
	 * owned by the watch) that turns readable when there is something for watch_check(): the
	 * sandbox ended, or, with oom_group, it hit OOM. oom_group is the sandbox's
	 * extensions.oomGroup: the first OOM ends all of it, as Kubernetes does; a backend whose
	 * kernel does not do that itself (cgroup v1) does it behind this fd, timers included.
	 * -ESRCH when the sandbox has ended already (or h names nothing that runs), -ENOSYS when the
	 * backend cannot watch here (the caller polls probe()'s alive, and gets no OOM policy).
	 * Quick; fine on the event loop.
	 */
	int (*watch)(const struct runtime_config *cfg, const char *id, const struct runtime_handle *h,
		     bool oom_group, struct runtime_watch **ret, struct error *err);
	/* Call when the watch's fd is readable (calling it at other times is harmless): does what is
	 * due and clears the fd. *ret is filled also when it returns -errno (a group kill that
	 * failed; err says why). Never blocks. */
	int (*watch_check)(struct runtime_watch *w, struct runtime_watch_report *ret,
			   struct error *err);
	/* Close the watch's fds and free it. NULL is fine. */
	void (*unwatch)(struct runtime_watch *w);
	/* How to reach the sandbox's execd. h may be NULL before create() returned (then the
	 * endpoint has no peer_pid yet). Quick, no blocking I/O. */
	int (*endpoint)(const struct runtime_config *cfg, const char *id,
			const struct runtime_handle *h, struct runtime_endpoint *ret,
			struct error *err);
	/* PID 1's exit report: -ENOENT when there is none, -EBADMSG when it is not one execd writes.
	 * Never blocks (no FIFO can stall it) and never follows a link. Quick; fine on the loop. */
	int (*read_exit)(const struct runtime_config *cfg, const char *id, struct sandbox_exit *ret,
			 struct error *err);
	/* Optional (may be NULL). What the sandbox's writable layer holds (the stats extension;
	 * ended sandboxes too, until destroyed). Reads the layer: quick for an agent's layer, at
	 * most a bounded walk. */
	int (*disk_usage)(const struct runtime_config *cfg, const char *id,
			  struct sandbox_disk_usage *ret, struct error *err);
	/* Optional (may be NULL). Get ready for creates with disk_limit_bytes of this size (the
	 * native backend formats its template image now instead of in the first such create), and
	 * fail if such a disk cannot be made at all. Blocking (tens of ms); for start-up. */
	int (*disk_prepare)(const struct runtime_config *cfg, uint64_t disk_limit_bytes,
			    struct error *err);
	/* Optional (may be NULL). The named volumes (*ret malloc'd), and removing one: -ENOENT when
	 * there is none, -EBUSY while a sandbox uses it. Quick (a flock the creates also take while
	 * they make a volume: tens of ms at worst); fine on the event loop. */
	int (*volume_list)(const struct runtime_config *cfg, struct volume_info **ret,
			   size_t *ret_n, struct error *err);
	int (*volume_delete)(const struct runtime_config *cfg, const char *name,
			     struct error *err);
	/* Optional (may be NULL: the backend's sandboxes get no network from corrald). An fd
	 * (close-on-exec) of the sandbox's network namespace, which has only a loopback interface
	 * until corrald attaches it (network/net.h), checked to be the one h names. -ESRCH when
	 * the sandbox has ended. Quick; fine in a worker or on the loop. */
	int (*netns)(const struct runtime_config *cfg, const char *id,
		     const struct runtime_handle *h, struct error *err);
};

extern const struct runtime_ops runtime_native;

/* Start time (field 22 of /proc/PID/stat) of pid, to tell a live PID 1 from a recycled pid. */
int runtime_pid_starttime(pid_t pid, uint64_t *ret);
/* The native backend's handle of PID 1 (pid, starttime), and back: -EINVAL when h is not one. */
void runtime_native_handle(pid_t pid, uint64_t starttime, struct runtime_handle *ret);
int runtime_native_handle_parse(const struct runtime_handle *h, pid_t *ret_pid,
				uint64_t *ret_starttime);
