/* Admission arithmetic: see capacity.h. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "corrald/capacity.h"
#include "shared/quantity.h"

#define RESERVE_MIN (512ULL << 20)
#define PID_RESERVE_MIN 2048
#define FILE_RESERVE_MIN 65536
#define DISK_RESERVE_MIN (1ULL << 30)

static int parse_count(const char *v, uint64_t *ret)
{
	char *end;
	errno = 0;
	unsigned long long n = strtoull(v, &end, 10);
	if (!*v || *v == '-' || *end || errno || n == 0)
		return -EINVAL;
	*ret = n;
	return 0;
}

int capacity_parse(const char *s, struct capacity *cap, char *msg, size_t msglen)
{
	char buf[256];
	if (!s || !*s || strlen(s) >= sizeof(buf)) {
		snprintf(msg, msglen, "expected cpu=N,memory=SIZE,pids=N,files=N,disk=SIZE|auto (e.g. cpu=8,memory=30Gi)");
		return -EINVAL;
	}
	snprintf(buf, sizeof(buf), "%s", s);
	struct capacity c = *cap;
	char *save = NULL;
	for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(kv, '=');
		if (!eq) {
			snprintf(msg, msglen, "'%s' is not KEY=VALUE (keys: cpu, memory, pids, files, disk)", kv);
			return -EINVAL;
		}
		*eq = '\0';
		const char *v = eq + 1;
		if (strcmp(kv, "cpu") == 0) {
			if (quantity_parse_cpu(v, &c.cpu_millis) < 0 || c.cpu_millis == 0) {
				snprintf(msg, msglen, "cpu: '%s' is not a positive CPU quantity (e.g. 8 or 7500m)", v);
				return -EINVAL;
			}
		} else if (strcmp(kv, "memory") == 0) {
			if (quantity_parse_bytes(v, &c.memory_bytes) < 0 || c.memory_bytes == 0) {
				snprintf(msg, msglen, "memory: '%s' is not a positive size (e.g. 30Gi)", v);
				return -EINVAL;
			}
		} else if (strcmp(kv, "pids") == 0 || strcmp(kv, "files") == 0) {
			if (parse_count(v, kv[0] == 'p' ? &c.pids : &c.files) < 0) {
				snprintf(msg, msglen, "%s: '%s' is not a positive count (e.g. 100000)", kv, v);
				return -EINVAL;
			}
		} else if (strcmp(kv, "disk") == 0) {
			if (strcmp(v, "auto") == 0) {
				c.disk = CAPACITY_DISK_AUTO;
			} else if (quantity_parse_bytes(v, &c.disk) < 0 || c.disk == 0 ||
				   c.disk >= CAPACITY_DISK_AUTO) {
				snprintf(msg, msglen, "disk: '%s' is not a positive size (e.g. 500Gi) or auto", v);
				return -EINVAL;
			}
		} else {
			snprintf(msg, msglen, "unknown key '%s' (keys: cpu, memory, pids, files, disk)", kv);
			return -EINVAL;
		}
	}
	*cap = c;
	return 0;
}

void capacity_default(unsigned host_cpus, uint64_t host_memory, struct capacity *ret)
{
	uint64_t reserve = host_memory / 20;
	if (reserve < RESERVE_MIN)
		reserve = RESERVE_MIN;
	ret->cpu_millis = (uint64_t)(host_cpus ? host_cpus : 1) * 1000;
	ret->memory_bytes = host_memory > reserve ? host_memory - reserve : host_memory;
	ret->pids = ret->files = UINT64_MAX; /* capacity_default_tables() */
	ret->disk = UINT64_MAX;
}

uint64_t capacity_disk_auto(uint64_t fs_bytes)
{
	uint64_t r = fs_bytes / 20 > DISK_RESERVE_MIN ? fs_bytes / 20 : DISK_RESERVE_MIN;
	return fs_bytes > r ? fs_bytes - r : 1;
}

void capacity_default_tables(uint64_t pid_table, uint64_t file_table, struct capacity *ret)
{
	uint64_t r = pid_table / 16 > PID_RESERVE_MIN ? pid_table / 16 : PID_RESERVE_MIN;
	ret->pids = pid_table == 0 ? UINT64_MAX : pid_table > r ? pid_table - r : 1;
	r = file_table / 20 > FILE_RESERVE_MIN ? file_table / 20 : FILE_RESERVE_MIN;
	ret->files = file_table == 0 ? UINT64_MAX : file_table > r ? file_table - r : 1;
}

/* used + req <= cap without overflow (a capacity may be UINT64_MAX: unlimited) */
static bool fits(uint64_t cap, uint64_t used, uint64_t req)
{
	return used <= cap && req <= cap - used;
}

bool capacity_fits(const struct capacity *cap, const struct capacity *used,
		   const struct capacity *req)
{
	return fits(cap->cpu_millis, used->cpu_millis, req->cpu_millis) &&
	       fits(cap->memory_bytes, used->memory_bytes, req->memory_bytes) &&
	       fits(cap->pids, used->pids, req->pids) && fits(cap->files, used->files, req->files) &&
	       (cap->disk == UINT64_MAX || fits(cap->disk, used->disk, req->disk));
}

