/* Unit tests of src/network/policy.c: parsing, validation, matching, PATCH and DELETE. */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "check.h"
#include "network/policy.h"

static int parse(const char *s, struct egress_policy *p, struct error *e)
{
	memset(e, 0, sizeof(*e));
	return egress_policy_parse(s, strlen(s), p, e);
}

static enum egress_action name_action(const struct egress_policy *p, const char *name, int *idx)
{
	enum egress_action a;
	int i = egress_policy_match_name(p, name, &a);
	if (idx)
		*idx = i;
	return a;
}

static enum egress_action addr_action(const struct egress_policy *p, const char *addr, int *idx)
{
	uint8_t b[16];
	int family = strchr(addr, ':') ? AF_INET6 : AF_INET;
	if (inet_pton(family, addr, b) != 1)
		abort();
	enum egress_action a;
	int i = egress_policy_match_addr(p, family, b, &a);
	if (idx)
		*idx = i;
	return a;
}

static void bad(const char *body, const char *needle)
{
	struct egress_policy p;
	struct error e;
	int r = parse(body, &p, &e);
	if (r == 0)
		fprintf(stderr, "accepted: %s\n", body);
	CHECK(r < 0);
	if (r < 0 && !strstr(e.msg, needle))
		fprintf(stderr, "message for %s: '%s' (wanted '%s')\n", body, e.msg, needle);
	CHECK(r < 0 && strstr(e.msg, needle));
	egress_policy_clear(&p);
}

static void test_parse(void)
{
	struct egress_policy p;
	struct error e;

	/* empty, blank, null, {}: deny-all (the reference's reset) */
	const char *denyall[] = {"", "  \n", "null", "{}", "{\"egress\":[]}", "{\"egress\":null}"};
	for (size_t i = 0; i < sizeof(denyall) / sizeof(*denyall); i++) {
		CHECK_INT(parse(denyall[i], &p, &e), 0);
		CHECK_INT(p.default_action, EGRESS_DENY);
		CHECK_U64(p.n, 0);
		CHECK_STR(egress_policy_mode(&p), "deny_all");
		egress_policy_clear(&p);
	}
	CHECK_INT(parse("{\"defaultAction\":\"ALLOW\"}", &p, &e), 0);
	CHECK_STR(egress_policy_mode(&p), "allow_all");
	egress_policy_clear(&p);

	CHECK_INT(parse("{\"defaultAction\":\"deny\",\"egress\":["
			"{\"action\":\"allow\",\"target\":\" PyPI.org. \"},"
			"{\"action\":\"Allow\",\"target\":\"*.GitHub.com\"},"
			"{\"target\":\"evil.com\"},"
			"{\"action\":\"\",\"target\":\"evil2.com\"},"
			"{\"action\":\"allow\",\"target\":\"10.1.2.3/8\"},"
			"{\"action\":\"allow\",\"target\":\"192.0.2.7\"},"
			"{\"action\":\"deny\",\"target\":\"2001:DB8::1/32\"},"
			"{\"action\":\"allow\",\"target\":\"::1\"},"
			"{\"action\":\"allow\",\"target\":\"_acme-challenge.x-y.test\"}],"
			"\"unknown\":1}",
			&p, &e),
		  0);
	CHECK_U64(p.n, 9);
	CHECK_STR(egress_policy_mode(&p), "enforcing");
	CHECK_STR(p.rules[0].target, "pypi.org");
	CHECK_INT(p.rules[0].kind, EGRESS_NAME);
	CHECK_STR(p.rules[1].target, "*.github.com");
	CHECK_INT(p.rules[1].kind, EGRESS_WILDCARD);
	CHECK_INT(p.rules[2].action, EGRESS_DENY); /* missing action: deny */
	CHECK_INT(p.rules[3].action, EGRESS_DENY); /* empty action: deny */
	CHECK_STR(p.rules[4].target, "10.0.0.0/8"); /* host bits cleared */
	CHECK_INT(p.rules[4].kind, EGRESS_CIDR);
	CHECK_INT(p.rules[4].prefix, 8);
	CHECK_INT(p.rules[4].family, AF_INET);
	CHECK_STR(p.rules[5].target, "192.0.2.7");
	CHECK_INT(p.rules[5].prefix, 32);
	CHECK_STR(p.rules[6].target, "2001:db8::/32");
	CHECK_INT(p.rules[6].family, AF_INET6);
	CHECK_STR(p.rules[7].target, "::1");
	CHECK_INT(p.rules[7].prefix, 128);
	/* a parsed record keeps them, but a client's policy with an IPv6 rule is refused, naming
	 * the first one (IPv6 is off in sandboxes: it could never match) */
	CHECK_INT(egress_rules_refuse_ipv6(p.rules, 6, &e), 0);
	CHECK_INT(egress_rules_refuse_ipv6(p.rules, p.n, &e), -EAFNOSUPPORT);
	CHECK(strstr(e.msg, "egress[6].target '2001:db8::/32'") != NULL);
	CHECK(strstr(e.msg, "IPv6") != NULL);

	/* to_json gives the canonical targets back, in order */
	json_t *j = egress_policy_to_json(&p);
	char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
	CHECK(strstr(s, "\"defaultAction\":\"deny\"") != NULL);
	CHECK(strstr(s, "{\"action\":\"allow\",\"target\":\"pypi.org\"},{\"action\":\"allow\",\"target\":\"*.github.com\"}") != NULL);
	/* and parses back to the same policy */
	struct egress_policy q;
	CHECK_INT(parse(s, &q, &e), 0);
	CHECK(egress_policy_equal(&p, &q));
	egress_policy_clear(&q);
	free(s);
	json_decref(j);

	struct egress_policy c;
	CHECK_INT(egress_policy_copy(&c, &p), 0);
	CHECK(egress_policy_equal(&p, &c));
	egress_policy_clear(&c);
	egress_policy_clear(&p);
}

