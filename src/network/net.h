/*
 * The data plane of sandbox networking (docs/network.md): a bridge with the gateway address, NAT
 * out of one uplink, one nftables table of corral's own, and per sandbox a veth pair, an address and
 * the nftables state that enforces its egress policy on the host side of the veth.
 *
 * Kernel objects, all named from cfg->name (default "corral"):
 *   bridge NAME                    gateway address (first host of the subnet), IPv6 off, every port
 *                                  isolated (no sandbox->sandbox frames)
 *   veth "cr" + 13 hex of the id   bridge port of one sandbox; alias "corral:NAME:<id>"; its peer
 *                                  is eth0 in the sandbox's network namespace
 *   table bridge NAME              anti-spoofing: a port sends only IPv4 and ARP from its own address
 *   table inet NAME                input/forward filter of everything from the bridge, masquerade;
 *                                  per sandbox: chain sb_<id>, set l_<id> (learned addresses,
 *                                  timeout flag), counter d_<id> (dropped packets)
 *
 * Always dropped, whatever the policy: sandbox -> sandbox, -> any host address (but the gateway's
 * port 53), -> 169.254.0.0/16, 127/8, 0/8, 224/3, the metadata services 100.100.100.200 (Alibaba
 * Cloud) and 168.63.129.16 (Azure), the operator's networks (net_config.blocked), DNS (53) to
 * any other resolver, 853 (DoT/DoQ), everything IPv6, anything not leaving through the uplink.
 *
 * Processes: net_new(), net_sandbox_add*(), net_sandbox_forget(), net_policy_apply(), net_learn()
 * and the readers run in corrald's process (quick netlink and nftables requests, no child
 * process). net_attach() (a create's blocking part) and net_sandbox_teardown() (a removal, whose
 * nftables commit waits for an RCU grace period) run in corrald's workers (forked children that
 * closed every inherited fd): they use only the values net_new() left in struct net and sockets
 * of their own.
 *
 * The library never logs; it returns -errno with a message in struct error.
 */
#pragma once

#include <net/if.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>

#include "network/policy.h"
#include "shared/error.h"
#include "shared/id.h"
#include "shared/posindex.h"

#define NET_DEFAULT_NAME "corral"
#define NET_DEFAULT_SUBNET "10.177.0.0/16"
#define NET_LEARN_TTL_FLOOR_S 5      /* a learned address stays at least this long */
#define NET_LEARN_TTL_MAX_S 86400    /* and at most this long */
#define NET_LEARN_SET_MAX 4096       /* learned addresses per sandbox (kernel memory it cannot
				      * be charged for); past it a learn fails until some expire */
#define NET_DNS_RATE 2000           /* packets/s a sandbox may send to corral's resolver (UDP and */
#define NET_DNS_BURST 4000          /* TCP, port 53), and its burst: past them the host drops */
#define NET_DNS_CONN_RATE 20        /* new TCP connections/s to the resolver per sandbox (each */
#define NET_DNS_CONN_BURST 40       /* comes with a fresh burst of queries: resolver.h) */
#define NET_NAME_MAX 12              /* bridge and table name: leaves room in IFNAMSIZ */
#define NET_LOCK_DIR "/run/corral"   /* <name>.lock: one corrald per network name */

enum net_mode {
	NET_MODE_DNS,     /* nftables enforces only the always-blocked rules */
	NET_MODE_DNS_NFT, /* everything not admitted is dropped */
};

#define NET_FLOWS_DEFAULT 4096 /* live connections (conntrack entries) a sandbox may hold */
#define NET_BLOCKED_MAX 64     /* networks an operator adds to the always-blocked (--egress-block) */

/* An IPv4 network: address (host bits zero) and prefix length. */
struct net_prefix4 {
	struct in_addr addr;
	uint8_t prefix;
};
#define NET_PREFIX4_STRLEN (INET_ADDRSTRLEN + 3)
/* "a.b.c.d/p" */
void net_prefix4_str(const struct net_prefix4 *p, char buf[NET_PREFIX4_STRLEN]);

