/*
 * cgroup v2 manager: one unified hierarchy, <root>/<parent>/<id>. The parent only delegates
 * controllers (no process ever lives in it: the no-internal-processes rule).
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/cgroup.h"
#include "shared/fsutil.h"

static int v2_path(char *buf, size_t len, const char *parent, const char *id, const char *file)
{
	int n;
	if (id)
		n = snprintf(buf, len, "%s/%s/%s%s%s", cgroup_root(), parent, id, file ? "/" : "",
			     file ? file : "");
	else
		n = snprintf(buf, len, "%s/%s%s%s", cgroup_root(), parent, file ? "/" : "",
			     file ? file : "");
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* Enable the controllers we limit in dir's cgroup.subtree_control (only those offered). */
static int v2_delegate(const char *dir, struct error *err)
{
	static const char *const want[] = {"cpu", "memory", "pids"};
	char path[PATH_MAX], avail[512], enabled[512];
	snprintf(path, sizeof(path), "%s/cgroup.controllers", dir);
	int r = fs_read_small(path, avail, sizeof(avail));
	if (r < 0)
		return error_set_errno(err, -r, "read '%s'", path);
	snprintf(path, sizeof(path), "%s/cgroup.subtree_control", dir);
	r = fs_read_small(path, enabled, sizeof(enabled));
	if (r < 0)
		return error_set_errno(err, -r, "read '%s'", path);
	for (size_t i = 0; i < ARRAY_SIZE(want); i++) {
		char word[32];
		snprintf(word, sizeof(word), " %s ", want[i]);
		char a[520], e[520];
		snprintf(a, sizeof(a), " %s ", avail);
		snprintf(e, sizeof(e), " %s ", enabled);
		if (!strstr(a, word) || strstr(e, word))
			continue;
		snprintf(word, sizeof(word), "+%s", want[i]);
		r = fs_write_string(path, word);
		if (r < 0)
			return error_set_errno(err, -r, "write '%s' to '%s'", word, path);
	}
	return 0;
}

/* Write an optional knob: a missing file (controller or feature absent) is not an error. */
static int v2_set(const char *dir, const char *file, const char *value, bool optional,
		  struct error *err)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	int r = fs_write_string(path, value);
	if (r == -ENOENT && optional)
		return 0;
	if (r < 0)
		return error_set_errno(err, -r, "write '%s' to '%s'", value, path);
	return 0;
}

static int v2_create(const char *parent, const char *id, const struct sandbox_spec *spec,
		     struct error *err)
{
	char pdir[PATH_MAX], dir[PATH_MAX], v[64];
	if (v2_path(pdir, sizeof(pdir), parent, NULL, NULL) < 0 ||
	    v2_path(dir, sizeof(dir), parent, id, NULL) < 0)
		return error_set(err, ENAMETOOLONG, "cgroup path too long");
	int r = v2_delegate(cgroup_root(), err);
	if (r < 0)
		return r;
	if (mkdir(pdir, 0755) < 0 && errno != EEXIST)
		return error_set_errno(err, errno, "mkdir '%s'", pdir);
	r = v2_delegate(pdir, err);
	if (r < 0)
		return r;
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return error_set_errno(err, errno, "mkdir '%s'", dir);

