#!/usr/bin/env python3
"""
Red-team pass on volumes (docs/volumes.md): what one sandbox's volumes can do to another sandbox
and to the host, on a host where mounts propagate (systemd makes every mount `shared`, so a mount
made under the state dir or an allowed directory joins a peer group).
"""
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

from sec import AttackCase, Corrald, main, mounts_under, safe_rmtree

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "integration"))
from test_isolation import make_busybox_image  # noqa: E402


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

    def test_nested_volume_refused_on_a_shared_host(self):
        # attack: B mounts its own volume inside a named volume (or allowed host directory) it
        # shares with A; the mount propagated through the shared source's peer group into A and
        # onto the host (before: B's private volume showed up in A's /v/own and in the host's
        # state dir). Nesting is refused now, and the clones are private as well.
        data = os.path.join(self.allowed, "data")
        a = self.create(volumes=[pvc("c", "common", "/v"), host("h", data, "/h")])["id"]
        self.run_ok(a, "mkdir /v/own /h/own")
        for vols in ([pvc("c", "common", "/v"), pvc("p", "b-private", "/v/own")],
                     [host("h", data, "/h"), pvc("p", "b-private2", "/h/own")]):
            r = self.client.create_sandbox_raw(volumes=vols)
            if r.status == 202:
                self.addCleanup(self.client.delete_sandbox, r.json()["id"])
            self.assertEqual(r.status, 400, r)
            self.assertEqual(r.json()["code"], "VOLUME::INVALID_MOUNT_PATH", r.json())
        self.assertFalse(self.mounted_in(a, "/v/own") or self.mounted_in(a, "/h/own"))
        host_mnt = os.path.join(self.corrald.state_dir, "volumes", "common", "mnt")
        self.assertEqual(mounts_under(host_mnt), [os.path.realpath(host_mnt)])
        self.assertEqual(mounts_under(self.allowed), [os.path.realpath(self.allowed)])
        self.assert_platform_alive(self.neighbour, a)

    def test_host_mounts_do_not_reach_a_sandbox(self):
        # attack (the other direction): something the host mounts below an allowed directory
        # (another tenant's data, a credentials tmpfs) after A started appeared in A's volume,
        # whose clone was a peer of the host's shared mount
        data = os.path.join(self.allowed, "data")
        a = self.create(volumes=[host("h", data, "/h")])["id"]
        self.run_ok(a, "mkdir -p /h/late")
        late = os.path.join(data, "late")
        subprocess.check_call(["mount", "-t", "tmpfs", "-o", "size=1m", "corral-test-late", late])
        try:
            with open(os.path.join(late, "secret"), "w") as f:
                f.write("host-secret\n")
            self.assertFalse(self.mounted_in(a, "/h/late"), "a host mount appeared in A")
            self.assertNotIn("host-secret", self.client.run(a, "cat /h/late/secret").stdout)
        finally:
            subprocess.call(["umount", late])
        self.assert_platform_alive(self.neighbour, a)


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
        self.assert_platform_alive(a)

    def test_other_sandbox_cannot_swap_a_nested_mount_point(self):
        # attack: A rmdirs the mount point of B's read-only tools volume nested in their shared
        # volume (the kernel detaches B's mount, which lives in another namespace) and puts its
        # own "run" there: B ran A's "42 passed" (before nesting was refused)
        a = self.create(volumes=[pvc("c", "common-rm", "/v")])["id"]
        t = self.create(volumes=[pvc("t", "tools", "/t")])["id"]
        self.run_ok(t, "printf '#!/bin/sh\\necho genuine\\n' > /t/run && chmod 755 /t/run")
        self.run_ok(a, "mkdir /v/tools")
        r = self.client.create_sandbox_raw(volumes=[pvc("c", "common-rm", "/v"),
                                                    pvc("t", "tools", "/v/tools", readOnly=True)])
        if r.status == 202:
            b = r.json()["id"]
            self.addCleanup(self.client.delete_sandbox, b)
            self.run_ok(a, "rmdir /v/tools && mkdir /v/tools && "
                           "printf '#!/bin/sh\\necho 42 passed\\n' > /v/tools/run && "
                           "chmod 755 /v/tools/run")
            self.fail("created; B now runs: %r" % self.client.run(b, "/v/tools/run").stdout)
        self.assertEqual(r.status, 400, r)
        self.assertEqual(r.json()["code"], "VOLUME::INVALID_MOUNT_PATH", r.json())
        self.assert_platform_alive(a, t)

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

    def test_nested_mount_path_makes_nothing_in_the_outer_volume(self):
        # attack: a mountPath inside another volume, missing there: refused before the host makes
        # any directory in the shared volume (another sandbox's content)
        a = self.create(volumes=[pvc("c", "outer", "/v")])["id"]
        r = self.client.create_sandbox_raw(volumes=[pvc("c", "outer", "/v"),
                                                    pvc("p", "inner", "/v/new/deeper")])
        if r.status == 202:
            self.addCleanup(self.client.delete_sandbox, r.json()["id"])
        self.assertEqual(r.status, 400, r)
        self.assertEqual(r.json()["code"], "VOLUME::INVALID_MOUNT_PATH", r.json())
        self.assertEqual(self.sh(a, "ls -A /v"), "")
        self.assert_platform_alive(a)

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


