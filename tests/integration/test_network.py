#!/usr/bin/env python3
"""
Sandbox networking, the data plane (docs/network.md): a sandbox's eth0, address and route, its
resolv.conf, its reach into the test internet (netlab.py: a namespace of the test's own, nothing
leaves this machine), the server default in both modes, extensions.network "none", kill -9 and
restart, and that a delete or a restart leaves no veth or nftables object behind.
"""
import json
import os
import random
import re
import secrets
import shutil
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Corrald, CorralTestCase  # noqa: E402
from netlab import LAB_HTTP_PORT, LabCase, NetLab  # noqa: E402



def fetch_cmd(addr, port=LAB_HTTP_PORT, path="whoami", timeout=3):
    """A shell command that prints what GET http://addr:port/path answers, or FAIL."""
    return ("python3 -c \"import urllib.request,sys\n"
            "try: print(urllib.request.urlopen('http://%s:%d/%s', timeout=%d).read().decode().strip())\n"
            "except Exception as e: print('FAIL', e)\"" % (addr, port, path, timeout))


def nft_table(name):
    return subprocess.run(["nft", "list", "table", "inet", name], capture_output=True,
                          text=True).stdout


class NetworkCase(LabCase, CorralTestCase):
    """One lab and one corrald on it per class; corrald_args adds flags."""

    corrald_args = []

    @classmethod
    def lab_corrald_kwargs(cls):
        return {"extra_args": list(cls.corrald_args)}

    def fetch(self, sid, addr, port=LAB_HTTP_PORT, path="whoami"):
        return self.client.run(sid, fetch_cmd(addr, port, path)).stdout.strip()


class TestDataPlane(NetworkCase):
    def test_reaches_lab_hosts_by_ip_without_policy(self):
        sb = self.create()
        self.assertEqual(self.fetch(sb["id"], self.lab.web1), self.lab.web1)
        self.assertEqual(self.fetch(sb["id"], self.lab.web2), self.lab.web2)

    def test_eth0_address_route_resolv_conf_no_ipv6(self):
        sb = self.create()
        net = sb["network"]
        self.assertEqual(sb["egressMode"], "dns+nft")
        self.assertEqual(net["gateway"], self.lab.gateway)
        self.assertTrue(net["address"].startswith(self.lab.gateway.rsplit(".", 1)[0] + "."), net)
        run = lambda cmd: self.client.run(sb["id"], cmd).stdout  # noqa: E731
        self.assertRegex(run("cat /proc/net/route"), r"eth0\t00000000\t")  # default route
        self.assertEqual(run("cat /etc/resolv.conf").splitlines()[0],
                         "nameserver %s" % self.lab.gateway)
        # IPv6 is off: no address on eth0 (lo keeps ::1)
        v6 = [ln.split()[-1] for ln in run("cat /proc/net/if_inet6").splitlines()]
        self.assertNotIn("eth0", v6)
        self.assertEqual(sorted(run("ls /sys/class/net").split()), ["eth0", "lo"])
        addr = self.client.run(sb["id"], "python3 -c \"import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.connect(('%s', 9)); print(s.getsockname()[0])\"" % self.lab.web1).stdout.strip()
        self.assertEqual(addr, net["address"])
        # GET and the record agree with the create reply
        got = self.client.get_sandbox(sb["id"]).json()
        self.assertEqual((got["network"], got["egressMode"]), (net, "dns+nft"))

    def test_network_none_is_loopback_only(self):
        sb = self.create(extensions={"network": "none"})
        self.assertNotIn("network", sb)
        self.assertNotIn("egressMode", sb)
        out = self.client.run(sb["id"], "ls /sys/class/net").stdout.split()
        self.assertEqual(out, ["lo"])
        self.assertTrue(self.fetch(sb["id"], self.lab.web1).startswith("FAIL"))

    def test_bad_network_extension_is_422(self):
        r = self.client.create_sandbox_raw(extensions={"network": "host"})
        self.assertEqual(r.status, 422, r)
        self.assertIn("extensions.network", r.json()["message"])

    def test_stats_count_dropped_packets(self):
        sb = self.create()
        sid = sb["id"]
        st0 = self.client.get("/v1/sandboxes/%s/stats" % sid).json()["network"]
        self.assertEqual(st0["droppedPackets"], 0)
        self.assertEqual(st0["egressMode"], "dns+nft")
        self.assertTrue(self.fetch(sid, self.lab.metadata, 80).startswith("FAIL"))
        st1 = self.client.get("/v1/sandboxes/%s/stats" % sid).json()["network"]
        self.assertGreater(st1["droppedPackets"], 0)

    def test_delete_leaves_nothing(self):
        sb = self.create()
        sid = sb["id"]
        cid = sid.replace("-", "_")
        self.assertIn("sb_" + cid, nft_table(self.corrald.net_name))
        links = subprocess.run(["ip", "-o", "-d", "link"], capture_output=True, text=True).stdout
        self.assertIn("corral:%s:%s" % (self.corrald.net_name, sid), links)
        self.assertEqual(self.client.delete_sandbox(sid).status, 204)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if "sb_" + cid not in nft_table(self.corrald.net_name):
                break
            time.sleep(0.1)
        table = nft_table(self.corrald.net_name)
        self.assertNotIn(cid, table)
        self.assertNotIn(sb["network"]["address"] + " ", table)
        links = subprocess.run(["ip", "-o", "-d", "link"], capture_output=True, text=True).stdout
        self.assertNotIn(sid, links)
        bridge = subprocess.run(["nft", "list", "table", "bridge", self.corrald.net_name],
                                capture_output=True, text=True).stdout
        self.assertNotIn(sb["network"]["address"], bridge)

    def test_addresses_are_distinct(self):
        a = self.create()["network"]["address"]
        b = self.create()["network"]["address"]
        self.assertNotEqual(a, b)

    def test_concurrent_creates_each_get_a_working_network(self):
        # 16 creates at once: distinct addresses, each attached (its eth0 reaches the lab)
        results = [None] * 16

        def one(i):
            c = self.corrald.client(timeout=60)
            try:
                r = c.create_sandbox_raw(resourceRequests={"cpu": "10m", "memory": "16Mi"})
                results[i] = r.json() if r.status == 202 else r
            finally:
                c.close()
        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(results))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        sbs = [r for r in results if isinstance(r, dict)]
        for sb in sbs:
            self.addCleanup(self._cleanup_sandbox, sb["id"])
        self.assertEqual(len(sbs), len(results), [r for r in results if not isinstance(r, dict)])
        addrs = [sb["network"]["address"] for sb in sbs]
        self.assertEqual(len(set(addrs)), len(addrs), addrs)
        for sb in sbs:
            self.assertEqual(self.fetch(sb["id"], self.lab.web1), self.lab.web1, sb["id"])


