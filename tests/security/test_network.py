#!/usr/bin/env python3
"""
Attacks on sandbox networking (docs/network.md, "always blocked"): root in a sandbox with a network
tries to reach another sandbox, corrald's API, a host service, the link-local metadata address, a
foreign resolver or DoT, and to take another sandbox's address. The "internet" is the test's own
namespace (tests/integration/netlab.py): every target listens there or on this host, and a
policy route keeps every sandbox packet inside the machine. Each attack is shown to fail while the
target demonstrably answers someone else, and corrald and the other sandboxes keep answering.
"""
import os
import secrets
import socket
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
from netlab import LAB_HTTP_PORT, NetLab  # noqa: E402
from sec import AttackCase, main  # noqa: E402

KEY = "net-key-" + secrets.token_hex(8)


def connect_cmd(addr, port, timeout=3):
    """Shell: a TCP connect from the sandbox; prints OPEN <first bytes, if any> or BLOCKED
    <error> (the connect itself failed)."""
    return ("python3 -c \"import socket\n"
            "try:\n"
            "    s=socket.create_connection(('%s', %d), timeout=%d); s.settimeout(1)\n"
            "except Exception as e: print('BLOCKED', e); raise SystemExit\n"
            "try: print('OPEN', s.recv(64))\n"
            "except Exception: print('OPEN')\"" % (addr, port, timeout))


