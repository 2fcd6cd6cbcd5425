/*
 * rtnetlink requests over libmnl: the few link, address and route operations the data plane needs.
 * One request at a time, each acknowledged, on a socket of the caller's network namespace.
 */
#include <errno.h>
#include <linux/if_link.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <libmnl/libmnl.h>
#include <net/if.h>
#include <linux/netlink.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "network/nl.h"

int nl_open(struct nl *nl)
{
	return nl_open_bus(nl, NETLINK_ROUTE);
}

int nl_open_bus(struct nl *nl, int bus)
{
	nl->sock = mnl_socket_open2(bus, SOCK_CLOEXEC);
	if (!nl->sock)
		return -errno;
	if (mnl_socket_bind(nl->sock, 0, MNL_SOCKET_AUTOPID) < 0) {
		int e = errno;
		mnl_socket_close(nl->sock);
		nl->sock = NULL;
		return -e;
	}
	int one = 1;
	mnl_socket_setsockopt(nl->sock, NETLINK_EXT_ACK, &one, sizeof(one)); /* best effort */
	mnl_socket_setsockopt(nl->sock, NETLINK_CAP_ACK, &one, sizeof(one));
	nl->portid = mnl_socket_get_portid(nl->sock);
	nl->seq = (unsigned)time(NULL);
	return 0;
}

void nl_close(struct nl *nl)
{
	if (nl->sock)
		mnl_socket_close(nl->sock);
	nl->sock = NULL;
}

struct nlmsghdr *nl_msg(struct nl *nl, uint16_t type, uint16_t flags)
{
	struct nlmsghdr *h = mnl_nlmsg_put_header(nl->buf);
	h->nlmsg_type = type;
	/* A dump ends with NLMSG_DONE; an ack after it would answer the next request. */
	h->nlmsg_flags = NLM_F_REQUEST | flags | ((flags & NLM_F_DUMP) == NLM_F_DUMP ? 0 : NLM_F_ACK);
	h->nlmsg_seq = ++nl->seq;
	return h;
}

static int ext_attr_cb(const struct nlattr *a, void *data)
{
	const struct nlattr **tb = data;
	if (mnl_attr_get_type(a) <= NLMSGERR_ATTR_MAX)
		tb[mnl_attr_get_type(a)] = a;
	return MNL_CB_OK;
}

/* NLMSG_ERROR: the ack (0) or -errno, with the kernel's extended-ack text kept in nl->ext. */
struct talk {
	struct nl *nl;
	mnl_cb_t cb;
	void *data;
};

static int data_cb(const struct nlmsghdr *h, void *data)
{
	struct talk *t = data;
	return t->cb ? t->cb(h, t->data) : MNL_CB_OK;
}

static int error_cb(const struct nlmsghdr *h, void *data)
{
	struct nl *nl = ((struct talk *)data)->nl;
	const struct nlmsgerr *e = mnl_nlmsg_get_payload(h);
	if (h->nlmsg_len < mnl_nlmsg_size(sizeof(*e))) {
		errno = EBADMSG;
		return MNL_CB_ERROR;
	}
	if (e->error == 0)
		return MNL_CB_STOP;
	if (h->nlmsg_flags & NLM_F_ACK_TLVS) {
		/* with NETLINK_CAP_ACK the request is not echoed: attributes follow nlmsgerr */
		const struct nlattr *tb[NLMSGERR_ATTR_MAX + 1] = {0};
		mnl_attr_parse(h, sizeof(*e), ext_attr_cb, tb);
		if (tb[NLMSGERR_ATTR_MSG])
			snprintf(nl->ext, sizeof(nl->ext), "%s", mnl_attr_get_str(tb[NLMSGERR_ATTR_MSG]));
	}
	errno = -e->error;
	return MNL_CB_ERROR;
}

static int done_cb(const struct nlmsghdr *h, void *data)
{
	return MNL_CB_STOP;
}

static int overrun_cb(const struct nlmsghdr *h, void *data)
{
	errno = ENOSPC;
	return MNL_CB_ERROR;
}

