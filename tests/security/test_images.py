#!/usr/bin/env python3
"""
Hostile image layers: a registry image is attacker-controlled bytes that corrald unpacks as host
root. Each layer below tries to write outside its layer directory (or to forge overlayfs
metadata); the pull must fail as SANDBOX::IMAGE_PULL_FAILED naming the layer as invalid, leave no
file outside the store, no half layer in it, and corrald and other sandboxes must keep answering.
"""
import os
import secrets
import sys
import tempfile
import tarfile
import io

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))

from sec import AttackCase, main  # noqa: E402
import oci  # noqa: E402
from oci import D, F, H, L  # noqa: E402


class HostileLayers(AttackCase):

    @classmethod
    def setUpClass(cls):
        cls.reg = oci.Registry()
        cls.corrald_kwargs = {"extra_args": ["--insecure-registry", cls.reg.host]}
        cls.tmp = tempfile.mkdtemp(prefix="corral-sec-images-")
        cls.base = oci.base_layer()
        try:
            super().setUpClass()
        except Exception:
            cls.reg.stop()
            raise
        cls.bystander = cls.client.create_sandbox_raw().json()["id"]

    @classmethod
    def tearDownClass(cls):
        cls.client.delete_sandbox(cls.bystander)
        super().tearDownClass()
        cls.reg.stop()
        oci.shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        super().setUp()
        self.tag = secrets.token_hex(4)
        # A host directory the attacker aims at (root-owned, outside the store).
        self.target = tempfile.mkdtemp(prefix="corral-target-")
        self.addCleanup(oci.shutil.rmtree, self.target, True)

    def push(self, name, layers, **kw):
        d = os.path.join(self.tmp, name + self.tag)
        info = oci.write_layout(d, layers, **kw)
        return self.reg.push(d, "evil/" + name), info

    def assert_refused(self, ref, info):
        r = self.client.create_sandbox_raw(image={"uri": ref})
        if r.status == 202:
            self.addCleanup(self._cleanup_sandbox, r.json()["id"])
        self.assertEqual(r.status, 502, "%r\n%s" % (r, self.corrald.log_tail(10)))
        self.assertEqual(r.json()["code"], "SANDBOX::IMAGE_PULL_FAILED")
        self.assertIn("outside the layer", r.json()["message"])
        self.assertNotIn(self.corrald.state_dir, r.text, "no host path in the reply")
        layers = oci.store_layers(self.corrald.state_dir)
        self.assertNotIn(info["layers"][-1][7:], layers, "no invalid layer in the store")
        self.assertEqual(oci.store_tmp(self.corrald.state_dir), [], "no half layer left")
        self.assertEqual(os.listdir(self.target), [], "nothing written outside the store")
        self.assert_platform_alive(self.bystander)

    def test_dotdot_entry(self):
        # Attack: an entry named ../../<...>/target/pwned climbs out of the layer directory.
        up = "../" * 40 + self.target.lstrip("/") + "/pwned"
        ref, info = self.push("dotdot", [self.base, oci.layer_tar([F(up, "x")])])
        self.assert_refused(ref, info)
        self.assertFalse(os.path.exists(os.path.join(self.corrald.state_dir, "images", "pwned")))

    def test_absolute_entry(self):
        # Attack: an absolute entry name /<target>/pwned written as is by a naive extractor.
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
            ti = tarfile.TarInfo(self.target + "/pwned")
            ti.size = 1
            t.addfile(ti, io.BytesIO(b"x"))
        ref, info = self.push("abs", [self.base, buf.getvalue()])
        self.assert_refused(ref, info)

    def test_symlink_then_write_through_it(self):
        # Attack: a symlink to a host directory, then a file written "inside" the symlink.
        layer = oci.layer_tar([L("evil", self.target), F("evil/pwned", "x")])
        ref, info = self.push("symdir", [self.base, layer])
        self.assert_refused(ref, info)

    def test_relative_symlink_then_write_through_it(self):
        # Attack: the same with a relative symlink climbing out of the layer.
        layer = oci.layer_tar([L("evil", "../" * 40 + self.target.lstrip("/")),
                               F("evil/pwned", "x")])
        ref, info = self.push("symrel", [self.base, layer])
        self.assert_refused(ref, info)

    def test_hardlink_out(self):
        # Attack: a hard link to a host file (../ and absolute), to read or modify it later.
        secret = os.path.join(self.target, "secret")
        with open(secret, "w") as f:
            f.write("host secret")
        for name, link in (("hlrel", "../" * 40 + secret.lstrip("/")), ("hlabs", secret)):
            ref, info = self.push(name, [self.base, oci.layer_tar([H("grab", link)])])
            r = self.client.create_sandbox_raw(image={"uri": ref})
            self.assertEqual(r.status, 502, r)
            self.assertIn("outside the layer", r.json()["message"])
            self.assertEqual(os.stat(secret).st_nlink, 1, "no new link to the host file")
        os.unlink(secret)
        self.assert_platform_alive(self.bystander)

    def test_hardlink_through_symlink(self):
        # Attack: a symlink to a host directory, then a hard link whose target goes through it.
        secret = os.path.join(self.target, "secret")
        with open(secret, "w") as f:
            f.write("host secret")
        layer = oci.layer_tar([L("d", self.target), H("grab", "d/secret")])
        ref, info = self.push("hlsym", [self.base, layer])
        r = self.client.create_sandbox_raw(image={"uri": ref})
        self.assertEqual(r.status, 502, r)
        self.assertIn("outside the layer", r.json()["message"])
        self.assertEqual(os.stat(secret).st_nlink, 1)
        self.assert_platform_alive(self.bystander)

    def test_whiteout_through_symlink(self):
        # Attack: a whiteout under a symlinked directory, to delete a host file as root.
        victim = os.path.join(self.target, "victim")
        with open(victim, "w") as f:
            f.write("keep me")
        layer = oci.layer_tar([L("d", self.target), F("d/.wh.victim")])
        ref, info = self.push("whsym", [self.base, layer])
        r = self.client.create_sandbox_raw(image={"uri": ref})
        self.assertEqual(r.status, 502, r)
        self.assertIn("outside the layer", r.json()["message"])
        with open(victim) as f:
            self.assertEqual(f.read(), "keep me")
        self.assert_platform_alive(self.bystander)

    def test_symlink_in_lower_layer_is_harmless(self):
        # Attack: layer 1 plants a symlink to the host, layer 2 writes through the same name.
        l1 = oci.layer_tar([L("evil", self.target)])
        l2 = oci.layer_tar([D("evil"), F("evil/pwned", "x")])
        ref, info = self.push("xlayer", [self.base, l1, l2])
        sid = self.create(image={"uri": ref})["id"]
        self.assertEqual(os.listdir(self.target), [], "each layer is unpacked in its own dir")
        self.assertEqual(self.client.run(sid, "cat /evil/pwned").stdout, "x")
        self.assert_platform_alive(self.bystander, sid)

    def test_error_bodies_are_not_echoed(self):
        # Attack: name a "registry" that is really some other HTTP service (here one answering
        # every path with a secret page), to read that service's answers through corrald's
        # error messages.
        import http.server
        import threading

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                body = b"INTERNAL-SECRET-" + self.path.encode()
                self.send_response(404 if "manifests" in self.path else 200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        host = "127.0.0.1:%d" % srv.server_address[1]
        c = oci.harness.Corrald(extra_args=["--insecure-registry", host])
        c.start()
        try:
            cl = c.client(timeout=60)
            r = cl.create_sandbox_raw(image={"uri": "%s/x/y:z" % host})
            self.assertEqual(r.status, 422, r)
            self.assertIn("not found", r.json()["message"])
            self.assertNotIn("INTERNAL-SECRET", r.text)
            self.assertNotIn("INTERNAL-SECRET", c.log_tail(50))
            cl.close()
        finally:
            c.shutdown_and_check()

    def test_import_reads_only_the_import_dir(self):
        # Attack: "import" host files corrald can read as root (/etc/shadow as a tar, /root as a
        # layout, a symlink planted in the import dir, ..), to get them into an image.
        imports = tempfile.mkdtemp(prefix="corral-sec-import-")
        self.addCleanup(oci.shutil.rmtree, imports, True)
        os.symlink("/etc", os.path.join(imports, "link"))
        c = oci.harness.Corrald(extra_args=["--import-dir", imports])
        c.start()
        try:
            cl = c.client(timeout=60)
            for path in ("/etc/shadow", "/root", os.path.join(imports, "link"),
                         os.path.join(imports, "link", "shadow"), imports + "/../../etc",
                         "relative/path"):
                r = cl.post("/v1/images", {"image": {"uri": "evil/x:y"}, "import": {"path": path}})
                self.assertEqual(r.status, 403, (path, r))
                self.assertEqual(r.json()["code"], "SANDBOX::IMPORT_NOT_ALLOWED")
            self.assertEqual(cl.get("/v1/images").json()["items"], [])
            self.assertEqual(cl.get("/health").status, 200)
            cl.close()
        finally:
            c.shutdown_and_check()
        self.assert_platform_alive(self.bystander)

    def test_forged_overlay_xattrs_dropped(self):
        # Attack: trusted.overlay.* xattrs in the tar (redirect/metacopy) to steer overlayfs.
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
            ti = tarfile.TarInfo("redir")
            ti.type = tarfile.DIRTYPE
            ti.mode = 0o755
            ti.pax_headers = {"SCHILY.xattr.trusted.overlay.redirect": "/etc",
                              "SCHILY.xattr.user.kept": "yes"}
            t.addfile(ti)
        ref, info = self.push("xattr", [self.base, buf.getvalue()])
        sid = self.create(image={"uri": ref})["id"]
        layer = os.path.join(self.corrald.state_dir, "images", "layers", info["layers"][-1][7:])
        names = os.listxattr(os.path.join(layer, "redir"))
        self.assertNotIn("trusted.overlay.redirect", names)
        self.assertIn("user.kept", names, "ordinary xattrs are kept")
        self.assert_platform_alive(self.bystander, sid)

    def assert_diff_id_refused(self, ref, info):
        r = self.client.create_sandbox_raw(image={"uri": ref})
        if r.status == 202:
            self.addCleanup(self._cleanup_sandbox, r.json()["id"])
        self.assertEqual(r.status, 502, "%r\n%s" % (r, self.corrald.log_tail(10)))
        self.assertEqual(r.json()["code"], "SANDBOX::IMAGE_PULL_FAILED")
        self.assertIn("digest mismatch", r.json()["message"])
        self.assertIn("diff_id", r.json()["message"])
        self.assertNotIn(self.corrald.state_dir, r.text, "no host path in the reply")
        self.assertNotIn(info["layers"][-1][7:], oci.store_layers(self.corrald.state_dir),
                         "the layer never reaches the store")
        self.assertEqual(oci.store_tmp(self.corrald.state_dir), [], "no half layer left")
        self.assert_platform_alive(self.bystander)

    def test_config_claims_a_trusted_layers_diff_id(self):
        # Attack: a layer of the attacker's whose config names the diff_id of a known base layer,
        # so that what goes by diff_ids (scanners, chain ids, caches) takes it for that layer.
        evil = oci.layer_tar([F("bin/sh", "#!/evil\n", mode=0o755)])
        trusted = oci.sha256(self.base)
        ref, info = self.push("posing", [self.base, evil],
                              diff_ids_of=lambda ids: [ids[0], trusted])
        self.assert_diff_id_refused(ref, info)

    def test_payload_after_the_tar_end(self):
        # Attack: data hidden in the blob after the tar's end-of-archive blocks, where a check
        # that hashes only what the tar reader needs (the config's diff_id is that tar's) would
        # not see it, carried into the store under a "verified" diff_id.
        tar = oci.layer_tar([F("innocent", "x")])

        def smuggle(i, data):
            if i != 1:
                return data
            return oci.gzip.compress(oci.gzip.decompress(data) + b"PAYLOAD" * 10000, mtime=0)
        ref, info = self.push("smuggle", [self.base, tar], blobs=smuggle)
        self.assert_diff_id_refused(ref, info)

    def test_resumed_download_cannot_splice_bytes(self):
        # Attack: a registry (or a man in the middle of plain HTTP) answers the Range request of a
        # resumed download with bytes of its choosing (true headers, tampered body; or another
        # range than asked for), to splice them into a blob whose first part was verified.
        tok = oci.TokenProxy(self.reg.host)
        self.addCleanup(tok.stop)
        c = oci.harness.Corrald(extra_args=["--insecure-registry", tok.host])
        c.start()
        try:
            cl = c.client(timeout=120)
            for fault in ("tamper_ranges", "shift_ranges"):
                data = os.urandom(400000)
                ref, info = self.push("splice-" + fault, [self.base,
                                                          oci.layer_tar([F("data", data)])])
                ref = ref.replace(self.reg.host, tok.host)
                dg = info["layers"][-1]
                tok.fault_digests, tok.cut_blobs = {dg}, 1000
                r = cl.create_sandbox_raw(image={"uri": ref})
                self.assertEqual(r.status, 502, r)  # every try cut: a partial is kept
                tok.cut_blobs = 0
                setattr(tok, fault, True)
                tok.ranges.clear()
                r = cl.create_sandbox_raw(image={"uri": ref})
                setattr(tok, fault, False)
                self.assertEqual(r.status, 202, "%r\n%s" % (r, c.log_tail(20)))
                sid = r.json()["id"]
                self.assertTrue(tok.ranges[dg][0].startswith("bytes="), tok.ranges)
                self.assertIsNone(tok.ranges[dg][-1], "then the whole blob, from its start")
                layer = os.path.join(c.state_dir, "images", "layers", dg[7:], "data")
                with open(layer, "rb") as f:
                    self.assertTrue(f.read() == data, "the store holds the image's bytes only")
                cl.delete_sandbox(sid)
            self.assertEqual(cl.get("/health").status, 200)
            cl.close()
        finally:
            c.shutdown_and_check()
        self.assert_platform_alive(self.bystander)


if __name__ == "__main__":
    main()
