/* libcorral policies: retry classes, backoff bounds, keep-alive expiry choice, attribution
 * resolution and sanitizing, CPU-cap environment, error classification. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "client.h"
#include "shared/cpucap.h"
#include "shared/wire_error.h"

static void test_retry_classes(void)
{
	long yes[] = {408, 425, 429, 500, 502, 503, 504, 599};
	long no[] = {200, 202, 400, 401, 403, 404, 409, 410, 413, 422, 600};
	for (size_t i = 0; i < ARRAY_SIZE(yes); i++)
		CHECK(policy_status_retryable(yes[i]));
	for (size_t i = 0; i < ARRAY_SIZE(no); i++)
		CHECK(!policy_status_retryable(no[i]));

	/* Create: connection failures, ready timeouts and 5xx/429 retry; validation never. */
	corral_error e = {0};
	e.code = CORRAL_E_CONNECTION;
	CHECK(policy_create_retryable(&e));
	e = (corral_error){.code = CORRAL_E_PROTOCOL, .http_status = 202};
	CHECK(policy_create_retryable(&e));
	e = (corral_error){.code = CORRAL_E_CREATE_TIMEOUT, .http_status = 504};
	CHECK(policy_create_retryable(&e));
	e = (corral_error){.code = CORRAL_E_SERVER, .http_status = 503};
	CHECK(policy_create_retryable(&e));
	e = (corral_error){.code = CORRAL_E_SERVER, .http_status = 429};
	CHECK(policy_create_retryable(&e));
	e = (corral_error){.code = CORRAL_E_INVALID_ARGUMENT, .http_status = 422};
	CHECK(!policy_create_retryable(&e));
	e = (corral_error){.code = CORRAL_E_INVALID_ARGUMENT, .http_status = 400};
	CHECK(!policy_create_retryable(&e));
	e = (corral_error){.code = CORRAL_E_CREATE_FAILED, .http_status = 422};
	CHECK(!policy_create_retryable(&e));
	e = (corral_error){.code = CORRAL_E_UNAUTHORIZED, .http_status = 401};
	CHECK(!policy_create_retryable(&e));
	e = (corral_error){.code = CORRAL_E_NOT_FOUND, .http_status = 404};
	CHECK(!policy_create_retryable(&e));
	e = (corral_error){.code = CORRAL_E_SANDBOX_ENDED, .http_status = 410};
	CHECK(!policy_create_retryable(&e));

	/* Idempotency-Key: repeated only after a lost answer; any answer spends it. */
	CHECK(policy_create_reuse_key(true));
	CHECK(!policy_create_reuse_key(false));

	/* Typed errors from status + server code. */
	CHECK_INT(policy_classify(410, "SANDBOX::ENDED"), CORRAL_E_SANDBOX_ENDED);
	CHECK_INT(policy_classify(502, "SANDBOX::BACKEND_UNREACHABLE"), CORRAL_E_BACKEND_UNREACHABLE);
	CHECK_INT(policy_classify(504, "SANDBOX::READY_TIMEOUT"), CORRAL_E_CREATE_TIMEOUT);
	CHECK_INT(policy_classify(504, "KUBERNETES::POD_READY_TIMEOUT"), CORRAL_E_CREATE_TIMEOUT);
	CHECK_INT(policy_classify(503, "SANDBOX::CAPACITY_TIMEOUT"), CORRAL_E_CAPACITY_TIMEOUT);
	/* requests larger than the whole host: a validation error, never retried */
	CHECK_INT(policy_classify(400, "SANDBOX::REQUESTS_EXCEED_CAPACITY"), CORRAL_E_INVALID_ARGUMENT);
	e = (corral_error){.code = policy_classify(400, "SANDBOX::REQUESTS_EXCEED_CAPACITY"),
			   .http_status = 400};
	CHECK(!policy_create_retryable(&e));
	e = (corral_error){.code = policy_classify(503, "SANDBOX::CAPACITY_TIMEOUT"), .http_status = 503};
	CHECK(policy_create_retryable(&e));
	CHECK_INT(policy_classify(422, "SANDBOX::ENTRYPOINT_EXITED"), CORRAL_E_CREATE_FAILED);
	CHECK_INT(policy_classify(422, "SANDBOX::OOM_KILLED"), CORRAL_E_CREATE_FAILED);
	CHECK_INT(policy_classify(422, "SANDBOX::INVALID_PARAMETER"), CORRAL_E_INVALID_ARGUMENT);
	CHECK_INT(policy_classify(400, NULL), CORRAL_E_INVALID_ARGUMENT);
	CHECK_INT(policy_classify(404, "SANDBOX::NOT_FOUND"), CORRAL_E_NOT_FOUND);
	CHECK_INT(policy_classify(401, "MISSING_API_KEY"), CORRAL_E_UNAUTHORIZED);
	CHECK_INT(policy_classify(500, "SANDBOX::CREATE_FAILED"), CORRAL_E_SERVER);
	CHECK_INT(policy_classify(502, NULL), CORRAL_E_BACKEND_UNREACHABLE);
}

