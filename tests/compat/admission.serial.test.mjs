// Admission (a corral extension: a create that does not fit waits for capacity) as a stock SDK
// client sees it. run.sh starts corrald with --capacity memory=100Ti, so two 60Ti sandboxes cannot
// be admitted together.
import { test } from "node:test";
import assert from "node:assert/strict";

import { RUN_ID, SandboxManager, connOpts, createSandbox, destroy, poll } from "./lib.mjs";

const HUGE = { cpu: "1", memory: "60Ti" };

test("a create that cannot be admitted gets the server's typed answer within the SDK's 30 s, and leaves nothing behind", async () => {
  const a = await createSandbox({ resource: HUGE, metadata: { case: "admission-a" } });
  const mgr = SandboxManager.create({ connectionConfig: connOpts() });
  let b;
  const problems = [];
  try {
    const t0 = Date.now();
    let err;
    try {
      // SDK defaults: request timeout 30 s, readiness 30 s.
      b = await createSandbox({ resource: HUGE, metadata: { case: "admission-b" } });
    } catch (e) {
      err = e;
    }
    const took = Date.now() - t0;
    if (!err) {
      problems.push("the second 60Ti sandbox was admitted while the first one lives");
    } else if (err.name !== "SandboxApiException" || err.statusCode !== 503) {
      problems.push(
        `after ${took} ms the SDK got ${err.name} (status ${err.statusCode}, code ${err.error?.code}): ${err.message}; ` +
          "expected the server's 503 before the SDK's own 30 s request timeout",
      );
    }
    // Free the capacity: the refused create must not come to life behind the client's back.
    await destroy(a);
    const leaked = await poll(async () => {
      const l = await mgr.listSandboxInfos({ metadata: { run: RUN_ID, case: "admission-b" } });
      return l.items.length > 0 ? l.items : null;
    }, { timeoutMs: 3_000, intervalMs: 250 });
    if (leaked) {
      problems.push(
        `a sandbox nobody holds an id for exists after the create failed: ${leaked.map((x) => `${x.id} ${x.status.state}`).join(", ")}`,
      );
    }
    assert.deepEqual(problems, []);
  } finally {
    await destroy(a);
    await destroy(b);
    const left = await mgr.listSandboxInfos({ metadata: { run: RUN_ID, case: "admission-b" } });
    for (const x of left.items) await mgr.killSandbox(x.id).catch(() => {});
    await mgr.close();
  }
});
