/*
 * corrald's side of the egress policy (docs/network.md): each sandbox's policy in its record and
 * its reply, the resolver's hooks (who asked, count, learn), and the reference sidecar's policy
 * API, served by corrald itself on port 18080 of each sandbox's proxy route (never forwarded into
 * the sandbox: a sandbox cannot change its own policy).
 */
#pragma once

#include <event2/http.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "network/net.h"
#include "network/policy.h"
#include "network/resolver.h"
#include "shared/error.h"

#define EGRESS_PORT 18080
#define EGRESS_TOKEN_HEADER "OPENSANDBOX-EGRESS-AUTH"

struct corrald;
struct sandbox;

/* Per sandbox: its effective policy and mode, and what its resolver queries did. */
struct sb_egress {
	struct egress_policy policy;
	bool policy_given;  /* from the create's networkPolicy, else the server default */
	enum net_mode mode; /* as it was created */
	uint64_t dns_allowed, dns_denied; /* since corrald started (not persisted) */
};

/* Per corrald. */
struct corrald_egress {
	struct net *net;            /* NULL: sandboxes have no network (policies are kept, moot) */
	struct resolver *resolver;  /* NULL until egress_start() */
	enum net_mode mode;         /* --egress-mode */
	enum egress_action default_action; /* --egress-default */
	struct sockaddr_storage upstream[RESOLVER_UPSTREAM_MAX]; /* --dns-upstream */
	size_t n_upstream;
};

/*
 * A create's networkPolicy (NULL or JSON null: none) into a new struct sb_egress: the given
 * policy, or the server's default (allow or deny with no rules) when there is none. -EINVAL with
 * err naming the rule; -ENOMEM.
 */
int egress_from_create(const struct corrald_egress *eg, json_t *network_policy,
		       struct sb_egress **ret, struct error *err);
void sb_egress_free(struct sb_egress *e);

/* The record's "egress" object and back (a record without one: NULL, no policy). */
json_t *egress_to_record(const struct sb_egress *e);
int egress_from_record(json_t *j, struct sb_egress **ret, struct error *err);
/* Add the reply's "networkPolicy" (effective) and "egressMode" to o, when sb has a policy. */
void egress_to_api(const struct sb_egress *e, json_t *o);
/* The stats reply's "network" object: queries allowed and denied, packets dropped. */
json_t *egress_stats_json(struct corrald *d, const struct sandbox *sb);

/* The egress token of sandbox id (hex, NUL-terminated), from the proxy secret. */
void egress_token_for(const struct corrald *d, const char *id, char out[65]);

/* Put sb's policy into nftables (a create, after its network is set up). */
int egress_apply(struct corrald *d, struct sandbox *sb, struct error *err);

/* Start the resolver on the bridge gateway's port 53. */
int egress_start(struct corrald *d, struct in_addr gateway, struct error *err);
void egress_stop(struct corrald *d);

/* The proxy route for port 18080: /policy and /healthz. rest is the path after the port. */
void egress_api(struct corrald *d, struct evhttp_request *req, struct sandbox *sb,
		const char *rest);
