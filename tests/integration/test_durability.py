#!/usr/bin/env python3
"""Nothing lost, nothing misleading (issue 12): on a full state file system every state change is
either stored durably and answered 2xx, or refused with a typed 5xx and not made; a create that
hits the host's process limit is a retryable 503, never the entrypoint's fault."""

import os
import signal
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import CommandStream, Corrald, CorralTestCase, controller_dir, main  # noqa: E402

TMPFS_SIZE = "48m"
SMALL = {"cpu": "1", "memory": "256Mi", "ephemeral-storage": "8Mi"}


def fill(path):
    """Fill the file system of path until ENOSPC (1 MiB writes, then 4 KiB); bounded by its size."""
    with open(path, "wb", buffering=0) as f:
        for chunk in (1 << 20, 4096, 512):
            buf = b"\0" * chunk
            try:
                while True:
                    f.write(buf)
            except OSError as e:
                if e.errno != 28:  # ENOSPC
                    raise
        try:
            os.fsync(f.fileno())
        except OSError:
            pass


class StateDiskFull(CorralTestCase):
    """The state dir on a small tmpfs the test fills."""

    @classmethod
    def setUpClass(cls):
        cls.corrald = Corrald(extra_args=["--default-disk", "8Mi"])
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s,mode=0700" % TMPFS_SIZE,
                        "corral-test-state", cls.corrald.state_dir], check=True)
        try:
            cls.corrald.start()
        except Exception:
            subprocess.run(["umount", cls.corrald.state_dir])
            cls.corrald.shutdown_and_check()
            raise
        cls.client = cls.corrald.client()

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        c = cls.corrald.client(timeout=10)
        try:
            for sid in c.all_sandbox_ids():
                c.delete_sandbox(sid)
        finally:
            c.close()
        cls.corrald.wait_no_leaks(30)
        cls.corrald.stop()
        subprocess.run(["umount", cls.corrald.state_dir], check=True)
        cls.corrald.shutdown_and_check()

    def filler(self):
        path = os.path.join(self.corrald.state_dir, "filler")
        self.addCleanup(lambda: os.path.exists(path) and os.unlink(path))
        return path

    def assert_state_write_failed(self, r, what):
        self.assertIn(r.status, (507, 500), "%s on a full state fs: %r" % (what, r))
        self.assertEqual(r.json()["code"], "SANDBOX::STATE_WRITE_FAILED", r)
        self.assertIn("No space left on device", r.json()["message"], r)
        self.assertNotIn(self.corrald.tmp, r.text, "no host path in a reply")

    def test_full_state_fs(self):
        # Attack/fault: the state file system fills up while the API changes sandboxes; then
        # corrald is killed -9 and restarted: every 2xx must still be true, every failure named.
        a = self.create(resourceLimits=SMALL, timeout=600, metadata={"k": "v0"})["id"]
        b = self.create(resourceLimits=SMALL, timeout=600)["id"]
        r = self.client.patch("/v1/sandboxes/%s/metadata" % a, {"k": "v1"})
        self.assertEqual(r.status, 200, r)
        exp0 = self.client.get_sandbox(a).json()["expiresAt"]

        filler = self.filler()
        fill(filler)
        # metadata: refused, and not changed in memory either
        r = self.client.patch("/v1/sandboxes/%s/metadata" % a, {"k": "v2"})
        self.assert_state_write_failed(r, "PATCH metadata")
        self.assertEqual(self.client.get_sandbox(a).json()["metadata"], {"k": "v1"})
        # renew: refused, expiry unchanged
        t = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 1200))
        r = self.client.post("/v1/sandboxes/%s/renew-expiration" % a, {"expiresAt": t})
        self.assert_state_write_failed(r, "renew")
        self.assertEqual(r.header("Retry-After") is not None, r.status == 507)
        self.assertEqual(self.client.get_sandbox(a).json()["expiresAt"], exp0)
        # pause: refused and undone (still Running and answering)
        r = self.client.post("/v1/sandboxes/%s/pause" % a)
        self.assert_state_write_failed(r, "pause")
        self.assertEqual(self.client.get_sandbox(a).json()["status"]["state"], "Running")
        # create: never acknowledged without its record
        r = self.client.create_sandbox_raw(resourceLimits=SMALL)
        if r.status == 202:
            self.addCleanup(self.client.delete_sandbox, r.json()["id"])
        self.assertIn(r.status, (422, 503, 507), "create on a full state fs: %r" % r)
        self.assertNotIn(self.corrald.tmp, r.text, "no host path in a reply")
        # delete: still possible on a full disk, and durable
        r = self.client.delete_sandbox(b)
        self.assertEqual(r.status, 204, r)

        # crash, free the space, restart: the 2xx are true, the refused changes never happened
        self.client.close()
        self.corrald.kill9()
        os.unlink(filler)
        self.corrald.restart()
        j = self.client.get_sandbox(a).json()
        self.assertEqual(j["metadata"], {"k": "v1"}, j)
        self.assertEqual(j["expiresAt"], exp0, j)
        self.assertEqual(j["status"]["state"], "Running", j)
        self.assertEqual(self.client.get_sandbox(b).status, 404, "a 204 delete stays deleted")
        self.assertNotIn(b, self.client.all_sandbox_ids())
        # and with space again, changes are stored
        r = self.client.patch("/v1/sandboxes/%s/metadata" % a, {"k": "v3"})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(self.sh(a, "echo ok"), "ok")


