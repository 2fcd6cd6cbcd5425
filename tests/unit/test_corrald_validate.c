/* corrald's request validation: label rules, CreateSandboxRequest, metadata merge patch, renew. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "corrald/validate.h"
#include "shared/macro.h"

static json_t *J(const char *s)
{
	json_error_t e;
	json_t *j = json_loads(s, 0, &e);
	if (!j)
		fprintf(stderr, "bad test JSON %s: %s\n", s, e.text);
	return j;
}

static void test_labels(void)
{
	CHECK(label_key_valid("team"));
	CHECK(label_key_valid("a"));
	CHECK(label_key_valid("app.kubernetes.io/name"));
	CHECK(label_key_valid("A-b_c.D9"));
	CHECK(label_key_valid("example.com/X_y"));
	CHECK(!label_key_valid(""));
	CHECK(!label_key_valid("bad key"));
	CHECK(!label_key_valid("-lead"));
	CHECK(!label_key_valid("trail-"));
	CHECK(!label_key_valid("a/b/c"));
	CHECK(!label_key_valid("/name"));
	CHECK(!label_key_valid("prefix/"));
	CHECK(!label_key_valid("UPPER.com/name"));
	CHECK(!label_key_valid("exa..mple.com/name"));
	char long_name[70];
	memset(long_name, 'a', 64);
	long_name[64] = '\0';
	CHECK(!label_key_valid(long_name));
	long_name[63] = '\0';
	CHECK(label_key_valid(long_name));

	CHECK(label_value_valid(""));
	CHECK(label_value_valid("v1.2-x_y"));
	CHECK(!label_value_valid("has space"));
	CHECK(!label_value_valid("a/b"));
	CHECK(!label_value_valid("-x"));
	memset(long_name, 'a', 64);
	long_name[64] = '\0';
	CHECK(!label_value_valid(long_name));

	CHECK(label_key_reserved("opensandbox.io/id"));
	CHECK(label_key_reserved("OpenSandbox.io/x"));
	CHECK(!label_key_reserved("x.opensandbox.io/x"));
	CHECK(!label_key_reserved("team"));
}

#define GOOD_BASE "\"image\":{\"uri\":\"host\"},\"entrypoint\":[\"sleep\",\"infinity\"],\"resourceLimits\":{\"cpu\":\"500m\",\"memory\":\"512Mi\"}"

/* Parse and expect failure with status and the first loc component. */
static void expect_bad(const char *body, int status, const char *loc0)
{
	json_t *j = J(body);
	struct create_params p;
	struct verr e;
	int r = create_params_parse(j, &p, &e);
	CHECK_INT(r, -EINVAL);
	if (r == -EINVAL) {
		CHECK_INT(e.status, status);
		if (loc0) {
			CHECK(e.nloc >= 1);
			CHECK_STR(e.loc[0], loc0);
			CHECK(strstr(e.msg, loc0) != NULL); /* the message names the field */
		}
	} else {
		fprintf(stderr, "  (accepted: %s)\n", body);
		create_params_clear(&p);
	}
	json_decref(j);
}

/* body is refused and the message contains want. */
static void expect_bad_msg(const char *body, const char *want)
{
	json_t *j = J(body);
	struct create_params p;
	struct verr e;
	int r = create_params_parse(j, &p, &e);
	CHECK_INT(r, -EINVAL);
	if (r == -EINVAL)
		CHECK(strstr(e.msg, want) != NULL);
	else
		create_params_clear(&p);
	json_decref(j);
}

/* A valid networkPolicy is kept as given (corrald parses it again into the sandbox's policy). */
static void test_network_policy_ok(void)
{
	json_t *j = J("{" GOOD_BASE ",\"networkPolicy\":{\"defaultAction\":\"deny\",\"egress\":"
		      "[{\"action\":\"allow\",\"target\":\"*.pypi.org\"},{\"action\":\"allow\",\"target\":\"10.0.0.0/8\"}]}}");
	struct create_params p;
	struct verr e;
	CHECK_INT(create_params_parse(j, &p, &e), 0);
	CHECK(json_is_object(p.network_policy));
	create_params_clear(&p);
	json_decref(j);
	j = J("{" GOOD_BASE ",\"networkPolicy\":null}");
	CHECK_INT(create_params_parse(j, &p, &e), 0);
	CHECK(p.network_policy == NULL);
	create_params_clear(&p);
	json_decref(j);
}

