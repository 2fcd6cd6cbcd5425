/*
 * The native runtime against the real kernel (root only, else exit 77 = skipped): creates real
 * sandboxes whose PID 1 is tests/unit/runtime_probe_child.c (argv[1]), reads the report it writes
 * from inside, checks limits from the host side, pause/resume, probe, destroy (nothing left behind:
 * files, mounts, cgroups), idempotence and the rollback of a failed create. Uses its own temp state
 * dir and cgroup name, so it never meets a running corrald or another test.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "runtime/cgroup.h"
#include "runtime/disk.h"
#include "runtime/runtime.h"
#include "shared/fsutil.h"
#include "shared/id.h"

static char state[PATH_MAX], cgname[64];
/* False when the hierarchy offers no cpu/memory/pids controllers: the unified hierarchy of a
 * hybrid host ($CORRAL_CGROUP_ROOT=/sys/fs/cgroup/unified) still tests v2 for real (freeze, kill,
 * events, the cgroup namespace), just not limits. */
static bool limits = true;
static struct runtime_config cfg;
static char report[16384];

static const char *S(const char *id, const char *rel)
{
	static char bufs[8][PATH_MAX];
	static int next;
	char *b = bufs[next++ % 8];
	snprintf(b, PATH_MAX, "%s/sandboxes/%s/%s", state, id, rel);
	return b;
}

static bool exists(const char *p)
{
	struct stat st;
	return lstat(p, &st) == 0;
}

/* The value of key in the report, "" when absent. */
static const char *R(const char *key)
{
	static char bufs[8][1024];
	static int next;
	char *b = bufs[next++ % 8];
	b[0] = '\0';
	size_t n = strlen(key);
	for (const char *line = report; line && *line;) {
		const char *nl = strchr(line, '\n');
		if (strncmp(line, key, n) == 0 && line[n] == '=') {
			size_t len = nl ? (size_t)(nl - line - n - 1) : strlen(line + n + 1);
			snprintf(b, 1024, "%.*s", (int)len, line + n + 1);
			break;
		}
		line = nl ? nl + 1 : NULL;
	}
	return b;
}

static int wait_report(const char *id)
{
	for (int i = 0; i < 5000; i++) {
		if (fs_read_small(S(id, "run/report"), report, sizeof(report)) == 0 ||
		    fs_read_small(S(id, "disk/run/report"), report, sizeof(report)) == 0)
			return 0;
		usleep(1000);
	}
	return -ETIMEDOUT;
}

/* Mounts of this test's state dir in our mount namespace (the host's: a mount a sandbox leaks lands
 * here). Only ours are counted: other processes of the host mount and unmount meanwhile. */
static int count_mounts(void)
{
	char *buf = NULL;
	if (fs_read_file("/proc/self/mountinfo", 1 << 22, &buf, NULL) < 0)
		return -1;
	int n = 0;
	for (char *line = buf, *end; *line; line = end) {
		end = strchr(line, '\n');
		end = end ? end + 1 : line + strlen(line);
		char *hit = memmem(line, (size_t)(end - line), state, strlen(state));
		n += hit != NULL;
	}
	free(buf);
	return n;
}

static bool cgroup_exists(const char *id)
{
	char p[PATH_MAX];
	if (cgroup_detect() == &cgroup_v2_ops)
		snprintf(p, sizeof(p), "%s/%s/%s", cgroup_root(), cgname, id);
	else
		snprintf(p, sizeof(p), "%s/pids/%s/%s", cgroup_root(), cgname, id);
	return exists(p);
}

static const char *cg_file(const char *id, const char *v1ctrl, const char *file)
{
	static char p[PATH_MAX];
	if (cgroup_detect() == &cgroup_v2_ops)
		snprintf(p, sizeof(p), "%s/%s/%s/%s", cgroup_root(), cgname, id, file);
	else
		snprintf(p, sizeof(p), "%s/%s/%s/%s/%s", cgroup_root(), v1ctrl, cgname, id, file);
	return p;
}

/* Whether some slot of the host-wide id-range pool is held by sandbox id of this test. */
static bool slot_held_by(const char *id)
{
	char want[PATH_MAX], held[PATH_MAX], p[PATH_MAX + 32];
	snprintf(want, sizeof(want), "%s/sandboxes/%s", state, id);
	DIR *d = opendir("/run/corral/userns");
	bool found = false;
	for (struct dirent *de; d && !found && (de = readdir(d));) {
		snprintf(p, sizeof(p), "/run/corral/userns/%s", de->d_name);
		found = de->d_name[0] != '.' && fs_read_small(p, held, sizeof(held)) == 0 &&
			strcmp(held, want) == 0;
	}
	if (d)
		closedir(d);
	return found;
}

/* create() and probe() in terms of PID 1 (pid, starttime): the native handle, parsed. */
static int create_pid(const struct runtime_config *c, const struct sandbox_spec *spec, pid_t *pid,
		      uint64_t *start, struct error *err)
{
	struct runtime_handle h = {{0}};
	int r = runtime_native.create(c, spec, &h, err);
	*pid = 0;
	*start = 0;
	if (r == 0)
		CHECK_INT(runtime_native_handle_parse(&h, pid, start), 0);
	return r;
}

static int probe_pid(const struct runtime_config *c, const char *id, pid_t pid, uint64_t start,
		     struct sandbox_probe *pr, struct error *err)
{
	struct runtime_handle h;
	runtime_native_handle(pid, start, &h);
	return runtime_native.probe(c, id, &h, pr, err);
}

