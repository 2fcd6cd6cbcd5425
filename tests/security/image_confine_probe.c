/*
 * The confinement of a layer child, tried from inside (test_image_confine.py).
 *
 *   image_confine_probe [--old-kernel | --manifest] WORK LAYER_TAR OUTSIDE STATE PORT_OK PORT_DENIED
 *
 * --old-kernel first makes this process look like one on a kernel without Landlock and without
 * mount namespaces for it (landlock_* fail with ENOSYS, unshare and mount_setattr with EPERM), to
 * check that confinement falls back to what is left and the unpack still works.
 * confines itself exactly as a layer child does (image_layer_confine() with a registry client
 * of 127.0.0.1:PORT_OK over plain HTTP), then attempts what a compromised unpack would: each
 * attempt prints "name errno" (0: it succeeded). Last, it unpacks LAYER_TAR into WORK/root as a
 * layer child does, and prints "unpack <errno>". The first lines are "expect <IMAGE_CONFINED_*>"
 * (what image_confine_probe() says this kernel allows) and "level <IMAGE_CONFINED_*>" (reached).
 * --manifest confines it as the manifest child of a pull is instead (image_meta_confine(): no
 * capabilities, files up to IMAGE_META_FSIZE_MAX) and unpacks nothing ("unpack skipped").
 *
 * Two children of different pulls (the same uid, the same or fewer capabilities):
 *   image_confine_probe --hold [--old-kernel] WORK
 *     confines itself as a manifest child with $PROBE_SECRET in its environment and heap (a pull's
 *     credentials), prints "ready" and waits for stdin to close;
 *   image_confine_probe --peek [--old-kernel] WORK PID SECRET
 *     confines itself as a layer child and reads PID's environment and memory for SECRET:
 *     "read_sibling_environ <errno>", "read_sibling_mem <errno>", "sibling_secret <0|1>".
 *
 *   image_confine_probe --tty WORK
 *     its stdin is a terminal whose session it leads (as corrald's is under `make run`, in the
 *     operator's shell); a child of it confines itself as a layer child and pushes a command into
 *     that terminal's input with TIOCSTI: "tiocsti <errno>"; reads what was typed there
 *     ("terminal_read <bytes>") and writes to its stderr ("terminal_write <bytes>", -1: failed).
 */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "images/images.h"
#include "images/registry.h"

#define FSIZE_MAX (8ULL << 20)

static void report(const char *name, int rc)
{
	printf("%s %d\n", name, rc < 0 ? errno : 0);
	fflush(stdout);
}

static int create_at(const char *dir, const char *name, mode_t mode)
{
	char p[4096];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
	if (fd >= 0)
		close(fd);
	return fd;
}

static void *thread_main(void *arg)
{
	return arg;
}

/* What libcurl's threaded resolver does: a thread, then getaddrinfo() through NSS. */
static int resolve_in_thread(void)
{
	pthread_t t;
	int e = pthread_create(&t, NULL, thread_main, NULL);
	if (e) {
		errno = e;
		return -1;
	}
	pthread_join(t, NULL);
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
	e = getaddrinfo("localhost", "80", &hints, &res);
	if (res)
		freeaddrinfo(res);
	errno = e == 0 ? 0 : e == EAI_SYSTEM ? errno : EHOSTUNREACH;
	return e == 0 ? 0 : -1;
}

/* An HTTPS request to the test's TLS server (a self-signed certificate): with the CA files
 * readable, the handshake runs and verification fails (CURLE_PEER_FAILED_VERIFICATION); without
 * them it fails to load them (CURLE_SSL_CACERT_BADFILE). The curl code, not an errno. */
static int tls_request(int port)
{
	char url[64];
	snprintf(url, sizeof(url), "https://127.0.0.1:%d/v2/", port);
	CURL *h = curl_easy_init();
	if (!h)
		return -1;
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_TIMEOUT, 20L);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	int rc = (int)curl_easy_perform(h);
	curl_easy_cleanup(h);
	return rc;
}

static int tcp(int port, bool do_bind)
{
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int r = do_bind ? bind(s, (struct sockaddr *)&a, sizeof(a))
			: connect(s, (struct sockaddr *)&a, sizeof(a));
	int e = errno;
	close(s);
	errno = e;
	return r;
}

