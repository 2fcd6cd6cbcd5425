#!/usr/bin/env python3
"""
A red-team pass over the seams of docs/security.md: root inside a sandbox that knows corral's
source, and a client of corrald on loopback. Each test performs its attack the way an attacker
would and asserts it is denied or contained, and that corrald and the other sandboxes still answer.
"""
import json
import os
import secrets
import shutil
import socket
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
import oci  # noqa: E402
from sec import AttackCase, main  # noqa: E402
from test_disk import MIB, SPEC, SmallStateRegistryCase, free_bytes  # noqa: E402

KEY = "redteam-key-" + secrets.token_hex(8)

# Prints the fds a process holds, as {fd: target}; run as the process under test.
LIST_FDS = ("python3 -c \"import os, json; print(json.dumps({f: os.readlink('/proc/self/fd/' + f) "
            "for f in os.listdir('/proc/self/fd') if os.path.exists('/proc/self/fd/' + f)}))\"")

# Echoes the request head it receives, for the proxy tests: what corrald forwards to a workload.
ECHO_SERVER_PY = r'''
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps([[k, v] for k, v in self.headers.items()]).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
'''


class InsideTest(AttackCase):
    """Attacks from root inside a host-image sandbox, with a second sandbox beside it."""

    class_sandboxes = ("a", "b")

    def host_dir(self, mode=0o755):
        """A directory on the host's root file system (what the host image shows), not /tmp."""
        d = tempfile.mkdtemp(prefix="corral-redteam-", dir="/var/tmp")
        os.chmod(d, mode)
        self.addCleanup(shutil.rmtree, d, True)
        return d

    def test_host_unix_socket_through_the_host_image(self):
        # Attack: connect to a world-connectable unix socket of the host seen through the host image.
        d = self.host_dir()
        path = os.path.join(d, "svc.sock")
        srv = socket.socket(socket.AF_UNIX)
        self.addCleanup(srv.close)
        srv.bind(path)
        srv.listen(4)
        os.chmod(path, 0o666)
        srv.settimeout(0.5)
        r = self.client.run(self.a, "python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); "
                            "s.connect('%s'); print('connected')\"" % path)
        self.assertTrue(os.path.exists(path))
        self.assertNotIn("connected", r.stdout, "a host socket answered a sandbox: %r" % r)
        self.assertNotEqual(r.exit_code, 0, r)
        try:
            c, _ = srv.accept()
            c.close()
            self.fail("the host's socket accepted a connection from a sandbox")
        except socket.timeout:
            pass
        self.assert_platform_alive(self.a, self.b)

    def test_host_files_writable_by_others_stay_unchanged(self):
        # Attack: write, chmod, chown and hard-link host files that sandbox root reaches as "other".
        d = self.host_dir(0o1777)
        shared = os.path.join(d, "shared")
        with open(shared, "w") as f:
            f.write("original\n")
        os.chmod(shared, 0o666)
        secret = os.path.join(d, "secret")
        with open(secret, "w") as f:
            f.write("host-secret-%s\n" % secrets.token_hex(4))
        os.chmod(secret, 0o600)
        r = self.client.run(self.a, "echo pwned > {s}; touch {d}/planted; "
                            "chmod 666 {x}; chown 0:0 {x}; ln {x} /tmp/link; ln {x} {d}/link; "
                            "cat {x} {d}/link; echo done".format(s=shared, d=d, x=secret))
        self.assertIn("done", r.stdout, r)
        self.assertNotIn("host-secret", r.stdout, r)
        with open(shared) as f:
            self.assertEqual(f.read(), "original\n")
        self.assertEqual(sorted(os.listdir(d)), ["secret", "shared"])
        st = os.stat(secret)
        self.assertEqual((st.st_mode & 0o777, st.st_uid, st.st_nlink), (0o600, 0, 1))
        self.assert_platform_alive(self.a)

    def test_id_slot_files_out_of_reach(self):
        # Attack: read the host-wide id-range pool, whose slot files name every sandbox's state dir (its id).
        pool = "/run/corral/userns"
        if not os.path.isdir(pool):
            self.skipTest("no id-range pool at %s" % pool)
        slots = os.listdir(pool)
        self.assertTrue(slots)
        r = self.client.run(self.a, "base=$(awk '{print $2}' /proc/self/uid_map); "
                            "slot=$(( (base - 0x10000000) / 65536 )); "
                            "ls %s; cat %s/$slot; cat %s/%s; echo done" % (pool, pool, pool, slots[0]))
        self.assertIn("done", r.stdout, r)
        self.assertNotIn("/sandboxes/", r.stdout, "a slot file was read: %r" % r)
        self.assertNotIn(self.a, r.stdout + r.stderr)
        self.assertNotIn(self.b, r.stdout + r.stderr)

    def test_no_descriptor_of_execd_reaches_a_command(self):
        # Attack: look for execd's listening socket or state dir among a command's inherited fds.
        listings = [self.client.run(self.a, LIST_FDS).stdout]
        self.client.run(self.a, LIST_FDS + " > /tmp/fds-bg.tmp && mv /tmp/fds-bg.tmp /tmp/fds-bg",
                        background=True)
        self.wait_until(lambda: self.client.run(self.a, "test -s /tmp/fds-bg").exit_code == 0, 10,
                        interval=0.2, msg="the background listing")
        listings.append(self.client.run(self.a, "cat /tmp/fds-bg").stdout)
        for out in listings:
            fds = json.loads(out.strip().splitlines()[-1])
            extra = {f: t for f, t in fds.items() if int(f) > 2 and "/proc/" not in t}
            self.assertEqual(extra, {}, "a command inherited execd's fds: %r" % fds)

    def test_no_descriptor_of_execd_reaches_a_session(self):
        # Attack: a command in a bash session looks for execd's fds among the shell's.
        r = self.client.post(self.client.execd_path(self.a, "/session"), body={})
        self.assertEqual(r.status, 200, r)
        session = r.json()["session_id"]
        r = self.client.post(self.client.execd_path(self.a, "/session/%s/run" % session),
                             body={"command": LIST_FDS})
        self.assertEqual(r.status, 200, r)
        out = [json.loads(c) for c in r.body.decode().split("\n\n") if c.strip().startswith("{")]
        line = [e["text"] for e in out if e.get("type") == "stdout"][-1]
        fds = json.loads(line)
        # fd 3 is the here-document the shell sources the command from (a pipe).
        extra = {f: t for f, t in fds.items()
                 if int(f) > 2 and "/proc/" not in t and not (f == "3" and t.startswith("pipe:"))}
        self.assertEqual(extra, {}, "a session's command holds execd's fds: %r" % fds)

    def test_no_descriptor_of_execd_reaches_the_entrypoint(self):
        # Attack: the entrypoint (started with fork, not vfork) looks for execd's fds 3 and 4.
        r = self.client.create_sandbox_raw(
            entrypoint=["sh", "-c", LIST_FDS + " > /tmp/entry-fds; exec sleep infinity"])
        self.assertEqual(r.status, 202, r)
        sid = r.json()["id"]
        self.addCleanup(self.client.delete_sandbox, sid)
        self.wait_until(lambda: self.client.run(sid, "test -s /tmp/entry-fds").exit_code == 0, 20,
                        interval=0.2, msg="the entrypoint's listing")
        fds = json.loads(self.client.run(sid, "cat /tmp/entry-fds").stdout.strip())
        extra = {f: t for f, t in fds.items() if int(f) > 2 and "/proc/" not in t}
        self.assertEqual(extra, {}, "the entrypoint inherited execd's fds: %r" % fds)

    def test_abstract_unix_socket_across_sandboxes(self):
        # Attack: sandbox B connects to an abstract unix socket that sandbox A listens on.
        name = "corral-redteam-" + secrets.token_hex(4)
        bg = self.client.run(self.a, "python3 -c \"import socket, time; s = socket.socket(socket.AF_UNIX); "
                             "s.bind('\\0%s'); s.listen(1); open('/tmp/abs-ready', 'w').close(); "
                             "time.sleep(60)\"" % name, background=True)
        self.addCleanup(self.client.interrupt, self.a, bg.init_id)
        self.wait_until(lambda: self.client.run(self.a, "test -e /tmp/abs-ready").exit_code == 0, 10,
                        interval=0.2, msg="A's abstract socket")
        probe = ("python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); "
                 "s.connect('\\0%s'); print('connected')\"" % name)
        self.assertIn("connected", self.client.run(self.a, probe).stdout)  # the attack is real
        r = self.client.run(self.b, probe)
        self.assertNotIn("connected", r.stdout, r)
        self.assert_platform_alive(self.a, self.b)

    def test_shared_memory_and_ipc_across_sandboxes(self):
        # Attack: sandbox A leaves data in /dev/shm and a SysV segment; sandbox B looks for them.
        tag = secrets.token_hex(4)
        self.client.run(self.a, "echo %s > /dev/shm/redteam-%s; ipcmk -M 4096 >/dev/null 2>&1; true"
                        % (tag, tag))
        r = self.client.run(self.b, "cat /dev/shm/* 2>/dev/null; ls /dev/shm; ipcs -m 2>/dev/null")
        self.assertNotIn(tag, r.stdout, r)
        self.assertNotIn("4096", r.stdout, r)
        self.assert_platform_alive(self.a, self.b)

    def test_other_sandboxes_processes_out_of_sight_and_reach(self):
        # Attack: find sandbox B's processes from A and signal them, by pid and by -1.
        tag = str(40000 + secrets.randbelow(9999))
        bg = self.client.run(self.b, "exec sleep %s" % tag, background=True)
        self.addCleanup(self.client.interrupt, self.b, bg.init_id)
        attacker = self.create(entrypoint=["sleep", "infinity"])["id"]  # kill -1 ends it too
        c = self.corrald.client(timeout=30)  # the attack ends its own stream: a connection of its own
        self.addCleanup(c.close)
        r = c.run(attacker, "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' '; "
                            "kill -KILL -1 2>/dev/null; echo done")
        self.assertNotIn("sleep %s" % tag, r.stdout, r)
        self.assert_platform_alive(self.b)
        self.assertEqual(self.client.run(self.b, "pgrep -f 'sleep %s' >/dev/null && echo up" % tag)
                         .stdout.strip(), "up")

    def test_leave_the_id_map(self):
        # Attack: become a host id outside the sandbox's range, or write the id maps again.
        r = self.client.run(self.a, "python3 -c \"import os\n"
                            "for f in (lambda: os.setuid(70000), lambda: os.setgid(70000), "
                            "lambda: os.setgroups([0, 70000]), "
                            "lambda: os.write(os.open('/proc/self/uid_map', os.O_WRONLY), b'0 0 1')):\n"
                            "    try:\n        f(); print('allowed')\n"
                            "    except OSError as e: print(e.errno)\n\"; cat /proc/self/uid_map")
        self.assertNotIn("allowed", r.stdout, r)
        first = r.stdout.strip().splitlines()[-1].split()
        self.assertEqual(first[0], "0")
        self.assertNotEqual(first[1], "0", "sandbox root is host root: %r" % r.stdout)
        self.assert_platform_alive(self.a)