class ImageRouteNesting(AttackCase):
    """An image whose symlinks lead mountPaths into a volume without naming it."""

    @classmethod
    def setUpClass(cls):
        from harness import binary, elf_is_static
        if not (shutil.which("busybox") or os.path.exists("/bin/busybox")):
            raise unittest.SkipTest("busybox is not installed (apt-get install busybox-static)")
        execd = os.path.realpath(binary("corral-execd"))
        if os.path.exists(execd) and not elf_is_static(execd):
            raise unittest.SkipTest("%s is dynamically linked (a sanitizer build)" % execd)
        cls.images = tempfile.mkdtemp(prefix="corral-test-images-")
        root = os.path.join(cls.images, "nest")
        make_busybox_image(root)
        os.makedirs(os.path.join(root, "srv", "data"))
        os.symlink("/srv/data", os.path.join(root, "data"))
        os.symlink("/a", os.path.join(root, "into"))  # "/a" sorts (and is mounted) first
        cls.corrald_kwargs = {"image_dir": cls.images, "extra_args": ["--volume-size", "64Mi"]}
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            safe_rmtree(cls.images)

    def refused(self, vols):
        r = self.client.create_sandbox_raw(image={"uri": "nest"}, entrypoint=["sleep", "100000"],
                                           volumes=vols)
        if r.status == 202:
            self.addCleanup(self.client.delete_sandbox, r.json()["id"])
        self.assertEqual(r.status, 400, r)
        self.assertEqual(r.json()["code"], "VOLUME::INVALID_MOUNT_PATH", r.json())

    def test_nesting_through_the_image_s_symlinks(self):
        # attack: the outer volume at /data (an image symlink to /srv/data), the inner at
        # /srv/data/x: no two mountPaths nest by name, but the inner lands in the outer volume;
        # and /into/t (into -> /a, the volume) through A's planted t -> /bin in the volume
        a = self.create(volumes=[pvc("c", "route", "/v")])["id"]
        self.run_ok(a, "mkdir -p /v/x /v/tools && ln -s /bin /v/t")
        self.refused([pvc("c", "route", "/data"), pvc("i", "route-inner", "/srv/data/x")])
        self.refused([pvc("c", "route", "/data"), pvc("i", "route-inner", "/srv/data/made")])
        self.refused([pvc("c", "route", "/a"), pvc("t", "route", "/into/t", subPath="tools")])
        self.assertEqual(sorted(self.sh(a, "ls -A /v").split()), ["t", "tools", "x"],
                         "the host made something in the shared volume")
        # an image symlink to a plain directory is still followed
        b = self.create(image={"uri": "nest"}, entrypoint=["sleep", "100000"],
                        volumes=[pvc("c", "route", "/data")])["id"]
        self.assertIn("tools", self.sh(b, "ls /srv/data"))
        self.assert_platform_alive(a, b)


if __name__ == "__main__":
    main()
