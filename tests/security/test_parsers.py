#!/usr/bin/env python3
"""
Escape suite: parsers of untrusted input (issue 8 items 10 and 11).

A network client (or the workload, which can reach execd too) sends inputs built to exhaust a
parser's stack or time: a glob of nested braces, deeply nested JSON, deep directory trees and long
paths. The workload plants symlinks into /proc so that the files API, run by PID 1, would act on
its own descriptors, builds trees deeper than any fd budget, and signals PID 1 to forge a crash
report. And inputs that used to pass validation and fail later as a 500 or a spawn error. Each
must be a clear 4xx (or a contained answer) while corrald, execd and the sandbox keep answering.
Last, a real fault with no usable stack (injected with ptrace into a standalone execd) must still
leave a crash report that names the signal.
"""
import ctypes
import json
import os
import platform
import signal
import sys
import time
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sec import AttackCase, log, main  # noqa: E402
from test_execd_standalone import Execd  # noqa: E402


def q(**params):
    return urllib.parse.urlencode(params)


def upload_body(path, data, boundary="----corralParsersBoundary"):
    """A /files/upload body: one metadata part naming path, then the file."""
    meta = json.dumps({"path": path}).encode() if not isinstance(path, bytes) else path
    b = boundary.encode()
    return (b"--" + b + b"\r\nContent-Disposition: form-data; name=\"metadata\"; "
            b"filename=\"metadata\"\r\n"
            b"Content-Type: application/json\r\n\r\n" + meta + b"\r\n"
            b"--" + b + b"\r\nContent-Disposition: form-data; name=\"file\"; filename=\"blob\"\r\n"
            b"Content-Type: application/octet-stream\r\n\r\n" + data + b"\r\n"
            b"--" + b + b"--\r\n"), "multipart/form-data; boundary=" + boundary


