/*
 * Egress policies: parsing and validation of OpenSandbox's networkPolicy, matching, and the
 * policy API's PATCH and DELETE. Pure functions over memory (unit test tests/unit/test_policy.c,
 * fuzz target tests/fuzz/fuzz_egress_policy.c).
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "network/policy.h"

#define POLICY_BODY_MAX (1024 * 1024) /* the reference reads at most 1 MiB of a policy body */
#define LABEL_MAX 63

const char *egress_action_name(enum egress_action a)
{
	return a == EGRESS_ALLOW ? "allow" : "deny";
}

void egress_policy_init(struct egress_policy *p, enum egress_action default_action)
{
	p->default_action = default_action;
	p->n = 0;
	p->rules = NULL;
}

void egress_policy_clear(struct egress_policy *p)
{
	if (!p)
		return;
	free(p->rules);
	p->rules = NULL;
	p->n = 0;
}

int egress_policy_copy(struct egress_policy *dst, const struct egress_policy *src)
{
	struct egress_rule *rules = NULL;
	if (src->n) {
		rules = malloc(src->n * sizeof(*rules));
		if (!rules)
			return -ENOMEM;
		memcpy(rules, src->rules, src->n * sizeof(*rules));
	}
	dst->default_action = src->default_action;
	dst->n = src->n;
	dst->rules = rules;
	return 0;
}

bool egress_policy_equal(const struct egress_policy *a, const struct egress_policy *b)
{
	if (a->default_action != b->default_action || a->n != b->n)
		return false;
	for (size_t i = 0; i < a->n; i++)
		if (a->rules[i].action != b->rules[i].action ||
		    strcmp(a->rules[i].target, b->rules[i].target) != 0)
			return false;
	return true;
}

static bool is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* s[0..len) without surrounding blanks into out (NUL-terminated); false when it does not fit. */
static bool trim_into(const char *s, size_t len, char *out, size_t outlen)
{
	while (len && is_blank(*s))
		s++, len--;
	while (len && is_blank(s[len - 1]))
		len--;
	if (len >= outlen)
		return false;
	memcpy(out, s, len);
	out[len] = '\0';
	return true;
}

/* Printable excerpt of an offending string for an error message. */
static void excerpt(const char *s, char *out, size_t outlen)
{
	size_t i = 0;
	for (; *s && i + 4 < outlen && i < 64; s++)
		out[i++] = isprint((unsigned char)*s) ? *s : '?';
	if (*s && i + 4 < outlen) {
		memcpy(out + i, "...", 3);
		i += 3;
	}
	out[i] = '\0';
}

/* Parse an address or "addr/prefix" into r (kind CIDR). */
static int parse_cidr(const char *t, struct egress_rule *r, struct error *err)
{
	char addr[INET6_ADDRSTRLEN + 8];
	const char *slash = strchr(t, '/');
	size_t alen = slash ? (size_t)(slash - t) : strlen(t);
	if (alen >= sizeof(addr))
		return error_set(err, EINVAL, "not an IP address");
	memcpy(addr, t, alen);
	addr[alen] = '\0';
	int family = strchr(addr, ':') ? AF_INET6 : AF_INET;
	uint8_t bytes[16] = {0};
	if (inet_pton(family, addr, bytes) != 1)
		return error_set(err, EINVAL, "not a valid IPv%d address", family == AF_INET ? 4 : 6);
	unsigned bits = family == AF_INET ? 32 : 128, prefix = bits;
	if (slash) {
		const char *p = slash + 1;
		if (!*p || strlen(p) > 3 || strspn(p, "0123456789") != strlen(p) ||
		    (p[0] == '0' && p[1]))
			return error_set(err, EINVAL, "the prefix length must be a number from 0 to %u",
					 bits);
		prefix = (unsigned)atoi(p);
		if (prefix > bits)
			return error_set(err, EINVAL, "the prefix length must be a number from 0 to %u",
					 bits);
	}
	/* Clear the host bits: "10.1.2.3/8" is the network 10.0.0.0/8. */
	for (unsigned i = 0; i < bits / 8; i++) {
		if (i * 8 >= prefix)
			bytes[i] = 0;
		else if (i * 8 + 8 > prefix)
			bytes[i] &= (uint8_t)(0xff << (8 - (prefix - i * 8)));
	}
	char canon[INET6_ADDRSTRLEN];
	if (!inet_ntop(family, bytes, canon, sizeof(canon)))
		return error_set(err, EINVAL, "not a valid address");
	r->kind = EGRESS_CIDR;
	r->family = family;
	memcpy(r->addr, bytes, sizeof(r->addr));
	r->prefix = (uint8_t)prefix;
	if (slash)
		snprintf(r->target, sizeof(r->target), "%s/%u", canon, prefix);
	else
		snprintf(r->target, sizeof(r->target), "%s", canon);
	return 0;
}