struct net_config {
	bool log_drops;     /* the host logs the packets it drops to NFLOG (net_droplog_*) */
	unsigned flows_max; /* live flows a sandbox may hold; 0: NET_FLOWS_DEFAULT */
	const char *name;   /* bridge and nft table name, NULL = NET_DEFAULT_NAME */
	const char *subnet; /* "A.B.C.D/P", NULL = NET_DEFAULT_SUBNET; P between 8 and 28 */
	const char *uplink; /* NULL: the interface of the host's default route (if any) */
	/* More networks no sandbox reaches, whatever its policy (net_blocked_add()) */
	struct net_prefix4 blocked[NET_BLOCKED_MAX];
	size_t n_blocked;
};

/*
 * Add arg to cfg's always-blocked networks: an IPv4 address or network ("10.1.2.3",
 * "192.168.0.0/16"), or "private" for the private and shared ranges (10.0.0.0/8, 172.16.0.0/12,
 * 192.168.0.0/16, 100.64.0.0/10). -EINVAL with why (a name, IPv6, /0, too many), -E2BIG past
 * NET_BLOCKED_MAX.
 */
int net_blocked_add(struct net_config *cfg, const char *arg, struct error *err);

struct net_sandbox;

struct net {
	char name[NET_NAME_MAX + 1];
	char uplink[IF_NAMESIZE]; /* "" = none: sandboxes reach nothing beyond the host */
	bool uplink_auto;         /* found from the default route */
	struct in_addr subnet;    /* network address */
	unsigned prefix;
	struct in_addr gateway; /* the bridge's address, first host of the subnet */
	int bridge_ifindex;
	struct nft_ctx *nft;
	/* Sandboxes with an address, in memory only (the record keeps the address). */
	struct net_sandbox *sb;
	size_t n_sb, cap_sb;
	struct posindex by_id, by_addr; /* positions in sb (every DNS query looks its sender up) */
	uint32_t next_host; /* allocation cursor (host part) */
	bool timeout_update; /* the kernel restarts an element's timeout on a re-add (6.10+) */
	bool stale_flows;    /* flows of sandboxes this corrald never knew may be left (until
			      * net_gc() flushed them): net_attach() flushes its address's */
	int lock_fd;         /* NET_LOCK_DIR/<name>.lock, held while n lives */
	bool log_drops;      /* net_config.log_drops */
	unsigned flows_max;  /* net_config.flows_max, or its default */
	struct net_prefix4 blocked[NET_BLOCKED_MAX]; /* net_config.blocked */
	size_t n_blocked;
};

/* Bridge, gateway address, forwarding on the bridge and the uplink, the nftables tables (base
 * chains refilled, per-sandbox state kept: a restart re-adopts it). Idempotent. */
int net_new(const struct net_config *cfg, struct net **ret, struct error *err);
void net_free(struct net *n);

/* A sandbox's network state: allocate an address (addr->s_addr == 0) or take the recorded one
 * (re-adoption after a restart), then make its nftables chain, learned set and drop counter,
 * unless they exist already (a restart keeps them and their contents). The default action for
 * a sandbox whose policy net_policy_apply() has not set yet is default_action. */
int net_sandbox_add(struct net *n, const char *sandbox_id, enum net_mode mode,
		    enum egress_action default_action, struct in_addr *addr, struct error *err);
/* The same with the sandbox's first policy p (NULL: default_action alone) in its chain from the
 * start: one transaction, where a net_policy_apply() after the add would replace the chain's
 * rules, and a rule deletion costs the kernel's commit an RCU grace period (~6-13 ms). */
int net_sandbox_add_policy(struct net *n, const char *sandbox_id, enum net_mode mode,
			   const struct egress_policy *p, enum egress_action default_action,
			   struct in_addr *addr, struct error *err);
/* Everything of the sandbox: veth, nftables elements, chain, set and counter. Parts already gone
 * are success. */
int net_sandbox_remove(struct net *n, const char *sandbox_id, struct error *err);
/* net_sandbox_remove() in two halves, for a worker: the kernel's state (blocking: its nftables
 * commit waits for an RCU grace period, ~6-13 ms), in a forked child; then, in the process that
 * owns n, its address back to the pool. */
int net_sandbox_teardown(const struct net *n, const char *sandbox_id, struct error *err);
void net_sandbox_forget(struct net *n, const char *sandbox_id);
/* A clean exit's end: remove the lock file of the network's name (and release it). Everything
 * else stays for the next start. net_free() does it too. */
