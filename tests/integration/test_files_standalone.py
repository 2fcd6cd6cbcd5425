#!/usr/bin/env python3
"""The execd files API against a standalone corral-execd.

corral-execd runs as an ordinary process on a unix socket in a temp dir, with its files root
(CORRAL_EXECD_FILES_ROOT) set to another temp dir, and every /files and /directories route is
driven over real HTTP/1.1: the checks of the upstream OpenSandbox SDK e2e filesystem test (mkdir
modes, three writes one of them owned by nobody:nogroup, text/range/bytes reads, info, search,
set_permissions, rewrite advancing mtime, batched replace counts, move, delete), a 50 MiB upload
and download with a checksum, the error shapes, and escape attempts through planted symlinks,
which must never touch anything outside the root.
"""

import hashlib
import json
import os
import pwd
import grp
import signal
import stat
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse
from datetime import datetime

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from unixhttp import UnixConnection  # noqa: E402

BUILD = os.environ.get("CORRAL_BUILD_DIR", os.path.join(os.path.dirname(__file__), "../../build"))
EXECD = os.path.join(BUILD, "corral-execd")
BIG = 50 << 20


def q(**params):
    """Query string; a list value repeats the key."""
    items = []
    for k, v in params.items():
        for x in v if isinstance(v, list) else [v]:
            items.append((k, x))
    return urllib.parse.urlencode(items)


def multipart(pairs, boundary="----corralTestBoundary7MA4YWxk", metadata_filename="metadata"):
    """Body the way the OpenSandbox SDKs send it: per file a metadata *file* part, then the file."""
    out = []
    for meta, data in pairs:
        if meta is not None:
            out.append(b"--" + boundary.encode() + b"\r\n")
            disp = 'form-data; name="metadata"'
            if metadata_filename:
                disp += '; filename="%s"' % metadata_filename
            out.append(b"Content-Disposition: " + disp.encode() + b"\r\n")
            out.append(b"Content-Type: application/json\r\n\r\n")
            out.append(json.dumps(meta).encode() if not isinstance(meta, bytes) else meta)
            out.append(b"\r\n")
        if data is not None:
            out.append(b"--" + boundary.encode() + b"\r\n")
            out.append(b'Content-Disposition: form-data; name="file"; filename="blob"\r\n')
            out.append(b"Content-Type: application/octet-stream\r\n\r\n")
            out.append(data)
            out.append(b"\r\n")
    out.append(b"--" + boundary.encode() + b"--\r\n")
    return b"".join(out), "multipart/form-data; boundary=" + boundary


def slurp(path):
    with open(path, "rb") as f:
        return f.read()


def parse_time(s):
    """RFC 3339 with up to nanoseconds and a Z, as Go's RFC3339Nano prints it."""
    assert s.endswith("Z"), s
    base, _, frac = s[:-1].partition(".")
    t = datetime.strptime(base, "%Y-%m-%dT%H:%M:%S")
    return t.timestamp() + (int(frac.ljust(9, "0")) / 1e9 if frac else 0)


