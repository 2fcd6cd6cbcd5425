/*
 * The data plane (net.h): the host side at start, a sandbox's veth and nftables state, its policy
 * in nftables. Netlink through nl.c (libmnl), nftables through libnftables transactions.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <nftables/libnftables.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "network/net.h"
#include "network/nftnl.h"
#include "network/nl.h"
#include "shared/fsutil.h"
#include "shared/hash.h"
#include "shared/macro.h"

#ifndef PIDFD_GET_NET_NAMESPACE
#define PIDFD_GET_NET_NAMESPACE _IO(0xFF, 4)
#endif

#define ALIAS_PREFIX "corral:"
#define NFT_SCRIPT_MAX 65536

struct net_sandbox {
	char id[UUID_STR_LEN];
	struct in_addr addr;
	enum net_mode mode;
	bool seen; /* named by net_sandbox_add() since net_new(): not a leftover */
	bool retired; /* its veth is gone, its nftables objects wait for net_reap() */
	bool reaping; /* in the net_reap() under way (net_reap_begin()) */
	bool broken; /* net_gc() found its chain or counter gone: everything it sends is dropped */
	bool readopt; /* re-adopted: net_gc() puts its chain's rules in from rp */
	struct egress_policy rp; /* a re-adopted sandbox's recorded policy (a copy) */
};

/* ---- names ---------------------------------------------------------------------------------- */

const char *net_mode_name(enum net_mode m)
{
	return m == NET_MODE_DNS ? "dns" : "dns+nft";
}

int net_mode_parse(const char *s, enum net_mode *ret)
{
	if (strcmp(s, "dns") == 0)
		*ret = NET_MODE_DNS;
	else if (strcmp(s, "dns+nft") == 0)
		*ret = NET_MODE_DNS_NFT;
	else
		return -EINVAL;
	return 0;
}

/* "cr" + the id's first 13 hex digits: 15 characters, IFNAMSIZ's most. */
static void veth_name(const char *id, char out[IF_NAMESIZE])
{
	size_t o = 0;
	out[o++] = 'c';
	out[o++] = 'r';
	for (const char *p = id; *p && o < IF_NAMESIZE - 1; p++)
		if (*p != '-')
			out[o++] = *p;
	out[o] = '\0';
}

/* The id in nft identifiers: '-' is not allowed there. */
static void nft_id(const char *id, char out[UUID_STR_LEN])
{
	size_t i = 0;
	for (; id[i] && i < UUID_STR_LEN - 1; i++)
		out[i] = id[i] == '-' ? '_' : id[i];
	out[i] = '\0';
}

static bool id_ok(const char *id)
{
	return id && id_is_uuid(id);
}

/* ---- nftables --------------------------------------------------------------------------------- */

/* Run one nft script (a single transaction). */
static int nft_run(struct net *n, struct error *err, const char *script)
{
	if (nft_run_cmd_from_buffer(n->nft, script) != 0) {
		const char *e = nft_ctx_get_error_buffer(n->nft);
		char first[512];
		snprintf(first, sizeof(first), "%s", e ? e : "");
		char *nl = strchr(first, '\n');
		if (nl)
			*nl = '\0';
		/* nft prints errno text ("No such file or directory", "File exists"). */
		int code = strstr(e ? e : "", "No such file") ? ENOENT : EIO;
		return error_set(err, code, "nftables: %s", first[0] ? first : "command failed");
	}
	return 0;
}

static int nft_runf(struct net *n, struct error *err, const char *fmt, ...) _printf_(3, 4);
static int nft_runf(struct net *n, struct error *err, const char *fmt, ...)
{
	_cleanup_free_ char *s = NULL;
	va_list ap;
	va_start(ap, fmt);
	int r = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (r < 0)
		return error_set(err, ENOMEM, "nftables script");
	return nft_run(n, err, s);
}

void net_prefix4_str(const struct net_prefix4 *p, char buf[NET_PREFIX4_STRLEN])
{
	char a[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &p->addr, a, sizeof(a));
	snprintf(buf, NET_PREFIX4_STRLEN, "%s/%u", a, p->prefix);
}

static bool prefix4_covers(const struct net_prefix4 *outer, const struct net_prefix4 *inner)
{
	uint32_t mask = outer->prefix ? ~0u << (32 - outer->prefix) : 0;
	return outer->prefix <= inner->prefix &&
	       (ntohl(inner->addr.s_addr) & mask) == ntohl(outer->addr.s_addr);
}

int net_blocked_add(struct net_config *cfg, const char *arg, struct error *err)
{
	static const char *const private[] = {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
					      "100.64.0.0/10"};
	if (strcmp(arg, "private") == 0) {
		for (size_t i = 0; i < ARRAY_SIZE(private); i++) {
			int r = net_blocked_add(cfg, private[i], err);
			if (r < 0)
				return r;
		}
		return 0;
	}
	struct egress_rule t;
	struct error e = {0};
	if (egress_target_parse(arg, &t, &e) < 0 || t.kind != EGRESS_CIDR)
		return error_set(err, EINVAL, "'%s' is not an IPv4 address or network, or \"private\"%s%s",
				 arg, e.msg[0] ? ": " : "", e.msg);
	if (t.family != AF_INET)
		return error_set(err, EINVAL, "'%s': sandboxes send no IPv6 at all", arg);
	if (t.prefix == 0)
		return error_set(err, EINVAL,
				 "'%s' is every address: for no egress at all use --egress-default deny or --egress-uplink none",
				 arg);
	if (cfg->n_blocked == NET_BLOCKED_MAX)
		return error_set(err, E2BIG, "at most %d networks", NET_BLOCKED_MAX);
	struct net_prefix4 *b = &cfg->blocked[cfg->n_blocked++];
	memcpy(&b->addr, t.addr, sizeof(b->addr));
	b->prefix = t.prefix;
	return 0;
}

/*
 * The always-blocked networks as the elements of an nftables interval set ("a/p, ..."): the
 * built-in ones, the sandbox subnet, the operator's; none inside another, which such a set
 * refuses. 0, or -ENOSPC.
 */
static int blocked_elements(const struct net *n, char *buf, size_t len)
{
	/* the metadata services: 169.254.169.254 (most clouds), Alibaba Cloud's 100.100.100.200,
	 * Azure's WireServer 168.63.129.16 */
	static const char *const builtin[] = {"0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16",
					      "224.0.0.0/3", "100.100.100.200/32",
					      "168.63.129.16/32"};
	struct net_config b = {0}; /* the built-in ones, read as the operator's are */
	for (size_t i = 0; i < ARRAY_SIZE(builtin); i++)
		(void)net_blocked_add(&b, builtin[i], NULL);
	struct net_prefix4 all[ARRAY_SIZE(builtin) + 1 + NET_BLOCKED_MAX];
	size_t k = 0;
	for (size_t i = 0; i < b.n_blocked; i++)
		all[k++] = b.blocked[i];
	all[k++] = (struct net_prefix4){n->subnet, (uint8_t)n->prefix};
	for (size_t i = 0; i < n->n_blocked; i++)
		all[k++] = n->blocked[i];
	size_t used = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < k; i++) {
		bool inside = false;
		for (size_t j = 0; j < k && !inside; j++)
			inside = j != i && prefix4_covers(&all[j], &all[i]) &&
				 (all[j].prefix < all[i].prefix || j < i);
		if (inside)
			continue;
		char a[NET_PREFIX4_STRLEN];
		net_prefix4_str(&all[i], a);
		int w = snprintf(buf + used, len - used, "%s%s", used ? ", " : "", a);
		if (w < 0 || (size_t)w >= len - used)
			return -ENOSPC;
		used += (size_t)w;
	}
	return 0;
}

/* The base of both tables. Chains and the always-blocked set are refilled on every start (one
 * transaction, so no packet sees them half-made); the maps and per-sandbox objects are kept. */
