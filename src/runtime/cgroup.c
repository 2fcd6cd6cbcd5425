/* Cgroup manager detection and the file helpers both managers use. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <time.h>
#include <unistd.h>

#include "runtime/cgroup.h"
#include "shared/fsutil.h"
#include "shared/macro.h"
#include "shared/timeutil.h"

const char *cgroup_root(void)
{
	const char *r = getenv("CORRAL_CGROUP_ROOT");
	return r && *r ? r : "/sys/fs/cgroup";
}

const struct cgroup_ops *cgroup_detect(void)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/cgroup.controllers", cgroup_root());
	if (access(path, F_OK) == 0)
		return &cgroup_v2_ops;
	snprintf(path, sizeof(path), "%s/memory", cgroup_root());
	if (access(path, F_OK) == 0)
		return &cgroup_v1_ops;
	snprintf(path, sizeof(path), "%s/pids", cgroup_root());
	if (access(path, F_OK) == 0)
		return &cgroup_v1_ops;
	return NULL;
}

int cgroup_read_keyed(const char *path, const char *key, uint64_t *ret)
{
	return fs_read_keyed_u64(path, key, ret);
}

int cgroup_write_u64(const char *path, uint64_t v)
{
	char buf[32];
	snprintf(buf, sizeof(buf), "%" PRIu64, v);
	return fs_write_string(path, buf);
}

uint64_t cgroup_cpu_quota_us(uint64_t millis)
{
	return MAX(millis * CGROUP_CPU_PERIOD_US / 1000, 1000);
}

uint64_t cgroup_cpu_shares(uint64_t millis)
{
	uint64_t s = millis * 1024 / 1000;
	return MIN(MAX(s, 2), 262144);
}

uint64_t cgroup_cpu_weight(uint64_t shares)
{
	shares = MIN(MAX(shares, 2), 262144);
	return 1 + ((shares - 2) * 9999) / 262142;
}

int cgroup_kill_procs(const char *procs_path, unsigned *ret_n)
{
	_cleanup_free_ char *buf = NULL;
	*ret_n = 0;
	int r = fs_read_file(procs_path, 1 << 22, &buf, NULL);
	if (r < 0)
		return r;
	unsigned n = 0;
	for (char *p = buf; *p;) {
		char *end;
		long pid = strtol(p, &end, 10);
		if (end == p)
			break;
		if (pid > 0) {
			n++;
			kill((pid_t)pid, SIGKILL);
		}
		p = end;
		while (*p == '\n')
			p++;
	}
	*ret_n = n;
	return 0;
}

int cgroup_wait_empty(const struct cgroup_ops *ops, const char *parent, const char *id,
		      int timeout_ms, struct error *err)
{
	int64_t deadline = time_mono_ms() + timeout_ms;
	for (;;) {
		bool empty = false;
		int r = ops->kill(parent, id, &empty, err);
		if (r < 0)
			return r;
		if (empty) {
			r = ops->is_empty(parent, id, &empty, err);
			if (r < 0)
				return r;
			if (empty)
				return 0;
		}
		if (time_mono_ms() >= deadline)
			return error_set(err, ETIMEDOUT,
					 "processes of cgroup %s/%s still alive after %d ms",
					 parent, id, timeout_ms);
		struct timespec ts = {0, 1000000};
		nanosleep(&ts, NULL);
	}
}

/* Per-mount flags of a mountinfo options field ("rw,nosuid,nodev,noexec,relatime"). */
static unsigned long mount_flags_of(const char *opts)
{
	static const struct {
		const char *name;
		unsigned long flag;
	} map[] = {
	    {"ro", MS_RDONLY},
	    {"nosuid", MS_NOSUID},
	    {"nodev", MS_NODEV},
	    {"noexec", MS_NOEXEC},
	    {"relatime", MS_RELATIME},
	    {"noatime", MS_NOATIME},
	    {"nodiratime", MS_NODIRATIME},
	    {"strictatime", MS_STRICTATIME},
	};
	unsigned long f = 0;
	char buf[256];
	snprintf(buf, sizeof(buf), "%s", opts);
	char *save = NULL;
	for (char *o = strtok_r(buf, ",", &save); o; o = strtok_r(NULL, ",", &save))
		for (size_t i = 0; i < ARRAY_SIZE(map); i++)
			if (strcmp(o, map[i].name) == 0)
				f |= map[i].flag;
	return f;
}

int cgroup_favor_dynmods(void)
{
	const char *env = getenv("CORRAL_CGROUP_FAVORDYNMODS");
	if (!env || strcmp(env, "1") != 0 || getenv("CORRAL_CGROUP_ROOT"))
		return 0;
	_cleanup_free_ char *buf = NULL;
	int r = fs_read_file("/proc/self/mountinfo", 1 << 24, &buf, NULL);
	if (r < 0)
		return r;
	char *save = NULL;
	for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		/* id parent maj:min root mountpoint mountopts [optional...] - fstype source
		 * superopts */
		char mp[PATH_MAX], mopts[256], fstype[32], sopts[512];
		char *sep = strstr(line, " - ");
		if (!sep || sscanf(line, "%*s %*s %*s %*s %4095s %255s", mp, mopts) != 2 ||
		    sscanf(sep + 3, "%31s %*s %511s", fstype, sopts) != 2)
			continue;
		if (strcmp(fstype, "cgroup2") != 0)
			continue;
		if (strstr(sopts, "favordynmods"))
			return 0;
		/* Keep every superblock option (nsdelegate, memory_recursiveprot...): a remount
		 * resets the ones it does not name. */
		char data[600];
		const char *rest = sopts;
		if (strncmp(rest, "rw", 2) == 0 || strncmp(rest, "ro", 2) == 0)
			rest += rest[2] == ',' ? 3 : 2;
		snprintf(data, sizeof(data), "%s%sfavordynmods", rest, *rest ? "," : "");
		if (mount(NULL, mp, NULL, MS_REMOUNT | mount_flags_of(mopts), data) < 0)
			return -errno;
		return 1;
	}
	return -ENOENT;
}
