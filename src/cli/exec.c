/*
 * corral exec: POST /sandboxes/{id}/proxy/44772/command and stream the answer.
 *
 * The answer is execd's event stream: JSON objects separated by blank lines, or SSE-style
 * "data: {json}" lines (both are accepted, as the OpenSandbox SDKs do; ":" comments and
 * event:/id:/retry: lines are ignored). stdout and stderr events are written to our stdout and
 * stderr as they arrive, one line per event ("\n" alone stands for an empty line). The command's
 * exit code is 0 on execution_complete, int(error.evalue) on an error event, and 255 when the
 * stream ends without either.
 */
#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
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
	"\n" CLI_COMMON_HELP
	"\n"
	"Examples:\n"
	"  corral exec $ID -- uname -a\n"
	"  corral exec $ID --cwd /tmp -e A=1 -- sh -c 'echo $A > f; exit 7'; echo $?   # prints 7\n"
	"\n"
	"Exit status: the command's own exit status (0-255; 128+N when a signal N killed it, so\n"
	"137 after --timeout); 125 corral failed before the command ran (usage error, unknown\n"
	"sandbox, server unreachable: the reason is on stderr); 255 the stream ended without the\n"
	"command's result, or stayed silent for 90 s (execd pings every 3 s, so the path is dead);\n"
	"130 interrupted (Ctrl-C also stops the remote command); 141 corral's stdout was closed\n"
	"(| head), which also stops the remote command.\n";

#define STREAM_MAX_EVENT (16u << 20) /* one event larger than this is a protocol error */
#define EXEC_SILENCE_S 90L            /* a running command's stream is never silent this long */

struct stream {
	CURL *curl;
	long status;          /* HTTP status, read at the first byte */
	char *pending;        /* bytes not yet split into lines */
	size_t plen, pcap;
	char *block;          /* the event being assembled (lines without the framing) */
	size_t blen, bcap;
	char *errbody;        /* body of a non-2xx answer */
	size_t elen;
	int exit_code;        /* -1 until execution_complete or error arrives */
	bool done;
	bool broken;          /* protocol error: reason already printed */
	bool stdout_closed;   /* EPIPE on our stdout */
	unsigned events;
	char exec_id[128];
};

static int grow(char **buf, size_t *cap, size_t need)
{
	if (need <= *cap)
		return 0;
	if (need > STREAM_MAX_EVENT + 1)
		return -E2BIG;
	size_t n = MAX(*cap * 2, MAX(need, (size_t)4096));
	char *nb = realloc(*buf, n);
	if (!nb)
		return -ENOMEM;
	*buf = nb;
	*cap = n;
	return 0;
}

static void write_text(FILE *f, const char *text)
{
	/* execd sends one event per line without its newline; "\n" alone is an empty line. */
	if (strcmp(text, "\n") == 0) {
		fputc('\n', f);
		return;
	}
	fputs(text, f);
	fputc('\n', f);
}

static void handle_event(struct stream *s, json_t *ev)
{
	const char *type = json_string_value(json_object_get(ev, "type"));
	const char *text = json_string_value(json_object_get(ev, "text"));
	s->events++;
	if (!type || s->done)
		return;
	if (strcmp(type, "stdout") == 0) {
		if (text)
			write_text(stdout, text);
	} else if (strcmp(type, "stderr") == 0) {
		if (text)
			write_text(stderr, text);
	} else if (strcmp(type, "init") == 0) {
		if (text)
			snprintf(s->exec_id, sizeof(s->exec_id), "%s", text);
	} else if (strcmp(type, "execution_complete") == 0) {
		s->exit_code = 0;
		s->done = true;
	} else if (strcmp(type, "error") == 0) {
		json_t *err = json_object_get(ev, "error");
		const char *ename = json_string_value(json_object_get(err, "ename"));
		const char *evalue = json_string_value(json_object_get(err, "evalue"));
		char *end = NULL;
		long v = evalue ? strtol(evalue, &end, 10) : 0;
		bool numeric = evalue && *evalue && end && *end == '\0';
		/* A failing command is ename CommandExecError with its exit code; say nothing more. */
		if (!ename || strcmp(ename, "CommandExecError") != 0 || !numeric) {
			fflush(stdout);
			fprintf(stderr, "corral: %s: %s\n", ename ? ename : "error",
				evalue ? evalue : "(no detail)");
		}
		s->exit_code = numeric ? (int)(v & 0xff) : EXIT_NO_RESULT;
		s->done = true;
	}
	/* ping, status, result, execution_count...: nothing to show */
}

