#!/usr/bin/env python3
"""
The sandbox's end (execd_end, src/execd/main.c): when the entrypoint exits, nothing of the
workload may run on while PID 1 sends its last replies.
"""
import json
import os
import shutil
import socket
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sec import AttackCase, main  # noqa: E402

# Appends time.monotonic() to argv[1] every 5 ms; with "escape", first arms a 1 ms POSIX timer
# that sends the process SIGCONT (a handler installed: an ignored timer signal is parked by the
# kernel since 6.13, a handled one fires on).
ESCAPER_PY = r"""
import ctypes, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
class sigevent(ctypes.Structure):
    _fields_ = [("value", ctypes.c_void_p), ("signo", ctypes.c_int), ("notify", ctypes.c_int),
                ("pad", ctypes.c_char * 48)]
class timespec(ctypes.Structure):
    _fields_ = [("s", ctypes.c_long), ("ns", ctypes.c_long)]
class itimerspec(ctypes.Structure):
    _fields_ = [("interval", timespec), ("value", timespec)]
if sys.argv[2] == "escape":
    signal.signal(signal.SIGCONT, lambda *a: None)
    ev = sigevent(None, signal.SIGCONT, 0)  # SIGEV_SIGNAL
    tid = ctypes.c_void_p()
    assert libc.timer_create(1, ctypes.byref(ev), ctypes.byref(tid)) == 0
    its = itimerspec(timespec(0, 1000000), timespec(0, 1000000))
    assert libc.timer_settime(tid, 0, ctypes.byref(its), None) == 0
f = open(sys.argv[1], "a", buffering=1)
while True:
    f.write("%.6f\n" % time.monotonic())
    time.sleep(0.005)
"""


class EndingFreezeTest(AttackCase):
    """When the entrypoint exits, execd (src/execd/main.c execd_end) ends every other process and
    drains its replies for up to 2 s. It used to SIGSTOP them: a process with a SIGCONT handler
    and a 1 ms POSIX timer sending it SIGCONT resumed 1 ms later and ran (389 writes over the 2 s
    drain). Now they are SIGKILLed."""

    @classmethod
    def setUpClass(cls):
        cls.out = tempfile.mkdtemp(prefix="corral-test-allowed-")
        cls.corrald_kwargs = {"extra_args": ["--allow-host-path", cls.out]}
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            shutil.rmtree(cls.out, ignore_errors=True)

    def test_sigcont_timer_does_not_outrun_the_ending_freeze(self):
        # attack: a workload process resumes itself with a SIGCONT timer while execd ends and
        # keeps running through the 2 s drain (a client that does not read makes it last)
        # The entrypoint ends when the test says so, once every piece is in place (it was
        # 'sleep 3': a create, four calls and two Python starts under ASan on a loaded host can
        # take longer, and the sandbox ended before the attack began).
        sid = self.create(entrypoint=["sh", "-c", "while [ ! -e /out/end ]; do sleep 0.05; done"],
                          volumes=[{"name": "o", "host": {"path": self.out}, "mountPath": "/out"}])["id"]
        self.run_ok(sid, "cat > /tmp/e.py <<'EOF'\n%sEOF\n" % ESCAPER_PY)
        self.client.run(sid, "exec python3 /tmp/e.py /out/escaper escape", background=True)
        self.client.run(sid, "exec python3 /tmp/e.py /out/control stay", background=True)
        s = socket.create_connection(("127.0.0.1", self.corrald.port))
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            body = json.dumps({"command": "yes 0123456789abcdef"}).encode()
            s.sendall(("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       "Content-Length: %d\r\n\r\n" % (self.client.execd_path(sid, "/command"),
                                                      len(body))).encode() + body)
            s.settimeout(60)
            self.assertTrue(s.recv(1, socket.MSG_PEEK), "the unread stream never started")

            def written(name):
                try:
                    with open(os.path.join(self.out, name)) as f:
                        return f.read().count("\n") >= 2
                except FileNotFoundError:
                    return False
            self.wait_until(lambda: written("control") and written("escaper"), 60,
                            msg="both writers to run")
            open(os.path.join(self.out, "end"), "w").close()

            def ended():
                st = self.client.get_sandbox(sid).json()["status"]
                return st["state"] in ("Terminated", "Failed")
            self.wait_until(ended, 30, msg="the sandbox to end")
        finally:
            s.close()
        with open(os.path.join(self.out, "control")) as f:
            control = [float(x) for x in f.read().split()]
        with open(os.path.join(self.out, "escaper")) as f:
            escaper = [float(x) for x in f.read().split()]
        after = [x for x in escaper if x > control[-1] + 0.05]
        self.assertLessEqual(len(after), 2, "a process ran %.2f s past the ending's SIGSTOP "
                             "(%d writes)" % (escaper[-1] - control[-1], len(after)))
        self.assert_platform_alive()


if __name__ == "__main__":
    main()