static void test_bad(void)
{
	bad("[", "not valid JSON");
	bad("[]", "must be an object");
	bad("\"deny\"", "must be an object");
	bad("{\"defaultAction\":\"maybe\"}", "defaultAction 'maybe' is not valid");
	bad("{\"defaultAction\":1}", "defaultAction");
	bad("{\"egress\":{}}", "egress must be an array");
	bad("{\"egress\":[1]}", "egress[0] must be an object");
	bad("{\"egress\":[{\"action\":\"allow\",\"target\":\"a.com\"},{\"action\":\"permit\",\"target\":\"b.com\"}]}",
	    "egress[1].action 'permit' is not valid");
	bad("{\"egress\":[{\"action\":\"allow\"}]}", "egress[0].target is required");
	bad("{\"egress\":[{\"action\":\"allow\",\"target\":5}]}", "egress[0].target must be a string");
	bad("{\"egress\":[{\"action\":\"allow\",\"target\":\"  \"}]}", "empty target");
	bad("{\"egress\":[{\"action\":\"allow\",\"target\":\"a..com\"}]}", "empty label");
	bad("{\"egress\":[{\"action\":\"allow\",\"target\":\".a.com\"}]}", "empty label");
	bad("{\"egress\":[{\"action\":\"allow\",\"target\":\"*.a*.com\"}]}", "'*' is only allowed");
	bad("{\"egress\":[{\"action\":\"allow\",\"target\":\"a.*.com\"}]}", "'*' is only allowed");
	bad("{\"egress\":[{\"action\":\"allow\",\"target\":\"*\"}]}", "'*' is only allowed");
	bad("{\"egress\":[{\"action\":\"allow\",\"target\":\"*.\"}]}", "'*' is only");
	bad("{\"egress\":[{\"action\":\"allow\",\"target\":\"a b.com\"}]}", "character ' '");
	bad("{\"egress\":[{\"action\":\"allow\",\"target\":\"a\\u0000b.com\"}]}", "NUL");
	bad("{\"egress\":[{\"action\":\"allow\",\"target\":\"10.0.0.0/33\"}]}", "prefix length");
	bad("{\"egress\":[{\"action\":\"allow\",\"target\":\"10.0.0.0/\"}]}", "prefix length");
	bad("{\"egress\":[{\"action\":\"allow\",\"target\":\"10.0.0.0/08\"}]}", "prefix length");
	bad("{\"egress\":[{\"action\":\"allow\",\"target\":\"300.1.1.1\"}]}", "IPv4");
	bad("{\"egress\":[{\"action\":\"allow\",\"target\":\"::g\"}]}", "IPv6");
	bad("{\"egress\":[{\"action\":\"allow\",\"target\":\"::/129\"}]}", "prefix length");
	bad("{\"egress\":[{\"action\":\"allow\",\"target\":\"a.com\"}],\"egress\":[]}", "duplicate");

	/* a label of 64 characters, a name of 254 */
	char body[2048], name[300];
	memset(name, 'a', 64);
	strcpy(name + 64, ".com");
	snprintf(body, sizeof(body), "{\"egress\":[{\"action\":\"allow\",\"target\":\"%s\"}]}", name);
	bad(body, "label is longer than 63");
	name[0] = '\0';
	while (strlen(name) < 251)
		strcat(name, "abcdefghi.");
	strcat(name, "com");
	snprintf(body, sizeof(body), "{\"egress\":[{\"action\":\"allow\",\"target\":\"%s\"}]}", name);
	bad(body, "longer than 253");
	/* 253 characters is fine, and so is it with a trailing dot */
	name[253] = '\0';
	name[252] = 'x';
	snprintf(body, sizeof(body), "{\"egress\":[{\"action\":\"allow\",\"target\":\"%s.\"}]}", name);
	struct egress_policy p;
	struct error e;
	CHECK_INT(parse(body, &p, &e), 0);
	egress_policy_clear(&p);

	/* the rule count limit */
	size_t cap = 64 + (EGRESS_RULES_MAX + 1) * 40;
	char *big = malloc(cap);
	size_t off = (size_t)snprintf(big, cap, "{\"egress\":[");
	for (int i = 0; i <= EGRESS_RULES_MAX; i++)
		off += (size_t)snprintf(big + off, cap - off, "%s{\"action\":\"allow\",\"target\":\"h%d.test\"}",
					i ? "," : "", i);
	snprintf(big + off, cap - off, "]}");
	bad(big, "at most 1024");
	free(big);
}

