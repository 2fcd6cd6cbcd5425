#!/usr/bin/env python3
"""The kernel surface a sandbox can reach: syscalls the seccomp filter refuses, the capability set,
masked /proc and /sys files, per-sandbox limits on processes and open files, and admission by the
host's pid and open-file tables. Every attack runs from inside a sandbox the way untrusted code
would (ctypes syscalls from python3 in the host image, x86-64 numbers), and after each one
corrald and a neighbour sandbox must still answer."""

import json
import os
import platform
import threading
import unittest

from sec import AttackCase, main

CAP_AUDIT_WRITE = 29
EPERM, ENOSYS, EAFNOSUPPORT, EPROTONOSUPPORT, EMFILE = 1, 38, 97, 93, 24

# Runs inside the sandbox: SYSCALLS is a list of [name, nr, args]; prints one JSON object
# name -> [return value, errno]. Arguments "@buf", "@iov" (one page-aligned, resident page),
# "@pidfd1"/"@pidfdself" and "@self" are replaced by a scratch buffer's address, an iovec, pidfds
# of PID 1 and of the script itself, and its pid.
SYSCALL_RUNNER = r"""
import ctypes, json, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                      ctypes.c_long]
buf = ctypes.create_string_buffer(4096)
page = libc.mmap(None, 4096, 3, 0x22, -1, 0)  # PROT_READ|WRITE, MAP_PRIVATE|ANONYMOUS
ctypes.memset(page, 1, 4096)
iov = (ctypes.c_uint64 * 2)(page, 4096)
def pidfd(pid):
    return libc.syscall(434, pid, 0)
special = {"@buf": ctypes.addressof(buf), "@iov": ctypes.addressof(iov),
           "@pidfd1": pidfd(1), "@pidfdself": pidfd(os.getpid()), "@self": os.getpid()}
out = {}
for name, nr, args in json.loads(sys.argv[1]):
    a = [ctypes.c_long(special.get(x, x) if isinstance(x, str) else x) for x in args]
    a += [ctypes.c_long(0)] * (6 - len(a))
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *a)
    out[name] = [r, ctypes.get_errno() if r < 0 else 0]
print(json.dumps(out))
"""


def x86_64_only(fn):
    return unittest.skipUnless(platform.machine() == "x86_64", "syscall numbers are x86-64")(fn)


