/*
 * libnetwork (src/network/net.h) in a throwaway network namespace: the test unshares its own netns
 * first, so the bridge, veths and nftables tables it makes never touch the host's, and vanish with
 * it. A "sandbox" is a child process in a netns of its own; an "internet" is one end of a veth pair.
 *
 * Checks: the host side comes up and is re-adopted by a second net_new() (learned addresses and
 * rules survive); attach gives eth0 the address and a default route (through the sandbox ns's own
 * netlink view); the chain holds the static rules in order and the default, and connections meet
 * them (a deny /32 before an allow /24, a deny default, a learned address until its TTL runs out,
 * dns mode letting an IP literal through); learn fills the set;
 * by_addr finds the sandbox; remove and gc leave no veth, chain, set, counter or map element.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <nftables/libnftables.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "network/net.h"

#ifndef PIDFD_GET_NET_NAMESPACE
#define PIDFD_GET_NET_NAMESPACE _IO(0xFF, 4)
#endif

static int failures;
#define CHECK(cond)                                                                                \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond);   \
			failures++;                                                                \
		}                                                                                  \
	} while (0)
#define CHECK_OK(expr, e)                                                                          \
	do {                                                                                       \
		int r_ = (expr);                                                                   \
		if (r_ < 0) {                                                                      \
			fprintf(stderr, "%s:%d: %s: %d %s\n", __FILE__, __LINE__, #expr, r_,       \
				(e).msg);                                                          \
			failures++;                                                                \
		}                                                                                  \
	} while (0)

/* nft's answer to cmd (text), or "" */
static char *nft_text(const char *cmd)
{
	struct nft_ctx *c = nft_ctx_new(NFT_CTX_DEFAULT);
	nft_ctx_buffer_output(c);
	nft_ctx_buffer_error(c);
	char *out = strdup(nft_run_cmd_from_buffer(c, cmd) == 0 ? nft_ctx_get_output_buffer(c) : "");
	nft_ctx_free(c);
	return out;
}

static char *run(const char *sh)
{
	FILE *p = popen(sh, "r");
	static char buf[65536];
	size_t n = p ? fread(buf, 1, sizeof(buf) - 1, p) : 0;
	buf[n] = '\0';
	if (p)
		pclose(p);
	return buf;
}

/* A TCP connect to addr:8080 from pid's netns (0: this process's) succeeds. */
static bool reach(pid_t pid, const char *addr)
{
	char cmd[256], ns[64] = "";
	if (pid)
		snprintf(ns, sizeof(ns), "nsenter --net=/proc/%d/ns/net ", (int)pid);
	snprintf(cmd, sizeof(cmd),
		 "%stimeout 3 bash -c 'echo > /dev/tcp/%s/8080' >/dev/null 2>&1; echo $?", ns, addr);
	return strcmp(run(cmd), "0\n") == 0;
}

/* A child parked in a new netns; its netns fd. */
static pid_t sandbox_ns(int *ret_fd)
{
	int p[2];
	if (pipe(p) < 0)
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		close(p[0]);
		if (unshare(CLONE_NEWNET) < 0)
			_exit(1);
		if (write(p[1], "x", 1) != 1)
			_exit(1);
		syscall(SYS_close_range, 3U, ~0U, 0U); /* the network name's lock, among others */
		pause();
		_exit(0);
	}
	close(p[1]);
	char c;
	if (read(p[0], &c, 1) != 1)
		return -1;
	close(p[0]);
	int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
	*ret_fd = ioctl(pfd, PIDFD_GET_NET_NAMESPACE, 0);
	if (*ret_fd < 0) {
		char path[64];
		snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
		*ret_fd = open(path, O_RDONLY | O_CLOEXEC);
	}
	close(pfd);
	return pid;
}

#define ID1 "11111111-2222-4333-8444-555555555555"
#define ID2 "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"
#define GONE "99999999-2222-4333-8444-555555555555"
#define ID3 "cccccccc-bbbb-4ccc-8ddd-eeeeeeeeeeee"

