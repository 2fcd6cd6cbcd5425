/*
 * cgroup v1 manager: one directory <root>/<ctrl>/<parent>/<id> per controller hierarchy we use.
 * Hierarchies may be co-mounted ("cpu,cpuacct" with cpu and cpuacct symlinks): each distinct
 * hierarchy is handled once. Controllers that are not mounted are skipped, except that pause needs
 * freezer and the limits need their controller.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/cgroup.h"
#include "shared/fsutil.h"

/*
 * The controllers we use, then two membership-only hierarchies: systemd's own v1 tracking
 * hierarchy (name=systemd) and the unified cgroup2 mount of a hybrid host. A sandbox joins those
 * too, so it is no longer inside corrald's service unit: stopping or restarting corrald under
 * systemd (KillMode=control-group) must not kill the sandboxes, which outlive corrald. Last,
 * cpuset: every sandbox joins it (inheriting all CPUs); one with a CPU view gets its CPUs there
 * (pin()), so a program in it cannot widen its affinity past them. Not mounted inside sandboxes.
 */
enum {
	V1_CPU,
	V1_CPUACCT,
	V1_MEMORY,
	V1_PIDS,
	V1_FREEZER,
	V1_NCTRL,
	V1_SYSTEMD = V1_NCTRL,
	V1_UNIFIED,
	V1_CPUSET,
	V1_N
};
static const char *const v1_names[V1_N] = {"cpu",     "cpuacct", "memory",  "pids",
					   "freezer", "systemd", "unified", "cpuset"};

/* Resolved once per cgroup root; read (never written) in the sandbox child after fork. */
static struct {
	char root[PATH_MAX];
	bool loaded;
	bool present[V1_N];
	bool dup[V1_N];		   /* same hierarchy as an earlier controller */
	char hier[V1_N][PATH_MAX]; /* real path of the hierarchy's mount */
	char opts[V1_N][64];	   /* its mount options, i.e. the real dir's name ("cpu,cpuacct") */
} v1;

static void v1_load(void)
{
	const char *root = cgroup_root();
	if (v1.loaded && strcmp(v1.root, root) == 0)
		return;
	memset(&v1, 0, sizeof(v1));
	snprintf(v1.root, sizeof(v1.root), "%s", root);
	for (int i = 0; i < V1_N; i++) {
		char p[PATH_MAX];
		snprintf(p, sizeof(p), "%s/%s", root, v1_names[i]);
		if (!realpath(p, v1.hier[i]))
			continue;
		v1.present[i] = true;
		const char *base = strrchr(v1.hier[i], '/');
		snprintf(v1.opts[i], sizeof(v1.opts[i]), "%s", base ? base + 1 : v1.hier[i]);
		for (int j = 0; j < i; j++)
			if (v1.present[j] && strcmp(v1.hier[j], v1.hier[i]) == 0)
				v1.dup[i] = true;
	}
	v1.loaded = true;
}

static int v1_path(char *buf, size_t len, int ctrl, const char *parent, const char *id,
		   const char *file)
{
	int n = snprintf(buf, len, "%s/%s%s%s%s%s", v1.hier[ctrl], parent, id ? "/" : "",
			 id ? id : "", file ? "/" : "", file ? file : "");
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static int v1_set(int ctrl, const char *parent, const char *id, const char *file, uint64_t value,
		  bool optional, struct error *err)
{
	char path[PATH_MAX];
	if (!v1.present[ctrl]) {
		if (optional)
			return 0;
		return error_set(err, ENOTSUP,
				 "cgroup v1 controller '%s' is not mounted under '%s'",
				 v1_names[ctrl], v1.root);
	}
	if (v1_path(path, sizeof(path), ctrl, parent, id, file) < 0)
		return error_set(err, ENAMETOOLONG, "cgroup path too long");
	int r = cgroup_write_u64(path, value);
	if (r == -ENOENT && optional)
		return 0;
	if (r < 0)
		return error_set_errno(err, -r, "write %" PRIu64 " to '%s'", value, path);
	return 0;
}

/* A new v1 cpuset cgroup has no CPUs and no memory nodes, and nothing can join it: give dir those
 * of from (its parent) when it has none. */
static int cpuset_inherit(const char *from, const char *dir, struct error *err)
{
	static const char *const files[] = {"cpuset.cpus", "cpuset.mems"};
	char src[PATH_MAX + 16], dst[PATH_MAX + 16], v[1024];
	for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
		snprintf(dst, sizeof(dst), "%s/%s", dir, files[i]);
		if (fs_read_small(dst, v, sizeof(v)) == 0 && v[0])
			continue;
		snprintf(src, sizeof(src), "%s/%s", from, files[i]);
		int r = fs_read_small(src, v, sizeof(v));
		if (r < 0)
			return error_set_errno(err, -r, "read '%s'", src);
		if ((r = fs_write_string(dst, v)) < 0)
			return error_set_errno(err, -r, "write '%s' to '%s'", v, dst);
	}
	return 0;
}

