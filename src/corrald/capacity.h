/*
 * Admission arithmetic (pure; corrald/admission.c drives it): the host's allocatable capacity, the
 * sum of admitted requests, and whether one more sandbox's requests fit.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct capacity {
	uint64_t cpu_millis;
	uint64_t memory_bytes;
};

/* "cpu=N,memory=SIZE" (either key may be left out: it keeps its value in *cap; quantities as in
 * resourceLimits). -EINVAL with msg saying what is wrong. */
int capacity_parse(const char *s, struct capacity *cap, char *msg, size_t msglen);

/* The default: every CPU this process may run on, and the host's memory less a reserve for the
 * host itself (max(512 MiB, 5%)). host_cpus/host_memory are what the host has. */
void capacity_default(unsigned host_cpus, uint64_t host_memory, struct capacity *ret);

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