/* Check a lowercased name without the trailing dot: labels of 1..63 of [a-z0-9_-]. */
static int check_name(const char *n, struct error *err)
{
	size_t len = strlen(n);
	if (len == 0)
		return error_set(err, EINVAL, "empty name");
	if (len > EGRESS_TARGET_MAX)
		return error_set(err, EINVAL, "longer than %d characters", EGRESS_TARGET_MAX);
	const char *label = n;
	for (const char *p = n;; p++) {
		if (*p == '.' || *p == '\0') {
			size_t l = (size_t)(p - label);
			if (l == 0)
				return error_set(err, EINVAL, "empty label (two dots, or a leading dot)");
			if (l > LABEL_MAX)
				return error_set(err, EINVAL, "a label is longer than %d characters",
						 LABEL_MAX);
			if (*p == '\0')
				return 0;
			label = p + 1;
			continue;
		}
		unsigned char c = (unsigned char)*p;
		if (c == '*')
			return error_set(err, EINVAL,
					 "'*' is only allowed as the whole first label ('*.example.com')");
		if (!(c >= 'a' && c <= 'z') && !(c >= '0' && c <= '9') && c != '-' && c != '_')
			return error_set(err, EINVAL,
					 "character '%c' is not allowed in a name (letters, digits, '-', '_', '.')",
					 isprint(c) ? c : '?');
	}
}

int egress_target_parse(const char *target, struct egress_rule *ret, struct error *err)
{
	char t[EGRESS_TARGET_MAX + 2];
	if (!trim_into(target, strlen(target), t, sizeof(t)))
		return error_set(err, EINVAL, "longer than %d characters", EGRESS_TARGET_MAX);
	if (!*t)
		return error_set(err, EINVAL, "empty target");
	for (char *p = t; *p; p++)
		*p = (char)tolower((unsigned char)*p);
	memset(ret->addr, 0, sizeof(ret->addr));
	ret->family = 0;
	ret->prefix = 0;
	/* An address has a ':' (IPv6) or only digits, dots and a '/' (IPv4). */
	if (strchr(t, ':') || strchr(t, '/') || strspn(t, "0123456789.") == strlen(t))
		return parse_cidr(t, ret, err);
	size_t len = strlen(t);
	if (t[len - 1] == '.')
		t[--len] = '\0';
	bool wild = strncmp(t, "*.", 2) == 0;
	int r = check_name(wild ? t + 2 : t, err);
	if (r < 0)
		return r;
	if (wild && len - 2 > EGRESS_TARGET_MAX - 2)
		return error_set(err, EINVAL, "longer than %d characters", EGRESS_TARGET_MAX);
	ret->kind = wild ? EGRESS_WILDCARD : EGRESS_NAME;
	memcpy(ret->target, t, len + 1);
	return 0;
}

static int parse_action(json_t *a, enum egress_action *ret)
{
	if (!a || json_is_null(a)) {
		*ret = EGRESS_DENY;
		return 0;
	}
	if (!json_is_string(a))
		return -EINVAL;
	char s[16];
	if (!trim_into(json_string_value(a), json_string_length(a), s, sizeof(s)))
		return -EINVAL;
	if (!*s || strcasecmp(s, "deny") == 0)
		*ret = EGRESS_DENY;
	else if (strcasecmp(s, "allow") == 0)
		*ret = EGRESS_ALLOW;
	else
		return -EINVAL;
	return 0;
}

int egress_rule_from_json(json_t *j, size_t index, struct egress_rule *ret, struct error *err)
{
	if (!json_is_object(j))
		return error_set(err, EINVAL, "egress[%zu] must be an object {\"action\", \"target\"}",
				 index);
	json_t *a = json_object_get(j, "action");
	if (parse_action(a, &ret->action) < 0) {
		char ex[80] = "(not a string)";
		if (json_is_string(a))
			excerpt(json_string_value(a), ex, sizeof(ex));
		return error_set(err, EINVAL, "egress[%zu].action '%s' is not valid: use allow or deny",
				 index, ex);
	}
	json_t *t = json_object_get(j, "target");
	if (!t || json_is_null(t))
		return error_set(err, EINVAL, "egress[%zu].target is required", index);
	if (!json_is_string(t))
		return error_set(err, EINVAL, "egress[%zu].target must be a string", index);
	const char *ts = json_string_value(t);
	if (strlen(ts) != json_string_length(t))
		return error_set(err, EINVAL, "egress[%zu].target contains a NUL character", index);
	struct error e = {0};
	if (egress_target_parse(ts, ret, &e) < 0) {
		char ex[80];
		excerpt(ts, ex, sizeof(ex));
		return error_set(err, EINVAL,
				 "egress[%zu].target '%s' is not a valid target (a name, '*.name', an IP address or a CIDR network): %s",
				 index, ex, e.msg);
	}
	return 0;
}

