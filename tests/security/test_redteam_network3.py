"""
Red-team pass 3 on sandbox networking (docs/network.md, docs/security.md), after the libnftnl
batch and the conntrack flush at reap: DNS answers that arrive after their rule went, answers
naming always-blocked addresses, another sandbox's learned addresses, fragments and ICMP, the
policy API's DELETE as a stall, a kill -9 in the middle of a policy change, and the moments
while corrald is down. The "internet" is the test's own network namespace
(tests/integration/netlab.py); no packet goes toward any address outside this machine.
"""
import json
import os
import socket
import subprocess
import sys
import threading
import time

from sec import log, main

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_redteam_network import NetLabCase, q  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "integration"))
from netlab import DNS_PROBE, LAB_HTTP_PORT  # noqa: E402

# A name server for the lab (the upstream of its class's corrald), logging every name it is
# asked for: <a>-<b>-<c>-<d>.ip.test is a.b.c.d (an allowed domain whose name server the attacker
# runs, answering whatever address it likes); names under delay.test are answered with the lab's
# "literal" server once the test creates LOGPATH.go.NAME, or after DELAY seconds at the latest
# (an answer still in flight when the policy changes; LOGPATH.late lists those sent at DELAY);
# ttlmax.test has the largest TTL there is, ttl0.test none; anything else is NXDOMAIN.
LAB_DNS = r"""
import os, socket, struct, sys, threading, time
listen, literal, delay, logpath = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((listen, 53))
lock = threading.Lock()
def reply(q, peer, question, addrs, ttl, rcode):
    hdr = struct.pack(">HHHHHH", struct.unpack(">H", q[:2])[0], 0x8180 | rcode, 1, len(addrs), 0, 0)
    rrs = b"".join(b"\xc0\x0c" + struct.pack(">HHIH", 1, 1, ttl, 4) + socket.inet_aton(a)
                   for a in addrs)
    with lock:
        s.sendto(hdr + question + rrs, peer)
def late(name, q, peer, question):
    end = time.monotonic() + delay
    while not os.path.exists("%s.go.%s" % (logpath, name)):
        if time.monotonic() > end:
            with open(logpath + ".late", "a") as f:
                f.write(name + "\n")
            break
        time.sleep(0.01)
    reply(q, peer, question, [literal], 300, 0)
print("ready", flush=True)
while True:
    q, peer = s.recvfrom(4096)
    try:
        i, labels = 12, []
        while q[i]:
            labels.append(q[i + 1:i + 1 + q[i]].decode("ascii", "replace").lower())
            i += 1 + q[i]
        question = q[12:i + 5]
        qtype = struct.unpack(">H", q[i + 1:i + 3])[0]
    except (IndexError, struct.error):
        continue
    name = ".".join(labels)
    with open(logpath, "a") as f:
        f.write(name + "\n")
    if qtype != 1:
        reply(q, peer, question, [], 300, 0)
    elif name.endswith(".delay.test"):
        threading.Thread(target=late, args=(name, q, peer, question)).start()
    elif name == "ttlmax.test":
        reply(q, peer, question, [literal], 0xffffffff, 0)
    elif name == "ttl0.test":
        reply(q, peer, question, [literal], 0, 0)
    elif name.endswith(".ip.test"):
        reply(q, peer, question, [labels[0].replace("-", ".")], 300, 0)
    else:
        reply(q, peer, question, [], 300, 3)
"""

# From a sandbox: DNS_PROBE in the background, its answer into a file when it comes.
BG_PROBE = "nohup /usr/bin/python3 -c %s %s %s >%s 2>&1 &"


# Asks corral's resolver from N source ports starting at FIRST, each from its own socket, twice,
# 2.5 s apart (the same conversations again); prints the answers of each pass.
UDP_PORTS = r"""
import socket, struct, sys, time
gw, first, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
q = struct.pack(">HHHHHH", 7, 0x0100, 1, 0, 0, 0) + b"\x01x\x04test\x00\x00\x01\x00\x01"
for rnd in range(2):
    got, socks = 0, []
    for p in range(first, first + n):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", p))
            s.sendto(q, (gw, 53))
        except OSError:
            s.close()
            continue
        socks.append(s)
        if len(socks) >= 200:
            for t in socks:
                t.settimeout(2)
                try:
                    t.recv(512)
                    got += 1
                except OSError:
                    pass
                t.close()
            socks = []
    for t in socks:
        t.settimeout(2)
        try:
            t.recv(512)
            got += 1
        except OSError:
            pass
        t.close()
    print(got, flush=True)
    if rnd == 0:
        time.sleep(2.5)
"""


def conntrack_of(addr):
    """The host's conntrack entries with addr as original source: {(proto, assured): count}."""
    got = {}
    with open("/proc/net/nf_conntrack") as f:
        for ln in f:
            if " src=%s " % addr in ln:
                k = (ln.split()[2], "[ASSURED]" in ln)
                got[k] = got.get(k, 0) + 1
    return got


