// execd commands through the stock SDK: foreground streaming with handlers, cwd, envs, exit codes,
// background runs with status and cursor-based logs, interrupt.
import { test } from "node:test";
import assert from "node:assert/strict";

import {
  assertRecentMs,
  poll,
  recorder,
  sleep,
  stderrText,
  stdoutLines,
  withSandbox,
} from "./lib.mjs";

test("run with handlers: one init, exact stdout, exit 0, one complete", async () => {
  await withSandbox({ metadata: { case: "run-handlers" } }, async (sbx) => {
    const rec = recorder();
    const ex = await sbx.commands.run("echo hello-corral", undefined, rec.handlers);
    assert.equal(rec.init.length, 1, "exactly one init");
    assert.ok(rec.init[0].id && rec.init[0].id.length > 0, "init carries the command id");
    assert.equal(ex.id, rec.init[0].id, "execution.id is the init id");
    assertRecentMs(rec.init[0].timestamp, "init timestamp");
    assert.deepEqual(rec.stdout.map((m) => m.text), ["hello-corral"], "onStdout got exactly the echoed line");
    assert.deepEqual(stdoutLines(ex), ["hello-corral"], "accumulated stdout");
    assert.equal(ex.logs.stdout[0].isError, false);
    assertRecentMs(ex.logs.stdout[0].timestamp, "stdout timestamp");
    assert.equal(rec.stderr.length, 0, "no stderr");
    assert.equal(rec.error.length, 0, "no error event");
    assert.equal(ex.error, undefined);
    assert.equal(rec.complete.length, 1, "exactly one execution_complete");
    assert.ok(ex.complete, "execution.complete set");
    assert.equal(typeof ex.complete.executionTimeMs, "number");
    assert.ok(ex.complete.executionTimeMs >= 0 && ex.complete.executionTimeMs < 10_000);
    assertRecentMs(ex.complete.timestamp, "complete timestamp");
    assert.equal(ex.exitCode, 0);
    // Event order on the wire: init first, execution_complete last (pings may be interleaved).
    const types = rec.events.map((e) => e.type).filter((t) => t !== "ping");
    assert.deepEqual(types, ["init", "stdout", "execution_complete"], `event sequence ${JSON.stringify(types)}`);
  });
});

test("multi-line output, blank lines and stderr are split per line", async () => {
  await withSandbox({ metadata: { case: "run-lines" } }, async (sbx) => {
    const ex = await sbx.commands.run("printf 'a\\n\\nb\\n'; echo err-line >&2; printf 'tail-no-newline'");
    assert.equal(ex.exitCode, 0);
    // execd emits an empty line as "\n" (reference 2.4); a trailing partial line is flushed at exit.
    assert.deepEqual(stdoutLines(ex), ["a", "\n", "b", "tail-no-newline"]);
    assert.deepEqual(ex.logs.stderr.map((m) => m.text), ["err-line"]);
    assert.equal(ex.logs.stderr[0].isError, true);
  });
});

test("workingDirectory /tmp: pwd prints /tmp", async () => {
  await withSandbox({ metadata: { case: "run-cwd" } }, async (sbx) => {
    const ex = await sbx.commands.run("pwd", { workingDirectory: "/tmp" });
    assert.equal(ex.exitCode, 0);
    assert.deepEqual(stdoutLines(ex), ["/tmp"]);
    const ex2 = await sbx.commands.run("pwd", { workingDirectory: "/var" });
    assert.deepEqual(stdoutLines(ex2), ["/var"]);
  });
});