class ProxyHeadersTest(AttackCase):
    """A workload behind the proxy route sees what corrald forwards to it."""
    corrald_kwargs = {"api_key": KEY}

    def test_credentials_never_reach_the_workload(self):
        # Attack: a server in the sandbox logs the heads corrald proxies to it, to steal the key or token.
        sid = self.create(entrypoint=["sleep", "infinity"])["id"]
        port = 8000 + secrets.randbelow(900)
        self.run_ok(sid, "cat > /tmp/echo.py <<'EOF'\n%sEOF" % ECHO_SERVER_PY)
        bg = self.client.run(sid, "exec python3 /tmp/echo.py %d" % port, background=True)
        self.addCleanup(self.client.interrupt, sid, bg.init_id)
        ep = self.client.get("/v1/sandboxes/%s/endpoints/44772" % sid)
        self.assertEqual(ep.status, 200, ep)
        token = ep.json()["headers"]["OpenSandbox-Secure-Access"]
        c = self.corrald.client(api_key=None, timeout=30)
        self.addCleanup(c.close)
        cases = [
            {"OPEN-SANDBOX-API-KEY": KEY},
            {"open-sandbox-api-key": KEY, "Authorization": "Bearer " + KEY, "Cookie": "k=" + KEY},
            {"OpenSandbox-Secure-Access": token},
            {"opensandbox-secure-access": token, "OPENSANDBOX-SECURE-ACCESS": token},
        ]

        def fetch(headers):
            r = c.request("GET", "/sandboxes/%s/proxy/%d/" % (sid, port), headers=headers)
            return r if r.status == 200 else None
        for headers in cases:
            r = self.wait_until(lambda: fetch(headers), 10, interval=0.2, msg="the echo server")
            seen = r.text
            self.assertNotIn(KEY, seen, "the API key reached the workload: %s" % seen)
            self.assertNotIn(token, seen, "the proxy token reached the workload: %s" % seen)
        self.assert_platform_alive(sid)


