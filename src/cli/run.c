/*
 * corral run: create a sandbox, run one command in it, delete it. The delete happens on every
 * path out, including a failed command, a lost connection and Ctrl-C.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char run_help[] =
	"Usage: corral run [CREATE OPTIONS] [--cwd DIR] [--timeout SECONDS] -- CMD [ARGS...]\n"
	"\n"
	"Creates a sandbox, runs CMD in it streaming its stdout and stderr, and deletes the sandbox,\n"
	"also when the command fails or corral is interrupted. corral exits with the command's exit\n"
	"status.\n"
	"\n"
	"Create options (see 'corral create --help'):\n"
	"  --image NAME, --cpu Q, --memory Q, -e/--env K=V, -l/--label K=V, --ttl SECONDS,\n"
	"  --entrypoint CMD... (up to the '--')\n"
	"  --ttl is a safety net: the server deletes the sandbox then even if corral cannot.\n"
	"  Each create attempt also carries the label corral/attempt=<random id>: should its answer\n"
	"  be lost (timeout, dropped connection), corral finds and deletes the sandbox by it before\n"
	"  trying again.\n"
	"\n"
	"Command options:\n"
	"  --cwd DIR             working directory of the command\n"
	"  --timeout SECONDS     kill the command after SECONDS\n"
	"\n" CLI_COMMON_HELP
	"\n"
	"Example:\n"
	"  corral run --memory 512Mi --ttl 600 -- sh -c 'cd /tmp && python3 -c \"print(6*7)\"'\n"
	"\n"
	"Exit status: the command's own exit status (0-255); 125 corral failed before the command\n"
	"ran (usage error, create refused, server unreachable: the reason is on stderr); 255 the\n"
	"command's result never arrived; 130 interrupted. A failed delete is reported on stderr and\n"
	"does not change the exit status.\n";

int cmd_run(struct cli *cli, int argc, char **argv)
{
	static const struct option options[] = {
		CLI_COMMON_OPTIONS,
		CREATE_OPTIONS,
		{"cwd", required_argument, NULL, OPT_CWD},
		{"timeout", required_argument, NULL, OPT_TIMEOUT},
		{0},
	};
	_cleanup_(create_opts_clear) struct create_opts co;
	create_opts_init(&co);
	struct exec_opts eo = {0};
	if (create_take_entrypoint("run", &argc, argv, &co))
		return EXIT_EXEC_FAILED;
	int c;
	while ((c = getopt_long(argc, argv, "he:l:", options, NULL)) != -1) {
		if (cli_common_option(cli, c, optarg))
			continue;
		int r = create_option("run", &co, c, optarg);
		if (r < 0)
			return EXIT_EXEC_FAILED;
		if (r > 0)
			continue;
		switch (c) {
		case 'h':
			fputs(run_help, stdout);
			return EXIT_OK;
		case OPT_CWD:
			eo.cwd = optarg;
			break;
		case OPT_TIMEOUT:
			if (exec_parse_timeout("run", optarg, &eo.timeout_ms))
				return EXIT_EXEC_FAILED;
			break;
		default:
			cli_try_help("run");
			return EXIT_EXEC_FAILED;
		}
	}
	if (optind >= argc) {
		cli_usage_error("run", "missing the command to run (after '--')");
		return EXIT_EXEC_FAILED;
	}

	/*
	 * Ctrl-C during the create must not leak the sandbox the server is making: let the create
	 * finish, then delete what it made. And if the create's answer is lost (timeout, dropped
	 * connection), the server may still have made it: the attempt label finds it (libcorral
	 * deletes it before the next attempt or before giving up).
	 */
	corral_client *client;
	if (cli_client_new_run(cli, &client))
		return EXIT_EXEC_FAILED;
	corral_sandbox *sb = NULL;
	int r = create_sandbox_interruptible(client, &co, &sb, NULL);
	if (r) {
		corral_client_free(client);
		return r == EXIT_INTERRUPTED ? r : EXIT_EXEC_FAILED;
	}

	int ret;
	if (cli_interrupted()) {
		fprintf(stderr, "corral: interrupted\n");
		ret = EXIT_INTERRUPTED;
	} else {
		ret = exec_in_sandbox(sb, &eo, argc - optind, argv + optind);
	}

	fflush(stdout);
	cli_interrupt_clear();
	const char *id = corral_sandbox_id(sb);
	if (rm_sandbox(client, id) != EXIT_OK)
		fprintf(stderr, "corral: warning: sandbox %s was not deleted; delete it with "
				"'corral rm %s'\n",
			id, id);
	corral_sandbox_free(sb);
	corral_client_free(client);
	return ret;
}
