#!/usr/bin/env python3
"""A full state file system under running commands (issue 12): output that could not be stored is
reported as cut — a marker naming the error, the bytes dropped, the status's error and
output_error — never passed off as complete; the exit code stays the process's; what was stored
has no hole; and it all still holds after corrald is killed -9 and restarted."""

import os
import re
import secrets
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from faults import SmallTmpfsCorrald, fill  # noqa: E402
from harness import CommandStream, CorralTestCase, main  # noqa: E402

SMALL = {"cpu": "1", "memory": "256Mi", "pids": "64"}
PAD = "x" * 100


BG_LINES = 200000
FG_LINES = 30000
BG_BYTES = sum(len("b-%d\n" % i) for i in range(1, BG_LINES + 1))
FG_BYTES = sum(len("f-%d-%s\n" % (i, PAD)) for i in range(1, FG_LINES + 1))


def st_dropped(res):
    """The byte count of a stream's "[corral-execd: N bytes of output dropped]" marker."""
    for line in res.stderr_lines:
        m = re.match(r"^\[corral-execd: ([0-9]+) bytes of output dropped\]$", line)
        if m:
            return int(m.group(1))
    return 0


def prefix_ok(lines, fmt, first):
    """lines are fmt % first, fmt % (first + 1), ... with no hole; returns how many."""
    for k, line in enumerate(lines):
        if line != fmt % (first + k):
            return -1 - k
    return len(lines)


