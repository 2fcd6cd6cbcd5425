// execd files API through the stock SDK: every sandbox.files call, modes and owners, ranges,
// search, permissions, mtime, replace counts, move, delete, and a 50 MiB streamed round trip.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes, createHash } from "node:crypto";

import { rejectsWithStatus, sh, sha256, sleep, uniq, withSandbox } from "./lib.mjs";

function base() {
  return `/tmp/${uniq("files")}`;
}

test("createDirectories reports modes 755/644 back; listDirectory", async () => {
  await withSandbox({ metadata: { case: "files-mkdir" } }, async (sbx) => {
    const root = base();
    const d755 = `${root}/d755/nested/deeper`;
    const d644 = `${root}/d644`;
    await sbx.files.createDirectories([
      { path: d755, mode: 755 },
      { path: d644, mode: 644 },
    ]);
    const info = await sbx.files.getFileInfo([d755, d644]);
    assert.deepEqual(Object.keys(info).sort(), [d644, d755].sort(), "info keyed by the requested paths");
    assert.equal(info[d755].type, "directory");
    assert.equal(info[d755].mode, 755, "mode 755 reported as decimal 755");
    assert.equal(info[d644].type, "directory");
    assert.equal(info[d644].mode, 644, "mode 644 reported as decimal 644");
    assert.equal(info[d755].path, d755);
    assert.equal(info[d755].owner, "root");
    assert.equal(info[d755].group, "root");
    assert.ok(info[d755].modifiedAt instanceof Date);
    // mkdir -p created the parents.
    const stat = await sh(sbx, `stat -c '%a %F' ${d755} ${d644}; test -d ${root}/d755/nested && echo parents-ok`);
    assert.deepEqual(stat, ["755 directory", "644 directory", "parents-ok"]);

    await sbx.files.writeFiles([{ path: `${root}/d755/f.txt`, data: "x" }]);
    const list1 = await sbx.files.listDirectory({ path: root });
    assert.deepEqual(list1.map((x) => x.path), [`${root}/d644`, `${root}/d755`], "depth 1: immediate children, sorted");
    assert.ok(list1.every((x) => x.type === "directory"));
    const list2 = await sbx.files.listDirectory({ path: root, depth: 2 });
    assert.deepEqual(
      list2.map((x) => x.path).sort(),
      [`${root}/d644`, `${root}/d755`, `${root}/d755/f.txt`, `${root}/d755/nested`].sort(),
      "depth 2",
    );
  });
});

