#!/usr/bin/env python3
"""Lifecycle API against a real corrald: create/get/list/filter/paginate/delete, renew, metadata
PATCH, pause/resume, endpoints, request ids, keep-alive, TTL reaping, health, API-key mode."""

import http.client
import os
import re
import secrets
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse
from datetime import datetime, timedelta, timezone

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (HEX32_RE, UUID_RE, Corrald, CorralTestCase, binary, controller_dir,  # noqa: E402
                     free_port, main, parse_time, rfc3339, safe_rmtree)


def read_file(path):
    with open(path) as f:
        return f.read().strip()


def now():
    return datetime.now(timezone.utc)


class Lifecycle(CorralTestCase):

    def tag(self):
        return "t" + secrets.token_hex(6)

    # --- create / get -------------------------------------------------------------------------

    def test_create_response(self):
        before = now()
        r = self.client.create_sandbox_raw(timeout=600, metadata={"team": "infra"})
        after = now()
        if r.status == 202:
            self.addCleanup(self._cleanup_sandbox, r.json()["id"])
        self.assertEqual(r.status, 202, r)
        j = r.json()
        self.assertRegex(j["id"], UUID_RE)
        self.assertEqual(j["status"]["state"], "Running", j)
        self.assertNotIn("image", j, "CreateSandboxResponse never includes image")
        created = parse_time(j["createdAt"])
        expires = parse_time(j["expiresAt"])
        self.assertLessEqual(abs((expires - created).total_seconds() - 600), 1.0, j)
        self.assertGreaterEqual(created, before - timedelta(seconds=2), j)
        self.assertLessEqual(created, after + timedelta(seconds=2), j)
        self.assertEqual(j.get("metadata"), {"team": "infra"})
        for k, v in j.items():
            self.assertIsNotNone(v, "null fields are left out: %s" % k)

    def test_get(self):
        j = self.create(timeout=600, metadata={"k": "v"}, env={"FOO": "bar"})
        sid = j["id"]
        for prefix in ("/v1", ""):
            r = self.client.get("%s/sandboxes/%s" % (prefix, sid))
            self.assertEqual(r.status, 200, r)
            g = r.json()
            self.assertEqual(g["id"], sid)
            self.assertEqual(g["status"]["state"], "Running")
            self.assertEqual(g["entrypoint"], ["sleep", "infinity"])
            self.assertEqual(g.get("metadata"), {"k": "v"})
            self.assertEqual(parse_time(g["createdAt"]), parse_time(j["createdAt"]))
            self.assertEqual(parse_time(g["expiresAt"]), parse_time(j["expiresAt"]))
            if "image" in g:
                self.assertEqual(g["image"].get("uri"), "host")
        # env reached the sandbox (through PID 1's environment)
        self.assertEqual(self.sh(sid, "printf %s \"$FOO\""), "bar")
        r = self.client.get_sandbox("00000000-0000-4000-8000-000000000000")
        self.assertEqual(r.status, 404, r)
        self.assertIn("code", r.json())
        self.assertIn("message", r.json())

    def test_no_timeout_means_no_expiry(self):
        j = self.create()
        self.assertNotIn("expiresAt", j)
        g = self.client.get_sandbox(j["id"]).json()
        self.assertNotIn("expiresAt", g)

    # --- list --------------------------------------------------------------------------------

    def ids_of(self, r):
        self.assertEqual(r.status, 200, r)
        return [it["id"] for it in r.json()["items"]]

    def test_list_state_filter(self):
        tag = self.tag()
        a = self.create(metadata={"tag": tag})["id"]
        b = self.create(metadata={"tag": tag})["id"]
        r = self.client.post("/v1/sandboxes/%s/pause" % b)
        self.assertEqual(r.status, 202, r)
        self.addCleanup(self.client.post, "/v1/sandboxes/%s/resume" % b)
        self.wait_until(lambda: self.client.get_sandbox(b).json()["status"]["state"] == "Paused",
                        msg="Paused")
        md = {"tag": tag}
        self.assertEqual(set(self.ids_of(self.client.list_sandboxes(state="Running", metadata=md))), {a})
        self.assertEqual(set(self.ids_of(self.client.list_sandboxes(state="Paused", metadata=md))), {b})
        self.assertEqual(set(self.ids_of(self.client.list_sandboxes(state=["Running", "Paused"],
                                                                   metadata=md))), {a, b})
        self.assertEqual(self.ids_of(self.client.list_sandboxes(state="Failed", metadata=md)), [])
        self.assertEqual(set(self.ids_of(self.client.list_sandboxes(state="running", metadata=md))), {a},
                         "state filter is case-insensitive")
        self.assertEqual(set(self.ids_of(self.client.list_sandboxes(metadata=md))), {a, b})
        # unfiltered list contains both, each item a full Sandbox
        items = self.client.list_sandboxes(page_size=200).json()["items"]
        byid = {it["id"]: it for it in items}
        self.assertIn(a, byid)
        self.assertEqual(byid[a]["status"]["state"], "Running")
        self.assertEqual(byid[b]["status"]["state"], "Paused")
        self.assertEqual(byid[a]["metadata"], {"tag": tag})

    def test_metadata_filter(self):
        tag = self.tag()
        a = self.create(metadata={"tag": tag, "team": "infra", "project": "alpha"})["id"]
        b = self.create(metadata={"tag": tag, "team": "infra", "project": "beta"})["id"]
        c = self.create(metadata={"tag": tag, "team": "ml", "project": "alpha"})["id"]
        L = self.client.list_sandboxes
        self.assertEqual(set(self.ids_of(L(metadata={"tag": tag}))), {a, b, c})
        self.assertEqual(set(self.ids_of(L(metadata={"tag": tag, "team": "infra"}))), {a, b})
        self.assertEqual(set(self.ids_of(L(metadata={"tag": tag, "project": "alpha"}))), {a, c})
        self.assertEqual(set(self.ids_of(L(metadata={"tag": tag, "team": "infra", "project": "alpha"}))),
                         {a})
        self.assertEqual(self.ids_of(L(metadata={"tag": tag, "team": "nobody"})), [])
        self.assertEqual(self.ids_of(L(metadata={"tag": tag, "missing": "x"})), [])
        # the raw wire form: one parameter whose value is an url-encoded query string
        q = urllib.parse.quote("tag=%s&team=ml" % tag, safe="")
        self.assertEqual(set(self.ids_of(self.client.get("/v1/sandboxes?metadata=" + q))), {c})
        # state and metadata combine with AND
        self.assertEqual(set(self.ids_of(L(state="Running", metadata={"tag": tag, "team": "ml"}))), {c})
        self.assertEqual(self.ids_of(L(state="Paused", metadata={"tag": tag})), [])

    def test_pagination(self):
        tag = self.tag()
        made = [self.create(metadata={"tag": tag})["id"] for _ in range(5)]
        md = {"tag": tag}
        seen = []
        pages = {}
        for page in (1, 2, 3, 4):
            r = self.client.list_sandboxes(metadata=md, page=page, page_size=2)
            self.assertEqual(r.status, 200, r)
            j = r.json()
            pages[page] = j
            p = j["pagination"]
            self.assertEqual(p["page"], page)
            self.assertEqual(p["pageSize"], 2)
            self.assertEqual(p["totalItems"], 5)
            self.assertEqual(p["totalPages"], 3)
            self.assertEqual(p["hasNextPage"], page < 3, p)
            self.assertEqual(len(j["items"]), {1: 2, 2: 2, 3: 1, 4: 0}[page], j)
            seen += [it["id"] for it in j["items"]]
        self.assertEqual(len(seen), 5, "no duplicates across pages")
        self.assertEqual(set(seen), set(made))
        # createdAt descending across the pages
        times = [parse_time(it["createdAt"]) for pg in (1, 2, 3) for it in pages[pg]["items"]]
        self.assertEqual(times, sorted(times, reverse=True))
        # defaults
        j = self.client.list_sandboxes(metadata=md).json()
        self.assertEqual(j["pagination"]["page"], 1)
        self.assertEqual(j["pagination"]["pageSize"], 20)
        self.assertEqual(len(j["items"]), 5)
        self.assertFalse(j["pagination"]["hasNextPage"])
        # bounds
        for ps, want in ((1, 200), (200, 200), (0, 422), (201, 422)):
            r = self.client.list_sandboxes(metadata=md, page_size=ps)
            self.assertEqual(r.status, want, "pageSize=%d -> %r" % (ps, r))
        for pg, want in ((0, 422), (-1, 422)):
            r = self.client.list_sandboxes(metadata=md, page=pg)
            self.assertEqual(r.status, want, "page=%d -> %r" % (pg, r))
        # empty result
        j = self.client.list_sandboxes(metadata={"tag": "none-" + tag}).json()
        self.assertEqual(j["items"], [])
        self.assertEqual(j["pagination"]["totalItems"], 0)
        self.assertEqual(j["pagination"]["totalPages"], 0)
        self.assertFalse(j["pagination"]["hasNextPage"])

    # --- delete ------------------------------------------------------------------------------

    def test_delete(self):
        sid = self.create()["id"]
        self.assertTrue(self.corrald.sandbox_cgroups(sid), "the sandbox has cgroups while alive")
        r = self.client.delete_sandbox(sid)
        self.assertEqual(r.status, 204, r)
        self.assertEqual(r.body, b"")
        self.assertEqual(self.client.get_sandbox(sid).status, 404)
        r = self.client.delete_sandbox(sid)
        self.assertEqual(r.status, 404, r)
        self.wait_gone(sid)
        self.assertNotIn(sid, self.client.all_sandbox_ids())
        r = self.client.delete("/sandboxes/00000000-0000-4000-8000-000000000000")
        self.assertEqual(r.status, 404, r)
        r = self.client.delete("/v1/sandboxes/not-a-uuid")
        self.assertEqual(r.status, 404, r)

    def test_teardown_never_crosses_a_mount_point(self):
        """A mount found below a sandbox's directory at delete time (an operator's bind mount, a
        leftover) must not be recursed into: the files behind it survive the delete."""
        import subprocess
        import tempfile
        from harness import mounts_under, safe_rmtree
        sid = self.create()["id"]
        precious = tempfile.mkdtemp(prefix="corral-test-precious-")
        self.addCleanup(safe_rmtree, precious)
        with open(os.path.join(precious, "canary"), "w") as f:
            f.write("keep me")
        os.makedirs(os.path.join(precious, "sub"))
        with open(os.path.join(precious, "sub", "canary2"), "w") as f:
            f.write("keep me too")
        targets = []
        for rel in ("upper/precious-mnt", "precious-mnt"):
            t = os.path.join(self.corrald.sandbox_dir(sid), rel)
            if not os.path.isdir(os.path.dirname(t)):
                continue
            os.makedirs(t, exist_ok=True)
            subprocess.run(["mount", "--bind", precious, t], check=True)
            targets.append(t)
        self.assertTrue(targets)

        def unmount_all():
            for t in targets:
                subprocess.call(["umount", "-l", t], stderr=subprocess.DEVNULL)
        self.addCleanup(unmount_all)
        self.assertEqual(self.client.delete_sandbox(sid).status, 204)
        self.wait_until(lambda: self.client.get_sandbox(sid).status == 404, 10, msg="404 after delete")
        self.wait_until(lambda: not self.corrald.sandbox_cgroups(sid), 20, msg="cgroups removed")
        time.sleep(1.0)  # let the teardown finish whatever it does with the directory
        self.assertTrue(os.path.exists(os.path.join(precious, "canary")), "teardown deleted through a mount")
        self.assertTrue(os.path.exists(os.path.join(precious, "sub", "canary2")), "teardown deleted through a mount")
        unmount_all()
        self.assertEqual(mounts_under(self.corrald.sandbox_dir(sid)), [])

    # --- renew -------------------------------------------------------------------------------

    def test_renew_expiration(self):
        j = self.create(timeout=600)
        sid = j["id"]
        target = now() + timedelta(seconds=1800)
        r = self.client.post("/v1/sandboxes/%s/renew-expiration" % sid, {"expiresAt": rfc3339(target.timestamp())})
        self.assertEqual(r.status, 200, r)
        got = parse_time(r.json()["expiresAt"])
        self.assertLess(abs((got - target).total_seconds()), 1.0, r.json())
        g = self.client.get_sandbox(sid).json()
        self.assertLess(abs((parse_time(g["expiresAt"]) - target).total_seconds()), 1.0, g)
        # past -> 400
        past = now() - timedelta(seconds=60)
        r = self.client.post("/v1/sandboxes/%s/renew-expiration" % sid, {"expiresAt": rfc3339(past.timestamp())})
        self.assertEqual(r.status, 400, r)
        self.assertIn("code", r.json())
        # the failed renew changed nothing
        g = self.client.get_sandbox(sid).json()
        self.assertLess(abs((parse_time(g["expiresAt"]) - target).total_seconds()), 1.0, g)
        # unknown sandbox
        r = self.client.post("/v1/sandboxes/00000000-0000-4000-8000-000000000000/renew-expiration",
                             {"expiresAt": rfc3339(target.timestamp())})
        self.assertEqual(r.status, 404, r)

    def test_renew_timestamp_forms(self):
        sid = self.create(timeout=600)["id"]
        year = now().year + 2
        for given, want in (("%d-01-01T00:00:00" % year, "%d-01-01T00:00:00+00:00" % year),
                            ("%d-01-01T02:00:00+02:00" % year, "%d-01-01T00:00:00+00:00" % year),
                            ("%d-01-01T00:00:00.5Z" % year, "%d-01-01T00:00:00.5+00:00" % year)):
            r = self.client.post("/v1/sandboxes/%s/renew-expiration" % sid, {"expiresAt": given})
            self.assertEqual(r.status, 200, "%s -> %r" % (given, r))
            self.assertEqual(parse_time(r.json()["expiresAt"]), datetime.fromisoformat(want), r.json())
            self.assertTrue(r.json()["expiresAt"].endswith("Z") or r.json()["expiresAt"].endswith("+00:00"),
                            "normalized to UTC: %r" % r.json())

    def test_env_null_values_dropped(self):
        sid = self.create(env={"KEEP": "1", "DROP": None})["id"]
        self.assertEqual(self.sh(sid, "printf '%s|%s' \"${KEEP-unset}\" \"${DROP-unset}\""), "1|unset")

    def test_renew_without_ttl_is_409(self):
        sid = self.create()["id"]
        target = now() + timedelta(seconds=600)
        r = self.client.post("/v1/sandboxes/%s/renew-expiration" % sid, {"expiresAt": rfc3339(target.timestamp())})
        self.assertEqual(r.status, 409, r)
        self.assertIn("code", r.json())

    # --- metadata patch ----------------------------------------------------------------------

    def test_patch_metadata(self):
        sid = self.create(metadata={"a": "1", "b": "2"})["id"]
        r = self.client.patch("/v1/sandboxes/%s/metadata" % sid, {"b": None, "c": "3"})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["id"], sid)
        self.assertEqual(r.json()["metadata"], {"a": "1", "c": "3"})
        self.assertEqual(self.client.get_sandbox(sid).json()["metadata"], {"a": "1", "c": "3"})
        r = self.client.patch("/v1/sandboxes/%s/metadata" % sid, {})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["metadata"], {"a": "1", "c": "3"})
        r = self.client.patch("/v1/sandboxes/%s/metadata" % sid, {"a": "9"})
        self.assertEqual(r.json()["metadata"], {"a": "9", "c": "3"})
        # list filters see the patched metadata
        ids = [it["id"] for it in self.client.list_sandboxes(metadata={"a": "9", "c": "3"}).json()["items"]]
        self.assertIn(sid, ids)
        r = self.client.patch("/v1/sandboxes/00000000-0000-4000-8000-000000000000/metadata", {"a": "1"})
        self.assertEqual(r.status, 404, r)

    # --- pause / resume ----------------------------------------------------------------------

    def test_pause_resume(self):
        sid = self.create()["id"]
        r = self.client.post("/v1/sandboxes/%s/pause" % sid)
        self.assertEqual(r.status, 202, r)
        resumed = [False]

        def ensure_resumed():
            if not resumed[0]:
                self.client.post("/v1/sandboxes/%s/resume" % sid)
        self.addCleanup(ensure_resumed)
        self.wait_until(lambda: self.client.get_sandbox(sid).json()["status"]["state"] == "Paused",
                        msg="state Paused")
        fz = self.corrald.cgroup_file("freezer", sid, "freezer.state")
        if fz and os.path.exists(fz):
            self.assertEqual(read_file(fz), "FROZEN")
        r = self.client.post("/v1/sandboxes/%s/pause" % sid)
        self.assertEqual(r.status, 409, "double pause: %r" % r)

        # a call to a paused sandbox is refused at once (its processes are frozen: it would only
        # wait for the upstream timeout), with a typed code and no host path
        t0 = time.monotonic()
        r = self.client.post(self.client.execd_path(sid, "/command"), {"command": "echo x"},
                             timeout=30)
        self.assertEqual(r.status, 409, r)
        self.assertEqual(r.json()["code"], "SANDBOX::PAUSED", r)
        self.assertIn("resume", r.json()["message"])
        self.assertNotIn(self.corrald.tmp, r.text)
        self.assertLess(time.monotonic() - t0, 20, "answered at once, not after a timeout")
        r = self.client.get(self.client.execd_path(sid, "/ping"))
        self.assertEqual(r.status, 409, r)
        r = self.client.post("/v1/sandboxes/%s/resume" % sid)
        self.assertEqual(r.status, 202, r)
        resumed[0] = True
        self.assertEqual(self.sh(sid, "echo resumed-ok"), "resumed-ok")
        self.assertEqual(self.client.get_sandbox(sid).json()["status"]["state"], "Running")
        if fz and os.path.exists(fz):
            self.assertEqual(read_file(fz), "THAWED")
        r = self.client.post("/v1/sandboxes/%s/resume" % sid)
        self.assertEqual(r.status, 409, "resume of a running sandbox: %r" % r)
        self.assertEqual(self.sh(sid, "echo again"), "again")
        r = self.client.post("/v1/sandboxes/00000000-0000-4000-8000-000000000000/pause")
        self.assertEqual(r.status, 404, r)

    def test_stream_survives_pause(self):
        """A command streaming when the sandbox is paused continues after resume, losing nothing."""
        from harness import CommandStream
        sid = self.create()["id"]
        s = CommandStream("127.0.0.1", self.corrald.port, sid,
                          "for i in 1 2 3 4 5 6; do echo line$i; sleep 0.3; done")
        self.addCleanup(s.abort)
        self.assertEqual(s.wait_for("stdout")["text"], "line1")
        self.assertEqual(self.client.post("/v1/sandboxes/%s/pause" % sid).status, 202)
        time.sleep(2.5)
        self.assertEqual(self.client.post("/v1/sandboxes/%s/resume" % sid).status, 202)
        res = s.finish()
        self.assertEqual(res.stdout_lines, ["line%d" % i for i in range(1, 7)], res)
        self.assertTrue(res.complete, res)

    # --- endpoints ---------------------------------------------------------------------------

    def test_endpoints(self):
        sid = self.create()["id"]
        for port in (44772, 18080):
            for usp in ("true", "false"):
                r = self.client.get("/v1/sandboxes/%s/endpoints/%d?use_server_proxy=%s" % (sid, port, usp))
                self.assertEqual(r.status, 200, "port %d proxy %s: %r" % (port, usp, r))
                ep = r.json()["endpoint"]
                self.assertNotIn("://", ep)
                self.assertTrue(ep.endswith("/sandboxes/%s/proxy/%d" % (sid, port)), ep)
                self.assertFalse("/v1/" in ep, ep)
                if "headers" in r.json():
                    self.assertIsInstance(r.json()["headers"], dict)
        # default (no query) answers too
        r = self.client.get("/v1/sandboxes/%s/endpoints/44772" % sid)
        self.assertEqual(r.status, 200, r)
        # the endpoint is usable as is: http://<endpoint>/ping reaches execd
        ep = self.client.get("/v1/sandboxes/%s/endpoints/44772?use_server_proxy=true" % sid).json()["endpoint"]
        hostport, _, path = ep.partition("/")
        host, _, port = hostport.rpartition(":")
        c = http.client.HTTPConnection(host, int(port), timeout=10)
        c.request("GET", "/" + path + "/ping")
        resp = c.getresponse()
        resp.read()
        c.close()
        self.assertEqual(resp.status, 200)
        r = self.client.get("/v1/sandboxes/00000000-0000-4000-8000-000000000000/endpoints/44772")
        self.assertEqual(r.status, 404, r)

    # --- request ids, keep-alive, health -----------------------------------------------------

    def test_request_id(self):
        sid = self.create()["id"]
        cases = [("GET", "/health", None, 200),
                 ("GET", "/v1/sandboxes/%s" % sid, None, 200),
                 ("GET", "/v1/sandboxes/00000000-0000-4000-8000-000000000000", None, 404),
                 ("POST", "/v1/sandboxes", {"image": {"uri": "host"}}, 422)]
        for method, path, body, want in cases:
            rid = "req-" + secrets.token_hex(8)
            r = self.client.request(method, path, body=body, headers={"X-Request-ID": rid})
            self.assertEqual(r.status, want, "%s %s: %r" % (method, path, r))
            self.assertEqual(r.header("X-Request-ID"), rid, "%s %s echoes X-Request-ID" % (method, path))
            r1 = self.client.request(method, path, body=body)
            r2 = self.client.request(method, path, body=body)
            g1, g2 = r1.header("X-Request-ID"), r2.header("X-Request-ID")
            self.assertTrue(g1 and g2, "%s %s: generated X-Request-ID" % (method, path))
            self.assertRegex(g1, HEX32_RE)
            self.assertNotEqual(g1, g2)

    def test_keep_alive_header(self):
        c = self.corrald.client()
        self.addCleanup(c.close)
        sid = self.create(client=c)["id"]
        responses = [c.get("/health"), c.get_sandbox(sid), c.list_sandboxes(),
                     c.get_sandbox("00000000-0000-4000-8000-000000000000"),
                     c.post("/v1/sandboxes", {"image": {"uri": "host"}}),
                     c.get("/no/such/route")]
        for r in responses:
            ka = r.header("Keep-Alive")
            self.assertIsNotNone(ka, "Keep-Alive header on %r" % r)
            m = re.search(r"timeout=(\d+)", ka)
            self.assertTrue(m, ka)
            self.assertGreater(int(m.group(1)), 0)
            self.assertNotEqual((r.header("Connection") or "").lower(), "close", r)
        self.assertEqual(c.connects, 1, "all of those went over one connection")

    def test_health(self):
        r = self.client.get("/health")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.json(), {"status": "healthy"})

    # --- TTL ---------------------------------------------------------------------------------

    # The TTLs below leave seconds for the calls each test makes before the expiry: a create and
    # a command can take more than the two seconds a shorter TTL left under ASan on a loaded host.
    def test_ttl_reaping(self):
        j = self.create(timeout=6)
        sid = j["id"]
        expires = parse_time(j["expiresAt"]).timestamp()
        self.assertEqual((parse_time(j["expiresAt"]) - parse_time(j["createdAt"])).total_seconds(), 6.0)
        self.assertEqual(self.client.get_sandbox(sid).status, 200)
        self.assertTrue(self.corrald.sandbox_cgroups(sid))
        self.assertEqual(self.sh(sid, "echo alive"), "alive")
        self.wait_gone(sid, timeout=30)
        self.assertGreaterEqual(time.time(), expires - 0.5, "reaped before its expiry")
        r = self.client.post("/sandboxes/%s/proxy/44772/command" % sid, {"command": "true"})
        self.assertEqual(r.status, 404, r)

    def test_renew_postpones_reaping(self):
        j = self.create(timeout=6)
        sid = j["id"]
        target = now() + timedelta(seconds=120)
        r = self.client.post("/v1/sandboxes/%s/renew-expiration" % sid, {"expiresAt": rfc3339(target.timestamp())})
        self.assertEqual(r.status, 200, r)
        # past the old expiry, however long the create and the renew took
        time.sleep(max(0.0, parse_time(j["expiresAt"]).timestamp() + 1.5 - time.time()))
        g = self.client.get_sandbox(sid)
        self.assertEqual(g.status, 200, "renewed sandbox reaped at its old expiry")
        self.assertEqual(self.sh(sid, "echo still-here"), "still-here")

    # --- endings -----------------------------------------------------------------------------

    def wait_state(self, sid, states, timeout=15):
        def st():
            r = self.client.get_sandbox(sid)
            return r.status == 200 and r.json()["status"]["state"] in states and r.json()["status"]
        return self.wait_until(st, timeout, msg="%s to reach %s" % (sid, states))

    def test_entrypoint_exit_ends_sandbox(self):
        sid = self.create(entrypoint=["sh", "-c", "while [ ! -e /tmp/stop ]; do sleep 0.05; done; exit 3"])["id"]
        self.assertEqual(self.sh(sid, "echo up"), "up")
        self.run_ok(sid, "touch /tmp/stop")
        st = self.wait_state(sid, ("Failed",))
        self.assertEqual(st.get("reason"), "EntrypointExited", st)
        self.assertIn("3", st.get("message", ""), st)
        r = self.client.post("/sandboxes/%s/proxy/44772/command" % sid, {"command": "true"})
        self.assertEqual(r.status, 410, r)
        self.assertEqual(r.json().get("code"), "SANDBOX::ENDED", r.json())
        # an ended sandbox is still listed until deleted, then torn down
        self.assertIn(sid, self.client.all_sandbox_ids())
        self.assertEqual(self.client.delete_sandbox(sid).status, 204)
        self.wait_gone(sid)

    def test_entrypoint_exit_zero_is_terminated(self):
        sid = self.create(entrypoint=["sh", "-c", "while [ ! -e /tmp/stop ]; do sleep 0.05; done; exit 0"])["id"]
        self.run_ok(sid, "touch /tmp/stop")
        st = self.wait_state(sid, ("Terminated", "Failed"))
        self.assertEqual(st["state"], "Terminated", st)

    def test_result_of_the_command_that_ends_the_sandbox_is_kept(self):
        """A command that finished just before the entrypoint exits still reports its output and
        exit code: PID 1 sends the replies it has queued before it exits."""
        # The entrypoint ends when the command's fifo write end closes, i.e. as the command exits,
        # so the two processes end back to back, in either order of reaping.
        ep = ["sh", "-c", "mkfifo /tmp/f && cat /tmp/f >/dev/null; exit 0"]
        for i in range(5):
            sid = self.create(entrypoint=ep)["id"]
            res = self.client.run(sid, "while [ ! -p /tmp/f ]; do sleep 0.01; done; "
                                       "exec 3>/tmp/f; echo kept-%d; exit 7" % i)
            self.assertEqual((res.exit_code, res.stdout.strip()), (7, "kept-%d" % i), res)
            st = self.wait_state(sid, ("Terminated", "Failed"))
            self.assertEqual((st["state"], st.get("reason")), ("Terminated", "EntrypointExited"), st)

    def test_pid1_killed_is_failed(self):
        sid = self.create()["id"]
        pid = self.corrald.pid1(sid)
        os.kill(pid, 9)
        st = self.wait_state(sid, ("Failed",), timeout=10)
        self.assertTrue(st.get("reason"), st)
        r = self.client.get("/sandboxes/%s/proxy/44772/ping" % sid)
        self.assertEqual(r.status, 410, r)
        self.assertEqual(self.client.post("/v1/sandboxes/%s/pause" % sid).status, 409)
        self.assertEqual(self.client.post("/v1/sandboxes/%s/resume" % sid).status, 409)
        self.assertEqual(self.client.delete_sandbox(sid).status, 204)
        self.wait_gone(sid)

    def test_delete_paused(self):
        sid = self.create()["id"]
        self.run_ok(sid, "sleep 1000 >/dev/null 2>&1 &")
        self.assertEqual(self.client.post("/v1/sandboxes/%s/pause" % sid).status, 202)
        self.wait_state(sid, ("Paused",))
        r = self.client.delete_sandbox(sid)
        self.assertEqual(r.status, 204, r)
        self.wait_gone(sid, timeout=20)

    def test_ttl_of_paused_sandbox(self):
        sid = self.create(timeout=6)["id"]
        self.assertEqual(self.client.post("/v1/sandboxes/%s/pause" % sid).status, 202)
        self.wait_gone(sid, timeout=20)

    def test_ttl_expiry_ends_open_stream(self):
        from harness import CommandStream
        sid = self.create(timeout=6)["id"]
        s = CommandStream("127.0.0.1", self.corrald.port, sid, "sleep 30")
        self.addCleanup(s.abort)
        self.assertIsNotNone(s.wait_for("init"))
        box = {}
        th = threading.Thread(target=lambda: box.setdefault("r", s.finish()), daemon=True)
        th.start()
        th.join(20)
        self.assertFalse(th.is_alive(), "the stream of a reaped sandbox must end")
        self.assertFalse(box["r"].complete)
        self.wait_gone(sid)

    def test_delete_during_stream(self):
        from harness import CommandStream
        sid = self.create()["id"]
        s = CommandStream("127.0.0.1", self.corrald.port, sid, "echo x; sleep 60")
        self.addCleanup(s.abort)
        self.assertIsNotNone(s.wait_for("stdout"))
        t0 = time.monotonic()
        self.assertEqual(self.client.delete_sandbox(sid).status, 204)
        box = {}
        th = threading.Thread(target=lambda: box.setdefault("r", s.finish()), daemon=True)
        th.start()
        th.join(15)
        self.assertFalse(th.is_alive(), "the stream of a deleted sandbox must end, not hang")
        self.assertLess(time.monotonic() - t0, 15)
        self.assertFalse(box["r"].complete, "a killed command does not complete")
        self.wait_gone(sid)

    def test_concurrent_deletes(self):
        sid = self.create()["id"]
        out = []

        def d():
            c = self.corrald.client()
            out.append(c.delete_sandbox(sid).status)
            c.close()
        ths = [threading.Thread(target=d) for _ in range(5)]
        for t in ths:
            t.start()
        for t in ths:
            t.join(30)
        self.assertEqual(sorted(out), [204, 404, 404, 404, 404])
        self.wait_gone(sid)

    def test_pipelined_requests(self):
        import socket
        s = socket.create_connection(("127.0.0.1", self.corrald.port), timeout=10)
        self.addCleanup(s.close)
        req = (b"GET /health HTTP/1.1\r\nHost: x\r\nX-Request-ID: p1\r\n\r\n"
               b"GET /v1/sandboxes/00000000-0000-4000-8000-000000000000 HTTP/1.1\r\nHost: x\r\nX-Request-ID: p2\r\n\r\n"
               b"GET /health HTTP/1.1\r\nHost: x\r\nX-Request-ID: p3\r\n\r\n")
        s.sendall(req)
        buf = b""
        deadline = time.monotonic() + 10
        while buf.count(b"HTTP/1.1 ") < 3 or not buf.rstrip().endswith(b"}"):
            if time.monotonic() > deadline:
                break
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        statuses = re.findall(rb"HTTP/1.1 (\d+)", buf)
        rids = re.findall(rb"(?i)x-request-id: (\S+)", buf)
        self.assertEqual(statuses, [b"200", b"404", b"200"], buf)
        self.assertEqual(rids, [b"p1", b"p2", b"p3"], buf)