test("envs are injected only when passed", async () => {
  await withSandbox({ metadata: { case: "run-envs" } }, async (sbx) => {
    const cmd = 'echo "v=${COMPAT_ENV_VAR:-unset}"; echo "w=${COMPAT_OTHER:-unset}"';
    const base = await sbx.commands.run(cmd);
    assert.equal(base.exitCode, 0);
    assert.deepEqual(stdoutLines(base), ["v=unset", "w=unset"], "absent at baseline");
    const withEnv = await sbx.commands.run(cmd, {
      envs: { COMPAT_ENV_VAR: "hello world", COMPAT_OTHER: "x=y" },
    });
    assert.equal(withEnv.exitCode, 0);
    assert.deepEqual(stdoutLines(withEnv), ["v=hello world", "w=x=y"], "present when passed");
    const again = await sbx.commands.run(cmd);
    assert.deepEqual(stdoutLines(again), ["v=unset", "w=unset"], "not leaked into later commands");
  });
});

test("uid/gid run the command as that user", async () => {
  await withSandbox({ metadata: { case: "run-uid" } }, async (sbx) => {
    const ex = await sbx.commands.run("id -u; id -g; id -un", { uid: 65534, gid: 65534 });
    assert.equal(ex.exitCode, 0, `error: ${JSON.stringify(ex.error)} stderr: ${stderrText(ex)}`);
    assert.deepEqual(stdoutLines(ex), ["65534", "65534", "nobody"]);
    const root = await sbx.commands.run("id -u");
    assert.deepEqual(stdoutLines(root), ["0"], "default user is root");
  });
});

test("create-time env reaches commands", async () => {
  await withSandbox({ metadata: { case: "run-create-env" }, env: { COMPAT_CREATE_ENV: "from-create" } }, async (sbx) => {
    const ex = await sbx.commands.run('echo "$COMPAT_CREATE_ENV"');
    assert.equal(ex.exitCode, 0);
    assert.deepEqual(stdoutLines(ex), ["from-create"]);
  });
});

test("failing command: exit 7 -> CommandExecError, exitCode 7, no complete", async () => {
  await withSandbox({ metadata: { case: "run-fail" } }, async (sbx) => {
    const rec = recorder();
    const ex = await sbx.commands.run("echo before-fail; exit 7", undefined, rec.handlers);
    assert.equal(rec.init.length, 1, "one init");
    assert.deepEqual(stdoutLines(ex), ["before-fail"]);
    assert.ok(ex.error, "execution.error set");
    assert.equal(ex.error.name, "CommandExecError");
    assert.equal(ex.error.value, "7");
    assert.equal(ex.exitCode, 7);
    assert.equal(ex.exitCode, parseInt(ex.error.value, 10), "exitCode equals int(error.value)");
    assert.equal(rec.error.length, 1, "exactly one onError");
    assert.equal(rec.complete.length, 0, "no execution_complete after an error");
    assert.equal(ex.complete, undefined);
    assertRecentMs(ex.error.timestamp, "error timestamp");
    assert.ok(Array.isArray(ex.error.traceback));

    // A command that does not exist: exit 127 and stderr names it.
    const ex2 = await sbx.commands.run("compat-no-such-command-xyz --flag");
    assert.equal(ex2.error?.name, "CommandExecError");
    assert.equal(ex2.exitCode, 127);
    assert.equal(ex2.exitCode, parseInt(ex2.error.value, 10));
    assert.match(stderrText(ex2), /compat-no-such-command-xyz/, "stderr mentions the command");
    assert.equal(ex2.complete, undefined);
  });
});

