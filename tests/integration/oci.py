"""
Test images and a real registry for the image suites: OCI layouts built with tarfile and hashlib,
Debian's docker-registry on a loopback port (plain or with htpasswd basic auth), pushes with
skopeo. Standard library only, plus the two Debian binaries (scripts/bootstrap.sh installs them).
"""
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
import http.client

import harness  # noqa: F401 (oci.harness for the suites)
from harness import binary, elf_is_static, free_port, log

REGISTRY_BIN = shutil.which("docker-registry") or "/usr/bin/docker-registry"
SKOPEO = shutil.which("skopeo") or "/usr/bin/skopeo"
HTPASSWD = shutil.which("htpasswd") or "/usr/bin/htpasswd"


def sha256(b):
    return "sha256:" + hashlib.sha256(b).hexdigest()


# Entries: (name, kind, data, mode, uid, gid); kind: file, dir, symlink, hardlink, char.
def F(name, data=b"", mode=0o644, uid=0, gid=0):
    return (name, "file", data if isinstance(data, bytes) else data.encode(), mode, uid, gid)


def D(name, mode=0o755, uid=0, gid=0):
    return (name, "dir", None, mode, uid, gid)


def L(name, target):
    return (name, "symlink", target, 0o777, 0, 0)


def H(name, target):
    return (name, "hardlink", target, 0o644, 0, 0)


def C(name, major, minor, mode=0o666):
    return (name, "char", (major, minor), mode, 0, 0)


def X(entry, **xattrs):
    """entry with PAX xattrs (SCHILY.xattr.NAME = bytes latin-1 as tarfile stores them)."""
    return entry + (xattrs,)


def layer_tar(entries):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for e in entries:
            name, kind, data, mode, uid, gid = e[:6]
            ti = tarfile.TarInfo(name)
            ti.mode, ti.uid, ti.gid, ti.mtime = mode, uid, gid, 1700000000
            if len(e) > 6:
                ti.pax_headers = {"SCHILY.xattr." + k.replace("__", "."): v.decode("latin-1")
                                  for k, v in e[6].items()}
            if kind == "char":
                ti.type, (ti.devmajor, ti.devminor) = tarfile.CHRTYPE, data
                t.addfile(ti)
                continue
            if kind == "file":
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
                continue
            ti.type = {"dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE,
                       "hardlink": tarfile.LNKTYPE, "char": tarfile.CHRTYPE}[kind]
            if kind in ("symlink", "hardlink"):
                ti.linkname = data
            t.addfile(ti)
    return buf.getvalue()


def host_files_layer(paths, with_libs=True):
    """A layer with these host files (and the shared libraries they need), at the same paths."""
    want = set()
    for p in paths:
        want.add(os.path.realpath(p) if not os.path.isdir(p) else p)
        if with_libs and not os.path.isdir(p):
            out = subprocess.run(["ldd", p], capture_output=True, text=True).stdout
            for line in out.splitlines():
                parts = line.split()
                for x in parts:
                    if x.startswith("/"):
                        want.add(os.path.realpath(x))
                        # the name itself (often a symlink), below its real directory
                        want.add(os.path.join(os.path.realpath(os.path.dirname(x)),
                                              os.path.basename(x)))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        seen = set()

        def add(path):
            rel = path.lstrip("/")
            parent = os.path.dirname(rel)
            if parent and parent not in seen:
                add("/" + parent)
            if rel in seen:
                return
            seen.add(rel)
            t.add(path, arcname=rel, recursive=False)

        for p in sorted(want):
            if os.path.isdir(p):
                for root, dirs, files in os.walk(p):
                    dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
                    add(root)
                    for f in files:
                        if not f.endswith(".pyc"):
                            add(os.path.join(root, f))
            elif os.path.exists(p):
                add(p)
        # /bin, /lib, /lib64 are symlinks into /usr on Debian 12: keep them so.
        for link in ("bin", "lib", "lib64", "sbin"):
            if os.path.islink("/" + link) and link not in seen:
                ti = tarfile.TarInfo(link)
                ti.type, ti.linkname = tarfile.SYMTYPE, os.readlink("/" + link)
                t.addfile(ti)
    return buf.getvalue()


SKIP_DIRS = {"test", "tests", "idlelib", "tkinter", "ensurepip", "lib2to3", "pydoc_data",
             "__pycache__", "dist-packages", "site-packages", "turtledemo", "unittest/test"}

BASE_BINS = ["/usr/bin/dash", "/usr/bin/cat", "/usr/bin/ls", "/usr/bin/id", "/usr/bin/stat",
             "/usr/bin/env", "/usr/bin/pwd", "/usr/bin/wc", "/usr/bin/readlink", "/usr/bin/mkdir",
             "/usr/bin/touch", "/usr/bin/echo", "/usr/bin/sleep", "/usr/bin/tail"]


