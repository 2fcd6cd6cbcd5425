/*
 * Cgroup managers: one per cgroup version, each a small table of function pointers, chosen at run
 * time by cgroup_detect(). Every sandbox gets the cgroup <parent>/<id> (parent = cfg->cgroup_name,
 * default "corral") in each hierarchy the manager uses:
 *
 *   v2:  <root>/<parent>/<id>                 (one unified hierarchy)
 *   v1:  <root>/<ctrl>/<parent>/<id>          for ctrl in cpu, cpuacct, memory, pids, freezer,
 *                                             and membership-only systemd, unified, cpuset
 *                                             (co-mounted hierarchies such as "cpu,cpuacct" work)
 *
 * <root> is /sys/fs/cgroup, or $CORRAL_CGROUP_ROOT when set (unit tests point it at a fake tree).
 * The root holds "cgroup.controllers" exactly when it is a cgroup2 mount: that is the detection
 * rule (a hybrid host's /sys/fs/cgroup is a tmpfs of v1 mounts and is managed as v1).
 *
 * Every operation but create() and remove() is quick and never waits: it may run on corrald's event
 * loop.
 */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

#include "runtime/runtime.h"
#include "shared/error.h"

#define CGROUP_DEFAULT_PARENT "corral"
#define CGROUP_CPU_PERIOD_US 100000

struct cgroup_ops {
	const char *name; /* "v1" or "v2" */
	/* Make <parent>/<id> (enabling controllers on the way on v2) and apply the spec's limits.
	 * An existing cgroup of that name is reused and its limits rewritten. */
	int (*create)(const char *parent, const char *id, const struct sandbox_spec *spec,
		      struct error *err);
	/* Move pid (0 = the calling process) into the sandbox's cgroup(s). */
	int (*enter)(const char *parent, const char *id, pid_t pid, struct error *err);
	int (*freeze)(const char *parent, const char *id, bool frozen, struct error *err);
	/* One non-blocking pass that SIGKILLs every process in the cgroup (v2 cgroup.kill; v1
	 * freeze, kill each pid, thaw). Sets *ret_empty when no process was left to kill. A missing
	 * cgroup is success and empty. */
	int (*kill)(const char *parent, const char *id, bool *ret_empty, struct error *err);
	/* True when no process is left in the cgroup (or it does not exist). */
	int (*is_empty)(const char *parent, const char *id, bool *ret_empty, struct error *err);
	/* rmdir every cgroup of the sandbox. Missing is success; a busy cgroup is -EBUSY. */
	int (*remove)(const char *parent, const char *id, struct error *err);
	/* Fill the cgroup part of a probe (everything but alive). */
	int (*probe)(const char *parent, const char *id, struct sandbox_probe *ret,
		     struct error *err);
	/*
	 * Called inside the sandbox (new mount and cgroup namespaces, before pivot_root): mount the
	 * cgroup hierarchies read-only at target (the sandbox's /sys/fs/cgroup), so the sandbox
	 * sees its own cgroup as the root. Async-signal-safe apart from what cgroup_prepare_child()
	 * prepared.
	 */
	int (*mount_ns)(const char *target, struct error *err);
	/* Optional: restrict the sandbox to the CPUs in cpus (kernel list format, "1" or "0-3"):
	 * cpuset.cpus. Called after create(), before anything enters the cgroup. Success when the
	 * host has no cpuset controller for us (the caller's affinity still applies). */
	int (*pin)(const char *parent, const char *id, const char *cpus, struct error *err);
	/* Optional: an eventfd signalled on each OOM of the cgroup (v1: cgroup.event_control). */
	int (*oom_watch)(const char *parent, const char *id, struct error *err);
	/* Optional: load what the manager caches about the host (v1: the hierarchy layout). */
	void (*init)(void);
};

extern const struct cgroup_ops cgroup_v1_ops;
extern const struct cgroup_ops cgroup_v2_ops;

/* The manager for this host (or for the tree at $CORRAL_CGROUP_ROOT); NULL when neither fits. */
const struct cgroup_ops *cgroup_detect(void);
/* /sys/fs/cgroup or $CORRAL_CGROUP_ROOT. */
const char *cgroup_root(void);

/* Helpers shared by the two managers (cgroup.c; numbers are read with fs_read_u64). */
/* Find "key value" in a flat-keyed file (cpu.stat, memory.events, ...). -ENOENT if absent. */
int cgroup_read_keyed(const char *path, const char *key, uint64_t *ret);
int cgroup_write_u64(const char *path, uint64_t v);
/* CPU quota per CGROUP_CPU_PERIOD_US for a limit in millicores; at least the kernel's 1 ms
 * minimum (Kubernetes clamps the same way). */
uint64_t cgroup_cpu_quota_us(uint64_t millis);
/* The cpu.shares value Kubernetes derives from a CPU request (2..262144). */
uint64_t cgroup_cpu_shares(uint64_t millis);
/* The cpu.weight runc maps shares onto (1..10000). */
uint64_t cgroup_cpu_weight(uint64_t shares);
/* SIGKILL every pid listed in a cgroup.procs file; *ret_n = how many were listed. */
int cgroup_kill_procs(const char *procs_path, unsigned *ret_n);
/* Wait (bounded by timeout_ms, sleeping 1 ms between looks) until the cgroup is empty. */
int cgroup_wait_empty(const struct cgroup_ops *ops, const char *parent, const char *id,
		      int timeout_ms, struct error *err);

/*
 * Opt-in host tuning ($CORRAL_CGROUP_FAVORDYNMODS=1): make sure the host's cgroup2 mount (the
 * unified one on a hybrid host) has "favordynmods" (Linux 6.0+). Without it, moving a process into
 * a cgroup may wait for an RCU grace period (measured here: usually ~0.1 ms, at times 1-18 ms), on
 * v1 and v2 alike; with it a move takes ~0.1 ms every time, at the price of marginally slower forks
 * and exits host-wide, which is why it is not the default. Remounts with the existing options
 * kept. Returns 1 when it remounted, 0 when nothing was done (not asked, already set, or
 * $CORRAL_CGROUP_ROOT set), or a negative errno (no cgroup2 mount, old kernel): callers treat a
 * failure as "slower, not broken".
 */
int cgroup_favor_dynmods(void);
