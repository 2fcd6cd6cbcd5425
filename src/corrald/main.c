/*
 * corrald: the corral control plane. One event loop, one thread; blocking runtime work runs in
 * forked workers (worker.c). Serves the OpenSandbox lifecycle API and the server proxy.
 */
#include <arpa/inet.h>
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
#include <unistd.h>

#include "corrald/admission.h"
#include "corrald/corrald.h"
#include "corrald/front.h"
#include "corrald/token.h"
#include "corrald/upstream.h"
#include "shared/fsutil.h"
#include "shared/log.h"
#include "shared/quantity.h"

#define DEFAULT_LISTEN "127.0.0.1:8080"
#define DEFAULT_STATE_DIR "/var/lib/corral"
#define DEFAULT_IDLE_TIMEOUT 30
#define DEFAULT_CREATE_TIMEOUT 30
#define DEFAULT_HEADER_TIMEOUT 10
#define DEFAULT_MAX_CONNECTIONS 4096
/* Below the stock SDKs' 30 s request timeout, so their clients see the 503 rather than time out. */
#define DEFAULT_CAPACITY_WAIT 20
#define SHUTDOWN_WAIT_S 10

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
		"  --capacity cpu=N,memory=SIZE\n"
		"                         what sandboxes may request in total (resourceRequests; absent =\n"
		"                         their limits); a create that does not fit waits as Pending until\n"
		"                         capacity frees or --capacity-wait passes (then 503\n"
		"                         SANDBOX::CAPACITY_TIMEOUT). Default: every CPU corrald may use\n"
		"                         and the host's memory less max(512Mi, 5%%)\n"
		"  --capacity-wait SECS   longest wait of a create for capacity (default %d: below the\n"
		"                         SDKs' 30 s request timeout, so clients get the 503)\n"
		"  --log-level LEVEL      error, warn, info or debug (default info)\n"
		"  -h, --help             show this help\n"
		"\n"
		"Example:\n"
		"  corrald --listen 127.0.0.1:8080 --state-dir /tmp/corral --image-dir /srv/images\n"
		"  curl -s localhost:8080/v1/sandboxes -d '{\"image\":{\"uri\":\"host\"},\n"
		"       \"entrypoint\":[\"sleep\",\"infinity\"],\"timeout\":600}'\n",
		DEFAULT_IDLE_TIMEOUT, DEFAULT_HEADER_TIMEOUT, DEFAULT_MAX_CONNECTIONS,
		DEFAULT_CREATE_TIMEOUT, DEFAULT_CAPACITY_WAIT);
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
	shutdown_ev = evtimer_new(d->base, on_shutdown_tick, d);
	on_shutdown_tick(-1, 0, d);
}

