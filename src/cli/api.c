/*
 * What every subcommand shares: requests to corrald over libcurl (request ids, API key, timeouts,
 * error reporting), interrupt handling, and small argument helpers.
 */
#include <curl/curl.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* ---- signals ---- */

static volatile sig_atomic_t interrupted_by;
static volatile sig_atomic_t interrupt_held;


static void on_signal(int sig)
{
	static const char msg[] = "corral: finishing a request so nothing is left behind...\n";
	if (interrupt_held && !interrupted_by)
		(void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
	interrupted_by = sig;
}

void cli_signals_install(void)
{
	struct sigaction sa = {.sa_handler = on_signal};
	sigemptyset(&sa.sa_mask);
	/* No SA_RESTART: a blocked poll() in libcurl must wake up and see the flag. */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

int cli_interrupted(void)
{
	return interrupted_by;
}

void cli_interrupt_clear(void)
{
	interrupted_by = 0;
}

void cli_interrupt_hold(bool hold)
{
	interrupt_held = hold;
}

static int xferinfo(void *p, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
		    curl_off_t ulnow)
{
	return interrupted_by && !interrupt_held; /* non-zero aborts the transfer */
}

/* ---- requests ---- */

void *api_curl_new(const struct cli *cli, const char *method, const char *url,
		   const char *request_id, struct curl_slist **headers, bool json_body)
{
	CURL *c = curl_easy_init();
	if (!c)
		return NULL;
	char h[512];
	struct curl_slist *hl = NULL;
	snprintf(h, sizeof(h), "X-Request-ID: %s", request_id);
	hl = curl_slist_append(hl, h);
	if (cli->api_key && *cli->api_key) {
		snprintf(h, sizeof(h), "OPEN-SANDBOX-API-KEY: %s", cli->api_key);
		hl = curl_slist_append(hl, h);
	}
	if (json_body)
		hl = curl_slist_append(hl, "Content-Type: application/json");
	hl = curl_slist_append(hl, "Expect:"); /* no 100-continue round trip */
	*headers = hl;

	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	if (strcmp(method, "POST") == 0 && !json_body)
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, 0L);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
	curl_easy_setopt(c, CURLOPT_USERAGENT, "corral-cli/0.1");
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, CLI_CONNECT_TIMEOUT_S);
	curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, xferinfo);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	return c;
}

struct sink {
	char *buf;
	size_t len, cap;
	bool overflow;
};

static size_t sink_write(char *data, size_t size, size_t n, void *p)
{
	struct sink *s = p;
	size_t len = size * n;
	if (s->len + len > CLI_MAX_BODY) {
		s->overflow = true;
		return 0; /* aborts the transfer */
	}
	if (s->len + len + 1 > s->cap) {
		size_t cap = MAX(s->cap * 2, s->len + len + 1);
		char *nb = realloc(s->buf, cap);
		if (!nb)
			return 0;
		s->buf = nb;
		s->cap = cap;
	}
	memcpy(s->buf + s->len, data, len);
	s->len += len;
	s->buf[s->len] = '\0';
	return len;
}

