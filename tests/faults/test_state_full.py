#!/usr/bin/env python3
"""The state file system fills while clients patch metadata, renew, create (with keys) and start
background commands, all at once; then corrald is killed -9 and restarted with space again
(issue 12). Every 2xx must still be true afterwards, every failure must have been a typed error,
and a repeat of each failed keyed create makes exactly one sandbox for its key."""

import os
import secrets
import sys
import threading
import time
import unittest
from datetime import datetime, timezone

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from faults import SmallTmpfsCorrald, fill, spec  # noqa: E402
from harness import CorralTestCase, main, parse_time, rfc3339  # noqa: E402

# Typed refusals a full state fs may cause, per call.
WRITE_FAILED = ("SANDBOX::STATE_WRITE_FAILED",)
CREATE_REFUSED = ("SANDBOX::STATE_WRITE_FAILED", "SANDBOX::INSUFFICIENT_STORAGE")


def status(r):
    return r.http_status if hasattr(r, "http_status") else r.status


class StateFull(CorralTestCase):
    corrald_class = SmallTmpfsCorrald
    corrald_kwargs = {"extra_args": ["--default-disk", "none"]}

    def test_fill_under_load_then_kill9(self):
        # Fault: the state fs fills in the middle of concurrent state changes and commands, then
        # corrald is killed -9; after the restart the acknowledged changes are all there.
        run = secrets.token_hex(4)
        self.addCleanup(self.delete_all)
        sbs = [self.create(**spec(metadata={"run": run, "v": "0"}))["id"] for _ in range(3)]
        stop = threading.Event()
        log = {"patch": [], "renew": [], "create": [], "cmd": []}
        lock = threading.Lock()

        def record(kind, *entry):
            with lock:
                log[kind].append(entry)

        def patcher(sid):
            c = self.corrald.client(timeout=30)
            n = 0
            while not stop.is_set():
                n += 1
                r = c.patch("/v1/sandboxes/%s/metadata" % sid, {"v": str(n)})
                record("patch", sid, n, r)
            c.close()

        def renewer(sid):
            c = self.corrald.client(timeout=30)
            n = 0
            while not stop.is_set():
                n += 1
                t = rfc3339(time.time() + 3600 + n)
                r = c.post("/v1/sandboxes/%s/renew-expiration" % sid, {"expiresAt": t})
                record("renew", sid, t, r)
            c.close()

        def creator():
            c = self.corrald.client(timeout=60)
            n = 0
            while not stop.is_set():
                n += 1
                key = "%s-%d" % (run, n)
                r = c.post("/v1/sandboxes", spec(metadata={"run": run, "made": "yes"}),
                           headers={"Idempotency-Key": key})
                record("create", key, r)
            c.close()

        def commander(sid):
            c = self.corrald.client(timeout=30)
            n = 0
            while not stop.is_set():
                n += 1
                cid = secrets.token_hex(16)
                r = c.run(sid, "echo c-%d" % n, background=True, id=cid)
                record("cmd", sid, cid, n, r)
            c.close()

        def foreground(sid):
            c = self.corrald.client(timeout=30)
            while not stop.is_set():
                r = c.run(sid, "seq 1 3000; exit 3")
                record("fg", sid, r)
            c.close()
        log["fg"] = []

        ths = ([threading.Thread(target=patcher, args=(s,)) for s in sbs] +
               [threading.Thread(target=foreground, args=(sbs[1],))] +
               [threading.Thread(target=renewer, args=(s,)) for s in sbs] +
               [threading.Thread(target=creator), threading.Thread(target=commander, args=(sbs[0],))])
        for t in ths:
            t.start()

        def refused_patches():
            with lock:
                return sum(1 for e in log["patch"] if status(e[-1]) // 100 != 2)

        def every_kind_ran():
            with lock:
                return all(log.values())
        # Conditions, not fixed sleeps: on a loaded machine a second may see no call at all.
        self.wait_until(every_kind_ran, 60, msg="every kind of call to have run once")
        filler = os.path.join(self.corrald.state_dir, "filler")
        self.addCleanup(lambda: os.path.exists(filler) and os.unlink(filler))
        fill(filler)
        self.wait_until(refused_patches, 60, msg="a PATCH to meet the full disk (it never filled)")
        time.sleep(1.0)  # the load goes on against a full disk
        stop.set()
        for t in ths:
            t.join(60)

        # every failure was typed (and named no host path)
        for kind, allowed in (("patch", WRITE_FAILED), ("renew", WRITE_FAILED),
                              ("create", CREATE_REFUSED)):
            for entry in log[kind]:
                r = entry[-1]
                if r.status // 100 == 2:
                    continue
                self.assertIn(r.status, (500, 503, 507), (kind, r))
                self.assertIn(r.json()["code"], allowed, (kind, r))
                if r.status in (503, 507):
                    self.assertIsNotNone(r.header("Retry-After"), (kind, r))
                self.assertNotIn(self.corrald.tmp, r.text)
        refused = {k: sum(1 for e in log[k] if status(e[-1]) // 100 != 2) for k in log}
        self.assertGreater(refused["patch"], 0, "the disk never filled: %r" % refused)

        # crash, free the space, restart
        self.client.close()
        self.corrald.kill9()
        os.unlink(filler)
        self.corrald.start()

        for sid in sbs:
            j = self.client.get_sandbox(sid).json()
            acked = [n for s, n, r in log["patch"] if s == sid and r.status == 200]
            self.assertEqual(j["metadata"]["v"], str(acked[-1]) if acked else "0",
                             "metadata after the restart is the last acknowledged PATCH")
            acked = [t for s, t, r in log["renew"] if s == sid and r.status == 200]
            if acked:
                got = parse_time(j["expiresAt"]).timestamp()
                want = datetime.strptime(acked[-1], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
                    tzinfo=timezone.utc).timestamp() if "." in acked[-1] else \
                    parse_time(acked[-1]).timestamp()
                self.assertLess(abs(got - want), 1.0, "the last acknowledged renew")
            self.assertEqual(j["status"]["state"], "Running", j)

        # acknowledged creates exist; each refused key, repeated, makes one sandbox
        made = {k: r.json()["id"] for k, r in log["create"] if r.status == 202}
        for key, r in log["create"]:
            r2 = self.client.post("/v1/sandboxes", spec(metadata={"run": run, "made": "yes"}),
                                  headers={"Idempotency-Key": key})
            self.assertEqual(r2.status, 202, (key, r, r2))
            if key in made:
                self.assertEqual(r2.json()["id"], made[key], "a second sandbox for %s" % key)
            made[key] = r2.json()["id"]
        items = self.client.list_sandboxes(metadata={"made": "yes"}, page_size=200).json()["items"]
        self.assertEqual(sorted(it["id"] for it in items), sorted(made.values()),
                         "one sandbox per key, none unknown")

        # foreground commands: the process's exit code; all of the output, or a prefix of it and
        # the markers that say it was cut for the disk
        cut = 0
        for sid, r in log["fg"]:
            self.assertEqual((r.http_status, r.exit_code), (200, 3), r)
            out = r.stdout_lines
            n = len(out)
            # no hole; the last line may be cut short (the cut may fall mid-line)
            self.assertEqual(out[:-1], [str(i) for i in range(1, n)], "a hole")
            self.assertTrue(not out or str(n).startswith(out[-1]), out[-2:])
            if n < 3000 or out[-1] != "3000":
                cut += 1
                self.assertEqual(len(r.stderr_lines), 2, r.stderr_lines)
                self.assertIn("could not be stored", r.stderr_lines[0])
                self.assertIn("bytes of output dropped", r.stderr_lines[1])
            elif r.stderr_lines:
                # every line streamed, then the last write of its record (execd's final flush)
                # met the full disk: the markers say so, and that nothing was dropped
                cut += 1
                self.assertEqual(len(r.stderr_lines), 2, r.stderr_lines)
                self.assertIn("could not be stored", r.stderr_lines[0])
                self.assertEqual(r.stderr_lines[1], "[corral-execd: 0 bytes of output dropped]")

        # acknowledged background commands: a status that is true (output there, or said lost)
        lost = 0
        for sid, cid, n, r in log["cmd"]:
            if r.http_status != 200:
                continue
            st = self.client.wait_command(sid, cid, timeout=15)
            self.assertEqual(st.get("exit_code"), 0, st)
            logs = self.client.command_logs(sid, cid, 0)
            self.assertEqual(logs.status, 200, logs)
            if logs.text != "c-%d\n" % n:
                lost += 1
                self.assertIn("output_error", st, "output missing without a word: %r %r" % (
                    logs.text, st))
                self.assertIn("could not be stored", st.get("error") or "", st)
                self.assertEqual(len(logs.text) + st.get("output_dropped", 0),
                                 len("c-%d\n" % n), (logs.text, st))
        print("\n  refused on the full disk: %r of %r; foreground commands cut: %d; background "
              "commands whose output was lost (and said so): %d" % (
                  refused, {k: len(v) for k, v in log.items()}, cut, lost), file=sys.stderr)

    def delete_all(self):
        if self.corrald.proc is None or self.corrald.proc.poll() is not None:
            return
        c = self.corrald.client(timeout=30)
        try:
            for sid in c.all_sandbox_ids():
                c.delete_sandbox(sid)
        finally:
            c.close()
        self.corrald.wait_no_leaks(60)


if __name__ == "__main__":
    main()
