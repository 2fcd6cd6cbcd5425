/*
 * An egress policy: OpenSandbox's networkPolicy {defaultAction, egress: [{action, target}]}, plus
 * IP and CIDR targets. Pure data and matching; no I/O (the resolver and the nftables side consume
 * it: resolver.h, net.h).
 *
 * Semantics (docs/network.md):
 *  - rules in order, first match wins; no match -> default_action (deny when omitted);
 *  - "example.com" matches that name only; "*.example.com" its subdomains, not the apex;
 *    names are compared lowercased and without a trailing dot;
 *  - "192.0.2.7", "10.0.0.0/8", "2001:db8::/32": addresses, matched by connections (dns+nft)
 *    and by the addresses in a name's answer.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include "shared/error.h"

#define EGRESS_RULES_MAX 1024
#define EGRESS_TARGET_MAX 253 /* a DNS name's longest text form */

enum egress_action {
	EGRESS_DENY,
	EGRESS_ALLOW,
};

enum egress_kind {
	EGRESS_NAME,     /* "example.com" */
	EGRESS_WILDCARD, /* "*.example.com" */
	EGRESS_CIDR,     /* an address or a network */
};

struct egress_rule {
	enum egress_action action;
	enum egress_kind kind;
	char target[EGRESS_TARGET_MAX + 1]; /* canonical: lowercased name, or "addr/prefix" */
	int family;                          /* EGRESS_CIDR: AF_INET or AF_INET6 */
	uint8_t addr[16];                    /* EGRESS_CIDR: the network, host bits zero */
	uint8_t prefix;                      /* EGRESS_CIDR */
};

struct egress_policy {
	enum egress_action default_action;
	size_t n;
	struct egress_rule *rules;
};

/* The modes of the reference's GET /policy: no rules and allow, no rules and deny, or rules. */
#define EGRESS_MODE_ALLOW_ALL "allow_all"
#define EGRESS_MODE_DENY_ALL "deny_all"
#define EGRESS_MODE_ENFORCING "enforcing"

/* policy.c */
const char *egress_action_name(enum egress_action a);
/* A policy with no rules. */
void egress_policy_init(struct egress_policy *p, enum egress_action default_action);
void egress_policy_clear(struct egress_policy *p);
int egress_policy_copy(struct egress_policy *dst, const struct egress_policy *src);
/* Whether two policies have the same default and the same rules in the same order. */
bool egress_policy_equal(const struct egress_policy *a, const struct egress_policy *b);

/*
 * Parse one rule {"action", "target"}. The action is allow or deny (any case; missing or empty is
 * deny, as in the reference); the target a name, "*.name", an IP address or a CIDR network. On
 * -EINVAL err says what is wrong, e.g. "egress[3].target '*.a*.com': ...", naming the rule by its
 * index.
 */
int egress_rule_from_json(json_t *j, size_t index, struct egress_rule *ret, struct error *err);
/* A JSON array of rules (PATCH /policy's body): at least one, at most EGRESS_RULES_MAX. */
int egress_rules_from_json(json_t *arr, struct egress_rule **ret, size_t *ret_n, struct error *err);
/*
 * {"defaultAction", "egress": [...]}: null or {} is deny-all; a missing defaultAction is deny.
 * Unknown keys are ignored (the reference's decoder ignores them too).
 */
int egress_policy_from_json(json_t *j, struct egress_policy *ret, struct error *err);
/* The same from text (the policy API's body, at most 1 MiB): empty or blank is deny-all. */
int egress_policy_parse(const char *buf, size_t len, struct egress_policy *ret, struct error *err);
/* {"defaultAction", "egress": [{"action", "target"}...]}, targets in canonical form. */
json_t *egress_policy_to_json(const struct egress_policy *p);
/* EGRESS_MODE_*: allow_all / deny_all without rules, enforcing with some. */
const char *egress_policy_mode(const struct egress_policy *p);

/*
 * Canonical form of a target as rules store it and DELETE compares it: a name lowercased without
 * surrounding blanks and the trailing dot; an address in inet_ntop form; a network as
 * "addr/prefix" with the host bits cleared. -EINVAL (err says why) when it is none of these.
 */
int egress_target_parse(const char *target, struct egress_rule *ret, struct error *err);

/*
 * The action for a DNS name (any case, with or without the trailing dot): the first NAME or
 * WILDCARD rule that matches, else the default. Returns the index of that rule or -1.
 */
int egress_policy_match_name(const struct egress_policy *p, const char *name,
			     enum egress_action *ret);
/*
 * The action for an address (family AF_INET or AF_INET6, addr 4 or 16 bytes in network order):
 * the first CIDR rule that contains it, else the default. Returns its index or -1.
 */
int egress_policy_match_addr(const struct egress_policy *p, int family, const void *addr,
			     enum egress_action *ret);

/*
 * IPv6 is off in every sandbox (docs/network.md), so an IPv6 address or CIDR rule could never
 * match: what a client sends (create's networkPolicy, the policy API) is refused with err naming
 * the first such rule, egress[index].target (-EAFNOSUPPORT). A stored record is not checked.
 */
int egress_rules_refuse_ipv6(const struct egress_rule *rules, size_t n, struct error *err);

/*
 * PATCH: rules (already parsed) go first, in their order, and win: an existing rule with the same
 * target is dropped; among the new ones the first of a target wins. The default is unchanged.
 * -E2BIG (err says so) when the result would have more than EGRESS_RULES_MAX rules; p unchanged
 * on failure.
 */
int egress_policy_patch(struct egress_policy *p, const struct egress_rule *rules, size_t n,
			struct error *err);
/* DELETE: drop every rule whose target is one of targets (compared in canonical form). Returns how
 * many rules were removed, or -ENOMEM (p unchanged). */
ssize_t egress_policy_delete(struct egress_policy *p, const char *const *targets, size_t n);
