/*
 * The sandbox's seccomp filter and capability set (confine.h).
 */
#include <errno.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/netlink.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "runtime/confine.h"
#include "shared/macro.h"

/* Docker's default capability set less CAP_AUDIT_WRITE: a sandbox has nothing to say to the
 * host's audit log (with it, root in a sandbox could forge audit records of the host). */
static const int keep_caps[] = {
    CAP_CHOWN,	CAP_DAC_OVERRIDE, CAP_FOWNER,  CAP_FSETID,		 CAP_KILL,
    CAP_SETGID, CAP_SETUID,	  CAP_SETPCAP, CAP_NET_BIND_SERVICE, CAP_SYS_CHROOT,
    CAP_SETFCAP,
};

int confine_drop_caps(int cap_last, struct error *err)
{
	uint64_t keep = 0;
	for (size_t i = 0; i < ARRAY_SIZE(keep_caps); i++)
		keep |= UINT64_C(1) << keep_caps[i];
	for (int cap = 0; cap <= cap_last; cap++)
		if (!(keep & (UINT64_C(1) << cap)) && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 &&
		    errno != EINVAL)
			return error_set_errno(err, errno,
					       "drop capability %d from the bounding set", cap);
	prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct d[2];
	if (syscall(SYS_capget, &h, d) < 0)
		return error_set_errno(err, errno, "capget");
	uint64_t have = d[0].permitted | ((uint64_t)d[1].permitted << 32);
	keep &= have;
	for (int i = 0; i < 2; i++) {
		d[i].effective = d[i].permitted = (uint32_t)(keep >> (32 * i));
		d[i].inheritable = 0;
	}
	if (syscall(SYS_capset, &h, d) < 0)
		return error_set_errno(err, errno, "capset");
	return 0;
}

int confine_rlimits(uint64_t nofile, struct error *err)
{
	if (nofile == 0)
		nofile = CONFINE_DEFAULT_NOFILE;
	struct rlimit rl = {.rlim_cur = (rlim_t)nofile, .rlim_max = (rlim_t)nofile};
	if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
		return 0;
	/* Raising the hard limit needs CAP_SYS_RESOURCE, which a host may withhold from corrald:
	 * then the sandbox gets corrald's own hard limit, never more. */
	struct rlimit cur;
	if (errno != EPERM || getrlimit(RLIMIT_NOFILE, &cur) < 0 || cur.rlim_max >= rl.rlim_max)
		return error_set_errno(err, errno, "set RLIMIT_NOFILE to %llu",
				       (unsigned long long)nofile);
	rl.rlim_cur = rl.rlim_max = cur.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		return error_set_errno(err, errno, "set RLIMIT_NOFILE to %llu",
				       (unsigned long long)cur.rlim_max);
	return 0;
}

/* ---- personality(): an allow list, in front of libseccomp's program ------------------------ */

/*
 * Only the personas Docker's default profile allows: PER_LINUX (0), PER_LINUX32 (8), UNAME26
 * (0x20000), both (0x20008), and the query 0xffffffff. Anything else (READ_IMPLIES_EXEC makes
 * every readable mapping executable, ADDR_NO_RANDOMIZE turns off ASLR, ...) gets EPERM.
 * libseccomp cannot say "none of these values" with a default-allow filter (one comparison per
 * argument, no rule with the default action), so this is a few instructions of classic BPF run
 * before its program; they fall through to it for every other call. The kernel takes the argument
 * as an unsigned int, so a 64-bit caller with any of the upper 32 bits set is refused too (the
 * kernel would drop them, turning 0x100400000 into READ_IMPLIES_EXEC).
 */
#define SECCOMP_DATA_NR 0
#define SECCOMP_DATA_ARCH 4
#define SECCOMP_DATA_ARG0_LO 16 /* little-endian */
#define SECCOMP_DATA_ARG0_HI 20

#if defined(__x86_64__)
#define NATIVE_AUDIT_ARCH AUDIT_ARCH_X86_64
#define X32_PERSONALITY (__X32_SYSCALL_BIT | 135)
#define I386_PERSONALITY 136
#elif defined(__aarch64__)
#define NATIVE_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

#ifdef NATIVE_AUDIT_ARCH
/* Jump offsets count instructions from the next one; the x86-64 layout is 0-7 arch and number
 * (i386, x32, native), 8-15 the argument, 16 the refusal, 17 libseccomp's first instruction. */
static const struct sock_filter personality_guard[] = {
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SECCOMP_DATA_ARCH),
#ifdef __x86_64__
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_I386, 0, 2),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SECCOMP_DATA_NR),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, I386_PERSONALITY, 4, 13),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_AUDIT_ARCH, 0, 12),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SECCOMP_DATA_NR),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, X32_PERSONALITY, 1, 0),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_personality, 0, 9),
#else
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_AUDIT_ARCH, 0, 11),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SECCOMP_DATA_NR),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_personality, 0, 9),
#endif
    /* the argument: upper half zero, lower half one of the allowed values */
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SECCOMP_DATA_ARG0_HI),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 6),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SECCOMP_DATA_ARG0_LO),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x0, 5, 0),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x8, 4, 0),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x20000, 3, 0),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x20008, 2, 0),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0xffffffff, 1, 0),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
    /* fall through to libseccomp's program */
};
#define PERSONALITY_GUARD_LEN ARRAY_SIZE(personality_guard)
#else
#define PERSONALITY_GUARD_LEN 0
#endif

/* ---- the seccomp filter, compiled once per process ----------------------------------------- */