static void test_create_ok(void)
{
	json_t *j = J("{" GOOD_BASE ",\"timeout\":600,\"env\":{\"A\":\"1\",\"B\":null},"
		      "\"metadata\":{\"team\":\"x\"},\"extensions\":{\"oomGroup\":\"true\"}}");
	struct create_params p;
	struct verr e;
	CHECK_INT(create_params_parse(j, &p, &e), 0);
	CHECK_STR(p.image_uri, "host");
	CHECK_INT(json_array_size(p.entrypoint), 2);
	CHECK(p.has_timeout);
	CHECK_INT(p.timeout_s, 600);
	CHECK_U64(p.cpu_limit_millis, 500);
	CHECK_U64(p.memory_limit_bytes, 512ULL << 20);
	/* requests default to the limits */
	CHECK_U64(p.cpu_request_millis, 500);
	CHECK_U64(p.memory_request_bytes, 512ULL << 20);
	CHECK_STR(json_string_value(json_object_get(p.requests, "memory")), "512Mi");
	/* null env values are dropped; the 19 CPU-cap variables are added (0.5 CPU -> "1") */
	CHECK_INT(json_object_size(p.env), 1 + CPU_CAP_ENV_N);
	CHECK_STR(json_string_value(json_object_get(p.env, "OMP_NUM_THREADS")), "1");
	CHECK(json_object_get(p.env, "B") == NULL);
	CHECK(p.oom_group);
	CHECK_STR(json_string_value(json_object_get(p.metadata, "team")), "x");
	create_params_clear(&p);
	json_decref(j);

	/* null timeout = manual cleanup; snake_case names accepted; separate requests; pids */
	j = J("{\"image\":{\"uri\":\"img\"},\"entrypoint\":[\"x\"],\"timeout\":null,"
	      "\"resource_limits\":{\"cpu\":\"2\",\"memory\":\"1Gi\",\"pids\":\"64\",\"gpu\":\"1\"},"
	      "\"resourceRequests\":{\"cpu\":\"250m\"}}");
	CHECK_INT(create_params_parse(j, &p, &e), 0);
	CHECK(!p.has_timeout);
	CHECK_U64(p.cpu_limit_millis, 2000);
	CHECK_U64(p.pids_max, 64);
	CHECK_U64(p.cpu_request_millis, 250);
	CHECK_U64(p.memory_request_bytes, 0);
	CHECK_INT(json_object_size(p.metadata), 0);
	create_params_clear(&p);
	json_decref(j);

	/* timeout 1 is accepted (deliberate relaxation of the reference's >= 60) */
	j = J("{" GOOD_BASE ",\"timeout\":1}");
	CHECK_INT(create_params_parse(j, &p, &e), 0);
	create_params_clear(&p);
	json_decref(j);
}

