/*
 * The CPU and memory view of a sandbox: see sysview.h for what each tool reads and what is
 * generated.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/sysview.h"
#include "shared/dynbuf.h"
#include "shared/fsutil.h"
#include "shared/hash.h"
#include "shared/macro.h"

#define HOST_FILE_MAX (4 << 20)

unsigned sysview_ncpus(uint64_t millis)
{
	if (millis == 0)
		return 0;
	uint64_t n = (millis + 999) / 1000;
	return n > CPU_SETSIZE ? CPU_SETSIZE : (unsigned)n;
}

uint32_t sysview_seed(const char *id)
{
	return hash_fnv1a(id);
}

unsigned sysview_pick_cpus(const cpu_set_t *allowed, unsigned n, uint32_t seed, cpu_set_t *ret)
{
	int ids[CPU_SETSIZE];
	unsigned m = 0;
	for (int i = 0; i < CPU_SETSIZE; i++)
		if (CPU_ISSET(i, allowed))
			ids[m++] = i;
	CPU_ZERO(ret);
	if (m == 0)
		return 0;
	if (n > m)
		n = m;
	unsigned start = seed % m;
	for (unsigned k = 0; k < n; k++)
		CPU_SET(ids[(start + k) % m], ret);
	return n;
}

int sysview_cpulist(const cpu_set_t *set, char *buf, size_t len)
{
	size_t off = 0;
	if (len == 0)
		return -ENOSPC;
	buf[0] = '\0';
	for (int i = 0; i < CPU_SETSIZE; i++) {
		if (!CPU_ISSET(i, set))
			continue;
		int j = i;
		while (j + 1 < CPU_SETSIZE && CPU_ISSET(j + 1, set))
			j++;
		int n = j > i ? snprintf(buf + off, len - off, "%s%d-%d", off ? "," : "", i, j)
			      : snprintf(buf + off, len - off, "%s%d", off ? "," : "", i);
		if (n < 0 || (size_t)n >= len - off)
			return -ENOSPC;
		off += (size_t)n;
		i = j;
	}
	if (off + 2 > len)
		return -ENOSPC;
	buf[off++] = '\n';
	buf[off] = '\0';
	return 0;
}

/* A view is at most this long: a host file of HOST_FILE_MAX with its lines rewritten (a meminfo
 * line "k: 1 kB" becomes 28 bytes). */
#define VIEW_MAX (4 * HOST_FILE_MAX)

/* The "processor : N" number of a cpuinfo block, or -1. */
static int block_processor(const char *block, size_t len)
{
	const char *p = block, *end = block + len;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t l = nl ? (size_t)(nl - p) : (size_t)(end - p);
		if (l > 9 && strncmp(p, "processor", 9) == 0) {
			const char *c = memchr(p, ':', l);
			if (c)
				return atoi(c + 1);
		}
		p += l + 1;
	}
	return -1;
}

char *sysview_cpuinfo(const char *host, const cpu_set_t *set)
{
	_cleanup_dynbuf_ struct dynbuf out = DYNBUF_INIT(VIEW_MAX);
	/* Blocks are separated by an empty line; each one keeps its trailing "\n\n". */
	const char *p = host;
	while (*p) {
		const char *sep = strstr(p, "\n\n");
		size_t l = sep ? (size_t)(sep - p) + 2 : strlen(p);
		int cpu = block_processor(p, l);
		/* Text outside any processor block (some architectures have a header) is kept. */
		if ((cpu < 0 || (cpu < CPU_SETSIZE && CPU_ISSET(cpu, set))) &&
		    dynbuf_add(&out, p, l) < 0)
			return NULL;
		p += l;
	}
	return dynbuf_take(&out, NULL);
}

#define STAT_FIELDS 10

char *sysview_stat(const char *host, const cpu_set_t *set)
{
	_cleanup_dynbuf_ struct dynbuf out = DYNBUF_INIT(VIEW_MAX);
	_cleanup_dynbuf_ struct dynbuf rest = DYNBUF_INIT(VIEW_MAX);
	uint64_t sum[STAT_FIELDS] = {0};
	int nfields = 0;
	bool have_total = false;
	for (const char *p = host; *p;) {
		const char *nl = strchr(p, '\n');
		size_t l = nl ? (size_t)(nl - p) + 1 : strlen(p);
		unsigned cpu;
		if (strncmp(p, "cpu ", 4) == 0) {
			have_total = true;
		} else if (sscanf(p, "cpu%u ", &cpu) == 1) {
			if (cpu < CPU_SETSIZE && CPU_ISSET(cpu, set)) {
				const char *q = strchr(p, ' ');
				int k = 0;
				while (q && q < p + l && k < STAT_FIELDS) {
					char *e;
					uint64_t v = strtoull(q, &e, 10);
					if (e == q)
						break;
					sum[k++] += v;
					q = e;
				}
				if (k > nfields)
					nfields = k;
				if (dynbuf_add(&rest, p, l) < 0)
					return NULL;
			}
		} else if (dynbuf_add(&rest, p, l) < 0) {
			return NULL;
		}
		p += l;
	}
	if (have_total) {
		char line[STAT_FIELDS * 24 + 8];
		int off = snprintf(line, sizeof(line), "cpu ");
		for (int k = 0; k < nfields; k++)
			off += snprintf(line + off, sizeof(line) - (size_t)off, " %" PRIu64, sum[k]);
		snprintf(line + off, sizeof(line) - (size_t)off, "\n");
		if (dynbuf_add_str(&out, line) < 0)
			return NULL;
	}
	if (dynbuf_add(&out, rest.data, rest.len) < 0)
		return NULL;
	return dynbuf_take(&out, NULL);
}

