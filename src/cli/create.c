/* corral create: POST /sandboxes, print the id. The create flags are shared with corral run. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "shared/quantity.h"

static const char create_help[] =
	"Usage: corral create [OPTIONS] [--entrypoint CMD...]\n"
	"\n"
	"Creates a sandbox and prints its id once the sandbox is Running (its exec daemon answers),\n"
	"so the next command can use it right away.\n"
	"\n"
	"Options:\n"
	"  --image NAME          image to run (default \"host\": the host's file system, read-only)\n"
	"  --cpu Q               cpu limit: \"2\", \"0.5\", \"500m\" (default: the server's)\n"
	"  --memory Q            memory limit: \"512Mi\", \"2Gi\", \"1G\" (default: the server's)\n"
	"  -e, --env K=V         environment variable for the sandbox (repeatable)\n"
	"  -l, --label K=V       metadata label (repeatable); 'corral ps --label K=V' filters on it\n"
	"  --ttl SECONDS         delete the sandbox automatically after SECONDS (the server wants\n"
	"                        at least 60); default: never, delete it with 'corral rm'\n"
	"  --entrypoint CMD...   the sandbox's main process: every argument after it (up to '--')\n"
	"                        (default: sleep infinity)\n"
	"  -o, --output json     print the server's whole answer as JSON instead of the id\n"
	"\n" CLI_COMMON_HELP
	"\n"
	"Example:\n"
	"  ID=$(corral create --cpu 1 --memory 512Mi --ttl 600 --label team=infra)\n"
	"\n"
	"Exit status: 0 created, 1 usage error, 2 the server refused (\"corral: CODE: message\"),\n"
	"3 the server could not be reached or timed out, 130 interrupted.\n";

void create_opts_init(struct create_opts *o)
{
	*o = (struct create_opts){
		.image = "host",
		.env = json_object(),
		.labels = json_object(),
		.ttl = -1,
	};
}

void create_opts_clear(struct create_opts *o)
{
	json_decref(o->env);
	json_decref(o->labels);
	json_decref(o->entrypoint);
	*o = (struct create_opts){0};
}

int create_take_entrypoint(const char *cmd, int *argc, char **argv, struct create_opts *o)
{
	int start = -1;
	for (int i = 1; i < *argc; i++) {
		if (strcmp(argv[i], "--") == 0)
			break;
		if (strcmp(argv[i], "--entrypoint") == 0) {
			start = i;
			break;
		}
	}
	if (start < 0)
		return 0;
	int end = start + 1;
	while (end < *argc && strcmp(argv[end], "--") != 0)
		end++;
	if (end == start + 1)
		return cli_usage_error(cmd, "--entrypoint needs a command");
	json_decref(o->entrypoint);
	o->entrypoint = json_array();
	for (int i = start + 1; i < end; i++)
		json_array_append_new(o->entrypoint, json_string(argv[i]));
	/* Close the gap: argv keeps the "--" and whatever follows it. */
	int removed = end - start;
	memmove(&argv[start], &argv[end], sizeof(char *) * (size_t)(*argc - end + 1));
	*argc -= removed;
	return 0;
}

int create_option(const char *cmd, struct create_opts *o, int c, const char *arg)
{
	uint64_t q;
	unsigned long long ttl;
	switch (c) {
	case OPT_IMAGE:
		if (!*arg)
			return -cli_usage_error(cmd, "--image needs a name");
		o->image = arg;
		return 1;
	case OPT_CPU:
		if (quantity_parse_cpu(arg, &q) < 0)
			return -cli_usage_error(cmd,
						"--cpu '%s': expected cores (\"2\", \"0.5\") or "
						"millicores (\"500m\")",
						arg);
		o->cpu = arg;
		return 1;
	case OPT_MEMORY:
		if (quantity_parse_bytes(arg, &q) < 0)
			return -cli_usage_error(cmd,
						"--memory '%s': expected bytes with an optional "
						"suffix (\"512Mi\", \"2Gi\", \"1G\")",
						arg);
		o->memory = arg;
		return 1;
	case 'e':
		return cli_kv_add(o->env, "--env", arg) < 0 ? -EXIT_USAGE : 1;
	case 'l':
		return cli_kv_add(o->labels, "--label", arg) < 0 ? -EXIT_USAGE : 1;
	case OPT_TTL:
		if (cli_parse_uint(arg, 100LL * 365 * 86400, &ttl) < 0 || ttl == 0)
			return -cli_usage_error(cmd, "--ttl '%s': expected a positive number of seconds",
						arg);
		o->ttl = (long long)ttl;
		return 1;
	case OPT_ENTRYPOINT: /* "--entrypoint=CMD": a one-word entrypoint */
		json_decref(o->entrypoint);
		o->entrypoint = json_pack("[s]", arg);
		return 1;
	default:
		return 0;
	}
}

