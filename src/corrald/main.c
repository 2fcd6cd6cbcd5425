/*
 * corrald: the corral control plane. One event loop, one thread; blocking runtime work runs in
 * forked workers (worker.c). Serves the OpenSandbox lifecycle API and the server proxy.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <getopt.h>
#include <libgen.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "config.h"
#include "corrald/admission.h"
#include "corrald/corrald.h"
#include "corrald/front.h"
#include "corrald/idempotency.h"
#include "corrald/token.h"
#include "corrald/upstream.h"
#include "runtime/confine.h"
#include "images/images.h"
#include "shared/fsutil.h"
#include "shared/libevent_private.h"
#include "shared/log.h"
#include "shared/quantity.h"
#include "shared/timeutil.h"

#define DEFAULT_LISTEN "127.0.0.1:8080"
#define DEFAULT_STATE_DIR "/var/lib/corral"
#define DEFAULT_IDLE_TIMEOUT 30
#define DEFAULT_CREATE_TIMEOUT 30
#define DEFAULT_HEADER_TIMEOUT 10
#define DEFAULT_MAX_CONNECTIONS 4096
/* Below the stock SDKs' 30 s request timeout, so their clients see the 503 rather than time out. */
#define DEFAULT_CAPACITY_WAIT 20
#define DEFAULT_PULL_TIMEOUT 600
#define SHUTDOWN_WAIT_S 10
#define DEFAULT_DISK "10Gi"
#define DEFAULT_VOLUME_SIZE "1Gi"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: corrald [OPTIONS]\n"
		"\n"
		"The corral control plane: serves the OpenSandbox lifecycle API (at / and /v1) and proxies\n"
		"each sandbox's execd API at /sandboxes/{id}/proxy/{port}/... Sandboxes outlive corrald:\n"
		"a restart on the same --state-dir re-adopts them.\n"
		"\n"
		"Options:\n"
		"  --listen ADDR:PORT     address to serve on (default " DEFAULT_LISTEN "; [::1]:8080 for IPv6)\n"
		"  --api-key KEY          require header OPEN-SANDBOX-API-KEY: KEY on every route except\n"
		"                         /health (default: env CORRAL_API_KEY). The proxy route also\n"
		"                         takes the sandbox's token from its endpoint reply's headers.\n"
		"                         Without a key corrald only listens on loopback addresses.\n"
		"  --state-dir DIR        sandbox records, overlays and execd sockets (default " DEFAULT_STATE_DIR ")\n"
		"  --image-dir DIR        images: each subdirectory NAME is a root file system usable as\n"
		"                         {\"image\":{\"uri\":\"NAME\"}}; \"host\" is always the host's own root\n"
		"                         Any other reference (python:3.11, ghcr.io/o/r@sha256:...,\n"
		"                         127.0.0.1:5000/task:1) is pulled from its registry into\n"
		"                         <state-dir>/images (docs/images.md)\n"
		"  --insecure-registry HOST[:PORT]\n"
		"                         reach this registry over plain HTTP (repeatable)\n"
		"  --registry-auth FILE   registry credentials in the ~/.docker/config.json format\n"
		"  --registry-mirror HOST[:PORT]\n"
		"                         try this mirror of docker.io first (repeatable, in order)\n"
		"  --pull-timeout SECS    longest image pull of a create (default %d)\n"
		"  --image-unpacked-max SIZE\n"
		"                         the most one pulled or imported image may unpack to in the\n"
		"                         store (file data; and at most 4000000 entries); past it the\n"
		"                         pull fails with SANDBOX::IMAGE_TOO_LARGE (default 32Gi)\n"
		"  --image-store-max SIZE after a pull that leaves the store's layers above SIZE, forget\n"
		"                         the least recently used images no sandbox uses and remove\n"
		"                         their layers until under it (default none)\n"
		"  --import-dir DIR       POST /v1/images may import OCI image layouts (directories or\n"
		"                         tars, e.g. docker save) from under DIR\n"
		"  --execd PATH           the static corral-execd binary (default: corral-execd next to corrald)\n"
		"  --cgroup-name NAME     parent cgroup of all sandboxes in each hierarchy (default corral)\n"
		"  --idle-timeout SECS    close idle keep-alive connections after SECS (default %d);\n"
		"                         advertised on every response as Keep-Alive: timeout=SECS\n"
		"  --header-timeout SECS  close a connection whose request head is not complete SECS after\n"
		"                         its first byte, or after the accept for its first request\n"
		"                         (default %d)\n"
		"  --max-connections N    client connections open at once; at the limit corrald stops\n"
		"                         accepting until one closes (default %d, at most half the\n"
		"                         open-file limit)\n"
		"  --create-timeout SECS  deadline for a create once admitted: runtime work plus execd\n"
		"                         readiness (default %d)\n"
		"  --capacity cpu=N,memory=SIZE,pids=N,files=N,disk=SIZE|auto\n"
		"                         what sandboxes may request in total (resourceRequests; absent =\n"
		"                         their limits); a create that does not fit waits as Pending until\n"
		"                         capacity frees or --capacity-wait passes (then 503\n"
		"                         SANDBOX::CAPACITY_TIMEOUT). Default: every CPU corrald may use\n"
		"                         and the host's memory less max(512Mi, 5%%). pids and files are\n"
		"                         the host's pid and open-file tables: each sandbox holds its pids\n"
		"                         limit (default 4096) and its RLIMIT_NOFILE of them. Default: the\n"
		"                         smaller of kernel.pid_max and kernel.threads-max less\n"
		"                         max(2048, 1/16), and fs.file-max less max(65536, 5%%). disk: what\n"
		"                         the sandboxes' disk limits (ephemeral-storage, --default-disk)\n"
		"                         may add up to on the state file system, so that sandboxes within\n"
		"                         their limits cannot fill it together; auto = its size less\n"
		"                         max(1Gi, 5%%). Default: not counted (disks overcommit)\n"
		"  --sandbox-nofile N     RLIMIT_NOFILE (soft and hard) of every sandbox process (default\n"
		"                         %d; at most corrald's own hard limit without CAP_SYS_RESOURCE)\n"
		"  --capacity-wait SECS   longest wait of a create for capacity (default %d: below the\n"
		"                         SDKs' 30 s request timeout, so clients get the 503)\n"
		"  --idempotency-window SECS\n"
		"                         a create repeated with the same Idempotency-Key within SECS of\n"
		"                         the first gets the first one's sandbox or answer (default %d)\n"
		"  --no-userns            run sandboxes without a user namespace: sandbox root is then host\n"
		"                         root (only for kernels without idmapped mounts; see\n"
		"                         docs/security.md). Default: every sandbox gets its own range of\n"
		"                         65536 host ids, and host files it did not get are not its own\n"
		"  --default-disk SIZE    resourceLimits.ephemeral-storage of every sandbox created without\n"
		"                         one: its writable layer gets a file system of SIZE, so it cannot\n"
		"                         fill the state dir's (default " DEFAULT_DISK "; \"none\": no limit)\n"
		"  --allow-host-path DIR  host volumes (volumes[].host.path) may mount DIR or what is below\n"
		"                         it (repeatable; none: host volumes are refused). Nothing below\n"
		"                         DIR is followed when it is a symlink (docs/volumes.md)\n"
		"  --volume-size SIZE     size of a named volume (volumes[].pvc) made without pvc.storage,\n"
		"                         and the most pvc.storage may ask for (default " DEFAULT_VOLUME_SIZE ")\n"
		"  --sandbox-subnet CIDR  IPv4 network of the sandboxes (default " NET_DEFAULT_SUBNET "): the\n"
		"                         bridge --network-name holds its first address, the gateway;\n"
		"                         every sandbox gets one of the others on eth0 (docs/network.md).\n"
		"                         \"none\": sandboxes get only a loopback interface\n"
		"  --network-name NAME    name of the bridge and of the nftables tables inet/bridge NAME\n"
		"                         (default " NET_DEFAULT_NAME "); one per corrald on a host\n"
		"  --egress-uplink IFACE  sandboxes reach the world through IFACE, masqueraded (default:\n"
		"                         the interface of the host's default route; none: no uplink)\n"
		"  --egress-mode MODE     dns: the policy filters names only (an IP literal bypasses it);\n"
		"                         dns+nft: nftables also drops every address the policy did not\n"
		"                         admit (default dns+nft)\n"
		"  --egress-default ACTION\n"
		"                         allow or deny: the policy of a sandbox created without\n"
		"                         networkPolicy (default allow)\n"
		"  --dns-upstream ADDR[:PORT]\n"
		"                         where corral's resolver forwards allowed queries (repeatable;\n"
		"                         default: the nameservers of the host's /etc/resolv.conf)\n"
		"  --egress-block CIDR    no sandbox reaches this IPv4 address or network, whatever its\n"
		"                         policy (repeatable; \"private\": 10.0.0.0/8, 172.16.0.0/12,\n"
		"                         192.168.0.0/16 and 100.64.0.0/10). Added to the always-blocked\n"
		"                         (metadata services, loopback, ...): keeps your own networks out\n"
		"                         of reach even of an allowed name whose DNS answers point there\n"
		"  --sandbox-flows N      live connections (the host's conntrack entries) a sandbox may\n"
		"                         hold; new ones past it are dropped (default " STR(NET_FLOWS_DEFAULT) "). The\n"
		"                         host's table (net.netfilter.nf_conntrack_max) is shared by all\n"
		"  --log-level LEVEL      error, warn, info or debug (default info)\n"
		"  -h, --help             show this help\n"
		"      --version          print the version\n"
		"\n"
		"Example:\n"
		"  corrald --listen 127.0.0.1:8080 --state-dir /tmp/corral --image-dir /srv/images\n"
		"  curl -s localhost:8080/v1/sandboxes -d '{\"image\":{\"uri\":\"host\"},\n"
		"       \"entrypoint\":[\"sleep\",\"infinity\"],\"timeout\":600}'\n",
		DEFAULT_PULL_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_HEADER_TIMEOUT,
		DEFAULT_MAX_CONNECTIONS, DEFAULT_CREATE_TIMEOUT, CONFINE_DEFAULT_NOFILE,
		DEFAULT_CAPACITY_WAIT, IDEM_DEFAULT_WINDOW_S);
}

