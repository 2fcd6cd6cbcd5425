/*
 * Fuzz target for the resolver's reading of a sandbox's DNS query (ldns's wire parser plus
 * resolver.c's name text). Beyond "never crashes", it checks the contract: an accepted query's
 * name is lowercase text of labels of [a-z0-9_-?] joined by single dots, never longer than a DNS
 * name, and judging it against a policy with a wildcard rule agrees with a suffix check.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "network/policy.h"
#include "network/resolver.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct resolver_query q;
	if (resolver_parse_query(data, size, &q) < 0)
		return 0;
	size_t n = strlen(q.name);
	if (n > 253 + 1)
		abort();
	for (size_t i = 0; i < n; i++) {
		char c = q.name[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
			  c == '?' || (c == '.' && i > 0 && i + 1 < n && q.name[i - 1] != '.');
		if (!ok)
			abort();
	}
	struct egress_policy p;
	struct egress_rule r;
	egress_policy_init(&p, EGRESS_DENY);
	if (egress_target_parse("*.wild.test", &r, NULL) < 0)
		abort();
	r.action = EGRESS_ALLOW;
	p.rules = &r;
	p.n = 1;
	enum egress_action a;
	egress_policy_match_name(&p, q.name, &a);
	bool sub = n > strlen(".wild.test") && strcmp(q.name + n - strlen(".wild.test"), ".wild.test") == 0;
	if ((a == EGRESS_ALLOW) != sub)
		abort();
	return 0;
}
