/* corral stats: what a sandbox uses (corral_sandbox_stats_json), as a table or as JSON. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "shared/quantity.h"

static const char stats_help[] =
	"Usage: corral stats [OPTIONS] ID\n"
	"\n"
	"Prints what sandbox ID uses: memory (current, peak, limit, request, OOM kills), CPU\n"
	"(time used, limit, request, throttling), processes and disk (its writable layer). Works on\n"
	"a sandbox that has ended (Failed, e.g. OOMKilled) until it is deleted: the numbers of its\n"
	"last moments stay readable. See docs/resources.md for every field.\n"
	"\n"
	"Options:\n"
	"  -o, --output FORMAT   table (default) or json (the server's answer); --json is -o json\n"
	"\n" CLI_COMMON_HELP
	"\n"
	"Example:\n"
	"  corral stats $ID\n"
	"\n"
	"Exit status: 0 printed; 1 usage error; 2 the server refused (an unknown id is\n"
	"\"corral: ...NOT_FOUND: ...\"); 3 the server could not be reached; 130 interrupted.\n";

enum { OPT_JSON = OPT_FIRST_COMMAND_OPTION };

/* "-" for null/absent, else the number formatted by kind: 'b' bytes, 'm' millicores, 'n' count. */
static const char *fmt(json_t *v, char kind, char *buf, size_t len)
{
	if (!json_is_integer(v))
		return "-";
	uint64_t x = (uint64_t)json_integer_value(v);
	if (kind == 'b')
		quantity_format_bytes(x, buf, len);
	else if (kind == 'm')
		snprintf(buf, len, "%" PRIu64 "m", x);
	else
		snprintf(buf, len, "%" PRIu64, x);
	return buf;
}

static double seconds(json_t *ns)
{
	return json_is_integer(ns) ? (double)json_integer_value(ns) / 1e9 : 0.0;
}

static void print_table(json_t *o)
{
	char a[32], b[32], c[32], d[32];
	json_t *m = json_object_get(o, "memory"), *cpu = json_object_get(o, "cpu"),
	       *p = json_object_get(o, "pids"), *dk = json_object_get(o, "disk");
	const char *reason = json_string_value(json_object_get(o, "reason"));
	printf("sandbox  %s  %s%s%s%s\n", json_string_value(json_object_get(o, "id")),
	       json_string_value(json_object_get(o, "state")), reason ? " (" : "",
	       reason ? reason : "", reason ? ")" : "");
	printf("memory   current %s  peak %s  limit %s  request %s\n",
	       fmt(json_object_get(m, "currentBytes"), 'b', a, sizeof(a)),
	       fmt(json_object_get(m, "peakBytes"), 'b', b, sizeof(b)),
	       fmt(json_object_get(m, "limitBytes"), 'b', c, sizeof(c)),
	       fmt(json_object_get(m, "requestBytes"), 'b', d, sizeof(d)));
	printf("         OOM kills %s  OOM events %s  limit hits %s\n",
	       fmt(json_object_get(m, "oomKills"), 'n', a, sizeof(a)),
	       fmt(json_object_get(m, "oomEvents"), 'n', b, sizeof(b)),
	       fmt(json_object_get(m, "limitHits"), 'n', c, sizeof(c)));
	printf("cpu      used %.2fs  limit %s  request %s  throttled %s of %s periods (%.1f%%), %.2fs\n",
	       seconds(json_object_get(cpu, "usageNanos")),
	       fmt(json_object_get(cpu, "limitMillis"), 'm', a, sizeof(a)),
	       fmt(json_object_get(cpu, "requestMillis"), 'm', b, sizeof(b)),
	       fmt(json_object_get(cpu, "throttledPeriods"), 'n', c, sizeof(c)),
	       fmt(json_object_get(cpu, "periods"), 'n', d, sizeof(d)),
	       100.0 * json_number_value(json_object_get(cpu, "throttleRatio")),
	       seconds(json_object_get(cpu, "throttledNanos")));
	printf("pids     %s of %s\n", fmt(json_object_get(p, "current"), 'n', a, sizeof(a)),
	       fmt(json_object_get(p, "limit"), 'n', b, sizeof(b)));
	printf("disk     used %s%s  limit %s\n", fmt(json_object_get(dk, "usedBytes"), 'b', a, sizeof(a)),
	       json_is_false(json_object_get(dk, "exact")) ? " (at least)" : "",
	       fmt(json_object_get(dk, "limitBytes"), 'b', b, sizeof(b)));
	json_int_t kills = json_integer_value(json_object_get(m, "oomKills"));
	if (kills > 0)
		printf("note     the out-of-memory killer killed %lld process(es): memory reached its limit "
		       "(peak %s of %s); raise resourceLimits.memory or make the workload use less\n",
		       (long long)kills, fmt(json_object_get(m, "peakBytes"), 'b', a, sizeof(a)),
		       fmt(json_object_get(m, "limitBytes"), 'b', b, sizeof(b)));
	if (json_number_value(json_object_get(cpu, "throttleRatio")) > 0.5)
		printf("note     throttled in most CPU periods: the workload wants more than its CPU limit\n");
}

int cmd_stats(struct cli *cli, int argc, char **argv)
{
	static const struct option options[] = {
		CLI_COMMON_OPTIONS,
		{"json", no_argument, NULL, OPT_JSON},
		{"output", required_argument, NULL, 'o'},
		{0},
	};
	bool json_out = false;
	int c;
	while ((c = getopt_long(argc, argv, "ho:", options, NULL)) != -1) {
		if (cli_common_option(cli, c, optarg))
			continue;
		if (c == 'h') {
			fputs(stats_help, stdout);
			return EXIT_OK;
		}
		if (c == OPT_JSON) {
			json_out = true;
			continue;
		}
		if (c == 'o') {
			if (strcmp(optarg, "json") == 0 || strcmp(optarg, "table") == 0) {
				json_out = strcmp(optarg, "json") == 0;
				continue;
			}
			return cli_usage_error("stats", "-o '%s': expected table or json", optarg);
		}
		return cli_try_help("stats");
	}
	json_t *j = NULL;
	int ret = cli_sandbox_json(cli, "stats", argc, argv, corral_sandbox_stats_json, &j);
	if (ret)
		return ret;
	if (json_out) {
		json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		putchar('\n');
	} else {
		print_table(j);
	}
	json_decref(j);
	return EXIT_OK;
}
