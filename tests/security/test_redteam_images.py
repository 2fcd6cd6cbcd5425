#!/usr/bin/env python3
"""
Red-team pass on image limits (docs/images.md "Bounded unpacking"): what a layer makes the host
store beyond its file data.
"""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sec import main  # noqa: E402
from test_disk import MIB, SPEC, STATE_MIB, SmallStateRegistryCase, free_bytes  # noqa: E402
import oci  # noqa: E402

LIMIT_MIB = 32


class ImageAttacks(SmallStateRegistryCase):
    """corrald on a 192 MiB state fs of its own with --image-unpacked-max 32Mi, pulling from a
    registry on loopback."""

    more_args = ["--image-unpacked-max", "%dMi" % LIMIT_MIB]

    def pull_watching(self, ref):
        """Pull ref ahead of time; (reply, the least free space seen on the state fs meanwhile)."""
        lowest, stop = [free_bytes(self.corrald.state_dir)], threading.Event()

        def sample():
            while not stop.is_set():
                lowest[0] = min(lowest[0], free_bytes(self.corrald.state_dir))
                time.sleep(0.005)
        t = threading.Thread(target=sample, daemon=True)
        t.start()
        try:
            r = self.client.post("/v1/images", {"image": {"uri": ref}})
        finally:
            stop.set()
            t.join()
        return r, lowest[0]

    def test_symlink_bomb_is_counted(self):
        # attack: a layer of 24,000 symlinks with 4000-byte targets and no file data at all: each
        # takes a block of the state fs (94 MiB), none counted against --image-unpacked-max 32Mi
        target = "t" * 4000
        layer = oci.layer_tar([oci.L("l%05d" % i, target) for i in range(24000)])
        d = os.path.join(self.tmp, "symlinks")
        info = oci.write_layout(d, [layer])
        del layer
        ref = self.reg.push(d, "evil/symlinks")
        neighbour = self.create(**SPEC)["id"]
        before = free_bytes(self.corrald.state_dir)
        r, lowest = self.pull_watching(ref)
        self.assertGreater(lowest, before - (LIMIT_MIB + 8) * MIB,
                           "the pull took %.1f MiB of the %d MiB state fs"
                           % ((before - lowest) / MIB, STATE_MIB))
        self.assertEqual(r.status, 422, "%r\n%s" % (r, self.corrald.log_tail(10)))
        self.assertEqual(r.json()["code"], "SANDBOX::IMAGE_TOO_LARGE")
        self.assertIn("--image-unpacked-max", r.json()["message"])
        self.assertNotIn(info["layers"][-1][7:], oci.store_layers(self.corrald.state_dir))
        self.assertEqual(oci.store_tmp(self.corrald.state_dir), [], "no half layer left")
        self.assert_platform_alive(neighbour)

    def test_entry_name_cannot_forge_log_lines(self):
        # attack: a layer entry whose name escapes the layer and carries a newline and a whole
        # fake corrald log line; the pull's error (and its log line) name the entry
        fake = "2026-01-01T00:00:00.000Z corrald info: sandbox forged: running (pid 1)"
        layer = oci.layer_tar([oci.F("../x\n" + fake + "\n", "x")])
        d = os.path.join(self.tmp, "logforge")
        oci.write_layout(d, [layer])
        ref = self.reg.push(d, "evil/logforge")
        r = self.client.post("/v1/images", {"image": {"uri": ref}})
        self.assertGreaterEqual(r.status, 400, r)
        with open(self.corrald.log_path, "rb") as f:
            lines = f.read().decode("utf-8", "replace").splitlines()
        self.assertTrue(any("logforge" in l for l in lines), "the failed pull was not logged")
        forged = [l for l in lines if l.startswith("2026-01-01T00:00:00.000Z")]
        self.assertEqual(forged, [], "a layer entry's name forged a corrald log line")
        self.assert_platform_alive()

    def test_blob_larger_than_the_limit_is_not_downloaded(self):
        # attack: a registry serves an uncompressed 100 MiB layer of random bytes: the blob itself
        # lands on the state fs in full before unpacking counts a byte against the 32Mi limit
        layer = oci.layer_tar([oci.F("noise", os.urandom(100 * MIB))])
        d = os.path.join(self.tmp, "bigblob")
        info = oci.write_layout(d, [(layer, "tar")])
        del layer
        ref = self.reg.push(d, "evil/bigblob")
        neighbour = self.create(**SPEC)["id"]
        before = free_bytes(self.corrald.state_dir)
        r, lowest = self.pull_watching(ref)
        self.assertGreater(lowest, before - (LIMIT_MIB + 8) * MIB,
                           "the pull took %.1f MiB of the %d MiB state fs"
                           % ((before - lowest) / MIB, STATE_MIB))
        self.assertEqual(r.status, 422, "%r\n%s" % (r, self.corrald.log_tail(10)))
        self.assertEqual(r.json()["code"], "SANDBOX::IMAGE_TOO_LARGE")
        self.assertIn("--image-unpacked-max", r.json()["message"])
        self.assertNotIn(info["layers"][-1][7:], oci.store_layers(self.corrald.state_dir))
        self.assertEqual(oci.store_tmp(self.corrald.state_dir), [], "no blob or half layer left")
        self.assert_platform_alive(neighbour)


if __name__ == "__main__":
    main()