test("writeFiles 3 files (one nobody:nogroup); readFile text, range, bytes, stream; getFileInfo", async () => {
  await withSandbox({ metadata: { case: "files-write" } }, async (sbx) => {
    const root = base();
    const f1 = `${root}/a/one.txt`; // parent created by the upload
    const f2 = `${root}/a/two.bin`;
    const f3 = `${root}/b/three.txt`;
    const text1 = "hello\nworld\nüñíçødé ✓\n";
    const bin2 = new Uint8Array([0, 1, 2, 255, 254, 10, 13, 0, 128]);
    const text3 = "owned by nobody\n";
    await sbx.files.writeFiles([
      { path: f1, data: text1, mode: 644 },
      { path: f2, data: bin2, mode: 600 },
      { path: f3, data: text3, mode: 640, owner: "nobody", group: "nogroup" },
    ]);

    assert.equal(await sbx.files.readFile(f1), text1, "readFile as text");
    assert.equal(await sbx.files.readFile(f1, { range: "bytes=0-4" }), "hello", "readFile with a range");
    assert.equal(await sbx.files.readFile(f1, { range: "bytes=6-10" }), "world");
    assert.equal(await sbx.files.readFile(f1, { range: "bytes=6-" }), text1.slice(6), "open-ended range");
    assert.deepEqual(await sbx.files.readBytes(f2), bin2, "readBytes returns the exact bytes");
    assert.deepEqual(await sbx.files.readBytes(f2, { range: "bytes=3-5" }), bin2.slice(3, 6));
    const chunks = [];
    for await (const c of sbx.files.readBytesStream(f1)) chunks.push(Buffer.from(c));
    assert.equal(Buffer.concat(chunks).toString("utf8"), text1, "readBytesStream");

    const info = await sbx.files.getFileInfo([f1, f2, f3]);
    assert.equal(info[f1].type, "file");
    assert.equal(info[f1].size, Buffer.byteLength(text1), "size in bytes (UTF-8)");
    assert.equal(info[f1].mode, 644);
    assert.equal(info[f1].owner, "root");
    assert.equal(info[f1].group, "root");
    assert.equal(info[f2].size, bin2.length);
    assert.equal(info[f2].mode, 600);
    assert.equal(info[f3].size, Buffer.byteLength(text3));
    assert.equal(info[f3].mode, 640);
    assert.equal(info[f3].owner, "nobody");
    assert.equal(info[f3].group, "nogroup");
    for (const f of [f1, f2, f3]) {
      assert.equal(info[f].path, f);
      assert.ok(info[f].modifiedAt instanceof Date && Math.abs(Date.now() - info[f].modifiedAt) < 120_000, "modifiedAt recent");
      assert.ok(info[f].createdAt instanceof Date, "createdAt parses");
    }
    // The sandbox sees the same bytes, modes and owners.
    const seen = await sh(sbx, `stat -c '%s %a %U:%G' ${f1} ${f2} ${f3}; cat ${f3}`);
    assert.deepEqual(seen, [
      `${Buffer.byteLength(text1)} 644 root:root`,
      `${bin2.length} 600 root:root`,
      `${Buffer.byteLength(text3)} 640 nobody:nogroup`,
      "owned by nobody",
    ]);

    // Overwrite truncates (a shorter rewrite leaves no stale tail).
    await sbx.files.writeFiles([{ path: f1, data: "short" }]);
    assert.equal(await sbx.files.readFile(f1), "short");
    // Empty file.
    await sbx.files.writeFiles([{ path: `${root}/empty`, data: "" }]);
    assert.equal((await sbx.files.getFileInfo([`${root}/empty`]))[`${root}/empty`].size, 0);
    assert.equal(await sbx.files.readFile(`${root}/empty`), "");
  });
});

test("download errors: missing file 404, unsatisfiable range 416; info of missing path 404", async () => {
  await withSandbox({ metadata: { case: "files-errors" } }, async (sbx) => {
    const root = base();
    await rejectsWithStatus(sbx.files.readFile(`${root}/nope.txt`), 404, "readFile of a missing file");
    await rejectsWithStatus(sbx.files.getFileInfo([`${root}/nope.txt`]), 404, "getFileInfo of a missing file");
    await sbx.files.writeFiles([{ path: `${root}/small.txt`, data: "0123456789" }]);
    await rejectsWithStatus(
      sbx.files.readBytes(`${root}/small.txt`, { range: "bytes=100-200" }),
      416,
      "range past the end of the file",
    );
    await rejectsWithStatus(sbx.files.search({ path: `${root}/no-dir`, pattern: "*" }), 404, "search of a missing root");
  });
});

test("paths with spaces, unicode and shell metacharacters", async () => {
  await withSandbox({ metadata: { case: "files-names" } }, async (sbx) => {
    const root = `${base()}/dir with space/ünïcødé`;
    const names = ["a b.txt", "naïve – ✓.txt", "quote'd \"x\".txt", "semi;colon&amp$(x).txt", "percent%20plus+.txt"];
    await sbx.files.writeFiles(names.map((n, i) => ({ path: `${root}/${n}`, data: `content-${i}` })));
    for (let i = 0; i < names.length; i++) {
      const p = `${root}/${names[i]}`;
      assert.equal(await sbx.files.readFile(p), `content-${i}`, `read back ${JSON.stringify(names[i])}`);
      const info = await sbx.files.getFileInfo([p]);
      assert.equal(info[p]?.size, `content-${i}`.length, `info of ${JSON.stringify(names[i])}`);
      assert.equal(info[p].path, p);
    }
    const found = await sbx.files.search({ path: root, pattern: "*.txt" });
    assert.deepEqual(found.map((f) => f.path).sort(), names.map((n) => `${root}/${n}`).sort());
    const listed = await sbx.files.listDirectory({ path: root });
    assert.deepEqual(listed.map((f) => f.path).sort(), names.map((n) => `${root}/${n}`).sort());
    const moved = `${root}/moved ✓.txt`;
    await sbx.files.moveFiles([{ src: `${root}/${names[1]}`, dest: moved }]);
    assert.equal(await sbx.files.readFile(moved), "content-1");
    await sbx.files.deleteFiles([moved, `${root}/${names[0]}`]);
    const left = await sbx.files.search({ path: root, pattern: "*" });
    assert.equal(left.length, names.length - 2);
  });
});

