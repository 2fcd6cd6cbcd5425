/*
 * Admission arithmetic (pure; corrald/admission.c drives it): the host's allocatable capacity, the
 * sum of admitted requests, and whether one more sandbox's requests fit.
 *
 * Besides CPU and memory requests, two host-wide kernel tables that every sandbox draws from
 * (docs/resources.md, "Host-wide tables"):
 *  - pids: each sandbox holds its whole pids limit (pids.max) of the host's pid table
 *    (min(kernel.pid_max, kernel.threads-max)): the sum of the limits never passes it, so no set
 *    of sandboxes can leave the host unable to fork;
 *  - files: each sandbox holds its RLIMIT_NOFILE (one full fd table) of the host's open-file
 *    table (fs.file-max).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct capacity {
	uint64_t cpu_millis;
	uint64_t memory_bytes;
	uint64_t pids;  /* entries of the host's pid table */
	uint64_t files; /* entries of the host's open-file table */
	uint64_t disk;  /* bytes of the state file system the sandboxes' disks may add up to;
			 * UINT64_MAX: not counted (the default: disks overcommit) */
};

/* A sandbox without a disk limit, charged under a disk capacity: never admitted. */
#define CAPACITY_DISK_UNBOUNDED UINT64_MAX

/* "cpu=N,memory=SIZE,pids=N,files=N,disk=SIZE|auto" (any key may be left out: it keeps its value
 * in *cap; quantities as in resourceLimits). disk=auto sets cap->disk to CAPACITY_DISK_AUTO, which
 * the caller replaces with capacity_disk_auto() of its state file system. -EINVAL with msg saying
 * what is wrong. */
#define CAPACITY_DISK_AUTO (UINT64_MAX - 1)
int capacity_parse(const char *s, struct capacity *cap, char *msg, size_t msglen);

/* disk=auto: a file system of fs_bytes less max(1 GiB, 5%) for corrald's own records and images. */
uint64_t capacity_disk_auto(uint64_t fs_bytes);

/* The default: every CPU this process may run on, and the host's memory less a reserve for the
 * host itself (max(512 MiB, 5%)). host_cpus/host_memory are what the host has. The tables and
 * the disk are left unlimited. */
void capacity_default(unsigned host_cpus, uint64_t host_memory, struct capacity *ret);

/* The default shares of the host's tables: pid_table (min(kernel.pid_max, kernel.threads-max))
 * less max(2048, 1/16) for the host's own processes, and file_table (fs.file-max) less
 * max(65536, 5%). A table read as 0 (unknown) is left unlimited. */
void capacity_default_tables(uint64_t pid_table, uint64_t file_table, struct capacity *ret);

/* Whether req fits next to used within cap. */
bool capacity_fits(const struct capacity *cap, const struct capacity *used,
		   const struct capacity *req);

/* A request larger than the whole capacity can never be admitted: describe why into msg (names
 * the field), or return false when it could fit some day. */
bool capacity_never_fits(const struct capacity *cap, const struct capacity *req, char *msg,
			 size_t msglen);

/* What is short right now, e.g. "cpu: needs 1000m, 0m of 2000m free". */
void capacity_shortfall(const struct capacity *cap, const struct capacity *used,
			const struct capacity *req, char *msg, size_t msglen);