class ParserAttacks(AttackCase):

    def setUp(self):
        super().setUp()
        self.sid = self.create()["id"]

    def execd(self, method, path, **kw):
        return self.client.request(method, self.client.execd_path(self.sid, path), **kw)

    def assert_state_running(self):
        r = self.client.get_sandbox(self.sid)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["status"]["state"], "Running", r.json())

    def assert_4xx(self, r, *words):
        self.assertGreaterEqual(r.status, 400, r)
        self.assertLess(r.status, 500, r)
        for w in words:
            self.assertIn(w, r.text, r)

    # --- glob -----------------------------------------------------------------------------

    def test_glob_brace_bomb(self):
        # attack: GET /files/search with 2,000 nested braces (4 KB) to overflow PID 1's stack.
        self.run_ok(self.sid, "mkdir -p /tmp/g && touch /tmp/g/x /tmp/g/ab")
        r = self.execd("GET", "/files/search?" + q(path="/tmp/g", pattern="{" * 2000 + "}" * 2000))
        self.assertEqual(r.status, 400, r)
        self.assertIn("more than 64 brace groups", r.text)
        self.assert_state_running()
        self.assert_platform_alive(self.sid)

    def test_glob_expansion_bombs(self):
        # attack: brace patterns that recurse as deep without nesting, or multiply alternatives.
        self.run_ok(self.sid, "mkdir -p /tmp/g && touch /tmp/g/aaaaaaaaa")
        cases = [("{a}" * 1300, "brace groups"),
                 ("{a,b}" * 9, "more than 256 alternatives"),
                 ("{a,b}" * 8 + "z" * 1000, "more than 65536 bytes"),
                 ("a" * 5000, "longer than 4095 bytes")]
        for pattern, rule in cases:
            r = self.execd("GET", "/files/search?" + q(path="/tmp/g", pattern=pattern))
            self.assertEqual(r.status, 400, "%s...: %r" % (pattern[:20], r))
            self.assertIn(rule, r.text)
        # The largest legal forms still work.
        r = self.execd("GET", "/files/search?" + q(path="/tmp/g", pattern="{a,b}" * 8 + "a"))
        self.assertEqual(r.status, 200, r)
        self.assertEqual([e["path"] for e in r.json()], ["/tmp/g/aaaaaaaaa"])
        self.assert_platform_alive(self.sid)

    def test_glob_costly_match(self):
        # attack: a pattern that backtracks over every name of a big tree of long names.
        self.run_ok(self.sid, "python3 -c \"import os, itertools\nos.mkdir('/tmp/n')\n"
                              "for t in itertools.product('bcdefghi', repeat=4):\n"
                              "  open('/tmp/n/' + 'a' * 251 + ''.join(t), 'w').close()\"")
        # 128 classes then a '!' no name has: every name costs ~80k steps, 4,096 names ~330M.
        pattern = "*" + "[a-z]" * 128 + "!"
        t0 = time.monotonic()
        r = self.execd("GET", "/files/search?" + q(path="/tmp/n", pattern=pattern), timeout=120)
        took = time.monotonic() - t0
        self.assertEqual(r.status, 400, r)
        self.assertIn("too costly", r.text)
        log("costly glob refused after %.2f s" % took)
        self.assert_platform_alive(self.sid)

    # --- JSON depth -----------------------------------------------------------------------

    def test_deep_json_create(self):
        # attack: a create body nesting 100,000 arrays, to exhaust corrald's parser.
        deep = "[" * 100000 + "]" * 100000
        body = ('{"image":{"uri":"host"},"entrypoint":["sleep","infinity"],'
                '"resourceLimits":{"cpu":"1","memory":"512Mi"},"extensions":%s}' % deep)
        r = self.client.post("/v1/sandboxes", raw=body.encode())
        self.assert_4xx(r, "deeper than 32 levels")
        self.assert_platform_alive(self.sid)

    def test_deep_json_execd(self):
        # attack: deeply nested JSON to PID 1's command route and in upload metadata.
        deep = "[" * 50000 + "]" * 50000
        r = self.execd("POST", "/command", raw=('{"command":"true","envs":%s}' % deep).encode())
        self.assert_4xx(r, "deeper than 32 levels")
        data, ctype = upload_body(b'{"path":"/tmp/u","x":' + deep.encode() + b"}", b"hello")
        r = self.execd("POST", "/files/upload", raw=data, headers={"Content-Type": ctype})
        self.assert_4xx(r)
        self.assertNotIn("u", self.sh(self.sid, "ls /tmp").split())
        self.assert_state_running()
        self.assert_platform_alive(self.sid)

    # --- paths ------------------------------------------------------------------------------

    def test_deep_tree_walks(self):
        # attack: the workload builds 400-level trees (one past PATH_MAX) for search and list.
        self.run_ok(self.sid, "python3 -c \"import os\nfor top, name in (('/tmp/d', 'n'), "
                              "('/tmp/e', 'n' * 21)):\n  os.mkdir(top)\n  os.chdir(top)\n"
                              "  for i in range(400):\n    os.mkdir(name)\n    os.chdir(name)\n"
                              "  open('leaf.txt', 'w').close()\"")
        # Both walks stop at 256 levels: the leaf at level 401 is not reached.
        r = self.execd("GET", "/files/search?" + q(path="/tmp/d", pattern="*.txt"), timeout=60)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json(), [])
        r = self.execd("GET", "/directories/list?" + q(path="/tmp/d", depth="100000"), timeout=60)
        self.assertEqual(r.status, 200, r)
        levels = [e["path"][len("/tmp/d/"):].count("/") + 1 for e in r.json()]
        self.assertEqual(max(levels), 256)
        # Past PATH_MAX nothing is listed under a cut (wrong, duplicated) path.
        r = self.execd("GET", "/directories/list?" + q(path="/tmp/e", depth="100000"), timeout=60)
        self.assertEqual(r.status, 200, r)
        paths = [e["path"] for e in r.json()]
        self.assertEqual(len(paths), len(set(paths)))
        self.assertTrue(all(len(p) < 4096 for p in paths))
        self.assert_state_running()
        self.assert_platform_alive(self.sid)

    def test_deep_tree_removal(self):
        # attack: the workload builds trees 25,000 levels deep (more than the fd limit) in the
        # writable layer, so that removing them (files API, teardown) fails or overflows.
        sid = self.create()["id"]
        self.run_ok(sid, "python3 -c \"import os\nos.mkdir('/var/tmp/deep-x')\n"
                         "for top in ('/var/tmp/deep-x/a', '/var/tmp/deep-x/b'):\n"
                         "  os.mkdir(top)\n  os.chdir(top)\n  for i in range(25000):\n"
                         "    os.mkdir('d')\n    os.chdir('d')\n  open('leaf', 'w').close()\"",
                    read_timeout=300)
        # Through the files API: PID 1 removes it (it ran out of fds: a 500).
        path = self.client.execd_path(sid, "/directories?" + q(path="/var/tmp/deep-x/a"))
        r = self.client.delete(path, timeout=300)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(self.sh(sid, "ls /var/tmp/deep-x").split(), ["b"])
        self.assert_platform_alive(sid)
        # Through teardown: corrald removes the sandbox's directory (it retried forever).
        r = self.client.delete_sandbox(sid)
        self.assertEqual(r.status, 204, r)
        self.wait_until(lambda: not os.path.exists(self.corrald.sandbox_dir(sid)), timeout=120,
                        msg="the sandbox directory to be removed")
        self.assertNotIn("teardown of sandbox %s failed" % sid, self.corrald.log_tail(200))
        self.assert_platform_alive(self.sid)

    def test_long_and_deep_paths(self):
        # attack: client paths of 2,000 components and past PATH_MAX, through the files routes.
        deep = "/a" * 2000
        longp = "/" + "b" * 255 + ("/" + "c" * 255) * 20
        for p in (deep, longp, "/" + "x" * 300):
            for route in ("/files/info", "/files/download", "/directories/list"):
                r = self.execd("GET", "%s?%s" % (route, q(path=p)))
                self.assert_4xx(r)
        r = self.execd("POST", "/directories", body={deep: {"mode": 755}})
        self.assert_4xx(r, "more than 256 components")
        self.assertEqual(self.sh(self.sid, "test -e /a && echo made || echo none").strip(), "none")
        # 2,000 ".." are cleaned lexically and stay at the sandbox's root.
        r = self.execd("GET", "/files/info?" + q(path="/.." * 2000 + "/etc/hostname"))
        self.assertEqual(r.status, 200, r)
        self.assertEqual([v["path"] for v in r.json().values()], ["/etc/hostname"], r)
        self.assert_platform_alive(self.sid)

    # --- magic links ----------------------------------------------------------------------

    def test_magic_links_planted_by_the_workload(self):
        # attack: links to /proc/1/fd/N, /proc/1/root, /proc/1/cwd so PID 1 opens its own files.
        out = self.sh(self.sid, "ls /proc/1/fd")
        fds = [int(x) for x in out.split()]
        self.assertTrue(fds, out)
        script = ["mkdir -p /tmp/m"]
        for n in fds:
            script.append("ln -s /proc/1/fd/%d /tmp/m/fd%d" % (n, n))
            script.append("ln -s /proc/self/fd/%d /tmp/m/self%d" % (n, n))
        script += ["ln -s /proc/1/root /tmp/m/root", "ln -s /proc/1/cwd /tmp/m/cwd",
                   "ln -s /proc/1/fd /tmp/m/fddir", "ln -s /proc/thread-self/root /tmp/m/tself"]
        self.run_ok(self.sid, " && ".join(script))
        paths = ["/tmp/m/fd%d" % n for n in fds] + ["/tmp/m/self%d" % n for n in fds]
        paths += ["/proc/1/fd/%d" % n for n in fds]
        paths += ["/tmp/m/root/etc/hostname", "/tmp/m/cwd/etc/hostname",
                  "/tmp/m/tself/etc/hostname", "/proc/1/root/etc/hostname",
                  "/proc/self/cwd/etc/hostname"]
        for p in paths:
            r = self.execd("GET", "/files/download?" + q(path=p))
            self.assert_4xx(r)
            # info describes a planted link itself (lstat), never what it points to.
            r = self.execd("GET", "/files/info?" + q(path=p))
            if r.status == 200:
                self.assertEqual(r.json()[p]["type"], "symlink", r)
            else:
                self.assert_4xx(r)
        for p in ("/tmp/m/fddir/new", "/tmp/m/root/tmp/new", "/tmp/m/fd%d" % fds[-1]):
            data, ctype = upload_body(p, b"planted")
            r = self.execd("POST", "/files/upload", raw=data, headers={"Content-Type": ctype})
            self.assert_4xx(r)
        r = self.execd("POST", "/directories", body={"/tmp/m/root/tmp/newdir": {"mode": 755}})
        self.assert_4xx(r)
        r = self.execd("GET", "/directories/list?" + q(path="/tmp/m/fddir"))
        self.assert_4xx(r)
        left = self.sh(self.sid, "ls /tmp/newdir /tmp/new 2>&1 | grep -c 'No such'")
        self.assertEqual(left.strip(), "2")
        self.assert_state_running()
        self.assert_platform_alive(self.sid)

    # --- the crash report -------------------------------------------------------------------

    def test_fault_signals_from_the_workload(self):
        # attack: the workload sends SIGSEGV/SIGABRT/SIGBUS to PID 1 to forge a crash report.
        self.run_ok(self.sid, "kill -SEGV 1; kill -ABRT 1; kill -BUS 1; kill -FPE 1; kill -ILL 1; "
                              "sleep 0.2")
        d = self.corrald.sandbox_dir(self.sid)
        reports = [p for p in (os.path.join(d, "exit.json"), os.path.join(d, "run", "exit.json"))
                   if os.path.exists(p)]
        self.assertEqual(reports, [], "a crash report was written for signals the workload sent")
        self.assert_state_running()
        self.assert_platform_alive(self.sid)

    # --- validation gaps (item 10) ----------------------------------------------------------

    def test_memory_limit_too_small(self):
        # attack: resourceLimits.memory "1" (one byte) reached the runtime and came back a 500.
        for mem in ("1", "1Ki", "5Mi"):
            r = self.client.create_sandbox_raw(resourceLimits={"cpu": "1", "memory": mem})
            if r.status == 202:
                self.addCleanup(self._cleanup_sandbox, r.json()["id"])
            self.assertEqual(r.status, 422, "%s: %r" % (mem, r))
            self.assertIn("resourceLimits.memory", r.json()["message"])
            self.assertIn("6Mi", r.json()["message"])
            self.assertEqual(r.json()["detail"][0]["loc"], ["body", "resourceLimits", "memory"])
        self.assert_platform_alive(self.sid)

    def test_pids_and_exec_strings(self):
        # attack: pids "1" and a 200 KB env value or argument, which failed in the runtime (500).
        cases = [({"resourceLimits": {"cpu": "1", "memory": "64Mi", "pids": "1"}}, "pids"),
                 ({"env": {"A": "x" * 200000}}, "env"),
                 ({"entrypoint": ["sleep", "infinity", "y" * 200000]}, "entrypoint"),
                 ({"platform": {"os": 5}}, "platform")]
        for spec, field in cases:
            r = self.client.create_sandbox_raw(**spec)
            if r.status == 202:
                self.addCleanup(self._cleanup_sandbox, r.json()["id"])
            self.assertEqual(r.status, 422, "%s: %r" % (field, r))
            self.assertIn(field, r.json()["detail"][0]["loc"], r.json())
        self.assert_platform_alive(self.sid)

    def test_command_uid_out_of_range(self):
        # attack: uid/gid 4294967295 ((uid_t)-1, "no change" to setuid) accepted, failing at spawn.
        for body, field in (({"command": "id -u", "uid": 4294967295}, "uid"),
                            ({"command": "id -u", "uid": 1000, "gid": 4294967295}, "gid"),
                            ({"command": "id -u", "uid": 4294967296}, "uid"),
                            ({"command": "id -u", "uid": -1}, "uid")):
            r = self.execd("POST", "/command", body=body)
            self.assertEqual(r.status, 400, "%r: %r" % (body, r))
            self.assertIn("'%s'" % field, r.json()["message"])
        res = self.client.run(self.sid, "id -u", uid=65534)
        self.assertEqual(res.http_status, 200, res)
        self.assertEqual(res.stdout.strip(), "65534")
        self.assert_platform_alive(self.sid)