test("search *.txt finds regular files by base name, recursively", async () => {
  await withSandbox({ metadata: { case: "files-search" } }, async (sbx) => {
    const root = base();
    await sbx.files.writeFiles([
      { path: `${root}/a.txt`, data: "a" },
      { path: `${root}/b.log`, data: "b" },
      { path: `${root}/sub/c.txt`, data: "cc" },
      { path: `${root}/sub/deep/d.txt`, data: "ddd" },
      { path: `${root}/sub/e.TXT`, data: "e" },
    ]);
    await sh(sbx, `mkdir -p ${root}/dir.txt`); // a directory matching the glob is not returned
    const found = await sbx.files.search({ path: root, pattern: "*.txt" });
    const paths = found.map((f) => f.path).sort();
    assert.deepEqual(paths, [`${root}/a.txt`, `${root}/sub/c.txt`, `${root}/sub/deep/d.txt`].sort());
    for (const f of found) {
      assert.equal(f.type, "file");
      assert.equal(f.size, { "a.txt": 1, "c.txt": 2, "d.txt": 3 }[f.path.split("/").pop()]);
      assert.equal(typeof f.mode, "number");
      assert.equal(f.owner, "root");
    }
    const logs = await sbx.files.search({ path: root, pattern: "*.log" });
    assert.deepEqual(logs.map((f) => f.path), [`${root}/b.log`]);
    const none = await sbx.files.search({ path: root, pattern: "*.none" });
    assert.deepEqual(none, []);
  });
});

test("setPermissions 600 nobody:nogroup", async () => {
  await withSandbox({ metadata: { case: "files-perms" } }, async (sbx) => {
    const root = base();
    const f = `${root}/perm.txt`;
    const g = `${root}/perm2.txt`;
    await sbx.files.writeFiles([
      { path: f, data: "perm", mode: 644 },
      { path: g, data: "perm2", mode: 644 },
    ]);
    await sbx.files.setPermissions([
      { path: f, mode: 600, owner: "nobody", group: "nogroup" },
      { path: g, mode: 755 },
    ]);
    const info = await sbx.files.getFileInfo([f, g]);
    assert.equal(info[f].mode, 600);
    assert.equal(info[f].owner, "nobody");
    assert.equal(info[f].group, "nogroup");
    assert.equal(info[g].mode, 755);
    assert.equal(info[g].owner, "root", "owner unchanged when not given");
    const seen = await sh(sbx, `stat -c '%a %U:%G' ${f} ${g}`);
    assert.deepEqual(seen, ["600 nobody:nogroup", "755 root:root"]);
  });
});

test("rewriting a file advances its mtime", async () => {
  await withSandbox({ metadata: { case: "files-mtime" } }, async (sbx) => {
    const f = `${base()}/mtime.txt`;
    await sbx.files.writeFiles([{ path: f, data: "v1" }]);
    const before = (await sbx.files.getFileInfo([f]))[f].modifiedAt;
    await sleep(1100);
    await sbx.files.writeFiles([{ path: f, data: "version two" }]);
    const after = (await sbx.files.getFileInfo([f]))[f];
    assert.ok(after.modifiedAt > before, `mtime advanced: ${before.toISOString()} -> ${after.modifiedAt.toISOString()}`);
    assert.equal(after.size, "version two".length);
    assert.equal(await sbx.files.readFile(f), "version two");
  });
});

