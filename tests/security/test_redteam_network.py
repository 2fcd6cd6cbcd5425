"""
Red-team pass on sandbox networking (docs/network.md, docs/security.md): attacks that worked
against the first version, each kept as a test of the promise it broke. The "internet" is the
test's own network namespace (tests/integration/netlab.py); no packet goes toward any address
outside this machine.
"""
import json
import os
import random
import subprocess
import sys
import threading
import time

from sec import AttackCase, log, main

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "integration"))
from netlab import DNS_PROBE, LabCase  # noqa: E402

SMALL = {"cpu": "100m", "memory": "64Mi", "pids": "64"}
KEY = "redteam-net-key-%d" % random.randint(0, 1 << 30)


def q(s):
    return "'" + s.replace("'", "'\\''") + "'"


# Holds N TCP connections to the resolver and keeps each one alive with a byte every 3 s (a
# query's length header, then its body, one byte at a time: never a whole query).
HOLD_TCP = r"""
import socket, sys, time
gw, n, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
conns = []
for _ in range(n):
    try:
        s = socket.create_connection((gw, 53), timeout=3)
        s.sendall(b"\x10")
        conns.append(s)
    except OSError:
        break
print("held", len(conns), flush=True)
end = time.monotonic() + secs
while time.monotonic() < end:
    time.sleep(3)
    for s in conns:
        try:
            s.sendall(b"\x00")
        except OSError:
            pass
"""

# A UDP "conversation" from a fixed source port: send, print the reply or TIMEOUT.
UDP_TALK = r"""
import socket, sys
dst, port, sport, msg = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", sport))
s.settimeout(3)
for _ in range(3):
    s.sendto(msg.encode(), (dst, port))
    try:
        print(s.recvfrom(100)[0].decode())
        break
    except socket.timeout:
        pass
else:
    print("TIMEOUT")
"""

# The lab's UDP echo server: logs every payload it receives, one per line.
UDP_ECHO = r"""
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
print("ready", flush=True)
while True:
    data, peer = s.recvfrom(100)
    with open(sys.argv[3], "a") as f:
        f.write(data.decode("ascii", "replace") + "\n")
    s.sendto(b"echo " + data, peer)
"""

# A DNS server for the lab (the upstream of its own corrald): allowed.test as the lab has it,
# every name under many.test with PER addresses of 198.18.0.0/15 (learned, never contacted), and
# no answer at all for names under slow.test.
MANY_DNS = r"""
import socket, struct, sys
listen, allowed, per = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((listen, 53))
print("ready", flush=True)
while True:
    q, peer = s.recvfrom(4096)
    i, labels = 12, []
    while q[i]:
        labels.append(q[i + 1:i + 1 + q[i]].decode().lower())
        i += 1 + q[i]
    question = q[12:i + 5]
    name = ".".join(labels)
    if name.endswith(".slow.test"):
        continue  # a name server that never answers: each query waits for corrald's timeout
    if name == "allowed.test":
        addrs = [socket.inet_aton(allowed)]
    elif name.endswith(".many.test") and labels[0][1:].isdigit():
        k = int(labels[0][1:])
        addrs = [struct.pack(">I", (198 << 24 | 18 << 16) + (k * per + j) % 131072)
                 for j in range(per)]
    else:
        addrs = []
    hdr = struct.pack(">HHHHHH", struct.unpack(">H", q[:2])[0], 0x8180 if addrs else 0x8183,
                      1, len(addrs), 0, 0)
    rrs = b"".join(b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, 300, 4) + a for a in addrs)
    s.sendto(hdr + question + rrs, peer)
"""

# Asks for each name once over UDP and waits for any answer.
ASK_MANY = r"""
import socket, struct, sys
gw, first, last = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(3)
got = 0
for k in range(first, last):
    q = struct.pack(">HHHHHH", k, 0x0100, 1, 0, 0, 0)
    for l in ("m%d" % k, "many", "test"):
        q += bytes([len(l)]) + l.encode()
    q += b"\0" + struct.pack(">HH", 1, 1)
    s.sendto(q, (gw, 53))
    try:
        s.recvfrom(65535)
        got += 1
    except socket.timeout:
        pass
print(got)
"""


