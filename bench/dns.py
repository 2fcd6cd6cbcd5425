#!/usr/bin/env python3
"""
DNS answer latency through corral's resolver vs a direct query to the test DNS server, in one run.

A private "internet" (tests/integration/netlab.py: a network namespace with dnsmasq serving test
names) and a corrald pointed at it (--egress-uplink, --dns-upstream). Timed, each N sequential
UDP queries with one socket, from a Python client (the same code everywhere):

  direct         the host asks dnsmasq across the lab's veth (the anchor: one veth hop each way)
  corral allow   a sandbox asks corral's resolver (the bridge gateway) for an allowed name:
                 judged, forwarded to dnsmasq from a fresh socket, answer checked, in dns+nft its
                 address learned into the sandbox's nftables set (one libnftables transaction),
                 relayed
  corral deny    the same for a denied name: NXDOMAIN from corrald, nothing forwarded

for --egress-mode dns+nft and dns. Prints p50/p95 and the ratio to the direct p50. Then, in
dns+nft, the longest gap between answers a sandbox sees while corrald is killed (-9) and started
again (a query every 5 ms, each waiting 50 ms). No pass/fail.

    sudo python3 bench/dns.py [--n 500]
"""
import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "integration"))

import harness  # noqa: E402
from netlab import NetLab  # noqa: E402

CLIENT = r"""
import json, socket, struct, sys, time
server, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(3)
s.connect((server, 53))
def query(i):
    q = struct.pack(">HHHHHH", i & 0xffff, 0x0100, 1, 0, 0, 0)
    for l in name.split("."):
        q += bytes([len(l)]) + l.encode()
    return q + b"\0" + struct.pack(">HH", 1, 1)
out = []
for i in range(n + 20):
    q = query(i)
    t = time.perf_counter()
    s.send(q)
    while True:
        a = s.recv(4096)
        if a[:2] == q[:2]:
            break
    if i >= 20:
        out.append(time.perf_counter() - t)
print(json.dumps(out))
"""


GAP_LOOP = r"""
import json, socket, struct, sys, time
server, name, secs = sys.argv[1], sys.argv[2], float(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(0.05)
last, gap, ok, i = None, 0.0, 0, 0
end = time.monotonic() + secs
while time.monotonic() < end:
    i += 1
    q = struct.pack(">HHHHHH", i & 0xffff, 0x0100, 1, 0, 0, 0)
    for l in name.split("."):
        q += bytes([len(l)]) + l.encode()
    q += b"\0" + struct.pack(">HH", 1, 1)
    try:
        s.sendto(q, (server, 53))
        while True:
            a, _ = s.recvfrom(4096)
            if a[:2] == q[:2]:
                break
        now = time.monotonic()
        if last is not None:
            gap = max(gap, now - last)
        last, ok = now, ok + 1
    except OSError:
        pass
    time.sleep(0.005)
json.dump({"gap": gap, "ok": ok}, open("/tmp/gap.json", "w"))
"""


def restart_gap(d, sid, gw):
    """The longest time without an answer, across corrald kill -9 + start (seconds)."""
    c = d.client(timeout=60)
    c.run(sid, "nohup /usr/bin/python3 -c '%s' %s allowed.test 8 >/dev/null 2>&1 &"
          % (GAP_LOOP.replace("'", "'\\''"), gw))
    c.close()
    time.sleep(2)
    d.kill9()
    d.start()
    time.sleep(7.5)
    c = d.client(timeout=60)
    try:
        for _ in range(50):
            res = c.run(sid, "cat /tmp/gap.json 2>/dev/null")
            if res.stdout.strip():
                return json.loads(res.stdout)
            time.sleep(0.2)
    finally:
        c.close()
    raise RuntimeError("the query loop in the sandbox left no result")


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))]


def run_in_sandbox(c, sid, server, name, n):
    cmd = "/usr/bin/python3 -c '%s' %s %s %d" % (CLIENT.replace("'", "'\\''"), server, name, n)
    res = c.run(sid, cmd, read_timeout=600)
    if res.exit_code != 0:
        raise RuntimeError("client in sandbox failed: %r %s" % (res, res.stderr))
    return json.loads(res.stdout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=500)
    args = ap.parse_args()
    lab = NetLab()
    rows = []
    gap = None
    try:
        direct = json.loads(subprocess.run(
            ["/usr/bin/python3", "-c", CLIENT, lab.ns_ip, "allowed.test", str(args.n)],
            check=True, capture_output=True, text=True).stdout)
        rows.append(("direct (host -> dnsmasq)", direct))
        for mode in ("dns+nft", "dns"):
            d = harness.Corrald(network=lab, extra_args=lab.corrald_args(mode))
            d.start()
            c = d.client(timeout=600)
            try:
                r = c.create_sandbox_raw(
                    resourceLimits={"cpu": "1", "memory": "256Mi", "pids": "64"},
                    networkPolicy={"defaultAction": "deny",
                                   "egress": [{"action": "allow", "target": "allowed.test"}]})
                if r.status != 202:
                    raise RuntimeError("create: %r" % r)
                sid = r.json()["id"]
                gw = c.run(sid, "awk '/^nameserver/ {print $2; exit}' /etc/resolv.conf").stdout.strip()
                rows.append(("corral %s, allowed name" % mode,
                             run_in_sandbox(c, sid, gw, "allowed.test", args.n)))
                rows.append(("corral %s, denied name" % mode,
                             run_in_sandbox(c, sid, gw, "denied.test", args.n)))
                if mode == "dns+nft":
                    c.close()
                    gap = restart_gap(d, sid, gw)
                    c = d.client(timeout=600)
                c.delete_sandbox(sid)
            finally:
                c.close()
                try:
                    d.shutdown_and_check()
                except AssertionError as e:
                    print("note: %s" % e)
    finally:
        lab.close()
    base = pct(direct, 50)
    print("DNS answer latency, %d sequential UDP queries each (ms)" % args.n)
    print("%-34s %8s %8s %8s" % ("", "p50", "p95", "x direct"))
    for name, xs in rows:
        print("%-34s %8.3f %8.3f %8.2f" % (name, pct(xs, 50) * 1e3, pct(xs, 95) * 1e3,
                                           pct(xs, 50) / base))
    print("corrald kill -9 + start: longest gap between answers %.0f ms (%d answers in 8 s)"
          % (gap["gap"] * 1e3, gap["ok"]))


if __name__ == "__main__":
    main()
