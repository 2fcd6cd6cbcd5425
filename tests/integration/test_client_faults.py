"""
libcorral against a real corrald through a fault-injecting proxy (faultproxy.py): the C driver
build/src/client/client-faults does the work and prints counts as JSON; this file starts the
daemon and the proxy, runs each mode, and asserts on the counts.

- exactly-once: commands (foreground and background) through a proxy that drops connections
  before and after forwarding the request body, cuts answers and event streams, answers 502 and
  stalls; every command appends its id to a file in its sandbox: no id may be missing or twice.
- idle: a corrald with --idle-timeout 2 behind a proxy that silently gives up on connections
  idle for 2 s; commands separated by gaps from 0.3 to 3.5 s: no request is ever sent on a
  connection the server gave up on, no failure, no resubmission.
- create: creates through the faulty proxy; every sandbox returned answers /ping at once.
- concurrency: many rollouts at once from one client (CORRAL_CLIENT_ROLLOUTS, default 200;
  the driver has been run with 1,000 by hand, see docs/client.md).

Fault counts and results are printed so the run log shows the measured numbers.
"""

import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402
from faultproxy import FaultProxy  # noqa: E402

DRIVER = os.path.join(harness.BUILD_DIR, "src", "client", "client-faults")
# Weighted: drops and cuts are the interesting faults; a few stalls exercise the timeouts.
FAULT_MIX = ("drop_before", "drop_after", "drop_after", "cut", "cut", "bad_gateway",
             "bad_gateway", "stall")


def run_driver(*args, timeout=900):
    p = subprocess.run([DRIVER] + [str(a) for a in args], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=timeout)
    err = p.stderr.decode(errors="replace")
    if p.returncode != 0:
        raise AssertionError("client-faults %s exited %d:\n%s" % (args[0], p.returncode, err[-4000:]))
    lines = [l for l in p.stdout.decode().splitlines() if l.startswith("{")]
    if not lines:
        raise AssertionError("client-faults %s printed no result:\n%s" % (args[0], err[-4000:]))
    res = json.loads(lines[-1])
    harness.log("client-faults %s: %s" % (args[0], json.dumps(res)))
    if err.strip():
        harness.log("client-faults %s stderr (last lines):\n%s" % (args[0], "\n".join(err.splitlines()[-15:])))
    return res


