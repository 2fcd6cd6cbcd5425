#!/usr/bin/env python3
"""Resource exhaustion is named (issue 12): processes (the sandbox's pids limit, the host's — here
the suite's own cgroup, never the whole host), corrald's file descriptors, a sandbox's disk: each
gives its own typed error, the retryable ones 503 with Retry-After, none blames the entrypoint or
calls a live backend unreachable; afterwards everything works again."""

import json
import os
import secrets
import select
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from harness import Corrald, CorralTestCase, controller_dir, main  # noqa: E402

SMALL = {"cpu": "250m", "memory": "128Mi", "pids": "32", "ephemeral-storage": "8Mi"}
TINY_REQ = {"cpu": "10m", "memory": "8Mi"}


def spec(**kw):
    s = {"image": {"uri": "host"}, "entrypoint": ["sleep", "infinity"],
         "resourceLimits": SMALL, "resourceRequests": TINY_REQ, "timeout": 600}
    s.update(kw)
    return s


class Processes(CorralTestCase):
    corrald_kwargs = {"extra_args": ["--default-disk", "8Mi"]}

    def test_sandbox_pids_limit(self):
        # Fault: the workload takes every process slot of its sandbox (resourceLimits.pids 8):
        # a new command is a typed, retryable 503 that does not use up its id, and runs once
        # slots are free again.
        sid = self.create(**spec(resourceLimits=dict(SMALL, pids="8")))["id"]
        hog = self.client.run(sid, "for i in $(seq 1 20); do sleep 300 & done; wait",
                              background=True)
        self.assertEqual(hog.http_status, 200, hog)
        cid = secrets.token_hex(16)

        def submit(i):
            return self.client.post(self.client.execd_path(sid, "/command"),
                                    {"command": "echo ran", "id": i})
        self.wait_until(lambda: submit(secrets.token_hex(16)).status == 503, 10,
                        msg="the hog to fill the sandbox's pids limit")
        r = submit(cid)
        self.assertEqual(r.status, 503, r)
        self.assertEqual(r.json()["code"], "PROCESS_LIMIT", r)
        self.assertIn("process limit", r.json()["message"])
        self.assertIsNotNone(r.header("Retry-After"), r)
        self.assertEqual(self.client.command_status(sid, cid).status, 404, "the id was recorded")
        # the sandbox is fine: the hog is interrupted, the same id now runs, once
        self.assertEqual(self.client.interrupt(sid, hog.init_id).status, 200)
        self.client.wait_command(sid, hog.init_id, timeout=15)
        res = self.wait_until(lambda: (lambda x: x if x.http_status == 200 else None)(
            self.client.run(sid, "echo ran", id=cid)), 15, msg="the command to run")
        self.assertEqual((res.exit_code, res.stdout), (0, "ran"), res)
        self.assertEqual(self.client.get_sandbox(sid).json()["status"]["state"], "Running")

    def test_host_pids_limit_with_keyed_creates(self):
        # Fault: the host (the suite's cgroup, pids.max) runs out of processes while 10 keyed
        # creates run: each is made or refused 503 HOST_PID_LIMIT with Retry-After, never 422 or
        # 500; their retries with the same keys after the limit lifts make one sandbox each.
        self.create(**spec())  # the suite cgroup exists
        d = controller_dir("pids")
        p = os.path.join(d, self.corrald.cgroup_name, "pids.max") if d else None
        if not p or not os.path.exists(p):
            self.skipTest("no pids controller on the suite's cgroup")

        def set_max(v):
            with open(p, "w") as f:
                f.write(str(v))
        self.addCleanup(set_max, "max")
        with open(os.path.join(os.path.dirname(p), "pids.current")) as f:
            base = int(f.read())
        set_max(base + 3)  # room for about one more sandbox
        run = secrets.token_hex(4)
        keys = ["%s-%d" % (run, i) for i in range(10)]
        got = [None] * 10

        def create(i):
            c = self.corrald.client(timeout=60)
            try:
                got[i] = c.post("/v1/sandboxes", spec(metadata={"run": run}),
                                headers={"Idempotency-Key": keys[i]})
            finally:
                c.close()
        ths = [threading.Thread(target=create, args=(i,)) for i in range(10)]
        for t in ths:
            t.start()
        for t in ths:
            t.join(60)
        refused = [r for r in got if r.status != 202]
        self.assertTrue(refused, "no create hit the limit: %r" % got)
        for r in refused:
            self.assertEqual(r.status, 503, r)
            self.assertEqual(r.json()["code"], "SANDBOX::HOST_PID_LIMIT", r)
            self.assertIsNotNone(r.header("Retry-After"), r)
            self.assertNotIn(self.corrald.tmp, r.text)
        set_max("max")
        ids = []
        for i, k in enumerate(keys):
            r = self.client.post("/v1/sandboxes", spec(metadata={"run": run}),
                                 headers={"Idempotency-Key": k})
            self.assertEqual(r.status, 202, r)
            if got[i].status == 202:
                self.assertEqual(r.json()["id"], got[i].json()["id"], "a second sandbox for a key")
            ids.append(r.json()["id"])
            self.addCleanup(self._cleanup_sandbox, r.json()["id"])
        listed = self.client.list_sandboxes(metadata={"run": run}, page_size=50).json()["items"]
        self.assertEqual(sorted(it["id"] for it in listed), sorted(ids))
        self.assertEqual(self.sh(ids[0], "echo ok"), "ok")