static int nft_base(struct net *n, struct error *err)
{
	char sub[NET_PREFIX4_STRLEN], gw[INET_ADDRSTRLEN], uplink_rule[96], masq[160] = "";
	char blocked[2048];
	net_prefix4_str(&(struct net_prefix4){n->subnet, (uint8_t)n->prefix}, sub);
	inet_ntop(AF_INET, &n->gateway, gw, sizeof(gw));
	if (blocked_elements(n, blocked, sizeof(blocked)) < 0)
		return error_set(err, ENOSPC, "the always-blocked networks do not fit");
	if (n->uplink[0])
		snprintf(uplink_rule, sizeof(uplink_rule), "oifname != \"%s\" goto drop_sb", n->uplink);
	else
		snprintf(uplink_rule, sizeof(uplink_rule), "goto drop_sb");
	const char *N = n->name;
	char droplog[192] = "";
	if (n->log_drops) /* before the drop: each dropped packet to corrald (droplog.c) */
		snprintf(droplog, sizeof(droplog),
			 "add rule inet %s drop_sb limit rate %d/second burst %d packets log group %u snaplen %d\n",
			 N, NET_DROPLOG_RATE, NET_DROPLOG_RATE, net_droplog_group(n),
			 NET_DROPLOG_SNAPLEN);
	if (n->uplink[0]) /* in the same transaction: no moment without NAT after a restart */
		snprintf(masq, sizeof(masq),
			 "add rule inet %s postrouting ip saddr %s oifname \"%s\" masquerade\n", N, sub,
			 n->uplink);
	return nft_runf(
	    n, err,
	    "add table inet %1$s\n"
	    "add set inet %1$s blocked4 { type ipv4_addr; flags interval; }\n"
	    "flush set inet %1$s blocked4\n"
	    "add element inet %1$s blocked4 { %12$s }\n"
	    "add map inet %1$s src4 { type ipv4_addr : verdict; }\n"
	    "add map inet %1$s drops { type ipv4_addr : counter; }\n"
	    "add chain inet %1$s drop_sb\n"
	    "flush chain inet %1$s drop_sb\n"
	    "%10$s"
	    "add rule inet %1$s drop_sb counter name ip saddr map @drops\n"
	    "add rule inet %1$s drop_sb drop\n"
	    /* to the host: only corral's resolver on the gateway */
	    "add chain inet %1$s in_sb\n"
	    "flush chain inet %1$s in_sb\n"
	    "add rule inet %1$s in_sb meta nfproto ipv6 drop\n"
	    /* corral's resolver runs on corrald's loop: a token bucket per sandbox address bounds
	     * the work each sandbox can give it (a flood of 80,000 queries/s from one took 55%%
	     * of corrald's CPU), in the kernel, before a socket sees a byte */
	    "add set inet %1$s dns_rate { type ipv4_addr; size 65536; flags dynamic,timeout; timeout 1m; }\n"
	    "add set inet %1$s dns_conn_rate { type ipv4_addr; size 65536; flags dynamic,timeout; timeout 1m; }\n"
	    "add rule inet %1$s in_sb ip daddr %3$s tcp dport 53 tcp flags & (syn | ack) == syn update @dns_conn_rate { ip saddr limit rate over %8$d/second burst %9$d packets } goto drop_sb\n"
	    "add rule inet %1$s in_sb ip daddr %3$s meta l4proto { tcp, udp } th dport 53 update @dns_rate { ip saddr limit rate over %6$d/second burst %7$d packets } goto drop_sb\n"
	    /* corral's resolver, whose sockets are bound to the gateway's address: while corrald
	     * is down (a restart), a host service listening on every address (a DNS server's
	     * default) would get these otherwise. Neither a socket bound to the wildcard, nor a
	     * connection that began with one, nor a UDP flow kept alive across the restart. */
	    "add rule inet %1$s in_sb ip daddr %3$s udp dport 53 socket wildcard 0 accept\n"
	    "add rule inet %1$s in_sb ip daddr %3$s tcp dport 53 ct state new socket wildcard 0 accept\n"
	    "add rule inet %1$s in_sb ip daddr %3$s tcp dport 53 ct state established accept\n"
	    "add rule inet %1$s in_sb meta l4proto { tcp, udp } th dport 53 goto drop_sb\n"
	    "add rule inet %1$s in_sb ct state established,related accept\n"
	    "add rule inet %1$s in_sb goto drop_sb\n"
	    /* A sandbox's conversations with corral's resolver are not tracked: each would be a
	     * conntrack entry of the host's, "assured" (never evicted early) once it goes on for
	     * 2 s, from any of a sandbox's 64,000 ports, whatever its policy: a few sandboxes
	     * would fill the host's table, and the host would drop every new flow. */
	    "add chain inet %1$s dns_raw_in { type filter hook prerouting priority raw; policy accept; }\n"
	    "flush chain inet %1$s dns_raw_in\n"
	    "add rule inet %1$s dns_raw_in iifname \"%1$s\" ip daddr %3$s udp dport 53 notrack\n"
	    "add chain inet %1$s dns_raw_out { type filter hook output priority raw; policy accept; }\n"
	    "flush chain inet %1$s dns_raw_out\n"
	    "add rule inet %1$s dns_raw_out oifname \"%1$s\" ip saddr %3$s udp sport 53 notrack\n"
	    "add chain inet %1$s input { type filter hook input priority filter - 5; policy accept; }\n"
	    "flush chain inet %1$s input\n"
	    /* a sandbox address from anywhere but the bridge (or the host itself) is forged: corral's
	     * resolver would take it for that sandbox's query */
	    "add rule inet %1$s input ip saddr %2$s iifname != { \"%1$s\", \"lo\" } drop\n"
	    "add rule inet %1$s input iifname \"%1$s\" jump in_sb\n"
	    "add rule inet %1$s input iifname \"%1$s\" drop\n"
	    /* through the host: the always-blocked, then the sandbox's own chain */
	    "add chain inet %1$s out_sb\n"
	    "flush chain inet %1$s out_sb\n"
	    "add rule inet %1$s out_sb meta nfproto ipv6 drop\n"
	    "add rule inet %1$s out_sb ip daddr @blocked4 goto drop_sb\n"
	    "add rule inet %1$s out_sb meta l4proto { tcp, udp } th dport { 53, 853 } goto drop_sb\n"
	    "add rule inet %1$s out_sb %4$s\n"
	    "add rule inet %1$s out_sb ct state established,related accept\n"
	    /* every flow is a conntrack entry of the host's (an "assured" one is never evicted
	     * early): a sandbox may hold flows_max live ones, or a few would fill the host's table
	     * and the host would drop every new flow, its own included */
	    "add set inet %1$s flows { type ipv4_addr; size 65536; flags dynamic; }\n"
	    "add rule inet %1$s out_sb ct state new add @flows { ip saddr ct count over %11$u } goto drop_sb\n"
	    "add rule inet %1$s out_sb ip saddr vmap @src4\n"
	    "add rule inet %1$s out_sb drop\n"
	    "add chain inet %1$s forward { type filter hook forward priority filter - 5; policy accept; }\n"
	    "flush chain inet %1$s forward\n"
	    "add rule inet %1$s forward ip saddr %2$s iifname != \"%1$s\" drop\n"
	    "add rule inet %1$s forward iifname \"%1$s\" jump out_sb\n"
	    "add rule inet %1$s forward iifname \"%1$s\" drop\n"
	    "add rule inet %1$s forward oifname \"%1$s\" ct state established,related accept\n"
	    "add rule inet %1$s forward oifname \"%1$s\" drop\n"
	    "add chain inet %1$s postrouting { type nat hook postrouting priority srcnat; policy accept; }\n"
	    "flush chain inet %1$s postrouting\n"
	    "%5$s"
	    /* the bridge: a port speaks IPv4 and ARP from its own address only */
	    "add table bridge %1$s\n"
	    "add set bridge %1$s ports { type ifname . ipv4_addr; }\n"
	    "add set bridge %1$s port_names { type ifname; }\n"
	    "add chain bridge %1$s port_in\n"
	    "flush chain bridge %1$s port_in\n"
	    "add rule bridge %1$s port_in ether type ip iifname . ip saddr @ports accept\n"
	    "add rule bridge %1$s port_in ether type arp iifname . arp saddr ip @ports accept\n"
	    "add rule bridge %1$s port_in drop\n"
	    "add chain bridge %1$s pre { type filter hook prerouting priority -200; policy accept; }\n"
	    "flush chain bridge %1$s pre\n"
	    "add rule bridge %1$s pre iifname @port_names jump port_in\n",
	    N, sub, gw, uplink_rule, masq, NET_DNS_RATE, NET_DNS_BURST, NET_DNS_CONN_RATE,
	    NET_DNS_CONN_BURST, droplog, n->flows_max, blocked);
}

