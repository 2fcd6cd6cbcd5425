/*
 * The host's dropped packets, named by sandbox (net.h net_droplog_*): with net_config.log_drops,
 * drop_sb logs each packet it drops (at most NET_DROPLOG_RATE a second, all sandboxes together:
 * a sandbox cannot make the log a flood) to the NFLOG group of this corrald's network, the first
 * NET_DROPLOG_SNAPLEN bytes of it; corrald reads the group through libnetfilter_log and logs one
 * debug line per packet with the sandbox its source address names.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <libmnl/libmnl.h>
#include <libnetfilter_log/libnetfilter_log.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <netinet/ip.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "network/net.h"
#include "network/nl.h"
#include "shared/hash.h"

uint16_t net_droplog_group(const struct net *n)
{
	/* from the name: one group per corrald of the host */
	return (uint16_t)(NET_DROPLOG_GROUP_BASE + hash_fnv1a(n->name) % NET_DROPLOG_GROUPS);
}

int net_droplog_open(const struct net *n, struct error *err)
{
	struct nl nl = {0};
	int r = nl_open_bus(&nl, NETLINK_NETFILTER);
	if (r < 0)
		return error_set_errno(err, -r, "netlink socket");
	uint16_t group = net_droplog_group(n);
	/* bind the group, then take NET_DROPLOG_SNAPLEN bytes of each packet; each acked */
	for (int step = 0; step < 2; step++) {
		struct nlmsghdr *h = nflog_nlmsg_put_header(nl.buf, NFULNL_MSG_CONFIG, AF_UNSPEC, group);
		h->nlmsg_flags |= NLM_F_ACK;
		h->nlmsg_seq = ++nl.seq;
		if (step == 0)
			nflog_attr_put_cfg_cmd(h, NFULNL_CFG_CMD_BIND);
		else
			nflog_attr_put_cfg_mode(h, NFULNL_COPY_PACKET, NET_DROPLOG_SNAPLEN);
		/* EBUSY: another process (another corrald of the same name hash) has it */
		if ((r = nl_talk(&nl, h, NULL, NULL)) < 0) {
			error_set_errno(err, -r, "NFLOG group %u%s%s", group, nl.ext[0] ? ": " : "",
					nl.ext);
			goto out;
		}
	}
	/* the socket outlives the libmnl handle: a duplicate of its fd, non-blocking */
	r = fcntl(mnl_socket_get_fd(nl.sock), F_DUPFD_CLOEXEC, 0);
	if (r < 0 || fcntl(r, F_SETFL, O_NONBLOCK) < 0) {
		int e = errno;
		if (r >= 0)
			close(r);
		r = error_set_errno(err, e, "NFLOG socket");
	}
out:
	nl_close(&nl);
	return r;
}

struct drop_ctx {
	struct net *n;
	net_drop_fn fn;
	void *arg;
};

static int drop_cb(const struct nlmsghdr *h, void *data)
{
	struct drop_ctx *c = data;
	struct nlattr *a[NFULA_MAX + 1] = {0};
	if (nflog_nlmsg_parse(h, a) < 0 || !a[NFULA_PAYLOAD])
		return MNL_CB_OK;
	const uint8_t *p = mnl_attr_get_payload(a[NFULA_PAYLOAD]);
	size_t len = mnl_attr_get_payload_len(a[NFULA_PAYLOAD]);
	struct iphdr ip;
	if (len < sizeof(ip))
		return MNL_CB_OK;
	memcpy(&ip, p, sizeof(ip));
	size_t hl = (size_t)ip.ihl * 4;
	if (ip.version != 4 || hl < sizeof(ip) || hl > len)
		return MNL_CB_OK;
	struct net_drop d = {.proto = ip.protocol};
	d.dst.s_addr = ip.daddr;
	/* TCP and UDP: the destination port; not in a fragment after the first */
	if ((ip.protocol == IPPROTO_TCP || ip.protocol == IPPROTO_UDP) && hl + 4 <= len &&
	    (ntohs(ip.frag_off) & 0x1fff) == 0)
		d.dport = (uint16_t)(p[hl + 2] << 8 | p[hl + 3]);
	if (net_sandbox_by_addr(c->n, AF_INET, &ip.saddr, d.sandbox_id) < 0)
		return MNL_CB_OK; /* no sandbox's (another corrald's, or one deleted meanwhile) */
	c->fn(&d, c->arg);
	return MNL_CB_OK;
}

int net_droplog_read(struct net *n, int fd, net_drop_fn fn, void *arg)
{
	struct drop_ctx c = {n, fn, arg};
	static char buf[65536];
	for (int i = 0; i < 64; i++) { /* a bounded turn of corrald's loop */
		ssize_t k = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (k < 0 && errno == ENOBUFS)
			continue; /* the kernel dropped some (a burst past the socket): go on */
		if (k < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
		if (k == 0)
			return 0;
		(void)mnl_cb_run(buf, (size_t)k, 0, 0, drop_cb, &c);
	}
	return 0;
}
