#!/usr/bin/env python3
"""
Disk exhaustion (issue 8 item 7, and item 10's ephemeral-storage check): a sandbox must not be able
to fill the host's state file system, with or without an ephemeral-storage limit of its own.

corrald runs here on a state file system of its own (a 192 MiB tmpfs), with --default-disk 64Mi, so
what the sandbox can take from the host is measured exactly and the test writes a bounded amount.
"""
import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sec import AttackCase, Corrald, main, mounts_under  # noqa: E402
from harness import TmpfsStateCorrald  # noqa: E402
import oci  # noqa: E402  (tests/integration, on the path through sec)

MIB = 1024 * 1024
STATE_MIB = 192
DEFAULT_DISK_MIB = 64
# What besides the sandbox's own image may appear on the state fs meanwhile: the template (~0.2
# MiB), records, the neighbour's image metadata.
SLACK = 8 * MIB

SPEC = {"image": {"uri": "host"}, "entrypoint": ["sleep", "infinity"],
        "resourceLimits": {"cpu": "1", "memory": "256Mi"}}


class SmallStateCorrald(TmpfsStateCorrald):
    """corrald whose --state-dir is a tmpfs of its own: its free space moves only with corrald."""
    TMPFS_SIZE = "%dm" % STATE_MIB
    TMPFS_NAME = "corral-sec-disk"