int api_request(const struct cli *cli, const char *method, const char *path, json_t *body,
		long timeout_s, struct api_reply *r)
{
	memset(r, 0, sizeof(*r));
	if (id_hex32(r->request_id) < 0)
		snprintf(r->request_id, sizeof(r->request_id), "%032d", 0);

	_cleanup_free_ char *url = NULL;
	if (asprintf(&url, "%s%s", cli->server, path) < 0)
		return -ENOMEM;
	_cleanup_free_ char *payload = body ? json_dumps(body, JSON_COMPACT) : NULL;
	struct curl_slist *headers = NULL;
	CURL *c = api_curl_new(cli, method, url, r->request_id, &headers, payload != NULL);
	if (!c)
		return -ENOMEM;
	struct sink s = {0};
	if (payload)
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, payload);
	curl_easy_setopt(c, CURLOPT_TIMEOUT, timeout_s);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink_write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
	char errbuf[CURL_ERROR_SIZE] = "";
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);

	CURLcode cc = curl_easy_perform(c);
	curl_off_t connect_us = 0;
	curl_easy_getinfo(c, CURLINFO_CONNECT_TIME_T, &connect_us);
	r->connected = connect_us > 0;
	int ret = 0;
	if (cc == CURLE_OK) {
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
		r->body = s.buf ? s.buf : strdup("");
		r->len = s.len;
		s.buf = NULL;
		if (r->len)
			r->json = json_loadb(r->body, r->len, 0, NULL);
	} else if (cc == CURLE_ABORTED_BY_CALLBACK) {
		snprintf(r->transport_error, sizeof(r->transport_error), "interrupted");
		ret = -EINTR;
	} else {
		if (s.overflow)
			snprintf(r->transport_error, sizeof(r->transport_error),
				 "response larger than %u MiB", CLI_MAX_BODY >> 20);
		else if (cc == CURLE_OPERATION_TIMEDOUT)
			snprintf(r->transport_error, sizeof(r->transport_error),
				 "no answer within %s (%s)",
				 strstr(errbuf, "onnect") ? "the connect timeout" : "the timeout",
				 *errbuf ? errbuf : curl_easy_strerror(cc));
		else
			snprintf(r->transport_error, sizeof(r->transport_error), "%s",
				 *errbuf ? errbuf : curl_easy_strerror(cc));
		ret = -EIO;
	}
	free(s.buf);
	curl_easy_cleanup(c);
	curl_slist_free_all(headers);
	return ret;
}

void api_reply_clear(struct api_reply *r)
{
	free(r->body);
	json_decref(r->json);
	r->body = NULL;
	r->json = NULL;
}

int api_report(const struct cli *cli, const char *what, const struct api_reply *r)
{
	char prefix[256] = "";
	if (what)
		snprintf(prefix, sizeof(prefix), "%s: ", what);
	if (r->status == 0) {
		if (strcmp(r->transport_error, "interrupted") == 0) {
			fprintf(stderr, "corral: %sinterrupted\n", prefix);
			return EXIT_INTERRUPTED;
		}
		fprintf(stderr, "corral: %s%s %s: %s (request id %s)\n", prefix,
			r->connected ? "no complete answer from" : "cannot reach", cli->server,
			r->transport_error, r->request_id);
		return EXIT_CONNECT;
	}
	const char *code = NULL, *message = NULL;
	_cleanup_free_ char *detail = NULL;
	if (json_is_object(r->json)) {
		code = json_string_value(json_object_get(r->json, "code"));
		message = json_string_value(json_object_get(r->json, "message"));
		json_t *d = json_object_get(r->json, "detail"); /* FastAPI-style validation errors */
		if (!message && d) {
			detail = json_is_string(d) ? strdup(json_string_value(d))
						   : json_dumps(d, JSON_COMPACT);
			message = detail;
		}
	}
	char fallback_code[32];
	if (!code) {
		snprintf(fallback_code, sizeof(fallback_code), "HTTP_%ld", r->status);
		code = fallback_code;
	}
	char body_excerpt[301];
	if (!message) {
		/* Not our JSON shape (a proxy in between?): show the start of the body. */
		snprintf(body_excerpt, sizeof(body_excerpt), "%s", r->body ? r->body : "");
		char *nl = strpbrk(body_excerpt, "\r\n");
		if (nl)
			*nl = '\0';
		message = *body_excerpt ? body_excerpt : "(empty response)";
	}
	fprintf(stderr, "corral: %s%s: %s (HTTP %ld, request id %s)\n", prefix, code, message,
		r->status, r->request_id);
	return EXIT_API;
}

char *api_escape(const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t n = strlen(s);
	char *out = malloc(3 * n + 1), *p = out;
	if (!out)
		return NULL;
	for (const unsigned char *q = (const unsigned char *)s; *q; q++) {
		if ((*q >= 'A' && *q <= 'Z') || (*q >= 'a' && *q <= 'z') || (*q >= '0' && *q <= '9') ||
		    *q == '-' || *q == '.' || *q == '_' || *q == '~') {
			*p++ = (char)*q;
		} else {
			*p++ = '%';
			*p++ = hex[*q >> 4];
			*p++ = hex[*q & 15];
		}
	}
	*p = '\0';
	return out;
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
