#!/usr/bin/env python3
"""
Sandbox networking's cost (docs/network.md), as ratios against anchors measured in the same run:

  create -> first command    a sandbox with a network (the default policy), and one with a
                             networkPolicy of 10 rules (names, wildcards, CIDRs), vs
                             extensions.network "none", on the same corrald, interleaved in
                             rounds of 5 (target: <= 1.3x)
  TCP connect                from a sandbox to a lab host through the host's rules (dns+nft with
                             the default allow: learned-set lookup, then accept; and dns mode)
                             vs the same connect from the host itself (no bridge, no NAT, no rules)

The "internet" is tests/integration/netlab.py's lab namespace: nothing leaves the machine.
Needs root. No pass/fail: it prints numbers.

    sudo python3 bench/network.py [--n 50] [--connects 300] [--json FILE] [--baseline BUILD_DIR]
    sudo python3 bench/network.py --restart 40 [--baseline BUILD_DIR]

--restart N measures corrald's start (kill -9, then start until /health answers) over N sandboxes
without rules and with the largest policy (1024 address rules) each, as a ratio of the two.

With --baseline, the create rows are measured on a corrald of another build too (its own lab),
interleaved round by round with this build's, so machine noise hits both alike.
"""
import argparse
import json
import os
import socket
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "integration"))
import harness  # noqa: E402
from netlab import NetLab  # noqa: E402

SPEC = {"resourceLimits": {"cpu": "1", "memory": "256Mi"}}
# A sealed task's policy: deny by default, its services by name, wildcard and network.
POLICY = {"defaultAction": "deny", "egress": [
    {"action": "allow", "target": "pypi.test"},
    {"action": "allow", "target": "files.pypi.test"},
    {"action": "allow", "target": "*.model.test"},
    {"action": "deny", "target": "evil.model.test"},
    {"action": "allow", "target": "*.index.test"},
    {"action": "allow", "target": "192.0.2.10"},
    {"action": "allow", "target": "198.18.0.0/24"},
    {"action": "deny", "target": "198.18.1.0/24"},
    {"action": "allow", "target": "198.19.128.0/17"},
    {"action": "allow", "target": "203.0.113.0/25"}]}
SINK_PORT = 9000  # a lab listener that accepts, writes a line and closes (netlab.listen_tcp)

# Prints the mean seconds per TCP connect+close to ADDR:PORT over N tries, from where it runs.
CONNECT_LOOP = r'''
import socket, sys, time
addr, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for _ in range(10):
    socket.create_connection((addr, port), timeout=3).close()
t = time.perf_counter()
for _ in range(n):
    socket.create_connection((addr, port), timeout=3).close()
print((time.perf_counter() - t) / n)
'''


class BuildCorrald(harness.Corrald):
    """A corrald of another build (its corral-execd beside it)."""

    def __init__(self, build_dir, **kw):
        super().__init__(**kw)
        self.build_dir = build_dir

    def argv(self, port):
        a = super().argv(port)
        a[0] = os.path.join(self.build_dir, "corrald")
        return a


def create_first_command(c, **extra):
    spec = dict(SPEC)
    spec.update(extra)
    t0 = time.perf_counter()
    r = c.create_sandbox_raw(**spec)
    if r.status != 202:
        raise RuntimeError("create failed: %r" % r)
    sid = r.json()["id"]
    res = c.run(sid, "true")
    dt = time.perf_counter() - t0
    if res.exit_code != 0:
        raise RuntimeError("first command failed: %r" % res)
    c.delete_sandbox(sid)
    return dt


def connect_in_sandbox(c, lab, n):
    r = c.create_sandbox_raw(**SPEC)
    if r.status != 202:
        raise RuntimeError("create failed: %r" % r)
    sid = r.json()["id"]
    try:
        code = CONNECT_LOOP.replace("'", "'\\''")
        res = c.run(sid, "python3 -c '%s' %s %d %d" % (code, lab.web1, SINK_PORT, n))
        return float(res.stdout.strip())
    finally:
        c.delete_sandbox(sid)


