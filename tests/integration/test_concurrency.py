#!/usr/bin/env python3
"""50 creates in parallel (one thread and one connection each): all succeed, all run a command,
all delete; afterwards the suite's cgroup parent has no children left."""

import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import UUID_RE, CorralTestCase, cgroup_children, main, mounts_under, suite_cgroup_dirs  # noqa: E402

N = 50
SPEC = {}  # the harness defaults, as a stock client sends them: cpu "1", memory "512Mi"


class Concurrency(CorralTestCase):

    def test_parallel_creates(self):
        barrier = threading.Barrier(N)
        results = [None] * N
        created = []
        lock = threading.Lock()

        def worker(i):
            c = self.corrald.client(timeout=120)
            out = {}
            try:
                barrier.wait(30)
                t0 = time.monotonic()
                r = c.create_sandbox_raw(metadata={"n": str(i)}, **SPEC)
                out["create_s"] = time.monotonic() - t0
                out["create"] = r
                if r.status != 202:
                    return
                sid = r.json()["id"]
                with lock:
                    created.append(sid)
                out["id"] = sid
                out["state"] = r.json()["status"]["state"]
                out["cgroups"] = bool(self.corrald.sandbox_cgroups(sid))
                res = c.run(sid, "echo ok-%d" % i, read_timeout=120)
                out["run"] = res
                d = c.delete_sandbox(sid)
                out["delete"] = d.status
            except Exception as e:  # noqa: BLE001
                out["exc"] = repr(e)
            finally:
                c.close()
                results[i] = out

        def cleanup():
            c = self.corrald.client()
            for sid in created:
                c.delete_sandbox(sid)
            c.close()
        self.addCleanup(cleanup)

        threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(N)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(240)
        wall = time.monotonic() - t0
        self.assertFalse(any(t.is_alive() for t in threads), "some workers hung")
        failures = []
        for i, out in enumerate(results):
            if "exc" in out:
                failures.append((i, out["exc"]))
                continue
            r = out["create"]
            if r.status != 202:
                failures.append((i, "create %r" % r))
                continue
            if out["state"] != "Running" or not UUID_RE.match(out["id"]):
                failures.append((i, "create response %r" % r.json()))
            if not out["cgroups"]:
                failures.append((i, "no cgroup under %s for %s" % (self.corrald.cgroup_name, out["id"])))
            res = out["run"]
            if res.exit_code != 0 or res.stdout_lines != ["ok-%d" % i]:
                failures.append((i, "run %r" % res))
            if out["delete"] != 204:
                failures.append((i, "delete %r" % out["delete"]))
        self.assertEqual(failures, [], "%d of %d failed" % (len(failures), N))
        self.assertEqual(len(set(o["id"] for o in results)), N, "ids are unique")
        times = sorted(o["create_s"] for o in results)
        print("\n  %d parallel creates: p50 %.0f ms, max %.0f ms, wall %.1f s"
              % (N, times[N // 2] * 1000, times[-1] * 1000, wall), file=sys.stderr)

        # everything is torn down: no sandbox listed, no child cgroup, no mount
        self.wait_until(lambda: self.client.all_sandbox_ids() == [], 30, msg="list to be empty")

        def no_children():
            return all(not cgroup_children(d) for d in suite_cgroup_dirs(self.corrald.cgroup_name))
        self.wait_until(no_children, 60, interval=0.2,
                        msg="cgroup parent to have no children: %s" %
                        [(d, cgroup_children(d)) for d in suite_cgroup_dirs(self.corrald.cgroup_name)])
        self.wait_until(lambda: not mounts_under(self.corrald.state_dir), 30, msg="mounts gone")
        entries = os.listdir(os.path.join(self.corrald.state_dir, "sandboxes"))
        self.wait_until(lambda: not os.listdir(os.path.join(self.corrald.state_dir, "sandboxes")), 30,
                        msg="sandbox dirs removed: %s" % entries)


if __name__ == "__main__":
    main()
