#!/usr/bin/env python3
"""
Volumes (the create request's `volumes`, docs/volumes.md): host directories under
--allow-host-path and named volumes (pvc) kept by corral, read-write and read-only, with subPath,
shared between sandboxes, surviving them, and removed with them when asked.
"""
import os
import subprocess
import tempfile

from harness import CorralTestCase, binary, main, mounts_under, safe_rmtree


def host_vol(name, path, mount, **kw):
    v = {"name": name, "host": {"path": path}, "mountPath": mount}
    v.update(kw)
    return v


def pvc_vol(name, claim, mount, pvc=None, **kw):
    p = {"claimName": claim}
    p.update(pvc or {})
    v = {"name": name, "pvc": p, "mountPath": mount}
    v.update(kw)
    return v


class Volumes(CorralTestCase):
    @classmethod
    def setUpClass(cls):
        cls.allowed = tempfile.mkdtemp(prefix="corral-test-allowed-")
        os.makedirs(os.path.join(cls.allowed, "data", "sub"))
        with open(os.path.join(cls.allowed, "data", "from-host"), "w") as f:
            f.write("host wrote this\n")
        with open(os.path.join(cls.allowed, "data", "sub", "only-sub"), "w") as f:
            f.write("in sub\n")
        with open(os.path.join(cls.allowed, "agent.sh"), "w") as f:
            f.write("#!/bin/sh\necho agent ran\n")
        os.chmod(os.path.join(cls.allowed, "agent.sh"), 0o755)
        cls.corrald_kwargs = {"extra_args": ["--allow-host-path", cls.allowed,
                                             "--volume-size", "64Mi"]}
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            safe_rmtree(cls.allowed)

    def volumes_dir(self, name=""):
        return os.path.join(self.corrald.state_dir, "volumes", name)

    def test_host_read_write_seen_by_host_and_another_sandbox(self):
        data = os.path.join(self.allowed, "data")
        a = self.create(volumes=[host_vol("data", data, "/mnt/data")])["id"]
        self.assertEqual(self.sh(a, "cat /mnt/data/from-host"), "host wrote this")
        self.run_ok(a, "echo from sandbox a > /mnt/data/from-a && mkdir -p /mnt/data/d/e")
        with open(os.path.join(data, "from-a")) as f:
            self.assertEqual(f.read(), "from sandbox a\n")
        # Idmapped: what sandbox root writes is owned by on-disk root, not by its host id range.
        st = os.stat(os.path.join(data, "from-a"))
        self.assertEqual((st.st_uid, st.st_gid), (0, 0))
        b = self.create(volumes=[host_vol("data", data + "/", "/srv/x/")])["id"]
        self.assertEqual(self.sh(b, "cat /srv/x/from-a"), "from sandbox a")
        self.assertEqual(self.sh(b, "stat -c %u:%g /srv/x/from-a"), "0:0")
        # nosuid, nodev on the volume's mount in the sandbox
        opts = self.sh(b, "awk '$5 == \"/srv/x\" {print $6}' /proc/self/mountinfo")
        self.assertIn("nosuid", opts)
        self.assertIn("nodev", opts)

    def test_host_read_only(self):
        data = os.path.join(self.allowed, "data")
        sid = self.create(volumes=[host_vol("ro", data, "/ro", readOnly=True)])["id"]
        self.assertEqual(self.sh(sid, "cat /ro/from-host"), "host wrote this")
        res = self.client.run(sid, "echo x > /ro/nope")
        self.assertNotEqual(res.exit_code, 0, res)
        self.assertIn("Read-only file system", res.stderr)
        res = self.client.run(sid, "rm /ro/from-host")
        self.assertNotEqual(res.exit_code, 0, res)
        self.assertFalse(os.path.exists(os.path.join(data, "nope")))
        self.assertTrue(os.path.exists(os.path.join(data, "from-host")))
        # not even sandbox root can make it writable again (no CAP_SYS_ADMIN over the mount)
        res = self.client.run(sid, "mount -o remount,rw /ro && echo x > /ro/nope")
        self.assertNotEqual(res.exit_code, 0, res)
        self.assertFalse(os.path.exists(os.path.join(data, "nope")))

    def test_host_sub_path(self):
        sid = self.create(volumes=[host_vol("s", os.path.join(self.allowed, "data"), "/s",
                                            subPath="sub")])["id"]
        self.assertEqual(self.sh(sid, "ls -A /s"), "only-sub")
        r = self.create(expect=400, volumes=[host_vol("s", os.path.join(self.allowed, "data"),
                                                      "/s", subPath="missing")])
        self.assertEqual(r["code"], "VOLUME::HOST_PATH_NOT_FOUND", r)

    def test_host_file_volume(self):
        # Harnesses mount the agent binary instead of downloading it in every rollout.
        sid = self.create(volumes=[host_vol("agent", os.path.join(self.allowed, "agent.sh"),
                                            "/opt/agent/run.sh", readOnly=True)])["id"]
        self.assertEqual(self.sh(sid, "/opt/agent/run.sh"), "agent ran")

    def test_named_shared_rw_ro_and_kept(self):
        a = self.create(volumes=[pvc_vol("ws", "shared-ws", "/workspace")])["id"]
        self.run_ok(a, "echo from-a > /workspace/shared.txt")
        self.assertEqual(self.sh(a, "ls -A /workspace"), "shared.txt", "an empty volume to start")
        b = self.create(volumes=[pvc_vol("ws", "shared-ws", "/workspace", readOnly=True)])["id"]
        self.assertEqual(self.sh(b, "cat /workspace/shared.txt"), "from-a")
        res = self.client.run(b, "echo x >> /workspace/shared.txt")
        self.assertNotEqual(res.exit_code, 0, res)
        self.assertIn("Read-only file system", res.stderr)
        self.assertEqual(self.sh(a, "stat -c %u /workspace/shared.txt"), "0")
        # A write in a is seen in b at once: one file system, not a copy.
        self.run_ok(a, "echo again > /workspace/second.txt")
        self.assertEqual(self.sh(b, "cat /workspace/second.txt"), "again")
        for sid in (a, b):
            self.client.delete_sandbox(sid)
            self.wait_gone(sid)
        # No sandbox uses it: not mounted on the host any more, but its data is kept.
        self.wait_until(lambda: not mounts_under(self.volumes_dir()), 10,
                        msg="the volume's host mount to go")
        self.assertTrue(os.path.exists(self.volumes_dir("shared-ws")))
        c = self.create(volumes=[pvc_vol("ws", "shared-ws", "/w")])["id"]
        self.assertEqual(self.sh(c, "cat /w/shared.txt /w/second.txt"), "from-a\nagain")

    def test_named_sub_path(self):
        a = self.create(volumes=[pvc_vol("v", "subs", "/v", subPath="task/1")])["id"]
        self.run_ok(a, "echo one > /v/f")
        b = self.create(volumes=[pvc_vol("v", "subs", "/all")])["id"]
        self.assertEqual(self.sh(b, "cat /all/task/1/f"), "one")
        self.assertEqual(self.sh(a, "ls -A /v"), "f", "a sees only its subPath")

    def test_named_create_if_not_exists_false(self):
        r = self.create(expect=400, volumes=[pvc_vol("v", "never-made", "/v",
                                                     {"createIfNotExists": False})])
        self.assertEqual(r["code"], "VOLUME::PVC_NOT_FOUND", r)
        self.assertIn("never-made", r["message"])
        self.assertFalse(os.path.exists(self.volumes_dir("never-made")))

    def test_named_delete_on_sandbox_termination(self):
        spec = {"deleteOnSandboxTermination": True}
        a = self.create(volumes=[pvc_vol("v", "scratch", "/v", spec)])["id"]
        b = self.create(volumes=[pvc_vol("v", "scratch", "/v", spec)])["id"]
        self.run_ok(a, "echo x > /v/x")
        self.client.delete_sandbox(a)
        self.wait_gone(a)
        # b still uses it: kept, and still there for b
        self.assertTrue(os.path.exists(self.volumes_dir("scratch")))
        self.assertEqual(self.sh(b, "cat /v/x"), "x")
        self.client.delete_sandbox(b)
        self.wait_gone(b)
        self.wait_until(lambda: not os.path.exists(self.volumes_dir("scratch")), 10,
                        msg="the volume to be removed with its last sandbox")

    def test_named_size(self):
        sid = self.create(volumes=[pvc_vol("v", "small", "/v", {"storage": "16Mi"})])["id"]
        size_kb = int(self.sh(sid, "df -k /v | awk 'NR==2 {print $2}'"))
        self.assertLessEqual(size_kb, 16 * 1024)
        self.assertGreater(size_kb, 8 * 1024)
        r = self.create(expect=400, volumes=[pvc_vol("v", "big", "/v", {"storage": "1Gi"})])
        self.assertIn("--volume-size", r["message"])

    def test_host_image_masks(self):
        # The host image's private paths are masked after pivot_root: volumes go on top of the
        # masks, so /root (a writable tmpfs) can hold one; the read-only masks cannot.
        data = os.path.join(self.allowed, "data")
        sid = self.create(volumes=[host_vol("r", data, "/root/agent", readOnly=True),
                                   pvc_vol("w", "in-work", "/tmp/w")])["id"]
        self.assertEqual(self.sh(sid, "cat /root/agent/from-host"), "host wrote this")
        self.run_ok(sid, "echo ok > /tmp/w/f")
        if os.path.isdir("/home"):  # masked by an empty read-only tmpfs
            r = self.create(expect=400, volumes=[host_vol("h", data, "/home/someone/data")])
            self.assertEqual(r["code"], "VOLUME::INVALID_MOUNT_PATH", r)

    def test_list_and_delete(self):
        sid = self.create(volumes=[pvc_vol("v", "listed", "/v", {"storage": "32Mi"})])["id"]
        self.run_ok(sid, "dd if=/dev/zero of=/v/f bs=1M count=4 && sync")
        items = {i["name"]: i for i in self.client.get("/v1/volumes").json()["items"]}
        self.assertEqual(items["listed"]["sizeBytes"], 32 << 20)
        self.assertGreaterEqual(items["listed"]["usedBytes"], 4 << 20)
        self.assertEqual(items["listed"]["sandboxes"], 1)
        self.assertIs(items["listed"]["deleteOnSandboxTermination"], False)
        r = self.client.delete("/v1/volumes/listed")
        self.assertEqual(r.status, 409, r)
        self.assertEqual(r.json()["code"], "VOLUME::IN_USE")
        self.assertEqual(self.sh(sid, "wc -c < /v/f"), str(4 << 20), "still there after a refusal")
        # the CLI
        env = dict(os.environ, CORRAL_SERVER=self.corrald.base_url)
        env.pop("CORRAL_API_KEY", None)
        p = subprocess.run([binary("corral"), "volume", "ls"], capture_output=True, text=True,
                           env=env, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stdout, r"listed\s+32Mi\s+\S+\s+1\s+no")
        self.client.delete_sandbox(sid)
        self.wait_gone(sid)
        p = subprocess.run([binary("corral"), "volume", "rm", "listed"], capture_output=True,
                           text=True, env=env, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertFalse(os.path.exists(self.volumes_dir("listed")))
        r = self.client.delete("/v1/volumes/listed")
        self.assertEqual(r.status, 404, r)
        self.assertEqual(r.json()["code"], "VOLUME::NOT_FOUND")
        self.assertNotIn("listed", [i["name"] for i in self.client.get("/v1/volumes").json()["items"]])

    def test_validation(self):
        cases = [
            ([{"name": "Bad_Name", "pvc": {"claimName": "x"}, "mountPath": "/x"}], 422, None),
            ([{"name": "v", "pvc": {"claimName": "Bad_Name"}, "mountPath": "/x"}], 422, None),
            ([{"name": "v", "mountPath": "/x"}], 400, "VOLUME::INVALID_BACKEND"),
            ([{"name": "v", "pvc": {"claimName": "x"}, "host": {"path": self.allowed},
               "mountPath": "/x"}], 400, "VOLUME::INVALID_BACKEND"),
            ([{"name": "v", "ossfs": {"bucket": "b"}, "mountPath": "/x"}], 400,
             "VOLUME::INVALID_BACKEND"),
            ([pvc_vol("v", "x", "relative")], 400, "VOLUME::INVALID_MOUNT_PATH"),
            ([pvc_vol("v", "x", "/")], 400, "VOLUME::INVALID_MOUNT_PATH"),
            ([pvc_vol("v", "x", "/proc/sys")], 400, "VOLUME::INVALID_MOUNT_PATH"),
            ([pvc_vol("v", "x", "/a"), pvc_vol("v", "y", "/b")], 400, None),
            ([pvc_vol("v", "x", "/a"), pvc_vol("w", "y", "/a/")], 400,
             "VOLUME::INVALID_MOUNT_PATH"),
            ([pvc_vol("v", "x", "/a", readOnly="yes")], 422, None),
            ("not-a-list", 422, None),
        ]
        for vols, status, code in cases:
            r = self.create(expect=status, volumes=vols)
            if code:
                self.assertEqual(r["code"], code, (vols, r))
            self.assertIn("volumes", r["message"], (vols, r))
        self.assertEqual(self.client.all_sandbox_ids(), [], "nothing left behind")
        # An empty list and null are no volumes at all.
        self.create(volumes=[])
        self.create(volumes=None)


if __name__ == "__main__":
    main()
