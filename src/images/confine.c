/*
 * The layer child's confinement (images.h image_confine()), and the manifest child's.
 *
 * A layer child (and the manifest child, which talks to the registry for the manifest and the
 * config) parses what a registry sends (HTTP, TLS, gzip, zstd, tar) as host root: a bug in
 * libcurl, OpenSSL, a decompressor, libarchive or our own path handling would otherwise be a host
 * compromise. After image_confine() such a bug can write beneath its work directory and little
 * else. Each layer is best effort: what the kernel lacks is skipped and reported in the level, the
 * pull goes on (corrald logs the level once, at start, from image_confine_probe()).
 *
 *   mount view  a mount namespace of its own (slave of the host's, so host unmounts reach it) where
 *               every mount is read-only and nodev but a bind of the work directory (writable,
 *               nodev, nosuid, noexec): no chmod, chown, utimes or setuid bit on any other file,
 *               which Landlock does not cover, and no device opens, the host's or one the child
 *               makes (it keeps CAP_MKNOD for the image's own nodes).
 *   Landlock    writes only beneath the work directory; reads only of the libraries, the TLS and
 *               resolver files and (an import) the image layout; with ABI >= 4 TCP connect only to
 *               the given ports and no bind; with ABI >= 6 no signals or abstract unix sockets out
 *               of the child.
 *   rlimits     RLIMIT_FSIZE, RLIMIT_NOFILE, no core files; and not dumpable: children of two
 *               pulls run as the same uid with the same capabilities, so without Landlock (whose
 *               domains keep siblings apart) a compromised child of one pull could read another's
 *               memory and environment, its credentials, through /proc/<pid>/mem and environ.
 *   caps        what unpacking keeps of an image (owners, modes with setuid bits, device nodes,
 *               file capabilities): CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_FSETID,
 *               CAP_MKNOD, CAP_SETFCAP; nothing else, in no set, and no_new_privs. The manifest
 *               child and the parsing children (store.c meta_child(), parse_confined()), which
 *               unpack nothing, keep none at all.
 *   terminal    none: a session of its own (setsid), /dev/null for stdin and for a stdout or
 *               stderr that is a terminal (the operator's, under `make run`).
 *   seccomp     a deny list: mounts, namespaces, ptrace and other processes' memory, kernel
 *               modules, kexec, bpf, keys, perf, userfaultfd, io_uring, new processes (threads
 *               only), sockets other than IPv4, IPv6 and NETLINK_ROUTE. Without the mount view,
 *               also block and character devices (whiteouts, 0/0, are still made).
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/netlink.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "images/images.h"
#include "shared/macro.h"

/* Landlock beyond the 6.1 headers Debian 12 ships (the kernel decides what it knows). */
#define LL_FS_REFER (1ULL << 13)
#define LL_FS_TRUNCATE (1ULL << 14)
#define LL_FS_IOCTL_DEV (1ULL << 15)
#define LL_NET_BIND_TCP (1ULL << 0)
#define LL_NET_CONNECT_TCP (1ULL << 1)
#define LL_SCOPE_ABSTRACT_UNIX (1ULL << 0)
#define LL_SCOPE_SIGNAL (1ULL << 1)
#define LL_RULE_PATH_BENEATH 1
#define LL_RULE_NET_PORT 2
#define LL_CREATE_RULESET_VERSION (1U << 0)

struct ll_ruleset_attr {
	uint64_t handled_access_fs;
	uint64_t handled_access_net; /* ABI 4 */
	uint64_t scoped;             /* ABI 6 */
};

struct ll_path_beneath_attr {
	uint64_t allowed_access;
	int32_t parent_fd;
} __attribute__((packed));

struct ll_net_port_attr {
	uint64_t allowed_access;
	uint64_t port;
};

/* The ABI 1 rights: execute, write, read, read_dir, remove_dir, remove_file, make_{char, dir,
 * reg, sock, fifo, block, sym}. */
#define LL_FS_ABI1 ((1ULL << 13) - 1)
#define LL_FS_EXECUTE (1ULL << 0)
#define LL_FS_WRITE_FILE (1ULL << 1)
#define LL_FS_READ_FILE (1ULL << 2)
#define LL_FS_READ_DIR (1ULL << 3)
/* Rights a rule on a file (not a directory) may carry. */
#define LL_FS_FILE_RIGHTS (LL_FS_EXECUTE | LL_FS_WRITE_FILE | LL_FS_READ_FILE | LL_FS_TRUNCATE | LL_FS_IOCTL_DEV)