def kernel_chain(net_name, sid):
    """A sandbox's chain as the kernel has it: [(allow|deny, target or None)], in order."""
    out = subprocess.run(["nft", "-j", "list", "chain", "inet", net_name,
                          "sb_" + sid.replace("-", "_")], check=True, text=True,
                         stdout=subprocess.PIPE).stdout
    kernel = []
    for obj in json.loads(out)["nftables"]:
        expr = obj.get("rule", {}).get("expr")
        if not expr:
            continue
        verdict = "allow" if any("accept" in e for e in expr) else "deny"
        right = [e["match"]["right"] for e in expr if "match" in e]
        if right and isinstance(right[0], dict) and "prefix" in right[0]:
            kernel.append((verdict, "%s/%d" % (right[0]["prefix"]["addr"],
                                               right[0]["prefix"]["len"])))
        elif right and isinstance(right[0], str) and not right[0].startswith("@"):
            kernel.append((verdict, right[0]))
        else:
            kernel.append((verdict, None))
    return kernel


def largest_policy(last):
    """1024 address rules, allow and deny in turn, the last one allowing last."""
    return [{"action": "deny" if i % 2 else "allow",
             "target": "10.%d.%d.0/24" % (i // 256, i % 256)} for i in range(1023)] + \
        [{"action": "allow", "target": last}]


def learned(net_name, sid):
    """The addresses in a sandbox's learned set, with their timeouts (s)."""
    out = subprocess.run(["nft", "-j", "list", "set", "inet", net_name,
                          "l_" + sid.replace("-", "_")], check=True, text=True,
                         stdout=subprocess.PIPE).stdout
    got = {}
    for obj in json.loads(out)["nftables"]:
        for e in obj.get("set", {}).get("elem", []) or []:
            if isinstance(e, dict) and "elem" in e:
                got[e["elem"]["val"]] = e["elem"].get("timeout")
            else:
                got[e] = None
    return got


class LabDnsCase(NetLabCase):
    """A corrald whose upstream is LAB_DNS in the lab."""
    DELAY = 1.5

    @classmethod
    def extra_args(cls):
        return ["--dns-upstream", "%s:53" % cls.lab.addr["literal"], "--egress-mode", cls.mode]

    @classmethod
    def started(cls):
        cls.dns_log = os.path.join(cls.lab.tmp, "redteam3-dns.log")  # removed with the lab
        open(cls.dns_log, "w").close()
        cls.dns = subprocess.Popen(
            cls.lab.nsexec("/usr/bin/python3", "-c", LAB_DNS, cls.lab.addr["literal"],
                           cls.lab.addr["literal"], str(cls.DELAY), cls.dns_log),
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            text=True, start_new_session=True)
        cls.lab.procs.append(cls.dns)  # killed with the lab
        ready = cls.dns.stdout.readline().strip()
        cls.dns.stdout.close()
        if ready != "ready":
            raise RuntimeError("the lab's name server did not start")

    def asked(self):
        with open(self.dns_log) as f:
            return f.read().split()

    def sent_late(self):
        try:
            with open(self.dns_log + ".late") as f:
                return f.read().split()
        except FileNotFoundError:
            return []

    def policy_call(self, sid, method, body):
        hdrs = self.client.get("/v1/sandboxes/%s/endpoints/18080" % sid).json()["headers"]
        raw = body if isinstance(body, (bytes, str)) else json.dumps(body)
        return self.client.request(method, "/sandboxes/%s/proxy/18080/policy" % sid,
                                   raw=raw.encode() if isinstance(raw, str) else raw,
                                   headers=hdrs)

    def reach(self, sid, addr, port=80):
        out = self.sh(sid, "curl -s --connect-timeout 1 -m 2 http://%s:%d/ 2>&1; echo rc=$?"
                      % (addr, port))
        return "hello" in out or "whoami" in out or out.startswith(addr)


class InFlightAnswerAttacks(LabDnsCase):
    def race(self, change):
        lit = self.lab.addr["literal"]
        for attempt in range(3):
            sid = self.sandbox({"defaultAction": "deny",
                                "egress": [{"action": "allow", "target": "*.delay.test"},
                                           {"action": "allow", "target": "*.ip.test"}]})
            gw = self.nameserver(sid)
            name = "r%d.delay.test" % int(time.monotonic() * 1000)
            self.sh(sid, BG_PROBE % (q(DNS_PROBE), gw, name, "/tmp/answer"))
            self.wait_until(lambda: name in self.asked(), 5, msg="the query to reach the upstream")
            # the answer is on its way, held by the name server: the rule that allowed it goes
            # now, and the answer follows the change (not a fixed delay a slow change may outlast)
            r = change(sid)
            self.assertEqual(r.status, 200, r)
            open("%s.go.%s" % (self.dns_log, name), "w").close()
            self.wait_until(lambda: self.sh(sid, "cat /tmp/answer").strip(), 10,
                            msg="the sandbox's query to be answered")
            if name not in self.sent_late():
                break
            log("the change took longer than the name server holds an answer (%.1f s): again"
                % self.DELAY)
        else:
            self.fail("the policy change never came before the held answer in 3 tries")
        answer = self.sh(sid, "cat /tmp/answer").strip()
        log("answer after the change:", answer, "learned:", learned(self.corrald.net_name, sid))
        self.assertEqual(answer, "NXDOMAIN", "a name of a rule removed meanwhile was answered")
        self.assertNotIn(lit, learned(self.corrald.net_name, sid))
        self.assertFalse(self.reach(sid, lit), "an address of a removed rule was reachable")
        # the server is there: a name still allowed that names it admits it
        self.assertEqual(self.resolve(sid, "%s.ip.test" % lit.replace(".", "-")), [lit])
        self.assertTrue(self.reach(sid, lit))
        self.assert_platform_alive(sid)

    def test_answer_after_delete_is_not_admitted(self):
        # attack: ask for a name of an allowed wildcard whose name server answers late, and race
        # DELETE /policy of that rule: the late answer would admit its address past the new policy
        self.race(lambda sid: self.policy_call(sid, "DELETE", ["*.delay.test"]))

    def test_answer_after_patch_deny_is_not_admitted(self):
        # attack: the same race against PATCH /policy putting a deny rule for the name first
        self.race(lambda sid: self.policy_call(
            sid, "PATCH", [{"action": "deny", "target": "*.delay.test"}]))


class AnswerAttacks(LabDnsCase):
    def test_answers_cannot_admit_always_blocked_addresses(self):
        # attack: an allowed domain whose name server the attacker runs answers with the metadata
        # address, the gateway, the host's uplink address and a neighbour sandbox's address, so
        # that the learned set admits what no policy may open
        attacker = self.sandbox({"defaultAction": "deny",
                                 "egress": [{"action": "allow", "target": "*.ip.test"}]})
        neighbour = self.sandbox({"defaultAction": "deny", "egress": []})
        gw = self.nameserver(attacker)
        n_ip = self.address(neighbour)
        self.sh(neighbour, "nohup /usr/bin/python3 -m http.server 8081 --bind 0.0.0.0 "
                ">/dev/null 2>&1 &")
        self.wait_until(lambda: "Directory" in self.sh(
            neighbour, "curl -s -m 2 http://%s:8081/ || true" % n_ip), 10,
            msg="the neighbour's server")
        # a host service on every host address
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("0.0.0.0", 0))
        srv.listen(16)
        self.addCleanup(srv.close)
        hport = srv.getsockname()[1]
        self.assertTrue(self.lab.host_can_reach(self.lab.host_ip, hport))
        self.assertTrue(self.lab.host_can_reach(gw, hport))
        self.assertEqual(self.lab.run_in("curl", "-s", "-m", "3", "http://%s/whoami"
                                         % self.lab.metadata, capture_output=True,
                                         text=True).stdout.strip(), self.lab.metadata)
        targets = [(self.lab.metadata, 80), (gw, hport), (self.lab.host_ip, hport),
                   (n_ip, 8081)]
        for addr, port in targets:
            name = "%s.ip.test" % addr.replace(".", "-")
            self.assertEqual(self.resolve(attacker, name), [addr])
            out = self.sh(attacker, "curl -s --connect-timeout 1 -m 2 http://%s:%d/ 2>&1; "
                          "echo rc=$?" % (addr, port))
            log("attacker -> %s:%d after its name resolved: %s" % (addr, port, out.strip()))
            self.assertIn("rc=28", out, "%s:%d was reached through a learned address"
                          % (addr, port))
        self.assert_platform_alive(attacker, neighbour)

    def test_learned_addresses_are_not_shared_between_sandboxes(self):
        # attack: a sandbox denied everything connects to the IP literal of an address its
        # neighbour just had admitted (the neighbour's policy allows its name)
        lit = self.lab.addr["literal"]
        attacker = self.sandbox({"defaultAction": "deny", "egress": []})
        neighbour = self.sandbox({"defaultAction": "deny",
                                  "egress": [{"action": "allow", "target": "*.ip.test"}]})
        name = "%s.ip.test" % lit.replace(".", "-")
        self.assertEqual(self.resolve(neighbour, name), [lit])
        self.assertTrue(self.reach(neighbour, lit))
        self.assertEqual(self.resolve(attacker, name), "NXDOMAIN")
        self.assertFalse(self.reach(attacker, lit), "the neighbour's learned address let it in")
        self.assert_platform_alive(attacker, neighbour)

    def test_ttl_extremes_are_bounded(self):
        # attack: answers with TTL 2^32-1 (136 years: its address admitted long after the name
        # server moved it, and any timeout arithmetic overflows) and with TTL 0
        lit = self.lab.addr["literal"]
        sid = self.sandbox({"defaultAction": "deny",
                            "egress": [{"action": "allow", "target": "ttlmax.test"},
                                       {"action": "allow", "target": "ttl0.test"}]})
        self.assertEqual(self.resolve(sid, "ttlmax.test"), [lit])
        got = learned(self.corrald.net_name, sid)
        log("learned after TTL 2^32-1:", got)
        self.assertIsNotNone(got.get(lit), "the answer's address was not admitted")
        self.assertGreater(got[lit], 3600)
        self.assertLessEqual(got[lit], 86400, "an address was admitted for longer than a day")
        # a policy change forgets it at once, however long its TTL
        r = self.policy_call(sid, "PATCH", [{"action": "deny", "target": "ttlmax.test"}])
        self.assertEqual(r.status, 200, r)
        self.assertEqual(learned(self.corrald.net_name, sid), {})
        self.assertFalse(self.reach(sid, lit))
        self.assertEqual(self.resolve(sid, "ttl0.test"), [lit])
        got = learned(self.corrald.net_name, sid)
        log("learned after TTL 0:", got)
        self.assertIsNotNone(got.get(lit))
        self.assertGreaterEqual(got[lit], 5, "TTL 0 admitted for less than the floor")
        self.assertLessEqual(got[lit], 10)
        self.assertTrue(self.reach(sid, lit))
        self.assert_platform_alive(sid)


class OperatorNetworkAttacks(LabDnsCase):
    """--egress-block: the operator's own networks (here the uplink's link, where the lab's web1
    and web2 stand for a LAN; and "private") are out of reach whatever a policy or an answer says."""

    @classmethod
    def extra_args(cls):
        return super().extra_args() + ["--egress-block", cls.lab.link + ".0/29",
                                       "--egress-block", "private"]

    def lan_reached(self, sid, addr):
        out = self.sh(sid, "curl -s --connect-timeout 1 -m 2 http://%s:%d/whoami 2>&1; echo rc=$?"
                      % (addr, LAB_HTTP_PORT))
        log("%s -> %s:%d: %s" % (sid[:8], addr, LAB_HTTP_PORT, out.strip()))
        return addr in out.split("rc=")[0]

    def test_an_allowed_name_cannot_open_the_operators_network(self):
        # attack: an allowed domain whose name server the attacker runs answers with addresses
        # of the operator's LAN, so that the learned set admits them (the documented semantics
        # without --egress-block); also an IP rule for them, and a sandbox allowed everything
        web1, web2, lit = self.lab.web1, self.lab.web2, self.lab.addr["literal"]
        self.assertEqual(self.lab.run_in("curl", "-s", "-m", "3", "http://%s:%d/whoami"
                                         % (web1, LAB_HTTP_PORT), capture_output=True,
                                         text=True).stdout.strip(), web1)
        attacker = self.sandbox({"defaultAction": "deny",
                                 "egress": [{"action": "allow", "target": "*.ip.test"}]})
        for addr in (web1, web2):
            self.assertEqual(self.resolve(attacker, "%s.ip.test" % addr.replace(".", "-")),
                             [addr])
            self.assertFalse(self.lan_reached(attacker, addr),
                             "%s was reached through a learned address" % addr)
        # the same name server's answer for an address outside the blocked networks still works
        self.assertEqual(self.resolve(attacker, "%s.ip.test" % lit.replace(".", "-")), [lit])
        self.assertTrue(self.reach(attacker, lit))
        ruled = self.sandbox({"defaultAction": "deny",
                              "egress": [{"action": "allow", "target": web1 + "/32"}]})
        self.assertFalse(self.lan_reached(ruled, web1), "an IP rule opened a blocked network")
        anything = self.sandbox({"defaultAction": "allow", "egress": []})
        self.assertFalse(self.lan_reached(anything, web2), "default allow reached a blocked network")
        self.assertTrue(self.reach(anything, lit))
        blocked = subprocess.run(["nft", "list", "set", "inet", self.corrald.net_name, "blocked4"],
                                 capture_output=True, text=True).stdout
        for net in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10",
                    self.lab.link + ".0/29"):
            self.assertIn(net, blocked)
        self.assert_platform_alive(attacker, ruled, anything)


# A lab host's TCP and UDP echo on one port, logging every line it gets.
LAB_ECHO = r"""
import socket, sys, threading
addr, port, logpath = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def note(line):
    with open(logpath, "a") as f:
        f.write(line + "\n")
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind((addr, port))
t = socket.socket()
t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind((addr, port))
t.listen(8)
def udp():
    while True:
        d, peer = u.recvfrom(100)
        note(d.decode("ascii", "replace"))
        u.sendto(b"echo " + d, peer)
def conn(c):
    for line in c.makefile("rb"):
        note(line.decode("ascii", "replace").strip())
        c.sendall(b"echo " + line)
threading.Thread(target=udp, daemon=True).start()
print("ready", flush=True)
while True:
    threading.Thread(target=conn, args=(t.accept()[0],), daemon=True).start()
"""

# In a sandbox: one TCP connection and one UDP socket to DST:PORT, kept; round N (when /tmp/go-N
# appears) sends "tcp N" and "udp N" on them and writes what came back into /tmp/flows-N.
HELD_FLOWS = r"""
import os, socket, sys, time
dst, port = sys.argv[1], int(sys.argv[2])
t = socket.create_connection((dst, port), timeout=3)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind(("0.0.0.0", 40100))
u.settimeout(2)
t.settimeout(2)
for n in range(1, 4):
    while not os.path.exists("/tmp/go-%d" % n):
        time.sleep(0.05)
    got = []
    for _ in range(3):
        u.sendto(b"udp %d" % n, (dst, port))
        try:
            got.append(u.recv(100).decode())
            break
        except OSError:
            pass
    try:
        t.sendall(b"tcp %d\n" % n)
        got.append(t.recv(100).decode().strip())
    except OSError as e:
        got.append("tcp error %s" % e)
    with open("/tmp/flows-%d.tmp" % n, "w") as f:
        f.write("\n".join(got) + "\n")
    os.rename("/tmp/flows-%d.tmp" % n, "/tmp/flows-%d" % n)
"""


class RestartBlockAttacks(NetLabCase):
    """A corrald of its own, started again with --egress-block added."""

    def test_flows_held_across_a_restart_that_blocks_their_network_are_cut(self):
        # attack: a sandbox allowed everything opens a TCP connection and a UDP flow to a host of the operator's LAN, then keeps using them after the operator restarts corrald with --egress-block for that LAN: established flows (conntrack entries made before the block) must not carry on
        web1, port = self.lab.web1, 9100
        echo_log = os.path.join(self.lab.tmp, "held-echo.log")  # removed with the lab
        srv = subprocess.Popen(self.lab.nsexec("/usr/bin/python3", "-c", LAB_ECHO, web1,
                                               str(port), echo_log),
                               stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, text=True, start_new_session=True)
        self.addCleanup(lambda: (srv.kill(), srv.wait()))
        self.assertEqual(srv.stdout.readline().strip(), "ready")
        sid = self.sandbox({"defaultAction": "allow", "egress": []})
        self.sh(sid, "nohup /usr/bin/python3 -c %s %s %d >/tmp/held.log 2>&1 &"
                % (q(HELD_FLOWS), web1, port))

        def round_(n):
            self.sh(sid, "touch /tmp/go-%d" % n)
            self.wait_until(lambda: self.sh(sid, "cat /tmp/flows-%d 2>/dev/null; true" % n), 20,
                            msg="round %d in the sandbox" % n)
            got = self.sh(sid, "cat /tmp/flows-%d" % n).split("\n")
            with open(echo_log) as f:
                seen = f.read().split("\n")
            log("round %d: the sandbox got %s; %s got %s" % (n, got, web1, seen))
            return got, seen

        got, seen = round_(1)
        self.assertIn("echo udp 1", got, self.sh(sid, "cat /tmp/held.log"))
        self.assertIn("echo tcp 1", got)
        self.corrald.stop()
        self.corrald.extra_args = self.corrald.extra_args + ["--egress-block", web1 + "/32"]
        self.corrald.start()
        self.client.close()
        self.client = self.corrald.client()
        got, seen = round_(2)
        self.assertNotIn("udp 2", seen, "the UDP flow reached the newly blocked host")
        self.assertNotIn("tcp 2", seen, "the TCP connection reached the newly blocked host")
        self.assertFalse([g for g in got if g.startswith("echo")], got)
        # and a new flow neither
        out = self.sh(sid, "curl -s --connect-timeout 1 -m 2 http://%s:%d/whoami; echo rc=$?"
                      % (web1, LAB_HTTP_PORT))
        self.assertNotIn(web1, out.split("rc=")[0])
        self.assert_platform_alive(sid)


class PacketAttacks(LabDnsCase):
    def test_fragmented_dns_to_a_foreign_resolver_is_dropped(self):
        # attack: a sandbox allowed everything sends DNS to a foreign resolver in datagrams too
        # large for one packet (IP fragments: only the first carries the port), and pings
        dot = self.lab.addr["dot"]
        self.lab.listen_udp(dot, 53)
        self.assertTrue(self.lab.host_udp_echo(dot, 53), "the lab's UDP service does not answer")
        sid = self.sandbox({"defaultAction": "allow", "egress": []})
        code = ("import socket\n"
                "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                "s.settimeout(2)\n"
                "for size in (1400, 1800, 4000):\n"
                "    s.sendto(b'x' * size, ('%s', 53))\n"
                "    try:\n"
                "        print('echo', len(s.recv(8192)))\n"
                "    except socket.timeout:\n"
                "        print('timeout')\n" % dot)
        out = self.sh(sid, "/usr/bin/python3 -c %s" % q(code))
        log("fragmented DNS to a foreign resolver:", out.split())
        self.assertNotIn("echo", out)
        # ICMP: echo to the gateway and to the lab, if the sandbox can send it at all
        code = ("import socket\n"
                "try:\n"
                "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)\n"
                "except OSError as e:\n"
                "    print('noicmp', e.errno); raise SystemExit\n"
                "s.settimeout(2)\n"
                "for dst in %r:\n"
                "    s.sendto(b'\\x08\\x00\\x00\\x00\\x00\\x01\\x00\\x01' + b'x' * 32, (dst, 0))\n"
                "    try:\n"
                "        print('reply', dst, len(s.recv(100)))\n"
                "    except socket.timeout:\n"
                "        print('timeout', dst)\n"
                % ([self.nameserver(sid)],))
        out = self.sh(sid, "/usr/bin/python3 -c %s" % q(code))
        log("ICMP echo to the gateway:", out.strip())
        self.assertNotIn("reply", out)
        self.assert_platform_alive(sid)


    def test_other_clouds_metadata_addresses_are_blocked(self):
        # attack: a sandbox allowed everything fetches the instance metadata of the clouds whose
        # service is not on 169.254.169.254: Alibaba Cloud's 100.100.100.200 (its RAM role's
        # credentials) and Azure's WireServer 168.63.129.16 (served in the lab here)
        sid = self.sandbox({"defaultAction": "allow", "egress": []})
        for addr in ("100.100.100.200", "168.63.129.16"):
            self.lab.run_in("ip", "addr", "add", addr + "/32", "dev", "lo", check=True)
            self.lab.serve_http(addr, 80)
            got = self.lab.run_in("curl", "-s", "-m", "3", "http://%s/whoami" % addr,
                                  capture_output=True, text=True).stdout.strip()
            self.assertEqual(got, addr, "the lab does not serve %s" % addr)
            out = self.sh(sid, "curl -s --connect-timeout 1 -m 2 http://%s/whoami 2>&1; "
                          "echo rc=$?" % addr)
            log("sandbox -> %s: %s" % (addr, out.strip()))
            self.assertNotIn(addr + "\n", out, "the sandbox read %s's metadata" % addr)
            self.assertIn("rc=28", out)
        # the lab's own servers are still reachable: the block is the address's
        self.assertTrue(self.reach(sid, self.lab.addr["literal"]))
        self.assert_platform_alive(sid)


    def test_sandbox_cannot_turn_ipv6_on(self):
        # attack: root in the sandbox gives eth0 an IPv6 address back (addr_gen_mode, an address
        # of its own) and sends to the link's all-nodes group and the gateway's link-local
        # address, around the IPv4-only policy
        sid = self.sandbox({"defaultAction": "deny", "egress": []})
        out = self.sh(sid, "for f in addr_gen_mode disable_ipv6; do "
                      "echo 0 > /proc/sys/net/ipv6/conf/eth0/$f 2>/dev/null && echo wrote-$f; "
                      "done; ip -6 addr add fd00::5/64 dev eth0 2>/dev/null && echo added; "
                      "ip -6 -o addr show dev eth0; echo end")
        log("IPv6 on eth0 after the attempts:", out.strip())
        self.assertNotIn("wrote-", out)
        self.assertNotIn("added", out)
        self.assertNotIn("inet6", out)
        code = ("import socket\n"
                "s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)\n"
                "for dst in ('ff02::1%eth0', 'fe80::1%eth0', 'fd00::1'):\n"
                "    try:\n"
                "        s.sendto(b'x', (dst, 53)); print('sent', dst)\n"
                "    except OSError as e:\n"
                "        print('refused', dst, e.errno)\n")
        out = self.sh(sid, "/usr/bin/python3 -c %s" % q(code))
        log("IPv6 datagrams:", out.strip())
        self.assertNotIn("sent", out)
        self.assert_platform_alive(sid)

    def test_resolver_traffic_holds_no_conntrack_entries(self):
        # attack: a sandbox denied everything asks corral's resolver from 3000 source ports, twice
        # 2.5 s apart: each conversation becomes an "assured" conntrack entry of the host's (one
        # the kernel never evicts early), kept as long as it goes on; 64,000 ports a sandbox,
        # and a few sandboxes fill the host's table (262,144 here): every new flow of the host
        # and of every sandbox is then dropped
        sid = self.sandbox({"defaultAction": "deny", "egress": []})
        ip, gw = self.address(sid), self.nameserver(sid)
        out = self.sh(sid, "/usr/bin/python3 -c %s %s 20000 3000" % (q(UDP_PORTS), gw),
                      read_timeout=120)
        log("answers per pass:", out.split())
        self.assertGreater(min(int(x) for x in out.split()), 2000)
        held = conntrack_of(ip)
        log("the host's conntrack entries from the sandbox:", held)
        self.assertLess(held.get(("udp", True), 0), 64,
                        "a sandbox denied everything holds assured conntrack entries")
        self.assert_platform_alive(sid)


class PolicyApiAttacks(LabDnsCase):
    def test_delete_with_a_huge_target_list_is_refused(self):
        # attack: DELETE /policy with 1 MiB of targets (262,000 of them) against a policy of
        # 1024 rules: each target is compared with each rule on corrald's loop, seconds a request
        rules = [{"action": "allow", "target": "n%d.test" % i} for i in range(1024)]
        sid = self.sandbox({"defaultAction": "deny", "egress": rules})
        body = "[" + ",".join(['"a"'] * 262000) + "]"
        r = self.policy_call(sid, "DELETE", body)
        log("DELETE of 262000 targets:", r.status, r.body[:120])
        self.assertEqual(r.status, 400, "a list of more targets than a policy has rules was taken")
        # as many as a policy can have rules still work
        r = self.policy_call(sid, "DELETE", ["n%d.test" % i for i in range(1000)] +
                             ["x%d.test" % i for i in range(24)])
        self.assertEqual(r.status, 200, r)
        hdrs = self.client.get("/v1/sandboxes/%s/endpoints/18080" % sid).json()["headers"]
        r = self.client.request("GET", "/sandboxes/%s/proxy/18080/policy" % sid, headers=hdrs)
        self.assertEqual(len(r.json()["policy"]["egress"]), 24)
        self.assert_platform_alive(sid)

    def test_largest_policy_is_what_the_kernel_enforces(self):
        # attack: PUT the largest policy there is (1024 address rules, one libnftnl batch past the
        # netlink socket's default buffer), then PATCH one rule more: what the API shows must be
        # what the kernel has, rule for rule, and the refused PATCH must change neither
        lit = self.lab.addr["literal"]
        rules = largest_policy(lit)
        sid = self.sandbox({"defaultAction": "deny", "egress": []})
        self.assertFalse(self.reach(sid, lit))
        r = self.policy_call(sid, "PUT", {"defaultAction": "deny", "egress": rules})
        self.assertEqual(r.status, 200, r)
        r = self.policy_call(sid, "PATCH", [{"action": "deny", "target": lit + "/32"}])
        self.assertEqual(r.status, 400, r)
        hdrs = self.client.get("/v1/sandboxes/%s/endpoints/18080" % sid).json()["headers"]
        shown = self.client.request("GET", "/sandboxes/%s/proxy/18080/policy" % sid,
                                    headers=hdrs).json()["policy"]["egress"]
        self.assertEqual(shown, rules)
        kernel = kernel_chain(self.corrald.net_name, sid)
        log("the kernel's chain: %d rules, first %s, last %s" % (len(kernel), kernel[:3], kernel[-2:]))
        self.assertEqual(kernel[1:-1], [(r["action"], r["target"]) for r in rules])
        self.assertEqual(kernel[-1], ("deny", None))
        self.assertTrue(self.reach(sid, lit), "the policy's last rule is not enforced")
        self.assert_platform_alive(sid)


# A stand-in for a DNS server of the host's own listening on every address (dnsmasq's default):
# logs the source of every datagram from the lab's sandbox subnet, answers nothing.
HOST_DNS = r"""
import ipaddress, socket, sys
net, logpath = ipaddress.ip_network(sys.argv[1]), sys.argv[2]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 53))
print("ready", flush=True)
while True:
    data, peer = s.recvfrom(4096)
    if ipaddress.ip_address(peer[0]) in net:
        with open(logpath, "a") as f:
            f.write(peer[0] + "\n")
"""


# The workload of a sandbox: asks corral's resolver for a name every 0.2 s for 12 s, each time
# from a new socket, and prints the answers.
ASK_LOOP = r"""
import random, socket, struct, sys, time
gw = sys.argv[1]
end = time.monotonic() + 12
while time.monotonic() < end:
    q = struct.pack(">HHHHHH", random.randrange(65536), 0x0100, 1, 0, 0, 0)
    q += b"\x05exfil\x04test\x00\x00\x01\x00\x01"
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(0.2)
    s.sendto(q, (gw, 53))
    try:
        a = s.recv(512)
        print("NXDOMAIN" if a[3] & 15 == 3 else "ANSWER", flush=True)
    except OSError:
        print("TIMEOUT", flush=True)
    s.close()
    time.sleep(0.2)
"""


class RestartWindowAttacks(NetLabCase):
    """A corrald of its own, killed and started again."""
    reach = LabDnsCase.reach

    def restart(self):
        self.corrald.start()
        self.client.close()
        self.client = self.corrald.client()

    def test_interrupted_policy_change_leaves_no_learned_address(self):
        # attack: corrald is killed in the middle of PUT /policy that removes the sandbox's only
        # allowed name (after the record, before nftables: strace holds it there): after the
        # restart the API shows the new policy, and the address the old one admitted must not
        # stay reachable for the rest of its TTL
        target = self.lab.addr["allowed.test"]
        sid = self.sandbox({"defaultAction": "deny",
                            "egress": [{"action": "allow", "target": "allowed.test"}]})
        self.assertEqual(self.resolve(sid, "allowed.test"), [target])
        self.assertIn("hello", self.sh(sid, "curl -s -m 3 http://%s/" % target))
        hdrs = self.client.get("/v1/sandboxes/%s/endpoints/18080" % sid).json()["headers"]
        path = "/sandboxes/%s/proxy/18080/policy" % sid
        record = os.path.join(self.corrald.sandbox_dir(sid), "sandbox.json")
        tracer = subprocess.Popen(
            ["strace", "-p", str(self.corrald.proc.pid), "-e", "trace=rename,renameat,renameat2",
             "-e", "inject=rename,renameat,renameat2:delay_exit=20000000"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: tracer.poll() is None and (tracer.kill(), tracer.wait()))
        line = tracer.stderr.readline()
        self.assertIn("attached", line)
        deny = {"defaultAction": "deny", "egress": []}

        def put():
            c = self.corrald.client(timeout=30)
            try:
                c.request("PUT", path, body=deny, headers=hdrs)
            except Exception:
                pass

        t = threading.Thread(target=put)
        t.start()

        def renamed():
            with open(record) as f:
                return json.load(f)["egress"]["policy"]["egress"] == []
        self.wait_until(renamed, 15, msg="the new policy's record")
        self.corrald.kill9()
        t.join()
        tracer.wait()
        tracer.stderr.close()
        self.restart()
        r = self.client.request("GET", path, headers=self.client.get(
            "/v1/sandboxes/%s/endpoints/18080" % sid).json()["headers"])
        shown = r.json()["policy"]
        out = self.sh(sid, "curl -s --connect-timeout 1 -m 2 http://%s/; echo rc=$?" % target)
        log("after the restart: the API shows %s; the sandbox -> %s: %s"
            % (shown, target, out.strip()))
        self.assertEqual(shown, deny)
        self.assertNotIn("hello", out, "an address of the removed rule stayed admitted")
        self.assertEqual(self.resolve(sid, "allowed.test"), "NXDOMAIN")
        self.assert_platform_alive(sid)

    def test_restart_puts_back_the_largest_policies(self):
        # attack: an API client gives 8 sandboxes the largest policy (1024 address rules each)
        # and corrald is killed; one sandbox's chain is not what its record says (a kill -9
        # between a change's nftables commit and its record; emptied by hand here): the start
        # must put every chain back rule for rule (as libnftables text, 40 such sandboxes held
        # corrald's start 4.2 s, its loop blocked)
        lit = self.lab.addr["literal"]
        rules = largest_policy(lit)
        sids = [self.sandbox({"defaultAction": "deny", "egress": rules}) for _ in range(8)]
        self.assertTrue(self.reach(sids[0], lit))
        self.corrald.kill9()
        subprocess.run(["nft", "flush", "chain", "inet", self.corrald.net_name,
                        "sb_" + sids[0].replace("-", "_")], check=True)
        subprocess.run(["nft", "add", "rule", "inet", self.corrald.net_name,
                        "sb_" + sids[0].replace("-", "_"), "accept"], check=True)
        self.restart()
        want = [("allow", None)] + [(r["action"], r["target"]) for r in rules] + [("deny", None)]
        for sid in sids:
            self.assertEqual(kernel_chain(self.corrald.net_name, sid), want,
                             "sandbox %s's chain is not its record's policy" % sid)
        self.assertTrue(self.reach(sids[0], lit))
        self.assertFalse(self.reach(sids[0], self.lab.addr["allowed.test"]))
        self.assert_platform_alive(*sids[:2])

    def test_resolver_down_sends_dns_to_no_other_host_service(self):
        # attack: while corrald is down (a restart, an upgrade), a sandbox denied everything keeps
        # sending DNS to the gateway's port 53, where a DNS server of the host's own listens on
        # every address (dnsmasq's default): it would resolve, and forward, what the policy denies
        logpath = os.path.join(self.lab.tmp, "hostdns.log")  # removed with the lab
        sid = self.sandbox({"defaultAction": "deny", "egress": []})
        gw = self.nameserver(sid)
        self.assertEqual(self.resolve(sid, "allowed.test"), "NXDOMAIN")
        host_dns = subprocess.Popen(["/usr/bin/python3", "-c", HOST_DNS, self.lab.sandbox_subnet,
                                     logpath], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, text=True, start_new_session=True)
        self.addCleanup(lambda: (host_dns.kill(), host_dns.wait()))
        self.assertEqual(host_dns.stdout.readline().strip(), "ready")
        # the workload asks all along (commands need corrald: this one runs on while it is down)
        self.sh(sid, "nohup /usr/bin/python3 -c %s %s >/tmp/asks 2>&1 &" % (q(ASK_LOOP), gw))
        self.wait_until(lambda: self.sh(sid, "cat /tmp/asks").count("NXDOMAIN") >= 2, 10,
                        msg="the workload's first answers")
        self.corrald.kill9()
        time.sleep(3)
        # the stand-in does listen on the gateway's address: the host's own datagram gets there
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"control", (gw, 53))
        time.sleep(0.2)
        try:
            with open(logpath) as f:
                got = f.read().split()
        except OSError:
            got = []
        log("datagrams from the sandbox at the host's own DNS server:", got)
        self.restart()
        self.assertIn(gw, got, "the stand-in never saw the host's own datagram")
        self.assertNotIn(self.address(sid), got, "the sandbox's DNS reached another host service")
        self.assertEqual(self.resolve(sid, "allowed.test"), "NXDOMAIN")
        self.assert_platform_alive(sid)


# Opens N UDP sockets, each sends a datagram to DST:DPORT; twice, 2.5 s apart (the same
# conversations again: "assured" conntrack entries); prints the echoes each pass got within 3 s.
UDP_FLOWS = r"""
import select, socket, sys, time
dst, dport, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
socks = []
for _ in range(n):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setblocking(False)
    s.bind(("0.0.0.0", 0))
    socks.append(s)
for rnd in range(2):
    for s in socks:
        try:
            s.sendto(b"flow", (dst, dport))
        except OSError:
            pass
    got, end, p = 0, time.time() + 3, select.poll()
    waiting = {s.fileno(): s for s in socks}
    for fd in waiting:
        p.register(fd, select.POLLIN)
    while waiting and time.time() < end:
        for fd, _ in p.poll(200):
            try:
                waiting[fd].recv(64)
                got += 1
            except OSError:
                pass
            p.unregister(fd)
            del waiting[fd]
    print(got, flush=True)
    if rnd == 0:
        time.sleep(2.5)
"""


class FlowQuotaAttacks(NetLabCase):
    """A corrald of its own with --sandbox-flows 1000: what one sandbox may hold of the host's
    conntrack table."""
    FLOWS = 1000

    @classmethod
    def extra_args(cls):
        return cls.lab.corrald_args(cls.mode) + ["--sandbox-flows", str(cls.FLOWS)]

    def assured_of(self, ip):
        with open("/proc/net/nf_conntrack") as f:
            return sum(1 for ln in f if " src=%s " % ip in ln and "[ASSURED]" in ln)

    def test_one_sandbox_holds_a_bounded_share_of_the_conntrack_table(self):
        # attack: a sandbox allowed everything keeps 1,500 UDP conversations with a lab echo
        # server going (each an "assured" conntrack entry the kernel never evicts early), to
        # fill the host's table: then the host drops every new flow, its own included
        lit = self.lab.addr["literal"]
        self.lab.listen_udp(lit, 7001)
        sid = self.sandbox({"defaultAction": "allow", "egress": []})
        ip = self.address(sid)
        out = [int(x) for x in self.sh(sid, "/usr/bin/python3 -c %s %s 7001 1500" % (
            q(UDP_FLOWS), lit), read_timeout=120).split()]
        held = self.assured_of(ip)
        log("1500 UDP conversations: echoes per pass %s, assured entries held %d" % (out, held))
        self.assertGreater(min(out), self.FLOWS * 0.5, "precondition: the quota's worth answered")
        self.assertLessEqual(max(out), self.FLOWS, "flows past the quota got through")
        self.assertLessEqual(held, self.FLOWS)
        # a neighbour's flows are its own; the flooder's drops are counted
        other = self.sandbox({"defaultAction": "allow", "egress": []})
        self.assertEqual(self.sh(other, "/usr/bin/python3 -c %s %s 7001 20" % (
            q(UDP_FLOWS), lit)).split(), ["20", "20"])
        stats = self.client.get("/v1/sandboxes/%s/stats" % sid).json()["network"]
        self.assertGreaterEqual(stats["droppedPackets"], 500)
        self.assert_platform_alive(sid, other)


if __name__ == "__main__":
    main()