test("background run: returns at once, then status and logs with a cursor", async () => {
  await withSandbox({ metadata: { case: "run-background" } }, async (sbx) => {
    const cmd = "echo line-one; sleep 1; echo line-two; echo err-two >&2; exit 3";
    const t0 = Date.now();
    const rec = recorder();
    const ex = await sbx.commands.run(cmd, { background: true }, rec.handlers);
    const elapsed = Date.now() - t0;
    assert.ok(elapsed < 5_000, `background run returned in ${elapsed} ms`);
    assert.equal(rec.init.length, 1, "one init");
    const id = ex.id;
    assert.ok(id, "background execution has an id");
    assert.equal(ex.exitCode == null, true, `background exitCode is unset (got ${ex.exitCode})`);
    assert.equal(ex.error, undefined);

    // Follow the output with the byte cursor until both lines are there.
    let content = "";
    let cursor = 0;
    let calls = 0;
    const deadline = Date.now() + 15_000;
    while (!(content.includes("line-one") && content.includes("line-two") && content.includes("err-two"))) {
      assert.ok(Date.now() < deadline, `logs never showed both lines; got ${JSON.stringify(content)}`);
      const logs = await sbx.commands.getBackgroundCommandLogs(id, cursor);
      calls++;
      assert.equal(typeof logs.content, "string");
      assert.equal(typeof logs.cursor, "number", "EXECD-COMMANDS-TAIL-CURSOR header present and numeric");
      assert.ok(logs.cursor >= cursor, "cursor never goes backwards");
      assert.equal(logs.cursor - cursor, Buffer.byteLength(logs.content), "cursor advances by the bytes returned");
      content += logs.content;
      cursor = logs.cursor;
      await sleep(100);
    }
    assert.ok(calls >= 1);
    assert.equal(content, "line-one\nline-two\nerr-two\n", "combined output, in order, exactly once");

    const status = await poll(async () => {
      const s = await sbx.commands.getCommandStatus(id);
      return s.running === false ? s : null;
    }, { timeoutMs: 15_000, intervalMs: 100 });
    assert.ok(status, "command finished");
    assert.equal(status.id, id);
    assert.equal(status.running, false);
    assert.equal(status.exitCode, 3, "status exit_code");
    assert.equal(status.content, cmd, "status content is the command");
    assert.ok(status.startedAt instanceof Date, "startedAt");
    assert.ok(status.finishedAt instanceof Date, "finishedAt");
    assert.ok(status.finishedAt >= status.startedAt);
    assert.ok(status.finishedAt - status.startedAt >= 900, "ran for about a second");

    // Reading from the end returns nothing and keeps the cursor; from 0 returns everything.
    const tail = await sbx.commands.getBackgroundCommandLogs(id, cursor);
    assert.equal(tail.content, "");
    assert.equal(tail.cursor, cursor);
    const all = await sbx.commands.getBackgroundCommandLogs(id);
    assert.equal(all.content, content, "no cursor = from the start");
    assert.equal(all.cursor, Buffer.byteLength(content));
    const mid = await sbx.commands.getBackgroundCommandLogs(id, Buffer.byteLength("line-one\n"));
    assert.equal(mid.content, "line-two\nerr-two\n", "cursor is a byte offset");
  });
});

test("getCommandStatus of a foreground command and of an unknown id", async () => {
  await withSandbox({ metadata: { case: "run-status" } }, async (sbx) => {
    const ex = await sbx.commands.run("echo fg; exit 5");
    assert.equal(ex.exitCode, 5);
    const st = await sbx.commands.getCommandStatus(ex.id);
    assert.equal(st.running, false);
    assert.equal(st.exitCode, 5);
    let err;
    try {
      await sbx.commands.getCommandStatus("0123456789abcdef0123456789abcdef");
    } catch (e) {
      err = e;
    }
    assert.ok(err, "status of an unknown id fails");
    assert.ok([400, 404].includes(err.statusCode), `unknown id status code ${err.statusCode}`);
  });
});

