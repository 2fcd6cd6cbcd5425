#!/usr/bin/env python3
"""
The reverse proxy (src/shared/revproxy.h): proxied request rate and streaming throughput through
corrald -> execd (port 44772) and corrald -> execd -> a server in the sandbox (any other port).

    sudo python3 bench/proxy.py [--baseline OTHER_BUILD_DIR] [--rounds 3] [--secs 2] [--mb 256]

With --baseline, the same measurements run against a corrald (and its corral-execd) of another
build, interleaved round by round so machine noise hits both alike, and the ratio this/baseline is
printed (> 1: this build is faster for rates and throughputs). Timings are never asserted.

The server in the sandbox is a small asyncio HTTP/1.1 server (python3 of the host image):
  /small        2-byte body, keep-alive
  /close        2-byte body, Connection: close (no pooling possible, for either build)
  /big?mb=N     N MiB, Content-Length framed
  /chunked?mb=N N MiB, chunked
"""
import argparse
import http.client
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
import harness  # noqa: E402

BACKEND = r'''
import asyncio, sys
BLOCK = b"z" * (1 << 20)
async def serve(reader, writer):
    try:
        while True:
            # An idle keep-alive connection is closed after 2 s, as servers do.
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2)
            target = head.split(b" ", 2)[1]
            path, _, query = target.partition(b"?")
            mb = int(query.split(b"=")[1]) if query.startswith(b"mb=") else 0
            if path == b"/big":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (mb << 20))
                for _ in range(mb):
                    writer.write(BLOCK)
                    await writer.drain()
            elif path == b"/chunked":
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                for _ in range(mb):
                    writer.write(b"100000\r\n" + BLOCK + b"\r\n")
                    await writer.drain()
                writer.write(b"0\r\n\r\n")
            elif path == b"/close":
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
                await writer.drain()
                break
            else:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()
    except (asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError):
        pass
    writer.close()
async def main():
    srv = await asyncio.start_server(serve, "127.0.0.1", int(sys.argv[1]), backlog=1024)
    await srv.serve_forever()
asyncio.run(main())
'''
PORT = 8765


class BuildCorrald(harness.Corrald):
    """A corrald of another build (its own corral-execd beside it)."""

    def __init__(self, build_dir):
        super().__init__()
        self.build_dir = build_dir

    def argv(self, port):
        a = super().argv(port)
        if self.build_dir:
            a[0] = os.path.join(self.build_dir, "corrald")
        return a


class Target:
    def __init__(self, label, build_dir):
        self.label = label
        self.d = BuildCorrald(build_dir).start()
        self.c = self.d.client(timeout=60)
        r = self.c.create_sandbox_raw()
        if r.status != 202:
            raise RuntimeError("create failed: %r" % r)
        self.sid = r.json()["id"]
        self.c.run(self.sid, "cat > /tmp/backend.py <<'EOF'\n%s\nEOF\nexec python3 /tmp/backend.py %d"
                   % (BACKEND, PORT), background=True)
        deadline = time.monotonic() + 20
        while True:
            conn = self.conn()
            try:
                conn.request("GET", self.path(PORT, "/small"))
                r = conn.getresponse()
                r.read()
                if r.status == 200:
                    break
            except OSError:
                pass
            finally:
                conn.close()
            if time.monotonic() > deadline:
                raise RuntimeError("the backend in the sandbox never answered")
            time.sleep(0.2)

    def conn(self):
        return http.client.HTTPConnection("127.0.0.1", self.d.port, timeout=60)

    def path(self, port, rest):
        return "/sandboxes/%s/proxy/%d%s" % (self.sid, port, rest)

    def close(self):
        self.c.delete_sandbox(self.sid)
        self.c.close()
        self.d.stop()


def rate(t, path, secs):
    """Sequential requests on one keep-alive client connection for secs: requests per second."""
    conn = t.conn()
    n, t0 = 0, time.perf_counter()
    while True:
        conn.request("GET", path)
        r = conn.getresponse()
        r.read()
        if r.status != 200:
            raise RuntimeError("%s: %d" % (path, r.status))
        n += 1
        dt = time.perf_counter() - t0
        if dt >= secs:
            break
    conn.close()
    return n / dt


def throughput(t, path, mb):
    """MiB/s of one download of mb MiB read to its end."""
    conn = t.conn()
    t0 = time.perf_counter()
    conn.request("GET", path)
    r = conn.getresponse()
    got = 0
    buf = bytearray(1 << 20)
    while True:
        k = r.readinto(buf)
        if not k:
            break
        got += k
    dt = time.perf_counter() - t0
    conn.close()
    if r.status != 200 or got != mb << 20:
        raise RuntimeError("%s: %d, %d bytes" % (path, r.status, got))
    return mb / dt


def measure(t, args):
    secs, mb = args.secs, args.mb
    rows = {
        "execd GET /ping (req/s)": lambda: rate(t, t.path(44772, "/ping"), secs),
        "port GET keep-alive backend (req/s)": lambda: rate(t, t.path(PORT, "/small"), secs),
        "port GET closing backend (req/s)": lambda: rate(t, t.path(PORT, "/close"), secs),
        "port stream, Content-Length (MiB/s)":
            lambda: throughput(t, t.path(PORT, "/big?mb=%d" % mb), mb),
        "port stream, chunked (MiB/s)":
            lambda: throughput(t, t.path(PORT, "/chunked?mb=%d" % mb), mb),
    }
    return {k: f() for k, f in rows.items() if not args.only or args.only in k}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", help="another build dir (with corrald and corral-execd)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--secs", type=float, default=2.0, help="seconds per request-rate row")
    ap.add_argument("--mb", type=int, default=256, help="MiB per streamed download")
    ap.add_argument("--samples", action="store_true", help="print every round's numbers too")
    ap.add_argument("--only", help="measure only the rows whose name contains this")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (sandboxes)")

    targets = [Target("this build", None)]
    if args.baseline:
        targets.append(Target("baseline", args.baseline))
    samples = {t.label: {} for t in targets}
    try:
        for i in range(args.rounds):
            for t in (targets if i % 2 == 0 else targets[::-1]):
                for k, v in measure(t, args).items():
                    samples[t.label].setdefault(k, []).append(v)
    finally:
        for t in targets:
            t.close()

    rows = list(samples["this build"])
    head = "%-40s %14s" % ("median of %d rounds" % args.rounds, "this build")
    if args.baseline:
        head += " %14s %8s" % ("baseline", "ratio")
    print(head)
    for k in rows:
        a = statistics.median(samples["this build"][k])
        line = "%-40s %14.1f" % (k, a)
        if args.baseline:
            b = statistics.median(samples["baseline"][k])
            line += " %14.1f %7.2fx" % (b, a / b)
        print(line)
        if args.samples:
            for t in samples:
                print("    %-12s %s" % (t, " ".join("%.1f" % v for v in samples[t][k])))


if __name__ == "__main__":
    main()
