/*
 * The hot nftables operations through libnftnl instead of libnftables: a sandbox's objects at
 * its create, its chain's rules at a policy change, learning an address (every allowed DNS
 * answer) and reading a drop counter (every stats call). libnftables fetches a cache of the
 * ruleset before each command: ~35 netlink requests and ~7 ms for a create's add on an idle
 * table, more with every sandbox, and ~9 ms for a learn and ~25 ms for a counter with 400
 * sandboxes of 20 learned addresses each, all on corrald's event loop. Here each is one netlink
 * batch or request to the kernel, whatever the table holds.
 *
 * The rules are the ones nft itself makes of the same text (`nft --debug=netlink`), so that
 * `nft list` shows them as if nft had made them (the unit test compares the two).
 */
#include "network/nftnl.h" /* first: its <netinet/in.h> before <linux/netfilter.h>'s linux/in.h */

#include <errno.h>
#include <stdbool.h>
#include <libmnl/libmnl.h>
#include <libnftnl/batch.h>
#include <libnftnl/chain.h>
#include <libnftnl/common.h>
#include <libnftnl/expr.h>
#include <libnftnl/object.h>
#include <libnftnl/rule.h>
#include <libnftnl/set.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "shared/macro.h"


static struct mnl_socket *open_nf(void)
{
	struct mnl_socket *nl = mnl_socket_open2(NETLINK_NETFILTER, SOCK_CLOEXEC);
	if (nl && mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) {
		mnl_socket_close(nl);
		nl = NULL;
	}
	return nl;
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

/* ---- a sandbox's objects and rules, as one transaction ----------------------------------- */

#define TYPE_IPADDR 7 /* nft's datatype number of ipv4_addr (a set's key type, for `nft list`) */
#define LEARN_SET_ID 1

/* A batch of nftables messages; the first failure sticks in err. */
struct batch {
	char *buf;
	struct mnl_nlmsg_batch *b;
	uint32_t seq;
	int err;
};

/* Room for n_msgs messages of a rule's size at most (a rule is under 400 bytes). */
static int batch_start(struct batch *t, size_t n_msgs)
{
	size_t limit = 4096 + n_msgs * 512;
	memset(t, 0, sizeof(*t));
	t->buf = malloc(2 * limit); /* mnl_nlmsg_batch_next() may overrun limit by a message */
	if (!t->buf)
		return -ENOMEM;
	t->b = mnl_nlmsg_batch_start(t->buf, limit);
	t->seq = (uint32_t)time(NULL);
	nftnl_batch_begin(mnl_nlmsg_batch_current(t->b), t->seq++);
	mnl_nlmsg_batch_next(t->b);
	return 0;
}

/* The batch fails with e, unless it failed already. */
static void batch_fail(struct batch *t, int e)
{
	if (!t->err)
		t->err = e;
}

static void batch_free(struct batch *t)
{
	if (t->b)
		mnl_nlmsg_batch_stop(t->b);
	free(t->buf);
}

static struct nlmsghdr *batch_hdr(struct batch *t, int type, int family, uint16_t flags)
{
	return nftnl_nlmsg_build_hdr(mnl_nlmsg_batch_current(t->b), (uint16_t)type,
				     (uint16_t)family, flags, t->seq++);
}

static void batch_next(struct batch *t)
{
	if (!mnl_nlmsg_batch_next(t->b))
		batch_fail(t, -EMSGSIZE);
}

/* Sends the batch (its end added) as one transaction: 0, or the kernel's -errno. */
static int batch_commit(struct batch *t)
{
	if (t->err)
		return t->err;
	nftnl_batch_end(mnl_nlmsg_batch_current(t->b), t->seq++);
	batch_next(t);
	if (t->err)
		return t->err;
	struct mnl_socket *nl = open_nf();
	if (!nl)
		return -errno;
	size_t len = mnl_nlmsg_batch_size(t->b);
	int fd = mnl_socket_get_fd(nl), r = 0;
	/* A netlink message must fit the socket's send buffer (a long policy's rules may not). */
	int sz = (int)len + 4096;
	if (len > 64 * 1024 && setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz)) < 0)
		setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
	if (mnl_socket_sendto(nl, mnl_nlmsg_batch_head(t->b), len) < 0) {
		r = -errno;
	} else {
		/* The kernel ran the batch inside sendto: without NLM_F_ACK only errors are
		 * queued, and the first aborts the whole transaction. */
		char rbuf[8192];
		ssize_t n = recv(fd, rbuf, sizeof(rbuf), MSG_DONTWAIT);
		if (n > 0 && mnl_cb_run(rbuf, (size_t)n, 0, mnl_socket_get_portid(nl), NULL, NULL) < 0)
			r = -errno;
	}
	mnl_socket_close(nl);
	return r;
}