class NetLabCase(LabCase, AttackCase):
    mode = "dns+nft"

    @classmethod
    def extra_args(cls):
        return cls.lab.corrald_args(cls.mode)

    @classmethod
    def lab_corrald_kwargs(cls):
        return {"api_key": KEY, "extra_args": cls.extra_args()}

    def sandbox(self, policy):
        return self.create(resourceLimits=SMALL, resourceRequests={"cpu": "10m", "memory": "16Mi"},
                           networkPolicy=policy)["id"]

    def nameserver(self, sid):
        return self.sh(sid, "awk '/^nameserver/ {print $2; exit}' /etc/resolv.conf").strip()

    def udp_echo(self, port, sport):
        """A lab UDP echo server on port (its log's path) and the command that talks to it from
        a sandbox's UDP port sport (%s: the message)."""
        echo_log = os.path.join(self.lab.tmp, "echo-%d.log" % port)  # removed with the lab
        srv = subprocess.Popen(self.lab.nsexec("/usr/bin/python3", "-c", UDP_ECHO,
                                               self.lab.addr["literal"], str(port), echo_log),
                               stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, text=True, start_new_session=True)
        self.addCleanup(lambda: (srv.kill(), srv.wait()))
        self.assertEqual(srv.stdout.readline().strip(), "ready")
        return echo_log, "/usr/bin/python3 -c %s %s %d %d %%s" % (
            q(UDP_TALK), self.lab.addr["literal"], port, sport)

    def address(self, sid):
        return self.sh(sid, "ip -4 -o addr show dev eth0 | awk '{print $4}' | cut -d/ -f1").strip()

    def resolve(self, sid, name, tcp=False):
        out = self.sh(sid, "/usr/bin/python3 -c %s %s %s %s" % (
            q(DNS_PROBE), self.nameserver(sid), name, "tcp" if tcp else "udp")).split()
        return out[0] if len(out) == 1 and not out[0][0].isdigit() else out


class ResolverTcpAttacks(NetLabCase):
    def test_one_sandbox_cannot_hold_every_tcp_dns_connection(self):
        # attack: one sandbox opens 300 TCP connections to corral's resolver and keeps them alive
        # slowloris-style (a byte every 3 s, never a whole query), so that no other sandbox can
        # resolve over TCP (RESOLVER_TCP_CONNS_MAX is shared by every sandbox)
        attacker = self.sandbox({"defaultAction": "allow", "egress": []})
        victim = self.sandbox({"defaultAction": "deny",
                               "egress": [{"action": "allow", "target": "allowed.test"}]})
        gw = self.nameserver(attacker)
        self.sh(attacker, "ulimit -n 4096 2>/dev/null; nohup /usr/bin/python3 -c %s %s 300 60 "
                ">/tmp/hold.log 2>&1 &" % (q(HOLD_TCP), gw))
        self.wait_until(lambda: "held" in self.sh(attacker, "cat /tmp/hold.log"), timeout=30,
                        msg="the attacker's connections")
        log("attacker:", self.sh(attacker, "cat /tmp/hold.log").strip())
        time.sleep(4)  # past a keep-alive byte: the held connections are alive and idle-proof
        # the neighbour still resolves over TCP (and UDP), while the attacker holds its share
        self.assertEqual(self.resolve(victim, "allowed.test", tcp=True),
                         [self.lab.addr["allowed.test"]])
        self.assertEqual(self.resolve(victim, "denied.test", tcp=True), "NXDOMAIN")
        self.assertEqual(self.resolve(victim, "allowed.test"), [self.lab.addr["allowed.test"]])
        self.assert_platform_alive(attacker, victim)


