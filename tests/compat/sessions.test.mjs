// Bash sessions (/session) through the stock SDK: create-time cwd, per-run cwd, persisted cwd and
// exported variables, failing runs, delete.
import { test } from "node:test";
import assert from "node:assert/strict";

import { recorder, stdoutLines, withSandbox } from "./lib.mjs";

test("bash session: cwd and exported vars persist; failing run gives evalue 7; delete", async () => {
  await withSandbox({ metadata: { case: "session" } }, async (sbx) => {
    const sid = await sbx.commands.createSession({ workingDirectory: "/tmp" });
    assert.equal(typeof sid, "string");
    assert.ok(sid.length > 0, "session id");

    const rec = recorder();
    const pwd = await sbx.commands.runInSession(sid, "pwd", undefined, rec.handlers);
    assert.deepEqual(stdoutLines(pwd), ["/tmp"], "create-time cwd");
    assert.equal(pwd.exitCode, 0);
    assert.equal(rec.init.length, 1, "one init");
    assert.equal(rec.complete.length, 1, "one complete");
    assert.equal(rec.error.length, 0);

    const mk = await sbx.commands.runInSession(sid, "mkdir -p /tmp/compat-sess/sub && cd /tmp/compat-sess");
    assert.equal(mk.exitCode, 0);
    const pwd2 = await sbx.commands.runInSession(sid, "pwd");
    assert.deepEqual(stdoutLines(pwd2), ["/tmp/compat-sess"], "cd persists across runs");

    const exp = await sbx.commands.runInSession(sid, "export COMPAT_SESS_VAR=persist-42; COMPAT_LOCAL=only-here");
    assert.equal(exp.exitCode, 0);
    const echo = await sbx.commands.runInSession(sid, 'echo "$COMPAT_SESS_VAR"; echo "${COMPAT_LOCAL:-}"');
    assert.deepEqual(stdoutLines(echo), ["persist-42", "only-here"], "shell variables persist across runs");
    const child = await sbx.commands.runInSession(sid, "bash -c 'echo \"${COMPAT_SESS_VAR:-}|${COMPAT_LOCAL:-}\"'");
    assert.deepEqual(stdoutLines(child), ["persist-42|"], "only the exported one reaches child processes");

    const over = await sbx.commands.runInSession(sid, "pwd", { workingDirectory: "/var" });
    assert.deepEqual(stdoutLines(over), ["/var"], "per-run cwd override");

    const multi = await sbx.commands.runInSession(sid, "echo one; echo two >&2; echo three");
    assert.deepEqual(stdoutLines(multi), ["one", "three"]);
    assert.deepEqual(multi.logs.stderr.map((m) => m.text), ["two"]);

    const frec = recorder();
    const fail = await sbx.commands.runInSession(sid, "sh -c 'echo failing; exit 7'", undefined, frec.handlers);
    assert.deepEqual(stdoutLines(fail), ["failing"]);
    assert.ok(fail.error, "failing run has an error");
    assert.equal(fail.error.name, "CommandExecError");
    assert.equal(fail.error.value, "7", "evalue is the exit code");
    assert.equal(fail.exitCode, 7);
    assert.equal(frec.complete.length, 0, "no complete after an error");

    const still = await sbx.commands.runInSession(sid, 'echo "$COMPAT_SESS_VAR"');
    assert.deepEqual(stdoutLines(still), ["persist-42"], "session survives a failing run");
    assert.equal(still.exitCode, 0);

    // Two sessions do not share state.
    const sid2 = await sbx.commands.createSession();
    assert.notEqual(sid2, sid);
    const other = await sbx.commands.runInSession(sid2, 'echo "${COMPAT_SESS_VAR:-unset}"');
    assert.deepEqual(stdoutLines(other), ["unset"], "sessions are independent");

    await sbx.commands.deleteSession(sid);
    let err;
    try {
      await sbx.commands.runInSession(sid, "echo gone");
    } catch (e) {
      err = e;
    }
    assert.ok(err, "running in a deleted session fails");
    assert.equal(err.statusCode, 404, `deleted session: status ${err.statusCode} (${err.message})`);
    let err2;
    try {
      await sbx.commands.deleteSession(sid);
    } catch (e) {
      err2 = e;
    }
    assert.equal(err2?.statusCode, 404, "deleting a deleted session is 404");
    await sbx.commands.deleteSession(sid2);
  });
});

test("session run timeout ends the run", async () => {
  await withSandbox({ metadata: { case: "session-timeout" } }, async (sbx) => {
    const sid = await sbx.commands.createSession();
    const t0 = Date.now();
    const ex = await sbx.commands.runInSession(sid, "echo started; sleep 30", { timeoutSeconds: 1 });
    const elapsed = Date.now() - t0;
    assert.ok(elapsed < 8_000, `run with a 1 s timeout ended after ${elapsed} ms`);
    assert.deepEqual(stdoutLines(ex), ["started"]);
    assert.ok(ex.error, "timed-out run ends with an error");
    assert.equal(ex.complete, undefined);
    await sbx.commands.deleteSession(sid).catch(() => {}); // the shell may be gone after a timeout
  });
});