class KernelSurface(AttackCase):

    # A small RLIMIT_NOFILE, below corrald's own, so the fd flood is quick and the limit is
    # visibly the sandbox's own rather than one inherited from corrald.
    corrald_kwargs = {"extra_args": ["--sandbox-nofile", "4096"]}

    class_sandboxes = ("attacker", "neighbour")

    def syscalls(self, sid, calls):
        """Run [name, nr, args] syscalls inside sid; {name: (ret, errno)}."""
        script = "cat > /tmp/sys.py <<'EOF'\n%s\nEOF\npython3 /tmp/sys.py '%s'" % (
            SYSCALL_RUNNER, json.dumps(calls))
        res = self.client.run(sid, script)
        self.assertEqual(res.exit_code, 0, "%r stderr=%r" % (res, res.stderr))
        return {k: tuple(v) for k, v in json.loads(res.stdout).items()}

    def assert_refused(self, got, errnos=(EPERM,)):
        for name, (r, e) in got.items():
            self.assertEqual(r, -1, "%s succeeded inside the sandbox (returned %d)" % (name, r))
            self.assertIn(e, errnos, "%s: errno %d, want one of %r" % (name, e, errnos))

    # --- the seccomp additions ---------------------------------------------------------------

    @x86_64_only
    def test_steal_pid1_fds_with_pidfd_getfd(self):
        # Attack: take execd's descriptors (its listening socket, /dev/null...) with pidfd_getfd.
        calls = [["pidfd_getfd(1, %d)" % fd, 438, ["@pidfd1", fd, 0]] for fd in range(16)]
        self.assert_refused(self.syscalls(self.attacker, calls))
        self.assert_platform_alive(self.attacker, self.neighbour)

    @x86_64_only
    def test_reach_other_processes_memory_and_kernel_objects(self):
        # Attack: poke PID 1's memory (process_vm_readv/writev), advise its pages
        # (process_madvise), compare kernel objects across processes (kcmp).
        calls = [
            ["process_vm_readv(1)", 310, [1, "@iov", 1, "@iov", 1, 0]],
            ["process_vm_writev(1) of nothing", 311, [1, "@iov", 0, "@iov", 0, 0]],
            ["process_madvise(self, MADV_COLD)", 440, ["@pidfdself", "@iov", 1, 20, 0]],
            ["kcmp(self, 1, KCMP_FILE)", 312, ["@self", 1, 0, 0, 0]],
            ["kcmp(self, self, KCMP_VM)", 312, ["@self", "@self", 1, 0, 0]],
        ]
        self.assert_refused(self.syscalls(self.attacker, calls))
        self.assert_platform_alive(self.attacker, self.neighbour)

    @x86_64_only
    def test_modify_ldt(self):
        # Attack: install a 16-bit LDT segment, the first step of old LDT exploits.
        calls = [["modify_ldt(read)", 154, [0, "@buf", 16]],
                 ["modify_ldt(write)", 154, [1, "@buf", 16]]]
        self.assert_refused(self.syscalls(self.attacker, calls))

    @x86_64_only
    def test_unsafe_personality(self):
        # Attack: READ_IMPLIES_EXEC (every readable mapping executable), ADDR_NO_RANDOMIZE (no
        # ASLR), and the same with upper bits set, which the kernel drops.
        got = self.syscalls(self.attacker, [
            ["READ_IMPLIES_EXEC", 135, [0x0400000]],
            ["ADDR_NO_RANDOMIZE", 135, [0x0040000]],
            ["MMAP_PAGE_ZERO", 135, [0x0100000]],
            ["upper bits + READ_IMPLIES_EXEC", 135, [0x100400000]],
        ])
        self.assert_refused(got)
        # What Docker allows still works: the query, PER_LINUX32, back to PER_LINUX.
        got = self.syscalls(self.attacker, [["query", 135, [0xffffffff]],
                                            ["PER_LINUX32", 135, [8]],
                                            ["PER_LINUX", 135, [0]]])
        self.assertEqual(got["query"], (0, 0), got)
        self.assertEqual(got["PER_LINUX32"], (0, 0), got)
        self.assertEqual(got["PER_LINUX"], (8, 0), got)
        res = self.client.run(self.attacker, "setarch x86_64 -R true && echo NO-ASLR")
        self.assertNotIn("NO-ASLR", res.stdout, res)

    @x86_64_only
    def test_vsock_and_netlink_audit_sockets(self):
        # Attack: open AF_VSOCK (the VM host's services) and NETLINK_AUDIT (the host's audit log),
        # also with the upper 32 bits of the family set, which the kernel ignores.
        got = self.syscalls(self.attacker, [
            ["socket(AF_VSOCK)", 41, [40, 1, 0]],
            ["socket(AF_VSOCK | 1 << 32)", 41, [0x100000028, 1, 0]],
            ["socket(AF_VSOCK, SOCK_DGRAM)", 41, [40, 2, 0]],
        ])
        self.assert_refused(got, (EAFNOSUPPORT,))
        got = self.syscalls(self.attacker, [
            ["socket(AF_NETLINK, NETLINK_AUDIT)", 41, [16, 3, 9]],
            ["socket(AF_NETLINK, NETLINK_AUDIT | 1 << 32)", 41, [16, 3, 0x100000009]],
            ["socket(AF_NETLINK, SOCK_DGRAM, NETLINK_AUDIT)", 41, [16, 2, 9]],
        ])
        self.assert_refused(got, (EPROTONOSUPPORT,))
        # Python's own socket module agrees.
        res = self.client.run(self.attacker, "python3 -c 'import socket; "
                              "socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM); print(\"VSOCK\")'")
        self.assertNotIn("VSOCK", res.stdout, res)
        # Ordinary netlink (ip, ss) still works.
        self.run_ok(self.attacker, "python3 -c 'import socket; "
                    "socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)'")
        self.assert_platform_alive(self.attacker, self.neighbour)

    def test_no_cap_audit_write(self):
        # Attack: keep CAP_AUDIT_WRITE to forge records in the host's audit log.
        for field in ("CapEff", "CapBnd", "CapPrm"):
            v = int(self.sh(self.attacker, "awk '/^%s:/ {print $2}' /proc/self/status" % field), 16)
            self.assertFalse(v & (1 << CAP_AUDIT_WRITE), "%s has CAP_AUDIT_WRITE (%#x)" % (field, v))
        v = int(self.sh(self.attacker, "awk '/^CapBnd:/ {print $2}' /proc/1/status"), 16)
        self.assertFalse(v & (1 << CAP_AUDIT_WRITE), "PID 1 keeps CAP_AUDIT_WRITE (%#x)" % v)

    # --- masked /proc and /sys ---------------------------------------------------------------

    def test_masked_proc_files(self):
        # Attack: read the kernel's heap and page layouts, symbols and timers (slab/vmalloc
        # grooming, Rowhammer and KASLR aids, other tenants' activity).
        masked = ["slabinfo", "vmallocinfo", "pagetypeinfo", "kpagecount", "kpageflags",
                  "kpagecgroup", "interrupts", "sched_debug", "timer_list", "keys", "kcore",
                  "latency_stats", "timer_stats", "kallsyms"]
        checked = []
        for name in masked:
            path = "/proc/" + name
            try:
                with open(path, "rb") as f:
                    host_has = len(f.read(64)) > 0
            except OSError:
                host_has = False
            if not host_has:
                continue  # nothing to hide on this kernel
            checked.append(name)
            res = self.client.run(self.attacker, "head -c 64 %s | wc -c" % path)
            self.assertEqual(res.stdout.strip(), "0", "%s is readable inside: %r" % (path, res))
        self.assertIn("slabinfo", checked, "the host has no /proc/slabinfo: the test checks nothing")
        self.assertIn("vmallocinfo", checked)
        # And they cannot be unmasked.
        res = self.client.run(self.attacker, "umount /proc/slabinfo; head -c 64 /proc/slabinfo | wc -c")
        self.assertEqual(res.stdout.strip().splitlines()[-1], "0", res)

    def test_loop_backing_file_hidden(self):
        # Attack: learn other sandboxes' ids (and the host's state path) from the loop devices
        # behind their disk limits: /sys/block/loop*/loop/backing_file.
        victim = self.create(resourceLimits={"cpu": "1", "memory": "512Mi",
                                             "ephemeral-storage": "64Mi"})["id"]
        # On the host, the victim's disk is behind a loop device whose backing file is an
        # unnamed image: even a reader that got past the masks would learn no id from it.
        host_files = []
        for dev in os.listdir("/sys/block"):
            try:
                with open("/sys/block/%s/loop/backing_file" % dev) as f:
                    host_files.append(f.read())
            except OSError:
                pass
        self.assertTrue(any("(deleted)" in f for f in host_files),
                        "no loop device of an unnamed disk on the host: %r" % host_files)
        for f in host_files:
            self.assertNotIn(victim, f)
            self.assertNotIn(self.corrald.state_dir, f)
        probe = ("for d in /sys/block /sys/class/block /sys/dev/block /sys/devices/virtual/block; do "
                 "ls $d; cat $d/*/loop/backing_file; done 2>/dev/null; "
                 "timeout 60 find /sys -name backing_file 2>/dev/null | xargs -r cat 2>/dev/null; true")
        for sid in (self.attacker, victim):
            out = self.sh(sid, probe)
            self.assertNotIn(victim, out, "the victim's id leaks into %s" % sid)
            self.assertNotIn("disk.img", out, "a loop backing file is readable in %s" % sid)
            self.assertNotIn(self.corrald.state_dir, out)
            self.assertNotIn("loop", out.replace("loop/backing_file", ""),
                             "loop devices are listed in %s:\n%s" % (sid, out))
        self.assert_platform_alive(self.attacker, victim)

    # --- processes and open files --------------------------------------------------------

    def test_fork_bomb_contained(self):
        # Attack: fork until the host's pid table is exhausted.
        bomb = self.create(resourceLimits={"cpu": "1", "memory": "256Mi", "pids": "64"})["id"]
        script = r"""
import os, signal, errno
kids = []
err = 0
for _ in range(5000):
    try:
        pid = os.fork()
    except OSError as e:
        err = e.errno
        break
    if pid == 0:
        signal.pause()
        os._exit(0)
    kids.append(pid)
print(len(kids), err, open('/sys/fs/cgroup/pids/pids.current' if os.path.exists('/sys/fs/cgroup/pids/pids.current') else '/sys/fs/cgroup/pids.current').read().strip())
for k in kids:
    os.kill(k, signal.SIGKILL)
for k in kids:
    os.waitpid(k, 0)
"""
        res = self.client.run(bomb, "cat > /tmp/bomb.py <<'EOF'\n%s\nEOF\npython3 /tmp/bomb.py" % script)
        self.assertEqual(res.exit_code, 0, "%r stderr=%r" % (res, res.stderr))
        forks, err, current = (int(x) for x in res.stdout.split())
        self.assertEqual(err, 11, "fork stopped by EAGAIN (pids.max): %r" % res.stdout)
        self.assertLess(forks, 64, res.stdout)
        self.assertLessEqual(current, 64, res.stdout)
        self.assertGreater(forks, 50, "the limit is the sandbox's pids.max, not something smaller")
        self.assert_platform_alive(self.attacker, self.neighbour, bomb)

    def test_fd_flood_stops_at_rlimit_nofile(self):
        # Attack: open files until the host's file table is full (and raise the limit first).
        script = r"""
import os, resource
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
try:
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard * 16, hard * 16))
    raised = 1
except (ValueError, OSError):
    raised = 0
fds = []
err = 0
try:
    while len(fds) < 1000000:
        fds.append(os.open('/dev/null', os.O_RDONLY))
except OSError as e:
    err = e.errno
print(soft, hard, raised, len(fds), err)
"""
        res = self.client.run(self.attacker, "cat > /tmp/flood.py <<'EOF'\n%s\nEOF\npython3 /tmp/flood.py" % script)
        self.assertEqual(res.exit_code, 0, "%r stderr=%r" % (res, res.stderr))
        soft, hard, raised, opened, err = (int(x) for x in res.stdout.split())
        self.assertEqual((soft, hard), (4096, 4096), "RLIMIT_NOFILE is --sandbox-nofile: %r" % res.stdout)
        self.assertEqual(raised, 0, "the sandbox raised its own hard limit")
        self.assertEqual(err, EMFILE, res.stdout)
        self.assertLess(opened, 4096, res.stdout)
        # execd (PID 1) has the same limit, and so does every new command.
        self.assertIn("4096", self.sh(self.attacker, "grep 'Max open files' /proc/1/limits"))
        self.assertEqual(self.sh(self.neighbour, "ulimit -n").strip(), "4096")
        self.assert_platform_alive(self.attacker, self.neighbour)

    # --- attacks that already failed before issue 8, kept failing ----------------------------

    @x86_64_only
    def test_escape_syscalls_stay_refused(self):
        # Attack: the classic container escapes: mount, namespaces, ptrace, file handles, keys,
        # BPF, io_uring, modules, kexec, perf, userfaultfd, the kernel log.
        calls = [
            ["mount", 165, [0, "@buf", 0, 0, 0]],
            ["umount2", 166, ["@buf", 0]],
            ["pivot_root", 155, ["@buf", "@buf"]],
            ["unshare(NEWUSER)", 272, [0x10000000]],
            ["unshare(NEWNS)", 272, [0x00020000]],
            ["unshare(NEWNET)", 272, [0x40000000]],
            ["setns", 308, ["@pidfd1", 0]],
            ["clone(NEWUSER)", 56, [0x10000000 | 17, 0, 0, 0, 0]],
            ["ptrace(ATTACH, 1)", 101, [16, 1, 0, 0]],
            ["name_to_handle_at", 303, [-100, "@buf", "@buf", "@buf", 0]],
            ["open_by_handle_at", 304, [-100, "@buf", 0]],
            ["keyctl(GET_KEYRING_ID)", 250, [0, -3, 0]],
            ["add_key", 248, ["@buf", "@buf", 0, 0, -3]],
            ["bpf(MAP_CREATE)", 321, [0, "@buf", 64]],
            ["io_uring_setup", 425, [1, "@buf"]],
            ["init_module", 175, ["@buf", 16, "@buf"]],
            ["finit_module", 313, [0, "@buf", 0]],
            ["kexec_load", 246, [0, 0, 0, 0]],
            ["perf_event_open", 298, ["@buf", 0, -1, -1, 0]],
            ["syslog(READ_ALL)", 103, [3, "@buf", 4096]],
            ["userfaultfd", 323, [0]],
        ]
        got = self.syscalls(self.attacker, calls)
        self.assertEqual(set(got), {c[0] for c in calls})
        self.assert_refused(got, (EPERM, ENOSYS))
        self.assert_platform_alive(self.attacker, self.neighbour)

    def test_tools_stay_refused(self):
        # Attack: the same escapes with the tools an agent would reach for.
        attacks = {
            "mount": "mkdir -p /tmp/m && mount -t tmpfs none /tmp/m && echo ESCAPED",
            "unshare": "unshare -U -r -m true && echo ESCAPED",
            "raw socket": "python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, 1)' && echo ESCAPED",
            "packet socket": "python3 -c 'import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)' && echo ESCAPED",
            "/proc/sys write": "echo 1 > /proc/sys/kernel/sysrq && echo ESCAPED",
            "sysrq-trigger": "echo h > /proc/sysrq-trigger && echo ESCAPED",
            "cgroup write": "echo max > /sys/fs/cgroup/pids/pids.max && echo ESCAPED; echo max > /sys/fs/cgroup/pids.max && echo ESCAPED",
            "/sys write": "echo 1 > /sys/kernel/mm/ksm/run && echo ESCAPED",
            "mknod": "mknod /tmp/sda b 8 0 && head -c 1 /tmp/sda && echo ESCAPED",
        }
        for name, cmd in attacks.items():
            res = self.client.run(self.attacker, cmd)
            self.assertNotIn("ESCAPED", res.stdout, "%s: %r" % (name, res))
        self.assert_platform_alive(self.attacker, self.neighbour)