class HostListener:
    """A TCP service of the host on every address (0.0.0.0), answering 'host-secret'."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("0.0.0.0", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.t = threading.Thread(target=self._serve, daemon=True)
        self.t.start()

    def _serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            try:
                c.sendall(b"host-secret\n")
            finally:
                c.close()

    def close(self):
        self.sock.close()


class TestNetworkAttacks(AttackCase):
    class_sandboxes = ("attacker", "victim")

    @classmethod
    def setUpClass(cls):
        cls.lab = NetLab()
        # corrald listens on every host address (with a key): the sandbox must still not reach it
        cls.corrald_kwargs = {"network": cls.lab, "api_key": KEY, "listen_host": "0.0.0.0"}
        cls.host_service = HostListener()
        try:
            super().setUpClass()
        except Exception:
            cls.host_service.close()
            cls.lab.close()
            raise
        cls.addr = {}
        for name in cls.class_sandboxes:
            sid = getattr(cls, name)
            cls.addr[name] = cls.client.get_sandbox(sid).json()["network"]["address"]

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.host_service.close()
            cls.lab.close()

    def attempt(self, sid, addr, port):
        out = self.client.run(sid, connect_cmd(addr, port)).stdout.strip()
        self.assertTrue(out.startswith(("OPEN", "BLOCKED")), out)
        return out

    def assert_blocked(self, addr, port, sid=None):
        out = self.attempt(sid or self.attacker, addr, port)
        self.assertTrue(out.startswith("BLOCKED"), "%s:%d reachable from a sandbox: %s"
                        % (addr, port, out))

    def test_sanity_the_lab_is_reachable(self):
        # Not an attack: the same path that the attacks below take does carry allowed traffic.
        out = self.attempt(self.attacker, self.lab.web1, LAB_HTTP_PORT)
        self.assertTrue(out.startswith("OPEN"), out)

    def test_sandbox_cannot_reach_another_sandbox(self):
        # Attack: connect to a service the neighbour runs on its eth0 address (same bridge, L2).
        self.client.run(self.victim, "python3 -c \"import socket\n"
                        "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                        "s.bind(('0.0.0.0', 7777)); s.listen(8)\n"
                        "while True:\n"
                        "    c,_=s.accept(); c.sendall(b'victim-secret'); c.close()\" "
                        ">/dev/null 2>&1 &")
        own = ""
        for _ in range(50):
            own = self.attempt(self.victim, self.addr["victim"], 7777)
            if own.startswith("OPEN"):
                break
        self.assertIn("victim-secret", own)  # it listens on its eth0 address
        self.assert_blocked(self.addr["victim"], 7777)
        self.assert_platform_alive(self.attacker, self.victim)

    def test_sandbox_cannot_take_another_address(self):
        # Attack: root in the sandbox adds the neighbour's address, or opens a raw socket to
        # forge packets from it (both need CAP_NET_ADMIN/NET_RAW over the host-owned netns).
        out = self.client.run(self.attacker, "python3 -c \"import socket\n"
                              "try:\n"
                              "    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW); print('RAW')\n"
                              "except Exception as e: print('NORAW', e)\n"
                              "s=socket.socket()\n"
                              "try:\n"
                              "    s.setsockopt(socket.SOL_IP, 19, 1); s.bind(('%s', 0)); print('BOUND')\n"
                              "except Exception as e: print('NOBIND', e)\"; "
                              "ip addr add %s/32 dev eth0 2>&1 || echo NOADDR"
                              % (self.addr["victim"], self.addr["victim"])).stdout
        self.assertIn("NORAW", out)
        self.assertIn("NOBIND", out)  # IP_TRANSPARENT (19) needs CAP_NET_ADMIN
        self.assertNotIn("BOUND", out)
        ips = self.client.run(self.attacker, "cat /proc/net/fib_trie | grep -c '%s'"
                              % self.addr["victim"]).stdout.strip()
        self.assertEqual(ips, "0", "the attacker's netns has the victim's address")
        self.assert_platform_alive(self.attacker, self.victim)

    def test_sandbox_cannot_reach_corrald_api(self):
        # Attack: call corrald's API (listening on 0.0.0.0 here) through the gateway and the
        # host's uplink address.
        port = self.corrald.port
        self.assertTrue(self.lab.host_can_reach(self.lab.host_addr, port))
        self.assert_blocked(self.lab.gateway, port)
        self.assert_blocked(self.lab.host_addr, port)
        self.assert_platform_alive(self.attacker, self.victim)

    def test_sandbox_cannot_reach_host_service(self):
        # Attack: connect to another service of the host (bound to 0.0.0.0) on each host address
        # a sandbox can name: the gateway, the uplink's address.
        port = self.host_service.port
        self.assertTrue(self.lab.host_can_reach(self.lab.host_addr, port))
        self.assert_blocked(self.lab.gateway, port)
        self.assert_blocked(self.lab.host_addr, port)
        self.assert_blocked(self.lab.gateway, 22)
        self.assert_platform_alive(self.attacker, self.victim)

    def test_sandbox_cannot_reach_metadata_address(self):
        # Attack: fetch the cloud metadata address 169.254.169.254 (served in the lab here).
        r = self.lab.run_in("python3", "-c", "import urllib.request;"
                            "print(urllib.request.urlopen('http://169.254.169.254/whoami', timeout=3).read().decode())",
                            capture_output=True, text=True)
        self.assertIn("169.254.169.254", r.stdout)  # it answers inside the lab
        self.assert_blocked(self.lab.metadata, 80)
        self.assert_platform_alive(self.attacker, self.victim)

    def test_sandbox_cannot_use_foreign_dns_or_dot(self):
        # Attack: reach a resolver other than corral's (TCP 53) and DNS over TLS (TCP 853).
        self.lab.listen_tcp(self.lab.web1, 53)
        self.lab.listen_tcp(self.lab.web1, 853)
        self.assertTrue(self.lab.host_can_reach(self.lab.web1, 53))
        self.assertTrue(self.lab.host_can_reach(self.lab.web1, 853))
        self.assert_blocked(self.lab.web1, 53)
        self.assert_blocked(self.lab.web1, 853)
        # UDP 53: a foreign "resolver" in the lab echoes datagrams (to the host, it does)
        self.lab.listen_udp(self.lab.web1, 53)
        self.assertTrue(self.lab.host_udp_echo(self.lab.web1, 53))
        out = self.client.run(self.attacker, "python3 -c \"import socket\n"
                              "s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2)\n"
                              "s.sendto(b'query', ('%s', 53))\n"
                              "try: print('ANSWER', s.recv(512))\n"
                              "except Exception as e: print('BLOCKED', e)\"" % self.lab.web1).stdout
        self.assertIn("BLOCKED", out)
        self.assert_platform_alive(self.attacker, self.victim)


if __name__ == "__main__":
    main()