class DiskFull:
    """The test, for a disk that fill() fills and unfill() empties again."""

    def status(self, sid, cid):
        r = self.client.command_status(sid, cid)
        self.assertEqual(r.status, 200, r)
        return r.json()

    def test_output_on_a_full_disk(self):
        # Fault: the disk under execd's records fills while a foreground and a background command
        # write output: their streams, logs and statuses must say what was not stored.
        sid = self.create(resourceLimits=self.LIMITS, timeout=600)["id"]
        fg_id, bg_id = secrets.token_hex(16), secrets.token_hex(16)
        wait = "while [ ! -e /tmp/go ]; do sleep 0.05; done"
        # more output after the fill than any slack a full file system keeps (blocks an ext4
        # releases when a file is closed)
        bg = self.client.run(
            sid, "seq 1 50 | sed 's/^/b-/'; %s; seq 51 %d | sed 's/^/b-/'; exit 3"
            % (wait, BG_LINES), background=True, id=bg_id)
        self.assertEqual(bg.init_id, bg_id, bg)
        fg = CommandStream("127.0.0.1", self.corrald.port, sid,
                           "seq 1 200 | sed 's/^/f-/; s/$/-%s/'; %s; "
                           "seq 201 %d | sed 's/^/f-/; s/$/-%s/'; exit 5"
                           % (PAD, wait, FG_LINES, PAD), id=fg_id)
        self.addCleanup(fg.abort)
        self.assertEqual(fg.wait_for("init")["text"], fg_id)
        self.wait_until(lambda: self.client.command_logs(sid, bg_id, 0).text.count("\n") >= 50,
                        10, msg="the background command's first 50 lines")

        self.fill(sid)
        go = self.client.run(sid, "touch /tmp/go")
        self.assertEqual(go.exit_code, 0, go)

        # foreground: the process's exit code, the lines before the cut without a hole, the
        # marker naming the error and the count of what was dropped
        res = fg.finish()
        self.assertEqual(res.exit_code, 5, res)
        fmt = "f-%d-" + PAD
        out = res.stdout_lines
        # whole lines without a hole, then perhaps the start of the next (the cut may fall
        # mid-line, as at the cap)
        n = prefix_ok(out[:-1], fmt, 1)
        self.assertGreaterEqual(n, 199, "live stream: a hole in the stored output: %r" % res)
        partial = out[-1] != fmt % (n + 1)
        self.assertTrue((fmt % (n + 1)).startswith(out[-1]), out[-2:])
        self.assertLess(n, FG_LINES, "all of the output arrived although it could not be stored")
        self.assertEqual(sum(len(l) + 1 for l in out) - partial + st_dropped(res), FG_BYTES,
                         "bytes delivered + bytes dropped = bytes written")
        err = res.stderr_lines
        self.assertEqual(len(err), 2, err)
        self.assertIn("could not be stored (No space left on device)", err[0])
        self.assertRegex(err[1], r"^\[corral-execd: [1-9][0-9]* bytes of output dropped\]$")
        st = self.status(sid, fg_id)
        self.assertEqual(st["exit_code"], 5, st)
        self.assertIn("No space left on device", st.get("output_error", ""), st)
        self.assertIn("could not be stored", st.get("error") or "", st)
        self.assertTrue(st.get("output_truncated"), st)
        self.assertGreater(st.get("output_dropped", 0), 0, st)
        # a re-attach replays the same stream (the stored part plus what execd kept in memory)
        again = self.client.run(sid, "true", id=fg_id)
        self.assertEqual(again.stdout_lines, res.stdout_lines)
        self.assertEqual(again.stderr_lines, res.stderr_lines)
        self.assertEqual(again.exit_code, 5, again)

        # background: exit 3 is the process's; the status's error says the output is not all
        # there; the logs have no hole and say why they end
        st = self.client.wait_command(sid, bg_id, timeout=30)
        self.assertEqual(st.get("exit_code"), 3, st)
        self.assertIn("No space left on device", st.get("output_error", ""), st)
        self.assertIn("could not be stored", st.get("error") or "", st)
        self.assertGreater(st.get("output_dropped", 0), 0, st)
        logs = self.client.command_logs(sid, bg_id, 0)
        self.assertEqual(logs.status, 200, logs)
        self.assertIn("No space left on device", logs.header("EXECD-COMMANDS-OUTPUT-ERROR") or "",
                      logs)
        stored = re.sub(r"\n?\[corral-execd: [^\]]*\]\n", "", logs.text)
        lines = stored.split("\n")
        # whole lines without a hole, then perhaps the start of the next one (a short write)
        n = prefix_ok(lines[:-1], "b-%d", 1)
        self.assertGreaterEqual(n, 0, "logs: a hole in the stored output: %r" % logs.text[:2000])
        self.assertTrue(("b-%d" % (n + 1)).startswith(lines[-1]), lines[-3:])
        self.assertLess(n, BG_LINES, "every line stored on a full disk?")
        # every byte the command wrote is either in the logs or counted as dropped
        self.assertEqual(len(stored) + st["output_dropped"], BG_BYTES, (len(stored), st))

        # crash and restart with space again: still reported, and new commands are whole
        self.client.close()
        self.corrald.kill9()
        self.corrald.start()
        self.unfill(sid)
        st = self.status(sid, bg_id)
        self.assertEqual(st.get("exit_code"), 3, st)
        self.assertIn("could not be stored", st.get("error") or "", st)
        st = self.status(sid, fg_id)
        self.assertEqual(st.get("exit_code"), 5, st)
        self.assertIn("No space left on device", st.get("output_error", ""), st)
        res = self.client.run(sid, "seq 1 2000; exit 4")
        self.assertEqual(res.exit_code, 4, res)
        self.assertEqual(res.stdout_lines, [str(i) for i in range(1, 2001)])
        self.assertEqual(res.stderr_lines, [])


class StateFsFull(DiskFull, CorralTestCase):
    """No disk of its own (--default-disk none): execd's records are on the state fs, a tmpfs the
    test fills from the host (the issue's 64 MiB tmpfs)."""
    corrald_class = SmallTmpfsCorrald
    corrald_kwargs = {"extra_args": ["--default-disk", "none"]}
    LIMITS = SMALL

    def fill(self, sid):
        self.filler = os.path.join(self.corrald.state_dir, "filler")
        self.addCleanup(lambda: os.path.exists(self.filler) and os.unlink(self.filler))
        fill(self.filler)

    def unfill(self, sid):
        os.unlink(self.filler)


class OwnDiskFull(DiskFull, CorralTestCase):
    """An 8 MiB disk of its own, which the workload fills: execd's records are on it too."""
    corrald_kwargs = {"extra_args": ["--default-disk", "8Mi"]}
    LIMITS = dict(SMALL, **{"ephemeral-storage": "8Mi"})

    def fill(self, sid):
        r = self.client.run(sid, "dd if=/dev/zero of=/var/tmp/fill bs=64k; sync")
        self.assertIn("No space left on device", r.stderr, r)

    def unfill(self, sid):
        self.assertEqual(self.client.run(sid, "rm /var/tmp/fill").exit_code, 0)


if __name__ == "__main__":
    main()
