#!/usr/bin/env python3
"""
The seams between corrald and a sandbox (issue 8 items 1-4 and 8): how corrald reaches execd,
where execd's state and exit report live, what sandbox root may read of the host, and what a
sandbox can learn about other sandboxes. Every test is an attack from inside a sandbox (or, where
it says so, a hostile report on the host side that stands for a taken-over execd) and asserts it
is denied or contained and that corrald and the other sandboxes keep answering.
"""
import json
import os
import secrets
import signal
import stat
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sec import AttackCase, CommandStream, main  # noqa: E402

# A fake execd: answers every HTTP request on a unix socket with a forged, successful test run.
FAKE_EXECD_PY = r'''
import os, socket, sys, threading
path = sys.argv[1]
os.makedirs(os.path.dirname(path), exist_ok=True)
try:
    os.unlink(path)
except FileNotFoundError:
    pass
s = socket.socket(socket.AF_UNIX)
s.bind(path)
s.listen(64)
body = (b'{"type":"init","text":"forged","timestamp":1}\n\n'
        b'{"type":"stdout","text":"42 passed","timestamp":1}\n\n'
        b'{"type":"execution_complete","execution_time":1,"timestamp":1}\n\n')
resp = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: %d\r\n\r\n"
        % len(body)) + body
def serve(c):
    try:
        c.recv(65536)
        c.sendall(resp)
    finally:
        c.close()
print("listening", flush=True)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
'''

# Everything a process in the sandbox could try against PID 1 (corral-execd) to reach its socket,
# its state or its memory. Prints one JSON object: name -> "ok" or the error.
PROBE_PID1_PY = r'''
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
out = {}
def attempt(name, fn):
    try:
        fn()
        out[name] = "ok"
    except OSError as e:
        out[name] = e.strerror or str(e)
# (Listing /proc/1/fd shows fd numbers only: the directory belongs to sandbox root. Following
# or reading any of them needs ptrace access, which a non-dumpable PID 1 denies.)
attempt("open /proc/1/fd/3", lambda: os.close(os.open("/proc/1/fd/3", os.O_RDONLY)))
attempt("open /proc/1/fd/4", lambda: os.close(os.open("/proc/1/fd/4", os.O_RDONLY)))
attempt("list /proc/1/fd/4/execs", lambda: os.listdir("/proc/1/fd/4/execs"))
attempt("open /proc/1/mem rw", lambda: open("/proc/1/mem", "r+b").close())
attempt("read /proc/1/environ", lambda: open("/proc/1/environ", "rb").read())
attempt("readlink /proc/1/exe", lambda: os.readlink("/proc/1/exe"))
attempt("readlink /proc/1/cwd", lambda: os.readlink("/proc/1/cwd"))
def getfd():
    pidfd = libc.syscall(434, 1, 0)  # pidfd_open(1, 0)
    if pidfd < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
    fd = libc.syscall(438, pidfd, 3, 0)  # pidfd_getfd(pidfd, 3, 0): execd's listening socket
    if fd < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
attempt("pidfd_getfd(PID 1, 3)", getfd)
def vm_read():
    buf = ctypes.create_string_buffer(16)
    local = (ctypes.c_void_p * 2)(ctypes.cast(buf, ctypes.c_void_p), 16)
    remote = (ctypes.c_void_p * 2)(0x400000, 16)
    r = libc.syscall(310, 1, local, 1, remote, 1, 0)  # process_vm_readv
    if r < 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))
attempt("process_vm_readv(PID 1)", vm_read)
print(json.dumps(out))
'''


# Writes "42 passed" into the stdout of every process whose command line names the grader.
INJECTOR_PY = r'''
import os, time
me = os.getpid()
while True:
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) in (1, me):
            continue
        try:
            with open("/proc/%s/cmdline" % p, "rb") as f:
                if b"grader-marker" not in f.read():
                    continue
            fd = os.open("/proc/%s/fd/1" % p, os.O_WRONLY)
            os.write(fd, b"42 passed\n")
            os.close(fd)
        except OSError:
            pass
    time.sleep(0.002)
'''


