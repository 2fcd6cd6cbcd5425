#!/usr/bin/env python3
"""Resource limits: memory (the allocating process gets 137, the sandbox survives), CPU quota and
pids limit visible inside and on the host, pids limit enforced."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import CorralTestCase, cgroup_v2_dir, controller_dir, main  # noqa: E402

ALLOC_200M_PY = "python3 -c \"b = b'x' * (200 * 1024 * 1024); print(len(b))\""
ALLOC_200M_PERL = "perl -e '$x = \"x\" x (200*1024*1024); print length($x), \"\\n\"'"


def read(path):
    with open(path) as f:
        return f.read().strip()


class Limits(CorralTestCase):

    def host_file(self, ctrl, sid, name):
        p = self.corrald.cgroup_file(ctrl, sid, name)
        if p is None:
            v2 = cgroup_v2_dir()
            if v2:
                p = os.path.join(v2, self.corrald.cgroup_name, sid, name)
        return p

    def inside_first(self, sid, paths):
        """The first readable file among paths inside the sandbox: (path, content) or (None, None)."""
        script = "; ".join("if [ -r %s ]; then echo %s; cat %s; exit 0; fi" % (p, p, p) for p in paths)
        res = self.client.run(sid, script + "; exit 1")
        if res.exit_code != 0:
            return None, None
        return res.stdout_lines[0], "\n".join(res.stdout_lines[1:])

    # --- memory ------------------------------------------------------------------------------

    def test_memory_limit_kills_allocation_with_137(self):
        sid = self.create(resourceLimits={"cpu": "1", "memory": "64Mi"})["id"]
        limit = self.host_file("memory", sid, "memory.limit_in_bytes")
        if limit and os.path.exists(limit):
            self.assertEqual(int(read(limit)), 64 * 1024 * 1024)
        else:
            limit = self.host_file("memory", sid, "memory.max")
            self.assertEqual(int(read(limit)), 64 * 1024 * 1024)
        path, content = self.inside_first(sid, ["/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                                "/sys/fs/cgroup/memory.max"])
        self.assertIsNotNone(path, "the memory limit is visible inside the sandbox")
        self.assertEqual(int(content), 64 * 1024 * 1024, path)

        self.assertEqual(self.sh(sid, "echo before"), "before")
        for name, cmd in (("python3", ALLOC_200M_PY), ("perl", ALLOC_200M_PERL)):
            res = self.client.run(sid, cmd, read_timeout=60)
            self.assertEqual(res.http_status, 200, res)
            self.assertNotIn("209715200", res.stdout, "%s allocated 200 MiB under a 64 MiB limit" % name)
            self.assertEqual(res.exit_code, 137, "%s: %r" % (name, res))
            self.assertEqual(res.error["evalue"], "137")
            st = self.client.wait_command(sid, res.init_id, timeout=10)
            self.assertEqual(st.get("exit_code"), 137, st)
            # the sandbox keeps working
            self.assertEqual(self.sh(sid, "echo after-%s" % name), "after-%s" % name)
        g = self.client.get_sandbox(sid).json()
        self.assertEqual(g["status"]["state"], "Running", g)

    def test_memory_limit_background(self):
        sid = self.create(resourceLimits={"cpu": "1", "memory": "64Mi"})["id"]
        res = self.client.run(sid, ALLOC_200M_PY, background=True)
        st = self.client.wait_command(sid, res.init_id, timeout=30)
        self.assertEqual(st.get("exit_code"), 137, st)
        self.assertEqual(self.sh(sid, "echo alive"), "alive")

    def test_small_allocation_fits(self):
        sid = self.create(resourceLimits={"cpu": "1", "memory": "256Mi"})["id"]
        out = self.sh(sid, "python3 -c \"b = b'x' * (100 * 1024 * 1024); print(len(b))\"")
        self.assertEqual(out, str(100 * 1024 * 1024))

    def wait_state(self, sid, states, timeout=15):
        def st():
            r = self.client.get_sandbox(sid)
            return r.status == 200 and r.json()["status"]["state"] in states and r.json()["status"]
        return self.wait_until(st, timeout, msg="%s to reach %s" % (sid, states))

    def test_oom_group_ends_sandbox(self):
        sid = self.create(resourceLimits={"cpu": "1", "memory": "64Mi"},
                          extensions={"oomGroup": "true"})["id"]
        res = self.client.run(sid, ALLOC_200M_PY, read_timeout=60)
        self.assertNotEqual(res.exit_code, 0, res)
        st = self.wait_state(sid, ("Failed",))
        self.assertEqual(st.get("reason"), "OOMKilled", st)
        r = self.client.post("/sandboxes/%s/proxy/44772/command" % sid, {"command": "true"})
        self.assertEqual(r.status, 410, r)

    def test_earlier_oom_does_not_mislabel_a_clean_exit(self):
        """A command OOM-killed earlier must not make a later clean entrypoint exit 'OOMKilled'."""
        sid = self.create(resourceLimits={"cpu": "1", "memory": "64Mi"},
                          entrypoint=["sh", "-c", "while [ ! -e /tmp/stop ]; do sleep 0.05; done; exit 0"])["id"]
        res = self.client.run(sid, ALLOC_200M_PY, read_timeout=60)
        self.assertEqual(res.exit_code, 137, res)
        self.run_ok(sid, "touch /tmp/stop")
        st = self.wait_state(sid, ("Terminated", "Failed"))
        self.assertEqual((st["state"], st.get("reason")), ("Terminated", "EntrypointExited"), st)

    # --- cpu ---------------------------------------------------------------------------------

    def test_cpu_quota(self):
        sid = self.create(resourceLimits={"cpu": "500m", "memory": "128Mi"})["id"]
        q = self.host_file("cpu", sid, "cpu.cfs_quota_us")
        if q and os.path.exists(q):
            quota = int(read(q))
            period = int(read(self.host_file("cpu", sid, "cpu.cfs_period_us")))
        else:
            quota, period = (int(x) for x in read(self.host_file("cpu", sid, "cpu.max")).split())
        self.assertGreater(quota, 0)
        self.assertAlmostEqual(quota / period, 0.5, places=3)
        path, content = self.inside_first(sid, ["/sys/fs/cgroup/cpu/cpu.cfs_quota_us",
                                                "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us",
                                                "/sys/fs/cgroup/cpu.max"])
        self.assertIsNotNone(path, "the CPU quota is visible inside the sandbox")
        self.assertEqual(int(content.split()[0]), quota, path)

        sid2 = self.create(resourceLimits={"cpu": "2", "memory": "128Mi"})["id"]
        q = self.host_file("cpu", sid2, "cpu.cfs_quota_us")
        if q and os.path.exists(q):
            quota2 = int(read(q))
            period2 = int(read(self.host_file("cpu", sid2, "cpu.cfs_period_us")))
        else:
            quota2, period2 = (int(x) for x in read(self.host_file("cpu", sid2, "cpu.max")).split())
        self.assertAlmostEqual(quota2 / period2, 2.0, places=3)

    def test_cpu_quota_enforced(self):
        """A busy loop under 200m for ~1.5 s of wall time uses clearly less than a full core."""
        sid = self.create(resourceLimits={"cpu": "200m", "memory": "128Mi"})["id"]
        out = self.sh(sid, "python3 -c \"import time,os\n"
                           "t=time.time()\n"
                           "while time.time()-t < 1.5: pass\n"
                           "u=os.times(); print(u.user+u.system)\"")
        used = float(out)
        self.assertLess(used, 0.9, "a 200m sandbox burnt %.2fs of CPU in 1.5s" % used)
        thr = self.host_file("cpu", sid, "cpu.stat")
        if thr and os.path.exists(thr):
            stat = dict(l.split() for l in read(thr).splitlines())
            self.assertGreater(int(stat.get("nr_throttled", 0)), 0, stat)

    # --- pids --------------------------------------------------------------------------------

    def test_pids_default_visible(self):
        sid = self.create()["id"]
        pm = self.host_file("pids", sid, "pids.max")
        self.assertEqual(read(pm), "4096")
        path, content = self.inside_first(sid, ["/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids.max"])
        self.assertIsNotNone(path, "the pids limit is visible inside the sandbox")
        self.assertEqual(content, "4096", path)

    def test_pids_limit_enforced(self):
        sid = self.create(resourceLimits={"cpu": "1", "memory": "256Mi", "pids": "32"})["id"]
        self.assertEqual(read(self.host_file("pids", sid, "pids.max")), "32")
        path, content = self.inside_first(sid, ["/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids.max"])
        self.assertEqual(content, "32", path)
        # fork 60 sleepers: the fork beyond the limit must fail with EAGAIN inside
        script = """python3 - <<'EOF'
