/* corral: the command-line client of corrald. main(), global options and the dispatch table. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "config.h"

static const struct command commands[] = {
	{"create", cmd_create, "create a sandbox and print its id"},
	{"exec", cmd_exec, "run a command in a sandbox, streaming its output"},
	{"run", cmd_run, "create a sandbox, run one command in it, delete it"},
	{"ps", cmd_ps, "list sandboxes"},
	{"rm", cmd_rm, "delete sandboxes"},
	{"inspect", cmd_inspect, "show one sandbox as JSON"},
	{"stats", cmd_stats, "show what a sandbox uses (memory, OOM kills, CPU, pids, disk)"},
	{"logs", cmd_logs, "print the output of a background execution"},
	{"reap", cmd_reap, "find (and with --reap delete) the sandboxes a run left behind"},
	{"image", cmd_image, "pull, list, inspect, import or remove registry images in corrald's store"},
	{"volume", cmd_volume, "list or remove named volumes"},
};

static void usage(FILE *f)
{
	fprintf(f, "Usage: corral [--server URL] [--api-key KEY] COMMAND [ARGS...]\n\n"
		   "Commands:\n");
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++)
		fprintf(f, "  %-9s %s\n", commands[i].name, commands[i].summary);
	fprintf(f, "\n" CLI_COMMON_HELP
		   "  --version           print the version\n"
		   "\n"
		   "'corral COMMAND --help' explains each command.\n"
		   "\n"
		   "Example:\n"
		   "  corral run --cpu 1 --memory 512Mi -- sh -c 'uname -a; exit 3'; echo $?\n"
		   "\n"
		   "Exit status:\n"
		   "  0    success\n"
		   "  1    usage error\n"
		   "  2    the server answered with an error (\"corral: CODE: message\" on stderr)\n"
		   "  3    the server could not be reached or did not answer in time\n"
		   "  130  interrupted\n"
		   "  exec and run exit with the command's own status; 125 when corral failed before\n"
		   "  the command ran, 255 when the command's result never arrived.\n"
		   "Error messages carry the request id (X-Request-ID) to find the call in corrald's log.\n");
}

int cli_common_option(struct cli *cli, int c, const char *arg)
{
	switch (c) {
	case OPT_SERVER: {
		/* Kept without trailing slashes so paths can be appended. */
		static char buf[2048];
		if ((size_t)snprintf(buf, sizeof(buf), "%s", arg) >= sizeof(buf)) {
			fprintf(stderr, "corral: --server: URL too long\n");
			exit(EXIT_USAGE);
		}
		size_t n = strlen(buf);
		while (n > 0 && buf[n - 1] == '/')
			buf[--n] = '\0';
		cli->server = buf;
		return 1;
	}
	case OPT_API_KEY:
		cli->api_key = arg;
		return 1;
	default:
		return 0;
	}
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;
	fputs("corral: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'corral %s%s--help'.\n", cmd ? cmd : "", cmd ? " " : "");
	return EXIT_USAGE;
}

int cli_try_help(const char *cmd)
{
	fprintf(stderr, "Try 'corral %s --help'.\n", cmd);
	return EXIT_USAGE;
}

int main(int argc, char **argv)
{
	struct cli cli = {
		.server = CLI_DEFAULT_SERVER,
		.api_key = getenv("CORRAL_API_KEY"),
	};
	const char *env_server = getenv("CORRAL_SERVER");
	if (env_server && *env_server)
		cli_common_option(&cli, OPT_SERVER, env_server);

	static const struct option options[] = {
		CLI_COMMON_OPTIONS,
		{"version", no_argument, NULL, 'V'},
		{0},
	};
	int c;
	opterr = 0;
	/* '+': stop at the command name; the command parses the rest. */
	while ((c = getopt_long(argc, argv, "+h", options, NULL)) != -1) {
		if (cli_common_option(&cli, c, optarg))
			continue;
		switch (c) {
		case 'h':
			usage(stdout);
			return EXIT_OK;
		case 'V':
			printf("corral %s\n", CORRAL_VERSION);
			return EXIT_OK;
		default:
			return cli_usage_error(NULL, "unknown or incomplete option '%s'",
					       argv[optind - 1]);
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return EXIT_USAGE;
	}
	int cmd_argc = argc - optind;
	char **cmd_argv = argv + optind;
	char *help_argv[] = {NULL, (char *)"--help", NULL};
	if (strcmp(cmd_argv[0], "help") == 0) {
		if (cmd_argc < 2) {
			usage(stdout);
			return EXIT_OK;
		}
		/* "corral help CMD" is "corral CMD --help" */
		help_argv[0] = cmd_argv[1];
		cmd_argv = help_argv;
		cmd_argc = 2;
	}
	const char *name = cmd_argv[0];
	char prog[64];
	snprintf(prog, sizeof(prog), "corral %s", name); /* getopt's messages start with argv[0] */
	for (size_t i = 0; i < ARRAY_SIZE(commands); i++) {
		if (strcmp(commands[i].name, name) != 0)
			continue;
		cli_signals_install(); /* before libcorral starts its threads */
		/* The command sees argv from its own name on; optind = 0 restarts getopt. */
		optind = 0;
		opterr = 1;
		cmd_argv[0] = prog;
		int r = commands[i].run(&cli, cmd_argc, cmd_argv);
		fflush(stdout);
		return r;
	}
	return cli_usage_error(NULL, "'%s' is not a corral command", name);
}