/* The host side of sandbox networking (network/net.h), unless --sandbox-subnet none. */
static int setup_network(struct corrald *d, const struct net_config *cfg)
{
	if (cfg->subnet && strcmp(cfg->subnet, "none") == 0) {
		log_info("network: off (--sandbox-subnet none): sandboxes have only a loopback interface");
		return 0;
	}
	struct net_config c = *cfg;
	if (c.uplink && strcmp(c.uplink, "none") == 0)
		c.uplink = "";
	c.log_drops = log_get_level() >= LOG_LVL_DEBUG; /* egress.c logs each (rate-limited) */
	struct error err = {0};
	if (net_new(&c, &d->net, &err) < 0) {
		fprintf(stderr,
			"corrald: sandbox network: %s (pass --sandbox-subnet none to run sandboxes without a network)\n",
			err.msg);
		return -1;
	}
	char gw[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &d->net->gateway, gw, sizeof(gw));
	log_info("network: bridge %s, gateway %s/%u, egress mode %s, default %s, uplink %s%s",
		 d->net->name, gw, d->net->prefix, net_mode_name(d->egress_mode),
		 d->egress_default == EGRESS_ALLOW ? "allow" : "deny",
		 d->net->uplink[0] ? d->net->uplink : "none",
		 d->net->uplink_auto ? " (the default route's)" : "");
	if (d->net->n_blocked) {
		char list[NET_BLOCKED_MAX * (NET_PREFIX4_STRLEN + 2)] = "";
		size_t used = 0;
		for (size_t i = 0; i < d->net->n_blocked; i++) {
			char a[NET_PREFIX4_STRLEN];
			net_prefix4_str(&d->net->blocked[i], a);
			used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s",
						 i ? ", " : "", a);
		}
		log_info("network: also always blocked (--egress-block): %s", list);
	}
	if (!d->net->uplink[0])
		log_warn("network: no uplink (%s): sandboxes reach nothing beyond this host",
			 c.uplink ? "--egress-uplink none" : "the host has no default route");
	return 0;
}

static int parse_listen(const char *s, char *host, size_t hostlen, unsigned short *port)
{
	const char *colon;
	if (s[0] == '[') {
		const char *close = strchr(s, ']');
		if (!close || close[1] != ':')
			return -EINVAL;
		snprintf(host, hostlen, "%.*s", (int)(close - s - 1), s + 1);
		colon = close + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon || colon == s)
			return -EINVAL;
		snprintf(host, hostlen, "%.*s", (int)(colon - s), s);
	}
	char *end;
	long p = strtol(colon + 1, &end, 10);
	if (*end || p < 1 || p > 65535 || !colon[1])
		return -EINVAL;
	*port = (unsigned short)p;
	return 0;
}

