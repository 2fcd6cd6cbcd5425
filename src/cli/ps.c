/* corral ps: every sandbox (corral_sandbox_list_json: all pages), as a table, JSON or bare ids. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "shared/timeutil.h"

static const char ps_help[] =
	"Usage: corral ps [OPTIONS]\n"
	"\n"
	"Lists sandboxes (all pages), newest first as the server orders them.\n"
	"\n"
	"Options:\n"
	"  -l, --label K=V       only sandboxes with this metadata label (repeatable: all must match)\n"
	"  -s, --state S         only sandboxes in state S: Running, Pending, Paused, Failed...\n"
	"                        (repeatable: any may match)\n"
	"  -o, --output FORMAT   table (default: ID, STATE, AGE, EXPIRES, LABELS) or json (an array\n"
	"                        of the server's sandbox objects)\n"
	"  -q, --quiet           print only the ids\n"
	"\n" CLI_COMMON_HELP
	"\n"
	"Example:\n"
	"  corral ps --label team=infra --state Running -o json\n"
	"\n"
	"Exit status: 0 listed (also when nothing matched); 1 usage error; 2 the server refused;\n"
	"3 the server could not be reached; 130 interrupted.\n";

static void format_duration(int64_t ms, char *buf, size_t len)
{
	int64_t s = ms / 1000;
	if (s < 120)
		snprintf(buf, len, "%llds", (long long)s);
	else if (s < 120 * 60)
		snprintf(buf, len, "%lldm", (long long)(s / 60));
	else if (s < 48 * 3600)
		snprintf(buf, len, "%lldh", (long long)(s / 3600));
	else
		snprintf(buf, len, "%lldd", (long long)(s / 86400));
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* "k=v,k2=v2", keys sorted; caller frees. */
static char *format_labels(json_t *meta)
{
	size_t n = json_object_size(meta), i = 0;
	if (!n)
		return strdup("-");
	const char **keys = calloc(n, sizeof(*keys));
	const char *k;
	json_t *v;
	json_object_foreach(meta, k, v) keys[i++] = k;
	qsort(keys, n, sizeof(*keys), cmp_str);
	char *out = strdup(""), *next;
	for (i = 0; i < n && out; i++) {
		const char *val = json_string_value(json_object_get(meta, keys[i]));
		if (asprintf(&next, "%s%s%s=%s", out, i ? "," : "", keys[i], val ? val : "") < 0)
			next = NULL;
		free(out);
		out = next;
	}
	free(keys);
	return out;
}

struct row {
	char *col[5];
};

static void print_table(json_t *items)
{
	static const char *const head[5] = {"ID", "STATE", "AGE", "EXPIRES", "LABELS"};
	size_t n = json_array_size(items), i;
	struct row *rows = calloc(n ? n : 1, sizeof(*rows));
	size_t width[5];
	for (int k = 0; k < 5; k++)
		width[k] = strlen(head[k]);
	int64_t now = time_now_ms();
	json_t *it;
	json_array_foreach(items, i, it) {
		const char *id = json_string_value(json_object_get(it, "id"));
		const char *state =
			json_string_value(json_object_get(json_object_get(it, "status"), "state"));
		const char *created = json_string_value(json_object_get(it, "createdAt"));
		const char *expires = json_string_value(json_object_get(it, "expiresAt"));
		char age[32] = "-", exp[32] = "never";
		int64_t t;
		if (created && time_parse_rfc3339(created, &t) == 0)
			format_duration(MAX(now - t, (int64_t)0), age, sizeof(age));
		if (expires && time_parse_rfc3339(expires, &t) == 0) {
			if (t > now) {
				char d[24];
				format_duration(t - now, d, sizeof(d));
				snprintf(exp, sizeof(exp), "in %s", d);
			} else {
				snprintf(exp, sizeof(exp), "expired");
			}
		}
		rows[i].col[0] = strdup(id ? id : "?");
		rows[i].col[1] = strdup(state ? state : "?");
		rows[i].col[2] = strdup(age);
		rows[i].col[3] = strdup(exp);
		rows[i].col[4] = format_labels(json_object_get(it, "metadata"));
		for (int k = 0; k < 5; k++) {
			if (!rows[i].col[k])
				rows[i].col[k] = strdup("?");
			width[k] = MAX(width[k], strlen(rows[i].col[k]));
		}
	}
	for (int k = 0; k < 4; k++)
		printf("%-*s  ", (int)width[k], head[k]);
	printf("%s\n", head[4]);
	for (i = 0; i < n; i++) {
		for (int k = 0; k < 5; k++) {
			if (k < 4)
				printf("%-*s  ", (int)width[k], rows[i].col[k]);
			else
				printf("%s\n", rows[i].col[k]);
			free(rows[i].col[k]);
		}
	}
	free(rows);
}