/* --egress-block: what net_blocked_add() takes, and the always-blocked set it makes (no network
 * inside another: an interval set refuses them). */
static void test_blocked(void)
{
	struct error e = {0};
	struct net_config cfg = {.name = "tblk", .subnet = "10.98.0.0/24"};
	CHECK(net_blocked_add(&cfg, "private", &e) == 0 && cfg.n_blocked == 4);
	CHECK(net_blocked_add(&cfg, "10.1.2.3/16", &e) == 0); /* host bits cleared, inside 10/8 */
	CHECK(cfg.blocked[4].addr.s_addr == inet_addr("10.1.0.0") && cfg.blocked[4].prefix == 16);
	CHECK(net_blocked_add(&cfg, "192.0.2.130/25", &e) == 0);
	CHECK(net_blocked_add(&cfg, "198.51.100.7", &e) == 0 && cfg.blocked[6].prefix == 32);
	CHECK(net_blocked_add(&cfg, "198.51.100.7", &e) == 0); /* twice: one element */
	const char *bad[] = {"example.com", "*.example.com", "::1", "fc00::/7", "0.0.0.0/0",
			     "10.0.0.0/33", "10.0.0", "", "private,10.0.0.0/8"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		size_t before = cfg.n_blocked;
		CHECK(net_blocked_add(&cfg, bad[i], &e) == -EINVAL && cfg.n_blocked == before);
	}
	struct net_config full = {0};
	for (int i = 0; i < NET_BLOCKED_MAX; i++)
		CHECK(net_blocked_add(&full, "192.0.2.1", &e) == 0);
	CHECK(net_blocked_add(&full, "192.0.2.1", &e) == -E2BIG && full.n_blocked == NET_BLOCKED_MAX);

	struct net *n = NULL;
	CHECK_OK(net_new(&cfg, &n, &e), e);
	char *t = nft_text("list set inet tblk blocked4");
	const char *in[] = {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10",
			    "192.0.2.128/25", "198.51.100.7", "169.254.0.0/16", "168.63.129.16"};
	for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++)
		CHECK(strstr(t, in[i]) != NULL);
	/* inside 10/8 and 100.64/10: merged away */
	CHECK(strstr(t, "10.1.0.0/16") == NULL && strstr(t, "10.98.0.0/24") == NULL &&
	      strstr(t, "100.100.100.200") == NULL);
	if (failures)
		printf("%s\n", t);
	free(t);
	net_free(n);
	/* a second start without them: the set is refilled, they are gone */
	struct net_config plain = {.name = "tblk", .subnet = "10.98.0.0/24"};
	n = NULL;
	CHECK_OK(net_new(&plain, &n, &e), e);
	t = nft_text("list set inet tblk blocked4");
	CHECK(strstr(t, "10.98.0.0/24") != NULL && strstr(t, "100.100.100.200") != NULL);
	CHECK(strstr(t, "10.0.0.0/8") == NULL && strstr(t, "192.0.2.128/25") == NULL);
	free(t);
	net_free(n);
}

