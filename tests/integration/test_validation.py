#!/usr/bin/env python3
"""Malformed input gets the documented 4xx (naming the field), never a crash, hang or 500."""

import json
import os
import socket
import sys
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import OMIT, CorralTestCase, main  # noqa: E402

UNKNOWN = "00000000-0000-4000-8000-000000000000"
GOOD = {"image": {"uri": "host"}, "entrypoint": ["sleep", "infinity"],
        "resourceLimits": {"cpu": "1", "memory": "64Mi"}}


def raw_exchange(port, data, read_timeout=10, send_ignore_errors=True):
    """Send raw bytes on a new connection; return everything read until close or timeout."""
    s = socket.create_connection(("127.0.0.1", port), timeout=read_timeout)
    try:
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            if not send_ignore_errors:
                raise
        try:
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                break
            if not chunk:
                break
            out += chunk
        return out
    finally:
        s.close()


def status_of(raw):
    line = raw.split(b"\r\n", 1)[0]
    parts = line.split()
    if len(parts) >= 2 and parts[0].startswith(b"HTTP/1."):
        return int(parts[1])
    return None


class Validation(CorralTestCase):

    def assert_error(self, r, status, field=None, code=None):
        self.assertEqual(r.status, status, r)
        self.assertIn("json", r.header("Content-Type") or "", r)
        j = r.json()
        self.assertIsInstance(j, dict, r)
        blob = json.dumps(j)
        if field is not None:
            self.assertIn(field, blob, "the error names %r: %s" % (field, blob))
        if code is not None:
            self.assertEqual(j.get("code"), code, j)
        self.assertTrue(r.header("X-Request-ID"), "X-Request-ID on errors too")
        self.assertRegex(r.header("Keep-Alive") or "", r"timeout=\d+", "Keep-Alive on every response")
        return j

    def create_raw(self, body=None, raw=None):
        r = self.client.post("/v1/sandboxes", body, raw=raw)
        if r.status == 202:
            self.addCleanup(self._cleanup_sandbox, r.json()["id"])
        return r

    def assert_no_sandbox_made(self):
        self.assertEqual(self.client.all_sandbox_ids(), [], "a rejected create left a sandbox")

    # --- bodies ------------------------------------------------------------------------------

    def test_malformed_json(self):
        for raw in (b'{"image": ', b"not json", b"", b"{'image': 1}", b'{"a":1}{"b":2}',
                    b"\xff\xfe\x00", b"[]", b'"string"', b"null", b"42"):
            r = self.create_raw(raw=raw)
            self.assertEqual(r.status, 422, "body %r -> %r" % (raw, r))
            self.assertTrue(r.header("X-Request-ID"))
        self.assert_no_sandbox_made()

    def test_bad_quantities(self):
        cases = [({"cpu": "abc", "memory": "64Mi"}, "cpu"),
                 ({"cpu": "1", "memory": "12Qi"}, "memory"),
                 ({"cpu": "-1", "memory": "64Mi"}, "cpu"),
                 ({"cpu": "0", "memory": "64Mi"}, "cpu"),
                 ({"cpu": "1", "memory": "0"}, "memory"),
                 ({"cpu": "1", "memory": "-5Mi"}, "memory"),
                 ({"cpu": "1m500", "memory": "64Mi"}, "cpu"),
                 ({"cpu": "1", "memory": "99999999999999999999Gi"}, "memory"),
                 ({"cpu": "1", "memory": "64Mi", "pids": "abc"}, "pids"),
                 ({"cpu": "1", "memory": "64Mi", "pids": "0"}, "pids"),
                 ({"cpu": 1, "memory": "64Mi"}, "cpu")]
        for limits, field in cases:
            body = dict(GOOD, resourceLimits=limits)
            r = self.create_raw(body)
            self.assert_error(r, 422, field=field)
            self.assertIn("resourceLimits", json.dumps(r.json()), r)
        self.assert_no_sandbox_made()

    def test_unknown_image(self):
        r = self.create_raw(dict(GOOD, image={"uri": "no-such-image-corral"}))
        self.assertGreaterEqual(r.status, 400, r)
        self.assertLess(r.status, 500, r)
        self.assertIn("no-such-image-corral", r.json().get("message", "") + json.dumps(r.json()))
        self.assertIn("host", json.dumps(r.json()), "the error lists the images that exist")
        for uri in ("../../etc", "/etc", "host/../x", ""):
            r = self.create_raw(dict(GOOD, image={"uri": uri}))
            self.assertGreaterEqual(r.status, 400, "%r -> %r" % (uri, r))
            self.assertLess(r.status, 500, "%r -> %r" % (uri, r))
        self.assert_no_sandbox_made()

    def test_missing_fields(self):
        for field in ("entrypoint", "image", "resourceLimits"):
            body = dict(GOOD)
            del body[field]
            r = self.create_raw(body)
            self.assert_error(r, 422, field=field)
        for bad in ({"image": {}}, {"image": "host"}, {"image": {"uri": 5}}):
            r = self.create_raw(dict(GOOD, **bad))
            self.assert_error(r, 422, field="image")
        for bad in ([], "sleep infinity", [1, 2], [""]):
            r = self.create_raw(dict(GOOD, entrypoint=bad))
            self.assertIn(r.status, (400, 422), "entrypoint %r -> %r" % (bad, r))
            self.assertIn("entrypoint", json.dumps(r.json()))
        r = self.create_raw(dict(GOOD, resourceLimits="1cpu"))
        self.assert_error(r, 422, field="resourceLimits")
        r = self.create_raw(dict(GOOD, env={"A": 1}))
        self.assert_error(r, 422, field="env")
        self.assert_no_sandbox_made()

    def test_entrypoint_that_cannot_start(self):
        """An entrypoint that cannot start or exits at once: either the create fails with a 4xx
        naming the entrypoint, or (it lost the race with execd's first ping) the sandbox is
        reported Failed/EntrypointExited with the exit code. Never a 500, never a leak."""
        for ep, code in ((["/no/such/binary"], "127"), (["sh", "-c", "exit 4"], "4")):
            r = self.create_raw(dict(GOOD, entrypoint=ep))
            if r.status == 202:
                sid = r.json()["id"]

                def failed():
                    st = self.client.get_sandbox(sid).json()["status"]
                    return st["state"] == "Failed" and st
                st = self.wait_until(failed, 10, msg="%r reported Failed" % ep)
                self.assertEqual(st.get("reason"), "EntrypointExited", st)
                self.assertIn(code, st.get("message", ""), st)
                self.assertEqual(self.client.delete_sandbox(sid).status, 204)
            else:
                self.assertGreaterEqual(r.status, 400, "%r -> %r" % (ep, r))
                self.assertLess(r.status, 500, "%r -> %r" % (ep, r))
                self.assertIn("entrypoint", r.text)
                self.assertIn(code, r.text)
        self.wait_until(lambda: self.client.all_sandbox_ids() == [], 10, msg="nothing listed")
        self.assertEqual(self.corrald.wait_no_leaks(15), [], "a failed create is rolled back")

    def test_bad_env(self):
        for env in ({"A=B": "x"}, {"": "x"}, {"A": 5}, ["A=1"]):
            r = self.create_raw(dict(GOOD, env=env))
            self.assert_error(r, 422, field="env")
        self.assert_no_sandbox_made()

    def test_bad_timeout(self):
        for t in (0, -1, -60, "60", 1.5, True, [], {}, 10 ** 12):
            r = self.create_raw(dict(GOOD, timeout=t))
            self.assert_error(r, 422, field="timeout")
        self.assert_no_sandbox_made()

    def test_bad_metadata_labels(self):
        for md in ({"opensandbox.io/x": "1"}, {"bad key!": "1"}, {"k": "bad value!"}, {"k": "x" * 64}):
            r = self.create_raw(dict(GOOD, metadata=md))
            self.assertEqual(r.status, 400, "metadata %r -> %r" % (md, r))
        r = self.create_raw(dict(GOOD, metadata={"k": 1}))
        self.assertIn(r.status, (400, 422), r)
        self.assert_no_sandbox_made()

    def test_oversized_body(self):
        big = dict(GOOD, env={"PAD": "x" * (1024 * 1024 + 100)})
        data = json.dumps(big).encode()
        req = (b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n" % len(data)) + data
        out = raw_exchange(self.corrald.port, req)
        self.assertEqual(status_of(out), 413, out[:300])
        self.assertIn(b"x-request-id:", out.split(b"\r\n\r\n")[0].lower())
        # chunked, no Content-Length
        chunk = b"%x\r\n%s\r\n" % (len(data), data)
        req = (b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n") + chunk + b"0\r\n\r\n"
        out = raw_exchange(self.corrald.port, req)
        self.assertEqual(status_of(out), 413, out[:300])
        self.assertEqual(self.client.get("/health").status, 200)
        self.assert_no_sandbox_made()

    # --- routes ------------------------------------------------------------------------------

    def test_unknown_routes(self):
        for path in ("/nope", "/v1/nope", "/v2/sandboxes", "/v1/sandboxes/%s/nope" % UNKNOWN,
                     "/sandboxes/%s/snapshots/x/y" % UNKNOWN, "/v1/v1/sandboxes"):
            r = self.client.get(path)
            self.assert_error(r, 404)

    def test_wrong_method(self):
        for method, path in (("PUT", "/v1/sandboxes"), ("PATCH", "/v1/sandboxes"), ("DELETE", "/v1/sandboxes"),
                             ("POST", "/v1/sandboxes/%s" % UNKNOWN), ("PUT", "/v1/sandboxes/%s" % UNKNOWN),
                             ("DELETE", "/health"), ("POST", "/health"),
                             ("GET", "/v1/sandboxes/%s/pause" % UNKNOWN),
                             ("GET", "/v1/sandboxes/%s/renew-expiration" % UNKNOWN)):
            r = self.client.request(method, path)
            self.assert_error(r, 405)

    def test_list_params(self):
        for q, want in (("pageSize=201", 422), ("pageSize=0", 422), ("page=0", 422), ("page=-1", 422),
                        ("pageSize=abc", 422), ("page=1.5", 422), ("page=99999999999999999999", 422),
                        ("pageSize=200", 200), ("page=1000", 200)):
            r = self.client.get("/v1/sandboxes?" + q)
            self.assertEqual(r.status, want, "%s -> %r" % (q, r))
            if want == 422:
                self.assertIn("page", json.dumps(r.json()).lower())

    def test_malformed_metadata_filter(self):
        for bad in ("novalue", "=v", "a=1&&b=2", "a=1&b"):
            r = self.client.get("/v1/sandboxes?metadata=" + urllib.parse.quote(bad, safe=""))
            self.assert_error(r, 400, code="INVALID_METADATA_FORMAT")
        for ok in ("a=", "a=1&b=2", ""):
            r = self.client.get("/v1/sandboxes?metadata=" + urllib.parse.quote(ok, safe=""))
            self.assertEqual(r.status, 200, "%r -> %r" % (ok, r))

    def test_renew_and_patch_bodies(self):
        sid = self.client.create_sandbox_raw(timeout=600).json()["id"]
        self.addCleanup(self._cleanup_sandbox, sid)
        for body in ({}, {"expiresAt": "tomorrow"}, {"expiresAt": 5}, {"expiresAt": None}):
            r = self.client.post("/v1/sandboxes/%s/renew-expiration" % sid, body)
            self.assertIn(r.status, (400, 422), "%r -> %r" % (body, r))
            self.assertIn("expiresAt", json.dumps(r.json()))
        r = self.client.post("/v1/sandboxes/%s/renew-expiration" % sid, raw=b"{bad")
        self.assertEqual(r.status, 422, r)
        for body in ([], "x", {"k": 5}, {"k": {"nested": "x"}}):
            r = self.client.patch("/v1/sandboxes/%s/metadata" % sid, body)
            self.assertIn(r.status, (400, 422), "%r -> %r" % (body, r))
        r = self.client.patch("/v1/sandboxes/%s/metadata" % sid, {"opensandbox.io/x": "1"})
        self.assertEqual(r.status, 400, r)
        self.assertEqual(self.client.get_sandbox(sid).json().get("metadata", {}), {})

    def test_endpoint_ports(self):
        sid = self.client.create_sandbox_raw().json()["id"]
        self.addCleanup(self._cleanup_sandbox, sid)
        for port in ("0", "65536", "abc", "-1"):
            r = self.client.get("/v1/sandboxes/%s/endpoints/%s" % (sid, port))
            self.assertIn(r.status, (400, 404, 422), "port %s -> %r" % (port, r))
        r = self.client.get("/v1/sandboxes/%s/endpoints/44772?use_server_proxy=true&expires=9999999999" % sid)
        self.assertEqual(r.status, 400, r)

    def test_proxy_unknown_sandbox(self):
        for path in ("/sandboxes/%s/proxy/44772/ping" % UNKNOWN, "/v1/sandboxes/%s/proxy/44772/command" % UNKNOWN,
                     "/sandboxes/not-an-id/proxy/44772/ping"):
            r = self.client.get(path)
            self.assert_error(r, 404)
        r = self.client.post("/sandboxes/%s/proxy/44772/command" % UNKNOWN, {"command": "true"})
        self.assert_error(r, 404)

    # --- raw garbage -------------------------------------------------------------------------

    def test_garbage_http(self):
        payloads = [b"\x00\xff\xfe garbage\r\n\r\n",
                    b"GET\r\n\r\n",
                    b"GET / HTTP/9.9\r\n\r\n",
                    b"GET /health HTTP/1.1\r\n" + b"X-Long: " + b"a" * 200000 + b"\r\n\r\n",
                    b"GET /health HTTP/1.1\r\n" + b"".join(b"H%d: v\r\n" % i for i in range(5000)) + b"\r\n",
                    b"POST /v1/sandboxes HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
                    b"POST /v1/sandboxes HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
                    b"POST /v1/sandboxes HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                    b"POST /v1/sandboxes HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"image\"",
                    b"GET /v1/sandboxes?page=%zz&metadata=%%%% HTTP/1.1\r\nHost: x\r\n\r\n",
                    b"GET /sandboxes/%2e%2e/proxy/44772/ping HTTP/1.1\r\nHost: x\r\n\r\n",
                    b"GET " + b"/a" * 50000 + b" HTTP/1.1\r\n\r\n",
                    b"\r\n" * 1000,
                    bytes(range(256)) * 64]
        for p in payloads:
            out = raw_exchange(self.corrald.port, p, read_timeout=5)
            st = status_of(out)
            if st is not None:
                self.assertLess(st, 500, "%r... -> %r" % (p[:60], out[:200]))
            r = self.client.get("/health")
            self.assertEqual(r.status, 200, "corrald died after %r" % p[:60])
        self.assertIsNone(self.corrald.proc.poll(), "corrald exited")
        # half-open connections do not block others
        socks = [socket.create_connection(("127.0.0.1", self.corrald.port)) for _ in range(20)]
        for s in socks:
            s.sendall(b"GET /health HTTP/1.1\r\nHo")
        r = self.client.get("/health")
        self.assertEqual(r.status, 200)
        for s in socks:
            s.close()


if __name__ == "__main__":
    main()
