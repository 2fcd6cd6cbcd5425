#!/usr/bin/env python3
"""Idempotent creates (issue 12): POST /v1/sandboxes with an Idempotency-Key makes at most one
sandbox per key, whatever is repeated, lost, cut or crashed in between."""

import json
import os
import secrets
import socket
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from harness import (Corrald, CorralTestCase, cgroup_children, main,  # noqa: E402
                     suite_cgroup_dirs)

# Small sandboxes: the pid table of this VM (kernel.pid_max 32768) holds every one of them.
SMALL = {"cpu": "100m", "memory": "64Mi", "pids": "32", "ephemeral-storage": "8Mi"}
TINY_REQ = {"cpu": "10m", "memory": "8Mi"}


def spec(**kw):
    s = {"image": {"uri": "host"}, "entrypoint": ["sleep", "infinity"],
         "resourceLimits": SMALL, "resourceRequests": TINY_REQ, "timeout": 900}
    s.update(kw)
    return s


class Idempotency(CorralTestCase):
    corrald_kwargs = {"extra_args": ["--default-disk", "8Mi"]}

    def post(self, key, body, client=None, **kw):
        h = {} if key is None else {"Idempotency-Key": key}
        return (client or self.client).post("/v1/sandboxes", body, headers=h, **kw)

    def ids_with(self, tag):
        items = self.client.list_sandboxes(metadata={"t": tag}, page_size=200).json()["items"]
        return [it["id"] for it in items]

    def test_repeat_returns_the_same_sandbox(self):
        # Fault: a create's answer is lost and the client sends it again: one sandbox, not two.
        tag = secrets.token_hex(4)
        key = "k-" + tag
        body = spec(metadata={"t": tag})
        r1 = self.post(key, body)
        self.assertEqual(r1.status, 202, r1)
        sid = r1.json()["id"]
        self.addCleanup(self._cleanup_sandbox, sid)
        self.assertIsNone(r1.header("Idempotent-Replayed"))
        # the same body with its members in another order, the key as an RFC 8941 string
        again = dict(reversed(list(body.items())))
        for k in (key, '"%s"' % key):
            r = self.post(k, again)
            self.assertEqual(r.status, 202, r)
            self.assertEqual(r.json()["id"], sid, r)
            self.assertEqual(r.header("Idempotent-Replayed"), "true", r)
            self.assertEqual(r.json()["status"]["state"], "Running", r)
        self.assertEqual(self.ids_with(tag), [sid])
        # without a key, the same body is a new sandbox (the header is optional)
        r = self.post(None, body)
        self.assertEqual(r.status, 202, r)
        self.addCleanup(self._cleanup_sandbox, r.json()["id"])
        self.assertNotEqual(r.json()["id"], sid)

    def test_lost_answer_then_retry(self):
        # Fault: the create succeeds but its answer never reaches the client (a connection
        # dropped on the way back, corrald saw nothing wrong); the client retries with its key.
        tag = secrets.token_hex(4)
        key = "k-" + tag
        body = json.dumps(spec(metadata={"t": tag})).encode()
        s = socket.create_connection(("127.0.0.1", self.corrald.port), timeout=30)
        s.sendall(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Idempotency-Key: " + key.encode() + b"\r\nConnection: close\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        lost = b""
        while True:  # what a proxy on the way read and then dropped
            chunk = s.recv(65536)
            if not chunk:
                break
            lost += chunk
        s.close()
        self.assertTrue(lost.startswith(b"HTTP/1.1 202"), lost[:200])
        made = json.loads(lost.split(b"\r\n\r\n", 1)[1])["id"]
        self.addCleanup(self._cleanup_sandbox, made)
        r = self.post(key, json.loads(body))
        self.assertEqual(r.status, 202, r)
        self.addCleanup(self._cleanup_sandbox, r.json()["id"])
        self.assertEqual(r.json()["id"], made, "the retry made a second sandbox")
        self.assertEqual(self.ids_with(tag), [made])

    def test_same_key_other_body_is_422(self):
        # Fault: a client bug reuses a key for another request: refused (IETF draft: 422).
        tag = secrets.token_hex(4)
        key = "k-" + tag
        r = self.post(key, spec(metadata={"t": tag}))
        self.assertEqual(r.status, 202, r)
        self.addCleanup(self._cleanup_sandbox, r.json()["id"])
        r = self.post(key, spec(metadata={"t": tag, "other": "x"}))
        self.assertEqual(r.status, 422, r)
        self.assertEqual(r.json()["code"], "SANDBOX::IDEMPOTENCY_KEY_REUSED", r)
        self.assertIn(key, r.json()["message"])
        self.assertEqual(len(self.ids_with(tag)), 1)

    def test_bad_keys_are_400(self):
        for bad in ("", '""', "x" * 256, "a\u00e9".encode("utf-8").decode("latin-1")):
            r = self.post(bad, spec())
            self.assertEqual(r.status, 400, (bad, r))
            self.assertEqual(r.json()["code"], "SANDBOX::INVALID_IDEMPOTENCY_KEY", r)

    def test_failed_create_is_replayed(self):
        # Fault: a create fails for a reason the client must fix: a repeat gets the same answer
        # (and makes nothing), not a second try that might behave differently.
        tag = secrets.token_hex(4)
        key = "k-" + tag
        body = spec(entrypoint=["/nonexistent/entrypoint"], metadata={"t": tag})
        r1 = self.post(key, body)
        self.assertEqual(r1.status, 422, r1)
        self.assertEqual(r1.json()["code"], "SANDBOX::ENTRYPOINT_EXITED", r1)
        r2 = self.post(key, body)
        self.assertEqual((r2.status, r2.json()), (r1.status, r1.json()))
        self.assertEqual(r2.header("Idempotent-Replayed"), "true")
        self.assertEqual(self.ids_with(tag), [])

    def test_deleted_sandbox_is_not_remade(self):
        # Fault: the repeat of a create arrives after its sandbox was deleted: 409, not a new one.
        tag = secrets.token_hex(4)
        key = "k-" + tag
        body = spec(metadata={"t": tag})
        sid = self.post(key, body).json()["id"]
        self.assertEqual(self.client.delete_sandbox(sid).status, 204)
        r = self.post(key, body)  # while it is torn down
        self.assertEqual(r.status, 409, r)
        self.assertEqual(r.json()["code"], "SANDBOX::DELETED", r)
        self.assertIn(sid, r.json()["message"])
        self.wait_gone(sid)
        r = self.post(key, body)  # and once it is gone
        self.assertEqual(r.status, 409, r)
        self.assertEqual(self.ids_with(tag), [])

    def test_key_survives_restart(self):
        # Fault: corrald is killed -9 after a keyed create; the repeat goes to the new corrald.
        tag = secrets.token_hex(4)
        key = "k-" + tag
        body = spec(metadata={"t": tag})
        sid = self.post(key, body).json()["id"]
        self.addCleanup(self._cleanup_sandbox, sid)
        self.client.close()
        self.corrald.kill9()
        self.corrald.start()
        r = self.post(key, body)
        self.assertEqual(r.status, 202, r)
        self.assertEqual(r.json()["id"], sid)
        self.assertEqual(self.post(key, spec(metadata={"t": "other"})).status, 422)
        self.assertEqual(self.ids_with(tag), [sid])


class QueuedRepeats(CorralTestCase):
    """One CPU of capacity, held by a blocker: a keyed create waits in the admission queue, so its
    repeats certainly arrive while it is still being made."""
    corrald_kwargs = {"extra_args": ["--capacity", "cpu=1,memory=4Gi,pids=1000000,files=100000000",
                                     "--capacity-wait", "60", "--default-disk", "8Mi",
                                     "--log-level", "debug"]}  # the repeats' "waits for it"

    def test_repeats_wait_for_the_first_and_survive_its_hangup(self):
        # Fault: the first request's client gives up while the create waits; its repeats (same
        # key) wait for the same create and all get the one sandbox it makes.
        blocker = self.create(**spec(resourceLimits=dict(SMALL, cpu="1"),
                                     resourceRequests={"cpu": "1", "memory": "8Mi"}))["id"]
        tag = secrets.token_hex(4)
        key = "k-" + tag
        body = spec(metadata={"t": tag}, resourceLimits=dict(SMALL, cpu="1"),
                    resourceRequests={"cpu": "500m", "memory": "8Mi"})
        raw = json.dumps(body).encode()
        first = socket.create_connection(("127.0.0.1", self.corrald.port))
        first.sendall(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Idempotency-Key: " + key.encode() + b"\r\nContent-Length: %d\r\n\r\n" % len(raw)
                      + raw)
        got = []

        def repeat():
            c = self.corrald.client(timeout=60)
            try:
                got.append(c.post("/v1/sandboxes", body, headers={"Idempotency-Key": key}))
            finally:
                c.close()

        def listed():
            return self.client.list_sandboxes(metadata={"t": tag}).json()["items"]
        # The first create waits in the queue before the repeats come (else one of them would
        # be the first), and all three repeats wait on it before its client hangs up (else the
        # hang-up would cancel it for nobody): conditions, not sleeps, on a loaded machine.
        sid = self.wait_until(lambda: [it["id"] for it in listed()
                                       if it["status"]["state"] == "Pending"], 30,
                              msg="the first create to wait in the queue")[0]
        ths = [threading.Thread(target=repeat) for _ in range(3)]
        for t in ths:
            t.start()

        def joined():
            with open(self.corrald.log_path, errors="replace") as f:
                return f.read().count("sandbox %s: a repeat of its create waits for it" % sid)
        self.wait_until(lambda: joined() >= 3, 30, msg="the three repeats to wait for the create")
        first.close()  # the first client gives up
        time.sleep(0.5)
        items = self.client.list_sandboxes(metadata={"t": tag}).json()["items"]
        self.assertEqual([it["status"]["state"] for it in items], ["Pending"], items)
        self.assertEqual(self.client.delete_sandbox(blocker).status, 204)
        for t in ths:
            t.join(60)
        self.assertEqual(len(got), 3)
        ids = set()
        for r in got:
            self.assertEqual(r.status, 202, r)
            self.assertEqual(r.header("Idempotent-Replayed"), "true", r)
            ids.add(r.json()["id"])
        self.assertEqual(ids, {sid}, got)
        self.addCleanup(self._cleanup_sandbox, sid)
        listed = self.client.list_sandboxes(metadata={"t": tag}).json()["items"]
        self.assertEqual([(it["id"], it["status"]["state"]) for it in listed], [(sid, "Running")])
        self.assertEqual(self.sh(sid, "echo one"), "one")


class Kill9DuringKeyedCreates(CorralTestCase):
    corrald_kwargs = {"extra_args": ["--default-disk", "8Mi", "--capacity-wait", "60",
                                     "--create-timeout", "60"]}
    N = 100

    def test_kill9_during_100_keyed_creates(self):
        # Fault: corrald is killed -9 while 100 clients create (each with its own key) and they
        # retry against the restarted corrald: exactly one sandbox per key, and every sandbox on
        # the host is one its client got back (none made for nobody).
        run = secrets.token_hex(4)
        n = self.N
        keys = ["%s-%03d" % (run, i) for i in range(n)]
        answers = [None] * n
        attempts = [0] * n
        acked = threading.Semaphore(0)
        deadline = time.monotonic() + 150

        def client(i):
            body = spec(metadata={"run": run, "i": str(i)})
            delay = 0.05
            while time.monotonic() < deadline:
                c = self.corrald.client(timeout=60)
                attempts[i] += 1
                try:
                    r = c.post("/v1/sandboxes", body, headers={"Idempotency-Key": keys[i]})
                except OSError:
                    r = None  # refused, reset or cut: the answer is lost; retry the same key
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
        ths = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(n)]
        for t in ths:
            t.start()
        # killed with about a third answered: the rest queued, being made, or not yet sent
        for _ in range(n // 3):
            self.assertTrue(acked.acquire(timeout=60), "creates not answered before the kill")
        self.client.close()
        self.corrald.kill9()
        acked_before = sum(1 for a in answers if isinstance(a, str))
        time.sleep(0.3)
        self.corrald.start()
        for t in ths:
            t.join(max(1, deadline - time.monotonic() + 5))
        bad = [(keys[i], a) for i, a in enumerate(answers) if not isinstance(a, str)]
        self.assertEqual(bad, [], "creates without a sandbox")
        self.assertEqual(len(set(answers)), n, "two keys got the same sandbox")

        # every listed sandbox of this run is its key's answer, one per key, all Running
        items = self.client.list_sandboxes(metadata={"run": run}, page_size=200).json()["items"]
        listed = {it["id"]: it for it in items}
        self.assertEqual(sorted(listed), sorted(answers),
                         "sandboxes listed vs sandboxes the clients got")
        for i, sid in enumerate(answers):
            self.assertEqual(listed[sid]["metadata"]["i"], str(i))
            self.assertEqual(listed[sid]["status"]["state"], "Running", listed[sid])
        # and on the host: once rolled-back creates are torn down, exactly n sandbox cgroups
        def host_count():
            return max(len(cgroup_children(d)) for d in suite_cgroup_dirs(self.corrald.cgroup_name))
        self.wait_until(lambda: host_count() == n, 60, interval=0.2,
                        msg="%d sandbox cgroups on the host (now %d)" % (n, host_count()))
        sbdir = os.path.join(self.corrald.state_dir, "sandboxes")
        self.wait_until(lambda: len(os.listdir(sbdir)) == n, 60, interval=0.2,
                        msg="%d sandbox dirs (now %d)" % (n, len(os.listdir(sbdir))))
        for sid in answers[:3]:
            self.assertEqual(self.sh(sid, "echo ok"), "ok")
        retried = sum(1 for a in attempts if a > 1)
        print("\n  %d keyed creates: %d answered before the kill -9, %d retried, %d attempts in all"
              % (n, acked_before, retried, sum(attempts)), file=sys.stderr)
        for sid in answers:
            self.client.delete_sandbox(sid)
        self.wait_until(lambda: host_count() == 0, 90, interval=0.2, msg="all torn down")


if __name__ == "__main__":
    main()
