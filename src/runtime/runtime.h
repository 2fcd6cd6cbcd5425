/*
 * The runtime interface: how corrald asks a backend to make, pause, inspect and remove a sandbox.
 *
 * Contract with corrald:
 *  - create() and destroy() block (mounts, cgroup setup, waiting for processes to die). corrald never
 *    calls them on its event loop: it forks a worker process that calls them and reports the result
 *    over a pipe (see corrald/worker.c). Everything else returns quickly and may run inline.
 *  - The runtime never logs; every failure is returned with a message in struct error.
 *  - A sandbox outlives the process that created it: its PID 1 (corral-execd) is not a child of
 *    corrald, so corrald watches it with a pidfd and identifies it by (pid, start time).
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
 * Native backend (runtime_native, src/runtime/native.c; cgroup managers in cgroup.h):
 *  - cgroups: <root>/<cgroup_name>/<id> (v2), <root>/<ctrl>/<cgroup_name>/<id> for ctrl in cpu,
 *    cpuacct, memory, pids, freezer, and the membership-only systemd, unified and cpuset (v1);
 *    <root> = /sys/fs/cgroup or $CORRAL_CGROUP_ROOT. The parent cgroup is created on first use and
 *    never removed. A CPU limit below the host's CPU count pins the sandbox (affinity + cpuset)
 *    and gives it its own CPU view (sysview.h); a memory limit its own /proc/meminfo.
 *  - $CORRAL_CGROUP_FAVORDYNMODS=1: opt-in remount of the host's cgroup2 mount with favordynmods
 *    (see cgroup_favor_dynmods()).
 *  - On v1 there is no group OOM kill in the kernel: with spec->oom_group, corrald watches the fd
 *    from oom_watch() (an eventfd registered on memory.oom_control) and calls kill() when it fires.
 */
#pragma once

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
};

/* What PID 1 reported as it ended, as read by the backend from where the sandbox cannot write,
 * checked: reason is one execd writes, message printable ASCII only. */
struct sandbox_exit {
	char reason[SANDBOX_EXIT_REASON_MAX]; /* "EntrypointExited" or "ExecdExited" */
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
	const char *resolv_conf;        /* /etc/resolv.conf of the sandbox (its own file in its
					 * layer); NULL = a copy of the host's */
};

/* What the runtime knows about a live or dead sandbox, read without blocking. */
struct sandbox_probe {
	bool alive;              /* PID 1 still exists with the recorded start time */
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
	/* Blocking. On success PID 1 has exec'd corral-execd; *ret_pid and *ret_starttime identify it. */
	int (*create)(const struct runtime_config *cfg, const struct sandbox_spec *spec,
		      pid_t *ret_pid, uint64_t *ret_starttime, struct error *err);
	/* Blocking. Kill every process, unmount, remove the cgroup, then remove files (never crossing
	 * a mount point). Idempotent: parts already gone are success. */
	int (*destroy)(const struct runtime_config *cfg, const char *id, struct error *err);
	int (*pause)(const struct runtime_config *cfg, const char *id, struct error *err);
	int (*resume)(const struct runtime_config *cfg, const char *id, struct error *err);
	/* Kill every process of the sandbox now (group OOM policy, forced stop). Non-blocking. */
	int (*kill)(const struct runtime_config *cfg, const char *id, struct error *err);
	int (*probe)(const struct runtime_config *cfg, const char *id, pid_t pid,
		     uint64_t starttime, struct sandbox_probe *ret, struct error *err);
	/* Optional (may be NULL). Call once in the long-lived process that forks the create workers,
	 * before the first fork: the per-process work of a create (compiling the seccomp filter,
	 * finding the cgroup layout) is then done once and inherited by every worker instead of
	 * being redone in each (~1 ms per create). Quick; fine on the event loop at start-up. */
	int (*prepare)(const struct runtime_config *cfg, struct error *err);
	/* Optional (may be NULL). An fd (close-on-exec, non-blocking) that turns readable each time
	 * the sandbox's memory cgroup hits OOM; read 8 bytes to clear it. -ENOTSUP when the backend
	 * needs no watch (cgroup v2: memory.oom.group makes the kernel kill the group itself).
	 * Quick; fine on the event loop. The caller closes the fd. */
	int (*oom_watch)(const struct runtime_config *cfg, const char *id, struct error *err);
	/* An fd (close-on-exec) that turns readable once PID 1 (pid, starttime) has ended: a pidfd
	 * for the native backend. -ESRCH when it has ended already (or pid is another process by
	 * now), -ENOSYS when the backend cannot give one here (the caller polls probe()'s alive).
	 * Quick; fine on the event loop. The caller closes the fd. */
	int (*watch)(const struct runtime_config *cfg, const char *id, pid_t pid, uint64_t starttime,
		     struct error *err);
	/* Where to reach the sandbox's execd: the unix socket path (host side; nothing the sandbox
	 * can replace). Quick, no I/O. */
	int (*endpoint)(const struct runtime_config *cfg, const char *id, char *ret_path, size_t len,
			struct error *err);
	/* PID 1's exit report: -ENOENT when there is none, -EBADMSG when it is not one execd writes.
	 * Never blocks (no FIFO can stall it) and never follows a link. Quick; fine on the loop. */
	int (*read_exit)(const struct runtime_config *cfg, const char *id, struct sandbox_exit *ret,
			 struct error *err);
	/* Optional (may be NULL). Get ready for creates with disk_limit_bytes of this size (the
	 * native backend formats its template image now instead of in the first such create), and
	 * fail if such a disk cannot be made at all. Blocking (tens of ms); for start-up. */
	int (*disk_prepare)(const struct runtime_config *cfg, uint64_t disk_limit_bytes,
			    struct error *err);
	/* Optional (may be NULL: the backend's sandboxes get no network from corrald). An fd
	 * (close-on-exec) of the sandbox's network namespace, which has only a loopback interface
	 * until corrald attaches it (network/net.h), checked to be PID 1's (pid, starttime).
	 * -ESRCH when PID 1 has ended. Quick; fine in a worker or on the loop. */
	int (*netns)(const struct runtime_config *cfg, const char *id, pid_t pid,
		     uint64_t starttime, struct error *err);
};

extern const struct runtime_ops runtime_native;

/* Start time (field 22 of /proc/PID/stat) of pid, to tell a live PID 1 from a recycled pid. */
int runtime_pid_starttime(pid_t pid, uint64_t *ret);