def base_layer(python=False):
    paths = list(BASE_BINS)
    # A sanitizer build's corral-execd is dynamically linked: its loader and libraries (libasan...)
    # must be in the image too (execd is exec'd from the host's binary, by fd).
    execd = os.path.realpath(binary("corral-execd"))
    if os.path.exists(execd) and not elf_is_static(execd):
        paths.append(execd)
    if python:
        paths += ["/usr/bin/python3.11", "/usr/lib/python3.11"]
    tar = host_files_layer(paths)
    extra = [L("usr/bin/sh", "dash")]
    if python:
        extra.append(L("usr/bin/python3", "python3.11"))
    return _concat(tar, layer_tar(extra))


def _concat(a, b):
    """Two tar streams as one (drop a's end-of-archive blocks)."""
    ta = tarfile.open(fileobj=io.BytesIO(a))
    tb = tarfile.open(fileobj=io.BytesIO(b))
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as t:
        for src in (ta, tb):
            for m in src.getmembers():
                t.addfile(m, src.extractfile(m) if m.isfile() else None)
    return out.getvalue()


def compress(tar, how):
    if how == "gzip":
        return gzip.compress(tar, compresslevel=1, mtime=0), \
            "application/vnd.oci.image.layer.v1.tar+gzip"
    if how == "zstd":
        p = subprocess.run(["zstd", "-q", "-c", "-1"], input=tar, capture_output=True, check=True)
        return p.stdout, "application/vnd.oci.image.layer.v1.tar+zstd"
    return tar, "application/vnd.oci.image.layer.v1.tar"


def write_layout(d, layers, config=None, tag="latest", compression="gzip", diff_ids_of=None,
                 blobs=None):
    """An OCI image layout at d: layers are tar bytes (lowest first) or (tar, compression).
    diff_ids_of: a function given the true rootfs.diff_ids that returns what the config says (a
    lying config); blobs: a function given (index, compressed bytes) that returns the blob to
    store instead (its descriptor follows it: a blob true to its digest)."""
    os.makedirs(os.path.join(d, "blobs", "sha256"), exist_ok=True)

    def blob(b):
        dg = sha256(b)
        with open(os.path.join(d, "blobs", "sha256", dg[7:]), "wb") as f:
            f.write(b)
        return dg

    descs, diff_ids = [], []
    for l in layers:
        tar, how = l if isinstance(l, tuple) else (l, compression)
        data, mt = compress(tar, how)
        if blobs:
            data = blobs(len(descs), data)
        descs.append({"mediaType": mt, "digest": blob(data), "size": len(data)})
        diff_ids.append(sha256(tar))
    if diff_ids_of:
        diff_ids = diff_ids_of(diff_ids)
    cfg = {"architecture": "amd64", "os": "linux", "config": config or {},
           "rootfs": {"type": "layers", "diff_ids": diff_ids}}
    cb = json.dumps(cfg).encode()
    man = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
           "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                      "digest": blob(cb), "size": len(cb)},
           "layers": descs}
    mb = json.dumps(man).encode()
    idx = {"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": blob(mb),
        "size": len(mb), "annotations": {"org.opencontainers.image.ref.name": tag}}]}
    with open(os.path.join(d, "index.json"), "w") as f:
        json.dump(idx, f)
    with open(os.path.join(d, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    return {"manifest": sha256(mb), "layers": [x["digest"] for x in descs]}


def write_index_layout(d, platforms, tag="latest"):
    """An OCI layout whose tag is an index of one image per (arch, layers)."""
    entries = []
    for arch, layers in platforms:
        info = write_layout(d, layers)
        with open(os.path.join(d, "index.json")) as f:
            desc = json.load(f)["manifests"][0]
        # the config's architecture follows the platform
        mpath = os.path.join(d, "blobs", "sha256", info["manifest"][7:])
        with open(mpath) as f:
            man = json.load(f)
        cpath = os.path.join(d, "blobs", "sha256", man["config"]["digest"][7:])
        with open(cpath) as f:
            cfg = json.load(f)
        cfg["architecture"] = arch
        cb = json.dumps(cfg).encode()
        with open(os.path.join(d, "blobs", "sha256", sha256(cb)[7:]), "wb") as f:
            f.write(cb)
        man["config"]["digest"], man["config"]["size"] = sha256(cb), len(cb)
        mb = json.dumps(man).encode()
        with open(os.path.join(d, "blobs", "sha256", sha256(mb)[7:]), "wb") as f:
            f.write(mb)
        del desc["annotations"]
        desc.update(digest=sha256(mb), size=len(mb), platform={"os": "linux", "architecture": arch})
        entries.append(desc)
    ib = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                     "manifests": entries}).encode()
    with open(os.path.join(d, "blobs", "sha256", sha256(ib)[7:]), "wb") as f:
        f.write(ib)
    with open(os.path.join(d, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.index.v1+json", "digest": sha256(ib),
            "size": len(ib), "annotations": {"org.opencontainers.image.ref.name": tag}}]}, f)


