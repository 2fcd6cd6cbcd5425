// Shared helpers for the conformance suite. Everything here goes through the stock
// @alibaba-group/opensandbox SDK; the only raw HTTP is used to double-check what the SDK reports
// (an endpoint it returned answers, a header the server sent).
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";

import {
  ConnectionConfig,
  Sandbox,
  SandboxManager,
  SandboxApiException,
} from "@alibaba-group/opensandbox";

export { Sandbox, SandboxManager, SandboxApiException, ConnectionConfig };

// run.sh exports OPEN_SANDBOX_DOMAIN=127.0.0.1:PORT (the SDK's own env var) and, when corrald
// was started with a key, OPEN_SANDBOX_API_KEY.
export const DOMAIN = process.env.OPEN_SANDBOX_DOMAIN;
if (!DOMAIN) {
  throw new Error("OPEN_SANDBOX_DOMAIN is not set: run the suite through tests/compat/run.sh");
}
export const API_KEY = process.env.OPEN_SANDBOX_API_KEY || undefined;
export const RUN_ID = process.env.CORRAL_COMPAT_RUN_ID || randomBytes(4).toString("hex");
const DEBUG = process.env.CORRAL_COMPAT_DEBUG === "1";

/** SDK connection options (SDK defaults otherwise, e.g. the 30 s request timeout); every test builds its config through this. */
export function connOpts(extra = {}) {
  return {
    domain: DOMAIN,
    protocol: "http",
    apiKey: API_KEY,
    debug: DEBUG,
    ...extra,
  };
}

export function config(extra = {}) {
  return new ConnectionConfig(connOpts(extra));
}

/**
 * Sandbox.create with the suite's defaults: image "host", the SDK's default entrypoint
 * (tail -f /dev/null), a 512Mi/1-cpu limit, and metadata tagging the run.
 */
export async function createSandbox(opts = {}) {
  const { useServerProxy = true, connection = {}, metadata = {}, ...rest } = opts;
  return await Sandbox.create({
    connectionConfig: connOpts({ useServerProxy, ...connection }),
    image: "host",
    timeoutSeconds: 300,
    resource: { cpu: "1", memory: "512Mi" },
    readyTimeoutSeconds: 30,
    metadata: { suite: "compat", run: RUN_ID, ...metadata },
    ...rest,
  });
}

/** Kill and close, ignoring errors (cleanup in finally blocks). */
export async function destroy(sbx) {
  if (!sbx) return;
  try {
    await sbx.kill();
  } catch {
    // already gone, or the test already killed it
  }
  try {
    await sbx.close();
  } catch {
    // ignore
  }
}

/** Create a sandbox, hand it to fn, always kill it afterwards. */
export async function withSandbox(opts, fn) {
  if (typeof opts === "function") {
    fn = opts;
    opts = {};
  }
  const sbx = await createSandbox(opts);
  try {
    return await fn(sbx);
  } finally {
    await destroy(sbx);
  }
}

/**
 * Handlers that record every callback the SDK makes, so tests can count init/complete/error
 * events and compare them with what the SDK accumulated.
 */
export function recorder() {
  const rec = { init: [], stdout: [], stderr: [], result: [], error: [], complete: [], events: [] };
  rec.handlers = {
    onEvent: (ev) => {
      rec.events.push(ev);
    },
    onInit: (x) => {
      rec.init.push(x);
    },
    onStdout: (x) => {
      rec.stdout.push(x);
    },
    onStderr: (x) => {
      rec.stderr.push(x);
    },
    onResult: (x) => {
      rec.result.push(x);
    },
    onError: (x) => {
      rec.error.push(x);
    },
    onExecutionComplete: (x) => {
      rec.complete.push(x);
    },
  };
  return rec;
}

export function stdoutLines(execution) {
  return execution.logs.stdout.map((m) => m.text);
}

export function stderrText(execution) {
  return execution.logs.stderr.map((m) => m.text).join("\n");
}

/** Run a shell command that must succeed; returns its stdout lines. */
export async function sh(sbx, command, opts) {
  const ex = await sbx.commands.run(command, opts);
  assert.equal(
    ex.exitCode,
    0,
    `command ${JSON.stringify(command)} failed: exitCode=${ex.exitCode} error=${JSON.stringify(ex.error)} stderr=${stderrText(ex)}`,
  );
  return stdoutLines(ex);
}

/** Assert that promise rejects with a SandboxApiException carrying the given HTTP status. */
export async function rejectsWithStatus(promise, status, what) {
  let err;
  try {
    await promise;
  } catch (e) {
    err = e;
  }
  assert.ok(err, `${what}: expected a rejection with HTTP ${status}, but the call succeeded`);
  assert.ok(
    err instanceof SandboxApiException,
    `${what}: expected SandboxApiException (HTTP ${status}), got ${err?.name}: ${err?.message}`,
  );
  assert.equal(err.statusCode, status, `${what}: status (message: ${err.message})`);
  return err;
}

export function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

/** Poll fn until it returns a truthy value or the deadline passes; returns the last value. */
export async function poll(fn, { timeoutMs = 10_000, intervalMs = 50 } = {}) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (true) {
    last = await fn();
    if (last) return last;
    if (Date.now() > deadline) return last;
    await sleep(intervalMs);
  }
}

export function sha256(buf) {
  return createHash("sha256").update(buf).digest("hex");
}

export function uniq(prefix = "compat") {
  return `${prefix}-${RUN_ID}-${randomBytes(3).toString("hex")}`;
}

export function assertRecentMs(ts, what, slackMs = 120_000) {
  assert.equal(typeof ts, "number", `${what}: timestamp is a number`);
  assert.ok(Math.abs(Date.now() - ts) < slackMs, `${what}: timestamp ${ts} is within ${slackMs} ms of now (${Date.now()})`);
}
