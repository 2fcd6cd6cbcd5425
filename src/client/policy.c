/*
 * The client's policies as pure functions: what is retried, how long to wait, when a pooled
 * connection expires, how attribution labels are resolved and sanitized, which CPU-cap variables
 * a sandbox gets. Each one has a unit test (tests/unit/test_client_policy.c).
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "shared/label.h"
#include "shared/wire_error.h"

bool policy_status_retryable(long status)
{
	return status == 408 || status == 425 || status == 429 || (status >= 500 && status <= 599);
}

double policy_backoff_s(int attempt, double base_s, double max_s, double r)
{
	if (attempt < 1)
		attempt = 1;
	double cap = base_s * pow(2.0, MIN(attempt - 1, 60));
	if (cap > max_s)
		cap = max_s;
	if (cap < 0)
		cap = 0;
	if (r < 0)
		r = 0;
	if (r >= 1)
		r = 0.999999;
	return cap / 2 + r * (cap / 2);
}

double policy_keepalive_expiry_s(long server_timeout_s, double configured_s)
{
	if (server_timeout_s > 0)
		return server_timeout_s - 1 >= 1 ? (double)(server_timeout_s - 1) : 1.0;
	return configured_s > 0 ? configured_s : 3.0;
}

long policy_curl_maxage(double expiry_s)
{
	long whole = (long)ceil(expiry_s);
	return whole - 1; /* idle < whole: floor(idle) <= whole-1 */
}

long policy_status_wait_s(long server_timeout_s, double keepalive_expiry_s)
{
	double idle = server_timeout_s > 0 ? (double)server_timeout_s : keepalive_expiry_s;
	long w = (long)floor(idle) - 1;
	if (w > 25)
		w = 25;
	if (w < 1)
		w = 1;
	return w;
}

long policy_parse_keepalive(const char *value)
{
	if (!value)
		return 0;
	const char *p = strcasestr(value, "timeout=");
	if (!p)
		return 0;
	p += strlen("timeout=");
	if (!isdigit((unsigned char)*p))
		return 0;
	char *end;
	long v = strtol(p, &end, 10);
	if (v <= 0 || v > 86400)
		return 0;
	return v;
}

static void strip_edges(char *s)
{
	size_t n = strlen(s), i = 0;
	while (i < n && strchr("._-", s[i]))
		i++;
	while (n > i && strchr("._-", s[n - 1]))
		n--;
	memmove(s, s + i, n - i);
	s[n - i] = '\0';
}

char *policy_sanitize_label_value(const char *v)
{
	size_t n = strlen(v);
	char *out = malloc(n + 1), *p = out;
	if (!out)
		return NULL;
	for (size_t i = 0; i < n;) {
		if (label_char_valid(v[i])) {
			*p++ = v[i++];
			continue;
		}
		*p++ = '_';
		while (i < n && !label_char_valid(v[i]))
			i++;
	}
	*p = '\0';
	strip_edges(out);
	if (strlen(out) > 63)
		out[63] = '\0';
	strip_edges(out);
	if (!*out) {
		free(out);
		return strdup("metadata");
	}
	return out;
}

int policy_label_prefix(const char *prefix, char **ret)
{
	if (!prefix)
		prefix = "corral/";
	while (isspace((unsigned char)*prefix))
		prefix++;
	size_t n = strlen(prefix);
	while (n > 0 && isspace((unsigned char)prefix[n - 1]))
		n--;
	if (n == 0) {
		*ret = strdup("");
		return *ret ? 0 : -ENOMEM;
	}
	size_t base = prefix[n - 1] == '/' ? n - 1 : n;
	if (memchr(prefix, '/', base) || !label_dns_subdomain_valid(prefix, base))
		return -EINVAL;
	char *s = malloc(base + 2);
	if (!s)
		return -ENOMEM;
	memcpy(s, prefix, base);
	s[base] = '/';
	s[base + 1] = '\0';
	*ret = s;
	return 0;
}

/* A blank or whitespace-only value counts as unset. */
static const char *nonblank(const char *s)
{
	if (!s)
		return NULL;
	for (const char *p = s; *p; p++)
		if (!isspace((unsigned char)*p))
			return s;
	return NULL;
}

