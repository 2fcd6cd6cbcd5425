#!/usr/bin/env python3
"""PID 1 of a sandbox dies while clients wait on it (issue 12): every waiting call ends with the
typed SANDBOX::ENDED and the reason — a command stream with a last error event, a status
long-poll with 410 — never a bare cut or 502; corrald and other sandboxes keep answering."""

import os
import signal
import sys
import threading
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from harness import CommandStream, CorralTestCase, main  # noqa: E402

SMALL = {"cpu": "500m", "memory": "128Mi", "pids": "32", "ephemeral-storage": "8Mi"}


class Pid1Death(CorralTestCase):
    corrald_kwargs = {"extra_args": ["--default-disk", "8Mi"]}

    def test_long_polls_and_streams_end_typed(self):
        # Fault: PID 1 is killed -9 while a status long-poll (?wait=) and a command stream wait.
        sid = self.create(resourceLimits=SMALL)["id"]
        bg = self.client.run(sid, "sleep 60", background=True)
        self.assertEqual(bg.http_status, 200, bg)
        stream = CommandStream("127.0.0.1", self.corrald.port, sid, "echo started; sleep 60")
        self.addCleanup(stream.abort)
        self.assertEqual(stream.wait_for("stdout")["text"], "started")
        polls = []

        def poll():
            c = self.corrald.client(timeout=60)
            try:
                polls.append(c.get(c.execd_path(sid, "/command/status/%s?wait=30" % bg.init_id)))
            finally:
                c.close()
        ths = [threading.Thread(target=poll) for _ in range(3)]
        for t in ths:
            t.start()
        # the long-polls are waiting once execd counts them (its /metrics would too); a short
        # head start is enough for the assertion to be about waiting ones, and harmless if not
        threading.Event().wait(0.3)
        os.kill(self.corrald.pid1(sid), signal.SIGKILL)
        for t in ths:
            t.join(40)
        st = self.wait_until(lambda: self.client.get_sandbox(sid).json()["status"], 10)
        self.assertEqual(st["state"], "Failed", st)
        self.assertEqual(len(polls), 3)
        for r in polls:
            self.assertEqual(r.status, 410, r)
            self.assertEqual(r.json()["code"], "SANDBOX::ENDED", r)
            self.assertEqual(r.json()["reason"], st["reason"], r)
            self.assertNotIn(self.corrald.tmp, r.text)
        res = stream.finish()
        self.assertIsNotNone(res.error, res)
        self.assertEqual(res.error["ename"], "SANDBOX::ENDED", res)
        self.assertEqual(res.error["evalue"], st["reason"], res)
        # a new long-poll, and any other call, on the ended sandbox: 410 at once
        r = self.client.get(self.client.execd_path(sid, "/command/status/%s?wait=30" % bg.init_id))
        self.assertEqual((r.status, r.json()["code"]), (410, "SANDBOX::ENDED"), r)
        other = self.create(resourceLimits=SMALL)["id"]
        self.assertEqual(self.sh(other, "echo fine"), "fine")


if __name__ == "__main__":
    main()
