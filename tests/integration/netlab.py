"""
The private "internet" of every network test and bench (test_network.py, test_egress.py, their
security twins, bench/network.py, bench/dns.py, tests/compat/run.sh): a network namespace this
test creates, joined to the host by a veth pair (corrald's --egress-uplink), holding a DNS server
(Debian's dnsmasq with --no-resolv: it knows only the test names below and asks nobody else) and
small HTTP servers on addresses that exist only inside it.

No packet goes toward any address outside this machine: every address is in 198.18.0.0/15 (the
benchmarking range, RFC 2544) or the sandbox subnet the lab picks, both at random per lab so
parallel suites do not collide; a policy route ("from <sandbox subnet> iif <bridge> lookup <T>",
table T: default and 169.254.0.0/16 via the lab) sends everything a sandbox sends through the host
into the lab whatever the host's own routes say, so even a broken rule cannot let a sandbox packet
leave the machine; and corrald's --dns-upstream is always the lab's dnsmasq (corrald_args(), and
harness.Corrald(network=lab) passes lab.dns).

  host end   <uplink>       198.18.R.1/29 (host_ip, alias host_addr)
  lab end    <peer> (netns) 198.18.R.2 (ns_ip: dnsmasq), .3 (web1) and .4 (web2)
  servers    198.19.R.x/32 on the lab's lo, port 80 (and 853 on "dot"), answering
             "hello from <addr>" (addr[name], routed from the host through the link);
             web1, web2 on LAB_HTTP_PORT and 169.254.169.254:80 (metadata) answering GET /whoami
             with their own address; extra TCP/UDP listeners on request (listen_tcp, listen_udp)

    lab = NetLab()             # creates everything; lab.close() removes it (also at exit)
    lab.addr["allowed.test"]   # 198.19.R.10, where allowed.test points
    lab.dns                    # "198.18.R.2:53", for --dns-upstream
    lab.uplink, lab.bridge, lab.sandbox_subnet   # what harness.Corrald(network=lab) passes

lab.bridge is a fresh name per lab, and corrald's --network-name: close() also removes what a
corrald of that name leaves behind (its bridge, its two nftables tables, its lock file), so a
test never leaves a network of its own on the host.
"""
import atexit
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

LAB_HTTP_PORT = 8000  # web1, web2: GET /whoami answers the server's own address

# name -> (host part of the address, TTL of its DNS record)
NAMES = {
    "allowed.test": (10, 300),
    "denied.test": (20, 300),
    "wild.test": (30, 300),
    "a.wild.test": (31, 300),
    "a.b.wild.test": (32, 300),
    "other.test": (40, 300),
    "short.test": (50, 1),     # learned with the floor TTL (net.h NET_LEARN_TTL_FLOOR_S)
    "cidr.test": (60, 300),
    "patch.test": (70, 300),
}
# Servers without a name: reachable only as IP literals.
EXTRA = {"literal": 80, "dot": 90, "resolver2": 100}

_labs = []


def _run(*argv, check=True, **kw):
    return subprocess.run(list(argv), check=check, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, **kw)


HTTP_SERVER = r"""
import http.server, socketserver, sys, threading
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("hello from %s\n" % self.server.server_address[0]).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
# TCPServer, not HTTPServer: HTTPServer's bind looks its own name up (a DNS query to the host's
# resolver from inside the lab).
class S(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True
for spec in sys.argv[1:]:
    host, port = spec.rsplit(":", 1)
    s = S((host, int(port)), H)
    threading.Thread(target=s.serve_forever, daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"""