test("replaceContents and replaceContentsDetailed counts 1, 0, 3 batched", async () => {
  await withSandbox({ metadata: { case: "files-replace" } }, async (sbx) => {
    const root = base();
    const [p1, p2, p3] = [`${root}/r1.txt`, `${root}/r2.txt`, `${root}/r3.txt`];
    await sbx.files.writeFiles([
      { path: p1, data: "alpha beta gamma", mode: 640 },
      { path: p2, data: "nothing to see" },
      { path: p3, data: "x-x-x and foo" },
    ]);
    const res = await sbx.files.replaceContentsDetailed([
      { path: p1, oldContent: "beta", newContent: "BETA" },
      { path: p2, oldContent: "beta", newContent: "BETA" },
      { path: p3, oldContent: "x", newContent: "yy" },
    ]);
    const counts = Object.fromEntries(res.map((r) => [r.path, r.replacedCount]));
    assert.deepEqual(counts, { [p1]: 1, [p2]: 0, [p3]: 3 });
    assert.equal(await sbx.files.readFile(p1), "alpha BETA gamma");
    assert.equal(await sbx.files.readFile(p2), "nothing to see");
    assert.equal(await sbx.files.readFile(p3), "yy-yy-yy and foo");
    assert.equal((await sbx.files.getFileInfo([p1]))[p1].mode, 640, "replace keeps the file mode");

    await sbx.files.replaceContents([{ path: p3, oldContent: "foo", newContent: "bar" }]);
    assert.equal(await sbx.files.readFile(p3), "yy-yy-yy and bar", "plain replaceContents");
    await rejectsWithStatus(
      sbx.files.replaceContents([{ path: `${root}/missing.txt`, oldContent: "a", newContent: "b" }]),
      404,
      "replace in a missing file",
    );
  });
});

test("moveFiles renames (creating the destination parent)", async () => {
  await withSandbox({ metadata: { case: "files-move" } }, async (sbx) => {
    const root = base();
    const src = `${root}/src.txt`;
    const dest = `${root}/new/parent/dest.txt`;
    await sbx.files.writeFiles([{ path: src, data: "moving", mode: 640 }]);
    await sbx.files.moveFiles([{ src, dest }]);
    assert.equal(await sbx.files.readFile(dest), "moving");
    assert.equal((await sbx.files.getFileInfo([dest]))[dest].mode, 640, "mode kept by the move");
    await rejectsWithStatus(sbx.files.getFileInfo([src]), 404, "source gone after move");
    await rejectsWithStatus(sbx.files.moveFiles([{ src, dest: `${root}/x.txt` }]), 404, "move of a missing source");
  });
});

test("deleteFiles and deleteDirectories", async () => {
  await withSandbox({ metadata: { case: "files-delete" } }, async (sbx) => {
    const root = base();
    const [f1, f2] = [`${root}/keep/del1.txt`, `${root}/keep/del2.txt`];
    const f3 = `${root}/tree/a/b/c.txt`;
    await sbx.files.writeFiles([
      { path: f1, data: "1" },
      { path: f2, data: "2" },
      { path: f3, data: "3" },
    ]);
    await sbx.files.deleteFiles([f1, f2]);
    await rejectsWithStatus(sbx.files.getFileInfo([f1]), 404, "deleted file 1");
    await rejectsWithStatus(sbx.files.getFileInfo([f2]), 404, "deleted file 2");
    const keep = `${root}/keep`;
    assert.equal((await sbx.files.getFileInfo([keep]))[keep].type, "directory", "parent dir stays");
    await sbx.files.deleteFiles([`${root}/never-existed.txt`]); // a missing path is not an error

    await sbx.files.deleteDirectories([`${root}/tree`]);
    await rejectsWithStatus(sbx.files.getFileInfo([`${root}/tree`]), 404, "deleted directory tree");
    const left = await sh(sbx, `ls -A ${root}`);
    assert.deepEqual(left, ["keep"]);
  });
});

test("~ paths expand to the sandbox user's home", async () => {
  await withSandbox({ metadata: { case: "files-tilde" } }, async (sbx) => {
    const name = `${uniq("tilde")}.txt`;
    await sbx.files.writeFiles([{ path: `~/${name}`, data: "home sweet home" }]);
    const home = (await sh(sbx, 'echo "$HOME"'))[0];
    assert.ok(home.startsWith("/"), `HOME=${home}`);
    assert.deepEqual(await sh(sbx, `cat ~/${name}`), ["home sweet home"]);
    assert.equal(await sbx.files.readFile(`~/${name}`), "home sweet home");
    const info = await sbx.files.getFileInfo([`~/${name}`]);
    assert.ok(info[`~/${name}`], "info keyed by the requested (unexpanded) path");
    assert.equal(info[`~/${name}`].size, "home sweet home".length);
    await sbx.files.deleteFiles([`~/${name}`]);
    await rejectsWithStatus(sbx.files.readFile(`~/${name}`), 404, "deleted via ~ path");
  });
});