test("interrupt sleep 30: the stream ends within a few seconds", async () => {
  await withSandbox({ metadata: { case: "run-interrupt" } }, async (sbx) => {
    let gotInit;
    const initSeen = new Promise((resolve) => {
      gotInit = resolve;
    });
    const rec = recorder();
    const handlers = {
      ...rec.handlers,
      onInit: (init) => {
        rec.init.push(init);
        gotInit(init);
      },
    };
    const t0 = Date.now();
    const running = sbx.commands.run("sleep 30", undefined, handlers);
    running.catch(() => {});
    const init = await Promise.race([
      initSeen,
      sleep(10_000).then(() => {
        throw new Error("no init event within 10 s");
      }),
    ]);
    assert.ok(init.id, "init id");
    const st = await sbx.commands.getCommandStatus(init.id);
    assert.equal(st.running, true, "sleep is running before the interrupt");

    const tInt = Date.now();
    await sbx.commands.interrupt(init.id);
    const ex = await running;
    const endedAfter = Date.now() - tInt;
    assert.ok(endedAfter < 5_000, `stream ended ${endedAfter} ms after interrupt`);
    assert.ok(Date.now() - t0 < 15_000, "well before sleep 30 would finish");
    assert.equal(rec.init.length, 1);
    assert.equal(ex.complete, undefined, "an interrupted command does not complete");
    assert.ok(ex.error, "the interrupted stream ends with an error event");
    assert.equal(ex.error.name, "CommandExecError");
    assert.notEqual(ex.exitCode, 0);

    const after = await sbx.commands.getCommandStatus(init.id);
    assert.equal(after.running, false, "status shows it stopped");
    // Interrupting something that is no longer running is an error.
    let err;
    try {
      await sbx.commands.interrupt(init.id);
    } catch (e) {
      err = e;
    }
    assert.ok(err, "interrupting a finished command fails");
    assert.ok(err.statusCode >= 400, `status ${err.statusCode}`);

    // The sandbox is still fine afterwards.
    const ok = await sbx.commands.run("echo still-alive");
    assert.deepEqual(stdoutLines(ok), ["still-alive"]);
  });
});

test("timeoutSeconds kills a foreground command", async () => {
  await withSandbox({ metadata: { case: "run-timeout" } }, async (sbx) => {
    const t0 = Date.now();
    const ex = await sbx.commands.run("echo started; sleep 30", { timeoutSeconds: 1 });
    const elapsed = Date.now() - t0;
    assert.ok(elapsed < 8_000, `command with a 1 s timeout ended after ${elapsed} ms`);
    assert.deepEqual(stdoutLines(ex), ["started"]);
    assert.ok(ex.error, "timed-out command ends with an error");
    assert.equal(ex.complete, undefined);
    assert.notEqual(ex.exitCode, 0);
  });
});


test("output streams while the command runs (not buffered to the end)", async () => {
  await withSandbox({ metadata: { case: "run-streaming" } }, async (sbx) => {
    const seen = [];
    const t0 = Date.now();
    const ex = await sbx.commands.run("for i in 1 2 3; do echo tick-$i; sleep 1; done", undefined, {
      onStdout: (m) => {
        seen.push({ text: m.text, at: Date.now() - t0 });
      },
    });
    const total = Date.now() - t0;
    assert.equal(ex.exitCode, 0);
    assert.deepEqual(seen.map((x) => x.text), ["tick-1", "tick-2", "tick-3"]);
    assert.ok(total >= 2_900, `ran about 3 s (${total} ms)`);
    assert.ok(seen[0].at < total - 1_500, `first line arrived at ${seen[0].at} ms, the run ended at ${total} ms`);
    assert.ok(seen[1].at - seen[0].at > 500, "lines arrive about a second apart");
  });
});

test("large output: 20000 lines arrive complete and in order", async () => {
  await withSandbox({ metadata: { case: "run-large" } }, async (sbx) => {
    const ex = await sbx.commands.run("seq 1 20000; seq 1 300 >&2");
    assert.equal(ex.exitCode, 0);
    const lines = stdoutLines(ex);
    assert.equal(lines.length, 20000, "line count");
    for (let i = 0; i < lines.length; i++) {
      if (lines[i] !== String(i + 1)) assert.fail(`line ${i + 1} is ${JSON.stringify(lines[i])}`);
    }
    assert.equal(ex.logs.stderr.length, 300);
    assert.equal(ex.logs.stderr[299].text, "300");
  });
});

