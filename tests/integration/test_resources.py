#!/usr/bin/env python3
"""Resources that tell the truth (issue 5): the CPU and memory a sandbox sees are its own (every
tool that counts CPUs, /proc/cpuinfo, /proc/meminfo), the CPU-cap environment variables, OOM
diagnosis (default 137 and counted; oomGroup -> Failed/OOMKilled and 410), usage stats, fork bombs
contained."""

import json
import os
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import subprocess  # noqa: E402

from harness import CorralTestCase, binary, controller_dir, free_port, main  # noqa: E402

HOST_CPUS = len(os.sched_getaffinity(0))

# Each tool, with the source it really reads (strace on Debian 12, see src/runtime/sysview.h).
CPU_TOOLS = {
    "nproc": "nproc",                                                        # sched_getaffinity
    "getconf": "getconf _NPROCESSORS_ONLN",                                  # /sys/.../cpu/online
    "python": "python3 -c 'import os; print(os.cpu_count())'",               # /sys/.../cpu/online
    "node": "node -e 'console.log(require(\"os\").cpus().length)'",          # /proc/stat
    "cpuinfo": "grep -c ^processor /proc/cpuinfo",
    "online": "python3 -c 'import os; s=open(\"/sys/devices/system/cpu/online\").read().strip(); "
              "print(sum(int(b)-int(a)+1 for a,_,b in (r.partition(\"-\") if \"-\" in r else (r,\"\",r) "
              "for r in s.split(\",\"))))'",
    "stat": "grep -c '^cpu[0-9]' /proc/stat",
    "affinity": "python3 -c 'import os; print(len(os.sched_getaffinity(0)))'",
}

CPU_CAP_ENV_VARS = [
    "OMP_NUM_THREADS", "OMP_THREAD_LIMIT", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
    "NUMEXPR_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "BLIS_NUM_THREADS", "PYTHON_CPU_COUNT",
    "NUMBA_NUM_THREADS", "LOKY_MAX_CPU_COUNT", "POLARS_MAX_THREADS", "PYTEST_XDIST_AUTO_NUM_WORKERS",
    "DJANGO_TEST_PROCESSES", "GOMAXPROCS", "CARGO_BUILD_JOBS", "RAYON_NUM_THREADS",
    "RUST_TEST_THREADS", "UV_THREADPOOL_SIZE", "CMAKE_BUILD_PARALLEL_LEVEL",
]


class CpuView(CorralTestCase):

    def check_view(self, cpu, want):
        # cpuCapEnv off: nproc honours OMP_NUM_THREADS, and this test is about the view itself.
        sid = self.create(resourceLimits={"cpu": cpu, "memory": "256Mi"},
                          extensions={"cpuCapEnv": "false"})["id"]
        env = self.sh(sid, "env")
        self.assertNotIn("OMP_NUM_THREADS", env)
        for name, cmd in CPU_TOOLS.items():
            with self.subTest(tool=name, cpu=cpu):
                out = self.sh(sid, cmd).strip()
                self.assertEqual(out, str(want), "%s (%s) with a %s CPU limit" % (name, cmd, cpu))
        # The CPUs named everywhere are the same ones.
        online = self.sh(sid, "cat /sys/devices/system/cpu/online").strip()
        aff = self.sh(sid, "python3 -c 'import os; print(sorted(os.sched_getaffinity(0)))'").strip()
        procs = self.sh(sid, "grep ^processor /proc/cpuinfo | awk '{print $3}' | paste -sd,").strip()
        self.assertEqual("[%s]" % procs.replace(",", ", "), aff)
        cpus = []
        for part in online.split(","):
            lo, _, hi = part.partition("-")
            cpus += list(range(int(lo), int(hi or lo) + 1))
        self.assertEqual(str(cpus), aff, "online %r vs affinity %s" % (online, aff))
        stat = self.sh(sid, "grep '^cpu[0-9]' /proc/stat | cut -d' ' -f1 | tr -d cpu | paste -sd,")
        self.assertEqual("[%s]" % stat.strip().replace(",", ", "), aff)
        if controller_dir("cpuset") and want < HOST_CPUS:
            # The cpuset holds: asking for every host CPU still gives only the sandbox's.
            widened = self.sh(sid, "python3 -c 'import os; os.sched_setaffinity(0, range(%d)); "
                                   "print(sorted(os.sched_getaffinity(0)))'" % HOST_CPUS).strip()
            self.assertEqual(widened, aff)
            with open(os.path.join(controller_dir("cpuset"), self.corrald.cgroup_name, sid,
                                   "cpuset.cpus")) as f:
                self.assertEqual(f.read().strip(), online)
        return sid

    @unittest.skipIf(HOST_CPUS < 2, "needs a host with 2 or more CPUs")
    def test_one_cpu_limit(self):
        self.check_view("1", 1)

    @unittest.skipIf(HOST_CPUS < 2, "needs a host with 2 or more CPUs")
    def test_fractional_limit_rounds_up(self):
        self.check_view("500m", 1)

    @unittest.skipIf(HOST_CPUS < 3, "needs a host with 3 or more CPUs")
    def test_two_cpu_limit(self):
        self.check_view("2", 2)

    def test_two_cpu_limit_on_this_host(self):
        # A 2-CPU limit on a host with 2 (or fewer) CPUs: every tool says min(2, host CPUs).
        self.check_view("2", min(2, HOST_CPUS))

    def test_no_cpu_limit_sees_the_host(self):
        sid = self.create(resourceLimits={"memory": "256Mi"})["id"]
        self.assertEqual(self.sh(sid, "nproc").strip(), str(HOST_CPUS))
        self.assertEqual(self.sh(sid, "grep -c ^processor /proc/cpuinfo").strip(), str(HOST_CPUS))

    def test_sandboxes_spread_over_cpus(self):
        if HOST_CPUS < 2:
            self.skipTest("one CPU")
        seen = set()
        for _ in range(8):
            sid = self.create(resourceLimits={"cpu": "1", "memory": "64Mi"})["id"]
            seen.add(self.sh(sid, "cat /sys/devices/system/cpu/online").strip())
            if len(seen) > 1:
                break
        self.assertGreater(len(seen), 1, "8 one-CPU sandboxes all pinned to %s" % seen)

    def test_meminfo_total_is_the_limit(self):
        sid = self.create(resourceLimits={"cpu": "1", "memory": "300Mi"})["id"]
        meminfo = self.sh(sid, "cat /proc/meminfo")
        fields = {}
        for line in meminfo.splitlines():
            k, _, v = line.partition(":")
            fields[k] = v.split()
        self.assertEqual(fields["MemTotal"], [str(300 * 1024), "kB"])
        self.assertLessEqual(int(fields["MemAvailable"][0]), 300 * 1024)
        self.assertLessEqual(int(fields["MemFree"][0]), 300 * 1024)
        self.assertEqual(fields["SwapTotal"][0], "0")
        out = self.sh(sid, "free -b | awk '/^Mem:/ {print $2}'").strip()
        self.assertEqual(int(out), 300 * 1024 * 1024)
        node = self.sh(sid, "node -e 'console.log(require(\"os\").totalmem())'").strip()
        self.assertEqual(int(node), 300 * 1024 * 1024)
        # The view is read-only.
        res = self.client.run(sid, "echo x > /proc/meminfo")
        self.assertNotEqual(res.exit_code, 0)


