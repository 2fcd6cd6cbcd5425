/* corral inspect: one sandbox as the server describes it (corral_sandbox_get_json), pretty-printed. */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"

static const char inspect_help[] =
	"Usage: corral inspect [OPTIONS] ID\n"
	"\n"
	"Prints sandbox ID as the server describes it (id, image, status, metadata, entrypoint,\n"
	"createdAt, expiresAt, and for a sandbox with a network its egress policy in force and\n"
	"its mode: networkPolicy, egressMode), as indented JSON.\n"
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
	json_t *j = NULL;
	int ret = cli_sandbox_json(cli, "inspect", argc, argv, corral_sandbox_get_json, &j);
	if (ret)
		return ret;
	json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	putchar('\n');
	json_decref(j);
	return EXIT_OK;
}
