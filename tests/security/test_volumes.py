#!/usr/bin/env python3
"""
Attacks on volumes (docs/volumes.md): a request, an image or a sandbox trying to get a host path
mounted that the operator did not allow (symlinks, '..', paths beside the allowlist, symlinks
planted by another sandbox), a mountPath aimed through a symlink of the image, a sandbox filling a
named volume to fill the host, and host paths leaking through the sandbox's mountinfo.
"""
import os
import shutil
import sys
import tempfile
import unittest

from sec import AttackCase, main, mounts_under, safe_rmtree

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "integration"))
from test_isolation import make_busybox_image  # noqa: E402


def host_vol(path, mount="/v", **kw):
    v = {"name": "v", "host": {"path": path}, "mountPath": mount}
    v.update(kw)
    return v


def pvc_vol(claim, mount="/v", pvc=None, **kw):
    p = {"claimName": claim}
    p.update(pvc or {})
    v = {"name": "v", "pvc": p, "mountPath": mount}
    v.update(kw)
    return v


def mountinfo_entry(text, mount_point):
    """(root, options) of the mount at mount_point in a mountinfo text, or None."""
    for line in text.splitlines():
        f = line.split()
        if len(f) > 5 and f[4] == mount_point:
            return f[3], f[5]
    return None


class VolumeAttacks(AttackCase):
    class_sandboxes = ("neighbour",)

    @classmethod
    def setUpClass(cls):
        # Outside corrald's temp dir, so "the state path is not in the sandbox" means something.
        cls.allowed = tempfile.mkdtemp(prefix="corral-test-allowed-")
        cls.data = os.path.join(cls.allowed, "data")
        os.makedirs(os.path.join(cls.data, "sub"))
        os.symlink("/etc", os.path.join(cls.allowed, "link-out"))
        os.symlink("data", os.path.join(cls.allowed, "link-in"))
        os.symlink("/etc", os.path.join(cls.data, "sub", "etc-link"))
        # A directory whose name starts with the allowed one's: not below it.
        cls.beside = cls.allowed + "-evil"
        os.makedirs(cls.beside)
        cls.corrald_kwargs = {"extra_args": ["--allow-host-path", cls.allowed,
                                             "--volume-size", "64Mi"]}
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            safe_rmtree(cls.allowed)
            safe_rmtree(cls.beside)

    def refused(self, vols, code, *in_message):
        r = self.create(expect=400, volumes=vols)
        self.assertEqual(r["code"], code, r)
        for m in in_message:
            self.assertIn(m, r["message"])
        return r

    def no_sandbox_left(self):
        self.assertEqual(sorted(self.client.all_sandbox_ids()), [self.neighbour])

    def test_symlink_in_allowed_dir(self):
        # attack: host.path through a symlink in the allowed dir that points out of it (to /etc)
        self.refused([host_vol(os.path.join(self.allowed, "link-out"))],
                     "VOLUME::HOST_PATH_NOT_ALLOWED", "symlink")
        self.refused([host_vol(os.path.join(self.allowed, "link-out", "passwd"), "/p")],
                     "VOLUME::HOST_PATH_NOT_ALLOWED")
        # ...and through one that stays inside: nothing below the allowed dir is followed at all
        self.refused([host_vol(os.path.join(self.allowed, "link-in"))],
                     "VOLUME::HOST_PATH_NOT_ALLOWED")
        # ...and as the subPath of an allowed directory
        self.refused([host_vol(self.data, subPath="sub/etc-link")], "VOLUME::INVALID_SUB_PATH")
        self.no_sandbox_left()
        self.assert_platform_alive(self.neighbour)

    def test_symlink_planted_by_a_sandbox(self):
        # attack: a sandbox with a read-write host volume plants symlinks to / and /etc in it for
        # the next create (its own or another tenant's) to mount
        a = self.create(volumes=[host_vol(self.data, "/mnt/data")])["id"]
        self.run_ok(a, "ln -s /etc /mnt/data/esc && ln -s / /mnt/data/root && "
                       "ln -s /etc/shadow /mnt/data/shadow")
        self.refused([host_vol(os.path.join(self.data, "esc"))], "VOLUME::HOST_PATH_NOT_ALLOWED")
        self.refused([host_vol(os.path.join(self.data, "root", "etc"))],
                     "VOLUME::HOST_PATH_NOT_ALLOWED")
        self.refused([host_vol(os.path.join(self.data, "shadow"), "/s")],
                     "VOLUME::HOST_PATH_NOT_ALLOWED")
        self.refused([host_vol(self.data, subPath="root/etc")], "VOLUME::INVALID_SUB_PATH")
        self.assertEqual(sorted(self.client.all_sandbox_ids()), sorted([self.neighbour, a]))
        self.assert_platform_alive(self.neighbour, a)

    def test_symlink_planted_in_named_volume(self):
        # attack: a sandbox plants x -> /etc in a named volume; another create asks for subPath
        # x/pwned, hoping the host makes the directory through the link (in the host's /etc)
        a = self.create(volumes=[pvc_vol("planted")])["id"]
        self.run_ok(a, "ln -s /etc /v/x && ln -s / /v/r && mkdir -p /v/ok")
        for sub in ("x/pwned", "r/etc/pwned", "x"):
            self.refused([pvc_vol("planted", "/w", subPath=sub)], "VOLUME::INVALID_SUB_PATH")
        self.assertFalse(os.path.exists("/etc/pwned"), "a directory was made in the host's /etc")
        b = self.create(volumes=[pvc_vol("planted", "/w", subPath="ok/deeper")])["id"]
        self.run_ok(b, "echo fine > /w/f")
        self.assertEqual(self.sh(a, "cat /v/ok/deeper/f"), "fine")
        self.assert_platform_alive(self.neighbour, a, b)

    def test_dot_dot(self):
        # attack: '..' in host.path, in subPath of a host or a named volume, and in mountPath
        self.refused([host_vol(os.path.join(self.data, "..", "..", "etc"))],
                     "VOLUME::INVALID_HOST_PATH", "..")
        self.refused([host_vol(self.data + "/sub/../../../etc")], "VOLUME::INVALID_HOST_PATH")
        self.refused([host_vol(self.data, subPath="../../etc")], "VOLUME::INVALID_SUB_PATH")
        self.refused([host_vol(self.data, subPath="sub/../../link-out")],
                     "VOLUME::INVALID_SUB_PATH")
        self.refused([pvc_vol("dots", subPath="a/../../..")], "VOLUME::INVALID_SUB_PATH")
        self.refused([pvc_vol("dots", subPath="/etc")], "VOLUME::INVALID_SUB_PATH")
        self.refused([pvc_vol("dots", "/tmp/../proc/sys")], "VOLUME::INVALID_MOUNT_PATH")
        self.assertFalse(os.path.exists(os.path.join(self.corrald.state_dir, "volumes", "dots")))
        self.no_sandbox_left()

    def test_outside_allowlist(self):
        # attack: host paths beside the allowed directory: /etc, /, the state dir, a sibling
        # whose name starts with the allowed one's, the allowed dir's parent
        for p in ("/etc", "/", self.corrald.state_dir, self.beside,
                  os.path.dirname(self.allowed), "/proc/1/root"):
            self.refused([host_vol(p)], "VOLUME::HOST_PATH_NOT_ALLOWED", "--allow-host-path")
        self.no_sandbox_left()
        self.assert_platform_alive(self.neighbour)

    def test_fill_named_volume(self):
        # attack: fill a named volume far beyond its size to fill the host's state file system
        sid = self.create(volumes=[pvc_vol("filler", pvc={"storage": "16Mi"})])["id"]
        res = self.client.run(sid, "dd if=/dev/zero of=/v/fill bs=1M count=64; rc=$?; sync; exit $rc")
        self.assertNotEqual(res.exit_code, 0, res)
        self.assertIn("No space left on device", res.stderr)
        written = int(self.sh(sid, "stat -c %s /v/fill"))
        self.assertLess(written, 16 << 20)
        img = os.path.join(self.corrald.state_dir, "volumes", "filler", "volume.img")
        # What the volume takes of the state file system is its image's allocated blocks (the
        # file system's free space is not measured: other suites write to it meanwhile).
        self.assertLessEqual(os.stat(img).st_blocks * 512, 16 << 20,
                             "the volume's image holds more than its size")
        # a larger volume than the operator allows cannot be asked for
        self.refused([pvc_vol("huge", pvc={"storage": "100Ti"})], "SANDBOX::INVALID_PARAMETER",
                     "--volume-size")
        self.assert_platform_alive(self.neighbour, sid)

    def test_mountinfo_shows_no_host_path(self):
        # attack: read the sandbox's mountinfo for host paths (state dir, volume images, ids)
        sid = self.create(volumes=[pvc_vol("info", "/named"),
                                   pvc_vol("info", "/named-sub", subPath="s", name="w"),
                                   host_vol(self.data, "/host", name="h")])["id"]
        text = self.sh(sid, "cat /proc/self/mountinfo")
        self.assertNotIn(self.corrald.state_dir, text)
        self.assertNotIn(self.corrald.tmp, text)
        self.assertNotIn("volume.img", text)
        self.assertNotIn("/volumes/", text)
        self.assertEqual(mountinfo_entry(text, "/named")[0], "/")
        self.assertEqual(mountinfo_entry(text, "/named-sub")[0], "/s")
        # A host volume's root is its path in its own file system: at most the path the request
        # named (its file system may be mounted elsewhere on the host), never more of the host.
        root = mountinfo_entry(text, "/host")[0]
        self.assertTrue(self.data.endswith(root), (root, self.data))