static bool is_loopback(const char *host)
{
	struct in_addr a4;
	struct in6_addr a6;
	if (strcmp(host, "localhost") == 0)
		return true;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, host, &a6) == 1)
		return IN6_IS_ADDR_LOOPBACK(&a6);
	return false;
}

static int parse_seconds(const char *flag, const char *s, int *ret)
{
	char *end;
	long v = strtol(s, &end, 10);
	if (!*s || *end || v < 1 || v > 86400) {
		fprintf(stderr, "corrald: %s: '%s' is not a number of seconds from 1 to 86400\n", flag, s);
		return -EINVAL;
	}
	*ret = (int)v;
	return 0;
}

/* A kernel table's size from /proc/sys, 0 when unknown. */
static uint64_t sysctl_u64(const char *path)
{
	uint64_t v = 0;
	return fs_read_u64(path, &v) < 0 ? 0 : v;
}

/* The host's pid table: every task of every sandbox takes an entry of the initial pid namespace
 * too, and fork fails (for root as well) once either limit is reached. */
static uint64_t host_pid_table(void)
{
	uint64_t pid_max = sysctl_u64("/proc/sys/kernel/pid_max");
	uint64_t threads = sysctl_u64("/proc/sys/kernel/threads-max");
	return pid_max && threads && threads < pid_max ? threads : pid_max;
}

static struct corrald D;
static struct event *shutdown_ev;

static bool busy(struct corrald *d)
{
	struct sandbox *sb;
	if (worker_count() > 0)
		return true;
	TAILQ_FOREACH(sb, &d->sandboxes, link)
		if (sb->creating)
			return true;
	return false;
}

static void on_shutdown_tick(evutil_socket_t fd, short what, void *arg)
{
	static int ticks;
	struct corrald *d = arg;
	if (!busy(d) || ++ticks > SHUTDOWN_WAIT_S * 20) {
		if (busy(d))
			log_warn("exiting with %u worker(s) still running; the next start finishes their work",
				 worker_count());
		event_base_loopexit(d->base, NULL);
		return;
	}
	struct timeval tv = {0, 50000};
	evtimer_add(shutdown_ev, &tv);
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
	struct corrald *d = arg;
	if (d->shutting_down)
		return;
	d->shutting_down = true;
	log_info("received %s: no longer accepting connections; sandboxes keep running",
		 sig == SIGINT ? "SIGINT" : "SIGTERM");
	if (d->bound) {
		front_unlisten();
		evhttp_del_accept_socket(d->http, d->bound);
		d->bound = NULL;
	}
	admission_shutdown(d);
	image_pulls_cancel();
	lifecycle_net_reap_now(d); /* deleted sandboxes' nftables objects: busy() waits for it */
	shutdown_ev = evtimer_new(d->base, on_shutdown_tick, d);
	on_shutdown_tick(-1, 0, d);
}

/* The processes other than us that have path open (for a message: best effort). */
static void open_by(const char *path, char *buf, size_t len)
{
	size_t off = 0;
	buf[0] = '\0';
	DIR *proc = opendir("/proc");
	struct dirent *p;
	while (proc && (p = readdir(proc)) && off + 16 < len) {
		char *end;
		long pid = strtol(p->d_name, &end, 10);
		if (*end || pid <= 0 || pid == (long)getpid())
			continue;
		char fddir[64], link[PATH_MAX + 64], target[PATH_MAX];
		snprintf(fddir, sizeof(fddir), "/proc/%ld/fd", pid);
		DIR *fds = opendir(fddir);
		struct dirent *f;
		while (fds && (f = readdir(fds))) {
			snprintf(link, sizeof(link), "%s/%s", fddir, f->d_name);
			ssize_t n = readlink(link, target, sizeof(target) - 1);
			if (n <= 0)
				continue;
			target[n] = '\0';
			if (strcmp(target, path) == 0) {
				off += (size_t)snprintf(buf + off, len - off, "%s%ld", off ? ", " : "", pid);
				break;
			}
		}
		if (fds)
			closedir(fds);
	}
	if (proc)
		closedir(proc);
}

/*
 * One control plane per state dir. The corrald that wrote its pid into the lock file may be gone
 * while a process it forked still holds the lock for a moment (a worker between its fork and
 * closing what it inherited): then wait for it, up to STATE_LOCK_WAIT_MS. A live holder is
 * refused at once.
 */
#define STATE_LOCK_WAIT_MS 5000
static int state_dir_lock(int fd, const char *lock_path, const char *state_dir)
{
	int64_t deadline = time_now_ms() + STATE_LOCK_WAIT_MS;
	bool said = false;
	for (;;) {
		if (flock(fd, LOCK_EX | LOCK_NB) == 0)
			return 0;
		char holder[32] = "";
		ssize_t n = pread(fd, holder, sizeof(holder) - 1, 0);
		holder[n > 0 ? n : 0] = '\0';
		holder[strcspn(holder, "\n")] = '\0';
		long pid = strtol(holder, NULL, 10);
		bool gone = pid > 0 && kill((pid_t)pid, 0) < 0 && errno == ESRCH;
		if (!gone || time_now_ms() >= deadline) {
			char by[256];
			open_by(lock_path, by, sizeof(by));
			fprintf(stderr,
				"corrald: state dir %s is in use by another corrald%s%s%s%s%s%s: stop it first, or use another --state-dir\n",
				state_dir, holder[0] ? " (pid " : "", holder, holder[0] ? ")" : "",
				gone ? "; the lock is still held by process(es) " : "", gone ? by : "",
				gone && !by[0] ? "unknown" : "");
			return -EBUSY;
		}
		if (!said)
			log_warn("the corrald that held state dir %s (pid %ld) is gone, but a process it left holds the lock: waiting up to %d ms",
				 state_dir, pid, STATE_LOCK_WAIT_MS);
		said = true;
		usleep(20 * 1000);
	}
}

/*
 * With a default disk, every create needs one: check now that the state fs can hold one and that
 * the runtime can make it (mkfs.ext4 installed, loop devices), rather than fail every create.
 */