bool capacity_never_fits(const struct capacity *cap, const struct capacity *req, char *msg,
			 size_t msglen)
{
	char a[32], b[32];
	if (req->cpu_millis > cap->cpu_millis) {
		snprintf(msg, msglen,
			 "resourceRequests.cpu: %" PRIu64 "m is more than this host's whole capacity (%" PRIu64 "m); request less (limits may stay higher)",
			 req->cpu_millis, cap->cpu_millis);
		return true;
	}
	if (req->memory_bytes > cap->memory_bytes) {
		quantity_format_bytes(req->memory_bytes, a, sizeof(a));
		quantity_format_bytes(cap->memory_bytes, b, sizeof(b));
		snprintf(msg, msglen,
			 "resourceRequests.memory: %s is more than this host's whole capacity (%s); request less (limits may stay higher)",
			 a, b);
		return true;
	}
	if (req->pids > cap->pids) {
		snprintf(msg, msglen,
			 "resourceLimits.pids: %" PRIu64 " is more than this host's whole pid table gives sandboxes (%" PRIu64 ": kernel.pid_max less a reserve for the host); ask for fewer, or raise kernel.pid_max",
			 req->pids, cap->pids);
		return true;
	}
	if (cap->disk != UINT64_MAX && req->disk == CAPACITY_DISK_UNBOUNDED) {
		snprintf(msg, msglen,
			 "resourceLimits.ephemeral-storage: a sandbox without a disk limit could fill the state file system, and this host counts the sandboxes' disks against it (--capacity disk=); give one");
		return true;
	}
	if (cap->disk != UINT64_MAX && req->disk > cap->disk) {
		quantity_format_bytes(req->disk, a, sizeof(a));
		quantity_format_bytes(cap->disk, b, sizeof(b));
		snprintf(msg, msglen,
			 "resourceLimits.ephemeral-storage: %s is more than the state file system gives all sandboxes' disks together (%s, --capacity disk=); ask for less",
			 a, b);
		return true;
	}
	if (req->files > cap->files) {
		snprintf(msg, msglen,
			 "open files: each sandbox holds %" PRIu64 " (RLIMIT_NOFILE) of the host's file table, which gives sandboxes %" PRIu64 " (fs.file-max less a reserve); lower --sandbox-nofile or raise fs.file-max",
			 req->files, cap->files);
		return true;
	}
	return false;
}

void capacity_shortfall(const struct capacity *cap, const struct capacity *used,
			const struct capacity *req, char *msg, size_t msglen)
{
	size_t off = 0;
	msg[0] = '\0';
	uint64_t cfree = used->cpu_millis < cap->cpu_millis ? cap->cpu_millis - used->cpu_millis : 0;
	uint64_t mfree =
	    used->memory_bytes < cap->memory_bytes ? cap->memory_bytes - used->memory_bytes : 0;
	if (req->cpu_millis > cfree)
		off += (size_t)snprintf(msg, msglen,
					"cpu: needs %" PRIu64 "m, %" PRIu64 "m of %" PRIu64 "m free",
					req->cpu_millis, cfree, cap->cpu_millis);
	if (req->memory_bytes > mfree && off < msglen) {
		char a[32], b[32], c[32];
		quantity_format_bytes(req->memory_bytes, a, sizeof(a));
		quantity_format_bytes(mfree, b, sizeof(b));
		quantity_format_bytes(cap->memory_bytes, c, sizeof(c));
		off += (size_t)snprintf(msg + off, msglen - off, "%smemory: needs %s, %s of %s free",
					off ? "; " : "", a, b, c);
	}
	const struct {
		const char *name;
		uint64_t cap, used, req;
	} tables[] = {
	    {"pids", cap->pids, used->pids, req->pids},
	    {"files", cap->files, used->files, req->files},
	};
	for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]) && off < msglen; i++) {
		uint64_t tfree = tables[i].used < tables[i].cap ? tables[i].cap - tables[i].used : 0;
		if (tables[i].req > tfree)
			off += (size_t)snprintf(msg + off, msglen - off,
						"%s%s: needs %" PRIu64 ", %" PRIu64 " of %" PRIu64 " free in the host's %s table",
						off ? "; " : "", tables[i].name, tables[i].req, tfree,
						tables[i].cap, i == 0 ? "pid" : "open-file");
	}
	if (cap->disk != UINT64_MAX && off < msglen) {
		uint64_t dfree = used->disk < cap->disk ? cap->disk - used->disk : 0;
		if (req->disk > dfree) {
			char a[32], b[32], c[32];
			quantity_format_bytes(req->disk, a, sizeof(a));
			quantity_format_bytes(dfree, b, sizeof(b));
			quantity_format_bytes(cap->disk, c, sizeof(c));
			off += (size_t)snprintf(msg + off, msglen - off,
						"%sdisk: needs %s, %s of %s free on the state file system",
						off ? "; " : "", a, b, c);
		}
	}
	if (off == 0)
		snprintf(msg, msglen, "queued behind earlier creates (first in, first out)");
}