static void test_backoff_bounds(void)
{
	for (int attempt = 1; attempt <= 12; attempt++) {
		double cap = fmin(30.0, 1.0 * pow(2, attempt - 1));
		for (double r = 0; r < 1; r += 0.125) {
			double d = policy_backoff_s(attempt, 1.0, 30.0, r);
			CHECK(d >= cap / 2 - 1e-9);
			CHECK(d <= cap + 1e-9);
		}
		/* jitter: different random draws give different delays */
		CHECK(policy_backoff_s(attempt, 1.0, 30.0, 0.0) <
		      policy_backoff_s(attempt, 1.0, 30.0, 0.99));
	}
	CHECK(fabs(policy_backoff_s(1, 1.0, 30.0, 0.0) - 0.5) < 1e-9);
	CHECK(fabs(policy_backoff_s(3, 1.0, 30.0, 0.0) - 2.0) < 1e-9);
	CHECK(policy_backoff_s(50, 1.0, 30.0, 0.999) <= 30.0);
	CHECK(policy_backoff_s(0, 1.0, 30.0, 0.5) <= 1.0); /* clamped to attempt 1 */
}

static void test_keepalive(void)
{
	/* From the server's header: N-1, at least 1; else the configured value, default 3. */
	CHECK(policy_keepalive_expiry_s(30, 3.0) == 29.0);
	CHECK(policy_keepalive_expiry_s(5, 3.0) == 4.0);
	CHECK(policy_keepalive_expiry_s(2, 3.0) == 1.0);
	CHECK(policy_keepalive_expiry_s(1, 3.0) == 1.0);
	CHECK(policy_keepalive_expiry_s(0, 3.0) == 3.0);
	CHECK(policy_keepalive_expiry_s(0, 2.5) == 2.5);
	CHECK(policy_keepalive_expiry_s(0, 0) == 3.0);
	/* libcurl reuses while floor(idle) <= maxage: maxage = ceil(expiry) - 1. */
	CHECK_INT(policy_curl_maxage(29.0), 28);
	CHECK_INT(policy_curl_maxage(3.0), 2);
	CHECK_INT(policy_curl_maxage(2.5), 2);
	CHECK_INT(policy_curl_maxage(1.0), 0);
	CHECK_INT(policy_curl_maxage(0.5), 0);
	/* long-poll waits stay below the idle timeout */
	CHECK_INT(policy_status_wait_s(30, 3.0), 25);
	CHECK_INT(policy_status_wait_s(5, 3.0), 4);
	CHECK_INT(policy_status_wait_s(2, 3.0), 1);
	CHECK_INT(policy_status_wait_s(0, 3.0), 2);
	CHECK_INT(policy_status_wait_s(1, 3.0), 1);
	/* the header */
	CHECK_INT(policy_parse_keepalive(" timeout=5"), 5);
	CHECK_INT(policy_parse_keepalive(" timeout=30, max=100\r\n"), 30);
	CHECK_INT(policy_parse_keepalive("max=100, timeout=7"), 7);
	CHECK_INT(policy_parse_keepalive("timeout=abc"), 0);
	CHECK_INT(policy_parse_keepalive("timeout=0"), 0);
	CHECK_INT(policy_parse_keepalive(""), 0);
	CHECK_INT(policy_parse_keepalive(NULL), 0);
}

static void check_sanitize(const char *in, const char *want)
{
	char *s = policy_sanitize_label_value(in);
	CHECK_STR(s, want);
	free(s);
}

static void test_sanitize(void)
{
	check_sanitize("gym team", "gym_team");
	check_sanitize("a  b\t\tc", "a_b_c");
	check_sanitize("alice", "alice");
	check_sanitize("__x__", "x");
	check_sanitize("..-x-..", "x");
	check_sanitize("", "metadata");
	check_sanitize("///", "metadata");
	check_sanitize("configs/swe bench.yaml", "configs_swe_bench.yaml");
	check_sanitize("ünïcode", "n_code");
	char long_in[200];
	memset(long_in, 'a', sizeof(long_in) - 1);
	long_in[sizeof(long_in) - 1] = '\0';
	char *s = policy_sanitize_label_value(long_in);
	CHECK_INT(strlen(s), 63);
	free(s);
	/* cut at 63, then stripped again */
	char cut[80];
	memset(cut, 'b', 62);
	cut[62] = '-';
	strcpy(cut + 63, "tail");
	s = policy_sanitize_label_value(cut);
	CHECK_INT(strlen(s), 62);
	free(s);
}