static json_t *nft_list_json(struct net *n, const char *cmd);
static json_t *nft_list_json_flags(struct net *n, const char *cmd, unsigned more);

/* Does a second add of a set element restart its timeout (Linux 6.10+)? Asked once, of a
 * throwaway set in our table. */
static bool probe_timeout_update(struct net *n)
{
	const char *N = n->name;
	if (nft_runf(n, NULL,
		     "add set inet %1$s probe_timeout { type ipv4_addr; flags timeout; }\n"
		     "flush set inet %1$s probe_timeout\n"
		     "add element inet %1$s probe_timeout { 192.0.2.1 timeout 10s }\n",
		     N) < 0)
		return false;
	bool ok = false;
	struct in_addr a = {inet_addr("192.0.2.1")};
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "list set inet %s probe_timeout", N);
	if (nftnl_elem_refresh(N, "probe_timeout", &a, 4, 3600 * 1000, true) == 0) {
		json_t *j = nft_list_json(n, cmd);
		/* the element's timeout in seconds: 3600 if the add updated it, else still 10 */
		json_t *items = json_object_get(j, "nftables"), *it;
		size_t i;
		json_array_foreach(items, i, it) {
			json_t *elems = json_object_get(json_object_get(it, "set"), "elem"), *el;
			size_t k;
			json_array_foreach(elems, k, el) {
				json_t *e = json_object_get(json_object_get(el, "elem"), "timeout");
				ok |= json_integer_value(e) == 3600;
			}
		}
		json_decref(j);
	}
	nft_runf(n, NULL, "delete set inet %s probe_timeout\n", N);
	return ok;
}

/* ---- host side -------------------------------------------------------------------------------- */

static int parse_subnet(const char *s, struct in_addr *net, unsigned *prefix, struct error *err)
{
	char buf[32];
	snprintf(buf, sizeof(buf), "%s", s);
	char *slash = strchr(buf, '/');
	char *end = NULL;
	unsigned long p = slash ? strtoul(slash + 1, &end, 10) : 0;
	if (!slash || end == slash + 1 || *end || p < 8 || p > 28)
		return error_set(err, EINVAL,
				 "sandbox subnet '%s' must be an IPv4 network A.B.C.D/P with P from 8 to 28",
				 s);
	*slash = '\0';
	if (inet_pton(AF_INET, buf, net) != 1)
		return error_set(err, EINVAL, "sandbox subnet '%s': '%s' is no IPv4 address", s, buf);
	uint32_t mask = 0xffffffffu << (32 - p);
	if (ntohl(net->s_addr) & ~mask)
		return error_set(err, EINVAL, "sandbox subnet '%s' has host bits set", s);
	*prefix = (unsigned)p;
	return 0;
}