test("concurrent commands in one sandbox each get their own output", async () => {
  await withSandbox({ metadata: { case: "run-concurrent" } }, async (sbx) => {
    const N = 6;
    const runs = [];
    for (let i = 0; i < N; i++) {
      runs.push(sbx.commands.run(`sleep 0.$((RANDOM % 5)); echo job-${i}; echo job-${i}-b; exit ${i}`));
    }
    const results = await Promise.all(runs);
    const ids = new Set();
    results.forEach((ex, i) => {
      assert.deepEqual(stdoutLines(ex), [`job-${i}`, `job-${i}-b`], `job ${i} output`);
      assert.equal(ex.exitCode, i, `job ${i} exit code`);
      ids.add(ex.id);
    });
    assert.equal(ids.size, N, "distinct command ids");
  });
});

test("background: interrupt stops it; timeoutSeconds kills it", async () => {
  await withSandbox({ metadata: { case: "run-bg-stop" } }, async (sbx) => {
    const bg = await sbx.commands.run("echo bg-started; sleep 30", { background: true });
    assert.ok(bg.id);
    await poll(async () => (await sbx.commands.getBackgroundCommandLogs(bg.id, 0)).content.includes("bg-started"), { timeoutMs: 5_000 });
    assert.equal((await sbx.commands.getCommandStatus(bg.id)).running, true, "running before interrupt");
    const t0 = Date.now();
    await sbx.commands.interrupt(bg.id);
    const st = await poll(async () => {
      const s = await sbx.commands.getCommandStatus(bg.id);
      return s.running === false ? s : null;
    }, { timeoutMs: 8_000 });
    assert.ok(st, "interrupted background command stops");
    assert.ok(Date.now() - t0 < 8_000);
    assert.notEqual(st.exitCode, 0, `exit code after interrupt: ${st.exitCode}`);
    assert.ok(st.finishedAt instanceof Date);

    const timed = await sbx.commands.run("sleep 30", { background: true, timeoutSeconds: 1 });
    const st2 = await poll(async () => {
      const s = await sbx.commands.getCommandStatus(timed.id);
      return s.running === false ? s : null;
    }, { timeoutMs: 8_000 });
    assert.ok(st2, "background command with timeoutSeconds 1 is killed");
    assert.notEqual(st2.exitCode, 0);
  });
});

test("a very long line without newlines arrives intact", async () => {
  await withSandbox({ metadata: { case: "run-long-line" } }, async (sbx) => {
    const ex = await sbx.commands.run("head -c 200000 /dev/zero | tr '\\0' a; echo; echo after");
    assert.equal(ex.exitCode, 0);
    const lines = stdoutLines(ex);
    assert.equal(lines[lines.length - 1], "after");
    const joined = lines.slice(0, -1).join("");
    assert.equal(joined.length, 200000, `long line length (split into ${lines.length - 1} events)`);
    assert.ok(/^a+$/.test(joined));
  });
});

test("a client that disconnects mid-stream leaves the sandbox healthy", async () => {
  // The SDK cannot do this itself: the AbortSignal given to commands.run is only wired up until
  // the response headers arrive (createTimedFetch removes its abort listener once fetch resolves),
  // so a running stream cannot be cancelled through it. Use the endpoint the SDK resolved and drop
  // the connection by hand after the first event.
  await withSandbox({ metadata: { case: "run-disconnect" } }, async (sbx) => {
    const url = await sbx.getEndpointUrl(44772);
    const epHeaders = (await sbx.getEndpoint(44772)).headers ?? {}; // what the SDK sends
    const ac = new AbortController();
    const res = await fetch(`${url}/command`, {
      method: "POST",
      headers: { ...epHeaders, "content-type": "application/json", accept: "text/event-stream" },
      body: JSON.stringify({ command: "echo started; sleep 2; echo finished > /tmp/after-disconnect" }),
      signal: ac.signal,
    });
    assert.equal(res.status, 200);
    const reader = res.body.getReader();
    let buf = "";
    while (!buf.includes("started")) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += new TextDecoder().decode(value);
    }
    const init = JSON.parse(buf.split("\n").find((l) => l.trim().startsWith("{")));
    assert.equal(init.type, "init");
    ac.abort();
    await reader.cancel().catch(() => {});

    const ok = await sbx.commands.run("echo after-disconnect");
    assert.deepEqual(stdoutLines(ok), ["after-disconnect"], "new commands still run");
    const st = await poll(async () => {
      const s = await sbx.commands.getCommandStatus(init.text);
      return s.running === false ? s : null;
    }, { timeoutMs: 10_000, intervalMs: 200 });
    assert.ok(st, "the disconnected command's status settles (finished or killed)");
    assert.equal(await sbx.isHealthy(), true);
  });
});