int create_sandbox(const struct cli *cli, const struct create_opts *o, char **ret_id,
		   json_t **ret_response)
{
	json_t *limits = json_object();
	if (o->cpu)
		json_object_set_new(limits, "cpu", json_string(o->cpu));
	if (o->memory)
		json_object_set_new(limits, "memory", json_string(o->memory));
	json_t *body = json_pack("{s:{s:s}, s:O?, s:o, s:O, s:O}", "image", "uri", o->image,
				 "entrypoint", o->entrypoint, "resourceLimits", limits, "env", o->env,
				 "metadata", o->labels);
	if (!o->entrypoint)
		json_object_set_new(body, "entrypoint", json_pack("[ss]", "sleep", "infinity"));
	if (o->ttl >= 0)
		json_object_set_new(body, "timeout", json_integer(o->ttl));

	struct api_reply r;
	int ret = api_request(cli, "POST", "/sandboxes", body, CLI_CREATE_TIMEOUT_S, &r);
	json_decref(body);
	if (ret < 0 || !api_ok(&r)) {
		ret = api_report(cli, "create", &r);
		api_reply_clear(&r);
		return ret;
	}
	const char *id = json_string_value(json_object_get(r.json, "id"));
	if (!id || !*id) {
		fprintf(stderr, "corral: create: the answer has no sandbox id (HTTP %ld, request id %s)\n",
			r.status, r.request_id);
		api_reply_clear(&r);
		return EXIT_API;
	}
	*ret_id = strdup(id);
	if (ret_response)
		*ret_response = json_incref(r.json);
	api_reply_clear(&r);
	return 0;
}

int cmd_create(struct cli *cli, int argc, char **argv)
{
	static const struct option options[] = {
		CLI_COMMON_OPTIONS,
		CREATE_OPTIONS,
		{"output", required_argument, NULL, 'o'},
		{0},
	};
	_cleanup_(create_opts_clear) struct create_opts o;
	create_opts_init(&o);
	if (create_take_entrypoint("create", &argc, argv, &o))
		return EXIT_USAGE;
	int c;
	while ((c = getopt_long(argc, argv, "he:l:o:", options, NULL)) != -1) {
		if (cli_common_option(cli, c, optarg))
			continue;
		int r = create_option("create", &o, c, optarg);
		if (r < 0)
			return -r;
		if (r > 0)
			continue;
		switch (c) {
		case 'h':
			fputs(create_help, stdout);
			return EXIT_OK;
		case 'o':
			if (strcmp(optarg, "json") == 0)
				o.json_output = true;
			else if (strcmp(optarg, "id") != 0)
				return cli_usage_error("create", "-o '%s': expected json or id",
						       optarg);
			break;
		default:
			return cli_try_help("create");
		}
	}
	if (optind < argc)
		return cli_usage_error("create", "unexpected argument '%s'", argv[optind]);

	_cleanup_free_ char *id = NULL;
	json_t *resp = NULL;
	int r = create_sandbox(cli, &o, &id, o.json_output ? &resp : NULL);
	if (r)
		return r;
	if (resp) {
		json_dumpf(resp, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		putchar('\n');
		json_decref(resp);
	} else {
		printf("%s\n", id);
	}
	return EXIT_OK;
}