static void put_set(struct batch *t, const char *table, const char *name, uint32_t size)
{
	struct nftnl_set *s = nftnl_set_alloc();
	if (!s) {
		batch_fail(t, -ENOMEM);
		return;
	}
	nftnl_set_set_str(s, NFTNL_SET_TABLE, table);
	nftnl_set_set_str(s, NFTNL_SET_NAME, name);
	nftnl_set_set_u32(s, NFTNL_SET_FAMILY, NFPROTO_INET);
	nftnl_set_set_u32(s, NFTNL_SET_ID, LEARN_SET_ID);
	nftnl_set_set_u32(s, NFTNL_SET_KEY_TYPE, TYPE_IPADDR);
	nftnl_set_set_u32(s, NFTNL_SET_KEY_LEN, 4);
	nftnl_set_set_u32(s, NFTNL_SET_FLAGS, NFT_SET_TIMEOUT);
	nftnl_set_set_u32(s, NFTNL_SET_DESC_SIZE, size);
	nftnl_set_nlmsg_build_payload(batch_hdr(t, NFT_MSG_NEWSET, NFPROTO_INET, NLM_F_CREATE), s);
	nftnl_set_free(s);
	batch_next(t);
}

static void put_counter(struct batch *t, const char *table, const char *name)
{
	struct nftnl_obj *o = nftnl_obj_alloc();
	if (!o) {
		batch_fail(t, -ENOMEM);
		return;
	}
	nftnl_obj_set_str(o, NFTNL_OBJ_TABLE, table);
	nftnl_obj_set_str(o, NFTNL_OBJ_NAME, name);
	nftnl_obj_set_u32(o, NFTNL_OBJ_TYPE, NFT_OBJECT_COUNTER);
	nftnl_obj_nlmsg_build_payload(batch_hdr(t, NFT_MSG_NEWOBJ, NFPROTO_INET, NLM_F_CREATE), o);
	nftnl_obj_free(o);
	batch_next(t);
}

/* Add the chain (NEWCHAIN). */
static void put_chain(struct batch *t, const char *table, const char *name)
{
	struct nftnl_chain *c = nftnl_chain_alloc();
	if (!c) {
		batch_fail(t, -ENOMEM);
		return;
	}
	nftnl_chain_set_str(c, NFTNL_CHAIN_TABLE, table);
	nftnl_chain_set_str(c, NFTNL_CHAIN_NAME, name);
	nftnl_chain_nlmsg_build_payload(batch_hdr(t, NFT_MSG_NEWCHAIN, NFPROTO_INET, NLM_F_CREATE), c);
	nftnl_chain_free(c);
	batch_next(t);
}

/* Flush the chain: a DELRULE naming no rule deletes its every rule. */
static void put_flush(struct batch *t, const char *table, const char *name)
{
	struct nftnl_rule *r = nftnl_rule_alloc();
	if (!r) {
		batch_fail(t, -ENOMEM);
		return;
	}
	nftnl_rule_set_str(r, NFTNL_RULE_TABLE, table);
	nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, name);
	nftnl_rule_nlmsg_build_payload(batch_hdr(t, NFT_MSG_DELRULE, NFPROTO_INET, 0), r);
	nftnl_rule_free(r);
	batch_next(t);
}