static int pretend_old_kernel(void)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx)
		return -1;
	int r = 0;
	static const char *const enosys[] = {"landlock_create_ruleset", "landlock_add_rule",
					     "landlock_restrict_self", "mount_setattr"};
	for (size_t i = 0; r == 0 && i < ARRAY_SIZE(enosys); i++)
		r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS),
				     seccomp_syscall_resolve_name(enosys[i]), 0);
	if (r == 0)
		r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(unshare), 0);
	if (r == 0)
		r = seccomp_load(ctx);
	seccomp_release(ctx);
	return r;
}

static struct registry *probe_registry(int port)
{
	char host[64], refs[128];
	snprintf(host, sizeof(host), "127.0.0.1:%d", port);
	snprintf(refs, sizeof(refs), "%s/probe:latest", host);
	const char *insecure[] = {host, NULL};
	struct image_pull_opts o = {.insecure = insecure};
	struct image_ref ref;
	struct error err = {0};
	struct registry *reg = NULL;
	if (image_ref_parse(refs, &ref, &err) < 0 || registry_open(&o, &ref, &reg, &err) < 0) {
		fprintf(stderr, "registry client: %s\n", err.msg);
		exit(2);
	}
	return reg;
}

/* Whether needle is in the file at path (errno in *ret_errno: 0 if it opened). */
static bool file_has(const char *path, const char *needle, int *ret_errno)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	*ret_errno = fd < 0 ? errno : 0;
	if (fd < 0)
		return false;
	static char buf[1 << 16];
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	return n > 0 && memmem(buf, (size_t)n, needle, strlen(needle)) != NULL;
}

/* Whether needle is in the readable mappings of pid, through /proc/pid/mem. */
static bool mem_has(int pid, const char *needle, int *ret_errno)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/mem", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	*ret_errno = fd < 0 ? errno : 0;
	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	FILE *maps = fd < 0 ? NULL : fopen(path, "re");
	bool found = false;
	char line[512];
	while (maps && !found && fgets(line, sizeof(line), maps)) {
		unsigned long start, end;
		char perms[8];
		if (sscanf(line, "%lx-%lx %7s", &start, &end, perms) != 3 || perms[0] != 'r' ||
		    strstr(line, "[vvar") || strstr(line, "[vsyscall]"))
			continue;
		for (unsigned long at = start; at < end && !found; at += 1 << 16) {
			static char buf[1 << 16];
			size_t want = end - at < sizeof(buf) ? end - at : sizeof(buf);
			ssize_t n = pread(fd, buf, want, (off_t)at);
			found = n > 0 && memmem(buf, (size_t)n, needle, strlen(needle)) != NULL;
		}
	}
	if (maps)
		fclose(maps);
	if (fd >= 0)
		close(fd);
	return found;
}

static int sibling_main(int argc, char **argv)
{
	bool hold = strcmp(argv[1], "--hold") == 0;
	argv++;
	argc--;
	if (argc > 1 && strcmp(argv[1], "--old-kernel") == 0) {
		if (pretend_old_kernel() < 0) {
			fprintf(stderr, "cannot pretend to be an old kernel\n");
			return 2;
		}
		argv++;
		argc--;
	}
	if (argc != (hold ? 2 : 4)) {
		fprintf(stderr, "usage: --hold [--old-kernel] WORK | --peek [--old-kernel] WORK PID SECRET\n");
		return 2;
	}
	struct registry *reg = probe_registry(1);
	if (hold) {
		const char *s = getenv("PROBE_SECRET");
		char *copy = strdup(s ? s : "");
		int in = dup(0); /* confinement points stdin at /dev/null */
		printf("level %u\n", image_meta_confine(argv[1], reg));
		printf("ready %zu\n", strlen(copy));
		fflush(stdout);
		char c;
		while (read(in, &c, 1) > 0)
			;
		_exit(0);
	}
	printf("level %u\n", image_layer_confine(argv[1], reg, NULL, FSIZE_MAX));
	int pid = atoi(argv[2]), e;
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/environ", pid);
	bool found = file_has(path, argv[3], &e);
	printf("read_sibling_environ %d\n", e);
	found = mem_has(pid, argv[3], &e) || found;
	printf("read_sibling_mem %d\n", e);
	printf("sibling_secret %d\n", found);
	fflush(stdout);
	_exit(0);
}