	if (spec->cpu_limit_millis) {
		snprintf(v, sizeof(v), "%" PRIu64 " %d",
			 cgroup_cpu_quota_us(spec->cpu_limit_millis), CGROUP_CPU_PERIOD_US);
		if ((r = v2_set(dir, "cpu.max", v, false, err)) < 0)
			return r;
	}
	uint64_t req = spec->cpu_request_millis ? spec->cpu_request_millis : spec->cpu_limit_millis;
	if (req) {
		snprintf(v, sizeof(v), "%" PRIu64, cgroup_cpu_weight(cgroup_cpu_shares(req)));
		if ((r = v2_set(dir, "cpu.weight", v, false, err)) < 0)
			return r;
	}
	if (spec->memory_limit_bytes) {
		snprintf(v, sizeof(v), "%" PRIu64, spec->memory_limit_bytes);
		if ((r = v2_set(dir, "memory.max", v, false, err)) < 0)
			return r;
		/* No swap at all: otherwise the limit could be dodged by swapping out. */
		if ((r = v2_set(dir, "memory.swap.max", "0", true, err)) < 0)
			return r;
	}
	if (spec->memory_request_bytes) {
		snprintf(v, sizeof(v), "%" PRIu64, spec->memory_request_bytes);
		if ((r = v2_set(dir, "memory.low", v, false, err)) < 0)
			return r;
	}
	if (spec->oom_group && (r = v2_set(dir, "memory.oom.group", "1", false, err)) < 0)
		return r;
	/* The default limit is best effort (a hierarchy without the pids controller has no
	 * pids.max); an explicit one is not. */
	snprintf(v, sizeof(v), "%" PRIu64,
		 spec->pids_max ? spec->pids_max : (uint64_t)RUNTIME_DEFAULT_PIDS_MAX);
	return v2_set(dir, "pids.max", v, spec->pids_max == 0, err);
}

static int v2_enter(const char *parent, const char *id, pid_t pid, struct error *err)
{
	char path[PATH_MAX], v[32];
	if (v2_path(path, sizeof(path), parent, id, "cgroup.procs") < 0)
		return error_set(err, ENAMETOOLONG, "cgroup path too long");
	snprintf(v, sizeof(v), "%d", (int)pid);
	int r = fs_write_string(path, v);
	if (r < 0)
		return error_set_errno(err, -r, "join cgroup '%s'", path);
	return 0;
}

static int v2_freeze(const char *parent, const char *id, bool frozen, struct error *err)
{
	char path[PATH_MAX];
	if (v2_path(path, sizeof(path), parent, id, "cgroup.freeze") < 0)
		return error_set(err, ENAMETOOLONG, "cgroup path too long");
	int r = fs_write_string(path, frozen ? "1" : "0");
	if (r < 0)
		return error_set_errno(err, -r, "write '%s'", path);
	return 0;
}

static int v2_is_empty(const char *parent, const char *id, bool *ret_empty, struct error *err)
{
	char path[PATH_MAX];
	uint64_t populated = 0;
	if (v2_path(path, sizeof(path), parent, id, "cgroup.events") < 0)
		return error_set(err, ENAMETOOLONG, "cgroup path too long");
	int r = cgroup_read_keyed(path, "populated", &populated);
	if (r == -ENOENT) {
		*ret_empty = true; /* no cgroup, or a fake tree without the file: see procs */
		if (v2_path(path, sizeof(path), parent, id, "cgroup.procs") < 0)
			return -ENAMETOOLONG;
		char buf[16];
		if (fs_read_small(path, buf, sizeof(buf)) == 0)
			*ret_empty = buf[0] == '\0';
		return 0;
	}
	if (r < 0)
		return error_set_errno(err, -r, "read '%s'", path);
	*ret_empty = populated == 0;
	return 0;
}

static int v2_kill(const char *parent, const char *id, bool *ret_empty, struct error *err)
{
	char path[PATH_MAX];
	int r = v2_is_empty(parent, id, ret_empty, err);
	if (r < 0 || *ret_empty)
		return r;
	if (v2_path(path, sizeof(path), parent, id, "cgroup.kill") < 0)
		return error_set(err, ENAMETOOLONG, "cgroup path too long");
	r = fs_write_string(path, "1");
	if (r == 0)
		return 0;
	if (r != -ENOENT)
		return error_set_errno(err, -r, "write '%s'", path);
	/* Kernel older than 5.14: freeze, kill each process, thaw. */
	unsigned n = 0;
	v2_freeze(parent, id, true, NULL);
	v2_path(path, sizeof(path), parent, id, "cgroup.procs");
	r = cgroup_kill_procs(path, &n);
	v2_freeze(parent, id, false, NULL);
	if (r == -ENOENT) {
		*ret_empty = true;
		return 0;
	}
	if (r < 0)
		return error_set_errno(err, -r, "read '%s'", path);
	return 0;
}