static int v1_create(const char *parent, const char *id, const struct sandbox_spec *spec,
		     struct error *err)
{
	char path[PATH_MAX];
	int r;
	v1_load();
	for (int i = 0; i < V1_N; i++) {
		if (!v1.present[i] || v1.dup[i])
			continue;
		if (v1_path(path, sizeof(path), i, parent, NULL, NULL) < 0)
			return error_set(err, ENAMETOOLONG, "cgroup path too long");
		if (mkdir(path, 0755) < 0 && errno != EEXIST)
			return error_set_errno(err, errno, "mkdir '%s'", path);
		if (v1_path(path, sizeof(path), i, parent, id, NULL) < 0)
			return error_set(err, ENAMETOOLONG, "cgroup path too long");
		if (mkdir(path, 0755) < 0 && errno != EEXIST)
			return error_set_errno(err, errno, "mkdir '%s'", path);
		if (i == V1_CPUSET) {
			char pdir[PATH_MAX];
			v1_path(pdir, sizeof(pdir), i, parent, NULL, NULL);
			if ((r = cpuset_inherit(v1.hier[i], pdir, err)) < 0 ||
			    (r = cpuset_inherit(pdir, path, err)) < 0)
				return r;
		}
	}
	if (spec->cpu_limit_millis) {
		if ((r = v1_set(V1_CPU, parent, id, "cpu.cfs_period_us", CGROUP_CPU_PERIOD_US,
				false, err)) < 0 ||
		    (r = v1_set(V1_CPU, parent, id, "cpu.cfs_quota_us",
				cgroup_cpu_quota_us(spec->cpu_limit_millis), false, err)) < 0)
			return r;
	}
	uint64_t req = spec->cpu_request_millis ? spec->cpu_request_millis : spec->cpu_limit_millis;
	if (req &&
	    (r = v1_set(V1_CPU, parent, id, "cpu.shares", cgroup_cpu_shares(req), false, err)) < 0)
		return r;
	if (spec->memory_limit_bytes) {
		/* memsw after the plain limit (the kernel wants memsw >= limit); equal values mean
		 * the limit cannot be dodged by swapping out. */
		if ((r = v1_set(V1_MEMORY, parent, id, "memory.limit_in_bytes",
				spec->memory_limit_bytes, false, err)) < 0 ||
		    (r = v1_set(V1_MEMORY, parent, id, "memory.memsw.limit_in_bytes",
				spec->memory_limit_bytes, true, err)) < 0)
			return r;
	}
	if (spec->memory_request_bytes &&
	    (r = v1_set(V1_MEMORY, parent, id, "memory.soft_limit_in_bytes",
			spec->memory_request_bytes, false, err)) < 0)
		return r;
	/* v1 has no group OOM kill: corrald applies oom_group itself (kill() on an OOM event). */
	return v1_set(V1_PIDS, parent, id, "pids.max",
		      spec->pids_max ? spec->pids_max : (uint64_t)RUNTIME_DEFAULT_PIDS_MAX,
		      !v1.present[V1_PIDS], err);
}

