"""
Integration harness: real corrald, real sandboxes, Python 3 standard library only.

- Corrald: starts build/corrald on a free loopback port with a fresh temporary state dir and a
  unique cgroup name (corral-test-<random>), waits for GET /health, stops it (SIGTERM, or kill -9
  for the restart suite), restarts it on the same state dir, and at the end checks that nothing is
  left behind: no cgroup below the suite's cgroup name in any hierarchy and no mount below its
  state dir. A leak is reported as a test failure, then cleaned up so the machine stays usable.
- Client: a small keep-alive HTTP/1.1 client on http.client.
- run(): POST /sandboxes/{id}/proxy/44772/command and parse the event stream (bare JSON + blank
  line, or "data: {json}") the way the OpenSandbox SDKs do; exit code = int(error.evalue) if an
  error event came, 0 if execution_complete came, else None.

State dirs are only ever removed after /proc/self/mountinfo shows nothing mounted below them, and
the removal never crosses a filesystem boundary: a sandbox's view of the host's /usr must never be
recursed into by a cleanup.
"""

import atexit
import errno
import http.client
import json
import os
import random
import re
import secrets
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("CORRAL_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
BUILD_DIR = os.environ.get("CORRAL_BUILD_DIR") or os.path.join(SOURCE_DIR, "build")
CGROUP_ROOT = "/sys/fs/cgroup"
EXECD_PORT = 44772
UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
HEX32_RE = re.compile(r"^[0-9a-f]{32}$")
# Far above this host's, host-wide tables included (50 sandboxes at the default pids 4096 pass a
# pid_max of 32768): admission is tested by test_resources.py and tests/security with their own.
TEST_CAPACITY = "cpu=100000,memory=100Ti,pids=1000000000,files=1000000000000"

DEFAULT_SPEC = {
    "image": {"uri": "host"},
    "entrypoint": ["sleep", "infinity"],
    "resourceLimits": {"cpu": "1", "memory": "512Mi"},
}


def log(*args):
    print("[harness]", *args, file=sys.stderr, flush=True)


def binary(name):
    return os.path.join(BUILD_DIR, name)


def elf_is_static(path):
    """True when the ELF file at path has no PT_INTERP (no dynamic loader needed)."""
    import struct
    with open(path, "rb") as f:
        hdr = f.read(64)
        if hdr[:4] != b"\x7fELF" or hdr[4] != 2:
            return False
        e_phoff, = struct.unpack_from("<Q", hdr, 32)
        e_phentsize, e_phnum = struct.unpack_from("<HH", hdr, 54)
        for i in range(e_phnum):
            f.seek(e_phoff + i * e_phentsize)
            p_type, = struct.unpack("<I", f.read(4))
            if p_type == 3:  # PT_INTERP
                return False
    return True


def free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def listening(pid, port):
    """Whether process pid itself holds a listening TCP socket on port (an answer on the port may
    come from another process that took it)."""
    inodes = set()
    for name in ("tcp", "tcp6"):
        try:
            with open("/proc/%d/net/%s" % (pid, name)) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        inodes.add("socket:[%s]" % fields[9])
        except OSError:
            return False
    try:
        fds = os.listdir("/proc/%d/fd" % pid)
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink("/proc/%d/fd/%s" % (pid, fd)) in inodes:
                return True
        except OSError:
            pass
    return False


def parse_time(s):
    """RFC 3339 / ISO-8601 with Z or an offset, fractional seconds optional -> aware datetime."""
    if not isinstance(s, str):
        raise ValueError("timestamp is not a string: %r" % (s,))
    t = s.strip()
    if t.endswith("Z") or t.endswith("z"):
        t = t[:-1] + "+00:00"
    # fromisoformat in 3.11 handles up to 6 fractional digits; trim nanoseconds.
    m = re.match(r"^(.*T\d\d:\d\d:\d\d)(\.\d+)?(.*)$", t)
    if m and m.group(2) and len(m.group(2)) > 7:
        t = m.group(1) + m.group(2)[:7] + m.group(3)
    d = datetime.fromisoformat(t)
    if d.tzinfo is None:
        raise ValueError("timestamp has no offset: %r" % s)
    return d


def rfc3339(ts):
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# ---------------------------------------------------------------------------------------------
# mounts and cgroups


def _unescape_mountinfo(s):
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), s)


def mounts_under(path):
    """Mount points at or below path, from /proc/self/mountinfo, deepest first."""
    path = os.path.realpath(path).rstrip("/")
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if len(fields) < 5:
                continue
            mp = _unescape_mountinfo(fields[4])
            if mp == path or mp.startswith(path + "/"):
                found.append(mp)
    found.sort(key=lambda p: p.count("/"), reverse=True)
    return found


