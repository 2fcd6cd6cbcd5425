#!/usr/bin/env python3
"""corrald restarts: kill -9 with sandboxes and commands running, restart on the same state dir;
everything is re-adopted, commands finish and stay readable, TTLs are re-armed, a sandbox that died
while corrald was down is reported Failed with a reason. Also a clean SIGTERM restart."""

import json
import os
import secrets
import signal
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import CommandStream, CorralTestCase, main, parse_time  # noqa: E402


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


class Restart(CorralTestCase):

    def state(self, sid):
        r = self.client.get_sandbox(sid)
        self.assertEqual(r.status, 200, "%s after restart: %r" % (sid, r))
        return r.json()["status"]

    def test_kill9_and_restart(self):
        tok = secrets.token_hex(4)
        a = self.create(metadata={"role": "bg"})["id"]
        b = self.create(metadata={"role": "fg"})["id"]
        c = self.create(timeout=12, metadata={"role": "ttl"})
        cid, c_expires = c["id"], parse_time(c["expiresAt"])
        d = self.create(metadata={"role": "dies"})["id"]
        created_at = {s: self.client.get_sandbox(s).json()["createdAt"] for s in (a, b, cid, d)}

        bg = self.client.run(a, "sleep 3; echo done", background=True)
        self.assertTrue(bg.complete, bg)
        bg_id = bg.init_id
        fg_marker = "/tmp/fg-%s" % tok
        fg = CommandStream("127.0.0.1", self.corrald.port, b,
                           "sleep 3; echo fg-done > %s; echo fg-done" % fg_marker)
        self.addCleanup(fg.abort)
        init = fg.wait_for("init")
        self.assertIsNotNone(init, fg.result)
        fg_id = init["text"]
        d_pid = self.corrald.pid1(d)
        a_pid = self.corrald.pid1(a)
        self.assertTrue(alive(d_pid))

        # crash
        self.client.close()
        self.corrald.kill9()
        fg.abort()
        self.assertTrue(alive(a_pid), "sandboxes outlive corrald")
        # a sandbox dies while corrald is down
        os.kill(d_pid, signal.SIGKILL)
        self.wait_until(lambda: not alive(d_pid) or open("/proc/%d/stat" % d_pid).read().split()[2] == "Z",
                        5, msg="PID 1 of d to die")
        self.corrald.start()

        # every sandbox is still listed; the live ones Running, the dead one Failed with a reason
        listed_at = time.time()
        ids = self.client.all_sandbox_ids()
        for s in (a, b, d):
            self.assertIn(s, ids)
        # (against c's own expiry: the time from its create to the crash varies with the load)
        if listed_at < c_expires.timestamp() - 1:
            self.assertIn(cid, ids, "the TTL sandbox is re-adopted until its expiry")
        self.assertEqual(self.state(a)["state"], "Running")
        self.assertEqual(self.state(b)["state"], "Running")
        for s in (a, b, d):
            self.assertEqual(self.client.get_sandbox(s).json()["createdAt"], created_at[s])
        md = [it["id"] for it in self.client.list_sandboxes(metadata={"role": "bg"}).json()["items"]]
        self.assertIn(a, md, "metadata survives the restart")
        st = self.wait_until(lambda: self.state(d)["state"] == "Failed" and self.state(d), 10,
                             msg="the dead sandbox reported Failed")
        self.assertTrue(st.get("reason"), "Failed comes with a reason: %r" % st)
        # calls on the dead sandbox get a clear error, not a hang or a 200
        r = self.client.post("/sandboxes/%s/proxy/44772/command" % d, {"command": "true"})
        self.assertIn(r.status, (409, 410), "proxy to an ended sandbox: %r" % r)

        # the commands finish; status and output are readable
        st = self.client.wait_command(a, bg_id, timeout=15)
        self.assertEqual(st.get("exit_code"), 0, st)
        r = self.client.command_logs(a, bg_id, 0)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.text, "done\n")
        st = self.client.wait_command(b, fg_id, timeout=15)
        self.assertEqual(st.get("exit_code"), 0, st)
        self.assertEqual(self.sh(b, "cat %s" % fg_marker), "fg-done")

        # new commands run
        self.assertEqual(self.sh(a, "echo new-a"), "new-a")
        self.assertEqual(self.sh(b, "echo new-b"), "new-b")

        # the TTL timer was re-armed: c disappears after its expiry
        remaining = (c_expires.timestamp() - time.time())
        self.wait_gone(cid, timeout=max(0, remaining) + 15)
        self.assertGreaterEqual(time.time(), c_expires.timestamp() - 0.5, "reaped before expiry")

        # the dead one can be deleted and is cleaned up
        r = self.client.delete_sandbox(d)
        self.assertEqual(r.status, 204, r)
        self.wait_gone(d)

    def test_expired_while_down_is_reaped(self):
        j = self.create(timeout=2)
        sid = j["id"]
        self.client.close()
        self.corrald.kill9()
        time.sleep(3)
        self.corrald.start()
        self.wait_gone(sid, timeout=15)

    def test_sigterm_restart_keeps_sandboxes(self):
        sid = self.create()["id"]
        bg = self.client.run(sid, "sleep 2; echo later", background=True)
        pid = self.corrald.pid1(sid)
        self.client.close()
        rc = self.corrald.stop()
        self.assertIn(rc, (0, -signal.SIGTERM), "clean exit on SIGTERM")
        self.assertTrue(alive(pid), "sandboxes survive a clean stop")
        self.corrald.start()
        self.assertEqual(self.state(sid)["state"], "Running")
        st = self.client.wait_command(sid, bg.init_id, timeout=15)
        self.assertEqual(st.get("exit_code"), 0, st)
        self.assertEqual(self.client.command_logs(sid, bg.init_id, 0).text, "later\n")
        self.assertEqual(self.sh(sid, "echo ok"), "ok")

    def test_sigterm_with_streams_open(self):
        """SIGTERM with a command stream open: corrald exits promptly, the command keeps running
        in the sandbox and is readable after the restart."""
        sid = self.create()["id"]
        s = CommandStream("127.0.0.1", self.corrald.port, sid, "sleep 3; echo fin > /tmp/fin; echo fin")
        self.addCleanup(s.abort)
        cid = s.wait_for("init")["text"]
        self.client.close()
        t0 = time.monotonic()
        rc = self.corrald.stop(timeout=20)
        self.assertLess(time.monotonic() - t0, 5, "corrald waited for a client stream before exiting")
        self.assertIn(rc, (0, -signal.SIGTERM))
        s.finish()  # the stream ends (cut) rather than hanging
        self.corrald.start()
        st = self.client.wait_command(sid, cid, timeout=15)
        self.assertEqual(st.get("exit_code"), 0, st)
        self.assertEqual(self.sh(sid, "cat /tmp/fin"), "fin")

    def test_records_from_before_handles_are_adopted(self):
        """A state dir written by a corrald before runtime handles and typed resources ("pid" and
        "starttime" in sandbox.json, no "handle", no "resources"): its sandboxes are re-adopted,
        proxied and watched (a PID 1 that dies afterwards is reported), their resources read from
        the strings, and they stay so across a change of the record and a restart."""
        live = self.create(resourceLimits={"cpu": "500m", "memory": "256Mi", "pids": "200",
                                           "ephemeral-storage": "64Mi"},
                           resourceRequests={"cpu": "250m", "memory": "128Mi"})["id"]
        dies = self.create()["id"]
        stats = self.client.get("/v1/sandboxes/%s/stats" % live).json()
        want = (stats["cpu"]["requestMillis"], stats["memory"]["requestBytes"],
                stats["disk"]["limitBytes"])
        self.assertEqual(want, (250, 128 << 20, 64 << 20), stats)
        self.client.close()
        self.corrald.kill9()
        for sid in (live, dies):
            path = os.path.join(self.corrald.sandbox_dir(sid), "sandbox.json")
            with open(path) as f:
                rec = json.load(f)
            self.assertIn("handle", rec)
            del rec["handle"]
            if sid == live:
                self.assertEqual(rec["resources"], {
                    "cpuLimitMillis": 500, "memoryLimitBytes": 256 << 20, "pidsMax": 200,
                    "cpuRequestMillis": 250, "memoryRequestBytes": 128 << 20,
                    "diskLimitBytes": 64 << 20})
            del rec["resources"]
            with open(os.path.join(self.corrald.sandbox_dir(sid), "pid")) as f:
                pid, start = f.read().split()
            rec["pid"], rec["starttime"] = int(pid), int(start)
            with open(path, "w") as f:
                json.dump(rec, f, indent=1)
        self.corrald.start()
        self.assertEqual(self.state(live)["state"], "Running")
        self.assertEqual(self.state(dies)["state"], "Running")
        self.assertEqual(self.sh(live, "echo adopted"), "adopted")
        stats = self.client.get("/v1/sandboxes/%s/stats" % live).json()
        self.assertEqual((stats["cpu"]["requestMillis"], stats["memory"]["requestBytes"],
                          stats["disk"]["limitBytes"]), want, "resources read from the old record")
        os.kill(self.corrald.pid1(dies), signal.SIGKILL)
        st = self.wait_until(lambda: self.state(dies)["state"] == "Failed" and self.state(dies), 10,
                             msg="the death of an adopted old-format sandbox to be seen")
        self.assertIn("pid %d" % int(pid), st.get("message", ""), st)
        self.assertEqual(self.client.post("/v1/sandboxes/%s/pause" % live).status, 202)
        self.client.close()
        self.corrald.kill9()
        self.corrald.start()
        self.assertEqual(self.state(live)["state"], "Paused")
        self.assertEqual(self.client.post("/v1/sandboxes/%s/resume" % live).status, 202)
        self.assertEqual(self.sh(live, "echo again"), "again")

    def test_delete_while_down_then_restart(self):
        """A sandbox deleted just before a crash is torn down after the restart, not resurrected."""
        sid = self.create()["id"]
        r = self.client.delete_sandbox(sid)
        self.assertEqual(r.status, 204)
        self.client.close()
        self.corrald.kill9()
        self.corrald.start()
        self.wait_gone(sid, timeout=20)

    def test_state_changes_survive_restart(self):
        """Renew, metadata PATCH and pause are durable (OpenSandbox #1200: a restart brought back
        the stale expiry)."""
        from datetime import datetime, timedelta, timezone
        from harness import rfc3339
        a = self.create(timeout=60, metadata={"k": "v"})["id"]
        p = self.create()["id"]
        target = datetime.now(timezone.utc) + timedelta(seconds=3600)
        r = self.client.post("/v1/sandboxes/%s/renew-expiration" % a, {"expiresAt": rfc3339(target.timestamp())})
        self.assertEqual(r.status, 200, r)
        r = self.client.patch("/v1/sandboxes/%s/metadata" % a, {"k": None, "new": "x"})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(self.client.post("/v1/sandboxes/%s/pause" % p).status, 202)
        self.wait_until(lambda: self.state(p)["state"] == "Paused", 10, msg="Paused")
        self.client.close()
        self.corrald.kill9()
        self.corrald.start()
        g = self.client.get_sandbox(a).json()
        self.assertLess(abs((parse_time(g["expiresAt"]) - target).total_seconds()), 1.0,
                        "the renewed expiry survives a restart: %r" % g)
        self.assertEqual(g["metadata"], {"new": "x"})
        self.assertEqual(self.state(p)["state"], "Paused", "pause survives a restart")
        self.assertEqual(self.client.post("/v1/sandboxes/%s/resume" % p).status, 202)
        self.assertEqual(self.sh(p, "echo thawed"), "thawed")
        self.assertEqual(self.state(p)["state"], "Running")

    def test_no_fd_leak_across_create_run_delete(self):
        def nfds():
            return len(os.listdir("/proc/%d/fd" % self.corrald.proc.pid))
        # warm up (lazily opened files, pools)
        for _ in range(3):
            sid = self.create()["id"]
            self.client.run(sid, "true")
            self.client.delete_sandbox(sid)
        time.sleep(1)
        base = nfds()
        for i in range(20):
            sid = self.create()["id"]
            self.assertEqual(self.client.run(sid, "echo %d" % i).stdout_lines, [str(i)])
            s = CommandStream("127.0.0.1", self.corrald.port, sid, "sleep 5")
            s.wait_for("init")
            s.abort()
            self.assertEqual(self.client.delete_sandbox(sid).status, 204)
        self.wait_until(lambda: self.client.all_sandbox_ids() == [], 20, msg="all deleted")
        self.wait_until(lambda: nfds() <= base + 3, 20, interval=0.2,
                        msg="corrald's open fds back to ~%d (now %d)" % (base, nfds()))

    def test_list_order_after_restart(self):
        """createdAt descending holds for sandboxes re-adopted from the state dir."""
        made = [self.create(metadata={"order": "x"})["id"] for _ in range(6)]
        self.client.close()
        self.corrald.kill9()
        self.corrald.start()
        items = self.client.list_sandboxes(metadata={"order": "x"}).json()["items"]
        self.assertEqual([it["id"] for it in items], list(reversed(made)))
        page = self.client.list_sandboxes(metadata={"order": "x"}, page=2, page_size=4).json()
        self.assertEqual([it["id"] for it in page["items"]], list(reversed(made))[4:])

    def test_lock_left_by_a_dead_corralds_process_delays_the_start(self):
        """A process the killed corrald left behind may hold the state dir's lock a moment (a
        worker between its fork and closing what it inherited): the next corrald waits for it
        instead of refusing to start (the CI flake 'in use by another corrald (pid <dead>)')."""
        import subprocess
        sid = self.create()["id"]
        self.client.close()
        self.corrald.kill9()
        lock = os.path.join(self.corrald.state_dir, "corrald.lock")
        # it says when it holds the lock (a fixed sleep could start corrald first on a loaded
        # host), and holds it for 3 s: corrald, started at once, waits for it (up to 5 s)
        holder = subprocess.Popen(["flock", "--exclusive", lock, "sh", "-c", "echo held; exec sleep 3"],
                                  stdout=subprocess.PIPE, text=True)
        try:
            self.assertEqual(holder.stdout.readline().strip(), "held")
            self.corrald.start()
        finally:
            holder.wait(10)
            holder.stdout.close()
        self.assertEqual(self.sh(sid, "echo ok"), "ok")
        self.assertIn("is gone, but a process it left holds the lock", self.corrald.log_tail(80))

    def test_second_corrald_on_same_state_dir_refuses(self):
        """Two control planes on one state dir would both own every sandbox (two TTL timers, two
        teardowns, interleaved sandbox.json writes): the second one must refuse to start."""
        import subprocess
        from harness import free_port
        sid = self.create()["id"]
        p = subprocess.Popen(self.corrald.argv(free_port()), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL)
        try:
            rc = p.wait(8)
        except subprocess.TimeoutExpired:
            rc = None
            p.terminate()
            p.wait(10)
        out = p.stdout.read().decode("utf-8", "replace")
        p.stdout.close()
        self.assertIsNotNone(rc, "a second corrald started on a state dir already in use:\n%s" % out[-600:])
        self.assertNotEqual(rc, 0)
        self.assertIn(self.corrald.state_dir, out, "the refusal names the state dir")
        self.assertEqual(self.sh(sid, "echo still-mine"), "still-mine")

    def test_kill9_during_creates(self):
        """Creates in flight when corrald dies: after the restart every sandbox is either listed
        (Running, or Failed with a reason) or fully rolled back; nothing half-made is left."""
        import threading
        from harness import cgroup_children, mounts_under, suite_cgroup_dirs
        # 100 at once (issue 12), small: pids 32 each of this VM's 32768, tiny requests
        n = 100
        got = [None] * n
        started = threading.Event()
        small = {"cpu": "100m", "memory": "64Mi", "pids": "32"}

        def worker(i):
            c = self.corrald.client(timeout=60)
            try:
                started.set()
                time.sleep(i * 0.004)  # staggered: some done, some in flight, some too late
                got[i] = c.create_sandbox_raw(metadata={"inflight": "yes"}, resourceLimits=small,
                                              resourceRequests={"cpu": "1m", "memory": "1Mi"})
            except Exception as e:  # noqa: BLE001
                got[i] = e
            finally:
                c.close()
        ths = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(n)]
        for t in ths:
            t.start()
        started.wait(5)
        time.sleep(0.16)
        self.client.close()
        self.corrald.kill9()
        for t in ths:
            t.join(65)
        acknowledged = [g.json()["id"] for g in got if not isinstance(g, Exception) and g.status == 202]
        self.corrald.start()

        def settled():
            items = self.client.list_sandboxes(metadata={"inflight": "yes"}, page_size=200).json()["items"]
            if all(it["status"]["state"] in ("Running", "Failed") for it in items):
                return (items,)
            return None
        items = self.wait_until(settled, 60, msg="no sandbox left Pending")[0]
        ids = [it["id"] for it in items]
        for sid in acknowledged:
            self.assertIn(sid, ids, "a create acknowledged with 202 before the crash was lost")
        for it in items:
            if it["status"]["state"] == "Failed":
                self.assertTrue(it["status"].get("reason"), it)
            else:
                self.assertEqual(self.sh(it["id"], "echo ok"), "ok")
        for sid in ids:
            self.assertEqual(self.client.delete_sandbox(sid).status, 204)
        sbdir = os.path.join(self.corrald.state_dir, "sandboxes")

        def clean():
            kids = [(d, cgroup_children(d)) for d in suite_cgroup_dirs(self.corrald.cgroup_name)]
            return (all(not k for _, k in kids) and not mounts_under(self.corrald.state_dir)
                    and not os.listdir(sbdir))
        self.wait_until(clean, 40, interval=0.2,
                        msg="half-created sandboxes rolled back: cgroups %s, mounts %s, dirs %s" % (
                            [(d, cgroup_children(d)) for d in suite_cgroup_dirs(self.corrald.cgroup_name)],
                            mounts_under(self.corrald.state_dir), os.listdir(sbdir)))
        print("\n  in-flight creates: %d acknowledged before the crash, %d listed after" %
              (len(acknowledged), len(ids)), file=sys.stderr)


if __name__ == "__main__":
    main()
