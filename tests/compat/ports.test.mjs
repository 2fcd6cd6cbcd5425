// A server listening inside the sandbox is reachable through the endpoint the SDK resolves for its
// port (getEndpoint / getEndpointUrl), in both endpoint modes.
import { test } from "node:test";
import assert from "node:assert/strict";

import { poll, sh, withSandbox } from "./lib.mjs";

for (const useServerProxy of [true, false]) {
  test(`web server in the sandbox reachable via getEndpointUrl (useServerProxy=${useServerProxy})`, async () => {
    await withSandbox({ useServerProxy, metadata: { case: `ports-${useServerProxy}` } }, async (sbx) => {
      await sh(sbx, "mkdir -p /tmp/www/sub && echo hi-from-sandbox > /tmp/www/hello.txt && echo deep > /tmp/www/sub/x.txt");
      const bg = await sbx.commands.run("cd /tmp/www && exec python3 -m http.server 8000 --bind 127.0.0.1", { background: true });
      assert.ok(bg.id);
      const ep = await sbx.getEndpoint(8000);
      assert.ok(!/^[a-z]+:\/\//i.test(ep.endpoint), `endpoint has no scheme: ${ep.endpoint}`);
      const url = await sbx.getEndpointUrl(8000);
      const headers = { ...(ep.headers ?? {}) };
      const res = await poll(async () => {
        try {
          const r = await fetch(`${url}/hello.txt`, { headers });
          const body = await r.text();
          return r.status === 200 ? { r, body } : null;
        } catch {
          return null;
        }
      }, { timeoutMs: 10_000, intervalMs: 200 });
      assert.ok(res, `GET ${url}/hello.txt never answered 200`);
      assert.equal(res.body, "hi-from-sandbox\n");
      const r2 = await fetch(`${url}/sub/x.txt?q=1&r=two`, { headers });
      assert.equal(r2.status, 200, "sub-path and query string are forwarded");
      assert.equal(await r2.text(), "deep\n");
      const r3 = await fetch(`${url}/missing`, { headers });
      await r3.arrayBuffer();
      assert.equal(r3.status, 404, "the backend's own status comes back");
      await sbx.commands.interrupt(bg.id);
    });
  });
}

const ECHO_SERVER = `
import http.server, json
class H(http.server.BaseHTTPRequestHandler):
    def _reply(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n).decode() if n else ""
        out = json.dumps({"method": self.command, "path": self.path, "body": body,
                          "headers": {k.lower(): v for k, v in self.headers.items()}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _reply
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", 8002), H).serve_forever()
`;

test("proxied requests keep method, path, query and body; credentials are stripped", async () => {
  await withSandbox({ metadata: { case: "ports-headers" } }, async (sbx) => {
    await sbx.files.writeFiles([{ path: "/tmp/echo_server.py", data: ECHO_SERVER }]);
    const bg = await sbx.commands.run("exec python3 /tmp/echo_server.py", { background: true });
    const url = await sbx.getEndpointUrl(8002);
    const send = (method, body) =>
      fetch(`${url}/some/path?x=1&y=two%20words`, {
        method,
        body,
        headers: {
          "OPEN-SANDBOX-API-KEY": "must-not-leak",
          Authorization: "Bearer must-not-leak",
          Cookie: "session=must-not-leak",
          "X-Compat-Custom": "kept",
          "content-type": "text/plain",
        },
      });
    const first = await poll(async () => {
      try {
        const r = await send("GET");
        return r.status === 200 ? await r.json() : null;
      } catch {
        return null;
      }
    }, { timeoutMs: 10_000, intervalMs: 200 });
    assert.ok(first, `the echo server in the sandbox never answered through ${url}`);
    assert.equal(first.method, "GET");
    assert.equal(first.path, "/some/path?x=1&y=two%20words", "sub-path and query forwarded verbatim");
    assert.equal(first.headers["x-compat-custom"], "kept", "ordinary headers pass");
    for (const h of ["open-sandbox-api-key", "authorization", "cookie"]) {
      assert.equal(first.headers[h], undefined, `${h} is stripped by the proxy`);
    }
    for (const method of ["POST", "PUT", "PATCH", "DELETE"]) {
      const r = await send(method, `payload-${method}`);
      assert.equal(r.status, 200, method);
      const echoed = await r.json();
      assert.equal(echoed.method, method);
      assert.equal(echoed.body, `payload-${method}`, `${method} body forwarded`);
    }
    await sbx.commands.interrupt(bg.id);
  });
});

test("a port with nothing listening gives a 502, not a hang", async () => {
  await withSandbox({ metadata: { case: "ports-502" } }, async (sbx) => {
    const url = await sbx.getEndpointUrl(8001);
    const t0 = Date.now();
    const r = await fetch(`${url}/`, { signal: AbortSignal.timeout(10_000) });
    await r.arrayBuffer();
    assert.equal(r.status, 502, `status ${r.status}`);
    assert.ok(Date.now() - t0 < 5_000);
  });
});