/* Tries to read the assembled block as one JSON event. */
static bool try_block(struct stream *s)
{
	if (s->blen == 0)
		return false;
	json_t *ev = json_loadb(s->block, s->blen, 0, NULL);
	if (!ev)
		return false;
	handle_event(s, ev);
	json_decref(ev);
	s->blen = 0;
	return true;
}

static int append_block(struct stream *s, const char *p, size_t n)
{
	bool sep = s->blen > 0;
	if (grow(&s->block, &s->bcap, s->blen + n + 2) < 0)
		return -E2BIG;
	if (sep)
		s->block[s->blen++] = '\n';
	memcpy(s->block + s->blen, p, n);
	s->blen += n;
	return 0;
}

static bool starts_with(const char *p, size_t n, const char *prefix)
{
	size_t k = strlen(prefix);
	return n >= k && memcmp(p, prefix, k) == 0;
}

static int handle_line(struct stream *s, const char *line, size_t n)
{
	if (n > 0 && line[n - 1] == '\r')
		n--;
	if (n == 0) {
		/* End of an event. A block that is still not JSON is a broken event. */
		if (s->blen > 0 && !try_block(s)) {
			fprintf(stderr, "corral: skipping a malformed event from the server: %.*s\n",
				(int)MIN(s->blen, (size_t)200), s->block);
			s->blen = 0;
		}
		return 0;
	}
	if (line[0] == ':' || starts_with(line, n, "event:") || starts_with(line, n, "id:") ||
	    starts_with(line, n, "retry:"))
		return 0;
	if (starts_with(line, n, "data:")) {
		line += 5;
		n -= 5;
		if (n > 0 && line[0] == ' ') {
			line++;
			n--;
		}
	}
	if (append_block(s, line, n) < 0)
		return -E2BIG;
	/* Complete events are handled at once, without waiting for the blank line. */
	try_block(s);
	return 0;
}

static size_t on_data(char *data, size_t size, size_t nmemb, void *p)
{
	struct stream *s = p;
	size_t len = size * nmemb;
	if (s->status == 0)
		curl_easy_getinfo(s->curl, CURLINFO_RESPONSE_CODE, &s->status);
	if (s->status < 200 || s->status >= 300) {
		/* An error answer: keep (the start of) it for the message. */
		size_t keep = MIN(len, (size_t)65536 - s->elen);
		char *nb = realloc(s->errbody, s->elen + keep + 1);
		if (!nb)
			return 0;
		s->errbody = nb;
		memcpy(s->errbody + s->elen, data, keep);
		s->elen += keep;
		s->errbody[s->elen] = '\0';
		return len;
	}
	if (grow(&s->pending, &s->pcap, s->plen + len + 1) < 0) {
		fprintf(stderr, "corral: an event from the server exceeds %u MiB\n",
			STREAM_MAX_EVENT >> 20);
		s->broken = true;
		return 0;
	}
	memcpy(s->pending + s->plen, data, len);
	s->plen += len;
	size_t start = 0;
	for (size_t i = 0; i < s->plen && !s->done; i++) {
		if (s->pending[i] != '\n')
			continue;
		if (handle_line(s, s->pending + start, i - start) < 0) {
			fprintf(stderr, "corral: an event from the server exceeds %u MiB\n",
				STREAM_MAX_EVENT >> 20);
			s->broken = true;
			return 0;
		}
		start = i + 1;
	}
	memmove(s->pending, s->pending + start, s->plen - start);
	s->plen -= start;
	if (fflush(stdout) == EOF && errno == EPIPE) {
		/* Our reader went away (| head): stop, and stop the command, like a shell pipeline. */
		s->stdout_closed = true;
		return 0;
	}
	fflush(stderr);
	/* The result is in: stop reading now instead of waiting for the server to close. */
	return s->done ? 0 : len;
}

/* After Ctrl-C: ask execd to stop the command (SIGTERM to its group, then SIGKILL). */
static void interrupt_remote(const struct cli *cli, const char *id, const char *exec_id)
{
	_cleanup_free_ char *eid = api_escape(id), *xid = api_escape(exec_id), *path = NULL;
	if (!eid || !xid ||
	    asprintf(&path, "/sandboxes/%s/proxy/%d/command?id=%s", eid, CLI_EXECD_PORT, xid) < 0)
		return;
	struct api_reply r;
	cli_interrupt_hold(true);
	if (api_request(cli, "DELETE", path, NULL, 15, &r) < 0 || !api_ok(&r))
		api_report(cli, "stopping the command", &r);
	cli_interrupt_hold(false);
	api_reply_clear(&r);
}