class Faults(CorralTestCase):
    """Host limits (the suite's own cgroup, never the host's) and sandbox deaths."""

    def test_pid1_dies_mid_stream(self):
        # Fault: PID 1 of a sandbox is killed -9 while a command streams: the client's stream must
        # end with an error event naming SANDBOX::ENDED and the reason, not a bare cut.
        sid = self.create(resourceLimits=SMALL)["id"]
        s = CommandStream("127.0.0.1", self.corrald.port, sid, "echo started; sleep 60")
        self.addCleanup(s.abort)
        self.assertEqual(s.wait_for("stdout")["text"], "started")
        os.kill(self.corrald.pid1(sid), signal.SIGKILL)
        res = s.finish()  # a bare cut raises IncompleteRead here
        self.assertIsNotNone(res.error, res)
        self.assertEqual(res.error["ename"], "SANDBOX::ENDED", res)
        st = self.client.get_sandbox(sid).json()["status"]
        self.assertEqual(res.error["evalue"], st["reason"], (res, st))
        self.assertNotIn(self.corrald.tmp, b"".join(res.lines).decode())
        # corrald still answers, and other sandboxes still run commands
        other = self.create(resourceLimits=SMALL)["id"]
        self.assertEqual(self.sh(other, "echo fine"), "fine")

    def pids_max(self):
        d = controller_dir("pids")
        p = os.path.join(d, self.corrald.cgroup_name, "pids.max") if d else None
        if not p or not os.path.exists(p):
            self.skipTest("no pids controller on the suite's cgroup")
        return p

    def test_create_at_the_host_pid_limit(self):
        # Fault: the host is out of processes while a create starts PID 1 and the entrypoint:
        # the answer must be a retryable 503 naming the limit, never 422 ENTRYPOINT_EXITED.
        self.create(resourceLimits=SMALL)  # makes the suite cgroup exist
        p = self.pids_max()
        def unlimit():
            with open(p, "w") as f:
                f.write("max")
        self.addCleanup(unlimit)
        with open(os.path.join(os.path.dirname(p), "pids.current")) as f:
            base = int(f.read())
        seen = []
        for extra in (0, 1, 2, 3):
            with open(p, "w") as f:
                f.write(str(base + extra))
            r = self.client.create_sandbox_raw(resourceLimits=SMALL)
            if r.status == 202:
                self.addCleanup(self.client.delete_sandbox, r.json()["id"])
                continue
            seen.append(r.status)
            self.assertNotEqual(r.status, 422, "a host limit blamed on the client: %r" % r)
            self.assertNotIn(self.corrald.tmp, r.text)
            # Wherever the limit strikes (PID 1's clone, or execd's fork of the entrypoint, whose
            # exit report says ResourceExhausted), it is the same retryable 503.
            self.assertEqual(r.status, 503, r)
            self.assertEqual(r.json()["code"], "SANDBOX::HOST_PID_LIMIT", r)
            self.assertIsNotNone(r.header("Retry-After"), r)
        self.assertIn(503, seen, "no create was answered 503 HOST_PID_LIMIT: %r" % seen)
        with open(p, "w") as f:
            f.write("max")
        self.create(resourceLimits=SMALL)


if __name__ == "__main__":
    main()