class ClientFaultTests(harness.CorralTestCase):
    def cleanup_leftovers(self):
        """Creates whose answer a fault swallowed leave sandboxes the client never heard of:
        count them (reported) and delete them so the suite ends clean."""
        ids = self.client.all_sandbox_ids()
        for sid in ids:
            r = self.client.get_sandbox(sid)
            harness.log("left behind: %s %s" % (sid, r.json() if r.status == 200 else r.status))
            self.client.delete_sandbox(sid)
        return len(ids)

    def test_exactly_once_under_faults(self):
        rounds = int(os.environ.get("CORRAL_CLIENT_FAULT_ROUNDS", "2"))
        totals = {"commands": 0, "faults": 0, "resubmits": 0}
        for seed in range(1, rounds + 1):
            proxy = FaultProxy(self.corrald.port, rate=0.3, faults=FAULT_MIX, seed=seed,
                               stall_s=6.0, exclude=r"^POST /v1/sandboxes$")
            try:
                res = run_driver("exactly-once", "http://127.0.0.1:%d" % proxy.port,
                                 self.corrald.base_url, 4, 16, 40)
            finally:
                proxy.stop()
            faults = sum(proxy.stats[k] for k in ("drop_before", "drop_after", "cut",
                                                  "bad_gateway", "stall"))
            harness.log("seed %d: proxy %s" % (seed, json.dumps(proxy.stats)))
            self.assertEqual(res["failed"], 0, res)
            self.assertEqual(res["duplicates"], 0, res)
            self.assertEqual(res["missing"], 0, res)
            self.assertEqual(res["bad_output"], 0, res)
            self.assertEqual(res["ok"], res["commands"], res)
            self.assertGreater(proxy.stats["drop_after"], 0)
            self.assertGreater(res["resubmits"], 0, "no fault hit a submit: the test proved nothing")
            totals["commands"] += res["commands"]
            totals["faults"] += faults
            totals["resubmits"] += res["resubmits"]
        harness.log("exactly-once totals: %s (zero lost, zero duplicated)" % json.dumps(totals))
        self.cleanup_leftovers()

    def test_server_without_extensions_never_runs_twice(self):
        """A stock execd: no client-chosen ids, no long-poll. The client must notice both,
        poll instead of long-polling, and resubmit only what never left: commands may then be
        lost to faults (reported as errors), but never run twice."""
        proxy = FaultProxy(self.corrald.port, rate=0.2, faults=FAULT_MIX, seed=5, stall_s=6.0,
                           exclude=r"^POST /v1/sandboxes$", strip_id=True, strip_wait=True)
        os.environ["CLIENT_FAULTS_BG_SLEEP"] = "0.5"  # background commands outlive the 1st poll
        try:
            res = run_driver("exactly-once", "http://127.0.0.1:%d" % proxy.port,
                             self.corrald.base_url, 2, 8, 15)
        finally:
            del os.environ["CLIENT_FAULTS_BG_SLEEP"]
            proxy.stop()
        polls = proxy.stats["status_polls"]
        self.assertGreater(polls, 0, "no status poll went through: the fallback was not exercised")
        harness.log("no extensions: proxy %s" % json.dumps(proxy.stats))
        self.assertEqual(res["duplicates"], 0, res)
        self.assertLessEqual(res["missing"], res["failed"], res)
        self.assertEqual(res["bad_output"], 0, res)
        self.assertGreater(res["ok"], 0, res)
        self.cleanup_leftovers()

    def test_creates_are_ready_under_faults(self):
        proxy = FaultProxy(self.corrald.port, rate=0.3, faults=FAULT_MIX, seed=99, stall_s=6.0)
        try:
            res = run_driver("create", "http://127.0.0.1:%d" % proxy.port, self.corrald.base_url, 40)
        finally:
            proxy.stop()
        harness.log("create: proxy %s" % json.dumps(proxy.stats))
        # Every create carries an Idempotency-Key; one whose answer was swallowed after it
        # reached corrald is repeated with the same key (corrald then gives back its sandbox).
        keys = [k for k, _ in proxy.create_keys]
        self.assertNotIn(None, keys, "a create without an Idempotency-Key")
        lost = [k for k, f in proxy.create_keys if f == "drop_after"]
        self.assertTrue(lost, "no create answer was swallowed: raise the fault rate")
        for k in lost:
            self.assertGreaterEqual(keys.count(k), 2, "the lost create %s was not repeated" % k)
        self.assertEqual(res["unready"], 0, res)
        self.assertEqual(res["failed"], 0, res)
        self.assertEqual(res["ok"], 40, res)
        # Attempts whose answer a fault swallowed are found by their attempt label and
        # deleted by the client itself: nothing may be left.
        orphans = self.cleanup_leftovers()
        self.assertEqual(orphans, 0, "sandboxes of lost create attempts were left behind")

    def test_many_rollouts_one_client(self):
        n = int(os.environ.get("CORRAL_CLIENT_ROLLOUTS", "200"))
        res = run_driver("concurrency", self.corrald.base_url, n, timeout=1800)
        self.assertEqual(res["ok"], n, res)
        self.assertEqual(res["failed"], 0, res)
        self.assertEqual(res["undeleted"], 0, res)
        self.wait_until(lambda: not self.client.all_sandbox_ids(), timeout=120,
                        msg="every rollout's sandbox deleted by the reaper")


class ClientSemanticsTests(harness.CorralTestCase):
    def test_typed_errors_and_results(self):
        res = run_driver("semantics", self.corrald.base_url)
        for k in ("fg_exit7", "fg_timeout", "bg_timeout", "create_invalid", "open_unknown",
                  "delete_unknown_ok", "ended"):
            self.assertTrue(res[k], "%s: %s" % (k, res))
        self.assertLess(res["fg_timeout_s"], 10, res)   # the server's kill, not the client's 61 s
        self.assertLess(res["bg_timeout_s"], 10, res)
        self.assertLess(res["create_invalid_s"], 2, res)  # never retried
        self.assertLess(res["bg_10ms_command_s"], 0.5, res)  # long-poll, no 1 s poll floor
        self.assertNotEqual(res["ended_reason"], "")