class NetLab:
    def __init__(self):
        self.tag = secrets.token_hex(3)
        self.ns = "corral-inet-" + self.tag
        self.uplink = "ci" + self.tag           # host side of the veth
        self.peer = "cp" + self.tag
        self.bridge = "cnb" + self.tag          # corrald's --network-name
        routes = _run("ip", "-4", "route", "show", "table", "all").stdout + \
            _run("ip", "-4", "addr").stdout
        for _ in range(200):
            r = secrets.randbelow(254) + 1
            if "198.18.%d." % r not in routes and "198.19.%d." % r not in routes:
                break
        for _ in range(200):
            a, b = 64 + secrets.randbelow(64), secrets.randbelow(256)
            if "10.%d.%d." % (a, b) not in routes:
                break
        self.sandbox_subnet = "10.%d.%d.0/24" % (a, b)
        # a routing table no other lab uses (a second lab's default route in the same table
        # would fail its setup with "File exists")
        for _ in range(200):
            self.table = 30000 + secrets.randbelow(10000)
            if not re.search(r"\btable %d\b" % self.table, routes):
                break
        # the policy route's rule comes before the main table's (32766), or a sandbox packet to
        # an address the host has a route for (its default route: anything) would follow that
        self.rule_prio = 20000 + secrets.randbelow(10000)
        self.host_ip = "198.18.%d.1" % r         # host end of the link
        self.host_addr = self.host_ip
        self.ns_ip = "198.18.%d.2" % r           # the namespace's end: dnsmasq listens here
        self.web1 = "198.18.%d.3" % r            # two hosts on the link (LAB_HTTP_PORT)
        self.web2 = "198.18.%d.4" % r
        self.metadata = "169.254.169.254"
        self.gateway = "10.%d.%d.1" % (a, b)     # corrald's bridge address in the subnet
        self.net = "198.19.%d" % r               # the servers' /24, routed to the namespace
        self.addr = {n: "%s.%d" % (self.net, h) for n, (h, _) in NAMES.items()}
        self.addr.update({n: "%s.%d" % (self.net, h) for n, h in EXTRA.items()})
        self.dns = self.ns_ip + ":53"
        self.link = "198.18.%d" % r              # the link's /24
        self.tmp = tempfile.mkdtemp(prefix="corral-netlab-")
        self.dns_log = os.path.join(self.tmp, "dnsmasq.log")
        self.procs = []
        _labs.append(self)
        try:
            self._setup()
        except Exception:
            self.close()
            raise

    def nsexec(self, *argv):
        return ["ip", "netns", "exec", self.ns] + list(argv)

    def _setup(self):
        _run("ip", "netns", "add", self.ns)
        _run("ip", "link", "add", self.uplink, "type", "veth", "peer", "name", self.peer)
        _run("ip", "link", "set", self.peer, "netns", self.ns)
        _run("ip", "addr", "add", self.host_ip + "/29", "dev", self.uplink)
        _run("ip", "link", "set", self.uplink, "up")
        ns = self.nsexec
        _run(*ns("ip", "link", "set", "lo", "up"))
        for a in (self.ns_ip, self.web1, self.web2):
            _run(*ns("ip", "addr", "add", a + "/29", "dev", self.peer))
        _run(*ns("ip", "link", "set", self.peer, "up"))
        for a in sorted(set(self.addr.values())) + [self.metadata]:
            _run(*ns("ip", "addr", "add", a + "/32", "dev", "lo"))
        # no default route: the lab answers the link's addresses (sandboxes are masqueraded to
        # the host's) and what comes from the sandbox subnet (not masqueraded, were a rule
        # broken), and cannot send anywhere else
        _run(*ns("ip", "route", "add", self.sandbox_subnet, "via", self.host_ip))
        # the host reaches the servers through the veth (a more specific route than its default)
        _run("ip", "route", "add", self.net + ".0/24", "via", self.ns_ip, "dev", self.uplink)
        # and whatever a sandbox sends through the host goes into the lab, never elsewhere
        _run("ip", "route", "add", "default", "via", self.ns_ip, "dev", self.uplink,
             "table", str(self.table))
        _run("ip", "route", "add", "169.254.0.0/16", "via", self.ns_ip, "dev", self.uplink,
             "table", str(self.table))
        _run("ip", "rule", "add", "from", self.sandbox_subnet, "iif", self.bridge, "lookup",
             str(self.table), "priority", str(self.rule_prio))
        self.rule = True
        # the DNS server: the test names only, each with its TTL; never asks anyone else
        argv = ["dnsmasq", "--no-resolv", "--no-hosts", "--no-poll", "--keep-in-foreground",
                "--bind-interfaces", "--listen-address=" + self.ns_ip,
                "--listen-address=" + self.addr["resolver2"],
                "--port=53", "--pid-file=", "--user=root", "--group=root", "--log-queries",
                "--log-facility=" + self.dns_log, "--cache-size=0"]
        for name, (host, ttl) in NAMES.items():
            argv.append("--host-record=%s,%s.%d,%d" % (name, self.net, host, ttl))
        self.procs.append(subprocess.Popen(ns(*argv), stdin=subprocess.DEVNULL,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                           start_new_session=True))
        # HTTP on port 80 of every server address, plus a "DoT" listener on 853
        specs = ["%s:80" % a for a in sorted(set(self.addr.values()))]
        specs += ["%s:853" % self.addr["dot"]]
        with open(os.path.join(self.tmp, "http.log"), "w") as errf:
            p = subprocess.Popen(ns("/usr/bin/python3", "-c", HTTP_SERVER, *specs),
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errf,
                                 start_new_session=True, text=True)
        self.procs.append(p)
        ready = p.stdout.readline().strip()
        p.stdout.close()
        if ready != "ready":
            raise RuntimeError("the lab's HTTP servers did not start")
        for a, port in ((self.web1, LAB_HTTP_PORT), (self.web2, LAB_HTTP_PORT),
                        (self.metadata, 80)):
            self.serve_http(a, port)
        # dnsmasq answers: ask it from inside the namespace until it does
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.dns_queries():
                break
            out = _run(*ns("/usr/bin/python3", "-c", DNS_PROBE, self.ns_ip, "allowed.test"),
                       check=False)
            if out.stdout.strip() == self.addr["allowed.test"]:
                break
            time.sleep(0.1)
        else:
            raise RuntimeError("dnsmasq in %s did not answer" % self.ns)

    # --- the data-plane tests' helpers -------------------------------------------------------

    def run_in(self, *argv, **kw):
        return subprocess.run(self.nsexec(*argv), **kw)

    def _spawn(self, argv):
        p = subprocess.Popen(self.nsexec(*argv), stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
        self.procs.append(p)
        return p

    def serve_http(self, addr, port):
        """python3 -m http.server on addr:port in the lab; GET /whoami answers addr."""
        d = os.path.join(self.tmp, "%s-%d" % (addr, port))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "whoami"), "w") as f:
            f.write(addr + "\n")
        p = self._spawn([sys.executable, "-m", "http.server", "--bind", addr, "--directory", d,
                         str(port)])
        self._wait_listening(addr, port)
        return p

    def listen_tcp(self, addr, port):
        """A TCP listener in the lab that accepts and answers 'hello' (to show a block is ours)."""
        code = ("import socket,sys\n"
                "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                "s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(512)\n"
                "while True:\n"
                "    c,_=s.accept(); c.sendall(b'hello\\n'); c.close()\n")
        p = self._spawn([sys.executable, "-c", code, addr, str(port)])
        self._wait_listening(addr, port)
        return p

    def listen_udp(self, addr, port):
        """A UDP service in the lab that echoes every datagram (a stand-in foreign resolver)."""
        # A receive buffer for a burst (1,500 datagrams at once in the flow-quota attack): with
        # the default one, whatever came while it was not scheduled would be dropped at its socket.
        code = ("import socket,sys\n"
                "s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                "s.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)\n"  # SO_RCVBUFFORCE (root)
                "s.bind((sys.argv[1], int(sys.argv[2])))\n"
                "while True:\n"
                "    d,a=s.recvfrom(2048); s.sendto(d,a)\n")
        p = self._spawn([sys.executable, "-c", code, addr, str(port)])
        self._wait_listening(addr, port, udp=True)
        return p

    def host_udp_echo(self, addr, port, timeout=2.0):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(timeout)
        try:
            s.sendto(b"ping", (addr, port))
            return s.recv(64) == b"ping"
        except OSError:
            return False
        finally:
            s.close()

    def _wait_listening(self, addr, port, timeout=10.0, udp=False):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = self.run_in("ss", "-Hlun" if udp else "-Hltn", "src", "%s:%d" % (addr, port),
                            capture_output=True, text=True)
            if r.stdout.strip():
                return
            time.sleep(0.05)
        raise RuntimeError("nothing listens on %s:%d in %s" % (addr, port, self.ns))

    def host_can_reach(self, addr, port, timeout=3.0):
        """From the host (the test process): a TCP connect, to show the target listens."""
        try:
            with socket.create_connection((addr, port), timeout=timeout):
                return True
        except OSError:
            return False

    def dns_queries(self):
        """The names dnsmasq was asked for, in order (from its query log)."""
        try:
            with open(self.dns_log) as f:
                lines = f.read().splitlines()
        except OSError:
            return []
        out = []
        for ln in lines:
            i = ln.find("query[")
            if i >= 0:
                out.append(ln[i:].split()[1])
        return out

    def corrald_args(self, mode="dns+nft", default=None, full=False):
        """corrald's flags for this lab. harness.Corrald(network=lab) adds the data plane's
        (--sandbox-subnet, --network-name, --egress-uplink) itself; full=True includes them."""
        a = ["--dns-upstream", self.dns, "--egress-mode", mode]
        if default:
            a += ["--egress-default", default]
        if full:
            a += ["--sandbox-subnet", self.sandbox_subnet, "--network-name", self.bridge,
                  "--egress-uplink", self.uplink]
        return a

    def owns(self, addr_port):
        """Whether ADDR[:PORT] is one of the lab's own addresses (its link or its servers' /24),
        so that a corrald pointed there sends nothing out of this machine."""
        host = addr_port.rsplit(":", 1)[0] if addr_port.count(":") == 1 else addr_port
        return any(host.startswith(p + ".") and host[len(p) + 1:].isdigit()
                   for p in (self.link, self.net))

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
                p.wait()
        self.procs = []
        if getattr(self, "rule", False):
            _run("ip", "rule", "del", "from", self.sandbox_subnet, "iif", self.bridge, "lookup",
                 str(self.table), "priority", str(self.rule_prio), check=False)
            _run("ip", "route", "flush", "table", str(self.table), check=False)
            self.rule = False
        _run("ip", "route", "del", self.net + ".0/24", check=False)
        _run("ip", "link", "del", self.uplink, check=False)
        _run("ip", "netns", "del", self.ns, check=False)
        remove_network(self.bridge)
        shutil.rmtree(self.tmp, ignore_errors=True)
        if self in _labs:
            _labs.remove(self)


