"""
Egress policies end to end (docs/network.md): a real corrald whose sandboxes have a network, a
private "internet" (netlab.py: a network namespace of this test with dnsmasq serving only test
names, and HTTP servers on addresses that exist only there), and the policy API on port 18080.

Every address a sandbox is asked to reach is one of the lab's (198.18.0.0/15): nothing here sends
a packet toward any address outside this machine.
"""
import concurrent.futures
import json
import os
import subprocess
import threading
import time

from harness import CorralTestCase, binary, log, main
from netlab import DNS_PROBE, LabCase

SMALL = {"cpu": "100m", "memory": "64Mi", "pids": "64"}


class EgressCase(LabCase, CorralTestCase):
    """A lab and a corrald pointed at it. mode/default: --egress-mode/--egress-default."""

    mode = "dns+nft"
    default = None
    extra = []

    @classmethod
    def lab_corrald_kwargs(cls):
        return {"extra_args": cls.lab.corrald_args(cls.mode, cls.default) + cls.extra}

    # --- helpers -----------------------------------------------------------------------------

    def sandbox(self, policy=None, client=None, **spec):
        spec.setdefault("resourceLimits", SMALL)
        spec.setdefault("resourceRequests", {"cpu": "10m", "memory": "16Mi"})
        if policy is not None:
            spec["networkPolicy"] = policy
        return self.create(client=client, **spec)["id"]

    def resolve(self, sid, name, tcp=False, server=None):
        """The A records the sandbox gets for name from its resolver (or server), "NXDOMAIN",
        "RCODE n" or "TIMEOUT"."""
        srv = server or "$(awk '/^nameserver/ {print $2; exit}' /etc/resolv.conf)"
        cmd = "/usr/bin/python3 -c '%s' %s %s %s" % (DNS_PROBE.replace("'", "'\\''"), srv, name,
                                                     "tcp" if tcp else "")
        out = self.sh(sid, cmd).split()
        return out[0] if len(out) == 1 and not out[0][0].isdigit() else out

    def fetch(self, sid, host, port=80, timeout=3):
        """GET http://host:port/ from the sandbox: the body, or None when it cannot connect."""
        res = self.client.run(sid, "curl -s --max-time %d http://%s:%d/" % (timeout, host, port))
        self.assertEqual(res.http_status, 200, res)
        return res.stdout.strip() if res.exit_code == 0 else None

    def egress(self, sid, method, body=None, token=True, path="/policy", raw=None):
        """A call to the sandbox's policy API, with the headers its endpoint reply names."""
        ep = self.client.get("/v1/sandboxes/%s/endpoints/18080" % sid)
        self.assertEqual(ep.status, 200, ep)
        headers = dict(ep.json().get("headers") or {})
        if not token:
            headers.pop("OPENSANDBOX-EGRESS-AUTH", None)
        elif token is not True:
            headers["OPENSANDBOX-EGRESS-AUTH"] = token
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        return self.client.request(method, "/sandboxes/%s/proxy/18080%s" % (sid, path),
                                   raw=data, headers=headers)

    def policy_of(self, sid):
        r = self.egress(sid, "GET")
        self.assertEqual(r.status, 200, r)
        return r.json()

    def assert_reaches(self, sid, name):
        addrs = self.resolve(sid, name)
        self.assertEqual(addrs, [self.lab.addr[name]], "%s should resolve" % name)
        body = self.fetch(sid, addrs[0])
        self.assertEqual(body, "hello from %s" % addrs[0], "%s should answer" % name)

    def assert_denied_name(self, sid, name):
        self.assertEqual(self.resolve(sid, name), "NXDOMAIN", "%s should be denied" % name)