/* disk_usage() walks the writable layer (disk/upper, else upper) without following links or
 * crossing mounts; no sandbox needed. */
static void test_disk_usage(void)
{
	char id[UUID_STR_LEN], p[PATH_MAX];
	CHECK_INT(id_uuid4(id), 0);
	CHECK_INT(fs_mkdir_p(S(id, "upper/a"), 0755), 0);
	char *buf = calloc(1, 1 << 20);
	memset(buf, 'x', 1 << 20);
	snprintf(p, sizeof(p), "%s", S(id, "upper/a/f"));
	int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	CHECK(write(fd, buf, 1 << 20) == 1 << 20);
	close(fd);
	free(buf);
	CHECK_INT(symlink("/usr", S(id, "upper/link")), 0); /* never followed */
	struct sandbox_disk_usage du;
	struct error err = {0};
	CHECK_INT(runtime_native.disk_usage(&cfg, id, &du, &err), 0);
	CHECK(du.exact);
	CHECK(du.used_bytes >= (1 << 20) && du.used_bytes < (2 << 20));
	/* A layer on its own file system is disk/upper. */
	CHECK_INT(fs_mkdir_p(S(id, "disk/upper"), 0755), 0);
	CHECK_INT(runtime_native.disk_usage(&cfg, id, &du, &err), 0);
	CHECK(du.used_bytes < (1 << 20));
	CHECK_INT(fs_remove_tree(S(id, "")), 0);
	CHECK_INT(runtime_native.disk_usage(&cfg, id, &du, &err), -ENOENT);
	CHECK_INT(runtime_native.disk_usage(&cfg, "../x", &du, &err), -EINVAL);
}

