#!/usr/bin/env python3
"""
The layer child's confinement (docs/security.md, docs/images.md): a layer child downloads and
unpacks attacker-controlled bytes as host root, so a bug in libcurl, OpenSSL, a decompressor or
libarchive must not be a host compromise. image_confine_probe confines itself with the very call
every layer child makes (image_layer_confine()), then performs what code running in a compromised
child would try; each attempt must fail with the errno of the layer that stops it, and unpacking
a real layer into its work directory must still work. A pull through a real corrald and registry
then checks the layer the confined child unpacked is complete in the store.

The manifest child of a pull (token, manifest, index and config requests) is tried the same way
(image_confine_probe --manifest); a real pull is watched to check every process connected to
the registry is a confined child of the pull worker; and image_pull_tamper plays a compromised
manifest child that lies to the worker, which must refuse each lie and store nothing.
"""
import base64
import fcntl
import io
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import termios
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))

from sec import AttackCase, main, sanitized  # noqa: E402
import oci  # noqa: E402
from oci import C, D, F, H, L, X  # noqa: E402

import errno as E  # noqa: E402
import struct  # noqa: E402

BUILD = os.environ.get("CORRAL_BUILD_DIR", os.path.join(os.path.dirname(HERE), "..", "build"))
SOURCE = os.environ.get("CORRAL_SOURCE_DIR", os.path.join(HERE, "..", ".."))
PROBE = os.path.join(BUILD, "tests", "security", "image_confine_probe")
CORPUS = os.path.join(SOURCE, "tests", "fuzz", "corpus", "layer")
# IMAGE_CONFINED_* of src/images/images.h
MOUNTS, LANDLOCK_FS, LANDLOCK_NET, LANDLOCK_SCOPE, RLIMITS, CAPS, SECCOMP = (1 << i for i in range(7))
ALL_LEVELS = (1 << 7) - 1
KEPT_CAPS = {0, 1, 3, 4, 27, 31}  # CHOWN DAC_OVERRIDE FOWNER FSETID MKNOD SETFCAP
DENIED_WRITE = (E.EACCES, E.EROFS)  # Landlock, or the read-only mount view before it


