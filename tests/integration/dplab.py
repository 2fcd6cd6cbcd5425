"""
The "internet" of the data-plane tests (test_network.py, tests/security/test_network.py): a network
namespace the test makes itself, joined to the host by a veth pair whose host end is corrald's
--egress-uplink. (netlab.py is the egress-policy tests' lab, with dnsmasq and test names; this one
adds the metadata address, extra listeners, and a policy route that holds every sandbox packet.)
Every address is in 198.18.0.0/15 (RFC 2544, benchmarking) or the sandbox subnet the lab picks,
and a policy route sends everything from that subnet into the lab whatever the host's own routes
say: no packet of a sandbox in a test can leave this machine, even if corral's rules were broken.

  host end  <uplink>     198.18.N.1/24
  lab end   eth0 (netns) 198.18.N.2/24 and .3/24 ("two hosts"), 169.254.169.254/32 on lo
  servers   python3 -m http.server on .2:8000, .3:8000 and 169.254.169.254:80, each answering
            GET /whoami with its own address; extra TCP listeners on request (listen_tcp)
  routing   ip rule "from <sandbox subnet> iif <bridge> lookup <T>", table T: default via .2
            (what sandboxes send through the host; the host's own replies to them are untouched)

Nothing of the host's is changed but this rule, the lab's interfaces and their routes; stop()
removes all of them.
"""
import os
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import time

LAB_HTTP_PORT = 8000


def sh(*argv, check=True):
    r = subprocess.run(list(argv), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(argv), r.stderr.strip()))
    return r


def _routes_text():
    return sh("ip", "-4", "route", "show", "table", "all").stdout + \
        sh("ip", "-4", "addr").stdout


class TestInternet:
    def __init__(self):
        h = secrets.token_hex(3)
        self.ns = "ctlab" + h
        self.uplink = "ctu" + h
        self.bridge = "ctb" + h  # corrald's --network-name (harness.Corrald takes it from here)
        routes = _routes_text()
        for _ in range(200):
            n = random.randrange(0, 256)
            if "198.18.%d." % n not in routes and "198.19.%d." % n not in routes:
                break
        self.prefix = "198.18.%d" % n
        for _ in range(200):
            a, b = random.randrange(64, 128), random.randrange(0, 256)
            if "10.%d.%d." % (a, b) not in routes:
                break
        self.sandbox_subnet = "10.%d.%d.0/24" % (a, b)
        self.gateway = "10.%d.%d.1" % (a, b)
        self.host_addr = self.prefix + ".1"
        self.addr = self.prefix + ".2"
        self.addr2 = self.prefix + ".3"
        self.metadata = "169.254.169.254"
        self.table = random.randrange(20000, 30000)
        self.procs = []
        self.tmp = None
        self.started = False

    def start(self):
        self.started = True
        try:
            self._start()
        except Exception:
            self.stop()
            raise
        return self

    def _start(self):
        sh("ip", "netns", "add", self.ns)
        sh("ip", "link", "add", self.uplink, "type", "veth", "peer", "name", "eth0", "netns", self.ns)
        sh("ip", "addr", "add", self.host_addr + "/24", "dev", self.uplink)
        sh("ip", "link", "set", self.uplink, "up")
        nsx = ["ip", "-n", self.ns]
        sh(*nsx, "link", "set", "lo", "up")
        sh(*nsx, "addr", "add", self.addr + "/24", "dev", "eth0")
        sh(*nsx, "addr", "add", self.addr2 + "/24", "dev", "eth0")
        sh(*nsx, "addr", "add", self.metadata + "/32", "dev", "lo")
        sh(*nsx, "link", "set", "eth0", "up")
        # replies to the sandbox subnet (not masqueraded, were a rule broken) come back too
        sh(*nsx, "route", "add", self.sandbox_subnet, "via", self.host_addr)
        sh("ip", "route", "add", "default", "via", self.addr, "dev", self.uplink,
           "table", str(self.table))
        sh("ip", "route", "add", "169.254.0.0/16", "via", self.addr, "dev", self.uplink,
           "table", str(self.table))
        sh("ip", "rule", "add", "from", self.sandbox_subnet, "iif", self.bridge, "lookup",
           str(self.table), "priority", str(self.table))
        self.tmp = tempfile.mkdtemp(prefix="corral-netlab-")
        for a, port in ((self.addr, LAB_HTTP_PORT), (self.addr2, LAB_HTTP_PORT),
                        (self.metadata, 80)):
            self.serve_http(a, port)

    def run_in(self, *argv, **kw):
        return subprocess.run(["ip", "netns", "exec", self.ns] + list(argv), **kw)

    def serve_http(self, addr, port):
        d = os.path.join(self.tmp, "%s-%d" % (addr, port))
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "whoami"), "w") as f:
            f.write(addr + "\n")
        p = subprocess.Popen(["ip", "netns", "exec", self.ns, sys.executable, "-m", "http.server",
                              "--bind", addr, "--directory", d, str(port)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
        self.procs.append(p)
        self._wait_listening(addr, port)
        return p

    def listen_tcp(self, addr, port):
        """A TCP listener in the lab that accepts and answers 'hello' (to show a block is ours)."""
        code = ("import socket,sys\n"
                "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
                "s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(512)\n"
                "while True:\n"
                "    c,_=s.accept(); c.sendall(b'hello\\n'); c.close()\n")
        p = subprocess.Popen(["ip", "netns", "exec", self.ns, sys.executable, "-c", code, addr,
                              str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
        self.procs.append(p)
        self._wait_listening(addr, port)
        return p

    def listen_udp(self, addr, port):
        """A UDP service in the lab that echoes every datagram (a stand-in foreign resolver)."""
        code = ("import socket,sys\n"
                "s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                "s.bind((sys.argv[1], int(sys.argv[2])))\n"
                "while True:\n"
                "    d,a=s.recvfrom(2048); s.sendto(d,a)\n")
        p = subprocess.Popen(["ip", "netns", "exec", self.ns, sys.executable, "-c", code, addr,
                              str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
        self.procs.append(p)
        self._wait_listening(addr, port, udp=True)
        return p

    def host_udp_echo(self, addr, port, timeout=2.0):
        import socket
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
        import socket
        try:
            with socket.create_connection((addr, port), timeout=timeout):
                return True
        except OSError:
            return False

    def stop(self):
        if not self.started:
            return
        self.started = False
        for p in self.procs:
            try:
                os.killpg(p.pid, 9)
            except OSError:
                pass
            p.wait()
        self.procs = []
        sh("ip", "rule", "del", "from", self.sandbox_subnet, "iif", self.bridge, "lookup",
           str(self.table), "priority", str(self.table), check=False)
        sh("ip", "route", "flush", "table", str(self.table), check=False)
        sh("ip", "netns", "del", self.ns, check=False)
        sh("ip", "link", "del", self.uplink, check=False)  # gone with its peer, normally
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