static void test_cpu_cap_env(void)
{
	struct create_params p;
	struct verr e;
	/* floor(2.7) = 2; explicit env wins; every one of the 19 names */
	json_t *j = J("{\"image\":{\"uri\":\"host\"},\"entrypoint\":[\"x\"],"
		      "\"resourceLimits\":{\"cpu\":\"2700m\"},\"env\":{\"GOMAXPROCS\":\"7\"}}");
	CHECK_INT(create_params_parse(j, &p, &e), 0);
	CHECK_INT(json_object_size(p.env), CPU_CAP_ENV_N);
	for (size_t i = 0; i < CPU_CAP_ENV_N; i++)
		CHECK_STR(json_string_value(json_object_get(p.env, cpu_cap_env_vars[i])),
			  strcmp(cpu_cap_env_vars[i], "GOMAXPROCS") == 0 ? "7" : "2");
	CHECK_STR(cpu_cap_env_vars[0], "OMP_NUM_THREADS");
	CHECK_STR(cpu_cap_env_vars[CPU_CAP_ENV_N - 1], "CMAKE_BUILD_PARALLEL_LEVEL");
	create_params_clear(&p);
	json_decref(j);
	/* off per sandbox */
	j = J("{\"image\":{\"uri\":\"host\"},\"entrypoint\":[\"x\"],"
	      "\"resourceLimits\":{\"cpu\":\"4\"},\"extensions\":{\"cpuCapEnv\":\"false\"}}");
	CHECK_INT(create_params_parse(j, &p, &e), 0);
	CHECK_INT(json_object_size(p.env), 0);
	create_params_clear(&p);
	json_decref(j);
	/* no CPU limit: nothing to cap */
	j = J("{\"image\":{\"uri\":\"host\"},\"entrypoint\":[\"x\"],"
	      "\"resourceLimits\":{\"memory\":\"1Gi\"}}");
	CHECK_INT(create_params_parse(j, &p, &e), 0);
	CHECK_INT(json_object_size(p.env), 0);
	create_params_clear(&p);
	json_decref(j);
}

static void test_create_bad(void)
{
	expect_bad("[]", 422, NULL);
	expect_bad("{\"entrypoint\":[\"x\"],\"resourceLimits\":{}}", 422, "image");
	expect_bad("{\"image\":{},\"entrypoint\":[\"x\"],\"resourceLimits\":{}}", 422, "image");
	expect_bad("{\"image\":\"host\",\"entrypoint\":[\"x\"],\"resourceLimits\":{}}", 422, "image");
	expect_bad("{\"image\":{\"uri\":5},\"entrypoint\":[\"x\"],\"resourceLimits\":{}}", 422, "image");
	expect_bad("{\"image\":{\"uri\":\"  \"},\"entrypoint\":[\"x\"],\"resourceLimits\":{}}", 422,
		   "image");
	expect_bad("{\"image\":{\"uri\":\"host\"},\"resourceLimits\":{}}", 422, "entrypoint");
	expect_bad("{\"image\":{\"uri\":\"host\"},\"entrypoint\":[],\"resourceLimits\":{}}", 422,
		   "entrypoint");
	expect_bad("{\"image\":{\"uri\":\"host\"},\"entrypoint\":\"sleep 1\",\"resourceLimits\":{}}",
		   422, "entrypoint");
	expect_bad("{\"image\":{\"uri\":\"host\"},\"entrypoint\":[1],\"resourceLimits\":{}}", 422,
		   "entrypoint");
	expect_bad("{\"image\":{\"uri\":\"host\"},\"entrypoint\":[\"\"],\"resourceLimits\":{}}", 422,
		   "entrypoint");
	expect_bad("{\"image\":{\"uri\":\"host\"},\"entrypoint\":[\"x\"]}", 422, "resourceLimits");
	expect_bad("{" GOOD_BASE ",\"timeout\":0}", 422, "timeout");
	expect_bad("{" GOOD_BASE ",\"timeout\":-5}", 422, "timeout");
	expect_bad("{" GOOD_BASE ",\"timeout\":1.5}", 422, "timeout");
	expect_bad("{" GOOD_BASE ",\"timeout\":\"600\"}", 422, "timeout");
	expect_bad("{\"image\":{\"uri\":\"host\"},\"entrypoint\":[\"x\"],\"resourceLimits\":{\"memory\":\"12Qi\"}}",
		   422, "resourceLimits");
	expect_bad("{\"image\":{\"uri\":\"host\"},\"entrypoint\":[\"x\"],\"resourceLimits\":{\"cpu\":\"0\"}}",
		   422, "resourceLimits");
	expect_bad("{\"image\":{\"uri\":\"host\"},\"entrypoint\":[\"x\"],\"resourceLimits\":{\"cpu\":1}}",
		   422, "resourceLimits");
	expect_bad("{\"image\":{\"uri\":\"host\"},\"entrypoint\":[\"x\"],\"resourceLimits\":{\"pids\":\"0\"}}",
		   422, "resourceLimits");
	expect_bad("{\"image\":{\"uri\":\"host\"},\"entrypoint\":[\"x\"],\"resourceLimits\":{\"cpu\":\"1\"},"
		   "\"resourceRequests\":{\"cpu\":\"2\"}}",
		   422, "resourceRequests");
	expect_bad("{" GOOD_BASE ",\"env\":{\"A\":1}}", 422, "env");
	expect_bad("{" GOOD_BASE ",\"env\":[\"A=1\"]}", 422, "env");
	expect_bad("{" GOOD_BASE ",\"env\":{\"A=B\":\"1\"}}", 422, "env");
	expect_bad("{" GOOD_BASE ",\"metadata\":[]}", 422, "metadata");
	expect_bad("{" GOOD_BASE ",\"metadata\":{\"bad key\":\"v\"}}", 400, "metadata");
	expect_bad("{" GOOD_BASE ",\"metadata\":{\"opensandbox.io/id\":\"v\"}}", 400, "metadata");
	expect_bad("{" GOOD_BASE ",\"metadata\":{\"k\":\"bad value\"}}", 400, "metadata");
	expect_bad("{" GOOD_BASE ",\"metadata\":{\"k\":5}}", 400, "metadata");
	expect_bad("{" GOOD_BASE ",\"extensions\":{\"oomGroup\":\"maybe\"}}", 422, "extensions");
	expect_bad("{" GOOD_BASE ",\"extensions\":{\"x\":1}}", 422, "extensions");
	expect_bad("{" GOOD_BASE ",\"extensions\":{\"cpuCapEnv\":\"no\"}}", 422, "extensions");
	/* networkPolicy is validated here (network/policy.c): a bad rule is a 400 naming it */
	expect_bad("{" GOOD_BASE ",\"networkPolicy\":{\"defaultAction\":\"maybe\"}}", 400,
		   "networkPolicy");
	expect_bad("{" GOOD_BASE ",\"networkPolicy\":{\"egress\":[{\"action\":\"allow\",\"target\":\"a..b\"}]}}",
		   400, "networkPolicy");
	expect_bad("{" GOOD_BASE ",\"networkPolicy\":[]}", 400, "networkPolicy");
	/* an IPv6 rule could never match (IPv6 is off in sandboxes): refused, naming the rule */
	expect_bad("{" GOOD_BASE ",\"networkPolicy\":{\"egress\":[{\"action\":\"allow\",\"target\":\"10.0.0.0/8\"},{\"action\":\"allow\",\"target\":\"fd00::/8\"}]}}",
		   400, "networkPolicy");
	expect_bad_msg("{" GOOD_BASE ",\"networkPolicy\":{\"egress\":[{\"action\":\"allow\",\"target\":\"10.0.0.0/8\"},{\"action\":\"allow\",\"target\":\"fd00::/8\"}]}}",
		       "egress[1].target 'fd00::/8' is an IPv6 address");
	expect_bad("{" GOOD_BASE ",\"platform\":{\"os\":\"windows\"}}", 400, "platform");
}