class CpuCapEnv(CorralTestCase):

    def env_of(self, sid):
        return dict(l.split("=", 1) for l in self.sh(sid, "env").splitlines() if "=" in l)

    def test_injected_by_default(self):
        sid = self.create(resourceLimits={"cpu": "2700m", "memory": "128Mi"},
                          env={"GOMAXPROCS": "5"})["id"]
        env = self.env_of(sid)
        for name in CPU_CAP_ENV_VARS:
            self.assertEqual(env.get(name), "5" if name == "GOMAXPROCS" else "2", name)
        # nproc honours OMP_NUM_THREADS.
        self.assertEqual(self.sh(sid, "nproc").strip(), "2")

    def test_fraction_is_at_least_one(self):
        sid = self.create(resourceLimits={"cpu": "250m", "memory": "128Mi"})["id"]
        env = self.env_of(sid)
        self.assertEqual([env.get(n) for n in CPU_CAP_ENV_VARS], ["1"] * len(CPU_CAP_ENV_VARS))

    def test_off_per_sandbox(self):
        sid = self.create(resourceLimits={"cpu": "1", "memory": "128Mi"},
                          extensions={"cpuCapEnv": "false"})["id"]
        env = self.env_of(sid)
        self.assertEqual([n for n in CPU_CAP_ENV_VARS if n in env], [])

    def test_bad_value_is_422(self):
        r = self.client.create_sandbox_raw(image={"uri": "host"}, entrypoint=["sleep", "infinity"],
                                           resourceLimits={"cpu": "1"},
                                           extensions={"cpuCapEnv": "yes"})
        self.assertEqual(r.status, 422, r)
        self.assertIn("cpuCapEnv", r.text)


ALLOC_PY = "python3 -c \"b = bytearray(%d * 1024 * 1024); b[::4096] = b'x' * len(b[::4096]); print(len(b))\""