int exec_in_sandbox(const struct cli *cli, const char *id, const struct exec_opts *o, int argc,
		    char *const *argv)
{
	_cleanup_free_ char *command = cli_shell_join(argc, argv);
	_cleanup_free_ char *eid = api_escape(id);
	_cleanup_free_ char *url = NULL;
	if (!command || !eid ||
	    asprintf(&url, "%s/sandboxes/%s/proxy/%d/command", cli->server, eid, CLI_EXECD_PORT) < 0)
		return EXIT_EXEC_FAILED;
	json_t *body = json_pack("{s:s}", "command", command);
	if (o->cwd)
		json_object_set_new(body, "cwd", json_string(o->cwd));
	if (o->envs && json_object_size(o->envs))
		json_object_set(body, "envs", o->envs);
	if (o->timeout_ms > 0)
		json_object_set_new(body, "timeout", json_integer(o->timeout_ms));
	_cleanup_free_ char *payload = json_dumps(body, JSON_COMPACT);
	json_decref(body);

	char request_id[HEXID_LEN];
	if (id_hex32(request_id) < 0)
		snprintf(request_id, sizeof(request_id), "%032d", 0);
	struct curl_slist *headers = NULL;
	CURL *c = api_curl_new(cli, "POST", url, request_id, &headers, true);
	if (!c || !payload)
		return EXIT_EXEC_FAILED;
	struct stream s = {.curl = c, .exit_code = -1};
	char errbuf[CURL_ERROR_SIZE] = "";
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, payload);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
	/*
	 * No overall limit (commands may run for hours), unless the command itself has one. But
	 * execd sends a ping event every 3 s while a command runs, so a stream that stays silent
	 * for much longer than that is a dead path, not a quiet command: give up instead of hanging.
	 */
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, EXEC_SILENCE_S);
	if (o->timeout_ms > 0)
		curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)MIN(o->timeout_ms + 60000, (long long)LONG_MAX));

	CURLcode cc = curl_easy_perform(c);
	if (s.status == 0)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &s.status);
	/* A last event without the closing blank line still counts. */
	if (!s.done && cc == CURLE_OK && s.plen > 0)
		handle_line(&s, s.pending, s.plen);
	if (!s.done && s.blen > 0)
		try_block(&s);
	fflush(stdout);
	fflush(stderr);

	int ret;
	if (s.done) {
		ret = s.exit_code; /* CURLE_WRITE_ERROR here is us hanging up after the result */
	} else if (s.stdout_closed) {
		if (*s.exec_id)
			interrupt_remote(cli, id, s.exec_id);
		ret = 128 + SIGPIPE;
	} else if (cc == CURLE_ABORTED_BY_CALLBACK || cli_interrupted()) {
		if (*s.exec_id)
			interrupt_remote(cli, id, s.exec_id);
		fprintf(stderr, "corral: interrupted%s%s\n", *s.exec_id ? "; stopped command " : "",
			s.exec_id);
		ret = EXIT_INTERRUPTED;
	} else if (s.status != 0 && (s.status < 200 || s.status >= 300)) {
		struct api_reply r = {.status = s.status, .body = s.errbody, .len = s.elen};
		snprintf(r.request_id, sizeof(r.request_id), "%s", request_id);
		r.json = s.errbody ? json_loadb(s.errbody, s.elen, 0, NULL) : NULL;
		_cleanup_free_ char *what = NULL;
		if (asprintf(&what, "exec in sandbox %s", id) < 0)
			what = NULL;
		api_report(cli, what, &r);
		json_decref(r.json);
		ret = EXIT_EXEC_FAILED;
	} else if (s.broken) {
		ret = EXIT_NO_RESULT;
	} else if (cc == CURLE_OPERATION_TIMEDOUT && strstr(errbuf, "too slow")) {
		fprintf(stderr,
			"corral: nothing from %s for %ld s (not even the pings execd sends every 3 s); "
			"giving up on the command's result (request id %s)\n",
			cli->server, EXEC_SILENCE_S, request_id);
		ret = EXIT_NO_RESULT;
	} else if (cc != CURLE_OK) {
		bool started = s.events > 0;
		fprintf(stderr, "corral: %s %s: %s (request id %s)\n",
			started ? "lost the connection to" : "cannot reach", cli->server,
			*errbuf ? errbuf : curl_easy_strerror(cc), request_id);
		ret = started ? EXIT_NO_RESULT : EXIT_EXEC_FAILED;
	} else {
		fprintf(stderr,
			"corral: the command's result never arrived: the stream ended without "
			"execution_complete or error (request id %s)\n",
			request_id);
		ret = EXIT_NO_RESULT;
	}
	free(s.pending);
	free(s.block);
	free(s.errbody);
	curl_easy_cleanup(c);
	curl_slist_free_all(headers);
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
	return exec_in_sandbox(cli, id, &o, argc - optind, argv + optind);
}