static void test_host_image(void)
{
	struct sandbox_spec spec = {
	    .host_image = true,
	    .rootfs = "/",
	    .cpu_limit_millis = limits ? 500 : 0,
	    .memory_limit_bytes = limits ? 256 << 20 : 0,
	    .pids_max = limits ? 100 : 0,
	};
	CHECK_INT(id_uuid4(spec.id), 0);
	char hidden[PATH_MAX + 8], secret[PATH_MAX + 8];
	snprintf(hidden, sizeof(hidden), "hidden=%s", state);
	/* A root-only host file outside every masked path: the host image must not give it away. */
	snprintf(secret, sizeof(secret), "secret=/var/tmp/corral-rt-secret-%d", (int)getpid());
	int sfd = open(secret + 7, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	CHECK(sfd >= 0 && write(sfd, "TOPSECRET", 9) == 9);
	close(sfd);
	char *entry[] = {hidden, secret, NULL};
	char foo[] = "FOO=bar";
	char *env[] = {foo, NULL};
	spec.entrypoint = entry;
	spec.env = env;

	int mounts_before = count_mounts();
	int leak = open("/dev/null", O_RDONLY); /* not close-on-exec: must not reach the sandbox */
	pid_t pid = 0;
	uint64_t start = 0;
	struct error err = {0};
	CHECK_INT(create_pid(&cfg, &spec, &pid, &start, &err), 0);
	if (err.code) {
		fprintf(stderr, "create: %s\n", err.msg);
		return;
	}
	CHECK(pid > 1);
	uint64_t st2 = 0;
	CHECK_INT(runtime_pid_starttime(pid, &st2), 0);
	CHECK_U64(st2, start);
	char pidfile[64], want[64];
	CHECK_INT(fs_read_small(S(spec.id, "pid"), pidfile, sizeof(pidfile)), 0);
	snprintf(want, sizeof(want), "%d %" PRIu64, (int)pid, start);
	CHECK_STR(pidfile, want);
	struct stat st;
	/* execd's state dir: sandbox root's (its user namespace's id range), 0700, host side only. */
	CHECK(stat(S(spec.id, "run"), &st) == 0 && (st.st_mode & 07777) == 0700);
	CHECK(st.st_uid >= 0x10000000u && st.st_uid % 65536 == 0);
	char slotbuf[16], slotfile[64];
	CHECK_INT(fs_read_small(S(spec.id, "userns"), slotbuf, sizeof(slotbuf)), 0);
	CHECK_U64((uint64_t)st.st_uid, 0x10000000u + strtoull(slotbuf, NULL, 10) * 65536);
	snprintf(slotfile, sizeof(slotfile), "/run/corral/userns/%s", slotbuf);
	CHECK(exists(slotfile));
	CHECK(stat(S(spec.id, "execd.sock"), &st) == 0 && S_ISSOCK(st.st_mode));
	/* Not our child: the intermediate process exited and PID 1 was reparented. */
	char path[64], statbuf[512];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	CHECK_INT(fs_read_small(path, statbuf, sizeof(statbuf)), 0);
	int ppid = 0;
	sscanf(strrchr(statbuf, ')') + 2, "%*c %d", &ppid);
	CHECK(ppid != getpid());
	/* Every hierarchy it is in, membership-only ones included, is the sandbox's own cgroup (so
	 * PID 1 is no longer in the creator's service unit). */
	char cgpath[64], cgs[2048], want_cg[128];
	snprintf(cgpath, sizeof(cgpath), "/proc/%d/cgroup", (int)pid);
	snprintf(want_cg, sizeof(want_cg), ":/%s/%s", cgname, spec.id);
	CHECK_INT(fs_read_small(cgpath, cgs, sizeof(cgs)), 0);
	if (cgroup_detect() == &cgroup_v1_ops) {
		for (char *line = strtok(cgs, "\n"); line; line = strtok(NULL, "\n")) {
			bool ours = strstr(line, want_cg) != NULL;
			bool expected =
			    strstr(line, ":cpu:") || strstr(line, ":memory:") ||
			    strstr(line, ":pids:") || strstr(line, ":freezer:") ||
			    (strstr(line, "name=systemd") && exists("/sys/fs/cgroup/systemd")) ||
			    (strncmp(line, "0::", 3) == 0 && exists("/sys/fs/cgroup/unified"));
			if (expected && !ours)
				fprintf(stderr, "PID 1 not in its cgroup: %s\n", line);
			CHECK(!expected || ours);
		}
	}
	/* No sandbox mount is visible on the host. */
	CHECK_INT(count_mounts(), mounts_before);

	CHECK_INT(wait_report(spec.id), 0);
	char shortid[13];
	snprintf(shortid, sizeof(shortid), "%.12s", spec.id);
	CHECK_STR(R("pid"), "1");
	CHECK_STR(R("fds"), "6");
	CHECK_STR(R("fd3_socket"), "1");
	close(leak);
	CHECK_STR(R("ppid"), "0");
	CHECK_STR(R("uid"), "0");
	CHECK_STR(R("hostname"), shortid);
	CHECK_STR(R("argv0"), "corral-execd");
	CHECK_STR(R("argv1"), "--listen-fd");
	CHECK_STR(R("argv2"), "3");
	CHECK_STR(R("argv3"), "--state");
	CHECK_STR(R("argv4"), "/proc/self/fd/4/execs");
	CHECK_STR(R("argv5"), "--exit-file");
	CHECK_STR(R("argv6"), "/proc/self/fd/4/exit.json");
	CHECK_STR(R("argv7"), "--");
	CHECK_STR(R("argv8"), hidden);
	CHECK_STR(R("argv9"), secret);
	/* Sandbox root is not host root: a user namespace of its own range, host files not its own,
	 * nothing of execd's in reach, no host path in its mount table. */
	CHECK(strstr(R("uid_map"), "4294967295") == NULL);
	CHECK(strstr(R("uid_map"), "65536") != NULL);
	CHECK_STR(R("secret"), "<errno 13>");
	CHECK_STR(R("root_owner"), "0");
	CHECK_STR(R("usr_owner"), "65534");
	CHECK_STR(R("corral_dir_errno"), "2");
	CHECK_STR(R("mountinfo_names_state"), "0");
	if (strcmp(R("mountinfo_names_state"), "0") != 0)
		fprintf(stderr, "mountinfo: %s\n", R("mountinfo_line"));
	CHECK_STR(R("env_FOO"), "bar");
	CHECK_STR(R("env_HOME"), "/root");
	CHECK(strstr(R("env_PATH"), "/usr/bin") != NULL);
	/* Docker's set less audit_write: chown dac_override fowner fsetid kill setgid setuid
	 * setpcap net_bind_service sys_chroot setfcap. */
	CHECK_STR(R("CapEff"), "00000000800405fb");
	CHECK_STR(R("CapBnd"), "00000000800405fb");
	CHECK_STR(R("CapAmb"), "0000000000000000");
	CHECK_STR(R("NoNewPrivs"), "1");
	CHECK_STR(R("Seccomp"), "2");
	CHECK_STR(R("mount_errno"), "1");
	CHECK_STR(R("unshare_user_errno"), "1");
	CHECK_STR(R("unshare_net_errno"), "1");
	CHECK_STR(R("setns_errno"), "1");
	CHECK_STR(R("clone_newns_errno"), "1");
	CHECK_STR(R("clone_plain_errno"), "0");
	CHECK_STR(R("clone3_errno"), "38");
	CHECK_STR(R("ptrace_errno"), "1");
	CHECK_STR(R("sethostname_errno"), "1");
	CHECK_STR(R("io_uring_errno"), "1");
	CHECK_STR(R("kcmp_errno"), "1");
	CHECK_STR(R("pidfd_getfd_errno"), "1");
	CHECK_STR(R("process_madvise_errno"), "1");
	CHECK_STR(R("process_vm_writev_errno"), "1");
#ifdef __x86_64__
	CHECK_STR(R("modify_ldt_errno"), "1");
#endif
	CHECK_STR(R("personality_query"), "0");
	CHECK_STR(R("personality_linux32_errno"), "0");
	CHECK_STR(R("personality_read_implies_exec_errno"), "1");
	CHECK_STR(R("personality_no_randomize_errno"), "1");
	CHECK_STR(R("personality_high_bits_errno"), "1");
	CHECK_STR(R("personality_after"), "0");
	CHECK_STR(R("vsock_errno"), "97");	       /* EAFNOSUPPORT */
	CHECK_STR(R("vsock_high_bits_errno"), "97");
	CHECK_STR(R("netlink_audit_errno"), "93"); /* EPROTONOSUPPORT */
	CHECK_STR(R("netlink_route_errno"), "0");
	CHECK_STR(R("proc_slabinfo"), "");	       /* /dev/null */
	CHECK_STR(R("proc_vmallocinfo"), "");
	CHECK(strtol(R("sys_block_entries"), NULL, 10) <= 0);
	CHECK(strtol(R("sys_virtual_block_entries"), NULL, 10) <= 0);
	CHECK_STR(R("nofile"), "4000/4000"); /* cfg.nofile, whatever this process has */
#ifdef __x86_64__
	CHECK_STR(R("i386_vsock"), "-97");
	CHECK(strtol(R("i386_socketcall"), NULL, 10) < 0); /* every socketcall(SYS_SOCKET) */
	CHECK_STR(R("i386_personality"), "-1");
	CHECK_STR(R("x32_personality_errno"), "1");
	CHECK_STR(R("i386_mount"), "-1");
	CHECK_STR(R("i386_unshare"), "-1");
#endif
	/* EACCES with a user namespace (its files are host root's), EROFS without. */
	CHECK(strcmp(R("proc_sys_write_errno"), "13") == 0 ||
	      strcmp(R("proc_sys_write_errno"), "30") == 0);
	CHECK_STR(R("sys_mkdir_errno"), "30");
	CHECK_STR(R("tmp_write_errno"), "0");
	CHECK_STR(R("devnull_write"), "1");
	CHECK_STR(R("dev_ptmx"), "1");
	CHECK_STR(R("dev_shm_dir"), "1");
	CHECK_STR(R("etc_shadow"), ""); /* /dev/null */
	CHECK(strcmp(R("proc_kcore"), "") == 0 || strcmp(R("proc_kcore"), "<errno 2>") == 0);
	/* The state dir, with this very sandbox in it: not masked (a mask would name it in the
	 * sandbox's mountinfo), but host root's and 0700, so sandbox root cannot list it. */
	CHECK_STR(R("hidden_entries"), "-13");
	CHECK_STR(R("root_entries"), "0");
	CHECK(strtol(R("home_entries"), NULL, 10) <= 0);
	CHECK_STR(R("etc_hostname"), shortid);
	CHECK(strstr(R("etc_hosts"), shortid) != NULL);
	CHECK(strstr(R("etc_passwd"), "root:x:0:0:") != NULL); /* the rest of the host's /etc */
	CHECK(strstr(R("netdev"), "lo:") != NULL);
	CHECK(strstr(R("netdev"), "eth") == NULL);
	/* Only lo: one "name:" after the two header lines, which hold no ':'. */
	int lines = 0;
	for (const char *p = R("netdev"); *p; p++)
		lines += *p == ':';
	CHECK_INT(lines, 1);
	if (lines != 1)
		fprintf(stderr, "netdev: %s\n", R("netdev"));
	CHECK_STR(R("lo_up"), "1");
	if (cgroup_detect() == &cgroup_v2_ops) {
		if (limits) {
			CHECK_STR(R("v2_memory_max"), "268435456|");
			CHECK_STR(R("v2_pids_max"), "100|");
		}
		CHECK(strstr(R("proc_cgroup"), "0::/|") != NULL);
	} else {
		CHECK_STR(R("v1_memory_limit"), "268435456|");
		CHECK_STR(R("v1_pids_max"), "100|");
		CHECK_STR(R("v1_cpu_quota"), "50000|");
		CHECK(strstr(R("proc_cgroup"), "memory:/|") != NULL);
		CHECK(strstr(R("proc_cgroup"), "pids:/|") != NULL);
	}
	/* -1000 needs CAP_SYS_RESOURCE, which some hosts withhold from root. */
	printf("oom_score_adj inside: %s\n", R("oom_score_adj"));

	/* Host side: the limits and probe. */
	char v[64];
	if (cgroup_detect() == &cgroup_v2_ops) {
		if (limits) {
			CHECK_INT(fs_read_small(cg_file(spec.id, NULL, "cpu.max"), v, sizeof(v)),
				  0);
			CHECK_STR(v, "50000 100000");
		}
	} else {
		CHECK_INT(fs_read_small(cg_file(spec.id, "memory", "memory.limit_in_bytes"), v,
					sizeof(v)),
			  0);
		CHECK_STR(v, "268435456");
		if (exists(cg_file(spec.id, "memory", "memory.memsw.limit_in_bytes"))) {
			CHECK_INT(
			    fs_read_small(cg_file(spec.id, "memory", "memory.memsw.limit_in_bytes"),
					  v, sizeof(v)),
			    0);
			CHECK_STR(v, "268435456");
		}
		CHECK_INT(fs_read_small(cg_file(spec.id, "cpu", "cpu.shares"), v, sizeof(v)), 0);
		CHECK_STR(v, "512");
	}
	struct sandbox_probe pr;
	CHECK_INT(probe_pid(&cfg, spec.id, pid, start, &pr, &err), 0);
	CHECK(pr.alive);
	CHECK(!pr.frozen);
	if (limits) {
		CHECK_U64(pr.memory_limit, 256 << 20);
		CHECK_U64(pr.pids_max, 100);
		CHECK_U64(pr.pids_current, 1);
		CHECK(pr.memory_current > 0);
		CHECK(pr.cpu_usage_ns > 0);
	}
	CHECK_U64(pr.oom_kills, 0);
	CHECK_INT(probe_pid(&cfg, spec.id, pid, start + 1, &pr, &err), 0);
	CHECK(!pr.alive); /* a recycled pid does not pass for PID 1 */
	/* An empty handle (a record from before handles) finds PID 1 through the pid file. */
	struct runtime_handle none = {{0}}, bad = {"1 2 3"};
	CHECK_INT(runtime_native.probe(&cfg, spec.id, &none, &pr, &err), 0);
	CHECK(pr.alive);
	CHECK_INT(runtime_native.probe(&cfg, spec.id, &bad, &pr, &err), 0);
	CHECK(!pr.alive);
	struct runtime_endpoint ep;
	CHECK_INT(runtime_native.endpoint(&cfg, spec.id, &none, &ep, &err), 0);
	CHECK_INT(ep.peer_pid, pid);
	CHECK_STR(ep.path, S(spec.id, "execd.sock"));
	CHECK_INT(runtime_native.endpoint(&cfg, spec.id, NULL, &ep, &err), 0);
	CHECK_INT(ep.peer_pid, 0);
	struct sandbox_disk_usage du;
	CHECK_INT(runtime_native.disk_usage(&cfg, spec.id, &du, &err), 0);
	CHECK(du.exact);
	CHECK(du.used_bytes > 0); /* upper/etc/hostname at least */

	CHECK_INT(runtime_native.pause(&cfg, spec.id, &err), 0);
	bool frozen = false;
	for (int i = 0; i < 1000 && !frozen; i++) {
		probe_pid(&cfg, spec.id, pid, start, &pr, &err);
		frozen = pr.frozen;
		if (!frozen)
			usleep(1000);
	}
	CHECK(frozen);
	CHECK_INT(runtime_native.resume(&cfg, spec.id, &err), 0);
	CHECK_INT(probe_pid(&cfg, spec.id, pid, start, &pr, &err), 0);
	CHECK(!pr.frozen);
	CHECK(pr.alive);

	CHECK_INT(runtime_native.destroy(&cfg, spec.id, &err), 0);
	if (err.code)
		fprintf(stderr, "destroy: %s\n", err.msg);
	CHECK(!exists(S(spec.id, "rootfs")));
	CHECK(!exists(S(spec.id, "upper")));
	CHECK(!exists(S(spec.id, "work")));
	CHECK(!exists(S(spec.id, "run")));
	CHECK(!exists(S(spec.id, "execd.sock")));
	CHECK(!exists(S(spec.id, "userns")));
	CHECK(!exists(slotfile)); /* the id range is back in the pool */
	unlink(secret + 7);
	CHECK(!exists(S(spec.id, "pid")));
	CHECK(!cgroup_exists(spec.id));
	CHECK_INT(count_mounts(), mounts_before);
	CHECK_INT(probe_pid(&cfg, spec.id, pid, start, &pr, &err), 0);
	CHECK(!pr.alive);
	CHECK_INT(runtime_native.destroy(&cfg, spec.id, &err), 0); /* idempotent */
	CHECK_INT(rmdir(S(spec.id, "")), 0);			   /* corrald's part */
}

/* An image directory (here: empty, the static stand-in needs nothing) and a chosen hostname. */
static void test_image_dir(void)
{
	char image[PATH_MAX];
	snprintf(image, sizeof(image), "%s/image", state);
	CHECK_INT(mkdir(image, 0755), 0);
	struct sandbox_spec spec = {.rootfs = image, .hostname = "box1", .oom_group = limits};
	CHECK_INT(id_uuid4(spec.id), 0);
	pid_t pid;
	uint64_t start;
	struct error err = {0};
	CHECK_INT(create_pid(&cfg, &spec, &pid, &start, &err), 0);
	if (err.code) {
		fprintf(stderr, "create: %s\n", err.msg);
		rmdir(S(spec.id, ""));
		rmdir(image);
		return;
	}
	CHECK_INT(wait_report(spec.id), 0);
	CHECK_STR(R("pid"), "1");
	CHECK_STR(R("hostname"), "box1");
	CHECK_STR(R("etc_hostname"), "box1");
	CHECK_STR(R("Seccomp"), "2");
	CHECK_STR(R("etc_shadow"), "<errno 2>");
	CHECK_STR(R("tmp_write_errno"), "0");
	if (cgroup_detect() == &cgroup_v1_ops)
		CHECK_STR(R("v1_pids_max"), "4096|");
	/* The image itself is never written: /etc, /proc... went to the upper layer. */
	CHECK_INT(fs_read_small(S(spec.id, "upper/etc/hostname"), report, sizeof(report)), 0);
	CHECK_STR(report, "box1");
	DIR *d = opendir(image);
	int n = 0;
	for (struct dirent *de; d && (de = readdir(d));)
		n += de->d_name[0] != '.';
	if (d)
		closedir(d);
	CHECK_INT(n, 0);

	/* The watch (an epoll set with the OOM policy where oom_group needs one) stays quiet while
	 * PID 1 runs and turns readable when it ends. */
	struct runtime_handle h;
	runtime_native_handle(pid, start, &h);
	struct runtime_watch *w = NULL;
	int wfd = runtime_native.watch(&cfg, spec.id, &h, spec.oom_group, &w, &err);
	CHECK(wfd >= 0);
	struct runtime_watch_report rep;
	struct pollfd pfd = {.fd = wfd, .events = POLLIN};
	CHECK_INT(poll(&pfd, 1, 0), 0);
	CHECK_INT(runtime_native.watch_check(w, &rep, &err), 0);
	CHECK_INT(rep.events, 0);
	struct runtime_handle stale;
	runtime_native_handle(pid, start + 1, &stale);
	struct runtime_watch *w2 = NULL;
	CHECK_INT(runtime_native.watch(&cfg, spec.id, &stale, false, &w2, &err), -ESRCH);

	/* kill() empties the sandbox without removing anything. */
	CHECK_INT(runtime_native.kill(&cfg, spec.id, &err), 0);
	CHECK_INT(poll(&pfd, 1, 5000), 1);
	CHECK_INT(runtime_native.watch_check(w, &rep, &err), 0);
	CHECK_INT(rep.events, RUNTIME_WATCH_ENDED);
	runtime_native.unwatch(w);
	struct sandbox_probe pr = {.alive = true};
	for (int i = 0; i < 2000 && pr.alive; i++) {
		probe_pid(&cfg, spec.id, pid, start, &pr, &err);
		if (pr.alive)
			usleep(1000);
	}
	CHECK(!pr.alive);
	CHECK(exists(S(spec.id, "upper")));
	CHECK_INT(runtime_native.destroy(&cfg, spec.id, &err), 0);
	CHECK(!exists(S(spec.id, "upper")));
	CHECK(!cgroup_exists(spec.id));
	CHECK_INT(rmdir(S(spec.id, "")), 0);
	CHECK_INT(rmdir(image), 0);
}

/* An image whose /etc is a symlink (to usr/etc): the generated files go through the overlay into
 * the link's target, and the image's own /etc content stays visible. */
static void test_image_etc_symlink(void)
{
	char image[PATH_MAX], p[PATH_MAX + 32];
	snprintf(image, sizeof(image), "%s/image2", state);
	CHECK_INT(mkdir(image, 0755), 0);
	snprintf(p, sizeof(p), "%s/usr", image);
	CHECK_INT(mkdir(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/usr/etc", image);
	CHECK_INT(mkdir(p, 0755), 0);
	snprintf(p, sizeof(p), "%s/usr/etc/marker", image);
	int fd = open(p, O_WRONLY | O_CREAT, 0644);
	CHECK(fd >= 0 && write(fd, "image", 5) == 5);
	close(fd);
	snprintf(p, sizeof(p), "%s/etc", image);
	CHECK_INT(symlink("usr/etc", p), 0);
	struct sandbox_spec spec = {.rootfs = image, .hostname = "box2"};
	CHECK_INT(id_uuid4(spec.id), 0);
	pid_t pid;
	uint64_t start;
	struct error err = {0};
	CHECK_INT(create_pid(&cfg, &spec, &pid, &start, &err), 0);
	if (err.code == 0) {
		CHECK_INT(wait_report(spec.id), 0);
		CHECK_STR(R("etc_marker"), "image");
		CHECK_STR(R("etc_hostname"), "box2");
		CHECK_INT(runtime_native.destroy(&cfg, spec.id, &err), 0);
	} else {
		fprintf(stderr, "create: %s\n", err.msg);
	}
	rmdir(S(spec.id, ""));
	snprintf(p, sizeof(p), "%s/etc", image);
	unlink(p);
	snprintf(p, sizeof(p), "%s/usr/etc/marker", image);
	unlink(p);
	snprintf(p, sizeof(p), "%s/usr/etc", image);
	rmdir(p);
	snprintf(p, sizeof(p), "%s/usr", image);
	rmdir(p);
	CHECK_INT(rmdir(image), 0);
}

/* Host image with the state dir given through a symlink: unreadable with a user namespace; without
 * one (--no-userns) the mask follows the link. */
static void test_symlinked_state_dir(bool no_userns)
{
	char link[PATH_MAX + 8], hidden[PATH_MAX + 16];
	snprintf(link, sizeof(link), "%s-link", state);
	CHECK_INT(symlink(state, link), 0);
	struct runtime_config lcfg = cfg;
	lcfg.state_dir = link;
	lcfg.no_userns = no_userns;
	struct sandbox_spec spec = {.host_image = true, .rootfs = "/"};
	CHECK_INT(id_uuid4(spec.id), 0);
	snprintf(hidden, sizeof(hidden), "hidden=%s", state);
	char *entry[] = {hidden, NULL};
	spec.entrypoint = entry;
	pid_t pid;
	uint64_t start;
	struct error err = {0};
	CHECK_INT(create_pid(&lcfg, &spec, &pid, &start, &err), 0);
	if (err.code == 0) {
		CHECK_INT(wait_report(spec.id), 0);
		CHECK_STR(R("hidden_entries"), no_userns ? "0" : "-13");
		CHECK_STR(R("uid_map"), no_userns ? "         0          0 4294967295|" : R("uid_map"));
		CHECK_INT(runtime_native.destroy(&lcfg, spec.id, &err), 0);
		CHECK(!cgroup_exists(spec.id));
		CHECK_INT(rmdir(S(spec.id, "")), 0);
	} else {
		fprintf(stderr, "create: %s\n", err.msg);
	}
	CHECK_INT(unlink(link), 0);
}

/* A failing create reports a precise message and rolls itself back. */
static void test_failed_create(void)
{
	struct sandbox_spec spec = {.rootfs = "/nonexistent-corral-image"};
	CHECK_INT(id_uuid4(spec.id), 0);
	pid_t pid;
	uint64_t start;
	struct error err = {0};
	int r = create_pid(&cfg, &spec, &pid, &start, &err);
	CHECK_INT(r, -ENOENT);
	CHECK(strstr(err.msg, "/nonexistent-corral-image") != NULL);
	printf("failed create says: %s\n", err.msg);
	CHECK(!slot_held_by(spec.id)); /* the id range went back with the rest */
	CHECK(!exists(S(spec.id, "rootfs")));
	CHECK(!exists(S(spec.id, "upper")));
	CHECK(!exists(S(spec.id, "run")));
	CHECK(!cgroup_exists(spec.id));
	rmdir(S(spec.id, ""));

	/* A failure inside PID 1's setup, after the overlay and cgroup exist: rolled back too. */
	char image[PATH_MAX], proc[PATH_MAX + 8];
	snprintf(image, sizeof(image), "%s/badimage", state);
	CHECK_INT(mkdir(image, 0755), 0);
	snprintf(proc, sizeof(proc), "%s/proc", image);
	int fd = open(proc, O_WRONLY | O_CREAT, 0644);
	CHECK(fd >= 0);
	close(fd);
	struct sandbox_spec bs = {.rootfs = image};
	CHECK_INT(id_uuid4(bs.id), 0);
	error_clear(&err);
	int mounts_bad = count_mounts();
	CHECK_INT(create_pid(&cfg, &bs, &pid, &start, &err), -ENOTDIR);
	CHECK_STR(err.msg, "image path '/proc' is not a directory");
	CHECK(!exists(S(bs.id, "upper")));
	CHECK(!exists(S(bs.id, "run")));
	CHECK(!cgroup_exists(bs.id));
	CHECK_INT(count_mounts(), mounts_bad);
	rmdir(S(bs.id, ""));
	unlink(proc);
	CHECK_INT(rmdir(image), 0);

	struct runtime_config bad = cfg;
	bad.execd_path = "/nonexistent/corral-execd";
	error_clear(&err);
	CHECK_INT(create_pid(&bad, &spec, &pid, &start, &err), -ENOENT);
	CHECK(strstr(err.msg, "/nonexistent/corral-execd") != NULL);
	snprintf(spec.id, sizeof(spec.id), "../evil");
	CHECK_INT(create_pid(&cfg, &spec, &pid, &start, &err), -EINVAL);
	CHECK_INT(runtime_native.destroy(&cfg, "../evil", &err), -EINVAL);
}

/* The loop device mounted on path in our mount namespace ("loop3"), "" when none. */
static const char *loop_at(const char *path)
{
	static char dev[64];
	char *buf = NULL;
	dev[0] = '\0';
	if (fs_read_file("/proc/self/mountinfo", 1 << 22, &buf, NULL) < 0)
		return dev;
	for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
		char mp[PATH_MAX], src[PATH_MAX];
		char *sep = strstr(line, " - ");
		if (sep && sscanf(line, "%*s %*s %*s %*s %4095s", mp) == 1 && strcmp(mp, path) == 0 &&
		    sscanf(sep + 3, "%*s %4095s", src) == 1 && strncmp(src, "/dev/", 5) == 0)
			snprintf(dev, sizeof(dev), "%s", src + 5);
	}
	free(buf);
	return dev;
}

static const char *loop_backing(const char *dev)
{
	static char b[PATH_MAX];
	char p[128];
	snprintf(p, sizeof(p), "/sys/block/%s/loop/backing_file", dev);
	if (fs_read_small(p, b, sizeof(b)) < 0)
		b[0] = '\0';
	return b;
}

static int count_templates(void)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/disks", state);
	DIR *d = opendir(p);
	int n = 0;
	for (struct dirent *e; d && (e = readdir(d));)
		n += strncmp(e->d_name, "ext4-", 5) == 0;
	if (d)
		closedir(d);
	return n;
}

/* An ephemeral-storage limit: the layer on an unnamed loop image made from a template. */
static void test_disk(void)
{
	const uint64_t size = 64ULL << 20;
	struct sandbox_spec spec = {.host_image = true, .rootfs = "/", .disk_limit_bytes = size};
	CHECK_INT(id_uuid4(spec.id), 0);
	int mounts_before = count_mounts();
	pid_t pid = 0;
	uint64_t start = 0;
	struct error err = {0};
	CHECK_INT(create_pid(&cfg, &spec, &pid, &start, &err), 0);
	if (err.code) {
		fprintf(stderr, "create with a disk: %s\n", err.msg);
		return;
	}
	CHECK_INT(wait_report(spec.id), 0);
	char mnt[PATH_MAX], tmpl[PATH_MAX];
	snprintf(mnt, sizeof(mnt), "%s", S(spec.id, "disk"));
	char dev[64];
	snprintf(dev, sizeof(dev), "%s", loop_at(mnt));
	CHECK(strncmp(dev, "loop", 4) == 0);
	/* The device is exactly the limit; its backing file names neither the sandbox nor the state
	 * dir, and no image file is left in the sandbox dir. */
	char v[64], backing[PATH_MAX], p[128];
	snprintf(p, sizeof(p), "/sys/block/%s/size", dev);
	CHECK_INT(fs_read_small(p, v, sizeof(v)), 0);
	CHECK_U64(strtoull(v, NULL, 10) * 512, size);
	snprintf(backing, sizeof(backing), "%s", loop_backing(dev));
	printf("disk backing file: %s\n", backing);
	CHECK(backing[0] == '/');
	CHECK(strstr(backing, spec.id) == NULL);
	CHECK(strstr(backing, state) == NULL);
	CHECK(strstr(backing, "(deleted)") != NULL);
	CHECK(!exists(S(spec.id, "disk.img")));
	CHECK(!exists(S(spec.id, "upper")));
	struct stat st;
	CHECK(stat(S(spec.id, "disk/upper"), &st) == 0 && (st.st_mode & 07777) == 0755);
	CHECK(stat(S(spec.id, "disk/work"), &st) == 0 && (st.st_mode & 07777) == 0700);
	/* execd's state is inside the disk too, so it counts against the limit. */
	CHECK(stat(S(spec.id, "disk/run"), &st) == 0 && (st.st_mode & 07777) == 0700 &&
	      st.st_uid >= 0x10000000u);
	snprintf(tmpl, sizeof(tmpl), "%s/disks/" DISK_TEMPLATE_PREFIX "%" PRIu64 ".img", state, size);
	CHECK(stat(tmpl, &st) == 0 && (uint64_t)st.st_size == size && st.st_blocks * 512 < (1 << 20));

	CHECK_INT(runtime_native.destroy(&cfg, spec.id, &err), 0);
	CHECK(!exists(S(spec.id, "disk")));
	CHECK_INT(count_mounts(), mounts_before);
	/* autoclear: the device lets go of the image once the sandbox's namespace is gone too. */
	bool released = false;
	for (int i = 0; i < 5000 && !released; i++) {
		released = strcmp(loop_backing(dev), backing) != 0;
		if (!released)
			usleep(1000);
	}
	CHECK(released);
	CHECK_INT(rmdir(S(spec.id, "")), 0);

	/* disk_discard leaves anything but a loop-mounted ext4 alone: here disk/ is a plain
	 * directory of the state fs, which must stay writable. */
	char plain[PATH_MAX], probe[PATH_MAX + 8];
	snprintf(plain, sizeof(plain), "%s/plain", state);
	snprintf(probe, sizeof(probe), "%s/disk", plain);
	CHECK_INT(fs_mkdir_p(probe, 0700), 0);
	disk_discard(plain);
	snprintf(probe, sizeof(probe), "%s/disk/f", plain);
	CHECK_INT(fs_write_atomic(probe, "x", 1, 0600), 0);
	CHECK_INT(fs_remove_tree(plain), 0);

	/* A damaged template (wrong size: a torn copy by hand, a disk error) is made again. */
	CHECK_INT(truncate(tmpl, (off_t)size / 2), 0);
	CHECK_INT(id_uuid4(spec.id), 0);
	error_clear(&err);
	CHECK_INT(create_pid(&cfg, &spec, &pid, &start, &err), 0);
	CHECK(stat(tmpl, &st) == 0 && (uint64_t)st.st_size == size);
	CHECK_INT(runtime_native.destroy(&cfg, spec.id, &err), 0);
	CHECK_INT(rmdir(S(spec.id, "")), 0);

	/* disk_prepare: below the minimum refused; templates of many sizes trimmed to a few, those
	 * of an older format removed. */
	CHECK_INT(runtime_native.disk_prepare(&cfg, 4ULL << 20, &err), -EINVAL);
	char old[PATH_MAX];
	snprintf(old, sizeof(old), "%s/disks/ext4-v1-%" PRIu64 ".img", state, size);
	CHECK_INT(fs_write_atomic(old, "x", 1, 0600), 0);
	for (int i = 0; i < 12; i++)
		CHECK_INT(runtime_native.disk_prepare(&cfg, (16ULL + (uint64_t)i) << 20, &err), 0);
	CHECK(count_templates() <= 8);
	CHECK(!exists(old));
	char disks[PATH_MAX];
	snprintf(disks, sizeof(disks), "%s/disks", state);
	CHECK_INT(fs_remove_tree(disks), 0);
}

static void remove_parent_cgroups(void)
{
	static const char *const v1[] = {"cpu",	    "cpuacct", "memory",  "pids",
					 "freezer", "systemd", "unified", "cpuset"};
	char p[PATH_MAX];
	if (cgroup_detect() == &cgroup_v2_ops) {
		snprintf(p, sizeof(p), "%s/%s", cgroup_root(), cgname);
		CHECK(rmdir(p) == 0 || errno == ENOENT);
		return;
	}
	for (size_t i = 0; i < sizeof(v1) / sizeof(v1[0]); i++) {
		snprintf(p, sizeof(p), "%s/%s/%s", cgroup_root(), v1[i], cgname);
		CHECK(rmdir(p) == 0 || errno == ENOENT);
	}
}

int main(int argc, char **argv)
{
	if (geteuid() != 0) {
		printf("runtime_native: skipped (needs root)\n");
		return 77;
	}
	if (argc < 2) {
		fprintf(stderr, "usage: %s PROBE-CHILD\n", argv[0]);
		return 2;
	}
	/* Not under /tmp: every sandbox gets its own /tmp, which would hide the state dir anyway.
	 */
	snprintf(state, sizeof(state), "/var/tmp/corral-rt-XXXXXX");
	if (!mkdtemp(state))
		return 2;
	snprintf(cgname, sizeof(cgname), "corral-rt-test-%d", (int)getpid());
	cfg = (struct runtime_config){
	    .state_dir = state, .execd_path = argv[1], .cgroup_name = cgname, .nofile = 4000};
	printf("cgroup manager: %s at %s\n", cgroup_detect() ? cgroup_detect()->name : "none",
	       cgroup_root());
	if (cgroup_detect() == &cgroup_v2_ops) {
		char ctrls[512] = "", p2[PATH_MAX];
		snprintf(p2, sizeof(p2), "%s/cgroup.controllers", cgroup_root());
		fs_read_small(p2, ctrls, sizeof(ctrls));
		limits = strstr(ctrls, "memory") && strstr(ctrls, "cpu") && strstr(ctrls, "pids");
		if (!limits)
			printf("no cpu/memory/pids controllers here: limits not tested\n");
	}

	struct error perr = {0};
	CHECK_INT(runtime_native.prepare(&cfg, &perr), 0);
	test_host_image();
	test_image_dir();
	test_symlinked_state_dir(false);
	test_symlinked_state_dir(true);
	test_image_etc_symlink();
	test_failed_create();
	test_disk();
	test_disk_usage();

	remove_parent_cgroups();
	rmdir(S("", "")); /* <state>/sandboxes */
	char p[PATH_MAX + 16];
	snprintf(p, sizeof(p), "%s/sandboxes", state);
	rmdir(p);
	CHECK_INT(rmdir(state), 0);
	return check_summary("runtime_native");
}