test("runStream yields the raw execd events with the documented fields", async () => {
  await withSandbox({ metadata: { case: "run-stream-raw" } }, async (sbx) => {
    const events = [];
    for await (const ev of sbx.commands.runStream("echo raw-1; echo raw-2 >&2")) events.push(ev);
    const types = events.map((e) => e.type).filter((t) => t !== "ping");
    assert.equal(types[0], "init", `first event ${JSON.stringify(events[0])}`);
    assert.equal(types[types.length - 1], "execution_complete");
    assert.deepEqual(types.slice(1, -1).sort(), ["stderr", "stdout"]);
    for (const e of events) {
      assert.equal(typeof e.timestamp, "number", `timestamp on ${JSON.stringify(e)}`);
      assertRecentMs(e.timestamp, `${e.type} timestamp`);
    }
    const init = events.find((e) => e.type === "init");
    assert.equal(typeof init.text, "string");
    assert.ok(init.text.length > 0, "init.text is the command id");
    assert.equal(events.find((e) => e.type === "stdout").text, "raw-1");
    assert.equal(events.find((e) => e.type === "stderr").text, "raw-2");
    const done = events.find((e) => e.type === "execution_complete");
    assert.equal(typeof done.execution_time, "number", "execution_complete carries execution_time (ms)");
    assert.equal(events.some((e) => "exit_code" in e), false, "no exit_code field in the stream");

    const failed = [];
    for await (const ev of sbx.commands.runStream("exit 3")) failed.push(ev);
    const err = failed.find((e) => e.type === "error");
    assert.ok(err, "a failing command ends with an error event");
    assert.deepEqual({ ename: err.error.ename, evalue: err.error.evalue }, { ename: "CommandExecError", evalue: "3" });
    assert.ok(Array.isArray(err.error.traceback), "traceback is an array");
    assert.equal(failed.some((e) => e.type === "execution_complete"), false);
  });
});

test("proxy churn: hundreds of mixed SDK calls on pooled connections, some concurrent", async () => {
  await withSandbox({ metadata: { case: "run-churn" } }, async (sbx) => {
    await sbx.files.writeFiles([{ path: "/tmp/churn.txt", data: "churn" }]);
    for (let i = 0; i < 150; i++) {
      switch (i % 3) {
        case 0:
          assert.equal(await sbx.health.ping(), true);
          break;
        case 1:
          assert.equal((await sbx.files.getFileInfo(["/tmp/churn.txt"]))["/tmp/churn.txt"].size, 5);
          break;
        default: {
          const ex = await sbx.commands.run(`echo churn-${i}`);
          assert.deepEqual(stdoutLines(ex), [`churn-${i}`]);
        }
      }
    }
    const burst = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        i % 2 ? sbx.files.readFile("/tmp/churn.txt") : sbx.commands.run(`echo burst-${i}`).then((ex) => stdoutLines(ex)[0]),
      ),
    );
    burst.forEach((v, i) => assert.equal(v, i % 2 ? "churn" : `burst-${i}`));
  });
});