class TestEgressNftMode(EgressCase):
    mode = "dns+nft"

    def test_no_policy_reaches_both_hosts(self):
        sid = self.sandbox()
        j = self.client.get_sandbox(sid).json()
        # the server default (allow, as in the reference) and the mode are in the reply
        self.assertEqual(j["networkPolicy"], {"defaultAction": "allow", "egress": []})
        self.assertEqual(j["egressMode"], "dns+nft")
        # corral inspect shows them
        out = subprocess.run([binary("corral"), "--server", self.corrald.base_url, "inspect", sid],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(json.loads(out.stdout)["networkPolicy"], j["networkPolicy"])
        self.assertEqual(json.loads(out.stdout)["egressMode"], "dns+nft")
        self.assert_reaches(sid, "allowed.test")
        self.assert_reaches(sid, "denied.test")

    def test_deny_default_with_an_allow_rule(self):
        sid = self.sandbox({"defaultAction": "deny",
                            "egress": [{"action": "allow", "target": "allowed.test"}]})
        self.assert_reaches(sid, "allowed.test")
        self.assert_denied_name(sid, "denied.test")
        # a denied name never reaches the upstream
        self.assertNotIn("denied.test", self.lab.dns_queries())
        # dns+nft: the denied host's IP literal is dropped
        self.assertIsNone(self.fetch(sid, self.lab.addr["denied.test"]))
        # and over TCP DNS the same answers
        self.assertEqual(self.resolve(sid, "allowed.test", tcp=True), [self.lab.addr["allowed.test"]])
        self.assertEqual(self.resolve(sid, "denied.test", tcp=True), "NXDOMAIN")
        st = self.client.get("/v1/sandboxes/%s/stats" % sid).json()["network"]
        self.assertGreaterEqual(st["dnsAllowed"], 2, st)
        self.assertGreaterEqual(st["dnsDenied"], 2, st)
        self.assertGreaterEqual(st.get("droppedPackets", 1), 1, st)

    def test_omitted_default_action_is_deny(self):
        sid = self.sandbox({"egress": [{"action": "allow", "target": "allowed.test"}]})
        self.assertEqual(self.policy_of(sid)["policy"]["defaultAction"], "deny")
        self.assert_denied_name(sid, "other.test")

    def test_wildcard_matches_subdomains_not_the_apex(self):
        sid = self.sandbox({"defaultAction": "deny",
                            "egress": [{"action": "allow", "target": "*.Wild.test."}]})
        self.assertEqual(self.policy_of(sid)["policy"]["egress"],
                         [{"action": "allow", "target": "*.wild.test"}])
        self.assert_reaches(sid, "a.wild.test")
        self.assert_reaches(sid, "a.b.wild.test")
        self.assert_denied_name(sid, "wild.test")
        self.assertIsNone(self.fetch(sid, self.lab.addr["wild.test"]))
        # first match wins: a deny before the wildcard
        sid2 = self.sandbox({"defaultAction": "deny",
                             "egress": [{"action": "deny", "target": "a.wild.test"},
                                        {"action": "allow", "target": "*.wild.test"}]})
        self.assert_denied_name(sid2, "a.wild.test")
        self.assert_reaches(sid2, "a.b.wild.test")

    def test_ip_and_cidr_rules(self):
        net = self.lab.net
        sid = self.sandbox({"defaultAction": "deny", "egress": [
            {"action": "allow", "target": self.lab.addr["literal"]},
            {"action": "deny", "target": "%s.60" % net},
            {"action": "allow", "target": "%s.48/28" % net},
        ]})
        self.assertEqual(self.fetch(sid, self.lab.addr["literal"]),
                         "hello from %s" % self.lab.addr["literal"])
        # .50 is in the /28; .60 too, but the deny before it wins
        self.assertEqual(self.fetch(sid, "%s.50" % net), "hello from %s.50" % net)
        self.assertIsNone(self.fetch(sid, "%s.60" % net))
        # outside every rule: dropped
        self.assertIsNone(self.fetch(sid, self.lab.addr["other.test"]))
        # an address rule admits no name
        self.assert_denied_name(sid, "short.test")

    def test_ipv6_rules_are_refused_everywhere(self):
        # IPv6 is off in sandboxes: an IPv6 rule could never match, so create, POST, PUT and PATCH
        # all refuse it with a 400 naming the rule, and the policy stays as it was
        rules = [{"action": "allow", "target": "allowed.test"},
                 {"action": "allow", "target": "2001:db8::/32"}]
        r = self.client.create_sandbox_raw(resourceLimits=SMALL, networkPolicy={
            "defaultAction": "deny", "egress": rules})
        self.assertEqual(r.status, 400, r)
        self.assertIn("egress[1].target '2001:db8::/32' is an IPv6 address", r.json()["message"])
        sid = self.sandbox({"defaultAction": "deny", "egress": rules[:1]})
        before = self.policy_of(sid)
        for method in ("POST", "PUT"):
            r = self.egress(sid, method, {"defaultAction": "deny", "egress": rules})
            self.assertEqual(r.status, 400, r)
            self.assertIn(b"egress[1].target '2001:db8::/32' is an IPv6 address", r.body)
        r = self.egress(sid, "PATCH", [{"action": "deny", "target": "::1"}])
        self.assertEqual(r.status, 400, r)
        self.assertIn(b"egress[0].target '::1' is an IPv6 address", r.body)
        self.assertEqual(self.policy_of(sid), before)
        self.assert_reaches(sid, "allowed.test")

    def test_patch_and_delete_at_runtime(self):
        sid = self.sandbox({"defaultAction": "deny",
                            "egress": [{"action": "allow", "target": "allowed.test"}]})
        self.assert_reaches(sid, "allowed.test")
        self.assert_denied_name(sid, "patch.test")
        # a change flushes the learned addresses; asking again admits them again (corrald's memory
        # of what it admitted is flushed with them, or this answer would not be learned)
        r = self.egress(sid, "PATCH", [{"action": "deny", "target": "unrelated.test"}])
        self.assertEqual(r.status, 200, r)
        self.assertIsNone(self.fetch(sid, self.lab.addr["allowed.test"]))
        self.assert_reaches(sid, "allowed.test")
        r = self.egress(sid, "DELETE", ["unrelated.test"])
        self.assertEqual(r.status, 200, r)
        r = self.egress(sid, "PATCH", [{"action": "allow", "target": "patch.test"},
                                       {"action": "deny", "target": "allowed.test"}])
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json(), {"status": "ok", "mode": "enforcing", "enforcementMode": "dns+nft"})
        # new rules first; the replaced one gone
        self.assertEqual(self.policy_of(sid)["policy"]["egress"],
                         [{"action": "allow", "target": "patch.test"},
                          {"action": "deny", "target": "allowed.test"}])
        self.assert_reaches(sid, "patch.test")
        # at once: the name is denied and its learned address no longer admitted
        self.assert_denied_name(sid, "allowed.test")
        self.assertIsNone(self.fetch(sid, self.lab.addr["allowed.test"]))
        # DELETE by target: the rule and its learned address go
        r = self.egress(sid, "DELETE", ["PATCH.test."])
        self.assertEqual(r.status, 200, r)
        self.assertIsNone(self.fetch(sid, self.lab.addr["patch.test"]))
        self.assert_denied_name(sid, "patch.test")
        r = self.egress(sid, "DELETE", ["nothing.test"])
        self.assertEqual(r.json()["reason"], "no matching targets found")
        # the sandbox's reply shows the policy in force
        self.assertEqual(self.client.get_sandbox(sid).json()["networkPolicy"],
                         {"defaultAction": "deny",
                          "egress": [{"action": "deny", "target": "allowed.test"}]})
        # replace: POST; an empty body is deny-all
        r = self.egress(sid, "POST", {"defaultAction": "allow", "egress": []})
        self.assertEqual(r.json()["mode"], "allow_all")
        self.assert_reaches(sid, "denied.test")
        r = self.egress(sid, "PUT", raw=b"")
        self.assertEqual(r.json(), {"status": "ok", "mode": "deny_all",
                                    "reason": "policy reset to default deny-all"})
        self.assert_denied_name(sid, "denied.test")
        self.assertIsNone(self.fetch(sid, self.lab.addr["denied.test"]))

    def test_learned_addresses_expire_with_their_ttl(self):
        # short.test has a TTL of 1 s: learned for the floor of 5 s (net.h) plus the slack of
        # egress.c (2 s), then dropped again
        sid = self.sandbox({"defaultAction": "deny",
                            "egress": [{"action": "allow", "target": "short.test"}]})
        self.assert_reaches(sid, "short.test")
        time.sleep(10)
        self.assertIsNone(self.fetch(sid, self.lab.addr["short.test"], timeout=2))
        # resolving again admits it again
        self.assert_reaches(sid, "short.test")

    def test_dot_and_foreign_resolvers_are_blocked(self):
        # even with allow-all: DNS over TLS and DNS to anything but corral's resolver
        sid = self.sandbox({"defaultAction": "allow", "egress": []})
        self.assertEqual(self.fetch(sid, self.lab.addr["dot"]),
                         "hello from %s" % self.lab.addr["dot"])
        self.assertIsNone(self.fetch(sid, self.lab.addr["dot"], port=853))
        before = len(self.lab.dns_queries())
        for server in (self.lab.addr["resolver2"], self.lab.ns_ip):
            self.assertEqual(self.resolve(sid, "other.test", server=server), "TIMEOUT")
            self.assertEqual(self.resolve(sid, "other.test", server=server, tcp=True), "TIMEOUT")
        self.assertEqual(len(self.lab.dns_queries()), before, "a foreign query reached a resolver")

    def test_resolver_answers_while_sandboxes_come_and_go(self):
        # the bridge keeps its MAC when ports come and go: a sandbox's ARP entry for the gateway
        # stays right (it took a changing one from its lowest port: seconds without DNS)
        sid = self.sandbox({"defaultAction": "deny",
                            "egress": [{"action": "allow", "target": "allowed.test"}]})
        mac = lambda: subprocess.run(["ip", "-br", "link", "show", self.lab.bridge],
                                     capture_output=True, text=True).stdout.split()[2]
        before = mac()
        stop = []

        def churn():
            c = self.corrald.client(timeout=60)
            try:
                while not stop:
                    r = c.create_sandbox_raw(resourceLimits=SMALL)
                    if r.status == 202:
                        c.delete_sandbox(r.json()["id"])
            finally:
                c.close()

        threads = [threading.Thread(target=churn) for _ in range(3)]
        for t in threads:
            t.start()
        try:
            probe = ("/usr/bin/python3 -c '%s' $(awk '/^nameserver/ {print $2; exit}' "
                     "/etc/resolv.conf) " % DNS_PROBE.replace("'", "'\\''"))
            out = self.sh(sid, "for i in $(seq 40); do %s denied.test; %s allowed.test; done"
                          % (probe, probe), read_timeout=600).split()
        finally:
            stop.append(1)
            for t in threads:
                t.join()
        self.assertEqual(mac(), before)
        self.assertEqual(out, ["NXDOMAIN", self.lab.addr["allowed.test"]] * 40)

    def test_policy_api(self):
        sid = self.sandbox({"defaultAction": "deny",
                            "egress": [{"action": "allow", "target": "allowed.test"}]})
        ep = self.client.get("/v1/sandboxes/%s/endpoints/18080" % sid).json()
        self.assertTrue(ep["endpoint"].endswith("/sandboxes/%s/proxy/18080" % sid), ep)
        self.assertEqual(len(ep["headers"]["OPENSANDBOX-EGRESS-AUTH"]), 64)
        # the execd endpoint has no egress token
        ep2 = self.client.get("/v1/sandboxes/%s/endpoints/44772" % sid).json()
        self.assertNotIn("OPENSANDBOX-EGRESS-AUTH", ep2.get("headers") or {})
        r = self.egress(sid, "GET", path="/healthz", token=False)
        self.assertEqual((r.status, r.body), (200, b"ok\n"))
        self.assertEqual(self.policy_of(sid), {
            "status": "ok", "mode": "enforcing", "enforcementMode": "dns+nft",
            "policy": {"defaultAction": "deny",
                       "egress": [{"action": "allow", "target": "allowed.test"}]}})
        # no token, a wrong one, another sandbox's
        other = self.sandbox()
        other_tok = self.client.get("/v1/sandboxes/%s/endpoints/18080" % other).json()[
            "headers"]["OPENSANDBOX-EGRESS-AUTH"]
        for tok in (False, "0" * 64, other_tok):
            r = self.egress(sid, "POST", {"defaultAction": "allow"}, token=tok)
            self.assertEqual((r.status, r.body), (401, b"unauthorized\n"))
        self.assertEqual(self.policy_of(sid)["mode"], "enforcing")
        # the reference's errors, as plain text
        r = self.egress(sid, "POST", {"egress": [{"action": "allow", "target": "a..b"}]})
        self.assertEqual(r.status, 400)
        self.assertIn(b"invalid policy: egress[0].target 'a..b'", r.body)
        r = self.egress(sid, "POST", raw=b"{not json")
        self.assertEqual(r.status, 400)
        r = self.egress(sid, "PATCH", [])
        self.assertEqual((r.status, r.body), (400, b"invalid patch rules: empty array\n"))
        r = self.egress(sid, "PATCH", raw=b"")
        self.assertEqual((r.status, r.body), (400, b"empty body\n"))
        r = self.egress(sid, "DELETE", [])
        self.assertEqual((r.status, r.body), (400, b"invalid delete targets: empty array\n"))
        r = self.egress(sid, "DELETE", [1])
        self.assertEqual(r.status, 400)
        r = self.egress(sid, "OPTIONS")
        self.assertEqual(r.status, 405)
        self.assertEqual(r.header("Allow"), "GET, POST, PUT, PATCH, DELETE")
        r = self.egress(sid, "GET", path="/nothing")
        self.assertEqual(r.status, 404)
        too_many = [{"action": "allow", "target": "h%d.test" % i} for i in range(1025)]
        r = self.egress(sid, "POST", {"egress": too_many})
        self.assertEqual(r.status, 400)
        self.assertIn(b"at most 1024", r.body)
        # nothing of that changed the policy
        self.assertEqual(self.policy_of(sid)["policy"]["egress"],
                         [{"action": "allow", "target": "allowed.test"}])
        # a sandbox without a network has no policy: none at create, no policy API
        r = self.client.create_sandbox_raw(resourceLimits=SMALL, extensions={"network": "none"},
                                           networkPolicy={"defaultAction": "deny"})
        self.assertEqual(r.status, 400, r)
        self.assertIn("networkPolicy", r.json()["message"])
        lo = self.sandbox(extensions={"network": "none"})
        self.assertNotIn("networkPolicy", self.client.get_sandbox(lo).json())
        r = self.egress(lo, "GET")
        self.assertEqual(r.status, 404, r)
        # a bad networkPolicy at create is a 400 naming the rule
        r = self.client.create_sandbox_raw(resourceLimits=SMALL, networkPolicy={
            "egress": [{"action": "allow", "target": "ok.test"},
                       {"action": "maybe", "target": "x.test"}]})
        self.assertEqual(r.status, 400, r)
        self.assertIn("egress[1].action 'maybe'", r.json()["message"])

    def test_restart_keeps_every_policy(self):
        sids = {
            "a": self.sandbox({"defaultAction": "deny",
                               "egress": [{"action": "allow", "target": "allowed.test"}]}),
            "b": self.sandbox({"defaultAction": "allow",
                               "egress": [{"action": "deny", "target": "allowed.test"}]}),
            "c": self.sandbox(),
        }
        self.assertEqual(self.egress(sids["c"], "PATCH",
                                     [{"action": "deny", "target": "*.wild.test"}]).status, 200)
        before = {k: self.policy_of(s) for k, s in sids.items()}
        self.assert_reaches(sids["a"], "allowed.test")
        self.corrald.kill9()
        self.corrald.start()
        self.client.close()
        self.__class__.client = self.corrald.client()
        after = {k: self.policy_of(s) for k, s in sids.items()}
        self.assertEqual(after, before)
        # a learned address survived the restart (nftables keeps it) ...
        self.assertEqual(self.fetch(sids["a"], self.lab.addr["allowed.test"]),
                         "hello from %s" % self.lab.addr["allowed.test"])
        # ... and every policy is enforced by the new corrald
        self.assert_denied_name(sids["a"], "denied.test")
        self.assertIsNone(self.fetch(sids["a"], self.lab.addr["denied.test"]))
        self.assert_denied_name(sids["b"], "allowed.test")
        self.assert_reaches(sids["b"], "denied.test")
        self.assert_denied_name(sids["c"], "a.wild.test")
        self.assert_reaches(sids["c"], "allowed.test")