def landlock_abi():
    """The kernel's Landlock ABI version (0: none), as the probe's own check would say."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    v = libc.syscall(444, None, 0, 1)  # landlock_create_ruleset(NULL, 0, VERSION), x86-64/arm64
    return v if v > 0 else 0


def rich_layer(devices=True):
    """What a real image layer holds: whiteouts, an opaque dir, links, setuid, devices, xattrs."""
    return oci.layer_tar([
        D("data"), F("data/.wh.gone"), D("opq"), F("opq/.wh..wh..opq"), F("opq/new", "new"),
        F("bin-suid", "#!/bin/sh\n", mode=0o4755), F("target", "T"), H("hard", "target"),
        L("soft", "target")] + ([C("devnode", 1, 3)] if devices else []) + [
        D("home/u", uid=1000, gid=1000, mode=0o700),
        F("home/u/secret", "mine", uid=1000, gid=1000, mode=0o600),
        X(F("capped", "c", mode=0o755),
          security__capability=struct.pack("<IIIII", 0x02000001, 1 << 13, 0, 0, 0),
          user__note=b"kept"),
    ])


class ConfinedLayerChild(unittest.TestCase):

    def setUp(self):
        if not os.path.exists(PROBE):
            self.fail("%s is not built" % PROBE)
        self.tmp = tempfile.mkdtemp(prefix="corral-sec-confine-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        # A store as corrald lays it out, and a host directory outside it.
        self.state = os.path.join(self.tmp, "state", "images")
        for d in ("layers", "tmp"):
            os.makedirs(os.path.join(self.state, d))
        self.outside = os.path.join(self.tmp, "host")
        os.mkdir(self.outside)
        self.victim = os.path.join(self.outside, "victim")
        with open(self.victim, "w") as f:
            f.write("host file\n")
        os.chmod(self.victim, 0o644)
        # Two loopback listeners: the registry's port (TLS, a self-signed certificate), and
        # another service on the host.
        self.listeners = []
        for _ in range(2):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen(8)
            self.addCleanup(s.close)
            self.listeners.append(s.getsockname()[1])
            if len(self.listeners) == 1:
                self.tls_server(s)

    def tls_server(self, sock):
        cert = os.path.join(self.tmp, "cert.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=127.0.0.1", "-keyout", cert, "-out", cert],
                       check=True, capture_output=True)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert)

        def serve():
            while True:
                try:
                    c, _ = sock.accept()
                except OSError:
                    return
                try:
                    c.settimeout(10)
                    ctx.wrap_socket(c, server_side=True).close()
                except (OSError, ssl.SSLError):
                    c.close()
        threading.Thread(target=serve, daemon=True).start()

    def probe(self, blob, old_kernel=False, manifest=False):
        work = tempfile.mkdtemp(prefix="layer-", dir=os.path.join(self.state, "tmp"))
        with open(os.path.join(work, "blob"), "wb") as f:
            f.write(blob)
        mode = ["--old-kernel"] if old_kernel else ["--manifest"] if manifest else []
        p = subprocess.run([PROBE] + mode + [work, os.path.join(work, "blob"), self.outside,
                            self.state, str(self.listeners[0]), str(self.listeners[1])],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        out = {}
        for line in p.stdout.splitlines():
            name, _, rest = line.partition(" ")
            out[name] = rest
        return work, out

    def assert_errno(self, out, name, *want):
        got = int(out[name].split()[0])
        self.assertIn(got, want, "%s: got %s (%s), want one of %s" %
                      (name, got, os.strerror(got) if got else "succeeded",
                       [os.strerror(w) for w in want]))

    def test_compromised_child_is_contained(self):
        # Attack: code running in a layer child (an exploited libarchive, zlib, zstd, libcurl or
        # OpenSSL) writes, chmods and links host files, reads secrets, mounts, ptraces, unshares,
        # opens raw, packet and unix sockets, forks, execs, signals corrald, connects elsewhere.
        work, out = self.probe(rich_layer())
        level, expect = int(out["level"]), int(out["expect"])
        # Every step this kernel allows holds (here: all of them; a CI kernel without Landlock
        # still has the mount view, capabilities, seccomp and rlimits).
        self.assertEqual(level, expect, "confinement fell short of what the kernel allows: %s" % out)
        for bit in (MOUNTS, RLIMITS, CAPS, SECCOMP):
            self.assertTrue(level & bit, "step %#x missing: %s" % (bit, out))
        if landlock_abi() >= 6:
            self.assertEqual(level, ALL_LEVELS, "this kernel has Landlock ABI >= 6")
        for name in ("write_outside", "write_etc", "write_state", "suid_outside"):
            self.assert_errno(out, name, *DENIED_WRITE)
        # Landlock does not cover chmod/chown: the read-only mount view does.
        self.assert_errno(out, "chmod_suid_outside", E.EROFS)
        self.assert_errno(out, "chown_outside", E.EROFS)
        self.assert_errno(out, "link_outside_in", E.EXDEV, E.EACCES)
        self.assertEqual(os.listdir(self.outside), ["victim"], "nothing written outside")
        st = os.stat(self.victim)
        self.assertEqual((st.st_mode & 0o7777, st.st_uid), (0o644, 0), "host file untouched")
        self.assertEqual([n for n in os.listdir("/etc") if n.startswith("corral-confine-pwned")],
                         [])
        self.assertEqual(os.listdir(os.path.join(self.state, "layers")), [])
        if level & LANDLOCK_FS:
            self.assert_errno(out, "read_shadow", E.EACCES)
            self.assert_errno(out, "read_store", E.EACCES)
            self.assert_errno(out, "read_parent_environ", E.EACCES)
        if level & LANDLOCK_NET:
            self.assert_errno(out, "connect_other_port", E.EACCES)
            self.assert_errno(out, "bind", E.EACCES)
        if level & LANDLOCK_SCOPE:
            self.assert_errno(out, "signal_parent", E.EPERM)
        self.assert_errno(out, "mount", E.EPERM)
        self.assert_errno(out, "ptrace", E.EPERM)
        self.assert_errno(out, "unshare_user", E.EPERM)
        self.assert_errno(out, "unshare_mount", E.EPERM)
        self.assert_errno(out, "raw_socket", E.EPERM)
        self.assert_errno(out, "packet_socket", E.EAFNOSUPPORT)
        self.assert_errno(out, "unix_socket", E.EAFNOSUPPORT)
        self.assert_errno(out, "fork", E.EPERM)
        self.assert_errno(out, "execve", E.EPERM)
        self.assert_errno(out, "setxattr_trusted", E.EPERM)
        self.assert_errno(out, "write_past_fsize", E.EFBIG)
        # A device node made in the work dir (a host disk's numbers would do the same) does not
        # open: the work mount is nodev.
        self.assert_errno(out, "mknod_char", 0)
        self.assert_errno(out, "open_made_device", E.EACCES)
        self.assert_errno(out, "open_host_device", E.EACCES)
        caps = int(out["caps"])
        self.assertEqual({c for c in range(64) if caps >> c & 1}, KEPT_CAPS)
        # What the child needs still works: the registry's port, resolver and CA files, its dir.
        for name in ("connect_registry_port", "read_resolv_conf", "read_ca_certs",
                     "thread_and_resolve", "write_work"):
            self.assert_errno(out, name, 0)
        # TLS to the registry: the CA files load, the handshake runs, the self-signed
        # certificate is refused (60), not "cannot read the CA bundle" (77).
        self.assertEqual(out["tls_request"], "60", out)
        # ...and the unpack itself, with everything a layer keeps.
        self.assertEqual(out["unpack"], "0")
        root = os.path.join(work, "root")
        self.assertEqual(os.stat(os.path.join(root, "bin-suid")).st_mode & 0o7777, 0o4755)
        self.assertEqual(os.stat(os.path.join(root, "hard")).st_nlink, 2)
        self.assertEqual(os.readlink(os.path.join(root, "soft")), "target")
        self.assertEqual(os.stat(os.path.join(root, "devnode")).st_rdev, os.makedev(1, 3))
        self.assertEqual(os.stat(os.path.join(root, "data", "gone")).st_rdev, os.makedev(0, 0))
        self.assertEqual(os.stat(os.path.join(root, "home", "u", "secret")).st_uid, 1000)
        self.assertEqual(os.getxattr(os.path.join(root, "capped"), "user.note"), b"kept")
        self.assertEqual(os.getxattr(os.path.join(root, "capped"), "security.capability")[4:8],
                         struct.pack("<I", 1 << 13))
        # The opaque mark (a trusted.* xattr, CAP_SYS_ADMIN) is left to the parent: listed.
        with open(os.path.join(work, "opaque"), "rb") as f:
            self.assertEqual(f.read(), b"opq\0")

    def test_compromised_manifest_child_is_contained(self):
        # Attack: code running in a pull's manifest child (libcurl, OpenSSL or jansson exploited
        # by the registry's reply to the token, manifest or config request) writes, chmods and
        # chowns host files, reads secrets and the store, makes and opens a device, sets trusted
        # xattrs, mounts, ptraces, unshares, opens raw, packet and unix sockets, forks, execs,
        # signals the pull worker, connects to another port.
        work, out = self.probe(b"", manifest=True)
        level, expect = int(out["level"]), int(out["expect"])
        self.assertEqual(level, expect, "confinement fell short of what the kernel allows: %s" % out)
        for bit in (MOUNTS, RLIMITS, CAPS, SECCOMP):
            self.assertTrue(level & bit, "step %#x missing: %s" % (bit, out))
        for name in ("write_outside", "write_etc", "write_state", "suid_outside"):
            self.assert_errno(out, name, *DENIED_WRITE)
        self.assert_errno(out, "chmod_suid_outside", E.EROFS, E.EPERM)
        self.assert_errno(out, "chown_outside", E.EROFS, E.EPERM)
        self.assert_errno(out, "link_outside_in", E.EXDEV, E.EACCES, E.EPERM)
        self.assertEqual(os.listdir(self.outside), ["victim"], "nothing written outside")
        st = os.stat(self.victim)
        self.assertEqual((st.st_mode & 0o7777, st.st_uid), (0o644, 0), "host file untouched")
        if level & LANDLOCK_FS:
            self.assert_errno(out, "read_shadow", E.EACCES)
            self.assert_errno(out, "read_store", E.EACCES)
            self.assert_errno(out, "read_parent_environ", E.EACCES)
        if level & LANDLOCK_NET:
            self.assert_errno(out, "connect_other_port", E.EACCES)
            self.assert_errno(out, "bind", E.EACCES)
        if level & LANDLOCK_SCOPE:
            self.assert_errno(out, "signal_parent", E.EPERM)
        for name in ("mount", "ptrace", "unshare_user", "unshare_mount", "raw_socket", "fork",
                     "execve", "setxattr_trusted"):
            self.assert_errno(out, name, E.EPERM)
        self.assert_errno(out, "packet_socket", E.EAFNOSUPPORT)
        self.assert_errno(out, "unix_socket", E.EAFNOSUPPORT)
        # Unlike a layer child it keeps no capability: no device node at all, not even in its
        # own directory, and no chown there either.
        self.assertEqual(int(out["caps"]), 0, "no capability left")
        self.assert_errno(out, "mknod_char", E.EPERM)
        self.assert_errno(out, "open_host_device", E.EACCES)
        self.assert_errno(out, "write_past_fsize", E.EFBIG)
        # What it needs still works: the registry's port, the resolver, TLS, its directory.
        for name in ("connect_registry_port", "read_resolv_conf", "read_ca_certs",
                     "thread_and_resolve", "write_work"):
            self.assert_errno(out, name, 0)
        self.assertEqual(out["tls_request"], "60", out)
        self.assertEqual(out["unpack"], "skipped")

    def test_corpus_layers_still_unpack_or_fail_as_before(self):
        # Attack: the fuzz corpus's escaping layers (plain, gzip, zstd) unpacked confined still fail as invalid.
        for name, want in (("normal", "0"), ("normal-gz", "0"), ("symlink-dir-zst", str(E.EPROTO)),
                           ("dotdot", str(E.EPROTO)), ("hardlink-out", str(E.EPROTO))):
            with open(os.path.join(CORPUS, name), "rb") as f:
                work, out = self.probe(f.read())
            self.assertEqual(out["unpack"].split()[0], want, "%s: %s" % (name, out["unpack"]))
            self.assertEqual(os.listdir(self.outside), ["victim"])


    def test_old_kernel_falls_back_and_unpacks(self):
        # Attack: a device node made to be opened, on a kernel without Landlock (or mount
        # namespaces): the child keeps capabilities, seccomp, rlimits, and the layer unpacks.
        work, out = self.probe(rich_layer(devices=False), old_kernel=True)
        level = int(out["level"])
        self.assertEqual(level, RLIMITS | CAPS | SECCOMP, out)
        self.assertEqual(int(out["expect"]) & (LANDLOCK_FS | LANDLOCK_NET | LANDLOCK_SCOPE), 0,
                         "the start-up probe sees the missing Landlock (corrald warns once)")
        self.assertEqual(out["unpack"], "0")
        self.assert_errno(out, "write_work", 0)
        self.assert_errno(out, "mount", E.EPERM)
        self.assert_errno(out, "unshare_user", E.EPERM)
        self.assert_errno(out, "fork", E.EPERM)
        self.assert_errno(out, "raw_socket", E.EPERM)
        self.assert_errno(out, "setxattr_trusted", E.EPERM)
        # Without Landlock's read rules a process with more capabilities than the child (its
        # parent here; a pull worker, this pull's or another's) still keeps its /proc files shut.
        self.assert_errno(out, "read_parent_environ", E.EACCES, E.EPERM)
        # Without the nodev mount, no device node may be made at all; whiteouts still are.
        self.assert_errno(out, "mknod_char", E.EPERM)
        self.assert_errno(out, "open_made_device", E.EPERM)
        self.assert_errno(out, "mknod_whiteout", 0)
        self.assertEqual(os.stat(os.path.join(work, "root", "bin-suid")).st_mode & 0o7777, 0o4755)
        self.assertEqual(os.stat(os.path.join(work, "root", "data", "gone")).st_rdev,
                         os.makedev(0, 0), "whiteouts are made")
        # A layer with a device node cannot be unpacked there: the pull fails, typed, cleanly.
        work, out = self.probe(rich_layer(), old_kernel=True)
        self.assertTrue(out["unpack"].startswith("%d " % E.EPROTO), out["unpack"])
        self.assertIn("devnode", out["unpack"])

    def test_child_cannot_use_corralds_terminal(self):
        # Attack: a compromised layer child keeps corrald's stdin and stderr, which under `make run` are the operator's terminal: it pushes "echo ...\n" into its input with TIOCSTI (for the operator's root shell to run when corrald stops), reads what the operator types, and writes to the screen.
        master, slave = os.openpty()
        self.addCleanup(os.close, master)
        self.addCleanup(os.close, slave)
        typed = b"operator-typed-line\n"
        os.write(master, typed)

        def lead_the_terminal():  # as the operator's shell does for the session corrald runs in
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        work = tempfile.mkdtemp(prefix="tty-", dir=os.path.join(self.state, "tmp"))
        p = subprocess.run([PROBE, "--tty", work], stdin=slave, stderr=slave,
                           stdout=subprocess.PIPE, text=True, timeout=60,
                           preexec_fn=lead_the_terminal)
        self.assertEqual(p.returncode, 0, p.stdout)
        out = dict(line.partition(" ")[::2] for line in p.stdout.splitlines())
        self.assertNotEqual(out["tiocsti"], "0", out)
        self.assertEqual(out["terminal_read"], "0", "the child read what the operator typed")
        os.set_blocking(slave, False)
        os.set_blocking(master, False)
        try:
            left = os.read(slave, 200)
        except BlockingIOError:
            left = b""
        self.assertEqual(left, typed, "the terminal's input is not what the operator typed")
        try:
            shown = os.read(master, 400)
        except BlockingIOError:
            shown = b""
        self.assertNotIn(b"corral-tty", shown, "the child wrote to the terminal")

    def sibling_peek(self, old_kernel):
        """A confined child of one pull reading a confined child of another pull (the same uid)."""
        secret = "pull-b-password-%s" % os.urandom(8).hex()
        mode = ["--old-kernel"] if old_kernel else []
        works = [tempfile.mkdtemp(prefix="sib-", dir=os.path.join(self.state, "tmp")) for _ in "ab"]
        hold = subprocess.Popen([PROBE, "--hold"] + mode + [works[0]], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True,
                                env=dict(os.environ, PROBE_SECRET=secret))
        self.addCleanup(hold.wait, 10)
        self.addCleanup(hold.stdin.close)
        held = {}
        for line in hold.stdout:
            name, _, rest = line.strip().partition(" ")
            held[name] = rest
            if name == "ready":
                break
        self.assertEqual(held.get("ready"), str(len(secret)), held)
        p = subprocess.run([PROBE, "--peek"] + mode + [works[1], str(hold.pid), secret],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        out = dict(line.partition(" ")[::2] for line in p.stdout.splitlines())
        return int(held["level"]), out

    def test_child_cannot_read_a_sibling_pulls_child(self):
        # Attack: a compromised layer child of one pull (a hostile image) opens /proc/<pid>/environ and /proc/<pid>/mem of another pull's manifest child, same uid, fewer capabilities, for that pull's registry credentials; on a kernel without Landlock nothing but dumpability stands in the way.
        for old_kernel in (True, False):
            level, out = self.sibling_peek(old_kernel)
            if old_kernel:
                self.assertEqual(level & (LANDLOCK_FS | LANDLOCK_SCOPE), 0, out)
            self.assertEqual(out["sibling_secret"], "0", "old kernel %s: %s" % (old_kernel, out))
            self.assertIn(int(out["read_sibling_environ"]), (E.EACCES, E.EPERM), out)
            self.assertIn(int(out["read_sibling_mem"]), (E.EACCES, E.EPERM), out)


TAMPER = os.path.join(BUILD, "tests", "security", "image_pull_tamper")
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


class CompromisedManifestChild(unittest.TestCase):
    """A pull (image_pull_tamper: the real image_pull() against a real registry) whose manifest
    child, confined and past its own checks, is taken over and lies to the pull worker."""

    @classmethod
    def setUpClass(cls):
        if not os.path.exists(TAMPER):
            raise RuntimeError("%s is not built" % TAMPER)
        cls.tmp = tempfile.mkdtemp(prefix="corral-sec-tamper-")
        cls.reg = oci.Registry()
        try:
            for name in ("good", "evil"):
                d = os.path.join(cls.tmp, name)
                oci.write_layout(d, [oci.layer_tar([F(name, name)])])
                cls.reg.push(d, "tamper/" + name)
            cls.good_manifest, cls.good_config = cls.fetch("tamper/good")
            cls.evil_manifest, cls.evil_config = cls.fetch("tamper/evil")
        except Exception:
            cls.reg.stop()
            raise
        cls.good = "%s/tamper/good@%s" % (cls.reg.host, oci.sha256(cls.good_manifest))
        cls.secret = os.path.join(cls.tmp, "secret")
        with open(cls.secret, "w") as f:
            f.write('{"TOPSECRET-host-file": 1}')

    @classmethod
    def tearDownClass(cls):
        cls.reg.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def fetch(cls, name):
        import http.client
        import json
        c = http.client.HTTPConnection("127.0.0.1", cls.reg.port, timeout=10)
        c.request("GET", "/v2/%s/manifests/latest" % name, headers={"Accept": OCI_MANIFEST})
        manifest = c.getresponse().read()
        c.request("GET", "/v2/%s/blobs/%s" % (name, json.loads(manifest)["config"]["digest"]))
        config = c.getresponse().read()
        c.close()
        return manifest, config

    def pull(self, mode, data=None):
        store = tempfile.mkdtemp(prefix="store-%s-" % mode, dir=self.tmp)
        args = [TAMPER, mode, store, self.good, self.reg.host]
        if data is not None:
            path = os.path.join(store, "..", "data-" + mode)
            with open(path, "wb") as f:
                f.write(data)
            args.append(path)
        p = subprocess.run(args, capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        line = p.stdout.strip().splitlines()[-1]
        _, rc, msg = (line + " ").split(" ", 2)
        return int(rc), msg.strip(), store

    def assert_nothing_stored(self, store):
        self.assertEqual(os.listdir(os.path.join(store, "refs")), [], "no image record")
        self.assertEqual(os.listdir(os.path.join(store, "layers")), [], "no layer")
        self.assertEqual(os.listdir(os.path.join(store, "tmp")), [], "no work dir left")
        self.assertNotIn(oci.sha256(self.evil_config)[7:],
                         os.listdir(os.path.join(store, "blobs", "sha256")))

    def test_control_the_same_pull_untampered_succeeds(self):
        # Attack: none; the same pull with the child left alone stores the image (the harness is real).
        rc, msg, store = self.pull("none")
        self.assertEqual(rc, 0, msg)
        self.assertEqual(len(os.listdir(os.path.join(store, "refs"))), 1)
        self.assertEqual(len(os.listdir(os.path.join(store, "layers"))), 1)

    def test_swapped_manifest_is_refused(self):
        # Attack: the child hands the worker another image's manifest for a reference pinned by digest.
        rc, msg, store = self.pull("manifest", self.evil_manifest)
        self.assertEqual(rc, E.EBADMSG, msg)
        self.assertIn("digest mismatch", msg)
        self.assert_nothing_stored(store)

    def test_swapped_config_is_refused(self):
        # Attack: the child hands the worker another image's config (its Env, User, diff_ids).
        rc, msg, store = self.pull("config", self.evil_config)
        self.assertEqual(rc, E.EBADMSG, msg)
        self.assertIn("digest mismatch: config", msg)
        self.assert_nothing_stored(store)

    def test_config_symlink_to_host_file_is_not_followed(self):
        # Attack: the child makes its config a symlink to a host file, to have the worker read (and echo) it.
        rc, msg, store = self.pull("symlink", self.secret.encode())
        self.assertEqual(rc, E.ELOOP, msg)
        self.assertNotIn("TOPSECRET", msg)
        self.assert_nothing_stored(store)

    def test_manifest_fifo_does_not_block_the_worker(self):
        # Attack: the child makes its manifest a FIFO, to hang the pull worker on its open or read.
        rc, msg, store = self.pull("fifo")
        self.assertEqual(rc, E.EPERM, msg)
        self.assert_nothing_stored(store)

    def test_config_past_the_limit_is_refused(self):
        # Attack: the child writes a config larger than any the worker accepts (8 MiB), to make it read it all.
        rc, msg, store = self.pull("big")
        self.assertEqual(rc, E.EFBIG, msg)
        self.assert_nothing_stored(store)

    def test_header_injection_in_token_is_refused(self):
        # Attack: the child returns a "token" with CRLF and a header of its own, for the layer children's requests.
        rc, msg, store = self.pull("bearer")
        self.assertEqual(rc, E.EPROTO, msg)
        self.assertIn("auth state", msg)
        self.assert_nothing_stored(store)

    def test_realm_port_never_allowed_is_refused(self):
        # Attack: the child claims a token realm on a port it was never let reach, to open it to the layer children.
        rc, msg, store = self.pull("port")
        self.assertEqual(rc, E.EPROTO, msg)
        self.assert_nothing_stored(store)

    def test_silent_child_does_not_hold_the_worker_past_the_timeout(self):
        # Attack: the child never answers, to hold the pull worker (and every create waiting on the pull) forever.
        rc, msg, store = self.pull("hang")
        self.assertEqual(rc, E.ETIMEDOUT, msg)
        self.assertIn("timed out", msg)
        self.assert_nothing_stored(store)

    def test_forged_error_message_is_made_printable(self):
        # Attack: the child reports an error of its own making, with a newline (a forged corrald log line), an escape sequence and no NUL.
        rc, msg, store = self.pull("message")
        self.assertEqual(rc, E.ENOSPC, msg)
        self.assertTrue(msg.startswith("forged 2026 corrald error:  [2J"), repr(msg))
        self.assertTrue(all(0x20 <= ord(ch) < 0x7f for ch in msg), repr(msg))
        self.assertLess(len(msg), 512)
        self.assert_nothing_stored(store)

    def test_parsing_child_garbage_is_refused(self):
        # Attack: the child parsing the manifest (taken over by what it parsed) answers with tokens that are no manifest.
        rc, msg, store = self.pull("tokens")
        self.assertEqual(rc, E.EPROTO, msg)
        self.assertIn("parsing process sent an invalid result", msg)
        self.assert_nothing_stored(store)

    def test_parsing_child_digest_of_no_body_is_refused(self):
        # Attack: the parsing child names as the manifest's digest one of a manifest the registry never sent (the image record would carry it).
        rc, msg, store = self.pull("mdigest", self.evil_manifest)
        self.assertEqual(rc, E.EPROTO, msg)
        self.assertIn("parsing process sent an invalid result", msg)
        self.assert_nothing_stored(store)

    def test_parsing_child_invalid_utf8_is_refused(self):
        # Attack: the parsing child of the config returns a WorkingDir that is not UTF-8 (an image record jansson could not read back).
        rc, msg, store = self.pull("utf8")
        self.assertEqual(rc, E.EPROTO, msg)
        self.assertIn("config of", msg)
        self.assert_nothing_stored(store)

    def test_silent_parsing_child_does_not_hold_the_worker(self):
        # Attack: the parsing child never answers, to hold the pull worker forever.
        rc, msg, store = self.pull("parsehang")
        self.assertEqual(rc, E.ETIMEDOUT, msg)
        self.assertIn("parsing process did not answer", msg)
        self.assert_nothing_stored(store)

    def test_child_dying_without_a_word_fails_the_pull(self):
        # Attack: the child exits before its reply, leaving half-written files behind.
        rc, msg, store = self.pull("die")
        self.assertEqual(rc, E.EIO, msg)
        self.assertIn("registry process died", msg)
        self.assert_nothing_stored(store)


def registry_clients(port):
    """The pids holding an established TCP connection to 127.0.0.1:port (this process aside)."""
    inodes = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(name) as f:
            next(f)
            for line in f:
                fields = line.split()
                if int(fields[2].rsplit(":", 1)[1], 16) == port and fields[3] == "01":
                    inodes.add("socket:[%s]" % fields[9])
    pids = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            for fd in os.listdir("/proc/%s/fd" % pid):
                if os.readlink("/proc/%s/fd/%s" % (pid, fd)) in inodes:
                    pids.add(int(pid))
        except OSError:
            pass  # gone meanwhile
    return pids


def proc_status(pid):
    with open("/proc/%d/status" % pid) as f:
        return {k: v.strip() for k, _, v in (line.partition(":") for line in f)}


class RegistryCase(AttackCase):
    """A corrald (API key api_key) with a registry (cls.reg) and, before it, a registry with the
    bearer-token flow (cls.proxy), both plain HTTP; cls.tmp for image layouts; corrald's
    arguments end with cls.extra_args."""
    api_key = None
    extra_args = []

    @classmethod
    def setUpClass(cls):
        cls.reg = oci.Registry()
        cls.proxy = oci.TokenProxy(cls.reg.host)
        cls.corrald_kwargs = {"api_key": cls.api_key,
                              "extra_args": ["--insecure-registry", cls.reg.host,
                                             "--insecure-registry", cls.proxy.host]
                              + cls.extra_args}
        cls.tmp = tempfile.mkdtemp(prefix="corral-sec-confine-pull-")
        try:
            super().setUpClass()
        except Exception:
            cls.tearDownRegistry()
            raise

    @classmethod
    def tearDownRegistry(cls):
        cls.proxy.stop()
        cls.reg.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            cls.tearDownRegistry()

    def start_slow_pull(self, name):
        """A create of a fresh two-layer image through cls.proxy, whose replies are slowed so
        that each stage of the pull holds its connection long enough to be looked at; running
        in a thread (joined by the caller), its reply appended to the list returned."""
        d = os.path.join(self.tmp, name)
        oci.write_layout(d, [oci.base_layer(), oci.layer_tar([F("s", name)])])
        self.reg.push(d, "confine/" + name)
        ref = "%s/confine/%s:latest" % (self.proxy.host, name)
        self.proxy.delay_manifests = 1.0
        self.proxy.delay_blobs = 0.5
        self.addCleanup(setattr, self.proxy, "delay_manifests", 0.0)
        self.addCleanup(setattr, self.proxy, "delay_blobs", 0.0)
        out = []

        def create():
            c = self.corrald.client(timeout=120)
            try:
                out.append(c.create_sandbox_raw(image={"uri": ref}))
            finally:
                c.close()
        t = threading.Thread(target=create)
        t.start()
        return t, out

    def skip_if_sanitized(self):
        if sanitized(self.corrald.proc.pid):
            self.skipTest("sanitizer build: its heap is a reserved region of terabytes, not scanned")

    def scan_slow_pull(self, name, needles):
        """start_slow_pull(name), every process of the pull but corrald (the worker, its
        children) scanned for needles while it runs: the new sandbox's id and {pid: (name,
        needles found)}."""
        self.skip_if_sanitized()
        t, out = self.start_slow_pull(name)
        scanned, leaks = set(), {}
        while t.is_alive():
            pids = registry_clients(self.proxy.port)
            pids |= {int(proc_status(p)["PPid"]) for p in list(pids)
                     if os.path.exists("/proc/%d" % p)}
            for pid in pids - scanned - {self.corrald.proc.pid}:
                got = secrets_in(pid, needles)
                scanned.add(pid)
                if got:
                    leaks[pid] = (proc_status(pid).get("Name"), sorted(got))
            time.sleep(0.02)
        t.join()
        self.assertEqual(out[0].status, 202, out[0])
        self.addCleanup(self._cleanup_sandbox, out[0].json()["id"])
        self.assertGreaterEqual(len(scanned), 2, "the pull worker and a child were not seen")
        return out[0].json()["id"], leaks


class ConfinedPull(RegistryCase):

    def test_registry_replies_reach_only_confined_children(self):
        # Attack: a registry's replies to the token, manifest, config and layer requests are hostile input: every process that holds a connection to it during a real pull must be a confined child of the pull worker (own mount namespace, no_new_privs, seccomp, a layer child's capabilities at most, none for the manifest child), never the worker or corrald.
        corrald = self.corrald.proc.pid
        tokens = self.proxy.token_requests
        corrald_mnt = os.readlink("/proc/%d/ns/mnt" % corrald)
        t, out = self.start_slow_pull("stalled")
        seen = {}
        while t.is_alive():
            for pid in registry_clients(self.proxy.port) - set(seen):
                try:
                    st = proc_status(pid)
                    worker = int(st["PPid"])
                    seen[pid] = (st, int(proc_status(worker)["PPid"]),
                                 os.readlink("/proc/%d/ns/mnt" % pid))
                except (OSError, KeyError, ValueError):
                    pass  # gone meanwhile
            time.sleep(0.01)
        t.join()
        self.assertEqual(out[0].status, 202, out[0])
        self.addCleanup(self._cleanup_sandbox, out[0].json()["id"])
        self.assertTrue(seen, "no process was seen talking to the registry")
        for pid, (st, grandparent, mnt) in seen.items():
            what = "pid %d (%s, parent %s): %s" % (pid, st.get("Name"), st.get("PPid"), st)
            self.assertNotEqual(pid, corrald, "corrald itself talks to the registry")
            self.assertEqual(grandparent, corrald,
                             "the pull worker itself talks to the registry: " + what)
            self.assertEqual(st["NoNewPrivs"], "1", what)
            self.assertEqual(st["Seccomp"], "2", what)
            self.assertNotEqual(mnt, corrald_mnt, "no mount view of its own: " + what)
            caps = int(st["CapEff"], 16)
            self.assertEqual({c for c in range(64) if caps >> c & 1} - KEPT_CAPS, set(), what)
            self.assertEqual(int(st["CapBnd"], 16) & ~caps, 0, what)
        self.assertIn(0, [int(st["CapEff"], 16) for st, _, _ in seen.values()],
                      "the manifest child (no capabilities) was seen: %s" % seen)
        self.assertIn(sorted(KEPT_CAPS), [[c for c in range(64) if int(st["CapEff"], 16) >> c & 1]
                                          for st, _, _ in seen.values()],
                      "a layer child was seen: %s" % seen)
        self.assertEqual(self.proxy.token_requests - tokens, 1, "one token for the whole pull")
        self.assertEqual(oci.store_tmp(self.corrald.state_dir), [], "no work dir left")
        self.assert_platform_alive(out[0].json()["id"])

    def test_confined_pull_completes_layers(self):
        # Attack: none; the confined children must still produce whole layers, opaque marks
        # (applied by the parent from the child's list) included, and leave no work dir behind.
        d = os.path.join(self.tmp, "rich")
        lower = oci.layer_tar([D("opq"), F("opq/old", "1"), D("data"), F("data/gone", "g")])
        info = oci.write_layout(d, [oci.base_layer(), lower, rich_layer()])
        ref = self.reg.push(d, "confine/rich")
        sid = self.create(image={"uri": ref})["id"]
        top = os.path.join(self.corrald.state_dir, "images", "layers", info["layers"][2][7:])
        self.assertEqual(os.getxattr(os.path.join(top, "opq"), "trusted.overlay.opaque"), b"y")
        self.assertEqual(oci.store_tmp(self.corrald.state_dir), [], "no work dir left")
        res = self.run_ok(sid, "ls /opq; ls /data; cat /target")
        self.assertEqual(res.stdout, "new\nT")
        self.assert_platform_alive(sid)


def secrets_in(pid, needles):
    """Which of needles (bytes) are in pid's readable memory or its environment."""
    found = set()
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            env = f.read()
        found |= {n for n in needles if n in env}
        with open("/proc/%d/maps" % pid) as f:
            maps = f.read().splitlines()
        with open("/proc/%d/mem" % pid, "rb", buffering=0) as mem:
            for line in maps:
                addr, perms = line.split()[:2]
                if not perms.startswith("r") or line.endswith("[vvar]") or line.endswith("[vsyscall]"):
                    continue
                start, end = (int(x, 16) for x in addr.split("-"))
                if end - start > 1 << 30:
                    continue  # reserved, not used: the test checks it found what corrald holds
                tail = b""
                for off in range(start, end, 1 << 20):
                    try:
                        mem.seek(off)
                        data = tail + mem.read(min(1 << 20, end - off))
                    except (OSError, ValueError, OverflowError):
                        break
                    found |= {n for n in needles if n in data}
                    tail = data[-64:]
    except OSError:
        pass  # gone meanwhile
    return found


