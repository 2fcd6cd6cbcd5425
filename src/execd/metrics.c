/*
 * GET /metrics from the cgroup execd sees at /sys/fs/cgroup: inside a sandbox that is the
 * sandbox's own cgroup (cgroup namespace). cgroup v2 first, then v1 (memory, cpu and cpuacct).
 * CPU use is sampled over METRICS_SAMPLE_MS without blocking the loop (the reference blocks 1 s).
 * Limits that are unset fall back to the machine's (online CPUs, MemTotal).
 */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "metrics.h"
#include "shared/fsutil.h"
#include "shared/httputil.h"
#include "shared/timeutil.h"
#include "shared/wire_error.h"

#define METRICS_SAMPLE_MS 250
#define METRICS_MAX_WAITING 64

extern struct event_base *execd_base;

static const char *const cg_root = "/sys/fs/cgroup";

static bool is_v2(void)
{
	char p[256];
	snprintf(p, sizeof(p), "%s/cgroup.controllers", cg_root);
	return access(p, F_OK) == 0;
}

/* CPU time used by the cgroup, in ns; falls back to the whole machine (/proc/stat). */
static uint64_t cpu_usage_ns(void)
{
	char p[256];
	uint64_t v;
	if (is_v2()) {
		snprintf(p, sizeof(p), "%s/cpu.stat", cg_root);
		if (fs_read_keyed_u64(p, "usage_usec", &v) == 0)
			return v * 1000;
	}
	static const char *const v1[] = {"cpuacct/cpuacct.usage", "cpu,cpuacct/cpuacct.usage",
					 "cpuacct,cpu/cpuacct.usage"};
	for (size_t i = 0; i < ARRAY_SIZE(v1); i++) {
		snprintf(p, sizeof(p), "%s/%s", cg_root, v1[i]);
		if (fs_read_u64(p, &v) == 0)
			return v;
	}
	FILE *f = fopen("/proc/stat", "re");
	if (!f)
		return 0;
	unsigned long long u = 0, n = 0, s = 0;
	if (fscanf(f, "cpu %llu %llu %llu", &u, &n, &s) != 3)
		u = n = s = 0;
	fclose(f);
	long hz = sysconf(_SC_CLK_TCK);
	return (uint64_t)(u + n + s) * (1000000000ULL / (uint64_t)(hz > 0 ? hz : 100));
}

static double cpu_count(void)
{
	cpu_set_t set;
	double n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
	char p[256], buf[64];
	snprintf(p, sizeof(p), "%s/cpu.max", cg_root);
	if (is_v2() && fs_read_small(p, buf, sizeof(buf)) == 0) {
		unsigned long long q, per;
		if (sscanf(buf, "%llu %llu", &q, &per) == 2 && per > 0 && (double)q / per < n)
			return (double)q / (double)per;
		return n;
	}
	static const char *const dirs[] = {"cpu", "cpu,cpuacct", "cpuacct,cpu"};
	for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
		char pq[256], pp[256];
		snprintf(pq, sizeof(pq), "%s/%s/cpu.cfs_quota_us", cg_root, dirs[i]);
		snprintf(pp, sizeof(pp), "%s/%s/cpu.cfs_period_us", cg_root, dirs[i]);
		if (fs_read_small(pq, buf, sizeof(buf)) < 0)
			continue;
		long long q = strtoll(buf, NULL, 10);
		uint64_t per;
		if (q > 0 && fs_read_u64(pp, &per) == 0 && per > 0 && (double)q / per < n)
			return (double)q / (double)per;
		break;
	}
	return n;
}

static void memory(double *ret_total_mib, double *ret_used_mib)
{
	uint64_t total = 0, used = 0, limit = UINT64_MAX, inactive = 0;
	uint64_t memtotal_kb = 0;
	if (fs_read_keyed_u64("/proc/meminfo", "MemTotal:", &memtotal_kb) < 0) {
		/* "MemTotal:       123 kB": the key is followed by spaces, not one. */
		FILE *f = fopen("/proc/meminfo", "re");
		if (f) {
			unsigned long long kb;
			if (fscanf(f, "MemTotal: %llu kB", &kb) == 1)
				memtotal_kb = kb;
			fclose(f);
		}
	}
	char p[256];
	if (is_v2()) {
		snprintf(p, sizeof(p), "%s/memory.max", cg_root);
		fs_read_u64(p, &limit);
		snprintf(p, sizeof(p), "%s/memory.current", cg_root);
		fs_read_u64(p, &used);
		snprintf(p, sizeof(p), "%s/memory.stat", cg_root);
		fs_read_keyed_u64(p, "inactive_file", &inactive);
	} else {
		snprintf(p, sizeof(p), "%s/memory/memory.limit_in_bytes", cg_root);
		fs_read_u64(p, &limit);
		snprintf(p, sizeof(p), "%s/memory/memory.usage_in_bytes", cg_root);
		fs_read_u64(p, &used);
		snprintf(p, sizeof(p), "%s/memory/memory.stat", cg_root);
		fs_read_keyed_u64(p, "total_inactive_file", &inactive);
	}
	total = memtotal_kb * 1024;
	if (limit != UINT64_MAX && limit < total)
		total = limit;
	/* Page cache that can be reclaimed is not "used" (as docker stats counts it). */
	used = used > inactive ? used - inactive : used;
	if (total == 0)
		total = used;
	if (used > total)
		used = total;
	*ret_total_mib = (double)total / (1024.0 * 1024.0);
	*ret_used_mib = (double)used / (1024.0 * 1024.0);
}

struct metrics_req {
	struct evhttp_request *req;
	struct event *ev;
	uint64_t usage0, t0;
};

static unsigned waiting;

static void metrics_reply(evutil_socket_t fd, short what, void *arg)
{
	struct metrics_req *m = arg;
	uint64_t usage1 = cpu_usage_ns(), t1 = time_mono_ns();
	double cpus = cpu_count();
	double pct = 0;
	if (t1 > m->t0 && cpus > 0 && usage1 >= m->usage0)
		pct = 100.0 * (double)(usage1 - m->usage0) / ((double)(t1 - m->t0) * cpus);
	if (pct > 100)
		pct = 100;
	double total, used;
	memory(&total, &used);
	http_send_json(m->req, 200,
		       json_pack("{s:f, s:f, s:f, s:f, s:I}", "cpu_count", cpus, "cpu_used_pct", pct,
				 "mem_total_mib", total, "mem_used_mib", used, "timestamp",
				 (json_int_t)time_now_ms()));
	event_free(m->ev);
	free(m);
	waiting--;
}

void metrics_get(struct evhttp_request *req)
{
	if (waiting >= METRICS_MAX_WAITING) {
		http_send_error(req, 429, WIRE_CODE(RUNTIME_ERROR), "too many metrics requests in flight (limit %d)",
				METRICS_MAX_WAITING);
		return;
	}
	struct metrics_req *m = calloc(1, sizeof(*m));
	if (!m || !(m->ev = evtimer_new(execd_base, metrics_reply, m))) {
		free(m);
		http_send_error(req, 500, WIRE_CODE(RUNTIME_ERROR), "out of memory");
		return;
	}
	m->req = req;
	m->usage0 = cpu_usage_ns();
	m->t0 = time_mono_ns();
	struct timeval tv = {0, METRICS_SAMPLE_MS * 1000};
	evtimer_add(m->ev, &tv);
	waiting++;
}