def cgroup_hierarchies():
    """Directories of every mounted cgroup hierarchy (v1 controllers, the v2 unified mount)."""
    out = []
    seen = set()
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            try:
                sep = fields.index("-")
            except ValueError:
                continue
            fstype = fields[sep + 1]
            if fstype not in ("cgroup", "cgroup2"):
                continue
            mp = _unescape_mountinfo(fields[4])
            if not mp.startswith(CGROUP_ROOT):
                continue
            real = os.path.realpath(mp)
            if real in seen:
                continue
            seen.add(real)
            out.append(mp)
    return sorted(out)


def controller_dir(ctrl):
    """Host directory of a v1 controller hierarchy (cpu, memory, pids, freezer), or None."""
    for d in cgroup_hierarchies():
        names = os.path.basename(d).split(",")
        if ctrl in names:
            return d
    return None


def cgroup_v2_dir():
    for d in cgroup_hierarchies():
        if os.path.exists(os.path.join(d, "cgroup.controllers")):
            return d
    return None


def suite_cgroup_dirs(cgroup_name):
    """Every existing directory <hierarchy>/<cgroup_name>."""
    out = []
    for h in cgroup_hierarchies():
        d = os.path.join(h, cgroup_name)
        if os.path.isdir(d):
            out.append(d)
    return out


def sandbox_cgroup_dirs(cgroup_name, sid):
    """Every existing directory <hierarchy>/<cgroup_name>/<id> (the sandbox's own cgroup)."""
    out = []
    for h in cgroup_hierarchies():
        d = os.path.join(h, cgroup_name, sid)
        if os.path.isdir(d):
            out.append(d)
    return out


def cgroup_children(d):
    try:
        return sorted(e.name for e in os.scandir(d) if e.is_dir(follow_symlinks=False))
    except FileNotFoundError:
        return []


def _cgroup_procs(d):
    pids = set()
    for root, dirs, files in os.walk(d):
        for name in ("cgroup.procs", "tasks"):
            p = os.path.join(root, name)
            try:
                with open(p) as f:
                    pids.update(int(x) for x in f.read().split())
            except (FileNotFoundError, PermissionError, ValueError, OSError):
                pass
    return pids


def force_remove_cgroup_tree(d):
    """Thaw, kill every process, and rmdir bottom-up. Used only to clean up after a leak."""
    for root, dirs, files in os.walk(d):
        st = os.path.join(root, "freezer.state")
        if os.path.exists(st):
            try:
                with open(st, "w") as f:
                    f.write("THAWED")
            except OSError:
                pass
        fz = os.path.join(root, "cgroup.freeze")
        if os.path.exists(fz):
            try:
                with open(fz, "w") as f:
                    f.write("0")
            except OSError:
                pass
    deadline = time.time() + 10
    while time.time() < deadline:
        pids = _cgroup_procs(d)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    for root, dirs, files in os.walk(d, topdown=False):
        for _ in range(50):
            try:
                os.rmdir(root)
                break
            except FileNotFoundError:
                break
            except OSError as e:
                if e.errno != errno.EBUSY:
                    break
                time.sleep(0.1)


def safe_rmtree(path):
    """Remove path only if nothing is mounted below it, never crossing a filesystem boundary."""
    if not os.path.lexists(path):
        return
    left = mounts_under(path)
    if left:
        raise RuntimeError("refusing to remove %s: still mounted below it: %s" % (path, left))
    top_dev = os.lstat(path).st_dev

    def rm(p):
        st = os.lstat(p)
        if st.st_dev != top_dev:
            raise RuntimeError("refusing to cross a filesystem boundary at %s" % p)
        if stat.S_ISDIR(st.st_mode):
            for e in os.listdir(p):
                rm(os.path.join(p, e))
            os.rmdir(p)
        else:
            os.unlink(p)

    rm(path)


# ---------------------------------------------------------------------------------------------
# HTTP client


class Response:
    def __init__(self, status, reason, headers, body):
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body

    def header(self, name):
        return self.headers.get(name)

    def json(self):
        return json.loads(self.body.decode("utf-8")) if self.body else None

    @property
    def text(self):
        return self.body.decode("utf-8", "replace")

    def __repr__(self):
        b = self.body[:400]
        return "<Response %d %s %r>" % (self.status, self.reason, b)