/* mount_setattr(2), beside <sys/mount.h> (glibc 2.36's clashes with <linux/mount.h>). */
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
#define MNT_ATTR_RDONLY 0x1ULL
#define MNT_ATTR_NOSUID 0x2ULL
#define MNT_ATTR_NODEV 0x4ULL
#define MNT_ATTR_NOEXEC 0x8ULL
struct mnt_attr {
	uint64_t attr_set, attr_clr, propagation, userns_fd;
};

/* What a layer child may read besides its work directory: the loader and the libraries (libcurl
 * and OpenSSL load modules lazily, glibc its NSS modules), the CA certificates and the resolver's
 * files. Not /etc as a whole (shadow, ssh host keys, the operator's credentials file). Missing
 * paths are skipped. */
static const char *const read_paths[] = {
    "/usr", "/lib", "/lib64", "/lib32", "/libx32",
    "/etc/ssl", "/etc/pki", "/etc/ca-certificates", "/etc/crypto-policies",
    "/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/host.conf", "/etc/gai.conf",
    "/etc/services", "/etc/protocols", "/etc/ld.so.cache", "/etc/localtime",
    "/dev/urandom", "/dev/random", "/sys/devices/system/cpu",
};

static const int keep_caps[] = {CAP_CHOWN,  CAP_DAC_OVERRIDE, CAP_FOWNER,
				CAP_FSETID, CAP_MKNOD,	      CAP_SETFCAP};

static int ll_abi(void)
{
	long v = syscall(SYS_landlock_create_ruleset, NULL, 0, LL_CREATE_RULESET_VERSION);
	return v < 0 ? 0 : (int)v;
}

static uint64_t ll_fs_rights(int abi)
{
	uint64_t r = LL_FS_ABI1;
	if (abi >= 2)
		r |= LL_FS_REFER;
	if (abi >= 3)
		r |= LL_FS_TRUNCATE;
	if (abi >= 5)
		r |= LL_FS_IOCTL_DEV;
	return r;
}

unsigned image_confine_probe(void)
{
	unsigned l = IMAGE_CONFINED_RLIMITS | IMAGE_CONFINED_CAPS | IMAGE_CONFINED_SECCOMP |
		     IMAGE_CONFINED_MOUNTS;
	int abi = ll_abi();
	if (abi >= 2) /* ABI 1 forbids every rename and link across directories: unusable */
		l |= IMAGE_CONFINED_LANDLOCK_FS;
	if (abi >= 4)
		l |= IMAGE_CONFINED_LANDLOCK_NET;
	if (abi >= 6)
		l |= IMAGE_CONFINED_LANDLOCK_SCOPE;
	return l;
}

const char *image_confine_describe(unsigned level, char *buf, size_t len)
{
	static const struct {
		unsigned bit;
		const char *name;
	} names[] = {
	    {IMAGE_CONFINED_MOUNTS, "read-only mount view"},
	    {IMAGE_CONFINED_LANDLOCK_FS, "landlock-fs"},
	    {IMAGE_CONFINED_LANDLOCK_NET, "landlock-net"},
	    {IMAGE_CONFINED_LANDLOCK_SCOPE, "landlock-scope"},
	    {IMAGE_CONFINED_RLIMITS, "rlimits"},
	    {IMAGE_CONFINED_CAPS, "capabilities"},
	    {IMAGE_CONFINED_SECCOMP, "seccomp"},
	};
	size_t n = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < ARRAY_SIZE(names) && n < len; i++)
		if (level & names[i].bit)
			n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? ", " : "", names[i].name);
	if (!buf[0])
		snprintf(buf, len, "none");
	return buf;
}