int main(void)
{
	/* A netns of our own, and a private NET_LOCK_DIR: a run beside another (or beside a
	 * corrald) shares nothing with it. */
	if (geteuid() != 0 || unshare(CLONE_NEWNET | CLONE_NEWNS) < 0) {
		printf("SKIP: needs root (unshare CLONE_NEWNET | CLONE_NEWNS)\n");
		return 77;
	}
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    (mkdir(NET_LOCK_DIR, 0700) < 0 && errno != EEXIST) ||
	    mount("tmpfs", NET_LOCK_DIR, "tmpfs", 0, "mode=0700") < 0) {
		printf("SKIP: cannot make a private %s\n", NET_LOCK_DIR);
		return 77;
	}
	struct error e = {0};
	/* the "internet": a dummy uplink with an address */
	if (system("ip link add up0 type veth peer name up0p && ip link set up0p up && ip addr add 192.0.2.1/24 dev up0 && ip link set up0 up") != 0) {
		printf("SKIP: no veth interfaces\n");
		return 77;
	}

	struct net_config cfg = {.name = "tnet", .subnet = "10.99.0.0/24", .uplink = "up0"};
	struct net *n = NULL;
	CHECK_OK(net_new(&cfg, &n, &e), e);
	if (!n)
		return 1;
	CHECK(strcmp(n->uplink, "up0") == 0);
	printf("kernel restarts a set element's timeout on a re-add: %s\n",
	       n->timeout_update ? "yes" : "no (add, delete, add)");
	CHECK(strstr(run("ip -4 addr show dev tnet"), "10.99.0.1/24") != NULL);
	char *t = nft_text("list table inet tnet");
	CHECK(strstr(t, "masquerade") != NULL);
	free(t);

	/* bad config */
	struct net *bad = NULL;
	struct net_config bc = {.name = "tbad", .subnet = "10.99.0.1/24"};
	CHECK(net_new(&bc, &bad, &e) == -EINVAL);
	bc.subnet = "10.99.0.0/30";
	CHECK(net_new(&bc, &bad, &e) == -EINVAL);
	bc.subnet = NULL;
	bc.uplink = "nosuchif0";
	CHECK(net_new(&bc, &bad, &e) == -ENODEV);
	bc.name = "tnet"; /* taken */
	bc.uplink = NULL;
	CHECK(net_new(&bc, &bad, &e) == -EBUSY);

	int fd1;
	pid_t p1 = sandbox_ns(&fd1);
	CHECK(p1 > 0 && fd1 >= 0);
	struct in_addr a1 = {0};
	CHECK_OK(net_sandbox_add(n, ID1, NET_MODE_DNS_NFT, EGRESS_DENY, &a1, &e), e);
	CHECK(a1.s_addr == inet_addr("10.99.0.2"));
	CHECK_OK(net_attach(n, ID1, fd1, a1, &e), e);
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "nsenter --net=/proc/%d/ns/net ip -4 addr show dev eth0", (int)p1);
	CHECK(strstr(run(cmd), "10.99.0.2/24") != NULL);
	snprintf(cmd, sizeof(cmd), "nsenter --net=/proc/%d/ns/net ip route", (int)p1);
	CHECK(strstr(run(cmd), "default via 10.99.0.1 dev eth0") != NULL);
	snprintf(cmd, sizeof(cmd), "nsenter --net=/proc/%d/ns/net ip -6 addr show dev eth0", (int)p1);
	CHECK(strstr(run(cmd), "inet6") == NULL);
	CHECK(strstr(run("ip link show master tnet"), "cr111111112222") != NULL);

	char id[UUID_STR_LEN];
	CHECK(net_sandbox_by_addr(n, AF_INET, &a1, id) == 0 && strcmp(id, ID1) == 0);
	struct in_addr other = {inet_addr("10.99.0.77")};
	CHECK(net_sandbox_by_addr(n, AF_INET, &other, id) == -ENOENT);

	/* static rules in order, then the default */
	struct egress_rule rules[2] = {
	    {.action = EGRESS_DENY, .kind = EGRESS_CIDR, .family = AF_INET, .prefix = 32},
	    {.action = EGRESS_ALLOW, .kind = EGRESS_CIDR, .family = AF_INET, .prefix = 24},
	};
	inet_pton(AF_INET, "192.0.2.7", rules[0].addr);
	inet_pton(AF_INET, "192.0.2.0", rules[1].addr);
	struct egress_policy pol = {.default_action = EGRESS_DENY, .n = 2, .rules = rules};
	CHECK_OK(net_policy_apply(n, ID1, &pol, NET_MODE_DNS_NFT, &e), e);
	t = nft_text("list chain inet tnet sb_11111111_2222_4333_8444_555555555555");
	const char *r1 = strstr(t, "192.0.2.7 goto drop_sb"), *r2 = strstr(t, "192.0.2.0/24 accept");
	CHECK(r1 && r2 && r1 < r2);
	CHECK(strstr(t, "@l_11111111_2222_4333_8444_555555555555 accept") != NULL);
	free(t);

	/* The same, packet by packet: an "internet" namespace behind the uplink with three hosts
	 * (192.0.2.7, .8, .9) and a listener on port 8080. */
	int fdi;
	pid_t pi = sandbox_ns(&fdi);
	snprintf(cmd, sizeof(cmd),
		 "ip link set up0p netns %d && nsenter --net=/proc/%d/ns/net sh -c 'ip link set lo up && ip link set up0p up && ip addr add 192.0.2.7/24 dev up0p && ip addr add 192.0.2.8/24 dev up0p && ip addr add 192.0.2.9/24 dev up0p' && echo ok",
		 (int)pi, (int)pi);
	CHECK(strcmp(run(cmd), "ok\n") == 0);
	snprintf(cmd, sizeof(cmd),
		 "nsenter --net=/proc/%d/ns/net python3 -m http.server --bind 0.0.0.0 8080 >/dev/null 2>&1 & echo $!",
		 (int)pi);
	pid_t server = (pid_t)atoi(run(cmd));
	for (int i = 0; i < 100 && !reach(0, "192.0.2.8"); i++) /* from this (the host's) netns */
		usleep(50000);
	CHECK(reach(0, "192.0.2.7") && reach(0, "192.0.2.8") && reach(0, "192.0.2.9"));
	CHECK(!reach(p1, "192.0.2.7")); /* deny /32 first */
	CHECK(reach(p1, "192.0.2.8"));  /* then allow /24 */
	struct egress_policy deny_all = {.default_action = EGRESS_DENY};
	CHECK_OK(net_policy_apply(n, ID1, &deny_all, NET_MODE_DNS_NFT, &e), e);
	CHECK(!reach(p1, "192.0.2.8"));
	struct in_addr nine = {inet_addr("192.0.2.9")};
	CHECK_OK(net_learn(n, ID1, AF_INET, &nine, 1, &e), e); /* TTL 1 s: the floor applies */
	CHECK(reach(p1, "192.0.2.9"));
	CHECK(!reach(p1, "192.0.2.8"));
	sleep(NET_LEARN_TTL_FLOOR_S + 1);
	CHECK(!reach(p1, "192.0.2.9")); /* expired */
	CHECK_OK(net_policy_apply(n, ID1, &deny_all, NET_MODE_DNS, &e), e);
	CHECK(reach(p1, "192.0.2.7")); /* dns mode: an IP literal passes */
	CHECK_OK(net_policy_apply(n, ID1, &pol, NET_MODE_DNS_NFT, &e), e);
	kill(server, SIGKILL);
	kill(pi, SIGKILL);
	waitpid(pi, NULL, 0);

	struct in_addr l = {inet_addr("198.51.100.9")};
	CHECK_OK(net_learn(n, ID1, AF_INET, &l, 1, &e), e);
	CHECK_OK(net_learn(n, ID1, AF_INET, &l, 100, &e), e); /* again: timeout restarts */
	uint8_t v6[16] = {0x20, 0x01, 0x0d, 0xb8};
	CHECK_OK(net_learn(n, ID1, AF_INET6, v6, 100, &e), e);
	CHECK(net_learn(n, GONE, AF_INET, &l, 100, &e) == -ENOENT);
	t = nft_text("list set inet tnet l_11111111_2222_4333_8444_555555555555");
	CHECK(strstr(t, "198.51.100.9 timeout 1m40s") != NULL);
	free(t);
	/* the other way to restart a timeout (add, delete, add: kernels before 6.10) */
	n->timeout_update = !n->timeout_update;
	CHECK_OK(net_learn(n, ID1, AF_INET, &l, 200, &e), e);
	n->timeout_update = !n->timeout_update;
	t = nft_text("list set inet tnet l_11111111_2222_4333_8444_555555555555");
	CHECK(strstr(t, "198.51.100.9 timeout 3m20s") != NULL);
	free(t);

	/* connection from the sandbox to the gateway's port 22: dropped and counted */
	snprintf(cmd, sizeof(cmd),
		 "nsenter --net=/proc/%d/ns/net timeout 2 bash -c 'echo > /dev/tcp/10.99.0.1/22' 2>/dev/null; echo $?",
		 (int)p1);
	CHECK(strcmp(run(cmd), "0\n") != 0);
	uint64_t drops = 0;
	CHECK_OK(net_sandbox_drops(n, ID1, &drops, &e), e);
	CHECK(drops >= 1);

	/* A restart: a new net_new over the same kernel state keeps chains and learned sets. */
	net_free(n);
	n = NULL;
	CHECK_OK(net_new(&cfg, &n, &e), e);
	struct in_addr a1b = a1;
	CHECK_OK(net_sandbox_add(n, ID1, NET_MODE_DNS_NFT, EGRESS_DENY, &a1b, &e), e);
	CHECK(a1b.s_addr == a1.s_addr);
	/* a leftover: a veth and objects of a sandbox that no longer exists */
	int fd2;
	pid_t p2 = sandbox_ns(&fd2);
	struct in_addr a2 = {0};
	CHECK_OK(net_sandbox_add(n, GONE, NET_MODE_DNS_NFT, EGRESS_ALLOW, &a2, &e), e); /* its chain names its set: gc deletes chains first */
	CHECK_OK(net_attach(n, GONE, fd2, a2, &e), e);
	CHECK(a2.s_addr != a1.s_addr);
	net_free(n);
	n = NULL;
	CHECK_OK(net_new(&cfg, &n, &e), e);
	a1b = a1;
	CHECK_OK(net_sandbox_add_policy(n, ID1, NET_MODE_DNS_NFT, &pol, EGRESS_DENY, &a1b, &e), e);
	int gone = net_gc(n, &e);
	CHECK(gone >= 1);
	t = nft_text("list table inet tnet");
	CHECK(strstr(t, "198.51.100.9") != NULL);     /* learned, kept */
	CHECK(strstr(t, "192.0.2.7 goto drop_sb") != NULL); /* rules kept */
	CHECK(strstr(t, "99999999") == NULL);         /* leftover gone */
	free(t);
	/* A record whose policy the kernel never got (kill -9 between the two): the record's wins. */
	net_free(n);
	n = NULL;
	CHECK_OK(net_new(&cfg, &n, &e), e);
	a1b = a1;
	CHECK_OK(net_sandbox_add_policy(n, ID1, NET_MODE_DNS_NFT, &deny_all, EGRESS_DENY, &a1b, &e),
		 e);
	CHECK(net_gc(n, &e) >= 0);
	t = nft_text("list table inet tnet");
	CHECK(strstr(t, "198.51.100.9") != NULL);     /* learned, kept */
	CHECK(strstr(t, "192.0.2.7 goto drop_sb") == NULL); /* the record's policy, not the old one */
	free(t);
	CHECK_OK(net_policy_apply(n, ID1, &pol, NET_MODE_DNS_NFT, &e), e);
	CHECK(strstr(run("ip link"), "cr999999992222") == NULL);

	/* dns mode: the chain accepts */
	struct in_addr a3 = {0};
	CHECK_OK(net_sandbox_add(n, ID2, NET_MODE_DNS, EGRESS_DENY, &a3, &e), e);
	t = nft_text("list chain inet tnet sb_aaaaaaaa_bbbb_4ccc_8ddd_eeeeeeeeeeee");
	CHECK(strstr(t, "accept") != NULL && strstr(t, "drop_sb") == NULL);
	free(t);

	/* a sandbox whose first policy is in its chain from the add on */
	struct in_addr a4 = {0};
	CHECK_OK(net_sandbox_add_policy(n, ID3, NET_MODE_DNS_NFT, &pol, EGRESS_ALLOW, &a4, &e), e);
	t = nft_text("list chain inet tnet sb_cccccccc_bbbb_4ccc_8ddd_eeeeeeeeeeee");
	r1 = strstr(t, "192.0.2.7 goto drop_sb");
	r2 = strstr(t, "192.0.2.0/24 accept");
	const char *r3 = r2 ? strstr(r2, "goto drop_sb") : NULL; /* pol's default: deny */
	CHECK(r1 && r2 && r1 < r2 && r3);
	free(t);
	CHECK_OK(net_sandbox_remove(n, ID3, &e), e);

	/* The chain libnftnl builds (nftnl.c) reads back exactly as the one nft makes of the same
	 * text, for every shape of prefix: byte-aligned, not, a host, everything. */
	static const struct {
		const char *net;
		uint8_t prefix;
		enum egress_action action;
	} shapes[] = {{"10.0.0.0", 8, EGRESS_ALLOW},      {"172.16.0.0", 12, EGRESS_DENY},
		      {"192.0.2.0", 24, EGRESS_ALLOW},    {"192.0.2.7", 32, EGRESS_DENY},
		      {"198.51.100.128", 25, EGRESS_ALLOW}, {"0.0.0.0", 0, EGRESS_DENY}};
	struct egress_rule many[ARRAY_SIZE(shapes)] = {0};
	for (size_t i = 0; i < ARRAY_SIZE(shapes); i++) {
		many[i] = (struct egress_rule){.action = shapes[i].action, .kind = EGRESS_CIDR,
					       .family = AF_INET, .prefix = shapes[i].prefix};
		inet_pton(AF_INET, shapes[i].net, many[i].addr);
	}
	struct egress_policy pmany = {.default_action = EGRESS_ALLOW, .n = ARRAY_SIZE(shapes),
				      .rules = many};
	a4.s_addr = 0;
	CHECK_OK(net_sandbox_add_policy(n, ID3, NET_MODE_DNS_NFT, &pmany, EGRESS_DENY, &a4, &e), e);
	char *mine = nft_text("list chain inet tnet sb_cccccccc_bbbb_4ccc_8ddd_eeeeeeeeeeee");
	free(nft_text("add chain inet tnet sb_cccccccc_bbbb_4ccc_8ddd_ffffffffffff\n"
		      "add rule inet tnet sb_cccccccc_bbbb_4ccc_8ddd_ffffffffffff ip daddr @l_cccccccc_bbbb_4ccc_8ddd_eeeeeeeeeeee accept\n"
		      "add rule inet tnet sb_cccccccc_bbbb_4ccc_8ddd_ffffffffffff ip daddr 10.0.0.0/8 accept\n"
		      "add rule inet tnet sb_cccccccc_bbbb_4ccc_8ddd_ffffffffffff ip daddr 172.16.0.0/12 goto drop_sb\n"
		      "add rule inet tnet sb_cccccccc_bbbb_4ccc_8ddd_ffffffffffff ip daddr 192.0.2.0/24 accept\n"
		      "add rule inet tnet sb_cccccccc_bbbb_4ccc_8ddd_ffffffffffff ip daddr 192.0.2.7/32 goto drop_sb\n"
		      "add rule inet tnet sb_cccccccc_bbbb_4ccc_8ddd_ffffffffffff ip daddr 198.51.100.128/25 accept\n"
		      "add rule inet tnet sb_cccccccc_bbbb_4ccc_8ddd_ffffffffffff ip daddr 0.0.0.0/0 goto drop_sb\n"
		      "add rule inet tnet sb_cccccccc_bbbb_4ccc_8ddd_ffffffffffff accept\n"));
	char *theirs = nft_text("list chain inet tnet sb_cccccccc_bbbb_4ccc_8ddd_ffffffffffff");
	char *tail = strstr(theirs, "ffffffffffff");
	if (tail)
		memcpy(tail, "eeeeeeeeeeee", 12); /* the chain's name: the rest must be equal */
	CHECK(mine[0] && strcmp(mine, theirs) == 0);
	if (strcmp(mine, theirs) != 0)
		printf("libnftnl's chain:\n%s\nnft's:\n%s\n", mine, theirs);
	free(mine);
	free(theirs);
	free(nft_text("delete chain inet tnet sb_cccccccc_bbbb_4ccc_8ddd_ffffffffffff"));
	t = nft_text("list set inet tnet l_cccccccc_bbbb_4ccc_8ddd_eeeeeeeeeeee");
	CHECK(strstr(t, "type ipv4_addr") && strstr(t, "size 4096") && strstr(t, "flags timeout"));
	free(t);
	/* The longest policy there can be: one batch of EGRESS_RULES_MAX rules (a netlink message
	 * past the socket's default send buffer), in order. */
	struct egress_rule *longest = calloc(EGRESS_RULES_MAX, sizeof(*longest));
	CHECK(longest != NULL);
	for (size_t i = 0; longest && i < EGRESS_RULES_MAX; i++) {
		longest[i] = (struct egress_rule){.action = i % 2 ? EGRESS_ALLOW : EGRESS_DENY,
						  .kind = EGRESS_CIDR, .family = AF_INET,
						  .prefix = 32};
		uint32_t host = htonl(0xc6120000u + (uint32_t)i); /* 198.18.0.0 + i */
		memcpy(longest[i].addr, &host, 4);
	}
	struct egress_policy plong = {.default_action = EGRESS_DENY, .n = EGRESS_RULES_MAX,
				      .rules = longest};
	CHECK_OK(net_policy_apply(n, ID3, &plong, NET_MODE_DNS_NFT, &e), e);
	t = nft_text("list chain inet tnet sb_cccccccc_bbbb_4ccc_8ddd_eeeeeeeeeeee");
	size_t lines = 0;
	for (const char *q = t; (q = strstr(q, "ip daddr ")); q++)
		lines++;
	CHECK(lines == EGRESS_RULES_MAX + 1); /* and the learned set's */
	const char *first = strstr(t, "198.18.0.0 goto drop_sb"), *last = strstr(t, "198.18.3.255 accept");
	CHECK(first && last && first < last);
	free(t);
	free(longest);
	t = nft_text("list table bridge tnet");
	CHECK(strstr(t, "\"crccccccccbbbb4\" . 10.99.0.") != NULL); /* its port, pinned to its address */
	if (!strstr(t, "\"crccccccccbbbb4\" . 10.99.0."))
		printf("%s\n", t);
	free(t);
	CHECK_OK(net_sandbox_remove(n, ID3, &e), e);

	/* remove leaves nothing */
	CHECK_OK(net_sandbox_remove(n, ID1, &e), e);
	CHECK_OK(net_sandbox_remove(n, ID2, &e), e);
	CHECK_OK(net_sandbox_remove(n, ID2, &e), e); /* twice: fine */
	t = nft_text("list table inet tnet");
	CHECK(strstr(t, "11111111") == NULL && strstr(t, "aaaaaaaa") == NULL);
	CHECK(strstr(t, "10.99.0.2 ") == NULL);
	free(t);
	t = nft_text("list table bridge tnet");
	CHECK(strstr(t, "cr1111") == NULL);
	free(t);
	CHECK(strstr(run("ip link"), "cr111111112222") == NULL);
	CHECK(net_sandbox_by_addr(n, AF_INET, &a1, id) == -ENOENT);

	net_free(n);
	kill(p1, SIGKILL);
	kill(p2, SIGKILL);
	waitpid(p1, NULL, 0);
	waitpid(p2, NULL, 0);
	test_blocked();
	if (failures)
		fprintf(stderr, "%d check(s) failed\n", failures);
	else
		printf("ok\n");
	return failures ? 1 : 0;
}
