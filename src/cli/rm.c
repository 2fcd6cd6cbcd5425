/* corral rm: DELETE /sandboxes/{id} for each id. A sandbox that is already gone is not an error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char rm_help[] =
	"Usage: corral rm [OPTIONS] ID...\n"
	"\n"
	"Deletes sandboxes: their processes are killed and their files removed. Prints each id as it\n"
	"is deleted. An id the server does not know (already deleted, or reaped by its TTL) counts as\n"
	"deleted.\n"
	"\n"
	"Options:\n"
	"  -q, --quiet           do not print the ids\n"
	"\n" CLI_COMMON_HELP
	"\n"
	"Example:\n"
	"  corral rm $(corral ps -q --label run=42)\n"
	"\n"
	"Exit status: 0 every sandbox is gone; 1 usage error; 2 the server refused at least one\n"
	"deletion; 3 the server could not be reached; 130 interrupted. Failures are reported per id\n"
	"and the remaining ids are still deleted.\n";

int rm_sandbox(const struct cli *cli, const char *id, bool quiet)
{
	_cleanup_free_ char *eid = api_escape(id), *path = NULL, *what = NULL;
	if (!eid || asprintf(&path, "/sandboxes/%s", eid) < 0 ||
	    asprintf(&what, "sandbox %s", id) < 0)
		return EXIT_API;
	struct api_reply r;
	int ret = api_request(cli, "DELETE", path, NULL, CLI_REQUEST_TIMEOUT_S, &r);
	if (ret == 0 && (api_ok(&r) || r.status == 404)) {
		if (!quiet)
			printf("%s\n", id);
		ret = EXIT_OK;
	} else {
		ret = api_report(cli, what, &r);
	}
	api_reply_clear(&r);
	return ret;
}

int cmd_rm(struct cli *cli, int argc, char **argv)
{
	static const struct option options[] = {
		CLI_COMMON_OPTIONS,
		{"quiet", no_argument, NULL, 'q'},
		{0},
	};
	bool quiet = false;
	int c;
	while ((c = getopt_long(argc, argv, "hq", options, NULL)) != -1) {
		if (cli_common_option(cli, c, optarg))
			continue;
		switch (c) {
		case 'h':
			fputs(rm_help, stdout);
			return EXIT_OK;
		case 'q':
			quiet = true;
			break;
		default:
			return cli_try_help("rm");
		}
	}
	if (optind >= argc)
		return cli_usage_error("rm", "missing sandbox ID");
	int ret = EXIT_OK;
	for (int i = optind; i < argc; i++) {
		if (cli_interrupted())
			return EXIT_INTERRUPTED;
		int r = rm_sandbox(cli, argv[i], quiet);
		fflush(stdout);
		/* Keep the most telling status: unreachable beats refused. */
		if (r == EXIT_INTERRUPTED)
			return r;
		if (r && (ret == EXIT_OK || r == EXIT_CONNECT))
			ret = r;
	}
	return ret;
}