/* The host's mounts, read-only, in a namespace of the child's own, but a bind of dir. */
static bool mount_view(const char *dir)
{
	if (unshare(CLONE_NEWNS) < 0)
		return false;
	if (mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0 ||
	    mount(dir, dir, NULL, MS_BIND, NULL) < 0)
		return false;
	/* Read-only, and no device opens either (a read-only /dev still opens /dev/sda for writing;
	 * nothing the child runs needs a device: getrandom() for randomness). */
	struct mnt_attr ro = {.attr_set = MNT_ATTR_RDONLY | MNT_ATTR_NODEV | MNT_ATTR_NOSUID};
	if (syscall(SYS_mount_setattr, AT_FDCWD, "/", AT_RECURSIVE, &ro, sizeof(ro)) < 0)
		return false;
	/* Writable, but no device node the child makes there opens (CAP_MKNOD is kept for the
	 * image's own nodes: a node of the host's disk would otherwise be a way out). */
	struct mnt_attr rw = {.attr_clr = MNT_ATTR_RDONLY,
			      .attr_set = MNT_ATTR_NODEV | MNT_ATTR_NOSUID | MNT_ATTR_NOEXEC};
	if (syscall(SYS_mount_setattr, AT_FDCWD, dir, 0, &rw, sizeof(rw)) == 0)
		return true;
	rw.attr_set = 0;
	/* Never leave the work directory read-only: the pull must go on, unconfined here. */
	(void)syscall(SYS_mount_setattr, AT_FDCWD, "/", AT_RECURSIVE, &rw, sizeof(rw));
	return false;
}

static int ll_add_path(int ruleset, const char *path, uint64_t access)
{
	int fd = open(path, O_PATH | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct stat st;
	if (fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode))
		access &= LL_FS_FILE_RIGHTS;
	struct ll_path_beneath_attr pb = {.allowed_access = access, .parent_fd = fd};
	int r = syscall(SYS_landlock_add_rule, ruleset, LL_RULE_PATH_BENEATH, &pb, 0) < 0 ? -errno
											     : 0;
	close(fd);
	return r;
}

/* The ruleset, built while the paths can still be opened; -1 when Landlock is not to be used.
 * *level gets the Landlock bits the ruleset carries. */
static int ll_ruleset(const struct image_confine *c, unsigned *level)
{
	int abi = ll_abi();
	if (abi < 2)
		return -1;
	uint64_t fs = ll_fs_rights(abi);
	struct ll_ruleset_attr attr = {.handled_access_fs = fs};
	size_t size = sizeof(uint64_t);
	bool net = abi >= 4 && !c->any_port;
	if (net) {
		attr.handled_access_net = LL_NET_BIND_TCP | LL_NET_CONNECT_TCP;
		size = 2 * sizeof(uint64_t);
	}
	if (abi >= 6) {
		attr.scoped = LL_SCOPE_ABSTRACT_UNIX | LL_SCOPE_SIGNAL;
		size = sizeof(attr);
	}
	int rs = (int)syscall(SYS_landlock_create_ruleset, &attr, size, 0);
	if (rs < 0)
		return -1;
	const uint64_t read = LL_FS_READ_FILE | LL_FS_READ_DIR;
	/* Beneath the work directory: everything but executing and device ioctls. */
	if (ll_add_path(rs, c->write_path, fs & ~(LL_FS_EXECUTE | LL_FS_IOCTL_DEV)) < 0) {
		close(rs);
		return -1;
	}
	for (size_t i = 0; i < ARRAY_SIZE(read_paths); i++)
		(void)ll_add_path(rs, read_paths[i], read);
	(void)ll_add_path(rs, "/dev/null", LL_FS_READ_FILE | LL_FS_WRITE_FILE);
	if (c->read_path && ll_add_path(rs, c->read_path, read) < 0) {
		close(rs);
		return -1;
	}
	for (size_t i = 0; net && i < c->n_ports; i++) {
		struct ll_net_port_attr np = {.allowed_access = LL_NET_CONNECT_TCP,
					      .port = c->ports[i]};
		if (syscall(SYS_landlock_add_rule, rs, LL_RULE_NET_PORT, &np, 0) < 0) {
			close(rs);
			return -1;
		}
	}
	*level |= IMAGE_CONFINED_LANDLOCK_FS | (net ? IMAGE_CONFINED_LANDLOCK_NET : 0) |
		  (abi >= 6 ? IMAGE_CONFINED_LANDLOCK_SCOPE : 0);
	return rs;
}

static bool limits(const struct image_confine *c)
{
	struct rlimit none = {0, 0};
	struct rlimit nofile = {IMAGE_CONFINE_NOFILE, IMAGE_CONFINE_NOFILE};
	struct rlimit cur;
	bool ok = setrlimit(RLIMIT_CORE, &none) == 0 && prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0;
	if (getrlimit(RLIMIT_NOFILE, &cur) == 0 && cur.rlim_max < nofile.rlim_max)
		nofile.rlim_cur = nofile.rlim_max = cur.rlim_max;
	ok = setrlimit(RLIMIT_NOFILE, &nofile) == 0 && ok;
	if (c->fsize_max) {
		struct rlimit fs = {(rlim_t)c->fsize_max, (rlim_t)c->fsize_max};
		ok = setrlimit(RLIMIT_FSIZE, &fs) == 0 && ok;
		/* Past it a write fails with EFBIG instead of killing the child unexplained. */
		signal(SIGXFSZ, SIG_IGN);
	}
	return ok;
}

