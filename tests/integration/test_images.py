#!/usr/bin/env python3
"""Registry images end to end: test images built as OCI layouts, pushed with skopeo to Debian's
docker-registry on loopback (plain and with htpasswd basic auth), and created as sandboxes through
a real corrald: layers, whiteouts, opaque dirs, links, setuid, owners as seen inside, Env,
WorkingDir, User, pull policies, shared pulls, typed pull errors, a SWE-bench-shaped task."""

import base64
import json
import os
import subprocess
import sys
import time
import tempfile
import threading
import urllib.parse
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import CorralTestCase, Corrald, binary, free_port, main  # noqa: E402
import oci  # noqa: E402
from oci import C, D, F, H, L, X  # noqa: E402
import struct  # noqa: E402

PULL_FAILED = "SANDBOX::IMAGE_PULL_FAILED"


class Images(CorralTestCase):

    @classmethod
    def setUpClass(cls):
        cls.reg = oci.Registry()
        cls.authreg = oci.Registry(user="alice", password="s3cret-pw")
        # Bearer flow: a token server needing credentials, and one handing tokens to anyone
        # (Docker Hub's anonymous pulls), both in front of cls.reg.
        cls.tokreg = oci.TokenProxy(cls.reg.host, user="bob", password="t0ken-pw")
        cls.anonreg = oci.TokenProxy(cls.reg.host)
        # ...and one whose challenge names a token server on another port (realmsrv's).
        cls.realmsrv = oci.TokenProxy(cls.reg.host)
        cls.realmreg = oci.TokenProxy(cls.reg.host)
        cls.realmsrv.token = cls.realmreg.token
        cls.realmreg.realm = cls.realmsrv.host
        cls.authfile = os.path.join(tempfile.mkdtemp(prefix="corral-auth-"), "config.json")
        with open(cls.authfile, "w") as f:
            json.dump({"auths": {cls.authreg.host: {"auth": base64.b64encode(
                b"alice:s3cret-pw").decode()}}}, f)
        cls.corrald_kwargs = {"extra_args": [
            "--insecure-registry", cls.reg.host, "--insecure-registry", cls.authreg.host,
            "--insecure-registry", cls.tokreg.host, "--insecure-registry", cls.anonreg.host,
            "--insecure-registry", cls.realmreg.host]}
        cls.tmp = tempfile.mkdtemp(prefix="corral-images-")
        cls.base = oci.base_layer()
        try:
            super().setUpClass()
        except Exception:
            cls.stop_registries()
            raise

    @classmethod
    def stop_registries(cls):
        cls.tokreg.stop()
        cls.anonreg.stop()
        cls.realmreg.stop()
        cls.realmsrv.stop()
        cls.reg.stop()
        cls.authreg.stop()

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        cls.stop_registries()
        oci.shutil.rmtree(cls.tmp, ignore_errors=True)
        oci.shutil.rmtree(os.path.dirname(cls.authfile), ignore_errors=True)

    def layout(self, name, layers, config=None, compression="gzip", **kw):
        d = os.path.join(self.tmp, name)
        info = oci.write_layout(d, layers, config=config, compression=compression, **kw)
        return d, info

    def sh(self, sid, cmd, **kw):
        return self.run_ok(sid, cmd, **kw).stdout.rstrip("\n")

    def create_image(self, ref, expect=202, **spec):
        return self.create(image={"uri": ref}, expect=expect, **spec)

    # --- the image as the sandbox sees it -------------------------------------------------------

    def test_layers_whiteouts_links_owners(self):
        lower = oci.layer_tar([
            D("data"), F("data/keep", "keep"), F("data/gone", "gone"),
            D("opq"), F("opq/old1", "1"), F("opq/old2", "2"),
            D("home"), D("home/u", uid=1000, gid=1000, mode=0o700),
            F("home/u/secret", "mine", uid=1000, gid=1000, mode=0o600),
            F("etc/passwd", "root:x:0:0:root:/root:/bin/sh\nu:x:1000:1000::/home/u:/bin/sh\n"),
        ])
        upper = oci.layer_tar([
            D("data"), F("data/.wh.gone"),
            D("opq"), F("opq/.wh..wh..opq"), F("opq/new", "new"),
            F("bin-suid", "#!/bin/sh\n", mode=0o4755),
            F("target", "T"), H("hard", "target"), L("soft", "target"), L("abs", "/data/keep"),
            C("devnode", 1, 3),
            # cap_net_raw+ep as a v2 security.capability xattr, and a user xattr
            X(F("capped", "c", mode=0o755),
              security__capability=struct.pack("<IIIII", 0x02000001, 1 << 13, 0, 0, 0),
              user__note=b"kept"),
        ])
        d, info = self.layout("multi", [self.base, lower, (upper, "zstd")])
        ref = self.reg.push(d, "t/multi")
        sid = self.create_image(ref)["id"]
        self.assertEqual(self.sh(sid, "cat /data/keep"), "keep")
        self.assertEqual(self.sh(sid, "ls /data"), "keep", "whiteout hides data/gone")
        self.assertEqual(self.sh(sid, "ls /opq"), "new", "opaque dir hides the lower entries")
        # owners as in the image, through the user namespace
        self.assertEqual(self.sh(sid, "stat -c '%u:%g %a' /home/u /home/u/secret"),
                         "1000:1000 700\n1000:1000 600")
        self.assertEqual(self.sh(sid, "stat -c '%u %a' /bin-suid"), "0 4755")
        self.assertEqual(self.sh(sid, "stat -c %h /hard"), "2")
        self.assertEqual(self.sh(sid, "cat /hard /soft /abs"), "TTkeep")
        self.assertEqual(self.sh(sid, "readlink /soft"), "target")
        # a device node is kept but cannot be opened (the overlay is nodev)
        self.assertEqual(self.sh(sid, "stat -c '%F %t,%T' /devnode"), "character special file 1,3")
        res = self.client.run(sid, "cat /devnode")
        self.assertNotEqual(res.exit_code, 0, res)
        # xattrs and file capabilities are kept in the store's layer
        top = os.path.join(self.corrald.state_dir, "images", "layers", info["layers"][2][7:])
        self.assertEqual(os.getxattr(os.path.join(top, "capped"), "user.note"), b"kept")
        self.assertEqual(os.getxattr(os.path.join(top, "capped"), "security.capability")[4:8],
                         struct.pack("<I", 1 << 13))
        # the user's file is the user's: uid 1000 reads it, another uid does not
        self.assertEqual(self.run_ok(sid, "cat /home/u/secret", uid=1000).stdout, "mine")
        res = self.client.run(sid, "cat /home/u/secret", uid=1001)
        self.assertNotEqual(res.exit_code, 0, res)
        # writes go to the sandbox's own layer, never into the store
        self.sh(sid, "echo changed > /data/keep")
        self.assertEqual(self.sh(sid, "cat /data/keep"), "changed")
        sid2 = self.create_image(ref)["id"]
        self.assertEqual(self.sh(sid2, "cat /data/keep"), "keep")
        # no host path or id in the sandbox's mount table
        mi = self.sh(sid, "cat /proc/self/mountinfo")
        self.assertNotIn(self.corrald.state_dir, mi)
        self.assertNotIn("images", mi)

    def test_config_env_workdir_user(self):
        top = oci.layer_tar([
            F("etc/passwd", "root:x:0:0:root:/root:/bin/sh\napp:x:4242:4343::/w:/bin/sh\n"),
            F("etc/group", "root:x:0:\napp:x:4343:\n")])
        d, _ = self.layout("cfg", [self.base, top], config={
            "Env": ["PATH=/usr/bin:/bin", "FROM_IMAGE=1", "OVERRIDE=image"],
            "WorkingDir": "/w/sub", "User": "app"})
        ref = self.reg.push(d, "t/cfg", "v1")
        sid = self.create_image(ref, env={"OVERRIDE": "request"},
                                entrypoint=["sh", "-c", "id -u > /tmp/entry-uid; pwd > /tmp/entry-cwd; exec sleep infinity"])["id"]
        self.assertEqual(self.sh(sid, "echo $FROM_IMAGE $OVERRIDE"), "1 request")
        self.assertEqual(self.sh(sid, "pwd"), "/w/sub", "commands start in WorkingDir")
        for _ in range(100):
            res = self.client.run(sid, "cat /tmp/entry-uid /tmp/entry-cwd")
            if res.exit_code == 0:
                break
        self.assertEqual(res.stdout.rstrip("\n"), "4242\n/w/sub", "the entrypoint runs as User in WorkingDir")
        self.assertEqual(self.sh(sid, "id -u"), "0", "commands keep the API's uid default")

    def test_pull_policy_and_normalized_errors(self):
        d, _ = self.layout("policy", [self.base])
        ref = "%s/t/policy:v1" % self.reg.host
        r = self.client.create_sandbox_raw(image={"uri": ref}, extensions={"imagePullPolicy": "Never"})
        self.assertEqual(r.status, 422, r)
        self.assertEqual(r.json()["code"], PULL_FAILED)
        self.assertIn("Never", r.json()["message"])
        r = self.client.create_sandbox_raw(image={"uri": ref})
        self.assertEqual(r.status, 422, r)
        self.assertEqual(r.json()["code"], PULL_FAILED)
        self.assertIn("not found", r.json()["message"])
        self.reg.push(d, "t/policy", "v1")
        self.create_image(ref)
        self.create_image(ref, extensions={"opensandbox.extensions.image-pull-policy": "Never"})
        self.create_image(ref, extensions={"imagePullPolicy": "Always"})
        r = self.client.create_sandbox_raw(image={"uri": ref}, extensions={"imagePullPolicy": "Sometimes"})
        self.assertEqual(r.status, 422, r)
        self.assertIn("imagePullPolicy", r.text)

    def test_concurrent_creates_share_one_pull(self):
        N = 50
        d, _ = self.layout("shared", [self.base, oci.layer_tar([F("marker", "m")])])
        ref = self.reg.push(d, "t/shared")
        before = self.corrald.log_tail(100000).count("pulling %s" % ref)
        results = []

        def one():
            c = self.corrald.client(timeout=120)
            results.append(c.create_sandbox_raw(image={"uri": ref}))
            c.close()
        threads = [threading.Thread(target=one) for _ in range(N)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for r in results:
            if r.status == 202:
                self.addCleanup(self._cleanup_sandbox, r.json()["id"])
        self.assertEqual([r.status for r in results], [202] * N, results)
        pulls = self.corrald.log_tail(100000).count("pulling %s" % ref) - before
        self.assertEqual(pulls, 1, "one pull for %d concurrent creates" % N)

    def test_corrupted_blob_is_a_typed_error_and_discarded(self):
        d, info = self.layout("corrupt", [self.base, oci.layer_tar([F("x", "original")])])
        ref = self.reg.push(d, "t/corrupt")
        path = self.reg.blob_path(info["layers"][1])
        with open(path, "r+b") as f:
            data = f.read()
            f.seek(0)
            f.write(bytes(b ^ 0xFF for b in data[:16]))
        r = self.client.create_sandbox_raw(image={"uri": ref})
        self.assertEqual(r.status, 502, r)
        self.assertEqual(r.json()["code"], PULL_FAILED)
        self.assertIn("digest mismatch", r.json()["message"])
        self.assertNotIn(info["layers"][1][7:], oci.store_layers(self.corrald.state_dir))
        self.assertEqual(oci.store_tmp(self.corrald.state_dir), [], "the bad blob is discarded")

    def test_diff_id_mismatch_is_a_typed_error_and_discarded(self):
        # The blob is true to its digest, but the config's diff_id is not the digest of the tar
        # it decompresses to: the layer is refused as it is unpacked, never reaches layers/.
        top = oci.layer_tar([F("y", "what the config does not describe")])
        lie = oci.sha256(b"some other tar")
        for compression in ("gzip", "zstd", "none"):
            d, info = self.layout("diffid-" + compression, [self.base, top],
                                  compression=compression,
                                  diff_ids_of=lambda ids: [ids[0], lie])
            ref = self.reg.push(d, "t/diffid-" + compression)
            r = self.client.create_sandbox_raw(image={"uri": ref})
            self.assertEqual(r.status, 502, r)
            self.assertEqual(r.json()["code"], PULL_FAILED)
            msg = r.json()["message"]
            self.assertIn("digest mismatch", msg)
            self.assertIn("diff_id is %s" % lie, msg)
            self.assertIn(oci.sha256(top), msg, "names the digest the tar has")
            self.assertIn(info["layers"][1], msg, "names the layer")
            self.assertNotIn(info["layers"][1][7:], oci.store_layers(self.corrald.state_dir))
            self.assertEqual(oci.store_tmp(self.corrald.state_dir), [])
        # A config with fewer diff_ids than layers is no valid image either.
        d, info = self.layout("diffid-short", [self.base, top],
                              diff_ids_of=lambda ids: ids[:1])
        r = self.client.create_sandbox_raw(image={"uri": self.reg.push(d, "t/diffid-short")})
        self.assertEqual(r.status, 502, r)
        self.assertIn("rootfs.diff_ids", r.json()["message"])
        self.assertNotIn(info["layers"][1][7:], oci.store_layers(self.corrald.state_dir))
        # The same layers with a true config pull and run.
        d, _ = self.layout("diffid-true", [self.base, top])
        sid = self.create_image(self.reg.push(d, "t/diffid-true"))["id"]
        self.assertEqual(self.sh(sid, "cat /y"), "what the config does not describe")

    def test_diff_id_checked_for_a_layer_already_in_the_store(self):
        # A second image shares a layer blob already in the store (not unpacked again) but its
        # config names another diff_id for it: refused, the stored layer and its image intact.
        top = oci.layer_tar([F("shared", "the shared layer")])
        d, info = self.layout("diffid-shared", [self.base, top])
        sid = self.create_image(self.reg.push(d, "t/diffid-shared"))["id"]
        hexd = info["layers"][1][7:]
        with open(os.path.join(self.corrald.state_dir, "images", "diffids", hexd)) as f:
            self.assertEqual(f.read().strip(), oci.sha256(top))
        lie = oci.sha256(b"another tar")
        d, _ = self.layout("diffid-shared-lie", [self.base, top],
                           diff_ids_of=lambda ids: [ids[0], lie])
        r = self.client.create_sandbox_raw(image={"uri": self.reg.push(d, "t/diffid-shared-lie")})
        self.assertEqual(r.status, 502, r)
        self.assertIn("digest mismatch", r.json()["message"])
        self.assertIn("in the store with diff_id %s" % oci.sha256(top), r.json()["message"])
        self.assertIn(hexd, oci.store_layers(self.corrald.state_dir))
        self.assertEqual(self.sh(sid, "cat /shared"), "the shared layer")

    def test_auth(self):
        d, _ = self.layout("auth", [self.base, oci.layer_tar([F("private", "p")])])
        ref = self.authreg.push(d, "t/private")
        r = self.client.create_sandbox_raw(image={"uri": ref})
        self.assertEqual(r.status, 422, r)
        self.assertEqual(r.json()["code"], PULL_FAILED)
        self.assertIn("unauthorized", r.json()["message"])
        r = self.client.create_sandbox_raw(image={"uri": ref, "auth": {"username": "alice", "password": "wrong"}})
        self.assertEqual(r.status, 422, r)
        self.assertIn("unauthorized", r.json()["message"])
        self.assertNotIn("wrong", r.text, "the password is never echoed")
        self.assertEqual(oci.store_tmp(self.corrald.state_dir), [])

    def test_auth_good_credentials(self):
        d, _ = self.layout("auth2", [self.base, oci.layer_tar([F("private", "p2")])])
        ref = self.authreg.push(d, "t/private2")
        sid = self.create(image={"uri": ref, "auth": {"username": "alice", "password": "s3cret-pw"}})["id"]
        self.assertEqual(self.sh(sid, "cat /private"), "p2")

    def test_unreachable_registry(self):
        r = self.client.create_sandbox_raw(image={"uri": "127.0.0.1:1/t/none:v1"})
        self.assertEqual(r.status, 502, r)
        self.assertEqual(r.json()["code"], PULL_FAILED)
        self.assertIn("unreachable", r.json()["message"])

    def test_bearer_token_flow(self):
        d, _ = self.layout("bearer", [self.base, oci.layer_tar([F("b", "bearer")])])
        self.reg.push(d, "t/bearer")
        ref = "%s/t/bearer:latest" % self.tokreg.host
        r = self.client.create_sandbox_raw(image={"uri": ref})
        self.assertEqual(r.status, 422, r)
        self.assertIn("unauthorized", r.json()["message"])
        self.assertIn("bad credentials for the token server", r.json()["message"],
                      "the token server's own words")
        before = self.tokreg.token_requests
        sid = self.create(image={"uri": ref, "auth": {"username": "bob", "password": "t0ken-pw"}})["id"]
        self.assertEqual(self.sh(sid, "cat /b"), "bearer")
        self.assertEqual(self.tokreg.token_requests - before, 1, "one token for the whole pull")
        # anonymous tokens (Docker Hub style)
        sid = self.create_image("%s/t/bearer:latest" % self.anonreg.host)["id"]
        self.assertEqual(self.sh(sid, "cat /b"), "bearer")

    def test_bearer_token_realm_on_another_port(self):
        # The registry's challenge names a token server on another port than its own: the
        # confined process that talks to the registry may not reach it at first, and is started
        # again, allowed to; one token serves the whole pull.
        front, realm = self.realmreg, self.realmsrv
        d, _ = self.layout("realm", [self.base, oci.layer_tar([F("r", "realm")])])
        self.reg.push(d, "t/realm")
        sid = self.create_image("%s/t/realm:latest" % front.host)["id"]
        self.assertEqual(self.sh(sid, "cat /r"), "realm")
        self.assertEqual((front.token_requests, realm.token_requests), (0, 1),
                         "one token, from the realm's server")

    def test_registry_auth_file(self):
        d, _ = self.layout("authfile", [self.base, oci.layer_tar([F("f", "from-file")])])
        ref = self.authreg.push(d, "t/authfile")
        c = Corrald(extra_args=["--insecure-registry", self.authreg.host,
                                "--registry-auth", self.authfile]).start()
        try:
            cl = c.client(timeout=120)
            r = cl.create_sandbox_raw(image={"uri": ref})
            self.assertEqual(r.status, 202, "%r\n%s" % (r, c.log_tail(10)))
            res = cl.run(r.json()["id"], "cat /f")
            self.assertEqual(res.stdout, "from-file")
            cl.delete_sandbox(r.json()["id"])
            cl.close()
        finally:
            c.shutdown_and_check()

    def test_registry_auth_path_not_utf8_is_refused_at_start(self):
        # The pull worker gets its job as JSON: a path jansson cannot encode failed every pull
        # later ("prepare the pull worker: Cannot allocate memory"); it is refused at start.
        tmp = tempfile.mkdtemp(prefix="corral-authpath-")
        self.addCleanup(subprocess.run, ["rm", "-rf", tmp])
        auth = os.path.join(tmp.encode(), b"auth-\xe9.json")
        with open(auth, "w") as f:
            json.dump({"auths": {}}, f)
        p = subprocess.Popen([binary("corrald").encode(), b"--listen",
                              b"127.0.0.1:%d" % free_port(),
                              b"--state-dir", os.path.join(tmp, "state").encode(),
                              b"--cgroup-name", b"corral-test-authpath-%d" % os.getpid(),
                              b"--sandbox-subnet", b"none", b"--registry-auth", auth],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            _, err = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.terminate()
            _, err = p.communicate()
            self.fail("corrald started with a --registry-auth path no pull could use: %r" % err)
        self.assertEqual(p.returncode, 2, err)
        self.assertIn(b"--registry-auth: the path is not UTF-8", err)

    def test_pull_worker_that_cannot_exec_is_corralds_failure(self):
        # The exec of the pull worker fails (EACCES, injected by strace): that is a 502 of
        # corrald's, not the 422 that exec's errno would make of it (a bad image, the client's).
        d, _ = self.layout("noexec", [self.base, oci.layer_tar([F("n", "noexec")])])
        ref = self.reg.push(d, "t/noexec")
        c = Corrald(extra_args=["--insecure-registry", self.reg.host]).start()
        try:
            tracer = subprocess.Popen(["strace", "-f", "-p", str(c.proc.pid), "-e", "trace=execve",
                                       "-e", "inject=execve:error=EACCES"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            try:
                self.assertIn("attached", tracer.stderr.readline())
                cl = c.client(timeout=120)
                r = cl.post("/v1/images", {"image": {"uri": ref}})
            finally:
                tracer.kill()
                tracer.wait()
                tracer.stderr.close()
            self.assertEqual(r.status, 502, r)
            self.assertIn("exec the pull worker: Permission denied", r.json()["message"])
            # the next pull, untraced, works
            self.assertEqual(cl.post("/v1/images", {"image": {"uri": ref}}).status, 200)
            cl.close()
        finally:
            c.shutdown_and_check()

    def test_internal_pull_worker_argument_typed_by_an_operator(self):
        # corrald --internal-pull-worker outside corrald (no job, no result pipe) exited 0 saying
        # nothing; it says what the argument is and fails.
        p = subprocess.run([binary("corrald"), "--internal-pull-worker"], stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 2, p)
        self.assertIn("--internal-pull-worker is corrald's own", p.stderr)

    def test_docker_hub_names_through_mirrors(self):
        d, _ = self.layout("mirrored", [self.base, oci.layer_tar([F("m", "mirrored")])])
        self.reg.push(d, "library/mirrored", "v1")
        # a dead mirror first: the next one serves the image, no Docker Hub needed
        c = Corrald(extra_args=["--insecure-registry", self.reg.host, "--insecure-registry",
                                "127.0.0.1:1", "--registry-mirror", "127.0.0.1:1",
                                "--registry-mirror", self.reg.host]).start()
        try:
            cl = c.client(timeout=120)
            r = cl.create_sandbox_raw(image={"uri": "mirrored:v1"})
            self.assertEqual(r.status, 202, "%r\n%s" % (r, c.log_tail(10)))
            self.assertEqual(cl.run(r.json()["id"], "cat /m").stdout, "mirrored")
            self.assertIn("pulling docker.io/library/mirrored:v1", c.log_tail(50),
                          "normalized like docker pull")
            names = [i["name"] for i in cl.get("/v1/images").json()["items"]]
            self.assertEqual(names, ["docker.io/library/mirrored:v1"])
            # the same image under its other spellings is the same store entry
            for uri in ("docker.io/mirrored:v1", "index.docker.io/library/mirrored:v1"):
                r2 = cl.create_sandbox_raw(image={"uri": uri},
                                           extensions={"imagePullPolicy": "Never"})
                self.assertEqual(r2.status, 202, (uri, r2))
                cl.delete_sandbox(r2.json()["id"])
            cl.delete_sandbox(r.json()["id"])
            cl.close()
        finally:
            c.shutdown_and_check()

    def test_pending_image_pulling_while_pull_runs(self):
        d, _ = self.layout("slow", [self.base, oci.layer_tar([F("s", "slow")])])
        self.reg.push(d, "t/slow")
        ref = "%s/t/slow:latest" % self.anonreg.host
        self.anonreg.delay_blobs = 1.0
        self.addCleanup(setattr, self.anonreg, "delay_blobs", 0.0)
        out = []
        t = threading.Thread(target=lambda: out.append(
            self.corrald.client(timeout=120).create_sandbox_raw(image={"uri": ref})))
        t.start()
        seen = None
        messages = set()
        deadline = time.monotonic() + 30
        while t.is_alive() and time.monotonic() < deadline:
            for sb in self.client.get("/v1/sandboxes?state=Pending").json()["items"]:
                if sb["status"].get("reason") == "ImagePulling":
                    seen = sb
                    messages.add(sb["status"].get("message", ""))
            time.sleep(0.05)
        t.join()
        self.assertEqual(out[0].status, 202, out[0])
        self.addCleanup(self._cleanup_sandbox, out[0].json()["id"])
        self.assertIsNotNone(seen, "the sandbox was Pending/ImagePulling during the pull")
        self.assertIn("t/slow", seen["status"].get("message", ""))
        self.assertTrue(any(" MB" in m for m in messages), "progress in MB: %r" % messages)

    def test_registry_dying_mid_blob(self):
        d, _ = self.layout("cut", [self.base, oci.layer_tar([F("c", "x" * 100000)])])
        self.reg.push(d, "t/cut")
        ref = "%s/t/cut:latest" % self.anonreg.host
        # Every reply cut in half: the pull gives up with a typed error, nothing half-made kept.
        self.anonreg.cut_blobs = 1000
        self.addCleanup(setattr, self.anonreg, "cut_blobs", 0)
        r = self.client.create_sandbox_raw(image={"uri": ref})
        self.assertEqual(r.status, 502, r)
        self.assertEqual(r.json()["code"], PULL_FAILED)
        self.assertEqual(oci.store_tmp(self.corrald.state_dir), [])
        # One cut reply: continued where it stopped (Range), and the pull succeeds.
        self.anonreg.cut_blobs = 1
        sid = self.create_image(ref)["id"]
        self.assertEqual(self.sh(sid, "wc -c < /c"), "100000")

    def partial_blobs(self, state_dir):
        d = os.path.join(state_dir, "images", "partial")
        return {h: os.path.getsize(os.path.join(d, h)) for h in os.listdir(d)}

    def test_partial_blob_resumed_with_range(self):
        # A pull whose blob replies are all cut keeps what it got; the next pull asks for the rest
        # (Range, 206) and transfers only that; the whole blob is still verified.
        big = os.urandom(1 << 20)
        d, info = self.layout("resume", [self.base, oci.layer_tar([F("big", big)])])
        self.reg.push(d, "t/resume")
        ref = "%s/t/resume:latest" % self.anonreg.host
        hexd = info["layers"][1][7:]
        size = os.path.getsize(self.reg.blob_path(info["layers"][1]))
        self.anonreg.cut_blobs = 1000
        self.anonreg.fault_digests = {info["layers"][1]}
        self.addCleanup(setattr, self.anonreg, "fault_digests", None)
        self.addCleanup(setattr, self.anonreg, "cut_blobs", 0)
        r = self.client.create_sandbox_raw(image={"uri": ref})
        self.assertEqual(r.status, 502, r)
        kept = self.partial_blobs(self.corrald.state_dir).get(hexd, 0)
        self.assertGreater(kept, size // 2, "the cut tries continued each other")
        self.assertLess(kept, size)
        self.assertEqual(oci.store_tmp(self.corrald.state_dir), [])
        self.assertEqual(self.anonreg.ranges[info["layers"][1]][1], "bytes=%d-" % (size // 2))
        self.anonreg.cut_blobs = 0
        self.anonreg.blob_bytes.clear()
        self.anonreg.ranges.clear()
        sid = self.create_image(ref)["id"]
        self.assertEqual(self.anonreg.ranges[info["layers"][1]], ["bytes=%d-" % kept])
        self.assertEqual(self.anonreg.blob_bytes[info["layers"][1]], size - kept,
                         "only the rest was transferred")
        self.assertEqual(self.sh(sid, "wc -c < /big"), str(1 << 20))
        with open(os.path.join(self.corrald.state_dir, "images", "layers", hexd, "big"),
                  "rb") as f:
            self.assertTrue(f.read() == big, "the resumed layer is the image's")
        self.assertNotIn(hexd, self.partial_blobs(self.corrald.state_dir))

    def test_partial_blob_without_range_support_downloads_whole(self):
        # A registry that ignores Range (200, the whole blob): the partial is dropped, the blob
        # downloaded again from its start, and verified.
        d, info = self.layout("norange", [self.base, oci.layer_tar([F("n", os.urandom(300000))])])
        self.reg.push(d, "t/norange")
        ref = "%s/t/norange:latest" % self.anonreg.host
        size = os.path.getsize(self.reg.blob_path(info["layers"][1]))
        self.anonreg.cut_blobs = 1000
        self.anonreg.fault_digests = {info["layers"][1]}
        self.addCleanup(setattr, self.anonreg, "fault_digests", None)
        self.addCleanup(setattr, self.anonreg, "cut_blobs", 0)
        self.addCleanup(setattr, self.anonreg, "ignore_range", False)
        r = self.client.create_sandbox_raw(image={"uri": ref})
        self.assertEqual(r.status, 502, r)
        self.assertIn(info["layers"][1][7:], self.partial_blobs(self.corrald.state_dir))
        self.anonreg.cut_blobs = 0
        self.anonreg.ignore_range = True
        self.anonreg.blob_bytes.clear()
        sid = self.create_image(ref)["id"]
        self.assertEqual(self.anonreg.blob_bytes[info["layers"][1]], size)
        self.assertEqual(self.sh(sid, "wc -c < /n"), "300000")
        self.assertNotIn(info["layers"][1][7:], self.partial_blobs(self.corrald.state_dir))

    def test_partial_blob_resumed_after_corrald_killed(self):
        # corrald killed -9 while a blob is half downloaded: its pull dies with it, the next
        # corrald keeps the bytes at start (tmp/ -> partial/) and its pull asks for the rest.
        d, info = self.layout("killres", [self.base, oci.layer_tar([F("k", os.urandom(1 << 20))])])
        self.reg.push(d, "t/killres")
        ref = "%s/t/killres:latest" % self.anonreg.host
        dg = info["layers"][1]
        size = os.path.getsize(self.reg.blob_path(dg))
        c = Corrald(extra_args=["--insecure-registry", self.anonreg.host])
        c.start()
        try:
            self.anonreg.stall_blobs = 1
            self.anonreg.stall_seconds = 20.0
            self.anonreg.fault_digests = {dg}
            self.addCleanup(setattr, self.anonreg, "fault_digests", None)
            self.addCleanup(setattr, self.anonreg, "stall_blobs", 0)
            t = threading.Thread(target=lambda: self._quiet_create(c, ref))
            t.start()
            tmp = os.path.join(c.state_dir, "images", "tmp")
            blob = None
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                for w in os.listdir(tmp) if os.path.isdir(tmp) else []:
                    p = os.path.join(tmp, w, "blob")
                    if w.startswith("layer-" + dg[7:]) and os.path.exists(p) and \
                            os.path.getsize(p) >= size // 2:
                        blob = p
                if blob:
                    break
                time.sleep(0.02)
            self.assertIsNotNone(blob, "the half blob reached the layer's work directory")
            c.kill9()
            t.join(30)
            self.anonreg.ranges.clear()
            self.anonreg.blob_bytes.clear()
            c.start()
            part = os.path.join(c.state_dir, "images", "partial", dg[7:])
            kept = os.path.getsize(part)
            self.assertEqual(kept, size // 2)
            cl = c.client(timeout=60)
            r = cl.create_sandbox_raw(image={"uri": ref})
            self.assertEqual(r.status, 202, "%r\n%s" % (r, c.log_tail(20)))
            self.assertEqual(self.anonreg.ranges[dg], ["bytes=%d-" % kept])
            self.assertEqual(self.anonreg.blob_bytes[dg], size - kept)
            self.assertEqual(cl.run(r.json()["id"], "wc -c < /k").stdout.strip(), str(1 << 20))
            self.assertFalse(os.path.exists(part))
            cl.delete_sandbox(r.json()["id"])
            cl.close()
        finally:
            c.shutdown_and_check()

    def _quiet_create(self, c, ref):
        cl = c.client(timeout=60)
        try:
            cl.create_sandbox_raw(image={"uri": ref})
        except OSError:
            pass  # corrald killed under the request
        finally:
            cl.close()

    def test_docker_schema2_plain_layers_and_platform_index(self):
        d, _ = self.layout("v2s2", [self.base, (oci.layer_tar([F("v", "docker")]), "none")])
        # skopeo converts to a Docker schema 2 manifest (gzip layers) on push
        ref = self.reg.push(d, "t/v2s2", fmt="v2s2")
        self.assertEqual(self.reg.manifest_type("t/v2s2", "latest"),
                         "application/vnd.docker.distribution.manifest.v2+json")
        sid = self.create_image(ref)["id"]
        self.assertEqual(self.sh(sid, "cat /v"), "docker")
        # an index with linux/arm64 and linux/amd64 picks amd64; one with arm64 only is refused
        d2 = os.path.join(self.tmp, "multi-arch")
        oci.write_index_layout(d2, [("arm64", [self.base, oci.layer_tar([F("arch", "arm64")])]),
                                    ("amd64", [self.base, oci.layer_tar([F("arch", "amd64")])])])
        ref = self.reg.push(d2, "t/multiarch", all_platforms=True)
        sid = self.create_image(ref)["id"]
        self.assertEqual(self.sh(sid, "cat /arch"), "amd64")
        # the same as a Docker manifest list
        ref = self.reg.push(d2, "t/multiarch-docker", all_platforms=True, fmt="v2s2")
        self.assertEqual(self.reg.manifest_type("t/multiarch-docker", "latest"),
                         "application/vnd.docker.distribution.manifest.list.v2+json")
        sid = self.create_image(ref)["id"]
        self.assertEqual(self.sh(sid, "cat /arch"), "amd64")
        d3 = os.path.join(self.tmp, "arm-only")
        oci.write_index_layout(d3, [("arm64", [self.base])])
        ref = self.reg.push(d3, "t/armonly", all_platforms=True)
        r = self.client.create_sandbox_raw(image={"uri": ref})
        self.assertEqual(r.status, 422, r)
        self.assertIn("no matching platform", r.json()["message"])
        self.assertIn("linux/arm64", r.json()["message"])

    def test_corrald_stopped_and_killed_mid_pull(self):
        d, _ = self.layout("midpull", [self.base, oci.layer_tar([F("m", "mid")])])
        self.reg.push(d, "t/midpull")
        ref = "%s/t/midpull:latest" % self.anonreg.host
        c = Corrald(extra_args=["--insecure-registry", self.anonreg.host])
        c.start()
        try:
            self.anonreg.delay_blobs = 2.0
            self.addCleanup(setattr, self.anonreg, "delay_blobs", 0.0)
            out = []

            def create():
                cl = c.client(timeout=60)
                try:
                    out.append(cl.create_sandbox_raw(image={"uri": ref}))
                except OSError as e:  # corrald killed under the request
                    out.append(e)
                finally:
                    cl.close()
            t = threading.Thread(target=create)
            t.start()
            while "pulling %s" % ref not in c.log_tail(50):
                time.sleep(0.05)
            # SIGTERM: the pull is stopped and the create answered, not left hanging
            c.stop()
            t.join(30)
            self.assertFalse(t.is_alive())
            self.assertEqual(out[0].status, 503, out[0])
            self.assertEqual(out[0].json()["code"], "SANDBOX::SHUTTING_DOWN")
            # kill -9 mid-pull: leftovers in tmp/ are removed at the next start
            c.start()
            t = threading.Thread(target=create)
            t.start()
            while c.log_tail(200).count("pulling %s" % ref) < 2:
                time.sleep(0.05)
            time.sleep(0.5)
            c.kill9()
            t.join(30)
            junk = os.path.join(c.state_dir, "images", "tmp", "leftover-of-a-crash")
            os.makedirs(junk)
            self.anonreg.delay_blobs = 0.0
            c.start()
            self.assertFalse(os.path.exists(junk), "tmp/ emptied at start")
            # a record whose layer went missing is dropped at start: the image is pulled again
            r = c.client(timeout=60).create_sandbox_raw(image={"uri": ref})
            self.assertEqual(r.status, 202, r)
            c.client(timeout=60).delete_sandbox(r.json()["id"])
            c.stop()
            layers = os.path.join(c.state_dir, "images", "layers")
            for h in os.listdir(layers):
                oci.shutil.rmtree(os.path.join(layers, h))
            c.start()
            self.assertEqual(os.listdir(os.path.join(c.state_dir, "images", "refs")), [])
            cl = c.client(timeout=60)
            r = cl.create_sandbox_raw(image={"uri": ref})
            self.assertEqual(r.status, 202, "%r\n%s" % (r, c.log_tail(20)))
            self.assertEqual(cl.run(r.json()["id"], "cat /m").stdout, "mid")
            cl.delete_sandbox(r.json()["id"])
            cl.close()
        finally:
            c.shutdown_and_check()

    def test_images_resource(self):
        d, info = self.layout("ahead", [self.base, oci.layer_tar([F("a", "ahead")])])
        ref = self.reg.push(d, "t/ahead", "v2")
        name = ref  # a registry with a port is already normalized
        r = self.client.post("/v1/images", {"image": {"uri": ref}})
        self.assertEqual(r.status, 200, r)
        self.assertEqual(r.json()["status"], "Pulled")
        items = {i["name"]: i for i in self.client.get("/v1/images").json()["items"]}
        self.assertIn(name, items)
        self.assertEqual(items[name]["digest"], info["manifest"])
        self.assertEqual(items[name]["layers"], 2)
        self.assertGreater(items[name]["sizeBytes"], 0)
        # in the store: a create with Never works
        sid = self.create_image(ref, extensions={"imagePullPolicy": "Never"})["id"]
        self.assertEqual(self.sh(sid, "cat /a"), "ahead")
        # in use: not deleted
        q = "/v1/images?ref=" + urllib.parse.quote(ref, safe="")
        r = self.client.delete(q)
        self.assertEqual(r.status, 409, r)
        self.assertEqual(r.json()["code"], "SANDBOX::IMAGE_IN_USE")
        self.assertIn(sid, r.json()["message"])
        self.assertEqual(self.client.delete_sandbox(sid).status, 204)
        sdir = os.path.join(self.corrald.state_dir, "sandboxes", sid)
        deadline = time.monotonic() + 30
        while os.path.exists(sdir) and time.monotonic() < deadline:
            time.sleep(0.05)  # a sandbox's layers are kept while its directory exists
        # forgotten: Never now fails, the entry is gone, its own layer is collected, the base
        # layer (shared with the other images of this suite) stays
        own, base = info["layers"][1][7:], info["layers"][0][7:]
        self.assertIn(own, oci.store_layers(self.corrald.state_dir))
        r = self.client.delete(q)
        self.assertEqual(r.status, 204, r)
        deadline = time.monotonic() + 30
        while own in oci.store_layers(self.corrald.state_dir) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertNotIn(own, oci.store_layers(self.corrald.state_dir))
        self.assertIn(base, oci.store_layers(self.corrald.state_dir))
        self.assertNotIn(name, [i["name"] for i in self.client.get("/v1/images").json()["items"]])
        r = self.client.create_sandbox_raw(image={"uri": ref}, extensions={"imagePullPolicy": "Never"})
        self.assertEqual(r.status, 422, r)
        r = self.client.delete("/v1/images?ref=" + urllib.parse.quote(ref, safe=""))
        self.assertEqual(r.status, 404, r)
        # errors are the create's
        r = self.client.post("/v1/images", {"image": {"uri": "%s/t/nope:v1" % self.reg.host}})
        self.assertEqual(r.status, 422, r)
        self.assertEqual(r.json()["code"], PULL_FAILED)
        r = self.client.post("/v1/images", {"image": {"uri": "Bad Ref"}})
        self.assertEqual(r.status, 422, r)

    def test_pull_timeout(self):
        d, _ = self.layout("timeout", [self.base, oci.layer_tar([F("t", "t")])])
        self.reg.push(d, "t/timeout")
        ref = "%s/t/timeout:latest" % self.anonreg.host
        self.anonreg.delay_blobs = 4.0
        self.addCleanup(setattr, self.anonreg, "delay_blobs", 0.0)
        c = Corrald(extra_args=["--insecure-registry", self.anonreg.host, "--pull-timeout", "1"])
        c.start()
        try:
            cl = c.client(timeout=60)
            t0 = time.monotonic()
            r = cl.create_sandbox_raw(image={"uri": ref})
            self.assertEqual(r.status, 504, r)
            self.assertEqual(r.json()["code"], PULL_FAILED)
            self.assertIn("timed out", r.json()["message"].lower())
            self.assertLess(time.monotonic() - t0, 30, "the pull is bounded, not the registry")
            self.assertEqual(oci.store_tmp(c.state_dir), [])
            cl.close()
        finally:
            c.shutdown_and_check()

    def test_disk_full_is_a_typed_error(self):
        # the store on a 24 MiB tmpfs, a 40 MB incompressible layer
        d, _ = self.layout("big", [self.base, oci.layer_tar([F("big", os.urandom(40 << 20))])])
        ref = self.reg.push(d, "t/big")
        small = tempfile.mkdtemp(prefix="corral-small-")
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m,mode=0700", "tmpfs", small],
                       check=True)
        self.addCleanup(oci.shutil.rmtree, small, True)
        self.addCleanup(subprocess.run, ["umount", "-l", small])
        args = ["--insecure-registry", self.reg.host]
        from harness import binary
        if "--default-disk" in subprocess.run([binary("corrald"), "--help"], capture_output=True,
                                              text=True).stdout:
            args += ["--default-disk", "none"]  # the store's fs is smaller than any default disk
        c = Corrald(extra_args=args)
        c.state_dir = os.path.join(small, "state")
        os.mkdir(c.state_dir)
        c.start()
        try:
            cl = c.client(timeout=120)
            r = cl.create_sandbox_raw(image={"uri": ref})
            self.assertEqual(r.status, 507, "%r\n%s" % (r, c.log_tail(10)))
            self.assertEqual(r.json()["code"], PULL_FAILED)
            self.assertIn("No space left on device", r.json()["message"])
            self.assertNotIn(small, r.text, "no host path in the reply")
            self.assertEqual(oci.store_tmp(c.state_dir), [], "nothing half-written kept")
            self.assertEqual(cl.get("/health").status, 200)
            cl.close()
        finally:
            c.shutdown_and_check()

    def corral(self, *args, stdin=None):
        from harness import binary
        env = dict(os.environ, CORRAL_SERVER=self.corrald.base_url)
        env.pop("CORRAL_API_KEY", None)
        p = subprocess.run([binary("corral")] + list(args), input=stdin, capture_output=True,
                           text=True, timeout=300, env=env)
        return p.returncode, p.stdout, p.stderr

    def test_cli_image_pull_ls_rm(self):
        d, _ = self.layout("cli", [self.base, oci.layer_tar([F("cli", "cli")])])
        ref = self.authreg.push(d, "t/cli", "v1")
        rc, out, err = self.corral("image", "pull", ref)
        self.assertEqual(rc, 2, (out, err))
        self.assertIn("SANDBOX::IMAGE_PULL_FAILED", err)
        self.assertIn("unauthorized", err)
        rc, out, err = self.corral("image", "pull", "--username", "alice", ref,
                                   stdin="s3cret-pw\n")
        self.assertEqual((rc, out.splitlines()[-1]), (0, ref), err)  # after any progress lines
        rc, out, err = self.corral("image", "ls")
        self.assertEqual(rc, 0, err)
        self.assertIn(ref, out)
        rc, out, err = self.corral("image", "ls", "--json")
        self.assertIn(ref, [i["name"] for i in json.loads(out)["items"]])
        rc, out, err = self.corral("image", "rm", ref)
        self.assertEqual(rc, 0, err)
        rc, out, err = self.corral("image", "rm", ref)
        self.assertEqual(rc, 2, (out, err))
        self.assertIn("IMAGE_NOT_FOUND", err)
        rc, out, err = self.corral("image", "frobnicate")
        self.assertEqual(rc, 1, (out, err))

    def test_cli_image_pull_progress(self):
        # The pull's progress from the server (GET /v1/images "pulls") while the request runs:
        # plain lines when stdout is a pipe, one line rewritten in place on a terminal.
        import pty
        from harness import binary
        env = dict(os.environ, CORRAL_SERVER=self.corrald.base_url)
        env.pop("CORRAL_API_KEY", None)
        self.anonreg.delay_blobs = 1.5
        self.addCleanup(setattr, self.anonreg, "delay_blobs", 0.0)
        for tty in (False, True):
            name = "t/progress-%s" % ("tty" if tty else "pipe")
            d, _ = self.layout(name.replace("/", "-"),
                               [self.base, oci.layer_tar([F("p", os.urandom(200000))])])
            self.reg.push(d, name)
            ref = "%s/%s:latest" % (self.anonreg.host, name)
            if not tty:
                rc, out, err = self.corral("image", "pull", ref)
                self.assertEqual(rc, 0, err)
                lines = out.splitlines()
                self.assertEqual(lines[-1], ref)
                prog = [l for l in lines[:-1] if l.startswith(ref + ": ")]
                self.assertTrue(prog, out)
                self.assertRegex(prog[-1], r": \d+\.\d of \d+\.\d MB \(\d+%\)$")
                self.assertNotIn("\r", out)
                continue
            mfd, sfd = pty.openpty()
            p = subprocess.Popen([binary("corral"), "image", "pull", ref], stdout=sfd,
                                 stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env)
            os.close(sfd)
            buf = b""
            while True:
                try:
                    chunk = os.read(mfd, 4096)
                except OSError:  # EIO: the terminal's last writer is gone
                    break
                if not chunk:
                    break
                buf += chunk
            os.close(mfd)
            self.assertEqual(p.wait(60), 0, p.stderr.read())
            p.stderr.close()
            text = buf.decode()
            self.assertIn("\r%s: " % ref, text)
            self.assertRegex(text, r"MB \(\d+%\)\x1b\[K")
            self.assertTrue(text.endswith("\r\x1b[K%s\r\n" % ref), repr(text[-200:]))

    def test_cli_image_inspect(self):
        d, info = self.layout("inspect", [self.base, oci.layer_tar([F("big", os.urandom(1 << 20))])],
                              config={"WorkingDir": "/work", "Env": ["K=v"]})
        ref = self.reg.push(d, "t/inspect", "v1")
        rc, out, err = self.corral("image", "pull", ref)
        self.assertEqual(rc, 0, err)
        rc, out, err = self.corral("image", "inspect", ref)
        self.assertEqual(rc, 0, err)
        j = json.loads(out)
        self.assertEqual(j["name"], ref)
        self.assertEqual([l["digest"] for l in j["layers"]], info["layers"])
        self.assertGreaterEqual(j["layers"][1]["unpackedBytes"], 1 << 20)
        self.assertLess(j["layers"][1]["unpackedBytes"], (1 << 20) + (64 << 10))
        self.assertEqual(j["unpackedBytes"], sum(l["unpackedBytes"] for l in j["layers"]))
        self.assertEqual(j["workingDir"], "/work")
        self.assertIn("K=v", j["env"])
        self.assertIs(j["inUse"], False)
        self.assertIn("lastUsedAt", j)
        sid = self.create_image(ref)["id"]
        j = json.loads(self.corral("image", "inspect", ref)[1])
        self.assertIs(j["inUse"], True)
        self.client.delete_sandbox(sid)
        # not in the store: 404 through the API, exit 2 from the CLI
        r = self.client.get("/v1/images?ref=" + urllib.parse.quote("t/never-pulled:v1"))
        self.assertEqual(r.status, 404, r)
        self.assertEqual(r.json()["code"], "SANDBOX::IMAGE_NOT_FOUND")
        rc, out, err = self.corral("image", "inspect", "t/never-pulled:v1")
        self.assertEqual(rc, 2, (out, err))
        # the list keeps its shape
        for it in self.client.get("/v1/images").json()["items"]:
            self.assertLessEqual(set(it), {"name", "digest", "layers", "sizeBytes", "platform"}, it)

    def test_store_max_evicts_least_recently_used(self):
        # The base layer's size as stored, measured through inspect on this suite's corrald.
        d, info = self.layout("evict-probe", [self.base, oci.layer_tar([F("p", "p")])])
        ref = self.reg.push(d, "t/evict-probe", "v1")
        self.assertEqual(self.client.post("/v1/images", {"image": {"uri": ref}}).status, 200)
        base = json.loads(self.corral("image", "inspect", ref)[1])["layers"][0]["unpackedBytes"]
        refs = {}
        for name in ("a", "b", "c"):
            d, info = self.layout("evict-" + name, [self.base, oci.layer_tar(
                [F(name, os.urandom(1 << 20))])])
            refs[name] = (self.reg.push(d, "t/evict-" + name, "v1"), info["layers"][1][7:])
        # Room for the base and two 1 MiB layers, not three.
        c = Corrald(extra_args=["--insecure-registry", self.reg.host,
                                "--image-store-max", str(base + (5 << 19))])
        c.start()
        try:
            cl = c.client(timeout=120)
            names = lambda: {i["name"] for i in cl.get("/v1/images").json()["items"]}  # noqa: E731
            layers = lambda: oci.store_layers(c.state_dir)  # noqa: E731
            r = cl.create_sandbox_raw(image={"uri": refs["a"][0]})
            self.assertEqual(r.status, 202, r)
            a_sid = r.json()["id"]
            self.addCleanup(lambda: c.proc.poll() is None and c.client().delete_sandbox(a_sid))
            self.assertEqual(cl.post("/v1/images", {"image": {"uri": refs["b"][0]}}).status, 200)
            self.assertEqual(names(), {refs["a"][0], refs["b"][0]}, "under the limit: all kept")
            # c goes over: b goes (a is in use by a sandbox, c was just pulled)
            self.assertEqual(cl.post("/v1/images", {"image": {"uri": refs["c"][0]}}).status, 200)
            self.assertEqual(names(), {refs["a"][0], refs["c"][0]})
            self.assertNotIn(refs["b"][1], layers())
            self.assertIn(refs["a"][1], layers())
            self.assertEqual(cl.run(a_sid, "wc -c < /a").stdout.strip(), str(1 << 20))
            # a's sandbox gone: a was used before c was pulled, so a is the one to go for b
            self.assertEqual(cl.delete_sandbox(a_sid).status, 204)
            self.wait_until(lambda: cl.get_sandbox(a_sid).status == 404, 20)
            # 404 comes once it is marked for teardown; its layers are kept until its directory
            # (and the layer list in it) is gone
            sbdir = os.path.join(c.state_dir, "sandboxes", a_sid)
            self.wait_until(lambda: not os.path.exists(sbdir), 20, msg="a's teardown to end")
            self.assertEqual(cl.post("/v1/images", {"image": {"uri": refs["b"][0]}}).status, 200)
            self.assertEqual(names(), {refs["b"][0], refs["c"][0]})
            self.assertNotIn(refs["a"][1], layers())
            cl.close()
        finally:
            c.shutdown_and_check()

    def test_import_oci_layouts(self):
        imports = tempfile.mkdtemp(prefix="corral-import-")
        self.addCleanup(oci.shutil.rmtree, imports, True)
        d = os.path.join(imports, "layout")
        oci.write_layout(d, [self.base, oci.layer_tar([F("imported", "yes")])], tag="v1")
        tarpath = os.path.join(imports, "saved.tar")  # docker save (Docker 25+) is such a tar
        with oci.tarfile.open(tarpath, "w") as t:
            for name in os.listdir(d):
                t.add(os.path.join(d, name), arcname=name)
        c = Corrald(extra_args=["--import-dir", imports])
        c.start()
        try:
            cl = c.client(timeout=120)
            # a directory, then a tar, each under its own name; creates need no registry
            for path, name in ((d, "local/dir:v1"), (tarpath, "local/tar:v1")):
                r = cl.post("/v1/images", {"image": {"uri": name}, "import": {"path": path}})
                self.assertEqual(r.status, 200, "%r\n%s" % (r, c.log_tail(10)))
                r = cl.create_sandbox_raw(image={"uri": name},
                                          extensions={"imagePullPolicy": "Never"})
                self.assertEqual(r.status, 202, r)
                self.assertEqual(cl.run(r.json()["id"], "cat /imported").stdout, "yes")
                cl.delete_sandbox(r.json()["id"])
            names = [i["name"] for i in cl.get("/v1/images").json()["items"]]
            self.assertIn("docker.io/local/dir:v1", names)
            # the CLI
            from harness import binary
            env = dict(os.environ, CORRAL_SERVER=c.base_url)
            env.pop("CORRAL_API_KEY", None)
            p = subprocess.run([binary("corral"), "image", "import", d, "local/cli:v1"],
                               capture_output=True, text=True, env=env, timeout=120)
            self.assertEqual((p.returncode, p.stdout.strip()), (0, "local/cli:v1"), p.stderr)
            # outside --import-dir, directly or through a symlink: refused before any read
            os.symlink("/etc", os.path.join(imports, "escape"))
            for path in ("/etc", os.path.join(imports, "escape"), os.path.join(imports, "..")):
                r = cl.post("/v1/images", {"image": {"uri": "x/y:z"}, "import": {"path": path}})
                self.assertEqual(r.status, 403, (path, r))
                self.assertEqual(r.json()["code"], "SANDBOX::IMPORT_NOT_ALLOWED")
            # a corrupted blob (of a layer not in the store yet): refused, nothing kept
            bad = os.path.join(imports, "bad")
            binfo = oci.write_layout(bad, [self.base, oci.layer_tar([F("bad", "bad")])])
            with open(os.path.join(bad, "blobs", "sha256", binfo["layers"][1][7:]), "r+b") as f:
                f.write(b"\0\0\0\0")
            r = cl.post("/v1/images", {"image": {"uri": "local/bad:v1"}, "import": {"path": bad}})
            self.assertEqual(r.status, 502, r)
            self.assertIn("digest mismatch", r.json()["message"])
            self.assertEqual(oci.store_tmp(c.state_dir), [])
            self.assertNotIn(binfo["layers"][1][7:], oci.store_layers(c.state_dir))
            # the docker save format of Docker < 25: named, not guessed at
            legacy = os.path.join(imports, "legacy")
            os.mkdir(legacy)
            with open(os.path.join(legacy, "manifest.json"), "w") as f:
                f.write("[]")
            r = cl.post("/v1/images", {"image": {"uri": "local/old:v1"}, "import": {"path": legacy}})
            self.assertEqual(r.status, 502, r)
            self.assertIn("before Docker 25", r.json()["message"])
            cl.close()
        finally:
            c.shutdown_and_check()
        # imports are off without --import-dir
        r = self.client.post("/v1/images", {"image": {"uri": "x/y:z"}, "import": {"path": d}})
        self.assertEqual(r.status, 403, r)
        self.assertIn("--import-dir", r.json()["message"])

    def test_swebench_shaped_task(self):
        py = oci.base_layer(python=True)
        pkg = oci.layer_tar([
            D("testbed"), D("testbed/calc"),
            F("testbed/calc/__init__.py", "def add(a, b):\n    return a + b\n"),
            D("testbed/tests"), F("testbed/tests/__init__.py", ""),
            F("testbed/tests/test_calc.py",
              "import unittest\nfrom calc import add\n\n"
              "class T(unittest.TestCase):\n"
              "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"),
            D("tests"),
            F("tests/test.sh",
              "#!/bin/sh\ncd /testbed\nif python3 -c 'import pytest' 2>/dev/null; then\n"
              "  exec python3 -m pytest -q tests\nfi\nexec python3 -m unittest -v tests.test_calc\n",
              mode=0o755),
        ])
        d, _ = self.layout("swe", [py, pkg], config={"WorkingDir": "/testbed",
                                                     "Env": ["PATH=/usr/bin:/bin"]})
        ref = self.reg.push(d, "swebench/sweb.eval.x86_64.calc__calc-1", "latest")
        sid = self.create_image(ref)["id"]
        res = self.client.run(sid, "/tests/test.sh", read_timeout=300)
        self.assertEqual(res.exit_code, 0, "%r %s %s" % (res, res.stdout, res.stderr))
        self.assertIn("OK", res.stdout + res.stderr)


if __name__ == "__main__":
    main()