class TestDefaultDenyNft(NetworkCase):
    """--egress-default deny in dns+nft: a sandbox without a policy reaches nothing by IP."""

    corrald_args = ["--egress-default", "deny"]

    def test_ip_literal_dropped(self):
        sb = self.create()
        self.assertTrue(self.fetch(sb["id"], self.lab.web1).startswith("FAIL"))
        # the lab host is up (the block is corral's)
        self.assertTrue(self.lab.host_can_reach(self.lab.web1, LAB_HTTP_PORT))


class TestDefaultDenyDnsMode(NetworkCase):
    """--egress-mode dns: nftables enforces only the always-blocked, so an IP literal gets
    through a deny default (documented: the policy filters names only in this mode)."""

    corrald_args = ["--egress-mode", "dns", "--egress-default", "deny"]

    def test_ip_literal_passes_in_dns_mode(self):
        sb = self.create()
        self.assertEqual(sb["egressMode"], "dns")
        self.assertEqual(self.fetch(sb["id"], self.lab.web1), self.lab.web1)
        # the always-blocked stay blocked in this mode too
        self.assertTrue(self.fetch(sb["id"], self.lab.metadata, 80).startswith("FAIL"))


class TestRestart(NetworkCase):
    def test_kill9_restart_keeps_address_connectivity_and_rules(self):
        sb = self.create()
        sid, addr = sb["id"], sb["network"]["address"]
        deny = self.create()  # a second sandbox, default allow: its chain must survive as is
        chain_before = subprocess.run(
            ["nft", "list", "chain", "inet", self.corrald.net_name,
             "sb_" + deny["id"].replace("-", "_")], capture_output=True, text=True).stdout
        self.assertIn("accept", chain_before)
        # a long-lived connection across the restart: a learned-address-free TCP stream
        self.assertEqual(self.fetch(sid, self.lab.web1), self.lab.web1)
        self.corrald.kill9()
        self.corrald.start()
        self.client.close()
        self.assertEqual(self.client.get_sandbox(sid).json()["network"]["address"], addr)
        self.assertEqual(self.fetch(sid, self.lab.web1), self.lab.web1)
        chain_after = subprocess.run(
            ["nft", "list", "chain", "inet", self.corrald.net_name,
             "sb_" + deny["id"].replace("-", "_")], capture_output=True, text=True).stdout
        self.assertEqual(chain_before, chain_after)
        # a new sandbox after the restart gets another address
        self.assertNotIn(self.create()["network"]["address"], (addr, deny["network"]["address"]))

    def test_clean_stop_removes_lock_file_and_deleted_sandboxes_objects(self):
        lock = "/run/corral/%s.lock" % self.corrald.net_name
        self.assertTrue(os.path.exists(lock))
        sb = self.create()
        cid = sb["id"].replace("-", "_")
        keep = self.create()
        self.assertEqual(self.client.delete_sandbox(sb["id"]).status, 204)
        # stopped right after the delete: its nftables objects (removed in batches) go before
        # corrald exits, the lock file too; the bridge, tables and live sandboxes stay
        self.assertEqual(self.corrald.stop(), 0)
        self.assertFalse(os.path.exists(lock))
        table = nft_table(self.corrald.net_name)
        self.assertNotIn(cid, table)
        self.assertIn("sb_" + keep["id"].replace("-", "_"), table)
        self.corrald.start()
        self.client.close()
        self.assertTrue(os.path.exists(lock))
        self.assertEqual(self.fetch(keep["id"], self.lab.web1), self.lab.web1)

    def test_restart_names_a_sandbox_whose_nftables_objects_were_deleted(self):
        # Someone deletes a live sandbox's chain, set and counter while corrald is down: the
        # sandbox silently loses its network, so the restart must say so, naming it.
        sb, ok = self.create(), self.create()
        cid, addr, name = sb["id"].replace("-", "_"), sb["network"]["address"], self.corrald.net_name
        self.corrald.kill9()
        script = ("delete element inet {n} src4 {{ {a} }}\ndelete element inet {n} drops {{ {a} }}\n"
                  "delete chain inet {n} sb_{c}\ndelete set inet {n} l_{c}\n"
                  "delete counter inet {n} d_{c}\n").format(n=name, a=addr, c=cid)
        subprocess.run(["nft", "-f", "-"], input=script, text=True, check=True)
        self.corrald.start()
        self.client.close()
        with open(self.corrald.log_path) as f:
            log = f.read().split("=== start")[-1]
        self.assertRegex(log, r"error: sandbox %s: its nftables chain or counter .* is gone"
                         % sb["id"])
        self.assertNotIn("sandbox %s: its nftables" % ok["id"], log)
        self.assertEqual(self.fetch(ok["id"], self.lab.web1), self.lab.web1)
        # and it is cut off: outside its policy's chain its port would skip the bridge's
        # anti-spoofing (a neighbour's address toward the resolver)
        veth = "cr" + sb["id"].replace("-", "")[:13]
        self.assertNotIn(veth, subprocess.run(["ip", "-o", "link"], capture_output=True,
                                              text=True).stdout)
        self.assertNotIn("eth0", self.sh(sb["id"], "ls /sys/class/net").split())

    def test_restart_removes_leftovers_of_unknown_sandboxes(self):
        # What a sandbox deleted while corrald was down would leave: a veth and nft objects.
        ghost = "0badc0de-0000-4000-8000-%012x" % random.randrange(1 << 48)
        gid = ghost.replace("-", "_")
        veth = "crg%s" % secrets.token_hex(4)  # runs side by side must not share it
        name = self.corrald.net_name
        self.corrald.kill9()
        subprocess.run(["ip", "link", "add", veth, "type", "veth", "peer", "name",
                        veth + "p"], check=True)
        subprocess.run(["ip", "link", "set", veth, "alias",
                        "corral:%s:%s" % (name, ghost)], check=True)
        script = ("add chain inet {n} sb_{g}\nadd set inet {n} l_{g} {{ type ipv4_addr; flags timeout; }}\n"
                  "add counter inet {n} d_{g}\n").format(n=name, g=gid)
        subprocess.run(["nft", "-f", "-"], input=script, text=True, check=True)
        try:
            self.corrald.start()
            self.client.close()
            self.assertNotIn(gid, nft_table(name))
            links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
            self.assertNotIn(veth, links)
        finally:
            subprocess.run(["ip", "link", "del", veth], stderr=subprocess.DEVNULL)