/* One element of set (family's table), with its data: an object's name (objref), a chain to
 * go to (gotochain) or none, and a timeout (NEWSETELEM, 0: none). elem NULL: DELSETELEM
 * without elements flushes the set. */
struct elem {
	const void *key;
	uint32_t klen;
	const char *objref;
	const char *gotochain;
	uint64_t timeout_ms;
};

static void put_elem_of(struct batch *t, int type, int family, const char *table,
			const char *set, const struct elem *el)
{
	struct nftnl_set *s = nftnl_set_alloc();
	struct nftnl_set_elem *e = el ? nftnl_set_elem_alloc() : NULL;
	if (!s || (el && !e)) {
		nftnl_set_free(s);
		nftnl_set_elem_free(e);
		batch_fail(t, -ENOMEM);
		return;
	}
	nftnl_set_set_str(s, NFTNL_SET_TABLE, table);
	nftnl_set_set_str(s, NFTNL_SET_NAME, set);
	if (e) {
		nftnl_set_elem_set(e, NFTNL_SET_ELEM_KEY, el->key, el->klen);
		if (el->objref)
			nftnl_set_elem_set_str(e, NFTNL_SET_ELEM_OBJREF, el->objref);
		if (el->gotochain) {
			nftnl_set_elem_set_u32(e, NFTNL_SET_ELEM_VERDICT, (uint32_t)NFT_GOTO);
			nftnl_set_elem_set_str(e, NFTNL_SET_ELEM_CHAIN, el->gotochain);
		}
		if (el->timeout_ms && type == NFT_MSG_NEWSETELEM)
			nftnl_set_elem_set_u64(e, NFTNL_SET_ELEM_TIMEOUT, el->timeout_ms);
		nftnl_set_elem_add(s, e);
	}
	struct nlmsghdr *h = batch_hdr(t, type, family, type == NFT_MSG_NEWSETELEM ? NLM_F_CREATE : 0);
	nftnl_set_elems_nlmsg_build_payload(h, s);
	nftnl_set_free(s);
	batch_next(t);
}

/* ---- rule expressions: what nft makes of "ip daddr ..." in an inet table ---- */

static void add_expr(struct nftnl_rule *r, struct nftnl_expr *e, bool *oom)
{
	if (e)
		nftnl_rule_add_expr(r, e);
	else
		*oom = true;
}

/* meta load nfproto => reg 1; cmp eq reg 1 ipv4; payload load len b @ network + 16 => reg 1 */
static void add_ipv4_daddr(struct nftnl_rule *r, uint32_t len, bool *oom)
{
	struct nftnl_expr *e = nftnl_expr_alloc("meta");
	if (e) {
		nftnl_expr_set_u32(e, NFTNL_EXPR_META_KEY, NFT_META_NFPROTO);
		nftnl_expr_set_u32(e, NFTNL_EXPR_META_DREG, NFT_REG_1);
	}
	add_expr(r, e, oom);
	if ((e = nftnl_expr_alloc("cmp"))) {
		nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_SREG, NFT_REG_1);
		nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_OP, NFT_CMP_EQ);
		nftnl_expr_set_u8(e, NFTNL_EXPR_CMP_DATA, NFPROTO_IPV4);
	}
	add_expr(r, e, oom);
	if ((e = nftnl_expr_alloc("payload"))) {
		nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_DREG, NFT_REG_1);
		nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_BASE, NFT_PAYLOAD_NETWORK_HEADER);
		nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_OFFSET, 16);
		nftnl_expr_set_u32(e, NFTNL_EXPR_PAYLOAD_LEN, len);
	}
	add_expr(r, e, oom);
}

