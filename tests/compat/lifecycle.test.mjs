// Lifecycle API through the stock SDK: create (both endpoint modes), getInfo, renew, endpoints,
// metadata, list, connect by id, kill, manual cleanup, X-Request-ID on 404, pause/resume.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID, randomBytes } from "node:crypto";

import {
  API_KEY,
  DOMAIN,
  RUN_ID,
  Sandbox,
  SandboxManager,
  connOpts,
  createSandbox,
  destroy,
  poll,
  rejectsWithStatus,
  recorder,
  stdoutLines,
  withSandbox,
} from "./lib.mjs";

const TIMEOUT_S = 300;

async function checkCreated(sbx, { useServerProxy, metadata }) {
  assert.equal(typeof sbx.id, "string");
  assert.ok(sbx.id.length > 0, "sandbox id is non-empty");
  assert.equal(sbx.connectionConfig.useServerProxy, useServerProxy);

  // Sandbox.create already did POST /v1/sandboxes, GET endpoints/44772 and /18080 and pinged
  // execd until it answered; the sandbox must therefore be healthy right now.
  assert.equal(await sbx.isHealthy(), true, "isHealthy right after create");
  assert.equal(await sbx.health.ping(), true, "ping right after create");

  const t0 = Date.now();
  const info = await sbx.getInfo();
  assert.equal(info.id, sbx.id);
  assert.equal(info.status.state, "Running", `state (status=${JSON.stringify(info.status)})`);
  assert.ok(info.createdAt instanceof Date && !Number.isNaN(info.createdAt.getTime()), "createdAt parses");
  assert.ok(Math.abs(t0 - info.createdAt.getTime()) < 60_000, `createdAt ${info.createdAt.toISOString()} is recent`);
  assert.ok(info.expiresAt instanceof Date, `expiresAt present (got ${info.expiresAt})`);
  assert.ok(info.expiresAt > info.createdAt, "expiresAt > createdAt");
  const ttl = (info.expiresAt.getTime() - info.createdAt.getTime()) / 1000;
  assert.ok(Math.abs(ttl - TIMEOUT_S) <= 5, `expiresAt - createdAt = ${ttl}s, expected ~${TIMEOUT_S}s`);
  assert.deepEqual(info.metadata, metadata, "metadata round trip");
  assert.deepEqual(info.entrypoint, ["tail", "-f", "/dev/null"], "entrypoint is the SDK default");
  if (info.image != null) {
    assert.equal(info.image.uri, "host", "image.uri");
  }
  return info;
}