static int check_default_disk(struct corrald *d)
{
	struct statvfs sv;
	if (statvfs(d->state_dir, &sv) == 0) {
		uint64_t total = (uint64_t)sv.f_blocks * sv.f_frsize;
		uint64_t avail = (uint64_t)sv.f_bavail * sv.f_frsize;
		if (d->default_disk_bytes > total) {
			fprintf(stderr,
				"corrald: --default-disk %s is more than the state file system of %s holds (%llu MiB): pass a smaller size, or none\n",
				d->default_disk, d->state_dir, (unsigned long long)(total >> 20));
			return -EINVAL;
		}
		if (d->default_disk_bytes > avail)
			log_warn("--default-disk %s is more than the %llu MiB free on the state file system: creates without a smaller ephemeral-storage limit fail until space is freed",
				 d->default_disk, (unsigned long long)(avail >> 20));
	}
	struct error err = {0};
	if (d->rt->disk_prepare &&
	    d->rt->disk_prepare(&d->rt_cfg, d->default_disk_bytes, &err) < 0) {
		fprintf(stderr,
			"corrald: --default-disk %s: cannot make a sandbox disk: %s (pass --default-disk none to run sandboxes without a disk limit)\n",
			d->default_disk, err.msg);
		return -EINVAL;
	}
	log_info("sandboxes created without resourceLimits.ephemeral-storage get %s (--default-disk)",
		 d->default_disk);
	return 0;
}

/* --allow-host-path DIR: an existing directory, kept as spelled (the operator's path is trusted)
 * less repeated and trailing '/'; a request's host path must start with it. */
