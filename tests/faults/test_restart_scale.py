#!/usr/bin/env python3
"""corrald killed -9 with many sandboxes live and 100 keyed creates in flight (issue 12): after the
restart every live sandbox is re-adopted Running and answers, each key has exactly one sandbox,
and nothing is left on the host that no client knows.

N live sandboxes (CORRAL_FAULTS_SANDBOXES, default 1000): each holds two processes (corral-execd
and its entrypoint) of this VM's pid table (kernel.pid_max 32768) under a pids limit of 16, no
disk of its own (--default-disk none: no loop device each) and tiny requests."""

import os
import secrets
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from faults import spec  # noqa: E402
from harness import CorralTestCase, cgroup_children, main, suite_cgroup_dirs  # noqa: E402

N = int(os.environ.get("CORRAL_FAULTS_SANDBOXES", "1000"))
KEYED = 100
LIMITS = {"cpu": "100m", "memory": "32Mi", "pids": "16"}
REQ = {"cpu": "1m", "memory": "1Mi"}


def host_count(cgroup_name):
    return max([len(cgroup_children(d)) for d in suite_cgroup_dirs(cgroup_name)] or [0])


class RestartAtScale(CorralTestCase):
    corrald_kwargs = {"extra_args": ["--default-disk", "none", "--create-timeout", "120",
                                     "--capacity-wait", "120"]}

    def parallel(self, fn, items, threads=8):
        out = [None] * len(items)
        it = iter(range(len(items)))
        lock = threading.Lock()

        def work():
            c = self.corrald.client(timeout=120)
            try:
                while True:
                    with lock:
                        i = next(it, None)
                    if i is None:
                        return
                    out[i] = fn(c, items[i])
            finally:
                c.close()
        ths = [threading.Thread(target=work) for _ in range(threads)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        return out

    def tearDown(self):
        c = self.corrald.client(timeout=60)
        try:
            ids = c.all_sandbox_ids()
        finally:
            c.close()
        self.parallel(lambda c, sid: c.delete_sandbox(sid).status, ids, threads=4)
        self.wait_until(lambda: host_count(self.corrald.cgroup_name) == 0, 300, interval=0.5,
                        msg="every sandbox torn down")

    def test_kill9_with_many_live_and_100_keyed_creates(self):
        # Fault: kill -9 of corrald with N sandboxes live and 100 keyed creates in flight, the
        # clients retrying against the restarted corrald.
        run = secrets.token_hex(4)
        t0 = time.monotonic()
        made = self.parallel(lambda c, i: c.create_sandbox_raw(**spec(
            resourceLimits=LIMITS, resourceRequests=REQ, metadata={"run": run, "kind": "live"})),
            list(range(N)))
        bad = [r for r in made if r.status != 202]
        self.assertEqual(bad[:3], [], "%d of %d creates failed" % (len(bad), N))
        live = [r.json()["id"] for r in made]
        t_made = time.monotonic() - t0

        keys = ["%s-%03d" % (run, i) for i in range(KEYED)]
        answers = [None] * KEYED
        acked = threading.Semaphore(0)
        deadline = time.monotonic() + 240

        def client(i):
            body = spec(resourceLimits=LIMITS, resourceRequests=REQ,
                        metadata={"run": run, "kind": "keyed", "i": str(i)})
            delay = 0.05
            while time.monotonic() < deadline:
                c = self.corrald.client(timeout=120)
                try:
                    r = c.post("/v1/sandboxes", body, headers={"Idempotency-Key": keys[i]})
                except OSError:
                    r = None
                finally:
                    c.close()
                if r is not None and r.status == 202:
                    answers[i] = r.json()["id"]
                    acked.release()
                    return
                if r is not None and r.status < 500:
                    answers[i] = r
                    return
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
        ths = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(KEYED)]
        for t in ths:
            t.start()
        for _ in range(KEYED // 3):
            self.assertTrue(acked.acquire(timeout=120))
        self.client.close()
        self.corrald.kill9()
        t1 = time.monotonic()
        self.corrald.start(wait=False)
        self.corrald.wait_healthy(timeout=120)
        t_restart = time.monotonic() - t1
        for t in ths:
            t.join(max(1, deadline - time.monotonic() + 5))
        self.assertEqual([(keys[i], a) for i, a in enumerate(answers) if not isinstance(a, str)],
                         [])

        items = self.client.list_sandboxes(metadata={"run": run}, page_size=200)
        ids = self.client.all_sandbox_ids()
        self.assertEqual(sorted(ids), sorted(live + answers), "listed vs known to the clients")
        states = {}
        for sid in live[:: max(1, N // 50)] + answers[:10]:
            st = self.client.get_sandbox(sid).json()["status"]["state"]
            states[st] = states.get(st, 0) + 1
        self.assertEqual(list(states), ["Running"], states)
        for sid in (live[0], live[-1], answers[0]):
            self.assertEqual(self.sh(sid, "echo ok"), "ok")
        self.wait_until(lambda: host_count(self.corrald.cgroup_name) == N + KEYED, 120,
                        interval=0.5, msg="%d sandbox cgroups (now %d)" % (
                            N + KEYED, host_count(self.corrald.cgroup_name)))
        self.assertEqual(items.status, 200)
        print("\n  %d live sandboxes made in %.1f s; kill -9 with %d keyed creates in flight; "
              "restart (re-adoption) %.1f s; one sandbox per key" % (N, t_made, KEYED, t_restart),
              file=sys.stderr)


if __name__ == "__main__":
    main()
