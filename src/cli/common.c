/*
 * What every subcommand shares: the libcorral client with the CLI's settings, error reporting
 * (exit codes, request ids), interrupt handling, progress on a terminal, and small argument
 * helpers.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "shared/timeutil.h"

/* ---- signals ---- */

/*
 * SIGINT, SIGTERM and SIGHUP are blocked in every thread (libcorral's threads inherit the mask)
 * and taken by one thread with sigwait(), which may then call anything: trigger a cancel token,
 * print, exit.
 */
static atomic_int interrupted_by;
static atomic_int interrupt_mode = CLI_INT_EXIT;
static pthread_mutex_t cancel_mu = PTHREAD_MUTEX_INITIALIZER;
static corral_cancel *armed;

static void *signal_thread(void *p)
{
	sigset_t *set = p;
	for (;;) {
		int sig;
		if (sigwait(set, &sig) != 0)
			continue;
		bool first = atomic_exchange(&interrupted_by, sig) == 0;
		pthread_mutex_lock(&cancel_mu);
		bool cancelled = armed != NULL;
		if (armed)
			corral_cancel_trigger(armed);
		pthread_mutex_unlock(&cancel_mu);
		enum cli_interrupt_mode mode = atomic_load(&interrupt_mode);
		if (cancelled && mode != CLI_INT_HOLD)
			continue;
		switch (mode) {
		case CLI_INT_HOLD:
			if (first)
				fputs("corral: finishing a request so nothing is left behind...\n", stderr);
			break;
		case CLI_INT_FLAG:
			break;
		default:
			fflush(stdout);
			fputs("corral: interrupted\n", stderr);
			_exit(EXIT_INTERRUPTED);
		}
	}
	return NULL;
}

void cli_signals_install(void)
{
	static sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	pthread_t t;
	if (pthread_create(&t, NULL, signal_thread, &set) == 0)
		pthread_detach(t);
	else
		pthread_sigmask(SIG_UNBLOCK, &set, NULL); /* at least Ctrl-C still ends corral */
}

int cli_interrupted(void)
{
	return atomic_load(&interrupted_by);
}

void cli_interrupt_clear(void)
{
	atomic_store(&interrupted_by, 0);
}

void cli_interrupt_mode(enum cli_interrupt_mode mode)
{
	atomic_store(&interrupt_mode, mode);
}

void cli_interrupt_cancel(corral_cancel *t)
{
	pthread_mutex_lock(&cancel_mu);
	armed = t;
	if (t && atomic_load(&interrupted_by))
		corral_cancel_trigger(t);
	pthread_mutex_unlock(&cancel_mu);
}

/* ---- the client ---- */

static void on_log(void *ud, int level, const char *msg)
{
	/* Errors, warnings and notices (a retried create, a lost create's sandbox deleted);
	 * not the debug chatter. */
	if (level <= 2)
		fprintf(stderr, "corral: %s\n", msg);
}

static int client_new(const struct cli *cli, bool label_attempts, corral_client **ret)
{
	corral_options o;
	corral_options_init(&o);
	o.server = cli->server;
	o.api_key = cli->api_key;
	/* A person at a terminal: the sandbox gets exactly what they asked for. */
	o.attribution = false;
	o.cpu_env = false;
	o.label_attempts = label_attempts;
	o.exec_id_probe = false;  /* one command per process: learn id support from it */
	o.create_timeout_s = CLI_CREATE_TIMEOUT_S;
	o.create_retries = 3;
	o.operation_retries = 3;
	o.reaper_threads = 1;
	o.drain_timeout_s = 10;
	o.log = on_log;
	corral_error e;
	if (corral_client_new(&o, ret, &e) < 0) {
		fprintf(stderr, "corral: %s\n", e.message);
		return EXIT_USAGE;
	}
	return 0;
}

int cli_client_new(const struct cli *cli, corral_client **ret)
{
	return client_new(cli, false, ret);
}

int cli_client_new_run(const struct cli *cli, corral_client **ret)
{
	return client_new(cli, true, ret);
}

