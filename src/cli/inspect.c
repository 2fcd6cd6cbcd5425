/* corral inspect: GET /sandboxes/{id}, pretty-printed. */
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
	_cleanup_free_ char *eid = api_escape(id), *path = NULL, *what = NULL;
	if (!eid || asprintf(&path, "/sandboxes/%s", eid) < 0 ||
	    asprintf(&what, "sandbox %s", id) < 0)
		return EXIT_API;
	struct api_reply r;
	int ret = api_request(cli, "GET", path, NULL, CLI_REQUEST_TIMEOUT_S, &r);
	if (ret == 0 && api_ok(&r) && r.json) {
		json_dumpf(r.json, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		putchar('\n');
		ret = EXIT_OK;
	} else if (ret == 0 && api_ok(&r)) {
		fprintf(stderr, "corral: %s: the answer is not JSON (request id %s)\n", what,
			r.request_id);
		ret = EXIT_API;
	} else {
		ret = api_report(cli, what, &r);
	}
	api_reply_clear(&r);
	return ret;
}