def free_bytes(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


class SmallStateCase(AttackCase):
    """corrald on a state fs of STATE_MIB of its own, every sandbox with a DEFAULT_DISK_MIB disk."""

    corrald_class = SmallStateCorrald
    corrald_kwargs = {"extra_args": ["--default-disk", "%dMi" % DEFAULT_DISK_MIB]}


class SmallStateRegistryCase(SmallStateCase):
    """The same, plus a registry on loopback it may pull from over plain HTTP (cls.reg), and a
    temp dir for image layouts (cls.tmp); more_args are added to corrald's arguments."""

    more_args = []

    @classmethod
    def setUpClass(cls):
        cls.reg = oci.Registry()
        cls.tmp = tempfile.mkdtemp(prefix="corral-sec-reg-")
        cls.corrald_kwargs = {"extra_args": SmallStateCase.corrald_kwargs["extra_args"] +
                              ["--insecure-registry", cls.reg.host] + cls.more_args}
        try:
            super().setUpClass()
        except Exception:
            cls.reg.stop()
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        cls.reg.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def push_bomb(self):
        """An image whose one gzip layer (~1 MiB) unpacks to a 240 MiB file: (ref, layout info)."""
        layer = oci.layer_tar([oci.F("bomb", b"A" * (240 * MIB))])
        d = os.path.join(self.tmp, "bomb")
        info = oci.write_layout(d, [layer])
        del layer
        return self.reg.push(d, "evil/bomb"), info


class DiskFill(SmallStateCase):

    def fill(self, sid, cmd):
        return self.client.run(sid, "%s 2>&1; echo rc=$?" % cmd, read_timeout=120)

    def test_fill_writable_layer_without_limit(self):
        # Attack: a sandbox created without any disk limit writes 4x its default disk, through
        # every kind of path of its writable layer, to fill the host's state file system.
        state = self.corrald.state_dir
        free_before = free_bytes(state)
        sid = self.create(**SPEC)["id"]
        neighbour = self.create(**SPEC)["id"]
        attacks = [
            "dd if=/dev/zero of=/var/tmp/fill bs=1M count=256",
            "dd if=/dev/zero of=/data/fill bs=1M count=64",
            "dd if=/dev/zero of=/etc/fill bs=1M count=64",
            "dd if=/dev/zero of=/data/deeper/fill bs=1M count=64",
            "dd if=/dev/zero of=/fill bs=1M count=64",
            "fallocate -l 200M /var/tmp/fallocated",
            "python3 -c 'import os; os.posix_fallocate(os.open(\"/etc/pf\", os.O_CREAT|os.O_WRONLY),"
            " 0, 200 << 20)'",
        ]
        # (Host directories such as /opt belong to nobody inside: not writable at all.)
        self.sh(sid, "mkdir -p /var/tmp /data/deeper /etc")
        for cmd in attacks:
            res = self.fill(sid, cmd)
            self.assertIn("No space left on device", res.stdout, "%s: %r" % (cmd, res))
            self.assertNotIn("rc=0", res.stdout, "%s: %r" % (cmd, res))
        # It got no more than its default disk; the host's state fs kept the rest.
        used = free_before - free_bytes(state)
        self.assertLessEqual(used, DEFAULT_DISK_MIB * MIB + SLACK,
                             "the sandbox took %.1f MiB of the state fs" % (used / MIB))
        self.assertGreater(free_bytes(state), (STATE_MIB - DEFAULT_DISK_MIB) * MIB - 2 * SLACK)
        st = self.client.get("/v1/sandboxes/%s/stats" % sid).json()["disk"]
        self.assertEqual(st["limitBytes"], DEFAULT_DISK_MIB * MIB, st)
        # Everyone else carries on: corrald, the attacker's own execd, a neighbour that writes.
        self.assert_platform_alive(sid, neighbour)
        self.assertEqual(self.fill(neighbour, "dd if=/dev/zero of=/var/tmp/x bs=1M count=16 "
                                              "status=none").stdout.strip(), "rc=0")
        # The space comes back once the sandbox is gone (its image is freed with its last mount).
        self.assertEqual(self.client.delete_sandbox(sid).status, 204)
        self.wait_gone(sid)
        self.wait_until(lambda: free_before - free_bytes(state) < 16 * MIB + SLACK, timeout=20,
                        msg="the deleted sandbox's disk space to return to the state fs")

    def test_explicit_limit_larger_than_state_fs(self):
        # Attack: ask for a disk larger than the state file system, so that the sparse image could
        # grow until the host's file system is full.
        free = free_bytes(self.corrald.state_dir)
        for v in ("1Ti", "%d" % (free + MIB), "%dMi" % (STATE_MIB + 1)):
            spec = dict(SPEC, resourceLimits={"cpu": "1", "ephemeral-storage": v})
            r = self.client.create_sandbox_raw(**spec)
            self.assertEqual(r.status, 422, "%s: %r" % (v, r))
            body = r.json()
            self.assertEqual(body["code"], "SANDBOX::INVALID_PARAMETER")
            self.assertIn("resourceLimits.ephemeral-storage", body["message"])
            self.assertIn("free", body["message"])
        self.assertEqual(self.client.all_sandbox_ids(), [])
        self.assert_platform_alive()


class DiskCapacity(SmallStateCase):
    """corrald on a 192 MiB state fs with --capacity disk=150Mi: the sandboxes' 64 MiB disks may
    add up to 150 MiB, so two are admitted at a time."""

    corrald_kwargs = {"extra_args": SmallStateCase.corrald_kwargs["extra_args"] +
                      ["--capacity", "disk=150Mi", "--capacity-wait", "2"]}

    def test_sandboxes_within_their_limits_cannot_fill_the_state_fs_together(self):
        # Attack: five sandboxes, each filling its own 64Mi disk, try to fill the state fs together.
        # A disk the state fs has room for but above the whole capacity is refused at once.
        r = self.client.create_sandbox_raw(**dict(SPEC, resourceLimits={"cpu": "1",
                                                                        "ephemeral-storage": "160Mi"}))
        self.assertEqual(r.status, 400, r)
        self.assertEqual(r.json()["code"], "SANDBOX::EXCEEDS_DISK_CAPACITY", r.json())
        sids, refused = [], []
        for _ in range(5):
            r = self.client.create_sandbox_raw(**SPEC)
            if r.status == 202:
                sids.append(r.json()["id"])
                self.addCleanup(self._cleanup_sandbox, sids[-1])
            else:
                refused.append(r)
        self.assertEqual(len(sids), 2, "two 64 MiB disks fit 150 MiB: %r" % refused)
        for r in refused:
            self.assertEqual(r.status, 503, r)
            self.assertEqual(r.json()["code"], "SANDBOX::CAPACITY_TIMEOUT", r.json())
            self.assertIn("disk: needs 64Mi", r.json()["message"])
        outs = [self.client.run(sid, "dd if=/dev/urandom of=/var/tmp/fill bs=1M count=50 "
                                     "conv=fsync status=none 2>&1; echo rc=$?", read_timeout=120).stdout
                for sid in sids]
        for out in outs:
            self.assertIn("rc=0", out, "a write within the sandbox's own limit failed: %r" % outs)
        free = free_bytes(self.corrald.state_dir)
        self.assertGreater(free, 8 * MIB, "%.1f MiB left of the %d MiB state fs" % (free / MIB, STATE_MIB))
        self.assert_platform_alive(*sids)
        # The capacity comes back with a deleted sandbox: another can now be made.
        self.assertEqual(self.client.delete_sandbox(sids[0]).status, 204)
        self.wait_gone(sids[0])
        r = self.client.create_sandbox_raw(**SPEC)
        self.assertEqual(r.status, 202, r)
        self.addCleanup(self._cleanup_sandbox, r.json()["id"])


class ImageBombTest(SmallStateRegistryCase):
    """corrald on a 192 MiB state fs of its own with --image-unpacked-max 64Mi, pulling from a
    registry on loopback."""

    more_args = ["--image-unpacked-max", "64Mi"]

    def test_decompression_bomb_does_not_fill_the_state_fs(self):
        # Attack: an image whose 1 MiB gzip layer unpacks to 240 MiB, pulled onto a 192 MiB state fs.
        ref, info = self.push_bomb()
        neighbour = self.create(**SPEC)["id"]
        lowest, stop = [free_bytes(self.corrald.state_dir)], threading.Event()

        def sample():
            while not stop.is_set():
                lowest[0] = min(lowest[0], free_bytes(self.corrald.state_dir))
                time.sleep(0.005)
        t = threading.Thread(target=sample, daemon=True)
        t.start()
        try:
            r = self.client.create_sandbox_raw(image={"uri": ref}, entrypoint=["sleep", "infinity"])
            if r.status == 202:
                self.addCleanup(self._cleanup_sandbox, r.json()["id"])
        finally:
            stop.set()
            t.join()
        self.assertEqual(r.status, 422, "%r\n%s" % (r, self.corrald.log_tail(10)))
        self.assertEqual(r.json()["code"], "SANDBOX::IMAGE_TOO_LARGE")
        self.assertIn("--image-unpacked-max", r.json()["message"])
        self.assertIn("64.0 MiB", r.json()["message"])
        # It stopped at the limit: the state fs never lost much more than 64 MiB.
        self.assertGreater(lowest[0], STATE_MIB * MIB - 64 * MIB - 2 * SLACK - DEFAULT_DISK_MIB * MIB // 8,
                           "pulling the image left %.1f MiB of the %d MiB state fs"
                           % (lowest[0] / MIB, STATE_MIB))
        # No partial layer, nothing in tmp/, no image record.
        self.assertNotIn(info["layers"][-1][7:], oci.store_layers(self.corrald.state_dir))
        self.assertEqual(oci.store_tmp(self.corrald.state_dir), [], "no half layer left")
        self.assertEqual(self.client.get("/v1/images").json().get("items", []), [])
        # The same refusal for a pull ahead of time.
        r = self.client.post("/v1/images", {"image": {"uri": ref}})
        self.assertEqual(r.status, 422, r)
        self.assertEqual(r.json()["code"], "SANDBOX::IMAGE_TOO_LARGE")
        self.assert_platform_alive(neighbour)


if __name__ == "__main__":
    main()