void net_unlock(struct net *n);
/*
 * The same without making a create wait (a deletion's commit holds the kernel's nftables mutex
 * through an RCU grace period, and every create's net_sandbox_add() needs that mutex):
 * net_sandbox_unplug() (worker) deletes only the veth, so nothing of the sandbox sends any more;
 * net_sandbox_retire() (owner) marks it, its address still taken, its nftables elements still
 * naming that veth, so no other sandbox can use them. Later, batched, in the owner:
 * net_reap_begin() marks every retired sandbox (returns how many), net_reap() (worker) removes
 * their nftables objects in one transaction, net_reap_end(done) forgets them (done) or unmarks
 * them for the next try. net_retired() counts the retired ones.
 */
int net_sandbox_unplug(const struct net *n, const char *sandbox_id, struct error *err);
void net_sandbox_retire(struct net *n, const char *sandbox_id);
size_t net_retired(const struct net *n);
size_t net_reap_begin(struct net *n);
int net_reap(const struct net *n, struct error *err);
void net_reap_end(struct net *n, bool done);
/* After re-adoption: remove veths and nftables state of sandboxes net_sandbox_add() did not
 * name since net_new(). Returns how many sandboxes' leftovers were removed, or -errno. */
int net_gc(struct net *n, struct error *err);
/* After net_gc(): true when a re-adopted sandbox's chain or drop counter was missing (deleted
 * behind corrald's back): it has no map elements, so the host drops everything it sends. */
bool net_sandbox_broken(const struct net *n, const char *sandbox_id);

/* Blocking; for the create worker. The veth pair: the host end in the bridge (isolated port),
 * the other end moved into netns_fd as eth0 with the sandbox's address, up, a default route via
 * the gateway, lo up, no IPv6 address. The calling thread enters netns_fd for a moment. */
int net_attach(const struct net *n, const char *sandbox_id, int netns_fd, struct in_addr addr,
	       struct error *err);

/* The sandbox's static IP/CIDR rules (p's EGRESS_CIDR rules, in order; IPv6 ones are moot, IPv6
 * being dropped), its default action, and a flush of all its learned addresses. In NET_MODE_DNS
 * only the mode is recorded: nftables then admits everything not always-blocked. */
int net_policy_apply(struct net *n, const char *sandbox_id, const struct egress_policy *p,
		     enum net_mode mode, struct error *err);
/* dns+nft: admit addr (an allowed name's answer) for ttl_s seconds (clamped to
 * [NET_LEARN_TTL_FLOOR_S, NET_LEARN_TTL_MAX_S]); a second learn of the same address restarts
 * its timeout. AF_INET6 addresses are accepted and ignored (IPv6 is dropped). */
int net_learn(struct net *n, const char *sandbox_id, int family, const void *addr, uint32_t ttl_s,
	      struct error *err);
/* The sandbox whose address is addr: 0 and its id in id_out, or -ENOENT. */
int net_sandbox_by_addr(struct net *n, int family, const void *addr, char id_out[UUID_STR_LEN]);
/* Packets from the sandbox dropped by the host (policy or always-blocked), since its create. */
int net_sandbox_drops(struct net *n, const char *sandbox_id, uint64_t *ret_packets,
		      struct error *err);

/* Parsing and names, for flags and records. */
const char *net_mode_name(enum net_mode m); /* "dns", "dns+nft" */
int net_mode_parse(const char *s, enum net_mode *ret);

/* droplog.c: the packets the host drops, by sandbox (net_config.log_drops). */
#define NET_DROPLOG_RATE 50      /* packets logged a second at most, all sandboxes together */
#define NET_DROPLOG_SNAPLEN 64   /* bytes of each: the IPv4 header and the ports */
#define NET_DROPLOG_GROUP_BASE 0x4000
#define NET_DROPLOG_GROUPS 0x4000
struct net_drop {
	char sandbox_id[UUID_STR_LEN];
	struct in_addr dst;
	uint8_t proto;  /* IPPROTO_* */
	uint16_t dport; /* TCP and UDP, else 0 */
};
typedef void (*net_drop_fn)(const struct net_drop *d, void *arg);
/* The NFLOG group of n's drops (from its name: corralds of other names use others). */
uint16_t net_droplog_group(const struct net *n);
/* A non-blocking socket bound to the group (close-on-exec), or -errno. */
int net_droplog_open(const struct net *n, struct error *err);
/* Calls fn for each drop queued on fd whose source is a sandbox of n's; 0 or -errno. */
int net_droplog_read(struct net *n, int fd, net_drop_fn fn, void *arg);