static int v2_remove(const char *parent, const char *id, struct error *err)
{
	char path[PATH_MAX];
	if (v2_path(path, sizeof(path), parent, id, NULL) < 0)
		return error_set(err, ENAMETOOLONG, "cgroup path too long");
	if (rmdir(path) < 0 && errno != ENOENT)
		return error_set_errno(err, errno, "rmdir '%s'", path);
	return 0;
}

static int v2_probe(const char *parent, const char *id, struct sandbox_probe *ret,
		    struct error *err)
{
	char dir[PATH_MAX], path[PATH_MAX + 32];
	uint64_t v;
	if (v2_path(dir, sizeof(dir), parent, id, NULL) < 0)
		return error_set(err, ENAMETOOLONG, "cgroup path too long");
	if (access(dir, F_OK) < 0)
		return error_set_errno(err, errno, "cgroup '%s'", dir);
#define F(name) (snprintf(path, sizeof(path), "%s/%s", dir, name), path)
	if (cgroup_read_keyed(F("cgroup.events"), "frozen", &v) == 0)
		ret->frozen = v != 0;
	if (cgroup_read_keyed(F("memory.events"), "oom_kill", &v) == 0)
		ret->oom_kills = v;
	if (cgroup_read_keyed(F("memory.events"), "oom", &v) == 0) {
		ret->oom_events = v;
		ret->oom_events_known = true;
	}
	if (cgroup_read_keyed(F("memory.events"), "max", &v) == 0)
		ret->memory_max_events = v;
	char cpumax[64];
	unsigned long long quota, period;
	if (fs_read_small(F("cpu.max"), cpumax, sizeof(cpumax)) == 0 &&
	    sscanf(cpumax, "%llu %llu", &quota, &period) == 2 && period)
		ret->cpu_limit_millis = quota * 1000 / period;
	if (fs_read_u64(F("memory.current"), &v) == 0)
		ret->memory_current = v;
	if (fs_read_u64(F("memory.peak"), &v) == 0)
		ret->memory_peak = v;
	if (fs_read_u64(F("memory.max"), &v) == 0)
		ret->memory_limit = v == UINT64_MAX ? 0 : v;
	if (fs_read_u64(F("pids.current"), &v) == 0)
		ret->pids_current = v;
	if (fs_read_u64(F("pids.max"), &v) == 0)
		ret->pids_max = v == UINT64_MAX ? 0 : v;
	if (cgroup_read_keyed(F("cpu.stat"), "usage_usec", &v) == 0)
		ret->cpu_usage_ns = v * 1000;
	if (cgroup_read_keyed(F("cpu.stat"), "nr_periods", &v) == 0)
		ret->cpu_nr_periods = v;
	if (cgroup_read_keyed(F("cpu.stat"), "nr_throttled", &v) == 0)
		ret->cpu_nr_throttled = v;
	if (cgroup_read_keyed(F("cpu.stat"), "throttled_usec", &v) == 0)
		ret->cpu_throttled_ns = v * 1000;
#undef F
	return 0;
}

/* Only where the cpuset controller is already enabled for our cgroups (the file exists). */
static int v2_pin(const char *parent, const char *id, const char *cpus, struct error *err)
{
	char dir[PATH_MAX];
	if (v2_path(dir, sizeof(dir), parent, id, NULL) < 0)
		return error_set(err, ENAMETOOLONG, "cgroup path too long");
	return v2_set(dir, "cpuset.cpus", cpus, true, err);
}

static int v2_mount_ns(const char *target, struct error *err)
{
	if (mount("cgroup2", target, "cgroup2", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
		  NULL) < 0)
		return error_set_errno(err, errno, "mount cgroup2 on '%s'", target);
	return 0;
}

const struct cgroup_ops cgroup_v2_ops = {
    .name = "v2",
    .create = v2_create,
    .enter = v2_enter,
    .freeze = v2_freeze,
    .kill = v2_kill,
    .is_empty = v2_is_empty,
    .remove = v2_remove,
    .probe = v2_probe,
    .mount_ns = v2_mount_ns,
    .pin = v2_pin,
};
