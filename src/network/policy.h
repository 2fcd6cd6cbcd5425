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