char *sysview_meminfo(const char *host, uint64_t limit, uint64_t used)
{
	static const char *const unclamped[] = {"Vmalloc", "DirectMap", "Hugepagesize", "Hugetlb",
						"HugePages"};
	uint64_t limit_kb = limit / 1024, used_kb = used / 1024;
	uint64_t free_kb = used_kb < limit_kb ? limit_kb - used_kb : 0;
	_cleanup_dynbuf_ struct dynbuf out = DYNBUF_INIT(VIEW_MAX);
	for (const char *p = host; *p;) {
		const char *nl = strchr(p, '\n');
		size_t l = nl ? (size_t)(nl - p) + 1 : strlen(p);
		char key[64];
		uint64_t v;
		char line[128];
		const char *emit = p;
		size_t elen = l;
		if (sscanf(p, "%63[^:]: %" SCNu64 " kB", key, &v) == 2 && memchr(p, 'k', l)) {
			bool clamp = true;
			for (size_t i = 0; i < ARRAY_SIZE(unclamped); i++)
				clamp &= strncmp(key, unclamped[i], strlen(unclamped[i])) != 0;
			if (strcmp(key, "MemTotal") == 0)
				v = limit_kb;
			else if (strcmp(key, "MemFree") == 0 || strcmp(key, "MemAvailable") == 0)
				v = free_kb;
			else if (strncmp(key, "Swap", 4) == 0)
				v = 0;
			else if (clamp && v > limit_kb)
				v = limit_kb;
			/* The kernel's layout: key and colon in 16 columns, value right-aligned. */
			char k2[72];
			snprintf(k2, sizeof(k2), "%s:", key);
			elen = (size_t)snprintf(line, sizeof(line), "%-16s%8" PRIu64 " kB\n", k2, v);
			emit = line;
		}
		if (dynbuf_add(&out, emit, elen) < 0)
			return NULL;
		p += l;
	}
	return dynbuf_take(&out, NULL);
}

void sysview_clear(struct sysview *v)
{
	free(v->online);
	free(v->cpuinfo);
	free(v->stat);
	free(v->meminfo);
	memset(v, 0, sizeof(*v));
}

int sysview_build(const char *id, uint64_t cpu_millis, uint64_t mem_bytes, struct sysview *ret,
		  struct error *err)
{
	memset(ret, 0, sizeof(*ret));
	unsigned n = sysview_ncpus(cpu_millis);
	cpu_set_t allowed;
	if (n && sched_getaffinity(0, sizeof(allowed), &allowed) < 0)
		return error_set_errno(err, errno, "sched_getaffinity");
	int r;
	if (n && n < (unsigned)CPU_COUNT(&allowed)) {
		sysview_pick_cpus(&allowed, n, sysview_seed(id), &ret->cpus);
		char list[4096];
		_cleanup_free_ char *info = NULL, *stat = NULL;
		if ((r = fs_read_file("/proc/cpuinfo", HOST_FILE_MAX, &info, NULL)) < 0 ||
		    (r = fs_read_file("/proc/stat", HOST_FILE_MAX, &stat, NULL)) < 0)
			return error_set_errno(err, -r, "read the host's /proc/cpuinfo or /proc/stat");
		if (sysview_cpulist(&ret->cpus, list, sizeof(list)) < 0 ||
		    !(ret->online = strdup(list)) || !(ret->cpuinfo = sysview_cpuinfo(info, &ret->cpus)) ||
		    !(ret->stat = sysview_stat(stat, &ret->cpus))) {
			sysview_clear(ret);
			return error_set(err, ENOMEM, "CPU view");
		}
		ret->cpu = true;
	}
	if (mem_bytes) {
		_cleanup_free_ char *info = NULL;
		if ((r = fs_read_file("/proc/meminfo", HOST_FILE_MAX, &info, NULL)) < 0) {
			sysview_clear(ret);
			return error_set_errno(err, -r, "read the host's /proc/meminfo");
		}
		if (!(ret->meminfo = sysview_meminfo(info, mem_bytes, 0))) {
			sysview_clear(ret);
			return error_set(err, ENOMEM, "memory view");
		}
		ret->mem = true;
	}
	return 0;
}