/* ip daddr A/P: a byte-aligned prefix compares its bytes alone (nft's way), any other masks. */
static void add_prefix_match(struct nftnl_rule *r, const uint8_t addr[4], unsigned prefix,
			     bool *oom)
{
	bool bytes = prefix % 8 == 0 && prefix > 0;
	uint32_t len = bytes ? prefix / 8 : 4;
	add_ipv4_daddr(r, len, oom);
	struct nftnl_expr *e;
	if (!bytes) {
		uint32_t mask = prefix ? htonl(0xffffffffu << (32 - prefix)) : 0, xor = 0;
		if ((e = nftnl_expr_alloc("bitwise"))) {
			nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_SREG, NFT_REG_1);
			nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_DREG, NFT_REG_1);
			nftnl_expr_set_u32(e, NFTNL_EXPR_BITWISE_LEN, 4);
			nftnl_expr_set(e, NFTNL_EXPR_BITWISE_MASK, &mask, 4);
			nftnl_expr_set(e, NFTNL_EXPR_BITWISE_XOR, &xor, 4);
		}
		add_expr(r, e, oom);
	}
	if ((e = nftnl_expr_alloc("cmp"))) {
		nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_SREG, NFT_REG_1);
		nftnl_expr_set_u32(e, NFTNL_EXPR_CMP_OP, NFT_CMP_EQ);
		nftnl_expr_set(e, NFTNL_EXPR_CMP_DATA, addr, len);
	}
	add_expr(r, e, oom);
}

/* accept, or goto drop_chain */
static void add_verdict(struct nftnl_rule *r, bool accept, const char *drop_chain, bool *oom)
{
	struct nftnl_expr *e = nftnl_expr_alloc("immediate");
	if (e) {
		nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_DREG, NFT_REG_VERDICT);
		nftnl_expr_set_u32(e, NFTNL_EXPR_IMM_VERDICT, accept ? NF_ACCEPT : (uint32_t)NFT_GOTO);
		if (!accept)
			nftnl_expr_set_str(e, NFTNL_EXPR_IMM_CHAIN, drop_chain);
	}
	add_expr(r, e, oom);
}

/* A rule of the chain: "ip daddr @set accept" (set), "ip daddr A/P accept|goto drop" (addr), or
 * "accept|goto drop" (neither). */
static void put_rule(struct batch *t, const struct nftnl_sb *sb, const char *set,
		     const uint8_t *addr, unsigned prefix, bool accept)
{
	struct nftnl_rule *r = nftnl_rule_alloc();
	bool oom = !r;
	if (r) {
		nftnl_rule_set_str(r, NFTNL_RULE_TABLE, sb->table);
		nftnl_rule_set_str(r, NFTNL_RULE_CHAIN, sb->chain);
		nftnl_rule_set_u32(r, NFTNL_RULE_FAMILY, NFPROTO_INET);
		if (set) {
			add_ipv4_daddr(r, 4, &oom);
			struct nftnl_expr *e = nftnl_expr_alloc("lookup");
			if (e) {
				nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SREG, NFT_REG_1);
				nftnl_expr_set_str(e, NFTNL_EXPR_LOOKUP_SET, set);
				nftnl_expr_set_u32(e, NFTNL_EXPR_LOOKUP_SET_ID, LEARN_SET_ID);
			}
			add_expr(r, e, &oom);
		} else if (addr) {
			add_prefix_match(r, addr, prefix, &oom);
		}
		add_verdict(r, accept, sb->drop_chain, &oom);
	}
	if (oom) {
		nftnl_rule_free(r);
		batch_fail(t, -ENOMEM);
		return;
	}
	nftnl_rule_nlmsg_build_payload(
	    batch_hdr(t, NFT_MSG_NEWRULE, NFPROTO_INET, NLM_F_APPEND | NLM_F_CREATE), r);
	nftnl_rule_free(r);
	batch_next(t);
}

/* The chain's rules after a flush of it: in dns mode accept (the always-blocked came before);
 * in dns+nft the learned set, the policy's address rules in order, then its default. */
static void put_rules(struct batch *t, const struct nftnl_sb *sb)
{
	put_flush(t, sb->table, sb->chain);
	if (!sb->enforce) {
		put_rule(t, sb, NULL, NULL, 0, true);
		return;
	}
	put_rule(t, sb, sb->learn_set, NULL, 0, true);
	for (size_t i = 0; sb->policy && i < sb->policy->n; i++) {
		const struct egress_rule *r = &sb->policy->rules[i];
		if (r->kind == EGRESS_CIDR && r->family == AF_INET)
			put_rule(t, sb, NULL, r->addr, r->prefix, r->action == EGRESS_ALLOW);
	}
	put_rule(t, sb, NULL, NULL, 0, sb->default_action == EGRESS_ALLOW);
}

