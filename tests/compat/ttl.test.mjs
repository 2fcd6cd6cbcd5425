// Slow lifecycle checks, in their own file so they overlap with the rest of the run:
// TTL expiry (the reaper removes a sandbox at expiresAt), renew keeps one alive, and connections
// left idle across corrald's advertised keep-alive timeout (30 s) are reused or replaced cleanly.
import { test } from "node:test";
import assert from "node:assert/strict";

import { createSandbox, destroy, poll, rejectsWithStatus, sleep, stdoutLines } from "./lib.mjs";

test("TTL: an expired sandbox is reaped; a renewed one lives on; idle keep-alive reuse works", async () => {
  const a = await createSandbox({ timeoutSeconds: 60, metadata: { case: "ttl-expire" } });
  let b;
  try {
    b = await createSandbox({ timeoutSeconds: 60, metadata: { case: "ttl-renew" } });
    const infoA = await a.getInfo();
    const t0 = Date.now();
    assert.deepEqual(stdoutLines(await a.commands.run("echo a-alive")), ["a-alive"]);
    assert.deepEqual(stdoutLines(await b.commands.run("echo b-alive")), ["b-alive"]);

    // Leave b's pooled connections idle past corrald's 30 s keep-alive, then use them again:
    // a lifecycle POST and a proxied stream must both succeed (no stale-socket error).
    await sleep(31_000);
    const renewed = await b.renew(300);
    assert.ok(renewed.expiresAt.getTime() - Date.now() > 290_000, "b renewed to ~300 s");
    const ex = await b.commands.run("echo after-idle");
    assert.deepEqual(stdoutLines(ex), ["after-idle"], "proxied command after 31 s idle");
    assert.equal(await b.isHealthy(), true);

    // a expires at createdAt + 60 s; the reaper must remove it promptly.
    const waitMs = infoA.expiresAt.getTime() - Date.now();
    if (waitMs > 0) await sleep(waitMs);
    const gone = await poll(async () => {
      try {
        await a.getInfo();
        return false;
      } catch (e) {
        return e.statusCode === 404;
      }
    }, { timeoutMs: 10_000, intervalMs: 250 });
    assert.ok(gone, `sandbox a still present 10 s after its expiresAt (${infoA.expiresAt.toISOString()})`);
    await rejectsWithStatus(a.getInfo(), 404, "getInfo of the expired sandbox");
    assert.equal(await a.isHealthy(), false, "the expired sandbox's execd is gone");
    assert.ok(Date.now() - t0 < 80_000);

    const infoB = await b.getInfo();
    assert.equal(infoB.status.state, "Running", "renewed sandbox outlives its original expiry");
    assert.deepEqual(stdoutLines(await b.commands.run("echo b-still-here")), ["b-still-here"]);
  } finally {
    await destroy(a);
    await destroy(b);
  }
});