class IdleTimeout(CorralTestCase):
    corrald_kwargs = {"extra_args": ["--idle-timeout", "1"]}

    def test_idle_connection_closed_after_timeout(self):
        import socket
        r = self.client.get("/health")
        self.assertRegex(r.header("Keep-Alive") or "", r"timeout=1\b")
        s = socket.create_connection(("127.0.0.1", self.corrald.port), timeout=10)
        self.addCleanup(s.close)
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        first = s.recv(65536)
        self.assertIn(b"200", first.split(b"\r\n")[0])
        t0 = time.monotonic()
        rest = s.recv(65536)  # blocks until the server closes the idle connection
        dt = time.monotonic() - t0
        self.assertEqual(rest, b"", "the server closes cleanly")
        self.assertGreater(dt, 0.5)
        self.assertLess(dt, 5, "idle connection closed after ~1 s, not %.1f s" % dt)

    def test_long_command_not_cut_by_idle_timeout(self):
        sid = self.create()["id"]
        res = self.client.run(sid, "sleep 2.5; echo survived")
        self.assertEqual(res.stdout_lines, ["survived"], res)
        res = self.client.run(sid, "sleep 2.5; echo bg", background=True)
        st = self.client.wait_command(sid, res.init_id, timeout=10)
        self.assertEqual(st.get("exit_code"), 0)