static void test_match(void)
{
	struct egress_policy p;
	struct error e;
	CHECK_INT(parse("{\"defaultAction\":\"deny\",\"egress\":["
			"{\"action\":\"deny\",\"target\":\"bad.wild.test\"},"
			"{\"action\":\"allow\",\"target\":\"*.wild.test\"},"
			"{\"action\":\"allow\",\"target\":\"allowed.test\"},"
			"{\"action\":\"allow\",\"target\":\"bad.wild.test\"},"
			"{\"action\":\"deny\",\"target\":\"10.9.0.0/16\"},"
			"{\"action\":\"allow\",\"target\":\"10.0.0.0/8\"},"
			"{\"action\":\"allow\",\"target\":\"2001:db8::/33\"}]}",
			&p, &e),
		  0);
	int idx;
	CHECK_INT(name_action(&p, "allowed.test", &idx), EGRESS_ALLOW);
	CHECK_INT(idx, 2);
	CHECK_INT(name_action(&p, "ALLOWED.Test.", &idx), EGRESS_ALLOW);
	CHECK_INT(name_action(&p, "x.allowed.test", &idx), EGRESS_DENY);
	CHECK_INT(idx, -1);
	/* the wildcard: subdomains at any depth, not the apex, not a mere suffix */
	CHECK_INT(name_action(&p, "a.wild.test", &idx), EGRESS_ALLOW);
	CHECK_INT(idx, 1);
	CHECK_INT(name_action(&p, "a.b.wild.test", NULL), EGRESS_ALLOW);
	CHECK_INT(name_action(&p, "wild.test", &idx), EGRESS_DENY);
	CHECK_INT(idx, -1);
	CHECK_INT(name_action(&p, "notwild.test", NULL), EGRESS_DENY);
	CHECK_INT(name_action(&p, "xwild.test", NULL), EGRESS_DENY);
	/* first match wins: the deny before the wildcard */
	CHECK_INT(name_action(&p, "bad.wild.test", &idx), EGRESS_DENY);
	CHECK_INT(idx, 0);
	CHECK_INT(name_action(&p, "", NULL), EGRESS_DENY);
	CHECK_INT(name_action(&p, ".", NULL), EGRESS_DENY);
	/* address rules do not match names, name rules do not match addresses */
	CHECK_INT(name_action(&p, "10.0.0.1", NULL), EGRESS_DENY);
	CHECK_INT(addr_action(&p, "10.1.2.3", &idx), EGRESS_ALLOW);
	CHECK_INT(idx, 5);
	CHECK_INT(addr_action(&p, "10.9.200.1", &idx), EGRESS_DENY);
	CHECK_INT(idx, 4);
	CHECK_INT(addr_action(&p, "11.0.0.1", &idx), EGRESS_DENY);
	CHECK_INT(idx, -1);
	CHECK_INT(addr_action(&p, "2001:db8:7fff::1", &idx), EGRESS_ALLOW);
	CHECK_INT(addr_action(&p, "2001:db8:8000::1", &idx), EGRESS_DENY);
	CHECK_INT(idx, -1);
	/* an IPv4 rule never matches an IPv6 address */
	CHECK_INT(addr_action(&p, "::ffff:10.1.2.3", NULL), EGRESS_DENY);
	egress_policy_clear(&p);

	/* default allow with a deny rule */
	CHECK_INT(parse("{\"defaultAction\":\"allow\",\"egress\":[{\"action\":\"deny\",\"target\":\"*.denied.test\"},{\"action\":\"deny\",\"target\":\"0.0.0.0/0\"}]}",
			&p, &e),
		  0);
	CHECK_INT(name_action(&p, "x.denied.test", NULL), EGRESS_DENY);
	CHECK_INT(name_action(&p, "denied.test", NULL), EGRESS_ALLOW);
	CHECK_INT(addr_action(&p, "203.0.113.9", NULL), EGRESS_DENY);
	CHECK_INT(addr_action(&p, "2001:db8::1", NULL), EGRESS_ALLOW);
	egress_policy_clear(&p);

	/* a name longer than any DNS name gets the default */
	char longname[600];
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	egress_policy_init(&p, EGRESS_ALLOW);
	CHECK_INT(name_action(&p, longname, &idx), EGRESS_ALLOW);
	CHECK_INT(idx, -1);
}