class CrashReport(unittest.TestCase):
    """A real fault in corral-execd (run standalone), injected from outside with ptrace."""

    def test_fault_without_a_usable_stack_is_reported(self):
        # attack: PID 1 faults with no usable stack (as on a stack overflow): it must still report.
        if platform.machine() != "x86_64":
            self.skipTest("register layout known for x86_64 only")
        e = Execd()
        self.addCleanup(e.stop)
        pid = e.proc.pid
        libc = ctypes.CDLL(None, use_errno=True)
        libc.ptrace.restype = ctypes.c_long
        libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
        PTRACE_GETREGS, PTRACE_SETREGS, PTRACE_ATTACH, PTRACE_DETACH = 12, 13, 16, 17
        if libc.ptrace(PTRACE_ATTACH, pid, None, None) < 0:
            self.skipTest("ptrace: %s" % os.strerror(ctypes.get_errno()))
        os.waitpid(pid, 0)
        regs = (ctypes.c_ulong * 27)()
        self.assertEqual(libc.ptrace(PTRACE_GETREGS, pid, None, ctypes.addressof(regs)), 0)
        regs[16] = 0                  # rip: jump to address 0
        regs[19] = 0x10               # rsp: no stack to push a signal frame on
        regs[15] = 0xffffffffffffffff  # orig_rax: no syscall restart
        self.assertEqual(libc.ptrace(PTRACE_SETREGS, pid, None, ctypes.addressof(regs)), 0)
        self.assertEqual(libc.ptrace(PTRACE_DETACH, pid, None, None), 0)
        rc = e.proc.wait(10)
        self.assertEqual(rc, -signal.SIGSEGV, e.logtext())
        with open(os.path.join(e.run, "exit.json")) as f:
            report = json.load(f)
        self.assertEqual(report["exitCode"], 139, report)
        self.assertIn("signal 11 (SIGSEGV", report["message"], report)


if __name__ == "__main__":
    main()