/* Issue 8 item 10: inputs that used to reach the runtime and come back as a 500. */
static void test_create_gaps(void)
{
	struct create_params p;
	struct verr e;
	/* A memory limit below what a sandbox needs: 422 naming the field and the minimum. */
	json_t *j = J("{\"image\":{\"uri\":\"host\"},\"entrypoint\":[\"x\"],"
		      "\"resourceLimits\":{\"memory\":\"1\"}}");
	CHECK_INT(create_params_parse(j, &p, &e), -EINVAL);
	CHECK_INT(e.status, 422);
	CHECK_INT(e.nloc, 2);
	CHECK_STR(e.loc[0], "resourceLimits");
	CHECK_STR(e.loc[1], "memory");
	CHECK(strstr(e.msg, "resourceLimits.memory") && strstr(e.msg, "6Mi"));
	json_decref(j);
	expect_bad("{\"image\":{\"uri\":\"host\"},\"entrypoint\":[\"x\"],\"resourceLimits\":{\"memory\":\"6143Ki\"}}",
		   422, "resourceLimits");
	j = J("{\"image\":{\"uri\":\"host\"},\"entrypoint\":[\"x\"],"
	      "\"resourceLimits\":{\"memory\":\"6Mi\",\"pids\":\"3\"},"
	      "\"resourceRequests\":{\"memory\":\"1\",\"pids\":\"1\"}}");
	CHECK_INT(create_params_parse(j, &p, &e), 0); /* a request is only for admission */
	create_params_clear(&p);
	json_decref(j);
	/* pids 1 and 2 cannot start execd, the entrypoint and a command. */
	expect_bad("{\"image\":{\"uri\":\"host\"},\"entrypoint\":[\"x\"],\"resourceLimits\":{\"pids\":\"1\"}}",
		   422, "resourceLimits");
	expect_bad("{\"image\":{\"uri\":\"host\"},\"entrypoint\":[\"x\"],\"resourceLimits\":{\"pids\":\"2\"}}",
		   422, "resourceLimits");
	/* One exec string longer than the kernel takes (E2BIG at execve). */
	static char big[200 * 1024];
	memset(big, 'x', 131072);
	big[131072] = '\0';
	char *body = malloc(sizeof(big) + 512);
	snprintf(body, sizeof(big) + 512, "{" GOOD_BASE ",\"env\":{\"A\":\"%s\"}}", big + 2);
	expect_bad(body, 422, "env"); /* "A=" + 131070 = 131072 bytes */
	snprintf(body, sizeof(big) + 512, "{" GOOD_BASE ",\"env\":{\"A\":\"%s\"}}", big + 3);
	j = J(body);
	CHECK_INT(create_params_parse(j, &p, &e), 0); /* 131071 bytes fit */
	create_params_clear(&p);
	json_decref(j);
	snprintf(body, sizeof(big) + 512,
		 "{\"image\":{\"uri\":\"host\"},\"entrypoint\":[\"sleep\",\"%s\"],"
		 "\"resourceLimits\":{}}",
		 big);
	expect_bad(body, 422, "entrypoint");
	free(body);
	/* platform fields of the wrong type were accepted and echoed back. */
	expect_bad("{" GOOD_BASE ",\"platform\":{\"os\":5}}", 422, "platform");
	expect_bad("{" GOOD_BASE ",\"platform\":{\"arch\":[]}}", 422, "platform");
	/* A timeout far outside int64 as a real: refused, not cast (undefined behaviour). */
	expect_bad("{" GOOD_BASE ",\"timeout\":1e300}", 422, "timeout");
	expect_bad("{" GOOD_BASE ",\"timeout\":-1e300}", 422, "timeout");
	j = J("{" GOOD_BASE ",\"timeout\":600.0}");
	CHECK_INT(create_params_parse(j, &p, &e), 0);
	CHECK_INT(p.timeout_s, 600);
	create_params_clear(&p);
	json_decref(j);
}

