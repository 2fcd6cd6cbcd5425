/*
 * corral create: create a sandbox (corral_sandbox_create_json: ready when it returns, transient
 * failures retried), print its id. The create flags are shared with corral run.
 */
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
	"Transient failures (connection failures, 5xx, a sandbox that did not become ready) are\n"
	"retried with backoff within 180 s; a failed attempt's sandbox is deleted first. Ctrl-C lets\n"
	"the create finish, then deletes the sandbox.\n"
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

static int create_with(corral_client *client, const struct create_opts *o, corral_cancel *cancel,
		       corral_sandbox **ret, json_t **ret_json)
{
	_cleanup_(corral_strv_freep) char **env = cli_kv_strv(o->env);
	_cleanup_(corral_strv_freep) char **labels = cli_kv_strv(o->labels);
	_cleanup_(corral_strv_freep) char **ep = NULL;
	if (o->entrypoint) {
		ep = calloc(json_array_size(o->entrypoint) + 1, sizeof(char *));
		size_t i;
		json_t *w;
		json_array_foreach(o->entrypoint, i, w) if (ep) ep[i] = strdup(json_string_value(w));
	}
	if (!env || !labels || (o->entrypoint && !ep))
		return EXIT_API;
	corral_sandbox_spec spec;
	corral_sandbox_spec_init(&spec);
	spec.image = o->image;
	spec.entrypoint = (const char *const *)ep;
	/* Not given: no limit sent, the server's default applies (as the help says). */
	spec.cpu_quantity = o->cpu ? o->cpu : "";
	spec.memory_quantity = o->memory ? o->memory : "";
	spec.env = (const char *const *)env;
	spec.metadata = (const char *const *)labels;
	spec.raw_metadata = true; /* the server checks label rules and says which one failed */
	spec.ttl_s = o->ttl >= 0 ? (long)o->ttl : 0;
	spec.cancel = cancel;
	corral_error e;
	_cleanup_free_ char *answer = NULL;
	if (corral_sandbox_create_json(client, &spec, ret, ret_json ? &answer : NULL, &e) < 0)
		return cli_report("create", &e);
	if (ret_json)
		*ret_json = json_loads(answer, 0, NULL);
	return 0;
}

int create_sandbox(corral_client *client, const struct create_opts *o, corral_sandbox **ret,
		   json_t **ret_json)
{
	return create_with(client, o, NULL, ret, ret_json);
}

int create_sandbox_interruptible(corral_client *client, const struct create_opts *o,
				 corral_sandbox **ret, json_t **ret_json)
{
	corral_cancel *cancel;
	if (corral_cancel_new(&cancel) < 0)
		return EXIT_API;
	/* The create request under way finishes; what it made is deleted; no retry starts. */
	cli_interrupt_mode(CLI_INT_HOLD);
	cli_interrupt_cancel(cancel);
	int r = create_with(client, o, cancel, ret, ret_json);
	cli_interrupt_cancel(NULL);
	corral_cancel_free(cancel);
	return r;
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

	corral_client *client;
	int r = cli_client_new(cli, &client);
	if (r)
		return r;
	corral_sandbox *sb = NULL;
	json_t *resp = NULL;
	r = create_sandbox_interruptible(client, &o, &sb, o.json_output ? &resp : NULL);
	if (r == 0 && cli_interrupted()) {
		if (rm_sandbox(client, corral_sandbox_id(sb)) == EXIT_OK)
			fprintf(stderr, "corral: interrupted; deleted the sandbox just made\n");
		else
			fprintf(stderr, "corral: interrupted; sandbox %s was made\n",
				corral_sandbox_id(sb));
		r = EXIT_INTERRUPTED;
	} else if (r == 0 && resp) {
		json_dumpf(resp, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		putchar('\n');
	} else if (r == 0) {
		printf("%s\n", corral_sandbox_id(sb));
	}
	json_decref(resp);
	corral_sandbox_free(sb);
	corral_client_free(client);
	return r;
}
