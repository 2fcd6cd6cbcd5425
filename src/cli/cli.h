/*
 * The corral command-line client: one file per subcommand (create.c, exec.c, ...), a dispatch
 * table in corral.c, and what all of them share in common.c. Every request goes through
 * libcorral (include/corral/corral.h).
 *
 * Exit codes are part of the interface (scripts rely on them):
 *   0    success
 *   1    usage error (unknown option, missing argument, malformed value)
 *   2    the server answered with an error (printed as "corral: CODE: message")
 *   3    the server could not be reached, or did not answer in time
 *   130  interrupted (Ctrl-C)
 * exec and run exit with the remote command's own exit code instead; failures of corral itself
 * before the command ran are 125 there (as docker run does), and 255 means the command's result
 * never arrived (the stream ended without a completion or an error event).
 */
#pragma once

#include <corral/corral.h>
#include <getopt.h>
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "shared/macro.h"

enum {
	EXIT_OK = 0,
	EXIT_USAGE = 1,
	EXIT_API = 2,
	EXIT_CONNECT = 3,
	EXIT_EXEC_FAILED = 125, /* exec/run: corral failed before the command ran */
	EXIT_NO_RESULT = 255,   /* exec/run: the stream ended without the command's result */
	EXIT_INTERRUPTED = 130,
};

#define CLI_DEFAULT_SERVER "http://127.0.0.1:8080"
#define CLI_CREATE_TIMEOUT_S 180L  /* create waits for admission and the first ping of execd */

/* Options every command accepts (before or after the command name). */
struct cli {
	const char *server;  /* base URL without a trailing slash */
	const char *api_key; /* may be NULL */
};

struct command {
	const char *name;
	int (*run)(struct cli *cli, int argc, char **argv);
	const char *summary;
};

int cmd_create(struct cli *cli, int argc, char **argv);
int cmd_exec(struct cli *cli, int argc, char **argv);
int cmd_run(struct cli *cli, int argc, char **argv);
int cmd_ps(struct cli *cli, int argc, char **argv);
int cmd_rm(struct cli *cli, int argc, char **argv);
int cmd_inspect(struct cli *cli, int argc, char **argv);
int cmd_stats(struct cli *cli, int argc, char **argv);
int cmd_reap(struct cli *cli, int argc, char **argv);
int cmd_logs(struct cli *cli, int argc, char **argv);
int cmd_image(struct cli *cli, int argc, char **argv);
int cmd_volume(struct cli *cli, int argc, char **argv);

/* ---- options (corral.c) ---- */

/* Long options shared by every command; a command's getopt table starts with CLI_COMMON_OPTIONS. */
enum { OPT_SERVER = 0x100, OPT_API_KEY, OPT_FIRST_COMMAND_OPTION };
#define CLI_COMMON_OPTIONS                                                                         \
	{"server", required_argument, NULL, OPT_SERVER},                                           \
		{"api-key", required_argument, NULL, OPT_API_KEY},                                 \
		{"help", no_argument, NULL, 'h'}
#define CLI_COMMON_HELP                                                                            \
	"Global options (also accepted before the command):\n"                                     \
	"  --server URL        corrald address (env CORRAL_SERVER, default " CLI_DEFAULT_SERVER    \
	")\n"                                                                                      \
	"  --api-key KEY       sent as OPEN-SANDBOX-API-KEY (env CORRAL_API_KEY)\n"                \
	"  -h, --help          this help\n"

/* Handles a common option; returns 1 if c was one, 0 if not. */
int cli_common_option(struct cli *cli, int c, const char *arg);
/* Prints "corral: MSG" and "Try 'corral CMD --help'." on stderr; returns EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) _printf_(2, 3);
/* After getopt reported a bad option itself: prints the "Try" line; returns EXIT_USAGE. */
int cli_try_help(const char *cmd);

/* ---- the client and errors (common.c) ---- */