static char *first_of(const char *explicit_value, policy_getenv_fn ge, const char *const *envs)
{
	const char *v = nonblank(explicit_value);
	for (size_t i = 0; !v && envs[i]; i++)
		v = nonblank(ge(envs[i]));
	return v ? strdup(v) : NULL;
}

int policy_attribution_resolve(const char *team, const char *user, const char *workload,
			       const char *run, policy_getenv_fn ge, const char *login,
			       const char *run_generated, struct attribution *ret)
{
	memset(ret, 0, sizeof(*ret));
	ret->team = first_of(team, ge,
			     (const char *const[]){"CORRAL_TEAM", "NEMO_GYM_TEAM", "SLURM_JOB_ACCOUNT",
						   NULL});
	ret->user = first_of(user, ge,
			     (const char *const[]){"CORRAL_USER", "NEMO_GYM_USER", "SLURM_JOB_USER",
						   NULL});
	if (!ret->user && nonblank(login) && strcasecmp(login, "root") != 0)
		ret->user = strdup(login);
	ret->workload = first_of(workload, ge,
				 (const char *const[]){"CORRAL_WORKLOAD", "NEMO_GYM_WORKLOAD",
						       "SLURM_JOB_NAME", "NEMO_GYM_CONFIG_PATH",
						       NULL});
	ret->run = first_of(run, ge, (const char *const[]){"CORRAL_RUN_ID", "NEMO_GYM_RUN_ID", NULL});
	if (!ret->run)
		ret->run = strdup(run_generated);
	if (!ret->run) {
		policy_attribution_clear(ret);
		return -ENOMEM;
	}
	return 0;
}

void policy_attribution_clear(struct attribution *a)
{
	free(a->team);
	free(a->user);
	free(a->workload);
	free(a->run);
	memset(a, 0, sizeof(*a));
}

int policy_cpu_cap_value(double cpu, char buf[32])
{
	if (!(cpu > 0))
		return 0;
	double f = floor(cpu);
	long v = f < 1 ? 1 : (f > 1e6 ? 1000000 : (long)f);
	snprintf(buf, 32, "%ld", v);
	return 1;
}

corral_error_code policy_classify(long status, const char *code)
{
	code = code ? code : "";
	if (status == 410 || strcmp(code, WIRE_CODE(SANDBOX_ENDED)) == 0)
		return CORRAL_E_SANDBOX_ENDED;
	if (strstr(code, "CAPACITY_TIMEOUT"))
		return CORRAL_E_CAPACITY_TIMEOUT;
	if (strcmp(code, WIRE_CODE(SANDBOX_READY_TIMEOUT)) == 0 || strstr(code, "POD_READY_TIMEOUT"))
		return CORRAL_E_CREATE_TIMEOUT;
	if (strcmp(code, WIRE_CODE(SANDBOX_ENTRYPOINT_EXITED)) == 0 ||
	    strcmp(code, WIRE_CODE(SANDBOX_OOM_KILLED)) == 0)
		return CORRAL_E_CREATE_FAILED;
	if (status == 502)
		return CORRAL_E_BACKEND_UNREACHABLE;
	if (status == 401 || status == 403)
		return CORRAL_E_UNAUTHORIZED;
	if (status == 404)
		return CORRAL_E_NOT_FOUND;
	if (status == 400 || status == 413 || status == 422)
		return CORRAL_E_INVALID_ARGUMENT;
	return CORRAL_E_SERVER;
}

bool policy_create_retryable(const corral_error *e)
{
	switch (e->code) {
	case CORRAL_E_CONNECTION:
	case CORRAL_E_PROTOCOL: /* an answer damaged on the way */
	case CORRAL_E_CREATE_TIMEOUT:
	case CORRAL_E_BACKEND_UNREACHABLE:
		return true;
	case CORRAL_E_SERVER:
	case CORRAL_E_CAPACITY_TIMEOUT:
		return e->http_status == 0 || policy_status_retryable(e->http_status);
	default:
		/* 409 SANDBOX::DELETED: someone deleted it while we waited; try again. */
		return e->http_status == 409 || policy_status_retryable(e->http_status);
	}
}

bool policy_create_reuse_key(bool answer_lost)
{
	return answer_lost;
}