int confine_seccomp_build(struct sock_fprog *ret, struct error *err)
{
	static struct sock_fprog cached;
	if (cached.filter) {
		*ret = cached;
		return 0;
	}
	static const char *const denied[] = {
	    "mount",
	    "umount",
	    "umount2",
	    "pivot_root",
	    "kexec_load",
	    "kexec_file_load",
	    "bpf",
	    "init_module",
	    "finit_module",
	    "delete_module",
	    "ptrace",
	    /* another process's memory, fds and kernel objects: what ptrace would give */
	    "process_vm_readv",
	    "process_vm_writev",
	    "process_madvise",
	    "pidfd_getfd",
	    "kcmp",
	    /* 16-bit segments for the LDT: old exploits' favourite, no use for modern code */
	    "modify_ldt",
	    "open_by_handle_at",
	    "name_to_handle_at",
	    "keyctl",
	    "add_key",
	    "request_key",
	    "perf_event_open",
	    /* the kernel log: names every sandbox's cgroup (its id) and more; only hosts with
	     * kernel.dmesg_restrict=1 keep it from processes without CAP_SYSLOG */
	    "syslog",
	    "reboot",
	    "swapon",
	    "swapoff",
	    "setns",
	    "unshare",
	    "userfaultfd",
	    "acct",
	    "settimeofday",
	    "clock_settime",
	    "clock_adjtime",
	    "adjtimex",
	    "quotactl",
	    "quotactl_fd",
	    "lookup_dcookie",
	    "fsopen",
	    "fsconfig",
	    "fsmount",
	    "move_mount",
	    "open_tree",
	    "fspick",
	    "mount_setattr",
	    "iopl",
	    "ioperm",
	    "uselib",
	    "nfsservctl",
	    /* io_uring: a large, often-exploited kernel surface that Docker blocks too;
	     * programs fall back to ordinary syscalls. */
	    "io_uring_setup",
	    "io_uring_enter",
	    "io_uring_register",
	};
	static const uint64_t ns_flags[] = {CLONE_NEWNS,    CLONE_NEWUTS, CLONE_NEWIPC,
					    CLONE_NEWUSER,  CLONE_NEWPID, CLONE_NEWNET,
					    CLONE_NEWCGROUP};
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx)
		return error_set(err, ENOMEM, "seccomp_init");
	int r = 0;
#ifdef __x86_64__
	/* Same rules for 32-bit and x32 binaries (any other ABI is killed by the default). */
	if ((r = seccomp_arch_add(ctx, SCMP_ARCH_X86)) < 0 && r != -EEXIST) {
		seccomp_release(ctx);
		return error_set_errno(err, -r, "seccomp: add x86");
	}
	if ((r = seccomp_arch_add(ctx, SCMP_ARCH_X32)) < 0 && r != -EEXIST) {
		seccomp_release(ctx);
		return error_set_errno(err, -r, "seccomp: add x32");
	}
	r = 0;
#endif
	for (size_t i = 0; r == 0 && i < ARRAY_SIZE(denied); i++) {
		int nr = seccomp_syscall_resolve_name(denied[i]);
		if (nr != __NR_SCMP_ERROR)
			r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
	}
	/* clone3 passes its flags in memory, out of a filter's reach: ENOSYS makes libc fall back
	 * to clone, whose flags argument the filter can see. */
	if (r == 0)
		r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
	for (size_t i = 0; r == 0 && i < ARRAY_SIZE(ns_flags); i++)
		r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
				     SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i]));
	/* AF_VSOCK reaches the services of a VM's host; NETLINK_AUDIT the host's audit log. The
	 * kernel reads these arguments as ints: compare the low 32 bits only, or 0x100000028 would
	 * pass for something else and still open AF_VSOCK. On 32-bit x86, socketcall() passes its
	 * arguments in memory; libseccomp then refuses socketcall(SYS_SOCKET, ...) whatever the
	 * family (the direct socket() of i386, which modern libcs use, is filtered by argument). */
	if (r == 0)
		r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1,
				     SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffu, AF_VSOCK));
	if (r == 0)
		r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPROTONOSUPPORT), SCMP_SYS(socket), 2,
				     SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffffffffu, AF_NETLINK),
				     SCMP_A2(SCMP_CMP_MASKED_EQ, 0xffffffffu, NETLINK_AUDIT));
	if (r < 0) {
		seccomp_release(ctx);
		return error_set_errno(err, -r, "build seccomp filter");
	}
	_cleanup_close_ int fd = memfd_create("corral-seccomp", MFD_CLOEXEC);
	if (fd < 0) {
		seccomp_release(ctx);
		return error_set_errno(err, errno, "memfd_create");
	}
	r = seccomp_export_bpf(ctx, fd);
	seccomp_release(ctx);
	if (r < 0)
		return error_set_errno(err, -r, "export seccomp filter");
	off_t len = lseek(fd, 0, SEEK_END);
	const size_t guard = PERSONALITY_GUARD_LEN * sizeof(struct sock_filter);
	if (len <= 0 || len % sizeof(struct sock_filter) || len > 65536)
		return error_set(err, EINVAL, "seccomp filter has a bad size %lld", (long long)len);
	struct sock_filter *f = malloc(guard + (size_t)len);
	if (!f)
		return error_set(err, ENOMEM, "seccomp filter");
#ifdef NATIVE_AUDIT_ARCH
	memcpy(f, personality_guard, guard);
#endif
	if (pread(fd, (char *)f + guard, (size_t)len, 0) != len) {
		free(f);
		return error_set_errno(err, errno, "read seccomp filter");
	}
	cached.len = (unsigned short)((guard + (size_t)len) / sizeof(struct sock_filter));
	cached.filter = f;
	*ret = cached;
	return 0;
}