static bool drop_caps(bool none)
{
	uint64_t keep = 0;
	for (size_t i = 0; !none && i < ARRAY_SIZE(keep_caps); i++)
		keep |= UINT64_C(1) << keep_caps[i];
	for (int cap = 0; cap < 64; cap++)
		if (!(keep & (UINT64_C(1) << cap)) && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 &&
		    errno != EINVAL)
			return false;
	prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct d[2];
	if (syscall(SYS_capget, &h, d) < 0)
		return false;
	uint64_t have = d[0].permitted | ((uint64_t)d[1].permitted << 32);
	keep &= have;
	for (int i = 0; i < 2; i++) {
		d[i].effective = d[i].permitted = (uint32_t)(keep >> (32 * i));
		d[i].inheritable = 0;
	}
	return syscall(SYS_capset, &h, d) == 0;
}

/* The filter, compiled by libseccomp once per process (milliseconds: prepared in the pull worker,
 * before it forks its layer children, which then only load it). */
static struct sock_fprog filter;

/* deny_devices: no block or character device but a whiteout (0/0) may be made, for a child
 * without the nodev work mount of mount_view(); compiled there and then, a rare path. */
static int build_seccomp(struct sock_fprog *out, bool deny_devices)
{
	static const char *const denied[] = {
	    "mount", "umount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig", "fsmount",
	    "move_mount", "open_tree", "fspick", "mount_setattr", "setns", "unshare",
	    "ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_getfd",
	    "pidfd_open", "kcmp", "kexec_load", "kexec_file_load", "bpf", "init_module",
	    "finit_module", "delete_module", "keyctl", "add_key", "request_key", "perf_event_open",
	    "userfaultfd", "reboot", "swapon", "swapoff", "syslog", "acct", "quotactl",
	    "quotactl_fd", "open_by_handle_at", "name_to_handle_at", "iopl", "ioperm",
	    "modify_ldt", "uselib", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
	    "io_uring_setup", "io_uring_enter", "io_uring_register", "fanotify_init",
	    "lookup_dcookie", "nfsservctl", "personality", "vhangup", "sethostname",
	    "setdomainname", "execve", "execveat", "fork", "vfork",
	};
	static const uint64_t ns_flags[] = {CLONE_NEWNS,   CLONE_NEWUTS, CLONE_NEWIPC,
					    CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET,
					    CLONE_NEWCGROUP};
	if (out->filter)
		return 0;
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx)
		return -ENOMEM;
	int r = 0;
#ifdef __x86_64__
	/* The same rules for 32-bit and x32 calls: injected code is not bound to the native ABI. */
	if ((r = seccomp_arch_add(ctx, SCMP_ARCH_X86)) == -EEXIST)
		r = 0;
	if (r == 0 && (r = seccomp_arch_add(ctx, SCMP_ARCH_X32)) == -EEXIST)
		r = 0;
