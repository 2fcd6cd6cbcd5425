// execd metrics through the stock SDK: the numbers must be the sandbox's own (its cgroup), sane.
import { test } from "node:test";
import assert from "node:assert/strict";
import os from "node:os";

import { withSandbox } from "./lib.mjs";

test("getMetrics: sane numbers from the sandbox's own cgroup", async () => {
  await withSandbox({ metadata: { case: "metrics" }, resource: { cpu: "1", memory: "512Mi" } }, async (sbx) => {
    const t0 = Date.now();
    const m = await sbx.getMetrics();
    const took = Date.now() - t0;
    assert.ok(took < 10_000, `getMetrics took ${took} ms`);
    for (const k of ["cpuCount", "cpuUsedPercentage", "memoryTotalMiB", "memoryUsedMiB", "timestamp"]) {
      assert.equal(typeof m[k], "number", `${k} is a number`);
      assert.ok(Number.isFinite(m[k]), `${k} is finite (${m[k]})`);
    }
    assert.ok(m.cpuCount > 0, `cpu_count ${m.cpuCount} > 0`);
    assert.ok(m.cpuCount <= os.availableParallelism(), `cpu_count ${m.cpuCount} <= host cores`);
    assert.ok(m.cpuUsedPercentage >= 0 && m.cpuUsedPercentage <= 100, `0 <= cpu% (${m.cpuUsedPercentage}) <= 100`);
    assert.ok(m.memoryTotalMiB > 0, `mem_total_mib ${m.memoryTotalMiB} > 0`);
    assert.ok(m.memoryUsedMiB >= 0, `mem_used_mib ${m.memoryUsedMiB} >= 0`);
    assert.ok(m.memoryUsedMiB <= m.memoryTotalMiB, `used ${m.memoryUsedMiB} <= total ${m.memoryTotalMiB}`);
    // The sandbox's limit (512Mi), not the host's memory.
    assert.ok(Math.abs(m.memoryTotalMiB - 512) <= 1, `mem_total_mib ${m.memoryTotalMiB} is the 512Mi limit`);
    assert.ok(Math.abs(Date.now() - m.timestamp) < 120_000, `timestamp ${m.timestamp} within 2 minutes`);
  });
});

test("memory limit: a command that overruns it is OOM-killed (exit 137), the sandbox lives on", async () => {
  await withSandbox({ metadata: { case: "oom" }, resource: { cpu: "1", memory: "128Mi" } }, async (sbx) => {
    const m = await sbx.getMetrics();
    assert.ok(Math.abs(m.memoryTotalMiB - 128) <= 1, `mem_total_mib ${m.memoryTotalMiB} is the 128Mi limit`);
    const ex = await sbx.commands.run("python3 -c 'a = bytearray(512 * 1024 * 1024); print(len(a))'");
    assert.ok(ex.error, "the overrun ends with an error event");
    assert.equal(ex.error.name, "CommandExecError");
    assert.equal(ex.exitCode, 137, `exit code of the OOM-killed command: ${ex.exitCode}`);
    assert.equal(ex.complete, undefined);
    const ok = await sbx.commands.run("echo still-alive");
    assert.equal(ok.exitCode, 0, "the sandbox still runs commands");
    assert.equal(ok.logs.stdout[0]?.text, "still-alive");
    assert.equal((await sbx.getInfo()).status.state, "Running");
  });
});
