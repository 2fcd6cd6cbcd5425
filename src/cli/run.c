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
	"  The sandbox also gets the label corral-run=<random id>: should the create's answer be\n"
	"  lost (timeout), corral finds and deletes the sandbox by it.\n"
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

/* Every sandbox made by one corral run carries this label with a random value. */
#define RUN_LABEL "corral-run"

/* After a create whose answer was lost: delete whatever the server made for this run. */
static void delete_by_run_label(const struct cli *cli, const char *value)
{
	_cleanup_free_ char *inner = NULL, *filter = NULL, *path = NULL;
	if (!value || asprintf(&inner, RUN_LABEL "=%s", value) < 0 ||
	    !(filter = api_escape(inner)) ||
	    asprintf(&path, "/sandboxes?page=1&pageSize=200&metadata=%s", filter) < 0)
		return;
	struct api_reply r;
	if (api_request(cli, "GET", path, NULL, 15, &r) == 0 && api_ok(&r)) {
		size_t i;
		json_t *it;
		json_array_foreach(json_object_get(r.json, "items"), i, it) {
			const char *sid = json_string_value(json_object_get(it, "id"));
			if (sid && rm_sandbox(cli, sid, true) == EXIT_OK)
				fprintf(stderr, "corral: deleted sandbox %s, made by the lost create\n",
					sid);
		}
	} else {
		fprintf(stderr,
			"corral: warning: a sandbox may have been made with label " RUN_LABEL
			"=%s; check with 'corral ps --label " RUN_LABEL "=%s'\n",
			value, value);
	}
	api_reply_clear(&r);
}

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
	 * connection), the server may still have made it: the run label finds it.
	 */
	char run_id[HEXID_LEN];
	if (id_hex32(run_id) == 0 && !json_object_get(co.labels, RUN_LABEL))
		json_object_set_new(co.labels, RUN_LABEL, json_string(run_id));
	_cleanup_free_ char *id = NULL;
	cli_interrupt_hold(true);
	int r = create_sandbox(cli, &co, &id, NULL);
	if (r == EXIT_CONNECT)
		delete_by_run_label(cli, json_string_value(json_object_get(co.labels, RUN_LABEL)));
	cli_interrupt_hold(false);
	if (r)
		return r == EXIT_INTERRUPTED ? r : EXIT_EXEC_FAILED;

	int ret;
	if (cli_interrupted()) {
		fprintf(stderr, "corral: interrupted\n");
		ret = EXIT_INTERRUPTED;
	} else {
		ret = exec_in_sandbox(cli, id, &eo, argc - optind, argv + optind);
	}

	fflush(stdout);
	cli_interrupt_clear();
	cli_interrupt_hold(true);
	if (rm_sandbox(cli, id, true) != EXIT_OK)
		fprintf(stderr, "corral: warning: sandbox %s was not deleted; delete it with "
				"'corral rm %s'\n",
			id, id);
	cli_interrupt_hold(false);
	return ret;
}