class PidTableAdmission(AttackCase):
    """A pid table of 10000 for sandboxes: two sandboxes of 6000 pids do not both fit."""

    corrald_kwargs = {"extra_args": ["--capacity", "cpu=100000,memory=100Ti,pids=10000,files=1000000000000",
                                     "--capacity-wait", "4"]}

    def pending(self):
        r = self.client.list_sandboxes(state="Pending")
        self.assertEqual(r.status, 200, r)
        return r.json()["items"]

    def create_async(self, **spec):
        out = {}

        def go():
            c = self.corrald.client(timeout=60)
            try:
                r = c.create_sandbox_raw(**spec)
                out["status"], out["body"] = r.status, r.json()
                if r.status == 202:
                    self.addCleanup(self._cleanup_sandbox, r.json()["id"])
            finally:
                c.close()
        t = threading.Thread(target=go)
        t.start()
        return t, out

    def test_pids_sum_over_the_host_table(self):
        # Attack: ask for more processes in total than the host's pid table has, so that
        # sandboxes together could leave the host unable to fork.
        big = {"cpu": "1", "memory": "256Mi", "pids": "6000"}
        a = self.create(resourceLimits=big)["id"]
        # One that can never fit is refused at once, naming the table.
        r = self.client.create_sandbox_raw(resourceLimits=dict(big, pids="20000"))
        self.assertEqual(r.status, 400, r)
        self.assertEqual(r.json()["code"], "SANDBOX::EXCEEDS_HOST_PID_TABLE", r.json())
        self.assertIn("pid table", r.json()["message"])
        self.assertIn("kernel.pid_max", r.json()["message"])
        # One that fits later waits, says which table, and gives up with the capacity error.
        t, out = self.create_async(resourceLimits=big)
        waiting = self.wait_until(self.pending, timeout=5, msg="the second create to be Pending")
        st = waiting[0]["status"]
        self.assertEqual(st["reason"], "InsufficientCapacity", st)
        self.assertIn("pids: needs 6000, 4000 of 10000 free in the host's pid table", st["message"])
        t.join(30)
        self.assertEqual(out.get("status"), 503, out)
        self.assertEqual(out["body"]["code"], "SANDBOX::CAPACITY_TIMEOUT")
        self.assertIn("pid table", out["body"]["message"])
        # Smaller sandboxes still fit next to the first.
        small = self.create(resourceLimits={"cpu": "1", "memory": "256Mi", "pids": "3000"})["id"]
        # The default pids limit (4096) counts too: 6000 + 3000 + 4096 > 10000.
        t, out = self.create_async()
        self.wait_until(self.pending, timeout=5, msg="a default create to be Pending")
        self.assertEqual(self.client.delete_sandbox(a).status, 204)
        t.join(30)
        self.assertEqual(out.get("status"), 202, out)
        self.assert_platform_alive(small, out["body"]["id"])


class FileTableAdmission(AttackCase):
    """An open-file table of 10000 for sandboxes, RLIMIT_NOFILE 4096: two sandboxes fit."""

    corrald_kwargs = {"extra_args": ["--capacity", "cpu=100000,memory=100Ti,pids=1000000000,files=10000",
                                     "--sandbox-nofile", "4096", "--capacity-wait", "3"]}

    def test_nofile_sum_over_the_host_table(self):
        # Attack: start enough sandboxes that their open-file limits together pass the host's file
        # table.
        a = self.create()["id"]
        b = self.create()["id"]
        r = self.client.create_sandbox_raw()
        self.assertEqual(r.status, 503, r)
        self.assertEqual(r.json()["code"], "SANDBOX::CAPACITY_TIMEOUT")
        self.assertIn("files: needs 4096, 1808 of 10000 free in the host's open-file table",
                      r.json()["message"])
        self.assert_platform_alive(a, b)


if __name__ == "__main__":
    main()