int cmd_ps(struct cli *cli, int argc, char **argv)
{
	static const struct option options[] = {
		CLI_COMMON_OPTIONS,
		{"label", required_argument, NULL, 'l'},
		{"state", required_argument, NULL, 's'},
		{"output", required_argument, NULL, 'o'},
		{"quiet", no_argument, NULL, 'q'},
		{0},
	};
	_cleanup_(json_decrefp) json_t *labels = json_object();
	_cleanup_(json_decrefp) json_t *states = json_array();
	enum { OUT_TABLE, OUT_JSON, OUT_IDS } out = OUT_TABLE;
	int c;
	while ((c = getopt_long(argc, argv, "hl:s:o:q", options, NULL)) != -1) {
		if (cli_common_option(cli, c, optarg))
			continue;
		switch (c) {
		case 'h':
			fputs(ps_help, stdout);
			return EXIT_OK;
		case 'l':
			if (cli_kv_add(labels, "--label", optarg) < 0)
				return EXIT_USAGE;
			break;
		case 's':
			if (!*optarg)
				return cli_usage_error("ps", "--state needs a state name");
			json_array_append_new(states, json_string(optarg));
			break;
		case 'o':
			if (strcmp(optarg, "json") == 0)
				out = OUT_JSON;
			else if (strcmp(optarg, "table") == 0)
				out = OUT_TABLE;
			else
				return cli_usage_error("ps", "-o '%s': expected table or json", optarg);
			break;
		case 'q':
			out = OUT_IDS;
			break;
		default:
			return cli_try_help("ps");
		}
	}
	if (optind < argc)
		return cli_usage_error("ps", "unexpected argument '%s'", argv[optind]);

	_cleanup_(corral_strv_freep) char **meta = cli_kv_strv(labels);
	char **st = calloc(json_array_size(states) + 1, sizeof(char *));
	size_t i;
	json_t *v;
	_cleanup_(corral_strv_freep) _unused_ char **state_v = st; /* frees st */
	if (!meta || !st)
		return EXIT_API;
	json_array_foreach(states, i, v) st[i] = strdup(json_string_value(v));
	corral_client *client;
	int ret = cli_client_new(cli, &client);
	if (ret)
		return ret;
	corral_error e;
	_cleanup_free_ char *text = NULL;
	if (corral_sandbox_list_json(client, (const char *const *)meta, (const char *const *)st,
				     &text, &e) < 0) {
		ret = cli_report("list", &e);
		corral_client_free(client);
		return ret;
	}
	corral_client_free(client);
	_cleanup_(json_decrefp) json_t *all = json_loads(text, 0, NULL);
	if (!json_is_array(all))
		return EXIT_API;

	if (out == OUT_JSON) {
		json_dumpf(all, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		putchar('\n');
	} else if (out == OUT_IDS) {
		json_t *it;
		json_array_foreach(all, i, it) {
			const char *id = json_string_value(json_object_get(it, "id"));
			if (id)
				printf("%s\n", id);
		}
	} else {
		print_table(all);
	}
	return EXIT_OK;
}