int cli_exit_code(const corral_error *e)
{
	switch (e->code) {
	case CORRAL_E_CANCELLED:
		return EXIT_INTERRUPTED;
	case CORRAL_E_CONNECTION:
	case CORRAL_E_SHUTDOWN:
		return EXIT_CONNECT;
	case CORRAL_E_CREATE_TIMEOUT:
		return e->http_status ? EXIT_API : EXIT_CONNECT;
	default:
		return EXIT_API;
	}
}

void cli_format_error(char *buf, size_t len, const char *what, const corral_error *e)
{
	char prefix[256] = "";
	if (what)
		snprintf(prefix, sizeof(prefix), "%s: ", what);
	if (e->code == CORRAL_E_CANCELLED) {
		snprintf(buf, len, "corral: %sinterrupted", prefix);
	} else if (e->http_status && (e->code != CORRAL_E_CREATE_TIMEOUT &&
				      e->code != CORRAL_E_CAPACITY_TIMEOUT)) {
		char fallback[32];
		const char *code = e->server_code;
		if (!*code) {
			snprintf(fallback, sizeof(fallback), "HTTP_%d", e->http_status);
			code = fallback;
		}
		snprintf(buf, len, "corral: %s%s: %s (HTTP %d, request id %s)", prefix, code,
			 *e->detail ? e->detail : "(empty response)", e->http_status,
			 *e->request_id ? e->request_id : "none");
	} else {
		snprintf(buf, len, "corral: %s%s (request id %s)", prefix, e->message,
			 *e->request_id ? e->request_id : "none");
	}
}

int cli_show_listing(int r, const char *out, const corral_error *e, const char *what,
		     bool json_out, void (*table)(json_t *))
{
	if (r < 0)
		return cli_report(what, e);
	json_t *j = json_loads(out, 0, NULL);
	if (json_out || !j)
		printf("%s\n", out);
	else
		table(j);
	json_decref(j);
	return EXIT_OK;
}

int cli_report(const char *what, const corral_error *e)
{
	char line[1200];
	cli_format_error(line, sizeof(line), what, e);
	fprintf(stderr, "%s\n", line);
	return cli_exit_code(e);
}

/* ---- progress ---- */

void progress_init(struct progress *p, const char *what, size_t total)
{
	*p = (struct progress){.what = what, .total = total, .tty = total > 1 && isatty(STDERR_FILENO)};
	pthread_mutex_init(&p->mu, NULL);
}

static void progress_draw_locked(struct progress *p)
{
	fprintf(stderr, "\rcorral: %s %zu/%zu", p->what, p->done, p->total);
	if (p->failed)
		fprintf(stderr, " (%zu failed)", p->failed);
	fflush(stderr);
	p->shown = true;
	p->last_ms = time_now_ms();
}

static void progress_erase_locked(struct progress *p)
{
	if (p->shown) {
		fputs("\r\033[K", stderr);
		fflush(stderr);
		p->shown = false;
	}
}

void progress_step(struct progress *p, bool ok, const char *line)
{
	pthread_mutex_lock(&p->mu);
	p->done++;
	if (!ok)
		p->failed++;
	if (line) {
		if (p->tty)
			progress_erase_locked(p);
		printf("%s\n", line);
		fflush(stdout);
	}
	if (p->tty && (p->done == p->total || !p->shown || time_now_ms() - p->last_ms >= 100))
		progress_draw_locked(p);
	pthread_mutex_unlock(&p->mu);
}

void progress_message(struct progress *p, const char *fmt, ...)
{
	pthread_mutex_lock(&p->mu);
	if (p->tty)
		progress_erase_locked(p);
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	if (p->tty && p->done)
		progress_draw_locked(p);
	pthread_mutex_unlock(&p->mu);
}

void progress_end(struct progress *p)
{
	pthread_mutex_lock(&p->mu);
	if (p->shown) {
		fputc('\n', stderr);
		p->shown = false;
	}
	pthread_mutex_unlock(&p->mu);
	pthread_mutex_destroy(&p->mu);
}