/* Send h, run cb over each reply message (dumps) and wait for the ack or NLMSG_DONE. */
int nl_talk(struct nl *nl, struct nlmsghdr *h, mnl_cb_t cb, void *data)
{
	nl->ext[0] = '\0';
	if (mnl_socket_sendto(nl->sock, h, h->nlmsg_len) < 0)
		return -errno;
	char buf[32768]; /* MNL_SOCKET_DUMP_SIZE of newer libmnl */
	for (;;) {
		ssize_t n = mnl_socket_recvfrom(nl->sock, buf, sizeof(buf));
		if (n < 0)
			return errno == EINTR ? -EINTR : -errno;
		mnl_cb_t ctl[NLMSG_MIN_TYPE] = {[NLMSG_ERROR] = error_cb, [NLMSG_DONE] = done_cb,
						[NLMSG_OVERRUN] = overrun_cb};
		struct talk t = {nl, cb, data};
		int r = mnl_cb_run2(buf, (size_t)n, h->nlmsg_seq, nl->portid, data_cb, &t, ctl,
				    NLMSG_MIN_TYPE);
		if (r < 0)
			return -errno;
		if (r == MNL_CB_STOP)
			return 0;
	}
}

struct link_find {
	const char *name;
	int ifindex;
};

int nl_link_index(struct nl *nl, const char *name)
{
	struct nlmsghdr *h = nl_msg(nl, RTM_GETLINK, 0);
	struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(h, sizeof(*ifi));
	ifi->ifi_family = AF_UNSPEC;
	mnl_attr_put_strz(h, IFLA_IFNAME, name);
	struct link_find f = {.name = name};
	int r = nl_talk(nl, h, nl_cb_link_index, &f);
	if (r < 0)
		return r;
	return f.ifindex > 0 ? f.ifindex : -ENODEV;
}

int nl_cb_link_index(const struct nlmsghdr *h, void *data)
{
	struct link_find *f = data;
	if (h->nlmsg_type == RTM_NEWLINK) {
		const struct ifinfomsg *ifi = mnl_nlmsg_get_payload(h);
		f->ifindex = ifi->ifi_index;
	}
	return MNL_CB_OK;
}

int nl_link_up(struct nl *nl, int ifindex, const char *name)
{
	struct nlmsghdr *h = nl_msg(nl, RTM_NEWLINK, 0);
	struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(h, sizeof(*ifi));
	ifi->ifi_family = AF_UNSPEC;
	ifi->ifi_index = ifindex;
	ifi->ifi_flags = IFF_UP;
	ifi->ifi_change = IFF_UP;
	if (!ifindex)
		mnl_attr_put_strz(h, IFLA_IFNAME, name);
	return nl_talk(nl, h, NULL, NULL);
}

int nl_link_del(struct nl *nl, const char *name)
{
	struct nlmsghdr *h = nl_msg(nl, RTM_DELLINK, 0);
	struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(h, sizeof(*ifi));
	ifi->ifi_family = AF_UNSPEC;
	mnl_attr_put_strz(h, IFLA_IFNAME, name);
	int r = nl_talk(nl, h, NULL, NULL);
	return r == -ENODEV ? 0 : r;
}

/* No IPv6 address of its own (not even link-local): the link takes no part in IPv6. */
int nl_link_no_ipv6(struct nl *nl, int ifindex)
{
	struct nlmsghdr *h = nl_msg(nl, RTM_NEWLINK, 0);
	struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(h, sizeof(*ifi));
	ifi->ifi_family = AF_UNSPEC;
	ifi->ifi_index = ifindex;
	struct nlattr *spec = mnl_attr_nest_start(h, IFLA_AF_SPEC);
	struct nlattr *in6 = mnl_attr_nest_start(h, AF_INET6);
	mnl_attr_put_u8(h, IFLA_INET6_ADDR_GEN_MODE, IN6_ADDR_GEN_MODE_NONE);
	mnl_attr_nest_end(h, in6);
	mnl_attr_nest_end(h, spec);
	return nl_talk(nl, h, NULL, NULL);
}

int nl_bridge_add(struct nl *nl, const char *name)
{
	struct nlmsghdr *h = nl_msg(nl, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL);
	struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(h, sizeof(*ifi));
	ifi->ifi_family = AF_UNSPEC;
	mnl_attr_put_strz(h, IFLA_IFNAME, name);
	struct nlattr *li = mnl_attr_nest_start(h, IFLA_LINKINFO);
	mnl_attr_put_strz(h, IFLA_INFO_KIND, "bridge");
	mnl_attr_nest_end(h, li);
	return nl_talk(nl, h, NULL, NULL);
}

int nl_link_set_mac(struct nl *nl, int ifindex, const uint8_t mac[6])
{
	struct nlmsghdr *h = nl_msg(nl, RTM_NEWLINK, 0);
	struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(h, sizeof(*ifi));
	ifi->ifi_family = AF_UNSPEC;
	ifi->ifi_index = ifindex;
	mnl_attr_put(h, IFLA_ADDRESS, 6, mac);
	return nl_talk(nl, h, NULL, NULL);
}

