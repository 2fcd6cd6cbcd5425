#!/usr/bin/env python3
"""Output floods (issue 8 item 7): a command's output is capped, cut output says so in the stream,
the logs and the status, the process keeps its own exit code, and the bytes execd keeps on the
host stay close to the bytes kept (no 28x amplification of many short lines)."""

import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sec import AttackCase, main  # noqa: E402

CAP = 1 << 20
CUT = "[corral-execd: output cap of %d bytes reached; the rest of the output is dropped]"
DROPPED = "[corral-execd: %d bytes of output dropped]"


def overlay_mounts_under(path):
    """Overlay mount points (a sandbox's root file system) at or below path."""
    path = os.path.realpath(path).rstrip("/")
    found = set()
    with open("/proc/self/mountinfo") as f:
        for line in f:
            pre, _, post = line.partition(" - ")
            mp = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), pre.split()[4])
            if post.split()[0] == "overlay" and (mp == path or mp.startswith(path + "/")):
                found.add(mp)
    return found


class OutputFlood(AttackCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.sids = []
        for _ in range(2):
            r = cls.client.create_sandbox_raw(resourceRequests={"cpu": "100m", "memory": "64Mi"})
            if r.status != 202:
                cls.tearDownClass()
                raise RuntimeError("cannot create a sandbox: %r" % r)
            cls.sids.append(r.json()["id"])
        cls.sid, cls.other = cls.sids

    @classmethod
    def tearDownClass(cls):
        for sid in getattr(cls, "sids", []):
            cls.client.delete_sandbox(sid)
        super().tearDownClass()

    def exec_dir(self, xid):
        """The execution's directory on the host, found under <state>/sandboxes/<id>/ wherever
        execd's state dir lives there (the sandbox's root file system is not walked)."""
        top = self.corrald.sandbox_dir(self.sid)
        skip = overlay_mounts_under(top)
        for root, dirs, _ in os.walk(top):
            dirs[:] = [d for d in dirs if os.path.join(root, d) not in skip and d != "rootfs"]
            if xid in dirs and os.path.exists(os.path.join(root, xid, "status.json")):
                return os.path.join(root, xid)
        return None

    def disk_bytes(self, xid):
        """Bytes of the execution's files once execd has written its final status."""
        d = self.wait_until(lambda: self.exec_dir(xid), 10,
                            msg="a directory for execution %s under %s" % (xid, self.corrald.sandbox_dir(self.sid)))
        def final():
            with open(os.path.join(d, "status.json")) as f:
                return '"running":false' in f.read()
        self.wait_until(final, 10, msg="the final status.json")
        time.sleep(0.2)
        return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)), d

    def test_foreground_flood_is_cut_at_the_cap(self):
        # attack: 64 MiB of NUL bytes (6x as JSON escapes) on stdout to fill the host's state dir
        flood = 64 << 20
        res = self.client.run(self.sid, "head -c %d /dev/zero; echo after-the-flood >&2; "
                              "touch /tmp/ran-on; exit 7" % flood, output_cap=CAP)
        self.assertEqual(res.http_status, 200, res)
        xid = res.init_id
        # The process ran to its end and its exit code is its own.
        self.assertEqual(res.events[-1]["type"], "error", res)
        self.assertEqual(res.events[-1]["error"], {"ename": "CommandExecError", "evalue": "7", "traceback": []})
        self.run_ok(self.sid, "test -e /tmp/ran-on")
        # What was kept is in the stream, then the marker; nothing after the cut but markers.
        kept = sum(len(t) for t in res.stdout_lines)
        self.assertEqual(kept, CAP)
        self.assertEqual(res.stderr_lines, [CUT % CAP, DROPPED % (flood + 16 - CAP)])
        st = self.client.command_status(self.sid, xid).json()
        self.assertEqual((st["exit_code"], st["output_truncated"], st["output_cap"], st["output_dropped"]),
                         (7, True, CAP, flood + 16 - CAP), st)
        # On the host: about the cap, not the flood.
        used, d = self.disk_bytes(xid)
        self.assertLess(used, CAP + (64 << 10), "%s holds %d bytes" % (d, used))
        # A re-attach replays the same stream, markers included.
        again = self.client.run(self.sid, "true", id=xid)
        self.assertEqual([(e["type"], e.get("text")) for e in again.events],
                         [(e["type"], e.get("text")) for e in res.events if e["type"] != "ping"])
        self.assert_platform_alive(self.sid, self.other)

    def test_cut_output_of_a_successful_command_still_ends_in_complete(self):
        # attack: flood past the cap hoping the cut turns a pass (exit 0) into a failure, or back
        res = self.client.run(self.sid, "yes | head -c 3000000; true", output_cap=CAP)
        self.assertEqual(res.events[-1]["type"], "execution_complete", res)
        self.assertEqual(res.exit_code, 0)
        self.assertIsNone(res.error)
        self.assertEqual(res.stdout_lines, ["y"] * (CAP // 2))
        self.assertEqual(res.stderr_lines, [CUT % CAP, DROPPED % (3000000 - CAP)])
        st = self.client.command_status(self.sid, res.init_id).json()
        self.assertEqual((st["exit_code"], st["output_truncated"]), (0, True), st)

    def test_background_flood_is_cut_and_logs_say_so(self):
        # attack: `yes` in a background command (no stream to slow it) for a bounded time
        res = self.client.run(self.sid, "timeout 2 yes; echo survived > /tmp/bg-ran-on; exit 3",
                              background=True, output_cap=CAP)
        self.assertEqual(res.http_status, 200, res)
        xid = res.init_id
        # corrald and the other sandbox answer while the flood runs.
        self.assert_platform_alive(self.other)
        st = self.client.wait_command(self.sid, xid, timeout=60)
        self.assertEqual((st["exit_code"], st["output_truncated"], st["output_cap"]), (3, True, CAP), st)
        self.assertGreater(st["output_dropped"], 0)
        self.run_ok(self.sid, "grep -q survived /tmp/bg-ran-on")
        # The logs: the kept bytes, then the markers on lines of their own; the header too.
        out, cursor = b"", 0
        while True:
            r = self.client.command_logs(self.sid, xid, cursor)
            self.assertEqual(r.status, 200, r)
            if not r.body:
                break
            out += r.body
            cursor = int(r.header("EXECD-COMMANDS-TAIL-CURSOR"))
        self.assertEqual(r.header("EXECD-COMMANDS-OUTPUT-TRUNCATED"),
                         "cap=%d; dropped=%d" % (CAP, st["output_dropped"]))
        self.assertEqual(out[:CAP], b"y\n" * (CAP // 2))
        self.assertEqual(out[CAP:].decode(), "\n%s\n%s\n" % (CUT % CAP, DROPPED % st["output_dropped"]))
        used, d = self.disk_bytes(xid)
        self.assertLess(used, CAP + (64 << 10), "%s holds %d bytes" % (d, used))
        self.assert_platform_alive(self.sid, self.other)

    def test_many_short_lines_are_not_amplified(self):
        # attack: millions of 2-byte lines, buffered and one write each, to amplify output on disk
        for cmd, size in (("yes | head -c 1000000", 1000000),
                          ("seq 1 200000", sum(len(str(i)) + 1 for i in range(1, 200001))),
                          ("for i in $(seq 1 30000); do echo $i; done",
                           sum(len(str(i)) + 1 for i in range(1, 30001))),
                          ("head -c 500000 /dev/zero | tr '\\0' '\\n'", 500000)):
            res = self.client.run(self.sid, cmd)
            self.assertEqual(res.exit_code, 0, res)
            self.assertEqual(sum(len(t) + 1 if t != "\n" else 1 for t in res.stdout_lines), size, cmd)
            used, d = self.disk_bytes(res.init_id)
            ratio = used / size
            print("%-45s output %9d  on disk %9d  ratio %.3f" % (cmd, size, used, ratio), file=sys.stderr)
            self.assertLess(ratio, 1.2, "%r: %d bytes of output take %d bytes in %s" % (cmd, size, used, d))
        self.assert_platform_alive(self.sid, self.other)

    def test_output_cap_is_validated(self):
        # attack: a cap that is not a positive byte count (0, negative, text) must not disable it
        for bad in (0, -1, "1Gi", 1.5, True):
            r = self.client.post(self.client.execd_path(self.sid, "/command"),
                                 {"command": "true", "output_cap": bad})
            self.assertEqual(r.status, 400, (bad, r))
            self.assertIn("output_cap", r.json()["message"])
        # A cap above execd's own is execd's: it never raises the limit.
        res = self.client.run(self.sid, "echo ok", output_cap=1 << 62)
        self.assertEqual(res.stdout_lines, ["ok"])
        self.assert_platform_alive(self.sid)


if __name__ == "__main__":
    main()
