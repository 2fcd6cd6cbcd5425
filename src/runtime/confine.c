/*
 * The sandbox's seccomp filter and capability set (confine.h).
 */
#include <errno.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "runtime/confine.h"
#include "shared/macro.h"

/* Docker's default capability set. */
static const int keep_caps[] = {
    CAP_CHOWN,	     CAP_DAC_OVERRIDE, CAP_FOWNER,  CAP_FSETID,		  CAP_KILL,
    CAP_SETGID,	     CAP_SETUID,       CAP_SETPCAP, CAP_NET_BIND_SERVICE, CAP_SYS_CHROOT,
    CAP_AUDIT_WRITE, CAP_SETFCAP,
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
	    "process_vm_readv",
	    "process_vm_writev",
	    "open_by_handle_at",
	    "name_to_handle_at",
	    "keyctl",
	    "add_key",
	    "request_key",
	    "perf_event_open",
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
	if (len <= 0 || len % sizeof(struct sock_filter) || len > 65536)
		return error_set(err, EINVAL, "seccomp filter has a bad size %lld", (long long)len);
	struct sock_filter *f = malloc((size_t)len);
	if (!f)
		return error_set(err, ENOMEM, "seccomp filter");
	if (pread(fd, f, (size_t)len, 0) != len) {
		free(f);
		return error_set_errno(err, errno, "read seccomp filter");
	}
	cached.len = (unsigned short)(len / sizeof(struct sock_filter));
	cached.filter = f;
	*ret = cached;
	return 0;
}