int nl_addr4_add(struct nl *nl, int ifindex, struct in_addr a, unsigned prefix)
{
	struct nlmsghdr *h = nl_msg(nl, RTM_NEWADDR, NLM_F_CREATE | NLM_F_REPLACE);
	struct ifaddrmsg *ifa = mnl_nlmsg_put_extra_header(h, sizeof(*ifa));
	ifa->ifa_family = AF_INET;
	ifa->ifa_prefixlen = (unsigned char)prefix;
	ifa->ifa_scope = RT_SCOPE_UNIVERSE;
	ifa->ifa_index = (unsigned)ifindex;
	mnl_attr_put(h, IFA_LOCAL, sizeof(a), &a);
	mnl_attr_put(h, IFA_ADDRESS, sizeof(a), &a);
	if (prefix < 31) {
		struct in_addr b = {a.s_addr | htonl(prefix ? 0xffffffffu >> prefix : 0xffffffffu)};
		mnl_attr_put(h, IFA_BROADCAST, sizeof(b), &b);
	}
	return nl_talk(nl, h, NULL, NULL);
}

int nl_route4_default(struct nl *nl, int ifindex, struct in_addr gw)
{
	struct nlmsghdr *h = nl_msg(nl, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE);
	struct rtmsg *rt = mnl_nlmsg_put_extra_header(h, sizeof(*rt));
	rt->rtm_family = AF_INET;
	rt->rtm_table = RT_TABLE_MAIN;
	rt->rtm_protocol = RTPROT_STATIC;
	rt->rtm_scope = RT_SCOPE_UNIVERSE;
	rt->rtm_type = RTN_UNICAST;
	mnl_attr_put(h, RTA_GATEWAY, sizeof(gw), &gw);
	mnl_attr_put_u32(h, RTA_OIF, (uint32_t)ifindex);
	return nl_talk(nl, h, NULL, NULL);
}

int nl_veth_add(struct nl *nl, const char *name, const char *alias, int master, const char *peer,
		int peer_netns_fd)
{
	struct nlmsghdr *h = nl_msg(nl, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL);
	struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(h, sizeof(*ifi));
	ifi->ifi_family = AF_UNSPEC;
	mnl_attr_put_strz(h, IFLA_IFNAME, name);
	mnl_attr_put_u32(h, IFLA_MASTER, (uint32_t)master);
	struct nlattr *li = mnl_attr_nest_start(h, IFLA_LINKINFO);
	mnl_attr_put_strz(h, IFLA_INFO_KIND, "veth");
	struct nlattr *data = mnl_attr_nest_start(h, IFLA_INFO_DATA);
	struct nlattr *p = mnl_attr_nest_start(h, VETH_INFO_PEER);
	struct ifinfomsg *pifi = mnl_nlmsg_put_extra_header(h, sizeof(*pifi));
	pifi->ifi_family = AF_UNSPEC;
	mnl_attr_put_strz(h, IFLA_IFNAME, peer);
	mnl_attr_put_u32(h, IFLA_NET_NS_FD, (uint32_t)peer_netns_fd);
	mnl_attr_nest_end(h, p);
	mnl_attr_nest_end(h, data);
	mnl_attr_nest_end(h, li);
	int r = nl_talk(nl, h, NULL, NULL);
	if (r < 0)
		return r;
	/* The alias names the sandbox, so a restart finds leftovers by it (IFLA_IFALIAS is ignored
	 * by a create). */
	h = nl_msg(nl, RTM_NEWLINK, 0);
	ifi = mnl_nlmsg_put_extra_header(h, sizeof(*ifi));
	ifi->ifi_family = AF_UNSPEC;
	ifi->ifi_flags = IFF_UP;
	ifi->ifi_change = IFF_UP;
	mnl_attr_put_strz(h, IFLA_IFNAME, name);
	mnl_attr_put_strz(h, IFLA_IFALIAS, alias);
	li = mnl_attr_nest_start(h, IFLA_LINKINFO);
	mnl_attr_put_strz(h, IFLA_INFO_SLAVE_KIND, "bridge");
	data = mnl_attr_nest_start(h, IFLA_INFO_SLAVE_DATA);
	mnl_attr_put_u8(h, IFLA_BRPORT_ISOLATED, 1);
	mnl_attr_nest_end(h, data);
	mnl_attr_nest_end(h, li);
	return nl_talk(nl, h, NULL, NULL);
}