class CountingConnection(http.client.HTTPConnection):
    """HTTPConnection that counts how many TCP connections it opened (keep-alive checks)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.connects = 0

    def connect(self):
        super().connect()
        self.connects += 1
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


IDEMPOTENT = ("GET", "HEAD", "DELETE", "PUT", "OPTIONS")


class Client:
    """One keep-alive connection to corrald. Not thread-safe: one Client per thread."""

    def __init__(self, host, port, api_key=None, timeout=60.0):
        self.host = host
        self.port = port
        self.api_key = api_key
        self.timeout = timeout
        self.conn = CountingConnection(host, port, timeout=timeout)
        self.requests = 0
        self.ka_timeout = None  # the server's advertised Keep-Alive: timeout=N
        self.last_used = 0.0

    def _expire_idle(self):
        """Drop a pooled socket the server may be about to close (the client practice from
        reference/seeds: expire before the server's advertised idle timeout)."""
        if self.conn.sock is not None and self.ka_timeout:
            if time.monotonic() - self.last_used > self.ka_timeout * 0.75:
                self.conn.close()

    def _note_response(self, headers):
        self.last_used = time.monotonic()
        ka = headers.get("Keep-Alive") if headers is not None else None
        if ka:
            m = re.search(r"timeout=(\d+)", ka)
            if m:
                self.ka_timeout = int(m.group(1))

    @property
    def connects(self):
        return self.conn.connects

    def close(self):
        self.conn.close()

    def _headers(self, headers, body):
        h = {}
        if self.api_key is not None:
            h["OPEN-SANDBOX-API-KEY"] = self.api_key
        if body is not None:
            h["Content-Type"] = "application/json"
        if headers:
            h.update(headers)
        return h

    def request(self, method, path, body=None, headers=None, raw=None, timeout=None):
        """body: a JSON-serialisable object; raw: bytes sent as is."""
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
        h = self._headers(headers, body)
        if raw is not None and "Content-Type" not in h:
            h["Content-Type"] = "application/json"
        for attempt in (0, 1):
            self._expire_idle()
            reused = self.conn.sock is not None
            try:
                if timeout is not None:
                    self.conn.timeout = timeout
                    if self.conn.sock is not None:
                        self.conn.sock.settimeout(timeout)
                self.conn.request(method, path, body=data, headers=h)
                resp = self.conn.getresponse()
                payload = resp.read()
                self.requests += 1
                r = Response(resp.status, resp.reason, resp.headers, payload)
                self._note_response(resp.headers)
                if resp.will_close:
                    self.conn.close()
                return r
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as e:
                self.conn.close()
                # A pooled socket the server closed while idle: retry once, never for a POST
                # (it might have been executed).
                if attempt == 0 and reused and method in IDEMPOTENT:
                    continue
                raise
            except Exception:
                self.conn.close()
                raise
            finally:
                if timeout is not None:
                    self.conn.timeout = self.timeout
                    if self.conn.sock is not None:
                        self.conn.sock.settimeout(self.timeout)

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body=body, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)

    def patch(self, path, body=None, **kw):
        return self.request("PATCH", path, body=body, **kw)

    # --- lifecycle helpers -----------------------------------------------------------------

    def create_sandbox_raw(self, **spec):
        body = dict(DEFAULT_SPEC)
        body.update(spec)
        for k in [k for k, v in body.items() if v is OMIT]:
            del body[k]
        return self.post("/v1/sandboxes", body)

    def get_sandbox(self, sid):
        return self.get("/v1/sandboxes/%s" % sid)

    def delete_sandbox(self, sid):
        return self.delete("/v1/sandboxes/%s" % sid)

    def list_sandboxes(self, state=None, metadata=None, page=None, page_size=None):
        q = []
        for s in ([state] if isinstance(state, str) else (state or [])):
            q.append(("state", s))
        if metadata is not None:
            if isinstance(metadata, dict):
                metadata = urllib.parse.urlencode(metadata)
            q.append(("metadata", metadata))
        if page is not None:
            q.append(("page", str(page)))
        if page_size is not None:
            q.append(("pageSize", str(page_size)))
        path = "/v1/sandboxes"
        if q:
            path += "?" + urllib.parse.urlencode(q)
        return self.get(path)

    def all_sandbox_ids(self):
        ids = []
        page = 1
        while True:
            r = self.list_sandboxes(page=page, page_size=200)
            if r.status != 200:
                raise AssertionError("list failed: %r" % r)
            j = r.json()
            ids.extend(it["id"] for it in j["items"])
            if not j["pagination"]["hasNextPage"]:
                return ids
            page += 1

    # --- execd through the server proxy ----------------------------------------------------

    def execd_path(self, sid, path):
        return "/sandboxes/%s/proxy/%d%s" % (sid, EXECD_PORT, path)

    def run(self, sid, cmd, read_timeout=120.0, **opts):
        """Run a command on this client's keep-alive connection; returns a CommandResult."""
        body = {"command": cmd}
        body.update(opts)
        data = json.dumps(body).encode()
        h = self._headers(None, body)
        t0 = time.monotonic()
        self._expire_idle()
        self.conn.timeout = read_timeout
        try:
            if self.conn.sock is not None:
                self.conn.sock.settimeout(read_timeout)
            self.conn.request("POST", self.execd_path(sid, "/command"), body=data, headers=h)
            resp = self.conn.getresponse()
            res = CommandResult.from_response(resp, t0)
            self.requests += 1
            self._note_response(resp.headers)
            if resp.will_close or not res.clean_end:
                self.conn.close()
            return res
        except Exception:
            self.conn.close()
            raise
        finally:
            self.conn.timeout = self.timeout
            if self.conn.sock is not None:
                self.conn.sock.settimeout(self.timeout)

    def command_status(self, sid, cmd_id):
        return self.get(self.execd_path(sid, "/command/status/%s" % cmd_id))

    def command_logs(self, sid, cmd_id, cursor=None):
        p = "/command/%s/logs" % cmd_id
        if cursor is not None:
            p += "?cursor=%d" % cursor
        return self.get(self.execd_path(sid, p))

    def interrupt(self, sid, cmd_id):
        return self.delete(self.execd_path(sid, "/command?id=%s" % cmd_id))

    def wait_command(self, sid, cmd_id, timeout=30.0):
        """Poll /command/status until running is false; returns the status JSON."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            r = self.command_status(sid, cmd_id)
            if r.status == 200:
                last = r.json()
                if not last.get("running"):
                    return last
            else:
                last = r
            time.sleep(0.05)
        raise AssertionError("command %s still not finished after %.0fs: %r" % (cmd_id, timeout, last))


class _Omit:
    def __repr__(self):
        return "OMIT"


OMIT = _Omit()  # create_sandbox_raw(image=OMIT) leaves the default field out


def parse_event_line(line):
    """One line of an execd stream, the way the SDKs read it; None for framing/comments."""
    if isinstance(line, bytes):
        line = line.decode("utf-8")
    s = line.strip()
    if not s:
        return None
    if s.startswith(":") or s.startswith("event:") or s.startswith("id:") or s.startswith("retry:"):
        return None
    if s.startswith("data:"):
        s = s[5:].strip()
    return json.loads(s)


class CommandResult:
    def __init__(self):
        self.http_status = None
        self.headers = None
        self.body = b""  # non-200 responses
        self.events = []
        self.lines = []  # raw lines as received, for framing checks
        self.clean_end = False
        self.elapsed = None

    @classmethod
    def from_response(cls, resp, t0, on_event=None):
        res = cls()
        res.http_status = resp.status
        res.headers = resp.headers
        if resp.status != 200:
            res.body = resp.read()
            res.clean_end = True
            res.elapsed = time.monotonic() - t0
            return res
        while True:
            line = resp.readline()
            if not line:
                break
            res.lines.append(line)
            ev = parse_event_line(line)
            if ev is not None:
                res.events.append(ev)
                if on_event:
                    on_event(ev)
        res.clean_end = True
        res.elapsed = time.monotonic() - t0
        return res

    def of_type(self, t):
        return [e for e in self.events if e.get("type") == t]

    @property
    def init_id(self):
        inits = self.of_type("init")
        return inits[0].get("text") if inits else None

    @property
    def error(self):
        errs = self.of_type("error")
        return errs[-1].get("error") if errs else None

    @property
    def complete(self):
        return bool(self.of_type("execution_complete"))

    @property
    def exit_code(self):
        err = self.error
        if err is not None:
            try:
                return int(err.get("evalue"))
            except (TypeError, ValueError):
                return None
        if self.complete:
            return 0
        return None

    @property
    def stdout_lines(self):
        return [e.get("text", "") for e in self.of_type("stdout")]

    @property
    def stderr_lines(self):
        return [e.get("text", "") for e in self.of_type("stderr")]

    @staticmethod
    def _join(lines):
        return "\n".join("" if t == "\n" else t for t in lines)

    @property
    def stdout(self):
        return self._join(self.stdout_lines)

    @property
    def stderr(self):
        return self._join(self.stderr_lines)

    def __repr__(self):
        if self.http_status != 200:
            return "<CommandResult http=%s body=%r>" % (self.http_status, self.body[:400])
        ev = self.events if len(self.events) <= 12 else self.events[:6] + ["..."] + self.events[-6:]
        return "<CommandResult exit=%r events=%r>" % (self.exit_code, ev)


class CommandStream:
    """A command whose stream the test reads event by event (interrupt, disconnect, pause)."""

    def __init__(self, host, port, sid, cmd, api_key=None, timeout=60.0, **opts):
        body = {"command": cmd}
        body.update(opts)
        self.conn = CountingConnection(host, port, timeout=timeout)
        h = {"Content-Type": "application/json"}
        if api_key:
            h["OPEN-SANDBOX-API-KEY"] = api_key
        self.t0 = time.monotonic()
        self.conn.request("POST", "/sandboxes/%s/proxy/%d/command" % (sid, EXECD_PORT),
                          body=json.dumps(body).encode(), headers=h)
        self.resp = self.conn.getresponse()
        self.result = CommandResult()
        self.result.http_status = self.resp.status
        self.result.headers = self.resp.headers
        if self.resp.status != 200:
            self.result.body = self.resp.read()
            self.result.clean_end = True

    def next_event(self):
        """The next event, or None at the end of the stream."""
        if self.result.clean_end:
            return None
        while True:
            line = self.resp.readline()
            if not line:
                self.result.clean_end = True
                self.result.elapsed = time.monotonic() - self.t0
                return None
            self.result.lines.append(line)
            ev = parse_event_line(line)
            if ev is not None:
                self.result.events.append(ev)
                return ev

    def wait_for(self, etype):
        while True:
            ev = self.next_event()
            if ev is None or ev.get("type") == etype:
                return ev

    def finish(self):
        while self.next_event() is not None:
            pass
        return self.result

    def abort(self):
        """Close the socket mid-stream, like a client that went away."""
        sock = self.conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.conn.close()


# ---------------------------------------------------------------------------------------------
# corrald


_live_daemons = []
_unfinished = []  # Corrald instances whose shutdown_and_check has not run


def _cleanup_at_exit():
    """An interrupted run (Ctrl-C, SIGTERM from a test runner's timeout, an error before
    tearDownClass) still deletes its sandboxes, stops corrald and removes what it made."""
    for d in list(_unfinished):
        try:
            d.emergency_cleanup()
        except Exception as e:  # noqa: BLE001
            log("emergency cleanup of %s failed: %r" % (d.tmp, e))


def _on_term(signum, frame):
    log("signal %d: cleaning up before exiting" % signum)
    _cleanup_at_exit()
    os._exit(128 + signum)


atexit.register(_cleanup_at_exit)
if threading.current_thread() is threading.main_thread():
    for _sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            signal.signal(_sig, _on_term)
        except (ValueError, OSError):
            pass


def _run_quiet(argv):
    return subprocess.call(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Corrald:
    """network: None (sandboxes loopback-only: --sandbox-subnet none, so suites about other things
    neither depend on nor disturb any network), or a netlab.NetLab whose namespace is the
    sandboxes' whole world (its uplink, its DNS server as the only --dns-upstream, and a policy
    route for their subnet)."""

    def __init__(self, api_key=None, extra_args=None, listen_host="127.0.0.1", image_dir=None,
                 network=None):
        self.tmp = tempfile.mkdtemp(prefix="corral-test-")
        self.state_dir = os.path.join(self.tmp, "state")
        os.mkdir(self.state_dir)
        self.log_path = os.path.join(self.tmp, "corrald.log")
        self.cgroup_name = "corral-test-%s" % secrets.token_hex(4)
        self.api_key = api_key
        self.extra_args = list(extra_args or [])
        self.listen_host = listen_host
        self.image_dir = image_dir
        self.network = network
        # one bridge and nft table pair per corrald: suites run side by side on one host
        self.net_name = network.bridge if network is not None else "ct%s" % secrets.token_hex(4)
        self.port = None
        self.proc = None
        self.starts = 0
        _unfinished.append(self)

    # --- process control ---

    def argv(self, port):
        a = [binary("corrald"), "--listen", "%s:%d" % (self.listen_host, port),
             "--state-dir", self.state_dir, "--cgroup-name", self.cgroup_name]
        if self.api_key is not None:
            a += ["--api-key", self.api_key]
        if self.image_dir is not None:
            a += ["--image-dir", self.image_dir]
        if not any(x == "--sandbox-subnet" or x.startswith("--sandbox-subnet=")
                   for x in self.extra_args):
            if self.network is None:
                a += ["--sandbox-subnet", "none"]
            else:
                a += ["--sandbox-subnet", self.network.sandbox_subnet,
                      "--egress-uplink", self.network.uplink]
        if self.network is not None:
            # corrald's resolver forwards allowed names into the lab, never to the host's
            # resolv.conf nameservers nor anywhere else
            ups = [self.extra_args[i + 1] for i, x in enumerate(self.extra_args[:-1])
                   if x == "--dns-upstream"]
            if any(not self.network.owns(u) for u in ups):
                raise ValueError("--dns-upstream %s is not an address of the lab (%s)"
                                 % (ups, self.network.dns))
            if not ups:
                a += ["--dns-upstream", self.network.dns]
        # never the default name (a test's corrald must not take or leave the host's "corral")
        if not any(x == "--network-name" or x.startswith("--network-name=")
                   for x in self.extra_args):
            a += ["--network-name", self.net_name]
        if os.environ.get("CORRAL_TEST_LOG_LEVEL"):
            a += ["--log-level", os.environ["CORRAL_TEST_LOG_LEVEL"]]
        if not any(x == "--capacity" or x.startswith("--capacity=") for x in self.extra_args):
            # Suites about other things create many 1-CPU sandboxes at once (requests default to
            # limits): admission is tested by test_resources.py with a --capacity of its own.
            a += ["--capacity", TEST_CAPACITY]
        return a + self.extra_args

    def start(self, port=None, wait=True):
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("corrald already running")
        if port or self.port or not wait:
            return self._start(port, wait)
        # A port free_port() found may be taken by another process (a suite beside this one, a
        # client's connection) before corrald binds it: a first start takes another one then.
        for attempt in range(5):
            try:
                return self._start(free_port(), wait)
            except RuntimeError as e:
                if attempt == 4 or "Address already in use" not in str(e):
                    raise
                log("port %d was taken before corrald bound it; trying another" % self.port)
                self.port = None

    def _start(self, port, wait):
        self.port = port or self.port or free_port()
        logf = open(self.log_path, "ab")
        logf.write(("\n=== start %d: %s\n" % (self.starts, " ".join(self.argv(self.port)))).encode())
        logf.flush()
        env = dict(os.environ)
        env.pop("CORRAL_API_KEY", None)
        self.proc = subprocess.Popen(self.argv(self.port), stdout=logf, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        logf.close()
        self.starts += 1
        if self not in _live_daemons:
            _live_daemons.append(self)
        if wait:
            self.wait_healthy()
        return self

    def wait_healthy(self, timeout=20.0):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("corrald exited with %s during start-up:\n%s"
                                   % (self.proc.returncode, self.log_tail()))
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/health")
                r = c.getresponse()
                r.read()
                c.close()
                if r.status == 200 and listening(self.proc.pid, self.port):
                    return
                last = r.status if r.status != 200 else "200 from a process other than corrald"
            except OSError as e:
                last = e
            time.sleep(0.02)
        raise RuntimeError("corrald not healthy after %.0fs (last: %r):\n%s"
                           % (timeout, last, self.log_tail()))

    def stop(self, timeout=15.0):
        """SIGTERM and wait; SIGKILL if it does not exit in time. Returns the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log("corrald did not exit within %.0fs of SIGTERM; killing it" % timeout)
                self.proc.kill()
                self.proc.wait()
        if self in _live_daemons:
            _live_daemons.remove(self)
        return self.proc.returncode

    def kill9(self):
        self.proc.kill()
        self.proc.wait()
        if self in _live_daemons:
            _live_daemons.remove(self)

    def restart(self, port=None):
        self.stop()
        return self.start(port=port)

    def log_tail(self, n=60):
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
            return "\n".join(lines[-n:])
        except OSError:
            return "(no log)"

    # --- clients ---

    def client(self, api_key="__default__", timeout=60.0):
        key = self.api_key if api_key == "__default__" else api_key
        return Client("127.0.0.1", self.port, api_key=key, timeout=timeout)

    @property
    def base_url(self):
        return "http://127.0.0.1:%d" % self.port

    # --- sandbox paths ---

    def sandbox_dir(self, sid):
        return os.path.join(self.state_dir, "sandboxes", sid)

    def sandbox_cgroups(self, sid):
        return sandbox_cgroup_dirs(self.cgroup_name, sid)

    def cgroup_file(self, ctrl, sid, name):
        d = controller_dir(ctrl)
        if d is None:
            return None
        return os.path.join(d, self.cgroup_name, sid, name)

    def pid1(self, sid):
        """Host pid of the sandbox's PID 1, from <state>/sandboxes/<id>/pid."""
        with open(os.path.join(self.sandbox_dir(sid), "pid")) as f:
            return int(f.read().split()[0])

    # --- leaks ---

    def leaks(self):
        problems = []
        for d in suite_cgroup_dirs(self.cgroup_name):
            kids = cgroup_children(d)
            if kids:
                problems.append("cgroup %s still has children %s" % (d, kids))
        m = mounts_under(self.tmp)
        if m:
            problems.append("still mounted under %s: %s" % (self.tmp, m))
        if self.network is not None:
            problems += self.network_leftovers()
        return problems

    def network_leftovers(self):
        """Veths and per-sandbox nftables objects of this corrald's network still present."""
        problems = []
        out = subprocess.run(["ip", "-d", "-o", "link"], capture_output=True, text=True).stdout
        veths = [ln.split(":")[1].strip().split("@")[0] for ln in out.splitlines()
                 if "alias corral:%s:" % self.net_name in ln]
        if veths:
            problems.append("veths left: %s" % veths)
        out = subprocess.run(["nft", "list", "table", "inet", self.net_name],
                             capture_output=True, text=True).stdout
        objs = re.findall(r"(?:chain|set|counter) ((?:sb|l|d)_[0-9a-f_]{36})", out)
        if objs:
            problems.append("nftables objects left in inet %s: %s" % (self.net_name, objs))
        return problems

    def remove_network(self):
        """The bridge, tables and lock file corrald made (it leaves them for its next start): the
        name is this Corrald's own (unique), whether or not it had a lab."""
        _run_quiet(["ip", "link", "del", self.net_name])
        _run_quiet(["nft", "delete", "table", "inet", self.net_name])
        _run_quiet(["nft", "delete", "table", "bridge", self.net_name])
        try:
            os.unlink("/run/corral/%s.lock" % self.net_name)  # net.h NET_LOCK_DIR
        except OSError:
            pass

    def wait_no_leaks(self, timeout=30.0):
        deadline = time.monotonic() + timeout
        while True:
            p = self.leaks()
            if not p or time.monotonic() > deadline:
                return p
            time.sleep(0.1)

    def force_cleanup(self):
        for d in suite_cgroup_dirs(self.cgroup_name):
            force_remove_cgroup_tree(d)
        for mp in mounts_under(self.tmp):
            subprocess.call(["umount", "-l", mp], stderr=subprocess.DEVNULL)

    def emergency_cleanup(self):
        """Best effort, no assertions: delete every sandbox, stop corrald, remove leftovers."""
        if self in _unfinished:
            _unfinished.remove(self)
        if self.proc is not None and self.proc.poll() is None:
            try:
                c = self.client(timeout=5)
                for sid in c.all_sandbox_ids():
                    c.delete_sandbox(sid)
                c.close()
                self.wait_no_leaks(10)
            except Exception:  # noqa: BLE001
                pass
            self.stop(timeout=5)
        self.force_cleanup()
        self.remove_network()
        for d in suite_cgroup_dirs(self.cgroup_name):
            try:
                os.rmdir(d)
            except OSError:
                pass
        if not mounts_under(self.tmp) and not os.environ.get("CORRAL_TEST_KEEP"):
            safe_rmtree(self.tmp)

    def shutdown_and_check(self):
        """
        The end of a suite: wait for sandboxes deleted by the tests to be torn down, stop corrald,
        check for leaked cgroups and mounts (raising AssertionError if any), remove the suite's
        parent cgroups and temp dir.
        """
        problems = []
        if self in _unfinished:
            _unfinished.remove(self)
        if self.proc is not None and self.proc.poll() is None:
            c = self.client(timeout=10)
            try:
                left = c.all_sandbox_ids()
                if left:
                    problems.append("sandboxes still listed at the end of the suite: %s" % left)
            except Exception as e:
                problems.append("could not list sandboxes at the end: %r" % (e,))
            finally:
                c.close()
        leak = self.wait_no_leaks(30 if not problems else 5)
        rc = self.stop()
        if rc not in (0, None, -signal.SIGTERM):
            problems.append("corrald exited with status %s on SIGTERM:\n%s" % (rc, self.log_tail(30)))
        leak = self.wait_no_leaks(2)
        problems += leak
        if leak:
            self.force_cleanup()
        for d in suite_cgroup_dirs(self.cgroup_name):
            try:
                os.rmdir(d)
            except OSError as e:
                problems.append("cannot remove suite cgroup %s: %s" % (d, e))
        self.remove_network()
        try:
            if mounts_under(self.tmp):
                problems.append("mounts still present after cleanup; leaving %s" % self.tmp)
            elif os.environ.get("CORRAL_TEST_KEEP"):
                log("keeping", self.tmp)
            else:
                safe_rmtree(self.tmp)
        except Exception as e:
            problems.append("cleanup of %s failed: %r" % (self.tmp, e))
        if problems:
            raise AssertionError("leaks/cleanup problems:\n  " + "\n  ".join(problems))