/* A libcorral client for the CLI: no attribution labels, no CPU variables, no probe command,
 * modest retries, libcorral's notices on stderr. Prints why and returns EXIT_USAGE on failure. */
int cli_client_new(const struct cli *cli, corral_client **ret);
/* The same for corral run, whose sandbox is its own: each create attempt carries the label
 * corral/attempt=<random id>, so the sandbox of an attempt whose answer was lost is found and
 * deleted, and the attempt retried. */
int cli_client_new_run(const struct cli *cli, corral_client **ret);
/*
 * Prints why an operation failed: "corral: [WHAT: ]CODE: message (HTTP n, request id R)" for
 * an error answer, "corral: [WHAT: ]<what failed> (request id R)" otherwise. Returns the exit
 * code (cli_exit_code).
 */
int cli_report(const char *what, const corral_error *e);
/* A listing's answer (r from a corral_*_list_json call, its text in out): the JSON itself with
 * --json (or when it does not parse), else table(); a failure reported as cli_report(what).
 * Returns the exit status. */
int cli_show_listing(int r, const char *out, const corral_error *e, const char *what,
		     bool json_out, void (*table)(json_t *));
/* The same line, without its newline, into buf. */
void cli_format_error(char *buf, size_t len, const char *what, const corral_error *e);

/* A libcorral call answering one sandbox's JSON text (corral_sandbox_get_json, ..._stats_json). */
typedef int (*cli_sandbox_json_fn)(corral_client *c, const char *id, char **ret_json,
				   corral_error *err);
/*
 * The shared tail of `corral inspect` and `corral stats`: argv[optind..] must be exactly one
 * sandbox ID; fetches it with fetch and parses the answer. Returns EXIT_OK with *ret set (the
 * caller json_decrefs it), or prints why and returns the exit code.
 */
int cli_sandbox_json(const struct cli *cli, const char *cmd, int argc, char **argv,
		     cli_sandbox_json_fn fetch, json_t **ret);
/* EXIT_CONNECT for a server that could not be reached or did not answer in time,
 * EXIT_INTERRUPTED for a cancelled operation, else EXIT_API. */
int cli_exit_code(const corral_error *e);

/* ---- signals (common.c) ---- */

enum cli_interrupt_mode {
	CLI_INT_EXIT, /* default: print "corral: interrupted" and exit 130 at once */
	CLI_INT_FLAG, /* only note it (cli_interrupted()); the command stops where it can */
	CLI_INT_HOLD, /* note it and say a request is being finished (nothing may be left behind) */
};
/* SIGINT/SIGTERM/SIGHUP go to a thread of their own (before any other thread starts). */
void cli_signals_install(void);
/* The signal that arrived, or 0. */
int cli_interrupted(void);
/* Forget an interrupt (after handling it). */
void cli_interrupt_clear(void);
void cli_interrupt_mode(enum cli_interrupt_mode mode);
/* While set (not NULL), an interrupt triggers t instead (at once if one already arrived). */
void cli_interrupt_cancel(corral_cancel *t);

/* ---- progress on long operations (common.c) ---- */

/* "corral: WHAT 12/100" on stderr, redrawn in place, only when stderr is a terminal and there
 * is more than one item; lines printed through it keep the two streams from mixing. */
struct progress {
	pthread_mutex_t mu;
	const char *what;
	size_t done, total, failed;
	bool tty, shown;
	int64_t last_ms;
};
void progress_init(struct progress *p, const char *what, size_t total);
/* One item done; line (may be NULL) is printed on stdout. Thread-safe. */
void progress_step(struct progress *p, bool ok, const char *line);
/* A message on stderr (printf format, with its newline) around the progress line. */
void progress_message(struct progress *p, const char *fmt, ...) _printf_(2, 3);
void progress_end(struct progress *p);

/* ---- helpers (common.c) ---- */