class ApiKey(CorralTestCase):
    corrald_kwargs = {"api_key": "k-" + secrets.token_hex(8)}

    def test_missing_and_invalid_key(self):
        nokey = self.corrald.client(api_key=None)
        bad = self.corrald.client(api_key="wrong")
        self.addCleanup(nokey.close)
        self.addCleanup(bad.close)
        for path in ("/v1/sandboxes", "/sandboxes", "/v1/sandboxes/00000000-0000-4000-8000-000000000000"):
            r = nokey.get(path, headers={"X-Request-ID": "rid-1"})
            self.assertEqual(r.status, 401, r)
            self.assertEqual(r.json()["code"], "MISSING_API_KEY")
            self.assertEqual(r.header("X-Request-ID"), "rid-1")
            self.assertRegex(r.header("Keep-Alive") or "", r"timeout=\d+")
            r = nokey.get(path)
            self.assertTrue(r.header("X-Request-ID"))
            r = bad.get(path, headers={"X-Request-ID": "rid-2"})
            self.assertEqual(r.status, 401, r)
            self.assertEqual(r.json()["code"], "INVALID_API_KEY")
            self.assertEqual(r.header("X-Request-ID"), "rid-2")
        r = nokey.post("/v1/sandboxes", {"image": {"uri": "host"}, "entrypoint": ["true"],
                                          "resourceLimits": {"cpu": "1", "memory": "64Mi"}})
        self.assertEqual(r.status, 401, r)
        r = self.client.list_sandboxes()
        self.assertEqual(r.status, 200, r)

    def test_exempt_routes(self):
        nokey = self.corrald.client(api_key=None)
        self.addCleanup(nokey.close)
        r = nokey.get("/health")
        self.assertEqual(r.status, 200, r)
        sid = self.create()["id"]
        # The proxy route takes the key or the sandbox's token from its endpoint's headers.
        r = nokey.get("/sandboxes/%s/proxy/44772/ping" % sid)
        self.assertEqual(r.status, 401, r)
        headers = self.client.get("/v1/sandboxes/%s/endpoints/44772" % sid).json()["headers"]
        r = nokey.get("/sandboxes/%s/proxy/44772/ping" % sid, headers=headers)
        self.assertEqual(r.status, 200, r)
        r = nokey.get("/v1/sandboxes/%s/proxy/44772/ping" % sid, headers=headers)
        self.assertEqual(r.status, 200, r)
        # ".." in the proxy path needs the key itself
        r = nokey.get("/sandboxes/%s/proxy/44772/../../../v1/sandboxes" % sid, headers=headers)
        self.assertNotEqual(r.status, 200, r)