int egress_rules_refuse_ipv6(const struct egress_rule *rules, size_t n, struct error *err)
{
	for (size_t i = 0; i < n; i++)
		if (rules[i].kind == EGRESS_CIDR && rules[i].family == AF_INET6)
			return error_set(err, EAFNOSUPPORT,
					 "egress[%zu].target '%s' is an IPv6 address: IPv6 is off in sandboxes, so the rule could never match (use IPv4 addresses or names)",
					 i, rules[i].target);
	return 0;
}

int egress_rules_from_json(json_t *arr, struct egress_rule **ret, size_t *ret_n, struct error *err)
{
	if (!json_is_array(arr))
		return error_set(err, EINVAL, "egress must be an array of rules {\"action\", \"target\"}");
	size_t n = json_array_size(arr);
	if (n > EGRESS_RULES_MAX)
		return error_set(err, E2BIG, "egress has %zu rules: at most %d are allowed", n,
				 EGRESS_RULES_MAX);
	struct egress_rule *rules = NULL;
	if (n) {
		rules = calloc(n, sizeof(*rules));
		if (!rules)
			return error_set(err, ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < n; i++) {
		int r = egress_rule_from_json(json_array_get(arr, i), i, &rules[i], err);
		if (r < 0) {
			free(rules);
			return r;
		}
	}
	*ret = rules;
	*ret_n = n;
	return 0;
}

int egress_policy_from_json(json_t *j, struct egress_policy *ret, struct error *err)
{
	egress_policy_init(ret, EGRESS_DENY);
	if (!j || json_is_null(j))
		return 0;
	if (!json_is_object(j))
		return error_set(err, EINVAL,
				 "the policy must be an object {\"defaultAction\", \"egress\": [{\"action\", \"target\"}]}");
	enum egress_action def;
	json_t *da = json_object_get(j, "defaultAction");
	if (parse_action(da, &def) < 0) {
		char ex[80] = "(not a string)";
		if (json_is_string(da))
			excerpt(json_string_value(da), ex, sizeof(ex));
		return error_set(err, EINVAL, "defaultAction '%s' is not valid: use allow or deny", ex);
	}
	json_t *eg = json_object_get(j, "egress");
	struct egress_rule *rules = NULL;
	size_t n = 0;
	if (eg && !json_is_null(eg)) {
		int r = egress_rules_from_json(eg, &rules, &n, err);
		if (r < 0)
			return r;
	}
	ret->default_action = def;
	ret->rules = rules;
	ret->n = n;
	return 0;
}

int egress_policy_parse(const char *buf, size_t len, struct egress_policy *ret, struct error *err)
{
	egress_policy_init(ret, EGRESS_DENY);
	if (len > POLICY_BODY_MAX)
		return error_set(err, E2BIG, "the policy is larger than %d bytes", POLICY_BODY_MAX);
	size_t i = 0;
	while (i < len && is_blank(buf[i]))
		i++;
	if (i == len)
		return 0;
	json_error_t je;
	json_t *j = json_loadb(buf, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
	if (!j)
		return error_set(err, EINVAL, "not valid JSON: %s (line %d, column %d)", je.text,
				 je.line, je.column);
	int r = egress_policy_from_json(j, ret, err);
	json_decref(j);
	return r;
}

json_t *egress_policy_to_json(const struct egress_policy *p)
{
	json_t *eg = json_array();
	if (!eg)
		return NULL;
	for (size_t i = 0; i < p->n; i++)
		if (json_array_append_new(eg, json_pack("{s:s, s:s}", "action",
							egress_action_name(p->rules[i].action),
							"target", p->rules[i].target)) < 0) {
			json_decref(eg);
			return NULL;
		}
	return json_pack("{s:s, s:o}", "defaultAction", egress_action_name(p->default_action),
			 "egress", eg);
}

const char *egress_policy_mode(const struct egress_policy *p)
{
	if (p->n)
		return EGRESS_MODE_ENFORCING;
	return p->default_action == EGRESS_ALLOW ? EGRESS_MODE_ALLOW_ALL : EGRESS_MODE_DENY_ALL;
}

int egress_policy_match_name(const struct egress_policy *p, const char *name,
			     enum egress_action *ret)
{
	char n[EGRESS_TARGET_MAX + 2];
	size_t len = strlen(name);
	if (len && name[len - 1] == '.')
		len--;
	if (len < sizeof(n)) {
		for (size_t i = 0; i < len; i++)
			n[i] = (char)tolower((unsigned char)name[i]);
		n[len] = '\0';
		for (size_t i = 0; i < p->n; i++) {
			const struct egress_rule *r = &p->rules[i];
			bool hit = false;
			if (r->kind == EGRESS_NAME) {
				hit = strcmp(n, r->target) == 0;
			} else if (r->kind == EGRESS_WILDCARD) {
				/* "*.example.com": ".example.com" ends n, and n is longer. */
				size_t sl = strlen(r->target) - 1;
				hit = len > sl && memcmp(n + len - sl, r->target + 1, sl) == 0;
			}
			if (hit) {
				*ret = r->action;
				return (int)i;
			}
		}
	}
	/* A name too long to be a DNS name matches no rule. */
	*ret = p->default_action;
	return -1;
}

static bool prefix_contains(const struct egress_rule *r, const uint8_t *a)
{
	unsigned full = r->prefix / 8, rest = r->prefix % 8;
	if (memcmp(r->addr, a, full) != 0)
		return false;
	if (rest) {
		uint8_t mask = (uint8_t)(0xff << (8 - rest));
		if ((a[full] & mask) != r->addr[full])
			return false;
	}
	return true;
}

int egress_policy_match_addr(const struct egress_policy *p, int family, const void *addr,
			     enum egress_action *ret)
{
	for (size_t i = 0; i < p->n; i++) {
		const struct egress_rule *r = &p->rules[i];
		if (r->kind == EGRESS_CIDR && r->family == family && prefix_contains(r, addr)) {
			*ret = r->action;
			return (int)i;
		}
	}
	*ret = p->default_action;
	return -1;
}

static bool has_target(const struct egress_rule *rules, size_t n, const char *target)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(rules[i].target, target) == 0)
			return true;
	return false;
}

