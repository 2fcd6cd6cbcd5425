/*
 * The native backend's internals shared by its files (not for corrald):
 *   native.c       create and destroy: the orchestration of dirs, disk, cgroup, clone, PID 1
 *   native_live.c  the quick operations on a created sandbox: its handle, probe, the watch on
 *                  PID 1 (with cgroup v1's group-OOM policy), the endpoint, the exit report,
 *                  disk usage; and the helpers below
 *   confine.c      what PID 1 does to itself before it execs execd (caps, seccomp, rlimits)
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "runtime/cgroup.h"
#include "runtime/runtime.h"

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
int native_endpoint(const struct runtime_config *cfg, const char *id,
		    const struct runtime_handle *h, struct runtime_endpoint *ret, struct error *err);
int native_read_exit(const struct runtime_config *cfg, const char *id, struct sandbox_exit *ret,
		     struct error *err);
int native_disk_usage(const struct runtime_config *cfg, const char *id,
		      struct sandbox_disk_usage *ret, struct error *err);