static void test_merge_patch(void)
{
	json_t *cur = J("{\"a\":\"1\",\"b\":\"2\"}"), *n = NULL, *patch;
	struct verr e;

	patch = J("{\"a\":null,\"c\":\"3\",\"b\":\"22\"}");
	CHECK_INT(metadata_merge_patch(cur, patch, &n, &e), 0);
	CHECK(json_object_get(n, "a") == NULL);
	CHECK_STR(json_string_value(json_object_get(n, "b")), "22");
	CHECK_STR(json_string_value(json_object_get(n, "c")), "3");
	CHECK_STR(json_string_value(json_object_get(cur, "a")), "1"); /* current untouched */
	json_decref(n);
	json_decref(patch);

	patch = J("{}");
	CHECK_INT(metadata_merge_patch(cur, patch, &n, &e), 0);
	CHECK(json_equal(n, cur));
	json_decref(n);
	json_decref(patch);

	/* deleting a missing key is fine */
	patch = J("{\"zz\":null}");
	CHECK_INT(metadata_merge_patch(cur, patch, &n, &e), 0);
	CHECK_INT(json_object_size(n), 2);
	json_decref(n);
	json_decref(patch);

	/* all-or-nothing: one bad entry rejects the patch */
	patch = J("{\"ok\":\"v\",\"opensandbox.io/x\":\"v\"}");
	n = NULL;
	CHECK_INT(metadata_merge_patch(cur, patch, &n, &e), -EINVAL);
	CHECK_INT(e.status, 400);
	CHECK_STR(e.code, CODE_INVALID_METADATA_LABEL);
	CHECK(n == NULL);
	json_decref(patch);

	patch = J("{\"k\":{\"nested\":\"x\"}}");
	CHECK_INT(metadata_merge_patch(cur, patch, &n, &e), -EINVAL);
	CHECK_INT(e.status, 400);
	json_decref(patch);

	patch = J("[1]");
	CHECK_INT(metadata_merge_patch(cur, patch, &n, &e), -EINVAL);
	CHECK_INT(e.status, 422);
	json_decref(patch);
	json_decref(cur);
}