static void check_prefix(const char *in, int rc, const char *want)
{
	char *p = NULL;
	int r = policy_label_prefix(in, &p);
	CHECK_INT(r, rc);
	if (rc == 0)
		CHECK_STR(p, want);
	free(p);
}

static void test_prefix(void)
{
	check_prefix(NULL, 0, "corral/");
	check_prefix("corral/", 0, "corral/");
	check_prefix("corral", 0, "corral/");
	check_prefix("nemo-gym.nvidia.com/", 0, "nemo-gym.nvidia.com/");
	check_prefix("  nemo-gym.nvidia.com  ", 0, "nemo-gym.nvidia.com/");
	check_prefix("", 0, "");
	check_prefix("   ", 0, "");
	check_prefix("Corral/", -EINVAL, NULL);
	check_prefix("my_team/", -EINVAL, NULL);
	check_prefix("-corral/", -EINVAL, NULL);
	check_prefix("a..b/", -EINVAL, NULL);
	check_prefix("a/b/", -EINVAL, NULL);
}

static const char *fake_env[][2] = {{NULL, NULL}, {NULL, NULL}, {NULL, NULL}, {NULL, NULL},
				    {NULL, NULL}, {NULL, NULL}, {NULL, NULL}, {NULL, NULL}};

static const char *fake_getenv(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(fake_env); i++)
		if (fake_env[i][0] && strcmp(fake_env[i][0], name) == 0)
			return fake_env[i][1];
	return NULL;
}

static void set_env(size_t i, const char *k, const char *v)
{
	fake_env[i][0] = k;
	fake_env[i][1] = v;
}

static void clear_env(void)
{
	memset(fake_env, 0, sizeof(fake_env));
}

static void test_attribution(void)
{
	struct attribution a;
	/* nothing set: login as user, run generated */
	clear_env();
	CHECK_INT(policy_attribution_resolve(NULL, NULL, NULL, NULL, fake_getenv, "alice", "3f2a9c01b7de",
					     &a), 0);
	CHECK(a.team == NULL);
	CHECK_STR(a.user, "alice");
	CHECK(a.workload == NULL);
	CHECK_STR(a.run, "3f2a9c01b7de");
	policy_attribution_clear(&a);

	/* root login ignored; root through env kept */
	policy_attribution_resolve(NULL, NULL, NULL, NULL, fake_getenv, "root", "r", &a);
	CHECK(a.user == NULL);
	policy_attribution_clear(&a);
	policy_attribution_resolve(NULL, NULL, NULL, NULL, fake_getenv, "ROOT", "r", &a);
	CHECK(a.user == NULL);
	policy_attribution_clear(&a);
	set_env(0, "NEMO_GYM_USER", "root");
	policy_attribution_resolve(NULL, NULL, NULL, NULL, fake_getenv, "root", "r", &a);
	CHECK_STR(a.user, "root");
	policy_attribution_clear(&a);

	/* Slurm as the fallback; NEMO_GYM beats Slurm; CORRAL beats NEMO_GYM; explicit beats all */
	clear_env();
	set_env(0, "SLURM_JOB_ACCOUNT", "acct");
	set_env(1, "SLURM_JOB_USER", "suser");
	set_env(2, "SLURM_JOB_NAME", "sjob");
	set_env(3, "NEMO_GYM_CONFIG_PATH", "cfg");
	policy_attribution_resolve(NULL, NULL, NULL, NULL, fake_getenv, "alice", "r", &a);
	CHECK_STR(a.team, "acct");
	CHECK_STR(a.user, "suser");
	CHECK_STR(a.workload, "sjob");
	policy_attribution_clear(&a);
	set_env(2, NULL, NULL);
	policy_attribution_resolve(NULL, NULL, NULL, NULL, fake_getenv, "alice", "r", &a);
	CHECK_STR(a.workload, "cfg"); /* config path after the Slurm job name */
	policy_attribution_clear(&a);
	set_env(4, "NEMO_GYM_TEAM", "gymteam");
	set_env(5, "NEMO_GYM_RUN_ID", "gymrun");
	policy_attribution_resolve(NULL, NULL, NULL, NULL, fake_getenv, "alice", "r", &a);
	CHECK_STR(a.team, "gymteam");
	CHECK_STR(a.run, "gymrun");
	policy_attribution_clear(&a);
	set_env(6, "CORRAL_TEAM", "corralteam");
	set_env(7, "CORRAL_RUN_ID", "corralrun");
	policy_attribution_resolve(NULL, NULL, NULL, NULL, fake_getenv, "alice", "r", &a);
	CHECK_STR(a.team, "corralteam");
	CHECK_STR(a.run, "corralrun");
	policy_attribution_clear(&a);
	policy_attribution_resolve("t", "u", "w", "x", fake_getenv, "alice", "r", &a);
	CHECK_STR(a.team, "t");
	CHECK_STR(a.user, "u");
	CHECK_STR(a.workload, "w");
	CHECK_STR(a.run, "x");
	policy_attribution_clear(&a);

	/* blanks count as unset */
	clear_env();
	set_env(0, "CORRAL_TEAM", "   ");
	set_env(1, "NEMO_GYM_TEAM", "real");
	policy_attribution_resolve(" ", NULL, NULL, "  ", fake_getenv, "  ", "gen", &a);
	CHECK_STR(a.team, "real");
	CHECK(a.user == NULL);
	CHECK_STR(a.run, "gen");
	policy_attribution_clear(&a);
}