static int v1_enter(const char *parent, const char *id, pid_t pid, struct error *err)
{
	char path[PATH_MAX], v[32];
	v1_load();
	snprintf(v, sizeof(v), "%d", (int)pid);
	for (int i = 0; i < V1_N; i++) {
		if (!v1.present[i] || v1.dup[i])
			continue;
		if (v1_path(path, sizeof(path), i, parent, id, "cgroup.procs") < 0)
			return error_set(err, ENAMETOOLONG, "cgroup path too long");
		int r = fs_write_string(path, v);
		if (r < 0)
			return error_set_errno(err, -r, "join cgroup '%s'", path);
	}
	return 0;
}

static int v1_freeze(const char *parent, const char *id, bool frozen, struct error *err)
{
	char path[PATH_MAX];
	v1_load();
	if (!v1.present[V1_FREEZER])
		return error_set(err, ENOTSUP, "cgroup v1 freezer is not mounted under '%s'",
				 v1.root);
	if (v1_path(path, sizeof(path), V1_FREEZER, parent, id, "freezer.state") < 0)
		return error_set(err, ENAMETOOLONG, "cgroup path too long");
	int r = fs_write_string(path, frozen ? "FROZEN" : "THAWED");
	if (r < 0)
		return error_set_errno(err, -r, "write '%s'", path);
	return 0;
}

/* The hierarchy whose cgroup.procs lists the sandbox's processes. */
static int v1_procs_ctrl(void)
{
	static const int order[] = {V1_FREEZER, V1_PIDS, V1_MEMORY, V1_CPU, V1_CPUACCT};
	for (size_t i = 0; i < ARRAY_SIZE(order); i++)
		if (v1.present[order[i]])
			return order[i];
	return -1;
}

/* The sandbox's cgroup.procs into path: 1, or 0 when no controller is mounted (nothing to see). */
static int v1_procs_path(char path[PATH_MAX], const char *parent, const char *id,
			 struct error *err)
{
	v1_load();
	int c = v1_procs_ctrl();
	if (c < 0)
		return 0;
	if (v1_path(path, PATH_MAX, c, parent, id, "cgroup.procs") < 0)
		return error_set(err, ENAMETOOLONG, "cgroup path too long");
	return 1;
}

static int v1_is_empty(const char *parent, const char *id, bool *ret_empty, struct error *err)
{
	char path[PATH_MAX], buf[16];
	*ret_empty = true;
	int r = v1_procs_path(path, parent, id, err);
	if (r <= 0)
		return r;
	r = fs_read_small(path, buf, sizeof(buf));
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return error_set_errno(err, -r, "read '%s'", path);
	*ret_empty = buf[0] == '\0';
	return 0;
}

static int v1_kill(const char *parent, const char *id, bool *ret_empty, struct error *err)
{
	char path[PATH_MAX];
	*ret_empty = true;
	int r = v1_procs_path(path, parent, id, err);
	if (r <= 0)
		return r;
	/* Frozen processes cannot fork or exit between reading their pid and the kill, so neither
	 * a new child escapes nor a recycled pid gets the signal. Killed processes die on thaw. */
	bool freezer = v1.present[V1_FREEZER] && v1_freeze(parent, id, true, NULL) == 0;
	unsigned n = 0;
	r = cgroup_kill_procs(path, &n);
	if (freezer)
		v1_freeze(parent, id, false, NULL);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return error_set_errno(err, -r, "read '%s'", path);
	*ret_empty = n == 0;
	return 0;
}

static int v1_remove(const char *parent, const char *id, struct error *err)
{
	char path[PATH_MAX];
	int ret = 0;
	v1_load();
	for (int i = 0; i < V1_N; i++) {
		if (!v1.present[i] || v1.dup[i])
			continue;
		if (v1_path(path, sizeof(path), i, parent, id, NULL) < 0)
			return error_set(err, ENAMETOOLONG, "cgroup path too long");
		if (rmdir(path) < 0 && errno != ENOENT && ret == 0)
			ret = error_set_errno(err, errno, "rmdir '%s'", path);
	}
	return ret;
}