static void test_renew(void)
{
	struct verr e;
	int64_t t = 0;
	json_t *j = J("{\"expiresAt\":\"2030-01-01T00:00:00Z\"}");
	CHECK_INT(renew_parse(j, &t, &e), 0);
	CHECK_INT(t, 1893456000000LL);
	json_decref(j);
	j = J("{\"expiresAt\":\"2030-01-01T00:00:00\"}"); /* naive = UTC */
	CHECK_INT(renew_parse(j, &t, &e), 0);
	CHECK_INT(t, 1893456000000LL);
	json_decref(j);
	j = J("{\"expiresAt\":\"tomorrow\"}");
	CHECK_INT(renew_parse(j, &t, &e), -EINVAL);
	CHECK_INT(e.status, 422);
	CHECK_STR(e.loc[0], "expiresAt");
	json_decref(j);
	j = J("{}");
	CHECK_INT(renew_parse(j, &t, &e), -EINVAL);
	json_decref(j);
	j = J("{\"expiresAt\":5}");
	CHECK_INT(renew_parse(j, &t, &e), -EINVAL);
	json_decref(j);
}

static int parse_disk(const char *limits, struct create_params *p)
{
	char body[512];
	snprintf(body, sizeof(body),
		 "{\"image\":{\"uri\":\"host\"},\"entrypoint\":[\"true\"],\"resourceLimits\":%s}",
		 limits);
	json_t *b = J(body);
	struct verr e;
	int r = create_params_parse(b, p, &e);
	json_decref(b);
	if (r < 0)
		memset(p, 0, sizeof(*p));
	return r;
}

static void test_disk_limit(void)
{
	struct create_params p;
	struct verr e;
	const uint64_t gi = 1ULL << 30;
	/* An explicit limit within the free space is kept as sent; the default does not replace it. */
	CHECK_INT(parse_disk("{\"ephemeral-storage\":\"1Gi\"}", &p), 0);
	CHECK_INT(disk_limit_apply(&p, 10 * gi, "10Gi", 80 * gi, &e), 0);
	CHECK(!strcmp(json_string_value(json_object_get(p.limits, "ephemeral-storage")), "1Gi"));
	CHECK_U64(p.disk_limit_bytes, gi); /* the number travels with the string */
	create_params_clear(&p);
	/* Above the free space: 422 naming the field and what is free. */
	CHECK_INT(parse_disk("{\"ephemeral-storage\":\"1Ti\"}", &p), 0);
	CHECK_INT(disk_limit_apply(&p, 10 * gi, "10Gi", 80 * gi, &e), -EINVAL);
	CHECK_INT(e.status, 422);
	CHECK(!strcmp(e.code, CODE_INVALID_PARAMETER));
	CHECK_INT(e.nloc, 2);
	CHECK(!strcmp(e.loc[0], "resourceLimits") && !strcmp(e.loc[1], "ephemeral-storage"));
	CHECK(strstr(e.msg, "'1Ti'") && strstr(e.msg, "80.0 GiB free"));
	create_params_clear(&p);
	/* No limit: the default is added as if sent. */
	CHECK_INT(parse_disk("{\"cpu\":\"1\"}", &p), 0);
	CHECK_INT(disk_limit_apply(&p, 10 * gi, "10Gi", 80 * gi, &e), 0);
	CHECK(!strcmp(json_string_value(json_object_get(p.limits, "ephemeral-storage")), "10Gi"));
	CHECK(!json_object_get(p.requests, "ephemeral-storage"));
	CHECK_U64(p.disk_limit_bytes, 10 * gi);
	create_params_clear(&p);
	/* No limit and no default: nothing added. */
	CHECK_INT(parse_disk("{}", &p), 0);
	CHECK_INT(disk_limit_apply(&p, 0, NULL, 80 * gi, &e), 0);
	CHECK(!json_object_get(p.limits, "ephemeral-storage"));
	CHECK_U64(p.disk_limit_bytes, 0);
	create_params_clear(&p);
	/* The default above the free space: 503, the server's condition, naming the flag. */
	CHECK_INT(parse_disk("{}", &p), 0);
	CHECK_INT(disk_limit_apply(&p, 10 * gi, "10Gi", 512ULL << 20, &e), -EINVAL);
	CHECK_INT(e.status, 503);
	CHECK(!strcmp(e.code, CODE_INSUFFICIENT_STORAGE));
	CHECK(strstr(e.msg, "--default-disk 10Gi") && strstr(e.msg, "512.0 MiB free"));
	CHECK(!json_object_get(p.limits, "ephemeral-storage"));
	create_params_clear(&p);
}

