/*
 * The CPU and memory a sandbox sees: generated copies of the host's /proc/cpuinfo, /proc/stat,
 * /proc/meminfo and /sys/devices/system/cpu/online that describe the sandbox's limits, which the
 * native runtime bind-mounts read-only over the real ones inside the sandbox (no LXCFS, no daemon),
 * plus the CPU affinity that matches them. The texts are built before the sandbox's PID 1 starts;
 * PID 1 writes them into a scratch tmpfs of its own mount namespace and binds them from there (no
 * disk I/O: creating four files in the state dir cost ~2 ms per create on this host's ext4).
 *
 * What reads what (strace on Debian 12: glibc 2.36, Python 3.11, Node 20/libuv):
 *   nproc                          sched_getaffinity (and OMP_NUM_THREADS / OMP_THREAD_LIMIT)
 *   getconf _NPROCESSORS_ONLN,     sysconf(_SC_NPROCESSORS_ONLN) -> /sys/devices/system/cpu/online
 *   Python os.cpu_count()
 *   Node os.cpus()                 /proc/stat ("cpuN" lines), /proc/cpuinfo (model names)
 *   free, top, Node os.totalmem()  /proc/meminfo
 *
 * The files are snapshots taken at create time: the CPU set and the memory total are exact for the
 * sandbox's whole life; the counters in /proc/stat and the "free" lines of /proc/meminfo are the
 * host's at creation (clamped to the limit), not live.
 *
 * Everything but sysview_build() is pure (string in, string out) and unit-tested.
 */
#pragma once

#include <sched.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shared/error.h"

/* CPUs a sandbox with a limit of millis sees: ceil(millis / 1000), at least 1 (0 = no limit). */
unsigned sysview_ncpus(uint64_t millis);

/* Pick n CPUs of allowed: n consecutive ones (in allowed's order, wrapping) starting at the
 * seed-th, so sandboxes with different seeds spread over the host. Returns how many were picked
 * (min(n, CPU_COUNT(allowed))). */
unsigned sysview_pick_cpus(const cpu_set_t *allowed, unsigned n, uint32_t seed, cpu_set_t *ret);

/* The kernel's list format ("0-2,5\n") of set. -ENOSPC when buf is too small. */
int sysview_cpulist(const cpu_set_t *set, char *buf, size_t len);

/* /proc/cpuinfo with only the "processor : N" blocks whose N is in set. malloc'd, NULL on ENOMEM. */
char *sysview_cpuinfo(const char *host, const cpu_set_t *set);

/* /proc/stat with only the "cpuN" lines whose N is in set, and the "cpu" total line the sum of
 * those. malloc'd, NULL on ENOMEM. */
char *sysview_stat(const char *host, const cpu_set_t *set);

/* /proc/meminfo for a memory limit: MemTotal = limit, MemFree/MemAvailable = limit - used (used =
 * what the sandbox's cgroup has charged, 0 at create), no swap (the limit covers swap too), every
 * other size clamped to the limit. malloc'd, NULL on ENOMEM. */
char *sysview_meminfo(const char *host, uint64_t limit, uint64_t used);

/* FNV-1a of a sandbox id: the seed for sysview_pick_cpus(). */
uint32_t sysview_seed(const char *id);

struct sysview {
	bool cpu;      /* CPU limit below the host's CPU count: online, cpuinfo, stat, cpus are set */
	bool mem;      /* memory limit: meminfo is set */
	cpu_set_t cpus; /* the CPUs to pin the sandbox to */
	char *online, *cpuinfo, *stat, *meminfo; /* malloc'd file contents, or NULL */
};

/* Build the view of a sandbox with these limits (reads the host's /proc files). */
int sysview_build(const char *id, uint64_t cpu_millis, uint64_t mem_bytes, struct sysview *ret,
		  struct error *err);
void sysview_clear(struct sysview *v);