class LayerOnFullStateTest(SmallStateRegistryCase):
    """corrald on a 192 MiB state fs of its own, pulling from a registry on loopback."""

    def test_layer_that_does_not_fit_is_not_stored_short(self):
        # Attack: a 1 MiB layer unpacks to 240 MiB on a 192 MiB state fs, to get a short layer accepted.
        ref, info = self.push_bomb()
        neighbour = self.create(**SPEC)["id"]
        r = self.client.create_sandbox_raw(image={"uri": ref}, entrypoint=["sleep", "infinity"])
        if r.status == 202:
            self.addCleanup(self._cleanup_sandbox, r.json()["id"])
        self.assertEqual(r.status, 507, "%r\n%s" % (r, self.corrald.log_tail(10)))
        self.assertEqual(r.json()["code"], "SANDBOX::IMAGE_PULL_FAILED")
        self.assertNotIn(info["layers"][-1][7:], oci.store_layers(self.corrald.state_dir),
                         "a layer cut short by a full disk was kept")
        self.assertEqual(oci.store_tmp(self.corrald.state_dir), [], "no half layer left")
        self.assertEqual(self.client.get("/v1/images").json().get("items", []), [])
        # The space comes back, and everyone else carries on.
        self.wait_until(lambda: free_bytes(self.corrald.state_dir) > 128 * MIB, 20,
                        msg="the half layer's space to return")
        self.assert_platform_alive(neighbour)


if __name__ == "__main__":
    main()