static int allow_host_path(struct corrald *d, const char *arg)
{
	struct stat st;
	if (d->n_host_paths + 1 >= ARRAY_SIZE(d->host_paths)) {
		fprintf(stderr, "corrald: at most %zu --allow-host-path\n",
			ARRAY_SIZE(d->host_paths) - 1);
		return -1;
	}
	if (arg[0] != '/' || strstr(arg, "/../") || strstr(arg, "/./") ||
	    (strlen(arg) >= 3 && strcmp(arg + strlen(arg) - 3, "/..") == 0)) {
		fprintf(stderr, "corrald: --allow-host-path '%s': give an absolute path without '.' or '..'\n",
			arg);
		return -1;
	}
	if (stat(arg, &st) < 0) {
		fprintf(stderr, "corrald: --allow-host-path '%s': %s\n", arg, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		fprintf(stderr, "corrald: --allow-host-path '%s': not a directory\n", arg);
		return -1;
	}
	char *p = malloc(strlen(arg) + 1);
	if (!p)
		return -1;
	size_t o = 0;
	for (const char *c = arg; *c; c++)
		if (!(*c == '/' && o && p[o - 1] == '/'))
			p[o++] = *c;
	while (o > 1 && p[o - 1] == '/')
		o--;
	p[o] = '\0';
	d->host_paths[d->n_host_paths++] = p;
	return 0;
}

enum {
	OPT_LISTEN = 1000, OPT_STATE, OPT_KEY, OPT_IMAGES, OPT_LOG, OPT_IDLE, OPT_EXECD,
	OPT_CGROUP, OPT_CREATE_TIMEOUT, OPT_CAPACITY, OPT_CAPACITY_WAIT, OPT_NO_USERNS,
	OPT_NOFILE, OPT_DEFAULT_DISK, OPT_INSECURE, OPT_REG_AUTH, OPT_PULL_TIMEOUT, OPT_MIRROR,
	OPT_IMPORT_DIR, OPT_HEADER_TIMEOUT, OPT_MAX_CONNECTIONS, OPT_ALLOW_HOST_PATH,
	OPT_VOLUME_SIZE, OPT_IMAGE_UNPACKED_MAX, OPT_IMAGE_STORE_MAX, OPT_VERSION,
	OPT_IDEM_WINDOW, OPT_SUBNET, OPT_NET_NAME, OPT_UPLINK, OPT_EGRESS_MODE,
	OPT_EGRESS_DEFAULT, OPT_DNS_UPSTREAM, OPT_SANDBOX_FLOWS, OPT_EGRESS_BLOCK
};

static const struct option opts[] = {
	{"listen", required_argument, NULL, OPT_LISTEN},
	{"state-dir", required_argument, NULL, OPT_STATE},
	{"api-key", required_argument, NULL, OPT_KEY},
	{"image-dir", required_argument, NULL, OPT_IMAGES},
	{"log-level", required_argument, NULL, OPT_LOG},
	{"idle-timeout", required_argument, NULL, OPT_IDLE},
	{"execd", required_argument, NULL, OPT_EXECD},
	{"cgroup-name", required_argument, NULL, OPT_CGROUP},
	{"create-timeout", required_argument, NULL, OPT_CREATE_TIMEOUT},
	{"capacity", required_argument, NULL, OPT_CAPACITY},
	{"capacity-wait", required_argument, NULL, OPT_CAPACITY_WAIT},
	{"no-userns", no_argument, NULL, OPT_NO_USERNS},
	{"sandbox-nofile", required_argument, NULL, OPT_NOFILE},
	{"default-disk", required_argument, NULL, OPT_DEFAULT_DISK},
	{"insecure-registry", required_argument, NULL, OPT_INSECURE},
	{"registry-auth", required_argument, NULL, OPT_REG_AUTH},
	{"registry-mirror", required_argument, NULL, OPT_MIRROR},
	{"pull-timeout", required_argument, NULL, OPT_PULL_TIMEOUT},
	{"import-dir", required_argument, NULL, OPT_IMPORT_DIR},
	{"header-timeout", required_argument, NULL, OPT_HEADER_TIMEOUT},
	{"max-connections", required_argument, NULL, OPT_MAX_CONNECTIONS},
	{"allow-host-path", required_argument, NULL, OPT_ALLOW_HOST_PATH},
	{"volume-size", required_argument, NULL, OPT_VOLUME_SIZE},
	{"image-unpacked-max", required_argument, NULL, OPT_IMAGE_UNPACKED_MAX},
	{"image-store-max", required_argument, NULL, OPT_IMAGE_STORE_MAX},
	{"idempotency-window", required_argument, NULL, OPT_IDEM_WINDOW},
	{"sandbox-subnet", required_argument, NULL, OPT_SUBNET},
	{"network-name", required_argument, NULL, OPT_NET_NAME},
	{"egress-uplink", required_argument, NULL, OPT_UPLINK},
	{"egress-mode", required_argument, NULL, OPT_EGRESS_MODE},
	{"egress-default", required_argument, NULL, OPT_EGRESS_DEFAULT},
	{"dns-upstream", required_argument, NULL, OPT_DNS_UPSTREAM},
	{"sandbox-flows", required_argument, NULL, OPT_SANDBOX_FLOWS},
	{"egress-block", required_argument, NULL, OPT_EGRESS_BLOCK},
	{"help", no_argument, NULL, 'h'},
	{"version", no_argument, NULL, OPT_VERSION},
	{0},
};

/* What the command line sets besides the fields of struct corrald, for the start-up steps below. */
struct cmdline {
	const char *listen, *state_dir, *execd, *cgroup_name;
	bool max_conn_given;
	struct net_config net_cfg;
	struct capacity cap;
	char host[256]; /* and port: the parsed --listen */
	unsigned short port;
	char execd_buf[PATH_MAX];
};

/*
 * main() is a sequence of steps; each returns GO_ON, or the exit status once it has said why on
 * stderr (0 after --help and --version, 2 for a bad command line, 1 for a host that cannot serve).
 */
#define GO_ON (-1)

static void cmdline_defaults(struct corrald *d, struct cmdline *o)
{
	o->listen = DEFAULT_LISTEN;
	o->state_dir = DEFAULT_STATE_DIR;
	o->cgroup_name = "corral";
	d->idle_timeout_s = DEFAULT_IDLE_TIMEOUT;
	d->header_timeout_s = DEFAULT_HEADER_TIMEOUT;
	d->create_timeout_s = DEFAULT_CREATE_TIMEOUT;
	d->capacity_wait_s = DEFAULT_CAPACITY_WAIT;
	d->default_disk = DEFAULT_DISK;
	d->volume_size = DEFAULT_VOLUME_SIZE;
	d->pull_timeout_s = DEFAULT_PULL_TIMEOUT;
	d->egress_mode = NET_MODE_DNS_NFT;
	d->egress_default = EGRESS_ALLOW;
	d->api_key = getenv("CORRAL_API_KEY");
	TAILQ_INIT(&d->sandboxes);
	log_set_ident("corrald");
	{
		cpu_set_t cpus;
		unsigned ncpu = sched_getaffinity(0, sizeof(cpus), &cpus) == 0
				    ? (unsigned)CPU_COUNT(&cpus)
				    : (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
		uint64_t mem = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
		capacity_default(ncpu, mem, &o->cap);
		capacity_default_tables(host_pid_table(), sysctl_u64("/proc/sys/fs/file-max"), &o->cap);
	}
}

/* The options of the daemon, its limits and its runtime. 0, -ENOENT for another group's option,
 * -EINVAL once said why. */
static int option_daemon(struct corrald *d, struct cmdline *o, int c)
{
	switch (c) {
	case OPT_LISTEN: o->listen = optarg; break;
	case OPT_STATE: o->state_dir = optarg; break;
	case OPT_KEY: {
		/* A copy, and the argument blanked: /proc/<pid>/cmdline is readable by every user of
		 * the host (and by a pull's child where Landlock is missing) */
		static char *copy;
		free(copy);
		if (!(d->api_key = copy = strdup(optarg))) {
			fprintf(stderr, "corrald: --api-key: out of memory\n");
			return -EINVAL;
		}
		memset(optarg, 'x', strlen(optarg));
		break;
	}
	case OPT_EXECD: o->execd = optarg; break;
	case OPT_CGROUP: o->cgroup_name = optarg; break;
	case OPT_NO_USERNS: d->rt_cfg.no_userns = true; break;
	case OPT_LOG: {
		enum log_level lvl;
		if (log_level_parse(optarg, &lvl) < 0) {
			fprintf(stderr, "corrald: --log-level: '%s' is not one of error, warn, info, debug\n",
				optarg);
			return -EINVAL;
		}
		log_set_level(lvl);
		break;
	}
	case OPT_IDLE:
		if (parse_seconds("--idle-timeout", optarg, &d->idle_timeout_s) < 0)
			return -EINVAL;
		break;
	case OPT_HEADER_TIMEOUT:
		if (parse_seconds("--header-timeout", optarg, &d->header_timeout_s) < 0)
			return -EINVAL;
		break;
	case OPT_MAX_CONNECTIONS: {
		char *end;
		long v = strtol(optarg, &end, 10);
		if (!*optarg || *end || v < 1 || v > 1000000) {
			fprintf(stderr, "corrald: --max-connections: '%s' is not a number from 1 to 1000000\n",
				optarg);
			return -EINVAL;
		}
		d->max_connections = (unsigned)v;
		o->max_conn_given = true;
		break;
	}
	case OPT_CREATE_TIMEOUT:
		if (parse_seconds("--create-timeout", optarg, &d->create_timeout_s) < 0)
			return -EINVAL;
		break;
	case OPT_CAPACITY_WAIT:
		if (parse_seconds("--capacity-wait", optarg, &d->capacity_wait_s) < 0)
			return -EINVAL;
		break;
	case OPT_IDEM_WINDOW: {
		int w;
		if (parse_seconds("--idempotency-window", optarg, &w) < 0)
			return -EINVAL;
		idem_set_window(w);
		break;
	}
	case OPT_CAPACITY: {
		char msg[256];
		if (capacity_parse(optarg, &o->cap, msg, sizeof(msg)) < 0) {
			fprintf(stderr, "corrald: --capacity: %s\n", msg);
			return -EINVAL;
		}
		break;
	}
	case OPT_NOFILE: {
		uint64_t nr_open = sysctl_u64("/proc/sys/fs/nr_open");
		char *end;
		errno = 0;
		unsigned long long n = strtoull(optarg, &end, 10);
		if (!*optarg || *optarg == '-' || *end || errno || n < 64 ||
		    n > (nr_open ? nr_open : 1048576)) {
			fprintf(stderr, "corrald: --sandbox-nofile: '%s' is not a number of open files from 64 to %llu (fs.nr_open)\n",
				optarg, (unsigned long long)(nr_open ? nr_open : 1048576));
			return -EINVAL;
		}
		d->rt_cfg.nofile = n;
		break;
	}
	case OPT_DEFAULT_DISK: d->default_disk = optarg; break;
	case OPT_ALLOW_HOST_PATH:
		if (allow_host_path(d, optarg) < 0)
			return -EINVAL;
		break;
	case OPT_VOLUME_SIZE: d->volume_size = optarg; break;
	default: return -ENOENT;
	}
	return 0;
}

/* The options of images and registries. 0, -ENOENT for another group's option, -EINVAL once said
 * why. */
static int option_images(struct corrald *d, int c)
{
	switch (c) {
	case OPT_IMAGES: d->image_dir = optarg; break;
	case OPT_INSECURE:
		if (d->n_insecure + 1 >= ARRAY_SIZE(d->insecure)) {
			fprintf(stderr, "corrald: at most %zu --insecure-registry\n",
				ARRAY_SIZE(d->insecure) - 1);
			return -EINVAL;
		}
		d->insecure[d->n_insecure++] = optarg;
		break;
	case OPT_REG_AUTH: d->registry_auth = optarg; break;
	case OPT_IMPORT_DIR:
		if (!realpath(optarg, d->import_dir)) {
			fprintf(stderr, "corrald: --import-dir %s: %s\n", optarg, strerror(errno));
			return -EINVAL;
		}
		break;
	case OPT_MIRROR:
		if (d->n_mirrors + 1 >= ARRAY_SIZE(d->mirrors)) {
			fprintf(stderr, "corrald: at most %zu --registry-mirror\n",
				ARRAY_SIZE(d->mirrors) - 1);
			return -EINVAL;
		}
		if (strpbrk(optarg, "/ ") || !*optarg) {
			fprintf(stderr, "corrald: --registry-mirror '%s': give HOST[:PORT] (plain HTTP only with --insecure-registry HOST[:PORT])\n",
				optarg);
			return -EINVAL;
		}
		d->mirrors[d->n_mirrors++] = optarg;
		break;
	case OPT_PULL_TIMEOUT:
		if (parse_seconds("--pull-timeout", optarg, &d->pull_timeout_s) < 0)
			return -EINVAL;
		break;
	case OPT_IMAGE_STORE_MAX:
		if (strcmp(optarg, "none") != 0 &&
		    (quantity_parse_bytes(optarg, &d->image_store_max) < 0 ||
		     d->image_store_max < (1ULL << 20))) {
			fprintf(stderr, "corrald: --image-store-max: '%s' is not a size of at least 1Mi (e.g. 200Gi), or none\n",
				optarg);
			return -EINVAL;
		}
		break;
	case OPT_IMAGE_UNPACKED_MAX:
		if (quantity_parse_bytes(optarg, &d->image_unpacked_max) < 0 ||
		    d->image_unpacked_max < (1ULL << 20)) {
			fprintf(stderr, "corrald: --image-unpacked-max: '%s' is not a size of at least 1Mi (e.g. 32Gi)\n",
				optarg);
			return -EINVAL;
		}
		break;
	default: return -ENOENT;
	}
	return 0;
}

/* The options of the sandbox network and egress. 0, -ENOENT for another group's option, -EINVAL
 * once said why. */
static int option_network(struct corrald *d, struct cmdline *o, int c)
{
	switch (c) {
	case OPT_SUBNET: o->net_cfg.subnet = optarg; break;
	case OPT_NET_NAME: o->net_cfg.name = optarg; break;
	case OPT_UPLINK: o->net_cfg.uplink = optarg; break;
	case OPT_SANDBOX_FLOWS: {
		char *end = NULL;
		errno = 0;
		unsigned long v = strtoul(optarg, &end, 10);
		if (errno || end == optarg || *end || v < 16 || v > 1000000) {
			fprintf(stderr,
				"corrald: --sandbox-flows: '%s' is not a number from 16 to 1000000\n",
				optarg);
			return -EINVAL;
		}
		o->net_cfg.flows_max = (unsigned)v;
		break;
	}
	case OPT_EGRESS_BLOCK: {
		struct error err = {0};
		if (net_blocked_add(&o->net_cfg, optarg, &err) < 0) {
			fprintf(stderr, "corrald: --egress-block: %s\n", err.msg);
			return -EINVAL;
		}
		break;
	}
	case OPT_EGRESS_MODE:
		if (net_mode_parse(optarg, &d->egress_mode) < 0) {
			fprintf(stderr, "corrald: --egress-mode: '%s' is not dns or dns+nft\n",
				optarg);
			return -EINVAL;
		}
		break;
	case OPT_EGRESS_DEFAULT:
		if (strcmp(optarg, "allow") && strcmp(optarg, "deny")) {
			fprintf(stderr, "corrald: --egress-default: '%s' is not allow or deny\n",
				optarg);
			return -EINVAL;
		}
		d->egress_default = strcmp(optarg, "allow") == 0 ? EGRESS_ALLOW : EGRESS_DENY;
		break;
	case OPT_DNS_UPSTREAM:
		if (d->n_dns_upstream + 1 >= ARRAY_SIZE(d->dns_upstream)) {
			fprintf(stderr, "corrald: --dns-upstream: at most %zu\n",
				ARRAY_SIZE(d->dns_upstream) - 1);
			return -EINVAL;
		}
		d->dns_upstream[d->n_dns_upstream++] = optarg;
		break;
	default: return -ENOENT;
	}
	return 0;
}

/* Step: the option table, each option checked on its own as it comes. */
static int parse_command_line(int argc, char **argv, struct corrald *d, struct cmdline *o)
{
	int c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (c == 'h') {
			usage(stdout);
			return 0;
		}
		if (c == OPT_VERSION) {
			printf("corrald %s\n", CORRAL_VERSION);
			return 0;
		}
		int r = option_daemon(d, o, c);
		if (r == -ENOENT)
			r = option_images(d, c);
		if (r == -ENOENT)
			r = option_network(d, o, c);
		if (r == -ENOENT) {
			usage(stderr);
			return 2;
		}
		if (r < 0)
			return 2;
	}
	if (optind < argc) {
		fprintf(stderr, "corrald: unexpected argument '%s' (see --help)\n", argv[optind]);
		return 2;
	}
	return GO_ON;
}

/* Step: the options checked together, sizes parsed, the listen address and the key weighed. */
static int validate_options(struct corrald *d, struct cmdline *o)
{
	if (strcmp(d->default_disk, "none") == 0 || strcmp(d->default_disk, "0") == 0) {
		d->default_disk = NULL;
	} else if (quantity_parse_bytes(d->default_disk, &d->default_disk_bytes) < 0 ||
		   d->default_disk_bytes < (8ULL << 20)) {
		fprintf(stderr,
			"corrald: --default-disk: '%s' is not a size of at least 8Mi (e.g. 10Gi), or none\n",
			d->default_disk);
		return 2;
	}
	if (quantity_parse_bytes(d->volume_size, &d->volume_size_bytes) < 0 ||
	    d->volume_size_bytes < (8ULL << 20)) {
		fprintf(stderr, "corrald: --volume-size: '%s' is not a size of at least 8Mi (e.g. 1Gi)\n",
			d->volume_size);
		return 2;
	}
	d->rt_cfg.volume_size = d->volume_size_bytes;
	d->rt_cfg.host_paths = d->host_paths;
	if (d->api_key && !*d->api_key)
		d->api_key = NULL;
	d->api_key_len = d->api_key ? strlen(d->api_key) : 0;

	if (parse_listen(o->listen, o->host, sizeof(o->host), &o->port) < 0) {
		fprintf(stderr, "corrald: --listen: '%s' is not ADDR:PORT (e.g. 127.0.0.1:8080 or [::1]:8080)\n",
			o->listen);
		return 2;
	}
	if (!d->api_key && !is_loopback(o->host)) {
		fprintf(stderr,
			"corrald: refusing to listen on %s without an API key: anyone who can reach it could run code on this host. Set --api-key (or CORRAL_API_KEY), or listen on a loopback address such as 127.0.0.1.\n",
			o->host);
		return 2;
	}

	if (!o->execd) {
		char self[PATH_MAX];
		ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
		if (n < 0) {
			fprintf(stderr, "corrald: readlink /proc/self/exe: %s; pass --execd\n",
				strerror(errno));
			return 1;
		}
		self[n] = '\0';
		snprintf(o->execd_buf, sizeof(o->execd_buf), "%s/corral-execd", dirname(self));
		o->execd = o->execd_buf;
	}
	if (access(o->execd, X_OK) < 0)
		log_warn("corral-execd not found at %s (%s): creates will fail; pass --execd PATH",
			 o->execd, strerror(errno));
	return GO_ON;
}

/* Step: the state dir made, locked for this corrald alone (the lock is held until exit), sized. */
static int state_dir_setup(struct corrald *d, struct cmdline *o)
{
	if (!realpath(o->state_dir, d->state_dir)) {
		int r = fs_mkdir_p(o->state_dir, 0700);
		if (r < 0 || !realpath(o->state_dir, d->state_dir)) {
			fprintf(stderr, "corrald: --state-dir %s: %s\n", o->state_dir,
				strerror(r < 0 ? -r : errno));
			return 1;
		}
	}
	/*
	 * One control plane per state dir: two would both own every sandbox (two TTL timers, two
	 * teardowns, interleaved sandbox.json writes). The lock dies with the process, kill -9
	 * included; workers close their copy of the descriptor (state_dir_lock()).
	 */
	char lock_path[PATH_MAX + 16];
	snprintf(lock_path, sizeof(lock_path), "%s/corrald.lock", d->state_dir);
	int lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lock_fd < 0) {
		fprintf(stderr, "corrald: open %s: %s\n", lock_path, strerror(errno));
		return 1;
	}
	if (state_dir_lock(lock_fd, lock_path, d->state_dir) < 0)
		return 1;
	char pidbuf[32];
	int pidlen = snprintf(pidbuf, sizeof(pidbuf), "%d\n", (int)getpid());
	if (ftruncate(lock_fd, 0) < 0 || pwrite(lock_fd, pidbuf, (size_t)pidlen, 0) < 0)
		log_warn("write %s: %s", lock_path, strerror(errno));

	if (o->cap.disk == CAPACITY_DISK_AUTO) {
		struct statvfs sv;
		if (statvfs(d->state_dir, &sv) < 0) {
			fprintf(stderr, "corrald: --capacity disk=auto: statvfs %s: %s\n", d->state_dir,
				strerror(errno));
			return 1;
		}
		o->cap.disk = capacity_disk_auto((uint64_t)sv.f_blocks * sv.f_frsize);
	}

	snprintf(d->sandboxes_dir, sizeof(d->sandboxes_dir), "%s/sandboxes", d->state_dir);
	int r = fs_mkdir_p(d->sandboxes_dir, 0700);
	if (r < 0) {
		fprintf(stderr, "corrald: mkdir %s: %s\n", d->sandboxes_dir, strerror(-r));
		return 1;
	}
	return GO_ON;
}