static int v1_probe(const char *parent, const char *id, struct sandbox_probe *ret,
		    struct error *err)
{
	char path[PATH_MAX], buf[32];
	uint64_t v;
	v1_load();
#define F(ctrl, file) (v1_path(path, sizeof(path), ctrl, parent, id, file), path)
	int c = v1_procs_ctrl();
	if (c < 0 || access(F(c, NULL), F_OK) < 0)
		return error_set_errno(err, c < 0 ? ENOENT : errno, "cgroup '%s/%s'", parent, id);
	if (v1.present[V1_FREEZER] &&
	    fs_read_small(F(V1_FREEZER, "freezer.state"), buf, sizeof(buf)) == 0)
		ret->frozen = strcmp(buf, "FROZEN") == 0;
	if (v1.present[V1_MEMORY]) {
		if (cgroup_read_keyed(F(V1_MEMORY, "memory.oom_control"), "oom_kill", &v) == 0)
			ret->oom_kills = v;
		/* With memsw = limit the memsw counter is usually the one that trips. */
		if (fs_read_u64(F(V1_MEMORY, "memory.failcnt"), &v) == 0)
			ret->memory_max_events = v;
		if (fs_read_u64(F(V1_MEMORY, "memory.memsw.failcnt"), &v) == 0 &&
		    v > ret->memory_max_events)
			ret->memory_max_events = v;
		if (fs_read_u64(F(V1_MEMORY, "memory.usage_in_bytes"), &v) == 0)
			ret->memory_current = v;
		if (fs_read_u64(F(V1_MEMORY, "memory.max_usage_in_bytes"), &v) == 0)
			ret->memory_peak = v;
		/* "Unlimited" on v1 is a huge page-rounded number, not a marker. */
		if (fs_read_u64(F(V1_MEMORY, "memory.limit_in_bytes"), &v) == 0)
			ret->memory_limit = v >= (UINT64_C(1) << 62) ? 0 : v;
	}
	if (v1.present[V1_PIDS]) {
		if (fs_read_u64(F(V1_PIDS, "pids.current"), &v) == 0)
			ret->pids_current = v;
		if (fs_read_u64(F(V1_PIDS, "pids.max"), &v) == 0)
			ret->pids_max = v == UINT64_MAX ? 0 : v;
	}
	if (v1.present[V1_CPUACCT] && fs_read_u64(F(V1_CPUACCT, "cpuacct.usage"), &v) == 0)
		ret->cpu_usage_ns = v;
	if (v1.present[V1_CPU]) {
		if (cgroup_read_keyed(F(V1_CPU, "cpu.stat"), "nr_periods", &v) == 0)
			ret->cpu_nr_periods = v;
		if (cgroup_read_keyed(F(V1_CPU, "cpu.stat"), "nr_throttled", &v) == 0)
			ret->cpu_nr_throttled = v;
		if (cgroup_read_keyed(F(V1_CPU, "cpu.stat"), "throttled_time", &v) == 0)
			ret->cpu_throttled_ns = v;
		char q[32];
		long long quota;
		uint64_t period;
		if (fs_read_small(F(V1_CPU, "cpu.cfs_quota_us"), q, sizeof(q)) == 0 &&
		    (quota = atoll(q)) > 0 &&
		    fs_read_u64(F(V1_CPU, "cpu.cfs_period_us"), &period) == 0 && period)
			ret->cpu_limit_millis = (uint64_t)quota * 1000 / period;
	}
#undef F
	return 0;
}

static int v1_pin(const char *parent, const char *id, const char *cpus, struct error *err)
{
	char path[PATH_MAX];
	v1_load();
	if (!v1.present[V1_CPUSET] || v1.dup[V1_CPUSET])
		return 0; /* no cpuset hierarchy: the affinity alone says which CPUs */
	if (v1_path(path, sizeof(path), V1_CPUSET, parent, id, "cpuset.cpus") < 0)
		return error_set(err, ENAMETOOLONG, "cgroup path too long");
	int r = fs_write_string(path, cpus);
	if (r < 0)
		return error_set_errno(err, -r, "write '%s' to '%s'", cpus, path);
	return 0;
}

