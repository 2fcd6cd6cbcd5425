/*
 * Usage stats: JSON from a probe and the runtime's disk usage.
 */
#include <string.h>

#include "corrald/stats.h"
#include "shared/macro.h"

static json_t *u64(uint64_t v)
{
	return json_integer((json_int_t)(v > (uint64_t)INT64_MAX ? INT64_MAX : v));
}

json_t *stats_to_json(const char *id, const char *state, const struct sandbox_probe *pr,
		      uint64_t cpu_request_millis, uint64_t memory_request_bytes,
		      const struct stats_disk *disk)
{
	json_t *mem = json_object(), *cpu = json_object(), *pids = json_object(),
	       *dk = json_object(), *o = json_object();
	if (!mem || !cpu || !pids || !dk || !o)
		goto oom;
	json_object_set_new(mem, "currentBytes", u64(pr->memory_current));
	json_object_set_new(mem, "peakBytes", pr->memory_peak ? u64(pr->memory_peak) : json_null());
	json_object_set_new(mem, "limitBytes", pr->memory_limit ? u64(pr->memory_limit) : json_null());
	json_object_set_new(mem, "requestBytes",
			    memory_request_bytes ? u64(memory_request_bytes) : json_null());
	json_object_set_new(mem, "oomEvents",
			    pr->oom_events_known ? u64(pr->oom_events) : json_null());
	json_object_set_new(mem, "oomKills", u64(pr->oom_kills));
	json_object_set_new(mem, "limitHits", u64(pr->memory_max_events));

	json_object_set_new(cpu, "usageNanos", u64(pr->cpu_usage_ns));
	json_object_set_new(cpu, "limitMillis",
			    pr->cpu_limit_millis ? u64(pr->cpu_limit_millis) : json_null());
	json_object_set_new(cpu, "requestMillis",
			    cpu_request_millis ? u64(cpu_request_millis) : json_null());
	json_object_set_new(cpu, "periods", u64(pr->cpu_nr_periods));
	json_object_set_new(cpu, "throttledPeriods", u64(pr->cpu_nr_throttled));
	json_object_set_new(cpu, "throttledNanos", u64(pr->cpu_throttled_ns));
	json_object_set_new(cpu, "throttleRatio",
			    json_real(pr->cpu_nr_periods ? (double)pr->cpu_nr_throttled /
							       (double)pr->cpu_nr_periods
							 : 0.0));

	json_object_set_new(pids, "current", u64(pr->pids_current));
	json_object_set_new(pids, "limit", pr->pids_max ? u64(pr->pids_max) : json_null());

	json_object_set_new(dk, "usedBytes", disk ? u64(disk->used_bytes) : json_null());
	json_object_set_new(dk, "limitBytes",
			    disk && disk->limit_bytes ? u64(disk->limit_bytes) : json_null());
	json_object_set_new(dk, "exact", json_boolean(disk && disk->exact));

	json_object_set_new(o, "id", json_string(id));
	json_object_set_new(o, "state", json_string(state));
	json_object_set_new(o, "alive", json_boolean(pr->alive));
	json_object_set_new(o, "memory", mem);
	json_object_set_new(o, "cpu", cpu);
	json_object_set_new(o, "pids", pids);
	json_object_set_new(o, "disk", dk);
	return o;
oom:
	json_decref(mem);
	json_decref(cpu);
	json_decref(pids);
	json_decref(dk);
	json_decref(o);
	return NULL;
}
