// Volumes through the stock SDK, the five cases of OpenSandbox's own e2e suite: host bind
// read-write and read-only, named volume (pvc) read-write and read-only, and subPath. run.sh
// starts corrald with --allow-host-path CORRAL_COMPAT_HOST_VOLUMES (a directory of this run).
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

import { sh, uniq, withSandbox } from "./lib.mjs";

const HOST_ROOT = process.env.CORRAL_COMPAT_HOST_VOLUMES;
const skip = !HOST_ROOT && "run.sh did not set CORRAL_COMPAT_HOST_VOLUMES";

function hostDir() {
  const d = join(HOST_ROOT, uniq("host"));
  mkdirSync(join(d, "sub"), { recursive: true });
  writeFileSync(join(d, "marker.txt"), "hello-from-host\n");
  writeFileSync(join(d, "sub", "only-sub.txt"), "in-sub\n");
  return d;
}

test("host volume, read-write: the host's file is read, the sandbox's write lands on the host", { skip }, async () => {
  const dir = hostDir();
  const volumes = [{ name: "data", host: { path: dir }, mountPath: "/mnt/data", readOnly: false }];
  await withSandbox({ metadata: { case: "vol-host-rw" }, volumes }, async (sbx) => {
    assert.deepEqual(await sh(sbx, "cat /mnt/data/marker.txt"), ["hello-from-host"]);
    await sh(sbx, "echo written-by-sandbox > /mnt/data/out.txt");
    assert.equal(readFileSync(join(dir, "out.txt"), "utf8"), "written-by-sandbox\n");
    await sbx.files.writeFiles([{ path: "/mnt/data/via-files.txt", data: "files-api" }]);
    assert.equal(readFileSync(join(dir, "via-files.txt"), "utf8"), "files-api");
  });
});

test("host volume, read-only: reads work, writes fail", { skip }, async () => {
  const dir = hostDir();
  const volumes = [{ name: "ro", host: { path: dir }, mountPath: "/mnt/ro", readOnly: true }];
  await withSandbox({ metadata: { case: "vol-host-ro" }, volumes }, async (sbx) => {
    assert.deepEqual(await sh(sbx, "cat /mnt/ro/marker.txt"), ["hello-from-host"]);
    const ex = await sbx.commands.run("echo x > /mnt/ro/nope.txt");
    assert.notEqual(ex.exitCode, 0, "a write to a read-only volume must fail");
    assert.match(ex.logs.stderr.map((m) => m.text).join("\n"), /Read-only file system/);
  });
});

test("named volume (pvc), read-write in one sandbox, read-only in another", { skip }, async () => {
  const claim = uniq("pvc").toLowerCase();
  const rw = [{ name: "ws", pvc: { claimName: claim, createIfNotExists: true }, mountPath: "/workspace" }];
  const ro = [{ name: "ws", pvc: { claimName: claim }, mountPath: "/workspace", readOnly: true }];
  await withSandbox({ metadata: { case: "vol-pvc-rw" }, volumes: rw }, async (a) => {
    await sh(a, "echo from-a > /workspace/shared.txt");
    await withSandbox({ metadata: { case: "vol-pvc-ro" }, volumes: ro }, async (b) => {
      assert.deepEqual(await sh(b, "cat /workspace/shared.txt"), ["from-a"]);
      const ex = await b.commands.run("echo x >> /workspace/shared.txt");
      assert.notEqual(ex.exitCode, 0, "a write to a read-only volume must fail");
    });
  });
});

test("subPath: only the subdirectory is mounted", { skip }, async () => {
  const dir = hostDir();
  const volumes = [{ name: "s", host: { path: dir }, mountPath: "/mnt/sub", subPath: "sub" }];
  await withSandbox({ metadata: { case: "vol-subpath" }, volumes }, async (sbx) => {
    assert.deepEqual(await sh(sbx, "ls -A /mnt/sub"), ["only-sub.txt"]);
    assert.deepEqual(await sh(sbx, "cat /mnt/sub/only-sub.txt"), ["in-sub"]);
  });
});