async function checkEndpoint(sbx, { useServerProxy }) {
  const ep = await sbx.getEndpoint(44772);
  assert.equal(typeof ep.endpoint, "string");
  assert.ok(!/^[a-z]+:\/\//i.test(ep.endpoint), `endpoint has no scheme: ${ep.endpoint}`);
  if (useServerProxy) {
    assert.equal(ep.endpoint, `${DOMAIN}/sandboxes/${sbx.id}/proxy/44772`, "server-proxy endpoint");
  }
  const url = await sbx.getEndpointUrl(44772);
  assert.equal(url, `http://${ep.endpoint}`);
  // The endpoint answers execd's ping with 200 (no API key needed on the proxy route).
  const res = await fetch(`${url}/ping`, { headers: { ...(ep.headers ?? {}) } });
  await res.arrayBuffer();
  assert.equal(res.status, 200, `GET ${url}/ping`);
  // The egress port the SDK resolves at create time must resolve too.
  const egress = await sbx.getEndpoint(18080);
  assert.equal(typeof egress.endpoint, "string");
  assert.ok(egress.endpoint.length > 0);
  return ep;
}

for (const useServerProxy of [true, false]) {
  test(`create, getInfo, endpoints, run (useServerProxy=${useServerProxy})`, async () => {
    const metadata = { suite: "compat", run: RUN_ID, case: `create-proxy-${useServerProxy}` };
    const t0 = Date.now();
    const sbx = await createSandbox({ useServerProxy, metadata: { case: metadata.case }, timeoutSeconds: TIMEOUT_S });
    try {
      const createMs = Date.now() - t0;
      assert.ok(createMs < 30_000, `Sandbox.create took ${createMs} ms`);
      await checkCreated(sbx, { useServerProxy, metadata });
      await checkEndpoint(sbx, { useServerProxy });
      const ex = await sbx.commands.run(`echo proxy-${useServerProxy}`);
      assert.deepEqual(stdoutLines(ex), [`proxy-${useServerProxy}`]);
      assert.equal(ex.exitCode, 0);
    } finally {
      await destroy(sbx);
    }
  });
}

test("Sandbox.create with only an image: config from the environment, SDK defaults", async () => {
  // No connectionConfig at all: the SDK reads OPEN_SANDBOX_DOMAIN / OPEN_SANDBOX_API_KEY, and uses
  // its defaults (timeout 600 s, resources cpu 1 / memory 2Gi, entrypoint tail -f /dev/null).
  const sbx = await Sandbox.create({ image: "host" });
  try {
    assert.equal(sbx.connectionConfig.domain, DOMAIN);
    const info = await sbx.getInfo();
    assert.equal(info.status.state, "Running");
    const ttl = (info.expiresAt - info.createdAt) / 1000;
    assert.ok(Math.abs(ttl - 600) <= 5, `default timeout 600 s (got ${ttl})`);
    assert.deepEqual(info.metadata ?? {}, {}, "no metadata");
    assert.deepEqual(info.entrypoint, ["tail", "-f", "/dev/null"]);
    const ex = await sbx.commands.run("echo env-config-ok");
    assert.deepEqual(stdoutLines(ex), ["env-config-ok"]);
  } finally {
    await destroy(sbx);
  }
});

test("10 sandboxes created in parallel each run their own command", async () => {
  const N = 10;
  const settled = await Promise.allSettled(
    Array.from({ length: N }, (_, i) => createSandbox({ metadata: { case: "parallel", idx: String(i) } })),
  );
  const boxes = settled.filter((r) => r.status === "fulfilled").map((r) => r.value);
  try {
    const failures = settled.filter((r) => r.status === "rejected").map((r) => String(r.reason?.message ?? r.reason));
    assert.deepEqual(failures, [], "every parallel create succeeds");
    assert.equal(new Set(boxes.map((b) => b.id)).size, N, "distinct ids");
    const outs = await Promise.all(boxes.map((b, i) => b.commands.run(`echo box-${i}-$(hostname | wc -c)`)));
    outs.forEach((ex, i) => {
      assert.equal(ex.exitCode, 0);
      assert.match(stdoutLines(ex)[0], new RegExp(`^box-${i}-\\d+$`));
    });
    const infos = await Promise.all(boxes.map((b) => b.getInfo()));
    infos.forEach((info, i) => assert.equal(info.metadata.idx, String(i)));
  } finally {
    await Promise.all(boxes.map((b) => destroy(b)));
  }
});

test("renew moves expiresAt later and GET agrees", async () => {
  await withSandbox({ metadata: { case: "renew" }, timeoutSeconds: TIMEOUT_S }, async (sbx) => {
    const before = await sbx.getInfo();
    const t0 = Date.now();
    const renewed = await sbx.renew(1200);
    assert.ok(renewed.expiresAt instanceof Date, "renew returns expiresAt");
    assert.ok(renewed.expiresAt > before.expiresAt, "new expiry is later than the old one");
    const remaining = (renewed.expiresAt.getTime() - t0) / 1000;
    assert.ok(remaining > 1180 && remaining < 1220, `remaining after renew(1200) = ${remaining}s`);
    const after = await sbx.getInfo();
    assert.ok(
      Math.abs(after.expiresAt.getTime() - renewed.expiresAt.getTime()) < 1000,
      `GET expiresAt ${after.expiresAt.toISOString()} matches renew ${renewed.expiresAt.toISOString()}`,
    );
    assert.equal(after.status.state, "Running");
    assert.equal(after.createdAt.getTime(), before.createdAt.getTime(), "createdAt unchanged by renew");
  });
});

test("patchMetadata merges, deletes with null, and GET agrees", async () => {
  await withSandbox({ metadata: { case: "metadata", drop: "me" } }, async (sbx) => {
    const patched = await sbx.patchMetadata({ added: "yes", drop: null, case: "metadata-2" });
    const expected = { suite: "compat", run: RUN_ID, case: "metadata-2", added: "yes" };
    assert.deepEqual(patched.metadata, expected, "PATCH response metadata");
    assert.equal(patched.id, sbx.id);
    assert.equal(patched.status.state, "Running");
    const info = await sbx.getInfo();
    assert.deepEqual(info.metadata, expected, "GET metadata after PATCH");
    const unchanged = await sbx.patchMetadata({});
    assert.deepEqual(unchanged.metadata, expected, "empty patch changes nothing");
  });
});

test("SandboxManager lists by metadata and state", async () => {
  const tag = randomBytes(4).toString("hex");
  const mgr = SandboxManager.create({ connectionConfig: connOpts() });
  const a = await createSandbox({ metadata: { case: "list", tag } });
  const b = await createSandbox({ metadata: { case: "list", tag } });
  try {
    const res = await mgr.listSandboxInfos({ metadata: { tag }, states: ["Running"] });
    const ids = res.items.map((x) => x.id).sort();
    assert.deepEqual(ids, [a.id, b.id].sort(), "list by metadata tag returns exactly our two sandboxes");
    for (const item of res.items) {
      assert.equal(item.status.state, "Running");
      assert.equal(item.metadata.tag, tag);
      assert.ok(item.createdAt instanceof Date);
    }
    assert.equal(res.pagination.totalItems, 2);
    assert.equal(res.pagination.page, 1);
    assert.equal(res.pagination.hasNextPage, false);
    const paged = await mgr.listSandboxInfos({ metadata: { tag }, page: 1, pageSize: 1 });
    assert.equal(paged.items.length, 1);
    assert.equal(paged.pagination.totalPages, 2);
    assert.equal(paged.pagination.hasNextPage, true);
    const both = await mgr.listSandboxInfos({ metadata: { tag, case: "list" } });
    assert.equal(both.items.length, 2, "two metadata pairs are ANDed");
    const mismatch = await mgr.listSandboxInfos({ metadata: { tag, case: "other" } });
    assert.equal(mismatch.items.length, 0, "a non-matching pair excludes them");
    const none = await mgr.listSandboxInfos({ metadata: { tag }, states: ["Paused"] });
    assert.equal(none.items.length, 0);
    const one = await mgr.getSandboxInfo(a.id);
    assert.equal(one.id, a.id);
  } finally {
    await destroy(a);
    await destroy(b);
    await mgr.close();
  }
});

test("renew into the past is rejected (400) and leaves the expiry alone", async () => {
  await withSandbox({ metadata: { case: "renew-past" } }, async (sbx) => {
    const before = await sbx.getInfo();
    await rejectsWithStatus(sbx.renew(-120), 400, "renew to a time in the past");
    const after = await sbx.getInfo();
    assert.equal(after.expiresAt.getTime(), before.expiresAt.getTime(), "expiry unchanged");
  });
});

test("create with an unknown image fails with a 4xx and leaves no sandbox", async () => {
  const mgr = SandboxManager.create({ connectionConfig: connOpts() });
  try {
    let err;
    try {
      const sbx = await createSandbox({ image: `compat-no-such-image-${RUN_ID}`, metadata: { case: "bad-image" } });
      await destroy(sbx);
    } catch (e) {
      err = e;
    }
    assert.ok(err, "create with an unknown image must fail");
    assert.equal(err.name, "SandboxApiException", `${err.name}: ${err.message}`);
    assert.ok(err.statusCode >= 400 && err.statusCode < 500, `status ${err.statusCode} is a client error`);
    assert.equal(typeof err.error.code, "string");
    assert.ok(err.error.code.length > 0);
    assert.ok(err.requestId, "error carries a request id");
    const listed = await mgr.listSandboxInfos({ metadata: { run: RUN_ID, case: "bad-image" } });
    assert.equal(listed.items.length, 0, "no sandbox record left behind");
  } finally {
    await mgr.close();
  }
});

test("create options corral does not support are refused with a 4xx, never silently ignored", async () => {
  // A host volume outside corrald's --allow-host-path (here /tmp) is refused: a stock client asking
  // for it must get an error, not a sandbox without it. (networkPolicy: egress.test.mjs.)
  const mgr = SandboxManager.create({ connectionConfig: connOpts() });
  try {
    const cases = {
      volumes: { volumes: [{ name: "v", host: { path: "/tmp" }, mountPath: "/mnt/v", readOnly: true }] },
    };
    for (const [name, extra] of Object.entries(cases)) {
      let err;
      try {
        const sbx = await createSandbox({ metadata: { case: `unsupported-${name}` }, ...extra });
        await destroy(sbx);
      } catch (e) {
        err = e;
      }
      assert.ok(err, `${name}: create must fail rather than ignore the option`);
      assert.ok(err.statusCode >= 400 && err.statusCode < 500, `${name}: status ${err.statusCode}`);
      assert.match(String(err.message), new RegExp(name), `${name}: the message names the option`);
      const listed = await mgr.listSandboxInfos({ metadata: { run: RUN_ID, case: `unsupported-${name}` } });
      assert.equal(listed.items.length, 0, `${name}: nothing left behind`);
    }
  } finally {
    await mgr.close();
  }
});

test("API key: wrong key -> 401 INVALID_API_KEY, missing key -> 401 MISSING_API_KEY", { skip: !API_KEY && "corrald runs without an API key" }, async () => {
  const rid = `compat-auth-${randomBytes(4).toString("hex")}`;
  const wrong = SandboxManager.create({ connectionConfig: connOpts({ apiKey: "definitely-wrong", headers: { "X-Request-ID": rid } }) });
  try {
    const err = await rejectsWithStatus(wrong.listSandboxInfos({}), 401, "list with a wrong key");
    assert.equal(err.error.code, "INVALID_API_KEY");
    assert.equal(err.requestId, rid, "401 carries the X-Request-ID");
  } finally {
    await wrong.close();
  }
  // The SDK falls back to OPEN_SANDBOX_API_KEY when no key is given: hide it while constructing.
  const saved = process.env.OPEN_SANDBOX_API_KEY;
  delete process.env.OPEN_SANDBOX_API_KEY;
  let none;
  try {
    none = SandboxManager.create({ connectionConfig: { domain: DOMAIN, protocol: "http" } });
  } finally {
    process.env.OPEN_SANDBOX_API_KEY = saved;
  }
  try {
    const err = await rejectsWithStatus(none.listSandboxInfos({}), 401, "list without a key");
    assert.equal(err.error.code, "MISSING_API_KEY");
  } finally {
    await none.close();
  }
});

test("connect to an existing sandbox by id and run echo connect-ok", async () => {
  await withSandbox({ metadata: { case: "connect" } }, async (sbx) => {
    for (const useServerProxy of [true, false]) {
      const other = await Sandbox.connect({ sandboxId: sbx.id, connectionConfig: connOpts({ useServerProxy }) });
      try {
        assert.equal(other.id, sbx.id);
        const rec = recorder();
        const ex = await other.commands.run("echo connect-ok", undefined, rec.handlers);
        assert.deepEqual(stdoutLines(ex), ["connect-ok"], "exactly one stdout line");
        assert.equal(rec.stdout.length, 1);
        assert.equal(ex.exitCode, 0);
        const info = await other.getInfo();
        assert.equal(info.id, sbx.id);
        assert.equal(info.status.state, "Running");
      } finally {
        await other.close();
      }
    }
  });
});

test("kill: the sandbox is gone (getInfo 404, endpoints 404)", async () => {
  const sbx = await createSandbox({ metadata: { case: "kill" } });
  try {
    const id = sbx.id;
    await sbx.kill();
    const mgr = SandboxManager.create({ connectionConfig: connOpts() });
    try {
      const err = await rejectsWithStatus(sbx.getInfo(), 404, "getInfo after kill");
      assert.ok(err.error.code, "error carries a code");
      await rejectsWithStatus(mgr.getSandboxInfo(id), 404, "manager getSandboxInfo after kill");
      await rejectsWithStatus(sbx.getEndpoint(44772), 404, "getEndpoint after kill");
      await rejectsWithStatus(mgr.killSandbox(id), 404, "second kill");
      const listed = await mgr.listSandboxInfos({ metadata: { run: RUN_ID, case: "kill" } });
      assert.ok(!listed.items.some((x) => x.id === id), "killed sandbox is not listed");
    } finally {
      await mgr.close();
    }
  } finally {
    await destroy(sbx);
  }
});

test("timeoutSeconds null: manual cleanup, no expiresAt", async () => {
  await withSandbox({ metadata: { case: "manual" }, timeoutSeconds: null }, async (sbx) => {
    const info = await sbx.getInfo();
    assert.equal(info.status.state, "Running");
    assert.equal(info.expiresAt, null, "expiresAt absent for a sandbox without timeout");
    await rejectsWithStatus(sbx.renew(600), 409, "renew of a manual-cleanup sandbox");
  });
});

test("an entrypoint that exits ends the sandbox: Terminated (0) / Failed (3), execd calls fail fast", async () => {
  for (const [code, state] of [[0, "Terminated"], [3, "Failed"]]) {
    // It exits when told, once seen Running ('sleep 1' could end it before the SDK's create and
    // readiness check were done on a loaded host).
    const sbx = await createSandbox({
      entrypoint: ["sh", "-c", `while [ ! -e /tmp/end ]; do sleep 0.05; done; exit ${code}`],
      metadata: { case: `ended-${code}` },
    });
    try {
      assert.equal((await sbx.getInfo()).status.state, "Running");
      // (its own result may be "sandbox ended": the entrypoint can exit before it is reported)
      await sbx.commands.run("touch /tmp/end").catch(() => {});
      const ended = await poll(async () => {
        const info = await sbx.getInfo();
        return info.status.state !== "Running" ? info : null;
      }, { timeoutMs: 10_000, intervalMs: 100 });
      assert.ok(ended, "state leaves Running after the entrypoint exits");
      assert.equal(ended.status.state, state, `exit ${code}: ${JSON.stringify(ended.status)}`);
      const t0 = Date.now();
      let err;
      try {
        await sbx.commands.run("echo too-late");
      } catch (e) {
        err = e;
      }
      assert.ok(err, "running a command in an ended sandbox fails");
      assert.ok(err.statusCode >= 400 && err.statusCode < 600, `status ${err.statusCode}`);
      assert.ok(Date.now() - t0 < 5_000, "and fails fast");
      assert.equal(await sbx.isHealthy(), false);
    } finally {
      await destroy(sbx);
    }
  }
});

test("X-Request-ID round trip on a 404", async () => {
  const missing = randomUUID();
  // 1. A request id the client sends comes back on the 404 and lands in the SDK's exception.
  const rid = `compat-${randomBytes(8).toString("hex")}`;
  const err1 = await rejectsWithStatus(
    Sandbox.connect({ sandboxId: missing, connectionConfig: connOpts({ headers: { "X-Request-ID": rid } }) }),
    404,
    "connect to a missing id",
  );
  assert.equal(err1.requestId, rid, "connect: exception carries the X-Request-ID we sent");

  const mgr = SandboxManager.create({ connectionConfig: connOpts({ headers: { "X-Request-ID": rid } }) });
  try {
    const err2 = await rejectsWithStatus(mgr.getSandboxInfo(missing), 404, "getInfo of a missing id");
    assert.equal(err2.requestId, rid, "getInfo: exception carries the X-Request-ID we sent");
    assert.equal(typeof err2.error.code, "string");
    assert.ok(err2.error.code.length > 0, "404 body has a code");
  } finally {
    await mgr.close();
  }

  // 2. Without one, the server generates an id.
  const mgr2 = SandboxManager.create({ connectionConfig: connOpts() });
  try {
    const err3 = await rejectsWithStatus(mgr2.getSandboxInfo(missing), 404, "getInfo of a missing id (no id sent)");
    assert.equal(typeof err3.requestId, "string", "server generated a request id");
    assert.ok(err3.requestId.length >= 8, `generated request id looks like an id: ${err3.requestId}`);
  } finally {
    await mgr2.close();
  }
});

test("pause makes execd unreachable, resume brings it back", async () => {
  // A short request timeout so the ping against a frozen sandbox fails fast if it hangs.
  const sbx = await createSandbox({ metadata: { case: "pause" }, connection: { requestTimeoutSeconds: 5 } });
  try {
    await sbx.commands.run("echo before-pause > /tmp/pause-marker");
    await sbx.pause();
    const paused = await poll(async () => {
      const info = await sbx.getInfo();
      return info.status.state === "Paused" ? info : null;
    }, { timeoutMs: 15_000, intervalMs: 100 });
    assert.ok(paused, "state becomes Paused");
    assert.equal(paused.status.state, "Paused");

    const t0 = Date.now();
    assert.equal(await sbx.isHealthy(), false, "ping is unhealthy while paused");
    assert.ok(Date.now() - t0 < 15_000, "unhealthy ping answered or timed out within 15 s");
    // A command on a paused sandbox is refused with a typed 409, not left to time out.
    const err = await rejectsWithStatus(sbx.commands.run("echo while-paused"), 409, "a command while paused");
    assert.match(String(err.error?.code ?? err.message), /PAUSED/, "the error names SANDBOX::PAUSED");

    const mgr = SandboxManager.create({ connectionConfig: connOpts() });
    try {
      await rejectsWithStatus(mgr.pauseSandbox(sbx.id), 409, "pausing a paused sandbox");
    } finally {
      await mgr.close();
    }

    const resumed = await sbx.resume({ readyTimeoutSeconds: 30 });
    try {
      assert.equal(resumed.id, sbx.id);
      const info = await resumed.getInfo();
      assert.equal(info.status.state, "Running");
      const ex = await resumed.commands.run("echo resume-ok; cat /tmp/pause-marker");
      assert.deepEqual(stdoutLines(ex), ["resume-ok", "before-pause"], "sandbox state survives pause");
      assert.equal(ex.exitCode, 0);
      assert.equal(await resumed.isHealthy(), true);
      const mgr2 = SandboxManager.create({ connectionConfig: connOpts() });
      try {
        await rejectsWithStatus(mgr2.resumeSandbox(sbx.id), 409, "resuming a running sandbox");
      } finally {
        await mgr2.close();
      }
    } finally {
      // resume() hands back a Sandbox sharing this one's transport: kill through it, then close.
      await destroy(resumed);
    }
  } finally {
    await destroy(sbx);
  }
});
