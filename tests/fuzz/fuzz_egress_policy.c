/*
 * Fuzz target for the egress policy parser (the create's networkPolicy and the policy API's
 * bodies). Beyond "never crashes", it checks the contract: an accepted policy serializes to JSON
 * that parses back to the same policy, every rule's target is in canonical form (parsing it again
 * gives itself), and matching and PATCH/DELETE with the policy's own rules keep the invariants.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "network/policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 256 * 1024)
		return 0;
	struct egress_policy p;
	struct error e = {0};
	if (egress_policy_parse((const char *)data, size, &p, &e) < 0) {
		if (!e.msg[0])
			abort(); /* a refusal always says why */
		egress_policy_clear(&p);
		return 0;
	}
	if (p.n > EGRESS_RULES_MAX)
		abort();
	json_t *j = egress_policy_to_json(&p);
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	if (!s)
		abort();
	struct egress_policy q;
	if (egress_policy_parse(s, strlen(s), &q, &e) < 0 || !egress_policy_equal(&p, &q))
		abort();
	for (size_t i = 0; i < p.n; i++) {
		struct egress_rule r;
		if (egress_target_parse(p.rules[i].target, &r, NULL) < 0 ||
		    strcmp(r.target, p.rules[i].target) != 0 || r.kind != p.rules[i].kind)
			abort();
		enum egress_action a;
		if (r.kind == EGRESS_NAME && egress_policy_match_name(&p, r.target, &a) > (int)i)
			abort(); /* a rule's own name matches it or an earlier rule */
		if (r.kind == EGRESS_CIDR && egress_policy_match_addr(&p, r.family, r.addr, &a) > (int)i)
			abort();
	}
	/* PATCH with its own rules changes nothing but order-preserving dedup; DELETE all empties it */
	if (egress_policy_patch(&q, p.rules, p.n, &e) == 0) {
		const char **targets = calloc(q.n + 1, sizeof(*targets));
		for (size_t i = 0; i < q.n; i++)
			targets[i] = q.rules[i].target;
		struct egress_policy c;
		if (egress_policy_copy(&c, &q) < 0)
			abort();
		if (egress_policy_delete(&c, targets, q.n) != (ssize_t)q.n || c.n != 0)
			abort();
		egress_policy_clear(&c);
		free(targets);
	}
	egress_policy_clear(&q);
	free(s);
	json_decref(j);
	egress_policy_clear(&p);
	return 0;
}
