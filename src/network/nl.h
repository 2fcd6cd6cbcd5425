/* rtnetlink over libmnl (nl.c): private to libnetwork. Every function returns 0 or -errno. */
#pragma once

#include <libmnl/libmnl.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>

struct nl {
	struct mnl_socket *sock;
	unsigned portid, seq;
	char buf[8192]; /* one request */
	char ext[256];  /* the kernel's extended-ack message of the last error, or "" */
};

int nl_open(struct nl *nl);
int nl_open_bus(struct nl *nl, int bus); /* another netlink family (NETLINK_NETFILTER) */
void nl_close(struct nl *nl);
struct nlmsghdr *nl_msg(struct nl *nl, uint16_t type, uint16_t flags);
int nl_talk(struct nl *nl, struct nlmsghdr *h, mnl_cb_t cb, void *data);
int nl_cb_link_index(const struct nlmsghdr *h, void *data);

int nl_link_index(struct nl *nl, const char *name); /* ifindex or -ENODEV */
int nl_link_up(struct nl *nl, int ifindex, const char *name); /* by index, or name when 0 */
int nl_link_del(struct nl *nl, const char *name);              /* gone already: 0 */
int nl_link_no_ipv6(struct nl *nl, int ifindex);
int nl_bridge_add(struct nl *nl, const char *name); /* -EEXIST when it exists */
/* Set the link's MAC address (a bridge with one set keeps it when ports come and go). */
int nl_link_set_mac(struct nl *nl, int ifindex, const uint8_t mac[6]);
int nl_addr4_add(struct nl *nl, int ifindex, struct in_addr a, unsigned prefix);
int nl_route4_default(struct nl *nl, int ifindex, struct in_addr gw);
/* name in the bridge master (isolated port, up, alias set), peer created in peer_netns_fd. */
int nl_veth_add(struct nl *nl, const char *name, const char *alias, int master, const char *peer,
		int peer_netns_fd);
/* The oif of the main table's best IPv4 default route, 0 when there is none. */
int nl_default_route_oif(struct nl *nl);

typedef void (*nl_link_fn)(int ifindex, const char *name, const char *alias, int master,
			   void *arg);
int nl_links(struct nl *nl, nl_link_fn fn, void *arg);

/* Delete every conntrack entry (this network namespace) whose original source is src: the
 * flows of a sandbox that had the address before, which would otherwise let a new one through
 * as "established" without its policy. */
int nl_ct_flush_src4(struct in_addr src);
/* The same for every IPv4 original source match() says yes to, in one dump. A dump walks every
 * bucket of the host's conntrack table (262,144 here: ~16 ms, however few entries there are),
 * so it is for a batch of addresses, off corrald's loop. */
typedef bool (*nl_ct_match_fn)(struct in_addr src, void *arg);
int nl_ct_flush_src4_if(nl_ct_match_fn match, void *arg);