class AddressReuseAttacks(NetLabCase):
    """A corrald of its own: the sandboxes here are the first of its subnet."""

    def test_new_sandbox_does_not_inherit_the_flows_of_its_address(self):
        # attack: a sandbox that is denied everything gets the address of a deleted sandbox that
        # was allowed everything, and talks from the same UDP port to the same lab server: the
        # deleted sandbox's conntrack entry (established) would let it through without its policy
        echo_log, talk = self.udp_echo(7777, 40123)
        a = self.sandbox({"defaultAction": "allow", "egress": []})
        a_ip = self.address(a)
        self.assertEqual(self.sh(a, talk % "from-a").strip(), "echo from-a")
        self.assertEqual(self.client.delete_sandbox(a).status, 204)
        # a corrald restart (an upgrade, a crash): its allocator starts again at the subnet's
        # first free address, the deleted sandbox's
        self.corrald.kill9()
        self.corrald.start()
        self.client.close()
        self.client = self.corrald.client()
        c = self.sandbox({"defaultAction": "deny", "egress": []})
        self.assertEqual(self.address(c), a_ip, "precondition: the address is reused")
        out = self.sh(c, talk % "from-c").strip()
        with open(echo_log) as f:
            got = f.read().split()
        log("C's UDP conversation:", out, "; the lab server received:", got)
        self.assertEqual(out, "TIMEOUT")
        self.assertNotIn("from-c", got, "a denied sandbox's packet reached the lab")
        # its policy still works otherwise, and the allowed path still does for a new sandbox
        d = self.sandbox({"defaultAction": "allow", "egress": []})
        self.assertEqual(self.sh(d, talk % "from-d").strip(), "echo from-d")
        self.assert_platform_alive(c, d)


class AddressReuseNoRestartAttacks(NetLabCase):
    """A corrald of its own on a /28 of the lab's subnet (13 sandbox addresses), so that its
    allocator comes back to a deleted sandbox's address without a restart."""

    @classmethod
    def extra_args(cls):
        return cls.lab.corrald_args(cls.mode) + [
            "--sandbox-subnet", cls.lab.sandbox_subnet.replace("/24", "/28"),
            "--egress-uplink", cls.lab.uplink]

    def test_reused_address_after_reap_does_not_inherit_flows(self):
        # attack: as above, but the address comes back around the allocator while corrald runs:
        # the deleted sandbox's flows must be gone before its address is handed out again
        echo_log, talk = self.udp_echo(7778, 40124)
        a = self.sandbox({"defaultAction": "allow", "egress": []})
        a_ip = self.address(a)
        self.assertEqual(self.sh(a, talk % "from-a").strip(), "echo from-a")
        self.assertEqual(self.client.delete_sandbox(a).status, 204)
        chain = "sb_" + a.replace("-", "_")
        self.wait_until(lambda: chain not in subprocess.run(
            ["nft", "list", "table", "inet", self.corrald.net_name], capture_output=True,
            text=True).stdout, 20, msg="the deleted sandbox's objects to be reaped")
        # the other twelve addresses, then the allocator wraps to the deleted sandbox's
        fillers = [self.sandbox({"defaultAction": "deny", "egress": []}) for _ in range(12)]
        self.assertNotIn(a_ip, [self.address(f) for f in fillers[-1:]])
        c = self.sandbox({"defaultAction": "deny", "egress": []})
        self.assertEqual(self.address(c), a_ip, "precondition: the address is reused")
        out = self.sh(c, talk % "from-c").strip()
        with open(echo_log) as f:
            got = f.read().split()
        log("C's UDP conversation:", out, "; the lab server received:", got)
        self.assertEqual(out, "TIMEOUT")
        self.assertNotIn("from-c", got, "a denied sandbox's packet reached the lab")
        self.assert_platform_alive(c, fillers[0])