class ListenPolicy(unittest.TestCase):

    def _run(self, args, env_key=None, timeout=10):
        tmp = tempfile.mkdtemp(prefix="corral-test-listen-")
        self.addCleanup(safe_rmtree, tmp)
        cg = "corral-test-%s" % secrets.token_hex(4)
        self.addCleanup(self._rm_cgroups, cg)
        port = free_port()
        env = dict(os.environ)
        env.pop("CORRAL_API_KEY", None)
        if env_key:
            env["CORRAL_API_KEY"] = env_key
        argv = [binary("corrald"), "--listen", "0.0.0.0:%d" % port, "--state-dir", tmp,
                "--cgroup-name", cg, "--sandbox-subnet", "none"] + args
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                             stdin=subprocess.DEVNULL)
        return p, port

    def _rm_cgroups(self, cg):
        from harness import suite_cgroup_dirs
        for d in suite_cgroup_dirs(cg):
            try:
                os.rmdir(d)
            except OSError:
                pass

    def _healthy(self, port, p, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and p.poll() is None:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                c.request("GET", "/health")
                st = c.getresponse().status
                c.close()
                if st == 200:
                    return True
            except OSError:
                pass
            time.sleep(0.05)
        return False

    def _stop(self, p):
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        out = p.stdout.read().decode("utf-8", "replace")
        p.stdout.close()
        return out

    def test_refuses_non_loopback_without_key(self):
        p, port = self._run([])
        try:
            rc = p.wait(10)
        except subprocess.TimeoutExpired:
            rc = None
        out = self._stop(p)
        self.assertIsNotNone(rc, "corrald kept running on 0.0.0.0 without an API key")
        self.assertNotEqual(rc, 0)
        self.assertRegex(out.lower(), r"api.?key|loopback", "the refusal says why: %r" % out)

    def test_non_loopback_with_key_starts(self):
        p, port = self._run(["--api-key", "secret-" + secrets.token_hex(4)])
        ok = self._healthy(port, p)
        out = self._stop(p)
        self.assertTrue(ok, "corrald with --api-key on 0.0.0.0 did not come up: %s" % out)

    def test_non_loopback_with_env_key_starts(self):
        p, port = self._run([], env_key="secret-" + secrets.token_hex(4))
        ok = self._healthy(port, p)
        out = self._stop(p)
        self.assertTrue(ok, "corrald with CORRAL_API_KEY on 0.0.0.0 did not come up: %s" % out)


if __name__ == "__main__":
    main()