/* Splits "K=V" at the first '='; K must be non-empty. Returns 0 or -EINVAL. */
int cli_parse_kv(const char *s, char **ret_key, char **ret_value);
/* Adds K=V to the object; a repeated key is a usage error naming the option. */
int cli_kv_add(json_t *obj, const char *opt, const char *s);
/* Parses a non-negative decimal integer with an upper bound; -EINVAL/-ERANGE otherwise. */
int cli_parse_uint(const char *s, unsigned long long max, unsigned long long *ret);
/* Joins argv into one shell command line, quoting each word as needed; caller frees. */
char *cli_shell_join(int argc, char *const *argv);

/* ---- sharing between create, exec and run ---- */

struct create_opts {
	const char *image;
	const char *cpu;
	const char *memory;
	json_t *env;      /* object */
	json_t *labels;   /* object */
	long long ttl;    /* seconds, -1 = no expiry */
	json_t *entrypoint; /* array */
	bool json_output;
};
void create_opts_init(struct create_opts *o);
void create_opts_clear(struct create_opts *o);
/*
 * Takes "--entrypoint WORD..." out of argv (everything after it, up to "--" or the end) before
 * getopt sees it. Returns 0, or EXIT_USAGE after printing why.
 */
int create_take_entrypoint(const char *cmd, int *argc, char **argv, struct create_opts *o);
/* getopt long options for the create flags (terminated by the caller's table). */
#define CREATE_OPTIONS                                                                             \
	{"image", required_argument, NULL, OPT_IMAGE}, {"cpu", required_argument, NULL, OPT_CPU},  \
		{"memory", required_argument, NULL, OPT_MEMORY},                                   \
		{"env", required_argument, NULL, 'e'}, {"label", required_argument, NULL, 'l'},    \
		{"ttl", required_argument, NULL, OPT_TTL},                                         \
		{"entrypoint", required_argument, NULL, OPT_ENTRYPOINT}
enum {
	OPT_IMAGE = OPT_FIRST_COMMAND_OPTION,
	OPT_CPU,
	OPT_MEMORY,
	OPT_TTL,
	OPT_ENTRYPOINT,
	OPT_CWD,
	OPT_TIMEOUT,
	OPT_EXCLUSIVE,
};
/* Handles one create option; returns 1 if handled, 0 if not c's, or -EXIT_USAGE on a bad value. */
int create_option(const char *cmd, struct create_opts *o, int c, const char *arg);
/*
 * Creates the sandbox (ready when it returns) through libcorral; on success *ret is the handle
 * and, when ret_json, the server's answer. Prints failures; returns 0 or an exit code.
 */
int create_sandbox(corral_client *client, const struct create_opts *o, corral_sandbox **ret,
		   json_t **ret_json);
/* create_sandbox where Ctrl-C ends the create without leaving a sandbox (EXIT_INTERRUPTED). */
int create_sandbox_interruptible(corral_client *client, const struct create_opts *o,
				 corral_sandbox **ret, json_t **ret_json);

struct exec_opts {
	const char *cwd;
	json_t *envs;         /* object */
	long long timeout_ms; /* 0 = none */
	bool exclusive;       /* --exclusive */
};
/*
 * Runs CMD in the sandbox, streaming its stdout and stderr to ours. Returns the command's exit
 * code (0-255), or EXIT_EXEC_FAILED / EXIT_NO_RESULT / EXIT_INTERRUPTED / 141 (stdout closed).
 */
int exec_in_sandbox(corral_sandbox *sb, const struct exec_opts *o, int argc, char *const *argv);
/* Parses --timeout SECONDS into milliseconds; prints a usage error and returns EXIT_USAGE if bad. */
int exec_parse_timeout(const char *cmd, const char *arg, long long *ret_ms);
/* Deletes a sandbox; one the server does not know counts as deleted. Prints failures; returns 0
 * or an exit code. */
int rm_sandbox(corral_client *client, const char *id);
static inline void corral_strv_freep(char ***v)
{
	corral_strv_free(*v);
}
/* A NULL-terminated "K=V" vector of a JSON object of strings (free with corral_strv_free). */
char **cli_kv_strv(json_t *obj);
