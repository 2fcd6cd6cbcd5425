/* Admission arithmetic: see capacity.h. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "corrald/capacity.h"
#include "shared/quantity.h"

#define RESERVE_MIN (512ULL << 20)

int capacity_parse(const char *s, struct capacity *cap, char *msg, size_t msglen)
{
	char buf[256];
	if (!s || !*s || strlen(s) >= sizeof(buf)) {
		snprintf(msg, msglen, "expected cpu=N,memory=SIZE (e.g. cpu=8,memory=30Gi)");
		return -EINVAL;
	}
	snprintf(buf, sizeof(buf), "%s", s);
	struct capacity c = *cap;
	char *save = NULL;
	for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(kv, '=');
		if (!eq) {
			snprintf(msg, msglen, "'%s' is not KEY=VALUE (keys: cpu, memory)", kv);
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
		} else {
			snprintf(msg, msglen, "unknown key '%s' (keys: cpu, memory)", kv);
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
}

bool capacity_fits(const struct capacity *cap, const struct capacity *used,
		   const struct capacity *req)
{
	return used->cpu_millis + req->cpu_millis <= cap->cpu_millis &&
	       used->memory_bytes + req->memory_bytes <= cap->memory_bytes;
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
	if (off == 0)
		snprintf(msg, msglen, "queued behind earlier creates (first in, first out)");
}
