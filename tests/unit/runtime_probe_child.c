/*
 * Stand-in for corral-execd in test_runtime_native: runs as the sandbox's PID 1, looks at what it
 * can see from inside, writes "key=value" lines to report (tmp + rename) in its state dir (fd 4), then waits to be
 * killed. Statically linked, so it runs in an empty image. Arguments after "--" may include
 * "hidden=PATH": report how many entries PATH has as seen from inside (masked state dir: 0).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <linux/netlink.h>
#include <sys/personality.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static FILE *out;

static void status_field(const char *key)
{
	char line[256];
	FILE *f = fopen("/proc/self/status", "r");
	if (!f)
		return;
	size_t n = strlen(key);
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, key, n) == 0 && line[n] == ':') {
			char *v = line + n + 1;
			while (*v == ' ' || *v == '\t')
				v++;
			v[strcspn(v, "\n")] = '\0';
			fprintf(out, "%s=%s\n", key, v);
		}
	fclose(f);
}

static void file_field(const char *key, const char *path)
{
	char buf[512] = "";
	int fd = open(path, O_RDONLY);
	if (fd < 0) {
		fprintf(out, "%s=<errno %d>\n", key, errno);
		return;
	}
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	for (char *p = buf; *p; p++)
		if (*p == '\n')
			*p = '|';
	fprintf(out, "%s=%s\n", key, buf);
}

static int count_entries(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return -errno;
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d)))
		if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

static int err_of(long r)
{
	return r < 0 ? errno : 0;
}

int main(int argc, char **argv)
{
	/* 0, 1, 2, execd's socket (3) and state dir (4), and the directory's own fd */
	int fds = count_entries("/proc/self/fd");
	out = fopen("/proc/self/fd/4/report.tmp", "w");
	if (!out)
		return 1;
	char host[128] = "";
	gethostname(host, sizeof(host));
	fprintf(out, "fds=%d\n", fds);
	fprintf(out, "pid=%d\nppid=%d\nuid=%d\nhostname=%s\n", getpid(), getppid(), getuid(), host);
	for (int i = 0; i < argc; i++)
		fprintf(out, "argv%d=%s\n", i, argv[i]);
	fprintf(out, "env_PATH=%s\nenv_HOME=%s\nenv_FOO=%s\n", getenv("PATH") ?: "",
		getenv("HOME") ?: "", getenv("FOO") ?: "");
	status_field("CapEff");
	status_field("CapBnd");
	status_field("CapAmb");
	status_field("NoNewPrivs");
	status_field("Seccomp");
	file_field("oom_score_adj", "/proc/self/oom_score_adj");
	file_field("proc_cgroup", "/proc/self/cgroup");
	file_field("etc_hostname", "/etc/hostname");
	file_field("etc_hosts", "/etc/hosts");
	file_field("etc_shadow", "/etc/shadow");
	file_field("etc_marker", "/etc/marker");
	file_field("etc_passwd", "/etc/passwd");
	file_field("proc_kcore", "/proc/kcore");
	file_field("v1_memory_limit", "/sys/fs/cgroup/memory/memory.limit_in_bytes");
	file_field("v1_pids_max", "/sys/fs/cgroup/pids/pids.max");
	file_field("v1_cpu_quota", "/sys/fs/cgroup/cpu/cpu.cfs_quota_us");
	file_field("v2_memory_max", "/sys/fs/cgroup/memory.max");
	file_field("v2_pids_max", "/sys/fs/cgroup/pids.max");
	file_field("netdev", "/proc/net/dev");

	fprintf(out, "mount_errno=%d\n", err_of(mount("tmpfs", "/mnt", "tmpfs", 0, NULL)));
	fprintf(out, "unshare_user_errno=%d\n", err_of(unshare(CLONE_NEWUSER)));
	fprintf(out, "unshare_net_errno=%d\n", err_of(unshare(CLONE_NEWNET)));
	fprintf(out, "setns_errno=%d\n", err_of(setns(0, 0)));
	long c = syscall(SYS_clone, (long)(CLONE_NEWNS | SIGCHLD), 0L, 0L, 0L, 0L);
	if (c == 0)
		_exit(0);
	if (c > 0)
		waitpid((pid_t)c, NULL, 0);
	fprintf(out, "clone_newns_errno=%d\n", c < 0 ? errno : 0);
	c = syscall(SYS_clone, (long)SIGCHLD, 0L, 0L, 0L, 0L);
	if (c == 0)
		_exit(0);
	if (c > 0)
		waitpid((pid_t)c, NULL, 0);
	fprintf(out, "clone_plain_errno=%d\n", c < 0 ? errno : 0);
	char args[88] = {0};
	fprintf(out, "clone3_errno=%d\n", err_of(syscall(SYS_clone3, args, sizeof(args))));
	fprintf(out, "ptrace_errno=%d\n", err_of(syscall(SYS_ptrace, 0L, 0L, 0L, 0L)));
	fprintf(out, "sethostname_errno=%d\n", err_of(sethostname("x", 1)));
	fprintf(out, "io_uring_errno=%d\n", err_of(syscall(SYS_io_uring_setup, 1L, 0L)));