#endif
	for (size_t i = 0; r == 0 && i < ARRAY_SIZE(denied); i++) {
		int nr = seccomp_syscall_resolve_name(denied[i]);
		if (nr != __NR_SCMP_ERROR)
			r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
	}
	/* Threads (libcurl's resolver) but no processes: a process could outlive the child and
	 * keep writing through its open files after the parent has moved the layer into place.
	 * clone3's flags are in memory: ENOSYS makes libc fall back to clone. */
	if (r == 0)
		r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
	if (r == 0)
		r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
				     SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0));
	for (size_t i = 0; r == 0 && i < ARRAY_SIZE(ns_flags); i++)
		r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
				     SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i]));
	/* Sockets: IPv4 and IPv6 (the registry, DNS) and NETLINK_ROUTE (getaddrinfo's address
	 * probe) only. No unix sockets: no docker.sock, no corrald socket, no nscd (glibc then
	 * resolves itself). The kernel reads these arguments as ints: compare the low 32 bits. */
	if (r == 0 && deny_devices) {
		r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(mknod), 1,
				     SCMP_A1(SCMP_CMP_MASKED_EQ, S_IFMT, S_IFBLK));
		if (r == 0)
			r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(mknodat), 1,
					     SCMP_A2(SCMP_CMP_MASKED_EQ, S_IFMT, S_IFBLK));
		if (r == 0)
			r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(mknod), 2,
					     SCMP_A1(SCMP_CMP_MASKED_EQ, S_IFMT, S_IFCHR),
					     SCMP_A2(SCMP_CMP_NE, 0));
		if (r == 0)
			r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(mknodat), 2,
					     SCMP_A2(SCMP_CMP_MASKED_EQ, S_IFMT, S_IFCHR),
					     SCMP_A3(SCMP_CMP_NE, 0));
	}
	for (unsigned fam = 0; r == 0 && fam < 64; fam++)
		if (fam != AF_INET && fam != AF_INET6 && fam != AF_NETLINK)
			r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
					     SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffu, fam));
	for (unsigned proto = 1; r == 0 && proto < 32; proto++)
		r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPROTONOSUPPORT), SCMP_SYS(socket), 2,
				     SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffu, AF_NETLINK),
				     SCMP_A2(SCMP_CMP_MASKED_EQ, 0xffffffffu, proto));
	int fd = r < 0 ? -1 : memfd_create("corral-image-seccomp", MFD_CLOEXEC);
	if (r == 0 && fd < 0)
		r = -errno;
	if (r == 0)
		r = seccomp_export_bpf(ctx, fd);
	seccomp_release(ctx);
	off_t len = r == 0 ? lseek(fd, 0, SEEK_END) : -1;
	if (r == 0 && (len <= 0 || len % (off_t)sizeof(struct sock_filter) ||
		       len / (off_t)sizeof(struct sock_filter) > BPF_MAXINSNS))
		r = -EINVAL;
	struct sock_filter *f = r == 0 ? malloc((size_t)len) : NULL;
	if (r == 0 && !f)
		r = -ENOMEM;
	if (r == 0 && pread(fd, f, (size_t)len, 0) != len)
		r = -EIO;
	if (fd >= 0)
		close(fd);
	if (r < 0) {
		free(f);
		return r;
	}
	out->len = (unsigned short)(len / (off_t)sizeof(struct sock_filter));
	out->filter = f;
	return 0;
}

int image_confine_prepare(void)
{
	return build_seccomp(&filter, false);
}

static bool load_seccomp(bool deny_devices)
{
	struct sock_fprog own = {0};
	struct sock_fprog *f = deny_devices ? &own : &filter;
	return build_seccomp(f, deny_devices) == 0 &&
	       prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, f, 0, 0) == 0;
}



unsigned image_confine(const struct image_confine *c)
{
	unsigned level = 0;
	/* No terminal: a child keeps corrald's stdin, stdout and stderr, which under `make run` are
	 * the operator's terminal. In corrald's session, TIOCSTI on it would type commands into the
	 * operator's root shell (no capability needed; Landlock does not restrict descriptors opened
	 * before it); out of it, job control no longer keeps it from reading what the operator types.
	 * So a session of its own, and /dev/null for stdin and for a stdout or stderr that is a
	 * terminal (one that is not, a log file or pipe, stays: a sanitizer reports there). */
	setsid();
	int null = open("/dev/null", O_RDWR | O_CLOEXEC | O_NOCTTY);
	for (int fd = 0; null >= 0 && fd <= 2; fd++)
		if (fd == 0 || isatty(fd))
			dup2(null, fd);
	if (null > 2)
		close(null);
	if (mount_view(c->write_path))
		level |= IMAGE_CONFINED_MOUNTS;
	int rs = ll_ruleset(c, &level);
	if (limits(c))
		level |= IMAGE_CONFINED_RLIMITS;
	bool nnp = prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0;
	if (drop_caps(c->no_caps))
		level |= IMAGE_CONFINED_CAPS;
	if (rs >= 0) {
		if (!nnp || syscall(SYS_landlock_restrict_self, rs, 0) < 0)
			level &= ~(unsigned)(IMAGE_CONFINED_LANDLOCK_FS | IMAGE_CONFINED_LANDLOCK_NET |
					     IMAGE_CONFINED_LANDLOCK_SCOPE);
		close(rs);
	}
	if (nnp && load_seccomp(!(level & IMAGE_CONFINED_MOUNTS)))
		level |= IMAGE_CONFINED_SECCOMP;
	return level;
}
