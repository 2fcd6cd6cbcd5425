#!/usr/bin/env python3
"""Isolation of a sandbox from the host and from other sandboxes: pid/mount/net/uts namespaces,
the private writable layer, private /tmp, hidden state dir and /root, capabilities,
no_new_privs, seccomp."""

import os
import secrets
import socket
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import CorralTestCase, main  # noqa: E402

CAP_NET_ADMIN = 12
CAP_SYS_MODULE = 16
CAP_SYS_PTRACE = 19
CAP_SYS_ADMIN = 21


def proc_status(text):
    out = {}
    for line in text.splitlines():
        k, _, v = line.partition(":")
        out[k.strip()] = v.strip()
    return out


LIST_PROCS = ("for p in /proc/[0-9]*; do printf '%s ' \"${p#/proc/}\"; "
              "tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done")


class Isolation(CorralTestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.marker_a = str(86000 + secrets.randbelow(399))
        cls.marker_b = str(86400 + secrets.randbelow(399))
        ids = []
        for m in (cls.marker_a, cls.marker_b):
            r = cls.client.create_sandbox_raw(entrypoint=["sleep", m])
            if r.status != 202:
                for sid in ids:
                    cls.client.delete_sandbox(sid)
                cls.tearDownClass()
                raise RuntimeError("cannot create sandboxes: %r" % r)
            ids.append(r.json()["id"])
        cls.a, cls.b = ids

    @classmethod
    def tearDownClass(cls):
        for sid in (getattr(cls, "a", None), getattr(cls, "b", None)):
            if sid:
                cls.client.delete_sandbox(sid)
        super().tearDownClass()

    def procs(self, sid):
        out = self.sh(sid, LIST_PROCS)
        procs = {}
        for line in out.splitlines():
            pid, _, cmd = line.partition(" ")
            procs[int(pid)] = cmd.strip()
        return procs

    # --- pid namespace -----------------------------------------------------------------------

    def test_pid_namespace(self):
        procs = self.procs(self.a)
        self.assertIn(1, procs)
        self.assertIn("corral-execd", procs[1], procs)
        self.assertEqual(self.sh(self.a, "cat /proc/1/comm"), "corral-execd")
        self.assertLess(len(procs), 12, "only the sandbox's processes are visible: %r" % procs)
        cmds = " | ".join(procs.values())
        self.assertIn("sleep %s" % self.marker_a, cmds, "the entrypoint runs in the sandbox")
        self.assertNotIn("sleep %s" % self.marker_b, cmds, "the other sandbox's entrypoint is hidden")
        self.assertNotIn("corrald", cmds)
        # the host's PID 1 and this test runner are invisible
        self.assertNotIn(str(os.getpid()), [str(p) for p in procs if procs[p].startswith("python")])
        with open("/proc/1/comm") as f:
            host_comm1 = f.read().strip()
        self.assertNotEqual(host_comm1, "corral-execd")
        # ps agrees, where installed
        res = self.client.run(self.a, "command -v ps >/dev/null && ps -e -o pid=,comm=")
        if res.exit_code == 0:
            pids = [int(l.split()[0]) for l in res.stdout_lines if l.strip()]
            self.assertLess(len(pids), 12, res.stdout_lines)

    def test_other_sandbox_processes_hidden(self):
        pb = self.procs(self.b)
        cmds = " | ".join(pb.values())
        self.assertIn("sleep %s" % self.marker_b, cmds)
        self.assertNotIn("sleep %s" % self.marker_a, cmds)
        # the sandbox's own processes are real host processes in its cgroup, but they are not
        # reachable by pid from another sandbox
        res = self.client.run(self.b, "kill -0 %d" % self.corrald.pid1(self.a))
        # a small pid may exist in b's namespace by accident; it must not be a's execd
        if res.exit_code == 0:
            comm = self.sh(self.b, "cat /proc/%d/cmdline | tr '\\0' ' '" % self.corrald.pid1(self.a))
            self.assertNotIn("sleep %s" % self.marker_a, comm)

    # --- mount -------------------------------------------------------------------------------

    def test_cannot_mount(self):
        res = self.client.run(self.a, "mkdir -p /tmp/mnt-probe && mount -t tmpfs none /tmp/mnt-probe")
        self.assertNotEqual(res.exit_code, 0, "mount must fail inside a sandbox: %r" % res)
        self.assertIsNotNone(res.exit_code, res)
        res = self.client.run(self.a, "mount --bind /tmp /mnt")
        self.assertNotEqual(res.exit_code, 0, res)
        # the syscall itself is refused (seccomp EPERM or missing CAP_SYS_ADMIN)
        res = self.client.run(self.a, "python3 -c \"import ctypes,os; l=ctypes.CDLL(None, use_errno=True); "
                                      "r=l.mount(b'none', b'/tmp', b'tmpfs', 0, None); "
                                      "print(r, ctypes.get_errno())\"")
        if res.exit_code == 0:
            r, e = res.stdout.split()
            self.assertEqual(r, "-1", res)
            self.assertIn(int(e), (1, 38), "EPERM or ENOSYS: %r" % res)  # EPERM, ENOSYS

    def test_unshare_and_escape_syscalls_refused(self):
        res = self.client.run(self.a, "unshare -U -r true")
        self.assertNotEqual(res.exit_code, 0, "new user namespaces would reopen mount: %r" % res)
        res = self.client.run(self.a, "command -v chroot >/dev/null && chroot / true && "
                                      "echo chroot-ok; echo 1 > /proc/sys/kernel/sysrq && echo sysrq-written")
        self.assertNotIn("sysrq-written", res.stdout, res)

    # --- network -----------------------------------------------------------------------------

    def test_cannot_reach_host_loopback(self):
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        port = srv.getsockname()[1]
        accepted = []
        stop = threading.Event()

        def acceptor():
            srv.settimeout(0.2)
            while not stop.is_set():
                try:
                    c, _ = srv.accept()
                    accepted.append(c)
                except OSError:
                    pass
        th = threading.Thread(target=acceptor, daemon=True)
        th.start()
        self.addCleanup(srv.close)
        self.addCleanup(stop.set)
        # positive control: the host itself can connect
        s = socket.create_connection(("127.0.0.1", port), timeout=2)
        s.close()
        self.wait_until(lambda: len(accepted) == 1, 3, msg="host control connection")
        res = self.client.run(self.a, "timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d' && echo CONNECTED" % port)
        self.assertNotIn("CONNECTED", res.stdout, res)
        self.assertNotEqual(res.exit_code, 0)
        res = self.client.run(self.a, "python3 -c \"import socket; s=socket.socket(); s.settimeout(3); "
                                      "s.connect(('127.0.0.1', %d)); print('CONNECTED')\"" % port)
        self.assertNotIn("CONNECTED", res.stdout, res)
        self.assertEqual(len(accepted), 1, "the sandbox reached the host's listener")
        for c in accepted:
            c.close()

    def test_only_loopback_interface(self):
        out = self.sh(self.a, "cat /proc/net/dev")
        ifaces = [l.split(":")[0].strip() for l in out.splitlines()[2:] if ":" in l]
        self.assertEqual(ifaces, ["lo"], out)
        flags = int(self.sh(self.a, "cat /sys/class/net/lo/flags"), 16)
        self.assertTrue(flags & 0x1, "lo is up inside (flags %#x)" % flags)
        with open("/proc/net/dev") as f:
            host_ifaces = [l.split(":")[0].strip() for l in f.read().splitlines()[2:]]
        self.assertGreaterEqual(len(host_ifaces), 1)
        res = self.client.run(self.a, "command -v ip >/dev/null && ip -o link")
        if res.exit_code == 0:
            names = [l.split(":")[1].strip() for l in res.stdout_lines if l.strip()]
            self.assertEqual(names, ["lo"], res.stdout_lines)
        # loopback inside works: a listener inside the sandbox is reachable inside
        res = self.client.run(self.a, "python3 -c \"import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); "
                                      "s.listen(1); c=socket.create_connection(s.getsockname(), 2); "
                                      "print('LOOP-OK')\"")
        self.assertEqual(res.stdout_lines, ["LOOP-OK"], res)

    def test_network_namespace_distinct(self):
        a = self.sh(self.a, "readlink /proc/self/ns/net")
        b = self.sh(self.b, "readlink /proc/self/ns/net")
        host = os.readlink("/proc/self/ns/net")
        self.assertNotEqual(a, b)
        self.assertNotEqual(a, host)
        for ns in ("mnt", "pid", "uts", "ipc", "cgroup"):
            inside = self.sh(self.a, "readlink /proc/self/ns/%s" % ns)
            self.assertNotEqual(inside, os.readlink("/proc/self/ns/%s" % ns), ns)

    # --- uts ---------------------------------------------------------------------------------

    def test_hostname(self):
        host = socket.gethostname()
        inside = self.sh(self.a, "hostname")
        self.assertNotEqual(inside, host)
        self.assertEqual(inside, self.a[:12])
        self.assertEqual(self.sh(self.a, "cat /etc/hostname"), inside)
        self.assertEqual(self.sh(self.b, "hostname"), self.b[:12])
        hosts = self.sh(self.a, "cat /etc/hosts")
        self.assertIn("127.0.0.1", hosts)
        self.assertTrue(os.path.exists("/etc/hostname"))

    # --- filesystem --------------------------------------------------------------------------

    def test_writes_do_not_reach_host_or_other_sandbox(self):
        tok = secrets.token_hex(4)
        # Sandbox root owns its own layer's root and /etc; the host's directories belong to
        # nobody inside (the host image is not idmapped), so writing there is refused.
        paths = ["/etc/corral-probe-%s" % tok, "/corral-probe-%s" % tok]
        for p in ["/usr/local/corral-probe-%s" % tok, "/var/corral-probe-%s" % tok]:
            res = self.client.run(self.a, "echo %s > %s" % (tok, p))
            self.assertNotEqual(res.exit_code, 0, "host directory writable: %r" % res)
            self.assertIn("Permission denied", res.stderr)
            self.assertFalse(os.path.exists(p), "%s leaked to the host" % p)
        for p in paths:
            self.run_ok(self.a, "echo %s > %s" % (tok, p))
            self.assertEqual(self.sh(self.a, "cat %s" % p), tok, "the write is visible inside")
            self.assertFalse(os.path.exists(p), "%s leaked to the host" % p)
            res = self.client.run(self.b, "test -e %s" % p)
            self.assertEqual(res.exit_code, 1, "%s leaked to the other sandbox" % p)
        # deleting a host file inside does not delete it on the host
        self.run_ok(self.a, "rm -f /etc/os-release")
        self.assertEqual(self.client.run(self.a, "test -e /etc/os-release").exit_code, 1)
        self.assertTrue(os.path.exists("/etc/os-release"))
        self.assertEqual(self.client.run(self.b, "test -e /etc/os-release").exit_code, 0)

    def test_tmp_private(self):
        tok = secrets.token_hex(4)
        hostfile = "/tmp/corral-host-probe-%s" % tok
        with open(hostfile, "w") as f:
            f.write("host")
        self.addCleanup(os.unlink, hostfile)
        self.assertEqual(self.client.run(self.a, "test -e %s" % hostfile).exit_code, 1,
                         "host /tmp visible inside")
        self.run_ok(self.a, "echo a > /tmp/sbx-probe-%s" % tok)
        self.assertFalse(os.path.exists("/tmp/sbx-probe-%s" % tok))
        self.assertEqual(self.client.run(self.b, "test -e /tmp/sbx-probe-%s" % tok).exit_code, 1)
        self.run_ok(self.a, "test -w /tmp && test -k /tmp")

    def test_state_dir_and_root_hidden(self):
        tok = secrets.token_hex(4)
        res = self.client.run(self.a, "ls %s" % self.corrald.state_dir)
        self.assertNotEqual(res.exit_code, 0, "state dir visible inside: %r" % res)
        res = self.client.run(self.a, "ls %s" % self.corrald.tmp)
        self.assertNotEqual(res.exit_code, 0, "test temp dir visible inside: %r" % res)
        rootprobe = "/root/corral-probe-%s" % tok
        with open(rootprobe, "w") as f:
            f.write("secret")
        self.addCleanup(os.unlink, rootprobe)
        res = self.client.run(self.a, "cat %s" % rootprobe)
        self.assertNotEqual(res.exit_code, 0, "/root of the host visible inside: %r" % res)
        self.assertNotIn("secret", res.stdout)
        # execd's socket and state are on the host side only: nothing of them inside
        self.assertEqual(self.client.run(self.a, "test -e /.corral").exit_code, 1)

    def test_proc_and_sys_hardened(self):
        res = self.client.run(self.a, "echo 1 > /proc/sys/vm/drop_caches")
        self.assertNotEqual(res.exit_code, 0, "/proc/sys writable: %r" % res)
        res = self.client.run(self.a, "head -c 1 /proc/kcore 2>/dev/null | wc -c")
        self.assertEqual(res.stdout.strip(), "0", "/proc/kcore readable: %r" % res)
        res = self.client.run(self.a, "touch /sys/corral-probe")
        self.assertNotEqual(res.exit_code, 0, "/sys writable: %r" % res)
        res = self.client.run(self.a, "ls /dev")
        devs = set(res.stdout.split())
        self.assertIn("null", devs)
        self.assertNotIn("sda", devs)
        self.assertNotIn("vda", devs)
        self.assertNotIn("mem", devs)
        res = self.client.run(self.a, "head -c 1 /dev/mem")
        self.assertNotEqual(res.exit_code, 0)

    # --- privileges --------------------------------------------------------------------------

    def test_capabilities_nnp_seccomp(self):
        st = proc_status(self.sh(self.a, "cat /proc/self/status"))
        capeff = int(st["CapEff"], 16)
        capbnd = int(st["CapBnd"], 16)
        for cap, name in ((CAP_SYS_ADMIN, "SYS_ADMIN"), (CAP_SYS_PTRACE, "SYS_PTRACE"),
                          (CAP_SYS_MODULE, "SYS_MODULE"), (CAP_NET_ADMIN, "NET_ADMIN")):
            self.assertFalse(capeff & (1 << cap), "CapEff has CAP_%s (%#x)" % (name, capeff))
            self.assertFalse(capbnd & (1 << cap), "CapBnd has CAP_%s (%#x)" % (name, capbnd))
        self.assertEqual(st["NoNewPrivs"], "1")
        self.assertEqual(st["Seccomp"], "2")
        # PID 1 (execd) is confined too
        st1 = proc_status(self.sh(self.a, "cat /proc/1/status"))
        self.assertFalse(int(st1["CapEff"], 16) & (1 << CAP_SYS_ADMIN))
        self.assertEqual(st1["Seccomp"], "2")

    def test_seccomp_blocks_escape_syscalls(self):
        import platform
        if platform.machine() != "x86_64":
            self.skipTest("syscall numbers below are x86_64")
        calls = {"bpf": 321, "kexec_load": 246, "init_module": 175, "finit_module": 313,
                 "open_by_handle_at": 304, "perf_event_open": 298, "add_key": 248, "keyctl": 250,
                 "mount": 165, "umount2": 166, "pivot_root": 155, "swapon": 167, "reboot": 169,
                 "setns": 308, "unshare(NEWNS)": (272, 0x00020000)}
        lines = []
        for name, nr in calls.items():
            nr, arg = (nr if isinstance(nr, tuple) else (nr, 0))
            lines.append("r = l.syscall(%d, %d, 0, 0, 0, 0); print(%r, r, ctypes.get_errno())" % (nr, arg, name))
        script = "import ctypes\nl = ctypes.CDLL(None, use_errno=True)\n" + "\n".join(lines)
        res = self.client.run(self.a, "python3 - <<'EOF'\n%s\nEOF" % script)
        self.assertEqual(res.exit_code, 0, res)
        got = {}
        for line in res.stdout_lines:
            name, r, e = line.rsplit(" ", 2)
            got[name] = (int(r), int(e))
        self.assertEqual(set(got), set(calls))
        for name, (r, e) in got.items():
            self.assertEqual(r, -1, "%s succeeded inside the sandbox" % name)
            self.assertIn(e, (1, 38), "%s: errno %d (want EPERM or ENOSYS)" % (name, e))

    def test_cgroup_namespace_and_generated_etc(self):
        cg = self.sh(self.a, "cat /proc/self/cgroup")
        self.assertNotIn(self.corrald.cgroup_name, cg, "the cgroup namespace hides the host path")
        self.assertNotIn(self.a, cg)
        hosts = self.sh(self.a, "cat /etc/hosts")
        self.assertIn("localhost", hosts)
        self.assertIn(self.a[:12], hosts)
        self.run_ok(self.a, "test -f /etc/resolv.conf")
        # pivot_root: the old root is gone, / is the overlay
        res = self.client.run(self.a, "grep -c ' / / ' /proc/self/mountinfo")
        self.assertEqual(res.stdout.strip(), "1", res)
        mi = self.sh(self.a, "cut -d' ' -f5 /proc/self/mountinfo")
        self.assertNotIn(self.corrald.state_dir, mi, "host paths of mount points are hidden")

    def test_two_sandboxes_files(self):
        tok = secrets.token_hex(4)
        self.run_ok(self.a, "mkdir -p /work-%s && echo mine > /work-%s/f" % (tok, tok))
        self.assertEqual(self.client.run(self.b, "cat /work-%s/f" % tok).exit_code, 1)
        # neither can reach the other's root through /proc
        pid1_a = self.corrald.pid1(self.a)
        res = self.client.run(self.b, "ls /proc/%d/root/work-%s" % (pid1_a, tok))
        self.assertNotEqual(res.exit_code, 0, res)



def make_busybox_image(root):
    """A minimal image: busybox-static and its applets, the usual empty top-level dirs."""
    import shutil
    import subprocess
    bb = shutil.which("busybox") or "/bin/busybox"
    os.makedirs(os.path.join(root, "bin"))
    shutil.copy(bb, os.path.join(root, "bin", "busybox"))
    applets = subprocess.run([bb, "--list"], stdout=subprocess.PIPE, check=True).stdout.decode().split()
    for a in applets:
        if a != "busybox":
            os.symlink("busybox", os.path.join(root, "bin", a))
    for d in ("proc", "sys", "dev", "tmp", "etc", "root", "usr", "var"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    with open(os.path.join(root, "etc", "image-marker"), "w") as f:
        f.write("busybox-image\n")


class ImageDir(CorralTestCase):
    """Images from --image-dir: each subdirectory is a rootfs used read-only under an overlay."""

    @classmethod
    def setUpClass(cls):
        import shutil
        import tempfile
        from harness import binary, elf_is_static
        if not (shutil.which("busybox") or os.path.exists("/bin/busybox")):
            raise unittest.SkipTest("busybox is not installed (apt-get install busybox-static)")
        execd = os.path.realpath(binary("corral-execd"))
        if os.path.exists(execd) and not elf_is_static(execd):
            raise unittest.SkipTest("%s is dynamically linked (a sanitizer build): it cannot run in an "
                                    "image without the host's libraries" % execd)
        cls.images = tempfile.mkdtemp(prefix="corral-test-images-")
        make_busybox_image(os.path.join(cls.images, "bb"))
        cls.corrald_kwargs = {"image_dir": cls.images}
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            from harness import safe_rmtree
            safe_rmtree(cls.images)

    def test_busybox_image(self):
        sid = self.create(image={"uri": "bb"}, entrypoint=["sleep", "100000"])["id"]
        g = self.client.get_sandbox(sid).json()
        self.assertEqual(g.get("image", {}).get("uri", "bb"), "bb")
        self.assertEqual(self.sh(sid, "cat /etc/image-marker"), "busybox-image")
        self.assertEqual(self.sh(sid, "echo hi from busybox"), "hi from busybox")
        res = self.client.run(sid, "test -e /usr/bin/python3")
        self.assertEqual(res.exit_code, 1, "the host's userland is not in a non-host image")
        self.assertEqual(self.sh(sid, "cat /proc/1/comm"), "corral-execd")
        self.assertIn("sleep 100000", self.sh(sid, "cat /proc/*/cmdline | tr '\\0' ' '"))
        self.assertEqual(self.client.run(sid, "exit 9").exit_code, 9)
        # writes land in the sandbox's layer, never in the image
        self.run_ok(sid, "echo changed > /etc/image-marker && echo new > /bin/new-file && rm /bin/ls")
        self.assertEqual(self.sh(sid, "cat /etc/image-marker"), "changed")
        with open(os.path.join(self.images, "bb", "etc", "image-marker")) as f:
            self.assertEqual(f.read(), "busybox-image\n")
        self.assertFalse(os.path.exists(os.path.join(self.images, "bb", "bin", "new-file")))
        self.assertTrue(os.path.lexists(os.path.join(self.images, "bb", "bin", "ls")))
        sid2 = self.create(image={"uri": "bb"}, entrypoint=["sleep", "100000"])["id"]
        self.assertEqual(self.sh(sid2, "cat /etc/image-marker"), "busybox-image")
        self.assertEqual(self.sh(sid2, "hostname"), sid2[:12])

    def test_unknown_image_lists_images(self):
        r = self.client.create_sandbox_raw(image={"uri": "nope"})
        if r.status == 202:
            self.addCleanup(self._cleanup_sandbox, r.json()["id"])
        self.assertGreaterEqual(r.status, 400, r)
        self.assertLess(r.status, 500, r)
        msg = r.text
        self.assertIn("nope", msg)
        self.assertIn("bb", msg)
        self.assertIn("host", msg)

    def test_host_image_still_default(self):
        sid = self.create()["id"]
        self.assertEqual(self.client.run(sid, "test -e /usr/bin/python3").exit_code, 0)


if __name__ == "__main__":
    main()