static int open_own_netns(void)
{
	int pfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
	if (pfd >= 0) {
		int fd = ioctl(pfd, PIDFD_GET_NET_NAMESPACE, 0);
		close(pfd);
		if (fd >= 0)
			return fd; /* close-on-exec, as pidfd ioctls make them */
	}
	int fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

static int set_forwarding(const char *ifname, struct error *err)
{
	char path[128];
	snprintf(path, sizeof(path), "/proc/sys/net/ipv4/conf/%s/forwarding", ifname);
	int r = fs_write_string(path, "1");
	return r < 0 ? error_set_errno(err, -r, "enable forwarding on %s", ifname) : 0;
}

/* One corrald per network name: a second would adopt the first's bridge and remove its
 * sandboxes' veths and rules as leftovers. The lock dies with the process (kill -9 included). */
static int lock_name(struct net *n, struct error *err)
{
	char path[96];
	if (mkdir(NET_LOCK_DIR, 0700) < 0 && errno != EEXIST)
		return error_set_errno(err, errno, "mkdir '%s'", NET_LOCK_DIR);
	snprintf(path, sizeof(path), NET_LOCK_DIR "/%s.lock", n->name);
	/* A clean exit unlinks the file while it holds the lock (net_unlock()): a lock taken on
	 * a file that is no longer at path is no lock, take the new one. */
	for (int tries = 0;; tries++) {
		n->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (n->lock_fd < 0)
			return error_set_errno(err, errno, "open '%s'", path);
		if (flock(n->lock_fd, LOCK_EX | LOCK_NB) < 0)
			break;
		struct stat a, b;
		if (fstat(n->lock_fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
		    a.st_ino == b.st_ino)
			goto locked;
		close(n->lock_fd);
		n->lock_fd = -1;
		if (tries >= 8)
			return error_set(err, EAGAIN, "'%s' keeps being replaced", path);
	}
	{
		char holder[32] = "";
		ssize_t k = pread(n->lock_fd, holder, sizeof(holder) - 1, 0);
		holder[k > 0 ? k : 0] = '\0';
		holder[strcspn(holder, "\n")] = '\0';
		close(n->lock_fd);
		n->lock_fd = -1; /* not ours: net_free() must not unlink it */
		return error_set(err, EBUSY,
				 "network '%s' is in use by another corrald%s%s%s: give this one another --network-name and --sandbox-subnet",
				 n->name, holder[0] ? " (pid " : "", holder, holder[0] ? ")" : "");
	}
locked:;
	char pid[32];
	int len = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
	if (ftruncate(n->lock_fd, 0) == 0 && pwrite(n->lock_fd, pid, (size_t)len, 0) < 0) {
		/* the pid is only a hint for the message above */
	}
	return 0;
}

/* n->sb's two indexes (n->by_id, n->by_addr) */
static uint32_t addr_hash(struct in_addr a)
{
	uint32_t x = a.s_addr; /* a mixer: the addresses of a subnet differ in their last bits */
	x ^= x >> 16;
	x *= 0x7feb352dU;
	x ^= x >> 15;
	x *= 0x846ca68bU;
	return x ^ (x >> 16);
}

static uint32_t id_hash_at(const void *ctx, uint32_t pos)
{
	return hash_fnv1a(((const struct net *)ctx)->sb[pos].id);
}

static bool id_equal_at(const void *ctx, uint32_t pos, const void *key)
{
	return strcmp(((const struct net *)ctx)->sb[pos].id, key) == 0;
}

static uint32_t addr_hash_at(const void *ctx, uint32_t pos)
{
	return addr_hash(((const struct net *)ctx)->sb[pos].addr);
}

static bool addr_equal_at(const void *ctx, uint32_t pos, const void *key)
{
	return ((const struct net *)ctx)->sb[pos].addr.s_addr == ((const struct in_addr *)key)->s_addr;
}

static const struct posindex_ops by_id_ops = {id_hash_at, id_equal_at};
static const struct posindex_ops by_addr_ops = {addr_hash_at, addr_equal_at};

int net_new(const struct net_config *cfg, struct net **ret, struct error *err)
{
	int r;
	const char *name = cfg->name ? cfg->name : NET_DEFAULT_NAME;
	size_t nl_len = strlen(name);
	if (nl_len == 0 || nl_len > NET_NAME_MAX || name[0] < 'a' || name[0] > 'z' ||
	    strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_") != nl_len)
		return error_set(err, EINVAL,
				 "network name '%s' must be 1 to %d of a-z, 0-9, '_', starting with a letter",
				 name, NET_NAME_MAX);
	struct net *n = calloc(1, sizeof(*n));
	if (!n)
		return error_set(err, ENOMEM, "network");
	snprintf(n->name, sizeof(n->name), "%s", name);
	n->lock_fd = -1;
	n->by_id = (struct posindex){.ops = &by_id_ops, .ctx = n};
	n->by_addr = (struct posindex){.ops = &by_addr_ops, .ctx = n};
	n->log_drops = cfg->log_drops;
	n->flows_max = cfg->flows_max ? cfg->flows_max : NET_FLOWS_DEFAULT;
	memcpy(n->blocked, cfg->blocked, sizeof(n->blocked));
	n->n_blocked = cfg->n_blocked;
	if ((r = lock_name(n, err)) < 0)
		goto fail;
	if ((r = parse_subnet(cfg->subnet ? cfg->subnet : NET_DEFAULT_SUBNET, &n->subnet,
			      &n->prefix, err)) < 0)
		goto fail;
	n->gateway.s_addr = htonl(ntohl(n->subnet.s_addr) + 1);
	n->next_host = 2;

	struct nl nl = {0};
	if ((r = nl_open(&nl)) < 0) {
		r = error_set_errno(err, -r, "netlink socket");
		goto fail;
	}
	if (cfg->uplink && cfg->uplink[0]) {
		if (strlen(cfg->uplink) >= IF_NAMESIZE || nl_link_index(&nl, cfg->uplink) < 0) {
			nl_close(&nl);
			r = error_set(err, ENODEV, "egress uplink '%s': no such interface",
				      cfg->uplink);
			goto fail;
		}
		snprintf(n->uplink, sizeof(n->uplink), "%s", cfg->uplink);
	} else {
		int oif = nl_default_route_oif(&nl);
		if (oif > 0 && if_indextoname((unsigned)oif, n->uplink))
			n->uplink_auto = true;
		else
			n->uplink[0] = '\0';
	}
	r = nl_bridge_add(&nl, n->name);
	if (r < 0 && r != -EEXIST) {
		nl_close(&nl);
		r = error_set_errno(err, -r, "create bridge %s", n->name);
		goto fail;
	}
	n->bridge_ifindex = nl_link_index(&nl, n->name);
	if (n->bridge_ifindex < 0) {
		nl_close(&nl);
		r = error_set_errno(err, -n->bridge_ifindex, "find bridge %s", n->name);
		goto fail;
	}
	/*
	 * A bridge without an address of its own takes the lowest of its ports' and changes it as
	 * sandboxes come and go: every sandbox's ARP entry for the gateway then points at a MAC
	 * nobody answers to until it expires (seconds without DNS or any traffic, under churn). A
	 * fixed one, locally administered and derived from the name, is kept across restarts too.
	 */
	uint8_t mac[6] = {0x02, 0xc0, 0, 0, 0, 0};
	uint32_t hsh = hash_fnv1a(n->name);
	memcpy(mac + 2, &hsh, 4);
	const char *step = "set the MAC address of";
	if ((r = nl_link_set_mac(&nl, n->bridge_ifindex, mac)) < 0 ||
	    (step = "no IPv6 on", r = nl_link_no_ipv6(&nl, n->bridge_ifindex)) < 0 ||
	    (step = "address", r = nl_addr4_add(&nl, n->bridge_ifindex, n->gateway, n->prefix)) < 0 ||
	    (step = "bring up", r = nl_link_up(&nl, n->bridge_ifindex, NULL)) < 0) {
		nl_close(&nl);
		r = error_set_errno(err, -r, "bridge %s: %s", n->name, step);
		goto fail;
	}
	nl_close(&nl);
	if ((r = set_forwarding(n->name, err)) < 0 ||
	    (n->uplink[0] && (r = set_forwarding(n->uplink, err)) < 0))
		goto fail;

	n->nft = nft_ctx_new(NFT_CTX_DEFAULT);
	if (!n->nft) {
		r = error_set(err, ENOMEM, "nftables context");
		goto fail;
	}
	nft_ctx_buffer_output(n->nft);
	nft_ctx_buffer_error(n->nft);
	if ((r = nft_base(n, err)) < 0) {
		error_prefix(err, "nftables table %s", n->name);
		goto fail;
	}
	n->timeout_update = probe_timeout_update(n);
	n->stale_flows = true;
	*ret = n;
	return 0;
fail:
	net_free(n);
	return r;
}

void net_unlock(struct net *n)
{
	if (!n || n->lock_fd < 0)
		return;
	char path[96];
	snprintf(path, sizeof(path), NET_LOCK_DIR "/%s.lock", n->name);
	unlink(path); /* still holding the lock: see lock_name() */
	close(n->lock_fd);
	n->lock_fd = -1;
}

void net_free(struct net *n)
{
	if (!n)
		return;
	if (n->nft)
		nft_ctx_free(n->nft);
	net_unlock(n);
	for (size_t i = 0; i < n->n_sb; i++)
		egress_policy_clear(&n->sb[i].rp);
	free(n->sb);
	posindex_free(&n->by_id);
	posindex_free(&n->by_addr);
	free(n);
}

/* ---- sandboxes -------------------------------------------------------------------------------- */

static struct net_sandbox *find(const struct net *n, const char *id)
{
	uint32_t pos = posindex_find(&n->by_id, hash_fnv1a(id), id);
	return pos == POSINDEX_NONE ? NULL : &n->sb[pos];
}

/* The sandbox (live, retired or being reaped: addresses are never shared) with address a. */
static struct net_sandbox *find_addr(const struct net *n, struct in_addr a)
{
	uint32_t pos = posindex_find(&n->by_addr, addr_hash(a), &a);
	return pos == POSINDEX_NONE ? NULL : &n->sb[pos];
}

static bool addr_used(const struct net *n, struct in_addr a)
{
	return find_addr(n, a) != NULL;
}

/* The sandbox at position i out of n->sb (the last takes its place). */
static void sb_remove_at(struct net *n, size_t i)
{
	size_t last = n->n_sb - 1;
	posindex_del(&n->by_id, (uint32_t)i);
	posindex_del(&n->by_addr, (uint32_t)i);
	if (i != last) {
		n->sb[i] = n->sb[last];
		posindex_move(&n->by_id, (uint32_t)last, (uint32_t)i);
		posindex_move(&n->by_addr, (uint32_t)last, (uint32_t)i);
	}
	n->n_sb--;
}

static int alloc_addr(struct net *n, struct in_addr *ret, struct error *err)
{
	uint32_t hosts = (1u << (32 - n->prefix)) - 2; /* less the network and broadcast */
	for (uint32_t k = 0; k < hosts; k++) {
		uint32_t h = n->next_host + k;
		if (h < 2 || h > hosts)
			h = 2 + (h - 2) % (hosts - 1); /* .1 is the gateway */
		struct in_addr a = {htonl(ntohl(n->subnet.s_addr) + h)};
		if (!addr_used(n, a)) {
			n->next_host = h + 1;
			*ret = a;
			return 0;
		}
	}
	return error_set(err, EADDRNOTAVAIL, "every address of the sandbox subnet is in use");
}

static bool in_subnet(const struct net *n, struct in_addr a)
{
	uint32_t mask = 0xffffffffu << (32 - n->prefix);
	uint32_t h = ntohl(a.s_addr) & ~mask;
	return (ntohl(a.s_addr) & mask) == ntohl(n->subnet.s_addr) && h >= 2 && h != ~mask;
}

/* The names a sandbox's kernel objects are made from. */
struct sb_names {
	char cid[UUID_STR_LEN], veth[IF_NAMESIZE], as[INET_ADDRSTRLEN];
};

static void sb_names(const char *id, struct in_addr addr, struct sb_names *ret)
{
	nft_id(id, ret->cid);
	veth_name(id, ret->veth);
	inet_ntop(AF_INET, &addr, ret->as, sizeof(ret->as));
}

/* A sandbox's nftables objects' names and rules, for nftnl.c. */
struct sb_nft {
	struct sb_names nm;
	char chain[UUID_STR_LEN + 4], set[UUID_STR_LEN + 4], counter[UUID_STR_LEN + 4];
	struct nftnl_sb sb;
};

static void sb_nft(const struct net *n, const char *id, struct in_addr addr, enum net_mode mode,
		   const struct egress_policy *p, enum egress_action def, struct sb_nft *ret)
{
	sb_names(id, addr, &ret->nm);
	snprintf(ret->chain, sizeof(ret->chain), "sb_%s", ret->nm.cid);
	snprintf(ret->set, sizeof(ret->set), "l_%s", ret->nm.cid);
	snprintf(ret->counter, sizeof(ret->counter), "d_%s", ret->nm.cid);
	ret->sb = (struct nftnl_sb){
	    .table = n->name,
	    .chain = ret->chain,
	    .learn_set = ret->set,
	    .learn_set_size = NET_LEARN_SET_MAX,
	    .counter = ret->counter,
	    .drop_chain = "drop_sb",
	    .veth = ret->nm.veth,
	    .addr = addr,
	    .enforce = mode == NET_MODE_DNS_NFT,
	    .policy = p,
	    .default_action = def,
	};
}

int net_sandbox_add(struct net *n, const char *sandbox_id, enum net_mode mode,
		    enum egress_action default_action, struct in_addr *addr, struct error *err)
{
	return net_sandbox_add_policy(n, sandbox_id, mode, NULL, default_action, addr, err);
}

int net_sandbox_add_policy(struct net *n, const char *sandbox_id, enum net_mode mode,
			   const struct egress_policy *p, enum egress_action default_action,
			   struct in_addr *addr, struct error *err)
{
	if (!id_ok(sandbox_id))
		return error_set(err, EINVAL, "sandbox id '%s' is not a uuid", sandbox_id);
	struct net_sandbox *sb = find(n, sandbox_id);
	bool adopt = addr->s_addr != 0;
	if (sb) {
		if (adopt && sb->addr.s_addr != addr->s_addr)
			return error_set(err, EEXIST, "sandbox %s has another address already",
					 sandbox_id);
		*addr = sb->addr;
		sb->seen = true;
		return 0;
	}
	int r;
	struct in_addr a = *addr;
	if (adopt) {
		if (!in_subnet(n, a))
			return error_set(err, EINVAL,
					 "sandbox %s's recorded address is not in the sandbox subnet (was --sandbox-subnet changed?)",
					 sandbox_id);
		if (addr_used(n, a))
			return error_set(err, EADDRINUSE, "sandbox %s's address is taken",
					 sandbox_id);
	} else if ((r = alloc_addr(n, &a, err)) < 0) {
		return r;
	}
	if (n->n_sb == n->cap_sb) {
		size_t cap = n->cap_sb ? 2 * n->cap_sb : 64;
		struct net_sandbox *v = realloc(n->sb, cap * sizeof(*v));
		if (!v)
			return error_set(err, ENOMEM, "network sandbox table");
		n->sb = v;
		if (posindex_reserve(&n->by_id, (uint32_t)cap, (uint32_t)n->n_sb) < 0 ||
		    posindex_reserve(&n->by_addr, (uint32_t)cap, (uint32_t)n->n_sb) < 0)
			return error_set(err, ENOMEM, "network sandbox table");
		n->cap_sb = cap;
	}

	/* A re-adopted sandbox keeps its set (with what it learned), counter and map elements as
	 * they are in the kernel: nothing to do here but keep its policy (net_gc() puts the map
	 * elements of exactly the re-adopted sandboxes back in one transaction, and their chains'
	 * rules from their records in libnftnl batches: a kill -9 between a policy's nftables
	 * commit and its record must not leave the kernel enforcing the newer one), so a restart
	 * over many sandboxes costs a few transactions, not one per sandbox. A new one gets
	 * everything, its chain's rules included, in one libnftnl batch (nftnl.c: no ruleset
	 * cache to fetch first). */
	enum egress_action def = p ? p->default_action : default_action;
	struct egress_policy rp;
	egress_policy_init(&rp, def);
	if (adopt) {
		if (p && egress_policy_copy(&rp, p) < 0)
			return error_set(err, ENOMEM, "network sandbox table");
	} else {
		struct sb_nft o;
		sb_nft(n, sandbox_id, a, mode, p, def, &o);
		if ((r = nftnl_sandbox_add(&o.sb)) < 0)
			return error_set_errno(err, -r, "sandbox %s: nftables objects", sandbox_id);
	}
	sb = &n->sb[n->n_sb++];
	memset(sb, 0, sizeof(*sb));
	snprintf(sb->id, sizeof(sb->id), "%s", sandbox_id);
	sb->addr = a;
	posindex_put(&n->by_id, (uint32_t)(n->n_sb - 1));
	posindex_put(&n->by_addr, (uint32_t)(n->n_sb - 1));
	sb->mode = mode;
	sb->seen = true;
	sb->readopt = adopt;
	sb->rp = rp;
	*addr = a;
	return 0;
}

/* Each command its own transaction: a part already gone does not keep the rest. */
static void nft_remove_objects(struct net *n, const char *cid)
{
	static const char *const what[] = {"chain inet %s sb_%s", "set inet %s l_%s",
					   "counter inet %s d_%s"};
	for (size_t i = 0; i < ARRAY_SIZE(what); i++) {
		char cmd[256];
		int k = snprintf(cmd, sizeof(cmd), "delete ");
		_Pragma("GCC diagnostic push");
		_Pragma("GCC diagnostic ignored \"-Wformat-nonliteral\"");
		snprintf(cmd + k, sizeof(cmd) - (size_t)k, what[i], n->name, cid);
		_Pragma("GCC diagnostic pop");
		nft_run(n, NULL, cmd);
	}
}

/* Everything of a sandbox's in the nftables tables, as one script. */
static void print_removal(FILE *f, const char *N, const struct sb_names *s)
{
	fprintf(f,
		"delete element inet %1$s src4 { %2$s }\n"
		"delete element inet %1$s drops { %2$s }\n"
		"delete element bridge %1$s ports { \"%3$s\" . %2$s }\n"
		"delete element bridge %1$s port_names { \"%3$s\" }\n"
		"delete chain inet %1$s sb_%4$s\n"
		"delete set inet %1$s l_%4$s\n"
		"delete counter inet %1$s d_%4$s\n",
		N, s->as, s->veth, s->cid);
}

/* The same piece by piece, for when the script failed (something was already gone). */
static void remove_piecewise(struct net *n, const struct sb_names *s)
{
	const char *N = n->name;
	nft_runf(n, NULL, "delete element inet %s src4 { %s }\n", N, s->as);
	nft_runf(n, NULL, "delete element inet %s drops { %s }\n", N, s->as);
	nft_runf(n, NULL, "delete element bridge %s ports { \"%s\" . %s }\n", N, s->veth, s->as);
	nft_runf(n, NULL, "delete element bridge %s port_names { \"%s\" }\n", N, s->veth);
	nft_remove_objects(n, s->cid);
}

/* The kernel's part of net_sandbox_remove(): nothing in n changes (n->nft is used). */
static int remove_kernel(struct net *n, const char *sandbox_id, struct error *err)
{
	int r = net_sandbox_unplug(n, sandbox_id, err);
	if (r < 0)
		return r;
	struct net_sandbox *sb = find(n, sandbox_id);
	if (sb) {
		struct sb_names nm;
		sb_names(sandbox_id, sb->addr, &nm);
		char script[2048] = "";
		FILE *f = fmemopen(script, sizeof(script) - 1, "w");
		bool ok = f != NULL;
		if (f) {
			print_removal(f, n->name, &nm);
			ok = fclose(f) == 0;
		}
		/* All at once when all is there (the usual case), else piece by piece. */
		if (!ok || nft_run(n, NULL, script) < 0)
			remove_piecewise(n, &nm);
		/* Its flows end with it (best effort: the next sandbox with the address flushes
		 * them again before it starts). */
		nl_ct_flush_src4(sb->addr);
	} else {
		char cid[UUID_STR_LEN];
		nft_id(sandbox_id, cid);
		nft_remove_objects(n, cid);
	}
	return 0;
}

void net_sandbox_forget(struct net *n, const char *sandbox_id)
{
	struct net_sandbox *sb = find(n, sandbox_id ? sandbox_id : "");
	if (sb) {
		egress_policy_clear(&sb->rp);
		sb_remove_at(n, (size_t)(sb - n->sb));
	}
}

int net_sandbox_remove(struct net *n, const char *sandbox_id, struct error *err)
{
	int r = remove_kernel(n, sandbox_id, err);
	net_sandbox_forget(n, sandbox_id);
	return r;
}

int net_sandbox_unplug(const struct net *n, const char *sandbox_id, struct error *err)
{
	if (!id_ok(sandbox_id))
		return error_set(err, EINVAL, "sandbox id '%s' is not a uuid", sandbox_id);
	char veth[IF_NAMESIZE];
	veth_name(sandbox_id, veth);
	struct nl nl = {0};
	int r = nl_open(&nl);
	if (r >= 0) {
		r = nl_link_del(&nl, veth);
		nl_close(&nl);
	}
	if (r < 0)
		return error_set_errno(err, -r, "sandbox %s: delete veth %s", sandbox_id, veth);
	(void)n;
	return 0;
}

void net_sandbox_retire(struct net *n, const char *sandbox_id)
{
	struct net_sandbox *sb = find(n, sandbox_id ? sandbox_id : "");
	if (sb)
		sb->retired = true;
}

size_t net_retired(const struct net *n)
{
	size_t k = 0;
	for (size_t i = 0; i < n->n_sb; i++)
		k += n->sb[i].retired;
	return k;
}

size_t net_reap_begin(struct net *n)
{
	size_t k = 0;
	for (size_t i = 0; i < n->n_sb; i++)
		if (n->sb[i].retired) {
			n->sb[i].reaping = true;
			k++;
		}
	return k;
}

static bool is_reaping(struct in_addr src, void *arg)
{
	const struct net_sandbox *sb = find_addr(arg, src);
	return sb && sb->reaping;
}

int net_reap(const struct net *n, struct error *err)
{
	struct net w = *n;
	w.nft = nft_ctx_new(NFT_CTX_DEFAULT);
	if (!w.nft)
		return error_set(err, ENOMEM, "nftables context");
	nft_ctx_buffer_output(w.nft);
	nft_ctx_buffer_error(w.nft);
	_cleanup_free_ char *s = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&s, &len);
	if (!f) {
		nft_ctx_free(w.nft);
		return error_set(err, ENOMEM, "nftables script");
	}
	for (size_t i = 0; i < n->n_sb; i++) {
		struct sb_names nm;
		if (!n->sb[i].reaping)
			continue;
		sb_names(n->sb[i].id, n->sb[i].addr, &nm);
		print_removal(f, n->name, &nm);
	}
	int r = 0;
	if (fclose(f) != 0) {
		r = error_set(err, ENOMEM, "nftables script");
	} else if (len && nft_run(&w, NULL, s) < 0) {
		/* One transaction for all (one RCU grace period) in the usual case; piece by piece
		 * when something was already gone. */
		for (size_t i = 0; i < n->n_sb; i++) {
			struct sb_names nm;
			if (!n->sb[i].reaping)
				continue;
			sb_names(n->sb[i].id, n->sb[i].addr, &nm);
			remove_piecewise(&w, &nm);
		}
	}
	nft_ctx_free(w.nft);
	/* Their flows go before their addresses are free again (net_reap_end()): a new sandbox
	 * must not inherit one as "established", past its policy. One dump for all of them. */
	int c = nl_ct_flush_src4_if(is_reaping, (void *)n);
	if (c < 0 && r >= 0)
		r = error_set_errno(err, -c, "forget the connections of deleted sandboxes");
	return r;
}

void net_reap_end(struct net *n, bool done)
{
	for (size_t i = 0; i < n->n_sb;) {
		struct net_sandbox *sb = &n->sb[i];
		if (sb->reaping && done) {
			sb_remove_at(n, i);
			continue;
		}
		sb->reaping = false;
		i++;
	}
}

int net_sandbox_teardown(const struct net *n, const char *sandbox_id, struct error *err)
{
	/* An nftables context of this process's own: the caller's is a socket shared with the
	 * process that forked it. */
	struct net w = *n;
	w.nft = nft_ctx_new(NFT_CTX_DEFAULT);
	if (!w.nft)
		return error_set(err, ENOMEM, "nftables context");
	nft_ctx_buffer_output(w.nft);
	nft_ctx_buffer_error(w.nft);
	int r = remove_kernel(&w, sandbox_id, err);
	nft_ctx_free(w.nft);
	return r;
}

struct gc_links {
	struct net *n;
	char (*doomed)[IF_NAMESIZE];
	size_t n_doomed, cap;
};

static void gc_link(int ifindex, const char *name, const char *alias, int master, void *arg)
{
	struct gc_links *g = arg;
	char prefix[64];
	int k = snprintf(prefix, sizeof(prefix), ALIAS_PREFIX "%s:", g->n->name);
	if (strncmp(alias, prefix, (size_t)k) != 0)
		return;
	const char *id = alias + k;
	struct net_sandbox *sb = find(g->n, id);
	if (sb && sb->seen)
		return;
	if (g->n_doomed == g->cap) {
		size_t cap = g->cap ? 2 * g->cap : 16;
		void *v = realloc(g->doomed, cap * sizeof(*g->doomed));
		if (!v)
			return;
		g->doomed = v;
		g->cap = cap;
	}
	snprintf(g->doomed[g->n_doomed++], IF_NAMESIZE, "%s", name);
}

/* "sb_<cid>" and the like back to an id; NULL when name is none of ours. */
static bool object_id(const char *name, const char *prefix, char id[UUID_STR_LEN])
{
	size_t pl = strlen(prefix);
	if (strncmp(name, prefix, pl) != 0 || strlen(name + pl) != UUID_STR_LEN - 1)
		return false;
	for (size_t i = 0; i < UUID_STR_LEN; i++)
		id[i] = name[pl + i] == '_' ? '-' : name[pl + i];
	return id_is_uuid(id);
}

/* The table's objects as JSON (libnftables' JSON output), or NULL. */
static json_t *nft_list_json(struct net *n, const char *cmd)
{
	return nft_list_json_flags(n, cmd, 0);
}

/* The same with more output flags (NFT_CTX_OUTPUT_TERSE: sets without their elements, which are
 * then not fetched either). */
static json_t *nft_list_json_flags(struct net *n, const char *cmd, unsigned more)
{
	unsigned flags = nft_ctx_output_get_flags(n->nft);
	nft_ctx_output_set_flags(n->nft, flags | more | NFT_CTX_OUTPUT_JSON);
	int r = nft_run_cmd_from_buffer(n->nft, cmd);
	nft_ctx_output_set_flags(n->nft, flags);
	if (r != 0)
		return NULL;
	const char *out = nft_ctx_get_output_buffer(n->nft);
	return out ? json_loads(out, 0, NULL) : NULL;
}

/* The table (a "list table" JSON) holds the sandbox's chain and counter (the map elements'
 * targets). */
static bool has_objects(json_t *table, const char *cid)
{
	char chain[UUID_STR_LEN + 4], counter[UUID_STR_LEN + 4], set[UUID_STR_LEN + 4];
	snprintf(chain, sizeof(chain), "sb_%s", cid);
	snprintf(counter, sizeof(counter), "d_%s", cid);
	snprintf(set, sizeof(set), "l_%s", cid); /* the chain's rules name it (net_gc refills them) */
	bool c1 = false, c2 = false, c3 = false;
	json_t *it;
	size_t i;
	json_array_foreach(json_object_get(table, "nftables"), i, it) {
		const char *a = json_string_value(json_object_get(json_object_get(it, "chain"), "name"));
		const char *b =
		    json_string_value(json_object_get(json_object_get(it, "counter"), "name"));
		const char *c = json_string_value(json_object_get(json_object_get(it, "set"), "name"));
		c1 |= a && strcmp(a, chain) == 0;
		c2 |= b && strcmp(b, counter) == 0;
		c3 |= c && strcmp(c, set) == 0;
	}
	return c1 && c2 && c3;
}

/* Adds {kind: {"name": name}} to items when the table has a counter of that name. */
static void add_counter_if_there(const struct net *n, json_t *items, const char *name)
{
	uint64_t pk;
	if (nftnl_counter_packets(n->name, name, &pk) == 0)
		json_array_append_new(items, json_pack("{s:{s:s}}", "counter", "name", name));
}

/*
 * The chains, sets and counters of our inet table as {"nftables": [{"chain": {"name"}}, ...]},
 * without their rules and elements: "list table" brings every rule of every sandbox (10 MiB of
 * JSON and ~1.5 s for 40 sandboxes of 1024 address rules, on the loop at every start), and a
 * counter listing fetches them all too. Chains and sets of every inet table (cheap: no rules, no
 * elements), ours kept; counters looked up by name: those of the known sandboxes and of every id
 * a leftover chain or set names.
 */
static json_t *table_objects(struct net *n)
{
	json_t *items = json_array();
	if (!items)
		return NULL;
	static const char *const cmds[] = {"list chains inet", "list sets inet"};
	for (size_t c = 0; c < ARRAY_SIZE(cmds); c++) {
		json_t *j = nft_list_json_flags(n, cmds[c], NFT_CTX_OUTPUT_TERSE), *it;
		if (!j) {
			json_decref(items);
			return NULL;
		}
		size_t i;
		json_array_foreach(json_object_get(j, "nftables"), i, it) {
			const char *kind = c == 0 ? "chain" : "set";
			json_t *o = json_object_get(it, kind);
			const char *t = json_string_value(json_object_get(o, "table"));
			const char *name = json_string_value(json_object_get(o, "name"));
			if (t && name && strcmp(t, n->name) == 0)
				json_array_append_new(items,
						      json_pack("{s:{s:s}}", kind, "name", name));
		}
		json_decref(j);
	}
	char name[UUID_STR_LEN + 4], cid[UUID_STR_LEN];
	for (size_t i = 0; i < n->n_sb; i++) {
		nft_id(n->sb[i].id, cid);
		snprintf(name, sizeof(name), "d_%s", cid);
		add_counter_if_there(n, items, name);
	}
	size_t k = json_array_size(items);
	for (size_t i = 0; i < k; i++) {
		json_t *it = json_array_get(items, i);
		const char *a = json_string_value(json_object_get(json_object_get(it, "chain"), "name"));
		const char *b = json_string_value(json_object_get(json_object_get(it, "set"), "name"));
		char id[UUID_STR_LEN];
		if (!((a && object_id(a, "sb_", id)) || (b && object_id(b, "l_", id))))
			continue;
		struct net_sandbox *sb = find(n, id);
		if (sb && sb->seen)
			continue;
		nft_id(id, cid);
		snprintf(name, sizeof(name), "d_%s", cid);
		bool listed = false; /* a leftover's chain and set name the same id */
		for (size_t m = k; m < json_array_size(items); m++) {
			json_t *o = json_object_get(json_array_get(items, m), "counter");
			const char *c = json_string_value(json_object_get(o, "name"));
			listed |= c && strcmp(c, name) == 0;
		}
		if (!listed)
			add_counter_if_there(n, items, name);
	}
	return json_pack("{s:o}", "nftables", items);
}

bool net_sandbox_broken(const struct net *n, const char *sandbox_id)
{
	const struct net_sandbox *sb = find(n, sandbox_id ? sandbox_id : "");
	return sb && sb->broken;
}

/* A source address of the subnet that none of the sandboxes net_gc() keeps has. */
static bool is_stale(struct in_addr src, void *arg)
{
	const struct net *n = arg;
	if (!in_subnet(n, src))
		return false;
	const struct net_sandbox *sb = find_addr(n, src);
	return !(sb && sb->seen);
}

/*
 * The chains of the re-adopted sandboxes (not broken) refilled from their records' policies (a
 * kill -9 between a policy change's nftables commit and its record leaves the chain newer than the
 * record), through libnftnl: as text, libnftables took ~1 s for 40 sandboxes of 1024 address
 * rules, on the loop at every start. Batches of up to REFILL_BATCH_RULES rules, each one
 * transaction; a batch that fails goes sandbox by sandbox, and a sandbox whose chain cannot be
 * refilled is treated as broken (no map elements: everything it sends is dropped) rather than
 * left enforcing a policy its record no longer has.
 */
#define REFILL_BATCH_RULES 16384
static void refill_chains(struct net *n)
{
	struct sb_nft *o = calloc(n->n_sb ? n->n_sb : 1, sizeof(*o));
	struct net_sandbox **who = calloc(n->n_sb ? n->n_sb : 1, sizeof(*who));
	struct nftnl_sb *v = calloc(n->n_sb ? n->n_sb : 1, sizeof(*v));
	size_t k = 0;
	for (size_t i = 0; o && who && v && i < n->n_sb; i++) {
		struct net_sandbox *sb = &n->sb[i];
		if (!sb->readopt || sb->broken)
			continue;
		sb_nft(n, sb->id, sb->addr, sb->mode, &sb->rp, sb->rp.default_action, &o[k]);
		v[k] = o[k].sb;
		who[k++] = sb;
	}
	for (size_t i = 0; i < n->n_sb && !(o && who && v); i++)
		if (n->sb[i].readopt)
			n->sb[i].broken = true; /* out of memory: none refilled */
	for (size_t first = 0; first < k;) {
		size_t end = first, rules = 0;
		do
			rules += 2 + who[end]->rp.n;
		while (++end < k && rules + 2 + who[end]->rp.n <= REFILL_BATCH_RULES);
		if (nftnl_sandboxes_rules(v + first, end - first) < 0)
			for (size_t i = first; i < end; i++)
				if (nftnl_sandbox_rules(&v[i], false) < 0)
					who[i]->broken = true;
		first = end;
	}
	free(o);
	free(who);
	free(v);
}

int net_gc(struct net *n, struct error *err)
{
	int removed = 0;
	struct gc_links g = {.n = n};
	struct nl nl = {0};
	int r;
	/* A dump of the links is interrupted (-EINTR) when a link comes or goes meanwhile: other
	 * corralds' sandboxes, anything on a busy host. Asked again, on a fresh socket (the rest
	 * of the interrupted dump is still queued on the old one); without it the whole start's
	 * clean-up was skipped: no chain refilled from its record, no leftover removed. */
	for (int tries = 0;; tries++) {
		g.n_doomed = 0;
		if ((r = nl_open(&nl)) < 0) {
			free(g.doomed);
			return error_set_errno(err, -r, "netlink socket");
		}
		r = nl_links(&nl, gc_link, &g);
		if (r != -EINTR || tries >= 16)
			break;
		nl_close(&nl);
	}
	for (size_t i = 0; r >= 0 && i < g.n_doomed; i++)
		if (nl_link_del(&nl, g.doomed[i]) >= 0)
			removed++;
	nl_close(&nl);
	free(g.doomed);
	if (r < 0)
		return error_set_errno(err, -r, "list links");

	/* nftables: the maps hold exactly the known sandboxes; objects of others go. One
	 * transaction, so no known sandbox is ever without its elements. */
	json_t *j = table_objects(n);
	if (!j)
		return error_set(err, EIO, "nftables: list the chains and sets of table inet %s failed",
				 n->name);
	FILE *f, *fd;
	_cleanup_free_ char *s = NULL, *dels = NULL;
	size_t len = 0, dlen = 0;
	if (!(f = open_memstream(&s, &len))) {
		json_decref(j);
		return error_set(err, ENOMEM, "nftables script");
	}
	if (!(fd = open_memstream(&dels, &dlen))) {
		fclose(f);
		json_decref(j);
		return error_set(err, ENOMEM, "nftables script");
	}
	const char *N = n->name;
	fprintf(f, "flush map inet %1$s src4\nflush map inet %1$s drops\nflush set bridge %1$s ports\n"
		   "flush set bridge %1$s port_names\n", N);
	for (size_t i = 0; i < n->n_sb; i++) {
		char cid[UUID_STR_LEN];
		nft_id(n->sb[i].id, cid);
		n->sb[i].broken = !has_objects(j, cid);
	}
	refill_chains(n);
	for (size_t i = 0; i < n->n_sb; i++) {
		/* A broken sandbox (e.g. after a reboot: its chain is gone) gets no map elements,
		 * so the host drops what it sends through it; its port also drops out of the
		 * bridge's anti-spoofing sets, where it could send with a neighbour's address (to
		 * corral's resolver, in the neighbour's name). Its veth goes: it has no network at
		 * all until it is deleted and created again. */
		if (n->sb[i].broken) {
			(void)net_sandbox_unplug(n, n->sb[i].id, NULL);
			continue;
		}
		struct sb_names nm;
		sb_names(n->sb[i].id, n->sb[i].addr, &nm);
		fprintf(f,
			"add element inet %1$s drops { %2$s : \"d_%3$s\" }\n"
			"add element inet %1$s src4 { %2$s : goto sb_%3$s }\n"
			"add element bridge %1$s ports { \"%4$s\" . %2$s }\n"
			"add element bridge %1$s port_names { \"%4$s\" }\n",
			N, nm.as, nm.cid, nm.veth);
	}
	json_t *items = json_object_get(j, "nftables"), *it;
	size_t idx;
	int stale = 0;
	static const struct {
		const char *kind, *prefix, *cmd;
	} kinds[] = {{"chain", "sb_", "chain"}, {"set", "l_", "set"}, {"counter", "d_", "counter"}};
	/* Chains before the sets and counters their rules name, or those are busy. */
	for (size_t k = 0; k < ARRAY_SIZE(kinds); k++) {
		json_array_foreach(items, idx, it) {
			json_t *o = json_object_get(it, kinds[k].kind);
			const char *name = json_string_value(json_object_get(o, "name"));
			char id[UUID_STR_LEN];
			if (!name || !object_id(name, kinds[k].prefix, id))
				continue;
			struct net_sandbox *sb = find(n, id);
			if (sb && sb->seen)
				continue;
			fprintf(fd, "delete %s inet %s %s\n", kinds[k].cmd, N, name);
			stale++;
		}
	}
	json_decref(j);
	bool ok = fclose(fd) == 0;
	if (ok && dels)
		fputs(dels, f);
	if (fclose(f) != 0 || !ok)
		return error_set(err, ENOMEM, "nftables script");
	if (nft_run(n, NULL, s) == 0)
		goto done;
	/* Something changed since the listing (the previous corrald's teardown or reap workers
	 * outlive it and may be removing the same leftovers): the maps in one transaction, then
	 * each deletion on its own. */
	s[len - dlen] = '\0';
	if ((r = nft_run(n, err, s)) < 0)
		return error_prefix(err, "refill the maps");
	for (char *line = dels, *next; line && *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		nft_run(n, NULL, line);
	}
done:
	/* The flows of sandboxes deleted before this start (a kill -9 before their reap): one
	 * dump, after which a create needs none (net_attach()). */
	if (nl_ct_flush_src4_if(is_stale, n) >= 0)
		n->stale_flows = false;
	/* The re-adopted chains' rules are in: what the records say is what the kernel does. */
	for (size_t i = 0; i < n->n_sb; i++) {
		egress_policy_clear(&n->sb[i].rp);
		n->sb[i].readopt = false;
	}
	return removed + stale / 3;
}

/* ---- attach (create worker) ------------------------------------------------------------------ */

int net_attach(const struct net *n, const char *sandbox_id, int netns_fd, struct in_addr addr,
	       struct error *err)
{
	if (!id_ok(sandbox_id))
		return error_set(err, EINVAL, "sandbox id '%s' is not a uuid", sandbox_id);
	char veth[IF_NAMESIZE], alias[96];
	veth_name(sandbox_id, veth);
	snprintf(alias, sizeof(alias), ALIAS_PREFIX "%s:%s", n->name, sandbox_id);
	struct nl host = {0}, in = {0};
	/* The flows of the address's previous sandbox must not count as this one's: they went
	 * before the address was free again (net_reap()), or at this corrald's start for one it
	 * did not know (net_gc()). Only until that start's flush: here, before the veth exists
	 * (a conntrack dump walks the whole host table: ~16 ms on every create otherwise). */
	int r = n->stale_flows ? nl_ct_flush_src4(addr) : 0;
	if (r < 0) {
		char as[INET_ADDRSTRLEN];
		inet_ntop(AF_INET, &addr, as, sizeof(as));
		return error_set_errno(err, -r, "forget the connections of address %s", as);
	}
	r = nl_open(&host);
	if (r < 0)
		return error_set_errno(err, -r, "netlink socket");
	r = nl_veth_add(&host, veth, alias, n->bridge_ifindex, "eth0", netns_fd);
	if (r < 0) {
		error_set_errno(err, -r, "create veth %s%s%s", veth, host.ext[0] ? ": " : "",
				host.ext);
		goto out;
	}
	/* A netlink socket made in the sandbox's namespace stays there: configure eth0 through it. */
	int here = open_own_netns();
	if (here < 0) {
		r = error_set_errno(err, -here, "open this process's network namespace");
		goto fail;
	}
	if (setns(netns_fd, CLONE_NEWNET) < 0) {
		close(here);
		r = error_set_errno(err, errno, "enter the sandbox's network namespace");
		goto fail;
	}
	r = nl_open(&in);
	if (setns(here, CLONE_NEWNET) < 0) {
		r = error_set_errno(err, errno, "return to the host's network namespace");
		close(here);
		goto fail;
	}
	close(here);
	if (r < 0) {
		error_set_errno(err, -r, "netlink socket in the sandbox");
		goto fail;
	}
	const char *step = "lo up";
	int eth0 = 0;
	if ((r = nl_link_up(&in, 0, "lo")) < 0 ||
	    (step = "find eth0", r = eth0 = nl_link_index(&in, "eth0")) < 0 ||
	    (step = "no IPv6 on eth0", r = nl_link_no_ipv6(&in, eth0)) < 0 ||
	    (step = "address eth0", r = nl_addr4_add(&in, eth0, addr, n->prefix)) < 0 ||
	    (step = "eth0 up", r = nl_link_up(&in, eth0, NULL)) < 0 ||
	    (step = "default route", r = nl_route4_default(&in, eth0, n->gateway)) < 0) {
		error_set_errno(err, -r, "sandbox network: %s%s%s", step, in.ext[0] ? ": " : "",
				in.ext);
		goto fail;
	}
	r = 0;
	goto out;
fail:
	nl_link_del(&host, veth);
out:
	nl_close(&in);
	nl_close(&host);
	return r;
}

/* ---- policy ------------------------------------------------------------------------------------ */

int net_policy_apply(struct net *n, const char *sandbox_id, const struct egress_policy *p,
		     enum net_mode mode, struct error *err)
{
	struct net_sandbox *sb = find(n, sandbox_id ? sandbox_id : "");
	if (!sb)
		return error_set(err, ENOENT, "sandbox %s has no network", sandbox_id);
	struct sb_nft o;
	sb_nft(n, sandbox_id, sb->addr, mode, p, p ? p->default_action : EGRESS_DENY, &o);
	int r = nftnl_sandbox_rules(&o.sb, true);
	if (r < 0)
		return error_set_errno(err, -r, "sandbox %s: apply policy", sandbox_id);
	sb->mode = mode;
	return 0;
}

int net_learn(struct net *n, const char *sandbox_id, int family, const void *addr, uint32_t ttl_s,
	      struct error *err)
{
	struct net_sandbox *sb = find(n, sandbox_id ? sandbox_id : "");
	if (!sb)
		return error_set(err, ENOENT, "sandbox %s has no network", sandbox_id);
	if (family == AF_INET6 || sb->mode != NET_MODE_DNS_NFT)
		return 0; /* IPv6 is dropped anyway; dns mode admits every address */
	if (family != AF_INET)
		return error_set(err, EAFNOSUPPORT, "address family %d", family);
	if (ttl_s < NET_LEARN_TTL_FLOOR_S)
		ttl_s = NET_LEARN_TTL_FLOOR_S;
	if (ttl_s > NET_LEARN_TTL_MAX_S)
		ttl_s = NET_LEARN_TTL_MAX_S;
	char cid[UUID_STR_LEN], as[INET_ADDRSTRLEN];
	nft_id(sandbox_id, cid);
	inet_ntop(AF_INET, addr, as, sizeof(as));
	char set[UUID_STR_LEN + 2];
	snprintf(set, sizeof(set), "l_%s", cid);
	int r = nftnl_elem_refresh(n->name, set, addr, 4, (uint64_t)ttl_s * 1000,
				   n->timeout_update);
	return r < 0 ? error_set_errno(err, -r, "sandbox %s: learn %s", sandbox_id, as) : 0;
}

int net_sandbox_by_addr(struct net *n, int family, const void *addr, char id_out[UUID_STR_LEN])
{
	if (family != AF_INET)
		return -ENOENT;
	struct in_addr a;
	memcpy(&a, addr, sizeof(a));
	const struct net_sandbox *sb = find_addr(n, a);
	if (!sb || sb->retired)
		return -ENOENT;
	memcpy(id_out, sb->id, UUID_STR_LEN);
	return 0;
}

int net_sandbox_drops(struct net *n, const char *sandbox_id, uint64_t *ret_packets,
		      struct error *err)
{
	if (!id_ok(sandbox_id))
		return error_set(err, EINVAL, "sandbox id '%s' is not a uuid", sandbox_id);
	char cid[UUID_STR_LEN], name[UUID_STR_LEN + 2];
	nft_id(sandbox_id, cid);
	snprintf(name, sizeof(name), "d_%s", cid);
	int r = nftnl_counter_packets(n->name, name, ret_packets);
	return r < 0 ? error_set_errno(err, -r, "sandbox %s: read its drop counter", sandbox_id) : 0;
}
