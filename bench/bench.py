#!/usr/bin/env python3
"""
corral benchmark: corrald against local anchors measured in the same run on the same machine.

  sudo bench/setup.sh            # bubblewrap, crun, runc, busybox-static from Debian
  python3 bench/bench.py         # prints a table; --json FILE also writes the raw numbers

No pass/fail: the numbers and the ratios are printed, nothing is asserted. See bench/README.md.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(SOURCE_DIR, "tests", "integration"))
import harness  # noqa: E402

SPEC = {"resourceLimits": {"cpu": "1", "memory": "256Mi"},
        "resourceRequests": {"cpu": "10m", "memory": "16Mi"}}


def pct(xs, p):
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(round(p / 100.0 * len(s) + 0.5)) - 1))
    return s[k]


def ms(x):
    return x * 1000.0


def time_cmd(argv, n, warmup=2, check=True, **kw):
    """Wall time of running argv to completion, n times (after warm-up runs)."""
    out = []
    for i in range(warmup + n):
        t0 = time.perf_counter()
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, **kw)
        dt = time.perf_counter() - t0
        if r.returncode != 0:
            if check:
                raise RuntimeError("%s -> %d: %s" % (" ".join(argv), r.returncode,
                                                     r.stderr.decode(errors="replace")[:300]))
            return None
        if i >= warmup:
            out.append(dt)
    return out


# ---------------------------------------------------------------------------------------------
# anchors


def make_bundle(tmp, args):
    """A minimal OCI bundle: busybox-static in a read-only rootfs, no terminal."""
    busybox = shutil.which("busybox") or "/bin/busybox"
    b = os.path.join(tmp, "bundle")
    os.makedirs(os.path.join(b, "rootfs", "bin"), exist_ok=True)
    shutil.copy(busybox, os.path.join(b, "rootfs", "bin", "busybox"))
    for x in ("sh", "true", "sleep"):
        p = os.path.join(b, "rootfs", "bin", x)
        if not os.path.lexists(p):
            os.symlink("busybox", p)
    if not os.path.exists(os.path.join(b, "config.json")):
        subprocess.run(["runc", "spec", "--bundle", b], check=True)
    with open(os.path.join(b, "config.json")) as f:
        c = json.load(f)
    c["process"]["terminal"] = False
    c["process"]["args"] = args
    c["root"]["readonly"] = True
    with open(os.path.join(b, "config.json"), "w") as f:
        json.dump(c, f)
    return b


def oci_anchor(tool, tmp, n):
    """'<tool> run' of /bin/true, and '<tool> exec' of /bin/true into a running container."""
    res = {}
    b = make_bundle(tmp, ["/bin/true"])
    name = "corral-bench-%s-%d" % (tool, os.getpid())
    runs = []
    for i in range(n + 2):
        t0 = time.perf_counter()
        r = subprocess.run([tool, "run", "--bundle", b, "%s-%d" % (name, i)], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        dt = time.perf_counter() - t0
        if r.returncode != 0:
            raise RuntimeError("%s run: %s" % (tool, r.stderr.decode(errors="replace")[:300]))
        subprocess.run([tool, "delete", "-f", "%s-%d" % (name, i)], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        if i >= 2:
            runs.append(dt)
    res["run"] = runs
    b = make_bundle(tmp, ["/bin/sleep", "3600"])
    cid = name + "-exec"
    # the detached container inherits stdio: never give it a pipe we wait on
    with tempfile.TemporaryFile() as errf:
        r = subprocess.run([tool, "run", "-d", "--bundle", b, cid], stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=errf)
        if r.returncode != 0:
            errf.seek(0)
            raise RuntimeError("%s run -d: %s" % (tool, errf.read().decode(errors="replace")[:300]))
    try:
        res["exec"] = time_cmd([tool, "exec", cid, "/bin/true"], n)
    finally:
        subprocess.run([tool, "kill", cid, "KILL"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.2)
        subprocess.run([tool, "delete", "-f", cid], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return res


def crun_child(n):
    """Runs inside 'unshare -m': crun refuses cgroup v1 hybrid mode, so hide the v2 mount."""
    subprocess.run(["umount", "/sys/fs/cgroup/unified"], stderr=subprocess.DEVNULL)
    tmp = tempfile.mkdtemp(prefix="corral-bench-crun-")
    try:
        print(json.dumps(oci_anchor("crun", tmp, n)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def anchors(n, sandbox_pid, notes):
    a = {}
    a["spawn /bin/true"] = time_cmd(["/bin/true"], n)
    a["unshare -mpuif true"] = time_cmd(["unshare", "--fork", "--pid", "--mount", "--uts", "--ipc",
                                         "--mount-proc", "true"], n, check=False)
    a["unshare -mpuinf true"] = time_cmd(["unshare", "--fork", "--pid", "--mount", "--net", "--uts", "--ipc",
                                          "--mount-proc", "true"], n, check=False)
    if shutil.which("bwrap"):
        a["bwrap true"] = time_cmd(["bwrap", "--ro-bind", "/", "/", "--unshare-all", "--dev", "/dev",
                                    "--proc", "/proc", "true"], n, check=False)
    else:
        notes.append("bwrap not installed (bench/setup.sh)")
    if sandbox_pid:
        a["nsenter exec"] = time_cmd(["nsenter", "-t", str(sandbox_pid), "-m", "-p", "-u", "-i", "-n",
                                      "true"], n, check=False)
    tmp = tempfile.mkdtemp(prefix="corral-bench-")
    try:
        if shutil.which("runc"):
            try:
                r = oci_anchor("runc", tmp, n)
                a["runc run"], a["runc exec"] = r["run"], r["exec"]
            except Exception as e:  # noqa: BLE001
                notes.append("runc: %s" % e)
        else:
            notes.append("runc not installed (bench/setup.sh)")
        if shutil.which("crun"):
            r = subprocess.run(["unshare", "-m", "--propagation", "private", sys.executable,
                                os.path.abspath(__file__), "--crun-child", str(n)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            if r.returncode == 0:
                j = json.loads(r.stdout.decode().strip().splitlines()[-1])
                a["crun run"], a["crun exec"] = j["run"], j["exec"]
            else:
                notes.append("crun: %s" % r.stderr.decode(errors="replace")[-300:])
        else:
            notes.append("crun not installed (bench/setup.sh)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return {k: v for k, v in a.items() if v}


# ---------------------------------------------------------------------------------------------
# corrald


def meminfo_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


class BuildCorrald(harness.Corrald):
    """A corrald of another build (its own corral-execd beside it), with extra flags."""

    def __init__(self, build_dir, extra_args=None):
        super().__init__(extra_args=extra_args)
        self.build_dir = build_dir

    def argv(self, port):
        a = super().argv(port)
        a[0] = os.path.join(self.build_dir, "corrald")
        # a build from before sandbox networking has none of its flags (and no network)
        helptext = subprocess.run([a[0], "--help"], capture_output=True, text=True).stdout
        for flag in ("--sandbox-subnet", "--network-name", "--egress-uplink", "--dns-upstream"):
            while flag not in helptext and flag in a:
                i = a.index(flag)
                del a[i:i + 2]
        return a


def create_first_command(c):
    t0 = time.perf_counter()
    r = c.create_sandbox_raw(**SPEC)
    if r.status != 202:
        raise RuntimeError("create failed: %r" % r)
    sid = r.json()["id"]
    res = c.run(sid, "true")
    dt = time.perf_counter() - t0
    if res.exit_code != 0:
        raise RuntimeError("first command failed: %r" % res)
    c.delete_sandbox(sid)
    return dt


def bench_variants(args, notes):
    """create -> first command of this build against other corralds (--baseline BUILD, and this
    build with --no-userns), interleaved in rounds of 5 so machine noise hits all alike."""
    variants = [("this build", harness.Corrald())]
    if args.baseline:
        # Only the capacity keys every build knows (cpu, memory).
        variants.append(("baseline %s" % args.baseline,
                         BuildCorrald(args.baseline,
                                      extra_args=["--capacity", "cpu=100000,memory=100Ti"])))
    variants.append(("this build, --no-userns", harness.Corrald(extra_args=["--no-userns"])))
    out = {name: [] for name, _ in variants}
    started = []
    try:
        clients = []
        for name, d in variants:
            d.start()
            started.append(d)
            clients.append((name, d.client()))
        for name, c in clients:
            for _ in range(3):
                create_first_command(c)  # warm-up
        for _ in range(max(1, args.n // 5)):
            for name, c in clients:
                for _ in range(5):
                    out[name].append(create_first_command(c))
    finally:
        for d in started:
            try:
                d.shutdown_and_check()
            except AssertionError as e:
                notes.append("variants: %s" % e)
    return out


def bench_corrald(args, notes):
    d = harness.Corrald()
    d.start()
    out = {}
    try:
        c = d.client()
        # warm-up
        for _ in range(3):
            r = c.create_sandbox_raw(**SPEC)
            sid = r.json()["id"]
            c.run(sid, "true")
            c.delete_sandbox(sid)

        # Half the anchor samples now, half after the corral measurements, so that load from
        # other work on a shared machine skews both sides alike (nsenter comes later: it needs a
        # live sandbox).
        first_half = anchors(max(1, args.anchor_iters // 2), None, notes)

        # create -> first command done, sequential
        create_only, first_cmd = [], []
        for i in range(args.n):
            t0 = time.perf_counter()
            r = c.create_sandbox_raw(**SPEC)
            t1 = time.perf_counter()
            if r.status != 202:
                raise RuntimeError("create failed: %r" % r)
            sid = r.json()["id"]
            res = c.run(sid, "true")
            t2 = time.perf_counter()
            if res.exit_code != 0:
                raise RuntimeError("first command failed: %r" % res)
            create_only.append(t1 - t0)
            first_cmd.append(t2 - t0)
            c.delete_sandbox(sid)
        out["create"] = create_only
        out["create+first command"] = first_cmd

        # command round trip on one keep-alive connection
        r = c.create_sandbox_raw(**SPEC)
        sid = r.json()["id"]
        for _ in range(10):
            c.run(sid, "true")
        rtt = []
        for _ in range(args.rtt):
            t0 = time.perf_counter()
            res = c.run(sid, "true")
            rtt.append(time.perf_counter() - t0)
            if res.exit_code != 0:
                raise RuntimeError("command failed: %r" % res)
        out["command rtt"] = rtt
        ping = []
        for _ in range(args.rtt):
            t0 = time.perf_counter()
            r2 = c.get("/sandboxes/%s/proxy/44772/ping" % sid)
            ping.append(time.perf_counter() - t0)
        out["proxy ping rtt"] = ping
        health = []
        for _ in range(args.rtt):
            t0 = time.perf_counter()
            c.get("/health")
            health.append(time.perf_counter() - t0)
        out["GET /health rtt"] = health
        if c.connects != 1:
            notes.append("keep-alive: %d connections were opened for the round trips" % c.connects)
        try:
            out["_sandbox_pid"] = d.pid1(sid)
        except OSError:
            out["_sandbox_pid"] = None
        out["_sid"] = sid

        # background completion seen by the client: long-poll status (?wait=S, corral extension)
        bgl = []
        for _ in range(args.bg):
            res = c.run(sid, "sleep 0.05", background=True)
            r2 = c.get("/sandboxes/%s/proxy/44772/command/status/%s?wait=5" % (sid, res.init_id))
            t_seen = time.time()
            j = r2.json()
            if r2.status != 200 or j.get("running") or "finished_at" not in j:
                notes.append("long-poll status did not return a finished command: %r" % r2)
                break
            bgl.append(t_seen - harness.parse_time(j["finished_at"]).timestamp())
        out["bg completion seen"] = bgl

        # control-plane throughput with wrk (corrald on CPU0, wrk on CPU1)
        if shutil.which("wrk") and shutil.which("taskset") and (os.cpu_count() or 1) >= 2:
            subprocess.run(["taskset", "-pc", "0", str(d.proc.pid)], stdout=subprocess.DEVNULL)
            for label, path in (("GET /health", "/health"), ("GET /v1/sandboxes/{id}", "/v1/sandboxes/" + sid)):
                w = subprocess.run(["taskset", "-c", "1", "wrk", "-t1", "-c16", "-d%ds" % args.wrk_secs,
                                    d.base_url + path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                txt = w.stdout.decode(errors="replace")
                m = re.search(r"Requests/sec:\s+([\d.]+)", txt)
                non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", txt)
                if m:
                    out["_wrk " + label] = (float(m.group(1)), int(non2xx.group(1)) if non2xx else 0)
                else:
                    notes.append("wrk %s: %s" % (label, txt[-200:]))
            subprocess.run(["taskset", "-pc", "0-%d" % (os.cpu_count() - 1), str(d.proc.pid)],
                           stdout=subprocess.DEVNULL)
        else:
            notes.append("wrk/taskset not available: no req/s figure (bench/setup.sh installs wrk)")

        # burst: args.burst creates fired at once, one connection each
        time.sleep(1)
        mem_before = meminfo_available()
        n = args.burst
        barrier = threading.Barrier(n)
        lat = [None] * n
        ids = [None] * n
        errs = []

        def worker(i):
            cc = d.client(timeout=300)
            try:
                barrier.wait(60)
                t0 = time.perf_counter()
                rr = cc.create_sandbox_raw(**SPEC)
                lat[i] = time.perf_counter() - t0
                if rr.status == 202:
                    ids[i] = rr.json()["id"]
                else:
                    errs.append("%d: %r" % (rr.status, rr.body[:200]))
            except Exception as e:  # noqa: BLE001
                errs.append(repr(e))
            finally:
                cc.close()
        ths = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
        t0 = time.perf_counter()
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        out["_burst_wall"] = time.perf_counter() - t0
        out["burst create"] = [x for x in lat if x is not None]
        out["_burst_failures"] = errs
        out["_burst_ok"] = sum(1 for x in ids if x)
        time.sleep(2)
        if out["_burst_ok"]:
            out["_mem_per_sandbox"] = (mem_before - meminfo_available()) / out["_burst_ok"]
        # run the nsenter anchor while a sandbox is alive, then clean up
        second_half = anchors(args.anchor_iters - args.anchor_iters // 2, out["_sandbox_pid"], notes)
        merged = dict(second_half)
        for k, v in first_half.items():
            merged[k] = v + merged.get(k, [])
        out["_anchors"] = merged
        for x in ids:
            if x:
                c.delete_sandbox(x)
        c.delete_sandbox(sid)
        c.close()
        leaks = d.wait_no_leaks(60)
        if leaks:
            notes.append("leaks after the run: %s" % leaks)
    finally:
        try:
            d.shutdown_and_check()
        except AssertionError as e:
            notes.append(str(e))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=50, help="sequential sandboxes (create -> first command)")
    ap.add_argument("--rtt", type=int, default=300, help="command round trips on one connection")
    ap.add_argument("--burst", type=int, default=100, help="creates fired at once")
    ap.add_argument("--anchor-iters", type=int, default=30, help="iterations per anchor")
    ap.add_argument("--bg", type=int, default=30, help="background commands timed to completion")
    ap.add_argument("--wrk-secs", type=int, default=3, help="seconds per wrk run")
    ap.add_argument("--json", help="also write the raw numbers (seconds) to this file")
    ap.add_argument("--baseline", metavar="BUILD_DIR",
                    help="also time create -> first command of the corrald in BUILD_DIR (e.g. a "
                         "build of main), interleaved with this build's, and print the ratio")
    ap.add_argument("--variants-only", action="store_true",
                    help="only the interleaved create -> first command comparison")
    ap.add_argument("--crun-child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.crun_child is not None:
        crun_child(args.crun_child)
        return
    if os.geteuid() != 0:
        sys.exit("bench.py needs root (namespaces, cgroups, the anchors)")
    if not os.path.exists(harness.binary("corrald")):
        sys.exit("%s is not built: make (or ninja -C build)" % harness.binary("corrald"))

    notes = []
    t_start = time.time()
    v = bench_variants(args, notes)
    base = pct(v["this build"], 50)
    print("\ncreate -> first command, interleaved in rounds of 5 (%s)" % time.strftime("%H:%M:%S"))
    for name, xs in v.items():
        print("  %-44s n=%-4d p50 %7.2f ms  p95 %7.2f ms  this build / it = %.2fx"
              % (name, len(xs), ms(pct(xs, 50)), ms(pct(xs, 95)), base / pct(xs, 50)))
    if args.variants_only:
        return
    c = bench_corrald(args, notes)
    a = c.pop("_anchors")

    def p50(xs):
        return ms(pct(xs, 50))

    def p95(xs):
        return ms(pct(xs, 95))

    rows = []

    def row(name, xs, ref=None):
        if not xs:
            return
        rows.append((name, len(xs), p50(xs), p95(xs), ref))

    print("\ncorral bench  (%s, %d cores, kernel %s)\n" % (time.strftime("%Y-%m-%d %H:%M:%S"),
                                                          os.cpu_count(), os.uname().release))
    print("%-34s %6s %10s %10s   %s" % ("measure", "n", "p50 ms", "p95 ms", "ratio to anchors (p50)"))
    print("-" * 100)

    def ratio_text(v, refs):
        parts = []
        for label, ref in refs:
            if ref:
                r = v / ref
                parts.append(("%.2fx %s" if r >= 0.1 else "%.4fx %s") % (r, label))
        return ", ".join(parts)

    def ap50(k):
        return p50(a[k]) if k in a else None

    runc_pair = ap50("runc run") + ap50("runc exec") if "runc run" in a and "runc exec" in a else None
    crun_pair = ap50("crun run") + ap50("crun exec") if "crun run" in a and "crun exec" in a else None
    first = c["create+first command"]
    lines = [
        ("corral create -> first command", first,
         [("bwrap", ap50("bwrap true")), ("crun run", ap50("crun run")), ("runc run", ap50("runc run")),
          ("runc run+exec", runc_pair), ("crun run+exec", crun_pair)]),
        ("corral create (202 Running)", c["create"],
         [("unshare -n", ap50("unshare -mpuinf true")), ("crun run", ap50("crun run"))]),
        ("corral command rtt (proxy, k-a)", c["command rtt"],
         [("nsenter", ap50("nsenter exec")), ("crun exec", ap50("crun exec")), ("runc exec", ap50("runc exec"))]),
        ("corral proxy GET /ping rtt", c["proxy ping rtt"], []),
        ("corrald GET /health rtt", c["GET /health rtt"], []),
        ("corral burst create (%d at once)" % args.burst, c["burst create"],
         [("sequential create", p50(c["create"]))]),
        ("bg command exit -> client sees it", c.get("bg completion seen", []),
         [("OpenSandbox 1 s poll floor", 1000.0)]),
    ]
    for name, xs, refs in lines:
        if not xs:
            continue
        print("%-34s %6d %10.2f %10.2f   %s" % (name, len(xs), p50(xs), p95(xs), ratio_text(p50(xs), refs)))
    print("-" * 100)
    for k in ("spawn /bin/true", "unshare -mpuif true", "unshare -mpuinf true", "bwrap true", "nsenter exec",
              "crun run", "crun exec", "runc run", "runc exec"):
        if k in a:
            print("%-34s %6d %10.2f %10.2f   %s" % ("anchor: " + k, len(a[k]), p50(a[k]), p95(a[k]),
                                                   "(local anchor)"))
    print("-" * 100)
    bl = c["burst create"] or [float("nan")]
    print("burst: %d/%d created, %d failures, wall %.2f s (%.0f creates/s); latency min %.0f / p50 %.0f / "
          "max %.0f ms; burst p50 / sequential p50 = %.2f"
          % (c["_burst_ok"], args.burst, len(c["_burst_failures"]), c["_burst_wall"],
             c["_burst_ok"] / c["_burst_wall"], ms(min(bl)), ms(pct(bl, 50)), ms(max(bl)),
             pct(bl, 50) / pct(c["create"], 50)))
    for e in c["_burst_failures"][:5]:
        print("  burst failure:", e)
    if "_mem_per_sandbox" in c:
        print("host memory per idle sandbox (MemAvailable drop over the burst's sandboxes): %.2f MiB"
              % (c["_mem_per_sandbox"] / 1048576.0))
    for k in sorted(k for k in c if k.startswith("_wrk ")):
        rps, bad = c[k]
        print("corrald %s, wrk -t1 -c16 (corrald on CPU0, wrk on CPU1): %.0f req/s%s"
              % (k[5:], rps, (", %d non-2xx" % bad) if bad else ""))
    for n in notes:
        print("note:", n)
    print("(anchors are timed from Python's subprocess, which adds the cost of one fork+exec, "
          "see 'spawn /bin/true'; corral numbers are HTTP round trips from the same process)")
    print("total bench time %.1f s" % (time.time() - t_start))
    if args.json:
        raw = {"corral": {k: v for k, v in c.items() if not k.startswith("_")},
               "anchors": a, "burst_failures": c["_burst_failures"], "notes": notes}
        with open(args.json, "w") as f:
            json.dump(raw, f, indent=1)


if __name__ == "__main__":
    main()