int main(int argc, char **argv)
{
	enum { OPT_LISTEN = 1000, OPT_STATE, OPT_KEY, OPT_IMAGES, OPT_LOG, OPT_IDLE, OPT_EXECD,
	       OPT_CGROUP, OPT_CREATE_TIMEOUT, OPT_CAPACITY, OPT_CAPACITY_WAIT, OPT_HEADER_TIMEOUT,
	       OPT_MAX_CONNECTIONS };
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
		{"header-timeout", required_argument, NULL, OPT_HEADER_TIMEOUT},
		{"max-connections", required_argument, NULL, OPT_MAX_CONNECTIONS},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct corrald *d = &D;
	const char *listen = DEFAULT_LISTEN, *state_dir = DEFAULT_STATE_DIR, *execd = NULL;
	const char *cgroup_name = "corral";
	d->idle_timeout_s = DEFAULT_IDLE_TIMEOUT;
	d->header_timeout_s = DEFAULT_HEADER_TIMEOUT;
	bool max_conn_given = false;
	d->create_timeout_s = DEFAULT_CREATE_TIMEOUT;
	d->capacity_wait_s = DEFAULT_CAPACITY_WAIT;
	d->api_key = getenv("CORRAL_API_KEY");
	TAILQ_INIT(&d->sandboxes);
	log_set_ident("corrald");
	struct capacity cap;
	{
		cpu_set_t cpus;
		unsigned ncpu = sched_getaffinity(0, sizeof(cpus), &cpus) == 0
				    ? (unsigned)CPU_COUNT(&cpus)
				    : (unsigned)sysconf(_SC_NPROCESSORS_ONLN);
		uint64_t mem = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
		capacity_default(ncpu, mem, &cap);
	}

	int c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case OPT_LISTEN: listen = optarg; break;
		case OPT_STATE: state_dir = optarg; break;
		case OPT_KEY: d->api_key = optarg; break;
		case OPT_IMAGES: d->image_dir = optarg; break;
		case OPT_EXECD: execd = optarg; break;
		case OPT_CGROUP: cgroup_name = optarg; break;
		case OPT_LOG: {
			enum log_level lvl;
			if (log_level_parse(optarg, &lvl) < 0) {
				fprintf(stderr, "corrald: --log-level: '%s' is not one of error, warn, info, debug\n",
					optarg);
				return 2;
			}
			log_set_level(lvl);
			break;
		}
		case OPT_IDLE:
			if (parse_seconds("--idle-timeout", optarg, &d->idle_timeout_s) < 0)
				return 2;
			break;
		case OPT_HEADER_TIMEOUT:
			if (parse_seconds("--header-timeout", optarg, &d->header_timeout_s) < 0)
				return 2;
			break;
		case OPT_MAX_CONNECTIONS: {
			char *end;
			long v = strtol(optarg, &end, 10);
			if (!*optarg || *end || v < 1 || v > 1000000) {
				fprintf(stderr, "corrald: --max-connections: '%s' is not a number from 1 to 1000000\n",
					optarg);
				return 2;
			}
			d->max_connections = (unsigned)v;
			max_conn_given = true;
			break;
		}
		case OPT_CREATE_TIMEOUT:
			if (parse_seconds("--create-timeout", optarg, &d->create_timeout_s) < 0)
				return 2;
			break;
		case OPT_CAPACITY_WAIT:
			if (parse_seconds("--capacity-wait", optarg, &d->capacity_wait_s) < 0)
				return 2;
			break;
		case OPT_CAPACITY: {
			char msg[256];
			if (capacity_parse(optarg, &cap, msg, sizeof(msg)) < 0) {
				fprintf(stderr, "corrald: --capacity: %s\n", msg);
				return 2;
			}
			break;
		}
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "corrald: unexpected argument '%s' (see --help)\n", argv[optind]);
		return 2;
	}
	if (d->api_key && !*d->api_key)
		d->api_key = NULL;
	d->api_key_len = d->api_key ? strlen(d->api_key) : 0;

	char host[256];
	unsigned short port;
	if (parse_listen(listen, host, sizeof(host), &port) < 0) {
		fprintf(stderr, "corrald: --listen: '%s' is not ADDR:PORT (e.g. 127.0.0.1:8080 or [::1]:8080)\n",
			listen);
		return 2;
	}
	if (!d->api_key && !is_loopback(host)) {
		fprintf(stderr,
			"corrald: refusing to listen on %s without an API key: anyone who can reach it could run code on this host. Set --api-key (or CORRAL_API_KEY), or listen on a loopback address such as 127.0.0.1.\n",
			host);
		return 2;
	}

	char execd_buf[PATH_MAX];
	if (!execd) {
		char self[PATH_MAX];
		ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
		if (n < 0) {
			fprintf(stderr, "corrald: readlink /proc/self/exe: %s; pass --execd\n",
				strerror(errno));
			return 1;
		}
		self[n] = '\0';
		snprintf(execd_buf, sizeof(execd_buf), "%s/corral-execd", dirname(self));
		execd = execd_buf;
	}
	if (access(execd, X_OK) < 0)
		log_warn("corral-execd not found at %s (%s): creates will fail; pass --execd PATH",
			 execd, strerror(errno));

	if (!realpath(state_dir, d->state_dir)) {
		int r = fs_mkdir_p(state_dir, 0700);
		if (r < 0 || !realpath(state_dir, d->state_dir)) {
			fprintf(stderr, "corrald: --state-dir %s: %s\n", state_dir,
				strerror(r < 0 ? -r : errno));
			return 1;
		}
	}
	/*
	 * One control plane per state dir: two would both own every sandbox (two TTL timers, two
	 * teardowns, interleaved sandbox.json writes). The lock dies with the process, kill -9
	 * included; workers close their copy of the descriptor.
	 */
	char lock_path[PATH_MAX + 16];
	snprintf(lock_path, sizeof(lock_path), "%s/corrald.lock", d->state_dir);
	int lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lock_fd < 0) {
		fprintf(stderr, "corrald: open %s: %s\n", lock_path, strerror(errno));
		return 1;
	}
	if (flock(lock_fd, LOCK_EX | LOCK_NB) < 0) {
		char holder[32] = "";
		ssize_t n = pread(lock_fd, holder, sizeof(holder) - 1, 0);
		holder[n > 0 ? n : 0] = '\0';
		holder[strcspn(holder, "\n")] = '\0';
		fprintf(stderr,
			"corrald: state dir %s is in use by another corrald%s%s%s: stop it first, or use another --state-dir\n",
			d->state_dir, holder[0] ? " (pid " : "", holder, holder[0] ? ")" : "");
		return 1;
	}
	char pidbuf[32];
	int pidlen = snprintf(pidbuf, sizeof(pidbuf), "%d\n", (int)getpid());
	if (ftruncate(lock_fd, 0) < 0 || pwrite(lock_fd, pidbuf, (size_t)pidlen, 0) < 0)
		log_warn("write %s: %s", lock_path, strerror(errno));

	snprintf(d->sandboxes_dir, sizeof(d->sandboxes_dir), "%s/sandboxes", d->state_dir);
	int r = fs_mkdir_p(d->sandboxes_dir, 0700);
	if (r < 0) {
		fprintf(stderr, "corrald: mkdir %s: %s\n", d->sandboxes_dir, strerror(-r));
		return 1;
	}
	d->rt = &runtime_native;
	d->rt_cfg.state_dir = d->state_dir;
	d->rt_cfg.execd_path = execd;
	d->rt_cfg.cgroup_name = cgroup_name;

	/* One pidfd per live sandbox plus client and execd connections: 1024 is far too few. */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			log_warn("raise the open-file limit to %llu: %s",
				 (unsigned long long)rl.rlim_max, strerror(errno));
	}

	/* Half the descriptors for clients at most: sandboxes (pidfds) and execd connections need theirs. */
	if (!max_conn_given) {
		d->max_connections = DEFAULT_MAX_CONNECTIONS;
		if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
		    rl.rlim_cur / 2 < d->max_connections)
			d->max_connections = rl.rlim_cur / 2 > 16 ? (unsigned)(rl.rlim_cur / 2) : 16;
	} else if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
		   d->max_connections > rl.rlim_cur) {
		log_warn("--max-connections %u is above the open-file limit %llu: past it, accepting pauses with a backoff",
			 d->max_connections, (unsigned long long)rl.rlim_cur);
	}
	if (d->api_key) {
		char key_path[PATH_MAX + 32], msg[PATH_MAX + 256];
		snprintf(key_path, sizeof(key_path), "%s/proxy-token.key", d->state_dir);
		r = token_secret_load(key_path, d->proxy_secret, msg, sizeof(msg));
		if (r < 0) {
			fprintf(stderr, "corrald: proxy token secret: %s\n", msg);
			return 1;
		}
	}

	signal(SIGPIPE, SIG_IGN);
	d->base = event_base_new();
	if (!d->base) {
		fprintf(stderr, "corrald: cannot set up the event loop\n");
		return 1;
	}
	r = api_init(d);
	if (r == -EPROTO) {
		fprintf(stderr,
			"corrald: libevent %s: its evhttp connection layout is not the one corrald knows (2.1.8 to 2.1.12); corrald cannot judge requests before their body and will not start\n",
			event_get_version());
		return 1;
	}
	if (r < 0 || admission_init(d, &cap) < 0) {
		fprintf(stderr, "corrald: cannot set up the event loop\n");
		return 1;
	}
	d->bound = evhttp_bind_socket_with_handle(d->http, host, port);
	if (!d->bound) {
		fprintf(stderr, "corrald: cannot listen on %s: %s\n", listen, strerror(errno));
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
	r = lifecycle_recover(d);
	if (r < 0)
		log_error("recovering sandboxes from %s: %s", d->sandboxes_dir, strerror(-r));

	struct event *sigint = evsignal_new(d->base, SIGINT, on_signal, d);
	struct event *sigterm = evsignal_new(d->base, SIGTERM, on_signal, d);
	event_add(sigint, NULL);
	event_add(sigterm, NULL);

	char capmem[32];
	quantity_format_bytes(cap.memory_bytes, capmem, sizeof(capmem));
	log_info("listening on %s (state %s, execd %s, cgroup %s, auth %s, capacity cpu %llum memory %s, max connections %u)",
		 listen, d->state_dir, execd, cgroup_name, d->api_key ? "on" : "off (loopback only)",
		 (unsigned long long)cap.cpu_millis, capmem, d->max_connections);
	event_base_dispatch(d->base);
	upstream_shutdown();
	log_info("stopped");
	return 0;
}