class PullMemory(RegistryCase):
    api_key = "pull-memory-key-%s" % os.urandom(8).hex()

    def test_pull_processes_hold_none_of_corralds_secrets(self):
        # Attack: code that took over a process of a pull (a hostile layer or manifest through a libarchive, jansson or curl bug) reads its own memory and environment for what corrald knows: the API key and another sandbox's env. A forked pull worker and its children hold a copy of all of it.
        self.skip_if_sanitized()
        canary = "canary-%s" % os.urandom(8).hex()
        other = self.create(env={"OTHER_TENANT_TOKEN": canary})["id"]
        corrald = self.corrald.proc.pid
        needles = [self.api_key.encode(), canary.encode()]
        # corrald itself holds both (the test would find nothing anywhere otherwise)
        self.assertEqual(secrets_in(corrald, needles), set(needles))
        sid, leaks = self.scan_slow_pull("memory", needles)
        self.assertEqual(leaks, {}, "a pull process holds corrald's secrets")
        self.assert_platform_alive(sid, other)


class ApiKeyOnTheCommandLine(AttackCase):
    api_key = "cmdline-key-%s" % os.urandom(8).hex()
    corrald_kwargs = {"api_key": api_key}

    def test_api_key_is_not_in_corralds_command_line(self):
        # Attack: any user of the host (or a pull's child where Landlock is missing: /proc/<pid>/cmdline needs no ptrace access) reads corrald's command line, `--api-key KEY` in it, then drives the API.
        with open("/proc/%d/cmdline" % self.corrald.proc.pid, "rb") as f:
            cmdline = f.read()
        self.assertIn(b"--api-key", cmdline)
        self.assertNotIn(self.api_key.encode(), cmdline, "the API key is in /proc/<corrald>/cmdline")
        # and the key still works
        self.assertEqual(self.client.get("/v1/sandboxes").status, 200)
        nokey = self.corrald.client(api_key=None)
        self.addCleanup(nokey.close)
        self.assertEqual(nokey.get("/v1/sandboxes").status, 401)


