/*
 * The native backend's internals shared by its files (not for corrald):
 *   native.c       create and destroy: the orchestration of dirs, disk, cgroup, clone, PID 1
 *   native_pid1.c  what the two children of a create do: the intermediate (cgroup, namespaces)
 *                  and PID 1's own setup (mounts, pivot_root, fds) up to its exec of execd
 *   native_live.c  the quick operations on a created sandbox: its handle, probe, the watch on
 *                  PID 1 (with cgroup v1's group-OOM policy), the endpoint, the exit report,
 *                  disk usage; and the helpers below
 *   confine.c      what PID 1 does to itself before it execs execd (caps, seccomp, rlimits)
 */
#pragma once

#include <limits.h>
#include <linux/filter.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "runtime/cgroup.h"
#include "runtime/runtime.h"
#include "runtime/sysview.h"
#include "shared/timeutil.h"

#define NS_FLAGS                                                                                   \
	(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWCGROUP)

/* Phase timestamps for profiling create (build with -DRUNTIME_TRACE; off in normal builds). */
#ifdef RUNTIME_TRACE
extern uint64_t *runtime_trace;
#define TRACE(i)                                                                                   \
	do {                                                                                       \
		if (runtime_trace)                                                                 \
			runtime_trace[i] = time_mono_ns();                                         \
	} while (0)
#else
#define TRACE(i) ((void)0)
#endif

#define EXECD_SOCKET "execd.sock"
/* execd's exit report in run/ (execd --exit-file, read_exit()): named here only. */
#define EXECD_EXIT_FILE "exit.json"
#define SANDBOX_EXIT_FILE_MAX 4096 /* execd writes a few hundred bytes */
#define PID_FILE "pid"           /* the handle's line, for destroy() and handle-less records */

/* The cgroup manager of this host (detected once), or NULL when there is no usable hierarchy. */
const struct cgroup_ops *cgroup_ops_cached(void);
/* Parent cgroup of every sandbox: cfg->cgroup_name or CGROUP_DEFAULT_PARENT. */
const char *cgroup_parent(const struct runtime_config *cfg);
/* -EINVAL (with err) unless id is a plain name (no '/', not starting with '.'). */
int check_id(const char *id, struct error *err);
int check_config(const struct runtime_config *cfg, struct error *err);
/* <state>/sandboxes/<id>[/<name>]; -ENAMETOOLONG when it does not fit. */
int sb_path(char *buf, size_t len, const struct runtime_config *cfg, const char *id,
	    const char *name);
/* Fields 3 (state) and 22 (starttime) of /proc/PID/stat; -ESRCH when pid is gone. */
int pid_stat(pid_t pid, char *ret_state, uint64_t *ret_start);
/* PID 1 of sandbox id: from h, or from its pid file when h is NULL or empty. -ESRCH: none. */
int native_pid1(const struct runtime_config *cfg, const char *id, const struct runtime_handle *h,
		pid_t *ret_pid, uint64_t *ret_starttime);

int native_probe(const struct runtime_config *cfg, const char *id, const struct runtime_handle *h,
		 struct sandbox_probe *ret, struct error *err);
int native_watch(const struct runtime_config *cfg, const char *id, const struct runtime_handle *h,
		 bool oom_group, struct runtime_watch **ret, struct error *err);
int native_watch_check(struct runtime_watch *w, struct runtime_watch_report *ret,
		       struct error *err);
void native_unwatch(struct runtime_watch *w);
int native_netns(const struct runtime_config *cfg, const char *id, const struct runtime_handle *h,
		 struct error *err);
int native_endpoint(const struct runtime_config *cfg, const char *id,
		    const struct runtime_handle *h, struct runtime_endpoint *ret, struct error *err);
int native_read_exit(const struct runtime_config *cfg, const char *id, struct sandbox_exit *ret,
		     struct error *err);
int native_disk_usage(const struct runtime_config *cfg, const char *id,
		      struct sandbox_disk_usage *ret, struct error *err);

/* What the sandbox's children need, all prepared by native.c before the first clone. */
struct sync_msg {
	int32_t kind; /* MSG_PID from the intermediate, MSG_ERROR from either */
	int32_t code; /* negative errno */
	int32_t pid;
	char msg[ERROR_MSG_MAX];
};
enum { MSG_PID = 1, MSG_ERROR = 2 };

struct child_ctx {
	const struct runtime_config *cfg;
	const struct sandbox_spec *spec;
	const struct cgroup_ops *cg;
	const char *parent;
	int sync_fd;
	int read_fd;
	char *pid1_stack;
	int cap_last;
	char dir[PATH_MAX];	  /* <state>/sandboxes/<id>: the overlay's layers are named from here */
	char rootfs[PATH_MAX];
	char run[PATH_MAX];	  /* execd's state dir: run/ or disk/run/ */
	char empty[PATH_MAX];	  /* the sandbox's one empty read-only tmpfs, once mounted */
	uid_t base;		  /* host id of sandbox root (0 without a user namespace) */
	int userns_fd;		  /* the sandbox's user namespace, or -1 (cfg->no_userns) */
	bool idmap_lower;	  /* mount the image idmapped on <dir>/lower first */
	bool bind_lower;	  /* layers without a user namespace: a plain bind mount there */
	const char *lower_src;	  /* what is mounted on <dir>/lower: rootfs or layer_root */
	char image_top[PATH_MAX]; /* the image's top directory (its root's owner and /etc) */
	int listen_fd;		  /* execd's socket, bound at <dir>/execd.sock: EXECD_LISTEN_FD */
	int state_fd;		  /* run/: EXECD_STATE_FD */
	int execd_fd;		  /* O_PATH of the host's corral-execd, exec'd by PID 1 */
	/* tmpfs options of the sandbox's own mounts: owned by sandbox root */
	char opt_dev[96], opt_shm[96], opt_tmp[96], opt_root[96], opt_pts[128];
	bool etc_in_upper;	  /* /etc files already written into the upper layer */
	struct sysview view;	  /* the CPU/memory view; pin to view.cpus when view.cpu */
	/* The volumes: detached mounts made by the caller (volume.h), moved into place by PID 1
	 * in mount order (by mountPath: parents first). */
	int vol_tree[RUNTIME_VOLUMES_MAX];
	bool vol_dir[RUNTIME_VOLUMES_MAX];
	size_t vol_order[RUNTIME_VOLUMES_MAX];
	size_t n_vol;
	char upper[PATH_MAX]; /* the overlay's upper dir (<dir>/upper, or <dir>/disk/upper) */
	char overlay_opts[3 * PATH_MAX + 128];
	char hostname[65];
	char hosts[512];
	char resolv[2048];
	char **argv;
	char **envp;
	struct sock_fprog seccomp;
};

/* The intermediate child of a create (clone(VM|VFORK) of native_create()): joins the cgroup(s),
 * makes the namespaces, starts PID 1 and reports its pid on c->sync_fd. Never returns. */
int native_intermediate_main(void *arg);