/* Step: the image store, the runtime prepared, the process's limits, the token key. */
static int runtime_setup(struct corrald *d, struct cmdline *o)
{
	snprintf(d->image_store, sizeof(d->image_store), "%s/" IMAGE_STORE_DIR, d->state_dir);
	{
		struct error err = {0};
		if (image_store_init(d->image_store, &err) < 0) {
			fprintf(stderr, "corrald: %s\n", err.msg);
			return 1;
		}
		/* Once: a kernel without Landlock (or too old a one) pulls with less confinement. */
		unsigned cl = image_confine_probe();
		if (cl != IMAGE_CONFINED_ALL) {
			char have[160], miss[160];
			log_warn("image pulls: layers are downloaded and unpacked with %s only; this kernel lacks %s (docs/security.md)",
				 image_confine_describe(cl, have, sizeof(have)),
				 image_confine_describe(IMAGE_CONFINED_ALL & ~cl, miss, sizeof(miss)));
		}
	}
	if (d->registry_auth && access(d->registry_auth, R_OK) < 0) {
		fprintf(stderr, "corrald: --registry-auth %s: %s\n", d->registry_auth, strerror(errno));
		return 2;
	}
	{
		struct error err = {0};
		if (image_pull_job_check(d, &err) < 0) {
			fprintf(stderr, "corrald: %s\n", err.msg);
			return 2;
		}
	}
	d->rt = &runtime_native;
	d->rt_cfg.state_dir = d->state_dir;
	d->rt_cfg.execd_path = o->execd;
	d->rt_cfg.cgroup_name = o->cgroup_name;
	{
		/* Per-process runtime work once, before the first worker is forked; and a runtime
		 * that cannot keep sandboxes apart here refuses to start instead of failing later. */
		struct error err = {0};
		if (d->rt->prepare && d->rt->prepare(&d->rt_cfg, &err) < 0) {
			fprintf(stderr, "corrald: %s\n", err.msg);
			return 1;
		}
	}
	if (d->default_disk_bytes && check_default_disk(d) < 0)
		return 1;

	/* One runtime watch fd (or more) per live sandbox plus client and execd connections: 1024 is far too few. */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			log_warn("raise the open-file limit to %llu: %s",
				 (unsigned long long)rl.rlim_max, strerror(errno));
	}

	/* Half the descriptors for clients at most: sandboxes (watch fds) and execd connections need theirs. */
	if (!o->max_conn_given) {
		d->max_connections = DEFAULT_MAX_CONNECTIONS;
		if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
		    rl.rlim_cur / 2 < d->max_connections)
			d->max_connections = rl.rlim_cur / 2 > 16 ? (unsigned)(rl.rlim_cur / 2) : 16;
	} else if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
		   d->max_connections > rl.rlim_cur) {
		log_warn("--max-connections %u is above the open-file limit %llu: past it, accepting pauses with a backoff",
			 d->max_connections, (unsigned long long)rl.rlim_cur);
	}
	/* Keys the proxy tokens (with an API key) and the egress policy API's tokens (always). */
	{
		char key_path[PATH_MAX + 32], msg[PATH_MAX + 256];
		snprintf(key_path, sizeof(key_path), "%s/proxy-token.key", d->state_dir);
		int r = token_secret_load(key_path, d->proxy_secret, msg, sizeof(msg));
		if (r < 0) {
			fprintf(stderr, "corrald: proxy token secret: %s\n", msg);
			return 1;
		}
	}
	return GO_ON;
}