import os, signal, time
kids, err = [], None
for i in range(60):
    try:
        pid = os.fork()
    except OSError as e:
        err = e.errno
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    kids.append(pid)
n = len([p for p in os.listdir('/proc') if p.isdigit()])
print(len(kids), err, n)
for k in kids:
    os.kill(k, signal.SIGKILL)
for k in kids:
    os.waitpid(k, 0)
EOF"""
        res = self.client.run(sid, script, read_timeout=60)
        self.assertEqual(res.exit_code, 0, res)
        forked, err, procs = res.stdout_lines[-1].split()
        self.assertEqual(err, "11", "fork beyond pids.max fails with EAGAIN: %r" % res.stdout_lines)
        self.assertGreater(int(forked), 10, "the loop did fork: %r" % res.stdout_lines)
        self.assertLess(int(forked), 32)
        self.assertLessEqual(int(procs), 32, "more processes than pids.max inside")
        cur = int(read(self.host_file("pids", sid, "pids.current")))
        self.assertLessEqual(cur, 32)
        # the host is fine and the sandbox recovers once the sleepers are gone
        self.wait_until(lambda: self.client.run(sid, "echo ok").stdout_lines == ["ok"], 15,
                        msg="sandbox usable after the fork storm")
        self.assertEqual(os.system("true"), 0)


if __name__ == "__main__":
    main()
