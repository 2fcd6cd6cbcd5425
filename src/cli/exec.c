/*
 * corral exec: run a command in a sandbox through libcorral (corral_exec: the execution id is
 * chosen here, so a stream cut in the middle is resumed without running the command twice),
 * writing its stdout and stderr lines to ours as they arrive ("\n" alone stands for an empty
 * line). Exit status: the command's own; see exec_help for corral's.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char exec_help[] =
	"Usage: corral exec [OPTIONS] ID -- CMD [ARGS...]\n"
	"\n"
	"Runs CMD in sandbox ID and streams its stdout and stderr to corral's stdout and stderr as\n"
	"they arrive. CMD and ARGS are passed as words (quoted for the sandbox's shell), so use\n"
	"sh -c '...' for pipes and redirections. corral exits with the command's exit status.\n"
	"\n"
	"Options:\n"
	"  --cwd DIR             working directory of the command\n"
	"  -e, --env K=V         environment variable for the command (repeatable)\n"
	"  --timeout SECONDS     kill the command after SECONDS\n"
	"  --exclusive           run it alone: first stop and kill every other process of the\n"
	"                        sandbox but its entrypoint, so nothing the workload left running\n"
	"                        can write into its output (for grading commands)\n"
	"\n" CLI_COMMON_HELP
	"\n"
	"Examples:\n"
	"  corral exec $ID -- uname -a\n"
	"  corral exec $ID --cwd /tmp -e A=1 -- sh -c 'echo $A > f; exit 7'; echo $?   # prints 7\n"
	"  corral exec --exclusive $ID -- python -m pytest tests/   # a grader nothing can tamper with\n"
	"\n"
	"Exit status: the command's own exit status (0-255; 128+N when a signal N killed it, so\n"
	"137 after --timeout); 125 corral failed before the command ran (usage error, unknown\n"
	"sandbox, server unreachable: the reason is on stderr); 255 the command's result never\n"
	"arrived (the stream ended, or stayed silent for 30 s although execd pings every 3 s, and\n"
	"could not be resumed: corral resumes a cut stream under the same execution id, which never\n"
	"runs the command twice); 130 interrupted (Ctrl-C also stops the remote command); 141\n"
	"corral's stdout was closed (| head), which also stops the remote command.\n";

struct output {
	corral_cancel *cancel;
	bool stdout_closed; /* EPIPE on our stdout */
};

static void write_line(FILE *f, const char *text, size_t len)
{
	/* execd sends one event per line without its newline; "\n" alone is an empty line. */
	if (!(len == 1 && text[0] == '\n'))
		fwrite(text, 1, len, f);
	fputc('\n', f);
}

static void on_stdout(void *ud, const char *text, size_t len)
{
	struct output *o = ud;
	if (o->stdout_closed)
		return;
	write_line(stdout, text, len);
	if (fflush(stdout) == EOF && errno == EPIPE) {
		/* Our reader went away (| head): stop, and stop the command, like a shell pipeline. */
		o->stdout_closed = true;
		corral_cancel_trigger(o->cancel);
	}
}

static void on_stderr(void *ud, const char *text, size_t len)
{
	write_line(stderr, text, len);
	fflush(stderr);
}

