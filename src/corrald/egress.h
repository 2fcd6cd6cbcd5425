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

/* Per sandbox with a network: its policy in force, and what its resolver queries did. Its mode
 * is sb->net.mode (the data plane's, kept in the record's "network"). */
#define EGRESS_LEARNED_CACHE 32

struct sb_egress {
	struct egress_policy policy;
	bool policy_given; /* from the create's networkPolicy or the policy API, else the default */
	uint64_t dns_allowed, dns_denied; /* since corrald started (not persisted) */
	/* dns+nft: addresses learned lately and when their nftables element expires, so an answer
	 * repeated within its slack costs no nftables transaction (memory only; emptied whenever
	 * the learned set is flushed) */
	struct {
		struct in_addr addr;
		int64_t expires_ms;
	} learned[EGRESS_LEARNED_CACHE];
	unsigned n_learned;
};

/* Per corrald (the flags are the data plane's: d->egress_mode, egress_default, dns_upstream). */
struct corrald_egress {
	struct resolver *resolver; /* NULL until egress_start() */
	struct event *droplog_ev;  /* the host's dropped packets (--log-level debug), or NULL */
	int droplog_fd;            /* its fd, when droplog_ev is set */
};

/*
 * A create's networkPolicy (NULL or JSON null: none) into a new struct sb_egress: the given
 * policy, or the server's default (allow or deny with no rules) when there is none. -EINVAL with
 * err naming the rule; -ENOMEM.
 */
int egress_from_create(enum egress_action server_default, json_t *network_policy,
		       struct sb_egress **ret, struct error *err);
void sb_egress_free(struct sb_egress *e);

/* The record's "egress" object and back (a record without one: NULL, no policy). */
json_t *egress_to_record(const struct sb_egress *e);
int egress_from_record(json_t *j, struct sb_egress **ret, struct error *err);
/* Add the reply's "networkPolicy" (the policy in force) to o, when there is one. */
void egress_to_api(const struct sb_egress *e, json_t *o);
/* Add the queries allowed and denied to the stats reply's "network" object (NULL: none). */
void egress_stats_add(const struct sandbox *sb, json_t *network);

/* The egress token of sandbox id (hex, NUL-terminated), from the proxy secret. */
void egress_token_for(const struct corrald *d, const char *id, char out[65]);

/* Put sb's changed policy into nftables (a sandbox not added yet gets it at its add: its
 * sb->net.policy is this policy). Flushes its learned addresses. */
int egress_apply(struct corrald *d, struct sandbox *sb, struct error *err);

/* Start the resolver on the bridge gateway's port 53, forwarding to --dns-upstream (default: the
 * host's resolv.conf nameservers). */
int egress_start(struct corrald *d, struct error *err);
void egress_stop(struct corrald *d);

/* The proxy route for port 18080: /policy and /healthz. rest is the path after the port. */
void egress_api(struct corrald *d, struct evhttp_request *req, struct sandbox *sb,
		const char *rest);