static void test_patch_delete(void)
{
	struct egress_policy p;
	struct error e;
	CHECK_INT(parse("{\"defaultAction\":\"deny\",\"egress\":["
			"{\"action\":\"allow\",\"target\":\"a.test\"},"
			"{\"action\":\"deny\",\"target\":\"b.test\"},"
			"{\"action\":\"allow\",\"target\":\"10.0.0.0/8\"}]}",
			&p, &e),
		  0);
	json_t *arr = json_loads("[{\"action\":\"allow\",\"target\":\"B.test.\"},"
				 "{\"action\":\"deny\",\"target\":\"c.test\"},"
				 "{\"action\":\"allow\",\"target\":\"c.test\"}]",
				 0, NULL);
	struct egress_rule *rules;
	size_t n;
	CHECK_INT(egress_rules_from_json(arr, &rules, &n, &e), 0);
	json_decref(arr);
	CHECK_U64(n, 3);
	CHECK_INT(egress_policy_patch(&p, rules, n, &e), 0);
	free(rules);
	/* new rules first, the first of a target wins, the replaced old rule is gone */
	CHECK_U64(p.n, 4);
	CHECK_STR(p.rules[0].target, "b.test");
	CHECK_INT(p.rules[0].action, EGRESS_ALLOW);
	CHECK_STR(p.rules[1].target, "c.test");
	CHECK_INT(p.rules[1].action, EGRESS_DENY);
	CHECK_STR(p.rules[2].target, "a.test");
	CHECK_STR(p.rules[3].target, "10.0.0.0/8");
	CHECK_INT(p.default_action, EGRESS_DENY);
	CHECK_INT(name_action(&p, "b.test", NULL), EGRESS_ALLOW);

	/* an empty patch array is refused */
	arr = json_array();
	CHECK(egress_rules_from_json(arr, &rules, &n, &e) == 0 && n == 0);
	json_decref(arr);

	/* delete by target, in any spelling of it; unknown and invalid targets are ignored */
	const char *del[] = {"A.TEST.", "10.1.1.1/8", "nothing.test", "not a target"};
	CHECK_INT(egress_policy_delete(&p, del, 4), 2);
	CHECK_U64(p.n, 2);
	CHECK_STR(p.rules[0].target, "b.test");
	CHECK_STR(p.rules[1].target, "c.test");
	const char *none[] = {"zzz.test"};
	CHECK_INT(egress_policy_delete(&p, none, 1), 0);
	CHECK_U64(p.n, 2);

	/* the limit applies to the merged policy */
	struct egress_rule *many = calloc(EGRESS_RULES_MAX, sizeof(*many));
	for (int i = 0; i < EGRESS_RULES_MAX; i++) {
		char t[32];
		snprintf(t, sizeof(t), "h%d.test", i);
		CHECK_INT(egress_target_parse(t, &many[i], NULL), 0);
	}
	CHECK_INT(egress_policy_patch(&p, many, EGRESS_RULES_MAX, &e), -E2BIG);
	CHECK(strstr(e.msg, "at most 1024") != NULL);
	CHECK_U64(p.n, 2); /* unchanged */
	CHECK_INT(egress_policy_patch(&p, many, EGRESS_RULES_MAX - 2, &e), 0);
	CHECK_U64(p.n, EGRESS_RULES_MAX);
	free(many);
	egress_policy_clear(&p);
}

int main(void)
{
	test_parse();
	test_bad();
	test_match();
	test_patch_delete();
	return check_summary("policy");
}