struct dump_links {
	nl_link_fn fn;
	void *arg;
};

static int attr_cb(const struct nlattr *a, void *data)
{
	const struct nlattr **tb = data;
	int type = mnl_attr_get_type(a);
	if (mnl_attr_type_valid(a, IFLA_MAX) > 0)
		tb[type] = a;
	return MNL_CB_OK;
}

static int dump_links_cb(const struct nlmsghdr *h, void *data)
{
	struct dump_links *d = data;
	if (h->nlmsg_type != RTM_NEWLINK)
		return MNL_CB_OK;
	const struct ifinfomsg *ifi = mnl_nlmsg_get_payload(h);
	const struct nlattr *tb[IFLA_MAX + 1] = {0};
	mnl_attr_parse(h, sizeof(*ifi), attr_cb, tb);
	const char *name = tb[IFLA_IFNAME] ? mnl_attr_get_str(tb[IFLA_IFNAME]) : "";
	const char *alias = tb[IFLA_IFALIAS] ? mnl_attr_get_str(tb[IFLA_IFALIAS]) : "";
	int master = tb[IFLA_MASTER] ? (int)mnl_attr_get_u32(tb[IFLA_MASTER]) : 0;
	d->fn(ifi->ifi_index, name, alias, master, d->arg);
	return MNL_CB_OK;
}

int nl_links(struct nl *nl, nl_link_fn fn, void *arg)
{
	struct nlmsghdr *h = nl_msg(nl, RTM_GETLINK, NLM_F_DUMP);
	struct ifinfomsg *ifi = mnl_nlmsg_put_extra_header(h, sizeof(*ifi));
	ifi->ifi_family = AF_UNSPEC;
	struct dump_links d = {fn, arg};
	return nl_talk(nl, h, dump_links_cb, &d);
}

static int rt_attr_cb(const struct nlattr *a, void *data)
{
	const struct nlattr **tb = data;
	int type = mnl_attr_get_type(a);
	if (mnl_attr_type_valid(a, RTA_MAX) > 0)
		tb[type] = a;
	return MNL_CB_OK;
}

struct default_route {
	int oif;
	uint32_t prio;
};

static int default_route_cb(const struct nlmsghdr *h, void *data)
{
	struct default_route *d = data;
	if (h->nlmsg_type != RTM_NEWROUTE)
		return MNL_CB_OK;
	const struct rtmsg *rt = mnl_nlmsg_get_payload(h);
	if (rt->rtm_dst_len != 0 || rt->rtm_type != RTN_UNICAST)
		return MNL_CB_OK;
	const struct nlattr *tb[RTA_MAX + 1] = {0};
	mnl_attr_parse(h, sizeof(*rt), rt_attr_cb, tb);
	uint32_t table = tb[RTA_TABLE] ? mnl_attr_get_u32(tb[RTA_TABLE]) : rt->rtm_table;
	if (table != RT_TABLE_MAIN || !tb[RTA_OIF])
		return MNL_CB_OK;
	uint32_t prio = tb[RTA_PRIORITY] ? mnl_attr_get_u32(tb[RTA_PRIORITY]) : 0;
	if (!d->oif || prio < d->prio) {
		d->oif = (int)mnl_attr_get_u32(tb[RTA_OIF]);
		d->prio = prio;
	}
	return MNL_CB_OK;
}

int nl_default_route_oif(struct nl *nl)
{
	struct nlmsghdr *h = nl_msg(nl, RTM_GETROUTE, NLM_F_DUMP);
	struct rtmsg *rt = mnl_nlmsg_put_extra_header(h, sizeof(*rt));
	rt->rtm_family = AF_INET;
	struct default_route d = {0};
	int r = nl_talk(nl, h, default_route_cb, &d);
	return r < 0 ? r : d.oif;
}

/* ---- conntrack ------------------------------------------------------------------------------- */

struct attrs {
	const struct nlattr **tb;
	unsigned max;
};

static int attrs_cb(const struct nlattr *a, void *data)
{
	const struct attrs *t = data;
	unsigned type = mnl_attr_get_type(a);
	if (type <= t->max)
		t->tb[type] = a;
	return MNL_CB_OK;
}

/* An entry to delete: its original tuple as the kernel gave it (a nested CTA_TUPLE_ORIG,
 * echoed back verbatim), and its zone. */
struct ct_entry {
	uint8_t tuple[256];
	uint16_t tuple_len;
	bool has_zone;
	uint16_t zone; /* network order, as on the wire */
};

