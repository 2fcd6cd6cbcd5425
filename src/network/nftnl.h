/* The hot nftables operations through libnftnl (nftnl.c): private to libnetwork. 0 or -errno. */
#pragma once

#include <net/if.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "network/policy.h"

/* A sandbox's nftables objects, by name (net.c makes the names). */
struct nftnl_sb {
	const char *table;      /* inet and bridge table */
	const char *chain;      /* its chain, the src4 map's goto target */
	const char *learn_set;  /* its learned addresses */
	uint32_t learn_set_size;
	const char *counter;    /* its drop counter, the drops map's target */
	const char *drop_chain; /* what "deny" goes to */
	const char *veth;       /* its bridge port */
	struct in_addr addr;
	bool enforce;           /* dns+nft: the learned set, the policy's rules, its default */
	const struct egress_policy *policy; /* NULL: no rules */
	enum egress_action default_action;
};

/* The set, counter and chain with its rules, and the four map elements, in one transaction. */
int nftnl_sandbox_add(const struct nftnl_sb *sb);
/* The chain's rules replaced (and the learned set emptied when forget_learned), in one
 * transaction. */
int nftnl_sandbox_rules(const struct nftnl_sb *sb, bool forget_learned);
/* The rules of n sandboxes' chains replaced (nftnl_sandbox_rules() without the learned sets), in
 * one transaction. */
int nftnl_sandboxes_rules(const struct nftnl_sb *sbs, size_t n);

/* Add addr to set (table inet "table") with timeout_ms, restarting its timeout if present: by
 * the add alone when in_place (the kernel updates timeouts: Linux 6.10+), else add, delete, add. */
int nftnl_elem_refresh(const char *table, const char *set, const void *addr, size_t alen,
		       uint64_t timeout_ms, bool in_place);
/* Packets of the named counter object of table inet "table". */
int nftnl_counter_packets(const char *table, const char *name, uint64_t *ret);