class MountPathThroughImageSymlinks(AttackCase):
    """An image whose symlinks aim mountPath at /proc, /etc or a host path."""

    @classmethod
    def setUpClass(cls):
        from harness import binary, elf_is_static
        if not (shutil.which("busybox") or os.path.exists("/bin/busybox")):
            raise unittest.SkipTest("busybox is not installed (apt-get install busybox-static)")
        execd = os.path.realpath(binary("corral-execd"))
        if os.path.exists(execd) and not elf_is_static(execd):
            raise unittest.SkipTest("%s is dynamically linked (a sanitizer build)" % execd)
        cls.images = tempfile.mkdtemp(prefix="corral-test-images-")
        root = os.path.join(cls.images, "evil")
        make_busybox_image(root)
        cls.allowed = tempfile.mkdtemp(prefix="corral-test-allowed-")
        with open(os.path.join(cls.allowed, "marker"), "w") as f:
            f.write("volume\n")
        cls.host_target = tempfile.mkdtemp(prefix="corral-test-host-target-")
        os.symlink("/proc/sys", os.path.join(root, "to-proc"))
        os.symlink("/sys/fs/cgroup", os.path.join(root, "to-sys"))
        os.symlink("/etc", os.path.join(root, "to-etc"))
        os.symlink("../../../../../../../../etc", os.path.join(root, "up"))
        os.symlink(cls.host_target, os.path.join(root, "to-host"))
        os.symlink("/", os.path.join(root, "to-root"))
        cls.corrald_kwargs = {"image_dir": cls.images,
                              "extra_args": ["--allow-host-path", cls.allowed]}
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            for d in (cls.images, cls.allowed, cls.host_target):
                safe_rmtree(d)

    def make(self, mount, expect=202):
        return self.create(expect=expect, image={"uri": "evil"}, entrypoint=["sleep", "100000"],
                           volumes=[host_vol(self.allowed, mount, readOnly=True)])

    def test_to_proc_sys_or_root_refused(self):
        # attack: mountPath through image symlinks that lead to /proc/sys, /sys or "/"
        for mp in ("/to-proc", "/to-proc/kernel", "/to-sys", "/to-root"):
            r = self.make(mp, expect=400)
            self.assertEqual(r["code"], "VOLUME::INVALID_MOUNT_PATH", (mp, r))
        self.assertEqual(self.client.all_sandbox_ids(), [])

    def test_to_etc_stays_in_the_sandbox(self):
        # attack: mountPath through image symlinks to /etc (absolute and by '..') and to a host
        # directory's absolute path: the mount must land inside the sandbox, not on the host
        for mp, real in (("/to-etc/vol", "/etc/vol"), ("/up/vol2", "/etc/vol2")):
            sid = self.make(mp)["id"]
            self.assertEqual(self.sh(sid, "cat %s/marker" % real), "volume")
            self.assertIsNotNone(mountinfo_entry(self.sh(sid, "cat /proc/self/mountinfo"), real))
        # the host directory's path does not exist in the image: refused, nothing made anywhere
        r = self.make("/to-host/vol3", expect=400)
        self.assertEqual(r["code"], "VOLUME::INVALID_MOUNT_PATH", r)
        # (by name: other processes of the host may change /etc meanwhile)
        for name in ("vol", "vol2", "vol3", "marker"):
            self.assertFalse(os.path.lexists(os.path.join("/etc", name)), "the host's /etc/%s" % name)
        self.assertEqual(os.listdir(self.host_target), [], "the host directory changed")
        self.assertEqual([m for m in mounts_under("/etc")], [])
        self.assertEqual(mounts_under(self.host_target), [])


class NoAllowlist(AttackCase):
    """corrald without --allow-host-path: every host volume is refused."""

    def test_host_volume_refused(self):
        # attack: a host volume of /etc (and of /tmp) on a server that allows none
        for p in ("/etc", "/tmp"):
            r = self.create(expect=400, volumes=[host_vol(p)])
            self.assertEqual(r["code"], "VOLUME::HOST_PATH_NOT_ALLOWED", r)
            self.assertIn("--allow-host-path", r["message"])
        self.assertEqual(self.client.all_sandbox_ids(), [])
        # named volumes need no allowlist
        sid = self.create(volumes=[pvc_vol("ok")])["id"]
        self.run_ok(sid, "echo x > /v/x")


if __name__ == "__main__":
    main()
