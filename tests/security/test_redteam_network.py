"""
Red-team pass on sandbox networking (docs/network.md, docs/security.md): attacks that worked
against the first version, each kept as a test of the promise it broke. The "internet" is the
test's own network namespace (tests/integration/netlab.py); no packet goes toward any address
outside this machine.
"""
import os
import random
import sys
import time

from sec import AttackCase, log, main

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "integration"))
from netlab import DNS_PROBE, NetLab  # noqa: E402

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


class NetLabCase(AttackCase):
    mode = "dns+nft"

    @classmethod
    def setUpClass(cls):
        cls.lab = NetLab()
        cls.corrald_kwargs = {"api_key": KEY, "network": cls.lab,
                              "extra_args": cls.lab.corrald_args(cls.mode)}
        try:
            super().setUpClass()
        except Exception:
            cls.lab.close()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.lab.close()

    def sandbox(self, policy):
        return self.create(resourceLimits=SMALL, resourceRequests={"cpu": "10m", "memory": "16Mi"},
                           networkPolicy=policy)["id"]

    def nameserver(self, sid):
        return self.sh(sid, "awk '/^nameserver/ {print $2; exit}' /etc/resolv.conf").strip()

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


if __name__ == "__main__":
    main()