class Seams(AttackCase):

    class_sandboxes = ("a", "b")

    def pid1(self, sid):
        with open(os.path.join(self.corrald.sandbox_dir(sid), "pid")) as f:
            return int(f.read().split()[0])

    def wait_ended(self, sid, timeout=20):
        def ended():
            r = self.client.get_sandbox(sid)
            st = r.json()["status"] if r.status == 200 else {}
            return st.get("state") in ("Terminated", "Failed") and st
        return self.wait_until(ended, timeout, msg="sandbox %s to end" % sid)

    # --- corrald reaches execd through nothing the sandbox can replace --------------------------

    def test_fake_execd_cannot_answer_for_the_sandbox(self):
        # Attack: root in sandbox A serves a fake execd (every command "42 passed", exit 0) where
        # execd's socket used to be and plants symlinks there to a host socket and to sandbox B.
        self.run_ok(self.a, "mkdir -p /.corral /run && "
                    "ln -sf /proc/%d/root/.corral/execd.sock /.corral/other.sock && "
                    "ln -sf /run/dbus/system_bus_socket /.corral/host.sock" % self.pid1(self.b))
        self.run_ok(self.a, "cat > /tmp/fake.py <<'EOF'\n%s\nEOF" % FAKE_EXECD_PY)
        self.run_ok(self.a, "nohup python3 /tmp/fake.py /.corral/execd.sock >/tmp/fake.log 2>&1 &")
        self.wait_until(lambda: "listening" in self.sh(self.a, "cat /tmp/fake.log"), 10,
                        msg="the fake execd to listen")
        # The harness's grading call still gets the real result, from the real execd, also on a
        # new connection (a command streaming meanwhile holds the pooled one).
        held = CommandStream("127.0.0.1", self.corrald.port, self.a, "sleep 3; echo held")
        self.addCleanup(held.abort)
        self.assertEqual(held.next_event()["type"], "init")
        res = self.client.run(self.a, "echo real-run; exit 1")
        self.assertEqual(res.exit_code, 1, res)
        self.assertEqual(res.stdout.strip(), "real-run")
        self.assertNotIn("42 passed", res.stdout)
        # And a command for B runs in B, not in A.
        self.run_ok(self.a, "touch /tmp/i-am-a")
        self.assertEqual(self.client.run(self.b, "test -e /tmp/i-am-a").exit_code, 1)
        self.assert_platform_alive(self.a, self.b)

    # --- PID 1 cannot be traced, read or robbed -------------------------------------------------

    def test_pid1_fds_memory_and_socket_out_of_reach(self):
        # Attack: steal execd's listening socket (pidfd_getfd), write its memory (/proc/1/mem),
        # or reach its state dir through /proc/1/fd, /proc/1/cwd, /proc/1/exe.
        self.run_ok(self.a, "cat > /tmp/probe.py <<'EOF'\n%s\nEOF" % PROBE_PID1_PY)
        out = json.loads(self.sh(self.a, "python3 /tmp/probe.py"))
        for name, result in out.items():
            self.assertNotEqual(result, "ok", "%s succeeded from inside the sandbox: %r"
                                % (name, out))
        self.assert_platform_alive(self.a)

    # --- a grading command that runs alone -----------------------------------------------------

    def test_exclusive_command_runs_alone(self):
        # Attack: a process the workload left behind writes "42 passed" into the stdout of the
        # grading command (/proc/<pid>/fd/1: same uid, dumpable), as soon as it appears.
        sid = self.create(entrypoint=["sleep", "infinity"])["id"]
        self.run_ok(sid, "cat > /tmp/inject.py <<'EOF'\n%s\nEOF" % INJECTOR_PY)
        self.run_ok(sid, "nohup python3 /tmp/inject.py >/dev/null 2>&1 &")
        grader = "sleep 0.5; echo grader-marker >/dev/null; echo real-result; exit 1"
        # Control: without exclusive the injection lands (the attack is real).
        res = self.client.run(sid, grader)
        self.assertIn("42 passed", res.stdout, "the injector did not reach the grader: %r" % res)
        # exclusive: every other process is stopped and killed before the grader starts.
        res = self.client.run(sid, grader, exclusive=True)
        self.assertEqual(res.exit_code, 1, res)
        self.assertEqual(res.stdout.strip(), "real-result", res)
        self.assertEqual(self.client.run(sid, "pgrep -f inject.py").exit_code, 1,
                         "the injector survived")
        # The sandbox lives on (its entrypoint was spared) and answers.
        self.assertEqual(self.client.get_sandbox(sid).json()["status"]["state"], "Running")
        self.assert_platform_alive(sid, self.a)

    # --- the exit report ------------------------------------------------------------------------

    def test_forged_exit_report_is_not_believed(self):
        # Attack: the entrypoint writes a report claiming a clean exit everywhere it could reach
        # (the old /.corral/exit.json, a FIFO beside it), then fails with exit code 3.
        forged = json.dumps({"reason": "EntrypointExited", "exitCode": 0,
                             "message": "forged\n2026-12-01T00:00:00Z corrald info: all good"})
        # (exit.json.tmp.1 is where execd, pid 1, used to write its real report first.)
        script = ("mkdir -p /.corral/exit.json.tmp.1 && printf '%%s' '%s' > /.corral/exit.json && "
                  "mkfifo /.corral/exit.json.fifo; "
                  "while [ ! -e /tmp/go ]; do sleep 0.05; done; exit 3" % forged.replace("'", ""))
        sid = self.create(entrypoint=["sh", "-c", script])["id"]
        # it fails once its create was answered ('sleep 1' could end it during a slow create:
        # a 422, not the forged report's test). The touch's own result is not looked at: the
        # entrypoint may end the sandbox before it is reported (then it is SANDBOX::ENDED).
        self.client.run(sid, "touch /tmp/go")
        st = self.wait_ended(sid)
        self.assertEqual(st["state"], "Failed", st)
        self.assertIn("exit code 3", st.get("message", ""), st)
        self.assertNotIn("forged", json.dumps(st))
        self.assertNotIn("forged", self.corrald.log_tail(200))
        self.assert_platform_alive(self.a)

    def test_hostile_exit_report_never_blocks_or_leaks(self):
        # Attack (a taken-over execd, host side): the exit report is a FIFO, a symlink to a
        # root-only host file, a directory, or garbage with a fake log line; then PID 1 dies.
        secret_dir = tempfile.mkdtemp(prefix="corral-sec-")
        self.addCleanup(lambda: (os.unlink(os.path.join(secret_dir, "s")), os.rmdir(secret_dir)))
        secret = os.path.join(secret_dir, "s")
        with open(secret, "w") as f:
            f.write('{"reason":"EntrypointExited","exitCode":0,"message":"HOSTSECRET"}')
        os.chmod(secret, 0o600)
        kinds = {
            "fifo": lambda p: os.mkfifo(p),
            "symlink": lambda p: os.symlink(secret, p),
            "directory": lambda p: os.mkdir(p),
            "garbage": lambda p: open(p, "w").write(
                '{"reason":"Terminated\\n2026 corrald info: fake","exitCode":0,"message":"x"}'),
            "huge": lambda p: open(p, "w").write(" " * (1 << 20) + '{"reason":"ExecdExited"}'),
        }
        for kind, plant in kinds.items():
            with self.subTest(kind=kind):
                sid = self.create(entrypoint=["sleep", "infinity"])["id"]
                run = os.path.join(self.corrald.sandbox_dir(sid), "run")
                if not os.path.isdir(run):  # inside the sandbox's own disk
                    run = os.path.join(self.corrald.sandbox_dir(sid), "disk", "run")
                plant(os.path.join(run, "exit.json"))
                os.kill(self.pid1(sid), signal.SIGKILL)  # no report of its own
                t0 = time.monotonic()
                st = self.wait_ended(sid)
                self.assertLess(time.monotonic() - t0, 15)
                self.assertEqual(st["state"], "Failed", st)
                self.assertEqual(st.get("reason"), "ExecdExited", st)
                self.assertNotIn("HOSTSECRET", json.dumps(st))
                self.assertNotIn("Terminated", st.get("reason", ""))
                self.assertNotIn("\n", st.get("message", ""))
                self.assertNotIn("fake", self.corrald.log_tail(50))
                self.assert_platform_alive(self.a)

    # --- sandbox root is not host root ----------------------------------------------------------

    def test_root_only_host_files_unreadable(self):
        # Attack: read a 0600 host file and list root-only host directories through the host
        # image, and read this corrald's own state dir (the sandbox records, other sandboxes).
        d = tempfile.mkdtemp(prefix="corral-sec-", dir="/var/tmp")
        os.chmod(d, 0o755)
        secret = os.path.join(d, "secret")
        with open(secret, "w") as f:
            f.write("TOPSECRET")
        os.chmod(secret, 0o600)
        self.addCleanup(lambda: (os.unlink(secret), os.rmdir(d)))
        res = self.client.run(self.a, "cat %s" % secret)
        self.assertNotEqual(res.exit_code, 0, res)
        self.assertNotIn("TOPSECRET", res.stdout)
        self.assertIn("Permission denied", res.stderr)
        for hostdir in ("/etc/ssl/private", "/var/cache/ldconfig", "/var/lib/apt/lists/partial"):
            if os.path.isdir(hostdir) and not (os.stat(hostdir).st_mode & stat.S_IROTH):
                res = self.client.run(self.a, "ls %s" % hostdir)
                self.assertNotEqual(res.exit_code, 0, "%s listable: %r" % (hostdir, res))
        for path in (self.corrald.state_dir, os.path.join(self.corrald.state_dir, "sandboxes"),
                     self.corrald.sandbox_dir(self.b)):
            res = self.client.run(self.a, "ls %s" % path)
            self.assertNotEqual(res.exit_code, 0, "%s listable: %r" % (path, res))
            self.assertNotIn(self.b, res.stdout)
        # Sandbox root holds no capability over the host's files: its uid maps to a range of
        # its own, not to host root.
        self.assertNotIn("4294967295", self.sh(self.a, "cat /proc/self/uid_map"))
        self.assert_platform_alive(self.a, self.b)

    def test_sandboxes_get_distinct_id_ranges(self):
        # Attack: sandbox A's root acting on sandbox B's files as "the same root" (a shared uid).
        ma = self.sh(self.a, "cat /proc/self/uid_map").split()
        mb = self.sh(self.b, "cat /proc/self/uid_map").split()
        self.assertEqual(ma[0], "0")
        self.assertEqual(ma[2], "65536")
        self.assertNotEqual(ma[1], mb[1], "A and B share host ids")
        self.assertGreaterEqual(abs(int(ma[1]) - int(mb[1])), 65536)

    # --- ids and host paths do not leak ---------------------------------------------------------

    def test_no_ids_or_host_paths_in_mount_tables(self):
        # Attack: learn sandbox ids (which are keys to the API) or the host's state path from
        # the sandbox's mount tables.
        sid = self.create(entrypoint=["sleep", "infinity"],
                          resourceLimits={"cpu": "1", "memory": "256Mi",
                                          "ephemeral-storage": "64Mi"})["id"]
        for sbx in (self.a, sid):
            text = self.sh(sbx, "cat /proc/self/mountinfo /proc/self/mounts")
            for needle in (self.a, self.b, sid, self.corrald.state_dir, self.corrald.tmp,
                           "sandboxes"):
                self.assertNotIn(needle, text, "%r in the mount table of %s" % (needle, sbx))

    def test_no_host_path_in_error_replies(self):
        # Attack: an unauthenticated client provokes every proxy failure it can (unknown id,
        # ended sandbox, execd gone) to read host paths from the error replies.
        sid = self.create(entrypoint=["sleep", "infinity"])["id"]
        gone = self.create(entrypoint=["sleep", "infinity"])["id"]
        os.kill(self.pid1(gone), signal.SIGKILL)
        self.wait_ended(gone)
        replies = [
            self.client.post("/sandboxes/%s/proxy/44772/command" % secrets.token_hex(8),
                             {"command": "true"}),
            self.client.post("/sandboxes/%s/proxy/44772/command" % gone, {"command": "true"}),
            self.client.get("/sandboxes/%s/proxy/44772/../../../etc/passwd" % sid),
            self.client.get("/v1/sandboxes/%s" % gone),
        ]
        for r in replies:
            self.assertNotIn(self.corrald.state_dir, r.text, r)
            self.assertNotIn(self.corrald.tmp, r.text, r)
            self.assertNotIn("execd.sock", r.text, r)
            self.assertNotIn("/run/", r.text, r)
        self.assert_platform_alive(self.a)

if __name__ == "__main__":
    main()
