/*
 * The two hot nftables operations through libnftnl instead of libnftables: learning an address
 * (every allowed DNS answer) and reading a drop counter (every stats call). libnftables fetches a
 * cache of the ruleset for such commands: with 400 sandboxes of 20 learned addresses each that is
 * ~9 ms for a learn and ~25 ms for a counter, on corrald's event loop. Here each is one netlink
 * batch or request to the kernel, whatever the table holds.
 */
#include <errno.h>
#include <stdbool.h>
#include <libmnl/libmnl.h>
#include <libnftnl/batch.h>
#include <libnftnl/common.h>
#include <libnftnl/object.h>
#include <libnftnl/set.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "network/nftnl.h"

static struct mnl_socket *open_nf(void)
{
	struct mnl_socket *nl = mnl_socket_open2(NETLINK_NETFILTER, SOCK_CLOEXEC);
	if (nl && mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) {
		mnl_socket_close(nl);
		nl = NULL;
	}
	return nl;
}

/* One set-element message for the batch: NEWSETELEM (with a timeout) or DELSETELEM of addr. */
static int put_elem(struct mnl_nlmsg_batch *b, int type, const char *table, const char *set,
		    const void *addr, size_t alen, uint64_t timeout_ms, uint32_t seq)
{
	struct nftnl_set *s = nftnl_set_alloc();
	struct nftnl_set_elem *e = nftnl_set_elem_alloc();
	if (!s || !e) {
		nftnl_set_free(s);
		nftnl_set_elem_free(e);
		return -ENOMEM;
	}
	nftnl_set_set_str(s, NFTNL_SET_TABLE, table);
	nftnl_set_set_str(s, NFTNL_SET_NAME, set);
	nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, addr, (uint32_t)alen);
	if (type == NFT_MSG_NEWSETELEM)
		nftnl_set_elem_set_u64(e, NFTNL_SET_ELEM_TIMEOUT, timeout_ms);
	nftnl_set_elem_add(s, e);
	struct nlmsghdr *h = nftnl_nlmsg_build_hdr(mnl_nlmsg_batch_current(b), (uint16_t)type,
						   NFPROTO_INET,
						   type == NFT_MSG_NEWSETELEM ? NLM_F_CREATE : 0, seq);
	nftnl_set_elems_nlmsg_build_payload(h, s);
	nftnl_set_free(s);
	mnl_nlmsg_batch_next(b);
	return 0;
}

int nftnl_elem_refresh(const char *table, const char *set, const void *addr, size_t alen,
		       uint64_t timeout_ms, bool in_place)
{
	struct mnl_socket *nl = open_nf();
	if (!nl)
		return -errno;
	char buf[8192];
	struct mnl_nlmsg_batch *b = mnl_nlmsg_batch_start(buf, sizeof(buf));
	uint32_t seq = (uint32_t)time(NULL);
	int r = 0;
	nftnl_batch_begin(mnl_nlmsg_batch_current(b), seq++);
	mnl_nlmsg_batch_next(b);
	/* Linux 6.10+ restarts an existing element's timeout on a new add. Before that: add (so
	 * that it exists), delete, add again, in one transaction (a deletion costs the commit
	 * ~10 ms of RCU grace period). */
	if ((r = put_elem(b, NFT_MSG_NEWSETELEM, table, set, addr, alen, timeout_ms, seq++)) < 0)
		goto out;
	if (!in_place &&
	    ((r = put_elem(b, NFT_MSG_DELSETELEM, table, set, addr, alen, 0, seq++)) < 0 ||
	     (r = put_elem(b, NFT_MSG_NEWSETELEM, table, set, addr, alen, timeout_ms, seq++)) < 0))
		goto out;
	nftnl_batch_end(mnl_nlmsg_batch_current(b), seq++);
	mnl_nlmsg_batch_next(b);
	if (mnl_socket_sendto(nl, mnl_nlmsg_batch_head(b), mnl_nlmsg_batch_size(b)) < 0) {
		r = -errno;
		goto out;
	}
	/* The kernel ran the batch inside sendto: without NLM_F_ACK only errors are queued. */
	char rbuf[8192];
	ssize_t n = recv(mnl_socket_get_fd(nl), rbuf, sizeof(rbuf), MSG_DONTWAIT);
	if (n > 0 && mnl_cb_run(rbuf, (size_t)n, 0, mnl_socket_get_portid(nl), NULL, NULL) < 0)
		r = -errno;
out:
	mnl_nlmsg_batch_stop(b);
	mnl_socket_close(nl);
	return r;
}

static int obj_cb(const struct nlmsghdr *h, void *data)
{
	struct nftnl_obj *o = nftnl_obj_alloc();
	if (!o)
		return MNL_CB_ERROR;
	if (nftnl_obj_nlmsg_parse(h, o) == 0)
		*(uint64_t *)data = nftnl_obj_get_u64(o, NFTNL_OBJ_CTR_PKTS);
	nftnl_obj_free(o);
	return MNL_CB_OK;
}

int nftnl_counter_packets(const char *table, const char *name, uint64_t *ret)
{
	struct mnl_socket *nl = open_nf();
	if (!nl)
		return -errno;
	char buf[8192];
	uint32_t seq = (uint32_t)time(NULL);
	struct nftnl_obj *o = nftnl_obj_alloc();
	if (!o) {
		mnl_socket_close(nl);
		return -ENOMEM;
	}
	nftnl_obj_set_str(o, NFTNL_OBJ_TABLE, table);
	nftnl_obj_set_str(o, NFTNL_OBJ_NAME, name);
	nftnl_obj_set_u32(o, NFTNL_OBJ_TYPE, NFT_OBJECT_COUNTER);
	struct nlmsghdr *h = nftnl_nlmsg_build_hdr(buf, NFT_MSG_GETOBJ, NFPROTO_INET, NLM_F_ACK, seq);
	nftnl_obj_nlmsg_build_payload(h, o);
	nftnl_obj_free(o);
	int r = 0;
	uint64_t pk = UINT64_MAX;
	if (mnl_socket_sendto(nl, h, h->nlmsg_len) < 0) {
		r = -errno;
	} else {
		for (;;) {
			ssize_t n = mnl_socket_recvfrom(nl, buf, sizeof(buf));
			if (n < 0) {
				r = -errno;
				break;
			}
			int c = mnl_cb_run(buf, (size_t)n, seq, mnl_socket_get_portid(nl), obj_cb, &pk);
			if (c < 0) {
				r = -errno;
				break;
			}
			if (c == MNL_CB_STOP)
				break;
		}
	}
	mnl_socket_close(nl);
	if (r == 0 && pk == UINT64_MAX)
		r = -ENOENT;
	if (r == 0)
		*ret = pk;
	return r;
}