test("readFile with line offset/limit (SDK 0.1.11 line-based download)", async () => {
  // Exact strings, as the reference returns them: lines without terminators, CRLF stripped,
  // each parameter alone (the SDK sends them separately).
  await withSandbox({ metadata: { case: "files-lines" } }, async (sbx) => {
    const f = `${base()}/lines.txt`;
    const crlf = `${base()}/crlf.txt`;
    await sbx.files.writeFiles([
      { path: f, data: "l1\nl2\nl3\nl4\nl5\n" },
      { path: crlf, data: "a\r\nb\r\nc\r\n" },
    ]);
    assert.equal(await sbx.files.readFile(f, { offset: 2, limit: 2 }), "l2\nl3", "offset=2 limit=2");
    assert.equal(await sbx.files.readFile(f, { offset: 4 }), "l4\nl5", "offset alone: to the end");
    assert.equal(await sbx.files.readFile(f, { limit: 2 }), "l1\nl2", "limit alone: from line 1");
    assert.equal(await sbx.files.readFile(f, { offset: 9 }), "", "past the end");
    assert.equal(await sbx.files.readFile(crlf, { offset: 1, limit: 2 }), "a\nb", "CRLF stripped");
    assert.equal(await sbx.files.readFile(f), "l1\nl2\nl3\nl4\nl5\n", "no line parameters: the bytes");
  });
});

test("50 MiB upload/download round trip with sha256", async () => {
  await withSandbox({ metadata: { case: "files-50mib" }, resource: { cpu: "1", memory: "512Mi" } }, async (sbx) => {
    const SIZE = 50 * 1024 * 1024;
    const CHUNK = 1024 * 1024;
    const data = randomBytes(SIZE);
    const digest = sha256(data);
    const f = `${base()}/big/blob.bin`;

    // Streamed multipart upload (the SDK's AsyncIterable path, no Content-Length).
    async function* chunks() {
      for (let off = 0; off < SIZE; off += CHUNK) yield new Uint8Array(data.buffer, data.byteOffset + off, CHUNK);
    }
    const t0 = Date.now();
    await sbx.files.writeFiles([{ path: f, data: chunks(), mode: 600 }]);
    const upMs = Date.now() - t0;

    const info = (await sbx.files.getFileInfo([f]))[f];
    assert.equal(info.size, SIZE, "size after upload (never silently truncated)");
    assert.equal(info.mode, 600);
    const inside = await sh(sbx, `sha256sum ${f}`);
    assert.equal(inside[0].split(/\s+/)[0], digest, "sha256 inside the sandbox");

    // Streamed download.
    const t1 = Date.now();
    const h = createHash("sha256");
    let n = 0;
    for await (const c of sbx.files.readBytesStream(f)) {
      h.update(c);
      n += c.length;
    }
    const downMs = Date.now() - t1;
    assert.equal(n, SIZE, "downloaded byte count");
    assert.equal(h.digest("hex"), digest, "sha256 of the streamed download");

    // Whole-buffer download and a range at the far end.
    const all = await sbx.files.readBytes(f);
    assert.equal(all.length, SIZE);
    assert.equal(sha256(all), digest, "sha256 of readBytes");
    const tail = await sbx.files.readBytes(f, { range: `bytes=${SIZE - 100}-` });
    assert.deepEqual(Buffer.from(tail), data.subarray(SIZE - 100), "last 100 bytes by range");
    const mid = await sbx.files.readBytes(f, { range: `bytes=${CHUNK * 7 + 3}-${CHUNK * 7 + 1002}` });
    assert.deepEqual(Buffer.from(mid), data.subarray(CHUNK * 7 + 3, CHUNK * 7 + 1003), "1000 bytes from the middle");

    // The in-memory (FormData) upload path too.
    const f2 = `${base()}/big/blob2.bin`;
    await sbx.files.writeFiles([{ path: f2, data: new Uint8Array(data.buffer, data.byteOffset, 8 * CHUNK) }]);
    const inside2 = await sh(sbx, `sha256sum ${f2}`);
    assert.equal(inside2[0].split(/\s+/)[0], sha256(data.subarray(0, 8 * CHUNK)), "8 MiB FormData upload");
    console.log(`# 50 MiB: upload ${upMs} ms, streamed download ${downMs} ms`);
  });
});
