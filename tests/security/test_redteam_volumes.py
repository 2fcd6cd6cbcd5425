#!/usr/bin/env python3
"""
Red-team pass on volumes (docs/volumes.md): what one sandbox's volumes can do to another sandbox
and to the host, on a host where mounts propagate (systemd makes every mount `shared`, so a mount
made under the state dir or an allowed directory joins a peer group).
"""
import fcntl
import os
import subprocess
import tempfile

from sec import AttackCase, Corrald, main, mounts_under, safe_rmtree


def make_shared(path):
    """Bind path on itself and make it shared, as systemd's shared / would have it."""
    subprocess.check_call(["mount", "--bind", path, path])
    subprocess.check_call(["mount", "--make-shared", path])


def unmount(path):
    subprocess.call(["umount", path], stderr=subprocess.DEVNULL)


class SharedStateCorrald(Corrald):
    """A corrald whose state dir is a shared mount (a systemd host)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        make_shared(self.state_dir)

    def leaks(self):
        problems = super().leaks()
        return [p.replace("'%s', " % self.state_dir, "").replace(", '%s'" % self.state_dir, "")
                for p in problems if p != "still mounted under %s: ['%s']"
                % (self.tmp, os.path.realpath(self.state_dir))]

    def stop(self, *a, **kw):
        rc = super().stop(*a, **kw)
        unmount(self.state_dir)
        return rc

    def emergency_cleanup(self):
        try:
            super().emergency_cleanup()
        finally:
            unmount(self.state_dir)


def mountinfo_root(text, mount_point):
    """The root field of the mount at mount_point in a mountinfo text, or None."""
    for line in text.splitlines():
        f = line.split()
        if len(f) > 4 and f[4] == mount_point:
            return f[3]
    return None


def pvc(name, claim, mount, **kw):
    v = {"name": name, "pvc": {"claimName": claim}, "mountPath": mount}
    v.update(kw)
    return v


def host(name, path, mount, **kw):
    v = {"name": name, "host": {"path": path}, "mountPath": mount}
    v.update(kw)
    return v


class PropagationAttacks(AttackCase):
    corrald_class = SharedStateCorrald
    class_sandboxes = ("neighbour",)

    @classmethod
    def setUpClass(cls):
        cls.allowed = tempfile.mkdtemp(prefix="corral-test-allowed-")
        make_shared(cls.allowed)
        os.makedirs(os.path.join(cls.allowed, "data"))
        cls.corrald_kwargs = {"extra_args": ["--allow-host-path", cls.allowed,
                                             "--volume-size", "64Mi"]}
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            for m in mounts_under(cls.allowed):
                subprocess.call(["umount", "-l", m], stderr=subprocess.DEVNULL)
            safe_rmtree(cls.allowed)

    def mounted_in(self, sid, path):
        text = self.sh(sid, "cat /proc/self/mountinfo")
        return any(line.split()[4] == path for line in text.splitlines() if len(line.split()) > 4)

    def test_named_volume_mount_does_not_reach_other_sharers(self):
        # attack: B mounts its own volume inside a named volume it shares with A, so the mount
        # propagates through the shared volume's peer group into A (and onto the host)
        a = self.create(volumes=[pvc("c", "common", "/v")])["id"]
        self.run_ok(a, "mkdir /v/own")
        b = self.create(volumes=[pvc("c", "common", "/v"), pvc("p", "b-private", "/v/own")])["id"]
        self.run_ok(b, "echo b-secret > /v/own/secret")
        self.assertTrue(self.mounted_in(b, "/v/own"))
        self.assertFalse(self.mounted_in(a, "/v/own"), "B's volume appeared in A's mounts")
        res = self.client.run(a, "cat /v/own/secret")
        self.assertNotIn("b-secret", res.stdout, "A read B's private volume")
        host_mnt = os.path.join(self.corrald.state_dir, "volumes", "common", "mnt")
        self.assertEqual(mounts_under(host_mnt), [os.path.realpath(host_mnt)],
                         "a sandbox's mount propagated onto the host")
        self.assert_platform_alive(self.neighbour, a, b)

    def test_host_volume_mount_does_not_reach_the_host(self):
        # attack: B mounts a named volume inside an allowed host directory it has read-write, so
        # the mount propagates to the host's allowed directory and to A, which mounts it too
        data = os.path.join(self.allowed, "data")
        a = self.create(volumes=[host("h", data, "/h")])["id"]
        self.run_ok(a, "mkdir /h/own")
        b = self.create(volumes=[host("h", data, "/h"), pvc("p", "b-private2", "/h/own")])["id"]
        self.run_ok(b, "echo b-secret > /h/own/secret")
        self.assertEqual(mounts_under(self.allowed), [os.path.realpath(self.allowed)],
                         "a sandbox's mount propagated into the host's allowed directory")
        self.assertFalse(self.mounted_in(a, "/h/own"), "B's volume appeared in A's mounts")
        res = self.client.run(a, "cat /h/own/secret")
        self.assertNotIn("b-secret", res.stdout, "A read B's private volume")
        self.assertFalse(os.path.exists(os.path.join(data, "own", "secret")),
                         "the host sees B's private volume in its allowed directory")
        self.assert_platform_alive(self.neighbour, a, b)


class VolumeAttacks(AttackCase):
    corrald_kwargs = {"extra_args": ["--volume-size", "64Mi"]}

    def test_other_sandbox_cannot_aim_a_nested_volume(self):
        # attack: A plants t -> /usr/local/bin and a fake python3 in a volume it shares with B; B
        # mounts that volume at /v and its subPath tools at /v/t: A's python3 first in B's PATH
        vol = [pvc("c", "common", "/v")]
        a = self.create(volumes=vol)["id"]
        self.run_ok(a, "mkdir /v/tools && printf '#!/bin/sh\\necho 42 passed\\n' > /v/tools/python3"
                       " && chmod 755 /v/tools/python3 && ln -s /usr/local/bin /v/t")
        r = self.client.create_sandbox_raw(volumes=vol + [pvc("t", "common", "/v/t",
                                                              subPath="tools")])
        if r.status == 202:
            b = r.json()["id"]
            self.addCleanup(self.client.delete_sandbox, b)
            out = self.client.run(b, "python3 -c 'print(1)' 2>&1").stdout
            self.fail("created, A's python3 in B's PATH: %s" % ("yes" if "42 passed" in out
                                                                 else "no: %r" % out))
        self.assertEqual(r.status, 400, r)
        self.assertEqual(r.json()["code"], "VOLUME::INVALID_MOUNT_PATH", r.json())
        # the same nesting without a planted symlink still works
        self.run_ok(a, "rm /v/t && mkdir /v/t")
        b = self.create(volumes=vol + [pvc("t", "common", "/v/t", subPath="tools")])["id"]
        self.assertEqual(self.sh(b, "/v/t/python3").strip(), "42 passed")
        self.assert_platform_alive(a, b)

    def test_listing_does_not_wait_for_the_volume_lock(self):
        # attack: a sandbox leaves 1.5 GB dirty in its volume and ends; its teardown held the
        # volumes' lock through the unmount (0.3-1.5 s), and GET /v1/volumes waited for that
        # lock in corrald's event loop: every request stalled. The test holds the lock itself.
        sid = self.create(volumes=[pvc("l", "locked", "/v")])["id"]
        self.run_ok(sid, "echo x > /v/x")
        path = os.path.join(self.corrald.state_dir, "volumes", ".lock")
        with open(path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                c = self.corrald.client(timeout=10)
                try:
                    r = c.get("/v1/volumes")
                    self.assertEqual(r.status, 200, r)
                    items = {i["name"]: i for i in r.json()["items"]}
                    self.assertEqual(items["locked"]["sandboxes"], 1)
                    self.assertEqual(c.get("/health").status, 200)
                finally:
                    c.close()
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        self.assert_platform_alive(sid)

    def test_overlong_sub_path_is_the_request_s_error(self):
        # attack: a subPath whose one component is 300 bytes long, made by the host in a named
        # volume: a 500 (the host's failure) where the request is wrong
        for sub in ("a" * 300, "ok/" + "b" * 256):
            r = self.client.create_sandbox_raw(volumes=[pvc("v", "long", "/v", subPath=sub)])
            self.assertEqual(r.status, 400, r)
            self.assertEqual(r.json()["code"], "VOLUME::INVALID_SUB_PATH", r.json())
        self.assert_platform_alive()

    def test_setuid_and_devices_planted_in_a_shared_volume(self):
        # attack: A plants a setuid-root shell helper and tries device nodes in a named volume;
        # B, running as an unprivileged uid, runs the helper to become root
        a = self.create(volumes=[pvc("s", "planted-suid", "/v")])["id"]
        self.run_ok(a, "cp /usr/bin/id /v/id && chmod 4755 /v/id && ls -ln /v/id")
        res = self.client.run(a, "mknod /v/mem c 1 1; mknod /v/sda b 8 0; ls /v")
        self.assertNotIn("mem", res.stdout.split(), res)
        self.assertNotIn("sda", res.stdout.split(), res)
        b = self.create(volumes=[pvc("s", "planted-suid", "/w")])["id"]
        self.assertIn("4755", self.sh(b, "stat -c %a /w/id"))
        res = self.client.run(b, "/w/id -u", uid=65534, gid=65534)
        self.assertEqual(res.exit_code, 0, res)
        self.assertEqual(res.stdout.strip(), "65534", "a setuid file planted by A ran as root in B")
        for sid, mp in ((a, "/v"), (b, "/w")):
            opts = [l.split()[5] for l in self.sh(sid, "cat /proc/self/mountinfo").splitlines()
                    if l.split()[4] == mp]
            self.assertEqual(len(opts), 1, opts)
            self.assertIn("nosuid", opts[0].split(","))
            self.assertIn("nodev", opts[0].split(","))
        self.assert_platform_alive(a, b)

    def test_claim_named_like_the_lock_file(self):
        # attack: claimName "lock", a valid DNS label that was the volumes' own lock file: the
        # create and DELETE /v1/volumes/lock failed with 500 (Not a directory)
        sid = self.create(volumes=[pvc("l", "lock", "/v")])["id"]
        self.run_ok(sid, "echo kept > /v/f")
        self.assertEqual(self.client.delete("/v1/volumes/lock").status, 409)
        self.client.delete_sandbox(sid)
        self.wait_gone(sid)
        self.wait_until(lambda: self.client.delete("/v1/volumes/lock").status == 204, 20,
                        msg="volume 'lock' to be deleted")
        self.assertEqual(self.client.delete("/v1/volumes/lock").status, 404)
        self.assert_platform_alive()

    def test_nested_mount_path_is_made_in_the_outer_volume(self):
        # attack (and function): a mountPath missing inside a volume mounted before it; host root
        # has no id on that idmapped mount, so it was a 400 EOVERFLOW ("Value too large")
        a = self.create(volumes=[pvc("c", "outer", "/v")])["id"]
        self.run_ok(a, "echo cfg > /v/cfg")
        b = self.create(volumes=[pvc("c", "outer", "/v"), pvc("p", "inner", "/v/new/deeper"),
                                 pvc("f", "outer", "/v/new/cfgfile", subPath="cfg")])["id"]
        self.run_ok(b, "echo inner > /v/new/deeper/f")
        self.assertEqual(self.sh(b, "cat /v/new/cfgfile").strip(), "cfg")
        self.assertEqual(self.sh(a, "stat -c '%u %s' /v/new/cfgfile").strip(), "0 0")
        self.assertEqual(self.sh(a, "stat -c '%u %g %a' /v/new /v/new/deeper").split("\n")[:2],
                         ["0 0 755", "0 0 755"])
        self.assertEqual(self.sh(a, "ls -A /v/new/deeper"), "", "A sees B's inner volume")
        self.assert_platform_alive(a, b)

    def test_sub_path_race_with_a_swapping_sandbox(self):
        # attack: A swaps a directory of a shared volume for a symlink to /etc (and back) in a
        # tight loop while B's creates make subPath x/redteam-pwned through it
        a = self.create(volumes=[pvc("r", "racy", "/v")])["id"]
        self.run_ok(a, "mkdir -p /v/x && ln -sfn /etc /v/x.l")
        swapper = ("import ctypes, os\n"
                   "libc = ctypes.CDLL(None, use_errno=True)\n"
                   "os.chdir('/v')\n"
                   "while True:\n"
                   "    libc.renameat2(-100, b'x', -100, b'x.l', 2)  # RENAME_EXCHANGE\n")
        self.client.run(a, "cat > /tmp/swap.py <<'EOF'\n%sEOF\nexec python3 /tmp/swap.py"
                        % swapper, background=True)
        self.wait_until(lambda: "->" in self.sh(a, "ls -l /v/x"), 10, msg="the swap to run")
        volume_dev = self.sh(a, "stat -c %d /v").strip()
        for _ in range(20):
            r = self.client.create_sandbox_raw(volumes=[pvc("r", "racy", "/w",
                                                            subPath="x/redteam-pwned")])
            if r.status == 202:
                b = r.json()["id"]
                try:
                    # In the volume (A may have renamed the directory since: x <-> x.l).
                    self.assertEqual(self.sh(b, "stat -c %d /w").strip(), volume_dev,
                                     "B's subPath left the volume")
                    self.assertIn(mountinfo_root(self.sh(b, "cat /proc/self/mountinfo"), "/w"),
                                  ("/x/redteam-pwned", "/x.l/redteam-pwned"))
                finally:
                    self.client.delete_sandbox(b)
            else:
                self.assertEqual(r.status, 400, r)
                self.assertEqual(r.json()["code"], "VOLUME::INVALID_SUB_PATH", r.json())
        self.assertFalse(os.path.lexists("/etc/redteam-pwned"), "made in the host's /etc")
        self.assertEqual(self.sh(a, "ls -d /etc/redteam-pwned 2>/dev/null; true"), "",
                         "made in A's /etc")
        self.assert_platform_alive(a)


if __name__ == "__main__":
    main()