/* A create body with these volumes (JSON text of the array). */
static int parse_volumes(const char *vols, struct create_params *p, struct verr *e)
{
	char body[4096];
	snprintf(body, sizeof(body),
		 "{\"image\":{\"uri\":\"host\"},\"entrypoint\":[\"x\"],\"resourceLimits\":{},"
		 "\"volumes\":%s}",
		 vols);
	json_t *j = J(body);
	int r = create_params_parse(j, p, e);
	json_decref(j);
	return r;
}

static void test_volumes(void)
{
	struct create_params p;
	struct verr e;
	char *const allowed[] = {(char *)"/srv/data", NULL};
	/* Normalized: repeated and trailing '/' dropped; defaults filled in. */
	CHECK_INT(parse_volumes("[{\"name\":\"a\",\"host\":{\"path\":\"/srv//data/x/\"},"
				"\"mountPath\":\"/mnt//a/\",\"subPath\":\"s//t/\"},"
				"{\"name\":\"b\",\"pvc\":{\"claimName\":\"ws\"},\"mountPath\":\"/w\"}]",
				&p, &e),
		  0);
	json_t *v0 = json_array_get(p.volumes, 0), *v1 = json_array_get(p.volumes, 1);
	CHECK(!strcmp(json_string_value(json_object_get(v0, "mountPath")), "/mnt/a"));
	CHECK(!strcmp(json_string_value(json_object_get(v0, "subPath")), "s/t"));
	CHECK(!strcmp(json_string_value(json_object_get(json_object_get(v0, "host"), "path")),
		      "/srv/data/x"));
	CHECK(json_is_false(json_object_get(v0, "readOnly")));
	json_t *pvc = json_object_get(v1, "pvc");
	CHECK(json_is_true(json_object_get(pvc, "createIfNotExists")));
	CHECK(json_is_false(json_object_get(pvc, "deleteOnSandboxTermination")));
	CHECK_INT(volumes_apply(&p, allowed, 1ULL << 30, "1Gi", &e), 0);
	/* No allowlist: host volumes refused, naming the flag. */
	CHECK_INT(volumes_apply(&p, NULL, 1ULL << 30, "1Gi", &e), -EINVAL);
	CHECK_INT(e.status, 400);
	CHECK(!strcmp(e.code, "VOLUME::HOST_PATH_NOT_ALLOWED"));
	CHECK(strstr(e.msg, "--allow-host-path") != NULL);
	create_params_clear(&p);
	/* Beside the allowed directory (a prefix of the name only). */
	CHECK_INT(parse_volumes("[{\"name\":\"a\",\"host\":{\"path\":\"/srv/data-evil\"},"
				"\"mountPath\":\"/m\"}]",
				&p, &e),
		  0);
	CHECK_INT(volumes_apply(&p, allowed, 0, NULL, &e), -EINVAL);
	CHECK(!strcmp(e.code, "VOLUME::HOST_PATH_NOT_ALLOWED"));
	create_params_clear(&p);
	/* Refused shapes: code and location. */
	const struct {
		const char *vols;
		int status;
		const char *code;
	} bad[] = {
	    {"{}", 422, CODE_INVALID_PARAMETER},
	    {"[{\"name\":\"A\",\"pvc\":{\"claimName\":\"x\"},\"mountPath\":\"/m\"}]", 422,
	     CODE_INVALID_PARAMETER},
	    {"[{\"name\":\"a\",\"pvc\":{\"claimName\":\"-x\"},\"mountPath\":\"/m\"}]", 422,
	     CODE_INVALID_PARAMETER},
	    {"[{\"name\":\"a\",\"mountPath\":\"/m\"}]", 400, "VOLUME::INVALID_BACKEND"},
	    {"[{\"name\":\"a\",\"ossfs\":{},\"mountPath\":\"/m\"}]", 400, "VOLUME::INVALID_BACKEND"},
	    {"[{\"name\":\"a\",\"pvc\":{\"claimName\":\"x\"},\"mountPath\":\"/a/../b\"}]", 400,
	     "VOLUME::INVALID_MOUNT_PATH"},
	    {"[{\"name\":\"a\",\"pvc\":{\"claimName\":\"x\"},\"mountPath\":\"//\"}]", 400,
	     "VOLUME::INVALID_MOUNT_PATH"},
	    {"[{\"name\":\"a\",\"pvc\":{\"claimName\":\"x\"},\"mountPath\":\"/dev/shm/x\"}]", 400,
	     "VOLUME::INVALID_MOUNT_PATH"},
	    {"[{\"name\":\"a\",\"pvc\":{\"claimName\":\"x\"},\"mountPath\":\"/m\",\"subPath\":\"..\"}]",
	     400, "VOLUME::INVALID_SUB_PATH"},
	    {"[{\"name\":\"a\",\"pvc\":{\"claimName\":\"x\"},\"mountPath\":\"/m\",\"subPath\":\"/abs\"}]",
	     400, "VOLUME::INVALID_SUB_PATH"},
	    {"[{\"name\":\"a\",\"host\":{\"path\":\"rel\"},\"mountPath\":\"/m\"}]", 400,
	     "VOLUME::INVALID_HOST_PATH"},
	    {"[{\"name\":\"a\",\"host\":{\"path\":\"/srv/data/./x\"},\"mountPath\":\"/m\"}]", 400,
	     "VOLUME::INVALID_HOST_PATH"},
	    {"[{\"name\":\"a\",\"pvc\":{\"claimName\":\"x\",\"storage\":\"1k\"},\"mountPath\":\"/m\"}]",
	     422, CODE_INVALID_PARAMETER},
	};
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		CHECK_INT(parse_volumes(bad[i].vols, &p, &e), -EINVAL);
		CHECK_INT(e.status, bad[i].status);
		CHECK(!strcmp(e.code, bad[i].code));
		CHECK(!strcmp(e.loc[0], "volumes"));
	}
	/* pvc.storage above --volume-size: 400 naming the flag. */
	CHECK_INT(parse_volumes("[{\"name\":\"a\",\"pvc\":{\"claimName\":\"x\",\"storage\":\"2Gi\"},"
				"\"mountPath\":\"/m\"}]",
				&p, &e),
		  0);
	CHECK_INT(volumes_apply(&p, NULL, 1ULL << 30, "1Gi", &e), -EINVAL);
	CHECK(strstr(e.msg, "--volume-size 1Gi") != NULL);
	create_params_clear(&p);
}

int main(void)
{
	test_network_policy_ok();
	test_labels();
	test_create_ok();
	test_cpu_cap_env();
	test_create_bad();
	test_create_gaps();
	test_merge_patch();
	test_renew();
	test_disk_limit();
	test_volumes();
	return check_summary("corrald_validate");
}