class LearnedSetAttacks(NetLabCase):
    """A corrald of its own, whose upstream is a DNS server that answers names with many
    addresses (an allowed domain whose name server the attacker runs)."""
    PER = 100

    @classmethod
    def extra_args(cls):
        return ["--dns-upstream", "%s:53" % cls.lab.addr["literal"], "--egress-mode", cls.mode]

    @classmethod
    def started(cls):
        cls.dns = subprocess.Popen(
            cls.lab.nsexec("/usr/bin/python3", "-c", MANY_DNS, cls.lab.addr["literal"],
                           cls.lab.addr["allowed.test"], str(cls.PER)),
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            text=True, start_new_session=True)
        cls.lab.procs.append(cls.dns)  # killed with the lab
        ready = cls.dns.stdout.readline().strip()
        cls.dns.stdout.close()
        if ready != "ready":
            raise RuntimeError("the many-address DNS server did not start")

    def learned(self, sid):
        out = subprocess.run(["nft", "-j", "list", "set", "inet", self.corrald.net_name,
                              "l_" + sid.replace("-", "_")], check=True, text=True,
                             stdout=subprocess.PIPE).stdout
        for obj in json.loads(out)["nftables"]:
            if "set" in obj:
                return len(obj["set"].get("elem", []))
        raise AssertionError("no learned set for %s" % sid)

    def test_answers_cannot_grow_the_learned_set_without_bound(self):
        # attack: a sandbox allowed *.many.test asks for 100 names whose answers carry 100
        # addresses each, so that corrald puts 10000 elements (kernel memory no limit of the
        # sandbox counts, one nftables transaction each on corrald's loop) into its learned set
        attacker = self.sandbox({"defaultAction": "deny",
                                 "egress": [{"action": "allow", "target": "*.many.test"}]})
        neighbour = self.sandbox({"defaultAction": "deny",
                                  "egress": [{"action": "allow", "target": "allowed.test"}]})
        gw = self.nameserver(attacker)
        got = self.sh(attacker, "/usr/bin/python3 -c %s %s 0 100" % (q(ASK_MANY), gw),
                      read_timeout=300).strip()
        log("answers:", got, "learned:", self.learned(attacker))
        self.assertGreater(int(got), 50)
        self.assertLessEqual(self.learned(attacker), 4096,
                             "the learned set grew past its bound")
        # the neighbour's own admissions still work
        self.assertEqual(self.resolve(neighbour, "allowed.test"), [self.lab.addr["allowed.test"]])
        out = self.sh(neighbour, "curl -s -m 3 http://%s/; echo rc=$?" % self.lab.addr["allowed.test"])
        self.assertIn("hello", out)
        self.assert_platform_alive(attacker, neighbour)


# Keeps 64 queries for never-answered names in flight (the resolver's per-sandbox maximum), for
# secs seconds: 64 new names every 0.1 s, each waiting for the upstream's 2 s timeout.
SLOW_FLOOD = r"""
import socket, struct, sys, time
gw, secs = sys.argv[1], float(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setblocking(False)
end, k = time.monotonic() + secs, 0
while time.monotonic() < end:
    for _ in range(64):
        k += 1
        q = struct.pack(">HHHHHH", k & 0xffff, 0x0100, 1, 0, 0, 0)
        for l in ("s%d" % k, "slow", "test"):
            q += bytes([len(l)]) + l.encode()
        q += b"\0" + struct.pack(">HH", 1, 1)
        try:
            s.sendto(q, (gw, 53))
        except BlockingIOError:
            pass
    time.sleep(0.1)
"""