int exec_in_sandbox(corral_sandbox *sb, const struct exec_opts *o, int argc, char *const *argv)
{
	_cleanup_free_ char *command = cli_shell_join(argc, argv);
	_cleanup_(corral_strv_freep) char **env = o->envs ? cli_kv_strv(o->envs) : calloc(1, sizeof(char *));
	corral_cancel *cancel = NULL;
	if (!command || !env || corral_cancel_new(&cancel) < 0)
		return EXIT_EXEC_FAILED;
	struct output out = {.cancel = cancel};
	corral_exec_opts eo;
	corral_exec_opts_init(&eo);
	eo.cwd = o->cwd;
	eo.env = (const char *const *)env;
	eo.timeout_s = (double)o->timeout_ms / 1000.0;
	eo.on_stdout = on_stdout;
	eo.on_stderr = on_stderr;
	eo.userdata = &out;
	eo.cancel = cancel;
	eo.discard_output = true;
	eo.exclusive = o->exclusive;

	corral_exec_result res;
	corral_error e;
	cli_interrupt_cancel(cancel); /* Ctrl-C stops the command in the sandbox */
	int r = corral_exec(sb, command, &eo, &res, &e);
	cli_interrupt_cancel(NULL);
	fflush(stdout);
	fflush(stderr);

	int ret;
	if (r == 0 && res.exit_code >= 0) {
		ret = res.exit_code & 0xff;
	} else if (r == 0) {
		/* An error event without an exit status (not the command's own failure). */
		fprintf(stderr, "corral: %s\n", res.error_message);
		ret = EXIT_NO_RESULT;
	} else if (e.code == CORRAL_E_CANCELLED && out.stdout_closed) {
		if (!res.stopped)
			fprintf(stderr, "corral: %s\n", e.message);
		ret = 128 + SIGPIPE;
	} else if (e.code == CORRAL_E_CANCELLED) {
		if (res.stopped && res.submits)
			fprintf(stderr, "corral: interrupted; stopped command %s\n", res.id);
		else if (res.stopped)
			fprintf(stderr, "corral: interrupted\n");
		else
			fprintf(stderr, "corral: interrupted: %s\n", e.message);
		ret = EXIT_INTERRUPTED;
	} else if (e.code == CORRAL_E_COMMAND_TIMEOUT && res.exit_code >= 0) {
		ret = res.exit_code & 0xff; /* killed at its --timeout: 137 */
	} else if (res.started) {
		fprintf(stderr, "corral: the command's result never arrived: %s (request id %s)\n",
			e.message, *e.request_id ? e.request_id : "none");
		ret = EXIT_NO_RESULT;
	} else {
		_cleanup_free_ char *what = NULL;
		if (asprintf(&what, "exec in sandbox %s", corral_sandbox_id(sb)) < 0)
			what = NULL;
		cli_report(what, &e);
		ret = EXIT_EXEC_FAILED;
	}
	corral_exec_result_clear(&res);
	corral_cancel_free(cancel);
	return ret;
}

int exec_parse_timeout(const char *cmd, const char *arg, long long *ret_ms)
{
	unsigned long long secs;
	if (cli_parse_uint(arg, 100ULL * 365 * 86400, &secs) < 0 || secs == 0)
		return cli_usage_error(cmd, "--timeout '%s': expected a positive number of seconds",
				       arg);
	*ret_ms = (long long)secs * 1000;
	return 0;
}

int cmd_exec(struct cli *cli, int argc, char **argv)
{
	static const struct option options[] = {
		CLI_COMMON_OPTIONS,
		{"cwd", required_argument, NULL, OPT_CWD},
		{"env", required_argument, NULL, 'e'},
		{"timeout", required_argument, NULL, OPT_TIMEOUT},
		{"exclusive", no_argument, NULL, OPT_EXCLUSIVE},
		{0},
	};
	_cleanup_(json_decrefp) json_t *envs = json_object();
	struct exec_opts o = {.envs = envs};
	int c;
	while ((c = getopt_long(argc, argv, "he:", options, NULL)) != -1) {
		if (cli_common_option(cli, c, optarg))
			continue;
		switch (c) {
		case 'h':
			fputs(exec_help, stdout);
			return EXIT_OK;
		case OPT_CWD:
			o.cwd = optarg;
			break;
		case 'e':
			if (cli_kv_add(envs, "--env", optarg) < 0)
				return EXIT_EXEC_FAILED;
			break;
		case OPT_TIMEOUT:
			if (exec_parse_timeout("exec", optarg, &o.timeout_ms))
				return EXIT_EXEC_FAILED;
			break;
		case OPT_EXCLUSIVE:
			o.exclusive = true;
			break;
		default:
			cli_try_help("exec");
			return EXIT_EXEC_FAILED;
		}
	}
	if (optind >= argc) {
		cli_usage_error("exec", "missing sandbox ID and command");
		return EXIT_EXEC_FAILED;
	}
	const char *id = argv[optind++];
	if (optind >= argc) {
		cli_usage_error("exec", "missing the command to run (after '--')");
		return EXIT_EXEC_FAILED;
	}
	corral_client *client;
	if (cli_client_new(cli, &client))
		return EXIT_EXEC_FAILED;
	corral_sandbox *sb;
	corral_error e;
	int ret;
	if (corral_sandbox_from_id(client, id, &sb, &e) < 0) {
		cli_report(NULL, &e);
		ret = EXIT_EXEC_FAILED;
	} else {
		ret = exec_in_sandbox(sb, &o, argc - optind, argv + optind);
		corral_sandbox_free(sb);
	}
	corral_client_free(client);
	return ret;
}