#ifdef __x86_64__
	long r32;
#endif
	fprintf(out, "kcmp_errno=%d\n", err_of(syscall(SYS_kcmp, 1L, 1L, 0L, 0L, 0L)));
	fprintf(out, "pidfd_getfd_errno=%d\n", err_of(syscall(SYS_pidfd_getfd, 0L, 0L, 0L)));
	fprintf(out, "process_madvise_errno=%d\n",
		err_of(syscall(SYS_process_madvise, 0L, 0L, 0L, 0L, 0L)));
	fprintf(out, "process_vm_writev_errno=%d\n",
		err_of(syscall(SYS_process_vm_writev, 1L, 0L, 0L, 0L, 0L, 0L)));
#ifdef SYS_modify_ldt
	fprintf(out, "modify_ldt_errno=%d\n", err_of(syscall(SYS_modify_ldt, 0L, 0L, 0L)));
#endif
	/* personality: the allowed ones work (and are undone), the rest are refused */
	long persona = syscall(SYS_personality, 0xffffffffL);
	fprintf(out, "personality_query=%ld\n", persona);
	fprintf(out, "personality_linux32_errno=%d\n", err_of(syscall(SYS_personality, 8L)));
	fprintf(out, "personality_read_implies_exec_errno=%d\n",
		err_of(syscall(SYS_personality, (long)READ_IMPLIES_EXEC)));
	fprintf(out, "personality_no_randomize_errno=%d\n",
		err_of(syscall(SYS_personality, (long)ADDR_NO_RANDOMIZE)));
	fprintf(out, "personality_high_bits_errno=%d\n",
		err_of(syscall(SYS_personality, 0x100000000L | READ_IMPLIES_EXEC)));
#ifdef __x86_64__
	/* The x32 ABI's personality (0x40000000 | 135): refused whether or not the kernel has x32. */
	fprintf(out, "x32_personality_errno=%d\n",
		err_of(syscall(0x40000000L | 135, (long)READ_IMPLIES_EXEC)));
#endif
	syscall(SYS_personality, 0L);
	fprintf(out, "personality_after=%ld\n", syscall(SYS_personality, 0xffffffffL));
	fprintf(out, "vsock_errno=%d\n", err_of(socket(40 /* AF_VSOCK */, SOCK_STREAM, 0)));
	fprintf(out, "vsock_high_bits_errno=%d\n",
		err_of(syscall(SYS_socket, 0x100000000L | 40, (long)SOCK_STREAM, 0L)));
	fprintf(out, "netlink_audit_errno=%d\n",
		err_of(socket(AF_NETLINK, SOCK_RAW, NETLINK_AUDIT)));
	fprintf(out, "netlink_route_errno=%d\n",
		err_of(socket(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE)));
	struct rlimit rl;
	getrlimit(RLIMIT_NOFILE, &rl);
	fprintf(out, "nofile=%llu/%llu\n", (unsigned long long)rl.rlim_cur,
		(unsigned long long)rl.rlim_max);
	file_field("proc_slabinfo", "/proc/slabinfo");
	file_field("proc_vmallocinfo", "/proc/vmallocinfo");
	fprintf(out, "sys_block_entries=%d\n", count_entries("/sys/block"));
	fprintf(out, "sys_virtual_block_entries=%d\n", count_entries("/sys/devices/virtual/block"));