class ResolverFairShareAttacks(LearnedSetAttacks):
    """The resolver's queries waiting for upstream and its TCP connections are shared fairly
    (docs/network.md, the resolver): many sandboxes each holding their maximum used to take
    every slot of a global limit (1024 queries, 256 connections), and a neighbour resolved
    nothing. A corrald of its own with LearnedSetAttacks' DNS server (MANY_DNS: slow.test is
    never answered)."""
    ATTACKERS = 20
    # the learned-set attack runs once, in LearnedSetAttacks (not callable: not collected here)
    test_answers_cannot_grow_the_learned_set_without_bound = None

    def corrald_fds(self):
        return len(os.listdir("/proc/%d/fd" % self.corrald.proc.pid))

    def resolver_conns(self):
        out = subprocess.run(["ss", "-Htn", "state", "established", "( sport = :53 )"],
                             check=True, text=True, stdout=subprocess.PIPE).stdout
        return len(out.splitlines())

    def try_resolve(self, sid, name, tcp=False):
        """The neighbour's lookup, one try as a stub resolver makes it: its addresses, or what
        went wrong (a connection closed before any answer is "CLOSED")."""
        res = self.client.run(sid, "/usr/bin/python3 -c %s %s %s %s" % (
            q(DNS_PROBE), self.nameserver(sid), name, "tcp" if tcp else "udp"))
        if res.exit_code != 0:
            return "CLOSED"
        out = res.stdout.split()
        return out if out and out[0][0].isdigit() else " ".join(out)

    def test_sandboxes_whose_name_server_never_answers_cannot_starve_a_neighbour(self):
        # attack: 20 sandboxes allowed *.slow.test keep 64 queries each in flight for names their
        # name server never answers (1280 > the 1024 of the shared pool); a neighbour then asks
        # for allowed.test, over UDP and TCP
        pol = {"defaultAction": "deny", "egress": [{"action": "allow", "target": "*.slow.test"}]}
        attackers = [self.sandbox(pol) for _ in range(self.ATTACKERS)]
        victim = self.sandbox({"defaultAction": "deny",
                               "egress": [{"action": "allow", "target": "allowed.test"}]})
        gw = self.nameserver(victim)
        base = self.corrald_fds()
        for a in attackers:
            self.sh(a, "nohup /usr/bin/python3 -c %s %s 60 >/dev/null 2>&1 &" % (q(SLOW_FLOOD), gw))
        time.sleep(3)  # every flood running, the first timeouts past: the slots stay held
        # precondition: the floods hold (nearly) all the shared pool (a socket per query waiting)
        held = self.wait_until(lambda: (lambda n: n if n >= 900 else 0)(self.corrald_fds() - base),
                               timeout=20, msg="the floods' queries in flight")
        answers = [self.try_resolve(victim, "allowed.test") for _ in range(5)]
        answers += [self.try_resolve(victim, "allowed.test", tcp=True) for _ in range(2)]
        log("corrald's sockets for queries in flight:", held, "; the neighbour's answers:", answers)
        self.assertEqual(answers, [[self.lab.addr["allowed.test"]]] * 7,
                         "the neighbour could not resolve while 20 sandboxes held the resolver")
        self.assert_platform_alive(victim, attackers[0])

    def test_sandboxes_holding_their_tcp_connections_cannot_starve_a_neighbour(self):
        # attack: 20 sandboxes each open 16 TCP connections to corral's resolver (their maximum,
        # 320 > the 256 of the shared pool) and keep them alive slowloris-style, so that a
        # neighbour's TCP connection is closed at once; it asks for allowed.test over TCP and UDP
        pol = {"defaultAction": "deny", "egress": [{"action": "allow", "target": "allowed.test"}]}
        attackers = [self.sandbox(pol) for _ in range(self.ATTACKERS)]
        victim = self.sandbox(pol)
        gw = self.nameserver(victim)
        for a in attackers:
            self.sh(a, "nohup /usr/bin/python3 -c %s %s 16 60 >/tmp/hold.log 2>&1 &"
                    % (q(HOLD_TCP), gw))
        for a in attackers:
            self.wait_until(lambda: "held" in self.sh(a, "cat /tmp/hold.log"), timeout=30,
                            msg="an attacker's connections")
        time.sleep(4)  # past a keep-alive byte: the held connections are alive and idle-proof
        # precondition: the attackers hold the shared pool
        held = self.wait_until(lambda: (lambda n: n if n >= 256 else 0)(self.resolver_conns()),
                               timeout=20, msg="the attackers' connections")
        answers = [self.try_resolve(victim, "allowed.test", tcp=True) for _ in range(3)]
        answers.append(self.try_resolve(victim, "allowed.test"))
        log("connections to the resolver:", held, "; the neighbour's answers:", answers)
        self.assertEqual(answers, [[self.lab.addr["allowed.test"]]] * 4,
                         "the neighbour could not resolve while 20 sandboxes held the resolver")
        self.assert_platform_alive(victim, attackers[0])


