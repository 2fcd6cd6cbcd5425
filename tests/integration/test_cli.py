#!/usr/bin/env python3
"""The corral CLI (build/corral) against a real corrald: create, ps, inspect, exec (exit codes,
exact stdout/stderr separation, quoting, env, cwd, timeout), run (and its delete on every path out,
Ctrl-C included), rm, -o json, --help, error reporting and exit codes."""

import http.server
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import UUID_RE, CorralTestCase, binary, free_port, log, main  # noqa: E402

COMMANDS = ["create", "exec", "run", "ps", "rm", "inspect"]


class Cli(CorralTestCase):

    def setUp(self):
        super().setUp()
        self.tag = "t" + secrets.token_hex(6)
        self.ids = set()

    def tearDown(self):
        # Every sandbox this test made, whether or not the test got to delete it: by id, and by
        # this test's label (covers a run whose id the test never saw).
        try:
            ids = set(self.ids)
            r = self.client.list_sandboxes(metadata={"cli-test": self.tag}, page_size=200)
            if r.status == 200:
                ids.update(it["id"] for it in r.json()["items"])
            for sid in ids:
                d = self.client.delete_sandbox(sid)
                if d.status not in (204, 404):
                    log("tearDown: delete %s -> %r" % (sid, d))
        except Exception as e:
            log("tearDown cleanup failed: %r" % (e,))

    # --- helpers ------------------------------------------------------------------------------

    def env(self, **extra):
        e = dict(os.environ)
        e.pop("CORRAL_API_KEY", None)
        e["CORRAL_SERVER"] = self.corrald.base_url
        e.update(extra)
        return e

    def corral(self, *args, timeout=60, env=None, check=None):
        p = subprocess.run([binary("corral")] + list(args), capture_output=True,
                           timeout=timeout, env=env or self.env(), stdin=subprocess.DEVNULL)
        out, err = p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
        if check is not None:
            self.assertEqual(p.returncode, check,
                             "corral %s -> %d\nstdout=%r\nstderr=%r\n%s"
                             % (" ".join(args), p.returncode, out, err, self.corrald.log_tail(15)))
        return p.returncode, out, err

    def create(self, *args):
        rc, out, err = self.corral("create", "--label", "cli-test=" + self.tag, *args, check=0)
        sid = out.strip()
        self.assertRegex(sid, UUID_RE, "create printed %r (stderr %r)" % (out, err))
        self.ids.add(sid)
        return sid

    def assert_error_line(self, err):
        """Errors are 'corral: ...' lines on stderr carrying the request id."""
        self.assertTrue(err.startswith("corral: "), err)
        self.assertRegex(err, r"request id [0-9a-f]{32}")

    def listed_ids(self, *args):
        rc, out, err = self.corral("ps", "-o", "json", *args, check=0)
        return [it["id"] for it in json.loads(out)]

    # --- help and usage -----------------------------------------------------------------------

    def test_help(self):
        rc, out, err = self.corral("--help", check=0)
        for c in COMMANDS:
            self.assertIn(c, out)
        self.assertIn("Exit status", out)
        for c in COMMANDS:
            rc, out, err = self.corral(c, "--help", check=0)
            self.assertIn("Usage: corral %s" % c, out)
            self.assertIn("Example", out)
            self.assertIn("Exit status", out)
            self.assertEqual(err, "")
        rc, out, err = self.corral("help", "exec", check=0)
        self.assertIn("Usage: corral exec", out)

    def test_usage_errors(self):
        rc, out, err = self.corral("frobnicate", check=1)
        self.assertIn("not a corral command", err)
        rc, out, err = self.corral("ps", "--no-such-option", check=1)
        self.assertIn("corral ps --help", err)
        self.corral("ps", "-o", "yaml", check=1)
        self.corral("create", "--cpu", "lots", check=1)
        self.corral("create", "--memory", "1Gx", check=1)
        self.corral("create", "--ttl", "-5", check=1)
        self.corral("create", "--env", "NOEQUALS", check=1)
        self.corral("inspect", check=1)
        self.corral("rm", check=1)
        # exec and run keep 1..124 for the command: their own usage errors are 125.
        self.corral("exec", check=125)
        self.corral("exec", "some-id", check=125)
        self.corral("run", check=125)
        self.assertEqual(self.listed_ids("--label", "cli-test=" + self.tag), [])

    # --- create / inspect / ps / rm -----------------------------------------------------------

    def test_create_inspect_ps_rm(self):
        sid = self.create("--cpu", "500m", "--memory", "256Mi", "--ttl", "600",
                          "--label", "role=web", "-e", "FOO=bar")
        rc, out, err = self.corral("inspect", sid, check=0)
        j = json.loads(out)
        self.assertEqual(j["id"], sid)
        self.assertEqual(j["status"]["state"], "Running", j)
        self.assertEqual(j["metadata"], {"cli-test": self.tag, "role": "web"})
        self.assertIn("expiresAt", j)
        self.assertIn("\n  \"", out, "inspect pretty-prints")

        other = self.create()

        # -o json: an array of the server's objects, all pages
        listed = self.listed_ids()
        self.assertIn(sid, listed)
        self.assertIn(other, listed)
        self.assertEqual(sorted(self.listed_ids("--label", "cli-test=" + self.tag)),
                         sorted([sid, other]))
        self.assertEqual(self.listed_ids("--label", "cli-test=" + self.tag, "--label", "role=web"),
                         [sid])
        self.assertEqual(self.listed_ids("--label", "cli-test=nope-" + self.tag), [])
        self.assertIn(sid, self.listed_ids("--state", "Running", "--label", "role=web"))
        self.assertNotIn(sid, self.listed_ids("--state", "Paused", "--label", "role=web"))

        # table: a header and one row per sandbox
        rc, out, err = self.corral("ps", "--label", "cli-test=" + self.tag, check=0)
        lines = out.splitlines()
        self.assertEqual(lines[0].split(), ["ID", "STATE", "AGE", "EXPIRES", "LABELS"], out)
        self.assertEqual(len(lines), 3, out)
        row = next(line for line in lines if line.startswith(sid))
        cols = row.split()
        self.assertEqual(cols[1], "Running")
        self.assertRegex(cols[2], r"^\d+[smhd]$")
        self.assertEqual(cols[3:5], ["in", cols[4]])
        self.assertIn("role=web", row)
        other_row = next(line for line in lines if line.startswith(other))
        self.assertIn("never", other_row)

        rc, out, err = self.corral("ps", "-q", "--label", "cli-test=" + self.tag, check=0)
        self.assertEqual(sorted(out.split()), sorted([sid, other]))

        # rm: prints the ids, 404 counts as gone
        rc, out, err = self.corral("rm", sid, other, check=0)
        self.assertEqual(out.split(), [sid, other])
        rc, out, err = self.corral("rm", sid, check=0)
        self.assertEqual(self.listed_ids("--label", "cli-test=" + self.tag), [])

        # an unknown sandbox is the server's error, with its code and the request id
        rc, out, err = self.corral("inspect", sid, check=2)
        self.assert_error_line(err)
        self.assertIn(sid, err)
        self.assertEqual(out, "")

    def test_create_options_reach_the_server(self):
        sid = self.create("-e", "GREETING=hello world", "--entrypoint", "sleep", "3600")
        rc, out, err = self.corral("inspect", sid, check=0)
        self.assertEqual(json.loads(out)["entrypoint"], ["sleep", "3600"])
        # No --cpu/--memory: no limit is sent (the server's default); given: sent as written.
        rc, out, err = self.corral("stats", sid, "-o", "json", check=0)
        st = json.loads(out)
        self.assertIsNone(st["cpu"]["limitMillis"], st)
        lim = self.create("--cpu", "500m", "--memory", "1Gi")
        rc, out, err = self.corral("stats", lim, "-o", "json", check=0)
        st = json.loads(out)
        self.assertEqual((st["cpu"]["limitMillis"], st["memory"]["limitBytes"]),
                         (500, 1 << 30), st)
        rc, out, err = self.corral("exec", sid, "--", "sh", "-c", 'echo "$GREETING"', check=0)
        self.assertEqual(out, "hello world\n")
        rc, out, err = self.corral("create", "-o", "json", "--label", "cli-test=" + self.tag,
                                   check=0)
        j = json.loads(out)
        self.ids.add(j["id"])
        self.assertEqual(j["status"]["state"], "Running")

    def test_create_refused_by_server(self):
        # The opensandbox.io/ label prefix is reserved (a server rule): a clear error, exit 2.
        rc, out, err = self.corral("create", "--label", "opensandbox.io/x=1",
                                   "--label", "cli-test=" + self.tag, check=2)
        self.assert_error_line(err)
        self.assertIn("opensandbox.io/", err)
        self.assertEqual(out, "")
        rc, out, err = self.corral("create", "--image", "no-such-image-" + self.tag,
                                   "--label", "cli-test=" + self.tag, check=2)
        self.assert_error_line(err)
        self.assertEqual(self.listed_ids("--label", "cli-test=" + self.tag), [])

    # --- exec ---------------------------------------------------------------------------------

    def test_exec_exit_codes(self):
        sid = self.create()
        self.corral("exec", sid, "--", "exit", "7", check=7)
        self.corral("exec", sid, "--", "sh", "-c", "exit 7", check=7)
        self.corral("exec", sid, "--", "true", check=0)
        self.corral("exec", sid, "--", "false", check=1)
        self.corral("exec", sid, "--", "sh", "-c", "exit 255", check=255)
        rc, out, err = self.corral("exec", sid, "--", "no-such-command-" + self.tag)
        self.assertEqual(rc, 127, err)

    def test_exec_stdout_stderr_exact(self):
        sid = self.create()
        rc, out, err = self.corral(
            "exec", sid, "--", "sh", "-c",
            "echo out1; echo err1 >&2; echo; echo out2; echo err2 >&2; printf 'no newline'",
            check=0)
        self.assertEqual(out, "out1\n\nout2\nno newline\n")
        self.assertEqual(err, "err1\nerr2\n")
        rc, out, err = self.corral("exec", sid, "--", "sh", "-c", "echo oops >&2; exit 3", check=3)
        self.assertEqual(out, "")
        self.assertEqual(err, "oops\n")

    def test_exec_words_are_quoted(self):
        sid = self.create()
        rc, out, err = self.corral("exec", sid, "--", "printf", "%s|", "a b", "it's", "$HOME",
                                   "*", "", "x;y", check=0)
        self.assertEqual(out, "a b|it's|$HOME|*||x;y|\n")

    def test_exec_env_cwd_options_after_id(self):
        sid = self.create()
        rc, out, err = self.corral("exec", sid, "--cwd", "/tmp", "-e", "A=1", "--env", "B=two words",
                                   "--", "sh", "-c", 'echo "$A $B"; pwd', check=0)
        self.assertEqual(out, "1 two words\n/tmp\n")
        rc, out, err = self.corral("exec", "--cwd", "/", sid, "--", "pwd", check=0)
        self.assertEqual(out, "/\n")

    def test_exec_exclusive_runs_alone(self):
        # A process the workload left running is gone before an --exclusive command starts; the
        # entrypoint stays, and a plain exec leaves the process alone.
        sid = self.create()
        self.corral("exec", sid, "--", "sh", "-c", "setsid sleep 1000 >/dev/null 2>&1 & echo $! > /tmp/bg",
                    check=0)
        rc, out, err = self.corral("exec", sid, "--", "sh", "-c", 'kill -0 "$(cat /tmp/bg)" && echo alive',
                                   check=0)
        self.assertEqual(out, "alive\n", err)
        # gone: no such process, or a zombie PID 1 has not reaped yet (it runs no more)
        rc, out, err = self.corral("exec", "--exclusive", sid, "--", "sh", "-c",
                                   's=$(cut -d" " -f3 "/proc/$(cat /tmp/bg)/stat" 2>/dev/null); '
                                   'if [ -z "$s" ] || [ "$s" = Z ]; then echo gone; else echo alive; fi',
                                   check=0)
        self.assertEqual(out, "gone\n", err)
        self.assertEqual(self.sh(sid, "echo up"), "up")

    def test_exec_many_lines_in_order(self):
        sid = self.create()
        rc, out, err = self.corral("exec", sid, "--", "seq", "1", "5000", check=0, timeout=120)
        self.assertEqual(out, "".join("%d\n" % i for i in range(1, 5001)))

    def test_exec_quiet_command_is_not_a_dead_stream(self):
        # Longer than execd's ping interval without output: the stream stays alive.
        sid = self.create()
        rc, out, err = self.corral("exec", sid, "--", "sh", "-c", "sleep 7; echo done",
                                   check=0, timeout=60)
        self.assertEqual((out, err), ("done\n", ""))

    def test_exec_timeout(self):
        sid = self.create()
        t0 = time.monotonic()
        rc, out, err = self.corral("exec", sid, "--timeout", "1", "--", "sleep", "30", timeout=60)
        self.assertNotEqual(rc, 0, err)
        self.assertLess(time.monotonic() - t0, 20)

    def test_exec_unknown_sandbox(self):
        rc, out, err = self.corral("exec", "00000000-0000-4000-8000-000000000000", "--", "true",
                                   check=125)
        self.assert_error_line(err)

    # --- run ----------------------------------------------------------------------------------

    def test_run(self):
        rc, out, err = self.corral("run", "--label", "cli-test=" + self.tag, "--", "sh", "-c",
                                   "echo hi; echo there >&2; exit 3", check=3)
        self.assertEqual(out, "hi\n")
        self.assertEqual(err, "there\n")
        self.assertEqual(self.listed_ids("--label", "cli-test=" + self.tag), [],
                         "run deletes its sandbox")
        self.corral("run", "--label", "cli-test=" + self.tag, "--cpu", "1", "--memory", "256Mi",
                    "--cwd", "/tmp", "--", "sh", "-c", '[ "$(pwd)" = /tmp ]', check=0)
        self.assertEqual(self.listed_ids("--label", "cli-test=" + self.tag), [])

    def test_run_refused_create_exits_125(self):
        rc, out, err = self.corral("run", "--label", "opensandbox.io/x=1",
                                   "--label", "cli-test=" + self.tag, "--", "true", check=125)
        self.assert_error_line(err)

    def test_run_deletes_on_interrupt(self):
        with subprocess.Popen([binary("corral"), "run", "--label", "cli-test=" + self.tag, "--",
                               "sh", "-c", "echo started; sleep 60"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self.env()) as p:
            try:
                line = p.stdout.readline()
                self.assertEqual(line, b"started\n")
                self.assertEqual(len(self.listed_ids("--label", "cli-test=" + self.tag)), 1)
                p.send_signal(signal.SIGINT)
                rc = p.wait(timeout=30)
            finally:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            self.assertEqual(rc, 130, p.stderr.read())
        self.assertEqual(self.listed_ids("--label", "cli-test=" + self.tag), [],
                         "run deletes its sandbox on Ctrl-C")

    # --- connection problems ------------------------------------------------------------------

    def test_unreachable_server(self):
        url = "http://127.0.0.1:%d" % free_port()
        rc, out, err = self.corral("--server", url, "ps", check=3)
        self.assertIn("cannot reach", err)
        self.assert_error_line(err)
        rc, out, err = self.corral("ps", env=self.env(CORRAL_SERVER=url), check=3)
        # --server after the command, overriding the environment
        self.corral("ps", "--server", self.corrald.base_url, env=self.env(CORRAL_SERVER=url),
                    check=0)
        self.corral("exec", "--server", url, "x", "--", "true", check=125)


# ---------------------------------------------------------------------------------------------
# The exec stream parser against a scripted server: framings and endings a real execd may not
# produce on demand (SSE data: lines, events split across chunks, multi-line JSON, a stream that
# ends without a result, a non-exit error), and the interrupt request on Ctrl-C.

SCRIPTS = {
    "bare": [b'{"type":"init","text":"%s"}\n\n' % (b"ab" * 16),
             b'{"type":"stdout","text":"one"}\n\n{"type":"stderr","text":"two"}\n\n',
             b'{"type":"ping","text":"pong"}\n\n',
             b'{"type":"stdout","text":"\\n"}\n\n{"type":"stdout","text":"three"}\n\n',
             b'{"type":"execution_complete","execution_time":3}\n\n'],
    "sse": [b'data: {"type":"init","text":"x"}\n\n', b': comment\nevent: message\nid: 1\n',
            b'data: {"type":"stdout","text":"sse"}\r\n\r\n',
            b'data:{"type":"error","error":{"ename":"CommandExecError","evalue":"7","traceback":[]}}\n\n'],
    "split": [bytes([c]) for c in
              b'{"type":"stdout","text":"split across chunks"}\n\n{"type":"error","error":'
              b'{"ename":"CommandExecError","evalue":"42","traceback":[]}}\n\n'],
    "pretty": [b'{\n  "type": "stdout",\n  "text": "pretty"\n}\n\n',
               b'{"type":"execution_complete"}'],  # last event without the blank line
    "noresult": [b'{"type":"stdout","text":"partial"}\n\n'],
    "othererror": [b'{"type":"error","error":{"ename":"TimeoutError","evalue":"command timed out",'
                   b'"traceback":[]}}\n\n'],
    "malformed": [b'{"type":"stdout","text":"ok"}\n\n{not json}\n\n',
                  b'{"type":"execution_complete"}\n\n'],
    "slow": [b'{"type":"init","text":"%s"}\n\n' % (b"cd" * 16)]
            + [b'{"type":"stdout","text":"tick"}\n\n'] * 200,
}


class ScriptedExecd(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    requests = []

    def log_message(self, *a):
        pass

    made = {}  # sandboxes "created" by a create whose answer was dropped

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n))
        ScriptedExecd.requests.append(("POST", self.path, body, self.headers.get("X-Request-ID")))
        if self.path in ("/sandboxes", "/v1/sandboxes"):
            # Make the sandbox, then lose the answer (a server that died mid-reply).
            sid = "lost-%d" % len(ScriptedExecd.made)
            ScriptedExecd.made[sid] = body["metadata"]
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        script = SCRIPTS.get(body["command"].split()[-1])
        if script is None:
            b = json.dumps({"code": "SANDBOX::NOT_FOUND", "message": "no such sandbox"}).encode()
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(b)))
            self.end_headers()
            self.wfile.write(b)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            for chunk in script:
                self.wfile.write(chunk)
                self.wfile.flush()
                time.sleep(0.05 if body["command"].endswith("slow") else 0.001)
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True

    def do_GET(self):
        # Only the label query corral run makes after a lost create.
        q = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
        want = dict(urllib.parse.parse_qsl(q["metadata"][0]))
        items = [{"id": sid} for sid, meta in ScriptedExecd.made.items()
                 if all(meta.get(k) == v for k, v in want.items())]
        b = json.dumps({"items": items, "pagination": {"hasNextPage": False}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)

    def do_DELETE(self):
        ScriptedExecd.requests.append(("DELETE", self.path, None, self.headers.get("X-Request-ID")))
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()


class CliStream(unittest.TestCase):
    """Needs only build/corral: runs even before corrald exists."""

    @classmethod
    def setUpClass(cls):
        cls.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ScriptedExecd)
        cls.thread = threading.Thread(target=cls.server.serve_forever, daemon=True)
        cls.thread.start()
        cls.url = "http://127.0.0.1:%d" % cls.server.server_address[1]

    @classmethod
    def tearDownClass(cls):
        cls.server.shutdown()
        cls.server.server_close()

    def exec_(self, script, *extra):
        p = subprocess.run([binary("corral"), "--server", self.url, "exec", "sb1"] + list(extra)
                           + ["--", "mode", script], capture_output=True, timeout=30,
                           stdin=subprocess.DEVNULL)
        return p.returncode, p.stdout.decode(), p.stderr.decode()

    def test_bare_json_events(self):
        ScriptedExecd.requests.clear()
        rc, out, err = self.exec_("bare", "--cwd", "/w", "-e", "K=v", "--timeout", "9")
        self.assertEqual((rc, out, err), (0, "one\n\nthree\n", "two\n"))
        method, path, body, rid = ScriptedExecd.requests[-1]
        self.assertEqual(path, "/sandboxes/sb1/proxy/44772/command")
        # The client-chosen execution id (libcorral: a cut stream is resumed under it).
        self.assertRegex(body.pop("id"), r"^[0-9a-f]{32}$")
        self.assertEqual(body, {"command": "mode bare", "cwd": "/w", "envs": {"K": "v"},
                                "timeout": 9000})
        self.assertRegex(rid, r"^[0-9a-f]{32}$")

    def test_sse_data_lines(self):
        self.assertEqual(self.exec_("sse"), (7, "sse\n", ""))

    def test_events_split_across_chunks(self):
        self.assertEqual(self.exec_("split"), (42, "split across chunks\n", ""))

    def test_multiline_json_and_unterminated_last_event(self):
        self.assertEqual(self.exec_("pretty"), (0, "pretty\n", ""))

    def test_stream_without_result_is_255(self):
        rc, out, err = self.exec_("noresult")
        self.assertEqual((rc, out), (255, "partial\n"))
        self.assertIn("never arrived", err)

    def test_non_exit_error_is_reported(self):
        rc, out, err = self.exec_("othererror")
        self.assertEqual(rc, 255)
        self.assertIn("TimeoutError: command timed out", err)

    def test_malformed_event_is_skipped(self):
        rc, out, err = self.exec_("malformed")
        self.assertEqual((rc, out), (0, "ok\n"))
        self.assertIn("malformed event", err)

    def test_http_error_is_125(self):
        rc, out, err = self.exec_("unknown-script")
        self.assertEqual(rc, 125)
        self.assertIn("corral: exec in sandbox sb1: SANDBOX::NOT_FOUND: no such sandbox", err)
        self.assertRegex(err, r"request id [0-9a-f]{32}")

    def test_closed_stdout_stops_the_remote_command(self):
        ScriptedExecd.requests.clear()
        with subprocess.Popen([binary("corral"), "--server", self.url, "exec", "sb1", "--",
                               "mode", "slow"], stdout=subprocess.PIPE, stderr=subprocess.PIPE) as p:
            self.assertEqual(p.stdout.readline(), b"tick\n")
            p.stdout.close()  # like `corral exec ... | head -1`
            rc = p.wait(timeout=20)
        self.assertEqual(rc, 141)
        self.assertIn(("DELETE", "/sandboxes/sb1/proxy/44772/command?id=" + "cd" * 16),
                      [r[:2] for r in ScriptedExecd.requests])

    def test_run_deletes_the_sandbox_of_a_lost_create(self):
        # Every create attempt's answer is lost: each attempt carries its own label (libcurl may
        # resend an attempt by itself on a fresh connection: same label), and every sandbox made
        # is found by it and deleted, once, before the next attempt or giving up.
        ScriptedExecd.requests.clear()
        ScriptedExecd.made.clear()
        p = subprocess.run([binary("corral"), "--server", self.url, "run", "--", "true"],
                           capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
        self.assertEqual(p.returncode, 125, p.stderr)
        creates = [r for r in ScriptedExecd.requests if r[0] == "POST"]
        self.assertGreaterEqual(len(creates), 1)
        tokens = [c[2]["metadata"]["corral/attempt"] for c in creates]
        for t in tokens:
            self.assertRegex(t, r"^[0-9a-f]{12}$")
        deletes = [r[1] for r in ScriptedExecd.requests if r[0] == "DELETE"]
        for d in deletes:
            self.assertRegex(d, r"^(/v1)?/sandboxes/lost-\d+$")
        self.assertEqual(sorted(d.rsplit("/", 1)[1] for d in deletes),
                         sorted(ScriptedExecd.made), ScriptedExecd.requests)
        self.assertIn(b"made by the lost create", p.stderr)

    def test_interrupt_stops_the_remote_command(self):
        ScriptedExecd.requests.clear()
        with subprocess.Popen([binary("corral"), "--server", self.url, "exec", "sb1", "--",
                               "mode", "slow"], stdout=subprocess.PIPE, stderr=subprocess.PIPE) as p:
            self.assertEqual(p.stdout.readline(), b"tick\n")
            p.send_signal(signal.SIGINT)
            rc = p.wait(timeout=20)
        self.assertEqual(rc, 130)
        deletes = [r for r in ScriptedExecd.requests if r[0] == "DELETE"]
        self.assertEqual([d[1] for d in deletes],
                         ["/sandboxes/sb1/proxy/44772/command?id=" + "cd" * 16])


if __name__ == "__main__":
    main()