class LowFdCorrald(Corrald):
    NOFILE = 128

    def argv(self, port):
        return ["prlimit", "--nofile=%d:%d" % (self.NOFILE, self.NOFILE), "--"] + super().argv(port)


class FileDescriptors(CorralTestCase):
    corrald_class = LowFdCorrald
    corrald_kwargs = {"extra_args": ["--default-disk", "8Mi"]}

    def test_corrald_out_of_fds(self):
        # Fault: long-polls through corrald (RLIMIT_NOFILE 128) hold two descriptors each until
        # corrald has none left: the calls it cannot relay get 503 SANDBOX::HOST_FD_LIMIT with
        # Retry-After (corrald's limit), never 502 BACKEND_UNREACHABLE (execd is fine).
        sid = self.create(**spec())["id"]
        bg = self.client.run(sid, "sleep 120", background=True)
        path = "/sandboxes/%s/proxy/44772/command/status/%s?wait=30" % (sid, bg.init_id)
        socks = []
        self.addCleanup(lambda: [s.close() for s in socks])
        # Connect first, send later: corrald must hold every client connection before the calls
        # come. Sent one by one, each call could be relayed before the next connection arrives,
        # and the descriptors would run out at accept() (those clients wait in the backlog,
        # unanswered) instead of at the connect to execd.
        fd_dir = "/proc/%d/fd" % self.corrald.proc.pid
        before = len(os.listdir(fd_dir))
        for _ in range(70):
            try:
                socks.append(socket.create_connection(("127.0.0.1", self.corrald.port), timeout=2))
            except OSError:
                break
        # until it holds as many as --max-connections lets it (NOFILE / 2, this test's client
        # included): the count stops growing
        seen = []
        def accepted():
            seen.append(len(os.listdir(fd_dir)))
            return len(seen) > 6 and seen[-1] > before + 32 and len(set(seen[-6:])) == 1
        self.wait_until(accepted, 10, msg="corrald to accept the connections")
        for s in socks:
            s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path).encode())
        answers = []
        deadline = time.monotonic() + 5
        pending = list(socks)
        while pending and time.monotonic() < deadline:
            ready, _, _ = select.select(pending, [], [], 0.5)
            for s in ready:
                data = s.recv(65536)
                pending.remove(s)
                if data:
                    answers.append(data.decode("utf-8", "replace"))
        statuses = [a.split(" ", 2)[1] for a in answers]
        self.assertIn("503", statuses, "no call refused for lack of descriptors: %r" % answers[:3])
        for a in answers:
            head, _, body = a.partition("\r\n\r\n")
            self.assertTrue(head.startswith("HTTP/1.1 503"), a)
            self.assertEqual(json.loads(body)["code"], "SANDBOX::HOST_FD_LIMIT", a)
            self.assertIn("Retry-After:", head, a)
        for s in socks:
            s.close()
        socks.clear()
        # with the descriptors back, the sandbox answers through corrald again
        def healthy():
            c = self.corrald.client(timeout=5)
            try:
                return c.get("/health").status == 200
            finally:
                c.close()
        self.wait_until(healthy, 15)
        self.assertEqual(self.sh(sid, "echo ok"), "ok")


class Disk(CorralTestCase):
    corrald_kwargs = {"extra_args": ["--default-disk", "8Mi"]}

    def test_upload_to_a_full_sandbox_disk(self):
        # Fault: an upload to a sandbox whose own disk (8 MiB) is full: 507 DISK_FULL, not 500.
        sid = self.create(**spec())["id"]
        self.client.run(sid, "dd if=/dev/zero of=/var/tmp/fill bs=64k")
        boundary = "b" + secrets.token_hex(8)
        meta = json.dumps({"path": "/var/tmp/up.bin", "mode": 644})
        body = ("--%s\r\nContent-Disposition: form-data; name=\"metadata\"; filename=\"metadata\"\r\n"
                "Content-Type: application/json\r\n\r\n%s\r\n"
                "--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"up.bin\"\r\n"
                "Content-Type: application/octet-stream\r\n\r\n" % (boundary, meta, boundary)
                ).encode() + b"z" * (1 << 20) + ("\r\n--%s--\r\n" % boundary).encode()
        r = self.client.request("POST", self.client.execd_path(sid, "/files/upload"), raw=body,
                                headers={"Content-Type": "multipart/form-data; boundary=" + boundary})
        self.assertEqual(r.status, 507, r)
        self.assertEqual(r.json()["code"], "DISK_FULL", r)
        self.assertIn("No space left on device", r.json()["message"])
        self.client.run(sid, "rm -f /var/tmp/fill")
        self.assertEqual(self.sh(sid, "echo ok"), "ok")


if __name__ == "__main__":
    main()
