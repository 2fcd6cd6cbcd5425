#!/usr/bin/env python3
"""corral-execd on its own: started as an ordinary process on a unix socket in a temp dir (not
PID 1, no sandbox) and driven over real HTTP/1.1 on that socket, with http.client's strict parser
(a chunked body that is not properly terminated makes read() raise)."""

import http.server
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from unixhttp import UnixConnection  # noqa: E402

BUILD = os.environ.get("CORRAL_BUILD_DIR", os.path.join(os.path.dirname(__file__), "../../build"))
EXECD = os.path.join(BUILD, "corral-execd")
HEX32 = re.compile(r"^[0-9a-f]{32}$")


def parse_events(body):
    """Strict parse of the stream: every event is compact JSON followed by exactly "\\n\\n"."""
    text = body.decode()
    assert text == "" or text.endswith("\n\n"), "stream does not end with a blank line: %r" % text[-40:]
    events = []
    for chunk in text.split("\n\n")[:-1]:
        assert chunk and "\n" not in chunk, "bad framing: %r" % chunk
        ev = json.loads(chunk)
        assert json.dumps(ev, separators=(",", ":"), ensure_ascii=False) == chunk, "not compact: %r" % chunk
        assert isinstance(ev.get("timestamp"), int), ev
        events.append(ev)
    return events


def read_event(r):
    """Read one event from a live streamed response (chunked decoding by http.client)."""
    while True:
        line = r.readline()
        assert line, "stream ended"
        if line.strip():
            ev = json.loads(line)
            assert r.readline() == b"\n"
            return ev