int egress_policy_patch(struct egress_policy *p, const struct egress_rule *rules, size_t n,
			struct error *err)
{
	if (n > EGRESS_RULES_MAX || p->n > EGRESS_RULES_MAX)
		return error_set(err, E2BIG, "the policy would have more than %d rules",
				 EGRESS_RULES_MAX);
	struct egress_rule *out = calloc(n + p->n ? n + p->n : 1, sizeof(*out));
	if (!out)
		return error_set(err, ENOMEM, "out of memory");
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (!has_target(out, k, rules[i].target))
			out[k++] = rules[i];
	size_t added = k;
	for (size_t i = 0; i < p->n; i++)
		if (!has_target(out, added, p->rules[i].target))
			out[k++] = p->rules[i];
	if (k > EGRESS_RULES_MAX) {
		free(out);
		return error_set(err, E2BIG, "the policy would have %zu rules: at most %d are allowed",
				 k, EGRESS_RULES_MAX);
	}
	free(p->rules);
	p->rules = out;
	p->n = k;
	return 0;
}

ssize_t egress_policy_delete(struct egress_policy *p, const char *const *targets, size_t n)
{
	/* Canonical forms first: a target that is not valid matches no rule. */
	char(*canon)[EGRESS_TARGET_MAX + 1] = n ? calloc(n, sizeof(*canon)) : NULL;
	if (n && !canon)
		return -ENOMEM;
	size_t m = 0;
	for (size_t j = 0; j < n; j++) {
		struct egress_rule t;
		if (egress_target_parse(targets[j], &t, NULL) == 0)
			memcpy(canon[m++], t.target, sizeof(t.target));
	}
	size_t k = 0, removed = 0;
	for (size_t i = 0; i < p->n; i++) {
		bool drop = false;
		for (size_t j = 0; j < m && !drop; j++)
			drop = strcmp(canon[j], p->rules[i].target) == 0;
		if (drop)
			removed++;
		else
			p->rules[k++] = p->rules[i];
	}
	p->n = k;
	free(canon);
	return (ssize_t)removed;
}
