/* corral logs: the output of a background execution (stdout and stderr combined), via libcorral. */
#include <corral/corral.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char logs_help[] =
	"Usage: corral logs [OPTIONS] ID EXEC\n"
	"\n"
	"Prints the output of background execution EXEC (32 hex characters, as chosen by a\n"
	"libcorral client) in sandbox ID: stdout and stderr combined, as the command wrote them.\n"
	"\n"
	"Options:\n"
	"  --cursor N            start at byte offset N (default 0); the next offset is printed on\n"
	"                        stderr as 'cursor: N'\n"
	"\n" CLI_COMMON_HELP
	"\n"
	"Exit status: 0 printed; 1 usage error; 2 the server refused (unknown sandbox or execution);\n"
	"3 the server could not be reached.\n";

int cmd_logs(struct cli *cli, int argc, char **argv)
{
	enum { OPT_CURSOR = OPT_FIRST_COMMAND_OPTION + 0x50 };
	static const struct option options[] = {
		CLI_COMMON_OPTIONS,
		{"cursor", required_argument, NULL, OPT_CURSOR},
		{0},
	};
	unsigned long long cursor = 0;
	bool show_cursor = false;
	int c;
	while ((c = getopt_long(argc, argv, "h", options, NULL)) != -1) {
		if (cli_common_option(cli, c, optarg))
			continue;
		switch (c) {
		case 'h':
			fputs(logs_help, stdout);
			return EXIT_OK;
		case OPT_CURSOR:
			if (cli_parse_uint(optarg, (1ull << 62), &cursor) < 0)
				return cli_usage_error("logs", "--cursor '%s': expected a byte offset",
						       optarg);
			show_cursor = true;
			break;
		default:
			return cli_try_help("logs");
		}
	}
	if (argc - optind != 2)
		return cli_usage_error("logs", "expected a sandbox ID and an execution id");
	const char *ex = argv[optind + 1];
	if (strlen(ex) != 32 || strspn(ex, "0123456789abcdef") != 32)
		return cli_usage_error("logs", "execution id '%s': expected 32 lowercase hex characters",
				       ex);
	corral_client *client;
	corral_error e;
	int ret = cli_client_new(cli, &client);
	if (ret)
		return ret;
	corral_sandbox *sb = NULL;
	if (corral_sandbox_open(client, argv[optind], &sb, &e) < 0) {
		ret = cli_report(NULL, &e);
		goto out;
	}
	for (;;) {
		char *data = NULL;
		size_t len = 0;
		uint64_t next = 0;
		if (corral_exec_logs(sb, argv[optind + 1], cursor, &data, &len, &next, &e) < 0) {
			ret = cli_report(NULL, &e);
			break;
		}
		fwrite(data, 1, len, stdout);
		free(data);
		cursor = next;
		if (len == 0)
			break;
	}
	if (show_cursor && ret == EXIT_OK)
		fprintf(stderr, "cursor: %llu\n", cursor);
out:
	corral_sandbox_free(sb);
	corral_client_free(client);
	return ret;
}