def connect_on_host(lab, n):
    for _ in range(10):
        socket.create_connection((lab.web1, SINK_PORT), timeout=3).close()
    t = time.perf_counter()
    for _ in range(n):
        socket.create_connection((lab.web1, SINK_PORT), timeout=3).close()
    return (time.perf_counter() - t) / n


def p50(v):
    return statistics.median(v)


def largest_policy():
    """EGRESS_RULES_MAX (1024) address rules, none of them ever contacted."""
    return {"defaultAction": "deny", "egress": [
        {"action": "deny" if i % 2 else "allow", "target": "10.%d.%d.0/24" % (i // 256, i % 256)}
        for i in range(1024)]}


def restart_seconds(d):
    """kill -9, then start until /health answers: corrald's start with its sandboxes."""
    d.kill9()
    t0 = time.perf_counter()
    d.start()
    return time.perf_counter() - t0


def restart_rows(d, n, rounds, prefix, out):
    """n sandboxes on d: restarts with the default policy, then with the largest policy each."""
    c = d.client()
    sids = []
    for _ in range(n):
        r = c.create_sandbox_raw(resourceLimits={"cpu": "100m", "memory": "64Mi", "pids": "64"},
                                 resourceRequests={"cpu": "10m", "memory": "16Mi"})
        if r.status != 202:
            raise RuntimeError("create failed: %r" % r)
        sids.append(r.json()["id"])
    c.close()
    for _ in range(rounds):
        out[prefix + "restart_plain"].append(restart_seconds(d))
    c = d.client()
    for sid in sids:
        hdrs = c.get("/v1/sandboxes/%s/endpoints/18080" % sid).json()["headers"]
        r = c.request("PUT", "/sandboxes/%s/proxy/18080/policy" % sid, body=largest_policy(),
                      headers=hdrs)
        if r.status != 200:
            raise RuntimeError("policy failed: %r" % r)
    c.close()
    for _ in range(rounds):
        out[prefix + "restart_policy"].append(restart_seconds(d))
    c = d.client()
    for sid in sids:
        c.delete_sandbox(sid)
    c.close()


def restart_main(args):
    """--restart N: corrald's start over N sandboxes without rules and with 1024 each."""
    out = {"restart_plain": [], "restart_policy": [], "base_restart_plain": [],
           "base_restart_policy": []}
    labs, ds, notes = [NetLab()], [], []
    try:
        ds.append(("", harness.Corrald(network=labs[0])))
        if args.baseline:
            labs.append(NetLab())
            ds.append(("base_", BuildCorrald(args.baseline, network=labs[1])))
        for prefix, d in ds:
            d.start()
            restart_rows(d, args.restart, 3, prefix, out)
    finally:
        for _, d in ds:
            try:
                d.shutdown_and_check()
            except AssertionError as e:
                notes.append(str(e))
        for lb in labs:
            lb.close()
    print("%-55s %12s %8s" % ("row", "p50", "ratio"))
    for prefix, name in [("", "this build"), ("base_", "baseline")][:len(ds)]:
        plain = p50(out[prefix + "restart_plain"])
        pol = p50(out[prefix + "restart_policy"])
        print("%-55s %9.3f ms %7.2fx" % ("%s: restart, %d sandboxes, no rules" % (name, args.restart),
                                        plain * 1000, 1.0))
        print("%-55s %9.3f ms %7.2fx" % ("%s: restart, %d sandboxes x 1024 rules"
                                        % (name, args.restart), pol * 1000, pol / plain))
    for n in notes:
        print("note:", n)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, default=50, help="creates per variant")
    ap.add_argument("--connects", type=int, default=300, help="TCP connects per measurement")
    ap.add_argument("--json", help="write the raw samples (seconds) here")
    ap.add_argument("--baseline", metavar="BUILD_DIR",
                    help="measure the create rows on this build's corrald too, interleaved")
    ap.add_argument("--restart", type=int, metavar="N",
                    help="only corrald's start (kill -9, then start) over N sandboxes without "
                         "rules and with the largest policy (1024 address rules) each")
    args = ap.parse_args()
    if args.restart:
        return restart_main(args)

    lab = NetLab()
    lab2 = NetLab()
    lab.listen_tcp(lab.web1, SINK_PORT)
    lab2.listen_tcp(lab2.web1, SINK_PORT)
    nft = harness.Corrald(network=lab)
    dns = harness.Corrald(network=lab2, extra_args=["--egress-mode", "dns"])
    lab3 = base = None
    if args.baseline:
        lab3 = NetLab()
        base = BuildCorrald(args.baseline, network=lab3)
    out = {"create_net": [], "create_none": [], "create_policy": [], "connect_nft": [],
           "connect_dns": [], "connect_host": [], "base_create_net": [], "base_create_none": [],
           "base_create_policy": []}
    notes = []
    try:
        nft.start()
        dns.start()
        c = nft.client()
        cd = dns.client()
        variants = [("", c)]
        if base:
            base.start()
            variants.append(("base_", base.client()))
        for _, cl in variants:
            for _ in range(3):  # warm-up
                create_first_command(cl)
                create_first_command(cl, extensions={"network": "none"})
        for i in range(max(1, args.n // 5)):
            for prefix, cl in (variants if i % 2 == 0 else variants[::-1]):
                for _ in range(5):
                    out[prefix + "create_net"].append(create_first_command(cl))
                for _ in range(5):
                    out[prefix + "create_policy"].append(
                        create_first_command(cl, networkPolicy=POLICY))
                for _ in range(5):
                    out[prefix + "create_none"].append(
                        create_first_command(cl, extensions={"network": "none"}))
        for _, cl in variants[1:]:
            cl.close()
        for _ in range(3):
            out["connect_host"].append(connect_on_host(lab, args.connects))
            out["connect_nft"].append(connect_in_sandbox(c, lab, args.connects))
            out["connect_dns"].append(connect_in_sandbox(cd, lab2, args.connects))
        c.close()
        cd.close()
    finally:
        for d in (nft, dns, base):
            if d is None:
                continue
            try:
                d.shutdown_and_check()
            except AssertionError as e:
                notes.append(str(e))
        for lb in (lab, lab2, lab3):
            if lb is not None:
                lb.close()

    none = p50(out["create_none"])
    host = p50(out["connect_host"])
    rows = [
        ("create -> first command, network: none", p50(out["create_none"]), 1.0),
        ("create -> first command, with a network", p50(out["create_net"]),
         p50(out["create_net"]) / none),
        ("create -> first command, network + policy", p50(out["create_policy"]),
         p50(out["create_policy"]) / none),
    ]
    if base:
        bnone = p50(out["base_create_none"])
        rows += [
            ("baseline: create -> first command, none", bnone, 1.0),
            ("baseline: create -> first command, network", p50(out["base_create_net"]),
             p50(out["base_create_net"]) / bnone),
            ("baseline: create -> first command, policy", p50(out["base_create_policy"]),
             p50(out["base_create_policy"]) / bnone),
        ]
    rows += [
        ("TCP connect from the host (anchor)", host, 1.0),
        ("TCP connect from a sandbox, dns+nft", p50(out["connect_nft"]),
         p50(out["connect_nft"]) / host),
        ("TCP connect from a sandbox, dns", p50(out["connect_dns"]),
         p50(out["connect_dns"]) / host),
    ]
    print("%-45s %12s %8s" % ("row", "p50", "ratio"))
    for name, v, ratio in rows:
        print("%-45s %9.3f ms %7.2fx" % (name, v * 1000, ratio))
    print("create samples: %d per variant (interleaved in rounds of 5); connects: 3 x %d each"
          % (len(out["create_net"]), args.connects))
    for n in notes:
        print("note:", n)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
