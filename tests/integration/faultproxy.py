"""
A small HTTP/1.1 fault-injection proxy on loopback, between a client and corrald (Python 3
standard library only). It understands just enough HTTP to know where each request and each
response ends (Content-Length, chunked, or close), so faults land on request boundaries:

  drop_before   read the request, close the client connection without forwarding it
  drop_after    forward the whole request (body included), then close without relaying any answer
  cut           forward, relay part of the answer (e.g. the middle of an event stream), then close
  bad_gateway   answer 502 SANDBOX::BACKEND_UNREACHABLE itself without forwarding
  stall         forward, then stop relaying the answer for stall_s seconds and close

and, independent of the per-request faults, it gives up on a client connection that stayed idle
for idle_close_s seconds, the way a server's keep-alive reaper does, but without telling the
client (no FIN), which is the race a real client loses: a request sent on that connection later
is dropped unanswered and counted in stats["stale_reuses"]. A client whose pooled connections
expire before the server's idle timeout never causes one.

Counters (per fault kind, requests, idle closes) are kept in .stats; faults are drawn from a
seeded random generator and can be limited to some methods/paths (match, exclude).
"""

import json
import random
import re
import socket
import threading
import time

FAULTS = ("drop_before", "drop_after", "cut", "bad_gateway", "stall")


class _Conn:
    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def fill(self, timeout=None):
        self.sock.settimeout(timeout)
        data = self.sock.recv(65536)
        if not data:
            raise EOFError()
        self.buf += data

    def read_until(self, sep, timeout=None):
        while sep not in self.buf:
            self.fill(timeout)
        i = self.buf.index(sep) + len(sep)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def read_exact(self, n, timeout=None):
        while len(self.buf) < n:
            self.fill(timeout)
        out, self.buf = self.buf[:n], self.buf[n:]
        return out


def _headers(head):
    lines = head.decode("latin-1").split("\r\n")
    hdrs = {}
    for l in lines[1:]:
        if ":" in l:
            k, v = l.split(":", 1)
            hdrs[k.strip().lower()] = v.strip()
    return lines[0], hdrs


