/* The stats extension's pure part (corrald/stats.c): JSON from a probe (disk usage is the
 * runtime's: test_runtime_native.c). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "corrald/stats.h"
#include "shared/fsutil.h"

static void test_json(void)
{
	struct sandbox_probe pr = {
	    .alive = true,
	    .oom_kills = 2,
	    .memory_current = 1000,
	    .memory_peak = 5000,
	    .memory_limit = 8000,
	    .pids_current = 3,
	    .pids_max = 64,
	    .cpu_usage_ns = 123,
	    .cpu_nr_periods = 10,
	    .cpu_nr_throttled = 4,
	    .cpu_throttled_ns = 77,
	    .cpu_limit_millis = 500,
	};
	struct stats_disk disk = {.used_bytes = 4096, .limit_bytes = 0, .exact = true};
	json_t *o = stats_to_json("abc", "Running", &pr, 250, 0, &disk);
	json_t *m = json_object_get(o, "memory"), *c = json_object_get(o, "cpu");
	CHECK_STR(json_string_value(json_object_get(o, "id")), "abc");
	CHECK_INT(json_integer_value(json_object_get(m, "peakBytes")), 5000);
	CHECK_INT(json_integer_value(json_object_get(m, "oomKills")), 2);
	CHECK(json_is_null(json_object_get(m, "oomEvents"))); /* v1: unknown, not 0 */
	CHECK(json_is_null(json_object_get(m, "requestBytes")));
	CHECK_INT(json_integer_value(json_object_get(c, "requestMillis")), 250);
	CHECK_INT(json_integer_value(json_object_get(c, "limitMillis")), 500);
	CHECK(json_real_value(json_object_get(c, "throttleRatio")) > 0.399 &&
	      json_real_value(json_object_get(c, "throttleRatio")) < 0.401);
	CHECK(json_is_null(json_object_get(json_object_get(o, "disk"), "limitBytes")));
	json_decref(o);

	/* No periods yet: ratio 0, no division by zero; v2's OOM events are a number. */
	memset(&pr, 0, sizeof(pr));
	pr.oom_events_known = true;
	pr.oom_events = 1;
	o = stats_to_json("abc", "Failed", &pr, 0, 0, NULL);
	c = json_object_get(o, "cpu");
	CHECK(json_real_value(json_object_get(c, "throttleRatio")) == 0.0);
	CHECK_INT(json_integer_value(json_object_get(json_object_get(o, "memory"), "oomEvents")), 1);
	CHECK(json_is_null(json_object_get(json_object_get(o, "disk"), "usedBytes")));
	json_decref(o);
}

int main(void)
{
	test_json();
	return check_summary("corrald_stats");
}
