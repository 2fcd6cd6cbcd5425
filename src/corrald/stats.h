/*
 * The usage-stats extension (GET /v1/sandboxes/{id}/stats): the runtime's probe() numbers plus
 * the disk used by the sandbox's writable layer, as one JSON object (shape in docs/resources.md).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "runtime/runtime.h"

struct stats_disk {
	uint64_t used_bytes;
	uint64_t limit_bytes; /* 0 = none */
	bool exact;           /* false: the walk stopped at STATS_DISK_WALK_MAX entries */
};

#define STATS_DISK_WALK_MAX 200000

/* Bytes allocated below dir (st_blocks), not crossing mount points, counting hard links once per
 * walk, at most STATS_DISK_WALK_MAX entries (then exact = false). Quick for an agent's layer; a
 * size-limited layer (its own file system) is answered by statfs() instead. */
int stats_disk_usage(const char *dir, struct stats_disk *ret);

/* The JSON body. cgroup = "v1"/"v2" (or NULL), requests as parsed from resourceRequests. */
json_t *stats_to_json(const char *id, const char *state, const struct sandbox_probe *pr,
		      uint64_t cpu_request_millis, uint64_t memory_request_bytes,
		      const struct stats_disk *disk);