class PolicyRestartAttacks(NetLabCase):
    def test_kill9_mid_policy_change_leaves_the_kernel_as_the_record(self):
        # attack: PUT /policy back and forth between "allow the lab server" and "deny all" and
        # kill -9 corrald in the middle, again and again: after each restart the policy corrald
        # shows (its record) must be the one the kernel enforces
        lit = self.lab.addr["literal"]
        allow = {"defaultAction": "deny", "egress": [{"action": "allow", "target": lit}]}
        deny = {"defaultAction": "deny", "egress": []}
        sid = self.sandbox(deny)
        path = "/sandboxes/%s/proxy/18080/policy" % sid
        mismatches = []
        for round_ in range(8):
            hdrs = self.client.get("/v1/sandboxes/%s/endpoints/18080" % sid).json()["headers"]
            stop = threading.Event()

            def flip():
                c = self.corrald.client(timeout=5)
                i = 0
                while not stop.is_set():
                    try:
                        c.request("PUT", path, body=allow if i % 2 else deny, headers=hdrs)
                    except Exception:
                        return
                    i += 1

            t = threading.Thread(target=flip)
            t.start()
            time.sleep(0.2 + random.random() * 0.3)
            self.corrald.kill9()
            stop.set()
            t.join()
            self.corrald.start()
            self.client.close()
            self.client = self.corrald.client()
            hdrs = self.client.get("/v1/sandboxes/%s/endpoints/18080" % sid).json()["headers"]
            r = self.client.request("GET", path, headers=hdrs)
            self.assertEqual(r.status, 200, r)
            recorded = r.json()["policy"]
            out = self.sh(sid, "curl -s -m 2 http://%s/; echo rc=$?" % lit)
            reached = "hello" in out
            log("round %d: record %s, reached %s" % (round_, recorded["egress"], reached))
            if reached != (recorded == allow):
                mismatches.append((round_, recorded, reached))
                log(self.corrald.log_tail(25))
        self.assertEqual(mismatches, [], "the kernel enforced another policy than the record")
        self.assert_platform_alive(sid)


# A DNS query from the lab with a sandbox's address as its source (the address put on the lab's
# own loopback, so no raw socket is needed), sent to corral's resolver through the uplink.
SPOOF_FROM_LAB = r"""
import socket, struct, sys
src, gw = sys.argv[1], sys.argv[2]
q = struct.pack(">HHHHHH", 4242, 0x0100, 1, 0, 0, 0) + b"\x07allowed\x04test\0\0\1\0\1"
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((src, 0))
for _ in range(20):
    s.sendto(q, (gw, 53))
print("sent")
"""


class OutsideAttacks(NetLabCase):
    def test_uplink_cannot_query_the_resolver_as_a_sandbox(self):
        # attack: a machine on the uplink's network sends DNS queries to corral's resolver on the
        # gateway address with a sandbox's address as source: the resolver would take them for
        # that sandbox's (its policy, its counters, its learned set, its in-flight quota)
        sid = self.sandbox({"defaultAction": "deny",
                            "egress": [{"action": "allow", "target": "allowed.test"}]})
        ip, gw = self.address(sid), self.nameserver(sid)
        ns = self.lab.nsexec
        subprocess.run(ns("ip", "addr", "add", ip + "/32", "dev", "lo"), check=True)
        subprocess.run(ns("ip", "route", "add", gw + "/32", "via", self.lab.host_ip), check=True)
        self.addCleanup(subprocess.run, ns("ip", "route", "del", gw + "/32"))
        self.addCleanup(subprocess.run, ns("ip", "addr", "del", ip + "/32", "dev", "lo"))
        before = len(self.lab.dns_queries())
        out = subprocess.run(ns("/usr/bin/python3", "-c", SPOOF_FROM_LAB, ip, gw), check=True,
                             stdout=subprocess.PIPE, text=True).stdout
        self.assertEqual(out.strip(), "sent")
        time.sleep(1)
        st = self.client.get("/v1/sandboxes/%s/stats" % sid).json()["network"]
        log("the sandbox's DNS counters after the lab's queries:", st)
        self.assertEqual(st["dnsAllowed"], 0, "a query from the uplink was taken for the sandbox's")
        self.assertEqual(len(self.lab.dns_queries()), before,
                         "a query from the uplink was forwarded upstream")
        # the sandbox itself still resolves
        self.assertEqual(self.resolve(sid, "allowed.test"), [self.lab.addr["allowed.test"]])
        self.assert_platform_alive(sid)


if __name__ == "__main__":
    main()