class Registry:
    """docker-registry on 127.0.0.1:<free port>, optionally with htpasswd basic auth."""

    def __init__(self, user=None, password=None):
        self.tmp = tempfile.mkdtemp(prefix="corral-registry-")
        self.root = os.path.join(self.tmp, "data")
        self.user, self.password = user, password
        auth = ""
        if user:
            hp = os.path.join(self.tmp, "htpasswd")
            subprocess.run([HTPASSWD, "-Bbc", hp, user, password], check=True,
                           capture_output=True)
            auth = "auth:\n  htpasswd:\n    realm: corral-test\n    path: %s\n" % hp
        # A port free_port() found may be taken before the registry binds it (a suite beside
        # this one): it exits then, and starts again on another.
        for attempt in range(5):
            if self._start(auth) or attempt == 4:
                return
            log("registry port %d was taken before it bound it; trying another" % self.port)

    def _start(self, auth):
        """Start on a free port: True once it answers, False when the port was taken."""
        self.port = free_port()
        self.host = "127.0.0.1:%d" % self.port
        cfg = os.path.join(self.tmp, "config.yml")
        with open(cfg, "w") as f:
            f.write("version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
                    "    rootdirectory: %s\nhttp:\n  addr: %s\n%s" % (self.root, self.host, auth))
        self.log = open(os.path.join(self.tmp, "registry.log"), "wb")
        self.proc = subprocess.Popen([REGISTRY_BIN, "serve", cfg], stdout=self.log,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        deadline = time.monotonic() + 20
        while True:
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/v2/")
                st = c.getresponse().status
                c.close()
                if st in (200, 401) and harness.listening(self.proc.pid, self.port):
                    return True
            except OSError:
                pass
            if self.proc.poll() is not None and "address already in use" in self.log_text():
                self.log.close()
                return False
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("docker-registry did not start: %s" % self.log_text())
            time.sleep(0.05)

    def log_text(self):
        with open(os.path.join(self.tmp, "registry.log"), "rb") as f:
            return f.read()[-2000:].decode(errors="replace")

    def push(self, layout, name, tag="latest", fmt=None, all_platforms=False):
        cmd = [SKOPEO, "--insecure-policy", "copy", "-q", "--dest-tls-verify=false"]
        if fmt:
            cmd += ["--format", fmt]
        if all_platforms:
            cmd += ["--all"]
        if self.user:
            cmd += ["--dest-creds", "%s:%s" % (self.user, self.password)]
        cmd += ["oci:%s:latest" % layout, "docker://%s/%s:%s" % (self.host, name, tag)]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            raise RuntimeError("skopeo copy failed: %s" % p.stderr)
        return "%s/%s:%s" % (self.host, name, tag)

    def manifest_type(self, name, tag):
        """The media type the registry serves for name:tag (no auth)."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        c.request("GET", "/v2/%s/manifests/%s" % (name, tag), headers={"Accept": ", ".join([
            "application/vnd.oci.image.index.v1+json", "application/vnd.oci.image.manifest.v1+json",
            "application/vnd.docker.distribution.manifest.list.v2+json",
            "application/vnd.docker.distribution.manifest.v2+json"])})
        r = c.getresponse()
        r.read()
        c.close()
        return r.getheader("Content-Type")

    def blob_path(self, digest):
        h = digest[7:]
        return os.path.join(self.root, "docker", "registry", "v2", "blobs", "sha256", h[:2], h,
                            "data")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


def store_layers(state_dir):
    d = os.path.join(state_dir, "images", "layers")
    return set(os.listdir(d)) if os.path.isdir(d) else set()


def store_tmp(state_dir):
    d = os.path.join(state_dir, "images", "tmp")
    return os.listdir(d) if os.path.isdir(d) else []


class TokenProxy:
    """A registry front with the bearer-token flow (like Docker Hub's): /v2/ needs
    'Authorization: Bearer <token>'; a 401 names the realm /token, which hands out a token for Basic
    credentials (when user is set) or to anyone. Forwards to a plain docker-registry, Range requests included. Faults for
    tests: delay_blobs (seconds before a blob), delay_manifests (seconds before a manifest), cut_blobs (how many blob replies to cut in half),
    stall_blobs (how many to stop in the middle of for stall_seconds, the connection left open),
    ignore_range (answer Range requests with the whole blob, 200), tamper_ranges (flip the
    bytes of every 206 reply, its headers true), shift_ranges (a 206 of another range than
    asked for, its Content-Range saying so), fault_digests (the faults
    only for these blobs; None: all), realm (another proxy's host:port to name as the token
    server: give both the same token). blob_bytes: bytes of blob
    bodies sent, by digest; ranges: the Range headers received, by digest."""

    def __init__(self, upstream, user=None, password=None):
        import base64
        import secrets
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        self.upstream = upstream
        self.port = self.host = None  # the port its server binds (below)
        self.token = secrets.token_hex(16)
        self.delay_blobs = 0.0
        self.delay_manifests = 0.0
        self.realm = None  # host:port of the token server its challenges name (None: itself)
        self.cut_blobs = 0
        self.stall_blobs = 0
        self.stall_seconds = 30.0
        self.ignore_range = False
        self.tamper_ranges = False
        self.shift_ranges = False
        self.fault_digests = None
        self.blob_bytes = {}
        self.ranges = {}
        self.token_requests = 0
        self.blob_requests = 0
        proxy = self
        want_basic = ("Basic " + base64.b64encode(("%s:%s" % (user, password)).encode()).decode()
                      if user else None)

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def reply(self, status, body=b"", headers=()):
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def do_HEAD(self):
                self.do_GET()

            def do_GET(self):
                if self.path.startswith("/token"):
                    proxy.token_requests += 1
                    if want_basic and self.headers.get("Authorization") != want_basic:
                        return self.reply(401, b'{"errors":[{"code":"UNAUTHORIZED","message":"bad credentials for the token server"}]}')
                    return self.reply(200, json.dumps({"token": proxy.token}).encode(),
                                      [("Content-Type", "application/json")])
                if self.headers.get("Authorization") != "Bearer " + proxy.token:
                    repo = self.path[4:].rsplit("/manifests/", 1)[0].rsplit("/blobs/", 1)[0]
                    ch = ('Bearer realm="http://%s/token",service="corral-test",'
                          'scope="repository:%s:pull"' % (proxy.realm or proxy.host, repo))
                    return self.reply(401, b'{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}',
                                      [("WWW-Authenticate", ch)])
                c = http.client.HTTPConnection("127.0.0.1", int(proxy.upstream.split(":")[1]), timeout=30)
                fwd = ("accept",) if proxy.ignore_range else ("accept", "range")
                hdrs = {k: v for k, v in self.headers.items() if k.lower() in fwd}
                if proxy.shift_ranges and hdrs.get("Range", "").startswith("bytes="):
                    first = int(hdrs["Range"][6:].split("-")[0])
                    hdrs["Range"] = "bytes=%d-" % max(0, first - 1000)
                c.request(self.command, self.path, headers=hdrs)
                r = c.getresponse()
                body = r.read()
                c.close()
                keep = [(k, v) for k, v in r.getheaders()
                        if k.lower() in ("content-type", "docker-content-digest", "location",
                                         "content-range")]
                digest = self.path.rsplit("/", 1)[-1]
                if "/manifests/" in self.path and proxy.delay_manifests:
                    time.sleep(proxy.delay_manifests)
                if r.status == 206 and proxy.tamper_ranges:
                    body = bytes(b ^ 0x5A for b in body)
                if "/blobs/" in self.path and self.command == "GET" and r.status in (200, 206):
                    proxy.blob_requests += 1
                    proxy.ranges.setdefault(digest, []).append(self.headers.get("Range"))
                    if proxy.delay_blobs:
                        time.sleep(proxy.delay_blobs)
                    if (proxy.cut_blobs > 0 or proxy.stall_blobs > 0) and (
                            proxy.fault_digests is None or digest in proxy.fault_digests):
                        stall = proxy.stall_blobs > 0
                        if stall:
                            proxy.stall_blobs -= 1
                        else:
                            proxy.cut_blobs -= 1
                        self.send_response(r.status)
                        for k, v in keep:
                            self.send_header(k, v)
                        self.send_header("Content-Length", str(len(body)))
                        self.end_headers()
                        self.wfile.write(body[: len(body) // 2])
                        self.wfile.flush()
                        proxy.blob_bytes[digest] = proxy.blob_bytes.get(digest, 0) + len(body) // 2
                        if stall:
                            time.sleep(proxy.stall_seconds)
                        self.close_connection = True
                        return
                    proxy.blob_bytes[digest] = proxy.blob_bytes.get(digest, 0) + len(body)
                self.reply(r.status, body, keep)

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                pass  # a pull killed mid-request resets its connection: expected in tests

        # bound to a port of its own choosing (free_port() then a bind could lose the port to
        # another suite in between)
        self.server = Server(("127.0.0.1", 0), H)
        self.port = self.server.server_address[1]
        self.host = "127.0.0.1:%d" % self.port
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