#ifdef __x86_64__
	/* The 32-bit ABI: i386 socket(AF_VSOCK) (359), socketcall(SYS_SOCKET) (102), personality
	 * (136) with READ_IMPLIES_EXEC. */
	__asm__ volatile("int $0x80"
			 : "=a"(r32)
			 : "a"(359L), "b"(40L), "c"((long)SOCK_STREAM), "d"(0L)
			 : "memory");
	fprintf(out, "i386_vsock=%ld\n", r32);
	__asm__ volatile("int $0x80" : "=a"(r32) : "a"(102L), "b"(1L), "c"(0L) : "memory");
	fprintf(out, "i386_socketcall=%ld\n", r32);
	__asm__ volatile("int $0x80" : "=a"(r32) : "a"(136L), "b"((long)READ_IMPLIES_EXEC) : "memory");
	fprintf(out, "i386_personality=%ld\n", r32);
#endif
#ifdef __x86_64__
	/* The 32-bit ABI from a 64-bit process: i386 mount (21) and unshare (310). */
	__asm__ volatile("int $0x80" : "=a"(r32) : "a"(21L), "b"(0L), "c"(0L), "d"(0L) : "memory");
	fprintf(out, "i386_mount=%ld\n", r32);
	__asm__ volatile("int $0x80" : "=a"(r32) : "a"(310L), "b"((long)CLONE_NEWUSER) : "memory");
	fprintf(out, "i386_unshare=%ld\n", r32);
#endif

	int fd = open("/proc/sys/kernel/hostname", O_WRONLY);
	fprintf(out, "proc_sys_write_errno=%d\n", fd < 0 ? errno : 0);
	fprintf(out, "sys_mkdir_errno=%d\n", err_of(mkdir("/sys/corral-x", 0755)));
	struct stat st;
	fprintf(out, "fd3_socket=%d\n", fstat(3, &st) == 0 && S_ISSOCK(st.st_mode));
	fprintf(out, "corral_dir_errno=%d\n", err_of(lstat("/.corral", &st)));
	fprintf(out, "root_owner=%d\n", stat("/", &st) == 0 ? (int)st.st_uid : -1);
	fprintf(out, "usr_owner=%d\n", stat("/usr", &st) == 0 ? (int)st.st_uid : -1);
	file_field("uid_map", "/proc/self/uid_map");

	fd = open("/tmp/probe", O_WRONLY | O_CREAT, 0644);
	fprintf(out, "tmp_write_errno=%d\n", fd < 0 ? errno : 0);
	fd = open("/dev/null", O_WRONLY);
	fprintf(out, "devnull_write=%zd\n", fd < 0 ? -1 : write(fd, "x", 1));
	fprintf(out, "dev_ptmx=%d\n", lstat("/dev/ptmx", &st) == 0);
	fprintf(out, "dev_shm_dir=%d\n", stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode));
	fprintf(out, "root_entries=%d\n", count_entries("/root"));
	fprintf(out, "home_entries=%d\n", count_entries("/home"));
	fprintf(out, "dev_entries=%d\n", count_entries("/dev"));

	struct ifreq ifr = {0};
	int s = socket(AF_INET, SOCK_DGRAM, 0);
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	fprintf(out, "lo_up=%d\n",
		s >= 0 && ioctl(s, SIOCGIFFLAGS, &ifr) == 0 && (ifr.ifr_flags & IFF_UP));

	for (int i = 1; i < argc; i++)
		if (strncmp(argv[i], "hidden=", 7) == 0) {
			fprintf(out, "hidden_entries=%d\n", count_entries(argv[i] + 7));
			/* Does any mount of the sandbox name the host's state dir? */
			static char mi[1 << 16];
			int mfd = open("/proc/self/mountinfo", O_RDONLY);
			ssize_t n = mfd < 0 ? -1 : read(mfd, mi, sizeof(mi) - 1);
			mi[n > 0 ? n : 0] = '\0';
			char *hit = strstr(mi, argv[i] + 7);
			if (!hit)
				hit = strstr(mi, "sandboxes");
			fprintf(out, "mountinfo_names_state=%d\n", hit != NULL);
			if (hit) {
				char *line = hit;
				while (line > mi && line[-1] != '\n')
					line--;
				fprintf(out, "mountinfo_line=%.*s\n", (int)strcspn(line, "\n"), line);
			}
		}
		else if (strncmp(argv[i], "secret=", 7) == 0)
			file_field("secret", argv[i] + 7);
	fclose(out);
	rename("/proc/self/fd/4/report.tmp", "/proc/self/fd/4/report");
	for (;;)
		pause();
}
