#!/usr/bin/env python3
"""Commands through corrald's server proxy into corral-execd: output, exit codes, framing,
background + status + logs, interrupt, timeout, client disconnect, pings, big outputs,
keep-alive."""

import json
import os
import secrets
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import HEX32_RE, CommandStream, CorralTestCase, main, parse_time  # noqa: E402


class Commands(CorralTestCase):

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        r = cls.client.create_sandbox_raw()
        if r.status != 202:
            cls.tearDownClass()
            raise RuntimeError("cannot create the shared sandbox: %r" % r)
        cls.sid = r.json()["id"]

    @classmethod
    def tearDownClass(cls):
        if getattr(cls, "sid", None):
            r = cls.client.delete_sandbox(cls.sid)
            if r.status != 204:
                print("delete shared sandbox -> %r" % r, file=sys.stderr)
        super().tearDownClass()

    def stream(self, cmd, **opts):
        s = CommandStream("127.0.0.1", self.corrald.port, self.sid, cmd, **opts)
        self.addCleanup(s.abort)
        self.assertEqual(s.result.http_status, 200, s.result)
        return s

    # --- basics ------------------------------------------------------------------------------

    def test_echo(self):
        t0 = time.time()
        res = self.client.run(self.sid, "echo hello-corral")
        self.assertEqual(res.http_status, 200, res)
        self.assertIn("text/event-stream", res.headers.get("Content-Type", ""))
        self.assertTrue(res.headers.get("X-Request-ID"), "X-Request-ID on proxied responses too")
        self.assertRegex(res.headers.get("Keep-Alive") or "", r"timeout=\d+", "Keep-Alive on every response")
        inits = res.of_type("init")
        self.assertEqual(len(inits), 1, res)
        self.assertRegex(inits[0]["text"], HEX32_RE)
        self.assertEqual(res.events[0]["type"], "init", "init comes first")
        self.assertEqual(res.stdout_lines, ["hello-corral"])
        self.assertEqual(res.stderr_lines, [])
        self.assertEqual(len(res.of_type("execution_complete")), 1, res)
        self.assertEqual(res.events[-1]["type"], "execution_complete", "complete comes last")
        self.assertIsNone(res.error)
        self.assertEqual(res.exit_code, 0)
        for ev in res.events:
            self.assertIn("timestamp", ev)
            self.assertLess(abs(ev["timestamp"] / 1000.0 - t0), 60, ev)
        self.assertIsInstance(res.of_type("execution_complete")[0].get("execution_time", 0), int)

    def test_framing_is_bare_json_and_blank_line(self):
        res = self.client.run(self.sid, "echo x")
        # every event is one JSON line followed by an empty line; no "data:" prefix
        raw = b"".join(res.lines)
        chunks = [c for c in raw.split(b"\n\n") if c]
        self.assertEqual(len(chunks), len(res.events), raw)
        for c in chunks:
            self.assertTrue(c.startswith(b"{"), c)

    def test_exit_code(self):
        res = self.client.run(self.sid, "echo before; exit 7")
        self.assertEqual(res.stdout_lines, ["before"])
        err = res.error
        self.assertIsNotNone(err, res)
        self.assertEqual(err["ename"], "CommandExecError")
        self.assertEqual(err["evalue"], "7")
        self.assertFalse(res.complete, "no execution_complete after an error")
        self.assertEqual(res.exit_code, 7)
        self.assertEqual(res.events[-1]["type"], "error")

    def test_command_not_found(self):
        res = self.client.run(self.sid, "no-such-command-corral")
        self.assertEqual(res.exit_code, 127, res)
        self.assertIn("no-such-command-corral", res.stderr)

    def test_stderr_separation(self):
        res = self.client.run(self.sid, "echo out1; echo err1 >&2; echo out2; echo err2 1>&2")
        self.assertEqual(res.stdout_lines, ["out1", "out2"])
        self.assertEqual(res.stderr_lines, ["err1", "err2"])
        self.assertEqual(res.exit_code, 0)

    def test_cwd(self):
        self.assertEqual(self.sh(self.sid, "pwd", cwd="/tmp"), "/tmp")
        self.assertEqual(self.sh(self.sid, "pwd", cwd="/usr/bin"), "/usr/bin")
        res = self.client.run(self.sid, "pwd", cwd="/no/such/dir")
        self.assertNotEqual(res.exit_code, 0, "a missing cwd cannot succeed: %r" % res)

    def test_envs(self):
        name = "CORRAL_T_" + secrets.token_hex(4).upper()
        self.assertEqual(self.sh(self.sid, "printf '%%s' \"${%s-unset}\"" % name), "unset")
        out = self.sh(self.sid, "printf '%%s' \"$%s\"" % name, envs={name: "v a=l'ue"})
        self.assertEqual(out, "v a=l'ue")
        # and it did not stick
        self.assertEqual(self.sh(self.sid, "printf '%%s' \"${%s-unset}\"" % name), "unset")

    def test_blank_line_framing(self):
        res = self.client.run(self.sid, "printf 'a\\n\\nb\\n\\n\\nc'")
        self.assertEqual(res.stdout_lines, ["a", "\n", "b", "\n", "\n", "c"])
        self.assertEqual(res.exit_code, 0)

    def test_crlf_and_cr(self):
        res = self.client.run(self.sid, "printf 'x\\r\\ny\\rz\\n'")
        self.assertEqual(res.stdout_lines, ["x", "y", "z"])

    def test_partial_last_line(self):
        res = self.client.run(self.sid, "printf 'no-newline'")
        self.assertEqual(res.stdout_lines, ["no-newline"])

    def test_uid_gid(self):
        res = self.client.run(self.sid, "id -u; id -g", uid=65534, gid=65534)
        self.assertEqual(res.stdout_lines, ["65534", "65534"], res)

    def test_stdin_is_not_a_pipe_left_open(self):
        """A command reading stdin gets EOF at once instead of hanging the rollout."""
        t0 = time.monotonic()
        res = self.client.run(self.sid, "cat; read x; echo got:$x", read_timeout=20)
        self.assertLess(time.monotonic() - t0, 5)
        self.assertEqual(res.stdout_lines, ["got:"])

    def test_backgrounded_children_do_not_hold_the_stream(self):
        """'server &' inside a command: the stream ends when the command's shell exits."""
        for cmd in ("sleep 20 & echo started", "(sleep 20 &); echo started", "nohup sleep 20 & echo started"):
            t0 = time.monotonic()
            res = self.client.run(self.sid, cmd, read_timeout=30)
            self.assertLess(time.monotonic() - t0, 5, "%r held the stream open" % cmd)
            self.assertEqual(res.stdout_lines, ["started"], res)
            self.assertEqual(res.exit_code, 0)
        self.run_ok(self.sid, "pkill -f '^sleep 20$' || true")

    def test_non_utf8_output_is_valid_json(self):
        res = self.client.run(self.sid, "printf 'ok\\xff\\xfeend\\n'; echo 'h\u00e9llo \u2713'")
        self.assertEqual(res.exit_code, 0, res)
        self.assertEqual(len(res.stdout_lines), 2, res)
        self.assertTrue(res.stdout_lines[0].startswith("ok") and res.stdout_lines[0].endswith("end"), res)
        self.assertEqual(res.stdout_lines[1], "h\u00e9llo \u2713")

    # --- background, status, logs ------------------------------------------------------------

    def test_background_status_logs(self):
        t0 = time.monotonic()
        res = self.client.run(self.sid, "echo first; sleep 1; echo second >&2; exit 3", background=True)
        self.assertLess(time.monotonic() - t0, 5, "background returns at once")
        self.assertEqual(res.http_status, 200, res)
        cid = res.init_id
        self.assertRegex(cid, HEX32_RE)
        self.assertTrue(res.complete, res)
        self.assertEqual(res.stdout_lines, [], "background output goes to the logs, not the stream")
        r = self.client.command_status(self.sid, cid)
        self.assertEqual(r.status, 200, r)
        st = r.json()
        self.assertEqual(st["id"], cid)
        self.assertTrue(st["running"], st)
        parse_time(st["started_at"])
        # poll logs with the cursor
        cursor = 0
        text = ""
        cursors = []
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            r = self.client.command_logs(self.sid, cid, cursor)
            self.assertEqual(r.status, 200, r)
            nc = int(r.header("EXECD-COMMANDS-TAIL-CURSOR"))
            self.assertEqual(nc, cursor + len(r.body), "the cursor is a byte offset")
            text += r.text
            cursors.append(nc)
            cursor = nc
            if "first" in text and "second" in text:
                break
            time.sleep(0.1)
        self.assertIn("first\n", text)
        self.assertIn("second\n", text)
        self.assertLess(text.index("first"), text.index("second"))
        self.assertEqual(cursors, sorted(cursors))
        self.assertGreater(cursors[-1], 0)
        st = self.client.wait_command(self.sid, cid, timeout=15)
        self.assertFalse(st["running"])
        self.assertEqual(st["exit_code"], 3, st)
        parse_time(st["finished_at"])
        self.assertIn("echo first", st.get("content", "echo first"))
        # from the end: nothing new, same cursor; from 0: everything
        r = self.client.command_logs(self.sid, cid, cursor)
        self.assertEqual(r.body, b"")
        self.assertEqual(int(r.header("EXECD-COMMANDS-TAIL-CURSOR")), cursor)
        r = self.client.command_logs(self.sid, cid, 0)
        self.assertEqual(r.text, text)
        r = self.client.command_logs(self.sid, cid)
        self.assertEqual(r.text, text, "a missing cursor means 0")
        r = self.client.command_logs(self.sid, cid, 6)
        self.assertEqual(r.text, text[6:], "cursor mid-file")

    def test_logs_of_foreground_and_unknown(self):
        res = self.client.run(self.sid, "echo fg")
        r = self.client.command_logs(self.sid, res.init_id, 0)
        self.assertEqual(r.status, 400, "logs exist only for background commands: %r" % r)
        r = self.client.command_logs(self.sid, "0" * 32, 0)
        self.assertEqual(r.status, 400, "unknown id -> 400 like the reference: %r" % r)

    def test_status_unknown(self):
        r = self.client.command_status(self.sid, "0" * 32)
        self.assertEqual(r.status, 404, r)

    def test_status_of_foreground(self):
        res = self.client.run(self.sid, "exit 5")
        st = self.client.wait_command(self.sid, res.init_id, timeout=10)
        self.assertEqual(st["exit_code"], 5, st)

    # --- interrupt, timeout, disconnect ------------------------------------------------------

    def test_interrupt(self):
        s = self.stream("sleep 30")
        init = s.wait_for("init")
        self.assertIsNotNone(init, s.result)
        cid = init["text"]
        t0 = time.monotonic()
        r = self.client.interrupt(self.sid, cid)
        self.assertEqual(r.status, 200, r)
        box = {}
        th = threading.Thread(target=lambda: box.setdefault("res", s.finish()), daemon=True)
        th.start()
        th.join(10)
        self.assertFalse(th.is_alive(), "stream did not end within 10 s of the interrupt")
        res = box["res"]
        self.assertLess(time.monotonic() - t0, 6)
        self.assertIsNotNone(res.error, res)
        self.assertFalse(res.complete)
        st = self.client.wait_command(self.sid, cid, timeout=5)
        self.assertFalse(st["running"])
        # interrupting a finished command is an error, not a success
        r = self.client.interrupt(self.sid, cid)
        self.assertGreaterEqual(r.status, 400, r)
        r = self.client.delete(self.client.execd_path(self.sid, "/command"))
        self.assertEqual(r.status, 400, "missing id: %r" % r)

    def test_interrupt_background(self):
        res = self.client.run(self.sid, "sleep 30", background=True)
        cid = res.init_id
        r = self.client.interrupt(self.sid, cid)
        self.assertEqual(r.status, 200, r)
        st = self.client.wait_command(self.sid, cid, timeout=8)
        self.assertFalse(st["running"])
        self.assertNotEqual(st.get("exit_code"), 0, st)

    def test_timeout_kills(self):
        t0 = time.monotonic()
        res = self.client.run(self.sid, "echo started; sleep 30; echo never", timeout=1000)
        dt = time.monotonic() - t0
        self.assertLess(dt, 8, "timeout=1000ms did not stop the command (%.1fs)" % dt)
        self.assertGreater(dt, 0.9)
        self.assertEqual(res.stdout_lines, ["started"])
        self.assertIsNotNone(res.error, res)
        self.assertFalse(res.complete)
        self.assertNotEqual(res.exit_code, 0)
        # the whole process group died: no "sleep 30" left behind
        left = self.sh(self.sid, "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done")
        self.assertNotIn("sleep 30", left)

    def test_timeout_background(self):
        res = self.client.run(self.sid, "sleep 30", background=True, timeout=500)
        st = self.client.wait_command(self.sid, res.init_id, timeout=8)
        self.assertFalse(st["running"])
        self.assertNotEqual(st.get("exit_code"), 0, st)

    def test_disconnect_mid_stream(self):
        marker = "/tmp/corral-disc-%s" % secrets.token_hex(4)
        s = self.stream("sleep 2; echo done > %s; echo done" % marker)
        init = s.wait_for("init")
        self.assertIsNotNone(init)
        cid = init["text"]
        s.abort()
        st = self.client.wait_command(self.sid, cid, timeout=15)
        self.assertFalse(st["running"])
        self.assertEqual(st.get("exit_code"), 0, "the command finished normally: %r" % st)
        self.assertEqual(self.sh(self.sid, "cat %s" % marker), "done")
        # corrald and execd are still fine
        self.assertEqual(self.sh(self.sid, "echo ok"), "ok")
        self.assertEqual(self.client.get("/health").status, 200)

    def test_disconnect_background_logs_readable(self):
        s = self.stream("sleep 1; echo bg-done", background=True)
        init = s.wait_for("init")
        cid = init["text"]
        s.abort()
        st = self.client.wait_command(self.sid, cid, timeout=15)
        self.assertEqual(st.get("exit_code"), 0, st)
        r = self.client.command_logs(self.sid, cid, 0)
        self.assertEqual(r.text, "bg-done\n")

    # --- long and large ----------------------------------------------------------------------

    def test_ping_during_long_command(self):
        res = self.client.run(self.sid, "sleep 4; echo finished")
        pings = res.of_type("ping")
        self.assertGreaterEqual(len(pings), 1, res)
        self.assertEqual(pings[0].get("text"), "pong")
        self.assertEqual(res.stdout_lines, ["finished"])
        self.assertEqual(res.exit_code, 0)

    def test_streams_live(self):
        s = self.stream("echo early; sleep 3; echo late")
        t0 = time.monotonic()
        ev = s.wait_for("stdout")
        self.assertIsNotNone(ev)
        self.assertEqual(ev["text"], "early")
        self.assertLess(time.monotonic() - t0, 2.5, "the first line arrived only at the end")
        res = s.finish()
        self.assertEqual(res.stdout_lines, ["early", "late"])

    def test_large_output_in_order(self):
        res = self.client.run(self.sid, "seq 1 10000")
        self.assertEqual(res.exit_code, 0)
        self.assertEqual(len(res.stdout_lines), 10000)
        self.assertEqual(res.stdout_lines, [str(i) for i in range(1, 10001)])

    def test_long_line(self):
        res = self.client.run(self.sid, "head -c 300000 /dev/zero | tr '\\0' x; echo")
        self.assertEqual(res.exit_code, 0)
        self.assertEqual("".join(res.stdout_lines), "x" * 300000)

    def test_slow_reader_backpressure(self):
        """A client that stops reading a 100 MB stream must not make corrald or execd buffer it."""
        def rss_mib(pid):
            with open("/proc/%d/status" % pid) as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024.0
            return 0.0
        execd_pid = self.corrald.pid1(self.sid)
        base_c, base_e = rss_mib(self.corrald.proc.pid), rss_mib(execd_pid)
        s = self.stream("head -c 100000000 /dev/zero | tr '\\0' a | fold -w 1000")
        s.wait_for("init")
        peak_c = peak_e = 0.0
        for _ in range(8):
            time.sleep(0.5)
            peak_c = max(peak_c, rss_mib(self.corrald.proc.pid))
            peak_e = max(peak_e, rss_mib(execd_pid))
        n = 0
        while True:
            ev = s.next_event()
            if ev is None:
                break
            n += ev.get("type") == "stdout"
        self.assertEqual(n, 100000, "every line arrived after the pause")
        self.assertTrue(s.result.complete)
        self.assertLess(peak_c - base_c, 64, "corrald buffered an unread stream (%.0f -> %.0f MiB)" % (base_c, peak_c))
        self.assertLess(peak_e - base_e, 64, "execd buffered an unread stream (%.0f -> %.0f MiB)" % (base_e, peak_e))

    def test_keep_alive_many_commands(self):
        c = self.corrald.client()
        self.addCleanup(c.close)
        for i in range(60):
            res = c.run(self.sid, "echo n%d" % i)
            self.assertEqual(res.stdout_lines, ["n%d" % i], res)
            self.assertEqual(res.exit_code, 0)
            if i % 10 == 0:
                res = c.run(self.sid, "exit %d" % (i % 5 + 1))
                self.assertEqual(res.exit_code, i % 5 + 1)
        self.assertEqual(c.connects, 1, "every command reused the one keep-alive connection")

    def test_parallel_commands_one_sandbox(self):
        out = {}

        def worker(i):
            c = self.corrald.client()
            try:
                out[i] = c.run(self.sid, "sleep 0.%d; seq %d %d" % (i % 5, i * 1000, i * 1000 + 199))
            finally:
                c.close()
        ths = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
        for t in ths:
            t.start()
        for t in ths:
            t.join(60)
        self.assertEqual(len(out), 16)
        ids = set()
        for i, res in out.items():
            self.assertEqual(res.exit_code, 0, res)
            self.assertEqual(res.stdout_lines, [str(x) for x in range(i * 1000, i * 1000 + 200)])
            ids.add(res.init_id)
        self.assertEqual(len(ids), 16, "each execution has its own id")

    # --- the proxy route, beyond /command ----------------------------------------------------

    def test_proxy_large_bodies_both_ways(self):
        """A 24 MiB upload and download through corrald's proxy (files API), byte-exact."""
        import hashlib
        data = os.urandom(1024 * 1024) * 24
        boundary = "----corralIntegration" + secrets.token_hex(6)
        meta = json.dumps({"path": "/tmp/big-%s.bin" % boundary[-6:], "mode": 644}).encode()
        body = b"".join([
            b"--" + boundary.encode() + b"\r\n",
            b'Content-Disposition: form-data; name="metadata"; filename="metadata"\r\n',
            b"Content-Type: application/json\r\n\r\n", meta, b"\r\n",
            b"--" + boundary.encode() + b"\r\n",
            b'Content-Disposition: form-data; name="file"; filename="blob"\r\n',
            b"Content-Type: application/octet-stream\r\n\r\n", data, b"\r\n",
            b"--" + boundary.encode() + b"--\r\n"])
        path = json.loads(meta)["path"]
        r = self.client.request("POST", self.client.execd_path(self.sid, "/files/upload"), raw=body,
                                headers={"Content-Type": "multipart/form-data; boundary=" + boundary},
                                timeout=120)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(self.sh(self.sid, "sha256sum %s | cut -d' ' -f1" % path), hashlib.sha256(data).hexdigest())
        r = self.client.request("GET", self.client.execd_path(self.sid, "/files/download?path=" + path), timeout=120)
        self.assertEqual(r.status, 200, r)
        self.assertEqual(len(r.body), len(data))
        self.assertTrue(r.body == data, "download differs from upload")
        self.run_ok(self.sid, "rm -f %s" % path)

    def test_proxy_to_another_port(self):
        """/sandboxes/{id}/proxy/{port}/... reaches a server listening inside the sandbox."""
        port = 8000 + secrets.randbelow(900)
        tok = secrets.token_hex(4)
        self.run_ok(self.sid, "mkdir -p /tmp/www-%s && echo hello-%s > /tmp/www-%s/index.txt" % (tok, tok, tok))
        bg = self.client.run(self.sid, "cd /tmp/www-%s && exec python3 -m http.server %d --bind 127.0.0.1"
                             % (tok, port), background=True)
        self.addCleanup(self.client.interrupt, self.sid, bg.init_id)

        def fetch():
            r = self.client.get("/sandboxes/%s/proxy/%d/index.txt" % (self.sid, port))
            return r if r.status == 200 else None
        r = self.wait_until(fetch, 10, interval=0.2, msg="the in-sandbox server through the proxy")
        self.assertEqual(r.text, "hello-%s\n" % tok)
        r = self.client.get("/sandboxes/%s/proxy/%d/missing.txt?x=1" % (self.sid, port))
        self.assertEqual(r.status, 404, r)
        # nothing listens on this port: a clear error, not a hang or 200
        r = self.client.get("/sandboxes/%s/proxy/%d/" % (self.sid, port + 1))
        self.assertGreaterEqual(r.status, 500, r)

    def test_pid1_reaps_orphans(self):
        """Orphans re-parented to PID 1 (corral-execd) are reaped: no zombies pile up."""
        self.run_ok(self.sid, "for i in $(seq 1 20); do (sleep 0.2 &) ; done")

        def procs():
            """[pid, (comm), state, command line...] of every process (a zombie has none)."""
            out = self.sh(self.sid, "for d in /proc/[0-9]*; do "
                          "echo $(cut -d' ' -f1-3 $d/stat) $(tr '\\0' ' ' <$d/cmdline); "
                          "done 2>/dev/null")
            return [l.split() for l in out.splitlines() if l.strip()]
        # every orphan has exited (gone, or a zombie) -- a fixed second may not be enough on a
        # loaded host -- and then none stays a zombie (one seen the instant it exits, before
        # PID 1's reap, is not a leak: only one that stays is)
        self.wait_until(lambda: not [p for p in procs() if p[3:] == ["sleep", "0.2"]], 30,
                        msg="the orphans to exit")
        deadline = time.monotonic() + 5
        while True:
            zombies = [p for p in procs() if len(p) > 2 and p[2] == "Z"]
            if not zombies or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.assertEqual(zombies, [], "zombies PID 1 did not reap")

    def _raw(self, data, timeout=15):
        import socket
        s = socket.create_connection(("127.0.0.1", self.corrald.port), timeout=timeout)
        try:
            s.sendall(data)
            out = b""
            while True:
                b = s.recv(65536)
                if not b:
                    return out
                out += b
        finally:
            s.close()

    def test_proxy_http_variants(self):
        """Chunked request bodies, HTTP/1.0 and Connection: close all reach execd and end cleanly."""
        body = json.dumps({"command": "echo variant-ok"}).encode()
        path = ("/sandboxes/%s/proxy/44772/command" % self.sid).encode()
        chunked = (b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                   + b"%x\r\n" % 5 + body[:5] + b"\r\n" + b"%x\r\n" % (len(body) - 5) + body[5:]
                   + b"\r\n0\r\n\r\n")
        http10 = (b"POST " + path + b" HTTP/1.0\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        close = (b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        for name, req in (("chunked", chunked), ("http/1.0", http10), ("close", close)):
            out = self._raw(req)
            self.assertRegex(out.split(b"\r\n", 1)[0], rb"^HTTP/1\.[01] 200", "%s: %r" % (name, out[:200]))
            self.assertIn(b'"text":"variant-ok"', out, name)
            self.assertIn(b'"execution_complete"', out, name)
            if b"chunked" in out.split(b"\r\n\r\n", 1)[0].lower():
                self.assertTrue(out.endswith(b"0\r\n\r\n"), "%s: chunked body properly terminated" % name)

    def test_both_prefixes(self):
        for prefix in ("", "/v1"):
            r = self.client.post("%s/sandboxes/%s/proxy/44772/command" % (prefix, self.sid),
                                 {"command": "echo p"})
            self.assertEqual(r.status, 200, r)
            self.assertIn(b'"stdout"', r.body)

    def test_bad_command_body(self):
        r = self.client.post(self.client.execd_path(self.sid, "/command"), {"cwd": "/"})
        self.assertEqual(r.status, 400, r)
        self.assertIn("code", r.json())


if __name__ == "__main__":
    main()
