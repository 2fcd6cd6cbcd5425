"""
Attacks on the egress policy from inside a sandbox (docs/network.md, docs/security.md): reaching
or changing its own policy, DNS around corral's resolver, queries with another sandbox's source
address, and a flood of malformed DNS. The "internet" is the test's own network namespace
(tests/integration/netlab.py); no packet goes toward any address outside this machine.
"""
import json
import os
import random
import sys
import time

from sec import AttackCase, log, main

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "integration"))
from netlab import DNS_PROBE, LabCase  # noqa: E402

SMALL = {"cpu": "100m", "memory": "64Mi", "pids": "64"}
KEY = "egress-attack-key-%d" % random.randint(0, 1 << 30)


NET_DNS_RATE, NET_DNS_BURST = 2000, 4000  # src/network/net.h
CONN_RATE, CONN_BURST = 20, 40  # NET_DNS_CONN_*: new TCP connections to the resolver
TCP_QUERY_RATE, TCP_QUERY_BURST = 125, 32  # src/network/resolver.h: per TCP connection


def q(s):
    return "'" + s.replace("'", "'\\''") + "'"


class EgressAttacks(LabCase, AttackCase):
    @classmethod
    def lab_corrald_kwargs(cls):
        # corrald listens on every host address (with a key, as it must then), so that an attacker
        # has something to aim at: the bridge gateway and the lab link's host end are host addresses
        return {"api_key": KEY, "listen_host": "0.0.0.0",
                "extra_args": cls.lab.corrald_args("dns+nft")}

    def sandbox(self, policy):
        return self.create(resourceLimits=SMALL, resourceRequests={"cpu": "10m", "memory": "16Mi"},
                           networkPolicy=policy)["id"]

    def nameserver(self, sid):
        return self.sh(sid, "awk '/^nameserver/ {print $2; exit}' /etc/resolv.conf").strip()

    def resolve(self, sid, name, server=None):
        srv = server or self.nameserver(sid)
        out = self.sh(sid, "/usr/bin/python3 -c %s %s %s" % (q(DNS_PROBE), srv, name)).split()
        return out[0] if len(out) == 1 and not out[0][0].isdigit() else out

    def egress_headers(self, sid):
        return self.client.get("/v1/sandboxes/%s/endpoints/18080" % sid).json()["headers"]

    def policy_of(self, sid):
        r = self.client.request("GET", "/sandboxes/%s/proxy/18080/policy" % sid,
                                headers=self.egress_headers(sid))
        self.assertEqual(r.status, 200, r)
        return r.json()["policy"]

    def test_sandbox_cannot_reach_or_change_its_policy(self):
        # attack: from inside, call corrald's API (and the policy API) on every host address it
        # can name, and serve a fake policy API on its own port 18080 hoping to be proxied to
        pol = {"defaultAction": "deny", "egress": [{"action": "allow", "target": "allowed.test"}]}
        sid = self.sandbox(pol)
        gw = self.nameserver(sid)
        hdrs = self.egress_headers(sid)
        body = json.dumps({"defaultAction": "allow", "egress": []})
        for host in (gw, self.lab.host_ip, "127.0.0.1"):
            cmd = ("curl -s -m 3 -o /dev/null -w '%%{http_code}' -X POST "
                   "-H 'OPEN-SANDBOX-API-KEY: %s' -H 'OPENSANDBOX-EGRESS-AUTH: %s' -d %s "
                   "http://%s:%d/sandboxes/%s/proxy/18080/policy; echo \" rc=$?\""
                   % (KEY, hdrs["OPENSANDBOX-EGRESS-AUTH"], q(body), host, self.corrald.port, sid))
            out = self.sh(sid, cmd)
            self.assertNotIn("200", out.split()[0] if out.split() else "", "%s: %s" % (host, out))
            self.assertNotIn("rc=0", out, "corrald's API answered the sandbox on %s" % host)
        self.assertEqual(self.policy_of(sid), pol)
        # a fake sidecar on the sandbox's own 18080: the policy API is corrald's, never proxied
        self.sh(sid, "nohup /usr/bin/python3 -c %s >/tmp/fake.log 2>&1 & sleep 0.5" % q(
            "import http.server\n"
            "class H(http.server.BaseHTTPRequestHandler):\n"
            "    def do_GET(self):\n"
            "        open('/tmp/hit', 'w').write('hit')\n"
            "        b = b'{\"status\":\"ok\",\"mode\":\"allow_all\",\"policy\":{\"defaultAction\":\"allow\",\"egress\":[]}}'\n"
            "        self.send_response(200); self.end_headers(); self.wfile.write(b)\n"
            "    do_POST = do_PATCH = do_PUT = do_DELETE = do_GET\n"
            "http.server.HTTPServer(('0.0.0.0', 18080), H).serve_forever()\n"))
        self.assertEqual(self.policy_of(sid), pol)
        r = self.client.request("PATCH", "/sandboxes/%s/proxy/18080/policy" % sid,
                                body=[{"action": "allow", "target": "patch.test"}],
                                headers=self.egress_headers(sid))
        self.assertEqual(r.status, 200, r)
        self.assertEqual(self.sh(sid, "cat /tmp/hit 2>/dev/null || echo none").strip(), "none")
        # the sandbox cannot learn its own token either: it is only in corrald's replies
        self.assertEqual(self.resolve(sid, "denied.test"), "NXDOMAIN")
        self.assert_platform_alive(sid)

    def test_dns_around_the_resolver_is_blocked(self):
        # attack: a sandbox allowed everything sends DNS straight to the upstream and to another
        # resolver, over UDP and TCP, and tries DNS over TLS
        sid = self.sandbox({"defaultAction": "allow", "egress": []})
        before = len(self.lab.dns_queries())
        for server in (self.lab.ns_ip, self.lab.addr["resolver2"]):
            self.assertEqual(self.resolve(sid, "allowed.test", server=server), "TIMEOUT")
            out = self.sh(sid, "/usr/bin/python3 -c %s %s allowed.test tcp" % (q(DNS_PROBE), server))
            self.assertEqual(out.strip(), "TIMEOUT")
        out = self.sh(sid, "curl -s -m 3 http://%s:853/; echo rc=$?" % self.lab.addr["dot"])
        self.assertNotIn("hello", out)
        self.assertEqual(len(self.lab.dns_queries()), before,
                         "a query around corral's resolver reached a DNS server")
        self.assert_platform_alive(sid)

    def test_spoofed_source_cannot_use_another_sandboxs_policy(self):
        # attack: sandbox A (denied everything) sends DNS queries with sandbox B's address as
        # source (raw socket, or B's address added to its own interface) for a name only B may
        # resolve, and then tries to connect to its address
        a = self.sandbox({"defaultAction": "deny", "egress": []})
        b = self.sandbox({"defaultAction": "deny",
                          "egress": [{"action": "allow", "target": "allowed.test"}]})
        b_ip = self.sh(b, "ip -4 -o addr show dev eth0 | awk '{print $4}' | cut -d/ -f1").strip()
        a_ip = self.sh(a, "ip -4 -o addr show dev eth0 | awk '{print $4}' | cut -d/ -f1").strip()
        self.assertTrue(b_ip and a_ip and a_ip != b_ip, (a_ip, b_ip))
        gw = self.nameserver(a)
        spoof = r"""
import socket, struct, sys
src, dst, name = sys.argv[1], sys.argv[2], sys.argv[3]
q = struct.pack(">HHHHHH", 4242, 0x0100, 1, 0, 0, 0)
for l in name.split("."):
    q += bytes([len(l)]) + l.encode()
q += b"\0" + struct.pack(">HH", 1, 1)
udp = struct.pack(">HHHH", 5353, 53, 8 + len(q), 0) + q
ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 1, 0, 64, 17, 0,
                 socket.inet_aton(src), socket.inet_aton(dst))
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    for _ in range(50):
        s.sendto(ip + udp, (dst, 0))
    print("sent")
except OSError as e:
    print("raw:", e.errno)
"""
        out = self.sh(a, "/usr/bin/python3 -c %s %s %s allowed.test" % (q(spoof), b_ip, gw))
        log("raw spoof from A:", out.strip())
        out2 = self.sh(a, "ip addr add %s/32 dev eth0 2>&1; echo rc=$?" % b_ip)
        log("address theft in A:", out2.strip())
        time.sleep(1)
        # B's counters saw no query: the spoofed packets never reached the resolver as B
        st = self.client.get("/v1/sandboxes/%s/stats" % b).json()["network"]
        self.assertEqual(st["dnsAllowed"], 0, st)
        # A still gets nothing for the name, neither by name nor by address
        self.assertEqual(self.resolve(a, "allowed.test"), "NXDOMAIN")
        out = self.sh(a, "curl -s -m 3 http://%s/; echo rc=$?" % self.lab.addr["allowed.test"])
        self.assertNotIn("hello", out)
        # and B's policy is what it was
        self.assertEqual(self.policy_of(b)["egress"], [{"action": "allow", "target": "allowed.test"}])
        self.assert_platform_alive(a, b)

    def test_malformed_dns_flood_leaves_the_resolver_answering(self):
        # attack: 20000 malformed, truncated and oversized datagrams and junk TCP streams at the
        # resolver, then ask it for a name
        sid = self.sandbox({"defaultAction": "deny",
                            "egress": [{"action": "allow", "target": "allowed.test"}]})
        other = self.sandbox({"defaultAction": "allow", "egress": []})
        gw = self.nameserver(sid)
        flood = r"""
import os, random, socket, struct, sys
gw = sys.argv[1]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setblocking(False)
sent = 0
for i in range(20000):
    kind = i % 5
    if kind == 0:
        p = os.urandom(random.randrange(0, 600))
    elif kind == 1:
        p = struct.pack(">HHHHHH", i & 0xffff, 0x0100, 1, 0, 0, 0) + b"\x3f" + b"a" * 63
    elif kind == 2:
        p = struct.pack(">HHHHHH", i & 0xffff, 0x0100, 0xffff, 0xffff, 0, 0) + b"\xc0\x0c" * 50
    elif kind == 3:
        p = os.urandom(1400)
    else:
        p = struct.pack(">HHHHHH", i & 0xffff, 0x8100, 1, 0, 0, 0) + b"\x07allowed\x04test\0\0\1\0\1"
    try:
        s.sendto(p, (gw, 53))
        sent += 1
    except BlockingIOError:
        pass
for _ in range(20):
    try:
        t = socket.create_connection((gw, 53), timeout=2)
        t.sendall(b"\xff\xff" + os.urandom(3000))
        t.close()
    except OSError:
        pass
print(sent)
"""
        out = self.sh(sid, "/usr/bin/python3 -c %s %s" % (q(flood), gw), read_timeout=300)
        log("malformed datagrams sent:", out.strip())
        self.assertGreater(int(out.strip()), 1000)
        self.assertEqual(self.resolve(sid, "allowed.test"), [self.lab.addr["allowed.test"]])
        self.assertEqual(self.resolve(other, "denied.test"), [self.lab.addr["denied.test"]])
        self.assert_platform_alive(sid, other)

    def flooder_and_neighbour(self):
        """A sandbox with a whole CPU allowed allowed.test, a neighbour allowed everything, and
        the flooder's name server."""
        sid = self.create(resourceLimits={"cpu": "1", "memory": "64Mi", "pids": "64"},
                          networkPolicy={"defaultAction": "deny", "egress": [
                              {"action": "allow", "target": "allowed.test"}]})["id"]
        other = self.sandbox({"defaultAction": "allow", "egress": []})
        return sid, other, self.nameserver(sid)

    def assert_both_resolve(self, sid, other):
        # the buckets refill: the flooder resolves again, the neighbour never stopped
        self.assertEqual(self.resolve(other, "denied.test"), [self.lab.addr["denied.test"]])
        time.sleep(1)
        self.assertEqual(self.resolve(sid, "allowed.test"), [self.lab.addr["allowed.test"]])
        self.assert_platform_alive(sid, other)

    def test_dns_flood_is_bounded_per_sandbox_in_the_kernel(self):
        # attack: a sandbox sends valid queries at corral's resolver as fast as it can for 3 s,
        # to make corrald (whose loop the resolver shares with the API) work for every one
        sid, other, gw = self.flooder_and_neighbour()
        flood = r"""
import socket, struct, sys, time
gw, secs = sys.argv[1], float(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
s.setblocking(False)
q = [struct.pack(">HHHHHH", i, 0x0100, 1, 0, 0, 0) + b"\x06denied\x04test\0\0\1\0\1"
     for i in range(64)]
sent = got = 0
end = time.time() + secs
while time.time() < end:
    for p in q:
        try:
            s.sendto(p, (gw, 53))
            sent += 1
        except BlockingIOError:
            pass
    try:
        while True:
            s.recv(4096)
            got += 1
    except BlockingIOError:
        pass
time.sleep(0.5)
try:
    while True:
        s.recv(4096)
        got += 1
except BlockingIOError:
    pass
print(sent, got)
"""
        drops0 = self.client.get("/v1/sandboxes/%s/stats" % sid).json()["network"]["droppedPackets"]
        secs = 3
        sent, got = map(int, self.sh(sid, "/usr/bin/python3 -c %s %s %d" % (q(flood), gw, secs),
                                     read_timeout=120).split())
        log("DNS flood: %d queries sent in %d s, %d answered" % (sent, secs, got))
        bound = NET_DNS_RATE * (secs + 1) + NET_DNS_BURST
        self.assertGreater(sent, 1.5 * bound, "precondition: the flood outran the limit")
        self.assertLessEqual(got, bound * 1.1, "the resolver answered past the sandbox's rate")
        drops = self.client.get("/v1/sandboxes/%s/stats" % sid).json()["network"]["droppedPackets"]
        self.assertGreaterEqual(drops - drops0, sent - bound * 1.1, "the host's drops are counted")
        self.assert_both_resolve(sid, other)

    def test_dns_over_tcp_cannot_outrun_the_rate(self):
        # attack: pipeline queries down TCP connections to corral's resolver (thousands per
        # segment, past the kernel's packet limit), on one connection and by reconnecting for a
        # fresh burst each time, to keep corrald's loop answering
        sid, other, gw = self.flooder_and_neighbour()
        flood = r"""
import socket, struct, sys, threading, time
gw, secs, mode = sys.argv[1], float(sys.argv[2]), sys.argv[3]
q = b"".join(struct.pack(">H", 29) + struct.pack(">HHHHHH", i, 0x0100, 1, 0, 0, 0) +
             b"\x06denied\x04test\0\0\1\0\1" for i in range(256))
got = [0]
def reader(t):
    buf = b""
    try:
        while True:
            d = t.recv(1 << 16)
            if not d:
                return
            buf += d
            while len(buf) >= 2 and len(buf) >= 2 + (buf[0] << 8 | buf[1]):
                buf = buf[2 + (buf[0] << 8 | buf[1]):]
                got[0] += 1
    except OSError:
        pass
start = time.time()
end = start + secs
conns = 0
held = []
while time.time() < end:
    try:
        t = socket.create_connection((gw, 53), timeout=0.2)
    except OSError:
        continue
    conns += 1
    t.settimeout(max(0.05, end - time.time()))
    threading.Thread(target=reader, args=(t,), daemon=True).start()
    try:
        if mode == "pipeline":
            while time.time() < end:
                t.sendall(q)
        else:
            t.sendall(q[:64 * 31])
    except OSError:
        pass
    if mode == "reconnect":  # keep the newest 12 reading, close the oldest for a new one
        held.append(t)
        if len(held) > 12:
            held.pop(0).close()
time.sleep(0.5)
print(conns, got[0], time.time() - start)
"""
        secs = 3
        for mode in ("pipeline", "reconnect"):
            out = self.sh(sid, "/usr/bin/python3 -c %s %s %d %s" % (q(flood), gw, secs, mode),
                          read_timeout=120).split()
            conns, got, took = int(out[0]), int(out[1]), float(out[2]) + 0.5
            # one connection's burst and rate; or a burst per connection the host admitted
            bound = ((TCP_QUERY_BURST + TCP_QUERY_RATE * took) if mode == "pipeline" else
                     (CONN_BURST + CONN_RATE * took) * TCP_QUERY_BURST +
                     16 * TCP_QUERY_RATE * took)
            log("DNS over TCP, %s: %d connections, %d answers in %.1f s (bound %d)"
                % (mode, conns, got, took, bound))
            self.assertGreater(got, 0, "precondition: the resolver answered over TCP")
            self.assertLessEqual(got, bound, "the resolver answered past the rate (%s)" % mode)
        self.assert_both_resolve(sid, other)


if __name__ == "__main__":
    main()