static size_t n_rules(const struct nftnl_sb *sb)
{
	return sb->policy ? sb->policy->n : 0;
}

int nftnl_sandbox_add(const struct nftnl_sb *sb)
{
	struct batch t;
	if (batch_start(&t, 16 + n_rules(sb)) < 0)
		return -ENOMEM;
	uint8_t port[IF_NAMESIZE + 4] = {0}; /* ifname . ipv4_addr: the name zero-padded */
	memcpy(port, sb->veth, strnlen(sb->veth, IF_NAMESIZE - 1));
	memcpy(port + IF_NAMESIZE, &sb->addr, 4);
	put_set(&t, sb->table, sb->learn_set, sb->learn_set_size);
	put_counter(&t, sb->table, sb->counter);
	put_chain(&t, sb->table, sb->chain);
	put_rules(&t, sb);
	put_elem_of(&t, NFT_MSG_NEWSETELEM, NFPROTO_INET, sb->table, "drops",
		    &(struct elem){.key = &sb->addr, .klen = 4, .objref = sb->counter});
	put_elem_of(&t, NFT_MSG_NEWSETELEM, NFPROTO_INET, sb->table, "src4",
		    &(struct elem){.key = &sb->addr, .klen = 4, .gotochain = sb->chain});
	put_elem_of(&t, NFT_MSG_NEWSETELEM, NFPROTO_BRIDGE, sb->table, "ports",
		    &(struct elem){.key = port, .klen = sizeof(port)});
	put_elem_of(&t, NFT_MSG_NEWSETELEM, NFPROTO_BRIDGE, sb->table, "port_names",
		    &(struct elem){.key = port, .klen = IF_NAMESIZE});
	int r = batch_commit(&t);
	batch_free(&t);
	return r;
}

int nftnl_sandbox_rules(const struct nftnl_sb *sb, bool forget_learned)
{
	struct batch t;
	if (batch_start(&t, 8 + n_rules(sb)) < 0)
		return -ENOMEM;
	put_rules(&t, sb);
	if (forget_learned)
		put_elem_of(&t, NFT_MSG_DELSETELEM, NFPROTO_INET, sb->table, sb->learn_set, NULL);
	int r = batch_commit(&t);
	batch_free(&t);
	return r;
}

int nftnl_sandboxes_rules(const struct nftnl_sb *sbs, size_t n)
{
	struct batch t;
	size_t msgs = 8;
	for (size_t i = 0; i < n; i++)
		msgs += 4 + n_rules(&sbs[i]);
	if (batch_start(&t, msgs) < 0)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		put_rules(&t, &sbs[i]);
	int r = batch_commit(&t);
	batch_free(&t);
	return r;
}

int nftnl_elem_refresh(const char *table, const char *set, const void *addr, size_t alen,
		       uint64_t timeout_ms, bool in_place)
{
	struct batch t;
	if (batch_start(&t, 3) < 0)
		return -ENOMEM;
	const struct elem el = {.key = addr, .klen = (uint32_t)alen, .timeout_ms = timeout_ms};
	/* Linux 6.10+ restarts an existing element's timeout on a new add. Before that: add (so
	 * that it exists), delete, add again, in one transaction (a deletion costs the commit
	 * ~10 ms of RCU grace period). */
	put_elem_of(&t, NFT_MSG_NEWSETELEM, NFPROTO_INET, table, set, &el);
	if (!in_place) {
		put_elem_of(&t, NFT_MSG_DELSETELEM, NFPROTO_INET, table, set, &el);
		put_elem_of(&t, NFT_MSG_NEWSETELEM, NFPROTO_INET, table, set, &el);
	}
	int r = batch_commit(&t);
	batch_free(&t);
	return r;
}