class FaultProxy:
    def __init__(self, upstream_port, rate=0.0, faults=FAULTS, seed=1, idle_close_s=None,
                 stall_s=6.0, match=None, exclude=None, strip_id=False, strip_wait=False):
        # strip_id / strip_wait make corrald look like a server without the client-chosen
        # command id / the status long-poll (stock OpenSandbox execd), for the fallback paths.
        self.strip_id = strip_id
        self.strip_wait = strip_wait
        self.upstream_port = upstream_port
        self.rate = rate
        self.faults = tuple(faults)
        self.rng = random.Random(seed)
        self.rng_lock = threading.Lock()
        self.idle_close_s = idle_close_s
        self.stall_s = stall_s
        self.match = re.compile(match) if match else None
        self.exclude = re.compile(exclude) if exclude else None
        self.stats = {k: 0 for k in FAULTS}
        self.stats.update(requests=0, idle_closes=0, stale_reuses=0, connections=0, status_polls=0)
        self.stats_lock = threading.Lock()
        self.create_keys = []  # (Idempotency-Key or None, fault or None) of each POST /v1/sandboxes
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(4096)
        self.port = self.lsock.getsockname()[1]
        self.stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def count(self, k):
        with self.stats_lock:
            self.stats[k] += 1

    def stop(self):
        self.stopped = True
        try:
            self.lsock.close()
        except OSError:
            pass

    def _accept(self):
        while not self.stopped:
            try:
                s, _ = self.lsock.accept()
            except OSError:
                return
            self.count("connections")
            threading.Thread(target=self._serve, args=(s,), daemon=True).start()

    def _pick(self, request_line):
        target = " ".join(request_line.split(" ")[:2])
        if self.match and not self.match.search(target):
            return None
        if self.exclude and self.exclude.search(target):
            return None
        with self.rng_lock:
            if self.rng.random() >= self.rate:
                return None
            return self.rng.choice(self.faults)

    def _serve(self, csock):
        c = _Conn(csock)
        up = None
        try:
            while True:
                try:
                    head = c.read_until(b"\r\n\r\n", timeout=self.idle_close_s)
                except socket.timeout:
                    if c.buf:
                        return
                    # The server has given up on this connection, but (as in the real race)
                    # the client has not heard yet: a request sent on it now is lost.
                    self.count("idle_closes")
                    try:
                        c.fill(timeout=120)
                    except (socket.timeout, EOFError, OSError):
                        return
                    self.count("stale_reuses")
                    return
                rl, hdrs = _headers(head)
                n = int(hdrs.get("content-length", "0") or 0)
                body = c.read_exact(n, timeout=30) if n else b""
                head, body = self._rewrite(head, rl, body)
                rl = head.split(b"\r\n", 1)[0].decode("latin-1")
                self.count("requests")
                fault = self._pick(rl)
                if fault:
                    self.count(fault)
                if rl.startswith("POST /v1/sandboxes "):
                    with self.stats_lock:
                        self.create_keys.append((hdrs.get("idempotency-key"), fault))
                if fault == "drop_before":
                    return
                if fault == "bad_gateway":
                    msg = (b'{"code":"SANDBOX::BACKEND_UNREACHABLE","message":'
                           b'"injected by the fault proxy"}')
                    csock.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json\r\n"
                                  b"Content-Length: %d\r\n\r\n%s" % (len(msg), msg))
                    continue
                if up is None:
                    up = _Conn(socket.create_connection(("127.0.0.1", self.upstream_port)))
                up.sock.sendall(head + body)
                if fault == "drop_after":
                    time.sleep(0.05)  # let the request reach the daemon
                    return
                keep = self._relay(up, csock, rl, fault)
                if not keep:
                    return
        except (OSError, EOFError, ValueError):
            return
        finally:
            try:
                csock.close()
            except OSError:
                pass
            if up is not None:
                try:
                    up.sock.close()
                except OSError:
                    pass

    def _rewrite(self, head, rl, body):
        method, target = rl.split(" ")[:2]
        if "/command/status/" in target:
            self.count("status_polls")
        if self.strip_wait and "/command/status/" in target and "?" in target:
            nt = target.split("?", 1)[0]
            head = head.replace(target.encode(), nt.encode(), 1)
        if self.strip_id and method == "POST" and target.endswith("/command") and body:
            try:
                j = json.loads(body)
            except ValueError:
                return head, body
            if isinstance(j, dict) and "id" in j:
                del j["id"]
                nb = json.dumps(j).encode()
                head = re.sub(rb"(?i)content-length: *\d+", b"Content-Length: %d" % len(nb), head)
                body = nb
        return head, body

    def _relay(self, up, csock, request_line, fault):
        """Relays one answer; returns False when the connection must end."""
        head = up.read_until(b"\r\n\r\n", timeout=120)
        status_line, hdrs = _headers(head)
        if fault == "stall":
            time.sleep(self.stall_s)
            return False
        sent = [0]
        cut_at = None
        if fault == "cut":
            with self.rng_lock:
                cut_at = self.rng.randint(1, len(head) + 200)

        def send(data):
            if cut_at is not None and sent[0] + len(data) >= cut_at:
                part = data[:max(0, cut_at - sent[0])]
                if part:
                    csock.sendall(part)
                raise EOFError()
            csock.sendall(data)
            sent[0] += len(data)

        send(head)
        method = request_line.split(" ")[0]
        code = int(status_line.split(" ")[1])
        if method == "HEAD" or code in (204, 304) or 100 <= code < 200:
            return True
        if hdrs.get("transfer-encoding", "").lower() == "chunked":
            while True:
                line = up.read_until(b"\r\n", timeout=120)
                size = int(line.split(b";")[0].strip(), 16)
                if size == 0:
                    trailer = up.read_until(b"\r\n", timeout=120)
                    send(line + trailer)
                    break
                data = up.read_exact(size + 2, timeout=120)
                send(line + data)
        elif "content-length" in hdrs:
            n = int(hdrs["content-length"])
            if n:
                send(up.read_exact(n, timeout=120))
        else:
            while True:
                try:
                    up.fill(timeout=120)
                except EOFError:
                    send(up.buf)
                    return False
                send(up.buf)
                up.buf = b""
        if cut_at is not None:
            return False  # the answer was shorter than the cut: still end the connection
        return hdrs.get("connection", "").lower() != "close"