class TestLabCleanup(unittest.TestCase):
    def test_lab_and_harness_leave_no_network_behind(self):
        # A test's corrald uses its lab's own name, never the default; once both are gone the
        # host has no bridge, nftables table or lock file of that name left.
        lab = NetLab()
        d = Corrald(network=lab)
        try:
            d.start()
            self.assertIn("--network-name", d.argv(d.port))
            self.assertEqual(d.net_name, lab.bridge)
            c = d.client()
            sid = c.create_sandbox_raw(resourceLimits={"cpu": "1", "memory": "128Mi"}).json()["id"]
            self.assertEqual(c.run(sid, "true").exit_code, 0)
            self.assertTrue(os.path.exists("/run/corral/%s.lock" % lab.bridge))
            self.assertIn("sb_", nft_table(lab.bridge))
            self.assertEqual(c.delete_sandbox(sid).status, 204)
            deadline = time.monotonic() + 30
            while c.get_sandbox(sid).status != 404 and time.monotonic() < deadline:
                time.sleep(0.1)
            c.close()
        finally:
            try:
                d.shutdown_and_check()
            finally:
                lab.close()
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
        self.assertNotIn(" %s:" % lab.bridge, links)
        for family in ("inet", "bridge"):
            r = subprocess.run(["nft", "list", "table", family, lab.bridge], capture_output=True)
            self.assertNotEqual(r.returncode, 0, "table %s %s left" % (family, lab.bridge))
        self.assertFalse(os.path.exists("/run/corral/%s.lock" % lab.bridge))
        # a corrald without a lab gets a unique name too
        other = Corrald()
        try:
            a = other.argv(1)
            self.assertNotEqual(a[a.index("--network-name") + 1], "corral")
        finally:
            shutil.rmtree(other.tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main(verbosity=2)  # netlab closes the labs at exit