class ClientIdleTests(harness.CorralTestCase):
    corrald_kwargs = {"extra_args": ["--idle-timeout", "2"]}

    def test_idle_gaps_straddling_the_idle_timeout(self):
        proxy = FaultProxy(self.corrald.port, rate=0.0, idle_close_s=2.0)
        try:
            res = run_driver("idle", "http://127.0.0.1:%d" % proxy.port, 18)
        finally:
            proxy.stop()
        harness.log("idle: proxy %s" % json.dumps(proxy.stats))
        self.assertEqual(res["keepalive_expiry"], 1.0, res)  # from Keep-Alive: timeout=2
        self.assertEqual(proxy.stats["stale_reuses"], 0,
                         "requests sent on connections the server had given up on")
        self.assertEqual(res["failed"], 0, res)
        self.assertEqual(res["resubmits"], 0, res)
        self.assertEqual(res["ok"], 18, res)
        self.assertGreater(proxy.stats["idle_closes"], 0, "no connection ever idled out")


class ClientCliTests(harness.CorralTestCase):
    """The CLI commands built on libcorral: reap and logs."""

    def corral(self, *args):
        p = subprocess.run([harness.binary("corral"), "--server", self.corrald.base_url] + list(args),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
        return p.returncode, p.stdout.decode(), p.stderr.decode()

    def test_reap_audits_then_deletes_one_run(self):
        mine = [self.create(metadata={"corral/run": "r-42", "corral/user": "alice"})["id"]
                for _ in range(3)]
        other_user = self.create(metadata={"corral/run": "r-42", "corral/user": "bob"})["id"]
        other_run = self.create(metadata={"corral/run": "r-43", "corral/user": "alice"})["id"]
        rc, out, err = self.corral("reap", "--run-id", "r-42", "--user", "alice")
        self.assertEqual(rc, 0, err)
        self.assertIn("Would delete 3 sandbox(es) for run 'r-42' and user 'alice'", out)
        self.assertEqual(sorted(out.split()[-3:]), sorted(mine))
        self.assertEqual(self.client.get_sandbox(mine[0]).status, 200)  # audit deletes nothing
        rc, out, err = self.corral("reap", "--run-id", "r-42", "--user", "alice", "--reap", "-o", "json")
        self.assertEqual(rc, 0, err)
        res = json.loads(out)
        self.assertEqual(sorted(res["matched"]), sorted(mine))
        self.assertEqual(res["left"], [])
        for sid in mine:
            self.assertEqual(self.client.get_sandbox(sid).status, 404)
        for sid in (other_user, other_run):
            self.assertEqual(self.client.get_sandbox(sid).status, 200)
        # nemo-gym's prefix works too; nothing matches: exit 0
        rc, out, err = self.corral("reap", "--run-id", "r-42", "--label-prefix", "nemo-gym.nvidia.com/")
        self.assertEqual(rc, 0, err)
        self.assertIn("Would delete 0 sandbox(es)", out)
        self.assertEqual(self.corral("reap")[0], 1)
        self.assertEqual(self.corral("reap", "--run-id", "x", "--label-prefix", "Bad_")[0], 1)

    def test_logs_of_a_background_execution(self):
        sid = self.create()["id"]
        xid = "00112233445566778899aabbccddeeff"
        r = self.client.post(self.client.execd_path(sid, "/command"),
                             {"command": "echo one; echo two >&2", "background": True, "id": xid})
        self.assertEqual(r.status, 200)
        self.client.wait_command(sid, xid)
        rc, out, err = self.corral("logs", sid, xid)
        self.assertEqual((rc, out), (0, "one\ntwo\n"), err)
        rc, out, err = self.corral("logs", "--cursor", "4", sid, xid)
        self.assertEqual((rc, out), (0, "two\n"), err)
        self.assertIn("cursor: 8", err)
        self.assertEqual(self.corral("logs", sid, "f" * 32)[0], 2)
        self.assertEqual(self.corral("logs", sid, "nothex")[0], 1)


if __name__ == "__main__":
    harness.main()