static int tty_main(const char *work)
{
	pid_t c = fork();
	if (c == 0) { /* as a pull worker: a process group of its own, not the foreground one */
		setpgid(0, 0);
		signal(SIGTTIN, SIG_IGN);
		signal(SIGTTOU, SIG_IGN);
		pid_t w = fork();
		int st;
		if (w != 0)
			_exit(w > 0 && waitpid(w, &st, 0) == w && WIFEXITED(st) ? WEXITSTATUS(st) : 2);
		/* its child (a layer child), in that group */
		struct registry *reg = probe_registry(1);
		printf("level %u\n", image_layer_confine(work, reg, NULL, FSIZE_MAX));
		int e = 0;
		for (const char *p = "echo corral-tty-injected\n"; *p && !e; p++)
			if (ioctl(0, TIOCSTI, p) < 0)
				e = errno;
		printf("tiocsti %d\n", e);
		/* what the operator typed into the terminal meanwhile */
		char buf[256];
		struct pollfd pfd = {.fd = 0, .events = POLLIN};
		ssize_t n = poll(&pfd, 1, 1000) == 1 ? read(0, buf, sizeof(buf)) : 0;
		printf("terminal_read %zd\n", n < 0 ? 0 : n);
		/* and what it writes there (an escape sequence would do more) */
		printf("terminal_write %zd\n", write(2, "corral-tty-written\n", 19));
		fflush(stdout);
		_exit(0);
	}
	int st;
	return c > 0 && waitpid(c, &st, 0) == c && WIFEXITED(st) ? WEXITSTATUS(st) : 2;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--tty") == 0)
		return tty_main(argv[2]);
	if (argc > 1 && (strcmp(argv[1], "--hold") == 0 || strcmp(argv[1], "--peek") == 0))
		return sibling_main(argc, argv);
	bool old_kernel = argc == 8 && strcmp(argv[1], "--old-kernel") == 0;
	bool manifest = argc == 8 && strcmp(argv[1], "--manifest") == 0;
	if (manifest) {
		argv++;
		argc--;
	}
	if (old_kernel) {
		if (pretend_old_kernel() < 0) {
			fprintf(stderr, "cannot pretend to be an old kernel\n");
			return 2;
		}
		argv++;
		argc--;
	}
	if (argc != 7) {
		fprintf(stderr, "usage: %s WORK LAYER_TAR OUTSIDE STATE PORT_OK PORT_DENIED\n",
			argv[0]);
		return 2;
	}
	const char *work = argv[1], *layer = argv[2], *outside = argv[3], *state = argv[4];
	int port_ok = atoi(argv[5]), port_denied = atoi(argv[6]);
	char host[64], victim[4096], path[4096];
	snprintf(host, sizeof(host), "127.0.0.1:%d", port_ok);
	const char *insecure[] = {host, NULL};
	struct image_pull_opts o = {.insecure = insecure};
	struct image_ref ref;
	struct error err = {0};
	struct registry *reg = NULL;
	char refs[128];
	snprintf(refs, sizeof(refs), "%s/probe:latest", host);
	if (image_ref_parse(refs, &ref, &err) < 0 || registry_open(&o, &ref, &reg, &err) < 0) {
		fprintf(stderr, "registry client: %s\n", err.msg);
		return 2;
	}
	pid_t parent = getppid();

	printf("expect %u\n", image_confine_probe());
	uint64_t fsize_max = manifest ? IMAGE_META_FSIZE_MAX : FSIZE_MAX;
	printf("level %u\n", manifest ? image_meta_confine(work, reg)
				       : image_layer_confine(work, reg, NULL, fsize_max));

	/* Writes outside the work directory: a host dir, /etc, the store beside the layer. */
	report("write_outside", create_at(outside, "pwned", 0644));
	snprintf(path, sizeof(path), "corral-confine-pwned-%d", (int)getpid());
	if (!old_kernel) /* unconfined there: it would succeed, and litter the host's /etc */
		report("write_etc", create_at("/etc", path, 0644));
	snprintf(path, sizeof(path), "%s/layers", state);
	report("write_state", create_at(path, "pwned", 0644));
	report("suid_outside", create_at(outside, "suid", 04755));
	/* Metadata of an existing host file: Landlock does not cover it, the mount view does. */
	snprintf(victim, sizeof(victim), "%s/victim", outside);
	report("chmod_suid_outside", chmod(victim, 04755));
	report("chown_outside", chown(victim, 1000, 1000));
	report("link_outside_in", link(victim, strcat(strcpy(path, work), "/linked")));
	/* Reads the unpack has no use for: secrets, the store (other images' configs). */
	report("read_shadow", open("/etc/shadow", O_RDONLY | O_CLOEXEC));
	snprintf(path, sizeof(path), "%s/layers", state);
	report("read_store", open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
	snprintf(path, sizeof(path), "/proc/%d/environ", (int)parent);
	report("read_parent_environ", open(path, O_RDONLY | O_CLOEXEC));
	/* Kernel surface. */
	snprintf(path, sizeof(path), "%s/m", work);
	mkdir(path, 0755);
	report("mount", mount("none", path, "tmpfs", 0, NULL));
	report("ptrace", (int)ptrace(PTRACE_ATTACH, parent, NULL, NULL));
	report("unshare_user", unshare(CLONE_NEWUSER));
	report("unshare_mount", unshare(CLONE_NEWNS));
	report("raw_socket", socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_ICMP));
	report("packet_socket", socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0));
	report("unix_socket", socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
	pid_t child = fork();
	if (child == 0)
		_exit(0);
	report("fork", (int)child);
	report("execve", execl("/bin/true", "true", (char *)NULL));
	report("signal_parent", kill(parent, 0));
	snprintf(path, sizeof(path), "%s/xattr", work);
	(void)create_at(work, "xattr", 0644);
	report("setxattr_trusted", setxattr(path, "trusted.overlay.redirect", "/etc", 4, 0));
	/* A device node (CAP_MKNOD is kept for the image's): /dev/null's numbers, so harmless if it
	 * opened; a host disk's would be the same call. */
	snprintf(path, sizeof(path), "%s/dev", work);
	int mk = mknod(path, S_IFCHR | 0600, makedev(1, 3));
	report("mknod_char", mk);
	report("open_made_device", mk < 0 ? (errno = EPERM, -1) : open(path, O_RDWR | O_CLOEXEC));
	/* A host device (a read-only /dev still opens for writing): /dev/null as the harmless one. */
	report("open_host_device", open("/dev/null", O_RDWR | O_CLOEXEC));
	snprintf(path, sizeof(path), "%s/wh", work);
	report("mknod_whiteout", mknod(path, S_IFCHR | 0600, makedev(0, 0)));
	report("connect_registry_port", tcp(port_ok, false));
	report("connect_other_port", tcp(port_denied, false));
	report("bind", tcp(0, true));
	/* What the child needs must still work. */
	report("read_resolv_conf", open("/etc/resolv.conf", O_RDONLY | O_CLOEXEC));
	report("read_ca_certs", open("/etc/ssl/certs", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
	report("thread_and_resolve", resolve_in_thread());
	printf("tls_request %d\n", tls_request(port_ok));
	report("write_work", create_at(work, "ok", 0644));
	/* A file past RLIMIT_FSIZE. */
	snprintf(path, sizeof(path), "%s/big", work);
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	int fr = fd < 0 ? -1 : (pwrite(fd, "x", 1, (off_t)fsize_max) < 0 ? -1 : 0);
	report("write_past_fsize", fr);
	if (fd >= 0)
		close(fd);
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct d[2];
	if (syscall(SYS_capget, &h, d) == 0)
		printf("caps %llu\n",
		       (unsigned long long)(d[0].effective | ((uint64_t)d[1].effective << 32)));

	if (manifest) { /* its job is the registry conversation: connect and TLS, above */
		printf("unpack skipped\n");
		fflush(stdout);
		_exit(0);
	}
	/* And the job itself, as a layer child does it. */
	char root[4096], opaque[4096];
	snprintf(root, sizeof(root), "%s/root", work);
	snprintf(opaque, sizeof(opaque), "%s/opaque", work);
	int ofd = open(opaque, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	int r = mkdir(root, 0755) < 0 || ofd < 0 ? -errno
						 : image_layer_unpack_list_opaque(layer, root, NULL,
										  ofd, NULL, &err);
	printf("unpack %d%s%s\n", r < 0 ? -r : 0, r < 0 ? " " : "", r < 0 ? err.msg : "");
	fflush(stdout);
	/* As a layer child ends: _exit, no exit handlers (LeakSanitizer's would ptrace, denied). */
	_exit(0);
}