struct ct_flush {
	nl_ct_match_fn match;
	void *arg;
	struct ct_entry *v;
	size_t n, cap;
	bool nomem;
};

static int ct_dump_cb(const struct nlmsghdr *h, void *data)
{
	struct ct_flush *f = data;
	const struct nlattr *tb[CTA_MAX + 1] = {0}, *tt[CTA_TUPLE_MAX + 1] = {0},
			    *ip[CTA_IP_MAX + 1] = {0};
	struct attrs a = {tb, CTA_MAX}, at = {tt, CTA_TUPLE_MAX}, ai = {ip, CTA_IP_MAX};
	if (mnl_attr_parse(h, sizeof(struct nfgenmsg), attrs_cb, &a) < 0 || !tb[CTA_TUPLE_ORIG] ||
	    mnl_attr_parse_nested(tb[CTA_TUPLE_ORIG], attrs_cb, &at) < 0 || !tt[CTA_TUPLE_IP] ||
	    mnl_attr_parse_nested(tt[CTA_TUPLE_IP], attrs_cb, &ai) < 0 || !ip[CTA_IP_V4_SRC] ||
	    mnl_attr_get_payload_len(ip[CTA_IP_V4_SRC]) != 4)
		return MNL_CB_OK;
	struct in_addr src;
	memcpy(&src, mnl_attr_get_payload(ip[CTA_IP_V4_SRC]), 4);
	if (!f->match(src, f->arg))
		return MNL_CB_OK;
	uint16_t len = tb[CTA_TUPLE_ORIG]->nla_len;
	if (len > sizeof(f->v->tuple))
		return MNL_CB_OK; /* not an IPv4 tuple of any protocol the kernel has */
	if (f->n == f->cap) {
		size_t cap = f->cap ? 2 * f->cap : 16;
		struct ct_entry *v = realloc(f->v, cap * sizeof(*v));
		if (!v) {
			f->nomem = true;
			return MNL_CB_OK;
		}
		f->v = v;
		f->cap = cap;
	}
	struct ct_entry *e = &f->v[f->n++];
	memcpy(e->tuple, tb[CTA_TUPLE_ORIG], len);
	e->tuple_len = len;
	e->has_zone = tb[CTA_ZONE] && mnl_attr_get_payload_len(tb[CTA_ZONE]) == 2;
	if (e->has_zone)
		memcpy(&e->zone, mnl_attr_get_payload(tb[CTA_ZONE]), 2);
	return MNL_CB_OK;
}

static struct nlmsghdr *ct_msg(struct nl *nl, uint8_t type, uint16_t flags)
{
	struct nlmsghdr *h = nl_msg(nl, (NFNL_SUBSYS_CTNETLINK << 8) | type, flags);
	struct nfgenmsg *g = mnl_nlmsg_put_extra_header(h, sizeof(*g));
	g->nfgen_family = AF_INET;
	g->version = NFNETLINK_V0;
	g->res_id = 0;
	return h;
}

static bool same_addr(struct in_addr src, void *arg)
{
	return src.s_addr == ((const struct in_addr *)arg)->s_addr;
}

int nl_ct_flush_src4(struct in_addr src)
{
	return nl_ct_flush_src4_if(same_addr, &src);
}

int nl_ct_flush_src4_if(nl_ct_match_fn match, void *arg)
{
	struct nl nl = {0};
	int r = nl_open_bus(&nl, NETLINK_NETFILTER);
	if (r < 0)
		return r;
	struct ct_flush f = {.match = match, .arg = arg};
	/* Collected first, deleted after: a dump does not mix with requests on its socket. */
	r = nl_talk(&nl, ct_msg(&nl, IPCTNL_MSG_CT_GET, NLM_F_DUMP), ct_dump_cb, &f);
	if (r >= 0 && f.nomem)
		r = -ENOMEM;
	for (size_t i = 0; r >= 0 && i < f.n; i++) {
		const struct ct_entry *e = &f.v[i];
		struct nlmsghdr *h = ct_msg(&nl, IPCTNL_MSG_CT_DELETE, 0);
		memcpy(mnl_nlmsg_get_payload_tail(h), e->tuple, e->tuple_len);
		h->nlmsg_len += MNL_ALIGN(e->tuple_len);
		if (e->has_zone)
			mnl_attr_put(h, CTA_ZONE, sizeof(e->zone), &e->zone);
		r = nl_talk(&nl, h, NULL, NULL);
		if (r == -ENOENT) /* ended meanwhile */
			r = 0;
	}
	free(f.v);
	nl_close(&nl);
	return r;
}
