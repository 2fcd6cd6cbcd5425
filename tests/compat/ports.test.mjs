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
