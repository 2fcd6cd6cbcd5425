/*
 * The usage-stats extension (GET /v1/sandboxes/{id}/stats): the runtime's probe() numbers plus
 * its disk_usage() of the sandbox's writable layer, as one JSON object (shape in docs/resources.md).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "runtime/runtime.h"

struct stats_disk {
	uint64_t used_bytes;
	uint64_t limit_bytes; /* 0 = none */
	bool exact;           /* false: the runtime counted only up to a bound */
};

/* The JSON body; requests as parsed from resourceRequests. */
json_t *stats_to_json(const char *id, const char *state, const struct sandbox_probe *pr,
		      uint64_t cpu_request_millis, uint64_t memory_request_bytes,
		      const struct stats_disk *disk);