class LabCase:
    """A test-class mixin (before CorralTestCase or AttackCase in the bases): its own lab,
    cls.lab, and a corrald pointed at it. lab_corrald_kwargs() gives that corrald's kwargs
    (network=cls.lab is added); started() runs once the lab is up, before corrald starts."""

    @classmethod
    def lab_corrald_kwargs(cls):
        return {"extra_args": cls.lab.corrald_args()}

    @classmethod
    def started(cls):
        pass

    @classmethod
    def setUpClass(cls):
        cls.lab = NetLab()
        cls.corrald_kwargs = dict(cls.lab_corrald_kwargs(), network=cls.lab)
        try:
            cls.started()
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


def remove_network(name):
    """What a corrald with --network-name NAME leaves on the host for its next start (its bridge,
    its two nftables tables, its lock file): for a test's own name only, once its corrald is
    gone."""
    _run("ip", "link", "del", name, check=False)
    _run("nft", "delete", "table", "inet", name, check=False)
    _run("nft", "delete", "table", "bridge", name, check=False)
    try:
        os.unlink("/run/corral/%s.lock" % name)
    except OSError:
        pass


@atexit.register
def _close_all():
    for lab in list(_labs):
        lab.close()


# A DNS client in the standard library, for sandboxes and the lab: DNS_PROBE SERVER[:PORT] NAME
# [tcp] prints the A records' addresses one per line, "NXDOMAIN", "RCODE n", or "TIMEOUT".
DNS_PROBE = r"""
import random, socket, struct, sys
server, name = sys.argv[1], sys.argv[2]
tcp = len(sys.argv) > 3 and sys.argv[3] == "tcp"
host, _, port = server.partition(":")
port = int(port or 53)
qid = random.randrange(65536)
q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
for label in name.rstrip(".").split("."):
    q += bytes([len(label)]) + label.encode()
q += b"\0" + struct.pack(">HH", 1, 1)
try:
    if tcp:
        s = socket.create_connection((host, port), timeout=3)
        s.sendall(struct.pack(">H", len(q)) + q)
        buf = b""
        while len(buf) < 2 or len(buf) < 2 + struct.unpack(">H", buf[:2])[0]:
            chunk = s.recv(4096)
            if not chunk:
                break
            buf += chunk
        a = buf[2:]
    else:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(3)
        s.sendto(q, (host, port))
        a, _ = s.recvfrom(4096)
except (socket.timeout, OSError):
    print("TIMEOUT")
    sys.exit(0)
rid, flags, qd, an = struct.unpack(">HHHH", a[:8])
rcode = flags & 15
if rcode == 3:
    print("NXDOMAIN")
    sys.exit(0)
if rcode:
    print("RCODE %d" % rcode)
    sys.exit(0)
i = 12
def skip_name(i):
    while True:
        l = a[i]
        if l >= 192:
            return i + 2
        if l == 0:
            return i + 1
        i += 1 + l
for _ in range(qd):
    i = skip_name(i) + 4
for _ in range(an):
    i = skip_name(i)
    t, c, ttl, rdl = struct.unpack(">HHIH", a[i:i + 10])
    i += 10
    if t == 1 and rdl == 4:
        print(socket.inet_ntoa(a[i:i + 4]))
    i += rdl
"""


if __name__ == "__main__":
    # For shell scripts (tests/compat/run.sh): set the lab up, print what corrald needs as
    # KEY=VALUE lines (ARGS: its flags), an empty line, then wait for SIGTERM/SIGINT and clean up.
    import sys
    lab = NetLab()
    print("ARGS=" + " ".join(lab.corrald_args(full=True)))
    print("BRIDGE=" + lab.bridge)
    for name, a in sorted(lab.addr.items()):
        print("%s=%s" % (name.replace(".", "_").replace("-", "_").upper(), a))
    print("", flush=True)
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    signal.signal(signal.SIGINT, lambda *a: stop.append(1))
    while not stop:
        signal.pause()
    lab.close()
    sys.exit(0)