# ---------------------------------------------------------------------------------------------
# unittest glue


class TmpfsStateCorrald(Corrald):
    """corrald whose --state-dir is a tmpfs of TMPFS_SIZE of its own: its free space moves only
    with this corrald, and a test may fill it."""
    TMPFS_SIZE = "48m"
    TMPFS_NAME = "corral-test-state"

    def __init__(self, **kw):
        super().__init__(**kw)
        subprocess.check_call(["mount", "-t", "tmpfs", "-o", "size=%s,mode=0700" % self.TMPFS_SIZE,
                               self.TMPFS_NAME, self.state_dir])
        self.state_mount = os.path.realpath(self.state_dir)
        self.closing = False

    def leaks(self):
        problems = [p for p in super().leaks() if not p.startswith("still mounted under ")]
        m = [x for x in mounts_under(self.tmp) if x != self.state_mount]
        if m:
            problems.append("still mounted under %s: %s" % (self.tmp, m))
        return problems

    def stop(self, timeout=15.0):
        rc = super().stop(timeout)
        if self.closing and mounts_under(self.state_mount) == [self.state_mount]:
            subprocess.call(["umount", self.state_mount])
        return rc

    def shutdown_and_check(self):
        self.closing = True
        return super().shutdown_and_check()


class CorralTestCase(unittest.TestCase):
    """One corrald per test class; self.client is a keep-alive client to it."""

    corrald_class = None  # a Corrald subclass, or None for Corrald
    corrald_kwargs = {}
    maxDiff = 4000

    @classmethod
    def setUpClass(cls):
        if not os.path.exists(binary("corrald")):
            raise RuntimeError("%s not built (ninja -C %s)" % (binary("corrald"), BUILD_DIR))
        cls.corrald = (cls.corrald_class or Corrald)(**cls.corrald_kwargs)
        try:
            cls.corrald.start()
        except Exception:
            try:
                cls.corrald.shutdown_and_check()
            except Exception as e:
                log("cleanup after failed start:", e)
            raise
        cls.client = cls.corrald.client()

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.corrald.shutdown_and_check()

    def setUp(self):
        if self.corrald.proc is None or self.corrald.proc.poll() is not None:
            self.fail("corrald is not running (exit %s):\n%s"
                      % (self.corrald.proc.returncode if self.corrald.proc else None,
                         self.corrald.log_tail()))

    # --- helpers ---

    def create(self, client=None, expect=202, **spec):
        """Create a sandbox (asserting the status), and register its deletion as a cleanup."""
        c = client or self.client
        r = c.create_sandbox_raw(**spec)
        if r.status == 202:
            sid = r.json()["id"]
            self.addCleanup(self._cleanup_sandbox, sid)
        self.assertEqual(r.status, expect, "create %r -> %r\n%s" % (spec, r, self.corrald.log_tail(15)))
        return r.json()

    def _cleanup_sandbox(self, sid):
        if self.corrald.proc is None or self.corrald.proc.poll() is not None:
            return
        c = self.corrald.client(timeout=30)
        try:
            r = c.delete_sandbox(sid)
            if r.status not in (204, 404):
                log("cleanup delete %s -> %r" % (sid, r))
        finally:
            c.close()

    def run_ok(self, sid, cmd, client=None, **opts):
        """Run and assert exit 0; returns the result."""
        res = (client or self.client).run(sid, cmd, **opts)
        self.assertEqual(res.http_status, 200, "%r: %r" % (cmd, res))
        self.assertEqual(res.exit_code, 0, "%r: %r stderr=%r" % (cmd, res, res.stderr))
        return res

    def sh(self, sid, cmd, **opts):
        """Run and return stdout as a string, asserting success."""
        return self.run_ok(sid, cmd, **opts).stdout

    def wait_until(self, pred, timeout=10.0, interval=0.05, msg="condition"):
        deadline = time.monotonic() + timeout
        while True:
            v = pred()
            if v:
                return v
            if time.monotonic() > deadline:
                self.fail("timed out after %.1fs waiting for %s" % (timeout, msg))
            time.sleep(interval)

    def wait_gone(self, sid, timeout=20.0):
        """Wait until GET returns 404 and the sandbox's cgroups, mounts and directory are gone."""
        self.wait_until(lambda: self.client.get_sandbox(sid).status == 404, timeout,
                        msg="sandbox %s to 404" % sid)
        self.wait_until(lambda: not self.corrald.sandbox_cgroups(sid), timeout,
                        msg="cgroups of %s to be removed (%s)" % (sid, self.corrald.sandbox_cgroups(sid)))
        self.wait_until(lambda: not mounts_under(self.corrald.sandbox_dir(sid)), timeout,
                        msg="mounts of %s to be removed" % sid)
        # the teardown's last step (what it held, named volumes' users included, goes with it)
        self.wait_until(lambda: not os.path.exists(self.corrald.sandbox_dir(sid)), timeout,
                        msg="the directory of %s to be removed" % sid)


def main():
    unittest.main(verbosity=2)