class Execd:
    def __init__(self, entrypoint=None, preexec_fn=None, args=()):
        self.dir = tempfile.mkdtemp(prefix="execd-test-")
        self.run = os.path.join(self.dir, "run")
        os.mkdir(self.run)
        self.sock = os.path.join(self.run, "execd.sock")
        self.state = os.path.join(self.run, "execs")
        self.log = open(os.path.join(self.dir, "execd.log"), "w+")
        argv = [EXECD, "--socket", self.sock, "--state", self.state, "--log-level", "debug"] + list(args)
        if entrypoint:
            argv += ["--"] + entrypoint
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=self.log, preexec_fn=preexec_fn)
        deadline = time.time() + 10
        while time.time() < deadline:
            if self.proc.poll() is not None and not entrypoint:
                raise RuntimeError("execd exited: " + self.logtext())
            try:
                c = self.conn(timeout=2)
                c.request("GET", "/ping")
                r = c.getresponse()
                r.read()
                c.close()
                if r.status == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                return
            time.sleep(0.02)
        raise RuntimeError("execd did not answer /ping: " + self.logtext())

    def logtext(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def conn(self, timeout=30):
        return UnixConnection(self.sock, timeout)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        subprocess.run(["rm", "-rf", self.dir])


class ExecdTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.execd = Execd()

    @classmethod
    def tearDownClass(cls):
        cls.execd.stop()

    def request(self, method, path, body=None, conn=None, timeout=30):
        c = conn or self.execd.conn(timeout)
        headers = {}
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
            headers["Content-Type"] = "application/json"
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        data = r.read()  # strict: raises on a chunked body without its terminating chunk
        if conn is None:
            c.close()
        return r, data

    def run_cmd(self, body, conn=None, timeout=60):
        r, data = self.request("POST", "/command", body, conn=conn, timeout=timeout)
        self.assertEqual(r.status, 200, data)
        self.assertEqual(r.getheader("Content-Type"), "text/event-stream")
        return parse_events(data), data

    def json_of(self, r, data, status):
        self.assertEqual(r.status, status, data)
        return json.loads(data)

    def outputs(self, events, kind="stdout"):
        return [e["text"] for e in events if e["type"] == kind]

    # ----- basics -----

    def test_ping(self):
        r, data = self.request("GET", "/ping")
        self.assertEqual(r.status, 200)
        self.assertEqual(data, b"")

    def test_echo_byte_exact(self):
        events, raw = self.run_cmd({"command": "echo hello"})
        self.assertEqual([e["type"] for e in events], ["init", "stdout", "execution_complete"])
        init, out, done = events
        self.assertRegex(init["text"], HEX32)
        self.assertEqual(out["text"], "hello")
        self.assertIsInstance(done["execution_time"], int)
        expected = (
            '{"type":"init","text":"%s","timestamp":%d}\n\n'
            '{"type":"stdout","text":"hello","timestamp":%d}\n\n'
            '{"type":"execution_complete","execution_time":%d,"timestamp":%d}\n\n'
            % (init["text"], init["timestamp"], out["timestamp"], done["execution_time"], done["timestamp"])
        )
        self.assertEqual(raw.decode(), expected)
        now = int(time.time() * 1000)
        self.assertLess(abs(now - done["timestamp"]), 60000)

    def test_blank_line_framing(self):
        events, _ = self.run_cmd({"command": r"printf 'a\n\nb\n\n\nc'"})
        self.assertEqual(self.outputs(events), ["a", "\n", "b", "\n", "\n", "c"])
        self.assertEqual(events[-1]["type"], "execution_complete")

    def test_cr_and_crlf(self):
        events, _ = self.run_cmd({"command": r"printf 'x\r\ny\rz\n'"})
        self.assertEqual(self.outputs(events), ["x", "y", "z"])

    def test_exit_code(self):
        events, _ = self.run_cmd({"command": "echo before; exit 7"})
        types = [e["type"] for e in events]
        self.assertEqual(types, ["init", "stdout", "error"])
        self.assertNotIn("execution_complete", types)
        err = events[-1]["error"]
        self.assertEqual(err, {"ename": "CommandExecError", "evalue": "7", "traceback": []})
        r, data = self.request("GET", "/command/status/" + events[0]["text"])
        st = self.json_of(r, data, 200)
        self.assertEqual(st["exit_code"], 7)
        self.assertFalse(st["running"])

    def test_stderr(self):
        events, _ = self.run_cmd({"command": "echo out; echo oops >&2"})
        self.assertEqual(self.outputs(events, "stdout"), ["out"])
        self.assertEqual(self.outputs(events, "stderr"), ["oops"])

    def test_invalid_utf8_is_replaced(self):
        events, _ = self.run_cmd({"command": r"printf 'ok\377\n'"})
        self.assertEqual(self.outputs(events), ["ok\ufffd"])

    def test_cwd_and_envs(self):
        d = tempfile.mkdtemp(dir=self.execd.dir)
        os.mkdir(os.path.join(d, "sub"))
        events, _ = self.run_cmd({"command": 'pwd; echo "$FOO"', "cwd": d, "envs": {"FOO": "bar baz"}})
        self.assertEqual(self.outputs(events), [d, "bar baz"])
        # $VAR expansion in cwd (from the merged environment) and ~ (execd's HOME).
        events, _ = self.run_cmd({"command": "pwd", "cwd": "${D}/sub", "envs": {"D": d}})
        self.assertEqual(self.outputs(events), [os.path.join(d, "sub")])
        events, _ = self.run_cmd({"command": "pwd", "cwd": "~"})
        self.assertEqual(self.outputs(events), [os.path.realpath(os.environ.get("HOME", "/"))])
        # The environment is execd's, with envs merged over it.
        events, _ = self.run_cmd({"command": 'echo "$PATH"', "envs": {"PATH": "/bin:/usr/bin"}})
        self.assertEqual(self.outputs(events), ["/bin:/usr/bin"])

    def test_bad_cwd(self):
        r, data = self.request("POST", "/command", {"command": "true", "cwd": "/no/such/dir"})
        body = self.json_of(r, data, 400)
        self.assertEqual(body["code"], "INVALID_REQUEST_BODY")
        self.assertIn("cwd", body["message"])

    def test_child_environment(self):
        # stdin is /dev/null, own process group, default signals, oom_score_adj 0, no extra fds.
        events, _ = self.run_cmd({"command": "exec sh -c 'cat; grep -E \"SigIgn|SigBlk\" /proc/self/status; "
                                             "cat /proc/self/oom_score_adj; ls /proc/self/fd'"})
        out = self.outputs(events)
        self.assertEqual(sorted(out[:2]), ["SigBlk:\t0000000000000000", "SigIgn:\t0000000000000000"])
        self.assertEqual(out[2], "0")
        self.assertEqual(sorted(out[3:]), ["0", "1", "2", "3"])  # 3 = ls's own directory fd
        events, _ = self.run_cmd({"command": "echo $$; cut -d' ' -f5 /proc/$$/stat"})
        pid, pgid = self.outputs(events)
        self.assertEqual(pid, pgid)

    @unittest.skipUnless(os.geteuid() == 0, "needs root")
    def test_uid_gid(self):
        events, _ = self.run_cmd({"command": "id -u; id -g", "uid": 65534})
        out = self.outputs(events)
        self.assertEqual(out[0], "65534")
        events, _ = self.run_cmd({"command": "id -u; id -g", "uid": 65534, "gid": 1234})
        self.assertEqual(self.outputs(events), ["65534", "1234"])

    # ----- background, status, logs -----

    def test_background_status_logs(self):
        events, _ = self.run_cmd({"command": "echo one; sleep 0.5; echo two >&2", "background": True})
        self.assertEqual([e["type"] for e in events], ["init", "execution_complete"])
        cid = events[0]["text"]
        self.assertRegex(cid, HEX32)
        # First line: poll the logs until it shows up.
        deadline = time.time() + 5
        while True:
            r, data = self.request("GET", "/command/%s/logs?cursor=0" % cid)
            self.assertEqual(r.status, 200)
            if data or time.time() > deadline:
                break
            time.sleep(0.02)
        self.assertEqual(data, b"one\n")
        self.assertEqual(r.getheader("EXECD-COMMANDS-TAIL-CURSOR"), "4")
        self.assertTrue(r.getheader("Content-Type").startswith("text/plain"))
        r, data = self.request("GET", "/command/status/" + cid)
        st = self.json_of(r, data, 200)
        self.assertTrue(st["running"])
        self.assertEqual(st["id"], cid)
        self.assertEqual(st["content"], "echo one; sleep 0.5; echo two >&2")
        self.assertNotIn("exit_code", st)
        self.assertNotIn("finished_at", st)
        self.assertRegex(st["started_at"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
        # Long-poll until it ends.
        r, data = self.request("GET", "/command/status/%s?wait=10" % cid)
        st = self.json_of(r, data, 200)
        self.assertFalse(st["running"])
        self.assertEqual(st["exit_code"], 0)
        self.assertIn("finished_at", st)
        r, data = self.request("GET", "/command/%s/logs?cursor=4" % cid)
        self.assertEqual(data, b"two\n")
        self.assertEqual(r.getheader("EXECD-COMMANDS-TAIL-CURSOR"), "8")
        r, data = self.request("GET", "/command/%s/logs?cursor=8" % cid)
        self.assertEqual(data, b"")
        self.assertEqual(r.getheader("EXECD-COMMANDS-TAIL-CURSOR"), "8")
        # Missing or invalid cursor = 0.
        for q in ("", "?cursor=abc", "?cursor=-5"):
            r, data = self.request("GET", "/command/%s/logs%s" % (cid, q))
            self.assertEqual(data, b"one\ntwo\n", q)
            self.assertEqual(r.getheader("EXECD-COMMANDS-TAIL-CURSOR"), "8")
        # Output files on disk.
        with open(os.path.join(self.execd.state, cid, "output"), "rb") as f:
            self.assertEqual(f.read(), b"one\ntwo\n")
        # status.json's final version is written right after the reply (off the critical path).
        deadline = time.time() + 5
        while True:
            with open(os.path.join(self.execd.state, cid, "status.json")) as f:
                st = json.load(f)
            if "exit_code" in st or time.time() > deadline:
                break
            time.sleep(0.01)
        self.assertEqual((st["exit_code"], st["running"], st["background"]), (0, False, True))

    def test_background_output_readable_once_finished(self):
        # The status says finished before the files exist (they are created off the command's
        # path): the logs must already hold the whole output then.
        for i in range(20):
            events, _ = self.run_cmd({"command": "echo quick-%d; echo err-%d >&2" % (i, i), "background": True})
            cid = events[0]["text"]
            r, data = self.request("GET", "/command/status/%s?wait=10" % cid)
            self.assertFalse(self.json_of(r, data, 200)["running"])
            r, data = self.request("GET", "/command/%s/logs" % cid)
            self.assertEqual(data, b"quick-%d\nerr-%d\n" % (i, i))
            self.assertEqual(r.getheader("EXECD-COMMANDS-TAIL-CURSOR"), str(len(data)))

    def test_background_exit_code(self):
        events, _ = self.run_cmd({"command": "exit 3", "background": True})
        cid = events[0]["text"]
        r, data = self.request("GET", "/command/status/%s?wait=10" % cid)
        st = self.json_of(r, data, 200)
        self.assertEqual(st["exit_code"], 3)

    def test_status_long_poll_is_prompt(self):
        events, _ = self.run_cmd({"command": "sleep 0.3", "background": True})
        cid = events[0]["text"]
        t0 = time.time()
        r, data = self.request("GET", "/command/status/%s?wait=20" % cid)
        elapsed = time.time() - t0
        st = self.json_of(r, data, 200)
        self.assertFalse(st["running"])
        self.assertLess(elapsed, 2.0)
        # A wait that elapses returns the running status.
        events, _ = self.run_cmd({"command": "sleep 5", "background": True})
        t0 = time.time()
        r, data = self.request("GET", "/command/status/%s?wait=0.3" % events[0]["text"])
        self.assertTrue(self.json_of(r, data, 200)["running"])
        self.assertGreaterEqual(time.time() - t0, 0.25)
        r, data = self.request("GET", "/command/status/%s?wait=abc" % events[0]["text"])
        self.json_of(r, data, 400)

    def test_foreground_status_and_logs(self):
        events, raw = self.run_cmd({"command": "echo fg"})
        cid = events[0]["text"]
        r, data = self.request("GET", "/command/status/" + cid)
        st = self.json_of(r, data, 200)
        self.assertEqual((st["running"], st["exit_code"], st["content"]), (False, 0, "echo fg"))
        # Logs are for background commands only (reference: 400).
        r, data = self.request("GET", "/command/%s/logs" % cid)
        self.assertEqual(self.json_of(r, data, 400)["code"], "INVALID_REQUEST_BODY")
        # On disk: the compact transcript and the status, created just off the critical path,
        # after the last event; no per-stream copies of the output.
        d = os.path.join(self.execd.state, cid)
        deadline = time.time() + 5
        while time.time() < deadline and not os.path.exists(os.path.join(d, "status.json")):
            time.sleep(0.01)
        self.assertEqual(sorted(os.listdir(d)), ["status.json", "transcript"])
        # Replaying it (a re-attach by id) gives the stream byte for byte.
        _, replay = self.run_cmd({"command": "ignored", "id": cid})
        self.assertEqual(replay, raw)

    def test_unknown_ids(self):
        unknown = "0" * 32
        r, data = self.request("GET", "/command/status/" + unknown)
        self.assertEqual(self.json_of(r, data, 404)["code"], "INVALID_REQUEST_BODY")
        r, data = self.request("GET", "/command/status/not-an-id")
        self.json_of(r, data, 404)
        r, data = self.request("GET", "/command/%s/logs?cursor=0" % unknown)
        self.json_of(r, data, 400)

    def test_orphans_are_reaped(self):
        # The subshell exits at once; its sleep is re-parented to execd (PID 1 in a sandbox, a
        # child subreaper on a host) and must not stay a zombie when it ends.
        events, _ = self.run_cmd({"command": "( sleep 0.3 >/dev/null 2>&1 & echo $! )"})
        pid = int(self.outputs(events)[0])
        deadline = time.time() + 5
        state = None
        while time.time() < deadline:
            try:
                with open("/proc/%d/stat" % pid) as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except FileNotFoundError:
                state = None
                break
            time.sleep(0.05)
        self.assertIsNone(state, "orphan %d still exists (state %s)" % (pid, state))

    def test_background_child_holding_stdout(self):
        # The command ends when its shell ends, even if a child it left behind keeps stdout open.
        t0 = time.time()
        events, _ = self.run_cmd({"command": "echo a; sleep 5 & echo b"})
        self.assertLess(time.time() - t0, 3)
        self.assertEqual(self.outputs(events), ["a", "b"])
        self.assertEqual(events[-1]["type"], "execution_complete")

    # ----- timeouts, interrupts, disconnects -----

    def test_timeout_kills_group(self):
        pidfile = os.path.join(self.execd.dir, "bgpid")
        t0 = time.time()
        events, _ = self.run_cmd({"command": "sleep 30 & echo $! > %s; echo started; wait" % pidfile,
                                  "timeout": 500})
        self.assertLess(time.time() - t0, 5)
        self.assertEqual(self.outputs(events), ["started"])
        self.assertEqual(events[-1]["type"], "error")
        self.assertEqual(events[-1]["error"]["evalue"], "137")  # 128 + SIGKILL
        with open(pidfile) as f:
            pid = int(f.read())
        deadline = time.time() + 5
        while os.path.exists("/proc/%d" % pid) and time.time() < deadline:
            time.sleep(0.05)
        self.assertFalse(os.path.exists("/proc/%d" % pid), "the group's other process survived")

    def test_interrupt(self):
        c = self.execd.conn()
        c.request("POST", "/command", json.dumps({"command": "sleep 30"}))
        r = c.getresponse()
        self.assertEqual(r.status, 200)
        init = read_event(r)
        cid = init["text"]
        self.assertRegex(cid, HEX32)
        t0 = time.time()
        rr, data = self.request("DELETE", "/command?id=" + cid)
        self.assertEqual(rr.status, 200, data)
        rest = r.read()
        self.assertLess(time.time() - t0, 5)
        events = [json.loads(x) for x in rest.decode().split("\n\n") if x.strip().startswith("{")]
        self.assertEqual(events[-1]["type"], "error")
        self.assertEqual(events[-1]["error"]["evalue"], "143")  # 128 + SIGTERM
        c.close()
        # Interrupting something that is no longer running.
        rr, data = self.request("DELETE", "/command?id=" + cid)
        self.assertEqual(self.json_of(rr, data, 500)["code"], "RUNTIME_ERROR")
        rr, data = self.request("DELETE", "/command")
        self.assertEqual(self.json_of(rr, data, 400)["code"], "MISSING_QUERY")

    def test_interrupt_escalates_to_sigkill(self):
        c = self.execd.conn()
        c.request("POST", "/command", json.dumps({"command": "trap '' TERM; echo trapped; sleep 30"}))
        r = c.getresponse()
        cid = read_event(r)["text"]
        # the shell ignores SIGTERM once it says so (a fixed 0.2 s could come before its trap on
        # a loaded host, and SIGTERM alone would end it: 143)
        while read_event(r).get("text") != "trapped":
            pass
        t0 = time.time()
        rr, data = self.request("DELETE", "/command?id=" + cid)
        self.assertEqual(rr.status, 200, data)
        rest = r.read()
        self.assertLess(time.time() - t0, 6)
        events = [json.loads(x) for x in rest.decode().split("\n\n") if x.strip().startswith("{")]
        self.assertEqual(events[-1]["error"]["evalue"], "137")
        c.close()

    def test_disconnect_then_readable(self):
        c = self.execd.conn()
        c.request("POST", "/command", json.dumps({"command": "echo first; sleep 1; echo second; exit 4"}))
        r = c.getresponse()
        cid = read_event(r)["text"]
        c.sock.shutdown(socket.SHUT_RDWR)
        c.close()
        r, data = self.request("GET", "/command/status/%s?wait=15" % cid)
        st = self.json_of(r, data, 200)
        self.assertFalse(st["running"])
        self.assertEqual(st["exit_code"], 4)
        # Re-attach by id replays the whole stream.
        events, _ = self.run_cmd({"command": "ignored", "id": cid})
        self.assertEqual(events[0], {"type": "init", "text": cid, "timestamp": events[0]["timestamp"]})
        self.assertEqual(self.outputs(events), ["first", "second"])
        self.assertEqual(events[-1]["error"]["evalue"], "4")
        r, data = self.request("GET", "/ping")
        self.assertEqual(r.status, 200)

    def test_client_id_exactly_once(self):
        cid = os.urandom(16).hex()
        counter = os.path.join(self.execd.dir, "runs-" + cid)
        cmd = "echo run >> %s; echo start; sleep 1; echo end" % counter
        # First submit: disconnect right after init.
        c = self.execd.conn()
        c.request("POST", "/command", json.dumps({"command": cmd, "id": cid}))
        r = c.getresponse()
        self.assertEqual(read_event(r)["text"], cid)
        c.close()
        # Retry while it runs: re-attaches, sees the whole output, ends when it ends.
        events, _ = self.run_cmd({"command": cmd, "id": cid})
        self.assertEqual(events[0]["text"], cid)
        self.assertEqual(self.outputs(events), ["start", "end"])
        self.assertEqual(events[-1]["type"], "execution_complete")
        # Retry after it finished, and as a background submit.
        events, _ = self.run_cmd({"command": cmd, "id": cid})
        self.assertEqual(self.outputs(events), ["start", "end"])
        events, _ = self.run_cmd({"command": cmd, "id": cid, "background": True})
        self.assertEqual([e["type"] for e in events], ["init", "execution_complete"])
        self.assertEqual(events[0]["text"], cid)
        with open(counter) as f:
            self.assertEqual(f.read(), "run\n")
        r, data = self.request("GET", "/command/status/" + cid)
        self.assertEqual(self.json_of(r, data, 200)["id"], cid)
        # A new background id gets status and logs under that id.
        bid = os.urandom(16).hex()
        events, _ = self.run_cmd({"command": "echo x", "id": bid, "background": True})
        self.assertEqual(events[0]["text"], bid)
        r, data = self.request("GET", "/command/status/%s?wait=10" % bid)
        self.assertEqual(self.json_of(r, data, 200)["exit_code"], 0)

    def test_lagging_and_reattached_clients_get_the_same_stream(self):
        # A client that reads slowly falls behind and is fed from the transcript; one that
        # re-attaches mid-run replays it; one that re-attaches after the end replays it all.
        # All get the bytes a fast client would have, pings aside.
        cid = os.urandom(16).hex()
        cmd = ("for i in $(seq 1 40); do seq -f 'out %g' 1 3000; printf 'x%.0s' $(seq 1 300); "
               "echo; echo err $i >&2; printf '\\r\\n\\n'; sleep 0.02; done; "
               "head -c 200000 /dev/zero | tr '\\0' 'z'; echo; exit 5")

        def strip_pings(raw):
            return b"".join(e + b"\n\n" for e in raw.split(b"\n\n")[:-1] if b'"type":"ping"' not in e)

        slow = socket.socket(socket.AF_UNIX)
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.connect(self.execd.sock)
        body = json.dumps({"command": cmd, "id": cid}).encode()
        slow.sendall(b"POST /command HTTP/1.0\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        slow_raw = b""
        while len(slow_raw) < 4096:
            slow_raw += slow.recv(512)
            time.sleep(0.01)
        events, mid = self.run_cmd({"command": "ignored", "id": cid})
        slow.settimeout(60)
        while True:
            b = slow.recv(1 << 16)
            if not b:
                break
            slow_raw += b
        slow.close()
        slow_body = slow_raw.split(b"\r\n\r\n", 1)[1]
        _, after = self.run_cmd({"command": "ignored", "id": cid})
        self.assertEqual(events[-1]["error"]["evalue"], "5")
        self.assertEqual(len(self.outputs(events, "stderr")), 40)
        self.assertEqual(strip_pings(mid), after)
        self.assertEqual(strip_pings(slow_body), after)

    def test_client_id_with_unreadable_record(self):
        cid = os.urandom(16).hex()
        os.makedirs(os.path.join(self.execd.state, cid))
        marker = os.path.join(self.execd.dir, "ran-" + cid)
        r, data = self.request("POST", "/command", {"command": "touch " + marker, "id": cid})
        self.assertEqual(self.json_of(r, data, 409)["code"], "RUNTIME_ERROR")
        self.assertFalse(os.path.exists(marker))
        r, data = self.request("GET", "/ping")
        self.assertEqual(r.status, 200)

    def test_ping_events(self):
        t0 = time.time()
        events, _ = self.run_cmd({"command": "sleep 3.5; echo late"})
        self.assertGreaterEqual(time.time() - t0, 3.4)
        pings = [e for e in events if e["type"] == "ping"]
        self.assertGreaterEqual(len(pings), 1)
        self.assertEqual(set(pings[0].keys()), {"type", "text", "timestamp"})
        self.assertEqual(pings[0]["text"], "pong")
        self.assertEqual(events[0]["type"], "init")
        self.assertEqual(events[-1]["type"], "execution_complete")

    def test_stream_is_live(self):
        # Events arrive as they happen, not when the command ends.
        c = self.execd.conn()
        c.request("POST", "/command", json.dumps({"command": "echo now; sleep 5; echo later"}))
        r = c.getresponse()
        t0 = time.time()
        got = b""
        while b'"now"' not in got:
            got += r.readline()
        # well before the command's end (a bound of 1 s of a 2 s sleep was near what a loaded
        # host under ASan takes to start a shell)
        self.assertLess(time.time() - t0, 4.0)
        r.read()
        c.close()

    # ----- keep-alive, framing, validation -----

    def test_keepalive_many_commands(self):
        c = self.execd.conn()
        for i in range(20):
            events, _ = self.run_cmd({"command": "echo %d" % i}, conn=c)
            self.assertEqual(self.outputs(events), [str(i)])
            r, data = self.request("GET", "/ping", conn=c)
            self.assertEqual(r.status, 200)
        c.close()

    def test_large_output(self):
        events, _ = self.run_cmd({"command": "seq 1 20000; head -c 200000 /dev/zero | tr '\\0' x"})
        out = self.outputs(events)
        self.assertEqual(out[:20000], [str(i) for i in range(1, 20001)])
        self.assertEqual("".join(out[20000:]), "x" * 200000)  # a long line comes in pieces
        self.assertEqual(events[-1]["type"], "execution_complete")

    def test_validation(self):
        cases = [
            (b"{not json", "JSON"),
            (b"", "empty"),
            (b"[]", "object"),
            ({}, "command"),
            ({"command": ""}, "command"),
            ({"command": 5}, "command"),
            ({"command": "true", "id": "XYZ"}, "id"),
            ({"command": "true", "id": "A" * 32}, "id"),
            ({"command": "true", "timeout": -1}, "timeout"),
            ({"command": "true", "timeout": "5"}, "timeout"),
            ({"command": "true", "background": "yes"}, "background"),
            ({"command": "true", "gid": 5}, "gid"),
            ({"command": "true", "uid": -1}, "uid"),
            ({"command": "true", "envs": {"A": 1}}, "envs"),
            ({"command": "true", "envs": ["A"]}, "envs"),
            ({"command": "true", "cwd": 7}, "cwd"),
        ]
        for body, word in cases:
            r, data = self.request("POST", "/command", body)
            self.assertEqual(r.status, 400, (body, data))
            err = json.loads(data)
            self.assertEqual(err["code"], "INVALID_REQUEST_BODY", body)
            self.assertIn(word, err["message"], body)

    def test_body_limit(self):
        r, data = self.request("POST", "/command", {"command": "echo " + "x" * (2 << 20)})
        self.assertEqual(r.status, 413, data[:200])

    def test_unknown_route(self):
        r, data = self.request("GET", "/nope")
        self.assertEqual(r.status, 404)
        self.assertIn("code", json.loads(data))
        r, data = self.request("PUT", "/command")
        self.assertIn(r.status, (404, 405))
        self.assertIn("code", json.loads(data))

    def test_concurrent_streams(self):
        results = {}

        def worker(i):
            events, _ = self.run_cmd({"command": "sleep 0.3; echo w%d" % i})
            results[i] = self.outputs(events)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(20)]
        t0 = time.time()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertLess(time.time() - t0, 5)
        self.assertEqual(results, {i: ["w%d" % i] for i in range(20)})


    # ----- bash sessions and metrics -----

    def new_session(self, body=None):
        r, data = self.request("POST", "/session", body if body is not None else b"")
        sid = self.json_of(r, data, 200)["session_id"]
        self.assertRegex(sid, HEX32)
        return sid

    def session_run(self, sid, body):
        r, data = self.request("POST", "/session/%s/run" % sid, body)
        self.assertEqual(r.status, 200, data)
        events = parse_events(data)
        self.assertEqual(events[0], {"type": "init", "text": sid, "timestamp": events[0]["timestamp"]})
        return events

    def test_session_state_persists(self):
        d = tempfile.mkdtemp(dir=self.execd.dir)
        sid = self.new_session({"cwd": d})
        ev = self.session_run(sid, {"command": "pwd; export CORRAL_X=42; mkdir -p sub; cd sub; printf tail"})
        self.assertEqual(self.outputs(ev), [d, "tail"])
        self.assertEqual(ev[-1]["type"], "execution_complete")
        ev = self.session_run(sid, {"command": 'pwd; echo "x=$CORRAL_X"; echo bad >&2; false'})
        self.assertEqual(self.outputs(ev), [os.path.join(d, "sub"), "x=42"])
        self.assertEqual(self.outputs(ev, "stderr"), ["bad"])
        self.assertEqual(ev[-1]["error"]["evalue"], "1")
        # A per-run cwd applies to that run.
        ev = self.session_run(sid, {"command": "pwd", "cwd": "/"})
        self.assertEqual(self.outputs(ev), ["/"])
        # Commands cannot read the session's control pipe.
        ev = self.session_run(sid, {"command": "cat; echo after"})
        self.assertEqual(self.outputs(ev), ["after"])
        r, data = self.request("DELETE", "/session/" + sid)
        self.assertEqual(r.status, 200)
        r, data = self.request("POST", "/session/%s/run" % sid, {"command": "true"})
        self.assertEqual(self.json_of(r, data, 404)["code"], "CONTEXT_NOT_FOUND")
        r, data = self.request("DELETE", "/session/" + sid)
        self.assertEqual(self.json_of(r, data, 404)["code"], "CONTEXT_NOT_FOUND")

    def test_session_exit_and_timeout(self):
        sid = self.new_session()
        ev = self.session_run(sid, {"command": "echo bye; exit 3"})
        self.assertEqual(self.outputs(ev), ["bye"])
        self.assertEqual(ev[-1]["error"]["evalue"], "3")
        r, data = self.request("POST", "/session/%s/run" % sid, {"command": "true"})
        self.json_of(r, data, 404)
        sid = self.new_session()
        t0 = time.time()
        ev = self.session_run(sid, {"command": "sleep 30", "timeout": 300})
        self.assertLess(time.time() - t0, 5)
        self.assertEqual(ev[-1]["error"]["evalue"], "137")
        r, data = self.request("POST", "/session/%s/run" % sid, {})
        self.assertIn(r.status, (400, 404))

    def test_session_interrupt_via_command_delete(self):
        sid = self.new_session()
        c = self.execd.conn()
        c.request("POST", "/session/%s/run" % sid, json.dumps({"command": "sleep 30"}))
        r = c.getresponse()
        self.assertEqual(read_event(r)["text"], sid)
        time.sleep(0.1)
        rr, data = self.request("DELETE", "/command?id=" + sid)
        self.assertEqual(rr.status, 200, data)
        rest = r.read()
        events = [json.loads(x) for x in rest.decode().split("\n\n") if x.strip().startswith("{")]
        self.assertEqual(events[-1]["type"], "error")
        c.close()

    def test_session_validation(self):
        sid = self.new_session()
        for body in (b"nope", {}, {"command": ""}, {"command": "true", "timeout": "x"}):
            r, data = self.request("POST", "/session/%s/run" % sid, body)
            self.assertEqual(self.json_of(r, data, 400)["code"], "INVALID_REQUEST_BODY", body)
        r, data = self.request("POST", "/session", {"cwd": "/no/such/dir"})
        self.json_of(r, data, 400)
        self.request("DELETE", "/session/" + sid)

    def test_metrics(self):
        r, data = self.request("GET", "/metrics")
        m = self.json_of(r, data, 200)
        self.assertEqual(set(m), {"cpu_count", "cpu_used_pct", "mem_total_mib", "mem_used_mib", "timestamp"})
        self.assertGreater(m["cpu_count"], 0)
        self.assertTrue(0 <= m["cpu_used_pct"] <= 100)
        self.assertTrue(0 <= m["mem_used_mib"] <= m["mem_total_mib"])
        self.assertLess(abs(m["timestamp"] - time.time() * 1000), 120000)


class ProxyTest(unittest.TestCase):
    """/proxy/{port}/... reaches an HTTP server on 127.0.0.1:{port} (reference §2.1)."""

    @classmethod
    def setUpClass(cls):
        import http.server

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def reply(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                if self.path.startswith("/stream"):
                    self.send_response(200)
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for part in (b"first\n", b"second\n"):
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                        self.wfile.flush()
                        time.sleep(3.0)
                    self.wfile.write(b"0\r\n\r\n")
                    return
                if self.path.startswith("/big"):
                    data = b"z" * (4 << 20)
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                out = json.dumps({"method": self.command, "path": self.path, "body": body.decode(),
                                  "x_test": self.headers.get("X-Test"), "host": self.headers.get("Host"),
                                  "xff": self.headers.get("X-Forwarded-For")}).encode()
                self.send_response(201)
                self.send_header("Content-Type", "application/json")
                self.send_header("X-Backend", "yes")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = do_POST = do_PUT = do_DELETE = reply

        cls.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        cls.port = cls.server.server_address[1]
        threading.Thread(target=cls.server.serve_forever, daemon=True).start()
        cls.execd = Execd()

    @classmethod
    def tearDownClass(cls):
        cls.execd.stop()
        cls.server.shutdown()

    def test_forwarded(self):
        c = self.execd.conn()
        c.request("POST", "/proxy/%d/echo/a%%20b?x=1&y=2" % self.port, body=b"payload",
                  headers={"X-Test": "t1", "Content-Type": "text/plain"})
        r = c.getresponse()
        data = r.read()
        self.assertEqual(r.status, 201, data)
        self.assertEqual(r.getheader("X-Backend"), "yes")
        got = json.loads(data)
        self.assertEqual(got["method"], "POST")
        self.assertEqual(got["path"], "/echo/a%20b?x=1&y=2")
        self.assertEqual(got["body"], "payload")
        self.assertEqual(got["x_test"], "t1")
        self.assertTrue(got["xff"])
        # Keep-alive: the same client connection goes on working.
        c.request("GET", "/proxy/%d" % self.port)
        r = c.getresponse()
        self.assertEqual(json.loads(r.read())["path"], "/")
        c.request("GET", "/ping")
        self.assertEqual(c.getresponse().status, 200)
        c.close()

    def test_nothing_listening(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
        s.close()
        c = self.execd.conn()
        c.request("GET", "/proxy/%d/" % free)
        r = c.getresponse()
        self.assertEqual(r.status, 502)
        self.assertEqual(r.read(), b"Bad Gateway")
        for bad in ("/proxy/0/", "/proxy/70000/", "/proxy/abc/", "/proxy"):
            c.request("GET", bad)
            r = c.getresponse()
            r.read()
            self.assertEqual(r.status, 400, bad)
        c.close()

    def test_streamed_and_large(self):
        c = self.execd.conn()
        c.request("GET", "/proxy/%d/stream" % self.port)
        r = c.getresponse()
        t0 = time.time()
        self.assertEqual(r.readline(), b"first\n")
        self.assertLess(time.time() - t0, 2.5)  # arrives before the backend is done (3 s)
        self.assertEqual(r.read(), b"second\n")
        c.request("GET", "/proxy/%d/big" % self.port)
        r = c.getresponse()
        self.assertEqual(r.getheader("Content-Length"), str(4 << 20))
        self.assertEqual(r.read(), b"z" * (4 << 20))
        c.close()


class ProxyKeepAliveBackendTest(unittest.TestCase):
    """A single-threaded HTTP/1.1 backend that keeps each connection open (Python's HTTPServer
    with protocol_version HTTP/1.1). Every request through /proxy/{port} is answered: the backend
    connection goes back to a pool and is reused, not left open and forgotten (before the shared
    reverse proxy, the second request waited forever behind the first one's idle connection)."""

    @classmethod
    def setUpClass(cls):
        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                out = self.path.encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        cls.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        cls.port = cls.server.server_address[1]
        threading.Thread(target=cls.server.serve_forever, daemon=True).start()
        cls.execd = Execd()

    @classmethod
    def tearDownClass(cls):
        cls.execd.stop()
        cls.server.shutdown()

    def test_sequential_requests(self):
        for i in range(20):
            c = self.execd.conn(timeout=5)
            c.request("GET", "/proxy/%d/n%d" % (self.port, i))
            r = c.getresponse()
            self.assertEqual((r.status, r.read()), (200, b"/n%d" % i))
            c.close()
        nfd = len(os.listdir("/proc/%d/fd" % self.execd.proc.pid))
        self.assertLess(nfd, 20)


class ProxyUpgradeTest(unittest.TestCase):
    """Connection: Upgrade (WebSocket) through /proxy/{port}/ becomes a byte splice both ways."""

    @classmethod
    def setUpClass(cls):
        cls.srv = socket.socket()
        cls.srv.bind(("127.0.0.1", 0))
        cls.srv.listen(16)
        cls.port = cls.srv.getsockname()[1]
        threading.Thread(target=cls.accept_loop, daemon=True).start()
        cls.execd = Execd()

    @classmethod
    def tearDownClass(cls):
        cls.execd.stop()
        cls.srv.close()

    @classmethod
    def accept_loop(cls):
        while True:
            try:
                c, _ = cls.srv.accept()
            except OSError:
                return
            threading.Thread(target=cls.upgrade_and_shout_quietly, args=(c,), daemon=True).start()

    @classmethod
    def upgrade_and_shout_quietly(cls, c):
        try:
            cls.upgrade_and_shout(c)
        except OSError:
            pass  # a client that left at once (test_refused_and_abandoned)

    @staticmethod
    def upgrade_and_shout(c):
        """Answer 101 (echoing the request path in X-Path), then echo every byte upper-cased."""
        data = b""
        while b"\r\n\r\n" not in data:
            d = c.recv(4096)
            if not d:
                return
            data += d
        head, rest = data.split(b"\r\n\r\n", 1)
        c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  b"X-Path: " + head.split(b" ")[1] + b"\r\n\r\n")
        if rest:
            c.sendall(rest.upper())
        while True:
            d = c.recv(4096)
            if not d:
                break
            c.sendall(d.upper())
        c.close()

    def raw(self, request):
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(10)
        s.connect(self.execd.sock)
        s.sendall(request)
        return s

    def upgrade(self, port, early=b""):
        return self.raw(b"GET /proxy/%d/chat?room=1 HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                        b"Connection: Upgrade\r\nSec-WebSocket-Key: abc\r\n\r\n" % port + early)

    def test_splice(self):
        for early in (b"", b"early"):
            s = self.upgrade(self.port, early)
            resp = b""
            while b"\r\n\r\n" not in resp:
                resp += s.recv(4096)
            head, got = resp.split(b"\r\n\r\n", 1)
            self.assertTrue(head.startswith(b"HTTP/1.1 101"), head)
            self.assertIn(b"X-Path: /chat?room=1", head)
            s.sendall(b"hello")
            while len(got) < len(early) + 5:
                got += s.recv(4096)
            self.assertEqual(got, early.upper() + b"HELLO")
            s.close()

    def test_refused_and_abandoned(self):
        free = socket.socket()
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
        free.close()
        s = self.upgrade(port)
        self.assertTrue(s.recv(4096).startswith(b"HTTP/1.1 502"))
        s.close()
        for _ in range(10):  # clients that leave at once
            self.upgrade(self.port).close()
        s = self.raw(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertTrue(s.recv(100).startswith(b"HTTP/1.1 200"))
        s.close()
        # their descriptors go (a fixed 0.3 s could be short for an ASan execd on a loaded host)
        deadline = time.time() + 10
        while True:
            nfd = len(os.listdir("/proc/%d/fd" % self.execd.proc.pid))
            if nfd < 20 or time.time() > deadline:
                break
            time.sleep(0.05)
        self.assertLess(nfd, 20)


class EntrypointTest(unittest.TestCase):
    def test_entrypoint_exit_writes_exit_json(self):
        e = Execd(entrypoint=["sh", "-c", "sleep 0.5; exit 3"])
        try:
            self.assertEqual(e.proc.wait(10), 3)
            with open(os.path.join(e.run, "exit.json")) as f:
                ex = json.load(f)
            self.assertEqual(ex["reason"], "EntrypointExited")
            self.assertEqual(ex["exitCode"], 3)
            self.assertIsInstance(ex["message"], str)
        finally:
            e.stop()

    def test_sigterm_is_forwarded_to_entrypoint(self):
        e = Execd(entrypoint=["sleep", "30"])
        try:
            e.proc.send_signal(signal.SIGTERM)
            self.assertEqual(e.proc.wait(10), 128 + signal.SIGTERM)
            with open(os.path.join(e.run, "exit.json")) as f:
                ex = json.load(f)
            self.assertEqual((ex["reason"], ex["exitCode"]), ("EntrypointExited", 143))
        finally:
            e.stop()

    def test_sigterm_without_entrypoint(self):
        e = Execd()
        try:
            # A running command is killed when execd goes away.
            r = e.conn()
            r.request("POST", "/command", json.dumps({"command": "sleep 30", "background": True}))
            resp = r.getresponse()
            cid = parse_events(resp.read())[0]["text"]
            r.close()
            e.proc.send_signal(signal.SIGTERM)
            self.assertEqual(e.proc.wait(10), 0)
            with open(os.path.join(e.run, "exit.json")) as f:
                ex = json.load(f)
            self.assertEqual(ex["reason"], "ExecdExited")
            self.assertTrue(os.path.exists(os.path.join(e.state, cid, "status.json")))
        finally:
            e.stop()

    def test_state_survives_an_execd_restart(self):
        # Executions recorded by one execd are served by the next on the same state dir: status,
        # a replay by id (a foreground command killed with execd ends in error 137, its output
        # and cut marker kept), the background logs; and their ids are never run again.
        e = Execd(args=["--output-cap", "100"])
        fid, bid = os.urandom(16).hex(), os.urandom(16).hex()
        try:
            c = e.conn()
            c.request("POST", "/command", json.dumps({"command": "seq 1 100; sleep 30", "id": fid}))
            r = c.getresponse()
            seen = []
            while len(seen) < 3:
                seen.append(read_event(r))
            c.close()
            c = e.conn()
            c.request("POST", "/command", json.dumps({"command": "echo bg; exit 4", "background": True, "id": bid}))
            c.getresponse().read()
            c.request("GET", "/command/status/%s?wait=10" % bid)
            self.assertEqual(json.loads(c.getresponse().read())["exit_code"], 4)
            c.close()
            time.sleep(0.2)
            e.proc.send_signal(signal.SIGTERM)
            self.assertEqual(e.proc.wait(10), 0)
            e2 = subprocess.Popen([EXECD, "--socket", e.sock, "--state", e.state], stderr=subprocess.DEVNULL)
            try:
                # until it answers (its socket's file may be there before it listens, or left by
                # the first one: a fixed 0.1 s could be too short for an ASan start on a loaded host)
                deadline = time.time() + 20
                while True:
                    try:
                        c = UnixConnection(e.sock, 2)
                        c.request("GET", "/ping")
                        if c.getresponse().status == 200:
                            c.close()
                            break
                        c.close()
                    except OSError:
                        pass
                    self.assertLess(time.time(), deadline, "the second execd never answered")
                    time.sleep(0.02)
                c = e.conn()
                c.request("POST", "/command", json.dumps({"command": "touch /nonexistent/x", "id": fid}))
                events = parse_events(c.getresponse().read())
                self.assertEqual(events[:3], seen)
                self.assertEqual([x["text"] for x in events if x["type"] == "stdout"],
                                 [str(i) for i in range(1, 37)] + ["3"])
                self.assertEqual([x["text"] for x in events if x["type"] == "stderr"][0],
                                 "[corral-execd: output cap of 100 bytes reached; the rest of the output is dropped]")
                self.assertEqual(events[-1]["error"]["evalue"], "137")
                c.request("GET", "/command/status/" + fid)
                st = json.loads(c.getresponse().read())
                self.assertEqual((st["exit_code"], st["error"], st["output_truncated"], st["output_cap"]),
                                 (137, "killed: corral-execd exited", True, 100))
                c.request("GET", "/command/%s/logs?cursor=1" % bid)
                r = c.getresponse()
                self.assertEqual(r.read(), b"g\n")
                self.assertEqual(r.getheader("EXECD-COMMANDS-TAIL-CURSOR"), "3")
                c.request("POST", "/command", json.dumps({"command": "exit 9", "background": True, "id": bid}))
                self.assertEqual([x["type"] for x in parse_events(c.getresponse().read())], ["init", "execution_complete"])
                c.request("GET", "/command/status/" + bid)
                self.assertEqual(json.loads(c.getresponse().read())["exit_code"], 4)
                c.close()
            finally:
                e2.terminate()
                e2.wait()
        finally:
            e.stop()

    def test_stale_socket_and_mode(self):
        e = Execd()
        try:
            mode = os.stat(e.sock).st_mode & 0o777
            self.assertEqual(mode, 0o600)
            e.proc.kill()
            e.proc.wait()
            self.assertTrue(os.path.exists(e.sock))  # stale
            e2 = subprocess.Popen([EXECD, "--socket", e.sock, "--state", e.state], stderr=subprocess.DEVNULL)
            try:
                deadline = time.time() + 5
                ok = False
                while time.time() < deadline and not ok:
                    try:
                        c = UnixConnection(e.sock, 2)
                        c.request("GET", "/ping")
                        ok = c.getresponse().status == 200
                        c.close()
                    except OSError:
                        time.sleep(0.02)
                self.assertTrue(ok)
            finally:
                e2.terminate()
                e2.wait()
        finally:
            e.stop()

    def test_running_limit_under_low_fd_limit(self):
        import resource

        def low_nofile():
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            resource.setrlimit(resource.RLIMIT_NOFILE, (256, max(hard, 4096)))

        e = Execd(preexec_fn=low_nofile)
        try:
            c = e.conn(60)
            c.request("POST", "/command", json.dumps({"command": "ulimit -Sn"}))
            events = parse_events(c.getresponse().read())
            self.assertEqual([x["text"] for x in events if x["type"] == "stdout"], ["256"])
            codes = {}
            for i in range(1030):
                c.request("POST", "/command", json.dumps({"command": "sleep 60", "background": True}))
                r = c.getresponse()
                body = r.read()
                codes[r.status] = codes.get(r.status, 0) + 1
                if r.status != 200:
                    self.assertEqual(r.status, 429)
                    self.assertEqual(json.loads(body)["code"], "RUNTIME_ERROR")
            self.assertEqual(codes, {200: 1024, 429: 6})
            c.request("GET", "/ping")
            self.assertEqual(c.getresponse().status, 200)
            c.close()
        finally:
            e.stop()  # SIGTERM: execd kills what runs

    def test_output_cap_option(self):
        e = Execd(args=["--output-cap", "1Ki"])
        try:
            c = e.conn(60)
            # Past the cap: the stream carries the marker lines, the exit code is the process's,
            # the status counts what was dropped; a request cannot raise the cap.
            body = {"command": "head -c 3000 /dev/zero | tr '\\0' a; echo; echo gone >&2; exit 2",
                    "output_cap": 1 << 40}
            c.request("POST", "/command", json.dumps(body))
            events = parse_events(c.getresponse().read())
            self.assertEqual([x["text"] for x in events if x["type"] == "stdout"], ["a" * 1024])
            self.assertEqual([x["text"] for x in events if x["type"] == "stderr"],
                             ["[corral-execd: output cap of 1024 bytes reached; the rest of the output is dropped]",
                              "[corral-execd: %d bytes of output dropped]" % (3001 + 5 - 1024)])
            self.assertEqual(events[-1]["error"]["evalue"], "2")
            c.request("GET", "/command/status/" + events[0]["text"])
            st = json.loads(c.getresponse().read())
            self.assertEqual((st["output_truncated"], st["output_cap"], st["output_dropped"]),
                             (True, 1024, 3001 + 5 - 1024))
            # Under the cap nothing is marked.
            c.request("POST", "/command", json.dumps({"command": "head -c 1024 /dev/zero | tr '\\0' a"}))
            events = parse_events(c.getresponse().read())
            self.assertEqual([x["type"] for x in events], ["init", "stdout", "execution_complete"])
            c.request("GET", "/command/status/" + events[0]["text"])
            self.assertNotIn("output_truncated", json.loads(c.getresponse().read()))
            c.close()
        finally:
            e.stop()
        for bad in ("0", "lots", "-5"):
            out = subprocess.run([EXECD, "--socket", "/nonexistent/s", "--state", "/nonexistent",
                                  "--output-cap", bad], capture_output=True, text=True)
            self.assertEqual(out.returncode, 2, bad)
            self.assertIn("--output-cap", out.stderr)

    def test_help(self):
        out = subprocess.run([EXECD, "--help"], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0)
        self.assertIn("--socket", out.stdout)
        out = subprocess.run([EXECD], capture_output=True, text=True)
        self.assertNotEqual(out.returncode, 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
