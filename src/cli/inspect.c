/* corral inspect: one sandbox as the server describes it (corral_sandbox_get_json), pretty-printed. */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"

static const char inspect_help[] =
	"Usage: corral inspect [OPTIONS] ID\n"
	"\n"
	"Prints sandbox ID as the server describes it (id, image, status, metadata, entrypoint,\n"
	"createdAt, expiresAt, ...), as indented JSON.\n"
	"\n" CLI_COMMON_HELP
	"\n"
	"Example:\n"
	"  corral inspect $ID | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"status\"][\"state\"])'\n"
	"\n"
	"Exit status: 0 printed; 1 usage error; 2 the server refused (an unknown id is\n"
	"\"corral: ...NOT_FOUND: ...\"); 3 the server could not be reached; 130 interrupted.\n";

int cmd_inspect(struct cli *cli, int argc, char **argv)
{
	static const struct option options[] = {
		CLI_COMMON_OPTIONS,
		{0},
	};
	int c;
	while ((c = getopt_long(argc, argv, "h", options, NULL)) != -1) {
		if (cli_common_option(cli, c, optarg))
			continue;
		if (c == 'h') {
			fputs(inspect_help, stdout);
			return EXIT_OK;
		}
		return cli_try_help("inspect");
	}
	if (optind >= argc)
		return cli_usage_error("inspect", "missing sandbox ID");
	if (optind + 1 < argc)
		return cli_usage_error("inspect", "one sandbox ID at a time");
	const char *id = argv[optind];
	_cleanup_free_ char *what = NULL;
	if (asprintf(&what, "sandbox %s", id) < 0)
		return EXIT_API;
	corral_client *client;
	int ret = cli_client_new(cli, &client);
	if (ret)
		return ret;
	corral_error e;
	_cleanup_free_ char *text = NULL;
	if (corral_sandbox_get_json(client, id, &text, &e) < 0) {
		ret = cli_report(what, &e);
	} else {
		json_t *j = json_loads(text, 0, NULL);
		json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		putchar('\n');
		json_decref(j);
	}
	corral_client_free(client);
	return ret;
}