class PullAuthFileMemory(RegistryCase):
    """corrald with --registry-auth: a docker config.json with credentials for other registries."""
    password = "private-registry-password-%s" % os.urandom(8).hex()
    auth = base64.b64encode(("robot:%s" % password).encode()).decode()
    password2 = "second-registry-password-%s" % os.urandom(8).hex()
    auth_dir = tempfile.mkdtemp(prefix="corral-sec-authfile-")
    extra_args = ["--registry-auth", os.path.join(auth_dir, "config.json")]

    @classmethod
    def setUpClass(cls):
        with open(cls.extra_args[1], "w") as f:
            json.dump({"auths": {"private.registry.invalid:5000": {"auth": cls.auth},
                                 "https://second.registry.invalid": {
                                     "username": "robot2", "password": cls.password2}}}, f)
        os.chmod(cls.extra_args[1], 0o600)
        super().setUpClass()

    @classmethod
    def tearDownClass(cls):
        super().tearDownClass()
        shutil.rmtree(cls.auth_dir, ignore_errors=True)

    def test_pull_processes_hold_no_other_registrys_credentials(self):
        # Attack: a hostile registry's pull (its manifest or layer child taken over) reads its own memory for the credentials the operator's --registry-auth file holds for other, private registries: the worker parsed the whole file, and the freed copies went into every child it forked.
        # (their tails: the first bytes of a freed chunk are the allocator's)
        needles = [self.auth[-24:].encode(), self.password[-16:].encode(),
                   self.password2[-16:].encode()]
        sid, leaks = self.scan_slow_pull("authfile", needles)
        self.assertEqual(leaks, {}, "a pull process holds another registry's credentials")
        self.assert_platform_alive(sid)


if __name__ == "__main__":
    main()