/* Step: the event loop, the API and admission on it, the listening socket. */
static int listen_setup(struct corrald *d, struct cmdline *o)
{
	signal(SIGPIPE, SIG_IGN);
	d->base = event_base_new();
	if (!d->base) {
		fprintf(stderr, "corrald: cannot set up the event loop\n");
		return 1;
	}
	int r = api_init(d);
	if (r == -EPROTO) {
		fprintf(stderr,
			"corrald: libevent %s: its evhttp connection layout is not the one corrald knows (" LIBEVENT_PRIVATE_KNOWN "); corrald cannot judge requests before their body and will not start\n",
			event_get_version());
		return 1;
	}
	if (r < 0 || admission_init(d, &o->cap) < 0) {
		fprintf(stderr, "corrald: cannot set up the event loop\n");
		return 1;
	}
	d->bound = evhttp_bind_socket_with_handle(d->http, o->host, o->port);
	if (!d->bound) {
		fprintf(stderr, "corrald: cannot listen on %s: %s\n", o->listen, strerror(errno));
		return 1;
	}
	front_listen(d->bound);
	/*
	 * Accepted sockets inherit TCP_NODELAY from the listener. Without it a streamed reply's
	 * small writes wait for the client's delayed ACK (~40 ms per command round trip).
	 */
	int one = 1;
	if (setsockopt(evhttp_bound_socket_get_fd(d->bound), IPPROTO_TCP, TCP_NODELAY, &one,
		       sizeof(one)) < 0)
		log_warn("TCP_NODELAY on the listening socket: %s", strerror(errno));
	return GO_ON;
}