class Execd:
    def __init__(self, resolve="auto"):
        self.dir = tempfile.mkdtemp(prefix="execd-files-test-")
        self.root = os.path.join(self.dir, "root")
        self.outside = os.path.join(self.dir, "outside")
        os.mkdir(self.root)
        os.mkdir(self.outside)
        run = os.path.join(self.dir, "run")
        os.mkdir(run)
        self.sock = os.path.join(run, "execd.sock")
        self.log = open(os.path.join(self.dir, "execd.log"), "w+")
        env = dict(os.environ, CORRAL_EXECD_FILES_ROOT=self.root, HOME="/home/tester",
                   CORRAL_EXECD_FILES_RESOLVE=resolve)
        self.proc = subprocess.Popen(
            [EXECD, "--socket", self.sock, "--state", os.path.join(run, "execs"), "--log-level", "debug"],
            stdout=self.log, stderr=self.log, env=env)
        deadline = time.time() + 10
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("execd exited: " + self.logtext())
            c = UnixConnection(self.sock, 2)
            try:
                c.request("GET", "/ping")
                r = c.getresponse()
                r.read()
                if r.status == 200:
                    return
            except OSError:
                pass
            finally:
                c.close()
            time.sleep(0.02)
        raise RuntimeError("execd did not answer /ping: " + self.logtext())

    def logtext(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        # rm -rf never follows the planted symlinks; everything is below our temp dir.
        subprocess.run(["rm", "-rf", "--one-file-system", self.dir])


class FilesTest(unittest.TestCase):
    RESOLVE = "auto"  # openat2 on this kernel

    @classmethod
    def setUpClass(cls):
        cls.execd = Execd(cls.RESOLVE)
        cls.root = cls.execd.root

    @classmethod
    def tearDownClass(cls):
        cls.execd.stop()

    def setUp(self):
        self.conn = UnixConnection(self.execd.sock, 60)  # one keep-alive connection per test

    def test_resolver_in_use(self):
        self.info("/")
        want = "the fallback walk" if self.RESOLVE == "fallback" else "openat2"
        self.assertIn("with " + want, self.execd.logtext())

    def tearDown(self):
        self.conn.close()
        self.assertIsNone(self.execd.proc.poll(), "execd died: " + self.execd.logtext()[-2000:])

    def req(self, method, path, body=None, headers=None, ctype=None):
        h = dict(headers or {})
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
            h["Content-Type"] = "application/json"
        if ctype:
            h["Content-Type"] = ctype
        self.conn.request(method, path, body=body, headers=h)
        r = self.conn.getresponse()
        return r, r.read()

    def ok(self, method, path, body=None, **kw):
        r, data = self.req(method, path, body, **kw)
        self.assertEqual(r.status, 200, data)
        return json.loads(data) if data else None

    def err(self, status, code, method, path, body=None, **kw):
        r, data = self.req(method, path, body, **kw)
        self.assertEqual(r.status, status, data)
        e = json.loads(data)
        self.assertEqual(set(e), {"code", "message"}, e)
        self.assertEqual(e["code"], code, e)
        self.assertTrue(e["message"], e)
        return e

    def upload(self, pairs, **kw):
        body, ctype = multipart(pairs, **kw)
        r, data = self.req("POST", "/files/upload", body, ctype=ctype)
        return r, data

    def upload_ok(self, pairs):
        r, data = self.upload(pairs)
        self.assertEqual(r.status, 200, data)
        self.assertEqual(data, b"")

    def info(self, *paths):
        return self.ok("GET", "/files/info?" + q(path=list(paths)))

    def download(self, path, headers=None):
        return self.req("GET", "/files/download?" + q(path=path), headers=headers)

    def host(self, rel):
        return os.path.join(self.root, rel.lstrip("/"))

    # ---- the upstream SDK e2e filesystem checks -------------------------------------------------

    def test_e2e_filesystem_flow(self):
        base = "/e2e"
        # mkdir with modes 755 and 644 is reported back
        self.ok("POST", "/directories", {base + "/d755": {"mode": 755}, base + "/d644": {"mode": 644}})
        inf = self.info(base + "/d755", base + "/d644")
        self.assertEqual(inf[base + "/d755"]["type"], "directory")
        self.assertEqual(inf[base + "/d755"]["mode"], 755)
        self.assertEqual(inf[base + "/d644"]["mode"], 644)
        self.assertEqual(stat.S_IMODE(os.stat(self.host(base + "/d644")).st_mode), 0o644)

        # write 3 files in one request, one owned by nobody:nogroup
        t1, t2, t3 = base + "/f1.txt", base + "/f2.txt", base + "/bin.dat"
        binary = bytes(range(256)) * 4
        self.upload_ok([
            ({"path": t1, "mode": 644}, b"hello corral\n"),
            ({"path": t2, "mode": 600, "owner": "nobody", "group": "nogroup"}, b"second file\n"),
            ({"path": t3}, binary),
        ])
        st = os.stat(self.host(t2))
        self.assertEqual((pwd.getpwuid(st.st_uid).pw_name, grp.getgrgid(st.st_gid).gr_name), ("nobody", "nogroup"))
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o600)
        self.assertEqual(os.stat(self.host(t3)).st_uid, os.getuid())  # chowned to execd's own ids

        # read as text, a range, bytes
        r, data = self.download(t1)
        self.assertEqual(r.status, 200)
        self.assertEqual(data, b"hello corral\n")
        self.assertEqual(r.getheader("Content-Type"), "application/octet-stream")
        self.assertEqual(r.getheader("Content-Disposition"), 'attachment; filename="f1.txt"')
        self.assertEqual(r.getheader("Content-Length"), "13")
        r, data = self.download(t1, {"Range": "bytes=6-11"})
        self.assertEqual(r.status, 206)
        self.assertEqual(data, b"corral")
        self.assertEqual(r.getheader("Content-Range"), "bytes 6-11/13")
        self.assertEqual(r.getheader("Content-Length"), "6")
        r, data = self.download(t1, {"Range": "bytes=-3"})
        self.assertEqual((r.status, data, r.getheader("Content-Range")), (206, b"al\n", "bytes 10-12/13"))
        r, data = self.download(t1, {"Range": "bytes=7-"})
        self.assertEqual((r.status, data), (206, b"orral\n"))
        r, data = self.download(t3)
        self.assertEqual(data, binary)

        # info: size, mode, owner
        inf = self.info(t1, t2)
        self.assertEqual(inf[t1]["size"], 13)
        self.assertEqual(inf[t1]["mode"], 644)
        self.assertEqual(inf[t1]["type"], "file")
        self.assertEqual(inf[t1]["path"], t1)
        self.assertEqual(inf[t1]["owner"], "root")
        self.assertEqual(inf[t2]["owner"], "nobody")
        self.assertEqual(inf[t2]["group"], "nogroup")
        self.assertEqual(inf[t2]["mode"], 600)
        self.assertEqual(set(inf[t1]), {"path", "type", "size", "modified_at", "created_at", "owner", "group", "mode"})

        # search *.txt
        found = self.ok("GET", "/files/search?" + q(path=base, pattern="*.txt"))
        self.assertEqual(sorted(f["path"] for f in found), [t1, t2])
        self.assertTrue(all(f["type"] == "file" for f in found))

        # set_permissions 600 nobody:nogroup
        self.ok("POST", "/files/permissions", {t1: {"mode": 600, "owner": "nobody", "group": "nogroup"}})
        inf = self.info(t1)[t1]
        self.assertEqual((inf["mode"], inf["owner"], inf["group"]), (600, "nobody", "nogroup"))

        # rewrite: the mtime advances
        before = parse_time(self.info(t1)[t1]["modified_at"])
        time.sleep(0.05)
        self.upload_ok([({"path": t1}, b"rewritten\n")])
        after = self.info(t1)[t1]
        self.assertGreater(parse_time(after["modified_at"]), before)
        self.assertEqual(after["size"], 10)
        # rewritten without owner/group: back to execd's own ids, mode kept
        self.assertEqual(after["owner"], "root")
        self.assertEqual(after["mode"], 600)

        # replace: counts 1, 0 and 3 in one batch
        ra, rb, rc = base + "/ra.txt", base + "/rb.txt", base + "/rc.txt"
        self.upload_ok([({"path": ra, "mode": 640}, b"one foo here"), ({"path": rb}, b"nothing"),
                        ({"path": rc}, b"foo foo foo")])
        res = self.ok("POST", "/files/replace?verbose=true",
                      {ra: {"old": "foo", "new": "bar"}, rb: {"old": "foo", "new": "bar"},
                       rc: {"old": "foo", "new": "bazz"}})
        self.assertEqual(res, {ra: {"replacedCount": 1}, rb: {"replacedCount": 0}, rc: {"replacedCount": 3}})
        self.assertEqual(self.download(ra)[1], b"one bar here")
        self.assertEqual(self.download(rc)[1], b"bazz bazz bazz")
        self.assertEqual(stat.S_IMODE(os.stat(self.host(ra)).st_mode), 0o640)  # mode kept
        r, data = self.req("POST", "/files/replace", {rc: {"old": "bazz", "new": ""}})
        self.assertEqual((r.status, data), (200, b""))
        self.assertEqual(self.download(rc)[1], b"  ")

        # move
        moved = base + "/sub/dir/moved.txt"
        self.ok("POST", "/files/mv", [{"src": ra, "dest": moved}])
        self.assertFalse(os.path.exists(self.host(ra)))
        self.assertEqual(self.download(moved)[1], b"one bar here")

        # delete files, then directories
        self.ok("DELETE", "/files?" + q(path=[moved, rb, base + "/never-existed"]))
        self.assertFalse(os.path.exists(self.host(moved)))
        self.assertFalse(os.path.exists(self.host(rb)))
        self.ok("DELETE", "/directories?" + q(path=[base + "/d755", base + "/d644", base + "/sub"]))
        for d in ("d755", "d644", "sub"):
            self.assertFalse(os.path.exists(self.host(base + "/" + d)))
        self.err(404, "FILE_NOT_FOUND", "GET", "/files/info?" + q(path=base + "/d755"))

    # ---- route details ---------------------------------------------------------------------------

    def test_big_upload_download_roundtrip(self):
        data = os.urandom(BIG - 12345) + b"\r\n--" + b"x" * 12341  # ends like a near-delimiter
        self.assertEqual(len(data), BIG)
        want = hashlib.sha256(data).hexdigest()
        t0 = time.time()
        self.upload_ok([({"path": "/big/blob.bin", "mode": 644}, data)])
        self.assertEqual(os.path.getsize(self.host("/big/blob.bin")), BIG)
        with open(self.host("/big/blob.bin"), "rb") as f:
            self.assertEqual(hashlib.sha256(f.read()).hexdigest(), want)
        self.conn.request("GET", "/files/download?" + q(path="/big/blob.bin"))
        r = self.conn.getresponse()
        self.assertEqual(r.status, 200)
        self.assertEqual(int(r.getheader("Content-Length")), BIG)
        h, n = hashlib.sha256(), 0
        while True:
            chunk = r.read(1 << 20)
            if not chunk:
                break
            h.update(chunk)
            n += len(chunk)
        self.assertEqual(n, BIG)
        self.assertEqual(h.hexdigest(), want)
        r, part = self.download("/big/blob.bin", {"Range": "bytes=%d-%d" % (BIG - 100, BIG - 1)})
        self.assertEqual((r.status, part), (206, data[-100:]))
        print("50 MiB round trip: %.2fs" % (time.time() - t0))

    def test_upload_errors(self):
        r, data = self.upload([({"path": "/u/a"}, b"x")], metadata_filename=None)
        self.assertEqual(r.status, 400, data)
        self.assertEqual(json.loads(data)["code"], "INVALID_FILE_METADATA")  # metadata not a file part
        r, data = self.upload([({"path": "/u/a"}, None)])
        self.assertEqual((r.status, json.loads(data)["code"]), (400, "INVALID_FILE_CONTENT"))
        r, data = self.upload([({"path": "/u/a"}, b"1"), ({"path": "/u/b"}, None)])
        self.assertEqual((r.status, json.loads(data)["code"]), (400, "INVALID_FILE"))
        r, data = self.upload([({"path": ""}, b"1")])
        self.assertEqual((r.status, json.loads(data)["code"]), (400, "INVALID_FILE_METADATA"))
        r, data = self.upload([(b"not json", b"1")])
        self.assertEqual((r.status, json.loads(data)["code"]), (400, "INVALID_FILE_METADATA"))
        r, data = self.upload([({"path": "/u/a", "mode": 789}, b"1")])
        self.assertEqual((r.status, json.loads(data)["code"]), (400, "INVALID_FILE_METADATA"))
        self.assertIn("octal", json.loads(data)["message"])
        r, data = self.upload([({"path": "/u/a", "owner": "no-such-user-xyz"}, b"1")])
        self.assertEqual((r.status, json.loads(data)["code"]), (400, "INVALID_FILE_METADATA"))
        # a truncated body is rejected, never written short
        body, ctype = multipart([({"path": "/u/trunc"}, b"0123456789" * 100)])
        r, data = self.req("POST", "/files/upload", body[:-40], ctype=ctype)
        self.assertEqual((r.status, json.loads(data)["code"]), (400, "INVALID_FILE"), data)
        self.err(400, "INVALID_FILE", "POST", "/files/upload", b"{}", ctype="application/json")
        self.err(400, "INVALID_FILE", "POST", "/files/upload", b"garbage", ctype="multipart/form-data")
        self.assertFalse(os.path.exists(self.host("/u")))  # nothing written on any error
        # several pairs sent metadata-first are paired in order
        body = []
        for i in range(3):
            body.append(({"path": "/u/m%d" % i}, None))
        for i in range(3):
            body.append((None, b"content %d" % i))
        self.upload_ok(body)
        for i in range(3):
            self.assertEqual(slurp(self.host("/u/m%d" % i)), b"content %d" % i)
        # an upload onto a directory or a FIFO fails clearly (and never hangs execd)
        r, data = self.upload([({"path": "/u"}, b"1")])
        self.assertEqual((r.status, json.loads(data)["code"]), (400, "INVALID_FILE"), data)
        os.mkfifo(self.host("/u/fifo"))
        r, data = self.upload([({"path": "/u/fifo"}, b"1")])
        self.assertEqual((r.status, json.loads(data)["code"]), (400, "INVALID_FILE"), data)

    def test_download_errors_and_headers(self):
        self.upload_ok([({"path": "/dl/r\u00e9sum\u00e9.txt"}, b"0123456789")])
        r, data = self.download("/dl/r\u00e9sum\u00e9.txt")
        self.assertEqual(r.status, 200)
        self.assertEqual(r.getheader("Content-Disposition"),
                         "attachment; filename=\"r%C3%A9sum%C3%A9.txt\"; filename*=UTF-8''r%C3%A9sum%C3%A9.txt")
        self.err(400, "MISSING_QUERY", "GET", "/files/download")
        self.err(404, "FILE_NOT_FOUND", "GET", "/files/download?" + q(path="/dl/missing"))
        self.err(416, "UNKNOWN", "GET", "/files/download?" + q(path="/dl/r\u00e9sum\u00e9.txt"),
                 headers={"Range": "bytes=abc"})
        self.err(416, "UNKNOWN", "GET", "/files/download?" + q(path="/dl/r\u00e9sum\u00e9.txt"),
                 headers={"Range": "bytes=10-"})
        self.err(416, "UNKNOWN", "GET", "/files/download?" + q(path="/dl/r\u00e9sum\u00e9.txt"),
                 headers={"Range": "bytes=5-2"})
        self.err(400, "INVALID_REQUEST_BODY", "GET", "/files/download?" + q(path="/dl"))
        os.mkfifo(self.host("/dl/fifo"))
        self.err(400, "INVALID_REQUEST_BODY", "GET", "/files/download?" + q(path="/dl/fifo"))
        # the connection is still usable after errors (keep-alive)
        self.assertEqual(self.download("/dl/r\u00e9sum\u00e9.txt", {"Range": "bytes=0-0"})[1], b"0")
        # line-based reading as the reference: offset (1-based, default 1) and limit (default: no
        # limit), each alone; lines without their terminators, CRLF stripped
        self.upload_ok([({"path": "/dl/lines.txt"}, b"l1\nl2\nl3\nl4\nl5\n")])
        self.upload_ok([({"path": "/dl/crlf.txt"}, b"a\r\nb\rc\r\n\r\nd")])
        cases = {("lines", 2, 2): b"l2\nl3", ("lines", 1, 1): b"l1", ("lines", 4, 10): b"l4\nl5",
                 ("lines", 5, 1): b"l5", ("lines", 6, 1): b"", ("lines", 1, 99): b"l1\nl2\nl3\nl4\nl5",
                 ("lines", 4, None): b"l4\nl5", ("lines", None, 2): b"l1\nl2",
                 ("crlf", 1, None): b"a\nb\rc\n\nd", ("crlf", 2, 2): b"b\rc\n"}
        for (f, off, lim), want in cases.items():
            params = {"path": "/dl/%s.txt" % f}
            if off is not None:
                params["offset"] = off
            if lim is not None:
                params["limit"] = lim
            r, data = self.req("GET", "/files/download?" + q(**params))
            self.assertEqual((r.status, data), (200, want), (f, off, lim))
            self.assertEqual(r.getheader("Content-Type"), "text/plain; charset=utf-8")
        for bad in ({"offset": 0}, {"offset": 0, "limit": 1}, {"offset": 1, "limit": "x"}, {"limit": 0}):
            self.err(400, "INVALID_REQUEST_BODY", "GET", "/files/download?" + q(path="/dl/lines.txt", **bad))
        self.err(400, "INVALID_REQUEST_BODY", "GET", "/files/download?" + q(path="/dl/lines.txt", offset=2),
                 headers={"Range": "bytes=0-1"})
        self.err(404, "FILE_NOT_FOUND", "GET", "/files/download?" + q(path="/dl/none", offset=1, limit=1))
        # ~ is execd's HOME inside the root
        self.upload_ok([({"path": "~/notes.txt"}, b"home")])
        self.assertEqual(slurp(self.host("/home/tester/notes.txt")), b"home")
        self.assertEqual(self.download("~/notes.txt")[1], b"home")
        self.assertEqual(self.info("~/notes.txt")["~/notes.txt"]["path"], "/home/tester/notes.txt")

    def test_list_and_search(self):
        self.ok("POST", "/directories", {"/ls/b/deep/deeper": {"mode": 0}, "/ls/a": {"mode": 700}})
        self.upload_ok([({"path": "/ls/z.txt"}, b"z"), ({"path": "/ls/b/x.py"}, b"x"),
                        ({"path": "/ls/b/deep/y.txt"}, b"y")])
        os.symlink("/ls/b", self.host("/ls/link"))
        entries = self.ok("GET", "/directories/list?" + q(path="/ls"))
        self.assertEqual([e["path"] for e in entries], ["/ls/a", "/ls/b", "/ls/link", "/ls/z.txt"])
        self.assertEqual([e["type"] for e in entries], ["directory", "directory", "symlink", "file"])
        self.assertEqual(entries[0]["mode"], 700)
        entries = self.ok("GET", "/directories/list?" + q(path="/ls", depth=2))
        self.assertEqual([e["path"] for e in entries],
                         ["/ls/a", "/ls/b", "/ls/b/deep", "/ls/b/x.py", "/ls/link", "/ls/z.txt"])
        self.assertEqual(self.ok("GET", "/directories/list?" + q(path="/ls", depth=0)), [])
        self.err(400, "INVALID_REQUEST_BODY", "GET", "/directories/list?" + q(path="/ls/link"))
        self.err(400, "INVALID_REQUEST_BODY", "GET", "/directories/list?" + q(path="/ls/z.txt"))
        self.err(400, "INVALID_REQUEST_BODY", "GET", "/directories/list?" + q(path="/ls", depth="x"))
        self.err(404, "FILE_NOT_FOUND", "GET", "/directories/list?" + q(path="/ls/none"))
        self.err(400, "MISSING_QUERY", "GET", "/directories/list")
        # search: recursive, regular files only, symlinks not followed, default pattern
        found = self.ok("GET", "/files/search?" + q(path="/ls"))
        self.assertEqual([f["path"] for f in found], ["/ls/b/deep/y.txt", "/ls/b/x.py", "/ls/z.txt"])
        found = self.ok("GET", "/files/search?" + q(path="/ls", pattern="*.{py,txt}"))
        self.assertEqual(len(found), 3)
        found = self.ok("GET", "/files/search?" + q(path="/ls", pattern="**/*.txt"))
        self.assertEqual([f["path"] for f in found], ["/ls/b/deep/y.txt", "/ls/z.txt"])
        self.err(404, "FILE_NOT_FOUND", "GET", "/files/search?" + q(path="/nowhere"))
        self.err(400, "MISSING_QUERY", "GET", "/files/search")
        self.err(400, "INVALID_REQUEST_BODY", "GET", "/files/search?" + q(path="/ls", pattern="[x"))

    def test_mv_delete_permissions_errors(self):
        self.upload_ok([({"path": "/mv/a"}, b"a"), ({"path": "/mv/b"}, b"b")])
        self.err(409, "INVALID_REQUEST_BODY", "POST", "/files/mv", [{"src": "/mv/a", "dest": "/mv/b"}])
        self.assertEqual(slurp(self.host("/mv/b")), b"b")  # not replaced
        self.err(404, "FILE_NOT_FOUND", "POST", "/files/mv", [{"src": "/mv/none", "dest": "/mv/c"}])
        self.err(400, "INVALID_REQUEST_BODY", "POST", "/files/mv", {"src": "/mv/a"})
        self.err(400, "INVALID_REQUEST_BODY", "POST", "/files/mv", [{"src": "/mv/a"}])
        self.err(400, "INVALID_REQUEST_BODY", "POST", "/files/mv", b"not json", ctype="application/json")
        self.err(400, "INVALID_REQUEST_BODY", "DELETE", "/files?" + q(path="/mv"))  # a directory
        self.ok("DELETE", "/files?" + q(path="/mv/none"))
        self.err(400, "INVALID_REQUEST_BODY", "POST", "/files/permissions", {"/mv/a": {"mode": 778}})
        self.err(400, "INVALID_REQUEST_BODY", "POST", "/files/permissions", {"/mv/a": {"mode": "644"}})
        self.err(400, "INVALID_REQUEST_BODY", "POST", "/files/permissions", {"/mv/a": {"owner": "no-such-user-xyz"}})
        self.err(404, "FILE_NOT_FOUND", "POST", "/files/permissions", {"/mv/none": {"mode": 644}})
        self.ok("POST", "/files/permissions", {"/mv/a": {"mode": 0, "owner": "nobody"}})
        st = os.stat(self.host("/mv/a"))
        self.assertEqual(pwd.getpwuid(st.st_uid).pw_name, "nobody")
        self.err(400, "INVALID_REQUEST_BODY", "POST", "/files/replace", {"/mv/a": {"old": "", "new": "x"}})
        self.err(404, "FILE_NOT_FOUND", "POST", "/files/replace", {"/mv/none": {"old": "a", "new": "x"}})
        self.err(400, "INVALID_REQUEST_BODY", "DELETE", "/directories?" + q(path="/"))
        self.ok("DELETE", "/directories?" + q(path="/mv/none"))
        self.err(405, "NOT_SUPPORTED", "PUT", "/files/info")
        # info of several paths, keyed by the path as requested; lstat semantics
        os.symlink("a", self.host("/mv/la"))
        inf = self.info("/mv/a", "/mv//la", "/mv/../mv/b")
        self.assertEqual(set(inf), {"/mv/a", "/mv//la", "/mv/../mv/b"})
        self.assertEqual(inf["/mv//la"]["type"], "symlink")
        self.assertEqual(inf["/mv//la"]["path"], "/mv/la")
        self.assertEqual(inf["/mv/../mv/b"]["path"], "/mv/b")
        self.assertEqual(self.ok("GET", "/files/info"), {})

    # ---- escapes ---------------------------------------------------------------------------------

    def test_symlink_escapes_stay_inside(self):
        out = self.execd.outside
        canary = os.path.join(out, "canary")
        with open(canary, "w") as f:
            f.write("host secret")
        os.chmod(canary, 0o644)
        os.makedirs(self.host("/esc"))
        os.symlink(out, self.host("/esc/abs"))                   # absolute path of a host dir
        os.symlink("../../../../../../../" + out.lstrip("/"), self.host("/esc/rel"))
        os.symlink("/etc", self.host("/esc/etc"))                # /etc of the sandbox, not the host
        os.symlink("..", self.host("/esc/up"))
        os.symlink("loop", self.host("/esc/loop"))
        host_before = sorted(os.listdir(out))

        for p in ("/esc/abs/canary", "/esc/rel/canary", "/esc/up/../../outside/canary",
                  "/../outside/canary", "/esc/etc/passwd", "/esc/etc/shadow"):
            self.err(404, "FILE_NOT_FOUND", "GET", "/files/download?" + q(path=p))
            self.err(404, "FILE_NOT_FOUND", "GET", "/files/info?" + q(path=p))
            self.err(404, "FILE_NOT_FOUND", "POST", "/files/permissions", {p: {"mode": 777, "owner": "nobody"}})
            self.err(404, "FILE_NOT_FOUND", "POST", "/files/replace", {p: {"old": "host", "new": "pwned"}})
            self.err(404, "FILE_NOT_FOUND", "POST", "/files/mv", [{"src": p, "dest": "/esc/stolen"}])
            self.ok("DELETE", "/files?" + q(path=p))
        self.err(400, "INVALID_REQUEST_BODY", "GET", "/files/download?" + q(path="/esc/loop"))
        # writes through the links resolve inside the root: with no in-root target they fail ...
        r, data = self.upload([({"path": "/esc/abs/evil"}, b"x")])
        self.assertEqual(r.status, 404, data)
        # ... and once the root has a directory at that path, they land there
        mirror = self.host(out)
        os.makedirs(mirror)
        self.upload_ok([({"path": "/esc/abs/evil"}, b"x"), ({"path": "/esc/rel/evil2"}, b"y")])
        self.assertEqual(sorted(os.listdir(mirror)), ["evil", "evil2"])
        self.ok("POST", "/directories", {"/esc/abs/newdir": {"mode": 755}, "/esc/up/../../made": {"mode": 0}})
        self.assertTrue(os.path.isdir(os.path.join(mirror, "newdir")))
        self.assertTrue(os.path.isdir(self.host("/made")))
        self.ok("POST", "/files/mv", [{"src": "/esc/abs/evil", "dest": "/esc/rel/moved"}])
        self.assertEqual(sorted(os.listdir(mirror)), ["evil2", "moved", "newdir"])
        etc_mode = stat.S_IMODE(os.stat("/etc").st_mode)
        self.err(404, "FILE_NOT_FOUND", "POST", "/files/permissions", {"/esc/etc": {"mode": 700}})
        self.assertEqual(stat.S_IMODE(os.stat("/etc").st_mode), etc_mode)
        # search and list never leave the root either
        found = self.ok("GET", "/files/search?" + q(path="/esc/abs", pattern="*"))
        self.assertTrue(all(not f["path"].endswith("canary") for f in found), found)
        self.err(400, "INVALID_REQUEST_BODY", "GET", "/directories/list?" + q(path="/esc/abs"))
        listing = self.ok("GET", "/directories/list?" + q(path="/esc/up/../..", depth=1))
        self.assertNotIn("/canary", [e["path"] for e in listing])
        # a file symlink to the host canary: writing through it writes the in-root twin
        os.symlink(canary, self.host("/esc/flink"))
        self.upload_ok([({"path": "/esc/flink", "mode": 777}, b"overwritten?")])
        self.assertEqual(slurp(os.path.join(mirror, "canary")), b"overwritten?")
        self.assertEqual(self.download("/esc/flink")[1], b"overwritten?")
        # rm -rf through a link removes the link, never the host directory
        self.ok("DELETE", "/directories?" + q(path=["/esc/abs", "/esc/rel"]))
        self.assertFalse(os.path.lexists(self.host("/esc/abs")))

        # the host side is untouched
        self.assertEqual(sorted(os.listdir(out)), host_before)
        with open(canary) as f:
            self.assertEqual(f.read(), "host secret")
        st = os.stat(canary)
        self.assertEqual((stat.S_IMODE(st.st_mode), st.st_uid), (0o644, 0))
        self.assertFalse(os.path.exists("/etc/shadow.pwned"))
        self.assertFalse(os.path.exists(os.path.join(os.path.dirname(self.root), "made")))


class FilesFallbackTest(FilesTest):
    """Everything again with the user-space resolver that kernels without openat2 get."""
    RESOLVE = "fallback"


if __name__ == "__main__":
    unittest.main(verbosity=2)
