"""
Shared pieces of the escape suite: the integration harness (real corrald, real sandboxes) plus
what several attack files need. Each test states its attack in one comment line.
"""
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))

from harness import *  # noqa: E402,F401,F403
from harness import CorralTestCase, main  # noqa: E402,F401


def sanitized(pid):
    """Whether pid runs a sanitizer build (CI's second pass): an ASan heap is a reserved region of
    terabytes, and freed memory stays in its quarantine (RSS says nothing about leaks)."""
    with open("/proc/%d/maps" % pid) as f:
        return "libasan" in f.read()


class AttackCase(CorralTestCase):
    """A CorralTestCase that, after every attack, checks the platform still answers.

    class_sandboxes: names of class attributes that each get a sandbox (host image, sleep
    infinity) for the whole class, e.g. ("attacker", "neighbour"); deleted after it."""

    class_sandboxes = ()

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        for name in cls.class_sandboxes:
            r = cls.client.create_sandbox_raw()
            if r.status != 202:
                cls.tearDownClass()
                raise RuntimeError("cannot create sandbox %s: %r" % (name, r))
            setattr(cls, name, r.json()["id"])

    @classmethod
    def tearDownClass(cls):
        for name in cls.class_sandboxes:
            sid = getattr(cls, name, None)
            if sid:
                cls.client.delete_sandbox(sid)
        super().tearDownClass()

    def wait_answering(self, timeout=15.0, msg="corrald never answered again"):
        """Poll GET /health until corrald answers 200 (it may refuse connections meanwhile)."""
        deadline = time.monotonic() + timeout
        while True:
            c = self.corrald.client(timeout=3)
            try:
                if c.get("/health").status == 200:
                    return
            except OSError:
                pass
            finally:
                c.close()
            self.assertLess(time.monotonic(), deadline, msg)
            time.sleep(0.2)

    def assert_platform_alive(self, *sids):
        c = self.corrald.client(timeout=10)
        try:
            r = c.get("/health")
        finally:
            c.close()
        self.assertEqual(r.status, 200, "corrald stopped answering: %r" % r)
        for sid in sids:
            res = self.client.run(sid, "echo alive")
            self.assertEqual(res.exit_code, 0, "sandbox %s stopped answering: %r" % (sid, res))
            self.assertEqual(res.stdout.strip(), "alive")