/* Step: the sandbox network and its resolver, then the sandboxes of the last run taken back. */
static int network_setup(struct corrald *d, struct cmdline *o)
{
	if (setup_network(d, &o->net_cfg) < 0)
		return 1;
	if (d->net) {
		/* corral's resolver for the sandboxes, on the gateway's port 53 (egress.c) */
		struct error err = {0};
		if (egress_start(d, &err) < 0) {
			fprintf(stderr, "corrald: sandbox DNS: %s\n", err.msg);
			return 1;
		}
	}
	int r = lifecycle_recover(d);
	if (r < 0)
		log_error("recovering sandboxes from %s: %s", d->sandboxes_dir, strerror(-r));
	if (d->net) {
		struct error err = {0};
		r = net_gc(d->net, &err);
		if (r < 0)
			log_error("network: removing leftovers of deleted sandboxes: %s", err.msg);
		else if (r > 0)
			log_info("network: removed the leftovers of %d deleted sandbox(es)", r);
		struct sandbox *sb;
		TAILQ_FOREACH(sb, &d->sandboxes, link)
			if (sb->net.on && r >= 0 && net_sandbox_broken(d->net, sb->id))
				log_error("sandbox %s: its nftables chain or counter in table inet %s is gone (deleted behind corrald's back?): its network is cut off (its veth removed); delete it and create it again",
					  sb->id, d->net->name);
	}
	return GO_ON;
}

/* Step: signals, the start-up lines of the log, the event loop until SIGINT or SIGTERM. */
static int serve(struct corrald *d, struct cmdline *o)
{
	struct capacity cap = o->cap;
	struct event *sigint = evsignal_new(d->base, SIGINT, on_signal, d);
	struct event *sigterm = evsignal_new(d->base, SIGTERM, on_signal, d);
	event_add(sigint, NULL);
	event_add(sigterm, NULL);

	char capmem[32];
	quantity_format_bytes(cap.memory_bytes, capmem, sizeof(capmem));
	log_info("listening on %s (state %s, execd %s, cgroup %s, auth %s, user namespaces %s, capacity cpu %llum memory %s pids %llu files %llu, sandbox nofile %llu, max connections %u)",
		 o->listen, d->state_dir, o->execd, o->cgroup_name,
		 d->api_key ? "on" : "off (loopback only)",
		 d->rt_cfg.no_userns ? "off (--no-userns)" : "on",
		 (unsigned long long)cap.cpu_millis, capmem, (unsigned long long)cap.pids,
		 (unsigned long long)cap.files,
		 (unsigned long long)(d->rt_cfg.nofile ? d->rt_cfg.nofile : CONFINE_DEFAULT_NOFILE),
		 d->max_connections);
	if (cap.disk != UINT64_MAX) {
		char capdisk[32];
		quantity_format_bytes(cap.disk, capdisk, sizeof(capdisk));
		log_info("the sandboxes' disks may add up to %s of the state file system (--capacity disk=); a create without a disk limit is refused",
			 capdisk);
	} else {
		log_info("the sandboxes' disks are not counted against the state file system (overcommit; --capacity disk=auto counts them)");
	}
	if (cap.pids / RUNTIME_DEFAULT_PIDS_MAX < 16)
		log_warn("the host's pid table admits only %llu sandboxes at the default pids limit %d: raise kernel.pid_max (e.g. sysctl kernel.pid_max=4194304) or create sandboxes with a lower resourceLimits.pids",
			 (unsigned long long)(cap.pids / RUNTIME_DEFAULT_PIDS_MAX),
			 RUNTIME_DEFAULT_PIDS_MAX);
	event_base_dispatch(d->base);
	egress_stop(d);
	net_unlock(d->net); /* the bridge and tables stay for the next start; the lock file goes */
	upstream_shutdown();
	log_info("stopped");
	return 0;
}

int main(int argc, char **argv)
{
	struct corrald *d = &D;
	struct cmdline o = {0};
	int r;

	if (argc == 2 && strcmp(argv[1], IMAGE_PULL_WORKER_ARG) == 0)
		image_pull_worker_main();
	cmdline_defaults(d, &o);
	if ((r = parse_command_line(argc, argv, d, &o)) != GO_ON ||
	    (r = validate_options(d, &o)) != GO_ON || (r = state_dir_setup(d, &o)) != GO_ON ||
	    (r = runtime_setup(d, &o)) != GO_ON || (r = listen_setup(d, &o)) != GO_ON ||
	    (r = network_setup(d, &o)) != GO_ON)
		return r;
	return serve(d, &o);
}
