// A SWE-bench-shaped task image from a registry, through the stock SDK: run.sh starts Debian's
// docker-registry on loopback (CORRAL_COMPAT_REGISTRY) and corrald with --insecure-registry for
// it; push_task_image.py builds the image (a /testbed Python package, /tests/test.sh) and pushes
// it with skopeo. The SDK creates the sandbox by reference, runs the test script, reads the result.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { createSandbox, destroy, stdoutLines, stderrText } from "./lib.mjs";

const REGISTRY = process.env.CORRAL_COMPAT_REGISTRY;
const HERE = dirname(fileURLToPath(import.meta.url));

test("a SWE-bench-shaped image from a registry runs its test script", { skip: !REGISTRY && "no docker-registry (scripts/bootstrap.sh installs it)" }, async () => {
  const ref = execFileSync("python3", [join(HERE, "push_task_image.py"), REGISTRY], { encoding: "utf8" }).trim();
  let sbx;
  try {
    sbx = await createSandbox({ image: ref, readyTimeoutSeconds: 120, metadata: { case: "swebench-image" } });
    const where = await sbx.commands.run("pwd; echo $TASK");
    assert.equal(where.exitCode, 0, stderrText(where));
    assert.deepEqual(stdoutLines(where), ["/testbed", "calc-1"], "the image's WorkingDir and Env");
    const res = await sbx.commands.run("/tests/test.sh");
    const out = stdoutLines(res).join("\n") + "\n" + stderrText(res);
    assert.equal(res.exitCode, 0, out);
    assert.match(out, /\bOK\b/, out);
  } finally {
    await destroy(sbx);
  }
});
