/*
 * The corral command-line client: one file per subcommand (create.c, exec.c, ...), a dispatch
 * table in corral.c, and the HTTP plumbing all of them share in api.c.
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

#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>

#include "shared/id.h"
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
#define CLI_EXECD_PORT 44772
#define CLI_CONNECT_TIMEOUT_S 10L
#define CLI_REQUEST_TIMEOUT_S 60L  /* GET, DELETE */
#define CLI_CREATE_TIMEOUT_S 180L  /* create waits for admission and the first ping of execd */
#define CLI_MAX_BODY (64u << 20)   /* largest non-streaming response kept in memory */

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
int cmd_reap(struct cli *cli, int argc, char **argv); /* on libcorral */
int cmd_logs(struct cli *cli, int argc, char **argv); /* on libcorral */

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

/* ---- HTTP (api.c) ---- */

struct api_reply {
	long status;       /* HTTP status; 0 when no response arrived */
	char *body;        /* NUL-terminated, may be empty */
	size_t len;
	json_t *json;      /* body parsed as JSON, or NULL */
	char request_id[HEXID_LEN];
	char transport_error[256]; /* set when status == 0 */
	bool connected;            /* the TCP connection was made (the failure came later) */
};

/*
 * One non-streaming request: METHOD {server}{path} with an optional JSON body, a fresh
 * X-Request-ID, the API key, a connect timeout and an overall timeout (seconds).
 * Returns 0 when the server answered (any status: check r->status), -EIO when it could not be
 * reached or timed out (r->transport_error says why), -EINTR when interrupted.
 */
int api_request(const struct cli *cli, const char *method, const char *path, json_t *body,
		long timeout_s, struct api_reply *r);
void api_reply_clear(struct api_reply *r);
static inline bool api_ok(const struct api_reply *r)
{
	return r->status >= 200 && r->status < 300;
}
/*
 * Prints why a request failed: "corral: CODE: message (request id ...)" for an error answer,
 * "corral: cannot reach SERVER: why (request id ...)" for a transport failure. what, when not NULL,
 * names the object ("sandbox 1234...") and is printed before the code. Returns the exit code to use
 * (EXIT_API, EXIT_CONNECT or EXIT_INTERRUPTED).
 */
int api_report(const struct cli *cli, const char *what, const struct api_reply *r);

/* Percent-encodes s for a URL path segment or query value; caller frees. */
char *api_escape(const char *s);

/* The curl handle setup every request shares (also used by the streaming exec). */
struct curl_slist;
void *api_curl_new(const struct cli *cli, const char *method, const char *url,
		   const char *request_id, struct curl_slist **headers, bool json_body);

/* ---- signals (api.c) ---- */

/* SIGINT/SIGTERM/SIGHUP set a flag (no SA_RESTART) that aborts the transfer in progress. */
void cli_signals_install(void);
/* The signal that arrived, or 0. */
int cli_interrupted(void);
/* Forget an interrupt (after handling it), so cleanup requests can run. */
void cli_interrupt_clear(void);
/* While set, an interrupt does not abort transfers (cleanup requests must finish). */
void cli_interrupt_hold(bool hold);

/* ---- helpers (api.c) ---- */

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
};
/* Handles one create option; returns 1 if handled, 0 if not c's, or -EXIT_USAGE on a bad value. */
int create_option(const char *cmd, struct create_opts *o, int c, const char *arg);
/* POSTs the sandbox; fills ret_id (caller frees) and, when ret_response, the whole answer. */
int create_sandbox(const struct cli *cli, const struct create_opts *o, char **ret_id,
		   json_t **ret_response);

struct exec_opts {
	const char *cwd;
	json_t *envs;         /* object */
	long long timeout_ms; /* 0 = none */
};
/*
 * Runs CMD in the sandbox, streaming its stdout and stderr to ours. Returns the command's exit
 * code (0-255), or EXIT_EXEC_FAILED / EXIT_NO_RESULT / EXIT_INTERRUPTED.
 */
int exec_in_sandbox(const struct cli *cli, const char *id, const struct exec_opts *o, int argc,
		    char *const *argv);
/* Parses --timeout SECONDS into milliseconds; prints a usage error and returns EXIT_USAGE if bad. */
int exec_parse_timeout(const char *cmd, const char *arg, long long *ret_ms);
/* Deletes a sandbox; 404 counts as success. Prints failures; returns 0 or an exit code. */
int rm_sandbox(const struct cli *cli, const char *id, bool quiet);