class TestEgressDropLog(EgressCase):
    """--log-level debug: the packets the host drops are logged with their sandbox's id."""
    mode = "dns+nft"
    extra = ["--log-level", "debug"]

    def log_text(self):
        with open(self.corrald.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def test_dropped_connections_are_logged_with_the_sandbox_id(self):
        sid = self.sandbox({"defaultAction": "deny",
                            "egress": [{"action": "allow", "target": "allowed.test"}]})
        other = self.sandbox({"defaultAction": "allow", "egress": []})
        denied_ip = self.lab.addr["denied.test"]
        self.assertIsNone(self.fetch(sid, denied_ip, timeout=2))  # an IP literal, not allowed
        gw = self.sh(sid, "awk '/^nameserver/ {print $2; exit}' /etc/resolv.conf").strip()
        self.sh(sid, "timeout 2 bash -c 'echo > /dev/tcp/%s/22' 2>/dev/null; true" % gw)
        want = ["sandbox %s: TCP packet to %s:80 dropped by the host" % (sid, denied_ip),
                "sandbox %s: TCP packet to %s:22 dropped by the host" % (sid, gw)]
        self.wait_until(lambda: all(w in self.log_text() for w in want), 10,
                        msg="the drops in corrald's log: %s" % want)
        self.assertIn("dropped packets are logged (NFLOG group", self.log_text())
        # what the neighbour reaches is not logged as dropped
        self.assertEqual(self.fetch(other, denied_ip), "hello from %s" % denied_ip)
        self.assertNotIn("sandbox %s: TCP packet" % other, self.log_text())
        self.assertNotIn("will not be logged", self.log_text())


class TestEgressManySandboxes(EgressCase):
    """As many sandboxes as the host's pid table allows (up to 200), created at once, each with a
    policy of its own, each enforced."""

    N = 200

    def test_distinct_policies_created_concurrently(self):
        with open("/proc/sys/kernel/pid_max") as f:
            pid_max = int(f.read())
        # each holds a pids limit of 64; leave the host 4000 for everything else
        n = min(self.N, max(10, (pid_max - 4000) // 64))
        names = ["allowed.test", "denied.test", "a.wild.test", "other.test", "patch.test"]

        def policy(i):
            # sandbox i allows one lab name and a name of its own, denies the rest
            return {"defaultAction": "deny",
                    "egress": [{"action": "allow", "target": names[i % len(names)]},
                               {"action": "allow", "target": "only-%d.test" % i}]}

        def make(i):
            c = self.corrald.client(timeout=300)
            try:
                r = c.create_sandbox_raw(resourceLimits=SMALL,
                                         resourceRequests={"cpu": "1m", "memory": "1Mi"},
                                         networkPolicy=policy(i))
                return i, r
            finally:
                c.close()

        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(32) as ex:
            results = list(ex.map(make, range(n)))
        ids = {}
        for i, r in results:
            if r.status == 202:
                ids[i] = r.json()["id"]
                self.addCleanup(self._cleanup_sandbox, ids[i])
        log("%d sandboxes with distinct policies created in %.1fs" % (len(ids), time.monotonic() - t0))
        self.assertEqual(len(ids), n, [r for _, r in results if r.status != 202][:3])

        def check(i):
            sid = ids[i]
            c = self.corrald.client(timeout=60)
            try:
                mine = names[i % len(names)]
                theirs = names[(i + 1) % len(names)]
                probe = ("/usr/bin/python3 -c '%s' $(awk '/^nameserver/ {print $2; exit}' "
                         "/etc/resolv.conf) " % DNS_PROBE.replace("'", "'\\''"))
                res = c.run(sid, probe + mine + "; " + probe + theirs)
                out = res.stdout.split()
                return i, out, c.get("/v1/sandboxes/%s" % sid).json()["networkPolicy"]
            finally:
                c.close()

        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            for i, out, pol in ex.map(check, sorted(ids)):
                self.assertEqual(pol, policy(i), "sandbox %d" % i)
                self.assertEqual(out, [self.lab.addr[names[i % len(names)]], "NXDOMAIN"],
                                 "sandbox %d" % i)


class TestEgressDnsMode(EgressCase):
    """dns mode: names are filtered, addresses are not (documented: an IP literal bypasses it)."""

    mode = "dns"
    default = "deny"

    def test_dns_mode_filters_names_not_addresses(self):
        sid = self.sandbox({"defaultAction": "deny",
                            "egress": [{"action": "allow", "target": "allowed.test"}]})
        self.assertEqual(self.client.get_sandbox(sid).json()["egressMode"], "dns")
        self.assertEqual(self.policy_of(sid)["enforcementMode"], "dns")
        self.assert_reaches(sid, "allowed.test")
        self.assert_denied_name(sid, "denied.test")
        # the documented difference: the denied host's IP literal is reachable in dns mode
        self.assertEqual(self.fetch(sid, self.lab.addr["denied.test"]),
                         "hello from %s" % self.lab.addr["denied.test"])
        # DoT and foreign resolvers stay blocked in every mode
        self.assertIsNone(self.fetch(sid, self.lab.addr["dot"], port=853))
        self.assertEqual(self.resolve(sid, "other.test", server=self.lab.ns_ip), "TIMEOUT")

    def test_server_default_deny(self):
        # --egress-default deny: a sandbox without networkPolicy resolves nothing
        sid = self.sandbox()
        self.assertEqual(self.client.get_sandbox(sid).json()["networkPolicy"],
                         {"defaultAction": "deny", "egress": []})
        self.assert_denied_name(sid, "allowed.test")


if __name__ == "__main__":
    main()