static void test_cpu_env(void)
{
	char buf[32];
	CHECK_INT(policy_cpu_cap_value(0, buf), 0);
	CHECK_INT(policy_cpu_cap_value(-1, buf), 0);
	CHECK_INT(policy_cpu_cap_value(0.5, buf), 1);
	CHECK_STR(buf, "1");
	CHECK_INT(policy_cpu_cap_value(2.7, buf), 1);
	CHECK_STR(buf, "2");
	CHECK_INT(policy_cpu_cap_value(4, buf), 1);
	CHECK_STR(buf, "4");
	CHECK_INT(policy_cpu_cap_value(1.0, buf), 1);
	CHECK_STR(buf, "1");
	CHECK_INT(ARRAY_SIZE(cpu_cap_env_vars), 19);
	CHECK_STR(cpu_cap_env_vars[0], "OMP_NUM_THREADS");
	CHECK_STR(cpu_cap_env_vars[13], "GOMAXPROCS");
	CHECK_STR(cpu_cap_env_vars[18], "CMAKE_BUILD_PARALLEL_LEVEL");
	for (size_t i = 0; i < 19; i++) {
		CHECK(strcmp(cpu_cap_env_vars[i], "MAKEFLAGS") != 0);
		for (size_t j = 0; j < i; j++)
			CHECK(strcmp(cpu_cap_env_vars[i], cpu_cap_env_vars[j]) != 0);
	}
}

/* The wire error table's retryable flag is what libcorral does with the code's usual status, and
 * the codes libcorral knows by name classify as it says. */
static void test_wire_errors(void)
{
	for (size_t i = 0; i < WIRE_ERROR_COUNT_; i++) {
		const struct wire_error_info *w = &wire_errors[i];
		if (w->scope == WIRE_SCOPE_INTERNAL)
			continue;
		if (policy_status_retryable(w->status) != w->retryable)
			CHECK_FAIL_("%s %d: table retryable=%d, libcorral retries=%d", w->code, w->status,
				    w->retryable, !w->retryable);
		check_run_++;
	}
	CHECK_INT(policy_classify(410, WIRE_CODE(SANDBOX_ENDED)), CORRAL_E_SANDBOX_ENDED);
	CHECK_INT(policy_classify(503, WIRE_CODE(SANDBOX_CAPACITY_TIMEOUT)), CORRAL_E_CAPACITY_TIMEOUT);
	CHECK_INT(policy_classify(504, WIRE_CODE(SANDBOX_READY_TIMEOUT)), CORRAL_E_CREATE_TIMEOUT);
	CHECK_INT(policy_classify(422, WIRE_CODE(SANDBOX_ENTRYPOINT_EXITED)), CORRAL_E_CREATE_FAILED);
	CHECK_INT(policy_classify(422, WIRE_CODE(SANDBOX_OOM_KILLED)), CORRAL_E_CREATE_FAILED);
	CHECK_INT(policy_classify(502, WIRE_CODE(SANDBOX_BACKEND_UNREACHABLE)),
		  CORRAL_E_BACKEND_UNREACHABLE);
}

int main(void)
{
	test_wire_errors();
	test_retry_classes();
	test_backoff_bounds();
	test_keepalive();
	test_sanitize();
	test_prefix();
	test_attribution();
	test_cpu_env();
	return check_summary("client_policy");
}
