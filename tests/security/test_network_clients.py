#!/usr/bin/env python3
"""
Attacks by untrusted network clients on corrald's HTTP front (issue 8, items 4-6): body floods
before authentication, slowloris, connection and descriptor exhaustion, and unauthenticated calls
on the proxy route. Loopback only, bounded counts and bytes.
"""
import os
import resource
import secrets
import socket
import threading
import time

from sec import AttackCase, Corrald, main, sanitized

KEY = "network-clients-key"
TOKEN_HEADER = "OpenSandbox-Secure-Access"
FLOOD_CONNS = 8
FLOOD_BYTES = 24 << 20  # sent per connection at most: 192 MiB in all
CLAIMED = 125_000_000   # what each flooding request claims to send


def proc_status(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def rss_kib(pid):
    return proc_status(pid, "VmRSS")


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def recv_head(sock, timeout):
    """The status line of an answer, or None when none came within timeout."""
    sock.settimeout(timeout)
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    return data.split(b"\r\n", 1)[0].decode(errors="replace") if data else None


def push(sock, nbytes):
    """Send up to nbytes of body, as an attacker would; stop when the server closes."""
    block = b"x" * (1 << 20)
    sent = 0
    sock.settimeout(5)
    try:
        while sent < nbytes:
            sent += sock.send(block[:min(len(block), nbytes - sent)])
    except (socket.timeout, BrokenPipeError, ConnectionResetError):
        pass
    return sent


class BodyFloodTest(AttackCase):
    corrald_kwargs = {"api_key": KEY}

    def flood(self, head):
        """8 connections each send head, then up to FLOOD_BYTES of body. Returns the status
        lines answered before any body byte was sent, and the peak RSS seen meanwhile."""
        pid = self.corrald.proc.pid
        answers, peak = [None] * FLOOD_CONNS, [rss_kib(pid)]
        socks = [socket.create_connection(("127.0.0.1", self.corrald.port), timeout=10)
                 for _ in range(FLOOD_CONNS)]
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                peak[0] = max(peak[0], rss_kib(pid))
                time.sleep(0.05)

        def one(i):
            socks[i].sendall(head)
            answers[i] = recv_head(socks[i], 15)  # on its head, before any body byte
            push(socks[i], FLOOD_BYTES)

        sampler = threading.Thread(target=sample)
        sampler.start()
        threads = [threading.Thread(target=one, args=(i,)) for i in range(FLOOD_CONNS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        time.sleep(0.5)
        stop.set()
        sampler.join()
        for s in socks:
            s.close()
        return answers, peak[0]

    def assert_flood_contained(self, head, want_status):
        pid = self.corrald.proc.pid
        base = rss_kib(pid)
        answers, peak = self.flood(head)
        for a in answers:
            self.assertIsNotNone(a, "no answer before the body: corrald waits to buffer it")
            self.assertIn(" %d " % want_status, a + " ")
        # Bodies are never buffered: memory stays near where it was, during and after.
        self.assertLess(peak - base, 32 * 1024, "RSS %d KiB -> peak %d KiB" % (base, peak))
        time.sleep(1)
        self.assertLess(rss_kib(pid) - base, 16 * 1024)
        self.assert_platform_alive()

    def test_unauthenticated_body_flood_on_health(self):
        # Attack: 8 unauthenticated connections each POST /health claiming 125 MB, then stream.
        head = (b"POST /health HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % CLAIMED)
        self.assert_flood_contained(head, 413)

    def test_unauthenticated_body_flood_on_lifecycle(self):
        # Attack: 8 connections POST /v1/sandboxes without a key, each claiming 125 MB.
        head = (b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % CLAIMED)
        self.assert_flood_contained(head, 401)

    def test_unauthenticated_chunked_flood(self):
        # Attack: the same flood with Transfer-Encoding: chunked (no length to refuse up front).
        head = b"POST /health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        self.assert_flood_contained(head, 413)
        head = (b"POST /sandboxes/00000000-0000-4000-8000-000000000000/proxy/44772/command "
                b"HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        self.assert_flood_contained(head, 401)

    def test_every_request_on_a_connection_is_judged(self):
        # Attack: authenticate on a keep-alive connection, then send an unauthenticated flood on it.
        for calls in range(1, 5):
            s = socket.create_connection(("127.0.0.1", self.corrald.port), timeout=10)
            for _ in range(calls):
                s.sendall(b"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nOPEN-SANDBOX-API-KEY: " +
                          KEY.encode() + b"\r\n\r\n")
                self.assertIn(" 200 ", (recv_head(s, 5) or "") + " ")
                s.settimeout(0.2)
                try:
                    s.recv(65536)  # whatever is left of the listing
                except socket.timeout:
                    pass
            s.sendall(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                      % CLAIMED)
            self.assertIn(" 401 ", (recv_head(s, 5) or "") + " ")
            s.close()
        self.assert_platform_alive()

    def test_authenticated_chunked_upload_of_one_huge_chunk(self):
        # Attack: with the key, 8 chunked uploads through the proxy, each one 100 MB chunk.
        head = (b"POST /sandboxes/00000000-0000-4000-8000-000000000000/proxy/44772/files/upload "
                b"HTTP/1.1\r\nHost: x\r\nOPEN-SANDBOX-API-KEY: " + KEY.encode() +
                b"\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n" % 100_000_000)
        self.assert_flood_contained(head, 413)

    def test_authenticated_lifecycle_body_over_cap(self):
        # Attack: a client with the key sends a 125 MB create body: refused on its length.
        head = (b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nOPEN-SANDBOX-API-KEY: " +
                KEY.encode() + b"\r\nContent-Length: %d\r\n\r\n" % CLAIMED)
        self.assert_flood_contained(head, 413)


class SlowlorisTest(AttackCase):
    corrald_kwargs = {"extra_args": ["--header-timeout", "2", "--max-connections", "1000"]}

    @classmethod
    def setUpClass(cls):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < 2048:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(2048, hard), hard))
        super().setUpClass()

    def test_partial_head_flood_memory(self):
        # Attack: 600 connections each send 60 KB of a request head and wait; then they leave.
        pid = self.corrald.proc.pid
        base = rss_kib(pid)
        socks = []
        for _ in range(600):
            s = socket.create_connection(("127.0.0.1", self.corrald.port), timeout=5)
            s.sendall(b"GET /health HTTP/1.1\r\nX-Pad: " + b"a" * 60000)
            socks.append(s)
        time.sleep(1)
        peak = rss_kib(pid)
        for s in socks:
            s.close()
        if sanitized(pid):
            self.assert_platform_alive()
            self.skipTest("sanitizer build: freed memory stays in its quarantine")
        # Once they are gone, corrald gives the memory back (not only to its own free lists).
        deadline = time.monotonic() + 10
        while rss_kib(pid) - base > 8 * 1024 and time.monotonic() < deadline:
            time.sleep(0.5)
        after = rss_kib(pid)
        self.assertLess(after - base, 8 * 1024,
                        "RSS %d KiB, %d KiB with the heads, %d KiB after" % (base, peak, after))
        self.assert_platform_alive()

    def test_slowloris(self):
        # Attack: 300 connections each send a request head one header line per second, forever.
        socks = []
        for i in range(300):
            s = socket.create_connection(("127.0.0.1", self.corrald.port), timeout=5)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            socks.append(s)
        open_ = set(range(len(socks)))
        deadline = time.monotonic() + 25
        answered_meanwhile = False
        while open_ and time.monotonic() < deadline:
            time.sleep(1)
            for i in list(open_):
                try:
                    socks[i].sendall(b"X-Slow: 1\r\n")
                    socks[i].setblocking(False)
                    try:
                        if socks[i].recv(1) == b"":
                            open_.discard(i)
                    except BlockingIOError:
                        pass
                    finally:
                        socks[i].setblocking(True)
                except (BrokenPipeError, ConnectionResetError):
                    open_.discard(i)
            if not answered_meanwhile:
                r = self.corrald.client(timeout=5).get("/health")
                answered_meanwhile = r.status == 200
        for s in socks:
            s.close()
        self.assertEqual(len(open_), 0, "%d slowloris connections still open" % len(open_))
        self.assertTrue(answered_meanwhile, "corrald did not answer during the attack")
        self.assert_platform_alive()

    def test_silent_connections(self):
        # Attack: 200 connections that never send a byte, to fill the connection cap for free.
        socks = [socket.create_connection(("127.0.0.1", self.corrald.port), timeout=5)
                 for _ in range(200)]
        deadline = time.monotonic() + 20
        open_ = set(range(len(socks)))
        while open_ and time.monotonic() < deadline:
            time.sleep(0.5)
            for i in list(open_):
                socks[i].setblocking(False)
                try:
                    if socks[i].recv(1) == b"":
                        open_.discard(i)
                except BlockingIOError:
                    pass
                except ConnectionResetError:
                    open_.discard(i)
        for s in socks:
            s.close()
        self.assertEqual(len(open_), 0, "%d silent connections still open" % len(open_))
        self.assert_platform_alive()

    def test_idle_keepalive_is_not_a_slow_head(self):
        # Not an attack: an idle keep-alive connection outlives the header deadline.
        c = self.corrald.client(timeout=10)
        self.assertEqual(c.get("/health").status, 200)
        time.sleep(4)
        self.assertEqual(c.get("/health").status, 200)
        self.assertEqual(c.connects, 1, "the idle connection was closed after the header deadline")


class ConnectionCapTest(AttackCase):
    corrald_kwargs = {"extra_args": ["--max-connections", "64"]}

    def test_connection_cap(self):
        # Attack: open 200 idle connections to hold corrald's descriptors.
        pid = self.corrald.proc.pid
        before = open_fds(pid)
        socks = []
        for i in range(200):
            try:
                socks.append(socket.create_connection(("127.0.0.1", self.corrald.port),
                                                      timeout=2))
            except OSError:
                break  # the backlog is full: the kernel stopped completing handshakes
        time.sleep(1)
        held = open_fds(pid) - before
        for s in socks:
            s.close()
        self.assertLessEqual(held, 64 + 2, "corrald holds %d client sockets" % held)
        self.wait_answering(15, "corrald never accepted again")
        self.assert_platform_alive()


class LowFdCorrald(Corrald):
    NOFILE = 128

    def argv(self, port):
        return ["prlimit", "--nofile=%d:%d" % (self.NOFILE, self.NOFILE), "--"] + super().argv(port)


class FdExhaustionTest(AttackCase):
    corrald_class = LowFdCorrald
    corrald_kwargs = {"extra_args": ["--max-connections", "100000"]}

    def test_fd_exhaustion(self):
        # Attack: open more connections than corrald has descriptors (RLIMIT_NOFILE 128).
        pid = self.corrald.proc.pid
        self.assertEqual(proc_status(pid, "Pid"), pid)
        log0 = os.path.getsize(self.corrald.log_path)
        socks = []
        for i in range(400):
            try:
                socks.append(socket.create_connection(("127.0.0.1", self.corrald.port),
                                                      timeout=1))
            except OSError:
                break
        time.sleep(1)
        cpu0 = cpu_seconds(pid)
        time.sleep(3)
        cpu = cpu_seconds(pid) - cpu0
        grown = os.path.getsize(self.corrald.log_path) - log0
        for s in socks:
            s.close()
        # Past the limit corrald pauses accepting instead of spinning on accept() and logging.
        self.assertLess(cpu, 1.0, "corrald used %.2f s of CPU in 3 s at the fd limit" % cpu)
        self.assertLess(grown, 16 * 1024, "corrald logged %d bytes" % grown)
        self.wait_answering(15, "corrald never answered again")
        self.assert_platform_alive()


class ProxyAuthTest(AttackCase):
    corrald_kwargs = {"api_key": KEY}

    def proxy_run(self, sid, headers, prefix=""):
        c = self.corrald.client(api_key=None, timeout=30)
        try:
            return c.request("POST", prefix + c.execd_path(sid, "/command"),
                             body={"command": "echo reached"}, headers=headers)
        finally:
            c.close()

    def endpoint(self, sid):
        r = self.client.get("/v1/sandboxes/%s/endpoints/44772" % sid)
        self.assertEqual(r.status, 200, r)
        return r.json()

    def test_proxy_needs_a_credential(self):
        sid = self.create()["id"]
        other = self.create()["id"]
        # Attack: run a command through the proxy knowing only the sandbox's id.
        for prefix in ("", "/v1"):
            r = self.proxy_run(sid, {}, prefix)
            self.assertEqual(r.status, 401, r)
            self.assertEqual(r.json()["code"], "MISSING_API_KEY")
            self.assertNotIn("reached", r.text)
        # Attack: a made-up token, and another sandbox's genuine token.
        r = self.proxy_run(sid, {TOKEN_HEADER: "0" * 64})
        self.assertEqual(r.status, 401, r)
        self.assertEqual(r.json()["code"], "INVALID_ACCESS_TOKEN")
        other_token = self.endpoint(other)["headers"][TOKEN_HEADER]
        r = self.proxy_run(sid, {TOKEN_HEADER: other_token})
        self.assertEqual(r.status, 401, r)
        # Attack: a wrong API key beside nothing else.
        r = self.proxy_run(sid, {"OPEN-SANDBOX-API-KEY": "guess"})
        self.assertEqual(r.status, 401, r)
        # Attack: a big unauthenticated upload on the proxy route is refused on its head.
        s = socket.create_connection(("127.0.0.1", self.corrald.port), timeout=10)
        s.sendall(b"POST /sandboxes/%s/proxy/44772/files/upload HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Length: %d\r\n\r\n" % (sid.encode(), CLAIMED))
        self.assertIn(" 401 ", (recv_head(s, 5) or "") + " ")
        s.close()
        # The endpoint's own headers work, as the SDKs send them; so does the key.
        ep = self.endpoint(sid)
        self.assertEqual(ep["endpoint"].split("/", 1)[1], "sandboxes/%s/proxy/44772" % sid)
        token = ep["headers"][TOKEN_HEADER]
        for prefix in ("", "/v1"):
            r = self.proxy_run(sid, {TOKEN_HEADER: token}, prefix)
            self.assertEqual(r.status, 200, r)
            self.assertIn("reached", r.text)
        r = self.proxy_run(sid, {"OPEN-SANDBOX-API-KEY": KEY})
        self.assertEqual(r.status, 200, r)
        self.assertIn("reached", r.text)
        # A token is per sandbox and stable: asking again gives the same one.
        self.assertEqual(self.endpoint(sid)["headers"][TOKEN_HEADER], token)
        self.assertNotEqual(token, other_token)
        self.assert_platform_alive(sid, other)

    def test_upload_after_lifecycle_calls_on_one_connection(self):
        # Not an attack: a 4 MiB upload on a connection that first made lifecycle calls (1 MiB cap).
        # Each request on a connection is judged anew, wherever evhttp allocates it.
        sid = self.create()["id"]
        for calls in range(1, 5):
            c = self.corrald.client(timeout=30)
            try:
                for _ in range(calls):
                    self.assertEqual(c.get("/v1/sandboxes/%s" % sid).status, 200)
                r = c.request("POST", c.execd_path(sid, "/files/upload"), raw=b"x" * (4 << 20),
                              headers={"Content-Type": "multipart/form-data; boundary=b"})
                self.assertNotEqual(r.status, 413, r)
                self.assertEqual(c.connects, 1)
            finally:
                c.close()

    ECHO_SERVER = (
        "import http.server, json, sys\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    protocol_version = 'HTTP/1.1'\n"
        "    def do_GET(self):\n"
        "        out = json.dumps([[k, v] for k, v in self.headers.items()]).encode()\n"
        "        self.send_response(200)\n"
        "        self.send_header('Content-Length', str(len(out)))\n"
        "        self.end_headers()\n"
        "        self.wfile.write(out)\n"
        "    def log_message(self, *a):\n"
        "        pass\n"
        "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n")

    def test_forged_forwarding_headers_do_not_reach_a_sandbox_server(self):
        sid = self.create()["id"]
        port = 8000 + secrets.randbelow(900)
        self.client.run(sid, "cat > /tmp/echo.py <<'EOF'\n%sEOF\nexec python3 /tmp/echo.py %d"
                        % (self.ECHO_SERVER, port), background=True)
        path = "/sandboxes/%s/proxy/%d/h" % (sid, port)
        deadline = time.monotonic() + 15
        while self.client.get(path).status != 200:
            self.assertLess(time.monotonic(), deadline, "the in-sandbox server never answered")
            time.sleep(0.2)
        # Attack: a client forges the forwarding headers so the sandbox's server takes 10.6.6.6 (and
        # https, and another host) for what corrald saw, and smuggles hop-by-hop fields and
        # corrald's own credentials past it.
        r = self.client.get(path, headers={
            "Host": "corral.example:8080",
            "X-Forwarded-For": "10.6.6.6",
            "X-Forwarded-Host": "bank.example",
            "X-Forwarded-Proto": "https",
            "Forwarded": "for=10.6.6.6;proto=https",
            "Proxy-Authorization": "Basic c2VjcmV0",
            "Connection": "keep-alive, X-Hop-Secret",
            "X-Hop-Secret": "s3cret",
            "X-End-To-End": "kept"})
        self.assertEqual(r.status, 200, r)
        seen = {}
        for k, v in r.json():
            seen.setdefault(k.lower(), []).append(v)
        self.assertEqual(seen.get("x-forwarded-for"), ["127.0.0.1"], seen)
        self.assertEqual(seen.get("x-forwarded-host"), ["corral.example:8080"], seen)
        self.assertEqual(seen.get("x-forwarded-proto"), ["http"], seen)
        self.assertEqual(seen.get("x-end-to-end"), ["kept"], seen)
        for gone in ("forwarded", "proxy-authorization", "x-hop-secret", "open-sandbox-api-key",
                     TOKEN_HEADER.lower(), "authorization", "cookie"):
            self.assertNotIn(gone, seen)
        self.assertNotIn("10.6.6.6", r.text)
        self.assertNotIn("bank.example", r.text)
        self.assert_platform_alive(sid)

    def test_token_survives_restart(self):
        sid = self.create()["id"]
        token = self.endpoint(sid)["headers"][TOKEN_HEADER]
        key = os.path.join(self.corrald.state_dir, "proxy-token.key")
        self.assertEqual(os.stat(key).st_mode & 0o777, 0o600)
        self.corrald.restart()
        self.client.close()
        r = self.proxy_run(sid, {TOKEN_HEADER: token})
        self.assertEqual(r.status, 200, r)
        self.assertIn("reached", r.text)


if __name__ == "__main__":
    main()
