#!/usr/bin/env python3
"""
Registry images against local anchors, measured in the same run (docs/images.md):

  python3 bench/images.py [--n 30] [--burst 50] [--cold 12 [--baseline-build DIR]] [--large-mb 500]

  1. create -> first command from a cached 10-layer registry image vs from `host`, interleaved
     (p50 of each and the ratio; the issue's target is within 1.1x);
  2. a burst of creates of one cold image at once (one pull; wall time, p50/max per create);
  3. with --cold N: create -> first command of N distinct cold 10-layer images (each a pull of
     ten small layers: what the per-layer work costs, confinement included), p50;
     With --baseline-build DIR, the same cold images are also pulled (POST /v1/images) by a
     second corrald built in DIR, in pairs, the order alternating: p50 of each and of the ratios;
  4. with --large-mb: cold pull + unpack of a multi-layer image of that many MB (uncompressed,
     incompressible) from the local registry in MB/s, beside `skopeo copy` to a directory plus
     `tar -x` of the same layers.

Needs root, docker-registry and skopeo (scripts/bootstrap.sh). No pass/fail: prints numbers.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "integration"))
import harness  # noqa: E402
import oci  # noqa: E402
from oci import F  # noqa: E402

SPEC = {"resourceLimits": {"cpu": "1", "memory": "256Mi"},
        "resourceRequests": {"cpu": "10m", "memory": "16Mi"}}


def create_first_command(cl, uri):
    t0 = time.perf_counter()
    r = cl.create_sandbox_raw(image={"uri": uri}, **SPEC)
    if r.status != 202:
        raise RuntimeError("create %s: %r" % (uri, r))
    sid = r.json()["id"]
    res = cl.run(sid, "true")
    dt = time.perf_counter() - t0
    if res.exit_code != 0:
        raise RuntimeError("first command: %r" % res)
    cl.delete_sandbox(sid)
    return dt


def pull_ahead(cl, uri):
    t0 = time.perf_counter()
    r = cl.post("/v1/images", {"image": {"uri": uri}})
    if r.status != 200:
        raise RuntimeError("pull %s: %r" % (uri, r))
    return time.perf_counter() - t0


def cold_pulls_dir(args, tmp, reg, base, tag):
    refs = []
    for k in range(args.cold):
        d = os.path.join(tmp, "%s%d" % (tag, k))
        oci.write_layout(d, [base] + [oci.layer_tar([F("%s%d/l%d" % (tag, k, i), "z" * i)])
                                      for i in range(1, 10)])
        refs.append(reg.push(d, "bench/%s%d" % (tag, k)))
    return refs


def cold_pairs(args, c, reg, tmp, base):
    """Cold pulls of the same images by this build's corrald and a baseline build's, in pairs."""
    saved = harness.BUILD_DIR
    harness.BUILD_DIR = os.path.abspath(args.baseline_build)
    b = harness.Corrald(extra_args=["--insecure-registry", reg.host])
    try:
        b.start()
    finally:
        harness.BUILD_DIR = saved
    try:
        refs = cold_pulls_dir(args, tmp, reg, base, "pair")
        ca, cb = c.client(timeout=300), b.client(timeout=300)
        pull_ahead(ca, cold_pulls_dir(args, tmp, reg, base, "warm")[0])  # each worker's first
        pull_ahead(cb, "%s/bench/warm0:latest" % reg.host)
        this, other, ratios = [], [], []
        for k, ref in enumerate(refs):
            if k % 2:
                tb = pull_ahead(cb, ref)
                ta = pull_ahead(ca, ref)
            else:
                ta = pull_ahead(ca, ref)
                tb = pull_ahead(cb, ref)
            this.append(ta)
            other.append(tb)
            ratios.append(ta / tb)
        print("cold pull of %d 10-layer images (POST /v1/images), pairs: this build p50 %.1f ms, "
              "baseline p50 %.1f ms, ratio p50 %.2fx (min %.2fx, max %.2fx)"
              % (args.cold, statistics.median(this) * 1000, statistics.median(other) * 1000,
                 statistics.median(ratios), min(ratios), max(ratios)))
    finally:
        b.shutdown_and_check()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=30, help="create -> first command pairs")
    ap.add_argument("--burst", type=int, default=50, help="creates of one cold image at once")
    ap.add_argument("--large-mb", type=int, default=0, help="size of the cold-pull image (0: skip)")
    ap.add_argument("--cold", type=int, default=0, help="distinct cold 10-layer images (0: skip)")
    ap.add_argument("--baseline-build", default=None,
                    help="a build dir of another corrald to pull the --cold images beside")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="corral-bench-images-")
    reg = oci.Registry()
    c = harness.Corrald(extra_args=["--insecure-registry", reg.host])
    try:
        base = oci.base_layer()
        layers = [base] + [oci.layer_tar([F("layer%d/file" % i, "x" * 1000 * i)])
                           for i in range(1, 10)]
        d = os.path.join(tmp, "ten")
        oci.write_layout(d, layers)
        ref = reg.push(d, "bench/ten")
        c.start()
        cl = c.client(timeout=300)

        t0 = time.perf_counter()
        create_first_command(cl, ref)
        cold = time.perf_counter() - t0
        img, host = [], []
        for _ in range(2):  # warm-up
            create_first_command(cl, ref)
            create_first_command(cl, "host")
        for _ in range(args.n):
            img.append(create_first_command(cl, ref))
            host.append(create_first_command(cl, "host"))
        pi, ph = statistics.median(img), statistics.median(host)
        print("create -> first command, p50 of %d each (interleaved):" % args.n)
        print("  host                      %7.1f ms" % (ph * 1000))
        print("  cached 10-layer image     %7.1f ms   ratio %.2fx" % (pi * 1000, pi / ph))
        print("  first create (cold pull)  %7.1f ms" % (cold * 1000))

        if args.cold:
            refs = []
            for k in range(args.cold):
                d = os.path.join(tmp, "cold%d" % k)
                oci.write_layout(d, [base] + [oci.layer_tar([F("c%d/l%d" % (k, i), "y" * i)])
                                              for i in range(1, 10)])
                refs.append(reg.push(d, "bench/cold%d" % k))
            colds = [create_first_command(cl, r) for r in refs]
            print("create -> first command of %d cold 10-layer images: p50 %.1f ms, min %.1f ms"
                  % (args.cold, statistics.median(colds) * 1000, min(colds) * 1000))
            if args.baseline_build:
                cold_pairs(args, c, reg, tmp, base)

        if args.burst:
            d = os.path.join(tmp, "burst")
            oci.write_layout(d, [base, oci.layer_tar([F("burst", "b")])])
            bref = reg.push(d, "bench/burst")
            times, errs = [], []

            def one():
                cc = c.client(timeout=300)
                t = time.perf_counter()
                r = cc.create_sandbox_raw(image={"uri": bref}, **SPEC)
                times.append(time.perf_counter() - t)
                if r.status != 202:
                    errs.append(r)
                else:
                    cc.delete_sandbox(r.json()["id"])
                cc.close()
            before = c.log_tail(100000).count("pulling %s" % bref)
            t0 = time.perf_counter()
            ts = [threading.Thread(target=one) for _ in range(args.burst)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            wall = time.perf_counter() - t0
            pulls = c.log_tail(100000).count("pulling %s" % bref) - before
            print("%d creates of one cold image at once: wall %.2f s, create p50 %.0f ms, "
                  "max %.0f ms, %d failed, %d pull(s)"
                  % (args.burst, wall, statistics.median(times) * 1000, max(times) * 1000,
                     len(errs), pulls))

        if args.large_mb:
            n_layers = 5
            per = args.large_mb * 1024 * 1024 // n_layers
            big = [oci.layer_tar([F("big%d/blob" % i, os.urandom(per))]) for i in range(n_layers)]
            d = os.path.join(tmp, "large")
            oci.write_layout(d, [base] + [(b, "gzip") for b in big])
            del big
            lref = reg.push(d, "bench/large")
            mb = args.large_mb + len(base) / 1e6
            t0 = time.perf_counter()
            r = cl.create_sandbox_raw(image={"uri": lref}, **SPEC)
            pull = time.perf_counter() - t0
            if r.status == 202:
                cl.delete_sandbox(r.json()["id"])
            else:
                print("large create failed: %r" % r)
            # anchor: skopeo copy to a dir (download + digest check) then tar -x of each layer
            out = os.path.join(tmp, "skopeo-dir")
            root = os.path.join(tmp, "untar")
            os.makedirs(root)
            t0 = time.perf_counter()
            subprocess.run([oci.SKOPEO, "--insecure-policy", "copy", "-q", "--src-tls-verify=false",
                            "docker://%s" % lref, "dir:%s" % out], check=True)
            import json
            with open(os.path.join(out, "manifest.json")) as f:
                man = json.load(f)
            for l in man["layers"]:
                subprocess.run(["tar", "-xzf", os.path.join(out, l["digest"][7:]), "-C", root],
                               check=True)
            anchor = time.perf_counter() - t0
            print("cold pull + unpack of %.0f MB (%d layers): corrald %.1f MB/s (%.2f s, "
                  "includes the create), skopeo copy + tar -x %.1f MB/s (%.2f s)"
                  % (mb, n_layers + 1, mb / pull, pull, mb / anchor, anchor))
        cl.close()
    finally:
        c.shutdown_and_check()
        reg.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