/* The v1 OOM notification: "<eventfd> <fd of memory.oom_control>" written to cgroup.event_control.
 * The kernel keeps its own references, so the oom_control fd is closed at once; the registration
 * ends when the eventfd is closed or the cgroup removed. */
static int v1_oom_watch(const char *parent, const char *id, struct error *err)
{
	char ctl[PATH_MAX], evc[PATH_MAX], v[32];
	v1_load();
	if (!v1.present[V1_MEMORY])
		return error_set(err, ENOTSUP, "cgroup v1 memory controller is not mounted under '%s'",
				 v1.root);
	if (v1_path(ctl, sizeof(ctl), V1_MEMORY, parent, id, "memory.oom_control") < 0 ||
	    v1_path(evc, sizeof(evc), V1_MEMORY, parent, id, "cgroup.event_control") < 0)
		return error_set(err, ENAMETOOLONG, "cgroup path too long");
	int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (efd < 0)
		return error_set_errno(err, errno, "eventfd");
	int cfd = open(ctl, O_RDONLY | O_CLOEXEC);
	if (cfd < 0) {
		int e = errno;
		close(efd);
		return error_set_errno(err, e, "open '%s'", ctl);
	}
	snprintf(v, sizeof(v), "%d %d", efd, cfd);
	int r = fs_write_string(evc, v);
	close(cfd);
	if (r < 0) {
		close(efd);
		return error_set_errno(err, -r, "register an OOM eventfd in '%s'", evc);
	}
	return efd;
}

/* In the sandbox: a tmpfs with one read-only mount per hierarchy (named like on the host, with
 * symlinks for co-mounted controllers), then the tmpfs itself made read-only. */
static int v1_mount_ns(const char *target, struct error *err)
{
	char path[PATH_MAX];
	const unsigned long fl = MS_NOSUID | MS_NODEV | MS_NOEXEC;
	if (mount("tmpfs", target, "tmpfs", fl, "mode=755,size=64k") < 0)
		return error_set_errno(err, errno, "mount tmpfs on '%s'", target);
	for (int i = 0; i < V1_NCTRL; i++) {
		if (!v1.present[i] || v1.dup[i])
			continue;
		snprintf(path, sizeof(path), "%s/%s", target, v1.opts[i]);
		if (mkdir(path, 0555) < 0 && errno != EEXIST)
			return error_set_errno(err, errno, "mkdir '%s'", path);
		if (mount("cgroup", path, "cgroup", fl | MS_RDONLY, v1.opts[i]) < 0)
			return error_set_errno(err, errno, "mount cgroup '%s' on '%s'", v1.opts[i],
					       path);
	}
	for (int i = 0; i < V1_NCTRL; i++) {
		if (!v1.present[i] || strcmp(v1.opts[i], v1_names[i]) == 0)
			continue;
		snprintf(path, sizeof(path), "%s/%s", target, v1_names[i]);
		if (symlink(v1.opts[i], path) < 0 && errno != EEXIST)
			return error_set_errno(err, errno, "symlink '%s'", path);
	}
	if (mount(NULL, target, NULL, MS_REMOUNT | MS_RDONLY | fl, "mode=755,size=64k") < 0)
		return error_set_errno(err, errno, "remount '%s' read-only", target);
	return 0;
}

const struct cgroup_ops cgroup_v1_ops = {
    .name = "v1",
    .create = v1_create,
    .enter = v1_enter,
    .freeze = v1_freeze,
    .kill = v1_kill,
    .is_empty = v1_is_empty,
    .remove = v1_remove,
    .probe = v1_probe,
    .mount_ns = v1_mount_ns,
    .oom_watch = v1_oom_watch,
    .pin = v1_pin,
    .init = v1_load,
};