/* ---- helpers ---- */

int cli_parse_kv(const char *s, char **ret_key, char **ret_value)
{
	const char *eq = strchr(s, '=');
	if (!eq || eq == s)
		return -EINVAL;
	*ret_key = strndup(s, (size_t)(eq - s));
	*ret_value = strdup(eq + 1);
	if (!*ret_key || !*ret_value) {
		free(*ret_key);
		free(*ret_value);
		return -ENOMEM;
	}
	return 0;
}

int cli_kv_add(json_t *obj, const char *opt, const char *s)
{
	_cleanup_free_ char *k = NULL, *v = NULL;
	if (cli_parse_kv(s, &k, &v) < 0) {
		fprintf(stderr, "corral: %s '%s': expected KEY=VALUE\n", opt, s);
		return -EINVAL;
	}
	if (json_object_get(obj, k)) {
		fprintf(stderr, "corral: %s: key '%s' given twice\n", opt, k);
		return -EINVAL;
	}
	json_object_set_new(obj, k, json_string(v));
	return 0;
}

int cli_parse_uint(const char *s, unsigned long long max, unsigned long long *ret)
{
	if (!*s)
		return -EINVAL;
	unsigned long long v = 0;
	for (const char *p = s; *p; p++) {
		if (*p < '0' || *p > '9')
			return -EINVAL;
		if (v > (max - (unsigned)(*p - '0')) / 10)
			return -ERANGE;
		v = v * 10 + (unsigned)(*p - '0');
	}
	*ret = v;
	return 0;
}

static bool shell_safe(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
			    "_@%+:,./-",
			    *s))
			return false;
	return true;
}

char *cli_shell_join(int argc, char *const *argv)
{
	size_t cap = 1;
	for (int i = 0; i < argc; i++)
		cap += 4 * strlen(argv[i]) + 3; /* worst case: every char is ' -> '\'' */
	char *out = malloc(cap), *p = out;
	if (!out)
		return NULL;
	for (int i = 0; i < argc; i++) {
		if (i)
			*p++ = ' ';
		if (shell_safe(argv[i])) {
			p = stpcpy(p, argv[i]);
			continue;
		}
		*p++ = '\'';
		for (const char *q = argv[i]; *q; q++) {
			if (*q == '\'')
				p = stpcpy(p, "'\\''");
			else
				*p++ = *q;
		}
		*p++ = '\'';
	}
	*p = '\0';
	return out;
}

char **cli_kv_strv(json_t *obj)
{
	char **v = calloc(json_object_size(obj) + 1, sizeof(char *));
	size_t n = 0;
	const char *k;
	json_t *val;
	if (!v)
		return NULL;
	json_object_foreach(obj, k, val) {
		if (asprintf(&v[n], "%s=%s", k, json_string_value(val)) < 0) {
			v[n] = NULL;
			corral_strv_free(v);
			return NULL;
		}
		n++;
	}
	return v;
}

int cli_sandbox_json(const struct cli *cli, const char *cmd, int argc, char **argv,
		     cli_sandbox_json_fn fetch, json_t **ret)
{
	if (optind >= argc)
		return cli_usage_error(cmd, "missing sandbox ID");
	if (optind + 1 < argc)
		return cli_usage_error(cmd, "one sandbox ID at a time");
	const char *id = argv[optind];
	_cleanup_free_ char *what = NULL;
	if (asprintf(&what, "sandbox %s", id) < 0)
		return EXIT_API;
	corral_client *client;
	int r = cli_client_new(cli, &client);
	if (r)
		return r;
	corral_error e;
	_cleanup_free_ char *text = NULL;
	if (fetch(client, id, &text, &e) < 0) {
		r = cli_report(what, &e);
	} else if (!(*ret = json_loads(text, 0, NULL))) {
		fprintf(stderr, "corral: %s: the server's answer is not JSON\n", what);
		r = EXIT_API;
	}
	corral_client_free(client);
	return r;
}