class Oom(CorralTestCase):

    def stats(self, sid):
        r = self.client.get("/v1/sandboxes/%s/stats" % sid)
        self.assertEqual(r.status, 200, r)
        return r.json()

    def test_default_only_the_offender_dies_and_is_counted(self):
        sid = self.create(resourceLimits={"cpu": "1", "memory": "96Mi"})["id"]
        st = self.stats(sid)
        self.assertEqual(st["memory"]["oomKills"], 0)
        self.assertEqual(st["memory"]["limitBytes"], 96 * 1024 * 1024)
        # 40 MiB fits: the peak must show at least that.
        self.assertEqual(self.sh(sid, ALLOC_PY % 40).strip(), str(40 * 1024 * 1024))
        st = self.stats(sid)
        self.assertGreaterEqual(st["memory"]["peakBytes"], 40 * 1024 * 1024, st)
        # 200 MiB does not: that process gets SIGKILL (137), the sandbox lives on.
        res = self.client.run(sid, ALLOC_PY % 200, read_timeout=60)
        self.assertEqual(res.exit_code, 137, res)
        self.assertEqual(self.sh(sid, "echo alive").strip(), "alive")
        st = self.stats(sid)
        self.assertGreaterEqual(st["memory"]["oomKills"], 1, st)
        # limitHits: v2 memory.events "max" counts; v1's failcnt stays 0 on this kernel once
        # memsw.limit_in_bytes is set (measured), so it is only present there.
        self.assertIn("limitHits", st["memory"])
        self.assertGreaterEqual(st["memory"]["peakBytes"], 90 * 1024 * 1024, st)
        self.assertLessEqual(st["memory"]["peakBytes"], 96 * 1024 * 1024, st)
        self.assertEqual(self.client.get_sandbox(sid).json()["status"]["state"], "Running")
        # corral stats tells the story in words.
        p = subprocess.run([binary("corral"), "--server", self.corrald.base_url, "stats", sid],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("OOM kills %d" % st["memory"]["oomKills"], p.stdout)
        self.assertIn("limit 96Mi", p.stdout)
        self.assertIn("out-of-memory killer killed", p.stdout)
        p = subprocess.run([binary("corral"), "--server", self.corrald.base_url, "stats", "--json",
                            sid], capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn('"oomKills"', p.stdout)
        p = subprocess.run([binary("corral"), "--server", self.corrald.base_url, "stats", "nosuch"],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 2, p)

    def test_oom_group_ends_the_sandbox(self):
        sid = self.create(resourceLimits={"cpu": "1", "memory": "64Mi"},
                          extensions={"oomGroup": "true"})["id"]
        res = self.client.run(sid, ALLOC_PY % 200, read_timeout=60)
        self.assertNotEqual(res.exit_code, 0)

        def failed():
            st = self.client.get_sandbox(sid).json()["status"]
            return st if st["state"] == "Failed" else None
        st = self.wait_until(failed, timeout=15, msg="oomGroup sandbox to be Failed")
        self.assertEqual(st["reason"], "OOMKilled", st)
        if controller_dir("memory"):
            # cgroup v1: corrald reacted to the kernel's OOM notification, not to a poll.
            self.assertIn("memory.oom_control event", self.corrald.log_tail(200))
        self.assertIn("memory limit 64Mi", st["message"])
        self.assertIn("peak", st["message"])
        r = self.client.post("/sandboxes/%s/proxy/44772/command" % sid, {"command": "true"})
        self.assertEqual(r.status, 410, r)
        body = r.json()
        self.assertEqual(body["code"], "SANDBOX::ENDED")
        self.assertEqual(body["reason"], "OOMKilled")
        # The dead sandbox's numbers stay readable until it is deleted.
        stats = self.stats(sid)
        self.assertFalse(stats["alive"])
        self.assertGreaterEqual(stats["memory"]["oomKills"], 1)
        self.assertEqual(stats["reason"], "OOMKilled")


class Stats(CorralTestCase):

    def test_fields(self):
        # A small quota, so that a spinning process is throttled even on a busy host.
        sid = self.create(resourceLimits={"cpu": "100m", "memory": "128Mi", "pids": "64"},
                          resourceRequests={"cpu": "50m", "memory": "64Mi"})["id"]
        self.sh(sid, "dd if=/dev/zero of=/var/tmp/blob bs=1M count=8 status=none; "
                     "timeout 1 sh -c 'while :; do :; done' || true")
        for prefix in ("", "/v1"):
            r = self.client.get("%s/sandboxes/%s/stats" % (prefix, sid))
            self.assertEqual(r.status, 200, r)
        st = r.json()
        self.assertEqual(st["id"], sid)
        self.assertEqual(st["state"], "Running")
        self.assertTrue(st["alive"])
        m, c, p, d = st["memory"], st["cpu"], st["pids"], st["disk"]
        self.assertEqual(m["limitBytes"], 128 * 1024 * 1024)
        self.assertEqual(m["requestBytes"], 64 * 1024 * 1024)
        self.assertGreater(m["currentBytes"], 0)
        self.assertGreaterEqual(m["peakBytes"], m["currentBytes"])
        self.assertIn("oomEvents", m)  # null on cgroup v1 (no counter), a number on v2
        self.assertEqual(c["limitMillis"], 100)
        self.assertEqual(c["requestMillis"], 50)
        # A second of spinning under a 0.1-CPU quota: ~0.1 s used, most periods throttled.
        self.assertGreater(c["usageNanos"], 50 * 1000 * 1000, c)
        self.assertLess(c["usageNanos"], 400 * 1000 * 1000, c)
        self.assertGreater(c["periods"], 5, c)
        self.assertGreater(c["throttledPeriods"], 0, c)
        self.assertGreater(c["throttledNanos"], 0, c)
        self.assertGreater(c["throttleRatio"], 0.0, c)
        self.assertLessEqual(c["throttleRatio"], 1.0, c)
        self.assertGreaterEqual(p["current"], 1)
        self.assertEqual(p["limit"], 64)
        self.assertGreaterEqual(d["usedBytes"], 8 * 1024 * 1024, d)
        self.assertTrue(d["exact"])

    def test_unknown_sandbox_404_and_method_405(self):
        self.assertEqual(self.client.get("/v1/sandboxes/nosuch/stats").status, 404)
        sid = self.create()["id"]
        self.assertEqual(self.client.post("/v1/sandboxes/%s/stats" % sid, {}).status, 405)


class ForkBomb(CorralTestCase):

    def test_contained(self):
        # Memory enough that the pids limit, not the OOM killer, is what stops the bomb (an ASan
        # build's execd alone takes tens of MiB of it).
        bomb = self.create(resourceLimits={"cpu": "500m", "memory": "1Gi", "pids": "64"})["id"]
        other = self.create(resourceLimits={"cpu": "500m", "memory": "128Mi"})["id"]
        # The classic bomb, started in the background; it runs until the sandbox is deleted.
        r = self.client.post("/sandboxes/%s/proxy/44772/command" % bomb,
                             {"command": "bomb() { bomb | bomb & }; bomb", "background": True})
        self.assertEqual(r.status, 200, r)
        pids_current = self.corrald.cgroup_file("pids", bomb, "pids.current")

        pids_events = self.corrald.cgroup_file("pids", bomb, "pids.events")

        def refused_at_limit():
            """The kernel refused a fork at pids.max ("max N" in pids.events)."""
            try:
                with open(pids_events) as f:
                    return any(l.split()[0] == "max" and int(l.split()[1]) > 0 for l in f)
            except (OSError, TypeError, IndexError, ValueError):
                return False

        def saturated():
            # The classic bomb decays once its forks fail, so a stats poll can miss its peak
            # on a slow (ASan) build: the kernel's own count of refused forks says it too.
            st = self.client.get("/v1/sandboxes/%s/stats" % bomb).json()
            return st if st["pids"]["current"] >= 60 or refused_at_limit() else None
        st = self.wait_until(saturated, timeout=20, msg="the bomb to reach the pids limit")
        t_end = time.monotonic() + 3
        worst = 0.0
        while time.monotonic() < t_end:
            # The limit holds ...
            st = self.client.get("/v1/sandboxes/%s/stats" % bomb).json()
            self.assertLessEqual(st["pids"]["current"], 64, st)
            if pids_current and os.path.exists(pids_current):
                with open(pids_current) as f:
                    self.assertLessEqual(int(f.read()), 64)
            # ... and the other sandbox, corrald and the host answer promptly.
            t0 = time.monotonic()
            self.assertEqual(self.sh(other, "echo ok").strip(), "ok")
            worst = max(worst, time.monotonic() - t0)
            self.assertEqual(self.client.get("/health").status, 200)
        self.assertLess(worst, 2.0, "a command in the neighbour sandbox took %.2fs" % worst)
        sys.stderr.write("[fork bomb] pids.current %d of 64; slowest neighbour command %.0f ms\n"
                         % (st["pids"]["current"], worst * 1000))
        # The host can still fork.
        t0 = time.monotonic()
        self.assertEqual(os.system("true"), 0)
        self.assertLess(time.monotonic() - t0, 2.0)
        # Deleting the bombed sandbox kills every process of it, bounded in time.
        self.assertEqual(self.client.delete_sandbox(bomb).status, 204)
        self.wait_gone(bomb, timeout=30)


class Admission(CorralTestCase):
    """Capacity 2 CPUs; requests drive admission, limits do not."""

    corrald_kwargs = {"extra_args": ["--capacity", "cpu=2,memory=4Gi", "--capacity-wait", "6"]}

    def spec(self, **kw):
        s = {"image": {"uri": "host"}, "entrypoint": ["sleep", "infinity"],
             "resourceLimits": {"cpu": "1", "memory": "256Mi"}}
        s.update(kw)
        return s

    def create_async(self, spec):
        """POST in a thread (create answers only once Running); returns (thread, result dict)."""
        out = {}

        def go():
            c = self.corrald.client(timeout=60)
            try:
                r = c.create_sandbox_raw(**spec)
                out["status"], out["body"] = r.status, r.json()
            finally:
                c.close()
        t = threading.Thread(target=go)
        t.start()
        return t, out

    def pending(self):
        r = self.client.list_sandboxes(state="Pending")
        self.assertEqual(r.status, 200, r)
        return [s for s in r.json()["items"]
                if s["status"].get("reason") == "InsufficientCapacity"]

    def test_third_waits_then_starts_when_one_is_deleted(self):
        a = self.create(**self.spec())["id"]
        b = self.create(**self.spec())["id"]
        t, out = self.create_async(self.spec())
        waiting = self.wait_until(self.pending, timeout=5, msg="the third create to be Pending")
        self.assertEqual(len(waiting), 1)
        st = waiting[0]["status"]
        self.assertEqual(st["state"], "Pending")
        self.assertIn("cpu: needs 1000m, 0m of 2000m free", st["message"])
        got = self.client.get_sandbox(waiting[0]["id"]).json()
        self.assertEqual(got["status"]["reason"], "InsufficientCapacity")
        r = self.client.get("/v1/sandboxes/%s/stats" % waiting[0]["id"])
        self.assertEqual(r.status, 409, r)
        self.assertIn("waiting for capacity", r.json()["message"])
        time.sleep(0.5)
        self.assertTrue(t.is_alive(), "the create answered while no capacity was free: %r" % out)
        self.assertEqual(self.client.delete_sandbox(a).status, 204)
        t.join(20)
        self.assertFalse(t.is_alive())
        self.assertEqual(out.get("status"), 202, out)
        c = out["body"]["id"]
        self.addCleanup(self._cleanup_sandbox, c)
        self.assertEqual(c, waiting[0]["id"])
        self.assertEqual(self.client.get_sandbox(c).json()["status"]["state"], "Running")
        self.assertEqual(self.sh(c, "echo hi").strip(), "hi")
        self.assertEqual(self.pending(), [])
        self.assertEqual(self.client.get_sandbox(b).json()["status"]["state"], "Running")

    def test_deadline_gives_the_capacity_error(self):
        self.create(**self.spec(resourceLimits={"cpu": "2", "memory": "256Mi"}))
        t0 = time.monotonic()
        r = self.client.create_sandbox_raw(**self.spec())
        took = time.monotonic() - t0
        self.assertEqual(r.status, 503, r)
        body = r.json()
        self.assertEqual(body["code"], "SANDBOX::CAPACITY_TIMEOUT")
        self.assertIn("cpu: needs 1000m", body["message"])
        self.assertGreaterEqual(took, 5.0)
        self.assertLess(took, 15.0)
        self.wait_until(lambda: self.pending() == [], timeout=10, msg="the timed-out create to go")

    def test_requests_not_limits_are_admitted(self):
        # Limits far above the capacity are fine when the requests fit.
        ids = [self.create(**self.spec(resourceLimits={"cpu": "2", "memory": "3Gi"},
                                       resourceRequests={"cpu": "500m", "memory": "256Mi"}))["id"]
               for _ in range(4)]
        self.assertEqual(len(set(ids)), 4)
        st = self.client.get("/v1/sandboxes/%s/stats" % ids[0]).json()
        self.assertEqual(st["cpu"]["requestMillis"], 500)
        self.assertEqual(st["cpu"]["limitMillis"], 2000)
        # The requests set the CPU share and the memory soft limit (cgroup v1 names).
        shares = self.corrald.cgroup_file("cpu", ids[0], "cpu.shares")
        if shares and os.path.exists(shares):
            with open(shares) as f:
                self.assertEqual(int(f.read()), 512)
        soft = self.corrald.cgroup_file("memory", ids[0], "memory.soft_limit_in_bytes")
        if soft and os.path.exists(soft):
            with open(soft) as f:
                self.assertEqual(int(f.read()), 256 * 1024 * 1024)

    def test_requests_above_capacity_fail_at_once(self):
        t0 = time.monotonic()
        r = self.client.create_sandbox_raw(**self.spec(resourceLimits={"cpu": "4"}))
        self.assertEqual(r.status, 400, r)
        self.assertEqual(r.json()["code"], "SANDBOX::REQUESTS_EXCEED_CAPACITY")
        self.assertIn("resourceRequests.cpu", r.json()["message"])
        # Only resourceLimits was sent: the error names that field and says why.
        self.assertEqual(r.json()["detail"][0]["loc"], ["body", "resourceLimits"])
        self.assertIn("default to resourceLimits", r.json()["message"])
        r = self.client.create_sandbox_raw(**self.spec(resourceLimits={"cpu": "1", "memory": "8Gi"}))
        self.assertEqual(r.status, 400, r)
        self.assertIn("resourceRequests.memory", r.json()["message"])
        # at once: neither waited for capacity (--capacity-wait 6 s each); 2 s was a timing bound
        # a loaded host can pass
        self.assertLess(time.monotonic() - t0, 5.0)

    def test_fifo_no_overtaking(self):
        # Capacity full; a 2-CPU create queues first, then a 1-CPU one. Freeing one CPU must not
        # let the small one overtake the big one (which would starve it).
        a = self.create(**self.spec())["id"]
        b = self.create(**self.spec())["id"]
        t_big, big = self.create_async(self.spec(resourceLimits={"cpu": "2", "memory": "256Mi"}))
        self.wait_until(lambda: len(self.pending()) == 1, timeout=5, msg="big to queue")
        t_small, small = self.create_async(self.spec())
        self.wait_until(lambda: len(self.pending()) == 2, timeout=5, msg="small to queue")
        self.assertEqual(self.client.delete_sandbox(a).status, 204)
        time.sleep(1.0)
        self.assertTrue(t_small.is_alive(), "the 1-CPU create overtook the 2-CPU one: %r" % small)
        self.assertTrue(t_big.is_alive())
        self.assertEqual(self.client.delete_sandbox(b).status, 204)
        t_big.join(20)
        self.assertEqual(big.get("status"), 202, big)
        self.addCleanup(self._cleanup_sandbox, big["body"]["id"])
        # The small one now waits behind the big one, until its deadline.
        t_small.join(20)
        self.assertEqual(small.get("status"), 503, small)

    def test_delete_while_waiting(self):
        self.create(**self.spec(resourceLimits={"cpu": "2", "memory": "256Mi"}))
        t, out = self.create_async(self.spec())
        waiting = self.wait_until(self.pending, timeout=5, msg="create to queue")
        self.assertEqual(self.client.delete_sandbox(waiting[0]["id"]).status, 204)
        t.join(10)
        self.assertEqual(out.get("status"), 409, out)
        self.assertEqual(out["body"]["code"], "SANDBOX::DELETED")
        self.wait_until(lambda: self.client.get_sandbox(waiting[0]["id"]).status == 404,
                        timeout=10, msg="the deleted queued sandbox to 404")

    def post_and_hang_up(self, spec, after):
        """POST a create on a raw socket and close it once after() is true (without an answer)."""
        body = json.dumps(spec).encode()
        head = ("POST /v1/sandboxes HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                "Content-Length: %d\r\n" % len(body))
        if self.corrald.api_key:
            head += "OPEN-SANDBOX-API-KEY: %s\r\n" % self.corrald.api_key
        s = socket.create_connection(("127.0.0.1", self.corrald.port))
        try:
            s.sendall(head.encode() + b"\r\n" + body)
            return after()
        finally:
            s.close()

    def test_client_hangup_while_queued_cancels_the_create(self):
        a = self.create(**self.spec())["id"]
        b = self.create(**self.spec())["id"]
        waiting = self.post_and_hang_up(
            self.spec(), lambda: self.wait_until(self.pending, timeout=5, msg="create to queue"))
        sid = waiting[0]["id"]
        # Cancelled as soon as the client is gone, not when capacity frees.
        self.wait_until(lambda: self.client.get_sandbox(sid).status == 404, timeout=5,
                        msg="the abandoned queued create to go")
        self.assertEqual(self.client.delete_sandbox(a).status, 204)
        self.wait_gone(a)
        time.sleep(1.0)  # the queue would have moved by now
        ids = [x["id"] for x in self.client.list_sandboxes().json()["items"]]
        self.assertEqual(ids, [b])
        self.assertEqual(self.corrald.sandbox_cgroups(sid), [])
        self.assertFalse(os.path.exists(self.corrald.sandbox_dir(sid)))
        with open(self.corrald.log_path) as f:
            log = f.read()
        self.assertIn("sandbox %s: teardown (its client hung up while it waited for capacity)"
                      % sid, log)
        self.assertNotIn("No such file or directory", log)

    def test_client_hangup_while_being_created_rolls_back(self):
        before = {x["id"] for x in self.client.list_sandboxes().json()["items"]}
        self.addCleanup(lambda: [self._cleanup_sandbox(x["id"])
                                 for x in self.client.list_sandboxes().json()["items"]
                                 if x["id"] not in before])
        # Closed right after the request is sent: corrald reads the whole request before it sees
        # the hang-up, and the runtime takes milliseconds, so the create is under way then.
        self.post_and_hang_up(self.spec(), lambda: None)

        def hung_up():
            with open(self.corrald.log_path) as f:
                return re.search(r"sandbox (\S+): its client hung up while it was being created",
                                 f.read())
        # seen, then rolled back once its runtime work ends (conditions: a slow create under
        # ASan on a loaded host may take more than the 3 s this slept)
        m = self.wait_until(hung_up, 30, msg="corrald to see the hang-up mid-create:\n%s"
                            % self.corrald.log_tail())
        self.wait_until(lambda: {x["id"] for x in self.client.list_sandboxes().json()["items"]}
                        == before, 30, msg="the abandoned create to be rolled back")
        self.wait_until(lambda: not self.corrald.sandbox_cgroups(m.group(1)), timeout=10,
                        msg="the abandoned sandbox's cgroups to go")
        # its directory goes last in the teardown, after the cgroups
        self.wait_until(lambda: not os.path.exists(self.corrald.sandbox_dir(m.group(1))),
                        timeout=10, msg="the abandoned sandbox's directory to go")


class AdmissionDefaults(CorralTestCase):
    """With default flags a stock SDK client (30 s request timeout) sees the capacity error."""

    corrald_kwargs = {"extra_args": ["--capacity", "cpu=1,memory=4Gi"]}

    def test_capacity_error_before_30s(self):
        spec = {"image": {"uri": "host"}, "entrypoint": ["sleep", "infinity"],
                "resourceLimits": {"cpu": "1", "memory": "128Mi"}}
        self.create(**spec)
        c = self.corrald.client(timeout=60)
        try:
            t0 = time.monotonic()
            r = c.create_sandbox_raw(**spec)
            took = time.monotonic() - t0
        finally:
            c.close()
        self.assertEqual(r.status, 503, r)
        self.assertEqual(r.json()["code"], "SANDBOX::CAPACITY_TIMEOUT")
        self.assertIn("--capacity-wait", r.json()["message"])
        self.assertLess(took, 28.0)


def disk_loop(sandbox_dir):
    """The loop device (e.g. "loop3") mounted on <sandbox>/disk in our mount namespace, or None."""
    mp = os.path.join(os.path.realpath(sandbox_dir), "disk")
    with open("/proc/self/mountinfo") as f:
        for line in f:
            a = line.split()
            if len(a) > 4 and a[4] == mp and "-" in a:
                return os.path.basename(a[a.index("-") + 2])
    return None


def loop_backing(dev):
    try:
        with open("/sys/block/%s/loop/backing_file" % dev) as f:
            return f.read().strip()
    except OSError:
        return None


def state_free_bytes(state_dir):
    st = os.statvfs(state_dir)
    return st.f_bavail * st.f_frsize


class Disk(CorralTestCase):

    def test_ephemeral_storage_limit(self):
        t0 = time.monotonic()
        sid = self.create(resourceLimits={"cpu": "1", "memory": "256Mi",
                                          "ephemeral-storage": "64Mi"})["id"]
        create_s = time.monotonic() - t0
        # 40 MiB fit; the layer is a file system of its own, of the limit's size.
        self.sh(sid, "dd if=/dev/zero of=/var/tmp/a bs=1M count=40 status=none && sync")
        df = self.sh(sid, "df -k / | tail -1").split()
        res = self.client.run(sid, "dd if=/dev/zero of=/var/tmp/b bs=1M count=100 2>&1; echo rc=$?")
        self.assertIn("No space left on device", res.stdout, res)
        self.assertNotIn("rc=0", res.stdout)
        self.assertEqual(self.sh(sid, "echo alive").strip(), "alive")
        # Freeing space works again.
        self.sh(sid, "rm /var/tmp/b && dd if=/dev/zero of=/var/tmp/c bs=1M count=4 status=none")
        st = self.client.get("/v1/sandboxes/%s/stats" % sid).json()["disk"]
        self.assertEqual(st["limitBytes"], 64 * 1024 * 1024)
        self.assertGreaterEqual(st["usedBytes"], 44 * 1024 * 1024, st)
        self.assertLessEqual(st["usedBytes"], 64 * 1024 * 1024, st)
        # The image is a loop device of exactly the limit (so it cannot take more on the host),
        # and its backing file names neither the sandbox nor the state dir.
        dev = disk_loop(self.corrald.sandbox_dir(sid))
        self.assertIsNotNone(dev, "no loop device mounted on the sandbox's disk/")
        with open("/sys/block/%s/size" % dev) as f:
            self.assertEqual(int(f.read()) * 512, 64 * 1024 * 1024)
        backing = loop_backing(dev)
        self.assertIsNotNone(backing)
        self.assertNotIn(sid, backing)
        self.assertNotIn(self.corrald.tmp, backing)
        self.assertFalse(os.path.exists(os.path.join(self.corrald.sandbox_dir(sid), "disk.img")))
        sys.stderr.write("[disk] create with a 64Mi limit took %.0f ms; df in sandbox: %s; "
                         "backing file %s\n" % (create_s * 1000, df, backing))
        self.assertEqual(self.client.delete_sandbox(sid).status, 204)
        self.wait_gone(sid)
        # The loop device goes with the last user of the file system (autoclear): the sandbox's
        # mount namespace may outlive its processes for a moment.
        self.wait_until(lambda: loop_backing(dev) != backing, timeout=10,
                        msg="the loop device of the deleted sandbox to be released")

    def test_default_disk(self):
        # No ephemeral-storage: the server default (10Gi here) applies and shows as a limit.
        sid = self.create(resourceLimits={"cpu": "1", "memory": "256Mi"})["id"]
        st = self.client.get("/v1/sandboxes/%s/stats" % sid).json()["disk"]
        self.assertEqual(st["limitBytes"], 10 * 1024 ** 3, st)
        dev = disk_loop(self.corrald.sandbox_dir(sid))
        self.assertIsNotNone(dev, "no disk mounted for a sandbox without a limit")
        self.assertFalse(os.path.exists(os.path.join(self.corrald.sandbox_dir(sid), "upper")))
        self.sh(sid, "dd if=/dev/zero of=/var/tmp/a bs=1M count=20 status=none")
        df = self.sh(sid, "df -k / | tail -1").split()
        self.assertGreater(int(df[1]), 9 * 1024 * 1024, df)
        self.assertLessEqual(int(df[1]), 10 * 1024 * 1024, df)

    def test_limit_above_free_space(self):
        # More than the state file system can hold: refused before anything is made.
        free = state_free_bytes(self.corrald.state_dir)
        for v in (str(free + (1 << 30)), "1Ei"):
            r = self.client.create_sandbox_raw(image={"uri": "host"}, entrypoint=["sleep", "infinity"],
                                               resourceLimits={"cpu": "1", "ephemeral-storage": v})
            self.assertEqual(r.status, 422, r)
            body = r.json()
            self.assertEqual(body["code"], "SANDBOX::INVALID_PARAMETER")
            self.assertIn("resourceLimits.ephemeral-storage", body["message"])
            self.assertIn("free", body["message"])
            self.assertEqual(body["detail"][0]["loc"], ["body", "resourceLimits", "ephemeral-storage"])
        self.assertEqual(self.client.all_sandbox_ids(), [])

    def test_bad_value(self):
        for v in ("lots", "1Mi"):
            r = self.client.create_sandbox_raw(image={"uri": "host"}, entrypoint=["sleep", "infinity"],
                                               resourceLimits={"cpu": "1", "ephemeral-storage": v})
            self.assertEqual(r.status, 422, r)
            self.assertIn("ephemeral-storage", r.json()["message"])


class DefaultDiskSmall(CorralTestCase):
    """--default-disk SIZE: sandboxes without a limit get SIZE; an explicit limit wins."""

    corrald_kwargs = {"extra_args": ["--default-disk", "32Mi"]}

    def test_default_applies_and_explicit_wins(self):
        sid = self.create(resourceLimits={"cpu": "1", "memory": "256Mi"})["id"]
        st = self.client.get("/v1/sandboxes/%s/stats" % sid).json()["disk"]
        self.assertEqual(st["limitBytes"], 32 * 1024 * 1024, st)
        res = self.client.run(sid, "dd if=/dev/zero of=/var/tmp/fill bs=1M count=64 2>&1; echo rc=$?")
        self.assertIn("No space left on device", res.stdout, res)
        other = self.create(resourceLimits={"cpu": "1", "memory": "256Mi",
                                            "ephemeral-storage": "96Mi"})["id"]
        st = self.client.get("/v1/sandboxes/%s/stats" % other).json()["disk"]
        self.assertEqual(st["limitBytes"], 96 * 1024 * 1024, st)
        self.sh(other, "dd if=/dev/zero of=/var/tmp/fill bs=1M count=64 status=none")
        # The default is stored with the sandbox: a restart with another default keeps it.
        self.corrald.extra_args = ["--default-disk", "48Mi"]
        self.corrald.restart()
        st = self.client.get("/v1/sandboxes/%s/stats" % sid).json()["disk"]
        self.assertEqual(st["limitBytes"], 32 * 1024 * 1024, st)
        # Its disk outlived corrald (the mount holds the unnamed image): still full, still usable.
        res = self.client.run(sid, "dd if=/dev/zero of=/var/tmp/more bs=1M count=8 2>&1; echo rc=$?")
        self.assertIn("No space left on device", res.stdout, res)
        self.sh(sid, "rm /var/tmp/fill /var/tmp/more && dd if=/dev/zero of=/var/tmp/again bs=1M count=8 status=none")
        third = self.create(resourceLimits={"cpu": "1", "memory": "256Mi"})["id"]
        st = self.client.get("/v1/sandboxes/%s/stats" % third).json()["disk"]
        self.assertEqual(st["limitBytes"], 48 * 1024 * 1024, st)


class NoDefaultDisk(CorralTestCase):
    """--default-disk none: the layer is a plain directory on the state file system."""

    corrald_kwargs = {"extra_args": ["--default-disk", "none"]}

    def test_no_limit_no_image(self):
        sid = self.create(resourceLimits={"cpu": "1", "memory": "256Mi"})["id"]
        self.assertIsNone(disk_loop(self.corrald.sandbox_dir(sid)))
        self.assertTrue(os.path.isdir(os.path.join(self.corrald.sandbox_dir(sid), "upper")))
        st = self.client.get("/v1/sandboxes/%s/stats" % sid).json()["disk"]
        self.assertIsNone(st["limitBytes"], st)
        self.sh(sid, "dd if=/dev/zero of=/var/tmp/a bs=1M count=100 status=none")


class DefaultDiskFlag(unittest.TestCase):
    """Bad --default-disk values stop corrald at start-up with a message naming the flag."""

    def start_fails(self, value, status):
        tmp = tempfile.mkdtemp(prefix="corral-test-")
        try:
            r = subprocess.run([binary("corrald"), "--listen", "127.0.0.1:%d" % free_port(),
                                "--state-dir", os.path.join(tmp, "state"), "--default-disk", value,
                                "--sandbox-subnet", "none"],
                               stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self.assertEqual(r.returncode, status, r)
        return r.stderr

    def test_bad_values(self):
        for v in ("lots", "1Mi", "-5"):
            self.assertIn("--default-disk", self.start_fails(v, 2))

    def test_more_than_the_state_fs(self):
        msg = self.start_fails("1Ei", 1)
        self.assertIn("--default-disk 1Ei is more than the state file system", msg)


class AdmissionShutdown(CorralTestCase):
    """A create waiting for capacity when corrald stops gets an answer, not a dropped connection."""

    corrald_kwargs = {"extra_args": ["--capacity", "cpu=1,memory=4Gi", "--capacity-wait", "20"]}

    def test_queued_create_answered_on_sigterm(self):
        self.create(image={"uri": "host"}, entrypoint=["sleep", "infinity"],
                    resourceLimits={"cpu": "1", "memory": "128Mi"})
        out = {}

        def go():
            c = self.corrald.client(timeout=60)
            try:
                r = c.create_sandbox_raw(image={"uri": "host"}, entrypoint=["sleep", "infinity"],
                                         resourceLimits={"cpu": "1", "memory": "128Mi"})
                out["status"], out["body"] = r.status, r.json()
            finally:
                c.close()
        t = threading.Thread(target=go)
        t.start()
        self.wait_until(lambda: self.client.list_sandboxes(state="Pending").json()["items"],
                        timeout=5, msg="the second create to queue")
        t0 = time.monotonic()
        self.corrald.stop()
        t.join(15)
        self.assertEqual(out.get("status"), 503, out)
        self.assertEqual(out["body"]["code"], "SANDBOX::SHUTTING_DOWN")
        self.assertLess(time.monotonic() - t0, 10)
        # After a restart the running one is re-adopted (holding its request), the queued one gone.
        self.corrald.start()
        c = self.corrald.client()
        try:
            items = c.list_sandboxes().json()["items"]
            self.assertEqual([s["status"]["state"] for s in items], ["Running"], items)
        finally:
            c.close()


if __name__ == "__main__":
    main()
